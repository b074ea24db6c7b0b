/* sluice — timeout queues.
 *
 * Every timeout of a kind has the same length (a listener's idle_timeout, its
 * connect_timeout, the lingering close), so a doubly linked list kept in
 * order of last activity is a complete timer: touching a node moves it to
 * the tail, and the expired nodes are always at the head. One timer per
 * process, armed at the earliest head's deadline, replaces a timer per
 * connection (saving 152 bytes and a heap operation per activity). Times
 * are loop milliseconds passed in (<now>).
 *
 * The earliest deadline of a queue is its head's: touching a node never
 * makes it earlier (the node goes last, the next head was touched later),
 * removing one neither. Only a node entering an empty queue brings a
 * deadline the process's timer may not be armed for: <on_first> says so. */
#ifndef SL_CORE_TQ_H
#define SL_CORE_TQ_H

#include <stddef.h>
#include <stdint.h>

struct sl_tq_node {
    struct sl_tq_node *prev, *next; /* neighbours in the queue, NULL at the ends */
    struct sl_tq      *q;           /* queue this node is in, NULL if none */
    uint64_t           at;          /* loop time (ms) of the last touch */
};

struct sl_tq {
    struct sl_tq_node *head;        /* least recently touched */
    struct sl_tq_node *tail;        /* most recently touched */
    size_t             n;           /* nodes in the queue */
    void             (*on_first)(void *arg); /* or NULL: a node entered the empty queue */
    void              *arg;
};

/* Moves <node> (in any queue or none) to the tail of <q>, stamped <now>. */
void sl_tq_touch(struct sl_tq *q, struct sl_tq_node *node, uint64_t now);

/* Takes <node> out of its queue, if any. */
void sl_tq_remove(struct sl_tq_node *node);

/* When the head of <q> expires under <timeout>: its touch plus <timeout>
 * (sl_tq_expired returns it from then on); UINT64_MAX when <q> is empty. */
uint64_t sl_tq_due(const struct sl_tq *q, uint64_t timeout);

/* How long a timer started at loop time <now> waits for deadline <due>:
 * 0 when it is past (a timer of 0 runs at the loop's next turn). */
uint64_t sl_tq_delay(uint64_t now, uint64_t due);

/* Returns the head of <q> if it was touched at or before <now> - <timeout>,
 * else NULL. The caller removes or touches it before asking again. */
struct sl_tq_node *sl_tq_expired(const struct sl_tq *q, uint64_t now, uint64_t timeout);

#endif

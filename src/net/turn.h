/* sluice — the loop's turn: work deferred to its end, and its clock.
 *
 * End-of-turn work: an object that has something to do once the current
 * loop turn's callbacks are over (a session whose verdicts landed, a TLS
 * engine that may hold plaintext, an output buffer holding bytes) embeds a
 * struct sl_turn_node and registers it; sl_turn_run() calls each
 * registered node's function once, in registration order, from the end of
 * the turn (the server's prepare and check handles, listener.c). A node
 * registered again before its run is not added twice; a node registered
 * while the run is under way (by a function the run called, or again by
 * its own function) runs in that same run, after the ones before it, so
 * the run ends only when nothing is left to do. An object being freed
 * calls sl_turn_forget() first.
 *
 * The turn's clock: sl_turn_now_us() reads the server's clock once per
 * turn (the first call after the previous turn's end) and answers the same
 * value until the turn ends, so every room of a turn (timeouts, waits, the
 * limiter, meters) sees one coherent "now". Time-dependent logic still
 * takes `now` as an argument; this is only where the loop gets it from. */
#ifndef SL_NET_TURN_H
#define SL_NET_TURN_H

#include <stdint.h>

#include "core/clock.h"

struct sl_turn_node;
typedef void (*sl_turn_fn)(struct sl_turn_node *n);

struct sl_turn_node {
    sl_turn_fn fn;  /* what to do at the turn's end (set by sl_turn_later) */
    uint32_t   at;  /* 1 + its place in the turn's list; 0 when not registered */
};

/* Registers <n> to run <fn> at the end of the turn (once, however often it is
 * asked). Returns 0, or -1 when out of memory (nothing registered: the
 * caller does the work at once). */
int sl_turn_later(struct sl_turn_node *n, sl_turn_fn fn);

/* 1 when <n> is registered for this turn's end. */
static inline int sl_turn_pending(const struct sl_turn_node *n)
{
    return n->at != 0;
}

/* <n>'s object goes away (or its work was done early): no run for it. */
void sl_turn_forget(struct sl_turn_node *n);

/* The end of the turn: runs every registered node, including those
 * registered during the run; then the turn's clock is read again on its
 * next use. */
void sl_turn_run(void);

/* Frees the list (at exit). */
void sl_turn_drain(void);

/* The turn's time, from <src> (the server's clock; NULL: sl_clock_mono). */
void sl_turn_clock_set(const struct sl_clock *src);
uint64_t sl_turn_now_us(void);
uint64_t sl_turn_now_ms(void);
/* The turn's time as a clock object, for the limiter and the waits. */
extern const struct sl_clock sl_turn_clock;
/* The turn ended without a run (tests, a loop stopped): read again. */
void sl_turn_tick(void);

#endif

/* sluice — the reply router of a pooled upstream connection: pure, no I/O.
 *
 * Requests of many owners go out on one connection in order; the FIFO says,
 * for each reply in wire order, whose it is:
 *
 *   FIFO:  [A x2] [B x1] [setup x3] [A x1] ...      (entries merge when the
 *   wire:   r1 r2  r3     (swallowed) r4              same owner follows itself)
 *
 * sl_upool_route_feed() scans the bytes read (sl_reply_scan) and hands each
 * piece of a reply to the owner at the head as it comes: a reply of any size
 * is never held. A forgotten owner's entries stay in place with owner NULL,
 * so its replies are read and dropped, never shifted onto anyone else. */
#ifndef SL_NET_UPOOL_ROUTE_H
#define SL_NET_UPOOL_ROUTE_H

#include <stddef.h>
#include <stdint.h>

#include "net/upool-t.h"

struct sl_upool_route_ops {
    /* A piece [<from>, <to>) of <b> for <o> (<flags>: SL_UPOOL_*). Returns 0
     * to go on, nonzero to stop feeding now (the connection is gone). */
    int (*deliver)(void *ctx, struct sl_upool_owner *o, struct sl_buf *b, uint32_t from,
                   uint32_t to, unsigned flags);
    /* One reply of an OWNER entry of <o> (NULL: forgotten) ended. */
    void (*reply_end)(void *ctx, struct sl_upool_owner *o);
    /* An entry of <kind> (enum sl_upool_ek) left the FIFO, all its replies
     * in. Returns 0 to go on, nonzero to stop feeding (the connection is gone). */
    int (*entry_done)(void *ctx, int kind);
};

void sl_upool_route_init(struct sl_upool_route *rt);
void sl_upool_route_free(struct sl_upool_route *rt);

/* Appends an entry: <owed> replies of <kind> for <o> (merged into the last
 * entry when it is the same). RAW ignores <owed>. 0 or SL_ENOMEM. */
int sl_upool_route_push(struct sl_upool_route *rt, struct sl_upool_owner *o, uint32_t owed, int kind);

/* Feeds bytes [<from>, <to>) of <b> read from the connection. Returns 0,
 * 1 when a callback stopped it, or SL_EPROTO with <why> (<cap> bytes)
 * saying what is wrong: not RESP, a reply nobody asked for, a push on a
 * shared connection, a refused setup command, a RESET not answered so. */
int sl_upool_route_feed(struct sl_upool_route *rt, struct sl_buf *b, uint32_t from, uint32_t to,
                        const struct sl_upool_route_ops *ops, void *ctx, char *why, size_t cap);

/* <o>'s entries keep their place but are dropped from now on. */
void sl_upool_route_forget(struct sl_upool_route *rt, const struct sl_upool_owner *o);

/* The entry at the head (NULL: empty), and entry <i> from the head. */
struct sl_upool_ent *sl_upool_route_at(struct sl_upool_route *rt, uint32_t i);

/* Removes the head entry (the pinned owner's RAW entry on unpin). */
void sl_upool_route_pop(struct sl_upool_route *rt);

/* Nonzero when no reply is half read. */
int sl_upool_route_idle(const struct sl_upool_route *rt);

#endif

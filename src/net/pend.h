/* sluice — the ring of requests waiting for their verdicts, in order.
 *
 * A session queues each request it asks the limiter about at the tail and
 * lets them go from the head once their verdicts are in. An entry stays
 * where it was pushed until it is popped, so the limiter's callback can
 * land a verdict in it by pointer while others are pushed and popped. The
 * storage is taken from a pool at the first push and goes back once the
 * ring is empty (sl_pend_release) or the session is freed. */
#ifndef SL_NET_PEND_H
#define SL_NET_PEND_H

#include <stdint.h>

#include "net/pend-t.h"

/* A zeroed entry at the tail, or NULL: the ring is full, or out of memory
 * (tell them apart with sl_pend_full()). */
struct sl_pend *sl_pend_push(struct sl_pend_ring *r);

/* Takes back the entry pushed last, whose verdict is in (its text freed). */
void sl_pend_unpush(struct sl_pend_ring *r);

/* The first entry, or NULL when empty. */
struct sl_pend *sl_pend_head(const struct sl_pend_ring *r);

/* Removes the first entry into <out> (its text is now the caller's). */
void sl_pend_pop(struct sl_pend_ring *r, struct sl_pend *out);

/* Entry <i> from the head (i < sl_pend_count()), to go through them all. */
struct sl_pend *sl_pend_at(const struct sl_pend_ring *r, uint32_t i);

static inline uint32_t sl_pend_count(const struct sl_pend_ring *r) { return r->n; }
static inline int sl_pend_full(const struct sl_pend_ring *r) { return r->n == SL_PEND_MAX; }

/* Sum of the entries' spans: the bytes of the requests waiting. */
uint32_t sl_pend_bytes(const struct sl_pend_ring *r);

/* Gives the storage back to the pool when nothing waits. */
void sl_pend_release(struct sl_pend_ring *r);

/* Frees every entry's text and gives the storage back (the owner is freed;
 * no verdict may still be on its way). */
void sl_pend_free(struct sl_pend_ring *r);

/* Frees the pooled storage (at exit). */
void sl_pend_pool_drain(void);

#endif

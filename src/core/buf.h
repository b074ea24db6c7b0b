/* sluice — a pool of fixed-size chunks.
 *
 * Sessions take a chunk when bytes arrive and give it back as soon as the
 * bytes have left, so an idle connection holds none. The pool keeps a bounded
 * number of free chunks to make the take/give pair two pointer moves. */
#ifndef SL_CORE_BUF_H
#define SL_CORE_BUF_H

#include "core/buf-t.h"

/* Returns a chunk with refs = 1 and no data, or NULL when out of memory. */
struct sl_buf *sl_buf_get(void);

/* Adds a reference to <b>. */
static inline void sl_buf_ref(struct sl_buf *b) { b->refs++; }

/* Drops a reference; the last one returns <b> to the pool (or frees it). */
void sl_buf_unref(struct sl_buf *b);

/* Frees every pooled chunk (at exit, so leak checkers stay quiet). */
void sl_buf_pool_drain(void);

/* Chunks currently taken (not pooled), for the metrics and the tests. */
uint64_t sl_buf_in_use(void);

#endif

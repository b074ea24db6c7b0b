/* sluice — deciding in process, and on_failure standing in for the store
 * (private to src/limit/; see limiter-i.h). */
#ifndef SL_LIMIT_INPROC_H
#define SL_LIMIT_INPROC_H

#include "limit/limiter-i.h"

/* Peeks (commit 0) or takes (commit 1) limit <k> of <q> in process at
 * q->now_us, the rate divided by <share> (live instances when standing in
 * for the store); <res> says how. Returns 1 when allowed (out of memory:
 * allowed, uncounted). */
int sl_lim_local_take(struct sl_limiter *lim, struct sl_limiter_req *q, int k, uint64_t share,
                      int commit, struct sl_algo_result *res);

/* Decides every limit of <q> in process: the store-backed ones too when
 * <with_remote> (standing in for the store at <share>). Fills <v>, counts. */
void sl_lim_decide_local(struct sl_limiter *lim, struct sl_limiter_req *q, int with_remote,
                         uint64_t share, struct sl_verdict *v);

/* The store could not answer <q>: on_failure (open, closed, local) decides
 * into <v>. */
void sl_lim_store_failed(struct sl_limiter *lim, struct sl_limiter_req *q, struct sl_verdict *v);

#endif

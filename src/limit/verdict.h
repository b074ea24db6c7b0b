/* sluice — what a decision says: denials and the RateLimit policy fields
 * (private to src/limit/; see limiter-i.h). */
#ifndef SL_LIMIT_VERDICT_H
#define SL_LIMIT_VERDICT_H

#include "limit/limiter-i.h"

/* Fills <v> with limit <L>'s denial <res> for <identity>, unless <v>
 * already holds a stricter one (the longest wait wins). <p>: the numbers
 * the limit had for this identity (its own, or an override). */
void sl_lim_deny(struct sl_verdict *v, const struct limit *L, const struct sl_algo_params *p,
                 const char *identity, const struct sl_algo_result *res);

/* Names limit <L> in <v>'s policy fields (limiter.h): <remaining> tokens
 * left, the quota whole again after <reset_us>; <approx> as there; <p>
 * the limit's numbers for this identity. */
void sl_lim_set_policy(struct sl_verdict *v, const struct limit *L,
                       const struct sl_algo_params *p, uint64_t remaining, uint64_t reset_us,
                       int approx);

/* Non-shadow limit <L> allowed a request, leaving <remaining> tokens, whole
 * again after <reset_us>: an allowed verdict <v> names the limit closest
 * to its limit (the least remaining; the later reset on a tie). */
void sl_lim_closest(struct sl_verdict *v, const struct limit *L, const struct sl_algo_params *p,
                    uint64_t remaining, uint64_t reset_us, int approx);

/* Shadow limit <L> decided a request or take of <identity>: it would have
 * allowed it (<allowed>; counted as allowed) or rejected it (counted as
 * shadow_rejected, with how long it would have had to wait, <retry_us>,
 * UINT64_MAX: never; and logged, at most one line a second per limit,
 * kind=shadow_reject repeated=N counting those left out). */
void sl_lim_shadow_outcome(struct limit *L, const char *identity, int allowed, uint64_t retry_us);

/* Shadow limit <L> would have rejected the request <v> is the verdict of,
 * telling a wait of <retry_us>: noted in <v> for the decision log (the
 * first such limit only). */
void sl_lim_shadow_note(struct sl_verdict *v, const struct limit *L, uint64_t retry_us);

/* Writes the count line of <L>'s would-be rejections left out of the log
 * once their storm is over, or any left when <all> (the limiter freed). */
void sl_lim_shadow_log_flush(struct limit *L, int all);

/* Limit <L> allowed, after <wait_us> when it reserved (action = delay): the
 * verdict <v> waits for the longest of its limits. */
void sl_lim_allowed_after(struct limit *L, struct sl_verdict *v, uint64_t wait_us);

#endif

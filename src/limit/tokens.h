/* sluice — token leases ([store] lease) and refusals remembered from the
 * store, per identity (private to src/limit/; see limiter-i.h). */
#ifndef SL_LIMIT_TOKENS_H
#define SL_LIMIT_TOKENS_H

#include "limit/limiter-i.h"

/* Sets what limit <L> (its metric, scope, action and parameters already
 * set) keeps per identity of what the store says: its token lease size
 * ([store] lease in <sc>: 0 off, -1 auto, N), its chunk at the limit, and
 * whether it remembers answers at all. <has_store> 0 (url = local): none. */
void sl_lim_tokens_init(struct limit *L, int has_store, const struct sl_store_conf *sc);

/* The entry of <L> for <identity> (leases, remembered refusals, what was
 * left), made if missing, touched at <now_us>; NULL when out of memory. */
struct bucket *sl_lim_lease_entry(struct limit *L, const char *identity, uint64_t now_us);

/* The numbers of <L> for <identity> changed (an override came, went or
 * changed): refusals remembered under the old ones are forgotten, so the
 * next request asks the store. Tokens leased stay (the store counted
 * them). */
void sl_lim_tokens_forget(struct limit *L, const char *identity);

/* Standing in for the store (on_failure = local), in-process bucket <b> of
 * <L> for <identity> starts from what the store last said was left of the
 * limit's numbers <whole> (its own, or an override), in the share <p> of
 * live instances (once per answer). */
void sl_lim_start_from_store(struct limit *L, struct bucket *b, const char *identity,
                             const struct sl_algo_params *whole, const struct sl_algo_params *p);

/* Decides <q> here when its store-backed limits all lease and either hold
 * enough tokens or are known to refuse it. Else, when a lease is being
 * asked for one of its entries, <q> waits for the answer (*<wait_on> is
 * that entry); else <q> makes the call, asking a lease on top of the cost
 * where one is due. Returns 1 (decided, <v>), 2 (wait) or 0 (ask the store). */
int sl_lim_lease_try(struct sl_limiter *lim, struct sl_limiter_req *q, struct sl_verdict *v,
                     struct bucket **wait_on);

/* Pooled request <q> waits, in order, for the answer entry <e> is asking. */
void sl_lim_lease_wait(struct bucket *e, struct sl_limiter_req *q);

/* The store call of <q> is over (answered, failed or never sent): the
 * entries it answered for take the next asker, and their waiters go on. */
void sl_lim_lease_done(struct sl_limiter *lim, struct sl_limiter_req *q);

/* The store answered <q> with <vals> at <at_us>: grants become tokens here,
 * refusals are remembered. A lease take refused is asked again for the
 * cost alone: returns 1 (the caller stops there), else 0. */
int sl_lim_lease_answer(struct sl_limiter *lim, struct sl_limiter_req *q, const int64_t *vals,
                        uint64_t at_us);

#endif

/* sluice — what a reload carries over from the running limits (private to
 * src/limit/; see limiter-i.h).
 *
 * A limit's counters and per-identity state (struct lim_state: in-process
 * buckets, leases, remembered refusals, cached overrides, busiest
 * identities) belong to its name, not to one configuration: the limit of
 * the same name in the next limiter shares them. Nothing is copied or
 * moved, so decisions the old limiter still has pending (a store call in
 * flight, a request waiting for a lease or an override) count and take in
 * the same place as the new limiter's, and a bucket read under other
 * numbers than it was written under is converted when it is next used
 * (sl_lim_bucket_numbers, buckets.c). docs/limits.md ("Reload") states
 * what each kind of change does. */
#ifndef SL_LIMIT_CARRY_H
#define SL_LIMIT_CARRY_H

#include <stddef.h>

#include "limit/limiter-i.h"

/* Gives limit <L> (name, metric and scope set) its state: the one of the
 * limit of the same name in <prev> when that has the same metric and scope
 * (shared), else a new one, which still starts from the old limit's
 * counters so that they never go back. Tables hold at most <cap> entries
 * (0: no bound); a shared table takes a new cap at the next sweep
 * (sl_lim_tables_fit, buckets.c). 0, or SL_ENOMEM. */
int sl_lim_carry(struct limit *L, const struct sl_limiter *prev, size_t cap);

/* Drops a limit's hold on <s>; the last frees it with its tables. */
void sl_lim_state_release(struct lim_state *s);

#endif

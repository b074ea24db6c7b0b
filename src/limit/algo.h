/* sluice — the rate-limiting algorithms, in process.
 *
 * Pure functions of (state, params, now, cost): no clock, no I/O. Time going
 * backwards is treated as no time passing. A cost greater than the capacity
 * (burst for buckets, amount for windows) is denied without consuming, with
 * retry_after_us = UINT64_MAX (the Lua scripts say -1). They compute
 * exactly what the scripts in lua/ compute, bit for bit (tests/unit/limit/cases.h).
 *
 * Numeric bounds. Redis runs Lua 5.1, whose numbers are doubles: integers
 * are exact only below 2^53. The scripts and this file keep every
 * intermediate value below 2^53 when the parameters are inside these bounds
 * (docs/algorithms.md works them out); sl_algo_check() tells, and the
 * configuration loader must reject a limit it refuses:
 *
 *   1 <= amount    <= SL_ALGO_MAX_AMOUNT (2^40)
 *   1 <= period_us <= SL_ALGO_MAX_PERIOD_US (365 days; products with it
 *                     must stay below 2^53 after a 7-bit shift: < 2^45)
 *   token_bucket, gcra: 1 <= burst <= 2^40 and
 *        burst * (period_us / gcd(amount, period_us)) <= SL_ALGO_MAX_UNITS (2^52)
 *        (the bucket's capacity in units: at any rate per second burst
 *        <= 4.5e9 is always fine; at 1000/d burst <= 5.2e7; at 1/d 52124)
 *   sliding_log: amount <= SL_ALGO_MAX_LOG (one stored event per token)
 *   cost: any (a cost above the capacity is simply never allowed)
 *   now_us < SL_ALGO_MAX_NOW_US (2^52 us: the year 2112)
 *
 * Windows ignore burst: amount per period_us is their limit. */
#ifndef SL_LIMIT_ALGO_H
#define SL_LIMIT_ALGO_H

#include "limit/algo-t.h"

#define SL_ALGO_MAX_AMOUNT    (1ULL << 40)
#define SL_ALGO_MAX_PERIOD_US (365ULL * 86400 * 1000000)
#define SL_ALGO_MAX_UNITS     (1ULL << 52)
#define SL_ALGO_MAX_LOG       100000ULL
#define SL_ALGO_MAX_NOW_US    (1ULL << 52)

/* Returns 0 when <p> is inside the bounds above, or SL_ECONF with a static
 * text saying which bound in *<why> (when <why> is not NULL). */
int sl_algo_check(const struct sl_algo_params *p, const char **why);

/* Decides whether <cost> tokens may be taken at <now_us>. With <commit>
 * nonzero and the answer allowed, the tokens are taken; with <commit> zero
 * nothing changes (a peek, used to check several limits before taking from
 * any). Fills <out>. Returns 0, SL_ENOMEM (sliding log ring; nothing
 * taken), or SL_ECONF when <p> fails sl_algo_check() (<out> then says denied,
 * never; nothing changes). */
int sl_algo_take(struct sl_algo_state *st, const struct sl_algo_params *p, uint64_t now_us,
                 uint64_t cost, int commit, struct sl_algo_result *out);

/* State <st>, written under the numbers <from>, is to be read under <to>
 * at <now_us> (a reload changed the limit): converted in place where the
 * algorithms would not read it right themselves. Same algorithm:
 * token_bucket and gcra keep their whole tokens up to the new burst (they
 * do so when they read it: nothing here), a sliding log keeps its events,
 * a fixed or sliding window of another period counts what it counted
 * (a sliding window: its estimate) in the new window that holds now.
 * Another algorithm: the whole tokens left under <from> are kept, up to
 * the new capacity: a bucket holds them, a window counts the rest of its
 * amount as taken in the window that holds now (a sliding log: as events
 * made at the last take). Windows to windows count what was counted.
 * Returns 0, SL_ENOMEM (the log: the state is then new, full) or
 * SL_ECONF (<to> fails sl_algo_check(); nothing changes). */
int sl_algo_convert(struct sl_algo_state *st, const struct sl_algo_params *from,
                    const struct sl_algo_params *to, uint64_t now_us);

/* Microseconds after which an untouched bucket is back to its initial state,
 * rounded up to whole milliseconds, at least 1 ms: exactly the PEXPIRE the
 * Lua scripts set (times 1000). Buckets: the time to refill from empty;
 * fixed_window, sliding_log: period_us; sliding_window: 2 * period_us. */
uint64_t sl_algo_ttl_us(const struct sl_algo_params *p);

/* The limit <p> as a quota policy "<quota> tokens per <window_s> seconds"
 * (HTTP's RateLimit-Policy q and w, docs/http.md): for token_bucket and
 * gcra the burst, per the time to refill it from empty; for the windows
 * the amount, per the period. The window is rounded up to whole seconds
 * and is at least 1, so a client that never sends more than <quota> in any
 * <window_s> seconds is never refused by the buckets nor by fixed_window
 * and sliding_log (sliding_window's estimate may refuse it near a window's
 * edge). */
void sl_algo_policy(const struct sl_algo_params *p, uint64_t *quota, uint64_t *window_s);

/* Releases memory held by <st> (the sliding log ring). */
void sl_algo_state_free(struct sl_algo_state *st);

/* The algorithm's name as in the configuration ("token_bucket" ...). */
const char *sl_algo_name(enum sl_algo a);

#endif

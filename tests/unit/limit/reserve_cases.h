/* sluice tests — gcra reservations (max_wait_us > 0, action = delay).
 *
 * Both implementations follow this table: src/limit/algo.c
 * (tests/unit/limit/test_reserve.c) and lua/gcra.lua, standalone with
 * ARGV[6] and inside the embedded decide (tests/lua/test_lua.c). It is kept
 * apart from cases.h because a case here has one more parameter, the
 * longest wait, and only gcra runs it (a token_bucket with max_wait_us is a
 * configuration error in C; the limiter shapes it with gcra).
 *
 * Every step is committed (taken when allowed) and expects allowed,
 * remaining, retry_after_us and reset_us, as in cases.h. The values were
 * worked out by hand from the definition in docs/algorithms.md
 * ("Reservations"), not by running either implementation:
 *
 *   S = period / g, K = amount / g (g = gcd), cap = burst x S,
 *   top = cap + max_wait x K; debt = min((TAT - now) x K, top), 0 if TAT <= now
 *   need = cost x S; debt + need <= cap: allowed, retry 0
 *   else wait = ceil((debt + need - cap) / K): wait <= max_wait: allowed,
 *        retry = wait (TAT moves by need); else denied, retry = wait - max_wait
 *        (wait when max_wait = 0), nothing taken
 *   cost > burst: denied, retry never
 *   remaining = floor(max(cap - debt - need, 0) / S) when allowed,
 *               floor(max(cap - debt, 0) / S) when denied
 *   reset = ceil(debt' / K), debt' including the take when allowed
 *
 * Note what a cost of 0 does with reservations outstanding (debt > cap):
 * it is allowed and takes nothing, but by the definition its wait is the
 * queue ahead of it, ceil((debt - cap) / K), never more than max_wait. */
#ifndef SL_TEST_LIMIT_RESERVE_CASES_H
#define SL_TEST_LIMIT_RESERVE_CASES_H

#include <stdint.h>

#include "unit/limit/cases.h"

#define SL_RCASE_MAX_STEPS 20

struct sl_rcase {
    const char *name;
    uint64_t    amount;      /* <amount> per <period_us>, gcra */
    uint64_t    period_us;
    uint64_t    burst;
    uint64_t    max_wait_us; /* the longest reservation */
    struct sl_case_step steps[SL_RCASE_MAX_STEPS]; /* up to the SL_CASE_END_US entry */
};

#define T0    SL_CASE_T0
#define NEVER SL_CASE_NEVER
#define END   { SL_CASE_END_US, 0, 0, 0, 0, 0 }

static const struct sl_rcase sl_rcases[] = {
    /* S = 100000, K = 1, cap = 200000, top = 700000: two at once, then five
     * reservations 100 ms apart, the 8th would wait 600 ms */
    { "10/s burst 2, max_wait 500 ms: a queue of reservations", 10, 1000000, 2, 500000, {
        { T0, 1, 1, 1, 0, 100000 },
        { T0, 1, 1, 0, 0, 200000 },          /* the bucket is empty now */
        { T0, 1, 1, 0, 100000, 300000 },     /* a reservation: go in 100 ms */
        { T0, 1, 1, 0, 200000, 400000 },
        { T0, 1, 1, 0, 300000, 500000 },
        { T0, 1, 1, 0, 400000, 600000 },
        { T0, 1, 1, 0, 500000, 700000 },     /* the 7th waits exactly max_wait */
        { T0, 1, 0, 0, 100000, 700000 },     /* wait 600 ms: denied, 100 ms too soon */
        { T0, 1, 0, 0, 100000, 700000 },     /* nothing was taken: the same again */
        { T0 + 99999, 1, 0, 0, 1, 600001 },  /* wait 500001: 1 us too soon */
        { T0 + 100000, 1, 1, 0, 500000, 700000 }, /* wait 500000: TAT = T0 + 800 ms */
        { T0 + 100000, 0, 1, 0, 500000, 700000 }, /* cost 0: allowed, takes nothing, the queue ahead */
        { T0 + 800000, 1, 1, 1, 0, 100000 }, /* TAT = now: full again */
        { T0 + 800000, 2, 1, 0, 100000, 300000 }, /* one token there, one reserved */
        { T0 + 800000, 3, 0, 0, NEVER, 300000 }, /* over the burst: never, wait or not */
        { T0 + 1100000, 2, 1, 0, 0, 200000 },
        END } },
    /* max_wait 0 is the plain gcra: the wait is a denial, retry the whole wait */
    { "max_wait 0: no reservations", 10, 1000000, 2, 0, {
        { T0, 1, 1, 1, 0, 100000 },
        { T0, 1, 1, 0, 0, 200000 },
        { T0, 1, 0, 0, 100000, 200000 },
        { T0 + 50000, 1, 0, 0, 50000, 150000 },
        { T0 + 100000, 1, 1, 0, 0, 200000 },
        END } },
    /* cap 500000, top 600000: a denial with tokens left, a partial reservation */
    { "10/s burst 5, max_wait 100 ms: denied with tokens left", 10, 1000000, 5, 100000, {
        { T0, 4, 1, 1, 0, 400000 },
        { T0, 3, 0, 1, 100000, 400000 },     /* wait 200 ms > 100 ms; 1 token still there */
        { T0, 2, 1, 0, 100000, 600000 },     /* 1 token now + 1 reserved: wait 100 ms */
        { T0 + 50000, 1, 0, 0, 50000, 550000 }, /* wait 150 ms */
        { T0 + 50000, 5, 0, 0, 450000, 550000 }, /* cost = burst: wait 550 ms */
        { T0 + 50000, 6, 0, 0, NEVER, 550000 },
        { T0 + 600000, 5, 1, 0, 0, 500000 }, /* TAT reached: full */
        END } },
    /* gcra keeps only TAT: an earlier now looks like an early request; the
     * debt is clamped to top (= cap + max_wait x K), never beyond */
    { "reservations and the clock stepping back", 10, 1000000, 2, 500000, {
        { T0, 2, 1, 0, 0, 200000 },          /* TAT = T0 + 200 ms */
        { T0, 2, 1, 0, 200000, 400000 },     /* TAT = T0 + 400 ms */
        { T0 - 200000, 1, 1, 0, 500000, 700000 }, /* back 200 ms: debt 600 ms, waits 500 ms */
        { T0 - 1000000, 1, 0, 0, 100000, 700000 }, /* far back: debt clamped to top (700 ms) */
        { T0 - 1000000, 0, 1, 0, 500000, 700000 }, /* cost 0: allowed, nothing written */
        { T0, 1, 1, 0, 400000, 600000 },     /* TAT was T0 + 500 ms */
        { T0 + 600000, 2, 1, 0, 0, 200000 },
        END } },
    /* S = 3, K = 7, cap = 30, top = 44: TAT's fraction carries through reservations */
    { "7 tokens per 3 us, burst 10, max_wait 2 us", 7, 3, 10, 2, {
        { T0, 10, 1, 0, 0, 5 },              /* TAT = T0 + 4 + 2/7 */
        { T0, 3, 1, 0, 2, 6 },               /* debt 30 + 9: wait ceil(9/7) = 2; TAT = T0 + 5 + 4/7 */
        { T0, 1, 1, 0, 2, 6 },               /* debt 39 + 3: wait ceil(12/7) = 2; TAT = T0 + 6 */
        { T0, 1, 0, 0, 1, 6 },               /* debt 42 + 3: wait ceil(15/7) = 3 */
        { T0 + 1, 1, 1, 0, 2, 6 },           /* debt 35 + 3: wait 2; TAT = T0 + 6 + 3/7 */
        { T0 + 1, 2, 1, 0, 2, 7 },           /* debt 38 + 6 = 44 = top: wait 2 */
        { T0 + 1, 0, 1, 0, 2, 7 },           /* at top, cost 0: the queue ahead, 2 us */
        { T0 + 3, 1, 1, 0, 1, 5 },           /* debt 30 + 3: wait ceil(3/7) = 1 */
        { T0 + 7, 1, 1, 7, 0, 2 },           /* debt 5 + 3 = 8: 22 units = 7 tokens left */
        { T0 + 7, 11, 0, 7, NEVER, 2 },
        END } },
    /* 1/d: S = 8.64e10, K = 1; a reservation of up to an hour */
    { "one per day, max_wait 1 h", 1, 86400000000ULL, 1, 3600000000ULL, {
        { T0, 1, 1, 0, 0, 86400000000ULL },
        { T0, 1, 0, 0, 82800000000ULL, 86400000000ULL },   /* wait a day, 23 h too soon */
        { T0 + 82800000000ULL, 1, 1, 0, 3600000000ULL, 90000000000ULL }, /* wait 1 h */
        { T0 + 82800000000ULL, 1, 0, 0, 86400000000ULL, 90000000000ULL },
        { T0 + 169200000000ULL, 1, 1, 0, 3600000000ULL, 90000000000ULL },
        END } },
    /* 10 MiB/s: g = 320, S = 3125, K = 32768; burst 1 MiB: cap = 3276800000,
     * max_wait 100 ms: top = 6553600000 */
    { "10 MiB/s, burst 1 MiB, max_wait 100 ms", 10485760, 1000000, 1048576, 100000, {
        { T0, 1048576, 1, 0, 0, 100000 },
        { T0, 1048576, 1, 0, 100000, 200000 }, /* a whole burst reserved: debt = top */
        { T0, 1, 0, 0, 1, 200000 },          /* one byte more: wait 100001 */
        { T0 + 1, 1, 1, 0, 100000, 200000 }, /* 32768 units back: wait ceil(3276770357 / K) */
        { T0 + 1, 65536, 0, 0, 6250, 200000 }, /* wait ceil(3481570357 / K) = 106250 */
        { T0 + 150000, 65536, 1, 458751, 0, 56251 }, /* debt 50000 us + 3125 units */
        { T0 + 150000, 0, 1, 458751, 0, 56251 },
        END } },
};

#define SL_N_RCASES (sizeof(sl_rcases) / sizeof(sl_rcases[0]))

#undef T0
#undef NEVER
#undef END

#endif

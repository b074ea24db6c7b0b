/* sluice tests — the one table of rate-limiting cases.
 *
 * Both implementations of every algorithm follow it: the C versions
 * (tests/unit/limit/test_algo.c, src/limit/algo.c) and the Lua scripts on a
 * real redis-server with an explicit clock (tests/lua/test_lua.c, the scripts in lua/).
 * Each case is one limit (algorithm, amount per period_us, burst) and a
 * sequence of requests (now_us, cost), each committed (taken when allowed),
 * with the answer expected: allowed, remaining (whole tokens left after the
 * request), retry_after_us (0 when allowed, NEVER = -1 in Lua / UINT64_MAX
 * in C when the cost can never fit) and reset_us (until the bucket is full
 * again, the sliding window / log is empty, or the fixed window ends).
 *
 * The expected values were worked out from the algorithms' definitions in
 * exact rational arithmetic (docs/algorithms.md states them), not from
 * either implementation. A BUCKETS case runs as token_bucket and as gcra
 * with the same expectations: with time running forward the two are the
 * same limit. Window algorithms ignore burst; the cases give them odd bursts
 * to show it.
 *
 * T0 = 2023-11-15 00:00:00 UTC in microseconds: a multiple of a second, a
 * minute, an hour and a day, so windows of those lengths start at T0. */
#ifndef SL_TEST_LIMIT_CASES_H
#define SL_TEST_LIMIT_CASES_H

#include <stdint.h>

#include "conf/conf-t.h"

#define SL_CASE_MAX_STEPS 16
#define SL_CASE_T0        1700006400000000ULL
#define SL_CASE_NEVER     (-1)             /* retry_after_us: the cost can never fit */
#define SL_CASE_END_US    UINT64_MAX       /* now_us of the entry that ends a case */

struct sl_case_step {
    uint64_t now_us;         /* the clock (a test passes it explicitly) */
    uint64_t cost;           /* tokens asked for */
    int      allowed;        /* expected: 1 admitted (and taken), 0 denied */
    uint64_t remaining;      /* expected: whole tokens left after the request */
    int64_t  retry_after_us; /* expected: 0 when allowed, SL_CASE_NEVER, or the wait */
    uint64_t reset_us;       /* expected: until full / empty / the window's end */
};

struct sl_case {
    const char *name;
    unsigned    algos;       /* bit (1 << enum sl_algo) for each algorithm that runs it */
    uint64_t    amount;      /* <amount> per <period_us> */
    uint64_t    period_us;
    uint64_t    burst;       /* ignored by the window algorithms */
    struct sl_case_step steps[SL_CASE_MAX_STEPS]; /* up to the SL_CASE_END_US entry */
};

#define TB      (1u << SL_ALGO_TOKEN_BUCKET)
#define GC      (1u << SL_ALGO_GCRA)
#define BUCKETS (TB | GC)
#define FW      (1u << SL_ALGO_FIXED_WINDOW)
#define SW      (1u << SL_ALGO_SLIDING_WINDOW)
#define SL      (1u << SL_ALGO_SLIDING_LOG)
#define T0      SL_CASE_T0
#define NEVER   SL_CASE_NEVER
#define END     { SL_CASE_END_US, 0, 0, 0, 0, 0 }

static const struct sl_case sl_cases[] = {
    /* burst 10 at 10/s: ten pass at once, the 11th waits exactly 100 ms */
    { "drain then deny, exact retry", BUCKETS, 10, 1000000, 10, {
        { T0, 1, 1, 9, 0, 100000 },  /* full bucket: 10 tokens */
        { T0, 1, 1, 8, 0, 200000 },
        { T0, 1, 1, 7, 0, 300000 },
        { T0, 1, 1, 6, 0, 400000 },
        { T0, 1, 1, 5, 0, 500000 },
        { T0, 1, 1, 4, 0, 600000 },
        { T0, 1, 1, 3, 0, 700000 },
        { T0, 1, 1, 2, 0, 800000 },
        { T0, 1, 1, 1, 0, 900000 },
        { T0, 1, 1, 0, 0, 1000000 },  /* the 10th: empty, full again in 1 s */
        { T0, 1, 0, 0, 100000, 1000000 },  /* denied: one token every 100 ms */
        { T0 + 99999, 1, 0, 0, 1, 900001 },  /* 1 us short */
        { T0 + 100000, 1, 1, 0, 0, 1000000 },  /* exactly one token */
        { T0 + 100000, 1, 0, 0, 100000, 1000000 },
        END } },
    /* a token every 333333.33 us: partial tokens carry over exactly, nothing drifts */
    { "partial tokens: 3/s", BUCKETS, 3, 1000000, 5, {
        { T0, 5, 1, 0, 0, 1666667 },  /* drain */
        { T0 + 100000, 1, 0, 0, 233334, 1566667 },  /* 0.3 tokens */
        { T0 + 333333, 1, 0, 0, 1, 1333334 },  /* 0.999999 tokens: 1/3 us missing, rounded up */
        { T0 + 333334, 1, 1, 0, 0, 1666666 },  /* 1.000002 tokens */
        { T0 + 500000, 1, 0, 0, 166667, 1500000 },  /* 0.500002 tokens: the 2 micro-tokens stayed */
        { T0 + 666667, 1, 1, 0, 0, 1666667 },  /* 1.000003 tokens */
        { T0 + 1000000, 2, 0, 1, 333334, 1333334 },  /* 1.000003 tokens */
        { T0 + 1333333, 2, 0, 1, 1, 1000001 },  /* 1.999999+0.000003 */
        { T0 + 2000000, 3, 1, 1, 0, 1333334 },  /* refill keeps the fraction: 3.000003 */
        { T0 + 4000000, 5, 1, 0, 0, 1666667 },  /* full (5) after 6.0 tokens worth of time */
        END } },
    /* several tokens per request */
    { "cost > 1", BUCKETS, 100, 1000000, 50, {
        { T0, 20, 1, 30, 0, 200000 },
        { T0, 20, 1, 10, 0, 400000 },
        { T0, 20, 0, 10, 100000, 400000 },  /* only 10 left: 10 missing = 100 ms */
        { T0 + 50000, 20, 0, 15, 50000, 350000 },  /* 15 left */
        { T0 + 100000, 20, 1, 0, 0, 500000 },  /* 20 left */
        { T0 + 100000, 1, 0, 0, 10000, 500000 },
        { T0 + 600000, 50, 1, 0, 0, 500000 },  /* empty at +100 ms, full 500 ms later */
        { T0 + 600000, 0, 1, 0, 0, 500000 },  /* cost 0 always passes */
        END } },
    /* a cost over the capacity is denied with retry -1 (UINT64_MAX in C) */
    { "cost > burst: never, nothing consumed", BUCKETS, 10, 1000000, 5, {
        { T0, 6, 0, 5, NEVER, 0 },  /* more than the bucket holds: never */
        { T0, 5, 1, 0, 0, 500000 },  /* still full: nothing was consumed */
        { T0, 6, 0, 0, NEVER, 500000 },  /* empty now, still never */
        { T0, 1, 0, 0, 100000, 500000 },  /* plain deny: 100 ms */
        { T0 + 250000, 6, 0, 2, NEVER, 250000 },
        { T0 + 250000, 2, 1, 0, 0, 450000 },
        { T0 + 10000000, 5, 1, 0, 0, 500000 },  /* full again */
        END } },
    /* cost 0 is always allowed and consumes nothing */
    { "cost 0 on an empty bucket", BUCKETS, 4, 1000000, 2, {
        { T0, 2, 1, 0, 0, 500000 },
        { T0, 0, 1, 0, 0, 500000 },  /* allowed, changes nothing */
        { T0 + 1, 0, 1, 0, 0, 499999 },
        { T0 + 1, 1, 0, 0, 249999, 499999 },
        { T0 + 250000, 1, 1, 0, 0, 500000 },
        { T0 + 500000, 0, 1, 1, 0, 250000 },
        { T0 + 500000, 1, 1, 0, 0, 500000 },
        END } },
    /* 60 tokens of burst, 1 per second refill */
    { "burst larger than the rate", BUCKETS, 1, 1000000, 60, {
        { T0, 30, 1, 30, 0, 30000000 },
        { T0, 30, 1, 0, 0, 60000000 },
        { T0, 1, 0, 0, 1000000, 60000000 },  /* one per second */
        { T0 + 999999, 1, 0, 0, 1, 59000001 },
        { T0 + 1000000, 1, 1, 0, 0, 60000000 },
        { T0 + 30000000, 40, 0, 29, 11000000, 31000000 },  /* 30 back, need 40 */
        { T0 + 40000000, 40, 0, 39, 1000000, 21000000 },
        { T0 + 100000000, 60, 1, 0, 0, 60000000 },  /* full: 60 */
        { T0 + 100000000, 1, 0, 0, 1000000, 60000000 },
        END } },
    /* gcra's classic use: one request per emission interval */
    { "one per millisecond, burst 1: strict spacing", BUCKETS, 1000, 1000000, 1, {
        { T0, 1, 1, 0, 0, 1000 },
        { T0 + 1, 1, 0, 0, 999, 999 },
        { T0 + 999, 1, 0, 0, 1, 1 },
        { T0 + 1000, 1, 1, 0, 0, 1000 },
        { T0 + 1500, 1, 0, 0, 500, 500 },
        { T0 + 2000, 1, 1, 0, 0, 1000 },
        { T0 + 2000, 1, 0, 0, 1000, 1000 },
        { T0 + 5000, 1, 1, 0, 0, 1000 },
        { T0 + 5001, 1, 0, 0, 999, 999 },
        END } },
    /* idle for years: the refill is clamped before any product can grow */
    { "long idle: full again, no overflow", BUCKETS, 5, 1000000, 5, {
        { T0, 5, 1, 0, 0, 1000000 },
        { T0, 1, 0, 0, 200000, 1000000 },
        { T0 + 315360000000000ULL, 1, 1, 4, 0, 200000 },  /* 10 years later: full, elapsed clamped before multiplying */
        { T0 + 315360000000000ULL, 4, 1, 0, 0, 1000000 },
        { T0 + 1576800000000000ULL, 5, 1, 0, 0, 1000000 },  /* 50 years */
        { T0 + 1576800000000001ULL, 1, 0, 0, 199999, 999999 },
        END } },
    /* a big byte rate: 10485760 tokens per second, costs of 65536 */
    { "10 MiB/s of bytes, burst 10 MiB, 64 KiB reads", BUCKETS, 10485760, 1000000, 10485760, {
        { T0, 65536, 1, 10420224, 0, 6250 },  /* a 64 KiB read */
        { T0, 10354688, 1, 65536, 0, 993750 },
        { T0, 65536, 1, 0, 0, 1000000 },  /* the last 64 KiB */
        { T0, 65536, 0, 0, 6250, 1000000 },  /* 64 KiB take 6250 us */
        { T0 + 1, 1, 1, 9, 0, 1000000 },  /* 10.48576 bytes per us */
        { T0 + 1, 10, 0, 9, 1, 1000000 },
        { T0 + 6250, 65536, 0, 65535, 1, 993751 },  /* 65535.0 bytes: 1 byte short */
        { T0 + 6251, 65536, 1, 9, 0, 1000000 },
        { T0 + 6251, 10485761, 0, 9, NEVER, 1000000 },  /* over the burst: never */
        { T0 + 500000, 5242880, 0, 5177343, 6251, 506251 },
        { T0 + 2000000, 10485760, 1, 0, 0, 1000000 },  /* full: 10 MiB at once */
        END } },
    /* bigger still: 2^30 tokens per second */
    { "1 GiB/s of bytes, burst 1 GiB, 1 MiB writes", BUCKETS, 1073741824, 1000000, 1073741824, {
        { T0, 1072693248, 1, 1048576, 0, 999024 },
        { T0, 1048576, 1, 0, 0, 1000000 },
        { T0, 1048576, 0, 0, 977, 1000000 },  /* 1 MiB per 976.5625 us */
        { T0 + 976, 1048576, 0, 1047972, 1, 999024 },
        { T0 + 977, 1048576, 1, 469, 0, 1000000 },
        { T0 + 977, 1, 1, 468, 0, 1000000 },
        { T0 + 1977, 1000, 1, 1073210, 0, 999001 },
        { T0 + 1000977, 1073741824, 0, 1073741292, 1, 1 },  /* 1 us short of full */
        END } },
    /* a slow rate: 1/d, capacity 1 */
    { "one per day", BUCKETS, 1, 86400000000ULL, 1, {
        { T0, 1, 1, 0, 0, 86400000000ULL },
        { T0 + 1, 1, 0, 0, 86399999999ULL, 86399999999ULL },  /* a day minus 1 us */
        { T0 + 43200000000ULL, 1, 0, 0, 43200000000ULL, 43200000000ULL },  /* half a day */
        { T0 + 86399999999ULL, 1, 0, 0, 1, 1 },
        { T0 + 86400000000ULL, 1, 1, 0, 0, 86400000000ULL },
        { T0 + 86400000005ULL, 1, 0, 0, 86399999995ULL, 86399999995ULL },
        { T0 + 259200000000ULL, 2, 0, 1, NEVER, 0 },  /* over the burst: never */
        { T0 + 259200000000ULL, 1, 1, 0, 0, 86400000000ULL },
        END } },
    /* a slow rate with a burst */
    { "3 per day, burst 2", BUCKETS, 3, 86400000000ULL, 2, {
        { T0, 2, 1, 0, 0, 57600000000ULL },
        { T0 + 28799999999ULL, 1, 0, 0, 1, 28800000001ULL },  /* 8 h per token */
        { T0 + 28800000000ULL, 1, 1, 0, 0, 57600000000ULL },
        { T0 + 28800000000ULL, 1, 0, 0, 28800000000ULL, 57600000000ULL },
        { T0 + 115200000000ULL, 2, 1, 0, 0, 57600000000ULL },  /* two tokens after 16 h */
        { T0 + 144000000001ULL, 1, 1, 0, 0, 57599999999ULL },
        END } },
    /* burst x period near 2^52 units: everything still exact */
    { "7 per year, burst 100: near the bounds", BUCKETS, 7, 31536000000000ULL, 100, {
        { T0, 100, 1, 0, 0, 450514285714286ULL },
        { T0 + 31536000000000ULL, 7, 1, 0, 0, 450514285714286ULL },  /* a year: 7 back */
        { T0 + 31536000000000ULL, 1, 0, 0, 4505142857143ULL, 450514285714286ULL },
        { T0 + 36041142857142ULL, 1, 0, 0, 1, 446009142857144ULL },  /* one per 52.14 days */
        { T0 + 315360000000000ULL, 100, 0, 63, 166690285714286ULL, 166690285714286ULL },
        { T0 + 946080000000000ULL, 100, 1, 0, 0, 450514285714286ULL },  /* 30 years idle: full (capacity 100 x 31536e6 s units) */
        END } },
    /* a token every 3/7 us: the sub-microsecond remainder is kept exactly */
    { "7 tokens per 3 us: fractional emission interval", BUCKETS, 7, 3, 10, {
        { T0, 10, 1, 0, 0, 5 },
        { T0 + 1, 3, 0, 2, 1, 4 },  /* 2.33 tokens */
        { T0 + 2, 3, 1, 1, 0, 4 },  /* 4.67 tokens */
        { T0 + 2, 1, 1, 0, 0, 4 },
        { T0 + 3, 2, 1, 1, 0, 4 },
        { T0 + 30, 10, 1, 0, 0, 5 },
        { T0 + 31, 3, 0, 2, 1, 4 },
        { T0 + 32, 2, 1, 2, 0, 4 },
        END } },
    /* a request before the last admitted one counts as made at that moment */
    { "token bucket: time going backwards", TB, 10, 1000000, 10, {
        { T0, 5, 1, 5, 0, 500000 },
        { T0 + 500000, 5, 1, 5, 0, 500000 },  /* refilled to 10, now 5 */
        { T0 + 200000, 1, 1, 4, 0, 600000 },  /* back 300 ms: as at +500 ms, nothing refilled */
        { T0 + 600000, 5, 1, 0, 0, 1000000 },  /* +100 ms after +500 ms: 5 */
        { T0, 1, 0, 0, 100000, 1000000 },  /* back again: empty, retry as at +600 ms */
        { T0 + 550000, 1, 0, 0, 100000, 1000000 },
        { T0 + 700000, 1, 1, 0, 0, 1000000 },
        END } },
    /* gcra keeps only TAT: an earlier now looks like an earlier request, clamped to one burst */
    { "gcra: time going backwards", GC, 10, 1000000, 10, {
        { T0, 5, 1, 5, 0, 500000 },  /* TAT = T0 + 0.5 s */
        { T0 - 300000, 2, 1, 0, 0, 1000000 },  /* back 300 ms: TAT - now = 0.8 s, 2 tokens (a token bucket would say 5) */
        { T0 - 300000, 1, 0, 0, 100000, 1000000 },  /* TAT = T0 + 0.7 s */
        { T0 - 5000000, 1, 0, 0, 100000, 1000000 },  /* far back: the debt is clamped to the burst (10 tokens = 1 s): empty, not negative */
        { T0 - 5000000, 0, 1, 0, 0, 1000000 },  /* cost 0: allowed, nothing written */
        { T0 + 100000, 4, 1, 0, 0, 1000000 },
        { T0 + 800000, 1, 1, 6, 0, 400000 },
        END } },
    /* amount per aligned window; burst (999) is ignored */
    { "fixed window: boundaries", FW, 3, 1000000, 999, {
        { T0, 1, 1, 2, 0, 1000000 },
        { T0 + 1, 1, 1, 1, 0, 999999 },
        { T0 + 500000, 1, 1, 0, 0, 500000 },
        { T0 + 500000, 1, 0, 0, 500000, 500000 },  /* full: the window ends in 500 ms */
        { T0 + 999999, 1, 0, 0, 1, 1 },  /* 1 us before the boundary */
        { T0 + 1000000, 1, 1, 2, 0, 1000000 },  /* a new window */
        { T0 + 1000000, 2, 1, 0, 0, 1000000 },
        { T0 + 1000001, 1, 0, 0, 999999, 999999 },
        { T0 + 1999999, 0, 1, 0, 0, 1 },
        { T0 + 2000010, 3, 1, 0, 0, 999990 },
        { T0 + 2000010, 0, 1, 0, 0, 999990 },
        END } },
    /* cost N counts N; a cost over amount is never allowed */
    { "fixed window: costs", FW, 10, 60000000, 1, {
        { T0, 11, 0, 10, NEVER, 60000000 },  /* more than a window holds: never */
        { T0, 10, 1, 0, 0, 60000000 },  /* nothing consumed */
        { T0 + 1, 1, 0, 0, 59999999, 59999999 },
        { T0 + 1, 11, 0, 0, NEVER, 59999999 },
        { T0 + 60000000, 4, 1, 6, 0, 60000000 },
        { T0 + 90000000, 7, 0, 6, 30000000, 30000000 },
        { T0 + 90000000, 6, 1, 0, 0, 30000000 },
        { T0 + 120000001, 0, 1, 10, 0, 59999999 },
        END } },
    /* windows start at multiples of the period since the Unix epoch */
    { "fixed window: 7 s windows aligned to the epoch", FW, 2, 7000000, 2, {
        { T0, 2, 1, 0, 0, 6000000 },  /* T0 is 1 s into its window */
        { T0, 1, 0, 0, 6000000, 6000000 },
        { T0 + 5999999, 1, 0, 0, 1, 1 },
        { T0 + 6000000, 1, 1, 1, 0, 7000000 },  /* next window */
        { T0 + 6000000, 1, 1, 0, 0, 7000000 },
        { T0 + 12999999, 1, 0, 0, 1, 1 },
        { T0 + 13000000, 1, 1, 1, 0, 7000000 },
        END } },
    /* an earlier now never reopens an older window */
    { "fixed window: time going backwards", FW, 3, 1000000, 3, {
        { T0 + 1500000, 3, 1, 0, 0, 500000 },
        { T0 + 500000, 1, 0, 0, 500000, 500000 },  /* back into the previous window: still the latest one, still full */
        { T0 + 500000, 0, 1, 0, 0, 500000 },
        { T0 + 1900000, 1, 0, 0, 100000, 100000 },
        { T0 + 2000000, 1, 1, 2, 0, 1000000 },  /* the next window opens */
        { T0 + 1700000, 2, 1, 0, 0, 1000000 },  /* back: counts in the window of +2 s */
        { T0 + 2400000, 1, 0, 0, 600000, 600000 },
        END } },
    /* after any idle time the window is fresh */
    { "fixed window: long idle", FW, 5, 3600000000ULL, 5, {
        { T0, 5, 1, 0, 0, 3600000000ULL },
        { T0 + 3599999999ULL, 1, 0, 0, 1, 1 },
        { T0 + 630720000000000ULL, 5, 1, 0, 0, 3600000000ULL },  /* 20 years later */
        { T0 + 630720000000000ULL, 1, 0, 0, 3600000000ULL, 3600000000ULL },
        END } },
    /* the two-window estimate: prev x (part of it still inside) + current */
    { "sliding window: estimate at 25/50/75%", SW, 100, 1000000, 1, {
        { T0 + 100000, 80, 1, 20, 0, 1900000 },  /* previous window: 80 */
        { T0 + 1250000, 1, 1, 39, 0, 1750000 },  /* 25% in: 80 x 0.75 = 60 + 0 */
        { T0 + 1500000, 50, 1, 9, 0, 1500000 },  /* 50% in: 80 x 0.5 = 40 + 1 */
        { T0 + 1750000, 29, 1, 0, 0, 1250000 },  /* 75% in: 80 x 0.25 = 20 + 51 */
        { T0 + 1750000, 1, 0, 0, 12500, 1250000 },  /* full: 19 more to shed from 20 at 80/s */
        { T0 + 1762499, 1, 0, 0, 1, 1237501 },  /* 1 us early */
        { T0 + 1762500, 1, 1, 0, 0, 1237500 },
        { T0 + 2000000, 1, 1, 18, 0, 2000000 },  /* the boundary: 81 x 1.0 */
        { T0 + 2500000, 10, 1, 48, 0, 1500000 },  /* 81 x 0.5 = 40.5 -> 41 + 1 */
        { T0 + 4000000, 1, 1, 99, 0, 2000000 },  /* two windows idle: zero */
        END } },
    /* the previous window's share is rounded up: never admits over the exact estimate */
    { "sliding window: rounding up the estimate", SW, 10, 3000000, 1, {
        { T0, 3, 1, 7, 0, 6000000 },
        { T0 + 4000000, 8, 1, 0, 0, 5000000 },  /* 3 x 2/3 = 2 + 8 = 10 */
        { T0 + 4000000, 1, 0, 0, 1000000, 5000000 },
        { T0 + 4000001, 1, 0, 0, 999999, 4999999 },  /* 3 x 1999999/3e6 = 1.999999 -> 2: not yet */
        { T0 + 5000000, 1, 1, 0, 0, 4000000 },  /* 3 x 1/3 = 1: fits */
        { T0 + 5000001, 1, 0, 0, 999999, 3999999 },
        END } },
    /* retry-after crosses the window boundary exactly */
    { "sliding window: wait into the next window", SW, 5, 1000000, 5, {
        { T0, 2, 1, 3, 0, 2000000 },
        { T0 + 1100000, 4, 0, 3, 400000, 900000 },  /* prev 2 x 0.9 = 1.8 -> 2, + 4 > 5 */
        { T0 + 1500000, 4, 1, 0, 0, 1500000 },  /* prev 2 x 0.5 = 1: fits */
        { T0 + 1900000, 3, 0, 0, 600000, 1100000 },  /* 4 + 3 > 5 even without prev: next window, once 4 x weight <= 2 */
        { T0 + 2499999, 3, 0, 2, 1, 500001 },  /* prev 4 x 0.500001 -> 3 */
        { T0 + 2500000, 3, 1, 0, 0, 1500000 },  /* prev 4 x 0.5 = 2 */
        { T0 + 2500000, 5, 0, 0, 1500000, 1500000 },  /* a whole window's worth: only once everything is gone */
        { T0 + 4000000, 5, 1, 0, 0, 2000000 },
        { T0 + 4000001, 6, 0, 0, NEVER, 1999999 },  /* never */
        { T0 + 4000001, 1, 0, 0, 1199999, 1999999 },
        END } },
    /* an earlier now is the latest admitted time */
    { "sliding window: time going backwards", SW, 4, 1000000, 4, {
        { T0, 4, 1, 0, 0, 2000000 },
        { T0 + 1500000, 2, 1, 0, 0, 1500000 },  /* prev 4 x 0.5 = 2 */
        { T0 + 1100000, 1, 0, 0, 250000, 1500000 },  /* back: as at +1.5 s */
        { T0 + 200000, 1, 0, 0, 250000, 1500000 },  /* back two windows: still +1.5 s */
        { T0 + 1750000, 1, 1, 0, 0, 1250000 },  /* ok: 4 x 0.25 + 2 + 1 = 4 */
        { T0 + 1750000, 1, 0, 0, 250000, 1250000 },
        END } },
    /* large counts: products prev x (period - elapsed) beyond 2^32 */
    { "sliding window: 10 MiB/s of bytes", SW, 10485760, 1000000, 1, {
        { T0, 10420224, 1, 65536, 0, 2000000 },
        { T0 + 999999, 65536, 1, 0, 0, 1000001 },
        { T0 + 999999, 1, 0, 0, 2, 1000001 },
        { T0 + 1000001, 65536, 0, 10, 6249, 999999 },
        { T0 + 1006250, 65536, 1, 0, 0, 1993750 },
        { T0 + 1006251, 65536, 0, 10, 6249, 1993749 },
        { T0 + 3000000, 10485760, 1, 0, 0, 2000000 },
        END } },
    /* prev x (period - elapsed) far beyond 2^53: the long multiplication path in Lua */
    { "sliding window: a trillion per year (exact 128-bit products)", SW, 1000000000000ULL, 31536000000000ULL, 1, {
        { T0 - 28598399999000ULL, 900000000000ULL, 1, 100000000000ULL, 0, 63071999999000ULL },
        { T0 + 6091200000000ULL, 100000000000ULL, 1, 90000000000ULL, 0, 59918400000000ULL },  /* 10% in: 9e11 x 0.9 = 8.1e11 + 1e11 */
        { T0 + 6091200000000ULL, 100000000000ULL, 0, 90000000000ULL, 350400000000ULL, 59918400000000ULL },  /* full: 9e11 x weight must fall to 8e11 */
        { T0 + 6441599999999ULL, 100000000000ULL, 0, 99999999999ULL, 1, 59568000000001ULL },  /* 1 us early */
        { T0 + 6441600000000ULL, 100000000000ULL, 1, 0, 0, 59568000000000ULL },
        { T0 + 18705600000000ULL, 300000000007ULL, 1, 49999999993ULL, 0, 47304000000000ULL },  /* 9e11 x 0.5 + 2e11 + 3e11 + 7 */
        { T0 + 18705600012345ULL, 1, 1, 50000000344ULL, 0, 47303999987655ULL },  /* prev x (period - elapsed) ~ 2^84 */
        { T0 + 66009600000000ULL, 1000000000000ULL, 1, 0, 0, 63072000000000ULL },  /* a whole window at once */
        END } },
    /* every event counts for exactly one period */
    { "sliding log: exact", SL, 3, 1000000, 1, {
        { T0, 1, 1, 2, 0, 1000000 },
        { T0 + 300000, 1, 1, 1, 0, 1000000 },
        { T0 + 600000, 1, 1, 0, 0, 1000000 },
        { T0 + 900000, 1, 0, 0, 100000, 700000 },  /* the first event leaves at T0 + 1 s */
        { T0 + 999999, 1, 0, 0, 1, 600001 },
        { T0 + 1000000, 1, 1, 0, 0, 1000000 },  /* an event at T0 counts until T0 + 1 s, exclusive */
        { T0 + 1000000, 1, 0, 0, 300000, 1000000 },  /* the next leaves at +1.3 s */
        { T0 + 1299999, 1, 0, 0, 1, 700001 },
        { T0 + 1300000, 1, 1, 0, 0, 1000000 },
        { T0 + 3000000, 3, 1, 0, 0, 1000000 },
        { T0 + 3000000, 0, 1, 0, 0, 1000000 },
        END } },
    /* a request of cost N adds N events; retry waits for the right one to leave */
    { "sliding log: cost N = N events", SL, 5, 1000000, 1, {
        { T0, 2, 1, 3, 0, 1000000 },
        { T0 + 100000, 2, 1, 1, 0, 1000000 },
        { T0 + 200000, 2, 0, 1, 800000, 900000 },  /* needs the 1st event gone: both at T0 */
        { T0 + 200000, 6, 0, 1, NEVER, 900000 },  /* more than amount: never */
        { T0 + 1000000, 3, 1, 0, 0, 1000000 },  /* 2 left from +100 ms */
        { T0 + 1100000, 3, 0, 2, 900000, 900000 },  /* the 2 at +100 ms left at +1.1 s: one of the 3 at +1 s must go */
        { T0 + 1100000, 2, 1, 0, 0, 1000000 },
        { T0 + 2000001, 5, 0, 3, 99999, 99999 },
        END } },
    /* an earlier now is the newest event's time */
    { "sliding log: time going backwards", SL, 2, 1000000, 1, {
        { T0 + 1000000, 1, 1, 1, 0, 1000000 },
        { T0, 1, 1, 0, 0, 1000000 },  /* back: recorded at +1 s, the newest event */
        { T0 + 500000, 1, 0, 0, 1000000, 1000000 },  /* full as at +1 s */
        { T0 + 2000000, 1, 1, 1, 0, 1000000 },
        { T0 + 2000000, 1, 1, 0, 0, 1000000 },
        END } },
    /* small times: the window start (now - period) is negative at first */
    { "sliding log: from time zero", SL, 2, 10, 1, {
        { 0, 1, 1, 1, 0, 10 },
        { 0, 1, 1, 0, 0, 10 },
        { 5, 1, 0, 0, 5, 5 },
        { 9, 1, 0, 0, 1, 1 },
        { 10, 1, 1, 1, 0, 10 },
        { 11, 2, 0, 1, 9, 9 },
        { 20, 1, 1, 1, 0, 10 },
        { 100, 2, 1, 0, 0, 10 },
        { 200, 0, 1, 2, 0, 0 },
        END } },
    /* after any idle time the log is empty */
    { "sliding log: long idle", SL, 3, 86400000000ULL, 1, {
        { T0, 3, 1, 0, 0, 86400000000ULL },
        { T0 + 86399999999ULL, 1, 0, 0, 1, 1 },
        { T0 + 1261440000000000ULL, 3, 1, 0, 0, 86400000000ULL },
        { T0 + 1261440000000000ULL, 1, 0, 0, 86400000000ULL, 86400000000ULL },
        END } },
};

#define SL_N_CASES (sizeof(sl_cases) / sizeof(sl_cases[0]))

#undef TB
#undef GC
#undef BUCKETS
#undef FW
#undef SW
#undef SL
#undef T0
#undef NEVER
#undef END

#endif

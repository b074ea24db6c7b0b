/* sluice — types of the rate-limiting algorithms (in-process versions).
 *
 * The same algorithms run as Lua scripts in the quota store (the files in lua/);
 * both follow one table of cases (tests/unit/limit/cases.h), so a limit
 * means the same with url = local and url = redis://. All arithmetic is in
 * integers: time in microseconds, buckets in "units" chosen per limit so
 * that the refill is exact (a token is period_us / g units and a microsecond
 * refills amount / g units, g = gcd(amount, period_us)); nothing drifts and
 * nothing is rounded except where a result is reported (docs/algorithms.md). */
#ifndef SL_LIMIT_ALGO_T_H
#define SL_LIMIT_ALGO_T_H

#include <stdint.h>

#include "conf/conf-t.h"

/* The parameters of one limit, as the algorithms see them. */
struct sl_algo_params {
    enum sl_algo algo;       /* which algorithm */
    uint64_t     amount;     /* rate: <amount> tokens ... */
    uint64_t     period_us;  /* ... per <period_us> microseconds (window length for windows) */
    uint64_t     burst;      /* bucket capacity (token_bucket, gcra); window algorithms use amount */
    uint64_t     max_wait_us;/* gcra only: > 0 makes a denied take a reservation when the
                                wait is at most this long (action = delay); 0 = never */
};

/* The outcome of one decision. */
struct sl_algo_result {
    int      allowed;        /* 1: the cost fits (now, or after <retry_after_us> when a
                                reservation was made); 0: over the limit */
    uint64_t remaining;      /* whole tokens left after this decision */
    uint64_t retry_after_us; /* when denied: wait this long before the cost would fit
                                (UINT64_MAX when it never can: cost > capacity); with a
                                reservation (max_wait_us), how long past max_wait_us;
                                when allowed: 0, or the reservation's wait */
    uint64_t reset_us;       /* time until the bucket is full / the window resets */
};

/* Per-bucket state of the in-process versions. A sliding log keeps its
 * events in a ring allocated on first use (at most <amount> entries). */
struct sl_algo_state {
    uint64_t  a;             /* token_bucket: units in the bucket; gcra: TAT, whole us;
                                windows: current count */
    uint64_t  b;             /* token_bucket: time of the last take; windows: current window start;
                                gcra: units per token (S) when stored */
    uint64_t  c;             /* token_bucket: units per token when <a> was stored;
                                gcra: TAT's fraction of a us, in units;
                                sliding_window: previous window's count */
    uint64_t  hw;            /* fixed_window, sliding_window: time of the last take (time
                                never runs backwards for the state); gcra: units refilled
                                per microsecond (K) when stored */
    uint64_t  burst;         /* gcra: the burst when stored (with S and K: the numbers) */
    uint64_t *log;           /* sliding_log: event times (ring), or NULL */
    uint32_t  log_head;      /* sliding_log: oldest event */
    uint32_t  log_n;         /* sliding_log: events in the ring */
    uint32_t  log_cap;       /* sliding_log: ring size */
    uint8_t   init;          /* state has been set up */
};

#endif

/* sluice — types of the adaptive concurrency controller and its admission
 * queue (docs/adaptive.md). Everything here is plain data: no clock, no
 * loop; times are nanoseconds on whatever monotonic clock the caller uses. */
#ifndef SL_SHAPE_ADAPT_T_H
#define SL_SHAPE_ADAPT_T_H

#include <stdint.h>

/* Shedding tiers: 0 is shed first; the highest tier present is served first
 * and shed last (a VIP identity, or a limit's `priority`). */
#define SL_ADAPT_TIERS 4

/* Entries of the controller's sliding minimum of latency (adapt.c). */
#define SL_ADAPT_LOWS 64

/* The controller's knobs. sl_adapt_params_default fills every field; a
 * caller changes what its configuration names. */
struct sl_adapt_params {
    uint32_t min_limit;        /* the limit never goes below (>= 1) */
    uint32_t max_limit;        /* ... nor above */
    uint32_t initial_limit;    /* where it starts (clamped to [min, max]) */
    double   smoothing;        /* weight of a window's new estimate (0 < s <= 1) */
    double   gradient_floor;   /* a window cuts the estimate by at most this factor */
    double   tolerance;        /* latency up to baseline * tolerance is no queueing */
    double   backoff;          /* overload signals in a window: limit *= backoff */
    double   allowance;        /* once latency shows queueing, the headroom is at
                                  most this many requests */
    uint64_t window_ns;        /* a window lasts at least this long ... */
    uint32_t window_samples;   /* ... and until it holds this many samples */
    uint64_t probe_ns;         /* the probe period: probes start when the wall clock
                                  crosses a multiple of it (every instance alike),
                                  if nothing confirmed the baseline since the last */
    uint64_t probe_skew_ns;    /* a probe counts only requests sent this long after
                                  it began: the clocks of instances that probe
                                  together differ by up to this much */
    double   probe_depth;      /* during a probe the limit is limit * depth */
    uint32_t probe_samples;    /* samples a probe averages */
    uint64_t probe_max_ns;     /* a probe gives up after this long */
    double   confirm;          /* a window whose mean is within baseline * (1 + confirm)
                                  confirms the baseline (no probe needed) */
    uint32_t queue_cap;        /* waiters the admission queue holds (0: none wait) */
    uint64_t queue_target_ns;  /* in a standing queue, wait at most this long;
                                  0 = the baseline (at least queue_target_min_ns) */
    uint64_t queue_target_min_ns; /* the resolution: no target is shorter, and an
                                  upstream latency below it is not queueing */
    uint64_t queue_interval_ns;/* a queue whose oldest waiter stayed past the target
                                  this long is standing; also the longest any waiter waits */
    uint64_t seed;             /* the PRNG of a fractional probe's pauses */
};

/* One request waiting for a place: embedded in whatever waits (a session),
 * so queueing allocates nothing. */
struct sl_adapt_waiter {
    struct sl_adapt_waiter *prev, *next; /* in its tier's list, oldest first */
    uint64_t since_ns;                   /* when it was queued */
    uint8_t  tier;                       /* 0 .. SL_ADAPT_TIERS - 1 */
    uint8_t  queued;                     /* in the queue now */
};

/* The admission queue: one list per tier, oldest at the head. */
struct sl_adaptq {
    struct sl_adapt_waiter *head[SL_ADAPT_TIERS];
    struct sl_adapt_waiter *tail[SL_ADAPT_TIERS];
    uint32_t n;                 /* waiters, all tiers */
    uint64_t above_ns;          /* since when its oldest waiter has been past the
                                   target without a break, as of the last change
                                   (0: it was within the target then) */
    uint64_t last_shed_ns;      /* when it last refused a waiter ... */
    uint8_t  has_shed;          /* ... if it ever did */
};

/* Why a request was refused (counted per reason). */
enum sl_adapt_reason {
    SL_ADAPT_SHED_FULL = 0,     /* the queue was full (and nothing lower could go) */
    SL_ADAPT_SHED_EVICTED,      /* pushed out of a full queue by a higher tier */
    SL_ADAPT_SHED_STANDING,     /* waited past the target in a standing queue */
    SL_ADAPT_SHED_MAXWAIT,      /* waited past the interval */
    SL_ADAPT_SHED_REASONS
};

/* The controller of one upstream as one worker sees it. */
struct sl_adapt {
    struct sl_adapt_params p;
    double   limit;             /* the estimate (fractional; the cap is its floor) */
    double   baseline_ns;       /* no-load latency: mean of unqueued samples; 0 = none yet */
    double   sampled_ns;        /* last window's mean latency */
    uint64_t confirmed_ns;      /* when a window last confirmed the baseline (or a probe set it) */
    uint64_t probe_after_ns;    /* a baseline confirmed less than this long ago may rise */
    int64_t  wall_off_ns;       /* wall clock minus the caller's clock (sl_adapt_wallclock) */
    uint64_t probe_next_wall;   /* the next wall-clock boundary at which to consider
                                   a probe (0: not computed yet) */
    uint8_t  probe_soon;        /* the next probe at the next short boundary */
    uint32_t inflight;          /* admitted, not yet released */
    uint32_t at_min;            /* consecutive windows that ended at min_limit */

    /* the current window */
    uint64_t win_start_ns;
    double   win_sum_ns;
    uint32_t win_n;
    uint32_t win_overload;      /* overload signals (timeouts, BUSY, 5xx) */
    uint32_t win_max_inflight;

    /* a probe (re-measuring the baseline) */
    uint8_t  probing;
    uint8_t  guessed;           /* the baseline is a busy first window's, or
                                   its first probe's */
    uint8_t  probe_clean;       /* in flight fell to the probe's cap: samples from now count */
    uint64_t probe_start_ns;
    uint64_t probe_clean_ns;
    uint64_t probe_pause_ns;    /* a fractional probe holds its cap at 0 until then
                                   (0: not pausing) */
    double   probe_sum_ns;
    uint32_t probe_n;

    uint64_t rng;               /* xorshift state for the pauses */

    /* the fleet's baseline (sl_adapt_fleet): the least of the baselines the
     * instances in front of this upstream published, until <fleet_until_ns> */
    double   fleet_ns;          /* 0: none */
    uint64_t fleet_until_ns;

    /* the least latency seen lately: a monotonic queue of (when, mean) of
     * windows and probes, the least at the head */
    struct { uint64_t t; double v; } low[SL_ADAPT_LOWS];
    uint8_t  low_h, low_n;

    struct sl_adaptq q;

    /* counters, for metrics */
    uint64_t n_samples, n_overload, n_probes, n_admitted, n_queued;
    uint64_t n_shed[SL_ADAPT_SHED_REASONS];
};

#endif

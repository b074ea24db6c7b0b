/* sluice — holding a small batch for more requests before it goes to a
 * pooled upstream connection (`upstream_pool_batch_wait`).
 *
 * Why: Redis spends its CPU per read, not per request (a read of one
 * request costs it several times what each of a batch of 15 does), and a
 * pooled connection's batch is what its clients sent since the last one
 * left. When the proxy runs on a CPU of its own, it forwards each request
 * almost as soon as it comes: Redis, woken for every few requests, reads
 * 2-3 at a time and, sharing its CPU with the clients' process, takes
 * that CPU from them (docs/benchmarks.md, sixth round). Holding a batch
 * that is still small for a few tens of µs lets the requests of the other
 * clients join it, as Nagle's algorithm and Envoy's buffer_flush_timeout
 * do for bytes.
 *
 * The rule: a batch of fewer than SL_GATHER_MAX requests that may leave
 * (nothing of its connection's is in flight) is held for up to `wait`;
 * it leaves at once when it reaches SL_GATHER_MAX, else when the wait is
 * over. A hold that gained fewer than SL_GATHER_GAIN requests did not pay
 * (one client, or a few in turn: nobody else was going to send): the
 * holds are a habit (net/habit.h), SL_GATHER_BAD of the last
 * SL_GATHER_WINDOW that did not pay stop them for 100 ms, doubling up to
 * 5 s. A single client thus pays the wait on a few requests every few
 * seconds, not on each.
 *
 * The decisions take `now` (monotonic µs) and read no clock; the loop's
 * side (a timerfd: libuv's timers count milliseconds) is below. */
#ifndef SL_NET_GATHER_H
#define SL_NET_GATHER_H

#include <stdint.h>
#include <uv.h>

#include "net/habit-t.h"

#define SL_GATHER_MAX        16      /* a batch this large leaves at once */
#define SL_GATHER_GAIN       2       /* a hold that gained fewer did not pay */
#define SL_GATHER_WINDOW     16      /* the last holds judged together */
#define SL_GATHER_BAD        8       /* ... of them that did not pay: a back-off */
#define SL_GATHER_BACKOFF_MIN_US 100000   /* the first back-off */
#define SL_GATHER_BACKOFF_MAX_US 5000000  /* the longest; and the calm that resets it */

/* 1 when a batch of <batch> requests that may leave at <now> is held
 * instead, <wait_us> being the configured wait (0: never held). */
int sl_gather_hold(const struct sl_habit *h, uint64_t wait_us, uint64_t now, uint32_t batch);

/* 1 when a batch held until <until> has <batch> requests at <now>: it leaves. */
int sl_gather_over(uint64_t now, uint64_t until, uint32_t batch);

/* A hold ended with <gained> requests more than it began with. Returns 1
 * when this starts a back-off. */
int sl_gather_judge(struct sl_habit *h, uint64_t now, uint32_t gained);

/* ---- the loop's side --------------------------------------------------------
 * One timer per pool, armed for the earliest hold's end. Made on first use
 * (sl_gather_timer_arm), so a pool that never holds has no descriptor. */
struct sl_gather_timer {
    uv_poll_t poll;      /* on the timerfd; data = the caller's */
    int       fd;        /* -1: not made */
    uint8_t   closing;
    uint64_t  armed;     /* the time it fires (µs, monotonic), 0: not armed */
    void    (*fired)(struct sl_gather_timer *t);
    void    (*done)(struct sl_gather_timer *t); /* its handle closed */
    void     *data;
};

void sl_gather_timer_init(struct sl_gather_timer *t, void (*fired)(struct sl_gather_timer *t),
                          void *data);
/* Fires at <at> (µs, sl_clock_mono) or earlier if armed so already.
 * Returns 0, or -1 when no timer could be made (the caller does not hold). */
int sl_gather_timer_arm(struct sl_gather_timer *t, uv_loop_t *loop, uint64_t at);
/* Closes it; <done>(t) once its handle is closed (at once when none was made:
 * returns 0 then, 1 when <done> will be called). */
int sl_gather_timer_close(struct sl_gather_timer *t, void (*done)(struct sl_gather_timer *t));

#endif

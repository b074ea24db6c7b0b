/* sluice — the wait heap: timers for delay queues.
 *
 * A parked session (its next request reserved a place in a bucket's
 * future), a byte meter waiting for its tokens, a connection in the login
 * queue: each waits until a time. They are many and mostly short, so they
 * share one libuv timer per loop and a binary heap of embedded waiters:
 * a waiter costs 24 bytes and O(log n) to add or remove, no handle, no
 * thread, no polling. Times are microseconds on the clock it is given
 * (core/clock.h; the server's, shared with the limiter); the timer is re-armed for the earliest waiter with
 * millisecond resolution, rounded up, so nothing fires early. */
#ifndef SL_SHAPE_WAIT_H
#define SL_SHAPE_WAIT_H

#include "shape/wait-t.h"

/* Sets up <ws> on <loop>, reading <clock> (NULL: sl_clock_mono). */
void sl_waits_init(struct sl_waits *ws, uv_loop_t *loop, const struct sl_clock *clock);

/* Now on <ws>'s clock (microseconds). */
uint64_t sl_waits_now(const struct sl_waits *ws);

/* Closes the timer and forgets every waiter (their callbacks never run). */
void sl_waits_close(struct sl_waits *ws);

/* Makes <w> fire <cb>(w) at <due_us> (moving it if it already waits).
 * Returns 0, or -1 when out of memory (then <w> does not wait). */
int sl_wait_at(struct sl_waits *ws, struct sl_wait *w, uint64_t due_us, sl_wait_cb *cb);

/* Takes <w> out (no-op when it is not waiting). */
void sl_wait_cancel(struct sl_waits *ws, struct sl_wait *w);

/* Runs every waiter due at <now_us> (the timer calls it; tests too). */
void sl_waits_run(struct sl_waits *ws, uint64_t now_us);

/* The process's heap (one loop): set up by the server at start. */
extern struct sl_waits *sl_waits_default;

static inline int sl_waiting(const struct sl_wait *w)
{
    return w->idx != 0;
}

#endif

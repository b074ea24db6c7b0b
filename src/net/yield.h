/* sluice — yielding the CPU at the end of a pooled loop turn, while it is cheap.
 *
 * Why: a pooled listener batches what its clients send onto a few upstream
 * connections, and the batch Redis reads is what the clients sent while
 * the last one was in flight. When the clients' process shares the
 * proxy's CPU, a proxy that goes to sleep after writing replies is woken
 * by the first request written back, preempts the writer, and forwards
 * that one alone: small batches, and a sleep and a wake-up a few requests
 * (docs/benchmarks.md, fourth and fifth rounds). sched_yield() at the end
 * of the turn lets the woken clients run to the end of their own turn
 * first, so the next turn reads all they sent; after a batch written, a
 * Redis that shares the CPU answers it before the proxy sleeps.
 *
 * Why only while cheap: beside a CPU-bound process the yield hands it the
 * CPU for its whole slice (milliseconds), a delay no request gains from.
 * The time a yield takes does not tell the two apart by itself (clients
 * sharing the CPU take as long to answer a large batch), but what came
 * during it does: a yield is **expensive** when it took longer than
 * SL_YIELD_BASE_US plus SL_YIELD_PER_REQ_US per request that the next turn
 * received. Beside clients alone, about 1 yield in 200 is (a kernel thread
 * or another process took the CPU meanwhile); beside a CPU-bound process,
 * 1 in 3. SL_YIELD_EXPENSIVE of the last SL_YIELD_WINDOW start a back-off
 * (net/habit.h): no yield for 1 s, doubling at each back-off up to 60 s,
 * back to 1 s once 60 s have passed since a back-off ended without another.
 *
 * The decision takes `now` (monotonic µs) as an argument and reads no
 * clock; sl_yield_turn_end() is where the loop measures. */
#ifndef SL_NET_YIELD_H
#define SL_NET_YIELD_H

#include <stdint.h>

#include "net/habit-t.h"

#define SL_YIELD_BASE_US        200      /* a yield this short is cheap whatever came */
#define SL_YIELD_PER_REQ_US     20       /* ... and this much more per request that came */
#define SL_YIELD_WINDOW         16       /* the last yields judged together */
#define SL_YIELD_EXPENSIVE      4        /* expensive ones among them that back off */
#define SL_YIELD_BACKOFF_MIN_US 1000000  /* the first back-off */
#define SL_YIELD_BACKOFF_MAX_US 60000000 /* the longest; and the calm that resets it */

/* 1 when a yield that took <took_us> and was followed by <arrived>
 * requests was expensive. */
int sl_yield_expensive(uint64_t took_us, uint64_t arrived);

/* 1 when <y> may yield at <now>: no back-off under way. */
int sl_yield_due(const struct sl_habit *y, uint64_t now);

/* <y> yielded; the yield took <took_us> and <arrived> requests came in the
 * turn after it; <now> is the time this is known. Returns 1 when this
 * starts a back-off (sl_yield_due is 0 until it is over). */
int sl_yield_judge(struct sl_habit *y, uint64_t now, uint64_t took_us, uint64_t arrived);

/* The loop's side (one state per process: each worker is one).
 * sl_yield_pooled: this turn did pooled work (<requests> submitted to a
 * pooled connection, 0 for a write or a read of one); only such turns
 * yield, so 1:1 listeners never make the system call.
 * sl_yield_turn_end: the turn's end, before the loop may sleep. */
void sl_yield_pooled(uint32_t requests);
void sl_yield_turn_end(void);

#endif

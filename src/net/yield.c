/* sluice — yielding the CPU at the end of a pooled loop turn, while it is
 * cheap (yield.h). */
#include <sched.h>

#include "core/clock.h"
#include "core/log.h"
#include "net/yield.h"

int sl_yield_expensive(uint64_t took_us, uint64_t arrived)
{
    /* Clients sharing the CPU spend some µs of their own on each request
     * they send (a load generator 6-10): a yield they used took about
     * that per request it brought. A CPU-bound neighbour's slice brings
     * none, or the few a client on another CPU sent meanwhile. */
    if (arrived > (UINT64_MAX - SL_YIELD_BASE_US) / SL_YIELD_PER_REQ_US)
        return 0;
    return took_us > SL_YIELD_BASE_US + arrived * SL_YIELD_PER_REQ_US;
}

int sl_yield_due(const struct sl_yield *y, uint64_t now)
{
    return now >= y->off_until;
}

_Static_assert(SL_YIELD_WINDOW == 16, "struct sl_yield's <recent> holds 16 yields");

static int popcount16(uint16_t v)
{
    int n = 0;
    for (; v != 0; v &= (uint16_t)(v - 1))
        n++;
    return n;
}

int sl_yield_judge(struct sl_yield *y, uint64_t now, uint64_t took_us, uint64_t arrived)
{
    /* calm for as long as the longest back-off since the last one ended:
     * whatever took the CPU then is gone, start again from the shortest */
    if (y->backoff != 0 && now >= y->off_until + SL_YIELD_BACKOFF_MAX_US)
        y->backoff = 0;
    y->recent = (uint16_t)(y->recent << 1 | (sl_yield_expensive(took_us, arrived) ? 1 : 0));
    /* a few expensive yields may be anything that ran once (a kernel
     * thread, a short job); a CPU-bound neighbour makes them often */
    if (popcount16(y->recent) < SL_YIELD_EXPENSIVE)
        return 0;
    y->backoff = y->backoff == 0 ? SL_YIELD_BACKOFF_MIN_US
               : y->backoff >= SL_YIELD_BACKOFF_MAX_US / 2 ? SL_YIELD_BACKOFF_MAX_US
               : y->backoff * 2;
    y->off_until = now + y->backoff;
    y->recent = 0; /* after the back-off, judged afresh */
    return 1;
}

/* ---- the loop's side ------------------------------------------------------- */

static struct sl_yield proc;
static uint8_t  worked;    /* this turn did pooled work */
static uint8_t  judging;   /* the last turn yielded: judge it at this one's end */
static uint64_t took;      /* how long that yield took (µs) */
static uint64_t arrived;   /* requests submitted since */

void sl_yield_pooled(uint32_t requests)
{
    worked = 1;
    arrived += requests;
}

void sl_yield_turn_end(void)
{
    if (!worked)
        return;
    worked = 0;
    /* a clock of its own, not the turn's: the turn began before its work */
    uint64_t now = sl_clock_us(&sl_clock_mono);
    if (judging) {
        judging = 0;
        if (sl_yield_judge(&proc, now, took, arrived))
            sl_log_debug("pooled turns stop yielding", "for_ms=%llu took_us=%llu arrived=%llu",
                         (unsigned long long)(proc.backoff / 1000), (unsigned long long)took,
                         (unsigned long long)arrived);
    }
    arrived = 0;
    if (!sl_yield_due(&proc, now))
        return;
    (void)sched_yield();
    took = sl_clock_us(&sl_clock_mono) - now;
    judging = 1;
}

/* sluice — yielding the CPU at the end of a pooled loop turn, while it is
 * cheap (yield.h). */
#include <sched.h>

#include "core/clock.h"
#include "core/log.h"
#include "net/habit.h"
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

static const struct sl_habit_rule rule = {
    .window = SL_YIELD_WINDOW, .bad = SL_YIELD_EXPENSIVE,
    .min_us = SL_YIELD_BACKOFF_MIN_US, .max_us = SL_YIELD_BACKOFF_MAX_US,
};

int sl_yield_due(const struct sl_habit *y, uint64_t now)
{
    return sl_habit_due(y, now);
}

int sl_yield_judge(struct sl_habit *y, uint64_t now, uint64_t took_us, uint64_t arrived)
{
    return sl_habit_judge(y, &rule, now, sl_yield_expensive(took_us, arrived));
}

/* ---- the loop's side ------------------------------------------------------- */

static struct sl_habit proc;
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

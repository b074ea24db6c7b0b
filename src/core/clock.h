/* sluice — the clock time-dependent logic reads.
 *
 * One object, passed in: the server makes one (monotonic microseconds) and
 * hands it to the limiter and the wait queue, so every decision and every
 * wait reads the same time; tests hand in a clock they move by hand
 * (struct sl_clock embedded in their own struct, now_us reading it). */
#ifndef SL_CORE_CLOCK_H
#define SL_CORE_CLOCK_H

#include <stdint.h>

struct sl_clock {
    uint64_t (*now_us)(const struct sl_clock *c); /* microseconds, never going back */
};

static inline uint64_t sl_clock_us(const struct sl_clock *c)
{
    return c->now_us(c);
}

/* libuv's monotonic clock (uv_hrtime) in microseconds. */
extern const struct sl_clock sl_clock_mono;

#endif

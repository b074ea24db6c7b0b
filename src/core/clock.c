/* sluice — the monotonic clock (core/clock.h). */
#include "core/clock.h"

#include <uv.h>

static uint64_t mono_now(const struct sl_clock *c)
{
    (void)c;
    return uv_hrtime() / 1000;
}

const struct sl_clock sl_clock_mono = { mono_now };

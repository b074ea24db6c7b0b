/* sluice — the state of yielding the CPU at a pooled turn's end (yield.h). */
#ifndef SL_NET_YIELD_T_H
#define SL_NET_YIELD_T_H

#include <stdint.h>

struct sl_yield {
    uint64_t off_until; /* no yield before this time (µs): a back-off */
    uint64_t backoff;   /* the last back-off's length (µs); 0: none since the reset */
    uint16_t recent;    /* the last 16 yields judged (SL_YIELD_WINDOW), one bit
                           each, 1 = expensive (bit 0 the latest) */
};

#endif

/* sluice — the state of a habit kept while it pays (habit.h). */
#ifndef SL_NET_HABIT_T_H
#define SL_NET_HABIT_T_H

#include <stdint.h>

struct sl_habit {
    uint64_t off_until; /* not before this time (µs): a back-off */
    uint64_t backoff;   /* the last back-off's length (µs); 0: none since the reset */
    uint16_t recent;    /* the last outcomes judged, one bit each, 1 = bad (bit 0 the
                           latest); only the rule's <window> lowest bits count */
};

/* When a habit stops, and for how long. */
struct sl_habit_rule {
    uint8_t  window; /* the last outcomes judged together, 1-16 */
    uint8_t  bad;    /* bad ones among them that start a back-off, 1-window */
    uint64_t min_us; /* the first back-off */
    uint64_t max_us; /* the longest; and the calm after one that resets the doubling */
};

#endif

/* sluice — types of the wait heap (delay queues' timers). */
#ifndef SL_SHAPE_WAIT_T_H
#define SL_SHAPE_WAIT_T_H

#include <stdint.h>
#include <uv.h>

struct sl_clock;

struct sl_wait;
typedef void sl_wait_cb(struct sl_wait *w);

/* One waiter, embedded in whatever waits (a parked session, a meter). */
struct sl_wait {
    uint64_t    due_us; /* when it fires (the caller's clock, microseconds) */
    uint32_t    idx;    /* place in the heap + 1; 0 = not waiting */
    sl_wait_cb *cb;     /* called once when due */
};

/* Every waiter of one loop: a binary min-heap on due_us, driven by one libuv
 * timer armed for the earliest. */
struct sl_waits {
    uv_timer_t       timer;  /* fires at the earliest due time */
    struct sl_wait **heap;   /* heap[0] is the earliest */
    uint32_t         n;      /* waiters */
    uint32_t         cap;    /* heap room */
    uint8_t          armed;  /* timer running */
    const struct sl_clock *clock; /* microseconds (core/clock.h); tests inject one */
};

#endif

/* sluice — holding a small pooled batch for more requests (gather.h). */
#include <stddef.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "net/gather.h"
#include "net/habit.h"

static const struct sl_habit_rule rule = {
    .window = SL_GATHER_WINDOW, .bad = SL_GATHER_BAD,
    .min_us = SL_GATHER_BACKOFF_MIN_US, .max_us = SL_GATHER_BACKOFF_MAX_US,
};

int sl_gather_hold(const struct sl_habit *h, uint64_t wait_us, uint64_t now, uint32_t batch)
{
    return wait_us > 0 && batch > 0 && batch < SL_GATHER_MAX && sl_habit_due(h, now);
}

int sl_gather_over(uint64_t now, uint64_t until, uint32_t batch)
{
    return batch >= SL_GATHER_MAX || now >= until;
}

int sl_gather_judge(struct sl_habit *h, uint64_t now, uint32_t gained)
{
    return sl_habit_judge(h, &rule, now, gained < SL_GATHER_GAIN);
}

/* ---- the loop's side ------------------------------------------------------- */

static void on_poll(uv_poll_t *p, int status, int events)
{
    (void)status;
    (void)events;
    struct sl_gather_timer *t = p->data;
    uint64_t n;
    /* nonblocking: EAGAIN when it was re-armed after it fired */
    if (read(t->fd, &n, sizeof(n)) < 0 && t->armed == 0)
        return;
    t->armed = 0;
    t->fired(t);
}

void sl_gather_timer_init(struct sl_gather_timer *t, void (*fired)(struct sl_gather_timer *t),
                          void *data)
{
    t->fd = -1;
    t->closing = 0;
    t->armed = 0;
    t->fired = fired;
    t->done = NULL;
    t->data = data;
}

int sl_gather_timer_arm(struct sl_gather_timer *t, uv_loop_t *loop, uint64_t at)
{
    if (t->closing)
        return -1;
    if (t->fd < 0) {
        int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (fd < 0)
            return -1;
        if (uv_poll_init(loop, &t->poll, fd) < 0) {
            close(fd);
            return -1;
        }
        t->fd = fd;
        t->poll.data = t;
        uv_poll_start(&t->poll, UV_READABLE, on_poll);
        uv_unref((uv_handle_t *)&t->poll); /* the connections keep the loop alive */
    }
    if (t->armed != 0 && t->armed <= at)
        return 0;
    /* absolute, on the clock sl_clock_mono reads (uv_hrtime: CLOCK_MONOTONIC) */
    struct itimerspec its = { .it_value = { .tv_sec = (time_t)(at / 1000000),
                                            .tv_nsec = (long)(at % 1000000) * 1000 } };
    if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
        its.it_value.tv_nsec = 1; /* zero would disarm it */
    if (timerfd_settime(t->fd, TFD_TIMER_ABSTIME, &its, NULL) < 0)
        return -1;
    t->armed = at;
    return 0;
}

static void on_closed(uv_handle_t *h)
{
    struct sl_gather_timer *t = h->data;
    close(t->fd);
    t->fd = -1;
    if (t->done != NULL)
        t->done(t);
}

int sl_gather_timer_close(struct sl_gather_timer *t, void (*done)(struct sl_gather_timer *t))
{
    t->closing = 1;
    t->armed = 0;
    if (t->fd < 0)
        return 0;
    t->done = done;
    t->poll.data = t;
    uv_close((uv_handle_t *)&t->poll, on_closed);
    return 1;
}

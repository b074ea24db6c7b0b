/* sluice — the wait heap (see wait.h). */
#include <stdlib.h>

#include "core/clock.h"
#include "shape/wait.h"

struct sl_waits *sl_waits_default;

uint64_t sl_waits_now(const struct sl_waits *ws)
{
    return sl_clock_us(ws->clock);
}

static void put(struct sl_waits *ws, uint32_t i, struct sl_wait *w)
{
    ws->heap[i] = w;
    w->idx = i + 1;
}

static void up(struct sl_waits *ws, uint32_t i)
{
    struct sl_wait *w = ws->heap[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (ws->heap[p]->due_us <= w->due_us)
            break;
        put(ws, i, ws->heap[p]);
        i = p;
    }
    put(ws, i, w);
}

static void down(struct sl_waits *ws, uint32_t i)
{
    struct sl_wait *w = ws->heap[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= ws->n)
            break;
        if (c + 1 < ws->n && ws->heap[c + 1]->due_us < ws->heap[c]->due_us)
            c++;
        if (w->due_us <= ws->heap[c]->due_us)
            break;
        put(ws, i, ws->heap[c]);
        i = c;
    }
    put(ws, i, w);
}

static void on_timer(uv_timer_t *t);

/* Arms the timer for the earliest waiter, or stops it. */
static void rearm(struct sl_waits *ws)
{
    if (ws->n == 0) {
        if (ws->armed)
            uv_timer_stop(&ws->timer);
        ws->armed = 0;
        return;
    }
    uint64_t now = sl_waits_now(ws), due = ws->heap[0]->due_us;
    uint64_t ms = due > now ? (due - now + 999) / 1000 : 0;
    /* The loop's own clock may lag the waiters' by up to a millisecond. */
    uv_update_time(ws->timer.loop);
    uv_timer_start(&ws->timer, on_timer, ms, 0);
    ws->armed = 1;
}

static void take_out(struct sl_waits *ws, struct sl_wait *w)
{
    uint32_t i = w->idx - 1;
    w->idx = 0;
    ws->n--;
    if (i == ws->n)
        return;
    put(ws, i, ws->heap[ws->n]);
    if (i > 0 && ws->heap[(i - 1) / 2]->due_us > ws->heap[i]->due_us)
        up(ws, i);
    else
        down(ws, i);
}

void sl_waits_run(struct sl_waits *ws, uint64_t now_us)
{
    while (ws->n > 0 && ws->heap[0]->due_us <= now_us) {
        struct sl_wait *w = ws->heap[0];
        take_out(ws, w);
        w->cb(w); /* may add or cancel waiters */
    }
}

static void on_timer(uv_timer_t *t)
{
    struct sl_waits *ws = t->data;
    ws->armed = 0;
    sl_waits_run(ws, sl_waits_now(ws));
    rearm(ws);
}

void sl_waits_init(struct sl_waits *ws, uv_loop_t *loop, const struct sl_clock *clock)
{
    ws->heap = NULL;
    ws->n = ws->cap = 0;
    ws->armed = 0;
    ws->clock = clock ? clock : &sl_clock_mono;
    uv_timer_init(loop, &ws->timer);
    ws->timer.data = ws;
    uv_unref((uv_handle_t *)&ws->timer); /* waiters never keep the loop alive alone */
}

void sl_waits_close(struct sl_waits *ws)
{
    for (uint32_t i = 0; i < ws->n; i++)
        ws->heap[i]->idx = 0;
    free(ws->heap);
    ws->heap = NULL;
    ws->n = ws->cap = 0;
    if (!uv_is_closing((uv_handle_t *)&ws->timer))
        uv_close((uv_handle_t *)&ws->timer, NULL);
}

int sl_wait_at(struct sl_waits *ws, struct sl_wait *w, uint64_t due_us, sl_wait_cb *cb)
{
    w->cb = cb;
    if (w->idx != 0) {
        uint32_t i = w->idx - 1;
        uint64_t old = w->due_us;
        w->due_us = due_us;
        if (due_us < old)
            up(ws, i);
        else
            down(ws, i);
    } else {
        if (ws->n == ws->cap) {
            uint32_t cap = ws->cap ? ws->cap * 2 : 64;
            struct sl_wait **nh = realloc(ws->heap, cap * sizeof(*nh));
            if (nh == NULL)
                return -1;
            ws->heap = nh;
            ws->cap = cap;
        }
        w->due_us = due_us;
        put(ws, ws->n++, w);
        up(ws, ws->n - 1);
    }
    if (ws->heap[0] == w || !ws->armed)
        rearm(ws);
    return 0;
}

void sl_wait_cancel(struct sl_waits *ws, struct sl_wait *w)
{
    if (w->idx == 0)
        return;
    int was_first = w->idx == 1;
    take_out(ws, w);
    if (was_first)
        rearm(ws);
}

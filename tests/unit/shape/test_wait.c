/* sluice unit tests — the wait heap (src/shape/wait.c), with an injected
 * clock: waiters fire in due order, once, never early; moving and
 * cancelling keep the heap whole; a callback may add and cancel waiters;
 * the libuv timer really fires the earliest one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "shape/wait.h"

static uint64_t fake_now;
static uint64_t fake_clock_now(const struct sl_clock *c)
{
    (void)c;
    return fake_now;
}
static const struct sl_clock fake_clock = { fake_clock_now };

#define N 1000
static struct sl_wait ws_[N];
static int fired[N], order[N], n_fired;

static void on_fire(struct sl_wait *w)
{
    int i = (int)(w - ws_);
    fired[i]++;
    order[n_fired++] = i;
}

static void reset(void)
{
    memset(ws_, 0, sizeof(ws_));
    memset(fired, 0, sizeof(fired));
    n_fired = 0;
}

static void test_fires_in_due_order(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_waits ws;
    sl_waits_init(&ws, &loop, &fake_clock);
    reset();
    srand(7);
    for (int i = 0; i < N; i++)
        assert_int_equal(sl_wait_at(&ws, &ws_[i], 1000 + (uint64_t)(rand() % 100000), on_fire), 0);
    /* move some, cancel some */
    for (int i = 0; i < N; i += 7)
        sl_wait_at(&ws, &ws_[i], 1000 + (uint64_t)(rand() % 100000), on_fire);
    for (int i = 3; i < N; i += 10)
        sl_wait_cancel(&ws, &ws_[i]);
    for (uint64_t t = 0; t <= 101000 + 997; t += 997) {
        fake_now = t;
        sl_waits_run(&ws, t);
        for (int k = 0; k < n_fired; k++)
            assert_true(ws_[order[k]].due_us <= t); /* never early */
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(fired[i], (i % 10 == 3) ? 0 : 1);
    for (int k = 1; k < n_fired; k++)
        assert_true(ws_[order[k - 1]].due_us <= ws_[order[k]].due_us);
    sl_waits_close(&ws);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
}

static struct sl_waits *g_ws;
static void on_fire_chain(struct sl_wait *w)
{
    int i = (int)(w - ws_);
    fired[i]++;
    order[n_fired++] = i;
    if (i == 0) {
        sl_wait_at(g_ws, &ws_[5], fake_now, on_fire);      /* due now: runs in this pass */
        sl_wait_cancel(g_ws, &ws_[1]);                     /* cancelled before its time */
    }
}

static void test_callbacks_may_add_and_cancel(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_waits ws;
    sl_waits_init(&ws, &loop, &fake_clock);
    g_ws = &ws;
    reset();
    fake_now = 0;
    sl_wait_at(&ws, &ws_[0], 10, on_fire_chain);
    sl_wait_at(&ws, &ws_[1], 20, on_fire_chain);
    fake_now = 15;
    sl_waits_run(&ws, 15);
    assert_int_equal(fired[0], 1);
    assert_int_equal(fired[5], 1);
    assert_int_equal(fired[1], 0);
    assert_false(sl_waiting(&ws_[1]));
    fake_now = 100;
    sl_waits_run(&ws, 100);
    assert_int_equal(fired[1], 0);
    sl_waits_close(&ws);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
}

static void test_timer_fires(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_waits ws;
    sl_waits_init(&ws, &loop, NULL); /* the real clock */
    reset();
    uint64_t t0 = uv_hrtime() / 1000;
    sl_wait_at(&ws, &ws_[1], t0 + 30000, on_fire);
    sl_wait_at(&ws, &ws_[0], t0 + 10000, on_fire);
    uv_ref((uv_handle_t *)&ws.timer); /* keep the loop running for the test */
    while (n_fired < 2)
        uv_run(&loop, UV_RUN_ONCE);
    uint64_t t1 = uv_hrtime() / 1000;
    assert_int_equal(order[0], 0);
    assert_int_equal(order[1], 1);
    assert_true(t1 >= t0 + 30000);
    sl_waits_close(&ws);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fires_in_due_order),
        cmocka_unit_test(test_callbacks_may_add_and_cancel),
        cmocka_unit_test(test_timer_fires),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

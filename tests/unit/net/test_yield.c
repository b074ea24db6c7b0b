/* Yielding the CPU at a pooled turn's end while it is cheap (src/net/yield.c):
 * what counts as expensive, the back-off that SL_YIELD_EXPENSIVE expensive
 * yields among the last SL_YIELD_WINDOW start, its doubling up to the cap, its reset after a calm
 * period, and a fresh judgement after each back-off. Time is handed in;
 * no clock, no loop, no sockets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "net/yield.h"

#define S 1000000ULL /* one second in µs */

/* a yield that a CPU-bound neighbour took: 3 ms, nothing came */
#define HOG_US 3000
/* one that clients sharing the CPU used: 2 ms, 200 requests came */
#define PEER_US 2000
#define PEER_REQ 200

static void test_expensive(void **state)
{
    (void)state;
    /* short: cheap whatever came */
    assert_false(sl_yield_expensive(0, 0));
    assert_false(sl_yield_expensive(SL_YIELD_BASE_US, 0));
    assert_true(sl_yield_expensive(SL_YIELD_BASE_US + 1, 0));
    /* long, but paid for by what came */
    assert_false(sl_yield_expensive(SL_YIELD_BASE_US + 10 * SL_YIELD_PER_REQ_US, 10));
    assert_true(sl_yield_expensive(SL_YIELD_BASE_US + 10 * SL_YIELD_PER_REQ_US + 1, 10));
    assert_false(sl_yield_expensive(PEER_US, PEER_REQ));
    assert_true(sl_yield_expensive(HOG_US, 0));
    assert_true(sl_yield_expensive(HOG_US, 20)); /* a client on the other CPU sent some */
    /* no overflow with absurd counts */
    assert_false(sl_yield_expensive(UINT64_MAX, UINT64_MAX));
}

static void test_cheap_never_backs_off(void **state)
{
    (void)state;
    struct sl_habit y = { 0 };
    uint64_t now = 5 * S;
    for (int i = 0; i < 100000; i++, now += 2500) {
        assert_true(sl_yield_due(&y, now));
        assert_false(sl_yield_judge(&y, now, i % 2 ? PEER_US : 1, i % 2 ? PEER_REQ : 0));
    }
    assert_int_equal(y.backoff, 0);
}

static void test_few_expensive_are_not_enough(void **state)
{
    (void)state;
    struct sl_habit y = { 0 };
    uint64_t now = 5 * S;
    /* one fewer than the count in every window: never backs off */
    for (int i = 0; i < 1600; i++, now += 1000)
        assert_false(sl_yield_judge(&y, now,
                                    i % SL_YIELD_WINDOW < SL_YIELD_EXPENSIVE - 1 ? HOG_US : 1, 0));
    /* as many as the count, spread over the window: backs off at the last */
    for (int i = 0; i < SL_YIELD_WINDOW - 1; i++, now += 1000)
        assert_false(sl_yield_judge(&y, now, i % 5 == 0 && i < 5 * (SL_YIELD_EXPENSIVE - 1)
                                             ? HOG_US : 1, 0));
    assert_true(sl_yield_judge(&y, now, HOG_US, 0));
}

/* Expensive yields until it backs off; returns when the back-off ends. */
static uint64_t hog_until_backoff(struct sl_habit *y, uint64_t now)
{
    for (int i = 0; i < SL_YIELD_WINDOW; i++, now += HOG_US) {
        assert_true(sl_yield_due(y, now));
        if (sl_yield_judge(y, now, HOG_US, 0))
            return y->off_until;
    }
    fail_msg("no back-off after a window of expensive yields");
    return 0;
}

static void test_backoff_doubles_to_cap(void **state)
{
    (void)state;
    struct sl_habit y = { 0 };
    uint64_t now = 5 * S;
    uint64_t want = 1 * S;
    for (int round = 0; round < 10; round++) {
        uint64_t start = now;
        assert_false(sl_yield_judge(&y, now, HOG_US, 0)); /* judged afresh: one is not enough */
        uint64_t end = hog_until_backoff(&y, now + HOG_US);
        assert_int_equal(y.backoff, want);
        /* the back-off started at the SL_YIELD_EXPENSIVE-th */
        assert_int_equal(end - (start + (SL_YIELD_EXPENSIVE - 1) * HOG_US), want);
        assert_false(sl_yield_due(&y, end - 1));
        assert_true(sl_yield_due(&y, end));
        now = end; /* tried again as soon as it is over */
        want = want * 2 > SL_YIELD_BACKOFF_MAX_US ? SL_YIELD_BACKOFF_MAX_US : want * 2;
    }
    assert_int_equal(y.backoff, SL_YIELD_BACKOFF_MAX_US); /* 1, 2, 4, ... 32, then 60 s */
}

static void test_calm_resets(void **state)
{
    (void)state;
    struct sl_habit y = { 0 };
    uint64_t now = hog_until_backoff(&y, 5 * S);
    now = hog_until_backoff(&y, now);
    now = hog_until_backoff(&y, now);
    assert_int_equal(y.backoff, 4 * S);
    /* yielding cheaply for less than the cap: the next back-off doubles */
    uint64_t calm_end = now + SL_YIELD_BACKOFF_MAX_US - 100000; /* 59.9 s */
    for (; now < calm_end; now += 100000)
        assert_false(sl_yield_judge(&y, now, PEER_US, PEER_REQ));
    now = hog_until_backoff(&y, now); /* judged at 59.9 s and a few ms later */
    assert_int_equal(y.backoff, 8 * S);
    /* for the cap or longer: back to the shortest */
    calm_end = now + SL_YIELD_BACKOFF_MAX_US; /* 60 s */
    for (; now <= calm_end; now += 100000)
        assert_false(sl_yield_judge(&y, now, PEER_US, PEER_REQ));
    hog_until_backoff(&y, now);
    assert_int_equal(y.backoff, 1 * S);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expensive),
        cmocka_unit_test(test_cheap_never_backs_off),
        cmocka_unit_test(test_few_expensive_are_not_enough),
        cmocka_unit_test(test_backoff_doubles_to_cap),
        cmocka_unit_test(test_calm_resets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

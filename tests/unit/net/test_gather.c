/* Holding a small pooled batch for more requests (src/net/gather.c): which
 * batches wait, when a held one leaves, and the judgement that stops the
 * holds when they gain nothing (one client, or a few in turn) and keeps
 * them while other clients' requests join. Time is handed in; no clock,
 * no loop, no sockets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "net/gather.h"
#include "net/habit.h"

#define WAIT 50

static void test_which_batches_wait(void **state)
{
    (void)state;
    struct sl_habit h = { 0 };
    assert_false(sl_gather_hold(&h, WAIT, 1000, 0));               /* nothing to send */
    assert_true(sl_gather_hold(&h, WAIT, 1000, 1));
    assert_true(sl_gather_hold(&h, WAIT, 1000, SL_GATHER_MAX - 1));
    assert_false(sl_gather_hold(&h, WAIT, 1000, SL_GATHER_MAX));   /* large enough */
    assert_false(sl_gather_hold(&h, 0, 1000, 1));                  /* wait = 0: never */
}

static void test_when_a_held_batch_leaves(void **state)
{
    (void)state;
    uint64_t until = 1000 + WAIT;
    assert_false(sl_gather_over(1000, until, 3));
    assert_false(sl_gather_over(until - 1, until, SL_GATHER_MAX - 1));
    assert_true(sl_gather_over(until, until, 3));                  /* the wait is over */
    assert_true(sl_gather_over(1001, until, SL_GATHER_MAX));       /* filled up */
}

/* One client: nothing joins its requests; the holds stop after
 * SL_GATHER_BAD of them, for the first back-off, then are tried again. */
static void test_one_client_stops_them(void **state)
{
    (void)state;
    struct sl_habit h = { 0 };
    uint64_t now = 5000000;
    int holds = 0;
    for (int i = 0; i < 1000; i++, now += 100) { /* a request every 100 µs for 0.1 s */
        if (!sl_gather_hold(&h, WAIT, now, 1))
            continue;
        holds++;
        sl_gather_judge(&h, now + WAIT, 0);
    }
    assert_int_equal(holds, SL_GATHER_BAD);
    assert_false(sl_gather_hold(&h, WAIT, now, 1));
    assert_true(sl_gather_hold(&h, WAIT, h.off_until, 1));
    /* two in turn: a hold gains the other's one request, not enough */
    for (int i = 0; i < SL_GATHER_BAD - 1; i++)
        assert_false(sl_gather_judge(&h, h.off_until, SL_GATHER_GAIN - 1));
    assert_true(sl_gather_judge(&h, h.off_until, SL_GATHER_GAIN - 1));
    assert_int_equal(h.backoff, 2 * SL_GATHER_BACKOFF_MIN_US);
}

/* Many clients: holds gain, with now and then one that does not (a lull):
 * they go on. */
static void test_many_clients_keep_them(void **state)
{
    (void)state;
    struct sl_habit h = { 0 };
    uint64_t now = 5000000;
    for (int i = 0; i < 10000; i++, now += 60) {
        assert_true(sl_gather_hold(&h, WAIT, now, 3));
        /* one hold in three gains nothing */
        assert_false(sl_gather_judge(&h, now + WAIT, i % 3 == 0 ? 0 : 6));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_which_batches_wait),
        cmocka_unit_test(test_when_a_held_batch_leaves),
        cmocka_unit_test(test_one_client_stops_them),
        cmocka_unit_test(test_many_clients_keep_them),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* A habit kept while it pays (src/net/habit.c), with a window shorter than
 * its 16 bits: only the last <window> outcomes count, <bad> of them start a
 * back-off that doubles up to the cap. (test_yield.c covers the 16-wide
 * rule the yield uses, the calm that resets the doubling included.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "net/habit.h"

static const struct sl_habit_rule rule8 = { .window = 8, .bad = 3, .min_us = 1000, .max_us = 4000 };

static void test_window_counts_only_the_last(void **state)
{
    (void)state;
    struct sl_habit h = { 0 };
    uint64_t now = 100;
    /* two bad ones, then eight good: they have left the window */
    assert_false(sl_habit_judge(&h, &rule8, now, 1));
    assert_false(sl_habit_judge(&h, &rule8, now, 1));
    for (int i = 0; i < 8; i++)
        assert_false(sl_habit_judge(&h, &rule8, now, 0));
    /* a bad one every 4: never three within 8 */
    for (int i = 0; i < 64; i++)
        assert_false(sl_habit_judge(&h, &rule8, now, i % 4 == 0));
    assert_true(sl_habit_due(&h, now));
    /* three within eight */
    assert_false(sl_habit_judge(&h, &rule8, now, 1));
    assert_false(sl_habit_judge(&h, &rule8, now, 0));
    assert_true(sl_habit_judge(&h, &rule8, now, 1));
    assert_false(sl_habit_due(&h, now + 999));
    assert_true(sl_habit_due(&h, now + 1000));
}

static void test_doubles_to_cap(void **state)
{
    (void)state;
    struct sl_habit h = { 0 };
    uint64_t now = 0, want = 1000;
    for (int round = 0; round < 5; round++) {
        assert_false(sl_habit_judge(&h, &rule8, now, 1)); /* judged afresh each time */
        assert_false(sl_habit_judge(&h, &rule8, now, 1));
        assert_true(sl_habit_judge(&h, &rule8, now, 1));
        assert_int_equal(h.backoff, want);
        now = h.off_until;
        want = want * 2 > 4000 ? 4000 : want * 2;
    }
    assert_int_equal(h.backoff, 4000);
    /* calm for the cap: the next starts from the shortest */
    for (int i = 0; i < 8; i++)
        assert_false(sl_habit_judge(&h, &rule8, now + 4000, 0));
    assert_false(sl_habit_judge(&h, &rule8, now + 4000, 1));
    assert_false(sl_habit_judge(&h, &rule8, now + 4000, 1));
    assert_true(sl_habit_judge(&h, &rule8, now + 4000, 1));
    assert_int_equal(h.backoff, 1000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_counts_only_the_last),
        cmocka_unit_test(test_doubles_to_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

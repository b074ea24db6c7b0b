/* Timeout queues and the chunk pool: pure data structures, fake clock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/buf.h"
#include "core/log.h"
#include "core/pool.h"
#include "core/tq.h"
#include <string.h>

static void test_tq_order_and_expiry(void **state)
{
    (void)state;
    struct sl_tq q = { 0 };
    struct sl_tq_node a = { 0 }, b = { 0 }, c = { 0 };
    sl_tq_touch(&q, &a, 100);
    sl_tq_touch(&q, &b, 200);
    sl_tq_touch(&q, &c, 300);
    assert_int_equal(q.n, 3);
    assert_null(sl_tq_expired(&q, 1099, 1000));     /* a touched at 100: due at 1100 */
    assert_ptr_equal(sl_tq_expired(&q, 1100, 1000), &a);
    /* touching a moves it behind c: b is the oldest now */
    sl_tq_touch(&q, &a, 1100);
    assert_ptr_equal(q.head, &b);
    assert_ptr_equal(q.tail, &a);
    assert_ptr_equal(sl_tq_expired(&q, 1200, 1000), &b);
    sl_tq_remove(&b);
    assert_ptr_equal(sl_tq_expired(&q, 1300, 1000), &c);
    sl_tq_remove(&c);
    assert_null(sl_tq_expired(&q, 1300, 1000));
    assert_int_equal(q.n, 1);
    sl_tq_remove(&a);
    sl_tq_remove(&a); /* twice is harmless */
    assert_int_equal(q.n, 0);
    assert_null(q.head);
    assert_null(q.tail);
}

static int firsts;
static void count_first(void *arg)
{
    (void)arg;
    firsts++;
}

/* The deadline a timer is armed for is the head's touch plus the timeout,
 * and the head expires exactly then: a timer armed with sl_tq_delay fires
 * when sl_tq_expired returns it, not a sweep period later. Only a node
 * entering an empty queue can bring an earlier deadline (on_first). */
static void test_tq_due_and_first(void **state)
{
    (void)state;
    struct sl_tq q = { 0 };
    q.on_first = count_first;
    struct sl_tq_node a = { 0 }, b = { 0 };
    firsts = 0;
    assert_int_equal(sl_tq_due(&q, 2000), UINT64_MAX);
    sl_tq_touch(&q, &a, 1000);
    assert_int_equal(firsts, 1);
    sl_tq_touch(&q, &b, 1500);
    sl_tq_touch(&q, &a, 1700); /* a goes last: the deadline moves later, never earlier */
    assert_int_equal(firsts, 1);
    uint64_t due = sl_tq_due(&q, 2000);
    assert_int_equal(due, 3500); /* b's */
    /* a timer started at any moment before fires at the deadline itself */
    for (uint64_t now = 1500; now <= 3500; now += 250) {
        uint64_t fires = now + sl_tq_delay(now, due);
        assert_int_equal(fires, 3500);
        assert_null(sl_tq_expired(&q, fires - 1, 2000));
        assert_ptr_equal(sl_tq_expired(&q, fires, 2000), &b);
    }
    assert_int_equal(sl_tq_delay(4000, due), 0); /* past: at once */
    sl_tq_remove(&b);
    assert_int_equal(sl_tq_due(&q, 2000), 3700);
    sl_tq_remove(&a);
    assert_int_equal(sl_tq_due(&q, 2000), UINT64_MAX);
    sl_tq_touch(&q, &b, 5000); /* empty again: a first again */
    assert_int_equal(firsts, 2);
    assert_int_equal(sl_tq_due(&q, UINT64_MAX), UINT64_MAX); /* no overflow */
    sl_tq_remove(&b);
}

static void test_tq_move_between_queues(void **state)
{
    (void)state;
    struct sl_tq q1 = { 0 }, q2 = { 0 };
    struct sl_tq_node a = { 0 };
    sl_tq_touch(&q1, &a, 5);
    sl_tq_touch(&q2, &a, 6);
    assert_int_equal(q1.n, 0);
    assert_int_equal(q2.n, 1);
    assert_ptr_equal(a.q, &q2);
    assert_int_equal(a.at, 6);
}

static void test_buf_pool_reuse(void **state)
{
    (void)state;
    uint64_t base = sl_buf_in_use();
    struct sl_buf *a = sl_buf_get();
    assert_non_null(a);
    assert_int_equal(a->refs, 1);
    assert_int_equal(sl_buf_in_use(), base + 1);
    sl_buf_ref(a);
    sl_buf_unref(a);
    assert_int_equal(sl_buf_in_use(), base + 1); /* a write still holds it */
    sl_buf_unref(a);
    assert_int_equal(sl_buf_in_use(), base);
    struct sl_buf *b = sl_buf_get();
    assert_ptr_equal(a, b); /* came back from the pool */
    assert_int_equal(b->start, 0);
    assert_int_equal(b->end, 0);
    sl_buf_unref(b);
    sl_buf_pool_drain();
}

static void test_pool_reuse_and_cap(void **state)
{
    (void)state;
    struct sl_pool p = SL_POOL_INIT(32, 2);
    void *a = sl_pool_take(&p), *b = sl_pool_take(&p), *c = sl_pool_take(&p);
    assert_non_null(a);
    assert_true(a != b && b != c);
    sl_pool_give(&p, a);
    sl_pool_give(&p, b);
    sl_pool_give(&p, c); /* over the cap: freed, not kept */
    assert_int_equal(p.n, 2);
    assert_ptr_equal(sl_pool_take(&p), b); /* last given, first taken */
    assert_ptr_equal(sl_pool_take(&p), a);
    assert_int_equal(p.n, 0);
    sl_pool_give(&p, a);
    sl_pool_give(&p, b);
    sl_pool_drain(&p);
    assert_int_equal(p.n, 0);
    assert_null(p.free);
}

static void test_log_quote(void **state)
{
    (void)state;
    char out[64];
    assert_string_equal(sl_log_quote("plain", 5, out, sizeof(out)), "plain");
    assert_string_equal(sl_log_quote("two words", 9, out, sizeof(out)), "\"two words\"");
    assert_string_equal(sl_log_quote("a\"b", 3, out, sizeof(out)), "\"a\\\"b\"");
    assert_string_equal(sl_log_quote("\x01", 1, out, sizeof(out)), "\"\\x01\"");
    assert_string_equal(sl_log_quote("", 0, out, sizeof(out)), "\"\"");
    char big[200];
    memset(big, ' ', sizeof(big));
    sl_log_quote(big, sizeof(big), out, sizeof(out));
    assert_true(strlen(out) < sizeof(out));
    enum sl_log_level l;
    assert_int_equal(sl_log_level_parse("debug", &l), 0);
    assert_int_equal(l, SL_LOG_DEBUG);
    assert_int_equal(sl_log_level_parse("loud", &l), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tq_order_and_expiry),
        cmocka_unit_test(test_tq_move_between_queues),
        cmocka_unit_test(test_tq_due_and_first),
        cmocka_unit_test(test_buf_pool_reuse),
        cmocka_unit_test(test_pool_reuse_and_cap),
        cmocka_unit_test(test_log_quote),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

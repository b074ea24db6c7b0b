/* The ring of requests waiting for verdicts (src/net/pend.c), without a
 * session or a socket: entries pushed at the tail leave from the head in
 * order, across the end of the storage; a full ring refuses; the last push
 * can be taken back; an entry stays in place while it waits, so a verdict
 * written through its pointer is what leaves; the storage goes back to the
 * pool only when the ring is empty. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "net/pend.h"

static struct sl_pend *push_span(struct sl_pend_ring *r, uint32_t span)
{
    struct sl_pend *e = sl_pend_push(r);
    assert_non_null(e);
    assert_int_equal(e->span, 0); /* zeroed, whatever the slot held */
    assert_null(e->text);
    e->span = span;
    e->state = SL_PEND_ALLOW;
    return e;
}

static char *text(const char *s)
{
    char *t = strdup(s);
    assert_non_null(t);
    return t;
}

static void test_order_and_wrap(void **state)
{
    (void)state;
    struct sl_pend_ring r = { 0 };
    assert_null(sl_pend_head(&r));
    assert_int_equal(sl_pend_count(&r), 0);
    assert_int_equal(sl_pend_bytes(&r), 0);
    uint32_t next_in = 1, next_out = 1;
    /* three rounds move the head past the end of the storage twice */
    for (int round = 0; round < 3; round++) {
        while (sl_pend_count(&r) < 200)
            push_span(&r, next_in++);
        uint64_t want = 0;
        for (uint32_t i = 0; i < 200; i++) {
            assert_int_equal(sl_pend_at(&r, i)->span, next_out + i);
            want += next_out + i;
        }
        assert_int_equal(sl_pend_bytes(&r), want);
        for (int k = 0; k < 150; k++) {
            struct sl_pend out;
            assert_int_equal(sl_pend_head(&r)->span, next_out);
            sl_pend_pop(&r, &out);
            assert_int_equal(out.span, next_out);
            next_out++;
        }
        assert_int_equal(sl_pend_count(&r), 50);
    }
    while (sl_pend_count(&r) > 0) {
        struct sl_pend out;
        sl_pend_pop(&r, &out);
        assert_int_equal(out.span, next_out++);
    }
    assert_int_equal(next_out, next_in);
    sl_pend_release(&r);
    assert_null(r.e);
}

static void test_full(void **state)
{
    (void)state;
    struct sl_pend_ring r = { 0 };
    for (uint32_t i = 0; i < SL_PEND_MAX; i++) {
        assert_false(sl_pend_full(&r));
        push_span(&r, i + 1);
    }
    assert_true(sl_pend_full(&r));
    assert_null(sl_pend_push(&r));
    assert_int_equal(sl_pend_count(&r), SL_PEND_MAX);
    assert_int_equal(sl_pend_bytes(&r), SL_PEND_MAX * (SL_PEND_MAX + 1) / 2);
    /* one leaves: one more fits, in the slot the first one left */
    struct sl_pend out;
    sl_pend_pop(&r, &out);
    assert_int_equal(out.span, 1);
    assert_false(sl_pend_full(&r));
    push_span(&r, 1000);
    assert_true(sl_pend_full(&r));
    assert_int_equal(sl_pend_at(&r, SL_PEND_MAX - 1)->span, 1000);
    assert_int_equal(sl_pend_head(&r)->span, 2);
    sl_pend_free(&r);
    assert_null(r.e);
    assert_int_equal(sl_pend_count(&r), 0);
}

static void test_unpush(void **state)
{
    (void)state;
    struct sl_pend_ring r = { 0 };
    push_span(&r, 1);
    struct sl_pend *b = push_span(&r, 2);
    b->text = text("-ERR refused\r\n"); /* freed with the entry */
    sl_pend_unpush(&r);
    assert_int_equal(sl_pend_count(&r), 1);
    assert_int_equal(sl_pend_bytes(&r), 1);
    assert_int_equal(sl_pend_head(&r)->span, 1);
    /* the slot is handed out again, clean */
    struct sl_pend *c = push_span(&r, 3);
    assert_ptr_equal(c, b);
    assert_int_equal(sl_pend_at(&r, 1)->span, 3);
    /* taking back the only entry empties the ring (a request that joins the
     * write before it instead of waiting) */
    struct sl_pend out;
    sl_pend_pop(&r, &out);
    sl_pend_pop(&r, &out);
    push_span(&r, 4);
    sl_pend_unpush(&r);
    assert_int_equal(sl_pend_count(&r), 0);
    assert_null(sl_pend_head(&r));
    sl_pend_unpush(&r); /* nothing to take back */
    assert_int_equal(sl_pend_count(&r), 0);
    sl_pend_release(&r);
    assert_null(r.e);
}

static void test_verdict_in_place(void **state)
{
    (void)state;
    struct sl_pend_ring r = { 0 };
    /* the head waits; more requests come behind it and one before it leaves
     * across the end of the storage: the waiting entries keep their place */
    for (uint32_t i = 0; i < SL_PEND_MAX - 2; i++) {
        struct sl_pend out;
        push_span(&r, 1);
        sl_pend_pop(&r, &out);
    }
    struct sl_pend *w1 = push_span(&r, 10);
    w1->state = SL_PEND_WAIT;
    struct sl_pend *w2 = push_span(&r, 20);
    w2->state = SL_PEND_WAIT;
    struct sl_pend *w3 = push_span(&r, 30); /* the first slot of the storage */
    w3->state = SL_PEND_WAIT;
    for (uint32_t i = 0; i < 100; i++)
        push_span(&r, 100 + i);
    assert_ptr_equal(sl_pend_head(&r), w1);
    assert_ptr_equal(sl_pend_at(&r, 1), w2);
    assert_ptr_equal(sl_pend_at(&r, 2), w3);
    /* verdicts land out of order, through the pointers kept at push time */
    w3->state = SL_PEND_REJECT;
    w3->text = text("-ERR three\r\n");
    w3->len = 12;
    w1->state = SL_PEND_ALLOW;
    struct sl_pend out;
    sl_pend_pop(&r, &out);
    assert_int_equal(out.span, 10);
    assert_int_equal(out.state, SL_PEND_ALLOW);
    assert_ptr_equal(sl_pend_head(&r), w2);
    assert_int_equal(w2->state, SL_PEND_WAIT); /* still waiting: it stays */
    w2->state = SL_PEND_DELAY;
    w2->due_us = 5;
    sl_pend_pop(&r, &out);
    assert_int_equal(out.state, SL_PEND_DELAY);
    assert_int_equal(out.due_us, 5);
    sl_pend_pop(&r, &out);
    assert_int_equal(out.state, SL_PEND_REJECT);
    assert_string_equal(out.text, "-ERR three\r\n");
    assert_null(w3->text); /* the text left with the entry: the ring forgot it */
    free(out.text);
    assert_int_equal(sl_pend_count(&r), 100);
    sl_pend_free(&r);
}

static void test_release(void **state)
{
    (void)state;
    struct sl_pend_ring r = { 0 };
    sl_pend_release(&r); /* nothing lent: nothing to give back */
    assert_null(r.e);
    struct sl_pend *e = push_span(&r, 7);
    e->text = text("x");
    sl_pend_release(&r); /* not empty: kept */
    assert_non_null(r.e);
    assert_ptr_equal(sl_pend_head(&r), e);
    assert_string_equal(sl_pend_head(&r)->text, "x");
    struct sl_pend out;
    sl_pend_pop(&r, &out);
    free(out.text);
    sl_pend_release(&r);
    assert_null(r.e);
    assert_int_equal(sl_pend_count(&r), 0);
    /* the next push takes storage again and starts at its first slot */
    push_span(&r, 8);
    assert_int_equal(sl_pend_head(&r)->span, 8);
    /* freeing a ring with texts waiting gives everything back */
    e = push_span(&r, 9);
    e->text = text("y");
    sl_pend_free(&r);
    assert_null(r.e);
    assert_int_equal(sl_pend_count(&r), 0);
    sl_pend_free(&r); /* twice is harmless */
}

static int teardown(void **state)
{
    (void)state;
    sl_pend_pool_drain();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_and_wrap),
        cmocka_unit_test(test_full),
        cmocka_unit_test(test_unpush),
        cmocka_unit_test(test_verdict_in_place),
        cmocka_unit_test(test_release),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}

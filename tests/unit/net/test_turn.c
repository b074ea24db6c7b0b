/* The end-of-turn list (src/net/turn.c): a node registered any number of
 * times runs once; a node forgotten before or during the run does not run;
 * a node registered during the run (by another node's function, or again
 * by its own) runs in that same run, after the ones before it; the turn's
 * clock is read once per turn. No loop, no sockets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/clock.h"
#include "net/turn.h"

#define MAX_LOG 32

struct obj {
    struct sl_turn_node tn;
    int                 id;
    int                 again;   /* registers itself again this many times */
    struct obj         *forget;  /* forgets this one when it runs */
    struct obj         *add;     /* registers this one when it runs */
};

static int order[MAX_LOG];
static int norder;

static void on_end(struct sl_turn_node *n)
{
    struct obj *o = (struct obj *)((char *)n - offsetof(struct obj, tn));
    assert_true(norder < MAX_LOG);
    order[norder++] = o->id;
    if (o->forget != NULL)
        sl_turn_forget(&o->forget->tn);
    if (o->add != NULL)
        assert_int_equal(sl_turn_later(&o->add->tn, on_end), 0);
    if (o->again > 0) {
        o->again--;
        assert_int_equal(sl_turn_later(&o->tn, on_end), 0);
    }
}

static void reset(void)
{
    norder = 0;
    memset(order, 0, sizeof(order));
}

static void test_once_per_turn(void **state)
{
    (void)state;
    struct obj a = { .id = 1 }, b = { .id = 2 };
    reset();
    assert_false(sl_turn_pending(&a.tn));
    for (int i = 0; i < 5; i++) {
        assert_int_equal(sl_turn_later(&a.tn, on_end), 0);
        assert_int_equal(sl_turn_later(&b.tn, on_end), 0);
    }
    assert_true(sl_turn_pending(&a.tn));
    sl_turn_run();
    assert_int_equal(norder, 2);
    assert_int_equal(order[0], 1);
    assert_int_equal(order[1], 2);
    assert_false(sl_turn_pending(&a.tn));
    assert_false(sl_turn_pending(&b.tn));
    /* nothing left for the next turn */
    sl_turn_run();
    assert_int_equal(norder, 2);
    /* and a node runs again in a later turn */
    assert_int_equal(sl_turn_later(&b.tn, on_end), 0);
    sl_turn_run();
    assert_int_equal(norder, 3);
    assert_int_equal(order[2], 2);
}

static void test_forget_before_run(void **state)
{
    (void)state;
    struct obj a = { .id = 1 }, b = { .id = 2 }, c = { .id = 3 };
    reset();
    sl_turn_later(&a.tn, on_end);
    sl_turn_later(&b.tn, on_end);
    sl_turn_later(&c.tn, on_end);
    sl_turn_forget(&b.tn); /* b is freed */
    sl_turn_forget(&b.tn); /* twice is harmless */
    assert_false(sl_turn_pending(&b.tn));
    sl_turn_run();
    assert_int_equal(norder, 2);
    assert_int_equal(order[0], 1);
    assert_int_equal(order[1], 3);
}

/* a's function frees c (a session closed by another's resume): c must not
 * run, though it was registered before the run began. */
static void test_forget_during_run(void **state)
{
    (void)state;
    struct obj a = { .id = 1 }, b = { .id = 2 }, c = { .id = 3 };
    reset();
    a.forget = &c;
    sl_turn_later(&a.tn, on_end);
    sl_turn_later(&b.tn, on_end);
    sl_turn_later(&c.tn, on_end);
    sl_turn_run();
    assert_int_equal(norder, 2);
    assert_int_equal(order[0], 1);
    assert_int_equal(order[1], 2);
    assert_false(sl_turn_pending(&c.tn));
}

/* Registered during the run: in this same run, after the others (the run
 * ends only when nothing is left); a node re-registering itself runs again
 * in this run, once per registration made while it ran. */
static void test_register_during_run(void **state)
{
    (void)state;
    struct obj a = { .id = 1 }, b = { .id = 2 }, c = { .id = 3 };
    reset();
    a.add = &c;   /* c was not registered: it runs in this run, last */
    b.again = 2;  /* b runs three times */
    sl_turn_later(&a.tn, on_end);
    sl_turn_later(&b.tn, on_end);
    sl_turn_run();
    int want[] = { 1, 2, 3, 2, 2 };
    assert_int_equal(norder, 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(order[i], want[i]);
    sl_turn_run();
    assert_int_equal(norder, 5); /* nothing carried to the next run */
}

/* Registering a node already waiting during the run (its turn still to
 * come) does not add it twice. */
static void test_register_waiting_during_run(void **state)
{
    (void)state;
    struct obj a = { .id = 1 }, b = { .id = 2 };
    reset();
    a.add = &b;
    sl_turn_later(&a.tn, on_end);
    sl_turn_later(&b.tn, on_end);
    sl_turn_run();
    assert_int_equal(norder, 2);
    assert_int_equal(order[1], 2);
}

/* Many nodes, each registering the next when it runs: the list grows
 * (and moves) under the run; each runs once, in order. */
enum { MANY = 1000 };
static struct obj many[MANY];
static int        many_next;

static void on_many(struct sl_turn_node *n)
{
    struct obj *o = (struct obj *)((char *)n - offsetof(struct obj, tn));
    assert_int_equal(o->id, many_next);
    many_next++;
    if (o->id + 1 < MANY)
        assert_int_equal(sl_turn_later(&many[o->id + 1].tn, on_many), 0);
}

static void test_many(void **state)
{
    (void)state;
    for (int i = 0; i < MANY; i++)
        many[i].id = i;
    many_next = 0;
    sl_turn_later(&many[0].tn, on_many);
    sl_turn_run();
    assert_int_equal(many_next, MANY);
    for (int i = 0; i < MANY; i++)
        assert_false(sl_turn_pending(&many[i].tn));
}

struct fake_clock {
    struct sl_clock c;
    uint64_t        now;
    int             reads;
};

static uint64_t fake_now(const struct sl_clock *c)
{
    struct fake_clock *f = (struct fake_clock *)c;
    f->reads++;
    return f->now;
}

static void test_clock_once_per_turn(void **state)
{
    (void)state;
    struct fake_clock f = { { fake_now }, 5000000, 0 };
    sl_turn_clock_set(&f.c);
    assert_int_equal(sl_turn_now_us(), 5000000);
    f.now += 1500;
    assert_int_equal(sl_turn_now_us(), 5000000); /* the same turn: the same time */
    assert_int_equal(sl_turn_now_ms(), 5000);
    assert_int_equal(sl_clock_us(&sl_turn_clock), 5000000);
    assert_int_equal(f.reads, 1);
    sl_turn_run(); /* the turn ends */
    assert_int_equal(f.reads, 1); /* read on use, not at the end */
    assert_int_equal(sl_turn_now_us(), 5001500);
    assert_int_equal(sl_turn_now_ms(), 5001);
    assert_int_equal(f.reads, 2);
    sl_turn_tick();
    f.now = 7000000;
    assert_int_equal(sl_clock_us(&sl_turn_clock), 7000000);
    sl_turn_clock_set(NULL);
}

static void test_drain(void **state)
{
    (void)state;
    struct obj a = { .id = 1 };
    reset();
    sl_turn_later(&a.tn, on_end);
    sl_turn_drain();
    assert_false(sl_turn_pending(&a.tn));
    sl_turn_run();
    assert_int_equal(norder, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_once_per_turn),
        cmocka_unit_test(test_forget_before_run),
        cmocka_unit_test(test_forget_during_run),
        cmocka_unit_test(test_register_during_run),
        cmocka_unit_test(test_register_waiting_during_run),
        cmocka_unit_test(test_many),
        cmocka_unit_test(test_clock_once_per_turn),
        cmocka_unit_test(test_drain),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    sl_turn_drain();
    return rc;
}

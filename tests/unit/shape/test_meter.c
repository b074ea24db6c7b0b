/* Byte meters under a local limiter (url = local: takes are answered at
 * once), with an injected clock: credit, debt, and the gate a resp
 * request passes (go, refused until the debt can be paid). The limiter's
 * clock and the times the meter is given are one: at(t) moves it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "conf/conf.h"
#include "core/clock.h"
#include "identity/identity.h"
#include "limit/limiter.h"
#include "shape/meter.h"

static uint64_t fake_us;

static uint64_t fake_now(const struct sl_clock *c)
{
    (void)c;
    return fake_us;
}

static const struct sl_clock fake_clock = { fake_now };
static const struct sl_limiter_env local_env = { NULL, &fake_clock, NULL };

/* Moves the clock to <t> and returns it, for the meter's now_us. */
static uint64_t at(uint64_t t)
{
    fake_us = t;
    return t;
}

struct fix {
    struct sl_conf       *conf;
    struct sl_limiter    *lim;
    struct sl_ident_state id;
    struct sl_meter_ctx   ctx;
    struct sl_meter       m;
};

/* A resp listener with bytes_out 64 KiB/s, burst 64 KiB, <action>. */
static struct fix *setup_with(const char *action)
{
    char text[1024];
    snprintf(text, sizeof(text),
             "[store]\nurl = local\n"
             "[listener r]\nlisten = 127.0.0.1:7001\nupstream = 127.0.0.1:7002\n"
             "[limit o]\nlistener = r\nmetric = bytes_out\nrate = 64KiB/s\nburst = 64KiB\n"
             "algorithm = token_bucket\naction = %s\n",
             action);
    struct fix *f = calloc(1, sizeof(*f));
    f->conf = sl_conf_load_string(text, "test.ini", stderr);
    assert_non_null(f->conf);
    f->lim = sl_limiter_new(f->conf, &local_env);
    assert_non_null(f->lim);
    sl_identity_init(&f->id, NULL);
    struct sl_meter_ctx c = { f->lim, f->conf->listeners, &f->id, 1 };
    f->ctx = c;
    assert_int_equal(sl_meter_init(&f->m, &f->ctx, SL_METRIC_BYTES_OUT, 1, NULL, NULL), 1);
    return f;
}

static void teardown_fix(struct fix *f)
{
    sl_meter_close(&f->m);
    sl_limiter_release(f->lim);
    sl_conf_free(f->conf);
    free(f);
}

static void test_gate_refuses_until_the_debt_is_paid(void **state)
{
    (void)state;
    struct fix *f = setup_with("reject");
    struct sl_meter *m = &f->m;
    sl_meter_charge(m, &f->ctx, 0, at(0)); /* the first take: one chunk */
    assert_int_equal(m->credit, 16384);
    assert_false(sl_meter_owes(m));
    assert_int_equal(sl_meter_gate(m, &f->ctx, at(0)), SL_METER_GO);

    /* A reply of 40000 bytes: in debt, and the take for chunk + debt is
     * granted at once (56384 of the 65536 taken). */
    sl_meter_charge(m, &f->ctx, 40000, at(0));
    assert_int_equal(m->credit, 16384);
    assert_false(sl_meter_owes(m));

    /* 60000 more: the bucket holds 9152; the take is refused, the meter
     * owes 43616 and refuses requests until 50848 more tokens came. */
    sl_meter_charge(m, &f->ctx, 60000, at(0));
    assert_int_equal(m->credit, 16384 - 60000);
    assert_true(sl_meter_owes(m));
    assert_true(sl_meter_refused(m, 0));
    uint64_t until = m->refused_until_us;
    assert_in_range(until, 770000, 780000); /* 50848 / 65536 s */
    assert_int_equal(sl_meter_gate(m, &f->ctx, at(0)), SL_METER_REFUSE);
    assert_int_equal(sl_meter_gate(m, &f->ctx, at(until - 1000)), SL_METER_REFUSE);

    /* Once the time is over the gate asks again, gets chunk + debt, and
     * lets requests go. */
    assert_int_equal(sl_meter_gate(m, &f->ctx, at(until)), SL_METER_GO);
    assert_int_equal(m->credit, 16384);
    assert_false(sl_meter_owes(m));
    assert_false(sl_meter_refused(m, until));
    teardown_fix(f);
}

/* A debt bigger than the bucket is paid in takes of at most the burst:
 * the gate keeps asking while they are granted, and refuses as soon as
 * one is not. */
static void test_gate_pays_a_big_debt_in_takes(void **state)
{
    (void)state;
    struct fix *f = setup_with("reject");
    struct sl_meter *m = &f->m;
    sl_meter_charge(m, &f->ctx, 0, at(0));
    /* A pipeline's replies, 200000 bytes, read before any take: the
     * burst is spent on it and the meter still owes the rest. */
    m->req = (struct sl_limiter_req *)1; /* a take "at the store" */
    sl_meter_charge(m, &f->ctx, 200000, at(0));
    assert_true(sl_meter_owes(m));
    assert_int_equal(sl_meter_gate(m, &f->ctx, at(0)), SL_METER_HOLD);
    m->req = NULL; /* its answer: nothing granted yet (asked = 0) */
    assert_int_equal(sl_meter_gate(m, &f->ctx, at(0)), SL_METER_REFUSE);
    /* 3 s later the bucket is full again (65536 of it): one take of the
     * burst goes through, the next is refused. */
    uint64_t t = 3000000;
    assert_int_equal(sl_meter_gate(m, &f->ctx, at(t)), SL_METER_REFUSE);
    assert_true(m->credit > 16384 - 200000);
    assert_true(m->credit < 0);
    teardown_fix(f);
}

/* A delay meter never holds or refuses requests: it slows reading instead. */
static void test_delay_meter_never_gates(void **state)
{
    (void)state;
    struct fix *f = setup_with("delay");
    struct sl_meter *m = &f->m;
    sl_meter_charge(m, &f->ctx, 0, at(0));
    m->credit = -100000;
    assert_false(sl_meter_owes(m));
    assert_int_equal(sl_meter_gate(m, &f->ctx, at(0)), SL_METER_GO);
    m->credit = 0;
    teardown_fix(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gate_refuses_until_the_debt_is_paid),
        cmocka_unit_test(test_gate_pays_a_big_debt_in_takes),
        cmocka_unit_test(test_delay_meter_never_gates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests for gcra reservations in src/limit/algo.c (max_wait_us > 0,
 * the arithmetic of action = delay): the table of worked cases
 * (tests/unit/limit/reserve_cases.h, which lua/gcra.lua also passes), peeks,
 * a reload that shortens max_wait, waits that are exact, the shaping bound on
 * random traffic, the bounds sl_algo_check() enforces and the ttl. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/err.h"
#include "limit/algo.h"
#include "unit/limit/reserve_cases.h"

#define S_US 1000000ULL
#define DAY  (86400 * S_US)
#define HOUR (3600 * S_US)

static uint64_t rng_state = 0x243f6a8885a308d3ULL;

/* xorshift64*: deterministic, so a failure can be replayed. */
static uint64_t rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ULL;
}

static uint64_t rnd_in(uint64_t lo, uint64_t hi) /* inclusive */
{
    return lo + rnd() % (hi - lo + 1);
}

static uint64_t gcd(uint64_t a, uint64_t b)
{
    while (b != 0) {
        uint64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

static struct sl_algo_params rparams(const struct sl_rcase *c)
{
    struct sl_algo_params p = { .algo = SL_ALGO_GCRA, .amount = c->amount,
                                .period_us = c->period_us, .burst = c->burst,
                                .max_wait_us = c->max_wait_us };
    return p;
}

static int result_same(const struct sl_algo_result *x, const struct sl_algo_result *y)
{
    return x->allowed == y->allowed && x->remaining == y->remaining &&
           x->retry_after_us == y->retry_after_us && x->reset_us == y->reset_us;
}

/* gcra's state: TAT (a + c / K) and whether there is one. */
static int state_same(const struct sl_algo_state *x, const struct sl_algo_state *y)
{
    return x->a == y->a && x->c == y->c && x->init == y->init;
}

/* 1 if <r> is what step <s> expects; otherwise prints both. */
static int step_ok(const struct sl_rcase *c, int i, const struct sl_case_step *s,
                   const struct sl_algo_result *r)
{
    uint64_t want_retry = s->retry_after_us < 0 ? UINT64_MAX : (uint64_t)s->retry_after_us;
    if (r->allowed == s->allowed && r->remaining == s->remaining &&
        r->retry_after_us == want_retry && r->reset_us == s->reset_us)
        return 1;
    print_error("case '%s' step %d (now T0%+" PRId64 ", cost %" PRIu64 "):\n"
                "  want allowed %d remaining %" PRIu64 " retry %" PRIu64 " reset %" PRIu64 "\n"
                "  got  allowed %d remaining %" PRIu64 " retry %" PRIu64 " reset %" PRIu64 "\n",
                c->name, i, (int64_t)(s->now_us - SL_CASE_T0), s->cost, s->allowed,
                s->remaining, want_retry, s->reset_us, r->allowed, r->remaining,
                r->retry_after_us, r->reset_us);
    return 0;
}

/* The table, each step preceded by a peek. With reservations a gcra peek
 * answers as if it had taken (remaining and reset after the take, the wait
 * it would get), so it equals the take's answer, and it changes nothing. */
static void test_reserve_cases(void **state)
{
    (void)state;
    int failures = 0, steps = 0, reservations = 0, denials = 0;
    for (size_t ci = 0; ci < SL_N_RCASES; ci++) {
        const struct sl_rcase *c = &sl_rcases[ci];
        struct sl_algo_params p = rparams(c);
        assert_int_equal(sl_algo_check(&p, NULL), 0);
        struct sl_algo_state st = { 0 };
        for (int i = 0; i < SL_RCASE_MAX_STEPS && c->steps[i].now_us != SL_CASE_END_US; i++) {
            const struct sl_case_step *s = &c->steps[i];
            struct sl_algo_result peek, take;
            struct sl_algo_state before = st;
            assert_int_equal(sl_algo_take(&st, &p, s->now_us, s->cost, 0, &peek), 0);
            assert_true(state_same(&st, &before));
            assert_int_equal(sl_algo_take(&st, &p, s->now_us, s->cost, 1, &take), 0);
            steps++;
            if (!step_ok(c, i, s, &take))
                failures++;
            if (!result_same(&peek, &take)) {
                print_error("case '%s' step %d: the peek differs from the take\n", c->name, i);
                failures++;
            }
            if (!take.allowed || s->cost == 0)
                assert_true(state_same(&st, &before)); /* nothing taken */
            reservations += take.allowed && take.retry_after_us > 0;
            denials += !take.allowed;
        }
    }
    print_message("%zu cases, %d steps (%d reservations, %d denials)\n", SL_N_RCASES, steps,
                  reservations, denials);
    assert_true(steps >= 50);
    assert_true(reservations >= 20);
    assert_int_equal(failures, 0);
}

/* A reload that shortens max_wait: the reservations already made stay (TAT
 * is kept), the debt is read clamped to the new top, so nothing more is
 * reserved until the queue is shorter than the new max_wait. Worked by hand:
 * 10/s burst 2 (S = 100000, K = 1, cap = 200000). */
static void test_reserve_reload_shorter_wait(void **state)
{
    (void)state;
    struct sl_algo_params p = { .algo = SL_ALGO_GCRA, .amount = 10, .period_us = S_US,
                                .burst = 2, .max_wait_us = 500000 };
    struct sl_algo_state st = { 0 };
    struct sl_algo_result r;
    const uint64_t t0 = SL_CASE_T0;
    for (int i = 0; i < 7; i++)
        assert_int_equal(sl_algo_take(&st, &p, t0, 1, 1, &r), 0);
    assert_int_equal(r.allowed, 1);
    assert_int_equal(r.retry_after_us, 500000); /* TAT = t0 + 700 ms */
    p.max_wait_us = 100000;                     /* top = 300000 */
    assert_int_equal(sl_algo_take(&st, &p, t0, 1, 1, &r), 0);
    assert_int_equal(r.allowed, 0);
    assert_int_equal(r.retry_after_us, 100000); /* debt read as 300000: wait 200 ms */
    assert_int_equal(r.reset_us, 300000);
    /* 400 ms on, the real debt is 300000 = top: still denied */
    assert_int_equal(sl_algo_take(&st, &p, t0 + 400000, 1, 1, &r), 0);
    assert_int_equal(r.allowed, 0);
    assert_int_equal(r.retry_after_us, 100000);
    /* 500 ms on: debt 200000, wait 100 ms: a reservation, TAT = t0 + 800 ms */
    assert_int_equal(sl_algo_take(&st, &p, t0 + 500000, 1, 1, &r), 0);
    assert_int_equal(r.allowed, 1);
    assert_int_equal(r.retry_after_us, 100000);
    assert_int_equal(r.reset_us, 300000);
    assert_int_equal(st.a, t0 + 800000);
    assert_int_equal(st.c, 0);
    /* max_wait 0: the plain gcra; the debt clamps to one bucket */
    p.max_wait_us = 0;
    assert_int_equal(sl_algo_take(&st, &p, t0 + 500000, 0, 1, &r), 0);
    assert_int_equal(r.allowed, 1);
    assert_int_equal(r.retry_after_us, 0); /* debt read as cap: cost 0 fits exactly */
    assert_int_equal(r.reset_us, 200000);
    /* 700 ms on: debt 100000, one token fits now (TAT = t0 + 900 ms) ... */
    assert_int_equal(sl_algo_take(&st, &p, t0 + 700000, 1, 1, &r), 0);
    assert_int_equal(r.allowed, 1);
    assert_int_equal(r.retry_after_us, 0);
    assert_int_equal(r.reset_us, 200000);
    /* ... and the next is a plain denial */
    assert_int_equal(sl_algo_take(&st, &p, t0 + 700000, 1, 1, &r), 0);
    assert_int_equal(r.allowed, 0);
    assert_int_equal(r.retry_after_us, 100000);
    assert_int_equal(sl_algo_take(&st, &p, t0 + 900000, 2, 1, &r), 0);
    assert_int_equal(r.allowed, 1);
    assert_int_equal(r.retry_after_us, 0);
    sl_algo_state_free(&st);
}

/* Random limits, each with a max_wait anywhere up to the 2^52 bound (big
 * and small rates, fractional emission intervals). */
static void random_params(struct sl_algo_params *p)
{
    static const uint64_t periods[] = { 1, 3, 7, 1000, S_US, 60 * S_US, HOUR, DAY };
    for (;;) {
        p->algo = SL_ALGO_GCRA;
        p->amount = rnd() % 3 == 0 ? rnd_in(1, 20) : rnd_in(1, 20000000);
        p->period_us = periods[rnd() % (sizeof(periods) / sizeof(periods[0]))];
        p->burst = rnd_in(1, rnd() % 2 ? 50 : 5000);
        p->max_wait_us = 0;
        if (sl_algo_check(p, NULL) != 0)
            continue;
        uint64_t g = gcd(p->amount, p->period_us), S = p->period_us / g, K = p->amount / g;
        uint64_t wmax = (SL_ALGO_MAX_UNITS - p->burst * S) / K;
        uint64_t fill = p->burst * p->period_us / p->amount; /* about the time to fill up */
        switch (rnd() % 4) {
        case 0: p->max_wait_us = rnd_in(1, 10); break;
        case 1: p->max_wait_us = rnd_in(1, fill + 1); break;
        case 2: p->max_wait_us = rnd_in(1, 10 * fill + 10); break;
        default: p->max_wait_us = rnd() % 2 ? wmax : rnd_in(1, HOUR); break;
        }
        if (p->max_wait_us > wmax)
            p->max_wait_us = wmax;
        if (p->max_wait_us > 0 && sl_algo_check(p, NULL) == 0)
            return;
    }
}

/* The waits are exact, with time running forward (peeks only, nothing
 * taken): a reservation's wait w is the first moment the same request would
 * be admitted without one (at now + w it waits 0, at now + w - 1 it waits
 * 1); a denial's retry r is the first moment it would be reserved (at
 * now + r it waits exactly max_wait, 1 us earlier it is still denied). */
static void test_reserve_waits_are_exact(void **state)
{
    (void)state;
    int reserved = 0, denied = 0;
    for (int run = 0; run < 300; run++) {
        struct sl_algo_params p;
        random_params(&p);
        struct sl_algo_state st = { 0 };
        uint64_t now = SL_CASE_T0 + rnd_in(0, DAY);
        for (int i = 0; i < 60; i++) {
            now += rnd() % 3 == 0 ? 0 : rnd_in(0, p.period_us / p.amount + 1);
            uint64_t cost = rnd_in(0, p.burst < 8 ? p.burst : p.burst / 4 + 1);
            struct sl_algo_result r, at, before;
            assert_int_equal(sl_algo_take(&st, &p, now, cost, 0, &r), 0);
            if (r.allowed && r.retry_after_us > 0) {
                uint64_t w = r.retry_after_us;
                assert_true(w <= p.max_wait_us);
                assert_int_equal(sl_algo_take(&st, &p, now + w, cost, 0, &at), 0);
                assert_true(at.allowed);
                assert_int_equal(at.retry_after_us, 0);
                assert_int_equal(sl_algo_take(&st, &p, now + w - 1, cost, 0, &before), 0);
                assert_true(before.allowed);
                assert_int_equal(before.retry_after_us, 1);
                reserved++;
            } else if (!r.allowed && r.retry_after_us != UINT64_MAX) {
                uint64_t d = r.retry_after_us;
                assert_true(d > 0);
                assert_int_equal(sl_algo_take(&st, &p, now + d, cost, 0, &at), 0);
                assert_true(at.allowed);
                assert_int_equal(at.retry_after_us, p.max_wait_us);
                assert_int_equal(sl_algo_take(&st, &p, now + d - 1, cost, 0, &before), 0);
                assert_false(before.allowed);
                assert_int_equal(before.retry_after_us, 1);
                denied++;
            }
            assert_int_equal(sl_algo_take(&st, &p, now, cost, 1, &r), 0);
        }
        sl_algo_state_free(&st);
    }
    print_message("%d reservations, %d denials checked\n", reserved, denied);
    assert_true(reserved > 500);
    assert_true(denied > 500);
}

/* What shaping promises. Each admitted request goes at s = now + wait.
 * Over any run of them, in order, the tokens sent between the i-th and the
 * j-th (both included) are at most burst + rate x (s_j - s_i + 1 us): in
 * units, sum(cost) x S <= cap + (s_j - s_i + 1) x K (the 1 us is the wait's
 * rounding up). The send times never go backwards, every wait is at most
 * max_wait, every reset at most the ttl (the key outlives the queue). Time
 * runs forward here: a clock stepping back is treated as an early request. */
static void test_reserve_shaping_bound(void **state)
{
    (void)state;
    enum { N = 300 };
    static uint64_t s_at[N], units[N + 1];
    long admitted_total = 0, waited = 0;
    for (int run = 0; run < 150; run++) {
        struct sl_algo_params p;
        random_params(&p);
        uint64_t g = gcd(p.amount, p.period_us), S = p.period_us / g, K = p.amount / g;
        uint64_t cap = p.burst * S, ttl = sl_algo_ttl_us(&p);
        struct sl_algo_state st = { 0 };
        uint64_t now = SL_CASE_T0 + rnd_in(0, DAY);
        int n = 0;
        units[0] = 0;
        for (int i = 0; i < N; i++) {
            /* arrivals faster than the rate, so queues form */
            now += rnd() % 2 ? 0 : rnd_in(0, p.period_us / p.amount / 2 + 1);
            uint64_t cost = rnd_in(1, p.burst < 4 ? p.burst : p.burst / 2);
            struct sl_algo_result r;
            assert_int_equal(sl_algo_take(&st, &p, now, cost, 1, &r), 0);
            assert_true(r.reset_us <= ttl);
            if (!r.allowed)
                continue;
            assert_true(r.retry_after_us <= p.max_wait_us);
            s_at[n] = now + r.retry_after_us;
            if (n > 0)
                assert_true(s_at[n] >= s_at[n - 1]);
            units[n + 1] = units[n] + cost * S; /* < 300 x 2^52: fits */
            waited += r.retry_after_us > 0;
            n++;
        }
        for (int i = 0; i < n; i++)
            for (int j = i; j < n; j++) {
                unsigned __int128 sent = units[j + 1] - units[i];
                unsigned __int128 room = (unsigned __int128)(s_at[j] - s_at[i] + 1) * K + cap;
                if (sent > room)
                    print_error("run %d: amount %" PRIu64 " period %" PRIu64 " burst %" PRIu64
                                " max_wait %" PRIu64 ": requests %d..%d over the rate\n", run,
                                p.amount, p.period_us, p.burst, p.max_wait_us, i, j);
                assert_true(sent <= room);
            }
        admitted_total += n;
        sl_algo_state_free(&st);
    }
    print_message("%ld admitted, %ld after a wait\n", admitted_total, waited);
    assert_true(waited > 1000);
}

/* sl_algo_check(): only gcra reserves, and cap + max_wait x K <= 2^52. */
static void test_reserve_bounds(void **state)
{
    (void)state;
    const char *why = NULL;
    struct sl_algo_params p = { .algo = SL_ALGO_GCRA, .amount = 10, .period_us = S_US,
                                .burst = 2, .max_wait_us = HOUR };
    assert_int_equal(sl_algo_check(&p, &why), 0);
    assert_null(why);

    /* windows cannot reserve; the message names the algorithms that can */
    static const enum sl_algo windows[] = { SL_ALGO_FIXED_WINDOW, SL_ALGO_SLIDING_WINDOW,
                                            SL_ALGO_SLIDING_LOG };
    for (size_t i = 0; i < sizeof(windows) / sizeof(windows[0]); i++) {
        p.algo = windows[i];
        why = NULL;
        assert_int_equal(sl_algo_check(&p, &why), SL_ECONF);
        assert_non_null(why);
        assert_non_null(strstr(why, "action = delay needs algorithm = token_bucket or gcra"));
        p.max_wait_us = 0;
        assert_int_equal(sl_algo_check(&p, NULL), 0);
        p.max_wait_us = 1;
        struct sl_algo_state st = { 0 };
        struct sl_algo_result r;
        assert_int_equal(sl_algo_take(&st, &p, SL_CASE_T0, 1, 1, &r), SL_ECONF);
        assert_int_equal(r.allowed, 0);
        assert_int_equal(st.init, 0);
        sl_algo_state_free(&st);
    }
    /* token_bucket reserves through gcra (the limiter maps it there) */
    p.algo = SL_ALGO_TOKEN_BUCKET;
    why = NULL;
    assert_int_equal(sl_algo_check(&p, &why), SL_ECONF);
    assert_non_null(why);
    assert_non_null(strstr(why, "gcra"));

    /* the bound, exactly. 1/d burst 52124: cap = 52124 x 8.64e10 =
     * 4503513600000000, 2^52 - cap = 86027370496 units, K = 1 */
    p.algo = SL_ALGO_GCRA;
    p.amount = 1;
    p.period_us = DAY;
    p.burst = 52124;
    p.max_wait_us = 86027370496ULL;
    assert_int_equal(sl_algo_check(&p, NULL), 0);
    p.max_wait_us++;
    why = NULL;
    assert_int_equal(sl_algo_check(&p, &why), SL_ECONF);
    assert_non_null(why);
    assert_non_null(strstr(why, "2^52"));
    /* K = 1e6 (a million per us), cap = 1: W x 1e6 <= 2^52 - 1 -> W <= 4503599627 */
    p.amount = 1000000;
    p.period_us = 1;
    p.burst = 1;
    p.max_wait_us = 4503599627ULL;
    assert_int_equal(sl_algo_check(&p, NULL), 0);
    p.max_wait_us++;
    assert_int_equal(sl_algo_check(&p, NULL), SL_ECONF);
    /* refused by sl_algo_take() as well: denied, never, nothing changes */
    struct sl_algo_state st = { 0 };
    struct sl_algo_result r;
    assert_int_equal(sl_algo_take(&st, &p, SL_CASE_T0, 1, 1, &r), SL_ECONF);
    assert_int_equal(r.allowed, 0);
    assert_int_equal(r.retry_after_us, UINT64_MAX);
    assert_int_equal(st.init, 0);
    /* at the bound: top = 1 + 4503599627 x 1e6 = 4503599627000001 units.
     * One token (TAT = now + 1 unit), then a clock step back far enough
     * that the debt is read as top: cost 1 would wait max_wait + 1 us */
    p.max_wait_us--;
    assert_int_equal(sl_algo_take(&st, &p, SL_CASE_T0, 1, 1, &r), 0);
    assert_int_equal(r.allowed, 1);
    assert_int_equal(r.retry_after_us, 0);
    assert_int_equal(sl_algo_take(&st, &p, SL_CASE_T0 - 5000000000ULL, 1, 1, &r), 0);
    assert_int_equal(r.allowed, 0);
    assert_int_equal(r.retry_after_us, 1);
    assert_int_equal(r.reset_us, 4503599628ULL); /* ceil(4503599627000001 / 1e6) */
    /* and exactly 2^52: 1 per us (S = K = 1), burst 2^40, max_wait 2^52 - 2^40 */
    p.amount = 1;
    p.burst = SL_ALGO_MAX_AMOUNT;
    p.max_wait_us = SL_ALGO_MAX_UNITS - SL_ALGO_MAX_AMOUNT;
    assert_int_equal(sl_algo_check(&p, NULL), 0);
    p.max_wait_us++;
    assert_int_equal(sl_algo_check(&p, NULL), SL_ECONF);
    sl_algo_state_free(&st);
    /* 10 MiB/s, burst 10 MiB, max_wait 1 h: 3.3e10 + 1.2e14 units, far inside */
    p.amount = 10485760;
    p.period_us = S_US;
    p.burst = 10485760;
    p.max_wait_us = HOUR;
    assert_int_equal(sl_algo_check(&p, NULL), 0);
}

/* The ttl adds max_wait to the time to fill up (gcra only), in whole ms. */
static void test_reserve_ttl(void **state)
{
    (void)state;
    struct sl_algo_params p = { .algo = SL_ALGO_GCRA, .amount = 10, .period_us = S_US,
                                .burst = 2, .max_wait_us = 500000 };
    assert_int_equal(sl_algo_ttl_us(&p), 700000); /* 200 ms + 500 ms */
    p.amount = 3;
    p.burst = 1;
    p.max_wait_us = 1;
    assert_int_equal(sl_algo_ttl_us(&p), 334000); /* 333334 + 1 us -> 334 ms */
    p.max_wait_us = 667;
    assert_int_equal(sl_algo_ttl_us(&p), 335000); /* 334001 us -> 335 ms */
    p.amount = 1;
    p.period_us = DAY;
    p.max_wait_us = HOUR;
    assert_int_equal(sl_algo_ttl_us(&p), DAY + HOUR);
    p.amount = 7;
    p.period_us = 3;
    p.burst = 10;
    p.max_wait_us = 2;
    assert_int_equal(sl_algo_ttl_us(&p), 1000); /* 5 + 2 us: at least 1 ms */
    p.max_wait_us = 0;
    assert_int_equal(sl_algo_ttl_us(&p), 1000);
    /* every reset of the table fits in the ttl: the key outlives the queue */
    for (size_t ci = 0; ci < SL_N_RCASES; ci++) {
        const struct sl_rcase *c = &sl_rcases[ci];
        struct sl_algo_params q = rparams(c);
        for (int i = 0; i < SL_RCASE_MAX_STEPS && c->steps[i].now_us != SL_CASE_END_US; i++)
            assert_true(c->steps[i].reset_us <= sl_algo_ttl_us(&q));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reserve_cases),
        cmocka_unit_test(test_reserve_reload_shorter_wait),
        cmocka_unit_test(test_reserve_waits_are_exact),
        cmocka_unit_test(test_reserve_shaping_bound),
        cmocka_unit_test(test_reserve_bounds),
        cmocka_unit_test(test_reserve_ttl),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

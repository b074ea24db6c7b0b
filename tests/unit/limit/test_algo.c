/* Unit tests for src/limit/algo.c: the shared table of cases
 * (tests/unit/limit/cases.h, which the Lua scripts also pass), peeks that
 * change nothing, gcra == token_bucket with time running forward, the
 * sliding log's exactness under random traffic, reloads, ttl and bounds. */
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
#include "unit/limit/cases.h"

#define S_US 1000000ULL
#define DAY  (86400 * S_US)

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

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

static struct sl_algo_params params(enum sl_algo a, const struct sl_case *c)
{
    struct sl_algo_params p = { .algo = a, .amount = c->amount, .period_us = c->period_us,
                                .burst = c->burst };
    return p;
}

/* 1 if <r> is what step <s> expects; otherwise prints both. */
static int step_ok(const struct sl_case *c, enum sl_algo a, int i, const struct sl_case_step *s,
                   const struct sl_algo_result *r)
{
    uint64_t want_retry = s->retry_after_us < 0 ? UINT64_MAX : (uint64_t)s->retry_after_us;
    if (r->allowed == s->allowed && r->remaining == s->remaining &&
        r->retry_after_us == want_retry && r->reset_us == s->reset_us)
        return 1;
    print_error("case '%s' (%s) step %d (now %" PRIu64 ", cost %" PRIu64 "):\n"
                "  want allowed %d remaining %" PRIu64 " retry %" PRIu64 " reset %" PRIu64 "\n"
                "  got  allowed %d remaining %" PRIu64 " retry %" PRIu64 " reset %" PRIu64 "\n",
                c->name, sl_algo_name(a), i, s->now_us, s->cost, s->allowed, s->remaining,
                want_retry, s->reset_us, r->allowed, r->remaining, r->retry_after_us, r->reset_us);
    return 0;
}

static void test_cases(void **state)
{
    (void)state;
    int failures = 0, runs = 0, steps = 0;
    for (size_t ci = 0; ci < SL_N_CASES; ci++) {
        const struct sl_case *c = &sl_cases[ci];
        for (int a = 0; a <= SL_ALGO_FIXED_WINDOW; a++) {
            if (!(c->algos & (1u << a)))
                continue;
            struct sl_algo_params p = params((enum sl_algo)a, c);
            assert_int_equal(sl_algo_check(&p, NULL), 0);
            struct sl_algo_state st = { 0 };
            runs++;
            for (int i = 0; i < SL_CASE_MAX_STEPS && c->steps[i].now_us != SL_CASE_END_US; i++) {
                const struct sl_case_step *s = &c->steps[i];
                struct sl_algo_result r;
                assert_int_equal(sl_algo_take(&st, &p, s->now_us, s->cost, 1, &r), 0);
                steps++;
                if (!step_ok(c, (enum sl_algo)a, i, s, &r))
                    failures++;
            }
            sl_algo_state_free(&st);
        }
    }
    print_message("%d runs of %zu cases, %d steps\n", runs, SL_N_CASES, steps);
    assert_true(runs >= 25);
    assert_true(steps >= 200);
    assert_int_equal(failures, 0);
}

static int state_same(const struct sl_algo_state *x, const struct sl_algo_state *y)
{
    if (x->a != y->a || x->b != y->b || x->c != y->c || x->hw != y->hw || x->init != y->init ||
        x->log_n != y->log_n)
        return 0;
    for (uint32_t i = 0; i < x->log_n; i++)
        if (x->log[(x->log_head + i) % x->log_cap] != y->log[(y->log_head + i) % y->log_cap])
            return 0;
    return 1;
}

/* Before every step of every case, a peek: same verdict, same wait, nothing
 * changed; when denied the whole answer is the same as the take's. */
static void test_peek_changes_nothing(void **state)
{
    (void)state;
    for (size_t ci = 0; ci < SL_N_CASES; ci++) {
        const struct sl_case *c = &sl_cases[ci];
        for (int a = 0; a <= SL_ALGO_FIXED_WINDOW; a++) {
            if (!(c->algos & (1u << a)))
                continue;
            struct sl_algo_params p = params((enum sl_algo)a, c);
            struct sl_algo_state st = { 0 };
            for (int i = 0; i < SL_CASE_MAX_STEPS && c->steps[i].now_us != SL_CASE_END_US; i++) {
                const struct sl_case_step *s = &c->steps[i];
                struct sl_algo_result peek, take;
                struct sl_algo_state snap = st; /* same ring: its contents are saved below */
                uint64_t saved[64];
                uint32_t nsaved = st.log_n < 64 ? st.log_n : 64;
                for (uint32_t k = 0; k < nsaved; k++)
                    saved[k] = st.log[(st.log_head + k) % st.log_cap];
                assert_int_equal(sl_algo_take(&st, &p, s->now_us, s->cost, 0, &peek), 0);
                assert_true(state_same(&st, &snap));
                for (uint32_t k = 0; k < nsaved; k++)
                    assert_int_equal(saved[k], st.log[(st.log_head + k) % st.log_cap]);
                assert_int_equal(sl_algo_take(&st, &p, s->now_us, s->cost, 1, &take), 0);
                assert_int_equal(peek.allowed, take.allowed);
                assert_int_equal(peek.retry_after_us, take.retry_after_us);
                if (!take.allowed || s->cost == 0) {
                    assert_int_equal(peek.remaining, take.remaining);
                    assert_int_equal(peek.reset_us, take.reset_us);
                } else {
                    assert_true(peek.remaining >= take.remaining);
                }
            }
            sl_algo_state_free(&st);
        }
    }
}

/* With time running forward, gcra and token_bucket are one limit: random
 * rates (fast, slow, fractional emission intervals), random costs. */
static void test_gcra_equals_token_bucket(void **state)
{
    (void)state;
    static const uint64_t periods[] = { 1, 3, 1000, S_US, 60 * S_US, 3600 * S_US, DAY };
    for (int run = 0; run < 400; run++) {
        struct sl_algo_params tb = {
            .algo = SL_ALGO_TOKEN_BUCKET,
            .amount = rnd_in(1, run % 3 == 0 ? 20 : 20000000),
            .period_us = periods[rnd() % (sizeof(periods) / sizeof(periods[0]))],
            .burst = rnd_in(1, 5000),
        };
        if (sl_algo_check(&tb, NULL) != 0)
            continue;
        struct sl_algo_params gc = tb;
        gc.algo = SL_ALGO_GCRA;
        struct sl_algo_state s1 = { 0 }, s2 = { 0 };
        uint64_t now = SL_CASE_T0 + rnd_in(0, DAY);
        for (int i = 0; i < 200; i++) {
            now += rnd() % 4 == 0 ? 0 : rnd_in(0, tb.period_us / (rnd_in(1, 50)) + 1);
            uint64_t cost = rnd_in(0, tb.burst + 1);
            struct sl_algo_result r1, r2;
            assert_int_equal(sl_algo_take(&s1, &tb, now, cost, 1, &r1), 0);
            assert_int_equal(sl_algo_take(&s2, &gc, now, cost, 1, &r2), 0);
            if (r1.allowed != r2.allowed || r1.remaining != r2.remaining ||
                r1.retry_after_us != r2.retry_after_us || r1.reset_us != r2.reset_us) {
                print_error("run %d step %d: amount %" PRIu64 " period %" PRIu64 " burst %" PRIu64
                            " now %" PRIu64 " cost %" PRIu64 "\n", run, i, tb.amount,
                            tb.period_us, tb.burst, now, cost);
                assert_int_equal(r1.allowed, r2.allowed);
                assert_int_equal(r1.remaining, r2.remaining);
                assert_int_equal(r1.retry_after_us, r2.retry_after_us);
                assert_int_equal(r1.reset_us, r2.reset_us);
            }
        }
    }
}

/* A denied request's retry_after is exact: one microsecond earlier it is
 * still denied, at retry_after it is allowed (peeks, nothing taken). */
static void test_retry_after_is_exact(void **state)
{
    (void)state;
    static const uint64_t periods[] = { 7, 1000, S_US, 60 * S_US, DAY };
    for (int run = 0; run < 300; run++) {
        struct sl_algo_params p = {
            .algo = (enum sl_algo)(run % 5),
            .amount = rnd_in(1, run % 2 ? 10 : 100000),
            .period_us = periods[rnd() % (sizeof(periods) / sizeof(periods[0]))],
            .burst = rnd_in(1, 1000),
        };
        if (sl_algo_check(&p, NULL) != 0)
            continue;
        struct sl_algo_state st = { 0 };
        uint64_t now = SL_CASE_T0 + rnd_in(0, DAY), cap = p.algo <= SL_ALGO_GCRA ? p.burst : p.amount;
        for (int i = 0; i < 60; i++) {
            now += rnd_in(0, p.period_us / 4 + 1);
            uint64_t cost = rnd_in(0, cap < 50 ? cap : cap / 10 + 1);
            struct sl_algo_result r, later;
            assert_int_equal(sl_algo_take(&st, &p, now, cost, 1, &r), 0);
            if (r.allowed || r.retry_after_us == UINT64_MAX)
                continue;
            assert_true(r.retry_after_us > 0);
            assert_int_equal(sl_algo_take(&st, &p, now + r.retry_after_us - 1, cost, 0, &later), 0);
            if (later.allowed)
                print_error("%s: allowed 1 us before retry_after (%" PRIu64 ")\n",
                            sl_algo_name(p.algo), r.retry_after_us);
            assert_false(later.allowed);
            assert_int_equal(sl_algo_take(&st, &p, now + r.retry_after_us, cost, 0, &later), 0);
            assert_true(later.allowed);
        }
        sl_algo_state_free(&st);
    }
}

/* The sliding log is exact: no window of one period ever holds more than
 * amount admitted events, and every denial had no room. Many events, so the
 * ring grows and wraps. */
static void test_sliding_log_exact(void **state)
{
    (void)state;
    struct sl_algo_params p = { .algo = SL_ALGO_SLIDING_LOG, .amount = 300,
                                .period_us = 10000, .burst = 1 };
    struct sl_algo_state st = { 0 };
    static uint64_t times[200000];
    size_t n = 0;
    uint64_t now = 5;
    for (int i = 0; i < 40000; i++) {
        now += rnd_in(0, 60);
        uint64_t cost = rnd_in(0, 12);
        struct sl_algo_result r;
        assert_int_equal(sl_algo_take(&st, &p, now, cost, 1, &r), 0);
        uint64_t inside = 0;
        for (size_t k = n; k > 0 && times[k - 1] + p.period_us > now; k--)
            inside++;
        assert_int_equal(r.allowed, inside + cost <= p.amount);
        if (r.allowed) {
            for (uint64_t k = 0; k < cost && n < sizeof(times) / sizeof(times[0]); k++)
                times[n++] = now;
            inside += cost;
        }
        assert_int_equal(r.remaining, p.amount - inside);
    }
    assert_true(st.log_cap <= p.amount);
    assert_true(n > 20000);
    sl_algo_state_free(&st);
    assert_null(st.log);
}

/* A reload that changes a bucket's rate keeps the whole tokens it had. */
static void test_reload_keeps_whole_tokens(void **state)
{
    (void)state;
    struct sl_algo_params p = { .algo = SL_ALGO_TOKEN_BUCKET, .amount = 3, .period_us = S_US,
                                .burst = 10 };
    struct sl_algo_state st = { 0 };
    struct sl_algo_result r;
    uint64_t t = SL_CASE_T0;
    assert_int_equal(sl_algo_take(&st, &p, t, 6, 1, &r), 0);
    assert_int_equal(r.remaining, 4);
    assert_int_equal(sl_algo_take(&st, &p, t + 100000, 0, 1, &r), 0); /* 4.3 tokens */
    assert_int_equal(r.remaining, 4);
    p.amount = 1000; /* 1000/s now: a token is 1000 units, not 1e6 */
    p.burst = 50;
    assert_int_equal(sl_algo_take(&st, &p, t, 1, 1, &r), 0);
    /* 4 tokens at t (the last take) are kept as 4000 units; take 1 */
    assert_int_equal(r.remaining, 3);
    assert_int_equal(r.reset_us, 47000); /* 47 tokens at 1000/s */
    p.burst = 2; /* smaller burst: clamped */
    assert_int_equal(sl_algo_take(&st, &p, t, 2, 1, &r), 0);
    assert_int_equal(r.remaining, 0);
    assert_int_equal(sl_algo_take(&st, &p, t, 1, 1, &r), 0);
    assert_int_equal(r.allowed, 0);
    sl_algo_state_free(&st);

    /* gcra: a fraction stored under another rate rounds up to a whole us */
    struct sl_algo_params g = { .algo = SL_ALGO_GCRA, .amount = 7, .period_us = 3, .burst = 10 };
    assert_int_equal(sl_algo_take(&st, &g, 1000, 1, 1, &r), 0); /* TAT = 1000 + 3/7 */
    assert_int_equal(st.a, 1000);
    assert_int_equal(st.c, 3);
    g.amount = 1; /* K = 1: the fraction 3 >= 1 */
    g.period_us = 1;
    assert_int_equal(sl_algo_take(&st, &g, 1000, 0, 1, &r), 0);
    assert_int_equal(r.remaining, 9); /* debt 1 us = 1 token */
    sl_algo_state_free(&st);

    /* gcra: a TAT an hour ahead under 1/h, read under 100/s burst 100 (an
     * override gone): the whole tokens held then (none) are kept and the
     * bucket refills at the new rate from there, even after a peek; the
     * old TAT does not refuse for the rest of the hour. */
    struct sl_algo_params h = { .algo = SL_ALGO_GCRA, .amount = 1, .period_us = 3600 * S_US,
                                .burst = 1 };
    struct sl_algo_state sh = { 0 };
    assert_int_equal(sl_algo_take(&sh, &h, t, 1, 1, &r), 0);
    assert_int_equal(r.allowed, 1);
    assert_int_equal(sl_algo_take(&sh, &h, t + 1000, 1, 1, &r), 0);
    assert_int_equal(r.allowed, 0);
    assert_true(r.retry_after_us > 3599 * S_US);
    h.amount = 100;
    h.period_us = S_US;
    h.burst = 100;
    assert_int_equal(sl_algo_take(&sh, &h, t + 2000, 1, 0, &r), 0);
    assert_int_equal(r.allowed, 0);
    assert_int_equal(r.retry_after_us, 10000); /* one token at 100/s */
    assert_int_equal(sl_algo_take(&sh, &h, t + 12000, 1, 1, &r), 0);
    assert_int_equal(r.allowed, 1);
    int n = 0;
    for (int i = 0; i < 150; i++) {
        assert_int_equal(sl_algo_take(&sh, &h, t + 12000 + S_US + S_US / 100, 1, 1, &r), 0);
        n += r.allowed;
    }
    assert_int_equal(n, 100); /* full again a second later */
    /* and a burst changed alone (same rate) keeps the tokens, up to it */
    h.burst = 10;
    assert_int_equal(sl_algo_take(&sh, &h, t + 12000 + 2 * S_US, 1, 1, &r), 0);
    assert_int_equal(r.allowed, 1);
    assert_int_equal(r.remaining, 9);
    sl_algo_state_free(&sh);
}

/* A reload that changes the algorithm (or a window's period) converts the
 * state (sl_algo_convert): for every pair, 3 of 10 taken leaves 7 under
 * the new algorithm, up to its capacity; a window taken to a window keeps
 * its count instead (3 counted of a new amount of 4 leaves 1). Another
 * period for the same window counts the same in the new window. */
static void test_convert_keeps_what_is_left(void **state)
{
    (void)state;
    static const enum sl_algo all[5] = { SL_ALGO_TOKEN_BUCKET, SL_ALGO_GCRA, SL_ALGO_FIXED_WINDOW,
                                         SL_ALGO_SLIDING_WINDOW, SL_ALGO_SLIDING_LOG };
    const uint64_t t0 = 10 * DAY + 12345, t1 = t0 + 7 * S_US;
    for (int i = 0; i < 5; i++) {
        for (int j = 0; j < 5; j++) {
            for (int cap = 0; cap < 2; cap++) {
                int fw = all[i] == SL_ALGO_FIXED_WINDOW || all[i] == SL_ALGO_SLIDING_WINDOW ||
                         all[i] == SL_ALGO_SLIDING_LOG;
                int tw = all[j] == SL_ALGO_FIXED_WINDOW || all[j] == SL_ALGO_SLIDING_WINDOW ||
                         all[j] == SL_ALGO_SLIDING_LOG;
                uint64_t n = cap ? 4 : 10;
                struct sl_algo_params from = { .algo = all[i], .amount = fw ? 10 : 1,
                                               .period_us = fw ? 365 * DAY : 3600 * S_US,
                                               .burst = 10 };
                struct sl_algo_params to = { .algo = all[j], .amount = tw ? n : 1,
                                             .period_us = tw ? 300 * DAY : 3600 * S_US,
                                             .burst = n };
                struct sl_algo_state st;
                memset(&st, 0, sizeof(st));
                struct sl_algo_result r;
                assert_int_equal(sl_algo_take(&st, &from, t0, 3, 1, &r), 0);
                assert_true(r.allowed);
                assert_int_equal(sl_algo_convert(&st, &from, &to, t1), 0);
                assert_int_equal(sl_algo_take(&st, &to, t1, 0, 0, &r), 0);
                uint64_t want = fw && tw ? (n > 3 ? n - 3 : 0) : (n < 7 ? n : 7);
                if (r.remaining != want)
                    fail_msg("%s -> %s (capacity %" PRIu64 "): %" PRIu64 " left, want %" PRIu64,
                             sl_algo_name(all[i]), sl_algo_name(all[j]), n, r.remaining, want);
                /* and it takes exactly that much more */
                assert_int_equal(sl_algo_take(&st, &to, t1, want, 1, &r), 0);
                assert_true(want == 0 || r.allowed);
                assert_int_equal(sl_algo_take(&st, &to, t1, 1, 0, &r), 0);
                assert_false(r.allowed);
                sl_algo_state_free(&st);
            }
        }
    }
}

static void test_ttl(void **state)
{
    (void)state;
    struct sl_algo_params p = { .algo = SL_ALGO_TOKEN_BUCKET, .amount = 10, .period_us = S_US,
                                .burst = 10 };
    assert_int_equal(sl_algo_ttl_us(&p), S_US);
    p.burst = 25;
    assert_int_equal(sl_algo_ttl_us(&p), 2500000);
    p.amount = 3;
    p.burst = 1;
    assert_int_equal(sl_algo_ttl_us(&p), 334000); /* 333333.3 us -> 334 ms */
    p.algo = SL_ALGO_GCRA;
    assert_int_equal(sl_algo_ttl_us(&p), 334000);
    p.amount = 1000000;
    p.burst = 1;
    assert_int_equal(sl_algo_ttl_us(&p), 1000); /* at least 1 ms */
    p.algo = SL_ALGO_FIXED_WINDOW;
    p.period_us = 60 * S_US;
    assert_int_equal(sl_algo_ttl_us(&p), 60 * S_US);
    p.algo = SL_ALGO_SLIDING_LOG;
    assert_int_equal(sl_algo_ttl_us(&p), 60 * S_US);
    p.algo = SL_ALGO_SLIDING_WINDOW;
    assert_int_equal(sl_algo_ttl_us(&p), 120 * S_US);
    p.period_us = 10;
    assert_int_equal(sl_algo_ttl_us(&p), 1000);
    p.algo = SL_ALGO_TOKEN_BUCKET;
    p.amount = 1;
    p.period_us = SL_ALGO_MAX_PERIOD_US;
    p.burst = SL_ALGO_MAX_AMOUNT; /* out of bounds: saturates, does not wrap */
    assert_true(sl_algo_ttl_us(&p) > SL_ALGO_MAX_PERIOD_US);
}

static void test_bounds(void **state)
{
    (void)state;
    const char *why = NULL;
    struct sl_algo_params p = { .algo = SL_ALGO_TOKEN_BUCKET, .amount = 1, .period_us = DAY,
                                .burst = 52124 };
    assert_int_equal(sl_algo_check(&p, &why), 0);
    assert_null(why);
    p.burst = 52125; /* 52125 * 8.64e10 > 2^52 */
    assert_int_equal(sl_algo_check(&p, &why), SL_ECONF);
    assert_non_null(why);
    p.amount = 1000000; /* gcd 1e6: a token is 86400 units */
    assert_int_equal(sl_algo_check(&p, NULL), 0);
    p.algo = SL_ALGO_GCRA;
    p.amount = 1;
    struct sl_algo_state st = { 0 };
    struct sl_algo_result r;
    assert_int_equal(sl_algo_take(&st, &p, 5, 1, 1, &r), SL_ECONF);
    assert_int_equal(r.allowed, 0);
    assert_int_equal(r.retry_after_us, UINT64_MAX);
    assert_int_equal(st.init, 0);
    p.burst = 10 * 1024 * 1024; /* 10 MiB at 10 MiB/s */
    p.amount = 10 * 1024 * 1024;
    p.period_us = S_US;
    assert_int_equal(sl_algo_check(&p, NULL), 0);
    p.burst = 4503599627ULL; /* any per-second rate: burst 4.5e9 fits */
    p.amount = 1;
    assert_int_equal(sl_algo_check(&p, NULL), 0);
    p.burst = 0;
    assert_int_equal(sl_algo_check(&p, NULL), SL_ECONF);
    p.algo = SL_ALGO_FIXED_WINDOW; /* windows ignore burst */
    assert_int_equal(sl_algo_check(&p, NULL), 0);
    p.amount = 0;
    assert_int_equal(sl_algo_check(&p, NULL), SL_ECONF);
    p.amount = SL_ALGO_MAX_AMOUNT + 1;
    assert_int_equal(sl_algo_check(&p, NULL), SL_ECONF);
    p.amount = SL_ALGO_MAX_AMOUNT;
    p.period_us = SL_ALGO_MAX_PERIOD_US + 1;
    assert_int_equal(sl_algo_check(&p, NULL), SL_ECONF);
    p.period_us = 0;
    assert_int_equal(sl_algo_check(&p, NULL), SL_ECONF);
    p.period_us = SL_ALGO_MAX_PERIOD_US;
    p.algo = SL_ALGO_SLIDING_WINDOW;
    assert_int_equal(sl_algo_check(&p, NULL), 0);
    p.algo = SL_ALGO_SLIDING_LOG;
    assert_int_equal(sl_algo_check(&p, &why), SL_ECONF);
    p.amount = SL_ALGO_MAX_LOG;
    assert_int_equal(sl_algo_check(&p, NULL), 0);
    p.algo = (enum sl_algo)99;
    assert_int_equal(sl_algo_check(&p, NULL), SL_ECONF);
}

/* The quota policy (HTTP's RateLimit-Policy q and w): the burst per the
 * time to refill it for the buckets, the amount per the period for the
 * windows; whole seconds rounded up, at least 1. */
static void test_policy(void **state)
{
    (void)state;
    uint64_t q, w;
    struct sl_algo_params p = { .algo = SL_ALGO_TOKEN_BUCKET, .amount = 10, .period_us = S_US,
                                .burst = 100 };
    sl_algo_policy(&p, &q, &w);
    assert_int_equal(q, 100);
    assert_int_equal(w, 10);  /* 100 tokens at 10/s: 10 s */
    p.algo = SL_ALGO_GCRA;
    p.burst = 15;
    sl_algo_policy(&p, &q, &w);
    assert_int_equal(q, 15);
    assert_int_equal(w, 2);   /* 1.5 s rounds up */
    p.amount = 1000;
    p.burst = 10;
    sl_algo_policy(&p, &q, &w);
    assert_int_equal(w, 1);   /* 10 ms: at least 1 s */
    p.amount = 1;
    p.period_us = DAY;
    p.burst = 5;
    sl_algo_policy(&p, &q, &w);
    assert_int_equal(q, 5);
    assert_int_equal(w, 5 * 86400);
    p.amount = 3;             /* a token every 1/3 s exactly: 1 s for 3 */
    p.period_us = S_US;
    p.burst = 3;
    sl_algo_policy(&p, &q, &w);
    assert_int_equal(w, 1);
    p.burst = 4;              /* 4/3 s */
    sl_algo_policy(&p, &q, &w);
    assert_int_equal(w, 2);
    enum sl_algo windows[] = { SL_ALGO_FIXED_WINDOW, SL_ALGO_SLIDING_WINDOW, SL_ALGO_SLIDING_LOG };
    for (size_t i = 0; i < sizeof(windows) / sizeof(windows[0]); i++) {
        struct sl_algo_params pw = { .algo = windows[i], .amount = 50, .period_us = 60 * S_US,
                                     .burst = 7 /* ignored */ };
        sl_algo_policy(&pw, &q, &w);
        assert_int_equal(q, 50);
        assert_int_equal(w, 60);
        pw.period_us = 1500000;
        sl_algo_policy(&pw, &q, &w);
        assert_int_equal(w, 2);
        pw.period_us = 100;
        sl_algo_policy(&pw, &q, &w);
        assert_int_equal(w, 1);
    }
}

/* The policy's promise (docs/http.md): a client that never sends more
 * than q in any w seconds is never refused by token_bucket, gcra,
 * fixed_window or sliding_log. Random limits, random traffic that keeps
 * to the policy as tightly as it can. */
static void test_policy_is_honest(void **state)
{
    (void)state;
    enum sl_algo algos[] = { SL_ALGO_TOKEN_BUCKET, SL_ALGO_GCRA, SL_ALGO_FIXED_WINDOW,
                             SL_ALGO_SLIDING_LOG };
    static uint64_t sent[4096];
    for (int round = 0; round < 400; round++) {
        enum sl_algo a = algos[round % 4];
        struct sl_algo_params p = { .algo = a, .amount = rnd_in(1, 20),
                                    .period_us = rnd_in(1, 3) * (rnd() % 2 ? S_US : S_US / 3),
                                    .burst = rnd_in(1, 30) };
        uint64_t q, w;
        sl_algo_policy(&p, &q, &w);
        uint64_t wu = w * S_US, now = SL_CASE_T0 + rnd_in(0, 5 * S_US);
        struct sl_algo_state st;
        memset(&st, 0, sizeof(st));
        size_t n = 0, first = 0;
        while (n < sizeof(sent) / sizeof(sent[0])) {
            /* now: the earliest a request keeps to "at most q in (now - w, now]" */
            while (first < n && sent[first] + wu <= now)
                first++;
            if (n - first >= q) {
                now = sent[n - q] + wu;
                continue;
            }
            struct sl_algo_result r;
            assert_int_equal(sl_algo_take(&st, &p, now, 1, 1, &r), 0);
            if (!r.allowed)
                fail_msg("%s %" PRIu64 "/%" PRIu64 " us burst %" PRIu64 " (q %" PRIu64 " w %"
                         PRIu64 "): refused request %zu", sl_algo_name(a), p.amount, p.period_us,
                         p.burst, q, w, n);
            sent[n++] = now;
            now += rnd() % 4 == 0 ? rnd_in(0, wu) : 0;
        }
        sl_algo_state_free(&st);
    }
}

static void test_names(void **state)
{
    (void)state;
    assert_string_equal(sl_algo_name(SL_ALGO_TOKEN_BUCKET), "token_bucket");
    assert_string_equal(sl_algo_name(SL_ALGO_GCRA), "gcra");
    assert_string_equal(sl_algo_name(SL_ALGO_SLIDING_WINDOW), "sliding_window");
    assert_string_equal(sl_algo_name(SL_ALGO_SLIDING_LOG), "sliding_log");
    assert_string_equal(sl_algo_name(SL_ALGO_FIXED_WINDOW), "fixed_window");
    assert_string_equal(sl_algo_name((enum sl_algo)42), "unknown");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_peek_changes_nothing),
        cmocka_unit_test(test_gcra_equals_token_bucket),
        cmocka_unit_test(test_retry_after_is_exact),
        cmocka_unit_test(test_sliding_log_exact),
        cmocka_unit_test(test_reload_keeps_whole_tokens),
        cmocka_unit_test(test_convert_keeps_what_is_left),
        cmocka_unit_test(test_ttl),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_policy),
        cmocka_unit_test(test_policy_is_honest),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

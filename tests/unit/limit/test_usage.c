/* The usage table (limit/usage.h): counts merged per identity-window,
 * deliveries numbered and retried unchanged, the bound and what it drops,
 * connection time split across windows. Time is passed in by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "limit/usage.h"

#define S 1000000ULL
#define T0 (1796000000ULL * S) /* late 2026; at() rounds it to a minute */

/* A wall time at the start of a minute, plus <s> seconds. */
static uint64_t at(uint64_t s)
{
    uint64_t t = T0 / S;
    t -= t % 60;
    return (t + s) * S;
}

/* What a deliverer saw: one row per entry handed. */
struct seen {
    int      n;
    char     id[16][32];
    uint64_t window[16];
    uint64_t out[16][SL_USAGE_FIELDS];
    uint64_t seq[16];
    struct sl_usage_entry *e[16];
    int      ok;      /* done at once with this ok; -1: left busy */
    struct sl_usage *u;
};

static void deliver(void *data, struct sl_usage_entry *e)
{
    struct seen *s = data;
    int i = s->n++;
    snprintf(s->id[i], sizeof(s->id[i]), "%s", e->id);
    s->window[i] = e->window;
    memcpy(s->out[i], e->out, sizeof(e->out));
    s->seq[i] = e->seq;
    s->e[i] = e;
    if (s->ok >= 0)
        sl_usage_done(s->u, e, s->ok);
}

static int find(const struct seen *s, const char *id, uint64_t window)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->id[i], id) == 0 && s->window[i] == window)
            return i;
    return -1;
}

/* Adds of one identity and window merge; two identities stay apart; a
 * delivered table is empty again. */
static void test_merge(void **state)
{
    (void)state;
    struct sl_usage *u = sl_usage_new(60, 100);
    assert_non_null(u);
    assert_int_equal(sl_usage_add(u, "user:alice", SL_USAGE_REQUESTS, 3, at(1)), 0);
    assert_int_equal(sl_usage_add(u, "user:alice", SL_USAGE_REQUESTS, 2, at(59)), 0);
    assert_int_equal(sl_usage_add(u, "user:alice", SL_USAGE_BYTES_IN, 100, at(2)), 0);
    assert_int_equal(sl_usage_add(u, "ip:10.0.0.7", SL_USAGE_REJECTED, 1, at(3)), 0);
    assert_int_equal(sl_usage_add(u, "user:alice", SL_USAGE_REQUESTS, 7, at(60)), 0); /* next window */
    struct seen s = { .ok = 1, .u = u };
    assert_int_equal(sl_usage_take(u, deliver, &s), 3);
    uint64_t w0 = at(0) / S, w1 = at(60) / S;
    int a0 = find(&s, "user:alice", w0), a1 = find(&s, "user:alice", w1), b = find(&s, "ip:10.0.0.7", w0);
    assert_true(a0 >= 0 && a1 >= 0 && b >= 0);
    assert_int_equal(s.out[a0][SL_USAGE_REQUESTS], 5);
    assert_int_equal(s.out[a0][SL_USAGE_BYTES_IN], 100);
    assert_int_equal(s.out[a1][SL_USAGE_REQUESTS], 7);
    assert_int_equal(s.out[b][SL_USAGE_REJECTED], 1);
    assert_int_equal(s.out[b][SL_USAGE_REQUESTS], 0);
    /* distinct, increasing numbers */
    assert_true(s.seq[a0] != s.seq[a1] && s.seq[a0] != s.seq[b] && s.seq[a1] != s.seq[b]);
    struct sl_usage_stats st;
    sl_usage_stats(u, &st);
    assert_int_equal(st.entries, 0);
    assert_int_equal(st.delivered, 3);
    struct seen s2 = { .ok = 1, .u = u };
    assert_int_equal(sl_usage_take(u, deliver, &s2), 0);
    sl_usage_free(u);
}

/* A failed delivery is offered again with the same counts and number;
 * what came meanwhile waits beside it and goes next, under a higher one. */
static void test_retry_same_id(void **state)
{
    (void)state;
    struct sl_usage *u = sl_usage_new(60, 100);
    sl_usage_add(u, "user:alice", SL_USAGE_REQUESTS, 4, at(1));
    struct seen s = { .ok = 0, .u = u };
    assert_int_equal(sl_usage_take(u, deliver, &s), 1);
    uint64_t seq = s.seq[0];
    sl_usage_add(u, "user:alice", SL_USAGE_REQUESTS, 6, at(2));
    struct seen r = { .ok = 1, .u = u };
    assert_int_equal(sl_usage_take(u, deliver, &r), 1);
    assert_int_equal(r.seq[0], seq);
    assert_int_equal(r.out[0][SL_USAGE_REQUESTS], 4);
    struct seen n = { .ok = 1, .u = u };
    assert_int_equal(sl_usage_take(u, deliver, &n), 1);
    assert_true(n.seq[0] > seq);
    assert_int_equal(n.out[0][SL_USAGE_REQUESTS], 6);
    struct sl_usage_stats st;
    sl_usage_stats(u, &st);
    assert_int_equal(st.failed, 1);
    assert_int_equal(st.delivered, 2);
    assert_int_equal(st.entries, 0);
    sl_usage_free(u);
}

/* An entry whose delivery is in flight is not handed again; counts for it
 * merge and go once it is done. */
static void test_busy(void **state)
{
    (void)state;
    struct sl_usage *u = sl_usage_new(60, 100);
    sl_usage_add(u, "user:bob", SL_USAGE_BYTES_OUT, 10, at(1));
    struct seen s = { .ok = -1, .u = u };
    assert_int_equal(sl_usage_take(u, deliver, &s), 1);
    sl_usage_add(u, "user:bob", SL_USAGE_BYTES_OUT, 5, at(2));
    sl_usage_add(u, "user:bob", SL_USAGE_BYTES_OUT, 5, at(3));
    struct seen t = { .ok = 1, .u = u };
    assert_int_equal(sl_usage_take(u, deliver, &t), 0);
    sl_usage_done(u, s.e[0], 1);
    assert_int_equal(sl_usage_take(u, deliver, &t), 1);
    assert_int_equal(t.out[0][SL_USAGE_BYTES_OUT], 10);
    assert_true(t.seq[0] > s.seq[0]);
    sl_usage_free(u);
}

/* Past max_entries, counts for new identity-windows are dropped and
 * counted per field; those of entries held still merge; delivered ones
 * make room again. */
static void test_bound_and_drops(void **state)
{
    (void)state;
    struct sl_usage *u = sl_usage_new(60, 3);
    char id[32];
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof(id), "ip:10.0.0.%d", i);
        assert_int_equal(sl_usage_add(u, id, SL_USAGE_REQUESTS, 1, at(1)), 0);
    }
    assert_int_equal(sl_usage_add(u, "ip:10.0.0.9", SL_USAGE_REQUESTS, 5, at(1)), -1);
    assert_int_equal(sl_usage_add(u, "ip:10.0.0.9", SL_USAGE_BYTES_IN, 700, at(1)), -1);
    assert_int_equal(sl_usage_add(u, "ip:10.0.0.0", SL_USAGE_REQUESTS, 1, at(61)), -1); /* a new window */
    assert_int_equal(sl_usage_add(u, "ip:10.0.0.0", SL_USAGE_REQUESTS, 1, at(2)), 0);   /* held: merges */
    struct sl_usage_stats st;
    sl_usage_stats(u, &st);
    assert_int_equal(st.entries, 3);
    assert_int_equal(st.dropped[SL_USAGE_REQUESTS], 6);
    assert_int_equal(st.dropped[SL_USAGE_BYTES_IN], 700);
    /* the store is away: the entries stay, and still nothing new fits */
    struct seen s = { .ok = 0, .u = u };
    assert_int_equal(sl_usage_take(u, deliver, &s), 3);
    assert_int_equal(sl_usage_add(u, "ip:10.0.0.9", SL_USAGE_REQUESTS, 1, at(3)), -1);
    sl_usage_stats(u, &st);
    assert_int_equal(st.waiting, 3);
    /* back: everything goes, the table has room */
    struct seen r = { .ok = 1, .u = u };
    assert_int_equal(sl_usage_take(u, deliver, &r), 3);
    int z = find(&r, "ip:10.0.0.0", at(0) / S);
    assert_true(z >= 0);
    assert_int_equal(r.out[z][SL_USAGE_REQUESTS], 2);
    assert_int_equal(sl_usage_add(u, "ip:10.0.0.9", SL_USAGE_REQUESTS, 1, at(3)), 0);
    sl_usage_stats(u, &st);
    assert_int_equal(st.dropped[SL_USAGE_REQUESTS], 7);
    assert_int_equal(st.waiting, 0);
    sl_usage_free(u);
}

/* Connection time is split at window starts, to the microsecond. */
static void test_span_split(void **state)
{
    (void)state;
    struct sl_usage *u = sl_usage_new(60, 100);
    /* 0:50.25 .. 3:10.5: 9.75 s, 60 s, 60 s, 10.5 s */
    assert_int_equal(sl_usage_add_span(u, "user:carol", at(50) + 250000, at(190) + 500000), 0);
    sl_usage_add_span(u, "user:carol", at(200), at(200)); /* nothing */
    struct seen s = { .ok = 1, .u = u };
    assert_int_equal(sl_usage_take(u, deliver, &s), 4);
    uint64_t want[4] = { 9750000, 60 * S, 60 * S, 10500000 };
    for (int i = 0; i < 4; i++) {
        int k = find(&s, "user:carol", at(60 * (uint64_t)i) / S);
        assert_true(k >= 0);
        assert_int_equal(s.out[k][SL_USAGE_CONN_US], want[i]);
    }
    sl_usage_free(u);
}

/* Windows longer than a minute align on the epoch; the window of a time
 * is what new counts get. */
static void test_windows(void **state)
{
    (void)state;
    struct sl_usage *u = sl_usage_new(3600, 10);
    uint64_t h = at(0) / S;
    h -= h % 3600;
    assert_int_equal(sl_usage_window_of(u, (h + 3599) * S), h);
    assert_int_equal(sl_usage_window_of(u, (h + 3600) * S), h + 3600);
    sl_usage_set(u, 60, 10);
    assert_int_equal(sl_usage_window_of(u, (h + 61) * S), h + 60);
    sl_usage_free(u);
}

/* Many identities: the hash grows and every count lands once. */
static void test_many(void **state)
{
    (void)state;
    struct sl_usage *u = sl_usage_new(60, 100000);
    char id[32];
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 5000; i++) {
            snprintf(id, sizeof(id), "user:u%d", i);
            assert_int_equal(sl_usage_add(u, id, SL_USAGE_REQUESTS, (uint64_t)i + 1, at(1)), 0);
        }
    struct sl_usage_stats st;
    sl_usage_stats(u, &st);
    assert_int_equal(st.entries, 5000);
    sl_usage_free(u);
}

/* The entry found last is compared first: once it is delivered and
 * freed, the same identity gets a new entry (never the freed one). */
static void test_last_entry_freed(void **state)
{
    (void)state;
    struct sl_usage *u = sl_usage_new(60, 100);
    sl_usage_add(u, "user:a", SL_USAGE_REQUESTS, 1, at(1));
    sl_usage_add(u, "user:a", SL_USAGE_REQUESTS, 1, at(2));
    struct seen s = { .ok = 1, .u = u };
    assert_int_equal(sl_usage_take(u, deliver, &s), 1);
    sl_usage_add(u, "user:a", SL_USAGE_REQUESTS, 5, at(3));
    sl_usage_add(u, "user:b", SL_USAGE_REQUESTS, 1, at(3));
    sl_usage_add(u, "user:a", SL_USAGE_REQUESTS, 1, at(4));
    struct seen t = { .ok = 1, .u = u };
    assert_int_equal(sl_usage_take(u, deliver, &t), 2);
    int a = find(&t, "user:a", at(0) / S);
    assert_true(a >= 0);
    assert_int_equal(t.out[a][SL_USAGE_REQUESTS], 6);
    uint64_t lost[SL_USAGE_FIELDS];
    sl_usage_add(u, "user:c", SL_USAGE_BYTES_IN, 9, at(5));
    sl_usage_drain(u, lost);
    assert_int_equal(lost[SL_USAGE_BYTES_IN], 9);
    sl_usage_add(u, "user:c", SL_USAGE_BYTES_IN, 1, at(5)); /* after a drain: a new entry */
    struct sl_usage_stats st;
    sl_usage_stats(u, &st);
    assert_int_equal(st.entries, 1);
    sl_usage_free(u);
}

/* A round a part at a time: each call hands about <max>, the round ends
 * with every entry handed once; entries done at once are freed safely. */
static int handed_n;
static void count_done(void *data, struct sl_usage_entry *e)
{
    handed_n++;
    sl_usage_done(data, e, 1);
}

static void test_take_some(void **state)
{
    (void)state;
    struct sl_usage *u = sl_usage_new(60, 100000);
    char id[32];
    for (int i = 0; i < 3000; i++) {
        snprintf(id, sizeof(id), "ip:10.0.%d.%d", i / 256, i % 256);
        sl_usage_add(u, id, SL_USAGE_REQUESTS, 1, at(1));
    }
    int more = 1, calls = 0;
    handed_n = 0;
    while (more) {
        int before = handed_n;
        sl_usage_take_some(u, count_done, u, 100, &more);
        assert_true(handed_n - before <= 100 + 8); /* whole chains: a few more */
        calls++;
        /* counts arriving mid-round, behind or ahead of the walk */
        if (calls == 5)
            sl_usage_add(u, "ip:10.0.0.0", SL_USAGE_REQUESTS, 1, at(2));
    }
    assert_true(calls >= 30);
    assert_true(handed_n == 3000 || handed_n == 3001);
    struct sl_usage_stats st;
    sl_usage_stats(u, &st);
    assert_int_equal(st.entries, (uint64_t)(3001 - handed_n));
    sl_usage_free(u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge),
        cmocka_unit_test(test_retry_same_id),
        cmocka_unit_test(test_busy),
        cmocka_unit_test(test_bound_and_drops),
        cmocka_unit_test(test_span_split),
        cmocka_unit_test(test_windows),
        cmocka_unit_test(test_many),
        cmocka_unit_test(test_last_entry_freed),
        cmocka_unit_test(test_take_some),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

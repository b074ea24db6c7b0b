/* The limiter with url = local: which limits a request meets and what they
 * say, with an injected clock (now_us is an argument). Requests come from
 * the real framer, identities from the real identity module. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "identity/identity.h"
#include "limit/limiter.h"
#include "proto/resp.h"

static const char *const base_conf =
    "[store]\nurl = local\n"
    "[listener r]\nlisten = 127.0.0.1:7001\nupstream = 127.0.0.1:7002\n"
    "identity = resp_user client_ip\n";

struct fix {
    struct sl_conf    *conf;
    struct sl_limiter *lim;
    struct sl_ident_state id;
    struct sl_resp     fr;
};

static struct fix *setup_with(const char *limits)
{
    static char text[4096];
    snprintf(text, sizeof(text), "%s%s", base_conf, limits);
    struct fix *f = calloc(1, sizeof(*f));
    f->conf = sl_conf_load_string(text, "test.ini", stderr);
    assert_non_null(f->conf);
    f->lim = sl_limiter_new(f->conf, NULL);
    assert_non_null(f->lim);
    sl_identity_init(&f->id, NULL);
    assert_int_equal(sl_resp_init(&f->fr, 1 << 20), 0);
    return f;
}

static void teardown_fix(struct fix *f)
{
    sl_limiter_release(f->lim);
    sl_conf_free(f->conf);
    sl_resp_free(&f->fr);
    free(f);
}

/* Frames the inline command <line> and returns the request (borrowed). */
static struct sl_resp_req *req(struct fix *f, const char *line)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s\r\n", line);
    assert_int_equal(sl_resp_feed(&f->fr, buf, strlen(buf)), 0);
    struct sl_resp_req *r;
    assert_int_equal(sl_resp_next(&f->fr, &r), 1);
    sl_identity_observe(&f->id, r);
    return r;
}

/* Decides <line> from connection <conn> at <ms>; returns 1 if allowed. */
static int allow(struct fix *f, uint64_t conn, uint64_t ms, const char *line, struct sl_verdict *out)
{
    struct sl_verdict v;
    struct sl_limiter_req *h = NULL;
    struct sl_resp_req *r = req(f, line);
    int rc = sl_limiter_check(f->lim, f->conf->listeners, &f->id, conn, r, ms * 1000, &v, NULL,
                              NULL, &h);
    assert_int_equal(rc, 0); /* local: always decided at once */
    if (out)
        *out = v;
    return v.kind == SL_VERDICT_ALLOW;
}

static void test_identity_limit_and_message(void **state)
{
    (void)state;
    struct fix *f = setup_with("[limit writes]\nlistener = r\nrate = 5/s\nburst = 5\ncommands = SET DEL\n");
    req(f, "AUTH bob secret");
    for (int i = 0; i < 5; i++)
        assert_true(allow(f, 1, 0, "SET k v", NULL));
    struct sl_verdict v;
    assert_false(allow(f, 1, 0, "SET k v", &v));
    assert_string_equal(v.limit, "writes");
    assert_string_equal(v.identity, "user:bob");
    assert_int_equal(v.retry_after_us, 200000);
    char line[256];
    sl_verdict_resp(&v, line, sizeof(line));
    assert_string_equal(line, "-THROTTLED limit 'writes' exceeded for 'user:bob', retry in 200 ms\r\n");
    /* commands outside the filter are never limited */
    assert_true(allow(f, 1, 0, "GET k", NULL));
    /* one token back after 200 ms */
    assert_true(allow(f, 1, 200, "SET k v", NULL));
    assert_false(allow(f, 1, 200, "SET k v", NULL));
    /* another user has a bucket of its own */
    req(f, "AUTH carol secret");
    assert_true(allow(f, 1, 200, "SET k v", NULL));
    teardown_fix(f);
}

static void test_cost_per_command(void **state)
{
    (void)state;
    struct fix *f = setup_with("[limit w]\nlistener = r\nrate = 1/d\nburst = 5\ncost = DEL=2 *=1\n");
    assert_true(allow(f, 1, 0, "DEL a", NULL));  /* 3 left */
    assert_true(allow(f, 1, 0, "DEL a", NULL));  /* 1 left */
    assert_false(allow(f, 1, 0, "DEL a", NULL)); /* 2 > 1 */
    assert_true(allow(f, 1, 0, "SET a b", NULL));/* 1 fits */
    assert_false(allow(f, 1, 0, "SET a b", NULL));
    teardown_fix(f);
}

static void test_tier_replaces(void **state)
{
    (void)state;
    struct fix *f = setup_with(
        "[limit writes]\nlistener = r\nrate = 1/d\nburst = 2\ncommands = SET\n"
        "[limit vip]\nlistener = r\nrate = 1/d\nburst = 50\ncommands = SET\n"
        "match_identity = alice\nreplaces = writes\n");
    req(f, "AUTH alice pw");
    for (int i = 0; i < 50; i++)
        assert_true(allow(f, 1, 0, "SET k v", NULL));
    struct sl_verdict v;
    assert_false(allow(f, 1, 0, "SET k v", &v));
    assert_string_equal(v.limit, "vip");
    req(f, "AUTH bob pw");
    assert_true(allow(f, 1, 0, "SET k v", NULL));
    assert_true(allow(f, 1, 0, "SET k v", NULL));
    assert_false(allow(f, 1, 0, "SET k v", &v));
    assert_string_equal(v.limit, "writes");
    teardown_fix(f);
}

/* A tier names its identities with their source: an IP tier is not
 * reached by a user of that name, nor a user tier by an address. */
static void test_tier_by_source(void **state)
{
    (void)state;
    struct fix *f = setup_with(
        "[limit writes]\nlistener = r\nrate = 1/d\nburst = 2\ncommands = SET\n"
        "[limit vip]\nlistener = r\nrate = 1/d\nburst = 50\ncommands = SET\n"
        "match_identity = ip:unknown\nreplaces = writes\n");
    struct sl_verdict v;
    for (int i = 0; i < 10; i++) /* the client at "unknown": the tier */
        assert_true(allow(f, 1, 0, "SET k v", NULL));
    req(f, "AUTH unknown pw"); /* user "unknown" is not that address */
    assert_true(allow(f, 1, 0, "SET k v", NULL));
    assert_true(allow(f, 1, 0, "SET k v", NULL));
    assert_false(allow(f, 1, 0, "SET k v", &v));
    assert_string_equal(v.limit, "writes");
    assert_string_equal(v.identity, "user:unknown");
    teardown_fix(f);
}

static void test_connection_scope(void **state)
{
    (void)state;
    struct fix *f = setup_with("[limit per-conn]\nlistener = r\nrate = 1/d\nburst = 3\nscope = connection\n");
    for (int i = 0; i < 3; i++)
        assert_true(allow(f, 7, 0, "GET k", NULL));
    assert_false(allow(f, 7, 0, "GET k", NULL));
    for (int i = 0; i < 3; i++)
        assert_true(allow(f, 8, 0, "GET k", NULL));
    assert_false(allow(f, 8, 0, "GET k", NULL));
    teardown_fix(f);
}

static void test_global_scope(void **state)
{
    (void)state;
    struct fix *f = setup_with("[limit all]\nlistener = *\nrate = 1/d\nburst = 2\nscope = global\n");
    req(f, "AUTH a pw");
    assert_true(allow(f, 1, 0, "GET k", NULL));
    req(f, "AUTH b pw");
    assert_true(allow(f, 2, 0, "GET k", NULL));
    struct sl_verdict v;
    assert_false(allow(f, 3, 0, "GET k", &v));
    assert_string_equal(v.identity, "*");
    teardown_fix(f);
}

/* A request one limit rejects takes nothing from the others. */
static void test_rejected_consumes_nothing(void **state)
{
    (void)state;
    struct fix *f = setup_with(
        "[limit slow]\nlistener = r\nrate = 1/d\nburst = 10\n"
        "[limit tight]\nlistener = r\nrate = 2/s\nburst = 2\n");
    int allowed = 0;
    uint64_t t = 0;
    struct sl_verdict v;
    for (int round = 0; round < 8; round++, t += 10000) {
        for (int i = 0; i < 6; i++)
            allowed += allow(f, 1, t, "GET k", &v);
    }
    /* tight allows 2 a round; slow has 10 in all: 5 rounds' worth, and
     * then only slow says no. Had tight's rejections cost slow anything,
     * fewer than 10 would have passed. */
    assert_int_equal(allowed, 10);
    assert_string_equal(v.limit, "slow");
    teardown_fix(f);
}

static void test_shadow_changes_nothing(void **state)
{
    (void)state;
    struct fix *f = setup_with("[limit sh]\nlistener = r\nrate = 1/d\nburst = 1\naction = shadow\n");
    for (int i = 0; i < 20; i++)
        assert_true(allow(f, 1, 0, "GET k", NULL));
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    sl_limiter_stats_json(f->lim, m);
    fclose(m);
    assert_non_null(strstr(text, "\"shadow_rejected\":19"));
    assert_non_null(strstr(text, "\"rejected\":0"));
    free(text);
    teardown_fix(f);
}

static void test_exempt_and_other_listener(void **state)
{
    (void)state;
    struct fix *f = setup_with("[limit none]\nlistener = r\nrate = 1/d\nburst = 1\n");
    assert_true(allow(f, 1, 0, "PING", NULL));
    assert_false(allow(f, 1, 0, "PING", NULL));
    /* transaction and handshake commands are never refused */
    assert_true(allow(f, 1, 0, "MULTI", NULL));
    assert_true(allow(f, 1, 0, "EXEC", NULL));
    /* nor CLIENT REPLY, which has no answer to refuse with; other CLIENT
     * subcommands are limited */
    assert_true(allow(f, 1, 0, "CLIENT REPLY OFF", NULL));
    assert_true(allow(f, 1, 0, "client reply on", NULL));
    assert_false(allow(f, 1, 0, "CLIENT GETNAME", NULL));
    /* nor leaving pub/sub: one refusal cannot stand for the confirmations
     * the client waits for; subscribing is limited */
    assert_true(allow(f, 1, 0, "UNSUBSCRIBE", NULL));
    assert_true(allow(f, 1, 0, "punsubscribe p*", NULL));
    assert_true(allow(f, 1, 0, "SUNSUBSCRIBE s1 s2", NULL));
    assert_false(allow(f, 1, 0, "SUBSCRIBE c1", NULL));
    assert_false(allow(f, 1, 0, "UNSUBSCRIBEX", NULL));
    assert_true(allow(f, 1, 0, "AUTH u p", NULL));
    assert_true(sl_limiter_active(f->lim, "r"));
    assert_false(sl_limiter_active(f->lim, "other"));
    teardown_fix(f);
}

static void test_cost_over_burst_never(void **state)
{
    (void)state;
    struct fix *f = setup_with("[limit w]\nlistener = r\nrate = 10/s\nburst = 3\ncost = KEYS=100\n");
    struct sl_verdict v;
    assert_false(allow(f, 1, 0, "KEYS *", &v));
    assert_true(v.never);
    char line[256];
    sl_verdict_resp(&v, line, sizeof(line));
    assert_non_null(strstr(line, "costs more than the limit's burst"));
    /* and nothing was taken */
    for (int i = 0; i < 3; i++)
        assert_true(allow(f, 1, 0, "GET k", NULL));
    teardown_fix(f);
}


/* action = delay: each request reserves its place; the verdict allows
 * after the wait; past max_delay it rejects, reserving nothing. A reject
 * limit that denies beats a delay, and a delay limit reserves nothing then. */
static void test_delay_reserves_in_order(void **state)
{
    (void)state;
    struct fix *f = setup_with("[limit d]\nlistener = r\nrate = 10/s\nburst = 1\naction = delay\n"
                               "max_delay = 300ms\n");
    struct sl_verdict v;
    uint64_t want[4] = { 0, 100000, 200000, 300000 };
    for (int i = 0; i < 4; i++) {
        assert_true(allow(f, 1, 1000, "GET k", &v));
        assert_int_equal(v.delay_us, want[i]);
    }
    assert_false(allow(f, 1, 1000, "GET k", &v)); /* 400 ms > 300 ms */
    assert_int_equal(v.retry_after_us, 100000);  /* 100 ms sooner would do */
    /* nothing was reserved by the rejection: 100 ms later the wait is 300 ms */
    assert_true(allow(f, 1, 1100, "GET k", &v));
    assert_int_equal(v.delay_us, 300000);
    teardown_fix(f);

    f = setup_with("[limit d]\nlistener = r\nrate = 10/s\nburst = 1\naction = delay\nmax_delay = 1s\n"
                   "[limit hard]\nlistener = r\nrate = 2/s\nburst = 2\ncommands = SET\n");
    assert_true(allow(f, 1, 0, "SET k v", &v));
    assert_int_equal(v.delay_us, 0);
    assert_true(allow(f, 1, 0, "SET k v", &v));
    assert_int_equal(v.delay_us, 100000);
    assert_false(allow(f, 1, 0, "SET k v", &v)); /* hard rejects: d must not reserve */
    assert_string_equal(v.limit, "hard");
    assert_true(allow(f, 1, 0, "GET k", &v));
    assert_int_equal(v.delay_us, 200000);      /* not 300000 */
    teardown_fix(f);
}

/* Byte meters' plan: chunk = 10 ms of the rate, at least 16 KiB, at most
 * the burst, for delay at most max_delay of the rate. */
static void test_meter_plan(void **state)
{
    (void)state;
    struct fix *f = setup_with("[limit o]\nlistener = r\nmetric = bytes_out\nrate = 100MiB/s\n"
                               "action = delay\n"
                               "[limit i]\nlistener = r\nmetric = bytes_in\nrate = 1MiB/s\nburst = 8192\n");
    struct sl_meter_plan p;
    assert_int_equal(sl_limiter_plan(f->lim, f->conf->listeners, SL_METRIC_BYTES_OUT, &p), 1);
    assert_int_equal(p.chunk, 104857600ULL / 100);
    assert_true(p.delay && p.enforce && !p.reject);
    assert_int_equal(sl_limiter_plan(f->lim, f->conf->listeners, SL_METRIC_BYTES_IN, &p), 1);
    assert_int_equal(p.chunk, 8192); /* the burst caps it */
    assert_true(p.reject && !p.delay);
    assert_int_equal(sl_limiter_plan(f->lim, f->conf->listeners, SL_METRIC_CONNECTIONS, &p), 0);
    teardown_fix(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identity_limit_and_message),
        cmocka_unit_test(test_cost_per_command),
        cmocka_unit_test(test_tier_replaces),
        cmocka_unit_test(test_tier_by_source),
        cmocka_unit_test(test_connection_scope),
        cmocka_unit_test(test_global_scope),
        cmocka_unit_test(test_rejected_consumes_nothing),
        cmocka_unit_test(test_shadow_changes_nothing),
        cmocka_unit_test(test_exempt_and_other_listener),
        cmocka_unit_test(test_cost_over_burst_never),
        cmocka_unit_test(test_delay_reserves_in_order),
        cmocka_unit_test(test_meter_plan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

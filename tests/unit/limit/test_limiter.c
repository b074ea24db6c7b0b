/* The limiter with url = local: which limits a request meets and what they
 * say, on a clock the tests move by hand (every time the limiter reads is
 * fake_clock's: no call takes or reads another). Requests come from
 * the real framer, identities from the real identity module. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admin/admin.h"
#include "core/log.h"
#include "conf/conf.h"
#include "identity/identity.h"
#include "core/clock.h"
#include "limit/limiter.h"
#include "limit/places.h"
#include "proto/resp.h"

static const char *const base_conf =
    "[store]\nurl = local\n"
    "[listener r]\nlisten = 127.0.0.1:7001\nupstream = 127.0.0.1:7002\n"
    "identity = resp_user client_ip\n";

/* The whole file <path>, NUL-terminated (malloc'd). */
static char *slurp(const char *path)
{
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    char *buf = calloc(1, 1 << 16);
    assert_non_null(buf);
    size_t n = fread(buf, 1, (1 << 16) - 1, fp);
    buf[n] = '\0';
    fclose(fp);
    return buf;
}

/* How many times <needle> occurs in <hay>. */
static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* The one clock of every limiter here: moved by hand. */
static uint64_t fake_us;

static uint64_t fake_now(const struct sl_clock *c)
{
    (void)c;
    return fake_us;
}

static const struct sl_clock fake_clock = { fake_now };
static const struct sl_limiter_env local_env = { NULL, &fake_clock, NULL };

struct fix {
    struct sl_conf    *conf;
    struct sl_limiter *lim;
    struct sl_ident_state id;
    struct sl_resp     fr;
};

static struct fix *setup_text(const char *text)
{
    struct fix *f = calloc(1, sizeof(*f));
    f->conf = sl_conf_load_string(text, "test.ini", stderr);
    assert_non_null(f->conf);
    f->lim = sl_limiter_new(f->conf, &local_env);
    assert_non_null(f->lim);
    sl_identity_init(&f->id, NULL);
    assert_int_equal(sl_resp_init(&f->fr, 1 << 20), 0);
    return f;
}

static struct fix *setup_with(const char *limits)
{
    static char text[16384];
    snprintf(text, sizeof(text), "%s%s", base_conf, limits);
    return setup_text(text);
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
    fake_us = ms * 1000;
    int rc = sl_limiter_check(f->lim, f->conf->listeners, &f->id, conn, r, &v, NULL,
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

/* The log's clock for the rate of its lines: moved by hand. */
static uint64_t log_us;

static uint64_t log_now(void)
{
    return log_us;
}

/* A shadow limit changes nothing, counts both outcomes (allowed and
 * shadow_rejected, as sluice_limit_decisions_total) and logs its
 * would-be rejections at most once a second per limit: then the ones
 * left out are counted on the next line (repeated=N), or on a line of
 * their own at the sweep once the storm is over. */
static void test_shadow_changes_nothing(void **state)
{
    (void)state;
    char path[] = "/tmp/sluice-shadow-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(sl_log_open(path, SL_LOG_LOGFMT), 0);
    uint64_t (*saved_clock)(void) = sl_log_clock;
    sl_log_clock = log_now;
    log_us = 5000000;
    struct fix *f = setup_with("[limit sh]\nlistener = r\nrate = 1/d\nburst = 1\naction = shadow\n"
                               "[limit sh2]\nlistener = r\nrate = 1/d\nburst = 2\naction = shadow\n"
                               "scope = global\n");
    for (int i = 0; i < 20; i++)
        assert_true(allow(f, 1, 0, "GET k", NULL));
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    sl_limiter_stats_json(f->lim, m);
    fclose(m);
    assert_non_null(strstr(text, "\"name\":\"sh\",\"algorithm\":\"token_bucket\",\"allowed\":1,"
                                 "\"rejected\":0,\"shadow_rejected\":19,"));
    assert_non_null(strstr(text, "\"name\":\"sh2\",\"algorithm\":\"token_bucket\",\"allowed\":2,"
                                 "\"rejected\":0,\"shadow_rejected\":18,"));
    free(text);
    char *metrics = NULL;
    m = open_memstream(&metrics, &len);
    struct sl_metrics *w = sl_metrics_open(m);
    sl_limiter_metrics(f->lim, w);
    sl_metrics_close(w);
    fclose(m);
    assert_non_null(strstr(metrics, "sluice_limit_decisions_total{limit=\"sh\",outcome=\"allowed\"} 1\n"));
    assert_non_null(strstr(metrics,
                           "sluice_limit_decisions_total{limit=\"sh\",outcome=\"shadow_rejected\"} 19\n"));
    free(metrics);
    /* one line per limit in that second, naming the identity */
    char *log = slurp(path);
    assert_int_equal(count_of(log, "a shadow limit would have rejected"), 2);
    assert_int_equal(count_of(log, "limit=sh identity=\"ip:unknown\" retry_ms=86400000"), 1);
    assert_int_equal(count_of(log, "limit=sh2 identity=\"*\" retry_ms="), 1);
    free(log);
    /* a second later: the next one logs, with the 18 (17) left out */
    log_us += 1000000;
    assert_true(allow(f, 1, 0, "GET k", NULL));
    log = slurp(path);
    assert_int_equal(count_of(log, "a shadow limit would have rejected"), 4);
    assert_int_equal(count_of(log, "limit=sh identity=\"ip:unknown\" retry_ms=86400000 "
                                   "kind=shadow_reject repeated=18"), 1);
    assert_int_equal(count_of(log, "kind=shadow_reject repeated=17"), 1);
    free(log);
    /* the storm goes on within the second, then stops: the sweep writes
     * its count once two seconds have passed without a line */
    for (int i = 0; i < 5; i++)
        assert_true(allow(f, 1, 0, "GET k", NULL));
    log_us += 1000000;
    sl_limiter_sweep(f->lim);
    log = slurp(path);
    assert_int_equal(count_of(log, "a shadow limit would have rejected"), 4);
    free(log);
    log_us += 1000000;
    sl_limiter_sweep(f->lim);
    log = slurp(path);
    assert_int_equal(count_of(log, "a shadow limit would have rejected"), 6);
    assert_int_equal(count_of(log, "limit=sh kind=shadow_reject repeated=5"), 1);
    assert_int_equal(count_of(log, "limit=sh2 kind=shadow_reject repeated=5"), 1);
    free(log);
    teardown_fix(f);
    sl_log_clock = saved_clock;
    assert_int_equal(sl_log_open(NULL, SL_LOG_LOGFMT), 0);
    unlink(path);
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

/* A cost above the burst is a configuration error, but a request can still
 * cost more than a bucket holds at run time (on_failure = local divides the
 * burst by the live instances): it is told it can never pass. The limiter
 * is built here from a configuration changed after it was checked. */
static void test_cost_over_burst_never(void **state)
{
    (void)state;
    static char text[4096];
    snprintf(text, sizeof(text), "%s[limit w]\nlistener = r\nrate = 10/s\nburst = 3\n"
             "cost = KEYS=3\n", base_conf);
    struct fix *f = calloc(1, sizeof(*f));
    f->conf = sl_conf_load_string(text, "test.ini", stderr);
    assert_non_null(f->conf);
    f->conf->limits->costs[0].cost = 100;
    f->lim = sl_limiter_new(f->conf, &local_env);
    assert_non_null(f->lim);
    sl_identity_init(&f->id, NULL);
    assert_int_equal(sl_resp_init(&f->fr, 1 << 20), 0);
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


/* A verdict names the limit that decided, for HTTP's RateLimit fields: the
 * rejecting one, or for an allowed request the non-shadow limit with the
 * least remaining; q and w are its policy, r what is left after the
 * request, t the seconds until it is whole again (docs/http.md). */
static void test_verdict_policy_fields(void **state)
{
    (void)state;
    struct fix *f = setup_with("[limit a]\nlistener = r\nrate = 10/s\nburst = 20\n"
                               "[limit b]\nlistener = r\nrate = 5/m\nalgorithm = fixed_window\n"
                               "commands = DEL\n"
                               "[limit s]\nlistener = r\nrate = 1/d\nburst = 1\naction = shadow\n");
    struct sl_verdict v;
    assert_true(allow(f, 1, 0, "SET k v", &v));
    assert_string_equal(v.policy, "a"); /* s has none left, but it is shadow */
    assert_int_equal(v.quota, 20);
    assert_int_equal(v.window_s, 2);    /* 20 tokens at 10/s */
    assert_int_equal(v.remaining, 19);
    assert_int_equal(v.reset_s, 1);     /* 100 ms to be whole: 1 s */
    assert_int_equal(v.approx, 0);
    assert_string_equal(v.limit, "");   /* nothing rejected */
    /* DEL meets b too, which has less left */
    assert_true(allow(f, 1, 0, "DEL k", &v));
    assert_string_equal(v.policy, "b");
    assert_int_equal(v.quota, 5);
    assert_int_equal(v.window_s, 60);
    assert_int_equal(v.remaining, 4);
    assert_int_equal(v.reset_s, 60);    /* the window ends at 60 s */
    for (int i = 0; i < 18; i++)
        assert_true(allow(f, 1, 0, "SET k v", NULL));
    assert_false(allow(f, 1, 0, "DEL k", &v));
    assert_string_equal(v.limit, "a");  /* a is empty; b still has 4 */
    assert_string_equal(v.policy, "a");
    assert_int_equal(v.remaining, 0);
    assert_int_equal(v.reset_s, 2);
    assert_int_equal(v.retry_after_us, 100000);
    /* 1.55 s later a holds 15 tokens; b's window ends in 58.45 s */
    assert_true(allow(f, 1, 1550, "SET k v", &v));
    assert_string_equal(v.policy, "a");
    assert_int_equal(v.remaining, 14);
    assert_int_equal(v.reset_s, 1);     /* 600 ms */
    assert_true(allow(f, 1, 1550, "DEL k", &v));
    assert_string_equal(v.policy, "b");
    assert_int_equal(v.remaining, 3);
    assert_int_equal(v.reset_s, 59);    /* 58.45 s rounds up */
    teardown_fix(f);
}

/* Retry-After is honest for every algorithm: the same request, retried
 * after the wait rounded up to whole seconds, is allowed. */
static void test_retry_after_whole_seconds_honest(void **state)
{
    (void)state;
    const char *algos[] = { "token_bucket", "gcra", "fixed_window", "sliding_window",
                            "sliding_log" };
    const char *rates[] = { "3/s", "7/m", "2/h" };
    for (size_t a = 0; a < sizeof(algos) / sizeof(algos[0]); a++) {
        for (size_t k = 0; k < sizeof(rates) / sizeof(rates[0]); k++) {
            char text[256];
            snprintf(text, sizeof(text), "[limit x]\nlistener = r\nrate = %s\nalgorithm = %s\n",
                     rates[k], algos[a]);
            struct fix *f = setup_with(text);
            uint64_t ms = 1234567; /* not on a window's edge */
            struct sl_verdict v;
            int n = 0;
            while (allow(f, 1, ms, "SET k v", &v))
                ms += 37, n++;
            assert_true(n > 0);
            assert_string_equal(v.policy, "x");
            assert_int_equal(v.remaining, 0);
            assert_false(v.never);
            uint64_t s = (v.retry_after_us + 999999) / 1000000;
            assert_true(s >= 1);
            assert_true(v.reset_s >= s); /* t is never before the retry */
            assert_true(allow(f, 1, ms + s * 1000, "SET k v", NULL));
            teardown_fix(f);
        }
    }
}

/* Decides the raw RESP bytes <wire> (one request, <len> bytes). */
static int allow_raw(struct fix *f, uint64_t ms, const char *wire, size_t len, struct sl_verdict *out)
{
    struct sl_verdict v;
    struct sl_limiter_req *h = NULL;
    struct sl_resp_req *r;
    assert_int_equal(sl_resp_feed(&f->fr, wire, len), 0);
    assert_int_equal(sl_resp_next(&f->fr, &r), 1);
    fake_us = ms * 1000;
    assert_int_equal(sl_limiter_check(f->lim, f->conf->listeners, &f->id, 1, r, &v,
                                      NULL, NULL, &h), 0);
    if (out)
        *out = v;
    return v.kind == SL_VERDICT_ALLOW;
}

/* A command name is its arglen bytes, whatever they hold: "SET\0" is not
 * SET (Redis answers it "unknown command"), and comparing it must not read
 * past the configured name (ASan: heap-buffer-overflow in the old cmd_cmp,
 * which went on to read byte 4 of the 4-byte "SET"). Names and costs alike. */
static void test_command_name_with_nul(void **state)
{
    (void)state;
    static const char set_nul[] = "*1\r\n$4\r\nSET\0\r\n";
    static const char set_nul_k[] = "*2\r\n$4\r\nSET\0\r\n$1\r\nk\r\n";
    struct fix *f = setup_with("[limit w]\nlistener = r\nrate = 1/d\nburst = 1\ncommands = SET\n");
    assert_true(allow_raw(f, 0, set_nul, sizeof(set_nul) - 1, NULL));
    assert_true(allow_raw(f, 0, set_nul_k, sizeof(set_nul_k) - 1, NULL));
    assert_true(allow_raw(f, 0, set_nul, sizeof(set_nul) - 1, NULL));
    assert_true(allow(f, 1, 0, "SET k v", NULL));
    assert_false(allow(f, 1, 0, "set k v", NULL));
    teardown_fix(f);

    f = setup_with("[limit w]\nlistener = r\nrate = 1/d\nburst = 5\ncost = SET=5 *=1\n");
    assert_true(allow_raw(f, 0, set_nul, sizeof(set_nul) - 1, NULL)); /* costs 1: 4 left */
    assert_true(allow(f, 1, 0, "GET k", NULL));                        /* 3 left */
    assert_false(allow(f, 1, 0, "SET k v", NULL));                     /* 5 > 3 */
    teardown_fix(f);
}

/* Configured names are sorted by strcmp() (upper case: 'B' < '_'); the
 * lookup must compare in the same order, or it misses names with '_'. */
static void test_command_names_with_underscore(void **state)
{
    (void)state;
    struct fix *f = setup_with("[limit g]\nlistener = r\nrate = 1/d\nburst = 1\n"
                               "commands = GEORADIUSBYMEMBER GEORADIUS_RO\n");
    assert_true(allow(f, 1, 0, "georadius_ro k 0 0 1 km", NULL));
    assert_false(allow(f, 1, 0, "GEORADIUS_RO k 0 0 1 km", NULL));
    assert_false(allow(f, 1, 0, "GEORADIUSBYMEMBER k m 1 km", NULL));
    assert_true(allow(f, 1, 0, "GEORADIUS k 0 0 1 km", NULL));
    teardown_fix(f);

    f = setup_with("[limit g]\nlistener = r\nrate = 1/d\nburst = 9\n"
                   "cost = GEORADIUSBYMEMBER=2 GEORADIUS_RO=9 *=1\n");
    assert_true(allow(f, 1, 0, "GEORADIUS_RO k 0 0 1 km", NULL)); /* 9 of 9 */
    assert_false(allow(f, 1, 0, "GET k", NULL));
    teardown_fix(f);
}

/* exempt() looks at argument 1 only when the request has one: a request
 * record whose capture count runs ahead of its arguments (a head decided
 * before its arguments are read) must not be taken for CLIENT REPLY. */
static void test_exempt_checks_argc(void **state)
{
    (void)state;
    struct fix *f = setup_with("[limit none]\nlistener = r\nrate = 1/d\nburst = 1\n");
    struct sl_resp_req r;
    memset(&r, 0, sizeof(r));
    r.argc = 1;
    r.ncap = 2; /* argument 1 is left over from an earlier request */
    strcpy(r.argv[0], "CLIENT");
    r.arglen[0] = 6;
    strcpy(r.argv[1], "REPLY");
    r.arglen[1] = 5;
    struct sl_verdict v;
    struct sl_limiter_req *h = NULL;
    fake_us = 0;
    assert_int_equal(sl_limiter_check(f->lim, f->conf->listeners, &f->id, 1, &r, &v, NULL,
                                      NULL, &h), 0);
    assert_int_equal(v.kind, SL_VERDICT_ALLOW);
    assert_int_equal(sl_limiter_check(f->lim, f->conf->listeners, &f->id, 1, &r, &v, NULL,
                                      NULL, &h), 0);
    assert_int_equal(v.kind, SL_VERDICT_REJECT); /* counted: not exempt */
    /* an argument longer than the capture is not compared on its cut bytes */
    r.argc = 2;
    r.arglen[1] = 5 + SL_RESP_CAPTURE_LEN;
    assert_int_equal(sl_limiter_check(f->lim, f->conf->listeners, &f->id, 1, &r, &v, NULL,
                                      NULL, &h), 0);
    assert_int_equal(v.kind, SL_VERDICT_REJECT);
    teardown_fix(f);
}

/* commands = @category: Redis 7's categories, for a container those of its
 * subcommand; CONTAINER|SUB names one subcommand; plain names match the
 * name exactly (any case), every subcommand of a container included. */
static void test_command_categories(void **state)
{
    (void)state;
    struct fix *f = setup_with("[limit w]\nlistener = r\nrate = 1/d\nburst = 2\ncommands = @write\n");
    assert_true(allow(f, 1, 0, "INCRBY k 1", NULL));
    for (int i = 0; i < 5; i++)
        assert_true(allow(f, 1, 0, "GET k", NULL)); /* @read */
    assert_true(allow(f, 1, 0, "hset h f v", NULL));
    assert_false(allow(f, 1, 0, "INCR k", NULL));
    assert_true(allow(f, 1, 0, "PING", NULL));
    assert_true(allow(f, 1, 0, "MYMODULE.SET k v", NULL)); /* not Redis 7's: no category */
    assert_true(allow(f, 1, 0, "MULTI", NULL));            /* never limited */
    teardown_fix(f);

    f = setup_with("[limit a]\nlistener = r\nrate = 1/d\nburst = 1\ncommands = @admin GET\n"
                   "[limit s]\nlistener = r\nrate = 1/d\nburst = 1\ncommands = client|setname\n");
    assert_true(allow(f, 1, 0, "CONFIG HELP", NULL)); /* @slow only */
    assert_true(allow(f, 1, 0, "CONFIG SET maxmemory 0", NULL));
    assert_false(allow(f, 1, 0, "config get x", NULL));
    assert_true(allow(f, 1, 0, "CLIENT SETNAME x", NULL));
    assert_false(allow(f, 1, 0, "client setname y", NULL));
    assert_true(allow(f, 1, 0, "CLIENT GETNAME", NULL));
    assert_true(allow(f, 1, 0, "CLIENT", NULL));
    assert_false(allow(f, 1, 0, "GET k", NULL)); /* a's name, with its category */
    teardown_fix(f);

    f = setup_with("[limit c]\nlistener = r\nrate = 1/d\nburst = 1\ncommands = CONFIG\n");
    assert_true(allow(f, 1, 0, "CONFIG HELP", NULL));
    assert_false(allow(f, 1, 0, "CONFIG SET a b", NULL));
    assert_true(allow(f, 1, 0, "CONFIGX", NULL));
    teardown_fix(f);
}

/* ---- how many limits one decision meets ------------------------------------ */

static char *validate_text(const char *limits, int *bad)
{
    static char text[65536];
    snprintf(text, sizeof(text), "%s%s", base_conf, limits);
    struct sl_conf *c = sl_conf_load_string(text, "test.ini", stderr);
    assert_non_null(c);
    char *out = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&out, &len);
    *bad = sl_limiter_validate(c, m);
    fclose(m);
    sl_conf_free(c);
    return out;
}

/* <n> limits named l0.. on listener r, each with <extra> (after rate). */
static void limits_text(char *out, size_t cap, int n, const char *fmt)
{
    size_t o = 0;
    for (int i = 0; i < n && o < cap; i++) {
        o += (size_t)snprintf(out + o, cap - o, "[limit l%d]\nlistener = r\n", i);
        o += (size_t)snprintf(out + o, cap - o, fmt, i);
    }
}

/* A decision holds 16 limits, a connection 8: a file where one request or
 * connection could meet more is refused (before, the rest were skipped
 * without a word); match_identity limits count only for their identities. */
static void test_too_many_limits_refused(void **state)
{
    (void)state;
    char lims[32768];
    int bad;
    char *out;

    limits_text(lims, sizeof(lims), 16, "rate = 10/s\n");
    out = validate_text(lims, &bad);
    assert_int_equal(bad, 0);
    free(out);

    limits_text(lims, sizeof(lims), 17, "rate = 10/s\n");
    out = validate_text(lims, &bad);
    assert_int_equal(bad, 1);
    /* l16's section starts at line 7 + 16 * 3 */
    assert_string_equal(out, "test.ini:55: limit 'l16': a request 'ACL' on listener 'r' would meet "
                             "17 limits; one decision meets at most 16 (narrow their listener, "
                             "commands or match_identity)\n");
    free(out);

    /* 17 limits on distinct commands: one request meets one */
    limits_text(lims, sizeof(lims), 17, "rate = 10/s\ncommands = CMD%d\n");
    out = validate_text(lims, &bad);
    assert_int_equal(bad, 0);
    free(out);

    /* ... but 9 on @write and 8 naming SET: a SET meets 17 */
    size_t o = 0;
    for (int i = 0; i < 17; i++)
        o += (size_t)snprintf(lims + o, sizeof(lims) - o,
                              "[limit l%d]\nlistener = r\nrate = 10/s\ncommands = %s\n", i,
                              i < 9 ? "@write" : "set GET");
    out = validate_text(lims, &bad);
    assert_int_equal(bad, 1);
    assert_non_null(strstr(out, "limit 'l16': a request 'SET' on listener 'r' would meet 17"));
    free(out);

    /* Tiers: a base limit and 30 tiers of one customer each meet 2 */
    o = (size_t)snprintf(lims, sizeof(lims), "[limit base]\nlistener = r\nrate = 10/s\n");
    for (int i = 0; i < 30; i++)
        o += (size_t)snprintf(lims + o, sizeof(lims) - o,
                              "[limit t%d]\nlistener = r\nrate = 100/s\nmatch_identity = u%d\n"
                              "replaces = base\n", i, i);
    out = validate_text(lims, &bad);
    assert_int_equal(bad, 0);
    free(out);
    /* ... but 16 on everyone and one more for alice: alice meets 17 */
    limits_text(lims, sizeof(lims), 16, "rate = 10/s\n");
    strcat(lims, "[limit a1]\nlistener = *\nrate = 1/s\nmatch_identity = bob alice\n"
                 "[limit a2]\nlistener = r\nrate = 1/s\nmatch_identity = carol\n");
    out = validate_text(lims, &bad);
    assert_int_equal(bad, 1);
    assert_non_null(strstr(out, "limit 'a1': a request 'ACL' of identity 'user:alice' on listener 'r' "
                                "would meet 17 limits"));
    free(out);

    /* connections: 8 fit, 9 do not; bytes like requests */
    limits_text(lims, sizeof(lims), 8, "metric = connections\nmax = 5\n");
    out = validate_text(lims, &bad);
    assert_int_equal(bad, 0);
    free(out);
    limits_text(lims, sizeof(lims), 9, "metric = connections\nmax = 5\n");
    out = validate_text(lims, &bad);
    assert_int_equal(bad, 1);
    assert_non_null(strstr(out, "test.ini:39: limit 'l8': a connection on listener 'r' would meet 9 "
                                "limits; one connection meets at most 8"));
    free(out);
    limits_text(lims, sizeof(lims), 17, "metric = bytes_out\nrate = 1MiB/s\n");
    out = validate_text(lims, &bad);
    assert_int_equal(bad, 1);
    assert_non_null(strstr(out, "a bytes_out take on listener 'r' would meet 17"));
    free(out);
}

/* Every tier is found, however many limits there are: candidates are no
 * longer cut at 16 before match_identity thins them out (u20's tier was
 * never reached, and u20 was held to the base limit). */
static void test_many_tiers(void **state)
{
    (void)state;
    static char lims[32768];
    size_t o = (size_t)snprintf(lims, sizeof(lims),
                                "[limit base]\nlistener = r\nrate = 1/d\nburst = 1\n");
    for (int i = 0; i < 30; i++)
        o += (size_t)snprintf(lims + o, sizeof(lims) - o,
                              "[limit t%d]\nlistener = r\nrate = 1/d\nburst = 3\n"
                              "match_identity = u%d\nreplaces = base\n", i, i);
    static char text[65536];
    snprintf(text, sizeof(text), "%s%s", base_conf, lims);
    struct fix *f = calloc(1, sizeof(*f));
    f->conf = sl_conf_load_string(text, "test.ini", stderr);
    assert_non_null(f->conf);
    assert_int_equal(sl_limiter_validate(f->conf, stderr), 0);
    f->lim = sl_limiter_new(f->conf, &local_env);
    assert_non_null(f->lim);
    sl_identity_init(&f->id, NULL);
    assert_int_equal(sl_resp_init(&f->fr, 1 << 20), 0);
    req(f, "AUTH u20 pw");
    struct sl_verdict v;
    for (int i = 0; i < 3; i++)
        assert_true(allow(f, 1, 0, "GET k", NULL));
    assert_false(allow(f, 1, 0, "GET k", &v));
    assert_string_equal(v.limit, "t20");
    teardown_fix(f);
}

/* Built from a file that was not checked, a request meeting 17 limits is
 * decided on 16 and counted as such in sluice_limit_uncounted_total. */
static void test_too_many_counted(void **state)
{
    (void)state;
    char lims[8192];
    limits_text(lims, sizeof(lims), 17, "rate = 10/s\n");
    struct fix *f = setup_with(lims);
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    struct sl_metrics *w = sl_metrics_open(m);
    sl_limiter_metrics(f->lim, w);
    sl_metrics_close(w);
    fclose(m);
    const char *at = strstr(text, "sluice_limit_uncounted_total{reason=\"too_many_limits\"} ");
    assert_non_null(at);
    long before = atol(at + strlen("sluice_limit_uncounted_total{reason=\"too_many_limits\"} "));
    free(text);
    assert_true(allow(f, 1, 0, "GET k", NULL));
    text = NULL;
    m = open_memstream(&text, &len);
    w = sl_metrics_open(m);
    sl_limiter_metrics(f->lim, w);
    sl_metrics_close(w);
    fclose(m);
    at = strstr(text, "sluice_limit_uncounted_total{reason=\"too_many_limits\"} ");
    assert_non_null(at);
    assert_int_equal(atol(at + strlen("sluice_limit_uncounted_total{reason=\"too_many_limits\"} ")),
                     before + 1);
    assert_non_null(strstr(text, "sluice_limit_uncounted_total{reason=\"no_memory\"} "));
    free(text);
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

/* The /stats JSON of <f>'s limiter (a static buffer). */
static const char *stats(struct fix *f)
{
    static char buf[1 << 16];
    FILE *out = fmemopen(buf, sizeof(buf), "w");
    assert_non_null(out);
    sl_limiter_stats_json(f->lim, out);
    fclose(out);
    return buf;
}

static long json_num(const char *json, const char *after)
{
    const char *p = strstr(json, after);
    assert_non_null(p);
    return strtol(p + strlen(after), NULL, 10);
}

/* [store] max_identities = 4: N + k identities keep 4 buckets; a bucket
 * that is full again goes before an older one that is not; an evicted
 * bucket that was not full starts full (the documented bound). */
static void test_buckets_bounded_full_first(void **state)
{
    (void)state;
    struct fix *f = setup_text(
        "[store]\nurl = local\nmax_identities = 4\n"
        "[listener r]\nlisten = 127.0.0.1:7001\nupstream = 127.0.0.1:7002\n"
        "identity = resp_user client_ip\n"
        "[limit w]\nlistener = r\nrate = 1/s\nburst = 2\n");
    /* at 0 ms: u0 and u1 empty their buckets, u2 and u3 take one token */
    const char *users[] = { "u0", "u1", "u2", "u3" };
    for (int i = 0; i < 4; i++) {
        char auth[32];
        snprintf(auth, sizeof(auth), "AUTH %s pw", users[i]);
        req(f, auth);
        assert_true(allow(f, 1, 0, "GET k", NULL));
        if (i < 2)
            assert_true(allow(f, 1, 0, "GET k", NULL));
    }
    assert_int_equal(json_num(stats(f), "\"local_buckets\":"), 4);
    /* at 1500 ms: u2 and u3 are full again (2 tokens), u0 and u1 hold 1.5 */
    req(f, "AUTH u4 pw");
    assert_true(allow(f, 1, 1500, "GET k", NULL));
    req(f, "AUTH u5 pw");
    assert_true(allow(f, 1, 1500, "GET k", NULL));
    assert_int_equal(json_num(stats(f), "\"local_buckets\":"), 4);
    assert_int_equal(json_num(stats(f), "\"evictions\":"), 2);
    /* u2 and u3 went (a new bucket is full: nothing lost); u0 and u1 kept
     * their 1.5 tokens: one passes, not two */
    req(f, "AUTH u1 pw");
    assert_true(allow(f, 1, 1500, "GET k", NULL));
    assert_false(allow(f, 1, 1500, "GET k", NULL));
    req(f, "AUTH u0 pw");
    assert_true(allow(f, 1, 1500, "GET k", NULL));
    assert_false(allow(f, 1, 1500, "GET k", NULL));
    /* now nothing is full: a newcomer evicts the least recently used (u4) */
    req(f, "AUTH u6 pw");
    assert_true(allow(f, 1, 1500, "GET k", NULL));
    assert_int_equal(json_num(stats(f), "\"local_buckets\":"), 4);
    assert_int_equal(json_num(stats(f), "\"evictions\":"), 3);
    /* u4, evicted with one token taken, starts full: two pass */
    req(f, "AUTH u4 pw");
    assert_true(allow(f, 1, 1500, "GET k", NULL));
    assert_true(allow(f, 1, 1500, "GET k", NULL));
    assert_false(allow(f, 1, 1500, "GET k", NULL));
    /* a flood of newcomers keeps the count */
    for (int i = 0; i < 1000; i++) {
        char auth[32];
        snprintf(auth, sizeof(auth), "AUTH n%d pw", i);
        req(f, auth);
        allow(f, 1, 2000, "GET k", NULL);
    }
    assert_int_equal(json_num(stats(f), "\"local_buckets\":"), 4);
    teardown_fix(f);
}

/* /stats "busiest" cannot be forged by a spray of new identities: an
 * identity's "requests" never exceed what it made, and "error" says how
 * many more it may have made. */
static void test_busiest_not_forged(void **state)
{
    (void)state;
    struct fix *f = setup_with("[limit w]\nlistener = r\nrate = 1000000/s\n");
    req(f, "AUTH alice pw");
    for (int i = 0; i < 100; i++)
        assert_true(allow(f, 1, 0, "GET k", NULL));
    const char *j = stats(f);
    assert_int_equal(json_num(j, "alice\",\"requests\":"), 100);
    assert_int_equal(json_num(j, "alice\",\"requests\":100,\"error\":"), 0);
    for (int i = 0; i < 5000; i++) {
        char auth[32];
        snprintf(auth, sizeof(auth), "AUTH s%d pw", i);
        req(f, auth);
        assert_true(allow(f, 1, 0, "GET k", NULL));
    }
    req(f, "AUTH alice pw");
    for (int i = 0; i < 5; i++)
        assert_true(allow(f, 1, 0, "GET k", NULL));
    j = stats(f);
    /* alice was pushed out by the spray and came back: what is sure of her
     * is at most her 105 requests (5 since she came back), whatever count
     * her slot inherited; each sprayed identity made exactly one */
    const char *a = strstr(j, "alice\",\"requests\":");
    assert_non_null(a);
    long sure = strtol(a + strlen("alice\",\"requests\":"), NULL, 10);
    assert_true(sure >= 5 && sure <= 105);
    const char *e = strstr(a, "\"error\":");
    assert_non_null(e);
    assert_true(strtol(e + 8, NULL, 10) > 100); /* inherited: said, not hidden */
    for (const char *p = strstr(j, "\"identity\":\""); p != NULL; p = strstr(p + 1, "\"identity\":\"")) {
        const char *r = strstr(p, "\"requests\":");
        if (strncmp(r - 7, "alice\",", 7) == 0) /* alice, with or without a source prefix */
            continue;
        assert_true(strtol(r + 11, NULL, 10) <= 1);
    }
    teardown_fix(f);
}

/* ---- HTTP requests (sl_limiter_check_req) ---------------------------------- */

static const char *const http_listener =
    "[store]\nurl = local\n"
    "[listener w]\nlisten = 127.0.0.1:7003\nupstream = 127.0.0.1:7004\nprotocol = http\n"
    "identity = header:X-Api-Key client_ip\n";

/* A request head built by hand, as the framer gives it: <method> <path>,
 * with an X-Api-Key field when <key> is not NULL. */
static struct sl_http_head http_head(const char *method, const char *path, const char *key)
{
    static char buf[8192];
    static struct sl_http_field field;
    struct sl_http_head hd;
    memset(&hd, 0, sizeof(hd));
    hd.is_request = 1;
    hd.minor = 1;
    hd.method_len = (uint32_t)strlen(method);
    hd.path_off = hd.target_off = hd.method_len + 1;
    hd.path_len = hd.target_len = (uint32_t)strlen(path);
    int at = snprintf(buf, sizeof(buf), "%s %s HTTP/1.1\r\n", method, path);
    if (key != NULL) {
        field.name = (uint32_t)at;
        field.name_len = 9;
        field.value = (uint32_t)at + 11;
        field.value_len = (uint32_t)strlen(key);
        at += snprintf(buf + at, sizeof(buf) - (size_t)at, "X-Api-Key: %s\r\n", key);
        hd.fields = &field;
        hd.nfields = 1;
    }
    at += snprintf(buf + at, sizeof(buf) - (size_t)at, "\r\n");
    hd.buf = buf;
    hd.len = (uint32_t)at;
    return hd;
}

static struct fix *setup_http(const char *limits)
{
    static char text[4096];
    snprintf(text, sizeof(text), "%s%s", http_listener, limits);
    return setup_text(text);
}

/* Decides <method> <path> (API key <key>) at <ms>; returns 1 if allowed. */
static int allow_http(struct fix *f, uint64_t ms, const char *method, const char *path,
                      const char *key, struct sl_verdict *out)
{
    struct sl_verdict v;
    struct sl_limiter_req *h = NULL;
    struct sl_http_head hd = http_head(method, path, key);
    struct sl_req r = { .resp = NULL, .http = &hd };
    fake_us = ms * 1000;
    assert_int_equal(sl_limiter_check_req(f->lim, f->conf->listeners, &f->id, 1, &r, &v, NULL, NULL,
                                          &h), 0);
    if (out)
        *out = v;
    return v.kind == SL_VERDICT_ALLOW;
}

/* methods: exact, case-sensitive (RFC 9110 9.1); the identity is the
 * hashed API key, never the key itself. */
static void test_http_methods(void **state)
{
    (void)state;
    struct fix *f = setup_http("[limit posts]\nlistener = w\nrate = 1/h\nburst = 2\n"
                               "methods = POST PUT\n");
    assert_true(allow_http(f, 0, "POST", "/", "k1", NULL));
    assert_true(allow_http(f, 0, "PUT", "/x", "k1", NULL));
    struct sl_verdict v;
    assert_false(allow_http(f, 0, "POST", "/", "k1", &v));
    assert_string_equal(v.limit, "posts");
    char canon[SL_ID_MAX + 1];
    sl_identity_canon("header:x-api-key:k1", canon);
    assert_string_equal(v.identity, canon);
    assert_null(strstr(v.identity, "k1"));
    /* other methods, and "post", another method, are not counted */
    assert_true(allow_http(f, 0, "GET", "/", "k1", NULL));
    assert_true(allow_http(f, 0, "post", "/", "k1", NULL));
    assert_true(allow_http(f, 0, "POSTS", "/", "k1", NULL));
    assert_true(allow_http(f, 0, "POS", "/", "k1", NULL));
    /* another key has its own bucket; no key: the client ip */
    assert_true(allow_http(f, 0, "POST", "/", "k2", NULL));
    assert_true(allow_http(f, 0, "POST", "/", NULL, NULL));
    assert_true(allow_http(f, 0, "POST", "/", NULL, NULL));
    assert_false(allow_http(f, 0, "POST", "/", NULL, &v));
    assert_string_equal(v.identity, "ip:unknown");
    teardown_fix(f);
}

/* paths: exact, prefix ("/api/" + '*') and globs, on every reading of the
 * path (proto/http_path.h), so a spelling of the same path is counted as
 * that path. */
static void test_http_paths(void **state)
{
    (void)state;
    struct fix *f = setup_http("[limit api]\nlistener = w\nrate = 1/h\nburst = 4\npaths = /api/*\n"
                               "[limit login]\nlistener = w\nrate = 1/h\nburst = 1\n"
                               "paths = /login /v?/login\n"
                               "[limit png]\nlistener = w\nrate = 1/h\nburst = 1\n"
                               "paths = /img/*.png\n");
    assert_true(allow_http(f, 0, "GET", "/api/a", "k", NULL));
    assert_true(allow_http(f, 0, "GET", "/api/b/c", "k", NULL));
    assert_true(allow_http(f, 0, "GET", "/%61pi/q", "k", NULL));   /* /api/q */
    assert_true(allow_http(f, 0, "GET", "//api/./x/../y", "k", NULL)); /* /api/y */
    struct sl_verdict v;
    assert_false(allow_http(f, 0, "GET", "/api/", "k", &v));
    assert_string_equal(v.limit, "api");
    assert_true(allow_http(f, 0, "GET", "/api", "k", NULL));     /* not under /api/ */
    assert_true(allow_http(f, 0, "GET", "/apix/1", "k", NULL));
    assert_false(allow_http(f, 0, "GET", "/API/1", "k", NULL));  /* letters in either case */
    assert_false(allow_http(f, 0, "GET", "/api%2f1", "k", NULL)); /* /api/1 once decoded */
    assert_false(allow_http(f, 0, "GET", "/public/..%2fapi/1", "k", NULL));
    assert_false(allow_http(f, 0, "GET", "/api/../public", "k", NULL)); /* as sent */
    assert_true(allow_http(f, 0, "GET", "/x/api/1", "k", NULL));

    assert_true(allow_http(f, 0, "POST", "/login", "k", NULL));
    assert_false(allow_http(f, 0, "POST", "/login", "k", &v));
    assert_string_equal(v.limit, "login");
    assert_false(allow_http(f, 0, "POST", "/v1/login", "k", NULL));
    assert_false(allow_http(f, 0, "POST", "/./x/../login", "k", NULL)); /* /login */
    assert_true(allow_http(f, 0, "POST", "/login/", "k", NULL)); /* another path */
    assert_true(allow_http(f, 0, "POST", "/login2", "k", NULL));
    assert_true(allow_http(f, 0, "POST", "/v10/login", "k", NULL));

    assert_true(allow_http(f, 0, "GET", "/img/a.png", "k", NULL));
    assert_false(allow_http(f, 0, "GET", "/img/b.png", "k", NULL));
    assert_true(allow_http(f, 0, "GET", "/img/a/b.png", "k", NULL)); /* '*' stays in a segment */
    assert_true(allow_http(f, 0, "GET", "/img/a.png.txt", "k", NULL));
    /* no path (authority-form, "*"): no pattern takes it */
    assert_true(allow_http(f, 0, "CONNECT", "", "k", NULL));
    /* a path longer than the matcher's stack buffer */
    char longp[4000] = "/img/";
    memset(longp + 5, 'a', sizeof(longp) - 10);
    strcpy(longp + sizeof(longp) - 5, ".png");
    assert_false(allow_http(f, 0, "GET", longp, "k", NULL));
    teardown_fix(f);
}

/* %00 and overlong UTF-8 are refused where a limit on the listener has
 * paths, and only there. */
static void test_http_path_refusal(void **state)
{
    (void)state;
    static const char *const bad[] = { "/api%00/x", "/%c0%afapi/x", "/x/%E0%80%AF" };
    struct fix *f = setup_http("[limit api]\nlistener = w\nrate = 1/h\nburst = 4\npaths = /api/*\n");
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct sl_http_head hd = http_head("GET", bad[i], "k");
        assert_non_null(sl_limiter_path_refusal(f->lim, f->conf->listeners, &hd));
    }
    struct sl_http_head ok = http_head("GET", "/api%2fx/%c3%a9", "k");
    assert_null(sl_limiter_path_refusal(f->lim, f->conf->listeners, &ok));
    teardown_fix(f);
    f = setup_http("[limit all]\nlistener = w\nrate = 1/h\nburst = 4\nmethods = GET\n");
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct sl_http_head hd = http_head("GET", bad[i], "k");
        assert_null(sl_limiter_path_refusal(f->lim, f->conf->listeners, &hd));
    }
    teardown_fix(f);
}

/* cost per method: case-sensitive names, '*' for the others. */
static void test_http_cost_per_method(void **state)
{
    (void)state;
    struct fix *f = setup_http("[limit w]\nlistener = w\nrate = 1/d\nburst = 5\n"
                               "cost = POST=3 *=1\n");
    assert_true(allow_http(f, 0, "POST", "/", "k", NULL));   /* 2 left */
    assert_false(allow_http(f, 0, "POST", "/", "k", NULL));  /* 3 > 2 */
    assert_true(allow_http(f, 0, "post", "/", "k", NULL));   /* another method: 1 */
    assert_true(allow_http(f, 0, "GET", "/", "k", NULL));    /* 0 left */
    assert_false(allow_http(f, 0, "GET", "/", "k", NULL));
    teardown_fix(f);
    /* A bare limit (no methods or paths) counts every request, and a
     * RESP request through sl_limiter_check_req() is decided as before. */
    f = setup_http("[limit all]\nlistener = w\nrate = 1/d\nburst = 1\n");
    assert_true(allow_http(f, 0, "OPTIONS", "*", NULL, NULL));
    assert_false(allow_http(f, 0, "GET", "/", NULL, NULL));
    teardown_fix(f);
    f = setup_with("[limit w]\nlistener = r\nrate = 1/d\nburst = 1\ncommands = SET\n");
    struct sl_verdict v;
    struct sl_limiter_req *h = NULL;
    struct sl_req r = { .resp = req(f, "SET a b"), .http = NULL };
    fake_us = 0;
    assert_int_equal(sl_limiter_check_req(f->lim, f->conf->listeners, &f->id, 1, &r, &v, NULL,
                                          NULL, &h), 0);
    assert_int_equal(v.kind, SL_VERDICT_ALLOW);
    r.resp = req(f, "SET a b");
    fake_us = 0;
    sl_limiter_check_req(f->lim, f->conf->listeners, &f->id, 1, &r, &v, NULL, NULL, &h);
    assert_int_equal(v.kind, SL_VERDICT_REJECT);
    r.resp = req(f, "MULTI"); /* exempt, as through sl_limiter_check() */
    sl_limiter_check_req(f->lim, f->conf->listeners, &f->id, 1, &r, &v, NULL, NULL, &h);
    assert_int_equal(v.kind, SL_VERDICT_ALLOW);
    teardown_fix(f);
}

/* match_identity on header identities: a tier for one API key. */
static void test_http_tier_by_key(void **state)
{
    (void)state;
    struct fix *f = setup_http("[limit std]\nlistener = w\nrate = 1/h\nburst = 1\n"
                               "[limit vip]\nlistener = w\nrate = 1/h\nburst = 3\n"
                               "match_identity = gold\nreplaces = std\n");
    assert_true(allow_http(f, 0, "GET", "/", "gold", NULL));
    assert_true(allow_http(f, 0, "GET", "/", "gold", NULL));
    assert_true(allow_http(f, 0, "GET", "/", "gold", NULL));
    struct sl_verdict v;
    assert_false(allow_http(f, 0, "GET", "/", "gold", &v));
    assert_string_equal(v.limit, "vip");
    assert_true(allow_http(f, 0, "GET", "/", "silver", NULL));
    assert_false(allow_http(f, 0, "GET", "/", "silver", &v));
    assert_string_equal(v.limit, "std");
    teardown_fix(f);
}

/* ---- one clock: places and the sweep read the limiter's clock too ----------- */

/* The login queue measures a wait on the limiter's clock alone: a second
 * connection queued at 0 s and let in at 2.5 s of the fake clock shows a
 * 2,500 ms wait, whatever the real time; the sweep drops a bucket idle
 * past its TTL on the same clock. */
static void test_one_clock_drives_places_and_sweep(void **state)
{
    (void)state;
    struct fix *f = setup_with("[limit c]\nlistener = r\nmetric = connections\nmax = 1\n"
                               "action = delay\nmax_delay = 10s\n"
                               "[limit q]\nlistener = r\nrate = 1/s\nburst = 1\n");
    struct sl_verdict v;
    fake_us = 0;
    struct sl_place *a = sl_place_new(f->lim, f->conf->listeners, &f->id, 1);
    struct sl_place *b = sl_place_new(f->lim, f->conf->listeners, &f->id, 2);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(sl_place_acquire(a, &v, NULL, NULL), 0);
    assert_int_equal(v.kind, SL_VERDICT_ALLOW);
    assert_int_equal(sl_place_acquire(b, &v, NULL, NULL), 0);
    assert_int_equal(v.kind, SL_VERDICT_REJECT);
    assert_int_equal(v.action, SL_ACTION_DELAY);
    fake_us = 2500000;
    sl_place_free(a);
    assert_int_equal(sl_place_acquire(b, &v, NULL, NULL), 0);
    assert_int_equal(v.kind, SL_VERDICT_ALLOW);
    assert_true(allow(f, 1, 2500, "GET k", NULL)); /* a bucket for the sweep */
    char buf[2048];
    FILE *out = fmemopen(buf, sizeof(buf), "w");
    sl_limiter_stats_json(f->lim, out);
    fclose(out);
    assert_non_null(strstr(buf, "\"name\":\"c\",\"algorithm\":\"gcra\",\"allowed\":2,"
                                "\"rejected\":0,\"shadow_rejected\":0,\"fallback\":0,"
                                "\"delayed\":1,\"max_delay_seen_ms\":2500,"));
    assert_non_null(strstr(buf, "\"name\":\"q\",\"algorithm\":\"token_bucket\",\"allowed\":1,"));
    const char *q = strstr(buf, "\"name\":\"q\"");
    assert_non_null(q);
    assert_non_null(strstr(q, "\"local_buckets\":1,"));
    fake_us = 2500000 + 500000; /* not idle long enough yet */
    sl_limiter_sweep(f->lim);
    out = fmemopen(buf, sizeof(buf), "w");
    sl_limiter_stats_json(f->lim, out);
    fclose(out);
    q = strstr(buf, "\"name\":\"q\"");
    assert_non_null(q);
    assert_non_null(strstr(q, "\"local_buckets\":1,"));
    fake_us = 2500000 + 60000000; /* a minute later: full again, dropped */
    sl_limiter_sweep(f->lim);
    out = fmemopen(buf, sizeof(buf), "w");
    sl_limiter_stats_json(f->lim, out);
    fclose(out);
    q = strstr(buf, "\"name\":\"q\"");
    assert_non_null(q);
    assert_non_null(strstr(q, "\"local_buckets\":0,"));
    sl_place_free(b);
    teardown_fix(f);
}

/* <f> reloaded with the limits <limits>: a new limiter built with the
 * running one as env.prev, swapped in as the server does (limit/carry.h). */
static void reload_with(struct fix *f, const char *limits)
{
    static char text[16384];
    snprintf(text, sizeof(text), "%s%s", base_conf, limits);
    struct sl_conf *conf = sl_conf_load_string(text, "test.ini", stderr);
    assert_non_null(conf);
    struct sl_limiter *lim = sl_limiter_reload(conf, &local_env, f->lim);
    assert_non_null(lim);
    sl_limiter_release(f->lim);
    sl_conf_free(f->conf);
    f->lim = lim;
    f->conf = conf;
}

/* A reload carries a limit's state and counters to the limit of its name:
 * the same text leaves /stats as it was and the bucket drained; a faster
 * rate refills the kept (empty) bucket from then on; a limit renamed starts
 * afresh; another metric keeps the counters only. */
static void test_reload_carries_state(void **state)
{
    (void)state;
    const char *slow = "[limit w]\nlistener = r\nrate = 1/h\nburst = 2\ncommands = SET\n";
    struct fix *f = setup_with(slow);
    req(f, "AUTH bob secret");
    assert_true(allow(f, 1, 0, "SET k v", NULL));
    assert_true(allow(f, 1, 0, "SET k v", NULL));
    assert_false(allow(f, 1, 0, "SET k v", NULL));
    char *before = strdup(stats(f));
    assert_non_null(before);
    reload_with(f, slow);
    assert_string_equal(stats(f), before);
    free(before);
    assert_false(allow(f, 1, 500, "SET k v", NULL));
    /* empty at its last take (0 ms), refilling at the new rate since */
    reload_with(f, "[limit w]\nlistener = r\nrate = 1/s\nburst = 2\ncommands = SET\n");
    assert_false(allow(f, 1, 900, "SET k v", NULL));
    assert_true(allow(f, 1, 1000, "SET k v", NULL));
    assert_int_equal(json_num(stats(f), "\"allowed\":"), 3);
    assert_int_equal(json_num(stats(f), "\"rejected\":"), 3);
    reload_with(f, "[limit w2]\nlistener = r\nrate = 1/h\nburst = 2\ncommands = SET\n");
    assert_int_equal(json_num(stats(f), "\"allowed\":"), 0);
    assert_true(allow(f, 1, 1000, "SET k v", NULL));
    reload_with(f, "[limit w2]\nlistener = r\nmetric = bytes_in\nrate = 1/h\nburst = 2\n");
    assert_int_equal(json_num(stats(f), "\"allowed\":"), 1);
    assert_int_equal(json_num(stats(f), "\"local_buckets\":"), 0);
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
        cmocka_unit_test(test_verdict_policy_fields),
        cmocka_unit_test(test_retry_after_whole_seconds_honest),
        cmocka_unit_test(test_command_name_with_nul),
        cmocka_unit_test(test_command_names_with_underscore),
        cmocka_unit_test(test_exempt_checks_argc),
        cmocka_unit_test(test_command_categories),
        cmocka_unit_test(test_too_many_limits_refused),
        cmocka_unit_test(test_many_tiers),
        cmocka_unit_test(test_too_many_counted),
        cmocka_unit_test(test_delay_reserves_in_order),
        cmocka_unit_test(test_meter_plan),
        cmocka_unit_test(test_buckets_bounded_full_first),
        cmocka_unit_test(test_busiest_not_forged),
        cmocka_unit_test(test_http_methods),
        cmocka_unit_test(test_http_paths),
        cmocka_unit_test(test_http_path_refusal),
        cmocka_unit_test(test_http_cost_per_method),
        cmocka_unit_test(test_http_tier_by_key),
        cmocka_unit_test(test_one_clock_drives_places_and_sweep),
        cmocka_unit_test(test_reload_carries_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

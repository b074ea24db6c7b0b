/* Overrides from the store (overrides = store) meeting what the limiter
 * remembers: an identity refused under an override's numbers is released
 * once the override is removed or made malformed, within overrides_ttl,
 * whether or not its cached answer was dropped meanwhile (docs/limits.md:
 * new numbers forget the refusals remembered under the old ones). Real
 * upstream and quota-store redis-servers, a real sluice, hiredis. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integration/harness.h"

#define TTL_MS 200 /* overrides_ttl of the limit under test */

struct world {
    struct th_proc up, store, sl;
    int            port, admin;
};

/* A resp listener in front of redis, or with <http> an http one in front
 * of the Python upstream, and the limit "plan" on it. */
static struct world *world_new_on(const char *algorithm, int http)
{
    struct world *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    assert_int_equal(http ? th_pyup_start(&w->up) : th_redis_start(&w->up, NULL), 0);
    assert_int_equal(th_redis_start(&w->store, NULL), 0);
    char ini[2048];
    w->port = th_free_port();
    w->admin = th_free_port();
    /* The limit's own numbers pass a slow poll easily; the override's
     * (one a hour) refuse the second request for an hour. */
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\n"
             "[store]\nurl = redis://127.0.0.1:%d\ntimeout = 250ms\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "identity = client_ip\n%s"
             "[limit plan]\nlistener = r\nrate = 100/s\nburst = 100\n%s"
             "algorithm = %s\noverrides = store\noverrides_ttl = %dms\n",
             w->admin, w->store.port, w->port, w->up.port, http ? "protocol = http\n" : "",
             http ? "" : "commands = INCR\n", algorithm, TTL_MS);
    assert_int_equal(th_sluice_start(&w->sl, ini, w->port), 0);
    assert_int_equal(th_metric_wait(w->admin, "sluice_store_up", 1, 5000), 0);
    return w;
}

static struct world *world_new(const char *algorithm)
{
    return world_new_on(algorithm, 0);
}

static void world_free(struct world *w)
{
    assert_int_equal(th_stop(&w->sl), 0);
    th_stop(&w->up);
    th_stop(&w->store);
    free(w);
}

static void store_cmd(struct world *w, const char *cmd)
{
    char *r = th_redis_cmd(w->store.port, cmd);
    assert_non_null(r);
    free(r);
}

/* One INCR: 1 when it passed; a refusal must be plan's. */
static int incr_ok(redisContext *c)
{
    redisReply *r = redisCommand(c, "INCR k");
    assert_non_null(r);
    int ok = r->type == REDIS_REPLY_INTEGER;
    if (!ok)
        assert_non_null(strstr(r->str, "THROTTLED limit 'plan'"));
    freeReplyObject(r);
    return ok;
}

/* Polls INCR until one passes, at most <ms>; returns how long it took. */
static long passes_within(redisContext *c, int ms)
{
    uint64_t t0 = th_now_ms(), end = t0 + (uint64_t)ms;
    while (th_now_ms() < end) {
        if (incr_ok(c))
            return (long)(th_now_ms() - t0);
        usleep(5000); /* the poll's pace: the condition is the deadline */
    }
    return -1;
}

/* Whether the cached overrides of "plan" number <n> in /stats. */
static int cached_is(struct world *w, int n)
{
    char *stats = th_http_get(w->admin, "/stats");
    assert_non_null(stats);
    char want[64];
    snprintf(want, sizeof(want), "\"overrides\":{\"ttl_ms\":%d,\"cached\":%d,", TTL_MS, n);
    int yes = strstr(stats, want) != NULL;
    free(stats);
    return yes;
}

/* Waits until the idle override entry is dropped (the sweep: idle past
 * overrides_ttl), so that the next request reads the override afresh. */
static void wait_dropped(struct world *w)
{
    uint64_t end = th_now_ms() + 10000;
    while (!cached_is(w, 0) && th_now_ms() < end)
        usleep(20000);
    assert_true(cached_is(w, 0));
}

/* The identity gets its one request an hour under the override, then a
 * refusal for about an hour. */
static void refused_under_override(struct world *w, redisContext *c, const char *algorithm)
{
    store_cmd(w, "HSET sluice:overrides:{plan} ip:127.0.0.1 \"1/h 1\"");
    assert_true(incr_ok(c));
    for (int i = 0; i < 3; i++)
        assert_false(incr_ok(c));
    redisReply *r = redisCommand(c, "INCR k");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    long ms = -1;
    const char *in = strstr(r->str, "retry in ");
    assert_non_null(in);
    ms = atol(in + 9);
    /* an hour, less what passed (fixed windows end on the hour) */
    if (strcmp(algorithm, "fixed_window") != 0)
        assert_true(ms > 3500000);
    freeReplyObject(r);
}

/* <change> (HDEL, or a malformed value) after the override's entry was
 * dropped (<idle>) or while the identity keeps asking: the identity passes
 * under the limit's own numbers within overrides_ttl and a little slack. */
static void released_after(const char *algorithm, const char *change, int idle)
{
    struct world *w = world_new(algorithm);
    redisContext *c = redisConnect("127.0.0.1", w->port);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    refused_under_override(w, c, algorithm);
    if (idle)
        wait_dropped(w);
    store_cmd(w, change);
    long took = passes_within(c, TTL_MS + 2000);
    if (took < 0)
        fprintf(stderr, "%s: '%s' (idle %d): still refused after %d ms\n", algorithm, change,
                idle, TTL_MS + 2000);
    assert_true(took >= 0);
    /* and then the limit's own numbers: far more than one an hour (20
     * at 100/s; gcra's bucket is empty at the change, the others full) */
    for (int i = 0; i < 20; i++)
        assert_true(passes_within(c, 3000) >= 0);
    redisFree(c);
    world_free(w);
}

static void test_hdel_releases_after_idle(void **state)
{
    (void)state;
    released_after("token_bucket", "HDEL sluice:overrides:{plan} ip:127.0.0.1", 1);
}

static void test_malformed_releases_after_idle(void **state)
{
    (void)state;
    released_after("token_bucket", "HSET sluice:overrides:{plan} ip:127.0.0.1 \"10kb/s\"", 1);
}

static void test_hdel_releases_while_asking(void **state)
{
    (void)state;
    released_after("token_bucket", "HDEL sluice:overrides:{plan} ip:127.0.0.1", 0);
}

/* GCRA keeps only a theoretical arrival time an hour ahead: read under
 * the limit's numbers, that debt is at most one full bucket. */
static void test_hdel_releases_gcra(void **state)
{
    (void)state;
    released_after("gcra", "HDEL sluice:overrides:{plan} ip:127.0.0.1", 1);
}

/* The windows count in windows of the override's period (an hour); under
 * the limit's own second they are other windows. */
static void test_hdel_releases_windows(void **state)
{
    (void)state;
    released_after("sliding_window", "HDEL sluice:overrides:{plan} ip:127.0.0.1", 1);
    released_after("fixed_window", "HDEL sluice:overrides:{plan} ip:127.0.0.1", 1);
    released_after("sliding_log", "HDEL sluice:overrides:{plan} ip:127.0.0.1", 1);
}

/* One GET on a connection of its own: the status, and Retry-After's
 * seconds in *<retry> (-1 without). */
static int http_get(int port, long *retry)
{
    int fd = th_connect(port);
    assert_true(fd >= 0);
    const char *req = "GET /fixed?size=2 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    assert_int_equal(th_write_all(fd, req, strlen(req)), 0);
    char buf[4096];
    int eof = 0;
    size_t n = th_read_until_eof(fd, buf, sizeof(buf) - 1, 5000, &eof);
    close(fd);
    buf[n] = '\0';
    assert_true(n > 12 && strncmp(buf, "HTTP/1.1 ", 9) == 0);
    const char *ra = strcasestr(buf, "\r\nRetry-After: ");
    *retry = ra != NULL ? atol(ra + 15) : -1;
    return atoi(buf + 9);
}

/* The case as reported, over HTTP: 429 with an hour's Retry-After, the
 * override removed while the identity is idle; then 200 within
 * overrides_ttl. */
static void test_http_hdel_releases(void **state)
{
    (void)state;
    struct world *w = world_new_on("token_bucket", 1);
    store_cmd(w, "HSET sluice:overrides:{plan} ip:127.0.0.1 \"1/h 1\"");
    long retry;
    assert_int_equal(http_get(w->port, &retry), 200);
    assert_int_equal(http_get(w->port, &retry), 429);
    assert_true(retry > 3500);
    wait_dropped(w);
    store_cmd(w, "HDEL sluice:overrides:{plan} ip:127.0.0.1");
    uint64_t t0 = th_now_ms(), end = t0 + TTL_MS + 2000;
    int status = 429;
    while (status != 200 && th_now_ms() < end) {
        status = http_get(w->port, &retry);
        if (status != 200)
            usleep(5000); /* the poll's pace: the condition is the deadline */
    }
    if (status != 200)
        fprintf(stderr, "http: still %d, Retry-After %ld, %d ms after HDEL\n", status, retry,
                (int)(th_now_ms() - t0));
    assert_int_equal(status, 200);
    world_free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hdel_releases_after_idle),
        cmocka_unit_test(test_malformed_releases_after_idle),
        cmocka_unit_test(test_hdel_releases_while_asking),
        cmocka_unit_test(test_hdel_releases_gcra),
        cmocka_unit_test(test_hdel_releases_windows),
        cmocka_unit_test(test_http_hdel_releases),
    };
    return th_finish(cmocka_run_group_tests(tests, NULL, NULL));
}

/* The limits API of the admin endpoint (docs/operations.md, "Limits API"):
 * GET /limits, one identity looked up (in process, and store-backed: the
 * fleet's numbers, read from the store), the identities counted most, and
 * POST .../reset, which refills a bucket for the whole fleet and makes
 * every instance forget the refusals it remembered within overrides_ttl.
 * Real redis-servers (upstream and quota store), real sluice processes,
 * hiredis for the traffic, raw sockets for the admin requests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "integration/harness.h"

#define TRUST_MS 300 /* overrides_ttl of the store-backed limit: the forget bound */

/* ---- HTTP and JSON, just enough ----------------------------------------- */

/* <method> <path> on the admin port: the body (malloc'd), *status set;
 * *allow gets the Allow header's value when <allow> is not NULL. */
static char *api(int port, const char *method, const char *path, int *status, char *allow,
                 size_t acap)
{
    int fd = th_connect(port);
    assert_true(fd >= 0);
    char req[2048];
    int n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
                     method, path);
    assert_int_equal(th_write_all(fd, req, (size_t)n), 0);
    static char buf[1 << 20];
    int eof = 0;
    size_t got = th_read_until_eof(fd, buf, sizeof(buf) - 1, 5000, &eof);
    close(fd);
    buf[got] = '\0';
    assert_true(eof);
    assert_int_equal(sscanf(buf, "HTTP/1.1 %d", status), 1);
    if (allow != NULL) {
        allow[0] = '\0';
        const char *a = strstr(buf, "\r\nAllow: ");
        if (a != NULL) {
            a += 9;
            size_t l = strcspn(a, "\r");
            snprintf(allow, acap, "%.*s", (int)l, a);
        }
    }
    const char *body = strstr(buf, "\r\n\r\n");
    assert_non_null(body);
    return strdup(body + 4);
}

static char *get(int port, const char *path, int want)
{
    int status;
    char *b = api(port, "GET", path, &status, NULL, 0);
    if (status != want)
        fprintf(stderr, "GET %s: %d %s\n", path, status, b);
    assert_int_equal(status, want);
    return b;
}

/* The number after "<key>": in <json> (the first one); -2 for null. */
static long long num(const char *json, const char *key)
{
    char k[64];
    snprintf(k, sizeof(k), "\"%s\":", key);
    const char *p = strstr(json, k);
    if (p == NULL)
        fprintf(stderr, "no %s in %s\n", key, json);
    assert_non_null(p);
    p += strlen(k);
    if (strncmp(p, "null", 4) == 0)
        return -2;
    return strtoll(p, NULL, 10);
}

static int has(const char *json, const char *s)
{
    return strstr(json, s) != NULL;
}

/* ---- the processes ------------------------------------------------------ */

struct world {
    struct th_proc up, store, sl[2];
    int            port[2], admin[2];
    int            n;
};

/* <n> sluices in front of one upstream redis; <store> 1: sharing a quota
 * store, 0: url = local. <limits> is the [limit] text; <workers> > 1 runs
 * each sluice as a master of that many workers. */
static struct world *world_new_w(int n, int store, const char *limits, int workers)
{
    struct world *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    w->n = n;
    assert_int_equal(th_redis_start(&w->up, NULL), 0);
    if (store)
        assert_int_equal(th_redis_start(&w->store, NULL), 0);
    for (int i = 0; i < n; i++) {
        char ini[4096], st[128];
        w->port[i] = th_free_port();
        w->admin[i] = th_free_port();
        if (store)
            snprintf(st, sizeof(st), "url = redis://127.0.0.1:%d\ntimeout = 250ms\n", w->store.port);
        else
            snprintf(st, sizeof(st), "url = local\n");
        snprintf(ini, sizeof(ini),
                 "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\nworkers = %d\n[store]\n%s"
                 "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
                 "identity = client_ip\n%s",
                 w->admin[i], workers, st, w->port[i], w->up.port, limits);
        assert_int_equal(th_sluice_start(&w->sl[i], ini, w->port[i]), 0);
        for (int k = 0; store && k < workers; k++) {
            char sample[64] = "sluice_store_up";
            if (workers > 1)
                snprintf(sample, sizeof(sample), "sluice_store_up{worker=\"%d\"}", k);
            assert_int_equal(th_metric_wait(w->admin[i], sample, 1, 5000), 0);
        }
    }
    return w;
}

static struct world *world_new(int n, int store, const char *limits)
{
    return world_new_w(n, store, limits, 1);
}

static void world_free(struct world *w)
{
    for (int i = 0; i < w->n; i++)
        assert_int_equal(th_stop(&w->sl[i]), 0);
    th_stop(&w->up);
    if (w->store.pid != 0)
        th_stop(&w->store);
    free(w);
}

static redisContext *client(int port)
{
    redisContext *c = redisConnect("127.0.0.1", port);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    return c;
}

/* One INCR: 1 when it passed, 0 when limit <limit> refused it. */
static int incr_ok(redisContext *c, const char *limit)
{
    redisReply *r = redisCommand(c, "INCR k");
    assert_non_null(r);
    int ok = r->type == REDIS_REPLY_INTEGER;
    if (!ok) {
        char want[80];
        snprintf(want, sizeof(want), "THROTTLED limit '%s'", limit);
        if (strstr(r->str, want) == NULL)
            fprintf(stderr, "unexpected: %s\n", r->str);
        assert_non_null(strstr(r->str, want));
    }
    freeReplyObject(r);
    return ok;
}

/* <n> INCRs from source address <src> (127.0.0.x: another client_ip);
 * returns how many passed. */
static int incr_from(int port, const char *src, int n)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = { .sin_family = AF_INET };
    inet_pton(AF_INET, src, &a.sin_addr);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    a.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    redisContext *c = redisConnectFd(fd);
    assert_non_null(c);
    int ok = 0;
    for (int i = 0; i < n; i++) {
        redisReply *r = redisCommand(c, "INCR k");
        assert_non_null(r);
        ok += r->type == REDIS_REPLY_INTEGER;
        freeReplyObject(r);
    }
    redisFree(c);
    return ok;
}

/* ---- in process --------------------------------------------------------- */

#define LOCAL_LIMIT "[limit plan]\nlistener = r\nrate = 3/m\nburst = 3\n"

/* A local bucket drained, looked up, reset: the numbers follow. */
static void test_local_lookup_and_reset(void **state)
{
    (void)state;
    struct world *w = world_new(1, 0, LOCAL_LIMIT);
    redisContext *c = client(w->port[0]);
    int passed = 0;
    for (int i = 0; i < 5; i++)
        passed += incr_ok(c, "plan");
    assert_int_equal(passed, 3);

    char *b = get(w->admin[0], "/limits/plan/identities/ip:127.0.0.1", 200);
    assert_true(has(b, "\"limit\":\"plan\""));
    assert_true(has(b, "\"identity\":\"ip:127.0.0.1\""));
    assert_true(has(b, "\"source\":\"local\""));
    assert_true(has(b, "\"rate\":\"3/m\""));
    assert_true(has(b, "\"override\":null"));
    assert_int_equal(num(b, "burst"), 3);
    assert_int_equal(num(b, "remaining"), 0);
    assert_true(num(b, "retry_ms") > 0 && num(b, "retry_ms") <= 20000);
    assert_true(num(b, "reset_ms") > 40000 && num(b, "reset_ms") <= 60000);
    assert_int_equal(num(b, "requests"), 5);
    assert_int_equal(num(b, "rejected"), 2);
    assert_int_equal(num(b, "delayed"), 0);
    free(b);

    /* the same identity percent-encoded */
    b = get(w->admin[0], "/limits/pl%61n/identities/ip%3A127.0.0.1", 200);
    assert_int_equal(num(b, "remaining"), 0);
    assert_int_equal(num(b, "requests"), 5);
    free(b);

    /* never seen: a full bucket, nothing counted */
    b = get(w->admin[0], "/limits/plan/identities/ip:10.9.9.9", 200);
    assert_int_equal(num(b, "remaining"), 3);
    assert_int_equal(num(b, "retry_ms"), 0);
    assert_int_equal(num(b, "reset_ms"), 0);
    assert_int_equal(num(b, "requests"), 0);
    assert_true(has(b, "\"known\":false"));
    free(b);

    int status;
    b = api(w->admin[0], "POST", "/limits/plan/identities/ip:127.0.0.1/reset", &status, NULL, 0);
    assert_int_equal(status, 200);
    assert_true(has(b, "\"reset\":true"));
    assert_true(has(b, "\"scope\":\"process\""));
    free(b);
    assert_true(incr_ok(c, "plan"));
    b = get(w->admin[0], "/limits/plan/identities/ip:127.0.0.1", 200);
    assert_int_equal(num(b, "remaining"), 2);
    assert_int_equal(num(b, "requests"), 6); /* a reset keeps the counts */
    free(b);

    /* the list */
    b = get(w->admin[0], "/limits", 200);
    assert_true(has(b, "{\"limits\":[{\"name\":\"plan\",\"listener\":\"r\""));
    assert_true(has(b, "\"store\":false"));
    assert_true(has(b, "\"algorithm\":\"token_bucket\",\"rate\":\"3/m\""));
    assert_int_equal(num(b, "allowed"), 4);
    assert_int_equal(num(b, "rejected"), 2);
    free(b);
    redisFree(c);
    world_free(w);
}

/* The identities counted most, by requests and by rejections. */
static void test_top(void **state)
{
    (void)state;
    struct world *w = world_new(1, 0, LOCAL_LIMIT);
    assert_int_equal(incr_from(w->port[0], "127.0.0.2", 6), 3);
    assert_int_equal(incr_from(w->port[0], "127.0.0.3", 4), 3);
    assert_int_equal(incr_from(w->port[0], "127.0.0.4", 1), 1);
    char *b = get(w->admin[0], "/limits/plan/identities?top=2", 200);
    const char *a2 = strstr(b, "\"identity\":\"ip:127.0.0.2\",\"requests\":6,\"rejected\":3");
    const char *a3 = strstr(b, "\"identity\":\"ip:127.0.0.3\",\"requests\":4,\"rejected\":1");
    if (a2 == NULL || a3 == NULL)
        fprintf(stderr, "%s\n", b);
    assert_non_null(a2);
    assert_non_null(a3);
    assert_true(a2 < a3);
    assert_false(has(b, "127.0.0.4"));
    assert_int_equal(num(b, "identities_counted"), 3);
    free(b);
    b = get(w->admin[0], "/limits/plan/identities?by=rejected&top=1000", 200);
    assert_true(has(b, "\"by\":\"rejected\""));
    assert_false(has(b, "127.0.0.4")); /* never rejected: not listed */
    assert_true(strstr(b, "127.0.0.2") < strstr(b, "127.0.0.3"));
    free(b);
    world_free(w);
}

/* 404, 400 and 405 (with Allow), and identities written as valid JSON
 * whatever bytes they hold. */
static void test_errors_and_escaping(void **state)
{
    (void)state;
    struct world *w = world_new(1, 0, LOCAL_LIMIT);
    int a = w->admin[0];
    static const char *const not_found[] = {
        "/limits/nope/identities/x", "/limits/plan", "/limits/plan/x",
        "/limits/plan/identities/x/y", "/limits/plan/identities/x/reset/z",
    };
    for (size_t i = 0; i < sizeof(not_found) / sizeof(*not_found); i++) {
        char *b = get(a, not_found[i], 404);
        assert_true(has(b, "\"error\":"));
        free(b);
    }
    static const char *const bad[] = {
        "/limits/plan/identities/%zz", "/limits/plan/identities/a%2",
        "/limits/plan/identities/a%00b", "/limits/p%xxlan/identities/a",
        "/limits/plan/identities?top=0", "/limits/plan/identities?top=1001",
        "/limits/plan/identities?top=x", "/limits/plan/identities?by=bytes",
        "/limits/plan/identities?color=red", "/limits/plan/identities?top",
    };
    free(get(a, "/limitsx", 404)); /* not under /limits: the endpoint's own 404 */
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        char *b = get(a, bad[i], 400);
        assert_true(has(b, "\"error\":"));
        free(b);
    }
    struct {
        const char *method, *path, *allow;
    } wrong[] = {
        { "PUT", "/limits/plan/identities/x", "GET, HEAD" },
        { "DELETE", "/limits/plan/identities/x", "GET, HEAD" },
        { "POST", "/limits", "GET, HEAD" },
        { "POST", "/limits/plan/identities", "GET, HEAD" },
        { "GET", "/limits/plan/identities/x/reset", "POST" },
    };
    for (size_t i = 0; i < sizeof(wrong) / sizeof(*wrong); i++) {
        int status;
        char allow[64];
        char *b = api(a, wrong[i].method, wrong[i].path, &status, allow, sizeof(allow));
        assert_int_equal(status, 405);
        assert_string_equal(allow, wrong[i].allow);
        free(b);
    }
    /* a quote, a backslash, a control byte, a byte that is not UTF-8, and
     * well-formed UTF-8 (é) */
    char *b = get(a, "/limits/plan/identities/a%22b%5C%01%FFc%C3%A9", 200);
    if (!has(b, "\"identity\":\"a\\\"b\\\\\\u0001\\ufffdc\xc3\xa9\""))
        fprintf(stderr, "%s\n", b);
    assert_true(has(b, "\"identity\":\"a\\\"b\\\\\\u0001\\ufffdc\xc3\xa9\""));
    free(b);
    world_free(w);
}

/* ---- store-backed: the fleet -------------------------------------------- */

static void fleet_case(const char *algorithm)
{
    char limits[512];
    snprintf(limits, sizeof(limits),
             "[limit plan]\nlistener = r\nrate = 6/m\nburst = 6\nalgorithm = %s\n"
             "overrides = store\noverrides_ttl = %dms\n",
             algorithm, TRUST_MS);
    struct world *w = world_new(2, 1, limits);
    redisContext *c0 = client(w->port[0]), *c1 = client(w->port[1]);
    for (int i = 0; i < 3; i++)
        assert_true(incr_ok(c0, "plan"));
    assert_true(incr_ok(c1, "plan"));

    /* both instances tell the fleet's numbers: 6 - 4 */
    for (int i = 0; i < 2; i++) {
        char *b = get(w->admin[i], "/limits/plan/identities/ip:127.0.0.1", 200);
        if (num(b, "remaining") != 2)
            fprintf(stderr, "%s: instance %d: %s\n", algorithm, i, b);
        assert_int_equal(num(b, "remaining"), 2);
        assert_int_equal(num(b, "retry_ms"), 0);
        assert_true(num(b, "reset_ms") > 0);
        assert_true(has(b, "\"source\":\"store\""));
        assert_true(has(b, "\"known\":true"));
        assert_int_equal(num(b, "requests"), i == 0 ? 3 : 1); /* this instance's */
        free(b);
    }
    /* the look took nothing */
    assert_true(incr_ok(c1, "plan"));
    assert_true(incr_ok(c1, "plan"));
    assert_false(incr_ok(c1, "plan"));
    assert_false(incr_ok(c0, "plan"));
    char *b = get(w->admin[1], "/limits/plan/identities/ip:127.0.0.1", 200);
    assert_int_equal(num(b, "remaining"), 0);
    assert_true(num(b, "retry_ms") > 0);
    free(b);
    /* instance 1 remembers its refusal: refused without asking the store */
    assert_false(incr_ok(c1, "plan"));

    /* an override in the store is the fleet's numbers */
    char *r = th_redis_cmd(w->store.port, "HSET sluice:overrides:{plan} ip:127.0.0.1 \"60/m 60\"");
    free(r);
    b = get(w->admin[0], "/limits/plan/identities/ip:127.0.0.1", 200);
    assert_true(has(b, "\"override\":{\"rate\":\"60/m\",\"burst\":60}"));
    free(b);
    r = th_redis_cmd(w->store.port, "HDEL sluice:overrides:{plan} ip:127.0.0.1");
    free(r);

    int status;
    b = api(w->admin[0], "POST", "/limits/plan/identities/ip%3A127.0.0.1/reset", &status, NULL, 0);
    assert_int_equal(status, 200);
    assert_true(has(b, "\"scope\":\"fleet\""));
    assert_int_equal(num(b, "store_keys_deleted"), 1);
    assert_int_equal(num(b, "others_forget_within_ms"), TRUST_MS);
    free(b);
    /* both see the full bucket at once */
    for (int i = 0; i < 2; i++) {
        b = get(w->admin[i], "/limits/plan/identities/ip:127.0.0.1", 200);
        assert_int_equal(num(b, "remaining"), 6);
        assert_int_equal(num(b, "retry_ms"), 0);
        free(b);
    }
    /* the instance that reset passes at once; the other within
     * overrides_ttl (its remembered refusal, minutes long, is asked again) */
    assert_true(incr_ok(c0, "plan"));
    uint64_t t0 = th_now_ms(), end = t0 + TRUST_MS + 3000;
    int ok = 0;
    while (!ok && th_now_ms() < end) {
        ok = incr_ok(c1, "plan");
        if (!ok)
            usleep(10000); /* the poll's pace: the condition is the deadline */
    }
    if (!ok)
        fprintf(stderr, "%s: instance 1 still refuses %d ms after the reset\n", algorithm,
                (int)(th_now_ms() - t0));
    assert_true(ok);
    redisFree(c0);
    redisFree(c1);
    world_free(w);
}

static void test_fleet_token_bucket(void **state)
{
    (void)state;
    fleet_case("token_bucket");
}

static void test_fleet_gcra(void **state)
{
    (void)state;
    fleet_case("gcra");
}

static void test_fleet_sliding_window(void **state)
{
    (void)state;
    fleet_case("sliding_window");
}

static void test_fleet_sliding_log(void **state)
{
    (void)state;
    fleet_case("sliding_log");
}

static void test_fleet_fixed_window(void **state)
{
    (void)state;
    fleet_case("fixed_window");
}

/* A store that does not answer: 503 with a JSON error, never a hang; a
 * connection limit has no bucket to reset (409). */
static void test_store_down_and_connections(void **state)
{
    (void)state;
    struct world *w = world_new(1, 1,
                                "[limit plan]\nlistener = r\nrate = 6/m\nburst = 6\n"
                                "[limit conns]\nlistener = r\nmetric = connections\nmax = 5\n");
    redisContext *c = client(w->port[0]);
    assert_true(incr_ok(c, "plan"));
    char *b = get(w->admin[0], "/limits/conns/identities/ip:127.0.0.1", 200);
    assert_int_equal(num(b, "max"), 5);
    assert_int_equal(num(b, "remaining"), 4); /* our one connection holds a place */
    assert_true(num(b, "connections") >= 1); /* admitted so far (the harness's probe too) */
    free(b);
    int status;
    b = api(w->admin[0], "POST", "/limits/conns/identities/ip:127.0.0.1/reset", &status, NULL, 0);
    assert_int_equal(status, 409);
    free(b);
    redisFree(c);

    th_stop(&w->store);
    w->store.pid = 0;
    assert_int_equal(th_metric_wait(w->admin[0], "sluice_store_up", 0, 5000), 0);
    b = get(w->admin[0], "/limits/plan/identities/ip:127.0.0.1", 503);
    assert_true(has(b, "\"error\":"));
    free(b);
    b = api(w->admin[0], "POST", "/limits/plan/identities/ip:127.0.0.1/reset", &status, NULL, 0);
    assert_int_equal(status, 503);
    free(b);
    b = get(w->admin[0], "/limits", 200); /* needs no store */
    free(b);
    world_free(w);
}

/* With workers the master asks every worker and adds their counts up,
 * wherever the kernel sent the connections; errors pass through. */
static void test_workers(void **state)
{
    (void)state;
    struct world *w = world_new_w(1, 1, "[limit plan]\nlistener = r\nrate = 100/m\nburst = 100\n", 2);
    assert_int_equal(th_metric_wait(w->admin[0], "sluice_workers_ready", 2, 5000), 0);
    int passed = 0;
    for (int i = 0; i < 12; i++) { /* a connection each: spread over the workers */
        redisContext *c = client(w->port[0]);
        passed += incr_ok(c, "plan");
        redisFree(c);
    }
    assert_int_equal(passed, 12);
    char *b = get(w->admin[0], "/limits/plan/identities/ip:127.0.0.1", 200);
    assert_int_equal(num(b, "requests"), 12);
    assert_int_equal(num(b, "remaining"), 88);
    assert_true(has(b, "\"source\":\"store\""));
    free(b);
    b = get(w->admin[0], "/limits/plan/identities?top=5", 200);
    assert_true(has(b, "{\"identity\":\"ip:127.0.0.1\",\"requests\":12,"));
    free(b);
    b = get(w->admin[0], "/limits", 200);
    assert_int_equal(num(b, "allowed"), 12);
    free(b);
    free(get(w->admin[0], "/limits/nope/identities/x", 404));
    int status;
    char allow[64];
    b = api(w->admin[0], "PUT", "/limits/plan/identities/x", &status, allow, sizeof(allow));
    assert_int_equal(status, 405);
    assert_string_equal(allow, "GET, HEAD");
    free(b);
    b = api(w->admin[0], "POST", "/limits/plan/identities/ip:127.0.0.1/reset", &status, NULL, 0);
    assert_int_equal(status, 200);
    assert_int_equal(num(b, "store_keys_deleted"), 1);
    free(b);
    b = get(w->admin[0], "/limits/plan/identities/ip:127.0.0.1", 200);
    assert_int_equal(num(b, "remaining"), 100);
    free(b);
    /* the busiest from several workers: ?top=%31%30 is ?top=10, merged
     * as a top list too (distinct counts: one order) */
    for (int i = 2; i <= 7; i++) {
        char src[32];
        snprintf(src, sizeof(src), "127.0.0.%d", i);
        assert_int_equal(incr_from(w->port[0], src, i), i);
    }
    char *plain = get(w->admin[0], "/limits/plan/identities?top=10", 200);
    b = get(w->admin[0], "/limits/plan/identities?top=%31%30", 200);
    if (strcmp(plain, b) != 0)
        fprintf(stderr, "top=10: %s\ntop=%%31%%30: %s\n", plain, b);
    assert_string_equal(plain, b);
    free(plain);
    free(b);
    /* an identity called "identities" is looked up, not taken for the
     * busiest list because its path ends in /identities */
    b = get(w->admin[0], "/limits/plan/identities/identities", 200);
    assert_true(has(b, "\"identity\":\"identities\""));
    assert_int_equal(num(b, "remaining"), 100);
    free(b);
    world_free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local_lookup_and_reset),
        cmocka_unit_test(test_top),
        cmocka_unit_test(test_errors_and_escaping),
        cmocka_unit_test(test_fleet_token_bucket),
        cmocka_unit_test(test_fleet_gcra),
        cmocka_unit_test(test_fleet_sliding_window),
        cmocka_unit_test(test_fleet_sliding_log),
        cmocka_unit_test(test_fleet_fixed_window),
        cmocka_unit_test(test_store_down_and_connections),
        cmocka_unit_test(test_workers),
    };
    return th_finish(cmocka_run_group_tests(tests, NULL, NULL));
}

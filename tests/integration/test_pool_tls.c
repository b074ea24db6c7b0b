/* sluice integration tests — a pooled RESP listener (`upstream_pool = N`)
 * speaking TLS to its upstream, and the idle timeout of shared connections.
 *
 * Certificates are made at test time (tests/certs.h): a CA, the server's
 * certificate for localhost / 127.0.0.1 and a client certificate. The
 * upstream is a real redis-server serving TLS that asks for a client
 * certificate (sluice is given only its TLS port; the plaintext port is
 * there for the test to look). One sluice (one worker) with:
 *   t  -> upstream_pool = 2, TLS out verified against ca.pem, client cert
 *   b  -> the same, verified against ca2.pem (an unrelated CA): refused
 *   w  -> the same, upstream_tls_sni = wrong.example: refused (the name)
 *   n  -> the same, without a client certificate: Redis refuses it
 *   i  -> as t, upstream_pool_idle_timeout = 200ms
 * The last test reloads b with the right CA: its running engine's next
 * connection takes the new context.
 * POOL_TLS_ONLY=pattern runs the tests whose name matches it. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "certs.h"
#include "integration/harness.h"

static struct th_certs certs;
static struct th_proc redis_p, sluice_p;
static int rport; /* the upstream's TLS port */
static int tport, bport, wport, nport, iport, admin_port;

static const char *path(const char *name)
{
    return th_certs_path(&certs, name);
}

/* The configuration; <b_ca>: the CA file listener b verifies against. */
static void conf_text(char *ini, size_t cap, const char *b_ca)
{
    char client[1024], ca[256], ca2[256];
    snprintf(client, sizeof client, "upstream_tls_cert = %s\nupstream_tls_key = %s\n",
             path("client.pem"), path("client.key"));
    snprintf(ca, sizeof ca, "%s", path("ca.pem"));
    snprintf(ca2, sizeof ca2, "%s", path(b_ca));
    int n = snprintf(ini, cap,
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\nworkers = 1\n"
             "[store]\nurl = local\n"
             "[listener t]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nupstream_pool = 2\n"
             "upstream_tls = on\nupstream_tls_ca = %s\n%s"
             "[listener b]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nupstream_pool = 2\n"
             "upstream_tls = on\nupstream_tls_ca = %s\n%s"
             "[listener w]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nupstream_pool = 2\n"
             "upstream_tls = on\nupstream_tls_ca = %s\nupstream_tls_sni = wrong.example\n%s"
             "[listener n]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nupstream_pool = 2\n"
             "upstream_tls = on\nupstream_tls_ca = %s\n"
             "[listener i]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nupstream_pool = 2\n"
             "upstream_tls = on\nupstream_tls_ca = %s\n%supstream_pool_idle_timeout = 200ms\n",
             admin_port, tport, rport, ca, client, bport, rport, ca2, client, wport, rport, ca,
             client, nport, rport, ca, iport, rport, ca, client);
    assert_true(n > 0 && (size_t)n < cap);
}

static int group_setup(void **state)
{
    (void)state;
    static const struct th_cert want[] = {
        { "server", "/CN=server-alice", TH_SAN_LOCAL, 0 },
        { "client", "/CN=client-alice", NULL, TH_CERT_CLIENT },
    };
    if (th_certs_make(&certs, want, sizeof want / sizeof want[0]) != 0)
        return -1;
    if (th_redis_tls_start(&redis_p, &rport, path("server.pem"), path("server.key"),
                           path("ca.pem"), 1) < 0)
        return -1;
    tport = th_free_port();
    bport = th_free_port();
    wport = th_free_port();
    nport = th_free_port();
    iport = th_free_port();
    admin_port = th_free_port();
    char ini[8192];
    conf_text(ini, sizeof ini, "ca2.pem");
    return th_sluice_start(&sluice_p, ini, iport);
}

static int group_teardown(void **state)
{
    (void)state;
    int st = th_stop(&sluice_p);
    th_stop(&redis_p);
    th_certs_remove(&certs);
    return st == 0 ? 0 : -1;
}

static redisContext *conn(int port)
{
    redisContext *c = redisConnect("127.0.0.1", port);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    struct timeval tv = { TH_MS / 1000, 0 };
    redisSetTimeout(c, tv);
    return c;
}

static void expect_str(redisContext *c, const char *want, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (r == NULL)
        fail_msg("no reply to %s (err %d: %s), want \"%s\"", fmt, c->err, c->errstr, want);
    char num[32];
    const char *got = r->str;
    if (r->type == REDIS_REPLY_INTEGER) {
        snprintf(num, sizeof num, "%lld", r->integer);
        got = num;
    } else if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS &&
               r->type != REDIS_REPLY_ERROR) {
        fail_msg("reply type %d to %s, want \"%s\"", r->type, fmt, want);
    }
    if (strcmp(got, want) != 0)
        fail_msg("\"%s\" to %s, want \"%s\"", got, fmt, want);
    freeReplyObject(r);
}

/* A counter of the upstream's INFO (asked on its plaintext port). */
static long upstream_info(const char *section, const char *field)
{
    redisContext *d = conn(redis_p.port);
    redisReply *r = redisCommand(d, "INFO %s", section);
    assert_non_null(r);
    const char *p = strstr(r->str, field);
    long n = p ? strtol(p + strlen(field), NULL, 10) : -1;
    freeReplyObject(r);
    redisFree(d);
    return n;
}

/* The pooled upstream connections of listener <l>, as /metrics counts them. */
static double pool_conns(const char *l)
{
    char sample[128];
    snprintf(sample, sizeof sample, "sluice_pool_upstream_connections{listener=\"%s\"}", l);
    return th_metric(admin_port, sample);
}

/* Polls until listener <l> holds <want> pooled upstream connections;
 * 0, or -1 when TH_MS pass first. */
static int wait_conns(const char *l, double want)
{
    for (uint64_t end = th_now_ms() + TH_MS; th_now_ms() < end; usleep(10000))
        if (pool_conns(l) == want)
            return 0;
    return -1;
}

/* GET and SET through the pooled connections, spoken in TLS. */
static void test_get_set(void **state)
{
    (void)state;
    redisContext *c = conn(tport);
    expect_str(c, "OK", "SET ptls-k hello");
    expect_str(c, "hello", "GET ptls-k");
    /* a reply bigger than a TLS record (16 KiB) and than a read chunk */
    size_t big = 300 * 1000;
    char *v = malloc(big + 1);
    assert_non_null(v);
    th_pattern(v, big, 7);
    for (size_t i = 0; i < big; i++)
        v[i] = (char)('a' + (unsigned char)v[i] % 26);
    v[big] = '\0';
    redisReply *r = redisCommand(c, "SET ptls-big %b", v, big);
    assert_non_null(r);
    assert_string_equal(r->str, "OK");
    freeReplyObject(r);
    r = redisCommand(c, "GET ptls-big");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_int_equal(r->len, big);
    assert_memory_equal(r->str, v, big);
    freeReplyObject(r);
    free(v);
    redisFree(c);
    assert_true(pool_conns("t") >= 1);
}

/* MULTI pins a TLS connection of the client's own; EXEC holds exactly its
 * replies; the connection goes back clean (RESET over TLS) and serves the
 * pool again. */
static void test_multi_pinned(void **state)
{
    (void)state;
    redisContext *a = conn(tport), *b = conn(tport);
    expect_str(a, "OK", "SET ptls-n 10");
    expect_str(a, "OK", "MULTI");
    expect_str(a, "QUEUED", "INCR ptls-n");
    /* another client's traffic meanwhile, on the shared connections */
    expect_str(b, "OK", "SET ptls-other x");
    expect_str(a, "QUEUED", "GET ptls-other");
    redisReply *r = redisCommand(a, "EXEC");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);
    assert_int_equal(r->element[0]->integer, 11);
    assert_string_equal(r->element[1]->str, "x");
    freeReplyObject(r);
    /* WATCH pins too; a write by another client aborts the transaction */
    expect_str(a, "OK", "WATCH ptls-n");
    expect_str(b, "OK", "SET ptls-n 99");
    expect_str(a, "OK", "MULTI");
    expect_str(a, "QUEUED", "INCR ptls-n");
    r = redisCommand(a, "EXEC");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_NIL);
    freeReplyObject(r);
    expect_str(a, "99", "GET ptls-n");
    redisFree(a);
    redisFree(b);
    /* given back clean: nothing stays pinned, at most N shared ones */
    assert_int_equal(th_metric_wait(admin_port, "sluice_pool_pinned_connections{listener=\"t\"}",
                                    0, TH_MS), 0);
    assert_true(pool_conns("t") <= 2);
}

#define MANY  40
#define DEPTH 25

/* Many clients at once, each a pipeline of SET and GET of its own keys:
 * each gets its own replies, over at most upstream_pool = 2 connections. */
static void test_many_clients(void **state)
{
    (void)state;
    long before = upstream_info("stats", "total_connections_received:");
    redisContext *c[MANY];
    for (int i = 0; i < MANY; i++)
        c[i] = conn(tport);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < MANY; i++)
            for (int j = 0; j < DEPTH; j++) {
                assert_int_equal(redisAppendCommand(c[i], "SET ptls-m%d-%d v%d-%d-%d", i, j, i, j,
                                                    round), REDIS_OK);
                assert_int_equal(redisAppendCommand(c[i], "GET ptls-m%d-%d", i, j), REDIS_OK);
            }
        /* every client's pipeline leaves before any reply is read */
        for (int i = 0; i < MANY; i++) {
            int done = 0;
            while (!done)
                assert_int_equal(redisBufferWrite(c[i], &done), REDIS_OK);
        }
        for (int i = 0; i < MANY; i++)
            for (int j = 0; j < DEPTH; j++) {
                redisReply *r = NULL;
                assert_int_equal(redisGetReply(c[i], (void **)&r), REDIS_OK);
                assert_string_equal(r->str, "OK");
                freeReplyObject(r);
                assert_int_equal(redisGetReply(c[i], (void **)&r), REDIS_OK);
                char want[64];
                snprintf(want, sizeof want, "v%d-%d-%d", i, j, round);
                assert_int_equal(r->type, REDIS_REPLY_STRING);
                assert_string_equal(r->str, want);
                freeReplyObject(r);
            }
    }
    double held = pool_conns("t");
    for (int i = 0; i < MANY; i++)
        redisFree(c[i]);
    assert_true(held >= 1 && held <= 2);
    /* the upstream saw at most two new connections (and this test's two
     * INFO connections), not one per client */
    long after = upstream_info("stats", "total_connections_received:");
    assert_true(after - before <= 2 + 2);
}

/* A reply that fails in a way the client can read, within TH_MS: the
 * pooled engine's error for a lost connection (its requests may not run),
 * never a hang. */
static void expect_lost(int port, const char *l)
{
    redisContext *c = conn(port);
    uint64_t t0 = th_now_ms();
    expect_str(c, "ERR sluice: upstream connection lost", "GET ptls-k");
    /* the next request tries a new connection, and fails the same way */
    expect_str(c, "ERR sluice: upstream connection lost", "SET ptls-k nope");
    assert_true(th_now_ms() - t0 < TH_MS);
    /* a pinning request: the client's own connection fails, the client is
     * closed (as on a 1:1 listener), at once */
    redisReply *r = redisCommand(c, "MULTI");
    if (r != NULL) {
        assert_int_equal(r->type, REDIS_REPLY_ERROR);
        freeReplyObject(r);
    }
    redisFree(c);
    char sample[128];
    snprintf(sample, sizeof sample, "sluice_pool_upstream_failures_total{listener=\"%s\"}", l);
    assert_true(th_metric(admin_port, sample) >= 2);
    assert_int_equal(wait_conns(l, 0), 0);
}

/* The upstream's certificate does not lead to upstream_tls_ca: refused, as
 * on a 1:1 listener; nothing of the client's ran. */
static void test_bad_ca(void **state)
{
    (void)state;
    expect_lost(bport, "b");
    redisContext *c = conn(tport);
    expect_str(c, "hello", "GET ptls-k"); /* the SET over b never ran */
    redisFree(c);
}

/* The certificate does not name upstream_tls_sni: refused. */
static void test_wrong_name(void **state)
{
    (void)state;
    expect_lost(wport, "w");
}

/* No client certificate, and the upstream asks for one: refused by Redis
 * (under TLS 1.3 after sluice's side of the handshake is done). */
static void test_no_client_cert(void **state)
{
    (void)state;
    expect_lost(nport, "n");
}

/* upstream_pool_idle_timeout = 200ms: a shared connection with nothing
 * owed closes once idle (polled: the connection count drops to 0), and the
 * next request opens a new one. A connection whose reply takes longer than
 * the timeout is not idle and is not closed under it. */
static void test_idle_timeout(void **state)
{
    (void)state;
    redisContext *c = conn(iport);
    expect_str(c, "OK", "SET ptls-idle 1");
    assert_int_equal(wait_conns("i", 0), 0);
    long clients = upstream_info("clients", "connected_clients:");
    expect_str(c, "2", "INCR ptls-idle"); /* a new connection, the client unaware */
    assert_true(pool_conns("i") == 1);
    assert_int_equal(wait_conns("i", 0), 0);
    /* Redis saw the connection go, too (its count polled back down) */
    long now = -1;
    for (uint64_t end = th_now_ms() + TH_MS; th_now_ms() < end; usleep(10000))
        if ((now = upstream_info("clients", "connected_clients:")) <= clients)
            break;
    assert_true(now <= clients);
    assert_true(th_metric(admin_port, "sluice_pool_idle_closed_total{listener=\"i\"}") >= 2);
    /* the second connection resumed the first one's TLS session */
    assert_true(th_metric(admin_port, "sluice_upstream_tls_resumed_total{listener=\"i\"}") >= 1);
    /* the busy listener t's connections were idle far less than 60 s */
    assert_int_equal(th_metric(admin_port, "sluice_pool_idle_closed_total{listener=\"t\"}"), 0);
    /* a script busy for 600 ms (3 timeouts) on a shared connection: its
     * reply is owed all along, so the connection is not idle */
    expect_str(c, "done",
               "EVAL %s 0",
               "local t = redis.call('TIME') "
               "local s = t[1] * 1000000 + t[2] "
               "while true do "
               "  local n = redis.call('TIME') "
               "  if n[1] * 1000000 + n[2] - s > 600000 then break end "
               "end return 'done'");
    expect_str(c, "3", "INCR ptls-idle");
    redisFree(c);
}

/* A reload gives listener b the right CA: its engine (made by test_bad_ca)
 * opens its next connection with the new context and serves; listener t's
 * open connections are untouched. */
static void test_reload_ca(void **state)
{
    (void)state;
    char ini[8192], tmp[300];
    conf_text(ini, sizeof ini, "ca.pem");
    snprintf(tmp, sizeof tmp, "%s.new", sluice_p.conf);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    assert_true(fputs(ini, f) >= 0);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(rename(tmp, sluice_p.conf), 0);
    int before = th_log_count(sluice_p.log, "msg=reloaded");
    assert_int_equal(kill(sluice_p.pid, SIGHUP), 0);
    assert_int_equal(th_log_wait(sluice_p.log, "msg=reloaded", before + 1, TH_MS), 0);
    redisContext *c = conn(bport);
    expect_str(c, "hello", "GET ptls-k");
    redisFree(c);
    assert_true(pool_conns("b") >= 1);
    c = conn(tport);
    expect_str(c, "hello", "GET ptls-k");
    redisFree(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_set),
        cmocka_unit_test(test_multi_pinned),
        cmocka_unit_test(test_many_clients),
        cmocka_unit_test(test_bad_ca),
        cmocka_unit_test(test_wrong_name),
        cmocka_unit_test(test_no_client_cert),
        cmocka_unit_test(test_idle_timeout),
        cmocka_unit_test(test_reload_ca),
    };
    const char *only = getenv("POOL_TLS_ONLY");
    if (only != NULL && *only != '\0')
        cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

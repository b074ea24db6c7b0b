/* sluice integration tests — a reload (SIGHUP) reaches a running pooled
 * engine (`upstream_pool = N`, docs/resp.md "Pooled listeners", "A reload").
 *
 * New settings apply to new connections and new requests; a request already
 * sent is never cut or answered from elsewhere:
 * - a larger N opens more shared connections as the load asks;
 * - a smaller N closes the surplus once the replies owed on them are in,
 *   every client getting its own reply;
 * - upstream_pool_pinned raised grants pins at once, lowered keeps the ones
 *   held;
 * - upstream_pool_idle_timeout set closes idle shared connections;
 * - another upstream address: new requests go there at once (the old
 *   upstream stopped), a request in flight is answered by the old one, a
 *   transaction ends where it began, then no connection to the old one is
 *   left;
 * - `off` <-> N: a client keeps what it had when it connected; the engine
 *   of a listener switched to 1:1 goes once its pooled clients are gone.
 *
 * Upstream connections are counted on the upstream itself (CLIENT LIST),
 * polled with deadlines. To make the engine open a connection per request
 * without timing, the upstream is stopped (SIGSTOP): each request then stays
 * unanswered, and the test waits until the kernel holds its bytes on the
 * upstream's side (/proc/net/tcp's receive queue) before the next one.
 *
 * POOL_RELOAD_ONLY=<cmocka pattern> picks tests. */
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

#include "integration/harness.h"

/* One sluice in front of one or two Redis servers, its file rewritten by
 * each reload. */
struct rig {
    struct th_proc r1, r2, sl;
    int            port;    /* the pooled listener */
    int            reloads;
};

static void write_conf(struct rig *g, int upstream, const char *extra)
{
    char ini[1024], tmp[300];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin =\nshutdown_grace = 2s\nworkers = 1\n[store]\nurl = local\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n%s",
             g->port, upstream, extra);
    snprintf(tmp, sizeof(tmp), "%s.new", g->sl.conf);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs(ini, f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(rename(tmp, g->sl.conf), 0);
}

static void rig_start(struct rig *g, int two, const char *extra)
{
    memset(g, 0, sizeof(*g));
    assert_int_equal(th_redis_start(&g->r1, NULL), 0);
    if (two)
        assert_int_equal(th_redis_start(&g->r2, NULL), 0);
    g->port = th_free_port();
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin =\nshutdown_grace = 2s\nworkers = 1\n[store]\nurl = local\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n%s",
             g->port, g->r1.port, extra);
    assert_int_equal(th_sluice_start(&g->sl, ini, g->port), 0);
}

/* Writes the file anew and reloads; waits until the reload is logged. */
static void reload(struct rig *g, int upstream, const char *extra)
{
    write_conf(g, upstream, extra);
    assert_int_equal(kill(g->sl.pid, SIGHUP), 0);
    g->reloads++;
    assert_int_equal(th_log_wait(g->sl.log, "msg=reloaded ", g->reloads, TH_MS), 0);
    assert_int_equal(th_log_count(g->sl.log, "reload failed"), 0);
}

static void rig_stop(struct rig *g)
{
    if (g->r1.pid > 0)
        kill(g->r1.pid, SIGCONT);
    if (g->r2.pid > 0)
        kill(g->r2.pid, SIGCONT);
    int st = th_stop(&g->sl);
    th_stop(&g->r1);
    if (g->r2.pid > 0)
        th_stop(&g->r2);
    th_kill_all();
    assert_int_equal(st, 0);
}

/* ---- what the upstream holds ------------------------------------------------- */

/* Connections to <port> other than the asking one (CLIENT LIST). */
static int upstream_conns(int port)
{
    char *r = th_redis_cmd(port, "CLIENT LIST");
    if (r == NULL)
        return -1;
    int n = 0;
    for (char *p = r; (p = strstr(p, "id=")) != NULL; p += 3)
        n++;
    n -= strstr(r, "cmd=client|list") != NULL;
    free(r);
    return n;
}

/* Waits until <port> has exactly <want> other connections: 0, or -1 (the
 * last count said). */
static int conns_wait(int port, int want)
{
    int n = -1;
    for (uint64_t end = th_now_ms() + TH_MS; th_now_ms() < end; usleep(20 * 1000))
        if ((n = upstream_conns(port)) == want)
            return 0;
    print_error("upstream %d: %d connections, not %d\n", port, n, want);
    return -1;
}

/* Established TCP sockets whose local port is <port> (the upstream's side)
 * with bytes the upstream has not read (it is stopped). */
static int held(int port)
{
    int n = 0;
    const char *files[] = { "/proc/net/tcp", "/proc/net/tcp6" };
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(files[i], "r");
        if (f == NULL)
            continue;
        char line[512];
        while (fgets(line, sizeof(line), f) != NULL) {
            char local[128], remote[128];
            unsigned st, tx, rx;
            if (sscanf(line, " %*d: %127s %127s %x %x:%x", local, remote, &st, &tx, &rx) != 5)
                continue;
            const char *colon = strrchr(local, ':');
            if (colon != NULL && strtol(colon + 1, NULL, 16) == port && st == 1 && rx > 0)
                n++;
        }
        fclose(f);
    }
    return n;
}

static int held_wait(int port, int want)
{
    int n = -1;
    for (uint64_t end = th_now_ms() + TH_MS; th_now_ms() < end; usleep(10 * 1000))
        if ((n = held(port)) == want)
            return 0;
    print_error("upstream %d: %d connections hold unread requests, not %d\n", port, n, want);
    return -1;
}

/* Stops <pid> (SIGSTOP) and waits until it is stopped: the signal is
 * delivered asynchronously, and a Redis still running could answer the
 * request the test means it to hold. */
static void stop(pid_t pid)
{
    assert_int_equal(kill(pid, SIGSTOP), 0);
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    for (uint64_t end = th_now_ms() + TH_MS; th_now_ms() < end; usleep(1000)) {
        char *st = th_slurp(path);
        const char *rp = st != NULL ? strrchr(st, ')') : NULL; /* the name may hold spaces */
        int stopped = rp != NULL && (rp[2] == 'T' || rp[2] == 't');
        free(st);
        if (stopped)
            return;
    }
    fail_msg("process %d did not stop", (int)pid);
}

/* ---- clients -------------------------------------------------------------------- */

static void send_cmd(struct th_conn *c, const char *a, const char *b)
{
    char buf[256];
    if (b != NULL)
        snprintf(buf, sizeof(buf), "*2\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n", strlen(a), a,
                 strlen(b), b);
    else
        snprintf(buf, sizeof(buf), "*1\r\n$%zu\r\n%s\r\n", strlen(a), a);
    assert_int_equal(th_conn_send(c, buf), 0);
}

/* The next reply of <c> must be <want>. */
static void expect(struct th_conn *c, const char *want)
{
    char *r = th_conn_reply(c, TH_MS);
    if (r == NULL || strcmp(r, want) != 0) {
        print_error("wanted %s", want);
        if (r != NULL)
            th_dump("got", r, strlen(r));
        else
            print_error("got nothing\n");
    }
    assert_non_null(r);
    assert_string_equal(r, want);
    free(r);
}

static void cmd_expect(struct th_conn *c, const char *a, const char *b, const char *want)
{
    send_cmd(c, a, b);
    expect(c, want);
}

static void open_client(struct th_conn *c, int port)
{
    assert_int_equal(th_conn_open(c, port), 0);
}

static void redis_set(int port, const char *k, const char *v)
{
    char line[128];
    snprintf(line, sizeof(line), "SET %s %s", k, v);
    char *r = th_redis_cmd(port, line);
    assert_non_null(r);
    assert_string_equal(r, "+OK\r\n");
    free(r);
}

/* "$LEN\r\nV\r\n" */
static const char *bulk(char *buf, size_t cap, const char *v)
{
    snprintf(buf, cap, "$%zu\r\n%s\r\n", strlen(v), v);
    return buf;
}

/* With the upstream <up> stopped, clients c[0..n) each send GET of their
 * own key, one after the other once the previous request is held by the
 * upstream's kernel on connection number <first> + i: each of them on a
 * connection of its own. */
static void spread(struct th_conn *c, int n, int up, int first)
{
    for (int i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof(key), "k%d", i);
        send_cmd(&c[i], "GET", key);
        assert_int_equal(held_wait(up, first + i + 1), 0);
    }
}

/* Each client c[0..n) gets the value of its own key, "v<i>". */
static void answers(struct th_conn *c, int n)
{
    for (int i = 0; i < n; i++) {
        char v[32], want[64];
        snprintf(v, sizeof(v), "v%d", i);
        expect(&c[i], bulk(want, sizeof(want), v));
    }
}

static void keys(int up, int n, const char *prefix)
{
    for (int i = 0; i < n; i++) {
        char k[32], v[32];
        snprintf(k, sizeof(k), "k%d", i);
        snprintf(v, sizeof(v), "%s%d", prefix, i);
        redis_set(up, k, v);
    }
}

/* ---- tests ------------------------------------------------------------------------- */

/* N 1 -> 3: three clients busy at once get three connections. */
static void test_grow(void **state)
{
    (void)state;
    struct rig g;
    rig_start(&g, 0, "upstream_pool = 1\n");
    keys(g.r1.port, 3, "v");
    struct th_conn c[3];
    for (int i = 0; i < 3; i++)
        open_client(&c[i], g.port);
    cmd_expect(&c[0], "PING", NULL, "+PONG\r\n");
    assert_int_equal(conns_wait(g.r1.port, 1), 0);
    reload(&g, g.r1.port, "upstream_pool = 3\n");
    stop(g.r1.pid);
    spread(c, 3, g.r1.port, 0);
    kill(g.r1.pid, SIGCONT);
    answers(c, 3);
    assert_int_equal(conns_wait(g.r1.port, 3), 0);
    for (int i = 0; i < 3; i++)
        th_conn_close(&c[i]);
    rig_stop(&g);
}

/* N 4 -> 1 while a request is in flight on each of the four: every client
 * gets its own reply, then three connections close; new load stays on one. */
static void test_shrink(void **state)
{
    (void)state;
    struct rig g;
    rig_start(&g, 0, "upstream_pool = 4\n");
    keys(g.r1.port, 4, "v");
    struct th_conn c[4];
    for (int i = 0; i < 4; i++)
        open_client(&c[i], g.port);
    stop(g.r1.pid);
    spread(c, 4, g.r1.port, 0);
    reload(&g, g.r1.port, "upstream_pool = 1\n");
    kill(g.r1.pid, SIGCONT);
    answers(c, 4);
    assert_int_equal(conns_wait(g.r1.port, 1), 0);
    /* All four busy again at once: one connection serves them. */
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 4; i++) {
            char key[32];
            snprintf(key, sizeof(key), "k%d", i);
            send_cmd(&c[i], "GET", key);
        }
        answers(c, 4);
    }
    assert_int_equal(upstream_conns(g.r1.port), 1);
    /* Idle ones close at once. */
    reload(&g, g.r1.port, "upstream_pool = 3\n");
    stop(g.r1.pid);
    spread(c, 3, g.r1.port, 0);
    kill(g.r1.pid, SIGCONT);
    answers(c, 3);
    assert_int_equal(conns_wait(g.r1.port, 3), 0);
    reload(&g, g.r1.port, "upstream_pool = 2\n");
    assert_int_equal(conns_wait(g.r1.port, 2), 0);
    for (int i = 0; i < 4; i++)
        th_conn_close(&c[i]);
    rig_stop(&g);
}

#define TOO_MANY "-ERR sluice: too many clients hold an upstream connection of their own"

static void expect_prefix(struct th_conn *c, const char *prefix)
{
    char *r = th_conn_reply(c, TH_MS);
    assert_non_null(r);
    if (strncmp(r, prefix, strlen(prefix)) != 0)
        th_dump("got", r, strlen(r));
    assert_memory_equal(r, prefix, strlen(prefix));
    free(r);
}

/* upstream_pool_pinned 1 -> 2 grants the second pin; 2 -> 1 keeps both held
 * and refuses a third until one is given back. */
static void test_pin_cap(void **state)
{
    (void)state;
    struct rig g;
    rig_start(&g, 0,
              "upstream_pool = 1\nupstream_pool_pinned = 1\nupstream_pool_pin_wait = 0\n");
    struct th_conn a, b, c;
    open_client(&a, g.port);
    open_client(&b, g.port);
    open_client(&c, g.port);
    cmd_expect(&a, "MULTI", NULL, "+OK\r\n");
    send_cmd(&b, "MULTI", NULL);
    expect_prefix(&b, TOO_MANY);
    reload(&g, g.r1.port,
           "upstream_pool = 1\nupstream_pool_pinned = 2\nupstream_pool_pin_wait = 0\n");
    cmd_expect(&b, "MULTI", NULL, "+OK\r\n");
    cmd_expect(&a, "INCR", "pa", "+QUEUED\r\n");
    cmd_expect(&b, "INCR", "pb", "+QUEUED\r\n");
    reload(&g, g.r1.port,
           "upstream_pool = 1\nupstream_pool_pinned = 1\nupstream_pool_pin_wait = 0\n");
    send_cmd(&c, "MULTI", NULL);
    expect_prefix(&c, TOO_MANY);
    cmd_expect(&a, "EXEC", NULL, "*1\r\n:1\r\n");
    send_cmd(&c, "MULTI", NULL); /* b still holds the only place */
    expect_prefix(&c, TOO_MANY);
    cmd_expect(&b, "EXEC", NULL, "*1\r\n:1\r\n");
    cmd_expect(&c, "MULTI", NULL, "+OK\r\n");
    cmd_expect(&c, "EXEC", NULL, "*0\r\n");
    th_conn_close(&a);
    th_conn_close(&b);
    th_conn_close(&c);
    rig_stop(&g);
}

/* upstream_pool_idle_timeout 0 (never) -> 200ms: idle shared connections go. */
static void test_idle_timeout(void **state)
{
    (void)state;
    struct rig g;
    rig_start(&g, 0, "upstream_pool = 2\nupstream_pool_idle_timeout = 0\n");
    keys(g.r1.port, 2, "v");
    struct th_conn c[2];
    for (int i = 0; i < 2; i++)
        open_client(&c[i], g.port);
    stop(g.r1.pid);
    spread(c, 2, g.r1.port, 0);
    kill(g.r1.pid, SIGCONT);
    answers(c, 2);
    assert_int_equal(conns_wait(g.r1.port, 2), 0);
    reload(&g, g.r1.port, "upstream_pool = 2\nupstream_pool_idle_timeout = 200ms\n");
    assert_int_equal(conns_wait(g.r1.port, 0), 0);
    /* the clients are still served, on a new connection */
    cmd_expect(&c[0], "GET", "k1", "$2\r\nv1\r\n");
    for (int i = 0; i < 2; i++)
        th_conn_close(&c[i]);
    rig_stop(&g);
}

/* Another upstream address: the old upstream stopped with a request in
 * flight on it and a transaction open there; after the reload new requests
 * are answered by the new one at once, the request in flight by the old one
 * (once it runs again), the transaction runs where it began, and then no
 * connection to the old upstream is left. */
static void test_address(void **state)
{
    (void)state;
    struct rig g;
    rig_start(&g, 1, "upstream_pool = 2\n");
    keys(g.r1.port, 3, "old");
    keys(g.r2.port, 3, "new");
    struct th_conn idle, busy, tx, fresh;
    open_client(&idle, g.port);
    open_client(&busy, g.port);
    open_client(&tx, g.port);
    cmd_expect(&idle, "GET", "k0", "$4\r\nold0\r\n");
    cmd_expect(&tx, "MULTI", NULL, "+OK\r\n");
    cmd_expect(&tx, "INCR", "t", "+QUEUED\r\n");
    stop(g.r1.pid);
    send_cmd(&busy, "GET", "k1");
    assert_int_equal(held_wait(g.r1.port, 1), 0);
    reload(&g, g.r2.port, "upstream_pool = 2\n");
    /* the old upstream is still stopped: these are answered by the new one */
    cmd_expect(&idle, "GET", "k0", "$4\r\nnew0\r\n");
    open_client(&fresh, g.port);
    cmd_expect(&fresh, "GET", "k2", "$4\r\nnew2\r\n");
    kill(g.r1.pid, SIGCONT);
    expect(&busy, "$4\r\nold1\r\n");
    cmd_expect(&busy, "GET", "k1", "$4\r\nnew1\r\n");
    cmd_expect(&tx, "EXEC", NULL, "*1\r\n:1\r\n");
    char *r = th_redis_cmd(g.r1.port, "GET t");
    assert_non_null(r);
    assert_string_equal(r, "$1\r\n1\r\n");
    free(r);
    r = th_redis_cmd(g.r2.port, "EXISTS t");
    assert_non_null(r);
    assert_string_equal(r, ":0\r\n");
    free(r);
    cmd_expect(&tx, "GET", "k2", "$4\r\nnew2\r\n");
    assert_int_equal(conns_wait(g.r1.port, 0), 0);
    th_conn_close(&idle);
    th_conn_close(&busy);
    th_conn_close(&tx);
    th_conn_close(&fresh);
    rig_stop(&g);
}

/* `off` -> N -> `off`: a client keeps what it had when it connected (its
 * own connection, or the pool); the pool's connection goes once the pooled
 * clients are gone. */
static void test_off_and_on(void **state)
{
    (void)state;
    struct rig g;
    rig_start(&g, 0, "upstream_pool = off\n");
    keys(g.r1.port, 3, "v");
    struct th_conn own, q[3], late;
    open_client(&own, g.port);
    cmd_expect(&own, "GET", "k0", "$2\r\nv0\r\n");
    assert_int_equal(conns_wait(g.r1.port, 1), 0);
    reload(&g, g.r1.port, "upstream_pool = 1\n");
    for (int i = 0; i < 3; i++) {
        open_client(&q[i], g.port);
        cmd_expect(&q[i], "GET", "k1", "$2\r\nv1\r\n");
    }
    cmd_expect(&own, "GET", "k2", "$2\r\nv2\r\n");
    assert_int_equal(conns_wait(g.r1.port, 2), 0); /* its own + the pool's one */
    /* the 1:1 client keeps its own connection: a SELECT stays its own */
    cmd_expect(&own, "SELECT", "5", "+OK\r\n");
    cmd_expect(&own, "GET", "k0", "$-1\r\n");
    reload(&g, g.r1.port, "upstream_pool = off\n");
    for (int i = 0; i < 3; i++)
        cmd_expect(&q[i], "GET", "k2", "$2\r\nv2\r\n");
    open_client(&late, g.port);
    cmd_expect(&late, "GET", "k0", "$2\r\nv0\r\n");
    assert_int_equal(conns_wait(g.r1.port, 3), 0); /* own, the pool's, late's */
    for (int i = 0; i < 3; i++)
        th_conn_close(&q[i]);
    assert_int_equal(conns_wait(g.r1.port, 2), 0); /* own, late's */
    cmd_expect(&own, "GET", "k0", "$-1\r\n");
    cmd_expect(&late, "GET", "k1", "$2\r\nv1\r\n");
    th_conn_close(&own);
    th_conn_close(&late);
    rig_stop(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grow),         cmocka_unit_test(test_shrink),
        cmocka_unit_test(test_pin_cap),      cmocka_unit_test(test_idle_timeout),
        cmocka_unit_test(test_address),      cmocka_unit_test(test_off_and_on),
    };
    const char *only = getenv("POOL_RELOAD_ONLY");
    if (only != NULL && *only)
        cmocka_set_test_filter(only);
    return th_finish(cmocka_run_group_tests(tests, NULL, NULL));
}

/* sluice integration tests — listener limits: max_connections,
 * idle_timeout, an upstream that is not there.
 *
 * One redis-server and one sluice with three resp listeners are shared:
 *   m  max_connections = 3
 *   i  idle_timeout = 1s
 *   u  upstream = a free port where nothing listens
 *   c  upstream = a socket that listens with a full backlog and never
 *      accepts (connects hang), connect_timeout = 500ms
 *   w  a request limit on `commands = @write` (2 a day per client) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "integration/harness.h"

static struct th_proc redis_p, sluice_p;
static int mport, iport, uport, cport, wport;
static int hole_fd = -1, fillers[3] = { -1, -1, -1 };

/* A listening socket with backlog 0 whose queue is filled by a connection
 * nobody accepts: further SYNs are dropped, so connects hang. Returns its
 * port or -1. */
static int blackhole(void)
{
    hole_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof(a);
    if (bind(hole_fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(hole_fd, 0) < 0 ||
        getsockname(hole_fd, (struct sockaddr *)&a, &al) < 0)
        return -1;
    int port = ntohs(a.sin_port);
    for (int i = 0; i < 3; i++) {
        fillers[i] = socket(AF_INET, SOCK_STREAM, 0);
        th_nonblock(fillers[i]);
        connect(fillers[i], (struct sockaddr *)&a, sizeof(a));
    }
    return port;
}

static int group_setup(void **state)
{
    (void)state;
    if (th_redis_start(&redis_p, NULL) < 0)
        return -1;
    mport = th_free_port();
    iport = th_free_port();
    uport = th_free_port();
    cport = th_free_port();
    wport = th_free_port();
    int nothing = th_free_port();
    int hole = blackhole();
    if (hole < 0)
        return -1;
    char ini[2048];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin =\nshutdown_grace = 2s\n[store]\nurl = local\n"
             "[listener m]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nmax_connections = 3\n"
             "[listener i]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nidle_timeout = 1s\n"
             "[listener u]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nconnect_timeout = 2s\n"
             "[listener c]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "connect_timeout = 500ms\n"
             "[listener w]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "[limit writes]\nlistener = w\nrate = 1/d\nburst = 2\ncommands = @write\n",
             mport, redis_p.port, iport, redis_p.port, uport, nothing, cport, hole, wport,
             redis_p.port);
    if (th_sluice_start(&sluice_p, ini, uport) < 0) {
        th_stop(&redis_p);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    int st = th_stop(&sluice_p);
    th_stop(&redis_p);
    th_kill_all();
    for (int i = 0; i < 3; i++)
        if (fillers[i] >= 0)
            close(fillers[i]);
    if (hole_fd >= 0)
        close(hole_fd);
    if (st != 0) {
        fprintf(stderr, "sluice did not exit cleanly (status %d)\n", st);
        return -1;
    }
    return 0;
}

static int check_alive(void **state)
{
    (void)state;
    return th_alive_or_report(&sluice_p);
}

static int ping_conn(int port)
{
    int fd = th_connect(port);
    assert_true(fd >= 0);
    TH_SEND(fd, "PING\r\n");
    TH_EXPECT(fd, "+PONG\r\n");
    return fd;
}

/* ---- 12. max_connections -------------------------------------------------- */

/* A new connection until it is accepted (a closed one is counted off when
 * sluice notices the close): returns it, answering PING, or -1. */
static int connect_when_room(int port, int ms)
{
    uint64_t end = th_now_ms() + (uint64_t)ms;
    while (th_now_ms() < end) {
        int fd = th_connect(port);
        if (fd < 0)
            return -1;
        char buf[64] = { 0 };
        if (th_write_all(fd, "PING\r\n", 6) == 0 && th_read_n(fd, buf, 7, 2000) == 7 &&
            memcmp(buf, "+PONG\r\n", 7) == 0)
            return fd;
        close(fd);
        usleep(20000);
    }
    return -1;
}

static void test_max_connections(void **state)
{
    (void)state;
    int fds[3];
    for (int i = 0; i < 3; i++)
        fds[i] = ping_conn(mport);

    /* The 4th: told why, then closed; even if it sends a command first. */
    int f4 = th_connect(mport);
    assert_true(f4 >= 0);
    TH_EXPECT_CLOSE(f4, "-ERR max number of clients reached\r\n");
    close(f4);
    f4 = th_connect(mport);
    assert_true(f4 >= 0);
    TH_SEND(f4, "PING\r\n");
    TH_EXPECT_CLOSE(f4, "-ERR max number of clients reached\r\n");
    close(f4);

    /* The three still work. */
    for (int i = 0; i < 3; i++) {
        TH_SEND(fds[i], "ECHO still\r\n");
        TH_EXPECT(fds[i], "$5\r\nstill\r\n");
    }

    /* One goes: a new one is accepted, and then the limit holds again. */
    close(fds[0]);
    fds[0] = connect_when_room(mport, TH_MS);
    assert_true(fds[0] >= 0);
    f4 = th_connect(mport);
    assert_true(f4 >= 0);
    TH_EXPECT_CLOSE(f4, "-ERR max number of clients reached\r\n");
    close(f4);

    for (int i = 0; i < 3; i++)
        close(fds[i]);
}

/* Refused connections do not use up the limit. */
static void test_max_connections_refusals_do_not_leak(void **state)
{
    (void)state;
    int fds[3];
    for (int i = 0; i < 3; i++)
        fds[i] = connect_when_room(mport, TH_MS);
    for (int i = 0; i < 3; i++)
        assert_true(fds[i] >= 0);
    for (int k = 0; k < 20; k++) {
        int f = th_connect(mport);
        assert_true(f >= 0);
        TH_EXPECT_CLOSE(f, "-ERR max number of clients reached\r\n");
        close(f);
    }
    for (int i = 0; i < 3; i++)
        close(fds[i]);
    for (int i = 0; i < 3; i++) {
        fds[i] = connect_when_room(mport, TH_MS);
        assert_true(fds[i] >= 0);
    }
    for (int i = 0; i < 3; i++)
        close(fds[i]);
}

/* ---- 13. idle_timeout ------------------------------------------------------- */

/* An idle connection is closed after about 1 s; one blocked in BLPOP k 0 and
 * one subscribed are not, for 3 s and more. */
static void test_idle_timeout(void **state)
{
    (void)state;
    redisContext *o = redisConnect("127.0.0.1", redis_p.port);
    assert_non_null(o);
    assert_int_equal(o->err, 0);
    struct timeval tv = { 10, 0 };
    redisSetTimeout(o, tv);
    freeReplyObject(redisCommand(o, "DEL idle:k"));

    int blocked = ping_conn(iport);
    int sub = ping_conn(iport);
    TH_SEND(blocked, "BLPOP idle:k 0\r\n");
    TH_SEND(sub, "SUBSCRIBE idle:ch\r\n");
    TH_EXPECT(sub, "*3\r\n$9\r\nsubscribe\r\n$7\r\nidle:ch\r\n:1\r\n");
    assert_int_equal(th_redis_wait_info(redis_p.port, "blocked_clients", 1, TH_MS), 0);

    uint64_t t0 = th_now_ms();
    int idle = ping_conn(iport);
    assert_int_equal(th_wait_eof(idle, 6000), 1);
    uint64_t took = th_now_ms() - t0;
    assert_true(took >= 900);  /* not at once */
    assert_true(took <= 4000); /* 1 s, swept once a second, plus slack */
    close(idle);

    /* Until 3.5 s have passed, the other two see nothing (no close). */
    uint64_t until = t0 + 3500, now = th_now_ms();
    if (now < until) {
        assert_true(th_quiet(blocked, (int)(until - now)));
        assert_true(th_quiet(sub, 10));
    }

    /* And they are still served. */
    redisReply *r = redisCommand(o, "LPUSH idle:k v");
    assert_non_null(r);
    freeReplyObject(r);
    TH_EXPECT(blocked, "*2\r\n$6\r\nidle:k\r\n$1\r\nv\r\n");
    r = redisCommand(o, "PUBLISH idle:ch m");
    assert_non_null(r);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    TH_EXPECT(sub, "*3\r\n$7\r\nmessage\r\n$7\r\nidle:ch\r\n$1\r\nm\r\n");

    /* No longer blocked: now it is idle like any other. */
    t0 = th_now_ms();
    assert_int_equal(th_wait_eof(blocked, 6000), 1);
    assert_true(th_now_ms() - t0 <= 4000);
    close(blocked);
    close(sub);
    redisFree(o);
}

/* Activity resets the clock: a connection used every 400 ms for 3 s stays. */
static void test_idle_timeout_reset_by_activity(void **state)
{
    (void)state;
    int fd = ping_conn(iport);
    uint64_t end = th_now_ms() + 3000;
    while (th_now_ms() < end) {
        assert_true(th_quiet(fd, 400)); /* no EOF meanwhile */
        TH_SEND(fd, "PING\r\n");
        TH_EXPECT(fd, "+PONG\r\n");
    }
    close(fd);
}

/* A client that unsubscribed from everything is an ordinary client again:
 * Redis's own timeout closes it (checked here with a redis-server started
 * with --timeout 1), and sluice's idle_timeout must too. */
static void test_idle_after_unsubscribe(void **state)
{
    (void)state;
    struct th_proc r2;
    assert_int_equal(th_redis_start(&r2, "--timeout", "1", NULL), 0);
    int ports[2] = { r2.port, iport };
    int closed[2] = { 0, 0 };
    for (int i = 0; i < 2; i++) {
        int fd = th_connect(ports[i]);
        if (fd < 0)
            break;
        uint64_t t0 = th_now_ms();
        static const char in[] = "SUBSCRIBE idle:u\r\nUNSUBSCRIBE idle:u\r\n";
        th_write_all(fd, in, sizeof(in) - 1);
        static const char want[] = "*3\r\n$9\r\nsubscribe\r\n$6\r\nidle:u\r\n:1\r\n"
                                   "*3\r\n$11\r\nunsubscribe\r\n$6\r\nidle:u\r\n:0\r\n";
        if (th_expect(fd, want, sizeof(want) - 1, TH_MS) == 0) {
            closed[i] = th_wait_eof(fd, 4500);
            fprintf(stderr, "%s: %s after %llu ms\n", i ? "through sluice" : "redis directly",
                    closed[i] ? "closed" : "still open", (unsigned long long)(th_now_ms() - t0));
        }
        close(fd);
    }
    th_stop(&r2);
    assert_true(closed[0]); /* Redis: idle again, closed by its timeout */
    assert_true(closed[1]); /* sluice: the same */
}

/* ---- 14. upstream unavailable --------------------------------------------- */

static void test_upstream_unavailable(void **state)
{
    (void)state;
    int fd = th_connect(uport);
    assert_true(fd >= 0);
    TH_EXPECT_CLOSE(fd, "-ERR upstream unavailable\r\n");
    close(fd);
    /* With requests already sent: still only the error (none is answered). */
    fd = th_connect(uport);
    assert_true(fd >= 0);
    TH_SEND(fd, "PING\r\nSET a b\r\n");
    TH_EXPECT_CLOSE(fd, "-ERR upstream unavailable\r\n");
    close(fd);
    /* hiredis sees it as the error reply to its command. */
    struct timeval tv = { 10, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", uport, tv);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    redisSetTimeout(c, tv);
    redisReply *r = redisCommand(c, "PING");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_string_equal(r->str, "ERR upstream unavailable");
    freeReplyObject(r);
    redisFree(c);
    /* The other listeners are unaffected. */
    close(ping_conn(mport));
}

/* An upstream that does not answer the connect: after connect_timeout
 * (500 ms; sluice checks once a second) the client is told. */
static void test_upstream_connect_timeout(void **state)
{
    (void)state;
    uint64_t t0 = th_now_ms();
    int fd = th_connect(cport);
    assert_true(fd >= 0);
    TH_SEND(fd, "PING\r\n");
    TH_EXPECT_CLOSE(fd, "-ERR upstream unavailable\r\n");
    uint64_t took = th_now_ms() - t0;
    fprintf(stderr, "connect timeout reported after %llu ms\n", (unsigned long long)took);
    assert_true(took >= 450);
    assert_true(took <= 3500);
    close(fd);
    assert_true(th_log_count(sluice_p.log, "listener=c") >= 1);
}

/* ---- commands = @write -------------------------------------------------- */

/* A limit on @write takes INCRBY (what redis-py's incr() sends), which the
 * operator never listed, and leaves GET alone: categories come from Redis
 * 7's command table. */
static void test_write_category(void **state)
{
    (void)state;
    int fd = th_connect(wport);
    assert_true(fd >= 0);
    TH_SEND(fd, "DEL sl:cat\r\n");
    TH_EXPECT(fd, ":0\r\n");
    TH_SEND(fd, "INCRBY sl:cat 5\r\n");
    TH_EXPECT(fd, ":5\r\n");
    TH_SEND(fd, "INCRBY sl:cat 5\r\n");
    TH_EXPECT(fd, "-THROTTLED limit 'writes' exceeded for 'ip:127.0.0.1', retry in ");
    char rest[64] = { 0 };
    size_t n = 0;
    while (n < sizeof(rest) - 1 && th_read_n(fd, rest + n, 1, TH_MS) == 1 && rest[n] != '\n')
        n++;
    assert_true(n > 0 && rest[n] == '\n');
    for (int i = 0; i < 5; i++) { /* GET is @read: never limited here */
        TH_SEND(fd, "GET sl:cat\r\n");
        TH_EXPECT(fd, "$1\r\n5\r\n");
    }
    TH_SEND(fd, "SET sl:cat 7\r\n"); /* @write too */
    TH_EXPECT(fd, "-THROTTLED limit 'writes'");
    close(fd);
}

/* A flood of new key prefixes (identity = key_prefix, url = local) keeps
 * the in-process buckets at [store] max_identities and counts what it
 * evicts; the identities still limited are the recent ones. */
static void test_new_prefixes_bounded(void **state)
{
    (void)state;
    struct th_proc r, sl;
    memset(&r, 0, sizeof(r));
    memset(&sl, 0, sizeof(sl));
    assert_int_equal(th_redis_start(&r, NULL), 0);
    int port = th_free_port(), admin = th_free_port();
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\n"
             "[store]\nurl = local\nmax_identities = 100\n"
             "[listener p]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "identity = key_prefix\n"
             "[limit per-prefix]\nlistener = p\nrate = 1/m\nburst = 2\ncommands = SET\n",
             admin, port, r.port);
    assert_int_equal(th_sluice_start(&sl, ini, port), 0);
    redisContext *c = redisConnect("127.0.0.1", port);
    assert_true(c != NULL && c->err == 0);
    long rss0 = th_rss_kb(sl.pid);
    const int n = 20000;
    for (int base = 0; base < n; base += 1000) {
        for (int i = base; i < base + 1000; i++)
            redisAppendCommand(c, "SET p%d:k v", i);
        for (int i = base; i < base + 1000; i++) {
            redisReply *rep = NULL;
            assert_int_equal(redisGetReply(c, (void **)&rep), REDIS_OK);
            assert_int_equal(rep->type, REDIS_REPLY_STATUS); /* each prefix: its first SET */
            freeReplyObject(rep);
        }
    }
    long rss1 = th_rss_kb(sl.pid);
    double buckets = th_metric(admin, "sluice_limit_local_buckets{limit=\"per-prefix\"}");
    double evicted = th_metric(admin, "sluice_limit_evictions_total{limit=\"per-prefix\"}");
    printf("%d new prefixes, max_identities 100: %.0f buckets, %.0f evicted, RSS %ld -> %ld KiB\n",
           n, buckets, evicted, rss0, rss1);
    assert_true(buckets == 100);
    assert_true(evicted == n - 100);
    /* the most recent prefix kept its bucket (1 token left of 2) */
    redisReply *rep = redisCommand(c, "SET p%d:k v", n - 1);
    assert_int_equal(rep->type, REDIS_REPLY_STATUS);
    freeReplyObject(rep);
    rep = redisCommand(c, "SET p%d:k v", n - 1);
    assert_int_equal(rep->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(rep->str, "THROTTLED limit 'per-prefix'"));
    freeReplyObject(rep);
    redisFree(c);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_max_connections, check_alive),
        cmocka_unit_test_teardown(test_max_connections_refusals_do_not_leak, check_alive),
        cmocka_unit_test_teardown(test_idle_timeout, check_alive),
        cmocka_unit_test_teardown(test_idle_timeout_reset_by_activity, check_alive),
        cmocka_unit_test_teardown(test_idle_after_unsubscribe, check_alive),
        cmocka_unit_test_teardown(test_upstream_unavailable, check_alive),
        cmocka_unit_test_teardown(test_upstream_connect_timeout, check_alive),
        cmocka_unit_test_teardown(test_write_category, check_alive),
        cmocka_unit_test(test_new_prefixes_bounded),
    };
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

/* sluice integration tests — upstreams that fail.
 *
 * Each test starts its own processes (they get killed): a real redis-server,
 * fake upstreams forked from the test (each answers every request with a
 * fixed byte string and closes), and one sluice with a listener for each:
 *   h  fake: "$10\r\nhello" (half a reply), then close
 *   g  fake: "+OK\r\n" then garbage that is not RESP, then close
 *   r  the real Redis */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "integration/harness.h"

static const char HALF[] = "$10\r\nhello";
static const char GARBAGE[] = "+OK\r\n?what is this\r\n";

struct fx {
    struct th_proc redis, sluice;
    pid_t half, garbage;
    int hport, gport, rport; /* sluice's listeners */
};
static struct fx F;

/* Reads one request (until a line end, at most 5 s), answers <arg> (a
 * NUL-terminated string) and closes; for every connection, one at a time. */
static void serve_fixed(int lfd, void *arg)
{
    const char *answer = arg;
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            _exit(1);
        }
        char buf[4096];
        size_t got = 0;
        uint64_t end = th_now_ms() + 5000;
        while (got < sizeof(buf) - 1 && th_now_ms() < end) {
            struct pollfd pfd = { .fd = fd, .events = POLLIN };
            if (poll(&pfd, 1, 100) <= 0)
                continue;
            ssize_t n = read(fd, buf + got, sizeof(buf) - 1 - got);
            if (n <= 0)
                break;
            got += (size_t)n;
            buf[got] = '\0';
            if (strstr(buf, "\r\n") != NULL)
                break;
        }
        th_write_all(fd, answer, strlen(answer));
        close(fd);
    }
}

static int setup(void **state)
{
    (void)state;
    memset(&F, 0, sizeof(F));
    if (th_redis_start(&F.redis, NULL) < 0)
        return -1;
    int half_up = 0, garbage_up = 0;
    F.half = th_fork_server(&half_up, serve_fixed, (void *)HALF);
    F.garbage = th_fork_server(&garbage_up, serve_fixed, (void *)GARBAGE);
    if (F.half < 0 || F.garbage < 0)
        return -1;
    F.hport = th_free_port();
    F.gport = th_free_port();
    F.rport = th_free_port();
    char ini[2048];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin =\nshutdown_grace = 2s\n[store]\nurl = local\n"
             "[listener h]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "[listener g]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n",
             F.hport, half_up, F.gport, garbage_up, F.rport, F.redis.port);
    return th_sluice_start(&F.sluice, ini, F.rport);
}

static int teardown(void **state)
{
    (void)state;
    int rc = 0, st = 0;
    if (!th_running(&F.sluice, &st)) {
        fprintf(stderr, "sluice exited during the test (status %d)\n", st);
        rc = -1;
    } else if ((st = th_stop(&F.sluice)) != 0) {
        fprintf(stderr, "sluice did not exit cleanly (status %d)\n", st);
        rc = -1;
    }
    th_stop(&F.redis);
    th_kill_server(F.half);
    th_kill_server(F.garbage);
    th_kill_all();
    return rc;
}

static redisContext *hconn(int port)
{
    struct timeval tv = { 10, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    redisSetTimeout(c, tv);
    return c;
}

static void ping_ok(redisContext *c)
{
    redisReply *r = redisCommand(c, "PING");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    assert_string_equal(r->str, "PONG");
    freeReplyObject(r);
}

/* ---- 9. the upstream goes away ------------------------------------------------ */

/* The upstream closes in the middle of a reply: the client gets exactly the
 * bytes it sent, then EOF; other connections go on. */
static void test_upstream_closes_mid_reply(void **state)
{
    (void)state;
    redisContext *held = hconn(F.rport);
    ping_ok(held);
    for (int i = 0; i < 3; i++) {
        int fd = th_connect(F.hport);
        assert_true(fd >= 0);
        TH_SEND(fd, "GET k\r\n");
        TH_EXPECT_CLOSE(fd, "$10\r\nhello");
        close(fd);
        ping_ok(held);
    }
    /* Pipelined requests behind the cut reply change nothing. */
    int fd = th_connect(F.hport);
    assert_true(fd >= 0);
    TH_SEND(fd, "GET k\r\nGET l\r\nPING\r\n");
    TH_EXPECT_CLOSE(fd, "$10\r\nhello");
    close(fd);
    ping_ok(held);
    redisContext *fresh = hconn(F.rport);
    ping_ok(fresh);
    redisFree(fresh);
    redisFree(held);
}

/* The upstream sends something that is not RESP after a good reply: the good
 * reply is delivered, then the connection closes; sluice goes on. */
static void test_upstream_sends_garbage(void **state)
{
    (void)state;
    int fd = th_connect(F.gport);
    assert_true(fd >= 0);
    TH_SEND(fd, "GET k\r\n");
    TH_EXPECT_CLOSE(fd, "+OK\r\n");
    close(fd);
    redisContext *c = hconn(F.rport);
    ping_ok(c);
    redisFree(c);
}

/* Redis is killed (-9) while clients hold connections: they see the close
 * (the one blocked in BLPOP too); a new connection is told the upstream is
 * unavailable, then closed. */
static void test_upstream_killed(void **state)
{
    (void)state;
    int idle = th_connect(F.rport);
    int blocked = th_connect(F.rport);
    assert_true(idle >= 0);
    assert_true(blocked >= 0);
    TH_SEND(idle, "PING\r\n");
    TH_EXPECT(idle, "+PONG\r\n");
    TH_SEND(blocked, "BLPOP kill:q 0\r\n");
    assert_int_equal(th_redis_wait_info(F.redis.port, "blocked_clients", 1, TH_MS), 0);

    int st = th_signal_wait(&F.redis, SIGKILL, 5000);
    assert_true(st != -1);
    assert_true(WIFSIGNALED(st));

    assert_int_equal(th_wait_eof(idle, TH_MS), 1);
    assert_int_equal(th_wait_eof(blocked, TH_MS), 1);
    close(idle);
    close(blocked);

    for (int i = 0; i < 3; i++) {
        int fd = th_connect(F.rport);
        assert_true(fd >= 0);
        TH_SEND(fd, "PING\r\n");
        TH_EXPECT_CLOSE(fd, "-ERR upstream unavailable\r\n");
        close(fd);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_upstream_closes_mid_reply, setup, teardown),
        cmocka_unit_test_setup_teardown(test_upstream_sends_garbage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_upstream_killed, setup, teardown),
    };
    return th_finish(cmocka_run_group_tests(tests, NULL, NULL));
}

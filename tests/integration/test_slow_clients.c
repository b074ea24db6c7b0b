/* sluice integration tests — slow senders and readers.
 *
 * Clients that dribble a request a byte at a time keep idle_timeout from
 * expiring; header_timeout bounds the time from a request's first byte to
 * its head being whole. A client that never reads gets at most
 * max_replies_owed requests run upstream. Real redis-server and sluice on
 * loopback. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>

#include <cmocka.h>

#include "integration/harness.h"

#define SLOTS 20

static struct th_proc redis_p, sluice_p;
static int sport, aport;

static int group_setup(void **state)
{
    (void)state;
    char ini[1024];
    if (th_redis_start(&redis_p, NULL) != 0)
        return -1;
    sport = th_free_port();
    aport = th_free_port();
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\n[store]\nurl = local\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "idle_timeout = 300s\nheader_timeout = 1s\nmax_connections = %d\n"
             "max_replies_owed = 16\n",
             aport, sport, redis_p.port, SLOTS + 1);
    return th_sluice_start(&sluice_p, ini, sport);
}

static int group_teardown(void **state)
{
    (void)state;
    int rc = th_stop(&sluice_p);
    th_stop(&redis_p);
    return rc;
}

/* Every slot held by a sender that dribbles one byte every 200 ms: each is
 * closed once its request's head is 1 s old, and a new client is served. */
static void test_dribblers_are_closed(void **state)
{
    (void)state;
    static const char req[] = "*2\r\n$4\r\nECHO\r\n$40\r\n0123456789012345678901234567890123456789\r\n";
    int fd[SLOTS], closed[SLOTS] = { 0 }, nclosed = 0;
    for (int i = 0; i < SLOTS; i++) {
        fd[i] = th_connect(sport);
        assert_true(fd[i] >= 0);
    }
    uint64_t start = th_now_ms();
    for (size_t at = 0; at < sizeof(req) - 1 && nclosed < SLOTS; at++) {
        for (int i = 0; i < SLOTS; i++) {
            if (closed[i])
                continue;
            if (th_write_all(fd[i], req + at, 1) != 0 || th_wait_eof(fd[i], 0)) {
                closed[i] = 1;
                nclosed++;
            }
        }
        usleep(200000);
    }
    uint64_t took = th_now_ms() - start;
    for (int i = 0; i < SLOTS; i++) {
        if (!closed[i] && th_wait_eof(fd[i], 3000))
            closed[i] = 1, nclosed++;
        close(fd[i]);
    }
    print_message("%d of %d dribblers closed within %llu ms\n", nclosed, SLOTS, (unsigned long long)took);
    assert_int_equal(nclosed, SLOTS);
    assert_true(took < 5000); /* 70 bytes at 5 a second would take 14 s */
    assert_int_equal(th_metric(aport, "sluice_header_timeouts_total{listener=\"r\"}"), SLOTS);
    /* a normal client is served */
    int c = th_connect(sport);
    assert_true(c >= 0);
    assert_int_equal(th_write_all(c, "PING\r\n", 6), 0);
    assert_int_equal(th_expect(c, "+PONG\r\n", 7, TH_MS), 0);
    close(c);
}

/* A request that takes a while but finishes its head in time is served,
 * and so is a connection that idles between requests for longer than the
 * header timeout (idle_timeout governs that). */
static void test_slow_but_in_time(void **state)
{
    (void)state;
    int c = th_connect(sport);
    assert_true(c >= 0);
    assert_int_equal(th_write_all(c, "*2\r\n$4\r\nECHO\r\n", 14), 0);
    usleep(500000);
    assert_int_equal(th_write_all(c, "$2\r\nhi\r\n", 8), 0);
    assert_int_equal(th_expect(c, "$2\r\nhi\r\n", 8, TH_MS), 0);
    assert_true(th_quiet(c, 2500)); /* idle, not closed */
    assert_int_equal(th_write_all(c, "PING\r\n", 6), 0);
    assert_int_equal(th_expect(c, "+PONG\r\n", 7, TH_MS), 0);
    close(c);
}

/* A pipeline of 2000 GETs of a 100 kB value in one write, not read: once
 * the replies fill the sockets, Redis runs no more than max_replies_owed
 * more of them until the client reads (every request of a read went
 * upstream before, and Redis held the replies: 200 MB here), then all are
 * answered in order. */
static void test_replies_owed_cap(void **state)
{
    (void)state;
    enum { N = 2000, VAL = 100000 };
    char *set = malloc(VAL + 64);
    int hn = snprintf(set, 64, "*3\r\n$3\r\nSET\r\n$4\r\nowed\r\n$%d\r\n", VAL);
    memset(set + hn, 'v', VAL);
    memcpy(set + hn + VAL, "\r\n", 2);
    int c = th_connect(sport);
    assert_true(c >= 0);
    assert_int_equal(th_write_all(c, set, (size_t)hn + VAL + 2), 0);
    assert_int_equal(th_expect(c, "+OK\r\n", 5, TH_MS), 0);
    static char pipe[N * 16];
    size_t n = 0;
    for (int i = 0; i < N; i++)
        n += (size_t)snprintf(pipe + n, sizeof(pipe) - n, "GET owed\r\n");
    long before = th_redis_cmd_calls(redis_p.port, "get");
    assert_int_equal(th_write_all(c, pipe, n), 0);
    usleep(500000);
    long ran = th_redis_cmd_calls(redis_p.port, "get") - before;
    print_message("GETs run before the client read: %ld of %d\n", ran, N);
    /* 16 owed, plus what the socket buffers took (a few MB) */
    assert_true(ran >= 16 && ran < 200);
    char head[16];
    int rl = snprintf(head, sizeof(head), "$%d\r\n", VAL);
    for (int i = 0; i < N; i++) {
        assert_int_equal(th_expect(c, head, (size_t)rl, TH_MS), 0);
        assert_int_equal(th_expect(c, set + hn, VAL + 2, TH_MS), 0);
    }
    /* Exactly max_replies_owed in one read: framing stops at the cap with
     * nothing left unframed; once they are read, the client is read again
     * (it was never read again: a hang make check caught). */
    n = 0;
    for (int i = 0; i < 16; i++)
        n += (size_t)snprintf(pipe + n, sizeof(pipe) - n, "GET owed\r\n");
    assert_int_equal(th_write_all(c, pipe, n), 0);
    usleep(300000);
    for (int i = 0; i < 16; i++) {
        assert_int_equal(th_expect(c, head, (size_t)rl, TH_MS), 0);
        assert_int_equal(th_expect(c, set + hn, VAL + 2, TH_MS), 0);
    }
    assert_int_equal(th_write_all(c, "PING\r\n", 6), 0);
    assert_int_equal(th_expect(c, "+PONG\r\n", 7, TH_MS), 0);
    close(c);
    free(set);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* writes to a closed dribbler fail, not kill */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dribblers_are_closed),
        cmocka_unit_test(test_slow_but_in_time),
        cmocka_unit_test(test_replies_owed_cap),
    };
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

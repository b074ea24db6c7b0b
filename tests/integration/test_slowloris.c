/* sluice integration tests — header_timeout: slow senders cannot hold slots.
 *
 * Clients that dribble a request a byte at a time keep idle_timeout from
 * expiring; header_timeout bounds the time from a request's first byte to
 * its head being whole. Real redis-server and sluice on loopback. */
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
             "idle_timeout = 300s\nheader_timeout = 1s\nmax_connections = %d\n",
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

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* writes to a closed dribbler fail, not kill */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dribblers_are_closed),
        cmocka_unit_test(test_slow_but_in_time),
    };
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

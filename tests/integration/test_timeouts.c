/* sluice integration tests — timeouts keep to their setting (issue 21):
 * header_timeout (408), upstream_timeout (504) and idle_timeout (the
 * close) on an http listener.
 *
 * A timer swept once a second answered a 1 s header_timeout after 1-2 s.
 * Ten connections whose deadlines are 100 ms apart span a whole second,
 * so with such a sweep one of them is always late by 900 ms or more,
 * whatever the sweep's phase; with a timer armed for each deadline none
 * is late by more than the loop's latency. The bound asserted here (each
 * within 500 ms of its deadline) leaves a loaded machine its scheduling
 * delays; the deadline arithmetic itself is tested exactly, with a fake
 * clock, in tests/unit/net/test_due.c and tests/unit/core/test_tq.c. */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "integration/harness.h"

#define N        10
#define SPACE_MS 100
#define LATE_MS  500 /* generous: a busy scheduler's delays, not the timer's */

static struct th_proc pyup, sl;
static int port;

/* Opens N connections SPACE_MS apart, sends <req> on each as it opens,
 * and waits for each to answer <status> (0: just the close); returns the
 * worst lateness past <timeout_ms> from each one's send. */
static long worst_late(const char *req, int status, long timeout_ms)
{
    int fd[N];
    uint64_t sent[N], got[N] = { 0 };
    char buf[N][512];
    size_t len[N] = { 0 };
    for (int i = 0; i < N; i++) {
        if (i > 0)
            usleep(SPACE_MS * 1000); /* spreads the deadlines, not a synchronisation */
        fd[i] = th_connect(port);
        assert_true(fd[i] >= 0);
        sent[i] = th_now_ms();
        assert_int_equal(th_write_all(fd[i], req, strlen(req)), 0);
    }
    uint64_t end = th_now_ms() + (uint64_t)timeout_ms + 20000;
    int left = N;
    while (left > 0 && th_now_ms() < end) {
        struct pollfd p[N];
        for (int i = 0; i < N; i++)
            p[i] = (struct pollfd){ .fd = got[i] ? -1 : fd[i], .events = POLLIN };
        if (poll(p, N, 100) <= 0)
            continue;
        uint64_t now = th_now_ms();
        for (int i = 0; i < N; i++) {
            if (got[i] || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t n = read(fd[i], buf[i] + len[i], sizeof(buf[i]) - 1 - len[i]);
            if (n > 0)
                len[i] += (size_t)n;
            if (n > 0 && status == 0)
                fail_msg("connection %d: bytes before the close", i);
            if (n > 0 && len[i] < 12)
                continue;
            got[i] = now;
            left--;
            if (status != 0) {
                buf[i][len[i]] = '\0';
                if (atoi(buf[i] + 9) != status)
                    fail_msg("connection %d: '%.40s', want %d", i, buf[i], status);
            }
        }
    }
    assert_int_equal(left, 0);
    long worst = -100000;
    for (int i = 0; i < N; i++) {
        long late = (long)(got[i] - sent[i]) - timeout_ms;
        if (late > worst)
            worst = late;
        close(fd[i]);
    }
    return worst;
}

static void test_header_timeout(void **state)
{
    (void)state;
    long late = worst_late("GET /echo HTTP/1.1\r\nHost: t\r\n", 408, 1000);
    fprintf(stderr, "header_timeout 1s: the latest 408 came %ld ms after its deadline\n", late);
    assert_true(late > -50); /* never early */
    assert_true(late < LATE_MS);
}

static void test_upstream_timeout(void **state)
{
    (void)state;
    long late = worst_late("GET /slow?secs=4 HTTP/1.1\r\nHost: t\r\n\r\n", 504, 1000);
    fprintf(stderr, "upstream_timeout 1s: the latest 504 came %ld ms after its deadline\n", late);
    assert_true(late > -50);
    assert_true(late < LATE_MS);
}

static void test_idle_timeout(void **state)
{
    (void)state;
    /* idle after a whole exchange: the last byte the client sent starts it */
    long late = worst_late("", 0, 2000);
    fprintf(stderr, "idle_timeout 2s: the latest close came %ld ms after its deadline\n", late);
    assert_true(late > -50);
    assert_true(late < LATE_MS);
}

static int setup(void **state)
{
    (void)state;
    if (th_pyup_start(&pyup) < 0)
        return -1;
    port = th_free_port();
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin =\nshutdown_grace = 1s\n[store]\nurl = local\n"
             "[listener t]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "header_timeout = 1s\nupstream_timeout = 1s\nidle_timeout = 2s\n",
             port, pyup.port);
    return th_sluice_start(&sl, ini, port);
}

static int teardown(void **state)
{
    (void)state;
    int st = th_stop(&sl);
    th_stop(&pyup);
    th_kill_all();
    return st == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_timeout),
        cmocka_unit_test(test_upstream_timeout),
        cmocka_unit_test(test_idle_timeout),
    };
    return th_finish(cmocka_run_group_tests(tests, setup, teardown));
}

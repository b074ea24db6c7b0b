/* sluice integration tests — running out of file descriptors.
 *
 * sluice is started under a low RLIMIT_NOFILE (set in the child before exec).
 * It raises the soft limit to the hard one, warns that max_connections does
 * not fit, and when more clients come than descriptors allow it refuses them
 * itself: answered, counted in sluice_connections_refused_total (and
 * sluice_connections_refused_descriptors_total) and logged at a rate, instead
 * of libuv's silent accept-and-close or a misleading "upstream unavailable". */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "integration/harness.h"

static struct th_proc redis_p, sluice_p;

static int group_setup(void **state)
{
    (void)state;
    return th_redis_start(&redis_p, NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    if (sluice_p.pid > 0)
        th_stop(&sluice_p);
    th_stop(&redis_p);
    th_kill_all();
    return 0;
}

/* "Max open files" soft and hard limits of <pid>, from /proc. */
static void nofile_of(pid_t pid, long *soft, long *hard)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/limits", (int)pid);
    char *text = th_slurp(path);
    assert_non_null(text);
    char *line = strstr(text, "Max open files");
    assert_non_null(line);
    assert_int_equal(sscanf(line + strlen("Max open files"), "%ld %ld", soft, hard), 2);
    free(text);
}

static double metric(int admin, const char *name)
{
    char sample[128];
    snprintf(sample, sizeof(sample), "%s{listener=\"r\"}", name);
    return th_metric(admin, sample);
}

/* 60 clients against a process allowed 64 descriptors (soft 40 at exec):
 * the ones that fit are served, the others get a clear refusal, each counted,
 * with log lines at a rate; once they go, new clients are served again.
 * Before: refusals stayed at 0, clients were closed unanswered (libuv's
 * EMFILE shedding) or told "-ERR upstream unavailable", and nothing was
 * logged but that. */
static void test_out_of_descriptors(void **state)
{
    (void)state;
    enum { N = 60 };
    int admin = th_free_port(), port = th_free_port();
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\n[store]\nurl = local\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n",
             admin, port, redis_p.port);
    assert_int_equal(th_sluice_start_nofile(&sluice_p, ini, port, 40, 64), 0);

    long soft = 0, hard = 0;
    nofile_of(sluice_p.pid, &soft, &hard);
    assert_int_equal(soft, 64); /* raised to the hard limit */
    assert_int_equal(hard, 64);
    assert_int_equal(th_log_wait(sluice_p.log, "msg=\"descriptor limit below what max_connections needs\"",
                                 1, TH_MS), 0);
    assert_true(th_log_count(sluice_p.log, "limit=64 need=") >= 1);

    int acc0 = (int)metric(admin, "sluice_connections_accepted_total"); /* the start's probe */
    int fds[N];
    for (int i = 0; i < N; i++) {
        fds[i] = th_connect(port);
        assert_true(fds[i] >= 0);
    }
    /* every one accepted (then served or refused) */
    uint64_t end = th_now_ms() + TH_MS;
    while (metric(admin, "sluice_connections_accepted_total") < acc0 + N && th_now_ms() < end)
        usleep(10000);
    assert_int_equal((int)metric(admin, "sluice_connections_accepted_total"), acc0 + N);

    int served = 0, refused = 0, other = 0;
    static const char refusal[] = "-ERR max number of clients reached (sluice is out of file descriptors)\r\n";
    for (int i = 0; i < N; i++) {
        char buf[256];
        int eof = 0;
        struct pollfd pf = { .fd = fds[i], .events = POLLIN };
        if (poll(&pf, 1, 0) == 0) { /* admitted: says nothing until asked */
            assert_int_equal(th_write_all(fds[i], "PING\r\n", 6), 0);
            size_t n = th_read_n(fds[i], buf, 7, TH_MS);
            if (n == 7 && memcmp(buf, "+PONG\r\n", 7) == 0) {
                served++;
                continue;
            }
            th_dump("admitted, then", buf, n);
            other++;
            continue;
        }
        size_t n = th_read_until_eof(fds[i], buf, sizeof(buf) - 1, TH_MS, &eof);
        if (eof && n == sizeof(refusal) - 1 && memcmp(buf, refusal, n) == 0)
            refused++;
        else {
            th_dump("refused, then", buf, n);
            other++;
        }
    }
    fprintf(stderr, "%d clients, limit 64: %d served, %d refused, %d other\n", N, served, refused,
            other);
    assert_int_equal(other, 0);
    assert_true(served >= 10); /* (64 - slack 16 - what is open at start) / 2 */
    assert_true(refused >= 1);
    assert_int_equal((int)metric(admin, "sluice_connections_refused_descriptors_total"), refused);
    assert_int_equal((int)metric(admin, "sluice_connections_refused_total"), refused);
    assert_int_equal((int)metric(admin, "sluice_connections_active"), served);
    assert_int_equal((int)metric(admin, "sluice_upstream_failures_total"), 0);

    /* logged: the first at once, the rest within the next second, as counts */
    assert_int_equal(th_log_wait(sluice_p.log, "msg=\"connections refused: out of file descriptors\"",
                                 1, TH_MS), 0);
    end = th_now_ms() + TH_MS;
    int logged = 0;
    char *log = NULL;
    while (th_now_ms() < end) {
        free(log);
        log = th_slurp(sluice_p.log);
        assert_non_null(log);
        logged = 0;
        for (char *p = strstr(log, "out of file descriptors\" listener=r refused="); p != NULL;
             p = strstr(p + 1, "out of file descriptors\" listener=r refused="))
            logged += atoi(p + strlen("out of file descriptors\" listener=r refused="));
        if (logged == refused)
            break;
        usleep(50000);
    }
    free(log);
    assert_int_equal(logged, refused);
    int lines = th_log_count(sluice_p.log, "msg=\"connections refused: out of file descriptors\"");
    assert_true(lines >= 1 && lines <= 3); /* at a rate, not one per refusal */

    /* when they go, there is room again */
    for (int i = 0; i < N; i++)
        close(fds[i]);
    end = th_now_ms() + TH_MS;
    while (metric(admin, "sluice_connections_active") != 0 && th_now_ms() < end)
        usleep(10000);
    int again[10];
    for (int i = 0; i < 10; i++) {
        again[i] = th_connect(port);
        assert_true(again[i] >= 0);
        assert_int_equal(th_write_all(again[i], "PING\r\n", 6), 0);
        assert_int_equal(th_expect(again[i], "+PONG\r\n", 7, TH_MS), 0);
    }
    for (int i = 0; i < 10; i++)
        close(again[i]);
    assert_int_equal(th_stop(&sluice_p), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_out_of_descriptors),
    };
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

/* sluice integration tests — logs.
 *
 * log_file in a temporary directory: after a rename (what logrotate does)
 * SIGUSR1 sends new lines to a new file at the old name, in a single
 * process and in the master and every worker; a reload that changes
 * log_file moves the lines; log_format = json writes lines that parse; a
 * storm of refused upstream connections writes a bounded number of lines
 * whose counts ("repeated=N") add up to every event. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "integration/harness.h"

static struct th_proc sluice_p;
static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/sluice-logs-XXXXXX");
    return mkdtemp(dir) != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    int rc = 0;
    if (sluice_p.pid > 0 && th_stop(&sluice_p) != 0) {
        fprintf(stderr, "sluice did not exit cleanly\n");
        rc = -1;
    }
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (rc == 0 && getenv("TH_KEEP_LOGS") == NULL && system(cmd) != 0)
        rc = -1;
    return rc;
}

/* The whole file at <name> in the test's directory (malloc'd; "" if none). */
static char *slurp(const char *name)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    char *buf = calloc(1, 1 << 20);
    assert_non_null(buf);
    if (f != NULL) {
        size_t n = fread(buf, 1, (1 << 20) - 1, f);
        buf[n] = '\0';
        fclose(f);
    }
    return buf;
}

static int count(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)) != NULL; p += strlen(what))
        n++;
    return n;
}

/* Waits up to <ms> until the file <name> holds <needle> <times> times or
 * more. */
static int wait_for_ms(const char *name, const char *needle, int times, int ms)
{
    uint64_t end = th_now_ms() + (uint64_t)ms;
    for (;;) {
        char *t = slurp(name);
        int n = count(t, needle);
        free(t);
        if (n >= times)
            return 0;
        if (th_now_ms() > end)
            return -1;
        usleep(20000);
    }
}

static int wait_for(const char *name, const char *needle, int times)
{
    return wait_for_ms(name, needle, times, TH_MS);
}

/* One connection to sluice: its upstream refuses, sluice answers and closes. */
static void refused_once(int port)
{
    int fd = th_connect(port);
    assert_true(fd >= 0);
    char buf[256];
    int eof = 0;
    th_read_until_eof(fd, buf, sizeof(buf), TH_MS, &eof);
    assert_int_equal(eof, 1);
    close(fd);
}

/* Starts sluice with log_file = <file> in the test's directory and a
 * listener whose upstream refuses. <extra> goes into [sluice]. Returns the
 * listener's port. */
static int start(const char *file, const char *extra)
{
    int port = th_free_port(), dead = th_free_port();
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin =\nshutdown_grace = 2s\nlog_file = %s/%s\n%s"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n",
             dir, file, extra, port, dead);
    assert_int_equal(th_sluice_start(&sluice_p, ini, port), 0);
    return port;
}

static void rotate(const char *from, const char *to)
{
    char a[128], b[128];
    snprintf(a, sizeof(a), "%s/%s", dir, from);
    snprintf(b, sizeof(b), "%s/%s", dir, to);
    assert_int_equal(rename(a, b), 0);
}

/* Rename, SIGUSR1: new lines land in a new s.log, none in s.log.1. */
static void test_reopen(void **state)
{
    (void)state;
    start("s.log", "");
    assert_int_equal(wait_for("s.log", "msg=started", 1), 0);
    rotate("s.log", "s.log.1");
    assert_int_equal(kill(sluice_p.pid, SIGUSR1), 0);
    assert_int_equal(wait_for("s.log", "msg=\"log file reopened\"", 1), 0);
    /* a reload that keeps log_file: its lines go to the new file too */
    assert_int_equal(kill(sluice_p.pid, SIGHUP), 0);
    assert_int_equal(wait_for("s.log", "msg=reloaded", 1), 0);
    char *old = slurp("s.log.1");
    assert_non_null(strstr(old, "msg=started"));
    assert_null(strstr(old, "reopened"));
    assert_null(strstr(old, "reload"));
    free(old);

    /* A reload that names another file moves the lines there. */
    FILE *f = fopen(sluice_p.conf, "r+");
    assert_non_null(f);
    char text[1024];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    char *at = strstr(text, "s.log");
    assert_non_null(at);
    memcpy(at, "t.log", 5);
    rewind(f);
    fwrite(text, 1, n, f);
    fclose(f);
    assert_int_equal(kill(sluice_p.pid, SIGHUP), 0);
    assert_int_equal(wait_for("t.log", "msg=reloaded", 1), 0);
    char *cur = slurp("s.log");
    assert_int_equal(count(cur, "msg=reloaded"), 1);
    free(cur);
}

/* workers = 2: the master and both workers reopen. */
static void test_reopen_workers(void **state)
{
    (void)state;
    int port = start("w.log", "workers = 2\n");
    /* both workers are up once each has said "started" and answers */
    assert_int_equal(wait_for("w.log", "msg=started worker=", 2), 0);
    refused_once(port);
    rotate("w.log", "w.log.1");
    /* A worker becomes READY for the master a moment after its "started"
     * line: signal until all three have reopened. */
    uint64_t end = th_now_ms() + TH_MS;
    int n = 0;
    while (th_now_ms() < end) {
        assert_int_equal(kill(sluice_p.pid, SIGUSR1), 0);
        if (wait_for_ms("w.log", "reopened", 3, 500) == 0) {
            char *t = slurp("w.log");
            n = count(t, "reopened");
            assert_non_null(strstr(t, "reopened\" worker=0"));
            assert_non_null(strstr(t, "reopened\" worker=1"));
            free(t);
            break;
        }
    }
    assert_true(n >= 3);
    char *old = slurp("w.log.1");
    assert_null(strstr(old, "reopened"));
    free(old);
}

/* log_format = json: every line is one json object (Python's json.loads). */
static void test_json_lines(void **state)
{
    (void)state;
    int port = start("j.log", "log_format = json\nlog_level = debug\n");
    for (int i = 0; i < 3; i++)
        refused_once(port);
    assert_int_equal(wait_for("j.log", "\"msg\":\"upstream unavailable\"", 1), 0);
    assert_int_equal(th_stop(&sluice_p), 0);
    char cmd[512];
    snprintf(cmd, sizeof(cmd),
             "python3 -c 'import json,sys\n"
             "n=0\n"
             "for l in open(sys.argv[1]):\n"
             "  o=json.loads(l); n+=1\n"
             "  assert set([\"ts\",\"level\",\"msg\"]) <= set(o), l\n"
             "  assert all(isinstance(v,str) for v in o.values()), l\n"
             "assert n >= 4, n' '%s/j.log'",
             dir);
    assert_int_equal(system(cmd), 0);
    char *t = slurp("j.log");
    assert_non_null(strstr(t, "\"err\":\"connection refused\""));
    free(t);
}

/* 300 refused upstream connections: a few lines, and every event counted. */
static void test_storm_bounded(void **state)
{
    (void)state;
    int port = start("r.log", "");
    const int N = 300;
    uint64_t t0 = th_now_ms();
    for (int i = 0; i < N; i++)
        refused_once(port);
    uint64_t secs = (th_now_ms() - t0) / 1000 + 1;
    assert_int_equal(th_stop(&sluice_p), 0); /* at exit the last count is written */
    char *t = slurp("r.log");
    int lines = 0, events = 0, repeated = 0;
    for (char *l = t; *l != '\0';) {
        char *nl = strchr(l, '\n');
        assert_non_null(nl);
        *nl = '\0';
        if (strstr(l, "msg=\"upstream unavailable\"") != NULL) {
            lines++;
            if (strstr(l, " listener=r ") != NULL)
                events++; /* a line of an event (with its details) */
            char *r = strstr(l, " repeated=");
            if (r != NULL) {
                assert_non_null(strstr(l, "kind=upstream_unavailable"));
                repeated += atoi(r + 10);
            }
        }
        l = nl + 1;
    }
    free(t);
    printf("# %d refused connections in %llu s: %d lines, %d counted as repeated\n", N,
           (unsigned long long)secs, lines, repeated);
    assert_true(repeated > 0);
    assert_true(lines <= (int)secs * 2 + 2);
    /* the harness's own connection (is it up?) may be one more */
    assert_true(events + repeated >= N && events + repeated <= N + 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reopen_workers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_storm_bounded, setup, teardown),
    };
    return th_finish(cmocka_run_group_tests(tests, NULL, NULL));
}

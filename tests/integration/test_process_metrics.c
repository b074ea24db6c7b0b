/* sluice integration tests — what /metrics says of the process itself
 * (issue 23, 7): sluice_build_info, the standard process_* set, the reload
 * counters (admin/process.h).
 *
 * - one process: build_info{version} 1; resident memory > 0 and below the
 *   virtual size; open descriptors > 0, <= max_fds, and as many as
 *   /proc/PID/fd lists; max_fds its soft RLIMIT_NOFILE (/proc/PID/limits);
 *   start time within the test's run; CPU seconds >= 0 and not going back;
 * - SIGHUP with a good file counts a success and moves the last-success
 *   time; a bad file counts a failure, leaves the time, and
 *   sluice_config_last_reload_successful goes 0 until a good one;
 * - workers = 2: each worker's process_* (worker="N", its own pid's), the
 *   build and the reloads once (the master's), counted as the master checks
 *   the file. */
#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "integration/harness.h"

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Descriptors /proc lists for <pid>. */
static int fds_of(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* The soft "Max open files" of <pid>. */
static double max_fds_of(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/limits", (int)pid);
    char *text = th_slurp(path);
    assert_non_null(text);
    char *at = strstr(text, "Max open files");
    assert_non_null(at);
    double v = strtod(at + strlen("Max open files"), NULL);
    free(text);
    return v;
}

/* How many lines of /metrics start with <prefix>. */
static int lines_with(int admin, const char *prefix)
{
    char *body = th_http_get(admin, "/metrics");
    assert_non_null(body);
    int n = 0;
    for (char *p = body; (p = strstr(p, prefix)) != NULL; p++)
        n += p == body || p[-1] == '\n';
    free(body);
    return n;
}

/* The process_* of <pid>, as /metrics at <admin> writes them with
 * <labels> ("" or "{worker=\"0\"}"). */
static void check_process(int admin, pid_t pid, const char *labels, double t0)
{
    char name[128];
#define M(n) (snprintf(name, sizeof(name), "%s%s", n, labels), th_metric(admin, name))
    double rss = M("process_resident_memory_bytes"), vm = M("process_virtual_memory_bytes");
    double fds = M("process_open_fds"), max = M("process_max_fds");
    double start = M("process_start_time_seconds"), cpu = M("process_cpu_seconds_total");
    printf("pid %d: rss %.0f vm %.0f fds %.0f/%.0f start %.3f (t0 %.3f) cpu %.2f\n", (int)pid,
           rss, vm, fds, max, start, t0, cpu);
    assert_true(rss > 0);
    assert_true(vm >= rss);
    assert_true(fds > 0);
    assert_true(fds <= max);
    assert_true(max == max_fds_of(pid));
    /* The scrape's own connection comes and goes: a few either way. */
    int listed = fds_of(pid);
    assert_true(fds >= listed - 3 && fds <= listed + 3);
    /* /proc's start time counts clock ticks from an integer boot time, and
     * the wall clock may have been stepped since boot: a sanity bound. */
    assert_true(start >= t0 - 30 && start <= wall_now() + 30);
    assert_true(cpu >= 0);
    double later = M("process_cpu_seconds_total");
    assert_true(later >= cpu);
#undef M
}

/* Writes <text> over <path> (the running sluice's file). */
static void rewrite(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Sends SIGHUP and waits for the reload counter <result> to be <want>. */
static void reload_and_wait(struct th_proc *sl, int admin, const char *result, double want)
{
    char sample[96];
    snprintf(sample, sizeof(sample), "sluice_reloads_total{result=\"%s\"}", result);
    kill(sl->pid, SIGHUP);
    assert_int_equal(th_metric_wait(admin, sample, want, TH_MS), 0);
}

static void test_one_process(void **state)
{
    (void)state;
    struct th_proc up, sl;
    assert_int_equal(th_redis_start(&up, NULL), 0);
    int admin = th_free_port(), port = th_free_port();
    char good[512], bad[600];
    snprintf(good, sizeof(good),
             "[sluice]\nadmin = 127.0.0.1:%d\n"
             "[listener a]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n",
             admin, port, up.port);
    snprintf(bad, sizeof(bad), "%s[limit l]\nlistener = a\nrate = lots\n", good);
    double t0 = wall_now();
    assert_int_equal(th_sluice_start(&sl, good, port), 0);
    assert_true(th_metric(admin, "sluice_build_info{version=\"" SL_VERSION "\"}") == 1);
    check_process(admin, sl.pid, "", t0);
    assert_true(th_metric(admin, "sluice_reloads_total{result=\"success\"}") == 0);
    assert_true(th_metric(admin, "sluice_reloads_total{result=\"failure\"}") == 0);
    assert_true(th_metric(admin, "sluice_config_last_reload_successful") == 1);
    /* The start counts as the last good load. */
    double at0 = th_metric(admin, "sluice_last_reload_success_timestamp_seconds");
    assert_true(at0 >= t0 - 1 && at0 <= wall_now() + 1);

    /* A good file. The clock is read, not waited for: the new time is at
     * least the old one (CLOCK_REALTIME may not tick between two reads). */
    reload_and_wait(&sl, admin, "success", 1);
    double at1 = th_metric(admin, "sluice_last_reload_success_timestamp_seconds");
    assert_true(at1 >= at0);
    assert_true(th_metric(admin, "sluice_config_last_reload_successful") == 1);

    /* A bad one: refused, counted, the time stays. */
    rewrite(sl.conf, bad);
    reload_and_wait(&sl, admin, "failure", 1);
    assert_true(th_metric(admin, "sluice_reloads_total{result=\"success\"}") == 1);
    assert_true(th_metric(admin, "sluice_last_reload_success_timestamp_seconds") == at1);
    assert_true(th_metric(admin, "sluice_config_last_reload_successful") == 0);

    /* Good again. */
    rewrite(sl.conf, good);
    reload_and_wait(&sl, admin, "success", 2);
    assert_true(th_metric(admin, "sluice_reloads_total{result=\"failure\"}") == 1);
    assert_true(th_metric(admin, "sluice_config_last_reload_successful") == 1);
    assert_true(th_metric(admin, "sluice_last_reload_success_timestamp_seconds") >= at1);
    check_process(admin, sl.pid, "", t0);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&up);
}

/* The pids of the two workers, from /stats. */
static void worker_pids(int admin, pid_t pids[2])
{
    char *stats = th_http_get(admin, "/stats");
    assert_non_null(stats);
    for (int i = 0; i < 2; i++) {
        char key[32];
        snprintf(key, sizeof(key), "\"worker\":%d,\"pid\":", i);
        char *at = strstr(stats, key);
        assert_non_null(at);
        pids[i] = (pid_t)atoi(at + strlen(key));
        assert_true(pids[i] > 0);
    }
    free(stats);
}

static void test_workers(void **state)
{
    (void)state;
    struct th_proc up, store, sl;
    assert_int_equal(th_redis_start(&up, NULL), 0);
    assert_int_equal(th_redis_start(&store, NULL), 0);
    int admin = th_free_port(), port = th_free_port();
    char good[512], bad[600];
    snprintf(good, sizeof(good),
             "[sluice]\nadmin = 127.0.0.1:%d\nworkers = 2\n"
             "[store]\nurl = redis://127.0.0.1:%d\n"
             "[listener a]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n",
             admin, store.port, port, up.port);
    snprintf(bad, sizeof(bad), "%s[limit l]\nlistener = a\nrate = lots\n", good);
    double t0 = wall_now();
    assert_int_equal(th_sluice_start(&sl, good, port), 0);
    assert_int_equal(th_metric_wait(admin, "sluice_workers_answered", 2, TH_MS), 0);
    pid_t pids[2];
    worker_pids(admin, pids);
    check_process(admin, pids[0], "{worker=\"0\"}", t0);
    check_process(admin, pids[1], "{worker=\"1\"}", t0);
    /* Once, the master's: no worker label, no sum of two. */
    assert_int_equal(lines_with(admin, "sluice_build_info"), 1);
    assert_true(th_metric(admin, "sluice_build_info{version=\"" SL_VERSION "\"}") == 1);
    assert_int_equal(lines_with(admin, "sluice_reloads_total{"), 2);
    reload_and_wait(&sl, admin, "success", 1);
    rewrite(sl.conf, bad);
    reload_and_wait(&sl, admin, "failure", 1);
    assert_true(th_metric(admin, "sluice_config_last_reload_successful") == 0);
    assert_true(th_metric(admin, "sluice_reloads_total{result=\"success\"}") == 1);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&store);
    th_stop(&up);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_process),
        cmocka_unit_test(test_workers),
    };
    return th_finish(cmocka_run_group_tests(tests, NULL, NULL));
}

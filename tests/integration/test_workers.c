/* sluice integration tests — worker processes (`workers = 2`).
 *
 * The master spawns two workers listening on the same address; connections
 * are spread over both; the admin endpoint answers for both (every sample
 * labelled worker="i", each family once); a worker killed with SIGKILL is
 * started again while the other one keeps serving; SIGTERM drains both and
 * the master exits 0; workers whose master was killed exit on their own; a
 * worker that cannot bind makes the master exit 1;
 * max_connections is shared out; SIGHUP reaches every worker.
 *
 * One redis-server is shared; every test starts its own sluice. */
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "integration/harness.h"

static struct th_proc redis_p, sluice_p;
static int port, admin;

static int group_setup(void **state)
{
    (void)state;
    return th_redis_start(&redis_p, NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    th_stop(&redis_p);
    th_kill_all();
    return 0;
}

static int stop_sluice(void **state)
{
    (void)state;
    if (sluice_p.pid > 0 && th_stop(&sluice_p) != 0) {
        fprintf(stderr, "sluice did not exit cleanly\n");
        return -1;
    }
    return 0;
}

/* Starts sluice with 2 workers; <extra> goes into [listener r]. */
static void start(const char *extra)
{
    port = th_free_port();
    admin = th_free_port();
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nworkers = 2\nshutdown_grace = 3s\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = resp\n%s",
             admin, port, redis_p.port, extra != NULL ? extra : "");
    assert_int_equal(th_sluice_start(&sluice_p, ini, port), 0);
    /* The port answers as soon as one worker listens: wait for both. */
    uint64_t end = th_now_ms() + TH_MS;
    while (th_metric(admin, "sluice_workers_ready") != 2 && th_now_ms() < end)
        usleep(20000);
    assert_int_equal(th_metric(admin, "sluice_workers_ready"), 2);
}

/* State and parent of <pid> from /proc/PID/stat: 0, or -1 when it has no
 * entry (gone and reaped). */
static int proc_stat(long pid, char *state, int *ppid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[len] = '\0';
    char *rp = strrchr(buf, ')'); /* the name may hold spaces */
    return rp != NULL && sscanf(rp + 1, " %c %d", state, ppid) == 2 ? 0 : -1;
}

/* The live processes whose parent is <parent>. */
static int children(pid_t parent, pid_t *out, int cap)
{
    int n = 0;
    DIR *d = opendir("/proc");
    if (d == NULL)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < cap) {
        char *end, state;
        int ppid;
        long pid = strtol(e->d_name, &end, 10);
        if (*end == '\0' && pid > 0 && proc_stat(pid, &state, &ppid) == 0 && ppid == parent &&
            state != 'Z')
            out[n++] = (pid_t)pid;
    }
    closedir(d);
    return n;
}

/* 1 once <pid> has exited (no such process, or a zombie nobody reaped yet). */
static int gone(pid_t pid)
{
    char state;
    int ppid;
    return proc_stat(pid, &state, &ppid) < 0 || state == 'Z';
}

/* PING on a new connection: 1 when +PONG came, 0 when refused or closed. */
static int ping_ok(struct th_conn *c)
{
    if (th_conn_open(c, port) < 0)
        return 0;
    if (th_conn_send(c, "PING\r\n") < 0)
        return 0;
    char *r = th_conn_reply(c, TH_MS);
    int ok = r != NULL && strcmp(r, "+PONG\r\n") == 0;
    free(r);
    return ok;
}

static int count_of(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

static void test_spread_and_admin(void **state)
{
    (void)state;
    start(NULL);
    pid_t kids[8];
    assert_int_equal(children(sluice_p.pid, kids, 8), 2);

    enum { N = 24 };
    const char *acc0 = "sluice_connections_accepted_total{worker=\"0\",listener=\"r\"}";
    const char *acc1 = "sluice_connections_accepted_total{worker=\"1\",listener=\"r\"}";
    double b0 = th_metric(admin, acc0), b1 = th_metric(admin, acc1); /* the start probe */
    struct th_conn c[N];
    for (int i = 0; i < N; i++)
        assert_true(ping_ok(&c[i]));
    double a0 = th_metric(admin, acc0) - b0, a1 = th_metric(admin, acc1) - b1;
    printf("# 24 connections: worker 0 took %.0f, worker 1 took %.0f\n", a0, a1);
    assert_true(a0 >= 1 && a1 >= 1);
    assert_int_equal((int)(a0 + a1), N);
    assert_int_equal(th_metric(admin, "sluice_requests_total{worker=\"0\",listener=\"r\"}") +
                         th_metric(admin, "sluice_requests_total{worker=\"1\",listener=\"r\"}"),
                     N);
    for (int i = 0; i < N; i++)
        th_conn_close(&c[i]);

    char *m = th_http_get(admin, "/metrics");
    assert_non_null(m);
    assert_int_equal(count_of(m, "# TYPE sluice_connections_accepted_total "), 1);
    assert_int_equal(count_of(m, "# HELP sluice_requests_total "), 1);
    assert_int_equal(th_metric(admin, "sluice_workers"), 2);
    assert_int_equal(th_metric(admin, "sluice_workers_answered"), 2);
    assert_int_equal(th_metric(admin, "sluice_worker_restarts_total"), 0);
    free(m);

    char *st = th_http_get(admin, "/stats");
    assert_non_null(st);
    char want[64];
    for (int i = 0; i < 2; i++) {
        snprintf(want, sizeof(want), "{\"worker\":%d,\"pid\":", i);
        assert_non_null(strstr(st, want));
    }
    assert_int_equal(count_of(st, "\"ready\":true,\"stats\":{\"listeners\":"), 2);
    free(st);

    char *ready = th_http_get(admin, "/readyz");
    assert_non_null(ready);
    assert_string_equal(ready, "ready\n");
    free(ready);
}

static void test_worker_restart(void **state)
{
    (void)state;
    start(NULL);
    pid_t kids[8];
    assert_int_equal(children(sluice_p.pid, kids, 8), 2);

    /* Connections on both workers; then one worker dies. */
    enum { N = 16 };
    struct th_conn c[N];
    for (int i = 0; i < N; i++)
        assert_true(ping_ok(&c[i]));
    assert_int_equal(kill(kids[0], SIGKILL), 0);

    /* The survivor's connections carry on; the dead one's are closed. */
    int alive = 0;
    for (int i = 0; i < N; i++) {
        if (th_conn_send(&c[i], "PING\r\n") == 0) {
            char *r = th_conn_reply(&c[i], 2000);
            alive += r != NULL && strcmp(r, "+PONG\r\n") == 0;
            free(r);
        }
        th_conn_close(&c[i]);
    }
    printf("# after SIGKILL of one worker: %d of %d connections still served\n", alive, N);
    assert_true(alive >= 1 && alive < N);

    uint64_t end = th_now_ms() + TH_MS;
    while ((th_metric(admin, "sluice_worker_restarts_total") != 1 ||
            th_metric(admin, "sluice_workers_ready") != 2) && th_now_ms() < end)
        usleep(50000);
    assert_int_equal(th_metric(admin, "sluice_worker_restarts_total"), 1);
    assert_int_equal(th_metric(admin, "sluice_workers_ready"), 2);
    pid_t now[8];
    assert_int_equal(children(sluice_p.pid, now, 8), 2);
    assert_true(now[0] != kids[0] && now[1] != kids[0]);
    for (int i = 0; i < N; i++) {
        struct th_conn k;
        assert_true(ping_ok(&k));
        th_conn_close(&k);
    }
    assert_int_equal(th_log_count(sluice_p.log, "msg=\"worker exited: starting it again\""), 1);
}

static void test_stop_drains(void **state)
{
    (void)state;
    start(NULL);
    pid_t kids[8];
    assert_int_equal(children(sluice_p.pid, kids, 8), 2);
    struct th_conn c;
    assert_int_equal(th_conn_open(&c, port), 0);
    assert_int_equal(th_conn_send(&c, "BLPOP sluice-workers-none 1\r\n"), 0);
    assert_int_equal(th_redis_wait_info(redis_p.port, "blocked_clients", 1, TH_MS), 0);
    uint64_t t0 = th_now_ms();
    kill(sluice_p.pid, SIGTERM);
    /* The blocked command still gets its answer (a nil array after 1 s). */
    char *r = th_conn_reply(&c, TH_MS);
    assert_non_null(r);
    assert_string_equal(r, "*-1\r\n");
    free(r);
    th_conn_close(&c);
    int st = th_signal_wait(&sluice_p, 0, TH_MS);
    printf("# SIGTERM: blocked reply delivered, master exited after %llu ms\n",
           (unsigned long long)(th_now_ms() - t0));
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    for (int i = 0; i < 2; i++)
        assert_true(kill(kids[i], 0) < 0 && errno == ESRCH);
    assert_int_equal(th_log_count(sluice_p.log, "msg=draining worker="), 2);
    unlink(sluice_p.log);
    unlink(sluice_p.conf);
}

static void test_master_killed(void **state)
{
    (void)state;
    start(NULL);
    pid_t kids[8];
    assert_int_equal(children(sluice_p.pid, kids, 8), 2);
    int st = th_signal_wait(&sluice_p, SIGKILL, TH_MS);
    assert_true(WIFSIGNALED(st));
    /* Their control pipe closed: the workers drain and exit on their own. */
    uint64_t t0 = th_now_ms(), end = t0 + TH_MS;
    while (!(gone(kids[0]) && gone(kids[1])) && th_now_ms() < end)
        usleep(10000);
    printf("# master killed: both workers gone after %llu ms\n",
           (unsigned long long)(th_now_ms() - t0));
    assert_true(gone(kids[0]) && gone(kids[1]));
    assert_int_equal(th_log_count(sluice_p.log, "msg=\"the master has gone: draining\""), 2);
    unlink(sluice_p.log);
    unlink(sluice_p.conf);
}

static void test_bind_failure(void **state)
{
    (void)state;
    /* Somebody else holds the port, without SO_REUSEPORT. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(fd, 8), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    char ini[512];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin =\nworkers = 2\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = resp\n",
             ntohs(sa.sin_port), redis_p.port);
    assert_int_equal(th_sluice_start(&sluice_p, ini, 0), 0);
    pid_t master = sluice_p.pid;
    int st = th_signal_wait(&sluice_p, 0, TH_MS);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 1);
    pid_t kids[8];
    assert_int_equal(children(master, kids, 8), 0);
    assert_true(th_log_count(sluice_p.log, "msg=\"a worker could not start: stopping\"") >= 1);
    close(fd);
    unlink(sluice_p.log);
    unlink(sluice_p.conf);
}

static void test_max_connections_shared(void **state)
{
    (void)state;
    start("max_connections = 4\n");
    enum { N = 12 };
    struct th_conn c[N];
    int ok = 0;
    for (int i = 0; i < N; i++)
        ok += ping_ok(&c[i]);
    double refused =
        th_metric(admin, "sluice_connections_refused_total{worker=\"0\",listener=\"r\"}") +
        th_metric(admin, "sluice_connections_refused_total{worker=\"1\",listener=\"r\"}");
    printf("# max_connections = 4 over 2 workers: %d of %d served, %.0f refused\n", ok, N, refused);
    assert_true(ok >= 2 && ok <= 4);
    assert_int_equal((int)refused, N - ok);
    for (int i = 0; i < N; i++)
        th_conn_close(&c[i]);
}

static void test_reload_reaches_workers(void **state)
{
    (void)state;
    start(NULL);
    int port2 = th_free_port();
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nworkers = 2\nshutdown_grace = 3s\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = resp\n"
             "[listener s]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = resp\n",
             admin, port, redis_p.port, port2, redis_p.port);
    FILE *f = fopen(sluice_p.conf, "w");
    assert_non_null(f);
    fputs(ini, f);
    fclose(f);
    kill(sluice_p.pid, SIGHUP);
    assert_int_equal(th_log_wait(sluice_p.log, "msg=reloaded worker=", 2, TH_MS), 0);
    /* Both workers listen on the new address. */
    uint64_t end = th_now_ms() + TH_MS;
    double s0 = 0, s1 = 0;
    while ((s0 < 1 || s1 < 1) && th_now_ms() < end) {
        struct th_conn c;
        assert_int_equal(th_conn_open(&c, port2), 0);
        assert_int_equal(th_conn_send(&c, "PING\r\n"), 0);
        char *r = th_conn_reply(&c, TH_MS);
        assert_non_null(r);
        assert_string_equal(r, "+PONG\r\n");
        free(r);
        th_conn_close(&c);
        s0 = th_metric(admin, "sluice_connections_accepted_total{worker=\"0\",listener=\"s\"}");
        s1 = th_metric(admin, "sluice_connections_accepted_total{worker=\"1\",listener=\"s\"}");
    }
    assert_true(s0 >= 1 && s1 >= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_spread_and_admin, stop_sluice),
        cmocka_unit_test_teardown(test_worker_restart, stop_sluice),
        cmocka_unit_test_teardown(test_stop_drains, stop_sluice),
        cmocka_unit_test_teardown(test_master_killed, stop_sluice),
        cmocka_unit_test_teardown(test_bind_failure, stop_sluice),
        cmocka_unit_test_teardown(test_max_connections_shared, stop_sluice),
        cmocka_unit_test_teardown(test_reload_reaches_workers, stop_sluice),
    };
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

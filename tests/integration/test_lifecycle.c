/* sluice integration tests — signals and the command line.
 *
 * SIGTERM drains (in-flight replies are delivered, idle connections close at
 * once, new connections are refused, exit 0 as soon as nothing is left; a
 * second SIGTERM, or shutdown_grace, ends it at once). SIGHUP reloads (new
 * limits apply to existing listeners and sessions; a broken file keeps the
 * running configuration). -V, -t and -T.
 *
 * One redis-server is shared; every test starts its own sluice (they all
 * end it). */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "integration/harness.h"

static struct th_proc redis_p, sluice_p, redis2_p;
static pid_t echo_pid;
static int echo_port;

static int group_setup(void **state)
{
    (void)state;
    if (th_redis_start(&redis_p, NULL) < 0)
        return -1;
    echo_pid = th_fork_server(&echo_port, th_serve_echo, NULL);
    return echo_pid < 0 ? -1 : 0;
}

static int group_teardown(void **state)
{
    (void)state;
    th_stop(&redis_p);
    th_kill_server(echo_pid);
    th_kill_all();
    return 0;
}

/* Per test: whatever sluice the test left running is stopped. */
static int stop_sluice(void **state)
{
    (void)state;
    if (redis2_p.pid > 0)
        th_stop(&redis2_p);
    if (sluice_p.pid > 0 && th_stop(&sluice_p) != 0) {
        fprintf(stderr, "sluice did not exit cleanly\n");
        return -1;
    }
    return 0;
}

/* The configuration text of one resp listener on <port>. */
static void conf_text(char *buf, size_t cap, int port, const char *grace, const char *extra)
{
    snprintf(buf, cap,
             "[sluice]\nadmin =\nshutdown_grace = %s\n[store]\nurl = local\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n%s",
             grace, port, redis_p.port, extra);
}

static int start(const char *grace, const char *extra)
{
    int port = th_free_port();
    char ini[2048];
    conf_text(ini, sizeof(ini), port, grace, extra);
    assert_int_equal(th_sluice_start(&sluice_p, ini, port), 0);
    return port;
}

static void rewrite_conf(const char *text)
{
    char tmp[300];
    snprintf(tmp, sizeof(tmp), "%s.new", sluice_p.conf);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(rename(tmp, sluice_p.conf), 0); /* never half-written */
}

static int ping_conn(int port)
{
    int fd = th_connect(port);
    assert_true(fd >= 0);
    TH_SEND(fd, "PING\r\n");
    TH_EXPECT(fd, "+PONG\r\n");
    return fd;
}

/* Waits until connecting to <port> is refused; 0 or -1. */
static int wait_refused(int port, int ms)
{
    uint64_t end = th_now_ms() + (uint64_t)ms;
    do {
        int fd = th_connect(port);
        if (fd < 0)
            return 0;
        close(fd);
        usleep(5000);
    } while (th_now_ms() < end);
    return -1;
}

/* ---- 16. SIGTERM ----------------------------------------------------------------- */

static void test_sigterm_drain(void **state)
{
    (void)state;
    int port = start("5s", "");
    int blk = ping_conn(port);
    int idle = ping_conn(port);
    uint64_t tb = th_now_ms();
    TH_SEND(blk, "BLPOP drain:q 1\r\n");
    assert_int_equal(th_redis_wait_info(redis_p.port, "blocked_clients", 1, TH_MS), 0);

    uint64_t t0 = th_now_ms();
    assert_int_equal(kill(sluice_p.pid, SIGTERM), 0);

    /* The idle connection is closed at once. */
    assert_int_equal(th_wait_eof(idle, 1500), 1);
    assert_true(th_now_ms() - t0 < 1500);
    close(idle);
    /* New connections are refused. */
    assert_int_equal(wait_refused(port, 1500), 0);
    /* The request in flight is answered, then the connection closes. */
    TH_EXPECT_CLOSE(blk, "*-1\r\n");
    assert_true(th_now_ms() - tb >= 900);
    close(blk);

    /* Nothing left: exit 0, long before the 5 s grace. */
    int st = th_signal_wait(&sluice_p, 0, 4000);
    assert_true(st != -1);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_true(th_now_ms() - t0 < 4000);
    assert_true(th_log_count(sluice_p.log, "msg=draining") == 1);
}

/* Several requests in flight: all their replies, in order; a request sent
 * after the signal is not read. */
static void test_sigterm_drain_pipeline(void **state)
{
    (void)state;
    int port = start("5s", "");
    int fd = ping_conn(port);
    TH_SEND(fd, "BLPOP drain:q2 1\r\nECHO a\r\nECHO b\r\n");
    assert_int_equal(th_redis_wait_info(redis_p.port, "blocked_clients", 1, TH_MS), 0);
    assert_int_equal(kill(sluice_p.pid, SIGTERM), 0);
    assert_int_equal(wait_refused(port, 1500), 0);
    TH_SEND(fd, "ECHO late\r\n");
    TH_EXPECT_CLOSE(fd, "*-1\r\n$1\r\na\r\n$1\r\nb\r\n");
    close(fd);
    int st = th_signal_wait(&sluice_p, 0, 4000);
    assert_true(st != -1);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* Nothing open at all: SIGTERM exits at once. */
static void test_sigterm_idle_process(void **state)
{
    (void)state;
    start("10s", "");
    uint64_t t0 = th_now_ms();
    int st = th_signal_wait(&sluice_p, SIGTERM, 3000);
    assert_true(st != -1);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_true(th_now_ms() - t0 < 3000);
}

/* A SIGTERM sent the moment the port answers (as a supervisor may) drains
 * and exits 0: the signals are handled before the first listener accepts.
 * Several rounds, as the window it guards is short. */
static void test_sigterm_as_soon_as_listening(void **state)
{
    (void)state;
    for (int round = 0; round < 20; round++) {
        start("10s", "");
        int st = th_signal_wait(&sluice_p, SIGTERM, 3000);
        assert_true(st != -1);
        if (!WIFEXITED(st))
            fail_msg("round %d: killed by signal %d, not drained", round, WTERMSIG(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
}

/* A client blocked for ever keeps the drain going; a second SIGTERM ends it
 * at once. */
static void test_second_sigterm(void **state)
{
    (void)state;
    int port = start("10s", "");
    int blk = ping_conn(port);
    TH_SEND(blk, "BLPOP drain:forever 0\r\n");
    assert_int_equal(th_redis_wait_info(redis_p.port, "blocked_clients", 1, TH_MS), 0);
    assert_int_equal(kill(sluice_p.pid, SIGTERM), 0);
    assert_int_equal(wait_refused(port, 1500), 0);
    /* Still draining: the blocked client holds it. */
    assert_true(th_quiet(blk, 500));
    assert_true(th_running(&sluice_p, NULL));

    uint64_t t0 = th_now_ms();
    int st = th_signal_wait(&sluice_p, SIGTERM, 2000);
    assert_true(st != -1);
    assert_true(th_now_ms() - t0 < 2000);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_int_equal(th_wait_eof(blk, TH_MS), 1);
    close(blk);
    assert_int_equal(th_log_count(sluice_p.log, "second stop signal"), 1);
}

/* The grace ends a drain that would go on for ever. */
static void test_shutdown_grace(void **state)
{
    (void)state;
    int port = start("1s", "");
    int blk = ping_conn(port);
    TH_SEND(blk, "BLPOP drain:forever2 0\r\n");
    assert_int_equal(th_redis_wait_info(redis_p.port, "blocked_clients", 1, TH_MS), 0);
    uint64_t t0 = th_now_ms();
    int st = th_signal_wait(&sluice_p, SIGTERM, 5000);
    uint64_t took = th_now_ms() - t0;
    assert_true(st != -1);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_true(took >= 900);  /* not before the grace */
    assert_true(took < 4000);
    assert_int_equal(th_wait_eof(blk, TH_MS), 1);
    close(blk);
}

/* TCP sessions run on during a drain, until the grace. */
static void test_drain_tcp_runs_on(void **state)
{
    (void)state;
    int port = th_free_port();
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin =\nshutdown_grace = 2s\n[store]\nurl = local\n"
             "[listener t]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = tcp\n",
             port, echo_port);
    assert_int_equal(th_sluice_start(&sluice_p, ini, port), 0);
    int fd = th_connect(port);
    assert_true(fd >= 0);
    TH_SEND(fd, "before\n");
    TH_EXPECT(fd, "before\n");
    uint64_t t0 = th_now_ms();
    assert_int_equal(kill(sluice_p.pid, SIGTERM), 0);
    assert_int_equal(wait_refused(port, 1500), 0);
    TH_SEND(fd, "during\n");
    TH_EXPECT(fd, "during\n");
    assert_int_equal(th_wait_eof(fd, 5000), 1);
    assert_true(th_now_ms() - t0 >= 1500);
    close(fd);
    int st = th_signal_wait(&sluice_p, 0, 3000);
    assert_true(st != -1);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* ---- 17. SIGHUP -------------------------------------------------------------------- */

static void test_sighup_max_connections(void **state)
{
    (void)state;
    int port = start("2s", "max_connections = 100\n");
    int c1 = ping_conn(port);
    int c2 = ping_conn(port);
    close(c2);

    char ini[2048];
    conf_text(ini, sizeof(ini), port, "2s", "max_connections = 1\n");
    rewrite_conf(ini);
    assert_int_equal(kill(sluice_p.pid, SIGHUP), 0);
    assert_int_equal(th_log_wait(sluice_p.log, "msg=reloaded ", 1, TH_MS), 0);

    /* Only c1 fits now. */
    int fd = th_connect(port);
    assert_true(fd >= 0);
    TH_EXPECT_CLOSE(fd, "-ERR max number of clients reached\r\n");
    close(fd);
    TH_SEND(c1, "ECHO kept\r\n");
    TH_EXPECT(c1, "$4\r\nkept\r\n");

    /* A broken file: refused, logged, the running configuration stays. */
    conf_text(ini, sizeof(ini), port, "2s", "max_connections = lots\n");
    rewrite_conf(ini);
    assert_int_equal(kill(sluice_p.pid, SIGHUP), 0);
    assert_int_equal(th_log_wait(sluice_p.log, "reload failed", 1, TH_MS), 0);
    assert_true(th_log_count(sluice_p.log, "max_connections: ") >= 1); /* the reason */
    assert_true(th_running(&sluice_p, NULL));
    TH_SEND(c1, "ECHO still\r\n");
    TH_EXPECT(c1, "$5\r\nstill\r\n");
    fd = th_connect(port);
    assert_true(fd >= 0);
    TH_EXPECT_CLOSE(fd, "-ERR max number of clients reached\r\n");
    close(fd);

    /* A good file again: it applies. */
    conf_text(ini, sizeof(ini), port, "2s", "max_connections = 2\n");
    rewrite_conf(ini);
    assert_int_equal(kill(sluice_p.pid, SIGHUP), 0);
    assert_int_equal(th_log_wait(sluice_p.log, "msg=reloaded ", 2, TH_MS), 0);
    int c3 = ping_conn(port);
    close(c3);
    close(c1);
    assert_int_equal(th_stop(&sluice_p), 0);
}

/* New timeouts apply to connections that already exist. */
static void test_sighup_idle_timeout_applies_to_existing(void **state)
{
    (void)state;
    int port = start("2s", "idle_timeout = 300s\n");
    int c1 = ping_conn(port);
    char ini[2048];
    conf_text(ini, sizeof(ini), port, "2s", "idle_timeout = 1s\n");
    rewrite_conf(ini);
    assert_int_equal(kill(sluice_p.pid, SIGHUP), 0);
    assert_int_equal(th_log_wait(sluice_p.log, "msg=reloaded ", 1, TH_MS), 0);
    uint64_t t0 = th_now_ms();
    assert_int_equal(th_wait_eof(c1, 5000), 1);
    assert_true(th_now_ms() - t0 < 4500);
    close(c1);
    assert_int_equal(th_stop(&sluice_p), 0);
}

/* A smaller max_request applies to a connection that was already open (and
 * busy, so its parser state was not recycled), as to new ones. */
static void test_sighup_max_request_applies_to_existing(void **state)
{
    (void)state;
    int port = start("2s", "max_request = 1mb\n");
    int c1 = ping_conn(port);
    char big[2200];
    int bl = snprintf(big, sizeof(big), "*3\r\n$3\r\nSET\r\n$5\r\nmr:k1\r\n$2000\r\n");
    memset(big + bl, 'x', 2000);
    memcpy(big + bl + 2000, "\r\n", 2);
    size_t blen = (size_t)bl + 2002;
    /* Under the old limit it passes. */
    assert_int_equal(th_write_all(c1, big, blen), 0);
    TH_EXPECT(c1, "+OK\r\n");

    char ini[2048];
    conf_text(ini, sizeof(ini), port, "2s", "max_request = 1kb\n");
    rewrite_conf(ini);
    assert_int_equal(kill(sluice_p.pid, SIGHUP), 0);
    assert_int_equal(th_log_wait(sluice_p.log, "msg=reloaded ", 1, TH_MS), 0);

    /* A new connection: refused by the new limit. */
    int c2 = ping_conn(port);
    assert_int_equal(th_write_all(c2, big, blen), 0);
    TH_EXPECT_CLOSE(c2, "-ERR Protocol error: invalid bulk length\r\n");
    close(c2);
    /* The existing one: the same. */
    assert_int_equal(th_write_all(c1, big, blen), 0);
    TH_EXPECT_CLOSE(c1, "-ERR Protocol error: invalid bulk length\r\n");
    close(c1);
    assert_int_equal(th_stop(&sluice_p), 0);
}

/* A new upstream address applies to new connections; the existing ones stay
 * with the upstream they have. */
static void test_sighup_upstream_change(void **state)
{
    (void)state;
    assert_int_equal(th_redis_start(&redis2_p, NULL), 0);
    int port = start("2s", "");
    int c1 = th_connect(port);
    assert_true(c1 >= 0);
    char want[64], cmd[] = "CONFIG GET port\r\n";
    int wl = snprintf(want, sizeof(want), "*2\r\n$4\r\nport\r\n$%d\r\n%d\r\n",
                      redis_p.port >= 10000 ? 5 : 4, redis_p.port);
    assert_int_equal(th_write_all(c1, cmd, sizeof(cmd) - 1), 0);
    assert_int_equal(th_expect(c1, want, (size_t)wl, TH_MS), 0);

    char ini[2048];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin =\nshutdown_grace = 2s\n[store]\nurl = local\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n",
             port, redis2_p.port);
    rewrite_conf(ini);
    assert_int_equal(kill(sluice_p.pid, SIGHUP), 0);
    assert_int_equal(th_log_wait(sluice_p.log, "msg=reloaded ", 1, TH_MS), 0);

    int c2 = th_connect(port);
    assert_true(c2 >= 0);
    char want2[64];
    int wl2 = snprintf(want2, sizeof(want2), "*2\r\n$4\r\nport\r\n$%d\r\n%d\r\n",
                       redis2_p.port >= 10000 ? 5 : 4, redis2_p.port);
    assert_int_equal(th_write_all(c2, cmd, sizeof(cmd) - 1), 0);
    assert_int_equal(th_expect(c2, want2, (size_t)wl2, TH_MS), 0);
    assert_int_equal(th_write_all(c1, cmd, sizeof(cmd) - 1), 0);
    assert_int_equal(th_expect(c1, want, (size_t)wl, TH_MS), 0);
    close(c1);
    close(c2);
    assert_int_equal(th_stop(&sluice_p), 0);
    th_stop(&redis2_p);
}

/* Listeners added and removed by a reload: the new one accepts; the removed
 * one refuses new connections while its existing ones keep working. */
static void test_sighup_listeners_added_removed(void **state)
{
    (void)state;
    int pa = start("2s", "");
    int pb = th_free_port();
    char ini[2048];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin =\nshutdown_grace = 2s\n[store]\nurl = local\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "[listener b]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n",
             pa, redis_p.port, pb, redis_p.port);
    int ca = ping_conn(pa);
    rewrite_conf(ini);
    assert_int_equal(kill(sluice_p.pid, SIGHUP), 0);
    assert_int_equal(th_log_wait(sluice_p.log, "msg=reloaded ", 1, TH_MS), 0);
    int cb = ping_conn(pb);

    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin =\nshutdown_grace = 2s\n[store]\nurl = local\n"
             "[listener b]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n",
             pb, redis_p.port);
    rewrite_conf(ini);
    assert_int_equal(kill(sluice_p.pid, SIGHUP), 0);
    assert_int_equal(th_log_wait(sluice_p.log, "msg=reloaded ", 2, TH_MS), 0);
    assert_int_equal(wait_refused(pa, TH_MS), 0);
    TH_SEND(ca, "ECHO old\r\n");
    TH_EXPECT(ca, "$3\r\nold\r\n");
    TH_SEND(cb, "ECHO new\r\n");
    TH_EXPECT(cb, "$3\r\nnew\r\n");
    close(ca);
    close(cb);
    close(ping_conn(pb));
    assert_int_equal(th_stop(&sluice_p), 0);
}

/* The lines of the /metrics page at <admin> that start with <prefix>
 * (a name and '{'), counted; the value of the last one in *v. */
static int series(int admin, const char *prefix, double *v)
{
    char *body = th_http_get(admin, "/metrics");
    assert_non_null(body);
    int n = 0;
    size_t pl = strlen(prefix);
    for (char *line = body; *line != '\0';) {
        char *nl = strchr(line, '\n');
        if (nl != NULL)
            *nl = '\0';
        if (strncmp(line, prefix, pl) == 0) {
            n++;
            *v = strtod(strrchr(line, ' ') + 1, NULL);
        }
        if (nl == NULL)
            break;
        line = nl + 1;
    }
    free(body);
    return n;
}

/* How many times <needle> occurs in the /stats document. */
static int stats_count(int admin, const char *needle)
{
    char *body = th_http_get(admin, "/stats");
    assert_non_null(body);
    int n = 0;
    for (char *p = strstr(body, needle); p != NULL; p = strstr(p + 1, needle))
        n++;
    free(body);
    return n;
}

/* A listener moved to another address by a reload while a session lives on
 * its old socket: one series per name, summing both sockets, and counters
 * that never go back (not at the reload, not when the old socket goes).
 * Before: two sluice_connections_active{listener="r"} series and two "r"
 * entries in /stats, and the new socket's counters started at 0. */
static void test_sighup_moved_listener_one_series(void **state)
{
    (void)state;
    int admin = th_free_port(), pa = th_free_port(), pb = th_free_port();
    char ini[2048];
    const char *fmt = "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 2s\n[store]\nurl = local\n"
                      "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n";
    snprintf(ini, sizeof(ini), fmt, admin, pa, redis_p.port);
    assert_int_equal(th_sluice_start(&sluice_p, ini, pa), 0);
    int old = ping_conn(pa);
    TH_SEND(old, "PING\r\n");
    TH_EXPECT(old, "+PONG\r\n");
    double req0 = 0, acc0 = 0, act = 0, bytes0 = 0;
    assert_int_equal(series(admin, "sluice_requests_total{", &req0), 1);
    assert_int_equal(series(admin, "sluice_connections_accepted_total{", &acc0), 1);
    assert_int_equal(series(admin, "sluice_client_read_bytes_total{", &bytes0), 1);
    assert_true(acc0 >= 1);
    assert_true(bytes0 >= 12);

    snprintf(ini, sizeof(ini), fmt, admin, pb, redis_p.port);
    rewrite_conf(ini);
    assert_int_equal(kill(sluice_p.pid, SIGHUP), 0);
    assert_int_equal(th_log_wait(sluice_p.log, "msg=reloaded ", 1, TH_MS), 0);
    int moved = ping_conn(pb);
    TH_SEND(old, "PING\r\n"); /* the old session still works */
    TH_EXPECT(old, "+PONG\r\n");

    double req1 = 0, acc1 = 0, bytes1 = 0;
    assert_int_equal(series(admin, "sluice_connections_active{", &act), 1);
    assert_int_equal((int)act, 2);
    assert_int_equal(series(admin, "sluice_requests_total{", &req1), 1);
    assert_int_equal(series(admin, "sluice_connections_accepted_total{", &acc1), 1);
    assert_int_equal(series(admin, "sluice_client_read_bytes_total{", &bytes1), 1);
    assert_true(req1 >= req0); /* requests are framed only where a limit needs it */
    assert_true(acc1 >= acc0 + 1);
    assert_true(bytes1 >= bytes0 + 12);
    assert_int_equal(stats_count(admin, "\"name\":\"r\""), 1);
    assert_int_equal(stats_count(admin, "\"connections_active\":2"), 1);

    /* the old socket goes with its last session: counts stay */
    close(old);
    uint64_t end = th_now_ms() + TH_MS;
    do {
        assert_int_equal(series(admin, "sluice_connections_active{", &act), 1);
        if ((int)act == 1)
            break;
        usleep(10000);
    } while (th_now_ms() < end);
    assert_int_equal((int)act, 1);
    double req2 = 0, acc2 = 0, bytes2 = 0;
    assert_int_equal(series(admin, "sluice_requests_total{", &req2), 1);
    assert_int_equal(series(admin, "sluice_connections_accepted_total{", &acc2), 1);
    assert_int_equal(series(admin, "sluice_client_read_bytes_total{", &bytes2), 1);
    assert_true(req2 >= req1);
    assert_true(acc2 >= acc1);
    assert_true(bytes2 >= bytes1);
    assert_int_equal(stats_count(admin, "\"name\":\"r\""), 1);
    close(moved);
    assert_int_equal(th_stop(&sluice_p), 0);
}

/* ---- 18. the command line --------------------------------------------------------- */

/* Runs <args> with the sluice binary, stderr into stdout; returns the exit
 * status and the output (malloc'd) in *out. */
static int run_cli(const char *args, char **out)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s %s 2>&1", th_sluice_bin(), args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    size_t r;
    while ((r = fread(buf + n, 1, cap - 1 - n, p)) > 0)
        n += r;
    buf[n] = '\0';
    int st = pclose(p);
    *out = buf;
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

static char *write_file(const char *text)
{
    static int seq;
    char *path = malloc(128);
    assert_non_null(path);
    snprintf(path, 128, "/tmp/sluice-test-cli-%d-%d.ini", (int)getpid(), ++seq);
    th_track_file(path);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static void test_cli(void **state)
{
    (void)state;
    char *out;
    assert_int_equal(run_cli("-V", &out), 0);
    assert_string_equal(out, "sluice 0.1.0\n");
    free(out);

    char good[1024];
    snprintf(good, sizeof(good),
             "[sluice]\nadmin =\nshutdown_grace = 2s\n[store]\nurl = local\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = resp\n"
             "idle_timeout = 300s\n",
             th_free_port(), redis_p.port);
    char *gpath = write_file(good);
    char args[512];
    snprintf(args, sizeof(args), "-t -c %s", gpath);
    assert_int_equal(run_cli(args, &out), 0);
    assert_string_equal(out, "configuration OK\n");
    free(out);

    /* -T: the effective configuration, defaults filled in; it loads again. */
    snprintf(args, sizeof(args), "-T -c %s", gpath);
    assert_int_equal(run_cli(args, &out), 0);
    assert_non_null(strstr(out, "[listener r]\n"));
    assert_non_null(strstr(out, "[store]\n"));
    char *mc = strstr(out, "\nmax_connections ");
    assert_non_null(mc);
    assert_true(strncmp(strchr(mc, '=') + 1, " 10000\n", 7) == 0);
    assert_non_null(strstr(out, "\nconnect_timeout = 2s\n"));
    assert_non_null(strstr(out, "\nmax_request     = 512mb\n"));
    char *dpath = write_file(out);
    free(out);
    snprintf(args, sizeof(args), "-t -c %s", dpath);
    assert_int_equal(run_cli(args, &out), 0);
    assert_string_equal(out, "configuration OK\n");
    free(out);

    /* A bad file: FILE:LINE: message for each error, exit 1. */
    char *bpath = write_file("[sluice]\nadmin =\n[listener r]\nlisten = 127.0.0.1:1\n"
                             "upstream = 127.0.0.1:2\nidle_timeout = abc\nbogus = 1\n");
    snprintf(args, sizeof(args), "-t -c %s", bpath);
    assert_int_equal(run_cli(args, &out), 1);
    char want[512];
    snprintf(want, sizeof(want),
             "%s:6: idle_timeout: expected a duration like 250ms, 2s, 5m, got 'abc'\n"
             "%s:7: unknown key 'bogus' in [listener r]\n",
             bpath, bpath);
    assert_string_equal(out, want);
    free(out);
    snprintf(args, sizeof(args), "-T -c %s", bpath);
    assert_int_equal(run_cli(args, &out), 1);
    assert_string_equal(out, want); /* the errors, nothing dumped */
    free(out);

    /* protocol = http loads, without a warning. */
    char *hpath = write_file("[sluice]\nadmin =\n[store]\nurl = local\n[listener api]\n"
                             "listen = 127.0.0.1:1\nupstream = 127.0.0.1:2\nprotocol = http\n");
    snprintf(args, sizeof(args), "-t -c %s", hpath);
    assert_int_equal(run_cli(args, &out), 0);
    snprintf(want, sizeof(want),
             "configuration OK\n");
    assert_string_equal(out, want);
    free(out);
    unlink(hpath);
    free(hpath);

    /* A missing file. */
    assert_int_equal(run_cli("-t -c /nonexistent/sluice.ini", &out), 1);
    assert_non_null(strstr(out, "/nonexistent/sluice.ini:0: cannot open"));
    free(out);

    /* Bad usage. */
    assert_int_equal(run_cli("-v loud -t -c /dev/null", &out), 1);
    free(out);
    assert_int_equal(run_cli("-Z", &out), 1);
    free(out);

    unlink(gpath);
    unlink(dpath);
    unlink(bpath);
    free(gpath);
    free(dpath);
    free(bpath);
}

/* Makes the password file <pw> (a mkstemp template, tracked for removal)
 * with mode <mode>. */
static void secret_file(char *pw, mode_t mode)
{
    int fd = mkstemp(pw);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "s3cret\n", 7), 7);
    close(fd);
    th_track_file(pw);
    assert_int_equal(chmod(pw, mode), 0);
}

/* --version and --help as well as -V and -h; -t warns about a password_file
 * others can read (and still says OK). Before: --help and --version were
 * refused as unknown options and nothing was said about the file's mode. */
static void test_cli_long_options_and_password_mode(void **state)
{
    (void)state;
    char *out;
    assert_int_equal(run_cli("--version", &out), 0);
    assert_string_equal(out, "sluice 0.1.0\n");
    free(out);
    assert_int_equal(run_cli("--help", &out), 0);
    assert_non_null(strstr(out, "usage: sluice"));
    assert_non_null(strstr(out, "-h, --help"));
    assert_non_null(strstr(out, "-V, --version"));
    char *h;
    assert_int_equal(run_cli("-h", &h), 0);
    assert_string_equal(h, out);
    free(h);
    free(out);

    char pw[] = "/tmp/sluice-test-pw-XXXXXX";
    secret_file(pw, 0644);
    char text[512];
    snprintf(text, sizeof(text), "[sluice]\nadmin =\n[store]\nurl = local\npassword_file = %s\n"
             "[listener r]\nlisten = 127.0.0.1:1\nupstream = 127.0.0.1:2\n", pw);
    char *path = write_file(text);
    char args[512], want[1024];
    snprintf(args, sizeof(args), "-t -c %s", path);
    assert_int_equal(run_cli(args, &out), 0);
    snprintf(want, sizeof(want), "%s:5: warning: password_file '%s' is readable by others "
             "(mode 0644): chmod 600 it\nconfiguration OK\n", path, pw);
    assert_string_equal(out, want);
    free(out);
    assert_int_equal(chmod(pw, 0600), 0);
    assert_int_equal(run_cli(args, &out), 0);
    assert_string_equal(out, "configuration OK\n");
    free(out);
    unlink(path);
    free(path);
    unlink(pw);
}

/* A reload with a bad url logs the error with the url's password and query
 * string masked; a password_file readable by others is logged at start and
 * at reload. Before: the url came whole into the log, query password and all. */
static void test_reload_bad_url_redacted(void **state)
{
    (void)state;
    char pw[] = "/tmp/sluice-test-pw-XXXXXX";
    secret_file(pw, 0604);
    char extra[300];
    snprintf(extra, sizeof(extra), "[store]\npassword_file = %s\n", pw);
    int port = th_free_port();
    char ini[2048];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin =\nshutdown_grace = 2s\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n%s",
             port, redis_p.port, extra);
    assert_int_equal(th_sluice_start(&sluice_p, ini, port), 0);
    assert_int_equal(th_log_wait(sluice_p.log, "msg=\"password_file is readable by others\"", 1,
                                 TH_MS), 0);
    assert_true(th_log_count(sluice_p.log, "mode=0604 readers=others") >= 1);

    static const char *const urls[] = { "redis://user:secret@h:1/0?password=secret",
                                        "redis://user@1.2.3.4:1/0?password=secret",
                                        "redisx://user:secret@h:1" };
    for (int i = 0; i < 3; i++) {
        snprintf(ini, sizeof(ini),
                 "[sluice]\nadmin =\nshutdown_grace = 2s\n"
                 "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
                 "[store]\nurl = %s\n", port, redis_p.port, urls[i]);
        rewrite_conf(ini);
        assert_int_equal(kill(sluice_p.pid, SIGHUP), 0);
        assert_int_equal(th_log_wait(sluice_p.log, "msg=\"reload failed", i + 1, TH_MS), 0);
    }
    assert_int_equal(th_log_count(sluice_p.log, "secret"), 0);
    assert_true(th_log_count(sluice_p.log, "?***") >= 1);
    assert_true(th_log_count(sluice_p.log, "user:***@h:1") >= 1);
    close(ping_conn(port)); /* still serving on the running configuration */
    assert_int_equal(th_stop(&sluice_p), 0);
    unlink(pw);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_sigterm_drain, stop_sluice),
        cmocka_unit_test_teardown(test_sigterm_drain_pipeline, stop_sluice),
        cmocka_unit_test_teardown(test_sigterm_idle_process, stop_sluice),
        cmocka_unit_test_teardown(test_sigterm_as_soon_as_listening, stop_sluice),
        cmocka_unit_test_teardown(test_second_sigterm, stop_sluice),
        cmocka_unit_test_teardown(test_shutdown_grace, stop_sluice),
        cmocka_unit_test_teardown(test_drain_tcp_runs_on, stop_sluice),
        cmocka_unit_test_teardown(test_sighup_max_connections, stop_sluice),
        cmocka_unit_test_teardown(test_sighup_idle_timeout_applies_to_existing, stop_sluice),
        cmocka_unit_test_teardown(test_sighup_max_request_applies_to_existing, stop_sluice),
        cmocka_unit_test_teardown(test_sighup_upstream_change, stop_sluice),
        cmocka_unit_test_teardown(test_sighup_listeners_added_removed, stop_sluice),
        cmocka_unit_test_teardown(test_sighup_moved_listener_one_series, stop_sluice),
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_cli_long_options_and_password_mode),
        cmocka_unit_test_teardown(test_reload_bad_url_redacted, stop_sluice),
    };
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

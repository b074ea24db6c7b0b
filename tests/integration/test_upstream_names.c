/* sluice integration tests — an upstream whose name does not resolve yet
 * (issue 23, 5; the same as a quota store's: test_store_names.c): Compose
 * starts sluice before the service it fronts, Kubernetes drops a restarted
 * pod's DNS record for a while.
 *
 * - `-t` warns at the line (exit 0);
 * - sluice starts with `upstream = NAME.invalid` (RFC 6761: never
 *   resolves): a RESP client gets `-ERR upstream unavailable` and is closed,
 *   an HTTP one 502 (docs/interface.md, "upstream unreachable"), a pooled
 *   RESP client `-ERR sluice: upstream connection lost` for each request
 *   and stays connected (a pooled listener's answer to a connection that
 *   cannot be made);
 * - a reload to such a name is no failed reload;
 * - the name starts resolving later: sluice, in its own mount namespace
 *   with a scratch file bound over /etc/hosts (the machine's is never
 *   touched), serves new 1:1 clients and the pooled client that was
 *   answered errors, without a reload; the name stops resolving and a
 *   reload keeps the last good address. Skipped, with a message, where a
 *   mount namespace cannot be made. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "integration/harness.h"

#define PING "*1\r\n$4\r\nPING\r\n"
#define DOWN "-ERR upstream unavailable\r\n"
#define LOST "-ERR sluice: upstream connection lost\r\n"

/* `sluice -t -c <ini text>`: its exit code, its output in <out>; the
 * file's path in <path>. */
static int run_check(const char *ini, char *path, size_t pcap, char *out, size_t cap)
{
    snprintf(path, pcap, "/tmp/sluice-test-upstream-names-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    th_track_file(path);
    assert_int_equal(th_write_all(fd, ini, strlen(ini)), 0);
    close(fd);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        execl(th_sluice_bin(), th_sluice_bin(), "-t", "-c", path, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t k;
    while (n < cap - 1 && (k = read(fds[0], out + n, cap - 1 - n)) > 0)
        n += (size_t)k;
    out[n] = '\0';
    close(fds[0]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_check_warns(void **state)
{
    (void)state;
    char path[128], out[4096], want[512];
    static const char ini[] = "[sluice]\nadmin =\n"
                              "[listener a]\nlisten = 127.0.0.1:1\n"
                              "upstream = upstream-redis.invalid:6379\n";
    int rc = run_check(ini, path, sizeof(path), out, sizeof(out));
    snprintf(want, sizeof(want),
             "%s:5: warning: upstream: cannot resolve 'upstream-redis.invalid' now: ", path);
    if (rc != 0 || strstr(out, want) == NULL)
        print_error("sluice -t said (%d):\n%s", rc, out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "configuration OK"));
}

/* One client's whole exchange: <req> sent, everything read until the close
 * (or TH_MS). */
static char *exchange(int port, const char *req, int *eof)
{
    size_t len;
    char *out = th_transcript(port, req, strlen(req), &len, TH_MS, eof);
    assert_non_null(out);
    return out;
}

static void expect_down(int port)
{
    int eof = 0;
    char *r = exchange(port, PING, &eof);
    if (strcmp(r, DOWN) != 0)
        th_dump("got", r, strlen(r));
    assert_string_equal(r, DOWN);
    assert_true(eof);
    free(r);
}

static void expect_pong(int port)
{
    struct th_conn c;
    assert_int_equal(th_conn_open(&c, port), 0);
    assert_int_equal(th_conn_send(&c, PING), 0);
    char *r = th_conn_reply(&c, TH_MS);
    assert_non_null(r);
    assert_string_equal(r, "+PONG\r\n");
    free(r);
    th_conn_close(&c);
}

/* The reply <c> gets to PING. */
static char *ping(struct th_conn *c)
{
    assert_int_equal(th_conn_send(c, PING), 0);
    char *r = th_conn_reply(c, TH_MS);
    assert_non_null(r);
    return r;
}

static void listeners(char *ini, size_t cap, int admin, const char *host, int up, int a, int p,
                      int h)
{
    snprintf(ini, cap,
             "[sluice]\nadmin = 127.0.0.1:%d\nworkers = 1\n[store]\nurl = local\n"
             "[listener a]\nlisten = 127.0.0.1:%d\nupstream = %s:%d\nprotocol = resp\n"
             "[listener p]\nlisten = 127.0.0.1:%d\nupstream = %s:%d\nprotocol = resp\n"
             "upstream_pool = 2\n"
             "[listener h]\nlisten = 127.0.0.1:%d\nupstream = %s:%d\nprotocol = http\n",
             admin, a, host, up, p, host, up, h, host, up);
}

static void test_start_answers_errors(void **state)
{
    (void)state;
    struct th_proc up, sl;
    assert_int_equal(th_redis_start(&up, NULL), 0);
    int admin = th_free_port(), a = th_free_port(), p = th_free_port(), h = th_free_port();
    char ini[2048];
    listeners(ini, sizeof(ini), admin, "up-never.invalid", up.port, a, p, h);
    assert_int_equal(th_sluice_start(&sl, ini, h), 0);
    assert_int_equal(th_log_wait(sl.log, "upstream name does not resolve", 3, TH_MS), 0);
    expect_down(a);
    expect_down(a);
    /* pooled: each request answered, the client kept */
    struct th_conn c;
    assert_int_equal(th_conn_open(&c, p), 0);
    for (int i = 0; i < 3; i++) {
        char *r = ping(&c);
        if (strcmp(r, LOST) != 0)
            th_dump("pooled got", r, strlen(r));
        assert_string_equal(r, LOST);
        free(r);
    }
    th_conn_close(&c);
    int eof = 0;
    char *r = exchange(h, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", &eof);
    if (strncmp(r, "HTTP/1.1 502 ", 13) != 0)
        th_dump("http got", r, strlen(r));
    assert_memory_equal(r, "HTTP/1.1 502 ", 13);
    free(r);
    /* looked up again while it does not resolve, said once */
    assert_int_equal(
        th_log_wait(sl.log, "upstream name not resolved: retrying, clients get an error", 1, TH_MS),
        0);
    assert_true(th_metric(admin, "sluice_upstream_failures_total{listener=\"a\"}") >= 2);
    assert_true(th_metric(admin, "sluice_resolve_failures_total{listener=\"a\"}") >= 1);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&up);
}

/* A reload to an upstream name that does not resolve is no failed reload. */
static void test_reload_to_unresolvable(void **state)
{
    (void)state;
    struct th_proc up, sl;
    assert_int_equal(th_redis_start(&up, NULL), 0);
    int admin = th_free_port(), a = th_free_port(), p = th_free_port(), h = th_free_port();
    char ini[2048];
    listeners(ini, sizeof(ini), admin, "127.0.0.1", up.port, a, p, h);
    assert_int_equal(th_sluice_start(&sl, ini, h), 0);
    expect_pong(a);
    expect_pong(p);
    listeners(ini, sizeof(ini), admin, "up-gone.invalid", up.port, a, p, h);
    char tmp[300];
    snprintf(tmp, sizeof(tmp), "%s.new", sl.conf);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs(ini, f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(rename(tmp, sl.conf), 0);
    kill(sl.pid, SIGHUP);
    assert_int_equal(th_log_wait(sl.log, "msg=reloaded", 1, TH_MS), 0);
    assert_int_equal(th_log_count(sl.log, "reload failed"), 0);
    assert_int_equal(th_log_wait(sl.log, "upstream name does not resolve", 3, TH_MS), 0);
    expect_down(a);
    struct th_conn c;
    assert_int_equal(th_conn_open(&c, p), 0);
    char *r = ping(&c);
    assert_string_equal(r, LOST);
    free(r);
    th_conn_close(&c);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&up);
}

static void test_name_resolves_later(void **state)
{
    (void)state;
    struct th_proc up, sl;
    assert_int_equal(th_redis_start(&up, NULL), 0);
    char hosts[] = "/tmp/sluice-test-hosts-XXXXXX";
    int fd = mkstemp(hosts);
    assert_true(fd >= 0);
    close(fd);
    th_track_file(hosts);
    assert_int_equal(th_hosts_write(hosts, ""), 0);
    int admin = th_free_port(), a = th_free_port(), p = th_free_port(), h = th_free_port();
    char ini[2048];
    listeners(ini, sizeof(ini), admin, "up-later.invalid", up.port, a, p, h);
    int rc = th_sluice_start_hosts(&sl, ini, h, hosts);
    if (rc == 1) {
        printf("test_upstream_names: skipped: no mount namespace here (%s)\n", sl.log);
        unlink(hosts);
        th_stop(&up);
        skip();
    }
    assert_int_equal(rc, 0);
    expect_down(a);
    struct th_conn c;
    assert_int_equal(th_conn_open(&c, p), 0);
    char *r = ping(&c);
    assert_string_equal(r, LOST);
    free(r);
    /* The name appears: the pooled client, still connected, is served
     * (the listener looks the name up every second, clients or not), and
     * so are new 1:1 clients. Polled: the next lookup is due within 1 s. */
    assert_int_equal(th_hosts_write(hosts, "127.0.0.1 up-later.invalid\n"), 0);
    int served = 0;
    for (uint64_t end = th_now_ms() + TH_MS; !served && th_now_ms() < end;) {
        r = ping(&c);
        served = strcmp(r, "+PONG\r\n") == 0;
        if (!served && strcmp(r, LOST) != 0)
            th_dump("pooled got", r, strlen(r));
        assert_true(served || strcmp(r, LOST) == 0);
        free(r);
        if (!served)
            usleep(50 * 1000);
    }
    assert_true(served);
    assert_int_equal(th_log_wait(sl.log, "upstream name resolved again", 1, TH_MS), 0);
    expect_pong(a);
    /* It goes away again and the file is reloaded: the last good address
     * stays (as a failed lookup at run time keeps it). */
    assert_int_equal(th_hosts_write(hosts, ""), 0);
    kill(sl.pid, SIGHUP);
    assert_int_equal(th_log_wait(sl.log, "msg=reloaded", 1, TH_MS), 0);
    assert_int_equal(th_log_count(sl.log, "reload failed"), 0);
    expect_pong(a);
    r = ping(&c);
    assert_string_equal(r, "+PONG\r\n");
    free(r);
    th_conn_close(&c);
    assert_int_equal(th_stop(&sl), 0);
    unlink(hosts);
    th_stop(&up);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_warns),
        cmocka_unit_test(test_start_answers_errors),
        cmocka_unit_test(test_reload_to_unresolvable),
        cmocka_unit_test(test_name_resolves_later),
    };
    return th_finish(cmocka_run_group_tests(tests, NULL, NULL));
}

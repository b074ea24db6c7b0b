/* sluice integration tests — a quota store whose name does not resolve yet
 * (issue 23, 5): Compose starts sluice before its quota Redis, Kubernetes
 * drops a restarted Redis's DNS record for a while.
 *
 * - `-t` warns (exit 0) for such a store url (a redis:// host, a cluster
 *   seed, a sentinel: store/cluster.c and store/sentinel.c look theirs up
 *   again too: test_cluster, test_sentinel), `-t --no-resolve` passes a
 *   file whose every name is foreign, `--no-resolve` alone is refused;
 * - sluice starts with `url = redis://NAME.invalid` (RFC 6761: never
 *   resolves): on_failure = open lets requests through and /readyz says
 *   ready; on_failure = closed refuses them with the documented error and
 *   /readyz says not ready;
 * - a reload to such a url is no failed reload;
 * - the name starts resolving later: sluice, in its own mount namespace
 *   with a scratch file bound over /etc/hosts (the machine's is never
 *   touched), connects to the store without a reload, within the backoff;
 *   the name stops resolving and a reload keeps the last good address.
 *   Skipped, with a message, where a mount namespace cannot be made. */
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

#define INCR "*2\r\n$4\r\nINCR\r\n$4\r\nhits\r\n"
#define CLOSED_ERR "-THROTTLED limit 'l' cannot be checked (quota store unavailable)"

/* Runs `sluice ARGS -c <ini text>`: its exit code, its output in <out>. */
static int run_check(const char *ini, const char *opt1, const char *opt2, char *out, size_t cap)
{
    char path[] = "/tmp/sluice-test-store-names-XXXXXX";
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
        const char *argv[6] = { th_sluice_bin() };
        int n = 1;
        if (opt1 != NULL)
            argv[n++] = opt1;
        if (opt2 != NULL)
            argv[n++] = opt2;
        argv[n++] = "-c";
        argv[n++] = path;
        argv[n] = NULL;
        execv(argv[0], (char *const *)argv);
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
    unlink(path);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_check_and_no_resolve(void **state)
{
    (void)state;
    char out[4096];
    /* The store's name: a warning, not an error. */
    static const char store_only[] = "[sluice]\nadmin =\n"
                                     "[store]\nurl = redis://quota-redis.invalid:6379\n"
                                     "[listener a]\nlisten = 127.0.0.1:1\nupstream = 127.0.0.1:2\n";
    int rc = run_check(store_only, "-t", NULL, out, sizeof(out));
    if (rc != 0 || strstr(out, ":4: warning: url: cannot resolve 'quota-redis.invalid' now") == NULL)
        print_error("sluice -t said (%d):\n%s", rc, out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, ":4: warning: url: cannot resolve 'quota-redis.invalid' now"));
    assert_non_null(strstr(out, "configuration OK"));
    /* A cluster seed's and a sentinel's: the same. */
    static const char cluster[] = "[sluice]\nadmin =\n"
                                  "[store]\nurl = redis-cluster://seed-a.invalid:7000,"
                                  "127.0.0.1:7001\n"
                                  "[listener a]\nlisten = 127.0.0.1:1\nupstream = 127.0.0.1:2\n";
    rc = run_check(cluster, "-t", NULL, out, sizeof(out));
    if (rc != 0 || strstr(out, ":4: warning: url: cannot resolve 'seed-a.invalid' now") == NULL)
        print_error("sluice -t said (%d):\n%s", rc, out);
    assert_int_equal(rc, 0);
    static const char sentinel[] = "[sluice]\nadmin =\n"
                                   "[store]\nurl = redis-sentinel://sent-a.invalid,"
                                   "sent-b.invalid/m\n"
                                   "[listener a]\nlisten = 127.0.0.1:1\nupstream = 127.0.0.1:2\n";
    rc = run_check(sentinel, "-t", NULL, out, sizeof(out));
    if (rc != 0 || strstr(out, ":4: warning: url: cannot resolve 'sent-b.invalid' now") == NULL)
        print_error("sluice -t said (%d):\n%s", rc, out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, ":4: warning: url: cannot resolve 'sent-a.invalid' now"));

    /* Every name foreign (a Compose file): -t fails (the admin address
     * must resolve: it is bound), -t --no-resolve passes. */
    static const char foreign[] = "[sluice]\nadmin = sluice-admin.invalid:9121\n"
                                  "[store]\nurl = redis://quota-redis.invalid:6379\n"
                                  "[listener a]\nlisten = *:6380\nupstream = upstream-redis.invalid:6379\n"
                                  "[limit l]\nlistener = a\nrate = 10/s\n";
    rc = run_check(foreign, "-t", NULL, out, sizeof(out));
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(out, "admin: cannot resolve 'sluice-admin.invalid'"));
    rc = run_check(foreign, "-t", "--no-resolve", out, sizeof(out));
    if (rc != 0)
        print_error("sluice -t --no-resolve said (%d):\n%s", rc, out);
    assert_int_equal(rc, 0);
    assert_null(strstr(out, "warning"));
    assert_non_null(strstr(out, "configuration OK"));
    /* The rest is still checked. */
    static const char bad[] = "[sluice]\nadmin =\n"
                              "[listener a]\nlisten = *:6380\nupstream = upstream-redis.invalid:6379\n"
                              "[limit l]\nlistener = a\nrate = ten/s\n";
    rc = run_check(bad, "-T", "--no-resolve", out, sizeof(out));
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(out, ":8: rate: expected a rate"));
    /* A server without addresses would serve nothing. */
    rc = run_check(foreign, "--no-resolve", NULL, out, sizeof(out));
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "--no-resolve goes with -t or -T"));
}

/* A sluice in front of <up> with one limit and a store named <url>. */
static void start_with_store(struct th_proc *sl, int *port, int *admin, const struct th_proc *up,
                             const char *url, const char *on_failure)
{
    *port = th_free_port();
    *admin = th_free_port();
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\n"
             "[store]\nurl = %s\non_failure = %s\n"
             "[listener a]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = resp\n"
             "[limit l]\nlistener = a\nrate = 1/s\nburst = 1\n",
             *admin, url, on_failure, *port, up->port);
    assert_int_equal(th_sluice_start(sl, ini, *port), 0);
}

static char *incr(int port)
{
    struct th_conn c;
    assert_int_equal(th_conn_open(&c, port), 0);
    assert_int_equal(th_conn_send(&c, INCR), 0);
    char *r = th_conn_reply(&c, TH_MS);
    th_conn_close(&c);
    assert_non_null(r);
    return r;
}

static void test_start_open(void **state)
{
    (void)state;
    struct th_proc up, sl;
    int port, admin;
    assert_int_equal(th_redis_start(&up, NULL), 0);
    start_with_store(&sl, &port, &admin, &up, "redis://quota-ops.invalid:6379", "open");
    assert_int_equal(th_log_wait(sl.log, "quota store name does not resolve", 1, TH_MS), 0);
    assert_int_equal(th_log_wait(sl.log, "quota store name not resolved: retrying", 1, TH_MS), 0);
    /* rate 1/s burst 1, yet all pass: the store cannot be asked, open. */
    for (int i = 0; i < 4; i++) {
        char *r = incr(port);
        if (r[0] != ':')
            th_dump("reply", r, strlen(r));
        assert_int_equal(r[0], ':');
        free(r);
    }
    char *ready = th_http_get(admin, "/readyz");
    assert_non_null(ready);
    assert_string_equal(ready, "ready\n");
    free(ready);
    assert_true(th_metric(admin, "sluice_store_up") == 0);
    /* Looked up again with backoff (100 ms doubling to 2 s), not once. */
    assert_int_equal(th_log_count(sl.log, "quota store name not resolved: retrying"), 1);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&up);
}

static void test_start_closed(void **state)
{
    (void)state;
    struct th_proc up, sl;
    int port, admin;
    assert_int_equal(th_redis_start(&up, NULL), 0);
    start_with_store(&sl, &port, &admin, &up, "redis://quota-ops.invalid:6379", "closed");
    char *r = incr(port);
    if (strncmp(r, CLOSED_ERR, strlen(CLOSED_ERR)) != 0)
        th_dump("reply", r, strlen(r));
    assert_memory_equal(r, CLOSED_ERR, strlen(CLOSED_ERR));
    free(r);
    char *ready = th_http_get(admin, "/readyz");
    assert_non_null(ready);
    assert_string_equal(ready, "not ready: quota store unreachable and on_failure = closed\n");
    free(ready);
    /* Nothing reached the upstream. */
    char *got = th_redis_cmd(up.port, "GET hits");
    assert_non_null(got);
    assert_string_equal(got, "$-1\r\n");
    free(got);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&up);
}

/* A reload to a url that does not resolve is no failed reload. */
static void test_reload_to_unresolvable(void **state)
{
    (void)state;
    struct th_proc up, store, sl;
    int port, admin;
    assert_int_equal(th_redis_start(&up, NULL), 0);
    assert_int_equal(th_redis_start(&store, NULL), 0);
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", store.port);
    start_with_store(&sl, &port, &admin, &up, url, "closed");
    assert_int_equal(th_metric_wait(admin, "sluice_store_up", 1, TH_MS), 0);
    char *text = th_slurp(sl.conf);
    assert_non_null(text);
    char *at = strstr(text, url);
    assert_non_null(at);
    FILE *f = fopen(sl.conf, "w");
    assert_non_null(f);
    fprintf(f, "%.*sredis://quota-ops.invalid:6379%s", (int)(at - text), text, at + strlen(url));
    fclose(f);
    free(text);
    kill(sl.pid, SIGHUP);
    assert_int_equal(th_log_wait(sl.log, "msg=reloaded", 1, TH_MS), 0);
    assert_int_equal(th_log_count(sl.log, "reload failed"), 0);
    assert_int_equal(th_metric_wait(admin, "sluice_store_up", 0, TH_MS), 0);
    char *r = incr(port);
    assert_memory_equal(r, CLOSED_ERR, strlen(CLOSED_ERR));
    free(r);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&store);
    th_stop(&up);
}

static void test_name_resolves_later(void **state)
{
    (void)state;
    struct th_proc up, store, sl;
    assert_int_equal(th_redis_start(&up, NULL), 0);
    assert_int_equal(th_redis_start(&store, NULL), 0);
    char hosts[] = "/tmp/sluice-test-hosts-XXXXXX";
    int fd = mkstemp(hosts);
    assert_true(fd >= 0);
    close(fd);
    th_track_file(hosts);
    assert_int_equal(th_hosts_write(hosts, ""), 0);
    int port = th_free_port(), admin = th_free_port();
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\n"
             "[store]\nurl = redis://quota-later.invalid:%d\non_failure = closed\n"
             "[listener a]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = resp\n"
             "[limit l]\nlistener = a\nrate = 1000/s\nburst = 1000\n",
             admin, store.port, port, up.port);
    int rc = th_sluice_start_hosts(&sl, ini, port, hosts);
    if (rc == 1) {
        printf("test_store_names: skipped: no mount namespace here (%s)\n", sl.log);
        unlink(hosts);
        th_stop(&store);
        th_stop(&up);
        skip();
    }
    assert_int_equal(rc, 0);
    char *r = incr(port);
    assert_memory_equal(r, CLOSED_ERR, strlen(CLOSED_ERR));
    free(r);
    /* The name appears: the next lookup (within the 2 s backoff cap) finds it. */
    assert_int_equal(th_hosts_write(hosts, "127.0.0.1 quota-later.invalid\n"), 0);
    assert_int_equal(th_metric_wait(admin, "sluice_store_up", 1, TH_MS), 0);
    assert_int_equal(th_log_wait(sl.log, "quota store name resolved again", 1, TH_MS), 0);
    r = incr(port);
    assert_string_equal(r, ":1\r\n");
    free(r);
    assert_true(th_redis_cmd_calls(store.port, "evalsha") > 0);
    /* It goes away again, and the file is reloaded: the last good address
     * stays (as a failed lookup at run time keeps it), so does the store. */
    assert_int_equal(th_hosts_write(hosts, ""), 0);
    kill(sl.pid, SIGHUP);
    assert_int_equal(th_log_wait(sl.log, "msg=reloaded", 1, TH_MS), 0);
    assert_true(th_metric(admin, "sluice_store_up") == 1);
    r = incr(port);
    assert_string_equal(r, ":2\r\n");
    free(r);
    assert_int_equal(th_stop(&sl), 0);
    unlink(hosts);
    th_stop(&store);
    th_stop(&up);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_and_no_resolve),
        cmocka_unit_test(test_start_open),
        cmocka_unit_test(test_start_closed),
        cmocka_unit_test(test_reload_to_unresolvable),
        cmocka_unit_test(test_name_resolves_later),
    };
    return th_finish(cmocka_run_group_tests(tests, NULL, NULL));
}

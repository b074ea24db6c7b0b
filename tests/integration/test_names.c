/* sluice integration tests — host names instead of addresses (issue 13, 1).
 *
 * Real redis-servers and a real sluice whose upstream, store url and admin
 * are given as `localhost` (a name every machine resolves): the names are
 * resolved at load, requests relay through the upstream named so, limits
 * are counted in the store named so, and with resolve_ttl = 0 each new
 * connection waits for a fresh lookup (off the loop) before it connects.
 * `sluice -t` refuses a `listen` name that does not resolve, at its line
 * (an `upstream` one is a warning: tests/integration/test_upstream_names.c). What
 * happens when a name's answer moves or its lookups fail is in
 * tests/unit/core/test_resolve.c (an injected lookup: no DNS server here). */
#include <setjmp.h>
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

/* One RESP command and its whole reply, over <c>. */
static char *ask(struct th_conn *c, const char *cmd)
{
    if (th_conn_send(c, cmd) < 0)
        return NULL;
    return th_conn_reply(c, TH_MS);
}

static void expect_reply(struct th_conn *c, const char *cmd, const char *want)
{
    char *r = ask(c, cmd);
    if (r == NULL || strcmp(r, want) != 0)
        th_dump("reply", r ? r : "(none)", r ? strlen(r) : 6);
    assert_non_null(r);
    assert_string_equal(r, want);
    free(r);
}

static void test_relay_and_store_by_name(void **state)
{
    (void)state;
    struct th_proc up = { 0 }, store = { 0 }, sl = { 0 };
    assert_int_equal(th_redis_start(&up, NULL), 0);
    assert_int_equal(th_redis_start(&store, NULL), 0);
    int p_ttl0 = th_free_port(), p_dflt = th_free_port(), admin = th_free_port();
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = localhost:%d\nshutdown_grace = 2s\n"
             "[store]\nurl = redis://localhost:%d\n"
             "[listener now]\nlisten = 127.0.0.1:%d\nupstream = localhost:%d\nresolve_ttl = 0\n"
             "[listener cached]\nlisten = 127.0.0.1:%d\nupstream = localhost:%d\n"
             "[limit three]\nlistener = now\nrate = 3/m\nburst = 3\ncommands = INCR\n",
             admin, store.port, p_ttl0, up.port, p_dflt, up.port);
    assert_int_equal(th_sluice_start(&sl, ini, p_ttl0), 0);
    assert_int_equal(th_log_wait(sl.log, "quota store up", 1, TH_MS), 0);

    /* resolve_ttl = 0: several connections at once, each after a lookup */
    struct th_conn c[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(th_conn_open(&c[i], p_ttl0), 0);
    for (int i = 0; i < 4; i++)
        expect_reply(&c[i], "PING\r\n", "+PONG\r\n");
    expect_reply(&c[0], "SET k v\r\n", "+OK\r\n");
    expect_reply(&c[1], "GET k\r\n", "$1\r\nv\r\n");
    /* the limit is counted in the store named by its url */
    for (int i = 1; i <= 3; i++) {
        char want[16];
        snprintf(want, sizeof(want), ":%d\r\n", i);
        expect_reply(&c[2], "INCR n\r\n", want);
    }
    char *r = ask(&c[2], "INCR n\r\n");
    assert_non_null(r);
    assert_int_equal(r[0], '-'); /* rejected */
    free(r);
    assert_true(th_redis_cmd_calls(store.port, "evalsha") > 0);
    for (int i = 0; i < 4; i++)
        th_conn_close(&c[i]);

    /* the default resolve_ttl: the answer resolved at load serves */
    struct th_conn d;
    assert_int_equal(th_conn_open(&d, p_dflt), 0);
    expect_reply(&d, "GET k\r\n", "$1\r\nv\r\n");
    th_conn_close(&d);

    /* the admin endpoint listens on the name's address */
    assert_true(th_metric(admin, "sluice_store_up") == 1);
    assert_true(th_metric(admin, "sluice_resolve_failures_total{listener=\"now\"}") == 0);
    assert_true(th_metric(admin, "sluice_upstream_failures_total{listener=\"now\"}") == 0);
    assert_int_equal(th_log_count(sl.log, "upstream name not resolved"), 0);

    assert_int_equal(th_stop(&sl), 0);
    th_stop(&store);
    th_stop(&up);
}

/* `sluice -t` with a listen name that does not resolve: an error at its
 * line (the socket is bound at start: nothing to retry). */
static void test_check_refuses_unresolvable(void **state)
{
    (void)state;
    char path[] = "/tmp/sluice-test-names-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    th_track_file(path);
    /* .invalid never resolves (RFC 6761) */
    static const char ini[] = "[sluice]\nadmin =\n"
                              "[listener a]\nlisten = no-such-host.invalid:6380\nupstream = 127.0.0.1:1\n";
    assert_int_equal(write(fd, ini, sizeof(ini) - 1), (ssize_t)(sizeof(ini) - 1));
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
    char out[4096];
    size_t n = 0;
    ssize_t k;
    while (n < sizeof(out) - 1 && (k = read(fds[0], out + n, sizeof(out) - 1 - n)) > 0)
        n += (size_t)k;
    out[n] = '\0';
    close(fds[0]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    char want[512];
    snprintf(want, sizeof(want), "%s:4: listen: cannot resolve 'no-such-host.invalid': ", path);
    if (strstr(out, want) == NULL)
        print_error("sluice -t said:\n%s", out);
    assert_non_null(strstr(out, want));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_relay_and_store_by_name),
        cmocka_unit_test(test_check_refuses_unresolvable),
    };
    return th_finish(cmocka_run_group_tests(tests, NULL, NULL));
}

/* sluice integration tests — what deploy/ ships, checked without Docker,
 * Kubernetes or systemd (none runs on the project's machines).
 *
 * - the manifests: every JSON and YAML file parses, the compose file and the
 *   Kubernetes manifests hang together and their sluice.ini files pass -t
 *   (tests/deploy/check.py files);
 * - the alert rules pass `promtool check rules` and the cases of
 *   tests/deploy/alerts_test.yaml (skipped where promtool is not installed);
 * - every metric the Grafana dashboard and the alert rules name is one a real
 *   sluice exports, and the dashboard groups by labels they carry: workers = 2
 *   (the master's series), a Redis store, a pooled resp listener, an http one
 *   with upstream_keepalive, a tcp one with proxy_protocol and a limit, so
 *   every family is there with samples;
 * - the compose walk-through: its sluice.ini, run twice on loopback with the
 *   service names replaced, shares one limit: the sixth write through either
 *   instance is refused;
 * - the Dockerfile's steps (tests/deploy/docker-steps.sh), `make install`
 *   with the man page and the unit (tests/deploy/install.sh), and `make deb`
 *   installed into a scratch root (tests/deploy/deb.sh).
 *
 * The scripts print what they skip (man, systemd-analyze, the unit when the
 * tree has none). */
#include <libgen.h>
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

/* Runs <cmd> through sh; its output goes to the test's. 0 when it exited 0. */
static int run(const char *cmd)
{
    fflush(stdout);
    int st = system(cmd);
    return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* The build directory of the sluice under test (build, or build/san). */
static const char *build_dir(void)
{
    static char dir[256];
    snprintf(dir, sizeof(dir), "%s", th_sluice_bin());
    return dirname(dir);
}

static void test_manifests(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "python3 tests/deploy/check.py files %s", th_sluice_bin());
    assert_int_equal(run(cmd), 0);
}

static void test_dashboard_and_alerts_name_exported_metrics(void **state)
{
    (void)state;
    struct th_proc store, sl;
    assert_int_equal(th_redis_start(&store, NULL), 0);
    int admin = th_free_port(), resp = th_free_port(), http = th_free_port();
    char ini[1024];
    /* A pooled resp listener, an http one keeping upstream connections and
     * one taking PROXY headers: every listener family has samples, so the
     * labels the dashboard groups by are checked against real ones. */
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nworkers = 2\n"
             "[store]\nurl = redis://127.0.0.1:%d\n"
             "[listener cache]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = resp\n"
             "upstream_pool = 2\n"
             "[listener api]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "upstream_keepalive = 4\n"
             "[listener edge]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = tcp\n"
             "proxy_protocol = v2\ntrusted_proxies = 127.0.0.1\n"
             "[limit l]\nlistener = *\nrate = 10/s\naction = delay\n",
             admin, store.port, resp, store.port, http, th_free_port(), th_free_port(), store.port);
    assert_int_equal(th_sluice_start(&sl, ini, resp), 0);
    /* Both workers answer before every family is there. */
    char *body = NULL;
    for (uint64_t end = th_now_ms() + TH_MS; th_now_ms() < end; usleep(50 * 1000)) {
        free(body);
        body = th_http_get(admin, "/metrics");
        if (body != NULL && strstr(body, "sluice_workers_answered 2") != NULL)
            break;
    }
    assert_non_null(body);
    char path[] = "/tmp/sluice-metrics.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(th_write_all(fd, body, strlen(body)), 0);
    close(fd);
    free(body);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "python3 tests/deploy/check.py metrics %s", path);
    int rc = run(cmd);
    unlink(path);
    assert_int_equal(rc, 0);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&store);
}

/* deploy/compose/sluice/sluice.ini with its names and ports made local. */
static char *compose_ini(int quota, int upstream, int listen, int admin)
{
    char *text = th_slurp("deploy/compose/sluice/sluice.ini");
    assert_non_null(text);
    static const char *const from[] = { "quota-redis:6379", "upstream-redis:6379", "*:6380", "*:9121" };
    int to[] = { quota, upstream, listen, admin };
    size_t cap = strlen(text) + 256;
    char *out = malloc(cap);
    assert_non_null(out);
    size_t n = 0;
    for (const char *p = text; *p;) {
        int hit = 0;
        for (int i = 0; i < 4 && !hit; i++) {
            size_t len = strlen(from[i]);
            if (strncmp(p, from[i], len) == 0) {
                n += (size_t)snprintf(out + n, cap - n, "127.0.0.1:%d", to[i]);
                p += len;
                hit = 1;
            }
        }
        if (!hit)
            out[n++] = *p++;
        out[n] = '\0';
    }
    free(text);
    assert_non_null(strstr(out, "scope     = global"));
    return out;
}

static void test_compose_limit_shared_by_both_instances(void **state)
{
    (void)state;
    struct th_proc quota, upstream, a, b;
    assert_int_equal(th_redis_start(&quota, NULL), 0);
    assert_int_equal(th_redis_start(&upstream, NULL), 0);
    int pa = th_free_port(), pb = th_free_port();
    char *ia = compose_ini(quota.port, upstream.port, pa, th_free_port());
    char *ib = compose_ini(quota.port, upstream.port, pb, th_free_port());
    assert_int_equal(th_sluice_start(&a, ia, pa), 0);
    assert_int_equal(th_sluice_start(&b, ib, pb), 0);
    free(ia);
    free(ib);
    /* The walk-through: INCR alternately through a and b. */
    int ok = 0, throttled = 0;
    for (int i = 0; i < 8; i++) {
        struct th_conn c;
        assert_int_equal(th_conn_open(&c, i % 2 ? pb : pa), 0);
        assert_int_equal(th_conn_send(&c, "*2\r\n$4\r\nINCR\r\n$4\r\nhits\r\n"), 0);
        char *r = th_conn_reply(&c, TH_MS);
        assert_non_null(r);
        if (r[0] == ':')
            ok++;
        else if (strstr(r, "limit 'demo-writes' exceeded") != NULL)
            throttled++;
        else
            th_dump("unexpected reply", r, strlen(r));
        if (i < 5)
            assert_int_equal(r[0], ':');
        free(r);
        th_conn_close(&c);
    }
    assert_int_equal(ok, 5);
    assert_int_equal(throttled, 3);
    struct th_conn c;
    assert_int_equal(th_conn_open(&c, upstream.port), 0);
    assert_int_equal(th_conn_send(&c, "*2\r\n$3\r\nGET\r\n$4\r\nhits\r\n"), 0);
    char *r = th_conn_reply(&c, TH_MS);
    assert_non_null(r);
    assert_string_equal(r, "$1\r\n5\r\n");
    free(r);
    th_conn_close(&c);
    assert_int_equal(th_stop(&a), 0);
    assert_int_equal(th_stop(&b), 0);
    th_stop(&quota);
    th_stop(&upstream);
}

/* The alert rules with Prometheus' own checker, and the cases of
 * tests/deploy/alerts_test.yaml (SluiceDown on up == 0 and on absent(up),
 * SluiceReloadFailing). promtool comes with Debian's prometheus package
 * (96 MB installed): not installed by `make deps`, so skipped, with a
 * message, where it is absent. */
static void test_alert_rules_promtool(void **state)
{
    (void)state;
    if (run("command -v promtool >/dev/null") != 0) {
        printf("test_deploy: promtool not installed (apt-get install prometheus): "
               "alert rules not checked by it\n");
        skip();
    }
    assert_int_equal(run("promtool check rules deploy/observability/alerts.yaml"), 0);
    assert_int_equal(run("promtool test rules tests/deploy/alerts_test.yaml"), 0);
}

static void test_dockerfile_steps(void **state)
{
    (void)state;
    assert_int_equal(run("tests/deploy/docker-steps.sh"), 0);
}

static void test_make_install(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "tests/deploy/install.sh %s", build_dir());
    assert_int_equal(run(cmd), 0);
}

static void test_deb_installs_and_checks_its_config(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "tests/deploy/deb.sh %s", build_dir());
    assert_int_equal(run(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_manifests),
        cmocka_unit_test(test_dashboard_and_alerts_name_exported_metrics),
        cmocka_unit_test(test_alert_rules_promtool),
        cmocka_unit_test(test_compose_limit_shared_by_both_instances),
        cmocka_unit_test(test_dockerfile_steps),
        cmocka_unit_test(test_make_install),
        cmocka_unit_test(test_deb_installs_and_checks_its_config),
    };
    return th_finish(cmocka_run_group_tests(tests, NULL, NULL));
}

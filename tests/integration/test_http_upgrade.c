/* sluice integration tests — `upgrades` on http listeners (issue 21):
 * one counted request must not buy an HTTP/2 connection whose requests
 * sluice never sees.
 *
 * The upstream is tests/integration/h2c_upstream.js (Node): a raw HTTP/1.1
 * server that answers 101 to any Upgrade and then really speaks HTTP/2
 * (Node's http2 server takes the socket), and Node's h2c server itself
 * (HTTP/2 with prior knowledge). WebSocket upgrades through the default
 * list are covered by test_http (test_upgrade_tunnel). */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cmocka.h>

#include "integration/harness.h"

static struct th_proc node_p, sl;
static int raw_port, h2_port, port_default, port_none, port_connect, port_h2;

/* Reads one response's head and its Content-Length body into <out>
 * (NUL-terminated); returns the status, -1 if none came. Bytes after it
 * stay unread in the socket only when they came later. */
static int response(int fd, char *out, size_t cap, int *closed)
{
    size_t len = 0;
    uint64_t end = th_now_ms() + TH_MS;
    *closed = 0;
    for (;;) {
        out[len] = '\0';
        char *e = strstr(out, "\r\n\r\n");
        if (e != NULL) {
            const char *cl = strcasestr(out, "\r\nContent-Length:");
            size_t want = (size_t)(e - out) + 4 + (cl && cl < e ? strtoul(cl + 17, NULL, 10) : 0);
            if (len >= want)
                return atoi(out + 9);
        }
        uint64_t now = th_now_ms();
        if (now >= end || len + 1 >= cap)
            return -1;
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll(&p, 1, (int)(end - now)) <= 0)
            return -1;
        ssize_t n = read(fd, out + len, cap - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            *closed = 1;
            return e != NULL ? atoi(out + 9) : -1;
        }
        len += (size_t)n;
    }
}

static int send_str(int fd, const char *s)
{
    return th_write_all(fd, s, strlen(s));
}

static void api_get(int fd, const char *path, int want)
{
    char req[256], out[8192];
    int closed;
    snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path);
    assert_int_equal(send_str(fd, req), 0);
    int st = response(fd, out, sizeof(out), &closed);
    if (st != want)
        fail_msg("GET %s: %d, want %d\n%s", path, st, want, out);
}

/* An Upgrade: h2c request goes upstream as a plain request (no Upgrade,
 * no HTTP2-Settings, no Connection naming them), so the upstream answers
 * it in HTTP/1.1 and every later request on the connection is counted:
 * burst 2 on the /api/ prefix lets two through, the third is a 429. */
static void test_h2c_upgrade_counted(void **state)
{
    (void)state;
    int fd = th_connect(port_default);
    assert_true(fd >= 0);
    char out[8192];
    int closed;
    assert_int_equal(send_str(fd, "GET /api/a HTTP/1.1\r\nHost: t\r\n"
                                  "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
                                  "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"),
                     0);
    int st = response(fd, out, sizeof(out), &closed);
    if (st != 200)
        fail_msg("Upgrade: h2c through sluice: %d, want a plain 200\n%s", st, out);
    /* what the upstream saw */
    assert_null(strstr(out, "\"upgrade\""));
    assert_null(strstr(out, "\"http2-settings\""));
    assert_null(strstr(out, "\"connection\""));
    api_get(fd, "/api/b", 200);
    api_get(fd, "/api/c", 429);
    api_get(fd, "/api/d", 429);
    close(fd);
}

/* A 101 that answers no allowed upgrade the request offered is a 502,
 * and the connection ends. */
static void test_101_unoffered_502(void **state)
{
    (void)state;
    static const char *const reqs[] = {
        /* h2c was removed: the upstream switches anyway */
        "GET /force101 HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
        /* websocket asked, h2c answered */
        "GET /as-h2c HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    };
    for (size_t i = 0; i < 2; i++) {
        int fd = th_connect(port_default);
        assert_true(fd >= 0);
        char out[8192];
        int closed;
        assert_int_equal(send_str(fd, reqs[i]), 0);
        int st = response(fd, out, sizeof(out), &closed);
        if (st != 502)
            fail_msg("case %zu: %d, want 502\n%s", i, st, out);
        assert_true(closed || th_wait_eof(fd, TH_MS));
        close(fd);
    }
    /* websocket, asked and answered: a tunnel (the upstream echoes) */
    int fd = th_connect(port_default);
    char out[8192];
    int closed;
    assert_int_equal(send_str(fd, "GET /ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\n"
                                  "Upgrade: websocket\r\n\r\n"),
                     0);
    assert_int_equal(response(fd, out, sizeof(out), &closed), 101);
    assert_int_equal(send_str(fd, "ping"), 0);
    assert_int_equal(th_expect(fd, "ping", 4, TH_MS), 0);
    close(fd);
    /* upgrades = none: even websocket goes as a plain request */
    fd = th_connect(port_none);
    assert_int_equal(send_str(fd, "GET /ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\n"
                                  "Upgrade: websocket\r\n\r\n"),
                     0);
    assert_int_equal(response(fd, out, sizeof(out), &closed), 200);
    assert_null(strstr(out, "\"upgrade\""));
    close(fd);
}

/* CONNECT: 405 and the close unless listed; listed, it goes upstream. */
static void test_connect(void **state)
{
    (void)state;
    char req[256], out[8192];
    int closed;
    snprintf(req, sizeof(req), "CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", raw_port,
             raw_port);
    int fd = th_connect(port_default);
    assert_int_equal(send_str(fd, req), 0);
    assert_int_equal(response(fd, out, sizeof(out), &closed), 405);
    assert_non_null(strstr(out, "Connection: close"));
    assert_true(closed || th_wait_eof(fd, TH_MS));
    close(fd);
    fd = th_connect(port_connect);
    assert_int_equal(send_str(fd, req), 0);
    assert_int_equal(response(fd, out, sizeof(out), &closed), 200); /* the upstream's */
    close(fd);
}

/* HTTP/2 with prior knowledge is not HTTP/1.1: a 400, nothing upstream.
 * Sent through the listener of the HTTP/1.1 upstream: Node's HTTP/2 server
 * speaks first (its SETTINGS), and sluice ends a session whose upstream
 * answers what nobody asked before the client's preface is read, which
 * would race the 400 this test is about. */
static void test_h2_prior_knowledge(void **state)
{
    (void)state;
    int fd = th_connect(port_default);
    char out[8192];
    int closed;
    const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    assert_int_equal(th_write_all(fd, preface, sizeof(preface) - 1), 0);
    assert_int_equal(response(fd, out, sizeof(out), &closed), 400);
    close(fd);
}

static int setup(void **state)
{
    (void)state;
    raw_port = th_free_port();
    h2_port = th_free_port();
    char a[16], b[16];
    snprintf(a, sizeof(a), "%d", raw_port);
    snprintf(b, sizeof(b), "%d", h2_port);
    snprintf(node_p.log, sizeof(node_p.log), "/tmp/sluice-test-h2c-%d.log", raw_port);
    th_track_file(node_p.log);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        FILE *f = freopen(node_p.log, "w", stdout);
        (void)f;
        dup2(1, 2);
        execlp("node", "node", "tests/integration/h2c_upstream.js", a, b, (char *)NULL);
        _exit(127);
    }
    if (pid < 0)
        return -1;
    th_track_pid(pid);
    node_p.pid = pid;
    node_p.port = raw_port;
    char want[64];
    snprintf(want, sizeof(want), "listening %d", raw_port);
    if (th_log_wait(node_p.log, want, 1, 10000) < 0) {
        fprintf(stderr, "the Node upstream did not start (node from the nodejs package)\n");
        return -1;
    }
    port_default = th_free_port();
    port_none = th_free_port();
    port_connect = th_free_port();
    port_h2 = th_free_port();
    char ini[4096];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin =\nshutdown_grace = 1s\n[store]\nurl = local\n"
             "[listener d]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "identity = client_ip\n"
             "[listener n]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "upgrades = none\n"
             "[listener c]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "upgrades = websocket CONNECT\n"
             "[listener h]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "[limit api]\nlistener = d\nrate = 1/h\nburst = 2\npaths = /api/*\n",
             port_default, raw_port, port_none, raw_port, port_connect, raw_port, port_h2, h2_port);
    return th_sluice_start(&sl, ini, port_h2);
}

static int teardown(void **state)
{
    (void)state;
    int st = th_stop(&sl);
    th_stop(&node_p);
    th_kill_all();
    return st == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_h2c_upgrade_counted),
        cmocka_unit_test(test_101_unoffered_502),
        cmocka_unit_test(test_connect),
        cmocka_unit_test(test_h2_prior_knowledge),
    };
    return th_finish(cmocka_run_group_tests(tests, setup, teardown));
}

/* sluice integration tests — the framing of sluice's own HTTP answers
 * (issue 21): what a client that keeps its connection reads after them.
 *
 * - A local answer to HEAD (429, 413, 502, 504) has no body: the next
 *   response on the same keep-alive connection starts right after its
 *   empty line (a client that skips no body must find a status line).
 * - HTTP/1.0 with "Connection: keep-alive": a 429 that leaves the
 *   connection open says "Connection: keep-alive", and the next request on
 *   it is answered at once.
 *
 * Raw sockets, reading exactly what each response's head says; the
 * upstream is tests/integration/http_upstream.py. */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cmocka.h>

#include "integration/harness.h"

static struct th_proc pyup;

/* ---- a client that reads responses the way a strict one does ----------------- */

struct rd {
    int    fd;
    char   buf[65536];
    size_t len;
    int    eof;
};

static int rd_fill(struct rd *r, uint64_t end)
{
    if (r->eof || r->len == sizeof(r->buf))
        return 0;
    for (;;) {
        uint64_t now = th_now_ms();
        if (now >= end)
            return -1;
        struct pollfd p = { .fd = r->fd, .events = POLLIN };
        int n = poll(&p, 1, (int)(end - now));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        ssize_t got = read(r->fd, r->buf + r->len, sizeof(r->buf) - r->len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            r->eof = 1;
            return 0;
        }
        r->len += (size_t)got;
        return 1;
    }
}

/* One response's head into <head> (NUL-terminated), and its body taken
 * off the stream as its Content-Length says, unless <head_req> (a
 * response to HEAD has none, whatever its fields say: RFC 9110 9.3.2).
 * Returns the status, or -1 if no whole head came within <ms>. */
static int rd_response(struct rd *r, int head_req, int ms, char *head, size_t cap)
{
    uint64_t end = th_now_ms() + (uint64_t)ms;
    char *e;
    while ((e = memmem(r->buf, r->len, "\r\n\r\n", 4)) == NULL)
        if (rd_fill(r, end) <= 0)
            return -1;
    size_t hl = (size_t)(e - r->buf) + 4;
    size_t n = hl < cap - 1 ? hl : cap - 1;
    memcpy(head, r->buf, n);
    head[n] = '\0';
    size_t body = 0;
    const char *cl = strcasestr(head, "\r\nContent-Length:");
    if (cl != NULL && !head_req)
        body = strtoul(cl + 17, NULL, 10);
    while (r->len < hl + body)
        if (rd_fill(r, end) <= 0)
            return -1;
    memmove(r->buf, r->buf + hl + body, r->len - hl - body);
    r->len -= hl + body;
    if (strncmp(head, "HTTP/1.", 7) != 0)
        return 0;
    return atoi(head + 9);
}

static int rd_open(struct rd *r, int port)
{
    memset(r, 0, sizeof(*r));
    r->fd = th_connect(port);
    return r->fd;
}

static void start(struct th_proc *p, int port, const char *extra)
{
    char ini[2048];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin =\nshutdown_grace = 1s\n[store]\nurl = local\n"
             "[listener a]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "identity = client_ip\nmax_request = 1kb\nupstream_timeout = 1s\n"
             "[limit lim]\nlistener = a\nrate = 1/h\nburst = 1\npaths = /echo/lim\n%s",
             port, pyup.port, extra);
    assert_int_equal(th_sluice_start(p, ini, port), 0);
}

/* ---- HEAD ------------------------------------------------------------------ */

/* Opens <r> on <port> and spends the limit's one request on it (a 200). */
static void spend_limit(struct rd *r, int port)
{
    char head[4096];
    assert_true(rd_open(r, port) >= 0);
    assert_int_equal(th_write_all(r->fd, "GET /echo/lim HTTP/1.1\r\nHost: t\r\n\r\n", 35), 0);
    assert_int_equal(rd_response(r, 0, TH_MS, head, sizeof(head)), 200);
}

static void test_head_answers_have_no_body(void **state)
{
    (void)state;
    struct th_proc sl;
    int port = th_free_port();
    start(&sl, port, "");
    struct rd r;
    char head[4096];
    /* the limit's one request, then a HEAD it refuses, then a GET: the
     * GET's answer must be the next thing on the wire */
    spend_limit(&r, port);
    const char *two = "HEAD /echo/lim HTTP/1.1\r\nHost: t\r\n\r\n"
                      "GET /echo/x HTTP/1.1\r\nHost: t\r\n\r\n";
    assert_int_equal(th_write_all(r.fd, two, strlen(two)), 0);
    assert_int_equal(rd_response(&r, 1, TH_MS, head, sizeof(head)), 429);
    assert_non_null(strcasestr(head, "\r\nContent-Length: ")); /* what a GET would get */
    assert_int_equal(rd_response(&r, 0, TH_MS, head, sizeof(head)), 200);
    /* and the same pair again: the connection is still in step */
    assert_int_equal(th_write_all(r.fd, two, strlen(two)), 0);
    assert_int_equal(rd_response(&r, 1, TH_MS, head, sizeof(head)), 429);
    assert_int_equal(rd_response(&r, 0, TH_MS, head, sizeof(head)), 200);
    close(r.fd);

    /* 413 (a HEAD with a body above max_request), 502 (the upstream hung
     * up), 504 (upstream_timeout): the head, then the close */
    static const char *const reqs[] = {
        "HEAD /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n",
        "HEAD /hangup HTTP/1.1\r\nHost: t\r\n\r\n",
        "HEAD /slow?secs=3 HTTP/1.1\r\nHost: t\r\n\r\n",
    };
    static const int want[] = { 413, 502, 504 };
    for (size_t i = 0; i < 3; i++) {
        assert_true(rd_open(&r, port) >= 0);
        assert_int_equal(th_write_all(r.fd, reqs[i], strlen(reqs[i])), 0);
        assert_int_equal(rd_response(&r, 1, TH_MS, head, sizeof(head)), want[i]);
        uint64_t end = th_now_ms() + TH_MS;
        while (!r.eof && rd_fill(&r, end) > 0)
            ;
        assert_true(r.eof);
        if (r.len != 0)
            fail_msg("%d to HEAD: %zu bytes after the head", want[i], r.len);
        close(r.fd);
    }
    assert_int_equal(th_stop(&sl), 0);
}

/* ---- HTTP/1.0 keep-alive -------------------------------------------------- */

static void test_http10_keep_alive_answers(void **state)
{
    (void)state;
    struct th_proc sl;
    int port = th_free_port();
    start(&sl, port, "");
    struct rd r;
    char head[4096];
    /* spend the limit on another connection */
    spend_limit(&r, port);
    close(r.fd);

    const char *req = "GET /echo/lim HTTP/1.0\r\nHost: t\r\nConnection: keep-alive\r\n\r\n";
    assert_true(rd_open(&r, port) >= 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(th_write_all(r.fd, req, strlen(req)), 0);
        /* an HTTP/1.0 client takes the connection as closing unless told:
         * the answer says it stays open, and it does */
        assert_int_equal(rd_response(&r, 0, TH_MS, head, sizeof(head)), 429);
        if (strcasestr(head, "\r\nConnection: keep-alive\r\n") == NULL)
            fail_msg("answer %d to an HTTP/1.0 keep-alive request:\n%s", i, head);
        assert_false(r.eof);
    }
    close(r.fd);

    /* without keep-alive: Connection: close, and the close */
    assert_true(rd_open(&r, port) >= 0);
    const char *plain = "GET /echo/lim HTTP/1.0\r\nHost: t\r\n\r\n";
    assert_int_equal(th_write_all(r.fd, plain, strlen(plain)), 0);
    assert_int_equal(rd_response(&r, 0, TH_MS, head, sizeof(head)), 429);
    assert_non_null(strcasestr(head, "\r\nConnection: close\r\n"));
    uint64_t end = th_now_ms() + TH_MS;
    while (!r.eof && rd_fill(&r, end) > 0)
        ;
    assert_true(r.eof);
    close(r.fd);
    assert_int_equal(th_stop(&sl), 0);
}

static int setup(void **state)
{
    (void)state;
    return th_pyup_start(&pyup);
}

static int teardown(void **state)
{
    (void)state;
    th_stop(&pyup);
    th_kill_all();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_head_answers_have_no_body),
        cmocka_unit_test(test_http10_keep_alive_answers),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    return th_finish(failed);
}

/* sluice integration tests — HTTP/1.1 proxying (protocol = http, issue 12).
 *
 * Real upstreams: nginx from Debian (th_nginx_start: a small fixed response,
 * an 8 MiB file, keep-alive on, an access log that names each request's
 * connection) and our own Python server for odd responses
 * (tests/integration/http_upstream.py: echo as JSON, chunked with
 * trailers, close-delimited, 1xx/204/304, 101 then a byte echo, malformed,
 * slow, CL+TE; it counts connections, heads, requests and bytes). Real
 * clients: raw sockets here, curl, and Python's http.client
 * (tests/integration/http_client.py).
 *
 * One sluice for the plain proxying tests (only keys that exist before
 * HTTP: protocol, header_timeout, max_request), started once:
 *   py    -> Python upstream, header_timeout = 1s, max_request = 64mb
 *   ng    -> nginx
 *   down  -> a port where nothing listens
 *   small -> Python upstream, max_request = 1kb
 * and one sluice per test for what needs its own keys (caps,
 * upstream_timeout, limits, rate_limit_headers, trusted_proxies,
 * forwarded_headers, methods/paths/cost, a quota store).
 *
 * HTTP_ONLY=<cmocka pattern> runs only matching tests. */
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
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "integration/harness.h"

#define BIG_LEN (8u << 20) /* nginx's /big.bin */

static struct th_proc sluice_p, pyup;
static struct th_nginx ngx;
static int py_port, ng_port, down_port, small_port;

/* ---- a client connection that reads whole HTTP responses ------------------- */

struct hc {
    int    fd;
    char  *buf;
    size_t len, cap;
    int    eof; /* the peer closed (or reset) */
};

struct hresp {
    int    status;    /* 0: no response head came */
    char  *head;      /* the head as received, NUL-terminated */
    char  *body;      /* decoded (chunk framing removed), NUL-terminated */
    size_t body_len;
    char  *trailers;  /* chunked: the trailer section as received ("" if none) */
    char   sha[65];   /* of the body */
    int    chunked;   /* the body came chunked */
    int    by_close;  /* the body was delimited by the close */
};

static int hc_open(struct hc *c, int port)
{
    memset(c, 0, sizeof(*c));
    c->fd = th_connect(port);
    if (c->fd < 0)
        return -1;
    c->cap = 1 << 16;
    c->buf = malloc(c->cap);
    return c->buf ? 0 : -1;
}

static void hc_close(struct hc *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    free(c->buf);
    c->buf = NULL;
}

static int hc_send(struct hc *c, const void *p, size_t n)
{
    return th_write_all(c->fd, p, n);
}

static int hc_sends(struct hc *c, const char *s)
{
    return hc_send(c, s, strlen(s));
}

/* Reads more into the buffer: 1 when bytes came, 0 on EOF, -1 at <end>. */
static int hc_fill(struct hc *c, uint64_t end)
{
    if (c->eof)
        return 0;
    if (c->len == c->cap) {
        char *nb = realloc(c->buf, c->cap * 2);
        if (nb == NULL)
            return -1;
        c->buf = nb;
        c->cap *= 2;
    }
    for (;;) {
        uint64_t now = th_now_ms();
        if (now >= end)
            return -1;
        struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
        int r = poll(&pfd, 1, (int)(end - now));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        ssize_t n = read(c->fd, c->buf + c->len, c->cap - c->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            c->eof = 1;
            return 0;
        }
        c->len += (size_t)n;
        return 1;
    }
}

static void hc_consume(struct hc *c, size_t n)
{
    memmove(c->buf, c->buf + n, c->len - n);
    c->len -= n;
}

static size_t find_crlf(const char *p, size_t n, size_t from)
{
    for (size_t i = from; i + 1 < n; i++)
        if (p[i] == '\r' && p[i + 1] == '\n')
            return i;
    return SIZE_MAX;
}

static size_t find_end_of_head(const char *p, size_t n)
{
    for (size_t i = 0; i + 3 < n; i++)
        if (memcmp(p + i, "\r\n\r\n", 4) == 0)
            return i + 4;
    return SIZE_MAX;
}

/* The value of the field <name> in <head> (case-insensitive), copied to
 * <out>; 1 if present. */
static int hget(const char *head, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);
    for (const char *s = head; (s = strstr(s, "\r\n")) != NULL; s += 2) {
        if (strncasecmp(s + 2, name, nl) == 0 && s[2 + nl] == ':') {
            const char *v = s + 3 + nl;
            while (*v == ' ' || *v == '\t')
                v++;
            size_t k = 0;
            while (v[k] != '\0' && v[k] != '\r' && k + 1 < cap) {
                out[k] = v[k];
                k++;
            }
            while (k > 0 && (out[k - 1] == ' ' || out[k - 1] == '\t'))
                k--;
            out[k] = '\0';
            return 1;
        }
    }
    return 0;
}

static int has_field(const char *head, const char *name)
{
    char v[8];
    return hget(head, name, v, sizeof(v));
}

static void hresp_free(struct hresp *r)
{
    free(r->head);
    free(r->body);
    free(r->trailers);
    memset(r, 0, sizeof(*r));
}

/* Appends <n> bytes to the body. */
static void body_add(struct hresp *r, size_t *cap, const char *p, size_t n)
{
    if (r->body_len + n + 1 > *cap) {
        while (r->body_len + n + 1 > *cap)
            *cap = *cap ? *cap * 2 : 65536;
        r->body = realloc(r->body, *cap);
        assert_non_null(r->body);
    }
    memcpy(r->body + r->body_len, p, n);
    r->body_len += n;
    r->body[r->body_len] = '\0';
}

/* Reads one response (an interim 1xx counts as one) within <ms>. <head_req>:
 * it answers a HEAD. Returns 0, or -1 if none came whole (r->status tells
 * whether its head did). */
static int hc_response(struct hc *c, int head_req, int ms, struct hresp *r)
{
    memset(r, 0, sizeof(*r));
    uint64_t end = th_now_ms() + (uint64_t)ms;
    size_t hl;
    while ((hl = find_end_of_head(c->buf, c->len)) == SIZE_MAX)
        if (hc_fill(c, end) <= 0) {
            if (c->len > 0)
                th_dump("incomplete response head", c->buf, c->len);
            return -1;
        }
    r->head = malloc(hl + 1);
    memcpy(r->head, c->buf, hl);
    r->head[hl] = '\0';
    hc_consume(c, hl);
    if (strncmp(r->head, "HTTP/1.", 7) != 0 || strlen(r->head) < 12) {
        th_dump("not an HTTP response", r->head, hl);
        return -1;
    }
    r->status = atoi(r->head + 9);
    size_t cap = 0;
    body_add(r, &cap, "", 0);
    r->trailers = strdup("");
    char v[256];
    int no_body = head_req || (r->status >= 100 && r->status < 200) || r->status == 204 || r->status == 304;
    if (no_body) {
        /* nothing */
    } else if (hget(r->head, "Transfer-Encoding", v, sizeof(v)) && strcasestr(v, "chunked") != NULL) {
        r->chunked = 1;
        for (;;) {
            size_t e;
            while ((e = find_crlf(c->buf, c->len, 0)) == SIZE_MAX)
                if (hc_fill(c, end) <= 0)
                    return -1;
            unsigned long long size = strtoull(c->buf, NULL, 16);
            hc_consume(c, e + 2);
            if (size == 0) {
                /* trailers up to the empty line */
                size_t te;
                while (c->len < 2 || ((memcmp(c->buf, "\r\n", 2) != 0) &&
                                      (te = find_end_of_head(c->buf, c->len)) == SIZE_MAX))
                    if (hc_fill(c, end) <= 0)
                        return -1;
                if (memcmp(c->buf, "\r\n", 2) == 0) {
                    hc_consume(c, 2);
                } else {
                    te = find_end_of_head(c->buf, c->len);
                    free(r->trailers);
                    r->trailers = strndup(c->buf, te);
                    hc_consume(c, te);
                }
                break;
            }
            while (c->len < size + 2)
                if (hc_fill(c, end) <= 0)
                    return -1;
            body_add(r, &cap, c->buf, (size_t)size);
            if (memcmp(c->buf + size, "\r\n", 2) != 0) {
                th_dump("chunk not followed by CRLF", c->buf + size, 2);
                return -1;
            }
            hc_consume(c, (size_t)size + 2);
        }
    } else if (hget(r->head, "Content-Length", v, sizeof(v))) {
        size_t want = (size_t)strtoull(v, NULL, 10);
        while (r->body_len < want) {
            if (c->len == 0 && hc_fill(c, end) <= 0)
                return -1;
            size_t k = want - r->body_len < c->len ? want - r->body_len : c->len;
            body_add(r, &cap, c->buf, k);
            hc_consume(c, k);
        }
    } else {
        r->by_close = 1;
        for (;;) {
            body_add(r, &cap, c->buf, c->len);
            c->len = 0;
            int f = hc_fill(c, end);
            if (f == 0)
                break;
            if (f < 0)
                return -1;
        }
    }
    th_sha256_hex(r->body, r->body_len, r->sha);
    return 0;
}

/* The final response: interim 1xx (other than 101) are skipped. */
static int hc_final(struct hc *c, int head_req, int ms, struct hresp *r)
{
    for (;;) {
        if (hc_response(c, head_req, ms, r) < 0)
            return -1;
        if (r->status >= 200 || r->status == 101)
            return 0;
        hresp_free(r);
    }
}

/* 1 if the peer closes within <ms> with nothing more sent. */
static int hc_closes(struct hc *c, int ms)
{
    uint64_t end = th_now_ms() + (uint64_t)ms;
    while (c->len == 0) {
        int f = hc_fill(c, end);
        if (f == 0)
            return 1;
        if (f < 0)
            return 0;
    }
    th_dump("bytes after the response where a close was due", c->buf, c->len);
    return 0;
}

/* One request on a fresh connection; the response in <r>; returns 1 if
 * the connection was closed after it (within 300 ms), else 0. */
static int one_request(int port, const char *req, struct hresp *r)
{
    struct hc c;
    assert_int_equal(hc_open(&c, port), 0);
    assert_int_equal(hc_sends(&c, req), 0);
    int rc = hc_final(&c, strncmp(req, "HEAD ", 5) == 0, TH_MS, r);
    if (rc < 0)
        fprintf(stderr, "no whole response to: %.60s...\n", req);
    assert_int_equal(rc, 0);
    int closed = hc_closes(&c, 300);
    hc_close(&c);
    return closed;
}

static int get_status(int port, const char *req)
{
    struct hresp r;
    one_request(port, req, &r);
    int st = r.status;
    hresp_free(&r);
    return st;
}

/* ---- JSON of the echo (flat lookups: keys are unique in what we send) ---- */

/* The string value of "<key>" in <json> into <out>; 1 if present. */
static int jstr(const char *json, const char *key, char *out, size_t cap)
{
    char pat[128];
    snprintf(pat, sizeof(pat), "\"%s\":\"", key);
    const char *s = strstr(json, pat);
    if (s == NULL)
        return 0;
    s += strlen(pat);
    size_t k = 0;
    while (*s != '\0' && *s != '"' && k + 1 < cap) {
        if (*s == '\\' && s[1] != '\0')
            s++;
        out[k++] = *s++;
    }
    out[k] = '\0';
    return 1;
}

/* The integer value of "<key>" in <json> (spaces allowed around the
 * colon), or LONG_MIN. */
static long jint(const char *json, const char *key)
{
    char pat[128];
    snprintf(pat, sizeof(pat), "\"%s\"", key);
    const char *s = strstr(json, pat);
    if (s == NULL)
        return -999999;
    s += strlen(pat);
    while (*s == ' ')
        s++;
    if (*s++ != ':')
        return -999999;
    while (*s == ' ')
        s++;
    return strtol(s, NULL, 10);
}

/* ---- helpers -------------------------------------------------------------- */

static struct th_pyup_stats pystats(void)
{
    struct th_pyup_stats st;
    assert_int_equal(th_pyup_stats(pyup.port, &st), 0);
    return st;
}

/* Starts a sluice with <body> (listeners and limits) after the common
 * [sluice] and [store] sections; <store_port> 0 = url = local. */
static void start_sluice(struct th_proc *p, int admin, int store_port, const char *body, int wait_port)
{
    char ini[8192], url[64], adm[32] = "";
    if (store_port > 0)
        snprintf(url, sizeof(url), "redis://127.0.0.1:%d", store_port);
    else
        snprintf(url, sizeof(url), "local");
    if (admin > 0)
        snprintf(adm, sizeof(adm), "127.0.0.1:%d", admin);
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = %s\nshutdown_grace = 1s\n[store]\nurl = %s\ntimeout = 250ms\n%s", adm, url,
             body);
    assert_int_equal(th_sluice_start(p, ini, wait_port), 0);
}

static void stop_sluice(struct th_proc *p)
{
    assert_int_equal(th_stop(p), 0);
}

/* A GET with the given extra header lines ("" for none). */
static char *get_req(char *buf, size_t cap, const char *target, const char *extra)
{
    snprintf(buf, cap, "GET %s HTTP/1.1\r\nHost: test\r\n%s\r\n", target, extra);
    return buf;
}

/* ---- setup ------------------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    if (th_pyup_start(&pyup) < 0)
        return -1;
    if (th_nginx_start(&ngx, BIG_LEN) < 0)
        return -1;
    py_port = th_free_port();
    ng_port = th_free_port();
    down_port = th_free_port();
    small_port = th_free_port();
    int nothing = th_free_port();
    char ini[4096];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin =\nshutdown_grace = 2s\n[store]\nurl = local\n"
             "[listener py]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "header_timeout = 1s\nmax_request = 64mb\n"
             "[listener ng]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "[listener down]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "[listener small]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "max_request = 1kb\n",
             py_port, pyup.port, ng_port, ngx.proc.port, down_port, nothing, small_port, pyup.port);
    return th_sluice_start(&sluice_p, ini, small_port);
}

static int group_teardown(void **state)
{
    (void)state;
    int st = th_stop(&sluice_p);
    th_nginx_stop(&ngx);
    th_stop(&pyup);
    th_kill_all();
    if (st != 0) {
        fprintf(stderr, "sluice did not exit cleanly (status %d)\n", st);
        return -1;
    }
    return 0;
}

static int check_alive(void **state)
{
    (void)state;
    return th_alive_or_report(&sluice_p);
}

/* ---- 2. proxying ----------------------------------------------------------------- */

/* 50 requests on one client connection reach nginx on one connection. */
static void test_keepalive_reuse(void **state)
{
    (void)state;
    int before = th_nginx_requests(&ngx, 0, NULL);
    struct hc c;
    assert_int_equal(hc_open(&c, ng_port), 0);
    for (int i = 0; i < 50; i++) {
        struct hresp r;
        assert_int_equal(hc_sends(&c, "GET /small HTTP/1.1\r\nHost: test\r\n\r\n"), 0);
        assert_int_equal(hc_final(&c, 0, TH_MS, &r), 0);
        assert_int_equal(r.status, 200);
        assert_string_equal(r.body, "hello from nginx\n");
        hresp_free(&r);
    }
    hc_close(&c);
    int conns = 0;
    uint64_t end = th_now_ms() + 2000;
    while (th_nginx_requests(&ngx, before, &conns) < 50 && th_now_ms() < end)
        usleep(10000);
    assert_int_equal(th_nginx_requests(&ngx, before, &conns), 50);
    assert_int_equal(conns, 1);

    /* The same against the Python upstream, which says which connection
     * and which request on it each one was. */
    struct th_pyup_stats s0 = pystats();
    assert_int_equal(hc_open(&c, py_port), 0);
    char first_conn[32] = "";
    for (int i = 1; i <= 20; i++) {
        struct hresp r;
        char req[256];
        assert_int_equal(hc_sends(&c, get_req(req, sizeof(req), "/echo", "")), 0);
        assert_int_equal(hc_final(&c, 0, TH_MS, &r), 0);
        assert_int_equal(r.status, 200);
        assert_int_equal(jint(r.body, "nreq"), i);
        char conn[32];
        snprintf(conn, sizeof(conn), "%ld", jint(r.body, "conn"));
        if (i == 1)
            strcpy(first_conn, conn);
        assert_string_equal(conn, first_conn);
        hresp_free(&r);
    }
    hc_close(&c);
    struct th_pyup_stats s1 = pystats();
    assert_int_equal(s1.connections - s0.connections, 1);
    assert_int_equal(s1.requests - s0.requests, 20);
}

/* Requests written in one go are answered in order. */
static void test_pipelining(void **state)
{
    (void)state;
    char reqs[8192];
    size_t n = 0;
    for (int i = 0; i < 10; i++) {
        if (i == 5) /* one with a body in the middle */
            n += (size_t)snprintf(reqs + n, sizeof(reqs) - n,
                                  "POST /echo?i=%d HTTP/1.1\r\nHost: test\r\nContent-Length: 11\r\n\r\nhello world",
                                  i);
        else
            n += (size_t)snprintf(reqs + n, sizeof(reqs) - n, "GET /echo?i=%d HTTP/1.1\r\nHost: test\r\n\r\n", i);
    }
    struct hc c;
    assert_int_equal(hc_open(&c, py_port), 0);
    assert_int_equal(hc_send(&c, reqs, n), 0);
    for (int i = 0; i < 10; i++) {
        struct hresp r;
        assert_int_equal(hc_final(&c, 0, TH_MS, &r), 0);
        assert_int_equal(r.status, 200);
        char target[64], want[64];
        assert_true(jstr(r.body, "target", target, sizeof(target)));
        snprintf(want, sizeof(want), "/echo?i=%d", i);
        assert_string_equal(target, want);
        assert_int_equal(jint(r.body, "body_len"), i == 5 ? 11 : 0);
        hresp_free(&r);
    }
    hc_close(&c);

    /* 20 at once to nginx */
    n = 0;
    for (int i = 0; i < 20; i++)
        n += (size_t)snprintf(reqs + n, sizeof(reqs) - n, "GET /small HTTP/1.1\r\nHost: test\r\n\r\n");
    assert_int_equal(hc_open(&c, ng_port), 0);
    assert_int_equal(hc_send(&c, reqs, n), 0);
    for (int i = 0; i < 20; i++) {
        struct hresp r;
        assert_int_equal(hc_final(&c, 0, TH_MS, &r), 0);
        assert_int_equal(r.status, 200);
        assert_string_equal(r.body, "hello from nginx\n");
        hresp_free(&r);
    }
    hc_close(&c);
}

/* HTTP/1.0: closed after the response; with keep-alive, kept. */
static void test_http10(void **state)
{
    (void)state;
    struct hresp r;
    assert_int_equal(one_request(py_port, "GET /echo HTTP/1.0\r\n\r\n", &r), 1);
    assert_int_equal(r.status, 200);
    assert_int_equal(jint(r.body, "body_len"), 0);
    hresp_free(&r);

    struct hc c;
    assert_int_equal(hc_open(&c, py_port), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(hc_sends(&c, "GET /echo HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"), 0);
        assert_int_equal(hc_final(&c, 0, TH_MS, &r), 0);
        assert_int_equal(r.status, 200);
        hresp_free(&r);
    }
    hc_close(&c);
    /* nginx too */
    assert_int_equal(one_request(ng_port, "GET /small HTTP/1.0\r\n\r\n", &r), 1);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "hello from nginx\n");
    hresp_free(&r);
}

/* Connection: close from the client, and from the upstream. */
static void test_connection_close(void **state)
{
    (void)state;
    struct hresp r;
    assert_int_equal(one_request(py_port, "GET /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", &r), 1);
    assert_int_equal(r.status, 200);
    hresp_free(&r);
    assert_int_equal(one_request(ng_port, "GET /small HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", &r), 1);
    assert_int_equal(r.status, 200);
    hresp_free(&r);
    /* the upstream says close: the client is closed after the response */
    assert_int_equal(one_request(py_port, "GET /echo?close=1 HTTP/1.1\r\nHost: t\r\n\r\n", &r), 1);
    assert_int_equal(r.status, 200);
    char v[64];
    assert_true(hget(r.head, "Connection", v, sizeof(v)));
    assert_true(strcasestr(v, "close") != NULL);
    hresp_free(&r);
    /* and a new connection is served */
    assert_int_equal(get_status(py_port, "GET /echo HTTP/1.1\r\nHost: t\r\n\r\n"), 200);
}

/* Expect: 100-continue: the client hears 100 before it sends the body. */
static void test_expect_continue(void **state)
{
    (void)state;
    const size_t len = 100000;
    char *body = malloc(len), sha[65];
    th_pattern(body, len, 0);
    th_sha256_hex(body, len, sha);
    struct hc c;
    assert_int_equal(hc_open(&c, py_port), 0);
    char head[256];
    snprintf(head, sizeof(head),
             "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\nExpect: 100-continue\r\n\r\n", len);
    assert_int_equal(hc_sends(&c, head), 0);
    struct hresp r;
    assert_int_equal(hc_response(&c, 0, TH_MS, &r), 0);
    assert_int_equal(r.status, 100);
    hresp_free(&r);
    assert_int_equal(hc_send(&c, body, len), 0);
    assert_int_equal(hc_final(&c, 0, TH_MS, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(jint(r.body, "body_len"), (long)len);
    char got[65];
    assert_true(jstr(r.body, "body_sha256", got, sizeof(got)));
    assert_string_equal(got, sha);
    hresp_free(&r);
    hc_close(&c);
    free(body);
}

/* Uploads: 8 MiB by Content-Length, 3 MiB chunked (odd chunk sizes, a
 * trailer), byte-exact at the upstream. */
static void test_upload_bodies(void **state)
{
    (void)state;
    const size_t big = 8u << 20, chunked = 3u << 20;
    char *body = malloc(big), sha[65], got[65], head[256];
    th_pattern(body, big, 12345);
    struct hc c;
    struct hresp r;
    assert_int_equal(hc_open(&c, py_port), 0);

    th_sha256_hex(body, big, sha);
    snprintf(head, sizeof(head), "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\n\r\n", big);
    assert_int_equal(hc_sends(&c, head), 0);
    assert_int_equal(hc_send(&c, body, big), 0);
    assert_int_equal(hc_final(&c, 0, 30000, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(jint(r.body, "body_len"), (long)big);
    assert_true(jstr(r.body, "body_sha256", got, sizeof(got)));
    assert_string_equal(got, sha);
    hresp_free(&r);

    /* chunked on the same connection */
    th_sha256_hex(body, chunked, sha);
    assert_int_equal(hc_sends(&c, "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"), 0);
    size_t off = 0, k = 1;
    while (off < chunked) {
        size_t n = k * 7919 % 300000 + 1; /* 1 byte .. 300 KB */
        if (n > chunked - off)
            n = chunked - off;
        char sz[64];
        snprintf(sz, sizeof(sz), "%zx%s\r\n", n, k % 3 == 0 ? ";ext=1" : "");
        assert_int_equal(hc_sends(&c, sz), 0);
        assert_int_equal(hc_send(&c, body + off, n), 0);
        assert_int_equal(hc_sends(&c, "\r\n"), 0);
        off += n;
        k++;
    }
    assert_int_equal(hc_sends(&c, "0\r\nX-Check: yes\r\n\r\n"), 0);
    assert_int_equal(hc_final(&c, 0, 30000, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(jint(r.body, "body_len"), (long)chunked);
    assert_true(jstr(r.body, "body_sha256", got, sizeof(got)));
    assert_string_equal(got, sha);
    assert_true(jstr(r.body, "x-check", got, sizeof(got))); /* the trailer arrived */
    assert_string_equal(got, "yes");
    hresp_free(&r);
    hc_close(&c);
    free(body);
}

/* Downloads: chunked with trailers, close-delimited, Content-Length, and
 * nginx's 8 MiB file, byte-exact. */
static void test_download_bodies(void **state)
{
    (void)state;
    struct hc c;
    struct hresp r;
    char v[128];
    assert_int_equal(hc_open(&c, py_port), 0);
    assert_int_equal(hc_sends(&c, "GET /chunked?n=200&size=16384 HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    assert_int_equal(hc_final(&c, 0, 30000, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body_len, 200 * 16384);
    assert_true(hget(r.head, "X-Body-Sha256", v, sizeof(v)));
    assert_string_equal(r.sha, v);
    assert_true(r.chunked);
    assert_non_null(strstr(r.trailers, "X-Trailer: done"));
    hresp_free(&r);
    /* then a Content-Length body on the same connection */
    assert_int_equal(hc_sends(&c, "GET /fixed?size=5000000 HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    assert_int_equal(hc_final(&c, 0, 30000, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body_len, 5000000);
    assert_true(hget(r.head, "X-Body-Sha256", v, sizeof(v)));
    assert_string_equal(r.sha, v);
    hresp_free(&r);
    hc_close(&c);

    /* delimited by close: every byte, then the close (or re-framed as
     * chunked, then closed) */
    assert_int_equal(hc_open(&c, py_port), 0);
    assert_int_equal(hc_sends(&c, "GET /close?size=3000000 HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    assert_int_equal(hc_final(&c, 0, 30000, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body_len, 3000000);
    assert_true(hget(r.head, "X-Body-Sha256", v, sizeof(v)));
    assert_string_equal(r.sha, v);
    assert_true(r.by_close || hc_closes(&c, TH_MS));
    hresp_free(&r);
    hc_close(&c);

    /* nginx's file (sendfile upstream) */
    assert_int_equal(hc_open(&c, ng_port), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(hc_sends(&c, "GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
        assert_int_equal(hc_final(&c, 0, 30000, &r), 0);
        assert_int_equal(r.status, 200);
        assert_int_equal(r.body_len, BIG_LEN);
        assert_string_equal(r.sha, ngx.big_sha256);
        hresp_free(&r);
    }
    hc_close(&c);
}

/* HEAD, 204 and 304 have no body (whatever their Content-Length says):
 * the next response on the connection is read right. */
static void test_no_body_responses(void **state)
{
    (void)state;
    struct hc c;
    struct hresp r;
    char v[64];
    const char *const reqs[] = {
        "HEAD /fixed?size=1000 HTTP/1.1\r\nHost: t\r\n\r\n",
        "HEAD /chunked?n=3&size=10 HTTP/1.1\r\nHost: t\r\n\r\n",
        "GET /status/204 HTTP/1.1\r\nHost: t\r\n\r\n",
        "GET /status/304 HTTP/1.1\r\nHost: t\r\nIf-None-Match: \"v1\"\r\n\r\n",
    };
    const int want[] = { 200, 200, 204, 304 };
    assert_int_equal(hc_open(&c, py_port), 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(hc_sends(&c, reqs[i]), 0);
        assert_int_equal(hc_final(&c, i < 2, TH_MS, &r), 0);
        assert_int_equal(r.status, want[i]);
        assert_int_equal(r.body_len, 0);
        if (i == 0) {
            assert_true(hget(r.head, "Content-Length", v, sizeof(v)));
            assert_string_equal(v, "1000");
        }
        hresp_free(&r);
        /* the next one: a small echo, read in full */
        assert_int_equal(hc_sends(&c, "GET /echo?next HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
        assert_int_equal(hc_final(&c, 0, TH_MS, &r), 0);
        assert_int_equal(r.status, 200);
        assert_non_null(strstr(r.body, "\"target\":\"/echo?next\""));
        hresp_free(&r);
    }
    hc_close(&c);
    /* HEAD of nginx's big file */
    assert_int_equal(hc_open(&c, ng_port), 0);
    assert_int_equal(hc_sends(&c, "HEAD /big.bin HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    assert_int_equal(hc_final(&c, 1, TH_MS, &r), 0);
    assert_int_equal(r.status, 200);
    assert_true(hget(r.head, "Content-Length", v, sizeof(v)));
    assert_int_equal(strtoul(v, NULL, 10), BIG_LEN);
    hresp_free(&r);
    assert_int_equal(hc_sends(&c, "GET /small HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    assert_int_equal(hc_final(&c, 0, TH_MS, &r), 0);
    assert_string_equal(r.body, "hello from nginx\n");
    hresp_free(&r);
    hc_close(&c);
}

/* Upgrade: after the upstream's 101 the connection is a tunnel both ways. */
static void test_upgrade_tunnel(void **state)
{
    (void)state;
    struct hc c;
    struct hresp r;
    assert_int_equal(hc_open(&c, py_port), 0);
    assert_int_equal(hc_sends(&c, "GET /upgrade HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\n"
                                  "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"),
                     0);
    assert_int_equal(hc_response(&c, 0, TH_MS, &r), 0);
    assert_int_equal(r.status, 101);
    hresp_free(&r);
    /* bytes that look like HTTP are not HTTP any more */
    const char ping[] = "GET / HTTP/1.1\r\n\r\n\x00\x01\x02 not http";
    assert_int_equal(hc_send(&c, ping, sizeof(ping) - 1), 0);
    uint64_t end = th_now_ms() + TH_MS;
    while (c.len < sizeof(ping) - 1 && hc_fill(&c, end) > 0)
        ;
    assert_int_equal(c.len, sizeof(ping) - 1);
    assert_memory_equal(c.buf, ping, sizeof(ping) - 1);
    c.len = 0;
    /* 1 MiB each way */
    const size_t len = 1u << 20;
    char *data = malloc(len);
    th_pattern(data, len, 99);
    assert_int_equal(th_nonblock(c.fd), 0);
    size_t sent = 0;
    end = th_now_ms() + 20000;
    while ((sent < len || c.len < len) && th_now_ms() < end) {
        if (sent < len) {
            ssize_t w = write(c.fd, data + sent, len - sent);
            if (w > 0)
                sent += (size_t)w;
        }
        if (c.len < len) {
            if (c.len == c.cap) {
                c.buf = realloc(c.buf, c.cap * 2);
                c.cap *= 2;
            }
            ssize_t n = read(c.fd, c.buf + c.len, c.cap - c.len);
            if (n > 0)
                c.len += (size_t)n;
            else if (n == 0)
                break;
            else
                usleep(1000);
        }
    }
    assert_int_equal(c.len, len);
    assert_memory_equal(c.buf, data, len);
    free(data);
    hc_close(&c);
}

/* ---- 3. bad input ----------------------------------------------------------------- */

struct bad_case {
    const char *name;
    const char *bytes;
    size_t      len;   /* 0: strlen */
    int         status;
    int         body;  /* the error is in the body: the head may have gone up, no request did */
};

#define B(s) s, sizeof(s) - 1

static const struct bad_case bad_cases[] = {
    { "CL and TE", B("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), 400, 0 },
    { "TE and CL", B("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n"), 400, 0 },
    { "differing CL", B("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"), 400, 0 },
    { "CL list differing", B("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5, 6\r\n\r\nhello!"), 400, 0 },
    { "CL not a number", B("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: abc\r\n\r\nhello"), 400, 0 },
    { "CL negative", B("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\nhello"), 400, 0 },
    { "CL plus sign", B("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: +5\r\n\r\nhello"), 400, 0 },
    { "CL hex", B("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 0x5\r\n\r\nhello"), 400, 0 },
    { "CL overflow", B("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999999999999999\r\n\r\nhello"), 400, 0 },
    { "TE last not chunked", B("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n"), 400, 0 },
    { "TE gzip only", B("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\nhello"), 400, 0 },
    { "TE unknown", B("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n"), 400, 0 },
    { "obs-fold", B("GET /echo HTTP/1.1\r\nHost: t\r\nX-A: one\r\n two\r\n\r\n"), 400, 0 },
    { "obs-fold tab", B("GET /echo HTTP/1.1\r\nHost: t\r\nX-A: one\r\n\ttwo\r\n\r\n"), 400, 0 },
    { "bare LF", B("GET /echo HTTP/1.1\nHost: t\n\n"), 400, 0 },
    { "bare LF in fields", B("GET /echo HTTP/1.1\r\nHost: t\nX-A: b\r\n\r\n"), 400, 0 },
    { "bare CR", B("GET /echo HTTP/1.1\r\nHost: t\rX-A: b\r\n\r\n"), 400, 0 },
    { "bare CR in value", B("GET /echo HTTP/1.1\r\nHost: t\r\nX-A: a\rb\r\n\r\n"), 400, 0 },
    { "blank before colon", B("GET /echo HTTP/1.1\r\nHost : t\r\n\r\n"), 400, 0 },
    { "tab before colon", B("GET /echo HTTP/1.1\r\nHost\t: t\r\n\r\n"), 400, 0 },
    { "NUL in target", B("GET /ec\0ho HTTP/1.1\r\nHost: t\r\n\r\n"), 400, 0 },
    { "control in target", B("GET /ec\x01ho HTTP/1.1\r\nHost: t\r\n\r\n"), 400, 0 },
    { "NUL in value", B("GET /echo HTTP/1.1\r\nHost: t\r\nX-A: a\0b\r\n\r\n"), 400, 0 },
    { "control in value", B("GET /echo HTTP/1.1\r\nHost: t\r\nX-A: a\x07" "b\r\n\r\n"), 400, 0 },
    { "DEL in name", B("GET /echo HTTP/1.1\r\nHost: t\r\nX-\x7f" "A: b\r\n\r\n"), 400, 0 },
    { "NUL in name", B("GET /echo HTTP/1.1\r\nHost: t\r\nX-\0A: b\r\n\r\n"), 400, 0 },
    { "bad version", B("GET /echo HTTP/1.x\r\nHost: t\r\n\r\n"), 400, 0 },
    { "no version", B("GET /echo\r\nHost: t\r\n\r\n"), 400, 0 },
    { "two spaces", B("GET  /echo HTTP/1.1\r\nHost: t\r\n\r\n"), 400, 0 },
    { "chunk size not hex", B("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"), 400, 1 },
    { "chunk size empty", B("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\r\nhello\r\n0\r\n\r\n"), 400, 1 },
    { "chunk size too long", B("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n00000000000000001\r\nx\r\n0\r\n\r\n"), 400, 1 },
    { "chunk size blank", B("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n0\r\n\r\n"), 400, 1 },
    { "chunk ext control", B("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5;a=\x01\r\nhello\r\n0\r\n\r\n"), 400, 1 },
    { "chunk ext bare LF", B("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5;a\nhello\r\n0\r\n\r\n"), 400, 1 },
    { "chunk data too long", B("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello!!\r\n0\r\n\r\n"), 400, 1 },
    { "trailer obs-fold", B("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: a\r\n b\r\n\r\n"), 400, 1 },
};

/* Each bad request: the exact status, then the close; nothing reached the
 * upstream (not a byte when the head is bad; no whole request when the
 * body is); a client already connected is served before and after. */
static void test_bad_requests(void **state)
{
    (void)state;
    struct hc good;
    struct hresp r;
    assert_int_equal(hc_open(&good, py_port), 0);
    assert_int_equal(hc_sends(&good, "GET /echo HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    assert_int_equal(hc_final(&good, 0, TH_MS, &r), 0);
    assert_int_equal(r.status, 200);
    hresp_free(&r);
    int failures = 0;
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        const struct bad_case *bc = &bad_cases[i];
        struct th_pyup_stats s0 = pystats();
        struct hc c;
        assert_int_equal(hc_open(&c, py_port), 0);
        assert_int_equal(hc_send(&c, bc->bytes, bc->len), 0);
        /* sluice answers these from what it holds: no upstream to wait for */
        int got = hc_response(&c, 0, 3000, &r) == 0 ? r.status : r.status ? r.status : -1;
        int closed = got > 0 && hc_closes(&c, 3000);
        hc_close(&c);
        hresp_free(&r);
        /* what the upstream saw, once sluice has had time to pass it on */
        usleep(50000);
        struct th_pyup_stats s1 = pystats();
        long leaked = bc->body ? s1.requests - s0.requests : s1.bytes - s0.bytes;
        if (got != bc->status || !closed || leaked != 0) {
            fprintf(stderr, "bad input \"%s\": status %d (want %d), %s, upstream got %ld %s\n", bc->name, got,
                    bc->status, closed ? "closed" : "NOT closed", leaked, bc->body ? "requests" : "bytes");
            failures++;
        }
    }
    /* the good client is still served */
    assert_int_equal(hc_sends(&good, "GET /echo HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    assert_int_equal(hc_final(&good, 0, TH_MS, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(jint(r.body, "nreq"), 2);
    hresp_free(&r);
    hc_close(&good);
    assert_int_equal(failures, 0);
}

/* A body past max_request: 413 and the close; nothing reached the upstream. */
static void test_413_max_request(void **state)
{
    (void)state;
    char req[8192];
    int hl = snprintf(req, sizeof(req), "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n");
    memset(req + hl, 'x', 5000);
    struct th_pyup_stats s0 = pystats();
    struct hc c;
    struct hresp r;
    assert_int_equal(hc_open(&c, small_port), 0);
    assert_int_equal(hc_send(&c, req, (size_t)hl + 5000), 0);
    assert_int_equal(hc_response(&c, 0, TH_MS, &r), 0);
    assert_int_equal(r.status, 413);
    assert_true(hc_closes(&c, TH_MS));
    hresp_free(&r);
    hc_close(&c);
    usleep(50000);
    struct th_pyup_stats s1 = pystats();
    assert_int_equal(s1.bytes - s0.bytes, 0);

    /* chunked past it: 413 when the count passes; no whole request went up */
    assert_int_equal(hc_open(&c, small_port), 0);
    assert_int_equal(hc_sends(&c, "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"), 0);
    for (int i = 0; i < 5; i++) {
        char chunk[600];
        memset(chunk, 'y', sizeof(chunk));
        hc_sends(&c, "258\r\n"); /* 600 */
        hc_send(&c, chunk, sizeof(chunk));
        hc_sends(&c, "\r\n");
    }
    hc_sends(&c, "0\r\n\r\n");
    assert_int_equal(hc_response(&c, 0, TH_MS, &r), 0);
    assert_int_equal(r.status, 413);
    assert_true(hc_closes(&c, TH_MS));
    hresp_free(&r);
    hc_close(&c);
    usleep(50000);
    struct th_pyup_stats s2 = pystats();
    assert_int_equal(s2.requests - s1.requests, 0);
    /* within the cap: served */
    assert_int_equal(get_status(small_port, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n"
                                            "0123456789012345678901234567890123456789012345678901234567890123456789"
                                            "0123456789012345678901234567890123456789012345678901234567890123456789"
                                            "0123456789012345678901234567890123456789012345678901234567890123456789"
                                            "0123456789012345678901234567890123456789012345678901234567890123456789"
                                            "0123456789012345678901234567890123456789012345678901234567890123456789"
                                            "0123456789012345678901234567890123456789012345678901234567890123456789"
                                            "0123456789012345678901234567890123456789012345678901234567890123456789"
                                            "0123456789012345678901234567890123456789012345678901234567890123456789"
                                            "0123456789012345678901234567890123456789012345678901234567890123456789"
                                            "0123456789012345678901234567890123456789012345678901234567890123456789"
                                            "0123456789012345678901234567890123456789012345678901234567890123456789"
                                            "0123456789012345678901234567890123456789012345678901234567890123456789"
                                            "0123456789012345678901234567890123456789012345678901234567890123456789"
                                            "0123456789012345678901234567890123456789012345678901234567890123456789"
                                            "012345678901234567890123456789012345678901234567890123456789"),
                     200);
}

/* A head that comes too slowly: 408 after header_timeout (1 s), closed. */
static void test_408_header_timeout(void **state)
{
    (void)state;
    struct th_pyup_stats s0 = pystats();
    struct hc c;
    struct hresp r;
    assert_int_equal(hc_open(&c, py_port), 0);
    uint64_t t0 = th_now_ms();
    assert_int_equal(hc_sends(&c, "GET /echo HTTP/1.1\r\nHost: t\r\n"), 0);
    /* a field every 300 ms does not reset the clock */
    for (int i = 0; i < 2; i++) {
        usleep(300000);
        hc_sends(&c, "X-Slow: yes\r\n");
    }
    assert_int_equal(hc_response(&c, 0, 5000, &r), 0);
    uint64_t took = th_now_ms() - t0;
    assert_int_equal(r.status, 408);
    assert_true(hc_closes(&c, TH_MS));
    hresp_free(&r);
    hc_close(&c);
    fprintf(stderr, "408 after %llu ms (header_timeout 1s)\n", (unsigned long long)took);
    assert_true(took >= 900 && took <= 3000);
    struct th_pyup_stats s1 = pystats();
    assert_int_equal(s1.bytes - s0.bytes, 0);
}

/* 502: nothing at the upstream address; a response that cannot be framed;
 * a response with both Content-Length and Transfer-Encoding is either a
 * 502 or passed on chunked without the Content-Length, never both. */
static void test_502(void **state)
{
    (void)state;
    struct hresp r;
    one_request(down_port, "GET / HTTP/1.1\r\nHost: t\r\n\r\n", &r);
    assert_int_equal(r.status, 502);
    hresp_free(&r);
    one_request(py_port, "GET /malformed HTTP/1.1\r\nHost: t\r\n\r\n", &r);
    assert_int_equal(r.status, 502);
    assert_null(strstr(r.body, "HTTX")); /* none of the upstream's bytes */
    hresp_free(&r);
    one_request(py_port, "GET /malformed-cl HTTP/1.1\r\nHost: t\r\n\r\n", &r);
    assert_int_equal(r.status, 502);
    hresp_free(&r);
    one_request(py_port, "GET /clte HTTP/1.1\r\nHost: t\r\n\r\n", &r);
    if (r.status != 502) {
        assert_int_equal(r.status, 200);
        assert_false(has_field(r.head, "Content-Length"));
        assert_true(r.chunked);
        assert_string_equal(r.body, "hello");
    }
    hresp_free(&r);
    /* and the next client is served as usual */
    assert_int_equal(get_status(py_port, "GET /echo HTTP/1.1\r\nHost: t\r\n\r\n"), 200);
}

/* ---- caps and timeouts (own sluice: new keys) ------------------------------------- */

static void test_caps_414_431(void **state)
{
    (void)state;
    struct th_proc sl;
    int port = th_free_port();
    char body[1024];
    snprintf(body, sizeof(body),
             "[listener caps]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "max_request_line = 1kb\nmax_header_line = 1kb\nmax_headers = 20\nmax_header_size = 4kb\n",
             port, pyup.port);
    start_sluice(&sl, 0, 0, body, port);
    static char req[16384];
    char pad[2100];
    memset(pad, 'a', sizeof(pad) - 1);
    pad[sizeof(pad) - 1] = '\0';
    struct {
        const char *name;
        int         status;
    } cases[5] = { { "request line 2 KB", 414 }, { "field line 2 KB", 431 }, { "25 fields", 431 },
                   { "head 4.8 KB", 431 }, { "within every cap", 200 } };
    for (int i = 0; i < 5; i++) {
        size_t n = 0;
        switch (i) {
        case 0:
            n = (size_t)snprintf(req, sizeof(req), "GET /echo?%s HTTP/1.1\r\nHost: t\r\n\r\n", pad);
            break;
        case 1:
            n = (size_t)snprintf(req, sizeof(req), "GET /echo HTTP/1.1\r\nHost: t\r\nX-Long: %s\r\n\r\n", pad);
            break;
        case 2:
            n = (size_t)snprintf(req, sizeof(req), "GET /echo HTTP/1.1\r\nHost: t\r\n");
            for (int k = 0; k < 24; k++)
                n += (size_t)snprintf(req + n, sizeof(req) - n, "X-F%d: v\r\n", k);
            n += (size_t)snprintf(req + n, sizeof(req) - n, "\r\n");
            break;
        case 3:
            n = (size_t)snprintf(req, sizeof(req), "GET /echo HTTP/1.1\r\nHost: t\r\n");
            for (int k = 0; k < 8; k++)
                n += (size_t)snprintf(req + n, sizeof(req) - n, "X-F%d: %.590s\r\n", k, pad);
            n += (size_t)snprintf(req + n, sizeof(req) - n, "\r\n");
            break;
        case 4: /* 900-byte target, 19 fields, 3.5 KB */
            n = (size_t)snprintf(req, sizeof(req), "GET /echo?%.890s HTTP/1.1\r\nHost: t\r\n", pad);
            for (int k = 0; k < 18; k++)
                n += (size_t)snprintf(req + n, sizeof(req) - n, "X-F%d: %.120s\r\n", k, pad);
            n += (size_t)snprintf(req + n, sizeof(req) - n, "\r\n");
            break;
        }
        req[n] = '\0';
        struct th_pyup_stats s0 = pystats();
        struct hresp r;
        int closed = one_request(port, req, &r);
        usleep(50000);
        struct th_pyup_stats s1 = pystats();
        fprintf(stderr, "%s (%zu bytes): %d, %s, upstream got %ld bytes\n", cases[i].name, n, r.status,
                closed ? "closed" : "open", s1.bytes - s0.bytes);
        assert_int_equal(r.status, cases[i].status);
        if (cases[i].status != 200) {
            assert_true(closed);
            assert_int_equal(s1.bytes - s0.bytes, 0);
        }
        hresp_free(&r);
    }
    stop_sluice(&sl);
}

/* No response head within upstream_timeout: 504. */
static void test_504_upstream_timeout(void **state)
{
    (void)state;
    struct th_proc sl;
    int port = th_free_port();
    char body[512];
    snprintf(body, sizeof(body),
             "[listener slow]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "upstream_timeout = 1s\n",
             port, pyup.port);
    start_sluice(&sl, 0, 0, body, port);
    uint64_t t0 = th_now_ms();
    struct hresp r;
    one_request(port, "GET /slow?secs=4 HTTP/1.1\r\nHost: t\r\n\r\n", &r);
    uint64_t took = th_now_ms() - t0;
    fprintf(stderr, "504 after %llu ms (upstream_timeout 1s)\n", (unsigned long long)took);
    assert_int_equal(r.status, 504);
    assert_true(took >= 900 && took <= 3000);
    hresp_free(&r);
    /* under the timeout: the answer */
    one_request(port, "GET /slow?secs=0.3 HTTP/1.1\r\nHost: t\r\n\r\n", &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "late");
    hresp_free(&r);
    /* a body that stalls after its head: the connection ends within
     * upstream_timeout of the upstream's last byte (the head went out) */
    struct hc c;
    assert_int_equal(hc_open(&c, port), 0);
    t0 = th_now_ms();
    assert_int_equal(hc_sends(&c, "GET /raw?hex=485454502f312e3120323030204f4b0d0a436f6e74656e742d4c656e6774683a2031300d0a0d0a616263&close=0 HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    int f;
    uint64_t until = th_now_ms() + TH_MS;
    while ((f = hc_fill(&c, until)) > 0)
        ;
    assert_int_equal(f, 0); /* closed, not timed out */
    took = th_now_ms() - t0;
    fprintf(stderr, "stalled body closed after %llu ms (upstream_timeout 1s)\n", (unsigned long long)took);
    assert_true(took >= 900 && took <= 3000);
    assert_non_null(strstr(c.buf, "HTTP/1.1 200 OK"));
    hc_close(&c);
    stop_sluice(&sl);
}

/* upstream_timeout holds for every request of a keep-alive connection,
 * not only the first: the deadline and the 504 go by the request's own
 * response (they once looked at the previous response, already whole, and
 * a second request to a stuck upstream waited for ever). An upstream that
 * closes without answering a later request: 502 as for the first. */
static void test_504_after_keepalive(void **state)
{
    (void)state;
    struct th_proc sl;
    int port = th_free_port();
    char body[512];
    snprintf(body, sizeof(body),
             "[listener slow]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "upstream_timeout = 1s\n",
             port, pyup.port);
    start_sluice(&sl, 0, 0, body, port);
    struct hc c;
    struct hresp r;
    assert_int_equal(hc_open(&c, port), 0);
    assert_int_equal(hc_sends(&c, "GET /echo HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    assert_int_equal(hc_final(&c, 0, TH_MS, &r), 0);
    assert_int_equal(r.status, 200);
    hresp_free(&r);
    uint64_t t0 = th_now_ms();
    assert_int_equal(hc_sends(&c, "GET /slow?secs=5 HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    assert_int_equal(hc_final(&c, 0, 4000, &r), 0);
    uint64_t took = th_now_ms() - t0;
    fprintf(stderr, "second request: %d after %llu ms (upstream_timeout 1s)\n", r.status,
            (unsigned long long)took);
    assert_int_equal(r.status, 504);
    assert_true(took >= 900 && took <= 3000);
    hresp_free(&r);
    assert_true(hc_closes(&c, 1000));
    hc_close(&c);
    /* an upstream that closes without answering the second request: 502 */
    assert_int_equal(hc_open(&c, port), 0);
    assert_int_equal(hc_sends(&c, "GET /echo HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    assert_int_equal(hc_final(&c, 0, TH_MS, &r), 0);
    hresp_free(&r);
    assert_int_equal(hc_sends(&c, "GET /hangup HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    assert_int_equal(hc_final(&c, 0, TH_MS, &r), 0);
    assert_int_equal(r.status, 502);
    hresp_free(&r);
    assert_true(hc_closes(&c, 1000));
    hc_close(&c);
    stop_sluice(&sl);
}

/* A 101 to a request that did not ask to upgrade is a 502, not a tunnel
 * nobody agreed to (sluice once passed it on and then swallowed every
 * byte after it, the requests behind it unanswered). */
static void test_101_unasked(void **state)
{
    (void)state;
    struct hc c;
    struct hresp r;
    assert_int_equal(hc_open(&c, py_port), 0);
    assert_int_equal(hc_sends(&c, "GET /switch HTTP/1.1\r\nHost: t\r\n\r\n"
                                  "GET /echo HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    assert_int_equal(hc_final(&c, 0, TH_MS, &r), 0);
    assert_int_equal(r.status, 502);
    hresp_free(&r);
    assert_true(hc_closes(&c, 1000));
    hc_close(&c);
}

/* A client that half-closes after its requests still gets every answer,
 * also when one waits for a delay as the EOF comes (the upstream once
 * saw the half-close first; the delayed request went after it and was
 * lost). */
static void test_half_close_delayed(void **state)
{
    (void)state;
    struct th_proc sl;
    int port = th_free_port();
    char body[1024];
    snprintf(body, sizeof(body),
             "[listener dl]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "identity = client_ip\n"
             "[limit shape]\nlistener = dl\nrate = 4/s\nburst = 1\naction = delay\nmax_delay = 10s\n",
             port, pyup.port);
    start_sluice(&sl, 0, 0, body, port);
    for (int pipelined = 0; pipelined < 2; pipelined++) {
        struct hc c;
        struct hresp r;
        assert_int_equal(hc_open(&c, port), 0);
        /* the first takes the burst; those behind it wait 250 ms each */
        assert_int_equal(hc_sends(&c, "GET /echo?i=0 HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
        assert_int_equal(hc_final(&c, 0, TH_MS, &r), 0);
        hresp_free(&r);
        if (pipelined)
            assert_int_equal(hc_sends(&c, "GET /echo?i=1 HTTP/1.1\r\nHost: t\r\n\r\n"
                                          "GET /echo?i=2 HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
        else
            assert_int_equal(hc_sends(&c, "GET /echo?i=1 HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
        usleep(50000); /* the request is parked when the EOF comes */
        assert_int_equal(shutdown(c.fd, SHUT_WR), 0);
        for (int i = 1; i <= 1 + pipelined; i++) {
            assert_int_equal(hc_final(&c, 0, TH_MS, &r), 0);
            assert_int_equal(r.status, 200);
            char got[32], want[32];
            snprintf(want, sizeof(want), "/echo?i=%d", i);
            assert_true(jstr(r.body, "target", got, sizeof(got)));
            assert_string_equal(got, want);
            hresp_free(&r);
        }
        assert_true(hc_closes(&c, 2000));
        hc_close(&c);
        usleep(600000); /* the burst back */
    }
    stop_sluice(&sl);
}

/* A client that pipelines refused requests and never reads the 429s is
 * not read either once its answers pile up: they once queued in sluice
 * without bound, waiting behind a slow response (the cap on replies owed
 * did not count them) or in the client's write queue (about 200 MB for
 * one connection in 2 s). */
static void test_unread_429s_bounded(void **state)
{
    (void)state;
    struct th_proc sl;
    int port = th_free_port(), admin = th_free_port();
    char body[1024];
    snprintf(body, sizeof(body),
             "[listener rl]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "identity = client_ip\n"
             "[limit none_left]\nlistener = rl\nrate = 1/h\nburst = 1\n",
             port, pyup.port);
    start_sluice(&sl, admin, 0, body, port);
    long rss0 = th_rss_kb(sl.pid);
    int fd = th_connect(port);
    assert_true(fd >= 0);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    /* the one request allowed is slow: the 429s behind it wait their turn */
    static const char slow[] = "GET /slow?secs=4 HTTP/1.1\r\nHost: t\r\n\r\n";
    assert_int_equal(th_write_all(fd, slow, sizeof(slow) - 1), 0);
    assert_int_equal(th_nonblock(fd), 0);
    static const char one[] = "GET /x HTTP/1.1\r\nHost: t\r\n\r\n";
    char *burst = malloc(1000 * (sizeof(one) - 1));
    for (int i = 0; i < 1000; i++)
        memcpy(burst + i * (sizeof(one) - 1), one, sizeof(one) - 1);
    uint64_t end = th_now_ms() + 2500;
    size_t sent = 0;
    while (th_now_ms() < end) {
        ssize_t n = write(fd, burst, 1000 * (sizeof(one) - 1));
        if (n > 0)
            sent += (size_t)n;
        else
            usleep(10000);
    }
    free(burst);
    double rejected = th_metric(admin, "sluice_requests_rejected_total{listener=\"rl\"}");
    long rss1 = th_rss_kb(sl.pid);
    fprintf(stderr, "unread 429s: %zu bytes of requests sent, %.0f refused, RSS %ld -> %ld kB\n", sent,
            rejected, rss0, rss1);
    /* the kernel's buffers hold a few MB of answers; sluice a few hundred kB */
    assert_true(rejected < 60000);
    assert_true(rss1 - rss0 < 64 * 1024);
    close(fd);
    stop_sluice(&sl);
}

/* ---- 4. limits and answers ---------------------------------------------------------- */

/* Checks a 429 as the contract has it: Retry-After in whole seconds (>= 1),
 * problem+json with status 429; returns Retry-After. */
static long check_429(const struct hresp *r)
{
    char v[256];
    assert_int_equal(r->status, 429);
    assert_true(hget(r->head, "Retry-After", v, sizeof(v)));
    char *e;
    long ra = strtol(v, &e, 10);
    assert_true(*e == '\0' && ra >= 1);
    assert_true(hget(r->head, "Content-Type", v, sizeof(v)));
    assert_int_equal(strncmp(v, "application/problem+json", 24), 0);
    assert_int_equal(jint(r->body, "status"), 429);
    assert_non_null(strstr(r->body, "\"title\""));
    return ra;
}

/* 429 with its headers; waiting Retry-After seconds is enough. Nothing of
 * a rejected request reaches the upstream. */
static void test_429_retry_after(void **state)
{
    (void)state;
    struct th_proc sl;
    int port = th_free_port();
    char body[1024];
    snprintf(body, sizeof(body),
             "[listener rl]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "identity = client_ip\n"
             "[limit one_per_s]\nlistener = rl\nrate = 1/s\nburst = 1\n",
             port, pyup.port);
    start_sluice(&sl, 0, 0, body, port);
    struct hc c;
    struct hresp r;
    char req[256];
    assert_int_equal(hc_open(&c, port), 0);
    for (int round = 0; round < 2; round++) {
        struct th_pyup_stats s0 = pystats();
        assert_int_equal(hc_sends(&c, get_req(req, sizeof(req), "/echo", "")), 0);
        assert_int_equal(hc_final(&c, 0, TH_MS, &r), 0);
        assert_int_equal(r.status, 200);
        assert_true(has_field(r.head, "RateLimit")); /* draft: allowed responses carry it */
        hresp_free(&r);
        assert_int_equal(hc_sends(&c, get_req(req, sizeof(req), "/echo", "")), 0);
        assert_int_equal(hc_final(&c, 0, TH_MS, &r), 0);
        long ra = check_429(&r);
        uint64_t t429 = th_now_ms();
        assert_true(has_field(r.head, "RateLimit-Policy"));
        assert_true(has_field(r.head, "RateLimit"));
        fprintf(stderr, "429 round %d: Retry-After %ld\n", round, ra);
        assert_true(ra <= 2);
        hresp_free(&r);
        struct th_pyup_stats s1 = pystats();
        assert_int_equal(s1.requests - s0.requests, 1); /* the 429 did not go up */
        /* honest: after Retry-After seconds the next one is allowed (the
         * loop's first request; on the same connection: a 429 keeps it) */
        uint64_t due = t429 + (uint64_t)ra * 1000;
        while (th_now_ms() < due)
            usleep((useconds_t)((due - th_now_ms()) * 1000));
    }
    hc_close(&c);
    stop_sluice(&sl);
}

/* rate_limit_headers = draft | legacy | both | none. */
static void test_rate_limit_header_modes(void **state)
{
    (void)state;
    static const char *const modes[] = { "draft", "legacy", "both", "none" };
    struct th_proc sl;
    int port[4];
    char body[4096];
    size_t n = 0;
    for (int i = 0; i < 4; i++) {
        port[i] = th_free_port();
        n += (size_t)snprintf(body + n, sizeof(body) - n,
                              "[listener m%s]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
                              "identity = client_ip\nrate_limit_headers = %s\n"
                              "[limit l%s]\nlistener = m%s\nrate = 2/m\nburst = 2\n",
                              modes[i], port[i], pyup.port, modes[i], modes[i], modes[i]);
    }
    start_sluice(&sl, 0, 0, body, port[3]);
    for (int i = 0; i < 4; i++) {
        int draft = i == 0 || i == 2, legacy = i == 1 || i == 2;
        struct hresp r;
        char req[256];
        one_request(port[i], get_req(req, sizeof(req), "/echo", ""), &r);
        assert_int_equal(r.status, 200);
        assert_int_equal(has_field(r.head, "RateLimit"), draft);
        assert_false(has_field(r.head, "RateLimit-Policy") && !draft);
        hresp_free(&r);
        one_request(port[i], get_req(req, sizeof(req), "/echo", ""), &r);
        assert_int_equal(r.status, 200);
        hresp_free(&r);
        one_request(port[i], get_req(req, sizeof(req), "/echo", ""), &r);
        fprintf(stderr, "rate_limit_headers = %s, the 429:\n%s", modes[i], r.head);
        long ra = check_429(&r);
        assert_true(ra >= 1 && ra <= 31); /* 2/m: one token per 30 s */
        char v[256];
        assert_int_equal(hget(r.head, "RateLimit-Policy", v, sizeof(v)), draft);
        if (draft) { /* structured fields: "name";q=2;w=60 and "name";r=0;t=S */
            assert_non_null(strstr(v, ";q=2"));
            assert_non_null(strstr(v, ";w="));
            assert_true(hget(r.head, "RateLimit", v, sizeof(v)));
            assert_non_null(strstr(v, ";r=0"));
            assert_non_null(strstr(v, ";t="));
        } else {
            assert_false(has_field(r.head, "RateLimit"));
        }
        assert_int_equal(hget(r.head, "X-RateLimit-Limit", v, sizeof(v)), legacy);
        if (legacy) {
            assert_int_equal(atoi(v), 2);
            assert_true(hget(r.head, "X-RateLimit-Remaining", v, sizeof(v)));
            assert_int_equal(atoi(v), 0);
            assert_true(hget(r.head, "X-RateLimit-Reset", v, sizeof(v)));
        } else {
            assert_false(has_field(r.head, "X-RateLimit-Remaining"));
            assert_false(has_field(r.head, "X-RateLimit-Reset"));
        }
        hresp_free(&r);
    }
    /* curl -i shows the same to a real client */
    char cmd[256], out[8192];
    snprintf(cmd, sizeof(cmd), "curl -si --max-time 5 http://127.0.0.1:%d/echo 2>&1", port[2]);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t got = fread(out, 1, sizeof(out) - 1, p);
    out[got] = '\0';
    pclose(p);
    fprintf(stderr, "%s\n%s\n", cmd, out);
    assert_int_equal(strncmp(out, "HTTP/1.1 429", 12), 0);
    assert_non_null(strcasestr(out, "\nretry-after: "));
    assert_non_null(strcasestr(out, "\nratelimit-policy: "));
    assert_non_null(strcasestr(out, "\nx-ratelimit-limit: 2"));
    assert_non_null(strstr(out, "429"));
    stop_sluice(&sl);
}

/* A per-API-key limit shared by two instances through the quota store;
 * the key itself never shows in answers, logs or store keys. */
static void test_api_key_shared_store(void **state)
{
    (void)state;
    static const char KEY[] = "k3y-SECRET-alpha-7391";
    struct th_proc store, a, b;
    assert_int_equal(th_redis_start(&store, NULL), 0);
    int pa = th_free_port(), pb = th_free_port();
    char body[1024];
    const char *fmt = "[listener api]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
                      "identity = header:X-Api-Key client_ip\n"
                      "[limit per_key]\nlistener = api\nrate = 3/m\nburst = 3\n";
    snprintf(body, sizeof(body), fmt, pa, pyup.port);
    start_sluice(&a, 0, store.port, body, pa);
    snprintf(body, sizeof(body), fmt, pb, pyup.port);
    start_sluice(&b, 0, store.port, body, pb);
    char req[256], hdr[128];
    snprintf(hdr, sizeof(hdr), "X-Api-Key: %s\r\n", KEY);
    get_req(req, sizeof(req), "/echo", hdr);
    /* 3 allowed across both, then 429 on either */
    const int order[] = { pa, pb, pa, pb, pa };
    const int want[] = { 200, 200, 200, 429, 429 };
    for (int i = 0; i < 5; i++) {
        struct hresp r;
        one_request(order[i], req, &r);
        assert_int_equal(r.status, want[i]);
        if (r.status == 429) {
            check_429(&r);
            assert_null(strstr(r.head, KEY));
            assert_null(strstr(r.body, KEY));
        } else {
            char v[128];
            assert_true(jstr(r.body, "x-api-key", v, sizeof(v))); /* the upstream still gets it */
            assert_string_equal(v, KEY);
        }
        hresp_free(&r);
    }
    /* another key has its own quota; so has no key (client_ip) */
    assert_int_equal(get_status(pb, get_req(req, sizeof(req), "/echo", "X-Api-Key: beta\r\n")), 200);
    assert_int_equal(get_status(pa, get_req(req, sizeof(req), "/echo", "")), 200);
    /* the key in no log and no store key */
    assert_int_equal(th_log_count(a.log, KEY), 0);
    assert_int_equal(th_log_count(b.log, KEY), 0);
    redisContext *rc = redisConnect("127.0.0.1", store.port);
    assert_non_null(rc);
    redisReply *keys = redisCommand(rc, "KEYS *");
    assert_non_null(keys);
    assert_true(keys->elements > 0);
    for (size_t i = 0; i < keys->elements; i++)
        assert_null(strstr(keys->element[i]->str, KEY));
    freeReplyObject(keys);
    redisFree(rc);
    stop_sluice(&a);
    stop_sluice(&b);
    th_stop(&store);
}

/* X-Forwarded-For: trusted only from trusted_proxies (client_ip is the
 * right-most address not in them); X-Forwarded-For / -Proto added unless
 * forwarded_headers = off. */
static void test_forwarded_headers(void **state)
{
    (void)state;
    struct th_proc sl;
    int trust = th_free_port(), notrust = th_free_port(), fwd = th_free_port(), nofwd = th_free_port();
    char body[2048];
    snprintf(body, sizeof(body),
             "[listener trust]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "identity = client_ip\ntrusted_proxies = 127.0.0.0/8 10.0.0.0/8 ::1/128\n"
             "[limit lt]\nlistener = trust\nrate = 1/m\nburst = 1\n"
             "[listener notrust]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "identity = client_ip\n"
             "[limit ln]\nlistener = notrust\nrate = 1/m\nburst = 1\n"
             "[listener fwd]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "[listener nofwd]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "forwarded_headers = off\n",
             trust, pyup.port, notrust, pyup.port, fwd, pyup.port, nofwd, pyup.port);
    start_sluice(&sl, 0, 0, body, nofwd);
    char req[256];
    /* trusted: identities come from the header */
    assert_int_equal(get_status(trust, get_req(req, sizeof(req), "/echo", "X-Forwarded-For: 9.9.9.9\r\n")), 200);
    assert_int_equal(get_status(trust, get_req(req, sizeof(req), "/echo", "X-Forwarded-For: 9.9.9.9\r\n")), 429);
    assert_int_equal(get_status(trust, get_req(req, sizeof(req), "/echo",
                                               "X-Forwarded-For: 8.8.8.8, 10.1.1.1\r\n")), 200);
    assert_int_equal(get_status(trust, get_req(req, sizeof(req), "/echo",
                                               "X-Forwarded-For: 1.1.1.1, 9.9.9.9, 10.2.2.2\r\n")), 429);
    /* a client that lies in front of an untrusted hop gains nothing: the
     * right-most untrusted address is 8.8.8.8, already spent */
    assert_int_equal(get_status(trust, get_req(req, sizeof(req), "/echo",
                                               "X-Forwarded-For: 7.7.7.7, 8.8.8.8\r\n")), 429);
    /* untrusted: the header is ignored, everyone here is 127.0.0.1 */
    assert_int_equal(get_status(notrust, get_req(req, sizeof(req), "/echo", "X-Forwarded-For: 9.9.9.9\r\n")), 200);
    assert_int_equal(get_status(notrust, get_req(req, sizeof(req), "/echo", "X-Forwarded-For: 6.6.6.6\r\n")), 429);

    struct hresp r;
    char v[256];
    one_request(fwd, get_req(req, sizeof(req), "/echo", ""), &r);
    assert_int_equal(r.status, 200);
    assert_true(jstr(r.body, "x-forwarded-for", v, sizeof(v)));
    assert_string_equal(v, "127.0.0.1");
    assert_true(jstr(r.body, "x-forwarded-proto", v, sizeof(v)));
    assert_string_equal(v, "http");
    hresp_free(&r);
    one_request(fwd, get_req(req, sizeof(req), "/echo", "X-Forwarded-For: 1.2.3.4\r\n"), &r);
    assert_true(jstr(r.body, "x-forwarded-for", v, sizeof(v)));
    assert_string_equal(v, "1.2.3.4, 127.0.0.1");
    hresp_free(&r);
    one_request(nofwd, get_req(req, sizeof(req), "/echo", ""), &r);
    assert_int_equal(r.status, 200);
    assert_false(jstr(r.body, "x-forwarded-for", v, sizeof(v)));
    assert_false(jstr(r.body, "x-forwarded-proto", v, sizeof(v)));
    hresp_free(&r);
    one_request(nofwd, get_req(req, sizeof(req), "/echo", "X-Forwarded-For: 1.2.3.4\r\n"), &r);
    assert_true(jstr(r.body, "x-forwarded-for", v, sizeof(v)));
    assert_string_equal(v, "1.2.3.4");
    hresp_free(&r);
    stop_sluice(&sl);
}

/* methods, paths (exact, prefix, glob) and per-method cost. */
static void test_methods_paths_cost(void **state)
{
    (void)state;
    struct th_proc sl;
    int port = th_free_port();
    char body[2048];
    snprintf(body, sizeof(body),
             "[listener mp]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "identity = client_ip\n"
             "[limit exact]\nlistener = mp\nrate = 1/h\nburst = 1\npaths = /echo/exact\n"
             "[limit prefix]\nlistener = mp\nrate = 1/h\nburst = 2\nmethods = GET\npaths = /echo/api/*\n"
             "[limit glob]\nlistener = mp\nrate = 1/h\nburst = 1\npaths = /echo/img/*.png\n"
             "[limit cost]\nlistener = mp\nrate = 1/h\nburst = 6\npaths = /echo/cost/*\ncost = POST=5 *=1\n",
             port, pyup.port);
    start_sluice(&sl, 0, 0, body, port);
    static const struct {
        const char *method, *path;
        int         status;
    } steps[] = {
        { "GET", "/echo/exact", 200 },     { "GET", "/echo/exact", 429 },
        { "GET", "/echo/exact/x", 200 },   { "GET", "/echo/exactly", 200 },
        { "GET", "/echo/exact?q=1", 429 }, /* the query is not the path */
        { "GET", "/echo/api/a", 200 },     { "GET", "/echo/api/b/c", 200 },
        { "GET", "/echo/api/d", 429 },     { "POST", "/echo/api/e", 200 }, /* methods = GET */
        { "DELETE", "/echo/api/f", 200 },  { "GET", "/echo/apix", 200 },
        { "GET", "/echo/img/a.png", 200 }, { "GET", "/echo/img/b.png", 429 },
        { "GET", "/echo/img/a.jpg", 200 }, { "GET", "/echo/img/a.png.txt", 200 },
        { "POST", "/echo/cost/a", 200 },   /* 6 - 5 = 1 left */
        { "POST", "/echo/cost/b", 429 },   { "GET", "/echo/cost/c", 200 }, /* 1 - 1 */
        { "GET", "/echo/cost/d", 429 },    { "GET", "/echo/other", 200 },
    };
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        char req[256];
        snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n", steps[i].method,
                 steps[i].path);
        int st = get_status(port, req);
        if (st != steps[i].status)
            fail_msg("%s %s: %d, want %d", steps[i].method, steps[i].path, st, steps[i].status);
    }
    stop_sluice(&sl);
}

/* /metrics counts the responses clients got per listener and status
 * class, the upstream's and sluice's own (a 429, a 400). */
static void test_metrics_by_class(void **state)
{
    (void)state;
    struct th_proc sl;
    int port = th_free_port(), admin = th_free_port();
    char body[1024];
    snprintf(body, sizeof(body),
             "[listener mx]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "[limit once]\nlistener = mx\nrate = 1/m\nburst = 1\n",
             port, pyup.port);
    start_sluice(&sl, admin, 0, body, port);
    char req[256];
    get_req(req, sizeof(req), "/echo", "");
    assert_int_equal(get_status(port, req), 200);
    assert_int_equal(get_status(port, req), 429);
    assert_int_equal(get_status(port, req), 429);
    assert_int_equal(get_status(port, "GET / HTTP/1.1\r\nHost : x\r\n\r\n"), 400);
    assert_int_equal(th_metric(admin, "sluice_http_responses_total{listener=\"mx\",class=\"2xx\"}"), 1);
    assert_int_equal(th_metric(admin, "sluice_http_responses_total{listener=\"mx\",class=\"4xx\"}"), 3);
    assert_int_equal(th_metric(admin, "sluice_http_responses_total{listener=\"mx\",class=\"5xx\"}"), 0);
    assert_int_equal(th_metric(admin, "sluice_requests_rejected_total{listener=\"mx\"}"), 2);
    assert_int_equal(th_metric(admin, "sluice_protocol_errors_total{listener=\"mx\"}"), 1);
    stop_sluice(&sl);
}

/* Over a connection limit: 429 with Connection: close, then the close. */
static void test_connection_limit(void **state)
{
    (void)state;
    struct th_proc sl;
    int port = th_free_port();
    char body[1024];
    snprintf(body, sizeof(body),
             "[listener cl]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "identity = client_ip\n"
             "[limit one_conn]\nlistener = cl\nmetric = connections\nmax = 1\n",
             port, pyup.port);
    start_sluice(&sl, 0, 0, body, port);
    struct hc a, b;
    struct hresp r;
    char req[256], v[64];
    get_req(req, sizeof(req), "/echo", "");
    /* the harness's probe of the port held the place until sluice saw it
     * leave (after its upstream connect): a few milliseconds */
    uint64_t until = th_now_ms() + TH_MS;
    for (;;) {
        assert_int_equal(hc_open(&a, port), 0);
        assert_int_equal(hc_sends(&a, req), 0);
        assert_int_equal(hc_final(&a, 0, TH_MS, &r), 0);
        if (r.status == 200 || th_now_ms() > until)
            break;
        hresp_free(&r);
        hc_close(&a);
        usleep(20000);
    }
    assert_int_equal(r.status, 200);
    hresp_free(&r);
    assert_int_equal(hc_open(&b, port), 0);
    assert_int_equal(hc_sends(&b, req), 0);
    assert_int_equal(hc_final(&b, 0, TH_MS, &r), 0);
    assert_int_equal(r.status, 429);
    assert_true(hget(r.head, "Connection", v, sizeof(v)));
    assert_true(strcasestr(v, "close") != NULL);
    assert_true(hc_closes(&b, TH_MS));
    hresp_free(&r);
    hc_close(&b);
    /* the first one is still served; once it goes, a new one is */
    assert_int_equal(hc_sends(&a, req), 0);
    assert_int_equal(hc_final(&a, 0, TH_MS, &r), 0);
    assert_int_equal(r.status, 200);
    hresp_free(&r);
    hc_close(&a);
    int ok = 0;
    uint64_t end = th_now_ms() + TH_MS;
    while (!ok && th_now_ms() < end) {
        ok = get_status(port, req) == 200;
        if (!ok)
            usleep(20000);
    }
    assert_true(ok);
    stop_sluice(&sl);
}

/* action = delay on requests: all answered, in order, never ahead of the
 * rate (the same check as test_shape's: admissions by time t <= burst + 1
 * + rate x t, times from before the first request). */
static void test_delay_requests(void **state)
{
    (void)state;
    struct th_proc sl;
    int port = th_free_port();
    char body[1024];
    snprintf(body, sizeof(body),
             "[listener dl]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "identity = client_ip\n"
             "[limit shape]\nlistener = dl\nrate = 20/s\nburst = 2\naction = delay\nmax_delay = 10s\n",
             port, pyup.port);
    start_sluice(&sl, 0, 0, body, port);
    enum { N = 32 };
    uint64_t t[N];
    struct hc c;
    uint64_t t0 = th_now_ms();
    assert_int_equal(hc_open(&c, port), 0);
    /* half one by one, half pipelined */
    for (int i = 0; i < N; i++) {
        char req[256], target[32];
        snprintf(target, sizeof(target), "/echo?i=%d", i);
        if (i <= N / 2)
            assert_int_equal(hc_sends(&c, get_req(req, sizeof(req), target, "")), 0);
        if (i == N / 2) /* the rest in one go */
            for (int k = i + 1; k < N; k++) {
                snprintf(target, sizeof(target), "/echo?i=%d", k);
                assert_int_equal(hc_sends(&c, get_req(req, sizeof(req), target, "")), 0);
            }
        struct hresp r;
        assert_int_equal(hc_final(&c, 0, TH_MS, &r), 0);
        t[i] = th_now_ms() - t0;
        assert_int_equal(r.status, 200);
        char got[32];
        assert_true(jstr(r.body, "target", got, sizeof(got)));
        snprintf(target, sizeof(target), "/echo?i=%d", i);
        assert_string_equal(got, target);
        hresp_free(&r);
    }
    hc_close(&c);
    for (int i = 0; i < N; i++)
        if ((double)(i + 1) > 2.0 + 1.0 + 20.0 * (double)t[i] / 1000.0)
            fail_msg("request %d answered at %llu ms: ahead of 20/s + burst 2", i, (unsigned long long)t[i]);
    double slope = (double)(N - 1 - 4) * 1000.0 / (double)(t[N - 1] - t[4]);
    fprintf(stderr, "delay: %d requests, last at %llu ms, steady rate %.1f/s (limit 20/s)\n", N,
            (unsigned long long)t[N - 1], slope);
    assert_true(slope >= 17.0 && slope <= 21.0);
    stop_sluice(&sl);
}

/* bytes_out shaping of a download: the 8 MiB file at 4 MiB/s takes about
 * (8 MiB - burst) / 4 MiB/s, byte-exact. */
static void test_delay_download(void **state)
{
    (void)state;
    struct th_proc sl;
    int port = th_free_port();
    char body[1024];
    snprintf(body, sizeof(body),
             "[listener bw]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "identity = client_ip\n"
             "[limit down]\nlistener = bw\nmetric = bytes_out\nrate = 4MiB/s\nburst = 256KiB\naction = delay\n",
             port, ngx.proc.port);
    start_sluice(&sl, 0, 0, body, port);
    struct hc c;
    struct hresp r;
    uint64_t t0 = th_now_ms();
    assert_int_equal(hc_open(&c, port), 0);
    assert_int_equal(hc_sends(&c, "GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    assert_int_equal(hc_final(&c, 0, 30000, &r), 0);
    double took = (double)(th_now_ms() - t0) / 1000.0;
    double want = (double)(BIG_LEN - 256 * 1024) / (4.0 * 1024 * 1024);
    fprintf(stderr, "bytes_out 4MiB/s: 8 MiB in %.2f s (expected %.2f s)\n", took, want);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body_len, BIG_LEN);
    assert_string_equal(r.sha, ngx.big_sha256);
    assert_true(took >= want * 0.9 && took <= want * 1.25 + 0.3);
    hresp_free(&r);
    /* small requests on the same connection still go (bytes are owed, not requests) */
    assert_int_equal(hc_sends(&c, "GET /small HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    assert_int_equal(hc_final(&c, 0, TH_MS, &r), 0);
    assert_int_equal(r.status, 200);
    hresp_free(&r);
    hc_close(&c);
    stop_sluice(&sl);
}

/* ---- real clients ------------------------------------------------------------------ */

/* Python's http.client against a plain listener and a limited one
 * (tests/integration/http_client.py says what it checks). */
static void test_python_http_client(void **state)
{
    (void)state;
    struct th_proc sl;
    int plain = th_free_port(), limited = th_free_port();
    char body[1024];
    snprintf(body, sizeof(body),
             "[listener plain]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "[listener limited]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "identity = client_ip\n"
             "[limit one]\nlistener = limited\nrate = 1/m\nburst = 1\n",
             plain, pyup.port, limited, pyup.port);
    start_sluice(&sl, 0, 0, body, limited);
    char cmd[256], out[4096];
    snprintf(cmd, sizeof(cmd), "python3 tests/integration/http_client.py %d %d 2>&1", plain, limited);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t got = fread(out, 1, sizeof(out) - 1, p);
    out[got] = '\0';
    int st = pclose(p);
    fprintf(stderr, "%s\n%s", cmd, out);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "http.client: ok"));
    stop_sluice(&sl);
}

/* curl: a chunked upload and a download through the plain listeners. */
static void test_curl(void **state)
{
    (void)state;
    char path[64], cmd[512], out[8192];
    snprintf(path, sizeof(path), "/tmp/sluice-test-http-%d.bin", (int)getpid());
    th_track_file(path);
    const size_t len = 2u << 20;
    char *data = malloc(len), sha[65];
    th_pattern(data, len, 7);
    th_sha256_hex(data, len, sha);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
    free(data);
    snprintf(cmd, sizeof(cmd),
             "curl -s --max-time 20 -H 'Transfer-Encoding: chunked' --data-binary @%s http://127.0.0.1:%d/echo",
             path, py_port);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t got = fread(out, 1, sizeof(out) - 1, p);
    out[got] = '\0';
    assert_int_equal(pclose(p), 0);
    char v[128];
    assert_int_equal(jint(out, "body_len"), (long)len);
    assert_true(jstr(out, "body_sha256", v, sizeof(v)));
    assert_string_equal(v, sha);
    assert_true(jstr(out, "transfer-encoding", v, sizeof(v)));
    assert_string_equal(v, "chunked");
    /* download nginx's file with curl into the same file, hash it */
    snprintf(cmd, sizeof(cmd), "curl -sf --max-time 20 -o %s http://127.0.0.1:%d/big.bin", path, ng_port);
    assert_int_equal(system(cmd), 0);
    char *dl = th_slurp(path);
    assert_non_null(dl);
    f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fclose(f);
    assert_int_equal(sz, BIG_LEN);
    th_sha256_hex(dl, (size_t)sz, v);
    assert_string_equal(v, ngx.big_sha256);
    free(dl);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_keepalive_reuse, check_alive),
        cmocka_unit_test_teardown(test_pipelining, check_alive),
        cmocka_unit_test_teardown(test_http10, check_alive),
        cmocka_unit_test_teardown(test_connection_close, check_alive),
        cmocka_unit_test_teardown(test_expect_continue, check_alive),
        cmocka_unit_test_teardown(test_upload_bodies, check_alive),
        cmocka_unit_test_teardown(test_download_bodies, check_alive),
        cmocka_unit_test_teardown(test_no_body_responses, check_alive),
        cmocka_unit_test_teardown(test_upgrade_tunnel, check_alive),
        cmocka_unit_test_teardown(test_bad_requests, check_alive),
        cmocka_unit_test_teardown(test_413_max_request, check_alive),
        cmocka_unit_test_teardown(test_408_header_timeout, check_alive),
        cmocka_unit_test_teardown(test_502, check_alive),
        cmocka_unit_test_teardown(test_curl, check_alive),
        cmocka_unit_test_teardown(test_caps_414_431, check_alive),
        cmocka_unit_test_teardown(test_504_upstream_timeout, check_alive),
        cmocka_unit_test_teardown(test_504_after_keepalive, check_alive),
        cmocka_unit_test_teardown(test_101_unasked, check_alive),
        cmocka_unit_test_teardown(test_half_close_delayed, check_alive),
        cmocka_unit_test_teardown(test_unread_429s_bounded, check_alive),
        cmocka_unit_test_teardown(test_429_retry_after, check_alive),
        cmocka_unit_test_teardown(test_rate_limit_header_modes, check_alive),
        cmocka_unit_test_teardown(test_api_key_shared_store, check_alive),
        cmocka_unit_test_teardown(test_forwarded_headers, check_alive),
        cmocka_unit_test_teardown(test_methods_paths_cost, check_alive),
        cmocka_unit_test_teardown(test_connection_limit, check_alive),
        cmocka_unit_test_teardown(test_metrics_by_class, check_alive),
        cmocka_unit_test_teardown(test_delay_requests, check_alive),
        cmocka_unit_test_teardown(test_delay_download, check_alive),
        cmocka_unit_test_teardown(test_python_http_client, check_alive),
    };
    const char *only = getenv("HTTP_ONLY");
    if (only != NULL && *only != '\0')
        cmocka_set_test_filter(only);
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

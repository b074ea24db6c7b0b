/* sluice — tests of the HTTP/1.1 framer (src/proto/http.c).
 *
 * Each stream is framed whole, cut in two at every offset, byte by byte and
 * in random pieces; every run must write the same transcript: one line per
 * event (H for a head, with what the framer read of it; B with the body
 * bytes reported, consecutive BODY events joined; E for an end; X for an
 * error with its status and reason; EOF for what sl_http_eof said). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "proto/http.h"

/* ---- transcripts ------------------------------------------------------------ */

struct log {
    char  *s;     /* the transcript, NUL-terminated */
    size_t n, cap;
    char  *body;  /* body bytes not written out yet */
    size_t bn, bcap;
};

static void put(char **s, size_t *n, size_t *cap, const char *p, size_t k)
{
    if (*n + k + 1 > *cap) {
        *cap = (*n + k + 1) * 2;
        *s = realloc(*s, *cap);
        assert_non_null(*s);
    }
    memcpy(*s + *n, p, k);
    *n += k;
    (*s)[*n] = '\0';
}

static void lprintf(struct log *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void lprintf(struct log *l, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    assert_true(k >= 0 && (size_t)k < sizeof(tmp));
    put(&l->s, &l->n, &l->cap, tmp, (size_t)k);
}

static void flush_body(struct log *l)
{
    if (l->bn == 0)
        return;
    put(&l->s, &l->n, &l->cap, "B ", 2);
    put(&l->s, &l->n, &l->cap, l->body, l->bn);
    put(&l->s, &l->n, &l->cap, "\n", 1);
    l->bn = 0;
}

static void log_free(struct log *l)
{
    free(l->s);
    free(l->body);
    memset(l, 0, sizeof(*l));
}

static const char *body_name(unsigned b)
{
    static const char *names[] = { "none", "length", "chunked", "close" };
    return b < 4 ? names[b] : "?";
}

/* Writes what the framer read of head <hd>, after checking it holds together. */
static void log_head(struct log *l, const struct sl_http_head *hd)
{
    assert_true(hd->len >= 4 && memcmp(hd->buf + hd->len - 4, "\r\n\r\n", 4) == 0);
    for (uint32_t i = 0; i < hd->nfields; i++) {
        const struct sl_http_field *f = &hd->fields[i];
        assert_true(f->name + f->name_len < f->value + 1 + f->value_len);
        assert_true(f->value + f->value_len <= hd->len);
        assert_int_equal(hd->buf[f->name + f->name_len], ':');
    }
    if (hd->is_request) {
        assert_true(hd->target_off + hd->target_len < hd->len);
        assert_true(hd->path_off + hd->path_len <= hd->len);
        lprintf(l, "H %.*s %.*s path=%.*s v=%u m=%u body=%s cl=%llu ka=%u up=%u ex=%u f=%u\n",
                (int)hd->method_len, hd->buf + hd->method_off, (int)hd->target_len,
                hd->buf + hd->target_off, (int)hd->path_len, hd->buf + hd->path_off, hd->minor,
                hd->method, body_name(hd->body), (unsigned long long)hd->content_length,
                hd->keep_alive, hd->upgrade, hd->expect_continue, hd->nfields);
    } else {
        lprintf(l, "H %u v=%u body=%s cl=%llu ka=%u up=%u f=%u\n", hd->status, hd->minor,
                body_name(hd->body), (unsigned long long)hd->content_length, hd->keep_alive,
                hd->upgrade, hd->nfields);
    }
}

/* How a stream is framed. */
struct opts {
    enum sl_http_side   side;
    struct sl_http_caps caps;
    /* Responses: what each response answers, in order: 'G' (anything),
     * 'H' (a HEAD request), 'C' (a CONNECT); told before each response. */
    const char *answers;
    int         eof; /* call sl_http_eof at the end */
};

static const struct opts REQ = { SL_HTTP_REQUESTS, { 0 }, NULL, 0 };
static const struct opts REQ_EOF = { SL_HTTP_REQUESTS, { 0 }, NULL, 1 };
static const struct opts RSP = { SL_HTTP_RESPONSES, { 0 }, NULL, 1 };

static void tell(struct sl_http *h, const struct opts *o, size_t *k)
{
    char a = o->answers && o->answers[*k] ? o->answers[(*k)++] : 'G';
    sl_http_expect(h, a == 'H', a == 'C');
}

/* Frames <len> bytes of <s> cut at the <ncut> increasing offsets <cuts>. */
static void frame_cuts(const struct opts *o, const char *s, size_t len, const size_t *cuts,
                       size_t ncut, struct log *l)
{
    struct sl_http h;
    size_t at = 0, k = 0;
    int dead = 0;

    memset(l, 0, sizeof(*l));
    lprintf(l, "%s", "");
    assert_int_equal(sl_http_init(&h, o->side, &o->caps), 0);
    assert_true(sl_http_idle(&h));
    tell(&h, o, &k);
    for (size_t i = 0; i <= ncut && !dead; i++) {
        size_t to = i < ncut ? cuts[i] : len;
        const char *p = s + at;
        size_t n = to - at;
        at = to;
        for (;;) {
            enum sl_http_ev ev;
            long used = sl_http_parse(&h, p, n, &ev);
            if (ev == SL_HTTP_EV_ERROR) {
                assert_int_equal(used, -1);
                assert_true(h.status >= 400 && h.err[0] != '\0');
                flush_body(l);
                lprintf(l, "X %u %s\n", h.status, h.err);
                /* Dead for good. */
                assert_int_equal(sl_http_parse(&h, "GET", 3, &ev), -1);
                assert_int_equal(ev, SL_HTTP_EV_ERROR);
                assert_int_equal(sl_http_eof(&h), SL_HTTP_EV_ERROR);
                dead = 1;
                break;
            }
            assert_true(used >= 0 && (size_t)used <= n);
            if (ev == SL_HTTP_EV_NEED) {
                assert_int_equal(used, n);
                break;
            }
            switch (ev) {
            case SL_HTTP_EV_BODY:
                assert_true(used > 0);
                put(&l->body, &l->bn, &l->bcap, p, (size_t)used);
                break;
            case SL_HTTP_EV_HEAD:
                assert_true(used > 0);
                flush_body(l);
                log_head(l, &h.head);
                break;
            case SL_HTTP_EV_END:
                assert_int_equal(used, 0);
                flush_body(l);
                lprintf(l, "E\n");
                assert_true(sl_http_idle(&h) || (!h.head.is_request && (h.head.status == 101 ||
                                                                         h.head.status < 300)));
                if (!h.head.is_request && h.head.status >= 200)
                    tell(&h, o, &k);
                break;
            default:
                fail();
            }
            p += used;
            n -= (size_t)used;
        }
    }
    if (o->eof && !dead) {
        flush_body(l);
        enum sl_http_ev ev = sl_http_eof(&h);
        if (ev == SL_HTTP_EV_END)
            lprintf(l, "EOF E\n");
        else
            lprintf(l, "EOF X %u %s\n", h.status, h.err);
    }
    flush_body(l);
    sl_http_free(&h);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Frames <s> whole, cut in two at every offset, byte by byte and in random
 * pieces; all must write the same transcript, and it must be <want> (when
 * not NULL). Returns the transcript (the caller frees it). */
static char *frame_every_way(const struct opts *o, const char *s, size_t len, const char *want)
{
    struct log ref, l;
    size_t *cuts = malloc((len + 1) * sizeof(*cuts));
    assert_non_null(cuts);

    frame_cuts(o, s, len, NULL, 0, &ref);
    if (want != NULL)
        assert_string_equal(ref.s, want);
    for (size_t k = 1; k < len; k++) {
        frame_cuts(o, s, len, &k, 1, &l);
        assert_string_equal(l.s, ref.s);
        log_free(&l);
    }
    for (size_t k = 0; k + 1 < len; k++)
        cuts[k] = k + 1;
    frame_cuts(o, s, len, cuts, len > 0 ? len - 1 : 0, &l);
    assert_string_equal(l.s, ref.s);
    log_free(&l);
    for (int round = 0; round < 20; round++) {
        size_t n = 0, at = 0;
        for (;;) {
            at += 1 + rng() % (round % 2 ? 5 : 40);
            if (at >= len)
                break;
            cuts[n++] = at;
        }
        frame_cuts(o, s, len, cuts, n, &l);
        assert_string_equal(l.s, ref.s);
        log_free(&l);
    }
    free(cuts);
    free(ref.body);
    return ref.s;
}

#define S(lit) (lit), (sizeof(lit) - 1)

static void check(const struct opts *o, const char *s, size_t len, const char *want)
{
    free(frame_every_way(o, s, len, want));
}

/* The stream must end in error <status> saying <why> (a prefix of h->err). */
static void check_error(const struct opts *o, const char *s, size_t len, unsigned status,
                        const char *why)
{
    char *got = frame_every_way(o, s, len, NULL);
    char want[256];
    snprintf(want, sizeof(want), "X %u %s", status, why);
    char *x = strstr(got, "X ");
    if (x == NULL || strncmp(x, want, strlen(want)) != 0)
        fail_msg("%s: got \"%s\", want \"%s...\"", s, got, want);
    free(got);
}

/* ---- requests -------------------------------------------------------------- */

static void test_request_no_body(void **state)
{
    (void)state;
    check(&REQ, S("GET /a/b?x=1 HTTP/1.1\r\nHost: example.com\r\nX-Key:  abc \t\r\n\r\n"),
          "H GET /a/b?x=1 path=/a/b v=1 m=1 body=none cl=0 ka=1 up=0 ex=0 f=2\nE\n");
    /* HTTP/1.0 needs no Host and is not kept alive by default. */
    check(&REQ, S("HEAD / HTTP/1.0\r\n\r\n"),
          "H HEAD / path=/ v=0 m=2 body=none cl=0 ka=0 up=0 ex=0 f=0\nE\n");
}

static void test_request_fields(void **state)
{
    (void)state;
    struct sl_http h;
    enum sl_http_ev ev;
    const char *v;
    const char req[] = "GET / HTTP/1.1\r\nHost: h\r\nX-Api-Key:\tk1 \r\nx-api-key: k2\r\n"
                       "Empty:\r\n\r\n";

    assert_int_equal(sl_http_init(&h, SL_HTTP_REQUESTS, NULL), 0);
    assert_int_equal(sl_http_parse(&h, S(req), &ev), (long)sizeof(req) - 1);
    assert_int_equal(ev, SL_HTTP_EV_HEAD);
    assert_int_equal(h.head.len, sizeof(req) - 1);
    assert_memory_equal(h.head.buf, req, sizeof(req) - 1);
    assert_int_equal(h.head.nfields, 4);
    assert_int_equal(sl_http_field(&h.head, "x-API-key", &v), 2);
    assert_memory_equal(v, "k1", 2);
    assert_int_equal(sl_http_field(&h.head, "host", &v), 1);
    assert_memory_equal(v, "h", 1);
    assert_int_equal(sl_http_field(&h.head, "empty", &v), 0);
    assert_int_equal(sl_http_field(&h.head, "missing", &v), -1);
    assert_int_equal(sl_http_field(&h.head, "X-Api-Ke", &v), -1);
    assert_int_equal(h.head.fields[1].name_len, 9);
    assert_memory_equal(h.head.buf + h.head.fields[1].name, "X-Api-Key", 9);
    assert_int_equal(sl_http_parse(&h, NULL, 0, &ev), 0);
    assert_int_equal(ev, SL_HTTP_EV_END);
    /* The head stays readable until the next message's first byte. */
    assert_int_equal(sl_http_field(&h.head, "x-api-key", &v), 2);
    assert_true(sl_http_idle(&h));
    sl_http_free(&h);
}

static void test_request_content_length(void **state)
{
    (void)state;
    check(&REQ, S("POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"),
          "H POST /up path=/up v=1 m=3 body=length cl=5 ka=1 up=0 ex=0 f=2\nB hello\nE\n");
    check(&REQ, S("PUT /z HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n"),
          "H PUT /z path=/z v=1 m=4 body=length cl=0 ka=1 up=0 ex=0 f=2\nE\n");
    /* Repeats that agree (as fields or as a list) are one length. */
    check(&REQ, S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\ncontent-length: 3, 3\r\n\r\nabc"),
          "H POST / path=/ v=1 m=3 body=length cl=3 ka=1 up=0 ex=0 f=3\nB abc\nE\n");
    /* A body cut short by the close. */
    check(&REQ_EOF, S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 9\r\n\r\nabc"),
          "H POST / path=/ v=1 m=3 body=length cl=9 ka=1 up=0 ex=0 f=2\nB abc\n"
          "EOF X 400 the connection was closed in a body\n");
}

static void test_request_chunked(void **state)
{
    (void)state;
    const char req[] = "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n"
                       "5\r\nhello\r\n"
                       "0A;ext;name=val ; q=\"a \\\"b\\\" c\"\r\n0123456789\r\n"
                       "00000000000000a\t;x\r\nabcdefghij\r\n"
                       "0\r\nTrailer-One: 1\r\nt2:\r\n\r\n";
    char want[1024];
    snprintf(want, sizeof(want),
             "H POST /c path=/c v=1 m=3 body=chunked cl=0 ka=1 up=0 ex=0 f=2\nB %s\nE\n",
             strstr(req, "\r\n\r\n") + 4);
    check(&REQ, S(req), want);
    /* No trailers; uppercase hex; then the next request. */
    check(&REQ, S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                  "1F\r\n0123456789012345678901234567890\r\n0\r\n\r\n"
                  "GET /n HTTP/1.1\r\nHost: h\r\n\r\n"),
          "H POST / path=/ v=1 m=3 body=chunked cl=0 ka=1 up=0 ex=0 f=2\n"
          "B 1F\r\n0123456789012345678901234567890\r\n0\r\n\r\n\nE\n"
          "H GET /n path=/n v=1 m=1 body=none cl=0 ka=1 up=0 ex=0 f=1\nE\n");
}

static void test_pipelined(void **state)
{
    (void)state;
    check(&REQ_EOF,
          S("GET /1 HTTP/1.1\r\nHost: h\r\n\r\n"
            "POST /2 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nxyz"
            "\r\n" /* a stray CRLF after a body, as some clients send */
            "POST /3 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n"
            "DELETE /4 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"),
          "H GET /1 path=/1 v=1 m=1 body=none cl=0 ka=1 up=0 ex=0 f=1\nE\n"
          "H POST /2 path=/2 v=1 m=3 body=length cl=3 ka=1 up=0 ex=0 f=2\nB xyz\nE\n"
          "H POST /3 path=/3 v=1 m=3 body=chunked cl=0 ka=1 up=0 ex=0 f=2\n"
          "B 2\r\nab\r\n0\r\n\r\n\nE\n"
          "H DELETE /4 path=/4 v=1 m=5 body=none cl=0 ka=0 up=0 ex=0 f=2\nE\n"
          "EOF E\n");
}

static void test_leading_empty_lines(void **state)
{
    (void)state;
    check(&REQ, S("\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n"),
          "H GET / path=/ v=1 m=1 body=none cl=0 ka=1 up=0 ex=0 f=1\nE\n");
    check_error(&REQ, S("\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n"), 400,
                "empty line before the start line");
    check_error(&REQ, S("\nGET / HTTP/1.1\r\nHost: h\r\n\r\n"), 400, "bare LF");
    check_error(&REQ, S("\rGET / HTTP/1.1\r\nHost: h\r\n\r\n"), 400, "bare CR");
    /* A close after empty lines only is a clean close. */
    check(&REQ_EOF, S("\r\n\r\n"), "EOF E\n");
}

static void test_targets(void **state)
{
    (void)state;
    check(&REQ, S("GET http://example.com:8080/p/q?x=/y HTTP/1.1\r\nHost: example.com:8080\r\n\r\n"),
          "H GET http://example.com:8080/p/q?x=/y path=/p/q v=1 m=1 body=none cl=0 ka=1 up=0 ex=0 f=1\nE\n");
    check(&REQ, S("GET HTTPS://h HTTP/1.1\r\nHost: h\r\n\r\n"),
          "H GET HTTPS://h path=/ v=1 m=1 body=none cl=0 ka=1 up=0 ex=0 f=1\nE\n");
    check(&REQ, S("GET http://h?a=b HTTP/1.1\r\nHost: h\r\n\r\n"),
          "H GET http://h?a=b path=/ v=1 m=1 body=none cl=0 ka=1 up=0 ex=0 f=1\nE\n");
    check(&REQ, S("GET /?only HTTP/1.1\r\nHost: h\r\n\r\n"),
          "H GET /?only path=/ v=1 m=1 body=none cl=0 ka=1 up=0 ex=0 f=1\nE\n");
    check(&REQ, S("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"),
          "H CONNECT example.com:443 path= v=1 m=6 body=none cl=0 ka=1 up=0 ex=0 f=1\nE\n");
    check(&REQ, S("CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\n\r\n"),
          "H CONNECT [::1]:443 path= v=1 m=6 body=none cl=0 ka=1 up=0 ex=0 f=1\nE\n");
    check(&REQ, S("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n"),
          "H OPTIONS * path= v=1 m=7 body=none cl=0 ka=1 up=0 ex=0 f=1\nE\n");
    check(&REQ, S("GET /caf\xc3\xa9 HTTP/1.1\r\nHost: h\r\n\r\n"),
          "H GET /caf\xc3\xa9 path=/caf\xc3\xa9 v=1 m=1 body=none cl=0 ka=1 up=0 ex=0 f=1\nE\n");

    check_error(&REQ, S("GET * HTTP/1.1\r\nHost: h\r\n\r\n"), 400, "invalid request-target");
    check_error(&REQ, S("OPTIONS *x HTTP/1.1\r\nHost: h\r\n\r\n"), 400, "invalid request-target");
    check_error(&REQ, S("GET h:80 HTTP/1.1\r\nHost: h\r\n\r\n"), 400, "invalid request-target");
    check_error(&REQ, S("GET http:///p HTTP/1.1\r\nHost: h\r\n\r\n"), 400, "invalid request-target");
    check_error(&REQ, S("GET 1http://h/ HTTP/1.1\r\nHost: h\r\n\r\n"), 400, "invalid request-target");
    check_error(&REQ, S("GET /a#frag HTTP/1.1\r\nHost: h\r\n\r\n"), 400, "invalid request-target");
    check_error(&REQ, S("GET /a b HTTP/1.1\r\nHost: h\r\n\r\n"), 400, "invalid request-target");
    check_error(&REQ, S("GET  / HTTP/1.1\r\nHost: h\r\n\r\n"), 400, "invalid request");
    check_error(&REQ, S("CONNECT /x HTTP/1.1\r\nHost: h\r\n\r\n"), 400, "invalid request-target for CONNECT");
    check_error(&REQ, S("CONNECT h HTTP/1.1\r\nHost: h\r\n\r\n"), 400, "invalid request-target for CONNECT");
    check_error(&REQ, S("CONNECT h:x HTTP/1.1\r\nHost: h\r\n\r\n"), 400, "invalid request-target for CONNECT");
}

static void test_methods_and_versions(void **state)
{
    (void)state;
    static const char *names[] = { "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "TRACE",
                                   "PATCH", "PROPFIND", "get" };
    static const unsigned codes[] = { 1, 2, 3, 4, 5, 7, 8, 9, 0, 0 };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char req[128], want[256];
        snprintf(req, sizeof(req), "%s /m HTTP/1.1\r\nHost: h\r\n\r\n", names[i]);
        snprintf(want, sizeof(want),
                 "H %s /m path=/m v=1 m=%u body=none cl=0 ka=1 up=0 ex=0 f=1\nE\n", names[i],
                 codes[i]);
        check(&REQ, req, strlen(req), want);
    }
    check_error(&REQ, S("G(T / HTTP/1.1\r\nHost: h\r\n\r\n"), 400, "invalid method");
    check_error(&REQ, S("/ HTTP/1.1\r\nHost: h\r\n\r\n"), 400, "invalid method");
    check_error(&REQ, S("GET\r\n\r\n"), 400, "invalid method");
    check_error(&REQ, S("GET / HTTP/1.2\r\nHost: h\r\n\r\n"), 400, "invalid HTTP version");
    check_error(&REQ, S("GET / HTTP/2.0\r\nHost: h\r\n\r\n"), 400, "invalid HTTP version");
    check_error(&REQ, S("GET / http/1.1\r\nHost: h\r\n\r\n"), 400, "invalid HTTP version");
    check_error(&REQ, S("GET / HTTP/1.1 \r\nHost: h\r\n\r\n"), 400, "invalid request line");
    check_error(&REQ, S("GET /\r\n\r\n"), 400, "invalid request line");
    check_error(&REQ, S("GET / HTTP/1.1\r\n\r\n"), 400, "no Host");
}

static void test_connection_and_flags(void **state)
{
    (void)state;
    check(&REQ, S("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"),
          "H GET / path=/ v=0 m=1 body=none cl=0 ka=1 up=0 ex=0 f=1\nE\n");
    check(&REQ, S("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n"),
          "H GET / path=/ v=0 m=1 body=none cl=0 ka=0 up=0 ex=0 f=1\nE\n");
    check(&REQ, S("GET / HTTP/1.1\r\nHost: h\r\nConnection: foo, CLOSE\r\n\r\n"),
          "H GET / path=/ v=1 m=1 body=none cl=0 ka=0 up=0 ex=0 f=2\nE\n");
    check(&REQ, S("GET / HTTP/1.1\r\nHost: h\r\nConnection: closed\r\n\r\n"),
          "H GET / path=/ v=1 m=1 body=none cl=0 ka=1 up=0 ex=0 f=2\nE\n");
    /* Upgrade counts only with the Connection token; Expect only in 1.1. */
    check(&REQ, S("GET /ws HTTP/1.1\r\nHost: h\r\nConnection: keep-alive,Upgrade\r\n"
                  "Upgrade: websocket\r\n\r\n"),
          "H GET /ws path=/ws v=1 m=1 body=none cl=0 ka=1 up=1 ex=0 f=3\nE\n");
    check(&REQ, S("GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\r\n"),
          "H GET /ws path=/ws v=1 m=1 body=none cl=0 ka=1 up=0 ex=0 f=2\nE\n");
    check(&REQ, S("PUT / HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\nx"),
          "H PUT / path=/ v=1 m=4 body=length cl=1 ka=1 up=0 ex=1 f=3\nB x\nE\n");
    check(&REQ, S("PUT / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx"),
          "H PUT / path=/ v=0 m=4 body=length cl=1 ka=0 up=0 ex=0 f=2\nB x\nE\n");
}

/* Every bad request of issue 12 section 3, with its status. */
static void test_request_errors(void **state)
{
    (void)state;
    static const struct {
        const char *req;
        unsigned    status;
        const char *why;
    } cases[] = {
        { "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
          400, "both Content-Length and Transfer-Encoding" },
        { "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
          400, "both Content-Length and Transfer-Encoding" },
        { "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 400,
          "differing Content-Length" },
        { "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3, 4\r\n\r\n", 400, "differing Content-Length" },
        { "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", 400, "invalid Content-Length" },
        { "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +1\r\n\r\n", 400, "invalid Content-Length" },
        { "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x10\r\n\r\n", 400, "invalid Content-Length" },
        { "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1 2\r\n\r\n", 400, "invalid Content-Length" },
        { "POST / HTTP/1.1\r\nHost: h\r\nContent-Length:\r\n\r\n", 400, "invalid Content-Length" },
        { "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3,\r\n\r\n", 400, "invalid Content-Length" },
        { "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 18446744073709551616\r\n\r\n", 400,
          "invalid Content-Length" },
        { "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 400,
          "Transfer-Encoding does not end in chunked" },
        { "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", 400,
          "Transfer-Encoding does not end in chunked" },
        { "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n",
          400, "Transfer-Encoding does not end in chunked" },
        { "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", 400,
          "invalid Transfer-Encoding" },
        { "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: \"chunked\"\r\n\r\n", 400,
          "invalid Transfer-Encoding" },
        { "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:\r\n\r\n", 400, "invalid Transfer-Encoding" },
        { "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: x;q\r\n\r\n", 400, "invalid Transfer-Encoding" },
        { "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400,
          "Transfer-Encoding in an HTTP/1.0 request" },
        { "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\r\n b\r\n\r\n", 400, "obs-fold in a field" },
        { "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\r\n\tb\r\n\r\n", 400, "obs-fold in a field" },
        { "GET / HTTP/1.1\r\n Host: h\r\n\r\n", 400, "whitespace before the first field" },
        { "GET / HTTP/1.1\nHost: h\r\n\r\n", 400, "bare LF in the head" },
        { "GET / HTTP/1.1\r\nHost: h\n\r\n", 400, "bare LF in the head" },
        { "GET / HTTP/1.1\r\nHost: h\r\n\n", 400, "bare LF in the head" },
        { "GET / HTTP/1.1\rHost: h\r\n\r\n", 400, "bare CR in the head" },
        { "GET / HTTP/1.1\r\nHost: h\r\r\n\r\n", 400, "bare CR in the head" },
        { "GET / HTTP/1.1\r\nX-A: a\rb\r\nHost: h\r\n\r\n", 400, "bare CR in the head" },
        { "GET / HTTP/1.1\r\nHost : h\r\n\r\n", 400, "whitespace before a field's colon" },
        { "GET / HTTP/1.1\r\nHost\t: h\r\n\r\n", 400, "whitespace before a field's colon" },
        { "GET / HTTP/1.1\r\nHost: h\r\n: v\r\n\r\n", 400, "empty field name" },
        { "GET / HTTP/1.1\r\nHost: h\r\nX(A): v\r\n\r\n", 400, "invalid field name" },
        { "GET / HTTP/1.1\r\nHost: h\r\nNoColon\r\n\r\n", 400, "field without a colon" },
        { "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\x01 b\r\n\r\n", 400, "control byte in the head" },
        { "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\x7f\r\n\r\n", 400, "control byte in the head" },
        { "GET /\x1b HTTP/1.1\r\nHost: h\r\n\r\n", 400, "control byte in the head" },
        { "GET\t/ HTTP/1.1\r\nHost: h\r\n\r\n", 400, "invalid method" },
        { "GET /\t HTTP/1.1\r\nHost: h\r\n\r\n", 400, "invalid request-target" },
        { "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "more than one Host" },
        { "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400, "invalid Host" },
        { "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400, "invalid Host" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check_error(&REQ, cases[i].req, strlen(cases[i].req), cases[i].status, cases[i].why);

    /* NUL bytes: in the request line and in a field. */
    check_error(&REQ, S("GET /\0 HTTP/1.1\r\nHost: h\r\n\r\n"), 400, "control byte in the head");
    check_error(&REQ, S("GET / HTTP/1.1\r\nHost: h\0\r\n\r\n"), 400, "control byte in the head");
    /* An empty Host is valid (RFC 9112 3.2). */
    check(&REQ, S("GET / HTTP/1.1\r\nHost:\r\n\r\n"),
          "H GET / path=/ v=1 m=1 body=none cl=0 ka=1 up=0 ex=0 f=1\nE\n");
}

static void test_chunk_errors(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        const char *good; /* reported as body before the error */
        unsigned    status;
        const char *why;
    } cases[] = {
        { "x\r\n", "", 400, "invalid chunk size" },
        { "\r\n", "", 400, "invalid chunk size" },
        { "-1\r\n", "", 400, "invalid chunk size" },
        { "5 \r\nhello\r\n0\r\n\r\n", "5 ", 400, "invalid chunk extension" },
        { "5;\r\nhello\r\n0\r\n\r\n", "5;", 400, "invalid chunk extension" },
        { "5;a=\r\nhello\r\n0\r\n\r\n", "5;a=", 400, "invalid chunk extension" },
        { "5;a=b c\r\nhello\r\n0\r\n\r\n", "5;a=b ", 400, "invalid chunk extension" },
        { "5;a=\"b\r\nhello\r\n0\r\n\r\n", "5;a=\"b", 400, "invalid chunk extension" },
        { "5;a=\"b\"c\r\nhello\r\n0\r\n\r\n", "5;a=\"b\"", 400, "invalid chunk extension" },
        { "5;a b\r\nhello\r\n0\r\n\r\n", "5;a ", 400, "invalid chunk extension" },
        { "5;@\r\nhello\r\n0\r\n\r\n", "5;", 400, "invalid chunk extension" },
        { "5;a=\"\x01\"\r\nhello\r\n0\r\n\r\n", "5;a=\"", 400, "invalid chunk extension" },
        { "5\nhello\r\n0\r\n\r\n", "5", 400, "invalid chunk size" },
        { "5\rhello\r\n0\r\n\r\n", "5\r", 400, "bare CR in a chunk-size line" },
        { "5\r\nhelloX\r\n0\r\n\r\n", "5\r\nhello", 400, "chunk data not followed by CRLF" },
        { "5\r\nhello\n0\r\n\r\n", "5\r\nhello", 400, "chunk data not followed by CRLF" },
        { "5\r\nhello\rX0\r\n\r\n", "5\r\nhello\r", 400, "chunk data not followed by CRLF" },
        { "00000000000000001\r\nx\r\n0\r\n\r\n", "0000000000000000", 400, "chunk size too long" },
        { "0\r\nA : b\r\n\r\n", "0\r\nA", 400, "whitespace before a trailer's colon" },
        { "0\r\nA: b\r\n c\r\n\r\n", "0\r\nA: b\r\n", 400, "obs-fold in a trailer" },
        { "0\r\nA: b\nC: d\r\n\r\n", "0\r\nA: b", 400, "bare LF in a trailer" },
        { "0\r\nA: b\rC: d\r\n\r\n", "0\r\nA: b\r", 400, "bare CR in the trailers" },
        { "0\r\nA: \x00\r\n\r\n", "0\r\nA: ", 400, "control byte in a trailer" },
        { "0\r\n: b\r\n\r\n", "0\r\n", 400, "invalid trailer field" },
        { "0\r\nAb\r\n\r\n", "0\r\nAb", 400, "invalid trailer field" },
        { "0\r\n\r\r\n", "0\r\n\r", 400, "bare CR in the trailers" },
        { "0\r\n\n", "0\r\n", 400, "invalid trailer field" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char req[512], want[512];
        int n = snprintf(req, sizeof(req),
                         "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n%s",
                         cases[i].body);
        /* The NUL case: snprintf stops at it; write the bytes by hand. */
        if (strstr(cases[i].why, "control") != NULL)
            n += (int)(memcpy(req + n, "\0\r\n\r\n", 5), 5);
        int w = snprintf(want, sizeof(want),
                         "H POST / path=/ v=1 m=3 body=chunked cl=0 ka=1 up=0 ex=0 f=2\n");
        if (cases[i].good[0])
            w += snprintf(want + w, sizeof(want) - (size_t)w, "B %s\n", cases[i].good);
        snprintf(want + w, sizeof(want) - (size_t)w, "X %u %s\n", cases[i].status, cases[i].why);
        check(&REQ, req, (size_t)n, want);
    }
}

/* ---- caps: at the cap and one past it ------------------------------------------- */

/* A request whose request line is <line> bytes long (CRLF excluded), with
 * <nfields> fields of <fline> bytes each (CRLF excluded). */
static size_t make_req(char *out, size_t line, size_t nfields, size_t fline)
{
    size_t n = 0;
    memcpy(out, "GET /", 5);
    n = 5;
    while (n < line - 9)
        out[n++] = 'a';
    memcpy(out + n, " HTTP/1.1\r\n", 11);
    n += 11;
    for (size_t f = 0; f < nfields; f++) {
        size_t s = n;
        n += (size_t)sprintf(out + n, f == 0 ? "Host:" : "X%zu:", f);
        while (n - s < fline)
            out[n++] = 'v';
        out[n++] = '\r';
        out[n++] = '\n';
    }
    out[n++] = '\r';
    out[n++] = '\n';
    return n;
}

static void test_caps(void **state)
{
    (void)state;
    static char req[8192];
    struct opts o = REQ;
    size_t n;

    o.caps.max_line = 100;
    o.caps.max_field_line = 50;
    o.caps.max_fields = 4;
    o.caps.max_head = 1000;

    n = make_req(req, 100, 1, 10);
    free(frame_every_way(&o, req, n, NULL));
    n = make_req(req, 101, 1, 10);
    check_error(&o, req, n, 414, "start line too long");
    n = make_req(req, 20, 4, 50);
    free(frame_every_way(&o, req, n, NULL));
    n = make_req(req, 20, 4, 51);
    check_error(&o, req, n, 431, "field line too long");
    n = make_req(req, 20, 5, 10);
    check_error(&o, req, n, 431, "too many fields");

    /* max_head counts the whole head, the final CRLF included. */
    o.caps.max_fields = 100;
    n = make_req(req, 20, 30, 10);
    o.caps.max_head = (uint32_t)n;
    char *got = frame_every_way(&o, req, n, NULL);
    assert_true(got[0] == 'H');
    free(got);
    o.caps.max_head = (uint32_t)n - 1;
    check_error(&o, req, n, 431, "head too large");
    /* The line's cap is checked before the head's on the same byte. */
    o.caps.max_head = 100;
    n = make_req(req, 101, 1, 10);
    check_error(&o, req, n, 414, "start line too long");
    o.caps.max_head = 99;
    check_error(&o, req, n, 431, "head too large");

    /* Responses: any cap passed is a 502. */
    struct opts r = RSP;
    r.caps.max_line = 15;
    check(&r, S("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
          "H 200 v=1 body=length cl=0 ka=1 up=0 f=1\nE\nEOF E\n");
    check_error(&r, S("HTTP/1.1 200 OKK\r\nContent-Length: 0\r\n\r\n"), 502, "start line too long");
    r.caps.max_line = 0;
    r.caps.max_fields = 1;
    check_error(&r, S("HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\n\r\n"), 502, "too many fields");
}

static void test_max_body(void **state)
{
    (void)state;
    struct opts o = REQ;
    o.caps.max_body = 10;
    check(&o, S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n0123456789"),
          "H POST / path=/ v=1 m=3 body=length cl=10 ka=1 up=0 ex=0 f=2\nB 0123456789\nE\n");
    check_error(&o, S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\n01234567890"), 413,
                "Content-Length above max_request");
    check(&o, S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                "4\r\n0123\r\n6\r\n456789\r\n0\r\n\r\n"),
          "H POST / path=/ v=1 m=3 body=chunked cl=0 ka=1 up=0 ex=0 f=2\n"
          "B 4\r\n0123\r\n6\r\n456789\r\n0\r\n\r\n\nE\n");
    /* Refused at the size line, before a byte of the chunk passes. */
    check(&o, S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                "4\r\n0123\r\n7\r\n4567890\r\n0\r\n\r\n"),
          "H POST / path=/ v=1 m=3 body=chunked cl=0 ka=1 up=0 ex=0 f=2\n"
          "B 4\r\n0123\r\n7\r\nX 413 chunked body above max_request\n");
    /* max_body bounds requests only. */
    struct opts r = RSP;
    r.caps.max_body = 1;
    check(&r, S("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"),
          "H 200 v=1 body=length cl=3 ka=1 up=0 f=1\nB abc\nE\nEOF E\n");
}

static void test_chunk_line_caps(void **state)
{
    (void)state;
    struct opts o = REQ;
    char req[512], want[512];
    int n;
    const char *head = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
    const char *hline = "H POST / path=/ v=1 m=3 body=chunked cl=0 ka=1 up=0 ex=0 f=2\n";

    /* "Transfer-Encoding: chunked" is 26 bytes: the head is at the caps. */
    o.caps.max_field_line = 26;
    o.caps.max_fields = 2;
    /* A chunk-size line and trailer lines of 26 bytes, two trailers: at the caps. */
    n = snprintf(req, sizeof(req), "%s1;%s\r\nx\r\n0\r\nA: %s\r\nB: 1\r\n\r\n", head,
                 "abcdefghijklmnopqrstuvwx", "abcdefghijklmnopqrstuvw");
    snprintf(want, sizeof(want), "%sB %s\nE\n", hline, strstr(req, "\r\n\r\n") + 4);
    check(&o, req, (size_t)n, want);
    /* One past. */
    n = snprintf(req, sizeof(req), "%s1;%s\r\nx\r\n0\r\n\r\n", head, "abcdefghijklmnopqrstuvwxy");
    snprintf(want, sizeof(want), "%sB 1;abcdefghijklmnopqrstuvwx\nX 400 chunk-size line too long\n",
             hline);
    check(&o, req, (size_t)n, want);
    n = snprintf(req, sizeof(req), "%s0\r\nA: %s\r\n\r\n", head, "abcdefghijklmnopqrstuvwx");
    snprintf(want, sizeof(want), "%sB 0\r\nA: abcdefghijklmnopqrstuvw\nX 431 trailer line too long\n",
             hline);
    check(&o, req, (size_t)n, want);
    n = snprintf(req, sizeof(req), "%s0\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", head);
    snprintf(want, sizeof(want), "%sB 0\r\nA: 1\r\nB: 2\r\n\nX 431 too many trailer fields\n", hline);
    check(&o, req, (size_t)n, want);
}

/* ---- responses ------------------------------------------------------------- */

static void test_response_bodies(void **state)
{
    (void)state;
    check(&RSP, S("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
                  "HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
                  "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n"
                  "HTTP/1.1 200 \r\nConnection: close\r\n\r\nuntil the end"),
          "H 200 v=1 body=length cl=5 ka=1 up=0 f=1\nB hello\nE\n"
          "H 404 v=1 body=chunked cl=0 ka=1 up=0 f=1\nB 3\r\nabc\r\n0\r\n\r\n\nE\n"
          "H 200 v=1 body=length cl=0 ka=1 up=0 f=1\nE\n"
          "H 200 v=1 body=close cl=0 ka=0 up=0 f=1\nB until the end\nEOF E\n");
    /* Transfer-Encoding not ending in chunked, or from an HTTP/1.0 server:
     * delimited by the close. */
    check(&RSP, S("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\nxyz"),
          "H 200 v=1 body=close cl=0 ka=0 up=0 f=1\nB xyz\nEOF E\n");
    check(&RSP, S("HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n"),
          "H 200 v=0 body=close cl=0 ka=0 up=0 f=1\nB 1\r\nx\r\n0\r\n\r\n\nEOF E\n");
    check(&RSP, S("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx"),
          "H 200 v=0 body=length cl=1 ka=1 up=0 f=2\nB x\nE\nEOF E\n");
    check(&RSP, S("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx"),
          "H 200 v=0 body=length cl=1 ka=0 up=0 f=1\nB x\nE\nEOF E\n");
    /* Chunked with trailers. */
    check(&RSP, S("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;a=\"1\"\r\nab\r\n0\r\n"
                  "Digest: x\r\n\r\n"),
          "H 200 v=1 body=chunked cl=0 ka=1 up=0 f=1\nB 2;a=\"1\"\r\nab\r\n0\r\nDigest: x\r\n\r\n\n"
          "E\nEOF E\n");
    /* A close before the response ends. */
    check(&RSP, S("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel"),
          "H 200 v=1 body=length cl=5 ka=1 up=0 f=1\nB hel\n"
          "EOF X 502 the connection was closed in a body\n");
    check(&RSP, S("HTTP/1.1 200 OK\r\nContent-Le"), "EOF X 502 the connection was closed in a head\n");
}

static void test_response_no_body(void **state)
{
    (void)state;
    struct opts o = RSP;
    o.answers = "HGGG";
    /* HEAD: no body whatever the fields say; then 204 and 304 likewise. */
    check(&o, S("HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n"
                "HTTP/1.1 204 No Content\r\n\r\n"
                "HTTP/1.1 304 Not Modified\r\nContent-Length: 12\r\n\r\n"
                "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
          "H 200 v=1 body=none cl=99 ka=1 up=0 f=1\nE\n"
          "H 204 v=1 body=none cl=0 ka=1 up=0 f=0\nE\n"
          "H 304 v=1 body=none cl=12 ka=1 up=0 f=1\nE\n"
          "H 200 v=1 body=length cl=2 ka=1 up=0 f=1\nB ok\nE\nEOF E\n");
    /* A HEAD response without framing fields is not close-delimited. */
    o.answers = "HG";
    check(&o, S("HTTP/1.1 200 OK\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx"),
          "H 200 v=1 body=none cl=0 ka=1 up=0 f=0\nE\n"
          "H 200 v=1 body=length cl=1 ka=1 up=0 f=1\nB x\nE\nEOF E\n");
}

static void test_response_1xx(void **state)
{
    (void)state;
    struct opts o = RSP;
    /* 100 and 103 precede the answer to the same (HEAD) request. */
    o.answers = "HG";
    check(&o, S("HTTP/1.1 100 Continue\r\n\r\n"
                "HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\n"
                "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n"
                "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx"),
          "H 100 v=1 body=none cl=0 ka=1 up=0 f=0\nE\n"
          "H 103 v=1 body=none cl=0 ka=1 up=0 f=1\nE\n"
          "H 200 v=1 body=none cl=7 ka=1 up=0 f=1\nE\n"
          "H 200 v=1 body=length cl=1 ka=1 up=0 f=1\nB x\nE\nEOF E\n");
}

static void test_response_tunnels(void **state)
{
    (void)state;
    struct opts o = RSP;
    /* 101: after its end, every byte is the tunnel's, never framed. */
    check(&o, S("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
                "\x81\x05hello HTTP/1.1 200 OK\r\n\r\n"),
          "H 101 v=1 body=none cl=0 ka=0 up=1 f=2\nE\n"
          "B \x81\x05hello HTTP/1.1 200 OK\r\n\r\n\nEOF E\n");
    /* CONNECT: a 2xx tunnels, anything else is an ordinary response. */
    o.answers = "C";
    check(&o, S("HTTP/1.1 200 Connection Established\r\n\r\nraw bytes"),
          "H 200 v=1 body=none cl=0 ka=0 up=0 f=0\nE\nB raw bytes\nEOF E\n");
    o.answers = "CG";
    check(&o, S("HTTP/1.1 407 Proxy Auth\r\nContent-Length: 2\r\n\r\nno"
                "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx"),
          "H 407 v=1 body=length cl=2 ka=1 up=0 f=1\nB no\nE\n"
          "H 200 v=1 body=length cl=1 ka=1 up=0 f=1\nB x\nE\nEOF E\n");
}

static void test_response_errors(void **state)
{
    (void)state;
    static const char *cases[][2] = {
        { "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
          "both Content-Length and Transfer-Encoding" },
        { "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "differing Content-Length" },
        { "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", "invalid Content-Length" },
        { "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", "invalid Transfer-Encoding" },
        { "HTTP/1.1 200 OK\r\nA: 1\r\n 2\r\n\r\n", "obs-fold in a field" },
        { "HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n", "bare LF in the head" },
        { "HTTP/1.1 200 OK\r\nA : 1\r\n\r\n", "whitespace before a field's colon" },
        { "HTTP/1.1 200 O\x01K\r\n\r\n", "control byte in the head" },
        { "HTTP/1.1 20 OK\r\n\r\n", "invalid status line" },
        { "HTTP/1.1 099 OK\r\n\r\n", "invalid status line" },
        { "HTTP/1.1 2000 OK\r\n\r\n", "invalid status line" },
        { "HTTP/1.1  200 OK\r\n\r\n", "invalid status line" },
        { "HTTP/1.2 200 OK\r\n\r\n", "invalid status line" },
        { "HTTP/1.1\r\n\r\n", "invalid status line" },
        { "\r\nHTTP/1.1 200 OK\r\n\r\n", "empty line before the start line" },
        { "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nz\r\n", "invalid chunk size" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check_error(&RSP, cases[i][0], strlen(cases[i][0]), 502, cases[i][1]);
}

/* ---- sl_http_eof, sl_http_idle ------------------------------------------------ */

static void test_eof_and_idle(void **state)
{
    (void)state;
    struct sl_http h;
    enum sl_http_ev ev;

    /* Nothing begun: a clean close, after which nothing is framed. */
    assert_int_equal(sl_http_init(&h, SL_HTTP_REQUESTS, NULL), 0);
    assert_int_equal(sl_http_eof(&h), SL_HTTP_EV_END);
    assert_int_equal(sl_http_parse(&h, S("GET / HTTP/1.1\r\n"), &ev), -1);
    assert_int_equal(ev, SL_HTTP_EV_ERROR);
    sl_http_free(&h);

    /* idle: not once a byte of the next message is taken (an empty line too). */
    assert_int_equal(sl_http_init(&h, SL_HTTP_REQUESTS, NULL), 0);
    assert_true(sl_http_idle(&h));
    assert_int_equal(sl_http_parse(&h, S("\r"), &ev), 1);
    assert_int_equal(ev, SL_HTTP_EV_NEED);
    assert_false(sl_http_idle(&h));
    assert_int_equal(sl_http_eof(&h), SL_HTTP_EV_ERROR); /* a CR, its LF never came */
    assert_int_equal(h.status, 400);
    sl_http_free(&h);

    assert_int_equal(sl_http_init(&h, SL_HTTP_REQUESTS, NULL), 0);
    assert_int_equal(sl_http_parse(&h, S("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nab"), &ev), 46);
    assert_int_equal(ev, SL_HTTP_EV_HEAD);
    assert_false(sl_http_idle(&h));
    assert_int_equal(sl_http_parse(&h, S("ab"), &ev), 2);
    assert_int_equal(ev, SL_HTTP_EV_BODY);
    assert_false(sl_http_idle(&h));
    /* The body is whole though END is not yet reported: a close is clean. */
    assert_int_equal(sl_http_eof(&h), SL_HTTP_EV_END);
    sl_http_free(&h);

    /* A close-delimited response ends at the close, and only then. */
    assert_int_equal(sl_http_init(&h, SL_HTTP_RESPONSES, NULL), 0);
    assert_int_equal(sl_http_parse(&h, S("HTTP/1.1 200 OK\r\n\r\n"), &ev), 19);
    assert_int_equal(ev, SL_HTTP_EV_HEAD);
    assert_int_equal(h.head.body, SL_HTTP_BODY_CLOSE);
    assert_int_equal(sl_http_parse(&h, NULL, 0, &ev), 0);
    assert_int_equal(ev, SL_HTTP_EV_NEED);
    assert_int_equal(sl_http_parse(&h, S("HTTP/1.1 200 OK\r\n\r\n"), &ev), 19);
    assert_int_equal(ev, SL_HTTP_EV_BODY);
    assert_int_equal(sl_http_eof(&h), SL_HTTP_EV_END);
    sl_http_free(&h);

    /* An error stays. */
    assert_int_equal(sl_http_init(&h, SL_HTTP_RESPONSES, NULL), 0);
    assert_int_equal(sl_http_parse(&h, S("XTTP/1.1 200 OK\r\n\r\n"), &ev), -1);
    assert_int_equal(h.status, 502);
    assert_string_equal(h.err, "invalid status line");
    assert_int_equal(sl_http_eof(&h), SL_HTTP_EV_ERROR);
    assert_int_equal(h.status, 502);
    assert_string_equal(h.err, "invalid status line");
    sl_http_free(&h);
}

/* A body bigger than anything the framer could hold passes through as
 * spans of the input; only the head is copied. */
static void test_big_body_streams(void **state)
{
    (void)state;
    struct sl_http h;
    enum sl_http_ev ev;
    static char chunk[65536];
    uint64_t total = 0;
    struct sl_http_caps caps = { .max_head = 4096, .max_body = 1ull << 40 };

    memset(chunk, 'z', sizeof(chunk));
    assert_int_equal(sl_http_init(&h, SL_HTTP_REQUESTS, &caps), 0);
    const char head[] = "PUT /big HTTP/1.1\r\nHost: h\r\nContent-Length: 1099511627776\r\n\r\n";
    assert_int_equal(sl_http_parse(&h, S(head), &ev), (long)sizeof(head) - 1);
    assert_int_equal(ev, SL_HTTP_EV_HEAD);
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(sl_http_parse(&h, chunk, sizeof(chunk), &ev), (long)sizeof(chunk));
        assert_int_equal(ev, SL_HTTP_EV_BODY);
        total += sizeof(chunk);
    }
    assert_int_equal(h.left, (1ull << 40) - total);
    assert_true(h.bufcap <= 4096);
    sl_http_free(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_no_body),
        cmocka_unit_test(test_request_fields),
        cmocka_unit_test(test_request_content_length),
        cmocka_unit_test(test_request_chunked),
        cmocka_unit_test(test_pipelined),
        cmocka_unit_test(test_leading_empty_lines),
        cmocka_unit_test(test_targets),
        cmocka_unit_test(test_methods_and_versions),
        cmocka_unit_test(test_connection_and_flags),
        cmocka_unit_test(test_request_errors),
        cmocka_unit_test(test_chunk_errors),
        cmocka_unit_test(test_caps),
        cmocka_unit_test(test_max_body),
        cmocka_unit_test(test_chunk_line_caps),
        cmocka_unit_test(test_response_bodies),
        cmocka_unit_test(test_response_no_body),
        cmocka_unit_test(test_response_1xx),
        cmocka_unit_test(test_response_tunnels),
        cmocka_unit_test(test_response_errors),
        cmocka_unit_test(test_eof_and_idle),
        cmocka_unit_test(test_big_body_streams),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* sluice — tests of the RESP request framer (src/proto/resp.c).
 *
 * Most tests run a stream through the framer several ways - whole, cut in two
 * at every byte, byte by byte, in random pieces - and require the same
 * sequence of (size, argc, captured args) and the same error every time. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>



#include "core/err.h"
#include "proto/resp.h"

#define MAX_REQ (512ull * 1024 * 1024)

/* ---- collecting what the framer returns ------------------------------------ */

/* A copy of one returned request. */
struct got {
    struct sl_resp_req q; /* the request as returned */
};

/* Everything one run over a stream produced. */
struct run {
    struct got *r;     /* requests, in order */
    size_t      n;     /* requests returned */
    size_t      cap;   /* room in r */
    int         err;   /* 0, or the error code that ended the run */
    char        msg[128]; /* st->err after an error */
    uint64_t    fed;   /* bytes fed */
    uint64_t    sizes; /* sum of returned sizes */
};

static void run_free(struct run *o)
{
    free(o->r);
    memset(o, 0, sizeof(*o));
}

/* Calls sl_resp_next until 0 or an error, recording into <o>. */
static void drain(struct sl_resp *st, struct run *o)
{
    struct sl_resp_req *q;
    int rc;
    while ((rc = sl_resp_next(st, &q)) == 1) {
        if (o->n == o->cap) {
            o->cap = o->cap ? o->cap * 2 : 64;
            o->r = realloc(o->r, o->cap * sizeof(*o->r));
            assert_non_null(o->r);
        }
        assert_true(q->ncap <= SL_RESP_CAPTURE_ARGS);
        assert_int_equal(q->ncap, q->argc < SL_RESP_CAPTURE_ARGS ? q->argc : SL_RESP_CAPTURE_ARGS);
        assert_true(q->size > 0);
        o->r[o->n++].q = *q;
        o->sizes += q->size;
    }
    if (rc < 0) {
        assert_int_equal(rc, SL_EPROTO);
        o->err = rc;
        snprintf(o->msg, sizeof(o->msg), "%s", st->err);
        return;
    }
    assert_int_equal(rc, 0);
    /* Every byte fed is in a returned request or still pending. */
    assert_int_equal(o->sizes + sl_resp_pending(st), o->fed);
}

/* Frames <len> bytes of <s> cut at the <ncut> increasing offsets <cuts>. */
static void frame_cuts(const char *s, size_t len, const size_t *cuts, size_t ncut,
                       uint64_t max_request, struct run *o)
{
    struct sl_resp st;
    size_t at = 0;

    memset(o, 0, sizeof(*o));
    assert_int_equal(sl_resp_init(&st, max_request), 0);
    for (size_t i = 0; i <= ncut && o->err == 0; i++) {
        size_t to = i < ncut ? cuts[i] : len;
        int rc = sl_resp_feed(&st, s + at, to - at);
        assert_int_equal(rc, 0);
        o->fed += to - at;
        at = to;
        drain(&st, o);
    }
    sl_resp_free(&st);
}

static void frame_whole(const char *s, size_t len, uint64_t max_request, struct run *o)
{
    frame_cuts(s, len, NULL, 0, max_request, o);
}

static void assert_same_req(const struct sl_resp_req *a, const struct sl_resp_req *b)
{
    assert_int_equal(a->size, b->size);
    assert_int_equal(a->argc, b->argc);
    assert_int_equal(a->is_inline, b->is_inline);
    assert_int_equal(a->ncap, b->ncap);
    for (unsigned i = 0; i < a->ncap; i++) {
        assert_int_equal(a->arglen[i], b->arglen[i]);
        size_t k = a->arglen[i] < SL_RESP_CAPTURE_LEN ? a->arglen[i] : SL_RESP_CAPTURE_LEN;
        assert_memory_equal(a->argv[i], b->argv[i], k + 1);
    }
}

static void assert_same_run(const struct run *a, const struct run *b)
{
    assert_int_equal(a->n, b->n);
    for (size_t i = 0; i < a->n; i++)
        assert_same_req(&a->r[i].q, &b->r[i].q);
    assert_int_equal(a->err, b->err);
    assert_string_equal(a->msg, b->msg);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Runs <s> whole, cut in two at every offset, byte by byte and in random
 * pieces; all must agree. Leaves the whole run in <ref>. */
static void frame_every_way(const char *s, size_t len, uint64_t max_request, struct run *ref)
{
    struct run o;
    size_t *cuts = malloc((len + 1) * sizeof(*cuts));
    assert_non_null(cuts);

    frame_whole(s, len, max_request, ref);

    for (size_t k = 1; k < len; k++) {
        frame_cuts(s, len, &k, 1, max_request, &o);
        assert_same_run(ref, &o);
        run_free(&o);
    }
    for (size_t k = 0; k + 1 < len; k++)
        cuts[k] = k + 1;
    frame_cuts(s, len, cuts, len > 0 ? len - 1 : 0, max_request, &o);
    assert_same_run(ref, &o);
    run_free(&o);

    for (int round = 0; round < 200; round++) {
        size_t n = 0, at = 0;
        for (;;) {
            at += 1 + rng() % (round % 2 ? 7 : 300);
            if (at >= len)
                break;
            cuts[n++] = at;
        }
        frame_cuts(s, len, cuts, n, max_request, &o);
        assert_same_run(ref, &o);
        run_free(&o);
    }
    free(cuts);
}

/* Checks request <q>: size, inline or not, then the captured arguments as
 * strings (one longer than SL_RESP_CAPTURE_LEN: its first bytes; one with a
 * NUL: up to the NUL, its length apart). */
static void expect_req(const struct sl_resp_req *q, uint64_t size, int is_inline, uint32_t argc, ...)
{
    va_list ap;

    assert_int_equal(q->size, size);
    assert_int_equal(q->is_inline, is_inline);
    assert_int_equal(q->argc, argc);
    va_start(ap, argc);
    for (uint32_t i = 0; i < argc && i < SL_RESP_CAPTURE_ARGS; i++) {
        const char *want = va_arg(ap, const char *);
        size_t n = strlen(want);
        if (q->arglen[i] <= SL_RESP_CAPTURE_LEN && memchr(q->argv[i], '\0', q->arglen[i]) == NULL)
            assert_int_equal(q->arglen[i], n);
        assert_string_equal(q->argv[i], want);
    }
    va_end(ap);
}

#define S(lit) (lit), (sizeof(lit) - 1)

/* ---- single requests --------------------------------------------------------- */

static void test_multibulk_shapes(void **state)
{
    (void)state;
    struct run o;

    frame_every_way(S("*1\r\n$4\r\nPING\r\n"), MAX_REQ, &o);
    assert_int_equal(o.n, 1);
    expect_req(&o.r[0].q, 14, 0, 1, "PING");
    run_free(&o);

    frame_every_way(S("*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n"), MAX_REQ, &o);
    assert_int_equal(o.n, 1);
    expect_req(&o.r[0].q, 33, 0, 3, "SET", "key", "value");
    run_free(&o);

    /* An empty argument, and a payload holding CRLF and '*' and '$'. */
    frame_every_way(S("*3\r\n$4\r\nECHO\r\n$0\r\n\r\n$6\r\n\r\n*$\r\n\r\n"), MAX_REQ, &o);
    assert_int_equal(o.n, 1);
    expect_req(&o.r[0].q, 32, 0, 3, "ECHO", "", "\r\n*$\r\n");
    run_free(&o);

    /* Binary bytes, NUL included, are captured as they are. */
    frame_every_way(S("*2\r\n$3\r\nGET\r\n$3\r\na\0b\r\n"), MAX_REQ, &o);
    assert_int_equal(o.n, 1);
    assert_int_equal(o.r[0].q.arglen[1], 3);
    assert_memory_equal(o.r[0].q.argv[1], "a\0b", 4);
    run_free(&o);

    /* Lengths: "0" is fine, the largest count is fine (not complete). */
    frame_every_way(S("*1\r\n$0\r\n\r\n*1048576\r\n$1\r\nx\r\n"), MAX_REQ, &o);
    assert_int_equal(o.n, 1);
    expect_req(&o.r[0].q, 10, 0, 1, "");
    assert_int_equal(o.err, 0);
    run_free(&o);
}

static void test_empty_multibulk(void **state)
{
    (void)state;
    struct run o;

    /* `*0`, `*-1` and any other negative count: empty requests, no reply. */
    frame_every_way(S("*0\r\n*-1\r\n*-5\r\n*-9223372036854775808\r\n*1\r\n$4\r\nPING\r\n"), MAX_REQ, &o);
    assert_int_equal(o.n, 5);
    expect_req(&o.r[0].q, 4, 0, 0);
    expect_req(&o.r[1].q, 5, 0, 0);
    expect_req(&o.r[2].q, 5, 0, 0);
    expect_req(&o.r[3].q, 23, 0, 0);
    expect_req(&o.r[4].q, 14, 0, 1, "PING");
    assert_int_equal(o.r[0].q.ncap, 0);
    run_free(&o);
}

/* ---- inline commands ----------------------------------------------------------- */

static void test_inline_simple(void **state)
{
    (void)state;
    struct run o;

    frame_every_way(S("PING\r\nPING\nGET k\r\n  SET\tk   v  \r\n"), MAX_REQ, &o);
    assert_int_equal(o.n, 4);
    expect_req(&o.r[0].q, 6, 1, 1, "PING");
    expect_req(&o.r[1].q, 5, 1, 1, "PING");
    expect_req(&o.r[2].q, 7, 1, 2, "GET", "k");
    expect_req(&o.r[3].q, 15, 1, 3, "SET", "k", "v");
    run_free(&o);

    /* Blank lines are empty requests. */
    frame_every_way(S("\r\n\n   \r\n \t\v\f\n"), MAX_REQ, &o);
    assert_int_equal(o.n, 4);
    expect_req(&o.r[0].q, 2, 1, 0);
    expect_req(&o.r[1].q, 1, 1, 0);
    expect_req(&o.r[2].q, 5, 1, 0);
    expect_req(&o.r[3].q, 5, 1, 0);
    run_free(&o);

    /* A CR inside the line separates; only one CR before the LF is dropped. */
    frame_every_way(S("a\rb\r\nGET k\r\r\n"), MAX_REQ, &o);
    assert_int_equal(o.n, 2);
    expect_req(&o.r[0].q, 5, 1, 2, "a", "b");
    expect_req(&o.r[1].q, 8, 1, 2, "GET", "k");
    run_free(&o);

    /* \v and \f separate words before one but belong to a bare word. */
    frame_every_way(S("\va\vb \fc\n"), MAX_REQ, &o);
    assert_int_equal(o.n, 1);
    expect_req(&o.r[0].q, 8, 1, 2, "a\vb", "c");
    run_free(&o);
}

static void test_inline_quotes(void **state)
{
    (void)state;
    struct run o;

    frame_every_way(S("SET k \"hello world\"\r\n"), MAX_REQ, &o);
    assert_int_equal(o.n, 1);
    expect_req(&o.r[0].q, 21, 1, 3, "SET", "k", "hello world");
    run_free(&o);

    frame_every_way(S("SET \"a\\nb\\r\\t\\b\\a\\x41\\x6a\\\"\\\\\\q\"\n"), MAX_REQ, &o);
    assert_int_equal(o.n, 1);
    expect_req(&o.r[0].q, 33, 1, 2, "SET", "a\nb\r\t\b\aAj\"\\q");
    run_free(&o);

    /* A \x without two hex digits is just an escaped 'x'. */
    frame_every_way(S("\"\\x4\" \"\\xZZ\"\n"), MAX_REQ, &o);
    assert_int_equal(o.n, 1);
    expect_req(&o.r[0].q, 13, 1, 2, "x4", "xZZ");
    run_free(&o);

    /* Single quotes: only \' is an escape. */
    frame_every_way(S("SET 'it\\'s' 'a\\\\b \"x\"' ''\r\n"), MAX_REQ, &o);
    assert_int_equal(o.n, 1);
    expect_req(&o.r[0].q, 27, 1, 4, "SET", "it's", "a\\\\b \"x\"", "");
    run_free(&o);

    /* A quote may open inside a word; empty quotes are an empty word. */
    frame_every_way(S("a\"b c\" \"\" d'e'\n"), MAX_REQ, &o);
    assert_int_equal(o.n, 1);
    expect_req(&o.r[0].q, 15, 1, 3, "ab c", "", "de");
    run_free(&o);

    /* A closing quote followed by a blank other than space is fine. */
    frame_every_way(S("\"a\"\t'b'\v\"c\"\r\n"), MAX_REQ, &o);
    assert_int_equal(o.n, 1);
    expect_req(&o.r[0].q, 13, 1, 3, "a", "b", "c");
    run_free(&o);
}

static void test_inline_unbalanced(void **state)
{
    (void)state;
    static const char *bad[] = {
        "SET k \"hello\r\n", "\"a\"b\n", "'a'b\n", "'abc\n", "\"abc\\\"\n",
        "a\"b c\"d\n", "\"\\x41\n", "x \"\\\"\n", "PING \"\"x\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct run o;
        char buf[64];
        /* A good command first: it still comes out. */
        int n = snprintf(buf, sizeof(buf), "PING\r\n%s", bad[i]);
        frame_every_way(buf, (size_t)n, MAX_REQ, &o);
        assert_int_equal(o.n, 1);
        assert_int_equal(o.err, SL_EPROTO);
        assert_string_equal(o.msg, "Protocol error: unbalanced quotes in request");
        run_free(&o);
    }
}

static void test_inline_nul(void **state)
{
    (void)state;
    struct sl_resp st;
    struct sl_resp_req *q;

    /* As in Redis (strchr), a NUL hides the LF after it: the line never
     * ends, and fails once it is too big. */
    assert_int_equal(sl_resp_init(&st, MAX_REQ), 0);
    assert_int_equal(sl_resp_feed(&st, S("PING\r\nGET a\0b\r\nPING\r\n")), 0);
    assert_int_equal(sl_resp_next(&st, &q), 1);
    assert_int_equal(q->size, 6);
    assert_int_equal(sl_resp_next(&st, &q), 0);
    assert_int_equal(sl_resp_pending(&st), 15);
    char *junk = malloc(SL_RESP_MAX_LINE);
    memset(junk, 'x', SL_RESP_MAX_LINE);
    assert_int_equal(sl_resp_feed(&st, junk, SL_RESP_MAX_LINE - 15), 0);
    assert_int_equal(sl_resp_next(&st, &q), 0);
    assert_int_equal(sl_resp_feed(&st, "x", 1), 0);
    assert_int_equal(sl_resp_next(&st, &q), SL_EPROTO);
    assert_string_equal(st.err, "Protocol error: too big inline request");
    free(junk);
    sl_resp_free(&st);
}

static void test_mixed_pipeline(void **state)
{
    (void)state;
    struct run o;
    static const char s[] =
        "PING\r\n"
        "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
        "SET k \"v v\"\r\n"
        "*0\r\n"
        "\r\n"
        "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"
        "GET k\n";
    frame_every_way(s, sizeof(s) - 1, MAX_REQ, &o);
    assert_int_equal(o.n, 7);
    expect_req(&o.r[0].q, 6, 1, 1, "PING");
    expect_req(&o.r[1].q, 20, 0, 2, "GET", "k");
    expect_req(&o.r[2].q, 13, 1, 3, "SET", "k", "v v");
    expect_req(&o.r[3].q, 4, 0, 0);
    expect_req(&o.r[4].q, 2, 1, 0);
    expect_req(&o.r[5].q, 27, 0, 3, "SET", "k", "v");
    expect_req(&o.r[6].q, 6, 1, 2, "GET", "k");
    run_free(&o);
}

/* Builds a long pipeline of every shape; <n> gets its length. */
static char *build_pipeline(size_t *n, size_t *nreq)
{
    size_t cap = 1 << 16, len = 0, reqs = 0;
    char *s = malloc(cap);
    assert_non_null(s);
#define ADD(lit) do { memcpy(s + len, lit, sizeof(lit) - 1); len += sizeof(lit) - 1; reqs++; } while (0)
    for (int i = 0; i < 6; i++) {
        ADD("*3\r\n$3\r\nSET\r\n$5\r\nkey:1\r\n$5\r\nhello\r\n");
        ADD("*2\r\n$3\r\nGET\r\n$5\r\nkey:1\r\n");
        ADD("PING\r\n");
        ADD("*0\r\n");
        ADD("SET 'a b' \"c\\x00d\"\n");
        ADD("*1\r\n$4\r\nPING\r\n");
        ADD("\r\n");
        ADD("*11\r\n$4\r\nMSET\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n"
            "$1\r\nd\r\n$1\r\n4\r\n$1\r\ne\r\n$1\r\n5\r\n");
        ADD("*2\r\n$4\r\nECHO\r\n$70\r\n0123456789012345678901234567890123456789012345678901234567890123456789\r\n");
        ADD("*-1\r\n");
        ADD("  ECHO   'x'  \"\"  \r\n");
        ADD("*2\r\n$4\r\nECHO\r\n$4\r\n\r\n\r\n\r\n");
    }
#undef ADD
    *n = len;
    *nreq = reqs;
    return s;
}

static void test_pipeline_every_split(void **state)
{
    (void)state;
    struct run o;
    size_t len, nreq;
    char *s = build_pipeline(&len, &nreq);

    frame_every_way(s, len, MAX_REQ, &o);
    assert_int_equal(o.err, 0);
    assert_int_equal(o.n, nreq);
    assert_int_equal(o.sizes, len);
    expect_req(&o.r[4].q, 19, 1, 3, "SET", "a b", "c\0d");
    assert_int_equal(o.r[4].q.arglen[2], 3);
    assert_memory_equal(o.r[4].q.argv[2], "c\0d", 4);
    assert_int_equal(o.r[7].q.argc, 11);
    assert_int_equal(o.r[7].q.ncap, SL_RESP_CAPTURE_ARGS);
    expect_req(&o.r[7].q, o.r[7].q.size, 0, 11, "MSET", "a", "1", "b", "2", "c", "3", "d");
    expect_req(&o.r[10].q, 20, 1, 3, "ECHO", "x", "");
    run_free(&o);
    free(s);
}

static void test_long_pipeline(void **state)
{
    (void)state;
    /* 20000 requests in 1000-byte reads: hiredis trims its buffer as it goes. */
    static const char one[] = "*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\nGET key\r\n";
    size_t n = 10000, len = n * (sizeof(one) - 1);
    char *s = malloc(len);
    for (size_t i = 0; i < n; i++)
        memcpy(s + i * (sizeof(one) - 1), one, sizeof(one) - 1);
    size_t *cuts = malloc(len / 1000 * sizeof(*cuts));
    size_t nc = 0;
    for (size_t at = 1000; at < len; at += 1000)
        cuts[nc++] = at;
    struct run o;
    frame_cuts(s, len, cuts, nc, MAX_REQ, &o);
    assert_int_equal(o.err, 0);
    assert_int_equal(o.n, 2 * n);
    assert_int_equal(o.sizes, len);
    for (size_t i = 0; i < o.n; i += 2) {
        expect_req(&o.r[i].q, 33, 0, 3, "SET", "key", "value");
        expect_req(&o.r[i + 1].q, 9, 1, 2, "GET", "key");
    }
    run_free(&o);
    free(cuts);
    free(s);
}

static void test_buffer_stays_small(void **state)
{
    (void)state;
    /* Reads that end inside inline lines: the consumed part must still be
     * dropped (hiredis only does it inside GetReply). */
    struct sl_resp st;
    struct sl_resp_req *q;
    static const char one[] = "GET key\r\nPING\r\n*1\r\n$4\r\nPING\r\n";
    size_t n = 3000, len = n * (sizeof(one) - 1), framed = 0;
    char *s = malloc(len);
    for (size_t i = 0; i < n; i++)
        memcpy(s + i * (sizeof(one) - 1), one, sizeof(one) - 1);
    assert_int_equal(sl_resp_init(&st, MAX_REQ), 0);
    for (size_t at = 0; at < len; at += 7) {
        size_t k = len - at < 7 ? len - at : 7;
        assert_int_equal(sl_resp_feed(&st, s + at, k), 0);
        while (sl_resp_next(&st, &q) == 1)
            framed += q->size;
        assert_true(st.cap <= 4096);
    }
    assert_int_equal(framed, len);
    assert_true(sl_resp_idle(&st));
    sl_resp_free(&st);

    /* Only inline commands, 13-byte reads. */
    static const char two[] = "PING\r\nGET k\r\n";
    assert_int_equal(sl_resp_init(&st, MAX_REQ), 0);
    for (int i = 0; i < 20000; i++) {
        assert_int_equal(sl_resp_feed(&st, &two[i % 13], 13 - (size_t)(i % 13)), 0);
        assert_int_equal(sl_resp_feed(&st, two, (size_t)(i % 13)), 0);
        while (sl_resp_next(&st, &q) == 1)
            ;
        assert_true(st.cap <= 4096);
    }
    sl_resp_free(&st);
    free(s);
}

/* ---- errors and caps ------------------------------------------------------------- */

/* Frames <s> every way; requires <nreq> requests, then the error <msg>. */
static void expect_error(const char *s, size_t len, uint64_t max_request, size_t nreq, const char *msg)
{
    struct run o;
    frame_every_way(s, len, max_request, &o);
    assert_int_equal(o.n, nreq);
    assert_int_equal(o.err, SL_EPROTO);
    assert_string_equal(o.msg, msg);
    run_free(&o);
}

static void test_errors_type(void **state)
{
    (void)state;
    expect_error(S("*1\r\n+OK\r\n"), MAX_REQ, 0, "Protocol error: expected '$', got '+'");
    expect_error(S("*1\r\n+\r\n"), MAX_REQ, 0, "Protocol error: expected '$', got '+'");
    expect_error(S("*1\r\n-ERR x\r\n"), MAX_REQ, 0, "Protocol error: expected '$', got '-'");
    expect_error(S("*1\r\n:1\r\n"), MAX_REQ, 0, "Protocol error: expected '$', got ':'");
    expect_error(S("*2\r\n*1\r\n$1\r\na\r\n"), MAX_REQ, 0, "Protocol error: expected '$', got '*'");
    expect_error(S("*2\r\n$3\r\nGET\r\n*1\r\n"), MAX_REQ, 0, "Protocol error: expected '$', got '*'");
    expect_error(S("*2\r\n$3\r\nGET\r\nx\ry"), MAX_REQ, 0, "Protocol error: expected '$', got 'x'");
    expect_error(S("PING\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n%\r\n"), MAX_REQ, 1,
                 "Protocol error: expected '$', got '%'");
    /* CR and LF would break the -ERR line: a blank, as Redis does. */
    expect_error(S("*1\r\n\r\n"), MAX_REQ, 0, "Protocol error: expected '$', got ' '");
    expect_error(S("*1\r\n\n\r\n"), MAX_REQ, 0, "Protocol error: expected '$', got ' '");
    /* Like Redis, a wrong type byte is named once its line is whole: until
     * then (a NUL hides the CR) the framer waits. */
    {
        struct sl_resp st;
        struct sl_resp_req *q;
        assert_int_equal(sl_resp_init(&st, MAX_REQ), 0);
        assert_int_equal(sl_resp_feed(&st, S("*2\r\n$3\r\nGET\r\n+\0\r\n")), 0);
        assert_int_equal(sl_resp_next(&st, &q), 0);
        assert_int_equal(sl_resp_feed(&st, S("x")), 0);
        assert_int_equal(sl_resp_next(&st, &q), 0);
        sl_resp_free(&st);
    }
}

static void test_errors_bulk_length(void **state)
{
    (void)state;
    static const char *bad[] = {
        "*1\r\n$-1\r\n", "*1\r\n$-2\r\n", "*1\r\n$abc\r\n", "*1\r\n$01\r\n", "*1\r\n$+1\r\n",
        "*1\r\n$ 1\r\n", "*1\r\n$1 \r\n", "*1\r\n$\r\n", "*1\r\n$-0\r\n",
        "*1\r\n$99999999999999999999\r\n", "*1\r\n$9223372036854775808\r\n",
        "*1\r\n$999999999999\r\n", "*1\r\n$536870913\r\n",
        "*2\r\n$3\r\nGET\r\n$-1\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        expect_error(bad[i], strlen(bad[i]), MAX_REQ, 0, "Protocol error: invalid bulk length");
}

static void test_errors_multibulk_length(void **state)
{
    (void)state;
    static const char *bad[] = {
        "*abc\r\n", "*01\r\n", "*+1\r\n", "*\r\n", "*-\r\n", "*1048577\r\n",
        "*99999999999999999999\r\n", "*-99999999999999999999\r\n", "*2147483648\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        expect_error(bad[i], strlen(bad[i]), MAX_REQ, 0, "Protocol error: invalid multibulk length");
}

static void test_huge_lengths_rejected_early(void **state)
{
    (void)state;
    struct sl_resp st;
    struct sl_resp_req *q;

    /* Only the header is fed: the framer must not wait for the payload. */
    assert_int_equal(sl_resp_init(&st, MAX_REQ), 0);
    assert_int_equal(sl_resp_feed(&st, S("*1\r\n$999999999999\r\n")), 0);
    assert_int_equal(sl_resp_next(&st, &q), SL_EPROTO);
    assert_string_equal(st.err, "Protocol error: invalid bulk length");
    sl_resp_free(&st);

    assert_int_equal(sl_resp_init(&st, MAX_REQ), 0);
    assert_int_equal(sl_resp_feed(&st, S("*999999999999\r\n")), 0);
    assert_int_equal(sl_resp_next(&st, &q), SL_EPROTO);
    assert_string_equal(st.err, "Protocol error: invalid multibulk length");
    sl_resp_free(&st);

    /* The header arrives in pieces after a complete argument. */
    assert_int_equal(sl_resp_init(&st, MAX_REQ), 0);
    assert_int_equal(sl_resp_feed(&st, S("*2\r\n$3\r\nSET\r\n$99999")), 0);
    assert_int_equal(sl_resp_next(&st, &q), 0);
    assert_int_equal(sl_resp_feed(&st, S("9999999\r")), 0);
    assert_int_equal(sl_resp_next(&st, &q), 0);
    assert_int_equal(sl_resp_feed(&st, S("\n")), 0);
    assert_int_equal(sl_resp_next(&st, &q), SL_EPROTO);
    assert_string_equal(st.err, "Protocol error: invalid bulk length");
    sl_resp_free(&st);

    /* max_bulk is max_request. */
    assert_int_equal(sl_resp_init(&st, 1024 * 1024), 0);
    assert_int_equal(st.max_bulk, 1024 * 1024);
    assert_int_equal(sl_resp_feed(&st, S("*1\r\n$1048577\r\n")), 0);
    assert_int_equal(sl_resp_next(&st, &q), SL_EPROTO);
    assert_string_equal(st.err, "Protocol error: invalid bulk length");
    sl_resp_free(&st);
}

/* <prefix> then <n> bytes of <fill>, no line end. */
static char *long_line(const char *prefix, char fill, size_t n, size_t *len)
{
    size_t p = strlen(prefix);
    char *s = malloc(p + n);
    memcpy(s, prefix, p);
    memset(s + p, fill, n);
    *len = p + n;
    return s;
}

/* Feeds <s> in 4 KiB reads; returns the last result of sl_resp_next. */
static int feed_line(struct sl_resp *st, const char *s, size_t len)
{
    struct sl_resp_req *q;
    int rc = 0;
    for (size_t at = 0; at < len; at += 4096) {
        size_t k = len - at < 4096 ? len - at : 4096;
        assert_int_equal(sl_resp_feed(st, s + at, k), 0);
        while ((rc = sl_resp_next(st, &q)) == 1)
            ;
        if (rc < 0)
            return rc;
    }
    return rc;
}

static void test_line_caps(void **state)
{
    (void)state;
    static const struct {
        const char *prefix; /* before the long line */
        char fill;          /* what the line is made of */
        size_t ok;          /* the longest line still waited for */
        const char *msg;
    } c[] = {
        /* The type byte counts, as in Redis: "*" + 65535 bytes is 64 KiB. */
        { "*", '1', SL_RESP_MAX_LINE - 1, "Protocol error: too big mbulk count string" },
        { "*1\r\n$", '1', SL_RESP_MAX_LINE - 1, "Protocol error: too big bulk count string" },
        { "*2\r\n$1\r\na\r\n$", '2', SL_RESP_MAX_LINE - 1, "Protocol error: too big bulk count string" },
        { "", 'a', SL_RESP_MAX_LINE, "Protocol error: too big inline request" },
        { "PING\r\n", 'a', SL_RESP_MAX_LINE, "Protocol error: too big inline request" },
        { "", ' ', SL_RESP_MAX_LINE, "Protocol error: too big inline request" },
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        struct sl_resp st;
        size_t len;
        char *s = long_line(c[i].prefix, c[i].fill, c[i].ok, &len);
        assert_int_equal(sl_resp_init(&st, MAX_REQ), 0);
        assert_int_equal(feed_line(&st, s, len), 0);
        assert_int_equal(sl_resp_feed(&st, &c[i].fill, 1), 0); /* one more: too big */
        struct sl_resp_req *q;
        assert_int_equal(sl_resp_next(&st, &q), SL_EPROTO);
        assert_string_equal(st.err, c[i].msg);
        sl_resp_free(&st);
        free(s);
    }

    /* A 64 KiB+1 line without CRLF in one piece. */
    {
        struct sl_resp st;
        struct sl_resp_req *q;
        size_t len;
        char *s = long_line("", 'x', SL_RESP_MAX_LINE + 1, &len);
        assert_int_equal(sl_resp_init(&st, MAX_REQ), 0);
        assert_int_equal(sl_resp_feed(&st, s, len), 0);
        assert_int_equal(sl_resp_next(&st, &q), SL_EPROTO);
        assert_string_equal(st.err, "Protocol error: too big inline request");
        sl_resp_free(&st);
        free(s);
    }

    /* An inline line of exactly 64 KiB (before the LF) is accepted. */
    {
        struct sl_resp st;
        struct sl_resp_req *q;
        size_t len;
        char *s = long_line("", 'x', SL_RESP_MAX_LINE + 1, &len);
        s[len - 1] = '\n';
        assert_int_equal(sl_resp_init(&st, MAX_REQ), 0);
        assert_int_equal(sl_resp_feed(&st, s, len), 0);
        assert_int_equal(sl_resp_next(&st, &q), 1);
        assert_int_equal(q->size, SL_RESP_MAX_LINE + 1);
        assert_int_equal(q->argc, 1);
        assert_int_equal(q->arglen[0], SL_RESP_MAX_LINE);
        assert_int_equal(sl_resp_next(&st, &q), 0);
        sl_resp_free(&st);
        free(s);
    }
}

static void test_max_request(void **state)
{
    (void)state;
    struct run o;

    /* 4 + 5 + 89 + 2 = 100 bytes: fits; one more does not. */
    char buf[256];
    int n = snprintf(buf, sizeof(buf), "*1\r\n$89\r\n%089d\r\n", 0);
    frame_every_way(buf, (size_t)n, 100, &o);
    assert_int_equal(o.n, 1);
    assert_int_equal(o.r[0].q.size, 100);
    run_free(&o);
    n = snprintf(buf, sizeof(buf), "*1\r\n$90\r\n%090d\r\n", 0);
    expect_error(buf, (size_t)n, 100, 0, "Protocol error: invalid bulk length");

    /* Several arguments: the third makes the request too big, and that is
     * seen from its header. */
    n = snprintf(buf, sizeof(buf), "PING\r\n*3\r\n$3\r\nSET\r\n$30\r\n%030d\r\n$50\r\n", 0);
    expect_error(buf, (size_t)n, 100, 1, "Protocol error: invalid bulk length");

    /* Inline lines too. */
    n = snprintf(buf, sizeof(buf), "%099d\n", 0);
    frame_every_way(buf, (size_t)n, 100, &o);
    assert_int_equal(o.n, 1);
    run_free(&o);
    n = snprintf(buf, sizeof(buf), "%0100d\n", 0);
    expect_error(buf, (size_t)n, 100, 0, "Protocol error: too big inline request");
    n = snprintf(buf, sizeof(buf), "%0100d", 0);
    expect_error(buf, (size_t)n, 100, 0, "Protocol error: too big inline request");
}

static void test_dead_after_error(void **state)
{
    (void)state;
    struct sl_resp st;
    struct sl_resp_req *q;
    static const char *bad[] = { "*1\r\n+OK\r\n", "*x\r\n", "\"a\n", "*1\r\n$-1\r\n" };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(sl_resp_init(&st, MAX_REQ), 0);
        assert_int_equal(sl_resp_feed(&st, bad[i], strlen(bad[i])), 0);
        assert_int_equal(sl_resp_next(&st, &q), SL_EPROTO);
        char msg[sizeof(st.err)];
        memcpy(msg, st.err, sizeof(msg));
        assert_true(strncmp(msg, "Protocol error: ", 16) == 0);
        for (int k = 0; k < 3; k++) {
            assert_int_equal(sl_resp_feed(&st, S("PING\r\n")), SL_EPROTO);
            assert_int_equal(sl_resp_next(&st, &q), SL_EPROTO);
            assert_string_equal(st.err, msg);
        }
        sl_resp_free(&st);
    }
}

/* ---- captures ---------------------------------------------------------------------- */

static void test_capture_limits(void **state)
{
    (void)state;
    struct run o;
    char buf[4096];
    char arg[201];
    memset(arg, 'A', 200);
    arg[200] = '\0';
    arg[0] = 'z';

    int n = snprintf(buf, sizeof(buf), "*2\r\n$3\r\nSET\r\n$200\r\n%s\r\nSET \"%s\" x\r\n", arg, arg);
    frame_every_way(buf, (size_t)n, MAX_REQ, &o);
    assert_int_equal(o.n, 2);
    for (int i = 0; i < 2; i++) {
        const struct sl_resp_req *q = &o.r[i].q;
        assert_int_equal(q->arglen[1], 200);
        assert_int_equal(strlen(q->argv[1]), SL_RESP_CAPTURE_LEN);
        assert_memory_equal(q->argv[1], arg, SL_RESP_CAPTURE_LEN);
    }
    run_free(&o);

    /* Exactly SL_RESP_CAPTURE_LEN bytes: kept whole. */
    n = snprintf(buf, sizeof(buf), "*1\r\n$64\r\n%.64s\r\n%.64s\r\n", arg, arg);
    frame_every_way(buf, (size_t)n, MAX_REQ, &o);
    assert_int_equal(o.n, 2);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(o.r[i].q.arglen[0], 64);
        assert_int_equal(strlen(o.r[i].q.argv[0]), 64);
    }
    run_free(&o);

    /* More arguments than captured. */
    n = snprintf(buf, sizeof(buf), "*12\r\n");
    for (int i = 0; i < 12; i++)
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "$%d\r\n%.*s\r\n", i + 1, i + 1, "abcdefghijkl");
    n += snprintf(buf + n, sizeof(buf) - (size_t)n, "a b c d e f g h i j k l\n");
    frame_every_way(buf, (size_t)n, MAX_REQ, &o);
    assert_int_equal(o.n, 2);
    expect_req(&o.r[0].q, o.r[0].q.size, 0, 12, "a", "ab", "abc", "abcd", "abcde", "abcdef",
               "abcdefg", "abcdefgh");
    expect_req(&o.r[1].q, 24, 1, 12, "a", "b", "c", "d", "e", "f", "g", "h");
    assert_int_equal(o.r[0].q.ncap, SL_RESP_CAPTURE_ARGS);
    assert_int_equal(o.r[1].q.ncap, SL_RESP_CAPTURE_ARGS);
    run_free(&o);
}

static void test_arg_is(void **state)
{
    (void)state;
    struct run o;
    frame_whole(S("*3\r\n$6\r\nclient\r\n$5\r\nReply\r\n$3\r\nOFF\r\nget\r\n"), MAX_REQ, &o);
    assert_int_equal(o.n, 2);
    const struct sl_resp_req *q = &o.r[0].q;
    assert_true(sl_resp_arg_is(q, 0, "CLIENT"));
    assert_true(sl_resp_arg_is(q, 1, "REPLY"));
    assert_true(sl_resp_arg_is(q, 2, "OFF"));
    assert_false(sl_resp_arg_is(q, 2, "OF"));
    assert_false(sl_resp_arg_is(q, 2, "OFFF"));
    assert_false(sl_resp_arg_is(q, 3, "OFF"));
    assert_false(sl_resp_arg_is(q, 0, "CLIENS"));
    assert_true(sl_resp_arg_is(&o.r[1].q, 0, "GET"));
    run_free(&o);
}

/* ---- big requests -------------------------------------------------------------------- */

static void test_big_bulk_in_pieces(void **state)
{
    (void)state;
    size_t big = 1024 * 1024;
    char head[64];
    int hn = snprintf(head, sizeof(head), "*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$%zu\r\n", big);
    size_t len = (size_t)hn + big + 2 + 6;
    char *s = malloc(len);
    memcpy(s, head, (size_t)hn);
    for (size_t i = 0; i < big; i++)
        s[hn + i] = (char)('a' + i % 26);
    memcpy(s + hn + big, "\r\nPING\r\n", 8);

    struct sl_resp st;
    struct sl_resp_req *q;
    assert_int_equal(sl_resp_init(&st, MAX_REQ), 0);
    int done = 0;
    for (size_t at = 0; at < len; at += 4096) {
        size_t k = len - at < 4096 ? len - at : 4096;
        assert_int_equal(sl_resp_feed(&st, s + at, k), 0);
        int rc;
        while ((rc = sl_resp_next(&st, &q)) == 1) {
            if (done == 0) {
                expect_req(q, (size_t)hn + big + 2, 0, 3, "SET", "big",
                           "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijkl");
                assert_int_equal(q->arglen[2], big);
            } else {
                expect_req(q, 6, 1, 1, "PING");
            }
            done++;
        }
        assert_int_equal(rc, 0);
        if (done == 0) {
            assert_int_equal(sl_resp_pending(&st), at + k);
            assert_false(sl_resp_idle(&st));
        }
        /* The payload streams: the framer holds a read at most. */
        assert_true(st.cap <= 8192);
    }
    assert_int_equal(done, 2);
    assert_true(sl_resp_idle(&st));
    sl_resp_free(&st);
    free(s);
}

/* ---- lifecycle ------------------------------------------------------------------------- */

/* A request in progress shows its own head only: nothing of the request
 * before it, whose arguments were longer and more numerous. */
static void test_head_is_fresh(void **state)
{
    (void)state;
    struct sl_resp st;
    struct sl_resp_req *q;
    static const char first[] = "*3\r\n$3\r\nGET\r\n$7\r\nalice:x\r\n$1\r\ny\r\n";
    static const char second[] = "*3\r\n$3\r\nSET\r\n$5\r\nbob:k\r\n$20000\r\nxxxx";
    assert_int_equal(sl_resp_init(&st, MAX_REQ), 0);
    assert_int_equal(sl_resp_feed(&st, first, sizeof(first) - 1), 0);
    assert_int_equal(sl_resp_next(&st, &q), 1);
    assert_string_equal(q->argv[1], "alice:x");
    assert_int_equal(sl_resp_next(&st, &q), 0);

    /* Only the count line: argc is known, nothing captured. */
    assert_int_equal(sl_resp_feed(&st, second, 4), 0);
    assert_int_equal(sl_resp_next(&st, &q), 0);
    assert_int_equal(st.req.argc, 3);
    assert_int_equal(st.req.ncap, 0);
    assert_int_equal(st.req.arglen[1], 0);
    assert_string_equal(st.req.argv[1], "");

    /* The command and half the key: one argument captured. */
    assert_int_equal(sl_resp_feed(&st, second + 4, 17), 0);
    assert_int_equal(sl_resp_next(&st, &q), 0);
    assert_int_equal(st.req.ncap, 1);
    assert_string_equal(st.req.argv[0], "SET");
    assert_int_equal(st.req.arglen[1], 0);

    /* The key and the start of the value. */
    assert_int_equal(sl_resp_feed(&st, second + 21, sizeof(second) - 1 - 21), 0);
    assert_int_equal(sl_resp_next(&st, &q), 0);
    assert_int_equal(st.req.ncap, 2);
    assert_string_equal(st.req.argv[1], "bob:k");
    assert_int_equal(st.req.arglen[1], 5);
    sl_resp_free(&st);
}

/* A command name holding a NUL is captured with its length: readers must
 * go by arglen, not by the string. */
static void test_name_with_nul(void **state)
{
    (void)state;
    struct run o;
    frame_whole(S("*1\r\n$4\r\nSET\0\r\n"), MAX_REQ, &o);
    assert_int_equal(o.n, 1);
    assert_int_equal(o.r[0].q.arglen[0], 4);
    assert_memory_equal(o.r[0].q.argv[0], "SET\0", 5);
    run_free(&o);
}

/* A length line ends at its CR, and the byte after the CR is skipped
 * whatever it is, as Redis does; a NUL before the CR hides it (Redis looks
 * with strchr), so the line goes on until it is too long. */
static void test_length_line_as_redis(void **state)
{
    (void)state;
    struct run o;
    frame_every_way(S("*2\r\n$3\ryGET\r\n$1\r\nz\r\n*1\rx$4\r\nPING\r\n"), MAX_REQ, &o);
    assert_int_equal(o.err, 0);
    assert_int_equal(o.n, 2);
    expect_req(&o.r[0].q, 20, 0, 2, "GET", "z");
    expect_req(&o.r[1].q, 14, 0, 1, "PING");
    run_free(&o);

    struct sl_resp st;
    struct sl_resp_req *q;
    assert_int_equal(sl_resp_init(&st, MAX_REQ), 0);
    assert_int_equal(sl_resp_feed(&st, S("*2\r\n$\0\r\n$1\r\nz\r\n")), 0);
    assert_int_equal(sl_resp_next(&st, &q), 0);
    sl_resp_free(&st);
    assert_int_equal(sl_resp_init(&st, MAX_REQ), 0);
    assert_int_equal(sl_resp_feed(&st, S("*1\0\r\n")), 0);
    assert_int_equal(sl_resp_next(&st, &q), 0);
    sl_resp_free(&st);
}

static void test_init_free_idle_pending(void **state)
{
    (void)state;
    struct sl_resp st;
    struct sl_resp_req *q;

    assert_int_equal(sl_resp_init(&st, 0), 0);
    assert_int_equal(st.max_request, MAX_REQ); /* 0: the default */
    assert_true(sl_resp_idle(&st));
    assert_int_equal(sl_resp_pending(&st), 0);
    assert_int_equal(sl_resp_next(&st, &q), 0);
    assert_int_equal(sl_resp_feed(&st, NULL, 0), 0);
    assert_int_equal(sl_resp_next(&st, &q), 0);
    assert_true(sl_resp_idle(&st));

    /* Partial multibulk, at every stage. */
    static const char req[] = "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
    for (size_t i = 0; i + 1 < sizeof(req) - 1; i++) {
        assert_int_equal(sl_resp_feed(&st, req + i, 1), 0);
        assert_int_equal(sl_resp_next(&st, &q), 0);
        assert_false(sl_resp_idle(&st));
        assert_int_equal(sl_resp_pending(&st), i + 1);
    }
    assert_int_equal(sl_resp_feed(&st, req + sizeof(req) - 2, 1), 0);
    assert_int_equal(sl_resp_next(&st, &q), 1);
    assert_int_equal(q->size, sizeof(req) - 1);
    assert_true(sl_resp_idle(&st));
    assert_int_equal(sl_resp_pending(&st), 0);

    /* Partial inline. */
    assert_int_equal(sl_resp_feed(&st, S("PI")), 0);
    assert_int_equal(sl_resp_next(&st, &q), 0);
    assert_false(sl_resp_idle(&st));
    assert_int_equal(sl_resp_pending(&st), 2);
    assert_int_equal(sl_resp_feed(&st, S("NG\r\nGET")), 0);
    assert_int_equal(sl_resp_pending(&st), 9);
    assert_int_equal(sl_resp_next(&st, &q), 1);
    expect_req(q, 6, 1, 1, "PING");
    assert_int_equal(sl_resp_pending(&st), 3);
    assert_int_equal(sl_resp_next(&st, &q), 0);
    assert_int_equal(sl_resp_feed(&st, S("\r\n")), 0);
    assert_int_equal(sl_resp_next(&st, &q), 1);
    expect_req(q, 5, 1, 1, "GET");
    assert_true(sl_resp_idle(&st));

    /* Free, free again, re-init: a fresh state. */
    sl_resp_free(&st);
    sl_resp_free(&st);
    assert_int_equal(sl_resp_init(&st, 1000), 0);
    assert_int_equal(st.max_request, 1000);
    assert_true(sl_resp_idle(&st));
    assert_int_equal(sl_resp_feed(&st, S("*1\r\n$4\r\nPING\r\n")), 0);
    assert_int_equal(sl_resp_next(&st, &q), 1);
    expect_req(q, 14, 0, 1, "PING");
    sl_resp_free(&st);

    /* Re-init after an error: alive again. */
    assert_int_equal(sl_resp_init(&st, 0), 0);
    assert_int_equal(sl_resp_feed(&st, S("*x\r\n")), 0);
    assert_int_equal(sl_resp_next(&st, &q), SL_EPROTO);
    sl_resp_free(&st);
    assert_int_equal(sl_resp_init(&st, 0), 0);
    assert_int_equal(st.err[0], '\0');
    assert_int_equal(sl_resp_feed(&st, S("PING\r\n")), 0);
    assert_int_equal(sl_resp_next(&st, &q), 1);
    sl_resp_free(&st);
}

/* Appends to <b> (at <*n>, room for <cap>) a multibulk request of <argc>
 * random arguments, some lengths at the capture's edges; with <flaw>, one
 * byte of it is made doubtful (a bad type byte, a leading zero, a sign, a
 * blank, a lone CR) or its count is off. */
static void put_request(char *b, size_t *n, size_t cap, unsigned argc, int flaw)
{
    static const unsigned lens[] = { 0, 1, 3, 16, 63, 64, 65, 100 };
    size_t at = *n, start = *n;
    at += (size_t)snprintf(b + at, cap - at, "*%u\r\n", argc);
    for (unsigned i = 0; i < argc; i++) {
        unsigned len = lens[rng() % (sizeof(lens) / sizeof(lens[0]))];
        at += (size_t)snprintf(b + at, cap - at, "$%u\r\n", len);
        for (unsigned k = 0; k < len; k++)
            b[at++] = (char)('a' + rng() % 26);
        b[at++] = '\r';
        b[at++] = '\n';
    }
    if (flaw) {
        static const char bad[] = { '+', '0', '-', ' ', '\r', '\n', '*', '9', '\0' };
        b[start + 1 + rng() % (at - start - 1)] = bad[rng() % sizeof(bad)];
    }
    *n = at;
}

/* The framer's shortcut for whole requests (up to SL_RESP_CAPTURE_ARGS
 * arguments, in one feed) and its state machine (the same bytes fed in
 * pieces, where the shortcut cannot apply) return the same requests, the
 * same captures and the same errors, with max_request low enough that its
 * cap trips in both; a request leaves nothing of the one before in the
 * captures past its own. */
static void test_whole_requests_as_pieces(void **state)
{
    (void)state;
    static const uint64_t caps[] = { MAX_REQ, 40, 90, 200 };
    char *b = malloc(8192);
    assert_non_null(b);
    for (int round = 0; round < 400; round++) {
        size_t n = 0;
        int nreq = 1 + (int)(rng() % 6);
        for (int i = 0; i < nreq; i++)
            put_request(b, &n, 8192, (unsigned)(rng() % 11), round % 4 == 3 && i == nreq - 1);
        uint64_t cap = caps[round % 4 == 1 ? rng() % 4 : 0];
        struct run whole, bytes;
        size_t *cuts = malloc(n * sizeof(*cuts));
        assert_non_null(cuts);
        for (size_t k = 0; k + 1 < n; k++)
            cuts[k] = k + 1;
        frame_whole(b, n, cap, &whole);
        frame_cuts(b, n, cuts, n - 1, cap, &bytes);
        assert_same_run(&whole, &bytes);
        for (size_t i = 0; i < whole.n; i++)
            for (unsigned k = whole.r[i].q.ncap; k < SL_RESP_CAPTURE_ARGS; k++) {
                assert_int_equal(whole.r[i].q.arglen[k], 0);
                assert_int_equal(whole.r[i].q.argv[k][0], '\0');
            }
        run_free(&whole);
        run_free(&bytes);
        free(cuts);
    }
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multibulk_shapes),
        cmocka_unit_test(test_empty_multibulk),
        cmocka_unit_test(test_inline_simple),
        cmocka_unit_test(test_inline_quotes),
        cmocka_unit_test(test_inline_unbalanced),
        cmocka_unit_test(test_inline_nul),
        cmocka_unit_test(test_mixed_pipeline),
        cmocka_unit_test(test_pipeline_every_split),
        cmocka_unit_test(test_long_pipeline),
        cmocka_unit_test(test_buffer_stays_small),
        cmocka_unit_test(test_errors_type),
        cmocka_unit_test(test_errors_bulk_length),
        cmocka_unit_test(test_errors_multibulk_length),
        cmocka_unit_test(test_huge_lengths_rejected_early),
        cmocka_unit_test(test_line_caps),
        cmocka_unit_test(test_max_request),
        cmocka_unit_test(test_dead_after_error),
        cmocka_unit_test(test_capture_limits),
        cmocka_unit_test(test_arg_is),
        cmocka_unit_test(test_big_bulk_in_pieces),
        cmocka_unit_test(test_init_free_idle_pending),
        cmocka_unit_test(test_head_is_fresh),
        cmocka_unit_test(test_length_line_as_redis),
        cmocka_unit_test(test_name_with_nul),
        cmocka_unit_test(test_whole_requests_as_pieces),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

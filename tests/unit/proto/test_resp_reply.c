/* sluice — tests of the RESP reply scanner (src/proto/resp_reply.c).
 *
 * Every stream is written with a builder that records, as it goes, where each
 * top-level reply ends and whether it is a push: that is the oracle. Each
 * stream is then scanned whole, split in two at every byte boundary, byte by
 * byte and in random pieces (with empty calls mixed in), and every way must
 * give exactly the oracle's ends and flags, and an error iff one is expected.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/err.h"
#include "proto/resp_reply.h"

/* ---- stream builder: bytes plus the expected reply ends ----------------- */

struct sb {
    char     *buf;   /* the stream */
    size_t    len;   /* bytes in buf */
    size_t    cap;   /* bytes allocated for buf */
    size_t   *off;   /* expected end offset of each reply */
    unsigned *fl;    /* expected flags of each reply */
    size_t    n;     /* replies recorded */
    size_t    ncap;  /* entries allocated in off and fl */
};

static void sb_put(struct sb *b, const void *data, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->buf = realloc(b->buf, b->cap);
        assert_non_null(b->buf);
    }
    memcpy(b->buf + b->len, data, n);
    b->len += n;
}

static void sb_str(struct sb *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

__attribute__((format(printf, 2, 3)))
static void sb_fmt(struct sb *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    assert_true(n >= 0 && (size_t)n < sizeof(tmp));
    sb_put(b, tmp, (size_t)n);
}

/* A bulk string of a given type byte ($, !, =) holding <s,n>. */
static void sb_bulk(struct sb *b, char type, const char *s, size_t n)
{
    sb_fmt(b, "%c%zu\r\n", type, n);
    sb_put(b, s, n);
    sb_put(b, "\r\n", 2);
}

/* Records that a top-level reply ends here. */
static void sb_end(struct sb *b, unsigned flags)
{
    if (b->n == b->ncap) {
        b->ncap = b->ncap * 2 + 16;
        b->off = realloc(b->off, b->ncap * sizeof(*b->off));
        b->fl = realloc(b->fl, b->ncap * sizeof(*b->fl));
        assert_non_null(b->off);
        assert_non_null(b->fl);
    }
    b->off[b->n] = b->len;
    b->fl[b->n] = SL_REPLY_DONE | flags;
    b->n++;
}

/* One whole reply: append <s> and mark its end. */
static void sb_reply(struct sb *b, const char *s, unsigned flags)
{
    sb_str(b, s);
    sb_end(b, flags);
}

static void sb_free(struct sb *b)
{
    free(b->buf);
    free(b->off);
    free(b->fl);
    memset(b, 0, sizeof(*b));
}

/* ---- scanning in pieces ------------------------------------------------- */

/* What one way of feeding a stream saw. */
struct seen {
    size_t   *off;  /* end offset of each DONE, from the stream's start */
    unsigned *fl;   /* flags of each DONE */
    size_t    n;    /* DONEs */
    size_t    cap;  /* entries allocated */
    int       err;  /* SL_EPROTO was returned */
};

static void seen_reset(struct seen *w)
{
    w->n = 0;
    w->err = 0;
}

static void seen_free(struct seen *w)
{
    free(w->off);
    free(w->fl);
    memset(w, 0, sizeof(*w));
}

/* Feeds one piece <p,n> at stream offset <base>; checks the API's promises
 * on each call. */
static void feed(struct sl_reply_scan *s, struct seen *w, const char *p, size_t n, size_t base)
{
    size_t at = 0;

    if (w->err)
        return;
    do {
        unsigned f = 12345;
        long r = sl_reply_scan(s, p + at, n - at, &f);

        if (r < 0) {
            assert_int_equal(r, SL_EPROTO);
            w->err = 1;
            /* dead from now on */
            assert_int_equal(sl_reply_scan(s, "+OK\r\n", 5, &f), SL_EPROTO);
            return;
        }
        assert_true((size_t)r <= n - at);
        if (f == 0) {
            assert_int_equal((size_t)r, n - at); /* no reply ended: all consumed */
        } else {
            assert_true(f & SL_REPLY_DONE);
            assert_true(r > 0);
            if (w->n == w->cap) {
                w->cap = w->cap * 2 + 64;
                w->off = realloc(w->off, w->cap * sizeof(*w->off));
                w->fl = realloc(w->fl, w->cap * sizeof(*w->fl));
                assert_non_null(w->off);
                assert_non_null(w->fl);
            }
            w->off[w->n] = base + at + (size_t)r;
            w->fl[w->n] = f;
            w->n++;
            assert_true(sl_reply_idle(s));
        }
        at += (size_t)r;
    } while (at < n);
}

static void expect_same(const struct seen *w, const size_t *off, const unsigned *fl, size_t n,
                        int err, const char *how, size_t arg)
{
    if (w->n != n || w->err != err)
        fail_msg("%s %zu: %zu replies err %d, expected %zu err %d", how, arg, w->n, w->err, n, err);
    for (size_t i = 0; i < n; i++) {
        if (w->off[i] != off[i] || w->fl[i] != fl[i])
            fail_msg("%s %zu: reply %zu ends at %zu flags %u, expected %zu flags %u",
                     how, arg, i, w->off[i], w->fl[i], off[i], fl[i]);
    }
}

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rng(void)
{
    uint64_t x = rng_state; /* xorshift64 */

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

/* Streams longer than this are not split at every boundary (quadratic). */
#define EVERY_SPLIT_MAX (64 * 1024)

/* Scans <buf,len> every way and compares with the expected ends. */
static void check_raw(const char *buf, size_t len, const size_t *off, const unsigned *fl, size_t n,
                      int err)
{
    struct sl_reply_scan s;
    struct seen w = {0};

    /* whole */
    sl_reply_init(&s);
    assert_true(sl_reply_idle(&s));
    feed(&s, &w, buf, len, 0);
    expect_same(&w, off, fl, n, err, "whole", len);
    if (!err)
        assert_true(sl_reply_idle(&s) == (n > 0 && off[n - 1] == len) || len == 0);

    /* two pieces, split at every boundary */
    if (len <= EVERY_SPLIT_MAX) {
        for (size_t k = 0; k <= len; k++) {
            seen_reset(&w);
            sl_reply_init(&s);
            feed(&s, &w, buf, k, 0);
            feed(&s, &w, buf + k, len - k, k);
            expect_same(&w, off, fl, n, err, "split at", k);
        }
    }

    /* byte by byte */
    seen_reset(&w);
    sl_reply_init(&s);
    for (size_t i = 0; i < len; i++)
        feed(&s, &w, buf + i, 1, i);
    expect_same(&w, off, fl, n, err, "bytewise", len);

    /* random pieces, some empty */
    for (int round = 0; round < 4; round++) {
        size_t i = 0;

        seen_reset(&w);
        sl_reply_init(&s);
        while (i < len) {
            size_t k = (size_t)(rng() % (round == 0 ? 4 : round == 1 ? 40 : 4000));

            if (k > len - i)
                k = len - i;
            feed(&s, &w, buf + i, k, i);
            i += k;
        }
        expect_same(&w, off, fl, n, err, "random round", (size_t)round);
    }
    seen_free(&w);
}

static void check(const struct sb *b, int err)
{
    check_raw(b->buf, b->len, b->off, b->fl, b->n, err);
}

/* ---- RESP2 ------------------------------------------------------------- */

static void test_resp2_scalars(void **state)
{
    struct sb b = {0};

    (void)state;
    sb_reply(&b, "+OK\r\n", 0);
    sb_reply(&b, "+\r\n", 0);
    sb_reply(&b, "-ERR unknown command 'FOO', with args beginning with: \r\n", 0);
    sb_reply(&b, "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n", 0);
    sb_reply(&b, ":0\r\n", 0);
    sb_reply(&b, ":-9223372036854775808\r\n", 0);
    sb_reply(&b, ":1000\r\n", 0);
    sb_reply(&b, "+has\ra bare CR\r\n", 0); /* lines are not validated inside */
    check(&b, 0);
    sb_free(&b);
}

static void test_resp2_bulk(void **state)
{
    struct sb b = {0};
    char bin[300];

    (void)state;
    for (size_t i = 0; i < sizeof(bin); i++)
        bin[i] = (char)i;
    sb_reply(&b, "$3\r\nbar\r\n", 0);
    sb_reply(&b, "$0\r\n\r\n", 0);
    sb_reply(&b, "$-1\r\n", 0);
    sb_reply(&b, "$4\r\n\r\n\r\n\r\n", 0); /* the payload is CRLFs: skipped, not read */
    sb_bulk(&b, '$', bin, sizeof(bin));
    sb_end(&b, 0);
    sb_reply(&b, "$010\r\n0123456789\r\n", 0); /* leading zeros are digits */
    check(&b, 0);
    sb_free(&b);
}

static void test_resp2_arrays(void **state)
{
    struct sb b = {0};

    (void)state;
    sb_reply(&b, "*0\r\n", 0);
    sb_reply(&b, "*-1\r\n", 0);
    sb_reply(&b, "*2\r\n$3\r\nfoo\r\n$-1\r\n", 0);
    sb_reply(&b, "*3\r\n:1\r\n*2\r\n+a\r\n-b\r\n*0\r\n", 0);
    sb_reply(&b, "*2\r\n*-1\r\n*1\r\n*1\r\n$1\r\nx\r\n", 0);
    /* SCAN-like */
    sb_reply(&b, "*2\r\n$1\r\n0\r\n*3\r\n$4\r\nkey1\r\n$4\r\nkey2\r\n$4\r\nkey3\r\n", 0);
    check(&b, 0);
    sb_free(&b);
}

/* ---- RESP3 ------------------------------------------------------------- */

static void test_resp3_scalars(void **state)
{
    struct sb b = {0};

    (void)state;
    sb_reply(&b, "_\r\n", 0);
    sb_reply(&b, ",3.14\r\n", 0);
    sb_reply(&b, ",-inf\r\n", 0);
    sb_reply(&b, ",nan\r\n", 0);
    sb_reply(&b, "#t\r\n", 0);
    sb_reply(&b, "#f\r\n", 0);
    sb_reply(&b, "(3492890328409238509324850943850943825024385\r\n", 0);
    sb_reply(&b, "!21\r\nSYNTAX invalid syntax\r\n", 0);
    sb_reply(&b, "!0\r\n\r\n", 0);
    sb_reply(&b, "=15\r\ntxt:Some string\r\n", 0);
    sb_reply(&b, "=8\r\nmkd:\r\n\r\n\r\n", 0);
    check(&b, 0);
    sb_free(&b);
}

static void test_resp3_maps_sets(void **state)
{
    struct sb b = {0};

    (void)state;
    sb_reply(&b, "%0\r\n", 0);
    sb_reply(&b, "~0\r\n", 0);
    sb_reply(&b, "%2\r\n+first\r\n:1\r\n+second\r\n:2\r\n", 0);
    sb_reply(&b, "~5\r\n+orange\r\n+apple\r\n#t\r\n:100\r\n:999\r\n", 0);
    /* map with aggregate keys and values */
    sb_reply(&b, "%2\r\n*1\r\n:1\r\n~1\r\n_\r\n%1\r\n+k\r\n%0\r\n,1.5\r\n", 0);
    /* HELLO 3's reply shape */
    sb_reply(&b, "%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n"
                 "$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:5\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n"
                 "$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n", 0);
    sb_reply(&b, "%-1\r\n", 0); /* null map: hiredis takes -1 for every length */
    check(&b, 0);
    sb_free(&b);
}

static void test_attr_top(void **state)
{
    struct sb b = {0};

    (void)state;
    /* the example of the RESP3 spec: one reply, the attribute is its prefix */
    sb_reply(&b, "|1\r\n+key-popularity\r\n%2\r\n$1\r\na\r\n,0.1923\r\n$1\r\nb\r\n,0.0012\r\n"
                 "*2\r\n:2039123\r\n:9543892\r\n", 0);
    sb_reply(&b, "|1\r\n+ttl\r\n:3600\r\n$3\r\nbar\r\n", 0);
    sb_reply(&b, "|0\r\n+OK\r\n", 0);
    sb_reply(&b, "|0\r\n|0\r\n|1\r\n+a\r\n+b\r\n:1\r\n", 0); /* several in a row */
    sb_reply(&b, "|1\r\n+a\r\n+b\r\n*0\r\n", 0);
    sb_reply(&b, "|1\r\n+a\r\n+b\r\n_\r\n", 0);
    check(&b, 0);
    sb_free(&b);
}

static void test_attr_nested(void **state)
{
    struct sb b = {0};

    (void)state;
    /* inside an array: not one of its 3 items */
    sb_reply(&b, "*3\r\n:1\r\n|1\r\n+k\r\n+v\r\n:2\r\n:3\r\n", 0);
    /* on the first item and the last one */
    sb_reply(&b, "*2\r\n|1\r\n+k\r\n+v\r\n:1\r\n|2\r\n+a\r\n:1\r\n+b\r\n:2\r\n*1\r\n:9\r\n", 0);
    /* on a map key and on a map value */
    sb_reply(&b, "%1\r\n|1\r\n+k\r\n+v\r\n+key\r\n|1\r\n+k\r\n+v\r\n$5\r\nvalue\r\n", 0);
    /* an attribute inside an attribute (on its key and on its value) */
    sb_reply(&b, "|1\r\n|1\r\n+a\r\n+b\r\n+k\r\n|1\r\n+c\r\n+d\r\n+v\r\n+OK\r\n", 0);
    /* attribute values that are aggregates, attributed themselves */
    sb_reply(&b, "|1\r\n+k\r\n|1\r\n+x\r\n*1\r\n:1\r\n*2\r\n:1\r\n:2\r\n~1\r\n+m\r\n", 0);
    /* an attribute whose item is an aggregate with attributes inside */
    sb_reply(&b, "*1\r\n|1\r\n+k\r\n+v\r\n*1\r\n|0\r\n|1\r\n+k\r\n+v\r\n$1\r\nz\r\n", 0);
    check(&b, 0);
    sb_free(&b);
}

/* ---- pushes -------------------------------------------------------------- */

static void test_push_top(void **state)
{
    struct sb b = {0};

    (void)state;
    sb_reply(&b, ">3\r\n$7\r\nmessage\r\n$7\r\nchannel\r\n$5\r\nhello\r\n", SL_REPLY_PUSH);
    sb_reply(&b, ">4\r\n$8\r\npmessage\r\n$2\r\nc*\r\n$2\r\nch\r\n*2\r\n:1\r\n:2\r\n",
             SL_REPLY_PUSH);
    sb_reply(&b, ">0\r\n", SL_REPLY_PUSH);
    /* an attribute before a push: the reply is still a push */
    sb_reply(&b, "|1\r\n+a\r\n+b\r\n>1\r\n+x\r\n", SL_REPLY_PUSH);
    /* a push inside an attribute is not the top-level item (nor an item
     * of the attribute: test_push_inside) */
    sb_reply(&b, "|1\r\n+a\r\n>1\r\n+b\r\n:7\r\n+v\r\n", 0);
    sb_reply(&b, "+OK\r\n", 0); /* the flag does not stick */
    check(&b, 0);
    sb_free(&b);
}

static void test_push_interleaved(void **state)
{
    struct sb b = {0};

    (void)state;
    for (int i = 0; i < 50; i++) {
        sb_reply(&b, "+OK\r\n", 0);
        sb_reply(&b, ">3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n", SL_REPLY_PUSH);
        sb_reply(&b, "$3\r\nbar\r\n", 0);
        if (i % 3 == 0)
            sb_reply(&b, ">2\r\n$10\r\ninvalidate\r\n*1\r\n$3\r\nfoo\r\n", SL_REPLY_PUSH);
        sb_reply(&b, "*2\r\n:1\r\n%1\r\n+a\r\n_\r\n", 0);
        sb_reply(&b, ">2\r\n+x\r\n+y\r\n", SL_REPLY_PUSH);
    }
    check(&b, 0);
    sb_free(&b);
}

/* A push inside an aggregate is none of its items: Redis 7.0 writes the
 * message a PUBLISH in MULTI delivers to the client's own subscription in
 * the middle of EXEC's reply (and an invalidation likewise), whose count
 * holds only the commands' replies. */
static int pick(const char *reply, uint32_t k);

static void test_push_inside(void **state)
{
    struct sb b = {0};

    (void)state;
    sb_reply(&b, "*1\r\n>3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nx\r\n:1\r\n", 0);
    sb_reply(&b, "+PONG\r\n", 0);
    sb_reply(&b, "*2\r\n+OK\r\n>2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n>0\r\n:1\r\n", 0);
    sb_reply(&b, "*2\r\n*1\r\n>1\r\n+x\r\n:1\r\n:2\r\n", 0); /* deeper */
    sb_reply(&b, ">2\r\n>1\r\n+x\r\n+y\r\n", SL_REPLY_PUSH); /* in a push: an item */
    check(&b, 0);
    sb_free(&b);
    /* EXEC's element k is the k-th command's reply, pushes apart */
    assert_int_equal(pick("*2\r\n>1\r\n+x\r\n-E\r\n:1\r\n", 0), '-');
    assert_int_equal(pick("*2\r\n+OK\r\n>1\r\n+x\r\n:1\r\n", 1), ':');
}

/* ---- depth ------------------------------------------------------------- */

static void nested(struct sb *b, int depth, const char *open)
{
    for (int i = 0; i < depth; i++)
        sb_str(b, open);
    sb_str(b, ":1\r\n");
}

static void test_depth_20(void **state)
{
    struct sb b = {0};

    (void)state;
    nested(&b, 20, "*1\r\n");
    sb_end(&b, 0);
    nested(&b, 20, "%1\r\n+k\r\n");
    sb_end(&b, 0);
    /* 20 deep, 2 wide at every level: the counters must pop level by level */
    for (int i = 0; i < 20; i++)
        sb_str(&b, "*2\r\n:0\r\n");
    sb_str(&b, ":1\r\n");
    sb_end(&b, 0);
    check(&b, 0);
    sb_free(&b);
}

static void test_depth_max(void **state)
{
    struct sb b = {0};

    (void)state;
    nested(&b, SL_REPLY_MAX_DEPTH, "*1\r\n");
    sb_end(&b, 0);
    nested(&b, SL_REPLY_MAX_DEPTH, ">1\r\n");
    sb_end(&b, SL_REPLY_PUSH);
    /* attributes take a level while they are open */
    nested(&b, SL_REPLY_MAX_DEPTH - 1, "*1\r\n");
    b.len -= 4;
    sb_str(&b, "|1\r\n+k\r\n+v\r\n:1\r\n");
    sb_end(&b, 0);
    check(&b, 0);
    sb_free(&b);
}

static void test_depth_over(void **state)
{
    struct sb b = {0};

    (void)state;
    sb_reply(&b, "+OK\r\n", 0);
    nested(&b, SL_REPLY_MAX_DEPTH + 1, "*1\r\n");
    check(&b, 1);
    sb_free(&b);

    sb_reply(&b, "+OK\r\n", 0);
    nested(&b, SL_REPLY_MAX_DEPTH, "*1\r\n");
    b.len -= 4;
    sb_str(&b, "|1\r\n+k\r\n+v\r\n:1\r\n"); /* the attribute is level 65 */
    check(&b, 1);
    sb_free(&b);
}

/* ---- a big realistic reply: COMMAND DOCS -------------------------------- */

struct gen {
    struct sb *b;   /* where it goes */
    int        resp3; /* maps as %, sets as ~; else flat arrays */
};

static void g_map(struct gen *g, unsigned pairs)
{
    if (g->resp3)
        sb_fmt(g->b, "%%%u\r\n", pairs);
    else
        sb_fmt(g->b, "*%u\r\n", pairs * 2);
}

static void g_set(struct gen *g, unsigned n)
{
    sb_fmt(g->b, "%c%u\r\n", g->resp3 ? '~' : '*', n);
}

static void g_bulk(struct gen *g, const char *s)
{
    sb_bulk(g->b, '$', s, strlen(s));
}

static void g_word(char *out, size_t cap)
{
    static const char *const w[] = {
        "key", "value", "member", "count", "timeout", "pattern", "field", "score",
        "increment", "expiration", "destination", "numkeys", "channel", "cursor",
    };
    snprintf(out, cap, "%s%u", w[rng() % (sizeof(w) / sizeof(w[0]))], (unsigned)(rng() % 100));
}

/* One argument, with sub-arguments down to <depth> more levels. */
static void g_arg(struct gen *g, int depth)
{
    char name[64];
    int block = depth > 0 && rng() % 3 == 0;
    int token = rng() % 2;
    unsigned nflags = (unsigned)(rng() % 3);

    g_word(name, sizeof(name));
    g_map(g, 3u + (unsigned)token + (nflags > 0) + (unsigned)block);
    g_bulk(g, "name");
    g_bulk(g, name);
    g_bulk(g, "type");
    g_bulk(g, block ? (rng() % 2 ? "block" : "oneof") : "string");
    g_bulk(g, "display_text");
    g_bulk(g, name);
    if (token) {
        g_bulk(g, "token");
        g_bulk(g, "WITHSCORES");
    }
    if (nflags > 0) {
        g_bulk(g, "flags");
        g_set(g, nflags);
        sb_str(g->b, "+optional\r\n");
        if (nflags > 1)
            sb_str(g->b, "+multiple\r\n");
    }
    if (block) {
        unsigned n = 1u + (unsigned)(rng() % 3);

        g_bulk(g, "arguments");
        sb_fmt(g->b, "*%u\r\n", n);
        for (unsigned i = 0; i < n; i++)
            g_arg(g, depth - 1);
    }
}

/* One command's doc map; with subcommands when <sub>. */
static void g_doc(struct gen *g, int sub)
{
    unsigned nargs = (unsigned)(rng() % 4);
    int history = rng() % 2;

    g_map(g, 4u + (nargs > 0) + (unsigned)history + (unsigned)(sub > 0));
    g_bulk(g, "summary");
    g_bulk(g, "Returns the members of the set resulting from the union of all the given sets.");
    g_bulk(g, "since");
    g_bulk(g, "7.0.0");
    g_bulk(g, "group");
    g_bulk(g, "sorted-set");
    g_bulk(g, "complexity");
    g_bulk(g, "O(N) where N is the total number of elements in all given sets.");
    if (history) {
        g_bulk(g, "history");
        sb_str(g->b, "*2\r\n*2\r\n");
        g_bulk(g, "6.2.0");
        g_bulk(g, "Added the `NX` and `XX` options.");
        sb_str(g->b, "*2\r\n");
        g_bulk(g, "7.0.0");
        g_bulk(g, "Added `GT` and `LT`.");
    }
    if (nargs > 0) {
        g_bulk(g, "arguments");
        sb_fmt(g->b, "*%u\r\n", nargs);
        for (unsigned i = 0; i < nargs; i++)
            g_arg(g, 3);
    }
    if (sub > 0) {
        unsigned n = 1u + (unsigned)(rng() % 4);

        g_bulk(g, "subcommands");
        g_map(g, n);
        for (unsigned i = 0; i < n; i++) {
            char name[64];

            g_word(name, sizeof(name));
            g_bulk(g, name);
            g_doc(g, sub - 1);
        }
    }
}

/* COMMAND DOCS for <ncmd> commands, then a PING reply. Nesting reaches:
 * top map, doc, subcommands, doc, arguments, arg, arguments, arg, arguments,
 * arg, arguments, arg, flags: 13 levels. */
static void g_command_docs(struct sb *b, int resp3, unsigned ncmd)
{
    struct gen g = { b, resp3 };

    g_map(&g, ncmd);
    for (unsigned i = 0; i < ncmd; i++) {
        char name[64];

        snprintf(name, sizeof(name), "cmd%u", i);
        g_bulk(&g, name);
        g_doc(&g, i % 4 == 0 ? 1 : 0);
    }
    sb_end(b, 0);
    sb_reply(b, "+PONG\r\n", 0);
}

/* The deepest nesting the scanner reaches on <b>. */
static unsigned max_depth(const struct sb *b)
{
    struct sl_reply_scan s;
    unsigned f, max = 0;

    sl_reply_init(&s);
    for (size_t i = 0; i < b->len; i++) {
        assert_true(sl_reply_scan(&s, b->buf + i, 1, &f) == 1);
        if (s.depth > max)
            max = s.depth;
    }
    return max;
}

static void test_command_docs_resp3(void **state)
{
    struct sb b = {0};

    (void)state;
    rng_state = 42;
    g_command_docs(&b, 1, 240); /* ~ Redis 7's size: a few hundred KiB */
    assert_true(b.len > 100 * 1024);
    assert_true(max_depth(&b) >= 8);
    check(&b, 0);
    sb_free(&b);

    rng_state = 43;
    g_command_docs(&b, 1, 12); /* small enough to split at every byte */
    assert_true(b.len <= EVERY_SPLIT_MAX);
    assert_true(max_depth(&b) >= 8);
    check(&b, 0);
    sb_free(&b);
}

static void test_command_docs_resp2(void **state)
{
    struct sb b = {0};

    (void)state;
    rng_state = 42;
    g_command_docs(&b, 0, 240);
    assert_true(max_depth(&b) >= 8);
    check(&b, 0);
    sb_free(&b);

    rng_state = 44;
    g_command_docs(&b, 0, 12);
    assert_true(b.len <= EVERY_SPLIT_MAX);
    assert_true(max_depth(&b) >= 8);
    check(&b, 0);
    sb_free(&b);
}

/* ---- malformed input --------------------------------------------------- */

static void test_malformed(void **state)
{
    static const char *const bad[] = {
        "@\r\n", "\0", "x", " +OK\r\n", "\r\n",
        ";4\r\nabcd\r\n", ".\r\n",          /* streamed chunk and end */
        "$?\r\n;3\r\nfoo\r\n;0\r\n", "*?\r\n:1\r\n.\r\n", "%?\r\n", "~?\r\n",
        "$\r\n", "*\r\n", "$abc\r\n", "$ 3\r\nbar\r\n", "$3 \r\nbar\r\n", "$3x\r\n",
        "$+3\r\nbar\r\n", "$-2\r\n", "$-0\r\n", "$-01\r\n", "$--1\r\n", "$1-\r\n", "$-\r\n",
        "*-2\r\n", "|-1\r\n", "$3\n", "$3\rbar\r\n",
        "$99999999999999999999\r\n",          /* 20 digits */
        "*4294967296\r\n", "~4294967296\r\n", ">4294967296\r\n",
        "%2147483648\r\n", "|2147483648\r\n", /* 2N items > UINT32_MAX */
        "$3\r\nbarXY", "$3\r\nbar\n\n", "$3\r\nbar\r\r", "$3\r\nbar\rX", "$0\r\nX\r\n",
        "!3\r\nbarbar\r\n", "=3\r\nbar \r\n",
        "_x\r\n", "_\n", "_\r\r", "_ \r\n",
        "+OK\n", "-ERR\n", ":1\n", ",1.5\n", "#t\n", "(1\n", "+\n",
        "*2\r\n:1\r\n@\r\n", "%1\r\n+k\r\n$1\r\nvv\r\n", "|1\r\n+a\r\n+b\r\n$-2\r\n",
    };
    struct sb b = {0};

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t n = strlen(bad[i]) ? strlen(bad[i]) : 1; /* "\0" is one NUL */

        /* after a good reply, so the ends before the error are checked too */
        sb_reply(&b, "+OK\r\n", 0);
        sb_reply(&b, ">1\r\n:1\r\n", SL_REPLY_PUSH);
        sb_put(&b, bad[i], n);
        check(&b, 1);
        /* and alone, at the very start */
        check_raw(bad[i], n, NULL, NULL, 0, 1);
        sb_free(&b);
    }
}

static void test_dead_after_error(void **state)
{
    struct sl_reply_scan s;
    unsigned f;

    (void)state;
    sl_reply_init(&s);
    assert_int_equal(sl_reply_scan(&s, "+OK\r\n@", 6, &f), 5);
    assert_int_equal(f, SL_REPLY_DONE);
    assert_int_equal(sl_reply_scan(&s, "@", 1, &f), SL_EPROTO);
    assert_int_equal(f, 0);
    assert_int_equal(sl_reply_scan(&s, "+OK\r\n", 5, &f), SL_EPROTO);
    assert_int_equal(sl_reply_scan(&s, "", 0, &f), SL_EPROTO);
    assert_false(sl_reply_idle(&s));
    sl_reply_init(&s); /* init revives it */
    assert_int_equal(sl_reply_scan(&s, "+OK\r\n", 5, &f), 5);
    assert_int_equal(f, SL_REPLY_DONE);
}

/* ---- lengths and sizes ------------------------------------------------- */

static void test_length_limits(void **state)
{
    struct sl_reply_scan s;
    unsigned f;

    (void)state;
    /* the biggest counts and lengths are legal, just unfinished */
    static const char *const ok[] = {
        "$9999999999999999999\r\n", "!9999999999999999999\r\nabc",
        "*4294967295\r\n", "%2147483647\r\n", "~4294967295\r\n:1\r\n", "|2147483647\r\n",
        "$600000000\r\n", "*1\r\n$-1",
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        long n = (long)strlen(ok[i]);

        sl_reply_init(&s);
        assert_int_equal(sl_reply_scan(&s, ok[i], (size_t)n, &f), n);
        assert_int_equal(f, 0);
        assert_false(sl_reply_idle(&s));
    }
}

/* A bulk over 512 MiB, fed 1 MiB at a time, is skipped and ends right. */
static void test_huge_bulk(void **state)
{
    enum { CHUNK = 1 << 20 };
    const uint64_t total = 600ull * CHUNK + 17;
    struct sl_reply_scan s;
    char *chunk = calloc(1, CHUNK);
    char head[32];
    uint64_t left = total;
    unsigned f;
    int hn;

    (void)state;
    assert_non_null(chunk);
    sl_reply_init(&s);
    hn = snprintf(head, sizeof(head), "$%llu\r\n", (unsigned long long)total);
    assert_int_equal(sl_reply_scan(&s, head, (size_t)hn, &f), hn);
    assert_int_equal(f, 0);
    while (left > 0) {
        size_t k = left < CHUNK ? (size_t)left : CHUNK;

        assert_int_equal(sl_reply_scan(&s, chunk, k, &f), (long)k);
        assert_int_equal(f, 0);
        left -= k;
    }
    assert_false(sl_reply_idle(&s));
    assert_int_equal(sl_reply_scan(&s, "\r\n+OK\r\n", 7, &f), 2);
    assert_int_equal(f, SL_REPLY_DONE);
    assert_int_equal(sl_reply_scan(&s, "+OK\r\n", 5, &f), 5);
    assert_int_equal(f, SL_REPLY_DONE);
    free(chunk);
}

/* Simple strings and errors are not capped: a 1 MiB error line is fine. */
static void test_long_line(void **state)
{
    struct sb b = {0};
    char *msg = malloc(1 << 20);

    (void)state;
    assert_non_null(msg);
    memset(msg, 'e', 1 << 20);
    sb_str(&b, "-ERR ");
    sb_put(&b, msg, 1 << 20);
    sb_str(&b, "\r\n");
    sb_end(&b, 0);
    sb_str(&b, "+");
    sb_put(&b, msg, 100000);
    sb_str(&b, "\r\n");
    sb_end(&b, 0);
    check(&b, 0);
    sb_free(&b);
    free(msg);
}

/* ---- pipelines and the API's edges ------------------------------------- */

static void test_pipeline_10000(void **state)
{
    static const char *const kinds[] = {
        "+OK\r\n", "$3\r\nbar\r\n", ":42\r\n", "$-1\r\n", "*2\r\n$1\r\na\r\n$1\r\nb\r\n",
        "-ERR no\r\n", "%1\r\n+k\r\n,2.5\r\n", "_\r\n", "|1\r\n+a\r\n+b\r\n#t\r\n", "*0\r\n",
    };
    struct sb b = {0};
    struct sl_reply_scan s;
    size_t off = 0, n = 0;

    (void)state;
    for (size_t i = 0; i < 10000; i++)
        sb_reply(&b, kinds[(i * 7) % 10], 0);
    assert_int_equal(b.n, 10000);

    /* one buffer: exactly 10,000 DONEs at the recorded offsets */
    sl_reply_init(&s);
    while (off < b.len) {
        unsigned f;
        long r = sl_reply_scan(&s, b.buf + off, b.len - off, &f);

        assert_true(r > 0);
        off += (size_t)r;
        assert_int_equal(f, SL_REPLY_DONE);
        assert_int_equal(off, b.off[n]);
        n++;
    }
    assert_int_equal(n, 10000);
    assert_true(sl_reply_idle(&s));
    check(&b, 0);
    sb_free(&b);
}

static void test_idle(void **state)
{
    struct sl_reply_scan s;
    unsigned f;

    (void)state;
    sl_reply_init(&s);
    assert_true(sl_reply_idle(&s));
    assert_int_equal(sl_reply_scan(&s, "", 0, &f), 0);
    assert_int_equal(f, 0);
    assert_true(sl_reply_idle(&s));

    assert_int_equal(sl_reply_scan(&s, "+O", 2, &f), 2);
    assert_false(sl_reply_idle(&s));
    assert_int_equal(sl_reply_scan(&s, "K\r\n", 3, &f), 3);
    assert_int_equal(f, SL_REPLY_DONE);
    assert_true(sl_reply_idle(&s));

    /* a top-level attribute has ended, its reply has not */
    assert_int_equal(sl_reply_scan(&s, "|1\r\n+a\r\n+b\r\n", 12, &f), 12);
    assert_int_equal(f, 0);
    assert_false(sl_reply_idle(&s));
    assert_int_equal(sl_reply_scan(&s, ":1\r\n", 4, &f), 4);
    assert_int_equal(f, SL_REPLY_DONE);
    assert_true(sl_reply_idle(&s));

    assert_int_equal(sl_reply_scan(&s, "|0\r\n", 4, &f), 4);
    assert_false(sl_reply_idle(&s));
    assert_int_equal(sl_reply_scan(&s, ">0\r\n", 4, &f), 4);
    assert_int_equal(f, SL_REPLY_DONE | SL_REPLY_PUSH);
    assert_true(sl_reply_idle(&s));

    assert_int_equal(sl_reply_scan(&s, "*1\r\n", 4, &f), 4);
    assert_false(sl_reply_idle(&s));
    assert_int_equal(sl_reply_scan(&s, "$1\r\nx\r", 6, &f), 6);
    assert_false(sl_reply_idle(&s));
    assert_int_equal(sl_reply_scan(&s, "\n", 1, &f), 1);
    assert_int_equal(f, SL_REPLY_DONE);
    assert_true(sl_reply_idle(&s));
}

/* Each call stops right after the first reply that ends. */
static void test_one_reply_per_call(void **state)
{
    struct sl_reply_scan s;
    unsigned f;

    (void)state;
    sl_reply_init(&s);
    assert_int_equal(sl_reply_scan(&s, "+OK\r\n$3\r\nbar\r\n", 14, &f), 5);
    assert_int_equal(f, SL_REPLY_DONE);
    assert_int_equal(sl_reply_scan(&s, "$3\r\nbar\r\n+O", 11, &f), 9);
    assert_int_equal(f, SL_REPLY_DONE);
    assert_int_equal(sl_reply_scan(&s, "+O", 2, &f), 2);
    assert_int_equal(f, 0);
    /* a split between CR and LF of a line */
    assert_int_equal(sl_reply_scan(&s, "K\r", 2, &f), 2);
    assert_int_equal(f, 0);
    assert_int_equal(sl_reply_scan(&s, "\n>1\r\n:1\r\n", 9, &f), 1);
    assert_int_equal(f, SL_REPLY_DONE);
    assert_int_equal(sl_reply_scan(&s, ">1\r\n:1\r\n", 8, &f), 8);
    assert_int_equal(f, SL_REPLY_DONE | SL_REPLY_PUSH);
}

/* Element k of one reply, fed whole and byte by byte: both must agree. */
static int pick(const char *reply, uint32_t k)
{
    struct sl_reply_pick p, q;
    size_t n = strlen(reply);
    sl_reply_pick_init(&p, k);
    sl_reply_pick_feed(&p, reply, n);
    sl_reply_pick_init(&q, k);
    for (size_t i = 0; i < n; i++)
        sl_reply_pick_feed(&q, reply + i, 1);
    assert_int_equal(p.found, q.found);
    return p.found;
}

static void test_pick_element(void **state)
{
    (void)state;
    static const char exec[] = "*4\r\n+OK\r\n-WRONGPASS no\r\n$3\r\nabc\r\n*2\r\n:1\r\n-E\r\n";
    assert_int_equal(pick(exec, 0), '+');
    assert_int_equal(pick(exec, 1), '-');
    assert_int_equal(pick(exec, 2), '$');
    assert_int_equal(pick(exec, 3), '*');
    assert_int_equal(pick(exec, 4), 0);
    assert_int_equal(pick("*2\r\n%1\r\n+a\r\n-E x\r\n+OK\r\n", 1), '+');
    assert_int_equal(pick("*-1\r\n", 0), 0);
    assert_int_equal(pick("*0\r\n", 0), 0);
    assert_int_equal(pick("_\r\n", 0), 0);
    assert_int_equal(pick("-EXECABORT Transaction discarded\r\n", 0), 0);
}

/* sl_reply_whole() takes a whole small reply at the start of a buffer, or
 * nothing: where it takes one, sl_reply_scan() ends a reply at the same byte
 * (and is between replies again); it takes none while a reply is in
 * progress, nor a reply cut short, an aggregate, a push, or bad bytes. */
static void test_whole(void **state)
{
    (void)state;
    static const char *const replies[] = {
        "+OK\r\n", "-ERR no\r\n", ":1\r\n", ":-12\r\n", "$3\r\nbar\r\n", "$-1\r\n",
        "$0\r\n\r\n", "$12\r\nhello\r\nworld\r\n", "+a long line of more than sixteen bytes\r\n",
        "*-1\r\n", "*1\r\n$1\r\nx\r\n", "_\r\n", ">2\r\n+a\r\n+b\r\n", "%1\r\n+k\r\n:1\r\n",
        "$-2\r\n", "$-1x\r\n", "$3\r\nbarxx", "$01\r\nx\r\n", "+OK\n", ":1\r", "$3\r\nba",
    };
    for (size_t i = 0; i < sizeof(replies) / sizeof(replies[0]); i++) {
        const char *t = replies[i];
        size_t n = strlen(t);
        struct sl_reply_scan s;
        sl_reply_init(&s);
        uint32_t k = 9;
        size_t last = 99;
        size_t w = sl_reply_whole(&s, t, n, 1, &k, &last);
        assert_int_equal(k, w > 0 ? 1 : 0);
        assert_int_equal(last, w > 0 ? 0 : 99);
        unsigned f = 0;
        long got = sl_reply_scan(&s, t, n, &f);
        if (w > 0) {
            assert_int_equal(got, (long)w);
            assert_int_equal(f, SL_REPLY_DONE);
            assert_true(sl_reply_idle(&s));
        } else {
            /* what it leaves is a reply in parts, an aggregate or not RESP */
            assert_true(got < 0 || !(f & SL_REPLY_DONE) || strchr("*%>_", t[0]) != NULL);
        }
        sl_reply_release(&s);
    }
    struct sl_reply_scan s;
    sl_reply_init(&s);
    uint32_t k;
    size_t last = 0;
    static const char run[] = "$-1\r\n+OK\r\n:7\r\n$2\r\nab\r\n*1\r\n:1\r\n";
    assert_int_equal(sl_reply_whole(&s, run, sizeof(run) - 1, 100, &k, &last), 22);
    assert_int_equal(k, 4);
    assert_int_equal(last, 14);
    assert_int_equal(sl_reply_whole(&s, run, sizeof(run) - 1, 2, &k, &last), 10); /* at most <max> */
    assert_int_equal(k, 2);
    assert_int_equal(last, 5);
    assert_int_equal(sl_reply_whole(&s, run, 12, 100, &k, &last), 10); /* the third is cut short */
    assert_int_equal(k, 2);
    assert_int_equal(sl_reply_whole(&s, "", 0, 100, &k, &last), 0);
    assert_int_equal(k, 0);
    /* a reply in progress: the next bytes are not a reply's start */
    unsigned f;
    assert_int_equal(sl_reply_scan(&s, "*2\r\n", 4, &f), 4);
    assert_int_equal(sl_reply_whole(&s, "+OK\r\n", 5, 100, &k, &last), 0);
    assert_int_equal(k, 0);
    sl_reply_release(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resp2_scalars),
        cmocka_unit_test(test_whole),
        cmocka_unit_test(test_resp2_bulk),
        cmocka_unit_test(test_resp2_arrays),
        cmocka_unit_test(test_resp3_scalars),
        cmocka_unit_test(test_resp3_maps_sets),
        cmocka_unit_test(test_attr_top),
        cmocka_unit_test(test_attr_nested),
        cmocka_unit_test(test_push_top),
        cmocka_unit_test(test_push_interleaved),
        cmocka_unit_test(test_push_inside),
        cmocka_unit_test(test_depth_20),
        cmocka_unit_test(test_depth_max),
        cmocka_unit_test(test_depth_over),
        cmocka_unit_test(test_command_docs_resp3),
        cmocka_unit_test(test_command_docs_resp2),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_dead_after_error),
        cmocka_unit_test(test_length_limits),
        cmocka_unit_test(test_huge_bulk),
        cmocka_unit_test(test_long_line),
        cmocka_unit_test(test_pipeline_10000),
        cmocka_unit_test(test_idle),
        cmocka_unit_test(test_one_reply_per_call),
        cmocka_unit_test(test_pick_element),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* sluice — libFuzzer target for the RESP reply scanner.
 *
 * The input is scanned three ways: whole, in pieces whose sizes are taken
 * from the input's own bytes (empty calls included), and - for small inputs -
 * byte by byte. All three must give the same reply ends and flags, and the
 * same verdict (error or not). A small recursive reference parser, written
 * apart from the scanner, gives the expected answer for the whole input.
 *
 * Build: `make fuzz`, or by hand with clang-14 -fsanitize=fuzzer,address,undefined
 * over this file, src/proto/resp_reply.c and src/core/'*'.c. Seeds live in
 * tests/fuzz/corpus/fuzz_resp_reply/.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "proto/resp_reply.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What one way of scanning saw. */
struct run {
    size_t   *off;  /* end offset of each reply */
    unsigned *fl;   /* its flags */
    size_t    n;    /* replies */
    int       err;  /* a protocol error was reported */
};

static void die(const char *what, size_t a, size_t b)
{
    fprintf(stderr, "fuzz_resp_reply: %s (%zu, %zu)\n", what, a, b);
    abort();
}

/* Feeds <p,n> (at offset <base> of the input) to <s>, recording into <r>. */
static void feed(struct sl_reply_scan *s, struct run *r, const uint8_t *p, size_t n, size_t base)
{
    size_t at = 0;

    if (r->err)
        return;
    do {
        unsigned f = 99;
        long got = sl_reply_scan(s, (const char *)p + at, n - at, &f);

        if (got < 0) {
            if (got != SL_EPROTO)
                die("unexpected error code", (size_t)-got, 0);
            if (sl_reply_scan(s, "+OK\r\n", 5, &f) != SL_EPROTO)
                die("alive after an error", base + at, 0);
            r->err = 1;
            return;
        }
        if ((size_t)got > n - at)
            die("consumed more than given", (size_t)got, n - at);
        if (f == 0) {
            if ((size_t)got != n - at)
                die("stopped early without a reply", (size_t)got, n - at);
        } else {
            if (!(f & SL_REPLY_DONE) || (f & ~(unsigned)(SL_REPLY_DONE | SL_REPLY_PUSH)))
                die("bad flags", f, 0);
            if (got == 0)
                die("empty reply", base + at, 0);
            if (!sl_reply_idle(s))
                die("not idle after a reply", base + at, 0);
            r->off[r->n] = base + at + (size_t)got;
            r->fl[r->n] = f;
            r->n++;
        }
        at += (size_t)got;
    } while (at < n);
}

static void same(const struct run *a, const struct run *b, const char *how)
{
    if (a->n != b->n || a->err != b->err) {
        fprintf(stderr, "%s: %zu replies err %d vs %zu err %d\n", how, a->n, a->err, b->n, b->err);
        abort();
    }
    for (size_t i = 0; i < a->n; i++) {
        if (a->off[i] != b->off[i] || a->fl[i] != b->fl[i]) {
            fprintf(stderr, "%s: reply %zu at %zu/%u vs %zu/%u\n", how, i, a->off[i], a->fl[i],
                    b->off[i], b->fl[i]);
            abort();
        }
    }
}

/* ---- reference parser: recursive, over the whole input ------------------ */

enum { REF_OK = 0, REF_ERR = -1, REF_MORE = -2 };

/* Parses a length line at <*i> (just after the type byte) into <*val>, or
 * sets <*null> for -1. Mirrors the rules in resp_reply.h. */
static int ref_len(const uint8_t *p, size_t n, size_t *i, uint64_t *val, int *null, char type)
{
    uint64_t v = 0;
    int neg = 0;
    unsigned nd = 0;

    for (;;) {
        uint8_t c;

        if (*i >= n)
            return REF_MORE;
        c = p[(*i)++];
        if (c >= '0' && c <= '9') {
            if (++nd > 19)
                return REF_ERR;
            v = v * 10 + (uint64_t)(c - '0');
        } else if (c == '\r') {
            break;
        } else if (c == '-' && nd == 0 && !neg) {
            neg = 1;
        } else {
            return REF_ERR;
        }
    }
    if (*i >= n)
        return REF_MORE;
    if (p[(*i)++] != '\n' || nd == 0)
        return REF_ERR;
    if (neg) {
        if (v != 1 || nd != 1 || type == '|')
            return REF_ERR;
        *null = 1;
        return REF_OK;
    }
    *null = 0;
    *val = v;
    return REF_OK;
}

/* Parses one item (with any attributes before it) at <*i>, <depth> levels
 * deep, inside a top-level push when <in_push>. Sets <*push> when the item
 * proper is a push. */
static int ref_item(const uint8_t *p, size_t n, size_t *i, unsigned depth, int in_push, int *push)
{
    for (;;) {
        uint8_t t;
        uint64_t v;
        int null, rc;

        if (*i >= n)
            return REF_MORE;
        t = p[(*i)++];
        *push = t == '>';
        switch (t) {
        case '+': case '-': case ':': case ',': case '#': case '(': {
            const uint8_t *q = memchr(p + *i, '\n', n - *i);

            if (!q)
                return REF_MORE;
            if (q[-1] != '\r') /* q[-1] is at worst the type byte */
                return REF_ERR;
            *i = (size_t)(q - p) + 1;
            return REF_OK;
        }
        case '_':
            if (*i >= n)
                return REF_MORE;
            if (p[(*i)++] != '\r')
                return REF_ERR;
            if (*i >= n)
                return REF_MORE;
            return p[(*i)++] == '\n' ? REF_OK : REF_ERR;
        case '$': case '!': case '=':
            if ((rc = ref_len(p, n, i, &v, &null, (char)t)) != REF_OK)
                return rc;
            if (null)
                return REF_OK;
            if (n - *i <= v)
                return REF_MORE;
            *i += (size_t)v;
            if (p[(*i)++] != '\r')
                return REF_ERR;
            if (*i >= n)
                return REF_MORE;
            return p[(*i)++] == '\n' ? REF_OK : REF_ERR;
        case '*': case '%': case '~': case '>': case '|': {
            uint64_t items;
            int inner;

            if ((rc = ref_len(p, n, i, &v, &null, (char)t)) != REF_OK)
                return rc;
            if (null) {
                if (t == '>')
                    *push = 2; /* a null push: an item wherever it is */
                return REF_OK;
            }
            items = v * ((t == '%' || t == '|') ? 2 : 1);
            if (v > UINT32_MAX || items > UINT32_MAX)
                return REF_ERR;
            if (items > 0 && depth == SL_REPLY_MAX_DEPTH)
                return REF_ERR;
            for (uint64_t k = 0; k < items; k++) {
                if ((rc = ref_item(p, n, i, depth + 1, in_push || (depth == 0 && t == '>'),
                                   &inner)) != REF_OK)
                    return rc;
                /* a push nested in anything but a top-level push is none of
                 * its aggregate's items (Redis writes one inside EXEC's
                 * reply): the item is still to come */
                if (inner == 1 && !(in_push || (depth == 0 && t == '>')))
                    k--;
            }
            if (t == '|')
                continue; /* a prefix: the item itself follows */
            return REF_OK;
        }
        default:
            return REF_ERR;
        }
    }
}

static void ref_run(const uint8_t *p, size_t n, struct run *r)
{
    size_t i = 0;

    while (i < n) {
        int push = 0;
        int rc = ref_item(p, n, &i, 0, 0, &push);

        if (rc == REF_ERR)
            r->err = 1;
        if (rc != REF_OK)
            return;
        r->off[r->n] = i;
        r->fl[r->n] = SL_REPLY_DONE | (push ? SL_REPLY_PUSH : 0);
        r->n++;
    }
}

/* ---- the target -------------------------------------------------------- */

static int run_alloc(struct run *r, size_t size)
{
    /* every reply takes at least 3 bytes ("_\r\n") */
    size_t cap = size / 3 + 1;

    r->off = malloc(cap * sizeof(*r->off));
    r->fl = malloc(cap * sizeof(*r->fl));
    r->n = 0;
    r->err = 0;
    return r->off && r->fl ? 0 : -1;
}

static void run_free(struct run *r)
{
    free(r->off);
    free(r->fl);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct run ref, whole, parts, bytes;
    struct sl_reply_scan s;

    if (run_alloc(&ref, size) || run_alloc(&whole, size) || run_alloc(&parts, size) ||
        run_alloc(&bytes, size))
        abort();

    ref_run(data, size, &ref);

    sl_reply_init(&s);
    feed(&s, &whole, data, size, 0);
    same(&ref, &whole, "reference vs whole");
    sl_reply_release(&s); /* an input may end inside a deep reply */

    /* pieces of 0..15 bytes, sizes read from the input itself */
    sl_reply_init(&s);
    for (size_t i = 0, j = 0; i < size; j++) {
        size_t k = data[(j * 7) % size] & 15;

        if (k == 0) {
            feed(&s, &parts, data + i, 0, i);
            k = 1;
        }
        if (k > size - i)
            k = size - i;
        feed(&s, &parts, data + i, k, i);
        i += k;
    }
    same(&whole, &parts, "whole vs pieces");
    sl_reply_release(&s);

    if (size <= 4096) {
        sl_reply_init(&s);
        for (size_t i = 0; i < size; i++)
            feed(&s, &bytes, data + i, 1, i);
        same(&whole, &bytes, "whole vs bytes");
        sl_reply_release(&s);
    }

    /* Picking an element of the first reply (EXEC's, for an AUTH queued in
     * a transaction): whole and in pieces agree, and what is found is the
     * type byte of some item of the input. */
    if (size > 0) {
        size_t end = whole.n > 0 ? whole.off[0] : size;
        struct sl_reply_pick pw, pp;
        uint32_t k = data[size - 1] & 7;
        sl_reply_pick_init(&pw, k);
        sl_reply_pick_feed(&pw, (const char *)data, end);
        sl_reply_pick_init(&pp, k);
        for (size_t i = 0; i < end; i += 3)
            sl_reply_pick_feed(&pp, (const char *)data + i, end - i < 3 ? end - i : 3);
        if (pw.found != pp.found)
            die("pick: whole vs pieces", pw.found, pp.found);
        if (pw.found != 0 && memchr(data, pw.found, end) == NULL)
            die("pick: found a byte that is not in the reply", pw.found, 0);
        sl_reply_release(&pw.sub);
        sl_reply_release(&pp.sub);
    }

    run_free(&ref);
    run_free(&whole);
    run_free(&parts);
    run_free(&bytes);
    return 0;
}

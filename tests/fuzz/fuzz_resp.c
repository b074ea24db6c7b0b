/* sluice — libFuzzer target for the RESP request framer.
 *
 * Input: byte 0 picks how the rest is cut into reads, byte 1 picks
 * max_request, the rest is the client's byte stream. The stream is framed
 * twice, whole and in pieces, and both runs must agree request by request and
 * on the error; after every read, returned sizes + pending == bytes fed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "proto/resp.h"

#define MAX_SEEN 4096

/* What one run saw. */
struct seen {
    struct sl_resp_req req[MAX_SEEN]; /* requests returned (the first MAX_SEEN) */
    size_t n;          /* requests returned */
    int    err;        /* 0 or the error that ended the run */
    char   msg[128];   /* st->err after an error */
    size_t pending;    /* sl_resp_pending at the end */
};

static struct seen whole, cut;

static void check_req(const struct sl_resp_req *q)
{
    if (q->size == 0 || q->is_inline > 1)
        abort();
    if (q->ncap != (q->argc < SL_RESP_CAPTURE_ARGS ? q->argc : SL_RESP_CAPTURE_ARGS))
        abort();
    for (unsigned i = 0; i < q->ncap; i++) {
        size_t k = q->arglen[i] < SL_RESP_CAPTURE_LEN ? q->arglen[i] : SL_RESP_CAPTURE_LEN;
        if (q->argv[i][k] != '\0' || q->arglen[i] >= q->size)
            abort();
    }
    if (q->argc > 0 && !q->is_inline && q->size < 4 + 6 * (uint64_t)q->argc)
        abort(); /* "*N\r\n" then at least "$0\r\n\r\n" per argument */
}

static void run(const uint8_t *d, size_t len, uint8_t mode, uint64_t max_request, struct seen *o)
{
    struct sl_resp st;
    struct sl_resp_req *q;
    uint64_t fed = 0, sizes = 0;
    uint32_t x = 0x9e3779b9u ^ mode;
    size_t at = 0;

    memset(o, 0, sizeof(*o));
    if (sl_resp_init(&st, max_request) != 0)
        abort();
    while (at < len && o->err == 0) {
        size_t k = len - at;
        if (mode != 0) {
            /* xorshift: piece sizes from 1 to a bound set by <mode>. */
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            size_t bound = (mode & 0x0f) == 0 ? 1 : (size_t)(mode & 0x0f) * (mode & 0xf0 ? 37 : 3);
            k = 1 + x % bound;
            if (k > len - at)
                k = len - at;
        }
        if (sl_resp_feed(&st, (const char *)d + at, k) != 0)
            abort();
        at += k;
        fed += k;
        int rc;
        while ((rc = sl_resp_next(&st, &q)) == 1) {
            check_req(q);
            if (o->n < MAX_SEEN)
                o->req[o->n] = *q;
            o->n++;
            sizes += q->size;
        }
        if (rc < 0) {
            if (rc != SL_EPROTO || st.err[0] == '\0')
                abort();
            o->err = rc;
            memcpy(o->msg, st.err, sizeof(o->msg));
            /* Dead for good. */
            if (sl_resp_next(&st, &q) != SL_EPROTO || sl_resp_feed(&st, "x", 1) != SL_EPROTO)
                abort();
            break;
        }
        if (sizes + sl_resp_pending(&st) != fed)
            abort();
        /* A request in progress shows its own head only: what is captured
         * is within what it announced, and nothing past it is set (the
         * argument being captured, at ncap, may hold its first bytes). */
        if (st.req.ncap > SL_RESP_CAPTURE_ARGS || (sl_resp_pending(&st) && st.req.ncap > st.req.argc))
            abort();
        for (unsigned i = st.req.ncap; i < SL_RESP_CAPTURE_ARGS; i++)
            if (!sl_resp_idle(&st) &&
                (st.req.arglen[i] != 0 || (i > st.req.ncap && st.req.argv[i][0] != '\0')))
                abort();
        if (sl_resp_idle(&st) != (sl_resp_pending(&st) == 0))
            abort();
    }
    o->pending = o->err ? 0 : sl_resp_pending(&st);
    sl_resp_free(&st);
}

static void same_req(const struct sl_resp_req *a, const struct sl_resp_req *b)
{
    if (a->size != b->size || a->argc != b->argc || a->is_inline != b->is_inline || a->ncap != b->ncap)
        abort();
    for (unsigned i = 0; i < a->ncap; i++) {
        size_t k = a->arglen[i] < SL_RESP_CAPTURE_LEN ? a->arglen[i] : SL_RESP_CAPTURE_LEN;
        if (a->arglen[i] != b->arglen[i] || memcmp(a->argv[i], b->argv[i], k) != 0)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint8_t mode = data[0] ? data[0] : 1;
    /* Small caps (8..1024 bytes) half the time, to reach them often. */
    uint64_t max_request = data[1] < 128 ? 8 + (uint64_t)data[1] * 8 : 0;
    data += 2;
    size -= 2;

    run(data, size, 0, max_request, &whole);
    run(data, size, mode, max_request, &cut);
    if (whole.n != cut.n || whole.err != cut.err || whole.pending != cut.pending ||
        strcmp(whole.msg, cut.msg) != 0)
        abort();
    for (size_t i = 0; i < whole.n && i < MAX_SEEN; i++)
        same_req(&whole.req[i], &cut.req[i]);
    return 0;
}

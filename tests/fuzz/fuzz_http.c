/* sluice — libFuzzer target for the HTTP/1.1 framer (requests and responses).
 *
 * Input: byte 0 picks the side (bit 0) and the caps (bits 1-3); byte 1 how
 * the stream is cut into reads (0: byte by byte; else xorshift pieces);
 * byte 2 what the responses answer (2 bits each: plain, plain, HEAD,
 * CONNECT); the rest is the peer's byte stream. The stream is framed twice,
 * whole and in pieces, then closed (sl_http_eof); both runs must write the
 * same transcript (events, heads, body bytes, error, what the close said).
 * Every run checks on the way:
 *   - a call never takes more than it was given, NEED takes everything,
 *     END takes nothing, an error is -1 with a status and a reason;
 *   - a head is the stream's bytes just before the HEAD's end (empty lines
 *     skipped apart), within its caps, its fields inside it;
 *   - a Content-Length body is exactly that many bytes, a body-less
 *     message has none, a request's chunked body decodes within max_body
 *     (checked by a decoder of its own here). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/http.h"

/* A growable byte string. */
struct str {
    uint8_t *p;
    size_t   n, cap;
};

static void add(struct str *s, const void *p, size_t n)
{
    if (n == 0)
        return; /* <p> may be NULL then: memcpy's arguments must not be */
    if (s->n + n > s->cap) {
        s->cap = (s->n + n) * 2 + 64;
        s->p = realloc(s->p, s->cap);
        if (s->p == NULL)
            abort();
    }
    memcpy(s->p + s->n, p, n);
    s->n += n;
}

static void add_u64(struct str *s, uint64_t v)
{
    add(s, &v, sizeof(v));
}

/* What one run wrote. */
static struct str whole, cut;
static struct str body; /* the current message's body bytes */

static const struct sl_http_caps cap_sets[8] = {
    { 0, 0, 0, 0, 0 },                   /* the defaults */
    { 64, 48, 4, 256, 64 },
    { 16, 12, 2, 48, 8 },
    { 1, 1, 1, 1, 1 },
    { 32, 200, 100, 64, 1000 },          /* the head's cap bites first */
    { 200, 20, 100, 10000, 0 },
    { 40, 40, 8, 40 * 8, 3 },
    { 8192, 8192, 100, 65536, 1 },
};

/* A chunked body's data bytes, decoded here independently of the framer:
 * -1 if <b> is not a complete, valid chunked body (then the framer must
 * not have ended the message). */
static int64_t dechunk(const uint8_t *b, size_t n)
{
    size_t i = 0;
    int64_t total = 0;
    for (;;) {
        uint64_t sz = 0;
        size_t d = 0;
        while (i < n && ((b[i] >= '0' && b[i] <= '9') || ((b[i] | 0x20) >= 'a' && (b[i] | 0x20) <= 'f'))) {
            unsigned v = b[i] <= '9' ? b[i] - '0' : (b[i] | 0x20) - 'a' + 10;
            sz = sz * 16 + v;
            d++;
            i++;
        }
        if (d == 0 || d > 16)
            return -1;
        while (i < n && b[i] != '\r')
            i++; /* extensions: the framer checked them */
        if (i + 1 >= n || b[i + 1] != '\n')
            return -1;
        i += 2;
        if (sz == 0)
            break;
        if (sz > n - i || n - i - sz < 2 || b[i + sz] != '\r' || b[i + sz + 1] != '\n')
            return -1;
        i += sz + 2;
        total += (int64_t)sz;
    }
    /* Trailer lines, then the empty line that ends the body. */
    for (;;) {
        if (i + 1 < n && b[i] == '\r' && b[i + 1] == '\n')
            return i + 2 == n ? total : -1;
        const uint8_t *lf = memchr(b + i, '\n', n - i);
        if (lf == NULL || lf == b + i || lf[-1] != '\r')
            return -1;
        i = (size_t)(lf - b) + 1;
    }
}

static void check_head(const struct sl_http *h, const struct sl_http_caps *caps, const uint8_t *d,
                       size_t end)
{
    const struct sl_http_head *hd = &h->head;
    uint32_t max_head = caps->max_head ? caps->max_head : 65536;
    uint32_t max_line = caps->max_line ? caps->max_line : 8192;
    uint32_t max_fl = caps->max_field_line ? caps->max_field_line : 8192;
    uint32_t max_fields = caps->max_fields ? caps->max_fields : 100;

    if (hd->len < 4 || hd->len > max_head || hd->len > end || hd->nfields > max_fields)
        abort();
    /* The head is the stream's bytes, as sent. */
    if (memcmp(hd->buf, d + end - hd->len, hd->len) != 0)
        abort();
    /* Before it, only skipped empty lines (requests) since the last message. */
    if (memcmp(hd->buf + hd->len - 4, "\r\n\r\n", 4) != 0)
        abort();
    /* Every line ends in CRLF, holds no control byte, and is within its cap. */
    uint32_t ls = 0, line = 0;
    for (uint32_t i = 0; i < hd->len; i++) {
        uint8_t c = (uint8_t)hd->buf[i];
        if (c == '\n') {
            if (i == 0 || hd->buf[i - 1] != '\r')
                abort();
            if (i - 1 - ls > (line == 0 ? max_line : max_fl))
                abort();
            ls = i + 1;
            line++;
        } else if (c == '\r') {
            if (i + 1 >= hd->len || hd->buf[i + 1] != '\n')
                abort();
        } else if ((c < 0x20 && c != '\t') || c == 0x7f) {
            abort();
        }
    }
    if (line != hd->nfields + 2)
        abort(); /* start line, fields, empty line: no obs-fold, nothing else */
    for (uint32_t i = 0; i < hd->nfields; i++) {
        const struct sl_http_field *f = &hd->fields[i];
        if (f->name_len == 0 || f->value < f->name + f->name_len + 1 ||
            f->value + f->value_len > hd->len || hd->buf[f->name + f->name_len] != ':')
            abort();
    }
    const char *v;
    long k = sl_http_field(hd, "content-length", &v);
    if (k < -1 || (k >= 0 && (v < hd->buf || v + k > hd->buf + hd->len)))
        abort();
    if (hd->body > SL_HTTP_BODY_CLOSE || hd->minor > 1 || hd->is_request != (h->side == SL_HTTP_REQUESTS))
        abort();
    if (hd->is_request) {
        uint64_t max_body = caps->max_body ? caps->max_body : 512ull * 1024 * 1024;
        if (hd->body == SL_HTTP_BODY_CLOSE || hd->status != 0 ||
            (hd->body == SL_HTTP_BODY_LENGTH && hd->content_length > max_body))
            abort();
        if (hd->method_off + hd->method_len >= hd->len || hd->target_off + hd->target_len >= hd->len ||
            hd->path_off + hd->path_len > hd->target_off + hd->target_len ||
            (hd->path_len && hd->buf[hd->path_off] != '/' && hd->buf[hd->path_off] != '*'))
            abort();
        if (hd->path_len && memchr(hd->buf + hd->path_off, '?', hd->path_len) != NULL)
            abort();
    } else {
        if (hd->status < 100 || hd->status > 999)
            abort();
        if ((hd->status < 200 || hd->status == 204 || hd->status == 304) && hd->body != SL_HTTP_BODY_NONE)
            abort();
        if (hd->body == SL_HTTP_BODY_CLOSE && hd->keep_alive)
            abort();
    }
}

static void run(const uint8_t *d, size_t len, int side, const struct sl_http_caps *caps,
                uint8_t mode, uint8_t answers, struct str *o)
{
    struct sl_http h;
    uint32_t x = 0x9e3779b9u ^ mode;
    size_t at = 0, nresp = 0;
    int dead = 0;

    o->n = 0;
    body.n = 0;
    if (sl_http_init(&h, side, caps) != 0)
        abort();
    sl_http_expect(&h, (answers & 3) == 2, (answers & 3) == 3);
    while (at < len && !dead) {
        size_t k = len - at;
        if (mode != 0xff) {
            /* xorshift: piece sizes from 1 to a bound set by <mode>. */
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            size_t bound = (mode & 0x0f) == 0 ? 1 : (size_t)(mode & 0x0f) * (mode & 0xf0 ? 37 : 3);
            k = 1 + x % bound;
            if (k > len - at)
                k = len - at;
        }
        const uint8_t *p = d + at;
        size_t n = k;
        at += k;
        for (;;) {
            enum sl_http_ev ev;
            long used = sl_http_parse(&h, (const char *)p, n, &ev);
            if (ev == SL_HTTP_EV_ERROR) {
                if (used != -1 || h.status < 400 || h.err == NULL || h.err[0] == '\0')
                    abort();
                if (side == SL_HTTP_RESPONSES ? h.status != 502
                                              : h.status != 400 && h.status != 413 &&
                                                    h.status != 414 && h.status != 431)
                    abort();
                add(o, "B", 1);
                add_u64(o, body.n);
                add(o, body.p, body.n);
                add(o, "X", 1);
                add(o, &h.status, sizeof(h.status));
                add(o, h.err, strlen(h.err));
                dead = 1;
                break;
            }
            if (used < 0 || (size_t)used > n)
                abort();
            if (ev == SL_HTTP_EV_NEED) {
                if ((size_t)used != n)
                    abort();
                break;
            }
            switch (ev) {
            case SL_HTTP_EV_BODY:
                if (used == 0)
                    abort();
                add(&body, p, (size_t)used);
                break;
            case SL_HTTP_EV_HEAD:
                if (used == 0 || body.n != 0)
                    abort();
                check_head(&h, caps, d, (size_t)(p - d) + (size_t)used);
                add(o, "H", 1);
                add_u64(o, h.head.len);
                add(o, h.head.buf, h.head.len);
                add_u64(o, h.head.body);
                add_u64(o, h.head.content_length);
                add_u64(o, h.head.keep_alive | h.head.upgrade << 1 | h.head.expect_continue << 2);
                add_u64(o, h.head.path_off);
                add_u64(o, h.head.path_len);
                add_u64(o, h.head.method);
                break;
            case SL_HTTP_EV_END: {
                const struct sl_http_head *hd = &h.head;
                if (used != 0)
                    abort();
                if (hd->body == SL_HTTP_BODY_NONE && body.n != 0)
                    abort();
                if (hd->body == SL_HTTP_BODY_LENGTH && body.n != hd->content_length)
                    abort();
                if (hd->body == SL_HTTP_BODY_CLOSE)
                    abort(); /* only sl_http_eof ends it */
                if (hd->body == SL_HTTP_BODY_CHUNKED) {
                    int64_t dec = dechunk(body.p, body.n);
                    uint64_t max_body = caps->max_body ? caps->max_body : 512ull * 1024 * 1024;
                    if (dec < 0 || (hd->is_request && (uint64_t)dec > max_body))
                        abort();
                }
                add(o, "B", 1);
                add_u64(o, body.n);
                add(o, body.p, body.n);
                body.n = 0;
                add(o, "E", 1);
                if (!hd->is_request && hd->status >= 200) {
                    nresp++;
                    unsigned a = (answers >> (2 * (nresp % 4))) & 3;
                    sl_http_expect(&h, a == 2, a == 3);
                }
                break;
            }
            default:
                abort();
            }
            p += used;
            n -= (size_t)used;
        }
    }
    if (!dead) {
        add(o, "B", 1);
        add_u64(o, body.n);
        add(o, body.p, body.n);
        enum sl_http_ev ev = sl_http_eof(&h);
        add(o, ev == SL_HTTP_EV_END ? "e" : "x", 1);
        if (ev != SL_HTTP_EV_END) {
            if (ev != SL_HTTP_EV_ERROR || h.status < 400)
                abort();
            add(o, &h.status, sizeof(h.status));
            add(o, h.err, strlen(h.err));
        }
    }
    sl_http_free(&h);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    int side = data[0] & 1 ? SL_HTTP_RESPONSES : SL_HTTP_REQUESTS;
    const struct sl_http_caps *caps = &cap_sets[(data[0] >> 1) & 7];
    uint8_t mode = data[1] == 0xff ? 0 : data[1];
    uint8_t answers = data[2];
    data += 3;
    size -= 3;

    run(data, size, side, caps, 0xff, answers, &whole);
    run(data, size, side, caps, mode, answers, &cut);
    if (whole.n != cut.n || memcmp(whole.p, cut.p, whole.n) != 0)
        abort();
    return 0;
}

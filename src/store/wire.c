/* sluice — the store's wire helpers: growing byte buffers, RESP command
 * encoding, and SHA-1 (the names EVALSHA uses). Pure: no I/O, no clock. */
#include <stdint.h>
#include <string.h>
#include <stdlib.h>

#include "store/wire.h"

/* ---- SHA-1 (FIPS 180-4), for the names EVALSHA uses -------------------- */

static uint32_t rol(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

static void sha1_block(uint32_t h[5], const unsigned char *p)
{
    uint32_t w[80];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 80; i++)
        w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20)      { f = (b & c) | (~b & d);          k = 0x5a827999; }
        else if (i < 40) { f = b ^ c ^ d;                   k = 0x6ed9eba1; }
        else if (i < 60) { f = (b & c) | (b & d) | (c & d); k = 0x8f1bbcdc; }
        else             { f = b ^ c ^ d;                   k = 0xca62c1d6; }
        uint32_t t = rol(a, 5) + f + e + k + w[i];
        e = d;
        d = c;
        c = rol(b, 30);
        b = a;
        a = t;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e;
}

/* Writes the 40 hex digits of SHA-1(<p>, <len>) and a NUL to <hex>. */
void sl_wire_sha1_hex(const void *p, size_t len, char hex[41])
{
    uint32_t h[5] = { 0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0 };
    const unsigned char *s = p;
    size_t left = len;
    for (; left >= 64; s += 64, left -= 64)
        sha1_block(h, s);
    unsigned char tail[128] = { 0 };
    memcpy(tail, s, left);
    tail[left] = 0x80;
    size_t tlen = left < 56 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++)
        tail[tlen - 1 - i] = (unsigned char)(bits >> (8 * i));
    sha1_block(h, tail);
    if (tlen == 128)
        sha1_block(h, tail + 64);
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 20; i++) {
        unsigned char byte = (unsigned char)(h[i / 4] >> (24 - 8 * (i % 4)));
        hex[2 * i] = digits[byte >> 4];
        hex[2 * i + 1] = digits[byte & 15];
    }
    hex[40] = '\0';
}

/* ---- buffers and RESP encoding ------------------------------------------ */

int sl_wire_reserve(struct sl_obuf *b, size_t more)
{
    if (b->cap - b->len >= more)
        return 0;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap - b->len < more)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (p == NULL)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

int sl_wire_append(struct sl_obuf *b, const char *p, size_t len)
{
    if (sl_wire_reserve(b, len) < 0)
        return -1;
    memcpy(b->p + b->len, p, len);
    b->len += len;
    return 0;
}

char *sl_wire_put_u64(char *p, uint64_t v)
{
    char tmp[20];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

static char *put_bulk(char *p, const char *s, size_t len)
{
    *p++ = '$';
    p = sl_wire_put_u64(p, len);
    *p++ = '\r';
    *p++ = '\n';
    memcpy(p, s, len);
    p += len;
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

#define BULK_OVERHEAD 25 /* '$' + 20 digits + 2 CRLF */

/* Appends one command to <o>: `*<argc>` then the bulks of <a>, <b> and <c>
 * (<na>, <nb>, <nc> of them; any may be 0). Returns 0 or -1 (out of memory). */
int sl_wire_encode(struct sl_obuf *o, int na, const struct sl_str *a, int nb,
                   const struct sl_str *b, int nc, const struct sl_str *c)
{
    const struct sl_str *part[3] = { a, b, c };
    int count[3] = { na, nb, nc };
    size_t need = BULK_OVERHEAD;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < count[k]; i++)
            need += part[k][i].len + BULK_OVERHEAD;
    if (sl_wire_reserve(o, need) < 0)
        return -1;
    char *p = o->p + o->len;
    *p++ = '*';
    p = sl_wire_put_u64(p, (uint64_t)na + (uint64_t)nb + (uint64_t)nc);
    *p++ = '\r';
    *p++ = '\n';
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < count[k]; i++)
            p = put_bulk(p, part[k][i].p, part[k][i].len);
    o->len = (size_t)(p - o->p);
    return 0;
}

struct sl_str sl_wire_cstr(const char *s)
{
    struct sl_str r = { s, strlen(s) };
    return r;
}

/* Encodes EVALSHA <sha> <nkeys> <keys...> <args...> into <o> (emptied first). */
int sl_wire_evalsha(struct sl_obuf *o, const char *sha, int nkeys, const struct sl_str *keys,
                    int nargs, const struct sl_str *args)
{
    char num[24];
    char *e = sl_wire_put_u64(num, (uint64_t)nkeys);
    struct sl_str head[3] = { { "EVALSHA", 7 }, { sha, 40 }, { num, (size_t)(e - num) } };
    o->len = 0;
    return sl_wire_encode(o, 3, head, nkeys, keys, nargs, args);
}


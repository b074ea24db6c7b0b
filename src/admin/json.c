/* sluice — JSON strings and percent-decoding for the limits API (json.h). */
#include <stdint.h>
#include <string.h>

#include "admin/json.h"
#include "core/hex.h"

/* Length of the well-formed UTF-8 sequence at <p> (<n> bytes left, first
 * byte >= 0x80), or 0 when it is malformed (RFC 3629 table 3-7). */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    unsigned char c = p[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf; /* the range of the second byte */
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0; /* overlong */
        else if (c == 0xed)
            hi = 0x9f; /* surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90; /* overlong */
        else if (c == 0xf4)
            hi = 0x8f; /* past U+10FFFF */
    } else
        return 0;
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return len;
}

void sl_json_str(FILE *out, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    putc('"', out);
    size_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        if (c == '"' || c == '\\') {
            putc('\\', out);
            putc(c, out);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            fprintf(out, "\\u%04x", c);
            i++;
        } else if (c < 0x80) {
            putc(c, out);
            i++;
        } else {
            size_t len = utf8_len(p + i, n - i);
            if (len == 0) {
                fputs("\\ufffd", out);
                i++;
            } else {
                fwrite(p + i, 1, len, out);
                i += len;
            }
        }
    }
    putc('"', out);
}

long sl_pct_decode(const char *in, size_t n, char *out, size_t cap)
{
    if (cap == 0)
        return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = in[i];
        if (c == '%') {
            if (n - i < 3)
                return -1;
            int h = sl_hexval(in[i + 1]), l = sl_hexval(in[i + 2]);
            if (h < 0 || l < 0)
                return -1;
            c = (char)(h << 4 | l);
            if (c == '\0')
                return -1;
            i += 2;
        } else if (c == '\0') {
            return -1;
        }
        if (o + 1 >= cap)
            return -1;
        out[o++] = c;
    }
    out[o] = '\0';
    return (long)o;
}

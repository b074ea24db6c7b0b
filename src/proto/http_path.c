/* sluice — HTTP request paths: the readings limits compare, and pattern
 * matching (see http_path.h for the rules; docs/http.md, "Paths"). */
#include <string.h>

#include "core/hex.h"
#include "proto/http_path.h"

/* The byte at p[*i] with a %XX decoded; advances *i; -1 at the end. */
static int next_byte(const char *p, size_t n, size_t *i)
{
    if (*i >= n)
        return -1;
    unsigned char c = (unsigned char)p[*i];
    int hi, lo;
    if (c == '%' && *i + 2 < n && (hi = sl_hexval((unsigned char)p[*i + 1])) >= 0 &&
        (lo = sl_hexval((unsigned char)p[*i + 2])) >= 0) {
        *i += 3;
        return hi * 16 + lo;
    }
    (*i)++;
    return c;
}

/* Decodes every %XX of <p> (<n> bytes) once into <out>, which may be <p>
 * itself (the output never runs ahead of the input); a '%' that starts no
 * escape stays. Returns the length. */
static size_t decode(const char *p, size_t n, char *out)
{
    size_t m = 0, i = 0;
    int b;
    while ((b = next_byte(p, n, &i)) >= 0)
        out[m++] = (char)b;
    return m;
}

/* How segments() reads a path. */
#define SEP_BSL  1u  /* '\' separates segments too */
#define SEG_SEMI 2u  /* a segment ends at its first ';' (the rest is dropped) */
#define DOTS     4u  /* "." and ".." segments are removed */
#define DOTS_URL 8u  /* ... spelt with "%2e" too (the WHATWG URL parser) */
#define MERGE    16u /* empty segments are dropped (runs of '/' are one) */

static int is_sep(char c, unsigned fl)
{
    return c == '/' || (c == '\\' && (fl & SEP_BSL));
}

/* 1 when the segment <s, len> is ".", 2 when "..", else 0. */
static int dot_kind(const char *s, size_t len, unsigned fl)
{
    if (len == 1 && s[0] == '.')
        return 1;
    if (len == 2 && s[0] == '.' && s[1] == '.')
        return 2;
    if (!(fl & DOTS_URL))
        return 0;
    size_t i = 0;
    int k = 0;
    while (i < len && k < 3) {
        if (s[i] == '.')
            i++;
        else if (len - i >= 3 && s[i] == '%' && s[i + 1] == '2' && (s[i + 2] | 0x20) == 'e')
            i += 3;
        else
            return 0;
        k++;
    }
    return i == len && k <= 2 ? k : 0;
}

/* Writes the segments of <s> (<m> bytes) into <out> (at least m + 2
 * bytes; <s> may be out + 1 or lie apart from it) as <fl> says: a '/'
 * before each, a final '/' when the path ended in one (or in a dot
 * segment), "/" for none; NUL-terminated. A leading separator is the
 * root's. Returns the length (<= m + 1). */
static size_t segments(const char *s, size_t m, char *out, unsigned fl)
{
    size_t w = 0, i = 0;
    int dir = 0; /* the last segment was dropped: keep its '/' */
    if (m > 0 && is_sep(s[0], fl))
        i = 1;
    for (;;) {
        size_t j = i;
        while (j < m && !is_sep(s[j], fl))
            j++;
        size_t len = j - i;
        if (fl & SEG_SEMI) {
            const char *semi = memchr(s + i, ';', len);
            if (semi != NULL)
                len = (size_t)(semi - (s + i));
        }
        int k = (fl & DOTS) ? dot_kind(s + i, len, fl) : 0;
        if (k == 2) {
            /* up one: drop the last "/segment" written (never above the root) */
            while (w > 0 && out[w - 1] != '/')
                w--;
            if (w > 0)
                w--;
            dir = 1;
        } else if (k == 1 || (len == 0 && (fl & MERGE))) {
            dir = 1;
        } else {
            out[w++] = '/';
            memmove(out + w, s + i, len);
            w += len;
            dir = 0;
        }
        if (j >= m)
            break;
        i = j + 1;
    }
    if (w == 0 || dir)
        out[w++] = '/';
    out[w] = '\0';
    return w;
}

size_t sl_http_path_norm(const char *p, size_t n, char *out)
{
    /* Decoded at out + 1, so that segments(), which writes from out[0] and
     * may add the leading '/', never overtakes its reads. */
    size_t m = decode(p, n, out + 1);
    return segments(out + 1, m, out, DOTS | MERGE);
}

int sl_http_path_plain(const char *p, size_t n)
{
    if (n == 0 || p[0] != '/')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '%' || c == '\\' || c == ';')
            return 0;
        if (c == '/' && i + 1 < n && p[i + 1] == '/')
            return 0;
        if (c == '.' && p[i - 1] == '/') {
            size_t j = i + 1;
            if (j < n && p[j] == '.')
                j++;
            if (j == n || p[j] == '/')
                return 0;
        }
    }
    return 1;
}

static void add_form(struct sl_http_path_forms *f, const char *s, size_t len)
{
    for (int i = 0; i < f->n; i++)
        if (f->len[i] == len && memcmp(f->form[i], s, len) == 0)
            return;
    f->form[f->n] = s;
    f->len[f->n++] = len;
}

void sl_http_path_forms(const char *p, size_t n, char *scratch, struct sl_http_path_forms *f)
{
    f->n = 1;
    f->form[0] = p;
    f->len[0] = n;
    if (sl_http_path_plain(p, n))
        return;
    size_t cap = n + 2;
    char *dec = scratch, *res = scratch + cap, *wide = scratch + 2 * cap, *url = scratch + 3 * cap;
    size_t dn = decode(p, n, dec);
    size_t rn = segments(dec, dn, res, DOTS | MERGE);
    /* WIDE: decoded a second time (in <url>, free until the URL reading) */
    size_t tn = decode(dec, dn, url);
    size_t wn = segments(url, tn, wide, SEP_BSL | SEG_SEMI | DOTS | MERGE);
    size_t un = segments(p, n, url, SEP_BSL | DOTS | DOTS_URL);
    add_form(f, dec, dn);
    add_form(f, res, rn);
    add_form(f, wide, wn);
    add_form(f, url, un);
}

const char *sl_http_path_refusal(const char *p, size_t n)
{
    size_t i = 0;
    int b, prev = -1;
    while ((b = next_byte(p, n, &i)) >= 0) {
        if (b == 0)
            return "an encoded NUL (%00) in the path";
        /* overlong UTF-8: a lead byte whose value would fit a shorter form
         * (C0 C1 before any continuation byte; E0 80-9F; F0 80-8F) and the
         * 5- and 6-byte forms (F8-FF), which no valid text has */
        if ((((prev == 0xC0 || prev == 0xC1 || prev >= 0xF8) && b >= 0x80 && b <= 0xBF) ||
             (prev == 0xE0 && b >= 0x80 && b <= 0x9F) || (prev == 0xF0 && b >= 0x80 && b <= 0x8F)))
            return "an overlong UTF-8 sequence in the path";
        prev = b;
    }
    return NULL;
}

static unsigned char fold(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? (unsigned char)(c + ('a' - 'A')) : c;
}

/* Whether the glob segment <p> (<pn> bytes: '*', '?', literals; no '/')
 * matches all of <s> (<sn> bytes, no '/'): the classic single-backtrack
 * walk, O(pn * sn) at worst. */
static int seg_match(const char *p, size_t pn, const char *s, size_t sn)
{
    size_t i = 0, j = 0, star = (size_t)-1, mark = 0;
    while (j < sn) {
        if (i < pn && p[i] == '*') {
            star = i++;
            mark = j;
        } else if (i < pn && (p[i] == '?' || fold((unsigned char)p[i]) == fold((unsigned char)s[j]))) {
            i++;
            j++;
        } else if (star != (size_t)-1) {
            i = star + 1;
            j = ++mark;
        } else {
            return 0;
        }
    }
    while (i < pn && p[i] == '*')
        i++;
    return i == pn;
}

int sl_http_path_match(const char *pattern, const char *path, size_t n)
{
    size_t pn = strlen(pattern);
    /* A final '/' and '*' is a subtree: the pattern ends after its '/'. */
    int subtree = pn >= 2 && pattern[pn - 1] == '*' && pattern[pn - 2] == '/';
    if (subtree)
        pn--;
    if (!subtree && strpbrk(pattern, "*?") == NULL) {
        if (pn != n)
            return 0;
        for (size_t i = 0; i < n; i++)
            if (fold((unsigned char)pattern[i]) != fold((unsigned char)path[i]))
                return 0;
        return 1;
    }
    /* '*' and '?' never match '/', so the segments of the pattern and of
     * the path pair up one to one. */
    size_t p = 0, s = 0;
    for (;;) {
        size_t pe = p, se = s;
        while (pe < pn && pattern[pe] != '/')
            pe++;
        while (se < n && path[se] != '/')
            se++;
        if (!seg_match(pattern + p, pe - p, path + s, se - s))
            return 0;
        if (pe == pn) /* the pattern is done: so must the path be */
            return se == n;
        if (se == n)
            return 0; /* the pattern has a '/' more */
        p = pe + 1;
        s = se + 1;
        if (subtree && p == pn)
            return 1;
    }
}

int sl_http_path_match_forms(const char *pattern, const struct sl_http_path_forms *f)
{
    for (int i = 0; i < f->n; i++)
        if (sl_http_path_match(pattern, f->form[i], f->len[i]))
            return 1;
    return 0;
}

/* sluice — HTTP request paths: normal form and pattern matching (see
 * http_path.h for the rules). */
#include <string.h>

#include "proto/http_path.h"

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int unreserved(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '.' || c == '_' || c == '~';
}

size_t sl_http_path_norm(const char *p, size_t n, char *out)
{
    static const char hex[] = "0123456789ABCDEF";
    /* Pass 1: percent-decoding into out + 1, so that pass 2, which writes
     * from out[0] and may add the leading '/', never overtakes its reads. */
    char *s = out + 1;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        int hi, lo;
        if (c == '%' && i + 2 < n && (hi = hexval((unsigned char)p[i + 1])) >= 0 &&
            (lo = hexval((unsigned char)p[i + 2])) >= 0) {
            unsigned char d = (unsigned char)(hi * 16 + lo);
            if (unreserved(d)) {
                s[m++] = (char)d;
            } else {
                s[m++] = '%';
                s[m++] = hex[hi];
                s[m++] = hex[lo];
            }
            i += 2;
        } else if (c == '%') {
            s[m++] = '%';
            s[m++] = '2';
            s[m++] = '5';
        } else {
            s[m++] = (char)c;
        }
    }
    /* Pass 2: segments, without empty, "." and ".." ones. */
    size_t w = 0, i = 0;
    int dir = 0; /* the last thing seen ends in '/' (or was . / ..): keep a final '/' */
    while (i < m) {
        if (s[i] == '/') {
            dir = 1;
            i++;
            continue;
        }
        size_t j = i;
        while (j < m && s[j] != '/')
            j++;
        size_t len = j - i;
        if (len == 1 && s[i] == '.') {
            dir = 1;
        } else if (len == 2 && s[i] == '.' && s[i + 1] == '.') {
            while (w > 0 && out[w - 1] != '/')
                w--;
            if (w > 0)
                w--;
            dir = 1;
        } else {
            out[w++] = '/';
            memmove(out + w, s + i, len);
            w += len;
            dir = 0;
        }
        i = j;
    }
    if (w == 0 || dir)
        out[w++] = '/';
    out[w] = '\0';
    return w;
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
        } else if (i < pn && (p[i] == '?' || p[i] == s[j])) {
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
    if (!subtree && strpbrk(pattern, "*?") == NULL)
        return pn == n && memcmp(pattern, path, n) == 0;
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

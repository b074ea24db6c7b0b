/* sluice — values of the http keys: address ranges, methods, path
 * patterns (see conf/http.h). */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/http.h"
#include "proto/http_path.h"

int sl_conf_cidr_parse(const char *w, struct sl_cidr *out)
{
    char addr[INET6_ADDRSTRLEN + 1];
    const char *slash = strchr(w, '/');
    size_t an = slash != NULL ? (size_t)(slash - w) : strlen(w);
    unsigned long bits = 0;

    memset(out, 0, sizeof(*out));
    if (an == 0 || an >= sizeof(addr))
        return -1;
    memcpy(addr, w, an);
    addr[an] = '\0';
    if (slash != NULL) {
        const char *b = slash + 1;
        size_t bn = strspn(b, "0123456789");
        if (bn == 0 || bn > 3 || b[bn] != '\0' || (bn > 1 && b[0] == '0'))
            return -1;
        bits = strtoul(b, NULL, 10);
    }
    struct in_addr a4;
    if (inet_pton(AF_INET, addr, &a4) == 1) {
        if (slash == NULL)
            bits = 32;
        if (bits > 32)
            return -1;
        out->addr[10] = out->addr[11] = 0xff;
        memcpy(out->addr + 12, &a4, 4);
        out->bits = (uint8_t)(96 + bits);
        out->v4 = 1;
    } else if (inet_pton(AF_INET6, addr, out->addr) == 1) {
        if (slash == NULL)
            bits = 128;
        if (bits > 128)
            return -1;
        out->bits = (uint8_t)bits;
        /* ::ffff:10.0.0.0/104 is 10.0.0.0/8: clients are compared as IPv4. */
        static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
        if (bits >= 96 && memcmp(out->addr, mapped, 12) == 0)
            out->v4 = 1;
    } else {
        return -1;
    }
    int host_bits = 0;
    for (int i = 0; i < 16; i++) {
        int keep = out->bits >= 8 * (i + 1) ? 8 : out->bits > 8 * i ? out->bits - 8 * i : 0;
        uint8_t mask = (uint8_t)(keep == 0 ? 0 : 0xff << (8 - keep));
        host_bits |= (out->addr[i] & ~mask) != 0;
        out->addr[i] &= mask;
    }
    return host_bits ? -2 : 0;
}

void sl_conf_cidr_fmt(const struct sl_cidr *c, char *out, size_t cap)
{
    char a[INET6_ADDRSTRLEN];
    if (c->v4) {
        inet_ntop(AF_INET, c->addr + 12, a, sizeof(a));
        if (c->bits == 128)
            snprintf(out, cap, "%s", a);
        else
            snprintf(out, cap, "%s/%d", a, c->bits - 96);
    } else {
        inet_ntop(AF_INET6, c->addr, a, sizeof(a));
        if (c->bits == 128)
            snprintf(out, cap, "%s", a);
        else
            snprintf(out, cap, "%s/%d", a, c->bits);
    }
}

int sl_conf_cidr_has(const struct sl_cidr *c, const unsigned char a[16])
{
    int full = c->bits / 8, rest = c->bits % 8;
    if (memcmp(c->addr, a, (size_t)full) != 0)
        return 0;
    if (rest == 0)
        return 1;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (a[full] & mask) == c->addr[full];
}

static int tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

const char *sl_conf_method_problem(const char *w, char *why, size_t cap)
{
    static const char *const standard[] = { "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT",
                                            "OPTIONS", "TRACE", "PATCH" };
    size_t n = strlen(w);
    int ok = n > 0 && n <= SL_CONF_METHOD_MAX;
    for (size_t i = 0; ok && i < n; i++)
        ok = tchar((unsigned char)w[i]);
    if (!ok) {
        snprintf(why, cap, "'%s' is not a method name (a token of at most %d bytes, like GET "
                 "or POST)", w, SL_CONF_METHOD_MAX);
        return why;
    }
    /* RFC 9110 9.1: methods are case-sensitive, so "get" is a method of
     * its own that no client sends for GET; written for GET, it would
     * silently never match. */
    for (size_t i = 0; i < sizeof(standard) / sizeof(standard[0]); i++) {
        if (strcasecmp(w, standard[i]) == 0 && strcmp(w, standard[i]) != 0) {
            snprintf(why, cap, "'%s' is not %s (methods are case-sensitive)", w, standard[i]);
            return why;
        }
    }
    return NULL;
}

const char *sl_conf_path_pattern(const char *w, char *out, size_t cap, char *why, size_t wcap)
{
    size_t n = strlen(w);
    if (w[0] != '/') {
        snprintf(why, wcap, "'%s' does not start with '/' (write /exact, /prefix/* or a glob "
                 "like /img/*.png)", w);
        return why;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)w[i];
        if (c <= ' ' || c >= 0x7f || c == '#') {
            snprintf(why, wcap, "'%s' holds a byte a path cannot (blank, control, '#' or "
                     "non-ASCII: percent-encode it)", w);
            return why;
        }
    }
    if (cap < SL_HTTP_PATH_NORM_CAP(n)) {
        snprintf(why, wcap, "'%s' is too long", w);
        return why;
    }
    if (memchr(out, '\0', sl_http_path_norm(w, n, out)) != NULL) {
        snprintf(why, wcap, "'%s' decodes to a NUL byte (%%00), which no request path may hold", w);
        return why;
    }
    return NULL;
}

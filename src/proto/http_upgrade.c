/* sluice — which upgrades pass an http listener (see http_upgrade.h).
 *
 * Field values here are comma lists (RFC 9110 5.6.1): elements with
 * optional blanks around them, empty elements ignored. A rewritten list is
 * joined with "," alone, so it is never longer than the line it replaces
 * (something was removed: at least one byte and its comma) and fits where
 * the line was. */
#include <string.h>
#include <strings.h>

#include "proto/http_upgrade.h"

static int named(const struct sl_http_head *h, const struct sl_http_field *f, const char *name)
{
    size_t n = strlen(name);
    return f->name_len == n && strncasecmp(h->buf + f->name, name, n) == 0;
}

static int tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* The next element of the list <v, n> from <*at>: its span, blanks
 * trimmed; 0 when the list is over. Empty elements are skipped. */
static int next_elem(const char *v, size_t n, size_t *at, const char **e, size_t *elen)
{
    while (*at < n) {
        size_t i = *at;
        while (i < n && v[i] != ',')
            i++;
        size_t a = *at, b = i;
        *at = i < n ? i + 1 : n;
        while (a < b && (v[a] == ' ' || v[a] == '\t'))
            a++;
        while (b > a && (v[b - 1] == ' ' || v[b - 1] == '\t'))
            b--;
        if (b > a) {
            *e = v + a;
            *elen = b - a;
            return 1;
        }
    }
    return 0;
}

static int same(const char *a, size_t n, const char *word)
{
    return strlen(word) == n && strncasecmp(a, word, n) == 0;
}

int sl_http_upgrade_find(const struct sl_http_upgrades *u, const char *p, size_t n)
{
    /* protocol = protocol-name ["/" protocol-version], both tokens */
    size_t name = 0;
    while (name < n && p[name] != '/')
        name++;
    if (name == 0 || name > SL_HTTP_UPGRADE_NAME || name + 1 == n)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (i != name && !tchar((unsigned char)p[i]))
            return -1;
    for (uint32_t i = 0; u != NULL && i < u->n; i++)
        if (same(p, name, u->name[i]))
            return (int)i;
    return -1;
}

/* Request <h> says "Connection: upgrade" (in any of its Connection fields). */
static int conn_upgrade(const struct sl_http_head *h)
{
    for (uint32_t i = 0; i < h->nfields; i++) {
        const struct sl_http_field *f = &h->fields[i];
        if (!named(h, f, "Connection"))
            continue;
        const char *v = h->buf + f->value, *e;
        size_t at = 0, el;
        while (next_elem(v, f->value_len, &at, &e, &el))
            if (same(e, el, "upgrade"))
                return 1;
    }
    return 0;
}

uint32_t sl_http_upgrade_offered(const struct sl_http_head *h, const struct sl_http_upgrades *u)
{
    if (u == NULL || u->n == 0 || h->minor == 0 || !conn_upgrade(h))
        return 0;
    uint32_t mask = 0;
    for (uint32_t i = 0; i < h->nfields; i++) {
        const struct sl_http_field *f = &h->fields[i];
        if (!named(h, f, "Upgrade"))
            continue;
        const char *v = h->buf + f->value, *e;
        size_t at = 0, el;
        while (next_elem(v, f->value_len, &at, &e, &el)) {
            int k = sl_http_upgrade_find(u, e, el);
            if (k >= 0)
                mask |= 1u << k;
        }
    }
    return mask;
}

int sl_http_upgrade_answers(const struct sl_http_head *res, const struct sl_http_upgrades *u,
                            uint32_t offered)
{
    int any = 0;
    for (uint32_t i = 0; i < res->nfields; i++) {
        const struct sl_http_field *f = &res->fields[i];
        if (!named(res, f, "Upgrade"))
            continue;
        const char *v = res->buf + f->value, *e;
        size_t at = 0, el;
        while (next_elem(v, f->value_len, &at, &e, &el)) {
            int k = sl_http_upgrade_find(u, e, el);
            if (k < 0 || !(offered & (1u << k)))
                return 0;
            any = 1;
        }
    }
    return any;
}

/* Whether element <e, el> of field <f> stays under <u>. */
static int keeps(const struct sl_http_head *h, const struct sl_http_field *f,
                 const struct sl_http_upgrades *u, int keep_upgrade, const char *e, size_t el)
{
    if (named(h, f, "Upgrade"))
        return keep_upgrade && sl_http_upgrade_find(u, e, el) >= 0;
    /* Connection: the options that name what goes */
    if (same(e, el, "http2-settings"))
        return 0;
    if (same(e, el, "upgrade"))
        return keep_upgrade;
    return 1;
}

size_t sl_http_upgrade_field(const struct sl_http_head *h, const struct sl_http_field *f,
                             const char *line, size_t len, const struct sl_http_upgrades *u,
                             int keep_upgrade, char *out)
{
    if (named(h, f, "HTTP2-Settings"))
        return 0;
    if (!named(h, f, "Upgrade") && !named(h, f, "Connection")) {
        memcpy(out, line, len);
        return len;
    }
    const char *v = h->buf + f->value, *e;
    size_t at = 0, el, kept = 0, dropped = 0;
    while (next_elem(v, f->value_len, &at, &e, &el)) {
        if (keeps(h, f, u, keep_upgrade, e, el))
            kept++;
        else
            dropped++;
    }
    if (dropped == 0) {
        memcpy(out, line, len);
        return len;
    }
    if (kept == 0)
        return 0;
    size_t o = 0;
    memcpy(out, h->buf + f->name, f->name_len);
    o += f->name_len;
    memcpy(out + o, ": ", 2);
    o += 2;
    at = 0;
    const char *sep = "";
    while (next_elem(v, f->value_len, &at, &e, &el)) {
        if (!keeps(h, f, u, keep_upgrade, e, el))
            continue;
        memcpy(out + o, sep, strlen(sep));
        o += strlen(sep);
        memcpy(out + o, e, el);
        o += el;
        sep = ",";
    }
    memcpy(out + o, "\r\n", 2);
    return o + 2;
}

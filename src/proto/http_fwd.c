/* sluice — what the proxy changes in a message head (see http_fwd.h). */
#include <string.h>
#include <strings.h>

#include "proto/http_fwd.h"
#include "proto/http_upgrade.h"

static int named(const struct sl_http_head *h, const struct sl_http_field *f, const char *name)
{
    size_t n = strlen(name);
    return f->name_len == n && strncasecmp(h->buf + f->name, name, n) == 0;
}

/* Where field <f>'s line starts and ends (CRLF included) in the head: a
 * line runs from its name to the next line's start. */
static size_t line_end(const struct sl_http_head *h, const struct sl_http_field *f)
{
    const char *p = memchr(h->buf + f->value + f->value_len, '\n',
                           h->len - (f->value + f->value_len));
    return p ? (size_t)(p - h->buf) + 1 : h->len;
}

struct out {
    char  *p;
    size_t len, cap;
    int    full;
};

static void put(struct out *o, const char *p, size_t n)
{
    if (o->full || o->len + n > o->cap) {
        o->full = 1;
        return;
    }
    memcpy(o->p + o->len, p, n);
    o->len += n;
}

static void puts_(struct out *o, const char *s)
{
    put(o, s, strlen(s));
}

/* Where the field lines start: after the start line. */
static size_t fields_start(const struct sl_http_head *h)
{
    const char *p = memchr(h->buf, '\n', h->len);
    return p ? (size_t)(p - h->buf) + 1 : h->len;
}

size_t sl_http_fwd_request(const struct sl_http_head *h, const char *peer, const char *scheme,
                           char *out, size_t cap)
{
    uint32_t offered;
    return sl_http_fwd_request_in(h, peer, scheme, NULL, &offered, out, cap);
}

size_t sl_http_fwd_request_in(const struct sl_http_head *h, const char *peer, const char *scheme,
                              const struct sl_http_upgrades *u, uint32_t *offered, char *out,
                              size_t cap)
{
    struct out o = { out, 0, cap, 0 };
    *offered = u != NULL ? sl_http_upgrade_offered(h, u) : 0;
    if (scheme == NULL && u == NULL)
        return sl_http_fwd_with(h, "", 0, out, cap);
    size_t at = fields_start(h);
    put(&o, h->buf, at);
    int xff_done = 0;
    for (uint32_t i = 0; i < h->nfields; i++) {
        const struct sl_http_field *f = &h->fields[i];
        size_t end = line_end(h, f);
        if (scheme != NULL && named(h, f, "X-Forwarded-Proto")) {
            /* the client's word for it is not ours to pass on */
        } else if (scheme != NULL && named(h, f, "X-Forwarded-For")) {
            if (!xff_done) {
                /* every X-Forwarded-For the client sent, in order, as one
                 * list, with the peer last */
                puts_(&o, "X-Forwarded-For: ");
                const char *sep = "";
                for (uint32_t j = i; j < h->nfields; j++) {
                    const struct sl_http_field *g = &h->fields[j];
                    if (!named(h, g, "X-Forwarded-For") || g->value_len == 0)
                        continue;
                    puts_(&o, sep);
                    put(&o, h->buf + g->value, g->value_len);
                    sep = ", ";
                }
                if (peer != NULL) {
                    puts_(&o, sep);
                    puts_(&o, peer);
                }
                puts_(&o, "\r\n");
                xff_done = 1;
            }
        } else if (u != NULL) {
            /* the rewritten line is never longer than the line */
            if (o.full || o.len + (end - f->name) > o.cap) {
                o.full = 1;
                break;
            }
            o.len += sl_http_upgrade_field(h, f, h->buf + f->name, end - f->name, u,
                                           *offered != 0, o.p + o.len);
        } else {
            put(&o, h->buf + f->name, end - f->name);
        }
    }
    if (scheme == NULL) {
        puts_(&o, "\r\n");
        return o.full ? 0 : o.len;
    }
    if (!xff_done && peer != NULL) {
        puts_(&o, "X-Forwarded-For: ");
        puts_(&o, peer);
        puts_(&o, "\r\n");
    }
    puts_(&o, "X-Forwarded-Proto: ");
    puts_(&o, scheme);
    puts_(&o, "\r\n\r\n");
    return o.full ? 0 : o.len;
}

size_t sl_http_fwd_with(const struct sl_http_head *h, const char *extra, size_t extra_len,
                        char *out, size_t cap)
{
    /* the empty line is the head's last two bytes */
    if (h->len < 2 || cap < h->len + extra_len)
        return 0;
    size_t body = h->len - 2;
    memcpy(out, h->buf, body);
    memcpy(out + body, extra, extra_len);
    memcpy(out + body + extra_len, "\r\n", 2);
    return h->len + extra_len;
}

static int is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* Rewrites the value <v, n> of a Connection field without its <opt>
 * options into <out> (never longer); returns the length written. */
static size_t without_opt(const char *v, size_t n, const char *opt, char *out)
{
    size_t ol = strlen(opt);
    size_t o = 0, i = 0;
    while (i <= n) {
        size_t j = i;
        while (j < n && v[j] != ',')
            j++;
        size_t a = i, b = j;
        while (a < b && is_ows(v[a]))
            a++;
        while (b > a && is_ows(v[b - 1]))
            b--;
        if (b > a && !(b - a == ol && strncasecmp(v + a, opt, ol) == 0)) {
            if (o > 0) {
                out[o++] = ',';
                out[o++] = ' ';
            }
            memmove(out + o, v + a, b - a);
            o += b - a;
        }
        i = j + 1;
    }
    return o;
}

/* Removes option <opt> from the Connection fields of <head>, in place. */
static size_t drop_opt(char *head, size_t len, const char *opt)
{
    static const char name[] = "Connection:";
    size_t nl = sizeof(name) - 1;
    char *nlp = memchr(head, '\n', len);
    size_t at = nlp ? (size_t)(nlp - head) + 1 : len; /* after the start line */
    while (at < len) {
        char *e = memchr(head + at, '\n', len - at);
        size_t end = e ? (size_t)(e - head) + 1 : len; /* the line with its LF */
        if (end - at <= 2 || end - at < nl || strncasecmp(head + at, name, nl) != 0) {
            at = end;
            continue;
        }
        size_t vend = end;
        if (vend > at && head[vend - 1] == '\n')
            vend--;
        if (vend > at && head[vend - 1] == '\r')
            vend--;
        /* "Connection: " then the rewritten value then CRLF, in place: the
         * value only shrinks, so it is written over itself front to back */
        size_t v = at + nl;
        size_t kept = without_opt(head + v, vend - v, opt, head + at + nl + 1);
        size_t nlen;
        if (kept == 0) {
            nlen = 0; /* nothing left: the field goes */
        } else {
            head[at + nl] = ' ';
            memcpy(head + at + nl + 1 + kept, "\r\n", 2);
            nlen = nl + 1 + kept + 2;
        }
        memmove(head + at + nlen, head + end, len - end);
        len -= end - at - nlen;
        at += nlen;
    }
    return len;
}

size_t sl_http_fwd_drop_close(char *head, size_t len)
{
    return drop_opt(head, len, "close");
}

size_t sl_http_fwd_drop_keepalive(char *head, size_t len)
{
    return drop_opt(head, len, "keep-alive");
}

/* sluice — the HTTP/1.1 answers sluice writes itself.
 *
 *   verdict --> body (problem+json: title, status, detail)
 *           --> head: status line, Retry-After, rate-limit fields (mode),
 *               Content-Type, Content-Length (the body's), Cache-Control,
 *               Connection: close when asked
 *
 * Everything is written through one bounded appender: an answer that does
 * not fit the caller's buffer is not written at all (length 0). The sizes
 * that vary are bounded (a limit name is under 64 bytes, a detail is cut
 * at 256), which is what makes SL_HTTP_ANSWER_MAX hold. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "proto/http_answer.h"

#define DETAIL_MAX 256 /* bytes of an error's detail text written, at most */

/* A bounded appender over the caller's buffer. */
struct out {
    char  *p;
    size_t cap;
    size_t len;
    int    over; /* something did not fit */
};

static void put(struct out *o, const char *s, size_t n)
{
    if (n == 0)
        return;
    if (o->over || n > o->cap - o->len) {
        o->over = 1;
        return;
    }
    memcpy(o->p + o->len, s, n);
    o->len += n;
}

static void puts_(struct out *o, const char *s)
{
    put(o, s, strlen(s));
}

__attribute__((format(printf, 2, 3))) static void putf(struct out *o, const char *fmt, ...)
{
    char buf[128]; /* the longest format here, its numbers at their longest */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(buf)) {
        o->over = 1;
        return;
    }
    put(o, buf, (size_t)n);
}

/* <s> (at most <max> bytes of it) as an sf-string (RFC 8941 3.3.3):
 * quoted, '"' and '\' escaped. An sf-string holds printable ASCII only:
 * any other byte becomes '?' (limit names are configuration names, so
 * this is a guard, not a translation). */
static void put_sf_string(struct out *o, const char *s, size_t max)
{
    put(o, "\"", 1);
    for (size_t i = 0; i < max && s[i] != '\0'; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = { '\\', (char)c };
            put(o, e, 2);
        } else {
            char b = c >= 0x20 && c < 0x7f ? (char)c : '?';
            put(o, &b, 1);
        }
    }
    put(o, "\"", 1);
}

/* <s> (at most <max> bytes) inside a JSON string: '"' and '\' escaped;
 * bytes outside printable ASCII become '?' (the body stays valid UTF-8
 * whatever a name holds). */
static void put_json_text(struct out *o, const char *s, size_t max)
{
    for (size_t i = 0; i < max && s[i] != '\0'; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = { '\\', (char)c };
            put(o, e, 2);
        } else {
            char b = c >= 0x20 && c < 0x7f ? (char)c : '?';
            put(o, &b, 1);
        }
    }
}

const char *sl_http_reason(int status)
{
    switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 405: return "Method Not Allowed";
    case 414: return "URI Too Long";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default:  return "Error";
    }
}

/* Retry-After for a wait of <us>: whole seconds rounded up, at least 1
 * (a retry after it is never early; "0" would invite a retry at once). */
static uint64_t retry_seconds(uint64_t us)
{
    uint64_t s = us / 1000000 + (us % 1000000 != 0);
    return s < 1 ? 1 : s;
}

/* <prefix>, <v> in decimal, <suffix>: the fields of every allowed
 * response, kept off printf. */
static void put_num(struct out *o, const char *prefix, uint64_t v, const char *suffix)
{
    char d[20];
    int n = 0;
    do {
        d[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    char buf[20];
    for (int i = 0; i < n; i++)
        buf[i] = d[n - 1 - i];
    puts_(o, prefix);
    put(o, buf, (size_t)n);
    puts_(o, suffix);
}

/* The rate-limit fields of <v> for <mode>, with <r> remaining and reset
 * <t> seconds. */
static void put_rl_fields(struct out *o, const struct sl_verdict *v, enum sl_http_rl_mode mode,
                          uint64_t r, uint64_t t)
{
    size_t nlen = strnlen(v->policy, sizeof(v->policy));
    if (mode == SL_HTTP_RL_DRAFT || mode == SL_HTTP_RL_BOTH) {
        puts_(o, "RateLimit-Policy: ");
        put_sf_string(o, v->policy, nlen);
        put_num(o, ";q=", v->quota, "");
        put_num(o, ";w=", v->window_s, "\r\n");
        puts_(o, "RateLimit: ");
        put_sf_string(o, v->policy, nlen);
        put_num(o, ";r=", r, "");
        put_num(o, ";t=", t, "\r\n");
    }
    if (mode == SL_HTTP_RL_LEGACY || mode == SL_HTTP_RL_BOTH) {
        put_num(o, "X-RateLimit-Limit: ", v->quota, "\r\n");
        put_num(o, "X-RateLimit-Remaining: ", r, "\r\n");
        put_num(o, "X-RateLimit-Reset: ", t, "\r\n");
    }
}

/* Status line; <fields> (already rendered, may be empty); the problem+json
 * framing of <body>; then <body>. Returns the length or 0. */
static size_t finish(char *out, size_t cap, int status, const struct out *fields,
                     const struct out *body, unsigned flags)
{
    if (fields->over || body->over)
        return 0;
    struct out o = { out, cap, 0, 0 };
    putf(&o, "HTTP/1.1 %d ", status);
    puts_(&o, sl_http_reason(status));
    puts_(&o, "\r\n");
    put(&o, fields->p, fields->len);
    puts_(&o, "Content-Type: application/problem+json\r\n");
    putf(&o, "Content-Length: %zu\r\n", body->len);
    puts_(&o, "Cache-Control: no-store\r\n");
    if (flags & SL_HTTP_ANS_CLOSE)
        puts_(&o, "Connection: close\r\n");
    else if (flags & SL_HTTP_ANS_KEEP)
        puts_(&o, "Connection: keep-alive\r\n");
    puts_(&o, "\r\n");
    if (!(flags & SL_HTTP_ANS_HEAD))
        put(&o, body->p, body->len);
    return o.over ? 0 : o.len;
}

/* Opens a problem+json body for <status>: type, title, status, and the
 * start of "detail" when <detail> is set (the caller writes it and calls
 * body_close). */
static void body_open(struct out *b, int status, int detail)
{
    puts_(b, "{\"type\":\"about:blank\",\"title\":\"");
    puts_(b, sl_http_reason(status));
    putf(b, "\",\"status\":%d", status);
    if (detail)
        puts_(b, ",\"detail\":\"");
}

static void body_close(struct out *b, int detail)
{
    puts_(b, detail ? "\"}\n" : "}\n");
}

size_t sl_http_answer_limited(const struct sl_verdict *v, enum sl_http_rl_mode mode,
                              unsigned flags, char *out, size_t cap)
{
    char fbuf[1024], bbuf[512];
    struct out f = { fbuf, sizeof(fbuf), 0, 0 }, b = { bbuf, sizeof(bbuf), 0, 0 };
    const char *name = v->policy[0] != '\0' ? v->policy : v->limit;
    size_t nlen = strnlen(name, sizeof(v->policy));
    uint64_t s = retry_seconds(v->retry_after_us);
    int status = v->store_down ? 503 : 429;
    if (!v->never)
        putf(&f, "Retry-After: %" PRIu64 "\r\n", s);
    /* Nothing is known of a limit that could not be checked, and a
     * connection limit has no rate policy: no rate-limit fields. */
    if (!v->store_down && v->policy[0] != '\0' && v->window_s > 0 && mode != SL_HTTP_RL_NONE)
        put_rl_fields(&f, v, mode, v->remaining, v->reset_s > s ? v->reset_s : s);
    body_open(&b, status, 1);
    puts_(&b, "limit '");
    put_json_text(&b, name, nlen);
    if (v->store_down)
        putf(&b, "' cannot be checked (quota store unavailable), retry in %" PRIu64 " s", s);
    else if (v->never)
        puts_(&b, "' exceeded: the request costs more than the limit allows");
    else
        putf(&b, "' exceeded, retry in %" PRIu64 " s", s);
    body_close(&b, 1);
    return finish(out, cap, status, &f, &b, flags);
}

size_t sl_http_answer_fields(const struct sl_verdict *v, enum sl_http_rl_mode mode, char *out,
                             size_t cap)
{
    if (v->policy[0] == '\0' || v->window_s == 0 || mode == SL_HTTP_RL_NONE)
        return 0;
    struct out o = { out, cap, 0, 0 };
    put_rl_fields(&o, v, mode, v->remaining, v->reset_s);
    return o.over ? 0 : o.len;
}

size_t sl_http_answer_connections(const char *limit, char *out, size_t cap)
{
    char bbuf[512];
    struct out f = { NULL, 0, 0, 0 }, b = { bbuf, sizeof(bbuf), 0, 0 };
    body_open(&b, 429, 1);
    puts_(&b, "max number of connections reached (limit '");
    put_json_text(&b, limit, 63);
    puts_(&b, "')");
    body_close(&b, 1);
    return finish(out, cap, 429, &f, &b, SL_HTTP_ANS_CLOSE);
}

size_t sl_http_answer_error(int status, const char *detail, char *out, size_t cap)
{
    switch (status) {
    case 400: case 405: case 408: case 413: case 414: case 431: case 501: case 502: case 503:
    case 504:
        break;
    default:
        status = 500;
        break;
    }
    char bbuf[1024];
    struct out f = { NULL, 0, 0, 0 }, b = { bbuf, sizeof(bbuf), 0, 0 };
    int has = detail != NULL && detail[0] != '\0';
    body_open(&b, status, has);
    if (has)
        put_json_text(&b, detail, DETAIL_MAX);
    body_close(&b, has);
    return finish(out, cap, status, &f, &b, SL_HTTP_ANS_CLOSE);
}

size_t sl_http_answer_overloaded(const char *why, unsigned flags, char *out, size_t cap)
{
    char bbuf[512], fbuf[] = "Retry-After: 1\r\n";
    struct out f = { fbuf, sizeof(fbuf) - 1, sizeof(fbuf) - 1, 0 }, b = { bbuf, sizeof(bbuf), 0, 0 };
    body_open(&b, 503, 1);
    puts_(&b, "upstream overloaded (adaptive concurrency: ");
    put_json_text(&b, why, 64);
    puts_(&b, "), retry");
    body_close(&b, 1);
    return finish(out, cap, 503, &f, &b, flags);
}

size_t sl_http_answer_head_only(const char *out, size_t len)
{
    for (size_t i = 0; i + 4 <= len; i++)
        if (memcmp(out + i, "\r\n\r\n", 4) == 0)
            return i + 4;
    return len;
}

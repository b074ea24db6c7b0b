/* sluice — access logs of http listeners (see alog.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>

#include "core/log.h"
#include "core/lsink.h"
#include "identity/identity.h"
#include "limit/limiter.h"
#include "net/alog.h"
#include "net/listener.h"
#include "net/session.h"
#include "net/session-i.h"
#include "net/turn.h"

#define PATH_MAX_LOG 1024 /* bytes of a path kept for its line */
#define FIELD_MAX    256  /* bytes of Referer, User-Agent kept */
#define LOGS_MAX     64   /* listeners with an access log */

enum { OUT_NONE = 0, OUT_ALLOWED, OUT_REJECTED, OUT_DELAYED };
static const char *const out_names[] = { "allowed", "allowed", "rejected", "delayed" };

/* One request, from its head to its response's end. */
struct sl_alog_rec {
    struct sl_alog_rec *next;
    struct timeval      wall;       /* when its head was whole */
    uint64_t            start_us;   /* ... on the loop's clock */
    uint8_t             minor;      /* HTTP/1.<minor> */
    uint8_t             outcome;    /* OUT_* */
    uint8_t             sent;       /* went upstream: a response of the upstream ends it */
    char                ip[48];
    char                method[32];
    char                path[PATH_MAX_LOG];
    char                referer[FIELD_MAX];
    char                agent[FIELD_MAX];
    char                identity[SL_ID_MAX + 1];
    char                limit[64];
};

/* A session's state: its log, the records in request order. */
struct sl_alog_sess {
    struct sl_lsink    *sink;
    int                 format;
    uint64_t            gen;        /* of the configuration the sink was looked up in */
    struct sl_alog_rec *head, *tail;
    struct sl_alog_rec *cur;        /* being decided (not sent upstream, not answered) */
    uint64_t            mark;       /* client output total when the response began */
};

/* The logs of the running configuration, by listener name. */
struct entry {
    char            *listener;
    struct sl_lsink *sink;
    int              format;
};
static struct entry logs[LOGS_MAX];
static int n_logs;
static uint64_t gen = 1;
int sl_alog_any;

static struct sl_lsink *sink_for_path(const char *path)
{
    for (int i = 0; i < n_logs; i++)
        if (strcmp(sl_lsink_path(logs[i].sink), path) == 0)
            return logs[i].sink;
    return NULL;
}

int sl_alog_apply(uv_loop_t *loop, const struct sl_conf *c)
{
    struct entry next[LOGS_MAX];
    int n = 0;
    for (const struct sl_listener_conf *lc = c->listeners; lc != NULL; lc = lc->next) {
        if (lc->protocol != SL_PROTO_HTTP || lc->access_log == NULL || n == LOGS_MAX)
            continue;
        struct sl_lsink *k = sink_for_path(lc->access_log);
        for (int i = 0; k == NULL && i < n; i++)
            if (strcmp(sl_lsink_path(next[i].sink), lc->access_log) == 0)
                k = next[i].sink;
        int err = 0;
        if (k == NULL && (k = sl_lsink_open(loop, lc->access_log, &err)) == NULL) {
            char q[512], e[128];
            const char *why = strerror(-err);
            sl_log_error("cannot open access_log", "listener=%s file=%s err=%s", lc->name,
                         sl_log_quote(lc->access_log, strlen(lc->access_log), q, sizeof(q)),
                         sl_log_quote(why, strlen(why), e, sizeof(e)));
            /* the files this call opened go; the running ones stay */
            for (int i = 0; i < n; i++) {
                int old = 0;
                for (int j = 0; j < n_logs; j++)
                    old |= logs[j].sink == next[i].sink;
                for (int j = 0; j < i; j++)
                    old |= next[j].sink == next[i].sink;
                if (!old)
                    sl_lsink_close(next[i].sink);
                free(next[i].listener);
            }
            return -1;
        }
        next[n].listener = strdup(lc->name);
        next[n].sink = k;
        next[n].format = lc->access_log_format;
        if (next[n].listener == NULL)
            continue;
        n++;
    }
    /* files no longer named close once their lines are written */
    for (int j = 0; j < n_logs; j++) {
        int kept = 0;
        for (int i = 0; i < n; i++)
            kept |= next[i].sink == logs[j].sink;
        for (int i = 0; i < j; i++)
            kept |= logs[i].sink == logs[j].sink; /* closed once */
        if (!kept)
            sl_lsink_close(logs[j].sink);
        free(logs[j].listener);
    }
    memcpy(logs, next, (size_t)n * sizeof(next[0]));
    n_logs = n;
    sl_alog_any = n > 0;
    gen++;
    return 0;
}

void sl_alog_close_all(void)
{
    for (int j = 0; j < n_logs; j++) {
        int seen = 0;
        for (int i = 0; i < j; i++)
            seen |= logs[i].sink == logs[j].sink;
        if (!seen)
            sl_lsink_close(logs[j].sink);
        free(logs[j].listener);
    }
    n_logs = 0;
    sl_alog_any = 0;
    gen++;
}

/* ---- lines ---------------------------------------------------------------- */

/* Appends <s, n> for a quoted field of the combined format: '"' and '\'
 * escaped, bytes outside printable ASCII as \xHH (as nginx writes them). */
static size_t put_c(char *out, size_t o, size_t cap, const char *s, size_t n)
{
    for (size_t i = 0; i < n && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c < 0x20 || c >= 0x7f) {
            o += (size_t)snprintf(out + o, cap - o, "\\x%02X", c);
        } else {
            out[o++] = (char)c;
        }
    }
    return o;
}

/* Appends <s> as a json string (quotes included). */
static size_t put_j(char *out, size_t o, size_t cap, const char *s)
{
    if (o + 2 >= cap)
        return o;
    out[o++] = '"';
    for (; *s != '\0' && o + 8 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c < 0x20 || c >= 0x7f) {
            o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
        } else {
            out[o++] = (char)c;
        }
    }
    out[o++] = '"';
    return o;
}

static size_t put_s(char *out, size_t o, size_t cap, const char *s)
{
    size_t n = strlen(s);
    if (o + n >= cap)
        n = o < cap ? cap - o - 1 : 0;
    memcpy(out + o, s, n);
    return o + n;
}

/* The second <sec> in both formats, formatted once per second. */
static const char *when(time_t sec, int json)
{
    static time_t at = -1;
    static char iso[32], clf[40];
    if (sec != at) {
        struct tm tm;
        gmtime_r(&sec, &tm);
        strftime(iso, sizeof(iso), "%Y-%m-%dT%H:%M:%S", &tm);
        strftime(clf, sizeof(clf), "%d/%b/%Y:%H:%M:%S +0000", &tm);
        at = sec;
    }
    return json ? iso : clf;
}

size_t sl_alog_format(char *out, size_t cap, int format, const struct sl_alog_rec *r,
                      int status, uint64_t bytes, uint64_t dur_us)
{
    char b[128];
    size_t o = 0;
    cap -= 2; /* the '\n' and the NUL */
    if (format == SL_ALOG_JSON) {
        snprintf(b, sizeof(b), "%s.%03dZ", when(r->wall.tv_sec, 1), (int)(r->wall.tv_usec / 1000));
        o = put_s(out, o, cap, "{\"time\":");
        o = put_j(out, o, cap, b);
        o = put_s(out, o, cap, ",\"client_ip\":");
        o = put_j(out, o, cap, r->ip);
        o = put_s(out, o, cap, ",\"method\":");
        o = put_j(out, o, cap, r->method[0] ? r->method : "-");
        o = put_s(out, o, cap, ",\"path\":");
        o = put_j(out, o, cap, r->path[0] ? r->path : "-");
        snprintf(b, sizeof(b), ",\"status\":%d,\"bytes\":%" PRIu64 ",\"duration_ms\":%" PRIu64 ".%03u",
                 status, bytes, dur_us / 1000, (unsigned)(dur_us % 1000));
        o = put_s(out, o, cap, b);
        o = put_s(out, o, cap, ",\"identity\":");
        o = put_j(out, o, cap, r->identity[0] ? r->identity : "-");
        o = put_s(out, o, cap, ",\"outcome\":");
        o = put_j(out, o, cap, out_names[r->outcome]);
        o = put_s(out, o, cap, ",\"limit\":");
        if (r->limit[0])
            o = put_j(out, o, cap, r->limit);
        else
            o = put_s(out, o, cap, "null");
        o = put_s(out, o, cap, "}");
    } else {
        /* %h %l %u %t "%r" %>s %b "%{Referer}i" "%{User-agent}i" */
        o = put_s(out, o, cap, r->ip);
        o = put_s(out, o, cap, " - - [");
        o = put_s(out, o, cap, when(r->wall.tv_sec, 0));
        o = put_s(out, o, cap, "] \"");
        if (r->method[0]) {
            o = put_c(out, o, cap, r->method, strlen(r->method));
            o = put_s(out, o, cap, " ");
            o = put_c(out, o, cap, r->path, strlen(r->path));
            snprintf(b, sizeof(b), " HTTP/1.%u", r->minor);
            o = put_s(out, o, cap, b);
        } else {
            o = put_s(out, o, cap, "-");
        }
        if (bytes > 0)
            snprintf(b, sizeof(b), "\" %d %" PRIu64 " \"", status, bytes);
        else
            snprintf(b, sizeof(b), "\" %d - \"", status);
        o = put_s(out, o, cap, b);
        o = r->referer[0] ? put_c(out, o, cap, r->referer, strlen(r->referer)) : put_s(out, o, cap, "-");
        o = put_s(out, o, cap, "\" \"");
        o = r->agent[0] ? put_c(out, o, cap, r->agent, strlen(r->agent)) : put_s(out, o, cap, "-");
        o = put_s(out, o, cap, "\"");
    }
    out[o++] = '\n';
    out[o] = '\0';
    return o;
}

/* ---- the session's side ----------------------------------------------------- */

/* The session's state, made (or looked up again after a reload) when its
 * listener logs; NULL when it does not. */
static struct sl_alog_sess *state(struct sl_session *s)
{
    struct sl_alog_sess *a = s->alog;
    if (a != NULL && a->gen == gen)
        return a->sink != NULL ? a : NULL;
    struct sl_lsink *k = NULL;
    int format = 0;
    for (int i = 0; i < n_logs; i++)
        if (strcmp(logs[i].listener, s->l->name) == 0) {
            k = logs[i].sink;
            format = logs[i].format;
            break;
        }
    if (a == NULL) {
        if (k == NULL)
            return NULL;
        if ((a = calloc(1, sizeof(*a))) == NULL)
            return NULL;
        s->alog = a;
    }
    a->sink = k;
    a->format = format;
    a->gen = gen;
    return k != NULL ? a : NULL;
}

static void copy_field(char *dst, size_t cap, const char *p, size_t n)
{
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, p, n);
    dst[n] = '\0';
}

static const struct sl_http_field *field(const struct sl_http_head *hd, const char *name)
{
    size_t nl = strlen(name);
    for (uint32_t i = 0; i < hd->nfields; i++) {
        const struct sl_http_field *f = &hd->fields[i];
        if (f->name_len == nl && strncasecmp(hd->buf + f->name, name, nl) == 0)
            return f;
    }
    return NULL;
}

static struct sl_alog_rec *rec_new(struct sl_session *s)
{
    struct sl_alog_rec *r = malloc(sizeof(*r)); /* 2 KiB: not cleared, each field is set */
    if (r == NULL)
        return NULL;
    r->next = NULL;
    r->outcome = OUT_NONE;
    r->sent = 0;
    r->method[0] = r->path[0] = r->referer[0] = r->agent[0] = r->identity[0] = r->limit[0] = '\0';
    gettimeofday(&r->wall, NULL);
    r->start_us = sl_turn_now_us();
    r->minor = 1;
    struct sl_ident_state *id = sl_sess_ident(s);
    copy_field(r->ip, sizeof(r->ip), id != NULL ? id->ip : "-", id != NULL ? strlen(id->ip) : 1);
    return r;
}

void sl_alog_begin(struct sl_session *s, const struct sl_http_head *hd)
{
    struct sl_alog_sess *a = state(s);
    if (a == NULL)
        return;
    struct sl_alog_rec *r = rec_new(s);
    if (r == NULL)
        return;
    copy_field(r->method, sizeof(r->method), hd->buf + hd->method_off, hd->method_len);
    if (hd->path_len > 0)
        copy_field(r->path, sizeof(r->path), hd->buf + hd->path_off, hd->path_len);
    else
        copy_field(r->path, sizeof(r->path), hd->buf + hd->target_off, hd->target_len);
    r->minor = hd->minor;
    const struct sl_http_field *f = field(hd, "referer");
    if (f != NULL)
        copy_field(r->referer, sizeof(r->referer), hd->buf + f->value, f->value_len);
    if ((f = field(hd, "user-agent")) != NULL)
        copy_field(r->agent, sizeof(r->agent), hd->buf + f->value, f->value_len);
    struct sl_ident_state *id = sl_sess_ident(s);
    if (id != NULL) {
        struct sl_req q = { .http = hd };
        sl_identity_of_req(s->l->conf, id, &q, r->identity);
    }
    r->outcome = OUT_NONE;
    if (a->tail != NULL)
        a->tail->next = r;
    else
        a->head = r;
    a->tail = r;
    a->cur = r;
}

void sl_alog_verdict(struct sl_session *s, const struct sl_verdict *v)
{
    struct sl_alog_sess *a = s->alog;
    if (a == NULL || a->cur == NULL)
        return;
    struct sl_alog_rec *r = a->cur;
    if (v->kind == SL_VERDICT_REJECT) {
        r->outcome = OUT_REJECTED;
        copy_field(r->limit, sizeof(r->limit), v->limit, strlen(v->limit));
        if (v->identity[0])
            copy_field(r->identity, sizeof(r->identity), v->identity, strlen(v->identity));
    } else {
        r->outcome = v->delay_us > 0 ? OUT_DELAYED : OUT_ALLOWED;
        copy_field(r->limit, sizeof(r->limit), v->policy, strlen(v->policy));
    }
}

void sl_alog_sent(struct sl_session *s)
{
    struct sl_alog_sess *a = s->alog;
    if (a == NULL || a->cur == NULL)
        return;
    a->cur->sent = 1;
    a->cur = NULL;
}

static void unlink_rec(struct sl_alog_sess *a, struct sl_alog_rec *r)
{
    struct sl_alog_rec **pp = &a->head, *prev = NULL;
    while (*pp != NULL && *pp != r) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (*pp == NULL)
        return;
    *pp = r->next;
    if (a->tail == r)
        a->tail = prev;
    if (a->cur == r)
        a->cur = NULL;
}

static void write_rec(struct sl_session *s, const struct sl_alog_rec *r, int status,
                      uint64_t bytes)
{
    /* a reload since the request began: the listener's log as it is now */
    struct sl_alog_sess *a = state(s);
    if (a == NULL)
        return; /* it no longer logs */
    char line[4096];
    uint64_t now = sl_turn_now_us();
    uint64_t dur = now > r->start_us ? now - r->start_us : 0;
    size_t n = sl_alog_format(line, sizeof(line), a->format, r, status, bytes, dur);
    (void)sl_lsink_put(a->sink, line, n);
}

void sl_alog_local(struct sl_session *s, int status, size_t len)
{
    struct sl_alog_sess *a = state(s);
    if (a == NULL)
        return;
    struct sl_alog_rec *r = a->cur, one;
    if (r != NULL) {
        unlink_rec(a, r);
    } else {
        /* a head never whole (framing error, header_timeout) */
        struct sl_alog_rec *t = rec_new(s);
        if (t == NULL)
            return;
        one = *t;
        free(t);
        r = &one;
    }
    write_rec(s, r, status, len);
    if (r != &one)
        free(r);
}

void sl_alog_head(struct sl_session *s)
{
    struct sl_alog_sess *a = s->alog;
    if (a != NULL)
        a->mark = s->out[0].total;
}

void sl_alog_done(struct sl_session *s, int status)
{
    struct sl_alog_sess *a = s->alog;
    if (a == NULL)
        return;
    struct sl_alog_rec *r = a->head;
    while (r != NULL && !r->sent)
        r = r->next;
    uint64_t total = s->out[0].total;
    uint64_t bytes = total > a->mark ? total - a->mark : 0;
    a->mark = total;
    if (r == NULL)
        return;
    unlink_rec(a, r);
    write_rec(s, r, status, bytes);
    free(r);
}

void sl_alog_free(struct sl_session *s)
{
    struct sl_alog_sess *a = s->alog;
    if (a == NULL)
        return;
    while (a->head != NULL) {
        struct sl_alog_rec *r = a->head;
        a->head = r->next;
        write_rec(s, r, 499, 0);
        free(r);
    }
    free(a);
    s->alog = NULL;
}

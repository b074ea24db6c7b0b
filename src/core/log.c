/* sluice — logging (see log.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "core/hex.h"
#include "core/log.h"

#define KV_MAX   2048 /* key=value text of one line */
#define LINE_MAX 4096 /* one line as written: json escapes grow it; a pipe takes
                         up to PIPE_BUF (4096) bytes in one piece */

enum sl_log_level sl_log_level = SL_LOG_INFO;
char sl_log_tag[32];
const char *const sl_log_format_names[] = { "logfmt", "json", NULL };

static const char *const names[] = { "error", "warn", "info", "debug" };

/* Where lines go: stderr until sl_log_open() names a file. */
static int log_fd = STDERR_FILENO;
static int log_own;                 /* log_fd is ours to close (a file) */
static char *log_path;              /* NULL: stderr */
static enum sl_log_format log_fmt = SL_LOG_LOGFMT;

int sl_log_level_parse(const char *s, enum sl_log_level *out)
{
    for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = (enum sl_log_level)i;
            return 0;
        }
    }
    return -1;
}

const char *sl_log_level_name(enum sl_log_level l)
{
    return (unsigned)l < 4 ? names[l] : "?";
}

/* ---- destination ---------------------------------------------------------- */

static int open_file(const char *path)
{
    /* O_APPEND: the master and every worker write to the same file, and
     * each write(2) lands whole at its end. */
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY, 0640);
    return fd < 0 ? -errno : fd;
}

static void set_fd(int fd, int own, char *path)
{
    if (log_own)
        close(log_fd);
    log_fd = fd;
    log_own = own;
    free(log_path);
    log_path = path;
}

int sl_log_open(const char *path, enum sl_log_format format)
{
    if (path == NULL || path[0] == '\0') {
        set_fd(STDERR_FILENO, 0, NULL);
        log_fmt = format;
        return 0;
    }
    if (log_path != NULL && strcmp(log_path, path) == 0) {
        log_fmt = format;
        return 0;
    }
    char *copy = strdup(path);
    if (copy == NULL)
        return -ENOMEM;
    int fd = open_file(path);
    if (fd < 0) {
        free(copy);
        return fd;
    }
    set_fd(fd, 1, copy);
    log_fmt = format;
    return 0;
}

int sl_log_reopen(void)
{
    if (log_path == NULL)
        return 0;
    int fd = open_file(log_path);
    if (fd < 0) {
        char q[512], e[128];
        const char *why = strerror(-fd);
        sl_log_error("cannot reopen log_file: writing to the old one", "file=%s err=%s",
                     sl_log_quote(log_path, strlen(log_path), q, sizeof(q)),
                     sl_log_quote(why, strlen(why), e, sizeof(e)));
        return fd;
    }
    if (log_own)
        close(log_fd);
    log_fd = fd;
    log_own = 1;
    char q[512];
    sl_log_info("log file reopened", "file=%s", sl_log_quote(log_path, strlen(log_path), q, sizeof(q)));
    return 0;
}

const char *sl_log_path(void)
{
    return log_path;
}

int sl_log_fd(void)
{
    return log_fd;
}

/* ---- one line ------------------------------------------------------------- */

/* Builds a json object in a fixed buffer. Room for the end ("truncated",
 * "}\n" and the NUL) is kept back, so a line that does not fit loses whole
 * fields and still parses. */
struct jbuf {
    char  *out;
    size_t cap;
    size_t o;
    int    full; /* a field did not fit: no more are added */
};

#define J_TAIL 24 /* ,"truncated":"1"}\n and the NUL */

static int j_room(const struct jbuf *b, size_t n)
{
    return b->o + n + J_TAIL <= b->cap;
}

/* Appends <s> (<n> bytes) as a json string: quotes, backslashes and control
 * characters escaped; bytes outside ASCII as \u00XX (Latin-1), so any bytes
 * (a client's key, a bad header) give valid json. Returns 0 or -1 (did not
 * fit: b->o unchanged). */
static int j_str(struct jbuf *b, const char *s, size_t n)
{
    size_t start = b->o;
    if (!j_room(b, 2))
        return -1;
    b->out[b->o++] = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        size_t el = 2;
        esc[0] = '\\';
        switch (c) {
        case '"':  esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default:
            if (c < 0x20 || c >= 0x7f) {
                snprintf(esc, sizeof(esc), "\\u%04x", c);
                el = 6;
            } else {
                esc[0] = (char)c;
                el = 1;
            }
        }
        if (!j_room(b, el + 1)) {
            b->o = start;
            return -1;
        }
        memcpy(b->out + b->o, esc, el);
        b->o += el;
    }
    b->out[b->o++] = '"';
    return 0;
}

static void j_field(struct jbuf *b, const char *k, size_t kn, const char *v, size_t vn)
{
    if (b->full)
        return;
    size_t start = b->o;
    if (!j_room(b, 1))
        goto full;
    char sep = b->o == 0 ? '{' : ',';
    b->out[b->o++] = sep;
    if (j_str(b, k, kn) < 0 || !j_room(b, 1))
        goto full;
    b->out[b->o++] = ':';
    if (j_str(b, v, vn) < 0)
        goto full;
    return;
full:
    b->o = start;
    b->full = 1;
}

/* 1 if the word at <p> (up to a space) is a continuation of an unquoted
 * value: not empty, no '=' in it. */
static int plain_word(const char *p)
{
    size_t n = strcspn(p, " ");
    return n > 0 && memchr(p, '=', n) == NULL;
}

/* Reads one logfmt value at <*pp> into <v> (<cap> bytes; longer values
 * are cut), undoing sl_log_quote(); advances <*pp>. Returns its length.
 * An unquoted value takes the words after it up to the next key=: some
 * callers pass text such as "err=connection refused" unquoted. */
static size_t logfmt_value(const char **pp, char *v, size_t cap)
{
    const char *p = *pp;
    size_t n = 0;
    if (*p != '"') {
        while (*p != '\0' && (*p != ' ' || plain_word(p + 1))) {
            if (n < cap)
                v[n++] = *p;
            p++;
        }
        *pp = p;
        return n;
    }
    p++;
    while (*p != '\0' && *p != '"') {
        char c = *p++;
        if (c == '\\' && *p != '\0') {
            int hi, lo;
            if (*p == 'x' && (hi = sl_hexval(p[1])) >= 0 && (lo = sl_hexval(p[2])) >= 0) {
                c = (char)(hi << 4 | lo);
                p += 3;
            } else {
                c = *p++;
            }
        }
        if (n < cap)
            v[n++] = c;
    }
    if (*p == '"')
        p++;
    *pp = p;
    return n;
}

static size_t format_json(char *out, size_t cap, const char *ts, enum sl_log_level l,
                          const char *msg, const char *kv)
{
    struct jbuf b = { out, cap, 0, 0 };
    char v[KV_MAX];
    j_field(&b, "ts", 2, ts, strlen(ts));
    j_field(&b, "level", 5, names[l], strlen(names[l]));
    j_field(&b, "msg", 3, msg, strlen(msg));
    for (const char *p = kv; !b.full;) {
        while (*p == ' ')
            p++;
        if (*p == '\0')
            break;
        const char *k = p;
        while (*p != '\0' && *p != '=' && *p != ' ')
            p++;
        size_t kn = (size_t)(p - k), vn = 0;
        if (*p == '=') {
            p++;
            vn = logfmt_value(&p, v, sizeof(v));
        }
        j_field(&b, k, kn, v, vn);
    }
    if (b.o == 0)
        out[b.o++] = '{';
    if (b.full) {
        memcpy(out + b.o, ",\"truncated\":\"1\"", 16);
        b.o += 16;
    }
    out[b.o++] = '}';
    out[b.o++] = '\n';
    out[b.o] = '\0';
    return b.o;
}

size_t sl_log_format_line(char *out, size_t cap, enum sl_log_format f, const char *ts,
                          enum sl_log_level l, const char *msg, const char *kv)
{
    if ((unsigned)l > SL_LOG_DEBUG)
        l = SL_LOG_DEBUG;
    if (f == SL_LOG_JSON)
        return format_json(out, cap, ts, l, msg, kv);
    char q[512];
    int n = snprintf(out, cap - 1, "ts=%s level=%s msg=%s%s%s", ts, names[l],
                     sl_log_quote(msg, strlen(msg), q, sizeof(q)), kv[0] != '\0' ? " " : "", kv);
    size_t len = n < 0 ? 0 : (size_t)n > cap - 2 ? cap - 2 : (size_t)n;
    out[len++] = '\n';
    out[len] = '\0';
    return len;
}

static void write_line(const char *p, size_t n)
{
    /* One write for the whole line; the loop only finishes what a pipe or
     * a full disk took in part. A failed write loses the line: logging
     * never stops the proxy. */
    while (n > 0) {
        ssize_t w = write(log_fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        p += w;
        n -= (size_t)w;
    }
}

static void vlog(enum sl_log_level l, const char *msg, const char *extra, const char *fmt,
                 va_list ap)
{
    int saved = errno; /* a caller may log between a failing call and its errno */
    char kv[KV_MAX], line[LINE_MAX], ts[64];
    size_t n = 0;
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    snprintf(ts, sizeof(ts), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000));
    kv[0] = '\0';
    if (sl_log_tag[0] != '\0')
        n = (size_t)snprintf(kv, sizeof(kv), "%s", sl_log_tag);
    if (fmt[0] != '\0' && n < sizeof(kv) - 2) {
        if (n > 0)
            kv[n++] = ' ';
        int m = vsnprintf(kv + n, sizeof(kv) - n, fmt, ap);
        if (m > 0)
            n += (size_t)m;
    }
    if (extra != NULL && n < sizeof(kv) - 2)
        snprintf(kv + n, sizeof(kv) - n, "%s%s", n > 0 ? " " : "", extra);
    write_line(line, sl_log_format_line(line, sizeof(line), log_fmt, ts, l, msg, kv));
    errno = saved;
}

void sl_log(enum sl_log_level l, const char *msg, const char *fmt, ...)
{
    if (l > sl_log_level)
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog(l, msg, NULL, fmt, ap);
    va_end(ap);
}

const char *sl_log_quote(const char *s, size_t len, char *out, size_t cap)
{
    int need = len == 0;
    for (size_t i = 0; i < len && !need; i++) {
        unsigned char c = (unsigned char)s[i];
        need = c <= ' ' || c >= 0x7f || c == '"' || c == '=' || c == '\\';
    }
    size_t o = 0;
    if (cap < 8) {
        if (cap) out[0] = '\0';
        return out;
    }
    if (!need) {
        size_t n = len < cap - 1 ? len : cap - 1;
        memcpy(out, s, n);
        out[n] = '\0';
        if (n < len && cap > 4)
            memcpy(out + cap - 4, "...", 4);
        return out;
    }
    out[o++] = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[5];
        size_t el;
        if (c == '"' || c == '\\') {
            esc[0] = '\\'; esc[1] = (char)c; el = 2;
        } else if (c < ' ' || c >= 0x7f) {
            snprintf(esc, sizeof(esc), "\\x%02x", c); el = 4;
        } else {
            esc[0] = (char)c; el = 1;
        }
        if (o + el + 5 > cap) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        memcpy(out + o, esc, el);
        o += el;
    }
    out[o++] = '"';
    out[o] = '\0';
    return out;
}

/* ---- repeated events ------------------------------------------------------ */

static uint64_t mono_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

uint64_t (*sl_log_clock)(void) = mono_us;

/* Every call site that has logged, for sl_log_rate_flush(). */
static struct sl_log_rate *rates;

int sl_log_rate_take(struct sl_log_rate *r, uint64_t now_us, uint64_t *repeated)
{
    if (r->last_us != 0 && now_us - r->last_us < SL_LOG_RATE_US) {
        r->left_out++;
        return 0;
    }
    *repeated = r->left_out;
    r->left_out = 0;
    r->last_us = now_us != 0 ? now_us : 1; /* 0 means never */
    return 1;
}

uint64_t sl_log_rate_due(struct sl_log_rate *r, uint64_t now_us, int all)
{
    /* Two windows: in a storm that goes on, the next event takes the count
     * on its own line (with its details); this line is for a storm that
     * has stopped, whose count would otherwise wait for the next one. */
    if (r->left_out == 0 || (!all && now_us - r->last_us < 2 * (uint64_t)SL_LOG_RATE_US))
        return 0;
    uint64_t n = r->left_out;
    r->left_out = 0;
    r->last_us = now_us != 0 ? now_us : 1;
    return n;
}

void sl_log_rated(struct sl_log_rate *r, enum sl_log_level l, const char *msg, const char *fmt, ...)
{
    if (l > sl_log_level)
        return;
    if (!r->listed) {
        r->listed = 1;
        r->next = rates;
        rates = r;
    }
    r->msg = msg;
    r->level = l;
    uint64_t repeated;
    if (!sl_log_rate_take(r, sl_log_clock(), &repeated))
        return;
    char extra[96];
    if (repeated > 0)
        snprintf(extra, sizeof(extra), "kind=%s repeated=%llu", r->kind,
                 (unsigned long long)repeated);
    va_list ap;
    va_start(ap, fmt);
    vlog(l, msg, repeated > 0 ? extra : NULL, fmt, ap);
    va_end(ap);
}

void sl_log_rate_flush(int all)
{
    uint64_t now = sl_log_clock();
    for (struct sl_log_rate *r = rates; r != NULL; r = r->next) {
        uint64_t n = sl_log_rate_due(r, now, all);
        if (n > 0)
            sl_log(r->level, r->msg, "kind=%s repeated=%llu", r->kind, (unsigned long long)n);
    }
}

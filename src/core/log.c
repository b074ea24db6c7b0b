#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "core/log.h"

enum sl_log_level sl_log_level = SL_LOG_INFO;

static const char *const names[] = { "error", "warn", "info", "debug" };

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

char sl_log_tag[32];

void sl_log(enum sl_log_level l, const char *msg, const char *fmt, ...)
{
    if (l > sl_log_level)
        return;
    char line[2048];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    char q[512];
    int n = snprintf(line, sizeof(line), "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03dZ level=%s msg=%s",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, (int)(tv.tv_usec / 1000), names[l],
                     sl_log_quote(msg, strlen(msg), q, sizeof(q)));
    if (n < 0)
        return;
    if (sl_log_tag[0] != '\0' && (size_t)n < sizeof(line) - 2) {
        int t = snprintf(line + n, sizeof(line) - (size_t)n - 1, " %s", sl_log_tag);
        if (t > 0)
            n += t;
    }
    if ((size_t)n < sizeof(line) - 2 && fmt[0] != '\0') {
        line[n++] = ' ';
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
        va_end(ap);
        if (m > 0)
            n += m;
    }
    if ((size_t)n > sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    /* One write per line so lines from a reload race nothing. */
    fwrite(line, 1, (size_t)n, stderr);
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

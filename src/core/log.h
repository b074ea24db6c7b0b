/* sluice — logging in logfmt to stderr.
 *
 *   ts=2026-11-22T08:00:00.123Z level=info msg="listening" listener=cache addr=127.0.0.1:6380
 *
 * sl_log() takes a message and then key/value pairs already formatted by the
 * caller as `key=value` text (values with spaces quoted by the caller with
 * sl_log_quote()). Lines under the current level cost one comparison. */
#ifndef SL_CORE_LOG_H
#define SL_CORE_LOG_H

#include <stddef.h>

enum sl_log_level {
    SL_LOG_ERROR = 0,
    SL_LOG_WARN  = 1,
    SL_LOG_INFO  = 2,
    SL_LOG_DEBUG = 3,
};

extern enum sl_log_level sl_log_level;
/* Added to every line after msg= when set, e.g. "worker=1" in a worker. */
extern char sl_log_tag[32];

/* Parses "error" | "warn" | "info" | "debug" into <out>; returns 0 or -1. */
int sl_log_level_parse(const char *s, enum sl_log_level *out);
const char *sl_log_level_name(enum sl_log_level l);

/* Writes one line: ts, level, msg="<msg>", then the printf-formatted <fmt>
 * (which should be space-separated key=value pairs, or "" for none). */
void sl_log(enum sl_log_level l, const char *msg, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define sl_log_error(msg, ...) sl_log(SL_LOG_ERROR, msg, __VA_ARGS__)
#define sl_log_warn(msg, ...)  do { if (sl_log_level >= SL_LOG_WARN)  sl_log(SL_LOG_WARN,  msg, __VA_ARGS__); } while (0)
#define sl_log_info(msg, ...)  do { if (sl_log_level >= SL_LOG_INFO)  sl_log(SL_LOG_INFO,  msg, __VA_ARGS__); } while (0)
#define sl_log_debug(msg, ...) do { if (sl_log_level >= SL_LOG_DEBUG) sl_log(SL_LOG_DEBUG, msg, __VA_ARGS__); } while (0)

/* Copies <s> into <out> (size <cap>) as a logfmt value: quoted and escaped
 * when it holds spaces, quotes, '=' or bytes outside printable ASCII.
 * Always NUL-terminates; truncates with "..." when it does not fit. */
const char *sl_log_quote(const char *s, size_t len, char *out, size_t cap);

#endif

/* sluice — logging: one line per event, to stderr or to log_file.
 *
 *   ts=2026-11-22T08:00:00.123Z level=info msg="listening" listener=cache addr=127.0.0.1:6380
 *   {"ts":"2026-11-22T08:00:00.123Z","level":"info","msg":"listening","listener":"cache",...}
 *
 * sl_log() takes a message and then key/value pairs already formatted by the
 * caller as `key=value` text (values with spaces quoted by the caller with
 * sl_log_quote()). Lines under the current level cost one comparison. With
 * log_format = json the pairs are parsed back and written as string fields.
 *
 * Every line is one write(2) of the whole line, on a descriptor opened with
 * O_APPEND: lines from the master and its workers never interleave, and the
 * loop waits at most one write. sl_log_reopen() (SIGUSR1) opens log_file
 * again by name, for logrotate.
 *
 * An event that can come in a storm (an upstream refusing, a flood of bad
 * requests) is logged with sl_log_warn_rl() and friends: at most one line
 * per second per call site; the lines left out are counted, and the count
 * is written on the next line of that site (repeated=N) or, when the storm
 * is over, on a line of its own (sl_log_rate_flush()). */
#ifndef SL_CORE_LOG_H
#define SL_CORE_LOG_H

#include <stddef.h>
#include <stdint.h>

enum sl_log_level {
    SL_LOG_ERROR = 0,
    SL_LOG_WARN  = 1,
    SL_LOG_INFO  = 2,
    SL_LOG_DEBUG = 3,
};

enum sl_log_format {
    SL_LOG_LOGFMT = 0,
    SL_LOG_JSON   = 1,
};

/* "logfmt", "json", NULL: the names of enum sl_log_format in order. */
extern const char *const sl_log_format_names[];

extern enum sl_log_level sl_log_level;
/* Added to every line after msg= when set, e.g. "worker=1" in a worker. */
extern char sl_log_tag[32];

/* Parses "error" | "warn" | "info" | "debug" into <out>; returns 0 or -1. */
int sl_log_level_parse(const char *s, enum sl_log_level *out);
const char *sl_log_level_name(enum sl_log_level l);

/* Sends lines to <path> (opened O_WRONLY|O_CREAT|O_APPEND, mode 0640) in
 * <format>; NULL or "" is stderr. A path that is already the one open is
 * not opened again (a reload that keeps log_file keeps its descriptor).
 * Returns 0, or a negative errno with the previous destination kept. */
int sl_log_open(const char *path, enum sl_log_format format);

/* Opens the current log file again by its name (after logrotate moved it)
 * and closes the old descriptor; says so in the new file ("log file
 * reopened"), or logs the error to the old one. Nothing to do on stderr.
 * Returns 0, or a negative errno with the old descriptor kept. */
int sl_log_reopen(void);

/* The path lines go to, or NULL for stderr. Borrowed. */
const char *sl_log_path(void);

/* The descriptor lines go to now (stderr's, or log_file's): for a writer
 * that dup()s it (core/lsink.h), never to be closed. */
int sl_log_fd(void);

/* Writes one line: ts, level, msg="<msg>", then the printf-formatted <fmt>
 * (which should be space-separated key=value pairs, or "" for none). */
void sl_log(enum sl_log_level l, const char *msg, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define sl_log_error(msg, ...) sl_log(SL_LOG_ERROR, msg, __VA_ARGS__)
#define sl_log_warn(msg, ...)  do { if (sl_log_level >= SL_LOG_WARN)  sl_log(SL_LOG_WARN,  msg, __VA_ARGS__); } while (0)
#define sl_log_info(msg, ...)  do { if (sl_log_level >= SL_LOG_INFO)  sl_log(SL_LOG_INFO,  msg, __VA_ARGS__); } while (0)
#define sl_log_debug(msg, ...) do { if (sl_log_level >= SL_LOG_DEBUG) sl_log(SL_LOG_DEBUG, msg, __VA_ARGS__); } while (0)

/* Formats one line into <out> (<cap> bytes, at least 64): <ts> as given,
 * <l>, <msg>, then <kv> (space-separated key=value pairs, values quoted as
 * sl_log_quote() does). In json, <kv> is parsed back: every pair becomes a
 * string field, escaped; a word without '=' is a field with an empty value.
 * A line that does not fit is cut at a field boundary and stays valid
 * (json: closed; a "truncated":"1" field says so). Ends with '\n'; returns
 * its length. Pure: for tests. */
size_t sl_log_format_line(char *out, size_t cap, enum sl_log_format f, const char *ts,
                          enum sl_log_level l, const char *msg, const char *kv);

/* Copies <s> into <out> (size <cap>) as a logfmt value: quoted and escaped
 * when it holds spaces, quotes, '=' or bytes outside printable ASCII.
 * Always NUL-terminates; truncates with "..." when it does not fit. */
const char *sl_log_quote(const char *s, size_t len, char *out, size_t cap);

/* ---- repeated events ---------------------------------------------------- */

#define SL_LOG_RATE_US 1000000u /* one line per this, per call site */

/* One call site's state (a static in sl_log_*_rl()); zero-initialised but
 * for <kind>. */
struct sl_log_rate {
    const char         *kind;      /* names the event on the count line */
    const char         *msg;       /* of the last line (a literal) */
    enum sl_log_level   level;     /* of the last line */
    uint64_t            last_us;   /* when a line of this site was written; 0 = never */
    uint64_t            left_out;  /* events since then not written */
    int                 listed;    /* in the list sl_log_rate_flush() walks */
    struct sl_log_rate *next;      /* that list */
};

/* Decides for one event at <now_us>: 1 = write it, with *<repeated> set to
 * the events left out before it (and the count restarted); 0 = leave it out
 * (counted). Pure. */
int sl_log_rate_take(struct sl_log_rate *r, uint64_t now_us, uint64_t *repeated);

/* Decides whether <r> owes a count line at <now_us>: events were left out
 * and none has been written for 2 windows (the storm is over), or <all>.
 * Returns the count (and restarts it), or 0. Pure. */
uint64_t sl_log_rate_due(struct sl_log_rate *r, uint64_t now_us, int all);

/* sl_log() through <r>: written with " kind=K repeated=N" appended when
 * lines were left out before it, or left out. */
void sl_log_rated(struct sl_log_rate *r, enum sl_log_level l, const char *msg, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Writes the count line (msg of the site, kind=K repeated=N) of every call
 * site whose storm is over, or of every site with a count when <all> (at
 * exit). Called about once a second (the server's sweep). */
void sl_log_rate_flush(int all);

/* Monotonic microseconds for the rate limits; tests replace it. */
extern uint64_t (*sl_log_clock)(void);

#define SL_LOG_RL_(lv, kind_, msg, ...) \
    do { \
        static struct sl_log_rate sl_rate_ = { .kind = kind_ }; \
        if (sl_log_level >= (lv)) \
            sl_log_rated(&sl_rate_, lv, msg, __VA_ARGS__); \
    } while (0)
#define sl_log_warn_rl(kind, msg, ...)  SL_LOG_RL_(SL_LOG_WARN, kind, msg, __VA_ARGS__)
#define sl_log_info_rl(kind, msg, ...)  SL_LOG_RL_(SL_LOG_INFO, kind, msg, __VA_ARGS__)
#define sl_log_debug_rl(kind, msg, ...) SL_LOG_RL_(SL_LOG_DEBUG, kind, msg, __VA_ARGS__)

#endif

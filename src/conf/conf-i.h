/* sluice — what the files of the configuration loader share (private to
 * src/conf/).
 *
 * The loader is one pass over the file cut along its concepts:
 *
 *   conf.c          entry points, errors in line order, freeing a configuration
 *   read.c          inih's view of each line mirrored; sections; the inih handler
 *   keys.c          the keyword table machinery: typed values, lists of words
 *   sec_global.c    [sluice] and [store]: their keys, setters and defaults
 *   sec_listener.c  [listener NAME]: its keys, setters and defaults
 *   sec_limit.c     [limit NAME]: its keys, setters and defaults
 *   sec_usage.c     [usage]: its keys, setters, defaults and checks
 *   check.c         after the last line: derived defaults, names resolved, rules
 *                   that span keys or sections
 *
 * dump.c prints a loaded configuration and needs none of this. Shared
 * internal functions carry the prefix sl_cf_ and are declared here with
 * their contracts, grouped by the file that defines them. */
#ifndef SL_CONF_CONF_I_H
#define SL_CONF_CONF_I_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "conf/conf-t.h"

#define MAX_FILE       (1024 * 1024) /* a configuration file larger than this is an error */
#define MAX_NAME       49            /* inih keeps 49 bytes of section and key names */
#define MAX_KEYWORDS   64            /* keys per section kind */
#define MAX_PASSWORD   4096          /* password_file larger than this is an error */
#define MAX_LIST       1024          /* entries of commands / match_identity */
#define MAX_COSTS      256           /* per-command costs of one limit */
#define MAX_COST       1000000000ULL /* one request never costs more than this */
#define MAX_AMOUNT     (1ULL << 40)  /* rate amounts, bursts: times 1e6 still fits 64 bits */
#define MAX_PERIOD     (365ULL * 86400 * 1000000) /* longest rate period: a year */
#define MAX_LEASE      1000000       /* lease = N tokens per round trip */
#define MAX_WORKERS    64            /* workers = N processes */
#define MAX_IDENTITY   128           /* one match_identity entry, bytes */
#define MAX_HEADER     64            /* header:NAME, bytes of NAME */
#define MAX_CMD        31            /* command name, bytes (struct sl_cost.cmd) */
#define MAX_PROXIES    256           /* trusted_proxies ranges of one listener */
#define MAX_PATH       128           /* a paths pattern, normalised: -T's lines must load again */

#define S_US           1000000ULL
#define HOUR_US        (3600ULL * S_US)
#define DAY_US         (86400ULL * S_US)

enum line_kind {
    LINE_BLANK,    /* empty or comment; also what inih gets for a bad line */
    LINE_SECTION,  /* [header], already handled by the reader */
    LINE_KEY,      /* key = value */
    LINE_CONT,     /* indented line after a key: inih calls it a continuation */
    LINE_BAD,      /* reported by the reader; inih sees a blank line */
};

enum sect_kind { SEC_SLUICE, SEC_STORE, SEC_LISTENER, SEC_LIMIT, SEC_USAGE };

enum sect_state {
    ST_NONE,       /* before the first header: keys are errors */
    ST_IGNORED,    /* after a bad header: keys are skipped without more errors */
    ST_OPEN,       /* keys go to ld->cur */
};

struct loader;
struct section;
struct keyword;

/* Applies <value> for <kw> to <sec>; reports its own errors. */
typedef void kw_setter(struct loader *ld, struct section *sec, const struct keyword *kw,
                       const char *value);

enum kw_type {
    KW_DURATION,   /* uint64_t microseconds, bounds min..max */
    KW_SIZE,       /* uint64_t bytes, bounds min..max */
    KW_U64,        /* uint64_t plain number, bounds min..max */
    KW_ENUM,       /* an enum (int-sized); names[] gives the values in order */
    KW_STRING,     /* char *, malloc'd; max = longest; empty value keeps the default */
    KW_ADDR,       /* struct sl_addr */
    KW_LIST,       /* char ** with an int count at count_off; max = longest entry */
    KW_FUNC,       /* set() does it all */
};

#define KW_MULTI 1u /* a list: indented continuation lines append to it */

/* One row of a section's keyword table. */
struct keyword {
    const char        *name;      /* key as written */
    enum kw_type       type;      /* how the value is parsed and stored */
    size_t             off;       /* field offset in the section's struct */
    uint64_t           min, max;  /* bounds (numbers) or longest length (text) */
    const char *const *names;     /* KW_ENUM: value names in enum order, NULL-ended */
    kw_setter         *set;       /* KW_FUNC: the setter */
    size_t             count_off; /* KW_LIST: offset of the int count */
    unsigned           flags;     /* KW_MULTI */
};

/* A section kind's keyword table (one per sec_*.c file). */
struct kw_table {
    const struct keyword *kw;      /* rows */
    size_t                n;       /* how many */
};

/* One section as it was read: where its keys were set, for later checks. */
struct section {
    enum sect_kind        kind;        /* which table applies */
    void                 *obj;         /* sl_conf, sl_store_conf, sl_listener_conf, sl_limit_conf */
    const struct keyword *kw;          /* its keyword table */
    size_t                n_kw;        /* rows in kw */
    int                   line;        /* line of the [header] */
    int                   key_line[MAX_KEYWORDS]; /* where each key was set; 0 = not set */
    int                   rate_sized;  /* limit: rate has a size unit ("10MiB/s") */
    int                   burst_sized; /* limit: burst has a size unit ("10kb") */
    int                   cost_default;/* limit: a default cost was given in `cost` */
    int                   commands_star; /* limit: `commands` listed "*" */
    int                   methods_star;  /* limit: `methods` listed "*" */
    int                   upgrades_none; /* listener: `upgrades` listed "none" */
};

/* One error, kept until the end so they can be written in line order. */
struct lerr {
    int    line;   /* 0 for the file as a whole */
    size_t seq;    /* order of discovery, to keep the sort stable */
    char  *msg;    /* malloc'd */
};

/* One load, from the first line read to the last error written. */
struct loader {
    struct sl_conf  *conf;        /* being built */
    const char      *name;        /* FILE in messages */
    const char      *dir;         /* relative password_file is read from here; NULL = cwd */
    const char      *text;        /* whole input */
    size_t           len;         /* bytes of text */
    size_t           pos;         /* next unread byte */
    int              line;        /* number of the line last given to inih */
    enum line_kind   kind;        /* what that line is */
    int              inih_prev;   /* mirror of inih: the last key line had a name, so an
                                     indented line is passed on as its continuation */
    struct section **secs;        /* every section opened, in file order */
    size_t           n_secs;
    size_t           cap_secs;
    struct section  *cur;         /* where keys go while state is ST_OPEN */
    enum sect_state  state;
    int              last_kw;     /* row in cur->kw of the last good key line; -1 = none */
    struct section  *sluice;      /* the [sluice] section, once seen */
    struct section  *store;       /* the [store] section, once seen */
    struct section  *usage;       /* the [usage] section, once seen */
    struct sl_listener_conf **ltail; /* where the next listener is linked */
    struct sl_limit_conf    **mtail; /* where the next limit is linked */
    struct lerr     *errs;        /* errors found so far */
    size_t           n_errs;
    size_t           cap_errs;
    int              oom;         /* an allocation failed somewhere */
};

/* Table rows: key, (type,) struct, field, then bounds or names or setter. */
#define NUM(k, t, st, f, lo, hi) \
    { .name = k, .type = t, .off = offsetof(st, f), .min = lo, .max = hi }
#define ENUM(k, st, f, n) \
    { .name = k, .type = KW_ENUM, .off = offsetof(st, f), .names = n }
#define STR(k, st, f, longest) \
    { .name = k, .type = KW_STRING, .off = offsetof(st, f), .max = longest }
#define ADDR(k, st, f) \
    { .name = k, .type = KW_ADDR, .off = offsetof(st, f) }
#define FUNC(k, fn, fl) \
    { .name = k, .type = KW_FUNC, .set = fn, .flags = fl }
#define LIST(k, st, f, cnt, longest) \
    { .name = k, .type = KW_LIST, .off = offsetof(st, f), .count_off = offsetof(st, cnt), \
      .max = longest, .flags = KW_MULTI }

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* Takes one word of a list value; returns nonzero to stop at it. */
typedef int word_fn(struct loader *ld, struct section *sec, const struct keyword *kw,
                    const char *word);

/* ---- conf.c ---------------------------------------------------------------- */

/* Records an error at <line> of the file (0: the file as a whole); they are
 * written sorted by line once the file is read. Sets ld->oom if it cannot. */
void sl_cf_err(struct loader *ld, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* strdup() that sets ld->oom when it fails. */
char *sl_cf_strdup(struct loader *ld, const char *s);

/* Reads the whole of <path> (at most <cap> bytes) into a malloc'd string
 * (the caller frees it), NUL-terminated, its length in <len>. Returns NULL
 * with an errno value in <error> (EFBIG: larger than <cap>). */
char *sl_cf_read_file(const char *path, size_t cap, size_t *len, int *error);

/* <value> as an absolute path, relative ones from the configuration file's
 * directory (sec_global.c). malloc'd, or NULL (out of memory). */
char *sl_cf_abs_path(const struct loader *ld, const char *value);

/* ---- tls.c ----------------------------------------------------------------- */

/* KW_FUNC setter of a TLS file key: stores sl_cf_abs_path(<value>) in the
 * char * at kw->off of the section's struct (empty: unset). */
void sl_cf_set_tls_path(struct loader *ld, struct section *sec, const struct keyword *kw,
                        const char *value);

/* Checks the TLS keys of the [store] and of every listener together, and
 * that the files load (a context is built and dropped), at load time. */
void sl_cf_check_tls(struct loader *ld);

/* KW_FUNC setter of tls_protocols / tls_ciphers: blank-separated words
 * (protocols checked now), at most kw->max bytes, in the char * at kw->off. */
void sl_cf_set_tls_words(struct loader *ld, struct section *sec, const struct keyword *kw,
                         const char *value);

#define TLSWORDS(k, st, f, longest) \
    { .name = k, .type = KW_FUNC, .set = sl_cf_set_tls_words, .off = offsetof(st, f), \
      .max = longest }
#define TLSPATH(k, st, f) \
    { .name = k, .type = KW_FUNC, .set = sl_cf_set_tls_path, .off = offsetof(st, f) }

/* ---- read.c ---------------------------------------------------------------- */

/* "[listener cache]" or "[store]" for <sec>, written into <buf> of <cap>
 * bytes, for messages. Returns <buf>. */
const char *sl_cf_title(const struct section *sec, char *buf, size_t cap);

/* Line where <key> was set in <sec>, 0 when it was not. */
int sl_cf_key_line(const struct section *sec, const char *key);

/* The [listener <name>] or [limit <name>] section read so far, or NULL. */
struct section *sl_cf_find_named(struct loader *ld, enum sect_kind kind, const char *name);

/* Reads every line of ld->text through inih into ld->conf; errors go to
 * ld's list, an allocation failure sets ld->oom. */
void sl_cf_read(struct loader *ld);

/* ---- keys.c ---------------------------------------------------------------- */

/* Applies <value> for the row <kw> of <sec>'s table, as its type says;
 * reports its own errors at ld->line. */
void sl_cf_set_value(struct loader *ld, struct section *sec, const struct keyword *kw,
                     const char *value);

/* KW_STRING's setter, for KW_FUNC setters that end as one. */
void sl_cf_set_string(struct loader *ld, struct section *sec, const struct keyword *kw,
                      const char *value);

/* Reports "<key>: expected <expected>, got '<value>'" at ld->line. */
void sl_cf_bad(struct loader *ld, const struct keyword *kw, const char *expected,
               const char *value);

/* Calls <fn> for each blank-separated word of <value>, stopping at the first
 * word it rejects (a word over 255 bytes is reported and stops too). */
void sl_cf_each_word(struct loader *ld, struct section *sec, const struct keyword *kw,
                     const char *value, word_fn *fn);

/* Appends a copy of <s> to the array <*v> of <*n> entries. Returns 0, or -1
 * with ld->oom set. */
int sl_cf_push(struct loader *ld, char ***v, int *n, const char *s);

/* Whether <s> is one of the <n> strings of <v>. */
int sl_cf_listed(char *const *v, int n, const char *s);

/* Whether <s> has only printable bytes and no blanks. */
int sl_cf_printable(const char *s);

/* Parses the plain decimal number <s>, at most <max>, into <out>. Returns 0
 * or -1 (<out> untouched). */
int sl_cf_parse_uint(const char *s, uint64_t max, uint64_t *out);

/* ---- sec_global.c, sec_listener.c, sec_limit.c ------------------------------ */

extern const struct kw_table sl_cf_sluice_keys;   /* [sluice] */
extern const struct kw_table sl_cf_store_keys;    /* [store] */
extern const struct kw_table sl_cf_listener_keys; /* [listener NAME] */
extern const struct kw_table sl_cf_limit_keys;    /* [limit NAME] */
extern const struct kw_table sl_cf_usage_keys;    /* [usage] (sec_usage.c) */

/* The [usage] defaults in <c> (sec_usage.c). */
void sl_cf_usage_defaults(struct sl_conf *c);

/* The [usage] rules that span sections, after the last line (sec_usage.c). */
void sl_cf_check_usage(struct loader *ld);

/* A new configuration for the file <file>, every [sluice] and [store]
 * default in place; NULL when out of memory. Free with sl_conf_free(). */
struct sl_conf *sl_cf_conf_new(const char *file);

/* A new listener (limit) named <name>, its header on <line>, defaults in
 * place, linked at the end of ld->conf's list (which owns it). NULL with
 * ld->oom set when out of memory. */
struct sl_listener_conf *sl_cf_new_listener(struct loader *ld, const char *name, int line);
struct sl_limit_conf *sl_cf_new_limit(struct loader *ld, const char *name, int line);

/* ---- check.c --------------------------------------------------------------- */

/* After the last line: fills derived defaults, resolves the names sections
 * give each other and checks the rules that span keys or sections. */
void sl_cf_finish(struct loader *ld);

#endif

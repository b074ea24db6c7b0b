/* sluice — loading and checking the configuration.
 *
 *   file text --> reader() --one line--> ini_parse_stream() --(name, value)--> handler()
 *                   |  counts lines, opens [sections],   (Debian's inih 55)      |  keyword
 *                   |  rejects long lines, syntax errors                         |  table ->
 *                   |  and knows continuation lines                              |  set_value()
 *                   +------- struct loader: current section, kind of line -------+
 *
 *   after the last line, finish() fills derived defaults, resolves names and
 *   checks the rules that span keys or sections; errors leave sorted by line.
 *
 * Debian's inih calls the handler without a line number, keeps only 49 bytes
 * of section and key names, and hands the reader a 200-byte buffer, so the
 * reader does the bookkeeping inih cannot: it mirrors inih's classification
 * of each line exactly (blank/comment, continuation, section, key) so the
 * handler knows what the line it is called for looked like. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <ini.h>

#include "conf/conf.h"
#include "conf/http.h"
#include "conf/names.h"
#include "conf/units.h"
#include "proto/resp_acl.h"

#define MAX_FILE       (1024 * 1024) /* a configuration file larger than this is an error */
#define MAX_NAME       49            /* inih keeps 49 bytes of section and key names */
#define MAX_KEYWORDS   32            /* keys per section kind */
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

_Static_assert(sizeof(enum sl_proto) == sizeof(int), "enum fields are written as int");
_Static_assert(sizeof(enum sl_metric) == sizeof(int), "enum fields are written as int");

enum line_kind {
    LINE_BLANK,    /* empty or comment; also what inih gets for a bad line */
    LINE_SECTION,  /* [header], already handled by the reader */
    LINE_KEY,      /* key = value */
    LINE_CONT,     /* indented line after a key: inih calls it a continuation */
    LINE_BAD,      /* reported by the reader; inih sees a blank line */
};

enum sect_kind { SEC_SLUICE, SEC_STORE, SEC_LISTENER, SEC_LIMIT };

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

/* One section as it was read: where its keys were set, for later checks. */
struct section {
    enum sect_kind        kind;        /* which table applies */
    void                 *obj;         /* sl_conf, sl_store_conf, sl_listener_conf, sl_limit_conf */
    const struct keyword *kw;          /* its keyword table */
    size_t                n_kw;        /* rows in kw */
    int                   line;        /* line of the [header] */
    int                   key_line[MAX_KEYWORDS]; /* where each key was set; 0 = not set */
    int                   rate_sized;  /* limit: rate has a size unit ("10MiB/s") */
    int                   cost_default;/* limit: a default cost was given in `cost` */
    int                   commands_star; /* limit: `commands` listed "*" */
    int                   methods_star;  /* limit: `methods` listed "*" */
};

/* One error, kept until the end so they can be written in line order. */
struct lerr {
    int    line;   /* 0 for the file as a whole */
    size_t seq;    /* order of discovery, to keep the sort stable */
    char  *msg;    /* malloc'd */
};

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
    struct sl_listener_conf **ltail; /* where the next listener is linked */
    struct sl_limit_conf    **mtail; /* where the next limit is linked */
    struct lerr     *errs;        /* errors found so far */
    size_t           n_errs;
    size_t           cap_errs;
    int              oom;         /* an allocation failed somewhere */
};

static void err(struct loader *ld, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void err(struct loader *ld, int line, const char *fmt, ...)
{
    char *msg = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&msg, fmt, ap);
    va_end(ap);
    if (n < 0) {
        ld->oom = 1;
        return;
    }
    if (ld->n_errs == ld->cap_errs) {
        size_t cap = ld->cap_errs ? ld->cap_errs * 2 : 16;
        struct lerr *e = realloc(ld->errs, cap * sizeof(*e));
        if (e == NULL) {
            free(msg);
            ld->oom = 1;
            return;
        }
        ld->errs = e;
        ld->cap_errs = cap;
    }
    ld->errs[ld->n_errs] = (struct lerr){ line, ld->n_errs, msg };
    ld->n_errs++;
}

static char *xstrdup(struct loader *ld, const char *s)
{
    char *d = strdup(s);
    if (d == NULL)
        ld->oom = 1;
    return d;
}

static int has_blank(const char *s)
{
    for (; *s; s++)
        if (isspace((unsigned char)*s))
            return 1;
    return 0;
}

static int all_printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || (unsigned char)*s == 0x7f)
            return 0;
    return 1;
}

/* ---- keyword tables ------------------------------------------------------ */

/* Indexed by the enums of conf-t.h; declared in names.h for dump.c too. */
const char *const sl_conf_proto_names[]  = { "resp", "http", "tcp", NULL };
const char *const sl_conf_metric_names[] = { "requests", "bytes_in", "bytes_out", "connections",
                                             NULL };
const char *const sl_conf_scope_names[]  = { "identity", "connection", "global", NULL };
const char *const sl_conf_algo_names[]   = { "token_bucket", "gcra", "sliding_window",
                                             "sliding_log", "fixed_window", NULL };
const char *const sl_conf_action_names[] = { "reject", "delay", "shadow", NULL };
const char *const sl_conf_fail_names[]   = { "local", "open", "closed", NULL };
const char *const sl_conf_id_names[]     = { "resp_user", "client_name", "key_prefix",
                                             "client_ip", "header:NAME", "none", NULL };
const char *const sl_conf_rlh_names[]    = { "draft", "legacy", "both", "none", NULL };
const char *const sl_conf_onoff_names[]  = { "off", "on", NULL };

static kw_setter set_admin, set_log_level, set_workers, set_limit_listener, set_url,
    set_password_file, set_lease, set_identity, set_separator, set_rate, set_commands, set_cost,
    set_trusted_proxies, set_methods, set_paths;

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

static const struct keyword sluice_kw[] = {
    FUNC("admin", set_admin, 0),
    FUNC("log_level", set_log_level, 0),
    NUM("shutdown_grace", KW_DURATION, struct sl_conf, shutdown_grace_us, 0, DAY_US),
    FUNC("workers", set_workers, 0),
};

static const struct keyword store_kw[] = {
    FUNC("url", set_url, 0),
    FUNC("password_file", set_password_file, 0),
    STR("key_prefix", struct sl_store_conf, key_prefix, 64),
    NUM("connect_timeout", KW_DURATION, struct sl_store_conf, connect_timeout_us, 1000, HOUR_US),
    NUM("timeout", KW_DURATION, struct sl_store_conf, timeout_us, 1, HOUR_US),
    ENUM("on_failure", struct sl_store_conf, on_failure, sl_conf_fail_names),
    FUNC("lease", set_lease, 0),
    NUM("connection_lease", KW_DURATION, struct sl_store_conf, connection_lease_us, 1000000, DAY_US),
    NUM("max_identities", KW_U64, struct sl_store_conf, max_identities, 1, 100000000),
};

static const struct keyword listener_kw[] = {
    ADDR("listen", struct sl_listener_conf, listen),
    ENUM("protocol", struct sl_listener_conf, protocol, sl_conf_proto_names),
    ADDR("upstream", struct sl_listener_conf, upstream),
    FUNC("identity", set_identity, KW_MULTI),
    FUNC("key_prefix_separator", set_separator, 0),
    NUM("max_connections", KW_U64, struct sl_listener_conf, max_connections, 1, UINT32_MAX),
    NUM("idle_timeout", KW_DURATION, struct sl_listener_conf, idle_timeout_us, 0, 365 * DAY_US),
    NUM("connect_timeout", KW_DURATION, struct sl_listener_conf, connect_timeout_us, 1000, HOUR_US),
    NUM("header_timeout", KW_DURATION, struct sl_listener_conf, header_timeout_us, 0, HOUR_US),
    NUM("max_replies_owed", KW_U64, struct sl_listener_conf, max_replies_owed, 2, 1u << 20),
    NUM("max_request", KW_SIZE, struct sl_listener_conf, max_request, 1, 1ULL << 40),
    /* protocol = http only (check_listener) */
    FUNC("trusted_proxies", set_trusted_proxies, KW_MULTI),
    NUM("upstream_timeout", KW_DURATION, struct sl_listener_conf, upstream_timeout_us, 0, HOUR_US),
    ENUM("rate_limit_headers", struct sl_listener_conf, rate_limit_headers, sl_conf_rlh_names),
    ENUM("forwarded_headers", struct sl_listener_conf, forwarded_headers, sl_conf_onoff_names),
    NUM("max_request_line", KW_SIZE, struct sl_listener_conf, max_request_line, 64, 1u << 20),
    NUM("max_header_line", KW_SIZE, struct sl_listener_conf, max_header_line, 64, 1u << 20),
    NUM("max_headers", KW_U64, struct sl_listener_conf, max_headers, 1, 10000),
    NUM("max_header_size", KW_SIZE, struct sl_listener_conf, max_header_size, 256, 16u << 20),
};

/* The keys above that only an http listener takes. */
static const char *const http_only_keys[] = { "trusted_proxies", "upstream_timeout",
    "rate_limit_headers", "forwarded_headers", "max_request_line", "max_header_line",
    "max_headers", "max_header_size" };

static const struct keyword limit_kw[] = {
    FUNC("listener", set_limit_listener, 0),
    ENUM("metric", struct sl_limit_conf, metric, sl_conf_metric_names),
    FUNC("rate", set_rate, 0),
    NUM("burst", KW_SIZE, struct sl_limit_conf, burst, 1, MAX_AMOUNT), /* 64KiB for bytes */
    NUM("max", KW_U64, struct sl_limit_conf, max, 1, UINT32_MAX),
    ENUM("scope", struct sl_limit_conf, scope, sl_conf_scope_names),
    ENUM("algorithm", struct sl_limit_conf, algorithm, sl_conf_algo_names),
    ENUM("action", struct sl_limit_conf, action, sl_conf_action_names),
    NUM("max_delay", KW_DURATION, struct sl_limit_conf, max_delay_us, 0, HOUR_US),
    FUNC("commands", set_commands, KW_MULTI),
    FUNC("cost", set_cost, KW_MULTI),
    FUNC("methods", set_methods, KW_MULTI),
    FUNC("paths", set_paths, KW_MULTI),
    /* the source's tag on top of a value of MAX_IDENTITY: -T writes bare
     * values with it, and that line must load again */
    LIST("match_identity", struct sl_limit_conf, match_identity, n_match_identity, MAX_IDENTITY + 8),
    STR("replaces", struct sl_limit_conf, replaces, MAX_NAME),
};

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
_Static_assert(N_OF(limit_kw) <= MAX_KEYWORDS, "section.key_line is too small");
_Static_assert(N_OF(listener_kw) <= MAX_KEYWORDS, "section.key_line is too small");

static const char *const kind_names[] = { "sluice", "store", "listener", "limit" };

/* "[listener cache]" or "[store]", for messages. */
static const char *title(const struct section *sec, char *buf, size_t cap)
{
    const char *name = NULL;
    if (sec->kind == SEC_LISTENER)
        name = ((struct sl_listener_conf *)sec->obj)->name;
    else if (sec->kind == SEC_LIMIT)
        name = ((struct sl_limit_conf *)sec->obj)->name;
    if (name)
        snprintf(buf, cap, "[%s %s]", kind_names[sec->kind], name);
    else
        snprintf(buf, cap, "[%s]", kind_names[sec->kind]);
    return buf;
}

static int kw_index(const struct section *sec, const char *name)
{
    for (size_t i = 0; i < sec->n_kw; i++)
        if (strcmp(sec->kw[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* Line where <key> was set in <sec>, 0 when it was not. */
static int key_line(const struct section *sec, const char *key)
{
    int i = kw_index(sec, key);
    return i < 0 ? 0 : sec->key_line[i];
}

/* ---- value setters -------------------------------------------------------- */

static void bad(struct loader *ld, const struct keyword *kw, const char *expected,
                const char *value)
{
    err(ld, ld->line, "%s: expected %s, got '%s'", kw->name, expected, value);
}

static void set_number(struct loader *ld, struct section *sec, const struct keyword *kw,
                       const char *value)
{
    static const char *const expected[] = {
        [KW_DURATION] = "a duration like 250ms, 2s, 5m",
        [KW_SIZE]     = "a size like 512, 64kb, 10MiB",
        [KW_U64]      = "a whole number",
    };
    uint64_t v = 0;
    int rc;
    if (kw->type == KW_DURATION)
        rc = sl_parse_duration(value, &v);
    else if (kw->type == KW_SIZE)
        rc = sl_parse_size(value, &v);
    else {
        size_t n = strspn(value, "0123456789");
        rc = (n == 0 || value[n] != '\0' || sl_parse_size(value, &v) != 0) ? -1 : 0;
    }
    if (rc != 0) {
        bad(ld, kw, expected[kw->type], value);
        return;
    }
    if (v < kw->min || v > kw->max) {
        char lo[32], hi[32];
        if (kw->type == KW_DURATION) {
            sl_fmt_duration(kw->min, lo, sizeof(lo));
            sl_fmt_duration(kw->max, hi, sizeof(hi));
        } else if (kw->type == KW_SIZE) {
            sl_fmt_size(kw->min, lo, sizeof(lo));
            sl_fmt_size(kw->max, hi, sizeof(hi));
        } else {
            snprintf(lo, sizeof(lo), "%llu", (unsigned long long)kw->min);
            snprintf(hi, sizeof(hi), "%llu", (unsigned long long)kw->max);
        }
        if (v < kw->min)
            err(ld, ld->line, "%s: must be at least %s, got '%s'", kw->name, lo, value);
        else
            err(ld, ld->line, "%s: must be at most %s, got '%s'", kw->name, hi, value);
        return;
    }
    memcpy((char *)sec->obj + kw->off, &v, sizeof(v));
}

static void set_enum(struct loader *ld, struct section *sec, const struct keyword *kw,
                     const char *value)
{
    for (int i = 0; kw->names[i]; i++) {
        if (strcmp(kw->names[i], value) == 0) {
            memcpy((char *)sec->obj + kw->off, &i, sizeof(i));
            return;
        }
    }
    char list[160] = "";
    size_t o = 0;
    for (int i = 0; kw->names[i] && o < sizeof(list); i++)
        o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%s", i ? " | " : "", kw->names[i]);
    char what[192];
    snprintf(what, sizeof(what), "one of %s", list);
    bad(ld, kw, what, value);
}

static void set_string(struct loader *ld, struct section *sec, const struct keyword *kw,
                       const char *value)
{
    /* An empty value keeps the default: the documented `replaces =` form. */
    if (value[0] == '\0')
        return;
    if (!all_printable(value) || strlen(value) > kw->max) {
        char what[64];
        snprintf(what, sizeof(what), "one word of at most %llu bytes", (unsigned long long)kw->max);
        bad(ld, kw, what, value);
        return;
    }
    char **field = (char **)((char *)sec->obj + kw->off);
    char *copy = xstrdup(ld, value);
    if (copy == NULL)
        return;
    free(*field);
    *field = copy;
}

/* A limit's listener is required: unlike other text keys, an empty value
 * does not keep a default. */
static void set_limit_listener(struct loader *ld, struct section *sec, const struct keyword *kw,
                               const char *value)
{
    if (value[0] == '\0') {
        bad(ld, kw, "a listener's name or *", value);
        return;
    }
    const struct keyword as_string = { .name = kw->name, .type = KW_STRING,
                                       .off = offsetof(struct sl_limit_conf, listener),
                                       .max = MAX_NAME };
    set_string(ld, sec, &as_string, value);
}

static void set_addr(struct loader *ld, struct section *sec, const struct keyword *kw,
                     const char *value)
{
    if (sl_parse_addr(value, (struct sl_addr *)((char *)sec->obj + kw->off)) != 0)
        bad(ld, kw, "an address like 127.0.0.1:6380, [::1]:6380 or *:6380", value);
}

/* Appends a copy of <s> to the array <*v> of <*n> entries. */
static int push(struct loader *ld, char ***v, int *n, const char *s)
{
    char **nv = realloc(*v, (size_t)(*n + 1) * sizeof(**v));
    if (nv == NULL)
        goto fail;
    *v = nv;
    if ((nv[*n] = strdup(s)) == NULL)
        goto fail;
    (*n)++;
    return 0;
fail:
    ld->oom = 1;
    return -1;
}

static int listed(char *const *v, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (strcmp(v[i], s) == 0)
            return 1;
    return 0;
}

/* Takes one word of a list value; returns nonzero to stop at it. */
typedef int word_fn(struct loader *ld, struct section *sec, const struct keyword *kw,
                    const char *word);

/* Calls <fn> for each blank-separated word of <value>, stopping at the first
 * word it rejects. */
static void each_word(struct loader *ld, struct section *sec, const struct keyword *kw,
                      const char *value, word_fn *fn)
{
    char word[256];
    const char *p = value;
    for (;;) {
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '\0')
            return;
        size_t n = 0;
        while (p[n] && !isspace((unsigned char)p[n]))
            n++;
        if (n >= sizeof(word)) {
            err(ld, ld->line, "%s: entry too long (%zu bytes): '%.20s...'", kw->name, n, p);
            return;
        }
        memcpy(word, p, n);
        word[n] = '\0';
        p += n;
        if (fn(ld, sec, kw, word) != 0)
            return;
    }
}

static int list_word(struct loader *ld, struct section *sec, const struct keyword *kw,
                     const char *w)
{
    char ***v = (char ***)((char *)sec->obj + kw->off);
    int *n = (int *)((char *)sec->obj + kw->count_off);
    if (strlen(w) > kw->max) {
        err(ld, ld->line, "%s: '%s' is longer than %llu bytes", kw->name, w,
            (unsigned long long)kw->max);
        return -1;
    }
    /* On an indented line, '[' would be read as an indented section header
     * and '#' or ';' as a comment; refusing them everywhere keeps the -T
     * output, which wraps long lists, reloadable. */
    if (strchr("[#;", w[0]) != NULL) {
        err(ld, ld->line, "%s: an entry cannot start with '%c', got '%s'", kw->name, w[0], w);
        return -1;
    }
    if (listed(*v, *n, w))
        return 0;
    if (*n >= MAX_LIST) {
        err(ld, ld->line, "%s: more than %d entries", kw->name, MAX_LIST);
        return -1;
    }
    return push(ld, v, n, w);
}

static void set_list(struct loader *ld, struct section *sec, const struct keyword *kw,
                     const char *value)
{
    each_word(ld, sec, kw, value, list_word);
}

static void set_value(struct loader *ld, struct section *sec, const struct keyword *kw,
                      const char *value)
{
    switch (kw->type) {
    case KW_DURATION:
    case KW_SIZE:
    case KW_U64:    set_number(ld, sec, kw, value); break;
    case KW_ENUM:   set_enum(ld, sec, kw, value); break;
    case KW_STRING: set_string(ld, sec, kw, value); break;
    case KW_ADDR:   set_addr(ld, sec, kw, value); break;
    case KW_LIST:   set_list(ld, sec, kw, value); break;
    case KW_FUNC:   kw->set(ld, sec, kw, value); break;
    }
}

static void set_admin(struct loader *ld, struct section *sec, const struct keyword *kw,
                      const char *value)
{
    struct sl_conf *c = sec->obj;
    if (value[0] == '\0' || strcmp(value, "off") == 0) {
        c->has_admin = 0;
        return;
    }
    if (sl_parse_addr(value, &c->admin) != 0) {
        bad(ld, kw, "an address like 127.0.0.1:9121, or nothing for off", value);
        return;
    }
    c->has_admin = 1;
}

static void set_log_level(struct loader *ld, struct section *sec, const struct keyword *kw,
                          const char *value)
{
    struct sl_conf *c = sec->obj;
    if (sl_log_level_parse(value, &c->log_level) != 0)
        bad(ld, kw, "one of error | warn | info | debug", value);
}

static int parse_uint(const char *s, uint64_t max, uint64_t *out)
{
    size_t n = strspn(s, "0123456789");
    uint64_t v;
    /* sl_parse_size() on plain digits is an overflow-checked strtoull. */
    if (n == 0 || s[n] != '\0' || sl_parse_size(s, &v) != 0 || v > max)
        return -1;
    *out = v;
    return 0;
}

/* Copies <v> to <out> (<cap> bytes) with what may be secret masked: the
 * password of a userinfo ("user:***@") and everything from a query string or
 * fragment on ("?***"), so that an error echoing a bad url cannot carry a
 * password into the log (a reload logs every error). Returns <out>. */
static const char *redact_url(const char *v, char *out, size_t cap)
{
    const char *scheme = strstr(v, "://");
    size_t auth = scheme != NULL ? (size_t)(scheme - v) + 3 : 0;
    size_t auth_end = auth + strcspn(v + auth, "/?#");
    size_t tail = strcspn(v, "?#"); /* a query or fragment starts here */
    const char *at = NULL;
    for (size_t i = auth; i < auth_end; i++)
        if (v[i] == '@')
            at = v + i;
    const char *colon = at != NULL ? memchr(v + auth, ':', (size_t)(at - (v + auth))) : NULL;
    if (colon != NULL && (size_t)(colon - v) < tail)
        snprintf(out, cap, "%.*s:***%.*s%s", (int)(colon - v), v,
                 (int)(tail > (size_t)(at - v) ? tail - (size_t)(at - v) : 0), at,
                 v[tail] != '\0' ? "?***" : "");
    else
        snprintf(out, cap, "%.*s%s", (int)tail, v, v[tail] != '\0' ? "?***" : "");
    return out;
}

/* local | redis://[user@]host[:port][/db] */
static void set_url(struct loader *ld, struct section *sec, const struct keyword *kw,
                    const char *value)
{
    struct sl_store_conf *st = sec->obj;
    static const char expected[] = "local or redis://[user@]host[:port][/db] with a numeric "
                                   "host or localhost";
    char *user = NULL;
    if (strcmp(value, "local") == 0) {
        st->kind = SL_STORE_LOCAL;
        goto done;
    }
    char shown[256];
    if (strncmp(value, "redis://", 8) != 0) {
        bad(ld, kw, expected, redact_url(value, shown, sizeof(shown)));
        return;
    }
    const char *p = value + 8;
    const char *at = strchr(p, '@');
    if (at != NULL) {
        size_t ulen = (size_t)(at - p);
        if (memchr(p, ':', ulen) != NULL) {
            err(ld, ld->line, "url: no password in the url; put it in password_file");
            return;
        }
        if (ulen == 0 || ulen > 255) {
            bad(ld, kw, expected, redact_url(value, shown, sizeof(shown)));
            return;
        }
        if ((user = strndup(p, ulen)) == NULL) {
            ld->oom = 1;
            return;
        }
        p = at + 1;
    }
    const char *slash = strchr(p, '/');
    size_t hlen = slash ? (size_t)(slash - p) : strlen(p);
    uint64_t db = 0;
    if (slash != NULL && parse_uint(slash + 1, 2147483647, &db) != 0)
        goto bad_url;
    char hostport[96];
    if (hlen == 0 || hlen + 6 >= sizeof(hostport))
        goto bad_url;
    memcpy(hostport, p, hlen);
    hostport[hlen] = '\0';
    /* No port: Redis's. "[::1]" has colons but no port; "[::1]:7000" has one. */
    const char *close = hostport[0] == '[' ? strchr(hostport, ']') : NULL;
    int has_port = close ? close[1] == ':' : strchr(hostport, ':') != NULL;
    if (!has_port)
        strcat(hostport, ":6379");
    struct sl_addr addr;
    if (sl_parse_addr(hostport, &addr) != 0)
        goto bad_url;
    st->kind = SL_STORE_REDIS;
    st->addr = addr;
    st->db = (int)db;
done:
    free(st->user);
    st->user = user;
    char *copy = xstrdup(ld, value);
    if (copy != NULL) {
        free(st->url);
        st->url = copy;
    }
    return;
bad_url:
    free(user);
    bad(ld, kw, expected, redact_url(value, shown, sizeof(shown)));
}

/* Reads the whole of <path> (at most <cap> bytes) into a malloc'd string. */
static char *read_file(const char *path, size_t cap, size_t *len, int *error)
{
    char *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        goto fail;
    if ((buf = malloc(cap + 2)) == NULL) {
        errno = ENOMEM;
        goto fail;
    }
    size_t n = fread(buf, 1, cap + 1, f);
    if (ferror(f))
        goto fail;
    if (n > cap) {
        errno = EFBIG;
        goto fail;
    }
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
fail:
    *error = errno ? errno : EIO;
    free(buf);
    if (f != NULL)
        fclose(f);
    return NULL;
}

static void set_password_file(struct loader *ld, struct section *sec, const struct keyword *kw,
                              const char *value)
{
    struct sl_store_conf *st = sec->obj;
    char *path = NULL, *pw = NULL;
    size_t len = 0;
    int error = 0;
    (void)kw;
    if (value[0] == '\0')
        return;
    /* Relative to the configuration file, so `sluice -c /etc/sluice/sluice.ini`
     * finds its secret whatever the working directory. The path kept (and
     * printed by -T) is absolute, so a printed configuration loads from any
     * directory; symbolic links are left as they are (a mounted secret is
     * often one that is swapped on rotation). */
    if (value[0] != '/') {
        const char *dir = ld->dir; /* NULL: the working directory */
        char cwd[4096];
        if ((dir == NULL || dir[0] != '/') && getcwd(cwd, sizeof(cwd)) != NULL) {
            if (asprintf(&path, "%s%s%s/%s", cwd, dir != NULL ? "/" : "", dir != NULL ? dir : "",
                         value) < 0)
                path = NULL;
        } else if (asprintf(&path, "%s%s%s", dir != NULL ? dir : "",
                            dir != NULL && strcmp(dir, "/") != 0 ? "/" : "", value) < 0) {
            path = NULL;
        }
        if (path == NULL)
            goto oom;
    } else if ((path = strdup(value)) == NULL) {
        goto oom;
    }
    pw = read_file(path, MAX_PASSWORD, &len, &error);
    if (pw == NULL) {
        if (error == EFBIG)
            err(ld, ld->line, "password_file: '%s' is larger than %d bytes", path, MAX_PASSWORD);
        else
            err(ld, ld->line, "password_file: cannot read '%s': %s", path, strerror(error));
        goto out;
    }
    /* One trailing newline is what `echo secret > file` leaves. */
    if (len > 0 && pw[len - 1] == '\n')
        pw[--len] = '\0';
    if (len > 0 && pw[len - 1] == '\r')
        pw[--len] = '\0';
    if (len == 0) {
        err(ld, ld->line, "password_file: '%s' is empty", path);
        goto out;
    }
    if (strlen(pw) != len) {
        err(ld, ld->line, "password_file: '%s' holds a NUL byte", path);
        goto out;
    }
    char *file = xstrdup(ld, path);
    if (file == NULL)
        goto out;
    free(st->password_file);
    st->password_file = file;
    st->password_file_line = ld->line;
    if (st->password != NULL)
        explicit_bzero(st->password, strlen(st->password));
    free(st->password);
    st->password = pw;
    pw = NULL;
    goto out;
oom:
    ld->oom = 1;
out:
    if (pw != NULL)
        explicit_bzero(pw, len);
    free(pw);
    free(path);
}

static void set_lease(struct loader *ld, struct section *sec, const struct keyword *kw,
                      const char *value)
{
    struct sl_store_conf *st = sec->obj;
    uint64_t n;
    if (strcmp(value, "off") == 0)
        st->lease = 0;
    else if (strcmp(value, "auto") == 0)
        st->lease = -1;
    else if (parse_uint(value, MAX_LEASE, &n) == 0 && n > 0)
        st->lease = (int64_t)n;
    else
        bad(ld, kw, "off, auto or a number of tokens from 1 to 1000000", value);
}

/* workers = N | auto: auto is one per online CPU, at most MAX_WORKERS. */
static void set_workers(struct loader *ld, struct section *sec, const struct keyword *kw,
                        const char *value)
{
    struct sl_conf *c = sec->obj;
    uint64_t n;
    c->workers_auto = 0;
    if (strcmp(value, "auto") == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        c->workers = cpus < 1 ? 1 : cpus > MAX_WORKERS ? MAX_WORKERS : (int)cpus;
        c->workers_auto = 1;
    } else if (parse_uint(value, MAX_WORKERS, &n) == 0 && n > 0) {
        c->workers = (int)n;
    } else {
        bad(ld, kw, "auto or a number of processes from 1 to 64", value);
    }
}

/* An HTTP header name: an RFC 9110 token. */
static int is_token(const char *s)
{
    if (*s == '\0')
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && strchr("!#$%&'*+-.^_`|~", *s) == NULL)
            return 0;
    return 1;
}

static int identity_word(struct loader *ld, struct section *sec, const struct keyword *kw,
                         const char *w)
{
    struct sl_listener_conf *l = sec->obj;
    int src = -1;
    const char *header = NULL;
    (void)kw;
    if (strncmp(w, "header:", 7) == 0) {
        header = w + 7;
        if (!is_token(header) || strlen(header) > MAX_HEADER) {
            err(ld, ld->line, "identity: expected header:NAME with an HTTP header name, "
                              "got '%s'", w);
            return -1;
        }
        src = SL_ID_HEADER;
    } else {
        for (int i = 0; sl_conf_id_names[i]; i++)
            if (i != SL_ID_HEADER && strcmp(sl_conf_id_names[i], w) == 0)
                src = i;
    }
    if (src < 0) {
        err(ld, ld->line, "identity: expected resp_user, client_name, key_prefix, client_ip, "
                          "header:NAME or none, got '%s'", w);
        return -1;
    }
    for (int i = 0; i < l->n_identity; i++) {
        if (l->identity[i] == SL_ID_NONE) {
            err(ld, ld->line, "identity: nothing can follow 'none', got '%s'", w);
            return -1;
        }
        if ((int)l->identity[i] == src &&
            (src != SL_ID_HEADER || strcasecmp(l->identity_header[i], header) == 0)) {
            err(ld, ld->line, "identity: '%s' is listed twice", w);
            return -1;
        }
    }
    if (l->n_identity == SL_CONF_MAX_IDENTITY) {
        err(ld, ld->line, "identity: more than %d sources", SL_CONF_MAX_IDENTITY);
        return -1;
    }
    char *h = NULL;
    if (header != NULL && (h = xstrdup(ld, header)) == NULL)
        return -1;
    l->identity[l->n_identity] = (enum sl_id_source)src;
    l->identity_header[l->n_identity] = h;
    l->n_identity++;
    return 0;
}

static void set_identity(struct loader *ld, struct section *sec, const struct keyword *kw,
                         const char *value)
{
    each_word(ld, sec, kw, value, identity_word);
}

static void set_separator(struct loader *ld, struct section *sec, const struct keyword *kw,
                          const char *value)
{
    struct sl_listener_conf *l = sec->obj;
    size_t n = strlen(value);
    if (n == 0 || n >= sizeof(l->key_prefix_separator) || !all_printable(value)) {
        bad(ld, kw, "1 to 7 characters without blanks", value);
        return;
    }
    memcpy(l->key_prefix_separator, value, n + 1);
}

static void set_rate(struct loader *ld, struct section *sec, const struct keyword *kw,
                     const char *value)
{
    struct sl_limit_conf *m = sec->obj;
    struct sl_rate r;
    /* Parse with size units allowed; whether they are allowed depends on
     * `metric`, which may come later in the section: finish() checks. */
    if (sl_parse_rate(value, 1, &r) != 0) {
        bad(ld, kw, "a rate like 500/s, 100/m or 10MiB/s", value);
        return;
    }
    if (r.amount > MAX_AMOUNT) {
        err(ld, ld->line, "rate: at most %llu per period, got '%s'",
            (unsigned long long)MAX_AMOUNT, value);
        return;
    }
    if (r.period_us > MAX_PERIOD) {
        err(ld, ld->line, "rate: the period must be at most 365d, got '%s'", value);
        return;
    }
    struct sl_rate plain;
    sec->rate_sized = sl_parse_rate(value, 0, &plain) != 0;
    m->rate = r;
}

static int command_ok(const char *w)
{
    for (; *w; w++)
        if (!isalnum((unsigned char)*w) && strchr("_-|.:", *w) == NULL)
            return 0;
    return 1;
}

static int command_word(struct loader *ld, struct section *sec, const struct keyword *kw,
                        const char *w)
{
    struct sl_limit_conf *m = sec->obj;
    char up[MAX_CMD + 1];
    (void)kw;
    if (strcmp(w, "*") == 0) {
        sec->commands_star = 1;
        return 0;
    }
    if (w[0] == '@') {
        /* A Redis ACL category, kept as Redis writes it ("@write"). */
        int bit = sl_resp_acl_category(w + 1, strlen(w + 1));
        if (bit < 0) {
            char all[400];
            size_t o = 0;
            for (int i = 0; i < SL_RESP_ACL_CATEGORIES && o < sizeof(all); i++)
                o += (size_t)snprintf(all + o, sizeof(all) - o, " @%s", sl_resp_acl_category_name(i));
            err(ld, ld->line, "commands: unknown category '%s'%s (Redis 7's are:%s)", w,
                strcasecmp(w, "@all") == 0 ? "; '*' means every command" : "", all);
            return -1;
        }
        char cat[MAX_CMD + 2];
        snprintf(cat, sizeof(cat), "@%s", sl_resp_acl_category_name(bit));
        if (listed(m->commands, m->n_commands, cat))
            return 0;
        if (m->n_commands >= MAX_LIST) {
            err(ld, ld->line, "commands: more than %d entries", MAX_LIST);
            return -1;
        }
        return push(ld, &m->commands, &m->n_commands, cat);
    }
    if (strlen(w) > MAX_CMD || !command_ok(w)) {
        err(ld, ld->line, "commands: expected command names like GET SET, or *, got '%s'", w);
        return -1;
    }
    size_t i = 0;
    for (; w[i]; i++)
        up[i] = (char)toupper((unsigned char)w[i]);
    up[i] = '\0';
    if (listed(m->commands, m->n_commands, up))
        return 0;
    if (m->n_commands >= MAX_LIST) {
        err(ld, ld->line, "commands: more than %d entries", MAX_LIST);
        return -1;
    }
    return push(ld, &m->commands, &m->n_commands, up);
}

static void set_commands(struct loader *ld, struct section *sec, const struct keyword *kw,
                         const char *value)
{
    each_word(ld, sec, kw, value, command_word);
}

/* One of `cost = 5` or `cost = KEYS=100 SCAN=10 *=1`. */
static int cost_word(struct loader *ld, struct section *sec, const struct keyword *kw,
                     const char *w)
{
    struct sl_limit_conf *m = sec->obj;
    const char *eq = strchr(w, '=');
    const char *num = eq ? eq + 1 : w;
    size_t clen = eq ? (size_t)(eq - w) : 0;
    uint64_t v;
    (void)kw;
    if (parse_uint(num, MAX_COST, &v) != 0 || (eq != NULL && clen == 0)) {
        err(ld, ld->line, "cost: expected a number or COMMAND=N entries like KEYS=100 *=1, "
                          "got '%s'", w);
        return -1;
    }
    if (eq == NULL || (clen == 1 && w[0] == '*')) {
        if (sec->cost_default) {
            err(ld, ld->line, "cost: the default cost is given twice ('%s')", w);
            return -1;
        }
        sec->cost_default = 1;
        m->default_cost = v;
        return 0;
    }
    char up[MAX_CMD + 1];
    if (clen > MAX_CMD)
        goto bad_name;
    for (size_t i = 0; i < clen; i++)
        up[i] = (char)toupper((unsigned char)w[i]);
    up[clen] = '\0';
    if (!command_ok(up))
        goto bad_name;
    for (int i = 0; i < m->n_costs; i++) {
        if (strcasecmp(m->costs[i].cmd, up) == 0) {
            err(ld, ld->line, "cost: %s is given twice", up);
            return -1;
        }
    }
    if (m->n_costs >= MAX_COSTS) {
        err(ld, ld->line, "cost: more than %d entries", MAX_COSTS);
        return -1;
    }
    struct sl_cost *nc = realloc(m->costs, (size_t)(m->n_costs + 1) * sizeof(*nc));
    if (nc == NULL) {
        ld->oom = 1;
        return -1;
    }
    m->costs = nc;
    memset(&nc[m->n_costs], 0, sizeof(nc[0]));
    /* As written: on an http listener it is a method, which is
     * case-sensitive; check_limit() upper-cases command names. */
    memcpy(nc[m->n_costs].cmd, w, clen);
    nc[m->n_costs].cost = v;
    m->n_costs++;
    return 0;
bad_name:
    err(ld, ld->line, "cost: '%.*s' is not a command name", (int)clen, w);
    return -1;
}

static void set_cost(struct loader *ld, struct section *sec, const struct keyword *kw,
                     const char *value)
{
    each_word(ld, sec, kw, value, cost_word);
}

/* trusted_proxies = 10.0.0.0/8 fd00::/8 192.0.2.7: kept parsed (conf/http.h). */
static int trusted_word(struct loader *ld, struct section *sec, const struct keyword *kw,
                        const char *w)
{
    struct sl_listener_conf *l = sec->obj;
    struct sl_cidr c;
    char meant[64];
    (void)kw;
    int rc = sl_conf_cidr_parse(w, &c);
    if (rc == -1) {
        err(ld, ld->line, "trusted_proxies: expected an address or a range like 10.0.0.0/8 or "
                          "fd00::/8, got '%s'", w);
        return -1;
    }
    if (rc == -2) {
        sl_conf_cidr_fmt(&c, meant, sizeof(meant));
        err(ld, ld->line, "trusted_proxies: '%s' has bits set past its prefix length (the "
                          "range is %s)", w, meant);
        return -1;
    }
    for (int i = 0; i < l->n_trusted_proxies; i++)
        if (memcmp(&l->trusted_proxies[i], &c, sizeof(c)) == 0)
            return 0;
    if (l->n_trusted_proxies >= MAX_PROXIES) {
        err(ld, ld->line, "trusted_proxies: more than %d ranges", MAX_PROXIES);
        return -1;
    }
    struct sl_cidr *v = realloc(l->trusted_proxies,
                                (size_t)(l->n_trusted_proxies + 1) * sizeof(*v));
    if (v == NULL) {
        ld->oom = 1;
        return -1;
    }
    l->trusted_proxies = v;
    v[l->n_trusted_proxies++] = c;
    return 0;
}

static void set_trusted_proxies(struct loader *ld, struct section *sec, const struct keyword *kw,
                                const char *value)
{
    each_word(ld, sec, kw, value, trusted_word);
}

static int method_word(struct loader *ld, struct section *sec, const struct keyword *kw,
                       const char *w)
{
    struct sl_limit_conf *m = sec->obj;
    char why[160];
    (void)kw;
    if (strcmp(w, "*") == 0) {
        sec->methods_star = 1;
        return 0;
    }
    if (sl_conf_method_problem(w, why, sizeof(why)) != NULL) {
        err(ld, ld->line, "methods: %s", why);
        return -1;
    }
    if (listed(m->methods, m->n_methods, w))
        return 0;
    if (m->n_methods >= MAX_LIST) {
        err(ld, ld->line, "methods: more than %d entries", MAX_LIST);
        return -1;
    }
    return push(ld, &m->methods, &m->n_methods, w);
}

static void set_methods(struct loader *ld, struct section *sec, const struct keyword *kw,
                        const char *value)
{
    each_word(ld, sec, kw, value, method_word);
}

static int path_word(struct loader *ld, struct section *sec, const struct keyword *kw,
                     const char *w)
{
    struct sl_limit_conf *m = sec->obj;
    char norm[3 * 256 + 2], why[400];
    (void)kw;
    if (sl_conf_path_pattern(w, norm, sizeof(norm), why, sizeof(why)) != NULL) {
        err(ld, ld->line, "paths: %s", why);
        return -1;
    }
    if (strlen(norm) > MAX_PATH) {
        err(ld, ld->line, "paths: '%s' is longer than %d bytes (in normal form)", w, MAX_PATH);
        return -1;
    }
    if (listed(m->paths, m->n_paths, norm))
        return 0;
    if (m->n_paths >= MAX_LIST) {
        err(ld, ld->line, "paths: more than %d entries", MAX_LIST);
        return -1;
    }
    return push(ld, &m->paths, &m->n_paths, norm);
}

static void set_paths(struct loader *ld, struct section *sec, const struct keyword *kw,
                      const char *value)
{
    each_word(ld, sec, kw, value, path_word);
}

/* ---- sections ------------------------------------------------------------- */

static struct section *new_section(struct loader *ld, enum sect_kind kind, void *obj, int line)
{
    static const struct { const struct keyword *kw; size_t n; } tables[] = {
        [SEC_SLUICE]   = { sluice_kw, N_OF(sluice_kw) },
        [SEC_STORE]    = { store_kw, N_OF(store_kw) },
        [SEC_LISTENER] = { listener_kw, N_OF(listener_kw) },
        [SEC_LIMIT]    = { limit_kw, N_OF(limit_kw) },
    };
    struct section *sec = calloc(1, sizeof(*sec));
    if (sec == NULL)
        goto fail;
    if (ld->n_secs == ld->cap_secs) {
        size_t cap = ld->cap_secs ? ld->cap_secs * 2 : 8;
        struct section **v = realloc(ld->secs, cap * sizeof(*v));
        if (v == NULL)
            goto fail;
        ld->secs = v;
        ld->cap_secs = cap;
    }
    sec->kind = kind;
    sec->obj = obj;
    sec->kw = tables[kind].kw;
    sec->n_kw = tables[kind].n;
    sec->line = line;
    ld->secs[ld->n_secs++] = sec;
    return sec;
fail:
    free(sec);
    ld->oom = 1;
    return NULL;
}

static struct section *find_named(struct loader *ld, enum sect_kind kind, const char *name)
{
    for (size_t i = 0; i < ld->n_secs; i++) {
        struct section *s = ld->secs[i];
        const char *n = s->kind == SEC_LISTENER ? ((struct sl_listener_conf *)s->obj)->name
                      : s->kind == SEC_LIMIT    ? ((struct sl_limit_conf *)s->obj)->name : NULL;
        if (s->kind == kind && n != NULL && strcmp(n, name) == 0)
            return s;
    }
    return NULL;
}

static int name_ok(const char *s)
{
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && strchr("_-.", *s) == NULL)
            return 0;
    return 1;
}

static struct sl_listener_conf *new_listener(struct loader *ld, const char *name, int line)
{
    struct sl_listener_conf *l = calloc(1, sizeof(*l));
    if (l == NULL || (l->name = strdup(name)) == NULL) {
        free(l);
        ld->oom = 1;
        return NULL;
    }
    l->line = line;
    l->protocol = SL_PROTO_RESP;
    strcpy(l->key_prefix_separator, ":");
    l->max_connections = 10000;
    l->idle_timeout_us = 300 * S_US;
    l->connect_timeout_us = 2 * S_US;
    l->header_timeout_us = 10 * S_US;
    l->max_replies_owed = 8192;
    l->max_request = 512ULL * 1000 * 1000;
    l->upstream_timeout_us = 60 * S_US;
    l->rate_limit_headers = SL_RLH_DRAFT;
    l->forwarded_headers = 1;
    l->max_request_line = 8192;
    l->max_header_line = 8192;
    l->max_headers = 100;
    l->max_header_size = 65536;
    *ld->ltail = l;
    ld->ltail = &l->next;
    ld->conf->n_listeners++;
    return l;
}

static struct sl_limit_conf *new_limit(struct loader *ld, const char *name, int line)
{
    struct sl_limit_conf *m = calloc(1, sizeof(*m));
    if (m == NULL || (m->name = strdup(name)) == NULL) {
        free(m);
        ld->oom = 1;
        return NULL;
    }
    m->line = line;
    m->metric = SL_METRIC_REQUESTS;
    m->scope = SL_SCOPE_IDENTITY;
    m->algorithm = SL_ALGO_TOKEN_BUCKET;
    m->action = SL_ACTION_REJECT;
    m->max_delay_us = 200000;
    m->default_cost = 1;
    *ld->mtail = m;
    ld->mtail = &m->next;
    ld->conf->n_limits++;
    return m;
}

/* The reader saw "[<content>]" on the current line. */
static void open_section(struct loader *ld, const char *content, size_t clen)
{
    int line = ld->line;
    ld->cur = NULL;
    ld->state = ST_IGNORED;
    ld->last_kw = -1;
    if (clen > MAX_NAME) {
        err(ld, line, "section name too long (max %d bytes)", MAX_NAME);
        return;
    }
    char buf[MAX_NAME + 1], kind[MAX_NAME + 1], name[MAX_NAME + 1], extra[MAX_NAME + 1];
    memcpy(buf, content, clen);
    buf[clen] = '\0';
    kind[0] = name[0] = extra[0] = '\0';
    /* %49s: every word fits, the whole header is at most MAX_NAME bytes. */
    int words = sscanf(buf, "%49s %49s %49s", kind, name, extra);
    int k = -1;
    for (int i = 0; i < (int)N_OF(kind_names); i++)
        if (strcmp(kind, kind_names[i]) == 0)
            k = i;
    if (k < 0) {
        err(ld, line, "unknown section [%s] (expected [sluice], [store], [listener NAME] or "
                      "[limit NAME])", buf);
        return;
    }
    if (k == SEC_SLUICE || k == SEC_STORE) {
        struct section **once = k == SEC_SLUICE ? &ld->sluice : &ld->store;
        if (words > 1) {
            err(ld, line, "[%s] takes no name", kind);
            return;
        }
        if (*once != NULL) {
            err(ld, line, "duplicate section [%s] (first on line %d)", kind, (*once)->line);
            return;
        }
        void *obj = k == SEC_SLUICE ? (void *)ld->conf : (void *)&ld->conf->store;
        if ((*once = new_section(ld, (enum sect_kind)k, obj, line)) == NULL)
            return;
        ld->cur = *once;
        ld->state = ST_OPEN;
        return;
    }
    if (words < 2) {
        err(ld, line, "[%s] needs a name: [%s NAME]", kind, kind);
        return;
    }
    if (words > 2) {
        err(ld, line, "[%s %s ...]: a section name is one word", kind, name);
        return;
    }
    if (!name_ok(name)) {
        err(ld, line, "invalid name '%s': use letters, digits, '_', '-' and '.'", name);
        return;
    }
    struct section *prev = find_named(ld, (enum sect_kind)k, name);
    if (prev != NULL) {
        err(ld, line, "duplicate section [%s %s] (first on line %d)", kind, name, prev->line);
        return;
    }
    void *obj = k == SEC_LISTENER ? (void *)new_listener(ld, name, line)
                                  : (void *)new_limit(ld, name, line);
    if (obj == NULL || (ld->cur = new_section(ld, (enum sect_kind)k, obj, line)) == NULL)
        return;
    ld->state = ST_OPEN;
}

/* ---- the reader: inih's view of each line, mirrored --------------------- */

/* Like inih's find_chars_or_comment() on <s>[from, to): the first of <chars>,
 * or the ';' of an inline comment (one after a blank), or <to>. */
static size_t find_or_comment(const char *s, size_t from, size_t to, const char *chars)
{
    int was_space = 0;
    for (size_t i = from; i < to; i++) {
        if ((chars != NULL && strchr(chars, s[i]) != NULL) || (was_space && s[i] == ';'))
            return i;
        was_space = isspace((unsigned char)s[i]);
    }
    return to;
}

/* Decides what inih will make of the <n> bytes of <s> and acts on headers. */
static void classify(struct loader *ld, const char *s, size_t n)
{
    size_t b = 0, e = n;
    while (b < e && isspace((unsigned char)s[b]))
        b++;
    while (e > b && isspace((unsigned char)s[e - 1]))
        e--;
    if (b == e || s[b] == ';' || s[b] == '#') {
        ld->kind = LINE_BLANK;
        return;
    }
    /* inih's rule: after a key line, any indented non-blank line continues
     * that key, even when it looks like "key = value" or "[section]". */
    if (ld->inih_prev && b > 0) {
        ld->kind = LINE_CONT;
        return;
    }
    if (s[b] == '[') {
        size_t close = find_or_comment(s, b + 1, e, "]");
        if (close == e || s[close] != ']') {
            err(ld, ld->line, "syntax error");
            ld->kind = LINE_BAD;
            /* It meant to open a section: skip its keys rather than misfile them. */
            ld->state = ST_IGNORED;
            return;
        }
        ld->kind = LINE_SECTION;
        ld->inih_prev = 0;
        size_t t = close + 1;
        while (t < e && isspace((unsigned char)s[t]))
            t++;
        if (t < e && s[t] != ';' && s[t] != '#') {
            err(ld, ld->line, "unexpected text after ']'");
            ld->state = ST_IGNORED;
            ld->cur = NULL;
            return;
        }
        open_section(ld, s + b + 1, close - b - 1);
        return;
    }
    size_t sep = find_or_comment(s, b, e, "=:");
    if (sep == e || s[sep] == ';') {
        err(ld, ld->line, "syntax error");
        ld->kind = LINE_BAD;
        return;
    }
    size_t ne = sep;
    while (ne > b && isspace((unsigned char)s[ne - 1]))
        ne--;
    ld->inih_prev = ne > b;
    ld->kind = LINE_KEY;
}

/* fgets() for inih over the text in memory: one line per call. */
static char *reader(char *str, int num, void *stream)
{
    struct loader *ld = stream;
    if (ld->pos >= ld->len || num < 3)
        return NULL;
    const char *p = ld->text + ld->pos;
    size_t rest = ld->len - ld->pos;
    const char *nl = memchr(p, '\n', rest);
    size_t n = nl ? (size_t)(nl - p) : rest;
    ld->pos += n + (nl != NULL);
    ld->line++;
    if (n > 0 && p[n - 1] == '\r')
        n--;
    if (ld->line == 1 && n >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0) {
        p += 3;
        n -= 3;
    }
    /* inih's buffer holds num - 1 bytes; the line and its '\n' must fit, or
     * inih would read the rest as a line of its own. */
    size_t max = (size_t)num - 2;
    if (n > max) {
        err(ld, ld->line, "line too long (max %zu bytes)", max);
        size_t b = 0;
        while (b < n && isspace((unsigned char)p[b]))
            b++;
        if (b < n && p[b] == '[' && !(ld->inih_prev && b > 0)) {
            ld->state = ST_IGNORED;
            ld->cur = NULL;
        }
        goto blank;
    }
    if (memchr(p, '\0', n) != NULL) {
        err(ld, ld->line, "unexpected NUL byte");
        goto blank;
    }
    memcpy(str, p, n);
    str[n] = '\n';
    str[n + 1] = '\0';
    classify(ld, str, n);
    if (ld->kind == LINE_BAD)
        goto blank;
    return str;
blank:
    /* inih sees an empty line: it changes none of its state. Keys continuing
     * the bad line are dropped quietly; the line already has its error. */
    ld->kind = LINE_BAD;
    ld->last_kw = -1;
    str[0] = '\n';
    str[1] = '\0';
    return str;
}

/* ---- the inih handler ----------------------------------------------------- */

static void on_key(struct loader *ld, const char *name, const char *value)
{
    ld->last_kw = -1;
    /* "listen 127.0.0.1:6380" reaches here as name "listen 127.0.0.1", value
     * "6380": inih split at the ':' because there was no '='. */
    if (name[0] == '\0' || has_blank(name)) {
        err(ld, ld->line, "expected 'key = value'");
        return;
    }
    if (ld->state == ST_NONE) {
        err(ld, ld->line, "key '%s' outside of any section", name);
        return;
    }
    if (ld->state == ST_IGNORED || ld->cur == NULL)
        return;
    struct section *sec = ld->cur;
    char t[128];
    if (strlen(name) > MAX_NAME) {
        err(ld, ld->line, "key name too long (max %d bytes)", MAX_NAME);
        return;
    }
    int i = kw_index(sec, name);
    if (i < 0) {
        err(ld, ld->line, "unknown key '%s' in %s", name, title(sec, t, sizeof(t)));
        return;
    }
    if (sec->key_line[i] != 0) {
        err(ld, ld->line, "duplicate key '%s' (first set on line %d)", name, sec->key_line[i]);
        return;
    }
    sec->key_line[i] = ld->line;
    ld->last_kw = i;
    set_value(ld, sec, &sec->kw[i], value);
}

static void on_continuation(struct loader *ld, const char *value)
{
    if (ld->state != ST_OPEN || ld->cur == NULL || ld->last_kw < 0)
        return; /* the key line was reported or skipped already */
    const struct keyword *kw = &ld->cur->kw[ld->last_kw];
    if (value[0] == '[') {
        err(ld, ld->line, "a section header must not be indented");
        return;
    }
    if (!(kw->flags & KW_MULTI)) {
        err(ld, ld->line, "unexpected indented line: it would continue '%s', which takes one "
                          "value (only commands, cost, identity, match_identity, methods, "
                          "paths and trusted_proxies continue on indented lines)", kw->name);
        return;
    }
    /* Debian's inih 55 leaves inline comments in continuation values. */
    char *v = xstrdup(ld, value);
    if (v == NULL)
        return;
    size_t len = strlen(v);
    size_t c = find_or_comment(v, 0, len, NULL);
    while (c > 0 && isspace((unsigned char)v[c - 1]))
        c--;
    v[c] = '\0';
    set_value(ld, ld->cur, kw, v);
    free(v);
}

static int handler(void *user, const char *section, const char *name, const char *value)
{
    struct loader *ld = user;
    (void)section; /* truncated at 49 bytes by inih; ld->cur is the truth */
    if (ld->kind == LINE_CONT)
        on_continuation(ld, value);
    else
        on_key(ld, name, value);
    /* Errors are collected in ld; inih's own first-error line is not needed. */
    return 1;
}

/* ---- checks across keys and sections ------------------------------------- */

static int is_wildcard(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return ((const struct sockaddr_in *)ss)->sin_addr.s_addr == htonl(INADDR_ANY);
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
    return memcmp(&s6->sin6_addr, &in6addr_any, sizeof(in6addr_any)) == 0;
}

static in_port_t port_of(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return ((const struct sockaddr_in *)ss)->sin_port;
    return ((const struct sockaddr_in6 *)ss)->sin6_port;
}

static int same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return 0;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                  &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
}

/* Would binding both fail? Same port, and the same address or a wildcard
 * (which on Linux also takes the port of the other family). */
static int addr_clash(const struct sl_addr *a, const struct sl_addr *b)
{
    if (port_of(&a->ss) != port_of(&b->ss))
        return 0;
    return same_addr(&a->ss, &b->ss) || is_wildcard(&a->ss) || is_wildcard(&b->ss);
}

static int is_local(const struct sockaddr_storage *ss)
{
    if (is_wildcard(ss))
        return 1;
    if (ss->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
    return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)ss)->sin6_addr);
}

/* Would the listener connect to itself? A wildcard listen also answers on
 * loopback; another host's address on the same port is fine. */
static int is_loop(const struct sl_addr *listen, const struct sl_addr *upstream)
{
    if (port_of(&listen->ss) != port_of(&upstream->ss))
        return 0;
    return same_addr(&listen->ss, &upstream->ss) ||
           (is_wildcard(&listen->ss) && is_local(&upstream->ss));
}

static void check_listener(struct loader *ld, struct section *sec)
{
    struct sl_listener_conf *l = sec->obj;
    char t[128];
    int listen_line = key_line(sec, "listen");
    /* An address is valid once its text is filled in: a bad value was
     * reported where it was set and takes no part in the checks below. */
    int has_listen = l->listen.text[0] != '\0', has_upstream = l->upstream.text[0] != '\0';
    if (listen_line == 0)
        err(ld, sec->line, "%s: missing 'listen'", title(sec, t, sizeof(t)));
    if (key_line(sec, "upstream") == 0)
        err(ld, sec->line, "%s: missing 'upstream'", title(sec, t, sizeof(t)));
    else if (has_listen && has_upstream && is_loop(&l->listen, &l->upstream))
        err(ld, key_line(sec, "upstream"), "upstream: %s is this listener's own address (a loop)",
            l->upstream.text);
    if (l->n_identity == 0) {
        l->identity[0] = SL_ID_CLIENT_IP;
        l->n_identity = 1;
    }
    int id_line = key_line(sec, "identity");
    for (int i = 0; i < l->n_identity; i++) {
        enum sl_id_source s = l->identity[i];
        if ((s == SL_ID_RESP_USER || s == SL_ID_CLIENT_NAME || s == SL_ID_KEY_PREFIX) &&
            l->protocol != SL_PROTO_RESP)
            err(ld, id_line, "identity: %s needs protocol = resp (this listener is %s)",
                sl_conf_id_names[s], sl_conf_proto_names[l->protocol]);
        if (s == SL_ID_HEADER && l->protocol != SL_PROTO_HTTP)
            err(ld, id_line, "identity: header:%s needs protocol = http (this listener is %s)",
                l->identity_header[i], sl_conf_proto_names[l->protocol]);
    }
    for (size_t k = 0; k < N_OF(http_only_keys) && l->protocol != SL_PROTO_HTTP; k++) {
        int line = key_line(sec, http_only_keys[k]);
        if (line != 0)
            err(ld, line, "%s: only for http listeners (this listener is %s)", http_only_keys[k],
                sl_conf_proto_names[l->protocol]);
    }
    if (!has_listen)
        return;
    if (ld->conf->has_admin && addr_clash(&l->listen, &ld->conf->admin))
        err(ld, listen_line, "listen: %s clashes with the admin address %s", l->listen.text,
            ld->conf->admin.text);
    /* Against every earlier listener, so the later one carries the error. */
    for (size_t i = 0; i < ld->n_secs && ld->secs[i] != sec; i++) {
        struct section *o = ld->secs[i];
        struct sl_listener_conf *ol = o->obj;
        if (o->kind != SEC_LISTENER || ol->listen.text[0] == '\0')
            continue;
        if (addr_clash(&l->listen, &ol->listen))
            err(ld, listen_line, "listen: %s clashes with [listener %s] (line %d)",
                l->listen.text, ol->name, key_line(o, "listen"));
    }
}

/* burst default: one second's worth of rate, rounded up, at least 1. */
static uint64_t one_second(const struct sl_rate *r)
{
    uint64_t q = r->amount / r->period_us, rem = r->amount % r->period_us;
    /* rem < period_us <= 365d in us (~3.2e13), so rem * 1e6 fits in 64 bits;
     * q * 1e6 <= amount. */
    uint64_t b = q * S_US + (rem * S_US + r->period_us - 1) / r->period_us;
    return b ? b : 1;
}

/* A request that costs more than a limit can ever hold is refused forever
 * (docs/algorithms.md: "never"), which is a mistake in the file, not a
 * limit: every cost must fit. The buckets (token_bucket, gcra, and delay,
 * shaped as gcra) hold <burst>; the windows ignore burst and hold the
 * rate's amount. */
static void check_costs(struct loader *ld, const struct sl_limit_conf *m, int cost_line,
                        int per_command)
{
    int bucket = m->algorithm == SL_ALGO_TOKEN_BUCKET || m->algorithm == SL_ALGO_GCRA;
    uint64_t cap = bucket ? m->burst : m->rate.amount;
    char what[96];
    if (bucket)
        snprintf(what, sizeof(what), "the burst (%llu)", (unsigned long long)cap);
    else
        snprintf(what, sizeof(what), "the %llu a window of %s holds (the rate's amount)",
                 (unsigned long long)cap, sl_conf_algo_names[m->algorithm]);
    const char *raise = bucket ? "burst" : "rate";
    int first = -1, more = 0;
    for (int i = 0; per_command && i < m->n_costs; i++) {
        if (m->costs[i].cost <= cap)
            continue;
        if (first < 0)
            first = i;
        else
            more++;
    }
    if (first >= 0) /* one line per limit, however many entries are too big */
        err(ld, cost_line, "cost: %s=%llu is more than %s, so %s could never pass%s; raise %s "
            "or lower the cost", m->costs[first].cmd, (unsigned long long)m->costs[first].cost,
            what, m->costs[first].cmd, more ? " (nor could the other commands whose cost is "
            "above it)" : "", raise);
    if (m->default_cost > cap)
        err(ld, cost_line, "cost: %llu is more than %s, so no request could pass; raise %s or "
            "lower the cost", (unsigned long long)m->default_cost, what, raise);
}

/* Whether limit <m> applies to listener <l>. */
static int limit_on(const struct sl_limit_conf *m, const struct sl_listener_conf *l)
{
    return m->lc != NULL ? m->lc == l : m->listener != NULL && strcmp(m->listener, "*") == 0;
}

/* Whether listener <l> has identity source <src> (header:<header>). */
static int has_source(const struct sl_listener_conf *l, int src, const char *header)
{
    for (int i = 0; i < l->n_identity; i++)
        if ((int)l->identity[i] == src &&
            (src != SL_ID_HEADER || header == NULL || strcasecmp(l->identity_header[i], header) == 0))
            return 1;
    return 0;
}

/* match_identity entries name their source, as identities do
 * (identity/identity-t.h): "user:carol", "name:carol", "prefix:t",
 * "ip:10.0.0.1", "header:NAME:value", a hashed form "user#<16 hex>", or
 * "all" (identity = none). A bare value ("carol", "::1") is a value of the
 * first identity source of the limit's listeners, which must agree; it is
 * rewritten here to its prefixed form, so -T prints what is matched. An
 * entry no listener of the limit can produce is an error: it would never
 * match. */
static void resolve_matches(struct loader *ld, struct section *sec)
{
    static const char *const tags[] = SL_ID_TAGS;
    struct sl_limit_conf *m = sec->obj;
    int line = key_line(sec, "match_identity");
    const struct sl_listener_conf *first = NULL; /* whose first source a bare value means */
    int agree = 1;

    if (m->n_match_identity == 0 || (m->lc == NULL && (m->listener == NULL ||
                                                        strcmp(m->listener, "*") != 0)))
        return; /* no entries, or a bad listener (reported) */
    for (const struct sl_listener_conf *l = ld->conf->listeners; l != NULL; l = l->next) {
        if (!limit_on(m, l))
            continue;
        if (first == NULL)
            first = l;
        else if (l->identity[0] != first->identity[0] ||
                 (l->identity[0] == SL_ID_HEADER &&
                  strcasecmp(l->identity_header[0], first->identity_header[0]) != 0))
            agree = 0;
    }
    if (first == NULL)
        return;
    for (int i = 0; i < m->n_match_identity; i++) {
        const char *w = m->match_identity[i];
        int src = -1, hashed = 0;
        size_t tn = 0;
        for (int t = 0; t < (int)(sizeof(tags) / sizeof(tags[0])) && src < 0; t++) {
            tn = strlen(tags[t]);
            if (t == SL_ID_NONE ? strcmp(w, tags[t]) == 0
                                : strncmp(w, tags[t], tn) == 0 && (w[tn] == ':' || w[tn] == '#')) {
                src = t;
                hashed = w[tn] == '#';
            }
        }
        if (src < 0) {
            /* A bare value: the first source's. */
            enum sl_id_source f = first->identity[0];
            char buf[MAX_IDENTITY + MAX_HEADER + 16];
            if (!agree) {
                err(ld, line, "match_identity: '%s' names no source, and the listeners of this "
                              "limit differ in their first identity source; write user:%s, "
                              "name:%s, prefix:%s or ip:%s", w, w, w, w, w);
                continue;
            }
            if (f == SL_ID_NONE) {
                err(ld, line, "match_identity: '%s' names no source, and [listener %s] has "
                              "identity = none (its one identity is 'all')", w, first->name);
                continue;
            }
            if (f == SL_ID_HEADER) {
                int n = snprintf(buf, sizeof(buf), "header:%s:%s", first->identity_header[0], w);
                for (int k = 7; k < n && buf[k] != ':'; k++)
                    buf[k] = (char)tolower((unsigned char)buf[k]);
            } else {
                snprintf(buf, sizeof(buf), "%s:%s", tags[f], w);
            }
            if (strlen(buf) > MAX_IDENTITY + 8) { /* -T's line must load again */
                err(ld, line, "match_identity: '%s' is longer than %d bytes", buf,
                    MAX_IDENTITY + 8);
                continue;
            }
            char *d = xstrdup(ld, buf);
            if (d == NULL)
                return;
            free(m->match_identity[i]);
            m->match_identity[i] = d;
            continue;
        }
        if (hashed) {
            const char *h = w + tn + 1;
            size_t hn = strspn(h, "0123456789abcdef");
            if (hn != 16 || h[hn] != '\0') {
                err(ld, line, "match_identity: '%s' is not a hashed identity (%s# and 16 "
                              "lowercase hex digits, as /stats shows it)", w, tags[src]);
                continue;
            }
        } else if (src != SL_ID_NONE && w[tn + 1] == '\0') {
            err(ld, line, "match_identity: '%s' has no value after '%s:'", w, tags[src]);
            continue;
        }
        if (src == SL_ID_HEADER && !hashed) {
            /* header:NAME:VALUE, or header:VALUE when the limit's listeners
             * have one header source (rewritten to the first form). */
            const char *hdr = w + tn + 1;
            const char *colon = strchr(hdr, ':');
            char name[MAX_HEADER + 1] = "";
            int found = 0;
            if (colon != NULL && colon != hdr && colon - hdr <= MAX_HEADER) {
                snprintf(name, sizeof(name), "%.*s", (int)(colon - hdr), hdr);
                for (const struct sl_listener_conf *l = ld->conf->listeners; l; l = l->next)
                    found |= limit_on(m, l) && has_source(l, SL_ID_HEADER, name);
            }
            if (found) {
                if (colon[1] == '\0')
                    err(ld, line, "match_identity: '%s' has no value after '%s:'", w, name);
                continue;
            }
            const char *only = NULL;
            int several = 0;
            for (const struct sl_listener_conf *l = ld->conf->listeners; l; l = l->next) {
                for (int k = 0; limit_on(m, l) && k < l->n_identity; k++) {
                    if (l->identity[k] != SL_ID_HEADER)
                        continue;
                    if (only == NULL)
                        only = l->identity_header[k];
                    else if (strcasecmp(only, l->identity_header[k]) != 0)
                        several = 1;
                }
            }
            if (only == NULL) {
                err(ld, line, "match_identity: '%s' can never match: no listener of this limit "
                              "has identity source header:%s", w, name[0] ? name : "NAME");
                continue;
            }
            if (several) {
                err(ld, line, "match_identity: '%s': the listeners of this limit have more than "
                              "one header source; write header:NAME:VALUE", w);
                continue;
            }
            char buf[MAX_IDENTITY + MAX_HEADER + 16];
            int n = snprintf(buf, sizeof(buf), "header:%s:%s", only, hdr);
            for (int k = 7; k < n && buf[k] != ':'; k++)
                buf[k] = (char)tolower((unsigned char)buf[k]);
            if (strlen(buf) > MAX_IDENTITY + 8) { /* -T's line must load again */
                err(ld, line, "match_identity: '%s' is longer than %d bytes", buf,
                    MAX_IDENTITY + 8);
                continue;
            }
            char *d = xstrdup(ld, buf);
            if (d == NULL)
                return;
            free(m->match_identity[i]);
            m->match_identity[i] = d;
            continue;
        }
        int found = 0;
        for (const struct sl_listener_conf *l = ld->conf->listeners; l; l = l->next)
            found |= limit_on(m, l) && has_source(l, src, NULL);
        /* client_ip is every listener's last resort (see sl_identity_of). */
        if (!found && src != SL_ID_CLIENT_IP)
            err(ld, line, "match_identity: '%s' can never match: no listener of this limit has "
                          "identity source %s", w, sl_conf_id_names[src]);
    }
}

/* The names of `cost = NAME=N` are commands (upper-cased) on resp
 * listeners and methods (kept as written: case-sensitive) on http ones;
 * with `listener = *` the listeners must agree on which. */
static void cost_names(struct loader *ld, struct sl_limit_conf *m, int cost_line)
{
    const struct sl_listener_conf *resp = NULL, *http = NULL;
    if (m->lc != NULL) {
        resp = m->lc->protocol == SL_PROTO_HTTP ? NULL : m->lc;
        http = m->lc->protocol == SL_PROTO_HTTP ? m->lc : NULL;
    } else if (m->listener != NULL && strcmp(m->listener, "*") == 0) {
        for (const struct sl_listener_conf *l = ld->conf->listeners; l; l = l->next) {
            if (l->protocol == SL_PROTO_RESP && resp == NULL)
                resp = l;
            if (l->protocol == SL_PROTO_HTTP && http == NULL)
                http = l;
        }
    }
    if (resp != NULL && http != NULL) {
        err(ld, cost_line, "cost: with listener = *, per-name costs need listeners of one "
                           "protocol: names are commands on [listener %s] (resp) and methods "
                           "on [listener %s] (http)", resp->name, http->name);
        return;
    }
    for (int i = 0; i < m->n_costs; i++) {
        char *name = m->costs[i].cmd, why[160];
        if (http == NULL) {
            for (char *p = name; *p; p++)
                *p = (char)toupper((unsigned char)*p);
        } else if (sl_conf_method_problem(name, why, sizeof(why)) != NULL) {
            err(ld, cost_line, "cost: %s", why);
        }
    }
}

static void check_limit(struct loader *ld, struct section *sec)
{
    struct sl_limit_conf *m = sec->obj;
    char t[128];
    title(sec, t, sizeof(t));
    int listener_line = key_line(sec, "listener");
    if (listener_line == 0)
        err(ld, sec->line, "%s: missing 'listener'", t);
    else if (m->listener != NULL && strcmp(m->listener, "*") != 0 &&
             (m->lc = sl_conf_listener(ld->conf, m->listener)) == NULL)
        err(ld, listener_line, "listener: no [listener %s]", m->listener);

    int rate_line = key_line(sec, "rate"), max_line = key_line(sec, "max");
    int burst_line = key_line(sec, "burst"), cost_line = key_line(sec, "cost");
    if (m->metric == SL_METRIC_CONNECTIONS) {
        if (rate_line)
            err(ld, rate_line, "rate: not for metric = connections (use max = N)");
        if (burst_line)
            err(ld, burst_line, "burst: not for metric = connections");
        if (!max_line)
            err(ld, sec->line, "%s: metric = connections needs 'max'", t);
        if (m->scope == SL_SCOPE_CONNECTION)
            err(ld, key_line(sec, "scope"), "scope: a connection limit counts connections per "
                                            "identity or globally, not per connection");
    } else {
        if (max_line)
            err(ld, max_line, "max: only for metric = connections (use rate)");
        if (!rate_line)
            err(ld, sec->line, "%s: missing 'rate'", t);
        else if (sec->rate_sized && m->metric == SL_METRIC_REQUESTS)
            err(ld, rate_line, "rate: size units are for metric = bytes_in or bytes_out");
        if (m->burst == 0 && m->rate.amount != 0)
            m->burst = one_second(&m->rate);
    }
    if (cost_line && m->metric != SL_METRIC_REQUESTS)
        err(ld, cost_line, "cost: only for metric = requests");
    if (m->lc != NULL && m->lc->protocol == SL_PROTO_TCP && m->metric == SL_METRIC_REQUESTS)
        err(ld, sec->line, "%s: a tcp listener has no requests to count; use metric = "
                           "bytes_in, bytes_out or connections", t);

    int commands_line = key_line(sec, "commands");
    if (sec->commands_star && m->n_commands > 0)
        err(ld, commands_line, "commands: '*' means every command; do not list names with it");
    /* Command names exist only in RESP, methods and paths only in HTTP;
     * with `listener = *` every listener must speak the protocol. */
    int methods_line = key_line(sec, "methods");
    if (sec->methods_star && m->n_methods > 0)
        err(ld, methods_line, "methods: '*' means every method; do not list names with it");
    int per_proto[3] = { m->n_commands > 0 ? commands_line : 0, m->n_methods > 0 ? methods_line : 0,
                         m->n_paths > 0 ? key_line(sec, "paths") : 0 };
    const char *keys[3] = { "commands", "methods", "paths" };
    for (int k = 0; k < 3; k++) {
        enum sl_proto want = k == 0 ? SL_PROTO_RESP : SL_PROTO_HTTP;
        if (!per_proto[k])
            continue;
        if (m->lc != NULL && m->lc->protocol != want) {
            err(ld, per_proto[k], "%s: only for %s listeners ([listener %s] is %s)", keys[k],
                sl_conf_proto_names[want], m->lc->name, sl_conf_proto_names[m->lc->protocol]);
        } else if (m->lc == NULL && m->listener != NULL && strcmp(m->listener, "*") == 0) {
            for (struct sl_listener_conf *l = ld->conf->listeners; l; l = l->next) {
                if (l->protocol != want) {
                    err(ld, per_proto[k], "%s: only for %s listeners (listener = * includes "
                "[listener %s], which is %s)", keys[k], sl_conf_proto_names[want], l->name,
                sl_conf_proto_names[l->protocol]);
                    break;
                }
            }
        }
    }
    /* Per-name costs: commands on resp, methods on http. */
    if (m->n_costs > 0 && cost_line)
        cost_names(ld, m, cost_line);

    if (cost_line && m->metric == SL_METRIC_REQUESTS && m->rate.amount != 0)
        check_costs(ld, m, cost_line, !(m->lc != NULL && m->lc->protocol == SL_PROTO_TCP));

    int replaces_line = key_line(sec, "replaces");
    if (m->replaces != NULL) {
        if (strcmp(m->replaces, m->name) == 0)
            err(ld, replaces_line, "replaces: a limit cannot replace itself");
        else {
            struct section *o = find_named(ld, SEC_LIMIT, m->replaces);
            if (o == NULL)
                err(ld, replaces_line, "replaces: no [limit %s]", m->replaces);
            else
                m->replaces_lc = o->obj;
        }
    }
    resolve_matches(ld, sec);
}

static void check_cycles(struct loader *ld)
{
    struct sl_conf *c = ld->conf;
    for (size_t i = 0; i < ld->n_secs; i++) {
        struct section *sec = ld->secs[i];
        if (sec->kind != SEC_LIMIT)
            continue;
        struct sl_limit_conf *m = sec->obj, *p = m->replaces_lc;
        for (int steps = 0; p != NULL && steps < c->n_limits; steps++, p = p->replaces_lc) {
            if (p == m) {
                err(ld, key_line(sec, "replaces"), "replaces: [limit %s] is part of a cycle",
                    m->name);
                break;
            }
        }
    }
}

static void finish(struct loader *ld)
{
    for (size_t i = 0; i < ld->n_secs; i++)
        if (ld->secs[i]->kind == SEC_LISTENER)
            check_listener(ld, ld->secs[i]);
    for (size_t i = 0; i < ld->n_secs; i++)
        if (ld->secs[i]->kind == SEC_LIMIT)
            check_limit(ld, ld->secs[i]);
    check_cycles(ld);
    /* In-process limits would be counted by each worker alone. */
    struct sl_conf *c = ld->conf;
    if (c->workers > 1 && c->store.kind == SL_STORE_LOCAL && c->n_limits > 0 && ld->sluice != NULL)
        err(ld, key_line(ld->sluice, "workers"),
            "workers: %d processes need a shared store for their limits (url = redis://...); "
            "with url = local each would count alone", c->workers);
}

/* ---- loading -------------------------------------------------------------- */

static struct sl_conf *conf_new(const char *file)
{
    struct sl_conf *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->file = strdup(file);
    c->store.url = strdup("local");
    c->store.key_prefix = strdup("sluice:");
    if (c->file == NULL || c->store.url == NULL || c->store.key_prefix == NULL) {
        sl_conf_free(c);
        return NULL;
    }
    c->has_admin = 1;
    (void)sl_parse_addr("127.0.0.1:9121", &c->admin);
    c->log_level = SL_LOG_INFO;
    c->shutdown_grace_us = 10 * S_US;
    c->workers = 1;
    c->store.kind = SL_STORE_LOCAL;
    c->store.connect_timeout_us = 200000;
    c->store.timeout_us = 25000;
    c->store.on_failure = SL_FAIL_LOCAL;
    c->store.lease = 0;
    c->store.connection_lease_us = 10000000;
    c->store.max_identities = 100000;
    return c;
}

static int by_line(const void *a, const void *b)
{
    const struct lerr *x = a, *y = b;
    if (x->line != y->line)
        return x->line < y->line ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Parses <len> bytes of <text>; errors name <name>; a relative password_file
 * is read from <dir> (NULL: the working directory). */
static struct sl_conf *load_text(const char *text, size_t len, const char *name, const char *dir,
                                 FILE *errf)
{
    struct loader ld;
    memset(&ld, 0, sizeof(ld));
    ld.name = name;
    ld.dir = dir;
    ld.text = text;
    ld.len = len;
    ld.state = ST_NONE;
    ld.last_kw = -1;
    if (len > MAX_FILE) {
        fprintf(errf, "%s:0: file too large (max %d bytes)\n", name, MAX_FILE);
        return NULL;
    }
    ld.conf = conf_new(name);
    if (ld.conf == NULL) {
        fprintf(errf, "%s:0: out of memory\n", name);
        return NULL;
    }
    ld.ltail = &ld.conf->listeners;
    ld.mtail = &ld.conf->limits;

    int rc = ini_parse_stream(reader, &ld, handler, &ld);
    if (rc > 0) {
        /* The reader reports every line inih rejects; this is a safety net
         * should inih disagree with it about one. */
        int seen = 0;
        for (size_t i = 0; i < ld.n_errs; i++)
            seen |= ld.errs[i].line == rc;
        if (!seen)
            err(&ld, rc, "syntax error");
    } else if (rc < 0) {
        ld.oom = 1;
    }
    if (!ld.oom)
        finish(&ld);

    if (ld.n_errs > 0)
        qsort(ld.errs, ld.n_errs, sizeof(ld.errs[0]), by_line);
    for (size_t i = 0; i < ld.n_errs; i++) {
        fprintf(errf, "%s:%d: %s\n", name, ld.errs[i].line, ld.errs[i].msg);
        free(ld.errs[i].msg);
    }
    if (ld.oom)
        fprintf(errf, "%s:0: out of memory\n", name);
    int failed = ld.n_errs > 0 || ld.oom;
    free(ld.errs);
    for (size_t i = 0; i < ld.n_secs; i++)
        free(ld.secs[i]);
    free(ld.secs);
    if (failed) {
        sl_conf_free(ld.conf);
        return NULL;
    }
    return ld.conf;
}

struct sl_conf *sl_conf_load_string(const char *text, const char *name, FILE *errf)
{
    return load_text(text, strlen(text), name, NULL, errf);
}

struct sl_conf *sl_conf_load(const char *path, FILE *errf)
{
    char *dir = NULL;
    size_t len = 0;
    int error = 0;
    char *text = read_file(path, MAX_FILE, &len, &error);
    if (text == NULL) {
        if (error == EFBIG)
            fprintf(errf, "%s:0: file too large (max %d bytes)\n", path, MAX_FILE);
        else
            fprintf(errf, "%s:0: cannot open: %s\n", path, strerror(error));
        return NULL;
    }
    const char *slash = strrchr(path, '/');
    if (slash != NULL && (dir = strndup(path, (size_t)(slash - path) + (slash == path))) == NULL) {
        free(text);
        fprintf(errf, "%s:0: out of memory\n", path);
        return NULL;
    }
    struct sl_conf *c = load_text(text, len, path, dir, errf);
    free(dir);
    free(text);
    return c;
}

struct sl_listener_conf *sl_conf_listener(const struct sl_conf *c, const char *name)
{
    for (struct sl_listener_conf *l = c->listeners; l != NULL; l = l->next)
        if (strcmp(l->name, name) == 0)
            return l;
    return NULL;
}

static void free_strv(char **v, int n)
{
    for (int i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

void sl_conf_free(struct sl_conf *c)
{
    if (c == NULL)
        return;
    for (struct sl_listener_conf *l = c->listeners, *next; l != NULL; l = next) {
        next = l->next;
        for (int i = 0; i < SL_CONF_MAX_IDENTITY; i++)
            free(l->identity_header[i]);
        free(l->trusted_proxies);
        free(l->name);
        free(l);
    }
    for (struct sl_limit_conf *m = c->limits, *next; m != NULL; m = next) {
        next = m->next;
        free(m->name);
        free(m->listener);
        free_strv(m->commands, m->n_commands);
        free_strv(m->methods, m->n_methods);
        free_strv(m->paths, m->n_paths);
        free(m->costs);
        free_strv(m->match_identity, m->n_match_identity);
        free(m->replaces);
        free(m);
    }
    if (c->store.password != NULL) {
        /* The secret should not linger in freed heap memory. */
        explicit_bzero(c->store.password, strlen(c->store.password));
        free(c->store.password);
    }
    free(c->store.password_file);
    free(c->store.url);
    free(c->store.user);
    free(c->store.key_prefix);
    free(c->file);
    free(c);
}

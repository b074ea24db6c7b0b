/* sluice — the two sections a file has at most once, [sluice] (the process:
 * admin address, log level, workers) and [store] (where limits are counted:
 * url, password_file, timeouts, leases): their keyword tables, the setters
 * of their keys with rules of their own, and their defaults. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf/conf-i.h"
#include "conf/conf.h"
#include "conf/names.h"
#include "conf/units.h"

static kw_setter set_admin, set_log_level, set_log_file, set_workers, set_url, set_password_file, set_lease;
static kw_setter set_onoff_opt, set_sentinel_password_file, refuse_password, set_admin_token_file;

/* An on | off key whose absence means something of its own (an int at
 * <off>: -1 not written, 0 off, 1 on). */
#define ONOFF_OPT(k, st, f) \
    { .name = k, .type = KW_FUNC, .set = set_onoff_opt, .off = offsetof(st, f) }

static const struct keyword sluice_kw[] = {
    FUNC("admin", set_admin, 0),
    FUNC("admin_token_file", set_admin_token_file, 0),
    FUNC("admin_token", refuse_password, 0),
    FUNC("log_level", set_log_level, 0),
    FUNC("log_file", set_log_file, 0),
    ENUM("log_format", struct sl_conf, log_format, sl_log_format_names),
    ENUM("decision_log", struct sl_conf, decision_log, sl_conf_dlog_names),
    NUM("decision_log_rate", KW_U64, struct sl_conf, decision_log_rate, 1, 1000000),
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
    ONOFF_OPT("tls", struct sl_store_conf, tls_opt),
    TLSPATH("tls_ca", struct sl_store_conf, tls_ca),
    TLSPATH("tls_cert", struct sl_store_conf, tls_cert),
    TLSPATH("tls_key", struct sl_store_conf, tls_key),
    STR("tls_sni", struct sl_store_conf, tls_sni, 253),
    ENUM("tls_verify", struct sl_store_conf, tls_verify, sl_conf_onoff_names),
    ONOFF_OPT("sentinel_tls", struct sl_store_conf, sentinel_tls_opt),
    STR("sentinel_user", struct sl_store_conf, sentinel_user, 255),
    FUNC("sentinel_password_file", set_sentinel_password_file, 0),
    FUNC("sentinel_password", refuse_password, 0),
};

const struct kw_table sl_cf_sluice_keys = { sluice_kw, N_OF(sluice_kw) };
const struct kw_table sl_cf_store_keys = { store_kw, N_OF(store_kw) };

struct sl_conf *sl_cf_conf_new(const char *file)
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
    c->decision_log = SL_DLOG_REJECTIONS;
    c->decision_log_rate = 100;
    c->shutdown_grace_us = 10 * S_US;
    c->workers = 1;
    c->store.kind = SL_STORE_LOCAL;
    c->store.connect_timeout_us = 200000;
    c->store.timeout_us = 25000;
    c->store.on_failure = SL_FAIL_LOCAL;
    c->store.lease = 0;
    c->store.connection_lease_us = 10000000;
    c->store.max_identities = 100000;
    c->store.tls_verify = 1;
    c->store.tls_opt = -1;
    c->store.sentinel_tls_opt = -1;
    sl_cf_usage_defaults(c);
    return c;
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
        sl_cf_bad(ld, kw, "an address like 127.0.0.1:9121, or nothing for off", value);
        return;
    }
    c->has_admin = 1;
    c->admin_line = ld->line;
}

static void set_log_level(struct loader *ld, struct section *sec, const struct keyword *kw,
                          const char *value)
{
    struct sl_conf *c = sec->obj;
    if (sl_log_level_parse(value, &c->log_level) != 0)
        sl_cf_bad(ld, kw, "one of error | warn | info | debug", value);
}

/* <value> as an absolute path: a relative one is taken from the directory
 * of the configuration file (ld->dir; NULL = the working directory), so
 * `sluice -c /etc/sluice/sluice.ini` finds it whatever the working
 * directory, and what -T prints loads from anywhere. Symbolic links are
 * left as they are. malloc'd, or NULL (out of memory). */
static char *abs_path(const struct loader *ld, const char *value)
{
    char *path = NULL;
    if (value[0] == '/')
        return strdup(value);
    const char *dir = ld->dir;
    char cwd[4096];
    if ((dir == NULL || dir[0] != '/') && getcwd(cwd, sizeof(cwd)) != NULL) {
        if (asprintf(&path, "%s%s%s/%s", cwd, dir != NULL ? "/" : "", dir != NULL ? dir : "",
                     value) < 0)
            path = NULL;
    } else if (asprintf(&path, "%s%s%s", dir != NULL ? dir : "",
                        dir != NULL && strcmp(dir, "/") != 0 ? "/" : "", value) < 0) {
        path = NULL;
    }
    return path;
}

char *sl_cf_abs_path(const struct loader *ld, const char *value) { return abs_path(ld, value); }

/* log_file = PATH: empty is stderr. The file is opened when the
 * configuration is applied (startup, reload), not by -t. */
static void set_log_file(struct loader *ld, struct section *sec, const struct keyword *kw,
                         const char *value)
{
    struct sl_conf *c = sec->obj;
    (void)kw;
    free(c->log_file);
    c->log_file = NULL;
    if (value[0] == '\0')
        return;
    char *path = abs_path(ld, value);
    if (path == NULL) {
        ld->oom = 1;
        return;
    }
    c->log_file = sl_cf_strdup(ld, path);
    free(path);
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
    } else if (sl_cf_parse_uint(value, MAX_WORKERS, &n) == 0 && n > 0) {
        c->workers = (int)n;
    } else {
        sl_cf_bad(ld, kw, "auto or a number of processes from 1 to 64", value);
    }
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

/* One host[:port] of a store url (<len> bytes at <p>) into <out>; no port:
 * <dport>. Returns 0 or -1. */
static int url_hostport(const char *p, size_t len, const char *dport, struct sl_addr *out)
{
    char hostport[96];
    if (len == 0 || len + 7 >= sizeof(hostport))
        return -1;
    memcpy(hostport, p, len);
    hostport[len] = '\0';
    /* No port: the default. "[::1]" has colons but no port; "[::1]:7000" has one. */
    const char *close = hostport[0] == '[' ? strchr(hostport, ']') : NULL;
    int has_port = close ? close[1] == ':' : strchr(hostport, ':') != NULL;
    if (!has_port) {
        strcat(hostport, ":");
        strcat(hostport, dport);
    }
    return sl_parse_addr(hostport, out);
}

#define MAX_SEEDS 32 /* host:port entries of one url */

/* local | redis://[user@]host[:port][/db]
 *       | redis-cluster://[user@]host:port[,host:port...]
 *       | redis-sentinel://[user@]host:port[,host:port...]/MASTER_NAME[/db] */
static void set_url(struct loader *ld, struct section *sec, const struct keyword *kw,
                    const char *value)
{
    struct sl_store_conf *st = sec->obj;
    static const char expected[] =
        "local, redis://[user@]host[:port][/db], redis-cluster://[user@]host:port[,host:port...] "
        "or redis-sentinel://[user@]host:port[,host:port...]/MASTER_NAME[/db]";
    char *user = NULL, *master = NULL;
    struct sl_addr *seeds = NULL;
    int n_seeds = 0;
    enum sl_store_kind kind;
    const char *dport = "6379";
    if (strcmp(value, "local") == 0) {
        st->kind = SL_STORE_LOCAL;
        st->url_tls = 0;
        goto done;
    }
    char shown[256];
    const char *p;
    /* rediss://, rediss-cluster://, rediss-sentinel://: the same over TLS. */
    int tls = strncmp(value, "rediss", 6) == 0;
    const char *rest = strncmp(value, "redis", 5) == 0 ? value + 5 + tls : "";
    if (strncmp(rest, "://", 3) == 0) {
        kind = SL_STORE_REDIS;
        p = rest + 3;
    } else if (strncmp(rest, "-cluster://", 11) == 0) {
        kind = SL_STORE_CLUSTER;
        p = rest + 11;
    } else if (strncmp(rest, "-sentinel://", 12) == 0) {
        kind = SL_STORE_SENTINEL;
        p = rest + 12;
        dport = "26379";
    } else {
        sl_cf_bad(ld, kw, expected, redact_url(value, shown, sizeof(shown)));
        return;
    }
    const char *at = strchr(p, '@');
    const char *slash0 = strchr(p, '/');
    if (at != NULL && (slash0 == NULL || at < slash0)) {
        size_t ulen = (size_t)(at - p);
        if (memchr(p, ':', ulen) != NULL) {
            sl_cf_err(ld, ld->line, "url: no password in the url; put it in password_file");
            return;
        }
        if (ulen == 0 || ulen > 255) {
            sl_cf_bad(ld, kw, expected, redact_url(value, shown, sizeof(shown)));
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
    if (kind == SL_STORE_SENTINEL) {
        /* /MASTER_NAME[/db] */
        if (slash == NULL || slash[1] == '\0' || slash[1] == '/') {
            sl_cf_err(ld, ld->line, "url: redis-sentinel:// needs the master's name: "
                                    "redis-sentinel://host:port[,host:port...]/MASTER_NAME[/db]");
            goto fail;
        }
        const char *name = slash + 1, *dbs = strchr(name, '/');
        size_t nlen = dbs ? (size_t)(dbs - name) : strlen(name);
        if (nlen > 255 || (dbs != NULL && sl_cf_parse_uint(dbs + 1, 2147483647, &db) != 0))
            goto bad_url;
        if ((master = strndup(name, nlen)) == NULL) {
            ld->oom = 1;
            goto fail;
        }
    } else if (slash != NULL && sl_cf_parse_uint(slash + 1, 2147483647, &db) != 0) {
        goto bad_url;
    }
    if (kind == SL_STORE_CLUSTER && db != 0) {
        sl_cf_err(ld, ld->line, "url: a Redis Cluster has only database 0 (drop the /%llu)",
                  (unsigned long long)db);
        goto fail;
    }
    /* host:port[,host:port...] */
    if ((seeds = calloc(MAX_SEEDS, sizeof(*seeds))) == NULL) {
        ld->oom = 1;
        goto fail;
    }
    for (const char *h = p; h < p + hlen;) {
        const char *comma = memchr(h, ',', (size_t)(p + hlen - h));
        size_t len = comma ? (size_t)(comma - h) : (size_t)(p + hlen - h);
        if (n_seeds >= MAX_SEEDS) {
            sl_cf_err(ld, ld->line, "url: at most %d host:port entries", MAX_SEEDS);
            goto fail;
        }
        if (url_hostport(h, len, dport, &seeds[n_seeds]) != 0)
            goto bad_url;
        n_seeds++;
        h += len + (comma != NULL);
        if (comma != NULL && h == p + hlen)
            goto bad_url; /* a trailing comma */
    }
    if (n_seeds == 0 || (kind == SL_STORE_REDIS && n_seeds > 1))
        goto bad_url;
    st->kind = kind;
    st->url_tls = tls;
    st->addr = seeds[0];
    st->db = (int)db;
    free(st->seeds);
    st->seeds = seeds;
    st->n_seeds = n_seeds;
    seeds = NULL;
    free(st->master_name);
    st->master_name = master;
    master = NULL;
done:
    free(st->user);
    st->user = user;
    char *copy = sl_cf_strdup(ld, value);
    if (copy != NULL) {
        free(st->url);
        st->url = copy;
    }
    return;
bad_url:
    sl_cf_bad(ld, kw, expected, redact_url(value, shown, sizeof(shown)));
fail:
    free(user);
    free(master);
    free(seeds);
}

/* A secret read from the file <value> names (password_file,
 * sentinel_password_file): *<file> gets the path, *<pw> the secret (the
 * old one wiped), *<line> the line. Errors name <kw>. */
static void read_secret(struct loader *ld, const struct keyword *kw, const char *value,
                        char **file_out, char **pw_out, int *line_out)
{
    char *path = NULL, *pw = NULL;
    size_t len = 0;
    int error = 0;
    if (value[0] == '\0')
        return;
    /* Relative to the configuration file, kept absolute (abs_path()); a
     * mounted secret is often a symbolic link swapped on rotation. */
    if ((path = abs_path(ld, value)) == NULL)
        goto oom;
    pw = sl_cf_read_file(path, MAX_PASSWORD, &len, &error);
    if (pw == NULL) {
        if (error == EFBIG)
            sl_cf_err(ld, ld->line,
                      "%s: '%s' is larger than %d bytes", kw->name, path, MAX_PASSWORD);
        else
            sl_cf_err(ld, ld->line, "%s: cannot read '%s': %s", kw->name, path, strerror(error));
        goto out;
    }
    /* One trailing newline is what `echo secret > file` leaves. */
    if (len > 0 && pw[len - 1] == '\n')
        pw[--len] = '\0';
    if (len > 0 && pw[len - 1] == '\r')
        pw[--len] = '\0';
    if (len == 0) {
        sl_cf_err(ld, ld->line, "%s: '%s' is empty", kw->name, path);
        goto out;
    }
    if (strlen(pw) != len) {
        sl_cf_err(ld, ld->line, "%s: '%s' holds a NUL byte", kw->name, path);
        goto out;
    }
    char *file = sl_cf_strdup(ld, path);
    if (file == NULL)
        goto out;
    free(*file_out);
    *file_out = file;
    *line_out = ld->line;
    if (*pw_out != NULL)
        explicit_bzero(*pw_out, strlen(*pw_out));
    free(*pw_out);
    *pw_out = pw;
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

static void set_password_file(struct loader *ld, struct section *sec, const struct keyword *kw,
                              const char *value)
{
    struct sl_store_conf *st = sec->obj;
    read_secret(ld, kw, value, &st->password_file, &st->password, &st->password_file_line);
}

/* The sentinels' own password (their requirepass, or their ACL user's). */
static void set_sentinel_password_file(struct loader *ld, struct section *sec,
                                       const struct keyword *kw, const char *value)
{
    struct sl_store_conf *st = sec->obj;
    read_secret(ld, kw, value, &st->sentinel_password_file, &st->sentinel_password,
                &st->sentinel_password_file_line);
}

/* admin_token_file = PATH: the bearer token every admin request but
 * /healthz and /readyz must carry (admin/admin.h). It travels in a header
 * line, so it is visible ASCII: a space or a control byte inside would make
 * a token no client can send. */
static void set_admin_token_file(struct loader *ld, struct section *sec, const struct keyword *kw,
                                 const char *value)
{
    struct sl_conf *c = sec->obj;
    /* empty: no token, as `password_file =` is no password (the -t warning
     * still says so when admin listens beyond loopback) */
    read_secret(ld, kw, value, &c->admin_token_file, &c->admin_token, &c->admin_token_file_line);
    if (c->admin_token == NULL)
        return;
    for (const unsigned char *p = (const unsigned char *)c->admin_token; *p != 0; p++) {
        if (*p < 0x21 || *p > 0x7e) {
            sl_cf_err(ld, ld->line, "%s: '%s' holds a space, a control or a non-ASCII byte "
                                    "(a bearer token is visible ASCII)", kw->name, c->admin_token_file);
            return;
        }
    }
}

/* sentinel_password = ...: a secret is not written in the file (-T prints
 * the file; it is often world-readable). The value is not echoed. */
static void refuse_password(struct loader *ld, struct section *sec, const struct keyword *kw,
                            const char *value)
{
    (void)sec;
    (void)value;
    sl_cf_err(ld, ld->line, "%s: a password is not written in the file; put it in a file "
                            "named by %s_file", kw->name, kw->name);
}

/* tls = on | off: TLS to every store node (a rediss* url says on too);
 * sentinel_tls = on | off: whether the sentinels are asked over TLS
 * (default: as tls). Both are settled in conf/tls.c. */
static void set_onoff_opt(struct loader *ld, struct section *sec, const struct keyword *kw,
                          const char *value)
{
    int *opt = (int *)((char *)sec->obj + kw->off);
    if (strcmp(value, "on") == 0)
        *opt = 1;
    else if (strcmp(value, "off") == 0)
        *opt = 0;
    else
        sl_cf_bad(ld, kw, "on or off", value);
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
    else if (sl_cf_parse_uint(value, MAX_LEASE, &n) == 0 && n > 0)
        st->lease = (int64_t)n;
    else
        sl_cf_bad(ld, kw, "off, auto or a number of tokens from 1 to 1000000", value);
}

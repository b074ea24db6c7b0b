/* sluice — loading the configuration: the entry points, errors kept and
 * written in line order, and freeing what was loaded.
 *
 *   file text --> reader() --one line--> ini_parse_stream() --(name, value)--> handler()
 *                   |  counts lines, opens [sections],   (Debian's inih 55)      |  keyword
 *                   |  rejects long lines, syntax errors                         |  table ->
 *                   |  and knows continuation lines                              |  set_value()
 *                   +------- struct loader: current section, kind of line -------+
 *
 *   reader(), handler(): read.c; set_value() and the typed values: keys.c;
 *   each section's table and setters: sec_global.c, sec_listener.c,
 *   sec_limit.c. After the last line, sl_cf_finish() (check.c) fills derived
 *   defaults, resolves names and checks the rules that span keys or
 *   sections; errors leave sorted by line. conf/conf-i.h holds what the
 *   files share. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf-i.h"
#include "conf/conf.h"
#include "conf/names.h"
#include "core/tls.h"

/* ---- the words of each enum --- ------------------------------------------------------ */

/* Indexed by the enums of conf-t.h; declared in names.h for dump.c too. */
const char *const sl_conf_proto_names[]  = { "resp", "http", "tcp", NULL };
const char *const sl_conf_metric_names[] = { "requests", "bytes_in", "bytes_out", "connections",
                                             NULL };
const char *const sl_conf_scope_names[]  = { "identity", "connection", "global", NULL };
const char *const sl_conf_algo_names[]   = { "token_bucket", "gcra", "sliding_window",
                                             "sliding_log", "fixed_window", NULL };
const char *const sl_conf_action_names[] = { "reject", "delay", "shadow", NULL };
const char *const sl_conf_overrides_names[] = { "off", "store", NULL };
const char *const sl_conf_fail_names[]   = { "local", "open", "closed", NULL };
const char *const sl_conf_id_names[]     = { "resp_user", "client_name", "key_prefix",
                                             "client_ip", "header:NAME", "none", "tls_subject",
                                             NULL };
const char *const sl_conf_tls_verify_names[] = { "off", "optional", "on", NULL };
const char *const sl_conf_rlh_names[]    = { "draft", "legacy", "both", "none", NULL };
const char *const sl_conf_onoff_names[]  = { "off", "on", NULL };
const char *const sl_conf_pp_names[]     = { "off", "v1", "v2", NULL };
const char *const sl_conf_adaptive_names[] = { "off", "on", "shadow", NULL };
const char *const sl_conf_adaptive_share_names[] = { "store", "off", NULL };
const char *const sl_conf_dlog_names[]   = { "off", "rejections", "all", NULL };
const char *const sl_conf_alog_fmt_names[] = { "combined", "json", NULL };

/* ---- errors ---------------------------------------------------------------- */

void sl_cf_err(struct loader *ld, int line, const char *fmt, ...)
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

char *sl_cf_strdup(struct loader *ld, const char *s)
{
    char *d = strdup(s);
    if (d == NULL)
        ld->oom = 1;
    return d;
}

/* ---- loading -------------------------------------------------------------- */

/* Reads the whole of <path> (at most <cap> bytes) into a malloc'd string. */
char *sl_cf_read_file(const char *path, size_t cap, size_t *len, int *error)
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
    ld.conf = sl_cf_conf_new(name);
    if (ld.conf == NULL) {
        fprintf(errf, "%s:0: out of memory\n", name);
        return NULL;
    }
    ld.ltail = &ld.conf->listeners;
    ld.mtail = &ld.conf->limits;

    sl_cf_read(&ld);
    if (!ld.oom)
        sl_cf_finish(&ld);

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
    char *text = sl_cf_read_file(path, MAX_FILE, &len, &error);
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
        free(l->tls_cert);
        free(l->access_log);
        free(l->tls_key);
        free(l->tls_ca);
        free(l->tls_protocols);
        free(l->tls_ciphers);
        free(l->upstream_tls_ca);
        free(l->upstream_tls_sni);
        free(l->upstream_tls_cert);
        free(l->upstream_tls_key);
        sl_tls_ctx_unref(l->tls_ctx);
        sl_tls_ctx_unref(l->upstream_tls_ctx);
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
    if (c->store.sentinel_password != NULL) {
        explicit_bzero(c->store.sentinel_password, strlen(c->store.sentinel_password));
        free(c->store.sentinel_password);
    }
    free(c->store.sentinel_password_file);
    if (c->admin_token != NULL) {
        explicit_bzero(c->admin_token, strlen(c->admin_token));
        free(c->admin_token);
    }
    free(c->admin_token_file);
    free(c->store.sentinel_user);
    free(c->log_file);
    free(c->usage.file);
    free(c->store.url);
    free(c->store.user);
    free(c->store.seeds);
    free(c->store.master_name);
    free(c->store.key_prefix);
    free(c->store.tls_ca);
    free(c->store.tls_cert);
    free(c->store.tls_key);
    free(c->store.tls_sni);
    free(c->file);
    free(c);
}

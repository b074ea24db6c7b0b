/* sluice — reading the file: inih's view of each line, mirrored; sections
 * opened from their headers; the inih handler that hands each key to its
 * section's keyword table (keys.c).
 *
 * Debian's inih calls the handler without a line number, keeps only 49 bytes
 * of section and key names, and hands the reader a 200-byte buffer, so the
 * reader does the bookkeeping inih cannot: it mirrors inih's classification
 * of each line exactly (blank/comment, continuation, section, key) so the
 * handler knows what the line it is called for looked like. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ini.h>

#include "conf/conf-i.h"

static int has_blank(const char *s)
{
    for (; *s; s++)
        if (isspace((unsigned char)*s))
            return 1;
    return 0;
}

/* ---- sections ------------------------------------------------------------- */

static const char *const kind_names[] = { "sluice", "store", "listener", "limit", "usage" };

/* "[listener cache]" or "[store]", for messages. */
const char *sl_cf_title(const struct section *sec, char *buf, size_t cap)
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
int sl_cf_key_line(const struct section *sec, const char *key)
{
    int i = kw_index(sec, key);
    return i < 0 ? 0 : sec->key_line[i];
}

static struct section *new_section(struct loader *ld, enum sect_kind kind, void *obj, int line)
{
    static const struct kw_table *const tables[] = {
        [SEC_SLUICE]   = &sl_cf_sluice_keys,
        [SEC_STORE]    = &sl_cf_store_keys,
        [SEC_LISTENER] = &sl_cf_listener_keys,
        [SEC_LIMIT]    = &sl_cf_limit_keys,
        [SEC_USAGE]    = &sl_cf_usage_keys,
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
    sec->kw = tables[kind]->kw;
    sec->n_kw = tables[kind]->n;
    sec->line = line;
    ld->secs[ld->n_secs++] = sec;
    return sec;
fail:
    free(sec);
    ld->oom = 1;
    return NULL;
}

struct section *sl_cf_find_named(struct loader *ld, enum sect_kind kind, const char *name)
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

/* The reader saw "[<content>]" on the current line. */
static void open_section(struct loader *ld, const char *content, size_t clen)
{
    int line = ld->line;
    ld->cur = NULL;
    ld->state = ST_IGNORED;
    ld->last_kw = -1;
    if (clen > MAX_NAME) {
        sl_cf_err(ld, line, "section name too long (max %d bytes)", MAX_NAME);
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
        sl_cf_err(ld, line, "unknown section [%s] (expected [sluice], [store], [usage], [listener NAME] "
                            "or [limit NAME])", buf);
        return;
    }
    if (k == SEC_SLUICE || k == SEC_STORE || k == SEC_USAGE) {
        struct section **once = k == SEC_SLUICE ? &ld->sluice : k == SEC_STORE ? &ld->store : &ld->usage;
        if (words > 1) {
            sl_cf_err(ld, line, "[%s] takes no name", kind);
            return;
        }
        if (*once != NULL) {
            sl_cf_err(ld, line, "duplicate section [%s] (first on line %d)", kind, (*once)->line);
            return;
        }
        void *obj = k == SEC_SLUICE ? (void *)ld->conf
                    : k == SEC_STORE ? (void *)&ld->conf->store : (void *)&ld->conf->usage;
        if ((*once = new_section(ld, (enum sect_kind)k, obj, line)) == NULL)
            return;
        ld->cur = *once;
        ld->state = ST_OPEN;
        return;
    }
    if (words < 2) {
        sl_cf_err(ld, line, "[%s] needs a name: [%s NAME]", kind, kind);
        return;
    }
    if (words > 2) {
        sl_cf_err(ld, line, "[%s %s ...]: a section name is one word", kind, name);
        return;
    }
    if (!name_ok(name)) {
        sl_cf_err(ld, line, "invalid name '%s': use letters, digits, '_', '-' and '.'", name);
        return;
    }
    struct section *prev = sl_cf_find_named(ld, (enum sect_kind)k, name);
    if (prev != NULL) {
        sl_cf_err(ld, line, "duplicate section [%s %s] (first on line %d)", kind, name, prev->line);
        return;
    }
    void *obj = k == SEC_LISTENER ? (void *)sl_cf_new_listener(ld, name, line)
                                  : (void *)sl_cf_new_limit(ld, name, line);
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
            sl_cf_err(ld, ld->line, "syntax error");
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
            sl_cf_err(ld, ld->line, "unexpected text after ']'");
            ld->state = ST_IGNORED;
            ld->cur = NULL;
            return;
        }
        open_section(ld, s + b + 1, close - b - 1);
        return;
    }
    size_t sep = find_or_comment(s, b, e, "=:");
    if (sep == e || s[sep] == ';') {
        sl_cf_err(ld, ld->line, "syntax error");
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
        sl_cf_err(ld, ld->line, "line too long (max %zu bytes)", max);
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
        sl_cf_err(ld, ld->line, "unexpected NUL byte");
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
        sl_cf_err(ld, ld->line, "expected 'key = value'");
        return;
    }
    if (ld->state == ST_NONE) {
        sl_cf_err(ld, ld->line, "key '%s' outside of any section", name);
        return;
    }
    if (ld->state == ST_IGNORED || ld->cur == NULL)
        return;
    struct section *sec = ld->cur;
    char t[128];
    if (strlen(name) > MAX_NAME) {
        sl_cf_err(ld, ld->line, "key name too long (max %d bytes)", MAX_NAME);
        return;
    }
    int i = kw_index(sec, name);
    if (i < 0) {
        sl_cf_err(ld, ld->line, "unknown key '%s' in %s", name, sl_cf_title(sec, t, sizeof(t)));
        return;
    }
    if (sec->key_line[i] != 0) {
        sl_cf_err(ld, ld->line,
                  "duplicate key '%s' (first set on line %d)", name, sec->key_line[i]);
        return;
    }
    sec->key_line[i] = ld->line;
    ld->last_kw = i;
    sl_cf_set_value(ld, sec, &sec->kw[i], value);
}

static void on_continuation(struct loader *ld, const char *value)
{
    if (ld->state != ST_OPEN || ld->cur == NULL || ld->last_kw < 0)
        return; /* the key line was reported or skipped already */
    const struct keyword *kw = &ld->cur->kw[ld->last_kw];
    if (value[0] == '[') {
        sl_cf_err(ld, ld->line, "a section header must not be indented");
        return;
    }
    if (!(kw->flags & KW_MULTI)) {
        sl_cf_err(ld, ld->line, "unexpected indented line: it would continue '%s', which takes one "
                                "value (only commands, cost, identity, match_identity, methods, "
                                "paths, trusted_proxies and upgrades continue on indented lines)", kw->name);
        return;
    }
    /* Debian's inih 55 leaves inline comments in continuation values. */
    char *v = sl_cf_strdup(ld, value);
    if (v == NULL)
        return;
    size_t len = strlen(v);
    size_t c = find_or_comment(v, 0, len, NULL);
    while (c > 0 && isspace((unsigned char)v[c - 1]))
        c--;
    v[c] = '\0';
    sl_cf_set_value(ld, ld->cur, kw, v);
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

void sl_cf_read(struct loader *ld)
{
    int rc = ini_parse_stream(reader, ld, handler, ld);
    if (rc > 0) {
        /* The reader reports every line inih rejects; this is a safety net
         * should inih disagree with it about one. */
        int seen = 0;
        for (size_t i = 0; i < ld->n_errs; i++)
            seen |= ld->errs[i].line == rc;
        if (!seen)
            sl_cf_err(ld, rc, "syntax error");
    } else if (rc < 0) {
        ld->oom = 1;
    }
}

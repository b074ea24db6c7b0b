/* sluice — the keyword table machinery: each row of a section's table
 * (conf-i.h: struct keyword) names a key, a type and a field; the setters
 * here parse a value as its type says, check its bounds and store it, and
 * split list values into words. Keys with rules of their own (KW_FUNC) have
 * their setters beside their tables, in sec_*.c. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf-i.h"
#include "conf/units.h"

_Static_assert(sizeof(enum sl_proto) == sizeof(int), "enum fields are written as int");
_Static_assert(sizeof(enum sl_metric) == sizeof(int), "enum fields are written as int");

int sl_cf_printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || (unsigned char)*s == 0x7f)
            return 0;
    return 1;
}

int sl_cf_parse_uint(const char *s, uint64_t max, uint64_t *out)
{
    size_t n = strspn(s, "0123456789");
    uint64_t v;
    /* sl_parse_size() on plain digits is an overflow-checked strtoull. */
    if (n == 0 || s[n] != '\0' || sl_parse_size(s, &v) != 0 || v > max)
        return -1;
    *out = v;
    return 0;
}

/* ---- value setters -------------------------------------------------------- */

void sl_cf_bad(struct loader *ld, const struct keyword *kw, const char *expected,
               const char *value)
{
    sl_cf_err(ld, ld->line, "%s: expected %s, got '%s'", kw->name, expected, value);
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
        sl_cf_bad(ld, kw, expected[kw->type], value);
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
            sl_cf_err(ld, ld->line, "%s: must be at least %s, got '%s'", kw->name, lo, value);
        else
            sl_cf_err(ld, ld->line, "%s: must be at most %s, got '%s'", kw->name, hi, value);
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
    sl_cf_bad(ld, kw, what, value);
}

void sl_cf_set_string(struct loader *ld, struct section *sec, const struct keyword *kw,
                      const char *value)
{
    /* An empty value keeps the default: the documented `replaces =` form. */
    if (value[0] == '\0')
        return;
    if (!sl_cf_printable(value) || strlen(value) > kw->max) {
        char what[64];
        snprintf(what, sizeof(what), "one word of at most %llu bytes", (unsigned long long)kw->max);
        sl_cf_bad(ld, kw, what, value);
        return;
    }
    char **field = (char **)((char *)sec->obj + kw->off);
    char *copy = sl_cf_strdup(ld, value);
    if (copy == NULL)
        return;
    free(*field);
    *field = copy;
}

static void set_addr(struct loader *ld, struct section *sec, const struct keyword *kw,
                     const char *value)
{
    if (sl_parse_addr(value, (struct sl_addr *)((char *)sec->obj + kw->off)) != 0)
        sl_cf_bad(ld, kw, "an address like 127.0.0.1:6380, [::1]:6380 or *:6380", value);
}

/* Appends a copy of <s> to the array <*v> of <*n> entries. */
int sl_cf_push(struct loader *ld, char ***v, int *n, const char *s)
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

int sl_cf_listed(char *const *v, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (strcmp(v[i], s) == 0)
            return 1;
    return 0;
}

/* Calls <fn> for each blank-separated word of <value>, stopping at the first
 * word it rejects. */
void sl_cf_each_word(struct loader *ld, struct section *sec, const struct keyword *kw,
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
            sl_cf_err(ld, ld->line, "%s: entry too long (%zu bytes): '%.20s...'", kw->name, n, p);
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
        sl_cf_err(ld, ld->line, "%s: '%s' is longer than %llu bytes", kw->name, w,
                  (unsigned long long)kw->max);
        return -1;
    }
    /* On an indented line, '[' would be read as an indented section header
     * and '#' or ';' as a comment; refusing them everywhere keeps the -T
     * output, which wraps long lists, reloadable. */
    if (strchr("[#;", w[0]) != NULL) {
        sl_cf_err(ld, ld->line, "%s: an entry cannot start with '%c', got '%s'", kw->name, w[0], w);
        return -1;
    }
    if (sl_cf_listed(*v, *n, w))
        return 0;
    if (*n >= MAX_LIST) {
        sl_cf_err(ld, ld->line, "%s: more than %d entries", kw->name, MAX_LIST);
        return -1;
    }
    return sl_cf_push(ld, v, n, w);
}

static void set_list(struct loader *ld, struct section *sec, const struct keyword *kw,
                     const char *value)
{
    sl_cf_each_word(ld, sec, kw, value, list_word);
}

void sl_cf_set_value(struct loader *ld, struct section *sec, const struct keyword *kw,
                     const char *value)
{
    switch (kw->type) {
    case KW_DURATION:
    case KW_SIZE:
    case KW_U64:    set_number(ld, sec, kw, value); break;
    case KW_ENUM:   set_enum(ld, sec, kw, value); break;
    case KW_STRING: sl_cf_set_string(ld, sec, kw, value); break;
    case KW_ADDR:   set_addr(ld, sec, kw, value); break;
    case KW_LIST:   set_list(ld, sec, kw, value); break;
    case KW_FUNC:   kw->set(ld, sec, kw, value); break;
    }
}

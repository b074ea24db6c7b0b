/* sluice — the Prometheus text format 0.0.4 writer behind /metrics.
 *
 *   # HELP sluice_requests_total Requests seen, per listener.
 *   # TYPE sluice_requests_total counter
 *   sluice_requests_total{listener="cache"} 1027
 *   sluice_store_latency_seconds_bucket{le="0.0001"} 3
 *   sluice_store_latency_seconds_bucket{le="+Inf"} 9
 *   sluice_store_latency_seconds_sum 0.0042
 *   sluice_store_latency_seconds_count 9
 *
 * The writer only formats: names are the caller's (they are constants in the
 * code, not input), label values and HELP text are escaped here. Write errors
 * stick in the FILE (ferror) for the owner of the stream to check. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "admin/admin.h"

struct sl_metrics {
    FILE *out;   /* borrowed from the caller of sl_metrics_open() */
};

struct sl_metrics *sl_metrics_open(FILE *out)
{
    struct sl_metrics *m = calloc(1, sizeof(*m));
    if (m != NULL)
        m->out = out;
    return m;
}

void sl_metrics_close(struct sl_metrics *m)
{
    free(m);
}

/* Writes <s> with '\\' and newline escaped, and '"' too when <quote>. */
static void put_escaped(FILE *f, const char *s, int quote)
{
    for (; *s != '\0'; s++) {
        if (*s == '\\')
            fputs("\\\\", f);
        else if (*s == '\n')
            fputs("\\n", f);
        else if (*s == '"' && quote)
            fputs("\\\"", f);
        else
            fputc(*s, f);
    }
}

size_t sl_metrics_fmt_f64(char *out, size_t cap, double v)
{
    int n;
    if (isnan(v))
        n = snprintf(out, cap, "NaN");
    else if (isinf(v))
        n = snprintf(out, cap, v > 0 ? "+Inf" : "-Inf");
    else {
        /* The shortest of 15, 16, 17 significant digits that reads back as
         * <v>: 0.1 prints "0.1", not "0.10000000000000001". 15 digits always
         * survive a decimal -> double -> decimal trip, so nothing shorter
         * than what %.15g gives (trailing zeros stripped) can exist. */
        n = 0;
        for (int p = 15; p <= 17; p++) {
            n = snprintf(out, cap, "%.*g", p, v);
            if (p == 17 || strtod(out, NULL) == v)
                break;
        }
    }
    return n < 0 ? 0 : (size_t)n;
}

/* Writes "{k="v",...,le="<le>"}", or nothing when there are no labels. */
static void put_labels(FILE *f, const char *const *labels, const char *le)
{
    int n = 0;
    for (; labels != NULL && labels[0] != NULL && labels[1] != NULL; labels += 2) {
        fputc(n++ ? ',' : '{', f);
        fputs(labels[0], f);
        fputs("=\"", f);
        put_escaped(f, labels[1], 1);
        fputc('"', f);
    }
    if (le != NULL) {
        fputc(n++ ? ',' : '{', f);
        fprintf(f, "le=\"%s\"", le);
    }
    if (n > 0)
        fputc('}', f);
}

void sl_metrics_family(struct sl_metrics *m, const char *name, const char *type,
                       const char *help)
{
    fprintf(m->out, "# HELP %s ", name);
    put_escaped(m->out, help != NULL ? help : "", 0);
    fprintf(m->out, "\n# TYPE %s %s\n", name, type);
}

void sl_metrics_u64(struct sl_metrics *m, const char *name, const char *const *labels,
                    uint64_t v)
{
    fputs(name, m->out);
    put_labels(m->out, labels, NULL);
    fprintf(m->out, " %" PRIu64 "\n", v);
}

void sl_metrics_f64(struct sl_metrics *m, const char *name, const char *const *labels,
                    double v)
{
    char num[40];
    sl_metrics_fmt_f64(num, sizeof(num), v);
    fputs(name, m->out);
    put_labels(m->out, labels, NULL);
    fprintf(m->out, " %s\n", num);
}

void sl_metrics_histogram(struct sl_metrics *m, const char *name, const char *const *labels,
                          const double *bounds, const uint64_t *counts, int n, double sum)
{
    FILE *f = m->out;
    uint64_t cum = 0;
    char le[40];
    if (n < 0)
        n = 0;
    for (int i = 0; i <= n; i++) {
        cum += counts[i];
        if (i < n)
            sl_metrics_fmt_f64(le, sizeof(le), bounds[i]);
        else
            strcpy(le, "+Inf");
        fprintf(f, "%s_bucket", name);
        put_labels(f, labels, le);
        fprintf(f, " %" PRIu64 "\n", cum);
    }
    sl_metrics_fmt_f64(le, sizeof(le), sum);
    fprintf(f, "%s_sum", name);
    put_labels(f, labels, NULL);
    fprintf(f, " %s\n", le);
    /* _count is the +Inf bucket by definition: the same number. */
    fprintf(f, "%s_count", name);
    put_labels(f, labels, NULL);
    fprintf(f, " %" PRIu64 "\n", cum);
}

/* ---- merging the documents of several workers --------------------------- */

struct mline {           /* one sample line of one worker */
    const char *p;
    size_t      len;
    int         worker;
};

struct mfamily {
    const char   *name;  /* into a worker's text */
    size_t        nlen;
    const char   *help;  /* the "# HELP" line, or NULL */
    size_t        hlen;
    const char   *type;  /* the "# TYPE" line, or NULL */
    size_t        tlen;
    struct mline *lines;
    size_t        n, cap;
};

struct mdoc {
    struct mfamily *fams;
    size_t          n, cap;
    int             oom;
};

static size_t name_len(const char *p, size_t len)
{
    size_t i = 0;
    while (i < len && (p[i] == '_' || p[i] == ':' || (p[i] >= 'a' && p[i] <= 'z') ||
                       (p[i] >= 'A' && p[i] <= 'Z') || (p[i] >= '0' && p[i] <= '9')))
        i++;
    return i;
}

static struct mfamily *family(struct mdoc *d, const char *name, size_t nlen)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->fams[i].nlen == nlen && memcmp(d->fams[i].name, name, nlen) == 0)
            return &d->fams[i];
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 64;
        struct mfamily *f = realloc(d->fams, cap * sizeof(*f));
        if (f == NULL) {
            d->oom = 1;
            return NULL;
        }
        d->fams = f;
        d->cap = cap;
    }
    struct mfamily *f = &d->fams[d->n++];
    memset(f, 0, sizeof(*f));
    f->name = name;
    f->nlen = nlen;
    return f;
}

static void add_line(struct mdoc *d, struct mfamily *f, const char *p, size_t len, int worker)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        struct mline *l = realloc(f->lines, cap * sizeof(*l));
        if (l == NULL) {
            d->oom = 1;
            return;
        }
        f->lines = l;
        f->cap = cap;
    }
    f->lines[f->n++] = (struct mline){ p, len, worker };
}

/* "# HELP name ..." / "# TYPE name ...": the family it opens, else NULL. */
static struct mfamily *header(struct mdoc *d, const char *p, size_t len, int *is_type)
{
    if (len < 8 || (memcmp(p, "# HELP ", 7) != 0 && memcmp(p, "# TYPE ", 7) != 0))
        return NULL;
    *is_type = p[2] == 'T';
    size_t nlen = name_len(p + 7, len - 7);
    return nlen > 0 ? family(d, p + 7, nlen) : NULL;
}

static void parse_doc(struct mdoc *d, const char *text, size_t len, int worker)
{
    struct mfamily *cur = NULL;
    size_t pos = 0;
    while (pos < len && !d->oom) {
        const char *p = text + pos, *nl = memchr(p, '\n', len - pos);
        size_t n = nl != NULL ? (size_t)(nl - p) : len - pos;
        pos += n + 1;
        if (n == 0)
            continue;
        if (p[0] == '#') {
            int is_type = 0;
            struct mfamily *f = header(d, p, n, &is_type);
            if (f == NULL)
                continue; /* another comment */
            cur = f;
            if (is_type && f->type == NULL) {
                f->type = p;
                f->tlen = n;
            } else if (!is_type && f->help == NULL) {
                f->help = p;
                f->hlen = n;
            }
            continue;
        }
        size_t nlen = name_len(p, n);
        if (nlen == 0)
            continue;
        /* A sample belongs to the family above it (name_bucket, name_sum and
         * name_count to name); one with no header above it to its own name. */
        if (cur == NULL || nlen < cur->nlen || memcmp(p, cur->name, cur->nlen) != 0)
            cur = family(d, p, nlen);
        if (cur != NULL)
            add_line(d, cur, p, n, worker);
    }
}

int sl_metrics_merge(FILE *out, const char *const *texts, const size_t *lens, int n)
{
    struct mdoc d = { 0 };
    for (int w = 0; w < n; w++)
        if (texts[w] != NULL)
            parse_doc(&d, texts[w], lens[w], w);
    for (size_t i = 0; i < d.n && !d.oom; i++) {
        struct mfamily *f = &d.fams[i];
        if (f->help != NULL)
            fprintf(out, "%.*s\n", (int)f->hlen, f->help);
        if (f->type != NULL)
            fprintf(out, "%.*s\n", (int)f->tlen, f->type);
        for (size_t k = 0; k < f->n; k++) {
            const struct mline *l = &f->lines[k];
            size_t nlen = name_len(l->p, l->len);
            const char *rest = l->p + nlen;
            size_t rlen = l->len - nlen;
            if (rlen > 0 && rest[0] == '{')
                fprintf(out, "%.*s{worker=\"%d\"%s%.*s\n", (int)nlen, l->p, l->worker,
                        rlen > 1 && rest[1] == '}' ? "" : ",", (int)(rlen - 1), rest + 1);
            else
                fprintf(out, "%.*s{worker=\"%d\"}%.*s\n", (int)nlen, l->p, l->worker, (int)rlen,
                        rest);
        }
    }
    int rc = d.oom ? -1 : 0;
    for (size_t i = 0; i < d.n; i++)
        free(d.fams[i].lines);
    free(d.fams);
    return rc;
}

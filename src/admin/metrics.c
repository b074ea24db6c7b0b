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

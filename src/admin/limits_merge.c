/* sluice — the workers' limits API answers added up (limits_merge.h).
 *
 * A field is found by its name in quotes right after '{' or ',': inside a
 * JSON string a quote is always escaped (\"), so a client's identity can
 * never pass for a field. */
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "admin/limits_merge.h"

static const char *const sum_keys[] = {
    "requests", "rejected", "delayed", "bytes_in", "bytes_out", "connections", "allowed",
    "shadow_rejected", "fallback", "leased", "held", "local_buckets", "store_entries",
    "identities_counted", "store_keys_deleted",
};
#define N_SUM (sizeof(sum_keys) / sizeof(*sum_keys))
#define N_COUNTS 6 /* the per-identity ones: the first six above */

/* At <p> (in [s, end)): a summed field "key":digits after '{' or ','?
 * Returns its key's index and sets *num to the digits' start, else -1. */
static int field_at(const char *s, const char *p, const char *end, const char **num)
{
    if (*p != '"' || p == s || (p[-1] != '{' && p[-1] != ','))
        return -1;
    for (size_t k = 0; k < N_SUM; k++) {
        size_t kl = strlen(sum_keys[k]);
        if ((size_t)(end - p) > kl + 3 && memcmp(p + 1, sum_keys[k], kl) == 0 &&
            p[kl + 1] == '"' && p[kl + 2] == ':' && p[kl + 3] >= '0' && p[kl + 3] <= '9') {
            *num = p + kl + 3;
            return (int)k;
        }
    }
    return -1;
}

/* The value of the <rank>-th summed field in <t> (<len> bytes): 0 when
 * there is none. */
static uint64_t nth_value(const char *t, size_t len, size_t rank)
{
    const char *end = t + len, *num;
    size_t seen = 0;
    for (const char *p = t; p < end; p++) {
        if (field_at(t, p, end, &num) < 0)
            continue;
        if (seen++ == rank)
            return strtoull(num, NULL, 10);
        p = num;
    }
    return 0;
}

void sl_limits_merge_sum(FILE *out, const char *const *texts, const size_t *lens, int n)
{
    int first = -1;
    for (int i = 0; i < n && first < 0; i++)
        if (texts[i] != NULL)
            first = i;
    if (first < 0)
        return;
    const char *t = texts[first], *end = t + lens[first], *num, *from = t;
    size_t rank = 0;
    for (const char *p = t; p < end; p++) {
        if (field_at(t, p, end, &num) < 0)
            continue;
        uint64_t sum = 0;
        for (int i = 0; i < n; i++)
            if (texts[i] != NULL)
                sum += nth_value(texts[i], lens[i], rank);
        rank++;
        fwrite(from, 1, (size_t)(num - from), out);
        fprintf(out, "%" PRIu64, sum);
        p = num;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        from = p;
        p--;
    }
    fwrite(from, 1, (size_t)(end - from), out);
}

/* ---- top --------------------------------------------------------------- */

struct entry {
    const char *id;     /* the identity as written, JSON-escaped, quotes included */
    size_t      idlen;
    uint64_t    c[N_COUNTS];
};

/* The end of the JSON string starting at the quote <p>, past its closing
 * quote, or NULL. */
static const char *string_end(const char *p, const char *end)
{
    for (p++; p < end; p++) {
        if (*p == '\\')
            p++;
        else if (*p == '"')
            return p + 1;
    }
    return NULL;
}

static int by_id(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;
    size_t n = x->idlen < y->idlen ? x->idlen : y->idlen;
    int c = memcmp(x->id, y->id, n);
    return c != 0 ? c : (x->idlen > y->idlen) - (x->idlen < y->idlen);
}

static int sort_by; /* the count qsort orders by (one merge at a time, one loop) */

static int by_count(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;
    if (x->c[sort_by] != y->c[sort_by])
        return x->c[sort_by] < y->c[sort_by] ? 1 : -1;
    return by_id(a, b);
}

/* Appends the entries of one ?top answer <t> to *<es>. Returns 0 or -1. */
static int parse_top(const char *t, size_t len, struct entry **es, size_t *n, size_t *cap)
{
    const char *end = t + len;
    const char *p = strstr(t, ",\"identities\":[");
    if (p == NULL || p >= end)
        return -1;
    p += 15;
    while (p < end && *p == '{') {
        if ((size_t)(end - p) < 13 || memcmp(p, "{\"identity\":\"", 13) != 0)
            return -1;
        const char *id = p + 12, *idend = string_end(id, end);
        if (idend == NULL)
            return -1;
        if (*n == *cap) {
            size_t nc = *cap ? *cap * 2 : 256;
            struct entry *ne = realloc(*es, nc * sizeof(*ne));
            if (ne == NULL)
                return -1;
            *es = ne;
            *cap = nc;
        }
        struct entry *e = &(*es)[(*n)++];
        e->id = id;
        e->idlen = (size_t)(idend - id);
        p = idend;
        for (int k = 0; k < N_COUNTS; k++) {
            char want[32];
            int wl = snprintf(want, sizeof(want), ",\"%s\":", sum_keys[k]);
            if ((size_t)(end - p) < (size_t)wl || memcmp(p, want, (size_t)wl) != 0)
                return -1;
            p += wl;
            char *q;
            e->c[k] = strtoull(p, &q, 10);
            p = q;
        }
        if (p >= end || *p != '}')
            return -1;
        p++;
        if (p < end && *p == ',')
            p++;
    }
    return 0;
}

int sl_limits_merge_top(FILE *out, const char *const *texts, const size_t *lens, int n,
                        size_t top)
{
    struct entry *es = NULL;
    size_t ne = 0, cap = 0;
    uint64_t counted = 0;
    int first = -1;
    for (int i = 0; i < n; i++) {
        if (texts[i] == NULL)
            continue;
        if (first < 0)
            first = i;
        if (parse_top(texts[i], lens[i], &es, &ne, &cap) < 0) {
            free(es);
            return -1;
        }
        const char *c = strstr(texts[i], ",\"identities_counted\":");
        if (c != NULL)
            counted += strtoull(c + 22, NULL, 10);
    }
    if (first < 0) {
        free(es);
        return -1;
    }
    /* the same identity from several workers: one entry, added up */
    if (ne > 0)
        qsort(es, ne, sizeof(*es), by_id);
    size_t m = 0;
    for (size_t i = 0; i < ne; i++) {
        if (m > 0 && by_id(&es[m - 1], &es[i]) == 0) {
            for (int k = 0; k < N_COUNTS; k++)
                es[m - 1].c[k] += es[i].c[k];
        } else {
            es[m++] = es[i];
        }
    }
    const char *t = texts[first];
    const char *byp = strstr(t, ",\"by\":\"");
    sort_by = 0;
    for (int k = 0; byp != NULL && k < N_COUNTS; k++) {
        size_t kl = strlen(sum_keys[k]);
        if (strncmp(byp + 7, sum_keys[k], kl) == 0 && byp[7 + kl] == '"')
            sort_by = k;
    }
    if (m > 0)
        qsort(es, m, sizeof(*es), by_count);
    /* the head up to "identities_counted": as the first answer wrote it */
    const char *c = strstr(t, ",\"identities_counted\":");
    if (c == NULL) {
        free(es);
        return -1;
    }
    fwrite(t, 1, (size_t)(c - t), out);
    fprintf(out, ",\"identities_counted\":%" PRIu64 ",\"identities\":[", counted);
    for (size_t i = 0; i < m && i < top; i++) {
        fprintf(out, "%s{\"identity\":%.*s", i ? "," : "", (int)es[i].idlen, es[i].id);
        for (int k = 0; k < N_COUNTS; k++)
            fprintf(out, ",\"%s\":%" PRIu64, sum_keys[k], es[i].c[k]);
        fputc('}', out);
    }
    fputs("]}\n", out);
    free(es);
    return 0;
}

/* The Prometheus text writer: exact text for each kind of sample. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin/admin.h"

/* A writer onto a memory stream; done() returns the text written. */
struct sink {
    FILE              *f;
    char              *text;
    size_t             len;
    struct sl_metrics *m;
};

static struct sl_metrics *sink_open(struct sink *s)
{
    memset(s, 0, sizeof(*s));
    s->f = open_memstream(&s->text, &s->len);
    assert_non_null(s->f);
    s->m = sl_metrics_open(s->f);
    assert_non_null(s->m);
    return s->m;
}

static const char *sink_done(struct sink *s)
{
    sl_metrics_close(s->m);
    assert_int_equal(ferror(s->f), 0);
    assert_int_equal(fclose(s->f), 0);
    return s->text;
}

static void expect_text(struct sink *s, const char *want)
{
    const char *got = sink_done(s);
    if (strcmp(got, want) != 0)
        fprintf(stderr, "--- want\n%s--- got\n%s---\n", want, got);
    assert_string_equal(got, want);
    free(s->text);
}

static void test_counter_without_labels(void **state)
{
    (void)state;
    struct sink s;
    struct sl_metrics *m = sink_open(&s);
    sl_metrics_family(m, "sluice_connections_total", "counter", "Connections accepted.");
    sl_metrics_u64(m, "sluice_connections_total", NULL, 42);
    expect_text(&s, "# HELP sluice_connections_total Connections accepted.\n"
                    "# TYPE sluice_connections_total counter\n"
                    "sluice_connections_total 42\n");
}

static void test_counter_with_labels(void **state)
{
    (void)state;
    struct sink s;
    struct sl_metrics *m = sink_open(&s);
    static const char *const one[] = { "listener", "cache", NULL };
    static const char *const two[] = { "listener", "cache", "limit", "per_user", NULL };
    static const char *const none[] = { NULL };
    sl_metrics_family(m, "sluice_requests_total", "counter", "Requests.");
    sl_metrics_u64(m, "sluice_requests_total", one, 7);
    sl_metrics_u64(m, "sluice_requests_total", two, 0);
    sl_metrics_u64(m, "sluice_requests_total", none, 1); /* an empty list: no braces */
    expect_text(&s, "# HELP sluice_requests_total Requests.\n"
                    "# TYPE sluice_requests_total counter\n"
                    "sluice_requests_total{listener=\"cache\"} 7\n"
                    "sluice_requests_total{listener=\"cache\",limit=\"per_user\"} 0\n"
                    "sluice_requests_total 1\n");
}

static void test_escaping(void **state)
{
    (void)state;
    struct sink s;
    struct sl_metrics *m = sink_open(&s);
    static const char *const lb[] = { "listener", "a\\b\"c\nd", NULL };
    /* HELP escapes backslash and newline but leaves quotes alone. */
    sl_metrics_family(m, "sluice_up", "gauge", "Up \"or\" not\\down\nsecond line.");
    sl_metrics_u64(m, "sluice_up", lb, 1);
    expect_text(&s, "# HELP sluice_up Up \"or\" not\\\\down\\nsecond line.\n"
                    "# TYPE sluice_up gauge\n"
                    "sluice_up{listener=\"a\\\\b\\\"c\\nd\"} 1\n");
}

static void test_u64_extremes(void **state)
{
    (void)state;
    struct sink s;
    struct sl_metrics *m = sink_open(&s);
    sl_metrics_family(m, "sluice_bytes_in_total", "counter", "Bytes.");
    sl_metrics_u64(m, "sluice_bytes_in_total", NULL, UINT64_MAX);
    sl_metrics_u64(m, "sluice_bytes_in_total", NULL, (uint64_t)1 << 53 | 1); /* not a double */
    sl_metrics_u64(m, "sluice_bytes_in_total", NULL, 0);
    expect_text(&s, "# HELP sluice_bytes_in_total Bytes.\n"
                    "# TYPE sluice_bytes_in_total counter\n"
                    "sluice_bytes_in_total 18446744073709551615\n"
                    "sluice_bytes_in_total 9007199254740993\n"
                    "sluice_bytes_in_total 0\n");
}

static void test_f64_values(void **state)
{
    (void)state;
    struct sink s;
    struct sl_metrics *m = sink_open(&s);
    sl_metrics_family(m, "sluice_g", "gauge", "");
    sl_metrics_f64(m, "sluice_g", NULL, 0.1);
    sl_metrics_f64(m, "sluice_g", NULL, 1.5);
    sl_metrics_f64(m, "sluice_g", NULL, 0.0);
    sl_metrics_f64(m, "sluice_g", NULL, -2.25);
    sl_metrics_f64(m, "sluice_g", NULL, 1e-5);
    sl_metrics_f64(m, "sluice_g", NULL, 1e300);
    sl_metrics_f64(m, "sluice_g", NULL, INFINITY);
    sl_metrics_f64(m, "sluice_g", NULL, -INFINITY);
    sl_metrics_f64(m, "sluice_g", NULL, NAN);
    sl_metrics_f64(m, "sluice_g", NULL, 0.1 + 0.2); /* needs 17 digits */
    expect_text(&s, "# HELP sluice_g \n"
                    "# TYPE sluice_g gauge\n"
                    "sluice_g 0.1\n"
                    "sluice_g 1.5\n"
                    "sluice_g 0\n"
                    "sluice_g -2.25\n"
                    "sluice_g 1e-05\n"
                    "sluice_g 1e+300\n"
                    "sluice_g +Inf\n"
                    "sluice_g -Inf\n"
                    "sluice_g NaN\n"
                    "sluice_g 0.30000000000000004\n");
}

/* Every finite double prints in a form that reads back as the same double. */
static void test_f64_round_trip(void **state)
{
    (void)state;
    uint64_t x = 88172645463325252ull; /* xorshift64 */
    char buf[40];
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        double v;
        memcpy(&v, &x, sizeof(v));
        if (!isfinite(v))
            continue;
        size_t n = sl_metrics_fmt_f64(buf, sizeof(buf), v);
        assert_true(n > 0 && n < 32);
        assert_true(strtod(buf, NULL) == v);
    }
    static const double shortest[] = { 0.0001, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                       0.5, 1, 2.5, 5, 10, 123456789012345.0 };
    static const char *const text[] = { "0.0001", "0.001", "0.005", "0.01", "0.025", "0.05",
                                        "0.1", "0.25", "0.5", "1", "2.5", "5", "10",
                                        "123456789012345" };
    for (size_t i = 0; i < sizeof(shortest) / sizeof(shortest[0]); i++) {
        sl_metrics_fmt_f64(buf, sizeof(buf), shortest[i]);
        assert_string_equal(buf, text[i]);
    }
}

static void test_histogram(void **state)
{
    (void)state;
    struct sink s;
    struct sl_metrics *m = sink_open(&s);
    static const char *const lb[] = { "listener", "cache", NULL };
    static const double bounds[] = { 0.0001, 0.001, 0.01 };
    static const uint64_t counts[] = { 3, 0, 5, 2 }; /* the last: above 0.01 */
    sl_metrics_family(m, "sluice_store_latency_seconds", "histogram", "Store round trips.");
    sl_metrics_histogram(m, "sluice_store_latency_seconds", lb, bounds, counts, 3, 0.0425);
    expect_text(&s, "# HELP sluice_store_latency_seconds Store round trips.\n"
                    "# TYPE sluice_store_latency_seconds histogram\n"
                    "sluice_store_latency_seconds_bucket{listener=\"cache\",le=\"0.0001\"} 3\n"
                    "sluice_store_latency_seconds_bucket{listener=\"cache\",le=\"0.001\"} 3\n"
                    "sluice_store_latency_seconds_bucket{listener=\"cache\",le=\"0.01\"} 8\n"
                    "sluice_store_latency_seconds_bucket{listener=\"cache\",le=\"+Inf\"} 10\n"
                    "sluice_store_latency_seconds_sum{listener=\"cache\"} 0.0425\n"
                    "sluice_store_latency_seconds_count{listener=\"cache\"} 10\n");
}

static void test_histogram_without_labels(void **state)
{
    (void)state;
    struct sink s;
    struct sl_metrics *m = sink_open(&s);
    static const double bounds[] = { 0.5 };
    static const uint64_t counts[] = { 0, 0 };
    sl_metrics_family(m, "sluice_delay_seconds", "histogram", "Delays.");
    sl_metrics_histogram(m, "sluice_delay_seconds", NULL, bounds, counts, 1, 0);
    /* no finite bounds at all: only +Inf */
    static const uint64_t only[] = { 4 };
    sl_metrics_histogram(m, "sluice_delay_seconds", NULL, NULL, only, 0, 2);
    expect_text(&s, "# HELP sluice_delay_seconds Delays.\n"
                    "# TYPE sluice_delay_seconds histogram\n"
                    "sluice_delay_seconds_bucket{le=\"0.5\"} 0\n"
                    "sluice_delay_seconds_bucket{le=\"+Inf\"} 0\n"
                    "sluice_delay_seconds_sum 0\n"
                    "sluice_delay_seconds_count 0\n"
                    "sluice_delay_seconds_bucket{le=\"+Inf\"} 4\n"
                    "sluice_delay_seconds_sum 2\n"
                    "sluice_delay_seconds_count 4\n");
}

/* The +Inf bucket is the sum of every per-bucket count and equals _count,
 * even when the counts are huge. */
static void test_histogram_inf_equals_count(void **state)
{
    (void)state;
    struct sink s;
    struct sl_metrics *m = sink_open(&s);
    static const double bounds[] = { 1, 2, 4, 8 };
    static const uint64_t counts[] = { 1ull << 40, 17, 0, 99, (1ull << 62) + 5 };
    sl_metrics_histogram(m, "h", NULL, bounds, counts, 4, 1e9);
    const char *text = sink_done(&s);
    uint64_t total = 0;
    for (int i = 0; i < 5; i++)
        total += counts[i];
    char want[128];
    snprintf(want, sizeof(want), "h_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)total);
    assert_non_null(strstr(text, want));
    snprintf(want, sizeof(want), "h_count %llu\n", (unsigned long long)total);
    assert_non_null(strstr(text, want));
    assert_non_null(strstr(text, "h_sum 1000000000\n"));
    /* cumulative counts never go down */
    uint64_t prev = 0;
    int buckets = 0;
    for (const char *p = strstr(text, "h_bucket"); p != NULL; p = strstr(p + 1, "h_bucket")) {
        const char *sp = strchr(p, ' ');
        uint64_t v = strtoull(sp + 1, NULL, 10);
        assert_true(v >= prev);
        prev = v;
        buckets++;
    }
    assert_int_equal(buckets, 5);
    assert_true(prev == total);
    free(s.text);
}

/* Several workers' documents become one: each family once, every sample
 * labelled with its worker, a missing worker left out. */
static void test_merge(void **state)
{
    (void)state;
    const char *w0 = "# HELP a_total A.\n# TYPE a_total counter\n"
                     "a_total{listener=\"x\"} 1\na_total{listener=\"y\"} 2\n"
                     "# HELP up Up.\n# TYPE up gauge\nup 1\n"
                     "# HELP lat Latency.\n# TYPE lat histogram\n"
                     "lat_bucket{le=\"+Inf\"} 3\nlat_sum 0.5\nlat_count 3\n";
    const char *w2 = "# HELP a_total A.\n# TYPE a_total counter\n"
                     "a_total{listener=\"x\"} 10\n"
                     "# HELP only2 Only in worker 2.\n# TYPE only2 gauge\nonly2{} 7\n"
                     "# HELP up Up.\n# TYPE up gauge\nup 0\n"
                     "# HELP lat Latency.\n# TYPE lat histogram\n"
                     "lat_bucket{le=\"+Inf\"} 4\nlat_sum 1\nlat_count 4\n";
    const char *texts[3] = { w0, NULL, w2 };
    size_t lens[3] = { strlen(w0), 0, strlen(w2) };
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    assert_non_null(f);
    assert_int_equal(sl_metrics_merge(f, texts, lens, 3), 0);
    assert_int_equal(fclose(f), 0);
    const char *want =
        "# HELP a_total A.\n# TYPE a_total counter\n"
        "a_total{worker=\"0\",listener=\"x\"} 1\n"
        "a_total{worker=\"0\",listener=\"y\"} 2\n"
        "a_total{worker=\"2\",listener=\"x\"} 10\n"
        "# HELP up Up.\n# TYPE up gauge\n"
        "up{worker=\"0\"} 1\n"
        "up{worker=\"2\"} 0\n"
        "# HELP lat Latency.\n# TYPE lat histogram\n"
        "lat_bucket{worker=\"0\",le=\"+Inf\"} 3\nlat_sum{worker=\"0\"} 0.5\n"
        "lat_count{worker=\"0\"} 3\n"
        "lat_bucket{worker=\"2\",le=\"+Inf\"} 4\nlat_sum{worker=\"2\"} 1\n"
        "lat_count{worker=\"2\"} 4\n"
        "# HELP only2 Only in worker 2.\n# TYPE only2 gauge\n"
        "only2{worker=\"2\"} 7\n";
    if (strcmp(out, want) != 0)
        fprintf(stderr, "--- want\n%s--- got\n%s---\n", want, out);
    assert_string_equal(out, want);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counter_without_labels),
        cmocka_unit_test(test_counter_with_labels),
        cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_u64_extremes),
        cmocka_unit_test(test_f64_values),
        cmocka_unit_test(test_f64_round_trip),
        cmocka_unit_test(test_histogram),
        cmocka_unit_test(test_histogram_without_labels),
        cmocka_unit_test(test_histogram_inf_equals_count),
        cmocka_unit_test(test_merge),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests for src/conf/units.c: every unit, the boundaries, overflow,
 * junk, case, and that each formatter's output parses back to its input. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <string.h>

#include "conf/units.h"

#define S  1000000ULL
#define MIN (60 * S)
#define H  (3600 * S)
#define D  (86400 * S)

static uint64_t dur(const char *s)
{
    uint64_t v = 12345;
    assert_int_equal(sl_parse_duration(s, &v), 0);
    return v;
}

static void dur_bad(const char *s)
{
    uint64_t v = 777;
    assert_int_equal(sl_parse_duration(s, &v), -1);
    assert_int_equal(v, 777); /* untouched on error */
}

static void test_duration_units(void **state)
{
    (void)state;
    assert_int_equal(dur("0"), 0);
    assert_int_equal(dur("0ms"), 0);
    assert_int_equal(dur("100us"), 100);
    assert_int_equal(dur("250ms"), 250000);
    assert_int_equal(dur("2s"), 2 * S);
    assert_int_equal(dur("5m"), 5 * MIN);
    assert_int_equal(dur("1h"), H);
    assert_int_equal(dur("1d"), D);
    assert_int_equal(dur("30"), 30 * S); /* bare number: seconds */
    assert_int_equal(dur("007s"), 7 * S);
}

static void test_duration_bad(void **state)
{
    (void)state;
    const char *bad[] = { "", "s", "ms", "abc", "1x", "1 s", " 1s", "1s ", "-1s", "+1s",
                          "1.5s", "1S", "1MS", "1sec", "1m30s", "1w", "0x10", "1e3",
                          "1ss", "1us1", "1ns" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        dur_bad(bad[i]);
}

static void test_duration_overflow(void **state)
{
    (void)state;
    /* UINT64_MAX us is 18446744073709551615. */
    assert_int_equal(dur("18446744073709551615us"), UINT64_MAX);
    dur_bad("18446744073709551616us");
    dur_bad("99999999999999999999999");
    assert_int_equal(dur("18446744073709551ms"), 18446744073709551000ULL);
    dur_bad("18446744073709552ms");
    /* 213503982 days is the largest whole number of days that fits. */
    assert_int_equal(dur("213503982d"), 213503982ULL * D);
    dur_bad("213503983d");
    dur_bad("18446744073710s");
    dur_bad("18446744073710");
}

static uint64_t size(const char *s)
{
    uint64_t v = 12345;
    assert_int_equal(sl_parse_size(s, &v), 0);
    return v;
}

static void size_bad(const char *s)
{
    uint64_t v = 777;
    assert_int_equal(sl_parse_size(s, &v), -1);
    assert_int_equal(v, 777);
}

static void test_size_units(void **state)
{
    (void)state;
    assert_int_equal(size("0"), 0);
    assert_int_equal(size("512"), 512);
    assert_int_equal(size("512b"), 512);
    assert_int_equal(size("512B"), 512);
    assert_int_equal(size("64kb"), 64000);
    assert_int_equal(size("64KB"), 64000);
    assert_int_equal(size("64Kb"), 64000);
    assert_int_equal(size("10mb"), 10000000);
    assert_int_equal(size("1gb"), 1000000000ULL);
    assert_int_equal(size("1tb"), 1000000000000ULL);
    assert_int_equal(size("64KiB"), 65536);
    assert_int_equal(size("64kib"), 65536);
    assert_int_equal(size("64KIB"), 65536);
    assert_int_equal(size("10MiB"), 10485760);
    assert_int_equal(size("1GiB"), 1073741824ULL);
    assert_int_equal(size("1TiB"), 1099511627776ULL);
    assert_int_equal(size("512mb"), 512000000ULL);
}

static void test_size_bad(void **state)
{
    (void)state;
    /* Bare k/m/g/t are ambiguous between 1000 and 1024: rejected. */
    const char *bad[] = { "", "k", "1k", "1m", "1g", "1t", "1K", "1M", "1G", "1ki", "1kbb",
                          "kb", "1 kb", "-1", "+1", "1.5mb", "1pb", "1PiB", " 1", "1 ",
                          "0x10", "1e3", "1bytes", "1kB2" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        size_bad(bad[i]);
}

static void test_size_overflow(void **state)
{
    (void)state;
    assert_int_equal(size("18446744073709551615"), UINT64_MAX);
    size_bad("18446744073709551616");
    assert_int_equal(size("16777215TiB"), 16777215ULL << 40);
    size_bad("16777216TiB"); /* 2^64 */
    assert_int_equal(size("18446744tb"), 18446744000000000000ULL);
    size_bad("18446745tb");
}

static struct sl_rate rate(const char *s, int bytes)
{
    struct sl_rate r = { 1, 1 };
    assert_int_equal(sl_parse_rate(s, bytes, &r), 0);
    return r;
}

static void rate_bad(const char *s, int bytes)
{
    struct sl_rate r = { 7, 7 };
    assert_int_equal(sl_parse_rate(s, bytes, &r), -1);
    assert_int_equal(r.amount, 7);
    assert_int_equal(r.period_us, 7);
}

static void test_rate_periods(void **state)
{
    (void)state;
    struct sl_rate r = rate("500/s", 0);
    assert_int_equal(r.amount, 500);
    assert_int_equal(r.period_us, S);
    assert_int_equal(rate("1/m", 0).period_us, MIN);
    assert_int_equal(rate("1/h", 0).period_us, H);
    assert_int_equal(rate("1/d", 0).period_us, D);
    assert_int_equal(rate("1/sec", 0).period_us, S);
    assert_int_equal(rate("1/min", 0).period_us, MIN);
    assert_int_equal(rate("1/hour", 0).period_us, H);
    assert_int_equal(rate("1/day", 0).period_us, D);
    /* A counted period, as sl_fmt_rate() may print. */
    assert_int_equal(rate("100/10s", 0).period_us, 10 * S);
    assert_int_equal(rate("100/250ms", 0).period_us, 250000);
    assert_int_equal(rate("3/ms", 0).period_us, 1000);
}

static void test_rate_bytes(void **state)
{
    (void)state;
    struct sl_rate r = rate("10MiB/s", 1);
    assert_int_equal(r.amount, 10485760);
    assert_int_equal(r.period_us, S);
    assert_int_equal(rate("500kb/m", 1).amount, 500000);
    assert_int_equal(rate("500/s", 1).amount, 500); /* bare bytes */
    rate_bad("10MiB/s", 0); /* size units only for bytes */
    rate_bad("10k/s", 1);
}

static void test_rate_bad(void **state)
{
    (void)state;
    const char *bad[] = { "", "/", "500", "500/", "/s", "0/s", "-1/s", "500/x", "500/S",
                          "500 /s", "500/ s", "500/10", "500/0s", "500/s/s", "1.5/s",
                          "500/seconds", "500/1", "500//s", "500/secs" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        rate_bad(bad[i], 0);
        rate_bad(bad[i], 1);
    }
    rate_bad("18446744073709551616/s", 0);
    assert_int_equal(rate("18446744073709551615/s", 0).amount, UINT64_MAX);
    rate_bad("16777216TiB/s", 1);
    rate_bad("1/213503983d", 0);
    rate_bad("00000000000000000000000000000000000000000000000000000000000000000001/s", 0);
}

static void addr_ok(const char *s, int family, const char *ip, unsigned port)
{
    struct sl_addr a;
    memset(&a, 0xAA, sizeof(a));
    assert_int_equal(sl_parse_addr(s, &a), 0);
    assert_string_equal(a.text, s);
    assert_int_equal(a.ss.ss_family, family);
    char buf[INET6_ADDRSTRLEN];
    if (family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&a.ss;
        assert_non_null(inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf)));
        assert_int_equal(ntohs(sin->sin_port), port);
    } else {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&a.ss;
        assert_non_null(inet_ntop(AF_INET6, &sin6->sin6_addr, buf, sizeof(buf)));
        assert_int_equal(ntohs(sin6->sin6_port), port);
    }
    assert_string_equal(buf, ip);
}

static void test_addr(void **state)
{
    (void)state;
    addr_ok("127.0.0.1:6380", AF_INET, "127.0.0.1", 6380);
    addr_ok("*:6380", AF_INET, "0.0.0.0", 6380);
    addr_ok("0.0.0.0:1", AF_INET, "0.0.0.0", 1);
    addr_ok("10.1.2.3:65535", AF_INET, "10.1.2.3", 65535);
    addr_ok("[::1]:6380", AF_INET6, "::1", 6380);
    addr_ok("[::]:80", AF_INET6, "::", 80);
    addr_ok("[2001:db8::5]:443", AF_INET6, "2001:db8::5", 443);
    addr_ok("1.2.3.4:00080", AF_INET, "1.2.3.4", 80);
}

/* A host name is kept for the loader to resolve: no I/O here. */
static void name_ok(const char *s, unsigned port)
{
    struct sl_addr a;
    memset(&a, 0xAA, sizeof(a));
    assert_int_equal(sl_parse_addr(s, &a), 0);
    assert_string_equal(a.text, s);
    assert_int_equal(a.named, 1);
    assert_int_equal(a.port, port);
    assert_int_equal(a.ss.ss_family, AF_UNSPEC);
}

static void test_addr_names(void **state)
{
    (void)state;
    name_ok("localhost:6379", 6379);
    name_ok("LOCALHOST:1", 1);
    name_ok("redis.local:6379", 6379);
    name_ok("redis-master.default.svc.cluster.local:6380", 6380);
    name_ok("_redis._tcp.example:7", 7);
    name_ok("a:65535", 65535);
    name_ok("1password.example:80", 80); /* a label may start with a digit */
    /* numbers stay numbers */
    struct sl_addr a;
    assert_int_equal(sl_parse_addr("10.1.2.3:80", &a), 0);
    assert_int_equal(a.named, 0);
    assert_int_equal(a.port, 80);
    assert_int_equal(sl_parse_addr("[::1]:81", &a), 0);
    assert_int_equal(a.named, 0);
    assert_int_equal(a.port, 81);
    const char *bad[] = {
        "redis.:6379", ".redis:6379", "1.2.3.256:80", "redis.7:1", "a..b:6379", "-redis:6379", "redis-:6379",
        "re dis:6379", "re/dis:6379", "redis@x:6379", "10.1:80", "0x7f:80", "2130706433:80",
        "0x7f.1:80", "redis:0", "redis:", "redis",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.b:1", /* 64-byte label */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&a, 0x55, sizeof(a));
        a.text[0] = 'Q';
        assert_int_equal(sl_parse_addr(bad[i], &a), -1);
        assert_int_equal(a.text[0], 'Q');
    }
}

static void test_addr_bad(void **state)
{
    (void)state;
    const char *bad[] = {
        "", ":", ":6380", "127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536",
        "127.0.0.1:99999", "127.0.0.1:-1", "127.0.0.1:+80", "127.0.0.1:80x", "127.0.0.1: 80",
        " 127.0.0.1:80", "10.1:80", "256.0.0.1:80", "0x7f.0.0.1:80",
        "::1:6380", "[::1]", "[::1]6380", "[::1:6380", "[127.0.0.1]:80", "[]:80",
        "[::1]:0", "*:0", "**:1", "localhost", "1.2.3.4:000080",
        "[fe80::1%lo]:80",
        "1111111111111111111111111111111111111111111111111111111111111111111111111111111:1",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct sl_addr a;
        memset(&a, 0x55, sizeof(a));
        a.text[0] = 'Q';
        assert_int_equal(sl_parse_addr(bad[i], &a), -1);
        assert_int_equal(a.text[0], 'Q'); /* untouched */
    }
}

static void test_fmt_duration(void **state)
{
    (void)state;
    struct { uint64_t us; const char *text; } cases[] = {
        { 0, "0s" }, { 1, "1us" }, { 999, "999us" }, { 1000, "1ms" }, { 1500, "1500us" },
        { 250000, "250ms" }, { S, "1s" }, { 90 * S, "90s" }, { 5 * MIN, "5m" },
        { 300 * S, "5m" }, { H, "1h" }, { 36 * H, "36h" }, { D, "1d" }, { 7 * D, "7d" },
        { UINT64_MAX, "18446744073709551615us" },
    };
    char b[32];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sl_fmt_duration(cases[i].us, b, sizeof(b));
        assert_string_equal(b, cases[i].text);
        uint64_t back;
        assert_int_equal(sl_parse_duration(b, &back), 0);
        assert_int_equal(back, cases[i].us);
    }
    sl_fmt_duration(250000, b, 4); /* truncates, stays terminated */
    assert_string_equal(b, "250");
}

static void test_fmt_size(void **state)
{
    (void)state;
    struct { uint64_t n; const char *text; } cases[] = {
        { 0, "0" }, { 1, "1" }, { 512, "512" }, { 1000, "1kb" }, { 1024, "1KiB" },
        { 64000, "64kb" }, { 65536, "64KiB" }, { 512000000, "512mb" },
        { 1048576, "1MiB" }, { 1024000, "1024kb" }, { 1000000000000ULL, "1tb" },
        { 1ULL << 40, "1TiB" }, { 3ULL << 50, "3072TiB" }, { 1001, "1001" },
        { UINT64_MAX, "18446744073709551615" },
    };
    char b[32];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sl_fmt_size(cases[i].n, b, sizeof(b));
        assert_string_equal(b, cases[i].text);
        uint64_t back;
        assert_int_equal(sl_parse_size(b, &back), 0);
        assert_int_equal(back, cases[i].n);
    }
}

static void test_fmt_rate(void **state)
{
    (void)state;
    struct { struct sl_rate r; int bytes; const char *text; } cases[] = {
        { { 500, S }, 0, "500/s" }, { { 100, MIN }, 0, "100/m" }, { { 1, H }, 0, "1/h" },
        { { 10, D }, 0, "10/d" }, { { 100, 10 * S }, 0, "100/10s" },
        { { 5, 1000 }, 0, "5/ms" }, { { 7, 1 }, 0, "7/us" }, { { 3, 100000 }, 0, "3/100ms" },
        { { 10485760, S }, 1, "10MiB/s" }, { { 500000, MIN }, 1, "500kb/m" },
        { { 1000, S }, 0, "1000/s" }, { { 1000, S }, 1, "1kb/s" },
    };
    char b[64];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sl_fmt_rate(&cases[i].r, cases[i].bytes, b, sizeof(b));
        assert_string_equal(b, cases[i].text);
        struct sl_rate back;
        assert_int_equal(sl_parse_rate(b, cases[i].bytes, &back), 0);
        assert_int_equal(back.amount, cases[i].r.amount);
        assert_int_equal(back.period_us, cases[i].r.period_us);
    }
}

/* A per-identity override as kept in the store: "RATE [BURST]". */
static void test_override_values(void **state)
{
    (void)state;
    struct sl_rate r;
    uint64_t burst;
    const char *why;
    const char *s = "5000/s 10000";
    assert_int_equal(sl_parse_override(s, strlen(s), 0, &r, &burst, &why), 0);
    assert_int_equal(r.amount, 5000);
    assert_int_equal(r.period_us, 1000000);
    assert_int_equal(burst, 10000);
    s = "  120/m\t";
    assert_int_equal(sl_parse_override(s, strlen(s), 0, &r, &burst, &why), 0);
    assert_int_equal(burst, 2); /* one second's worth, rounded up */
    s = "10MiB/s 20MiB";
    assert_int_equal(sl_parse_override(s, strlen(s), 1, &r, &burst, &why), 0);
    assert_int_equal(r.amount, 10485760);
    assert_int_equal(burst, 20971520);
    /* not NUL-terminated: only <len> bytes count */
    assert_int_equal(sl_parse_override("7/s 9xyz", 5, 0, &r, &burst, &why), 0);
    assert_int_equal(burst, 9);
    const char *bad[] = { "", "   ", "lots", "5000", "0/s", "5/s 0", "5/s 10 20", "5/s -1",
                          "10MiB/s", "5/s 1kb", "5/x", "1099511627777/s" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why = NULL;
        assert_int_equal(sl_parse_override(bad[i], strlen(bad[i]), 0, &r, &burst, &why), -1);
        assert_non_null(why);
    }
    char nul[8] = "5/s\0 10";
    assert_int_equal(sl_parse_override(nul, 7, 0, &r, &burst, &why), -1);
    char long_text[200];
    memset(long_text, '9', sizeof(long_text));
    assert_int_equal(sl_parse_override(long_text, sizeof(long_text), 0, &r, &burst, &why), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_duration_units),
        cmocka_unit_test(test_duration_bad),
        cmocka_unit_test(test_duration_overflow),
        cmocka_unit_test(test_size_units),
        cmocka_unit_test(test_size_bad),
        cmocka_unit_test(test_size_overflow),
        cmocka_unit_test(test_rate_periods),
        cmocka_unit_test(test_rate_bytes),
        cmocka_unit_test(test_rate_bad),
        cmocka_unit_test(test_addr),
        cmocka_unit_test(test_addr_names),
        cmocka_unit_test(test_addr_bad),
        cmocka_unit_test(test_fmt_duration),
        cmocka_unit_test(test_fmt_size),
        cmocka_unit_test(test_fmt_rate),
        cmocka_unit_test(test_override_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

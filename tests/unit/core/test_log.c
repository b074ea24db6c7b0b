/* Logging: the json form and its escaping, the logfmt form, repeated events
 * with an injected clock (no sleeps), and reopening a renamed file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"

#define TS "2026-11-22T08:00:00.123Z"

static void test_json_escaping(void **state)
{
    (void)state;
    char out[1024];
    char q[256];
    /* a value as callers write it: quoted by sl_log_quote(), with a quote,
     * a backslash, a control byte and a byte outside ASCII in it */
    const char raw[] = "a \"b\" \\ \x01\xff";
    char kv[512];
    snprintf(kv, sizeof(kv), "listener=cache err=%s bare empty= n=12",
             sl_log_quote(raw, sizeof(raw) - 1, q, sizeof(q)));
    size_t n = sl_log_format_line(out, sizeof(out), SL_LOG_JSON, TS, SL_LOG_WARN,
                                  "tab\there \"quoted\"\n", kv);
    assert_string_equal(out,
        "{\"ts\":\"" TS "\",\"level\":\"warn\",\"msg\":\"tab\\there \\\"quoted\\\"\\n\","
        "\"listener\":\"cache\",\"err\":\"a \\\"b\\\" \\\\ \\u0001\\u00ff\","
        "\"bare\":\"\",\"empty\":\"\",\"n\":\"12\"}\n");
    assert_int_equal(n, strlen(out));

    /* an unquoted value with spaces (uv_strerror() as some callers pass
     * it) is one field up to the next key= */
    sl_log_format_line(out, sizeof(out), SL_LOG_JSON, TS, SL_LOG_INFO, "m",
                       "worker=1 err=connection refused n=2 tail words");
    assert_string_equal(out, "{\"ts\":\"" TS "\",\"level\":\"info\",\"msg\":\"m\",\"worker\":\"1\","
                             "\"err\":\"connection refused\",\"n\":\"2 tail words\"}\n");

    /* nothing but the three fields */
    sl_log_format_line(out, sizeof(out), SL_LOG_JSON, TS, SL_LOG_INFO, "started", "");
    assert_string_equal(out, "{\"ts\":\"" TS "\",\"level\":\"info\",\"msg\":\"started\"}\n");

    /* a value quoted but cut short (no closing quote) still gives one field */
    sl_log_format_line(out, sizeof(out), SL_LOG_JSON, TS, SL_LOG_INFO, "m", "k=\"abc");
    assert_string_equal(out, "{\"ts\":\"" TS "\",\"level\":\"info\",\"msg\":\"m\",\"k\":\"abc\"}\n");
}

/* A line longer than the buffer loses whole fields and stays valid json. */
static void test_json_truncated(void **state)
{
    (void)state;
    char kv[3000], out[200];
    size_t o = 0;
    for (int i = 0; i < 100; i++)
        o += (size_t)snprintf(kv + o, sizeof(kv) - o, "%sk%d=\"\\x01\\x02\\x03\"", i ? " " : "", i);
    size_t n = sl_log_format_line(out, sizeof(out), SL_LOG_JSON, TS, SL_LOG_ERROR, "long", kv);
    assert_true(n < sizeof(out));
    assert_int_equal(n, strlen(out));
    assert_string_equal(out + n - 18, ",\"truncated\":\"1\"}\n");
    assert_non_null(strstr(out, "\"k0\":\"\\u0001\\u0002\\u0003\""));
    /* every field that is there is whole: an even number of unescaped quotes */
    int quotes = 0;
    for (size_t i = 0; i < n; i++)
        if (out[i] == '"' && out[i - 1] != '\\')
            quotes++;
    assert_int_equal(quotes % 2, 0);
}

static void test_logfmt_line(void **state)
{
    (void)state;
    char out[256];
    sl_log_format_line(out, sizeof(out), SL_LOG_LOGFMT, TS, SL_LOG_INFO, "listening",
                       "listener=cache addr=127.0.0.1:6380");
    assert_string_equal(out, "ts=" TS " level=info msg=listening listener=cache addr=127.0.0.1:6380\n");
    sl_log_format_line(out, sizeof(out), SL_LOG_LOGFMT, TS, SL_LOG_WARN, "two words", "");
    assert_string_equal(out, "ts=" TS " level=warn msg=\"two words\"\n");
}

static void test_rate_take(void **state)
{
    (void)state;
    struct sl_log_rate r = { .kind = "k" };
    uint64_t rep = 99;
    const uint64_t s = SL_LOG_RATE_US;
    assert_int_equal(sl_log_rate_take(&r, 5 * s, &rep), 1);
    assert_int_equal(rep, 0);
    for (int i = 0; i < 1000; i++) /* a storm within the same second */
        assert_int_equal(sl_log_rate_take(&r, 5 * s + (uint64_t)i * 999, &rep), 0);
    assert_int_equal(sl_log_rate_take(&r, 6 * s - 1, &rep), 0);
    /* one second after the last line: written, with the count */
    assert_int_equal(sl_log_rate_take(&r, 6 * s, &rep), 1);
    assert_int_equal(rep, 1001);
    /* the storm stops: no count line before two windows of quiet */
    assert_int_equal(sl_log_rate_take(&r, 6 * s + 10, &rep), 0);
    assert_int_equal(sl_log_rate_due(&r, 7 * s, 0), 0);
    assert_int_equal(sl_log_rate_due(&r, 8 * s, 0), 1);
    assert_int_equal(sl_log_rate_due(&r, 20 * s, 0), 0); /* said once */
    /* the next event starts afresh, and at exit a count is owed at once */
    assert_int_equal(sl_log_rate_take(&r, 30 * s, &rep), 1);
    assert_int_equal(rep, 0);
    assert_int_equal(sl_log_rate_take(&r, 30 * s + 1, &rep), 0);
    assert_int_equal(sl_log_rate_due(&r, 30 * s + 2, 0), 0);
    assert_int_equal(sl_log_rate_due(&r, 30 * s + 2, 1), 1);
    /* an event at time 0 still counts as written */
    struct sl_log_rate z = { .kind = "z" };
    assert_int_equal(sl_log_rate_take(&z, 0, &rep), 1);
    assert_int_equal(sl_log_rate_take(&z, 1, &rep), 0);
}

static uint64_t fake_now;
static uint64_t fake_clock(void)
{
    return fake_now;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return strdup("");
    char *buf = calloc(1, 1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static int count(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)) != NULL; p += strlen(what))
        n++;
    return n;
}

/* 10000 events over 3 seconds of fake time are 3 lines with counts, then
 * one count line once the storm is over. */
static void test_rate_lines(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-log-XXXXXX", path[128];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/s.log", dir);
    assert_int_equal(sl_log_open(path, SL_LOG_LOGFMT), 0);
    uint64_t (*saved_clock)(void) = sl_log_clock;
    sl_log_clock = fake_clock;
    fake_now = 1000 * (uint64_t)SL_LOG_RATE_US;
    for (int i = 0; i < 10000; i++) {
        fake_now += 300; /* 3 s in all */
        sl_log_warn_rl("test_storm", "upstream unavailable", "n=%d", i);
        sl_log_rate_flush(0); /* the sweep, as often as one likes */
    }
    char *text = slurp(path);
    assert_int_equal(count(text, "\n"), 3);
    assert_int_equal(count(text, "repeated="), 2);
    assert_non_null(strstr(text, "n=0\n"));
    assert_non_null(strstr(text, "kind=test_storm repeated=3333\n"));
    free(text);
    fake_now += 2 * SL_LOG_RATE_US;
    sl_log_rate_flush(0);
    text = slurp(path);
    assert_int_equal(count(text, "\n"), 4);
    assert_non_null(strstr(text, "msg=\"upstream unavailable\" kind=test_storm repeated="));
    free(text);

    /* json: the counts are fields too */
    assert_int_equal(sl_log_open(path, SL_LOG_JSON), 0);
    for (int i = 0; i < 3; i++) {
        fake_now += 1000;
        sl_log_warn_rl("test_json", "bad upstream response", "err=%s", "\"x y\"");
    }
    sl_log_rate_flush(1);
    text = slurp(path);
    assert_non_null(strstr(text, "{\"ts\":"));
    assert_non_null(strstr(text, "\"msg\":\"bad upstream response\",\"err\":\"x y\"}\n"));
    assert_non_null(strstr(text, "\"msg\":\"bad upstream response\",\"kind\":\"test_json\",\"repeated\":\"2\"}\n"));
    free(text);

    sl_log_clock = saved_clock;
    assert_int_equal(sl_log_open(NULL, SL_LOG_LOGFMT), 0);
    unlink(path);
    rmdir(dir);
}

/* After a rename (logrotate), sl_log_reopen() sends lines to a new file at
 * the old name; without it they would follow the renamed one. */
static void test_reopen(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-log-XXXXXX", path[128], old[140];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/s.log", dir);
    snprintf(old, sizeof(old), "%s/s.log.1", dir);
    assert_int_equal(sl_log_open(path, SL_LOG_LOGFMT), 0);
    assert_string_equal(sl_log_path(), path);
    sl_log_error("one", "%s", "");
    assert_int_equal(rename(path, old), 0);
    sl_log_error("two", "%s", "");
    assert_int_equal(sl_log_reopen(), 0);
    sl_log_error("three", "%s", "");
    char *a = slurp(old), *b = slurp(path);
    assert_non_null(strstr(a, "msg=one\n"));
    assert_non_null(strstr(a, "msg=two\n"));
    assert_null(strstr(a, "three"));
    assert_non_null(strstr(b, "msg=three\n"));
    assert_null(strstr(b, "msg=two"));
    free(a);
    free(b);
    /* the same path again keeps the descriptor; a path that cannot be
     * opened keeps the old one */
    assert_int_equal(sl_log_open(path, SL_LOG_LOGFMT), 0);
    assert_true(sl_log_open("/nonexistent-dir/x.log", SL_LOG_LOGFMT) < 0);
    assert_string_equal(sl_log_path(), path);
    assert_int_equal(sl_log_open("", SL_LOG_LOGFMT), 0);
    assert_null(sl_log_path());
    unlink(path);
    unlink(old);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_escaping),
        cmocka_unit_test(test_json_truncated),
        cmocka_unit_test(test_logfmt_line),
        cmocka_unit_test(test_rate_take),
        cmocka_unit_test(test_rate_lines),
        cmocka_unit_test(test_reopen),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

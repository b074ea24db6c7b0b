/* JSON strings and percent-decoding for the limits API (admin/json.h):
 * exact output for hostile bytes, exact refusals for bad encodings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin/json.h"

/* sl_json_str of <n> bytes at <s>, as a malloc'd string. */
static char *js(const char *s, size_t n)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    sl_json_str(f, s, n);
    assert_int_equal(fclose(f), 0);
    return text;
}

static void expect_js(const char *in, size_t n, const char *want)
{
    char *got = js(in, n);
    assert_string_equal(got, want);
    free(got);
}

static void test_plain_and_escapes(void **state)
{
    (void)state;
    expect_js("user:alice", 10, "\"user:alice\"");
    expect_js("", 0, "\"\"");
    expect_js("a\"b\\c", 5, "\"a\\\"b\\\\c\"");
    expect_js("\x01\n\x1f\x7f", 4, "\"\\u0001\\u000a\\u001f\\u007f\"");
    expect_js("a\0b", 3, "\"a\\u0000b\"");
    expect_js("/<>", 3, "\"/<>\"");
}

static void test_utf8(void **state)
{
    (void)state;
    /* well-formed: 2, 3 and 4 bytes, kept as they are */
    expect_js("\xc3\xa9", 2, "\"\xc3\xa9\"");
    expect_js("\xe2\x82\xac", 3, "\"\xe2\x82\xac\"");
    expect_js("\xf0\x9f\x98\x80", 4, "\"\xf0\x9f\x98\x80\"");
    expect_js("\xf4\x8f\xbf\xbf", 4, "\"\xf4\x8f\xbf\xbf\""); /* U+10FFFF */
    /* malformed: each byte of the sequence as U+FFFD */
    expect_js("\xff", 1, "\"\\ufffd\"");
    expect_js("\xc0\xaf", 2, "\"\\ufffd\\ufffd\"");            /* overlong '/' */
    expect_js("\xe0\x80\xaf", 3, "\"\\ufffd\\ufffd\\ufffd\""); /* overlong */
    expect_js("\xed\xa0\x80", 3, "\"\\ufffd\\ufffd\\ufffd\""); /* a surrogate */
    expect_js("\xf4\x90\x80\x80", 4, "\"\\ufffd\\ufffd\\ufffd\\ufffd\""); /* past U+10FFFF */
    expect_js("\xc3", 1, "\"\\ufffd\"");                        /* cut short */
    expect_js("a\xe2\x82z", 4, "\"a\\ufffd\\ufffdz\"");
    expect_js("\x80", 1, "\"\\ufffd\"");                        /* a lone continuation */
}

static long dec(const char *in, char *out, size_t cap)
{
    return sl_pct_decode(in, strlen(in), out, cap);
}

static void test_pct_decode(void **state)
{
    (void)state;
    char out[64];
    assert_int_equal(dec("user:alice", out, sizeof(out)), 10);
    assert_string_equal(out, "user:alice");
    assert_int_equal(dec("ip%3A10.0.0.7", out, sizeof(out)), 11);
    assert_string_equal(out, "ip:10.0.0.7");
    assert_int_equal(dec("a%2fb%2Fc", out, sizeof(out)), 5);
    assert_string_equal(out, "a/b/c");
    assert_int_equal(dec("a+b", out, sizeof(out)), 3); /* a path: '+' is '+' */
    assert_string_equal(out, "a+b");
    assert_int_equal(dec("%FF%22", out, sizeof(out)), 2);
    assert_memory_equal(out, "\xff\"", 3);
    assert_int_equal(dec("", out, sizeof(out)), 0);
    assert_string_equal(out, "");
    /* bad encodings */
    assert_int_equal(dec("%", out, sizeof(out)), -1);
    assert_int_equal(dec("a%4", out, sizeof(out)), -1);
    assert_int_equal(dec("%zz", out, sizeof(out)), -1);
    assert_int_equal(dec("%4g", out, sizeof(out)), -1);
    assert_int_equal(dec("a%00b", out, sizeof(out)), -1);
    assert_int_equal(sl_pct_decode("a\0b", 3, out, sizeof(out)), -1);
    /* the room: <cap> holds the result and its NUL */
    assert_int_equal(dec("abc", out, 4), 3);
    assert_int_equal(dec("abcd", out, 4), -1);
    assert_int_equal(dec("%41%42%43", out, 4), 3);
    assert_string_equal(out, "ABC");
    assert_int_equal(dec("", out, 0), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_and_escapes),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_pct_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

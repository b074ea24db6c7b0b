/* Unit tests for src/proto/http_path.c: the normal form of request paths
 * and the exact, prefix and glob patterns of a limit's `paths`. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/http_path.h"

static void expect_norm(const char *in, const char *want)
{
    size_t n = strlen(in);
    char *out = malloc(SL_HTTP_PATH_NORM_CAP(n));
    assert_non_null(out);
    size_t len = sl_http_path_norm(in, n, out);
    assert_int_equal(len, strlen(out));
    if (strcmp(out, want) != 0)
        fail_msg("norm('%s') = '%s', want '%s'", in, out, want);
    assert_true(len <= n + 1);
    free(out);
}

/* The normal form of patterns: the RESOLVED reading. */
static void test_norm(void **state)
{
    (void)state;
    expect_norm("/", "/");
    expect_norm("", "/");
    expect_norm("/a/b", "/a/b");
    expect_norm("/a/b/", "/a/b/");
    expect_norm("a/b", "/a/b");
    /* every %XX is decoded, once; a stray '%' stays */
    expect_norm("/%61%62%2D%2e%5F%7e", "/ab-._~");
    expect_norm("/a%2fb%3f%25", "/a/b?%");
    expect_norm("/a%2", "/a%2");
    expect_norm("/a%zz%", "/a%zz%");
    expect_norm("/e-%3%330", "/e-%330");
    expect_norm("/a%252f", "/a%2f");
    /* dot segments, also spelt with %2e or behind %2F; never above the root */
    expect_norm("/a/./b", "/a/b");
    expect_norm("/a/../b", "/b");
    expect_norm("/a/b/..", "/a/");
    expect_norm("/a/b/.", "/a/b/");
    expect_norm("/../../a", "/a");
    expect_norm("/%2e%2E/a/%2e/b", "/a/b");
    expect_norm("/x/..%2fa", "/a");
    expect_norm("/..", "/");
    expect_norm("/a/...", "/a/...");
    expect_norm("/a/.b/..c", "/a/.b/..c");
    /* repeated slashes, %2F ones too */
    expect_norm("//a///b//", "/a/b/");
    expect_norm("///", "/");
    expect_norm("/%2f%2Fa", "/a");
    /* '\' and ';' are bytes here (nginx's reading) */
    expect_norm("/a\\..\\b;c", "/a\\..\\b;c");
}

/* The readings of a path (as sent first, then the distinct others). */
static void expect_forms(const char *in, int n, ...)
{
    size_t len = strlen(in);
    char *scratch = malloc(SL_HTTP_PATH_FORMS_CAP(len));
    assert_non_null(scratch);
    struct sl_http_path_forms f;
    sl_http_path_forms(in, len, scratch, &f);
    va_list ap;
    va_start(ap, n);
    if (f.n != n) {
        for (int i = 0; i < f.n; i++)
            fprintf(stderr, "  form %d: '%.*s'\n", i, (int)f.len[i], f.form[i]);
        fail_msg("'%s': %d readings, want %d", in, f.n, n);
    }
    for (int i = 0; i < n; i++) {
        const char *want = va_arg(ap, const char *);
        if (f.len[i] != strlen(want) || memcmp(f.form[i], want, f.len[i]) != 0)
            fail_msg("'%s': reading %d is '%.*s', want '%s'", in, i, (int)f.len[i], f.form[i], want);
        assert_true(f.len[i] <= len + 1);
    }
    va_end(ap);
    assert_true(f.form[0] == in); /* the path as sent is never copied */
    free(scratch);
}

static void test_forms(void **state)
{
    (void)state;
    /* plain: one reading, no copy */
    assert_true(sl_http_path_plain("/api/x", 6));
    assert_true(sl_http_path_plain("/img/a.png", 10));
    assert_true(sl_http_path_plain("/a/.b/..c/...", 13));
    assert_false(sl_http_path_plain("/a/./b", 6));
    assert_false(sl_http_path_plain("/a/..", 5));
    assert_false(sl_http_path_plain("/a//b", 5));
    assert_false(sl_http_path_plain("/a%41", 5));
    assert_false(sl_http_path_plain("/a;b", 4));
    assert_false(sl_http_path_plain("/a\\b", 4));
    assert_false(sl_http_path_plain("a", 1));
    assert_false(sl_http_path_plain("", 0));
    expect_forms("/api/x", 1, "/api/x");
    /* RAW, DECODED, RESOLVED, WIDE, URL (duplicates left out) */
    expect_forms("/api%2fx", 2, "/api%2fx", "/api/x");
    expect_forms("/public/..%2fapi/x", 3, "/public/..%2fapi/x", "/public/../api/x", "/api/x");
    expect_forms("/api/../public", 2, "/api/../public", "/public");
    expect_forms("/public/%2e%2e/api/x", 3, "/public/%2e%2e/api/x", "/public/../api/x", "/api/x");
    expect_forms("/public/..;/api/x", 2, "/public/..;/api/x", "/api/x");
    expect_forms("/a\\..\\api/x", 2, "/a\\..\\api/x", "/api/x");
    expect_forms("/api%252fx", 3, "/api%252fx", "/api%2fx", "/api/x");
    expect_forms("//api//x", 2, "//api//x", "/api/x");
    expect_forms("/a/.%2E/api/x", 3, "/a/.%2E/api/x", "/a/../api/x", "/api/x");
    expect_forms("/x/%2e%2e%5capi/y", 3, "/x/%2e%2e%5capi/y", "/x/..\\api/y", "/api/y");
}

static int match(const char *pattern, const char *path)
{
    return sl_http_path_match(pattern, path, strlen(path));
}

static void test_match(void **state)
{
    (void)state;
    /* exact */
    assert_true(match("/login", "/login"));
    assert_false(match("/login", "/login/"));
    assert_false(match("/login", "/logi"));
    assert_true(match("/login", "/Login")); /* ASCII letters in either case */
    assert_true(match("/API/*", "/api/x"));
    assert_true(match("/img/*.PNG", "/IMG/a.png"));
    assert_false(match("/login", "/logim"));
    assert_true(match("/", "/"));
    /* prefix: everything under */
    assert_true(match("/api/*", "/api/"));
    assert_true(match("/api/*", "/api/a"));
    assert_true(match("/api/*", "/api/a/b/c"));
    assert_false(match("/api/*", "/api"));
    assert_false(match("/api/*", "/apix"));
    assert_false(match("/api/*", "/x/api/a"));
    assert_true(match("/*", "/"));
    assert_true(match("/*", "/a/b"));
    assert_false(match("/*", ""));
    /* globs: '*' and '?' within one segment */
    assert_true(match("/img/*.png", "/img/a.png"));
    assert_true(match("/img/*.png", "/img/.png"));
    assert_false(match("/img/*.png", "/img/a/b.png"));
    assert_false(match("/img/*.png", "/img/a.png.txt"));
    assert_true(match("/v?/x", "/v1/x"));
    assert_false(match("/v?/x", "/v10/x"));
    assert_false(match("/v?/x", "/v/x"));
    assert_true(match("/u/*/items", "/u/42/items"));
    assert_true(match("/u/*/items", "/u//items")); /* (a normal path has no empty segment) */
    assert_false(match("/u/*/items", "/u/4/2/items"));
    assert_true(match("/u/*/items/*", "/u/4/items/a/b"));
    assert_false(match("/u/*/items/*", "/u/4/items"));
    assert_true(match("/*a*b*", "/xaybz"));
    assert_false(match("/*a*b*", "/xbya"));
    assert_true(match("/a**", "/a"));
    /* a literal '*' in a path matches a '*' of the pattern too */
    assert_true(match("/x*", "/x*"));
    /* worst case stays bounded: many stars against a long segment */
    char path[8192];
    path[0] = '/';
    memset(path + 1, 'a', sizeof(path) - 2);
    path[sizeof(path) - 1] = '\0';
    assert_false(match("/*a*a*a*a*a*a*a*a*a*a*b", path));
}

/* Whether pattern <pattern> takes the request path <path> in any reading. */
static int takes(const char *pattern, const char *path)
{
    size_t n = strlen(path);
    char *scratch = malloc(SL_HTTP_PATH_FORMS_CAP(n));
    assert_non_null(scratch);
    struct sl_http_path_forms f;
    sl_http_path_forms(path, n, scratch, &f);
    int r = sl_http_path_match_forms(pattern, &f);
    free(scratch);
    return r;
}

/* The spellings of docs/http.md's table against "/api/" + '*': each is
 * taken (some server routes it under /api/), or not (none does). */
static void test_spellings(void **state)
{
    (void)state;
    static const char *const taken[] = {
        "/api/x", "/api/", "/API/x", "/Api/x", /* Express, ASP.NET: any case */
        "/%61pi/x", "/a%70i/x", "/%41PI/x", /* unreserved escapes: nginx decodes */
        "/api%2fx", "/api%2Fx", "/%2fapi/x", "/%2Fapi%2Fx", /* %2F: nginx decodes, merges */
        "//api/x", "/api//x", "///api///x",
        "/./api/x", "/api/./x", "/%2e/api/x", "/public/../api/x", "/public/%2e%2e/api/x",
        "/public/%2E%2E/api/x", "/public/.%2e/api/x", "/public/..%2fapi/x", "/public/..%2Fapi/x",
        "/public/%2e%2e%2fapi/x", "/a/b/../../api/x", "/../api/x", "/x/y/..%2f..%2fapi/z",
        "/api/../public", "/api/x/../../public", /* Express routes on the path as sent */
        "/api/..", "/api/.",
        "/api;x=1/y", "/api;/y", "/public/..;/api/x", "/public;a/..;b/api/x", "/public/..;x/api/y", /* servlets */
        "/public\\..\\api/x", "/public%5c..%5capi/x", "/public/..\\api/x", /* '\' as '/' */
        "/api\\x", "/api%5cx", "/api%5Cx",
        "/api%252fx", "/public/..%252fapi/x", "/%2561pi/x", /* decoded twice */
        "http-ish/../api/x",
    };
    static const char *const not_taken[] = {
        "/", "/apix", "/ap/i", "/public/x", "/api", "/%2fapix", "/ap%69x/y",
        "/api%2", "/ap%zzi/x", "/x/api/y", "/public/...%2fapi/x", "/a%252e%252e/api/x",
    };
    for (size_t i = 0; i < sizeof(taken) / sizeof(taken[0]); i++)
        if (!takes("/api/*", taken[i]))
            fail_msg("'%s' is not taken by /api/*", taken[i]);
    for (size_t i = 0; i < sizeof(not_taken) / sizeof(not_taken[0]); i++)
        if (takes("/api/*", not_taken[i]))
            fail_msg("'%s' is taken by /api/*", not_taken[i]);
    /* globs see every reading too: "*" never spans a '/', %2F or not */
    assert_true(takes("/u/*/items", "/u/a%2Fb/items")); /* as sent: one segment */
    assert_true(takes("/u/*/items", "/u/a/../b/items")); /* resolved */
    assert_true(takes("/img/*.png", "/img/A.PNG"));
    assert_false(takes("/img/*.png", "/img/a%2fb.png/x"));
    /* exact patterns */
    assert_true(takes("/login", "/LOGIN"));
    assert_true(takes("/login", "/x/../login"));
    assert_true(takes("/login", "/login;jsessionid=1"));
    assert_true(takes("/login", "/%6cogin"));
    assert_false(takes("/login", "/login/x"));
}

/* What is refused where limits have paths, and what is not. */
static void test_refusal(void **state)
{
    (void)state;
    static const char *const refused[] = {
        "/api%00/x", "/api/%00", "/%00", "/a%00b",
        "/%c0%afapi/x", "/%C0%AF", "/%c1%9c", "/%e0%80%af", "/%f0%80%80%af", "/%f8%80%80%80%af",
        "/%fc%80%80%80%80%af", "/x\xc0\xaf", "/\xe0\x80\xae",
    };
    static const char *const fine[] = {
        "/api/x", "/", "", "/%2500", "/%0", "/%c3%a9t%c3%a9", "/caf%E9", "/%c0", "/%c0x", "/%e0%a0%80",
        "/%f0%90%80%80", "/%ef%bf%bd", "/\xc3\xa9", "/%ff", "/%fcx",
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        if (sl_http_path_refusal(refused[i], strlen(refused[i])) == NULL)
            fail_msg("'%s' is not refused", refused[i]);
    for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++) {
        const char *why = sl_http_path_refusal(fine[i], strlen(fine[i]));
        if (why != NULL)
            fail_msg("'%s' is refused: %s", fine[i], why);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_norm),
        cmocka_unit_test(test_forms),
        cmocka_unit_test(test_match),
        cmocka_unit_test(test_spellings),
        cmocka_unit_test(test_refusal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests for src/proto/http_path.c: the normal form of request paths
 * and the exact, prefix and glob patterns of a limit's `paths`. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

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
    assert_true(len <= 3 * n + 1);
    /* a fixed point */
    char *again = malloc(SL_HTTP_PATH_NORM_CAP(len));
    assert_non_null(again);
    assert_int_equal(sl_http_path_norm(out, len, again), len);
    assert_string_equal(again, out);
    free(again);
    free(out);
}

static void test_norm(void **state)
{
    (void)state;
    expect_norm("/", "/");
    expect_norm("", "/");
    expect_norm("/a/b", "/a/b");
    expect_norm("/a/b/", "/a/b/");
    expect_norm("a/b", "/a/b");
    /* percent-encoded unreserved characters are decoded, others kept with
     * upper-case hex; a stray '%' stays */
    expect_norm("/%61%62%2D%2e%5F%7e", "/ab-._~");
    expect_norm("/a%2fb%3f%25", "/a%2Fb%3F%25");
    expect_norm("/a%2", "/a%252");
    expect_norm("/a%zz%", "/a%25zz%25");
    expect_norm("/e-%3%330", "/e-%25330"); /* not "%330", which would decode again */
    /* dot segments, also spelt with %2e; never above the root */
    expect_norm("/a/./b", "/a/b");
    expect_norm("/a/../b", "/b");
    expect_norm("/a/b/..", "/a/");
    expect_norm("/a/b/.", "/a/b/");
    expect_norm("/../../a", "/a");
    expect_norm("/%2e%2E/a/%2e/b", "/a/b");
    expect_norm("/..", "/");
    expect_norm("/a/...", "/a/...");
    expect_norm("/a/.b/..c", "/a/.b/..c");
    /* repeated slashes */
    expect_norm("//a///b//", "/a/b/");
    expect_norm("///", "/");
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
    assert_false(match("/login", "/Login"));
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_norm),
        cmocka_unit_test(test_match),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

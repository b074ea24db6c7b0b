/* Unit tests for src/proto/http_answer.c: exact bytes of the answers, each
 * rate_limit_headers mode, sf-string escaping, Retry-After rounding, the
 * documented maximum size, and that an identity never reaches a body. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/http_answer.h"

/* A refusal by limit <name> with policy q/w, r, t and a wait of <retry_us>. */
static struct sl_verdict refusal(const char *name, uint64_t retry_us)
{
    struct sl_verdict v;
    memset(&v, 0, sizeof(v));
    v.kind = SL_VERDICT_REJECT;
    snprintf(v.limit, sizeof(v.limit), "%s", name);
    snprintf(v.policy, sizeof(v.policy), "%s", name);
    snprintf(v.identity, sizeof(v.identity), "header:sk_live_SECRET");
    v.retry_after_us = retry_us;
    v.quota = 100;
    v.window_s = 60;
    v.remaining = 0;
    v.reset_s = 42;
    return v;
}

/* The answer as a NUL-terminated string (static). */
static const char *render_limited(const struct sl_verdict *v, enum sl_http_rl_mode mode, int close)
{
    static char buf[SL_HTTP_ANSWER_MAX + 1];
    size_t n = sl_http_answer_limited(v, mode, close, buf, SL_HTTP_ANSWER_MAX);
    assert_true(n > 0 && n <= SL_HTTP_ANSWER_MAX);
    buf[n] = '\0';
    return buf;
}

/* Content-Length says exactly how many bytes follow the head. */
static void assert_framed(const char *a)
{
    const char *end = strstr(a, "\r\n\r\n");
    assert_non_null(end);
    const char *cl = strstr(a, "\r\nContent-Length: ");
    assert_non_null(cl);
    assert_true(cl < end);
    unsigned long n = strtoul(cl + 18, NULL, 10);
    assert_int_equal(n, strlen(end + 4));
    assert_int_equal(strncmp(a, "HTTP/1.1 ", 9), 0);
}

static void test_429_draft_exact(void **state)
{
    (void)state;
    struct sl_verdict v = refusal("per-key", 1500000);
    const char *a = render_limited(&v, SL_HTTP_RL_DRAFT, 0);
    const char *body = "{\"type\":\"about:blank\",\"title\":\"Too Many Requests\",\"status\":429,"
                       "\"detail\":\"limit 'per-key' exceeded, retry in 2 s\"}\n";
    char want[1024];
    snprintf(want, sizeof(want),
             "HTTP/1.1 429 Too Many Requests\r\n"
             "Retry-After: 2\r\n"
             "RateLimit-Policy: \"per-key\";q=100;w=60\r\n"
             "RateLimit: \"per-key\";r=0;t=42\r\n"
             "Content-Type: application/problem+json\r\n"
             "Content-Length: %zu\r\n"
             "Cache-Control: no-store\r\n"
             "\r\n%s", strlen(body), body);
    assert_string_equal(a, want);
    assert_framed(a);
}

static void test_429_legacy_both_none_exact(void **state)
{
    (void)state;
    struct sl_verdict v = refusal("api", 250000);
    v.remaining = 3; /* a cost of 5 with 3 left: r says what is left */
    const char *a = render_limited(&v, SL_HTTP_RL_LEGACY, 1);
    const char *body = "{\"type\":\"about:blank\",\"title\":\"Too Many Requests\",\"status\":429,"
                       "\"detail\":\"limit 'api' exceeded, retry in 1 s\"}\n";
    char want[1024];
    snprintf(want, sizeof(want),
             "HTTP/1.1 429 Too Many Requests\r\n"
             "Retry-After: 1\r\n"
             "X-RateLimit-Limit: 100\r\n"
             "X-RateLimit-Remaining: 3\r\n"
             "X-RateLimit-Reset: 42\r\n"
             "Content-Type: application/problem+json\r\n"
             "Content-Length: %zu\r\n"
             "Cache-Control: no-store\r\n"
             "Connection: close\r\n"
             "\r\n%s", strlen(body), body);
    assert_string_equal(a, want);

    a = render_limited(&v, SL_HTTP_RL_BOTH, 0);
    assert_non_null(strstr(a, "\r\nRateLimit-Policy: \"api\";q=100;w=60\r\n"
                              "RateLimit: \"api\";r=3;t=42\r\n"
                              "X-RateLimit-Limit: 100\r\nX-RateLimit-Remaining: 3\r\n"
                              "X-RateLimit-Reset: 42\r\n"));
    assert_null(strstr(a, "Connection:"));
    assert_framed(a);

    a = render_limited(&v, SL_HTTP_RL_NONE, 0);
    assert_null(strstr(a, "RateLimit"));
    assert_non_null(strstr(a, "\r\nRetry-After: 1\r\n"));
    assert_framed(a);
}

/* Retry-After: whole seconds, rounded up, at least 1; t is never before it. */
static void test_retry_after_rounding(void **state)
{
    (void)state;
    struct { uint64_t us; const char *want; } cases[] = {
        { 0, "Retry-After: 1\r\n" },       { 1, "Retry-After: 1\r\n" },
        { 999000, "Retry-After: 1\r\n" },  { 1000000, "Retry-After: 1\r\n" },
        { 1001000, "Retry-After: 2\r\n" }, { 1000001, "Retry-After: 2\r\n" },
        { 59999999, "Retry-After: 60\r\n" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct sl_verdict v = refusal("x", cases[i].us);
        v.reset_s = 0;
        const char *a = render_limited(&v, SL_HTTP_RL_DRAFT, 0);
        assert_non_null(strstr(a, cases[i].want));
        /* t = max(reset, Retry-After) */
        char t[32];
        snprintf(t, sizeof(t), ";t=%s", cases[i].want + 13);
        t[strlen(t) - 2] = '\0';
        assert_non_null(strstr(a, t));
    }
}

/* The name is an sf-string: '"' and '\' escaped, other bytes outside
 * printable ASCII replaced; in the JSON body it is escaped as JSON. */
static void test_sf_string_escaping(void **state)
{
    (void)state;
    struct sl_verdict v = refusal("a\"b\\c", 1000000);
    const char *a = render_limited(&v, SL_HTTP_RL_DRAFT, 0);
    assert_non_null(strstr(a, "\r\nRateLimit-Policy: \"a\\\"b\\\\c\";q=100;w=60\r\n"));
    assert_non_null(strstr(a, "\r\nRateLimit: \"a\\\"b\\\\c\";r=0;t=42\r\n"));
    assert_non_null(strstr(a, "\"detail\":\"limit 'a\\\"b\\\\c' exceeded, retry in 1 s\"}"));
    assert_framed(a);
    v = refusal("tab\there\xc3\xa9", 1000000);
    a = render_limited(&v, SL_HTTP_RL_DRAFT, 0);
    assert_non_null(strstr(a, "RateLimit: \"tab?here??\";r=0"));
    assert_non_null(strstr(a, "limit 'tab?here?" "?' exceeded"));
}

/* The identity (a header identity may be an API key) is never written. */
static void test_identity_never_written(void **state)
{
    (void)state;
    enum sl_http_rl_mode modes[] = { SL_HTTP_RL_DRAFT, SL_HTTP_RL_LEGACY, SL_HTTP_RL_BOTH,
                                     SL_HTTP_RL_NONE };
    for (size_t m = 0; m < 4; m++) {
        struct sl_verdict v = refusal("k", 1);
        assert_null(strstr(render_limited(&v, modes[m], 1), "SECRET"));
        v.never = 1;
        v.retry_after_us = UINT64_MAX;
        assert_null(strstr(render_limited(&v, modes[m], 1), "SECRET"));
        v.store_down = 1;
        assert_null(strstr(render_limited(&v, modes[m], 1), "SECRET"));
    }
}

/* A cost the limit can never allow: no Retry-After (no wait helps); the
 * store away (on_failure = closed): 503 with Retry-After and no fields. */
static void test_never_and_store_down(void **state)
{
    (void)state;
    struct sl_verdict v = refusal("big", UINT64_MAX);
    v.never = 1;
    const char *a = render_limited(&v, SL_HTTP_RL_DRAFT, 0);
    assert_null(strstr(a, "Retry-After"));
    assert_non_null(strstr(a, "RateLimit-Policy: \"big\";q=100;w=60\r\n"));
    assert_non_null(strstr(a, "the request costs more than the limit allows"));
    assert_framed(a);

    v = refusal("shared", 1000000);
    v.store_down = 1;
    a = render_limited(&v, SL_HTTP_RL_BOTH, 0);
    assert_int_equal(strncmp(a, "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n", 50), 0);
    assert_null(strstr(a, "RateLimit"));
    assert_non_null(strstr(a, "\"status\":503,\"detail\":\"limit 'shared' cannot be checked "
                              "(quota store unavailable), retry in 1 s\"}"));
    assert_framed(a);
}

/* The fields on an allowed response, per mode. */
static void test_allowed_fields(void **state)
{
    (void)state;
    struct sl_verdict v;
    memset(&v, 0, sizeof(v));
    char buf[SL_HTTP_ANSWER_MAX + 1];
    /* no limit decided: nothing */
    assert_int_equal(sl_http_answer_fields(&v, SL_HTTP_RL_DRAFT, buf, sizeof(buf)), 0);
    snprintf(v.policy, sizeof(v.policy), "per-key");
    v.quota = 20;
    v.window_s = 2;
    v.remaining = 19;
    v.reset_s = 1;
    size_t n = sl_http_answer_fields(&v, SL_HTTP_RL_DRAFT, buf, sizeof(buf));
    buf[n] = '\0';
    assert_string_equal(buf, "RateLimit-Policy: \"per-key\";q=20;w=2\r\n"
                             "RateLimit: \"per-key\";r=19;t=1\r\n");
    n = sl_http_answer_fields(&v, SL_HTTP_RL_LEGACY, buf, sizeof(buf));
    buf[n] = '\0';
    assert_string_equal(buf, "X-RateLimit-Limit: 20\r\nX-RateLimit-Remaining: 19\r\n"
                             "X-RateLimit-Reset: 1\r\n");
    n = sl_http_answer_fields(&v, SL_HTTP_RL_BOTH, buf, sizeof(buf));
    buf[n] = '\0';
    assert_string_equal(buf, "RateLimit-Policy: \"per-key\";q=20;w=2\r\n"
                             "RateLimit: \"per-key\";r=19;t=1\r\n"
                             "X-RateLimit-Limit: 20\r\nX-RateLimit-Remaining: 19\r\n"
                             "X-RateLimit-Reset: 1\r\n");
    assert_int_equal(sl_http_answer_fields(&v, SL_HTTP_RL_NONE, buf, sizeof(buf)), 0);
    /* too small a buffer: nothing */
    assert_int_equal(sl_http_answer_fields(&v, SL_HTTP_RL_DRAFT, buf, 20), 0);
    /* a connection limit has no rate policy */
    v.window_s = 0;
    assert_int_equal(sl_http_answer_fields(&v, SL_HTTP_RL_BOTH, buf, sizeof(buf)), 0);
}

static void test_connection_limit_exact(void **state)
{
    (void)state;
    char buf[SL_HTTP_ANSWER_MAX + 1];
    size_t n = sl_http_answer_connections("per-ip", buf, sizeof(buf));
    buf[n] = '\0';
    const char *body = "{\"type\":\"about:blank\",\"title\":\"Too Many Requests\",\"status\":429,"
                       "\"detail\":\"max number of connections reached (limit 'per-ip')\"}\n";
    char want[1024];
    snprintf(want, sizeof(want),
             "HTTP/1.1 429 Too Many Requests\r\n"
             "Content-Type: application/problem+json\r\n"
             "Content-Length: %zu\r\n"
             "Cache-Control: no-store\r\n"
             "Connection: close\r\n"
             "\r\n%s", strlen(body), body);
    assert_string_equal(buf, want);
}

static void test_errors(void **state)
{
    (void)state;
    struct { int status; const char *line; } cases[] = {
        { 400, "HTTP/1.1 400 Bad Request\r\n" },
        { 408, "HTTP/1.1 408 Request Timeout\r\n" },
        { 413, "HTTP/1.1 413 Content Too Large\r\n" },
        { 414, "HTTP/1.1 414 URI Too Long\r\n" },
        { 431, "HTTP/1.1 431 Request Header Fields Too Large\r\n" },
        { 501, "HTTP/1.1 501 Not Implemented\r\n" },
        { 502, "HTTP/1.1 502 Bad Gateway\r\n" },
        { 503, "HTTP/1.1 503 Service Unavailable\r\n" },
        { 504, "HTTP/1.1 504 Gateway Timeout\r\n" },
        { 418, "HTTP/1.1 500 Internal Server Error\r\n" },
    };
    char buf[SL_HTTP_ANSWER_MAX + 1];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t n = sl_http_answer_error(cases[i].status, NULL, buf, sizeof(buf));
        assert_true(n > 0);
        buf[n] = '\0';
        assert_int_equal(strncmp(buf, cases[i].line, strlen(cases[i].line)), 0);
        assert_non_null(strstr(buf, "\r\nConnection: close\r\n"));
        assert_non_null(strstr(buf, "\r\nContent-Type: application/problem+json\r\n"));
        char title[128];
        snprintf(title, sizeof(title), "\"title\":\"%s\"", sl_http_reason(cases[i].status == 418 ? 500 : cases[i].status));
        assert_non_null(strstr(buf, title));
        assert_null(strstr(buf, "detail"));
        assert_framed(buf);
    }
    size_t n = sl_http_answer_error(400, "bare LF in a header", buf, sizeof(buf));
    buf[n] = '\0';
    const char *body = "{\"type\":\"about:blank\",\"title\":\"Bad Request\",\"status\":400,"
                       "\"detail\":\"bare LF in a header\"}\n";
    char want[1024];
    snprintf(want, sizeof(want),
             "HTTP/1.1 400 Bad Request\r\n"
             "Content-Type: application/problem+json\r\n"
             "Content-Length: %zu\r\n"
             "Cache-Control: no-store\r\n"
             "Connection: close\r\n"
             "\r\n%s", strlen(body), body);
    assert_string_equal(buf, want);
}

/* The longest answers fit SL_HTTP_ANSWER_MAX; a smaller buffer gets
 * nothing rather than a cut answer. */
static void test_maximum_size(void **state)
{
    (void)state;
    char name[64];
    memset(name, '"', 63);
    name[63] = '\0';
    struct sl_verdict v = refusal(name, UINT64_MAX - 1);
    v.quota = v.window_s = v.remaining = v.reset_s = UINT64_MAX;
    char buf[SL_HTTP_ANSWER_MAX];
    size_t n = sl_http_answer_limited(&v, SL_HTTP_RL_BOTH, 1, buf, sizeof(buf));
    assert_true(n > 0 && n <= SL_HTTP_ANSWER_MAX);
    assert_int_equal(sl_http_answer_limited(&v, SL_HTTP_RL_BOTH, 1, buf, n - 1), 0);
    assert_int_equal(sl_http_answer_limited(&v, SL_HTTP_RL_BOTH, 1, buf, n), n);
    n = sl_http_answer_fields(&v, SL_HTTP_RL_BOTH, buf, sizeof(buf));
    assert_true(n > 0 && n <= SL_HTTP_ANSWER_MAX);
    n = sl_http_answer_connections(name, buf, sizeof(buf));
    assert_true(n > 0 && n <= SL_HTTP_ANSWER_MAX);
    char detail[1000];
    memset(detail, '\\', sizeof(detail) - 1);
    detail[sizeof(detail) - 1] = '\0';
    n = sl_http_answer_error(431, detail, buf, sizeof(buf));
    assert_true(n > 0 && n <= SL_HTTP_ANSWER_MAX);
    assert_int_equal(sl_http_answer_error(400, NULL, buf, 10), 0);
}

/* The framing flags: a HEAD gets the head alone with the GET's
 * Content-Length (RFC 9110 9.3.2); an HTTP/1.0 connection that stays open
 * is told so; close wins over keep-alive. */
static void test_head_and_keep_alive_flags(void **state)
{
    (void)state;
    struct sl_verdict v = refusal("api", 2000000);
    char full[SL_HTTP_ANSWER_MAX], head[SL_HTTP_ANSWER_MAX + 1];
    size_t nf = sl_http_answer_limited(&v, SL_HTTP_RL_DRAFT, 0, full, sizeof(full));
    size_t nh = sl_http_answer_limited(&v, SL_HTTP_RL_DRAFT, SL_HTTP_ANS_HEAD, head, SL_HTTP_ANSWER_MAX);
    assert_true(nf > 0 && nh > 0 && nh < nf);
    head[nh] = '\0';
    /* the same head, and nothing after its empty line */
    assert_memory_equal(full, head, nh);
    assert_memory_equal(head + nh - 4, "\r\n\r\n", 4);
    assert_int_equal(sl_http_answer_head_only(full, nf), nh);
    const char *cl = strstr(head, "Content-Length: ");
    assert_non_null(cl);
    assert_int_equal(strtoul(cl + 16, NULL, 10), nf - nh);

    char buf[SL_HTTP_ANSWER_MAX + 1];
    size_t n = sl_http_answer_limited(&v, SL_HTTP_RL_NONE, SL_HTTP_ANS_KEEP, buf, SL_HTTP_ANSWER_MAX);
    buf[n] = '\0';
    assert_non_null(strstr(buf, "\r\nConnection: keep-alive\r\n\r\n"));
    n = sl_http_answer_limited(&v, SL_HTTP_RL_NONE, SL_HTTP_ANS_KEEP | SL_HTTP_ANS_CLOSE, buf,
                               SL_HTTP_ANSWER_MAX);
    buf[n] = '\0';
    assert_non_null(strstr(buf, "\r\nConnection: close\r\n\r\n"));
    assert_null(strstr(buf, "keep-alive"));

    /* an error answer cut for a HEAD */
    n = sl_http_answer_error(502, NULL, buf, SL_HTTP_ANSWER_MAX);
    size_t h = sl_http_answer_head_only(buf, n);
    assert_true(h < n);
    assert_memory_equal(buf + h - 4, "\r\n\r\n", 4);
    assert_int_equal(sl_http_answer_head_only("no head", 7), 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_429_draft_exact),
        cmocka_unit_test(test_429_legacy_both_none_exact),
        cmocka_unit_test(test_retry_after_rounding),
        cmocka_unit_test(test_sf_string_escaping),
        cmocka_unit_test(test_identity_never_written),
        cmocka_unit_test(test_never_and_store_down),
        cmocka_unit_test(test_allowed_fields),
        cmocka_unit_test(test_connection_limit_exact),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_maximum_size),
        cmocka_unit_test(test_head_and_keep_alive_flags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* sluice — tests of what the proxy changes in a head (src/proto/http_fwd.c).
 * Heads come from the real framer, so offsets are what the session sees. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "proto/http.h"
#include "proto/http_fwd.h"

/* Frames <text> (one head) on <side>; returns the framer holding it. */
static void head_of(struct sl_http *h, int side, const char *text)
{
    assert_int_equal(sl_http_init(h, side, NULL), 0);
    enum sl_http_ev ev;
    long n = sl_http_parse(h, text, strlen(text), &ev);
    assert_int_equal(ev, SL_HTTP_EV_HEAD);
    assert_int_equal(n, (long)strlen(text));
}

static void check_request(const char *in, const char *peer, const char *scheme, const char *want)
{
    struct sl_http h;
    char out[1024];
    head_of(&h, SL_HTTP_REQUESTS, in);
    size_t n = sl_http_fwd_request(&h.head, peer, scheme, out, sizeof(out));
    out[n] = '\0';
    assert_string_equal(out, want);
    /* what goes out frames as one request head again */
    struct sl_http again;
    head_of(&again, SL_HTTP_REQUESTS, out);
    sl_http_free(&again);
    sl_http_free(&h);
}

static void test_forwarded_added(void **state)
{
    (void)state;
    check_request("GET /a?b HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n", "10.0.0.1", "http",
                  "GET /a?b HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n"
                  "X-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: http\r\n\r\n");
}

static void test_forwarded_appended(void **state)
{
    (void)state;
    /* every X-Forwarded-For, in order, joins one list with the peer last,
     * in the first one's place; the client's X-Forwarded-Proto goes */
    check_request("POST / HTTP/1.1\r\nX-Forwarded-For: 1.1.1.1\r\nHost: x\r\n"
                  "X-Forwarded-Proto: https\r\nx-forwarded-for: 2.2.2.2, 3.3.3.3\r\n"
                  "Content-Length: 0\r\n\r\n",
                  "::1", "http",
                  "POST / HTTP/1.1\r\nX-Forwarded-For: 1.1.1.1, 2.2.2.2, 3.3.3.3, ::1\r\n"
                  "Host: x\r\nContent-Length: 0\r\nX-Forwarded-Proto: http\r\n\r\n");
}

static void test_forwarded_off(void **state)
{
    (void)state;
    const char *in = "GET / HTTP/1.0\r\nX-Forwarded-For: 1.1.1.1\r\n"
                     "X-Forwarded-Proto: https\r\n\r\n";
    check_request(in, NULL, NULL, in);
}

static void test_hop_fields_kept(void **state)
{
    (void)state;
    /* one upstream connection per client connection: the client's
     * Connection, Upgrade and Keep-Alive pass as they are */
    check_request("GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
                  "127.0.0.1", "http",
                  "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                  "X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: http\r\n\r\n");
}

static void test_too_small(void **state)
{
    (void)state;
    struct sl_http h;
    char out[32];
    head_of(&h, SL_HTTP_REQUESTS, "GET / HTTP/1.1\r\nHost: a-long-host-name.example\r\n\r\n");
    assert_int_equal(sl_http_fwd_request(&h.head, "1.2.3.4", "http", out, sizeof(out)), 0);
    assert_int_equal(sl_http_fwd_with(&h.head, "", 0, out, sizeof(out)), 0);
    sl_http_free(&h);
}

static void test_response_fields(void **state)
{
    (void)state;
    struct sl_http h;
    char out[256];
    assert_int_equal(sl_http_init(&h, SL_HTTP_RESPONSES, NULL), 0);
    sl_http_expect(&h, 0, 0);
    const char *in = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n";
    enum sl_http_ev ev;
    assert_int_equal(sl_http_parse(&h, in, strlen(in), &ev), (long)strlen(in));
    assert_int_equal(ev, SL_HTTP_EV_HEAD);
    const char extra[] = "RateLimit: \"l\";r=1;t=1\r\n";
    size_t n = sl_http_fwd_with(&h.head, extra, sizeof(extra) - 1, out, sizeof(out));
    out[n] = '\0';
    assert_string_equal(out, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                             "RateLimit: \"l\";r=1;t=1\r\n\r\n");
    sl_http_free(&h);
}

/* Keep-alive reuse: the client's "close" does not go upstream; other
 * options stay, a field left empty goes, the head still frames and no
 * longer asks to close. */
static void check_drop_close(const char *in, const char *want)
{
    char buf[1024];
    size_t n = strlen(in);
    memcpy(buf, in, n);
    n = sl_http_fwd_drop_close(buf, n);
    buf[n] = '\0';
    assert_string_equal(buf, want);
    struct sl_http again;
    head_of(&again, SL_HTTP_REQUESTS, buf);
    assert_true(again.head.keep_alive);
    sl_http_free(&again);
}

static void test_drop_close(void **state)
{
    (void)state;
    check_drop_close("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\nAccept: */*\r\n\r\n",
                     "GET / HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n");
    check_drop_close("GET / HTTP/1.1\r\nHost: a\r\nconnection:CLOSE\r\n\r\n", "GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    check_drop_close("GET / HTTP/1.1\r\nHost: a\r\nConnection: x-a , Close,x-b\r\nX-A: 1\r\n\r\n",
                     "GET / HTTP/1.1\r\nHost: a\r\nConnection: x-a, x-b\r\nX-A: 1\r\n\r\n");
    check_drop_close("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\nConnection: te, close\r\nTE: trailers\r\n\r\n",
                     "GET / HTTP/1.1\r\nHost: a\r\nConnection: te\r\nTE: trailers\r\n\r\n");
    /* a field named like it is not it; "closed" is not "close" */
    check_drop_close("GET / HTTP/1.1\r\nHost: a\r\nConnection-X: close\r\nConnection: closed\r\n\r\n",
                     "GET / HTTP/1.1\r\nHost: a\r\nConnection-X: close\r\nConnection: closed\r\n\r\n");
}

/* A response closed by sluice loses the upstream's "keep-alive" word:
 * the client reads one Connection option, close. */
static void test_drop_keepalive(void **state)
{
    (void)state;
    static const struct {
        const char *in, *want;
    } cases[] = {
        { "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
          "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n" },
        { "HTTP/1.1 200 OK\r\nconnection: Keep-Alive, x-a\r\nConnection: close\r\n\r\n",
          "HTTP/1.1 200 OK\r\nconnection: x-a\r\nConnection: close\r\n\r\n" },
        { "HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5\r\nConnection: close\r\n\r\n",
          "HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5\r\nConnection: close\r\n\r\n" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char buf[512];
        size_t n = strlen(cases[i].in);
        memcpy(buf, cases[i].in, n);
        n = sl_http_fwd_drop_keepalive(buf, n);
        buf[n] = '\0';
        assert_string_equal(buf, cases[i].want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forwarded_added),   cmocka_unit_test(test_forwarded_appended),
        cmocka_unit_test(test_forwarded_off),     cmocka_unit_test(test_hop_fields_kept),
        cmocka_unit_test(test_too_small),         cmocka_unit_test(test_response_fields),
        cmocka_unit_test(test_drop_close),
        cmocka_unit_test(test_drop_keepalive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

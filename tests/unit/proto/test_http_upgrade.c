/* sluice — tests of which upgrades pass an http listener
 * (src/proto/http_upgrade.c, through sl_http_fwd_request_in). Heads come
 * from the real framer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "proto/http.h"
#include "proto/http_fwd.h"
#include "proto/http_upgrade.h"

static void head_of(struct sl_http *h, int side, const char *text)
{
    assert_int_equal(sl_http_init(h, side, NULL), 0);
    enum sl_http_ev ev;
    long n = sl_http_parse(h, text, strlen(text), &ev);
    assert_int_equal(ev, SL_HTTP_EV_HEAD);
    assert_int_equal(n, (long)strlen(text));
}

static struct sl_http_upgrades list(const char *a, const char *b)
{
    struct sl_http_upgrades u;
    memset(&u, 0, sizeof(u));
    if (a != NULL)
        strcpy(u.name[u.n++], a);
    if (b != NULL)
        strcpy(u.name[u.n++], b);
    return u;
}

/* <in> forwarded under <u> (no X-Forwarded-*) is <want>, offering <mask>. */
static void check(const struct sl_http_upgrades *u, const char *in, const char *want, uint32_t mask)
{
    struct sl_http h;
    char out[2048];
    head_of(&h, SL_HTTP_REQUESTS, in);
    uint32_t offered = 99;
    size_t n = sl_http_fwd_request_in(&h.head, NULL, NULL, u, &offered, out, strlen(in));
    assert_true(n > 0); /* never longer than what came */
    out[n] = '\0';
    assert_string_equal(out, want);
    assert_int_equal(offered, mask);
    struct sl_http again;
    head_of(&again, SL_HTTP_REQUESTS, out);
    sl_http_free(&again);
    sl_http_free(&h);
}

static void test_h2c_removed(void **state)
{
    (void)state;
    struct sl_http_upgrades ws = list("websocket", NULL);
    /* curl --http2 on http:// */
    check(&ws,
          "GET /api/a HTTP/1.1\r\nHost: t\r\nConnection: Upgrade, HTTP2-Settings\r\n"
          "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\nAccept: */*\r\n\r\n",
          "GET /api/a HTTP/1.1\r\nHost: t\r\nAccept: */*\r\n\r\n", 0);
    /* keep-alive stays; the upgrade goes */
    check(&ws,
          "GET / HTTP/1.1\r\nHost: t\r\nConnection: keep-alive,upgrade , http2-settings\r\nUpgrade: H2C\r\n\r\n",
          "GET / HTTP/1.1\r\nHost: t\r\nConnection: keep-alive\r\n\r\n", 0);
    /* an allowed protocol among others: only it stays */
    check(&ws,
          "GET / HTTP/1.1\r\nHost: t\r\nUpgrade: h2c, WebSocket/13,foo\r\nConnection: Upgrade, HTTP2-Settings\r\n"
          "HTTP2-Settings: x\r\n\r\n",
          "GET / HTTP/1.1\r\nHost: t\r\nUpgrade: WebSocket/13\r\nConnection: Upgrade\r\n\r\n", 1);
    /* two Upgrade fields */
    check(&ws, "GET / HTTP/1.1\r\nHost: t\r\nUpgrade: h2c\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
          "GET / HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n", 1);
    /* nothing to change: byte for byte */
    check(&ws, "GET / HTTP/1.1\r\nHost: t\r\nUpgrade:websocket\r\nConnection:Upgrade\r\n\r\n",
          "GET / HTTP/1.1\r\nHost: t\r\nUpgrade:websocket\r\nConnection:Upgrade\r\n\r\n", 1);
    /* Upgrade without "Connection: upgrade" is no upgrade: it goes */
    check(&ws, "GET / HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\n\r\n", "GET / HTTP/1.1\r\nHost: t\r\n\r\n", 0);
    /* HTTP/1.0: a server must ignore Upgrade (RFC 9110 7.8); it goes */
    check(&ws, "GET / HTTP/1.0\r\nUpgrade: websocket\r\nConnection: upgrade, keep-alive\r\n\r\n",
          "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 0);
    /* nothing allowed */
    struct sl_http_upgrades none = list(NULL, NULL);
    check(&none, "GET / HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
          "GET / HTTP/1.1\r\nHost: t\r\n\r\n", 0);
    /* h2c allowed on purpose */
    struct sl_http_upgrades both = list("websocket", "h2c");
    check(&both, "GET / HTTP/1.1\r\nHost: t\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\n"
                 "HTTP2-Settings: x\r\n\r\n",
          "GET / HTTP/1.1\r\nHost: t\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n", 2);
}

static void test_names(void **state)
{
    (void)state;
    struct sl_http_upgrades ws = list("websocket", "h2c");
    assert_int_equal(sl_http_upgrade_find(&ws, "websocket", 9), 0);
    assert_int_equal(sl_http_upgrade_find(&ws, "WEBSOCKET/13", 12), 0);
    assert_int_equal(sl_http_upgrade_find(&ws, "h2c", 3), 1);
    assert_int_equal(sl_http_upgrade_find(&ws, "h2", 2), -1);
    assert_int_equal(sl_http_upgrade_find(&ws, "websocket/", 10), -1);
    assert_int_equal(sl_http_upgrade_find(&ws, "/13", 3), -1);
    assert_int_equal(sl_http_upgrade_find(&ws, "web socket", 10), -1);
    assert_int_equal(sl_http_upgrade_find(&ws, "websocketx", 10), -1);
}

static int answers(const struct sl_http_upgrades *u, const char *res, uint32_t offered)
{
    struct sl_http h;
    head_of(&h, SL_HTTP_RESPONSES, res);
    int ok = sl_http_upgrade_answers(&h.head, u, offered);
    sl_http_free(&h);
    return ok;
}

static void test_101_checked(void **state)
{
    (void)state;
    struct sl_http_upgrades u = list("websocket", "h2c");
    const char *ws = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
    const char *h2c = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n";
    assert_true(answers(&u, ws, 1));
    assert_false(answers(&u, ws, 2));  /* the request offered h2c only */
    assert_false(answers(&u, h2c, 1)); /* the request offered websocket only */
    assert_true(answers(&u, h2c, 3));
    assert_false(answers(&u, "HTTP/1.1 101 Switching Protocols\r\n\r\n", 3)); /* no Upgrade */
    assert_false(answers(&u, "HTTP/1.1 101 X\r\nUpgrade: websocket, foo\r\n\r\n", 3));
    struct sl_http_upgrades only = list("websocket", NULL);
    assert_false(answers(&only, h2c, 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_h2c_removed),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_101_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

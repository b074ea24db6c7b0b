/* proxy_protocol on listeners: its values, the trusted_proxies it needs
 * (on any protocol), and -T's round trip. */
#include "conf_test.h"

#define T "[listener t]\nlisten = *:5432\nupstream = 10.0.0.1:5432\nprotocol = tcp\n"

static void test_proxy_protocol_values(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok(L_A);
    assert_int_equal(c->listeners->proxy_protocol, 0);
    sl_conf_free(c);
    c = load_ok(L_A "proxy_protocol = v1\ntrusted_proxies = 10.0.0.0/8\n");
    assert_int_equal(c->listeners->proxy_protocol, 1);
    assert_int_equal(c->listeners->n_trusted_proxies, 1);
    sl_conf_free(c);
    c = load_ok(T "proxy_protocol = v2\ntrusted_proxies = 10.0.0.0/8 fd00::/8\n");
    assert_int_equal(c->listeners->proxy_protocol, 2);
    sl_conf_free(c);
    c = load_ok("[listener w]\nlisten = *:8080\nupstream = 10.0.0.1:80\nprotocol = http\n"
                "proxy_protocol = v1\ntrusted_proxies = 10.0.0.7\n");
    assert_int_equal(c->listeners->proxy_protocol, 1);
    sl_conf_free(c);
    char *errs = NULL;
    c = load(L_A "proxy_protocol = v3\ntrusted_proxies = 10.0.0.0/8\n", &errs);
    assert_null(c);
    assert_non_null(strstr(errs, "t.ini:4: proxy_protocol"));
    free(errs);
    round_trip(L_A "proxy_protocol = v2\ntrusted_proxies = 10.0.0.0/8 192.0.2.7\n");
    round_trip(T "proxy_protocol = v1\ntrusted_proxies = 10.0.0.0/8\n");
}

/* A header names anyone: without trusted_proxies nobody could send one,
 * which is an error rather than a listener that closes every client. */
static void test_proxy_protocol_needs_trusted(void **state)
{
    (void)state;
    expect_errors(L_A "proxy_protocol = v1\n",
                  "t.ini:4: proxy_protocol: needs trusted_proxies (the load balancers' "
                  "addresses)\n");
    expect_errors(L_A "trusted_proxies = 10.0.0.0/8\n",
                  "t.ini:4: trusted_proxies: only for http listeners or with proxy_protocol "
                  "(this listener is resp)\n");
    expect_errors(T "trusted_proxies = 10.0.0.0/8\n",
                  "t.ini:5: trusted_proxies: only for http listeners or with proxy_protocol "
                  "(this listener is tcp)\n");
}

/* upstream_proxy_protocol: one header per upstream connection, so not
 * where a connection serves many clients. */
static void test_upstream_proxy_protocol(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok(L_A "upstream_proxy_protocol = v2\n");
    assert_int_equal(c->listeners->upstream_proxy_protocol, 2);
    sl_conf_free(c);
    round_trip(L_A "upstream_proxy_protocol = v1\n");
    expect_errors(L_A "upstream_proxy_protocol = v1\nupstream_pool = 4\n",
                  "t.ini:4: upstream_proxy_protocol: not with upstream_pool (a connection serves "
                  "many clients)\n");
    expect_errors("[listener w]\nlisten = *:8080\nupstream = 10.0.0.1:80\nprotocol = http\n"
                  "upstream_keepalive = 8\nupstream_proxy_protocol = v2\n",
                  "t.ini:6: upstream_proxy_protocol: not with upstream_keepalive (a connection "
                  "serves many clients)\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proxy_protocol_values),
        cmocka_unit_test(test_proxy_protocol_needs_trusted),
        cmocka_unit_test(test_upstream_proxy_protocol),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

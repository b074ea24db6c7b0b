/* Unit tests for the loader's keys of http listeners and of limits on
 * them (src/conf/; conf-i.h lists its files): trusted_proxies, the
 * timeouts, headers and size caps of a listener, methods, paths and costs
 * by method on a limit, and match_identity of header identities; each
 * refused on a resp or tcp listener, with its "FILE:LINE: message". The
 * general loader is in test_conf.c. Run from the repo root. */
#include "unit/conf/conf_test.h"

/* Lines 1-4: one valid http listener. */
#define L_W "[listener w]\nlisten = *:8080\nupstream = 10.0.0.1:80\nprotocol = http\n"

static void test_http_listener_keys(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok(L_W);
    const struct sl_listener_conf *l = c->listeners;
    assert_int_equal(l->n_trusted_proxies, 0);
    assert_null(l->trusted_proxies);
    assert_int_equal(l->upstream_timeout_us, 60 * S);
    assert_int_equal(l->rate_limit_headers, SL_RLH_DRAFT);
    assert_int_equal(l->forwarded_headers, 1);
    assert_int_equal(l->max_request_line, 8192);
    assert_int_equal(l->max_header_line, 8192);
    assert_int_equal(l->max_headers, 100);
    assert_int_equal(l->max_header_size, 65536);
    sl_conf_free(c);

    static const char every[] =
        L_W "trusted_proxies = 10.0.0.0/8 192.168.1.7\n"
        "  fd00::/8 ::1 ::ffff:172.16.0.0/108 10.0.0.0/8\n"
        "upstream_timeout = 0\nrate_limit_headers = both\nforwarded_headers = off\n"
        "max_request_line = 4KiB\nmax_header_line = 16kb\nmax_headers = 50\n"
        "max_header_size = 1MiB\n";
    c = load_ok(every);
    l = c->listeners;
    assert_int_equal(l->n_trusted_proxies, 5); /* the repeat is dropped */
    const struct sl_cidr *t = l->trusted_proxies;
    static const uint8_t ten[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 0 };
    assert_memory_equal(t[0].addr, ten, 16);
    assert_int_equal(t[0].bits, 104);
    assert_int_equal(t[0].v4, 1);
    assert_int_equal(t[1].bits, 128);
    assert_int_equal(t[2].addr[0], 0xfd);
    assert_int_equal(t[2].bits, 8);
    assert_int_equal(t[2].v4, 0);
    assert_int_equal(t[3].bits, 128);
    assert_int_equal(t[3].addr[15], 1);
    assert_int_equal(t[4].bits, 108); /* ::ffff:172.16.0.0/108 is 172.16.0.0/12 */
    assert_int_equal(t[4].v4, 1);
    assert_int_equal(l->upstream_timeout_us, 0);
    assert_int_equal(l->rate_limit_headers, SL_RLH_BOTH);
    assert_int_equal(l->forwarded_headers, 0);
    assert_int_equal(l->max_request_line, 4096);
    assert_int_equal(l->max_header_line, 16000);
    assert_int_equal(l->max_headers, 50);
    assert_int_equal(l->max_header_size, 1048576);
    char *d = dump(c);
    assert_non_null(strstr(d, "trusted_proxies = 10.0.0.0/8 192.168.1.7 fd00::/8 ::1 172.16.0.0/12\n"));
    assert_non_null(strstr(d, "upstream_timeout = 0s\n"));
    assert_non_null(strstr(d, "rate_limit_headers = both\n"));
    assert_non_null(strstr(d, "forwarded_headers = off\n"));
    assert_non_null(strstr(d, "max_request_line = 4KiB\n"));
    assert_non_null(strstr(d, "max_header_line = 16kb\n"));
    assert_non_null(strstr(d, "max_headers     = 50\n"));
    assert_non_null(strstr(d, "max_header_size = 1MiB\n"));
    free(d);
    sl_conf_free(c);
    round_trip(every);
    round_trip(L_W);
    /* A resp listener's dump has none of them (they would not load). */
    c = load_ok(L_A);
    d = dump(c);
    assert_null(strstr(d, "max_headers"));
    assert_null(strstr(d, "upstream_timeout"));
    free(d);
    sl_conf_free(c);

    /* Each is an error on a resp or tcp listener (trusted_proxies too,
     * unless proxy_protocol is on: test_conf_proxy.c). */
    static const char *const keys[] = { "upstream_timeout = 1s",
        "rate_limit_headers = none", "forwarded_headers = on", "max_request_line = 1KiB",
        "max_header_line = 1KiB", "max_headers = 10", "max_header_size = 8KiB" };
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        char text[512], want[512];
        size_t kn = strcspn(keys[i], " ");
        snprintf(text, sizeof(text), L_A "%s\n", keys[i]);
        snprintf(want, sizeof(want), "t.ini:4: %.*s: only for http listeners (this listener "
                 "is resp)\n", (int)kn, keys[i]);
        expect_errors(text, want);
        snprintf(text, sizeof(text), "[listener t]\nlisten = *:5432\nupstream = 10.0.0.1:5432\n"
                 "%s\nprotocol = tcp\n", keys[i]);
        snprintf(want, sizeof(want), "t.ini:4: %.*s: only for http listeners (this listener "
                 "is tcp)\n", (int)kn, keys[i]);
        expect_errors(text, want);
    }

    /* Bad values. */
    static const struct { const char *line, *msg; } bad[] = {
        { "trusted_proxies = 10.0.0.0/33", "trusted_proxies: expected an address or a range like 10.0.0.0/8 or fd00::/8, got '10.0.0.0/33'" },
        { "trusted_proxies = 10.0.0.0/", "trusted_proxies: expected an address or a range like 10.0.0.0/8 or fd00::/8, got '10.0.0.0/'" },
        { "trusted_proxies = 10.0.0.0/08", "trusted_proxies: expected an address or a range like 10.0.0.0/8 or fd00::/8, got '10.0.0.0/08'" },
        { "trusted_proxies = proxy.example", "trusted_proxies: expected an address or a range like 10.0.0.0/8 or fd00::/8, got 'proxy.example'" },
        { "trusted_proxies = fd00::/129", "trusted_proxies: expected an address or a range like 10.0.0.0/8 or fd00::/8, got 'fd00::/129'" },
        { "trusted_proxies = 10.0.0.1/8", "trusted_proxies: '10.0.0.1/8' has bits set past its prefix length (the range is 10.0.0.0/8)" },
        { "trusted_proxies = fd00::1/8", "trusted_proxies: 'fd00::1/8' has bits set past its prefix length (the range is fd00::/8)" },
        { "upstream_timeout = 2h", "upstream_timeout: must be at most 1h, got '2h'" },
        { "rate_limit_headers = on", "rate_limit_headers: expected one of draft | legacy | both | none, got 'on'" },
        { "forwarded_headers = yes", "forwarded_headers: expected one of off | on, got 'yes'" },
        { "max_request_line = 10", "max_request_line: must be at least 64, got '10'" },
        { "max_header_line = 2MiB", "max_header_line: must be at most 1MiB, got '2MiB'" },
        { "max_headers = 0", "max_headers: must be at least 1, got '0'" },
        { "max_headers = 10001", "max_headers: must be at most 10000, got '10001'" },
        { "max_header_size = 100", "max_header_size: must be at least 256, got '100'" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[512], want[512];
        snprintf(text, sizeof(text), L_W "%s\n", bad[i].line);
        snprintf(want, sizeof(want), "t.ini:5: %s\n", bad[i].msg);
        expect_errors(text, want);
    }
    char text[8192];
    int o = snprintf(text, sizeof(text), L_W "trusted_proxies =");
    for (int i = 0; i < 257; i++)
        o += snprintf(text + o, sizeof(text) - (size_t)o, "%s10.%d.0.0/16", i % 8 ? " " : "\n  ",
                      i % 256 + (i / 256) * 0);
    snprintf(text + o, sizeof(text) - (size_t)o, "\n");
    sl_conf_free(load_ok(text)); /* 256 distinct, the 257th a repeat */
    o = snprintf(text, sizeof(text), L_W "trusted_proxies =");
    for (int i = 0; i < 257; i++)
        o += snprintf(text + o, sizeof(text) - (size_t)o, "%s10.%d.%d.0/24", i % 8 ? " " : "\n  ",
                      i % 256, i / 256);
    snprintf(text + o, sizeof(text) - (size_t)o, "\n");
    expect_errors(text, "t.ini:38: trusted_proxies: more than 256 ranges\n");
}

static void test_http_limit_keys(void **state)
{
    (void)state;
    static const char text[] =
        L_W "[limit x]\nlistener = w\nrate = 10/s\n"               /* 5-7 */
        "methods = GET POST\n  PURGE GET\n"                        /* 8-9 */
        "paths = /exact /api/* /img/*.png /a/./b//c/%7efoo/../d\n" /* 10 */
        "cost = POST=5 PURGE=2 *=1\n";                             /* 11 */
    struct sl_conf *c = load_ok(text);
    const struct sl_limit_conf *m = c->limits;
    assert_int_equal(m->n_methods, 3);
    assert_string_equal(m->methods[0], "GET");
    assert_string_equal(m->methods[1], "POST");
    assert_string_equal(m->methods[2], "PURGE");
    assert_int_equal(m->n_paths, 4);
    assert_string_equal(m->paths[0], "/exact");
    assert_string_equal(m->paths[1], "/api/*");
    assert_string_equal(m->paths[2], "/img/*.png");
    assert_string_equal(m->paths[3], "/a/b/c/d"); /* normalised as paths are */
    assert_int_equal(m->n_costs, 2);
    assert_string_equal(m->costs[0].cmd, "POST");
    assert_int_equal(m->costs[0].cost, 5);
    assert_string_equal(m->costs[1].cmd, "PURGE");
    assert_int_equal(m->default_cost, 1);
    char *d = dump(c);
    assert_non_null(strstr(d, "methods         = GET POST PURGE\n"));
    assert_non_null(strstr(d, "paths           = /exact /api/* /img/*.png /a/b/c/d\n"));
    assert_non_null(strstr(d, "cost            = POST=5 PURGE=2 *=1\n"));
    free(d);
    sl_conf_free(c);
    round_trip(text);

    /* methods = *: every method, as no methods. */
    c = load_ok(L_W "[limit x]\nlistener = w\nrate = 10/s\nmethods = *\n");
    assert_int_equal(c->limits->n_methods, 0);
    sl_conf_free(c);
    /* listener = * with http listeners only. */
    c = load_ok(L_W "[listener v]\nlisten = *:8081\nupstream = 10.0.0.1:80\nprotocol = http\n"
                "[limit x]\nlistener = *\nrate = 10/s\nmethods = DELETE\ncost = DELETE=3\n");
    assert_string_equal(c->limits->costs[0].cmd, "DELETE");
    sl_conf_free(c);
    /* On resp a cost name is a command, upper-cased, also when the limit
     * comes before its listener. */
    c = load_ok("[limit x]\nlistener = a\nrate = 10/s\ncost = get=2 KEYS=3\n" L_A);
    assert_string_equal(c->limits->costs[0].cmd, "GET");
    assert_string_equal(c->limits->costs[1].cmd, "KEYS");
    sl_conf_free(c);

    static const struct { const char *lines, *msg; } bad[] = {
        { "methods = get", "t.ini:8: methods: 'get' is not GET (methods are case-sensitive)" },
        { "methods = Post", "t.ini:8: methods: 'Post' is not POST (methods are case-sensitive)" },
        { "methods = GE(T", "t.ini:8: methods: 'GE(T' is not a method name (a token of at most 31 bytes, like GET or POST)" },
        { "methods = * GET", "t.ini:8: methods: '*' means every method; do not list names with it" },
        { "paths = api", "t.ini:8: paths: 'api' does not start with '/' (write /exact, /prefix/* or a glob like /img/*.png)" },
        { "paths = /a#b", "t.ini:8: paths: '/a#b' holds a byte a path cannot (blank, control, '#' or non-ASCII: percent-encode it)" },
        { "paths = /%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz", "t.ini:8: paths: '/%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz%zz' is longer than 128 bytes (in normal form)" },
        { "cost = get=2", "t.ini:8: cost: 'get' is not GET (methods are case-sensitive)" },
        { "cost = POST=50", "t.ini:8: cost: POST=50 is more than the burst (10), so POST could never pass; raise burst or lower the cost" },
        { "commands = GET", "t.ini:8: commands: only for resp listeners ([listener w] is http)" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char t[512], want[512];
        snprintf(t, sizeof(t), L_W "[limit x]\nlistener = w\nrate = 10/s\n%s\n", bad[i].lines);
        snprintf(want, sizeof(want), "%s\n", bad[i].msg);
        expect_errors(t, want);
    }
    /* methods and paths on resp listeners. */
    expect_errors(L_A "[limit x]\nlistener = a\nrate = 1/s\nmethods = GET\npaths = /x\n",
                  "t.ini:7: methods: only for http listeners ([listener a] is resp)\n"
                  "t.ini:8: paths: only for http listeners ([listener a] is resp)\n");
    expect_errors("[listener t]\nlisten = *:5432\nupstream = 10.0.0.1:5432\nprotocol = tcp\n"
                  "[limit x]\nlistener = t\nmetric = bytes_in\nrate = 1MiB/s\npaths = /x\n",
                  "t.ini:9: paths: only for http listeners ([listener t] is tcp)\n");
    expect_errors(L_A L_W "[limit x]\nlistener = *\nrate = 1/s\nmethods = GET\n",
                  "t.ini:11: methods: only for http listeners (listener = * includes "
                  "[listener a], which is resp)\n");
    expect_errors(L_A L_W "[limit x]\nlistener = *\nrate = 10/s\ncost = GET=2\n",
                  "t.ini:11: cost: with listener = *, per-name costs need listeners of one "
                  "protocol: names are commands on [listener a] (resp) and methods on "
                  "[listener w] (http)\n");
}

/* match_identity of header identities: header:NAME:VALUE, header:VALUE
 * (one header source), a bare value, or the hashed form /stats shows. */
static void test_http_match_identity(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok(L_W "identity = header:X-Api-Key client_ip\n"
                                "[limit x]\nlistener = w\nrate = 1/s\n"
                                "match_identity = k1 header:k2 header:x-api-key:k3\n"
                                "  header:X-API-KEY:a:b header:b:c header#0123456789abcdef "
                                "ip:10.0.0.1\n");
    const struct sl_limit_conf *m = c->limits;
    const char *want[] = { "header:x-api-key:k1", "header:x-api-key:k2", "header:x-api-key:k3",
                           "header:X-API-KEY:a:b", "header:x-api-key:b:c",
                           "header#0123456789abcdef", "ip:10.0.0.1" };
    assert_int_equal(m->n_match_identity, 7);
    for (int i = 0; i < 7; i++)
        assert_string_equal(m->match_identity[i], want[i]);
    sl_conf_free(c);
    round_trip(L_W "identity = header:X-Api-Key\n[limit x]\nlistener = w\nrate = 1/s\n"
               "match_identity = k1 header:k2\n");

    expect_errors(L_W "identity = header:X-Api-Key header:X-Tenant\n"
                  "[limit x]\nlistener = w\nrate = 1/s\nmatch_identity = header:v\n",
                  "t.ini:9: match_identity: 'header:v': the listeners of this limit have more "
                  "than one header source; write header:NAME:VALUE\n");
    expect_errors(L_W "identity = header:X-Api-Key\n"
                  "[limit x]\nlistener = w\nrate = 1/s\nmatch_identity = header:X-Api-Key:\n",
                  "t.ini:9: match_identity: 'header:X-Api-Key:' has no value after "
                  "'X-Api-Key:'\n");
    expect_errors(L_W "[limit x]\nlistener = w\nrate = 1/s\nmatch_identity = header:foo:bar\n",
                  "t.ini:8: match_identity: 'header:foo:bar' can never match: no listener of "
                  "this limit has identity source header:foo\n");
    expect_errors(L_W "[limit x]\nlistener = w\nrate = 1/s\nmatch_identity = header#0123456789abcdef\n",
                  "t.ini:8: match_identity: 'header#0123456789abcdef' can never match: no "
                  "listener of this limit has identity source header:NAME\n");
    expect_errors(L_W "identity = header:X-Api-Key\n"
                  "[limit x]\nlistener = w\nrate = 1/s\nmatch_identity = header#xyz\n",
                  "t.ini:9: match_identity: 'header#xyz' is not a hashed identity (header# and "
                  "16 lowercase hex digits, as /stats shows it)\n");
}

/* upgrades: websocket by default; a list replaces it; CONNECT as written;
 * none alone; refused on a resp listener; dumped and read back. */
static void test_http_upgrades(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok(L_W);
    const struct sl_listener_conf *l = c->listeners;
    assert_int_equal(l->upgrades.n, 1);
    assert_string_equal(l->upgrades.name[0], "websocket");
    assert_int_equal(l->upgrades.connect, 0);
    char *d = dump(c);
    assert_non_null(strstr(d, "upgrades        = websocket\n"));
    free(d);
    sl_conf_free(c);

    c = load_ok(L_W "upgrades = h2c CONNECT\n  WebSocket h2c\n");
    l = c->listeners;
    assert_int_equal(l->upgrades.n, 2);
    assert_string_equal(l->upgrades.name[0], "h2c");
    assert_string_equal(l->upgrades.name[1], "WebSocket");
    assert_int_equal(l->upgrades.connect, 1);
    sl_conf_free(c);
    round_trip(L_W "upgrades = h2c CONNECT websocket\n");

    c = load_ok(L_W "upgrades = none\n");
    assert_int_equal(c->listeners->upgrades.n, 0);
    assert_int_equal(c->listeners->upgrades.connect, 0);
    d = dump(c);
    assert_non_null(strstr(d, "upgrades        = none\n"));
    free(d);
    sl_conf_free(c);
    round_trip(L_W "upgrades = none\n");

    expect_errors(L_W "upgrades = connect\n",
                  "t.ini:5: upgrades: 'connect' is not CONNECT (methods are case-sensitive)\n");
    expect_errors(L_W "upgrades = websocket/13\n",
                  "t.ini:5: upgrades: expected a protocol name (a token of 1 to 32 characters, no "
                  "version) or CONNECT, got 'websocket/13'\n");
    expect_errors(L_W "upgrades = none websocket\n",
                  "t.ini:5: upgrades: nothing can follow 'none', got 'websocket'\n");
    expect_errors(L_W "upgrades = websocket none\n", "t.ini:5: upgrades: 'none' stands alone\n");
    expect_errors("[listener r]\nlisten = *:6380\nupstream = 10.0.0.1:6379\nupgrades = h2c\n",
                  "t.ini:4: upgrades: only for http listeners (this listener is resp)\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_http_listener_keys),
        cmocka_unit_test(test_http_upgrades),
        cmocka_unit_test(test_http_limit_keys),
        cmocka_unit_test(test_http_match_identity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

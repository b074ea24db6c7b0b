/* Unit tests for the loader's keys of resp listeners only: setup_commands
 * (its default, its range, refused on http and tcp listeners). The general
 * loader is in test_conf.c. Run from the repo root. */
#include "unit/conf/conf_test.h"

static void test_setup_commands(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok(L_A);
    assert_int_equal(c->listeners->setup_commands, 16);
    sl_conf_free(c);
    c = load_ok(L_A "setup_commands = 0\n");
    assert_int_equal(c->listeners->setup_commands, 0);
    sl_conf_free(c);
    c = load_ok(L_A "setup_commands = 64\n");
    assert_int_equal(c->listeners->setup_commands, 64);
    sl_conf_free(c);
    char *errs = NULL;
    assert_null(load(L_A "setup_commands = 65\n", &errs));
    assert_non_null(strstr(errs, "t.ini:4: setup_commands"));
    free(errs);
    expect_errors("[listener w]\nlisten = *:8080\nupstream = 10.0.0.1:80\nprotocol = http\n"
                  "setup_commands = 4\n",
                  "t.ini:5: setup_commands: only for resp listeners (this listener is http)\n");
    expect_errors("[listener t]\nlisten = *:5432\nupstream = 10.0.0.1:5432\nprotocol = tcp\n"
                  "setup_commands = 4\n",
                  "t.ini:5: setup_commands: only for resp listeners (this listener is tcp)\n");
}

/* upstream_pool: off or 1-256; its companions' defaults and ranges; refused
 * on http and tcp listeners; taken with upstream TLS. */
static void test_upstream_pool(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok(L_A);
    assert_int_equal(c->listeners->upstream_pool, 0);
    assert_int_equal(c->listeners->pool_pinned, 1000);
    assert_int_equal(c->listeners->pool_pin_wait_us, 1000000);
    assert_int_equal(c->listeners->pool_client_buffer, 64ULL * 1024 * 1024);
    assert_int_equal(c->listeners->pool_idle_timeout_us, 60ULL * 1000 * 1000);
    sl_conf_free(c);
    c = load_ok(L_A "upstream_pool = 4\nupstream_pool_pinned = 0\nupstream_pool_pin_wait = 0\n"
                    "upstream_pool_client_buffer = 1mb\nupstream_pool_idle_timeout = 200ms\n");
    assert_int_equal(c->listeners->pool_idle_timeout_us, 200 * 1000);
    assert_int_equal(c->listeners->upstream_pool, 4);
    assert_int_equal(c->listeners->pool_pinned, 0);
    assert_int_equal(c->listeners->pool_pin_wait_us, 0);
    assert_int_equal(c->listeners->pool_client_buffer, 1000 * 1000);
    sl_conf_free(c);
    c = load_ok(L_A "upstream_pool = 256\n");
    assert_int_equal(c->listeners->upstream_pool, 256);
    sl_conf_free(c);
    c = load_ok(L_A "upstream_pool = off\n");
    assert_int_equal(c->listeners->upstream_pool, 0);
    sl_conf_free(c);
    static const char *const bad[] = { "0", "257", "-1", "4x", "on", "4 4" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[256];
        snprintf(text, sizeof(text), L_A "upstream_pool = %s\n", bad[i]);
        char *errs = NULL;
        assert_null(load(text, &errs));
        assert_non_null(strstr(errs, "t.ini:4: upstream_pool"));
        free(errs);
    }
    expect_errors("[listener w]\nlisten = *:8080\nupstream = 10.0.0.1:80\nprotocol = http\n"
                  "upstream_pool = 4\n",
                  "t.ini:5: upstream_pool: only for resp listeners (this listener is http)\n");
    /* the pooled connections speak TLS as a 1:1 listener's do */
    c = load_ok("[listener r]\nlisten = *:6380\nupstream = 10.0.0.1:6379\nupstream_pool = 4\n"
                "upstream_tls = on\nupstream_tls_verify = off\n");
    assert_int_equal(c->listeners->upstream_pool, 4);
    assert_int_equal(c->listeners->upstream_tls, 1);
    sl_conf_free(c);
    /* the idle timeout: 0 = never, at most a day, resp only */
    c = load_ok(L_A "upstream_pool = 2\nupstream_pool_idle_timeout = 0\n");
    assert_int_equal(c->listeners->pool_idle_timeout_us, 0);
    sl_conf_free(c);
    expect_errors(L_A "upstream_pool_idle_timeout = 2d\n",
                  "t.ini:4: upstream_pool_idle_timeout: must be at most 1d, got '2d'\n");
    expect_errors("[listener w]\nlisten = *:8080\nupstream = 10.0.0.1:80\nprotocol = http\n"
                  "upstream_pool_idle_timeout = 1s\n",
                  "t.ini:5: upstream_pool_idle_timeout: only for resp listeners (this listener "
                  "is http)\n");
    /* the batch wait: 50us by default, 0 = never, at most 1ms, resp only */
    c = load_ok(L_A);
    assert_int_equal(c->listeners->pool_batch_wait_us, 50);
    sl_conf_free(c);
    c = load_ok(L_A "upstream_pool = 2\nupstream_pool_batch_wait = 0\n");
    assert_int_equal(c->listeners->pool_batch_wait_us, 0);
    sl_conf_free(c);
    c = load_ok(L_A "upstream_pool = 2\nupstream_pool_batch_wait = 1ms\n");
    assert_int_equal(c->listeners->pool_batch_wait_us, 1000);
    sl_conf_free(c);
    c = load_ok(L_A "upstream_pool = 2\nupstream_pool_batch_wait = 20us\n");
    assert_int_equal(c->listeners->pool_batch_wait_us, 20);
    sl_conf_free(c);
    expect_errors(L_A "upstream_pool_batch_wait = 2ms\n",
                  "t.ini:4: upstream_pool_batch_wait: must be at most 1ms, got '2ms'\n");
    expect_errors("[listener w]\nlisten = *:8080\nupstream = 10.0.0.1:80\nprotocol = http\n"
                  "upstream_pool_batch_wait = 10us\n",
                  "t.ini:5: upstream_pool_batch_wait: only for resp listeners (this listener "
                  "is http)\n");
}

/* upstream_keepalive (http only): off by default, kept connections time out. */
static void test_upstream_keepalive(void **state)
{
    (void)state;
    const char *h = "[listener w]\nlisten = *:8080\nupstream = 10.0.0.1:80\nprotocol = http\n";
    char text[256];
    snprintf(text, sizeof(text), "%s", h);
    struct sl_conf *c = load_ok(text);
    assert_int_equal(c->listeners->upstream_keepalive, 0);
    assert_int_equal(c->listeners->upstream_keepalive_timeout_us, 60000000);
    sl_conf_free(c);
    snprintf(text, sizeof(text), "%supstream_keepalive = 32\nupstream_keepalive_timeout = 5s\n", h);
    c = load_ok(text);
    assert_int_equal(c->listeners->upstream_keepalive, 32);
    assert_int_equal(c->listeners->upstream_keepalive_timeout_us, 5000000);
    sl_conf_free(c);
    expect_errors(L_A "upstream_keepalive = 4\n",
                  "t.ini:4: upstream_keepalive: only for http listeners (this listener is resp)\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_setup_commands),
        cmocka_unit_test(test_upstream_pool),
        cmocka_unit_test(test_upstream_keepalive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

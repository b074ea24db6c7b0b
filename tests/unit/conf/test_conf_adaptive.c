/* Unit tests for the loader's adaptive concurrency keys (docs/adaptive.md):
 * the listener's adaptive_* keys (defaults, ranges, auto, refused on tcp,
 * taken with upstream_pool, min <= initial <= max), a limit's priority, and
 * the load -> dump -> load round trip. Run from the repo root. */
#include "unit/conf/conf_test.h"

/* <text> must fail, the errors naming <needle>. */
static void expect_fail(const char *text, const char *needle)
{
    char *errs = NULL;
    assert_null(load(text, &errs));
    assert_non_null(strstr(errs, needle));
    free(errs);
}

static void test_adaptive_defaults(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok(L_A);
    const struct sl_listener_conf *l = c->listeners;
    assert_int_equal(l->adaptive, 0);
    assert_int_equal(l->adaptive_min_limit, 1);
    assert_int_equal(l->adaptive_max_limit, 1000);
    assert_int_equal(l->adaptive_initial_limit, 20);
    assert_int_equal(l->adaptive_queue, 1024);
    assert_int_equal(l->adaptive_queue_target_us, 0);
    assert_int_equal(l->adaptive_queue_interval_us, 100000);
    assert_int_equal(l->adaptive_probe_interval_us, 5000000);
    assert_int_equal(l->adaptive_share, 0); /* store: used when there is one */
    sl_conf_free(c);
}

static void test_adaptive_values(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok(L_A "adaptive_concurrency = shadow\nadaptive_min_limit = 2\n"
                                    "adaptive_max_limit = 50\nadaptive_initial_limit = 10\n"
                                    "adaptive_queue = 0\nadaptive_queue_target = 5ms\n"
                                    "adaptive_queue_interval = 1s\nadaptive_probe_interval = 1m\n");
    const struct sl_listener_conf *l = c->listeners;
    assert_int_equal(l->adaptive, 2);
    assert_int_equal(l->adaptive_min_limit, 2);
    assert_int_equal(l->adaptive_max_limit, 50);
    assert_int_equal(l->adaptive_initial_limit, 10);
    assert_int_equal(l->adaptive_queue, 0);
    assert_int_equal(l->adaptive_queue_target_us, 5000);
    assert_int_equal(l->adaptive_queue_interval_us, 1000000);
    assert_int_equal(l->adaptive_probe_interval_us, 60000000);
    sl_conf_free(c);
    c = load_ok("[listener w]\nlisten = *:8080\nupstream = 10.0.0.1:80\nprotocol = http\n"
                "adaptive_concurrency = on\nadaptive_queue_target = auto\n");
    assert_int_equal(c->listeners->adaptive, 1);
    assert_int_equal(c->listeners->adaptive_queue_target_us, 0);
    sl_conf_free(c);
}

static void test_adaptive_errors(void **state)
{
    (void)state;
    expect_fail(L_A "adaptive_concurrency = maybe\n", "t.ini:4: ");
    expect_errors(L_A "adaptive_queue_target = 500us\n",
                  "t.ini:4: adaptive_queue_target: expected auto or a duration from 1ms to 10s, "
                  "got '500us'\n");
    expect_errors(L_A "adaptive_queue_target = 11s\n",
                  "t.ini:4: adaptive_queue_target: expected auto or a duration from 1ms to 10s, "
                  "got '11s'\n");
    expect_fail(L_A "adaptive_queue = 65537\n", "t.ini:4: ");
    expect_fail(L_A "adaptive_queue_interval = 5ms\n", "t.ini:4: ");
    expect_fail(L_A "adaptive_min_limit = 0\n", "t.ini:4: ");
    expect_errors(L_A "adaptive_min_limit = 10\nadaptive_max_limit = 5\n",
                  "t.ini:4: adaptive_min_limit: 10 is above adaptive_max_limit (5)\n");
    /* the default start follows the bounds; one written must be within them */
    struct sl_conf *c = load_ok(L_A "adaptive_max_limit = 5\n");
    assert_int_equal(c->listeners->adaptive_initial_limit, 5);
    sl_conf_free(c);
    c = load_ok(L_A "adaptive_min_limit = 50\n");
    assert_int_equal(c->listeners->adaptive_initial_limit, 50);
    sl_conf_free(c);
    expect_errors(L_A "adaptive_initial_limit = 2000\n",
                  "t.ini:4: adaptive_initial_limit: 2000 is outside adaptive_min_limit .. "
                  "adaptive_max_limit (1 .. 1000)\n");
    expect_errors("[listener t]\nlisten = *:5432\nupstream = 10.0.0.1:5432\nprotocol = tcp\n"
                  "adaptive_concurrency = on\n",
                  "t.ini:5: adaptive_concurrency: only for resp and http listeners (this listener "
                  "is tcp)\n");
}

/* A pooled RESP listener adapts too (its unit: a client's requests in
 * flight, docs/adaptive.md "Pooled listeners"). */
static void test_adaptive_pooled(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok(L_A "upstream_pool = 4\nadaptive_concurrency = on\n"
                                    "adaptive_max_limit = 64\n");
    assert_int_equal(c->listeners->upstream_pool, 4);
    assert_int_equal(c->listeners->adaptive, 1);
    assert_int_equal(c->listeners->adaptive_max_limit, 64);
    sl_conf_free(c);
    c = load_ok(L_A "upstream_pool = 2\nadaptive_concurrency = shadow\n");
    assert_int_equal(c->listeners->adaptive, 2);
    sl_conf_free(c);
    round_trip(L_A "upstream_pool = 4\nadaptive_concurrency = on\n");
}

static void test_priority(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok(L_A "[limit v]\nlistener = a\nrate = 10/s\nmatch_identity = vip\n"
                                    "priority = 3\n[limit w]\nlistener = a\nrate = 10/s\n");
    assert_int_equal(c->limits->priority, 3);
    assert_int_equal(c->limits->next->priority, -1);
    sl_conf_free(c);
    expect_errors(L_A "[limit v]\nlistener = a\nrate = 10/s\npriority = 4\n",
                  "t.ini:7: priority: expected none or a tier from 0 to 3, got '4'\n");
}

/* adaptive_share = store | off (store with url = local: nothing to share
 * through, as the default; -T writes it out either way). */
static void test_adaptive_share(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok("[store]\nurl = redis://127.0.0.1:6390\n" L_A
                                "adaptive_concurrency = on\nadaptive_share = off\n");
    assert_int_equal(c->listeners->adaptive_share, 1);
    sl_conf_free(c);
    c = load_ok("[store]\nurl = redis://127.0.0.1:6390\n" L_A "adaptive_share = store\n");
    assert_int_equal(c->listeners->adaptive_share, 0);
    sl_conf_free(c);
    c = load_ok(L_A "adaptive_share = off\n");
    sl_conf_free(c);
    c = load_ok(L_A "adaptive_share = store\n");
    sl_conf_free(c);
    expect_fail(L_A "adaptive_share = fleet\n", "t.ini:4: ");
    expect_fail("[listener t]\nlisten = 127.0.0.1:7001\nupstream = 127.0.0.1:6379\nprotocol = tcp\n"
                "adaptive_share = off\n", "adaptive_share: only for resp and http");
}

static void test_adaptive_round_trip(void **state)
{
    (void)state;
    round_trip(L_A "adaptive_concurrency = on\nadaptive_max_limit = 64\n"
                   "adaptive_queue_target = 20ms\n"
                   "[limit v]\nlistener = a\nrate = 10/s\nmatch_identity = vip\npriority = 2\n");
    char *d = round_trip_within(L_A, 190);
    assert_non_null(strstr(d, "adaptive_concurrency = off\n"));
    assert_non_null(strstr(d, "adaptive_queue_target = auto\n"));
    assert_non_null(strstr(d, "adaptive_share  = store\n"));
    free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adaptive_defaults),
        cmocka_unit_test(test_adaptive_values),
        cmocka_unit_test(test_adaptive_errors),
        cmocka_unit_test(test_adaptive_pooled),
        cmocka_unit_test(test_priority),
        cmocka_unit_test(test_adaptive_share),
        cmocka_unit_test(test_adaptive_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

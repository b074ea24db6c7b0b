/* The [usage] section: defaults, values, errors (export = store without a
 * store, windows that do not divide a day, bounds), once only, and -T's
 * round trip. */
#include "conf_test.h"

#define ST "[store]\nurl = redis://127.0.0.1:6379\n"

static void test_usage_defaults(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok(L_A);
    assert_int_equal(c->usage.export_kind, SL_USAGE_OFF);
    assert_null(c->usage.file);
    assert_int_equal(c->usage.interval_us, 10 * S);
    assert_int_equal(c->usage.window_us, 60 * S);
    assert_int_equal(c->usage.ttl_us, 35ULL * 86400 * S);
    assert_int_equal(c->usage.max_pending, 100000);
    sl_conf_free(c);
}

static void test_usage_values(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok(ST "[usage]\nexport = store\ninterval = 250ms\nwindow = 15m\n"
                                   "usage_ttl = 90d\nmax_pending = 5\n" L_A);
    assert_int_equal(c->usage.export_kind, SL_USAGE_STORE);
    assert_int_equal(c->usage.interval_us, 250000);
    assert_int_equal(c->usage.window_us, 900 * S);
    assert_int_equal(c->usage.ttl_us, 90ULL * 86400 * S);
    assert_int_equal(c->usage.max_pending, 5);
    sl_conf_free(c);
    c = load_ok("[usage]\nexport = /var/lib/sluice/usage.jsonl\nwindow = 1d\n" L_A);
    assert_int_equal(c->usage.export_kind, SL_USAGE_FILE);
    assert_string_equal(c->usage.file, "/var/lib/sluice/usage.jsonl");
    sl_conf_free(c);
    c = load_ok("[usage]\nexport = usage.jsonl\n" L_A); /* relative: made absolute */
    assert_true(c->usage.file[0] == '/');
    sl_conf_free(c);
    c = load_ok("[usage]\nexport = off\n" L_A);
    assert_int_equal(c->usage.export_kind, SL_USAGE_OFF);
    assert_null(c->usage.file);
    sl_conf_free(c);
}

static void test_usage_errors(void **state)
{
    (void)state;
    expect_errors("[usage]\nexport = store\n" L_A,
                  "t.ini:2: export: = store adds usage to the quota store; [store] url is local\n");
    expect_errors(ST "[usage]\nexport = store\nwindow = 7m\n" L_A,
                  "t.ini:5: window: whole minutes that divide a day (1m, 5m, 15m, 1h, 1d ...)\n");
    expect_errors("[usage]\nwindow = 90s\n" L_A,
                  "t.ini:2: window: whole minutes that divide a day (1m, 5m, 15m, 1h, 1d ...)\n");
    char *errs = NULL;
    struct sl_conf *c = load("[usage]\ninterval = 1ms\nwindow = 30s\nusage_ttl = 10m\n"
                             "max_pending = 0\nexport =\nbogus = 1\n" L_A, &errs);
    assert_null(c);
    assert_non_null(strstr(errs, "t.ini:2: interval"));
    assert_non_null(strstr(errs, "t.ini:3: window"));
    assert_non_null(strstr(errs, "t.ini:4: usage_ttl"));
    assert_non_null(strstr(errs, "t.ini:5: max_pending"));
    assert_non_null(strstr(errs, "t.ini:6: export"));
    assert_non_null(strstr(errs, "t.ini:7:"));
    free(errs);
    c = load("[usage]\n[usage]\n" L_A, &errs);
    assert_null(c);
    assert_non_null(strstr(errs, "t.ini:2: duplicate section [usage] (first on line 1)"));
    free(errs);
    c = load("[usage x]\n" L_A, &errs);
    assert_null(c);
    assert_non_null(strstr(errs, "t.ini:1: [usage] takes no name"));
    free(errs);
}

static void test_usage_round_trip(void **state)
{
    (void)state;
    round_trip(ST "[usage]\nexport = store\ninterval = 5s\nwindow = 1h\nusage_ttl = 40d\n"
                  "max_pending = 77\n" L_A);
    round_trip("[usage]\nexport = /var/lib/sluice/u.jsonl\n" L_A);
    char *out = round_trip_within(ST "[usage]\nexport = store\n" L_A, 190);
    assert_non_null(strstr(out, "[usage]\nexport          = store\ninterval        = 10s\n"));
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage_defaults),
        cmocka_unit_test(test_usage_values),
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_usage_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

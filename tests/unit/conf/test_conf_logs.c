/* The keys of the decision log ([sluice] decision_log, decision_log_rate)
 * and of the access logs (access_log, access_log_format on http
 * listeners): defaults, values, errors, and -T's round trip. */
#include "conf_test.h"

#define H "[listener w]\nlisten = *:8080\nupstream = 10.0.0.1:80\nprotocol = http\n"

static void test_decision_log_keys(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok(L_A);
    assert_int_equal(c->decision_log, SL_DLOG_REJECTIONS);
    assert_int_equal(c->decision_log_rate, 100);
    sl_conf_free(c);
    c = load_ok("[sluice]\ndecision_log = all\ndecision_log_rate = 5\n" L_A);
    assert_int_equal(c->decision_log, SL_DLOG_ALL);
    assert_int_equal(c->decision_log_rate, 5);
    sl_conf_free(c);
    c = load_ok("[sluice]\ndecision_log = off\n" L_A);
    assert_int_equal(c->decision_log, SL_DLOG_OFF);
    sl_conf_free(c);
    char *errs = NULL;
    c = load("[sluice]\ndecision_log = some\ndecision_log_rate = 0\n" L_A, &errs);
    assert_null(c);
    assert_non_null(strstr(errs, "t.ini:2: decision_log"));
    assert_non_null(strstr(errs, "t.ini:3: decision_log_rate"));
    free(errs);
    round_trip("[sluice]\ndecision_log = all\ndecision_log_rate = 7\n" L_A);
}

static void test_access_log_keys(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok(H);
    assert_null(c->listeners->access_log);
    assert_int_equal(c->listeners->access_log_format, SL_ALOG_COMBINED);
    sl_conf_free(c);
    c = load_ok(H "access_log = /var/log/sluice/w.log\naccess_log_format = json\n");
    assert_string_equal(c->listeners->access_log, "/var/log/sluice/w.log");
    assert_int_equal(c->listeners->access_log_format, SL_ALOG_JSON);
    sl_conf_free(c);
    /* relative: from the configuration file's directory (none here: the
     * working directory) */
    c = load_ok(H "access_log = w.log\n");
    assert_true(c->listeners->access_log[0] == '/');
    assert_non_null(strstr(c->listeners->access_log, "/w.log"));
    sl_conf_free(c);
    c = load_ok(H "access_log = off\n");
    assert_null(c->listeners->access_log);
    sl_conf_free(c);
    expect_errors(L_A "access_log = /tmp/a.log\n",
                  "t.ini:4: access_log: only for http listeners (this listener is resp)\n");
    expect_errors(L_A "access_log_format = json\n",
                  "t.ini:4: access_log_format: only for http listeners (this listener is resp)\n");
    char *errs = NULL;
    c = load(H "access_log_format = common\n", &errs);
    assert_null(c);
    assert_non_null(strstr(errs, "t.ini:5: access_log_format"));
    free(errs);
    round_trip(H "access_log = /var/log/sluice/w.log\naccess_log_format = json\n");
    round_trip(H);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decision_log_keys),
        cmocka_unit_test(test_access_log_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

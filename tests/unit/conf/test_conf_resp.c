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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_setup_commands),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

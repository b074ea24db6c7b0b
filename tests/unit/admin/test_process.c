/* sluice unit tests — admin/process.c: /proc/PID/stat read by field,
 * counted from the last ')' (a command name may hold blanks and
 * parentheses); the process and reload families as /metrics writes them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "admin/admin.h"
#include "admin/process.h"

static void test_parse_stat(void **state)
{
    (void)state;
    unsigned long long cpu, start, vsize;
    long long rss;
    /* proc(5): pid (comm) state ppid pgrp session tty tpgid flags minflt
     * cminflt majflt cmajflt utime stime cutime cstime prio nice threads
     * itreal starttime vsize rss ... */
    static const char line[] =
        "4242 (sl ) (x) y) S 1 4242 4242 0 -1 4194560 5000000000 0 3 0 "
        "250 125 7 8 20 0 1 0 987654 123456789012 3456 18446744073709551615 1 1 0 0\n";
    assert_int_equal(sl_process_parse_stat(line, &cpu, &start, &vsize, &rss), 0);
    assert_int_equal(cpu, 375);
    assert_int_equal(start, 987654);
    assert_int_equal(vsize, 123456789012ULL);
    assert_int_equal(rss, 3456);
    assert_int_equal(sl_process_parse_stat("4242 sluice S 1", &cpu, &start, &vsize, &rss), -1);
    assert_int_equal(sl_process_parse_stat("4242 (sluice) S 1 2 3", &cpu, &start, &vsize, &rss), -1);
    /* The real one. */
    FILE *f = fopen("/proc/self/stat", "r");
    assert_non_null(f);
    char buf[1024];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    assert_int_equal(sl_process_parse_stat(buf, &cpu, &start, &vsize, &rss), 0);
    assert_true(vsize > 0 && rss > 0 && start > 0);
}

static char *render(int reload_ok, int count)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    struct sl_metrics *m = sl_metrics_open(f);
    assert_non_null(m);
    for (int i = 0; i < count; i++)
        sl_reloads_count(reload_ok);
    sl_process_metrics(m);
    sl_build_reload_metrics(m);
    sl_metrics_close(m);
    fclose(f);
    return text;
}

static void test_families(void **state)
{
    (void)state;
    sl_reloads_init();
    char *t = render(1, 0);
    static const char *const want[] = {
        "# TYPE process_cpu_seconds_total counter\n",
        "# TYPE process_resident_memory_bytes gauge\n",
        "# TYPE process_virtual_memory_bytes gauge\n",
        "# TYPE process_open_fds gauge\n",
        "# TYPE process_max_fds gauge\n",
        "# TYPE process_start_time_seconds gauge\n",
        "sluice_build_info{version=\"" SL_VERSION "\"} 1\n",
        "# TYPE sluice_reloads_total counter\n",
        "sluice_reloads_total{result=\"success\"} 0\n",
        "sluice_reloads_total{result=\"failure\"} 0\n",
        "sluice_config_last_reload_successful 1\n",
        "# TYPE sluice_last_reload_success_timestamp_seconds gauge\n",
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        if (strstr(t, want[i]) == NULL)
            fail_msg("missing %s in:\n%s", want[i], t);
    free(t);
    t = render(0, 2);
    assert_non_null(strstr(t, "sluice_reloads_total{result=\"failure\"} 2\n"));
    assert_non_null(strstr(t, "sluice_config_last_reload_successful 0\n"));
    free(t);
    t = render(1, 1);
    assert_non_null(strstr(t, "sluice_reloads_total{result=\"success\"} 1\n"));
    assert_non_null(strstr(t, "sluice_reloads_total{result=\"failure\"} 2\n"));
    assert_non_null(strstr(t, "sluice_config_last_reload_successful 1\n"));
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_stat),
        cmocka_unit_test(test_families),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* sluice integration tests — the shipped configuration files.
 *
 * `sluice -t -c FILE` on conf/sluice.ini and on every *.ini in
 * conf/examples/ (found by listing the directory, so a new example is
 * covered without an edit here) must exit 0 and print "configuration OK":
 * the binary's own check, limits included (sl_limiter_validate), not only
 * the loader's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "integration/harness.h"

/* Runs `sluice -t -c <path>`; returns its exit status (or -1) with its
 * stdout and stderr in <out> (NUL-terminated, cut at <cap>). */
static int run_check(const char *path, char *out, size_t cap)
{
    int fds[2];
    if (pipe(fds) < 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        execl(th_sluice_bin(), th_sluice_bin(), "-t", "-c", path, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t k;
    while ((k = read(fds[0], out + n, cap - 1 - n)) > 0 && n + (size_t)k < cap - 1)
        n += (size_t)k;
    if (k > 0)
        n += (size_t)k;
    out[n] = '\0';
    close(fds[0]);
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

static void check_ok(const char *path)
{
    char out[8192];
    int rc = run_check(path, out, sizeof(out));
    if (rc != 0 || strstr(out, "configuration OK\n") == NULL)
        print_error("sluice -t -c %s: exit %d\n%s", path, rc, out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "configuration OK\n"));
}

static void test_examples_check_ok(void **state)
{
    (void)state;
    check_ok("conf/sluice.ini");
    DIR *d = opendir("conf/examples");
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".ini") != 0)
            continue;
        char path[512];
        snprintf(path, sizeof(path), "conf/examples/%s", e->d_name);
        check_ok(path);
        n++;
    }
    closedir(d);
    assert_true(n >= 3);
}

/* The counterpart: a limit whose cost can never fit is refused by -t with
 * FILE:LINE and exit 1 (what resp-limits.ini shipped before: KEYS=100
 * against the default burst of 1000/m, 17). */
static void test_cost_above_burst_refused(void **state)
{
    (void)state;
    char path[] = "/tmp/sluice-conf-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    th_track_file(path);
    static const char ini[] = "[store]\nurl = local\n"
                              "[listener cache]\nlisten = 127.0.0.1:6380\nupstream = 127.0.0.1:6379\n"
                              "[limit expensive]\nlistener = cache\nrate = 1000/m\n"
                              "commands = KEYS SCAN\ncost = KEYS=100 SCAN=10 *=1\n";
    assert_int_equal(th_write_all(fd, ini, sizeof(ini) - 1), 0);
    close(fd);
    char out[8192], want[512];
    assert_int_equal(run_check(path, out, sizeof(out)), 1);
    snprintf(want, sizeof(want), "%s:10: cost: KEYS=100 is more than the burst (17)", path);
    if (strstr(out, want) == NULL)
        print_error("got: %s", out);
    assert_non_null(strstr(out, want));
    assert_null(strstr(out, "configuration OK"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_examples_check_ok),
        cmocka_unit_test(test_cost_above_burst_refused),
    };
    return th_finish(cmocka_run_group_tests(tests, NULL, NULL));
}

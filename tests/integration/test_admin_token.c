/* sluice integration tests — admin_token_file: the admin endpoint's bearer token.
 *
 * A real build/sluice (one process, and a master with two workers, whose
 * admin endpoint answers for them) with a token file: every admin request
 * but /healthz and /readyz needs `Authorization: Bearer TOKEN` (401 with a
 * `WWW-Authenticate: Bearer` challenge otherwise); a reload reads the file
 * again; a file that is empty or missing fails the load, naming it. And
 * `sluice -t`'s warnings: an admin address beyond loopback without a token,
 * a token file readable by its group or others. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "integration/harness.h"

static pid_t echo_pid;
static int echo_port;

static int group_setup(void **state)
{
    (void)state;
    echo_pid = th_fork_server(&echo_port, th_serve_echo, NULL);
    return echo_pid < 0 ? -1 : 0;
}

static int group_teardown(void **state)
{
    (void)state;
    th_kill_server(echo_pid);
    th_kill_all();
    return 0;
}

/* Writes <text> to <path> with <mode>, tracked for removal. */
static void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, mode), 0);
    th_track_file(path);
}

static void tmp_path(char *buf, size_t cap, const char *what)
{
    static int seq;
    snprintf(buf, cap, "/tmp/sluice-test-token-%d-%d-%s", (int)getpid(), ++seq, what);
}

/* One admin request: <method> <path> with the header lines <hdrs> (each
 * ending in CRLF, or NULL). Returns the whole response (malloc'd) and sets
 * *status to its status code (0: no response). */
static char *ask(int admin, const char *method, const char *path, const char *hdrs, int *status)
{
    char req[1024];
    int n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: x\r\n%s\r\n", method, path,
                     hdrs != NULL ? hdrs : "");
    size_t len = 0;
    int eof = 0;
    char *out = th_transcript(admin, req, (size_t)n, &len, TH_MS, &eof);
    assert_non_null(out);
    *status = 0;
    if (len > 12 && strncmp(out, "HTTP/1.1 ", 9) == 0)
        *status = atoi(out + 9);
    return out;
}

static int status_of(int admin, const char *method, const char *path, const char *hdrs)
{
    int st;
    free(ask(admin, method, path, hdrs, &st));
    return st;
}

/* Polls /readyz (open without a token) until it says 200. */
static void wait_ready(int admin)
{
    uint64_t t0 = th_now_ms();
    while (status_of(admin, "GET", "/readyz", NULL) != 200) {
        assert_true(th_now_ms() - t0 < TH_MS);
        usleep(20000);
    }
}

#define BEARER(t) "Authorization: Bearer " t "\r\n"

/* What every test checks of a running sluice whose token is <tok>. */
static void check_token(int admin, const char *tok)
{
    char good[256], lower[256], longer[256], shorter[256], two[512];
    snprintf(good, sizeof(good), "Authorization: Bearer %s\r\n", tok);
    snprintf(lower, sizeof(lower), "authorization:   bearer   %s  \r\n", tok);
    snprintf(longer, sizeof(longer), "Authorization: Bearer %sx\r\n", tok);
    snprintf(shorter, sizeof(shorter), "Authorization: Bearer %.*s\r\n", (int)strlen(tok) - 1, tok);
    snprintf(two, sizeof(two), "%s%s", good, BEARER("other"));

    static const char *const guarded[] = { "/metrics", "/stats" };
    for (size_t i = 0; i < 2; i++) {
        const char *p = guarded[i];
        int st;
        /* no token: a bare challenge */
        char *r = ask(admin, "GET", p, NULL, &st);
        assert_int_equal(st, 401);
        assert_non_null(strstr(r, "\r\nWWW-Authenticate: Bearer realm=\"sluice\"\r\n"));
        assert_null(strstr(r, "sluice_")); /* nothing of the page */
        free(r);
        /* a wrong one: the challenge says so (RFC 6750 3.1) */
        r = ask(admin, "GET", p, BEARER("wrong"), &st);
        assert_int_equal(st, 401);
        assert_non_null(strstr(r, "WWW-Authenticate: Bearer realm=\"sluice\", error=\"invalid_token\"\r\n"));
        free(r);
        assert_int_equal(status_of(admin, "GET", p, longer), 401);
        assert_int_equal(status_of(admin, "GET", p, shorter), 401);
        assert_int_equal(status_of(admin, "GET", p, "Authorization: Bearer\r\n"), 401);
        assert_int_equal(status_of(admin, "GET", p, "Authorization: Basic dXNlcjpwdw==\r\n"), 401);
        assert_int_equal(status_of(admin, "GET", p, two), 401); /* one field only */
        assert_int_equal(status_of(admin, "HEAD", p, NULL), 401);
        /* the token, however the scheme is spelt */
        assert_int_equal(status_of(admin, "GET", p, good), 200);
        assert_int_equal(status_of(admin, "GET", p, lower), 200);
        assert_int_equal(status_of(admin, "HEAD", p, good), 200);
    }
    int st;
    char *r = ask(admin, "GET", "/metrics", good, &st);
    assert_int_equal(st, 200);
    assert_non_null(strstr(r, "sluice_build_info"));
    free(r);
    /* the probes stay open */
    assert_int_equal(status_of(admin, "GET", "/healthz", NULL), 200);
    assert_int_equal(status_of(admin, "GET", "/readyz", NULL), 200);
    assert_int_equal(status_of(admin, "GET", "/healthz", BEARER("wrong")), 200);
    /* an unknown path tells nothing without the token */
    assert_int_equal(status_of(admin, "GET", "/nope", NULL), 401);
    assert_int_equal(status_of(admin, "GET", "/nope", good), 404);
    assert_int_equal(status_of(admin, "POST", "/stats", NULL), 401);
    assert_int_equal(status_of(admin, "POST", "/stats", good), 405);
    /* the limits API is behind it too: its lookups name identities and its
     * reset changes what the fleet enforces */
    assert_int_equal(status_of(admin, "GET", "/limits", NULL), 401);
    assert_int_equal(status_of(admin, "GET", "/limits/nope/identities/ip%3A1.2.3.4", NULL), 401);
    assert_int_equal(status_of(admin, "POST", "/limits/nope/identities/ip%3A1.2.3.4/reset", NULL), 401);
    assert_int_equal(status_of(admin, "POST", "/limits/nope/identities/ip%3A1.2.3.4/reset", BEARER("wrong")), 401);
    assert_int_equal(status_of(admin, "GET", "/limits", good), 200);
    assert_int_equal(status_of(admin, "GET", "/limits/nope/identities/ip%3A1.2.3.4", good), 404);
}

static void config(char *buf, size_t cap, int admin, int port, const char *tokfile,
                   const char *extra)
{
    snprintf(buf, cap,
             "[sluice]\nadmin = 127.0.0.1:%d\n%s%s%s%s"
             "[listener a]\nprotocol = tcp\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n",
             admin, tokfile ? "admin_token_file = " : "", tokfile ? tokfile : "",
             tokfile ? "\n" : "", extra, port, echo_port);
}

/* Rewrites the token file, reloads and waits for the log line <done>
 * (the <n>th of its kind). */
static void reload(struct th_proc *sl, const char *tokfile, const char *tok, const char *done, int n)
{
    write_file(tokfile, tok, 0600);
    assert_int_equal(kill(sl->pid, SIGHUP), 0);
    assert_int_equal(th_log_wait(sl->log, done, n, TH_MS), 0);
}

static void run(const char *extra, const char *reloaded)
{
    char tokfile[128], ini[1024];
    tmp_path(tokfile, sizeof(tokfile), "tok");
    write_file(tokfile, "first-T0ken.abc\n", 0600); /* the newline is not part of it */
    int admin = th_free_port(), port = th_free_port();
    config(ini, sizeof(ini), admin, port, tokfile, extra);
    struct th_proc sl;
    assert_int_equal(th_sluice_start(&sl, ini, admin), 0);
    wait_ready(admin);
    check_token(admin, "first-T0ken.abc");

    /* A rotated token: the reload reads the file again; the old one is out. */
    reload(&sl, tokfile, "second-token-xyz\n", reloaded, 1);
    assert_int_equal(status_of(admin, "GET", "/metrics", BEARER("first-T0ken.abc")), 401);
    check_token(admin, "second-token-xyz");

    /* An empty file fails the reload (naming the file); the running token stays. */
    reload(&sl, tokfile, "", "reload failed", 1);
    assert_true(th_log_count(sl.log, "is empty") >= 1);
    assert_true(th_log_count(sl.log, tokfile) >= 1);
    assert_true(th_running(&sl, NULL));
    assert_int_equal(status_of(admin, "GET", "/stats", BEARER("second-token-xyz")), 200);
    assert_int_equal(status_of(admin, "GET", "/stats", NULL), 401);

    /* So does a missing one. */
    assert_int_equal(unlink(tokfile), 0);
    assert_int_equal(kill(sl.pid, SIGHUP), 0);
    assert_int_equal(th_log_wait(sl.log, "reload failed", 2, TH_MS), 0);
    assert_int_equal(status_of(admin, "GET", "/stats", BEARER("second-token-xyz")), 200);

    /* Without the key, the endpoint is open again. */
    config(ini, sizeof(ini), admin, port, NULL, extra);
    FILE *f = fopen(sl.conf, "w");
    assert_non_null(f);
    fputs(ini, f);
    fclose(f);
    assert_int_equal(kill(sl.pid, SIGHUP), 0);
    assert_int_equal(th_log_wait(sl.log, reloaded, 2, TH_MS), 0);
    assert_int_equal(status_of(admin, "GET", "/stats", NULL), 200);
    assert_int_equal(th_stop(&sl), 0);
}

static void test_one_process(void **state)
{
    (void)state;
    run("", "msg=reloaded ");
}

/* The master answers the admin endpoint for its workers: its own check. */
static void test_workers(void **state)
{
    (void)state;
    run("workers = 2\n", "reloading the workers");
}

/* ---- sluice -t ------------------------------------------------------------ */

/* Runs `sluice -t -c <path>`; returns its exit status (or -1), its stderr
 * and stdout in <out>. */
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
    while (n < cap - 1 && (k = read(fds[0], out + n, cap - 1 - n)) > 0)
        n += (size_t)k;
    out[n] = '\0';
    close(fds[0]);
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

/* Writes a configuration with admin = <addr> and (when <tokfile>) the
 * token file, runs -t on it; returns the exit status, output in <out>. */
static int check(const char *addr, const char *tokfile, char *out, size_t cap)
{
    char path[128], ini[512];
    tmp_path(path, sizeof(path), "t.ini");
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = %s\n%s%s%s"
             "[listener a]\nprotocol = tcp\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n",
             addr, tokfile ? "admin_token_file = " : "", tokfile ? tokfile : "",
             tokfile ? "\n" : "", th_free_port(), echo_port);
    write_file(path, ini, 0644);
    return run_check(path, out, cap);
}

static void test_check_warnings(void **state)
{
    (void)state;
    char out[4096], tok[128];
    tmp_path(tok, sizeof(tok), "tok");
    write_file(tok, "t0ken\n", 0600);

    /* loopback, with or without a token: nothing to say */
    assert_int_equal(check("127.0.0.1:9121", NULL, out, sizeof(out)), 0);
    assert_string_equal(out, "configuration OK\n");
    assert_int_equal(check("[::1]:9121", NULL, out, sizeof(out)), 0);
    assert_string_equal(out, "configuration OK\n");
    assert_int_equal(check("127.0.0.1:9121", tok, out, sizeof(out)), 0);
    assert_string_equal(out, "configuration OK\n");

    /* beyond loopback without a token: a warning on admin's line, not a failure */
    static const char *const open_addrs[] = { "*:9121", "0.0.0.0:9121", "[::]:9121" };
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(check(open_addrs[i], NULL, out, sizeof(out)), 0);
        assert_non_null(strstr(out, "t.ini:2: warning: admin: "));
        assert_non_null(strstr(out, "is reachable beyond loopback and admin_token_file is not set"));
        assert_non_null(strstr(out, "configuration OK\n"));
    }
    /* ... and with one, no warning */
    assert_int_equal(check("*:9121", tok, out, sizeof(out)), 0);
    assert_string_equal(out, "configuration OK\n");

    /* a token file others (or its group) can read: a warning on its line */
    assert_int_equal(chmod(tok, 0644), 0);
    assert_int_equal(check("127.0.0.1:9121", tok, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "t.ini:3: warning: admin_token_file '"));
    assert_non_null(strstr(out, "' is readable by others (mode 0644)"));
    assert_non_null(strstr(out, "configuration OK\n"));
    assert_int_equal(chmod(tok, 0640), 0);
    assert_int_equal(check("127.0.0.1:9121", tok, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "is readable by its group (mode 0640)"));

    /* empty, missing, unusable: errors naming the file */
    write_file(tok, "", 0600);
    assert_int_equal(check("127.0.0.1:9121", tok, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "t.ini:3: admin_token_file: '"));
    assert_non_null(strstr(out, tok));
    assert_non_null(strstr(out, "' is empty"));
    write_file(tok, "\n", 0600);
    assert_int_equal(check("127.0.0.1:9121", tok, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "' is empty"));
    write_file(tok, "two words\n", 0600);
    assert_int_equal(check("127.0.0.1:9121", tok, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "holds a space"));
    assert_int_equal(unlink(tok), 0);
    assert_int_equal(check("127.0.0.1:9121", tok, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "t.ini:3: admin_token_file: cannot read '"));
    assert_non_null(strstr(out, tok));
    /* an empty value is no token, as `password_file =` is no password */
    assert_int_equal(check("*:9121\nadmin_token_file =", NULL, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "is reachable beyond loopback and admin_token_file is not set"));
    /* the token is never written in the file itself */
    assert_int_equal(check("127.0.0.1:9121\nadmin_token = abc", NULL, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "admin_token: "));
    assert_null(strstr(out, "abc"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_process),
        cmocka_unit_test(test_workers),
        cmocka_unit_test(test_check_warnings),
    };
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

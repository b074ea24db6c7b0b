/* sluice integration tests — playing systemd for `Type=notify`.
 *
 * The test binds a datagram socket (SO_PASSCRED on, so each message carries
 * its sender's pid, as systemd checks with NotifyAccess=main), starts
 * build/sluice with NOTIFY_SOCKET naming it, and reads what comes:
 *
 *   READY=1 ─ only once the listener accepts (every worker's, with workers = 2)
 *   SIGHUP  ─> RELOADING=1 + MONOTONIC_USEC (our CLOCK_MONOTONIC) ─> READY=1
 *   SIGHUP with a bad file ─> RELOADING=1 ─> READY=1 (the old configuration serves)
 *   SIGTERM ─> STOPPING=1, and sluice exits 0
 *
 * STATUS= lines (also sent alone every 5 s) are skipped between state
 * messages. An abstract "@name" socket works too; sl_notify_addr() is checked
 * directly; deploy/systemd/sluice.service passes `systemd-analyze verify`
 * when that is installed. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/notify.h"
#include "integration/harness.h"

static struct th_proc redis_p, sluice_p;
static int port, admin, nfd = -1;
static char npath[108];

static int group_setup(void **state)
{
    (void)state;
    return th_redis_start(&redis_p, NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    th_stop(&redis_p);
    th_kill_all();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    int rc = 0;
    if (sluice_p.pid > 0 && th_stop(&sluice_p) != 0) {
        fprintf(stderr, "sluice did not exit cleanly\n");
        rc = -1;
    }
    if (nfd >= 0)
        close(nfd);
    nfd = -1;
    if (npath[0] == '/')
        unlink(npath);
    npath[0] = '\0';
    return rc;
}

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Binds systemd's side: a path socket, or an abstract one when <abstract>. */
static void notify_socket(int abstract)
{
    static int seq;
    nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(nfd >= 0);
    int on = 1;
    assert_int_equal(setsockopt(nfd, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)), 0);
    snprintf(npath, sizeof(npath), "%s/sluice-test-notify-%d-%d.sock", abstract ? "@" : "/tmp",
             (int)getpid(), ++seq);
    struct sockaddr_un sa;
    socklen_t len;
    assert_int_equal(sl_notify_addr(npath, &sa, &len), 0);
    if (!abstract)
        unlink(npath);
    assert_int_equal(bind(nfd, (struct sockaddr *)&sa, len), 0);
}

/* The next datagram within <ms> into <buf> (NUL-terminated); its sender's
 * pid in *pid. Returns its length, or -1 on timeout. */
static int next_msg(char *buf, size_t cap, int ms, pid_t *pid)
{
    struct pollfd p = { .fd = nfd, .events = POLLIN };
    if (poll(&p, 1, ms) <= 0)
        return -1;
    union {
        struct cmsghdr h;
        char           b[CMSG_SPACE(sizeof(struct ucred))];
    } ctl;
    struct iovec iov = { .iov_base = buf, .iov_len = cap - 1 };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = &ctl,
                         .msg_controllen = sizeof(ctl) };
    ssize_t n = recvmsg(nfd, &mh, 0);
    if (n < 0)
        return -1;
    buf[n] = '\0';
    *pid = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS)
            *pid = ((struct ucred *)(void *)CMSG_DATA(c))->pid;
    return (int)n;
}

/* Waits for the next message that is not STATUS= alone and checks that its
 * first line is <state>, that sluice's main process sent it, and (when
 * <status> is not NULL) that it carries a STATUS= holding <status>. Returns
 * the message (static). */
static const char *expect_state(const char *state, const char *status)
{
    static char msg[2048];
    uint64_t end = th_now_ms() + TH_MS;
    for (;;) {
        uint64_t now = th_now_ms();
        pid_t pid = 0;
        int n = now < end ? next_msg(msg, sizeof(msg), (int)(end - now), &pid) : -1;
        if (n < 0) {
            fprintf(stderr, "no %s within %d ms (log: %s)\n", state, TH_MS, sluice_p.log);
            fail();
        }
        if (pid != sluice_p.pid) {
            fprintf(stderr, "a message from pid %d, not sluice's %d: \"%s\"\n", (int)pid,
                    (int)sluice_p.pid, msg);
            fail();
        }
        if (strncmp(msg, "STATUS=", 7) == 0)
            continue;
        size_t sl = strlen(state);
        if (strncmp(msg, state, sl) != 0 || (msg[sl] != '\0' && msg[sl] != '\n')) {
            fprintf(stderr, "expected %s, got \"%s\"\n", state, msg);
            fail();
        }
        if (status != NULL) {
            const char *st = strstr(msg, "\nSTATUS=");
            if (st == NULL || strstr(st, status) == NULL) {
                fprintf(stderr, "expected STATUS= with \"%s\" in \"%s\"\n", status, msg);
                fail();
            }
        }
        return msg;
    }
}

/* PING on a new connection, at once (no retry): 1 when +PONG came. */
static int ping_ok(void)
{
    struct th_conn c;
    if (th_conn_open(&c, port) < 0)
        return 0;
    int ok = 0;
    if (th_conn_send(&c, "PING\r\n") == 0) {
        char *r = th_conn_reply(&c, TH_MS);
        ok = r != NULL && strcmp(r, "+PONG\r\n") == 0;
        free(r);
    }
    th_conn_close(&c);
    return ok;
}

/* Starts sluice (not waiting for the port: READY=1 is the signal) with
 * NOTIFY_SOCKET set for it alone. */
static void start(int workers)
{
    port = th_free_port();
    admin = th_free_port();
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nworkers = %d\nshutdown_grace = 3s\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = resp\n",
             admin, workers, port, redis_p.port);
    assert_int_equal(setenv("NOTIFY_SOCKET", npath, 1), 0);
    int rc = th_sluice_start(&sluice_p, ini, 0);
    unsetenv("NOTIFY_SOCKET");
    assert_int_equal(rc, 0);
}

/* SIGHUP: RELOADING=1 with a MONOTONIC_USEC taken during the reload, then READY=1. */
static void reload_ok(const char *status)
{
    uint64_t before = mono_us();
    kill(sluice_p.pid, SIGHUP);
    const char *m = expect_state("RELOADING=1", NULL);
    uint64_t after = mono_us();
    const char *mu = strstr(m, "\nMONOTONIC_USEC=");
    assert_non_null(mu);
    unsigned long long us = strtoull(mu + 16, NULL, 10);
    assert_true(us >= before && us <= after);
    expect_state("READY=1", status);
}

static void stop_ok(const char *status)
{
    kill(sluice_p.pid, SIGTERM);
    expect_state("STOPPING=1", status);
    int st = th_signal_wait(&sluice_p, 0, TH_MS);
    assert_true(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_single(void **state)
{
    (void)state;
    notify_socket(0);
    start(1);
    expect_state("READY=1", "serving listeners=1 connections=0 store=local");
    /* Ready means accepting: the first connection, without a retry, works. */
    assert_true(ping_ok());
    reload_ok("listeners=1");
    assert_true(ping_ok());
    stop_ok("draining");
}

static void test_workers(void **state)
{
    (void)state;
    notify_socket(0);
    start(2);
    expect_state("READY=1", "workers=2/2 listeners=1");
    /* Not one worker: both had bound when READY=1 was sent. */
    assert_int_equal(th_metric(admin, "sluice_workers_ready"), 2);
    assert_true(ping_ok());
    reload_ok("workers=2/2");
    assert_true(ping_ok());
    stop_ok("stopping");
}

/* A bad file on SIGHUP: the old configuration stays, and systemd hears READY=1. */
static void test_failed_reload(void **state)
{
    (void)state;
    notify_socket(0);
    start(1);
    expect_state("READY=1", NULL);
    FILE *f = fopen(sluice_p.conf, "w");
    assert_non_null(f);
    fputs("[sluice]\nno_such_key = 1\n", f);
    fclose(f);
    reload_ok("listeners=1");
    assert_true(th_log_count(sluice_p.log, "reload failed") >= 1);
    assert_true(ping_ok());
    stop_ok(NULL);
}

static void test_failed_reload_workers(void **state)
{
    (void)state;
    notify_socket(0);
    start(2);
    expect_state("READY=1", NULL);
    FILE *f = fopen(sluice_p.conf, "w");
    assert_non_null(f);
    fputs("[listener r]\nlisten = nowhere\n", f);
    fclose(f);
    reload_ok("workers=2/2");
    assert_true(ping_ok());
    stop_ok(NULL);
}

static void test_abstract_socket(void **state)
{
    (void)state;
    notify_socket(1);
    start(1);
    expect_state("READY=1", "listeners=1");
    assert_true(ping_ok());
    stop_ok(NULL);
}

static void test_addr(void **state)
{
    (void)state;
    struct sockaddr_un sa;
    socklen_t len;
    assert_int_equal(sl_notify_addr("/run/systemd/notify", &sa, &len), 0);
    assert_string_equal(sa.sun_path, "/run/systemd/notify");
    assert_int_equal(len, offsetof(struct sockaddr_un, sun_path) + 20);
    assert_int_equal(sl_notify_addr("@x/y", &sa, &len), 0);
    assert_int_equal(sa.sun_path[0], '\0');
    assert_memory_equal(sa.sun_path + 1, "x/y", 3);
    assert_int_equal(len, offsetof(struct sockaddr_un, sun_path) + 4); /* no NUL counted */
    assert_int_equal(sl_notify_addr("", &sa, &len), -1);
    assert_int_equal(sl_notify_addr("@", &sa, &len), -1);
    assert_int_equal(sl_notify_addr("relative/path", &sa, &len), -1);
    assert_int_equal(sl_notify_addr("vsock:2:1234", &sa, &len), -1);
    char big[200];
    memset(big, 'a', sizeof(big) - 1);
    big[0] = '/';
    big[sizeof(big) - 1] = '\0';
    assert_int_equal(sl_notify_addr(big, &sa, &len), -1);
}

/* deploy/systemd/sluice.service, with its /usr/bin/sluice pointed at the
 * binary under test (verify checks that the commands exist), must verify
 * without a single complaint. */
static void test_unit_verifies(void **state)
{
    (void)state;
    if (system("command -v systemd-analyze >/dev/null 2>&1") != 0) {
        printf("# SKIP: systemd-analyze is not installed: the unit is not verified\n");
        skip();
    }
    char bin[PATH_MAX], dir[] = "/tmp/sluice-test-unit-XXXXXX", cmd[3 * PATH_MAX];
    assert_non_null(realpath(th_sluice_bin(), bin));
    assert_non_null(mkdtemp(dir));
    snprintf(cmd, sizeof(cmd),
             "sed 's#/usr/bin/sluice#%s#g' deploy/systemd/sluice.service > %s/sluice.service && "
             "systemd-analyze verify --man=no %s/sluice.service > %s/out 2>&1",
             bin, dir, dir, dir);
    int rc = system(cmd);
    char out[PATH_MAX];
    snprintf(out, sizeof(out), "%s/out", dir);
    char *text = th_slurp(out);
    if (rc != 0 || text == NULL || text[0] != '\0')
        fprintf(stderr, "systemd-analyze verify (rc %d):\n%s", rc, text ? text : "(no output)\n");
    assert_int_equal(rc, 0);
    assert_non_null(text);
    assert_string_equal(text, "");
    free(text);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_addr),
        cmocka_unit_test_teardown(test_single, teardown),
        cmocka_unit_test_teardown(test_workers, teardown),
        cmocka_unit_test_teardown(test_failed_reload, teardown),
        cmocka_unit_test_teardown(test_failed_reload_workers, teardown),
        cmocka_unit_test_teardown(test_abstract_socket, teardown),
        cmocka_unit_test(test_unit_verifies),
    };
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

/* sluice integration tests — a pooled RESP listener beside a busy script.
 *
 * Redis runs one command at a time, but a script (EVAL, FCALL ...) past
 * busy-reply-threshold does not hold the other connections: each request
 * there is answered -BUSY at once, and SCRIPT KILL / FUNCTION KILL stop the
 * script. A request that a pooled listener wrote BEHIND the script on the
 * same shared connection would get neither: it would wait for the script to
 * end, and a client that waits for that reply before it sends SCRIPT KILL
 * (Redis's own suite: "Timedout read-only scripts can be killed by SCRIPT
 * KILL even when use pcall") would wait for good.
 *
 * The case that used to hang: the script and another client's PING read by
 * sluice in the SAME loop turn, so that they shared one write. To get that
 * without relying on timing, sluice is stopped (SIGSTOP, polled until every
 * thread is stopped), both requests are written and polled until the kernel
 * holds them for sluice (/proc/net/tcp's receive queue), in that order, and
 * sluice continues: one epoll wait returns both, the script's first.
 *
 * docs/resp.md, "Pooled listeners (upstream_pool)", is the contract.
 * BUSY_ONLY=<cmocka pattern> picks tests. */
#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "integration/harness.h"
#include "net/upool.h" /* SL_UPOOL_STALL_MS */

static struct th_proc redis_p, sl_p;
static int port_pool2, port_pool4;

static redisContext *direct(void)
{
    struct timeval tv = { TH_MS / 1000, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", redis_p.port, tv);
    if (!c || c->err) {
        if (c)
            redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

static int group_setup(void **state)
{
    (void)state;
    if (th_redis_start(&redis_p, NULL) < 0)
        return -1;
    port_pool2 = th_free_port();
    port_pool4 = th_free_port();
    while (port_pool4 == port_pool2)
        port_pool4 = th_free_port();
    char ini[1024];
    /* one worker: both clients are on the same engine */
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin =\nshutdown_grace = 2s\nworkers = 1\n[store]\nurl = local\n"
             "[listener p2]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nupstream_pool = 2\n"
             "[listener p4]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nupstream_pool = 4\n",
             port_pool2, redis_p.port, port_pool4, redis_p.port);
    if (th_sluice_start(&sl_p, ini, port_pool4) < 0) {
        th_stop(&redis_p);
        return -1;
    }
    redisContext *d = direct();
    if (!d)
        return -1;
    redisReply *r = redisCommand(d, "CONFIG SET busy-reply-threshold 10");
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (r)
        freeReplyObject(r);
    redisFree(d);
    return ok ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    if (sl_p.pid > 0)
        kill(sl_p.pid, SIGCONT);
    int st = th_stop(&sl_p);
    th_stop(&redis_p);
    th_kill_all();
    return st == 0 ? 0 : -1;
}

/* After each test: sluice runs again, no script is left running. */
static int kill_scripts(void **state)
{
    (void)state;
    if (sl_p.pid > 0)
        kill(sl_p.pid, SIGCONT);
    redisContext *d = direct();
    if (d) {
        redisReply *r = redisCommand(d, "FUNCTION KILL");
        if (r)
            freeReplyObject(r);
        r = redisCommand(d, "SCRIPT KILL");
        if (r)
            freeReplyObject(r);
        r = redisCommand(d, "CLIENT UNPAUSE");
        if (r)
            freeReplyObject(r);
        redisFree(d);
    }
    return th_alive_or_report(&sl_p);
}

/* ---- helpers ------------------------------------------------------------------ */

/* 1 when every thread of <pid> is stopped (state T). */
static int all_stopped(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int n = 0, stopped = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char sp[300], buf[512];
        snprintf(sp, sizeof(sp), "/proc/%d/task/%s/stat", (int)pid, e->d_name);
        FILE *f = fopen(sp, "r");
        if (!f)
            continue;
        size_t k = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[k] = '\0';
        const char *rp = strrchr(buf, ')'); /* the name may hold spaces */
        n++;
        if (rp && rp[1] == ' ' && (rp[2] == 'T' || rp[2] == 't'))
            stopped++;
    }
    closedir(d);
    return n > 0 && stopped == n;
}

static void sluice_stop(void)
{
    assert_int_equal(kill(sl_p.pid, SIGSTOP), 0);
    uint64_t end = th_now_ms() + TH_MS;
    while (!all_stopped(sl_p.pid) && th_now_ms() < end)
        usleep(1000); /* polling a condition */
    assert_true(all_stopped(sl_p.pid));
}

/* Bytes the kernel holds for sluice on the connection from our <fd> to
 * <port> (its receive queue in /proc/net/tcp), or -1 when not found. */
static long queued_for_sluice(int fd, int port)
{
    struct sockaddr_in me;
    socklen_t ml = sizeof(me);
    if (getsockname(fd, (struct sockaddr *)&me, &ml) < 0)
        return -1;
    FILE *f = fopen("/proc/net/tcp", "r");
    if (!f)
        return -1;
    char line[512];
    long found = -1;
    while (found < 0 && fgets(line, sizeof(line), f)) {
        unsigned lport, rport;
        unsigned long txq, rxq;
        if (sscanf(line, " %*u: %*x:%x %*x:%x %*x %lx:%lx", &lport, &rport, &txq, &rxq) == 4 &&
            (int)lport == port && rport == ntohs(me.sin_port))
            found = (long)rxq;
    }
    fclose(f);
    return found;
}

static void wait_queued(struct th_conn *c, int port)
{
    uint64_t end = th_now_ms() + TH_MS;
    while (queued_for_sluice(c->fd, port) <= 0 && th_now_ms() < end)
        usleep(1000); /* polling a condition */
    assert_true(queued_for_sluice(c->fd, port) > 0);
}

/* 1 once Redis runs a script (a direct PING gets -BUSY). */
static int script_running(void)
{
    redisContext *d = direct();
    if (!d)
        return 0;
    redisReply *r = redisCommand(d, "PING");
    int busy = r && r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "BUSY", 4);
    if (r)
        freeReplyObject(r);
    redisFree(d);
    return busy;
}

/* <cmd> (inline) on <c>; the reply must be <want> (NULL: any). */
static void raw(struct th_conn *c, const char *cmd, const char *want)
{
    char line[512];
    snprintf(line, sizeof(line), "%s\r\n", cmd);
    assert_int_equal(th_conn_send(c, line), 0);
    char *r = th_conn_reply(c, TH_MS);
    if (!r || (want && strcmp(r, want) != 0))
        fail_msg("%s: got '%.200s', want '%s'", cmd, r ? r : "(nothing)", want ? want : "any");
    free(r);
}

/* One round: client <rd> starts a script that never ends by itself (the
 * suite's pcall loop, or a function), client <r> sends PING in the same
 * turn. r's PING is answered (+PONG when Redis read it before the script
 * began, else -BUSY), r sees -BUSY, its SCRIPT KILL (FUNCTION KILL) stops
 * the script, rd gets the script's error and both go on. */
static void busy_same_turn(int port, int fn)
{
    static const char lib[] = "#!lua name=spin\nredis.register_function('spin', function() "
                              "local f = function() while 1 do redis.call('ping') end end "
                              "while 1 do pcall(f) end end)";
    static const char body[] = "local f = function() while 1 do redis.call('ping') end end "
                               "while 1 do pcall(f) end";
    char buf[512];
    struct th_conn rd = { .fd = -1 }, r = { .fd = -1 };
    assert_int_equal(th_conn_open(&r, port), 0);
    assert_int_equal(th_conn_open(&rd, port), 0);
    raw(&r, "PING", "+PONG\r\n");
    raw(&rd, "PING", "+PONG\r\n");
    if (fn) {
        snprintf(buf, sizeof(buf), "*4\r\n$8\r\nFUNCTION\r\n$4\r\nLOAD\r\n$7\r\nREPLACE\r\n$%zu\r\n%s\r\n",
                 sizeof(lib) - 1, lib);
        assert_int_equal(th_conn_send(&rd, buf), 0);
        char *x = th_conn_reply(&rd, TH_MS);
        assert_non_null(x);
        assert_string_equal(x, "$4\r\nspin\r\n");
        free(x);
        snprintf(buf, sizeof(buf), "*3\r\n$5\r\nFCALL\r\n$4\r\nspin\r\n$1\r\n0\r\n");
    } else {
        snprintf(buf, sizeof(buf), "*3\r\n$4\r\nEVAL\r\n$%zu\r\n%s\r\n$1\r\n0\r\n", sizeof(body) - 1,
                 body);
    }

    sluice_stop();
    assert_int_equal(th_conn_send(&rd, buf), 0);
    wait_queued(&rd, port);
    assert_int_equal(th_conn_send(&r, "PING\r\n"), 0);
    wait_queued(&r, port);
    assert_int_equal(kill(sl_p.pid, SIGCONT), 0);

    char *x = th_conn_reply(&r, TH_MS);
    if (!x)
        fail_msg("%s: a PING read in the same turn as another client's script got no answer",
                 fn ? "FCALL" : "EVAL");
    if (strcmp(x, "+PONG\r\n") != 0 && strncmp(x, "-BUSY", 5) != 0)
        fail_msg("PING: got '%.200s'", x);
    int busy = strncmp(x, "-BUSY", 5) == 0;
    free(x);
    uint64_t end = th_now_ms() + TH_MS;
    while (!script_running() && th_now_ms() < end)
        usleep(2000); /* polling a condition */
    assert_true(script_running());
    while (!busy && th_now_ms() < end) {
        assert_int_equal(th_conn_send(&r, "PING\r\n"), 0);
        x = th_conn_reply(&r, TH_MS);
        if (!x)
            fail_msg("a PING beside a busy script got no answer");
        busy = strncmp(x, "-BUSY", 5) == 0;
        free(x);
    }
    assert_true(busy);
    raw(&r, fn ? "FUNCTION KILL" : "SCRIPT KILL", "+OK\r\n");
    x = th_conn_reply(&rd, TH_MS);
    assert_non_null(x);
    if (!strstr(x, "killed by user"))
        fail_msg("the script's client got '%.200s'", x);
    free(x);
    raw(&rd, "PING", "+PONG\r\n");
    raw(&r, "PING", "+PONG\r\n");
    th_conn_close(&r);
    th_conn_close(&rd);
}

static void test_eval_same_turn(void **state)
{
    (void)state;
    busy_same_turn(port_pool2, 0);
    busy_same_turn(port_pool4, 0);
}

static void test_fcall_same_turn(void **state)
{
    (void)state;
    busy_same_turn(port_pool2, 1);
    busy_same_turn(port_pool4, 1);
}

/* CLIENT PAUSE ... WRITE: Redis holds a write, and everything after it on
 * its connection, until the pause ends, and serves other connections'
 * reads meanwhile. A shared connection whose batch in flight has been
 * unanswered for long (SL_UPOOL_STALL_MS) takes no other client's request:
 * a read that comes then goes to another connection (a new one under
 * upstream_pool) and is answered at once, as directly. The paused client's
 * own pipelined GET waits behind its SET, as directly; before, it was held
 * on that connection and every new client's request joined it there. The
 * wait is for the stall to be old enough: elapsed time is the condition
 * itself (a loaded machine only makes it longer). */
static void test_paused_write(void **state)
{
    (void)state;
    redisContext *d = direct();
    assert_non_null(d);
    redisReply *r = redisCommand(d, "CLIENT PAUSE 30000 WRITE");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    int b = th_connect(port_pool2);
    assert_true(b >= 0);
    TH_SEND(b, "SET pw:k v\r\n");
    assert_int_equal(th_redis_wait_info(redis_p.port, "blocked_clients", 1, TH_MS), 0);
    TH_SEND(b, "GET pw:k\r\n"); /* held behind the paused SET */
    for (uint64_t t0 = th_now_ms(); th_now_ms() - t0 < 3 * SL_UPOOL_STALL_MS;)
        usleep(10000);
    uint64_t t1 = th_now_ms();
    int c = th_connect(port_pool2);
    assert_true(c >= 0);
    TH_SEND(c, "GET pw:other\r\nPING\r\n");
    int ok = th_expect(c, "$-1\r\n+PONG\r\n", 11, 10000) == 0;
    uint64_t took = th_now_ms() - t1;
    r = redisCommand(d, "CLIENT UNPAUSE");
    if (r)
        freeReplyObject(r);
    redisFree(d);
    if (!ok || took >= 10000)
        fail_msg("a read beside a paused write waited %llu ms", (unsigned long long)took);
    TH_EXPECT(b, "+OK\r\n$1\r\nv\r\n");
    close(b);
    close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_eval_same_turn, kill_scripts),
        cmocka_unit_test_teardown(test_fcall_same_turn, kill_scripts),
        cmocka_unit_test_teardown(test_paused_write, kill_scripts),
    };
    const char *only = getenv("BUSY_ONLY");
    if (only)
        cmocka_set_test_filter(only);
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

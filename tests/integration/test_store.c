/* sluice integration tests — the quota-store client (src/store/store.c).
 *
 * Each test runs a fresh libuv loop in this process against a real
 * redis-server (or a forked fake), drives it until a condition holds, then
 * closes the store and checks uv_loop_close() == 0. The scripts evaluated
 * are the test's own (sl_store_script_add()), so the tests do not depend on
 * the algorithms in lua/. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "core/err.h"
#include "integration/harness.h"
#include "store/scripts.h"
#include "store/store.h"

/* Generous deadlines: valgrind and sanitizer builds are slow. */
#define UP_MS 5000

static const char ECHO_LUA[] =
    "return {tonumber(ARGV[1]), tonumber(ARGV[1]) * 2, #KEYS}";
static const char BIG_LUA[] =
    "local t = {} for i = 1, 200 do t[i] = i end return t";
static const char NESTED_LUA[] = "return {1, {2, 3}}";
static const char HUGE_LUA[] = "return string.rep('x', 3000000)";
static const char INT_LUA[] = "return 42";
static const char ERR_LUA[] = "return redis.error_reply('ERR custom failure')";
static const char SET_LUA[] = "redis.call('SET', KEYS[1], ARGV[1]) return 1";
/* The heartbeat's calling convention, for when lua/heartbeat.lua is still a
 * placeholder: KEYS[1] zset, ARGV id, ttl_ms, leave -> live count. */
static const char HB_LUA[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "if ARGV[3] == '1' then redis.call('ZREM', KEYS[1], ARGV[1])\n"
    "else redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1]) end\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)\n"
    "redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)\n"
    "return redis.call('ZCARD', KEYS[1])\n";

/* ---- helpers ------------------------------------------------------------- */

struct result {
    int     called;
    int     status;
    int     n;
    int64_t vals[8];
    char    err[128];
    int     order;      /* completion order, from 1 */
    uint64_t at_ms;     /* th_now_ms() at completion */
};

static int completions;

static void on_result(void *data, int status, const int64_t *vals, int n, const char *err)
{
    struct result *r = data;
    r->called++;
    r->status = status;
    r->n = n;
    for (int i = 0; i < n && i < 8; i++)
        r->vals[i] = vals[i];
    snprintf(r->err, sizeof(r->err), "%s", err ? err : "");
    r->order = ++completions;
    r->at_ms = th_now_ms();
}

static void run_for(uv_loop_t *loop, int ms)
{
    th_run_until(loop, NULL, NULL, ms);
}

static int is_up(void *arg) { return sl_store_up(arg); }

struct wait_calls {
    struct result *r;
    int            n;
};

static int all_called(void *arg)
{
    struct wait_calls *w = arg;
    for (int i = 0; i < w->n; i++)
        if (!w->r[i].called)
            return 0;
    return 1;
}

static void conf_init(struct sl_store_conf *c, int port)
{
    memset(c, 0, sizeof(*c));
    c->url = "redis://test";
    c->kind = SL_STORE_REDIS;
    snprintf(c->addr.text, sizeof(c->addr.text), "127.0.0.1:%d", port);
    uv_ip4_addr("127.0.0.1", port, (struct sockaddr_in *)&c->addr.ss);
    c->key_prefix = "sltest:";
    c->connect_timeout_us = 1000 * 1000;
    c->timeout_us = 1000 * 1000;
    c->on_failure = SL_FAIL_LOCAL;
}

/* Closes <st> and every handle; the loop must then close cleanly. */
static void finish(uv_loop_t *loop, struct sl_store *st)
{
    if (st != NULL)
        sl_store_close(st);
    uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(loop), 0);
}

static struct sl_store_req *eval_echo(struct sl_store *st, int id, int v, struct result *r)
{
    char num[24];
    snprintf(num, sizeof(num), "%d", v);
    struct sl_str keys[2] = { { "k1", 2 }, { "k2", 2 } };
    struct sl_str args[1] = { { num, strlen(num) } };
    return sl_store_eval(st, (enum sl_script)id, 2, keys, 1, args, on_result, r);
}

static struct sl_store_req *eval0(struct sl_store *st, int id, struct result *r)
{
    return sl_store_eval(st, (enum sl_script)id, 0, NULL, 0, NULL, on_result, r);
}

/* Sends one command on a fresh blocking connection; returns the raw reply
 * (malloc'd) or NULL. */
static char *redis_cmd(int port, const char *cmd)
{
    struct th_conn c;
    if (th_conn_open(&c, port) < 0)
        return NULL;
    char *reply = NULL;
    if (th_conn_send(&c, cmd) == 0)
        reply = th_conn_reply(&c, TH_MS);
    th_conn_close(&c);
    return reply;
}

static void redis_ok(int port, const char *cmd)
{
    char *r = redis_cmd(port, cmd);
    assert_non_null(r);
    assert_string_equal(r, "+OK\r\n");
    free(r);
}

/* A redis-server on a given port (for a restart on the same port). */
static pid_t redis_spawn(int port)
{
    char p[16];
    snprintf(p, sizeof(p), "%d", port);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        dup2(fd, 2);
        execlp("redis-server", "redis-server", "--port", p, "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--daemonize", "no", "--protected-mode", "no", (char *)NULL);
        _exit(127);
    }
    uint64_t end = th_now_ms() + 5000;
    while (pid > 0 && th_now_ms() < end) {
        char *r = redis_cmd(port, "PING\r\n");
        int ok = r != NULL && strcmp(r, "+PONG\r\n") == 0;
        free(r);
        if (ok)
            return pid;
        usleep(10000);
    }
    return -1;
}

static void redis_kill(pid_t pid)
{
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
}

/* stderr into a file, to count log lines. */
static int saved_stderr = -1;
static char log_path[128];

static void capture_stderr(void)
{
    snprintf(log_path, sizeof(log_path), "/tmp/sluice-test-store-%d.log", (int)getpid());
    th_track_file(log_path);
    int fd = open(log_path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    assert_true(fd >= 0);
    fflush(stderr);
    saved_stderr = dup(2);
    dup2(fd, 2);
    close(fd);
}

static void restore_stderr(void)
{
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    saved_stderr = -1;
}

/* A server that accepts and never says a word. */
static void serve_silent(int lfd, void *arg)
{
    (void)arg;
    for (;;) {
        /* Accepted sockets stay open and are never read. */
        if (accept(lfd, NULL, NULL) < 0 && errno != EINTR)
            _exit(1);
    }
}

static struct th_proc redis_p;

static int group_setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    return th_redis_start(&redis_p, NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    th_stop(&redis_p);
    th_kill_all();
    return 0;
}

/* A store on the shared redis with the echo script added; waits until up. */
static struct sl_store *store_up(uv_loop_t *loop, const struct sl_store_conf *conf,
                                 const char *id, int *echo)
{
    struct sl_store *st = sl_store_new(loop, conf, id);
    assert_non_null(st);
    if (strstr(sl_lua_scripts[SL_SCRIPT_HEARTBEAT], "placeholder") != NULL)
        assert_int_equal(sl_store_script_set(st, SL_SCRIPT_HEARTBEAT, HB_LUA), 0);
    *echo = sl_store_script_add(st, ECHO_LUA);
    assert_true(*echo >= SL_SCRIPT_COUNT);
    assert_true(th_run_until(loop, is_up, st, UP_MS));
    return st;
}

/* ---- tests -------------------------------------------------------------- */

/* SHA-1 as Redis computes it: SCRIPT LOAD answers the name we use. */
static void test_sha(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_store_conf conf;
    conf_init(&conf, redis_p.port);
    struct sl_store *st = sl_store_new(&loop, &conf, "sha");
    assert_non_null(st);
    int id = sl_store_script_add(st, "return 1");
    assert_string_equal(sl_store_script_sha(st, id), "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
    /* 55, 56 and 64 bytes: the padding edge cases. */
    char body[80];
    for (int len = 55; len <= 65; len++) {
        memset(body, 'x', sizeof(body));
        memcpy(body, "return 1 --", 11);
        body[len] = '\0';
        int i = sl_store_script_add(st, body);
        if (i < 0)
            break;
        char cmd[160];
        snprintf(cmd, sizeof(cmd), "*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n$%d\r\n%s\r\n", len, body);
        char *r = redis_cmd(redis_p.port, cmd);
        assert_non_null(r);
        char want[64];
        snprintf(want, sizeof(want), "$40\r\n%s\r\n", sl_store_script_sha(st, i));
        assert_string_equal(r, want);
        free(r);
    }
    /* The handshake checks every sha against the store's answer. */
    assert_true(th_run_until(&loop, is_up, st, UP_MS));
    finish(&loop, st);
}

/* 200 decisions made in one loop turn reach Redis in one write and complete
 * in order with their own values. */
static void test_pipelining(void **state)
{
    (void)state;
    enum { N = 200 };
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_store_conf conf;
    conf_init(&conf, redis_p.port);
    int echo;
    struct sl_store *st = store_up(&loop, &conf, "pipe", &echo);
    run_for(&loop, 50); /* the first heartbeat is answered */

    static struct result res[N];
    memset(res, 0, sizeof(res));
    completions = 0;
    /* What asking costs: the INFO read, and the EOF read of the last asker. */
    long base0 = th_redis_info(redis_p.port, "total_reads_processed");
    long base1 = th_redis_info(redis_p.port, "total_reads_processed");
    long cmds0 = th_redis_info(redis_p.port, "total_commands_processed");
    long reads0 = th_redis_info(redis_p.port, "total_reads_processed");
    for (int i = 0; i < N; i++)
        assert_non_null(eval_echo(st, echo, i * 7, &res[i]));
    assert_int_equal(sl_store_in_flight(st), N);
    struct wait_calls w = { res, N };
    assert_true(th_run_until(&loop, all_called, &w, TH_MS));
    long reads1 = th_redis_info(redis_p.port, "total_reads_processed");
    long cmds1 = th_redis_info(redis_p.port, "total_commands_processed");
    long store_reads = reads1 - reads0 - (base1 - base0);

    for (int i = 0; i < N; i++) {
        assert_int_equal(res[i].called, 1);
        assert_int_equal(res[i].status, 0);
        assert_int_equal(res[i].order, i + 1);
        assert_int_equal(res[i].n, 3);
        assert_int_equal(res[i].vals[0], i * 7);
        assert_int_equal(res[i].vals[1], i * 14);
        assert_int_equal(res[i].vals[2], 2);
    }
    /* The 200 EVALSHAs (~20 KB, one write) take Redis one or two reads (it
     * reads 16 KB at a time), a heartbeat maybe one more. Unpipelined they
     * would take 200. */
    fprintf(stderr, "pipelining: %ld reads, %ld commands for %d requests\n", store_reads,
            cmds1 - cmds0 - 2, N);
    assert_true(store_reads >= 1 && store_reads <= 3);
    assert_true(cmds1 - cmds0 >= N);
    const struct sl_store_stats *s = sl_store_stats(st);
    assert_int_equal(s->requests, N);
    assert_int_equal(s->errors, 0);
    assert_int_equal(s->latency_count, N);
    uint64_t sum = 0;
    for (int b = 0; b < 12; b++)
        sum += s->latency_le[b];
    assert_int_equal(sum, N);
    assert_int_equal(sl_store_in_flight(st), 0);
    finish(&loop, st);
}

/* Replies that are not a flat integer array fail the request, not the
 * connection; an error reply carries its text. */
static void test_reply_shapes(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_store_conf conf;
    conf_init(&conf, redis_p.port);
    int echo;
    struct sl_store *st = store_up(&loop, &conf, "shapes", &echo);
    int big = sl_store_script_add(st, BIG_LUA);
    int nested = sl_store_script_add(st, NESTED_LUA);
    int integer = sl_store_script_add(st, INT_LUA);
    int err = sl_store_script_add(st, ERR_LUA);
    assert_true(big > 0 && nested > 0 && integer > 0 && err > 0);

    struct result res[5];
    memset(res, 0, sizeof(res));
    assert_non_null(eval0(st, big, &res[0]));
    assert_non_null(eval0(st, nested, &res[1]));
    assert_non_null(eval0(st, integer, &res[2]));
    assert_non_null(eval0(st, err, &res[3]));
    assert_non_null(eval_echo(st, echo, 5, &res[4]));
    struct wait_calls w = { res, 5 };
    assert_true(th_run_until(&loop, all_called, &w, TH_MS));
    assert_int_equal(res[0].status, SL_ESTORE);
    assert_non_null(strstr(res[0].err, "too many"));
    assert_int_equal(res[1].status, SL_ESTORE);
    assert_non_null(strstr(res[1].err, "flat"));
    assert_int_equal(res[2].status, 0);
    assert_int_equal(res[2].n, 1);
    assert_int_equal(res[2].vals[0], 42);
    assert_int_equal(res[3].status, SL_ESTORE);
    assert_non_null(strstr(res[3].err, "custom failure"));
    assert_int_equal(res[4].status, 0);
    assert_int_equal(res[4].vals[0], 5);
    /* Added after connect: each went through NOSCRIPT -> load -> retry. */
    assert_int_equal(sl_store_stats(st)->noscript_reloads, 4);
    assert_int_equal(sl_store_stats(st)->errors, 3);
    assert_true(sl_store_up(st));

    /* A 3 MB bulk: the reader would hold it all; the connection is dropped
     * at 1 MiB instead, and made again. */
    int huge = sl_store_script_add(st, HUGE_LUA);
    struct result h, after;
    memset(&h, 0, sizeof(h));
    memset(&after, 0, sizeof(after));
    assert_non_null(eval0(st, huge, &h));
    assert_non_null(eval_echo(st, echo, 6, &after));
    assert_true(th_run_until(&loop, all_called, &(struct wait_calls){ &h, 1 }, TH_MS));
    assert_int_equal(h.status, SL_ESTORE);
    assert_string_equal(h.err, "reply too large");
    /* The echo was answered first: the huge one went NOSCRIPT -> retry. */
    assert_int_equal(after.called, 1);
    assert_int_equal(after.status, 0);
    assert_true(th_run_until(&loop, is_up, st, UP_MS));
    assert_int_equal(sl_store_stats(st)->reconnects, 1);
    finish(&loop, st);
}

/* Redis stalls (CLIENT PAUSE): requests fail at their deadline, the store
 * is down (new requests refused, logged once), and up again after. */
static void test_timeout(void **state)
{
    (void)state;
    enum { N = 10, TIMEOUT_MS = 200 };
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_store_conf conf;
    conf_init(&conf, redis_p.port);
    conf.timeout_us = TIMEOUT_MS * 1000;
    capture_stderr();
    int echo;
    struct sl_store *st = store_up(&loop, &conf, "pause", &echo);
    run_for(&loop, 50);

    redis_ok(redis_p.port, "CLIENT PAUSE 1500 ALL\r\n");
    struct result res[N];
    memset(res, 0, sizeof(res));
    uint64_t t0 = th_now_ms();
    for (int i = 0; i < N; i++)
        assert_non_null(eval_echo(st, echo, i, &res[i]));
    struct wait_calls w = { res, N };
    assert_true(th_run_until(&loop, all_called, &w, TH_MS));
    for (int i = 0; i < N; i++) {
        assert_int_equal(res[i].status, SL_ESTORE);
        assert_string_equal(res[i].err, "timeout");
        assert_true(res[i].at_ms - t0 >= TIMEOUT_MS - 20);
        assert_true(res[i].at_ms - t0 < TIMEOUT_MS + 400);
    }
    assert_false(sl_store_up(st));
    struct result late;
    memset(&late, 0, sizeof(late));
    assert_null(eval_echo(st, echo, 1, &late));
    assert_int_equal(sl_store_stats(st)->timeouts, N);
    assert_int_equal(sl_store_stats(st)->errors, N);

    /* Back after the pause: the late replies are consumed, a probe answers. */
    assert_true(th_run_until(&loop, is_up, st, UP_MS));
    assert_int_equal(sl_store_stats(st)->reconnects, 0);
    assert_non_null(eval_echo(st, echo, 9, &late));
    assert_true(th_run_until(&loop, all_called, &(struct wait_calls){ &late, 1 }, TH_MS));
    assert_int_equal(late.status, 0);
    assert_int_equal(late.vals[0], 9);
    for (int i = 0; i < N; i++)
        assert_int_equal(res[i].called, 1);
    finish(&loop, st);
    restore_stderr();
    assert_int_equal(th_log_count(log_path, "quota store down"), 1);
    assert_int_equal(th_log_count(log_path, "quota store up"), 2);
    unlink(log_path);
}

/* A call's timeout runs from when it is made, not from when the loop last
 * read the clock. A process that is not run for a while between the loop's
 * clock update and a call (a loaded machine, or a long loop turn) made
 * calls whose deadline had passed when they were made: the loop's next turn
 * runs its timers before it writes (the flush is a prepare callback) and
 * declared a timeout for a call never sent, while the store answers in
 * well under a millisecond. test_cluster's ask_and_moved met it after
 * blocking calls (SL_ESTORE on the decide after the slot moved). Staged:
 * the loop's clock 300 ms stale against a 100 ms timeout. */
static void test_deadline_from_the_call(void **state)
{
    (void)state;
    enum { N = 5, TIMEOUT_MS = 100 };
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_store_conf conf;
    conf_init(&conf, redis_p.port);
    conf.timeout_us = TIMEOUT_MS * 1000;
    int echo;
    struct sl_store *st = store_up(&loop, &conf, "stale", &echo);
    run_for(&loop, 50);
    uint64_t timeouts0 = sl_store_stats(st)->timeouts;
    usleep(3 * TIMEOUT_MS * 1000); /* not run: the loop's clock stays where it was */
    struct result res[N];
    memset(res, 0, sizeof(res));
    for (int i = 0; i < N; i++)
        assert_non_null(eval_echo(st, echo, i, &res[i]));
    struct wait_calls w = { res, N };
    assert_true(th_run_until(&loop, all_called, &w, TH_MS));
    for (int i = 0; i < N; i++) {
        if (res[i].status != 0)
            fail_msg("call %d: status %d (%s), %llu timeouts", i, res[i].status, res[i].err,
                     (unsigned long long)(sl_store_stats(st)->timeouts - timeouts0));
        assert_int_equal(res[i].vals[0], i);
    }
    assert_int_equal(sl_store_stats(st)->timeouts, timeouts0);
    assert_true(sl_store_up(st));
    finish(&loop, st);
}

/* A store that stops answering altogether (paused for longer than the
 * stall limit, 5 s, plus one probe interval, up to 2.5 s): the suspect
 * connection is dropped, the new one cannot finish its handshake while the
 * pause lasts, and after it the client is back. */
static void test_stall(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_store_conf conf;
    conf_init(&conf, redis_p.port);
    conf.timeout_us = 100 * 1000;
    conf.connect_timeout_us = 200 * 1000;
    int echo;
    struct sl_store *st = store_up(&loop, &conf, "stall", &echo);
    run_for(&loop, 50);
    redis_ok(redis_p.port, "CLIENT PAUSE 9000 ALL\r\n");
    struct result r;
    memset(&r, 0, sizeof(r));
    assert_non_null(eval_echo(st, echo, 1, &r));
    assert_true(th_run_until(&loop, all_called, &(struct wait_calls){ &r, 1 }, TH_MS));
    assert_int_equal(r.status, SL_ESTORE);
    assert_false(sl_store_up(st));
    assert_true(sl_store_in_flight(st) >= 1); /* owed, not answered */
    assert_true(th_run_until(&loop, is_up, st, 14000));
    assert_int_equal(sl_store_stats(st)->reconnects, 1);
    assert_int_equal(sl_store_stats(st)->timeouts, 1);
    memset(&r, 0, sizeof(r));
    assert_non_null(eval_echo(st, echo, 2, &r));
    assert_true(th_run_until(&loop, all_called, &(struct wait_calls){ &r, 1 }, TH_MS));
    assert_int_equal(r.status, 0);
    finish(&loop, st);
}

/* The store is killed with requests in flight: they fail at once (not at
 * their deadline); after a restart on the same port the client reconnects,
 * loads the scripts again and serves. */
static void test_kill_restart(void **state)
{
    (void)state;
    enum { N = 5 };
    int port = th_free_port();
    pid_t pid = redis_spawn(port);
    assert_true(pid > 0);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_store_conf conf;
    conf_init(&conf, port);
    conf.timeout_us = 3000 * 1000;
    int echo;
    struct sl_store *st = store_up(&loop, &conf, "kill", &echo);

    redis_ok(port, "CLIENT PAUSE 5000 ALL\r\n");
    struct result res[N];
    memset(res, 0, sizeof(res));
    for (int i = 0; i < N; i++)
        assert_non_null(eval_echo(st, echo, i, &res[i]));
    run_for(&loop, 100); /* written, unanswered */
    assert_int_equal(res[0].called, 0);
    uint64_t t0 = th_now_ms();
    redis_kill(pid);
    struct wait_calls w = { res, N };
    assert_true(th_run_until(&loop, all_called, &w, TH_MS));
    for (int i = 0; i < N; i++) {
        assert_int_equal(res[i].status, SL_ESTORE);
        assert_true(res[i].at_ms - t0 < 1000);
    }
    assert_false(sl_store_up(st));
    assert_int_equal(sl_store_stats(st)->timeouts, 0);
    run_for(&loop, 300); /* a few refused reconnects */
    assert_false(sl_store_up(st));

    pid = redis_spawn(port);
    assert_true(pid > 0);
    assert_true(th_run_until(&loop, is_up, st, UP_MS));
    assert_int_equal(sl_store_stats(st)->reconnects, 1);
    struct result again;
    memset(&again, 0, sizeof(again));
    assert_non_null(eval_echo(st, echo, 11, &again));
    assert_true(th_run_until(&loop, all_called, &(struct wait_calls){ &again, 1 }, TH_MS));
    assert_int_equal(again.status, 0);
    assert_int_equal(again.vals[1], 22);
    /* Loaded by the handshake: no NOSCRIPT on the new server. */
    assert_int_equal(sl_store_stats(st)->noscript_reloads, 0);
    finish(&loop, st);
    redis_kill(pid);
}

static uint64_t reloads(struct sl_store *st)
{
    return sl_store_stats(st)->noscript_reloads;
}

/* SCRIPT FLUSH behind the client's back: the next EVALSHA meets NOSCRIPT,
 * the script is loaded again and the request retried, invisibly. */
static void test_noscript(void **state)
{
    (void)state;
    enum { N = 5 };
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_store_conf conf;
    conf_init(&conf, redis_p.port);
    int echo;
    struct sl_store *st = store_up(&loop, &conf, "noscript", &echo);
    run_for(&loop, 50);
    assert_int_equal(reloads(st), 0);

    redis_ok(redis_p.port, "SCRIPT FLUSH\r\n");
    struct result one;
    memset(&one, 0, sizeof(one));
    assert_non_null(eval_echo(st, echo, 3, &one));
    assert_true(th_run_until(&loop, all_called, &(struct wait_calls){ &one, 1 }, TH_MS));
    assert_int_equal(one.status, 0);
    assert_int_equal(one.vals[0], 3);
    assert_int_equal(one.vals[1], 6);
    /* The heartbeat meets NOSCRIPT at its next beat too: one load each. */
    run_for(&loop, 1300);
    assert_int_equal(reloads(st), 2);
    assert_true(sl_store_up(st));

    /* A batch after a flush: one load for the batch, every request retried. */
    redis_ok(redis_p.port, "SCRIPT FLUSH\r\n");
    struct result res[N];
    memset(res, 0, sizeof(res));
    completions = 0;
    for (int i = 0; i < N; i++)
        assert_non_null(eval_echo(st, echo, 100 + i, &res[i]));
    struct wait_calls w = { res, N };
    assert_true(th_run_until(&loop, all_called, &w, TH_MS));
    for (int i = 0; i < N; i++) {
        assert_int_equal(res[i].status, 0);
        assert_int_equal(res[i].vals[0], 100 + i);
        assert_int_equal(res[i].order, i + 1);
    }
    run_for(&loop, 1300);
    assert_int_equal(reloads(st), 4);
    assert_int_equal(sl_store_stats(st)->errors, 0);
    finish(&loop, st);
}

/* AUTH (requirepass, and an ACL user) and SELECT db. */
static void test_auth_db(void **state)
{
    (void)state;
    struct th_proc rp;
    /* The harness waits for PING: passwords are set once it answers. */
    assert_int_equal(th_redis_start(&rp, NULL), 0);
    redis_ok(rp.port, "ACL SETUSER alice on >pw2 ~* &* +@all\r\n");
    redis_ok(rp.port, "CONFIG SET requirepass s3cret\r\n");
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_store_conf conf;
    conf_init(&conf, rp.port);
    conf.password = "s3cret";
    conf.db = 3;
    int echo;
    struct sl_store *st = store_up(&loop, &conf, "auth", &echo);
    int set = sl_store_script_add(st, SET_LUA);
    struct result r;
    memset(&r, 0, sizeof(r));
    struct sl_str key = { "sltest:db", 9 }, val = { "in-three", 8 };
    assert_non_null(sl_store_eval(st, (enum sl_script)set, 1, &key, 1, &val, on_result, &r));
    assert_true(th_run_until(&loop, all_called, &(struct wait_calls){ &r, 1 }, TH_MS));
    assert_int_equal(r.status, 0);
    struct th_conn c;
    assert_int_equal(th_conn_open(&c, rp.port), 0);
    th_conn_send(&c, "AUTH s3cret\r\nSELECT 3\r\nGET sltest:db\r\n");
    free(th_conn_reply(&c, TH_MS));
    free(th_conn_reply(&c, TH_MS));
    char *g = th_conn_reply(&c, TH_MS);
    assert_non_null(g);
    assert_string_equal(g, "$8\r\nin-three\r\n");
    free(g);
    th_conn_close(&c);
    finish(&loop, st);

    /* An ACL user. */
    uv_loop_init(&loop);
    conf.user = "alice";
    conf.password = "pw2";
    conf.db = 0;
    st = store_up(&loop, &conf, "alice", &echo);
    finish(&loop, st);

    /* A wrong password: never up, refused, retried, closed cleanly. */
    uv_loop_init(&loop);
    conf.user = NULL;
    conf.password = "wrong";
    st = sl_store_new(&loop, &conf, "wrong");
    assert_non_null(st);
    assert_false(th_run_until(&loop, is_up, st, 600));
    struct result no;
    assert_null(eval0(st, SL_SCRIPT_DECIDE, &no));
    finish(&loop, st);
    th_stop(&rp);
}

static int live_is(struct sl_store *st, uint64_t n)
{
    return sl_store_live_instances(st) == n;
}
static int live2(void *arg) { return live_is(arg, 2); }
static int live1(void *arg) { return live_is(arg, 1); }

/* Two clients see each other in the heartbeat set; after one closes (and
 * leaves), the other sees itself alone. */
static void test_heartbeat(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_store_conf conf;
    conf_init(&conf, redis_p.port);
    conf.key_prefix = "slhb:";
    int echo;
    struct sl_store *a = store_up(&loop, &conf, "inst-a", &echo);
    struct sl_store *b = store_up(&loop, &conf, "inst-b", &echo);
    assert_true(th_run_until(&loop, live2, a, 3000));
    assert_true(th_run_until(&loop, live2, b, 3000));
    char *z = redis_cmd(redis_p.port, "ZCARD slhb:instances\r\n");
    assert_non_null(z);
    assert_string_equal(z, ":2\r\n");
    free(z);

    sl_store_close(b);
    assert_true(th_run_until(&loop, live1, a, 3000));
    z = redis_cmd(redis_p.port, "ZCARD slhb:instances\r\n");
    assert_string_equal(z, ":1\r\n");
    free(z);
    finish(&loop, a);
    /* a's leave was written just before its close: give Redis a moment. */
    int zero = 0;
    for (int i = 0; i < 100 && !zero; i++) {
        z = redis_cmd(redis_p.port, "ZCARD slhb:instances\r\n");
        zero = z != NULL && strcmp(z, ":0\r\n") == 0;
        free(z);
        if (!zero)
            usleep(10000);
    }
    assert_true(zero);
}

/* A server that accepts and never answers: never up (handshake timeout);
 * reconfigured to a good server, the client comes up. Also: nothing
 * listening at all, and the store kept its last live count. */
static void test_silent_then_reconfigure(void **state)
{
    (void)state;
    int sport;
    pid_t silent = th_fork_server(&sport, serve_silent, NULL);
    assert_true(silent > 0);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_store_conf conf;
    conf_init(&conf, sport);
    conf.connect_timeout_us = 100 * 1000;
    struct sl_store *st = sl_store_new(&loop, &conf, "silent");
    assert_non_null(st);
    assert_false(th_run_until(&loop, is_up, st, 700));
    struct result no;
    assert_null(eval0(st, SL_SCRIPT_DECIDE, &no));
    assert_int_equal(sl_store_live_instances(st), 1);

    /* Nothing listening: refused, retried. */
    struct sl_store_conf none;
    conf_init(&none, th_free_port());
    sl_store_reconfigure(st, &none);
    assert_false(th_run_until(&loop, is_up, st, 300));

    struct sl_store_conf good;
    conf_init(&good, redis_p.port);
    if (strstr(sl_lua_scripts[SL_SCRIPT_HEARTBEAT], "placeholder") != NULL)
        sl_store_script_set(st, SL_SCRIPT_HEARTBEAT, HB_LUA);
    int echo = sl_store_script_add(st, ECHO_LUA);
    sl_store_reconfigure(st, &good);
    assert_true(th_run_until(&loop, is_up, st, UP_MS));
    struct result r;
    memset(&r, 0, sizeof(r));
    assert_non_null(eval_echo(st, echo, 4, &r));
    assert_true(th_run_until(&loop, all_called, &(struct wait_calls){ &r, 1 }, TH_MS));
    assert_int_equal(r.status, 0);
    assert_int_equal(r.vals[1], 8);
    th_kill_server(silent);
    finish(&loop, st);
}

/* Closing while connecting, and closing with requests in flight (they
 * complete with SL_ESTORE inside the close, exactly once). */
static void test_close_paths(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_store_conf conf;
    conf_init(&conf, redis_p.port);
    struct sl_store *st = sl_store_new(&loop, &conf, "quick");
    assert_non_null(st);
    finish(&loop, st); /* never ran: the connect is cancelled */

    uv_loop_init(&loop);
    st = sl_store_new(&loop, &conf, "quick2");
    run_for(&loop, 1); /* connecting or in the handshake */
    finish(&loop, st);

    uv_loop_init(&loop);
    int echo;
    st = store_up(&loop, &conf, "inflight", &echo);
    struct result res[3];
    memset(res, 0, sizeof(res));
    for (int i = 0; i < 3; i++)
        assert_non_null(eval_echo(st, echo, i, &res[i]));
    struct result cancelled;
    memset(&cancelled, 0, sizeof(cancelled));
    sl_store_cancel(eval_echo(st, echo, 99, &cancelled));
    sl_store_close(st);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(res[i].called, 1);
        assert_int_equal(res[i].status, SL_ESTORE);
    }
    assert_int_equal(cancelled.called, 0);
    finish(&loop, NULL);
    for (int i = 0; i < 3; i++)
        assert_int_equal(res[i].called, 1);
}

/* A cancelled request's callback never runs; its neighbours' do. */
static void test_cancel(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_store_conf conf;
    conf_init(&conf, redis_p.port);
    int echo;
    struct sl_store *st = store_up(&loop, &conf, "cancel", &echo);
    struct result res[3];
    memset(res, 0, sizeof(res));
    assert_non_null(eval_echo(st, echo, 1, &res[0]));
    struct sl_store_req *mid = eval_echo(st, echo, 2, &res[1]);
    assert_non_null(eval_echo(st, echo, 3, &res[2]));
    sl_store_cancel(mid);
    struct wait_calls w = { &res[2], 1 };
    assert_true(th_run_until(&loop, all_called, &w, TH_MS));
    assert_int_equal(res[0].called, 1);
    assert_int_equal(res[0].vals[0], 1);
    assert_int_equal(res[1].called, 0);
    assert_int_equal(res[2].vals[0], 3);
    assert_int_equal(sl_store_in_flight(st), 0);

    /* A reload that changes only the timeout keeps the connection. */
    conf.timeout_us = 300 * 1000;
    sl_store_reconfigure(st, &conf);
    assert_true(sl_store_up(st));
    memset(res, 0, sizeof(res));
    assert_non_null(eval_echo(st, echo, 8, &res[0]));
    assert_true(th_run_until(&loop, all_called, &(struct wait_calls){ res, 1 }, TH_MS));
    assert_int_equal(res[0].vals[0], 8);
    assert_int_equal(sl_store_stats(st)->reconnects, 0);
    finish(&loop, st);
}


struct text_result {
    int    called;
    int    status;
    int    is_null;
    char   text[300];
    size_t len;
};

static void on_text(void *data, int status, const char *text, size_t len)
{
    struct text_result *r = data;
    r->called++;
    r->status = status;
    r->is_null = text == NULL;
    r->len = len;
    if (text != NULL)
        snprintf(r->text, sizeof(r->text), "%.*s", (int)(len < 299 ? len : 299), text);
}

static int text_called(void *arg)
{
    return ((struct text_result *)arg)->called > 0;
}

/* sl_store_hget() on one Redis: a value, nil for a missing field, and an
 * error for a value longer than SL_STORE_TEXT_CAP (never truncated). */
static void test_hget(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_store_conf conf;
    conf_init(&conf, redis_p.port);
    int echo;
    struct sl_store *st = store_up(&loop, &conf, "hget", &echo);
    char cmd[1024], big[SL_STORE_TEXT_CAP + 2];
    memset(big, 'y', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    snprintf(cmd, sizeof(cmd), "HSET sltest:overrides:{l} alice 5000/s ok %.*s big %s\r\n",
             SL_STORE_TEXT_CAP, big, big);
    char *rep = redis_cmd(redis_p.port, cmd);
    assert_non_null(rep);
    free(rep);
    struct sl_str key = { "sltest:overrides:{l}", 20 };
    struct text_result r[4];
    memset(r, 0, sizeof(r));
    const char *fields[4] = { "alice", "bob", "ok", "big" };
    for (int i = 0; i < 4; i++)
        assert_non_null(sl_store_hget(st, key, (struct sl_str){ fields[i], strlen(fields[i]) },
                                      on_text, &r[i]));
    assert_true(th_run_until(&loop, text_called, &r[3], TH_MS));
    assert_int_equal(r[0].status, 0);
    assert_string_equal(r[0].text, "5000/s");
    assert_int_equal(r[0].len, 6);
    assert_int_equal(r[1].status, 0);
    assert_true(r[1].is_null);
    assert_int_equal(r[2].status, 0);
    assert_int_equal(r[2].len, SL_STORE_TEXT_CAP);
    assert_int_equal(r[3].status, SL_ESTORE);
    finish(&loop, st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha),
        cmocka_unit_test(test_pipelining),
        cmocka_unit_test(test_reply_shapes),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_deadline_from_the_call),
        cmocka_unit_test(test_stall),
        cmocka_unit_test(test_kill_restart),
        cmocka_unit_test(test_noscript),
        cmocka_unit_test(test_auth_db),
        cmocka_unit_test(test_heartbeat),
        cmocka_unit_test(test_silent_then_reconfigure),
        cmocka_unit_test(test_close_paths),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_hget),
    };
    /* STORE_ONLY=<cmocka pattern> runs only matching tests */
    if (getenv("STORE_ONLY") != NULL)
        cmocka_set_test_filter(getenv("STORE_ONLY"));
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

/* sluice integration tests — the Redis Sentinel client (src/store/sentinel.c).
 *
 * One real deployment for the whole file: a master, its replica
 * (--replicaof) and three sentinels (`redis-server FILE --sentinel`,
 * quorum 2, down-after DOWN_AFTER_MS), plus a plain redis-server that
 * plays a sentinel which knows nothing (it answers SENTINEL with an error
 * and accepts SUBSCRIBE, but never publishes). The tests run in order:
 *
 *   finds_master          the module finds the master, prefers the first sentinel
 *   failover              the master is killed: a module subscribed to a real
 *                         sentinel reports the promoted replica from
 *                         +switch-master within a measured bound; a module
 *                         subscribed to the plain redis hears nothing, and
 *                         finds the new master with sl_sentinel_reask()
 *   sentinels_down        one sentinel killed, one stopped (SIGSTOP: connects,
 *                         never answers): found through the third
 *   unknown_master        every sentinel answers nil: no callback, retried
 *   unresolved_name       a sentinel's name that does not resolve yet: tried again
 *                         until it does; the others answer meanwhile
 *   auth                  a sentinel with requirepass: right and wrong password
 *   sluice_sentinel_auth  build/sluice with sentinel_user / sentinel_password_file:
 *                         right (both forms) and wrong password
 *   hostile               forked fakes: an endless bulk (capped before it is
 *                         buffered), nesting hiredis refuses, a host name for
 *                         an address: each is passed over, the real one answers
 *   lagging_sentinel      a fake that announces a switch but, asked, still names
 *                         the old master: that answer is not believed
 *   sluice_failover       on a fresh deployment, build/sluice with url =
 *                         redis-sentinel://... under load: the master is
 *                         stopped (SIGSTOP); no request waits longer than the store's
 *                         timeout (on_failure = local decides meanwhile) and
 *                         decisions return to the store on the promoted replica
 *
 * Each test runs its own libuv loop in this process, closes the module and
 * checks uv_loop_close() == 0 (every handle closed). */
#include <arpa/inet.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <uv.h>

#include "integration/harness.h"
#include "core/resolve.h"
#include "store/sentinel.h"

#define NAME          "slmaster"
#define DOWN_AFTER_MS 1000
/* Failover = down-after + ODOWN agreement (sentinels ask each other every
 * second) + the election (a random start of up to 1 s) + the promotion
 * (INFO every second while it runs). Measured here at about 3-5 s; the bound
 * leaves room for a busy 2-core machine and the sanitizer build. */
#define FAILOVER_MAX_MS (DOWN_AFTER_MS + 9000)

static struct th_proc master, replica, sent[3], plain;

/* ---- helpers ----------------------------------------------------------------- */

struct seen {
    int                     calls;
    struct sockaddr_storage last;
    uint64_t                at_ms;  /* th_now_ms() of the last call */
};

static void on_master(void *data, const struct sockaddr_storage *ss)
{
    struct seen *w = data;
    w->calls++;
    w->last = *ss;
    w->at_ms = th_now_ms();
}

static int port_of(const struct sockaddr_storage *ss)
{
    return ntohs(((const struct sockaddr_in *)ss)->sin_port);
}

static int called(void *arg) { return ((struct seen *)arg)->calls > 0; }

struct want_calls {
    struct seen *w;
    int          n;
};
static int called_n(void *arg)
{
    struct want_calls *c = arg;
    return c->w->calls >= c->n;
}

static int subscribed(void *arg) { return sl_sentinel_subscribed(arg) >= 0; }

static int answered2(void *arg) { return sl_sentinel_stats(arg)->answers >= 2; }

static int rounds_failed2(void *arg) { return sl_sentinel_stats(arg)->rounds_failed >= 2; }

static void set_addr(struct sl_addr *a, int port)
{
    memset(a, 0, sizeof(*a));
    snprintf(a->text, sizeof(a->text), "127.0.0.1:%d", port);
    uv_ip4_addr("127.0.0.1", port, (struct sockaddr_in *)&a->ss);
    a->port = (uint16_t)port;
}

static void conf_init(struct sl_sentinel_conf *c, struct sl_addr *addrs, const int *ports, int n)
{
    memset(c, 0, sizeof(*c));
    for (int i = 0; i < n; i++)
        set_addr(&addrs[i], ports[i]);
    c->sentinels = addrs;
    c->n_sentinels = n;
    c->master_name = NAME;
    c->connect_timeout_us = 300 * 1000;
    c->timeout_us = 300 * 1000;
    c->ping_us = 500 * 1000;
}

static void finish(uv_loop_t *loop, struct sl_sentinel *a, struct sl_sentinel *b)
{
    sl_sentinel_close(a);
    sl_sentinel_close(b);
    uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(loop), 0);
}

/* One command on a fresh blocking connection: the raw reply (malloc'd) or NULL. */
static char *redis_cmd(int port, const char *cmd)
{
    struct th_conn c;
    if (th_conn_open(&c, port) < 0)
        return NULL;
    char *reply = NULL;
    if (th_conn_send(&c, cmd) == 0)
        reply = th_conn_reply(&c, 2000);
    th_conn_close(&c);
    return reply;
}

/* The port a sentinel gives for our master now, or -1. */
static int sentinel_says(int port)
{
    char *r = redis_cmd(port, "SENTINEL get-master-addr-by-name " NAME "\r\n");
    int p = -1;
    if (r != NULL) {
        /* *2\r\n$9\r\n127.0.0.1\r\n$5\r\n12345\r\n */
        const char *s = strstr(r, "127.0.0.1\r\n$");
        if (s != NULL && (s = strstr(s + 12, "\r\n")) != NULL)
            p = atoi(s + 2);
        free(r);
    }
    return p;
}

/* Every sentinel knows the replica and the two other sentinels (hello
 * messages come every 2 s): only then can they agree on a failover. */
static int deployment_ready(int ms)
{
    uint64_t end = th_now_ms() + (uint64_t)ms;
    while (th_now_ms() < end) {
        int ok = 1;
        for (int i = 0; i < 3 && ok; i++) {
            char *q = redis_cmd(sent[i].port, "SENTINEL CKQUORUM " NAME "\r\n");
            char *r = redis_cmd(sent[i].port, "SENTINEL replicas " NAME "\r\n");
            ok = q != NULL && strstr(q, "3 usable") != NULL && r != NULL && strncmp(r, "*1\r\n", 4) == 0;
            free(q);
            free(r);
        }
        if (ok)
            return 0;
        usleep(100 * 1000);
    }
    return -1;
}

/* ---- the deployment ------------------------------------------------------------ */

static int group_setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    char mport[16];
    if (th_redis_start(&master, NULL) < 0)
        return -1;
    snprintf(mport, sizeof(mport), "%d", master.port);
    /* Diskless load: the replica's first sync writes no dump.rdb into the
     * working directory. */
    if (th_redis_start(&replica, "--replicaof", "127.0.0.1", mport, "--repl-diskless-load",
                       "on-empty-db", NULL) < 0 ||
        th_redis_wait_info(master.port, "connected_slaves", 1, TH_MS) < 0)
        return -1;
    char extra[256];
    snprintf(extra, sizeof(extra),
             "sentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s 5000\n", NAME,
             DOWN_AFTER_MS, NAME);
    for (int i = 0; i < 3; i++)
        if (th_sentinel_start(&sent[i], NAME, master.port, extra) < 0)
            return -1;
    if (th_redis_start(&plain, NULL) < 0)
        return -1;
    uint64_t t0 = th_now_ms();
    if (deployment_ready(20000) < 0) {
        fprintf(stderr, "sentinels did not see each other and the replica in time\n");
        return -1;
    }
    fprintf(stderr, "# deployment ready in %llu ms (master %d, replica %d, sentinels %d %d %d)\n",
            (unsigned long long)(th_now_ms() - t0), master.port, replica.port, sent[0].port,
            sent[1].port, sent[2].port);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++)
        if (sent[i].pid > 0)
            kill(sent[i].pid, SIGCONT);
    th_kill_all();
    return 0;
}

/* ---- tests ------------------------------------------------------------------------ */

static void test_finds_master(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_addr addrs[3];
    int ports[3] = { sent[0].port, sent[1].port, sent[2].port };
    struct sl_sentinel_conf c;
    conf_init(&c, addrs, ports, 3);
    struct seen w = { 0 };
    struct sockaddr_storage ss;

    struct sl_sentinel *s = sl_sentinel_new(&loop, &c, on_master, &w);
    assert_non_null(s);
    assert_int_equal(sl_sentinel_master(s, &ss), -1);
    assert_true(th_run_until(&loop, called, &w, TH_MS));
    assert_int_equal(w.calls, 1);
    assert_int_equal(port_of(&w.last), master.port);
    assert_int_equal(sl_sentinel_master(s, &ss), 0);
    assert_int_equal(port_of(&ss), master.port);
    assert_int_equal(sl_sentinel_preferred(s), 0);
    assert_true(th_run_until(&loop, subscribed, s, TH_MS));
    assert_int_equal(sl_sentinel_subscribed(s), 0);

    /* Asking again with nothing changed reports nothing. */
    assert_int_equal(sl_sentinel_stats(s)->answers, 1);
    sl_sentinel_reask(s);
    assert_true(th_run_until(&loop, answered2, s, TH_MS));
    assert_int_equal(w.calls, 1);
    /* The PING keeps the subscription: it survives a few periods. */
    th_run_until(&loop, NULL, NULL, 1200);
    assert_int_equal(sl_sentinel_subscribed(s), 0);
    assert_int_equal(sl_sentinel_stats(s)->subscribes, 1);
    finish(&loop, s, NULL);
}

static void test_failover(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    /* <a> follows through sentinel 0; <b> lists the plain redis first, so
     * its subscription sits where no +switch-master ever comes, and its
     * questions go there first and meet an error. */
    struct sl_addr addrs_a[3], addrs_b[4];
    int ports_a[3] = { sent[0].port, sent[1].port, sent[2].port };
    int ports_b[4] = { plain.port, sent[0].port, sent[1].port, sent[2].port };
    struct sl_sentinel_conf ca, cb;
    conf_init(&ca, addrs_a, ports_a, 3);
    conf_init(&cb, addrs_b, ports_b, 4);
    /* Nothing here waits on a timeout: a long one keeps a PING answered
     * late on a busy machine from moving a subscription (and asking). */
    ca.timeout_us = cb.timeout_us = 2000 * 1000;
    struct seen wa = { 0 }, wb = { 0 };
    struct sl_sentinel *a = sl_sentinel_new(&loop, &ca, on_master, &wa);
    struct sl_sentinel *b = sl_sentinel_new(&loop, &cb, on_master, &wb);
    assert_non_null(a);
    assert_non_null(b);
    assert_true(th_run_until(&loop, called, &wa, TH_MS));
    assert_true(th_run_until(&loop, called, &wb, TH_MS));
    assert_true(th_run_until(&loop, subscribed, a, TH_MS));
    assert_true(th_run_until(&loop, subscribed, b, TH_MS));
    assert_int_equal(port_of(&wb.last), master.port);
    assert_int_equal(sl_sentinel_subscribed(b), 0);      /* on the plain redis */
    assert_int_equal(sl_sentinel_preferred(b), 1);       /* it answered with an error */
    assert_true(sl_sentinel_stats(b)->failures >= 1);

    uint64_t killed = th_now_ms();
    assert_true(th_signal_wait(&master, SIGKILL, 2000) != -1);
    struct want_calls two = { &wa, 2 };
    assert_true(th_run_until(&loop, called_n, &two, FAILOVER_MAX_MS));
    uint64_t took = wa.at_ms - killed;
    fprintf(stderr, "# failover reported by +switch-master %llu ms after the master died "
                    "(down-after %d ms, bound %d ms)\n",
            (unsigned long long)took, DOWN_AFTER_MS, FAILOVER_MAX_MS);
    assert_int_equal(port_of(&wa.last), replica.port);
    assert_true(took >= DOWN_AFTER_MS);
    assert_true(sl_sentinel_stats(a)->switch_messages >= 1);

    /* <b> heard nothing: no PING trouble, no resubscription, no round. */
    th_run_until(&loop, NULL, NULL, 300);
    assert_int_equal(wb.calls, 1);
    assert_int_equal(port_of(&wb.last), master.port);
    assert_int_equal(sl_sentinel_subscribed(b), 0);
    /* What the store does when the master stops answering. */
    uint64_t asked = th_now_ms();
    sl_sentinel_reask(b);
    sl_sentinel_reask(b); /* twice: one round */
    assert_true(th_run_until(&loop, called_n, &(struct want_calls){ &wb, 2 }, TH_MS));
    fprintf(stderr, "# sl_sentinel_reask() found the new master in %llu ms\n",
            (unsigned long long)(wb.at_ms - asked));
    assert_int_equal(port_of(&wb.last), replica.port);
    assert_int_equal(sl_sentinel_stats(b)->switch_messages, 0);
    assert_true(wb.at_ms - asked < 2000);
    /* It was the sentinel that answered before: no error, one answer. */
    assert_int_equal(sl_sentinel_preferred(b), 1);
    finish(&loop, a, b);
}

static void test_sentinels_down(void **state)
{
    (void)state;
    /* After the failover: sentinel 1 dies (refused), sentinel 0 stops
     * (connects, never answers: the timeout), sentinel 2 answers. */
    assert_true(th_signal_wait(&sent[1], SIGKILL, 2000) != -1);
    kill(sent[0].pid, SIGSTOP);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_addr addrs[3];
    int ports[3] = { sent[0].port, sent[1].port, sent[2].port };
    struct sl_sentinel_conf c;
    conf_init(&c, addrs, ports, 3);
    struct seen w = { 0 };
    uint64_t t0 = th_now_ms();
    struct sl_sentinel *s = sl_sentinel_new(&loop, &c, on_master, &w);
    assert_non_null(s);
    assert_true(th_run_until(&loop, called, &w, TH_MS));
    uint64_t took = w.at_ms - t0;
    fprintf(stderr, "# found through the third sentinel in %llu ms (timeout 300 ms)\n",
            (unsigned long long)took);
    assert_int_equal(port_of(&w.last), replica.port);
    assert_int_equal(sl_sentinel_preferred(s), 2);
    assert_int_equal(sl_sentinel_stats(s)->failures, 2);
    assert_true(took >= 300 && took < 300 + 1500);
    /* The subscription, too, moves past both to the live one. */
    assert_true(th_run_until(&loop, subscribed, s, TH_MS));
    assert_int_equal(sl_sentinel_subscribed(s), 2);
    finish(&loop, s, NULL);
    kill(sent[0].pid, SIGCONT);
}

static void test_unknown_master(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_addr addrs[1];
    int ports[1] = { sent[2].port };
    struct sl_sentinel_conf c;
    conf_init(&c, addrs, ports, 1);
    c.master_name = "nobody-monitors-this";
    struct seen w = { 0 };
    struct sl_sentinel *s = sl_sentinel_new(&loop, &c, on_master, &w);
    assert_non_null(s);
    assert_true(th_run_until(&loop, rounds_failed2, s, TH_MS));
    assert_int_equal(w.calls, 0);
    assert_true(sl_sentinel_stats(s)->unknown >= 2);
    struct sockaddr_storage ss;
    assert_int_equal(sl_sentinel_master(s, &ss), -1);
    /* While a failed round waits for its retry, a reask does not hurry it. */
    uint64_t rounds = sl_sentinel_stats(s)->rounds;
    sl_sentinel_reask(s);
    assert_int_equal(sl_sentinel_stats(s)->rounds, rounds);
    finish(&loop, s, NULL);
}

/* A sentinel named by a host name that did not resolve at load (the loader
 * warned and left its address empty): it is looked up again each time it
 * is to be tried; meanwhile the others answer, and once the name resolves
 * it answers too. The lookup is the real one (uv_getaddrinfo), but a name
 * of ours resolves only while the test allows it. */
static int later_allowed;

static int later_lookup(uv_loop_t *loop, uv_getaddrinfo_t *req, uv_getaddrinfo_cb cb,
                        const char *node, const char *service, const struct addrinfo *hints)
{
    if (node != NULL && strcmp(node, "sent-later.invalid") == 0 && later_allowed)
        node = "127.0.0.1";
    return uv_getaddrinfo(loop, req, cb, node, service, hints);
}

static void set_name(struct sl_addr *a, const char *host, int port)
{
    memset(a, 0, sizeof(*a));
    snprintf(a->text, sizeof(a->text), "%s:%d", host, port);
    a->named = 1;
    a->port = (uint16_t)port;
}

static void test_unresolved_name(void **state)
{
    (void)state;
    int mport = sentinel_says(sent[2].port);
    assert_true(mport > 0);
    sl_resolve_lookup_fn *was = sl_resolve_lookup;
    sl_resolve_lookup = later_lookup;
    later_allowed = 0;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_addr addrs[2];
    int ports[2] = { sent[2].port, sent[2].port }; /* the only one left answering */
    struct sl_sentinel_conf c;
    conf_init(&c, addrs, ports, 1);
    set_name(&addrs[0], "sent-later.invalid", sent[2].port);
    struct seen w = { 0 };
    struct sl_sentinel *s = sl_sentinel_new(&loop, &c, on_master, &w);
    assert_non_null(s);
    assert_true(th_run_until(&loop, rounds_failed2, s, TH_MS));
    assert_int_equal(w.calls, 0);
    later_allowed = 1;
    assert_true(th_run_until(&loop, called, &w, TH_MS));
    assert_int_equal(port_of(&w.last), mport);
    finish(&loop, s, NULL);

    /* One that never resolves, then one that does: found through the second. */
    uv_loop_init(&loop);
    conf_init(&c, addrs, ports, 2);
    set_name(&addrs[0], "sent-never.invalid", sent[2].port);
    memset(&w, 0, sizeof(w));
    s = sl_sentinel_new(&loop, &c, on_master, &w);
    assert_non_null(s);
    assert_true(th_run_until(&loop, called, &w, TH_MS));
    assert_int_equal(port_of(&w.last), mport);
    finish(&loop, s, NULL);
    sl_resolve_lookup = was;
}

static void test_auth(void **state)
{
    (void)state;
    struct th_proc lone;
    int mport = sentinel_says(sent[2].port);
    assert_true(mport > 0);
    assert_int_equal(th_sentinel_start(&lone, NAME, mport, "requirepass s3cret\n"), 0);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_addr addrs[1];
    int ports[1] = { lone.port };
    struct sl_sentinel_conf c;
    conf_init(&c, addrs, ports, 1);
    c.password = "s3cret";
    struct seen w = { 0 };
    struct sl_sentinel *s = sl_sentinel_new(&loop, &c, on_master, &w);
    assert_non_null(s);
    assert_true(th_run_until(&loop, called, &w, TH_MS));
    assert_int_equal(port_of(&w.last), mport);
    assert_true(th_run_until(&loop, subscribed, s, TH_MS));

    struct seen w2 = { 0 };
    c.password = "wrong";
    struct sl_sentinel *bad = sl_sentinel_new(&loop, &c, on_master, &w2);
    assert_non_null(bad);
    assert_true(th_run_until(&loop, rounds_failed2, bad, TH_MS));
    assert_int_equal(w2.calls, 0);
    assert_int_equal(sl_sentinel_subscribed(bad), -1);
    finish(&loop, s, bad);
    th_stop(&lone);
}

/* Starts build/sluice asking sentinel <sport> for NAME with the [store]
 * lines <auth> (on_failure = closed) and a limit <lim> of 2 INCRs a day;
 * returns its admin port, *<port> its listener. The store's timeout is 2 s,
 * not the default 25 ms: what is tested is AUTH to the sentinels, and on a
 * loaded machine a decision's round trip (the first one loads the script)
 * can pass 25 ms, when on_failure = closed refuses an INCR the store would
 * have admitted ("1 of 2 admitted"). */
static int sluice_auth_start(struct th_proc *sl, int sport, const char *auth, const char *lim,
                             int up_port, int *port)
{
    int admin = th_free_port();
    *port = th_free_port();
    char ini[2048];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\n"
             "[store]\nurl = redis-sentinel://127.0.0.1:%d/%s\non_failure = closed\ntimeout = 2s\n%s\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "[limit %s]\nlistener = r\nrate = 1/d\nburst = 2\ncommands = INCR\n",
             admin, sport, NAME, auth, *port, up_port, lim);
    assert_int_equal(th_sluice_start(sl, ini, *port), 0);
    return admin;
}

/* INCRs admitted of 4 sent through sluice at <port>. */
static int four_incrs(int port)
{
    redisContext *c = redisConnect("127.0.0.1", port);
    assert_non_null(c);
    int ok = 0;
    for (int i = 0; i < 4; i++) {
        redisReply *r = redisCommand(c, "INCR authn");
        assert_non_null(r);
        ok += r->type == REDIS_REPLY_INTEGER;
        freeReplyObject(r);
    }
    redisFree(c);
    return ok;
}

/* four_incrs, saying what the store's client counted when it is not <want>
 * (a timeout is a refusal under on_failure = closed). */
static int incrs_admitted(int port, int admin, int want)
{
    int got = four_incrs(port);
    if (got != want)
        print_message("%d of 4 admitted (want %d); store timeouts %.0f, store up %.0f\n", got, want,
                      th_metric(admin, "sluice_store_timeouts_total"), th_metric(admin, "sluice_store_up"));
    return got;
}

static int store_up_within(int admin, int ms)
{
    uint64_t end = th_now_ms() + (uint64_t)ms;
    while (th_now_ms() < end) {
        if (th_metric(admin, "sluice_store_up") == 1)
            return 1;
        usleep(20 * 1000);
    }
    return 0;
}

/* build/sluice against a sentinel with requirepass and an ACL user
 * (sentinel_password_file, with and without sentinel_user): the right
 * password finds the master and the limit is counted there; a wrong one
 * is one clear line naming the sentinel and WRONGPASS, the store stays
 * down and on_failure (closed) rejects. No password reaches the log.
 * Before, the sentinels were asked without AUTH (-NOAUTH). */
static void test_sluice_sentinel_auth(void **state)
{
    (void)state;
    struct th_proc lone, up, sl;
    int mport = sentinel_says(sent[2].port);
    assert_true(mport > 0);
    assert_int_equal(th_sentinel_start(&lone, NAME, mport,
                                       "requirepass s3cret\nuser watcher on >w4tch ~* &* +@all\n"), 0);
    assert_int_equal(th_redis_start(&up, NULL), 0);
    const char *secrets[3] = { "s3cret", "w4tch", "n0t-the-pa55" };
    char pw[3][96];
    for (int i = 0; i < 3; i++) {
        snprintf(pw[i], sizeof(pw[i]), "/tmp/sluice-test-senpw-%d-%d", (int)getpid(), i);
        FILE *f = fopen(pw[i], "w");
        assert_non_null(f);
        fprintf(f, "%s\n", secrets[i]);
        fclose(f);
        chmod(pw[i], 0600);
        th_track_file(pw[i]);
    }
    char auth[256];
    int port;

    /* AUTH password: the master found, the limit counted in the store */
    snprintf(auth, sizeof(auth), "sentinel_password_file = %s", pw[0]);
    int admin = sluice_auth_start(&sl, lone.port, auth, "authpw", up.port, &port);
    assert_true(store_up_within(admin, TH_MS));
    assert_int_equal(incrs_admitted(port, admin, 2), 2);
    char *keys = redis_cmd(mport, "KEYS sluice:{authpw:*\r\n");
    assert_non_null(keys);
    assert_non_null(strstr(keys, "sluice:{authpw:"));
    free(keys);
    assert_int_equal(th_log_count(sl.log, "s3cret"), 0);
    assert_int_equal(th_stop(&sl), 0);

    /* AUTH user password (a Redis 6 ACL user of the sentinel) */
    snprintf(auth, sizeof(auth), "sentinel_user = watcher\nsentinel_password_file = %s", pw[1]);
    admin = sluice_auth_start(&sl, lone.port, auth, "authuser", up.port, &port);
    assert_true(store_up_within(admin, TH_MS));
    assert_int_equal(incrs_admitted(port, admin, 2), 2);
    assert_int_equal(th_stop(&sl), 0);

    /* a wrong password: one clear line, the store down, on_failure = closed */
    snprintf(auth, sizeof(auth), "sentinel_password_file = %s", pw[2]);
    admin = sluice_auth_start(&sl, lone.port, auth, "authbad", up.port, &port);
    assert_int_equal(th_log_wait(sl.log, "msg=\"sentinel: no master known\"", 1, TH_MS), 0);
    char want[128];
    snprintf(want, sizeof(want), "last_error=\"127.0.0.1:%d: AUTH: WRONGPASS", lone.port);
    assert_true(th_log_count(sl.log, want) >= 1); /* then debug lines, each retry */
    assert_false(store_up_within(admin, 300));
    assert_int_equal(four_incrs(port), 0);
    assert_int_equal(th_log_count(sl.log, "n0t-the-pa55"), 0);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&up);
    th_stop(&lone);
}

/* A fake sentinel: to whatever it is sent, it answers the reply named by
 * <arg> and keeps the connection open. */
static void serve_hostile(int lfd, void *arg)
{
    const char *mode = arg;
    static char junk[200 * 1024];
    memset(junk, 'x', sizeof(junk));
    int held = 0;
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            _exit(1);
        }
        char buf[4096];
        if (read(fd, buf, sizeof(buf)) <= 0) {
            close(fd);
            continue;
        }
        if (strcmp(mode, "big") == 0) {
            /* a bulk of 100 MB announced, 200 KiB of it sent */
            const char head[] = "*2\r\n$100000000\r\n";
            th_write_all(fd, head, sizeof(head) - 1);
            th_write_all(fd, junk, sizeof(junk));
        } else if (strcmp(mode, "deep") == 0) {
            const char deep[] = "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n";
            th_write_all(fd, deep, sizeof(deep) - 1);
        } else {
            const char name[] = "*2\r\n$9\r\nlocalhost\r\n$4\r\n6379\r\n";
            th_write_all(fd, name, sizeof(name) - 1);
        }
        if (++held > 64)
            close(fd); /* else held open (never closed): the client must give up on its own */
    }
}

static void test_hostile(void **state)
{
    (void)state;
    int pb, pd, pn;
    pid_t big = th_fork_server(&pb, serve_hostile, "big");
    pid_t deep = th_fork_server(&pd, serve_hostile, "deep");
    pid_t name = th_fork_server(&pn, serve_hostile, "name");
    assert_true(big > 0 && deep > 0 && name > 0);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_addr addrs[4];
    int ports[4] = { pb, pd, pn, sent[2].port };
    struct sl_sentinel_conf c;
    conf_init(&c, addrs, ports, 4);
    struct seen w = { 0 };
    struct sl_sentinel *s = sl_sentinel_new(&loop, &c, on_master, &w);
    assert_non_null(s);
    assert_true(th_run_until(&loop, called, &w, TH_MS));
    assert_int_equal(port_of(&w.last), sentinel_says(sent[2].port));
    assert_int_equal(sl_sentinel_stats(s)->failures, 3);
    assert_int_equal(sl_sentinel_preferred(s), 3);
    assert_true(th_run_until(&loop, subscribed, s, TH_MS));
    assert_int_equal(sl_sentinel_subscribed(s), 3);
    finish(&loop, s, NULL);
    th_kill_server(big);
    th_kill_server(deep);
    th_kill_server(name);
}

/* A fake sentinel that lags: its subscription announces a switch from
 * ports[0] to ports[1] (half a second after the subscription, so the first
 * question is answered before), but asked, it still names ports[0]. Each
 * connection is served by a process of its own. */
static void lag_conn(int fd, const int *ports)
{
    char buf[4096], out[512];
    int subscribed = 0;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        if (n <= 0)
            break;
        buf[n] = '\0';
        if (strstr(buf, "get-master-addr-by-name") != NULL) {
            char port[8];
            snprintf(port, sizeof(port), "%d", ports[0]);
            int len = snprintf(out, sizeof(out), "*2\r\n$9\r\n127.0.0.1\r\n$%zu\r\n%s\r\n",
                               strlen(port), port);
            th_write_all(fd, out, (size_t)len);
        } else if (strstr(buf, "SUBSCRIBE") != NULL && !subscribed) {
            subscribed = 1;
            const char ok[] = "*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n";
            th_write_all(fd, ok, sizeof(ok) - 1);
            usleep(500 * 1000);
            char msg[128];
            int ml = snprintf(msg, sizeof(msg), "%s 127.0.0.1 %d 127.0.0.1 %d", NAME, ports[0],
                              ports[1]);
            int len = snprintf(out, sizeof(out),
                               "*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$%d\r\n%s\r\n",
                               ml, msg);
            th_write_all(fd, out, (size_t)len);
        } else if (strstr(buf, "PING") != NULL) {
            const char pong[] = "*2\r\n$4\r\npong\r\n$0\r\n\r\n";
            th_write_all(fd, pong, sizeof(pong) - 1);
        }
    }
    close(fd);
}

static void serve_lagging(int lfd, void *arg)
{
    signal(SIGCHLD, SIG_IGN); /* connection processes reap themselves */
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            _exit(1);
        }
        if (fork() == 0) {
            close(lfd);
            lag_conn(fd, arg);
            _exit(0);
        }
        close(fd);
    }
}

static int failed1(void *arg) { return sl_sentinel_stats(arg)->failures >= 1; }

static void test_lagging_sentinel(void **state)
{
    (void)state;
    static int ports[2] = { 41001, 41002 }; /* never connected to: only reported */
    int pl;
    pid_t lag = th_fork_server(&pl, serve_lagging, ports);
    assert_true(lag > 0);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_addr addrs[1];
    int list[1] = { pl };
    struct sl_sentinel_conf c;
    conf_init(&c, addrs, list, 1);
    struct seen w = { 0 };
    struct sl_sentinel *s = sl_sentinel_new(&loop, &c, on_master, &w);
    assert_non_null(s);
    assert_true(th_run_until(&loop, called, &w, TH_MS));
    assert_int_equal(port_of(&w.last), ports[0]);
    assert_true(th_run_until(&loop, called_n, &(struct want_calls){ &w, 2 }, TH_MS));
    assert_int_equal(port_of(&w.last), ports[1]);
    /* The store finds nothing at the new address yet and asks again: the
     * lagging answer is refused, the switch stands. */
    sl_sentinel_reask(s);
    assert_true(th_run_until(&loop, failed1, s, TH_MS));
    assert_int_equal(sl_sentinel_stats(s)->stale, 1);
    assert_int_equal(w.calls, 2);
    /* With a master known, a failed round is not retried on its own: long
     * after the hold, nothing has flipped it back. */
    assert_int_equal(sl_sentinel_stats(s)->rounds_failed, 1);
    uint64_t rounds = sl_sentinel_stats(s)->rounds;
    th_run_until(&loop, NULL, NULL, 600);
    assert_int_equal(sl_sentinel_stats(s)->rounds, rounds);
    assert_int_equal(w.calls, 2);
    struct sockaddr_storage ss;
    assert_int_equal(sl_sentinel_master(s, &ss), 0);
    assert_int_equal(port_of(&ss), ports[1]);
    finish(&loop, s, NULL);
    th_kill_server(lag);
}

/* The store behind Sentinel, through sluice, under load: a client sends
 * INCR one after another through a limit of the store (1,000,000/s, far
 * above what it sends: every request is admitted, by the store or by on_failure
 * = local while the store is away). The master is SIGSTOPped (no reset
 * tells anyone: a partition, a hung host). No request
 * waits longer than the store's timeout plus scheduling slack; sluice
 * decides locally meanwhile (fallback decisions counted); once the
 * sentinels promote the replica, sluice connects there and decisions are
 * the store's again (the limit's key lives on the new master). */
static void test_sluice_failover(void **state)
{
    /* A deployment of its own: the tests above killed and stopped some. */
    group_teardown(state);
    memset(&master, 0, sizeof(master));
    memset(&replica, 0, sizeof(replica));
    memset(sent, 0, sizeof(sent));
    memset(&plain, 0, sizeof(plain));
    assert_int_equal(group_setup(state), 0);
    struct th_proc up, sl;
    assert_int_equal(th_redis_start(&up, NULL), 0);
    int port = th_free_port(), admin = th_free_port();
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\n"
             "[store]\nurl = redis-sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/%s\n"
             "timeout = 100ms\non_failure = local\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "[limit all]\nlistener = r\nrate = 1000000/s\nscope = global\n",
             admin, sent[0].port, sent[1].port, sent[2].port, NAME, port, up.port);
    assert_int_equal(th_sluice_start(&sl, ini, port), 0);
    assert_int_equal(th_metric_wait(admin, "sluice_store_up", 1, TH_MS), 0);
    redisContext *c = redisConnect("127.0.0.1", port);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    uint64_t worst = 0, n = 0, killed_at = 0, back_at = 0;
    double fb_at_kill = 0, fb = 0;
    uint64_t end = th_now_ms() + 30000;
    while (th_now_ms() < end) {
        uint64_t t0 = th_now_ms();
        redisReply *r = redisCommand(c, "INCR k");
        uint64_t took = th_now_ms() - t0;
        assert_non_null(r);
        if (r->type != REDIS_REPLY_INTEGER)
            fprintf(stderr, "request %llu: %s\n", (unsigned long long)n, r->str);
        assert_int_equal(r->type, REDIS_REPLY_INTEGER); /* admitted, whoever decided */
        freeReplyObject(r);
        n++;
        if (killed_at != 0 && took > worst)
            worst = took;
        if (killed_at == 0 && n == 200) {
            fb_at_kill = th_metric(admin, "sluice_limit_fallback_decisions_total{limit=\"all\"}");
            /* Stopped, not killed: no reset tells sluice; requests on it
             * meet the store's timeout (a partition, a hung host). */
            kill(master.pid, SIGSTOP);
            killed_at = th_now_ms();
        }
        if (killed_at != 0 && n % 50 == 0) {
            fb = th_metric(admin, "sluice_limit_fallback_decisions_total{limit=\"all\"}");
            if (fb > fb_at_kill && th_metric(admin, "sluice_store_up") == 1) {
                back_at = th_now_ms();
                break;
            }
        }
    }
    assert_true(back_at != 0);
    /* Back on the store: more requests add no fallback decisions, and the
     * limit's key is on the promoted replica. */
    for (int i = 0; i < 100; i++) {
        redisReply *r = redisCommand(c, "INCR k");
        assert_non_null(r);
        freeReplyObject(r);
    }
    double fb_after = th_metric(admin, "sluice_limit_fallback_decisions_total{limit=\"all\"}");
    char *keys = redis_cmd(replica.port, "KEYS sluice:{all:*}*\r\n");
    assert_non_null(keys);
    print_message("sentinel failover under load: %llu requests, worst wait %llu ms after the "
                  "kill, store back after %llu ms, %.0f decided locally meanwhile\n",
                  (unsigned long long)n, (unsigned long long)worst,
                  (unsigned long long)(back_at - killed_at), fb - fb_at_kill);
    assert_true(worst <= 100 + 400); /* timeout, plus slack for a busy 2-core machine */
    assert_true(fb_after - fb <= 1);
    assert_non_null(strstr(keys, "sluice:{all:*}"));
    free(keys);
    redisFree(c);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&up);
    kill(master.pid, SIGKILL); /* stopped: th_kill_all's SIGTERM would wait */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_finds_master),
        cmocka_unit_test(test_failover),
        cmocka_unit_test(test_sentinels_down),
        cmocka_unit_test(test_unknown_master),
        cmocka_unit_test(test_unresolved_name),
        cmocka_unit_test(test_auth),
        cmocka_unit_test(test_sluice_sentinel_auth),
        cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_lagging_sentinel),
        cmocka_unit_test(test_sluice_failover),
    };
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

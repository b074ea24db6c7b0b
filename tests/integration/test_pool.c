/* sluice integration tests — a pooled RESP listener (`upstream_pool = N`)
 * against a real redis-server: clients share upstream connections, and
 * what lives on a connection (a transaction, a database, a user, a blocking
 * command) stays each client's own. The broad transparency checks (Redis's
 * suite, the differential fuzzer) run elsewhere; these are the basics.
 * POOL_ONLY=pattern runs the tests whose name matches it (cmocka filter: "test_pin*"). */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "integration/harness.h"

static struct th_proc redis_p, sluice_p;
static int pport; /* the pooled listener (upstream_pool = 1) */

/* A sluice with listener p on <port>, pooled (upstream_pool = 1) before
 * <up_port>, plus the listener keys (and sections) in <extra>; its admin
 * endpoint on <admin> (0: none). */
static int start_pooled(struct th_proc *sp, int up_port, int port, int admin, const char *extra)
{
    char ini[1024], adm[32] = "";
    if (admin > 0)
        snprintf(adm, sizeof(adm), "127.0.0.1:%d", admin);
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = %s\nshutdown_grace = 2s\nworkers = 1\n[store]\nurl = local\n"
             "[listener p]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nupstream_pool = 1\n%s",
             adm, port, up_port, extra ? extra : "");
    return th_sluice_start(sp, ini, port);
}

static int start_sluice(struct th_proc *sp, int up_port, int port, const char *extra)
{
    return start_pooled(sp, up_port, port, 0, extra);
}

static int group_setup(void **state)
{
    (void)state;
    if (th_redis_start(&redis_p, NULL) < 0)
        return -1;
    pport = th_free_port();
    if (start_sluice(&sluice_p, redis_p.port, pport, NULL) < 0) {
        th_stop(&redis_p);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    int st = th_stop(&sluice_p);
    th_stop(&redis_p);
    return st == 0 ? 0 : -1;
}

static redisContext *conn(int port)
{
    redisContext *c = redisConnect("127.0.0.1", port);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    struct timeval tv = { 10, 0 };
    redisSetTimeout(c, tv);
    return c;
}

static redisReply *cmd(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    return r;
}

static void expect_str(redisContext *c, const char *want, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS &&
        r->type != REDIS_REPLY_ERROR)
        fail_msg("reply type %d to %s, want \"%s\"", r->type, fmt, want);
    if (strncmp(r->str, want, strlen(want)) != 0)
        fail_msg("\"%s\" to %s, want \"%s\"", r->str, fmt, want);
    freeReplyObject(r);
}

/* connected_clients as the upstream counts them (the asking connection too). */
static long upstream_clients(void)
{
    redisContext *d = conn(redis_p.port);
    redisReply *r = cmd(d, "INFO clients");
    const char *p = strstr(r->str, "connected_clients:");
    long n = p ? strtol(p + 18, NULL, 10) : -1;
    freeReplyObject(r);
    redisFree(d);
    return n;
}

/* Polls until the upstream counts <want> clients (10 s at most). */
static long wait_clients(long want)
{
    long n = -1;
    for (uint64_t end = th_now_ms() + 10000; th_now_ms() < end; usleep(10000))
        if ((n = upstream_clients()) == want)
            break;
    return n;
}

/* Two clients' requests go over one upstream connection, each answered its own. */
static void test_shared(void **state)
{
    (void)state;
    redisContext *a = conn(pport), *b = conn(pport);
    for (int i = 0; i < 50; i++) {
        expect_str(a, "OK", "SET pa%d a%d", i, i);
        expect_str(b, "OK", "SET pb%d b%d", i, i);
    }
    for (int i = 0; i < 50; i++) {
        char want[16];
        snprintf(want, sizeof(want), "b%d", i);
        expect_str(b, want, "GET pb%d", i);
        snprintf(want, sizeof(want), "a%d", i);
        expect_str(a, want, "GET pa%d", i);
    }
    /* the pool's one connection, and the one asking */
    assert_int_equal(wait_clients(2), 2);
    redisFree(a);
    redisFree(b);
}

/* MULTI pins a connection of its own; after EXEC it goes back. */
static void test_multi_pins(void **state)
{
    (void)state;
    redisContext *a = conn(pport), *b = conn(pport);
    expect_str(b, "OK", "SET mk 0");
    expect_str(a, "OK", "MULTI");
    expect_str(a, "QUEUED", "INCR mk");
    /* b is not inside a's transaction */
    expect_str(b, "0", "GET mk");
    assert_int_equal(upstream_clients(), 3); /* shared + a's own + the asking one */
    redisReply *r = cmd(a, "EXEC");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->element[0]->integer, 1);
    freeReplyObject(r);
    expect_str(b, "1", "GET mk");
    assert_int_equal(wait_clients(2), 2); /* given back (upstream_pool = 1: closed) */
    redisFree(a);
    redisFree(b);
}

/* SELECT moves one client to another database, not the others. */
static void test_select_own(void **state)
{
    (void)state;
    redisContext *a = conn(pport), *b = conn(pport);
    expect_str(b, "OK", "SET sk db0");
    expect_str(a, "OK", "SELECT 2");
    expect_str(a, "OK", "SET sk db2");
    expect_str(a, "db2", "GET sk");
    expect_str(b, "db0", "GET sk");
    redisReply *r = cmd(a, "CLIENT INFO");
    assert_non_null(strstr(r->str, " db=2 "));
    freeReplyObject(r);
    expect_str(a, "OK", "SELECT 0");
    expect_str(a, "db0", "GET sk");
    redisFree(a);
    redisFree(b);
}

/* AUTH as an ACL user: that user's permissions, for that client only. */
static void test_auth_user(void **state)
{
    (void)state;
    redisContext *d = conn(redis_p.port);
    expect_str(d, "OK", "ACL SETUSER pooluser on >pw ~u:* +get +set +select");
    redisFree(d);
    redisContext *a = conn(pport), *b = conn(pport);
    expect_str(a, "WRONGPASS", "AUTH pooluser nope");
    expect_str(a, "OK", "SET x:1 still-default"); /* a refused AUTH moves nothing */
    expect_str(a, "OK", "AUTH pooluser pw");
    expect_str(a, "OK", "SET u:1 one");
    expect_str(a, "NOPERM", "SET x:1 two");
    expect_str(a, "NOPERM", "DEL u:1");
    expect_str(b, "OK", "SET x:1 three"); /* b is still the default user */
    redisReply *r = cmd(b, "DEL u:1");
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    r = cmd(a, "CLIENT INFO");
    assert_non_null(strstr(r->str, " user=pooluser "));
    freeReplyObject(r);
    /* the key keeps the user when the database moves: a fresh connection
     * of that key logs in as pooluser, then selects 1 */
    expect_str(a, "OK", "SELECT 1");
    expect_str(a, "OK", "SET u:db1 one");
    expect_str(a, "NOPERM", "SET x:1 four");
    redisContext *d1 = conn(redis_p.port);
    expect_str(d1, "OK", "SELECT 1");
    expect_str(d1, "one", "GET u:db1");
    redisFree(d1);
    redisFree(a);
    redisFree(b);
}

/* A client blocked in BLPOP does not stall another's GET. */
static void test_blocking(void **state)
{
    (void)state;
    redisContext *a = conn(pport), *b = conn(pport);
    assert_int_equal(redisAppendCommand(a, "BLPOP bq 0"), REDIS_OK);
    int done = 0;
    assert_int_equal(redisBufferWrite(a, &done), REDIS_OK);
    expect_str(b, "OK", "SET bk v");
    expect_str(b, "v", "GET bk");
    redisReply *r = cmd(b, "RPUSH bq item");
    freeReplyObject(r);
    redisReply *br = NULL;
    assert_int_equal(redisGetReply(a, (void **)&br), REDIS_OK);
    assert_int_equal(br->type, REDIS_REPLY_ARRAY);
    assert_string_equal(br->element[1]->str, "item");
    freeReplyObject(br);
    expect_str(a, "v", "GET bk"); /* a goes on, pooled again */
    redisFree(a);
    redisFree(b);
}

/* Clients blocked in BLPOP on the upstream now (its CLIENT LIST). */
static int upstream_blocked(void)
{
    redisContext *d = conn(redis_p.port);
    redisReply *r = cmd(d, "CLIENT LIST");
    int n = 0;
    for (const char *p = r->str; (p = strstr(p, "cmd=blpop")) != NULL; p++)
        n++;
    freeReplyObject(r);
    redisFree(d);
    return n;
}

/* A blocked client that half-closes is closed, with its own connection, as
 * Redis closes one on reading its EOF. */
static void test_eof_blocked(void **state)
{
    (void)state;
    int fd = th_connect(pport);
    assert_true(fd >= 0);
    TH_SEND(fd, "*3\r\n$5\r\nBLPOP\r\n$5\r\neofbq\r\n$1\r\n0\r\n");
    int n = 0;
    for (uint64_t end = th_now_ms() + 10000; n == 0 && th_now_ms() < end; usleep(10000))
        n = upstream_blocked();
    assert_int_equal(n, 1);
    shutdown(fd, SHUT_WR);
    char buf[64];
    int eof = 0;
    assert_int_equal(th_read_until_eof(fd, buf, sizeof(buf), TH_MS, &eof), 0);
    assert_true(eof);
    close(fd);
    for (uint64_t end = th_now_ms() + 10000; n > 0 && th_now_ms() < end; usleep(10000))
        n = upstream_blocked();
    assert_int_equal(n, 0);
}

/* A request bigger than the framer holds streams on a connection of the
 * client's own, whole, while another client's requests go on. */
static void test_big_request(void **state)
{
    (void)state;
    static char big[300 * 1024];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (char)('a' + i % 26);
    redisContext *a = conn(pport), *b = conn(pport);
    expect_str(b, "PONG", "PING");
    long base = upstream_clients(); /* other keys' connections stay open */
    for (int i = 0; i < 3; i++) {
        redisReply *r = cmd(a, "SET bigk %b", big, sizeof(big));
        assert_string_equal(r->str, "OK");
        freeReplyObject(r);
        expect_str(b, "OK", "SET smallk %d", i);
        r = cmd(b, "GET bigk");
        assert_int_equal(r->len, sizeof(big));
        assert_memory_equal(r->str, big, sizeof(big));
        freeReplyObject(r);
    }
    assert_int_equal(wait_clients(base), base); /* a's own connection went back */
    redisFree(a);
    redisFree(b);
}

/* RESP3 (HELLO 3) is a pool key of its own: the client gets RESP3's map,
 * another on the same listener still RESP2's array. */
static void test_resp3(void **state)
{
    (void)state;
    redisContext *b = conn(pport);
    redisReply *hs = cmd(b, "HSET h3 f v");
    assert_int_equal(hs->type, REDIS_REPLY_INTEGER);
    freeReplyObject(hs);
    int fd = th_connect(pport);
    assert_true(fd >= 0);
    TH_SEND(fd, "*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n*2\r\n$7\r\nHGETALL\r\n$2\r\nh3\r\n");
    char buf[4096];
    size_t got = 0;
    static const char map[] = "%1\r\n$1\r\nf\r\n$1\r\nv\r\n";
    for (uint64_t end = th_now_ms() + TH_MS; th_now_ms() < end && got < sizeof(buf) - 1;) {
        got += th_read_n(fd, buf + got, 1, 100);
        buf[got] = '\0';
        if (got >= sizeof(map) - 1 && strcmp(buf + got - (sizeof(map) - 1), map) == 0)
            break;
    }
    assert_true(got > 0 && buf[0] == '%'); /* HELLO's map */
    assert_true(got >= sizeof(map) - 1);
    assert_string_equal(buf + got - (sizeof(map) - 1), map);
    close(fd);
    redisReply *r = cmd(b, "HGETALL h3");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    redisFree(b);
}

/* CLIENT SETNAME/GETNAME/ID are each client's own. */
static void test_local_client(void **state)
{
    (void)state;
    redisContext *a = conn(pport), *b = conn(pport);
    expect_str(a, "OK", "CLIENT SETNAME alpha");
    expect_str(a, "alpha", "CLIENT GETNAME");
    redisReply *r = cmd(b, "CLIENT GETNAME");
    assert_int_equal(r->type, REDIS_REPLY_NIL);
    freeReplyObject(r);
    redisReply *h = cmd(b, "HELLO 2 SETNAME beta");
    assert_int_equal(h->type, REDIS_REPLY_ARRAY);
    freeReplyObject(h);
    expect_str(b, "beta", "CLIENT GETNAME");
    expect_str(a, "alpha", "CLIENT GETNAME");
    redisReply *ia = cmd(a, "CLIENT ID"), *ib = cmd(b, "CLIENT ID");
    assert_true(ia->integer != ib->integer);
    freeReplyObject(ia);
    freeReplyObject(ib);
    redisFree(a);
    redisFree(b);
}

/* What sluice answers itself (CLIENT GETNAME ...) is what Redis answers:
 * its arity errors, its refusal while subscribed under RESP2, and, behind
 * a pipelined HELLO 3, a RESP3 answer. Each exchange goes both to Redis
 * directly and to the pooled listener, in one write; the replies must be
 * the same bytes (but HELLO's, <skip> bit i: reply i). */
static void same_as_redis(const char *send, int nreplies, unsigned skip)
{
    struct th_conn d = { .fd = -1 }, p = { .fd = -1 };
    assert_int_equal(th_conn_open(&d, redis_p.port), 0);
    assert_int_equal(th_conn_open(&p, pport), 0);
    assert_int_equal(th_conn_send(&d, send), 0);
    assert_int_equal(th_conn_send(&p, send), 0);
    for (int i = 0; i < nreplies; i++) {
        char *want = th_conn_reply(&d, TH_MS), *got = th_conn_reply(&p, TH_MS);
        assert_non_null(want);
        if (skip & (1u << i)) /* HELLO's: its id differs */
            assert_non_null(got);
        else if (got == NULL || strcmp(got, want) != 0)
            fail_msg("%s: reply %d: got '%s', want '%s'", send, i, got ? got : "(nothing)", want);
        free(want);
        free(got);
    }
    th_conn_close(&d);
    th_conn_close(&p);
}

static void test_local_arity(void **state)
{
    (void)state;
    same_as_redis("CLIENT GETNAME x\r\nCLIENT ID x\r\nCLIENT INFO x\r\nCLIENT SETINFO x\r\n"
                  "CLIENT UNBLOCK\r\nCLIENT KILL\r\nCLIENT GETNAME\r\n", 7, 0);
}

/* CLIENT LIST and KILL's options, read by the classifier: what Redis
 * answers where the caller is the only client */
static void test_local_options(void **state)
{
    (void)state;
    same_as_redis("CLIENT LIST TYPE pubsub\r\nCLIENT LIST TYPE Master\r\nCLIENT LIST x\r\n"
                  "CLIENT LIST TYPE normal x\r\nCLIENT LIST ID 99999 99998\r\n"
                  "CLIENT KILL 192.0.2.1:5\r\nCLIENT KILL ID 99999\r\nHELLO 3\r\n"
                  "CLIENT LIST TYPE replica\r\n",
                  9, 1u << 7);
    /* what Redis refuses, with its own words: an unknown type, an id that
     * is not an integer as Redis reads one, ID with no id */
    same_as_redis("CLIENT LIST TYPE bogus\r\nCLIENT LIST ID abc\r\nCLIENT LIST ID 99999 046\r\n"
                  "CLIENT LIST ID +5\r\nCLIENT LIST ID\r\nCLIENT LIST ID -1\r\n"
                  "CLIENT LIST TYPE normal ID 5\r\n",
                  7, 0);
}

static void test_local_subscribed(void **state)
{
    (void)state;
    same_as_redis("SUBSCRIBE lc:ch\r\nCLIENT GETNAME\r\nCLIENT SETNAME n\r\nCLIENT ID\r\n"
                  "UNSUBSCRIBE lc:ch\r\nCLIENT GETNAME\r\n", 6, 0);
}

/* The kept name and transactions: a GETNAME queued in MULTI answers it, a
 * SETNAME queued there sets it once EXEC runs (not after DISCARD), and one
 * sent while the client holds a connection of its own names it too. */
static void test_local_names_pinned(void **state)
{
    (void)state;
    same_as_redis("CLIENT SETNAME n1\r\nWATCH lc:k\r\nCLIENT SETNAME n2\r\nMULTI\r\n"
                  "CLIENT GETNAME\r\nEXEC\r\nCLIENT GETNAME\r\nMULTI\r\nCLIENT SETNAME n3\r\n"
                  "EXEC\r\nCLIENT GETNAME\r\nMULTI\r\nCLIENT SETNAME n4\r\nDISCARD\r\n"
                  "CLIENT GETNAME\r\nMULTI\r\nCLIENT GETNAME\r\nEXEC\r\n",
                  18, 0);
}

static void test_local_after_hello(void **state)
{
    (void)state;
    same_as_redis("HELLO 3\r\nCLIENT GETNAME\r\nHELLO 2\r\nCLIENT GETNAME\r\n", 4, 5);
}

/* A PUBLISH in MULTI to the client's own subscription: Redis 7.0 writes the
 * message inside EXEC's reply, which is none of its elements; the garbage's
 * error comes after the whole of it (the differential fuzzer's seed 19
 * round 4), and a client after it is served as usual. */
static void test_push_inside_exec(void **state)
{
    (void)state;
    static const char want[] = ">3\r\n$9\r\nsubscribe\r\n$4\r\npx:1\r\n:1\r\n+OK\r\n+QUEUED\r\n"
                               "*1\r\n>3\r\n$7\r\nmessage\r\n$4\r\npx:1\r\n$1\r\nm\r\n:1\r\n"
                               "-ERR Protocol error: invalid bulk length\r\n";
    struct th_conn c = { .fd = -1 };
    assert_int_equal(th_conn_open(&c, pport), 0);
    assert_int_equal(th_conn_send(&c, "HELLO 3\r\n"), 0);
    free(th_conn_reply(&c, TH_MS));
    assert_int_equal(th_conn_send(&c, "SUBSCRIBE px:1\r\nMULTI\r\nPUBLISH px:1 m\r\nEXEC\r\n"
                                      "*1\r\n$04\r\nPING\r\n"), 0);
    assert_int_equal(th_expect_close(c.fd, want, sizeof(want) - 1, TH_MS), 0);
    th_conn_close(&c);
    redisContext *d = conn(pport);
    expect_str(d, "PONG", "PING");
    redisFree(d);
}

/* A SETNAME (or HELLO ... SETNAME) under CLIENT REPLY OFF, or the one SKIP
 * covers, names the client though no reply says so: Redis takes every name
 * sluice lets through (the differential fuzzer's seed 30 round 30 and seed
 * 28 round 33). */
static void test_local_name_unanswered(void **state)
{
    (void)state;
    same_as_redis("CLIENT REPLY OFF\r\nCLIENT SETNAME alice\r\nCLIENT REPLY ON\r\n"
                  "CLIENT GETNAME\r\nCLIENT REPLY SKIP\r\nCLIENT SETNAME bob\r\n"
                  "CLIENT GETNAME\r\nCLIENT REPLY SKIP\r\nHELLO 2 SETNAME carol\r\n"
                  "CLIENT GETNAME\r\n",
                  4, 0);
    /* pipelined behind a RESET, whose answer (which clears the name) comes
     * after the SETNAME was written */
    same_as_redis("RESET\r\nCLIENT REPLY OFF\r\nCLIENT SETNAME dave\r\nCLIENT REPLY ON\r\n"
                  "CLIENT GETNAME\r\n", 3, 0);
    /* a RESET whose +RESET is skipped still forgets the name and the
     * protocol (the fuzzer's seed 43 round 26) */
    same_as_redis("HELLO 3\r\nCLIENT SETNAME erin\r\nCLIENT REPLY SKIP\r\nRESET\r\n"
                  "CLIENT GETNAME\r\n", 3, 1u);
}

/* EXEC without MULTI is refused and leaves the keys watched, also when it
 * is pipelined behind an earlier transaction whose EXEC is not answered yet
 * (the tracker still holds that MULTI's pin then; the pooled fuzzer's seed
 * 37 round 31): once every answer is in the client keeps its connection,
 * and the next transaction sees the WATCH and fails. */
static void test_exec_without_multi_pipelined(void **state)
{
    (void)state;
    static const char *const end[2] = { "EXEC", "DISCARD" };
    for (int k = 0; k < 2; k++) {
        struct th_conn a = { .fd = -1 };
        char send[128], err[64];
        assert_int_equal(th_conn_open(&a, pport), 0);
        snprintf(send, sizeof(send), "MULTI\r\nEXEC\r\nWATCH ewp:k\r\n%s\r\n", end[k]);
        snprintf(err, sizeof(err), "-ERR %s without MULTI\r\n", end[k]);
        const char *want[] = { "+OK\r\n", "*0\r\n", "+OK\r\n", err,
                               "+OK\r\n", "+OK\r\n", "*-1\r\n" };
        assert_int_equal(th_conn_send(&a, send), 0);
        for (int i = 0; i < 7; i++) {
            if (i == 4) /* every answer is in: the pin would have gone back */
                assert_int_equal(th_conn_send(&a, "SET ewp:k v\r\n"), 0);
            if (i == 5)
                assert_int_equal(th_conn_send(&a, "MULTI\r\nEXEC\r\n"), 0);
            char *r = th_conn_reply(&a, TH_MS);
            if (r == NULL || strcmp(r, want[i]) != 0)
                fail_msg("%s: reply %d: got '%s', want '%s'", end[k], i, r ? r : "(nothing)",
                         want[i]);
            free(r);
        }
        th_conn_close(&a);
    }
}

/* RESET outside a transaction ends what it clears (a WATCH, CLIENT
 * TRACKING, NO-EVICT): the client's connection goes back, and under
 * upstream_pool_pinned = 1 another client may pin. The rule that an EXEC
 * or DISCARD with no MULTI before it ends nothing once took RESET, which
 * also ends a transaction, for one of them: the client kept its connection
 * until it left (the other one waited upstream_pool_pin_wait, then was
 * refused). */
static void test_reset_unpins(void **state)
{
    (void)state;
    struct th_proc s2;
    int port = th_free_port(), admin = th_free_port();
    assert_int_equal(start_pooled(&s2, redis_p.port, port, admin,
                                  "upstream_pool_pinned = 1\nupstream_pool_pin_wait = 10s\n"),
                     0);
    static const char *const pin[3] = { "WATCH rup:k", "CLIENT TRACKING ON", "CLIENT NO-EVICT ON" };
    redisContext *a = conn(port), *b = conn(port);
    for (int k = 0; k < 3; k++) {
        expect_str(a, "OK", pin[k]);
        assert_int_equal(th_metric(admin, "sluice_pool_pinned_connections{listener=\"p\"}"), 1);
        expect_str(a, "RESET", "RESET");
        /* b's MULTI waits for a pinned place, which a's RESET gave back */
        redisReply *r = cmd(b, "MULTI");
        if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "OK") != 0)
            fail_msg("after %s, RESET: MULTI answered '%s'", pin[k], r->str ? r->str : "");
        freeReplyObject(r);
        expect_str(b, "OK", "DISCARD");
    }
    assert_int_equal(th_metric(admin, "sluice_pool_pin_refused_total{listener=\"p\"}"), 0);
    redisFree(a);
    redisFree(b);
    assert_int_equal(th_stop(&s2), 0);
}

/* A HELLO queued in MULTI leaves the client's connection pinned (its
 * protocol is not the pool key's), also behind a refused request of the
 * same pin: a SELECT x that Redis refuses once ended that pin, and the
 * client went back to a RESP2 connection after asking for RESP3. */
static void test_hold_after_refused(void **state)
{
    (void)state;
    struct th_conn a = { .fd = -1 };
    assert_int_equal(th_conn_open(&a, pport), 0);
    assert_int_equal(th_conn_send(&a, "HSET har:h f v\r\nSELECT x\r\nMULTI\r\nHELLO 3\r\n"
                                      "EXEC\r\n"), 0);
    for (int i = 0; i < 5; i++) {
        char *r = th_conn_reply(&a, TH_MS);
        assert_non_null(r);
        free(r);
    }
    /* every answer is in: the pin would have gone back */
    assert_int_equal(th_conn_send(&a, "HGETALL har:h\r\n"), 0);
    char *r = th_conn_reply(&a, TH_MS);
    if (r == NULL || strcmp(r, "%1\r\n$1\r\nf\r\n$1\r\nv\r\n") != 0)
        fail_msg("HGETALL after HELLO 3 ran: got '%s', want a RESP3 map", r ? r : "(nothing)");
    free(r);
    th_conn_close(&a);
}

/* A transaction sluice aborts (a command in it refused by a limit: a
 * DISCARD goes upstream in EXEC's place, -EXECABORT to the client) ends
 * the MULTI and the WATCH as the EXEC would have: the client's connection
 * goes back, and a SETNAME queued in it never names the client. Before,
 * the tracker never heard of that DISCARD: the client held its connection
 * until its next transaction ended, and that one set the dropped name. */
static void test_aborted_exec_unpins(void **state)
{
    (void)state;
    struct th_proc s2;
    int port = th_free_port(), admin = th_free_port();
    assert_int_equal(start_pooled(&s2, redis_p.port, port, admin,
                                  "[limit l]\nlistener = p\nrate = 1/d\nburst = 1\n"
                                  "commands = INCR\n"),
                     0);
    struct th_conn a = { .fd = -1 };
    assert_int_equal(th_conn_open(&a, port), 0);
    assert_int_equal(th_conn_send(&a, "WATCH aeu:k\r\nMULTI\r\nCLIENT SETNAME dropped\r\n"
                                      "INCR aeu:n\r\nINCR aeu:n\r\nEXEC\r\n"), 0);
    const char *want[] = { "+OK\r\n", "+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", NULL,
                           "-EXECABORT Transaction discarded because of previous errors.\r\n" };
    for (int i = 0; i < 6; i++) {
        char *r = th_conn_reply(&a, TH_MS);
        if (r == NULL || (want[i] != NULL && strcmp(r, want[i]) != 0) ||
            (want[i] == NULL && strncmp(r, "-THROTTLED", 10) != 0))
            fail_msg("reply %d: got '%s', want '%s'", i, r ? r : "(nothing)",
                     want[i] ? want[i] : "-THROTTLED ...");
        free(r);
    }
    assert_int_equal(th_metric_wait(admin, "sluice_pool_pinned_connections{listener=\"p\"}", 0,
                                    TH_MS),
                     0);
    assert_int_equal(th_conn_send(&a, "MULTI\r\nEXEC\r\nCLIENT GETNAME\r\n"), 0);
    const char *want2[] = { "+OK\r\n", "*0\r\n", "$-1\r\n" };
    for (int i = 0; i < 3; i++) {
        char *r = th_conn_reply(&a, TH_MS);
        if (r == NULL || strcmp(r, want2[i]) != 0)
            fail_msg("after the abort, reply %d: got '%s', want '%s'", i, r ? r : "(nothing)",
                     want2[i]);
        free(r);
    }
    th_conn_close(&a);
    assert_int_equal(th_stop(&s2), 0);
}

/* A HELLO queued in MULTI switches the protocol when EXEC runs it (the
 * pool key is not known then: the client keeps its connection); what
 * sluice answers itself afterwards speaks the protocol the client asked
 * for (the differential fuzzer's seed 11 round 56: GETNAME's nil). */
static void test_local_hello_in_multi(void **state)
{
    (void)state;
    same_as_redis("HELLO 3\r\nMULTI\r\nHELLO 2\r\nEXEC\r\nCLIENT GETNAME\r\n"
                  "MULTI\r\nHELLO 3\r\nEXEC\r\nCLIENT GETNAME\r\n",
                  9, 1u | 8u | 128u);
    /* one DISCARD drops (the fuzzer's seed 32 round 58), and one whose
     * reply CLIENT REPLY SKIP skips */
    same_as_redis("HELLO 3\r\nMULTI\r\nHELLO 2\r\nDISCARD\r\nCLIENT GETNAME\r\n", 5, 1u);
    same_as_redis("CLIENT REPLY SKIP\r\nHELLO 3\r\nCLIENT GETNAME\r\n", 1, 0);
}

/* Under RESP3, CLIENT INFO and CLIENT LIST are verbatim strings ("=<n>\r\n
 * txt:<line>"), as from Redis. */
static void test_local_info_resp3(void **state)
{
    (void)state;
    same_as_redis("HELLO 3\r\nCLIENT LIST ID 99999999\r\n", 2, 1u);
    static const char *const ask[2] = { "CLIENT INFO\r\n", "CLIENT LIST\r\n" };
    for (int k = 0; k < 2; k++) {
        struct th_conn p = { .fd = -1 };
        assert_int_equal(th_conn_open(&p, pport), 0);
        assert_int_equal(th_conn_send(&p, "HELLO 3\r\n"), 0);
        free(th_conn_reply(&p, TH_MS));
        assert_int_equal(th_conn_send(&p, ask[k]), 0);
        char *r = th_conn_reply(&p, TH_MS);
        assert_non_null(r);
        char *body = strstr(r, "\r\n");
        assert_non_null(body);
        if (r[0] != '=' || strncmp(body + 2, "txt:id=", 7) != 0)
            fail_msg("%s: '%s', want a verbatim string", ask[k], r);
        assert_int_equal(strtol(r + 1, NULL, 10), (long)(strlen(body + 2) - 2));
        free(r);
        th_conn_close(&p);
    }
}

/* Garbage behind requests whose replies Redis does not send, on the
 * client's own connection (CLIENT REPLY OFF, or the request SKIP covers):
 * the message its own PUBLISH delivers to its subscription still comes
 * before the close, as from Redis (the differential fuzzer's seed 9 round
 * 236); the connection then goes back clean for the next client. */
static void test_silent_then_protocol_error(void **state)
{
    (void)state;
    static const char *const in[2] = {
        "CLIENT REPLY OFF\r\nSUBSCRIBE pe:3\r\nPUBLISH pe:3 m\r\n*1\r\n$abc\r\n",
        "SUBSCRIBE pe:4\r\nCLIENT REPLY SKIP\r\nPUBLISH pe:4 m\r\n*1\r\n$abc\r\n",
    };
    static const char *const want[2] = {
        ">3\r\n$9\r\nsubscribe\r\n$4\r\npe:3\r\n:1\r\n>3\r\n$7\r\nmessage\r\n$4\r\npe:3\r\n$1\r\nm\r\n",
        ">3\r\n$9\r\nsubscribe\r\n$4\r\npe:4\r\n:1\r\n>3\r\n$7\r\nmessage\r\n$4\r\npe:4\r\n"
        "$1\r\nm\r\n-ERR Protocol error: invalid bulk length\r\n",
    };
    for (int k = 0; k < 2; k++) {
        struct th_conn c = { .fd = -1 };
        assert_int_equal(th_conn_open(&c, pport), 0);
        assert_int_equal(th_conn_send(&c, "HELLO 3\r\n"), 0);
        char *r = th_conn_reply(&c, TH_MS);
        assert_non_null(r);
        assert_int_equal(r[0], '%');
        free(r);
        assert_int_equal(th_conn_send(&c, in[k]), 0);
        assert_int_equal(th_expect_close(c.fd, want[k], strlen(want[k]), TH_MS), 0);
        th_conn_close(&c);
        redisContext *d = conn(pport);
        expect_str(d, "PONG", "PING");
        expect_str(d, "OK", "SET pe:k v");
        redisFree(d);
    }
}

/* SCRIPT KILL reaches a server busy in another client's script although
 * the only shared connection waits for that script: it goes on a
 * connection of the killer's own. */
static void test_script_kill(void **state)
{
    (void)state;
    redisContext *d = conn(redis_p.port);
    expect_str(d, "OK", "CONFIG SET busy-reply-threshold 10");
    struct th_conn a = { .fd = -1 }, b = { .fd = -1 };
    assert_int_equal(th_conn_open(&a, pport), 0);
    assert_int_equal(th_conn_open(&b, pport), 0);
    assert_int_equal(th_conn_send(&a, "PING\r\n"), 0);
    char *x = th_conn_reply(&a, TH_MS);
    assert_non_null(x);
    free(x);
    assert_int_equal(th_conn_send(&a, "EVAL \"while true do end\" 0\r\n"), 0);
    int busy = 0;
    for (uint64_t end = th_now_ms() + TH_MS; !busy && th_now_ms() < end; usleep(2000)) {
        redisReply *r = cmd(d, "PING"); /* polling a condition */
        busy = r->type == REDIS_REPLY_ERROR && strncmp(r->str, "BUSY", 4) == 0;
        freeReplyObject(r);
    }
    assert_true(busy);
    assert_int_equal(th_conn_send(&b, "SCRIPT KILL\r\n"), 0);
    x = th_conn_reply(&b, TH_MS);
    if (x == NULL || strcmp(x, "+OK\r\n") != 0)
        fail_msg("SCRIPT KILL: '%s'", x ? x : "(nothing)");
    free(x);
    x = th_conn_reply(&a, TH_MS);
    assert_non_null(x);
    assert_non_null(strstr(x, "killed by user"));
    free(x);
    assert_int_equal(th_conn_send(&b, "PING\r\n"), 0);
    x = th_conn_reply(&b, TH_MS);
    assert_non_null(x);
    assert_string_equal(x, "+PONG\r\n");
    free(x);
    th_conn_close(&a);
    th_conn_close(&b);
    expect_str(d, "OK", "CONFIG SET busy-reply-threshold 5000");
    redisFree(d);
}

/* The upstream dies while a shared connection owes a reply: the client gets
 * an error in its place, and the next request is served once it is back. */
static void test_upstream_killed(void **state)
{
    (void)state;
    struct th_proc r2, s2;
    assert_int_equal(th_redis_start(&r2, "--busy-reply-threshold", "10", NULL), 0);
    int port = th_free_port();
    assert_int_equal(start_sluice(&s2, r2.port, port, NULL), 0);
    redisContext *a = conn(port);
    expect_str(a, "PONG", "PING");
    assert_int_equal(redisAppendCommand(a, "EVAL %s 0", "while true do end"), REDIS_OK);
    int done = 0;
    assert_int_equal(redisBufferWrite(a, &done), REDIS_OK);
    /* the script runs once the upstream answers others BUSY */
    redisContext *d = conn(r2.port);
    int busy = 0;
    for (uint64_t end = th_now_ms() + 10000; !busy && th_now_ms() < end; usleep(5000)) {
        redisReply *r = cmd(d, "PING");
        busy = r->type == REDIS_REPLY_ERROR && strncmp(r->str, "BUSY", 4) == 0;
        freeReplyObject(r);
    }
    redisFree(d);
    assert_true(busy);
    kill(r2.pid, SIGKILL);
    waitpid(r2.pid, NULL, 0);
    r2.pid = 0;
    redisReply *r = NULL;
    assert_int_equal(redisGetReply(a, (void **)&r), REDIS_OK);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_string_equal(r->str, "ERR sluice: upstream connection lost");
    freeReplyObject(r);
    redisFree(a);
    assert_int_equal(th_stop(&s2), 0);
}

/* The query buffer the upstream holds for its client blocked in BLPOP
 * (its CLIENT LIST qbuf), or -1 when none is blocked. */
static long blocked_qbuf(void)
{
    redisContext *d = conn(redis_p.port);
    redisReply *r = cmd(d, "CLIENT LIST");
    long q = -1;
    const char *p = strstr(r->str, "cmd=blpop");
    if (p != NULL) {
        while (p > r->str && p[-1] != '\n')
            p--;
        const char *b = strstr(p, " qbuf=");
        if (b != NULL)
            q = strtol(b + 6, NULL, 10);
    }
    freeReplyObject(r);
    redisFree(d);
    return q;
}

/* Requests that owe no reply (CLIENT REPLY OFF) behind one whose reply does
 * not come (BLPOP k 0) cost sluice nothing each: 200,000 SETNAMEs (8.6 MB)
 * leave its memory where it was (it kept an entry per request, about 200
 * bytes, without bound); the name is still the last one once they ran. */
static void test_unanswered_bounded(void **state)
{
    (void)state;
    int fd = th_connect(pport);
    assert_true(fd >= 0);
    static const char head[] = "*3\r\n$5\r\nBLPOP\r\n$5\r\nub:q0\r\n$1\r\n0\r\n"
                               "*3\r\n$6\r\nCLIENT\r\n$5\r\nREPLY\r\n$3\r\nOFF\r\n";
    static const char one[] = "*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$4\r\nabcd\r\n";
    static const char last[] = "*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$4\r\nlast\r\n"
                               "*3\r\n$6\r\nCLIENT\r\n$5\r\nREPLY\r\n$2\r\nON\r\n"
                               "*2\r\n$6\r\nCLIENT\r\n$7\r\nGETNAME\r\n";
    assert_int_equal(th_write_all(fd, head, sizeof(head) - 1), 0);
    for (uint64_t end = th_now_ms() + 10000; upstream_blocked() < 1 && th_now_ms() < end;)
        usleep(10000);
    assert_int_equal(upstream_blocked(), 1);
    long before = th_rss_kb(sluice_p.pid);
    enum { N = 200000, PER = 1000 };
    static char chunk[PER * (sizeof(one) - 1)];
    for (int i = 0; i < PER; i++)
        memcpy(chunk + i * (sizeof(one) - 1), one, sizeof(one) - 1);
    for (int i = 0; i < N / PER; i++)
        assert_int_equal(th_write_all(fd, chunk, sizeof(chunk)), 0);
    assert_int_equal(th_write_all(fd, last, sizeof(last) - 1), 0);
    /* every request has gone through sluice: the upstream holds them all */
    long want = (long)(N * (sizeof(one) - 1) + sizeof(last) - 1);
    for (uint64_t end = th_now_ms() + 20000; blocked_qbuf() < want && th_now_ms() < end;)
        usleep(10000);
    assert_true(blocked_qbuf() >= want);
    long after = th_rss_kb(sluice_p.pid);
    if (after - before > 8192)
        fprintf(stderr, "sluice grew from %ld to %ld KiB\n", before, after);
    /* Under AddressSanitizer (make check) freed memory stays resident in
     * its quarantine (256 MB by default), so the bound means nothing
     * there; make test checks it. */
    if (getenv("ASAN_OPTIONS") == NULL)
        assert_true(after - before <= 8192);
    redisContext *b = conn(pport);
    redisReply *r = cmd(b, "RPUSH ub:q0 x");
    freeReplyObject(r);
    redisFree(b);
    static const char want_r[] = "*2\r\n$5\r\nub:q0\r\n$1\r\nx\r\n+OK\r\n$4\r\nlast\r\n";
    assert_int_equal(th_expect(fd, want_r, sizeof(want_r) - 1, 10000), 0);
    close(fd);
}

/* Past upstream_pool_pinned a client waits upstream_pool_pin_wait, then
 * gets an error in its request's place; both are counted. */
static void test_pin_cap(void **state)
{
    (void)state;
    struct th_proc s2;
    int port = th_free_port(), admin = th_free_port();
    assert_int_equal(start_pooled(&s2, redis_p.port, port, admin,
                                  "upstream_pool_pinned = 1\nupstream_pool_pin_wait = 50ms\n"),
                     0);
    redisContext *a = conn(port), *b = conn(port);
    expect_str(a, "OK", "MULTI");
    expect_str(b, "ERR sluice: too many clients hold an upstream connection of their own",
               "MULTI");
    expect_str(b, "PONG", "PING"); /* b itself goes on, pooled */
    assert_int_equal(th_metric(admin, "sluice_pool_pin_refused_total{listener=\"p\"}"), 1);
    assert_int_equal(th_metric(admin, "sluice_pool_pin_waits_total{listener=\"p\"}"), 1);
    assert_int_equal(th_metric(admin, "sluice_pool_pinned_connections{listener=\"p\"}"), 1);
    redisReply *r = cmd(a, "EXEC");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    expect_str(b, "OK", "MULTI"); /* a gave its connection back */
    expect_str(b, "OK", "DISCARD");
    redisFree(a);
    redisFree(b);
    assert_int_equal(th_stop(&s2), 0);
}

/* A client that does not read its replies is closed past
 * upstream_pool_client_buffer; the client sharing its connection goes on. */
static void test_slow_reader(void **state)
{
    (void)state;
    struct th_proc s2;
    int port = th_free_port(), admin = th_free_port();
    assert_int_equal(start_pooled(&s2, redis_p.port, port, admin,
                                  "upstream_pool_client_buffer = 1mb\n"),
                     0);
    redisContext *d = conn(redis_p.port);
    static char big[512 * 1024];
    redisReply *r = cmd(d, "SET slow:big %b", big, sizeof(big));
    freeReplyObject(r);
    redisFree(d);
    /* the slow one: a small receive buffer, 200 GETs of 512 KiB, never read */
    int fd = th_connect(port);
    assert_true(fd >= 0);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    static const char get[] = "*2\r\n$3\r\nGET\r\n$8\r\nslow:big\r\n";
    /* sluice may close it before the last GET is written (that is what
     * is tested): a write failing then ends the sending, not the test */
    for (int i = 0; i < 200; i++)
        if (th_write_all(fd, get, sizeof(get) - 1) < 0)
            break;
    assert_int_equal(th_metric_wait(admin, "sluice_pool_slow_clients_closed_total{listener=\"p\"}", 1,
                                    TH_MS),
                     0);
    redisContext *b = conn(port);
    expect_str(b, "PONG", "PING");
    redisFree(b);
    close(fd);
    assert_int_equal(th_stop(&s2), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared),
        cmocka_unit_test(test_multi_pins),
        cmocka_unit_test(test_select_own),
        cmocka_unit_test(test_auth_user),
        cmocka_unit_test(test_blocking),
        cmocka_unit_test(test_eof_blocked),
        cmocka_unit_test(test_local_client),
        cmocka_unit_test(test_local_arity),
        cmocka_unit_test(test_local_options),
        cmocka_unit_test(test_local_subscribed),
        cmocka_unit_test(test_local_after_hello),
        cmocka_unit_test(test_local_names_pinned),
        cmocka_unit_test(test_local_hello_in_multi),
        cmocka_unit_test(test_exec_without_multi_pipelined),
        cmocka_unit_test(test_reset_unpins),
        cmocka_unit_test(test_hold_after_refused),
        cmocka_unit_test(test_aborted_exec_unpins),
        cmocka_unit_test(test_local_name_unanswered),
        cmocka_unit_test(test_push_inside_exec),
        cmocka_unit_test(test_local_info_resp3),
        cmocka_unit_test(test_script_kill),
        cmocka_unit_test(test_silent_then_protocol_error),
        cmocka_unit_test(test_big_request),
        cmocka_unit_test(test_resp3),
        cmocka_unit_test(test_upstream_killed),
        cmocka_unit_test(test_unanswered_bounded),
        cmocka_unit_test(test_pin_cap),
        cmocka_unit_test(test_slow_reader),
    };
    const char *only = getenv("POOL_ONLY");
    if (only != NULL)
        cmocka_set_test_filter(only);
    signal(SIGPIPE, SIG_IGN); /* a write to a client sluice closed fails, not kills */
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

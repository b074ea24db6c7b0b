/* sluice integration tests — RESP through one resp listener.
 *
 * One redis-server and one sluice (listener r in front of it) are shared by
 * every test of this file: none of them kills anything. Byte-exact checks use
 * raw sockets; where it helps, the same bytes are also sent to Redis directly
 * and the two transcripts must be identical (sluice is transparent). After
 * each test sluice must still be running. */
#include <setjmp.h>
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

static struct th_proc redis_p, sluice_p;
static int sport; /* sluice's listener */

static int group_setup(void **state)
{
    (void)state;
    /* DEBUG PROTOCOL gives every RESP3 type on demand. */
    return th_pair_start(&redis_p, &sluice_p, &sport, "protocol = resp\nidle_timeout = 300s\n",
                         "--enable-debug-command", "yes");
}

static int group_teardown(void **state)
{
    (void)state;
    return th_pair_stop(&redis_p, &sluice_p);
}

/* After each test: sluice must not have died on the way. */
static int check_alive(void **state)
{
    (void)state;
    return th_alive_or_report(&sluice_p);
}

static redisContext *hconn(int port)
{
    struct timeval tv = { 10, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    redisSetTimeout(c, tv);
    return c;
}

static void expect_status(redisReply *r, const char *s)
{
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    assert_string_equal(r->str, s);
    freeReplyObject(r);
}

static void expect_str(redisReply *r, const char *s)
{
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, s);
    freeReplyObject(r);
}

static void expect_int(redisReply *r, long long v)
{
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->integer, v);
    freeReplyObject(r);
}

static void ping_ok(redisContext *c)
{
    expect_status(redisCommand(c, "PING"), "PONG");
}

/* Sends <in> once to Redis directly and once through sluice, each on a new
 * connection read until it closes: both must be exactly <want>. */
static int same_as_redis_ok(const char *in, size_t inlen, const char *want, size_t wantlen)
{
    int ports[2] = { redis_p.port, sport };
    int ok[2] = { 0, 0 };
    for (int i = 0; i < 2; i++) {
        size_t n = 0;
        int eof = 0;
        char *out = th_transcript(ports[i], in, inlen, &n, TH_MS, &eof);
        if (out == NULL)
            continue;
        ok[i] = eof && n == wantlen && memcmp(out, want, n) == 0;
        if (!ok[i]) {
            fprintf(stderr, "%s:\n", i == 0 ? "redis directly" : "through sluice");
            th_dump("expected (then EOF)", want, wantlen);
            th_dump(eof ? "received (then EOF)" : "received (no EOF)", out, n);
        }
        free(out);
    }
    /* The expectation is what Redis does, and sluice must do the same. */
    return ok[0] && ok[1];
}

static void same_as_redis(const char *in, size_t inlen, const char *want, size_t wantlen)
{
    assert_true(same_as_redis_ok(in, inlen, want, wantlen));
}
#define SAME_AS_REDIS(in, want) same_as_redis((in), sizeof(in) - 1, (want), sizeof(want) - 1)

/* ---- 1. pipelining ------------------------------------------------------------ */

/* 10,000 commands appended before the first reply is read (more than the
 * 8192 owed replies after which sluice stops reading): every reply comes
 * back, in order, with the value of its own command. */
static void test_pipeline_10k(void **state)
{
    (void)state;
    redisContext *c = hconn(sport);
    enum { N = 10000 };
    for (int i = 0; i < N; i++) {
        switch (i % 3) {
        case 0: redisAppendCommand(c, "ECHO e%d", i); break;
        case 1: redisAppendCommand(c, "SET pipe:%d v%d", i, i); break;
        default: redisAppendCommand(c, "GET pipe:%d", i - 1); break;
        }
    }
    char want[32];
    for (int i = 0; i < N; i++) {
        redisReply *r = NULL;
        assert_int_equal(redisGetReply(c, (void **)&r), REDIS_OK);
        switch (i % 3) {
        case 0:
            snprintf(want, sizeof(want), "e%d", i);
            expect_str(r, want);
            break;
        case 1:
            expect_status(r, "OK");
            break;
        default:
            snprintf(want, sizeof(want), "v%d", i - 1);
            expect_str(r, want);
            break;
        }
    }
    ping_ok(c);
    redisFree(c);
}

/* One raw write of 3,000 commands plus an 8 MB value streamed through, then
 * QUIT: the same bytes as from Redis itself. */
static void test_pipeline_raw_big_value(void **state)
{
    (void)state;
    size_t vlen = 8u << 20, cap = vlen + 200000;
    char *in = malloc(cap), *want = malloc(cap);
    assert_non_null(in);
    assert_non_null(want);
    size_t n = 0, w = 0;
    for (int i = 0; i < 3000; i++) {
        n += (size_t)snprintf(in + n, cap - n, "*2\r\n$4\r\nINCR\r\n$6\r\nrawctr\r\n");
        w += (size_t)snprintf(want + w, cap - w, ":%d\r\n", i + 1);
    }
    n += (size_t)snprintf(in + n, cap - n, "*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$%zu\r\n", vlen);
    for (size_t i = 0; i < vlen; i++)
        in[n + i] = (char)('a' + i % 26);
    n += vlen;
    n += (size_t)snprintf(in + n, cap - n, "\r\n*2\r\n$3\r\nGET\r\n$3\r\nbig\r\nQUIT\r\n");
    w += (size_t)snprintf(want + w, cap - w, "+OK\r\n$%zu\r\n", vlen);
    for (size_t i = 0; i < vlen; i++)
        want[w + i] = (char)('a' + i % 26);
    w += vlen;
    w += (size_t)snprintf(want + w, cap - w, "\r\n+OK\r\n");

    int fd = th_connect(sport);
    assert_true(fd >= 0);
    assert_int_equal(th_write_all(fd, in, n), 0);
    assert_int_equal(th_expect_close(fd, want, w, 20000), 0);
    close(fd);
    free(in);
    free(want);
}

/* ---- 2. transactions ---------------------------------------------------------- */

static void test_multi_exec(void **state)
{
    (void)state;
    redisContext *c = hconn(sport);
    freeReplyObject(redisCommand(c, "DEL tx:a"));
    expect_status(redisCommand(c, "MULTI"), "OK");
    expect_status(redisCommand(c, "SET tx:a 1"), "QUEUED");
    expect_status(redisCommand(c, "INCR tx:a"), "QUEUED");
    expect_status(redisCommand(c, "GET tx:a"), "QUEUED");
    redisReply *r = redisCommand(c, "EXEC");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 3);
    assert_int_equal(r->element[0]->type, REDIS_REPLY_STATUS);
    assert_string_equal(r->element[0]->str, "OK");
    assert_int_equal(r->element[1]->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->element[1]->integer, 2);
    assert_int_equal(r->element[2]->type, REDIS_REPLY_STRING);
    assert_string_equal(r->element[2]->str, "2");
    freeReplyObject(r);

    /* The same transaction pipelined in one write, raw. */
    int fd = th_connect(sport);
    assert_true(fd >= 0);
    TH_SEND(fd, "MULTI\r\nSET tx:b x\r\nAPPEND tx:b y\r\nEXEC\r\nGET tx:b\r\n");
    TH_EXPECT(fd, "+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n+OK\r\n:2\r\n$2\r\nxy\r\n");

    /* A command refused at queue time aborts the transaction at EXEC. */
    TH_SEND(fd, "MULTI\r\nNOSUCHCMD\r\nEXEC\r\n");
    TH_EXPECT(fd, "+OK\r\n-ERR unknown command 'NOSUCHCMD', with args beginning with: \r\n"
               "-EXECABORT Transaction discarded because of previous errors.\r\n");
    assert_true(th_quiet(fd, 200));
    close(fd);

    /* WATCH: a key changed by another client makes EXEC return nil. */
    redisContext *o = hconn(sport);
    expect_status(redisCommand(c, "WATCH tx:a"), "OK");
    expect_status(redisCommand(o, "SET tx:a 99"), "OK");
    expect_status(redisCommand(c, "MULTI"), "OK");
    expect_status(redisCommand(c, "SET tx:a 3"), "QUEUED");
    r = redisCommand(c, "EXEC");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_NIL);
    freeReplyObject(r);
    expect_str(redisCommand(c, "GET tx:a"), "99");
    redisFree(o);
    redisFree(c);
}

static void test_discard(void **state)
{
    (void)state;
    redisContext *c = hconn(sport);
    freeReplyObject(redisCommand(c, "DEL tx:d"));
    expect_status(redisCommand(c, "MULTI"), "OK");
    expect_status(redisCommand(c, "SET tx:d 1"), "QUEUED");
    expect_status(redisCommand(c, "DISCARD"), "OK");
    redisReply *r = redisCommand(c, "GET tx:d");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_NIL);
    freeReplyObject(r);
    r = redisCommand(c, "EXEC");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_string_equal(r->str, "ERR EXEC without MULTI");
    freeReplyObject(r);
    ping_ok(c);
    redisFree(c);
}

/* ---- 3. blocking commands ------------------------------------------------------ */

static void test_blpop_timeout(void **state)
{
    (void)state;
    int fd = th_connect(sport);
    assert_true(fd >= 0);
    uint64_t t0 = th_now_ms();
    TH_SEND(fd, "BLPOP blk:empty 1\r\n");
    TH_EXPECT(fd, "*-1\r\n");
    uint64_t took = th_now_ms() - t0;
    assert_true(took >= 900);
    assert_true(took < 5000);
    /* Still usable, in order. */
    TH_SEND(fd, "PING\r\nECHO after\r\n");
    TH_EXPECT(fd, "+PONG\r\n$5\r\nafter\r\n");
    close(fd);
}

static void test_blpop_unblocked(void **state)
{
    (void)state;
    redisContext *b = hconn(sport);
    freeReplyObject(redisCommand(b, "DEL blk:q"));
    int fd = th_connect(sport);
    assert_true(fd >= 0);
    TH_SEND(fd, "BLPOP blk:q 30\r\n");
    /* It must reach Redis and block there before the push. */
    assert_int_equal(th_redis_wait_info(redis_p.port, "blocked_clients", 1, TH_MS), 0);
    assert_true(th_quiet(fd, 100));
    uint64_t t0 = th_now_ms();
    expect_int(redisCommand(b, "LPUSH blk:q hello"), 1);
    TH_EXPECT(fd, "*2\r\n$5\r\nblk:q\r\n$5\r\nhello\r\n");
    assert_true(th_now_ms() - t0 < 10000); /* the push, not the 30 s timeout */
    TH_SEND(fd, "PING\r\n");
    TH_EXPECT(fd, "+PONG\r\n");
    close(fd);
    redisFree(b);
}

/* ---- 4. pub/sub ------------------------------------------------------------------ */

static void test_pubsub(void **state)
{
    (void)state;
    int s = th_connect(sport);
    assert_true(s >= 0);
    redisContext *p = hconn(sport);

    TH_SEND(s, "SUBSCRIBE ps:1 ps:2\r\n");
    TH_EXPECT(s, "*3\r\n$9\r\nsubscribe\r\n$4\r\nps:1\r\n:1\r\n"
              "*3\r\n$9\r\nsubscribe\r\n$4\r\nps:2\r\n:2\r\n");
    expect_int(redisCommand(p, "PUBLISH ps:1 hello"), 1);
    TH_EXPECT(s, "*3\r\n$7\r\nmessage\r\n$4\r\nps:1\r\n$5\r\nhello\r\n");

    /* 200 messages, pipelined by the publisher: all arrive, in order. */
    for (int i = 0; i < 200; i++)
        redisAppendCommand(p, "PUBLISH ps:2 m%03d", i);
    for (int i = 0; i < 200; i++) {
        redisReply *r = NULL;
        assert_int_equal(redisGetReply(p, (void **)&r), REDIS_OK);
        expect_int(r, 1);
    }
    for (int i = 0; i < 200; i++) {
        char want[64];
        int n = snprintf(want, sizeof(want), "*3\r\n$7\r\nmessage\r\n$4\r\nps:2\r\n$4\r\nm%03d\r\n", i);
        assert_int_equal(th_expect(s, want, (size_t)n, TH_MS), 0);
    }

    TH_SEND(s, "PSUBSCRIBE news.*\r\n");
    TH_EXPECT(s, "*3\r\n$10\r\npsubscribe\r\n$6\r\nnews.*\r\n:3\r\n");
    expect_int(redisCommand(p, "PUBLISH news.tech hi"), 1);
    TH_EXPECT(s, "*4\r\n$8\r\npmessage\r\n$6\r\nnews.*\r\n$9\r\nnews.tech\r\n$2\r\nhi\r\n");

    /* PING in subscribed mode (RESP2: an array). */
    TH_SEND(s, "PING\r\nPING x\r\n");
    TH_EXPECT(s, "*2\r\n$4\r\npong\r\n$0\r\n\r\n*2\r\n$4\r\npong\r\n$1\r\nx\r\n");

    TH_SEND(s, "UNSUBSCRIBE ps:1\r\n");
    TH_EXPECT(s, "*3\r\n$11\r\nunsubscribe\r\n$4\r\nps:1\r\n:2\r\n");
    expect_int(redisCommand(p, "PUBLISH ps:1 nobody"), 0);
    expect_int(redisCommand(p, "PUBLISH ps:2 still"), 1);
    TH_EXPECT(s, "*3\r\n$7\r\nmessage\r\n$4\r\nps:2\r\n$5\r\nstill\r\n");

    TH_SEND(s, "PUNSUBSCRIBE\r\n");
    TH_EXPECT(s, "*3\r\n$12\r\npunsubscribe\r\n$6\r\nnews.*\r\n:1\r\n");
    TH_SEND(s, "UNSUBSCRIBE\r\n");
    TH_EXPECT(s, "*3\r\n$11\r\nunsubscribe\r\n$4\r\nps:2\r\n:0\r\n");

    /* Out of subscribed mode: an ordinary connection again. */
    TH_SEND(s, "SET ps:k 1\r\nGET ps:k\r\nPING\r\n");
    TH_EXPECT(s, "+OK\r\n$1\r\n1\r\n+PONG\r\n");
    assert_true(th_quiet(s, 200));
    close(s);
    redisFree(p);
}

/* Malformed input from a subscribed client: Redis sends the subscribe
 * confirmation, then the error. */
static void test_pubsub_then_protocol_error(void **state)
{
    (void)state;
    SAME_AS_REDIS("SUBSCRIBE pe:1\r\n*1\r\n$abc\r\n",
                  "*3\r\n$9\r\nsubscribe\r\n$4\r\npe:1\r\n:1\r\n"
                  "-ERR Protocol error: invalid bulk length\r\n");
}

/* The same after the client has left subscribed mode again: every reply
 * before the garbage comes first. */
static void test_unsubscribed_then_protocol_error(void **state)
{
    (void)state;
    SAME_AS_REDIS("SUBSCRIBE pe:2\r\nUNSUBSCRIBE pe:2\r\nECHO x\r\n*1\r\n$abc\r\n",
                  "*3\r\n$9\r\nsubscribe\r\n$4\r\npe:2\r\n:1\r\n"
                  "*3\r\n$11\r\nunsubscribe\r\n$4\r\npe:2\r\n:0\r\n"
                  "$1\r\nx\r\n"
                  "-ERR Protocol error: invalid bulk length\r\n");
}

/* ---- 5. RESP3 ------------------------------------------------------------------ */

static void expect_reply(struct th_conn *c, const char *want)
{
    char *r = th_conn_reply(c, TH_MS);
    if (r == NULL || strcmp(r, want) != 0) {
        th_dump("expected reply", want, strlen(want));
        th_dump("received reply", r ? r : "", r ? strlen(r) : 0);
    }
    assert_non_null(r);
    assert_string_equal(r, want);
    free(r);
}

static void hello3(struct th_conn *c)
{
    assert_int_equal(th_conn_send(c, "HELLO 3\r\n"), 0);
    char *r = th_conn_reply(c, TH_MS);
    assert_non_null(r);
    assert_int_equal(r[0], '%'); /* a RESP3 map */
    assert_non_null(strstr(r, "$5\r\nproto\r\n:3\r\n"));
    assert_non_null(strstr(r, "$6\r\nserver\r\n$5\r\nredis\r\n"));
    free(r);
}

static void test_resp3_types(void **state)
{
    (void)state;
    struct th_conn c;
    assert_int_equal(th_conn_open(&c, sport), 0);
    hello3(&c);
    assert_int_equal(th_conn_send(&c, "DEL r3:h r3:s r3:z\r\nHSET r3:h f v\r\nHGETALL r3:h\r\n"
                                      "SADD r3:s a\r\nSMEMBERS r3:s\r\nGET r3:none\r\n"
                                      "ZADD r3:z 1.5 m\r\nZSCORE r3:z m\r\n"),
                     0);
    expect_reply(&c, ":0\r\n");
    expect_reply(&c, ":1\r\n");
    expect_reply(&c, "%1\r\n$1\r\nf\r\n$1\r\nv\r\n");
    expect_reply(&c, ":1\r\n");
    expect_reply(&c, "~1\r\n$1\r\na\r\n");
    expect_reply(&c, "_\r\n");
    expect_reply(&c, ":1\r\n");
    expect_reply(&c, ",1.5\r\n");
    assert_int_equal(c.len, 0);
    assert_true(th_quiet(c.fd, 200));
    th_conn_close(&c);
}

/* Client-side caching: an invalidation push (not an answer to any request)
 * arrives, and later requests still get their own replies, in order. */
static void test_resp3_tracking_push(void **state)
{
    (void)state;
    struct th_conn c;
    assert_int_equal(th_conn_open(&c, sport), 0);
    hello3(&c);
    assert_int_equal(th_conn_send(&c, "SET r3:tk 1\r\nCLIENT TRACKING on\r\nGET r3:tk\r\n"), 0);
    expect_reply(&c, "+OK\r\n");
    expect_reply(&c, "+OK\r\n");
    expect_reply(&c, "$1\r\n1\r\n");

    redisContext *o = hconn(sport);
    expect_status(redisCommand(o, "SET r3:tk 2"), "OK");
    expect_reply(&c, ">2\r\n$10\r\ninvalidate\r\n*1\r\n$5\r\nr3:tk\r\n");

    assert_int_equal(th_conn_send(&c, "PING\r\nGET r3:tk\r\nECHO e\r\n"), 0);
    expect_reply(&c, "+PONG\r\n");
    expect_reply(&c, "$1\r\n2\r\n");
    expect_reply(&c, "$1\r\ne\r\n");

    /* Tracking again, then another client's write while replies are owed:
     * the push may come between them; each reply still arrives once. */
    expect_status(redisCommand(o, "SET r3:tk2 a"), "OK");
    assert_int_equal(th_conn_send(&c, "GET r3:tk2\r\n"), 0);
    expect_reply(&c, "$1\r\na\r\n");
    redisAppendCommand(o, "SET r3:tk2 b");
    assert_int_equal(th_conn_send(&c, "ECHO 1\r\nECHO 2\r\nECHO 3\r\n"), 0);
    redisReply *r = NULL;
    assert_int_equal(redisGetReply(o, (void **)&r), REDIS_OK);
    expect_status(r, "OK");
    int echoes = 0, pushes = 0;
    while (echoes < 3) {
        char *x = th_conn_reply(&c, TH_MS);
        assert_non_null(x);
        if (x[0] == '>') {
            assert_string_equal(x, ">2\r\n$10\r\ninvalidate\r\n*1\r\n$6\r\nr3:tk2\r\n");
            pushes++;
        } else {
            char want[32];
            snprintf(want, sizeof(want), "$1\r\n%d\r\n", ++echoes);
            assert_string_equal(x, want);
        }
        free(x);
    }
    if (pushes == 0)
        expect_reply(&c, ">2\r\n$10\r\ninvalidate\r\n*1\r\n$6\r\nr3:tk2\r\n");
    assert_true(pushes <= 1);
    redisFree(o);
    th_conn_close(&c);
}

/* A push caused by the client's own write, then garbage: byte for byte what
 * Redis sends, the error after every reply and push. */
static char *tracking_transcript(int port, size_t *n)
{
    struct th_conn c;
    assert_int_equal(th_conn_open(&c, port), 0);
    hello3(&c);
    assert_int_equal(th_conn_send(&c, "SET r3:own 1\r\nCLIENT TRACKING on\r\n"), 0);
    expect_reply(&c, "+OK\r\n");
    expect_reply(&c, "+OK\r\n");
    assert_int_equal(th_conn_send(&c, "GET r3:own\r\nSET r3:own 2\r\nGET r3:own\r\n*1\r\n$abc\r\n"), 0);
    char *out = malloc(4096);
    assert_non_null(out);
    int eof = 0;
    *n = th_read_until_eof(c.fd, out, 4096, TH_MS, &eof);
    assert_true(eof);
    th_conn_close(&c);
    return out;
}

static void test_resp3_push_then_protocol_error(void **state)
{
    (void)state;
    static const char want[] = "$1\r\n1\r\n+OK\r\n>2\r\n$10\r\ninvalidate\r\n*1\r\n$6\r\nr3:own\r\n"
                               "$1\r\n2\r\n-ERR Protocol error: invalid bulk length\r\n";
    size_t n1 = 0, n2 = 0;
    char *direct = tracking_transcript(redis_p.port, &n1);
    char *proxied = tracking_transcript(sport, &n2);
    if (n1 != n2 || memcmp(direct, proxied, n1) != 0) {
        th_dump("redis directly", direct, n1);
        th_dump("through sluice", proxied, n2);
    }
    assert_int_equal(n1, n2);
    assert_memory_equal(direct, proxied, n1);
    assert_int_equal(n2, sizeof(want) - 1);
    assert_memory_equal(proxied, want, n2);
    free(direct);
    free(proxied);
}

/* Garbage behind requests whose replies Redis does not send (CLIENT REPLY
 * OFF, or the one SKIP covers): what those requests made Redis push to the
 * client itself (the message a PUBLISH delivers to its own subscription)
 * still comes before the close, as it does from Redis, which runs them
 * before it reads the garbage. No reply is owed, so sluice has no answer
 * to wait for: it must learn from the upstream that they ran. */
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
        struct th_conn c;
        assert_int_equal(th_conn_open(&c, sport), 0);
        hello3(&c);
        assert_int_equal(th_conn_send(&c, in[k]), 0);
        assert_int_equal(th_expect_close(c.fd, want[k], strlen(want[k]), TH_MS), 0);
        th_conn_close(&c);
    }
}

/* A PUBLISH in MULTI to the client's own subscription: Redis 7.0 writes the
 * message in the middle of EXEC's reply, which still counts one element
 * per command; the garbage's error comes after the whole of it (the
 * differential fuzzer's seed 19 round 4). */
static void test_push_inside_exec_then_protocol_error(void **state)
{
    (void)state;
    static const char want[] = ">3\r\n$9\r\nsubscribe\r\n$4\r\npe:5\r\n:1\r\n+OK\r\n+QUEUED\r\n"
                               "*1\r\n>3\r\n$7\r\nmessage\r\n$4\r\npe:5\r\n$1\r\nm\r\n:1\r\n"
                               "-ERR Protocol error: invalid bulk length\r\n";
    int ports[2] = { redis_p.port, sport };
    for (int k = 0; k < 2; k++) {
        struct th_conn c;
        assert_int_equal(th_conn_open(&c, ports[k]), 0);
        hello3(&c);
        assert_int_equal(th_conn_send(&c, "SUBSCRIBE pe:5\r\nMULTI\r\nPUBLISH pe:5 m\r\nEXEC\r\n"
                                          "*1\r\n$04\r\nPING\r\n"), 0);
        assert_int_equal(th_expect_close(c.fd, want, sizeof(want) - 1, TH_MS), 0);
        th_conn_close(&c);
    }
}

/* An AUTH or HELLO queued in MULTI is judged by its element of EXEC's reply.
 * A DISCARD framed while that reply is still passing must not take the
 * judge from under it: sluice crashed (a NULL pick) when the reply went on
 * in a later read (the pooled differential fuzzer's seed 14 round 41, a
 * 400 KB ECHO in the transaction). The client reads the start of a 32 MB
 * reply, sends DISCARD, then reads on: more than all the socket buffers on
 * the way hold, so the DISCARD is framed while the reply passes. */
static void test_hello_in_multi_reply_in_parts(void **state)
{
    (void)state;
    enum { BIG = 32 << 20 };
    char *big = malloc(BIG);
    assert_non_null(big);
    memset(big, 'v', BIG);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    int rcv = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)sport) };
    a.sin_addr.s_addr = htonl(0x7f000001);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    char head[128];
    int hl = snprintf(head, sizeof(head), "MULTI\r\nHELLO 2\r\n*2\r\n$4\r\nECHO\r\n$%d\r\n", BIG);
    assert_int_equal(th_write_all(fd, head, (size_t)hl), 0);
    assert_int_equal(th_write_all(fd, big, BIG), 0);
    TH_SEND(fd, "\r\nEXEC\r\n");
    static const char start[] = "+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n";
    TH_EXPECT(fd, start);
    TH_SEND(fd, "DISCARD\r\n");
    static const char tail[] = "\r\n-ERR DISCARD without MULTI\r\n";
    char last[sizeof(tail)] = "";
    size_t got = 0, kept = 0;
    for (uint64_t end = th_now_ms() + 60000; th_now_ms() < end;) {
        size_t k = th_read_n(fd, big, 65536, 1000);
        if (k == 0)
            break;
        got += k;
        /* the last bytes seen, to find the DISCARD's error at the end */
        size_t take = k < sizeof(tail) - 1 ? k : sizeof(tail) - 1;
        size_t keep = kept + take > sizeof(tail) - 1 ? sizeof(tail) - 1 - take : kept;
        memmove(last, last + kept - keep, keep);
        memcpy(last + keep, big + k - take, take);
        kept = keep + take;
        if (kept == sizeof(tail) - 1 && memcmp(last, tail, kept) == 0)
            break;
    }
    free(big);
    if (kept != sizeof(tail) - 1 || memcmp(last, tail, kept) != 0)
        fail_msg("EXEC's reply and the DISCARD's error did not come whole (%zu bytes)", got);
    assert_true(got > (size_t)BIG);
    TH_SEND(fd, "PING\r\n");
    TH_EXPECT(fd, "+PONG\r\n");
    close(fd);
}

/* Every RESP3 reply type, pipelined, then garbage: the same bytes as from
 * Redis, so the attribute (which precedes its reply) and the push (which
 * answers nothing) were not counted as replies - or the error would have
 * come too early. */
static char *debug_protocol_transcript(int port, size_t *n)
{
    struct th_conn c;
    assert_int_equal(th_conn_open(&c, port), 0);
    hello3(&c);
    assert_int_equal(th_conn_send(&c, "DEBUG PROTOCOL attrib\r\nDEBUG PROTOCOL push\r\n"
                                      "DEBUG PROTOCOL bignum\r\nDEBUG PROTOCOL verbatim\r\n"
                                      "DEBUG PROTOCOL map\r\nDEBUG PROTOCOL set\r\n"
                                      "DEBUG PROTOCOL double\r\nDEBUG PROTOCOL true\r\n"
                                      "DEBUG PROTOCOL false\r\nDEBUG PROTOCOL null\r\n"
                                      "DEBUG PROTOCOL attrib\r\n*1\r\n$abc\r\n"),
                     0);
    char *out = malloc(8192);
    assert_non_null(out);
    int eof = 0;
    *n = th_read_until_eof(c.fd, out, 8192, TH_MS, &eof);
    assert_true(eof);
    th_conn_close(&c);
    return out;
}

static void test_resp3_all_types(void **state)
{
    (void)state;
    size_t n1 = 0, n2 = 0;
    char *direct = debug_protocol_transcript(redis_p.port, &n1);
    char *proxied = debug_protocol_transcript(sport, &n2);
    if (n1 != n2 || memcmp(direct, proxied, n1) != 0) {
        th_dump("redis directly", direct, n1);
        th_dump("through sluice", proxied, n2);
    }
    assert_int_equal(n1, n2);
    assert_memory_equal(direct, proxied, n1);
    /* and it really had them all */
    assert_non_null(strstr(proxied, "|1\r\n"));
    assert_non_null(strstr(proxied, ">2\r\n"));
    assert_non_null(strstr(proxied, "(1234567999999999999999999999999999999\r\n"));
    assert_non_null(strstr(proxied, "=29\r\ntxt:"));
    assert_non_null(strstr(proxied, "#t\r\n#f\r\n_\r\n"));
    static const char tail[] = "-ERR Protocol error: invalid bulk length\r\n";
    assert_true(n2 > sizeof(tail));
    assert_memory_equal(proxied + n2 - (sizeof(tail) - 1), tail, sizeof(tail) - 1);
    free(direct);
    free(proxied);
}

/* ---- MONITOR --------------------------------------------------------------------- */

static void test_monitor(void **state)
{
    (void)state;
    struct th_conn m;
    assert_int_equal(th_conn_open(&m, sport), 0);
    assert_int_equal(th_conn_send(&m, "MONITOR\r\n"), 0);
    expect_reply(&m, "+OK\r\n");
    redisContext *o = hconn(sport);
    expect_status(redisCommand(o, "SET mon:k v1"), "OK");
    expect_status(redisCommand(o, "SET mon:k v2"), "OK");
    for (int i = 1; i <= 2; i++) {
        char *line = th_conn_reply(&m, TH_MS);
        assert_non_null(line);
        char want[64];
        snprintf(want, sizeof(want), "\"SET\" \"mon:k\" \"v%d\"\r\n", i);
        if (strstr(line, want) == NULL)
            th_dump("monitor line", line, strlen(line));
        assert_int_equal(line[0], '+');
        assert_non_null(strstr(line, want));
        free(line);
    }
    assert_int_equal(th_conn_send(&m, "QUIT\r\n"), 0);
    expect_reply(&m, "+OK\r\n");
    assert_int_equal(th_wait_eof(m.fd, TH_MS), 1);
    th_conn_close(&m);
    redisFree(o);
}

/* ---- half-close ---------------------------------------------------------------- */

/* Requests, then the client shuts its write side: the replies still come,
 * then EOF - as from Redis itself. */
static void test_client_half_close(void **state)
{
    (void)state;
    static const char in[] = "PING\r\nECHO x\r\nSET hc:k 1\r\nGET hc:k\r\n";
    static const char want[] = "+PONG\r\n$1\r\nx\r\n+OK\r\n$1\r\n1\r\n";
    int ports[2] = { redis_p.port, sport };
    for (int i = 0; i < 2; i++) {
        int fd = th_connect(ports[i]);
        assert_true(fd >= 0);
        TH_SEND(fd, in);
        assert_int_equal(shutdown(fd, SHUT_WR), 0);
        TH_EXPECT_CLOSE(fd, want);
        close(fd);
    }
}

/* ---- slow clients -------------------------------------------------------------- */

/* A request that arrives in pieces over seconds (sluice gives back the
 * parser state of connections idle for 2 s: not of one holding a partial
 * request), and a connection idle for seconds: nothing is lost. */
static void test_slow_request_and_idle_gaps(void **state)
{
    (void)state;
    int a = th_connect(sport), b = th_connect(sport);
    assert_true(a >= 0);
    assert_true(b >= 0);
    /* a: half a multibulk request; b: half an inline one (after a whole one). */
    TH_SEND(a, "*3\r\n$3\r\nSET\r\n$6\r\nslow:k\r\n$5\r\nab");
    TH_SEND(b, "ECHO one\r\nEC");
    TH_EXPECT(b, "$3\r\none\r\n");
    assert_true(th_quiet(a, 3200));
    assert_true(th_quiet(b, 10));
    TH_SEND(a, "cde\r\n");
    TH_EXPECT(a, "+OK\r\n");
    TH_SEND(b, "HO two\r\n");
    TH_EXPECT(b, "$3\r\ntwo\r\n");
    /* Both idle (nothing partial) for a while, then used again. */
    assert_true(th_quiet(a, 3200));
    assert_true(th_quiet(b, 10));
    TH_SEND(a, "GET slow:k\r\n");
    TH_EXPECT(a, "$5\r\nabcde\r\n");
    TH_SEND(b, "*2\r\n$4\r\nECHO\r\n$5\r\nthree\r\n");
    TH_EXPECT(b, "$5\r\nthree\r\n");
    close(a);
    close(b);
}

/* ---- 6. CLIENT REPLY ------------------------------------------------------------ */

static void test_client_reply(void **state)
{
    (void)state;
    int fd = th_connect(sport);
    assert_true(fd >= 0);
    TH_SEND(fd, "CLIENT REPLY OFF\r\nSET cr:a 1\r\nSET cr:b 2\r\nCLIENT REPLY ON\r\n");
    TH_EXPECT(fd, "+OK\r\n");
    TH_SEND(fd, "GET cr:a\r\n");
    TH_EXPECT(fd, "$1\r\n1\r\n");
    TH_SEND(fd, "CLIENT REPLY SKIP\r\nGET cr:a\r\nGET cr:b\r\n");
    TH_EXPECT(fd, "$1\r\n2\r\n");
    assert_true(th_quiet(fd, 300));

    /* SKIP while OFF changes nothing; ON answers. */
    TH_SEND(fd, "CLIENT REPLY OFF\r\nCLIENT REPLY SKIP\r\nGET cr:a\r\nCLIENT REPLY ON\r\nGET cr:b\r\n");
    TH_EXPECT(fd, "+OK\r\n$1\r\n2\r\n");
    assert_true(th_quiet(fd, 200));

    /* A normal pipeline after it. */
    char buf[4096];
    size_t n = 0;
    for (int i = 0; i < 100; i++)
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "ECHO %d\r\n", i);
    assert_int_equal(th_write_all(fd, buf, n), 0);
    for (int i = 0; i < 100; i++) {
        char want[32];
        int wl = snprintf(want, sizeof(want), "$%d\r\n%d\r\n", i < 10 ? 1 : 2, i);
        assert_int_equal(th_expect(fd, want, (size_t)wl, TH_MS), 0);
    }
    assert_true(th_quiet(fd, 200));
    close(fd);

    /* The whole dance against Redis itself, ending with QUIT. */
    SAME_AS_REDIS("CLIENT REPLY OFF\r\nSET cr:c 1\r\nCLIENT REPLY ON\r\nGET cr:c\r\n"
                  "CLIENT REPLY SKIP\r\nGET cr:c\r\nECHO y\r\nQUIT\r\n",
                  "+OK\r\n$1\r\n1\r\n$1\r\ny\r\n+OK\r\n");
}

/* ---- 7. inline commands ------------------------------------------------------- */

static void test_inline(void **state)
{
    (void)state;
    int fd = th_connect(sport);
    assert_true(fd >= 0);
    TH_SEND(fd, "PING\r\n");
    TH_EXPECT(fd, "+PONG\r\n");
    TH_SEND(fd, "SET in:x \"a b\"\r\n");
    TH_EXPECT(fd, "+OK\r\n");
    TH_SEND(fd, "GET in:x\r\n");
    TH_EXPECT(fd, "$3\r\na b\r\n");
    /* Mixed with multibulk in one write; a bare \n ends an inline line too,
     * an empty line gets no reply. */
    TH_SEND(fd, "*1\r\n$4\r\nPING\r\nECHO hi\r\n*2\r\n$4\r\nECHO\r\n$2\r\nyo\r\nPING\n\r\nECHO 'x y'\r\n");
    TH_EXPECT(fd, "+PONG\r\n$2\r\nhi\r\n$2\r\nyo\r\n+PONG\r\n$3\r\nx y\r\n");
    /* An inline command split over two writes. */
    TH_SEND(fd, "ECHO sp");
    assert_true(th_quiet(fd, 150));
    TH_SEND(fd, "lit\r\n");
    TH_EXPECT(fd, "$5\r\nsplit\r\n");
    assert_true(th_quiet(fd, 200));
    close(fd);

    SAME_AS_REDIS("SET in:y \"q\\x41\\n\"\r\nGET in:y\r\n*2\r\n$4\r\nECHO\r\n$1\r\nz\r\n  ECHO   spaced  \r\nQUIT\r\n",
                  "+OK\r\n$3\r\nqA\n\r\n$1\r\nz\r\n$6\r\nspaced\r\n+OK\r\n");
}

/* ---- 8. QUIT ------------------------------------------------------------------ */

static void test_quit(void **state)
{
    (void)state;
    int fd = th_connect(sport);
    assert_true(fd >= 0);
    TH_SEND(fd, "QUIT\r\n");
    TH_EXPECT_CLOSE(fd, "+OK\r\n");
    close(fd);
    /* Pipelined: what comes after QUIT is not answered. */
    SAME_AS_REDIS("PING\r\nQUIT\r\nPING\r\n", "+PONG\r\n+OK\r\n");
    /* Nothing after QUIT is framed: a malformed frame behind it is not
     * answered either (the differential fuzzer found the error sent). */
    SAME_AS_REDIS("QUIT\r\n*3\r\n$7\r\nPUBLISH\r*2\r\n", "+OK\r\n");
    /* A line too long under CLIENT REPLY SKIP: no word, as Redis. */
    {
        enum { LONG = 70000 };
        char *in = malloc(LONG + 64);
        int hn = snprintf(in, 64, "CLIENT REPLY SKIP\r\n*1\r\n$");
        memset(in + hn, '1', LONG);
        fd = th_connect(sport);
        assert_true(fd >= 0);
        assert_int_equal(th_write_all(fd, in, (size_t)hn + LONG), 0);
        assert_int_equal(th_expect_close(fd, "", 0, TH_MS), 0);
        close(fd);
        free(in);
    }
    redisContext *c = hconn(sport);
    expect_status(redisCommand(c, "QUIT"), "OK");
    redisFree(c);
}

/* ---- 11. malformed input ------------------------------------------------------ */

/* <garbage> after a valid pipeline in the same write: the pipeline's replies,
 * then Redis's error line, then EOF - the same as from Redis itself. Another
 * client (b) works before and after. */
static int malformed_ok(const char *garbage, size_t glen, const char *err)
{
    redisContext *b = hconn(sport);
    ping_ok(b);
    static const char pre[] = "PING\r\nSET mal:k 1\r\nGET mal:k\r\n";
    size_t inlen = sizeof(pre) - 1 + glen;
    char *in = malloc(inlen);
    assert_non_null(in);
    memcpy(in, pre, sizeof(pre) - 1);
    memcpy(in + sizeof(pre) - 1, garbage, glen);
    char want[256];
    int wl = snprintf(want, sizeof(want), "+PONG\r\n+OK\r\n$1\r\n1\r\n-ERR Protocol error: %s\r\n", err);
    int ok = same_as_redis_ok(in, inlen, want, (size_t)wl);
    free(in);
    redisReply *r = redisCommand(b, "GET mal:k");
    ok = ok && r != NULL && r->type == REDIS_REPLY_STRING && strcmp(r->str, "1") == 0;
    if (r != NULL)
        freeReplyObject(r);
    redisFree(b);
    return ok;
}

static void malformed(const char *garbage, size_t glen, const char *err)
{
    assert_true(malformed_ok(garbage, glen, err));
}

static void test_malformed_bulk_length(void **state)
{
    (void)state;
    malformed("*1\r\n$abc\r\n", 10, "invalid bulk length");
}

static void test_malformed_huge_bulk(void **state)
{
    (void)state;
    malformed("*1\r\n$999999999999\r\n", 19, "invalid bulk length");
}

static void test_malformed_long_inline(void **state)
{
    (void)state;
    size_t n = 70 * 1024;
    char *g = malloc(n);
    assert_non_null(g);
    memset(g, 'a', n);
    int ok = malformed_ok(g, n, "too big inline request");
    free(g);
    assert_true(ok);
}

static void test_malformed_type(void **state)
{
    (void)state;
    malformed("*2\r\n:1\r\n$1\r\nx\r\n", 15, "expected '$', got ':'");
}

static void test_malformed_quotes_and_count(void **state)
{
    (void)state;
    malformed("SET k \"abc\r\n", 12, "unbalanced quotes in request");
    malformed("*abc\r\n", 6, "invalid multibulk length");
}

/* A request big enough to be streamed upstream before it is complete, with
 * malformed input inside it (its third argument): the error, then EOF, as
 * from Redis; nothing may wait for a reply to the unfinished request. */
static void test_malformed_inside_big_request(void **state)
{
    (void)state;
    size_t vlen = 100000; /* more than one 64 KiB read */
    char *g = malloc(vlen + 64);
    assert_non_null(g);
    int hl = snprintf(g, 64, "*3\r\n$3\r\nSET\r\n$%zu\r\n", vlen);
    memset(g + hl, 'k', vlen);
    memcpy(g + (size_t)hl + vlen, "\r\n$abc\r\n", 9);
    int ok = malformed_ok(g, (size_t)hl + vlen + 9, "invalid bulk length");
    free(g);
    assert_true(ok);
}

/* Garbage behind two 8 MB replies: the error waits until both have passed
 * in full (each spans many of sluice's 64 KiB chunks). */
static void test_malformed_after_big_replies(void **state)
{
    (void)state;
    const size_t vlen = 8u << 20;
    char *v = malloc(vlen);
    assert_non_null(v);
    for (size_t i = 0; i < vlen; i++)
        v[i] = (char)('0' + i % 10);
    redisContext *c = hconn(sport);
    redisReply *r = redisCommand(c, "SET mal:big %b", v, vlen);
    expect_status(r, "OK");
    redisFree(c);

    static const char in[] = "GET mal:big\r\nGET mal:big\r\n*1\r\n$abc\r\n";
    static const char err[] = "-ERR Protocol error: invalid bulk length\r\n";
    char hdr[32];
    int hl = snprintf(hdr, sizeof(hdr), "$%zu\r\n", vlen);
    size_t one = (size_t)hl + vlen + 2, wantlen = 2 * one + sizeof(err) - 1;
    char *want = malloc(wantlen);
    assert_non_null(want);
    for (int k = 0; k < 2; k++) {
        memcpy(want + k * one, hdr, (size_t)hl);
        memcpy(want + k * one + (size_t)hl, v, vlen);
        memcpy(want + k * one + (size_t)hl + vlen, "\r\n", 2);
    }
    memcpy(want + 2 * one, err, sizeof(err) - 1);

    int fd = th_connect(sport);
    assert_true(fd >= 0);
    TH_SEND(fd, in);
    int ok = th_expect_close(fd, want, wantlen, 20000) == 0;
    close(fd);
    free(want);
    free(v);
    assert_true(ok);
}

/* The garbage arrives while earlier requests are still unanswered (a BLPOP
 * holds them for 1 s): their replies still come first. */
static void test_malformed_after_pending(void **state)
{
    (void)state;
    redisContext *b = hconn(sport);
    int fd = th_connect(sport);
    assert_true(fd >= 0);
    uint64_t t0 = th_now_ms();
    TH_SEND(fd, "BLPOP mal:none 1\r\nECHO e1\r\n");
    assert_int_equal(th_redis_wait_info(redis_p.port, "blocked_clients", 1, TH_MS), 0);
    TH_SEND(fd, "ECHO e2\r\n*1\r\n$abc\r\nPING\r\n");
    ping_ok(b); /* meanwhile another client is served */
    TH_EXPECT_CLOSE(fd, "*-1\r\n$2\r\ne1\r\n$2\r\ne2\r\n-ERR Protocol error: invalid bulk length\r\n");
    assert_true(th_now_ms() - t0 >= 900);
    close(fd);
    ping_ok(b);
    redisFree(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_pipeline_10k, check_alive),
        cmocka_unit_test_teardown(test_pipeline_raw_big_value, check_alive),
        cmocka_unit_test_teardown(test_multi_exec, check_alive),
        cmocka_unit_test_teardown(test_discard, check_alive),
        cmocka_unit_test_teardown(test_blpop_timeout, check_alive),
        cmocka_unit_test_teardown(test_blpop_unblocked, check_alive),
        cmocka_unit_test_teardown(test_pubsub, check_alive),
        cmocka_unit_test_teardown(test_pubsub_then_protocol_error, check_alive),
        cmocka_unit_test_teardown(test_unsubscribed_then_protocol_error, check_alive),
        cmocka_unit_test_teardown(test_resp3_types, check_alive),
        cmocka_unit_test_teardown(test_resp3_tracking_push, check_alive),
        cmocka_unit_test_teardown(test_resp3_push_then_protocol_error, check_alive),
        cmocka_unit_test_teardown(test_silent_then_protocol_error, check_alive),
        cmocka_unit_test_teardown(test_push_inside_exec_then_protocol_error, check_alive),
        cmocka_unit_test_teardown(test_hello_in_multi_reply_in_parts, check_alive),
        cmocka_unit_test_teardown(test_resp3_all_types, check_alive),
        cmocka_unit_test_teardown(test_monitor, check_alive),
        cmocka_unit_test_teardown(test_client_half_close, check_alive),
        cmocka_unit_test_teardown(test_slow_request_and_idle_gaps, check_alive),
        cmocka_unit_test_teardown(test_client_reply, check_alive),
        cmocka_unit_test_teardown(test_inline, check_alive),
        cmocka_unit_test_teardown(test_quit, check_alive),
        cmocka_unit_test_teardown(test_malformed_bulk_length, check_alive),
        cmocka_unit_test_teardown(test_malformed_huge_bulk, check_alive),
        cmocka_unit_test_teardown(test_malformed_long_inline, check_alive),
        cmocka_unit_test_teardown(test_malformed_type, check_alive),
        cmocka_unit_test_teardown(test_malformed_quotes_and_count, check_alive),
        cmocka_unit_test_teardown(test_malformed_after_pending, check_alive),
        cmocka_unit_test_teardown(test_malformed_inside_big_request, check_alive),
        cmocka_unit_test_teardown(test_malformed_after_big_replies, check_alive),
    };
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

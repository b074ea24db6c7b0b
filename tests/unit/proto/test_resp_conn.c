/* sluice — tests of the RESP connection model (src/proto/resp_conn.c).
 *
 * The model is driven as the session drives it: a request is classified
 * when framed, committed when it goes upstream (or refused), and each
 * upstream reply is fed to it whole or split; the tests check how many
 * replies each request is owed and which replies answer one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "proto/resp_conn.h"

/* A request as the framer would capture it, from words. */
static struct sl_resp_req req(const char *const *words)
{
    struct sl_resp_req r;
    memset(&r, 0, sizeof(r));
    while (words[r.argc] != NULL) {
        if (r.argc < SL_RESP_CAPTURE_ARGS) {
            size_t n = strlen(words[r.argc]);
            r.arglen[r.argc] = (uint32_t)n;
            memcpy(r.argv[r.argc], words[r.argc], n + 1);
            r.ncap++;
        }
        r.argc++;
    }
    return r;
}
#define REQ(...) req((const char *const[]){ __VA_ARGS__, NULL })

/* Sends request <r> upstream: returns the replies it is owed; <*unsub>
 * the marker kind, if any. */
static uint32_t send_req(struct sl_resp_conn *c, struct sl_resp_req r, int *unsub)
{
    uint32_t nchan;
    uint8_t fx = sl_rconn_classify(&r, &nchan);
    int kind = sl_rconn_kind(&r);
    int u;
    uint32_t n = sl_rconn_commit(c, fx, nchan, unsub ? unsub : &u);
    sl_rconn_allowed(c, kind, n);
    return n;
}

/* Feeds reply <text>, split after <split> bytes (0: whole); returns 1 when
 * it answers nothing (a push). */
static int reply(struct sl_resp_conn *c, const char *text, size_t split, int *confirm)
{
    size_t n = strlen(text);
    int conf;
    sl_rconn_reply_begin(c);
    if (split > 0 && split < n) {
        sl_rconn_reply_bytes(c, text, split);
        sl_rconn_reply_bytes(c, text + split, n - split);
    } else {
        sl_rconn_reply_bytes(c, text, n);
    }
    return sl_rconn_reply_end(c, 0, confirm ? confirm : &conf);
}

static void test_classify(void **state)
{
    (void)state;
    uint32_t nchan;
    struct sl_resp_req r = REQ("client", "reply", "off");
    assert_int_equal(sl_rconn_classify(&r, &nchan), SL_FX_REPLY_OFF);
    r = REQ("CLIENT", "REPLY", "Skip");
    assert_int_equal(sl_rconn_classify(&r, &nchan), SL_FX_REPLY_SKIP);
    r = REQ("CLIENT", "REPLY", "ON", "x"); /* wrong arity: Redis errors, one reply */
    assert_int_equal(sl_rconn_classify(&r, &nchan), SL_FX_PLAIN);
    r = REQ("HELLO", "3");
    assert_int_equal(sl_rconn_classify(&r, &nchan), SL_FX_HELLO3);
    r = REQ("hello");
    assert_int_equal(sl_rconn_classify(&r, &nchan), SL_FX_PLAIN);
    r = REQ("SUBSCRIBE", "a", "b", "c");
    assert_int_equal(sl_rconn_classify(&r, &nchan), SL_FX_SUB);
    assert_int_equal(nchan, 3);
    r = REQ("punsubscribe");
    assert_int_equal(sl_rconn_classify(&r, &nchan), SL_FX_PUNSUB);
    assert_int_equal(nchan, 0);
    r = REQ("RESET");
    assert_int_equal(sl_rconn_classify(&r, &nchan), SL_FX_RESET);
    r = REQ("RESET", "x");
    assert_int_equal(sl_rconn_classify(&r, &nchan), SL_FX_PLAIN);
    struct sl_resp_req empty;
    memset(&empty, 0, sizeof(empty));
    assert_int_equal(sl_rconn_classify(&empty, &nchan), SL_FX_EMPTY);

    r = REQ("multi");
    assert_int_equal(sl_rconn_kind(&r), SL_PK_MULTI);
    r = REQ("AUTH", "pw");
    assert_int_equal(sl_rconn_kind(&r), SL_PK_AUTH);
    r = REQ("CLIENT", "REPLY", "ON");
    assert_int_equal(sl_rconn_kind(&r), SL_PK_STATE);
    r = REQ("GET", "k");
    assert_int_equal(sl_rconn_kind(&r), SL_PK_PLAIN);
    r = REQ("quit");
    assert_int_equal(sl_rconn_kind(&r), SL_PK_QUIT);
    r = REQ("QUITE");
    assert_int_equal(sl_rconn_kind(&r), SL_PK_PLAIN);
}

/* sl_rconn_plain() turns names away by their length: it must say what
 * sl_rconn_kind() and sl_rconn_classify() say together, for every name they
 * tell apart (any case, with the arguments that matter) and for others of
 * every length. */
static void test_plain(void **state)
{
    (void)state;
    static const char *const names[] = {
        "MULTI", "EXEC", "DISCARD", "RESET", "AUTH", "HELLO", "QUIT", "CLIENT", "MONITOR",
        "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE",
        "reset", "Client", "hello", "", "G", "GET", "SET", "PING", "ECHO", "INCR", "LPUSH",
        "EXPIRE", "HGETALL", "GETRANGE", "RENAMENX", "ZRANGEBYSCORE", "CLIENTS", "MULTIX",
        "SUBSCRIBES", "XREADGROUP", "FUNCTION", "GEORADIUSBYMEMBER_RO",
    };
    static const char *const second[] = { NULL, "REPLY", "reply", "3", "2", "x" };
    static const char *const third[] = { NULL, "OFF", "skip", "On", "x" };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        for (size_t j = 0; j < sizeof(second) / sizeof(second[0]); j++)
            for (size_t k = 0; k < sizeof(third) / sizeof(third[0]); k++) {
                if (second[j] == NULL && third[k] != NULL)
                    continue;
                const char *w[] = { names[i], second[j], third[k], NULL };
                struct sl_resp_req r = req(w);
                uint32_t nchan;
                int slow = sl_rconn_kind(&r) == SL_PK_PLAIN &&
                           sl_rconn_classify(&r, &nchan) == SL_FX_PLAIN;
                assert_int_equal(sl_rconn_plain(&r), slow);
            }
    /* names of every length, from the letters of the ones told apart */
    char name[24];
    for (size_t len = 0; len < sizeof(name); len++)
        for (int round = 0; round < 50; round++) {
            for (size_t i = 0; i < len; i++)
                name[i] = "MULTIEXCDSRAHOQNBP"[(len * 31 + (size_t)round * 7 + i * 13) % 18];
            name[len] = '\0';
            struct sl_resp_req r = REQ(name, "x");
            uint32_t nchan;
            int slow = sl_rconn_kind(&r) == SL_PK_PLAIN && sl_rconn_classify(&r, &nchan) == SL_FX_PLAIN;
            assert_int_equal(sl_rconn_plain(&r), slow);
        }
    struct sl_resp_req empty;
    memset(&empty, 0, sizeof(empty));
    assert_int_equal(sl_rconn_plain(&empty), 0);
    struct sl_resp_req r = REQ("GET", "k");
    assert_int_equal(sl_rconn_plain(&r), 1);
    r = REQ("exec");
    assert_int_equal(sl_rconn_plain(&r), 0);
    r = REQ("sunsubscribe");
    assert_int_equal(sl_rconn_plain(&r), 0);
}

/* Replies need telling apart while pub/sub, MONITOR or a RESET's answer
 * may come; not before, nor once they are over. */
static void test_replies_plain(void **state)
{
    (void)state;
    struct sl_resp_conn c;
    sl_rconn_init(&c);
    assert_int_equal(sl_rconn_replies_plain(&c), 1);
    assert_int_equal(send_req(&c, REQ("GET", "k"), NULL), 1);
    assert_int_equal(sl_rconn_replies_plain(&c), 1);
    assert_int_equal(reply(&c, "$1\r\nv\r\n", 0, NULL), 0);
    assert_int_equal(send_req(&c, REQ("SUBSCRIBE", "a"), NULL), 1);
    assert_int_equal(sl_rconn_replies_plain(&c), 0);
    assert_int_equal(reply(&c, "*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n", 0, NULL), 0);
    assert_int_equal(sl_rconn_replies_plain(&c), 0); /* subscribed: messages come */
    sl_rconn_init(&c);
    assert_int_equal(send_req(&c, REQ("RESET"), NULL), 1);
    assert_int_equal(sl_rconn_replies_plain(&c), 0); /* its +RESET is told apart */
    assert_int_equal(reply(&c, "+RESET\r\n", 0, NULL), 0);
    assert_int_equal(sl_rconn_replies_plain(&c), 1);
    assert_int_equal(send_req(&c, REQ("MONITOR"), NULL), 1);
    assert_int_equal(sl_rconn_replies_plain(&c), 0);
}

/* What client libraries send as they connect; not what an application
 * sends to work on data, nor the server-wide CLIENT and CLUSTER verbs. */
static void test_setup_commands(void **state)
{
    (void)state;
    struct sl_resp_req r;
#define SETUP(...) (r = REQ(__VA_ARGS__), sl_rconn_is_setup(&r))
    assert_true(SETUP("select", "0"));
    assert_true(SETUP("PING"));
    assert_true(SETUP("INFO"));
    assert_true(SETUP("INFO", "server"));
    assert_true(SETUP("ROLE"));
    assert_true(SETUP("READONLY"));
    assert_true(SETUP("COMMAND"));
    assert_true(SETUP("COMMAND", "DOCS"));
    assert_true(SETUP("command", "docs", "get"));
    assert_true(SETUP("COMMAND", "COUNT"));
    assert_true(SETUP("CLIENT", "SETNAME", "w1"));
    assert_true(SETUP("CLIENT", "SETINFO", "LIB-NAME", "redis-py"));
    assert_true(SETUP("client", "id"));
    assert_true(SETUP("CLIENT", "TRACKING", "on"));
    assert_true(SETUP("CLUSTER", "SLOTS"));
    assert_true(SETUP("CLUSTER", "SHARDS"));
    assert_true(SETUP("CLUSTER", "NODES"));
    assert_false(SETUP("GET", "k"));
    assert_false(SETUP("ECHO", "x"));
    assert_false(SETUP("COMMAND", "GETKEYS", "GET", "k"));
    assert_false(SETUP("CLIENT"));
    assert_false(SETUP("CLIENT", "LIST"));
    assert_false(SETUP("CLIENT", "KILL", "ID", "1"));
    assert_false(SETUP("CLIENT", "PAUSE", "100"));
    assert_false(SETUP("CLUSTER", "FAILOVER"));
    assert_false(SETUP("INFOS"));
    assert_false(SETUP("AUTH", "pw")); /* never limited: no set-up to spend */
    assert_false(SETUP("HELLO", "3"));
    assert_false(SETUP("SUBSCRIBE", "c"));
#undef SETUP
}

static void test_reply_modes(void **state)
{
    (void)state;
    struct sl_resp_conn c;
    sl_rconn_init(&c);
    assert_int_equal(send_req(&c, REQ("GET", "k"), NULL), 1);
    assert_int_equal(send_req(&c, REQ("CLIENT", "REPLY", "OFF"), NULL), 0);
    assert_int_equal(send_req(&c, REQ("GET", "k"), NULL), 0);
    /* SKIP while OFF changes nothing */
    assert_int_equal(send_req(&c, REQ("CLIENT", "REPLY", "SKIP"), NULL), 0);
    assert_int_equal(c.reply_mode, SL_REPLY_OFF);
    assert_int_equal(send_req(&c, REQ("CLIENT", "REPLY", "ON"), NULL), 1);
    assert_int_equal(send_req(&c, REQ("CLIENT", "REPLY", "SKIP"), NULL), 0);
    assert_int_equal(send_req(&c, REQ("GET", "k"), NULL), 0); /* the one skipped */
    assert_int_equal(send_req(&c, REQ("GET", "k"), NULL), 1);
    /* RESET answers even under OFF, and turns replies back on */
    assert_int_equal(send_req(&c, REQ("CLIENT", "REPLY", "OFF"), NULL), 0);
    assert_int_equal(send_req(&c, REQ("RESET"), NULL), 1);
    assert_int_equal(c.reply_mode, SL_REPLY_ON);
}

static void test_refused(void **state)
{
    (void)state;
    struct sl_resp_conn c;
    int ping;
    sl_rconn_init(&c);
    assert_int_equal(sl_rconn_refused(&c, &ping), 1);
    assert_false(ping);
    send_req(&c, REQ("CLIENT", "REPLY", "SKIP"), NULL);
    /* refused under SKIP: no reply, and a PING takes the skip upstream */
    assert_int_equal(sl_rconn_refused(&c, &ping), 0);
    assert_true(ping);
    assert_int_equal(c.reply_mode, SL_REPLY_ON);
    send_req(&c, REQ("CLIENT", "REPLY", "OFF"), NULL);
    assert_int_equal(sl_rconn_refused(&c, &ping), 0);
    assert_false(ping);
}

static void test_multi(void **state)
{
    (void)state;
    struct sl_resp_conn c;
    sl_rconn_init(&c);
    assert_int_equal(send_req(&c, REQ("MULTI"), NULL), 1);
    assert_true(c.in_multi);
    /* inside MULTI: CLIENT REPLY is queued, changes nothing */
    assert_int_equal(send_req(&c, REQ("CLIENT", "REPLY", "OFF"), NULL), 1);
    assert_int_equal(c.reply_mode, SL_REPLY_ON);
    assert_int_equal(send_req(&c, REQ("SET", "k", "v"), NULL), 1);
    assert_int_equal(c.multi_queued, 2);
    sl_rconn_rejected(&c);
    assert_true(c.multi_dirty);
    sl_rconn_exec_aborted(&c);
    assert_false(c.in_multi);
    assert_false(c.multi_dirty);
    /* a rejection outside MULTI dooms nothing */
    sl_rconn_rejected(&c);
    assert_false(c.multi_dirty);
    /* SUBSCRIBE queued in MULTI takes effect at EXEC */
    send_req(&c, REQ("MULTI"), NULL);
    assert_int_equal(send_req(&c, REQ("SUBSCRIBE", "a"), NULL), 1);
    assert_false(sl_rconn_passthru(&c));
    send_req(&c, REQ("EXEC"), NULL);
    assert_true(sl_rconn_passthru(&c));
    assert_false(c.in_multi);
}

static void test_pubsub(void **state)
{
    (void)state;
    for (size_t split = 0; split < 40; split++) {
        struct sl_resp_conn c;
        int confirm;
        sl_rconn_init(&c);
        assert_int_equal(send_req(&c, REQ("SUBSCRIBE", "a", "b"), NULL), 2);
        assert_true(sl_rconn_passthru(&c));
        /* confirmations answer the request, messages answer nothing */
        assert_false(reply(&c, "*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n", split, &confirm));
        assert_true(confirm);
        assert_true(reply(&c, "*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$2\r\nhi\r\n", split, &confirm));
        assert_false(confirm);
        assert_false(reply(&c, "*3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n", split, NULL));
        assert_int_equal(c.subs[0], 2);
        /* a PING's answer while subscribed pays */
        assert_int_equal(send_req(&c, REQ("PING"), NULL), 1);
        assert_false(reply(&c, "*2\r\n$4\r\npong\r\n$0\r\n\r\n", split, NULL));
        /* unsubscribe of everything: a marker counts its confirmations */
        int unsub;
        assert_int_equal(send_req(&c, REQ("UNSUBSCRIBE"), &unsub), 0);
        assert_int_equal(unsub, 0);
        assert_int_equal(sl_rconn_unsub_due(&c, 0), 2);
        assert_false(reply(&c, "*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:1\r\n", split, NULL));
        assert_true(sl_rconn_passthru(&c));
        assert_false(reply(&c, "*3\r\n$11\r\nunsubscribe\r\n$1\r\nb\r\n:0\r\n", split, NULL));
        sl_rconn_mark_gone(&c);
        assert_false(sl_rconn_passthru(&c)); /* pub/sub is over */
        assert_int_equal(c.sub_owed, 0);
    }
}

static void test_unsub_unknown_waits(void **state)
{
    (void)state;
    struct sl_resp_conn c;
    sl_rconn_init(&c);
    send_req(&c, REQ("SUBSCRIBE", "a"), NULL);
    reply(&c, "*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n", 0, NULL);
    /* an unsubscribe of a named channel: whether still subscribed is
     * unknown until its confirmation: a mode change must wait */
    send_req(&c, REQ("UNSUBSCRIBE", "a"), NULL);
    uint32_t nchan;
    struct sl_resp_req r = REQ("CLIENT", "REPLY", "OFF");
    uint8_t fx = sl_rconn_classify(&r, &nchan);
    assert_true(sl_rconn_sub_wait(&c, fx, sl_rconn_kind(&r)));
    r = REQ("GET", "k");
    fx = sl_rconn_classify(&r, &nchan);
    assert_false(sl_rconn_sub_wait(&c, fx, sl_rconn_kind(&r)));
    reply(&c, "*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:0\r\n", 0, NULL);
    assert_false(sl_rconn_sub_unsure(&c));
    assert_false(sl_rconn_passthru(&c));
}

static void test_subscribed_refuses_mode_change(void **state)
{
    (void)state;
    struct sl_resp_conn c;
    sl_rconn_init(&c);
    send_req(&c, REQ("SUBSCRIBE", "a"), NULL);
    reply(&c, "*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n", 0, NULL);
    /* Redis answers CLIENT REPLY OFF with an error while subscribed (RESP2) */
    assert_int_equal(send_req(&c, REQ("CLIENT", "REPLY", "OFF"), NULL), 1);
    assert_int_equal(c.reply_mode, SL_REPLY_ON);
    /* under RESP3 it applies */
    struct sl_resp_conn d;
    sl_rconn_init(&d);
    send_req(&d, REQ("HELLO", "3"), NULL);
    assert_true(d.resp3);
    send_req(&d, REQ("SUBSCRIBE", "a"), NULL);
    assert_int_equal(send_req(&d, REQ("CLIENT", "REPLY", "OFF"), NULL), 0);
}

static void test_monitor_and_reset(void **state)
{
    (void)state;
    struct sl_resp_conn c;
    sl_rconn_init(&c);
    assert_int_equal(send_req(&c, REQ("MONITOR"), NULL), 1);
    assert_false(reply(&c, "+OK\r\n", 0, NULL));
    /* feed lines answer nothing; a command's reply still does */
    assert_true(reply(&c, "+1700000000.123456 [0 127.0.0.1:5] \"GET\" \"k\"\r\n", 7, NULL));
    assert_int_equal(send_req(&c, REQ("MONITOR"), NULL), 0); /* again: no +OK */
    assert_int_equal(send_req(&c, REQ("RESET"), NULL), 1);
    assert_true(sl_rconn_passthru(&c));
    assert_false(reply(&c, "+RESET\r\n", 3, NULL));
    assert_false(sl_rconn_passthru(&c));
    assert_false(c.monitor);
    assert_int_equal(c.resets_seen, c.resets_sent);
    /* after RESET, MONITOR answers +OK again */
    assert_int_equal(send_req(&c, REQ("MONITOR"), NULL), 1);
}

static void test_settled(void **state)
{
    (void)state;
    struct sl_resp_conn c;
    sl_rconn_init(&c);
    int unsub;
    send_req(&c, REQ("PUNSUBSCRIBE"), &unsub);
    assert_int_equal(unsub, 1);
    assert_int_equal(c.marks, 1);
    assert_int_equal(sl_rconn_unsub_due(&c, 1), 1); /* none: one confirmation */
    assert_int_equal(c.sub_owed, 1);
    sl_rconn_settled(&c, 1); /* an error came instead */
    assert_int_equal(c.sub_owed, 0);
    sl_rconn_mark_gone(&c);
    assert_int_equal(c.marks, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classify),
        cmocka_unit_test(test_plain),
        cmocka_unit_test(test_replies_plain),
        cmocka_unit_test(test_setup_commands),
        cmocka_unit_test(test_reply_modes),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_multi),
        cmocka_unit_test(test_pubsub),
        cmocka_unit_test(test_unsub_unknown_waits),
        cmocka_unit_test(test_subscribed_refuses_mode_change),
        cmocka_unit_test(test_monitor_and_reset),
        cmocka_unit_test(test_settled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

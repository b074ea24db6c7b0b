/* sluice — tests of the RESP command classes for pooled listeners
 * (src/proto/resp_cmd.c): each class, the arguments that decide one (XREAD
 * BLOCK, CLIENT subcommands, HELLO, AUTH, SELECT), the pin tracker's ends
 * and the pool key's moves. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "proto/resp_cmd.h"

/* A request as the framer would capture it, from words. */
static struct sl_resp_req req(const char *const *words)
{
    struct sl_resp_req r;
    memset(&r, 0, sizeof(r));
    while (words[r.argc] != NULL) {
        if (r.argc < SL_RESP_CAPTURE_ARGS) {
            size_t n = strlen(words[r.argc]);
            r.arglen[r.argc] = (uint32_t)n;
            if (n > SL_RESP_CAPTURE_LEN)
                n = SL_RESP_CAPTURE_LEN;
            memcpy(r.argv[r.argc], words[r.argc], n);
            r.argv[r.argc][n] = '\0';
            r.ncap++;
        }
        r.argc++;
    }
    return r;
}
#define REQ(...) req((const char *const[]){ __VA_ARGS__, NULL })

static int cls(struct sl_resp_req r, struct sl_rcmd_info *o)
{
    struct sl_rcmd_info tmp;
    return sl_rcmd_class(&r, o ? o : &tmp);
}
#define CLS(...) cls(REQ(__VA_ARGS__), NULL)

/* The pin bits request <r> starts (0 when it is not PIN). */
static uint32_t pins(struct sl_resp_req r)
{
    struct sl_rcmd_info o;
    return sl_rcmd_class(&r, &o) == SL_RCMD_PIN ? o.pin : 0;
}
#define PINS(...) pins(REQ(__VA_ARGS__))

static uint8_t loc(struct sl_resp_req r)
{
    struct sl_rcmd_info o;
    return sl_rcmd_class(&r, &o) == SL_RCMD_LOCAL ? o.local : 0;
}
#define LOC(...) loc(REQ(__VA_ARGS__))

static void test_pool_data_commands(void **state)
{
    (void)state;
    static const char *const names[] = {
        "GET", "set", "MGet", "HSET", "incr", "EXPIRE", "ZADD", "XADD", "EVAL", "EVALSHA",
        "FCALL", "PING", "ECHO", "TIME", "DBSIZE", "EXISTS", "TYPE", "TTL", "SCAN", "HSCAN",
        "SSCAN", "ZSCAN", "PUBLISH", "SPUBLISH", "CONFIG", "FLUSHALL", "SWAPDB", "INFO",
        "COMMAND", "CLUSTER", "ACL", "FUNCTION", "OBJECT", "restore-asking", "bitfield_ro",
        "georadiusbymember_ro", "zunionstore", "LMPOP", "ZMPOP", "XREADGROUP", "hexpire",
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        struct sl_rcmd_info o;
        struct sl_resp_req r = REQ(names[i], "k");
        assert_int_equal(sl_rcmd_class(&r, &o), SL_RCMD_POOL);
        assert_int_equal(o.pin, 0);
    }
    assert_int_equal(CLS("SCRIPT", "LOAD", "return 1"), SL_RCMD_POOL);
    assert_int_equal(CLS("SCRIPT", "DEBUG", "no"), SL_RCMD_POOL);
}

/* Scripts and functions share connections but may run long: marked slow
 * (nothing of another client queues behind them); nothing else is. */
static void test_scripts_slow(void **state)
{
    (void)state;
    static const char *const slow[] = { "EVAL", "eval_ro", "EVALSHA", "evalsha_ro", "FCALL",
                                        "fcall_ro" };
    static const char *const quick[] = { "GET", "PING", "SCRIPT", "FUNCTION", "EXEC", "ECHO" };
    struct sl_rcmd_info o;
    for (size_t i = 0; i < sizeof(slow) / sizeof(slow[0]); i++) {
        struct sl_resp_req r = REQ(slow[i], "x", "0");
        assert_int_equal(sl_rcmd_class(&r, &o), SL_RCMD_POOL);
        assert_int_equal(o.slow, 1);
        assert_int_equal(o.pin, 0);
    }
    for (size_t i = 0; i < sizeof(quick) / sizeof(quick[0]); i++) {
        struct sl_resp_req r = REQ(quick[i], "LOAD", "0");
        (void)sl_rcmd_class(&r, &o);
        assert_int_equal(o.slow, 0);
    }
}

static void test_unknown_pins(void **state)
{
    (void)state;
    assert_int_equal(PINS("NOSUCHCMD", "a"), SL_PIN_UNKNOWN);
    assert_int_equal(PINS("GETX"), SL_PIN_UNKNOWN);
    assert_int_equal(PINS("GE"), SL_PIN_UNKNOWN);
    assert_int_equal(PINS("zzzzzz"), SL_PIN_UNKNOWN);
    assert_int_equal(PINS("aaa"), SL_PIN_UNKNOWN);
    assert_int_equal(PINS("MODULE.COMMAND", "x"), SL_PIN_UNKNOWN); /* module commands */
    /* a name longer than any command, and one cut by the capture */
    assert_int_equal(PINS("georadiusbymember_ro_and_more"), SL_PIN_UNKNOWN);
    struct sl_resp_req r = REQ("GET");
    r.arglen[0] = 200; /* "GET" followed by bytes not captured */
    struct sl_rcmd_info o;
    assert_int_equal(sl_rcmd_class(&r, &o), SL_RCMD_PIN);
    /* a NUL inside the name */
    r = REQ("GET");
    r.argv[0][1] = '\0';
    assert_int_equal(sl_rcmd_class(&r, &o), SL_RCMD_PIN);
    assert_int_equal(PINS("CLIENT", "NOSUCHSUB"), SL_PIN_UNKNOWN);
    assert_int_equal(PINS("CLIENT"), SL_PIN_ODD);
    /* the table's ends are found (its order is bsearch's) */
    assert_int_equal(CLS("acl", "whoami"), SL_RCMD_POOL);
    assert_int_equal(CLS("ZUNIONSTORE", "d", "1", "k"), SL_RCMD_POOL);
}

static void test_pins(void **state)
{
    (void)state;
    assert_int_equal(PINS("MULTI"), SL_PIN_MULTI);
    assert_int_equal(PINS("watch", "k"), SL_PIN_WATCH);
    static const char *const blocking[] = { "BLPOP", "BRPOP", "BRPOPLPUSH", "BLMOVE", "BLMPOP",
                                            "BZPOPMIN", "BZPOPMAX", "BZMPOP", "WAIT", "WAITAOF" };
    for (size_t i = 0; i < sizeof(blocking) / sizeof(blocking[0]); i++)
        assert_int_equal(pins(REQ(blocking[i], "k", "0")), SL_PIN_BLOCK);
    assert_int_equal(PINS("SUBSCRIBE", "c"), SL_PIN_SUB);
    assert_int_equal(PINS("psubscribe", "c*"), SL_PIN_SUB);
    assert_int_equal(PINS("SSUBSCRIBE", "c"), SL_PIN_SUB);
    assert_int_equal(PINS("UNSUBSCRIBE"), SL_PIN_UNSUB);
    assert_int_equal(PINS("MONITOR"), SL_PIN_MONITOR);
    assert_int_equal(PINS("READONLY"), SL_PIN_READONLY);
    assert_int_equal(PINS("ASKING"), SL_PIN_NEXT);
    assert_int_equal(PINS("DEBUG", "SLEEP", "0"), SL_PIN_DEBUG);
    assert_int_equal(PINS("SYNC"), SL_PIN_REPLICA);
    assert_int_equal(PINS("PSYNC", "?", "-1"), SL_PIN_REPLICA);
    assert_int_equal(PINS("REPLCONF", "listening-port", "1"), SL_PIN_REPLICA);
    assert_int_equal(PINS("SCRIPT", "DEBUG", "YES"), SL_PIN_SCRIPT);
    assert_int_equal(PINS("script", "debug", "sync"), SL_PIN_SCRIPT);
    assert_int_equal(PINS("RESET", "x"), SL_PIN_ODD);
}

/* XREAD blocks only with a BLOCK option before STREAMS, wherever it is
 * among the options; a stream or an option value named BLOCK does not. */
static void test_xread_block(void **state)
{
    (void)state;
    assert_int_equal(CLS("XREAD", "STREAMS", "s", "0"), SL_RCMD_POOL);
    assert_int_equal(CLS("XREAD", "COUNT", "2", "STREAMS", "s", "0"), SL_RCMD_POOL);
    assert_int_equal(PINS("XREAD", "BLOCK", "0", "STREAMS", "s", "$"), SL_PIN_BLOCK);
    assert_int_equal(PINS("xread", "count", "1", "block", "10", "streams", "s", "$"), SL_PIN_BLOCK);
    assert_int_equal(PINS("XREAD", "Block", "5", "COUNT", "1", "STREAMS", "s", "$"), SL_PIN_BLOCK);
    /* options repeat, as Redis allows */
    assert_int_equal(PINS("XREAD", "COUNT", "1", "COUNT", "2", "BLOCK", "0", "STREAMS"),
                     SL_PIN_BLOCK);
    /* a stream named BLOCK, and ids */
    assert_int_equal(CLS("XREAD", "STREAMS", "BLOCK", "0"), SL_RCMD_POOL);
    assert_int_equal(CLS("XREAD", "STREAMS", "a", "BLOCK", "0", "0"), SL_RCMD_POOL);
    assert_int_equal(CLS("XREAD", "COUNT", "3", "STREAMS", "BLOCK", "block", "0", "0"),
                     SL_RCMD_POOL);
    /* COUNT's value is "BLOCK": Redis reads it as the count (an error) */
    assert_int_equal(CLS("XREAD", "COUNT", "BLOCK", "STREAMS", "s", "0"), SL_RCMD_POOL);
    /* BLOCK as the last word has no value: Redis answers a syntax error */
    assert_int_equal(CLS("XREAD", "COUNT", "1", "BLOCK"), SL_RCMD_POOL);
    /* options past the captured arguments: cannot tell, so pinned */
    assert_int_equal(PINS("XREAD", "COUNT", "1", "COUNT", "1", "COUNT", "1", "COUNT", "1",
                          "BLOCK", "0", "STREAMS", "s", "$"),
                     SL_PIN_BLOCK);
    /* XREADGROUP: GROUP takes two values, NOACK none */
    assert_int_equal(CLS("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"), SL_RCMD_POOL);
    assert_int_equal(CLS("XREADGROUP", "GROUP", "BLOCK", "BLOCK", "NOACK", "STREAMS", "BLOCK",
                         ">"),
                     SL_RCMD_POOL);
    assert_int_equal(PINS("XREADGROUP", "GROUP", "g", "c", "NOACK", "BLOCK", "0", "STREAMS"),
                     SL_PIN_BLOCK);
    assert_int_equal(PINS("xreadgroup", "group", "g", "c", "count", "1", "block", "0"),
                     SL_PIN_BLOCK);
    /* NOACK means nothing to XREAD: a syntax error there, no block */
    assert_int_equal(CLS("XREAD", "NOACK", "BLOCK", "0", "STREAMS", "s", "0"), SL_RCMD_POOL);
}

static void test_client_subcommands(void **state)
{
    (void)state;
    struct sl_rcmd_info o;
    assert_int_equal(cls(REQ("client", "setname", "app"), &o), SL_RCMD_LOCAL);
    assert_int_equal(o.local, SL_RLOCAL_SETNAME);
    assert_int_equal(o.name_arg, 2);
    assert_int_equal(PINS("CLIENT", "SETNAME"), SL_PIN_ODD);
    assert_int_equal(PINS("CLIENT", "SETNAME", "a", "b"), SL_PIN_ODD);
    assert_int_equal(PINS("CLIENT", "SETNAME", "n234567890123456789012345678901234567890"
                                               "12345678901234567890123456789"),
                     SL_PIN_ODD);
    assert_int_equal(LOC("CLIENT", "SETNAME", "a b"), SL_RLOCAL_SETNAME); /* sluice refuses */
    assert_int_equal(LOC("CLIENT", "GetName"), SL_RLOCAL_GETNAME);
    assert_int_equal(LOC("Client", "SETINFO", "LIB-NAME", "x"), SL_RLOCAL_SETINFO);
    assert_int_equal(LOC("CLIENT", "id"), SL_RLOCAL_ID);
    assert_int_equal(LOC("CLIENT", "INFO"), SL_RLOCAL_INFO);
    assert_int_equal(LOC("CLIENT", "list", "TYPE", "normal"), SL_RLOCAL_LIST);
    assert_int_equal(LOC("CLIENT", "KILL", "ID", "7"), SL_RLOCAL_KILL);
    assert_int_equal(LOC("CLIENT", "kill", "127.0.0.1:5"), SL_RLOCAL_KILL);
    assert_int_equal(LOC("CLIENT", "UNBLOCK", "7"), SL_RLOCAL_UNBLOCK);
    /* what their options say, read as Redis reads them (C strings, either case) */
    const struct { struct sl_resp_req r; uint8_t opt, name_arg; } opts[] = {
        { REQ("CLIENT", "SETINFO", "lib-name", "x"), SL_RLOPT_LIB_NAME, 3 },
        { REQ("CLIENT", "SETINFO", "LIB-VER", "1.0"), SL_RLOPT_LIB_VER, 3 },
        { REQ("CLIENT", "SETINFO", "LIB-COLOUR", "1"), SL_RLOPT_NONE, 3 },
        { REQ("CLIENT", "KILL", "127.0.0.1:5"), SL_RLOPT_KILL_OLD, 0 },
        { REQ("CLIENT", "KILL", "ID", "7"), SL_RLOPT_NONE, 0 },
        { REQ("CLIENT", "LIST"), SL_RLOPT_NONE, 0 },
        { REQ("CLIENT", "LIST", "type", "NORMAL"), SL_RLOPT_NONE, 0 },
        { REQ("CLIENT", "LIST", "TYPE", "pubsub"), SL_RLOPT_LIST_EMPTY, 0 },
        { REQ("CLIENT", "LIST", "TYPE", "replica"), SL_RLOPT_LIST_EMPTY, 0 },
        { REQ("CLIENT", "LIST", "TYPE", "normal", "x"), SL_RLOPT_LIST_ERR, 0 },
        { REQ("CLIENT", "LIST", "x"), SL_RLOPT_LIST_ERR, 0 },
        { REQ("CLIENT", "LIST", "id", "7", "8"), SL_RLOPT_LIST_ID, 0 },
        { REQ("CLIENT", "LIST", "ID"), SL_RLOPT_LIST_ERR, 0 },
        { REQ("CLIENT", "LIST", "ID", "7", "abc"), SL_RLOPT_LIST_BADID, 0 },
        { REQ("CLIENT", "LIST", "ID", "07"), SL_RLOPT_LIST_BADID, 0 },
        { REQ("CLIENT", "LIST", "ID", "+7"), SL_RLOPT_LIST_BADID, 0 },
        { REQ("CLIENT", "LIST", "ID", "-1"), SL_RLOPT_LIST_ID, 0 },
        /* more ids than captured: those past them are ids of no client */
        { REQ("CLIENT", "LIST", "ID", "1", "2", "3", "4", "5", "x"), SL_RLOPT_LIST_ID, 0 },
    };
    for (size_t k = 0; k < sizeof(opts) / sizeof(opts[0]); k++) {
        assert_int_equal(sl_rcmd_class(&opts[k].r, &o), SL_RCMD_LOCAL);
        assert_int_equal(o.opt, opts[k].opt);
        assert_int_equal(o.name_arg, opts[k].name_arg);
    }
    assert_true(sl_rcmd_list_id(&opts[11].r, 8));
    assert_true(sl_rcmd_list_id(&opts[11].r, 7));
    assert_false(sl_rcmd_list_id(&opts[11].r, 9));
    assert_false(sl_rcmd_list_id(&opts[11].r, 78));
    /* an unknown type: Redis refuses it in its own words, listing nothing */
    assert_int_equal(CLS("CLIENT", "LIST", "TYPE", "bogus"), SL_RCMD_POOL);
    /* a NUL ends the option's text, as in Redis */
    struct sl_resp_req nul = REQ("CLIENT", "SETINFO", "LIB-NAMExx", "y");
    nul.argv[2][8] = '\0';
    sl_rcmd_class(&nul, &o);
    assert_int_equal(o.opt, SL_RLOPT_LIB_NAME);

    assert_int_equal(LOC("QUIT"), SL_RLOCAL_QUIT);
    assert_int_equal(LOC("quit"), SL_RLOCAL_QUIT);
    assert_int_equal(cls(req((const char *const[]){ NULL }), &o), SL_RCMD_LOCAL);
    assert_int_equal(o.local, SL_RLOCAL_EMPTY);

    assert_int_equal(CLS("CLIENT", "PAUSE", "10"), SL_RCMD_POOL);
    assert_int_equal(CLS("client", "unpause"), SL_RCMD_POOL);
    assert_int_equal(CLS("CLIENT", "help"), SL_RCMD_POOL);
    assert_int_equal(CLS("CLIENT", "GETREDIR"), SL_RCMD_POOL);
    assert_int_equal(CLS("CLIENT", "TRACKINGINFO"), SL_RCMD_POOL);
    assert_int_equal(CLS("CLIENT", "CACHING", "yes"), SL_RCMD_POOL);

    assert_int_equal(PINS("CLIENT", "TRACKING", "on"), SL_PIN_TRACKING);
    assert_int_equal(PINS("client", "Tracking", "ON", "BCAST", "PREFIX", "a"), SL_PIN_TRACKING);
    assert_int_equal(cls(REQ("CLIENT", "TRACKING", "off"), &o), SL_RCMD_POOL);
    assert_int_equal(o.ends, SL_PIN_TRACKING);
    assert_int_equal(PINS("CLIENT", "TRACKING", "maybe"), SL_PIN_ODD);
    assert_int_equal(PINS("CLIENT", "TRACKING"), SL_PIN_ODD);
    assert_int_equal(PINS("CLIENT", "REPLY", "OFF"), SL_PIN_REPLY);
    assert_int_equal(PINS("client", "reply", "skip"), SL_PIN_NEXT);
    assert_int_equal(cls(REQ("CLIENT", "REPLY", "on"), &o), SL_RCMD_POOL);
    assert_int_equal(o.ends, SL_PIN_REPLY);
    assert_int_equal(PINS("CLIENT", "REPLY", "never"), SL_PIN_ODD);
    assert_int_equal(PINS("CLIENT", "REPLY"), SL_PIN_ODD);
    assert_int_equal(PINS("CLIENT", "REPLY", "ON", "x"), SL_PIN_ODD);
    assert_int_equal(PINS("CLIENT", "NO-EVICT", "on"), SL_PIN_NOEVICT);
    assert_int_equal(PINS("CLIENT", "no-touch", "On"), SL_PIN_NOTOUCH);
    assert_int_equal(cls(REQ("CLIENT", "NO-EVICT", "off"), &o), SL_RCMD_POOL);
    assert_int_equal(o.ends, SL_PIN_NOEVICT);
}

static void test_auth(void **state)
{
    (void)state;
    struct sl_rcmd_info o;
    assert_int_equal(cls(REQ("AUTH", "secret"), &o), SL_RCMD_KEY);
    assert_int_equal(o.set, SL_RKEY_USER);
    assert_string_equal(o.user, "default");
    assert_int_equal(o.user_len, 7);
    assert_int_equal(o.pass_arg, 1);
    assert_int_equal(cls(REQ("auth", "alice", "secret"), &o), SL_RCMD_KEY);
    assert_string_equal(o.user, "alice");
    assert_int_equal(o.pass_arg, 2);
    /* no argument, or too many: Redis answers an error; pinned until it does */
    assert_int_equal(PINS("AUTH"), SL_PIN_ODD);
    assert_int_equal(PINS("AUTH", "a", "b", "c"), SL_PIN_ODD);
    /* a user name longer than a key holds */
    char longname[SL_POOL_USER_MAX + 2];
    memset(longname, 'u', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    assert_int_equal(PINS("AUTH", longname, "p"), SL_PIN_ODD);
    longname[SL_POOL_USER_MAX] = '\0'; /* exactly the cap */
    assert_int_equal(cls(REQ("AUTH", longname, "p"), &o), SL_RCMD_KEY);
    assert_int_equal(o.user_len, SL_POOL_USER_MAX);
}

static void test_hello(void **state)
{
    (void)state;
    struct sl_rcmd_info o;
    assert_int_equal(cls(REQ("HELLO"), &o), SL_RCMD_KEY);
    assert_int_equal(o.set, 0);
    assert_int_equal(cls(REQ("hello", "3"), &o), SL_RCMD_KEY);
    assert_int_equal(o.set, SL_RKEY_RESP);
    assert_int_equal(o.resp, 3);
    assert_int_equal(cls(REQ("HELLO", "2", "AUTH", "bob", "pw", "SETNAME", "app"), &o),
                     SL_RCMD_KEY);
    assert_int_equal(o.set, SL_RKEY_RESP | SL_RKEY_USER);
    assert_int_equal(o.resp, 2);
    assert_string_equal(o.user, "bob");
    assert_int_equal(o.pass_arg, 4);
    assert_int_equal(o.name_arg, 6);
    assert_int_equal(cls(REQ("HELLO", "3", "setname", "app", "auth", "carol", "pw"), &o),
                     SL_RCMD_KEY);
    assert_string_equal(o.user, "carol");
    assert_int_equal(o.pass_arg, 6);
    assert_int_equal(o.name_arg, 3);
    /* a user named AUTH, a name SETNAME */
    assert_int_equal(cls(REQ("HELLO", "3", "AUTH", "AUTH", "SETNAME", "SETNAME", "SETNAME"), &o),
                     SL_RCMD_KEY);
    assert_string_equal(o.user, "AUTH");
    assert_int_equal(o.name_arg, 6);
    /* what Redis refuses: pinned until it does */
    assert_int_equal(PINS("HELLO", "1"), SL_PIN_ODD);
    assert_int_equal(PINS("HELLO", "4"), SL_PIN_ODD);
    assert_int_equal(PINS("HELLO", "03"), SL_PIN_ODD);
    assert_int_equal(PINS("HELLO", "AUTH", "u", "p"), SL_PIN_ODD);
    assert_int_equal(PINS("HELLO", "3", "AUTH", "u"), SL_PIN_ODD);
    assert_int_equal(PINS("HELLO", "3", "SETNAME"), SL_PIN_ODD);
    assert_int_equal(PINS("HELLO", "3", "EXTRA"), SL_PIN_ODD);
    /* a name Redis refuses, after it authenticated: pinned whatever it answers */
    assert_int_equal(PINS("HELLO", "3", "AUTH", "u", "p", "SETNAME", "a b"), SL_PIN_STICKY);
    assert_int_equal(PINS("HELLO", "3", "SETNAME", "a\nb"), SL_PIN_STICKY);
    assert_int_equal(PINS("HELLO", "3", "SETNAME", "n234567890123456789012345678901234567890"
                                                   "12345678901234567890123456789"),
                     SL_PIN_STICKY);
    struct sl_rcmd_pin p;
    sl_rcmd_pin_init(&p);
    struct sl_resp_req r = REQ("HELLO", "3", "AUTH", "u", "p", "SETNAME", "a b");
    sl_rcmd_class(&r, &o);
    sl_rcmd_pin_done(&p, &o, sl_rcmd_pin_sent(&p, &o, 0), 0);
    assert_int_equal(p.why, SL_PIN_STICKY);
    assert_true(sl_rcmd_pin_clean(&p));
    /* options past the captured arguments */
    assert_int_equal(PINS("HELLO", "3", "SETNAME", "a", "SETNAME", "b", "SETNAME", "c",
                          "SETNAME", "d"),
                     SL_PIN_ODD);
}

static void test_select(void **state)
{
    (void)state;
    struct sl_rcmd_info o;
    assert_int_equal(cls(REQ("SELECT", "5"), &o), SL_RCMD_KEY);
    assert_int_equal(o.set, SL_RKEY_DB);
    assert_int_equal(o.db, 5);
    assert_int_equal(cls(REQ("select", "0"), &o), SL_RCMD_KEY);
    assert_int_equal(o.db, 0);
    assert_int_equal(cls(REQ("SELECT", "2147483647"), &o), SL_RCMD_KEY);
    /* not an integer as Redis reads one, or out of range */
    static const char *const bad[] = { "x", "", "1x", "+1", " 1", "01", "-0", "-1", "1.0",
                                       "2147483648", "99999999999999999999999" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(pins(REQ("SELECT", bad[i])), SL_PIN_ODD);
    assert_int_equal(PINS("SELECT"), SL_PIN_ODD);
    assert_int_equal(PINS("SELECT", "1", "2"), SL_PIN_ODD);
}

static void test_reset_key(void **state)
{
    (void)state;
    struct sl_rcmd_info o;
    assert_int_equal(cls(REQ("reset"), &o), SL_RCMD_KEY);
    assert_int_equal(o.set, SL_RKEY_RESET);
    assert_true(o.ends & SL_PIN_MULTI);
    assert_false(o.ends & SL_PIN_UNKNOWN);
}

/* Whether the requests written so far leave a transaction open on the
 * connection (what the session's connection model tells the tracker): a
 * MULTI opens one, an EXEC, DISCARD or RESET ends it. */
static int txn;

static void pin_init(struct sl_rcmd_pin *p)
{
    sl_rcmd_pin_init(p);
    txn = 0;
}

/* Request <i> is written: the tracker is told whether a transaction was open. */
static uint32_t sent(struct sl_rcmd_pin *p, struct sl_rcmd_info *i)
{
    int open = txn;
    if (i->cls == SL_RCMD_PIN && (i->pin & SL_PIN_MULTI))
        txn = 1;
    else if (i->ends & SL_PIN_MULTI)
        txn = 0;
    return sl_rcmd_pin_sent(p, i, open);
}

/* Runs request <r> through the tracker: sent, then answered (<ok>). */
static void run(struct sl_rcmd_pin *p, struct sl_resp_req r, int ok)
{
    struct sl_rcmd_info o;
    sl_rcmd_class(&r, &o);
    uint32_t added = sent(p, &o);
    sl_rcmd_pin_done(p, &o, added, ok);
}
#define RUN(p, ok, ...) run((p), REQ(__VA_ARGS__), (ok))

static void test_pin_multi_watch(void **state)
{
    (void)state;
    struct sl_rcmd_pin p;
    pin_init(&p);
    assert_false(sl_rcmd_pinned(&p));
    RUN(&p, 1, "GET", "k");
    assert_false(sl_rcmd_pinned(&p));
    RUN(&p, 1, "MULTI");
    assert_true(sl_rcmd_pinned(&p));
    RUN(&p, 1, "SET", "k", "v");
    RUN(&p, 1, "EXEC");
    assert_false(sl_rcmd_pinned(&p));

    /* WATCH then MULTI inside the pin: EXEC ends both, even refused */
    RUN(&p, 1, "WATCH", "k");
    RUN(&p, 1, "multi");
    assert_int_equal(p.why, SL_PIN_WATCH | SL_PIN_MULTI);
    RUN(&p, 0, "EXEC"); /* -EXECABORT */
    assert_false(sl_rcmd_pinned(&p));

    /* UNWATCH ends WATCH; a nested MULTI's error keeps the first MULTI */
    RUN(&p, 1, "WATCH", "k");
    RUN(&p, 1, "UNWATCH");
    assert_false(sl_rcmd_pinned(&p));
    RUN(&p, 1, "MULTI");
    RUN(&p, 0, "MULTI"); /* -ERR MULTI calls can not be nested */
    assert_int_equal(p.why, SL_PIN_MULTI);
    RUN(&p, 1, "DISCARD");
    assert_false(sl_rcmd_pinned(&p));

    /* MULTI inside a subscription pin (RESP3): EXEC leaves the subscription */
    RUN(&p, 1, "SUBSCRIBE", "c");
    sl_rcmd_pin_subs(&p, 1);
    RUN(&p, 1, "MULTI");
    RUN(&p, 1, "EXEC");
    assert_int_equal(p.why, SL_PIN_SUB);
    sl_rcmd_pin_subs(&p, 0);
    assert_false(sl_rcmd_pinned(&p));
    assert_true(sl_rcmd_pin_clean(&p));
}

static void test_pin_once_and_next(void **state)
{
    (void)state;
    struct sl_rcmd_pin p;
    pin_init(&p);
    /* two blocking commands pipelined: pinned until both answered */
    struct sl_rcmd_info a, b;
    struct sl_resp_req ra = REQ("BLPOP", "k", "0"), rb = REQ("XREAD", "BLOCK", "0", "STREAMS",
                                                               "s", "$");
    sl_rcmd_class(&ra, &a);
    sl_rcmd_class(&rb, &b);
    uint32_t aa = sent(&p, &a), ab = sent(&p, &b);
    sl_rcmd_pin_done(&p, &a, aa, 1);
    assert_true(sl_rcmd_pinned(&p));
    sl_rcmd_pin_done(&p, &b, ab, 0); /* timeout's nil, or an error: either ends it */
    assert_false(sl_rcmd_pinned(&p));

    /* CLIENT REPLY SKIP covers the next request only */
    struct sl_rcmd_info s, g;
    struct sl_resp_req rs = REQ("CLIENT", "REPLY", "SKIP"), rg = REQ("GET", "k");
    sl_rcmd_class(&rs, &s);
    sl_rcmd_class(&rg, &g);
    sent(&p, &s); /* no answer comes for it */
    assert_true(sl_rcmd_pinned(&p));
    sent(&p, &g); /* written on the pinned connection; its reply skipped */
    assert_false(sl_rcmd_pinned(&p));

    /* CLIENT REPLY OFF until ON */
    RUN(&p, 1, "CLIENT", "REPLY", "OFF");
    RUN(&p, 1, "SET", "k", "v");
    assert_int_equal(p.why, SL_PIN_REPLY);
    RUN(&p, 1, "client", "reply", "on");
    assert_false(sl_rcmd_pinned(&p));
}

/* Requests written back to back, answered later in order (a pipeline). */
struct inflight {
    struct sl_rcmd_info info;
    uint32_t            token;
};

static struct inflight send_req(struct sl_rcmd_pin *p, struct sl_resp_req r)
{
    struct inflight f;
    sl_rcmd_class(&r, &f.info);
    f.token = sent(p, &f.info);
    return f;
}
#define SEND(p, ...) send_req((p), REQ(__VA_ARGS__))

static void answer(struct sl_rcmd_pin *p, const struct inflight *f, int ok)
{
    sl_rcmd_pin_done(p, &f->info, f->token, ok);
}

/* Found by tests/fuzz/fuzz_resp_cmd.c: the first of two pipelined requests
 * that want the same pin was refused, or an end was answered while a
 * request written after it waited, and the tracker let the client go while
 * the later request's state was on its connection. */
static void test_pin_pipelined(void **state)
{
    (void)state;
    struct sl_rcmd_pin p;
    pin_init(&p);

    /* WATCH (an arity error) and WATCH k: the second one's watch holds */
    struct inflight w1 = SEND(&p, "WATCH"), w2 = SEND(&p, "WATCH", "k");
    answer(&p, &w1, 0);
    answer(&p, &w2, 1);
    assert_int_equal(p.why, SL_PIN_WATCH);
    RUN(&p, 1, "UNWATCH");
    assert_false(sl_rcmd_pinned(&p));

    /* two commands not known to be stateless, the first refused */
    struct inflight u1 = SEND(&p, "FOO"), u2 = SEND(&p, "BAR");
    answer(&p, &u1, 0);
    answer(&p, &u2, 1);
    assert_int_equal(p.why, SL_PIN_UNKNOWN);
    assert_false(sl_rcmd_pin_clean(&p));

    /* CLIENT TRACKING ON, OFF, ON: tracking is on at the end */
    pin_init(&p);
    struct inflight t1 = SEND(&p, "CLIENT", "TRACKING", "ON"),
                    t2 = SEND(&p, "CLIENT", "TRACKING", "OFF"),
                    t3 = SEND(&p, "CLIENT", "TRACKING", "ON");
    answer(&p, &t1, 1);
    answer(&p, &t2, 1);
    assert_int_equal(p.why, SL_PIN_TRACKING);
    answer(&p, &t3, 1);
    assert_int_equal(p.why, SL_PIN_TRACKING);
    RUN(&p, 1, "CLIENT", "TRACKING", "OFF");
    assert_false(sl_rcmd_pinned(&p));

    /* MULTI, EXEC, MULTI: the connection is in the second transaction */
    struct inflight m1 = SEND(&p, "MULTI"), e1 = SEND(&p, "EXEC"), m2 = SEND(&p, "MULTI");
    answer(&p, &m1, 1);
    answer(&p, &e1, 1);
    answer(&p, &m2, 1);
    assert_int_equal(p.why, SL_PIN_MULTI);
    RUN(&p, 1, "DISCARD");
    assert_false(sl_rcmd_pinned(&p));

    /* refused both, or refused after an end: nothing is left */
    struct inflight b1 = SEND(&p, "WATCH"), b2 = SEND(&p, "WATCH");
    answer(&p, &b1, 0);
    assert_true(sl_rcmd_pinned(&p));
    answer(&p, &b2, 0);
    assert_false(sl_rcmd_pinned(&p));
    struct inflight a1 = SEND(&p, "WATCH", "k"), a2 = SEND(&p, "UNWATCH"), a3 = SEND(&p, "WATCH");
    answer(&p, &a1, 1);
    answer(&p, &a2, 1);
    answer(&p, &a3, 0);
    assert_false(sl_rcmd_pinned(&p));
    /* the first refused, one in between accepted, the last refused */
    struct inflight c1 = SEND(&p, "READONLY", "x"), c2 = SEND(&p, "READONLY"),
                    c3 = SEND(&p, "READONLY", "y");
    answer(&p, &c1, 0);
    answer(&p, &c2, 1);
    answer(&p, &c3, 0);
    assert_int_equal(p.why, SL_PIN_READONLY);
    RUN(&p, 1, "READWRITE");
    assert_false(sl_rcmd_pinned(&p));

    /* still: a refused request alone leaves nothing, and RESET ends what
     * was written before it */
    struct inflight r1 = SEND(&p, "CLIENT", "NO-EVICT", "ON"), r2 = SEND(&p, "RESET");
    answer(&p, &r1, 1);
    answer(&p, &r2, 1);
    assert_false(sl_rcmd_pinned(&p));
    RUN(&p, 0, "WATCH");
    assert_false(sl_rcmd_pinned(&p));
}

/* An EXEC or DISCARD with no transaction open ends nothing: Redis refuses
 * it ("without MULTI") and keeps the keys watched. Pipelined behind an
 * earlier transaction, whose MULTI pin the tracker holds until that EXEC
 * is answered, what was written decides, not the pins (the pooled
 * differential fuzzer's seed 37 round 31). RESET, which ends a
 * transaction too, ends what it clears in one or not. */
static void test_pin_exec_without_multi(void **state)
{
    (void)state;
    struct sl_rcmd_pin p;
    static const char *const end[2] = { "EXEC", "DISCARD" };
    for (int k = 0; k < 2; k++) {
        /* alone: refused, the WATCH stays; its ends are cleared */
        pin_init(&p);
        RUN(&p, 1, "WATCH", "k");
        struct inflight e = SEND(&p, end[k]);
        assert_int_equal(e.info.ends, 0);
        assert_int_equal(e.info.ends_any, 0);
        answer(&p, &e, 0); /* -ERR EXEC without MULTI */
        assert_int_equal(p.why, SL_PIN_WATCH);
        RUN(&p, 1, "UNWATCH");
        assert_false(sl_rcmd_pinned(&p));

        /* MULTI EXEC WATCH k EXEC in one write: the second EXEC finds no
         * transaction, though the first one's MULTI pin is still held */
        struct inflight m = SEND(&p, "MULTI"), e1 = SEND(&p, "EXEC"),
                        w = SEND(&p, "WATCH", "k"), e2 = SEND(&p, end[k]);
        assert_true(e1.info.ends & SL_PIN_WATCH);
        answer(&p, &m, 1);
        answer(&p, &e1, 1);
        answer(&p, &w, 1);
        answer(&p, &e2, 0);
        assert_int_equal(p.why, SL_PIN_WATCH);

        /* inside a transaction it ends both, whatever it answers */
        RUN(&p, 1, "MULTI");
        RUN(&p, 0, end[k]); /* EXECABORT, say */
        assert_false(sl_rcmd_pinned(&p));
    }

    /* RESET with no transaction open ends what it clears */
    pin_init(&p);
    RUN(&p, 1, "WATCH", "k");
    struct inflight r = SEND(&p, "RESET");
    assert_int_equal(r.info.ends, SL_PIN_RESET_CLEARS);
    answer(&p, &r, 1);
    assert_false(sl_rcmd_pinned(&p));
    /* told directly: the same request, in a transaction or not */
    struct sl_rcmd_info o;
    struct sl_resp_req q = REQ("EXEC");
    sl_rcmd_class(&q, &o);
    struct sl_rcmd_info in = o;
    sl_rcmd_pin_sent(&p, &in, 1);
    assert_int_equal(in.ends, SL_PIN_MULTI | SL_PIN_WATCH);
    assert_int_equal(in.ends_any, 1);
    sl_rcmd_pin_sent(&p, &o, 0);
    assert_int_equal(o.ends, 0);
}

/* A pin the caller holds for a request whose class does not say it (a
 * HELLO queued in MULTI: its protocol is on the connection once EXEC runs
 * it) stays whatever a request written before it that wants the same pin
 * answers, and an end answered before it; an end written after it takes
 * it. Held with why |= SL_PIN_ODD, SELECT x's refusal took it. */
static void test_pin_hold(void **state)
{
    (void)state;
    struct sl_rcmd_pin p;
    pin_init(&p);
    struct inflight x = SEND(&p, "SELECT", "x"), m = SEND(&p, "MULTI"),
                    h = SEND(&p, "HELLO", "3"), e = SEND(&p, "EXEC");
    sl_rcmd_pin_hold(&p, h.token, SL_PIN_ODD);
    answer(&p, &x, 0); /* -ERR value is not an integer */
    answer(&p, &m, 1);
    answer(&p, &h, 1); /* +QUEUED */
    answer(&p, &e, 1);
    assert_int_equal(p.why, SL_PIN_ODD);
    RUN(&p, 1, "RESET");
    assert_false(sl_rcmd_pinned(&p));

    /* an end written before it, answered after it was held */
    struct inflight r = SEND(&p, "RESET"), k = SEND(&p, "HELLO", "3");
    sl_rcmd_pin_hold(&p, k.token, SL_PIN_ODD); /* its reply skipped, say */
    answer(&p, &r, 1);
    assert_int_equal(p.why, SL_PIN_ODD);
    /* a request written since that wants it, refused */
    RUN(&p, 0, "SELECT", "x");
    assert_int_equal(p.why, SL_PIN_ODD);
    RUN(&p, 1, "RESET");
    assert_false(sl_rcmd_pinned(&p));
}

/* Found by tests/fuzz/fuzz_resp_cmd.c: under CLIENT REPLY OFF, an UNWATCH
 * answered, then a WATCH whose reply was skipped (taken as a success: its
 * WATCH is on the connection) and a later WATCH refused: the end and the
 * refusal left the bit to the refused one, and the client went free with
 * a WATCH on its connection. */
static void test_pin_unseen_then_refused(void **state)
{
    (void)state;
    struct sl_rcmd_pin p;
    pin_init(&p);
    RUN(&p, 1, "CLIENT", "REPLY", "OFF");
    struct inflight u = SEND(&p, "UNWATCH");
    SEND(&p, "WATCH", "a"); /* its reply skipped: no answer comes */
    struct inflight w = SEND(&p, "WATCH", "k");
    answer(&p, &u, 1);
    answer(&p, &w, 0);
    assert_true(p.why & SL_PIN_WATCH);
}

static void test_pin_switches_and_reset(void **state)
{
    (void)state;
    struct sl_rcmd_pin p;
    pin_init(&p);
    RUN(&p, 1, "CLIENT", "TRACKING", "ON");
    RUN(&p, 0, "CLIENT", "TRACKING", "OFF", "BCAST"); /* refused: still tracking */
    assert_int_equal(p.why, SL_PIN_TRACKING);
    RUN(&p, 1, "CLIENT", "TRACKING", "off");
    assert_false(sl_rcmd_pinned(&p));
    /* refused when set: no state, no pin */
    RUN(&p, 0, "READONLY"); /* -ERR This instance has cluster support disabled */
    assert_false(sl_rcmd_pinned(&p));
    RUN(&p, 1, "READONLY");
    RUN(&p, 1, "CLIENT", "NO-EVICT", "on");
    RUN(&p, 1, "MONITOR");
    assert_true(sl_rcmd_pin_clean(&p));
    RUN(&p, 1, "RESET");
    assert_false(sl_rcmd_pinned(&p));
    /* an unknown command that succeeded: pinned for good, not clean */
    RUN(&p, 0, "FOO.BAR");
    assert_false(sl_rcmd_pinned(&p));
    RUN(&p, 1, "FOO.BAR");
    RUN(&p, 1, "RESET");
    assert_true(sl_rcmd_pinned(&p));
    assert_false(sl_rcmd_pin_clean(&p));
    /* an odd SELECT that Redis accepted after all: until RESET */
    pin_init(&p);
    RUN(&p, 0, "SELECT", "x");
    assert_false(sl_rcmd_pinned(&p));
    RUN(&p, 1, "SELECT", "x");
    assert_int_equal(p.why, SL_PIN_ODD);
    RUN(&p, 1, "RESET");
    assert_false(sl_rcmd_pinned(&p));
    /* a refused pin request keeps a pin set before it */
    RUN(&p, 1, "WATCH", "a");
    RUN(&p, 0, "WATCH", "b");
    assert_int_equal(p.why, SL_PIN_WATCH);
}

static void test_pool_key(void **state)
{
    (void)state;
    struct sl_pool_key k, d;
    sl_pool_key_default(&k);
    sl_pool_key_default(&d);
    assert_string_equal(k.user, "default");
    assert_int_equal(k.db, 0);
    assert_int_equal(k.resp, 2);
    assert_int_equal(sl_pool_key_cmp(&k, &d), 0);
    assert_int_equal(sl_pool_key_hash(&k), sl_pool_key_hash(&d));

    struct sl_rcmd_info o;
    struct sl_resp_req r = REQ("SELECT", "3");
    sl_rcmd_class(&r, &o);
    assert_false(sl_pool_key_apply(&k, &o, 0)); /* refused: the key stays */
    assert_int_equal(k.db, 0);
    assert_true(sl_pool_key_apply(&k, &o, 1));
    assert_int_equal(k.db, 3);
    assert_false(sl_pool_key_apply(&k, &o, 1)); /* the same again: no change */
    assert_int_not_equal(sl_pool_key_cmp(&k, &d), 0);

    r = REQ("HELLO", "3", "AUTH", "alice", "pw");
    sl_rcmd_class(&r, &o);
    assert_true(sl_pool_key_apply(&k, &o, 1));
    assert_string_equal(k.user, "alice");
    assert_int_equal(k.resp, 3);
    assert_int_equal(k.db, 3); /* HELLO keeps the database */

    r = REQ("AUTH", "pw2");
    sl_rcmd_class(&r, &o);
    assert_true(sl_pool_key_apply(&k, &o, 1));
    assert_string_equal(k.user, "default");
    assert_int_equal(k.resp, 3);

    r = REQ("HELLO");
    sl_rcmd_class(&r, &o);
    assert_false(sl_pool_key_apply(&k, &o, 1));

    r = REQ("GET", "k"); /* not a KEY request */
    sl_rcmd_class(&r, &o);
    assert_false(sl_pool_key_apply(&k, &o, 1));

    r = REQ("RESET");
    sl_rcmd_class(&r, &o);
    assert_true(sl_pool_key_apply(&k, &o, 1));
    assert_int_equal(sl_pool_key_cmp(&k, &d), 0);
    assert_int_equal(sl_pool_key_hash(&k), sl_pool_key_hash(&d));

    /* a user "alicf" after "alice": both differ, in order, and hash apart */
    struct sl_pool_key a, b;
    sl_pool_key_default(&a);
    sl_pool_key_default(&b);
    r = REQ("AUTH", "alice", "p");
    sl_rcmd_class(&r, &o);
    sl_pool_key_apply(&a, &o, 1);
    r = REQ("AUTH", "alicf", "p");
    sl_rcmd_class(&r, &o);
    sl_pool_key_apply(&b, &o, 1);
    assert_true(sl_pool_key_cmp(&a, &b) < 0);
    assert_true(sl_pool_key_cmp(&b, &a) > 0);
    assert_int_not_equal(sl_pool_key_hash(&a), sl_pool_key_hash(&b));
    /* a shorter name over a longer one leaves no bytes of it behind */
    r = REQ("AUTH", "al", "p");
    sl_rcmd_class(&r, &o);
    sl_pool_key_apply(&a, &o, 1);
    assert_string_equal(a.user, "al");
    assert_int_equal(a.user[3], 0);
}

static void test_name_ok(void **state)
{
    (void)state;
    assert_true(sl_rcmd_name_ok("app-1", 5));
    assert_true(sl_rcmd_name_ok("", 0));
    assert_false(sl_rcmd_name_ok("a b", 3));
    assert_false(sl_rcmd_name_ok("a\nb", 3));
    assert_false(sl_rcmd_name_ok("a\x7f", 2));
    assert_false(sl_rcmd_name_ok("\xc3\xa9", 2));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_data_commands),
        cmocka_unit_test(test_scripts_slow),
        cmocka_unit_test(test_unknown_pins),
        cmocka_unit_test(test_pins),
        cmocka_unit_test(test_xread_block),
        cmocka_unit_test(test_client_subcommands),
        cmocka_unit_test(test_auth),
        cmocka_unit_test(test_hello),
        cmocka_unit_test(test_select),
        cmocka_unit_test(test_reset_key),
        cmocka_unit_test(test_pin_multi_watch),
        cmocka_unit_test(test_pin_once_and_next),
        cmocka_unit_test(test_pin_unseen_then_refused),
        cmocka_unit_test(test_pin_switches_and_reset),
        cmocka_unit_test(test_pin_pipelined),
        cmocka_unit_test(test_pin_exec_without_multi),
        cmocka_unit_test(test_pin_hold),
        cmocka_unit_test(test_pool_key),
        cmocka_unit_test(test_name_ok),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

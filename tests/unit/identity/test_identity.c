/* Unit tests for src/identity/identity.c: what AUTH / HELLO / CLIENT SETNAME /
 * RESET teach, the order of identity sources, the first key of a broad sample
 * of Redis commands, the hashed form of unsafe values, and client addresses.
 * Requests go through the real framer (src/proto/resp.c), as in the proxy. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>

#include "identity/identity.h"
#include "proto/resp.h"

/* ---- building requests ------------------------------------------------------ */

/* Frames <len> bytes holding exactly one request and returns a copy of it. */
static struct sl_resp_req frame(const char *wire, size_t len)
{
    struct sl_resp st;
    struct sl_resp_req *q, out;

    assert_int_equal(sl_resp_init(&st, 0), 0);
    assert_int_equal(sl_resp_feed(&st, wire, len), 0);
    assert_int_equal(sl_resp_next(&st, &q), 1);
    out = *q;
    assert_int_equal(out.size, len);
    assert_int_equal(sl_resp_next(&st, &q), 0);
    sl_resp_free(&st);
    return out;
}

/* A multibulk request of <argc> arguments with explicit lengths (binary ok). */
static struct sl_resp_req reqv(int argc, const char *const *argv, const size_t *lens)
{
    static char wire[64 * 1024];
    size_t at = 0;

    at += (size_t)snprintf(wire + at, sizeof(wire) - at, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++) {
        at += (size_t)snprintf(wire + at, sizeof(wire) - at, "$%zu\r\n", lens[i]);
        assert_true(at + lens[i] + 2 < sizeof(wire));
        memcpy(wire + at, argv[i], lens[i]);
        at += lens[i];
        memcpy(wire + at, "\r\n", 2);
        at += 2;
    }
    return frame(wire, at);
}

/* A multibulk request of C strings. */
static struct sl_resp_req reqa(int argc, const char *const *argv)
{
    size_t lens[64];
    assert_true(argc <= 64);
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    return reqv(argc, argv, lens);
}

#define REQ(...) reqa((int)(sizeof((const char *[]){ __VA_ARGS__ }) / sizeof(const char *)), \
                      (const char *[]){ __VA_ARGS__ })

/* The first key's index of a request written as arguments. */
#define KEY(...) first_key(REQ(__VA_ARGS__))
static int first_key(struct sl_resp_req r)
{
    int k = sl_resp_first_key(&r);
    assert_true(k >= -1 && k < (int)r.ncap);
    return k;
}

/* ---- a listener's identity configuration ----------------------------------- */

static struct sl_listener_conf lconf(const char *sep, int n, ...)
{
    struct sl_listener_conf lc;
    va_list ap;

    memset(&lc, 0, sizeof(lc));
    snprintf(lc.key_prefix_separator, sizeof(lc.key_prefix_separator), "%s", sep);
    lc.n_identity = n;
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        lc.identity[i] = (enum sl_id_source)va_arg(ap, int);
    va_end(ap);
    return lc;
}

static void state_v4(struct sl_ident_state *st, const char *ip)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons(40000);
    assert_int_equal(inet_pton(AF_INET, ip, &a.sin_addr), 1);
    sl_identity_init(st, (const struct sockaddr *)&a);
}

/* The identity of <r> on <lc>, checked for shape. */
static const char *ident(const struct sl_listener_conf *lc, const struct sl_ident_state *st,
                         const struct sl_resp_req *r)
{
    static char out[SL_ID_MAX + 1];
    memset(out, 'Z', sizeof(out));
    size_t n = sl_identity_of(lc, st, r, out);
    assert_true(n >= 1 && n <= SL_ID_MAX);
    assert_int_equal(strlen(out), n);
    for (size_t i = 0; i < n; i++)
        assert_true(out[i] > ' ' && out[i] < 0x7f);
    return out;
}

/* Asserts <s> is the hashed form of source <tag>: "<tag>#" + 16 lowercase
 * hex digits. */
static void assert_hashed(const char *s, const char *tag)
{
    size_t tn = strlen(tag);
    assert_int_equal(strlen(s), tn + 17);
    assert_memory_equal(s, tag, tn);
    assert_int_equal(s[tn], '#');
    for (size_t i = tn + 1; i < tn + 17; i++)
        assert_true((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'));
}

static void observe(struct sl_ident_state *st, struct sl_resp_req r)
{
    sl_identity_observe(st, &r);
}

/* ---- observe ------------------------------------------------------------------ */

static void test_auth(void **state)
{
    (void)state;
    struct sl_ident_state st;
    state_v4(&st, "10.0.0.1");
    assert_string_equal(st.user, "");
    assert_string_equal(st.name, "");

    observe(&st, REQ("AUTH", "secret"));
    assert_string_equal(st.user, "user:default");
    observe(&st, REQ("AUTH", "alice", "secret"));
    assert_string_equal(st.user, "user:alice");
    observe(&st, REQ("auth", "bob", "pw"));
    assert_string_equal(st.user, "user:bob");
    observe(&st, REQ("AuTh", "pw"));
    assert_string_equal(st.user, "user:default");
    /* Syntax errors in Redis teach nothing. */
    observe(&st, REQ("AUTH", "carol", "pw", "extra"));
    assert_string_equal(st.user, "user:default");
    observe(&st, REQ("AUTH"));
    assert_string_equal(st.user, "user:default");
    /* An inline AUTH. */
    struct sl_resp_req r = frame("auth dave secret\r\n", 18);
    assert_int_equal(r.is_inline, 1);
    sl_identity_observe(&st, &r);
    assert_string_equal(st.user, "user:dave");
    assert_string_equal(st.name, "");
    /* The password never lands anywhere. */
    assert_null(memmem(&st, sizeof(st), "secret", 6));
    assert_true(sl_identity_learns(&r));
}

static void test_hello(void **state)
{
    (void)state;
    struct sl_ident_state st;
    state_v4(&st, "10.0.0.1");

    observe(&st, REQ("HELLO", "3"));
    assert_string_equal(st.user, "");
    assert_string_equal(st.name, "");
    observe(&st, REQ("HELLO"));
    assert_string_equal(st.user, "");

    observe(&st, REQ("HELLO", "3", "AUTH", "u", "p", "SETNAME", "n"));
    assert_string_equal(st.user, "user:u");
    assert_string_equal(st.name, "name:n");
    observe(&st, REQ("hello", "2", "setname", "m", "auth", "v", "p"));
    assert_string_equal(st.user, "user:v");
    assert_string_equal(st.name, "name:m");
    /* Without AUTH the user stays. */
    observe(&st, REQ("HELLO", "3", "SETNAME", "o"));
    assert_string_equal(st.user, "user:v");
    assert_string_equal(st.name, "name:o");
    /* Unsupported protocol: nothing. */
    observe(&st, REQ("HELLO", "4", "AUTH", "w", "p", "SETNAME", "x"));
    assert_string_equal(st.user, "user:v");
    assert_string_equal(st.name, "name:o");
    /* A bad option after AUTH: AUTH ran (as in Redis 7.0), the name did not. */
    observe(&st, REQ("HELLO", "3", "AUTH", "w", "p", "SETNAME", "x", "BOGUS"));
    assert_string_equal(st.user, "user:w");
    assert_string_equal(st.name, "name:o");
    /* AUTH without its password is a syntax error. */
    observe(&st, REQ("HELLO", "3", "AUTH", "y"));
    assert_string_equal(st.user, "user:w");
    /* A name Redis refuses. */
    observe(&st, REQ("HELLO", "3", "SETNAME", "a b"));
    assert_string_equal(st.name, "name:o");
}

static void test_client_setname(void **state)
{
    (void)state;
    struct sl_ident_state st;
    state_v4(&st, "10.0.0.1");

    observe(&st, REQ("CLIENT", "SETNAME", "worker-1"));
    assert_string_equal(st.name, "name:worker-1");
    observe(&st, REQ("client", "setname", "worker-2"));
    assert_string_equal(st.name, "name:worker-2");
    observe(&st, REQ("CLIENT", "SETNAME", "bad name")); /* refused by Redis */
    assert_string_equal(st.name, "name:worker-2");
    observe(&st, REQ("CLIENT", "SETNAME", "a", "b")); /* arity */
    assert_string_equal(st.name, "name:worker-2");
    observe(&st, REQ("CLIENT", "GETNAME"));
    assert_string_equal(st.name, "name:worker-2");
    observe(&st, REQ("CLIENT", "SETNAME", ""));
    assert_string_equal(st.name, "");
    assert_string_equal(st.user, "");
}

static void test_reset(void **state)
{
    (void)state;
    struct sl_ident_state st;
    state_v4(&st, "10.0.0.1");

    observe(&st, REQ("HELLO", "3", "AUTH", "u", "p", "SETNAME", "n"));
    observe(&st, REQ("RESET", "x")); /* arity: an error in Redis */
    assert_string_equal(st.user, "user:u");
    observe(&st, REQ("reset"));
    assert_string_equal(st.user, "");
    assert_string_equal(st.name, "");
    assert_string_equal(st.ip, "10.0.0.1");
}

static void test_learns(void **state)
{
    (void)state;
    struct sl_resp_req r;
    r = REQ("auth", "p");                 assert_true(sl_identity_learns(&r));
    r = REQ("HELLO", "3");                assert_true(sl_identity_learns(&r));
    r = REQ("Client", "SETNAME", "x");    assert_true(sl_identity_learns(&r));
    r = REQ("RESET");                     assert_true(sl_identity_learns(&r));
    r = REQ("GET", "k");                  assert_false(sl_identity_learns(&r));
    r = REQ("AUTHX", "p");                assert_false(sl_identity_learns(&r));
}

/* ---- sources in order ------------------------------------------------------- */

static void test_source_order(void **state)
{
    (void)state;
    struct sl_ident_state st;
    struct sl_resp_req get = REQ("GET", "user:42:x");
    struct sl_resp_req ping = REQ("PING");
    state_v4(&st, "192.0.2.7");

    struct sl_listener_conf user_ip = lconf(":", 2, SL_ID_RESP_USER, SL_ID_CLIENT_IP);
    assert_string_equal(ident(&user_ip, &st, &get), "ip:192.0.2.7");
    observe(&st, REQ("AUTH", "alice", "pw"));
    assert_string_equal(ident(&user_ip, &st, &get), "user:alice");

    struct sl_listener_conf ip_user = lconf(":", 2, SL_ID_CLIENT_IP, SL_ID_RESP_USER);
    assert_string_equal(ident(&ip_user, &st, &get), "ip:192.0.2.7");

    struct sl_listener_conf name_user = lconf(":", 3, SL_ID_CLIENT_NAME, SL_ID_RESP_USER,
                                              SL_ID_CLIENT_IP);
    assert_string_equal(ident(&name_user, &st, &get), "user:alice");
    observe(&st, REQ("CLIENT", "SETNAME", "svc"));
    assert_string_equal(ident(&name_user, &st, &get), "name:svc");
    observe(&st, REQ("CLIENT", "SETNAME", ""));
    assert_string_equal(ident(&name_user, &st, &get), "user:alice");

    /* key_prefix before the user; a command without a key falls through. */
    struct sl_listener_conf kp_user = lconf(":", 2, SL_ID_KEY_PREFIX, SL_ID_RESP_USER);
    assert_string_equal(ident(&kp_user, &st, &get), "prefix:user");
    assert_string_equal(ident(&kp_user, &st, &ping), "user:alice");
    assert_string_equal(ident(&kp_user, &st, NULL), "user:alice"); /* not RESP */

    /* Nothing yields: the client ip. */
    struct sl_listener_conf kp = lconf(":", 1, SL_ID_KEY_PREFIX);
    assert_string_equal(ident(&kp, &st, &ping), "ip:192.0.2.7");
    struct sl_listener_conf empty = lconf(":", 0);
    assert_string_equal(ident(&empty, &st, &get), "ip:192.0.2.7");
    struct sl_listener_conf hdr = lconf(":", 2, SL_ID_HEADER, SL_ID_RESP_USER);
    assert_string_equal(ident(&hdr, &st, &get), "user:alice");

    /* none: everyone is one identity, whatever comes after. */
    struct sl_listener_conf none = lconf(":", 2, SL_ID_NONE, SL_ID_RESP_USER);
    assert_string_equal(ident(&none, &st, &get), "all");
    struct sl_listener_conf name_none = lconf(":", 2, SL_ID_CLIENT_NAME, SL_ID_NONE);
    assert_string_equal(ident(&name_none, &st, &get), "all");

    /* After RESET the user is gone again. */
    observe(&st, REQ("RESET"));
    assert_string_equal(ident(&user_ip, &st, &get), "ip:192.0.2.7");
}

static void test_key_prefix(void **state)
{
    (void)state;
    struct sl_ident_state st;
    state_v4(&st, "192.0.2.7");
    struct sl_listener_conf colon = lconf(":", 1, SL_ID_KEY_PREFIX);
    struct sl_listener_conf dot = lconf(".", 1, SL_ID_KEY_PREFIX);
    struct sl_listener_conf dcolon = lconf("::", 1, SL_ID_KEY_PREFIX);
    struct sl_listener_conf nosep = lconf("", 1, SL_ID_KEY_PREFIX);
    struct sl_resp_req r;

    r = REQ("GET", "user:42:x");         assert_string_equal(ident(&colon, &st, &r), "prefix:user");
    r = REQ("get", "user:42:x");         assert_string_equal(ident(&colon, &st, &r), "prefix:user");
    r = REQ("GET", "tenant.a.b");        assert_string_equal(ident(&dot, &st, &r), "prefix:tenant");
    r = REQ("GET", "plain");             assert_string_equal(ident(&colon, &st, &r), "prefix:plain");
    r = REQ("GET", "plain");             assert_string_equal(ident(&dot, &st, &r), "prefix:plain");
    r = REQ("GET", "a:b::c");            assert_hashed(ident(&dcolon, &st, &r), "prefix");
    r = REQ("GET", "ab::c");             assert_string_equal(ident(&dcolon, &st, &r), "prefix:ab");
    r = REQ("GET", "a.b");               assert_string_equal(ident(&nosep, &st, &r), "prefix:a.b");
    r = REQ("SET", "sess.9:x", "v");     assert_string_equal(ident(&dot, &st, &r), "prefix:sess");
    r = REQ("MSET", "k1:a", "v", "k2:b", "w"); assert_string_equal(ident(&colon, &st, &r), "prefix:k1");
    r = REQ("EVAL", "return 1", "1", "acct:7", "arg"); assert_string_equal(ident(&colon, &st, &r), "prefix:acct");
    r = REQ("XINFO", "STREAM", "ev:1");  assert_string_equal(ident(&colon, &st, &r), "prefix:ev");

    /* The prefix with an unsafe byte, and the empty prefix, are hashed. */
    r = REQ("GET", "a:b.c");
    assert_hashed(ident(&dot, &st, &r), "prefix"); /* "a:b" holds ':' */
    r = REQ("GET", ":x");
    assert_hashed(ident(&colon, &st, &r), "prefix");
    r = REQ("GET", "");
    assert_hashed(ident(&colon, &st, &r), "prefix");
    r = REQ("GET", "{tag}:1");
    assert_hashed(ident(&colon, &st, &r), "prefix");

    /* A long key with the separator among its captured bytes: the prefix. */
    char key[200];
    memset(key, 'x', sizeof(key));
    memcpy(key, "tenant:", 7);
    key[150] = '\0';
    r = REQ("GET", key);
    assert_true(r.arglen[1] > SL_RESP_CAPTURE_LEN);
    assert_string_equal(ident(&colon, &st, &r), "prefix:tenant");
    /* The longest prefix kept as is: 63 bytes and the separator, captured.
     * With 64 bytes the separator is past the capture: hashed. */
    memset(key, 'p', 64);
    key[64] = ':';
    r = REQ("GET", key);
    assert_hashed(ident(&colon, &st, &r), "prefix");
    memset(key, 'p', 63);
    key[63] = ':';
    r = REQ("GET", key);
    char want[72];
    memcpy(want, "prefix:", 7);
    memset(want + 7, 'p', 63);
    want[70] = '\0';
    assert_string_equal(ident(&colon, &st, &r), want);
    /* A long key without the separator in what was captured: hashed, the
     * same identity for every key sharing those first bytes. */
    memset(key, 'q', 150);
    key[150] = '\0';
    r = REQ("GET", key);
    char a[SL_ID_MAX + 1];
    strcpy(a, ident(&colon, &st, &r));
    assert_hashed(a, "prefix");
    key[120] = '\0';
    r = REQ("GET", key);
    assert_string_equal(ident(&colon, &st, &r), a);
    key[70] = 'r';
    r = REQ("GET", key);
    assert_string_equal(ident(&colon, &st, &r), a);
    key[10] = 'r';
    r = REQ("GET", key);
    assert_string_not_equal(ident(&colon, &st, &r), a);
}

/* ---- first keys ----------------------------------------------------------------- */

static void test_first_key(void **state)
{
    (void)state;
    assert_int_equal(sl_resp_first_key_selftest(), 0);

    assert_int_equal(KEY("GET", "k"), 1);
    assert_int_equal(KEY("get", "k"), 1);
    assert_int_equal(KEY("GET"), -1);
    assert_int_equal(KEY("SET", "k", "v", "EX", "10"), 1);
    assert_int_equal(KEY("MSET", "a", "1", "b", "2"), 1);
    assert_int_equal(KEY("DEL", "a", "b", "c"), 1);
    assert_int_equal(KEY("HSET", "h", "f", "v"), 1);
    assert_int_equal(KEY("RESTORE-ASKING", "k", "0", "x"), 1);
    assert_int_equal(KEY("georadiusbymember_ro", "k", "m", "1", "km"), 1);
    assert_int_equal(KEY("SORT", "k", "BY", "w*"), 1);

    /* numkeys */
    assert_int_equal(KEY("EVAL", "return 1", "0"), -1);
    assert_int_equal(KEY("EVAL", "return 1", "0", "arg"), -1);
    assert_int_equal(KEY("EVAL", "return 1", "2", "k1", "k2", "a"), 3);
    assert_int_equal(KEY("EVAL", "return 1", "3", "k1", "k2"), -1); /* too few args */
    assert_int_equal(KEY("EVAL", "return 1", "x", "k1"), -1);
    assert_int_equal(KEY("EVAL", "return 1", "-1", "k1"), -1);
    assert_int_equal(KEY("EVAL", "return 1"), -1);
    assert_int_equal(KEY("EVALSHA", "abc", "1", "k"), 3);
    assert_int_equal(KEY("EVAL_RO", "return 1", "1", "k"), 3);
    assert_int_equal(KEY("FCALL", "f", "1", "k", "a"), 3);
    assert_int_equal(KEY("FCALL_RO", "f", "0"), -1);
    assert_int_equal(KEY("ZUNIONSTORE", "dst", "2", "a", "b"), 1);
    assert_int_equal(KEY("ZUNION", "2", "a", "b"), 2);
    assert_int_equal(KEY("ZINTER", "1", "a", "WITHSCORES"), 2);
    assert_int_equal(KEY("ZDIFF", "0", "a"), -1);
    assert_int_equal(KEY("SINTERCARD", "2", "a", "b", "LIMIT", "5"), 2);
    assert_int_equal(KEY("LMPOP", "2", "a", "b", "LEFT"), 2);
    assert_int_equal(KEY("ZMPOP", "1", "z", "MIN"), 2);
    assert_int_equal(KEY("BLMPOP", "0", "1", "a", "LEFT"), 3);
    assert_int_equal(KEY("BZMPOP", "1.5", "2", "a", "b", "MAX"), 3);

    /* STREAMS */
    assert_int_equal(KEY("XREAD", "COUNT", "10", "STREAMS", "s1", "s2", "0", "0"), 4);
    assert_int_equal(KEY("XREAD", "STREAMS", "s", "$"), 2);
    assert_int_equal(KEY("xread", "block", "0", "streams", "s", "$"), 4);
    assert_int_equal(KEY("XREAD", "STREAMS"), -1);
    assert_int_equal(KEY("XREAD", "STREAMS", "s1", "s2", "0"), -1); /* odd */
    assert_int_equal(KEY("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"), 5);
    assert_int_equal(KEY("XREADGROUP", "GROUP", "STREAMS", "STREAMS", "STREAMS", "s", ">"), 5);
    /* STREAMS past the captured arguments: unknown. */
    assert_int_equal(KEY("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "BLOCK", "0",
                         "STREAMS", "s", ">"), -1);

    /* containers */
    assert_int_equal(KEY("BITOP", "AND", "dest", "a", "b"), 2);
    assert_int_equal(KEY("OBJECT", "ENCODING", "k"), 2);
    assert_int_equal(KEY("object", "freq", "k"), 2);
    assert_int_equal(KEY("OBJECT", "HELP"), -1);
    assert_int_equal(KEY("MEMORY", "USAGE", "k", "SAMPLES", "5"), 2);
    assert_int_equal(KEY("MEMORY", "STATS"), -1);
    assert_int_equal(KEY("XINFO", "STREAM", "k", "FULL"), 2);
    assert_int_equal(KEY("XINFO", "GROUPS", "k"), 2);
    assert_int_equal(KEY("XGROUP", "CREATE", "s", "g", "$"), 2);
    assert_int_equal(KEY("XGROUP", "HELP"), -1);
    assert_int_equal(KEY("PFDEBUG", "GETREG", "k"), 2);
    assert_int_equal(KEY("CLIENT", "SETNAME", "x"), -1);
    assert_int_equal(KEY("CONFIG", "GET", "maxmemory"), -1);
    assert_int_equal(KEY("SCRIPT", "LOAD", "return 1"), -1);
    assert_int_equal(KEY("COMMAND", "GETKEYS", "GET", "k"), -1);

    /* MIGRATE */
    assert_int_equal(KEY("MIGRATE", "h", "6379", "k", "0", "5000"), 3);
    assert_int_equal(KEY("MIGRATE", "h", "6379", "", "0", "5000", "KEYS", "a", "b"), -1);

    /* no key */
    assert_int_equal(KEY("PING"), -1);
    assert_int_equal(KEY("PING", "hello"), -1);
    assert_int_equal(KEY("PUBLISH", "ch", "msg"), -1);
    assert_int_equal(KEY("SUBSCRIBE", "a", "b"), -1);
    assert_int_equal(KEY("PSUBSCRIBE", "a*"), -1);
    assert_int_equal(KEY("SCAN", "0", "MATCH", "x*"), -1);
    assert_int_equal(KEY("KEYS", "*"), -1);
    assert_int_equal(KEY("AUTH", "u", "p"), -1);
    assert_int_equal(KEY("SELECT", "1"), -1);
    assert_int_equal(KEY("INFO", "all"), -1);
    assert_int_equal(KEY("MULTI"), -1);
    assert_int_equal(KEY("HELLO", "3"), -1);
    assert_int_equal(KEY("WAIT", "1", "0"), -1);
    assert_int_equal(KEY("FLUSHALL", "ASYNC"), -1);
    /* Sharded pub/sub channels are keys to Redis (they pick the slot). */
    assert_int_equal(KEY("SPUBLISH", "ch", "m"), 1);

    /* unknown commands (modules): 1 if there is an argument */
    assert_int_equal(KEY("JSON.GET", "doc", "$"), 1);
    assert_int_equal(KEY("FOO"), -1);
    assert_int_equal(KEY("GETX", "k"), 1);
    assert_int_equal(KEY("GE", "k"), 1);

    /* names that cannot match: longer than any command, binary, cut */
    const char *bin[] = { "G\0T", "k" };
    size_t binlen[] = { 3, 1 };
    struct sl_resp_req r = reqv(2, bin, binlen);
    assert_int_equal(sl_resp_first_key(&r), 1);
    char longname[100];
    memset(longname, 'P', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    assert_int_equal(KEY(longname, "x"), 1);
    assert_int_equal(KEY(longname), -1);

    /* empty request */
    struct sl_resp_req empty;
    memset(&empty, 0, sizeof(empty));
    assert_int_equal(sl_resp_first_key(&empty), -1);
    assert_int_equal(sl_resp_first_key(NULL), -1);
}

/* ---- hashing -------------------------------------------------------------------- */

static void test_hash(void **state)
{
    (void)state;
    char h1[SL_ID_MAX + 1], h2[SL_ID_MAX + 1];

    sl_identity_hash(SL_ID_RESP_USER, "alice", 5, h1);
    assert_hashed(h1, "user");
    sl_identity_hash(SL_ID_RESP_USER, "alice", 5, h2);
    assert_string_equal(h1, h2);
    sl_identity_hash(SL_ID_RESP_USER, "alicf", 5, h2);
    assert_string_not_equal(h1, h2);
    sl_identity_hash(SL_ID_RESP_USER, "", 0, h2);
    assert_hashed(h2, "user");
    /* Per source: the same bytes hash apart, in the text and in the digits. */
    sl_identity_hash(SL_ID_CLIENT_NAME, "alice", 5, h2);
    assert_hashed(h2, "name");
    assert_string_not_equal(h1 + 4, h2 + 4);
    sl_identity_hash(SL_ID_KEY_PREFIX, "alice", 5, h2);
    assert_hashed(h2, "prefix");
    /* Pinned: identities live in a store shared by instances and releases,
     * so the hash must never change (SipHash-2-4 under the fixed key, of
     * the tag, a NUL, the bytes, the length as 8 bytes little-endian). */
    sl_identity_hash(SL_ID_RESP_USER, "alice", 5, h1);
    assert_string_equal(h1, "user#a6105dc1a574b304");
    sl_identity_hash(SL_ID_CLIENT_NAME, "", 0, h1);
    assert_string_equal(h1, "name#2c12a90be207c01a");

    struct sl_ident_state st;
    struct sl_listener_conf user = lconf(":", 1, SL_ID_RESP_USER);
    state_v4(&st, "10.0.0.1");

    /* Quotes, backslash, blank, braces, ':' and control bytes: hashed. */
    const char *bad[] = { "o'brien", "say\"hi", "back\\slash", "sp ace", "{t}", "a:b",
                          "tab\t", "del\x7f", "caf\xc3\xa9" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        observe(&st, REQ("AUTH", bad[i], "pw"));
        assert_hashed(st.user, "user");
        char want[SL_ID_MAX + 1];
        sl_identity_hash(SL_ID_RESP_USER, bad[i], strlen(bad[i]), want);
        assert_string_equal(ident(&user, &st, NULL), want);
    }
    /* Fine as they are. */
    const char *good[] = { "alice", "svc-1", "a.b_c", "x@y", "~!$%&*()+=[]|;<>,?/`^", "#h" };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        char want[SL_ID_MAX + 1];
        observe(&st, REQ("AUTH", good[i], "pw"));
        snprintf(want, sizeof(want), "user:%s", good[i]);
        assert_string_equal(ident(&user, &st, NULL), want);
    }

    /* Binary, with a NUL inside. */
    const char *argv[] = { "AUTH", "a\0b", "pw" };
    size_t lens[] = { 4, 3, 2 };
    struct sl_resp_req r = reqv(3, argv, lens);
    sl_identity_observe(&st, &r);
    sl_identity_hash(SL_ID_RESP_USER, "a\0b", 3, h1);
    assert_string_equal(st.user, h1);
    sl_identity_hash(SL_ID_RESP_USER, "a", 1, h2);
    assert_string_not_equal(h1, h2);

    /* An empty user name is still a user. */
    observe(&st, REQ("AUTH", "", "pw"));
    assert_hashed(ident(&user, &st, NULL), "user");

    /* Long values: 64 bytes as they are; longer ones hashed, stable, and
     * telling apart values cut to the same captured bytes. */
    char v[300], want64[400];
    memset(v, 'u', sizeof(v));
    v[64] = '\0';
    observe(&st, REQ("AUTH", v, "pw"));
    snprintf(want64, sizeof(want64), "user:%s", v);
    assert_int_equal(strlen(want64), 69);
    assert_string_equal(ident(&user, &st, NULL), want64);
    v[64] = 'u';
    v[100] = '\0';
    observe(&st, REQ("AUTH", v, "pw"));
    char long100[SL_ID_MAX + 1];
    strcpy(long100, ident(&user, &st, NULL));
    assert_hashed(long100, "user");
    observe(&st, REQ("AUTH", "x", "pw"));
    observe(&st, REQ("AUTH", v, "pw"));
    assert_string_equal(ident(&user, &st, NULL), long100);
    v[100] = 'u';
    v[101] = '\0';
    observe(&st, REQ("AUTH", v, "pw"));
    assert_hashed(ident(&user, &st, NULL), "user");
    assert_string_not_equal(ident(&user, &st, NULL), long100);
    v[101] = 'u';
    v[299] = '\0';
    observe(&st, REQ("CLIENT", "SETNAME", v));
    assert_hashed(st.name, "name");

    /* A name holding an unsafe byte Redis accepts ('{'): hashed too. */
    observe(&st, REQ("CLIENT", "SETNAME", "{x}"));
    assert_hashed(st.name, "name");
}

/* SipHash-2-4 itself: the paper's test vectors (key 00..0f, messages
 * 00, 01, 02, ...), whose first bytes also cover the fed-in-pieces path. */
static void test_siphash(void **state)
{
    (void)state;
    uint8_t key[16], msg[64];
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)i;
    for (int i = 0; i < 64; i++)
        msg[i] = (uint8_t)i;
    assert_true(sl_identity_siphash(key, msg, 0) == 0x726fdb47dd0e0e31ull);
    assert_true(sl_identity_siphash(key, msg, 1) == 0x74f839c593dc67fdull);
    assert_true(sl_identity_siphash(key, msg, 7) == 0xab0200f58b01d137ull);
    assert_true(sl_identity_siphash(key, msg, 8) == 0x93f5f5799a932462ull);
    assert_true(sl_identity_siphash(key, msg, 15) == 0xa129ca6149be45e5ull);
    assert_true(sl_identity_siphash(key, msg, 63) == 0x958a324ceb064572ull);
}

/* Issue 11: one source must never name another's identity. Each of these
 * shared a bucket before identities carried their source. */
static void test_no_forgery(void **state)
{
    (void)state;
    struct sl_listener_conf lc = lconf(":", 3, SL_ID_RESP_USER, SL_ID_CLIENT_NAME, SL_ID_CLIENT_IP);
    struct sl_resp_req get = REQ("GET", "k");
    struct sl_ident_state victim, mallory;
    char want[SL_ID_MAX + 1];

    /* CLIENT SETNAME 127.0.0.1 is not the client at 127.0.0.1. */
    state_v4(&victim, "127.0.0.1");
    state_v4(&mallory, "10.9.9.9");
    observe(&mallory, REQ("CLIENT", "SETNAME", "127.0.0.1"));
    strcpy(want, ident(&lc, &victim, &get));
    assert_string_equal(want, "ip:127.0.0.1");
    assert_string_not_equal(ident(&lc, &mallory, &get), want);
    assert_string_equal(ident(&lc, &mallory, &get), "name:127.0.0.1");

    /* CLIENT SETNAME carol is not AUTH user carol (nor HELLO SETNAME). */
    observe(&victim, REQ("AUTH", "carol", "pw"));
    strcpy(want, ident(&lc, &victim, &get));
    assert_string_equal(want, "user:carol");
    state_v4(&mallory, "10.9.9.9");
    observe(&mallory, REQ("CLIENT", "SETNAME", "carol"));
    assert_string_not_equal(ident(&lc, &mallory, &get), want);
    state_v4(&mallory, "10.9.9.9");
    observe(&mallory, REQ("HELLO", "3", "SETNAME", "carol"));
    assert_string_not_equal(ident(&lc, &mallory, &get), want);

    /* A literal name that looks like a hash is not the long name that
     * hashes to it, nor any other source's value with that hash. */
    char longname[101];
    memset(longname, 'n', 100);
    longname[100] = '\0';
    state_v4(&victim, "127.0.0.1");
    observe(&victim, REQ("CLIENT", "SETNAME", longname));
    strcpy(want, ident(&lc, &victim, &get));
    assert_hashed(want, "name");
    state_v4(&mallory, "10.9.9.9");
    observe(&mallory, REQ("CLIENT", "SETNAME", want + 4)); /* "#<16 hex>" */
    assert_string_not_equal(ident(&lc, &mallory, &get), want);
    char lit[SL_ID_MAX + 16];
    snprintf(lit, sizeof(lit), "name:%s", want + 4);
    assert_string_equal(ident(&lc, &mallory, &get), lit);
    /* ... and the whole text of the hashed form as a name: ':' is unsafe,
     * '#' is not, so "name#..." is kept as a literal after "name:". */
    state_v4(&mallory, "10.9.9.9");
    observe(&mallory, REQ("CLIENT", "SETNAME", want));
    snprintf(lit, sizeof(lit), "name:%s", want);
    assert_string_equal(ident(&lc, &mallory, &get), lit);
    /* The same long value as a user is another identity. */
    state_v4(&mallory, "10.9.9.9");
    observe(&mallory, REQ("AUTH", longname, "pw"));
    assert_hashed(ident(&lc, &mallory, &get), "user");
    assert_string_not_equal(ident(&lc, &mallory, &get) + 4, want + 4);

    /* key_prefix and none: their own forms. */
    struct sl_listener_conf kp = lconf(":", 2, SL_ID_KEY_PREFIX, SL_ID_CLIENT_IP);
    struct sl_resp_req k = REQ("GET", "127.0.0.1:x");
    state_v4(&mallory, "10.9.9.9");
    assert_string_equal(ident(&kp, &mallory, &k), "prefix:127.0.0.1");
    struct sl_resp_req all = REQ("GET", "all");
    assert_string_equal(ident(&kp, &mallory, &all), "prefix:all");
}

/* match_identity entries as the limiter compares them. */
static void test_canon(void **state)
{
    (void)state;
    char out[SL_ID_MAX + 1], h[SL_ID_MAX + 1];

    assert_int_equal(sl_identity_canon("user:carol", out), 10);
    assert_string_equal(out, "user:carol");
    sl_identity_canon("name:#03b69dd1582e6208", out);
    assert_string_equal(out, "name:#03b69dd1582e6208");
    sl_identity_canon("ip:::1", out);
    assert_string_equal(out, "ip:::1");
    sl_identity_canon("all", out);
    assert_string_equal(out, "all");
    sl_identity_canon("prefix#0123456789abcdef", out);
    assert_string_equal(out, "prefix#0123456789abcdef");
    /* A value identities carry hashed is compared in its hashed form. */
    char entry[128], v[101];
    memset(v, 'n', 100);
    v[100] = '\0';
    snprintf(entry, sizeof(entry), "user:%s", v);
    sl_identity_canon(entry, out);
    sl_identity_hash(SL_ID_RESP_USER, v, 100, h);
    assert_string_equal(out, h);
    sl_identity_canon("name:caf\xc3\xa9", out);
    sl_identity_hash(SL_ID_CLIENT_NAME, "caf\xc3\xa9", 5, h);
    assert_string_equal(out, h);
    /* No source: no identity. */
    assert_int_equal(sl_identity_canon("carol", out), 0);
    assert_int_equal(sl_identity_canon("*", out), 0);
    assert_int_equal(sl_identity_canon("users:x", out), 0);
    assert_int_equal(sl_identity_canon("#03b69dd1582e6208", out), 0);
}

/* ---- client addresses -------------------------------------------------------------- */

static void test_client_ip(void **state)
{
    (void)state;
    struct sl_ident_state st;
    struct sl_listener_conf ip = lconf(":", 1, SL_ID_CLIENT_IP);
    struct sl_resp_req get = REQ("GET", "k");

    state_v4(&st, "203.0.113.9");
    assert_string_equal(st.ip, "203.0.113.9");
    assert_string_equal(ident(&ip, &st, &get), "ip:203.0.113.9");

    struct sockaddr_in6 a6;
    memset(&a6, 0, sizeof(a6));
    a6.sin6_family = AF_INET6;
    a6.sin6_port = htons(5555);
    assert_int_equal(inet_pton(AF_INET6, "::1", &a6.sin6_addr), 1);
    sl_identity_init(&st, (const struct sockaddr *)&a6);
    assert_string_equal(st.ip, "::1");
    assert_string_equal(ident(&ip, &st, &get), "ip:::1");

    assert_int_equal(inet_pton(AF_INET6, "2001:db8:0:0:1:0:0:1", &a6.sin6_addr), 1);
    sl_identity_init(&st, (const struct sockaddr *)&a6);
    assert_string_equal(st.ip, "2001:db8::1:0:0:1");

    assert_int_equal(inet_pton(AF_INET6, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                               &a6.sin6_addr), 1);
    sl_identity_init(&st, (const struct sockaddr *)&a6);
    assert_string_equal(ident(&ip, &st, &get), "ip:ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff");

    /* IPv4-mapped: the same client as over IPv4. */
    assert_int_equal(inet_pton(AF_INET6, "::ffff:10.1.2.3", &a6.sin6_addr), 1);
    sl_identity_init(&st, (const struct sockaddr *)&a6);
    assert_string_equal(st.ip, "10.1.2.3");

    sl_identity_init(&st, NULL);
    assert_string_equal(st.ip, "unknown");
    assert_string_equal(ident(&ip, &st, &get), "ip:unknown");

    struct sockaddr_un un;
    memset(&un, 0, sizeof(un));
    un.sun_family = AF_UNIX;
    sl_identity_init(&st, (const struct sockaddr *)&un);
    assert_string_equal(st.ip, "unknown");

    /* A fresh state forgets everything. */
    state_v4(&st, "10.0.0.1");
    observe(&st, REQ("AUTH", "alice", "pw"));
    state_v4(&st, "10.0.0.2");
    assert_string_equal(st.user, "");
}

/* ---- HTTP requests ---------------------------------------------------------- */

#include "conf/conf.h"

/* A head as the framer would give it: "<method> <path> HTTP/1.1" and the
 * fields, given as name, value pairs (NULL-ended); values as sent, without
 * surrounding blanks. Points into static storage (one head at a time). */
static struct sl_http_head http_head(const char *method, const char *path,
                                     const char *const *fv)
{
    static char buf[8192];
    static struct sl_http_field fields[64];
    struct sl_http_head hd;
    size_t at = 0;
    memset(&hd, 0, sizeof(hd));
    hd.is_request = 1;
    hd.minor = 1;
    hd.method_off = 0;
    hd.method_len = (uint32_t)strlen(method);
    at += (size_t)snprintf(buf, sizeof(buf), "%s ", method);
    hd.target_off = hd.path_off = (uint32_t)at;
    hd.target_len = hd.path_len = (uint32_t)strlen(path);
    at += (size_t)snprintf(buf + at, sizeof(buf) - at, "%s HTTP/1.1\r\n", path);
    uint32_t n = 0;
    for (; fv != NULL && fv[2 * n] != NULL; n++) {
        assert_true(n < 64);
        fields[n].name = (uint32_t)at;
        fields[n].name_len = (uint32_t)strlen(fv[2 * n]);
        at += (size_t)snprintf(buf + at, sizeof(buf) - at, "%s: ", fv[2 * n]);
        fields[n].value = (uint32_t)at;
        fields[n].value_len = (uint32_t)strlen(fv[2 * n + 1]);
        at += (size_t)snprintf(buf + at, sizeof(buf) - at, "%s\r\n", fv[2 * n + 1]);
        assert_true(at < sizeof(buf) - 2);
    }
    at += (size_t)snprintf(buf + at, sizeof(buf) - at, "\r\n");
    hd.buf = buf;
    hd.len = (uint32_t)at;
    hd.fields = fields;
    hd.nfields = n;
    return hd;
}

/* A listener from configuration lines after "protocol = http". */
static struct sl_conf *http_conf(const char *lines)
{
    char text[1024];
    snprintf(text, sizeof(text), "[listener w]\nlisten = 127.0.0.1:8080\n"
             "upstream = 127.0.0.1:8081\nprotocol = http\n%s", lines);
    struct sl_conf *c = sl_conf_load_string(text, "t.ini", stderr);
    assert_non_null(c);
    return c;
}

/* The identity of request <hd> on <c>'s listener from peer <peer>. */
static const char *http_id(const struct sl_conf *c, const char *peer, const struct sl_http_head *hd)
{
    static char out[SL_ID_MAX + 1];
    struct sl_ident_state st;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    if (strchr(peer, ':') != NULL) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        assert_int_equal(inet_pton(AF_INET6, peer, &a->sin6_addr), 1);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        assert_int_equal(inet_pton(AF_INET, peer, &a->sin_addr), 1);
    }
    sl_identity_init(&st, (const struct sockaddr *)&ss);
    struct sl_req r = { .resp = NULL, .http = hd };
    size_t n = sl_identity_of_req(c->listeners, &st, &r, out);
    assert_int_equal(n, strlen(out));
    return out;
}

/* tls_subject: the certificate's whole name. A short safe name is
 * "tls:NAME"; a long one is hashed over every byte (and its length), so
 * names alike in their first 255 (or 1000) bytes stay apart. */
static void test_tls_identity(void **state)
{
    (void)state;
    struct sl_ident_state st;
    char a[SL_ID_MAX + 1], b[SL_ID_MAX + 1];
    struct sl_listener_conf tls_ip = lconf(":", 2, SL_ID_TLS_SUBJECT, SL_ID_CLIENT_IP);
    struct sl_resp_req ping = REQ("PING");
    state_v4(&st, "192.0.2.7");
    assert_string_equal(ident(&tls_ip, &st, &ping), "ip:192.0.2.7");
    sl_identity_set_tls(&st, "client-alice", 12);
    assert_string_equal(ident(&tls_ip, &st, &ping), "tls:client-alice");
    assert_int_equal(sl_identity_uses(&tls_ip, SL_ID_TLS_SUBJECT), 1);
    assert_int_equal(sl_identity_uses(&tls_ip, SL_ID_RESP_USER), 0);

    static char n1[2000], n2[2000];
    for (size_t len = 256; len <= sizeof n1; len *= 2) {
        memset(n1, 'a', len);
        memcpy(n2, n1, len);
        n2[len - 1] = 'b'; /* the last byte differs */
        sl_identity_set_tls(&st, n1, len);
        snprintf(a, sizeof a, "%s", st.tls);
        sl_identity_set_tls(&st, n2, len);
        snprintf(b, sizeof b, "%s", st.tls);
        assert_memory_equal(a, "tls#", 4);
        assert_string_not_equal(a, b);
        sl_identity_set_tls(&st, n1, len - 1); /* a prefix of the other */
        assert_string_not_equal(st.tls, a);
        sl_identity_set_tls(&st, n1, len);
        assert_string_equal(st.tls, a); /* the same name, the same identity */
    }
    /* every byte counts, a NUL too (the session refuses such a name) */
    sl_identity_set_tls(&st, "client-alice\0.x", 15);
    assert_memory_equal(st.tls, "tls#", 4);
    sl_identity_set_tls(&st, "", 0);
    assert_string_equal(ident(&tls_ip, &st, &ping), "ip:192.0.2.7");
}

/* header:NAME: always the hashed form, over the name and the value, the
 * same a match_identity entry canonicalises to; the value shows nowhere. */
static void test_http_header_identity(void **state)
{
    (void)state;
    struct sl_conf *c = http_conf("identity = header:X-Api-Key header:X-Tenant client_ip\n");
    char canon[SL_ID_MAX + 1], id[SL_ID_MAX + 1];

    struct sl_http_head hd = http_head("GET", "/", (const char *const[]){ "x-api-key", "k123",
                                                                      NULL });
    snprintf(id, sizeof(id), "%s", http_id(c, "192.0.2.1", &hd));
    assert_int_equal(strlen(id), 7 + 16);
    assert_memory_equal(id, "header#", 7);
    assert_int_equal(strspn(id + 7, "0123456789abcdef"), 16);
    assert_null(strstr(id, "k123"));
    assert_int_equal(sl_identity_canon("header:x-api-key:k123", canon), 23);
    assert_string_equal(canon, id);
    assert_int_equal(sl_identity_canon("header:X-API-KEY:k123", canon), 23);
    assert_string_equal(canon, id);
    sl_identity_canon("header:x-api-key:k124", canon);
    assert_string_not_equal(canon, id);
    /* The same value in another header is another identity. */
    sl_identity_canon("header:x-tenant:k123", canon);
    assert_string_not_equal(canon, id);
    hd = http_head("GET", "/", (const char *const[]){ "X-Tenant", "k123", NULL });
    assert_string_equal(http_id(c, "192.0.2.1", &hd), canon);
    /* First source first, whatever the order of the fields (a request
     * with two fields of a name never gets here: see test_http_check). */
    hd = http_head("GET", "/", (const char *const[]){ "X-Tenant", "t", "X-Api-Key", "k123",
                                                      "X-Api-Key", "other", NULL });
    assert_string_equal(http_id(c, "192.0.2.1", &hd), id);
    /* Absent or empty: the next source. */
    hd = http_head("GET", "/", (const char *const[]){ "X-Api-Key", "", "Host", "a", NULL });
    assert_string_equal(http_id(c, "192.0.2.1", &hd), "ip:192.0.2.1");
    /* A long or odd value is hashed like any other. */
    char big[1001];
    memset(big, 'k', 1000);
    big[1000] = '\0';
    big[10] = '"';
    hd = http_head("GET", "/", (const char *const[]){ "X-Api-Key", big, NULL });
    const char *h = http_id(c, "192.0.2.1", &hd);
    assert_int_equal(strlen(h), 23);
    char entry[1100];
    snprintf(entry, sizeof(entry), "header:X-Api-Key:%s", big);
    sl_identity_canon(entry, canon);
    assert_string_equal(canon, h);
    /* Hashed forms stand for themselves; a broken entry for nothing. */
    assert_int_equal(sl_identity_canon("header#0123456789abcdef", canon), 23);
    assert_string_equal(canon, "header#0123456789abcdef");
    assert_int_equal(sl_identity_canon("header:novalue", canon), 0);
    assert_int_equal(sl_identity_canon("header::v", canon), 0);
    sl_conf_free(c);

    /* none, and the resp sources (nothing in an HTTP request). */
    c = http_conf("identity = none\n");
    hd = http_head("GET", "/", NULL);
    assert_string_equal(http_id(c, "192.0.2.1", &hd), "all");
    sl_conf_free(c);
    /* No request, or a RESP one: as sl_identity_of(). */
    c = http_conf("identity = header:X-Api-Key\n");
    struct sl_ident_state st;
    sl_identity_init(&st, NULL);
    char out[SL_ID_MAX + 1];
    sl_identity_of_req(c->listeners, &st, NULL, out);
    assert_string_equal(out, "ip:unknown");
    struct sl_req none = { .resp = NULL, .http = NULL };
    sl_identity_of_req(c->listeners, &st, &none, out);
    assert_string_equal(out, "ip:unknown");
    sl_conf_free(c);
}

/* The check that refuses a request whose identity could be read two
 * ways: a header source meeting two fields, or a comma list, up to the
 * source that yields. */
static int http_check(const struct sl_conf *c, const struct sl_http_head *hd, char *why)
{
    struct sl_ident_state st;
    sl_identity_init(&st, NULL);
    why[0] = '\0';
    return sl_identity_http_check(c->listeners, &st, hd, why, 160);
}

static void test_http_check(void **state)
{
    (void)state;
    char why[160];
    struct sl_conf *c = http_conf("identity = header:X-Api-Key header:X-Tenant client_ip\n");
    struct sl_http_head hd = http_head("GET", "/", (const char *const[]){ "X-Api-Key", "k1",
                                                                      NULL });
    assert_int_equal(http_check(c, &hd, why), 0);
    hd = http_head("GET", "/", (const char *const[]){ "X-Api-Key", "k1", "x-api-key", "k2", NULL });
    assert_int_equal(http_check(c, &hd, why), -1);
    assert_non_null(strstr(why, "more than one X-Api-Key"));
    assert_null(strstr(why, "k1"));
    hd = http_head("GET", "/", (const char *const[]){ "X-Api-Key", "", "X-Api-Key", "k2", NULL });
    assert_int_equal(http_check(c, &hd, why), -1);
    hd = http_head("GET", "/", (const char *const[]){ "X-Api-Key", "k1, k2", NULL });
    assert_int_equal(http_check(c, &hd, why), -1);
    assert_non_null(strstr(why, "comma"));
    /* the key yields: what comes after it is not the identity's */
    hd = http_head("GET", "/", (const char *const[]){ "X-Api-Key", "k1", "X-Tenant", "a",
                                                      "X-Tenant", "b", NULL });
    assert_int_equal(http_check(c, &hd, why), 0);
    /* no key: the tenant is the identity, and two of them are refused */
    hd = http_head("GET", "/", (const char *const[]){ "X-Tenant", "a", "X-Tenant", "b", NULL });
    assert_int_equal(http_check(c, &hd, why), -1);
    assert_non_null(strstr(why, "X-Tenant"));
    /* an empty key yields nothing: the next source */
    hd = http_head("GET", "/", (const char *const[]){ "X-Api-Key", "", "X-Tenant", "a,b", NULL });
    assert_int_equal(http_check(c, &hd, why), -1);
    hd = http_head("GET", "/", (const char *const[]){ "Host", "a", NULL });
    assert_int_equal(http_check(c, &hd, why), 0);
    sl_conf_free(c);

    /* client_ip first: headers are never the identity */
    c = http_conf("identity = client_ip header:X-Api-Key\n");
    hd = http_head("GET", "/", (const char *const[]){ "X-Api-Key", "a", "X-Api-Key", "b", NULL });
    assert_int_equal(http_check(c, &hd, why), 0);
    sl_conf_free(c);

    /* fields whose grammar holds commas: one value; two fields still not */
    c = http_conf("identity = header:Authorization\n");
    hd = http_head("GET", "/", (const char *const[]){ "Authorization",
                                                      "Digest username=\"u\", realm=\"r\"", NULL });
    assert_int_equal(http_check(c, &hd, why), 0);
    hd = http_head("GET", "/", (const char *const[]){ "Authorization", "Bearer a",
                                                      "Authorization", "Bearer b", NULL });
    assert_int_equal(http_check(c, &hd, why), -1);
    sl_conf_free(c);
    c = http_conf("identity = header:User-Agent\n");
    hd = http_head("GET", "/", (const char *const[]){ "User-Agent",
                                                      "Mozilla/5.0 (KHTML, like Gecko)", NULL });
    assert_int_equal(http_check(c, &hd, why), 0);
    sl_conf_free(c);
}

/* client_ip behind trusted proxies: the right-most X-Forwarded-For
 * address that is not a trusted proxy. */
static void test_http_forwarded_for(void **state)
{
    (void)state;
    struct sl_conf *c = http_conf("trusted_proxies = 10.0.0.0/8 fd00::/8\n");
#define XFF(peer, want, ...)                                                                   \
    do {                                                                                       \
        struct sl_http_head hd_ = http_head("GET", "/", (const char *const[]){ __VA_ARGS__ }); \
        assert_string_equal(http_id(c, peer, &hd_), want);                                     \
    } while (0)
    /* An untrusted peer: the header is the client's word, ignored. */
    XFF("192.0.2.1", "ip:192.0.2.1", "X-Forwarded-For", "203.0.113.5", NULL);
    /* A trusted peer: the address it saw. */
    XFF("10.0.0.1", "ip:203.0.113.5", "X-Forwarded-For", "203.0.113.5", NULL);
    XFF("10.0.0.1", "ip:10.0.0.1", "Host", "a", NULL);
    /* Entries left of the first untrusted one are the client's: spoofed. */
    XFF("10.0.0.1", "ip:203.0.113.5", "X-Forwarded-For", "6.6.6.6, 203.0.113.5, 10.1.1.1", NULL);
    XFF("10.0.0.1", "ip:203.0.113.5", "X-Forwarded-For", "6.6.6.6,203.0.113.5,10.1.1.1", NULL);
    /* Every field, in order, as one list. */
    XFF("10.0.0.1", "ip:203.0.113.5", "X-Forwarded-For", "6.6.6.6", "Host", "a",
        "x-forwarded-for", "203.0.113.5, 10.2.2.2", NULL);
    XFF("10.0.0.1", "ip:6.6.6.6", "X-Forwarded-For", "203.0.113.5, 6.6.6.6", "Host", "a",
        "x-forwarded-for", "10.2.2.2", NULL);
    /* All trusted: the left-most. */
    XFF("10.0.0.1", "ip:10.9.9.9", "X-Forwarded-For", "10.9.9.9, 10.8.8.8", NULL);
    /* Garbage ends the walk: the last good address, or the peer. */
    XFF("10.0.0.1", "ip:10.1.1.1", "X-Forwarded-For", "203.0.113.5, garbage, 10.1.1.1", NULL);
    XFF("10.0.0.1", "ip:10.0.0.1", "X-Forwarded-For", "203.0.113.5, unknown", NULL);
    XFF("10.0.0.1", "ip:10.0.0.1", "X-Forwarded-For", "203.0.113.5:4711", NULL);
    XFF("10.0.0.1", "ip:10.0.0.1", "X-Forwarded-For", "[2001:db8::1]", NULL);
    XFF("10.0.0.1", "ip:10.0.0.1", "X-Forwarded-For", "203.0.113.5 6.6.6.6", NULL);
    XFF("10.0.0.1", "ip:10.0.0.1", "X-Forwarded-For",
        "203.0.113.5, 1111:2222:3333:4444:5555:6666:7777:8888:9999", NULL);
    /* Empty list elements are no entries. */
    XFF("10.0.0.1", "ip:203.0.113.5", "X-Forwarded-For", "203.0.113.5, , 10.1.1.1,", NULL);
    XFF("10.0.0.1", "ip:10.0.0.1", "X-Forwarded-For", "", NULL);
    /* IPv6: canonical text; a v4-mapped address is its IPv4. */
    XFF("fd00::1", "ip:2001:db8::7", "X-Forwarded-For", "2001:DB8:0:0::7, fd00::2", NULL);
    XFF("fd00::1", "ip:203.0.113.9", "X-Forwarded-For", "::ffff:203.0.113.9", NULL);
    XFF("::ffff:10.0.0.1", "ip:2001:db8::7", "X-Forwarded-For", "2001:db8::7", NULL);
    XFF("2001:db8::1", "ip:2001:db8::1", "X-Forwarded-For", "203.0.113.5", NULL);
    XFF("fd00::1", "ip:fd00::2", "X-Forwarded-For", "garbage, fd00::2", NULL);
    sl_conf_free(c);

    /* A trusted ::ffff:a.b.c.d range is the IPv4 range. */
    c = http_conf("trusted_proxies = ::ffff:10.0.0.0/104\n");
    XFF("10.1.2.3", "ip:203.0.113.5", "X-Forwarded-For", "203.0.113.5", NULL);
    sl_conf_free(c);
    /* Without trusted_proxies the header is ignored. */
    c = http_conf("identity = client_ip\n");
    XFF("10.0.0.1", "ip:10.0.0.1", "X-Forwarded-For", "203.0.113.5", NULL);
    sl_conf_free(c);
    /* The fallback of a header source is this client ip too. */
    c = http_conf("identity = header:X-Api-Key\ntrusted_proxies = 10.0.0.0/8\n");
    XFF("10.0.0.1", "ip:203.0.113.5", "X-Forwarded-For", "203.0.113.5", NULL);
    sl_conf_free(c);
#undef XFF
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auth),
        cmocka_unit_test(test_hello),
        cmocka_unit_test(test_client_setname),
        cmocka_unit_test(test_reset),
        cmocka_unit_test(test_learns),
        cmocka_unit_test(test_source_order),
        cmocka_unit_test(test_key_prefix),
        cmocka_unit_test(test_first_key),
        cmocka_unit_test(test_hash),
        cmocka_unit_test(test_siphash),
        cmocka_unit_test(test_no_forgery),
        cmocka_unit_test(test_canon),
        cmocka_unit_test(test_client_ip),
        cmocka_unit_test(test_tls_identity),
        cmocka_unit_test(test_http_header_identity),
        cmocka_unit_test(test_http_check),
        cmocka_unit_test(test_http_forwarded_for),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

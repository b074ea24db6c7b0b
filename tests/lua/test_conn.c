/* sluice Lua tests — lua/connections.lua (connection leases and the login
 * queue) on a real redis-server.
 *
 * The embedded script (sl_lua_scripts[SL_SCRIPT_CONNECTIONS]) is loaded with
 * SCRIPT LOAD and run with EVALSHA and explicit times, so a "crashed"
 * instance's leases run out by moving now forward, not by sleeping. Keys
 * still expire in Redis's real time (PEXPIRE 2 x lease), so the explicit-time
 * tests use a 10 s lease: nothing expires for real while they run, and at the
 * end of each every key must have lease < PTTL <= 2 x lease. Only the TIME
 * test (now = -1) sleeps, a few ms, because there the clock is Redis's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "integration/harness.h"
#include "store/scripts.h"

#define T0    1700000000000000LL /* an explicit now, us (2023) */
#define MS    1000LL             /* us */
#define LEASE 10000LL            /* ms: longer than the test runs in real time */

static struct th_proc redis_p;
static redisContext *rc;
static char sha[48];

/* ---- helpers -------------------------------------------------------------- */

/* The arguments of one EVALSHA, built up one by one (numbers are printed
 * into the struct itself, so it owns every string it points at, apart from
 * the ones added with arg_s, which are borrowed). */
#define MAX_ARGS 64
struct args {
    int         n;
    const char *v[MAX_ARGS];
    char        num[MAX_ARGS][24];
};

static void arg_s(struct args *a, const char *s)
{
    assert_true(a->n < MAX_ARGS);
    a->v[a->n++] = s;
}

static void arg_i(struct args *a, long long x)
{
    assert_true(a->n < MAX_ARGS);
    snprintf(a->num[a->n], sizeof(a->num[a->n]), "%lld", x);
    a->v[a->n] = a->num[a->n];
    a->n++;
}

/* EVALSHA <sha> <nkeys> <keys...>: the start of every call. */
static void arg_start(struct args *a, int nkeys, const char *const *keys)
{
    a->n = 0;
    arg_s(a, "EVALSHA");
    arg_s(a, sha);
    arg_i(a, nkeys);
    for (int i = 0; i < nkeys; i++)
        arg_s(a, keys[i]);
}

static redisReply *run(struct args *a)
{
    redisReply *r = redisCommandArgv(rc, a->n, a->v, NULL);
    assert_non_null(r);
    return r;
}

/* The reply as <n> integers into <out>; fails the test otherwise. */
static void ints(redisReply *r, size_t n, long long *out)
{
    if (r->type == REDIS_REPLY_ERROR)
        print_error("script error: %s\n", r->str);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(r->element[i]->type, REDIS_REPLY_INTEGER);
        out[i] = r->element[i]->integer;
    }
    freeReplyObject(r);
}

struct lim {
    const char *key; /* base key */
    long long   max;
    int         shadow;
};

/* acquire for <member> under <n> limits. out: admitted, then per limit
 * allowed, holders, ahead (1 + 3n values). Returns admitted. */
static long long acquire_l(long long now, long long lease, const char *member, int queue, int n,
                           const struct lim *l, long long *out)
{
    struct args a;
    const char *keys[8];
    assert_true(n <= 8);
    for (int i = 0; i < n; i++)
        keys[i] = l[i].key;
    arg_start(&a, n, keys);
    arg_s(&a, "acquire");
    arg_i(&a, now);
    arg_i(&a, lease);
    arg_s(&a, member);
    arg_i(&a, queue);
    for (int i = 0; i < n; i++) {
        arg_i(&a, l[i].max);
        arg_i(&a, l[i].shadow);
    }
    ints(run(&a), 1 + 3 * (size_t)n, out);
    return out[0];
}

/* acquire under one non-shadow limit: o[0] admitted, o[1] allowed,
 * o[2] holders, o[3] ahead. */
static long long acquire1(long long now, const char *key, long long max, const char *member,
                          int queue, long long *o)
{
    struct lim l = { key, max, 0 };
    return acquire_l(now, LEASE, member, queue, 1, &l, o);
}

/* release of <member> from <n> keys; out: holders of each. */
static void release_n(long long now, int n, const char *const *keys, const char *member,
                      long long *out)
{
    struct args a;
    arg_start(&a, n, keys);
    arg_s(&a, "release");
    arg_i(&a, now);
    arg_i(&a, LEASE);
    arg_s(&a, member);
    ints(run(&a), (size_t)n, out);
}

/* Holders of <key> after releasing <member> there. */
static long long release1(long long now, const char *key, const char *member)
{
    long long h;
    release_n(now, 1, &key, member, &h);
    return h;
}

/* renew of <m> members of one key; returns the count the script says. */
static long long renew1(long long now, long long lease, const char *key, int m,
                        const char *const *members)
{
    struct args a;
    arg_start(&a, 1, &key);
    arg_s(&a, "renew");
    arg_i(&a, now);
    arg_i(&a, lease);
    arg_i(&a, m);
    for (int i = 0; i < m; i++)
        arg_s(&a, members[i]);
    redisReply *r = run(&a);
    if (r->type == REDIS_REPLY_ERROR)
        print_error("script error: %s\n", r->str);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    long long n = r->integer;
    freeReplyObject(r);
    return n;
}

/* The score of <member> in <base><suffix>, or -1 when it is not there. */
static long long zscore(const char *base, const char *suffix, const char *member)
{
    char key[128];
    snprintf(key, sizeof(key), "%s%s", base, suffix);
    redisReply *r = redisCommand(rc, "ZSCORE %s %s", key, member);
    assert_non_null(r);
    long long s = -1;
    if (r->type == REDIS_REPLY_STRING)
        s = (long long)strtod(r->str, NULL); /* whole numbers < 2^53: exact */
    else
        assert_int_equal(r->type, REDIS_REPLY_NIL);
    freeReplyObject(r);
    return s;
}

static long long zcard(const char *base, const char *suffix)
{
    char key[128];
    snprintf(key, sizeof(key), "%s%s", base, suffix);
    redisReply *r = redisCommand(rc, "ZCARD %s", key);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    long long n = r->integer;
    freeReplyObject(r);
    return n;
}

static long long exists(const char *base, const char *suffix)
{
    char key[128];
    snprintf(key, sizeof(key), "%s%s", base, suffix);
    redisReply *r = redisCommand(rc, "EXISTS %s", key);
    assert_non_null(r);
    long long n = r->integer;
    freeReplyObject(r);
    return n;
}

static long long dbsize(void)
{
    redisReply *r = redisCommand(rc, "DBSIZE");
    assert_non_null(r);
    long long n = r->integer;
    freeReplyObject(r);
    return n;
}

static void flushall(void)
{
    redisReply *r = redisCommand(rc, "FLUSHALL");
    assert_non_null(r);
    freeReplyObject(r);
}

/* Every key expires, no sooner than <lo_ms> and no later than <hi_ms> from
 * now (real time); returns how many keys there are. */
static long long assert_keys_ttl(long long lo_ms, long long hi_ms)
{
    redisReply *k = redisCommand(rc, "KEYS *");
    assert_non_null(k);
    assert_int_equal(k->type, REDIS_REPLY_ARRAY);
    for (size_t i = 0; i < k->elements; i++) {
        redisReply *t = redisCommand(rc, "PTTL %b", k->element[i]->str, (size_t)k->element[i]->len);
        assert_non_null(t);
        assert_int_equal(t->type, REDIS_REPLY_INTEGER);
        if (!(t->integer >= lo_ms && t->integer <= hi_ms))
            print_error("key %s: PTTL %lld, want %lld..%lld\n", k->element[i]->str, t->integer,
                        lo_ms, hi_ms);
        assert_true(t->integer >= lo_ms && t->integer <= hi_ms);
        freeReplyObject(t);
    }
    long long n = (long long)k->elements;
    freeReplyObject(k);
    return n;
}

/* ---- setup ---------------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    if (th_redis_start(&redis_p, NULL) < 0)
        return -1;
    rc = redisConnect("127.0.0.1", redis_p.port);
    if (rc == NULL || rc->err)
        return -1;
    const char *text = sl_lua_scripts[SL_SCRIPT_CONNECTIONS];
    redisReply *r = redisCommand(rc, "SCRIPT LOAD %b", text, strlen(text));
    int ok = r != NULL && r->type == REDIS_REPLY_STRING && r->len < 48;
    if (ok)
        memcpy(sha, r->str, (size_t)r->len + 1);
    else
        print_error("SCRIPT LOAD: %s\n", r && r->str ? r->str : "no reply");
    freeReplyObject(r);
    return ok ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    if (rc != NULL)
        redisFree(rc);
    th_stop(&redis_p);
    return 0;
}

/* ---- tests ---------------------------------------------------------------- */

/* The embedded script is exactly the file (the build is current). */
static void test_embedded_is_the_file(void **state)
{
    (void)state;
    char *t = th_slurp("lua/connections.lua");
    if (t == NULL)
        print_error("cannot read lua/connections.lua (run from the repository root)\n");
    assert_non_null(t);
    assert_string_equal(t, sl_lua_scripts[SL_SCRIPT_CONNECTIONS]);
    free(t);
}

/* Up to max get in; the next one is refused and leaves no trace; a holder
 * asking again is a renewal; a release frees a slot. */
static void test_acquire_up_to_max(void **state)
{
    (void)state;
    flushall();
    const char *k = "sluice:{conns:u}";
    long long o[4];
    static const char *const who[] = { "h:1:r:1", "h:1:r:2", "h:2:r:1" };
    for (int i = 0; i < 3; i++) {
        assert_int_equal(acquire1(T0 + i * MS, k, 3, who[i], 0, o), 1);
        assert_int_equal(o[1], 1);
        assert_int_equal(o[2], i + 1);
        assert_int_equal(o[3], 0);
        assert_int_equal(zscore(k, ":cn", who[i]), T0 / MS + i + LEASE); /* lease expiry, ms */
    }
    /* the 4th: refused, holders = max, nothing written */
    assert_int_equal(acquire1(T0 + 5 * MS, k, 3, "h:2:r:2", 0, o), 0);
    assert_int_equal(o[1], 0);
    assert_int_equal(o[2], 3);
    assert_int_equal(o[3], 0);
    assert_int_equal(zscore(k, ":cn", "h:2:r:2"), -1);
    assert_int_equal(exists(k, ":cq") + exists(k, ":cx"), 0);
    /* a holder again: allowed although full, its lease moves on */
    assert_int_equal(acquire1(T0 + 6 * MS, k, 3, who[0], 0, o), 1);
    assert_int_equal(o[1], 1);
    assert_int_equal(o[2], 3);
    assert_int_equal(zscore(k, ":cn", who[0]), T0 / MS + 6 + LEASE);
    /* ... even with max lowered below the count (a reload) */
    assert_int_equal(acquire1(T0 + 7 * MS, k, 1, who[1], 0, o), 1);
    assert_int_equal(o[2], 3);
    /* a release frees a slot; releasing a stranger changes nothing */
    assert_int_equal(release1(T0 + 8 * MS, k, who[1]), 2);
    assert_int_equal(release1(T0 + 8 * MS, k, "nobody"), 2);
    assert_int_equal(acquire1(T0 + 9 * MS, k, 3, "h:2:r:2", 0, o), 1);
    assert_int_equal(o[2], 3);
    assert_int_equal(acquire1(T0 + 9 * MS, k, 3, who[1], 0, o), 0);
    /* max 0: nobody new */
    assert_int_equal(acquire1(T0 + 9 * MS, "sluice:{zero:u}", 0, "x", 0, o), 0);
    assert_int_equal(o[2], 0);
    assert_int_equal(dbsize(), 1); /* only the holders of k */
    assert_keys_ttl(LEASE, 2 * LEASE);
}

/* An instance that crashed stops renewing: its leases run out at their
 * expiry (<= now_ms) and free the slots; the renewed ones stay. */
static void test_lease_expiry_and_renew(void **state)
{
    (void)state;
    flushall();
    const char *k = "sluice:{lease:u}";
    long long o[4];
    static const char *const crashed[] = { "a:1", "a:2" };
    static const char *const alive[] = { "b:1", "b:2" };
    for (int i = 0; i < 2; i++) {
        assert_int_equal(acquire1(T0, k, 4, crashed[i], 0, o), 1);
        assert_int_equal(acquire1(T0, k, 4, alive[i], 0, o), 1);
    }
    assert_int_equal(o[2], 4);
    /* instance b renews halfway through the lease, a does not */
    assert_int_equal(renew1(T0 + 5000 * MS, LEASE, k, 2, alive), 2);
    assert_int_equal(zscore(k, ":cn", "b:2"), T0 / MS + 5000 + LEASE);
    /* 1 ms before a's leases end: still full */
    assert_int_equal(acquire1(T0 + (LEASE - 1) * MS, k, 4, "c:1", 0, o), 0);
    assert_int_equal(o[2], 4);
    /* at their end: gone, two slots free */
    assert_int_equal(acquire1(T0 + LEASE * MS, k, 4, "c:1", 0, o), 1);
    assert_int_equal(o[2], 3);
    assert_int_equal(zscore(k, ":cn", "a:1"), -1);
    assert_int_equal(zscore(k, ":cn", "b:1"), T0 / MS + 5000 + LEASE);
    /* a release cleans too: b's leases end without a renewal */
    assert_int_equal(release1(T0 + (5000 + LEASE) * MS, k, "nobody"), 1);
    /* renew puts back a live connection whose entry fell out (store
     * outage), even past max: it is open, so it counts */
    assert_int_equal(acquire1(T0 + 15001 * MS, k, 2, "c:2", 0, o), 1);
    static const char *const back[] = { "b:1", "b:2", "c:1" };
    assert_int_equal(renew1(T0 + 15002 * MS, LEASE, k, 3, back), 3);
    assert_int_equal(zcard(k, ":cn"), 4);
    assert_int_equal(acquire1(T0 + 15003 * MS, k, 2, "c:3", 0, o), 0);
    assert_int_equal(o[2], 4);
    /* renew across two keys in one call, and m = 0 */
    const char *keys[3] = { k, "sluice:{lease2:u}", "sluice:{lease3:u}" };
    struct args a;
    arg_start(&a, 3, keys);
    arg_s(&a, "renew");
    arg_i(&a, T0 + 15004 * MS);
    arg_i(&a, LEASE);
    arg_i(&a, 2);
    arg_s(&a, "b:1");
    arg_s(&a, "c:2");
    arg_i(&a, 0);
    arg_i(&a, 1);
    arg_s(&a, "d:1");
    redisReply *r = run(&a);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->integer, 3);
    freeReplyObject(r);
    assert_int_equal(zscore(keys[2], ":cn", "d:1"), T0 / MS + 15004 + LEASE);
    assert_int_equal(exists(keys[1], ":cn"), 0);
    assert_int_equal(assert_keys_ttl(LEASE, 2 * LEASE), 2);
}

/* Three waiters queue in order A, B, C; a later one polling first does not
 * get in while earlier ones wait; slots go out in arrival order. */
static void test_queue_in_arrival_order(void **state)
{
    (void)state;
    flushall();
    const char *k = "sluice:{queue:u}";
    long long o[4];
    assert_int_equal(acquire1(T0, k, 2, "h1", 1, o), 1); /* queue mode, room: straight in */
    assert_int_equal(acquire1(T0, k, 2, "h2", 1, o), 1);
    assert_int_equal(exists(k, ":cq") + exists(k, ":cx"), 0); /* they left the queue */
    static const char *const w[] = { "A", "B", "C" };
    for (int i = 0; i < 3; i++) {
        assert_int_equal(acquire1(T0 + (1 + i) * MS, k, 2, w[i], 1, o), 0);
        assert_int_equal(o[1], 0);
        assert_int_equal(o[2], 2);
        assert_int_equal(o[3], i); /* ahead: those who came before */
    }
    /* C polls first, again and again: its place is its first attempt */
    assert_int_equal(release1(T0 + 10 * MS, k, "h1"), 1);
    assert_int_equal(acquire1(T0 + 11 * MS, k, 2, "C", 1, o), 0);
    assert_int_equal(o[2], 1);
    assert_int_equal(o[3], 2);
    assert_int_equal(zscore(k, ":cq", "C"), T0 + 3 * MS);
    assert_int_equal(zscore(k, ":cx", "C"), T0 / MS + 11 + LEASE); /* refreshed */
    assert_int_equal(acquire1(T0 + 12 * MS, k, 2, "B", 1, o), 0); /* A is first */
    assert_int_equal(o[3], 1);
    assert_int_equal(acquire1(T0 + 13 * MS, k, 2, "A", 1, o), 1);
    assert_int_equal(o[1], 1);
    assert_int_equal(o[2], 2);
    assert_int_equal(o[3], 0);
    assert_int_equal(zscore(k, ":cq", "A"), -1);
    assert_int_equal(zscore(k, ":cx", "A"), -1);
    assert_int_equal(zcard(k, ":cq"), 2);
    /* the next slot: C still after B */
    assert_int_equal(release1(T0 + 20 * MS, k, "h2"), 1);
    assert_int_equal(acquire1(T0 + 21 * MS, k, 2, "C", 1, o), 0);
    assert_int_equal(o[3], 1);
    assert_int_equal(acquire1(T0 + 22 * MS, k, 2, "B", 1, o), 1);
    assert_int_equal(o[2], 2);
    assert_int_equal(acquire1(T0 + 23 * MS, k, 2, "C", 1, o), 0);
    assert_int_equal(o[2], 2);
    assert_int_equal(o[3], 0); /* first in line, but full */
    assert_int_equal(release1(T0 + 30 * MS, k, "A"), 1);
    assert_int_equal(acquire1(T0 + 31 * MS, k, 2, "C", 1, o), 1);
    assert_int_equal(o[2], 2);
    assert_int_equal(exists(k, ":cq") + exists(k, ":cx"), 0); /* the queue is empty, gone */
    /* a waiter that gives up (a release, e.g. the client hung up) leaves the line */
    assert_int_equal(acquire1(T0 + 40 * MS, k, 2, "D", 1, o), 0);
    assert_int_equal(acquire1(T0 + 41 * MS, k, 2, "E", 1, o), 0);
    assert_int_equal(o[3], 1);
    assert_int_equal(release1(T0 + 42 * MS, k, "D"), 2);
    assert_int_equal(acquire1(T0 + 43 * MS, k, 2, "E", 1, o), 0);
    assert_int_equal(o[3], 0);
    assert_keys_ttl(LEASE, 2 * LEASE);
}

/* A waiter that stops polling blocks the line until its :cx expiry, then
 * loses its place; coming back, it queues at the end. */
static void test_queue_abandoned(void **state)
{
    (void)state;
    flushall();
    const char *k = "sluice:{gone:u}";
    long long o[4];
    assert_int_equal(acquire1(T0, k, 1, "h", 1, o), 1);
    assert_int_equal(acquire1(T0 + 1 * MS, k, 1, "A", 1, o), 0); /* A: once, then silence */
    assert_int_equal(acquire1(T0 + 2 * MS, k, 1, "B", 1, o), 0);
    assert_int_equal(o[3], 1);
    assert_int_equal(release1(T0 + 5000 * MS, k, "h"), 0);
    /* A's place is alive until T0 + 1 ms + lease: B must wait */
    assert_int_equal(acquire1(T0 + 5001 * MS, k, 1, "B", 1, o), 0);
    assert_int_equal(o[1], 0);
    assert_int_equal(o[2], 0);
    assert_int_equal(o[3], 1);
    assert_int_equal(acquire1(T0 + (LEASE + 1) * MS - 1, k, 1, "B", 1, o), 0);
    assert_int_equal(o[3], 1);
    /* at A's expiry (<= now_ms) it is gone: B is first and gets in */
    assert_int_equal(acquire1(T0 + (LEASE + 1) * MS, k, 1, "B", 1, o), 1);
    assert_int_equal(o[3], 0);
    assert_int_equal(zscore(k, ":cq", "A"), -1);
    assert_int_equal(zscore(k, ":cx", "A"), -1);
    /* A back: a new arrival at the end of the line */
    assert_int_equal(acquire1(T0 + (LEASE + 2) * MS, k, 1, "F", 1, o), 0);
    assert_int_equal(acquire1(T0 + (LEASE + 3) * MS, k, 1, "A", 1, o), 0);
    assert_int_equal(o[3], 1);
    assert_int_equal(zscore(k, ":cq", "A"), T0 + (LEASE + 3) * MS);
    /* B's lease lapses (no renew): the slot goes to the first in line, F,
     * whose place is still alive (its :cx ends 1 ms later) */
    assert_int_equal(acquire1(T0 + (2 * LEASE + 1) * MS, k, 1, "F", 1, o), 1);
    assert_int_equal(o[2], 1);
    assert_int_equal(zscore(k, ":cn", "B"), -1);
    assert_keys_ttl(LEASE, 2 * LEASE);
}

/* Shadow limits: never change admitted, never queue, take a lease only
 * when the connection is admitted and they allow. */
static void test_shadow(void **state)
{
    (void)state;
    flushall();
    const char *kr = "sluice:{real:u}", *ks = "sluice:{shadow:u}";
    long long o[7];
    struct lim l[2] = { { kr, 2, 0 }, { ks, 1, 1 } };
    assert_int_equal(acquire_l(T0, LEASE, "a", 1, 2, l, o), 1);
    assert_int_equal(o[1], 1);
    assert_int_equal(o[2], 1);
    assert_int_equal(o[4], 1); /* shadow allowed and took */
    assert_int_equal(o[5], 1);
    assert_int_equal(o[6], 0);
    /* the shadow is full: still admitted, the shadow takes nothing */
    assert_int_equal(acquire_l(T0 + 1 * MS, LEASE, "b", 1, 2, l, o), 1);
    assert_int_equal(o[1], 1);
    assert_int_equal(o[2], 2);
    assert_int_equal(o[4], 0);
    assert_int_equal(o[5], 1);
    assert_int_equal(o[6], 0);
    assert_int_equal(zscore(ks, ":cn", "b"), -1);
    /* the real one is full, queue mode: refused; queued in the real one
     * only; the shadow, which would allow after a's release there, takes
     * nothing */
    const char *only_shadow = ks;
    long long h;
    release_n(T0 + 2 * MS, 1, &only_shadow, "a", &h);
    assert_int_equal(h, 0);
    assert_int_equal(acquire_l(T0 + 3 * MS, LEASE, "c", 1, 2, l, o), 0);
    assert_int_equal(o[1], 0);
    assert_int_equal(o[2], 2);
    assert_int_equal(o[3], 0);
    assert_int_equal(o[4], 1); /* would allow */
    assert_int_equal(o[5], 0); /* took nothing */
    assert_int_equal(o[6], 0);
    assert_int_equal(zscore(kr, ":cq", "c"), T0 + 3 * MS);
    assert_int_equal(exists(ks, ":cn") + exists(ks, ":cq") + exists(ks, ":cx"), 0);
    /* a shadow alone: admitted even when it refuses */
    struct lim s = { ks, 0, 1 };
    assert_int_equal(acquire_l(T0 + 4 * MS, LEASE, "d", 1, 1, &s, o), 1);
    assert_int_equal(o[1], 0);
    assert_int_equal(o[2], 0);
    assert_int_equal(exists(ks, ":cq"), 0);
    /* no limits at all: admitted */
    struct args a;
    arg_start(&a, 0, NULL);
    arg_s(&a, "acquire");
    arg_i(&a, T0);
    arg_i(&a, LEASE);
    arg_s(&a, "e");
    arg_i(&a, 1);
    ints(run(&a), 1, o);
    assert_int_equal(o[0], 1);
    /* release from both: holders after, per key */
    const char *both[2] = { kr, ks };
    long long hs[2];
    release_n(T0 + 5 * MS, 2, both, "b", hs);
    assert_int_equal(hs[0], 1);
    assert_int_equal(hs[1], 0);
    assert_keys_ttl(LEASE, 2 * LEASE);
}

/* Two limits: one full means nothing is added to the other; with queue
 * the member waits in both, and gets both at once. */
static void test_all_or_nothing(void **state)
{
    (void)state;
    flushall();
    const char *k1 = "sluice:{user:u}", *k2 = "sluice:{ip:1.2.3.4}";
    long long o[7];
    assert_int_equal(acquire1(T0, k2, 1, "x", 0, o), 1);
    for (int order = 0; order < 2; order++) {
        struct lim l[2] = { { k1, 5, 0 }, { k2, 1, 0 } };
        if (order == 1) {
            struct lim t = l[0];
            l[0] = l[1];
            l[1] = t;
        }
        const long long *p1 = order == 0 ? &o[1] : &o[4], *p2 = order == 0 ? &o[4] : &o[1];
        assert_int_equal(acquire_l(T0 + 1 * MS, LEASE, "m", 0, 2, l, o), 0);
        assert_int_equal(p1[0], 1); /* k1 would allow ... */
        assert_int_equal(p1[1], 0); /* ... but took nothing */
        assert_int_equal(p2[0], 0);
        assert_int_equal(p2[1], 1);
        assert_int_equal(exists(k1, ":cn"), 0);
        assert_int_equal(exists(k1, ":cq") + exists(k2, ":cq"), 0); /* no queue: no write */
    }
    /* queue mode: refused, queued in both */
    struct lim l[2] = { { k1, 5, 0 }, { k2, 1, 0 } };
    assert_int_equal(acquire_l(T0 + 2 * MS, LEASE, "m", 1, 2, l, o), 0);
    assert_int_equal(o[1], 1);
    assert_int_equal(o[4], 0);
    assert_int_equal(exists(k1, ":cn"), 0);
    assert_int_equal(zscore(k1, ":cq", "m"), T0 + 2 * MS);
    assert_int_equal(zscore(k2, ":cq", "m"), T0 + 2 * MS);
    /* its place in k1 counts for others there */
    assert_int_equal(acquire1(T0 + 3 * MS, k1, 5, "n", 1, o), 1);
    assert_int_equal(o[3], 1);
    /* a holder of k1 that waits for k2 is not queued in k1 twice */
    struct lim l2[2] = { { k1, 5, 0 }, { k2, 1, 0 } };
    assert_int_equal(acquire_l(T0 + 4 * MS, LEASE, "n", 1, 2, l2, o), 0);
    assert_int_equal(o[1], 1);
    assert_int_equal(o[3], 0);
    assert_int_equal(zscore(k1, ":cq", "n"), -1);
    assert_int_equal(o[6], 1); /* behind m in k2 */
    /* k2 frees: m gets both, leaves both queues */
    assert_int_equal(release1(T0 + 5 * MS, k2, "x"), 0);
    assert_int_equal(acquire_l(T0 + 6 * MS, LEASE, "m", 1, 2, l, o), 1);
    assert_int_equal(o[1], 1);
    assert_int_equal(o[2], 2);
    assert_int_equal(o[4], 1);
    assert_int_equal(o[5], 1);
    assert_int_equal(zscore(k1, ":cq", "m") + zscore(k2, ":cq", "m"), -2);
    assert_int_equal(zscore(k1, ":cx", "m") + zscore(k2, ":cx", "m"), -2);
    /* release of a waiter takes it out of the queue too */
    const char *both[2] = { k1, k2 };
    long long hs[2];
    release_n(T0 + 7 * MS, 2, both, "n", hs);
    assert_int_equal(hs[0], 1);
    assert_int_equal(hs[1], 1);
    assert_int_equal(exists(k2, ":cq") + exists(k2, ":cx"), 0);
    assert_keys_ttl(LEASE, 2 * LEASE);
}

/* now = -1: Redis's clock. Every key written expires, with a PTTL of at
 * least the lease; a shorter lease never shortens a key's life; a lease
 * ends in real time. */
static void test_time_mode_and_ttl(void **state)
{
    (void)state;
    flushall();
    const char *k = "sluice:{time:u}";
    const long long lease = 2000;
    long long o[4];
    struct lim l = { k, 1, 0 };
    assert_int_equal(acquire_l(-1, lease, "a", 1, 1, &l, o), 1);
    assert_int_equal(assert_keys_ttl(lease, 2 * lease), 1);
    assert_int_equal(acquire_l(-1, lease, "b", 1, 1, &l, o), 0); /* queued */
    assert_int_equal(o[2], 1);
    assert_int_equal(assert_keys_ttl(lease, 2 * lease), 3);
    const char *m[] = { "a" };
    assert_int_equal(renew1(-1, lease, k, 1, m), 1);
    assert_int_equal(assert_keys_ttl(lease, 2 * lease), 3);
    /* the lease is ms since the epoch + lease */
    redisReply *t = redisCommand(rc, "TIME");
    long long now_ms = strtoll(t->element[0]->str, NULL, 10) * 1000 +
                       strtoll(t->element[1]->str, NULL, 10) / 1000;
    freeReplyObject(t);
    long long exp = zscore(k, ":cn", "a");
    assert_true(exp > now_ms + lease - 1000 && exp <= now_ms + lease);
    /* another instance with a short lease: the keys keep the long life */
    assert_int_equal(acquire_l(-1, 30, "b", 1, 1, &l, o), 0);
    assert_int_equal(assert_keys_ttl(lease, 2 * lease), 3);
    /* a's lease of 30 ms runs out in real time */
    flushall();
    assert_int_equal(acquire_l(-1, 30, "a", 0, 1, &l, o), 1);
    assert_int_equal(acquire_l(-1, 30, "b", 0, 1, &l, o), 0);
    assert_int_equal(assert_keys_ttl(1, 60), 1);
    usleep(40 * 1000);
    assert_int_equal(acquire_l(-1, lease, "b", 0, 1, &l, o), 1);
    assert_int_equal(zscore(k, ":cn", "a"), -1);
    assert_int_equal(assert_keys_ttl(lease, 2 * lease), 1);
    /* a release keeps the rule too: its lease (10 s) sets the key's life */
    l.max = 2;
    assert_int_equal(acquire_l(-1, 30, "c", 0, 1, &l, o), 1);
    assert_int_equal(release1(-1, k, "c"), 1);
    assert_int_equal(assert_keys_ttl(LEASE, 2 * LEASE), 1);
}

/* Many members: renew and the queue's cleaning go in batches (Lua's
 * unpack has a limited stack). 1200 connections renewed in one call; 1200
 * waiters that all stop polling leave in one cleaning. */
static void test_many(void **state)
{
    (void)state;
    flushall();
    const char *k = "sluice:{many:u}";
    enum { N = 1200 };
    static char names[N][16];
    const char **argv = malloc((8 + N) * sizeof(*argv));
    assert_non_null(argv);
    char now[24], lease[24], m[24];
    snprintf(now, sizeof(now), "%lld", T0);
    snprintf(lease, sizeof(lease), "%lld", LEASE);
    snprintf(m, sizeof(m), "%d", N);
    int n = 0;
    argv[n++] = "EVALSHA";
    argv[n++] = sha;
    argv[n++] = "1";
    argv[n++] = k;
    argv[n++] = "renew";
    argv[n++] = now;
    argv[n++] = lease;
    argv[n++] = m;
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "c:%d", i);
        argv[n++] = names[i];
    }
    redisReply *r = redisCommandArgv(rc, n, argv, NULL);
    free(argv);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->integer, N);
    freeReplyObject(r);
    assert_int_equal(zcard(k, ":cn"), N);
    assert_int_equal(zscore(k, ":cn", "c:1199"), T0 / MS + LEASE);
    /* N waiters behind a full limit, pipelined */
    long long o[4];
    for (int i = 0; i < N; i++) {
        struct args a;
        const char *key = "sluice:{many:w}";
        arg_start(&a, 1, &key);
        arg_s(&a, "acquire");
        arg_i(&a, T0 + i);
        arg_i(&a, LEASE);
        arg_s(&a, names[i]);
        arg_i(&a, 1);
        arg_i(&a, 0);
        arg_i(&a, 0);
        assert_int_equal(redisAppendCommandArgv(rc, a.n, a.v, NULL), REDIS_OK);
    }
    for (int i = 0; i < N; i++) {
        redisReply *rr = NULL;
        assert_int_equal(redisGetReply(rc, (void **)&rr), REDIS_OK);
        ints(rr, 4, o);
        assert_int_equal(o[3], i);
    }
    assert_int_equal(zcard("sluice:{many:w}", ":cq"), N);
    /* past every waiter's expiry: one cleaning takes them all */
    assert_int_equal(acquire1(T0 + (LEASE + 1) * MS, "sluice:{many:w}", 1, "late", 1, o), 1);
    assert_int_equal(o[3], 0);
    assert_int_equal(exists("sluice:{many:w}", ":cq") + exists("sluice:{many:w}", ":cx"), 0);
    assert_keys_ttl(LEASE, 2 * LEASE);
}

/* hiredis formats, here with printf's conversions only (so checked). */
__attribute__((format(printf, 2, 3)))
static void expect_error(const char *what, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(rc, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    if (r->type != REDIS_REPLY_ERROR)
        print_error("%s: no error\n", what);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    if (strstr(r->str, "ERR sluice: connections: ") != r->str)
        print_error("%s: %s\n", what, r->str);
    assert_ptr_equal(strstr(r->str, "ERR sluice: connections: "), r->str);
    freeReplyObject(r);
}

/* Bad arguments are errors, and write nothing: not even the cleaning (the
 * calls below are far past every lease and queue expiry). */
static void test_errors(void **state)
{
    (void)state;
    flushall();
    const char *k = "k{e}";
    long long o[4];
    assert_int_equal(acquire1(T0, k, 1, "a", 0, o), 1);
    assert_int_equal(acquire1(T0, k, 1, "b", 1, o), 0);
    const long long later = T0 + 100 * LEASE * MS;
    expect_error("bad op", "EVALSHA %s 1 %s grab %lld 1000 a", sha, k, later);
    expect_error("no op", "EVALSHA %s 1 %s", sha, k);
    expect_error("now not a number", "EVALSHA %s 1 %s release soon 1000 a", sha, k);
    expect_error("now not whole", "EVALSHA %s 1 %s release 1.5 1000 a", sha, k);
    expect_error("now 2^53", "EVALSHA %s 1 %s release 9007199254740992 1000 a", sha, k);
    expect_error("lease 0", "EVALSHA %s 1 %s release %lld 0 a", sha, k, later);
    expect_error("lease -5", "EVALSHA %s 1 %s release %lld -5 a", sha, k, later);
    expect_error("lease x", "EVALSHA %s 1 %s release %lld x a", sha, k, later);
    expect_error("lease 1.5", "EVALSHA %s 1 %s release %lld 1.5 a", sha, k, later);
    expect_error("lease over a year", "EVALSHA %s 1 %s release %lld 31536000001 a", sha, k, later);
    expect_error("release: too few", "EVALSHA %s 1 %s release %lld 1000", sha, k, later);
    expect_error("release: too many", "EVALSHA %s 1 %s release %lld 1000 a b", sha, k, later);
    expect_error("acquire: too few", "EVALSHA %s 1 %s acquire %lld 1000 c 0 1", sha, k, later);
    expect_error("acquire: too many", "EVALSHA %s 1 %s acquire %lld 1000 c 0 1 0 1 0", sha, k,
                 later);
    expect_error("acquire: no keys, a limit", "EVALSHA %s 0 acquire %lld 1000 c 0 1 0", sha, later);
    expect_error("acquire: max -1", "EVALSHA %s 1 %s acquire %lld 1000 c 0 -1 0", sha, k, later);
    expect_error("acquire: max x", "EVALSHA %s 1 %s acquire %lld 1000 c 0 x 0", sha, k, later);
    expect_error("acquire: queue 2", "EVALSHA %s 1 %s acquire %lld 1000 c 2 1 0", sha, k, later);
    expect_error("acquire: shadow y", "EVALSHA %s 1 %s acquire %lld 1000 c 0 1 y", sha, k, later);
    expect_error("renew: fewer", "EVALSHA %s 1 %s renew %lld 1000 2 a", sha, k, later);
    expect_error("renew: more", "EVALSHA %s 1 %s renew %lld 1000 1 a b", sha, k, later);
    expect_error("renew: no m", "EVALSHA %s 2 %s %s renew %lld 1000 1 a", sha, k, "j{e}", later);
    expect_error("renew: m -1", "EVALSHA %s 1 %s renew %lld 1000 -1", sha, k, later);
    expect_error("renew: m x", "EVALSHA %s 1 %s renew %lld 1000 x", sha, k, later);
    /* nothing was cleaned or written */
    assert_int_equal(zcard(k, ":cn"), 1);
    assert_int_equal(zcard(k, ":cq"), 1);
    assert_int_equal(zcard(k, ":cx"), 1);
    assert_int_equal(dbsize(), 3);
    /* the bounds themselves are fine */
    redisReply *r = redisCommand(rc, "EVALSHA %s 1 %s renew 0 31536000000 0", sha, k);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    r = redisCommand(rc, "EVALSHA %s 1 %s acquire %lld 1 c 0 0 0", sha, k, T0);
    ints(r, 4, o);
    assert_int_equal(o[0], 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedded_is_the_file),
        cmocka_unit_test(test_acquire_up_to_max),
        cmocka_unit_test(test_lease_expiry_and_renew),
        cmocka_unit_test(test_queue_in_arrival_order),
        cmocka_unit_test(test_queue_abandoned),
        cmocka_unit_test(test_shadow),
        cmocka_unit_test(test_all_or_nothing),
        cmocka_unit_test(test_time_mode_and_ttl),
        cmocka_unit_test(test_many),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

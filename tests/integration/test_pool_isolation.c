/* sluice integration tests — a pooled RESP listener is transparent.
 *
 * Many concurrent clients (threads, each with its own hiredis connection,
 * fixed seeds) on listeners with `upstream_pool = 1` and `= 2` in front of one
 * real redis-server: no client ever sees another's database, user's
 * permissions, transaction, reply, client name, blocking pop, channel or
 * monitor stream (docs/resp.md, "Pooled listeners (upstream_pool)"). What
 * Redis itself holds is checked on a direct connection. Then the upstream
 * connection count: 50 idle and 20 active clients on `upstream_pool = 2`,
 * workers = 1, hold at most 2 upstream connections plus the pinned ones, and
 * a connection pinned by MULTI comes back clean after EXEC.
 *
 * POOL_ONLY=<cmocka pattern> picks tests. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "integration/harness.h"

static struct th_proc redis_p, sl_p;
static int port_pool1, port_pool2;
static int both_ports[2]; /* upstream_pool = 1, upstream_pool = 2 */

#define NCLIENTS 16
#define ROUNDS 40

/* ---- helpers ---------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static redisContext *conn(int port)
{
    struct timeval tv = { TH_MS / 1000, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c || c->err) {
        if (c)
            redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

/* A direct connection to the upstream (what Redis itself holds). */
static redisContext *direct(void) { return conn(redis_p.port); }

/* The same in a test, which fails without it. */
static redisContext *upstream(void)
{
    redisContext *d = direct();
    assert_non_null(d);
    return d;
}

/* Runs <fmt> and checks the reply is the status/string <want> (NULL: any
 * non-error). Returns 0, or -1 with the reason in <err>. */
static int expect_str(redisContext *c, char *err, size_t cap, const char *want, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r) {
        snprintf(err, cap, "'%s': no reply (%s)", fmt, c->errstr);
        return -1;
    }
    int ok = want ? ((r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING) &&
                     strcmp(r->str, want) == 0)
                  : r->type != REDIS_REPLY_ERROR;
    if (!ok)
        snprintf(err, cap, "'%s': want %s, got type %d '%s'", fmt, want ? want : "no error",
                 r->type, r->str ? r->str : "");
    freeReplyObject(r);
    return ok ? 0 : -1;
}

/* The reply to <fmt> must be an error starting with <prefix>. */
static int expect_err(redisContext *c, char *err, size_t cap, const char *prefix, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r) {
        snprintf(err, cap, "'%s': no reply (%s)", fmt, c->errstr);
        return -1;
    }
    int ok = r->type == REDIS_REPLY_ERROR && strncmp(r->str, prefix, strlen(prefix)) == 0;
    if (!ok)
        snprintf(err, cap, "'%s': want error %s..., got type %d '%s'", fmt, prefix, r->type,
                 r->str ? r->str : "");
    freeReplyObject(r);
    return ok ? 0 : -1;
}

static long long expect_int(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1000000;
    if (r)
        freeReplyObject(r);
    return v;
}

/* Runs <nthreads> threads of <fn>, each given its index and the port; each
 * fills its own error text (empty: it passed). The test fails on the first. */
struct worker {
    pthread_t     th;
    int           idx, port;
    void         *arg;
    redisContext *c; /* run_clients: the worker's connection to <port> */
    char          err[512];
};

typedef void worker_fn(struct worker *w);

struct wrap {
    struct worker *w;
    worker_fn     *fn;
    int            connect; /* open <c> before, close it after */
};

static void *thread_main(void *p)
{
    struct wrap *wr = p;
    struct worker *w = wr->w;
    if (wr->connect && (w->c = conn(w->port)) == NULL) {
        snprintf(w->err, sizeof(w->err), "cannot connect");
        return NULL;
    }
    wr->fn(w);
    if (w->c)
        redisFree(w->c);
    return NULL;
}

static void run_threads(int n, int port, worker_fn *fn, void *arg, int connect)
{
    struct worker *w = calloc((size_t)n, sizeof(*w));
    struct wrap *wr = calloc((size_t)n, sizeof(*wr));
    assert_non_null(w);
    assert_non_null(wr);
    for (int i = 0; i < n; i++) {
        w[i].idx = i;
        w[i].port = port;
        w[i].arg = arg;
        wr[i].w = &w[i];
        wr[i].fn = fn;
        wr[i].connect = connect;
        assert_int_equal(pthread_create(&w[i].th, NULL, thread_main, &wr[i]), 0);
    }
    int bad = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(w[i].th, NULL);
        if (w[i].err[0]) {
            print_error("client %d: %s\n", i, w[i].err);
            bad++;
        }
    }
    free(w);
    free(wr);
    assert_int_equal(bad, 0);
}

/* <n> workers on <port>, each opening what it needs. */
static void run_workers(int n, int port, worker_fn *fn, void *arg)
{
    run_threads(n, port, fn, arg, 0);
}

/* <n> workers on <port>, each given a hiredis connection to it (w->c). */
static void run_clients(int n, int port, worker_fn *fn, void *arg)
{
    run_threads(n, port, fn, arg, 1);
}

/* NCLIENTS clients of <fn> on the upstream_pool = 1 listener, then on the = 2 one. */
static void run_both(worker_fn *fn)
{
    for (int p = 0; p < 2; p++)
        run_clients(NCLIENTS, both_ports[p], fn, NULL);
}

#define FAIL(w, ...)                                          \
    do {                                                      \
        snprintf((w)->err, sizeof((w)->err), __VA_ARGS__);    \
        goto fail;                                            \
    } while (0)

/* ---- the processes ---------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    if (th_redis_start(&redis_p, NULL) < 0)
        return -1;
    port_pool1 = th_free_port();
    port_pool2 = th_free_port();
    while (port_pool2 == port_pool1)
        port_pool2 = th_free_port();
    both_ports[0] = port_pool1;
    both_ports[1] = port_pool2;
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin =\nshutdown_grace = 2s\n[store]\nurl = local\n"
             "[listener p1]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nupstream_pool = 1\n"
             "[listener p2]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nupstream_pool = 2\n",
             port_pool1, redis_p.port, port_pool2, redis_p.port);
    if (th_sluice_start(&sl_p, ini, port_pool2) < 0) {
        th_stop(&redis_p);
        return -1;
    }
    /* the users of the permission test, made on the upstream itself */
    redisContext *d = direct();
    if (!d)
        return -1;
    char err[256];
    int rc = expect_str(d, err, sizeof(err), "OK",
                        "ACL SETUSER reader on >rpw ~ro:* resetchannels +get +ping +select +reset "
                        "+auth +hello +client +exec +multi +discard +watch +unwatch") |
             expect_str(d, err, sizeof(err), "OK", "ACL SETUSER writer on >wpw ~* &* +@all");
    redisFree(d);
    return rc;
}

static int group_teardown(void **state)
{
    (void)state;
    int st = th_stop(&sl_p);
    th_stop(&redis_p);
    th_kill_all();
    return st == 0 ? 0 : -1;
}

static int sluice_alive(void **state)
{
    (void)state;
    return th_alive_or_report(&sl_p);
}

/* ---- databases ---------------------------------------------------------------- */

/* Each client selects database idx % 4 and, interleaved with the others,
 * writes and reads back its own keys and the database's marker key (written
 * directly beforehand): the marker says which database a request ran in. */
static void w_databases(struct worker *w)
{
    uint64_t rng = 1000 + (uint64_t)w->idx;
    int db = w->idx % 4;
    char want[32];
    redisContext *c = w->c;
    if (db && expect_str(c, w->err, sizeof(w->err), "OK", "SELECT %d", db) < 0)
        goto fail;
    snprintf(want, sizeof(want), "db%d", db);
    for (int round = 0; round < ROUNDS; round++) {
        int depth = 1 + (int)(rng_next(&rng) % 20);
        for (int j = 0; j < depth; j++) {
            redisAppendCommand(c, "SET db:%d:%d:%d v%d.%d.%d", w->port, w->idx, j, w->idx, round, j);
            redisAppendCommand(c, "GET dbmark");
            redisAppendCommand(c, "GET db:%d:%d:%d", w->port, w->idx, j);
        }
        for (int j = 0; j < depth; j++) {
            redisReply *r[3] = { 0 };
            char v[64];
            snprintf(v, sizeof(v), "v%d.%d.%d", w->idx, round, j);
            for (int k = 0; k < 3; k++)
                if (redisGetReply(c, (void **)&r[k]) != REDIS_OK)
                    FAIL(w, "round %d: no reply (%s)", round, c->errstr);
            int ok = r[0]->type == REDIS_REPLY_STATUS && !strcmp(r[0]->str, "OK") &&
                     r[1]->type == REDIS_REPLY_STRING && !strcmp(r[1]->str, want) &&
                     r[2]->type == REDIS_REPLY_STRING && !strcmp(r[2]->str, v);
            if (!ok)
                snprintf(w->err, sizeof(w->err),
                         "round %d: in db %d: SET %d '%s', dbmark '%s' (want %s), GET '%s' (want %s)",
                         round, db, r[0]->type, r[0]->str ? r[0]->str : "",
                         r[1]->str ? r[1]->str : "(nil)", want, r[2]->str ? r[2]->str : "(nil)", v);
            for (int k = 0; k < 3; k++)
                freeReplyObject(r[k]);
            if (!ok)
                goto fail;
        }
    }
fail:
    return;
}

static void test_databases(void **state)
{
    (void)state;
    for (int p = 0; p < 2; p++) {
        redisContext *d = upstream();
        char err[256];
        for (int db = 0; db < 4; db++) {
            assert_int_equal(expect_str(d, err, sizeof(err), "OK", "SELECT %d", db), 0);
            assert_int_equal(expect_str(d, err, sizeof(err), "OK", "SET dbmark db%d", db), 0);
        }
        run_clients(NCLIENTS, both_ports[p], w_databases, NULL);
        /* and Redis holds each client's keys in its database only */
        for (int i = 0; i < NCLIENTS; i++)
            for (int db = 0; db < 4; db++) {
                assert_int_equal(expect_str(d, err, sizeof(err), "OK", "SELECT %d", db), 0);
                assert_int_equal(expect_int(d, "EXISTS db:%d:%d:0", both_ports[p], i),
                                 db == i % 4 ? 1 : 0);
            }
        redisFree(d);
    }
}

/* ---- users -------------------------------------------------------------------- */

/* Odd clients are user "reader" (GET on ro:* only), even ones "writer";
 * interleaved, each gets exactly its own user's answers; after RESET the
 * reader is "default" again and may write. */
static void w_users(struct worker *w)
{
    int reader = w->idx & 1;
    redisContext *c = w->c;
    if (reader && expect_err(c, w->err, sizeof(w->err), "WRONGPASS", "AUTH reader nope") < 0)
        goto fail;
    /* a wrong password left it "default", which may write */
    if (reader && expect_str(c, w->err, sizeof(w->err), "OK", "SET u:%d:pre 1", w->idx) < 0)
        goto fail;
    if (expect_str(c, w->err, sizeof(w->err), "OK", reader ? "AUTH reader rpw" : "AUTH writer wpw") < 0)
        goto fail;
    for (int round = 0; round < ROUNDS; round++) {
        for (int j = 0; j < 10; j++) {
            redisAppendCommand(c, "SET u:%d:%d x", w->idx, j);
            redisAppendCommand(c, "GET ro:%d", j);
            redisAppendCommand(c, "GET u:%d:%d", w->idx, j);
        }
        for (int j = 0; j < 10; j++) {
            redisReply *r[3] = { 0 };
            for (int k = 0; k < 3; k++)
                if (redisGetReply(c, (void **)&r[k]) != REDIS_OK)
                    FAIL(w, "round %d: no reply (%s)", round, c->errstr);
            int ok;
            if (reader)
                ok = r[0]->type == REDIS_REPLY_ERROR && !strncmp(r[0]->str, "NOPERM", 6) &&
                     r[1]->type != REDIS_REPLY_ERROR &&
                     r[2]->type == REDIS_REPLY_ERROR && !strncmp(r[2]->str, "NOPERM", 6);
            else
                ok = r[0]->type == REDIS_REPLY_STATUS && r[1]->type != REDIS_REPLY_ERROR &&
                     r[2]->type == REDIS_REPLY_STRING && !strcmp(r[2]->str, "x");
            if (!ok)
                snprintf(w->err, sizeof(w->err), "round %d as %s: SET '%s', GET ro '%s', GET own '%s'",
                         round, reader ? "reader" : "writer", r[0]->str ? r[0]->str : "",
                         r[1]->str ? r[1]->str : "", r[2]->str ? r[2]->str : "");
            for (int k = 0; k < 3; k++)
                freeReplyObject(r[k]);
            if (!ok)
                goto fail;
        }
    }
    /* RESET: back to user default, who may write anything */
    if (expect_str(c, w->err, sizeof(w->err), "RESET", "RESET") < 0 ||
        expect_str(c, w->err, sizeof(w->err), "OK", "SET u:%d:after y", w->idx) < 0)
        goto fail;
    {
        redisReply *r = redisCommand(c, "ACL WHOAMI");
        int ok = r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, "default");
        if (!ok)
            snprintf(w->err, sizeof(w->err), "ACL WHOAMI after RESET: '%s'", r && r->str ? r->str : "");
        if (r)
            freeReplyObject(r);
    }
fail:
    return;
}

static void test_users(void **state)
{
    (void)state;
    run_both(w_users);
}

/* ---- transactions --------------------------------------------------------------- */

/* Every client runs MULTI / commands / EXEC (and DISCARD, and WATCH that
 * the others' unrelated traffic must not trigger), interleaved with the
 * others' plain traffic: an EXEC holds exactly its own replies. */
static void w_transactions(struct worker *w)
{
    uint64_t rng = 2000 + (uint64_t)w->idx;
    redisContext *c = w->c;
    for (int round = 0; round < ROUNDS; round++) {
        unsigned what = (unsigned)(rng_next(&rng) % 4), n = 1 + (unsigned)(rng_next(&rng) % 5);
        if (what == 0) { /* plain traffic on the shared connection */
            for (unsigned j = 0; j < 20; j++)
                redisAppendCommand(c, "INCR tx:%d:plain", w->idx);
            for (unsigned j = 0; j < 20; j++) {
                redisReply *r;
                if (redisGetReply(c, (void **)&r) != REDIS_OK)
                    FAIL(w, "plain: no reply (%s)", c->errstr);
                int ok = r->type == REDIS_REPLY_INTEGER;
                freeReplyObject(r);
                if (!ok)
                    FAIL(w, "round %d: INCR outside MULTI was not an integer (queued?)", round);
            }
            continue;
        }
        int watch = what == 3;
        if (watch && expect_str(c, w->err, sizeof(w->err), "OK", "WATCH tx:%d:w", w->idx) < 0)
            goto fail;
        if (expect_str(c, w->err, sizeof(w->err), "OK", "MULTI") < 0)
            goto fail;
        for (unsigned j = 0; j < n; j++)
            if (expect_str(c, w->err, sizeof(w->err), "QUEUED", "RPUSH tx:%d:l %d.%u", w->idx, round, j) < 0)
                goto fail;
        if (what == 2) {
            if (expect_str(c, w->err, sizeof(w->err), "OK", "DISCARD") < 0)
                goto fail;
            continue;
        }
        redisReply *r = redisCommand(c, "EXEC");
        if (!r)
            FAIL(w, "EXEC: no reply (%s)", c->errstr);
        int ok = r->type == REDIS_REPLY_ARRAY && r->elements == n;
        for (size_t k = 0; ok && k < r->elements; k++)
            ok = r->element[k]->type == REDIS_REPLY_INTEGER;
        if (!ok)
            snprintf(w->err, sizeof(w->err), "round %d: EXEC%s gave type %d with %zu elements, want %u integers",
                     round, watch ? " after WATCH" : "", r->type, r->elements, n);
        freeReplyObject(r);
        if (!ok)
            goto fail;
    }
    /* what the transactions left: every RPUSH of an EXEC, none of a DISCARD */
    {
        uint64_t r2 = 2000 + (uint64_t)w->idx;
        long long want = 0;
        for (int round = 0; round < ROUNDS; round++) {
            unsigned what = (unsigned)(rng_next(&r2) % 4), n = 1 + (unsigned)(rng_next(&r2) % 5);
            if (what == 1 || what == 3)
                want += n;
        }
        long long got = expect_int(c, "LLEN tx:%d:l", w->idx);
        if (got != want)
            FAIL(w, "LLEN %lld, want %lld (a DISCARD ran or an EXEC was lost)", got, want);
    }
fail:
    return;
}

static void test_transactions(void **state)
{
    (void)state;
    for (int p = 0; p < 2; p++) {
        redisContext *d = upstream();
        redisReply *r = redisCommand(d, "FLUSHALL");
        freeReplyObject(r);
        redisFree(d);
        run_clients(NCLIENTS, both_ports[p], w_transactions, NULL);
    }
}

/* WATCH really watches (it runs on the client's own connection): a direct
 * write of the key makes EXEC fail; traffic of another client on the pool
 * does not; UNWATCH and DISCARD end it. */
static void test_watch(void **state)
{
    (void)state;
    char err[256];
    for (int p = 0; p < 2; p++) {
        redisContext *a = conn(both_ports[p]), *b = conn(both_ports[p]), *d = direct();
        assert_non_null(a);
        assert_non_null(b);
        assert_non_null(d);
        /* triggered by a real write */
        assert_int_equal(expect_str(a, err, sizeof(err), "OK", "WATCH w:key"), 0);
        assert_int_equal(expect_str(d, err, sizeof(err), "OK", "SET w:key direct"), 0);
        assert_int_equal(expect_str(a, err, sizeof(err), "OK", "MULTI"), 0);
        assert_int_equal(expect_str(a, err, sizeof(err), "QUEUED", "SET w:key a"), 0);
        redisReply *r = redisCommand(a, "EXEC");
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_NIL);
        freeReplyObject(r);
        /* not triggered by another client's traffic on other keys, nor
         * cleared by it (its UNWATCH / EXEC / DISCARD are its own) */
        assert_int_equal(expect_str(a, err, sizeof(err), "OK", "WATCH w:key"), 0);
        for (int i = 0; i < 50; i++) {
            assert_int_equal(expect_str(b, err, sizeof(err), "OK", "SET w:other %d", i), 0);
            assert_int_equal(expect_str(b, err, sizeof(err), "OK", i % 2 ? "UNWATCH" : "DISCARD"),
                             i % 2 ? 0 : -1);
            assert_int_equal(expect_str(b, err, sizeof(err), "OK", "MULTI"), 0);
            assert_int_equal(expect_str(b, err, sizeof(err), "QUEUED", "SET w:key b%d", i), 0);
            assert_int_equal(expect_str(b, err, sizeof(err), "OK", "DISCARD"), 0);
        }
        assert_int_equal(expect_str(a, err, sizeof(err), "OK", "MULTI"), 0);
        assert_int_equal(expect_str(a, err, sizeof(err), "QUEUED", "SET w:key a"), 0);
        r = redisCommand(a, "EXEC");
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(r->elements, 1);
        freeReplyObject(r);
        /* still watched after B's unrelated EXEC: B's write makes A's fail */
        assert_int_equal(expect_str(a, err, sizeof(err), "OK", "WATCH w:key"), 0);
        assert_int_equal(expect_str(b, err, sizeof(err), "OK", "MULTI"), 0);
        assert_int_equal(expect_str(b, err, sizeof(err), "QUEUED", "SET w:other x"), 0);
        r = redisCommand(b, "EXEC");
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        freeReplyObject(r);
        assert_int_equal(expect_str(b, err, sizeof(err), "OK", "SET w:key b"), 0);
        assert_int_equal(expect_str(a, err, sizeof(err), "OK", "MULTI"), 0);
        assert_int_equal(expect_str(a, err, sizeof(err), "QUEUED", "GET w:key"), 0);
        r = redisCommand(a, "EXEC");
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_NIL);
        freeReplyObject(r);
        /* DISCARD: nothing ran, and A is out of MULTI */
        assert_int_equal(expect_str(a, err, sizeof(err), "OK", "MULTI"), 0);
        assert_int_equal(expect_str(a, err, sizeof(err), "QUEUED", "SET w:discarded 1"), 0);
        assert_int_equal(expect_str(a, err, sizeof(err), "OK", "DISCARD"), 0);
        assert_int_equal(expect_int(d, "EXISTS w:discarded"), 0);
        assert_int_equal(expect_str(a, err, sizeof(err), "OK", "SET w:after 1"), 0);
        redisFree(a);
        redisFree(b);
        redisFree(d);
    }
}

/* Two WATCHes pipelined, the first refused (an arity error): the second's
 * watch holds, so the client keeps its connection and a direct write still
 * makes its EXEC fail. */
static void test_watch_pipelined(void **state)
{
    (void)state;
    char err[256];
    for (int p = 0; p < 2; p++) {
        redisContext *a = conn(both_ports[p]), *d = upstream();
        assert_non_null(a);
        redisReply *r;
        redisAppendCommand(a, "WATCH");
        redisAppendCommand(a, "WATCH wp:key");
        assert_int_equal(redisGetReply(a, (void **)&r), REDIS_OK);
        assert_int_equal(r->type, REDIS_REPLY_ERROR);
        freeReplyObject(r);
        assert_int_equal(redisGetReply(a, (void **)&r), REDIS_OK);
        assert_int_equal(r->type, REDIS_REPLY_STATUS);
        freeReplyObject(r);
        assert_int_equal(expect_str(d, err, sizeof(err), "OK", "SET wp:key direct"), 0);
        assert_int_equal(expect_str(a, err, sizeof(err), "OK", "MULTI"), 0);
        assert_int_equal(expect_str(a, err, sizeof(err), "QUEUED", "SET wp:key a"), 0);
        r = redisCommand(a, "EXEC");
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_NIL);
        freeReplyObject(r);
        redisFree(a);
        redisFree(d);
    }
}

/* ---- replies --------------------------------------------------------------------- */

/* Pipelines of 100, interleaved: every GET of a client's own unique key
 * returns its own value. */
static void w_replies(struct worker *w)
{
    uint64_t rng = 3000 + (uint64_t)w->idx;
    redisContext *c = w->c;
    if (expect_str(c, w->err, sizeof(w->err), "OK", "SET own:%d:%d mine-%d", w->port, w->idx, w->idx) < 0)
        goto fail;
    char mine[64];
    snprintf(mine, sizeof(mine), "mine-%d", w->idx);
    for (int round = 0; round < ROUNDS / 2; round++) {
        unsigned tag = (unsigned)rng_next(&rng);
        for (int j = 0; j < 100; j++) {
            if (j % 3 == 0)
                redisAppendCommand(c, "ECHO e%d.%u.%d", w->idx, tag, j);
            else
                redisAppendCommand(c, "GET own:%d:%d", w->port, w->idx);
        }
        for (int j = 0; j < 100; j++) {
            redisReply *r;
            char want[64];
            if (j % 3 == 0)
                snprintf(want, sizeof(want), "e%d.%u.%d", w->idx, tag, j);
            else
                snprintf(want, sizeof(want), "%s", mine);
            if (redisGetReply(c, (void **)&r) != REDIS_OK)
                FAIL(w, "no reply (%s)", c->errstr);
            int ok = r->type == REDIS_REPLY_STRING && !strcmp(r->str, want);
            if (!ok)
                snprintf(w->err, sizeof(w->err), "round %d reply %d: '%s', want '%s'", round, j,
                         r->str ? r->str : "", want);
            freeReplyObject(r);
            if (!ok)
                goto fail;
        }
    }
fail:
    return;
}

static void test_replies(void **state)
{
    (void)state;
    run_both(w_replies);
}

/* ---- client names ---------------------------------------------------------------- */

static void w_names(struct worker *w)
{
    char name[32];
    snprintf(name, sizeof(name), "client-%d", w->idx);
    redisContext *c = w->c;
    redisReply *r = redisCommand(c, "CLIENT GETNAME");
    int ok = r && r->type == REDIS_REPLY_NIL;
    if (r)
        freeReplyObject(r);
    if (!ok)
        FAIL(w, "a new client has a name");
    if (expect_str(c, w->err, sizeof(w->err), "OK", "CLIENT SETNAME %s", name) < 0)
        goto fail;
    for (int round = 0; round < ROUNDS; round++) {
        for (int j = 0; j < 10; j++) {
            redisAppendCommand(c, "GET n:%d", j);
            redisAppendCommand(c, "CLIENT GETNAME");
        }
        for (int j = 0; j < 20; j++) {
            if (redisGetReply(c, (void **)&r) != REDIS_OK)
                FAIL(w, "no reply (%s)", c->errstr);
            ok = j % 2 == 0 || (r->type == REDIS_REPLY_STRING && !strcmp(r->str, name));
            if (!ok)
                snprintf(w->err, sizeof(w->err), "CLIENT GETNAME: '%s', want %s", r->str ? r->str : "(nil)", name);
            freeReplyObject(r);
            if (!ok)
                goto fail;
        }
    }
fail:
    return;
}

static void test_names(void **state)
{
    (void)state;
    run_both(w_names);
    /* no name leaked onto the upstream's connections */
    redisContext *d = upstream();
    redisReply *r = redisCommand(d, "CLIENT LIST");
    assert_non_null(r);
    assert_null(strstr(r->str, "name=client-"));
    freeReplyObject(r);
    redisFree(d);
}

/* ---- blocking commands ------------------------------------------------------------ */

struct blk {
    int     port;
    char    got[128];
    char    err[256];
};

static void *blpop_thread(void *p)
{
    struct blk *b = p;
    redisContext *c = conn(b->port);
    if (!c) {
        snprintf(b->err, sizeof(b->err), "cannot connect");
        return NULL;
    }
    struct timeval tv = { 60, 0 };
    redisSetTimeout(c, tv);
    redisReply *r = redisCommand(c, "BLPOP blk:list 0");
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        snprintf(b->got, sizeof(b->got), "%s=%s", r->element[0]->str, r->element[1]->str);
    else
        snprintf(b->err, sizeof(b->err), "BLPOP: %s", r ? (r->str ? r->str : "odd reply") : c->errstr);
    if (r)
        freeReplyObject(r);
    /* the same client goes on with ordinary commands */
    if (!b->err[0])
        (void)expect_str(c, b->err, sizeof(b->err), "OK", "SET blk:after 1");
    redisFree(c);
    return NULL;
}

static void test_blocking(void **state)
{
    (void)state;
    for (int p = 0; p < 2; p++) {
        redisContext *d = upstream();
        struct blk b = { .port = both_ports[p] };
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, blpop_thread, &b), 0);
        /* it blocks in Redis (on a connection of its own) ... */
        assert_int_equal(th_redis_wait_info(redis_p.port, "blocked_clients", 1, TH_MS), 0);
        /* ... while the others are served */
        run_clients(NCLIENTS / 2, both_ports[p], w_replies, NULL);
        assert_int_equal(th_redis_info(redis_p.port, "blocked_clients"), 1);
        /* a push from another pooled client wakes it */
        redisContext *o = conn(both_ports[p]);
        assert_non_null(o);
        assert_int_equal(expect_int(o, "LPUSH blk:list v%d", p), 1);
        pthread_join(th, NULL);
        if (b.err[0])
            print_error("%s\n", b.err);
        assert_string_equal(b.err, "");
        char want[32];
        snprintf(want, sizeof(want), "blk:list=v%d", p);
        assert_string_equal(b.got, want);
        assert_int_equal(th_redis_wait_info(redis_p.port, "blocked_clients", 0, TH_MS), 0);
        redisFree(o);
        redisFree(d);
    }
}

/* ---- pub/sub ------------------------------------------------------------------------ */

static void test_pubsub(void **state)
{
    (void)state;
    char err[256];
    for (int p = 0; p < 2; p++) {
        redisContext *s1 = conn(both_ports[p]), *s2 = conn(both_ports[p]), *pub = conn(both_ports[p]);
        assert_non_null(s1);
        assert_non_null(s2);
        assert_non_null(pub);
        redisReply *r = redisCommand(s1, "SUBSCRIBE ch:1");
        assert_non_null(r);
        freeReplyObject(r);
        r = redisCommand(s2, "SUBSCRIBE ch:2");
        assert_non_null(r);
        freeReplyObject(r);
        /* interleaved with ordinary traffic of the publisher */
        for (int i = 0; i < 20; i++) {
            assert_int_equal(expect_int(pub, "PUBLISH ch:%d m%d", 1 + i % 2, i), 1);
            assert_int_equal(expect_str(pub, err, sizeof(err), "OK", "SET ps:%d x", i), 0);
        }
        for (int i = 0; i < 20; i++) {
            redisContext *s = i % 2 ? s2 : s1;
            assert_int_equal(redisGetReply(s, (void **)&r), REDIS_OK);
            assert_int_equal(r->type, REDIS_REPLY_ARRAY);
            assert_int_equal(r->elements, 3);
            assert_string_equal(r->element[0]->str, "message");
            char ch[16], m[16];
            snprintf(ch, sizeof(ch), "ch:%d", 1 + i % 2);
            snprintf(m, sizeof(m), "m%d", i);
            assert_string_equal(r->element[1]->str, ch);
            assert_string_equal(r->element[2]->str, m);
            freeReplyObject(r);
        }
        /* nothing else came to either */
        assert_true(th_quiet(s1->fd, 100));
        assert_true(th_quiet(s2->fd, 100));
        /* the last unsubscribe ends the mode: ordinary commands again */
        r = redisCommand(s1, "UNSUBSCRIBE");
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(r->element[2]->integer, 0);
        freeReplyObject(r);
        assert_int_equal(expect_str(s1, err, sizeof(err), "x", "GET ps:0"), 0);
        /* a message to ch:1 now reaches nobody; ch:2 still reaches s2 */
        assert_int_equal(expect_int(pub, "PUBLISH ch:1 late"), 0);
        assert_int_equal(expect_int(pub, "PUBLISH ch:2 late"), 1);
        assert_int_equal(redisGetReply(s2, (void **)&r), REDIS_OK);
        assert_string_equal(r->element[2]->str, "late");
        freeReplyObject(r);
        redisFree(s1);
        redisFree(s2);
        redisFree(pub);
    }
}

/* ---- MONITOR ------------------------------------------------------------------------- */

static void test_monitor(void **state)
{
    (void)state;
    char err[256];
    for (int p = 0; p < 2; p++) {
        redisContext *m = conn(both_ports[p]), *c = conn(both_ports[p]);
        assert_non_null(m);
        assert_non_null(c);
        assert_int_equal(expect_str(m, err, sizeof(err), "OK", "MONITOR"), 0);
        assert_int_equal(expect_str(c, err, sizeof(err), "OK", "SET mon:%d seen", p), 0);
        /* the monitor sees the other client's command (it is Redis's own
         * stream, on a connection of the monitor's own) */
        char want[32];
        snprintf(want, sizeof(want), "\"mon:%d\"", p);
        int seen = 0;
        for (int i = 0; i < 50 && !seen; i++) {
            redisReply *r;
            assert_int_equal(redisGetReply(m, (void **)&r), REDIS_OK);
            assert_int_equal(r->type, REDIS_REPLY_STATUS);
            seen = strstr(r->str, want) != NULL;
            freeReplyObject(r);
        }
        assert_true(seen);
        /* and the others are served meanwhile */
        run_clients(4, both_ports[p], w_names, NULL);
        redisFree(m);
        redisFree(c);
    }
}

/* ---- protocol versions, RESP3 pub/sub, CLIENT REPLY, tracking (raw RESP) ---------- */

/* Sends <cmd> (an inline command, CRLF added) and reads one reply, which
 * must be exactly <want> (NULL: any; the reply is dropped). 0 or -1 (the
 * reason in <err>). */
static int raw(struct th_conn *c, char *err, size_t cap, const char *cmd, const char *want)
{
    char line[512];
    snprintf(line, sizeof(line), "%s\r\n", cmd);
    if (th_conn_send(c, line) < 0) {
        snprintf(err, cap, "%s: cannot send", cmd);
        return -1;
    }
    char *r = th_conn_reply(c, TH_MS);
    int ok = r && (!want || strcmp(r, want) == 0);
    if (!ok)
        snprintf(err, cap, "%s: got '%.200s', want '%s'", cmd, r ? r : "(nothing)", want ? want : "any");
    free(r);
    return ok ? 0 : -1;
}

/* The next reply (a push, a message) must be exactly <want> (NULL: any). */
static int raw_next(struct th_conn *c, char *err, size_t cap, const char *want)
{
    char *r = th_conn_reply(c, TH_MS);
    int ok = r && (!want || strcmp(r, want) == 0);
    if (!ok)
        snprintf(err, cap, "next: got '%.200s', want '%s'", r ? r : "(nothing)", want ? want : "any");
    free(r);
    return ok ? 0 : -1;
}

#define RAW(c, cmd, want)                                        \
    do {                                                         \
        char err_[512];                                          \
        if (raw((c), err_, sizeof(err_), (cmd), (want)) < 0)     \
            fail_msg("%s", err_);                                \
    } while (0)
#define RAW_NEXT(c, want)                                        \
    do {                                                         \
        char err_[512];                                          \
        if (raw_next((c), err_, sizeof(err_), (want)) < 0)       \
            fail_msg("%s", err_);                                \
    } while (0)

/* Even clients speak RESP3 (HELLO 3), odd ones RESP2, interleaved on the
 * same listener: each gets its own protocol's replies, locally made ones
 * (CLIENT GETNAME's nil) included. */
static void w_protocols(struct worker *w)
{
    int resp3 = !(w->idx & 1);
    struct th_conn c = { .fd = -1 };
    char cmd[128];
    const char *nil = resp3 ? "_\r\n" : "$-1\r\n";
    char map[64];
    snprintf(map, sizeof(map), resp3 ? "%%1\r\n$1\r\nf\r\n$%zu\r\nv%d\r\n" : "*2\r\n$1\r\nf\r\n$%zu\r\nv%d\r\n",
             (size_t)snprintf(NULL, 0, "v%d", w->idx), w->idx);
    if (th_conn_open(&c, w->port) < 0)
        FAIL(w, "cannot connect");
    /* a local answer pipelined behind HELLO 3 is RESP3 already */
    if (resp3 && (th_conn_send(&c, "HELLO 3\r\nCLIENT GETNAME\r\n") < 0 ||
                  raw_next(&c, w->err, sizeof(w->err), NULL) < 0 ||
                  raw_next(&c, w->err, sizeof(w->err), "_\r\n") < 0))
        goto fail;
    snprintf(cmd, sizeof(cmd), "HSET pr:%d:%d f v%d", w->port, w->idx, w->idx);
    if (raw(&c, w->err, sizeof(w->err), cmd, ":1\r\n") < 0)
        goto fail;
    for (int round = 0; round < ROUNDS; round++) {
        char pipe[512];
        snprintf(pipe, sizeof(pipe), "HGETALL pr:%d:%d\r\nGET pr:none\r\nCLIENT GETNAME\r\n", w->port, w->idx);
        if (th_conn_send(&c, pipe) < 0)
            FAIL(w, "cannot send");
        const char *want[3] = { map, nil, nil };
        for (int k = 0; k < 3; k++) {
            char *r = th_conn_reply(&c, TH_MS);
            int ok = r && !strcmp(r, want[k]);
            if (!ok)
                snprintf(w->err, sizeof(w->err), "round %d (RESP%d) reply %d: '%s', want '%s'", round,
                         resp3 ? 3 : 2, k, r ? r : "(nothing)", want[k]);
            free(r);
            if (!ok)
                goto fail;
        }
    }
fail:
    th_conn_close(&c);
}

static void test_protocols(void **state)
{
    (void)state;
    for (int p = 0; p < 2; p++)
        run_workers(NCLIENTS, both_ports[p], w_protocols, NULL);
}

/* RESP3 pub/sub: a subscribed client still runs commands; messages and
 * confirmations come as pushes, only its own channel's. */
static void test_resp3_pubsub(void **state)
{
    (void)state;
    for (int p = 0; p < 2; p++) {
        struct th_conn a = { .fd = -1 }, b = { .fd = -1 };
        assert_int_equal(th_conn_open(&a, both_ports[p]), 0);
        assert_int_equal(th_conn_open(&b, both_ports[p]), 0);
        RAW(&a, "HELLO 3", NULL);
        RAW(&b, "SET r3:k v", "+OK\r\n");
        RAW(&a, "SUBSCRIBE r3:ch", ">3\r\n$9\r\nsubscribe\r\n$5\r\nr3:ch\r\n:1\r\n");
        RAW(&a, "GET r3:k", "$1\r\nv\r\n");
        RAW(&b, "PUBLISH r3:other x", ":0\r\n");
        RAW(&b, "PUBLISH r3:ch hello", ":1\r\n");
        RAW_NEXT(&a, ">3\r\n$7\r\nmessage\r\n$5\r\nr3:ch\r\n$5\r\nhello\r\n");
        RAW(&a, "UNSUBSCRIBE", ">3\r\n$11\r\nunsubscribe\r\n$5\r\nr3:ch\r\n:0\r\n");
        RAW(&a, "GET r3:k", "$1\r\nv\r\n");
        RAW(&b, "PUBLISH r3:ch again", ":0\r\n");
        assert_true(th_quiet(a.fd, 100));
        th_conn_close(&a);
        th_conn_close(&b);
    }
}

/* CLIENT REPLY OFF / SKIP hold for their client only. */
static void test_client_reply(void **state)
{
    (void)state;
    for (int p = 0; p < 2; p++) {
        struct th_conn a = { .fd = -1 }, b = { .fd = -1 };
        assert_int_equal(th_conn_open(&a, both_ports[p]), 0);
        assert_int_equal(th_conn_open(&b, both_ports[p]), 0);
        assert_int_equal(th_conn_send(&a, "CLIENT REPLY OFF\r\nSET rp:a 1\r\nGET rp:a\r\n"), 0);
        RAW(&b, "SET rp:b 2", "+OK\r\n");
        RAW(&b, "GET rp:b", "$1\r\n2\r\n");
        RAW(&a, "CLIENT REPLY ON", "+OK\r\n");
        RAW(&a, "GET rp:a", "$1\r\n1\r\n");
        assert_int_equal(th_conn_send(&a, "CLIENT REPLY SKIP\r\nSET rp:a 3\r\n"), 0);
        RAW(&b, "GET rp:b", "$1\r\n2\r\n");
        RAW(&a, "GET rp:a", "$1\r\n3\r\n");
        RAW(&b, "GET rp:a", "$1\r\n3\r\n");
        th_conn_close(&a);
        th_conn_close(&b);
    }
}

/* CLIENT TRACKING: the tracking client alone gets the invalidation of a key
 * it read that another client changed; none after TRACKING OFF. */
static void test_tracking(void **state)
{
    (void)state;
    for (int p = 0; p < 2; p++) {
        struct th_conn a = { .fd = -1 }, b = { .fd = -1 };
        assert_int_equal(th_conn_open(&a, both_ports[p]), 0);
        assert_int_equal(th_conn_open(&b, both_ports[p]), 0);
        RAW(&a, "HELLO 3", NULL);
        RAW(&b, "HELLO 3", NULL);
        RAW(&b, "SET tr:k 1", "+OK\r\n");
        RAW(&a, "CLIENT TRACKING ON", "+OK\r\n");
        RAW(&a, "GET tr:k", "$1\r\n1\r\n");
        RAW(&b, "GET tr:k", "$1\r\n1\r\n");
        RAW(&b, "SET tr:k 2", "+OK\r\n");
        RAW_NEXT(&a, ">2\r\n$10\r\ninvalidate\r\n*1\r\n$4\r\ntr:k\r\n");
        assert_true(th_quiet(b.fd, 100));
        RAW(&a, "CLIENT TRACKING OFF", "+OK\r\n");
        RAW(&a, "GET tr:k", "$1\r\n2\r\n");
        RAW(&b, "SET tr:k 3", "+OK\r\n");
        assert_true(th_quiet(a.fd, 100));
        th_conn_close(&a);
        th_conn_close(&b);
    }
}

/* The client's name inside MULTI: a queued GETNAME answers the client's
 * name, a queued SETNAME sets it (EXEC runs them). */
static void test_names_in_multi(void **state)
{
    (void)state;
    for (int p = 0; p < 2; p++) {
        struct th_conn a = { .fd = -1 };
        assert_int_equal(th_conn_open(&a, both_ports[p]), 0);
        RAW(&a, "CLIENT SETNAME carol", "+OK\r\n");
        RAW(&a, "MULTI", "+OK\r\n");
        RAW(&a, "CLIENT GETNAME", "+QUEUED\r\n");
        RAW(&a, "EXEC", "*1\r\n$5\r\ncarol\r\n");
        RAW(&a, "MULTI", "+OK\r\n");
        RAW(&a, "CLIENT SETNAME dave", "+QUEUED\r\n");
        RAW(&a, "EXEC", "*1\r\n+OK\r\n");
        RAW(&a, "CLIENT GETNAME", "$4\r\ndave\r\n");
        RAW(&a, "HELLO 2 SETNAME erin", NULL);
        RAW(&a, "CLIENT GETNAME", "$4\r\nerin\r\n");
        /* RESET forgets the name, as Redis does; a GETNAME pipelined
         * right behind it sees that too */
        RAW(&a, "RESET", "+RESET\r\n");
        RAW(&a, "CLIENT GETNAME", "$-1\r\n");
        RAW(&a, "CLIENT SETNAME frank", "+OK\r\n");
        if (th_conn_send(&a, "RESET\r\nCLIENT GETNAME\r\n") < 0)
            fail_msg("send");
        RAW_NEXT(&a, "+RESET\r\n");
        RAW_NEXT(&a, "$-1\r\n");
        /* pipelined behind an earlier transaction: the SETNAME queued in a
         * transaction a WATCH stops (EXEC's nil) names nobody, and the
         * earlier EXEC's answer does not take it either */
        if (th_conn_send(&a, "MULTI\r\nEXEC\r\nWATCH nm:w\r\nSET nm:w 1\r\nMULTI\r\n"
                             "CLIENT SETNAME gina\r\nEXEC\r\nCLIENT GETNAME\r\n") < 0)
            fail_msg("send");
        static const char *const want[] = { "+OK\r\n", "*0\r\n", "+OK\r\n", "+OK\r\n",
                                            "+OK\r\n", "+QUEUED\r\n", "*-1\r\n", "$-1\r\n" };
        for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
            RAW_NEXT(&a, want[i]);
        th_conn_close(&a);
    }
}

/* EXEC and DISCARD without MULTI are refused and leave the keys watched:
 * the client keeps its connection, so the next transaction still sees the
 * WATCH (each request waits for its answer, so the refusal is read before
 * MULTI is sent). */
static void test_exec_without_multi_keeps_watch(void **state)
{
    (void)state;
    for (int p = 0; p < 2; p++)
        for (int k = 0; k < 2; k++) {
            struct th_conn a = { .fd = -1 };
            assert_int_equal(th_conn_open(&a, both_ports[p]), 0);
            RAW(&a, "WATCH ewm:k", "+OK\r\n");
            RAW(&a, "SET ewm:k 1", "+OK\r\n");
            RAW(&a, k == 0 ? "EXEC" : "DISCARD",
                k == 0 ? "-ERR EXEC without MULTI\r\n" : "-ERR DISCARD without MULTI\r\n");
            RAW(&a, "MULTI", "+OK\r\n");
            RAW(&a, "INCR ewm:n", "+QUEUED\r\n");
            RAW(&a, "EXEC", "*-1\r\n");
            th_conn_close(&a);
        }
}

/* A client sends an empty request (`*0`, `*-1`, a blank line: Redis answers
 * nothing) between pooled ones while another client pins the shared
 * connection (WATCH right behind pooled requests): each still gets its own
 * replies, nothing of the other's. The 2 ms gaps only make the requests
 * arrive in separate reads; the checks hold however they fall. */
static void test_empty_request_beside_pin(void **state)
{
    (void)state;
    static const char *const empties[] = { "*0\r\n", "*-1\r\n", "\r\n" };
    for (int p = 0; p < 2; p++)
        for (int trial = 0; trial < 12; trial++) {
            struct th_conn a = { .fd = -1 }, b = { .fd = -1 };
            assert_int_equal(th_conn_open(&a, both_ports[p]), 0);
            assert_int_equal(th_conn_open(&b, both_ports[p]), 0);
            assert_int_equal(th_conn_send(&b, "SET em:b v\r\n"), 0);
            usleep(2000);
            assert_int_equal(th_conn_send(&a, "PING\r\nDEL em:a\r\n"), 0);
            assert_int_equal(th_conn_send(&b, empties[trial % 3]), 0);
            usleep(2000);
            assert_int_equal(th_conn_send(&a, "WATCH em:k\r\n"), 0);
            assert_int_equal(th_conn_send(&b, "MSET em:x 1 em:y 2\r\n"), 0);
            usleep(2000);
            assert_int_equal(th_conn_send(&b, "ECHO b1\r\n"), 0);
            usleep(2000);
            assert_int_equal(th_conn_send(&b, "ECHO b2\r\n"), 0);
            RAW_NEXT(&a, "+PONG\r\n");
            RAW_NEXT(&a, ":0\r\n");
            RAW_NEXT(&a, "+OK\r\n");
            RAW_NEXT(&b, "+OK\r\n");
            RAW_NEXT(&b, "+OK\r\n");
            RAW_NEXT(&b, "$2\r\nb1\r\n");
            RAW_NEXT(&b, "$2\r\nb2\r\n");
            RAW(&a, "UNWATCH", "+OK\r\n");
            RAW(&a, "ECHO a1", "$2\r\na1\r\n");
            RAW(&b, "ECHO b3", "$2\r\nb3\r\n");
            th_conn_close(&a);
            th_conn_close(&b);
        }
}

/* ---- a busy script ------------------------------------------------------------------ */

/* A client runs a script that never ends (pipelined behind FUNCTION LOAD,
 * with a PING behind it): FUNCTION KILL / SCRIPT KILL of another client
 * reach Redis and end it; with more than one shared connection allowed
 * (upstream_pool = 2) the others are answered at once meanwhile (-BUSY, as
 * Redis answers every other connection). With upstream_pool = 1 a request
 * queued on the one shared connection waits behind the script, but the kill
 * must not. */
static int kill_scripts(void **state)
{
    (void)state;
    redisContext *d = direct();
    if (d) {
        redisReply *r = redisCommand(d, "FUNCTION KILL");
        if (r)
            freeReplyObject(r);
        r = redisCommand(d, "SCRIPT KILL");
        if (r)
            freeReplyObject(r);
        redisFree(d);
    }
    return th_alive_or_report(&sl_p);
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

static void busy_round(int port, int fn, int others_answered)
{
    static const char lib[] = "#!lua name=busy\nredis.register_function('busy', function() while 1 do "
                              "redis.call('ping') end end)";
    char buf[512];
    if (fn)
        snprintf(buf, sizeof(buf),
                 "*4\r\n$8\r\nFUNCTION\r\n$4\r\nLOAD\r\n$7\r\nREPLACE\r\n$%zu\r\n%s\r\n"
                 "*3\r\n$5\r\nFCALL\r\n$4\r\nbusy\r\n$1\r\n0\r\n*1\r\n$4\r\nPING\r\n",
                 sizeof(lib) - 1, lib);
    else
        snprintf(buf, sizeof(buf), "*3\r\n$4\r\nEVAL\r\n$33\r\nwhile 1 do redis.call('ping') end\r\n"
                                   "$1\r\n0\r\n*1\r\n$4\r\nPING\r\n");
    struct th_conn rd = { .fd = -1 }, r = { .fd = -1 };
    assert_int_equal(th_conn_open(&r, port), 0);
    assert_int_equal(th_conn_open(&rd, port), 0);
    RAW(&r, "PING", "+PONG\r\n");
    assert_int_equal(th_conn_send(&rd, buf), 0);
    /* the script starts (-BUSY) within TH_MS; every PING is answered.
     * The PINGs go once it runs; one read in the same turn as the script
     * goes to another connection too (test_pool_busy.c). */
    int busy = 0;
    uint64_t end = th_now_ms() + TH_MS;
    while (!script_running() && th_now_ms() < end)
        usleep(2000); /* polling a condition */
    busy = !others_answered;
    while (!busy && th_now_ms() < end) {
        assert_int_equal(th_conn_send(&r, "PING\r\n"), 0);
        char *x = th_conn_reply(&r, TH_MS);
        if (!x)
            fail_msg("%s: a PING beside a busy script got no answer", fn ? "FCALL" : "EVAL");
        busy = strncmp(x, "-BUSY", 5) == 0;
        free(x);
    }
    assert_true(busy);
    RAW(&r, fn ? "FUNCTION KILL" : "SCRIPT KILL", "+OK\r\n");
    if (fn)
        RAW_NEXT(&rd, "$4\r\nbusy\r\n");
    char *x = th_conn_reply(&rd, TH_MS);
    assert_non_null(x);
    assert_non_null(strstr(x, "killed by user"));
    free(x);
    RAW_NEXT(&rd, "+PONG\r\n");
    RAW(&r, "PING", "+PONG\r\n");
    th_conn_close(&r);
    th_conn_close(&rd);
}

static void test_busy_script(void **state)
{
    (void)state;
    char err[256];
    redisContext *d = upstream();
    assert_int_equal(expect_str(d, err, sizeof(err), "OK", "CONFIG SET busy-reply-threshold 10"), 0);
    redisFree(d);
    for (int p = 0; p < 2; p++)
        for (int fn = 0; fn < 2; fn++)
            busy_round(both_ports[p], fn, p == 1);
}

/* ---- upstream connections killed under traffic; a client that does not read -------- */

/* Clients pipelining GETs of their own keys while the upstream's
 * connections are killed over and over: each reply is the client's own
 * value or sluice's error for a lost connection, or the client is closed;
 * never another client's value. */
static void w_killed(struct worker *w)
{
    int lost = 0, closed = 0;
    char mine[64];
    snprintf(mine, sizeof(mine), "kill-%d", w->idx);
    redisContext *c = w->c;
    for (int round = 0; round < ROUNDS && !closed; round++) {
        for (int j = 0; j < 20; j++)
            redisAppendCommand(c, "GET kl:%d:%d", w->port, w->idx);
        for (int j = 0; j < 20; j++) {
            redisReply *r;
            if (redisGetReply(c, (void **)&r) != REDIS_OK) {
                closed = 1; /* a reply cut mid-way closes the client */
                break;
            }
            int own = r->type == REDIS_REPLY_STRING && !strcmp(r->str, mine);
            int err = r->type == REDIS_REPLY_ERROR && strstr(r->str, "sluice");
            if (!own && !err)
                snprintf(w->err, sizeof(w->err), "round %d: '%s' (type %d), want %s or sluice's error",
                         round, r->str ? r->str : "", r->type, mine);
            lost += err;
            freeReplyObject(r);
            if (!own && !err)
                goto fail;
        }
    }
fail:
    return;
}

struct killer {
    volatile int stop;
    int          kills;
};

static void *killer_main(void *p)
{
    struct killer *k = p;
    redisContext *d = direct();
    while (d && !k->stop) {
        /* every connection but this one: sluice's pooled and pinned ones */
        redisReply *r = redisCommand(d, "CLIENT KILL TYPE normal SKIPME yes");
        if (r && r->type == REDIS_REPLY_INTEGER)
            k->kills += (int)r->integer;
        if (r)
            freeReplyObject(r);
        usleep(3000); /* pacing, not synchronisation */
    }
    if (d)
        redisFree(d);
    return NULL;
}

static void test_upstream_killed(void **state)
{
    (void)state;
    for (int p = 0; p < 2; p++) {
        struct killer k = { 0 };
        pthread_t th;
        redisContext *d = upstream();
        for (int i = 0; i < NCLIENTS; i++) {
            redisReply *r = redisCommand(d, "SET kl:%d:%d kill-%d", both_ports[p], i, i);
            assert_non_null(r);
            freeReplyObject(r);
        }
        redisFree(d);
        assert_int_equal(pthread_create(&th, NULL, killer_main, &k), 0);
        run_clients(NCLIENTS, both_ports[p], w_killed, NULL);
        k.stop = 1;
        pthread_join(th, NULL);
        assert_true(k.kills > 0);
        /* and the listener serves again afterwards */
        run_clients(4, both_ports[p], w_replies, NULL);
    }
}

/* A client that sends many GETs of a big value and reads nothing: the
 * clients sharing its upstream connection (upstream_pool = 1) are served
 * all the same. */
static void test_slow_reader(void **state)
{
    (void)state;
    redisContext *d = upstream();
    size_t big = 1 << 20;
    char *v = malloc(big);
    assert_non_null(v);
    memset(v, 'b', big);
    redisReply *r = redisCommand(d, "SET slow:big %b", v, big);
    assert_non_null(r);
    freeReplyObject(r);
    free(v);
    redisFree(d);
    int fd = th_connect(port_pool1);
    assert_true(fd >= 0);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    char req[64];
    int n = snprintf(req, sizeof(req), "*2\r\n$3\r\nGET\r\n$8\r\nslow:big\r\n");
    for (int i = 0; i < 200; i++)
        if (th_write_all(fd, req, (size_t)n) < 0)
            break; /* closed already: past upstream_pool_client_buffer */
    uint64_t t0 = th_now_ms();
    run_clients(NCLIENTS, port_pool1, w_replies, NULL);
    uint64_t took = th_now_ms() - t0;
    if (took > TH_MS)
        print_error("the others took %llu ms beside a client that does not read\n",
                    (unsigned long long)took);
    assert_true(took <= TH_MS);
    close(fd);
}

/* ---- upstream connections -------------------------------------------------------------- */

/* Connections to the upstream other than the asking one: "connected_clients"
 * less one. */
static long upstream_conns(int port) { return th_redis_info(port, "connected_clients") - 1; }

struct active {
    int port;
    volatile int *stop;
};

static void w_active(struct worker *w)
{
    struct active *a = w->arg;
    redisContext *c = w->c;
    for (int round = 0; !*a->stop || round < 5; round++) {
        for (int j = 0; j < 10; j++)
            redisAppendCommand(c, j % 2 ? "GET act:%d" : "SET act:%d %d", w->idx, round);
        for (int j = 0; j < 10; j++) {
            redisReply *r;
            if (redisGetReply(c, (void **)&r) != REDIS_OK)
                FAIL(w, "no reply (%s)", c->errstr);
            int ok = r->type != REDIS_REPLY_ERROR;
            freeReplyObject(r);
            if (!ok)
                FAIL(w, "an error reply");
        }
        if (round > 2000)
            FAIL(w, "the main thread never said stop");
    }
fail:
    return;
}

struct counter {
    struct active a;
    int           workers;
    pthread_t     th;
};

static void *active_main(void *p)
{
    struct counter *k = p;
    run_clients(k->workers, k->a.port, w_active, &k->a);
    return NULL;
}

static void test_connection_counts(void **state)
{
    (void)state;
    struct th_proc r, s;
    int port;
    assert_int_equal(th_pair_start(&r, &s, &port, "upstream_pool = 2\n", NULL, NULL), 0);
    char err[256];
    enum { IDLE = 50, ACTIVE = 20 };
    redisContext *idle[IDLE];
    for (int i = 0; i < IDLE; i++) {
        idle[i] = conn(port);
        assert_non_null(idle[i]);
        assert_int_equal(expect_str(idle[i], err, sizeof(err), "PONG", "PING"), 0);
    }
    assert_true(upstream_conns(r.port) <= 2);

    volatile int stop = 0;
    struct counter k = { .a = { .port = port, .stop = &stop }, .workers = ACTIVE };
    assert_int_equal(pthread_create(&k.th, NULL, active_main, &k), 0);
    long most = 0;
    /* one client in MULTI holds a connection of its own meanwhile */
    redisContext *tx = conn(port);
    assert_non_null(tx);
    assert_int_equal(expect_str(tx, err, sizeof(err), "OK", "MULTI"), 0);
    assert_int_equal(expect_str(tx, err, sizeof(err), "QUEUED", "SET tx:k 1"), 0);
    for (int i = 0; i < 100; i++) {
        long n = upstream_conns(r.port);
        if (n > most)
            most = n;
        usleep(2000); /* samples, not synchronisation */
    }
    redisReply *rep = redisCommand(tx, "EXEC");
    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_ARRAY);
    freeReplyObject(rep);
    for (int i = 0; i < 50; i++) {
        long n = upstream_conns(r.port);
        if (n > most)
            most = n;
        usleep(2000);
    }
    stop = 1;
    pthread_join(k.th, NULL);
    if (most > 2 + 1)
        print_error("%ld upstream connections for %d idle and %d active clients, 1 pinned\n", most,
                    IDLE, ACTIVE);
    assert_true(most <= 2 + 1);
    /* the pinned connection came back (or went): at most the pool's 2 again,
     * each clean (no transaction, database 0, user default, no name) */
    uint64_t end = th_now_ms() + TH_MS;
    while (upstream_conns(r.port) > 2 && th_now_ms() < end)
        usleep(10000);
    assert_true(upstream_conns(r.port) <= 2);
    redisContext *d = conn(r.port);
    assert_non_null(d);
    rep = redisCommand(d, "CLIENT LIST");
    assert_non_null(rep);
    int lines = 0;
    char *save = NULL;
    for (char *line = strtok_r(rep->str, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strstr(line, "cmd=client|list"))
            continue; /* this connection */
        lines++;
        if (!strstr(line, " db=0 ") || !strstr(line, " multi=-1 ") ||
            !strstr(line, " user=default ") || !strstr(line, " name= "))
            print_error("not clean: %s\n", line);
        assert_non_null(strstr(line, " db=0 "));
        assert_non_null(strstr(line, " multi=-1 "));
        assert_non_null(strstr(line, " user=default "));
        assert_non_null(strstr(line, " name= "));
    }
    freeReplyObject(rep);
    assert_true(lines <= 2);
    redisFree(d);
    redisFree(tx);
    for (int i = 0; i < IDLE; i++)
        redisFree(idle[i]);
    /* not th_pair_stop(): it kills every tracked process, the group's too */
    assert_int_equal(th_stop(&s), 0);
    th_stop(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_databases, sluice_alive),
        cmocka_unit_test_teardown(test_users, sluice_alive),
        cmocka_unit_test_teardown(test_transactions, sluice_alive),
        cmocka_unit_test_teardown(test_watch, sluice_alive),
        cmocka_unit_test_teardown(test_watch_pipelined, sluice_alive),
        cmocka_unit_test_teardown(test_replies, sluice_alive),
        cmocka_unit_test_teardown(test_names, sluice_alive),
        cmocka_unit_test_teardown(test_blocking, sluice_alive),
        cmocka_unit_test_teardown(test_pubsub, sluice_alive),
        cmocka_unit_test_teardown(test_monitor, sluice_alive),
        cmocka_unit_test_teardown(test_protocols, sluice_alive),
        cmocka_unit_test_teardown(test_resp3_pubsub, sluice_alive),
        cmocka_unit_test_teardown(test_client_reply, sluice_alive),
        cmocka_unit_test_teardown(test_tracking, sluice_alive),
        cmocka_unit_test_teardown(test_names_in_multi, sluice_alive),
        cmocka_unit_test_teardown(test_exec_without_multi_keeps_watch, sluice_alive),
        cmocka_unit_test_teardown(test_empty_request_beside_pin, sluice_alive),
        cmocka_unit_test_teardown(test_upstream_killed, sluice_alive),
        cmocka_unit_test_teardown(test_busy_script, kill_scripts),
        cmocka_unit_test_teardown(test_slow_reader, sluice_alive),
        cmocka_unit_test(test_connection_counts),
    };
    const char *only = getenv("POOL_ONLY");
    if (only)
        cmocka_set_test_filter(only);
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

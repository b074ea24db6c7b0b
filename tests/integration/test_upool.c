/* sluice integration tests — the pooled upstream connection engine
 * (src/net/upool.c), driven directly on a libuv loop in this process
 * against a real redis-server: owners interleaving small and 1 MB replies,
 * a server killed with requests in flight, setup commands (SELECT, a
 * refused AUTH), a forgotten owner's big reply, pin and unpin with RESET,
 * other owners' requests beside a script that never ends (SL_UPOOL_SLOW),
 * a reload's new N and upstream address (sl_upool_reconfigure), a small
 * batch that waits for more (batch_wait_us).
 * Each test closes its pool and checks uv_loop_close() == 0. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <uv.h>

#include "core/buf.h"
#include "core/err.h"
#include "integration/harness.h"
#include "net/gather.h"
#include "net/turn.h"
#include "net/upool.h"

#define BIG (1024 * 1024)

/* ---- a test owner ---------------------------------------------------------- */

struct towner {
    struct sl_upool_owner o;
    char    *got;          /* every byte delivered */
    size_t   len, cap;
    unsigned replies;      /* replies ended */
    unsigned failed;       /* failed() calls */
    int      err;
    char     why[256];
    size_t   refuse_after; /* refuse once this many bytes came (0: never) */
    unsigned refused;
    struct sl_upool_conn *granted; /* from the pinned() callback */
};

static int t_deliver(struct sl_upool_owner *o, struct sl_buf *b, uint32_t from, uint32_t to,
                     unsigned flags)
{
    struct towner *t = o->data;
    size_t n = to - from;
    if (t->len + n > t->cap) {
        size_t cap = t->cap ? t->cap : 4096;
        while (cap < t->len + n)
            cap *= 2;
        t->got = realloc(t->got, cap);
        assert_non_null(t->got);
        t->cap = cap;
    }
    memcpy(t->got + t->len, b->data + from, n);
    t->len += n;
    t->replies += (flags & SL_UPOOL_DONE) != 0;
    if (t->refuse_after && t->len >= t->refuse_after) {
        t->refused++;
        return 1;
    }
    return 0;
}

static void t_failed(struct sl_upool_owner *o, int err, const char *why)
{
    struct towner *t = o->data;
    t->failed++;
    t->err = err;
    snprintf(t->why, sizeof(t->why), "%s", why);
}

static void t_pinned(struct sl_upool_owner *o, struct sl_upool_conn *c)
{
    ((struct towner *)o->data)->granted = c;
}

static const struct sl_upool_cbs cbs = { t_deliver, t_failed, t_pinned };

static void towner_init(struct towner *t)
{
    memset(t, 0, sizeof(*t));
    sl_upool_owner_init(&t->o, t);
}

static void towner_free(struct towner *t)
{
    free(t->got);
    t->got = NULL;
}

/* ---- commands ------------------------------------------------------------ */

struct cmdbuf {
    char  *p;
    size_t len, cap;
};

static void cb_put(struct cmdbuf *c, const void *p, size_t n)
{
    if (c->len + n > c->cap) {
        size_t cap = c->cap ? c->cap : 256;
        while (cap < c->len + n)
            cap *= 2;
        c->p = realloc(c->p, cap);
        assert_non_null(c->p);
        c->cap = cap;
    }
    memcpy(c->p + c->len, p, n);
    c->len += n;
}

/* Appends one command of <argc> arguments (NUL-terminated, or the BIG
 * pattern when an argument is "<big>"). */
static void cb_cmd(struct cmdbuf *c, int argc, ...)
{
    char head[32];
    va_list ap;
    cb_put(c, head, (size_t)snprintf(head, sizeof(head), "*%d\r\n", argc));
    va_start(ap, argc);
    for (int i = 0; i < argc; i++) {
        const char *a = va_arg(ap, const char *);
        if (strcmp(a, "<big>") == 0) {
            cb_put(c, head, (size_t)snprintf(head, sizeof(head), "$%d\r\n", BIG));
            char *big = malloc(BIG);
            assert_non_null(big);
            th_pattern(big, BIG, 0);
            cb_put(c, big, BIG);
            free(big);
        } else {
            cb_put(c, head, (size_t)snprintf(head, sizeof(head), "$%zu\r\n", strlen(a)));
            cb_put(c, a, strlen(a));
        }
        cb_put(c, "\r\n", 2);
    }
    va_end(ap);
}

/* Submits one command for <t> now. */
static void submit(struct sl_upool_key *k, struct towner *t, int argc, ...)
{
    struct cmdbuf c = { 0 };
    char head[32];
    va_list ap;
    cb_put(&c, head, (size_t)snprintf(head, sizeof(head), "*%d\r\n", argc));
    va_start(ap, argc);
    for (int i = 0; i < argc; i++) {
        const char *a = va_arg(ap, const char *);
        cb_put(&c, head, (size_t)snprintf(head, sizeof(head), "$%zu\r\n", strlen(a)));
        cb_put(&c, a, strlen(a));
        cb_put(&c, "\r\n", 2);
    }
    va_end(ap);
    assert_int_equal(sl_upool_submit(k, &t->o, c.p, c.len, 1), 0);
    free(c.p);
}

/* The expected reply to GET of the BIG pattern. */
static void expect_big(struct cmdbuf *e)
{
    char head[32];
    cb_put(e, head, (size_t)snprintf(head, sizeof(head), "$%d\r\n", BIG));
    char *big = malloc(BIG);
    assert_non_null(big);
    th_pattern(big, BIG, 0);
    cb_put(e, big, BIG);
    free(big);
    cb_put(e, "\r\n", 2);
}

/* ---- pools and loops --------------------------------------------------------- */

static struct th_proc redis_p;

static void conf_init(struct sl_upool_conf *cf, int port, uint32_t per_key)
{
    memset(cf, 0, sizeof(*cf));
    struct sockaddr_in *a = (struct sockaddr_in *)&cf->addr;
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)port);
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cf->per_key = per_key;
    cf->max_pinned = 4;
    cf->pin_wait_max = 2;
    cf->connect_timeout_ms = TH_MS;
    cf->own_flush = 1;
}

/* A new loop in <loop> and a pool on it, its connections to <port>
 * (<per_key> each key), as conf_init sets it. */
static struct sl_upool *pool_start(uv_loop_t *loop, int port, uint32_t per_key)
{
    struct sl_upool_conf cf;
    uv_loop_init(loop);
    conf_init(&cf, port, per_key);
    struct sl_upool *p = sl_upool_new(loop, &cf, &cbs);
    assert_non_null(p);
    return p;
}

static void pool_done(uv_loop_t *loop, struct sl_upool *p)
{
    sl_upool_close(p);
    uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(loop), 0);
}

struct want {
    struct towner **t;
    int             n;
    unsigned        replies; /* each owner's replies (or a failure) */
};

static int all_answered(void *arg)
{
    struct want *w = arg;
    for (int i = 0; i < w->n; i++)
        if (w->t[i]->replies < w->replies && w->t[i]->failed == 0)
            return 0;
    return 1;
}

/* Runs <loop> until owner <t> has <n> replies or failed. */
static int run_for_one(uv_loop_t *loop, struct towner *t, unsigned n)
{
    struct towner *ts[1] = { t };
    struct want w = { ts, 1, n };
    return th_run_until(loop, all_answered, &w, TH_MS);
}

static int group_setup(void **state)
{
    (void)state;
    return th_redis_start(&redis_p, NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    th_stop(&redis_p);
    return 0;
}

/* ---- tests ------------------------------------------------------------------- */

#define NOWN 24

/* Many owners interleave small and 1 MB replies over two shared
 * connections: each gets exactly its own replies, in its order, and a
 * turn's submissions leave in one write per connection. */
static void test_interleaved_owners(void **state)
{
    (void)state;
    uv_loop_t loop;
    struct sl_upool *p = pool_start(&loop, redis_p.port, 2);
    struct sl_upool_key *k = sl_upool_key_get(p, "k0", 2, NULL, 0, 0);
    assert_non_null(k);

    /* the big value, through the pool itself */
    struct towner setter;
    towner_init(&setter);
    struct cmdbuf c = { 0 };
    cb_cmd(&c, 3, "SET", "upool:big", "<big>");
    assert_int_equal(sl_upool_submit(k, &setter.o, c.p, c.len, 1), 0);
    free(c.p);
    assert_true(run_for_one(&loop, &setter, 1));
    assert_int_equal(setter.failed, 0);
    assert_memory_equal(setter.got, "+OK\r\n", 5);

    static struct towner t[NOWN];
    struct towner *tp[NOWN];
    struct cmdbuf want[NOWN];
    memset(want, 0, sizeof(want));
    for (int i = 0; i < NOWN; i++) {
        towner_init(&t[i]);
        tp[i] = &t[i];
    }
    long reads0 = th_redis_info(redis_p.port, "total_reads_processed");
    /* one turn: every owner's commands, interleaved across owners */
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < NOWN; i++) {
            char key[32], val[32], head[64];
            snprintf(key, sizeof(key), "upool:k%d", i);
            snprintf(val, sizeof(val), "v%d-%d", i, round);
            if (round == 0) {
                submit(k, &t[i], 3, "SET", key, val);
                cb_put(&want[i], "+OK\r\n", 5);
            } else if (round == 1) {
                submit(k, &t[i], 2, "GET", key);
                snprintf(val, sizeof(val), "v%d-0", i);
                cb_put(&want[i], head, (size_t)snprintf(head, sizeof(head), "$%zu\r\n%s\r\n",
                                                        strlen(val), val));
            } else if (i % 5 == 0) {
                submit(k, &t[i], 2, "GET", "upool:big");
                expect_big(&want[i]);
            } else {
                submit(k, &t[i], 2, "INCR", key);
                cb_put(&want[i], "-ERR value is not an integer or out of range\r\n", 46);
            }
        }
    }
    struct want w = { tp, NOWN, 3 };
    assert_true(th_run_until(&loop, all_answered, &w, TH_MS));
    long reads1 = th_redis_info(redis_p.port, "total_reads_processed");
    for (int i = 0; i < NOWN; i++) {
        assert_int_equal(t[i].failed, 0);
        assert_int_equal(t[i].replies, 3);
        assert_int_equal(t[i].len, want[i].len);
        assert_memory_equal(t[i].got, want[i].p, want[i].len);
    }
    /* 72 commands: one write (the owners of a turn join the connection
     * already being written), plus the INFO itself; a write per command
     * would be 72 reads */
    assert_in_range(reads1 - reads0, 1, 8);
    struct sl_upool_stats st;
    sl_upool_stats(p, &st);
    assert_int_equal(st.pooled, 1);
    assert_int_equal(st.inflight, 0);
    assert_int_equal(st.failures, 0);
    struct sl_upool_key_stats ks;
    sl_upool_key_stats(k, &ks);
    assert_int_equal(ks.conns, 1);

    for (int i = 0; i < NOWN; i++) {
        towner_free(&t[i]);
        free(want[i].p);
    }
    towner_free(&setter);
    sl_upool_key_put(k);
    pool_done(&loop, p);
}

/* A Redis killed with requests in flight fails exactly the owners that had
 * some, once each; an owner whose replies were all in hears nothing. The
 * next request makes a new connection (lazily), which fails at connect. */
static void test_killed_midflight(void **state)
{
    (void)state;
    struct th_proc r;
    assert_int_equal(th_redis_start(&r, NULL), 0);
    uv_loop_t loop;
    struct sl_upool *p = pool_start(&loop, r.port, 1);
    struct sl_upool_key *k = sl_upool_key_get(p, "k", 1, NULL, 0, 0);
    struct towner done, a, b, c, idle;
    towner_init(&c);
    towner_init(&done);
    towner_init(&a);
    towner_init(&b);
    towner_init(&idle);
    submit(k, &done, 1, "PING");
    assert_true(run_for_one(&loop, &done, 1));
    /* A blocks the shared connection; B's and C's requests wait behind it
     * (B has two entries in the FIFO, apart: it must still hear once) */
    submit(k, &a, 3, "BLPOP", "upool:never", "0");
    submit(k, &b, 2, "GET", "upool:x");
    submit(k, &c, 2, "GET", "upool:y");
    submit(k, &b, 2, "GET", "upool:z");
    int blocked = 0;
    for (int i = 0; i < 400 && !blocked; i++) {
        th_run_until(&loop, NULL, NULL, 10);
        blocked = th_redis_info(r.port, "blocked_clients") == 1;
    }
    assert_true(blocked);
    kill(r.pid, SIGKILL);
    int status;
    waitpid(r.pid, &status, 0);
    r.pid = 0;
    struct towner *ts[3] = { &a, &b, &c };
    struct want w = { ts, 3, 1 };
    assert_true(th_run_until(&loop, all_answered, &w, TH_MS));
    th_run_until(&loop, NULL, NULL, 50); /* anything more would show now */
    assert_int_equal(a.failed, 1);
    assert_int_equal(b.failed, 1);
    assert_int_equal(c.failed, 1);
    assert_int_equal(a.len + b.len + c.len, 0);
    assert_non_null(strstr(a.why, "closed"));
    assert_int_equal(done.failed, 0);
    assert_int_equal(idle.failed, 0);
    assert_null(a.o.conn);
    struct sl_upool_stats st;
    sl_upool_stats(p, &st);
    assert_int_equal(st.failures, 1);
    assert_int_equal(st.owners_failed, 3);
    assert_int_equal(st.conns, 0);

    /* lazily again: a new connection, refused */
    submit(k, &idle, 1, "PING");
    assert_true(run_for_one(&loop, &idle, 1));
    assert_int_equal(idle.failed, 1);
    assert_int_equal(idle.err, UV_ECONNREFUSED);
    sl_upool_stats(p, &st);
    assert_int_equal(st.connects, 2);

    towner_free(&done);
    towner_free(&a);
    towner_free(&b);
    towner_free(&c);
    towner_free(&idle);
    sl_upool_key_put(k);
    pool_done(&loop, p);
}

/* A key's setup (SELECT 3) puts its owners' keys in db 3; a refused setup
 * (AUTH as nobody) fails the owners waiting, and their requests never ran. */
static void test_setup(void **state)
{
    (void)state;
    uv_loop_t loop;
    struct sl_upool *p = pool_start(&loop, redis_p.port, 2);
    static const char sel3[] = "*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n";
    struct sl_upool_key *k3 = sl_upool_key_get(p, "db3", 3, sel3, sizeof(sel3) - 1, 1);
    struct towner a;
    towner_init(&a);
    submit(k3, &a, 3, "SET", "upool:db3", "three");
    submit(k3, &a, 2, "GET", "upool:db3");
    assert_true(run_for_one(&loop, &a, 2));
    assert_int_equal(a.failed, 0);
    assert_int_equal(a.len, 5 + 11);
    assert_memory_equal(a.got, "+OK\r\n$5\r\nthree\r\n", 16);

    struct th_conn rc;
    assert_int_equal(th_conn_open(&rc, redis_p.port), 0);
    assert_int_equal(th_conn_send(&rc, "GET upool:db3\r\nSELECT 3\r\nGET upool:db3\r\n"), 0);
    char *r1 = th_conn_reply(&rc, TH_MS), *r2 = th_conn_reply(&rc, TH_MS), *r3 = th_conn_reply(&rc, TH_MS);
    assert_string_equal(r1, "$-1\r\n"); /* not in db 0 */
    assert_string_equal(r2, "+OK\r\n");
    assert_string_equal(r3, "$5\r\nthree\r\n");
    free(r1);
    free(r2);
    free(r3);
    th_conn_close(&rc);

    static const char auth[] = "*3\r\n$4\r\nAUTH\r\n$6\r\nnobody\r\n$5\r\nwrong\r\n";
    struct sl_upool_key *kbad = sl_upool_key_get(p, "bad", 3, auth, sizeof(auth) - 1, 1);
    struct towner b, c;
    towner_init(&b);
    towner_init(&c);
    submit(kbad, &b, 3, "SET", "upool:authfail", "1");
    submit(kbad, &c, 2, "GET", "upool:authfail");
    struct towner *ts[2] = { &b, &c };
    struct want w = { ts, 2, 1 };
    assert_true(th_run_until(&loop, all_answered, &w, TH_MS));
    assert_int_equal(b.failed, 1);
    assert_int_equal(c.failed, 1);
    assert_int_equal(b.len + c.len, 0);
    assert_non_null(strstr(b.why, "setup command was refused: -WRONGPASS"));
    char *e = th_redis_cmd(redis_p.port, "EXISTS upool:authfail");
    assert_non_null(e);
    assert_string_equal(e, ":0\r\n");
    free(e);
    struct sl_upool_stats st;
    sl_upool_stats(p, &st);
    /* one connection was started (the second owner joined the first's
     * write) and refused: both owners failed */
    assert_int_equal(st.setup_failures, 1);
    assert_int_equal(st.owners_failed, 2);

    towner_free(&a);
    towner_free(&b);
    towner_free(&c);
    sl_upool_key_put(k3);
    sl_upool_key_put(kbad);
    pool_done(&loop, p);
}

/* A slow owner refuses a big reply part way; another forgets before its
 * big reply comes: both are read and dropped, and the owners behind them
 * on the same connection get exactly theirs. */
static void test_forgotten_big_reply(void **state)
{
    (void)state;
    uv_loop_t loop;
    struct sl_upool *p = pool_start(&loop, redis_p.port, 1);
    struct sl_upool_key *k = sl_upool_key_get(p, "k", 1, NULL, 0, 0);
    struct towner setter, slow, gone, after;
    towner_init(&setter);
    towner_init(&slow);
    towner_init(&gone);
    towner_init(&after);
    struct cmdbuf c = { 0 };
    cb_cmd(&c, 3, "SET", "upool:big", "<big>");
    assert_int_equal(sl_upool_submit(k, &setter.o, c.p, c.len, 1), 0);
    free(c.p);
    assert_true(run_for_one(&loop, &setter, 1));

    slow.refuse_after = 1000;
    submit(k, &slow, 2, "GET", "upool:big");
    submit(k, &slow, 1, "PING");
    submit(k, &gone, 2, "GET", "upool:big");
    submit(k, &after, 2, "ECHO", "mine");
    sl_upool_forget(&gone.o); /* before its bytes even left */
    assert_null(gone.o.conn);
    assert_true(run_for_one(&loop, &after, 1));
    assert_int_equal(after.failed, 0);
    assert_int_equal(after.len, 10);
    assert_memory_equal(after.got, "$4\r\nmine\r\n", 10);
    assert_int_equal(slow.refused, 1);
    assert_true(slow.len >= 1000 && slow.len < BIG); /* part of it, then nothing */
    assert_int_equal(slow.replies, 0);
    assert_int_equal(slow.failed, 0);
    assert_int_equal(gone.len, 0);
    struct sl_upool_stats st;
    sl_upool_stats(p, &st);
    assert_int_equal(st.dropped_replies, 3); /* the slow one's GET and PING, the gone one's GET */
    assert_int_equal(st.inflight, 0);
    assert_int_equal(st.failures, 0);
    /* the chunks the engine read into are all back */
    towner_free(&setter);
    towner_free(&slow);
    towner_free(&gone);
    towner_free(&after);
    sl_upool_key_put(k);
    pool_done(&loop, p);
}

/* The CLIENT ID in a CLIENT INFO reply, or -1. */
static long client_id(const struct towner *t, size_t from)
{
    const char *s = memmem(t->got + from, t->len - from, "id=", 3);
    return s ? strtol(s + 3, NULL, 10) : -1;
}

static int key_has_conn(void *arg)
{
    struct sl_upool_key_stats ks;
    sl_upool_key_stats(arg, &ks);
    return ks.conns == 1;
}

/* Pinning takes the idle shared connection; the owner's state (SELECT 5,
 * CLIENT SETNAME) stays its own; a clean unpin RESETs it and replays the
 * key's setup (SELECT 3): the next owner on the same connection sees db=3
 * and no name. The cap: an error at once, or a bounded wait that a later
 * unpin grants. */
static void test_pin_unpin(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_upool_conf cf;
    conf_init(&cf, redis_p.port, 1);
    cf.max_pinned = 1;
    cf.pin_wait_max = 1;
    struct sl_upool *p = sl_upool_new(&loop, &cf, &cbs);
    static const char sel3[] = "*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n";
    struct sl_upool_key *k = sl_upool_key_get(p, "db3", 3, sel3, sizeof(sel3) - 1, 1);
    struct towner w, a, b, c, d, e;
    towner_init(&w);
    towner_init(&a);
    towner_init(&b);
    towner_init(&c);
    towner_init(&d);
    towner_init(&e);
    submit(k, &w, 2, "CLIENT", "INFO");
    assert_true(run_for_one(&loop, &w, 1));
    long id0 = client_id(&w, 0);
    assert_true(id0 > 0);
    assert_non_null(memmem(w.got, w.len, " db=3 ", 6));

    int err = 0;
    struct sl_upool_conn *pc = sl_upool_pin(k, &a.o, 0, &err);
    assert_non_null(pc);
    struct sl_upool_stats st;
    sl_upool_stats(p, &st);
    assert_int_equal(st.pinned, 1);
    assert_int_equal(st.pooled, 0); /* the idle one was taken */
    submit(k, &a, 2, "SELECT", "5");
    submit(k, &a, 3, "CLIENT", "SETNAME", "pinned-a");
    submit(k, &a, 1, "MULTI");
    submit(k, &a, 2, "CLIENT", "INFO");
    submit(k, &a, 1, "EXEC");
    assert_true(run_for_one(&loop, &a, 5));
    assert_int_equal(client_id(&a, 0), id0);
    assert_non_null(memmem(a.got, a.len, " db=5 ", 6));
    assert_non_null(memmem(a.got, a.len, "name=pinned-a", 13));

    /* the cap: refused at once, or queued (and the queue is bounded) */
    assert_null(sl_upool_pin(k, &c.o, 0, &err));
    assert_int_equal(err, SL_ELIMIT);
    assert_null(sl_upool_pin(k, &d.o, 1, &err));
    assert_int_equal(err, SL_EAGAIN);
    assert_null(sl_upool_pin(k, &e.o, 1, &err));
    assert_int_equal(err, SL_ELIMIT);

    /* unpin clean with one reply still owed: it is skipped */
    submit(k, &a, 2, "ECHO", "late");
    sl_upool_unpin(pc, 1, 1);
    assert_null(a.o.conn);
    /* D gets its pin: the connection being cleaned is not idle, so a fresh one */
    assert_true(d.granted != NULL);
    /* once clean, the connection is back in the pool (an owner arriving
     * before would have found none idle and made another) */
    assert_true(th_run_until(&loop, key_has_conn, k, TH_MS));
    submit(k, &b, 2, "CLIENT", "INFO");
    assert_true(run_for_one(&loop, &b, 1));
    assert_int_equal(b.failed, 0);
    assert_int_equal(client_id(&b, 0), id0); /* the same connection, made clean */
    assert_non_null(memmem(b.got, b.len, " db=3 ", 6));
    assert_non_null(memmem(b.got, b.len, " name= ", 7));
    assert_int_equal(a.replies, 5); /* the skipped ECHO never reached A */
    sl_upool_stats(p, &st);
    assert_int_equal(st.pinned, 1);
    assert_int_equal(st.pooled, 1);

    /* D's own connection: a fresh one, with the key's setup */
    submit(k, &d, 2, "CLIENT", "INFO");
    assert_true(run_for_one(&loop, &d, 1));
    assert_true(client_id(&d, 0) != id0);
    assert_non_null(memmem(d.got, d.len, " db=3 ", 6));
    /* not clean: closed */
    sl_upool_unpin(d.granted, 0, 0);
    sl_upool_stats(p, &st);
    assert_int_equal(st.pinned, 0);
    assert_int_equal(st.conns, 1);
    assert_int_equal(d.failed, 0);

    towner_free(&w);
    towner_free(&a);
    towner_free(&b);
    towner_free(&c);
    towner_free(&d);
    towner_free(&e);
    sl_upool_key_put(k);
    pool_done(&loop, p);
}

/* An empty request (Redis answers nothing) attaches its owner to no
 * connection: when another owner then pins the idle shared connection, the
 * first one's next requests go elsewhere and their replies come to it,
 * never to the pinned owner. */
static void test_empty_submission_beside_pin(void **state)
{
    (void)state;
    uv_loop_t loop;
    struct sl_upool *p = pool_start(&loop, redis_p.port, 1);
    struct sl_upool_key *k = sl_upool_key_get(p, "db0", 3, NULL, 0, 0);
    struct towner a, b;
    towner_init(&a);
    towner_init(&b);
    submit(k, &b, 2, "ECHO", "b1");
    assert_true(run_for_one(&loop, &b, 1));
    assert_null(b.o.conn);
    static const char empty[] = "*0\r\n*-1\r\n\r\n";
    assert_int_equal(sl_upool_submit(k, &b.o, empty, sizeof(empty) - 1, 0), 0);
    assert_null(b.o.conn); /* owes nothing: attached to nothing */

    int err = 0;
    struct sl_upool_conn *pc = sl_upool_pin(k, &a.o, 0, &err);
    assert_non_null(pc);
    assert_true(b.o.conn != pc);
    submit(k, &b, 2, "ECHO", "b2");
    assert_true(b.o.conn != pc);
    submit(k, &a, 2, "ECHO", "a1");
    assert_true(run_for_one(&loop, &b, 2));
    assert_true(run_for_one(&loop, &a, 1));
    assert_int_equal(b.failed, 0);
    assert_int_equal(a.failed, 0);
    assert_int_equal(a.replies, 1);
    assert_int_equal(b.replies, 2);
    assert_int_equal(a.len, 8);
    assert_memory_equal(a.got, "$2\r\na1\r\n", 8);
    assert_int_equal(b.len, 16);
    assert_memory_equal(b.got, "$2\r\nb1\r\n$2\r\nb2\r\n", 16);

    /* an empty request behind replies owed rides their connection */
    submit(k, &b, 2, "ECHO", "b3");
    struct sl_upool_conn *bc = b.o.conn;
    assert_non_null(bc);
    assert_int_equal(sl_upool_submit(k, &b.o, empty, sizeof(empty) - 1, 0), 0);
    assert_ptr_equal(b.o.conn, bc);
    assert_true(run_for_one(&loop, &b, 3));
    assert_null(b.o.conn);

    sl_upool_unpin(pc, 1, 0);
    sl_upool_forget(&b.o);
    towner_free(&a);
    towner_free(&b);
    sl_upool_key_put(k);
    pool_done(&loop, p);
}

/* Order between owners: A asks for a pin first (a fresh connection whose
 * setup takes 50 ms: a BLPOP that times out), then B's request goes to a
 * fresh shared connection that is ready at once (its key has no setup).
 * A's requests must still reach Redis first, as they would from two direct
 * clients that sent in that order. */
static int list_has(void *arg)
{
    return ((struct towner *)arg)->replies >= 2;
}

static void test_pin_keeps_order(void **state)
{
    (void)state;
    uv_loop_t loop;
    struct sl_upool *p = pool_start(&loop, redis_p.port, 1);
    struct cmdbuf slow = { 0 };
    cb_cmd(&slow, 3, "BLPOP", "ord:never", "0.05"); /* answered (nil) 50 ms later */
    struct sl_upool_key *ks = sl_upool_key_get(p, "slow", 4, slow.p, slow.len, 1);
    struct sl_upool_key *kf = sl_upool_key_get(p, "fast", 4, NULL, 0, 0);
    struct towner a, b, c;
    towner_init(&a);
    towner_init(&b);
    towner_init(&c);
    int err = 0;
    struct sl_upool_conn *pc = sl_upool_pin(ks, &a.o, 0, &err);
    assert_non_null(pc);
    submit(ks, &a, 2, "DEL", "ord:l");
    submit(ks, &a, 3, "RPUSH", "ord:l", "a");
    submit(kf, &b, 3, "RPUSH", "ord:l", "b");
    assert_true(run_for_one(&loop, &b, 1));
    assert_true(th_run_until(&loop, list_has, &a, TH_MS));
    submit(kf, &c, 4, "LRANGE", "ord:l", "0", "-1");
    assert_true(run_for_one(&loop, &c, 1));
    static const char want[] = "*2\r\n$1\r\na\r\n$1\r\nb\r\n";
    const char *lr = memmem(c.got, c.len, "*", 1);
    if (lr == NULL || (size_t)(c.got + c.len - lr) != sizeof(want) - 1 ||
        memcmp(lr, want, sizeof(want) - 1) != 0)
        fail_msg("LRANGE: '%.*s'", (int)c.len, c.got);
    sl_upool_unpin(pc, 1, 0);
    towner_free(&a);
    towner_free(&b);
    towner_free(&c);
    free(slow.p);
    sl_upool_key_put(ks);
    sl_upool_key_put(kf);
    pool_done(&loop, p);
}

/* Owners on three ready connections submit one after the other in one
 * turn: the writes leave, and run, in that order. */
static void test_turn_order(void **state)
{
    (void)state;
    uv_loop_t loop;
    struct sl_upool *p = pool_start(&loop, redis_p.port, 1);
    struct sl_upool_key *k = sl_upool_key_get(p, "db0", 3, NULL, 0, 0);
    struct towner o[3], c;
    struct sl_upool_conn *pc[3];
    for (int i = 0; i < 3; i++) {
        towner_init(&o[i]);
        int err = 0;
        pc[i] = sl_upool_pin(k, &o[i].o, 0, &err);
        assert_non_null(pc[i]);
    }
    /* The engine's part is the order of its writes; the order Redis then
     * reads three sockets in is the kernel's (epoll's ready list), which a
     * loaded machine can perturb now and then. So: several rounds, most of
     * them in order. Written last-first (the old stack), every round of a
     * quiet machine comes out reversed. */
    static const char *const val[3] = { "a", "b", "c" };
    static const char want[] = "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n";
    enum { ROUNDS = 7 };
    int in_order = 0;
    towner_init(&c);
    for (int r = 0; r < ROUNDS; r++) {
        c.len = 0;
        c.replies = 0;
        for (int i = 0; i < 3; i++) {
            o[i].len = 0;
            o[i].replies = 0;
        }
        submit(k, &o[0], 2, "DEL", "ord:t");
        assert_true(run_for_one(&loop, &o[0], 1));
        for (int i = 0; i < 3; i++)
            submit(k, &o[i], 3, "RPUSH", "ord:t", val[i]);
        for (int i = 0; i < 3; i++)
            assert_true(run_for_one(&loop, &o[i], i == 0 ? 2 : 1));
        submit(k, &c, 4, "LRANGE", "ord:t", "0", "-1");
        assert_true(run_for_one(&loop, &c, 1));
        if (c.len == sizeof(want) - 1 && memcmp(c.got, want, c.len) == 0)
            in_order++;
        else
            print_message("round %d: LRANGE '%.*s'\n", r, (int)c.len, c.got);
    }
    towner_free(&c);
    if (in_order * 2 <= ROUNDS)
        fail_msg("%d of %d rounds reached Redis in the order submitted", in_order, ROUNDS);
    for (int i = 0; i < 3; i++) {
        sl_upool_unpin(pc[i], 0, 0);
        towner_free(&o[i]);
    }
    sl_upool_key_put(k);
    pool_done(&loop, p);
}

static int stats_settled(void *arg)
{
    struct sl_upool_stats st;
    sl_upool_stats(arg, &st);
    return st.conns == 1 && st.pooled == 1 && st.pinned == 0;
}

/* A pinned subscriber gets its messages (everything read is its own); a
 * clean unpin that cannot count what is still coming (SL_UPOOL_OWED_SCAN)
 * drops messages up to RESET's +RESET; the connection is then clean (no
 * subscription, the key's db). When the key meanwhile has its shared
 * connection, the cleaned one is closed as not needed. */
static void test_pinned_subscriber(void **state)
{
    (void)state;
    uv_loop_t loop;
    struct sl_upool *p = pool_start(&loop, redis_p.port, 1);
    static const char sel3[] = "*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n";
    struct sl_upool_key *k = sl_upool_key_get(p, "db3", 3, sel3, sizeof(sel3) - 1, 1);
    struct towner a, b;
    towner_init(&a);
    towner_init(&b);
    int err = 0;
    struct sl_upool_conn *pc = sl_upool_pin(k, &a.o, 0, &err);
    assert_non_null(pc); /* a fresh one: the key had none */
    submit(k, &a, 2, "SUBSCRIBE", "upool:ch");
    assert_true(run_for_one(&loop, &a, 1));
    /* B publishes through the shared connection (a new one: A's is A's) */
    submit(k, &b, 3, "PUBLISH", "upool:ch", "hello");
    assert_true(run_for_one(&loop, &b, 1));
    assert_memory_equal(b.got, ":1\r\n", 4);
    assert_true(run_for_one(&loop, &a, 2));
    assert_non_null(memmem(a.got, a.len, "$7\r\nmessage\r\n$8\r\nupool:ch\r\n$5\r\nhello\r\n", 38));
    /* more messages on their way while A leaves */
    submit(k, &b, 3, "PUBLISH", "upool:ch", "late1");
    submit(k, &b, 3, "PUBLISH", "upool:ch", "late2");
    sl_upool_unpin(pc, 1, SL_UPOOL_OWED_SCAN);
    size_t alen = a.len;
    assert_true(run_for_one(&loop, &b, 3));
    /* the cleaned connection is not needed: the key has B's */
    assert_true(th_run_until(&loop, stats_settled, p, TH_MS));
    assert_int_equal(a.len, alen); /* nothing more reached A */
    assert_int_equal(a.failed, 0);
    assert_int_equal(b.failed, 0);
    assert_int_equal(th_redis_info(redis_p.port, "pubsub_channels"), 0);
    struct sl_upool_stats st;
    sl_upool_stats(p, &st);
    assert_int_equal(st.failures, 0);

    towner_free(&a);
    towner_free(&b);
    sl_upool_key_put(k);
    pool_done(&loop, p);
}

/* ---- the idle timeout ---------------------------------------------------------- */

static uint64_t fake_ms; /* the idle clock the pool is given */

static uint64_t fake_now(void)
{
    return fake_ms;
}

struct conns_want {
    struct sl_upool *p;
    uint64_t         conns;
};

static int conns_are(void *arg)
{
    struct conns_want *w = arg;
    struct sl_upool_stats st;
    sl_upool_stats(w->p, &st);
    return st.conns == w->conns;
}

/* idle_timeout_ms on an injected clock: a shared connection with nothing
 * owed closes once the clock passes the timeout (not before), without
 * failing anyone; the next submission opens a new one; a connection whose
 * reply is owed is not idle, however long the reply takes. */
static void test_idle_timeout(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_upool_conf cf;
    conf_init(&cf, redis_p.port, 2);
    cf.idle_timeout_ms = 40; /* the sweep looks every 10 ms (real time) */
    cf.now_ms = fake_now;
    fake_ms = 1000;
    struct sl_upool *p = sl_upool_new(&loop, &cf, &cbs);
    assert_non_null(p);
    struct sl_upool_key *k = sl_upool_key_get(p, "k0", 2, NULL, 0, 0);
    assert_non_null(k);
    struct towner t;
    towner_init(&t);
    submit(k, &t, 3, "SET", "upool:idle", "1");
    assert_true(run_for_one(&loop, &t, 1));
    assert_memory_equal(t.got, "+OK\r\n", 5);
    struct conns_want none = { p, 0 };
    /* idle, but not for 40 ms of the pool's clock: several sweeps keep it */
    fake_ms = 1039;
    assert_false(th_run_until(&loop, conns_are, &none, 60));
    /* past it: the next sweep closes it */
    fake_ms = 1040;
    assert_true(th_run_until(&loop, conns_are, &none, TH_MS));
    struct sl_upool_stats st;
    sl_upool_stats(p, &st);
    assert_int_equal(st.idle_closed, 1);
    assert_int_equal(st.failures, 0);
    assert_int_equal(t.failed, 0);
    /* the next request opens a new connection */
    submit(k, &t, 2, "INCR", "upool:idle");
    assert_true(run_for_one(&loop, &t, 2));
    assert_memory_equal(t.got + 5, ":2\r\n", 4);
    sl_upool_stats(p, &st);
    assert_int_equal(st.connects, 2);
    /* a reply owed for 300 ms while the clock runs far past the timeout */
    submit(k, &t, 3, "EVAL",
           "local t = redis.call('TIME') local s = t[1] * 1000000 + t[2] "
           "while true do local n = redis.call('TIME') "
           "if n[1] * 1000000 + n[2] - s > 300000 then break end end return 1",
           "0");
    fake_ms += 100000;
    assert_true(run_for_one(&loop, &t, 3));
    assert_int_equal(t.failed, 0);
    assert_memory_equal(t.got + 9, ":1\r\n", 4);
    sl_upool_stats(p, &st);
    assert_int_equal(st.idle_closed, 1);
    /* and once answered it is idle, and goes */
    fake_ms += 40;
    assert_true(th_run_until(&loop, conns_are, &none, TH_MS));
    towner_free(&t);
    sl_upool_key_put(k);
    pool_done(&loop, p);
}

/* Submits one command for <t> now, with <flags> (SL_UPOOL_*). */
static void submit_f(struct sl_upool_key *k, struct towner *t, unsigned flags, const char *a0,
                     const char *a1, const char *a2)
{
    struct cmdbuf c = { 0 };
    cb_cmd(&c, 3, a0, a1, a2);
    assert_int_equal(sl_upool_submit_flags(k, &t->o, c.p, c.len, 1, flags), 0);
    free(c.p);
}

/* A reply that is +PONG or -BUSY ... (what Redis answers beside a script). */
static int pong_or_busy(const struct towner *t)
{
    return t->replies == 1 && t->failed == 0 &&
           ((t->len == 7 && memcmp(t->got, "+PONG\r\n", 7) == 0) ||
            (t->len > 5 && memcmp(t->got, "-BUSY", 5) == 0));
}

/* A slow request (a script, SL_UPOOL_SLOW) is the last one of another
 * owner written on its connection until its reply is in: a PING submitted
 * in the same turn goes to the other connection, as does one submitted
 * while the script runs; when both connections have an unanswered script,
 * a PING queues behind the newest, which Redis answers -BUSY while the
 * first runs. A pinned SCRIPT KILL ends the first; no PING waited for it. */
static void test_slow_alone(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_upool_conf cf;
    conf_init(&cf, redis_p.port, 2);
    struct sl_upool *p = sl_upool_new(&loop, &cf, &cbs);
    struct sl_upool_key *k = sl_upool_key_get(p, "db0", 3, NULL, 0, 0);
    struct towner a, b, c, d, e, f;
    struct towner *all[] = { &a, &b, &c, &d, &e, &f };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        towner_init(all[i]);
    submit(k, &f, 4, "CONFIG", "SET", "busy-reply-threshold", "10");
    assert_true(run_for_one(&loop, &f, 1));
    assert_int_equal(f.len, 5);
    f.len = 0;
    f.replies = 0;

    submit_f(k, &a, SL_UPOOL_SLOW, "EVAL", "while 1 do redis.call('ping') end", "0");
    submit(k, &b, 1, "PING"); /* the same turn */
    assert_true(run_for_one(&loop, &b, 1));
    assert_true(pong_or_busy(&b));
    assert_int_equal(a.replies, 0);

    submit(k, &c, 1, "PING"); /* while the script runs (or is about to) */
    assert_true(run_for_one(&loop, &c, 1));
    assert_true(pong_or_busy(&c));

    /* every connection gets a script: the PING queues behind the newest */
    submit_f(k, &d, SL_UPOOL_SLOW, "EVAL", "return 1", "0");
    submit(k, &e, 1, "PING");
    assert_true(run_for_one(&loop, &e, 1));
    assert_true(pong_or_busy(&e));
    assert_int_equal(d.replies, 1);
    assert_int_equal(a.replies, 0);

    int err = 0;
    struct sl_upool_conn *pc = sl_upool_pin(k, &f.o, 0, &err);
    assert_non_null(pc);
    submit(k, &f, 2, "SCRIPT", "KILL");
    assert_true(run_for_one(&loop, &f, 1));
    assert_true(run_for_one(&loop, &a, 1));
    if (a.len < 5 || memcmp(a.got, "-ERR", 4) != 0 || !memmem(a.got, a.len, "killed", 6))
        fail_msg("the script's owner got '%.*s'", (int)a.len, a.got);
    sl_upool_unpin(pc, 0, 0);

    struct sl_upool_stats st;
    sl_upool_stats(p, &st);
    assert_int_equal(st.failures, 0);
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        towner_free(all[i]);
    sl_upool_key_put(k);
    pool_done(&loop, p);
}

/* A reload (sl_upool_reconfigure). A smaller per_key sets the surplus
 * connection aside: its owner keeps its order there (a request it adds
 * before its reply is in goes behind it), new requests go to the one
 * left, and the surplus closes once its replies are in. Another address:
 * a request in flight is answered by the old upstream, the next one by the
 * new; a pinned owner keeps its connection (MULTI/EXEC on the old), which
 * then closes instead of rejoining the pool. */
struct pooled_n {
    struct sl_upool *p;
    uint64_t         n;
};

static int pooled_is(void *arg)
{
    struct pooled_n *w = arg;
    struct sl_upool_stats st;
    sl_upool_stats(w->p, &st);
    return st.pooled == w->n && st.pinned == 0 && st.conns == w->n;
}

static void test_reconfigure(void **state)
{
    (void)state;
    struct th_proc r2;
    assert_int_equal(th_redis_start(&r2, NULL), 0);
    char *ok = th_redis_cmd(redis_p.port, "SET where one");
    assert_non_null(ok);
    free(ok);
    ok = th_redis_cmd(r2.port, "SET where two");
    assert_non_null(ok);
    free(ok);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sl_upool_conf cf;
    conf_init(&cf, redis_p.port, 2);
    struct sl_upool *p = sl_upool_new(&loop, &cf, &cbs);
    struct sl_upool_key *k = sl_upool_key_get(p, "db0", 3, NULL, 0, 0);
    struct towner a, b, c, d, e;
    struct towner *all[] = { &a, &b, &c, &d, &e };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        towner_init(all[i]);

    /* Two connections (a script is never joined), both with a reply owed;
     * N 2 -> 1 before either is in. */
    submit_f(k, &a, SL_UPOOL_SLOW, "EVAL", "return 1", "0");
    submit(k, &b, 1, "PING");
    struct sl_upool_stats st;
    sl_upool_stats(p, &st);
    assert_int_equal(st.pooled, 2);
    cf.per_key = 1;
    sl_upool_reconfigure(p, &cf);
    submit(k, &a, 2, "ECHO", "a2"); /* behind a's script, wherever it is */
    submit(k, &b, 2, "ECHO", "b2");
    struct towner *ab[] = { &a, &b };
    struct want w = { ab, 2, 2 };
    assert_true(th_run_until(&loop, all_answered, &w, TH_MS));
    assert_int_equal(a.len, 12);
    assert_memory_equal(a.got, ":1\r\n$2\r\na2\r\n", 12);
    assert_int_equal(b.len, 15);
    assert_memory_equal(b.got, "+PONG\r\n$2\r\nb2\r\n", 15);
    struct pooled_n one = { p, 1 };
    assert_true(th_run_until(&loop, pooled_is, &one, TH_MS));
    submit(k, &c, 1, "PING");
    assert_true(run_for_one(&loop, &c, 1));
    sl_upool_stats(p, &st);
    assert_int_equal(st.connects, 2); /* served by the one left */
    assert_int_equal(st.failures, 0);

    /* Another address, with d in MULTI on a connection of its own and c's
     * GET in flight (submitted, not yet answered). */
    int err = 0;
    struct sl_upool_conn *pc = sl_upool_pin(k, &d.o, 0, &err);
    assert_non_null(pc);
    submit(k, &d, 1, "MULTI");
    submit(k, &d, 2, "GET", "where");
    assert_true(run_for_one(&loop, &d, 2));
    c.len = c.replies = 0;
    submit(k, &c, 2, "GET", "where");
    struct sockaddr_in *a4 = (struct sockaddr_in *)&cf.addr;
    a4->sin_port = htons((uint16_t)r2.port);
    cf.per_key = 2; /* room in the pool: d's connection must still not rejoin it */
    sl_upool_reconfigure(p, &cf);
    submit(k, &e, 2, "GET", "where");
    assert_true(run_for_one(&loop, &c, 1));
    assert_true(run_for_one(&loop, &e, 1));
    assert_int_equal(c.len, 9);
    assert_memory_equal(c.got, "$3\r\none\r\n", 9);
    assert_int_equal(e.len, 9);
    assert_memory_equal(e.got, "$3\r\ntwo\r\n", 9);
    submit(k, &d, 1, "EXEC");
    assert_true(run_for_one(&loop, &d, 3));
    assert_memory_equal(d.got + d.len - 13, "*1\r\n$3\r\none\r\n", 13);
    sl_upool_unpin(pc, 1, 0); /* clean, but made for the old address: closed */
    assert_true(th_run_until(&loop, pooled_is, &one, TH_MS));
    /* nothing of the pool is left on the old upstream (the asking one is) */
    assert_int_equal(th_redis_wait_info(redis_p.port, "connected_clients", 1, TH_MS), 0);

    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        towner_free(all[i]);
    sl_upool_key_put(k);
    pool_done(&loop, p);
    th_stop(&r2);
}

/* ---- the batch wait (net/gather.h) --------------------------------------------- */

static uint64_t turn_us; /* the turn's clock the pool reads, moved by hand */

static uint64_t turn_now(const struct sl_clock *c)
{
    (void)c;
    return turn_us;
}

static const struct sl_clock turn_fake = { turn_now };

static void set_turn(uint64_t us)
{
    turn_us = us;
    sl_turn_clock_set(&turn_fake);
    sl_turn_tick();
}

static struct sl_upool *wait_pool(uv_loop_t *loop)
{
    struct sl_upool_conf cf;
    uv_loop_init(loop);
    conf_init(&cf, redis_p.port, 1);
    cf.batch_wait_us = 1000;
    struct sl_upool *p = sl_upool_new(loop, &cf, &cbs);
    assert_non_null(p);
    return p;
}

/* Requests submitted while a small batch waits join it, and it leaves
 * once it holds SL_GATHER_MAX: the turn's clock is an hour ahead of the
 * timer's, so the wait cannot end by time during the test. Every owner
 * gets its own reply. */
static void test_batch_wait_gathers(void **state)
{
    (void)state;
    enum { N = SL_GATHER_MAX + 1 };
    uv_loop_t loop;
    struct sl_upool *p = wait_pool(&loop);
    struct sl_upool_key *k = sl_upool_key_get(p, "k0", 2, NULL, 0, 0);
    assert_non_null(k);
    struct towner t[N];
    for (int i = 0; i < N; i++)
        towner_init(&t[i]);
    /* the connection up; this one waits until the timer ends its wait */
    set_turn(sl_clock_us(&sl_clock_mono));
    submit(k, &t[0], 3, "SET", "upool:gather", "v");
    assert_true(run_for_one(&loop, &t[0], 1));
    submit(k, &t[0], 3, "SET", "upool:gather", "v");
    assert_true(run_for_one(&loop, &t[0], 2));
    struct sl_upool_stats st0, st;
    sl_upool_stats(p, &st0);
    assert_true(st0.batch_holds >= 1);
    set_turn(sl_clock_us(&sl_clock_mono) + 3600ULL * 1000000);
    submit(k, &t[1], 2, "GET", "upool:gather");
    uv_run(&loop, UV_RUN_NOWAIT); /* the turn's end: one request, it waits */
    for (int i = 2; i < N; i++)
        submit(k, &t[i], 2, "GET", "upool:gather");
    struct want w = { (struct towner *[N]){ 0 }, N - 1, 1 };
    for (int i = 1; i < N; i++)
        w.t[i - 1] = &t[i];
    assert_true(th_run_until(&loop, all_answered, &w, TH_MS));
    for (int i = 1; i < N; i++) {
        assert_int_equal(t[i].failed, 0);
        assert_int_equal(t[i].len, 7);
        assert_memory_equal(t[i].got, "$1\r\nv\r\n", 7);
    }
    sl_upool_stats(p, &st);
    assert_int_equal(st.batch_holds, st0.batch_holds + 1);
    assert_int_equal(st.batch_gained, st0.batch_gained + (N - 2));
    for (int i = 0; i < N; i++)
        towner_free(&t[i]);
    sl_upool_key_put(k);
    pool_done(&loop, p);
    sl_turn_clock_set(NULL);
    sl_turn_tick();
}

/* One owner, one request at a time: nothing joins its waits (each ends by
 * the timer), and SL_GATHER_BAD of them stop the waits; the turn's clock
 * stands still, so the back-off lasts the whole test. */
static void test_batch_wait_alone(void **state)
{
    (void)state;
    uv_loop_t loop;
    struct sl_upool *p = wait_pool(&loop);
    struct sl_upool_key *k = sl_upool_key_get(p, "k0", 2, NULL, 0, 0);
    assert_non_null(k);
    struct towner t;
    towner_init(&t);
    set_turn(sl_clock_us(&sl_clock_mono));
    for (unsigned i = 1; i <= 40; i++) {
        submit(k, &t, 2, "INCR", "upool:alone");
        assert_true(run_for_one(&loop, &t, i));
    }
    assert_int_equal(t.failed, 0);
    struct sl_upool_stats st;
    sl_upool_stats(p, &st);
    assert_int_equal(st.batch_holds, SL_GATHER_BAD);
    assert_int_equal(st.batch_gained, 0);
    assert_memory_equal(t.got + t.len - 5, ":40\r\n", 5);
    towner_free(&t);
    sl_upool_key_put(k);
    pool_done(&loop, p);
    sl_turn_clock_set(NULL);
    sl_turn_tick();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_interleaved_owners),
        cmocka_unit_test(test_killed_midflight),
        cmocka_unit_test(test_setup),
        cmocka_unit_test(test_forgotten_big_reply),
        cmocka_unit_test(test_pin_unpin),
        cmocka_unit_test(test_pinned_subscriber),
        cmocka_unit_test(test_empty_submission_beside_pin),
        cmocka_unit_test(test_pin_keeps_order),
        cmocka_unit_test(test_turn_order),
        cmocka_unit_test(test_idle_timeout),
        cmocka_unit_test(test_slow_alone),
        cmocka_unit_test(test_reconfigure),
        cmocka_unit_test(test_batch_wait_gathers),
        cmocka_unit_test(test_batch_wait_alone),
    };
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

/* sluice — pooled upstream connections (see upool.h for the contract).
 *
 * One connection:
 *
 *   CONNECTING --tcp up--> [HANDSHAKE] --> SETUP --setup replies OK--> READY
 *        |                  (TLS only)       |  ^                        |  \--pin--> (pinned)
 *        |                       |           |  +--- unpin clean: RESET + setup ------/
 *        v                       v           v                           v
 *      CLOSING <---- connect timeout, EOF, error, TLS failure, protocol error, setup refused,
 *      (owners in flight failed once;        idle past idle_timeout_ms (shared, nothing owed)
 *       freed in the last close callback)
 *
 * Output: <out> holds bytes in wire order; only its first <go> bytes may
 * leave before READY (the setup, or a pinned owner's last requests and the
 * RESET that follows them); owners' bytes wait behind. One write is in
 * flight at most: what the kernel does not take at once moves to <wbuf>.
 *
 * Input: reads land in a pooled chunk (<in>); the router (upool_route.c)
 * hands every piece to whom it belongs at once, so after a read nothing is
 * held but the chunk itself, and only while owners reference it.
 *
 * TLS: what may leave of <out> moves to <plain> (committed: the batch rules
 * above are applied once, when it moves) and the engine encrypts it from
 * there as it has room (store/tlsio.h; its own write and buffer replace
 * <wreq> and <wbuf>). Reads are ciphertext into the pool's scratch buffer,
 * decrypted and copied into <in>, then routed as plaintext is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/resolve.h"
#include "net/turn.h"
#include "net/upool.h"
#include "net/upool-i.h"
#include "net/upool_route.h"
#include "net/yield.h"
#include "store/tlsio.h"
#include "store/wire.h"

#define MIN_READ (8 * 1024) /* less room than this in the chunk: take another */
#define TLS_READ (64 * 1024) /* the scratch buffer TLS reads land in (ciphertext) */

static void conn_flush(struct sl_upool_conn *c);
static uint64_t now_ms(const struct sl_upool *p);
static void pool_maybe_free(struct sl_upool *p);
static void idle_arm(struct sl_upool *p);

/* Order between clients. Requests that different clients send one after
 * the other reach Redis in that order on a direct connection (in practice:
 * Redis reads its sockets in the order they became readable), and clients
 * rely on it (a blocking command on one, then, without waiting, a write on
 * another that serves it). Here a request may wait for a new connection
 * (a pin, or a shared one when all are busy) while a later one of another
 * client finds a connection ready: a READY connection made after one that
 * is still starting with owners' requests on it holds its bytes until that
 * one is READY and has written them (one connect and setup at most; older
 * connections, already ready when it began, are never held). */
static int start_blocks(const struct sl_upool_conn *s)
{
    return !s->cleaning && (s->pin != NULL || s->rt.owed > 0);
}

static int held_back(const struct sl_upool_conn *c)
{
    for (const struct sl_upool_conn *s = c->pool->starting; s != NULL; s = s->snext)
        if (s->seq < c->seq && start_blocks(s))
            return 1;
    return 0;
}

/* <c> is READY or closing: the connections its start held may write. */
static void start_done(struct sl_upool_conn *c)
{
    struct sl_upool *p = c->pool;
    if (!c->starting)
        return;
    if (c->sprev)
        c->sprev->snext = c->snext;
    else
        p->starting = c->snext;
    if (c->snext)
        c->snext->sprev = c->sprev;
    c->snext = c->sprev = NULL;
    c->starting = 0;
    for (struct sl_upool_key *k = p->keys; k != NULL; k = k->next)
        for (struct sl_upool_conn *h = k->conns; h != NULL; h = h->next)
            if (h->held) {
                h->held = 0;
                sl_upool_mark_dirty(h);
            }
    for (struct sl_upool_conn *h = p->pinned; h != NULL; h = h->next)
        if (h->held) {
            h->held = 0;
            sl_upool_mark_dirty(h);
        }
    for (struct sl_upool_conn *h = p->retiring; h != NULL; h = h->next)
        if (h->held) {
            h->held = 0;
            sl_upool_mark_dirty(h);
        }
}

static void key_maybe_free(struct sl_upool_key *k)
{
    /* a closing pool frees its keys itself, at the end */
    if (k->refs > 0 || k->nconns > 0 || k->npinned > 0 || k->nretired > 0 || k->pool->closing)
        return;
    struct sl_upool_key **pp = &k->pool->keys;
    while (*pp != k)
        pp = &(*pp)->next;
    *pp = k->next;
    free(k->setup);
    free(k);
}

/* ---- the router's callbacks ----------------------------------------------- */

static int rt_deliver(void *ctx, struct sl_upool_owner *o, struct sl_buf *b, uint32_t from,
                      uint32_t to, unsigned flags)
{
    struct sl_upool_conn *c = ctx;
    if (c->pool->cbs.deliver(o, b, from, to, flags) != 0 && c->state != C_CLOSING && o->conn == c)
        sl_upool_forget(o); /* refused: the rest of its replies are dropped */
    return c->state == C_CLOSING;
}

static void rt_reply_end(void *ctx, struct sl_upool_owner *o)
{
    struct sl_upool_conn *c = ctx;
    c->pool->st.inflight--;
    if (c->slow_left > 0)
        c->slow_left--; /* at 0 the slow request is answered: others may join */
    if (c->out.len > 0 && c->rt.owed == c->unwritten)
        sl_upool_mark_dirty(c); /* the batch in flight is answered: the next one goes */
    if (o == NULL) {
        c->pool->st.dropped_replies++;
        return;
    }
    if (o->inflight > 0 && --o->inflight == 0)
        o->conn = NULL; /* free to go to the least busy connection next time */
}

/* Setup, RESET or skipped replies are still to come. */
static int setup_pending(struct sl_upool_conn *c)
{
    for (uint32_t i = 0; i < c->rt.n; i++) {
        int k = sl_upool_route_at(&c->rt, i)->kind;
        if (k == SL_UPE_SETUP || k == SL_UPE_RESET || k == SL_UPE_RESET_SCAN || k == SL_UPE_SKIP)
            return 1;
    }
    return 0;
}

static int rt_entry_done(void *ctx, int kind)
{
    struct sl_upool_conn *c = ctx;
    if (kind == SL_UPE_OWNER || kind == SL_UPE_RAW || c->state != C_SETUP || setup_pending(c))
        return 0;
    c->state = C_READY;
    uv_timer_stop(&c->timer);
    c->go = c->out.len;
    start_done(c);
    if (c->cleaning) {
        /* back from a clean unpin: rejoins the pool, or closes when the
         * key has enough shared connections */
        struct sl_upool_key *k = c->key;
        if (k->nconns >= c->pool->conf.per_key || c->pool->closing || c->stale) {
            sl_upool_conn_fail(c, SL_ECLOSED, "not needed");
            return 1;
        }
        sl_upool_list_del(&c->pool->cleaning, c);
        c->cleaning = 0;
        k->npinned--;
        k->nconns++;
        c->pool->st.pooled++;
        sl_upool_list_add(&k->conns, c);
        idle_arm(c->pool);
    }
    conn_flush(c);
    return c->state == C_CLOSING;
}

static const struct sl_upool_route_ops rt_ops = { rt_deliver, rt_reply_end, rt_entry_done };

/* ---- writing ---------------------------------------------------------------- */

void sl_upool_mark_dirty(struct sl_upool_conn *c)
{
    if (c->dirty || c->state == C_CLOSING)
        return;
    /* At the tail: connections write in the order their owners submitted,
     * so requests that different clients sent one after the other in a
     * turn leave (and reach Redis) in that order (a blocking command on
     * one, then a write on another that serves it). */
    c->dirty = 1;
    c->dnext = NULL;
    if (c->pool->dirty_tail != NULL)
        c->pool->dirty_tail->dnext = c;
    else
        c->pool->dirty = c;
    c->pool->dirty_tail = c;
    if (!c->pool->conf.own_flush && c->pool->conf.wake != NULL)
        c->pool->conf.wake(c->pool->conf.wake_arg);
}

static void on_write(uv_write_t *w, int status)
{
    struct sl_upool_conn *c = w->data;
    c->writing = 0;
    c->wbuf.len = 0;
    if (c->state == C_CLOSING)
        return;
    if (status < 0) {
        sl_upool_conn_fail(c, status, uv_strerror(status));
        return;
    }
    conn_flush(c);
}

/* TLS: the engine's write completed (store/tlsio.h). */
static void on_tls_write(uv_write_t *w, int status)
{
    struct sl_upool_conn *c = w->data;
    sl_tlsio_written(&c->io);
    if (c->state == C_CLOSING)
        return;
    if (status < 0) {
        sl_upool_conn_fail(c, status, uv_strerror(status));
        return;
    }
    conn_flush(c);
}

/* ---- holding a small batch for more (net/gather.h) ---------------------------- */

static void hold_unlink(struct sl_upool_conn *c)
{
    struct sl_upool *p = c->pool;
    if (!c->holding)
        return;
    if (c->hprev)
        c->hprev->hnext = c->hnext;
    else
        p->holds = c->hnext;
    if (c->hnext)
        c->hnext->hprev = c->hprev;
    c->hnext = c->hprev = NULL;
    c->holding = c->hold_due = 0;
}

/* <c>'s hold is over at <now>: judged by the requests that joined it. */
static void hold_end(struct sl_upool_conn *c, uint64_t now)
{
    struct sl_upool *p = c->pool;
    uint32_t gained = c->unwritten > c->hold_from ? c->unwritten - c->hold_from : 0;
    hold_unlink(c);
    p->st.batch_holds++;
    p->st.batch_gained += gained;
    if (sl_gather_judge(&p->gather, now, gained))
        sl_log_debug("pooled batches stop waiting for more", "listener=%s for_ms=%llu",
                     p->conf.label ? p->conf.label : "",
                     (unsigned long long)(p->gather.backoff / 1000));
}

/* The timer: holds whose wait is over leave at this turn's end; it is
 * armed again for the earliest one left. The clock is read here, not the
 * turn's: it fired at its time, and a hold marked due leaves whatever the
 * turn's clock says. */
static void on_hold_timer(struct sl_gather_timer *t)
{
    struct sl_upool *p = t->data;
    uint64_t now = sl_clock_us(&sl_clock_mono), next = 0;
    for (struct sl_upool_conn *c = p->holds; c != NULL; c = c->hnext) {
        if (c->hold_due)
            continue;
        if (now >= c->hold_until) {
            c->hold_due = 1;
            sl_upool_mark_dirty(c);
        } else if (next == 0 || c->hold_until < next) {
            next = c->hold_until;
        }
    }
    if (next != 0 && sl_gather_timer_arm(t, p->loop, next) < 0)
        for (struct sl_upool_conn *c = p->holds; c != NULL; c = c->hnext)
            if (!c->hold_due) {
                c->hold_due = 1; /* no timer: nothing waits */
                sl_upool_mark_dirty(c);
            }
}

/* 1 when <c>'s batch (READY, shared, nothing of it in flight) waits for
 * more instead of leaving now. */
static int hold(struct sl_upool_conn *c)
{
    struct sl_upool *p = c->pool;
    uint64_t wait = p->conf.batch_wait_us;
    if (c->holding) {
        uint64_t now = sl_turn_now_us();
        if (!c->hold_due && wait != 0 && !sl_gather_over(now, c->hold_until, c->unwritten))
            return 1;
        hold_end(c, now);
        return 0;
    }
    if (wait == 0 || c->retired)
        return 0;
    uint64_t now = sl_turn_now_us();
    if (!sl_gather_hold(&p->gather, wait, now, c->unwritten) ||
        sl_gather_timer_arm(&p->gtimer, p->loop, now + wait) < 0)
        return 0;
    c->holding = 1;
    c->hold_due = 0;
    c->hold_from = c->unwritten;
    c->hold_until = now + wait;
    /* the order does not matter: the timer looks at every hold */
    c->hprev = NULL;
    c->hnext = p->holds;
    if (p->holds)
        p->holds->hprev = c;
    p->holds = c;
    return 1;
}

/* How many bytes of <out> may leave now; those are committed (the caller
 * writes them all, now or with the write it queues). */
static size_t conn_may(struct sl_upool_conn *c)
{
    if (c->state == C_HANDSHAKE)
        return 0; /* the setup waits for the engine to be open */
    /* A shared connection writes its next batch once the one in flight is
     * answered: what its owners submit meanwhile gathers into one write,
     * which Redis reads and answers at the cost of one read instead of one
     * per small batch (its CPU goes per read, not per request); the last
     * reply of the batch marks it dirty again (rt_reply_end). */
    if (c->state == C_READY && c->pin == NULL && c->rt.owed > c->unwritten)
        return 0;
    size_t n = c->state == C_READY ? c->out.len : c->go;
    if (n == 0)
        return 0;
    if (c->state == C_READY && c->pin == NULL && hold(c))
        return 0;
    if (c->state == C_READY && c->pool->starting != NULL && held_back(c)) {
        c->held = 1; /* start_done() marks it dirty again */
        return 0;
    }
    if (c->state == C_READY) {
        c->unwritten = 0; /* all of it leaves now (or with the write queued) */
        c->flight_ms = now_ms(c->pool);
    }
    return n;
}

/* TLS: the <n> bytes committed move from <out> to <plain>, then the engine
 * encrypts what it has room for and the ciphertext is written; the rest of
 * <plain> follows from the write's callback (conn_flush again), whatever
 * the batch rules say meanwhile: those bytes are committed already. */
static void tls_flush(struct sl_upool_conn *c, size_t n)
{
    if (n > 0) {
        if (c->plain.len == 0 && n == c->out.len) {
            struct sl_obuf t = c->plain; /* all of it: swap instead of copying */
            c->plain = c->out;
            c->out = t;
            c->out.len = 0;
        } else {
            if (sl_wire_append(&c->plain, c->out.p, n) < 0) {
                sl_upool_conn_fail(c, SL_ENOMEM, "out of memory");
                return;
            }
            memmove(c->out.p, c->out.p + n, c->out.len - n);
            c->out.len -= n;
        }
        c->go = c->go > n ? c->go - n : 0;
    }
    char why[320];
    if (sl_tlsio_flush(&c->io, &c->plain, why, sizeof(why)) < 0)
        sl_upool_conn_fail(c, UV_EIO, why);
}

/* Writes what may leave of <out>: one uv_try_write, the rest with one
 * uv_write (and the next batch waits for it). */
static void conn_flush(struct sl_upool_conn *c)
{
    if (c->writing || c->io.writing || c->state == C_CONNECTING || c->state == C_CLOSING)
        return;
    size_t n = conn_may(c);
    if (n > 0)
        sl_yield_pooled(0); /* a batch leaves: Redis and the clients get to work */
    if (c->io.tls != NULL) {
        tls_flush(c, n);
        return;
    }
    if (n == 0)
        return;
    uv_buf_t b = uv_buf_init(c->out.p, (unsigned)n);
    int w = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (w < 0 && w != UV_EAGAIN) {
        sl_upool_conn_fail(c, w, uv_strerror(w));
        return;
    }
    size_t took = w > 0 ? (size_t)w : 0;
    if (took < n) {
        if (took == 0 && n == c->out.len) {
            /* all of it: swap the buffers instead of copying */
            struct sl_obuf t = c->wbuf;
            c->wbuf = c->out;
            c->out = t;
            c->out.len = 0;
        } else {
            c->wbuf.len = 0;
            if (sl_wire_append(&c->wbuf, c->out.p + took, n - took) < 0) {
                sl_upool_conn_fail(c, SL_ENOMEM, "out of memory");
                return;
            }
            memmove(c->out.p, c->out.p + n, c->out.len - n);
            c->out.len -= n;
        }
        b = uv_buf_init(c->wbuf.p, (unsigned)c->wbuf.len);
        c->wreq.data = c;
        int rc = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_write);
        if (rc < 0) {
            sl_upool_conn_fail(c, rc, uv_strerror(rc));
            return;
        }
        c->writing = 1;
    } else {
        memmove(c->out.p, c->out.p + n, c->out.len - n);
        c->out.len -= n;
    }
    c->go = c->go > n ? c->go - n : 0;
}

void sl_upool_flush_all(struct sl_upool *p)
{
    /* One at a time off the list: a flush that fails a connection calls
     * owners back, and they may submit (or end another connection). */
    struct sl_upool_conn *c;
    while ((c = p->dirty) != NULL) {
        p->dirty = c->dnext;
        if (p->dirty == NULL)
            p->dirty_tail = NULL;
        c->dirty = 0;
        conn_flush(c);
    }
}

static void on_prep(uv_prepare_t *h)
{
    sl_upool_flush_all(h->data);
}

static void on_check(uv_check_t *h)
{
    sl_upool_flush_all(h->data);
}

/* ---- reading ---------------------------------------------------------------- */

static uint64_t now_ms(const struct sl_upool *p)
{
    return p->conf.now_ms != NULL ? p->conf.now_ms() : sl_turn_now_ms();
}

/* The read chunk, with room for a read; NULL when out of memory. */
static struct sl_buf *chunk(struct sl_upool_conn *c)
{
    struct sl_buf *b = c->in;
    /* every byte read is routed at once: a chunk nobody else holds restarts */
    if (b != NULL && b->refs == 1)
        b->start = b->end = 0;
    if (b != NULL && SL_BUF_SIZE - b->end < MIN_READ) {
        sl_buf_unref(b);
        b = c->in = NULL;
    }
    if (b == NULL)
        b = c->in = sl_buf_get();
    return b;
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *ub)
{
    (void)hint;
    struct sl_upool_conn *c = h->data;
    if (c->io.tls != NULL) {
        /* ciphertext: decrypted into the chunk before the next read, so
         * one buffer serves every connection of the pool (one loop) */
        struct sl_upool *p = c->pool;
        if (p->cbuf == NULL)
            p->cbuf = malloc(TLS_READ);
        *ub = p->cbuf ? uv_buf_init(p->cbuf, TLS_READ) : uv_buf_init(NULL, 0);
        return;
    }
    struct sl_buf *b = chunk(c);
    *ub = b ? uv_buf_init(b->data + b->end, SL_BUF_SIZE - b->end) : uv_buf_init(NULL, 0);
}

/* <n> bytes just landed at the end of the read chunk: each piece to whom it
 * belongs. 0, or 1 when <c> is closing now. */
static int routed(struct sl_upool_conn *c, size_t n)
{
    struct sl_buf *b = c->in;
    uint32_t from = b->end;
    b->end += (uint32_t)n;
    c->used_ms = now_ms(c->pool);
    char why[200];
    int rc = sl_upool_route_feed(&c->rt, b, from, b->end, &rt_ops, c, why, sizeof(why));
    if (c->state == C_CLOSING)
        return 1;
    b->start = b->end;
    if (rc < 0) {
        if (strncmp(why, "a setup", 7) == 0)
            c->pool->st.setup_failures++;
        sl_upool_conn_fail(c, rc, why);
        return 1;
    }
    if (b->refs == 1) {
        /* nobody holds its bytes: the chunk goes back (a pooled get is cheap) */
        sl_buf_unref(b);
        c->in = NULL;
    }
    return 0;
}

/* TLS: plaintext the engine decrypted (at most a record, in its buffer):
 * into the read chunk, routed from there as a plain read is. */
static int tls_plain(void *arg, const char *p, size_t len)
{
    struct sl_upool_conn *c = arg;
    while (len > 0) {
        struct sl_buf *b = chunk(c);
        if (b == NULL) {
            sl_upool_conn_fail(c, SL_ENOMEM, "out of memory");
            return 1;
        }
        size_t n = SL_BUF_SIZE - b->end < len ? SL_BUF_SIZE - b->end : len;
        memcpy(b->data + b->end, p, n);
        if (routed(c, n) != 0)
            return 1; /* closing: the engine is gone */
        p += n;
        len -= n;
    }
    return 0;
}

static void conn_up(struct sl_upool_conn *c);

/* TLS: ciphertext read. The handshake's end lets the setup leave; a TLS
 * failure (a certificate that does not verify, a wrong name, an alert)
 * fails the connection as a lost one, logged with OpenSSL's reason. */
static void tls_read(struct sl_upool_conn *c, const char *p, size_t len)
{
    struct sl_upool *p0 = c->pool;
    char why[320];
    int rc = sl_tlsio_read(&c->io, p, len, &c->plain, tls_plain, c, why, sizeof(why));
    if (rc == 1 || c->state == C_CLOSING)
        return;
    if (c->io.opened) {
        c->io.opened = 0;
        int resumed = sl_tls_resumed(c->io.tls);
        if (resumed && p0->conf.tls_resumed != NULL)
            (*p0->conf.tls_resumed)++;
        sl_log_debug("pooled upstream TLS up", "listener=%s version=%s resumed=%d",
                     p0->conf.label ? p0->conf.label : "", sl_tls_version(c->io.tls), resumed);
        conn_up(c);
        if (c->state == C_CLOSING)
            return;
    }
    if (rc == SL_ECLOSED) {
        sl_upool_conn_fail(c, UV_EOF, "the upstream closed the connection (TLS close_notify)");
    } else if (rc < 0) {
        if (rc == SL_EPROTO)
            sl_log_warn_rl("upool_tls", "pooled upstream TLS failed", "listener=%s err=\"%s\"",
                           p0->conf.label ? p0->conf.label : "", why);
        sl_upool_conn_fail(c, rc == SL_EPROTO ? SL_EPROTO : UV_EIO, why);
    }
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *ub)
{
    struct sl_upool_conn *c = st->data;
    if (nread == 0 || c->state == C_CLOSING)
        return;
    if (nread < 0) {
        sl_upool_conn_fail(c, (int)nread, nread == UV_EOF ? "the upstream closed the connection"
                                                           : uv_strerror((int)nread));
        return;
    }
    sl_yield_pooled(0); /* replies: clients to wake at this turn's end */
    if (c->io.tls != NULL)
        tls_read(c, ub->base, (size_t)nread);
    else
        (void)routed(c, (size_t)nread);
}

/* ---- connecting ------------------------------------------------------------- */

static void on_close(uv_handle_t *h)
{
    struct sl_upool_conn *c = h->data;
    struct sl_upool *p = c->pool;
    p->handles--;
    if (--c->handles > 0)
        return;
    sl_upool_route_free(&c->rt);
    sl_tlsio_free(&c->io);
    free(c->out.p);
    free(c->plain.p);
    free(c->wbuf.p);
    if (c->in)
        sl_buf_unref(c->in);
    free(c);
    pool_maybe_free(p);
}

void sl_upool_on_timer(uv_timer_t *t)
{
    struct sl_upool_conn *c = t->data;
    if (c->noaddr) {
        sl_upool_conn_fail(c, UV_EAI_NONAME, "the upstream's name does not resolve (yet)");
        return;
    }
    sl_upool_conn_fail(c, UV_ETIMEDOUT, c->state == C_CONNECTING  ? "connect timed out"
                                        : c->state == C_HANDSHAKE ? "TLS handshake timed out"
                                                                  : "setup replies timed out");
}

/* TCP (and TLS) up: the setup leaves, or owners' bytes when there is none. */
static void conn_up(struct sl_upool_conn *c)
{
    c->state = setup_pending(c) ? C_SETUP : C_READY;
    if (c->state == C_READY) {
        uv_timer_stop(&c->timer);
        c->go = c->out.len;
        start_done(c);
    }
    conn_flush(c);
}

static void on_connect(uv_connect_t *req, int status)
{
    struct sl_upool_conn *c = req->data;
    if (c->state == C_CLOSING)
        return;
    if (status < 0) {
        sl_upool_conn_fail(c, status, uv_strerror(status));
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    struct sl_upool *p = c->pool;
    struct sl_tls_ctx *ctx = p->conf.tls != NULL ? *p->conf.tls : NULL;
    if (ctx != NULL) {
        /* The handshake first, within the connect timeout; the ClientHello
         * leaves with the flush below, the setup once it is done. */
        const char *name = p->conf.tls_name && p->conf.tls_name[0] ? p->conf.tls_name : NULL;
        if (sl_tlsio_start(&c->io, (uv_stream_t *)&c->tcp, ctx, name, on_tls_write) != SL_OK) {
            sl_upool_conn_fail(c, SL_ENOMEM, "out of memory");
            return;
        }
        c->state = C_HANDSHAKE;
    }
    int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (rc < 0) {
        sl_upool_conn_fail(c, rc, uv_strerror(rc));
        return;
    }
    if (c->state == C_HANDSHAKE)
        conn_flush(c);
    else
        conn_up(c);
}

/* A new connection for <k>, its setup queued first. Not listed anywhere. */
struct sl_upool_conn *sl_upool_conn_new(struct sl_upool_key *k, int *err)
{
    struct sl_upool *p = k->pool;
    struct sl_upool_conn *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        *err = SL_ENOMEM;
        return NULL;
    }
    c->pool = p;
    c->key = k;
    sl_upool_route_init(&c->rt);
    if (k->nsetup > 0 && (sl_wire_append(&c->out, k->setup, k->setuplen) < 0 ||
                          sl_upool_route_push(&c->rt, NULL, k->nsetup, SL_UPE_SETUP) < 0)) {
        sl_upool_route_free(&c->rt);
        free(c->out.p);
        free(c);
        *err = SL_ENOMEM;
        return NULL;
    }
    c->go = c->out.len;
    c->seq = ++p->seq;
    uv_tcp_init(p->loop, &c->tcp);
    uv_timer_init(p->loop, &c->timer);
    c->tcp.data = c->timer.data = c->creq.data = c->io.req.data = c;
    c->used_ms = now_ms(p);
    c->handles = 2;
    p->handles += 2;
    p->st.connects++;
    p->st.conns++;
    /* No address yet (a name that did not resolve): the connection fails
     * at once, but as a connect does, so its owners hear failed() and get
     * the usual error in place of each reply; the caller looks the name
     * up again and a reconfigure brings the address. */
    c->noaddr = p->conf.addr.ss_family != AF_INET && p->conf.addr.ss_family != AF_INET6;
    uv_timer_start(&c->timer, sl_upool_on_timer,
                   c->noaddr ? 0 : p->conf.connect_timeout_ms ? p->conf.connect_timeout_ms : 1, 0);
    int rc = c->noaddr ? 0
                       : uv_tcp_connect(&c->creq, &c->tcp, (const struct sockaddr *)&p->conf.addr,
                                        on_connect);
    if (rc < 0) {
        /* fails nobody (no owner yet); the handles close */
        c->state = C_CLOSING;
        p->st.conns--;
        p->st.failures++;
        uv_close((uv_handle_t *)&c->tcp, on_close);
        uv_close((uv_handle_t *)&c->timer, on_close);
        *err = rc;
        return NULL;
    }
    c->starting = 1;
    c->snext = p->starting;
    c->sprev = NULL;
    if (p->starting)
        p->starting->sprev = c;
    p->starting = c;
    return c;
}

/* ---- failing ---------------------------------------------------------------- */

void sl_upool_conn_fail(struct sl_upool_conn *c, int err, const char *why)
{
    struct sl_upool *p = c->pool;
    struct sl_upool_key *k = c->key;
    if (c->state == C_CLOSING)
        return;
    int was_ready = c->state == C_READY;
    c->state = C_CLOSING;
    hold_unlink(c); /* its batch fails with it, unjudged */
    if (err != SL_ECLOSED || !was_ready)
        p->st.failures++;
    p->st.conns--;
    p->st.inflight -= c->pin ? 0 : c->rt.owed;
    /* Out of every list first: callbacks may submit, and must not land here. */
    if (c->pin != NULL) {
        sl_upool_list_del(&p->pinned, c);
        p->npinned--;
        k->npinned--;
        p->st.pinned--;
    } else if (c->cleaning) {
        sl_upool_list_del(&p->cleaning, c);
        c->cleaning = 0;
        k->npinned--;
    } else if (c->retired) {
        sl_upool_list_del(&p->retiring, c);
        c->retired = 0;
        k->nretired--;
        p->st.pooled--;
    } else if (c->listed) {
        sl_upool_list_del(&k->conns, c);
        k->nconns--;
        p->st.pooled--;
    }
    if (c->dirty) {
        /* freed in its close callback: no flush may find it after that */
        struct sl_upool_conn **pp = &p->dirty, *prev = NULL;
        while (*pp != c) {
            prev = *pp;
            pp = &(*pp)->dnext;
        }
        *pp = c->dnext;
        if (p->dirty_tail == c)
            p->dirty_tail = prev;
        c->dirty = 0;
    }
    start_done(c);
    if (c->io.tls != NULL) {
        /* A connection closed on purpose (idle, not needed, the pool
         * closing) tells a TLS upstream the end is clean, when no write
         * is in flight (nothing may pass it); never waits for the socket. */
        if (was_ready && err == SL_ECLOSED && !c->io.writing) {
            sl_tls_shutdown(c->io.tls);
            size_t len = 0;
            const void *cn = sl_tls_out_peek(c->io.tls, &len);
            if (cn != NULL && len > 0) {
                uv_buf_t b = uv_buf_init((char *)cn, (unsigned)len);
                (void)uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
            }
        }
        sl_tlsio_stop(&c->io); /* a write in flight uses io.wbuf, not the engine */
    }
    uv_read_stop((uv_stream_t *)&c->tcp);
    uv_close((uv_handle_t *)&c->tcp, on_close);
    uv_close((uv_handle_t *)&c->timer, on_close);
    if (err != SL_ECLOSED || c->rt.owed > 0 || c->pin != NULL)
        sl_log_debug_rl("upool_failed", "pooled upstream connection failed", "err=\"%s\"", why);

    /* The owners in flight, each once: first detach them all (no callback
     * yet), then tell them, so a callback that frees its owner cannot
     * leave a dangling entry behind. */
    struct sl_upool_route rt = c->rt;
    sl_upool_route_init(&c->rt);
    struct sl_upool_owner *pin = c->pin;
    c->pin = NULL;
    for (uint32_t i = 0; i < rt.n; i++) {
        struct sl_upool_ent *e = sl_upool_route_at(&rt, i);
        struct sl_upool_owner *o = e->owner;
        if (o == NULL)
            continue;
        if (o->conn != c) {
            e->owner = NULL; /* told already by an earlier entry */
            continue;
        }
        o->conn = NULL;
        o->inflight = 0;
        o->pinned = 0;
    }
    if (pin != NULL && pin->conn == c) {
        pin->conn = NULL;
        pin->pinned = 0;
    } else {
        pin = NULL;
    }
    for (uint32_t i = 0; i < rt.n; i++) {
        struct sl_upool_ent *e = sl_upool_route_at(&rt, i);
        if (e->owner != NULL && e->owner != pin) {
            p->st.owners_failed++;
            p->cbs.failed(e->owner, err, why);
        }
    }
    sl_upool_route_free(&rt);
    if (pin != NULL) {
        p->st.owners_failed++;
        p->cbs.failed(pin, err, why);
    }
    if (k != NULL)
        key_maybe_free(k);
    sl_upool_serve_waiters(p);
}

/* ---- the pool --------------------------------------------------------------- */

struct sl_upool *sl_upool_new(uv_loop_t *loop, const struct sl_upool_conf *conf,
                              const struct sl_upool_cbs *cbs)
{
    struct sl_upool *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    p->loop = loop;
    p->conf = *conf;
    if (p->conf.per_key == 0)
        p->conf.per_key = 1;
    p->cbs = *cbs;
    if (conf->own_flush) {
        uv_prepare_init(loop, &p->prep);
        uv_check_init(loop, &p->check);
        p->prep.data = p->check.data = p;
        uv_prepare_start(&p->prep, on_prep);
        uv_check_start(&p->check, on_check);
        /* they never keep the loop alive by themselves */
        uv_unref((uv_handle_t *)&p->prep);
        uv_unref((uv_handle_t *)&p->check);
        p->handles += 2;
    }
    /* Both timers always exist: a reload may set an idle timeout, or set
     * connections aside (sl_upool_reconfigure); the connections keep the
     * loop alive, never the timers. */
    uv_timer_init(loop, &p->idle);
    uv_timer_init(loop, &p->retire);
    p->idle.data = p->retire.data = p;
    sl_gather_timer_init(&p->gtimer, on_hold_timer, p);
    uv_unref((uv_handle_t *)&p->idle);
    uv_unref((uv_handle_t *)&p->retire);
    p->handles += 2;
    return p;
}

/* A shared connection is idle: nothing owed on it (forgotten owners' replies
 * included), nothing waiting to be written or being written. */
static int conn_idle(const struct sl_upool_conn *c)
{
    return c->state == C_READY && c->pin == NULL && !c->cleaning && c->rt.n == 0 &&
           c->out.len == 0 && c->plain.len == 0 && !c->writing && !c->io.writing && !c->dirty &&
           !c->held;
}

/* The sweep: shared connections idle for idle_timeout_ms close. */
static void on_idle(uv_timer_t *t)
{
    struct sl_upool *p = t->data;
    uint64_t now = now_ms(p), max = p->conf.idle_timeout_ms;
    for (;;) {
        /* One at a time, looking again after each: closing one may free
         * its key (the last reference gone). */
        struct sl_upool_conn *v = NULL;
        for (struct sl_upool_key *k = p->keys; k != NULL && v == NULL; k = k->next)
            for (struct sl_upool_conn *c = k->conns; c != NULL && v == NULL; c = c->next)
                if (conn_idle(c) && now >= c->used_ms && now - c->used_ms >= max)
                    v = c;
        if (v == NULL)
            break;
        p->st.idle_closed++;
        sl_upool_conn_fail(v, SL_ECLOSED, "idle");
    }
    if (p->st.pooled == 0)
        uv_timer_stop(t); /* armed again with the next shared connection */
}

/* A shared connection joined: the sweep runs (every quarter of the timeout,
 * so a connection closes between 1 and 1.25 timeouts idle). */
static void idle_arm(struct sl_upool *p)
{
    if (p->conf.idle_timeout_ms == 0 || p->closing || uv_is_active((uv_handle_t *)&p->idle))
        return;
    uint64_t every = p->conf.idle_timeout_ms / 4 ? p->conf.idle_timeout_ms / 4 : 1;
    uv_timer_start(&p->idle, on_idle, every, every);
}

static void on_pool_handle_close(uv_handle_t *h)
{
    struct sl_upool *p = h->data;
    p->handles--;
    pool_maybe_free(p);
}

static void on_gtimer_closed(struct sl_gather_timer *t)
{
    struct sl_upool *p = t->data;
    p->handles--;
    pool_maybe_free(p);
}

static void pool_maybe_free(struct sl_upool *p)
{
    if (!p->closing || p->handles > 0)
        return;
    while (p->keys != NULL) {
        struct sl_upool_key *k = p->keys;
        p->keys = k->next;
        free(k->setup);
        free(k);
    }
    free(p->cbuf);
    free(p);
}

void sl_upool_close(struct sl_upool *p)
{
    if (p->closing)
        return;
    p->closing = 1;
    while (p->wait_head != NULL) {
        struct sl_upool_owner *o = p->wait_head;
        p->wait_head = o->wnext;
        o->waiting = 0;
        o->wkey = NULL;
        o->wnext = NULL;
        p->cbs.failed(o, SL_ECLOSED, "the pool is closing");
    }
    p->wait_tail = NULL;
    p->nwait = 0;
    p->st.pin_waiting = 0;
    while (p->pinned != NULL)
        sl_upool_conn_fail(p->pinned, SL_ECLOSED, "the pool is closing");
    while (p->cleaning != NULL)
        sl_upool_conn_fail(p->cleaning, SL_ECLOSED, "the pool is closing");
    while (p->retiring != NULL)
        sl_upool_conn_fail(p->retiring, SL_ECLOSED, "the pool is closing");
    for (struct sl_upool_key *k = p->keys; k != NULL; k = k->next)
        while (k->conns != NULL)
            sl_upool_conn_fail(k->conns, SL_ECLOSED, "the pool is closing");
    if (p->conf.own_flush) {
        p->prep.data = p->check.data = p;
        uv_close((uv_handle_t *)&p->prep, on_pool_handle_close);
        uv_close((uv_handle_t *)&p->check, on_pool_handle_close);
    }
    uv_close((uv_handle_t *)&p->idle, on_pool_handle_close);
    uv_close((uv_handle_t *)&p->retire, on_pool_handle_close);
    if (sl_gather_timer_close(&p->gtimer, on_gtimer_closed))
        p->handles++;
    pool_maybe_free(p);
}

/* ---- a reload ----------------------------------------------------------------- */

/* A connection set aside has nothing owed, queued or being written. */
static int retired_done(const struct sl_upool_conn *c)
{
    return c->rt.n == 0 && c->out.len == 0 && c->plain.len == 0 && !c->writing &&
           !c->io.writing && !c->dirty && !c->held;
}

/* The sweep of the connections set aside: those done close. One at a time,
 * from the head again after each (closing one may free its key). */
static void retire_sweep(struct sl_upool *p)
{
    for (;;) {
        struct sl_upool_conn *v = p->retiring;
        while (v != NULL && !retired_done(v))
            v = v->next;
        if (v == NULL)
            break;
        sl_upool_conn_fail(v, SL_ECLOSED, "set aside by a reload");
    }
    if (p->retiring == NULL)
        uv_timer_stop(&p->retire);
}

static void on_retire(uv_timer_t *t)
{
    retire_sweep(t->data);
}

/* Shared connection <c> of its key takes no new owner: the owners with
 * replies owed on it stay (their order) and it closes once they are in.
 * The retire sweep looks every RETIRE_MS: a reload is rare, and nothing
 * on the path of a request has to look. */
#define RETIRE_MS 50

static void retire(struct sl_upool_conn *c)
{
    struct sl_upool *p = c->pool;
    struct sl_upool_key *k = c->key;
    sl_upool_list_del(&k->conns, c);
    k->nconns--;
    k->nretired++;
    c->retired = 1;
    sl_upool_list_add(&p->retiring, c);
    if (!uv_is_active((uv_handle_t *)&p->retire))
        uv_timer_start(&p->retire, on_retire, RETIRE_MS, RETIRE_MS);
}

/* The shared connection of <k> to set aside first: one with nothing owed,
 * else the one with the fewest replies owed (it is done soonest). */
static struct sl_upool_conn *surplus(struct sl_upool_key *k)
{
    struct sl_upool_conn *best = NULL;
    for (struct sl_upool_conn *c = k->conns; c != NULL; c = c->next)
        if (best == NULL || c->rt.owed < best->rt.owed)
            best = c;
    return best;
}

static int same_upstream(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != AF_INET && a->ss_family != AF_INET6)
        return a->ss_family == b->ss_family; /* none yet (a name not resolved) on both sides */
    return sl_resolve_same_addr(a, b);
}

void sl_upool_reconfigure(struct sl_upool *p, const struct sl_upool_conf *conf)
{
    if (p->closing)
        return;
    int moved = !same_upstream(&p->conf.addr, &conf->addr);
    uint64_t idle_was = p->conf.idle_timeout_ms;
    uint32_t per_key = conf->per_key > 0 ? conf->per_key : p->conf.per_key;
    uint8_t own_flush = p->conf.own_flush; /* the flush handles were made for it */
    p->conf = *conf;
    p->conf.own_flush = own_flush;
    p->conf.per_key = per_key;
    if (moved) {
        char addr[64];
        sl_log_info("pooled upstream address changed: new connections go there, the old ones "
                    "close once their replies are in",
                    "listener=%s addr=%s", p->conf.label ? p->conf.label : "",
                    sl_resolve_fmt(&p->conf.addr, addr, sizeof(addr)));
        /* Pinned connections finish what their client started there (a
         * transaction, a subscription), then close instead of rejoining. */
        for (struct sl_upool_conn *c = p->pinned; c != NULL; c = c->next)
            c->stale = 1;
        for (struct sl_upool_conn *c = p->cleaning; c != NULL; c = c->next)
            c->stale = 1;
    }
    for (struct sl_upool_key *k = p->keys; k != NULL; k = k->next) {
        while (k->conns != NULL && (moved || k->nconns > per_key)) {
            struct sl_upool_conn *c = surplus(k);
            c->stale |= (uint8_t)moved;
            retire(c);
        }
    }
    if (p->conf.idle_timeout_ms != idle_was) {
        uv_timer_stop(&p->idle);
        if (p->st.pooled > 0)
            idle_arm(p);
    }
    sl_upool_serve_waiters(p); /* the pin cap may have grown */
    if (p->retiring != NULL)
        retire_sweep(p); /* those with nothing owed close now */
}

int sl_upool_unused(const struct sl_upool *p)
{
    if (p->nwait > 0 || p->npinned > 0)
        return 0;
    for (const struct sl_upool_key *k = p->keys; k != NULL; k = k->next)
        if (k->refs > 0)
            return 0;
    return 1;
}

struct sl_upool_key *sl_upool_key_get(struct sl_upool *p, const void *id, size_t idlen,
                                      const char *setup, size_t setuplen, uint32_t nsetup)
{
    for (struct sl_upool_key *k = p->keys; k != NULL; k = k->next) {
        if (k->idlen == idlen && memcmp(k->id, id, idlen) == 0) {
            k->refs++;
            return k;
        }
    }
    struct sl_upool_key *k = calloc(1, sizeof(*k) + idlen);
    if (k == NULL)
        return NULL;
    if (setuplen > 0 && (k->setup = malloc(setuplen)) == NULL) {
        free(k);
        return NULL;
    }
    if (setuplen > 0)
        memcpy(k->setup, setup, setuplen);
    memcpy(k->id, id, idlen);
    k->idlen = idlen;
    k->setuplen = setuplen;
    k->nsetup = nsetup;
    k->pool = p;
    k->refs = 1;
    k->next = p->keys;
    p->keys = k;
    return k;
}

void sl_upool_key_put(struct sl_upool_key *k)
{
    if (k->refs > 0)
        k->refs--;
    key_maybe_free(k);
}

void sl_upool_owner_init(struct sl_upool_owner *o, void *data)
{
    memset(o, 0, sizeof(*o));
    o->data = data;
}

/* The shared connection of <k> a new request of an owner without one
 * goes to: the one with the fewest replies owed, a new one when all are
 * busy and there is room. */
/* Replies in flight past which a connection being written this turn takes
 * no more owners (the others, or a new one, share the load). */
#define JOIN_MAX 256

/* Slow requests (SL_UPOOL_SLOW: scripts). Redis runs one command at a time,
 * but a script past busy-reply-threshold does not hold the other
 * connections: Redis answers them -BUSY at once, and SCRIPT KILL (which a
 * client sends after seeing -BUSY) stops it. What waits behind the script
 * on the SAME connection gets neither: it runs only when the script ends,
 * and a client waiting for that reply before it sends SCRIPT KILL waits for
 * good. So another owner's request never joins a connection whose slow
 * request is not answered yet (in this turn's write or in flight): it goes
 * to another connection, or a new one while the key has fewer than
 * per_key. Only when every connection has one does it queue, behind the
 * NEWEST slow request: Redis runs scripts one at a time, and while an older
 * one runs past the threshold it answers the newer ones -BUSY as it reads
 * them, so the newest is the one least likely to hold its connection for
 * long. */
static int slow_busy(const struct sl_upool_conn *c)
{
    return c->slow_left > 0;
}

/* A stall (SL_UPOOL_STALL_MS): the batch in flight is still unanswered
 * long after it left. Redis answers a batch in well under a millisecond
 * unless something holds it: a write under CLIENT PAUSE WRITE (Redis then
 * holds the rest of that connection too, while it serves the others'
 * reads), a slow command. Another owner's request written behind it would
 * wait as long, where on its own connection it would be served. <now> is
 * read once per pick, only when a batch is in flight. */
static int stalled(const struct sl_upool_conn *c, uint64_t *now)
{
    if (c->rt.owed <= c->unwritten)
        return 0; /* nothing written is unanswered */
    if (*now == 0)
        *now = now_ms(c->pool);
    return *now >= c->flight_ms + SL_UPOOL_STALL_MS;
}

static struct sl_upool_conn *pick(struct sl_upool_key *k, int *err)
{
    struct sl_upool_conn *best = NULL, *slow = NULL;
    uint64_t now = 0;
    for (struct sl_upool_conn *c = k->conns; c != NULL; c = c->next) {
        if (slow_busy(c) || stalled(c, &now)) {
            if (slow == NULL || c->slow_seq > slow->slow_seq)
                slow = c;
            continue;
        }
        /* A connection that already has bytes to write (this turn, held
         * behind its batch in flight, or waiting for more: net/gather.h)
         * takes the owner's too: they leave in the same write, and the
         * upstream reads and answers them as one batch (its cost is per
         * read, not per request), where spreading them would cost it a
         * read each. */
        if ((c->dirty || c->out.len > 0) && c->rt.owed < JOIN_MAX)
            return c;
        if (best == NULL || c->rt.owed < best->rt.owed)
            best = c;
    }
    if (best != NULL && (best->rt.owed == 0 || k->nconns >= k->pool->conf.per_key))
        return best;
    if (best == NULL && slow != NULL && k->nconns >= k->pool->conf.per_key)
        return slow;
    struct sl_upool_conn *c = sl_upool_conn_new(k, err);
    if (c == NULL)
        return best != NULL ? best : slow; /* a busy one still serves */
    sl_upool_list_add(&k->conns, c);
    k->nconns++;
    k->pool->st.pooled++;
    idle_arm(k->pool);
    return c;
}

int sl_upool_submit(struct sl_upool_key *k, struct sl_upool_owner *o, const char *p, size_t len,
                    uint32_t replies)
{
    return sl_upool_submit_flags(k, o, p, len, replies, 0);
}

int sl_upool_submit_flags(struct sl_upool_key *k, struct sl_upool_owner *o, const char *p,
                          size_t len, uint32_t replies, unsigned flags)
{
    struct sl_upool_conn *c = o->conn;
    int err = 0;
    if (k != NULL && k->pool->closing)
        return SL_ECLOSED;
    if (c == NULL && !o->pinned && replies == 0)
        return 0; /* nothing Redis answers or acts on, nothing to keep in order: see upool.h */
    if (c == NULL) {
        if (o->pinned || k == NULL)
            return SL_ECLOSED;
        if ((c = pick(k, &err)) == NULL)
            return err;
    }
    if (sl_wire_append(&c->out, p, len) < 0)
        return SL_ENOMEM;
    sl_yield_pooled(replies); /* what the last yield brought (net/yield.h) */
    c->used_ms = now_ms(c->pool);
    /* An owner is attached to a shared connection only while replies are
     * owed to it there: one attached with none would stay attached for
     * good (only a reply's end detaches it), and when another owner then
     * pinned that connection, this one's requests would be written on the
     * pinned connection and their replies go to the other client. */
    if (!o->pinned && replies > 0) {
        if (sl_upool_route_push(&c->rt, o, replies, SL_UPE_OWNER) < 0) {
            c->out.len -= len;
            return SL_ENOMEM;
        }
        o->conn = c;
        o->inflight += replies;
        c->unwritten += replies;
        c->pool->st.inflight += replies;
        if (flags & SL_UPOOL_SLOW) {
            c->slow_left = c->rt.owed; /* its last reply is the last one owed now */
            c->slow_seq = ++c->pool->slow_seq;
        }
    }
    sl_upool_mark_dirty(c);
    return 0;
}

/* ---- numbers ---------------------------------------------------------------- */

void sl_upool_stats(const struct sl_upool *p, struct sl_upool_stats *st)
{
    *st = p->st;
}

void sl_upool_key_stats(const struct sl_upool_key *k, struct sl_upool_key_stats *st)
{
    memset(st, 0, sizeof(*st));
    st->conns = k->nconns;
    st->pinned = k->npinned;
    for (const struct sl_upool_conn *c = k->conns; c != NULL; c = c->next)
        st->inflight += c->rt.owed;
}

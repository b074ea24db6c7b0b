/* sluice — a session: one client connection and its upstream side (a
 * connection of its own, or, on a pooled listener, the listener's shared
 * connections: sess_pool.c).
 *
 *            client socket                                upstream socket
 *   read --> cin chunk --> protocol: frame, decide --> write (same bytes)
 *                               |                |
 *                               |   reply queue: n upstream replies, then a
 *                               |   local reply (protocol error, rejection)
 *                               v                v
 *   write <-- uin chunk <-- protocol: frame replies <-- read
 *
 * This file is the part every protocol shares (see session-i.h): sockets,
 * chunks, pauses, output, the reply queue, parking, closing; what a request
 * must ask first (verdicts, byte meters) is sess_decide.c's, connection
 * limits at accept sess_gate.c's, kept upstream connections sess_keep.c's.
 * What the bytes mean is the protocol's (sess_resp.c, sess_http.c,
 * sess_tcp.c), reached through one table, s->proto.
 *
 * Bytes are never copied on the way through: a read lands in a pooled chunk,
 * the protocol finds request boundaries, and the bytes of requests are
 * written from that same chunk (uv_try_write first; what the kernel does not
 * take at once is queued with a reference on the chunk).
 *
 * Backpressure: when one side's write queue passes HIGH_WATER, the other side
 * stops being read; below LOW_WATER it is read again. Requests awaiting
 * replies are capped too (max_replies_owed), so a client that pipelines without
 * reading replies stalls on TCP, not in our memory.
 *
 * Replies: the protocol finds reply ends; each reply that answers a request
 * pays one owed; local replies wait in the queue for their turn.
 *
 * Closing: upstream EOF -> flush to the client -> shut down -> linger (read
 * and discard until the client's EOF, so a close never turns into an RST that
 * would destroy replies still in flight), unless the client can send nothing
 * more (s->cl_said: a plain close then); client EOF -> shut the upstream
 * down for writing and keep relaying its replies until it closes. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "core/buf.h"
#include "net/sess_adapt.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/pool.h"
#include "core/resolve.h"
#include "core/tls.h"
#include "identity/identity.h"
#include "limit/limiter.h"
#include "limit/places.h"
#include "net/usage_export.h"
#include "net/listener.h"
#include "net/session.h"
#include "net/session-i.h"
#include "net/turn.h"
#include "net/upkeep.h"
#include "shape/meter.h"
#include "shape/wait.h"

#define HIGH_WATER   (4 * SL_BUF_SIZE)
#define LOW_WATER    (SL_BUF_SIZE)
#define MIN_READ     (8 * 1024)      /* smaller room than this: take a fresh chunk */

/* A queued write: holds the chunks its bytes live in, and carries a copy of
 * the bytes that live in none (after refs[nref]). */
struct wreq {
    uv_write_t     req;     /* req.data = session */
    uint32_t       nref;
    struct sl_buf *refs[];  /* referenced chunks */
};

static void on_client_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *ub);
static void on_upstream_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *ub);
static void on_linger_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *ub);
static void client_got(struct sl_session *s, ssize_t nread);
static void upstream_got(struct sl_session *s, ssize_t nread);
static void on_write(uv_write_t *req, int status);

struct sl_session *sl_session_of(struct sl_tq_node *n)
{
    return (struct sl_session *)((char *)n - offsetof(struct sl_session, tq));
}

uint64_t sl_sess_now_ms(struct sl_session *s)
{
    (void)s;
    return sl_turn_now_ms();
}

/* ---- pools ------------------------------------------------------------------ */

void sl_sess_clock(struct sl_session *s, struct sl_tq *q, struct sl_tq_node *n, int running)
{
    if (!running)
        sl_tq_remove(n);
    else if (n->q == NULL)
        sl_tq_touch(q, n, sl_sess_now_ms(s));
}

void sl_sess_ring_release(struct sl_session *s)
{
    sl_pend_release(&s->pend);
}

/* The protocols, by enum sl_proto. */
static const struct sl_sess_proto *const protos[] = {
    [SL_PROTO_RESP] = &sl_sess_resp,
    [SL_PROTO_HTTP] = &sl_sess_http,
    [SL_PROTO_TCP] = &sl_sess_tcp,
};

const struct sl_sess_proto *sl_sess_proto_of(const struct sl_listener *l)
{
    return protos[l->conf->protocol];
}

const char *sl_session_proto_name(const struct sl_listener *l)
{
    return sl_sess_proto_of(l)->name;
}

size_t sl_session_refusal_fd(const struct sl_listener *l, char *out, size_t cap)
{
    return sl_sess_proto_of(l)->refusal(SL_ANSWER_NO_FD, out, cap);
}

void sl_session_pool_drain(void)
{
    for (size_t i = 0; i < sizeof(protos) / sizeof(protos[0]); i++)
        protos[i]->pool_drain();
    sl_pend_pool_drain();
    sl_turn_drain();
    sl_outbuf_pool_drain();
}

/* ---- chunks --------------------------------------------------------------- */

/* Returns the chunk in <*slot> with at least MIN_READ bytes of room, taking a
 * new one (and moving unconsumed bytes into it) when needed; NULL on OOM. */
struct sl_buf *sl_sess_rx_chunk(struct sl_buf **slot)
{
    struct sl_buf *b = *slot;
    if (b != NULL && SL_BUF_SIZE - b->end >= MIN_READ)
        return b;
    if (b != NULL && b->refs == 1) {
        /* Nobody else looks at it: slide what is left to the front. */
        uint32_t held = b->end - b->start;
        memmove(b->data, b->data + b->start, held);
        b->start = 0;
        b->end = held;
        return b;
    }
    struct sl_buf *nb = sl_buf_get();
    if (nb == NULL)
        return NULL;
    if (b != NULL) {
        uint32_t held = b->end - b->start;
        memcpy(nb->data, b->data + b->start, held);
        nb->end = held;
        sl_buf_unref(b);
    }
    *slot = nb;
    return nb;
}

/* After a read was handled: a chunk with nothing left in it and no queued
 * write goes back to the pool, so an idle session holds no data buffer. */
void sl_sess_rx_release(struct sl_buf **slot)
{
    struct sl_buf *b = *slot;
    if (b != NULL && b->start == b->end && b->refs == 1) {
        sl_buf_unref(b);
        *slot = NULL;
    }
}

static void alloc_client(uv_handle_t *h, size_t hint, uv_buf_t *ub)
{
    (void)hint;
    struct sl_session *s = h->data;
    struct sl_buf *b = sl_sess_rx_chunk(&s->cin);
    *ub = b ? uv_buf_init(b->data + b->end, sl_sess_room_of(s->meter[0], SL_BUF_SIZE - b->end))
            : uv_buf_init(NULL, 0);
}

static void alloc_upstream(uv_handle_t *h, size_t hint, uv_buf_t *ub)
{
    (void)hint;
    struct sl_session *s = h->data;
    if (s == NULL) { /* kept, still watched (net/upkeep.c): any byte drops it */
        static char scratch[64];
        *ub = uv_buf_init(scratch, sizeof(scratch));
        return;
    }
    struct sl_buf *b = sl_sess_rx_chunk(&s->uin);
    *ub = b ? uv_buf_init(b->data + b->end, sl_sess_room_of(s->meter[1], SL_BUF_SIZE - b->end))
            : uv_buf_init(NULL, 0);
}

/* ---- transport: where bytes meet a socket ---------------------------------
 *
 * Every byte read from or written to either socket passes through here, one
 * place per direction and socket:
 *
 *   side_read(s, up, on)     reading a socket on and off
 *   client_got / upstream_got  bytes just read land in s->cin / s->uin
 *                            (or EOF, an error): the only way in
 *   side_write(ob, ...)      bytes out: a side's buffer (s->out[up], outbuf.h)
 *                            flushed; sl_sess_send appends to it
 *   side_queued(s, up)       bytes written but not yet taken by the kernel
 *                            (the watermarks read this)
 *   side_shutdown(s, up, cb) our half-close
 *   side_linger(s)           read and drop the client's input
 *
 * Plain TCP reads straight into the session's chunks and writes from them
 * (no copy); a transport that transforms the bytes keeps the same entry
 * points: TLS lives in sess_tls.c, behind s->tls[up]. */

uv_stream_t *sl_sess_side_stream(struct sl_session *s, int up)
{
    return up ? (uv_stream_t *)s->up_tcp : (uv_stream_t *)&s->client;
}

static void side_read(struct sl_session *s, int up, int on)
{
    if (s->tls[up] != NULL) {
        sl_sess_tls_sync_read(s, up);
        if (on)
            sl_sess_tls_kick(s); /* plaintext may already wait in the engine */
        return;
    }
    uv_stream_t *st = sl_sess_side_stream(s, up);
    if (st == NULL)
        return; /* no upstream connection (yet, or any more) */
    if (!on)
        uv_read_stop(st);
    else if (up)
        uv_read_start(st, alloc_upstream, on_upstream_read);
    else
        uv_read_start(st, alloc_client, on_client_read);
}

static size_t side_queued(struct sl_session *s, int up)
{
    uv_stream_t *st = sl_sess_side_stream(s, up);
    return (st != NULL ? st->write_queue_size : 0) +
           (s->tls[up] != NULL ? sl_tls_out_pending(s->tls[up]) : 0);
}

static int side_shutdown(struct sl_session *s, int up, uv_shutdown_cb cb)
{
    /* what was written before goes before the FIN */
    int frc = sl_outbuf_flush(&s->out[up]);
    if (frc < 0)
        return frc;
    if (s->tls[up] != NULL) {
        /* close_notify first, so the peer knows our data is whole */
        sl_tls_shutdown(s->tls[up]);
        if (sl_sess_tls_flush(s, up) < 0)
            return UV_EPROTO;
    }
    uv_shutdown_t *req = malloc(sizeof(*req));
    if (req == NULL)
        return UV_ENOMEM;
    req->data = s;
    int rc = uv_shutdown(req, sl_sess_side_stream(s, up), cb);
    if (rc < 0)
        free(req);
    return rc;
}

/* ---- reading on and off ------------------------------------------------- */

void sl_sess_pause(struct sl_session *s, int upstream, uint8_t bit, int on)
{
    uint8_t *m = upstream ? &s->up_pause : &s->cl_pause;
    uint8_t old = *m;
    *m = on ? (uint8_t)(old | bit) : (uint8_t)(old & ~bit);
    if (upstream && s->link != NULL)
        return; /* pooled: no socket of its own (a shared one is never paused for one client) */
    /* Past FLUSHING the close path drives the sockets itself. */
    if ((old == 0) == (*m == 0) || s->state >= SL_SESS_LINGER)
        return;
    side_read(s, upstream, *m == 0);
}

/* ---- writing ------------------------------------------------------------------ */

static void on_write(uv_write_t *req, int status)
{
    struct wreq *w = (struct wreq *)req;
    struct sl_session *s = req->data;
    uv_stream_t *dst = req->handle;
    int to_upstream = dst != (uv_stream_t *)&s->client;
    for (uint32_t i = 0; i < w->nref; i++)
        sl_buf_unref(w->refs[i]);
    free(w);
    if (to_upstream)
        s->up_wreqs--;
    if (s->state >= SL_SESS_CLOSED)
        return;
    if (status < 0) {
        sl_log_debug_rl("write_failed", "write failed", "listener=%s err=%s", s->l->name,
                        uv_strerror(status));
        sl_session_close(s);
        return;
    }
    size_t queued = side_queued(s, to_upstream);
    if (queued < LOW_WATER) {
        sl_sess_pause(s, !to_upstream, SL_PAUSE_PEERQ, 0);
        if (!to_upstream)
            sl_sess_pause(s, 0, SL_PAUSE_OWNQ, 0);
    }
    if (!to_upstream && s->state == SL_SESS_FLUSHING && queued == 0)
        sl_sess_finish(s);
}

/* Writes the <n> pieces of <iov> (<total> bytes) to socket <dst> as they are,
 * in one write: uv_try_write first; what the kernel does not take at once is
 * queued, holding a reference on the chunks its bytes live in and a copy of
 * the others. Returns 0 or a libuv error. */
static int plain_sendv(struct sl_session *s, uv_stream_t *dst, const struct sl_outbuf_iov *iov,
                       unsigned n, size_t total)
{
    uv_buf_t ub[SL_OUTBUF_SEGS];
    unsigned first = 0;
    if (n == 0 || n > SL_OUTBUF_SEGS)
        return n == 0 ? 0 : UV_EINVAL;
    for (unsigned i = 0; i < n; i++)
        ub[i] = uv_buf_init((char *)iov[i].p, (unsigned)iov[i].len);
    /* uv_try_write refuses (EAGAIN) while older writes are queued, so order
     * holds; when the queue is empty it saves a queued request and a loop
     * turn, which is most of the cost of a small pipelined reply. */
    if (dst->write_queue_size == 0) {
        int done = uv_try_write(dst, ub, n);
        if (done >= 0 && (size_t)done == total)
            return 0;
        if (done == UV_EAGAIN)
            done = 0;
        if (done < 0)
            return done;
        size_t skip = (size_t)done;
        while (skip > 0 && skip >= ub[first].len)
            skip -= ub[first++].len;
        ub[first].base += skip;
        ub[first].len -= skip;
    }
    uint32_t nref = 0;
    size_t copy = 0;
    for (unsigned i = first; i < n; i++) {
        if (iov[i].b != NULL)
            nref++;
        else
            copy += ub[i].len;
    }
    struct wreq *w = malloc(sizeof(*w) + nref * sizeof(w->refs[0]) + copy);
    if (w == NULL)
        return UV_ENOMEM;
    char *data = (char *)(w->refs + nref);
    w->nref = 0;
    for (unsigned i = first; i < n; i++) {
        if (iov[i].b != NULL) {
            sl_buf_ref(iov[i].b);
            w->refs[w->nref++] = iov[i].b;
        } else {
            memcpy(data, ub[i].base, ub[i].len);
            ub[i].base = data;
            data += ub[i].len;
        }
    }
    w->req.data = s;
    int rc = uv_write(&w->req, dst, ub + first, n - first, on_write);
    if (rc < 0) {
        for (uint32_t i = 0; i < w->nref; i++)
            sl_buf_unref(w->refs[i]);
        free(w);
        return rc;
    }
    if (dst != (uv_stream_t *)&s->client)
        s->up_wreqs++; /* its callback names the session: the socket is not kept before it */
    return 0;
}

/* Writes <len> bytes at <p> to socket <dst> as they are, at once (see
 * plain_sendv): for bytes that must not wait in the side's buffer (TLS
 * records, whose order the engine keeps). */
int sl_sess_plain_send(struct sl_session *s, uv_stream_t *dst, struct sl_buf *b, const char *p,
                      size_t len)
{
    struct sl_outbuf_iov iov = { p, len, b };
    return len > 0 ? plain_sendv(s, dst, &iov, 1, len) : 0;
}

/* A side's buffer is flushed: its pieces go to the socket (through the TLS
 * engine when there is one), then the watermarks are looked at. A failed
 * write ends the session (the flush may come from the turn's end, where
 * nobody else would). */
static char tls_gather[16 * 1024]; /* one TLS record's worth; one loop, one at a time */

static int side_write(struct sl_outbuf *ob, const struct sl_outbuf_iov *iov, unsigned n,
                      size_t total)
{
    struct sl_session *s = ob->owner;
    int up = ob == &s->out[1];
    int rc = 0;
    if (s->state >= SL_SESS_CLOSED)
        return UV_ECANCELED;
    if (s->tls[up] != NULL && n > 1 && total <= sizeof(tls_gather)) {
        /* The engine copies anyway: gathered, the pieces make one record
         * and one socket write, as one piece would. */
        size_t at = 0;
        for (unsigned i = 0; i < n; i++) {
            memcpy(tls_gather + at, iov[i].p, iov[i].len);
            at += iov[i].len;
        }
        rc = sl_sess_tls_send(s, up, tls_gather, at);
    } else if (s->tls[up] != NULL) {
        for (unsigned i = 0; i < n && rc == 0; i++)
            rc = sl_sess_tls_send(s, up, iov[i].p, iov[i].len);
    } else {
        uv_stream_t *st = sl_sess_side_stream(s, up);
        rc = st != NULL ? plain_sendv(s, st, iov, n, total) : UV_ENOTCONN;
    }
    if (rc < 0) {
        sl_session_close(s);
        return rc;
    }
    if (side_queued(s, up) > HIGH_WATER) {
        sl_sess_pause(s, !up, SL_PAUSE_PEERQ, 1);
        /* A client that does not read what it is sent is not read either:
         * local answers (a 429 per refused request) are made from its
         * input and would otherwise pile up here without bound. */
        if (!up)
            sl_sess_pause(s, 0, SL_PAUSE_OWNQ, 1);
    }
    return 0;
}

/* Both sides' buffers go out now. */
static void sess_flush(struct sl_session *s)
{
    for (int up = 0; up < 2; up++)
        if (s->state < SL_SESS_CLOSED)
            (void)sl_outbuf_flush(&s->out[up]);
}

void sl_sess_flush(struct sl_session *s)
{
    sess_flush(s);
}

/* Sends <len> bytes at <p> to <dst>: into the side's buffer, which writes
 * them with whatever else the side gets this turn (see net/outbuf.h). <b>
 * is the chunk holding them (referenced, not copied), or NULL for bytes
 * that are copied. Returns 0 or a libuv error. */
int sl_sess_send(struct sl_session *s, uv_stream_t *dst, struct sl_buf *b,
                      const char *p, size_t len)
{
    if (len == 0)
        return 0;
    if (s->state >= SL_SESS_CLOSED)
        return UV_ECANCELED;
    int up = dst != (uv_stream_t *)&s->client;
    if (up && s->link != NULL)
        return sl_sess_link_send(s, p, len); /* copied by the engine, written at the turn's end */
    struct sl_outbuf *ob = &s->out[up];
    if (b != NULL)
        return sl_outbuf_ref(ob, b, (uint32_t)(p - b->data), (uint32_t)(p - b->data + len));
    return sl_outbuf_copy(ob, p, len);
}

void sl_sess_to_upstream(struct sl_session *s, struct sl_buf *b, uint32_t from, uint32_t to)
{
    if (to > from && sl_sess_send(s, sl_sess_side_stream(s, 1), b, b->data + from, to - from) < 0)
        sl_session_close(s);
}

void sl_sess_to_client(struct sl_session *s, struct sl_buf *b, uint32_t from, uint32_t to)
{
    if (to > from && sl_sess_send(s, (uv_stream_t *)&s->client, b, b->data + from, to - from) < 0)
        sl_session_close(s);
}

/* ---- the reply queue ------------------------------------------------------ */

void sl_sess_owe(struct sl_session *s, uint32_t n)
{
    s->tail_n += n;
    s->inflight += n;
    if (s->link != NULL)
        sl_sess_link_owe(s, n);
    if (s->inflight >= s->l->conf->max_replies_owed)
        sl_sess_pause(s, 0, SL_PAUSE_INFLIGHT, 1);
}

void sl_sess_paid(struct sl_session *s)
{
    s->inflight--;
    /* Read again once half are delivered (a reload may have moved the
     * cap), and frame what was read and held meanwhile. */
    if ((s->cl_pause & SL_PAUSE_INFLIGHT) && s->inflight <= s->l->conf->max_replies_owed / 2) {
        sl_sess_pause(s, 0, SL_PAUSE_INFLIGHT, 0);
        /* also when nothing is left unframed: process() paused reading
         * (DECIDE) when it stopped at the cap, and sl_sess_resume() lifts that */
        sl_sess_resume_later(s);
    }
}

/* Draining: once every reply owed has been sent on, the session is done.
 * Called after a read's bytes left, never from inside the reply loop (the
 * last reply would be cut off). */
void sl_sess_drain_check(struct sl_session *s)
{
    if (s->draining && s->proto->framed && s->inflight == 0 && sl_pend_count(&s->pend) == 0 &&
        s->state == SL_SESS_RELAY)
        sl_sess_finish(s);
}

/* Queues the local reply <text> (RESP, <len> bytes) after every reply owed so
 * far. <flags>: SL_SEG_OWNED (free <text> after), SL_SEG_CLOSE. */
void sl_sess_local(struct sl_session *s, char *text, uint32_t len, uint8_t flags)
{
    if (s->seg_n == s->seg_cap) {
        uint32_t cap = s->seg_cap ? s->seg_cap * 2 : 4;
        struct sl_reply_seg *ns = malloc(cap * sizeof(*ns));
        if (ns == NULL) {
            if (flags & SL_SEG_OWNED)
                free(text);
            sl_session_close(s);
            return;
        }
        for (uint32_t i = 0; i < s->seg_n; i++)
            ns[i] = s->segs[(s->seg_head + i) % s->seg_cap];
        free(s->segs);
        s->segs = ns;
        s->seg_head = 0;
        s->seg_cap = cap;
    }
    struct sl_reply_seg *g = &s->segs[(s->seg_head + s->seg_n) % s->seg_cap];
    g->n = s->tail_n;
    g->len = len;
    g->text = text;
    g->flags = flags;
    s->seg_n++;
    s->tail_n = 0;
    /* a local reply is owed like an upstream one: the cap holds for both
     * (refusals made while an upstream reply is slow wait here) */
    s->inflight++;
    if (s->inflight >= s->l->conf->max_replies_owed)
        sl_sess_pause(s, 0, SL_PAUSE_INFLIGHT, 1);
    sl_sess_emit_locals(s);
}

/* Sends every local reply whose turn has come: its upstream replies have all
 * passed and the scanner is not inside an upstream reply. */
void sl_sess_emit_locals(struct sl_session *s)
{
    while (s->seg_n > 0 && s->state < SL_SESS_FLUSHING) {
        struct sl_reply_seg *g = &s->segs[s->seg_head];
        if (g->n > 0 || !s->proto->at_boundary(s))
            return;
        if (g->flags & SL_SEG_UNSUB) {
            /* Every confirmation before it has come: the connection's
             * count is known, and is how many this one brings (at least
             * one: "unsubscribe", nil, count when there was none). */
            uint32_t k = s->proto->marker_due(s, g->len);
            g->flags = SL_SEG_MARK;
            g->len = 0;
            g->n = k;
            s->inflight += k;
            continue;
        }
        uint8_t flags = g->flags;
        if (flags & SL_SEG_CLOSE)
            sl_sess_cork(s); /* the last words leave with the FIN */
        int rc = g->len > 0 ? sl_sess_send(s, (uv_stream_t *)&s->client, NULL, g->text, g->len) : 0;
        if (flags & SL_SEG_OWNED)
            free(g->text);
        s->seg_head = (s->seg_head + 1) % s->seg_cap;
        s->seg_n--;
        if (flags & SL_SEG_MARK)
            s->proto->marker_gone(s);
        if (rc < 0) {
            sl_session_close(s);
            return;
        }
        if (flags & SL_SEG_CLOSE) {
            sl_sess_finish(s);
            return;
        }
        sl_sess_paid(s);
    }
}

static void free_segs(struct sl_session *s)
{
    for (uint32_t i = 0; i < s->seg_n; i++) {
        struct sl_reply_seg *g = &s->segs[(s->seg_head + i) % s->seg_cap];
        if (g->flags & SL_SEG_OWNED)
            free(g->text);
    }
    free(s->segs);
    s->segs = NULL;
    s->seg_n = s->seg_cap = s->seg_head = 0;
}

/* ---- parking ----------------------------------------------------------------- */

struct sl_session *sl_sess_of_park(struct sl_wait *w)
{
    return (struct sl_session *)((char *)w - offsetof(struct sl_session, park));
}

static void on_park_due(struct sl_wait *w)
{
    sl_sess_resume(sl_sess_of_park(w));
}

/* Parks the session until <due_us>: reading stays paused (the ring is not
 * empty), one waiter in the process's heap wakes it. */
void sl_sess_park(struct sl_session *s, uint64_t due_us)
{
    if (sl_waits_default == NULL || sl_wait_at(sl_waits_default, &s->park, due_us, on_park_due) < 0)
        sl_session_close(s); /* out of memory */
}


/* Verdicts landed or a parked request's time came: move what can move. */
void sl_sess_resume(struct sl_session *s)
{
    if (s->state >= SL_SESS_FLUSHING)
        return;
    s->proto->resume(s);
    sess_flush(s);
}

/* Sessions whose verdicts landed this loop turn. The store answers a
 * pipelined batch in one read; moving on once per session at the end of
 * the turn sends all of a session's allowed requests in one write instead
 * of one write per verdict. */

static void on_resume_due(struct sl_turn_node *n)
{
    sl_sess_resume((struct sl_session *)((char *)n - offsetof(struct sl_session, resume_tn)));
}

void sl_sess_resume_later(struct sl_session *s)
{
    if (sl_turn_later(&s->resume_tn, on_resume_due) < 0)
        sl_sess_resume(s); /* no list: at once */
}

void sl_session_turn_end(void)
{
    sl_turn_run();
}

/* ---- closing ------------------------------------------------------------------ */

/* The last handle is closed: nothing can call into the session any more. */
static void session_free(struct sl_session *s)
{
    if (s->cin)
        sl_buf_unref(s->cin);
    if (s->uin)
        sl_buf_unref(s->uin);
    s->proto->free(s);
    sl_sadapt_free(s);
    free_segs(s);
    sl_pend_free(&s->pend);
    free(s->ident);
    free(s->pp);
    free(s->pp_src);
    sl_turn_forget(&s->resume_tn);
    sl_turn_forget(&s->kick_tn);
    sl_outbuf_reset(&s->out[0]);
    sl_outbuf_reset(&s->out[1]);
    sl_tls_free(s->tls[0]);
    sl_tls_free(s->tls[1]);
    sl_sess_link_free(s);
    struct sl_listener *l = s->l;
    free(s);
    sl_listener_session_gone(l);
}

static void on_close(uv_handle_t *h)
{
    struct sl_session *s = h->data;
    if (--s->handles == 0)
        session_free(s);
}

static void close_handle(uv_handle_t *h)
{
    if (!uv_is_closing(h))
        uv_close(h, on_close);
}

/* The upstream handle is its struct sl_upconn's (net/upkeep.h): freed with it. */
static void on_upstream_close(uv_handle_t *h)
{
    struct sl_session *s = h->data;
    if (s->up_tcp == (uv_tcp_t *)h)
        s->up_tcp = NULL;
    sl_upconn_free((uv_tcp_t *)h);
    if (--s->handles == 0)
        session_free(s);
}

/* Closes the session's own upstream connection, if it has one open. */
static void close_upstream(struct sl_session *s)
{
    uv_handle_t *h = (uv_handle_t *)s->up_tcp;
    if (h != NULL && !uv_is_closing(h))
        uv_close(h, on_upstream_close);
}

static void upstream_failed(struct sl_session *s, int err);
static void upstream_ready(struct sl_session *s);
static void connect_now(struct sl_session *s);

/* The upstream connection may serve another session (sess_keep.c): it goes
 * to the listener's kept ones, and the session has none any more. */
static int upstream_keep(struct sl_session *s)
{
    if (!s->up_up || s->up_tcp == NULL || uv_is_closing((uv_handle_t *)s->up_tcp) ||
        s->up_wreqs > 0 || !sl_sess_keep_give(s, side_queued(s, 1)))
        return 0;
    s->up_tcp = NULL;
    s->up_up = 0;
    s->handles--; /* the client's is still open: never the last */
    return 1;
}

/* The upstream connection is done with: kept for another session when it
 * may be, else closed. */
static void upstream_release(struct sl_session *s)
{
    if (!s->up_up || upstream_keep(s))
        return;
    close_upstream(s);
}

/* A kept upstream connection becomes the session's (sess_keep.c): 1 when
 * the session was dealt with (it relays), 0 when it connects. */
static int upstream_adopt(struct sl_session *s)
{
    if (!sl_sess_keep_take(s))
        return 0;
    upstream_ready(s);
    return 1;
}

static void on_again_close(uv_handle_t *h)
{
    struct sl_session *s = h->data;
    if (s->up_tcp == (uv_tcp_t *)h)
        s->up_tcp = NULL;
    sl_upconn_free((uv_tcp_t *)h);
    if (--s->handles == 0)
        session_free(s);
    else if (s->state == SL_SESS_CONNECTING) /* else closed meanwhile */
        connect_now(s);
}

void sl_sess_upstream_again(struct sl_session *s, uint32_t unowe)
{
    sl_sess_keep_again(s, unowe);
    s->up_up = 0;
    uv_close((uv_handle_t *)s->up_tcp, on_again_close);
}

void sl_session_close(struct sl_session *s)
{
    if (s->state == SL_SESS_CLOSED)
        return;
    /* What was sent before the close is written (as a write made at once
     * would have been); a failed write closes the session itself. */
    sess_flush(s);
    if (s->state == SL_SESS_CLOSED)
        return;
    s->state = SL_SESS_CLOSED;
    sl_tq_remove(&s->tq);
    sl_tq_remove(&s->hq);
    sl_tq_remove(&s->wq);
    s->l->stats.conns_active--;
    sl_usage_close(s); /* [usage]: its time */
    /* Verdicts still on their way must not land: the entries go away with
     * the session. Everything else stays valid until the last close
     * callback, because this may run in the middle of a loop over it. */
    for (uint32_t i = 0; i < sl_pend_count(&s->pend); i++) {
        struct sl_pend *e = sl_pend_at(&s->pend, i);
        if (e->h != NULL)
            sl_limiter_cancel(e->h);
        e->h = NULL;
    }
    if (sl_waits_default != NULL)
        sl_wait_cancel(sl_waits_default, &s->park);
    for (int i = 0; i < 2; i++) {
        if (s->meter[i] != NULL) {
            sl_meter_close(s->meter[i]);
            free(s->meter[i]);
            s->meter[i] = NULL;
        }
    }
    sl_place_free(s->place); /* the connection's places go back at once */
    s->place = NULL;
    close_handle((uv_handle_t *)&s->client);
    upstream_release(s);
    sl_sess_link_close(s); /* a pinned connection closes; replies in flight are dropped */
}

static void on_linger_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *ub)
{
    (void)ub;
    struct sl_session *s = st->data;
    if (nread < 0)
        sl_session_close(s);
    else if (nread > 0 && s->cin)
        s->cin->start = s->cin->end = 0; /* discard */
}

static void side_linger(struct sl_session *s)
{
    uv_read_start((uv_stream_t *)&s->client, alloc_client, on_linger_read);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    struct sl_session *s = req->data;
    free(req);
    if (s->state >= SL_SESS_CLOSED)
        return;
    if (status < 0 || s->cl_eof) {
        sl_session_close(s);
        return;
    }
    /* Read and drop whatever the client still sends until its EOF, so the
     * close is a FIN after our last byte, not an RST that could destroy it. */
    s->state = SL_SESS_LINGER;
    sl_tq_touch(&s->l->lingering, &s->tq, sl_sess_now_ms(s));
    s->cl_pause = 0;
    side_linger(s);
}

/* The bytes about to go to the client are its last: the kernel holds them
 * (TCP_CORK) until the shutdown's FIN, which then leaves in the same
 * segment, so the client never reads them without the close already there
 * behind them. A client that reads a QUIT's +OK and then looks whether the
 * connection closed before reusing it must see the close, as it does from
 * Redis, whose close follows its write within microseconds; a separate FIN
 * sent a few microseconds after the data loses that race often. The kernel
 * sends what is corked after 200 ms at the latest whatever happens. Not a
 * TCP socket (the error) or a failure: the FIN just follows. */
void sl_sess_cork(struct sl_session *s)
{
    uv_os_fd_t fd;
    int one = 1;
    if (s->state < SL_SESS_FLUSHING && uv_fileno((uv_handle_t *)&s->client, &fd) == 0)
        (void)setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof(one));
}

/* Every byte for the client has been written: close gracefully. */
void sl_sess_finish(struct sl_session *s)
{
    if (s->state >= SL_SESS_LINGER)
        return;
    sess_flush(s); /* what is still to go is written first */
    if (s->state >= SL_SESS_LINGER)
        return;
    if (s->state != SL_SESS_FLUSHING) {
        s->state = SL_SESS_FLUSHING;
        /* An upstream connection another session may use goes now, still
         * read: no read stopped here to be armed again for the next one. */
        (void)upstream_keep(s);
        sl_sess_pause(s, 0, SL_PAUSE_DONE, 1);
        if (s->up_up)
            sl_sess_pause(s, 1, SL_PAUSE_DONE, 1);
    }
    if (side_queued(s, 0) > 0)
        return; /* on_write calls again when the queue is empty */
    upstream_release(s);
    /* Nothing more can come from the client (its EOF came, or it asked for
     * the close and may send nothing after: RFC 9112, 9.6): a plain close
     * sends the FIN after our last byte, and with nothing unread no RST
     * can destroy it. Over TLS the close_notify goes first (below). */
    if (s->cl_eof || (s->cl_said && s->tls[0] == NULL)) {
        sl_session_close(s);
        return;
    }
    side_read(s, 0, 0);
    if (side_shutdown(s, 0, on_shutdown) < 0) {
        sl_session_close(s);
        return;
    }
    s->state = SL_SESS_LINGER; /* no reads until the shutdown completes */
}

void sl_session_drain(struct sl_session *s)
{
    if (s->state == SL_SESS_CONNECTING) {
        sl_session_close(s);
        return;
    }
    if (s->state != SL_SESS_RELAY)
        return;
    s->draining = 1;
    if (!s->proto->framed)
        return; /* raw TCP has no request boundary: it runs on until the grace ends */
    sl_sess_pause(s, 0, SL_PAUSE_DONE, 1);
    sl_sess_drain_check(s);
}

/* ---- reads -------------------------------------------------------------------- */

static void on_upstream_shutdown(uv_shutdown_t *req, int status)
{
    (void)status;
    free(req);
}

/* <nread> bytes landed at the end of s->cin (or EOF, an error): the one way
 * the client's bytes come in. */
static void client_got(struct sl_session *s, ssize_t nread)
{
    if (nread < 0) {
        if (nread != UV_EOF) {
            sl_session_close(s);
            return;
        }
        /* Half-close travels on: the upstream sees our FIN after the last
         * request, and what it answers still reaches the client. */
        s->cl_eof = 1;
        sl_sess_pause(s, 0, SL_PAUSE_DONE, 1);
        if (s->link != NULL) {
            /* Pooled: no half-close can travel on a shared connection. The
             * replies owed still go out, then the session ends (a partial
             * request is dropped, as Redis drops one cut by a close); the
             * protocol may end it at once (a client blocked or subscribed
             * on a connection of its own, which Redis would close). */
            (void)s->proto->client_eof(s);
            if (s->state >= SL_SESS_CLOSED)
                return;
            if (s->cin != NULL)
                s->cin->start = s->cin->end = 0;
            sl_sess_rx_release(&s->cin);
            s->draining = 1;
            sl_sess_drain_check(s);
            return;
        }
        int how = s->proto->client_eof(s);
        if ((how & SL_EOF_FORWARD) && s->cin && s->cin->end > s->cin->start) {
            sl_sess_to_upstream(s, s->cin, s->cin->start, s->cin->end);
            s->cin->start = s->cin->end;
        }
        if (s->state >= SL_SESS_CLOSED)
            return;
        sl_sess_rx_release(&s->cin);
        sess_flush(s);
        /* the protocol ended the session, or will once its requests are
         * answered (the upstream must not see a half-close before them) */
        if (s->state >= SL_SESS_FLUSHING || (how & SL_EOF_KEEP))
            return;
        if (side_shutdown(s, 1, on_upstream_shutdown) < 0)
            sl_session_close(s);
        return;
    }
    struct sl_buf *b = s->cin;
    b->end += (uint32_t)nread;
    s->l->stats.bytes_in += (uint64_t)nread;
    sl_tq_touch(&s->l->active, &s->tq, sl_sess_now_ms(s));
    sl_sess_meter_read(s, 0, (size_t)nread);
    if (s->state >= SL_SESS_CLOSED)
        return;
    s->proto->client_in(s, b, (size_t)nread);
    sess_flush(s); /* one write per side for all this read brought */
    if (s->state < SL_SESS_CLOSED) {
        sl_sess_rx_release(&s->cin);
        s->proto->release(s);
    }
}

/* <nread> bytes landed at the end of s->uin (or EOF, an error): the one way
 * the upstream's bytes come in. */
static void upstream_got(struct sl_session *s, ssize_t nread)
{
    if (nread < 0) {
        /* Everything the upstream sent is already on its way to the client;
         * close once it has left. */
        sl_log_debug("upstream closed", "listener=%s err=%s", s->l->name, uv_strerror((int)nread));
        sl_sess_rx_release(&s->uin);
        s->proto->upstream_eof(s, (int)nread);
        sess_flush(s);
        return;
    }
    struct sl_buf *b = s->uin;
    b->end += (uint32_t)nread;
    s->l->stats.bytes_out += (uint64_t)nread;
    sl_tq_touch(&s->l->active, &s->tq, sl_sess_now_ms(s));
    sl_sess_meter_read(s, 1, (size_t)nread);
    if (s->state >= SL_SESS_CLOSED) {
        b->start = b->end;
        return;
    }
    s->proto->upstream_in(s, b);
    sess_flush(s); /* one write per side for all this read brought */
    if (s->state < SL_SESS_CLOSED) {
        sl_sess_rx_release(&s->uin);
        sl_sess_drain_check(s);
    }
}

/* A piece [from, to) of <b> the pooled engine read for <s>: as a read of
 * its own upstream socket (counted, metered, framed by the protocol), the
 * chunk lent for the call. Refused (nonzero) when the client does not read
 * its replies: past upstream_pool_client_buffer it is closed, so that one
 * slow reader never holds a shared connection's replies (net/upool.h). */
int sl_sess_link_got(struct sl_session *s, struct sl_buf *b, uint32_t from, uint32_t to,
                     unsigned flags)
{
    (void)flags;
    if (s->state >= SL_SESS_FLUSHING)
        return 1; /* nothing more goes to it: its replies are dropped */
    if (side_queued(s, 0) + sl_outbuf_held(&s->out[0]) > s->l->conf->pool_client_buffer) {
        s->l->stats.pool_slow_closed++;
        sl_log_debug_rl("pool_client_buffer", "client closed: replies past upstream_pool_client_buffer",
                        "listener=%s", s->l->name);
        sl_session_close(s);
        return 1;
    }
    uint32_t n = to - from;
    s->l->stats.bytes_out += n;
    sl_tq_touch(&s->l->active, &s->tq, sl_sess_now_ms(s));
    sl_sess_meter_read(s, 1, n);
    if (s->state >= SL_SESS_CLOSED)
        return 1;
    uint32_t os = b->start, oe = b->end;
    b->start = from;
    b->end = to;
    s->proto->upstream_in(s, b);
    b->start = os;
    b->end = oe;
    if (s->state >= SL_SESS_CLOSED)
        return 1;
    sl_sess_drain_check(s);
    return s->state >= SL_SESS_CLOSED;
}

/* Plain TCP: libuv read into the chunks (alloc_client, alloc_upstream). */
static void on_client_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *ub)
{
    (void)ub;
    if (nread != 0)
        client_got(st->data, nread);
}

static void on_upstream_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *ub)
{
    (void)ub;
    if (nread == 0)
        return;
    if (st->data == NULL) /* kept (net/upkeep.c): closed, reset or talking while idle */
        sl_upkeep_lost((uv_tcp_t *)st);
    else
        upstream_got(st->data, nread);
}

/* ---- accept and connect ------------------------------------------------------- */

static void upstream_ready(struct sl_session *s);

static void upstream_failed(struct sl_session *s, int err)
{
    if (err == UV_EMFILE || err == UV_ENFILE) {
        /* Not the upstream's fault: sluice is out of descriptors. Counted
         * and logged (at a rate) as a refused connection. */
        sl_listener_refused_fd(s->l, err);
        sl_sess_answer_close(s, SL_ANSWER_NO_FD, NULL);
        return;
    }
    s->l->stats.upstream_failed++;
    sl_log_warn_rl("upstream_unavailable", "upstream unavailable", "listener=%s upstream=%s err=%s",
                   s->l->name, s->l->conf->upstream.text, sl_strerror(err));
    sl_sess_answer_close(s, SL_ANSWER_UPSTREAM_DOWN, NULL);
}

static void on_connect(uv_connect_t *req, int status)
{
    struct sl_session *s = req->data;
    free(req);
    if (s->state != SL_SESS_CONNECTING)
        return; /* closed meanwhile (status is UV_ECANCELED) */
    if (status < 0) {
        close_upstream(s);
        s->up_up = 0;
        upstream_failed(s, status);
        return;
    }
    uv_tcp_nodelay(s->up_tcp, 1);
    s->l->stats.upstream_connects++;
    if (s->l->conf->upstream_proxy_protocol && sl_sess_pp_upstream(s) < 0) /* before TLS */
        return;
    if (s->l->up_tls != NULL) {
        /* The handshake runs within connect_timeout: the session stays in
         * l->connecting until it is done (upstream_tls_done). */
        s->tls[1] = sl_tls_new(s->l->up_tls, s->l->up_sni[0] ? s->l->up_sni : NULL);
        if (s->tls[1] == NULL) {
            sl_session_close(s);
            return;
        }
        s->tls_hs[1] = 1;
        sl_sess_tls_pump(s, 1);
        return;
    }
    upstream_ready(s);
}

static void upstream_ready(struct sl_session *s)
{
    s->state = SL_SESS_RELAY;
    sl_tq_touch(&s->l->active, &s->tq, sl_sess_now_ms(s));
    sl_sess_pause(s, 1, SL_PAUSE_CONNECT, 0);
    sl_sess_pause(s, 0, SL_PAUSE_CONNECT, 0);
    if (s->up_kept == 2)
        sl_sess_resume_later(s); /* the request the failed one lost goes again */
}

static void upstream_tls_done(struct sl_session *s, int ok)
{
    if (s->state != SL_SESS_CONNECTING)
        return;
    if (ok) {
        int resumed = sl_tls_resumed(s->tls[1]);
        s->l->stats.upstream_tls_resumed += (uint64_t)resumed;
        sl_log_debug("upstream TLS up", "listener=%s version=%s resumed=%d", s->l->name,
                     sl_tls_version(s->tls[1]), resumed);
        upstream_ready(s);
        return;
    }
    sl_log_warn_rl("upstream_tls", "upstream TLS handshake failed", "listener=%s upstream=%s err=\"%s\"",
                   s->l->name, s->l->conf->upstream.text, sl_tls_error(s->tls[1]));
    close_upstream(s);
    s->up_up = 0;
    upstream_failed(s, SL_EPROTO);
}

/* Connects the upstream socket of <s> to the listener's address now. */
static void connect_now(struct sl_session *s)
{
    struct sl_listener *l = s->l;
    uv_loop_t *loop = l->handle.loop;
    if (l->up.ss.ss_family == AF_UNSPEC) {
        upstream_failed(s, UV_EAI_NONAME); /* a name that does not resolve (yet) */
        return;
    }
    uv_connect_t *req = malloc(sizeof(*req));
    uv_tcp_t *t = req ? sl_upconn_new(loop) : NULL;
    int rc = t ? 0 : UV_ENOMEM;
    if (rc == 0) {
        t->data = s;
        s->up_tcp = t;
        s->up_up = 1;
        s->handles++;
        req->data = s;
        rc = uv_tcp_connect(req, t, (const struct sockaddr *)&l->up.ss, on_connect);
    }
    if (rc < 0) {
        free(req);
        if (s->up_up) {
            close_upstream(s);
            s->up_up = 0;
        }
        upstream_failed(s, rc);
    }
}

/* Starts the upstream connection of an admitted session. An upstream name
 * whose answer is older than resolve_ttl is looked up again (off the loop);
 * the session connects meanwhile to the last good address, or, with
 * resolve_ttl = 0, waits for the answer (sl_session_resolved). */
void sl_sess_connect_upstream(struct sl_session *s)
{
    struct sl_listener *l = s->l;
    uv_loop_t *loop = l->handle.loop;
    sl_tq_touch(&l->connecting, &s->tq, sl_turn_now_ms());
    if (sl_sess_meters_init(s) < 0) {
        sl_session_close(s);
        return;
    }
    if (l->conf->upstream_keepalive > 0 && upstream_adopt(s))
        return;
    if (l->conf->upstream_pool > 0 && s->proto->link_open != NULL) {
        /* Pooled: no connection of its own; the listener's engine connects
         * when the first request goes (a failure then answers it). A stale
         * name is looked up, not waited for: sl_session_pool_reconf. */
        if (sl_resolve_stale(&l->up, uv_now(loop), l->conf->resolve_ttl_us) ||
            l->up.ss.ss_family == AF_UNSPEC)
            (void)sl_resolve_start(&l->up, loop);
        if (s->proto->link_open(s) < 0) {
            sl_session_close(s);
            return;
        }
        upstream_ready(s);
        return;
    }
    uint64_t ttl = l->conf->resolve_ttl_us;
    /* A name with no address yet (not resolved at load): each new client
     * waits for a lookup (one at a time, shared) before it connects. */
    int none = l->up.ss.ss_family == AF_UNSPEC && l->up.name[0] != '\0';
    if ((none || sl_resolve_stale(&l->up, uv_now(loop), ttl)) && sl_resolve_start(&l->up, loop) < 0)
        sl_log_debug("upstream lookup not started", "listener=%s", l->name);
    if ((ttl == 0 || none) && l->up.req != NULL) {
        s->resolving = 1; /* connect_timeout still runs (sweep) */
        return;
    }
    connect_now(s);
}

void sl_session_resolved(struct sl_listener *l)
{
    struct sl_tq_node *n = l->connecting.head;
    while (n != NULL) {
        struct sl_tq_node *next = n->next; /* connect_now may move or close it */
        struct sl_session *s = sl_session_of(n);
        if (s->resolving && s->state == SL_SESS_CONNECTING) {
            s->resolving = 0;
            connect_now(s);
        }
        n = next;
    }
}

static void accept_rest(struct sl_session *s);
static void client_tls_done(struct sl_session *s, int ok);

void sl_session_accept(struct sl_listener *l)
{
    uv_loop_t *loop = l->handle.loop;
    /* The protocol's own state follows the session in the same allocation
     * (rounded so it is aligned for anything). */
    const struct sl_sess_proto *proto = sl_sess_proto_of(l);
    size_t al = _Alignof(max_align_t), head = (sizeof(struct sl_session) + al - 1) / al * al;
    struct sl_session *s = calloc(1, head + proto->state_size);
    if (s == NULL)
        return;
    s->pstate = proto->state_size > 0 ? (char *)s + head : NULL;
    uv_tcp_init(loop, &s->client);
    s->client.data = s;
    s->l = l;
    s->handles = 1;
    sl_outbuf_init(&s->out[0], side_write, s);
    sl_outbuf_init(&s->out[1], side_write, s);
    s->proto = proto;
    l->sessions++;
    l->stats.conns_active++;
    if (uv_accept((uv_stream_t *)&l->handle, (uv_stream_t *)&s->client) < 0) {
        sl_session_close(s);
        return;
    }
    l->stats.conns_accepted++;
    sl_usage_open(s);
    if (l->stats.conns_active > l->conf->max_connections) {
        /* Accepted and then refused, as Redis does: the client learns why
         * (over TLS it would take a handshake first: closed at once). */
        sl_log_warn_rl("max_connections", "max_connections reached", "listener=%s max=%llu",
                       l->name, (unsigned long long)l->conf->max_connections);
        l->stats.conns_refused++;
        if (l->tls != NULL)
            sl_session_close(s);
        else
            sl_sess_answer_close(s, SL_ANSWER_MAX_CLIENTS, NULL);
        return;
    }
    s->cl_pause = SL_PAUSE_CONNECT;
    if (l->conf->proxy_protocol != 0)
        sl_sess_pp_start(s); /* the header first, then sl_sess_accepted */
    else
        sl_sess_accepted(s);
}

void sl_sess_accepted(struct sl_session *s)
{
    struct sl_listener *l = s->l;
    if (l->tls != NULL) {
        /* The handshake comes first, within header_timeout (the sweep):
         * the identity may be the client certificate's name. */
        if (!l->nodelay)
            uv_tcp_nodelay(&s->client, 1);
        s->tls[0] = sl_tls_new(l->tls, NULL);
        if (s->tls[0] == NULL) {
            sl_session_close(s);
            return;
        }
        s->tls_hs[0] = 1;
        sl_tq_touch(&l->handshaking, &s->tq, sl_turn_now_ms());
        sl_sess_tls_sync_read(s, 0);
        return;
    }
    accept_rest(s);
}

static void client_tls_done(struct sl_session *s, int ok)
{
    struct sl_listener *l = s->l;
    if (!ok) {
        l->stats.tls_handshake_failures++;
        sl_log_warn_rl("tls_handshake", "TLS handshake with a client failed", "listener=%s err=\"%s\"",
                       l->name, s->tls[0] ? sl_tls_error(s->tls[0]) : "");
        sl_session_close(s);
        return;
    }
    sl_tq_remove(&s->tq);
    if (sl_tls_peer_verified(s->tls[0]) && sl_identity_uses(l->conf, SL_ID_TLS_SUBJECT)) {
        /* The whole name or no connection: a name that would read as
         * another (a NUL inside, two CNs) must not be charged as anyone. */
        char *name = NULL;
        const char *why = NULL;
        ssize_t n = sl_tls_peer_id(s->tls[0], &name, &why);
        if (n == SL_EPROTO) {
            l->stats.tls_identity_refused++;
            sl_log_warn_rl("tls_identity", "client certificate refused as an identity",
                           "listener=%s err=\"%s\" name=\"%s\"", l->name, why,
                           sl_tls_peer_name(s->tls[0]));
        }
        if (n < 0 || (n > 0 && sl_sess_ident(s) == NULL)) {
            free(name);
            sl_session_close(s);
            return;
        }
        if (n > 0)
            sl_identity_set_tls(s->ident, name, (size_t)n);
        free(name);
    }
    sl_log_debug("client TLS up", "listener=%s version=%s alpn=%s", l->name, sl_tls_version(s->tls[0]),
                 sl_tls_alpn(s->tls[0]));
    accept_rest(s);
}

/* The rest of an accept: the session starts (after the TLS handshake). */
static void accept_rest(struct sl_session *s)
{
    struct sl_listener *l = s->l;
    s->up_pause = SL_PAUSE_CONNECT;
    s->id = ++l->srv->next_conn;
    s->proto->init(s);
    if (!l->nodelay) /* else inherited from the listening socket */
        uv_tcp_nodelay(&s->client, 1);

    /* Connection limits: a place first (maybe after the login queue). */
    struct sl_meter_plan cp;
    if (sl_limiter_plan(l->srv->limiter, l->conf, SL_METRIC_CONNECTIONS, &cp) && sl_sess_ident(s) != NULL &&
        (s->place = sl_place_new(l->srv->limiter, l->conf, s->ident, s->id)) != NULL) {
        s->gate_until = sl_sess_waits_now() + cp.max_delay_us;
        sl_tq_touch(&l->gated, &s->tq, sl_turn_now_ms());
        sl_sess_gate_try(s);
        return;
    }
    sl_sess_connect_upstream(s);
}

/* ---- for the sweep (sess_sweep.c) ---------------------------------------- */

void sl_sess_connect_timed_out(struct sl_session *s)
{
    if (s->up_up) /* not made yet while waiting for a lookup */
        close_upstream(s);
    s->up_up = 0;
    s->resolving = 0;
    s->state = SL_SESS_RELAY; /* on_connect (cancelled) must not act */
    upstream_failed(s, UV_ETIMEDOUT);
}

/* For the TLS transport (sess_tls.c): bytes (or EOF, an error) decrypted
 * for side <up>, and the end of its handshake. */
void sl_sess_got(struct sl_session *s, int up, ssize_t nread)
{
    if (up)
        upstream_got(s, nread);
    else
        client_got(s, nread);
}

void sl_sess_tls_done(struct sl_session *s, int up, int ok)
{
    if (up)
        upstream_tls_done(s, ok);
    else
        client_tls_done(s, ok);
}

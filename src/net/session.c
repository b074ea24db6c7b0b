/* sluice — a session: one client connection and its own upstream connection.
 *
 *            client socket                                upstream socket
 *   read --> cin chunk --> framer (resp) --> requests --> write (same bytes)
 *                               |                |
 *                               |   reply queue: n upstream replies, then a
 *                               |   local reply (protocol error, rejection)
 *                               v                v
 *   write <-- uin chunk <-- reply scanner <-- read
 *
 * Bytes are never copied on the way through: a read lands in a pooled chunk,
 * the framer finds request boundaries, and the bytes of complete requests are
 * written from that same chunk (uv_try_write first; what the kernel does not
 * take at once is queued with a reference on the chunk). A partial request
 * stays in the chunk until it is complete (so a later issue can still reject
 * it) unless it grows past SL_STREAM_AT, when it is committed and streamed.
 *
 * Backpressure: when one side's write queue passes HIGH_WATER, the other side
 * stops being read; below LOW_WATER it is read again. Requests awaiting
 * replies are capped too (max_replies_owed), so a client that pipelines without
 * reading replies stalls on TCP, not in our memory.
 *
 * Replies: the scanner finds reply ends; each non-push reply pays one owed
 * reply; local replies wait in the queue for their turn. Pub/sub and MONITOR
 * switch to pass-through, where replies are no longer matched.
 *
 * Closing: upstream EOF -> flush to the client -> shut down -> linger (read
 * and discard until the client's EOF, so a close never turns into an RST that
 * would destroy replies still in flight); client EOF -> shut the upstream
 * down for writing and keep relaying its replies until it closes. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/log.h"
#include "core/pool.h"
#include "identity/identity.h"
#include "limit/limiter.h"
#include "net/listener.h"
#include "net/session.h"
#include "proto/resp.h"
#include "proto/resp_conn.h"
#include "proto/resp_reply.h"
#include "shape/meter.h"
#include "shape/wait.h"

#define HIGH_WATER   (4 * SL_BUF_SIZE)
#define LOW_WATER    (SL_BUF_SIZE)
#define MIN_READ     (8 * 1024)      /* smaller room than this: take a fresh chunk */
#define SL_STREAM_AT (16 * 1024)     /* a partial request this big is committed */
#define LINGER_MS    2000            /* how long a lingering close waits for EOF */
#define PEND_MAX     256             /* requests in order behind an undecided one */

/* A queued write: holds the chunk its bytes live in, or carries a copy. */
struct wreq {
    uv_write_t     req;     /* req.data = session */
    struct sl_buf *buf;     /* referenced chunk, or NULL when <data> holds the bytes */
    char           data[];  /* copied bytes (local replies only) */
};

static void on_client_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *ub);
static void on_upstream_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *ub);
static void emit_ready_locals(struct sl_session *s);
static void resume_later(struct sl_session *s);
static void finish(struct sl_session *s);

struct sl_session *sl_session_of(struct sl_tq_node *n)
{
    return (struct sl_session *)((char *)n - offsetof(struct sl_session, tq));
}

static uint64_t now_ms(struct sl_session *s)
{
    return uv_now(s->client.loop);
}

/* ---- framers ---------------------------------------------------------------- */

/* Framers (with their hiredis readers) are lent to sessions only while a
 * request is being read, so an idle connection holds none; a small pool
 * makes the lending two pointer moves instead of malloc + free per read. */
#define FRAMER_POOL 64
static struct sl_resp *framer_pool[FRAMER_POOL];
static unsigned framer_pooled;

static struct sl_resp *framer_take(uint64_t max_request)
{
    struct sl_resp *f;
    if (framer_pooled > 0) {
        f = framer_pool[--framer_pooled];
        if (sl_resp_reuse(f, max_request) == 0)
            return f;
    } else if ((f = malloc(sizeof(*f))) != NULL) {
        if (sl_resp_init(f, max_request) == 0)
            return f;
    }
    free(f);
    return NULL;
}

static void framer_give(struct sl_resp *f)
{
    if (framer_pooled < FRAMER_POOL && sl_resp_idle(f) && f->err[0] == '\0') {
        framer_pool[framer_pooled++] = f;
        return;
    }
    sl_resp_free(f);
    free(f);
}

/* Verdict rings likewise: a session whose requests wait for the store
 * takes one per batch. */
static struct sl_pool ring_pool = SL_POOL_INIT(PEND_MAX * sizeof(struct sl_pend), 16);

/* Sessions whose verdicts landed this loop turn (see resume_later). */
static struct sl_session **resume_list;
static uint32_t            resume_n, resume_cap;

void sl_session_pool_drain(void)
{
    while (framer_pooled > 0) {
        struct sl_resp *f = framer_pool[--framer_pooled];
        sl_resp_free(f);
        free(f);
    }
    sl_pool_drain(&ring_pool);
    free(resume_list);
    resume_list = NULL;
    resume_n = resume_cap = 0;
}

/* The session's framer goes back when nothing of a request is left in it. */
static void framer_release_if_idle(struct sl_session *s)
{
    if (s->framer != NULL && s->pend_n == 0 && s->req_fwd == 0 && s->head_state == 0 &&
        sl_resp_idle(s->framer)) {
        framer_give(s->framer);
        s->framer = NULL;
    }
    if (s->pend != NULL && s->pend_n == 0) {
        sl_pool_give(&ring_pool, s->pend);
        s->pend = NULL;
        s->pend_head = 0;
    }
}

/* ---- chunks --------------------------------------------------------------- */

/* Returns the chunk in <*slot> with at least MIN_READ bytes of room, taking a
 * new one (and moving unconsumed bytes into it) when needed; NULL on OOM. */
static struct sl_buf *rx_chunk(struct sl_buf **slot)
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
static void rx_release(struct sl_buf **slot)
{
    struct sl_buf *b = *slot;
    if (b != NULL && b->start == b->end && b->refs == 1) {
        sl_buf_unref(b);
        *slot = NULL;
    }
}

/* A metered side reads no more than its credit (at least a byte: libuv
 * takes an empty buffer for an error), so a shaped transfer overshoots by
 * nothing. */
static unsigned room_of(struct sl_meter *m, unsigned len)
{
    if (m == NULL)
        return len;
    uint64_t room = sl_meter_room(m);
    if (room == 0)
        room = 1;
    return room < len ? (unsigned)room : len;
}

static void alloc_client(uv_handle_t *h, size_t hint, uv_buf_t *ub)
{
    (void)hint;
    struct sl_session *s = h->data;
    struct sl_buf *b = rx_chunk(&s->cin);
    *ub = b ? uv_buf_init(b->data + b->end, room_of(s->meter[0], SL_BUF_SIZE - b->end))
            : uv_buf_init(NULL, 0);
}

static void alloc_upstream(uv_handle_t *h, size_t hint, uv_buf_t *ub)
{
    (void)hint;
    struct sl_session *s = h->data;
    struct sl_buf *b = rx_chunk(&s->uin);
    *ub = b ? uv_buf_init(b->data + b->end, room_of(s->meter[1], SL_BUF_SIZE - b->end))
            : uv_buf_init(NULL, 0);
}

/* ---- reading on and off ------------------------------------------------- */

static void set_pause(struct sl_session *s, int upstream, uint8_t bit, int on)
{
    uint8_t *m = upstream ? &s->up_pause : &s->cl_pause;
    uint8_t old = *m;
    *m = on ? (uint8_t)(old | bit) : (uint8_t)(old & ~bit);
    /* Past FLUSHING the close path drives the sockets itself. */
    if ((old == 0) == (*m == 0) || s->state >= SL_SESS_LINGER)
        return;
    uv_stream_t *st = upstream ? (uv_stream_t *)&s->upstream : (uv_stream_t *)&s->client;
    if (*m != 0)
        uv_read_stop(st);
    else if (upstream)
        uv_read_start(st, alloc_upstream, on_upstream_read);
    else
        uv_read_start(st, alloc_client, on_client_read);
}

/* ---- writing ------------------------------------------------------------------ */

static void on_write(uv_write_t *req, int status)
{
    struct wreq *w = (struct wreq *)req;
    struct sl_session *s = req->data;
    uv_stream_t *dst = req->handle;
    if (w->buf != NULL)
        sl_buf_unref(w->buf);
    free(w);
    if (s->state >= SL_SESS_CLOSED)
        return;
    if (status < 0) {
        sl_log_debug("write failed", "listener=%s err=%s", s->l->name, uv_strerror(status));
        sl_session_close(s);
        return;
    }
    int to_upstream = dst == (uv_stream_t *)&s->upstream;
    if (dst->write_queue_size < LOW_WATER)
        set_pause(s, !to_upstream, SL_PAUSE_PEERQ, 0);
    if (!to_upstream && s->state == SL_SESS_FLUSHING && dst->write_queue_size == 0)
        finish(s);
}

/* Sends <len> bytes at <p> to <dst>. <b> is the chunk holding them (it gets a
 * reference while a write is queued), or NULL for bytes that must be copied
 * if the kernel does not take them at once. Returns 0 or a libuv error. */
static int send_bytes(struct sl_session *s, uv_stream_t *dst, struct sl_buf *b,
                      const char *p, size_t len)
{
    if (len == 0)
        return 0;
    uv_buf_t ub = uv_buf_init((char *)p, (unsigned)len);
    /* uv_try_write refuses (EAGAIN) while older writes are queued, so order
     * holds; when the queue is empty it saves a queued request and a loop
     * turn, which is most of the cost of a small pipelined reply. */
    if (dst->write_queue_size == 0) {
        int n = uv_try_write(dst, &ub, 1);
        if (n == (int)len)
            return 0;
        if (n > 0) {
            ub.base += n;
            ub.len -= (size_t)n;
        } else if (n != UV_EAGAIN) {
            return n;
        }
    }
    struct wreq *w = malloc(sizeof(*w) + (b ? 0 : ub.len));
    if (w == NULL)
        return UV_ENOMEM;
    w->buf = b;
    if (b != NULL) {
        sl_buf_ref(b);
    } else {
        memcpy(w->data, ub.base, ub.len);
        ub.base = w->data;
    }
    w->req.data = s;
    int rc = uv_write(&w->req, dst, &ub, 1, on_write);
    if (rc < 0) {
        if (b != NULL)
            sl_buf_unref(b);
        free(w);
        return rc;
    }
    if (dst->write_queue_size > HIGH_WATER)
        set_pause(s, dst == (uv_stream_t *)&s->client, SL_PAUSE_PEERQ, 1);
    return 0;
}

static void to_upstream(struct sl_session *s, struct sl_buf *b, uint32_t from, uint32_t to)
{
    if (to > from && send_bytes(s, (uv_stream_t *)&s->upstream, b, b->data + from, to - from) < 0)
        sl_session_close(s);
}

static void to_client(struct sl_session *s, struct sl_buf *b, uint32_t from, uint32_t to)
{
    if (to > from && send_bytes(s, (uv_stream_t *)&s->client, b, b->data + from, to - from) < 0)
        sl_session_close(s);
}

/* ---- the reply queue ------------------------------------------------------ */

static void owe(struct sl_session *s, uint32_t n)
{
    s->owed_total += n;
    s->tail_n += n;
    s->inflight += n;
    if (s->inflight >= s->l->conf->max_replies_owed)
        set_pause(s, 0, SL_PAUSE_INFLIGHT, 1);
}

static void paid(struct sl_session *s)
{
    s->inflight--;
    /* Read again once half are delivered (a reload may have moved the
     * cap), and frame what was read and held meanwhile. */
    if ((s->cl_pause & SL_PAUSE_INFLIGHT) && s->inflight <= s->l->conf->max_replies_owed / 2) {
        set_pause(s, 0, SL_PAUSE_INFLIGHT, 0);
        /* also when nothing is left unframed: process() paused reading
         * (DECIDE) when it stopped at the cap, and resume() lifts that */
        resume_later(s);
    }
}

/* Draining: once every reply owed has been sent on, the session is done.
 * Called after a read's bytes left, never from inside the reply loop (the
 * last reply would be cut off). */
static void drain_check(struct sl_session *s)
{
    if (s->draining && s->resp && s->inflight == 0 && s->pend_n == 0 && s->state == SL_SESS_RELAY)
        finish(s);
}

/* Queues the local reply <text> (RESP, <len> bytes) after every reply owed so
 * far. <flags>: SL_SEG_OWNED (free <text> after), SL_SEG_CLOSE. */
static void queue_local(struct sl_session *s, char *text, uint32_t len, uint8_t flags)
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
    s->inflight++;
    emit_ready_locals(s);
}

/* Sends every local reply whose turn has come: its upstream replies have all
 * passed and the scanner is not inside an upstream reply. */
static void emit_ready_locals(struct sl_session *s)
{
    while (s->seg_n > 0 && s->state < SL_SESS_FLUSHING) {
        struct sl_reply_seg *g = &s->segs[s->seg_head];
        if (g->n > 0 || !sl_reply_idle(&s->scan))
            return;
        if (g->flags & SL_SEG_UNSUB) {
            /* Every confirmation before it has come: the connection's
             * count is known, and is how many this one brings (at least
             * one: "unsubscribe", nil, count when there was none). */
            uint32_t k = sl_rconn_unsub_due(&s->rc, g->len);
            g->flags = SL_SEG_MARK;
            g->len = 0;
            g->n = k;
            s->inflight += k;
            continue;
        }
        uint8_t flags = g->flags;
        int rc = g->len > 0 ? send_bytes(s, (uv_stream_t *)&s->client, NULL, g->text, g->len) : 0;
        if (flags & SL_SEG_OWNED)
            free(g->text);
        s->seg_head = (s->seg_head + 1) % s->seg_cap;
        s->seg_n--;
        if (flags & SL_SEG_MARK)
            sl_rconn_mark_gone(&s->rc);
        if (rc < 0) {
            sl_session_close(s);
            return;
        }
        if (flags & SL_SEG_CLOSE) {
            finish(s);
            return;
        }
        paid(s);
    }
}

/* The listener's limits are told apart by AUTH user: what follows an AUTH
 * is charged to whoever its answer makes the client. */
static int auth_matters(const struct sl_session *s)
{
    const struct sl_listener_conf *lc = s->l->conf;
    if (!s->l->limited)
        return 0;
    for (int i = 0; i < lc->n_identity; i++)
        if (lc->identity[i] == SL_ID_RESP_USER)
            return 1;
    return 0;
}

/* Framing is held behind an AUTH whose answer is still to come: sent, or
 * waiting in the ring to be sent. Queued in a transaction, the answer is in
 * EXEC's reply: the MULTI's commands go on until an EXEC is framed. */
static int auth_waits(const struct sl_session *s)
{
    return s->auth_hold && s->auth_next != NULL &&
           (s->auth_seq != 0 || !s->auth_in_multi || s->auth_exec_framed);
}

/* The AUTH candidate is settled or void: forget it, and let framing go on. */
static void auth_drop(struct sl_session *s)
{
    free(s->auth_next);
    s->auth_next = NULL;
    free(s->auth_pick);
    s->auth_pick = NULL;
    s->auth_seq = 0;
    s->auth_in_multi = 0;
    s->auth_exec_framed = 0;
}

/* Requests already read wait unframed: behind an AUTH's answer, or while
 * the client owes reading max_replies_owed replies (a read holds thousands
 * of small requests: framing them all would send them all upstream). */
static int frame_held(const struct sl_session *s)
{
    return auth_waits(s) || s->inflight >= s->l->conf->max_replies_owed;
}

/* Framing was held and need not be any more: go on at the end of the turn. */
static void auth_wake(struct sl_session *s)
{
    if (s->auth_hold && !auth_waits(s)) {
        s->auth_hold = 0;
        resume_later(s);
    }
}

/* One non-push upstream reply has ended. Returns 1 when local replies are
 * now due (the caller flushes the upstream bytes before them). */
/* A reply paid what was owed: if it answers a pending AUTH and is not an
 * error, the client is now who that AUTH said. */
static void paid_one(struct sl_session *s)
{
    s->paid_total++;
    if (s->auth_next != NULL && s->paid_total == s->auth_seq) {
        /* Inside a transaction the AUTH's own element of EXEC's reply
         * says; +QUEUED said nothing. */
        uint8_t first = s->auth_pick != NULL ? s->auth_pick->found : s->reply_first;
        if (first != 0 && first != '-' && first != '!')
            *s->ident = *s->auth_next;
        auth_drop(s);
        auth_wake(s);
    }
    paid(s);
}

static int reply_ended(struct sl_session *s)
{
    if (s->seg_n > 0) {
        struct sl_reply_seg *g = &s->segs[s->seg_head];
        if (g->n == 0)
            return 1; /* unsolicited (pub/sub): locals waited for the boundary */
        g->n--;
        if (g->flags & SL_SEG_MARK)
            paid(s); /* an unsubscribe-all's: not in owed_total */
        else
            paid_one(s);
        return g->n == 0;
    }
    if (s->tail_n > 0) {
        s->tail_n--;
        paid_one(s);
    }
    return 0;
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

/* ---- requests (resp) ---------------------------------------------------------- */


/* A request sluice refuses: how many replies the client expects for it
 * (the rejection goes in their place); under CLIENT REPLY SKIP a PING
 * takes its place upstream (see sl_rconn_refused). */
static uint32_t refused(struct sl_session *s)
{
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    int send_ping;
    uint32_t n = sl_rconn_refused(&s->rc, &send_ping);
    if (send_ping && send_bytes(s, (uv_stream_t *)&s->upstream, NULL, ping, sizeof(ping) - 1) < 0)
        sl_session_close(s);
    return n;
}

/* A reply that is not a confirmation came: every unsubscribe-all ahead of
 * it in the reply queue has had all its confirmations (Redis sends them
 * before it answers the next command), whatever count was expected (a
 * count gone stale, an error instead). Returns 1 if one was cut short. */
static int settle_marks(struct sl_session *s)
{
    if (s->seg_n == 0)
        return 0;
    struct sl_reply_seg *g = &s->segs[s->seg_head];
    if (!(g->flags & SL_SEG_MARK) || g->n == 0)
        return 0;
    s->inflight -= g->n;
    sl_rconn_settled(&s->rc, g->n);
    g->n = 0;
    return 1;
}

/* ---- verdicts, in request order ------------------------------------------- */

/* A request goes upstream: what it changes in the connection's model, and
 * the replies it is owed. An unsubscribe of everything queues the marker
 * that counts its confirmations when its turn comes. */
static uint32_t commit(struct sl_session *s, uint8_t fx, uint32_t nchan)
{
    int unsub;
    uint32_t n = sl_rconn_commit(&s->rc, fx, nchan, &unsub);
    if (unsub >= 0)
        queue_local(s, NULL, (uint32_t)unsub, SL_SEG_UNSUB);
    return n;
}

/* Bookkeeping for a request that goes upstream. */
static void allowed(struct sl_session *s, int kind, uint32_t replies)
{
    if (kind == SL_PK_EXEC || kind == SL_PK_DISCARD || kind == SL_PK_RESET) {
        if (s->auth_in_multi && s->auth_next != NULL) {
            /* An AUTH queued in the transaction counts by its element of
             * EXEC's reply; DISCARD and RESET drop it unrun. */
            if (kind == SL_PK_EXEC && s->rc.in_multi && replies == 1 &&
                (s->auth_pick != NULL || (s->auth_pick = malloc(sizeof(*s->auth_pick))) != NULL)) {
                s->auth_seq = s->owed_total + 1;
                s->auth_exec_framed = 0;
            } else {
                auth_drop(s);
            }
        }
    } else if (kind == SL_PK_AUTH && s->auth_next != NULL) {
        if (s->rc.in_multi) {
            s->auth_in_multi = 1; /* +QUEUED says nothing */
            s->auth_elem = s->rc.multi_queued;
        } else if (replies == 1) {
            s->auth_seq = s->owed_total + 1;
        } else {
            auth_drop(s); /* no reply to judge by */
        }
    }
    sl_rconn_allowed(&s->rc, kind, replies);
    if (replies > 0)
        owe(s, replies);
    auth_wake(s);
}

/* A rejected request: its reply is the rejection, in its place. Inside a
 * MULTI it also dooms the EXEC, as a queuing error does in Redis. */
static void rejected(struct sl_session *s, char *text, uint32_t len, uint32_t replies)
{
    s->l->stats.rejected++;
    sl_rconn_rejected(&s->rc);
    if (replies > 0 && text != NULL)
        queue_local(s, text, len, SL_SEG_OWNED);
    else
        free(text);
}

/* EXEC after a rejection inside MULTI: DISCARD goes upstream instead (the
 * transaction must end there too), and its +OK is replaced by EXECABORT. */
static void exec_abort(struct sl_session *s, uint32_t replies)
{
    static const char discard[] = "*1\r\n$7\r\nDISCARD\r\n";
    static char abort_msg[] = "-EXECABORT Transaction discarded because of previous errors.\r\n";
    sl_rconn_exec_aborted(&s->rc);
    if (s->auth_in_multi && s->auth_next != NULL) {
        auth_drop(s); /* the transaction never runs */
        auth_wake(s);
    }
    s->l->stats.rejected++;
    if (send_bytes(s, (uv_stream_t *)&s->upstream, NULL, discard, sizeof(discard) - 1) < 0) {
        sl_session_close(s);
        return;
    }
    /* Under CLIENT REPLY OFF or SKIP, Redis does not answer the DISCARD
     * and the client expects nothing. */
    if (replies == 0)
        return;
    owe(s, 1);
    queue_local(s, abort_msg, sizeof(abort_msg) - 1, SL_SEG_SWALLOW);
}

static void process(struct sl_session *s);
static void resume(struct sl_session *s);
static void head_clock(struct sl_session *s);
static void on_verdict_sync(struct sl_pend *e, const struct sl_verdict *v);
static uint64_t waits_now(void);
static struct sl_ident_state *ident(struct sl_session *s);

/* ---- byte meters ---------------------------------------------------------- */

static struct sl_meter_ctx meter_ctx(struct sl_session *s)
{
    struct sl_meter_ctx c = { s->l->srv->limiter, s->l->conf, s->ident, s->id };
    return c;
}

/* A bytes limit with action = reject is in debt or said no: on resp,
 * plain requests must ask meter_gate before going upstream. */
static int meters_owe(const struct sl_session *s)
{
    return (s->meter[0] && sl_meter_owes(s->meter[0])) ||
           (s->meter[1] && sl_meter_owes(s->meter[1]));
}

/* May a request of <kind>, <span> bytes long, go upstream now? On
 * SL_METER_REFUSE, <v> says how; the request's bytes never go upstream, so
 * bytes_in gets them back. */
static int meter_gate(struct sl_session *s, int kind, uint32_t span, struct sl_verdict *v)
{
    if (kind != SL_PK_PLAIN) /* MULTI, EXEC, AUTH ... keep the connection's state whole */
        return SL_METER_GO;
    uint64_t now = waits_now();
    int hold = 0;
    for (int i = 0; i < 2; i++) {
        struct sl_meter *m = s->meter[i];
        if (m == NULL || !sl_meter_owes(m))
            continue;
        struct sl_meter_ctx c = meter_ctx(s);
        int g = sl_meter_gate(m, &c, now);
        if (g == SL_METER_REFUSE) {
            *v = *m->refusal;
            v->retry_after_us = m->refused_until_us - now;
            if (s->meter[0] != NULL)
                sl_meter_charge(s->meter[0], &c, -(int64_t)span, now);
            return SL_METER_REFUSE;
        }
        hold |= g == SL_METER_HOLD;
    }
    return hold ? SL_METER_HOLD : SL_METER_GO;
}

/* A meter's credit or refusal changed: read the side again, pause it, or
 * (tcp, reject) close. */
static void meter_shape(struct sl_meter *m)
{
    struct sl_session *s = m->owner;
    if (s->state >= SL_SESS_CLOSED)
        return;
    int up = m == s->meter[1];
    uint64_t room = sl_meter_room(m);
    if (!s->resp && room == 0 && sl_meter_refused(m, waits_now())) {
        s->l->stats.rejected++;
        sl_log_debug("bytes limit: closing", "listener=%s limit=%s", s->l->name,
                     m->refusal ? m->refusal->limit : "");
        sl_session_close(s);
        return;
    }
    set_pause(s, up, SL_PAUSE_SHAPE, room == 0);
}

/* The answer to a meter's take came (or a reservation fell due): shape,
 * and let a request held by the meter ask again. */
static void meter_changed(struct sl_meter *m)
{
    struct sl_session *s = m->owner;
    meter_shape(m);
    if (s->meter_hold && s->state < SL_SESS_FLUSHING) {
        s->meter_hold = 0;
        resume(s);
    }
}

/* <n> bytes were read from side <up>. */
static void meter_read(struct sl_session *s, int up, size_t n)
{
    struct sl_meter *m = s->meter[up];
    if (m == NULL)
        return;
    struct sl_meter_ctx c = meter_ctx(s);
    sl_meter_charge(m, &c, (int64_t)n, waits_now());
    meter_shape(m);
}

/* Sets up the session's meters (at connect); returns -1 when out of memory. */
static int meters_init(struct sl_session *s)
{
    if (s->l->srv->limiter == NULL)
        return 0;
    for (int i = 0; i < 2; i++) {
        struct sl_meter_plan p;
        if (!sl_limiter_plan(s->l->srv->limiter, s->l->conf,
                             i ? SL_METRIC_BYTES_OUT : SL_METRIC_BYTES_IN, &p))
            continue;
        if (ident(s) == NULL || (s->meter[i] = malloc(sizeof(struct sl_meter))) == NULL)
            return -1;
        struct sl_meter_ctx c = meter_ctx(s);
        sl_meter_init(s->meter[i], &c, i ? SL_METRIC_BYTES_OUT : SL_METRIC_BYTES_IN, s->resp,
                      meter_changed, s);
        sl_meter_charge(s->meter[i], &c, 0, waits_now()); /* the first take */
        if (sl_meter_room(s->meter[i]) == 0) {
            if (i)
                s->up_pause |= SL_PAUSE_SHAPE;
            else
                s->cl_pause |= SL_PAUSE_SHAPE;
        }
    }
    return 0;
}

/* Who the client is, set up the first time it matters (a limit applies, or
 * the client says who it is); NULL only when out of memory. */
static struct sl_ident_state *ident(struct sl_session *s)
{
    if (s->ident == NULL && (s->ident = malloc(sizeof(*s->ident))) != NULL) {
        struct sockaddr_storage peer;
        int plen = sizeof(peer);
        int ok = uv_tcp_getpeername(&s->client, (struct sockaddr *)&peer, &plen) == 0;
        sl_identity_init(s->ident, ok ? (struct sockaddr *)&peer : NULL);
    }
    return s->ident;
}

/* Learns who the client is from its request. AUTH and HELLO ... AUTH only
 * count once the upstream accepts them (else anyone could spend alice's
 * quota by sending a wrong password as alice): they prepare a candidate
 * that the reply makes real. */
static void observe(struct sl_session *s, const struct sl_resp_req *r, int kind)
{
    if (!sl_identity_learns(r) || ident(s) == NULL)
        return;
    if (kind != SL_PK_AUTH) {
        sl_identity_observe(s->ident, r);
        return;
    }
    if (s->auth_next == NULL && (s->auth_next = malloc(sizeof(*s->auth_next))) == NULL)
        return;
    *s->auth_next = *s->ident;
    sl_identity_observe(s->auth_next, r);
    s->auth_seq = 0; /* set when it is sent */
}

static void protocol_error(struct sl_session *s, const char *msg)
{
    s->l->stats.protocol_errors++;
    sl_log_debug("protocol error", "listener=%s err=\"%s\"", s->l->name, msg);
    set_pause(s, 0, SL_PAUSE_DONE, 1);
    if (s->rc.reply_mode != SL_REPLY_ON) {
        /* Under CLIENT REPLY OFF, or SKIP with the skip still to come,
         * Redis says nothing either. It then keeps the connection open but
         * reads no more of it; sluice closes it. */
        static char none[] = "";
        queue_local(s, none, 0, SL_SEG_CLOSE);
        return;
    }
    size_t n = strlen(msg);
    char *text = malloc(n + 7);
    if (text == NULL) {
        sl_session_close(s);
        return;
    }
    memcpy(text, "-ERR ", 5);
    memcpy(text + 5, msg, n);
    memcpy(text + 5 + n, "\r\n", 2);
    queue_local(s, text, (uint32_t)(n + 7), SL_SEG_OWNED | SL_SEG_CLOSE);
}

static uint64_t waits_now(void)
{
    return sl_waits_default ? sl_waits_default->now() : uv_hrtime() / 1000;
}

static struct sl_session *session_of_park(struct sl_wait *w)
{
    return (struct sl_session *)((char *)w - offsetof(struct sl_session, park));
}

static void on_park_due(struct sl_wait *w)
{
    resume(session_of_park(w));
}

/* Parks the session until <due_us>: reading stays paused (the ring is not
 * empty), one waiter in the process's heap wakes it. */
static void park_until(struct sl_session *s, uint64_t due_us)
{
    if (sl_waits_default == NULL || sl_wait_at(sl_waits_default, &s->park, due_us, on_park_due) < 0)
        sl_session_close(s); /* out of memory */
}

/* Applies, in order, every entry at the head of the ring whose verdict is
 * in; their bytes are at the start of the client chunk. */
static void apply(struct sl_session *s)
{
    if (s->pend_n == 0)
        return;
    struct sl_buf *b = s->cin;
    uint32_t from = b->start, to = b->start;
    while (s->pend_n > 0 && s->state < SL_SESS_FLUSHING) {
        /* Take the entry out first: what follows may close the session. */
        struct sl_pend e = s->pend[s->pend_head];
        if (e.state == SL_PEND_WAIT)
            break;
        if (e.state == SL_PEND_DELAY) {
            /* Parked: nothing behind it moves until its place comes. */
            if (e.due_us > waits_now()) {
                park_until(s, e.due_us);
                break;
            }
            e.state = SL_PEND_ALLOW;
        }
        if (e.state == SL_PEND_ALLOW && sl_rconn_sub_wait(&s->rc, e.fx, e.kind)) {
            s->pend[s->pend_head].state = SL_PEND_ALLOW; /* a delay is served */
            s->sub_hold = 1;
            break;
        }
        if (e.state == SL_PEND_ALLOW && e.kind == SL_PK_PLAIN && meters_owe(s)) {
            /* A reject byte limit is in debt: the request waits for the
             * take at the store, or is refused. */
            struct sl_verdict v;
            int g = meter_gate(s, e.kind, e.span, &v);
            if (g == SL_METER_HOLD) {
                s->meter_hold = 1;
                break;
            }
            if (g == SL_METER_REFUSE) {
                on_verdict_sync(&s->pend[s->pend_head], &v);
                e = s->pend[s->pend_head];
            }
        }
        s->pend[s->pend_head].text = NULL;
        s->pend_head = (s->pend_head + 1) % PEND_MAX;
        s->pend_n--;
        int forward = e.state == SL_PEND_ALLOW &&
                      !(e.kind == SL_PK_EXEC && s->rc.multi_dirty) &&
                      !(e.kind == SL_PK_TAIL && s->head_state == 2);
        if (e.kind == SL_PK_HEAD)
            s->req_fwd += e.span; /* sent or dropped: either way behind us */
        if (forward) {
            to += e.span;
            if (e.kind == SL_PK_HEAD) {
                /* Its replies are owed once it is whole: a request cut short
                 * by a protocol error gets none. */
                s->head_state = 1;
                s->head_replies = commit(s, e.fx, e.nchan);
            } else if (e.kind == SL_PK_TAIL) {
                s->head_state = 0;
                allowed(s, SL_PK_PLAIN, s->head_replies);
                s->head_replies = 0;
            } else {
                allowed(s, e.kind, commit(s, e.fx, e.nchan));
            }
            continue;
        }
        to_upstream(s, b, from, to);
        from = to = to + e.span; /* the request's bytes never leave */
        if (e.kind == SL_PK_EXEC && e.state == SL_PEND_ALLOW) {
            exec_abort(s, commit(s, e.fx, e.nchan)); /* DISCARD goes in its place */
        } else if (e.kind == SL_PK_TAIL) {
            s->head_state = 0;
        } else {
            if (e.kind == SL_PK_HEAD)
                s->head_state = 2;
            uint32_t replies = refused(s);
            if (s->state >= SL_SESS_CLOSED) {
                free(e.text);
                return;
            }
            rejected(s, e.text, e.len, replies); /* takes the text */
            e.text = NULL;
        }
        free(e.text);
    }
    if (s->state >= SL_SESS_CLOSED)
        return;
    to_upstream(s, b, from, to);
    b->start = to;
}

/* Records verdict <v> in entry <e>. */
static void on_verdict_sync(struct sl_pend *e, const struct sl_verdict *v)
{
    if (v->kind == SL_VERDICT_ALLOW && v->delay_us > 0) {
        e->state = SL_PEND_DELAY;
        e->due_us = waits_now() + v->delay_us;
        return;
    }
    if (v->kind == SL_VERDICT_REJECT) {
        char line[512];
        size_t n = sl_verdict_resp(v, line, sizeof(line));
        e->text = malloc(n);
        if (e->text != NULL) {
            memcpy(e->text, line, n);
            e->len = (uint32_t)n;
        }
        e->state = SL_PEND_REJECT;
    } else {
        e->state = SL_PEND_ALLOW;
    }
}

/* Verdicts landed or a parked request's time came: move what can move. */
static void resume(struct sl_session *s)
{
    if (s->state >= SL_SESS_FLUSHING)
        return;
    apply(s);
    if (s->pend_n == 0 && s->state < SL_SESS_FLUSHING) {
        /* Requests framed but not yet taken, or a big one in progress. */
        process(s);
        if (s->state < SL_SESS_CLOSED) {
            if (s->pend_n == 0 && !frame_held(s))
                set_pause(s, 0, SL_PAUSE_DECIDE, 0);
            head_clock(s);
            rx_release(&s->cin);
            framer_release_if_idle(s);
            drain_check(s);
        }
    }
}

/* Sessions whose verdicts landed this loop turn. The store answers a
 * pipelined batch in one read; moving on once per session at the end of
 * the turn sends all of a session's allowed requests in one write instead
 * of one write per verdict. */

static void resume_later(struct sl_session *s)
{
    if (s->resume_due)
        return;
    if (resume_n == resume_cap) {
        uint32_t cap = resume_cap ? resume_cap * 2 : 64;
        struct sl_session **nl = realloc(resume_list, cap * sizeof(*nl));
        if (nl == NULL) {
            resume(s); /* no list: at once */
            return;
        }
        resume_list = nl;
        resume_cap = cap;
    }
    resume_list[resume_n++] = s;
    s->resume_due = 1;
}

void sl_session_turn_end(void)
{
    /* resume() may land more verdicts (and add sessions): up to the end */
    for (uint32_t i = 0; i < resume_n; i++) {
        struct sl_session *s = resume_list[i];
        if (s == NULL)
            continue;
        s->resume_due = 0;
        resume(s);
    }
    resume_n = 0;
}

static void on_verdict(void *data, const struct sl_verdict *v)
{
    struct sl_pend *e = data;
    struct sl_session *s = e->s;
    e->h = NULL;
    on_verdict_sync(e, v);
    resume_later(s);
}

/* Asks the limiter about request <r> (complete, or the head of a big one)
 * and queues it in order. Returns 0, or -1 when the ring is full. */
static int enqueue(struct sl_session *s, const struct sl_resp_req *r, uint32_t span,
                   uint8_t fx, uint32_t nchan, int kind)
{
    if (s->pend == NULL) {
        s->pend = sl_pool_take(&ring_pool);
        if (s->pend == NULL) {
            sl_session_close(s);
            return -1;
        }
    }
    if (s->pend_n == PEND_MAX || s->state >= SL_SESS_FLUSHING)
        return -1;
    struct sl_pend *e = &s->pend[(s->pend_head + s->pend_n) % PEND_MAX];
    memset(e, 0, sizeof(*e));
    e->s = s;
    e->span = span;
    e->fx = fx;
    e->nchan = nchan;
    e->kind = (uint8_t)kind;
    s->pend_n++;
    if (kind == SL_PK_TAIL || (!s->l->limited && !meters_owe(s)) ||
        s->l->srv->limiter == NULL) {
        e->state = SL_PEND_ALLOW;
        return 0;
    }
    struct sl_verdict v;
    struct sl_server *srv = s->l->srv;
    if (ident(s) == NULL) {
        sl_session_close(s);
        return -1;
    }
    if (meter_gate(s, kind, span, &v) == SL_METER_REFUSE) {
        on_verdict_sync(e, &v);
        return 0;
    }
    if (!s->l->limited) {
        e->state = SL_PEND_ALLOW;
        return 0;
    }
    if (sl_limiter_check(srv->limiter, s->l->conf, s->ident, s->id, r, uv_hrtime() / 1000, &v,
                         on_verdict, e, &e->h) == 1) {
        e->state = SL_PEND_WAIT;
        return 0;
    }
    e->h = NULL;
    on_verdict_sync(e, &v);
    return 0;
}

/* header_timeout: the clock runs while sluice waits for the client to
 * finish a request's head (the part that decides it), from when that
 * request began. Not while requests wait on sluice (verdicts, an AUTH's
 * answer, a full pipeline), nor once a big request was decided at its head
 * and its body streams. A slow sender that dribbles a byte at a time keeps
 * idle_timeout from expiring, but not this. */
static void head_clock(struct sl_session *s)
{
    int waiting = s->framer != NULL && s->head_state == 0 && s->pend_n == 0 &&
                  !frame_held(s) && !(s->cl_pause & (SL_PAUSE_INFLIGHT | SL_PAUSE_DECIDE)) &&
                  s->l->conf->header_timeout_us > 0 && !sl_resp_idle(s->framer);
    if (!waiting)
        sl_tq_remove(&s->hq);
    else if (s->hq.q == NULL)
        sl_tq_touch(&s->l->heading, &s->hq, now_ms(s));
}

/* Bytes of the requests waiting in the ring: they lie at the start of the
 * client chunk, in order. */
static uint32_t pend_bytes(const struct sl_session *s)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->pend_n; i++)
        n += s->pend[(s->pend_head + i) % PEND_MAX].span;
    return n;
}

/* Takes every complete request the framer holds, in order: allowed ones
 * with nothing waiting before them go out in one write, the rest wait in
 * the ring for their verdicts. */
static void process(struct sl_session *s)
{
    struct sl_buf *b = s->cin;
    if (b == NULL)
        return; /* every byte read has been framed and sent on */
    struct sl_resp_req *r;
    int rc = 0;
    uint32_t from = b->start, to = b->start;
    while (s->pend_n < PEND_MAX && s->state < SL_SESS_FLUSHING && !frame_held(s) && !s->quit &&
           (rc = sl_resp_next(s->framer, &r)) == 1) {
        if (s->hq.q != NULL)
            sl_tq_remove(&s->hq); /* the next request's head has its own time */
        uint32_t span = (uint32_t)(r->size - s->req_fwd);
        s->req_fwd = 0;
        if (s->head_state != 0) {
            /* The rest of a request decided at its head. */
            if (s->pend_n == 0 && s->head_state == 1) {
                to += span;
                s->head_state = 0;
                allowed(s, SL_PK_PLAIN, s->head_replies);
                s->head_replies = 0;
                continue;
            }
            to_upstream(s, b, from, to);
            b->start = from = to;
            enqueue(s, r, span, SL_FX_EMPTY, 0, SL_PK_TAIL);
            apply(s);
            from = to = b->start;
            continue;
        }
        if (r->argc > 0)
            s->l->stats.requests++;
        int kind = sl_rconn_kind(r);
        observe(s, r, kind);
        /* Redis runs nothing after a QUIT (even inside MULTI) and closes:
         * what follows it is never framed, forwarded or answered. */
        if (sl_rconn_is_quit(r))
            s->quit = 1;
        if (s->auth_next != NULL && (kind == SL_PK_AUTH || kind == SL_PK_EXEC) && auth_matters(s)) {
            /* what follows waits for the answer that says who it is */
            s->auth_hold = 1;
            if (kind == SL_PK_EXEC)
                s->auth_exec_framed = 1;
        }
        uint32_t nchan;
        uint8_t fx = sl_rconn_classify(r, &nchan);
        if (!s->l->limited && s->pend_n == 0 && !(kind == SL_PK_EXEC && s->rc.multi_dirty) &&
            !meters_owe(s)) {
            to += span; /* the fast path: no limits, nothing waiting */
            allowed(s, kind, commit(s, fx, nchan));
            continue;
        }
        if (s->pend_n == 0) {
            /* Nothing waits before it: when the verdict is in at once
             * (url = local, a lease, a remembered refusal) and allows, the
             * request joins the same write as the ones before it. */
            if (enqueue(s, r, span, fx, nchan, kind) < 0)
                return;
            struct sl_pend *e = &s->pend[s->pend_head];
            if (s->pend_n == 1 && e->state == SL_PEND_ALLOW && e->kind == SL_PK_PLAIN &&
                !meters_owe(s) && !sl_rconn_sub_wait(&s->rc, fx, kind)) {
                s->pend_head = (s->pend_head + 1) % PEND_MAX;
                s->pend_n = 0;
                to += span;
                allowed(s, kind, commit(s, fx, nchan));
                continue;
            }
            to_upstream(s, b, from, to);
            b->start = from = to;
        } else {
            to_upstream(s, b, from, to);
            b->start = from = to;
            if (enqueue(s, r, span, fx, nchan, kind) < 0)
                return;
        }
        apply(s);
        if (s->state >= SL_SESS_FLUSHING)
            return;
        from = to = b->start;
    }
    to_upstream(s, b, from, to);
    b->start = to;
    if (s->state >= SL_SESS_FLUSHING)
        return;
    if (s->quit) {
        set_pause(s, 0, SL_PAUSE_DONE, 1);
        b->end = b->start + pend_bytes(s);
        return;
    }
    if (rc < 0) {
        /* The rest is garbage, never forwarded; the requests before it
         * that wait in the ring still go upstream and are answered first.
         * The error waits for the ring to empty: resume() runs this again,
         * and the dead framer fails again. */
        set_pause(s, 0, SL_PAUSE_DONE, 1);
        b->end = b->start + pend_bytes(s);
        if (s->pend_n == 0)
            protocol_error(s, s->framer->err[0] ? s->framer->err : "Protocol error");
        return;
    }
    if (s->pend_n > 0 || frame_held(s)) {
        set_pause(s, 0, SL_PAUSE_DECIDE, 1);
        return;
    }
    /* A partial request is held until complete, unless it is big: then it
     * is decided by its head now and its bytes stream as they come. */
    uint32_t held = b->end - b->start;
    if (held == 0)
        return;
    if (s->head_state == 1) {
        to_upstream(s, b, b->start, b->end);
    } else if (s->head_state == 2) {
        /* dropped: a rejected big request never reaches the upstream */
    } else if (held >= SL_STREAM_AT && sl_resp_line_len(s->framer) >= SL_STREAM_AT) {
        /* A long line, not a payload: an inline request (at most 64 KiB)
         * or a count line that will be refused. It is held whole: no
         * request is decided on it, nor does it change the connection's
         * state; one that fills the chunk without ending is too big (as
         * Redis says once it passes 64 KiB). */
        if (held == SL_BUF_SIZE && sl_resp_line_full(s->framer) < 0) {
            protocol_error(s, s->framer->err);
            b->start = b->end;
        }
        return;
    } else if (held >= SL_STREAM_AT) {
        struct sl_resp_req *head = &s->framer->req;
        observe(s, head, sl_rconn_kind(head));
        uint32_t nchan;
        uint8_t fx = sl_rconn_classify(head, &nchan);
        if (enqueue(s, head, held, fx, nchan, SL_PK_HEAD) < 0)
            return;
        apply(s);
        if (s->pend_n > 0)
            set_pause(s, 0, SL_PAUSE_DECIDE, 1);
        return; /* apply() moved the bytes on (or dropped them) */
    } else {
        return;
    }
    s->req_fwd += held;
    b->start = b->end;
}

/* Frames the <n> bytes just read at the end of <b>. */
static void client_resp(struct sl_session *s, struct sl_buf *b, size_t n)
{
    if (s->framer == NULL && (s->framer = framer_take(s->l->conf->max_request)) == NULL) {
        sl_session_close(s);
        return;
    }
    if (sl_resp_feed(s->framer, b->data + b->end - n, n) < 0) {
        protocol_error(s, s->framer->err[0] ? s->framer->err : "Protocol error");
        return;
    }
    process(s);
    if (s->state < SL_SESS_FLUSHING)
        head_clock(s);
}

/* ---- closing ------------------------------------------------------------------ */

/* The last handle is closed: nothing can call into the session any more. */
static void session_free(struct sl_session *s)
{
    if (s->cin)
        sl_buf_unref(s->cin);
    if (s->uin)
        sl_buf_unref(s->uin);
    if (s->framer) {
        sl_resp_free(s->framer); /* may hold a partial request: not pooled */
        free(s->framer);
    }
    free_segs(s);
    sl_reply_release(&s->scan);
    for (uint32_t i = 0; i < s->pend_n; i++)
        free(s->pend[(s->pend_head + i) % PEND_MAX].text);
    if (s->pend != NULL)
        sl_pool_give(&ring_pool, s->pend);
    free(s->ident);
    free(s->auth_next);
    free(s->auth_pick);
    for (uint32_t i = 0; s->resume_due && i < resume_n; i++)
        if (resume_list[i] == s)
            resume_list[i] = NULL;
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

void sl_session_close(struct sl_session *s)
{
    if (s->state == SL_SESS_CLOSED)
        return;
    s->state = SL_SESS_CLOSED;
    sl_tq_remove(&s->tq);
    sl_tq_remove(&s->hq);
    s->l->stats.conns_active--;
    /* Verdicts still on their way must not land: the entries go away with
     * the session. Everything else stays valid until the last close
     * callback, because this may run in the middle of a loop over it. */
    for (uint32_t i = 0; i < s->pend_n; i++) {
        struct sl_pend *e = &s->pend[(s->pend_head + i) % PEND_MAX];
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
    sl_lease_free(s->lease); /* the connection's places go back at once */
    s->lease = NULL;
    close_handle((uv_handle_t *)&s->client);
    if (s->up_up)
        close_handle((uv_handle_t *)&s->upstream);
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
    sl_tq_touch(&s->l->lingering, &s->tq, now_ms(s));
    s->cl_pause = 0;
    uv_read_start((uv_stream_t *)&s->client, alloc_client, on_linger_read);
}

/* Every byte for the client has been written: close gracefully. */
static void finish(struct sl_session *s)
{
    if (s->state >= SL_SESS_LINGER)
        return;
    if (s->state != SL_SESS_FLUSHING) {
        s->state = SL_SESS_FLUSHING;
        set_pause(s, 0, SL_PAUSE_DONE, 1);
        if (s->up_up)
            set_pause(s, 1, SL_PAUSE_DONE, 1);
    }
    if (s->client.write_queue_size > 0)
        return; /* on_write calls again when the queue is empty */
    if (s->up_up)
        close_handle((uv_handle_t *)&s->upstream);
    if (s->cl_eof) {
        sl_session_close(s);
        return;
    }
    uv_read_stop((uv_stream_t *)&s->client);
    uv_shutdown_t *req = malloc(sizeof(*req));
    if (req == NULL || uv_shutdown(req, (uv_stream_t *)&s->client, on_shutdown) < 0) {
        free(req);
        sl_session_close(s);
        return;
    }
    req->data = s;
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
    if (!s->resp)
        return; /* raw TCP has no request boundary: it runs on until the grace ends */
    set_pause(s, 0, SL_PAUSE_DONE, 1);
    drain_check(s);
}

/* ---- reads -------------------------------------------------------------------- */

static void on_upstream_shutdown(uv_shutdown_t *req, int status)
{
    (void)status;
    free(req);
}

static void on_client_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *ub)
{
    (void)ub;
    struct sl_session *s = st->data;
    if (nread == 0)
        return;
    if (nread < 0) {
        if (nread != UV_EOF) {
            sl_session_close(s);
            return;
        }
        /* Half-close travels on: the upstream sees our FIN after the last
         * request, and what it answers still reaches the client. */
        s->cl_eof = 1;
        set_pause(s, 0, SL_PAUSE_DONE, 1);
        if (s->cin && s->cin->end > s->cin->start) {
            to_upstream(s, s->cin, s->cin->start, s->cin->end);
            s->cin->start = s->cin->end;
        }
        rx_release(&s->cin);
        if (s->state >= SL_SESS_CLOSED)
            return;
        uv_shutdown_t *req = malloc(sizeof(*req));
        if (req == NULL || uv_shutdown(req, (uv_stream_t *)&s->upstream, on_upstream_shutdown) < 0) {
            free(req);
            sl_session_close(s);
        }
        return;
    }
    struct sl_buf *b = s->cin;
    b->end += (uint32_t)nread;
    s->l->stats.bytes_in += (uint64_t)nread;
    sl_tq_touch(&s->l->active, &s->tq, now_ms(s));
    meter_read(s, 0, (size_t)nread);
    if (s->state >= SL_SESS_CLOSED)
        return;
    if (s->resp) {
        client_resp(s, b, (size_t)nread);
    } else {
        to_upstream(s, b, b->start, b->end);
        b->start = b->end;
    }
    if (s->state < SL_SESS_CLOSED) {
        rx_release(&s->cin);
        framer_release_if_idle(s);
    }
}

/* Sends the replies in the new bytes of <b>, with due local replies
 * slotted in at reply boundaries, and drops a reply being swallowed. */
static void upstream_resp(struct sl_session *s, struct sl_buf *b)
{
    uint32_t off = b->start;
    uint32_t fstart = UINT32_MAX; /* where the frame in progress began, if in <b> */
    while (off < b->end) {
        /* At a boundary, the next reply may be one to drop (EXECABORT). */
        if (!s->swallow && s->seg_n > 0 && sl_reply_idle(&s->scan)) {
            struct sl_reply_seg *g = &s->segs[s->seg_head];
            if ((g->flags & SL_SEG_SWALLOW) && g->n == 1) {
                to_client(s, b, b->start, off);
                b->start = off;
                s->swallow = 1;
            }
        }
        if (sl_reply_idle(&s->scan)) {
            s->reply_first = (uint8_t)b->data[off];
            sl_rconn_reply_begin(&s->rc);
            fstart = off;
            /* EXEC's reply, which says if the AUTH queued before it ran */
            s->pick_on = s->auth_pick != NULL && s->paid_total + 1 == s->auth_seq &&
                         s->reply_first != '>';
            if (s->pick_on)
                sl_reply_pick_init(s->auth_pick, s->auth_elem);
        }
        unsigned f = 0;
        long n = sl_reply_scan(&s->scan, b->data + off, b->end - off, &f);
        if (n < 0) {
            sl_log_warn("upstream protocol error", "listener=%s", s->l->name);
            to_client(s, b, b->start, off);
            b->start = b->end;
            finish(s);
            return;
        }
        sl_rconn_reply_bytes(&s->rc, b->data + off, (size_t)n);
        if (s->pick_on)
            sl_reply_pick_feed(s->auth_pick, b->data + off, (size_t)n);
        off += (uint32_t)n;
        if (!(f & SL_REPLY_DONE))
            continue;
        int confirm;
        int push = sl_rconn_reply_end(&s->rc, (f & SL_REPLY_PUSH) != 0, &confirm);
        if (!push && !confirm && settle_marks(s)) {
            /* an unsubscribe-all was owed more confirmations than came:
             * what waited for them goes out before this reply */
            uint32_t at = fstart != UINT32_MAX && fstart >= b->start ? fstart : off;
            to_client(s, b, b->start, at);
            b->start = at;
            emit_ready_locals(s);
            if (s->state >= SL_SESS_FLUSHING)
                return;
        }
        if (s->swallow && !push) {
            b->start = off; /* the swallowed reply never reaches the client */
            s->swallow = 0;
        }
        int due = push ? (s->seg_n > 0 && s->segs[s->seg_head].n == 0) : reply_ended(s);
        if (due) {
            /* local replies go out here, between two upstream replies */
            to_client(s, b, b->start, off);
            b->start = off;
            emit_ready_locals(s);
            if (s->state >= SL_SESS_FLUSHING)
                return;
        }
    }
    if (s->swallow)
        b->start = b->end;
    to_client(s, b, b->start, b->end);
    b->start = b->end;
    if (s->sub_hold && !sl_rconn_sub_unsure(&s->rc)) {
        /* the confirmations told: the request waiting for them moves */
        s->sub_hold = 0;
        resume_later(s);
    }
}

static void on_upstream_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *ub)
{
    (void)ub;
    struct sl_session *s = st->data;
    if (nread == 0)
        return;
    if (nread < 0) {
        /* Everything the upstream sent is already on its way to the client;
         * close once it has left. */
        sl_log_debug("upstream closed", "listener=%s err=%s", s->l->name, uv_strerror((int)nread));
        rx_release(&s->uin);
        finish(s);
        return;
    }
    struct sl_buf *b = s->uin;
    b->end += (uint32_t)nread;
    s->l->stats.bytes_out += (uint64_t)nread;
    sl_tq_touch(&s->l->active, &s->tq, now_ms(s));
    meter_read(s, 1, (size_t)nread);
    if (s->state >= SL_SESS_CLOSED) {
        b->start = b->end;
        return;
    }
    if (s->resp) {
        upstream_resp(s, b);
    } else {
        to_client(s, b, b->start, b->end);
        b->start = b->end;
    }
    if (s->state < SL_SESS_CLOSED) {
        rx_release(&s->uin);
        drain_check(s);
    }
}

/* ---- accept and connect ------------------------------------------------------- */

static void upstream_failed(struct sl_session *s, int err)
{
    if (err == UV_EMFILE || err == UV_ENFILE) {
        /* Not the upstream's fault: sluice is out of descriptors. Counted
         * and logged (at a rate) as a refused connection. */
        sl_listener_refused_fd(s->l, err);
        if (!s->resp) {
            sl_session_close(s);
            return;
        }
        s->state = SL_SESS_RELAY;
        sl_tq_touch(&s->l->active, &s->tq, now_ms(s));
        queue_local(s, (char *)sl_listener_fd_refusal, (uint32_t)strlen(sl_listener_fd_refusal),
                    SL_SEG_CLOSE);
        return;
    }
    s->l->stats.upstream_failed++;
    sl_log_warn("upstream unavailable", "listener=%s upstream=%s err=%s", s->l->name,
                s->l->conf->upstream.text, sl_strerror(err));
    if (s->resp) {
        static char msg[] = "-ERR upstream unavailable\r\n";
        s->state = SL_SESS_RELAY;
        sl_tq_touch(&s->l->active, &s->tq, now_ms(s));
        queue_local(s, msg, sizeof(msg) - 1, SL_SEG_CLOSE);
    } else {
        sl_session_close(s);
    }
}

static void on_connect(uv_connect_t *req, int status)
{
    struct sl_session *s = req->data;
    free(req);
    if (s->state != SL_SESS_CONNECTING)
        return; /* closed meanwhile (status is UV_ECANCELED) */
    if (status < 0) {
        close_handle((uv_handle_t *)&s->upstream);
        s->up_up = 0;
        upstream_failed(s, status);
        return;
    }
    uv_tcp_nodelay(&s->upstream, 1);
    s->state = SL_SESS_RELAY;
    sl_tq_touch(&s->l->active, &s->tq, now_ms(s));
    set_pause(s, 1, SL_PAUSE_CONNECT, 0);
    set_pause(s, 0, SL_PAUSE_CONNECT, 0);
}

/* Starts the upstream connection of an admitted session. */
static void connect_upstream(struct sl_session *s)
{
    struct sl_listener *l = s->l;
    uv_loop_t *loop = l->handle.loop;
    sl_tq_touch(&l->connecting, &s->tq, uv_now(loop));
    if (meters_init(s) < 0) {
        sl_session_close(s);
        return;
    }
    uv_connect_t *req = malloc(sizeof(*req));
    int rc = req ? uv_tcp_init(loop, &s->upstream) : UV_ENOMEM;
    if (rc == 0) {
        s->upstream.data = s;
        s->up_up = 1;
        s->handles++;
        req->data = s;
        rc = uv_tcp_connect(req, &s->upstream, (const struct sockaddr *)&l->conf->upstream.ss,
                            on_connect);
    }
    if (rc < 0) {
        free(req);
        if (s->up_up) {
            close_handle((uv_handle_t *)&s->upstream);
            s->up_up = 0;
        }
        upstream_failed(s, rc);
    }
}

/* ---- connection limits: the gate ------------------------------------------ */

#define GATE_POLL_US 50000 /* a queued connection asks again this often */

static void gate_try(struct sl_session *s);

static void on_gate_poll(struct sl_wait *w)
{
    gate_try(session_of_park(w));
}

/* Refused a place: the client learns why (resp), then the close. */
static void gate_refuse(struct sl_session *s, const struct sl_verdict *v)
{
    struct sl_listener *l = s->l;
    l->stats.conns_refused++;
    sl_log_debug("connection limit: refused", "listener=%s limit=%s", l->name, v->limit);
    sl_lease_gave_up(s->lease, v);
    sl_lease_free(s->lease);
    s->lease = NULL;
    if (!s->resp) {
        sl_session_close(s);
        return;
    }
    char line[200];
    int n = snprintf(line, sizeof(line), "-ERR max number of clients reached (limit '%s')\r\n",
                     v->limit);
    char *text = malloc((size_t)n);
    s->state = SL_SESS_RELAY;
    sl_tq_touch(&l->active, &s->tq, now_ms(s));
    if (text == NULL) {
        sl_session_close(s);
        return;
    }
    memcpy(text, line, (size_t)n);
    queue_local(s, text, (uint32_t)n, SL_SEG_OWNED | SL_SEG_CLOSE);
}

static void gate_verdict(struct sl_session *s, const struct sl_verdict *v)
{
    if (s->state != SL_SESS_CONNECTING || s->lease == NULL)
        return;
    if (v->kind == SL_VERDICT_ALLOW) {
        connect_upstream(s);
        return;
    }
    uint64_t now = waits_now();
    if (v->action == SL_ACTION_DELAY && !v->store_down && now < s->gate_until) {
        /* The login queue: not read, not connected, asked again soon (or
         * at once when a place frees here). */
        uint64_t next = now + GATE_POLL_US < s->gate_until ? now + GATE_POLL_US : s->gate_until;
        if (sl_waits_default != NULL && sl_wait_at(sl_waits_default, &s->park, next, on_gate_poll) == 0)
            return;
    }
    gate_refuse(s, v);
}

static void on_gate(void *data, const struct sl_verdict *v)
{
    gate_verdict(data, v);
}

static void gate_try(struct sl_session *s)
{
    struct sl_verdict v;
    if (sl_lease_acquire(s->lease, waits_now(), &v, on_gate, s) == 0)
        gate_verdict(s, &v);
}

void sl_session_accept(struct sl_listener *l)
{
    uv_loop_t *loop = l->handle.loop;
    struct sl_session *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return;
    uv_tcp_init(loop, &s->client);
    s->client.data = s;
    s->l = l;
    s->handles = 1;
    s->resp = l->conf->protocol == SL_PROTO_RESP;
    l->sessions++;
    l->stats.conns_active++;
    if (uv_accept((uv_stream_t *)&l->handle, (uv_stream_t *)&s->client) < 0) {
        sl_session_close(s);
        return;
    }
    l->stats.conns_accepted++;
    if (l->stats.conns_active > l->conf->max_connections) {
        /* Accepted and then refused, as Redis does: the client learns why. */
        sl_log_warn("max_connections reached", "listener=%s max=%llu", l->name,
                    (unsigned long long)l->conf->max_connections);
        s->state = SL_SESS_RELAY;
        l->stats.conns_refused++;
        if (s->resp) {
            static char msg[] = "-ERR max number of clients reached\r\n";
            queue_local(s, msg, sizeof(msg) - 1, SL_SEG_CLOSE);
        } else {
            sl_session_close(s);
        }
        return;
    }
    s->cl_pause = SL_PAUSE_CONNECT;
    s->up_pause = SL_PAUSE_CONNECT;
    s->id = ++l->srv->next_conn;
    sl_reply_init(&s->scan);
    uv_tcp_nodelay(&s->client, 1);

    /* Connection limits: a place first (maybe after the login queue). */
    struct sl_meter_plan cp;
    if (sl_limiter_plan(l->srv->limiter, l->conf, SL_METRIC_CONNECTIONS, &cp) && ident(s) != NULL &&
        (s->lease = sl_lease_new(l->srv->limiter, l->conf, s->ident, s->id, waits_now())) != NULL) {
        s->gate_until = waits_now() + cp.max_delay_us;
        sl_tq_touch(&l->gated, &s->tq, uv_now(loop));
        gate_try(s);
        return;
    }
    connect_upstream(s);
}

/* ---- sweep -------------------------------------------------------------------- */

void sl_session_sweep(struct sl_listener *l, uint64_t now)
{
    struct sl_tq_node *n;
    uint64_t ct = l->conf->connect_timeout_us / 1000;
    while ((n = sl_tq_expired(&l->connecting, now, ct ? ct : 1)) != NULL) {
        struct sl_session *s = sl_session_of(n);
        sl_tq_remove(n);
        close_handle((uv_handle_t *)&s->upstream);
        s->up_up = 0;
        s->state = SL_SESS_RELAY; /* on_connect (cancelled) must not act */
        upstream_failed(s, UV_ETIMEDOUT);
    }
    while ((n = sl_tq_expired(&l->lingering, now, LINGER_MS)) != NULL)
        sl_session_close(sl_session_of(n));

    uint64_t ht = l->conf->header_timeout_us / 1000;
    while ((n = sl_tq_expired(&l->heading, now, ht ? ht : 1)) != NULL) {
        struct sl_session *s = (struct sl_session *)((char *)n - offsetof(struct sl_session, hq));
        sl_tq_remove(n);
        if (ht == 0)
            continue; /* turned off by a reload */
        l->stats.header_timeouts++;
        sl_log_debug("header timeout", "listener=%s", l->name);
        sl_session_close(s);
    }

    uint64_t idle = l->conf->idle_timeout_us / 1000;
    if (idle > 0) {
        while ((n = sl_tq_expired(&l->active, now, idle)) != NULL) {
            struct sl_session *s = sl_session_of(n);
            /* As in Redis: a blocked or subscribed client is not idle. */
            if (s->inflight > 0 || sl_rconn_passthru(&s->rc)) {
                sl_tq_touch(&l->active, n, now);
                continue;
            }
            l->stats.idle_closed++;
            sl_session_close(s);
        }
    }
}

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
 * replies are capped too (MAX_INFLIGHT), so a client that pipelines without
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
#include "net/listener.h"
#include "net/session.h"
#include "proto/resp.h"
#include "proto/resp_reply.h"

#define HIGH_WATER   (4 * SL_BUF_SIZE)
#define LOW_WATER    (SL_BUF_SIZE)
#define MIN_READ     (8 * 1024)      /* smaller room than this: take a fresh chunk */
#define SL_STREAM_AT (16 * 1024)     /* a partial request this big is committed */
#define MAX_INFLIGHT 8192            /* owed replies before the client is paused */
#define LINGER_MS    2000            /* how long a lingering close waits for EOF */
#define FRAMER_IDLE_MS 2000          /* an idle session gives its framer back after this */

/* A queued write: holds the chunk its bytes live in, or carries a copy. */
struct wreq {
    uv_write_t     req;     /* req.data = session */
    struct sl_buf *buf;     /* referenced chunk, or NULL when <data> holds the bytes */
    char           data[];  /* copied bytes (local replies only) */
};

static void on_client_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *ub);
static void on_upstream_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *ub);
static void emit_ready_locals(struct sl_session *s);
static void finish(struct sl_session *s);

struct sl_session *sl_session_of(struct sl_tq_node *n)
{
    return (struct sl_session *)((char *)n - offsetof(struct sl_session, tq));
}

static uint64_t now_ms(struct sl_session *s)
{
    return uv_now(s->client.loop);
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

static void alloc_client(uv_handle_t *h, size_t hint, uv_buf_t *ub)
{
    (void)hint;
    struct sl_session *s = h->data;
    struct sl_buf *b = rx_chunk(&s->cin);
    *ub = b ? uv_buf_init(b->data + b->end, SL_BUF_SIZE - b->end) : uv_buf_init(NULL, 0);
}

static void alloc_upstream(uv_handle_t *h, size_t hint, uv_buf_t *ub)
{
    (void)hint;
    struct sl_session *s = h->data;
    struct sl_buf *b = rx_chunk(&s->uin);
    *ub = b ? uv_buf_init(b->data + b->end, SL_BUF_SIZE - b->end) : uv_buf_init(NULL, 0);
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
    s->tail_n += n;
    s->inflight += n;
    if (s->inflight >= MAX_INFLIGHT)
        set_pause(s, 0, SL_PAUSE_INFLIGHT, 1);
}

static void paid(struct sl_session *s)
{
    s->inflight--;
    if (s->inflight == MAX_INFLIGHT / 2)
        set_pause(s, 0, SL_PAUSE_INFLIGHT, 0);
    if (s->inflight == 0 && s->draining && s->state == SL_SESS_RELAY)
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
        uint8_t flags = g->flags;
        int rc = send_bytes(s, (uv_stream_t *)&s->client, NULL, g->text, g->len);
        if (flags & SL_SEG_OWNED)
            free(g->text);
        s->seg_head = (s->seg_head + 1) % s->seg_cap;
        s->seg_n--;
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

/* One non-push upstream reply has ended. Returns 1 when local replies are
 * now due (the caller flushes the upstream bytes before them). */
static int reply_ended(struct sl_session *s)
{
    if (s->seg_n > 0) {
        struct sl_reply_seg *g = &s->segs[s->seg_head];
        if (g->n == 0)
            return 1; /* unsolicited (pub/sub): locals waited for the boundary */
        g->n--;
        paid(s);
        return g->n == 0;
    }
    if (s->tail_n > 0) {
        s->tail_n--;
        paid(s);
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

static int name_is(const struct sl_resp_req *r, unsigned i, const char *lit, uint32_t n)
{
    return r->ncap > i && r->arglen[i] == n && strncasecmp(r->argv[i], lit, n) == 0;
}
#define NAME_IS(r, i, lit) name_is((r), (i), (lit), (uint32_t)(sizeof(lit) - 1))

/* How many replies the upstream owes for <r>, given the connection's reply
 * mode, and the mode changes <r> makes. */
static uint32_t replies_for(struct sl_session *s, const struct sl_resp_req *r)
{
    if (r->argc == 0)
        return 0;
    if (NAME_IS(r, 0, "CLIENT") && NAME_IS(r, 1, "REPLY") && r->argc == 3) {
        if (NAME_IS(r, 2, "OFF")) {
            s->reply_mode = SL_REPLY_OFF;
            return 0;
        }
        if (NAME_IS(r, 2, "SKIP")) {
            /* SKIP while OFF changes nothing in Redis either. */
            if (s->reply_mode != SL_REPLY_OFF)
                s->reply_mode = SL_REPLY_SKIP;
            return 0;
        }
        if (NAME_IS(r, 2, "ON")) {
            s->reply_mode = SL_REPLY_ON;
            return 1;
        }
    }
    if (s->reply_mode == SL_REPLY_OFF)
        return 0;
    if (s->reply_mode == SL_REPLY_SKIP) {
        s->reply_mode = SL_REPLY_ON;
        return 0;
    }
    if (NAME_IS(r, 0, "SUBSCRIBE") || NAME_IS(r, 0, "PSUBSCRIBE") ||
        NAME_IS(r, 0, "SSUBSCRIBE") || NAME_IS(r, 0, "MONITOR")) {
        /* From here on replies are not one per request (RESP2 sends one
         * confirmation per channel, then messages whenever they come). */
        s->passthru = 1;
        return 0;
    }
    return s->passthru ? 0 : 1;
}

/* A complete request: count it and owe its replies. */
static void request_done(struct sl_session *s, const struct sl_resp_req *r)
{
    if (r->argc > 0)
        s->l->stats.requests++;
    uint32_t n = replies_for(s, r);
    if (n > 0)
        owe(s, n);
}

static void protocol_error(struct sl_session *s, const char *msg)
{
    s->l->stats.protocol_errors++;
    sl_log_debug("protocol error", "listener=%s err=\"%s\"", s->l->name, msg);
    set_pause(s, 0, SL_PAUSE_DONE, 1);
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

/* Frames the <n> bytes just read at the end of <b> and sends on every byte
 * that belongs to a complete (or committed) request. */
static void client_resp(struct sl_session *s, struct sl_buf *b, size_t n)
{
    if (s->framer == NULL) {
        s->framer = malloc(sizeof(*s->framer));
        if (s->framer == NULL || sl_resp_init(s->framer, s->l->conf->max_request) < 0) {
            free(s->framer);
            s->framer = NULL;
            sl_session_close(s);
            return;
        }
    }
    int rc = sl_resp_feed(s->framer, b->data + b->end - n, n);
    struct sl_resp_req *r;
    uint32_t from = b->start, to = b->start;
    while (rc >= 0 && (rc = sl_resp_next(s->framer, &r)) == 1) {
        /* The request's unsent bytes are the next ones in the chunk: earlier
         * parts of a streamed request already left. */
        to += (uint32_t)(r->size - s->req_fwd);
        s->req_fwd = 0;
        request_done(s, r);
    }
    to_upstream(s, b, from, to);
    b->start = to;
    if (rc < 0) {
        protocol_error(s, s->framer->err[0] ? s->framer->err : "Protocol error");
        b->start = b->end; /* the rest is garbage: never forwarded */
        return;
    }
    /* A partial request is held until complete, unless it is big: then it is
     * committed now and its bytes stream through as they come. */
    uint32_t held = b->end - b->start;
    if (held > 0 && (s->req_fwd > 0 || held >= SL_STREAM_AT)) {
        to_upstream(s, b, b->start, b->end);
        s->req_fwd += held;
        b->start = b->end;
    }
}

/* ---- closing ------------------------------------------------------------------ */

static void on_close(uv_handle_t *h)
{
    struct sl_session *s = h->data;
    if (--s->handles > 0)
        return;
    if (s->cin)
        sl_buf_unref(s->cin);
    if (s->uin)
        sl_buf_unref(s->uin);
    struct sl_listener *l = s->l;
    free(s);
    sl_listener_session_gone(l);
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
    s->l->stats.conns_active--;
    if (s->framer) {
        sl_resp_free(s->framer);
        free(s->framer);
        s->framer = NULL;
    }
    free_segs(s);
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
    set_pause(s, 0, SL_PAUSE_DONE, 1);
    if (s->resp && s->inflight == 0)
        finish(s);
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
    if (s->resp) {
        client_resp(s, b, (size_t)nread);
    } else {
        to_upstream(s, b, b->start, b->end);
        b->start = b->end;
    }
    if (s->state < SL_SESS_CLOSED)
        rx_release(&s->cin);
}

/* Sends the replies in the new <n> bytes of <b>, with due local replies
 * slotted in at reply boundaries. */
static void upstream_resp(struct sl_session *s, struct sl_buf *b)
{
    uint32_t off = b->start;
    while (off < b->end) {
        unsigned f = 0;
        long n = sl_reply_scan(&s->scan, b->data + off, b->end - off, &f);
        if (n < 0) {
            sl_log_warn("upstream protocol error", "listener=%s", s->l->name);
            to_client(s, b, b->start, off);
            b->start = b->end;
            finish(s);
            return;
        }
        off += (uint32_t)n;
        if ((f & (SL_REPLY_DONE | SL_REPLY_PUSH)) == SL_REPLY_DONE && reply_ended(s)) {
            to_client(s, b, b->start, off);
            b->start = off;
            emit_ready_locals(s);
            if (s->state >= SL_SESS_FLUSHING)
                return;
        } else if ((f & SL_REPLY_DONE) && s->seg_n > 0 && s->segs[s->seg_head].n == 0) {
            /* a push or unsolicited reply ended: waiting locals may go now */
            to_client(s, b, b->start, off);
            b->start = off;
            emit_ready_locals(s);
            if (s->state >= SL_SESS_FLUSHING)
                return;
        }
    }
    to_client(s, b, b->start, b->end);
    b->start = b->end;
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
    if (s->resp) {
        upstream_resp(s, b);
    } else {
        to_client(s, b, b->start, b->end);
        b->start = b->end;
    }
    if (s->state < SL_SESS_CLOSED)
        rx_release(&s->uin);
}

/* ---- accept and connect ------------------------------------------------------- */

static void upstream_failed(struct sl_session *s, int err)
{
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
    sl_reply_init(&s->scan);
    uv_tcp_nodelay(&s->client, 1);
    sl_tq_touch(&l->connecting, &s->tq, uv_now(loop));

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

    uint64_t idle = l->conf->idle_timeout_us / 1000;
    if (idle > 0) {
        while ((n = sl_tq_expired(&l->active, now, idle)) != NULL) {
            struct sl_session *s = sl_session_of(n);
            /* As in Redis: a blocked or subscribed client is not idle. */
            if (s->inflight > 0 || s->passthru) {
                sl_tq_touch(&l->active, n, now);
                continue;
            }
            l->stats.idle_closed++;
            sl_session_close(s);
        }
    }
    /* Sessions quiet for a while give back their framer. */
    for (n = l->active.head; n != NULL && n->at + FRAMER_IDLE_MS <= now; n = n->next) {
        struct sl_session *s = sl_session_of(n);
        if (s->framer != NULL && sl_resp_idle(s->framer) && s->req_fwd == 0) {
            sl_resp_free(s->framer);
            free(s->framer);
            s->framer = NULL;
        }
    }
}

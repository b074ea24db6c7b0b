/* sluice — HTTP/1.1 in a session: one upstream connection per client
 * connection, requests decided at their head, bodies streamed.
 *
 *   client bytes --> request framer --> head: verdict --> forwarded head
 *                                                          (X-Forwarded-*)
 *                                       body: streamed on (or dropped, refused)
 *   upstream bytes --> response framer --> head (+ RateLimit fields) --> client
 *                                          body: streamed on
 *
 * A request's head is held by the framer until whole (capped), decided by
 * the limits, and sent upstream rewritten; its body is never held: its
 * bytes go on from the chunk they were read into, or are read and dropped
 * when the request was refused. One request is decided at a time: while
 * its verdict is out, reading stops and the bytes behind it wait. Requests
 * may be pipelined; responses come back in order, and the local answers
 * (429, 400 ...) take their place in the reply queue as RESP's do.
 *
 * After a 101 (Upgrade) or a 2xx to CONNECT the connection is a tunnel:
 * bytes pass as they come, byte limits still count them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/log.h"
#include "core/tq.h"
#include "identity/identity.h"
#include "net/usage_export.h"
#include "net/alog.h"
#include "net/listener.h"
#include "net/sess_adapt.h"
#include "net/session.h"
#include "net/session-i.h"
#include "proto/http.h"
#include "proto/http_answer.h"
#include "proto/http_fwd.h"
#include "proto/http_upgrade.h"
#include "shape/meter.h"

#define HQ_MAX 32 /* requests sent upstream whose responses are still due */

/* A request sent upstream, until its final response has passed. */
struct hq {
    char    *fields;     /* RateLimit fields its response gains (owned), or NULL */
    uint32_t fields_len;
    uint8_t  head;       /* a HEAD: its response has no body */
    uint8_t  connect;    /* a CONNECT: a 2xx makes the connection a tunnel */
    uint8_t  upgrade;    /* it asked to upgrade: only it may be answered 101 */
    uint32_t offered;    /* ... to these of the listener's upgrades (a mask) */
    uint8_t  unclosed;   /* its "Connection: close" was kept from the upstream (keep-alive
                            reuse): its response tells the client instead */
    uint8_t  placed;     /* it holds a place of adaptive concurrency ... */
    uint64_t sent_ns;    /* ... since then (net/sess_adapt.h) */
};

enum { BODY_NONE = 0, BODY_FWD, BODY_DROP };

struct sl_http_sess {
    struct sl_http req;      /* frames the client's requests */
    struct sl_http res;      /* frames the upstream's responses */
    char    *fwd;            /* the head to send when the verdict allows (owned) */
    uint32_t fwd_len;
    uint8_t  fwd_head, fwd_connect, fwd_upgrade, fwd_close; /* ... what that request is */
    uint8_t  fwd_keep10;     /* ... an HTTP/1.0 request with "Connection: keep-alive" */
    uint32_t fwd_offered;    /* ... the allowed upgrades it offers (a mask) */
    uint8_t  in_body;        /* the request framer is inside a body */
    uint8_t  body;           /* what happens to it: BODY_* */
    uint8_t  hold;           /* framing waits: an upgrade's answer, or a full queue */
    uint8_t  last;           /* the request framed last ends the connection */
    uint8_t  client_close;   /* ... because the client asked (Connection: close, HTTP/1.0
                                without keep-alive): it may send nothing after it */
    uint8_t  tunnel;         /* bytes pass as they are, both ways */
    uint8_t  res_body;       /* the response framer is inside a body */
    uint8_t  res_final;      /* ... of a final response (not a 1xx) */
    uint8_t  res_any;        /* some byte of the response in progress came */
    uint8_t  res_sent;       /* some byte of it went to the client */
    uint8_t  res_close;      /* the response in progress ends the connection */
    uint8_t  upgrade_wait;   /* an upgrade or CONNECT was sent: its answer decides */
    uint8_t  eof;            /* the client sent EOF: end once what it sent is answered */
    uint8_t  fwd_unclosed;   /* the request head in fwd lost its "Connection: close" */
    uint8_t  fwd_plain;      /* ... a GET or HEAD without a body, no upgrade: safe to resend */
    uint8_t  fwd_placed;     /* ... it holds a place of adaptive concurrency */
    uint8_t  again_done;     /* a request was resent once on a new upstream connection */
    uint8_t  again_due;      /* ... and goes out once that connection is up */
    char    *again;          /* the head sent first on a kept connection, while nothing of its
                                response came (owned): sent again if the connection fails */
    uint32_t again_len;
    char    *again_fields;   /* ... and the fields its response gains (owned) */
    uint32_t again_fields_len;
    uint8_t  reuse_ok;       /* the last response ended the upstream's stream cleanly and
                                kept the connection open: it may serve another session */
    struct hq q[HQ_MAX];     /* requests sent upstream, oldest first */
    uint32_t qh, qn;
};

static void frame(struct sl_session *s);
static int response_ended(struct sl_session *s);

static void again_forget(struct sl_http_sess *h)
{
    free(h->again);
    h->again = NULL;
}
static void eof_check(struct sl_session *s);

/* ---- batched output ---------------------------------------------------------- */

/* A rewritten head is a copy into the side's buffer (s->out[], written by
 * the session core); the body bytes after it go into the same write as
 * references to their chunk, so a small response costs one write, not
 * two. The core writes the buffers after each read it hands over; the
 * entry points that are not reads (resume, upstream_eof, the timeouts)
 * flush before they return, so nothing waits in them across loop turns. */

/* Sends <from, to) of chunk <b> to <dst>, after what the side holds. */
static void send_span(struct sl_session *s, uv_stream_t *dst, struct sl_buf *b, uint32_t from,
                    uint32_t to)
{
    if (dst != (uv_stream_t *)&s->client)
        sl_sess_to_upstream(s, b, from, to);
    else
        sl_sess_to_client(s, b, from, to);
}

static const struct sl_listener_conf *lconf(const struct sl_session *s)
{
    return s->l->conf;
}

static void count_status(struct sl_session *s, int status)
{
    int c = status / 100;
    if (c >= 1 && c <= 5)
        s->l->stats.http_responses[c - 1]++;
}

/* ---- local answers ------------------------------------------------------------ */

/* Queues a local answer in order; <close>: the connection ends after it,
 * and nothing more is read. */
static void local(struct sl_session *s, const char *text, size_t len, int close)
{
    char *t = malloc(len ? len : 1);
    if (t == NULL) {
        sl_session_close(s);
        return;
    }
    memcpy(t, text, len);
    /* its status, for the metrics: "HTTP/1.1 NNN" */
    if (len > 12)
        count_status(s, atoi(text + 9));
    if (close)
        sl_sess_pause(s, 0, SL_PAUSE_DONE, 1);
    sl_sess_local(s, t, (uint32_t)len, SL_SEG_OWNED | (close ? SL_SEG_CLOSE : 0));
}

static void error_answer(struct sl_session *s, int status, const char *detail)
{
    char out[SL_HTTP_ANSWER_MAX];
    size_t n = sl_http_answer_error(status, detail, out, sizeof(out));
    if (sl_http_names_head(&s->http->req))
        n = sl_http_answer_head_only(out, n);
    s->l->stats.protocol_errors += status == 400 || status == 413 || status == 414 ||
                                   status == 431;
    s->http->last = 1;
    /* sluice ends the connection: the client may be sending more (the
     * close lingers) */
    s->http->client_close = 0;
    s->cl_said = 0;
    if (sl_alog_any)
        sl_alog_local(s, status, n);
    local(s, out, n, 1);
}

/* ---- the upstream's deadline ------------------------------------------------ */

/* upstream_timeout runs while responses are owed: from when a request
 * was sent, or from the upstream's last byte (as nginx's
 * proxy_read_timeout), so a response whose head or body stalls ends too. */
static void await_clock(struct sl_session *s)
{
    struct sl_http_sess *h = s->http;
    int waiting = h->qn > 0 && !h->tunnel && lconf(s)->upstream_timeout_us > 0;
    sl_sess_clock(s, &s->l->awaiting, &s->wq, waiting);
}

/* header_timeout runs while the client is part-way through a head, with
 * nothing of ours holding it up. */
static void head_clock(struct sl_session *s)
{
    struct sl_http_sess *h = s->http;
    int waiting = !h->in_body && !sl_http_idle(&h->req) && sl_pend_count(&s->pend) == 0 && !h->hold &&
                  !h->tunnel && lconf(s)->header_timeout_us > 0 &&
                  !(s->cl_pause & (SL_PAUSE_INFLIGHT | SL_PAUSE_DECIDE | SL_PAUSE_DONE));
    sl_sess_clock(s, &s->l->heading, &s->hq, waiting);
}

/* ---- requests ----------------------------------------------------------------- */

/* The request whose head waits in h->fwd goes upstream now. */
static void send_head(struct sl_session *s, char *fields, uint32_t fields_len)
{
    struct sl_http_sess *h = s->http;
    struct hq *e = &h->q[(h->qh + h->qn) % HQ_MAX];
    e->fields = fields;
    e->fields_len = fields_len;
    e->head = h->fwd_head;
    e->connect = h->fwd_connect;
    e->upgrade = h->fwd_upgrade;
    e->offered = h->fwd_offered;
    e->unclosed = h->fwd_unclosed;
    e->placed = h->fwd_placed;
    e->sent_ns = e->placed ? sl_sadapt_now() : 0;
    if (e->placed)
        sl_sadapt_hold(s);
    h->fwd_placed = 0;
    h->qn++;
    h->reuse_ok = 0;
    if (h->fwd_upgrade || h->fwd_connect)
        h->upgrade_wait = 1;
    if (sl_sess_send(s, sl_sess_side_stream(s, 1), NULL, h->fwd, h->fwd_len) < 0) {
        sl_session_close(s);
        return;
    }
    if (s->up_kept == 1 && h->fwd_plain && h->qn == 1 && !h->again_done && h->again == NULL) {
        /* the first request on a kept connection: kept until its response
         * starts, should the upstream have closed the connection as it
         * was sent */
        h->again = h->fwd;
        h->again_len = h->fwd_len;
    } else {
        free(h->fwd);
    }
    h->fwd = NULL;
    h->body = BODY_FWD;
    sl_sess_owe(s, 1);
    await_clock(s);
}

/* The request whose head waits in h->fwd is refused with <text> (owned). */
static void refuse(struct sl_session *s, char *text, uint32_t len)
{
    struct sl_http_sess *h = s->http;
    free(h->fwd);
    h->fwd = NULL;
    h->body = BODY_DROP;
    s->l->stats.rejected++;
    if (text == NULL) {
        sl_session_close(s);
        return;
    }
    if (len > 12)
        count_status(s, atoi(text + 9));
    if (s->alog != NULL)
        sl_alog_local(s, len > 12 ? atoi(text + 9) : 0, len);
    /* A client that waits for 100-continue, or asked to close, gets the
     * answer with Connection: close (verdict_text wrote it so): its body
     * may never come. */
    int close = h->fwd_close;
    if (close) {
        h->last = 1;
        sl_sess_pause(s, 0, SL_PAUSE_DONE, 1);
    }
    sl_sess_local(s, text, len, SL_SEG_OWNED | (close ? SL_SEG_CLOSE : 0));
}

/* A request's head is whole: rewrite it, and ask the limits. */
static void on_request(struct sl_session *s)
{
    struct sl_http_sess *h = s->http;
    const struct sl_http_head *hd = &h->req.head;
    const struct sl_listener_conf *lc = lconf(s);
    if (sl_alog_any)
        sl_alog_begin(s, hd);
    /* A path that upstreams may read as anything (%00, overlong UTF-8)
     * cannot be matched honestly where a limit has `paths`: refused, as
     * the framer refuses (docs/http.md, "Paths"). */
    const char *bad = s->l->limited ? sl_limiter_path_refusal(s->l->srv->limiter, lc, hd) : NULL;
    if (bad != NULL) {
        error_answer(s, 400, bad);
        return;
    }
    s->l->stats.requests++;
    struct sl_ident_state *id = sl_sess_ident(s);
    char why[160];
    if (sl_identity_http_check(lc, id, hd, why, sizeof why) != 0) {
        error_answer(s, 400, why); /* two identity fields: refused, not guessed */
        return;
    }
    /* [usage]: counted once its identity is sure (a request naming two is
     * charged to no one), which its bytes are charged to from now on, as
     * byte limits do */
    if (sl_uexp_cur != NULL && id != NULL) {
        sl_identity_of_req(lc, id, &(struct sl_req){ .http = hd }, id->last);
        sl_usage_sess_add(s, id->last, SL_USAGE_REQUESTS, 1);
    }
    if (hd->method == SL_HTTP_M_CONNECT && !lc->upgrades.connect) {
        /* A tunnel to anywhere is not a request sluice can count: 405, as
         * nginx answers CONNECT, before any limit is charged; closed, as
         * the client may send tunnel bytes right behind it. */
        h->body = BODY_DROP;
        error_answer(s, 405, "CONNECT is not allowed on this listener (upgrades)");
        return;
    }
    size_t cap = hd->len + SL_HTTP_FWD_EXTRA;
    h->fwd = malloc(cap);
    if (h->fwd == NULL || id == NULL) {
        sl_session_close(s);
        return;
    }
    int fwd = lc->forwarded_headers;
    /* Only the upgrades the listener allows go upstream: any other one
     * (h2c above all) would turn the connection into one whose requests
     * sluice no longer sees. */
    h->fwd_len = (uint32_t)sl_http_fwd_request_in(hd, fwd ? id->ip : NULL, fwd ? "http" : NULL,
                                                  &lc->upgrades, &h->fwd_offered, h->fwd, cap);
    h->fwd_head = hd->method == SL_HTTP_M_HEAD;
    h->fwd_connect = hd->method == SL_HTTP_M_CONNECT;
    h->fwd_upgrade = hd->upgrade && h->fwd_offered != 0;
    /* its body may never come if we refuse it: then we close after */
    h->fwd_close = !hd->keep_alive || (hd->expect_continue && hd->body != SL_HTTP_BODY_NONE);
    h->fwd_keep10 = hd->minor == 0 && hd->keep_alive;
    h->fwd_plain = (hd->method == SL_HTTP_M_GET || hd->method == SL_HTTP_M_HEAD) &&
                   hd->body == SL_HTTP_BODY_NONE && !h->fwd_upgrade;
    if (!hd->keep_alive)
        h->last = h->client_close = 1;
    if (h->fwd_len == 0) {
        sl_session_close(s);
        return;
    }
    /* With upstream keep-alive the client's wish to close is sluice's to
     * honour (it closes after the answer), not the upstream's: the
     * upstream connection stays open for the next client. */
    h->fwd_unclosed = 0;
    if (lc->upstream_keepalive > 0 && hd->minor == 1 && !hd->keep_alive) {
        h->fwd_len = (uint32_t)sl_http_fwd_drop_close(h->fwd, h->fwd_len);
        h->fwd_unclosed = 1;
    }
    struct sl_req r = { .http = hd };
    if (s->meter[0] != NULL || s->meter[1] != NULL)
        sl_identity_of_req(lc, id, &r, id->last); /* byte limits charge this request's */
    /* adaptive concurrency counts requests, not tunnels (an upgrade's or
     * CONNECT's connection lives as long as its client wants) */
    uint8_t ak = sl_sadapt_on(s) && !h->fwd_upgrade && !h->fwd_connect;
    if (!s->l->limited && !sl_sess_meters_owe(s) && !ak) {
        if (s->alog != NULL)
            sl_alog_sent(s);
        send_head(s, NULL, 0); /* the fast path: no limits */
        return;
    }
    if (sl_sess_enqueue(s, &r, 0, 0, 0, SL_PK_PLAIN) < 0)
        return;
    if (ak) {
        struct sl_pend *e = sl_pend_at(&s->pend, sl_pend_count(&s->pend) - 1);
        e->adapt = 1;
        e->tier = sl_sadapt_tier(s, &r);
    }
}

/* Entry <p> was shed by adaptive concurrency: 503 with Retry-After, framed
 * for the request it answers (as a limit's refusal, verdict_text). */
static void adapt_refusal(struct sl_session *s, struct sl_pend *p)
{
    const struct sl_http_sess *h = s->http;
    unsigned flags = (h->fwd_close ? SL_HTTP_ANS_CLOSE : 0) | (h->fwd_keep10 ? SL_HTTP_ANS_KEEP : 0) |
                     (h->fwd_head ? SL_HTTP_ANS_HEAD : 0);
    char out[SL_HTTP_ANSWER_MAX];
    size_t n = sl_http_answer_overloaded(sl_sadapt_why(p->shed - 1u), flags, out, sizeof(out));
    free(p->text);
    p->text = n > 0 ? malloc(n) : NULL;
    if (p->text != NULL)
        memcpy(p->text, out, n);
    p->len = p->text != NULL ? (uint32_t)n : 0;
    p->state = SL_PEND_REJECT;
}

/* Verdicts in order: the request at the head of the ring goes or is
 * refused once its verdict is in. */
static void apply(struct sl_session *s)
{
    while (sl_pend_count(&s->pend) > 0 && s->state < SL_SESS_FLUSHING) {
        struct sl_pend *p = sl_pend_head(&s->pend);
        if (p->state == SL_PEND_WAIT)
            return;
        if (p->state == SL_PEND_DELAY) {
            if (p->due_us > sl_sess_waits_now()) {
                sl_sess_park(s, p->due_us);
                return;
            }
            p->state = SL_PEND_ALLOW;
        }
        if (p->state == SL_PEND_ALLOW && sl_sess_meters_owe(s)) {
            /* a reject byte limit is in debt: wait for its take, or refuse */
            struct sl_verdict v;
            int g = sl_sess_meter_gate(s, SL_PK_PLAIN, 0, &v);
            if (g == SL_METER_HOLD) {
                s->meter_hold = 1;
                return;
            }
            if (g == SL_METER_REFUSE)
                sl_sess_verdict(p, &v);
        }
        if (p->state == SL_PEND_ALLOW && p->adapt) {
            /* adaptive concurrency: a place, a wait (resumed), or 503 */
            int g = sl_sadapt_admit(s, p);
            if (g == SL_SADAPT_WAIT)
                return;
            if (g == SL_SADAPT_SHED)
                adapt_refusal(s, p);
            s->http->fwd_placed = g == SL_SADAPT_GO && p->adapt;
        }
        struct sl_pend e;
        sl_pend_pop(&s->pend, &e);
        if (e.state == SL_PEND_ALLOW && s->alog != NULL)
            sl_alog_sent(s);
        if (e.state == SL_PEND_ALLOW)
            send_head(s, e.text, e.len);
        else
            refuse(s, e.text, e.len);
    }
}

/* Frames what the client sent, up to what must wait. With nothing unread
 * (no chunk), the framer is still asked while a request is in its body:
 * a message's end takes no byte, and a request whose last byte came
 * before its verdict ends only when the framer is asked again. */
static void frame(struct sl_session *s)
{
    struct sl_http_sess *h = s->http;
    struct sl_buf *b = s->cin;
    while ((b != NULL || h->in_body) && s->state < SL_SESS_FLUSHING) {
        if (b == NULL && (h->tunnel || h->last))
            return;
        if (h->tunnel) {
            send_span(s, sl_sess_side_stream(s, 1), b, b->start, b->end);
            b->start = b->end;
            return;
        }
        if (h->last && !h->in_body) {
            /* the last request is whole: nothing after it is read (a
             * client that sent more after its close wants the lingering
             * close: what it sends must not meet a closed socket) */
            if (b->start < b->end)
                s->cl_said = 0;
            sl_sess_pause(s, 0, SL_PAUSE_DONE, 1);
            b->start = b->end;
            return;
        }
        if (sl_pend_count(&s->pend) > 0 || h->hold || h->upgrade_wait) {
            if (b != NULL && b->start < b->end)
                sl_sess_pause(s, 0, SL_PAUSE_DECIDE, 1);
            return;
        }
        if (h->qn == HQ_MAX && !h->in_body) {
            h->hold = 1; /* a response's end lets it go */
            sl_sess_pause(s, 0, SL_PAUSE_DECIDE, 1);
            return;
        }
        enum sl_http_ev ev;
        long used = b != NULL ? sl_http_parse(&h->req, b->data + b->start, b->end - b->start, &ev)
                              : sl_http_parse(&h->req, "", 0, &ev);
        if (ev == SL_HTTP_EV_ERROR) {
            if (b != NULL)
                b->start = b->end;
            if (h->in_body && h->body == BODY_FWD) {
                /* The head went upstream and the body turned bad: the
                 * upstream has a cut request, and the connection ends.
                 * When it is the only one owed and nothing of its
                 * response came, the answer is ours: its turn is now. */
                sl_log_debug_rl("bad_request_body", "bad request body", "listener=%s err=\"%s\"",
                                s->l->name, h->req.err);
                if (h->qn != 1 || h->res_any || s->seg_n > 0) {
                    s->l->stats.protocol_errors++;
                    sl_session_close(s);
                    return;
                }
                response_ended(s);
            }
            error_answer(s, h->req.status, h->req.err);
            return;
        }
        if (b == NULL) {
            /* nothing was given: nothing taken */
        } else if (h->in_body) {
            if (h->body == BODY_FWD)
                send_span(s, sl_sess_side_stream(s, 1), b, b->start, b->start + (uint32_t)used);
            b->start += (uint32_t)used;
        } else {
            b->start += (uint32_t)used; /* head bytes: the framer holds a copy */
        }
        if (ev == SL_HTTP_EV_NEED)
            return;
        if (ev == SL_HTTP_EV_HEAD) {
            h->in_body = 1;
            h->body = BODY_NONE;
            on_request(s);
            apply(s);
        } else if (ev == SL_HTTP_EV_END) {
            h->in_body = 0;
            h->body = BODY_NONE;
            /* the request that asked for the close is whole, nothing read
             * after it: the client may send no more (RFC 9112, 9.6), so
             * the close needs no lingering (session.c) */
            if (h->last && h->client_close)
                s->cl_said = b == NULL || b->start == b->end;
        }
    }
}

static void client_in(struct sl_session *s, struct sl_buf *b, size_t n)
{
    (void)b, (void)n;
    if (s->http == NULL) { /* out of memory at the start */
        sl_session_close(s);
        return;
    }
    frame(s);
    if (s->state < SL_SESS_FLUSHING)
        head_clock(s);
}

/* After a verdict, a delay, a meter's take or a response: go on. */
static void resume(struct sl_session *s)
{
    struct sl_http_sess *h = s->http;
    if (h->again_due) {
        /* the request sent again waits for its new connection */
        if (s->state != SL_SESS_RELAY)
            return;
        h->again_due = 0;
        send_head(s, h->again_fields, h->again_fields_len);
        h->again_fields = NULL;
        if (s->state >= SL_SESS_FLUSHING)
            return;
    }
    apply(s);
    if (sl_pend_count(&s->pend) > 0 || s->state >= SL_SESS_FLUSHING)
        return;
    if (h->hold && h->qn < HQ_MAX)
        h->hold = 0;
    frame(s);
    if (s->state >= SL_SESS_CLOSED)
        return;
    if (sl_pend_count(&s->pend) == 0 && !h->hold && !h->upgrade_wait)
        sl_sess_pause(s, 0, SL_PAUSE_DECIDE, 0);
    head_clock(s);
    sl_sess_rx_release(&s->cin);
    sl_sess_ring_release(s);
    sl_sess_drain_check(s);
    eof_check(s);
}

/* After the client's EOF: once every whole request it sent is answered,
 * the conversation is over (an upstream need not close on a half-close,
 * and the connection's places go back at once). A partial request never
 * goes upstream: a head never whole is dropped; a body cut short ends the
 * connection (the upstream holds a cut request: nothing after it can be
 * answered in order). */
static void eof_check(struct sl_session *s)
{
    struct sl_http_sess *h = s->http;
    if (!h->eof || s->state >= SL_SESS_FLUSHING || sl_pend_count(&s->pend) > 0 || h->hold ||
        h->upgrade_wait || (s->cin != NULL && s->cin->start < s->cin->end))
        return; /* whole requests may still wait to be framed */
    if (h->in_body || s->inflight == 0) {
        sl_sess_finish(s);
    }
}

static int client_eof(struct sl_session *s)
{
    struct sl_http_sess *h = s->http;
    if (h == NULL || h->tunnel)
        return 0; /* a tunnel's half-close travels on */
    /* Requests whole before the EOF (pipelined, or waiting for a verdict
     * or a delay) still go upstream and are answered: the upstream must
     * not see the half-close first. */
    h->eof = 1;
    eof_check(s);
    return SL_EOF_KEEP;
}

/* ---- responses ---------------------------------------------------------------- */

/* A final response ended: it paid what its request owed. Returns 1 when
 * local answers are due (the caller sends what came before them first). */
static int response_ended(struct sl_session *s)
{
    struct sl_http_sess *h = s->http;
    if (h->qn > 0) {
        if (h->q[h->qh].placed) /* ended with no response head */
            sl_sadapt_end(s, 0, SL_SADAPT_DROP);
        free(h->q[h->qh].fields);
        h->q[h->qh].fields = NULL;
        h->qh = (h->qh + 1) % HQ_MAX;
        h->qn--;
    }
    /* What was said of the response in progress is over: the next
     * request's deadline (await_clock) and its 502/504 (nothing of its
     * response was sent yet) go by its own response. */
    h->res_any = h->res_sent = h->res_final = 0;
    int due = 0;
    if (s->seg_n > 0) {
        struct sl_reply_seg *g = &s->segs[s->seg_head];
        if (g->n > 0) {
            g->n--;
            sl_sess_paid(s);
        }
        due = g->n == 0;
    } else if (s->tail_n > 0) {
        s->tail_n--;
        sl_sess_paid(s);
    }
    if (h->hold && h->qn < HQ_MAX)
        sl_sess_resume_later(s);
    return due;
}

/* The upstream's answer cannot be framed (or never came): a 502 in its
 * place if none of it went out yet, and the connection ends. */
static void bad_gateway(struct sl_session *s, int status, const char *why)
{
    struct sl_http_sess *h = s->http;
    h->reuse_ok = 0;
    sl_log_warn_rl("bad_upstream_response", "bad upstream response", "listener=%s err=\"%s\"",
                   s->l->name, why);
    if (h->res_sent || h->qn == 0) {
        sl_sess_finish(s);
        return;
    }
    char out[SL_HTTP_ANSWER_MAX];
    size_t n = sl_http_answer_error(status, NULL, out, sizeof(out));
    if (h->q[h->qh].head)
        n = sl_http_answer_head_only(out, n);
    if (h->q[h->qh].placed) {
        /* no answer in time, or the upstream gave up on it: overload */
        h->q[h->qh].placed = 0;
        sl_sadapt_end(s, 0, SL_SADAPT_OVERLOAD);
    }
    /* Its turn is now: every reply before it has passed. */
    response_ended(s);
    if (sl_sess_send(s, (uv_stream_t *)&s->client, NULL, out, n) < 0) {
        sl_session_close(s);
        return;
    }
    if (s->alog != NULL)
        sl_alog_done(s, status);
    count_status(s, status);
    sl_sess_finish(s);
}

/* A response's head is whole: it goes on with the fields its request
 * earned. */
static int on_response(struct sl_session *s, struct sl_buf *b)
{
    struct sl_http_sess *h = s->http;
    const struct sl_http_head *hd = &h->res.head;
    if (h->qn == 0) {
        bad_gateway(s, 502, "a response no request asked for");
        return -1;
    }
    struct hq *e = &h->q[h->qh];
    if (hd->status == 101 && !e->upgrade) {
        /* a switch nobody asked for: what follows is not HTTP, and the
         * requests behind would wait for answers that never come */
        bad_gateway(s, 502, "101 to a request that did not ask to upgrade");
        return -1;
    }
    if (hd->status == 101 && !sl_http_upgrade_answers(hd, &lconf(s)->upgrades, e->offered)) {
        /* a switch to a protocol the request did not offer, or the
         * listener does not allow: not a tunnel sluice may open */
        bad_gateway(s, 502, "101 to a protocol the request did not offer or upgrades does not allow");
        return -1;
    }
    h->res_final = hd->status >= 200 || hd->status == 101;
    h->res_close = !hd->keep_alive;
    if (h->res_final && e->placed) {
        /* the latency of a request is to its response's head (what the
         * body takes depends on the client reading it); a 5xx says
         * overload, not a latency */
        e->placed = 0;
        sl_sadapt_end(s, e->sent_ns, hd->status >= 500 ? SL_SADAPT_OVERLOAD : SL_SADAPT_SAMPLE);
    }
    count_status(s, hd->status);
    const char *extra = h->res_final ? e->fields : NULL;
    size_t elen = extra ? e->fields_len : 0;
    char closing[SL_HTTP_ANSWER_MAX];
    if (h->res_final && e->unclosed && hd->keep_alive && elen + 20 <= sizeof(closing)) {
        /* the client asked to close: the answer says it will be */
        memcpy(closing, extra ? extra : "", elen);
        memcpy(closing + elen, "Connection: close\r\n", 19);
        extra = closing;
        elen += 19;
    }
    if (h->res_final && s->alog != NULL)
        sl_alog_head(s);
    char *out = sl_outbuf_room(&s->out[0], hd->len + elen);
    size_t n = out ? sl_http_fwd_with(hd, extra ? extra : "", elen, out, hd->len + elen) : 0;
    if (n > 0 && extra == closing)
        n = sl_http_fwd_drop_keepalive(out, n); /* one word on closing, not two */
    (void)b;
    if (n == 0) {
        sl_session_close(s);
        return -1;
    }
    sl_outbuf_commit(&s->out[0], n);
    h->res_sent = 1;
    if (h->res_final)
        await_clock(s);
    return 0;
}

static void upstream_in(struct sl_session *s, struct sl_buf *b)
{
    struct sl_http_sess *h = s->http;
    if (h == NULL) {
        sl_session_close(s);
        return;
    }
    if (h->again != NULL) /* its response started: it is not sent again */
        again_forget(h);
    if (s->wq.q != NULL) /* the upstream is alive: its deadline starts again */
        sl_tq_touch(&s->l->awaiting, &s->wq, sl_sess_now_ms(s));
    /* A message's end takes no byte: the framer is asked once more after
     * the last byte it took, to say so. */
    while ((b->start < b->end || h->res_body) && s->state < SL_SESS_FLUSHING) {
        if (h->tunnel) {
            send_span(s, (uv_stream_t *)&s->client, b, b->start, b->end);
            b->start = b->end;
            return;
        }
        if (sl_http_idle(&h->res)) {
            h->res_any = h->res_sent = h->res_final = 0;
            if (h->qn > 0)
                sl_http_expect(&h->res, h->q[h->qh].head, h->q[h->qh].connect);
        }
        h->res_any = 1;
        enum sl_http_ev ev;
        long used = sl_http_parse(&h->res, b->data + b->start, b->end - b->start, &ev);
        if (ev == SL_HTTP_EV_ERROR) {
            b->start = b->end;
            bad_gateway(s, 502, h->res.err);
            return;
        }
        if (h->res_body) {
            send_span(s, (uv_stream_t *)&s->client, b, b->start, b->start + (uint32_t)used);
            h->res_sent = 1;
        }
        b->start += (uint32_t)used;
        if (ev == SL_HTTP_EV_NEED || (ev == SL_HTTP_EV_BODY && used == 0))
            return;
        if (ev == SL_HTTP_EV_HEAD) {
            h->res_body = 1;
            if (on_response(s, b) < 0)
                return;
            continue;
        }
        if (ev != SL_HTTP_EV_END)
            continue;
        h->res_body = 0;
        if (!h->res_final) {
            /* a 1xx: the final response follows (a 502 or 504 may still
             * take its place: the 1xx was whole) */
            h->res_sent = 0;
            continue;
        }
        int status = h->res.head.status;
        int connect = h->q[h->qh].connect;
        int close = h->res_close;
        if (s->alog != NULL)
            sl_alog_done(s, status);
        int due = response_ended(s);
        /* the stream is at a boundary the upstream keeps open (a body
         * delimited by the close ends at upstream_eof, never here) */
        h->reuse_ok = !close && h->qn == 0 && status != 101 && !connect;
        if (h->upgrade_wait && h->qn == 0) {
            /* the upgrade or CONNECT was answered */
            h->upgrade_wait = 0;
            if (status == 101 || (connect && status >= 200 && status < 300)) {
                h->tunnel = 1;
                sl_tq_remove(&s->wq);
                sl_tq_remove(&s->hq);
            }
            sl_sess_resume_later(s);
        }
        if (due) {
            sl_sess_emit_locals(s);
        }
        await_clock(s);
        eof_check(s);
        if ((close || (h->last && h->qn == 0 && sl_pend_count(&s->pend) == 0 && !h->in_body)) &&
            !h->tunnel && s->state < SL_SESS_FLUSHING) {
            /* the upstream closes after it, or the client asked to: the
             * connection ends once the client has every byte */
            sl_sess_finish(s);
            return;
        }
    }
}

/* The kept connection failed before any byte of the answer to the first
 * request sent on it (the upstream closed it as the request went): that
 * request, a GET or HEAD without a body, goes once more on a new
 * connection instead of a 502, as nginx does. */
static int send_again(struct sl_session *s)
{
    struct sl_http_sess *h = s->http;
    if (h->again == NULL || s->up_kept != 1 || h->qn != 1 || h->res_any || h->tunnel ||
        s->state != SL_SESS_RELAY || (h->in_body && h->body == BODY_FWD))
        return 0;
    struct hq *e = &h->q[h->qh];
    free(h->fwd);
    h->fwd = h->again;
    h->fwd_len = h->again_len;
    h->again = NULL;
    h->again_fields = e->fields;
    h->again_fields_len = e->fields_len;
    e->fields = NULL;
    h->fwd_head = e->head;
    h->fwd_connect = h->fwd_upgrade = 0;
    h->fwd_offered = 0;
    h->fwd_unclosed = e->unclosed;
    if (e->placed) { /* sent again uncounted: its place goes back */
        e->placed = 0;
        sl_sadapt_end(s, 0, SL_SADAPT_DROP);
    }
    h->qh = (h->qh + 1) % HQ_MAX;
    h->qn--;
    h->again_done = h->again_due = 1;
    sl_log_debug_rl("upstream_again", "kept upstream connection closed: request sent again",
                    "listener=%s", s->l->name);
    await_clock(s);
    sl_sess_upstream_again(s, 1);
    return 1;
}

static void upstream_eof(struct sl_session *s, int err)
{
    struct sl_http_sess *h = s->http;
    (void)err;
    if (h != NULL && send_again(s))
        return;
    if (h != NULL)
        h->reuse_ok = 0;
    if (h == NULL) {
        sl_sess_finish(s);
        return;
    }
    if (!h->tunnel && h->res_body && sl_http_eof(&h->res) == SL_HTTP_EV_END && h->res_final) {
        /* a body delimited by the close */
        h->res_body = 0;
        if (s->alog != NULL)
            sl_alog_done(s, h->res.head.status);
        if (response_ended(s)) {
            sl_sess_emit_locals(s);
        }
    } else if (!h->tunnel && h->qn > 0 && !h->res_sent) {
        bad_gateway(s, 502, "the upstream closed before it answered");
        return;
    }
    sl_sess_finish(s);
}

/* ---- the table ---------------------------------------------------------------- */

static void http_init(struct sl_session *s)
{
    const struct sl_listener_conf *lc = lconf(s);
    struct sl_http_caps caps = {
        .max_line = (uint32_t)lc->max_request_line,
        .max_field_line = (uint32_t)lc->max_header_line,
        .max_fields = (uint32_t)lc->max_headers,
        .max_head = (uint32_t)lc->max_header_size,
        .max_body = lc->max_request,
    };
    struct sl_http_caps rcaps = caps;
    rcaps.max_body = UINT64_MAX; /* a response's body is the upstream's business */
    s->http = calloc(1, sizeof(*s->http));
    if (s->http == NULL || sl_http_init(&s->http->req, SL_HTTP_REQUESTS, &caps) < 0 ||
        sl_http_init(&s->http->res, SL_HTTP_RESPONSES, &rcaps) < 0) {
        /* the session cannot work: nothing is read, the sweep's timers end it */
        free(s->http);
        s->http = NULL;
    }
}

static void http_free(struct sl_session *s)
{
    struct sl_http_sess *h = s->http;
    if (s->alog != NULL)
        sl_alog_free(s);
    if (h == NULL)
        return;
    sl_http_free(&h->req);
    sl_http_free(&h->res);
    free(h->fwd);
    again_forget(h);
    free(h->again_fields);
    for (uint32_t i = 0; i < h->qn; i++)
        free(h->q[(h->qh + i) % HQ_MAX].fields);
    free(h);
    s->http = NULL;
}

static void release(struct sl_session *s)
{
    sl_sess_ring_release(s);
}

static int at_boundary(const struct sl_session *s)
{
    return s->http == NULL || sl_http_idle(&s->http->res);
}

static size_t answer(struct sl_session *s, enum sl_answer what, const char *limit, char *out,
                     size_t cap)
{
    size_t n = 0;
    switch (what) {
    case SL_ANSWER_MAX_CLIENTS:
        n = sl_http_answer_error(503, "max number of clients reached", out, cap);
        break;
    case SL_ANSWER_NO_FD:
        n = sl_http_answer_error(503, "out of file descriptors", out, cap);
        break;
    case SL_ANSWER_UPSTREAM_DOWN:
        n = sl_http_answer_error(502, "upstream unavailable", out, cap);
        break;
    case SL_ANSWER_CONN_LIMIT:
        n = sl_http_answer_connections(limit ? limit : "", out, cap);
        break;
    }
    if (n > 12)
        count_status(s, atoi(out + 9));
    return n;
}

/* A connection refused before it has a session (out of descriptors for
 * its upstream): the 503 a session would give, then the close. */
static size_t refusal(enum sl_answer what, char *out, size_t cap)
{
    if (what != SL_ANSWER_NO_FD)
        return 0;
    return sl_http_answer_error(503, "out of file descriptors", out, cap);
}

static size_t verdict_text(struct sl_session *s, const struct sl_verdict *v, char *out,
                           size_t cap)
{
    const struct sl_http_sess *h = s->http;
    enum sl_http_rl_mode mode = (enum sl_http_rl_mode)lconf(s)->rate_limit_headers;
    if (v->kind == SL_VERDICT_REJECT) {
        /* framed for the request it answers: no body to a HEAD, and an
         * HTTP/1.0 connection that stays open is told so (else its client
         * waits for a close that never comes) */
        unsigned flags = 0;
        if (h != NULL)
            flags = (h->fwd_close ? SL_HTTP_ANS_CLOSE : 0) | (h->fwd_keep10 ? SL_HTTP_ANS_KEEP : 0) |
                    (h->fwd_head ? SL_HTTP_ANS_HEAD : 0);
        return sl_http_answer_limited(v, mode, flags, out, cap);
    }
    return sl_http_answer_fields(v, mode, out, cap);
}

/* header_timeout: 408, and the connection ends. */
static void header_late(struct sl_session *s)
{
    if (s->http == NULL) {
        sl_session_close(s);
        return;
    }
    error_answer(s, 408, NULL);
}

/* upstream_timeout: 504 in the response's place, and the connection ends. */
static void upstream_late(struct sl_session *s)
{
    if (s->http == NULL || s->http->res_sent) {
        sl_session_close(s);
        return;
    }
    /* Part of the response went out: the close says it. */
    bad_gateway(s, 504, "no response within upstream_timeout");
}

static uint32_t marker_due(struct sl_session *s, uint32_t kind)
{
    (void)s, (void)kind;
    return 0;
}

static void marker_gone(struct sl_session *s)
{
    (void)s;
}

/* A tunnel's bytes may come at any time; else as RESP: quiet is idle. */
static int busy(const struct sl_session *s)
{
    (void)s;
    return 0;
}

/* The upstream connection may serve another client: its last response
 * ended cleanly and kept it open, no request is in flight or part-sent,
 * nothing of a response has come, and it is not a tunnel. */
static int reusable(const struct sl_session *s)
{
    const struct sl_http_sess *h = s->http;
    return h != NULL && h->reuse_ok && h->qn == 0 && !h->tunnel && !h->upgrade_wait &&
           !h->res_body && sl_http_idle(&h->res) && !(h->in_body && h->body == BODY_FWD);
}

static void pool_drain(void)
{
}

const struct sl_sess_proto sl_sess_http = {
    .name = "http",
    .framed = 1,
    .init = http_init,
    .at_boundary = at_boundary,
    .client_in = client_in,
    .client_eof = client_eof,
    .upstream_in = upstream_in,
    .upstream_eof = upstream_eof,
    .resume = resume,
    .release = release,
    .free = http_free,
    .answer = answer,
    .refusal = refusal,
    .verdict_text = verdict_text,
    .header_late = header_late,
    .upstream_late = upstream_late,
    .marker_due = marker_due,
    .marker_gone = marker_gone,
    .busy = busy,
    .pool_drain = pool_drain,
    .reusable = reusable,
};

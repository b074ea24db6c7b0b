/* sluice — RESP in a session: requests framed, decided in order, replies
 * matched to them, local replies slotted in where Redis's own would be.
 *
 *   client bytes --> framer --> requests --> verdicts (in order) --> upstream
 *   upstream bytes --> reply scanner --> model (resp_conn) --> client,
 *                      with local replies (rejections, errors) in their place
 *
 * Bytes are never copied on the way through: the framer finds request
 * boundaries in the client chunk and the bytes of complete requests are
 * written from it. A partial request stays in the chunk until it is
 * complete (so it can still be refused) unless it grows past SL_STREAM_AT:
 * then it is decided by its head and its bytes stream as they come.
 *
 * What Redis makes of the connection (CLIENT REPLY, MULTI, pub/sub,
 * MONITOR, RESET) is the pure model in proto/resp_conn.c; what is here is
 * the glue: AUTH (an identity that counts once Redis accepts it), the order
 * of verdicts, EXEC aborted by a rejection inside MULTI, header_timeout. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/log.h"
#include "core/resolve.h"
#include "core/tq.h"
#include "identity/identity.h"
#include "net/listener.h"
#include "net/session.h"
#include "net/session-i.h"
#include "proto/resp.h"
#include "proto/resp_cmd.h"
#include "proto/resp_conn.h"
#include "proto/resp_reply.h"
#include "shape/meter.h"

struct prec;
/* A queue of records of a pooled session's requests (see struct prec). */
struct pq {
    struct prec **e;
    uint32_t      head, n, cap;
};

/* What only RESP keeps of a session: it lives right after the session
 * (state_size), zeroed at the start; the core never reads it. */
struct sl_resp_sess {
    struct sl_resp_conn rc;         /* what Redis makes of the connection */
    struct sl_resp     *framer;     /* request framer, while requests come */
    uint64_t            req_fwd;    /* bytes of the request in progress already sent on */
    uint8_t             head_state; /* request in progress decided at its head: 1 sent, 2 dropped */
    uint32_t            head_replies; /* ... replies it will owe once complete (1 sent) */
    uint8_t             quit;       /* a QUIT was framed: nothing after it is */
    uint8_t             setup_left; /* set-up commands that may still go uncharged;
                                       0 once the connection's set-up is over */
    uint8_t             sub_hold;   /* the ring's head waits for confirmations that say
                                       if the client is still subscribed */
    struct sl_ident_state *auth_next; /* who it will be if the AUTH / HELLO sent succeeds */
    uint64_t            auth_seq;   /* ... which is reply number <auth_seq> */
    struct sl_reply_pick *auth_pick;/* ... an EXEC's reply, judged by element <auth_elem> */
    uint32_t            auth_elem;  /* ... the AUTH's place among the commands queued */
    uint8_t             auth_in_multi; /* ... the AUTH was queued in MULTI: judged at EXEC */
    uint8_t             auth_exec_framed; /* ... and an EXEC behind it is framed, not sent */
    uint8_t             auth_hold;  /* framing stops until the AUTH is answered (limits
                                       by resp_user: what follows is charged to its user) */
    uint64_t            owed_total; /* upstream replies owed since the start */
    uint64_t            paid_total; /* upstream replies received against them */
    struct sl_reply_scan scan;      /* upstream reply boundaries */
    uint8_t             reply_first;/* first byte of the upstream reply in progress */
    uint8_t             swallow;    /* dropping the upstream reply in progress */
    uint8_t             pick_on;    /* the reply in progress is fed to <auth_pick> */
    /* a pooled listener's (s->link): */
    struct sl_rcmd_pin  pin;        /* why the client holds a connection of its own */
    struct sl_pool_key  key;        /* the pool key its connection state selects */
    char               *pass;       /* ... the password that key's connections log in with */
    uint32_t            pass_len;
    struct pq           pool_pre;   /* records of the requests in the ring that have one */
    struct pq           pool_ans;   /* ... of requests sent whose answers say something */
    uint8_t             pool_hold;  /* the ring's head waits for a pinned connection */
    uint64_t            pin_until;  /* ... queued past the cap until then (waits' clock) */
    char               *name;       /* CLIENT SETNAME, kept here */
    char               *lib[2];     /* CLIENT SETINFO LIB-NAME, LIB-VER */
};

static inline struct sl_resp_sess *rs(const struct sl_session *s)
{
    return s->pstate;
}

static void process(struct sl_session *s);
static uint32_t refused(struct sl_session *s);
static int  pool_classify(struct sl_session *s, const struct sl_resp_req *q, int stream);
static int  pool_wait(struct sl_session *s, const struct prec *c);
static void pool_local(struct sl_session *s, const struct prec *c);
static void pool_sent(struct sl_session *s, struct prec *c, uint64_t before);
static void pool_answered(struct sl_session *s);
static int  pool_unpin_due(const struct sl_session *s);
static void pool_settle(struct sl_session *s);
static struct prec *pq_pop(struct pq *q);
static struct prec *pq_head(const struct pq *q);
static int  prec_is_local(const struct sl_session *s, const struct prec *c);
static void prec_free(struct prec *p);
static void pq_free(struct pq *q);

/* <n> upstream replies are owed: numbered, so an AUTH's can be told apart. */
static void owe(struct sl_session *s, uint32_t n)
{
    rs(s)->owed_total += n;
    sl_sess_owe(s, n);
}
static void head_clock(struct sl_session *s);

/* ---- framers ---------------------------------------------------------------- */

/* Framers are lent to sessions only while a request is being read, so an
 * idle connection holds none; a small pool makes the lending two pointer
 * moves instead of malloc + free per read. */
#define FRAMER_POOL 64
static struct sl_resp *framer_pool[FRAMER_POOL];
static unsigned framer_pooled;

static void pool_drain(void)
{
    while (framer_pooled > 0) {
        struct sl_resp *f = framer_pool[--framer_pooled];
        sl_resp_free(f);
        free(f);
    }
}

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

/* The session's framer goes back when nothing of a request is left in it. */
static void framer_release_if_idle(struct sl_session *s)
{
    struct sl_resp_sess *r = rs(s);
    if (r->framer != NULL && sl_pend_count(&s->pend) == 0 && r->req_fwd == 0 &&
        r->head_state == 0 && sl_resp_idle(r->framer)) {
        framer_give(r->framer);
        r->framer = NULL;
    }
    sl_sess_ring_release(s);
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
    return rs(s)->auth_hold && rs(s)->auth_next != NULL &&
           (rs(s)->auth_seq != 0 || !rs(s)->auth_in_multi || rs(s)->auth_exec_framed);
}

/* The AUTH candidate is settled or void: forget it, and let framing go on. */
static void auth_drop(struct sl_session *s)
{
    free(rs(s)->auth_next);
    rs(s)->auth_next = NULL;
    free(rs(s)->auth_pick);
    rs(s)->auth_pick = NULL;
    rs(s)->auth_seq = 0;
    rs(s)->auth_in_multi = 0;
    rs(s)->auth_exec_framed = 0;
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
    if (rs(s)->auth_hold && !auth_waits(s)) {
        rs(s)->auth_hold = 0;
        sl_sess_resume_later(s);
    }
}

/* One non-push upstream reply has ended. Returns 1 when local replies are
 * now due (the caller flushes the upstream bytes before them). */
/* A reply paid what was owed: if it answers a pending AUTH and is not an
 * error, the client is now who that AUTH said. */
static void paid_one(struct sl_session *s)
{
    rs(s)->paid_total++;
    if (s->link != NULL && rs(s)->pool_ans.n > 0)
        pool_answered(s);
    if (rs(s)->auth_next != NULL && rs(s)->paid_total == rs(s)->auth_seq) {
        /* Inside a transaction the AUTH's own element of EXEC's reply
         * says; +QUEUED said nothing. */
        uint8_t first = rs(s)->auth_pick != NULL ? rs(s)->auth_pick->found : rs(s)->reply_first;
        if (first != 0 && first != '-' && first != '!')
            *s->ident = *rs(s)->auth_next;
        auth_drop(s);
        auth_wake(s);
    }
    sl_sess_paid(s);
}

static int reply_ended(struct sl_session *s)
{
    if (s->seg_n > 0) {
        struct sl_reply_seg *g = &s->segs[s->seg_head];
        if (g->n == 0)
            return 1; /* unsolicited (pub/sub): locals waited for the boundary */
        g->n--;
        if (g->flags & SL_SEG_MARK)
            sl_sess_paid(s); /* an unsubscribe-all's: not in owed_total */
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

/* A request sluice refuses: how many replies the client expects for it
 * (the rejection goes in their place); under CLIENT REPLY SKIP a PING
 * takes its place upstream (see sl_rconn_refused). */
static uint32_t refused(struct sl_session *s)
{
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    int send_ping;
    uint32_t n = sl_rconn_refused(&rs(s)->rc, &send_ping);
    if (send_ping && sl_sess_send(s, (uv_stream_t *)&s->upstream, NULL, ping, sizeof(ping) - 1) < 0)
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
    sl_rconn_settled(&rs(s)->rc, g->n);
    g->n = 0;
    return 1;
}

/* A request goes upstream: what it changes in the connection's model, and
 * the replies it is owed. An unsubscribe of everything queues the marker
 * that counts its confirmations when its turn comes. */
static uint32_t commit(struct sl_session *s, uint8_t fx, uint32_t nchan)
{
    int unsub;
    uint32_t n = sl_rconn_commit(&rs(s)->rc, fx, nchan, &unsub);
    if (unsub >= 0)
        sl_sess_local(s, NULL, (uint32_t)unsub, SL_SEG_UNSUB);
    return n;
}

/* Bookkeeping for a request that goes upstream. */
static void allowed(struct sl_session *s, int kind, uint32_t replies)
{
    if (kind == SL_PK_EXEC || kind == SL_PK_DISCARD || kind == SL_PK_RESET) {
        if (rs(s)->auth_in_multi && rs(s)->auth_next != NULL) {
            /* An AUTH queued in the transaction counts by its element of
             * EXEC's reply; DISCARD and RESET drop it unrun. */
            if (kind == SL_PK_EXEC && rs(s)->rc.in_multi && replies == 1 &&
                (rs(s)->auth_pick != NULL ||
                 (rs(s)->auth_pick = malloc(sizeof(*rs(s)->auth_pick))) != NULL)) {
                rs(s)->auth_seq = rs(s)->owed_total + 1;
                rs(s)->auth_exec_framed = 0;
            } else {
                auth_drop(s);
            }
        }
    } else if (kind == SL_PK_AUTH && rs(s)->auth_next != NULL) {
        if (rs(s)->rc.in_multi) {
            rs(s)->auth_in_multi = 1; /* +QUEUED says nothing */
            rs(s)->auth_elem = rs(s)->rc.multi_queued;
        } else if (replies == 1) {
            rs(s)->auth_seq = rs(s)->owed_total + 1;
        } else {
            auth_drop(s); /* no reply to judge by */
        }
    }
    sl_rconn_allowed(&rs(s)->rc, kind, replies);
    if (replies > 0)
        owe(s, replies);
    if (kind == SL_PK_QUIT && replies > 0) {
        /* Redis writes QUIT's +OK and closes at once (inside MULTI too). A
         * client that pools connections looks for that close before it
         * sends the next command on one: it must come with the +OK, not
         * when the upstream's FIN is read, a loop turn or more later. So
         * the client's side is shut down as soon as the +OK is written.
         * (Under CLIENT REPLY OFF there is nothing to wait for but the
         * upstream, which still has to be sent the QUIT: its close ends
         * the session, as before.) */
        static char none[] = "";
        sl_sess_local(s, none, 0, SL_SEG_CLOSE);
    }
    auth_wake(s);
}

/* A rejected request: its reply is the rejection, in its place. Inside a
 * MULTI it also dooms the EXEC, as a queuing error does in Redis. */
static void rejected(struct sl_session *s, char *text, uint32_t len, uint32_t replies)
{
    s->l->stats.rejected++;
    sl_rconn_rejected(&rs(s)->rc);
    if (replies > 0 && text != NULL)
        sl_sess_local(s, text, len, SL_SEG_OWNED);
    else
        free(text);
}

/* EXEC after a rejection inside MULTI: DISCARD goes upstream instead (the
 * transaction must end there too), and its +OK is replaced by EXECABORT. */
static void exec_abort(struct sl_session *s, uint32_t replies)
{
    static const char discard[] = "*1\r\n$7\r\nDISCARD\r\n";
    static char abort_msg[] = "-EXECABORT Transaction discarded because of previous errors.\r\n";
    sl_rconn_exec_aborted(&rs(s)->rc);
    if (rs(s)->auth_in_multi && rs(s)->auth_next != NULL) {
        auth_drop(s); /* the transaction never runs */
        auth_wake(s);
    }
    s->l->stats.rejected++;
    if (sl_sess_send(s, (uv_stream_t *)&s->upstream, NULL, discard, sizeof(discard) - 1) < 0) {
        sl_session_close(s);
        return;
    }
    /* Under CLIENT REPLY OFF or SKIP, Redis does not answer the DISCARD
     * and the client expects nothing. */
    if (replies == 0)
        return;
    owe(s, 1);
    sl_sess_local(s, abort_msg, sizeof(abort_msg) - 1, SL_SEG_SWALLOW);
}

/* A connection's set-up: the commands a client library sends as it
 * connects (sl_rconn_is_setup: SELECT, CLIENT SETNAME, INFO, COMMAND
 * DOCS ...), before the application's first command, are not charged to
 * requests limits, so a client whose identity is throttled can still
 * connect and be told so on its first real command (a library that
 * cannot finish its connect-time checks reconnects in a loop instead).
 * At most `setup_commands` of them per connection, so a client cannot
 * live in set-up; the first other command ends the set-up for good.
 * Commands that are never limited (AUTH, HELLO, MULTI, CLIENT REPLY ...)
 * neither use it up nor end it. Byte limits still see them. Returns 1
 * when <r> goes uncharged. */
static int setup_free(struct sl_session *s, const struct sl_resp_req *r, int kind)
{
    if (rs(s)->setup_left == 0 || kind != SL_PK_PLAIN)
        return 0;
    if (!sl_rconn_is_setup(r)) {
        rs(s)->setup_left = 0;
        return 0;
    }
    rs(s)->setup_left--;
    return 1;
}

/* Learns who the client is from its request. AUTH and HELLO ... AUTH only
 * count once the upstream accepts them (else anyone could spend alice's
 * quota by sending a wrong password as alice): they prepare a candidate
 * that the reply makes real. */
static void observe(struct sl_session *s, const struct sl_resp_req *r, int kind)
{
    if (!sl_identity_learns(r) || sl_sess_ident(s) == NULL)
        return;
    if (kind != SL_PK_AUTH) {
        sl_identity_observe(s->ident, r);
        return;
    }
    if (rs(s)->auth_next == NULL && (rs(s)->auth_next = malloc(sizeof(*rs(s)->auth_next))) == NULL)
        return;
    *rs(s)->auth_next = *s->ident;
    sl_identity_observe(rs(s)->auth_next, r);
    rs(s)->auth_seq = 0; /* set when it is sent */
}

static void protocol_error(struct sl_session *s, const char *msg)
{
    s->l->stats.protocol_errors++;
    sl_log_debug_rl("protocol_error", "protocol error", "listener=%s err=\"%s\"", s->l->name, msg);
    sl_sess_pause(s, 0, SL_PAUSE_DONE, 1);
    if (rs(s)->rc.reply_mode != SL_REPLY_ON) {
        /* Under CLIENT REPLY OFF, or SKIP with the skip still to come,
         * Redis says nothing either. It then keeps the connection open but
         * reads no more of it; sluice closes it. */
        static char none[] = "";
        sl_sess_local(s, none, 0, SL_SEG_CLOSE);
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
    sl_sess_local(s, text, (uint32_t)(n + 7), SL_SEG_OWNED | SL_SEG_CLOSE);
}

/* Applies, in order, every entry at the head of the ring whose verdict is
 * in; their bytes are at the start of the client chunk. */
static void apply(struct sl_session *s)
{
    if (sl_pend_count(&s->pend) == 0)
        return;
    struct sl_buf *b = s->cin;
    uint32_t from = b->start, to = b->start;
    while (sl_pend_count(&s->pend) > 0 && s->state < SL_SESS_FLUSHING) {
        /* The entry is taken out before it acts: what follows may close
         * the session. */
        struct sl_pend *p = sl_pend_head(&s->pend);
        struct sl_pend e = *p;
        if (e.state == SL_PEND_WAIT)
            break;
        if (e.state == SL_PEND_DELAY) {
            /* Parked: nothing behind it moves until its place comes. */
            if (e.due_us > sl_sess_waits_now()) {
                sl_sess_park(s, e.due_us);
                break;
            }
            e.state = p->state = SL_PEND_ALLOW; /* a delay is served */
        }
        if (e.state == SL_PEND_ALLOW && sl_rconn_sub_wait(&rs(s)->rc, e.fx, e.kind)) {
            rs(s)->sub_hold = 1;
            break;
        }
        if (e.state == SL_PEND_ALLOW && e.pooled) {
            /* pooled: one that needs a connection of its own waits for it */
            int w = pool_wait(s, pq_head(&rs(s)->pool_pre));
            if (w > 0)
                break;
            if (w < 0) {
                static const char busy[] = "-ERR sluice: too many clients hold an upstream "
                                           "connection of their own, try again\r\n";
                free(p->text);
                p->text = malloc(sizeof(busy) - 1);
                if (p->text != NULL)
                    memcpy(p->text, busy, sizeof(busy) - 1);
                p->len = p->text != NULL ? (uint32_t)(sizeof(busy) - 1) : 0;
                p->state = SL_PEND_REJECT;
                e = *p;
            }
        }
        if (e.state == SL_PEND_ALLOW && e.kind == SL_PK_PLAIN && sl_sess_meters_owe(s)) {
            /* A reject byte limit is in debt: the request waits for the
             * take at the store, or is refused. */
            struct sl_verdict v;
            int g = sl_sess_meter_gate(s, e.kind, e.span, &v);
            if (g == SL_METER_HOLD) {
                s->meter_hold = 1;
                break;
            }
            if (g == SL_METER_REFUSE) {
                sl_sess_verdict(p, &v);
                e = *p;
            }
        }
        sl_pend_pop(&s->pend, &e);
        struct prec *rec = e.pooled ? pq_pop(&rs(s)->pool_pre) : NULL;
        if (rec != NULL && e.state == SL_PEND_ALLOW && prec_is_local(s, rec)) {
            /* answered by sluice, in its place: its bytes never leave */
            sl_sess_to_upstream(s, b, from, to);
            from = to = to + e.span;
            pool_local(s, rec);
            prec_free(rec);
            free(e.text);
            if (s->state >= SL_SESS_CLOSED)
                return;
            continue;
        }
        uint64_t owed_before = rs(s)->owed_total;
        int forward = e.state == SL_PEND_ALLOW &&
                      !(e.kind == SL_PK_EXEC && rs(s)->rc.multi_dirty) &&
                      !(e.kind == SL_PK_TAIL && rs(s)->head_state == 2);
        if (e.kind == SL_PK_HEAD)
            rs(s)->req_fwd += e.span; /* sent or dropped: either way behind us */
        if (forward) {
            to += e.span;
            if (e.kind == SL_PK_HEAD) {
                /* Its replies are owed once it is whole: a request cut short
                 * by a protocol error gets none. */
                rs(s)->head_state = 1;
                rs(s)->head_replies = commit(s, e.fx, e.nchan);
            } else if (e.kind == SL_PK_TAIL) {
                rs(s)->head_state = 0;
                allowed(s, SL_PK_PLAIN, rs(s)->head_replies);
                rs(s)->head_replies = 0;
            } else {
                allowed(s, e.kind, commit(s, e.fx, e.nchan));
            }
            if (rec != NULL)
                pool_sent(s, rec, owed_before);
            continue;
        }
        prec_free(rec); /* refused: it changes nothing */
        sl_sess_to_upstream(s, b, from, to);
        from = to = to + e.span; /* the request's bytes never leave */
        if (e.kind == SL_PK_EXEC && e.state == SL_PEND_ALLOW) {
            exec_abort(s, commit(s, e.fx, e.nchan)); /* DISCARD goes in its place */
        } else if (e.kind == SL_PK_TAIL) {
            rs(s)->head_state = 0;
        } else {
            if (e.kind == SL_PK_HEAD)
                rs(s)->head_state = 2;
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
    sl_sess_to_upstream(s, b, from, to);
    b->start = to;
}

/* header_timeout: the clock runs while sluice waits for the client to
 * finish a request's head (the part that decides it), from when that
 * request began. Not while requests wait on sluice (verdicts, an AUTH's
 * answer, a full pipeline), nor once a big request was decided at its head
 * and its body streams. A slow sender that dribbles a byte at a time keeps
 * idle_timeout from expiring, but not this. */
static void head_clock(struct sl_session *s)
{
    int waiting = rs(s)->framer != NULL && rs(s)->head_state == 0 && sl_pend_count(&s->pend) == 0 &&
                  !frame_held(s) && !(s->cl_pause & (SL_PAUSE_INFLIGHT | SL_PAUSE_DECIDE)) &&
                  s->l->conf->header_timeout_us > 0 && !sl_resp_idle(rs(s)->framer);
    sl_sess_clock(s, &s->l->heading, &s->hq, waiting);
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
    while (!sl_pend_full(&s->pend) && s->state < SL_SESS_FLUSHING && !frame_held(s) && !rs(s)->quit &&
           (rc = sl_resp_next(rs(s)->framer, &r)) == 1) {
        if (s->hq.q != NULL)
            sl_tq_remove(&s->hq); /* the next request's head has its own time */
        uint32_t span = (uint32_t)(r->size - rs(s)->req_fwd);
        rs(s)->req_fwd = 0;
        if (rs(s)->head_state != 0) {
            /* The rest of a request decided at its head. */
            if (sl_pend_count(&s->pend) == 0 && rs(s)->head_state == 1) {
                to += span;
                rs(s)->head_state = 0;
                allowed(s, SL_PK_PLAIN, rs(s)->head_replies);
                rs(s)->head_replies = 0;
                continue;
            }
            sl_sess_to_upstream(s, b, from, to);
            b->start = from = to;
            sl_sess_enqueue(s, &(struct sl_req){ .resp = r }, span, SL_FX_EMPTY, 0, SL_PK_TAIL);
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
        if (kind == SL_PK_QUIT)
            rs(s)->quit = 1;
        if (rs(s)->auth_next != NULL && (kind == SL_PK_AUTH || kind == SL_PK_EXEC) && auth_matters(s)) {
            /* what follows waits for the answer that says who it is */
            rs(s)->auth_hold = 1;
            if (kind == SL_PK_EXEC)
                rs(s)->auth_exec_framed = 1;
        }
        uint32_t nchan;
        uint8_t fx = sl_rconn_classify(r, &nchan);
        const struct sl_req q = { .resp = r, .setup = (uint8_t)setup_free(s, r, kind) };
        /* pooled: a request that is not plainly stateless takes its turn in
         * the ring, with a record of what it is */
        int rec = s->link != NULL ? pool_classify(s, r, 0) : 0;
        if (rec < 0) {
            sl_session_close(s);
            return;
        }
        if (rec) {
            sl_sess_to_upstream(s, b, from, to);
            b->start = from = to;
            if (sl_sess_enqueue(s, &q, span, fx, nchan, kind) < 0)
                return;
            sl_pend_at(&s->pend, sl_pend_count(&s->pend) - 1)->pooled = 1;
            apply(s);
            if (s->state >= SL_SESS_FLUSHING)
                return;
            from = to = b->start;
            continue;
        }
        if (!s->l->limited && sl_pend_count(&s->pend) == 0 &&
            !(kind == SL_PK_EXEC && rs(s)->rc.multi_dirty) && !sl_sess_meters_owe(s)) {
            to += span; /* the fast path: no limits, nothing waiting */
            allowed(s, kind, commit(s, fx, nchan));
            continue;
        }
        if (sl_pend_count(&s->pend) == 0) {
            /* Nothing waits before it: when the verdict is in at once
             * (url = local, a lease, a remembered refusal) and allows, the
             * request joins the same write as the ones before it. */
            if (sl_sess_enqueue(s, &q, span, fx, nchan, kind) < 0)
                return;
            struct sl_pend *e = sl_pend_head(&s->pend);
            if (sl_pend_count(&s->pend) == 1 && e->state == SL_PEND_ALLOW && e->kind == SL_PK_PLAIN &&
                !sl_sess_meters_owe(s) && !sl_rconn_sub_wait(&rs(s)->rc, fx, kind)) {
                sl_pend_unpush(&s->pend); /* it goes with the requests before it */
                to += span;
                allowed(s, kind, commit(s, fx, nchan));
                continue;
            }
            sl_sess_to_upstream(s, b, from, to);
            b->start = from = to;
        } else {
            sl_sess_to_upstream(s, b, from, to);
            b->start = from = to;
            if (sl_sess_enqueue(s, &q, span, fx, nchan, kind) < 0)
                return;
        }
        apply(s);
        if (s->state >= SL_SESS_FLUSHING)
            return;
        from = to = b->start;
    }
    sl_sess_to_upstream(s, b, from, to);
    b->start = to;
    if (s->state >= SL_SESS_FLUSHING)
        return;
    if (rs(s)->quit) {
        sl_sess_pause(s, 0, SL_PAUSE_DONE, 1);
        b->end = b->start + sl_sess_pend_bytes(s);
        return;
    }
    if (rc < 0) {
        /* The rest is garbage, never forwarded; the requests before it
         * that wait in the ring still go upstream and are answered first.
         * The error waits for the ring to empty: sl_sess_resume() runs this again,
         * and the dead framer fails again. */
        sl_sess_pause(s, 0, SL_PAUSE_DONE, 1);
        b->end = b->start + sl_sess_pend_bytes(s);
        if (sl_pend_count(&s->pend) == 0)
            protocol_error(s, rs(s)->framer->err[0] ? rs(s)->framer->err : "Protocol error");
        return;
    }
    if (sl_pend_count(&s->pend) > 0 || frame_held(s)) {
        sl_sess_pause(s, 0, SL_PAUSE_DECIDE, 1);
        return;
    }
    /* A partial request is held until complete, unless it is big: then it
     * is decided by its head now and its bytes stream as they come. */
    uint32_t held = b->end - b->start;
    if (held == 0)
        return;
    if (rs(s)->head_state == 1) {
        sl_sess_to_upstream(s, b, b->start, b->end);
    } else if (rs(s)->head_state == 2) {
        /* dropped: a rejected big request never reaches the upstream */
    } else if (held >= SL_STREAM_AT && sl_resp_line_len(rs(s)->framer) >= SL_STREAM_AT) {
        /* A long line, not a payload: an inline request (at most 64 KiB)
         * or a count line that will be refused. It is held whole: no
         * request is decided on it, nor does it change the connection's
         * state; one that fills the chunk without ending is too big (as
         * Redis says once it passes 64 KiB). */
        if (held == SL_BUF_SIZE && sl_resp_line_full(rs(s)->framer) < 0) {
            protocol_error(s, rs(s)->framer->err);
            b->start = b->end;
        }
        return;
    } else if (held >= SL_STREAM_AT) {
        struct sl_resp_req *head = &rs(s)->framer->req;
        int kind = sl_rconn_kind(head);
        observe(s, head, kind);
        if (kind == SL_PK_PLAIN)
            rs(s)->setup_left = 0; /* no set-up command is that big: charged, and the set-up is over */
        uint32_t nchan;
        uint8_t fx = sl_rconn_classify(head, &nchan);
        /* pooled: its parts must not mix with other clients' requests on a
         * shared connection, nor a stalled sender hold one: it pins */
        if (s->link != NULL && pool_classify(s, head, 1) < 0) {
            sl_session_close(s);
            return;
        }
        if (sl_sess_enqueue(s, &(struct sl_req){ .resp = head }, held, fx, nchan, SL_PK_HEAD) < 0)
            return;
        if (s->link != NULL)
            sl_pend_at(&s->pend, sl_pend_count(&s->pend) - 1)->pooled = 1;
        apply(s);
        if (sl_pend_count(&s->pend) > 0)
            sl_sess_pause(s, 0, SL_PAUSE_DECIDE, 1);
        return; /* apply() moved the bytes on (or dropped them) */
    } else {
        return;
    }
    rs(s)->req_fwd += held;
    b->start = b->end;
}

/* Frames the <n> bytes just read at the end of <b>. */
static void client_resp(struct sl_session *s, struct sl_buf *b, size_t n)
{
    if (rs(s)->framer == NULL && (rs(s)->framer = framer_take(s->l->conf->max_request)) == NULL) {
        sl_session_close(s);
        return;
    }
    if (sl_resp_feed(rs(s)->framer, b->data + b->end - n, n) < 0) {
        protocol_error(s, rs(s)->framer->err[0] ? rs(s)->framer->err : "Protocol error");
        return;
    }
    process(s);
    if (s->state < SL_SESS_FLUSHING)
        head_clock(s);
}

/* Sends the replies in the new bytes of <b>, with due local replies
 * slotted in at reply boundaries, and drops a reply being swallowed. */
static void upstream_resp(struct sl_session *s, struct sl_buf *b)
{
    uint32_t off = b->start;
    uint32_t fstart = UINT32_MAX; /* where the frame in progress began, if in <b> */
    while (off < b->end) {
        /* At a boundary, the next reply may be one to drop (EXECABORT). */
        if (!rs(s)->swallow && s->seg_n > 0 && sl_reply_idle(&rs(s)->scan)) {
            struct sl_reply_seg *g = &s->segs[s->seg_head];
            if ((g->flags & SL_SEG_SWALLOW) && g->n == 1) {
                sl_sess_to_client(s, b, b->start, off);
                b->start = off;
                rs(s)->swallow = 1;
            }
        }
        if (sl_reply_idle(&rs(s)->scan)) {
            rs(s)->reply_first = (uint8_t)b->data[off];
            sl_rconn_reply_begin(&rs(s)->rc);
            fstart = off;
            /* EXEC's reply, which says if the AUTH queued before it ran */
            rs(s)->pick_on = rs(s)->auth_pick != NULL && rs(s)->paid_total + 1 == rs(s)->auth_seq &&
                         rs(s)->reply_first != '>';
            if (rs(s)->pick_on)
                sl_reply_pick_init(rs(s)->auth_pick, rs(s)->auth_elem);
        }
        unsigned f = 0;
        long n = sl_reply_scan(&rs(s)->scan, b->data + off, b->end - off, &f);
        if (n < 0) {
            sl_log_warn_rl("upstream_protocol_error", "upstream protocol error", "listener=%s",
                           s->l->name);
            sl_sess_to_client(s, b, b->start, off);
            b->start = b->end;
            sl_sess_finish(s);
            return;
        }
        sl_rconn_reply_bytes(&rs(s)->rc, b->data + off, (size_t)n);
        if (rs(s)->pick_on)
            sl_reply_pick_feed(rs(s)->auth_pick, b->data + off, (size_t)n);
        off += (uint32_t)n;
        if (!(f & SL_REPLY_DONE))
            continue;
        int confirm;
        int push = sl_rconn_reply_end(&rs(s)->rc, (f & SL_REPLY_PUSH) != 0, &confirm);
        if (confirm && s->link != NULL)
            sl_rcmd_pin_subs(&rs(s)->pin, (long)rs(s)->rc.subs[0] + rs(s)->rc.subs[1] +
                                              rs(s)->rc.subs[2] + rs(s)->rc.sub_owed);
        if (!push && !confirm && settle_marks(s)) {
            /* an unsubscribe-all was owed more confirmations than came:
             * what waited for them goes out before this reply */
            uint32_t at = fstart != UINT32_MAX && fstart >= b->start ? fstart : off;
            sl_sess_to_client(s, b, b->start, at);
            b->start = at;
            sl_sess_emit_locals(s);
            if (s->state >= SL_SESS_FLUSHING)
                return;
        }
        if (rs(s)->swallow && !push) {
            b->start = off; /* the swallowed reply never reaches the client */
            rs(s)->swallow = 0;
        }
        int due = push ? (s->seg_n > 0 && s->segs[s->seg_head].n == 0) : reply_ended(s);
        if (due) {
            /* local replies go out here, between two upstream replies; when
             * the next one ends the session (QUIT's close, a protocol
             * error), the bytes before it leave with the close */
            if (s->segs[s->seg_head].flags & SL_SEG_CLOSE)
                sl_sess_cork(s);
            sl_sess_to_client(s, b, b->start, off);
            b->start = off;
            sl_sess_emit_locals(s);
            if (s->state >= SL_SESS_FLUSHING)
                return;
        }
    }
    if (rs(s)->swallow)
        b->start = b->end;
    sl_sess_to_client(s, b, b->start, b->end);
    b->start = b->end;
    if (rs(s)->sub_hold && !sl_rconn_sub_unsure(&rs(s)->rc)) {
        /* the confirmations told: the request waiting for them moves */
        rs(s)->sub_hold = 0;
        sl_sess_resume_later(s);
    }
    /* pooled: a request waiting for the pooled replies to be in, or a pin
     * that can go back, moves at the end of the turn */
    if (s->link != NULL && ((rs(s)->pool_hold && !sl_sess_link_waiting(s)) || pool_unpin_due(s)))
        sl_sess_resume_later(s);
}

/* ---- pooled listeners (upstream_pool = N) ------------------------------------ */

/* What sluice learnt of a request of a pooled session when it framed it
 * (its words are gone once it is decided), kept in ring order while it
 * waits (pool_pre) and, once written upstream, until its answer says what
 * it did to the pin and the pool key (pool_ans). */
struct prec {
    struct sl_rcmd_info info;
    uint64_t seq;      /* pool_ans: the reply number that answers it */
    uint32_t added;    /* pin bits it started (sl_rcmd_pin_sent) */
    uint8_t  stream;   /* the head of a request streamed in parts: pins */
    uint8_t  passok;   /* KEY naming a user: its password is in <arg> */
    uint8_t  kill_old; /* CLIENT KILL addr:port (the old form) */
    uint8_t  setinfo;  /* CLIENT SETINFO: 1 LIB-NAME, 2 LIB-VER */
    char    *arg;      /* the password (KEY), the name (SETNAME), the value (SETINFO) */
    uint32_t arglen;
};

static void prec_free(struct prec *p)
{
    if (p != NULL) {
        free(p->arg);
        free(p);
    }
}

static int pq_push(struct pq *q, struct prec *p)
{
    if (q->n == q->cap) {
        uint32_t cap = q->cap ? q->cap * 2 : 8;
        struct prec **ne = malloc(cap * sizeof(*ne));
        if (ne == NULL)
            return -1;
        for (uint32_t i = 0; i < q->n; i++)
            ne[i] = q->e[(q->head + i) % q->cap];
        free(q->e);
        q->e = ne;
        q->head = 0;
        q->cap = cap;
    }
    q->e[(q->head + q->n) % q->cap] = p;
    q->n++;
    return 0;
}

static struct prec *pq_head(const struct pq *q)
{
    return q->n > 0 ? q->e[q->head] : NULL;
}

static struct prec *pq_pop(struct pq *q)
{
    if (q->n == 0)
        return NULL;
    struct prec *p = q->e[q->head];
    q->head = (q->head + 1) % q->cap;
    q->n--;
    return p;
}

static void pq_free(struct pq *q)
{
    struct prec *p;
    while ((p = pq_pop(q)) != NULL)
        prec_free(p);
    free(q->e);
    memset(q, 0, sizeof(*q));
}

static char *dup_arg(const char *p, size_t n)
{
    char *d = malloc(n + 1);
    if (d != NULL) {
        memcpy(d, p, n);
        d[n] = '\0';
    }
    return d;
}

/* The pool key's name for the engine (the key, then its password: users
 * may have several) and the commands that bring a fresh connection to it. */
static int key_setup(const struct sl_pool_key *k, const char *pass, size_t plen, char **id,
                     size_t *idlen, char **setup, size_t *setuplen, uint32_t *nsetup)
{
    size_t cap = 256 + 2 * plen + k->user_len;
    char *i = malloc(sizeof(*k) + plen), *u = malloc(cap);
    if (i == NULL || u == NULL) {
        free(i);
        free(u);
        return -1;
    }
    memcpy(i, k, sizeof(*k));
    if (plen > 0)
        memcpy(i + sizeof(*k), pass, plen);
    size_t n = 0;
    uint32_t c = 0;
    if (pass != NULL) {
        n += (size_t)snprintf(u + n, cap - n, "*3\r\n$4\r\nAUTH\r\n$%u\r\n%s\r\n$%zu\r\n",
                              (unsigned)k->user_len, k->user, plen);
        memcpy(u + n, pass, plen);
        n += plen;
        memcpy(u + n, "\r\n", 2);
        n += 2;
        c++;
    }
    if (k->resp == 3) {
        n += (size_t)snprintf(u + n, cap - n, "*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n");
        c++;
    }
    if (k->db != 0) {
        char db[16];
        int dl = snprintf(db, sizeof(db), "%d", (int)k->db);
        n += (size_t)snprintf(u + n, cap - n, "*2\r\n$6\r\nSELECT\r\n$%d\r\n%s\r\n", dl, db);
        c++;
    }
    *id = i;
    *idlen = sizeof(*k) + plen;
    *setup = u;
    *setuplen = n;
    *nsetup = c;
    return 0;
}

/* The session's link goes to the key it is on now. */
static int pool_rekey(struct sl_session *s, int open)
{
    struct sl_resp_sess *r = rs(s);
    char *id, *setup;
    size_t idlen, setuplen;
    uint32_t nsetup;
    if (key_setup(&r->key, r->pass, r->pass_len, &id, &idlen, &setup, &setuplen, &nsetup) < 0)
        return SL_ENOMEM;
    int rc = open ? sl_sess_link_open(s, id, idlen, setup, setuplen, nsetup)
                  : sl_sess_link_rekey(s, id, idlen, setup, setuplen, nsetup);
    free(id);
    free(setup);
    return rc;
}

static int link_open(struct sl_session *s)
{
    sl_pool_key_default(&rs(s)->key);
    sl_rcmd_pin_init(&rs(s)->pin);
    return pool_rekey(s, 1);
}

/* Classifies request <q> of a pooled session; returns 1 when it needs its
 * turn in the ring (a record is queued for it), 0 when it goes as any
 * stateless request does, -1 when out of memory. */
static int pool_classify(struct sl_session *s, const struct sl_resp_req *q, int stream)
{
    struct sl_rcmd_info info;
    sl_rcmd_class(q, &info);
    if (!stream && info.cls == SL_RCMD_POOL && info.pin == 0 && info.ends == 0)
        return 0;
    if (!stream && info.cls == SL_RCMD_LOCAL && info.local == SL_RLOCAL_EMPTY)
        return 0; /* no reply, no change: harmless anywhere */
    struct prec *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return -1;
    p->info = info;
    p->stream = (uint8_t)stream;
    uint8_t a = 0;
    if (info.cls == SL_RCMD_KEY && info.pass_arg > 0) {
        a = info.pass_arg;
        p->passok = a < q->ncap && q->arglen[a] <= SL_RESP_CAPTURE_LEN;
    } else if (info.cls == SL_RCMD_LOCAL && info.local == SL_RLOCAL_SETNAME) {
        a = info.name_arg;
    } else if (info.cls == SL_RCMD_LOCAL && info.local == SL_RLOCAL_SETINFO && q->argc == 4 &&
               q->ncap >= 4) {
        a = 3;
        p->setinfo = strcasecmp(q->argv[2], "LIB-NAME") == 0 ? 1
                     : strcasecmp(q->argv[2], "LIB-VER") == 0 ? 2 : 0;
    } else if (info.cls == SL_RCMD_LOCAL && info.local == SL_RLOCAL_KILL) {
        p->kill_old = q->argc == 3;
    }
    if (a > 0 && a < q->ncap) {
        p->arglen = q->arglen[a] < SL_RESP_CAPTURE_LEN ? q->arglen[a] : SL_RESP_CAPTURE_LEN;
        if ((p->arg = dup_arg(q->argv[a], p->arglen)) == NULL) {
            free(p);
            return -1;
        }
    }
    if (pq_push(&rs(s)->pool_pre, p) < 0) {
        prec_free(p);
        return -1;
    }
    return 1;
}

/* The ring's head <p> (with record <c>) is allowed: may it go now? 0 yes,
 * 1 it waits for a connection of its own (the session is resumed when it
 * has one), -1 refused (no connection could be had: counted). */
static int pool_wait(struct sl_session *s, const struct prec *c)
{
    struct sl_resp_sess *r = rs(s);
    int pin = c->stream || c->info.cls == SL_RCMD_PIN || c->info.cls == SL_RCMD_KEY ||
              (c->info.cls == SL_RCMD_LOCAL && r->rc.in_multi);
    if (!pin || sl_sess_link_pinned(s))
        return 0;
    uint64_t now = sl_sess_waits_now();
    if (r->pool_hold && r->pin_until != 0 && now >= r->pin_until) {
        sl_sess_link_unwait(s);
        r->pool_hold = 0;
        r->pin_until = 0;
        s->l->stats.pool_pin_refused++;
        return -1;
    }
    int rc = sl_sess_link_pin(s, s->l->conf->pool_pin_wait_us > 0);
    if (rc == 1) {
        r->pool_hold = 0;
        r->pin_until = 0;
        return 0;
    }
    if (rc < 0) {
        r->pool_hold = 0;
        s->l->stats.pool_pin_refused++;
        return -1;
    }
    r->pool_hold = 1;
    if (sl_sess_link_waiting(s) && r->pin_until == 0) {
        r->pin_until = now + s->l->conf->pool_pin_wait_us;
        sl_sess_park(s, r->pin_until);
    }
    return 1;
}

/* The local reply to a pooled session's request <c>, in <out>. */
static size_t local_text(struct sl_session *s, const struct prec *c, char *out, size_t cap)
{
    struct sl_resp_sess *r = rs(s);
    int n = 0;
    switch (c->info.local) {
    case SL_RLOCAL_SETNAME:
        if (c->arg != NULL && !sl_rcmd_name_ok(c->arg, c->arglen) && c->arglen > 0) {
            n = snprintf(out, cap, "-ERR Client names cannot contain spaces, newlines or special "
                                   "characters.\r\n");
            break;
        }
        free(r->name);
        r->name = c->arglen > 0 ? dup_arg(c->arg, c->arglen) : NULL;
        n = snprintf(out, cap, "+OK\r\n");
        break;
    case SL_RLOCAL_GETNAME:
        if (r->name == NULL)
            n = snprintf(out, cap, r->key.resp == 3 ? "_\r\n" : "$-1\r\n");
        else
            n = snprintf(out, cap, "$%zu\r\n%s\r\n", strlen(r->name), r->name);
        break;
    case SL_RLOCAL_SETINFO:
        if (c->setinfo == 0 || c->arg == NULL) {
            n = snprintf(out, cap, "-ERR Unrecognized option\r\n");
            break;
        }
        free(r->lib[c->setinfo - 1]);
        r->lib[c->setinfo - 1] = c->arglen > 0 ? dup_arg(c->arg, c->arglen) : NULL;
        n = snprintf(out, cap, "+OK\r\n");
        break;
    case SL_RLOCAL_ID:
        n = snprintf(out, cap, ":%llu\r\n", (unsigned long long)s->id);
        break;
    case SL_RLOCAL_INFO:
    case SL_RLOCAL_LIST: {
        char line[1024], peer[64] = "?", self[64] = "?";
        struct sockaddr_storage ss;
        int sl = sizeof(ss);
        if (uv_tcp_getpeername(&s->client, (struct sockaddr *)&ss, &sl) == 0)
            sl_resolve_fmt(&ss, peer, sizeof(peer));
        sl = sizeof(ss);
        if (uv_tcp_getsockname(&s->client, (struct sockaddr *)&ss, &sl) == 0)
            sl_resolve_fmt(&ss, self, sizeof(self));
        int k = snprintf(line, sizeof(line),
                         "id=%llu addr=%s laddr=%s fd=0 name=%s age=0 idle=0 flags=N db=%d sub=0 "
                         "psub=0 ssub=0 multi=-1 watch=0 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 "
                         "rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd=client|%s user=%s "
                         "redir=-1 resp=%d lib-name=%s lib-ver=%s\n",
                         (unsigned long long)s->id, peer, self, r->name ? r->name : "",
                         (int)r->key.db, c->info.local == SL_RLOCAL_INFO ? "info" : "list",
                         r->key.user, (int)r->key.resp, r->lib[0] ? r->lib[0] : "",
                         r->lib[1] ? r->lib[1] : "");
        if (k > 0 && (size_t)k < sizeof(line))
            n = snprintf(out, cap, "$%d\r\n%s\r\n", k, line);
        break;
    }
    case SL_RLOCAL_KILL:
        n = snprintf(out, cap, c->kill_old ? "-ERR No such client\r\n" : ":0\r\n");
        break;
    case SL_RLOCAL_UNBLOCK:
        n = snprintf(out, cap, ":0\r\n");
        break;
    case SL_RLOCAL_QUIT:
        n = snprintf(out, cap, "+OK\r\n");
        break;
    default:
        break;
    }
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* Request <c> is answered by sluice (inside a transaction it is queued
 * upstream instead, as Redis would run it at EXEC). */
static int prec_is_local(const struct sl_session *s, const struct prec *c)
{
    return c->info.cls == SL_RCMD_LOCAL && !c->stream && !rs(s)->rc.in_multi;
}

/* Request <c> of a pooled session is answered by sluice in its place. */
static void pool_local(struct sl_session *s, const struct prec *c)
{
    char line[1200];
    size_t n = local_text(s, c, line, sizeof(line));
    uint32_t replies = refused(s);
    if (s->state >= SL_SESS_CLOSED)
        return;
    uint8_t close = c->info.local == SL_RLOCAL_QUIT ? SL_SEG_CLOSE : 0;
    if (replies == 0 || n == 0) {
        if (close) {
            static char none[] = "";
            sl_sess_local(s, none, 0, SL_SEG_CLOSE);
        }
        return;
    }
    char *text = malloc(n);
    if (text == NULL) {
        sl_session_close(s);
        return;
    }
    memcpy(text, line, n);
    sl_sess_local(s, text, (uint32_t)n, SL_SEG_OWNED | close);
}

/* Request <c> went upstream (the replies owed were <before>, now
 * owed_total): the pins it starts, and its answer awaited when it ends
 * one or moves the key. Takes <c>. */
static void pool_sent(struct sl_session *s, struct prec *c, uint64_t before)
{
    struct sl_resp_sess *r = rs(s);
    c->added = sl_rcmd_pin_sent(&r->pin, &c->info);
    if (c->stream && c->info.cls == SL_RCMD_KEY)
        r->pin.why |= SL_PIN_ODD; /* a key change too big to read: until RESET */
    if (c->info.cls == SL_RCMD_KEY && (r->rc.in_multi || r->owed_total == before)) {
        /* its answer is in EXEC's reply, or there is none: the key is not
         * known any more, the connection stays the client's until RESET */
        r->pin.why |= SL_PIN_ODD;
        prec_free(c);
        return;
    }
    if (r->owed_total == before || (c->info.cls != SL_RCMD_KEY && c->info.pin == 0 &&
                                    c->info.ends == 0)) {
        prec_free(c);
        return;
    }
    c->seq = r->owed_total; /* its last reply */
    if (pq_push(&r->pool_ans, c) < 0) {
        prec_free(c);
        sl_session_close(s);
    }
}

/* Reply number paid_total came: the requests it answers take effect. */
static void pool_answered(struct sl_session *s)
{
    struct sl_resp_sess *r = rs(s);
    struct prec *c;
    while ((c = pq_head(&r->pool_ans)) != NULL && c->seq <= r->paid_total) {
        pq_pop(&r->pool_ans);
        int ok = r->reply_first != '-' && r->reply_first != '!' && c->seq == r->paid_total;
        sl_rcmd_pin_done(&r->pin, &c->info, c->added, ok);
        struct sl_pool_key old = r->key;
        if (sl_pool_key_apply(&r->key, &c->info, ok) ||
            (ok && c->info.cls == SL_RCMD_KEY && (c->info.set & (SL_RKEY_USER | SL_RKEY_RESET)))) {
            if (c->info.set & SL_RKEY_RESET) {
                free(r->pass);
                r->pass = NULL;
                r->pass_len = 0;
            }
            if ((c->info.set & SL_RKEY_USER) && c->info.pass_arg > 0) {
                if (!c->passok) {
                    r->pin.why |= SL_PIN_ODD; /* no password to open its key with */
                } else {
                    free(r->pass);
                    r->pass = c->arg;
                    r->pass_len = c->arglen;
                    c->arg = NULL;
                }
            }
            (void)old;
            if (pool_rekey(s, 0) < 0)
                sl_session_close(s);
        }
        prec_free(c);
    }
}

/* The pinned connection goes back once nothing of the client's lives on it
 * (at the end of a turn: never from inside a delivery). */
static int pool_unpin_due(const struct sl_session *s)
{
    const struct sl_resp_sess *r = rs(s);
    return s->link != NULL && sl_sess_link_pinned(s) && !sl_rcmd_pinned(&r->pin) &&
           r->owed_total == r->paid_total && r->head_state == 0 && !r->rc.in_multi &&
           !sl_rconn_passthru(&r->rc) && r->rc.reply_mode == SL_REPLY_ON && r->rc.sub_owed == 0 &&
           r->rc.marks == 0 && r->pool_ans.n == 0 && !r->pool_hold && sl_reply_idle(&r->scan);
}

static void pool_settle(struct sl_session *s)
{
    if (pool_unpin_due(s))
        sl_sess_link_unpin(s, sl_rcmd_pin_clean(&rs(s)->pin));
}

/* The upstream connection a pooled session's replies were owed on failed:
 * each reply owed is answered by an error in its place, unless the client
 * already has part of one (then it is closed: its stream cannot be made
 * whole), or its own pinned connection failed (closed, as on 1:1). */
static void link_lost(struct sl_session *s, int pinned, int err, const char *why)
{
    (void)err;
    struct sl_resp_sess *r = rs(s);
    sl_log_debug_rl("pool_lost", "pooled upstream connection lost", "listener=%s why=\"%s\"",
                    s->l->name, why);
    if (pinned || !sl_reply_idle(&r->scan)) {
        sl_sess_finish(s);
        return;
    }
    static const char msg[] = "-ERR sluice: upstream connection lost\r\n";
    uint64_t owed = r->owed_total - r->paid_total;
    while (owed > 0 && s->state < SL_SESS_FLUSHING) {
        struct sl_buf *b = sl_buf_get();
        if (b == NULL) {
            sl_session_close(s);
            return;
        }
        b->start = b->end = 0;
        while (owed > 0 && SL_BUF_SIZE - b->end >= sizeof(msg) - 1) {
            memcpy(b->data + b->end, msg, sizeof(msg) - 1);
            b->end += sizeof(msg) - 1;
            owed--;
        }
        (void)sl_sess_link_got(s, b, 0, b->end, 0);
        sl_buf_unref(b);
    }
    if (s->state < SL_SESS_FLUSHING)
        sl_sess_resume_later(s); /* a request held for a pin may go now */
}


/* ---- the table ---------------------------------------------------------------- */

static void resume(struct sl_session *s)
{
    if (s->link != NULL)
        pool_settle(s);
    apply(s);
    if (sl_pend_count(&s->pend) == 0 && s->state < SL_SESS_FLUSHING) {
        /* Requests framed but not yet taken, or a big one in progress. */
        process(s);
        if (s->state < SL_SESS_CLOSED) {
            if (sl_pend_count(&s->pend) == 0 && !frame_held(s))
                sl_sess_pause(s, 0, SL_PAUSE_DECIDE, 0);
            head_clock(s);
            sl_sess_rx_release(&s->cin);
            framer_release_if_idle(s);
            sl_sess_drain_check(s);
        }
    }
}

/* The client's EOF: a partial request it leaves goes upstream as it is,
 * and Redis sees the same cut. */
static int client_eof(struct sl_session *s)
{
    (void)s;
    return SL_EOF_FORWARD;
}

/* Everything the upstream sent is already on its way to the client:
 * close once it has left. */
static void upstream_eof(struct sl_session *s, int err)
{
    (void)err;
    sl_sess_finish(s);
}

static void resp_init(struct sl_session *s)
{
    sl_reply_init(&rs(s)->scan);
    rs(s)->setup_left = (uint8_t)s->l->conf->setup_commands;
}

static int at_boundary(const struct sl_session *s)
{
    return sl_reply_idle(&rs(s)->scan);
}

static void resp_free(struct sl_session *s)
{
    sl_reply_release(&rs(s)->scan);
    if (rs(s)->framer) {
        sl_resp_free(rs(s)->framer); /* may hold a partial request: not pooled */
        free(rs(s)->framer);
    }
    free(rs(s)->auth_next);
    free(rs(s)->auth_pick);
    pq_free(&rs(s)->pool_pre);
    pq_free(&rs(s)->pool_ans);
    free(rs(s)->pass);
    free(rs(s)->name);
    free(rs(s)->lib[0]);
    free(rs(s)->lib[1]);
}

static size_t answer(struct sl_session *s, enum sl_answer what, const char *limit, char *out,
                     size_t cap);

static size_t refusal(enum sl_answer what, char *out, size_t cap)
{
    return answer(NULL, what, NULL, out, cap);
}

static size_t answer(struct sl_session *s, enum sl_answer what, const char *limit, char *out,
                     size_t cap)
{
    (void)s; /* the same words with or without a session */
    int n = 0;
    switch (what) {
    case SL_ANSWER_MAX_CLIENTS:
        n = snprintf(out, cap, "-ERR max number of clients reached\r\n");
        break;
    case SL_ANSWER_NO_FD:
        n = snprintf(out, cap,
                     "-ERR max number of clients reached (sluice is out of file descriptors)\r\n");
        break;
    case SL_ANSWER_UPSTREAM_DOWN:
        n = snprintf(out, cap, "-ERR upstream unavailable\r\n");
        break;
    case SL_ANSWER_CONN_LIMIT:
        n = snprintf(out, cap, "-ERR max number of clients reached (limit '%s')\r\n",
                     limit ? limit : "");
        break;
    }
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* A rejection's line (allowed requests gain nothing). */
static size_t verdict_text(struct sl_session *s, const struct sl_verdict *v, char *out,
                           size_t cap)
{
    (void)s;
    return v->kind == SL_VERDICT_REJECT ? sl_verdict_resp(v, out, cap) : 0;
}

/* header_timeout: closed without a word, as Redis would never answer. */
static void header_late(struct sl_session *s)
{
    sl_session_close(s);
}

static void upstream_late(struct sl_session *s)
{
    (void)s; /* not used: a blocking command may wait as long as it likes */
}

static uint32_t marker_due(struct sl_session *s, uint32_t kind)
{
    return sl_rconn_unsub_due(&rs(s)->rc, kind);
}

static void marker_gone(struct sl_session *s)
{
    sl_rconn_mark_gone(&rs(s)->rc);
}

/* As in Redis: a subscribed or MONITOR client is not idle. */
static int busy(const struct sl_session *s)
{
    return sl_rconn_passthru(&rs(s)->rc);
}

const struct sl_sess_proto sl_sess_resp = {
    .name = "resp",
    .state_size = sizeof(struct sl_resp_sess),
    .framed = 1,
    .init = resp_init,
    .at_boundary = at_boundary,
    .client_in = client_resp,
    .client_eof = client_eof,
    .upstream_in = upstream_resp,
    .upstream_eof = upstream_eof,
    .resume = resume,
    .release = framer_release_if_idle,
    .free = resp_free,
    .answer = answer,
    .refusal = refusal,
    .verdict_text = verdict_text,
    .header_late = header_late,
    .upstream_late = upstream_late,
    .marker_due = marker_due,
    .marker_gone = marker_gone,
    .busy = busy,
    .pool_drain = pool_drain,
    .link_lost = link_lost,
    .link_open = link_open,
};

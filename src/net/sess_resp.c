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
#include "core/log.h"
#include "core/tq.h"
#include "identity/identity.h"
#include "net/usage_export.h"
#include "net/listener.h"
#include "net/sess_adapt.h"
#include "net/session.h"
#include "net/session-i.h"
#include "net/sess_resp-i.h"
#include "proto/resp.h"
#include "proto/resp_cmd.h"
#include "proto/resp_conn.h"
#include "proto/resp_reply.h"
#include "shape/meter.h"


static void process(struct sl_session *s);

/* <n> upstream replies are owed: numbered, so an AUTH's can be told apart. */
static void owe(struct sl_session *s, uint32_t n)
{
    rs(s)->silent = 0;
    rs(s)->owed_total += n;
    sl_sess_owe(s, n);
}

/* Pooled: the request just owed is a script (<slow>), which may run long
 * while Redis answers other clients: the engine queues no other client's
 * request behind it (net/upool.h, SL_UPOOL_SLOW). */
static void owed_slow(struct sl_session *s, uint8_t slow)
{
    if (slow && s->link != NULL)
        sl_sess_link_slow(s);
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
    rs(s)->pick_on = 0; /* the reply in progress, if it was the judge, judges nothing now */
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
    if (sl_sadapt_owed(s))
        sl_sadapt_reply(s, rs(s)->paid_total, rs(s)->reply_busy);
    if (s->link != NULL && rs(s)->pool_ans.n > 0)
        sl_rpool_answered(s);
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
uint32_t sl_rsess_refused(struct sl_session *s)
{
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    int send_ping;
    uint32_t n = sl_rconn_refused(&rs(s)->rc, &send_ping);
    if (send_ping && sl_sess_send(s, sl_sess_side_stream(s, 1), NULL, ping, sizeof(ping) - 1) < 0)
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
                /* the transaction ends here: a DISCARD, RESET or EXEC
                 * after it (pipelined, or framed while EXEC's reply is
                 * still passing) is none of its business */
                rs(s)->auth_in_multi = 0;
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
    else
        rs(s)->silent = 1;
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
static void exec_abort(struct sl_session *s, uint32_t replies, char *text, uint32_t len)
{
    static const char discard[] = "*1\r\n$7\r\nDISCARD\r\n";
    static char abort_msg[] = "-EXECABORT Transaction discarded because of previous errors.\r\n";
    uint8_t owned = text != NULL ? SL_SEG_OWNED : 0;
    if (text == NULL) {
        text = abort_msg;
        len = sizeof(abort_msg) - 1;
    }
    sl_rconn_exec_aborted(&rs(s)->rc);
    if (rs(s)->auth_in_multi && rs(s)->auth_next != NULL) {
        auth_drop(s); /* the transaction never runs */
        auth_wake(s);
    }
    s->l->stats.rejected++;
    if (sl_sess_send(s, sl_sess_side_stream(s, 1), NULL, discard, sizeof(discard) - 1) < 0) {
        if (owned)
            free(text);
        sl_session_close(s);
        return;
    }
    /* Under CLIENT REPLY OFF or SKIP, Redis does not answer the DISCARD
     * and the client expects nothing. */
    if (replies == 0) {
        if (owned)
            free(text);
        return;
    }
    owe(s, 1);
    sl_sess_local(s, text, len, SL_SEG_SWALLOW | owned);
}

/* ---- adaptive concurrency (net/sess_adapt.h) ------------------------------------ */

enum { ADAPT_NO = 0, ADAPT_PLAIN, ADAPT_EXEC };

/* Whether request <r> may count against the upstream's concurrency, as far
 * as the request itself says: an EXEC (a transaction is admitted or refused
 * whole at its EXEC: nothing of it ran before), a plain command that does
 * not wait by design (blocking commands, WAIT, pub/sub, MONITOR do: they
 * would hold places while the upstream is idle). What the connection's
 * state says is asked when its turn comes (adapt_counts). */
static uint8_t adapt_kind(const struct sl_session *s, const struct sl_resp_req *r, int kind,
                          uint8_t fx)
{
    if (!sl_sadapt_on(s))
        return ADAPT_NO;
    if (kind == SL_PK_EXEC)
        return ADAPT_EXEC;
    if (kind != SL_PK_PLAIN || fx != SL_FX_PLAIN)
        return ADAPT_NO;
    struct sl_rcmd_info info;
    sl_rcmd_class(r, &info);
    if (info.pin & (SL_PIN_BLOCK | SL_PIN_SUB | SL_PIN_MONITOR | SL_PIN_DEBUG | SL_PIN_REPLICA))
        return ADAPT_NO;
    return ADAPT_PLAIN;
}

/* ... and at its turn: one reply, outside a transaction (the commands
 * queued in one wait for its EXEC), not subscribed; an EXEC that will run. */
static int adapt_counts(const struct sl_session *s, const struct sl_pend *e)
{
    const struct sl_resp_conn *rc = &rs(s)->rc;
    if (e->adapt == ADAPT_EXEC)
        return rc->in_multi && !rc->multi_dirty && rc->reply_mode == SL_REPLY_ON && !rc->passthru;
    return e->adapt == ADAPT_PLAIN && sl_rconn_plain_one(rc) && !rc->passthru;
}

/* ... unless it is a pooled session's request that sluice answers itself
 * (CLIENT ID, SETNAME ...: decided at its turn, as sl_rpool_wait did): it
 * never reaches the upstream, nor waits for it. */
static int adapt_local(struct sl_session *s, const struct sl_pend *e)
{
    const struct prec *c = e->pooled ? sl_rpool_peek(s) : NULL;
    return c != NULL && sl_rpool_is_local(s, c);
}

/* The refusal of entry <p>, shed by adaptive concurrency: -TRYAGAIN, the
 * error Redis gives for "not now, nothing happened, send it again" (see
 * docs/adaptive.md for why this one). */
static void adapt_refusal(struct sl_session *s, struct sl_pend *p)
{
    char line[128];
    int n = snprintf(line, sizeof(line), "-TRYAGAIN upstream overloaded, retry in %llu ms\r\n",
                     (unsigned long long)sl_sadapt_retry_ms(s));
    free(p->text);
    p->text = malloc((size_t)n);
    if (p->text != NULL)
        memcpy(p->text, line, (size_t)n);
    p->len = p->text != NULL ? (uint32_t)n : 0;
    p->state = SL_PEND_REJECT;
}

/* A -BUSY or -LOADING error at <p> (<n> bytes seen of the reply): overload. */
static int overload_reply(const char *p, size_t n)
{
    return (n >= 6 && memcmp(p, "-BUSY", 5) == 0 && (p[5] == ' ' || p[5] == '\r')) ||
           (n >= 9 && memcmp(p, "-LOADING", 8) == 0 && (p[8] == ' ' || p[8] == '\r'));
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

/* The requests sent on last have no reply to wait for (CLIENT REPLY OFF,
 * or the one SKIP covers), yet Redis runs them before it reads what
 * follows, and what they make it push to the client itself (the message a
 * PUBLISH delivers to the client's own subscription, an invalidation)
 * comes before it stops. Before sluice ends the session it asks the
 * upstream for an answer that comes whatever the connection's state: a
 * RESET (answered +RESET in any mode, inside MULTI and subscribed too; a
 * PING first uses up a SKIP still to come). Its answer, dropped, says the
 * upstream ran all that came before. Not on a shared pooled connection (a
 * RESET there would be every client's; a client whose replies are off
 * holds its own), nor under MONITOR (its feed never ends). Returns 1 when
 * the answer is owed. */
static int catch_up(struct sl_session *s)
{
    static const char reset[] = "*1\r\n$5\r\nRESET\r\n";
    static const char ping_reset[] = "*1\r\n$4\r\nPING\r\n*1\r\n$5\r\nRESET\r\n";
    struct sl_resp_sess *r = rs(s);
    if (!r->silent || r->rc.monitor || r->rc.mon_sent || (s->link != NULL && !sl_sess_link_pinned(s)))
        return 0;
    int skip = r->rc.reply_mode == SL_REPLY_SKIP;
    owe(s, 1); /* before the bytes: a pooled session's owed replies go with them */
    if (sl_sess_send(s, sl_sess_side_stream(s, 1), NULL, skip ? ping_reset : reset,
                     skip ? sizeof(ping_reset) - 1 : sizeof(reset) - 1) < 0) {
        sl_session_close(s);
        return -1;
    }
    /* The answer may not come: a server without RESET (before 6.2) says
     * nothing under OFF, a blocking request before it may never end. The
     * client is not idle while a reply is owed, so idle_timeout bounds
     * the wait here instead (resume()). */
    uint64_t idle = s->l->conf->idle_timeout_us;
    if (idle > 0) {
        r->catch_until = sl_sess_waits_now() + idle;
        sl_sess_park(s, r->catch_until);
    }
    return 1;
}

static void protocol_error(struct sl_session *s, const char *msg)
{
    s->l->stats.protocol_errors++;
    sl_log_debug_rl("protocol_error", "protocol error", "listener=%s err=\"%s\"", s->l->name, msg);
    sl_sess_pause(s, 0, SL_PAUSE_DONE, 1);
    int caught = catch_up(s);
    if (caught < 0)
        return;
    uint8_t flags = SL_SEG_CLOSE | (caught ? SL_SEG_SWALLOW : 0);
    if (rs(s)->rc.reply_mode != SL_REPLY_ON) {
        /* Under CLIENT REPLY OFF, or SKIP with the skip still to come,
         * Redis says nothing either. It then keeps the connection open but
         * reads no more of it; sluice closes it. */
        static char none[] = "";
        sl_sess_local(s, none, 0, flags);
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
    sl_sess_local(s, text, (uint32_t)(n + 7), SL_SEG_OWNED | flags);
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
            int w = sl_rpool_wait(s, sl_rpool_peek(s));
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
        int placed = 0; /* it holds a place of adaptive concurrency */
        if (e.state == SL_PEND_ALLOW && e.adapt && adapt_counts(s, &e) && !adapt_local(s, &e)) {
            int g = sl_sadapt_admit(s, p);
            if (g == SL_SADAPT_WAIT)
                break;
            if (g == SL_SADAPT_SHED)
                adapt_refusal(s, p);
            placed = g == SL_SADAPT_GO && p->adapt;
            e = *p;
        }
        sl_pend_pop(&s->pend, &e);
        struct prec *rec = e.pooled ? sl_rpool_next(s) : NULL;
        if (rec != NULL && e.state == SL_PEND_ALLOW && sl_rpool_is_local(s, rec)) {
            /* answered by sluice, in its place: its bytes never leave */
            sl_sess_to_upstream(s, b, from, to);
            from = to = to + e.span;
            sl_rpool_local(s, rec);
            sl_rpool_done(rec);
            free(e.text);
            if (s->state >= SL_SESS_CLOSED)
                return;
            continue;
        }
        uint64_t owed_before = rs(s)->owed_total;
        uint8_t in_multi = rs(s)->rc.in_multi; /* before this request (commit() moves it) */
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
                owed_slow(s, e.slow);
            }
            if (placed)
                sl_sadapt_sent(s, rs(s)->owed_total);
            if (rec != NULL)
                sl_rpool_sent(s, rec, owed_before, in_multi);
            continue;
        }
        sl_sess_to_upstream(s, b, from, to);
        from = to = to + e.span; /* the request's bytes never leave */
        if (e.kind == SL_PK_EXEC && (e.state == SL_PEND_ALLOW || e.shed)) {
            /* DISCARD goes in its place (shed: the transaction ends unrun,
             * -TRYAGAIN in EXEC's place) */
            int shed = e.state != SL_PEND_ALLOW;
            exec_abort(s, commit(s, e.fx, e.nchan), shed ? e.text : NULL, shed ? e.len : 0);
            if (shed)
                e.text = NULL;
            /* pooled: that DISCARD ends the transaction and the WATCH as
             * the EXEC would, and drops what was queued in it */
            if (rec != NULL && s->state < SL_SESS_CLOSED)
                sl_rpool_sent(s, rec, owed_before, in_multi);
            else
                sl_rpool_done(rec);
        } else if (e.kind == SL_PK_TAIL) {
            sl_rpool_done(rec); /* refused: it changes nothing */
            rs(s)->head_state = 0;
        } else {
            sl_rpool_done(rec); /* refused: it changes nothing */
            if (e.kind == SL_PK_HEAD)
                rs(s)->head_state = 2;
            uint32_t replies = sl_rsess_refused(s);
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

/* Requests go upstream as they come, no verdict asked: a listener with no
 * limits, not pooled, nothing in the ring, no AUTH whose answer matters,
 * the connection's set-up over, no byte limit in debt. */
static int relay_only(const struct sl_session *s)
{
    return !s->l->limited && s->link == NULL && !sl_sadapt_on(s) && sl_pend_count(&s->pend) == 0 &&
           rs(s)->auth_next == NULL && rs(s)->setup_left == 0 && !sl_sess_meters_owe(s);
}

/* <*n> plain requests went upstream, one reply owed each (see process). */
static void owe_run(struct sl_session *s, uint32_t *n)
{
    if (*n > 0) {
        owe(s, *n);
        *n = 0;
    }
}

/* Takes every complete request the framer holds, in order: allowed ones
 * with nothing waiting before them go out in one write, the rest wait in
 * the ring for their verdicts. */
static void process(struct sl_session *s)
{
    struct sl_buf *b = s->cin;
    if (b == NULL || rs(s)->framer == NULL)
        return; /* every byte read has been framed and sent on (the chunk
                   may outlive the framer while a write still holds it) */
    struct sl_resp_req *r;
    int rc = 0, fast = -1; /* fast: relay_only(), 2 when runs are counted, -1 to ask */
    uint32_t run = 0;      /* plain requests counted and not yet owed */
    uint32_t from = b->start, to = b->start;
    while (!sl_pend_full(&s->pend) && s->state < SL_SESS_FLUSHING && !frame_held(s) && !rs(s)->quit &&
           (rc = sl_resp_next(rs(s)->framer, &r)) == 1) {
        if (s->hq.q != NULL)
            sl_tq_remove(&s->hq); /* the next request's head has its own time */
        uint32_t span = (uint32_t)(r->size - rs(s)->req_fwd);
        rs(s)->req_fwd = 0;
        if (fast < 0)
            fast = relay_only(s) ? 1 + (sl_rconn_plain_one(&rs(s)->rc) && !rs(s)->auth_hold) : 0;
        if (fast > 0 && rs(s)->head_state == 0 && sl_rconn_plain(r) && !sl_identity_learns(r)) {
            /* The path of the common case in full: a request that no limit
             * sees, changes nothing sluice keeps track of and teaches it no
             * identity, while nothing waits before it (what the checks
             * below would conclude, one by one, for it). */
            s->l->stats.requests++;
            if (sl_uexp_cur != NULL)
                sl_usage_sess_request(s, &(struct sl_req){ .resp = r });
            to += span;
            if (fast == 2) {
                /* one reply each, nothing else changes: counted, and owed
                 * in one go (at once when the cap is reached: framing
                 * stops there, as frame_held() says) */
                run++;
                if (s->inflight + run >= s->l->conf->max_replies_owed)
                    owe_run(s, &run);
            } else {
                allowed(s, SL_PK_PLAIN, commit(s, SL_FX_PLAIN, r->argc - 1));
                fast = -1; /* a CLIENT REPLY SKIP is used up */
            }
            continue;
        }
        owe_run(s, &run); /* before anything else looks at what is owed */
        fast = -1;        /* what follows may change what relay_only() says */
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
        if (r->argc > 0) {
            s->l->stats.requests++;
            if (sl_uexp_cur != NULL)
                sl_usage_sess_request(s, &(struct sl_req){ .resp = r });
        }
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
        uint8_t ak = adapt_kind(s, r, kind, fx);
        /* pooled: a request that is not plainly stateless takes its turn in
         * the ring, with a record of what it is */
        uint8_t slow = 0;
        int rec = s->link != NULL ? sl_rpool_classify(s, r, 0, &slow) : 0;
        if (rec < 0) {
            sl_session_close(s);
            return;
        }
        if (rec) {
            sl_sess_to_upstream(s, b, from, to);
            b->start = from = to;
            if (sl_sess_enqueue(s, &q, span, fx, nchan, kind) < 0)
                return;
            struct sl_pend *e = sl_pend_at(&s->pend, sl_pend_count(&s->pend) - 1);
            e->pooled = 1;
            /* an EXEC, a WATCH, a SELECT ... go upstream and count as any
             * other (one sluice answers itself does not: adapt_local) */
            e->adapt = ak;
            e->tier = ak ? sl_sadapt_tier(s, &q) : 0;
            apply(s);
            if (s->state >= SL_SESS_FLUSHING)
                return;
            from = to = b->start;
            continue;
        }
        if (!s->l->limited && sl_pend_count(&s->pend) == 0 && ak == ADAPT_NO &&
            !(kind == SL_PK_EXEC && rs(s)->rc.multi_dirty) && !sl_sess_meters_owe(s)) {
            to += span; /* the fast path: no limits, nothing waiting */
            allowed(s, kind, commit(s, fx, nchan));
            owed_slow(s, slow);
            continue;
        }
        if (sl_pend_count(&s->pend) == 0) {
            /* Nothing waits before it: when the verdict is in at once
             * (url = local, a lease, a remembered refusal) and allows, the
             * request joins the same write as the ones before it. */
            if (sl_sess_enqueue(s, &q, span, fx, nchan, kind) < 0)
                return;
            struct sl_pend *e = sl_pend_head(&s->pend);
            e->slow = slow;
            e->adapt = ak;
            e->tier = ak ? sl_sadapt_tier(s, &q) : 0;
            if (sl_pend_count(&s->pend) == 1 && e->state == SL_PEND_ALLOW && e->kind == SL_PK_PLAIN &&
                ak == ADAPT_NO &&
                !sl_sess_meters_owe(s) && !sl_rconn_sub_wait(&rs(s)->rc, fx, kind)) {
                sl_pend_unpush(&s->pend); /* it goes with the requests before it */
                to += span;
                allowed(s, kind, commit(s, fx, nchan));
                owed_slow(s, slow);
                continue;
            }
            sl_sess_to_upstream(s, b, from, to);
            b->start = from = to;
        } else {
            sl_sess_to_upstream(s, b, from, to);
            b->start = from = to;
            if (sl_sess_enqueue(s, &q, span, fx, nchan, kind) < 0)
                return;
            struct sl_pend *e = sl_pend_at(&s->pend, sl_pend_count(&s->pend) - 1);
            e->slow = slow;
            e->adapt = ak;
            e->tier = ak ? sl_sadapt_tier(s, &q) : 0;
        }
        apply(s);
        if (s->state >= SL_SESS_FLUSHING)
            return;
        from = to = b->start;
    }
    owe_run(s, &run);
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
        if (s->link != NULL && sl_rpool_classify(s, head, 1, NULL) < 0) {
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

/* The common case of the reply loop below, in full: nothing to slot in or
 * to swallow, no AUTH waiting on its answer, not pooled, nothing to tell
 * apart (sl_rconn_replies_plain): each whole small reply at <off> pays one
 * reply owed and goes on as it is. Returns the bytes they take. */
static uint32_t plain_replies(struct sl_session *s, struct sl_buf *b, uint32_t off)
{
    struct sl_resp_sess *r = rs(s);
    if (s->tail_n == 0 || s->seg_n > 0 || r->swallow || s->link != NULL || r->auth_next != NULL ||
        sl_sadapt_owed(s) > 0 ||
        r->auth_pick != NULL || !sl_reply_idle(&r->scan) || !sl_rconn_replies_plain(&r->rc))
        return 0;
    uint32_t k;
    size_t last = 0;
    size_t n = sl_reply_whole(&r->scan, b->data + off, b->end - off, s->tail_n, &k, &last);
    if (k == 0)
        return 0;
    r->reply_first = (uint8_t)b->data[off + last];
    s->tail_n -= k;
    r->paid_total += k;
    while (k-- > 0)
        sl_sess_paid(s);
    return (uint32_t)n;
}

/* Sends the replies in the new bytes of <b>, with due local replies
 * slotted in at reply boundaries, and drops a reply being swallowed. */
static void upstream_resp(struct sl_session *s, struct sl_buf *b)
{
    uint32_t off = b->start;
    uint32_t fstart = UINT32_MAX; /* where the frame in progress began, if in <b> */
    while (off < b->end) {
        off += plain_replies(s, b, off);
        if (off == b->end)
            break;
        /* At a boundary, the next reply may be one to drop (EXECABORT, a
         * RESET's, catch_up()): never an array or a push, which may be a
         * pub/sub message or an invalidation that comes before it. */
        if (!rs(s)->swallow && s->seg_n > 0 && sl_reply_idle(&rs(s)->scan) &&
            b->data[off] != '*' && b->data[off] != '>') {
            struct sl_reply_seg *g = &s->segs[s->seg_head];
            if ((g->flags & SL_SEG_SWALLOW) && g->n == 1) {
                sl_sess_to_client(s, b, b->start, off);
                b->start = off;
                rs(s)->swallow = 1;
            }
        }
        if (sl_reply_idle(&rs(s)->scan)) {
            rs(s)->reply_first = (uint8_t)b->data[off];
            rs(s)->reply_busy = rs(s)->reply_first == '-' && sl_sadapt_owed(s) > 0 &&
                                (rs(s)->reply_lost || overload_reply(b->data + off, b->end - off));
            rs(s)->reply_second = 0;
            rs(s)->reply_seen = 0;
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
        if (s->link != NULL && rs(s)->reply_seen < 2 && n > 0) {
            /* the reply's second byte, wherever the read cut it (pooled
             * sessions only: EXEC's nil array, sess_rpool.c) */
            if (rs(s)->reply_seen == 0 && n > 1)
                rs(s)->reply_second = (uint8_t)b->data[off + 1];
            else if (rs(s)->reply_seen == 1)
                rs(s)->reply_second = (uint8_t)b->data[off];
            rs(s)->reply_seen = (uint8_t)(rs(s)->reply_seen + (n > 1 ? 2 : 1));
        }
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
    if (s->link != NULL && ((rs(s)->pool_hold && !sl_sess_link_waiting(s)) || sl_rpool_unpin_due(s)))
        sl_sess_resume_later(s);
}

/* ---- the table ---------------------------------------------------------------- */

static void resume(struct sl_session *s)
{
    if (rs(s)->catch_until != 0 && sl_sess_waits_now() >= rs(s)->catch_until) {
        s->l->stats.idle_closed++;
        sl_session_close(s); /* catch_up()'s answer never came */
        return;
    }
    if (s->link != NULL)
        sl_rpool_settle(s);
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
    /* Pooled, on a connection of its own: a blocked or subscribed client
     * that goes is closed now, as Redis closes it on reading the EOF (its
     * replies may never come); the connection is closed with it. */
    if (s->link != NULL && sl_sess_link_pinned(s) &&
        ((rs(s)->pin.why & (SL_PIN_BLOCK | SL_PIN_SUB | SL_PIN_MONITOR)) ||
         sl_rconn_passthru(&rs(s)->rc)))
        sl_session_close(s);
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
    sl_rpool_free(s);
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
    .link_lost = sl_rpool_link_lost,
    .link_open = sl_rpool_link_open,
};

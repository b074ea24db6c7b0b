/* sluice — connection limits at accept: a session takes a place under
 * every connection limit before it connects upstream; over one it is
 * refused with the protocol's words, or, with action = delay, waits in the
 * login queue (not read, not connected) and asks again until its place
 * comes or its wait runs out. */
#include <stddef.h>

#include "core/log.h"
#include "limit/limiter.h"
#include "limit/places.h"
#include "net/dlog.h"
#include "net/listener.h"
#include "net/session.h"
#include "net/session-i.h"
#include "shape/wait.h"

#define GATE_POLL_US 50000 /* a queued connection asks again this often */


static void on_gate_poll(struct sl_wait *w)
{
    sl_sess_gate_try(sl_sess_of_park(w));
}

/* Refused a place: the client learns why (resp), then the close. */
static void gate_refuse(struct sl_session *s, const struct sl_verdict *v)
{
    struct sl_listener *l = s->l;
    l->stats.conns_refused++;
    sl_log_debug_rl("connection_limit", "connection limit: refused", "listener=%s limit=%s",
                    l->name, v->limit);
    if (sl_dlog_wants(l->srv->conf, SL_DLOG_REJECTED)) {
        struct sl_dlog_entry d = {
            .listener = l->name, .limit = v->limit,
            .identity = v->identity[0] ? v->identity : "-",
            .request = "connection", .request_len = 10, .cost = 1,
            .outcome = SL_DLOG_REJECTED, .wait_ms = SL_DLOG_NONE, .store_down = v->store_down,
        };
        sl_dlog_write(l->srv->loop, l->srv->conf, &d);
    }
    sl_place_gave_up(s->place, v);
    sl_place_free(s->place);
    s->place = NULL;
    sl_sess_answer_close(s, SL_ANSWER_CONN_LIMIT, v->limit);
}

static void gate_verdict(struct sl_session *s, const struct sl_verdict *v)
{
    if (s->state != SL_SESS_CONNECTING || s->place == NULL)
        return;
    if (v->kind == SL_VERDICT_ALLOW) {
        sl_sess_connect_upstream(s);
        return;
    }
    uint64_t now = sl_sess_waits_now();
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

void sl_sess_gate_try(struct sl_session *s)
{
    struct sl_verdict v;
    if (sl_place_acquire(s->place, &v, on_gate, s) == 0)
        gate_verdict(s, &v);
}


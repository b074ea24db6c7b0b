/* sluice — what a session asks before a request goes on: the limiter's
 * verdicts, taken in request order through the ring (net/pend.h), the
 * byte meters (bandwidth limits: their credit pauses a side, a reject one
 * in debt refuses requests), and who the client is. The session core
 * (session.c) reads and writes; this file decides. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "core/log.h"
#include "identity/identity.h"
#include "limit/limiter.h"
#include "net/listener.h"
#include "net/pend.h"
#include "net/session.h"
#include "net/session-i.h"
#include "net/turn.h"
#include "shape/meter.h"
#include "shape/wait.h"

/* ---- byte meters ---------------------------------------------------------- */

static struct sl_meter_ctx meter_ctx(struct sl_session *s)
{
    struct sl_meter_ctx c = { s->l->srv->limiter, s->l->conf, s->ident, s->id };
    return c;
}

/* A bytes limit with action = reject is in debt or said no: on resp,
 * plain requests must ask meter_gate before going upstream. */
int sl_sess_meters_owe(const struct sl_session *s)
{
    return (s->meter[0] && sl_meter_owes(s->meter[0])) ||
           (s->meter[1] && sl_meter_owes(s->meter[1]));
}

/* May a request of <kind>, <span> bytes long, go upstream now? On
 * SL_METER_REFUSE, <v> says how; the request's bytes never go upstream, so
 * bytes_in gets them back. */
int sl_sess_meter_gate(struct sl_session *s, int kind, uint32_t span, struct sl_verdict *v)
{
    if (kind != SL_PK_PLAIN) /* MULTI, EXEC, AUTH ... keep the connection's state whole */
        return SL_METER_GO;
    uint64_t now = sl_sess_waits_now();
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
    if (!s->proto->framed && room == 0 && sl_meter_refused(m, sl_sess_waits_now())) {
        s->l->stats.rejected++;
        sl_log_debug("bytes limit: closing", "listener=%s limit=%s", s->l->name,
                     m->refusal ? m->refusal->limit : "");
        sl_session_close(s);
        return;
    }
    sl_sess_pause(s, up, SL_PAUSE_SHAPE, room == 0);
}

/* The answer to a meter's take came (or a reservation fell due): shape,
 * and let a request held by the meter ask again. */
static void meter_changed(struct sl_meter *m)
{
    struct sl_session *s = m->owner;
    meter_shape(m);
    if (s->meter_hold && s->state < SL_SESS_FLUSHING) {
        s->meter_hold = 0;
        sl_sess_resume(s);
    }
}

/* <n> bytes were read from side <up>. */
void sl_sess_meter_read(struct sl_session *s, int up, size_t n)
{
    struct sl_meter *m = s->meter[up];
    if (m == NULL)
        return;
    struct sl_meter_ctx c = meter_ctx(s);
    sl_meter_charge(m, &c, (int64_t)n, sl_sess_waits_now());
    meter_shape(m);
}

/* Sets up the session's meters (at connect); returns -1 when out of memory. */
int sl_sess_meters_init(struct sl_session *s)
{
    if (s->l->srv->limiter == NULL)
        return 0;
    for (int i = 0; i < 2; i++) {
        struct sl_meter_plan p;
        if (!sl_limiter_plan(s->l->srv->limiter, s->l->conf,
                             i ? SL_METRIC_BYTES_OUT : SL_METRIC_BYTES_IN, &p))
            continue;
        if (sl_sess_ident(s) == NULL || (s->meter[i] = malloc(sizeof(struct sl_meter))) == NULL)
            return -1;
        struct sl_meter_ctx c = meter_ctx(s);
        sl_meter_init(s->meter[i], &c, i ? SL_METRIC_BYTES_OUT : SL_METRIC_BYTES_IN, s->proto->framed,
                      meter_changed, s);
        sl_meter_charge(s->meter[i], &c, 0, sl_sess_waits_now()); /* the first take */
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
struct sl_ident_state *sl_sess_ident(struct sl_session *s)
{
    if (s->ident == NULL && (s->ident = malloc(sizeof(*s->ident))) != NULL) {
        struct sockaddr_storage peer;
        int plen = sizeof(peer);
        int ok = uv_tcp_getpeername(&s->client, (struct sockaddr *)&peer, &plen) == 0;
        sl_identity_init(s->ident, ok ? (struct sockaddr *)&peer : NULL);
    }
    return s->ident;
}

uint64_t sl_sess_waits_now(void)
{
    return sl_waits_default ? sl_waits_now(sl_waits_default) : sl_turn_now_us();
}

/* ---- verdicts, in request order ------------------------------------------- */

/* Records verdict <v> in entry <e>. */
void sl_sess_verdict(struct sl_pend *e, const struct sl_verdict *v)
{
    char line[2048];
    size_t n = e->s->proto->verdict_text(e->s, v, line, sizeof(line));
    free(e->text);
    e->text = NULL;
    if (n > 0 && (e->text = malloc(n)) != NULL) {
        memcpy(e->text, line, n);
        e->len = (uint32_t)n;
    }
    e->state = v->kind == SL_VERDICT_REJECT ? SL_PEND_REJECT : SL_PEND_ALLOW;
    if (v->kind == SL_VERDICT_ALLOW && v->delay_us > 0) {
        e->state = SL_PEND_DELAY;
        e->due_us = sl_sess_waits_now() + v->delay_us;
    }
}

static void on_verdict(void *data, const struct sl_verdict *v)
{
    struct sl_pend *e = data;
    struct sl_session *s = e->s;
    e->h = NULL;
    sl_sess_verdict(e, v);
    sl_sess_resume_later(s);
}

/* Asks the limiter about request <r> (complete, or the head of a big one)
 * and queues it in order. Returns 0, or -1 when the ring is full. */
int sl_sess_enqueue(struct sl_session *s, const struct sl_req *r, uint32_t span,
                   uint8_t fx, uint32_t nchan, int kind)
{
    if (sl_pend_full(&s->pend) || s->state >= SL_SESS_FLUSHING)
        return -1;
    struct sl_pend *e = sl_pend_push(&s->pend);
    if (e == NULL) {
        sl_session_close(s); /* out of memory */
        return -1;
    }
    e->s = s;
    e->span = span;
    e->fx = fx;
    e->nchan = nchan;
    e->kind = (uint8_t)kind;
    if (kind == SL_PK_TAIL || (!s->l->limited && !sl_sess_meters_owe(s)) ||
        s->l->srv->limiter == NULL) {
        e->state = SL_PEND_ALLOW;
        return 0;
    }
    struct sl_verdict v;
    struct sl_server *srv = s->l->srv;
    if (sl_sess_ident(s) == NULL) {
        sl_session_close(s);
        return -1;
    }
    if (sl_sess_meter_gate(s, kind, span, &v) == SL_METER_REFUSE) {
        sl_sess_verdict(e, &v);
        return 0;
    }
    if (!s->l->limited) {
        e->state = SL_PEND_ALLOW;
        return 0;
    }
    if (sl_limiter_check_req(srv->limiter, s->l->conf, s->ident, s->id, r, &v, on_verdict, e,
                             &e->h) == 1) {
        e->state = SL_PEND_WAIT;
        return 0;
    }
    e->h = NULL;
    sl_sess_verdict(e, &v);
    return 0;
}

/* Bytes of the requests waiting in the ring: they lie at the start of the
 * client chunk, in order. */
uint32_t sl_sess_pend_bytes(const struct sl_session *s)
{
    return sl_pend_bytes(&s->pend);
}

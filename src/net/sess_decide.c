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
#include "net/usage_export.h"
#include "net/alog.h"
#include "net/dlog.h"
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
        if (sl_dlog_wants(s->l->srv->conf, SL_DLOG_REJECTED) && m->refusal != NULL) {
            const struct sl_verdict *v = m->refusal;
            struct sl_dlog_entry d = {
                .listener = s->l->name, .limit = v->limit,
                .identity = v->identity[0] ? v->identity : "-",
                .request = "bytes", .request_len = 5,
                .outcome = SL_DLOG_REJECTED, .wait_ms = SL_DLOG_NONE,
                .store_down = v->store_down,
            };
            sl_dlog_write(s->l->srv->loop, s->l->srv->conf, &d);
        }
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

/* <n> bytes were read from side <up> (and counted for [usage]). */
void sl_sess_meter_read(struct sl_session *s, int up, size_t n)
{
    if (sl_uexp_cur != NULL)
        sl_usage_sess_add(s, NULL, up ? SL_USAGE_BYTES_OUT : SL_USAGE_BYTES_IN, n);
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

/* A metered side reads no more than its credit (at least a byte: libuv
 * takes an empty buffer for an error), so a shaped transfer overshoots by
 * nothing. */
unsigned sl_sess_room_of(struct sl_meter *m, unsigned len)
{
    if (m == NULL)
        return len;
    uint64_t room = sl_meter_room(m);
    if (room == 0)
        room = 1;
    return room < len ? (unsigned)room : len;
}

/* The session gives answer <what> on its own and closes once it is out;
 * a protocol without words for it closes at once. */
void sl_sess_answer_close(struct sl_session *s, enum sl_answer what, const char *limit)
{
    char line[1024];
    size_t n = s->proto->answer(s, what, limit, line, sizeof(line));
    char *text = n > 0 ? malloc(n) : NULL;
    if (text == NULL) {
        sl_session_close(s);
        return;
    }
    memcpy(text, line, n);
    s->state = SL_SESS_RELAY;
    sl_tq_touch(&s->l->active, &s->tq, sl_sess_now_ms(s));
    sl_sess_local(s, text, (uint32_t)n, SL_SEG_OWNED | SL_SEG_CLOSE);
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

/* ---- the decision log (net/dlog.h) ------------------------------------------ */

#define LABEL_MAX 256 /* bytes of a request's name in a line: "GET /path" cut here */
#define CMD_MAX   32  /* ... of a RESP command name */

/* What a decision line needs of its request, kept while the verdict is out
 * (the request itself is gone by then). */
struct note {
    uint16_t label_len;
    uint8_t  http;
    uint8_t  method_len;              /* http: the label's first word */
    char     identity[SL_ID_MAX + 1]; /* the request's, for delayed and allowed lines */
    char     label[LABEL_MAX];
};

/* The request decided now (sl_sess_enqueue), or NULL: a verdict that lands
 * later reads the entry's note instead. */
static const struct sl_req *deciding;

/* Names request <r> into <n>: a RESP command by its name in upper case
 * (never an argument: keys and values may be secrets), an HTTP request by
 * its method and path (never the query string). */
static void note_of(struct sl_session *s, const struct sl_req *r, struct note *n)
{
    memset(n, 0, offsetof(struct note, identity));
    n->identity[0] = '\0';
    if (r->http != NULL) {
        const struct sl_http_head *hd = r->http;
        uint32_t ml = hd->method_len < 32 ? hd->method_len : 32;
        memcpy(n->label, hd->buf + hd->method_off, ml);
        n->method_len = (uint8_t)ml;
        n->label[ml] = ' ';
        /* authority-form (CONNECT) and "*" have no path: the target */
        uint32_t off = hd->path_len ? hd->path_off : hd->target_off;
        uint32_t len = hd->path_len ? hd->path_len : hd->target_len;
        if (len > LABEL_MAX - ml - 1)
            len = LABEL_MAX - ml - 1;
        memcpy(n->label + ml + 1, hd->buf + off, len);
        n->label_len = (uint16_t)(ml + 1 + len);
        n->http = 1;
    } else if (r->resp != NULL && r->resp->argc > 0) {
        size_t len = strnlen(r->resp->argv[0], CMD_MAX);
        for (size_t i = 0; i < len; i++) {
            char c = r->resp->argv[0][i];
            n->label[i] = c >= 'a' && c <= 'z' ? (char)(c - 'a' + 'A') : c;
        }
        n->label_len = (uint16_t)len;
    }
    if (s->ident != NULL)
        sl_identity_of_req(s->l->conf, s->ident, r, n->identity);
}

/* Writes the decision line of verdict <v> on entry <e>, when the
 * configuration wants one. */
static void decision_line(struct sl_pend *e, const struct sl_verdict *v)
{
    struct sl_session *s = e->s;
    struct sl_server *srv = s->l->srv;
    int outcome = v->kind == SL_VERDICT_REJECT ? SL_DLOG_REJECTED
                  : v->delay_us > 0            ? SL_DLOG_DELAYED
                                               : SL_DLOG_ALLOWED;
    /* the rate bound first: past it a decision costs a counter, not the
     * work of naming its request */
    int main_line = sl_dlog_wants(srv->conf, outcome) &&
                    !(outcome == SL_DLOG_ALLOWED && v->policy[0] == '\0') &&
                    sl_dlog_take(srv->loop, srv->conf, outcome);
    int shadow_line = v->shadow[0] != '\0' && sl_dlog_wants(srv->conf, SL_DLOG_SHADOW) &&
                      sl_dlog_take(srv->loop, srv->conf, SL_DLOG_SHADOW);
    if (!main_line && !shadow_line)
        return;
    struct note local, *n = (struct note *)e->note;
    if (n == NULL) {
        n = &local;
        if (deciding != NULL)
            note_of(s, deciding, n);
        else
            memset(n, 0, sizeof(*n)); /* a bytes limit refused a request already allowed */
    }
    struct sl_dlog_entry d = {
        .listener = s->l->name,
        .limit = outcome == SL_DLOG_REJECTED ? v->limit : v->policy,
        .identity = outcome == SL_DLOG_REJECTED && v->identity[0] ? v->identity : n->identity,
        .request = n->label_len ? n->label : "-",
        .request_len = n->label_len ? n->label_len : 1,
        .outcome = outcome,
        .store_down = v->store_down,
    };
    if (d.identity[0] == '\0')
        d.identity = "-";
    if (n->label_len > 0)
        d.cost = sl_limiter_cost(srv->limiter, d.limit, n->label,
                                 n->http ? n->method_len : n->label_len, n->http);
    if (outcome == SL_DLOG_REJECTED)
        d.wait_ms = v->never ? SL_DLOG_NEVER : (v->retry_after_us + 999) / 1000;
    else
        d.wait_ms = (v->delay_us + 999) / 1000;
    if (main_line)
        sl_dlog_put(srv->conf, &d);
    if (!shadow_line)
        return;
    /* what the shadow limit would have done: the request went on */
    d.limit = v->shadow;
    d.identity = v->shadow_global ? "*" : n->identity[0] ? n->identity : "-";
    d.outcome = SL_DLOG_SHADOW;
    d.store_down = 0;
    d.cost = n->label_len > 0 ? sl_limiter_cost(srv->limiter, d.limit, n->label,
                                                n->http ? n->method_len : n->label_len, n->http)
                              : 0;
    d.wait_ms = v->shadow_retry_us == UINT64_MAX ? SL_DLOG_NEVER : (v->shadow_retry_us + 999) / 1000;
    sl_dlog_put(srv->conf, &d);
}

/* A verdict for request <r> is to come later: keep what its line needs. */
static void note_keep(struct sl_session *s, struct sl_pend *e, const struct sl_req *r)
{
    if (s->l->srv->conf->decision_log == SL_DLOG_OFF && sl_uexp_cur == NULL)
        return;
    struct note *n = malloc(sizeof(*n));
    if (n == NULL)
        return; /* the line says request=- */
    note_of(s, r, n);
    e->note = (char *)n;
}

/* ---- verdicts, in request order ------------------------------------------- */

/* [usage]: a rejection or a delay counted for the request's identity (the
 * one its limits were keyed by: the note kept while the verdict was out,
 * or the request being decided now). */
static void usage_verdict(struct sl_pend *e, const struct sl_verdict *v)
{
    int f = v->kind == SL_VERDICT_REJECT ? SL_USAGE_REJECTED
            : v->delay_us > 0            ? SL_USAGE_DELAYED
                                         : -1;
    if (f < 0)
        return;
    char id[SL_ID_MAX + 1];
    const struct note *n = (const struct note *)e->note;
    if (n != NULL && n->identity[0] != '\0')
        snprintf(id, sizeof(id), "%s", n->identity);
    else if (deciding != NULL && sl_sess_ident(e->s) != NULL)
        sl_identity_of_req(e->s->l->conf, e->s->ident, deciding, id);
    else
        id[0] = '\0'; /* the connection's */
    sl_usage_sess_add(e->s, id, (enum sl_usage_field)f, 1);
}

/* Records verdict <v> in entry <e>. */
void sl_sess_verdict(struct sl_pend *e, const struct sl_verdict *v)
{
    if (sl_uexp_cur != NULL)
        usage_verdict(e, v);
    if (e->s->l->srv->conf->decision_log != SL_DLOG_OFF)
        decision_line(e, v);
    if (e->s->alog != NULL)
        sl_alog_verdict(e->s, v);
    if (e->note != NULL) {
        free(e->note);
        e->note = NULL;
    }
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
        deciding = r;
        sl_sess_verdict(e, &v);
        deciding = NULL;
        return 0;
    }
    if (!s->l->limited) {
        e->state = SL_PEND_ALLOW;
        return 0;
    }
    if (sl_limiter_check_req(srv->limiter, s->l->conf, s->ident, s->id, r, &v, on_verdict, e,
                             &e->h) == 1) {
        e->state = SL_PEND_WAIT;
        note_keep(s, e, r);
        return 0;
    }
    e->h = NULL;
    deciding = r;
    sl_sess_verdict(e, &v);
    deciding = NULL;
    return 0;
}

/* Bytes of the requests waiting in the ring: they lie at the start of the
 * client chunk, in order. */
uint32_t sl_sess_pend_bytes(const struct sl_session *s)
{
    return sl_pend_bytes(&s->pend);
}

/* sluice — adaptive concurrency in the loop (docs/adaptive.md): each
 * listener with `adaptive_concurrency = on | shadow` has one controller per
 * worker (shape/adapt.h); its sessions ask it before a request goes
 * upstream and tell it how the reply went.
 *
 *   request at the head of the ring, allowed by the limits
 *       └─> sl_sadapt_admit ──GO──> sent upstream (resp: sl_sadapt_sent; http: its queue)
 *                  │ WAIT: the session stops there (reading paused, in order);
 *                  │       a place (granted) or a refusal (shed) resumes it
 *                  └ SHED: the request's answer is the refusal, in its place
 *   reply ──> sl_sadapt_reply / sl_sadapt_end: a latency sample, or overload
 *             (-BUSY, -LOADING, 5xx, a timeout); the place goes back
 *
 * Times are the loop turn's clock (net/turn.h), in nanoseconds; one timer
 * per controller fires at the queue's next deadline. Which requests count
 * is the protocol's to say (sess_resp.c, sess_http.c): blocking commands,
 * pub/sub, tunnels and the commands queued inside MULTI do not. */
#ifndef SL_NET_SESS_ADAPT_H
#define SL_NET_SESS_ADAPT_H

#include <stdint.h>
#include <stdio.h>

#include "net/listener-t.h"
#include "net/pend-t.h"
#include "net/sess_adapt-t.h"
#include "net/session-t.h"
#include "proto/req-t.h"

/* ---- the listener's controller ---- */

/* The listener's configuration was (re)applied: the controller is made,
 * updated or turned off (after the limiter of that configuration is in
 * place: tiers come from its limits). */
void sl_actl_conf(struct sl_listener *l);

/* The listener is freed (no session is left). */
void sl_actl_free(struct sl_listener *l);

/* Metrics of every listener's controller in this worker. */
struct sl_metrics;
void sl_actl_metrics(struct sl_server *srv, struct sl_metrics *m);

/* /stats: `,"adaptive":{...}` for the listener named <name> in this worker
 * (the same figures as the metrics; nothing when it does not adapt). */
void sl_actl_stats_json(const struct sl_server *srv, const char *name, FILE *out);

/* ---- sessions ---- */

/* 1 when the session's listener adapts (on or shadow). */
static inline int sl_sadapt_on(const struct sl_session *s)
{
    return s->l->adapt != NULL && s->l->adapt->mode != 0;
}

/* The shedding tier of request <r> (0 .. SL_ADAPT_TIERS - 1, from the
 * limits' priority and match_identity); 0 when the listener has none. */
uint8_t sl_sadapt_tier(struct sl_session *s, const struct sl_req *r);

enum { SL_SADAPT_WAIT = 0, SL_SADAPT_GO, SL_SADAPT_SHED };

/* May allowed request <p> (the head of the ring, p->adapt set) go upstream?
 * GO: it holds a place now (the protocol records it as sent, or gives it
 * back with sl_sadapt_end(..., SL_SADAPT_DROP) if it does not go after
 * all); WAIT: it waits in the queue, the session is resumed when that
 * changes; SHED: refused, p->shed = 1 + the reason (the protocol answers
 * in its place). */
int sl_sadapt_admit(struct sl_session *s, struct sl_pend *p);

/* A refusal's reason as metrics and answers name it. */
const char *sl_sadapt_why(unsigned reason);
/* The retry hint of a RESP refusal, in ms: the queue's target. */
uint64_t sl_sadapt_retry_ms(const struct sl_session *s);

/* resp: the request just sent (it was GO) ends with reply number <seq>. */
void sl_sadapt_sent(struct sl_session *s, uint64_t seq);
/* resp: reply number <seq> came (<overload>: -BUSY, -LOADING). */
void sl_sadapt_reply(struct sl_session *s, uint64_t seq, int overload);
/* resp: requests in flight that hold a place (their replies are looked at). */
static inline uint32_t sl_sadapt_owed(const struct sl_session *s)
{
    return s->adapt != NULL ? s->adapt->qn : 0;
}

/* The turn's clock in nanoseconds (what sent times are). */
uint64_t sl_sadapt_now(void);

/* http: a request that held a place (sent at <sent_ns>) ended: */
enum { SL_SADAPT_SAMPLE = 0, SL_SADAPT_OVERLOAD, SL_SADAPT_DROP };
void sl_sadapt_end(struct sl_session *s, uint64_t sent_ns, int how);
/* http: a request sent holds a place (counted so a close gives it back). */
void sl_sadapt_hold(struct sl_session *s);

/* The session is freed: its waiter leaves the queue, its places go back. */
void sl_sadapt_free(struct sl_session *s);

#endif

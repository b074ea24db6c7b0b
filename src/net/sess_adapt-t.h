/* sluice — types of adaptive concurrency in the loop (net/sess_adapt.h): a
 * listener's controller in one worker, and what a session keeps of it. */
#ifndef SL_NET_SESS_ADAPT_T_H
#define SL_NET_SESS_ADAPT_T_H

#include <stdint.h>
#include <uv.h>

#include "shape/adapt-t.h"

struct sl_listener;
struct sl_session;
struct sl_store_req;

/* Refusals counted beyond the controller's own reasons. */
#define SL_ACTL_SHADOW SL_ADAPT_SHED_REASONS /* shadow: over the limit, let through */

/* One listener's controller in one worker (each worker adapts on its own
 * measurements). It lives from the first configuration that turns it on
 * until the listener is freed: a reload that turns it off leaves it in
 * place (mode 0) so the slots sessions still hold go back to it. */
struct sl_actl {
    struct sl_adapt     a;        /* the pure controller and its queue (shape/adapt.h) */
    uv_timer_t          timer;    /* the queue's next deadline (sl_adapt_due) */
    struct sl_listener *l;
    uint8_t             mode;     /* adaptive_concurrency: 0 off, 1 on, 2 shadow */
    uint8_t             tiered;   /* some limit of the listener names tiers (priority,
                                     match_identity): requests are sorted by identity */
    uint64_t            shadow;   /* shadow: requests that found the limit reached (they
                                     would have waited, and perhaps been refused) */
    uint64_t            refused[SL_ADAPT_SHED_REASONS]; /* refusals sent, by reason */
    uint64_t            wall_told_ns; /* when the controller last heard the wall clock */

    /* the fleet's baseline (net/adapt_share.c) */
    struct sl_store_req *share_req;   /* a publication in flight */
    uint64_t            share_at_ns;  /* when the last one was sent (0: never) */
    uint64_t            fleet_live;   /* live entries in that answer */
    uint64_t            shares, share_errors; /* publications answered, failed */
};

/* A session's part: its one waiter (only the head of its requests ever
 * waits: they go in order), and the requests it has in flight.
 *
 * resp: a session holds at most one place: its first counted request takes
 * it, the ones it pipelines behind while replies are owed join that batch,
 * and the place goes back with the batch's last reply. Redis serves
 * connections in turns, a pipeline in one go: the unit that competes for it
 * is the connection with work, not the command (counted per command, a
 * 16-deep pipeline read as 16 times the load, and its depth as queueing).
 * http: one place per request in flight. */
struct sl_sadapt_sent {
    uint64_t seq;   /* resp: the number of the reply that ends it */
    uint64_t t_ns;  /* when it was sent (the turn's clock) */
    uint8_t  first; /* it opened a batch: took the session's place; its latency is the
                       sample (the others' grows with the pipeline's depth, not the
                       upstream's queue) */
};

struct sl_sadapt {
    struct sl_adapt_waiter w;     /* queued for a place (first: the waiter is the state) */
    struct sl_session     *s;
    uint8_t                granted; /* a place came while it waited: its request takes it */
    uint8_t                shed;    /* 1 + enum sl_adapt_reason: refused while it waited */
    uint32_t               held;    /* http: places its requests in flight hold (sess_http.c
                                       keeps which in its queue of requests sent) */
    struct sl_sadapt_sent *q;     /* resp: requests in flight holding a place, in order */
    uint32_t               qh, qn, qcap;
};

#endif

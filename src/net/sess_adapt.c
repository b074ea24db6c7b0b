/* sluice — adaptive concurrency in the loop: the controller of each
 * listener in this worker, its queue's timer, the sessions' places, the
 * refusals and the metrics (net/sess_adapt.h; the controller itself is the
 * pure shape/adapt.c). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "admin/admin.h"
#include "core/log.h"
#include "identity/identity.h"
#include "limit/limiter.h"
#include "net/adapt_share.h"
#include "net/dlog.h"
#include "net/listener.h"
#include "net/sess_adapt.h"
#include "net/session-i.h"
#include "net/turn.h"
#include "shape/adapt.h"

uint64_t sl_sadapt_now(void)
{
    return sl_turn_now_us() * 1000;
}

const char *sl_sadapt_why(unsigned reason)
{
    static const char *const why[] = {
        [SL_ADAPT_SHED_FULL] = "queue_full",   [SL_ADAPT_SHED_EVICTED] = "evicted",
        [SL_ADAPT_SHED_STANDING] = "standing", [SL_ADAPT_SHED_MAXWAIT] = "expired",
        [SL_ACTL_SHADOW] = "shadow",
    };
    return reason <= SL_ACTL_SHADOW ? why[reason] : "overloaded";
}

/* ---- the controller and its timer ------------------------------------------- */

static void on_timer(uv_timer_t *t);
static void shed(struct sl_actl *c, struct sl_adapt_waiter *w, unsigned reason);

/* Refuses the waiters due at <now>, then sets the timer for the queue's
 * next deadline (none: stopped). */
static void arm(struct sl_actl *c, uint64_t now)
{
    enum sl_adapt_reason why;
    struct sl_adapt_waiter *w;
    while ((w = sl_adapt_expired(&c->a, now, &why)) != NULL)
        shed(c, w, why);
    uint64_t due = sl_adapt_due_after(&c->a, now);
    if (due == UINT64_MAX) {
        uv_timer_stop(&c->timer);
        return;
    }
    uint64_t ms = due > now ? (due - now + 999999) / 1000000 : 0;
    uv_timer_start(&c->timer, on_timer, ms, 0);
}

/* A decision line for a refusal (or, in shadow, a request let through
 * over the limit): limit=adaptive:REASON, the request not named (it is
 * bytes in the client's chunk by now). */
static void refusal_line(struct sl_listener *l, unsigned reason, uint64_t retry_ms)
{
    const struct sl_conf *conf = l->srv->conf;
    int outcome = reason == SL_ACTL_SHADOW ? SL_DLOG_SHADOW : SL_DLOG_REJECTED;
    if (!sl_dlog_wants(conf, outcome))
        return;
    char limit[48];
    snprintf(limit, sizeof(limit), "adaptive:%s", sl_sadapt_why(reason));
    struct sl_dlog_entry d = {
        .listener = l->name, .limit = limit, .identity = "-", .request = "-", .request_len = 1,
        .outcome = outcome, .wait_ms = retry_ms,
    };
    sl_dlog_write(l->srv->loop, conf, &d);
}

/* Waiter <w> was refused (<reason>): its session answers in its place. */
static void shed(struct sl_actl *c, struct sl_adapt_waiter *w, unsigned reason)
{
    struct sl_sadapt *st = (struct sl_sadapt *)w;
    st->shed = (uint8_t)(1 + reason);
    sl_sess_resume_later(st->s);
    (void)c;
}

/* Places free now go to the waiters, highest tier first. */
/* The wall clock, for the controller's probe schedule: probes start at
 * multiples of the probe period on it, so instances on other hosts (NTP)
 * probe together (docs/adaptive.md). Told at start and once a second after
 * (the wall clock may be slewed or stepped; the controller reschedules only
 * on a step). */
static void wallclock(struct sl_actl *c, uint64_t now)
{
    struct timespec ts;
    if (c->wall_told_ns != 0 && now - c->wall_told_ns < 1000000000ull)
        return;
    c->wall_told_ns = now ? now : 1;
    if (clock_gettime(CLOCK_REALTIME, &ts) == 0)
        sl_adapt_wallclock(&c->a, now, (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec);
}

static void pump(struct sl_actl *c, uint64_t now)
{
    struct sl_adapt_waiter *w;
    wallclock(c, now);
    sl_actl_share(c, now);
    while ((w = sl_adapt_next(&c->a, now)) != NULL) {
        struct sl_sadapt *st = (struct sl_sadapt *)w;
        st->granted = 1;
        sl_sess_resume_later(st->s);
    }
    arm(c, now);
}

static void on_timer(uv_timer_t *t)
{
    struct sl_actl *c = t->data;
    pump(c, sl_sadapt_now());
}

/* A place goes back (after its sample, overload or drop). */
static void put_back(struct sl_actl *c, uint64_t now)
{
    sl_adapt_release(&c->a, now);
    pump(c, now);
}

static void params_of(const struct sl_listener_conf *lc, struct sl_adapt_params *p)
{
    sl_adapt_params_default(p);
    p->min_limit = (uint32_t)lc->adaptive_min_limit;
    p->max_limit = (uint32_t)lc->adaptive_max_limit;
    p->initial_limit = (uint32_t)lc->adaptive_initial_limit;
    p->queue_cap = (uint32_t)lc->adaptive_queue;
    p->queue_target_ns = lc->adaptive_queue_target_us * 1000;
    p->queue_interval_ns = lc->adaptive_queue_interval_us * 1000;
    p->probe_ns = lc->adaptive_probe_interval_us * 1000;
    /* instances and workers probe at different times */
    p->seed = uv_hrtime() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)lc;
}

void sl_actl_conf(struct sl_listener *l)
{
    const struct sl_listener_conf *lc = l->conf;
    struct sl_actl *c = l->adapt;
    if (lc->adaptive == 0 && c == NULL)
        return;
    uint64_t now = sl_sadapt_now();
    struct sl_adapt_params p;
    params_of(lc, &p);
    if (c == NULL) {
        c = calloc(1, sizeof(*c));
        if (c == NULL || sl_adapt_init(&c->a, &p, now) < 0) {
            sl_log_error("adaptive concurrency: cannot start", "listener=%s", l->name);
            free(c);
            return;
        }
        uv_timer_init(l->srv->loop, &c->timer);
        uv_unref((uv_handle_t *)&c->timer); /* never what keeps the loop running */
        c->timer.data = c;
        c->l = l;
        l->adapt = c;
    } else {
        /* A reload: the measurements stay, the bounds change. */
        struct sl_adapt tmp;
        if (sl_adapt_init(&tmp, &p, now) == 0) {
            p.seed = c->a.p.seed;
            c->a.p = p;
            if (c->a.limit < p.min_limit)
                c->a.limit = p.min_limit;
            if (c->a.limit > p.max_limit)
                c->a.limit = p.max_limit;
        }
    }
    c->mode = (uint8_t)lc->adaptive;
    c->tiered = (uint8_t)sl_limiter_tiered(l->srv->limiter, l->name);
    if (c->mode != 1) {
        /* nothing waits any more: turned off, or shadow (which never queues) */
        enum sl_adapt_reason why;
        struct sl_adapt_waiter *w;
        while ((w = sl_adapt_next(&c->a, now)) != NULL) {
            ((struct sl_sadapt *)w)->granted = 1;
            sl_sess_resume_later(((struct sl_sadapt *)w)->s);
        }
        while ((w = sl_adapt_expired(&c->a, UINT64_MAX / 2, &why)) != NULL) {
            ((struct sl_sadapt *)w)->granted = 2; /* goes without a place */
            sl_sess_resume_later(((struct sl_sadapt *)w)->s);
        }
    }
    pump(c, now);
}

static void on_timer_closed(uv_handle_t *h)
{
    free(h->data);
}

void sl_actl_free(struct sl_listener *l)
{
    if (l->adapt == NULL)
        return;
    sl_actl_share_stop(l->adapt); /* an answer still owed would find it gone */
    uv_close((uv_handle_t *)&l->adapt->timer, on_timer_closed);
    l->adapt = NULL;
}

/* ---- sessions ------------------------------------------------------------------- */

static struct sl_sadapt *state(struct sl_session *s)
{
    if (s->adapt == NULL && (s->adapt = calloc(1, sizeof(*s->adapt))) != NULL)
        s->adapt->s = s;
    return s->adapt;
}

uint8_t sl_sadapt_tier(struct sl_session *s, const struct sl_req *r)
{
    struct sl_actl *c = s->l->adapt;
    if (c == NULL || !c->tiered)
        return 0;
    struct sl_ident_state *id = sl_sess_ident(s);
    if (id == NULL)
        return 0;
    char who[SL_ID_MAX + 1];
    sl_identity_of_req(s->l->conf, id, r, who);
    int t = sl_limiter_tier(s->l->srv->limiter, s->l->name, who);
    return (uint8_t)(t < SL_ADAPT_TIERS ? t : SL_ADAPT_TIERS - 1);
}

uint64_t sl_sadapt_retry_ms(const struct sl_session *s)
{
    const struct sl_actl *c = s->l->adapt;
    uint64_t ms = c != NULL ? (sl_adapt_target(&c->a) + 999999) / 1000000 : 1;
    return ms > 0 ? ms : 1;
}

/* Refused now for <reason>: counted, logged, the session answers. */
static int refuse(struct sl_session *s, struct sl_pend *p, unsigned reason)
{
    struct sl_actl *c = s->l->adapt;
    c->refused[reason]++;
    p->shed = (uint8_t)(1 + reason);
    refusal_line(s->l, reason, sl_sadapt_retry_ms(s));
    return SL_SADAPT_SHED;
}

int sl_sadapt_admit(struct sl_session *s, struct sl_pend *p)
{
    struct sl_actl *c = s->l->adapt;
    struct sl_sadapt *st = state(s);
    if (c == NULL || st == NULL)
        return SL_SADAPT_GO; /* out of memory: not counted, not held back */
    if (st->shed) {
        unsigned reason = st->shed - 1u;
        st->shed = 0;
        return refuse(s, p, reason);
    }
    if (st->granted) {
        /* 1: the place was counted for it; 2: turned off while it waited */
        int counted = st->granted == 1;
        st->granted = 0;
        if (counted)
            return SL_SADAPT_GO;
        p->adapt = 0;
        return SL_SADAPT_GO;
    }
    if (st->qn > 0)
        return SL_SADAPT_GO; /* resp: joins the batch that holds the session's place */
    if (st->w.queued)
        return SL_SADAPT_WAIT;
    uint64_t now = sl_sadapt_now();
    if (c->mode == 0) {
        p->adapt = 0; /* turned off: not counted */
        return SL_SADAPT_GO;
    }
    if (sl_adapt_try_acquire(&c->a, now))
        return SL_SADAPT_GO;
    if (c->mode == 2) {
        /* shadow: it goes anyway, counted in flight so the limit still
         * sees the load it would have held back */
        c->a.inflight++;
        c->a.n_admitted++;
        c->shadow++;
        refusal_line(s->l, SL_ACTL_SHADOW, 0);
        return SL_SADAPT_GO;
    }
    struct sl_adapt_waiter *evicted = NULL;
    if (sl_adapt_enqueue(&c->a, &st->w, p->tier, now, &evicted) < 0)
        return refuse(s, p, SL_ADAPT_SHED_FULL) /* the queue counted it */;
    if (evicted != NULL)
        shed(c, evicted, SL_ADAPT_SHED_EVICTED);
    pump(c, now); /* arms the timer for its deadline */
    return SL_SADAPT_WAIT;
}

void sl_sadapt_sent(struct sl_session *s, uint64_t seq)
{
    struct sl_sadapt *st = s->adapt;
    struct sl_actl *c = s->l->adapt;
    if (st == NULL || c == NULL)
        return;
    if (st->qn == st->qcap) {
        /* at most one entry per reply owed: max_replies_owed bounds it */
        uint32_t cap = st->qcap ? st->qcap * 2 : 8;
        struct sl_sadapt_sent *q = malloc((size_t)cap * sizeof(*q));
        if (q == NULL) {
            if (st->qn == 0)
                put_back(c, sl_sadapt_now()); /* not measured, but not held either */
            return;
        }
        for (uint32_t i = 0; i < st->qn; i++)
            q[i] = st->q[(st->qh + i) % st->qcap];
        free(st->q);
        st->q = q;
        st->qh = 0;
        st->qcap = cap;
    }
    /* the first of a batch took the place; the others joined it */
    st->q[(st->qh + st->qn) % st->qcap] = (struct sl_sadapt_sent){ seq, sl_sadapt_now(), st->qn == 0 };
    st->qn++;
}

void sl_sadapt_reply(struct sl_session *s, uint64_t seq, int overload)
{
    struct sl_sadapt *st = s->adapt;
    struct sl_actl *c = s->l->adapt;
    if (st == NULL || c == NULL || st->qn == 0)
        return;
    struct sl_sadapt_sent *e = &st->q[st->qh];
    if (e->seq > seq)
        return; /* the reply of a request that holds no place */
    uint64_t now = sl_sadapt_now();
    while (st->qn > 0 && st->q[st->qh].seq <= seq) {
        e = &st->q[st->qh];
        if (e->seq == seq && overload)
            sl_adapt_overload(&c->a, now);
        else if (e->seq == seq && e->first)
            sl_adapt_sample(&c->a, now - e->t_ns, now);
        st->qh = (st->qh + 1) % st->qcap;
        st->qn--;
    }
    if (st->qn == 0) /* the batch is over: its place goes back */
        put_back(c, now);
}

void sl_sadapt_hold(struct sl_session *s)
{
    struct sl_sadapt *st = state(s);
    if (st != NULL)
        st->held++;
    else if (s->l->adapt != NULL)
        put_back(s->l->adapt, sl_sadapt_now());
}

void sl_sadapt_end(struct sl_session *s, uint64_t sent_ns, int how)
{
    struct sl_sadapt *st = s->adapt;
    struct sl_actl *c = s->l->adapt;
    if (st == NULL || c == NULL || st->held == 0)
        return;
    st->held--;
    uint64_t now = sl_sadapt_now();
    if (how == SL_SADAPT_SAMPLE)
        sl_adapt_sample(&c->a, now > sent_ns ? now - sent_ns : 0, now);
    else if (how == SL_SADAPT_OVERLOAD)
        sl_adapt_overload(&c->a, now);
    put_back(c, now);
}

void sl_sadapt_free(struct sl_session *s)
{
    struct sl_sadapt *st = s->adapt;
    struct sl_actl *c = s->l->adapt;
    if (st == NULL)
        return;
    if (c != NULL) {
        uint64_t now = sl_sadapt_now();
        sl_adapt_cancel(&c->a, &st->w);
        uint32_t n = (st->qn > 0) + st->held + (st->granted == 1);
        while (n-- > 0)
            sl_adapt_release(&c->a, now);
        pump(c, now);
    }
    free(st->q);
    free(st);
    s->adapt = NULL;
}

/* ---- metrics and /stats ---------------------------------------------------------- */

void sl_actl_stats_json(const struct sl_server *srv, const char *name, FILE *out)
{
    static const char *const mode[] = { "off", "on", "shadow" };
    for (const struct sl_listener *l = srv->listeners; l != NULL; l = l->next) {
        const struct sl_actl *c = l->adapt;
        if (c == NULL || l->retired || strcmp(l->name, name) != 0)
            continue;
        const struct sl_adapt *a = &c->a;
        fprintf(out,
                ",\"adaptive\":{\"mode\":\"%s\",\"limit\":%.3f,\"cap\":%u,\"inflight\":%u,"
                "\"queued\":%u,\"baseline_seconds\":%.9f,\"fleet_baseline_seconds\":%.9f,"
                "\"fleet_entries\":%llu,\"latency_seconds\":%.9f,"
                "\"admitted\":%llu,\"overload\":%llu,\"probes\":%llu,\"shed\":{",
                mode[c->mode < 3 ? c->mode : 0], sl_adapt_estimate(a), sl_adapt_limit(a),
                a->inflight, sl_adapt_queued(a), a->baseline_ns / 1e9,
                sl_adapt_fleet_at(a, sl_sadapt_now()) / 1e9, (unsigned long long)c->fleet_live,
                a->sampled_ns / 1e9,
                (unsigned long long)a->n_admitted, (unsigned long long)a->n_overload,
                (unsigned long long)a->n_probes);
        for (unsigned r = 0; r <= SL_ACTL_SHADOW; r++)
            fprintf(out, "%s\"%s\":%llu", r ? "," : "", sl_sadapt_why(r),
                    (unsigned long long)(r == SL_ACTL_SHADOW ? c->shadow : c->refused[r]));
        fputs("}}", out);
        return;
    }
}

void sl_actl_metrics(struct sl_server *srv, struct sl_metrics *m)
{
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        { "sluice_adaptive_limit", "gauge",
          "Adaptive concurrency: the in-flight limit the controller estimates (this worker)." },
        { "sluice_adaptive_cap", "gauge",
          "Adaptive concurrency: the in-flight cap in force now (lower during a probe)." },
        { "sluice_adaptive_inflight", "gauge",
          "Adaptive concurrency: requests in flight to the upstream that count." },
        { "sluice_adaptive_queued", "gauge", "Adaptive concurrency: requests waiting for a place." },
        { "sluice_adaptive_baseline_seconds", "gauge",
          "Adaptive concurrency: the upstream's no-load latency as measured." },
        { "sluice_adaptive_latency_seconds", "gauge",
          "Adaptive concurrency: the last window's mean latency." },
        { "sluice_adaptive_fleet_baseline_seconds", "gauge",
          "Adaptive concurrency: the least baseline the instances in front of this upstream "
          "published through the quota store (0: none in force)." },
        { "sluice_adaptive_admitted_total", "counter",
          "Adaptive concurrency: requests given a place (at once or after waiting)." },
        { "sluice_adaptive_overload_total", "counter",
          "Adaptive concurrency: replies that said overload (timeouts, -BUSY, -LOADING, 5xx)." },
        { "sluice_adaptive_probes_total", "counter",
          "Adaptive concurrency: probes that re-measured the baseline." },
        { "sluice_adaptive_shed_total", "counter",
          "Adaptive concurrency: requests refused (-TRYAGAIN, 503) by reason; shadow: let "
          "through over the limit." },
    };
    for (size_t i = 0; i < sizeof(fam) / sizeof(fam[0]); i++) {
        sl_metrics_family(m, fam[i].name, fam[i].type, fam[i].help);
        for (struct sl_listener *l = srv->listeners; l != NULL; l = l->next) {
            const struct sl_actl *c = l->adapt;
            if (c == NULL || l->retired)
                continue;
            const struct sl_adapt *a = &c->a;
            const char *labels[] = { "listener", l->name, NULL };
            switch (i) {
            case 0: sl_metrics_f64(m, fam[i].name, labels, sl_adapt_estimate(a)); break;
            case 1: sl_metrics_u64(m, fam[i].name, labels, sl_adapt_limit(a)); break;
            case 2: sl_metrics_u64(m, fam[i].name, labels, a->inflight); break;
            case 3: sl_metrics_u64(m, fam[i].name, labels, sl_adapt_queued(a)); break;
            case 4: sl_metrics_f64(m, fam[i].name, labels, a->baseline_ns / 1e9); break;
            case 5: sl_metrics_f64(m, fam[i].name, labels, a->sampled_ns / 1e9); break;
            case 6:
                sl_metrics_f64(m, fam[i].name, labels, sl_adapt_fleet_at(a, sl_sadapt_now()) / 1e9);
                break;
            case 7: sl_metrics_u64(m, fam[i].name, labels, a->n_admitted); break;
            case 8: sl_metrics_u64(m, fam[i].name, labels, a->n_overload); break;
            case 9: sl_metrics_u64(m, fam[i].name, labels, a->n_probes); break;
            default:
                for (unsigned r = 0; r <= SL_ACTL_SHADOW; r++) {
                    const char *rl[] = { "listener", l->name, "reason", sl_sadapt_why(r), NULL };
                    sl_metrics_u64(m, fam[i].name, rl,
                                   r == SL_ACTL_SHADOW ? c->shadow : c->refused[r]);
                }
            }
        }
    }
}

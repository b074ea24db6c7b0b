/* sluice — the limiter.
 *
 *   request --> candidates (listener, metric = requests, command filter)
 *           --> identity (only now: most requests on most listeners stop above)
 *           --> match_identity, tiers (a matching limit that `replaces` X drops X)
 *           --> local limits (url = local, scope = connection): peek
 *           --> store limits: one EVALSHA of decide.lua, all or nothing
 *           --> all allow: commit the local peeks; else the strictest denial
 *
 * In-process buckets live in one table per limit, keyed by identity (or
 * "c:<connection>" for connection scope), and expire once idle for the
 * algorithm's TTL; what the store said per identity (leases, refusals,
 * what was left) lives in a second table. Both hold at most [store]
 * max_identities entries, least recently used first (limit/idtable.h).
 * When the store cannot answer, on_failure decides: open (allow), closed
 * (reject), or local (the same algorithms in process at the limit divided
 * by the live instances, starting from what the store last said).
 *
 * This file builds the limiter and takes requests and byte takes in:
 * finds the limits they meet and decides them, in process (inproc.c),
 * from a token lease (tokens.c) or with the store (remote.c). The other
 * concepts have a file each; limit/limiter-i.h lists them. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/pool.h"
#include "identity/identity.h"
#include "limit/algo.h"
#include "limit/buckets.h"
#include "limit/carry.h"
#include "limit/idtable.h"
#include "limit/inproc.h"
#include "limit/idcount.h"
#include "limit/limiter-i.h"
#include "limit/limiter.h"
#include "limit/match.h"
#include "limit/overrides.h"
#include "limit/places.h"
#include "limit/remote.h"
#include "limit/stats.h"
#include "limit/tokens.h"
#include "limit/verdict.h"
#include "proto/resp_acl.h"
#include "store/store.h"

/* Pending store decisions are pooled: strict mode makes one per request. */
static struct sl_pool req_pool = SL_POOL_INIT(sizeof(struct sl_limiter_req), 256);

void sl_limiter_pool_drain(void)
{
    sl_pool_drain(&req_pool);
}

void sl_lim_waiters_add(struct sl_lim_waiters *w, struct sl_limiter_req *q)
{
    q->next_wait = NULL;
    if (w->head == NULL)
        w->tail = &w->head;
    *w->tail = q;
    w->tail = &q->next_wait;
}

struct sl_limiter_req *sl_lim_waiters_take(struct sl_lim_waiters *w)
{
    struct sl_limiter_req *q = w->head;
    w->head = NULL;
    return q;
}

void sl_lim_req_free(struct sl_limiter_req *q)
{
    struct sl_limiter *lim = q->lim;
    sl_pool_give(&req_pool, q);
    sl_limiter_release(lim);
}

/* ---- building --------------------------------------------------------------- */

static char **copy_strs(char **src, int n, int upper)
{
    if (n == 0)
        return NULL;
    char **d = calloc((size_t)n, sizeof(*d));
    if (d == NULL)
        return NULL;
    for (int i = 0; i < n; i++) {
        d[i] = strdup(src[i]);
        if (d[i] == NULL)
            return d; /* partly filled: freed by the caller with n */
        if (upper)
            for (char *p = d[i]; *p; p++)
                if (*p >= 'a' && *p <= 'z')
                    *p = (char)(*p - 32);
    }
    return d;
}

static void free_strs(char **s, int n)
{
    if (s == NULL)
        return;
    for (int i = 0; i < n; i++)
        free(s[i]);
    free(s);
}

/* The algorithm parameters of <c>. A delay limit reserves, which only GCRA
 * can: a token_bucket delay limit is shaped with GCRA arithmetic (the same
 * limit: a bucket of <burst> refilled at the rate). Shadow limits never
 * reserve. */
static void limit_params(const struct sl_limit_conf *c, struct sl_algo_params *p)
{
    p->algo = c->algorithm;
    p->amount = c->rate.amount;
    p->period_us = c->rate.period_us;
    p->burst = c->burst;
    p->max_wait_us = 0;
    if (c->action == SL_ACTION_DELAY) {
        if (p->algo == SL_ALGO_TOKEN_BUCKET)
            p->algo = SL_ALGO_GCRA;
        p->max_wait_us = c->max_delay_us > 0 ? c->max_delay_us : 1;
    }
}

static int limit_index(const struct sl_conf *conf, const struct sl_limit_conf *lc)
{
    int i = 0;
    for (const struct sl_limit_conf *c = conf->limits; c != NULL; c = c->next, i++)
        if (c == lc)
            return i;
    return -1;
}

struct sl_limiter *sl_limiter_new(const struct sl_conf *conf, const struct sl_limiter_env *env)
{
    return sl_limiter_reload(conf, env, NULL);
}

struct sl_limiter *sl_limiter_reload(const struct sl_conf *conf, const struct sl_limiter_env *env,
                                     struct sl_limiter *prev)
{
    static const struct sl_limiter_env defaults; /* url = local, sl_clock_mono, own places */
    if (env == NULL)
        env = &defaults;
    struct sl_limiter *lim = calloc(1, sizeof(*lim));
    if (lim == NULL)
        return NULL;
    struct sl_store *store = env->store;
    lim->refs = 1;
    lim->store = store;
    lim->clock = env->clock != NULL ? env->clock : &sl_clock_mono;
    lim->places = env->places;
    if (lim->places == NULL && (lim->places = lim->own_places = sl_places_new()) == NULL)
        goto fail;
    lim->on_failure = conf->store.on_failure;
    lim->key_prefix = strdup(conf->store.key_prefix ? conf->store.key_prefix : "sluice:");
    lim->place_ttl_ms = conf->store.connection_lease_us / 1000;
    if (lim->place_ttl_ms == 0)
        lim->place_ttl_ms = 10000;
    lim->limits = calloc((size_t)(conf->n_limits ? conf->n_limits : 1), sizeof(*lim->limits));
    lim->cand = calloc((size_t)(conf->n_limits ? conf->n_limits : 1), sizeof(*lim->cand));
    lim->keep = calloc((size_t)(conf->n_limits ? conf->n_limits : 1), sizeof(*lim->keep));
    if (lim->key_prefix == NULL || lim->limits == NULL || lim->cand == NULL || lim->keep == NULL)
        goto fail;
    for (const struct sl_limit_conf *c = conf->limits; c != NULL; c = c->next) {
        struct limit *L = &lim->limits[lim->n++];
        L->name = strdup(c->name);
        L->listener = strcmp(c->listener, "*") == 0 ? NULL : strdup(c->listener);
        L->metric = c->metric;
        L->scope = c->scope;
        L->action = c->action;
        L->shadow_log.kind = "shadow_reject";
        limit_params(c, &L->p);
        L->max_delay_us = c->max_delay_us;
        L->max = c->max;
        if (sl_lim_copy_commands(L, c) != 0)
            goto fail;
        lim->any_cats |= L->cats != 0;
        L->n_costs = c->n_costs;
        if (c->n_costs > 0) {
            L->costs = malloc((size_t)c->n_costs * sizeof(*L->costs));
            if (L->costs)
                memcpy(L->costs, c->costs, (size_t)c->n_costs * sizeof(*L->costs));
        }
        L->default_cost = c->default_cost ? c->default_cost : 1;
        L->n_match = c->n_match_identity;
        L->match = copy_strs(c->match_identity, c->n_match_identity, 0);
        sl_lim_canon_matches(L->match, L->n_match);
        L->replaces = c->replaces_lc ? limit_index(conf, c->replaces_lc) : -1;
        L->priority = c->priority;
        /* Connection counts are bounded by the connections themselves and
         * cannot be dropped while held: no cap for them. */
        uint64_t cap = c->metric == SL_METRIC_CONNECTIONS ? 0 : conf->store.max_identities;
        if (sl_lim_carry(L, prev, (size_t)cap) != 0)
            goto fail;
        uint64_t ttl = c->metric == SL_METRIC_CONNECTIONS ? 0 : sl_algo_ttl_us(&L->p);
        L->ttl_ms = ttl / 1000 + 1;
        if (c->metric == SL_METRIC_CONNECTIONS)
            L->ttl_ms = UINT64_MAX / 4; /* counts are dropped when they reach zero */
        sl_lim_tokens_init(L, store != NULL, &conf->store);
        L->ovr_ttl_us = store != NULL && c->overrides ? c->overrides_ttl_us : 0;
        /* overrides_ttl's default where a configuration was built by hand */
        L->trust_us = c->overrides_ttl_us > 0 ? c->overrides_ttl_us : 5000000;
        if (L->name == NULL || (c->listener && strcmp(c->listener, "*") && L->listener == NULL) ||
            (c->n_costs && L->costs == NULL) || (c->n_match_identity && L->match == NULL))
            goto fail;
    }
    return lim;
fail:
    sl_limiter_release(lim);
    return NULL;
}

static void limiter_free(struct sl_limiter *lim)
{
    for (int i = 0; i < lim->n; i++) {
        struct limit *L = &lim->limits[i];
        sl_lim_shadow_log_flush(L, 1); /* the count of lines left out */
        sl_lim_state_release(L->s);
        free(L->name);
        free(L->listener);
        free_strs(L->commands, L->n_commands);
        free_strs(L->subcmds, L->n_subcmds);
        free_strs(L->methods, L->n_methods);
        free_strs(L->paths, L->n_paths);
        free(L->costs);
        free_strs(L->match, L->n_match);
    }
    free(lim->limits);
    free(lim->cand);
    free(lim->keep);
    free(lim->key_prefix);
    sl_places_free(lim->own_places);
    free(lim);
}

void sl_limiter_release(struct sl_limiter *lim)
{
    if (lim != NULL && --lim->refs == 0)
        limiter_free(lim);
}

int sl_limiter_active(const struct sl_limiter *lim, const char *listener)
{
    if (lim == NULL)
        return 0;
    for (int i = 0; i < lim->n; i++) {
        const struct limit *L = &lim->limits[i];
        if (L->metric == SL_METRIC_REQUESTS && (L->listener == NULL || strcmp(L->listener, listener) == 0))
            return 1;
    }
    return 0;
}

/* A request limit of <listener> (or of every listener) that sorts identities
 * into shedding tiers: one with `priority`, or with match_identity. */
static int tiers_by(const struct limit *L, const char *listener)
{
    return L->metric == SL_METRIC_REQUESTS && (L->priority >= 0 || L->n_match > 0) &&
           (L->listener == NULL || strcmp(L->listener, listener) == 0);
}

int sl_limiter_tiered(const struct sl_limiter *lim, const char *listener)
{
    for (int i = 0; lim != NULL && i < lim->n; i++)
        if (tiers_by(&lim->limits[i], listener))
            return 1;
    return 0;
}

/* The highest tier a limit gives <id>: its `priority` when it takes the
 * identity, else 1 when its match_identity names it (someone named it: a
 * VIP); 0 when none does. */
int sl_limiter_tier(const struct sl_limiter *lim, const char *listener, const char *id)
{
    int tier = 0;
    for (int i = 0; lim != NULL && i < lim->n; i++) {
        const struct limit *L = &lim->limits[i];
        if (!tiers_by(L, listener) || !sl_lim_identity_matches(L, id))
            continue;
        int t = L->priority >= 0 ? L->priority : 1;
        if (t > tier)
            tier = t;
    }
    return tier;
}

int sl_limiter_validate(const struct sl_conf *conf, FILE *errf)
{
    int bad = 0;
    for (const struct sl_listener_conf *l = conf->listeners; l != NULL; l = l->next)
        for (int m = SL_METRIC_REQUESTS; m <= SL_METRIC_CONNECTIONS; m++)
            bad += sl_lim_check_listener_caps(conf, l, (enum sl_metric)m, errf);
    for (const struct sl_limit_conf *c = conf->limits; c != NULL; c = c->next) {
        if (c->metric == SL_METRIC_CONNECTIONS)
            continue;
        struct sl_algo_params p;
        limit_params(c, &p);
        const char *why = NULL;
        if (sl_algo_check(&p, &why) != 0) {
            fprintf(errf, "%s:%d: limit '%s': %s\n", conf->file ? conf->file : "-", c->line,
                    c->name, why ? why : "rate or burst out of range");
            bad++;
        }
    }
    return bad;
}

int sl_limiter_check(struct sl_limiter *lim, const struct sl_listener_conf *lc,
                     const struct sl_ident_state *ident, uint64_t conn_id,
                     const struct sl_resp_req *r, struct sl_verdict *v,
                     sl_limiter_cb *cb, void *data, struct sl_limiter_req **req)
{
    const struct sl_req q = { .resp = r, .http = NULL };
    return sl_limiter_check_req(lim, lc, ident, conn_id, &q, v, cb, data, req);
}

/* One request (metric = requests) or byte take, as it comes in: who asks,
 * and whom to tell when the answer comes later. */
struct ask {
    const struct sl_listener_conf *lc;
    const struct sl_ident_state   *ident;
    uint64_t                       conn_id;
    const struct sl_req           *r;      /* NULL: a byte take */
    int                            metric; /* enum sl_metric */
    uint64_t                       amount; /* a byte take: tokens */
    sl_limiter_cb                 *cb;
    void                          *data;
};

static int run(struct sl_limiter *lim, const struct ask *a, int nc, struct sl_verdict *v,
               struct sl_limiter_req **req);

/* HTTP: candidates by listener, method and path. */
static int check_http(struct sl_limiter *lim, const struct ask *a, struct sl_verdict *v,
                      struct sl_limiter_req **req)
{
    struct sl_lim_path pp = { .hd = a->r->http };
    int *cand = lim->cand, nc = 0;
    for (int i = 0; i < lim->n; i++)
        if (sl_lim_applies(&lim->limits[i], a->lc, SL_METRIC_REQUESTS) &&
            sl_lim_http_matches(&lim->limits[i], &pp))
            cand[nc++] = i;
    sl_lim_path_done(&pp);
    if (nc == 0)
        return 0;
    return run(lim, a, nc, v, req);
}

int sl_limiter_check_req(struct sl_limiter *lim, const struct sl_listener_conf *lc,
                         const struct sl_ident_state *ident, uint64_t conn_id,
                         const struct sl_req *q, struct sl_verdict *v,
                         sl_limiter_cb *cb, void *data, struct sl_limiter_req **req)
{
    memset(v, 0, sizeof(*v));
    const struct ask a = { lc, ident, conn_id, q, SL_METRIC_REQUESTS, 0, cb, data };
    if (q != NULL && q->http != NULL)
        return check_http(lim, &a, v, req);
    const struct sl_resp_req *r = q != NULL ? q->resp : NULL;
    if (sl_lim_exempt(r))
        return 0;
    int setup = q != NULL && q->setup;
    uint32_t cats = lim->any_cats && !setup ? sl_resp_acl_of(r) : 0;
    /* Candidates by listener and command: no identity work before this.
     * All of them: tiers and match_identity thin them out afterwards. A
     * connection's set-up command (sess_resp.c) meets only the limits that
     * name it: one that takes every command, or a category, does not mean
     * to refuse a client its connect-time checks; one that names INFO
     * does. */
    int *cand = lim->cand, nc = 0;
    for (int i = 0; i < lim->n; i++)
        if (sl_lim_applies(&lim->limits[i], lc, SL_METRIC_REQUESTS) &&
            (setup ? sl_lim_command_named(&lim->limits[i], r)
                   : sl_lim_command_matches(&lim->limits[i], r, cats)))
            cand[nc++] = i;
    if (nc == 0)
        return 0;
    return run(lim, &a, nc, v, req);
}

int sl_limiter_take(struct sl_limiter *lim, const struct sl_listener_conf *lc,
                    const struct sl_ident_state *ident, uint64_t conn_id, enum sl_metric metric,
                    uint64_t amount, struct sl_verdict *v, sl_limiter_cb *cb,
                    void *data, struct sl_limiter_req **req)
{
    memset(v, 0, sizeof(*v));
    int *cand = lim->cand, nc = 0;
    for (int i = 0; i < lim->n; i++)
        if (sl_lim_applies(&lim->limits[i], lc, (int)metric))
            cand[nc++] = i;
    if (nc == 0)
        return 0;
    const struct ask a = { lc, ident, conn_id, NULL, (int)metric, amount, cb, data };
    return run(lim, &a, nc, v, req);
}

int sl_limiter_plan(const struct sl_limiter *lim, const struct sl_listener_conf *lc,
                    enum sl_metric metric, struct sl_meter_plan *plan)
{
    memset(plan, 0, sizeof(*plan));
    if (lim == NULL)
        return 0;
    uint64_t chunk = UINT64_MAX;
    for (int i = 0; i < lim->n; i++) {
        const struct limit *L = &lim->limits[i];
        if (!sl_lim_applies(L, lc, (int)metric))
            continue;
        plan->limits++;
        if (L->action == SL_ACTION_SHADOW) {
            plan->shadow = 1;
        } else {
            plan->enforce = 1;
            plan->delay |= L->action == SL_ACTION_DELAY;
            if (L->action == SL_ACTION_DELAY && L->max_delay_us > plan->max_delay_us)
                plan->max_delay_us = L->max_delay_us;
            plan->reject |= L->action == SL_ACTION_REJECT;
        }
        if (metric == SL_METRIC_CONNECTIONS)
            continue;
        /* Tokens per take: 10 ms of the rate, at least 16 KiB; never more
         * than the bucket holds, and for a delay limit never more than
         * max_delay of the rate (a take from an empty bucket must be able
         * to wait for itself). */
        unsigned __int128 r10 = (unsigned __int128)L->p.amount * 10000 / L->p.period_us;
        uint64_t c = r10 > (1u << 30) ? (1u << 30) : (uint64_t)r10;
        if (c < SL_METER_MIN_CHUNK)
            c = SL_METER_MIN_CHUNK;
        uint64_t cap = L->p.algo == SL_ALGO_GCRA || L->p.algo == SL_ALGO_TOKEN_BUCKET
                           ? L->p.burst : L->p.amount;
        if (c > cap)
            c = cap;
        if (plan->max_take == 0 || cap < plan->max_take)
            plan->max_take = cap;
        if (L->action == SL_ACTION_DELAY) {
            unsigned __int128 rd = (unsigned __int128)L->p.amount * L->max_delay_us / L->p.period_us;
            if (rd < c)
                c = rd > 0 ? (uint64_t)rd : 1;
        }
        if (c < chunk)
            chunk = c;
    }
    plan->chunk = chunk == UINT64_MAX ? SL_METER_MIN_CHUNK : chunk;
    return plan->limits > 0;
}

/* Decides <q> (its limits and their numbers known, q->cb and q->data
 * set) once local limits are peeked: in process when the store is away,
 * from token leases, or with the store. Returns 0 with <v> filled, or 1
 * when the answer comes later: *<req> is then the pooled request (<q>
 * itself when <pooled>, which already holds its reference on <lim>). */
static int decide(struct sl_limiter *lim, struct sl_limiter_req *q, int pooled,
                  struct sl_verdict *v, struct sl_limiter_req **req)
{
    /* Local limits first: if one of them denies, the store is not asked. */
    struct sl_algo_result res;
    for (int k = 0; k < q->n; k++) {
        const struct limit *L = &lim->limits[q->idx[k]];
        if (!q->remote[k] && L->action != SL_ACTION_SHADOW &&
            !sl_lim_local_take(lim, q, k, 1, 0, &res))
            sl_lim_deny(v, L, &q->p[k], q->identity, &res);
    }
    if (v->kind == SL_VERDICT_REJECT) {
        for (int k = 0; k < q->n; k++)
            if (!q->remote[k] && strcmp(lim->limits[q->idx[k]].name, v->limit) == 0)
                lim->limits[q->idx[k]].s->rejected++;
        return 0;
    }
    if (!sl_store_up(lim->store)) {
        sl_lim_store_failed(lim, q, v);
        return 0;
    }

    struct bucket *wait_on = NULL;
    int lr = sl_lim_lease_try(lim, q, v, &wait_on);
    if (lr == 1)
        return 0;
    struct sl_limiter_req *heap = pooled ? q : sl_pool_take(&req_pool);
    if (heap == NULL) {
        sl_lim_lease_done(lim, q);
        memset(v, 0, sizeof(*v));
        sl_lim_store_failed(lim, q, v);
        return 0;
    }
    if (!pooled)
        *heap = *q;
    if (lr == 2) {
        sl_lim_lease_wait(wait_on, heap);
    } else if (!sl_lim_send(lim, heap)) {
        sl_lim_lease_done(lim, heap);
        sl_lim_store_failed(lim, heap, v);
        if (!pooled)
            sl_pool_give(&req_pool, heap);
        return 0;
    }
    if (!pooled)
        lim->refs++;
    *req = heap;
    return 1;
}

/* Decides <a> against its <nc> candidate limits (lim->cand): 0 with <v>
 * filled, or 1 when the answer comes later (*<req> set). */
static int run(struct sl_limiter *lim, const struct ask *a, int nc, struct sl_verdict *v,
               struct sl_limiter_req **req)
{
    const int *cand = lim->cand;
    struct sl_limiter_req qs, *q = &qs;
    memset(q, 0, sizeof(*q));
    q->lim = lim;
    q->metric = (uint8_t)a->metric;
    q->now_us = sl_clock_us(lim->clock);
    q->conn_id = a->conn_id;
    sl_identity_of_req(a->lc, a->ident, a->r, q->identity);

    /* match_identity, then tiers: a matching limit replacing X removes X. */
    uint8_t *keep = lim->keep;
    for (int c = 0; c < nc; c++)
        keep[c] = (uint8_t)sl_lim_identity_matches(&lim->limits[cand[c]], q->identity);
    for (int c = 0; c < nc; c++) {
        int x = lim->limits[cand[c]].replaces;
        if (!keep[c] || x < 0)
            continue;
        for (int d = 0; d < nc; d++)
            if (cand[d] == x)
                keep[d] = 0;
    }
    int nremote = 0;
    for (int c = 0; c < nc; c++) {
        if (!keep[c])
            continue;
        if (q->n == MAX_REQ_LIMITS) { /* sl_limiter_validate() refuses such files */
            sl_lim_uncounted(UNCOUNTED_TOO_MANY, "request");
            break;
        }
        const struct limit *L = &lim->limits[cand[c]];
        int k = q->n++;
        q->idx[k] = cand[c];
        q->cost[k] = a->metric == SL_METRIC_REQUESTS ? sl_lim_cost_of(L, a->r) : a->amount;
        q->remote[k] = lim->store != NULL && L->scope != SL_SCOPE_CONNECTION;
        q->p[k] = L->p;
        nremote += q->remote[k];
        if (L->scope == SL_SCOPE_IDENTITY && a->metric == SL_METRIC_REQUESTS)
            sl_lim_top_count(&lim->limits[cand[c]], q->identity);
    }
    if (q->n == 0)
        return 0;

    if (nremote == 0) {
        sl_lim_decide_local(lim, q, 0, 1, v);
        sl_lim_count_verdict(lim, q, v);
        return 0;
    }
    q->cb = a->cb;
    q->data = a->data;
    struct sl_ovr *on = NULL;
    if (sl_lim_overrides_resolve(lim, q, &on)) {
        /* The identity's numbers are being read: nothing is taken before. */
        struct sl_limiter_req *heap = sl_pool_take(&req_pool);
        if (heap == NULL) {
            sl_lim_store_failed(lim, q, v);
            sl_lim_count_verdict(lim, q, v);
            return 0;
        }
        *heap = *q;
        sl_lim_overrides_wait(on, heap);
        lim->refs++;
        *req = heap;
        return 1;
    }
    if (decide(lim, q, 0, v, req) == 1)
        return 1;
    sl_lim_count_verdict(lim, q, v);
    return 0;
}

void sl_lim_resume(struct sl_limiter_req *q)
{
    struct sl_limiter *lim = q->lim;
    struct sl_ovr *on = NULL;
    if (q->cb != NULL && sl_lim_overrides_resolve(lim, q, &on)) {
        sl_lim_overrides_wait(on, q); /* another of its limits is being read */
        return;
    }
    struct sl_verdict v;
    memset(&v, 0, sizeof(v));
    struct sl_limiter_req *again;
    if (q->cb != NULL && decide(lim, q, 1, &v, &again) == 1)
        return;
    if (q->cb != NULL)
        sl_lim_deliver(q, &v);
    sl_lim_req_free(q);
}

void sl_limiter_cancel(struct sl_limiter_req *req)
{
    req->cb = NULL;
}


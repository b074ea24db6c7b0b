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
 * This file is the core: building the limiter, deciding a request or a
 * byte take, the store round trip and leases of tokens. The rest of the
 * limiter, one concept a file, shares limit/limiter-i.h:
 *
 *   match.c     which limits a request meets (listener, commands, costs,
 *               match_identity); the per-listener limit-count check at load
 *   buckets.c   in-process buckets and their bounded tables
 *   conns.c     connection places and the login queue (sl_lease_*)
 *   stats.c     counters, delay histograms, busiest identities, reports */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/log.h"
#include "core/pool.h"
#include "core/tq.h"
#include "identity/identity.h"
#include "limit/algo.h"
#include "limit/idtable.h"
#include "limit/limiter-i.h"
#include "limit/limiter.h"
#include "proto/resp_acl.h"
#include "store/store.h"

#include <uv.h>

/* Pending store decisions are pooled: strict mode makes one per request. */
static struct sl_pool req_pool = SL_POOL_INIT(sizeof(struct sl_limiter_req), 256);

void sl_limiter_pool_drain(void)
{
    sl_pool_drain(&req_pool);
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

/* Tokens limit <L> asks on top of a request's cost with [store] lease =
 * <conf> (0 off, -1 auto, N): auto is 10 ms of the rate, at least 1; never
 * more than half of what the bucket (or window) holds, so a lease never
 * makes a request that fits look too big. Only rejecting request limits
 * decided by the store lease: delay reserves a place in time, and shadow
 * must see every request. */
static uint64_t lease_size(const struct limit *L, int64_t conf)
{
    if (conf == 0 || L->metric != SL_METRIC_REQUESTS || L->action != SL_ACTION_REJECT ||
        L->scope == SL_SCOPE_CONNECTION)
        return 0;
    uint64_t n = (uint64_t)conf;
    if (conf < 0) {
        unsigned __int128 r10 = (unsigned __int128)L->p.amount * 10000 / L->p.period_us;
        n = r10 > UINT32_MAX ? UINT32_MAX : (uint64_t)r10;
        if (n == 0)
            n = 1;
    }
    uint64_t cap = L->p.algo == SL_ALGO_TOKEN_BUCKET || L->p.algo == SL_ALGO_GCRA ? L->p.burst
                                                                                  : L->p.amount;
    return n < cap / 2 ? n : cap / 2;
}

#define LEASE_CHUNK_US 10000 /* at the limit: refill worth waiting for */

/* At its limit, a leasing identity would cost one store call per admission
 * (the bucket refills a token at a time). Instead, once the store has said
 * the bucket is empty or holds less than this chunk, or refused a cost, the
 * entry waits until the chunk (10 ms of the rate, at most the lease) is
 * back and takes it in one call: about 100 calls a second per identity and
 * instance, however high the rate. Only for algorithms that refill
 * continuously; 0 or 1 means no waiting. */
static uint64_t chunk_of(const struct limit *L)
{
    if (L->lease_size == 0 || (L->p.algo != SL_ALGO_TOKEN_BUCKET && L->p.algo != SL_ALGO_GCRA))
        return 0;
    unsigned __int128 n = (unsigned __int128)L->p.amount * LEASE_CHUNK_US / L->p.period_us;
    return n > L->lease_size ? L->lease_size : (uint64_t)n;
}

/* How long limit <L> takes to refill <tokens>, rounded up (us). */
static uint64_t refill_us(const struct limit *L, uint64_t tokens)
{
    unsigned __int128 us = ((unsigned __int128)tokens * L->p.period_us + L->p.amount - 1) /
                           L->p.amount;
    return us > UINT32_MAX ? UINT32_MAX : (uint64_t)us;
}

/* Whether limit <L> refuses here what the store refused: a rejecting
 * request limit remembers a refusal until its retry time (the store's
 * bucket refills at a known rate; other instances can only take from it),
 * so a flood at the limit costs the store about one call per retry time
 * and instance instead of one per request, with or without leases. Not a
 * delay limit: its requests wait parked (the session reads no more from
 * that client meanwhile), so they cannot flood, and its rare refusals (a
 * wait over max_delay) are asked again. Not a shadow limit: it must see
 * every request to count what it would have done. */
static int refuses_here(const struct limit *L)
{
    return L->metric == SL_METRIC_REQUESTS && L->action == SL_ACTION_REJECT &&
           L->scope != SL_SCOPE_CONNECTION;
}

/* Whether store-backed limit <L> keeps an entry per identity of what the
 * store said: for its leases, its refusals (refuses_here), and with
 * on_failure = local what was left, for in-process buckets to start from
 * when the store goes away. */
static int remembers(const struct limit *L, enum sl_on_failure of)
{
    if (L->scope == SL_SCOPE_CONNECTION || L->metric == SL_METRIC_CONNECTIONS)
        return 0;
    return L->lease_size > 0 || refuses_here(L) || of == SL_FAIL_LOCAL;
}

struct sl_limiter *sl_limiter_new(const struct sl_conf *conf, struct sl_store *store)
{
    struct sl_limiter *lim = calloc(1, sizeof(*lim));
    if (lim == NULL)
        return NULL;
    lim->refs = 1;
    lim->store = store;
    lim->on_failure = conf->store.on_failure;
    lim->key_prefix = strdup(conf->store.key_prefix ? conf->store.key_prefix : "sluice:");
    lim->lease_ms = conf->store.connection_lease_us / 1000;
    if (lim->lease_ms == 0)
        lim->lease_ms = 10000;
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
        /* Connection counts are bounded by the connections themselves and
         * cannot be dropped while held: no cap for them. */
        uint64_t cap = c->metric == SL_METRIC_CONNECTIONS ? 0 : conf->store.max_identities;
        if (sl_idt_init(&L->buckets, (size_t)cap) < 0 || sl_idt_init(&L->entries, (size_t)cap) < 0)
            goto fail;
        uint64_t ttl = c->metric == SL_METRIC_CONNECTIONS ? 0 : sl_algo_ttl_us(&L->p);
        L->ttl_ms = ttl / 1000 + 1;
        if (c->metric == SL_METRIC_CONNECTIONS)
            L->ttl_ms = UINT64_MAX / 4; /* counts are dropped when they reach zero */
        L->lease_size = store != NULL ? lease_size(L, conf->store.lease) : 0;
        L->chunk = chunk_of(L);
        L->remember = store != NULL && remembers(L, conf->store.on_failure);
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
        sl_lim_table_free(&L->buckets);
        sl_lim_table_free(&L->entries);
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

/* ---- deciding ----------------------------------------------------------------- */

static size_t local_key(const struct limit *L, const struct sl_limiter_req *q, char *out, size_t cap)
{
    if (L->scope == SL_SCOPE_CONNECTION)
        return (size_t)snprintf(out, cap, "c:%" PRIu64, q->conn_id);
    if (L->scope == SL_SCOPE_GLOBAL)
        return (size_t)snprintf(out, cap, "*");
    size_t n = strnlen(q->identity, sizeof(q->identity));
    if (n >= cap)
        n = cap - 1;
    memcpy(out, q->identity, n);
    out[n] = '\0';
    return n;
}

/* ceil(<us> / 1 s) */
static uint64_t secs_up(uint64_t us)
{
    return us / 1000000 + (us % 1000000 != 0);
}

/* Names limit <L> in <v>'s policy fields (limiter.h): <remaining> tokens
 * left, the quota whole again after <reset_us>; <approx> as there. */
static void set_policy(struct sl_verdict *v, const struct limit *L, uint64_t remaining,
                       uint64_t reset_us, int approx)
{
    size_t n = strnlen(L->name, sizeof(v->policy) - 1); /* per request: no printf */
    memcpy(v->policy, L->name, n);
    v->policy[n] = '\0';
    if (L->metric == SL_METRIC_CONNECTIONS) {
        v->quota = L->max;
        v->window_s = 0;
    } else {
        sl_algo_policy(&L->p, &v->quota, &v->window_s);
    }
    v->remaining = remaining;
    v->reset_s = secs_up(reset_us);
    v->approx = (uint8_t)approx;
}

/* Non-shadow limit <L> allowed a request, leaving <remaining> tokens, whole
 * again after <reset_us>: an allowed verdict names the limit closest to
 * its limit (the least remaining; the later reset on a tie). */
static void closest(struct sl_verdict *v, const struct limit *L, uint64_t remaining,
                    uint64_t reset_us, int approx)
{
    if (v->kind != SL_VERDICT_ALLOW)
        return;
    if (v->policy[0] != '\0' &&
        (remaining > v->remaining || (remaining == v->remaining && secs_up(reset_us) <= v->reset_s)))
        return;
    set_policy(v, L, remaining, reset_us, approx);
}

void sl_lim_deny(struct sl_verdict *v, const struct limit *L, const char *identity,
                 const struct sl_algo_result *res)
{
    uint64_t retry = res->retry_after_us;
    /* The strictest denial wins: the longest wait. */
    if (v->kind == SL_VERDICT_REJECT && !(retry > v->retry_after_us))
        return;
    v->kind = SL_VERDICT_REJECT;
    v->never = retry == UINT64_MAX;
    v->retry_after_us = retry;
    v->action = (uint8_t)L->action;
    snprintf(v->limit, sizeof(v->limit), "%s", L->name);
    snprintf(v->identity, sizeof(v->identity), "%s",
             L->scope == SL_SCOPE_GLOBAL ? "*" : identity);
    /* The quota is not whole again before the request would fit. */
    uint64_t reset = res->reset_us;
    if (retry != UINT64_MAX && retry > reset)
        reset = retry;
    set_policy(v, L, res->remaining, reset, 0);
}

/* A shadow limit would have denied: it counts, and how long the request
 * would have had to wait (never: not in the histogram). */
static void shadow_denied(struct limit *L, uint64_t retry_us)
{
    L->shadow_hits++;
    if (retry_us != UINT64_MAX)
        sl_lim_hist_add(&L->delay, retry_us);
}

/* Limit <L> allowed, after <wait_us> when it reserved (action = delay): the
 * verdict waits for the longest of its limits. */
static void allowed_after(struct limit *L, struct sl_verdict *v, uint64_t wait_us)
{
    L->allowed++;
    if (L->action != SL_ACTION_DELAY || wait_us == 0 || wait_us == UINT64_MAX)
        return;
    L->delayed++;
    sl_lim_hist_add(&L->delay, wait_us);
    if (wait_us > v->delay_us)
        v->delay_us = wait_us;
}

static void start_from_store(struct limit *L, struct bucket *b, const char *identity,
                             const struct sl_algo_params *p);

/* Peeks (commit 0) or takes (commit 1) limit <i> of <q> in process, with
 * the rate divided by <share> (live instances when standing in for the
 * store). Returns 1 when allowed. */
static int local_take(struct sl_limiter *lim, struct sl_limiter_req *q, int k, uint64_t share,
                      int commit, struct sl_algo_result *res)
{
    struct limit *L = &lim->limits[q->idx[k]];
    char key[SL_ID_MAX + 32];
    size_t len = local_key(L, q, key, sizeof(key));
    struct bucket *b = sl_lim_bucket_get(L, key, len, q->now_us / 1000);
    if (b == NULL) {
        if (commit)
            sl_lim_uncounted(UNCOUNTED_NO_MEMORY, "request");
        /* out of memory: do not punish the client (nor name this limit) */
        *res = (struct sl_algo_result){ .allowed = 1, .remaining = UINT64_MAX };
        return 1;
    }
    struct sl_algo_params p = L->p;
    if (share > 1) {
        p.amount = p.amount / share ? p.amount / share : 1;
        p.burst = p.burst / share ? p.burst / share : 1;
    }
    if (q->remote[k] && L->remember)
        start_from_store(L, b, q->identity, &p);
    if (sl_algo_take(&b->st, &p, q->now_us, q->cost[k], commit, res) < 0)
        res->allowed = 1;
    return res->allowed;
}

/* Decides every limit of <q> in process (remote ones too when the store is
 * standing down with on_failure = local, at <share>). Fills <v>. */
static void decide_local(struct sl_limiter *lim, struct sl_limiter_req *q, int with_remote,
                         uint64_t share, struct sl_verdict *v)
{
    struct sl_algo_result res;
    int ok = 1;
    for (int k = 0; k < q->n; k++) {
        struct limit *L = &lim->limits[q->idx[k]];
        if ((q->remote[k] && !with_remote) || L->action == SL_ACTION_SHADOW)
            continue;
        if (!local_take(lim, q, k, q->remote[k] ? share : 1, 0, &res)) {
            ok = 0;
            sl_lim_deny(v, L, q->identity, &res);
            if (q->remote[k] && strcmp(v->limit, L->name) == 0)
                v->approx = 1; /* standing in for the store */
        }
    }
    for (int k = 0; k < q->n; k++) {
        struct limit *L = &lim->limits[q->idx[k]];
        if (q->remote[k] && !with_remote)
            continue;
        if (L->action == SL_ACTION_SHADOW) {
            if (!local_take(lim, q, k, q->remote[k] ? share : 1, 1, &res))
                shadow_denied(L, res.retry_after_us);
            continue;
        }
        if (q->remote[k])
            L->fallback++;
        if (ok) {
            local_take(lim, q, k, q->remote[k] ? share : 1, 1, &res);
            allowed_after(L, v, res.retry_after_us);
            if (res.remaining != UINT64_MAX) /* UINT64_MAX: uncounted */
                closest(v, L, res.remaining, res.reset_us, q->remote[k]);
        } else {
            L->rejected += strcmp(v->limit, L->name) == 0;
        }
    }
}

/* The store could not answer: on_failure says what happens. */
static void store_failed(struct sl_limiter *lim, struct sl_limiter_req *q, struct sl_verdict *v)
{
    switch (lim->on_failure) {
    case SL_FAIL_OPEN:
        decide_local(lim, q, 0, 1, v); /* local-only limits still hold */
        for (int k = 0; k < q->n; k++)
            if (q->remote[k])
                lim->limits[q->idx[k]].fallback++;
        return;
    case SL_FAIL_CLOSED:
        for (int k = 0; k < q->n; k++) {
            struct limit *L = &lim->limits[q->idx[k]];
            if (q->remote[k] && L->action != SL_ACTION_SHADOW) {
                v->kind = SL_VERDICT_REJECT;
                v->store_down = 1;
                v->retry_after_us = 1000000;
                snprintf(v->limit, sizeof(v->limit), "%s", L->name);
                snprintf(v->identity, sizeof(v->identity), "%s", q->identity);
                set_policy(v, L, 0, v->retry_after_us, 1); /* nothing known: a guess */
                L->fallback++;
                L->rejected++;
                return;
            }
        }
        decide_local(lim, q, 0, 1, v);
        return;
    case SL_FAIL_LOCAL:
    default:
        decide_local(lim, q, 1, lim->store ? sl_store_live_instances(lim->store) : 1, v);
        return;
    }
}

/* ---- leases ([store] lease) ------------------------------------------------
 *
 * A limit that leases asks the store for lease_size tokens on top of a
 * request's cost; the extra tokens are spent here by later requests of the
 * same identity without a round trip. An instance never holds more than
 * lease_size tokens per limit and identity beyond what it is asking for,
 * so the fleet admits at most instances x lease_size more than the limit
 * (tokens taken are tokens the store counted; they are only spent later).
 * A lease take the store refuses is asked again for the cost alone (the
 * bucket may hold less than cost + lease but enough for the cost), and for
 * a second the limit asks for costs alone. A refusal of a cost is
 * remembered until its retry time: requests of that cost or more are
 * refused here until then without asking (the bucket refills at a known
 * rate; other instances can only take from it). */

#define LEASE_LEAN_US 1000000 /* after a refused lease: costs alone this long */

static void on_store(void *data, int status, const int64_t *vals, int n, const char *err);

/* The lease entry of <L> for <identity> (NULL when out of memory). */
static size_t entry_key(const struct limit *L, const char *identity, char *key)
{
    if (L->scope == SL_SCOPE_GLOBAL)
        identity = "*"; /* one store bucket for everyone: one entry */
    size_t n = strlen(identity);
    if (n > SL_ID_MAX)
        n = SL_ID_MAX;
    key[0] = '\0';
    memcpy(key + 1, identity, n);
    return n + 1;
}

static struct bucket *lease_entry(struct limit *L, const char *identity, uint64_t now_us)
{
    char key[SL_ID_MAX + 2];
    size_t n = entry_key(L, identity, key);
    return sl_lim_bucket_get(L, key, n, now_us / 1000);
}

/* Standing in for the store (on_failure = local), in-process bucket <b> of
 * <L> for <identity> starts from what the store last said was left (and
 * the lease tokens this instance held), in the share <p> of live
 * instances, as of when it said so, and refills from there: not full, as a
 * bucket the store emptied is not full when the store goes away. Once per
 * answer: later takes while the store is away go on from there. */
static void start_from_store(struct limit *L, struct bucket *b, const char *identity,
                             const struct sl_algo_params *p)
{
    char key[SL_ID_MAX + 2];
    size_t n = entry_key(L, identity, key);
    const struct bucket *e = (const struct bucket *)sl_idt_peek(&L->entries, key, n);
    if (e == NULL || e->told_at == 0 || e->told_at <= b->synced_at)
        return;
    b->synced_at = e->told_at;
    uint64_t cap = sl_lim_capacity_of(p), full = sl_lim_capacity_of(&L->p);
    unsigned __int128 left = (unsigned __int128)(e->told_left + e->lease) * cap / full;
    sl_algo_state_free(&b->st);
    memset(&b->st, 0, sizeof(b->st));
    if (left >= cap)
        return; /* full: as new */
    struct sl_algo_params p0 = *p;
    p0.max_wait_us = 0; /* a take, never a reservation */
    struct sl_algo_result res;
    (void)sl_algo_take(&b->st, &p0, e->told_at, cap - (uint64_t)left, 1, &res);
}

/* Decides <q> here when its store-backed limits all lease and either hold
 * enough tokens or are known to refuse it. Else, when a lease is being
 * asked for one of its entries, <q> waits for the answer (*<wait_on> is
 * that entry); else <q> makes the call, asking a lease on top of the cost
 * for entries that are not lean (see below for lean ones). Returns 1 (decided, <v>),
 * 2 (wait) or 0 (ask the store). */
static int lease_try(struct sl_limiter *lim, struct sl_limiter_req *q, struct sl_verdict *v,
                     struct bucket **wait_on)
{
    struct bucket *e[MAX_REQ_LIMITS];
    int covered = 1, all = 1; /* all: every store-backed limit leases */
    q->probe = 0;
    for (int k = 0; k < q->n; k++) {
        q->lease_ask[k] = 0;
        e[k] = NULL;
        if (!q->remote[k])
            continue;
        struct limit *L = &lim->limits[q->idx[k]];
        if (L->lease_size > 0 || (L->remember && refuses_here(L)))
            e[k] = lease_entry(L, q->identity, q->now_us);
        if (e[k] == NULL || L->lease_size == 0)
            all = 0;
        if (e[k] == NULL || e[k]->lease < q->cost[k])
            covered = 0;
    }
    for (int k = 0; k < q->n; k++) {
        if (e[k] == NULL || e[k]->deny_until <= q->now_us || q->cost[k] < e[k]->deny_cost ||
            e[k]->lease >= q->cost[k])
            continue;
        struct limit *L = &lim->limits[q->idx[k]];
        /* What is left is what the store last said, as then: approximate. */
        struct sl_algo_result res = { .retry_after_us = e[k]->deny_until - q->now_us,
                                      .remaining = e[k]->lease,
                                      .reset_us = e[k]->told_reset > q->now_us
                                                      ? e[k]->told_reset - q->now_us : 0 };
        memset(v, 0, sizeof(*v));
        sl_lim_deny(v, L, q->identity, &res);
        v->approx = 1;
        L->rejected++;
        if (L->lease_size > 0)
            L->leased++;
        else
            L->held++;
        return 1;
    }
    if (!all) {
        /* Without leases, the store decides the whole request; a refusal
         * remembered as over (deny_until set and passed) makes the next
         * request ask alone and the others wait for its answer, so a flood
         * sends one call when the retry time comes, not one per request.
         * (Lease entries keep their own bookkeeping: not probed here.) */
        for (int k = 0; k < q->n; k++) {
            if (e[k] != NULL && lim->limits[q->idx[k]].lease_size == 0 && e[k]->asking) {
                *wait_on = e[k];
                return 2;
            }
        }
        for (int k = 0; k < q->n; k++) {
            if (e[k] != NULL && lim->limits[q->idx[k]].lease_size == 0 && e[k]->deny_until != 0) {
                e[k]->deny_until = 0;
                e[k]->asking = 1;
                q->probe |= 1u << k;
            }
        }
        return 0;
    }
    if (covered) {
        memset(v, 0, sizeof(*v));
        decide_local(lim, q, 0, 1, v); /* the in-process limits, peeked before: taken */
        if (v->kind != SL_VERDICT_ALLOW)
            return 1;
        for (int k = 0; k < q->n; k++) {
            if (!q->remote[k])
                continue;
            struct limit *L = &lim->limits[q->idx[k]];
            e[k]->lease -= q->cost[k];
            L->leased++;
            allowed_after(L, v, 0);
            /* What the store last said was left, and the lease still held
             * here: the store counted the lease, so its reset holds. */
            closest(v, L, e[k]->told_left + e[k]->lease,
                    e[k]->told_reset > q->now_us ? e[k]->told_reset - q->now_us : 0, 1);
        }
        return 1;
    }
    for (int k = 0; k < q->n; k++) {
        if (q->remote[k] && e[k]->lease < q->cost[k] && e[k]->asking) {
            *wait_on = e[k];
            return 2;
        }
    }
    /* A lease is asked by one request at a time, and the others short of
     * tokens wait for it. A lean entry asks costs alone, in parallel as
     * without leases (waiting there would pass one request per round
     * trip), except right after a remembered refusal ran out: then one
     * request probes and the others wait for its answer, so a flood costs
     * the store one call per retry time, not one per request. */
    for (int k = 0; k < q->n; k++) {
        if (!q->remote[k] || e[k]->lease >= q->cost[k])
            continue;
        const struct limit *L = &lim->limits[q->idx[k]];
        uint64_t size = L->lease_size;
        if (e[k]->lean_until > q->now_us) {
            /* lean: a lease of what the store last said was left beyond
             * this request's cost (after waiting for a chunk: the chunk) */
            uint64_t left = e[k]->seen_left > q->cost[k] ? e[k]->seen_left - q->cost[k] : 0;
            size = left < size ? left : size;
            /* Nothing left to lease: costs alone, in parallel when the
             * limit has no chunk; with one, a probe, so that a flood does
             * not send the store a call per request. */
            if (size == 0 && L->chunk <= q->cost[k] &&
                (e[k]->deny_until == 0 || e[k]->deny_until > q->now_us))
                continue;
            if (size == 0)
                e[k]->deny_until = 0; /* the probe */
        }
        q->lease_ask[k] = size;
        e[k]->asking = 1;
        q->probe |= 1u << k;
    }
    return 0;
}

static void lease_wait(struct bucket *e, struct sl_limiter_req *q)
{
    q->next_wait = NULL;
    if (e->waiters == NULL)
        e->wait_tail = &e->waiters;
    *e->wait_tail = q;
    e->wait_tail = &q->next_wait;
}

static int send_store(struct sl_limiter *lim, struct sl_limiter_req *q);
static void store_failed(struct sl_limiter *lim, struct sl_limiter_req *q, struct sl_verdict *v);
static void lease_done(struct sl_limiter *lim, struct sl_limiter_req *q);

/* Decides (again) a request that waited for a lease entry's answer; it
 * holds a reference to <lim> until decided. */
static void lease_redo(struct sl_limiter *lim, struct sl_limiter_req *w)
{
    struct sl_verdict v;
    memset(&v, 0, sizeof(v));
    if (w->cb != NULL && !sl_store_up(lim->store)) {
        store_failed(lim, w, &v);
        w->cb(w->data, &v);
    } else if (w->cb != NULL) {
        struct bucket *on = NULL;
        int r = lease_try(lim, w, &v, &on);
        if (r == 2) {
            lease_wait(on, w);
            return;
        }
        if (r == 0 && send_store(lim, w))
            return;
        if (r == 0) {
            lease_done(lim, w);
            store_failed(lim, w, &v);
        }
        w->cb(w->data, &v);
    }
    sl_pool_give(&req_pool, w);
    sl_limiter_release(lim);
}

/* The store call of <q> is over (answered, failed or never sent): the
 * entries it answered for take the next asker, and their waiters go on. */
static void lease_done(struct sl_limiter *lim, struct sl_limiter_req *q)
{
    uint32_t probe = q->probe;
    q->probe = 0;
    for (int k = 0; k < q->n; k++) {
        q->lease_ask[k] = 0;
        if (!(probe & (1u << k)))
            continue;
        struct bucket *e = lease_entry(&lim->limits[q->idx[k]], q->identity, q->now_us);
        if (e == NULL)
            continue;
        e->asking = 0;
        struct sl_limiter_req *w = e->waiters;
        e->waiters = NULL;
        while (w != NULL) {
            struct sl_limiter_req *next = w->next_wait;
            lease_redo(lim, w);
            w = next;
        }
    }
}

/* One script call for every store-backed limit of <q> (its cost, plus any
 * lease asked). Returns 1 when sent: on_store gets the answer. */
static int send_store(struct sl_limiter *lim, struct sl_limiter_req *q)
{
    char keybuf[MAX_REQ_LIMITS][KEY_MAX];
    char numbuf[MAX_REQ_LIMITS][6][24];
    struct sl_str keys[MAX_REQ_LIMITS], args[2 + 7 * MAX_REQ_LIMITS];
    char nbuf[8];
    int nk = 0, na = 0, nremote = 0;
    for (int k = 0; k < q->n; k++)
        nremote += q->remote[k];
    args[na++] = (struct sl_str){ "-1", 2 };
    args[na].p = nbuf;
    args[na++].len = (size_t)snprintf(nbuf, sizeof(nbuf), "%d", nremote);
    for (int k = 0; k < q->n; k++) {
        if (!q->remote[k])
            continue;
        const struct limit *L = &lim->limits[q->idx[k]];
        keys[nk] = sl_lim_store_key(lim, L, q->identity, keybuf[nk], sizeof(keybuf[nk]));
        const char *an = sl_algo_name(L->p.algo);
        args[na++] = (struct sl_str){ an, strlen(an) };
        uint64_t nums[6] = { L->p.amount, L->p.period_us, L->p.burst, q->cost[k] + q->lease_ask[k],
                             L->action == SL_ACTION_SHADOW, L->p.max_wait_us };
        for (int f = 0; f < 6; f++) {
            args[na].p = numbuf[nk][f];
            args[na++].len = (size_t)snprintf(numbuf[nk][f], 24, "%" PRIu64, nums[f]);
        }
        nk++;
    }
    return sl_store_eval(lim->store, SL_SCRIPT_DECIDE, nk, keys, na, args, on_store, q) != NULL;
}

/* Limit <k>'s part of the store's answer {all_allowed, (allowed, remaining,
 * retry_us, reset_us) per store-backed limit of <q>, in order}. */
static const int64_t *answer_of(const struct sl_limiter_req *q, const int64_t *vals, int k)
{
    int j = 1;
    for (int i = 0; i < k; i++)
        j += 4 * q->remote[i];
    return vals + j;
}

/* Costs of <cost> or more for entry <e> are refused here until <until>;
 * with a chunk bigger than the cost, the ask after that is for the chunk. */
static void hold(struct bucket *e, const struct limit *L, uint64_t until, uint64_t cost)
{
    e->deny_until = until;
    e->deny_cost = cost;
    if (L->chunk > cost)
        e->seen_left = L->chunk;
}

/* Without a lease, limit <L> (its part <r> of the answer to <q>'s call,
 * <k>) remembers in <e> a refusal until its retry time. A take that left
 * less than the cost is one too: for the buckets (token_bucket, gcra) the
 * cost is back no sooner than the time to full (reset) less the time to
 * refill burst - cost (one microsecond less for rounding); for windows the
 * refusal is remembered as already over, so the next request asks alone. */
static void remember_refusal(const struct limit *L, struct bucket *e,
                             const struct sl_limiter_req *q, int k, const int64_t *vals,
                             const int64_t *r)
{
    uint64_t cost = q->cost[k], now = q->now_us > 0 ? q->now_us : 1;
    if (r[0] == 0 && r[2] > 0) {
        hold(e, L, now + (uint64_t)r[2], cost);
    } else if (r[0] != 0 && vals[0] != 0 && cost > 0 && (r[1] < 0 || (uint64_t)r[1] < cost)) {
        uint64_t until = now;
        if ((L->p.algo == SL_ALGO_TOKEN_BUCKET || L->p.algo == SL_ALGO_GCRA) && r[3] > 0) {
            uint64_t less = refill_us(L, L->p.burst > cost ? L->p.burst - cost : 0) + 1;
            if ((uint64_t)r[3] > less)
                until = now + (uint64_t)r[3] - less;
        }
        hold(e, L, until, cost);
    }
}

/* The store answered <q>: grants become tokens here, refusals are
 * remembered. A lease take refused is asked again for the cost alone
 * (returns 1: on_store ends there, the entries stay asked for). */
static int lease_answer(struct sl_limiter *lim, struct sl_limiter_req *q, const int64_t *vals,
                        uint64_t at_us)
{
    int refused = 0;
    for (int k = 0; k < q->n; k++) {
        if (!q->remote[k])
            continue;
        struct limit *L = &lim->limits[q->idx[k]];
        const int64_t *r = answer_of(q, vals, k);
        if (!L->remember)
            continue;
        struct bucket *e = lease_entry(L, q->identity, q->now_us);
        if (e == NULL)
            continue;
        e->told_left = r[1] > 0 ? (uint64_t)r[1] : 0; /* for on_failure = local */
        e->told_at = at_us;
        e->told_reset = at_us + (r[3] > 0 ? (uint64_t)r[3] : 0); /* for RateLimit's t */
        if (L->lease_size == 0) {
            if (refuses_here(L))
                remember_refusal(L, e, q, k, vals, r);
            continue;
        }
        if (r[0] != 0 && vals[0] != 0)
            e->seen_left = r[1] > 0 ? (uint64_t)r[1] : 0;
        if (q->lease_ask[k] > 0) {
            if (vals[0] != 0) {
                e->lease += q->lease_ask[k];
            } else if (r[0] == 0) {
                refused = 1; /* this limit said no to cost + lease */
                e->lean_until = q->now_us + LEASE_LEAN_US;
                e->seen_left = 0;
            }
        } else if (r[0] == 0 && r[2] > 0) {
            /* Refused until the cost is back; with a chunk, until the chunk
             * is, and then the chunk is asked for at once. */
            uint64_t more = L->chunk > q->cost[k] ? refill_us(L, L->chunk - q->cost[k]) : 0;
            hold(e, L, (more > 0 ? at_us : q->now_us) + (uint64_t)r[2] + more, q->cost[k]);
        }
        if (r[0] != 0 && vals[0] != 0 && e->lean_until > q->now_us &&
            (r[1] <= 0 || (L->chunk > 1 && (uint64_t)r[1] < L->chunk))) {
            /* That (nearly) emptied the bucket: the next ask probes alone,
             * once a chunk is back (without a chunk: at once, a refusal
             * remembered as already over). Meanwhile what is left stays
             * in the store and counts towards the chunk. */
            uint64_t left = r[1] > 0 ? (uint64_t)r[1] : 0;
            uint64_t wait = L->chunk > 1 ? refill_us(L, L->chunk - left) : 0;
            hold(e, L, wait > 0 ? at_us + wait : q->now_us > 0 ? q->now_us : 1, q->cost[k]);
        }
    }
    if (!refused || q->cb == NULL)
        return 0;
    for (int k = 0; k < q->n; k++)
        q->lease_ask[k] = 0;
    return send_store(lim, q);
}

/* When the store's answer to <q> came (us, the clock of decisions): a
 * chunk is counted from when the store emptied the bucket, not from when
 * the request was made. */
static uint64_t answer_time(const struct sl_limiter_req *q)
{
    uint64_t now = uv_hrtime() / 1000;
    return now > q->now_us ? now : q->now_us;
}

/* The store answered: {all_allowed, (allowed, remaining, retry, reset) x n}. */
static void on_store(void *data, int status, const int64_t *vals, int n, const char *err)
{
    struct sl_limiter_req *q = data;
    struct sl_limiter *lim = q->lim;
    struct sl_verdict v;
    memset(&v, 0, sizeof(v));
    int nremote = 0;
    for (int k = 0; k < q->n; k++)
        nremote += q->remote[k];
    if (status < 0 || n != 1 + 4 * nremote) {
        if (status == 0)
            sl_log_warn_rl("store_unexpected_reply", "quota store: unexpected reply",
                           "values=%d expected=%d err=\"%s\"", n, 1 + 4 * nremote, err ? err : "");
        store_failed(lim, q, &v);
    } else if (lease_answer(lim, q, vals, answer_time(q))) {
        return; /* asked again, without the leases */
    } else {
        /* Local limits were peeked before asking; the store's verdict
         * comes first, then the local ones are taken if everything allows. */
        int ok = vals[0] != 0;
        for (int k = 0; k < q->n; k++) {
            if (!q->remote[k])
                continue;
            struct limit *L = &lim->limits[q->idx[k]];
            const int64_t *r = answer_of(q, vals, k);
            if (L->action == SL_ACTION_SHADOW) {
                if (r[0] == 0)
                    shadow_denied(L, r[2] < 0 ? UINT64_MAX : (uint64_t)r[2]);
                continue;
            }
            if (r[0] == 0) {
                struct sl_algo_result res = {
                    .allowed = 0,
                    .retry_after_us = r[2] < 0 ? UINT64_MAX : (uint64_t)r[2],
                    .remaining = r[1] > 0 ? (uint64_t)r[1] : 0,
                    .reset_us = r[3] > 0 ? (uint64_t)r[3] : 0,
                };
                sl_lim_deny(&v, L, q->identity, &res);
            }
        }
        if (ok) {
            decide_local(lim, q, 0, 1, &v);
            if (v.kind == SL_VERDICT_ALLOW) {
                for (int k = 0; k < q->n; k++) {
                    struct limit *L = &lim->limits[q->idx[k]];
                    if (!q->remote[k] || L->action == SL_ACTION_SHADOW)
                        continue;
                    const int64_t *r = answer_of(q, vals, k);
                    allowed_after(L, &v, r[2] > 0 ? (uint64_t)r[2] : 0);
                    /* The store's word after the take, and the lease
                     * tokens it just granted here (spent only here). */
                    uint64_t left = r[1] > 0 ? (uint64_t)r[1] : 0;
                    const struct bucket *e = L->lease_size > 0
                                                 ? lease_entry(L, q->identity, q->now_us) : NULL;
                    closest(&v, L, left + (e != NULL ? e->lease : 0),
                            r[3] > 0 ? (uint64_t)r[3] : 0, 0);
                }
            }
        } else {
            for (int k = 0; k < q->n; k++) {
                struct limit *L = &lim->limits[q->idx[k]];
                if (L->action != SL_ACTION_SHADOW && strcmp(v.limit, L->name) == 0)
                    L->rejected++;
            }
        }
    }
    if (q->cb)
        q->cb(q->data, &v);
    lease_done(lim, q);
    sl_pool_give(&req_pool, q);
    sl_limiter_release(lim);
}

static int run(struct sl_limiter *lim, const struct sl_listener_conf *lc,
               const struct sl_ident_state *ident, uint64_t conn_id, const struct sl_req *r,
               int metric, uint64_t amount, const int *cand, int nc, uint64_t now_us,
               struct sl_verdict *v, sl_limiter_cb *cb, void *data, struct sl_limiter_req **req);

/* The store key of limit <L> for <id> ("*" for global scope), in <buf> of
 * <cap> bytes: <key_prefix>{<limit>:<identity>}, one hash tag per bucket. */
struct sl_str sl_lim_store_key(const struct sl_limiter *lim, const struct limit *L, const char *id,
                               char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "%s{%s:%s}", lim->key_prefix, L->name,
                     L->scope == SL_SCOPE_GLOBAL ? "*" : id);
    size_t len = n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
    return (struct sl_str){ buf, len };
}

int sl_limiter_check(struct sl_limiter *lim, const struct sl_listener_conf *lc,
                     const struct sl_ident_state *ident, uint64_t conn_id,
                     const struct sl_resp_req *r, uint64_t now_us, struct sl_verdict *v,
                     sl_limiter_cb *cb, void *data, struct sl_limiter_req **req)
{
    const struct sl_req q = { .resp = r, .http = NULL };
    return sl_limiter_check_req(lim, lc, ident, conn_id, &q, now_us, v, cb, data, req);
}

/* HTTP: candidates by listener, method and path. */
static int check_http(struct sl_limiter *lim, const struct sl_listener_conf *lc,
                      const struct sl_ident_state *ident, uint64_t conn_id,
                      const struct sl_req *r, uint64_t now_us, struct sl_verdict *v,
                      sl_limiter_cb *cb, void *data, struct sl_limiter_req **req)
{
    struct sl_lim_path pp = { .hd = r->http };
    int *cand = lim->cand, nc = 0;
    for (int i = 0; i < lim->n; i++)
        if (sl_lim_applies(&lim->limits[i], lc, SL_METRIC_REQUESTS) &&
            sl_lim_http_matches(&lim->limits[i], &pp))
            cand[nc++] = i;
    sl_lim_path_done(&pp);
    if (nc == 0)
        return 0;
    return run(lim, lc, ident, conn_id, r, SL_METRIC_REQUESTS, 0, cand, nc, now_us, v, cb, data, req);
}

int sl_limiter_check_req(struct sl_limiter *lim, const struct sl_listener_conf *lc,
                         const struct sl_ident_state *ident, uint64_t conn_id,
                         const struct sl_req *q, uint64_t now_us, struct sl_verdict *v,
                         sl_limiter_cb *cb, void *data, struct sl_limiter_req **req)
{
    memset(v, 0, sizeof(*v));
    if (q != NULL && q->http != NULL)
        return check_http(lim, lc, ident, conn_id, q, now_us, v, cb, data, req);
    const struct sl_resp_req *r = q != NULL ? q->resp : NULL;
    if (sl_lim_exempt(r))
        return 0;
    uint32_t cats = lim->any_cats ? sl_resp_acl_of(r) : 0;
    /* Candidates by listener and command: no identity work before this.
     * All of them: tiers and match_identity thin them out afterwards. */
    int *cand = lim->cand, nc = 0;
    for (int i = 0; i < lim->n; i++)
        if (sl_lim_applies(&lim->limits[i], lc, SL_METRIC_REQUESTS) &&
            sl_lim_command_matches(&lim->limits[i], r, cats))
            cand[nc++] = i;
    if (nc == 0)
        return 0;
    return run(lim, lc, ident, conn_id, q, SL_METRIC_REQUESTS, 0, cand, nc, now_us, v, cb, data, req);
}

int sl_limiter_take(struct sl_limiter *lim, const struct sl_listener_conf *lc,
                    const struct sl_ident_state *ident, uint64_t conn_id, enum sl_metric metric,
                    uint64_t amount, uint64_t now_us, struct sl_verdict *v, sl_limiter_cb *cb,
                    void *data, struct sl_limiter_req **req)
{
    memset(v, 0, sizeof(*v));
    int *cand = lim->cand, nc = 0;
    for (int i = 0; i < lim->n; i++)
        if (sl_lim_applies(&lim->limits[i], lc, (int)metric))
            cand[nc++] = i;
    if (nc == 0)
        return 0;
    return run(lim, lc, ident, conn_id, NULL, (int)metric, amount, cand, nc, now_us, v, cb, data, req);
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

static int run(struct sl_limiter *lim, const struct sl_listener_conf *lc,
               const struct sl_ident_state *ident, uint64_t conn_id, const struct sl_req *r,
               int metric, uint64_t amount, const int *cand, int nc, uint64_t now_us,
               struct sl_verdict *v, sl_limiter_cb *cb, void *data, struct sl_limiter_req **req)
{
    struct sl_limiter_req qs, *q = &qs;
    memset(q, 0, sizeof(*q));
    q->lim = lim;
    q->metric = (uint8_t)metric;
    q->now_us = now_us;
    q->conn_id = conn_id;
    sl_identity_of_req(lc, ident, r, q->identity);

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
        q->cost[k] = metric == SL_METRIC_REQUESTS ? sl_lim_cost_of(L, r) : amount;
        q->remote[k] = lim->store != NULL && L->scope != SL_SCOPE_CONNECTION;
        nremote += q->remote[k];
        if (L->scope == SL_SCOPE_IDENTITY && metric == SL_METRIC_REQUESTS)
            sl_lim_top_count(&lim->limits[cand[c]], q->identity);
    }
    if (q->n == 0)
        return 0;

    if (nremote == 0) {
        decide_local(lim, q, 0, 1, v);
        return 0;
    }
    /* Local limits first: if one of them denies, the store is not asked. */
    struct sl_algo_result res;
    for (int k = 0; k < q->n; k++) {
        const struct limit *L = &lim->limits[q->idx[k]];
        if (!q->remote[k] && L->action != SL_ACTION_SHADOW && !local_take(lim, q, k, 1, 0, &res))
            sl_lim_deny(v, L, q->identity, &res);
    }
    if (v->kind == SL_VERDICT_REJECT) {
        for (int k = 0; k < q->n; k++)
            if (!q->remote[k] && strcmp(lim->limits[q->idx[k]].name, v->limit) == 0)
                lim->limits[q->idx[k]].rejected++;
        return 0;
    }
    if (!sl_store_up(lim->store)) {
        store_failed(lim, q, v);
        return 0;
    }

    struct bucket *wait_on = NULL;
    int lr = lease_try(lim, q, v, &wait_on);
    if (lr == 1)
        return 0;
    struct sl_limiter_req *heap = sl_pool_take(&req_pool);
    if (heap == NULL) {
        lease_done(lim, q);
        memset(v, 0, sizeof(*v));
        store_failed(lim, q, v);
        return 0;
    }
    *heap = *q;
    heap->cb = cb;
    heap->data = data;
    if (lr == 2) {
        lease_wait(wait_on, heap);
    } else if (!send_store(lim, heap)) {
        sl_pool_give(&req_pool, heap);
        lease_done(lim, q);
        store_failed(lim, q, v);
        return 0;
    }
    lim->refs++;
    *req = heap;
    return 1;
}

void sl_limiter_cancel(struct sl_limiter_req *req)
{
    req->cb = NULL;
}

/* ---- reporting ------------------------------------------------------------------ */

size_t sl_verdict_resp(const struct sl_verdict *v, char *out, size_t cap)
{
    int n;
    if (v->store_down)
        n = snprintf(out, cap,
                     "-THROTTLED limit '%s' cannot be checked (quota store unavailable), retry in 1000 ms\r\n",
                     v->limit);
    else if (v->never)
        n = snprintf(out, cap,
                     "-THROTTLED limit '%s' exceeded for '%s': the request costs more than the limit's burst\r\n",
                     v->limit, v->identity);
    else
        n = snprintf(out, cap, "-THROTTLED limit '%s' exceeded for '%s', retry in %" PRIu64 " ms\r\n",
                     v->limit, v->identity, (v->retry_after_us + 999) / 1000);
    if (n < 0)
        return 0;
    return (size_t)n < cap ? (size_t)n : cap - 1;
}

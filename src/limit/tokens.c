/* sluice — token leases and refusals remembered from the store.
 *
 * What the store said per limit and identity lives in an entry of the
 * limit's second table (buckets.c): the tokens leased here and not spent
 * yet, a refusal and until when it holds, what was left. A request whose
 * store-backed limits are covered by leases (or known to refuse it) is
 * decided here without a round trip; one asking for a lease makes the
 * others short of tokens wait for its answer (sl_lim_lease_wait). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "limit/buckets.h"
#include "limit/inproc.h"
#include "limit/idcount.h"
#include "limit/limiter-i.h"
#include "limit/remote.h"
#include "limit/tokens.h"
#include "limit/verdict.h"

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

/* How long a limit of numbers <p> takes to refill <tokens>, rounded up (us). */
static uint64_t refill_us(const struct sl_algo_params *p, uint64_t tokens)
{
    unsigned __int128 us = ((unsigned __int128)tokens * p->period_us + p->amount - 1) / p->amount;
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

void sl_lim_tokens_init(struct limit *L, int has_store, const struct sl_store_conf *sc)
{
    L->lease_size = has_store ? lease_size(L, sc->lease) : 0;
    L->chunk = chunk_of(L);
    L->remember = has_store && remembers(L, sc->on_failure);
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

/* The key of the entry of <L> for <identity>: '\0' + identity ("*" for
 * global scope), in <key>; returns its length. */
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

struct bucket *sl_lim_lease_entry(struct limit *L, const char *identity, uint64_t now_us)
{
    char key[SL_ID_MAX + 2];
    size_t n = entry_key(L, identity, key);
    return sl_lim_bucket_get(L, key, n, now_us / 1000);
}

static void forget(struct bucket *e)
{
    e->deny_until = 0;
    e->deny_cost = 0;
    e->lean_until = 0;
}

void sl_lim_tokens_forget(struct limit *L, const char *identity)
{
    char key[SL_ID_MAX + 2];
    size_t n = entry_key(L, identity, key);
    struct bucket *e = (struct bucket *)sl_idt_peek(&L->s->entries, key, n);
    if (e != NULL)
        forget(e);
}

/* Whether entry <e> was told under the numbers <p>. */
static int same_numbers(const struct bucket *e, const struct sl_algo_params *p)
{
    return e->num_amount == p->amount && e->num_period_us == p->period_us &&
           e->num_burst == p->burst && e->num_algo == (uint8_t)p->algo;
}

/* A request is decided with the numbers <p>: refusals that entry <e>
 * remembers under others are forgotten, and <p> is what it remembers
 * under from now on. The override cache forgets too when an answer
 * changes the numbers (overrides.c), but that cache may have dropped an
 * idle identity meanwhile (the sweep, max_identities), so the answer that
 * comes back cannot tell what changed: the entry itself must. */
static void numbers_now(struct bucket *e, const struct sl_algo_params *p)
{
    if (same_numbers(e, p))
        return;
    forget(e);
    e->num_amount = p->amount;
    e->num_period_us = p->period_us;
    e->num_burst = p->burst;
    e->num_algo = (uint8_t)p->algo;
}

/* Standing in for the store (on_failure = local), in-process bucket <b> of
 * <L> for <identity> starts from what the store last said was left (and
 * the lease tokens this instance held), in the share <p> of live
 * instances, as of when it said so, and refills from there: not full, as a
 * bucket the store emptied is not full when the store goes away. Once per
 * answer: later takes while the store is away go on from there. */
void sl_lim_start_from_store(struct limit *L, struct bucket *b, const char *identity,
                             const struct sl_algo_params *whole, const struct sl_algo_params *p)
{
    char key[SL_ID_MAX + 2];
    size_t n = entry_key(L, identity, key);
    const struct bucket *e = (const struct bucket *)sl_idt_peek(&L->s->entries, key, n);
    if (e == NULL || e->told_at == 0 || e->told_at <= b->synced_at)
        return;
    b->synced_at = e->told_at;
    uint64_t cap = sl_lim_capacity_of(p), full = sl_lim_capacity_of(whole);
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
int sl_lim_lease_try(struct sl_limiter *lim, struct sl_limiter_req *q, struct sl_verdict *v,
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
            e[k] = sl_lim_lease_entry(L, q->identity, q->now_us);
        if (e[k] != NULL)
            numbers_now(e[k], &q->p[k]);
        if (e[k] == NULL || L->lease_size == 0)
            all = 0;
        if (e[k] == NULL || e[k]->lease < q->cost[k])
            covered = 0;
    }
    for (int k = 0; k < q->n; k++) {
        /* A refusal trusted past overrides_ttl is asked again (below), so
         * a reset made on another instance is seen within that time. */
        if (e[k] == NULL || e[k]->deny_until <= q->now_us || e[k]->deny_trust <= q->now_us ||
            q->cost[k] < e[k]->deny_cost ||
            e[k]->lease >= q->cost[k])
            continue;
        struct limit *L = &lim->limits[q->idx[k]];
        /* What is left is what the store last said, as then: approximate. */
        struct sl_algo_result res = { .retry_after_us = e[k]->deny_until - q->now_us,
                                      .remaining = e[k]->lease,
                                      .reset_us = e[k]->told_reset > q->now_us
                                                      ? e[k]->told_reset - q->now_us : 0 };
        memset(v, 0, sizeof(*v));
        sl_lim_deny(v, L, &q->p[k], q->identity, &res);
        v->approx = 1;
        L->s->rejected++;
        if (L->lease_size > 0)
            L->s->leased++;
        else
            L->s->held++;
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
        sl_lim_decide_local(lim, q, 0, 1, v); /* the in-process limits, peeked before: taken */
        if (v->kind != SL_VERDICT_ALLOW)
            return 1;
        for (int k = 0; k < q->n; k++) {
            if (!q->remote[k])
                continue;
            struct limit *L = &lim->limits[q->idx[k]];
            e[k]->lease -= q->cost[k];
            L->s->leased++;
            sl_lim_allowed_after(L, v, 0);
            /* What the store last said was left, and the lease still held
             * here: the store counted the lease, so its reset holds. */
            sl_lim_closest(v, L, &q->p[k], e[k]->told_left + e[k]->lease,
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
                (e[k]->deny_until == 0 ||
                 (e[k]->deny_until > q->now_us && e[k]->deny_trust > q->now_us)))
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

void sl_lim_lease_wait(struct bucket *e, struct sl_limiter_req *q)
{
    sl_lim_waiters_add(&e->waiting, q);
}
/* Decides (again) a request that waited for a lease entry's answer; it
 * holds a reference to its limiter until decided. That may not be the
 * limiter whose call answered: a reload shares the entries with the next
 * one (limit/carry.h), whose requests wait on the old one's calls. */
static void lease_redo(struct sl_limiter_req *w)
{
    struct sl_limiter *lim = w->lim;
    struct sl_verdict v;
    memset(&v, 0, sizeof(v));
    if (w->cb != NULL && !sl_store_up(lim->store)) {
        sl_lim_store_failed(lim, w, &v);
        sl_lim_deliver(w, &v);
    } else if (w->cb != NULL) {
        struct bucket *on = NULL;
        int r = sl_lim_lease_try(lim, w, &v, &on);
        if (r == 2) {
            sl_lim_lease_wait(on, w);
            return;
        }
        if (r == 0 && sl_lim_send(lim, w))
            return;
        if (r == 0) {
            sl_lim_lease_done(lim, w);
            sl_lim_store_failed(lim, w, &v);
        }
        sl_lim_deliver(w, &v);
    }
    sl_lim_req_free(w);
}

/* The store call of <q> is over (answered, failed or never sent): the
 * entries it answered for take the next asker, and their waiters go on. */
void sl_lim_lease_done(struct sl_limiter *lim, struct sl_limiter_req *q)
{
    uint32_t probe = q->probe;
    q->probe = 0;
    for (int k = 0; k < q->n; k++) {
        q->lease_ask[k] = 0;
        if (!(probe & (1u << k)))
            continue;
        struct bucket *e = sl_lim_lease_entry(&lim->limits[q->idx[k]], q->identity, q->now_us);
        if (e == NULL)
            continue;
        e->asking = 0;
        struct sl_limiter_req *w = sl_lim_waiters_take(&e->waiting);
        while (w != NULL) {
            struct sl_limiter_req *next = w->next_wait;
            lease_redo(w);
            w = next;
        }
    }
}

/* Costs of <cost> or more for entry <e> are refused here until <until>;
 * with a chunk bigger than the cost, the ask after that is for the chunk. */
static void hold(struct bucket *e, const struct limit *L, uint64_t now, uint64_t until,
                 uint64_t cost)
{
    e->deny_until = until;
    e->deny_trust = now + L->trust_us;
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
        hold(e, L, now, now + (uint64_t)r[2], cost);
    } else if (r[0] != 0 && vals[0] != 0 && cost > 0 && (r[1] < 0 || (uint64_t)r[1] < cost)) {
        uint64_t until = now;
        const struct sl_algo_params *p = &q->p[k];
        if ((p->algo == SL_ALGO_TOKEN_BUCKET || p->algo == SL_ALGO_GCRA) && r[3] > 0) {
            uint64_t less = refill_us(p, p->burst > cost ? p->burst - cost : 0) + 1;
            if ((uint64_t)r[3] > less)
                until = now + (uint64_t)r[3] - less;
        }
        hold(e, L, now, until, cost);
    }
}

/* The store answered <q>: grants become tokens here, refusals are
 * remembered. A lease take refused is asked again for the cost alone
 * (returns 1: on_store ends there, the entries stay asked for). */
int sl_lim_lease_answer(struct sl_limiter *lim, struct sl_limiter_req *q, const int64_t *vals,
                        uint64_t at_us)
{
    int refused = 0;
    for (int k = 0; k < q->n; k++) {
        if (!q->remote[k])
            continue;
        struct limit *L = &lim->limits[q->idx[k]];
        const int64_t *r = sl_lim_answer_of(q, vals, k);
        if (!L->remember)
            continue;
        struct bucket *e = sl_lim_lease_entry(L, q->identity, q->now_us);
        if (e == NULL)
            continue;
        e->told_left = r[1] > 0 ? (uint64_t)r[1] : 0; /* for on_failure = local */
        e->told_at = at_us;
        e->told_reset = at_us + (r[3] > 0 ? (uint64_t)r[3] : 0); /* for RateLimit's t */
        if (e->num_amount == 0)
            numbers_now(e, &q->p[k]); /* the entry was dropped and made again meanwhile */
        /* Numbers that changed while the call was out: its refusal was
         * made under the old ones and is not remembered (the tokens it
         * granted are kept: the store counted them). */
        const int now_numbers = same_numbers(e, &q->p[k]);
        if (L->lease_size == 0) {
            if (refuses_here(L) && now_numbers)
                remember_refusal(L, e, q, k, vals, r);
            continue;
        }
        if (r[0] != 0 && vals[0] != 0)
            e->seen_left = r[1] > 0 ? (uint64_t)r[1] : 0;
        if (q->lease_ask[k] > 0) {
            if (vals[0] != 0) {
                e->lease += q->lease_ask[k];
            } else if (r[0] == 0 && !now_numbers) {
                refused = 1; /* asked again for the cost alone, not lean */
            } else if (r[0] == 0) {
                refused = 1; /* this limit said no to cost + lease */
                e->lean_until = q->now_us + LEASE_LEAN_US;
                e->seen_left = 0;
            }
        } else if (r[0] == 0 && r[2] > 0 && now_numbers) {
            /* Refused until the cost is back; with a chunk, until the chunk
             * is, and then the chunk is asked for at once. */
            uint64_t more = L->chunk > q->cost[k] ? refill_us(&q->p[k], L->chunk - q->cost[k]) : 0;
            hold(e, L, q->now_us, (more > 0 ? at_us : q->now_us) + (uint64_t)r[2] + more,
                 q->cost[k]);
        }
        if (now_numbers && r[0] != 0 && vals[0] != 0 && e->lean_until > q->now_us &&
            (r[1] <= 0 || (L->chunk > 1 && (uint64_t)r[1] < L->chunk))) {
            /* That (nearly) emptied the bucket: the next ask probes alone,
             * once a chunk is back (without a chunk: at once, a refusal
             * remembered as already over). Meanwhile what is left stays
             * in the store and counts towards the chunk. */
            uint64_t left = r[1] > 0 ? (uint64_t)r[1] : 0;
            uint64_t wait = L->chunk > 1 ? refill_us(&q->p[k], L->chunk - left) : 0;
            hold(e, L, q->now_us, wait > 0 ? at_us + wait : q->now_us > 0 ? q->now_us : 1,
                 q->cost[k]);
        }
    }
    if (!refused || q->cb == NULL)
        return 0;
    for (int k = 0; k < q->n; k++)
        q->lease_ask[k] = 0;
    return sl_lim_send(lim, q);
}


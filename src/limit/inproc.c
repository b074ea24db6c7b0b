/* sluice — deciding in process: limits with url = local or connection
 * scope, and every limit while the store cannot answer and on_failure
 * stands in for it (open: local-only limits hold; closed: refuse; local:
 * the same algorithms at the limit divided by the live instances). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "limit/buckets.h"
#include "limit/inproc.h"
#include "limit/limiter-i.h"
#include "limit/stats.h"
#include "limit/tokens.h"
#include "limit/verdict.h"
#include "store/store.h"

/* The in-process bucket key of limit <L> for <q>. */
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

/* Peeks (commit 0) or takes (commit 1) limit <i> of <q> in process, with
 * the rate divided by <share> (live instances when standing in for the
 * store). Returns 1 when allowed. */
int sl_lim_local_take(struct sl_limiter *lim, struct sl_limiter_req *q, int k, uint64_t share,
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
    struct sl_algo_params p = q->p[k];
    if (share > 1) {
        p.amount = p.amount / share ? p.amount / share : 1;
        p.burst = p.burst / share ? p.burst / share : 1;
    }
    sl_lim_bucket_numbers(b, &p, q->now_us);
    if (q->remote[k] && L->remember)
        sl_lim_start_from_store(L, b, q->identity, &q->p[k], &p);
    if (sl_algo_take(&b->st, &p, q->now_us, q->cost[k], commit, res) < 0)
        res->allowed = 1;
    return res->allowed;
}

/* Decides every limit of <q> in process (remote ones too when the store is
 * standing down with on_failure = local, at <share>). Fills <v>. */
void sl_lim_decide_local(struct sl_limiter *lim, struct sl_limiter_req *q, int with_remote,
                         uint64_t share, struct sl_verdict *v)
{
    struct sl_algo_result res;
    int ok = 1;
    for (int k = 0; k < q->n; k++) {
        struct limit *L = &lim->limits[q->idx[k]];
        if ((q->remote[k] && !with_remote) || L->action == SL_ACTION_SHADOW)
            continue;
        if (!sl_lim_local_take(lim, q, k, q->remote[k] ? share : 1, 0, &res)) {
            ok = 0;
            sl_lim_deny(v, L, &q->p[k], q->identity, &res);
            if (q->remote[k] && strcmp(v->limit, L->name) == 0)
                v->approx = 1; /* standing in for the store */
        }
    }
    for (int k = 0; k < q->n; k++) {
        struct limit *L = &lim->limits[q->idx[k]];
        if (q->remote[k] && !with_remote)
            continue;
        if (L->action == SL_ACTION_SHADOW) {
            int would = sl_lim_local_take(lim, q, k, q->remote[k] ? share : 1, 1, &res);
            sl_lim_shadow_outcome(L, q->identity, would, res.retry_after_us);
            if (!would)
                sl_lim_shadow_note(v, L, res.retry_after_us);
            continue;
        }
        if (q->remote[k])
            L->s->fallback++;
        if (ok) {
            sl_lim_local_take(lim, q, k, q->remote[k] ? share : 1, 1, &res);
            sl_lim_allowed_after(L, v, res.retry_after_us);
            if (res.remaining != UINT64_MAX) /* UINT64_MAX: uncounted */
                sl_lim_closest(v, L, &q->p[k], res.remaining, res.reset_us, q->remote[k]);
        } else {
            L->s->rejected += strcmp(v->limit, L->name) == 0;
        }
    }
}

/* The store could not answer: on_failure says what happens. */
void sl_lim_store_failed(struct sl_limiter *lim, struct sl_limiter_req *q, struct sl_verdict *v)
{
    switch (lim->on_failure) {
    case SL_FAIL_OPEN:
        sl_lim_decide_local(lim, q, 0, 1, v); /* local-only limits still hold */
        for (int k = 0; k < q->n; k++)
            if (q->remote[k])
                lim->limits[q->idx[k]].s->fallback++;
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
                sl_lim_set_policy(v, L, &q->p[k], 0, v->retry_after_us, 1); /* a guess */
                L->s->fallback++;
                L->s->rejected++;
                return;
            }
        }
        sl_lim_decide_local(lim, q, 0, 1, v);
        return;
    case SL_FAIL_LOCAL:
    default:
        sl_lim_decide_local(lim, q, 1, lim->store ? sl_store_live_instances(lim->store) : 1, v);
        return;
    }
}

/* sluice — the store round trip of a decision: one decide.lua call for all
 * of a request's store-backed limits (all or nothing), and its answer
 * turned into the verdict (tokens.c keeps what it says per identity). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "limit/inproc.h"
#include "limit/idcount.h"
#include "limit/limiter-i.h"
#include "limit/remote.h"
#include "limit/tokens.h"
#include "limit/verdict.h"
#include "store/store.h"

static void on_store(void *data, int status, const int64_t *vals, int n, const char *err);

/* One script call for every store-backed limit of <q> (its cost, plus any
 * lease asked). Returns 1 when sent: on_store gets the answer. */
int sl_lim_send(struct sl_limiter *lim, struct sl_limiter_req *q)
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
        const struct sl_algo_params *pk = &q->p[k];
        const char *an = sl_algo_name(pk->algo);
        args[na++] = (struct sl_str){ an, strlen(an) };
        uint64_t nums[6] = { pk->amount, pk->period_us, pk->burst, q->cost[k] + q->lease_ask[k],
                             L->action == SL_ACTION_SHADOW, pk->max_wait_us };
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
const int64_t *sl_lim_answer_of(const struct sl_limiter_req *q, const int64_t *vals, int k)
{
    int j = 1;
    for (int i = 0; i < k; i++)
        j += 4 * q->remote[i];
    return vals + j;
}

/* When the store's answer to <q> came (us, the clock of decisions): a
 * chunk is counted from when the store emptied the bucket, not from when
 * the request was made. */
static uint64_t answer_time(const struct sl_limiter_req *q)
{
    uint64_t now = sl_clock_us(q->lim->clock);
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
        sl_lim_store_failed(lim, q, &v);
    } else if (sl_lim_lease_answer(lim, q, vals, answer_time(q))) {
        return; /* asked again, without the leases */
    } else {
        /* Local limits were peeked before asking; the store's verdict
         * comes first, then the local ones are taken if everything allows. */
        int ok = vals[0] != 0;
        for (int k = 0; k < q->n; k++) {
            if (!q->remote[k])
                continue;
            struct limit *L = &lim->limits[q->idx[k]];
            const int64_t *r = sl_lim_answer_of(q, vals, k);
            if (L->action == SL_ACTION_SHADOW) {
                sl_lim_shadow_outcome(L, q->identity, r[0] != 0,
                                      r[2] < 0 ? UINT64_MAX : (uint64_t)r[2]);
                if (r[0] == 0)
                    sl_lim_shadow_note(&v, L, r[2] < 0 ? UINT64_MAX : (uint64_t)r[2]);
                continue;
            }
            if (r[0] == 0) {
                struct sl_algo_result res = {
                    .allowed = 0,
                    .retry_after_us = r[2] < 0 ? UINT64_MAX : (uint64_t)r[2],
                    .remaining = r[1] > 0 ? (uint64_t)r[1] : 0,
                    .reset_us = r[3] > 0 ? (uint64_t)r[3] : 0,
                };
                sl_lim_deny(&v, L, &q->p[k], q->identity, &res);
            }
        }
        if (ok) {
            sl_lim_decide_local(lim, q, 0, 1, &v);
            if (v.kind == SL_VERDICT_ALLOW) {
                for (int k = 0; k < q->n; k++) {
                    struct limit *L = &lim->limits[q->idx[k]];
                    if (!q->remote[k] || L->action == SL_ACTION_SHADOW)
                        continue;
                    const int64_t *r = sl_lim_answer_of(q, vals, k);
                    sl_lim_allowed_after(L, &v, r[2] > 0 ? (uint64_t)r[2] : 0);
                    /* The store's word after the take, and the lease
                     * tokens it just granted here (spent only here). */
                    uint64_t left = r[1] > 0 ? (uint64_t)r[1] : 0;
                    const struct bucket *e = L->lease_size > 0
                                                 ? sl_lim_lease_entry(L, q->identity, q->now_us) : NULL;
                    sl_lim_closest(&v, L, &q->p[k], left + (e != NULL ? e->lease : 0),
                            r[3] > 0 ? (uint64_t)r[3] : 0, 0);
                }
            }
        } else {
            for (int k = 0; k < q->n; k++) {
                struct limit *L = &lim->limits[q->idx[k]];
                if (L->action != SL_ACTION_SHADOW && strcmp(v.limit, L->name) == 0)
                    L->s->rejected++;
            }
        }
    }
    sl_lim_deliver(q, &v);
    sl_lim_lease_done(lim, q);
    sl_lim_req_free(q);
}

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


/* sluice — connection places and the login queue (metric = connections).
 *
 *   accept --> sl_lease_new       the connection limits it meets (listener,
 *                 |               match_identity, tiers); none: NULL
 *                 v
 *        sl_lease_acquire --+-- url = local ----> lease_local: count < max, all
 *                 |         |                     or nothing; a delay limit queues
 *                 |         |                     in <queued>, arrival order
 *                 |         +-- store down -----> lease_failed: on_failure open,
 *                 |         |                     closed, or local (max / live)
 *                 |         '-- store ----------> connections.lua acquire
 *                 |                                 --> lease_on_store
 *                 |   allowed in the store: on <held_leases>, renewed in one
 *                 |   batched call every lease / 3 (sl_lim_conns_renew, at sweep)
 *                 |   refused by a delay limit: the session asks again later,
 *                 |   keeping its place in the queue (sl_lease_gave_up at max_delay)
 *                 v
 *   close  --> sl_lease_free      places given back: store release, local count */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "identity/identity.h"
#include "limit/limiter-i.h"
#include "limit/limiter.h"
#include "store/store.h"

#include <uv.h>

/* A connection's places under the connection limits of its listener.
 * Counted in the store (lua/connections.lua: a ZSET of holders per limit
 * and identity, each with an expiry this instance renews in one batched
 * call every lease / 3), or in process (url = local, or on_failure = local
 * while the store is down: max / live instances). Queued leases (action =
 * delay) wait in arrival order: in the store's queue, and in process in
 * <queued> below. */
struct sl_lease {
    struct sl_lease   *prev, *next;   /* in held_leases (store) or queued (in process) */
    struct sl_lease  **list;          /* which of those, or NULL */
    struct sl_limiter *lim;           /* referenced */
    struct sl_store_req *sreq;        /* acquire in flight */
    sl_limiter_cb     *cb;
    void              *data;
    uint64_t           asked_us;      /* when the connection first asked */
    int                n;
    int                idx[MAX_CONN_LIMITS];
    uint8_t            counted[MAX_CONN_LIMITS]; /* holds an in-process count */
    uint8_t            remote;        /* holds places in the store */
    uint8_t            queue;         /* asks with queue = 1 */
    uint8_t            waited;        /* was refused at least once (queued) */
    char               identity[SL_ID_MAX + 1];
    char               member[160];   /* <instance id>:<connection number> */
};

static struct sl_lease *held_leases;  /* leases with places in the store (renewed) */
static struct sl_lease *queued;       /* in-process login queue, arrival order */
static uint64_t         last_renew_us;

static void lease_link(struct sl_lease **list, struct sl_lease *ls)
{
    ls->list = list;
    ls->prev = NULL;
    if (*list == NULL) {
        ls->next = NULL;
        *list = ls;
        return;
    }
    struct sl_lease *t = *list; /* append: arrival order */
    while (t->next)
        t = t->next;
    t->next = ls;
    ls->prev = t;
    ls->next = NULL;
}

static void lease_unlink(struct sl_lease *ls)
{
    if (ls->list == NULL)
        return;
    if (ls->prev)
        ls->prev->next = ls->next;
    else
        *ls->list = ls->next;
    if (ls->next)
        ls->next->prev = ls->prev;
    ls->prev = ls->next = NULL;
    ls->list = NULL;
}

static const char *lease_id(const struct sl_lease *ls, int k)
{
    return ls->lim->limits[ls->idx[k]].scope == SL_SCOPE_GLOBAL ? "*" : ls->identity;
}

struct sl_lease *sl_lease_new(struct sl_limiter *lim, const struct sl_listener_conf *lc,
                              const struct sl_ident_state *ident, uint64_t conn_id,
                              uint64_t now_us)
{
    if (lim == NULL)
        return NULL;
    int *cand = lim->cand, nc = 0;
    for (int i = 0; i < lim->n; i++)
        if (sl_lim_applies(&lim->limits[i], lc, SL_METRIC_CONNECTIONS))
            cand[nc++] = i;
    if (nc == 0)
        return NULL;
    struct sl_lease *ls = calloc(1, sizeof(*ls));
    if (ls == NULL) {
        sl_lim_uncounted(UNCOUNTED_NO_MEMORY, "connection"); /* let it in, but say so */
        return NULL;
    }
    sl_identity_of(lc, ident, NULL, ls->identity);
    uint8_t *keep = lim->keep;
    for (int c = 0; c < nc; c++)
        keep[c] = (uint8_t)sl_lim_identity_matches(&lim->limits[cand[c]], ls->identity);
    for (int c = 0; c < nc; c++) {
        int x = lim->limits[cand[c]].replaces;
        if (keep[c] && x >= 0)
            for (int d = 0; d < nc; d++)
                if (cand[d] == x)
                    keep[d] = 0;
    }
    for (int c = 0; c < nc; c++) {
        if (!keep[c])
            continue;
        if (ls->n == MAX_CONN_LIMITS) { /* sl_limiter_validate() refuses such files */
            sl_lim_uncounted(UNCOUNTED_TOO_MANY, "connection");
            break;
        }
        ls->idx[ls->n++] = cand[c];
    }
    if (ls->n == 0) {
        free(ls);
        return NULL;
    }
    for (int k = 0; k < ls->n; k++)
        ls->queue |= lim->limits[ls->idx[k]].action == SL_ACTION_DELAY;
    ls->lim = lim;
    lim->refs++;
    ls->asked_us = now_us;
    snprintf(ls->member, sizeof(ls->member), "%s:%" PRIu64,
             lim->store ? sl_store_instance_id(lim->store) : "local", conn_id);
    return ls;
}

/* Another queued lease ahead of <ls> waits for one of its limits. */
static int someone_ahead(const struct sl_lease *ls)
{
    for (const struct sl_lease *o = queued; o != NULL && o != ls; o = o->next) {
        if (o->lim != ls->lim)
            continue;
        for (int a = 0; a < o->n; a++)
            for (int b = 0; b < ls->n; b++)
                if (o->idx[a] == ls->idx[b] && strcmp(lease_id(o, a), lease_id(ls, b)) == 0 &&
                    ls->lim->limits[ls->idx[b]].action != SL_ACTION_SHADOW)
                    return 1;
    }
    return 0;
}

static struct bucket *lease_bucket(struct sl_lease *ls, int k, uint64_t now_us)
{
    struct limit *L = &ls->lim->limits[ls->idx[k]];
    const char *id = lease_id(ls, k);
    return sl_lim_bucket_get(L, id, strlen(id), now_us / 1000);
}

static void lease_verdict_done(struct sl_lease *ls, struct sl_verdict *v, uint64_t now_us)
{
    if (v->kind == SL_VERDICT_REJECT)
        ls->waited = 1;
    for (int k = 0; k < ls->n; k++) {
        struct limit *L = &ls->lim->limits[ls->idx[k]];
        if (L->action == SL_ACTION_SHADOW)
            continue;
        if (v->kind == SL_VERDICT_ALLOW) {
            L->allowed++;
            if (L->action == SL_ACTION_DELAY && ls->waited && now_us > ls->asked_us) {
                L->delayed++;
                sl_lim_hist_add(&L->delay, now_us - ls->asked_us);
            }
        } else if (strcmp(v->limit, L->name) == 0 && L->action == SL_ACTION_REJECT) {
            L->rejected++;
        }
    }
}

/* In process: all or nothing over the limits, at max / <share>. */
static void lease_local(struct sl_lease *ls, uint64_t share, int fallback, uint64_t now_us,
                        struct sl_verdict *v)
{
    int ok = !(ls->queue && someone_ahead(ls));
    for (int k = 0; k < ls->n && ok; k++) {
        struct limit *L = &ls->lim->limits[ls->idx[k]];
        if (L->action == SL_ACTION_SHADOW)
            continue;
        struct bucket *b = lease_bucket(ls, k, now_us);
        uint64_t max = L->max / share ? L->max / share : 1;
        if (b != NULL && b->st.a >= max) {
            ok = 0;
            struct sl_algo_result res = { .retry_after_us = 1000000 };
            sl_lim_deny(v, L, ls->identity, &res);
        }
    }
    if (!ok && v->kind != SL_VERDICT_REJECT) {
        /* someone is ahead in the queue: name the first delay limit */
        for (int k = 0; k < ls->n; k++) {
            struct limit *L = &ls->lim->limits[ls->idx[k]];
            if (L->action == SL_ACTION_DELAY) {
                struct sl_algo_result res = { .retry_after_us = 1000000 };
                sl_lim_deny(v, L, ls->identity, &res);
                break;
            }
        }
    }
    for (int k = 0; k < ls->n; k++) {
        struct limit *L = &ls->lim->limits[ls->idx[k]];
        if (fallback)
            L->fallback++;
        struct bucket *b = lease_bucket(ls, k, now_us);
        if (b == NULL) {
            if (ok)
                sl_lim_uncounted(UNCOUNTED_NO_MEMORY, "connection");
            continue;
        }
        uint64_t max = L->max / share ? L->max / share : 1;
        if (L->action == SL_ACTION_SHADOW) {
            if (!ok)
                continue;
            if (b->st.a >= max)
                L->shadow_hits++;
        } else if (!ok) {
            continue;
        }
        b->st.a++;
        ls->counted[k] = 1;
    }
    if (ok && ls->list == &queued)
        lease_unlink(ls);
    else if (!ok && ls->queue && ls->list == NULL)
        lease_link(&queued, ls);
    lease_verdict_done(ls, v, now_us);
}

/* Store down: on_failure. */
static void lease_failed(struct sl_lease *ls, uint64_t now_us, struct sl_verdict *v)
{
    struct sl_limiter *lim = ls->lim;
    if (lim->on_failure == SL_FAIL_OPEN) {
        for (int k = 0; k < ls->n; k++)
            lim->limits[ls->idx[k]].fallback++;
        return;
    }
    if (lim->on_failure == SL_FAIL_CLOSED) {
        for (int k = 0; k < ls->n; k++) {
            struct limit *L = &lim->limits[ls->idx[k]];
            L->fallback++;
            if (L->action != SL_ACTION_SHADOW && v->kind != SL_VERDICT_REJECT) {
                v->kind = SL_VERDICT_REJECT;
                v->store_down = 1;
                v->action = SL_ACTION_REJECT;
                v->retry_after_us = 1000000;
                snprintf(v->limit, sizeof(v->limit), "%s", L->name);
                snprintf(v->identity, sizeof(v->identity), "%s", ls->identity);
                L->rejected++;
            }
        }
        return;
    }
    lease_local(ls, sl_store_live_instances(lim->store), 1, now_us, v);
}

static void lease_on_store(void *data, int status, const int64_t *vals, int n, const char *err)
{
    struct sl_lease *ls = data;
    ls->sreq = NULL;
    struct sl_verdict v;
    memset(&v, 0, sizeof(v));
    uint64_t now_us = uv_hrtime() / 1000;
    if (status < 0 || n != 1 + 3 * ls->n) {
        if (status == 0)
            sl_log_warn_rl("store_unexpected_reply", "quota store: unexpected reply",
                           "values=%d expected=%d err=\"%s\"", n, 1 + 3 * ls->n, err ? err : "");
        lease_failed(ls, now_us, &v);
    } else {
        for (int k = 0; k < ls->n; k++) {
            struct limit *L = &ls->lim->limits[ls->idx[k]];
            const int64_t *r = vals + 1 + 3 * k;
            if (L->action == SL_ACTION_SHADOW) {
                if (vals[0] != 0 && r[0] == 0)
                    L->shadow_hits++;
                continue;
            }
            if (r[0] == 0) {
                struct sl_algo_result res = { .retry_after_us = 1000000 };
                sl_lim_deny(&v, L, ls->identity, &res);
            }
        }
        if (vals[0] != 0) {
            memset(&v, 0, sizeof(v));
            ls->remote = 1;
            if (ls->list == NULL)
                lease_link(&held_leases, ls);
        } else if (v.kind != SL_VERDICT_REJECT) {
            v.kind = SL_VERDICT_REJECT; /* not expected: refuse, naming the first limit */
            snprintf(v.limit, sizeof(v.limit), "%s", ls->lim->limits[ls->idx[0]].name);
            snprintf(v.identity, sizeof(v.identity), "%s", ls->identity);
        }
        lease_verdict_done(ls, &v, now_us);
    }
    if (ls->cb)
        ls->cb(ls->data, &v);
}

int sl_lease_acquire(struct sl_lease *ls, uint64_t now_us, struct sl_verdict *v,
                     sl_limiter_cb *cb, void *data)
{
    memset(v, 0, sizeof(*v));
    struct sl_limiter *lim = ls->lim;
    if (ls->sreq != NULL)
        return 1; /* already asking */
    if (lim->store == NULL) {
        lease_local(ls, 1, 0, now_us, v);
        return 0;
    }
    if (!sl_store_up(lim->store)) {
        lease_failed(ls, now_us, v);
        return 0;
    }
    char keybuf[MAX_CONN_LIMITS][KEY_MAX];
    char nums[MAX_CONN_LIMITS][24], lease[24];
    struct sl_str keys[MAX_CONN_LIMITS], args[5 + 2 * MAX_CONN_LIMITS];
    int na = 0;
    args[na++] = (struct sl_str){ "acquire", 7 };
    args[na++] = (struct sl_str){ "-1", 2 };
    args[na].p = lease;
    args[na++].len = (size_t)snprintf(lease, sizeof(lease), "%" PRIu64, lim->lease_ms);
    args[na++] = (struct sl_str){ ls->member, strlen(ls->member) };
    args[na++] = (struct sl_str){ ls->queue ? "1" : "0", 1 };
    for (int k = 0; k < ls->n; k++) {
        const struct limit *L = &lim->limits[ls->idx[k]];
        keys[k] = sl_lim_store_key(lim, L, ls->identity, keybuf[k], sizeof(keybuf[k]));
        args[na].p = nums[k];
        args[na++].len = (size_t)snprintf(nums[k], sizeof(nums[k]), "%" PRIu64, L->max);
        args[na++] = (struct sl_str){ L->action == SL_ACTION_SHADOW ? "1" : "0", 1 };
    }
    ls->cb = cb;
    ls->data = data;
    ls->sreq = sl_store_eval(lim->store, SL_SCRIPT_CONNECTIONS, ls->n, keys, na, args,
                             lease_on_store, ls);
    if (ls->sreq == NULL) {
        lease_failed(ls, now_us, v);
        return 0;
    }
    return 1;
}

static void ignore_reply(void *data, int status, const int64_t *vals, int n, const char *err)
{
    (void)data, (void)status, (void)vals, (void)n, (void)err;
}

/* Gives back the store places of <ls> (and any queue entry). */
static void lease_release_remote(struct sl_lease *ls)
{
    struct sl_limiter *lim = ls->lim;
    if (lim->store == NULL || !sl_store_up(lim->store))
        return; /* the places expire with the lease */
    char keybuf[MAX_CONN_LIMITS][KEY_MAX];
    struct sl_str keys[MAX_CONN_LIMITS];
    for (int k = 0; k < ls->n; k++)
        keys[k] = sl_lim_store_key(lim, &lim->limits[ls->idx[k]], ls->identity, keybuf[k], KEY_MAX);
    char lease[24];
    struct sl_str args[4] = { { "release", 7 }, { "-1", 2 }, { lease, 0 },
                              { ls->member, strlen(ls->member) } };
    args[2].len = (size_t)snprintf(lease, sizeof(lease), "%" PRIu64, lim->lease_ms);
    sl_store_eval(lim->store, SL_SCRIPT_CONNECTIONS, ls->n, keys, 4, args, ignore_reply, NULL);
}

void sl_lease_gave_up(struct sl_lease *ls, const struct sl_verdict *v)
{
    if (ls == NULL || v->action != SL_ACTION_DELAY || v->store_down)
        return;
    for (int k = 0; k < ls->n; k++) {
        struct limit *L = &ls->lim->limits[ls->idx[k]];
        if (L->action == SL_ACTION_DELAY && strcmp(v->limit, L->name) == 0) {
            L->rejected++;
            return;
        }
    }
}

void sl_lease_free(struct sl_lease *ls)
{
    if (ls == NULL)
        return;
    if (ls->sreq != NULL) {
        sl_store_cancel(ls->sreq);
        ls->remote = 1; /* it may have been admitted on the way: release anyway */
    }
    if (ls->remote || (ls->queue && ls->lim->store != NULL))
        lease_release_remote(ls);
    for (int k = 0; k < ls->n; k++) {
        if (!ls->counted[k])
            continue;
        struct limit *L = &ls->lim->limits[ls->idx[k]];
        const char *id = lease_id(ls, k);
        /* a count held is never evicted; look, never make one */
        struct bucket *b = (struct bucket *)sl_idt_peek(&L->buckets, id, strlen(id));
        if (b != NULL && b->st.a > 0 && --b->st.a == 0)
            sl_lim_bucket_drop(L, b);
    }
    lease_unlink(ls);
    sl_limiter_release(ls->lim);
    free(ls);
}

/* Renews every store place this process holds, in one call. */
void sl_lim_conns_renew(struct sl_limiter *lim, uint64_t now_us)
{
    if (held_leases == NULL || lim->store == NULL || !sl_store_up(lim->store))
        return;
    if (now_us - last_renew_us < lim->lease_ms * 1000 / 3)
        return;
    last_renew_us = now_us;
    int nk = 0, na = 0;
    for (struct sl_lease *ls = held_leases; ls; ls = ls->next)
        nk += ls->n;
    struct sl_str *keys = calloc((size_t)nk, sizeof(*keys));
    struct sl_str *args = calloc((size_t)(3 + 2 * nk), sizeof(*args));
    char *kb = malloc((size_t)nk * KEY_MAX);
    if (keys == NULL || args == NULL || kb == NULL)
        goto out;
    char lease[24];
    args[na++] = (struct sl_str){ "renew", 5 };
    args[na++] = (struct sl_str){ "-1", 2 };
    args[na].p = lease;
    args[na++].len = (size_t)snprintf(lease, sizeof(lease), "%" PRIu64, lim->lease_ms);
    int k = 0;
    for (struct sl_lease *ls = held_leases; ls; ls = ls->next) {
        for (int j = 0; j < ls->n; j++, k++) {
            keys[k] = sl_lim_store_key(ls->lim, &ls->lim->limits[ls->idx[j]], ls->identity,
                                       kb + (size_t)k * KEY_MAX, KEY_MAX);
            args[na++] = (struct sl_str){ "1", 1 };
            args[na++] = (struct sl_str){ ls->member, strlen(ls->member) };
        }
    }
    sl_store_eval(lim->store, SL_SCRIPT_CONNECTIONS, nk, keys, na, args, ignore_reply, NULL);
out:
    free(keys);
    free(args);
    free(kb);
}

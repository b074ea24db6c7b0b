/* sluice — connection places and the login queue (metric = connections).
 *
 *   accept --> sl_place_new       the connection limits it meets (listener,
 *                 |               match_identity, tiers); none: NULL
 *                 v
 *        sl_place_acquire --+-- url = local ----> place_local: count < max, all
 *                 |         |                     or nothing; a delay limit queues
 *                 |         |                     in <queued>, arrival order
 *                 |         +-- store down -----> place_failed: on_failure open,
 *                 |         |                     closed, or local (max / live)
 *                 |         '-- store ----------> connections.lua acquire
 *                 |                                 --> place_on_store
 *                 |   allowed in the store: on <held>, renewed in one
 *                 |   batched call every connection_lease / 3
 *                 |   (sl_lim_places_renew, at sweep)
 *                 |   refused by a delay limit: the session asks again later,
 *                 |   keeping its place in the queue (sl_place_gave_up at max_delay)
 *                 v
 *   close  --> sl_place_free      places given back: store release, local count */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "identity/identity.h"
#include "limit/buckets.h"
#include "limit/idcount.h"
#include "limit/limiter-i.h"
#include "limit/limiter.h"
#include "limit/match.h"
#include "limit/places.h"
#include "limit/remote.h"
#include "limit/stats.h"
#include "limit/verdict.h"
#include "store/store.h"

/* A connection's places under the connection limits of its listener.
 * Counted in the store (lua/connections.lua: a ZSET of holders per limit
 * and identity, each with an expiry this instance renews in one batched
 * call every connection_lease / 3), or in process (url = local, or
 * on_failure = local while the store is down: max / live instances).
 * Queued places (action = delay) wait in arrival order: in the store's
 * queue, and in process in the process's <queued> list. */
struct sl_place {
    struct sl_place   *prev, *next;   /* in held (store) or queued (in process) */
    struct sl_place  **list;          /* which of those, or NULL */
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

/* The connection places of a process: shared by the limiters a reload
 * makes, so places taken under an old configuration are still renewed
 * and the login queue keeps its order across a reload. */
struct sl_places {
    struct sl_place *held;      /* places held in the store (renewed) */
    struct sl_place *queued;    /* in-process login queue, arrival order */
    uint64_t         last_renew_us;
};

struct sl_places *sl_places_new(void)
{
    return calloc(1, sizeof(struct sl_places));
}

void sl_places_free(struct sl_places *ps)
{
    free(ps); /* the places themselves belong to their connections */
}

static void place_link(struct sl_place **list, struct sl_place *pl)
{
    pl->list = list;
    pl->prev = NULL;
    if (*list == NULL) {
        pl->next = NULL;
        *list = pl;
        return;
    }
    struct sl_place *t = *list; /* append: arrival order */
    while (t->next)
        t = t->next;
    t->next = pl;
    pl->prev = t;
    pl->next = NULL;
}

static void place_unlink(struct sl_place *pl)
{
    if (pl->list == NULL)
        return;
    if (pl->prev)
        pl->prev->next = pl->next;
    else
        *pl->list = pl->next;
    if (pl->next)
        pl->next->prev = pl->prev;
    pl->prev = pl->next = NULL;
    pl->list = NULL;
}

static const char *place_id(const struct sl_place *pl, int k)
{
    return pl->lim->limits[pl->idx[k]].scope == SL_SCOPE_GLOBAL ? "*" : pl->identity;
}

struct sl_place *sl_place_new(struct sl_limiter *lim, const struct sl_listener_conf *lc,
                              const struct sl_ident_state *ident, uint64_t conn_id)
{
    if (lim == NULL)
        return NULL;
    int *cand = lim->cand, nc = 0;
    for (int i = 0; i < lim->n; i++)
        if (sl_lim_applies(&lim->limits[i], lc, SL_METRIC_CONNECTIONS))
            cand[nc++] = i;
    if (nc == 0)
        return NULL;
    struct sl_place *pl = calloc(1, sizeof(*pl));
    if (pl == NULL) {
        sl_lim_uncounted(UNCOUNTED_NO_MEMORY, "connection"); /* let it in, but say so */
        return NULL;
    }
    sl_identity_of(lc, ident, NULL, pl->identity);
    uint8_t *keep = lim->keep;
    for (int c = 0; c < nc; c++)
        keep[c] = (uint8_t)sl_lim_identity_matches(&lim->limits[cand[c]], pl->identity);
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
        if (pl->n == MAX_CONN_LIMITS) { /* sl_limiter_validate() refuses such files */
            sl_lim_uncounted(UNCOUNTED_TOO_MANY, "connection");
            break;
        }
        pl->idx[pl->n++] = cand[c];
    }
    if (pl->n == 0) {
        free(pl);
        return NULL;
    }
    for (int k = 0; k < pl->n; k++)
        pl->queue |= lim->limits[pl->idx[k]].action == SL_ACTION_DELAY;
    pl->lim = lim;
    lim->refs++;
    pl->asked_us = sl_clock_us(lim->clock);
    snprintf(pl->member, sizeof(pl->member), "%s:%" PRIu64,
             lim->store ? sl_store_instance_id(lim->store) : "local", conn_id);
    return pl;
}

/* Another queued connection ahead of <pl> waits for one of its limits. */
static int someone_ahead(const struct sl_place *pl)
{
    for (const struct sl_place *o = pl->lim->places->queued; o != NULL && o != pl; o = o->next) {
        if (o->lim != pl->lim)
            continue;
        for (int a = 0; a < o->n; a++)
            for (int b = 0; b < pl->n; b++)
                if (o->idx[a] == pl->idx[b] && strcmp(place_id(o, a), place_id(pl, b)) == 0 &&
                    pl->lim->limits[pl->idx[b]].action != SL_ACTION_SHADOW)
                    return 1;
    }
    return 0;
}

static struct bucket *place_bucket(struct sl_place *pl, int k, uint64_t now_us)
{
    struct limit *L = &pl->lim->limits[pl->idx[k]];
    const char *id = place_id(pl, k);
    return sl_lim_bucket_get(L, id, strlen(id), now_us / 1000);
}

static void place_verdict_done(struct sl_place *pl, struct sl_verdict *v, uint64_t now_us)
{
    if (v->kind == SL_VERDICT_REJECT)
        pl->waited = 1;
    for (int k = 0; k < pl->n; k++) {
        struct limit *L = &pl->lim->limits[pl->idx[k]];
        if (v->kind == SL_VERDICT_ALLOW)
            sl_lim_idc_add(L, pl->identity, SL_LIM_CONNECTIONS, 1, now_us / 1000);
        else if (strcmp(v->limit, L->name) == 0 && L->action == SL_ACTION_REJECT)
            sl_lim_idc_add(L, pl->identity, SL_LIM_REJECTED, 1, now_us / 1000);
        if (L->action == SL_ACTION_SHADOW)
            continue;
        if (v->kind == SL_VERDICT_ALLOW) {
            L->s->allowed++;
            if (L->action == SL_ACTION_DELAY && pl->waited && now_us > pl->asked_us) {
                L->s->delayed++;
                sl_lim_hist_add(&L->s->delay, now_us - pl->asked_us);
            }
        } else if (strcmp(v->limit, L->name) == 0 && L->action == SL_ACTION_REJECT) {
            L->s->rejected++;
        }
    }
}

/* In process: all or nothing over the limits, at max / <share>. */
static void place_local(struct sl_place *pl, uint64_t share, int fallback, uint64_t now_us,
                        struct sl_verdict *v)
{
    int ok = !(pl->queue && someone_ahead(pl));
    for (int k = 0; k < pl->n && ok; k++) {
        struct limit *L = &pl->lim->limits[pl->idx[k]];
        if (L->action == SL_ACTION_SHADOW)
            continue;
        struct bucket *b = place_bucket(pl, k, now_us);
        uint64_t max = L->max / share ? L->max / share : 1;
        if (b != NULL && b->st.a >= max) {
            ok = 0;
            struct sl_algo_result res = { .retry_after_us = 1000000 };
            sl_lim_deny(v, L, &L->p, pl->identity, &res);
        }
    }
    if (!ok && v->kind != SL_VERDICT_REJECT) {
        /* someone is ahead in the queue: name the first delay limit */
        for (int k = 0; k < pl->n; k++) {
            struct limit *L = &pl->lim->limits[pl->idx[k]];
            if (L->action == SL_ACTION_DELAY) {
                struct sl_algo_result res = { .retry_after_us = 1000000 };
                sl_lim_deny(v, L, &L->p, pl->identity, &res);
                break;
            }
        }
    }
    for (int k = 0; k < pl->n; k++) {
        struct limit *L = &pl->lim->limits[pl->idx[k]];
        if (fallback)
            L->s->fallback++;
        struct bucket *b = place_bucket(pl, k, now_us);
        if (b == NULL) {
            if (ok)
                sl_lim_uncounted(UNCOUNTED_NO_MEMORY, "connection");
            continue;
        }
        uint64_t max = L->max / share ? L->max / share : 1;
        if (L->action == SL_ACTION_SHADOW) {
            if (!ok)
                continue;
            sl_lim_shadow_outcome(L, pl->identity, b->st.a < max, UINT64_MAX);
        } else if (!ok) {
            continue;
        }
        b->st.a++;
        pl->counted[k] = 1;
    }
    if (ok && pl->list == &pl->lim->places->queued)
        place_unlink(pl);
    else if (!ok && pl->queue && pl->list == NULL)
        place_link(&pl->lim->places->queued, pl);
    place_verdict_done(pl, v, now_us);
}

/* Store down: on_failure. */
static void place_failed(struct sl_place *pl, uint64_t now_us, struct sl_verdict *v)
{
    struct sl_limiter *lim = pl->lim;
    if (lim->on_failure == SL_FAIL_OPEN) {
        for (int k = 0; k < pl->n; k++)
            lim->limits[pl->idx[k]].s->fallback++;
        return;
    }
    if (lim->on_failure == SL_FAIL_CLOSED) {
        for (int k = 0; k < pl->n; k++) {
            struct limit *L = &lim->limits[pl->idx[k]];
            L->s->fallback++;
            if (L->action != SL_ACTION_SHADOW && v->kind != SL_VERDICT_REJECT) {
                v->kind = SL_VERDICT_REJECT;
                v->store_down = 1;
                v->action = SL_ACTION_REJECT;
                v->retry_after_us = 1000000;
                snprintf(v->limit, sizeof(v->limit), "%s", L->name);
                snprintf(v->identity, sizeof(v->identity), "%s", pl->identity);
                L->s->rejected++;
            }
        }
        return;
    }
    place_local(pl, sl_store_live_instances(lim->store), 1, now_us, v);
}

static void place_on_store(void *data, int status, const int64_t *vals, int n, const char *err)
{
    struct sl_place *pl = data;
    pl->sreq = NULL;
    struct sl_verdict v;
    memset(&v, 0, sizeof(v));
    uint64_t now_us = sl_clock_us(pl->lim->clock);
    if (status < 0 || n != 1 + 3 * pl->n) {
        if (status == 0)
            sl_log_warn_rl("store_unexpected_reply", "quota store: unexpected reply",
                           "values=%d expected=%d err=\"%s\"", n, 1 + 3 * pl->n, err ? err : "");
        place_failed(pl, now_us, &v);
    } else {
        for (int k = 0; k < pl->n; k++) {
            struct limit *L = &pl->lim->limits[pl->idx[k]];
            const int64_t *r = vals + 1 + 3 * k;
            if (L->action == SL_ACTION_SHADOW) {
                if (vals[0] != 0)
                    sl_lim_shadow_outcome(L, pl->identity, r[0] != 0, UINT64_MAX);
                continue;
            }
            if (r[0] == 0) {
                struct sl_algo_result res = { .retry_after_us = 1000000 };
                sl_lim_deny(&v, L, &L->p, pl->identity, &res);
            }
        }
        if (vals[0] != 0) {
            memset(&v, 0, sizeof(v));
            pl->remote = 1;
            if (pl->list == NULL)
                place_link(&pl->lim->places->held, pl);
        } else if (v.kind != SL_VERDICT_REJECT) {
            v.kind = SL_VERDICT_REJECT; /* not expected: refuse, naming the first limit */
            snprintf(v.limit, sizeof(v.limit), "%s", pl->lim->limits[pl->idx[0]].name);
            snprintf(v.identity, sizeof(v.identity), "%s", pl->identity);
        }
        place_verdict_done(pl, &v, now_us);
    }
    if (pl->cb)
        pl->cb(pl->data, &v);
}

int sl_place_acquire(struct sl_place *pl, struct sl_verdict *v, sl_limiter_cb *cb, void *data)
{
    memset(v, 0, sizeof(*v));
    struct sl_limiter *lim = pl->lim;
    uint64_t now_us = sl_clock_us(lim->clock);
    if (pl->sreq != NULL)
        return 1; /* already asking */
    if (lim->store == NULL) {
        place_local(pl, 1, 0, now_us, v);
        return 0;
    }
    if (!sl_store_up(lim->store)) {
        place_failed(pl, now_us, v);
        return 0;
    }
    char keybuf[MAX_CONN_LIMITS][KEY_MAX];
    char nums[MAX_CONN_LIMITS][24], ttl[24];
    struct sl_str keys[MAX_CONN_LIMITS], args[5 + 2 * MAX_CONN_LIMITS];
    int na = 0;
    args[na++] = (struct sl_str){ "acquire", 7 };
    args[na++] = (struct sl_str){ "-1", 2 };
    args[na].p = ttl;
    args[na++].len = (size_t)snprintf(ttl, sizeof(ttl), "%" PRIu64, lim->place_ttl_ms);
    args[na++] = (struct sl_str){ pl->member, strlen(pl->member) };
    args[na++] = (struct sl_str){ pl->queue ? "1" : "0", 1 };
    for (int k = 0; k < pl->n; k++) {
        const struct limit *L = &lim->limits[pl->idx[k]];
        keys[k] = sl_lim_store_key(lim, L, pl->identity, keybuf[k], sizeof(keybuf[k]));
        args[na].p = nums[k];
        args[na++].len = (size_t)snprintf(nums[k], sizeof(nums[k]), "%" PRIu64, L->max);
        args[na++] = (struct sl_str){ L->action == SL_ACTION_SHADOW ? "1" : "0", 1 };
    }
    pl->cb = cb;
    pl->data = data;
    pl->sreq = sl_store_eval(lim->store, SL_SCRIPT_CONNECTIONS, pl->n, keys, na, args,
                             place_on_store, pl);
    if (pl->sreq == NULL) {
        place_failed(pl, now_us, v);
        return 0;
    }
    return 1;
}

static void ignore_reply(void *data, int status, const int64_t *vals, int n, const char *err)
{
    (void)data, (void)status, (void)vals, (void)n, (void)err;
}

/* Gives back the store places of <pl> (and any queue entry). */
static void place_release_remote(struct sl_place *pl)
{
    struct sl_limiter *lim = pl->lim;
    if (lim->store == NULL || !sl_store_up(lim->store))
        return; /* the places expire unrenewed */
    char keybuf[MAX_CONN_LIMITS][KEY_MAX];
    struct sl_str keys[MAX_CONN_LIMITS];
    for (int k = 0; k < pl->n; k++)
        keys[k] = sl_lim_store_key(lim, &lim->limits[pl->idx[k]], pl->identity, keybuf[k], KEY_MAX);
    char ttl[24];
    struct sl_str args[4] = { { "release", 7 }, { "-1", 2 }, { ttl, 0 },
                              { pl->member, strlen(pl->member) } };
    args[2].len = (size_t)snprintf(ttl, sizeof(ttl), "%" PRIu64, lim->place_ttl_ms);
    sl_store_eval(lim->store, SL_SCRIPT_CONNECTIONS, pl->n, keys, 4, args, ignore_reply, NULL);
}

void sl_place_gave_up(struct sl_place *pl, const struct sl_verdict *v)
{
    if (pl == NULL || v->action != SL_ACTION_DELAY || v->store_down)
        return;
    for (int k = 0; k < pl->n; k++) {
        struct limit *L = &pl->lim->limits[pl->idx[k]];
        if (L->action == SL_ACTION_DELAY && strcmp(v->limit, L->name) == 0) {
            L->s->rejected++;
            return;
        }
    }
}

void sl_place_free(struct sl_place *pl)
{
    if (pl == NULL)
        return;
    if (pl->sreq != NULL) {
        sl_store_cancel(pl->sreq);
        pl->remote = 1; /* it may have been admitted on the way: release anyway */
    }
    if (pl->remote || (pl->queue && pl->lim->store != NULL))
        place_release_remote(pl);
    for (int k = 0; k < pl->n; k++) {
        if (!pl->counted[k])
            continue;
        struct limit *L = &pl->lim->limits[pl->idx[k]];
        const char *id = place_id(pl, k);
        /* a count held is never evicted; look, never make one */
        struct bucket *b = (struct bucket *)sl_idt_peek(&L->s->buckets, id, strlen(id));
        if (b != NULL && b->st.a > 0 && --b->st.a == 0)
            sl_lim_bucket_drop(L, b);
    }
    place_unlink(pl);
    sl_limiter_release(pl->lim);
    free(pl);
}

/* Renews every store place this process holds, in one call. */
void sl_lim_places_renew(struct sl_limiter *lim)
{
    struct sl_places *ps = lim->places;
    uint64_t now_us = sl_clock_us(lim->clock);
    if (ps->held == NULL || lim->store == NULL || !sl_store_up(lim->store))
        return;
    if (now_us - ps->last_renew_us < lim->place_ttl_ms * 1000 / 3)
        return;
    ps->last_renew_us = now_us;
    int nk = 0, na = 0;
    for (struct sl_place *pl = ps->held; pl; pl = pl->next)
        nk += pl->n;
    struct sl_str *keys = calloc((size_t)nk, sizeof(*keys));
    struct sl_str *args = calloc((size_t)(3 + 2 * nk), sizeof(*args));
    char *kb = malloc((size_t)nk * KEY_MAX);
    if (keys == NULL || args == NULL || kb == NULL)
        goto out;
    char ttl[24];
    args[na++] = (struct sl_str){ "renew", 5 };
    args[na++] = (struct sl_str){ "-1", 2 };
    args[na].p = ttl;
    args[na++].len = (size_t)snprintf(ttl, sizeof(ttl), "%" PRIu64, lim->place_ttl_ms);
    int k = 0;
    for (struct sl_place *pl = ps->held; pl; pl = pl->next) {
        for (int j = 0; j < pl->n; j++, k++) {
            keys[k] = sl_lim_store_key(pl->lim, &pl->lim->limits[pl->idx[j]], pl->identity,
                                       kb + (size_t)k * KEY_MAX, KEY_MAX);
            args[na++] = (struct sl_str){ "1", 1 };
            args[na++] = (struct sl_str){ pl->member, strlen(pl->member) };
        }
    }
    sl_store_eval(lim->store, SL_SCRIPT_CONNECTIONS, nk, keys, na, args, ignore_reply, NULL);
out:
    free(keys);
    free(args);
    free(kb);
}

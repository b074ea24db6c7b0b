/* sluice — the limits API's side in the limiter: every limit listed, one
 * identity looked up or reset, the identities counted most (limiter.h).
 *
 *   sl_limiter_look(lim, idx, identity)
 *     in process (url = local, scope = connection) --> its bucket peeked
 *                                                      (none: full), at once
 *     store-backed --> [overrides = store: HGET its override] --> inspect.lua
 *                      peek (read-only: nothing taken) --> cb when it answers
 *   sl_limiter_reset(lim, idx, identity)
 *     in process: the bucket refilled, remembered refusals forgotten
 *     store-backed: inspect.lua reset (its keys deleted) --> cb
 *
 * Nothing here blocks: a store call holds a reference on the limiter
 * (a reload may come meanwhile) and answers through the store's deadline. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "admin/json.h"
#include "conf/units.h"
#include "core/err.h"
#include "limit/algo.h"
#include "limit/buckets.h"
#include "limit/idcount.h"
#include "limit/idtable.h"
#include "limit/limiter-i.h"
#include "limit/limiter.h"
#include "limit/remote.h"
#include "limit/tokens.h"
#include "store/store.h"

#define TOP_MAX 1000 /* identities GET ...?top=N lists at most */

int sl_limiter_find(const struct sl_limiter *lim, const char *name)
{
    for (int i = 0; lim != NULL && i < lim->n; i++)
        if (strcmp(lim->limits[i].name, name) == 0)
            return i;
    return -1;
}

static int store_backed(const struct sl_limiter *lim, const struct limit *L)
{
    return lim->store != NULL && L->scope != SL_SCOPE_CONNECTION;
}

uint64_t sl_limiter_forget_us(const struct sl_limiter *lim, int idx)
{
    return lim->limits[idx].trust_us;
}

int sl_limiter_store_backed(const struct sl_limiter *lim, int idx)
{
    return store_backed(lim, &lim->limits[idx]);
}

static const char *const metric_names[] = { "requests", "bytes_in", "bytes_out", "connections" };
static const char *const scope_names[] = { "identity", "connection", "global" };
static const char *const action_names[] = { "reject", "delay", "shadow" };
static const char *const count_names[SL_LIM_COUNTS] = { "requests",  "rejected",  "delayed",
                                                        "bytes_in",  "bytes_out", "connections" };


void sl_limiter_list_json(const struct sl_limiter *lim, FILE *out)
{
    fputs("{\"limits\":[", out);
    for (int i = 0; i < lim->n; i++) {
        const struct limit *L = &lim->limits[i];
        const struct lim_state *s = L->s;
        fputs(i ? ",{\"name\":" : "{\"name\":", out);
        sl_json_str(out, L->name, strlen(L->name));
        fputs(",\"listener\":", out);
        if (L->listener != NULL)
            sl_json_str(out, L->listener, strlen(L->listener));
        else
            fputs("\"*\"", out);
        fprintf(out, ",\"metric\":\"%s\",\"scope\":\"%s\",\"action\":\"%s\",\"store\":%s",
                metric_names[L->metric], scope_names[L->scope], action_names[L->action],
                store_backed(lim, L) ? "true" : "false");
        if (L->metric == SL_METRIC_CONNECTIONS) {
            fprintf(out, ",\"max\":%" PRIu64, L->max);
        } else {
            char rate[64];
            struct sl_rate r = { L->p.amount, L->p.period_us };
            sl_fmt_rate(&r, L->metric != SL_METRIC_REQUESTS, rate, sizeof(rate));
            fprintf(out, ",\"algorithm\":\"%s\",\"rate\":", sl_algo_name(L->p.algo));
            sl_json_str(out, rate, strlen(rate));
            fprintf(out, ",\"amount\":%" PRIu64 ",\"period_ms\":%" PRIu64 ",\"burst\":%" PRIu64,
                    L->p.amount, L->p.period_us / 1000, L->p.burst);
        }
        if (L->action == SL_ACTION_DELAY)
            fprintf(out, ",\"max_delay_ms\":%" PRIu64, L->max_delay_us / 1000);
        fprintf(out, ",\"overrides\":%s,\"overrides_ttl_ms\":%" PRIu64,
                L->ovr_ttl_us > 0 ? "true" : "false", L->trust_us / 1000);
        fprintf(out,
                ",\"allowed\":%" PRIu64 ",\"rejected\":%" PRIu64 ",\"shadow_rejected\":%" PRIu64
                ",\"delayed\":%" PRIu64 ",\"fallback\":%" PRIu64 ",\"leased\":%" PRIu64
                ",\"held\":%" PRIu64 ",\"local_buckets\":%zu,\"store_entries\":%zu"
                ",\"identities_counted\":%zu,\"max_identities\":%zu}",
                s->allowed, s->rejected, s->shadow_hits, s->delayed, s->fallback, s->leased,
                s->held, s->buckets.n, s->entries.n, s->ids.n, L->cap);
    }
    fputs("]}\n", out);
}

/* ---- the busiest identities -------------------------------------------- */

struct ranked {
    const struct sl_idt_node *node;
    uint64_t                  v;
};

/* Min-heap on v (then key, for a stable order) of at most n entries. */
static int less(const struct ranked *a, const struct ranked *b)
{
    if (a->v != b->v)
        return a->v < b->v;
    size_t n = a->node->len < b->node->len ? a->node->len : b->node->len;
    int c = memcmp(a->node->key, b->node->key, n);
    return c != 0 ? c > 0 : a->node->len > b->node->len;
}

static void sift_down(struct ranked *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && less(&h[l], &h[m]))
            m = l;
        if (r < n && less(&h[r], &h[m]))
            m = r;
        if (m == i)
            return;
        struct ranked t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static void sift_up(struct ranked *h, size_t i)
{
    while (i > 0 && less(&h[i], &h[(i - 1) / 2])) {
        struct ranked t = h[i];
        h[i] = h[(i - 1) / 2];
        h[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

void sl_limiter_top_json(const struct sl_limiter *lim, int idx, int by, size_t n, FILE *out)
{
    const struct limit *L = &lim->limits[idx];
    const struct sl_idt *t = &L->s->ids;
    if (n > TOP_MAX)
        n = TOP_MAX;
    struct ranked *h = n > 0 ? malloc(n * sizeof(*h)) : NULL;
    size_t k = 0;
    if (h != NULL && t->tab != NULL) {
        /* One pass over the table keeping the n largest: O(entries log n). */
        for (uint32_t j = 0; j <= t->mask; j++) {
            for (const struct sl_idt_node *e = t->tab[j]; e != NULL; e = e->next) {
                struct ranked r = { e, sl_lim_idc_counts(e)[by] };
                if (r.v == 0)
                    continue;
                if (k < n) {
                    h[k] = r;
                    sift_up(h, k++);
                } else if (less(&h[0], &r)) {
                    h[0] = r;
                    sift_down(h, k, 0);
                }
            }
        }
    }
    /* Sorted, most first: pop the heap from the back. */
    for (size_t m = k; m > 1; m--) {
        struct ranked tmp = h[0];
        h[0] = h[m - 1];
        h[m - 1] = tmp;
        sift_down(h, m - 1, 0);
    }
    fputs("{\"limit\":", out);
    sl_json_str(out, L->name, strlen(L->name));
    fprintf(out, ",\"by\":\"%s\",\"identities_counted\":%zu,\"identities\":[", count_names[by],
            t->n);
    for (size_t i = 0; i < k; i++) {
        const struct sl_idt_node *e = h[i].node;
        const uint64_t *cnt = sl_lim_idc_counts(e);
        fputs(i ? ",{\"identity\":" : "{\"identity\":", out);
        sl_json_str(out, e->key, e->len);
        for (int c = 0; c < SL_LIM_COUNTS; c++)
            fprintf(out, ",\"%s\":%" PRIu64, count_names[c], cnt[c]);
        fputc('}', out);
    }
    fputs("]}\n", out);
    free(h);
}

/* ---- one identity ------------------------------------------------------ */

struct look {
    struct sl_limiter  *lim;       /* referenced until answered */
    int                 idx;
    sl_lim_look_cb     *cb;
    void               *data;
    struct sl_lim_look  r;
    struct sl_algo_params p;       /* the numbers to read the bucket under */
    char                identity[SL_ID_MAX + 1];
    char                key[SL_ID_MAX + 1];
};

static void look_done(struct look *lk)
{
    lk->r.limit = lk->lim->limits[lk->idx].name;
    lk->r.identity = lk->identity;
    lk->r.key = lk->key;
    lk->cb(lk->data, &lk->r);
    sl_limiter_release(lk->lim);
    free(lk);
}

static void look_numbers(struct look *lk)
{
    lk->r.algo = (uint8_t)lk->p.algo;
    lk->r.amount = lk->p.amount;
    lk->r.period_us = lk->p.period_us;
    lk->r.burst = lk->p.burst;
}

/* In process: the bucket as this process holds it, peeked (a full one when
 * there is none). */
static void look_local(struct look *lk)
{
    struct limit *L = &lk->lim->limits[lk->idx];
    uint64_t now = sl_clock_us(lk->lim->clock);
    const struct bucket *b =
        (const struct bucket *)sl_idt_peek(&L->s->buckets, lk->key, strlen(lk->key));
    lk->r.known = b != NULL;
    if (L->metric == SL_METRIC_CONNECTIONS) {
        uint64_t held = b != NULL ? b->st.a : 0;
        lk->r.remaining = held < L->max ? L->max - held : 0;
        lk->r.retry_us = held < L->max ? 0 : -1;
        return;
    }
    struct sl_algo_params p = lk->p;
    if (b != NULL && b->at.amount != 0)
        p = b->at; /* the numbers it holds its state under */
    p.max_wait_us = 0; /* a wait is a retry here, not a reservation */
    if (b == NULL || !b->st.init) {
        lk->r.remaining = sl_lim_capacity_of(&p);
        return;
    }
    struct sl_algo_state st = b->st; /* peeks change nothing; a copy keeps it so */
    struct sl_algo_result r0, r1;
    if (sl_algo_take(&st, &p, now, 0, 0, &r0) < 0 || sl_algo_take(&st, &p, now, 1, 0, &r1) < 0) {
        lk->r.remaining = sl_lim_capacity_of(&p);
        return;
    }
    lk->r.remaining = r0.remaining;
    lk->r.reset_us = r0.reset_us;
    lk->r.retry_us = r1.allowed ? 0
                     : r1.retry_after_us == UINT64_MAX ? -1
                                                        : (int64_t)r1.retry_after_us;
}

static void on_peek(void *data, int status, const int64_t *vals, int n, const char *err)
{
    struct look *lk = data;
    if (status < 0 || n != 4) {
        lk->r.status = SL_ESTORE;
        lk->r.err = status < 0 ? (err != NULL ? err : "the quota store did not answer")
                               : "unexpected reply from the quota store";
    } else {
        lk->r.fleet = 1;
        lk->r.known = vals[0] != 0;
        lk->r.remaining = vals[1] > 0 ? (uint64_t)vals[1] : 0;
        lk->r.retry_us = vals[2] < 0 ? -1 : vals[2];
        lk->r.reset_us = vals[3] > 0 ? (uint64_t)vals[3] : 0;
    }
    look_done(lk);
}

static void peek_store(struct look *lk)
{
    struct sl_limiter *lim = lk->lim;
    const struct limit *L = &lim->limits[lk->idx];
    char keybuf[KEY_MAX], nums[3][24];
    struct sl_str key = sl_lim_store_key(lim, L, lk->key, keybuf, sizeof(keybuf));
    struct sl_str args[5];
    args[0] = (struct sl_str){ "peek", 4 };
    const char *an = L->metric == SL_METRIC_CONNECTIONS ? "connections" : sl_algo_name(lk->p.algo);
    args[1] = (struct sl_str){ an, strlen(an) };
    uint64_t v[3] = { L->metric == SL_METRIC_CONNECTIONS ? L->max : lk->p.amount,
                      lk->p.period_us, lk->p.burst };
    for (int i = 0; i < 3; i++) {
        args[2 + i].p = nums[i];
        args[2 + i].len = (size_t)snprintf(nums[i], sizeof(nums[i]), "%" PRIu64, v[i]);
    }
    if (sl_store_eval(lim->store, SL_SCRIPT_INSPECT, 1, &key, 5, args, on_peek, lk) == NULL) {
        lk->r.status = SL_ESTORE;
        lk->r.err = "the quota store is down";
        look_done(lk);
    }
}

static void on_override(void *data, int status, const char *text, size_t len)
{
    struct look *lk = data;
    const struct limit *L = &lk->lim->limits[lk->idx];
    if (status < 0) {
        lk->r.status = SL_ESTORE;
        lk->r.err = "the quota store did not answer";
        look_done(lk);
        return;
    }
    if (text != NULL) {
        struct sl_rate r;
        uint64_t burst;
        const char *why = NULL;
        if (sl_parse_override(text, len, L->metric != SL_METRIC_REQUESTS, &r, &burst, &why) == 0) {
            struct sl_algo_params p = lk->p;
            p.amount = r.amount;
            p.period_us = r.period_us;
            p.burst = burst;
            if (sl_algo_check(&p, NULL) == 0) { /* else ignored, as decisions do */
                lk->p = p;
                lk->r.has_override = 1;
            }
        }
    }
    look_numbers(lk);
    peek_store(lk);
}

void sl_limiter_look(struct sl_limiter *lim, int idx, const char *identity, sl_lim_look_cb *cb,
                     void *data)
{
    struct limit *L = &lim->limits[idx];
    struct look *lk = calloc(1, sizeof(*lk));
    if (lk == NULL) {
        struct sl_lim_look r = { .status = SL_ENOMEM, .err = "out of memory" };
        r.limit = L->name;
        r.identity = r.key = identity;
        cb(data, &r);
        return;
    }
    lk->lim = lim;
    lim->refs++;
    lk->idx = idx;
    lk->cb = cb;
    lk->data = data;
    snprintf(lk->identity, sizeof(lk->identity), "%s", identity);
    snprintf(lk->key, sizeof(lk->key), "%s", L->scope == SL_SCOPE_GLOBAL ? "*" : identity);
    lk->p = L->p;
    lk->r.conn = L->metric == SL_METRIC_CONNECTIONS;
    lk->r.bytes = L->metric == SL_METRIC_BYTES_IN || L->metric == SL_METRIC_BYTES_OUT;
    lk->r.per_conn = L->scope == SL_SCOPE_CONNECTION;
    lk->r.max = L->max;
    lk->r.retry_us = 0;
    look_numbers(lk);
    sl_lim_idc_get(L, identity, lk->r.counts);
    if (lk->r.per_conn) {
        /* One bucket per connection: none stands for the identity. */
        lk->r.remaining = L->metric == SL_METRIC_CONNECTIONS ? L->max : sl_lim_capacity_of(&L->p);
        look_done(lk);
        return;
    }
    if (!store_backed(lim, L)) {
        look_local(lk);
        look_done(lk);
        return;
    }
    if (L->ovr_ttl_us > 0) {
        char key[KEY_MAX];
        int n = snprintf(key, sizeof(key), "%soverrides:{%s}", lim->key_prefix, L->name);
        struct sl_str k = { key, n > 0 && (size_t)n < sizeof(key) ? (size_t)n : 0 };
        struct sl_str f = { lk->key, strlen(lk->key) };
        if (k.len > 0 && sl_store_hget(lim->store, k, f, on_override, lk) != NULL)
            return;
        lk->r.status = SL_ESTORE;
        lk->r.err = "the quota store is down";
        look_done(lk);
        return;
    }
    peek_store(lk);
}

/* ---- reset ------------------------------------------------------------- */

struct reset {
    struct sl_limiter *lim;
    sl_lim_reset_cb   *cb;
    void              *data;
};

static void on_reset(void *data, int status, const int64_t *vals, int n, const char *err)
{
    struct reset *rs = data;
    if (status < 0 || n != 1)
        rs->cb(rs->data, SL_ESTORE, 0,
               status < 0 ? (err != NULL ? err : "the quota store did not answer")
                          : "unexpected reply from the quota store");
    else
        rs->cb(rs->data, 0, vals[0], NULL);
    sl_limiter_release(rs->lim);
    free(rs);
}

void sl_limiter_reset(struct sl_limiter *lim, int idx, const char *identity, sl_lim_reset_cb *cb,
                      void *data)
{
    struct limit *L = &lim->limits[idx];
    if (L->metric == SL_METRIC_CONNECTIONS || L->scope == SL_SCOPE_CONNECTION) {
        cb(data, SL_ECONF, 0,
           L->metric == SL_METRIC_CONNECTIONS
               ? "a connection limit counts open connections: close them to free places"
               : "scope = connection: one bucket per connection, none per identity");
        return;
    }
    const char *key = L->scope == SL_SCOPE_GLOBAL ? "*" : identity;
    /* This process: the bucket full again (reset in place: nothing holds
     * a pointer to it across turns, but it keeps its place in the table),
     * what it remembered from the store forgotten. */
    struct bucket *b = (struct bucket *)sl_idt_peek(&L->s->buckets, key, strlen(key));
    if (b != NULL) {
        sl_algo_state_free(&b->st);
        memset(&b->st, 0, sizeof(b->st));
        memset(&b->at, 0, sizeof(b->at));
        b->synced_at = 0;
    }
    sl_lim_tokens_forget(L, identity);
    if (!store_backed(lim, L)) {
        cb(data, 0, 0, NULL);
        return;
    }
    struct reset *rs = malloc(sizeof(*rs));
    if (rs == NULL) {
        cb(data, SL_ENOMEM, 0, "out of memory");
        return;
    }
    rs->lim = lim;
    rs->cb = cb;
    rs->data = data;
    lim->refs++;
    char keybuf[KEY_MAX];
    struct sl_str k = sl_lim_store_key(lim, L, key, keybuf, sizeof(keybuf));
    struct sl_str args[1] = { { "reset", 5 } };
    if (sl_store_eval(lim->store, SL_SCRIPT_INSPECT, 1, &k, 1, args, on_reset, rs) == NULL) {
        sl_limiter_release(lim);
        free(rs);
        cb(data, SL_ESTORE, 0, "the quota store is down");
    }
}

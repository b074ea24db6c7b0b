/* sluice — in-process buckets: the limiter's per-identity state here.
 *
 * Each limit keeps two bounded tables (limit/idtable.h, at most [store]
 * max_identities entries each, least recently used first), in its state
 * (L->s, shared with the limit of its name a reload makes: limit/carry.h):
 *
 *   L->s->buckets   in-process buckets, keyed by identity, "*" (global
 *                   scope) or "c:<connection>" (connection scope); for
 *                   connection limits, the count of places held
 *   L->s->entries   what the store said per identity ('\0' + identity):
 *                   leases, remembered refusals, what was left
 *
 *   sl_lim_bucket_get --> found: touched
 *                     '-> missing, table full: evict the least worth
 *                         keeping (judge_bucket / judge_entry: in use is
 *                         pinned, as good as new goes first), then make it
 *   sl_lim_bucket_numbers --> before a take: state written under numbers
 *                         the algorithm cannot read (a reload) converted
 *   sl_limiter_sweep  --> renews connection places (places.c), applies a
 *                         new max_identities, then drops what stayed idle
 *                         past the limit's TTL */
#include <stdlib.h>
#include <string.h>

#include "limit/buckets.h"
#include "limit/limiter-i.h"
#include "limit/limiter.h"
#include "limit/overrides.h"
#include "limit/places.h"
#include "limit/verdict.h"

static void bucket_free(struct bucket *b)
{
    sl_algo_state_free(&b->st);
    free(b);
}

void sl_lim_table_free(struct sl_idt *t)
{
    if (t->tab != NULL) {
        for (uint32_t j = 0; j <= t->mask; j++) {
            struct sl_idt_node *n = t->tab[j];
            while (n) {
                struct sl_idt_node *nx = n->next;
                bucket_free((struct bucket *)n);
                n = nx;
            }
        }
    }
    sl_idt_free(t);
}

/* What a bucket or entry of <L> is worth keeping at <now_us>, for the
 * eviction that keeps a table within [store] max_identities. */
struct judging {
    const struct limit *L;
    uint64_t            now_us;
};

/* The most a take can be: a full bucket or an empty window allows it. */
uint64_t sl_lim_capacity_of(const struct sl_algo_params *p)
{
    return p->algo == SL_ALGO_TOKEN_BUCKET || p->algo == SL_ALGO_GCRA ? p->burst : p->amount;
}

/* An in-process bucket: a connection count is in use while held; a bucket
 * that is full again (idle past the TTL, or a peek of all it can hold
 * would pass) is the same as a new one. */
static enum sl_idt_judgement judge_bucket(struct sl_idt_node *n, void *arg)
{
    const struct judging *j = arg;
    struct bucket *b = (struct bucket *)n;
    if (j->L->metric == SL_METRIC_CONNECTIONS)
        return b->st.a > 0 ? SL_IDT_PINNED : SL_IDT_FRESH;
    if (!b->st.init || n->lru.at + j->L->ttl_ms <= j->now_us / 1000)
        return SL_IDT_FRESH;
    /* under the numbers it was last taken under (a reload may have
     * changed the limit's since: it converts at its next take) */
    struct sl_algo_params p = b->at.amount != 0 ? b->at : j->L->p;
    p.max_wait_us = 0; /* a peek, never a reservation */
    struct sl_algo_result res;
    if (sl_algo_take(&b->st, &p, j->now_us, sl_lim_capacity_of(&p), 0, &res) == 0 && res.allowed)
        return SL_IDT_FRESH;
    return SL_IDT_KEEP;
}

/* An entry: in use while a store call answers for it or requests wait for
 * one; the same as a new one when it holds no lease tokens, no refusal
 * and no lean period, and the store's last word is full or stale. An
 * entry evicted with lease tokens loses them to this instance (the store
 * counted them: the identity is admitted less, never more). */
static enum sl_idt_judgement judge_entry(struct sl_idt_node *n, void *arg)
{
    const struct judging *j = arg;
    struct bucket *e = (struct bucket *)n;
    if (e->asking || e->waiting.head != NULL)
        return SL_IDT_PINNED;
    if (e->lease > 0 || e->deny_until > j->now_us || e->lean_until > j->now_us)
        return SL_IDT_KEEP;
    if (e->told_at != 0 && e->told_left < sl_lim_capacity_of(&j->L->p) &&
        e->told_at + j->L->ttl_ms * 1000 > j->now_us)
        return SL_IDT_KEEP;
    return SL_IDT_FRESH;
}

/* Finds or makes the bucket <key> of <L> (an entry when <key> starts with
 * '\0'), touching it at <now_ms>. A table at its cap first evicts one. */
struct bucket *sl_lim_bucket_get(struct limit *L, const char *key, size_t len, uint64_t now_ms)
{
    struct sl_idt *t = len > 0 && key[0] == '\0' ? &L->s->entries : &L->s->buckets;
    struct sl_idt_node *n = sl_idt_find(t, key, len, now_ms);
    if (n != NULL)
        return (struct bucket *)n;
    if (sl_idt_full(t)) {
        struct judging j = { L, now_ms * 1000 };
        struct sl_idt_node *v = sl_idt_victim(t, t == &L->s->entries ? judge_entry : judge_bucket, &j);
        if (v != NULL) {
            sl_idt_remove(t, v);
            t->evicted++;
            bucket_free((struct bucket *)v);
        }
    }
    struct bucket *b = calloc(1, sizeof(*b) + len + 1);
    if (b == NULL)
        return NULL;
    memcpy(b->key, key, len);
    b->node.key = b->key;
    b->node.len = (uint16_t)len;
    sl_idt_insert(t, &b->node, now_ms);
    return b;
}

void sl_lim_bucket_numbers(struct bucket *b, const struct sl_algo_params *p, uint64_t now_us)
{
    if (b->st.init && b->at.amount != 0 &&
        (b->at.algo != p->algo || b->at.period_us != p->period_us))
        (void)sl_algo_convert(&b->st, &b->at, p, now_us); /* SL_ENOMEM: new, full */
    b->at = *p;
}

/* Evicts from <t> (judged by <judge>) until it holds at most its cap. */
static void trim(struct sl_idt *t, sl_idt_judge *judge, struct judging *j)
{
    while (t->n > t->cap) {
        struct sl_idt_node *v = sl_idt_victim(t, judge, j);
        if (v == NULL)
            return; /* all in use: they go as they are let go */
        sl_idt_remove(t, v);
        t->evicted++;
        bucket_free((struct bucket *)v);
    }
}

void sl_lim_tables_fit(struct limit *L, uint64_t now_us)
{
    size_t cap = L->cap == 0 ? SIZE_MAX : L->cap;
    struct lim_state *s = L->s;
    if (s->buckets.cap == cap && s->entries.cap == cap && s->ovr.cap == cap && s->ids.cap == cap)
        return;
    /* overrides: they expire soon */
    s->buckets.cap = s->entries.cap = s->ovr.cap = s->ids.cap = cap;
    struct judging j = { L, now_us };
    trim(&s->buckets, judge_bucket, &j);
    trim(&s->entries, judge_entry, &j);
    struct sl_idt_node *n; /* counts: the least recently used go */
    while (s->ids.n > cap && (n = sl_idt_expired(&s->ids, UINT64_MAX, 0)) != NULL) {
        sl_idt_remove(&s->ids, n);
        s->ids.evicted++;
        free(n);
    }
}

void sl_lim_bucket_drop(struct limit *L, struct bucket *b)
{
    struct sl_idt *t = b->node.len > 0 && b->key[0] == '\0' ? &L->s->entries : &L->s->buckets;
    sl_idt_remove(t, &b->node);
    bucket_free(b);
}

void sl_limiter_sweep(struct sl_limiter *lim)
{
    sl_lim_places_renew(lim);
    uint64_t now_ms = sl_clock_us(lim->clock) / 1000;
    for (int i = 0; i < lim->n; i++) {
        struct limit *L = &lim->limits[i];
        sl_lim_tables_fit(L, now_ms * 1000); /* a reload changed max_identities */
        sl_lim_overrides_sweep(L, now_ms * 1000);
        sl_lim_shadow_log_flush(L, 0);
        struct sl_idt *tabs[2] = { &L->s->buckets, &L->s->entries };
        for (int t = 0; t < 2; t++) {
            struct sl_idt_node *n;
            while ((n = sl_idt_expired(tabs[t], now_ms, L->ttl_ms)) != NULL) {
                struct bucket *b = (struct bucket *)n;
                if (b->asking || b->waiting.head != NULL)
                    sl_idt_touch(tabs[t], n, now_ms); /* a lease entry in use */
                else
                    sl_lim_bucket_drop(L, b);
            }
        }
    }
}

/* sluice — per-identity counts of a limit (see idcount.h). */
#include <stdlib.h>
#include <string.h>

#include "limit/idcount.h"
#include "limit/idtable.h"
#include "limit/limiter-i.h"

struct idc {
    struct sl_idt_node node;           /* in L->s->ids (key: the identity) */
    uint64_t           n[SL_LIM_COUNTS];
    char               key[];
};

/* Every entry holds counts worth keeping: the least recently used goes. */
static enum sl_idt_judgement judge(struct sl_idt_node *n, void *arg)
{
    (void)n;
    (void)arg;
    return SL_IDT_KEEP;
}

void sl_lim_idc_add(struct limit *L, const char *identity, int field, uint64_t n, uint64_t now_ms)
{
    struct sl_idt *t = &L->s->ids;
    size_t len = strnlen(identity, SL_ID_MAX);
    struct idc *e = (struct idc *)sl_idt_find(t, identity, len, now_ms);
    if (e == NULL) {
        if (sl_idt_full(t)) {
            struct sl_idt_node *victim = sl_idt_victim(t, judge, NULL);
            if (victim != NULL) {
                sl_idt_remove(t, victim);
                t->evicted++;
                free(victim);
            }
        }
        e = calloc(1, sizeof(*e) + len + 1);
        if (e == NULL)
            return;
        memcpy(e->key, identity, len);
        e->node.key = e->key;
        e->node.len = (uint16_t)len;
        e->node.hash = sl_idt_hash(identity, len);
        sl_idt_insert(t, &e->node, now_ms);
    }
    e->n[field] += n;
}

void sl_lim_idc_get(const struct limit *L, const char *identity, uint64_t out[SL_LIM_COUNTS])
{
    const struct idc *e =
        (const struct idc *)sl_idt_peek(&L->s->ids, identity, strnlen(identity, SL_ID_MAX));
    for (int i = 0; i < SL_LIM_COUNTS; i++)
        out[i] = e != NULL ? e->n[i] : 0;
}

const uint64_t *sl_lim_idc_counts(const struct sl_idt_node *n)
{
    return ((const struct idc *)n)->n;
}

void sl_lim_idc_free(struct sl_idt *t)
{
    if (t->tab != NULL) {
        for (uint32_t j = 0; j <= t->mask; j++) {
            struct sl_idt_node *n = t->tab[j];
            while (n != NULL) {
                struct sl_idt_node *nx = n->next;
                free(n);
                n = nx;
            }
        }
    }
    sl_idt_free(t);
}

void sl_lim_count_verdict(struct sl_limiter *lim, const struct sl_limiter_req *q,
                          const struct sl_verdict *v)
{
    uint64_t now_ms = q->now_us / 1000;
    for (int k = 0; k < q->n; k++) {
        struct limit *L = &lim->limits[q->idx[k]];
        int refused = v->kind == SL_VERDICT_REJECT;
        if (q->metric == SL_METRIC_REQUESTS)
            sl_lim_idc_add(L, q->identity, SL_LIM_REQUESTS, 1, now_ms);
        else if (!refused)
            sl_lim_idc_add(L, q->identity,
                           q->metric == SL_METRIC_BYTES_IN ? SL_LIM_BYTES_IN : SL_LIM_BYTES_OUT,
                           q->cost[k], now_ms);
        if (refused && strcmp(v->limit, L->name) == 0)
            sl_lim_idc_add(L, q->identity, SL_LIM_REJECTED, 1, now_ms);
        else if (!refused && v->delay_us > 0 && L->action == SL_ACTION_DELAY)
            sl_lim_idc_add(L, q->identity, SL_LIM_DELAYED, 1, now_ms);
    }
}

void sl_lim_deliver(struct sl_limiter_req *q, const struct sl_verdict *v)
{
    sl_lim_count_verdict(q->lim, q, v);
    if (q->cb != NULL)
        q->cb(q->data, v);
}

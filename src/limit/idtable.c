/* sluice — the bounded identity table (see idtable.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "limit/idtable.h"

static struct sl_idt_node *of_lru(struct sl_tq_node *n)
{
    return n == NULL ? NULL : (struct sl_idt_node *)((char *)n - offsetof(struct sl_idt_node, lru));
}

int sl_idt_init(struct sl_idt *t, size_t cap)
{
    memset(t, 0, sizeof(*t));
    t->mask = 255;
    t->cap = cap == 0 ? SIZE_MAX : cap;
    t->tab = calloc((size_t)t->mask + 1, sizeof(*t->tab));
    return t->tab == NULL ? SL_ENOMEM : 0;
}

void sl_idt_free(struct sl_idt *t)
{
    free(t->tab);
    t->tab = NULL;
    t->n = 0;
}

uint64_t sl_idt_hash(const char *key, size_t len)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)key[i];
        h *= 1099511628211ULL;
    }
    return h;
}

struct sl_idt_node *sl_idt_peek(const struct sl_idt *t, const char *key, size_t len)
{
    if (t->tab == NULL)
        return NULL;
    uint64_t h = sl_idt_hash(key, len);
    for (struct sl_idt_node *n = t->tab[h & t->mask]; n; n = n->next)
        if (n->hash == h && n->len == len && memcmp(n->key, key, len) == 0)
            return n;
    return NULL;
}

struct sl_idt_node *sl_idt_find(struct sl_idt *t, const char *key, size_t len, uint64_t now_ms)
{
    struct sl_idt_node *n = sl_idt_peek(t, key, len);
    if (n != NULL)
        sl_tq_touch(&t->lru, &n->lru, now_ms);
    return n;
}

int sl_idt_full(const struct sl_idt *t)
{
    return t->n >= t->cap;
}

struct sl_idt_node *sl_idt_victim(struct sl_idt *t, sl_idt_judge *judge, void *arg)
{
    struct sl_idt_node *lru = NULL;
    int looked = 0;
    for (struct sl_idt_node *n = of_lru(t->lru.head); n != NULL; n = of_lru(n->lru.next)) {
        looked++;
        enum sl_idt_judgement j = judge(n, arg);
        if (j == SL_IDT_FRESH)
            return n;
        if (j == SL_IDT_KEEP && lru == NULL)
            lru = n;
        if (lru != NULL ? looked >= SL_IDT_SCAN : looked >= SL_IDT_SCAN_PINNED)
            break;
    }
    return lru;
}

static void grow(struct sl_idt *t)
{
    uint32_t nm = t->mask * 2 + 1;
    struct sl_idt_node **nt = calloc((size_t)nm + 1, sizeof(*nt));
    if (nt == NULL)
        return;
    for (uint32_t i = 0; i <= t->mask; i++) {
        struct sl_idt_node *n = t->tab[i];
        while (n) {
            struct sl_idt_node *nx = n->next;
            n->next = nt[n->hash & nm];
            nt[n->hash & nm] = n;
            n = nx;
        }
    }
    free(t->tab);
    t->tab = nt;
    t->mask = nm;
}

void sl_idt_insert(struct sl_idt *t, struct sl_idt_node *node, uint64_t now_ms)
{
    node->hash = sl_idt_hash(node->key, node->len);
    node->next = t->tab[node->hash & t->mask];
    t->tab[node->hash & t->mask] = node;
    t->n++;
    sl_tq_touch(&t->lru, &node->lru, now_ms);
    if (t->n > ((size_t)t->mask + 1) * 2)
        grow(t);
}

void sl_idt_remove(struct sl_idt *t, struct sl_idt_node *node)
{
    struct sl_idt_node **pp = &t->tab[node->hash & t->mask];
    while (*pp != NULL && *pp != node)
        pp = &(*pp)->next;
    if (*pp == NULL)
        return; /* not in this table */
    *pp = node->next;
    node->next = NULL;
    sl_tq_remove(&node->lru);
    t->n--;
}

void sl_idt_touch(struct sl_idt *t, struct sl_idt_node *node, uint64_t now_ms)
{
    sl_tq_touch(&t->lru, &node->lru, now_ms);
}

struct sl_idt_node *sl_idt_expired(const struct sl_idt *t, uint64_t now_ms, uint64_t idle_ms)
{
    return of_lru(sl_tq_expired(&t->lru, now_ms, idle_ms));
}

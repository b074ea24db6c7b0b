#include "core/tq.h"

void sl_tq_remove(struct sl_tq_node *node)
{
    struct sl_tq *q = node->q;
    if (q == NULL)
        return;
    if (node->prev) node->prev->next = node->next; else q->head = node->next;
    if (node->next) node->next->prev = node->prev; else q->tail = node->prev;
    node->prev = node->next = NULL;
    node->q = NULL;
    q->n--;
}

void sl_tq_touch(struct sl_tq *q, struct sl_tq_node *node, uint64_t now)
{
    node->at = now;
    if (node->q == q && q->tail == node)
        return; /* the common case on a busy connection: already last */
    sl_tq_remove(node);
    node->q = q;
    node->prev = q->tail;
    node->next = NULL;
    if (q->tail) q->tail->next = node; else q->head = node;
    q->tail = node;
    q->n++;
    if (q->n == 1 && q->on_first != NULL)
        q->on_first(q->arg);
}

uint64_t sl_tq_due(const struct sl_tq *q, uint64_t timeout)
{
    if (q->head == NULL)
        return UINT64_MAX;
    return q->head->at > UINT64_MAX - timeout ? UINT64_MAX : q->head->at + timeout;
}

struct sl_tq_node *sl_tq_expired(const struct sl_tq *q, uint64_t now, uint64_t timeout)
{
    struct sl_tq_node *h = q->head;
    if (h == NULL || h->at + timeout > now)
        return NULL;
    return h;
}

uint64_t sl_tq_delay(uint64_t now, uint64_t due)
{
    return due > now ? due - now : 0;
}

#include <stdlib.h>

#include "core/pool.h"

void *sl_pool_take(struct sl_pool *p)
{
    return p->n > 0 ? p->free[--p->n] : malloc(p->size);
}

void sl_pool_give(struct sl_pool *p, void *obj)
{
    if (p->free == NULL)
        p->free = malloc(p->cap * sizeof(*p->free));
    if (p->free != NULL && p->n < p->cap)
        p->free[p->n++] = obj;
    else
        free(obj);
}

void sl_pool_drain(struct sl_pool *p)
{
    while (p->n > 0)
        free(p->free[--p->n]);
    free(p->free);
    p->free = NULL;
}

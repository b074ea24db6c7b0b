#include <stdlib.h>

#include "core/buf.h"

/* Enough free chunks for a burst of busy sessions without going back to
 * malloc, few enough that an idle process gives its memory back. */
#define POOL_MAX 64

static struct sl_buf *pool;
static unsigned pooled;
static uint64_t in_use;

struct sl_buf *sl_buf_get(void)
{
    struct sl_buf *b = pool;
    if (b != NULL) {
        pool = b->next;
        pooled--;
    } else {
        b = malloc(sizeof(*b));
        if (b == NULL)
            return NULL;
    }
    b->next = NULL;
    b->refs = 1;
    b->start = b->end = 0;
    in_use++;
    return b;
}

void sl_buf_unref(struct sl_buf *b)
{
    if (--b->refs > 0)
        return;
    in_use--;
    if (pooled < POOL_MAX) {
        b->next = pool;
        pool = b;
        pooled++;
    } else {
        free(b);
    }
}

void sl_buf_pool_drain(void)
{
    while (pool != NULL) {
        struct sl_buf *b = pool;
        pool = b->next;
        free(b);
    }
    pooled = 0;
}

uint64_t sl_buf_in_use(void)
{
    return in_use;
}

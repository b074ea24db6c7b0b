/* sluice — the ring of requests waiting for their verdicts (see pend.h). */
#include <stdlib.h>
#include <string.h>

#include "core/pool.h"
#include "net/pend.h"

/* Rings are lent to sessions while requests wait: a session whose requests
 * wait for the store takes one per batch. */
static struct sl_pool ring_pool = SL_POOL_INIT(SL_PEND_MAX * sizeof(struct sl_pend), 16);

struct sl_pend *sl_pend_push(struct sl_pend_ring *r)
{
    if (r->n == SL_PEND_MAX)
        return NULL;
    if (r->e == NULL) {
        r->e = sl_pool_take(&ring_pool);
        if (r->e == NULL)
            return NULL;
        r->head = 0;
    }
    struct sl_pend *e = &r->e[(r->head + r->n) % SL_PEND_MAX];
    memset(e, 0, sizeof(*e));
    r->n++;
    return e;
}

void sl_pend_unpush(struct sl_pend_ring *r)
{
    if (r->n == 0)
        return;
    r->n--;
    struct sl_pend *e = &r->e[(r->head + r->n) % SL_PEND_MAX];
    free(e->text);
    e->text = NULL;
    free(e->note);
    e->note = NULL;
}

struct sl_pend *sl_pend_head(const struct sl_pend_ring *r)
{
    return r->n > 0 ? &r->e[r->head] : NULL;
}

void sl_pend_pop(struct sl_pend_ring *r, struct sl_pend *out)
{
    if (r->n == 0)
        return;
    *out = r->e[r->head];
    r->e[r->head].text = NULL;
    if (out->note != NULL) { /* a verdict is in: its line was written */
        free(out->note);
        r->e[r->head].note = NULL;
        out->note = NULL;
    }
    r->head = (r->head + 1) % SL_PEND_MAX;
    r->n--;
}

struct sl_pend *sl_pend_at(const struct sl_pend_ring *r, uint32_t i)
{
    return &r->e[(r->head + i) % SL_PEND_MAX];
}

uint32_t sl_pend_bytes(const struct sl_pend_ring *r)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->n; i++)
        n += r->e[(r->head + i) % SL_PEND_MAX].span;
    return n;
}

void sl_pend_release(struct sl_pend_ring *r)
{
    if (r->e != NULL && r->n == 0) {
        sl_pool_give(&ring_pool, r->e);
        r->e = NULL;
        r->head = 0;
    }
}

void sl_pend_free(struct sl_pend_ring *r)
{
    for (uint32_t i = 0; i < r->n; i++) {
        free(r->e[(r->head + i) % SL_PEND_MAX].text);
        free(r->e[(r->head + i) % SL_PEND_MAX].note);
    }
    if (r->e != NULL)
        sl_pool_give(&ring_pool, r->e);
    r->e = NULL;
    r->head = r->n = 0;
}

void sl_pend_pool_drain(void)
{
    sl_pool_drain(&ring_pool);
}

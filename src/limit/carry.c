/* sluice — what a reload carries over from the running limits (see carry.h).
 *
 *   sl_limiter_reload(conf, env, prev)
 *     for each [limit NAME]:
 *       prev has NAME, same metric and scope --> share its lim_state (refs++)
 *       prev has NAME, other metric or scope --> a new lim_state, its counters
 *                                                copied (never go back)
 *       prev has no NAME (new, renamed) ------> a new lim_state, all zero
 *   the swap: the old limiter is released; its pending decisions finish on
 *   the shared state, and the last holder frees it. */
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "limit/buckets.h"
#include "limit/carry.h"
#include "limit/idcount.h"
#include "limit/idtable.h"
#include "limit/limiter-i.h"
#include "limit/overrides.h"

static struct lim_state *state_new(size_t cap)
{
    struct lim_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->refs = 1;
    if (sl_idt_init(&s->buckets, cap) < 0 || sl_idt_init(&s->entries, cap) < 0 ||
        sl_idt_init(&s->ovr, cap) < 0 || sl_idt_init(&s->ids, cap) < 0) {
        sl_lim_state_release(s);
        return NULL;
    }
    return s;
}

void sl_lim_state_release(struct lim_state *s)
{
    if (s == NULL || --s->refs > 0)
        return;
    sl_lim_table_free(&s->buckets);
    sl_lim_table_free(&s->entries);
    sl_lim_overrides_free(s);
    sl_lim_idc_free(&s->ids);
    free(s);
}

static const struct limit *old_limit(const struct sl_limiter *prev, const char *name)
{
    for (int i = 0; prev != NULL && i < prev->n; i++)
        if (prev->limits[i].s != NULL && strcmp(prev->limits[i].name, name) == 0)
            return &prev->limits[i];
    return NULL;
}

int sl_lim_carry(struct limit *L, const struct sl_limiter *prev, size_t cap)
{
    L->cap = cap;
    const struct limit *O = old_limit(prev, L->name);
    /* Same metric and scope: the same things are counted under the same
     * keys (identity, "*", "c:<connection>"), whatever else changed. */
    if (O != NULL && O->metric == L->metric && O->scope == L->scope) {
        L->s = O->s;
        L->s->refs++;
        return 0;
    }
    if ((L->s = state_new(cap)) == NULL)
        return SL_ENOMEM;
    if (O != NULL) {
        /* Other keys, or another meaning of a bucket: the state starts
         * anew; the counters (one series per limit name) go on. */
        struct lim_state *s = L->s, *o = O->s;
        s->ovr_applied = o->ovr_applied;
        s->ovr_malformed = o->ovr_malformed;
        s->allowed = o->allowed;
        s->rejected = o->rejected;
        s->shadow_hits = o->shadow_hits;
        s->fallback = o->fallback;
        s->delayed = o->delayed;
        s->leased = o->leased;
        s->held = o->held;
        s->delay = o->delay;
        memcpy(s->top, o->top, sizeof(s->top));
        s->buckets.evicted = o->buckets.evicted;
        s->entries.evicted = o->entries.evicted;
        s->ovr.evicted = o->ovr.evicted;
        s->ids.evicted = o->ids.evicted;
    }
    return 0;
}

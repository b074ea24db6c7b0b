/* sluice — the admission queue of adaptive concurrency (see adapt.h).
 *
 * Requests over the limit wait here, one intrusive list per tier, oldest
 * first. The queue is bounded three ways: by count (queue_cap; a full
 * queue makes room by pushing out the oldest of a lower tier, else refuses
 * the newcomer), by the interval (nothing waits longer), and by the
 * standing-queue rule: once the queue has not emptied for an interval
 * (CoDel's sign that arrivals exceed what the upstream takes, not a burst),
 * the lowest tier present may wait only the target, and the queue serves
 * newest first, so the requests that go upstream are those whose clients
 * are still likely to be waiting, and the ones shed are the stale. */
#include <stddef.h>

#include "shape/adapt.h"

/* Takes <w> out; <shed>: it is refused (else served or cancelled). */
static void unlink_w(struct sl_adaptq *q, struct sl_adapt_waiter *w, int shed, uint64_t now_ns)
{
    if (shed) {
        q->last_shed_ns = now_ns;
        q->has_shed = 1;
    }
    unsigned t = w->tier;
    if (w->prev)
        w->prev->next = w->next;
    else
        q->head[t] = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        q->tail[t] = w->prev;
    w->prev = w->next = NULL;
    w->queued = 0;
    q->n--;
}

static int lowest_tier(const struct sl_adaptq *q)
{
    for (int t = 0; t < SL_ADAPT_TIERS; t++)
        if (q->head[t])
            return t;
    return -1;
}

static int highest_tier(const struct sl_adaptq *q)
{
    for (int t = SL_ADAPT_TIERS - 1; t >= 0; t--)
        if (q->head[t])
            return t;
    return -1;
}

uint64_t sl_adapt_target(const struct sl_adapt *a)
{
    if (a->p.queue_target_ns)
        return a->p.queue_target_ns;
    /* A request may wait about as long as an unloaded one takes: its total
     * stays near twice the no-load latency. Not below the floor: the
     * event loop's timers cannot shed finer than a millisecond. */
    uint64_t b = (uint64_t)a->baseline_ns;
    return b > a->p.queue_target_min_ns ? b : a->p.queue_target_min_ns;
}

/* Standing: the queue has not emptied for an interval, or it refused a
 * waiter less than an interval ago. The second half is the hysteresis:
 * shedding the oldest and serving the newest keeps a standing queue short,
 * so it empties now and then even while arrivals outrun the upstream; were
 * each of those a fresh start, the next waiters would be granted a whole
 * interval of FIFO waiting, again and again. A queue leaves the state when
 * it has had no reason to refuse anyone for an interval. */
int sl_adapt_standing(const struct sl_adapt *a, uint64_t now_ns)
{
    const struct sl_adaptq *q = &a->q;
    if (q->n == 0)
        return 0;
    return now_ns - q->busy_since_ns >= a->p.queue_interval_ns ||
           (q->has_shed && now_ns - q->last_shed_ns < a->p.queue_interval_ns);
}

int sl_adapt_enqueue(struct sl_adapt *a, struct sl_adapt_waiter *w, unsigned tier,
                     uint64_t now_ns, struct sl_adapt_waiter **evicted)
{
    struct sl_adaptq *q = &a->q;
    *evicted = NULL;
    if (tier >= SL_ADAPT_TIERS)
        tier = SL_ADAPT_TIERS - 1;
    if (q->n >= a->p.queue_cap) {
        int lo = lowest_tier(q);
        if (lo < 0 || (unsigned)lo >= tier) {
            a->n_shed[SL_ADAPT_SHED_FULL]++;
            return -1;
        }
        /* The oldest of the lowest tier: the least likely to be served. */
        struct sl_adapt_waiter *v = q->head[lo];
        unlink_w(q, v, 1, now_ns);
        a->n_shed[SL_ADAPT_SHED_EVICTED]++;
        *evicted = v;
    }
    if (q->n == 0)
        q->busy_since_ns = now_ns;
    w->tier = (uint8_t)tier;
    w->since_ns = now_ns;
    w->next = NULL;
    w->prev = q->tail[tier];
    if (q->tail[tier])
        q->tail[tier]->next = w;
    else
        q->head[tier] = w;
    q->tail[tier] = w;
    w->queued = 1;
    q->n++;
    a->n_queued++;
    return 0;
}

struct sl_adapt_waiter *sl_adapt_next(struct sl_adapt *a, uint64_t now_ns)
{
    struct sl_adaptq *q = &a->q;
    int t = highest_tier(q);
    if (t < 0 || a->inflight >= sl_adapt_limit(a))
        return NULL;
    /* Adaptive LIFO: in a standing queue the oldest are the likeliest to be
     * given up on by their clients; serve the newest, shed the oldest. */
    struct sl_adapt_waiter *w = sl_adapt_standing(a, now_ns) ? q->tail[t] : q->head[t];
    unlink_w(q, w, 0, now_ns);
    a->inflight++;
    if (a->inflight > a->win_max_inflight)
        a->win_max_inflight = a->inflight;
    a->n_admitted++;
    return w;
}

struct sl_adapt_waiter *sl_adapt_expired(struct sl_adapt *a, uint64_t now_ns,
                                         enum sl_adapt_reason *reason)
{
    struct sl_adaptq *q = &a->q;
    int lo = lowest_tier(q);
    if (lo < 0)
        return NULL;
    struct sl_adapt_waiter *w = NULL;
    enum sl_adapt_reason why = SL_ADAPT_SHED_MAXWAIT;
    /* During a probe the queue is the probe's doing (its cap is a quarter
     * of the limit): waiters wait for it, up to the interval, rather than
     * being refused at the target ("nothing is refused because of a probe") */
    if (!a->probing && sl_adapt_standing(a, now_ns) &&
        now_ns - q->head[lo]->since_ns > sl_adapt_target(a)) {
        w = q->head[lo];
        why = SL_ADAPT_SHED_STANDING;
    } else {
        for (int t = lo; t < SL_ADAPT_TIERS && !w; t++)
            if (q->head[t] && now_ns - q->head[t]->since_ns > a->p.queue_interval_ns)
                w = q->head[t];
    }
    if (!w)
        return NULL;
    unlink_w(q, w, 1, now_ns);
    a->n_shed[why]++;
    if (reason)
        *reason = why;
    return w;
}

uint64_t sl_adapt_due(const struct sl_adapt *a)
{
    const struct sl_adaptq *q = &a->q;
    int lo = lowest_tier(q);
    if (lo < 0)
        return UINT64_MAX;
    /* The lowest tier's oldest goes at the target once the queue stands
     * (at busy_since + interval at the earliest); every oldest goes at the
     * interval. Strictly after: expiry is "waited longer than". */
    uint64_t due = q->head[lo]->since_ns + sl_adapt_target(a) + 1;
    uint64_t aged = q->busy_since_ns + a->p.queue_interval_ns;
    int held = q->has_shed && due < q->last_shed_ns + a->p.queue_interval_ns;
    if (!held && due < aged)
        due = aged; /* not standing at <due>: it stands by age at <aged> */
    if (a->probing)
        due = UINT64_MAX; /* only the interval, while a probe lasts */
    for (int t = lo; t < SL_ADAPT_TIERS; t++)
        if (q->head[t] && q->head[t]->since_ns + a->p.queue_interval_ns + 1 < due)
            due = q->head[t]->since_ns + a->p.queue_interval_ns + 1;
    return due;
}

uint64_t sl_adapt_due_after(const struct sl_adapt *a, uint64_t now_ns)
{
    uint64_t due = sl_adapt_due(a);
    if (due > now_ns)
        return due;
    /* sl_adapt_due counted on the hysteresis of a refusal (standing until
     * an interval after it), and that ran out before the caller looked
     * (a timer fired late): from now on only age makes the queue stand,
     * and every waiter goes at the interval. */
    const struct sl_adaptq *q = &a->q;
    int lo = lowest_tier(q);
    due = q->busy_since_ns + a->p.queue_interval_ns;
    if (q->head[lo]->since_ns + sl_adapt_target(a) + 1 > due)
        due = q->head[lo]->since_ns + sl_adapt_target(a) + 1;
    if (a->probing)
        due = UINT64_MAX;
    for (int t = lo; t < SL_ADAPT_TIERS; t++)
        if (q->head[t] && q->head[t]->since_ns + a->p.queue_interval_ns + 1 < due)
            due = q->head[t]->since_ns + a->p.queue_interval_ns + 1;
    /* never now or before: a caller that arms a timer for it must not spin */
    return due > now_ns ? due : now_ns + 1000000;
}

void sl_adapt_cancel(struct sl_adapt *a, struct sl_adapt_waiter *w)
{
    if (w->queued)
        unlink_w(&a->q, w, 0, 0);
}

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

/* The oldest waiter of any tier, or NULL. */
static const struct sl_adapt_waiter *oldest(const struct sl_adaptq *q)
{
    const struct sl_adapt_waiter *o = NULL;
    for (int t = 0; t < SL_ADAPT_TIERS; t++)
        if (q->head[t] && (o == NULL || q->head[t]->since_ns < o->since_ns))
            o = q->head[t];
    return o;
}

/* When <o> has waited past the target (the moment it crossed it). */
static uint64_t crossing(const struct sl_adapt *a, const struct sl_adapt_waiter *o)
{
    return o->since_ns + sl_adapt_target(a) + 1;
}

/* Around every change at <now_ns> (before: <before> = 1, after: 0). The
 * oldest waiter changes only with a change, and between changes it only
 * ages. A run of waiting past the target begins at the first change that
 * sees the oldest past it, not at the moment it crossed: when the loop
 * itself stalled (a machine short of CPU stops sluice for half a second),
 * nothing was observed, and the stall is not an interval of a standing
 * queue. The run ends at a change after which the oldest is within the
 * target, or none is left. */
static void note(struct sl_adapt *a, uint64_t now_ns, int before)
{
    const struct sl_adapt_waiter *o = oldest(&a->q);
    if (before) {
        if (a->q.above_ns == 0 && o != NULL && crossing(a, o) <= now_ns)
            a->q.above_ns = now_ns;
    } else if (o == NULL || crossing(a, o) > now_ns) {
        a->q.above_ns = 0;
    }
}

/* When the run of waiting past the target began, as observed, or when an
 * observation is due to see one begin (the present oldest crosses the
 * target then: the queue's timer looks at that moment). <*seen>: the run
 * has begun. The queue is not empty. */
static uint64_t above_since(const struct sl_adapt *a, int *seen)
{
    *seen = a->q.above_ns != 0;
    return *seen ? a->q.above_ns : crossing(a, oldest(&a->q));
}

/* When the queue will stand by age: an interval into an observed run, or,
 * with none, the moment one could begin (an observation is due then). */
static uint64_t stands_at(const struct sl_adapt *a)
{
    int seen;
    uint64_t at = above_since(a, &seen);
    return seen ? at + a->p.queue_interval_ns : at;
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

/* The queue refused a waiter less than an interval ago. */
static int refusing(const struct sl_adapt *a, uint64_t now_ns)
{
    return a->q.has_shed && now_ns - a->q.last_shed_ns < a->p.queue_interval_ns;
}

/* In a standing queue, how long the lowest tier present may wait when it
 * is tier <t>: the target, times 1 + t. A higher tier is the lowest present
 * only when the lower ones are gone (shed newest-last, or served): its
 * waiters are then refused too, but later, so they keep the places the
 * others gave up (at the target itself VIPs lost about 1% when the limit
 * was small and the others' waiters briefly all gone). */
static uint64_t tier_target(const struct sl_adapt *a, int t)
{
    return sl_adapt_target(a) * (uint64_t)(1 + t);
}

/* Standing: its oldest waiter has been past the target for an interval
 * without a break, or it refused a waiter less than an interval ago.
 *
 * The first half is CoDel's (the least sojourn over an interval above the
 * target), not "not empty for an interval": a queue that a fixed number of
 * clients keep busy (each waits for its answer before asking again: 50
 * connections pipelining into one Redis) never empties, yet its waits stay
 * what one round of those clients takes, and refusing them helps nobody;
 * while arrivals that outrun the upstream make every wait grow past any
 * target. The second half is the hysteresis:
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
    int seen;
    uint64_t above = above_since(a, &seen);
    return (seen && now_ns >= above && now_ns - above >= a->p.queue_interval_ns) ||
           refusing(a, now_ns);
}

int sl_adapt_enqueue(struct sl_adapt *a, struct sl_adapt_waiter *w, unsigned tier,
                     uint64_t now_ns, struct sl_adapt_waiter **evicted)
{
    struct sl_adaptq *q = &a->q;
    *evicted = NULL;
    note(a, now_ns, 1);
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
    note(a, now_ns, 0);
    return 0;
}

struct sl_adapt_waiter *sl_adapt_next(struct sl_adapt *a, uint64_t now_ns)
{
    struct sl_adaptq *q = &a->q;
    sl_adapt_tick(a, now_ns);
    int t = highest_tier(q);
    if (t < 0)
        return NULL;
    /* A fractional probe's pause holds back tier 0 only: a higher tier
     * goes when nothing is in flight (against a one-thread upstream a pause
     * is a service time or two, past a VIP's target of two baselines; two
     * instances' VIPs lost 11% of their requests, 8% without the pauses) */
    if (a->inflight >= sl_adapt_limit(a) &&
        !(t > 0 && a->probe_pause_ns != 0 && a->inflight == 0))
        return NULL;
    /* Adaptive LIFO: in a standing queue the oldest are the likeliest to be
     * given up on by their clients; serve the newest, shed the oldest. */
    note(a, now_ns, 1);
    struct sl_adapt_waiter *w = sl_adapt_standing(a, now_ns) ? q->tail[t] : q->head[t];
    unlink_w(q, w, 0, now_ns);
    note(a, now_ns, 0);
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
    note(a, now_ns, 1);
    struct sl_adapt_waiter *w = NULL;
    enum sl_adapt_reason why = SL_ADAPT_SHED_MAXWAIT;
    /* During a probe the queue is the probe's doing (its cap is a quarter
     * of the limit): waiters wait for it, up to the interval, rather than
     * being refused at the target ("nothing is refused because of a
     * probe"), unless the queue was refusing already (less than an
     * interval ago): an overload that a probe does not cause, nor should
     * it suspend. (Against a one-thread upstream a probe lasts its 64
     * replies, a third of a second at 5 ms each; its waiters waited up to
     * the interval and the admitted p99 with them.) */
    if ((!a->probing || refusing(a, now_ns)) && sl_adapt_standing(a, now_ns) &&
        now_ns - q->head[lo]->since_ns > tier_target(a, lo)) {
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
    note(a, now_ns, 0);
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
     * (an interval after the oldest crossed the target, at the earliest); every oldest goes at the
     * interval. Strictly after: expiry is "waited longer than". */
    uint64_t due = q->head[lo]->since_ns + tier_target(a, lo) + 1;
    uint64_t aged = stands_at(a);
    int held = q->has_shed && due < q->last_shed_ns + a->p.queue_interval_ns;
    if (!held && due < aged)
        due = aged; /* not standing at <due>: it stands by age at <aged> */
    if (a->probing && !held)
        due = UINT64_MAX; /* only the interval, while a probe lasts (unless refusing) */
    for (int t = lo; t < SL_ADAPT_TIERS; t++)
        if (q->head[t] && q->head[t]->since_ns + a->p.queue_interval_ns + 1 < due)
            due = q->head[t]->since_ns + a->p.queue_interval_ns + 1;
    /* the end of a fractional probe's pause: a waiter may go then */
    if (a->probe_pause_ns != 0 && a->probe_pause_ns < due)
        due = a->probe_pause_ns;
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
    due = stands_at(a);
    if (due <= now_ns) /* a run not yet observed: this look is the observation */
        due = now_ns + a->p.queue_interval_ns;
    if (q->head[lo]->since_ns + tier_target(a, lo) + 1 > due)
        due = q->head[lo]->since_ns + tier_target(a, lo) + 1;
    if (a->probing)
        due = UINT64_MAX;
    for (int t = lo; t < SL_ADAPT_TIERS; t++)
        if (q->head[t] && q->head[t]->since_ns + a->p.queue_interval_ns + 1 < due)
            due = q->head[t]->since_ns + a->p.queue_interval_ns + 1;
    if (a->probe_pause_ns > now_ns && a->probe_pause_ns < due)
        due = a->probe_pause_ns;
    /* never now or before: a caller that arms a timer for it must not spin */
    return due > now_ns ? due : now_ns + 1000000;
}

void sl_adapt_cancel(struct sl_adapt *a, struct sl_adapt_waiter *w)
{
    if (w->queued)
        unlink_w(&a->q, w, 0, 0);
}

/* sluice — adaptive concurrency: how many requests may be in flight to an
 * upstream, learned from the latency the upstream shows (docs/adaptive.md).
 *
 *   arrival ──> try_acquire ──yes──> upstream ──reply──> sample + release
 *                   │ no                          └─timeout/BUSY/5xx──> overload + release
 *                   v
 *               enqueue ──full──> refused (or a lower tier is evicted)
 *                   │
 *   release ──> next: the highest tier first; FIFO, LIFO once the queue stands
 *   timer   ──> expired: a standing queue sheds its lowest tier past the target;
 *               nothing waits past the interval
 *
 * The controller is a gradient controller (Gradient2's smoothing and floor,
 * headroom of about sqrt(limit), at most a fixed allowance once latency
 * shows queueing, latency below a millisecond not counted as queueing)
 * with a no-load baseline that live traffic keeps: the least mean latency
 * of the last two probe periods, windows and probes alike. Unloaded
 * windows confirm it; when none has for a while, a probe (at a multiple of
 * the probe period on the wall clock: instances probe together) lowers the
 * cap to a quarter (queueing the rest, refusing none unless the queue was
 * refusing already) until a few requests sent after the dip have come
 * back, and their mean joins the minimum. Instances in front of one
 * upstream may share their baselines (sl_adapt_fleet): the gradient then
 * compares with the least of them.
 *
 * Pure: no clock, no loop, no allocation; every call takes the time
 * (nanoseconds, monotonic). One controller per upstream per worker. */
#ifndef SL_SHAPE_ADAPT_H
#define SL_SHAPE_ADAPT_H

#include "shape/adapt-t.h"

/* Fills <p> with the defaults (docs/adaptive.md lists them). */
void sl_adapt_params_default(struct sl_adapt_params *p);

/* Sets up <a> with <p> (copied) at <now_ns>. Returns 0, or -1 when <p> is
 * out of range (then <a> is unusable). */
int sl_adapt_init(struct sl_adapt *a, const struct sl_adapt_params *p, uint64_t now_ns);

/* The wall clock reads <wall_ns> when the caller's clock reads <now_ns>:
 * probes start at multiples of the probe period on the wall clock, so
 * instances on different hosts (NTP) probe together. Call it at start and
 * now and then (the wall clock may be slewed or stepped); without it the
 * caller's own clock stands in. The controller never reads a clock. */
void sl_adapt_wallclock(struct sl_adapt *a, uint64_t now_ns, uint64_t wall_ns);

/* The fleet's baseline: the least no-load latency that the instances in
 * front of the same upstream published (this one's included), <fleet_ns>,
 * good until <until_ns> (when the entry it came from expires). Until then
 * the gradient compares latency with the lesser of it and this
 * controller's own baseline, so instances that share it use one reference
 * (docs/adaptive.md, "The fleet's baseline"); after it, or with <fleet_ns>
 * 0, the own baseline alone. Probes, confirmations and the queue target
 * stay on the own baseline. */
void sl_adapt_fleet(struct sl_adapt *a, double fleet_ns, uint64_t until_ns);

/* The fleet's baseline in force at <now_ns>; 0: none, or its entry expired. */
double sl_adapt_fleet_at(const struct sl_adapt *a, uint64_t now_ns);

/* The fleet's baseline lowers the reference to at most this fraction of
 * the own baseline (docs/adaptive.md, "The fleet's baseline"). */
#define SL_ADAPT_FLEET_TRUST 0.7

/* The baseline the gradient uses at <now_ns>: the fleet's while it holds
 * and is lower, else the own one (0: none yet). */
double sl_adapt_reference(const struct sl_adapt *a, uint64_t now_ns);

/* What this controller would publish as its baseline: its own, once it is
 * not a guess (a busy first window's, or the first probe's); 0: nothing. */
double sl_adapt_own_baseline(const struct sl_adapt *a);

/* A request admitted at <now_ns> - <latency_ns> got its reply: a latency
 * sample. Replies that mean overload go to sl_adapt_overload instead. */
void sl_adapt_sample(struct sl_adapt *a, uint64_t latency_ns, uint64_t now_ns);

/* A request ended in an overload signal (timeout, -BUSY / -LOADING, 5xx):
 * the window backs off; it is not a latency sample. */
void sl_adapt_overload(struct sl_adapt *a, uint64_t now_ns);

/* Time passes: a fractional probe's pause may be over (sl_adapt_next and
 * sl_adapt_try_acquire look by themselves; sl_adapt_due counts the end of
 * a pause as a deadline while requests wait). */
void sl_adapt_tick(struct sl_adapt *a, uint64_t now_ns);

/* The in-flight cap in force now (lower during a probe). */
uint32_t sl_adapt_limit(const struct sl_adapt *a);

/* The estimate itself (for metrics: fractional). */
double sl_adapt_estimate(const struct sl_adapt *a);

/* May a new request go upstream now? 1: yes, and it counts as in flight
 * until sl_adapt_release; 0: no (queue it). Never jumps waiters. */
int sl_adapt_try_acquire(struct sl_adapt *a, uint64_t now_ns);

/* An admitted request is over (after its sample or overload, or dropped). */
void sl_adapt_release(struct sl_adapt *a, uint64_t now_ns);

/* ---- the admission queue (adaptq.c) ---- */

/* Queues <w> in <tier> at <now_ns>. Returns 0 (queued) or -1 (refused: the
 * queue is full of tiers at least as high; counted). When a lower tier had
 * to make room, *<evicted> is the waiter pushed out (refuse it; counted),
 * else NULL. */
int sl_adapt_enqueue(struct sl_adapt *a, struct sl_adapt_waiter *w, unsigned tier,
                     uint64_t now_ns, struct sl_adapt_waiter **evicted);

/* The next waiter to send upstream now (out of the queue, counted in
 * flight), or NULL when none waits or the cap is reached. Call it after a
 * release or a sample until it returns NULL. */
struct sl_adapt_waiter *sl_adapt_next(struct sl_adapt *a, uint64_t now_ns);

/* One waiter that must be refused now (out of the queue, counted by
 * reason in *<reason> when not NULL), or NULL. Call until NULL. */
struct sl_adapt_waiter *sl_adapt_expired(struct sl_adapt *a, uint64_t now_ns,
                                         enum sl_adapt_reason *reason);

/* When sl_adapt_expired may next have something (UINT64_MAX: never). */
uint64_t sl_adapt_due(const struct sl_adapt *a);

/* The same, for a caller at <now_ns> that has just called sl_adapt_expired
 * until NULL: a time after <now_ns> (a refusal's hysteresis that
 * sl_adapt_due counted on may have run out by then; UINT64_MAX: never). */
uint64_t sl_adapt_due_after(const struct sl_adapt *a, uint64_t now_ns);

/* Takes <w> out without a decision (its client went away); no-op when it
 * is not queued. */
void sl_adapt_cancel(struct sl_adapt *a, struct sl_adapt_waiter *w);

/* 1 when the queue has not been empty for an interval (standing). */
int sl_adapt_standing(const struct sl_adapt *a, uint64_t now_ns);

/* The wait a standing queue allows its lowest tier (nanoseconds). */
uint64_t sl_adapt_target(const struct sl_adapt *a);

/* Waiters now. */
static inline uint32_t sl_adapt_queued(const struct sl_adapt *a)
{
    return a->q.n;
}

#endif

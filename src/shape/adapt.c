/* sluice — the adaptive concurrency controller (see adapt.h and
 * docs/adaptive.md for the reasoning behind each rule). */
#include <math.h>
#include <string.h>

#include "shape/adapt.h"




#define MS 1000000ull

void sl_adapt_params_default(struct sl_adapt_params *p)
{
    memset(p, 0, sizeof(*p));
    p->min_limit = 1;
    p->max_limit = 1000;
    p->initial_limit = 20;
    p->smoothing = 0.2;
    p->gradient_floor = 0.5;
    p->tolerance = 1.1;
    p->backoff = 0.9;
    p->allowance = 2.5;
    p->window_ns = 100 * MS;
    p->window_samples = 10;
    p->probe_ns = 5000 * MS;
    p->probe_skew_ns = 25 * MS;
    p->probe_depth = 0.25;
    p->probe_samples = 64;
    p->probe_max_ns = 300 * MS;
    p->confirm = 0.1;
    p->queue_cap = 1024;
    p->queue_target_ns = 0;
    p->queue_target_min_ns = 1 * MS;
    p->queue_interval_ns = 100 * MS;
    p->seed = 0x5eed;
}

static double clampd(double v, double lo, double hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* ---- when probes start ----
 *
 * Probes line up across instances without their talking to each other: a
 * probe starts when the wall clock crosses a multiple of the probe period,
 * the same on every instance, so instances whose clocks agree (NTP) probe
 * together, and a probe counts only requests sent probe_skew_ns after its
 * own in flight fell (the others' may fall that much later). Probing
 * alone, an instance drains only its own share of the upstream's queue:
 * the others' stay, and the "no-load" latency it reads holds them (two
 * instances in front of one Redis thread read five service times). The
 * controller never reads a clock: the caller gives the wall clock's offset
 * from its own (sl_adapt_wallclock; without it the caller's clock stands
 * in, which processes on one host share when it is the monotonic one). */

/* The short grid: a probe wanted soon (a first baseline, one that moved,
 * a limit stuck at its minimum) starts at the next multiple of this. */
static uint64_t soon_grid(const struct sl_adapt *a)
{
    uint64_t g = a->p.probe_ns / 5;
    return g > 0 ? g : 1;
}

/* xorshift64*: a pause only needs to differ between instances. */
static double uniform(struct sl_adapt *a)
{
    a->rng ^= a->rng >> 12;
    a->rng ^= a->rng << 25;
    a->rng ^= a->rng >> 27;
    return (double)((a->rng * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0;
}

static uint64_t wall_of(const struct sl_adapt *a, uint64_t now_ns)
{
    return (uint64_t)((int64_t)now_ns + a->wall_off_ns);
}

/* The next boundary after <now_ns> on the grid in force. */
static void probe_schedule(struct sl_adapt *a, uint64_t now_ns)
{
    uint64_t g = a->probe_soon ? soon_grid(a) : a->p.probe_ns;
    uint64_t w = wall_of(a, now_ns);
    a->probe_next_wall = (w / g + 1) * g;
}

static void probe_start(struct sl_adapt *a, uint64_t now_ns);

/* At a boundary: probe when something asked for one soon, or nothing has
 * confirmed the baseline for half a period (under a standing queue no
 * window does: the last confirmation is the last boundary's probe). */
static void probe_maybe(struct sl_adapt *a, uint64_t now_ns)
{
    if (a->probing || a->baseline_ns == 0)
        return;
    uint64_t w = wall_of(a, now_ns);
    /* not computed yet, or the wall clock was stepped back a long way */
    if (a->probe_next_wall == 0 || a->probe_next_wall > w + a->p.probe_ns) {
        probe_schedule(a, now_ns);
        return;
    }
    if (w < a->probe_next_wall)
        return;
    if (a->probe_soon || now_ns - a->confirmed_ns >= a->p.probe_ns / 2)
        probe_start(a, now_ns);
    else
        probe_schedule(a, now_ns);
}

void sl_adapt_wallclock(struct sl_adapt *a, uint64_t now_ns, uint64_t wall_ns)
{
    int64_t off = (int64_t)(wall_ns - now_ns);
    int64_t moved = off > a->wall_off_ns ? off - a->wall_off_ns : a->wall_off_ns - off;
    a->wall_off_ns = off;
    /* A step (not the microseconds between two readings of two clocks):
     * the boundary to wait for is another one. A boundary passed by the
     * step itself is skipped; the next one comes a period later at most. */
    if (moved > (int64_t)a->p.window_ns && !a->probing && a->probe_next_wall != 0)
        probe_schedule(a, now_ns);
}

int sl_adapt_init(struct sl_adapt *a, const struct sl_adapt_params *p, uint64_t now_ns)
{
    memset(a, 0, sizeof(*a));
    if (p->min_limit < 1 || p->max_limit < p->min_limit || !(p->smoothing > 0 && p->smoothing <= 1) ||
        !(p->gradient_floor > 0 && p->gradient_floor <= 1) || !(p->tolerance >= 1) ||
 !(p->backoff > 0 && p->backoff < 1) ||
        !(p->probe_depth > 0 && p->probe_depth <= 1) || p->probe_ns == 0 ||
        !(p->confirm >= 0) || !(p->allowance > 0) || p->window_samples < 1 || p->probe_samples < 1 || p->queue_interval_ns == 0)
        return -1;
    a->p = *p;
    a->limit = clampd((double)p->initial_limit, (double)p->min_limit, (double)p->max_limit);
    a->rng = p->seed ? p->seed : 0x9e3779b97f4a7c15ull;
    a->win_start_ns = now_ns;
    a->confirmed_ns = now_ns;
    a->probe_after_ns = p->probe_ns + p->probe_max_ns + p->window_ns;
    return 0;
}

void sl_adapt_fleet(struct sl_adapt *a, double fleet_ns, uint64_t until_ns)
{
    a->fleet_ns = fleet_ns > 0 ? fleet_ns : 0;
    a->fleet_until_ns = until_ns;
}

double sl_adapt_fleet_at(const struct sl_adapt *a, uint64_t now_ns)
{
    return a->fleet_ns > 0 && now_ns < a->fleet_until_ns ? a->fleet_ns : 0;
}

/* The lesser of the two: the fleet's is the least of what the instances
 * published, this one's included, but this one's may have fallen since it
 * last published (a window below it lowers it at once); the others learn
 * it at its next publication. */
double sl_adapt_reference(const struct sl_adapt *a, uint64_t now_ns)
{
    double b = a->baseline_ns, fleet = sl_adapt_fleet_at(a, now_ns);
    if (fleet > 0 && (b == 0 || fleet < b)) {
        /* Trusted down to a fraction of the own: instances on one host (or
         * one network) differ by probe noise, a fifth or so; an instance
         * whose path to the upstream is really longer (another zone) would
         * otherwise read its own path as queueing and shed at no load. */
        double floor = b * SL_ADAPT_FLEET_TRUST;
        b = fleet > floor ? fleet : floor;
    }
    return b;
}

double sl_adapt_own_baseline(const struct sl_adapt *a)
{
    return a->guessed ? 0 : a->baseline_ns;
}

double sl_adapt_estimate(const struct sl_adapt *a)
{
    return a->limit;
}

uint32_t sl_adapt_limit(const struct sl_adapt *a)
{
    if (a->probing && a->probe_pause_ns != 0)
        return 0; /* a fractional probe's pause (probe_pause) */
    double l = a->probing ? a->limit * a->p.probe_depth : a->limit;
    uint32_t c = (uint32_t)l;
    return c < a->p.min_limit ? a->p.min_limit : c;
}

/* Headroom: how far the estimate may grow past what the latency says, the
 * queue it lets the upstream keep. L / (1 + sqrt(L)): about sqrt(L) - 1 for
 * a large limit (Gradient2's sqrt: small against the limit, enough to probe
 * upward quickly), at most half of a small one (at a limit of 2 a queue of
 * 1.4 would be a 70% latency rise for nothing). Its share of the limit
 * falls as the limit grows, and that is what makes two instances converge:
 * the larger one gains less per window, relative to itself, than the
 * smaller, while the latency they share cuts both by the same factor. A
 * headroom proportional to the limit would keep any ratio between them. */
static double headroom(const struct sl_adapt *a)
{
    return a->limit / (1.0 + sqrt(a->limit));
}

/* The baseline's sliding minimum: <v> (a window's or a probe's mean) was
 * measured at <now_ns>; returns the least of the last two probe periods.
 * A monotonic queue: each entry is less than those after it, so the head
 * is the least; an entry older than the horizon leaves at the head, and a
 * new one removes every entry at the tail that is not less than it. */
static double low_push(struct sl_adapt *a, uint64_t now_ns, double v)
{
    uint64_t horizon = 2 * a->p.probe_ns;
    while (a->low_n > 0 && now_ns - a->low[a->low_h].t > horizon) {
        a->low_h = (uint8_t)((a->low_h + 1) % SL_ADAPT_LOWS);
        a->low_n--;
    }
    while (a->low_n > 0 && a->low[(a->low_h + a->low_n - 1) % SL_ADAPT_LOWS].v >= v)
        a->low_n--;
    if (a->low_n == SL_ADAPT_LOWS) {
        a->low_h = (uint8_t)((a->low_h + 1) % SL_ADAPT_LOWS);
        a->low_n--;
    }
    unsigned i = (a->low_h + a->low_n) % SL_ADAPT_LOWS;
    a->low[i].t = now_ns;
    a->low[i].v = v;
    a->low_n++;
    return a->low[a->low_h].v;
}

static void window_reset(struct sl_adapt *a, uint64_t now_ns)
{
    a->win_start_ns = now_ns;
    a->win_sum_ns = 0;
    a->win_n = 0;
    a->win_overload = 0;
    a->win_max_inflight = a->inflight;
}

/* A probe starts counting once in flight has fallen to its cap: replies to
 * requests sent before then carry the queue the probe wants to be rid of. */
static void probe_check(struct sl_adapt *a, uint64_t now_ns)
{
    if (a->probing && !a->probe_clean && a->inflight <= sl_adapt_limit(a)) {
        a->probe_clean = 1;
        a->probe_clean_ns = now_ns;
    }
}

/* A fractional probe: when a quarter of the limit is less than one
 * request (a limit under 4: a one-thread upstream), a cap of 1 is still
 * too much once several instances probe together (each keeps one in
 * flight, and each reads the others' service in its latency: two instances
 * in front of one Redis thread read twice its service time). Such a probe
 * keeps one request in flight only for that fraction of the time: after
 * each reply it holds its cap at 0 for a random pause, on average the
 * reply's latency times (1 / fraction - 1), so instances that probe
 * together mostly take turns, and an instance alone reads what it reads
 * with a cap of 1. The pause is one or two service times: nothing waits
 * long for it. */
static void probe_pause(struct sl_adapt *a, uint64_t latency_ns, uint64_t now_ns)
{
    double f = a->limit * a->p.probe_depth;
    if (f >= 1.0 || !a->probe_clean)
        return;
    double mean = 2.0 * (double)latency_ns * (1.0 / f - 1.0);
    uint64_t d = (uint64_t)(2.0 * mean * uniform(a));
    if (d > 0)
        a->probe_pause_ns = now_ns + d;
}

/* A pause is over at <now_ns>. */
void sl_adapt_tick(struct sl_adapt *a, uint64_t now_ns)
{
    if (a->probe_pause_ns != 0 && now_ns >= a->probe_pause_ns)
        a->probe_pause_ns = 0;
}

static void probe_start(struct sl_adapt *a, uint64_t now_ns)
{
    a->probing = 1;
    a->probe_clean = 0;
    a->probe_start_ns = now_ns;
    a->probe_sum_ns = 0;
    a->probe_n = 0;
    a->probe_soon = 0;
    a->n_probes++;
    probe_check(a, now_ns);
}

static void probe_end(struct sl_adapt *a, uint64_t now_ns)
{
    if (a->probe_n > 0) {
        double m = a->probe_sum_ns / a->probe_n;
        double old = a->baseline_ns;
        a->baseline_ns = low_push(a, now_ns, m);
        a->confirmed_ns = now_ns;
        /* A probe that moved the baseline much (an upstream that changed),
         * or the first one, taken under load, is not the last word: the
         * limit will move, and a probe from there sees better (a quarter
         * of the initial 20 against a one-thread upstream still holds a
         * queue of four: it read 25 ms for a 5 ms service, and the limit
         * sat at 8 until the next probe, 5 s later). Look again after a
         * few windows (the next short boundary), not a whole period. */
        if (fabs(a->baseline_ns - old) > old * a->p.confirm || a->guessed)
            a->probe_soon = 1;
    }
    a->probing = 0;
    a->probe_pause_ns = 0;
    a->guessed = 0;
    a->at_min = 0;
    window_reset(a, now_ns);
    probe_schedule(a, now_ns);
}

/* The end of a window: one step of the gradient. */
static void window_close(struct sl_adapt *a, uint64_t now_ns)
{
    double l = a->limit;
    if (a->win_overload > 0) {
        /* Overload signals say the upstream refused or gave up: back off
         * once per window, whatever the latency of the others said. */
        l *= a->p.backoff;
    } else {
        double mean = a->win_sum_ns / a->win_n;
        /* A window of replies timed at 0 (the loop's clock is read once a
         * turn) would make the gradient 0/0 below, NaN for good: 1 ns,
         * the least a reply can take. */
        if (mean < 1.0)
            mean = 1.0;
        a->sampled_ns = mean;
        if (a->baseline_ns == 0 && (double)a->win_max_inflight * 2.0 >= l) {
            /* The first window was busy: its mean may hold a queue. Take it
             * for now and measure at once (and again soon after, below). */
            a->guessed = 1;
            a->baseline_ns = low_push(a, now_ns, mean);
            a->probe_soon = 1;
            probe_schedule(a, now_ns);
        } else {
            /* The baseline is the least mean latency of the last two probe
             * periods, windows and probes alike (docs/adaptive.md, "The
             * baseline"): it falls with any window below it, and rises when
             * the lows it came from grow old; a probe every period (lined
             * up with the other instances' on the wall clock) keeps a
             * drained reading in the horizon, so a standing queue never
             * becomes the norm. Instances in front of one upstream read the
             * same latencies, dips included: their least agree, where each
             * one's own probes, ratcheted, drifted apart. */
            double low = low_push(a, now_ns, mean);
            if (low < a->baseline_ns || now_ns - a->confirmed_ns < a->probe_after_ns)
                a->baseline_ns = low;
            if (mean <= fmax(a->baseline_ns, (double)a->p.queue_target_min_ns * a->p.tolerance) *
                            (1.0 + a->p.confirm))
                a->confirmed_ns = now_ns; /* unloaded, or about the resolution (below) */
        }
        /* Latency below the resolution (the queue target's floor, 1 ms) is
         * not queueing that the limit should remove: the queue would make
         * a request wait up to that long before refusing it anyway, and
         * moving the wait from the upstream into the queue changes
         * nothing for the client (Little's law: the same clients, the same
         * time) while the upstream may serve less (a Redis serves every
         * connection ready in one turn: a few at once cost it more
         * syscalls per command). So a Redis answering in 50 us grows its
         * limit until its latency reaches about a millisecond, not 55 us:
         * 50 clients pipelining 16 deep then mostly run at once, and the
         * few that wait, wait well under the target. */
        /* The fleet's baseline when one is shared (sl_adapt_fleet): at the
         * fixed point the limit moves about five times as much as the
         * reference (docs/adaptive.md, "Two instances"), so instances that
         * each used their own, a few percent apart, split for good. */
        double ref = sl_adapt_reference(a, now_ns) * a->p.tolerance;
        if (ref < (double)a->p.queue_target_min_ns)
            ref = (double)a->p.queue_target_min_ns;
        double g = clampd(ref / mean, a->p.gradient_floor, 1.0);
        double target = l * g;
        /* Grow only when the limit is being used: an idle worker's limit
         * would otherwise climb to max_limit on no evidence. */
        if ((double)a->win_max_inflight * 2.0 >= l) {
            double h = headroom(a);
            /* Once the latency shows queueing, the headroom is at most a
             * fixed allowance (Gradient2's queueSize): see headroom(). */
            if (g < 1.0 && h > a->p.allowance)
                h = a->p.allowance;
            target += h;
        }
        l = (1.0 - a->p.smoothing) * l + a->p.smoothing * target;
    }
    a->limit = clampd(l, (double)a->p.min_limit, (double)a->p.max_limit);
    /* At the minimum means the estimate itself, within one window's step
     * of it: not a cap at the minimum. A one-thread upstream's limit of 1.8
     * has a cap of 1 and is where it belongs; counted as stuck, it probed
     * every second, its limit frozen meanwhile while the other instance's
     * windows saw the dip and grew (two instances settled 1.80 / 2.02). */
    if (a->limit < (double)a->p.min_limit * (1.0 + a->p.smoothing))
        a->at_min++;
    else
        a->at_min = 0;
    window_reset(a, now_ns);
    /* The limit has sat at its minimum for 5 windows: the baseline may be
     * too low; re-measure it at the next short boundary (probe_maybe also
     * re-measures when no window has confirmed it for a while). */
    if (a->baseline_ns > 0 && a->at_min >= 5 && !a->probe_soon) {
        a->probe_soon = 1;
        probe_schedule(a, now_ns);
    }
    probe_maybe(a, now_ns);
}

static void window_maybe_close(struct sl_adapt *a, uint64_t now_ns)
{
    if (now_ns - a->win_start_ns < a->p.window_ns)
        return;
    if (a->win_overload == 0 && a->win_n < a->p.window_samples)
        return;
    window_close(a, now_ns);
}

void sl_adapt_sample(struct sl_adapt *a, uint64_t latency_ns, uint64_t now_ns)
{
    a->n_samples++;
    if (a->probing) {
        probe_check(a, now_ns);
        /* only requests sent probe_skew_ns after this one's in flight fell:
         * the other instances' began up to that much later (their clocks)
         * and take about as long to fall */
        if (a->probe_clean && latency_ns <= now_ns &&
            now_ns - latency_ns >= a->probe_clean_ns + a->p.probe_skew_ns) {
            a->probe_sum_ns += (double)latency_ns;
            a->probe_n++;
        }
        probe_pause(a, latency_ns, now_ns);
        if (a->probe_n >= a->p.probe_samples || now_ns - a->probe_start_ns >= a->p.probe_max_ns)
            probe_end(a, now_ns);
        return;
    }
    a->win_sum_ns += (double)latency_ns;
    a->win_n++;
    window_maybe_close(a, now_ns);
    probe_maybe(a, now_ns);
}

void sl_adapt_overload(struct sl_adapt *a, uint64_t now_ns)
{
    a->n_overload++;
    if (a->probing) {
        /* The upstream is overloaded while we measure its no-load latency:
         * the measurement is void; back off now instead. */
        a->probing = 0;
        a->probe_pause_ns = 0;
        a->guessed = 0;
        a->limit = clampd(a->limit * a->p.backoff, (double)a->p.min_limit, (double)a->p.max_limit);
        a->confirmed_ns = now_ns;
        window_reset(a, now_ns);
        probe_schedule(a, now_ns);
        return;
    }
    a->win_overload++;
    window_maybe_close(a, now_ns);
}

int sl_adapt_try_acquire(struct sl_adapt *a, uint64_t now_ns)
{
    sl_adapt_tick(a, now_ns);
    if (a->q.n > 0 || a->inflight >= sl_adapt_limit(a))
        return 0;
    a->inflight++;
    if (a->inflight > a->win_max_inflight)
        a->win_max_inflight = a->inflight;
    a->n_admitted++;
    probe_maybe(a, now_ns);
    return 1;
}

void sl_adapt_release(struct sl_adapt *a, uint64_t now_ns)
{
    if (a->inflight > 0)
        a->inflight--;
    probe_check(a, now_ns);
    if (a->probing && now_ns - a->probe_start_ns >= a->p.probe_max_ns)
        probe_end(a, now_ns);
    probe_maybe(a, now_ns);
}

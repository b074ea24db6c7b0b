/* sluice — the limiter's statistics: what its decisions count, and the
 * reports made of it.
 *
 *   decisions (limiter.c, places.c ...)
 *     |-- per limit: allowed, rejected, shadow_hits, fallback, delayed,
 *     |              leased, held                    (struct limit)
 *     |-- sl_lim_hist_add:   how long work waited  -> struct sl_delay_hist
 *     |-- sl_lim_top_count:  the busiest identities -> struct top[TOP_K]
 *     '-- sl_lim_uncounted:  work allowed uncounted -> per process, logged
 *                 |
 *                 v
 *   sl_limiter_metrics()     /metrics: one Prometheus family per counter
 *   sl_limiter_stats_json()  /stats: one JSON object per limit */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "admin/admin.h"
#include "core/log.h"
#include "limit/limiter-i.h"
#include "limit/limiter.h"
#include "limit/overrides.h"
#include "limit/stats.h"

#include <uv.h>

/* Work a limit could not count: allowed without being counted, because
 * memory ran out (a bucket, a connection's record) or because it met more
 * limits than a decision holds (sl_limiter_validate() refuses files where
 * that can happen). Counted per process, for /metrics, and logged at most
 * once a second per reason. */
static const char *const uncounted_names[UNCOUNTED_REASONS] = { "no_memory", "too_many_limits" };
static uint64_t uncounted_n[UNCOUNTED_REASONS];
static uint64_t uncounted_logged_ns[UNCOUNTED_REASONS];

void sl_lim_uncounted(int why, const char *what)
{
    uncounted_n[why]++;
    uint64_t now = uv_hrtime();
    if (uncounted_logged_ns[why] != 0 && now - uncounted_logged_ns[why] < 1000000000u)
        return;
    uncounted_logged_ns[why] = now;
    sl_log_warn("limits: allowed without counting", "what=%s reason=%s total=%" PRIu64, what,
                uncounted_names[why], uncounted_n[why]);
}

/* Bounds of the delay histograms (struct sl_delay_hist), in us. */
static const uint64_t delay_bounds_us[DELAY_BUCKETS] = {
    1000, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000,
};

void sl_lim_hist_add(struct sl_delay_hist *h, uint64_t us)
{
    int i = 0;
    while (i < DELAY_BUCKETS && us > delay_bounds_us[i])
        i++;
    h->le[i]++;
    h->sum_us += us;
    if (us > h->max_us)
        h->max_us = us;
}

void sl_lim_top_count(struct limit *L, const char *id)
{
    int min = 0;
    for (int i = 0; i < TOP_K; i++) {
        if (L->s->top[i].n > 0 && strcmp(L->s->top[i].id, id) == 0) {
            L->s->top[i].n++;
            return;
        }
        if (L->s->top[i].n < L->s->top[min].n)
            min = i;
    }
    size_t n = strnlen(id, SL_ID_MAX);
    memcpy(L->s->top[min].id, id, n);
    L->s->top[min].id[n] = '\0';
    L->s->top[min].err = L->s->top[min].n; /* inherited: not this identity's own */
    L->s->top[min].n++;
}

void sl_limiter_metrics(const struct sl_limiter *lim, struct sl_metrics *m)
{
    static const char *const outcomes[] = { "allowed", "rejected", "shadow_rejected" };
    sl_metrics_family(m, "sluice_limit_decisions_total", "counter",
                      "Decisions per limit and outcome (shadow_rejected: a shadow limit would have rejected).");
    for (int i = 0; i < lim->n; i++) {
        const struct limit *L = &lim->limits[i];
        uint64_t vals[3] = { L->s->allowed, L->s->rejected, L->s->shadow_hits };
        for (int o = 0; o < 3; o++) {
            const char *labels[] = { "limit", L->name, "outcome", outcomes[o], NULL };
            sl_metrics_u64(m, "sluice_limit_decisions_total", labels, vals[o]);
        }
    }
    sl_metrics_family(m, "sluice_limit_delayed_total", "counter",
                      "Decisions of action = delay limits that made the work wait (requests, byte "
                      "chunks, queued connections).");
    for (int i = 0; i < lim->n; i++) {
        const char *labels[] = { "limit", lim->limits[i].name, NULL };
        sl_metrics_u64(m, "sluice_limit_delayed_total", labels, lim->limits[i].s->delayed);
    }
    sl_metrics_family(m, "sluice_limit_delay_seconds", "histogram",
                      "How long delay limits held work back; for shadow limits, how long they "
                      "would have.");
    double bounds[DELAY_BUCKETS];
    for (int b = 0; b < DELAY_BUCKETS; b++)
        bounds[b] = (double)delay_bounds_us[b] / 1e6;
    for (int i = 0; i < lim->n; i++) {
        const struct limit *L = &lim->limits[i];
        const char *labels[] = { "limit", L->name, NULL };
        sl_metrics_histogram(m, "sluice_limit_delay_seconds", labels, bounds, L->s->delay.le,
                             DELAY_BUCKETS, (double)L->s->delay.sum_us / 1e6);
    }
    sl_metrics_family(m, "sluice_limit_fallback_decisions_total", "counter",
                      "Decisions made without the quota store (on_failure).");
    for (int i = 0; i < lim->n; i++) {
        const char *labels[] = { "limit", lim->limits[i].name, NULL };
        sl_metrics_u64(m, "sluice_limit_fallback_decisions_total", labels, lim->limits[i].s->fallback);
    }
    sl_metrics_family(m, "sluice_limit_local_buckets", "gauge",
                      "In-process buckets held per limit.");
    for (int i = 0; i < lim->n; i++) {
        const char *labels[] = { "limit", lim->limits[i].name, NULL };
        sl_metrics_u64(m, "sluice_limit_local_buckets", labels, lim->limits[i].s->buckets.n);
    }
    sl_metrics_family(m, "sluice_limit_evictions_total", "counter",
                      "Per-identity state dropped to stay within [store] max_identities (least "
                      "recently used, full buckets first).");
    for (int i = 0; i < lim->n; i++) {
        const char *labels[] = { "limit", lim->limits[i].name, NULL };
        sl_metrics_u64(m, "sluice_limit_evictions_total", labels,
                       lim->limits[i].s->buckets.evicted + lim->limits[i].s->entries.evicted);
    }
    sl_metrics_family(m, "sluice_limit_uncounted_total", "counter",
                      "Requests, byte takes and connections allowed without being counted by "
                      "every limit they meet (reason: no_memory, too_many_limits).");
    for (int w = 0; w < UNCOUNTED_REASONS; w++) {
        const char *labels[] = { "reason", uncounted_names[w], NULL };
        sl_metrics_u64(m, "sluice_limit_uncounted_total", labels, uncounted_n[w]);
    }
    sl_metrics_family(m, "sluice_limit_leased_decisions_total", "counter",
                      "Decisions made from this instance's lease ([store] lease), without a store call.");
    for (int i = 0; i < lim->n; i++) {
        const char *labels[] = { "limit", lim->limits[i].name, NULL };
        sl_metrics_u64(m, "sluice_limit_leased_decisions_total", labels, lim->limits[i].s->leased);
    }
    sl_metrics_family(m, "sluice_limit_held_refusals_total", "counter",
                      "Rejections answered from a refusal of the store remembered until its retry "
                      "time, without a store call.");
    for (int i = 0; i < lim->n; i++) {
        const char *labels[] = { "limit", lim->limits[i].name, NULL };
        sl_metrics_u64(m, "sluice_limit_held_refusals_total", labels, lim->limits[i].s->held);
    }

    int any_ovr = 0;
    for (int i = 0; i < lim->n; i++)
        any_ovr |= lim->limits[i].ovr_ttl_us > 0;
    if (!any_ovr)
        return;
    sl_metrics_family(m, "sluice_limit_override_decisions_total", "counter",
                      "Decisions made with a per-identity override read from the store "
                      "(overrides = store).");
    for (int i = 0; i < lim->n; i++) {
        const char *labels[] = { "limit", lim->limits[i].name, NULL };
        if (lim->limits[i].ovr_ttl_us > 0)
            sl_metrics_u64(m, "sluice_limit_override_decisions_total", labels,
                           lim->limits[i].s->ovr_applied);
    }
    sl_metrics_family(m, "sluice_limit_overrides_malformed_total", "counter",
                      "Override values in the store ignored as malformed (overrides = store).");
    for (int i = 0; i < lim->n; i++) {
        const char *labels[] = { "limit", lim->limits[i].name, NULL };
        if (lim->limits[i].ovr_ttl_us > 0)
            sl_metrics_u64(m, "sluice_limit_overrides_malformed_total", labels,
                           lim->limits[i].s->ovr_malformed);
    }
}

void sl_limiter_stats_json(const struct sl_limiter *lim, FILE *out)
{
    fputc('[', out);
    for (int i = 0; i < lim->n; i++) {
        const struct limit *L = &lim->limits[i];
        fprintf(out,
                "%s{\"name\":\"%s\",\"algorithm\":\"%s\",\"allowed\":%" PRIu64 ",\"rejected\":%" PRIu64
                ",\"shadow_rejected\":%" PRIu64 ",\"fallback\":%" PRIu64 ",\"delayed\":%" PRIu64
                ",\"max_delay_seen_ms\":%" PRIu64 ",\"leased\":%" PRIu64
                ",\"local_buckets\":%zu,\"evictions\":%" PRIu64 ",",
                i ? "," : "", L->name, sl_algo_name(L->p.algo), L->s->allowed, L->s->rejected,
                L->s->shadow_hits, L->s->fallback, L->s->delayed, (L->s->delay.max_us + 999) / 1000, L->s->leased,
                L->s->buckets.n, L->s->buckets.evicted + L->s->entries.evicted);
        if (L->ovr_ttl_us > 0) {
            fputs("\"overrides\":", out);
            sl_lim_overrides_json(L, out);
            fputc(',', out);
        }
        fputs("\"busiest\":[", out);
        /* Largest sure count first: "requests" is what the identity made
         * for certain (n - err), "error" how many more it may have made
         * (see struct top). Identities are printable and quote-free (hashed
         * otherwise by the identity module). */
        int done[TOP_K] = { 0 };
        for (int k = 0, first = 1; k < TOP_K; k++) {
            int best = -1;
            for (int j = 0; j < TOP_K; j++)
                if (!done[j] && L->s->top[j].n > 0 &&
                    (best < 0 || L->s->top[j].n - L->s->top[j].err > L->s->top[best].n - L->s->top[best].err))
                    best = j;
            if (best < 0)
                break;
            done[best] = 1;
            fprintf(out, "%s{\"identity\":\"%s\",\"requests\":%" PRIu64 ",\"error\":%" PRIu64 "}",
                    first ? "" : ",", L->s->top[best].id, L->s->top[best].n - L->s->top[best].err,
                    L->s->top[best].err);
            first = 0;
        }
        fputs("]}", out);
    }
    fputc(']', out);
}

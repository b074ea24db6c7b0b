/* sluice — what a decision says: the strictest denial, the limit closest
 * to its limit for an allowed request (HTTP's RateLimit fields), and the
 * counts and histograms of allowed, delayed and shadow decisions. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "limit/limiter-i.h"
#include "limit/stats.h"
#include "limit/verdict.h"

#define SHADOW_MSG "limits: a shadow limit would have rejected"

/* ceil(<us> / 1 s) */
static uint64_t secs_up(uint64_t us)
{
    return us / 1000000 + (us % 1000000 != 0);
}

/* Names limit <L> in <v>'s policy fields (limiter.h): <remaining> tokens
 * left, the quota whole again after <reset_us>; <approx> as there. */
void sl_lim_set_policy(struct sl_verdict *v, const struct limit *L,
                       const struct sl_algo_params *p, uint64_t remaining, uint64_t reset_us,
                       int approx)
{
    size_t n = strnlen(L->name, sizeof(v->policy) - 1); /* per request: no printf */
    memcpy(v->policy, L->name, n);
    v->policy[n] = '\0';
    if (L->metric == SL_METRIC_CONNECTIONS) {
        v->quota = L->max;
        v->window_s = 0;
    } else {
        sl_algo_policy(p, &v->quota, &v->window_s);
    }
    v->remaining = remaining;
    v->reset_s = secs_up(reset_us);
    v->approx = (uint8_t)approx;
}

/* Non-shadow limit <L> allowed a request, leaving <remaining> tokens, whole
 * again after <reset_us>: an allowed verdict names the limit closest to
 * its limit (the least remaining; the later reset on a tie). */
void sl_lim_closest(struct sl_verdict *v, const struct limit *L, const struct sl_algo_params *p,
                    uint64_t remaining, uint64_t reset_us, int approx)
{
    if (v->kind != SL_VERDICT_ALLOW)
        return;
    if (v->policy[0] != '\0' &&
        (remaining > v->remaining || (remaining == v->remaining && secs_up(reset_us) <= v->reset_s)))
        return;
    sl_lim_set_policy(v, L, p, remaining, reset_us, approx);
}

void sl_lim_deny(struct sl_verdict *v, const struct limit *L, const struct sl_algo_params *p,
                 const char *identity, const struct sl_algo_result *res)
{
    uint64_t retry = res->retry_after_us;
    /* The strictest denial wins: the longest wait. */
    if (v->kind == SL_VERDICT_REJECT && !(retry > v->retry_after_us))
        return;
    v->kind = SL_VERDICT_REJECT;
    v->never = retry == UINT64_MAX;
    v->retry_after_us = retry;
    v->action = (uint8_t)L->action;
    snprintf(v->limit, sizeof(v->limit), "%s", L->name);
    snprintf(v->identity, sizeof(v->identity), "%s",
             L->scope == SL_SCOPE_GLOBAL ? "*" : identity);
    /* The quota is not whole again before the request would fit. */
    uint64_t reset = res->reset_us;
    if (retry != UINT64_MAX && retry > reset)
        reset = retry;
    sl_lim_set_policy(v, L, p, res->remaining, reset, 0);
}

void sl_lim_shadow_outcome(struct limit *L, const char *identity, int allowed, uint64_t retry_us)
{
    if (allowed) {
        L->s->allowed++;
        return;
    }
    L->s->shadow_hits++;
    if (retry_us != UINT64_MAX)
        sl_lim_hist_add(&L->s->delay, retry_us);
    uint64_t repeated;
    if (sl_log_level < SL_LOG_INFO || !sl_log_rate_take(&L->shadow_log, sl_log_clock(), &repeated))
        return;
    char retry[32] = "never";
    if (retry_us != UINT64_MAX)
        snprintf(retry, sizeof(retry), "%" PRIu64, (retry_us + 999) / 1000);
    char more[64] = "";
    if (repeated > 0)
        snprintf(more, sizeof(more), " kind=shadow_reject repeated=%" PRIu64, repeated);
    /* Identities are printable and quote-free (the identity module hashes
     * any other). */
    sl_log(SL_LOG_INFO, SHADOW_MSG, "limit=%s identity=\"%s\" retry_ms=%s%s", L->name,
           L->scope == SL_SCOPE_GLOBAL ? "*" : identity, retry, more);
}

void sl_lim_shadow_note(struct sl_verdict *v, const struct limit *L, uint64_t retry_us)
{
    if (v->shadow[0] != '\0')
        return;
    size_t n = strnlen(L->name, sizeof(v->shadow) - 1);
    memcpy(v->shadow, L->name, n);
    v->shadow[n] = '\0';
    v->shadow_retry_us = retry_us;
    v->shadow_global = L->scope == SL_SCOPE_GLOBAL;
}

void sl_lim_shadow_log_flush(struct limit *L, int all)
{
    uint64_t n = sl_log_rate_due(&L->shadow_log, sl_log_clock(), all);
    if (n > 0)
        sl_log_info(SHADOW_MSG, "limit=%s kind=shadow_reject repeated=%" PRIu64, L->name, n);
}

/* Limit <L> allowed, after <wait_us> when it reserved (action = delay): the
 * verdict waits for the longest of its limits. */
void sl_lim_allowed_after(struct limit *L, struct sl_verdict *v, uint64_t wait_us)
{
    L->s->allowed++;
    if (L->action != SL_ACTION_DELAY || wait_us == 0 || wait_us == UINT64_MAX)
        return;
    L->s->delayed++;
    sl_lim_hist_add(&L->s->delay, wait_us);
    if (wait_us > v->delay_us)
        v->delay_us = wait_us;
}

/* The RESP rejection line (limiter.h). */
size_t sl_verdict_resp(const struct sl_verdict *v, char *out, size_t cap)
{
    int n;
    if (v->store_down)
        n = snprintf(out, cap,
                     "-THROTTLED limit '%s' cannot be checked (quota store unavailable), retry in 1000 ms\r\n",
                     v->limit);
    else if (v->never)
        n = snprintf(out, cap,
                     "-THROTTLED limit '%s' exceeded for '%s': the request costs more than the limit's burst\r\n",
                     v->limit, v->identity);
    else
        n = snprintf(out, cap, "-THROTTLED limit '%s' exceeded for '%s', retry in %" PRIu64 " ms\r\n",
                     v->limit, v->identity, (v->retry_after_us + 999) / 1000);
    if (n < 0)
        return 0;
    return (size_t)n < cap ? (size_t)n : cap - 1;
}


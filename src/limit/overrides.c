/* sluice — per-identity overrides read from the store (see overrides.h).
 *
 *   run() --> sl_lim_overrides_resolve, per store-backed limit with overrides:
 *               none cached ------> make the entry, HGET, the request waits
 *               first ask out ----> the request waits with the others
 *               cached, fresh ----> its numbers (or the limit's own)
 *               cached, stale ----> its numbers, and HGET again (no wait)
 *   HGET answer --> on_answer: parse, check, keep; waiters go on (sl_lim_resume) */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "conf/units.h"
#include "core/log.h"
#include "limit/algo.h"
#include "limit/idtable.h"
#include "limit/limiter-i.h"
#include "limit/overrides.h"
#include "limit/tokens.h"
#include "store/store.h"

struct sl_ovr {
    struct sl_idt_node     node;      /* in L->s->ovr (key: identity, "*" for global scope) */
    struct sl_limiter     *lim;       /* the limiter asking, referenced while it asks */
    int                    li;        /* its limit's index there */
    uint8_t                has;       /* an override applies (else the limit's own numbers) */
    uint8_t                asking;    /* an HGET is out */
    uint64_t               at_us;     /* when the last answer came; 0: none yet */
    struct sl_algo_params  p;         /* the override, when <has> */
    struct sl_lim_waiters  waiting;   /* requests waiting for the first answer */
    char                   key[];
};

static void ovr_free(struct sl_ovr *o)
{
    free(o);
}

void sl_lim_overrides_free(struct lim_state *s)
{
    if (s->ovr.tab != NULL) {
        for (uint32_t j = 0; j <= s->ovr.mask; j++) {
            struct sl_idt_node *n = s->ovr.tab[j];
            while (n) {
                struct sl_idt_node *nx = n->next;
                ovr_free((struct sl_ovr *)n);
                n = nx;
            }
        }
    }
    sl_idt_free(&s->ovr);
}

/* In use while asking or waited for; else dropping it costs one HGET. */
static enum sl_idt_judgement judge(struct sl_idt_node *n, void *arg)
{
    (void)arg;
    const struct sl_ovr *o = (const struct sl_ovr *)n;
    return o->asking || o->waiting.head != NULL ? SL_IDT_PINNED : SL_IDT_FRESH;
}

static const char *ovr_id(const struct limit *L, const char *identity)
{
    return L->scope == SL_SCOPE_GLOBAL ? "*" : identity;
}

/* <L>'s parameters with <o>'s rate and burst. */
static struct sl_algo_params with_override(const struct limit *L, const struct sl_rate *r,
                                           uint64_t burst)
{
    struct sl_algo_params p = L->p;
    p.amount = r->amount;
    p.period_us = r->period_us;
    p.burst = burst;
    return p;
}

static void on_answer(void *data, int status, const char *text, size_t len)
{
    struct sl_ovr *o = data;
    struct sl_limiter *lim = o->lim;
    struct limit *L = &lim->limits[o->li];
    o->asking = 0;
    /* An error (timeout, store away) keeps what was cached, for another
     * overrides_ttl; never answered yet, the next request asks again. */
    if (status == 0 || o->at_us != 0) {
        uint64_t now = sl_clock_us(lim->clock);
        o->at_us = now > 0 ? now : 1;
    }
    const uint8_t had = o->has;
    const struct sl_algo_params before = o->p;
    if (status == 0 && text == NULL) {
        o->has = 0; /* no override: the limit's own numbers */
    } else if (status == 0) {
        struct sl_rate r;
        uint64_t burst;
        const char *why = NULL;
        struct sl_algo_params p;
        if (sl_parse_override(text, len, L->metric != SL_METRIC_REQUESTS, &r, &burst, &why) == 0) {
            p = with_override(L, &r, burst);
            if (sl_algo_check(&p, &why) != 0 && why == NULL)
                why = "rate or burst out of range";
        }
        if (why != NULL) {
            o->has = 0;
            L->s->ovr_malformed++;
            /* Shown as stored, up to a bound: an operator's typo, not a
             * secret (the identity is what the limit keys by anyway). */
            sl_log_warn_rl("override_malformed", "quota store: malformed override ignored",
                           "limit=%s identity=\"%.64s\" value=\"%.*s\" why=\"%s\"", L->name,
                           o->key, (int)(len > 64 ? 64 : len), text, why);
        } else {
            o->p = p;
            o->has = 1;
        }
    }
    /* New numbers make what was remembered under the old ones moot. */
    if (had != o->has || (o->has && (before.amount != o->p.amount ||
                                     before.period_us != o->p.period_us ||
                                     before.burst != o->p.burst)))
        sl_lim_tokens_forget(L, o->key);
    struct sl_limiter_req *w = sl_lim_waiters_take(&o->waiting);
    while (w != NULL) {
        struct sl_limiter_req *next = w->next_wait;
        sl_lim_resume(w);
        w = next;
    }
    sl_limiter_release(lim);
}

/* Asks the store for <o>'s value. Returns 1 when asked. */
static int ask(struct sl_limiter *lim, struct limit *L, struct sl_ovr *o)
{
    char key[KEY_MAX];
    int n = snprintf(key, sizeof(key), "%soverrides:{%s}", lim->key_prefix, L->name);
    if (n < 0 || (size_t)n >= sizeof(key) || lim->store == NULL)
        return 0;
    struct sl_str k = { key, (size_t)n }, f = { o->key, o->node.len };
    /* The answer goes to this limiter's limit: the entry may have been
     * made by the limits a reload replaced, where it had another index. */
    o->lim = lim;
    o->li = (int)(L - lim->limits);
    if (sl_store_hget(lim->store, k, f, on_answer, o) == NULL)
        return 0;
    o->asking = 1;
    lim->refs++;
    return 1;
}

/* The entry of <L> for <id>, made if missing; NULL when out of memory. */
static struct sl_ovr *entry(struct sl_limiter *lim, int li, const char *id, uint64_t now_us)
{
    struct limit *L = &lim->limits[li];
    size_t len = strnlen(id, SL_ID_MAX);
    struct sl_idt_node *n = sl_idt_find(&L->s->ovr, id, len, now_us / 1000);
    if (n != NULL)
        return (struct sl_ovr *)n;
    if (sl_idt_full(&L->s->ovr)) {
        struct sl_idt_node *v = sl_idt_victim(&L->s->ovr, judge, NULL);
        if (v != NULL) {
            sl_idt_remove(&L->s->ovr, v);
            L->s->ovr.evicted++;
            ovr_free((struct sl_ovr *)v);
        }
    }
    struct sl_ovr *o = calloc(1, sizeof(*o) + len + 1);
    if (o == NULL)
        return NULL;
    memcpy(o->key, id, len);
    o->node.key = o->key;
    o->node.len = (uint16_t)len;
    o->li = li;
    sl_idt_insert(&L->s->ovr, &o->node, now_us / 1000);
    return o;
}

int sl_lim_overrides_resolve(struct sl_limiter *lim, struct sl_limiter_req *q,
                             struct sl_ovr **wait_on)
{
    uint32_t applied = 0; /* bits k: counted once the request goes on */
    for (int k = 0; k < q->n; k++) {
        struct limit *L = &lim->limits[q->idx[k]];
        q->p[k] = L->p;
        if (L->ovr_ttl_us == 0 || !q->remote[k])
            continue;
        struct sl_ovr *o = entry(lim, q->idx[k], ovr_id(L, q->identity), q->now_us);
        if (o == NULL)
            continue; /* out of memory: the limit's own numbers */
        /* Never answered, or stale: asked (unless already). A stale one is
         * used meanwhile; with none yet the request waits for the first,
         * unless the store cannot be asked now (then: the limit's own). */
        if (!o->asking && (o->at_us == 0 || q->now_us - o->at_us >= L->ovr_ttl_us))
            ask(lim, L, o);
        if (o->at_us == 0 && o->asking) {
            *wait_on = o;
            return 1;
        }
        if (o->has) {
            /* Its rate and burst, on the limit's algorithm and action as
             * they are now: a reload may have changed them since the answer
             * came (the cache is carried over, limit/carry.h). */
            struct sl_algo_params p = L->p;
            p.amount = o->p.amount;
            p.period_us = o->p.period_us;
            p.burst = o->p.burst;
            if ((o->p.algo == p.algo && o->p.max_wait_us == p.max_wait_us) ||
                sl_algo_check(&p, NULL) == 0) {
                q->p[k] = p;
                applied |= 1u << k;
            }
        }
    }
    for (int k = 0; k < q->n; k++)
        lim->limits[q->idx[k]].s->ovr_applied += (applied >> k) & 1;
    return 0;
}

void sl_lim_overrides_wait(struct sl_ovr *o, struct sl_limiter_req *q)
{
    sl_lim_waiters_add(&o->waiting, q);
}

void sl_lim_overrides_sweep(struct limit *L, uint64_t now_us)
{
    if (L->ovr_ttl_us == 0)
        return;
    uint64_t now_ms = now_us / 1000, idle_ms = L->ovr_ttl_us / 1000 + 1;
    struct sl_idt_node *n;
    while ((n = sl_idt_expired(&L->s->ovr, now_ms, idle_ms)) != NULL) {
        if (judge(n, NULL) == SL_IDT_PINNED) {
            sl_idt_touch(&L->s->ovr, n, now_ms); /* asked or waited for: kept */
            continue;
        }
        sl_idt_remove(&L->s->ovr, n);
        ovr_free((struct sl_ovr *)n);
    }
}

#define JSON_OVERRIDES 20 /* overrides listed in /stats per limit */

void sl_lim_overrides_json(const struct limit *L, FILE *out)
{
    size_t active = 0;
    for (uint32_t j = 0; L->s->ovr.tab != NULL && j <= L->s->ovr.mask; j++)
        for (const struct sl_idt_node *n = L->s->ovr.tab[j]; n; n = n->next)
            active += ((const struct sl_ovr *)n)->has;
    fprintf(out, "{\"ttl_ms\":%" PRIu64 ",\"cached\":%zu,\"active\":%zu,\"applied\":%" PRIu64
                 ",\"malformed\":%" PRIu64 ",\"identities\":[",
            L->ovr_ttl_us / 1000, L->s->ovr.n, active, L->s->ovr_applied, L->s->ovr_malformed);
    int shown = 0;
    for (uint32_t j = 0; L->s->ovr.tab != NULL && j <= L->s->ovr.mask && shown < JSON_OVERRIDES; j++) {
        for (const struct sl_idt_node *n = L->s->ovr.tab[j]; n && shown < JSON_OVERRIDES; n = n->next) {
            const struct sl_ovr *o = (const struct sl_ovr *)n;
            if (!o->has)
                continue;
            char rate[64];
            struct sl_rate r = { o->p.amount, o->p.period_us };
            sl_fmt_rate(&r, L->metric != SL_METRIC_REQUESTS, rate, sizeof(rate));
            /* Identities are printable and quote-free (the identity module
             * hashes any other), as in "busiest". */
            fprintf(out, "%s{\"identity\":\"%s\",\"rate\":\"%s\",\"burst\":%" PRIu64 "}",
                    shown ? "," : "", o->key, rate, o->p.burst);
            shown++;
        }
    }
    fputs("]}", out);
}

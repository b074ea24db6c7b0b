/* sluice — byte meters (see meter.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shape/meter.h"
#include "shape/wait.h"

static void take(struct sl_meter *m, uint64_t now_us);

static int pauses(const struct sl_meter *m)
{
    /* Delay limits hold reading back; reject-only meters do on tcp while a
     * take is asked (a close follows a refusal), never on resp (requests
     * are refused one by one instead). */
    return m->plan.enforce && (m->plan.delay || !m->resp);
}

int sl_meter_init(struct sl_meter *m, const struct sl_meter_ctx *ctx, enum sl_metric metric,
                  int resp, sl_meter_cb *on_change, void *owner)
{
    memset(m, 0, sizeof(*m));
    m->metric = (uint8_t)metric;
    m->resp = (uint8_t)resp;
    m->on_change = on_change;
    m->owner = owner;
    m->ctx = *ctx;
    m->lim = ctx->lim;
    return sl_limiter_plan(ctx->lim, ctx->lc, metric, &m->plan);
}

uint64_t sl_meter_room(const struct sl_meter *m)
{
    if (!pauses(m))
        return UINT64_MAX;
    return m->credit > 0 ? (uint64_t)m->credit : 0;
}

int sl_meter_refused(const struct sl_meter *m, uint64_t now_us)
{
    return m->refusal != NULL && now_us < m->refused_until_us;
}

static void on_due(struct sl_wait *w)
{
    struct sl_meter *m = (struct sl_meter *)w; /* wait is the first member */
    uint64_t now_us = sl_waits_now(sl_waits_default);
    if (m->grant > 0) {
        m->credit += (int64_t)m->grant;
        m->grant = 0;
    }
    take(m, now_us);
    if (m->on_change)
        m->on_change(m);
}

static void verdict(struct sl_meter *m, const struct sl_verdict *v, uint64_t now_us)
{
    if (v->kind == SL_VERDICT_ALLOW) {
        free(m->refusal);
        m->refusal = NULL;
        if (v->delay_us == 0 || sl_waits_default == NULL) {
            m->credit += (int64_t)m->asked;
        } else {
            m->grant = m->asked;
            sl_wait_at(sl_waits_default, &m->wait, now_us + v->delay_us, on_due);
        }
        m->asked = 0;
        return;
    }
    m->asked = 0;
    uint64_t retry = v->never || v->retry_after_us == 0 ? 1000000 : v->retry_after_us;
    if (v->action == SL_ACTION_DELAY && sl_waits_default != NULL) {
        /* The wait would pass max_delay (others reserved ahead): ask again
         * once it would not. */
        sl_wait_at(sl_waits_default, &m->wait, now_us + retry, on_due);
        return;
    }
    if (m->refusal == NULL)
        m->refusal = malloc(sizeof(*m->refusal));
    if (m->refusal != NULL)
        *m->refusal = *v;
    m->refused_until_us = now_us + retry;
}

static void on_take(void *data, const struct sl_verdict *v)
{
    struct sl_meter *m = data;
    m->req = NULL;
    uint64_t now_us = sl_waits_default ? sl_waits_now(sl_waits_default) : 0;
    verdict(m, v, now_us);
    if (m->on_change)
        m->on_change(m);
}

/* Asks for the next chunk when the credit is low and nothing is asked. */
static void take(struct sl_meter *m, uint64_t now_us)
{
    if (m->req != NULL || m->grant > 0 || sl_waiting(&m->wait) || m->ctx.lim == NULL)
        return;
    if (m->credit > (int64_t)(m->plan.chunk / 2))
        return;
    if (m->refusal != NULL && now_us < m->refused_until_us)
        return;
    if (m->ctx.lim != m->lim) {
        /* A reload brought new limits: new chunk size, same credit. */
        m->lim = m->ctx.lim;
        struct sl_meter_plan p;
        if (!sl_limiter_plan(m->lim, m->ctx.lc, (enum sl_metric)m->metric, &p))
            memset(&p, 0, sizeof(p));
        m->plan = p;
        if (p.limits == 0)
            return;
    }
    uint64_t want = m->plan.chunk + (m->credit < 0 ? (uint64_t)-m->credit : 0);
    if (want > m->plan.max_take)
        want = m->plan.max_take;
    struct sl_verdict v;
    m->asked = want;
    if (sl_limiter_take(m->ctx.lim, m->ctx.lc, m->ctx.ident, m->ctx.conn_id,
                        (enum sl_metric)m->metric, want, &v, on_take, m, &m->req) == 1)
        return;
    m->req = NULL;
    verdict(m, &v, now_us);
}

void sl_meter_charge(struct sl_meter *m, const struct sl_meter_ctx *ctx, int64_t n,
                     uint64_t now_us)
{
    m->ctx = *ctx;
    m->credit -= n;
    take(m, now_us);
}

int sl_meter_owes(const struct sl_meter *m)
{
    return m->refusal != NULL || (m->credit < 0 && m->plan.enforce && !pauses(m));
}

int sl_meter_gate(struct sl_meter *m, const struct sl_meter_ctx *ctx, uint64_t now_us)
{
    m->ctx = *ctx;
    /* Each round either ends or gets an answer from a local take (more
     * credit, or a refusal); the bound only guards against a limiter that
     * answers without changing either. */
    for (int round = 0; round < 64; round++) {
        if (m->refusal != NULL && now_us < m->refused_until_us)
            return SL_METER_REFUSE;
        if (m->credit >= 0 || !m->plan.enforce || pauses(m))
            return SL_METER_GO;
        if (m->req != NULL)
            return SL_METER_HOLD;
        int64_t credit = m->credit;
        uint64_t until = m->refused_until_us;
        take(m, now_us);
        if (m->req != NULL)
            return SL_METER_HOLD;
        if (m->credit == credit && m->refused_until_us == until)
            break; /* nothing to ask (no limits any more) */
    }
    return SL_METER_GO;
}

void sl_meter_close(struct sl_meter *m)
{
    if (m->req != NULL)
        sl_limiter_cancel(m->req);
    m->req = NULL;
    if (sl_waits_default != NULL)
        sl_wait_cancel(sl_waits_default, &m->wait);
    free(m->refusal);
    m->refusal = NULL;
}

/* sluice — a session's link to its listener's pooled upstream connections
 * (`upstream_pool = N`, net/upool.h).
 *
 * A session on a pooled listener has no upstream socket of its own. What it
 * would write upstream goes to the listener's engine instead (one per
 * listener per worker, made with the first pooled session): on a shared
 * connection of the session's pool key, with the replies it owes for those
 * bytes (counted since the last submission: sl_sess_owe adds to it), or on
 * the connection pinned to it. What the engine reads for it comes back
 * through sl_sess_link_got (session.c), which feeds the protocol exactly as
 * a read of its own upstream socket would, so counting, metering, local
 * replies and shaping stay per client.
 *
 * The protocol (sess_resp.c) decides when to pin and unpin and which key
 * the session is on; this file only carries that out. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/log.h"
#include "net/listener.h"
#include "net/session.h"
#include "net/session-i.h"
#include "net/turn.h"
#include "net/upool.h"

struct sl_sess_link {
    struct sl_upool_owner o;     /* the engine's view of the session */
    struct sl_upool_key  *key;   /* the session's pool key (a reference) */
    struct sl_upool_conn *pin;   /* its own connection, or NULL */
    uint32_t              owe;   /* replies owed by the bytes not yet submitted */
    char                 *prelude;   /* the owner's prelude (sl_sess_link_prelude) */
    uint8_t               waiting;   /* queued for a pin past the cap */
    uint8_t               forgotten; /* the engine dropped it (a refused delivery) */
    uint8_t               slow;      /* the bytes not yet submitted hold a script */
};

static int on_deliver(struct sl_upool_owner *o, struct sl_buf *b, uint32_t from, uint32_t to,
                      unsigned flags)
{
    struct sl_session *s = o->data;
    int rc = sl_sess_link_got(s, b, from, to, flags);
    if (rc != 0 && s->link != NULL)
        s->link->forgotten = 1; /* the engine forgets it on our refusal */
    return rc;
}

static void on_failed(struct sl_upool_owner *o, int err, const char *why)
{
    struct sl_session *s = o->data;
    struct sl_sess_link *k = s->link;
    int was_pinned = k->pin != NULL;
    k->pin = NULL;
    k->waiting = 0;
    k->owe = 0;
    k->slow = 0;
    s->l->stats.pool_lost++;
    if (s->state >= SL_SESS_CLOSED)
        return;
    s->proto->link_lost(s, was_pinned, err, why);
}

static void on_pinned(struct sl_upool_owner *o, struct sl_upool_conn *c)
{
    struct sl_session *s = o->data;
    s->link->pin = c;
    s->link->waiting = 0;
    sl_sess_resume_later(s);
}

static const struct sl_upool_cbs link_cbs = { on_deliver, on_failed, on_pinned };

/* The end of the turn: what every session submitted leaves, one write per
 * connection (registered again when a session resumed after it submits). */
static void on_turn(struct sl_turn_node *n)
{
    struct sl_listener *l = (struct sl_listener *)((char *)n - offsetof(struct sl_listener, upool_tn));
    if (l->upool != NULL)
        sl_upool_flush_all(l->upool);
}

static void on_wake(void *arg)
{
    struct sl_listener *l = arg;
    if (sl_turn_later(&l->upool_tn, on_turn) < 0 && l->upool != NULL)
        sl_upool_flush_all(l->upool); /* no list: at once */
}

/* The engine's settings from the listener's (its configuration now: at
 * the first pooled session, and again at each reload). */
static void conf_of(struct sl_listener *l, struct sl_upool_conf *pc)
{
    const struct sl_listener_conf *lc = l->conf;
    memset(pc, 0, sizeof(*pc));
    memcpy(&pc->addr, &l->up.ss, sizeof(pc->addr));
    /* 0 after a reload to `off`: the engine keeps its N for the pooled
     * clients it still serves (sl_upool_reconfigure) */
    pc->per_key = lc->upstream_pool;
    pc->max_pinned = lc->pool_pinned > UINT32_MAX ? UINT32_MAX : (uint32_t)lc->pool_pinned;
    /* the wait is bounded by time (pool_pin_wait); the queue only by memory */
    pc->pin_wait_max = UINT32_MAX;
    pc->connect_timeout_ms = lc->connect_timeout_us / 1000 ? lc->connect_timeout_us / 1000 : 1;
    pc->own_flush = 0; /* flushed at the end of the turn (net/turn.h), after the sessions */
    pc->wake = on_wake;
    pc->wake_arg = l;
    /* TLS as a 1:1 session speaks it (session.c on_connect): the listener's
     * context and name, read at each connect, so a reload's new ones reach
     * new pooled connections too; resumptions counted in the same figure */
    pc->tls = &l->up_tls;
    pc->tls_name = l->up_sni;
    pc->tls_resumed = &l->stats.upstream_tls_resumed;
    pc->label = l->name;
    pc->batch_wait_us = lc->pool_batch_wait_us;
    pc->idle_timeout_ms = lc->pool_idle_timeout_us == 0 ? 0
                          : lc->pool_idle_timeout_us / 1000 ? lc->pool_idle_timeout_us / 1000 : 1;
}

/* The listener's engine in this worker, made on first use. */
static struct sl_upool *pool_of(struct sl_listener *l)
{
    if (l->upool != NULL)
        return l->upool;
    struct sl_upool_conf pc;
    conf_of(l, &pc);
    l->upool = sl_upool_new(l->handle.loop, &pc, &link_cbs);
    return l->upool;
}

void sl_session_pool_reconf(struct sl_listener *l)
{
    if (l->upool == NULL)
        return;
    struct sl_upool_conf pc;
    conf_of(l, &pc);
    sl_upool_reconfigure(l->upool, &pc);
}

void sl_session_pool_sweep(struct sl_listener *l)
{
    /* A listener a reload switched to 1:1 (`upstream_pool = off`): its
     * engine served the pooled clients it had; once none is left, its
     * connections close and the engine goes (its counters carried over). */
    if (l->upool == NULL || l->conf->upstream_pool > 0 || !sl_upool_unused(l->upool))
        return;
    struct sl_upool_stats st;
    sl_upool_stats(l->upool, &st);
    l->pool_failures_gone += st.failures;
    l->pool_dropped_gone += st.dropped_replies;
    sl_session_pool_close(l);
}

int sl_sess_link_open(struct sl_session *s, const void *id, size_t idlen, const char *setup,
                      size_t setuplen, uint32_t nsetup)
{
    struct sl_upool *p = pool_of(s->l);
    struct sl_sess_link *k = calloc(1, sizeof(*k));
    if (p == NULL || k == NULL) {
        free(k);
        return SL_ENOMEM;
    }
    sl_upool_owner_init(&k->o, s);
    if ((k->key = sl_upool_key_get(p, id, idlen, setup, setuplen, nsetup)) == NULL) {
        free(k);
        return SL_ENOMEM;
    }
    s->link = k;
    return 0;
}

int sl_sess_link_rekey(struct sl_session *s, const void *id, size_t idlen, const char *setup,
                       size_t setuplen, uint32_t nsetup)
{
    struct sl_sess_link *k = s->link;
    struct sl_upool_key *nk = sl_upool_key_get(s->l->upool, id, idlen, setup, setuplen, nsetup);
    if (nk == NULL)
        return SL_ENOMEM;
    sl_upool_key_put(k->key);
    k->key = nk;
    return 0;
}

void sl_sess_link_close(struct sl_session *s)
{
    struct sl_sess_link *k = s->link;
    if (k == NULL)
        return;
    /* always: forgetting twice is harmless, and a refusal the engine did
     * not act on (its connection was closing) must not leave it named */
    sl_upool_forget(&k->o);
    k->forgotten = 1;
    k->pin = NULL;
}

void sl_sess_link_free(struct sl_session *s)
{
    struct sl_sess_link *k = s->link;
    if (k == NULL)
        return;
    sl_sess_link_close(s);
    sl_upool_key_put(k->key);
    free(k->prelude);
    free(k);
    s->link = NULL;
}

int sl_sess_link_prelude(struct sl_session *s, const char *p, size_t len, uint32_t replies)
{
    struct sl_sess_link *k = s->link;
    char *c = NULL;
    if (len > 0 && (c = malloc(len)) == NULL)
        return SL_ENOMEM;
    if (len > 0)
        memcpy(c, p, len);
    free(k->prelude);
    k->prelude = c;
    k->o.prelude = c;
    k->o.prelude_len = (uint32_t)len;
    k->o.prelude_n = len > 0 ? replies : 0;
    return 0;
}

void sl_sess_link_owe(struct sl_session *s, uint32_t n)
{
    s->link->owe += n;
}

void sl_sess_link_slow(struct sl_session *s)
{
    s->link->slow = 1;
}

int sl_sess_link_send(struct sl_session *s, const char *p, size_t len)
{
    struct sl_sess_link *k = s->link;
    if (k->forgotten)
        return SL_ECLOSED;
    uint32_t owe = k->owe;
    unsigned flags = k->slow ? SL_UPOOL_SLOW : 0;
    k->owe = 0;
    k->slow = 0;
    return sl_upool_submit_flags(k->key, &k->o, p, len, owe, flags);
}

int sl_sess_link_pinned(const struct sl_session *s)
{
    return s->link->pin != NULL;
}

uint32_t sl_sess_link_inflight(const struct sl_session *s)
{
    return s->link->o.pinned ? 0 : s->link->o.inflight;
}

int sl_sess_link_waiting(const struct sl_session *s)
{
    return s->link->waiting;
}

int sl_sess_link_pin(struct sl_session *s, int wait)
{
    struct sl_sess_link *k = s->link;
    if (k->pin != NULL)
        return 1;
    if (k->waiting)
        return 0;
    if (k->forgotten)
        return SL_ECLOSED;
    int err = 0;
    struct sl_upool_conn *c = sl_upool_pin(k->key, &k->o, wait, &err);
    if (c != NULL) {
        k->pin = c;
        return 1;
    }
    if (err == UV_EBUSY)
        return 0; /* pooled replies still to come: the last one resumes the session */
    if (err == SL_EAGAIN) {
        k->waiting = 1;
        s->l->stats.pool_pin_waits++;
        return 0;
    }
    return err;
}

void sl_sess_link_unwait(struct sl_session *s)
{
    struct sl_sess_link *k = s->link;
    if (k->waiting) {
        sl_upool_forget(&k->o); /* withdraws the wait; nothing is in flight */
        k->waiting = 0;
    }
}

void sl_sess_link_unpin(struct sl_session *s, int clean)
{
    struct sl_sess_link *k = s->link;
    if (k->pin == NULL)
        return;
    struct sl_upool_conn *c = k->pin;
    k->pin = NULL;
    k->owe = 0;
    k->slow = 0;
    sl_upool_unpin(c, clean, 0);
}

void sl_session_pool_close(struct sl_listener *l)
{
    sl_turn_forget(&l->upool_tn);
    if (l->upool != NULL) {
        sl_upool_close(l->upool);
        l->upool = NULL;
    }
}

void sl_session_pool_stats(const struct sl_listener *l, struct sl_upool_stats *st)
{
    memset(st, 0, sizeof(*st));
    if (l->upool != NULL)
        sl_upool_stats(l->upool, st);
}

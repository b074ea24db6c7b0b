/* sluice — a listener's timeouts: the queues of sessions connecting,
 * lingering, in a handshake, waiting for a head, waiting for the upstream,
 * and idle, each in deadline order (core/tq.h); the sweep takes out what
 * expired and the listener's timer is armed for the next due. */
#include <stddef.h>
#include <stdint.h>

#include "core/log.h"
#include "core/tq.h"
#include "net/listener.h"
#include "net/session.h"
#include "net/session-i.h"

#define LINGER_MS 2000 /* how long a lingering close waits for EOF */

/* The timeouts of a listener's queues, in loop milliseconds, as the sweep
 * applies them and the process's timer is armed for them. */
enum { TO_CONNECT, TO_LINGER, TO_HANDSHAKE, TO_HEAD, TO_UPSTREAM, TO_IDLE, TO_N };

static uint64_t timeout_ms(const struct sl_listener *l, int which)
{
    const struct sl_listener_conf *c = l->conf;
    uint64_t ms;
    switch (which) {
    case TO_CONNECT:
        ms = c->connect_timeout_us / 1000;
        return ms ? ms : 1;
    case TO_LINGER:
        return LINGER_MS;
    case TO_HANDSHAKE:
        /* A TLS handshake gets header_timeout (10s when that is off: a
         * handshake never waits for ever). */
        ms = c->header_timeout_us / 1000;
        return ms ? ms : 10000;
    case TO_HEAD:
        /* 0 (turned off by a reload): its nodes are only taken out */
        ms = c->header_timeout_us / 1000;
        return ms ? ms : 1;
    case TO_UPSTREAM:
        ms = c->upstream_timeout_us / 1000;
        return ms ? ms : 1;
    default:
        return c->idle_timeout_us / 1000; /* 0: never */
    }
}

uint64_t sl_session_next_due(const struct sl_listener *l)
{
    const struct sl_tq *qs[TO_N] = { &l->connecting, &l->lingering, &l->handshaking,
                                     &l->heading, &l->awaiting, &l->active };
    uint64_t due = UINT64_MAX;
    for (int i = 0; i < TO_N; i++) {
        uint64_t t = timeout_ms(l, i);
        if (i == TO_IDLE && t == 0)
            continue;
        uint64_t d = sl_tq_due(qs[i], t);
        if (d < due)
            due = d;
    }
    return due;
}

void sl_session_sweep(struct sl_listener *l, uint64_t now)
{
    struct sl_tq_node *n;
    while ((n = sl_tq_expired(&l->connecting, now, timeout_ms(l, TO_CONNECT))) != NULL) {
        sl_tq_remove(n);
        sl_sess_connect_timed_out(sl_session_of(n));
    }
    while ((n = sl_tq_expired(&l->lingering, now, timeout_ms(l, TO_LINGER))) != NULL)
        sl_session_close(sl_session_of(n));

    while ((n = sl_tq_expired(&l->handshaking, now, timeout_ms(l, TO_HANDSHAKE))) != NULL) {
        struct sl_session *s = sl_session_of(n);
        sl_tq_remove(n);
        if (s->pp != NULL) {
            sl_sess_pp_refuse(s, "timed out (header_timeout)");
            continue;
        }
        l->stats.tls_handshake_failures++;
        sl_log_warn_rl("tls_handshake", "TLS handshake with a client failed", "listener=%s err=\"%s\"",
                       l->name, "timed out (header_timeout)");
        sl_session_close(s);
    }

    uint64_t ht = l->conf->header_timeout_us / 1000;
    while ((n = sl_tq_expired(&l->heading, now, timeout_ms(l, TO_HEAD))) != NULL) {
        struct sl_session *s = (struct sl_session *)((char *)n - offsetof(struct sl_session, hq));
        sl_tq_remove(n);
        if (ht == 0)
            continue; /* turned off by a reload */
        l->stats.header_timeouts++;
        sl_log_debug_rl("header_timeout", "header timeout", "listener=%s", l->name);
        s->proto->header_late(s);
        sl_sess_flush(s);
    }

    uint64_t ut = l->conf->upstream_timeout_us / 1000;
    while ((n = sl_tq_expired(&l->awaiting, now, timeout_ms(l, TO_UPSTREAM))) != NULL) {
        struct sl_session *s = (struct sl_session *)((char *)n - offsetof(struct sl_session, wq));
        sl_tq_remove(n);
        if (ut == 0)
            continue; /* turned off by a reload */
        l->stats.upstream_timeouts++;
        sl_log_debug_rl("upstream_timeout", "upstream timeout", "listener=%s", l->name);
        s->proto->upstream_late(s);
        sl_sess_flush(s);
    }

    uint64_t idle = timeout_ms(l, TO_IDLE);
    if (idle > 0) {
        while ((n = sl_tq_expired(&l->active, now, idle)) != NULL) {
            struct sl_session *s = sl_session_of(n);
            /* As in Redis: a blocked or subscribed client is not idle. */
            if (s->inflight > 0 || s->proto->busy(s)) {
                sl_tq_touch(&l->active, n, now);
                continue;
            }
            l->stats.idle_closed++;
            sl_session_close(s);
        }
    }
}

/* sluice — the session's side of upstream keep-alive (http,
 * upstream_keepalive): when its upstream connection may serve another
 * client, handing it to the listener's kept ones (net/upkeep.c), and
 * taking one instead of connecting. The handle itself moves (sessions hold
 * it by pointer): no descriptor is duplicated or registered again, and one
 * given back while read stays read. Private to src/net/ (session-i.h). */
#include "core/buf.h"
#include "core/tls.h"
#include "net/session.h"
#include "net/session-i.h"
#include "net/upkeep.h"

/* The transport is at rest: connected, nothing unsent or unread, and over
 * TLS an open engine holding nothing either way (no close_notify seen). */
static int transport_idle(const struct sl_session *s, size_t queued)
{
    const struct sl_tls *t = s->tls[1];
    if ((s->up_pause & SL_PAUSE_CONNECT) || s->tls_hs[1] || s->tls_eof[1] || queued > 0 ||
        (s->uin != NULL && s->uin->start < s->uin->end))
        return 0;
    return t == NULL || (sl_tls_state(t) == SL_TLS_OPEN && sl_tls_read_pending(t) == 0 &&
                         sl_tls_feed_room(t) == SL_TLS_IN_MAX && sl_tls_out_pending(t) == 0);
}

int sl_sess_keep_give(struct sl_session *s, size_t queued)
{
    if (s->l->conf->upstream_keepalive == 0 || s->proto->reusable == NULL ||
        !transport_idle(s, queued) || !s->proto->reusable(s))
        return 0;
    struct sl_tls *t = s->tls[1];
    s->tls[1] = NULL; /* the engine goes with the socket */
    /* Read now (plain, not paused, before the close path): it stays read
     * with the same callbacks, so a close while kept is seen at once and
     * the next session arms nothing. */
    int watched = t == NULL && s->up_pause == 0 && s->state < SL_SESS_LINGER;
    sl_upkeep_put(s->l, s->up_tcp, t, watched, sl_sess_now_ms(s));
    return 1;
}

int sl_sess_keep_take(struct sl_session *s)
{
    struct sl_listener *l = s->l;
    struct sl_tls *t = NULL;
    int watched = 0;
    uv_tcp_t *h = sl_upkeep_take(l, sl_sess_now_ms(s), &t, &watched);
    if (h == NULL)
        return 0;
    h->data = s;
    s->up_tcp = h;
    s->up_up = 1;
    s->handles++;
    s->tls[1] = t;
    s->up_kept = 1;
    /* A watched one reads already (TCP_NODELAY stays set from its first
     * session); the session's pause bits rule it from here: besides the
     * connect, which the caller clears at once, none may be set. */
    if (watched && (s->up_pause & ~SL_PAUSE_CONNECT) != 0)
        uv_read_stop((uv_stream_t *)h);
    l->stats.upstream_reused++;
    return 1;
}

void sl_sess_keep_again(struct sl_session *s, uint32_t unowe)
{
    s->tail_n -= unowe;
    s->inflight -= unowe;
    /* The engine goes with the old socket; its EOF was the old one's. */
    sl_tls_free(s->tls[1]);
    s->tls[1] = NULL;
    s->tls_eof[1] = 0;
    s->tls_hs[1] = 0;
    if (s->uin != NULL)
        s->uin->start = s->uin->end;
    s->up_kept = 2;
    s->state = SL_SESS_CONNECTING;
    sl_sess_pause(s, 0, SL_PAUSE_CONNECT, 1);
    s->up_pause = (uint8_t)((s->up_pause | SL_PAUSE_CONNECT) & ~SL_PAUSE_DONE);
    sl_tq_touch(&s->l->connecting, &s->tq, sl_sess_now_ms(s));
}

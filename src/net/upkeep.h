/* sluice — idle upstream connections kept for reuse (http, upstream_keepalive).
 *
 * A session whose upstream connection ends at a response boundary gives it
 * back instead of closing it; the next session of the listener takes it
 * instead of connecting (and, over TLS, instead of a handshake). What is
 * kept is the connection's libuv handle itself (a struct sl_upconn, which
 * sessions hold by pointer), with its TLS engine and when it was given
 * back: no descriptor is duplicated, closed or registered again.
 *
 * A connection given back while it was being read (plain TCP, not paused)
 * stays read while kept ("watched"): the upstream's close, a reset or any
 * byte (an idle HTTP connection owes nothing) drops it as it comes. One
 * given back unread (TLS, a paused side, a session torn down) is not read;
 * its liveness is checked when it is handed out (a MSG_PEEK), as is a
 * watched one idle for a second or more (a close may sit in the poll's
 * batch not yet handled).
 *
 * Per listener and per worker (each worker has its own listeners): at most
 * upstream_keepalive kept, the oldest closed first past that; each closed
 * once idle for upstream_keepalive_timeout (the sweep), and all of them on
 * a reload or a drain. */
#ifndef SL_NET_UPKEEP_H
#define SL_NET_UPKEEP_H

#include <stdint.h>
#include <uv.h>

#include "core/tq.h"
#include "net/listener-t.h"

struct sl_tls;

/* An upstream connection of a session (session.c) or kept. */
struct sl_upconn {
    uv_tcp_t            tcp;     /* first: sessions hold &tcp; tcp.data = the session using
                                    it, NULL while kept */
    struct sl_tq_node   node;    /* while kept: in l->kept, stamped when it went idle */
    struct sl_listener *l;       /* while kept */
    struct sl_tls      *tls;     /* while kept: its TLS engine, or NULL */
    uint8_t             watched; /* while kept: still read (see above) */
};

/* A new connection's handle, initialised on <loop> (NULL: out of memory). */
uv_tcp_t *sl_upconn_new(uv_loop_t *loop);

/* Frees the connection of handle <t> once its close callback ran. */
void sl_upconn_free(uv_tcp_t *t);

/* Keeps the connection of open handle <t> (and its TLS engine <tls>, or
 * NULL) for <l> from loop time <now> (ms); <watched>: it is being read
 * with the session's callbacks (net/session.c: a kept one's data is NULL),
 * else it is not read at all. Always takes both: what cannot be kept (the
 * listener is retired or draining, keep-alive is off) is closed. */
void sl_upkeep_put(struct sl_listener *l, uv_tcp_t *t, struct sl_tls *tls, int watched,
                   uint64_t now);

/* A kept connection for a new session of <l> at loop time <now>: the most
 * recently kept one that is still idle and that the upstream has not
 * closed (nor sent anything on). Returns its handle (its engine in
 * <*tls>, whether it is still read in <*watched>), or NULL when none is
 * left. Dead and stale ones met are closed. */
uv_tcp_t *sl_upkeep_take(struct sl_listener *l, uint64_t now, struct sl_tls **tls, int *watched);

/* A watched kept connection was read: EOF, an error or bytes; closed. */
void sl_upkeep_lost(uv_tcp_t *t);

/* Closes the kept sockets idle for upstream_keepalive_timeout at <now>. */
void sl_upkeep_sweep(struct sl_listener *l, uint64_t now);

/* When the oldest kept socket falls due (ms), UINT64_MAX if none is kept. */
uint64_t sl_upkeep_due(const struct sl_listener *l);

/* Closes every kept socket of <l> (reload, drain, the listener freed). */
void sl_upkeep_clear(struct sl_listener *l);

#endif

/* sluice — idle upstream connections kept for reuse (http, upstream_keepalive).
 *
 * A session whose upstream connection ends at a response boundary gives the
 * socket back instead of closing it; the next session of the listener takes
 * it instead of connecting (and, over TLS, instead of a handshake). What is
 * kept is the socket itself, not the session's libuv handle (the handle is
 * part of the session and goes with it): a duplicate of its descriptor, its
 * TLS engine, and when it was given back. A kept socket is not watched by
 * the loop; its liveness is checked when it is handed out.
 *
 * Per listener and per worker (each worker has its own listeners): at most
 * upstream_keepalive kept, the oldest closed first past that; each closed
 * once idle for upstream_keepalive_timeout (the sweep), and all of them on
 * a reload or a drain. */
#ifndef SL_NET_UPKEEP_H
#define SL_NET_UPKEEP_H

#include <stdint.h>

#include "net/listener-t.h"

struct sl_tls;

/* Keeps connected socket <fd> (and its TLS engine <tls>, or NULL) for <l>
 * from loop time <now> (ms). Always takes both: what cannot be kept (the
 * listener is retired or draining, keep-alive is off) is closed. */
void sl_upkeep_put(struct sl_listener *l, int fd, struct sl_tls *tls, uint64_t now);

/* A kept socket for a new session of <l> at loop time <now>: the most
 * recently kept one that is still idle and that the upstream has not
 * closed (nor sent anything on). Returns its descriptor (and its engine in
 * <*tls>), or -1 when none is left. Dead and stale ones met are closed. */
int sl_upkeep_take(struct sl_listener *l, uint64_t now, struct sl_tls **tls);

/* Closes <fd> (and frees <tls>, after a best-effort close_notify). */
void sl_upkeep_drop(int fd, struct sl_tls *tls);

/* Closes the kept sockets idle for upstream_keepalive_timeout at <now>. */
void sl_upkeep_sweep(struct sl_listener *l, uint64_t now);

/* When the oldest kept socket falls due (ms), UINT64_MAX if none is kept. */
uint64_t sl_upkeep_due(const struct sl_listener *l);

/* Closes every kept socket of <l> (reload, drain, the listener freed). */
void sl_upkeep_clear(struct sl_listener *l);

#endif

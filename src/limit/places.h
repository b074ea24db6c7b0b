/* sluice — connection places: a connection's seats under the connection
 * limits of its listener (metric = connections, max = N), and the login
 * queue of delay limits. Held in the store under a time to live the
 * process renews ([store] connection_lease), or counted in process. Not
 * to be confused with token leases ([store] lease, limit/tokens.h). */
#ifndef SL_LIMIT_PLACES_H
#define SL_LIMIT_PLACES_H

#include "limit/limiter.h"

/* The places a process holds, shared by every limiter a reload makes (so
 * places taken under an old configuration are still renewed). Made by the
 * server, passed in struct sl_limiter_env; freed after every connection. */
struct sl_places *sl_places_new(void);
void sl_places_free(struct sl_places *ps);

struct sl_place; /* a connection's places under its listener's connection limits */

/* The places connection <conn_id> (who: <ident>, known at accept) on
 * listener <lc> needs, or NULL when no connection limit applies. */
struct sl_place *sl_place_new(struct sl_limiter *lim, const struct sl_listener_conf *lc,
                              const struct sl_ident_state *ident, uint64_t conn_id);

/* Asks for the places: 0 with <v> filled (allow, or reject: v->action says
 * whether the refusing limit queues, SL_ACTION_DELAY), or 1 when the answer
 * comes through <cb>(<data>, v). Asking again (a queued connection polling)
 * keeps its place in the queue. */
int sl_place_acquire(struct sl_place *pl, struct sl_verdict *v, sl_limiter_cb *cb, void *data);

/* The login queue gave up on the connection (<v>: the last refusal of a
 * delay limit, max_delay passed): counted as that limit's rejection. */
void sl_place_gave_up(struct sl_place *pl, const struct sl_verdict *v);

/* The connection is gone: its places are given back (any answer still on
 * its way is dropped). NULL is fine. */
void sl_place_free(struct sl_place *pl);

/* For the limiter's own files: renews every store place the process
 * holds, in one call, once a third of [store] connection_lease has passed
 * since the last renewal (lim's clock, store and ttl). */
void sl_lim_places_renew(struct sl_limiter *lim);

#endif

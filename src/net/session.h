/* sluice — sessions: accept, connect upstream, relay, close. */
#ifndef SL_NET_SESSION_H
#define SL_NET_SESSION_H

#include "net/listener-t.h"
#include "net/session-t.h"

/* Accepts one pending connection on <l> and starts its session. */
void sl_session_accept(struct sl_listener *l);

/* Server drain: stop reading the client; close once nothing is in flight. */
void sl_session_drain(struct sl_session *s);

/* Closes both sockets now. Safe to call more than once. */
void sl_session_close(struct sl_session *s);

/* A lookup of <l>'s upstream name ended (answered or not): the sessions
 * waiting for it (resolve_ttl = 0) connect now, to l->up.ss. */
void sl_session_resolved(struct sl_listener *l);

/* Sweep work for one listener at loop time <now> (ms): connect timeouts,
 * idle timeouts, lingering closes, and giving back idle framers. */
void sl_session_sweep(struct sl_listener *l, uint64_t now);

/* The loop time (ms) at which the earliest timeout of <l>'s sessions falls
 * due (sl_session_sweep acts on it from then on), UINT64_MAX if none runs. */
uint64_t sl_session_next_due(const struct sl_listener *l);

/* Frees the pooled framers (at exit, so leak checkers stay quiet). */
void sl_session_pool_drain(void);

/* The name of the protocol <l>'s sessions speak ("resp", "http", "tcp"). */
const char *sl_session_proto_name(const struct sl_listener *l);

/* What a connection <l> refuses for lack of descriptors is told, in its
 * protocol, into <out> (before any session exists); 0 = nothing. */
size_t sl_session_refusal_fd(const struct sl_listener *l, char *out, size_t cap);

/* The end of a loop turn: sessions whose verdicts came from the store in
 * it forward what they now may, one write each for all of them. */
void sl_session_turn_end(void);

/* The listener's pooled upstream connections (upstream_pool) are closed
 * (the listener goes, or the server stops); sessions still linked to
 * them fail with the engine. */
void sl_session_pool_close(struct sl_listener *l);
/* A reload gave <l> its new configuration (or its upstream name resolved
 * to another address): its engine, if it has one, takes the new settings
 * (net/upool.h, RELOAD). */
void sl_session_pool_reconf(struct sl_listener *l);
/* Once a second: the engine of a listener switched to `upstream_pool =
 * off` goes once no pooled client is left. */
void sl_session_pool_sweep(struct sl_listener *l);
struct sl_upool_stats;
/* Its engine's numbers (zeros when it has none). */
void sl_session_pool_stats(const struct sl_listener *l, struct sl_upool_stats *st);

/* The session owning timeout-queue node <n>. */
struct sl_session *sl_session_of(struct sl_tq_node *n);

#endif

/* sluice — a host name looked up again at run time, off the loop.
 *
 * The configuration resolved each name once when it was loaded
 * (conf/resolve.h). A long-lived process must follow a name whose answer
 * moves (a replaced Kubernetes pod, a failed-over DNS record) without a
 * reload: the owner asks sl_resolve_stale() at each use and starts a lookup
 * with sl_resolve_start(), which runs getaddrinfo in libuv's thread pool
 * (uv_getaddrinfo) and never blocks the loop. Meanwhile, and after a failed
 * lookup, the last good address stays in use. */
#ifndef SL_CORE_RESOLVE_H
#define SL_CORE_RESOLVE_H

#include <netdb.h>

#include "core/resolve-t.h"

/* The lookup every sl_resolve_start() makes; tests replace it. */
extern sl_resolve_lookup_fn *sl_resolve_lookup;

/* Sets <r> to <host> (a name, or NULL / "" for a numeric address that is
 * never looked up), <port> (host order) and the address <ss> the
 * configuration resolved at <now_ms>; failing is cleared. A lookup in flight
 * stays in flight: its answer is dropped (SL_RESOLVE_STALE) when it is for
 * another name. <cb> and <data> are kept. */
void sl_resolve_set(struct sl_resolve *r, const char *host, uint16_t port,
                    const struct sockaddr_storage *ss, uint64_t now_ms);

/* 1 when <r> is a name whose answer (or last failure) is at least <ttl_us>
 * old at <now_ms> (ttl 0: always), and no lookup is in flight. */
int sl_resolve_stale(const struct sl_resolve *r, uint64_t now_ms, uint64_t ttl_us);

/* Starts a lookup of <r>'s name on <loop>; <r>'s callback runs when it ends.
 * Returns 0 (also when one is already in flight), or a libuv error (nothing
 * started; the address stays). */
int sl_resolve_start(struct sl_resolve *r, uv_loop_t *loop);

/* The owner of <r> goes away: a lookup in flight is cancelled or, when it
 * already runs, left to finish on its own without calling back. */
void sl_resolve_stop(struct sl_resolve *r);

/* What a lookup's result means for <r>, applied at <now_ms>: <status> 0 with
 * <ss> the chosen answer, or an error. Pure: no I/O, no clock. */
enum sl_resolve_event sl_resolve_apply(struct sl_resolve *r, int status,
                                       const struct sockaddr_storage *ss, uint64_t now_ms);

/* 1 when <a> and <b> are the same IPv4 or IPv6 address and port, else 0
 * (other families: never the same). */
int sl_resolve_same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b);

/* Picks from getaddrinfo's answers <ai> the first IPv4 address, else the
 * first IPv6 one, into <out> with <port> (host order). Returns 0, or -1 when
 * there is neither. IPv4 first: "localhost" is 127.0.0.1 as before names
 * were taken, and a service that listens on IPv4 only is reached. */
int sl_resolve_pick(const struct addrinfo *ai, uint16_t port, struct sockaddr_storage *out);

/* Writes the numeric form of <ss> ("10.0.0.7:6379", "[::1]:6379") into
 * <buf> of <cap> bytes, for logs. Returns <buf>. */
const char *sl_resolve_fmt(const struct sockaddr_storage *ss, char *buf, size_t cap);

#endif

/* sluice — host names in the configuration, resolved when a file is loaded.
 *
 * `upstream`, `listen`, the store's `url` and `admin` may name a host
 * ("redis.default.svc:6379"); the loader (check.c) resolves each name once,
 * with getaddrinfo(3): loading happens before the loop runs, or at a reload
 * between two loop turns, and `sluice -t` must say when a name does not
 * resolve. Names looked up again at run time are the exception: a store's
 * redis:// name or an upstream's that does not resolve yet (Compose start
 * order, a restarted Redis) is a warning, and the store (store/store.c) or
 * the listener (net/listener.c, without blocking: core/resolve.h) looks it
 * up again; `listen` and `admin` are bound at load and must resolve. */
#ifndef SL_CONF_RESOLVE_H
#define SL_CONF_RESOLVE_H

#include <stdint.h>
#include <sys/socket.h>

/* Resolves <host> into <out> with <port> (host order). Returns 0, or an
 * EAI_* code for gai_strerror(). */
typedef int sl_conf_resolve_fn(const char *host, uint16_t port, struct sockaddr_storage *out);

/* getaddrinfo(3), the first IPv4 answer, else the first IPv6 one
 * (core/resolve.h: sl_resolve_pick). */
sl_conf_resolve_fn sl_conf_resolve_system;

/* What the loader calls: sl_conf_resolve_system unless a test or a fuzzer
 * put its own (a fuzzer must not send random names to DNS). */
extern sl_conf_resolve_fn *sl_conf_resolve;

/* 1: names are not resolved at all (`sluice -t --no-resolve`, to check a
 * file written for another network: a Compose or Kubernetes one). A named
 * address then keeps an empty ss and the checks comparing addresses pass it
 * over. Only main's check mode sets it. */
extern int sl_conf_no_resolve;

#endif

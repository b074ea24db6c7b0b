/* sluice — where the master is, asked of Redis Sentinel.
 *
 * The quota store's "address source" for `url = redis-sentinel://...`. It
 * follows the Sentinel client spec (redis.io, "Sentinel client spec"):
 *
 *  - Asking: the sentinels are asked in turn `SENTINEL
 *    get-master-addr-by-name <name>` on a short connection each (AUTH first
 *    when a password is set). A refused or timed-out connect, an error
 *    reply, a nil answer ("I do not know that master"), a reply that is not
 *    an address, or no answer within the timeout moves on to the next. The
 *    first sentinel that gives an address goes first in the list for the
 *    next round. When none does while no master is known yet, "no master
 *    known" is logged (once per state change) and the round is retried with
 *    backoff (100 ms doubling to 2 s, +-25%) until one answers. When a
 *    master is known, a round that fails keeps it (logged, rate-limited) and
 *    is not retried: the next sl_sentinel_reask() or resubscription asks.
 *  - Following: one connection to one sentinel is SUBSCRIBEd to
 *    +switch-master; a message for our master name reports the new address
 *    at once. The subscription is PINGed (ping_us) and is moved to the next
 *    sentinel in the list when it is lost or stops answering; every
 *    resubscription asks again (a switch may have been missed meanwhile).
 *  - Re-asking: the store calls sl_sentinel_reask() when the master stops
 *    answering; a round starts unless one is running or waiting to retry.
 *
 * The callback runs only when the address is first known or differs from
 * the last one reported: an answer that repeats the current address reports
 * nothing. Sentinels learn a failover from each other (hello messages every
 * 2 s), so right after a +switch-master a sentinel that lags may still
 * answer the old address: for SL_SENTINEL_HOLD_MS after a switch, an answer
 * that names the address the switch left is counted as that sentinel's
 * failure (stats.stale) and the next one is asked, instead of flipping the
 * store back to the failed master. Whether the address is really a master (ROLE) is the store's to
 * see: it connects there anyway, and a node that answers -READONLY (a
 * replica: the old master back after a failover, or a switch not yet
 * complete) or stops answering makes the store call sl_sentinel_reask().
 *
 * Sentinels are reached by the numeric address the configuration resolved
 * (struct sl_addr's <ss>); the addresses sentinels give must be numeric
 * (IPv4 or IPv6: sentinels with announce-hostnames are not supported).
 *
 * With <tls>, every connection to a sentinel speaks TLS (store/tlsio.h):
 * the handshake, then AUTH and the question, all within the question's
 * timeout. The name sent as SNI and checked against the sentinel's
 * certificate is its host as written when that is a name, else its
 * address (the certificate's IP SANs). A failed handshake is that
 * sentinel's failure, like a refused connection. */
#ifndef SL_STORE_SENTINEL_H
#define SL_STORE_SENTINEL_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "store/sentinel-t.h"

/* Creates the client on <loop> and starts asking and subscribing. <conf> is
 * copied (addresses, strings). <cb>(<data>, master) reports the master.
 * Returns NULL on a bad <conf> (no sentinels, more than SL_SENTINEL_MAX, no
 * master name) or when out of memory. */
struct sl_sentinel *sl_sentinel_new(uv_loop_t *loop, const struct sl_sentinel_conf *conf,
                                    sl_sentinel_cb *cb, void *data);

/* The master stopped answering, or answered as a replica: ask the sentinels
 * again. Starts a round now unless one is in flight (its answer is fresh) or
 * a failed round waits for its retry (no master known yet: the backoff
 * holds). Reports only if the address changed. Safe to call at any rate:
 * one round at a time, each a few short connections. */
void sl_sentinel_reask(struct sl_sentinel *s);

/* Copies the current master address into <out>: 0, or -1 when none is
 * known yet (then <out> is untouched). */
int sl_sentinel_master(const struct sl_sentinel *s, struct sockaddr_storage *out);

/* Closes every connection and handle; no callback runs from here on; the
 * struct is freed once libuv has closed the handles (run the loop). */
void sl_sentinel_close(struct sl_sentinel *s);

/* A new TLS context (a reload read the certificate files again): the next
 * connections use it, live ones keep theirs. NULL is ignored. */
void sl_sentinel_set_tls(struct sl_sentinel *s, struct sl_tls_ctx *ctx);

/* Counters (borrowed, live). */
const struct sl_sentinel_stats *sl_sentinel_stats(const struct sl_sentinel *s);

/* Index (in the configured list) of the sentinel asked first in the next
 * round: the last one that answered. */
int sl_sentinel_preferred(const struct sl_sentinel *s);

/* Index (in the configured list) of the sentinel whose +switch-master
 * subscription is confirmed, or -1 while there is none. */
int sl_sentinel_subscribed(const struct sl_sentinel *s);

/* ---- pure parts, for the unit tests -------------------------------------- */

/* Parses a numeric <ip> (IPv4 or IPv6, <iplen> bytes) and a decimal <port>
 * (<portlen> bytes, 1..65535) into <out>. Returns 0 or -1. */
int sl_sentinel_parse_addr(const char *ip, size_t iplen, const char *port, size_t portlen,
                           struct sockaddr_storage *out);

/* Parses the payload of a +switch-master message, "<name> <oldip> <oldport>
 * <newip> <newport>" (<len> bytes at <msg>). Returns 1 with the new address
 * in <out> when it is about <name>, 0 when it is about another master, -1
 * when it is malformed. With 1, <old> (if not NULL) gets the old address,
 * or ss_family 0 when that is not numeric. */
int sl_sentinel_parse_switch(const char *msg, size_t len, const char *name,
                             struct sockaddr_storage *out, struct sockaddr_storage *old);

/* 1 when an answer <answer> given at <now_ms> is stale: it is the address
 * a +switch-master moved away from (<from>, heard at <switched_ms>; <from>
 * ss_family 0 = none heard) less than SL_SENTINEL_HOLD_MS ago. Pure. */
int sl_sentinel_stale(const struct sockaddr_storage *answer, const struct sockaddr_storage *from,
                      uint64_t switched_ms, uint64_t now_ms);

#endif

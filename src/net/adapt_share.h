/* sluice — the fleet's baseline (docs/adaptive.md, "The fleet's
 * baseline"): each adapting listener of each worker publishes its own
 * no-load baseline for its upstream through the quota store (lua/
 * baseline.lua) and hands the least live one back to its controller
 * (sl_adapt_fleet), so instances in front of one upstream compare latency
 * with one reference. Asynchronous: the loop never waits for the store;
 * a store that is down, slow or not configured leaves each controller on
 * its own baseline once the last answer's entry has expired. */
#ifndef SL_NET_ADAPT_SHARE_H
#define SL_NET_ADAPT_SHARE_H

#include <stddef.h>
#include <stdint.h>

#include "net/sess_adapt-t.h"

/* Publishes <c>'s baseline when one is due at <now> (nanoseconds, the
 * turn's clock): every second, or every probe period when that is
 * shorter; nothing when the listener has adaptive_share = off, the store
 * is local, or a publication is still in flight. */
void sl_actl_share(struct sl_actl *c, uint64_t now);

/* <c> goes away, or stops sharing: an answer still owed is not wanted,
 * and the fleet's value is forgotten. */
void sl_actl_share_stop(struct sl_actl *c);

/* The store key of <c>'s upstream in <buf> (<cap> bytes): <key_prefix>
 * adaptive:{ADDRESS}, the address as this instance connects to it, a
 * loopback one qualified by the host's name (another host's 127.0.0.1 is
 * another upstream). Returns its length, or 0 when the upstream has no
 * address yet. */
size_t sl_actl_share_key(const struct sl_actl *c, char *buf, size_t cap);

#endif

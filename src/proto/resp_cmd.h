/* sluice — RESP command classes for pooled listeners (`upstream_pool = N`).
 *
 * Pure (no I/O): which requests may share an upstream connection with other
 * clients (an allow-list of the stateless commands of Redis 7's command
 * table; anything else pins), which pin the client to a connection of its
 * own and until when, which move it to another pool key (user, database,
 * protocol version) and which sluice answers itself. docs/resp.md,
 * "Pooled listeners (upstream_pool)", is the contract.
 *
 *   sl_rcmd_class(req, &info);                        // at framing
 *   pinned = sl_rcmd_pinned(&pin) || info.cls == SL_RCMD_PIN;   // route
 *   added = sl_rcmd_pin_sent(&pin, &info, in_txn);     // written upstream
 *   ... its answer came (ok: not an error reply):
 *   sl_rcmd_pin_done(&pin, &info, added, ok);
 *   sl_pool_key_apply(&key, &info, ok);
 *   ... each (un)subscribe confirmation: sl_rcmd_pin_subs(&pin, count);
 */
#ifndef SL_PROTO_RESP_CMD_H
#define SL_PROTO_RESP_CMD_H

#include <stddef.h>
#include <stdint.h>

#include "proto/resp-t.h"
#include "proto/resp_cmd-t.h"

/* The class of request <r> (enum sl_rcmd_class); fills <*out>. */
int sl_rcmd_class(const struct sl_resp_req *r, struct sl_rcmd_info *out);

/* Nonzero when CLIENT LIST ID request <r> (opt SL_RLOPT_LIST_ID) names
 * client id <id>, written as Redis writes it. */
int sl_rcmd_list_id(const struct sl_resp_req *r, unsigned long long id);

/* Nonzero when a client name (CLIENT SETNAME, HELLO SETNAME) is one Redis
 * accepts: printable ASCII without spaces ('!' to '~'). */
int sl_rcmd_name_ok(const char *name, size_t len);

/* ---- the pin tracker: when a client's own connection can be given back ---- */

void sl_rcmd_pin_init(struct sl_rcmd_pin *p);

/* Nonzero while the client must stay on its own connection. */
int sl_rcmd_pinned(const struct sl_rcmd_pin *p);

/* Nonzero when RESET (then the pool key's AUTH/HELLO/SELECT) leaves the
 * pinned connection clean; else it is closed when the pin ends. */
int sl_rcmd_pin_clean(const struct sl_rcmd_pin *p);

/* Request <i> was written upstream (after its route was chosen); <in_txn>:
 * a transaction was open on the connection before it (a MULTI that Redis
 * takes written, and no EXEC, DISCARD or RESET since: the caller's model of
 * the connection tells, which knows a MULTI refused while subscribed under
 * RESP2 opens none). Applies the pins it starts and settles in <*i> what
 * its answer ends: an EXEC or DISCARD written with no transaction open
 * ends nothing (its <ends> cleared). Returns its token (the caller keeps
 * it and <*i> with the request for sl_rcmd_pin_done()). */
uint32_t sl_rcmd_pin_sent(struct sl_rcmd_pin *p, struct sl_rcmd_info *i, int in_txn);

/* The answer to request <i> came (all of it: an unsubscribe's last
 * confirmation); <ok>: it was not an error reply. <token>: what
 * sl_rcmd_pin_sent() returned for it. Answers come in the order the
 * requests were written. A request whose reply Redis skips (CLIENT REPLY
 * OFF|SKIP) gets no call: its pins end by their own rules. A bit that a
 * request written after <i> wants is left to that request's answer: an
 * error to the first of two pipelined WATCHes, or a CLIENT TRACKING OFF
 * answered while an ON written after it waits, does not unpin. */
void sl_rcmd_pin_done(struct sl_rcmd_pin *p, const struct sl_rcmd_info *i, uint32_t token, int ok);

/* Request <token> (written) left state of pin bits <bits> on the connection
 * whatever it answers, state the request's class does not say (a KEY
 * request sluice cannot follow: queued in MULTI, answered by no reply,
 * streamed, or with a password too long to keep): the bits are held until
 * an end written after it is answered, whatever requests written before
 * or since that want them answer. */
void sl_rcmd_pin_hold(struct sl_rcmd_pin *p, uint32_t token, uint32_t bits);

/* An (un)subscribe confirmation counted <n> subscriptions left. */
void sl_rcmd_pin_subs(struct sl_rcmd_pin *p, long n);

/* ---- the pool key ---- */

/* The key of a new connection: user "default", database 0, RESP2. */
void sl_pool_key_default(struct sl_pool_key *k);

/* Orders keys (memcmp-like); equal keys may share connections. */
int sl_pool_key_cmp(const struct sl_pool_key *a, const struct sl_pool_key *b);

/* A hash of <k> (equal keys, equal hashes). */
uint32_t sl_pool_key_hash(const struct sl_pool_key *k);

/* The answer to KEY request <i> came (<ok>: not an error): the key moves
 * only then, and only as far as the request said. Returns nonzero when the
 * key changed. Requests of other classes change nothing. */
int sl_pool_key_apply(struct sl_pool_key *k, const struct sl_rcmd_info *i, int ok);

#endif

/* sluice — the RESP connection model: what Redis makes of a connection.
 *
 * Pure (no I/O, no clock): the session tells it which requests went
 * upstream and which replies came back; it answers how many replies each
 * request is owed, whether a reply answers a request or is a push (pub/sub
 * messages, MONITOR's feed), and what the connection's mode is (CLIENT
 * REPLY, RESP3, MULTI, pub/sub), so a local reply (a rejection, a protocol
 * error) takes exactly the place Redis's own would.
 *
 *   fx = sl_rconn_classify(req, &nchan); kind = sl_rconn_kind(req);   // at framing
 *   ... if the request goes upstream:
 *   replies = sl_rconn_commit(c, fx, nchan, &unsub); sl_rconn_allowed(c, kind, replies);
 *   ... if sluice refuses it:
 *   replies = sl_rconn_refused(c, &ping); sl_rconn_rejected(c);
 *   ... for each upstream reply:
 *   sl_rconn_reply_begin(c); sl_rconn_reply_bytes(c, p, n)...;
 *   push = sl_rconn_reply_end(c, is_push, &confirm);
 */
#ifndef SL_PROTO_RESP_CONN_H
#define SL_PROTO_RESP_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "proto/resp-t.h"
#include "proto/resp_conn-t.h"

/* A new connection: RESP2, replies on, nothing subscribed. */
void sl_rconn_init(struct sl_resp_conn *c);

/* ---- requests, when framed ---- */

/* What <r> would change if it goes upstream (enum sl_fx); <*nchan>: the
 * channels an (un)subscribe names. */
uint8_t sl_rconn_classify(const struct sl_resp_req *r, uint32_t *nchan);

/* What <r> is to the order of verdicts (enum sl_pk, never HEAD or TAIL). */
int sl_rconn_kind(const struct sl_resp_req *r);

/* Nonzero when <r> is a command the model only relays: a kind of
 * SL_PK_PLAIN and an effect of SL_FX_PLAIN, answered by one reply (a GET,
 * a SET). The same as asking sl_rconn_kind() and sl_rconn_classify(), with
 * most names turned away by their length alone. */
int sl_rconn_plain(const struct sl_resp_req *r);

/* Nonzero when <r> is one of the commands client libraries send as they
 * connect (SELECT, PING, INFO, COMMAND DOCS, CLIENT SETNAME, CLUSTER
 * SLOTS ...): while a connection sets itself up they are not charged. */
int sl_rconn_is_setup(const struct sl_resp_req *r);

/* ---- requests, when decided ---- */

/* A request of effect <fx> goes upstream: applies what it changes and
 * returns how many replies the upstream owes for it. Sets <*unsub> to the
 * kind (0 channels, 1 patterns, 2 shard channels) of an unsubscribe of
 * everything, whose confirmations are counted only when its turn comes: the
 * caller queues a marker in its reply queue (see sl_rconn_unsub_due());
 * else to -1. */
uint32_t sl_rconn_commit(struct sl_resp_conn *c, uint8_t fx, uint32_t nchan, int *unsub);

/* The transaction bookkeeping for a request of <kind> that went upstream
 * owing <replies> (after sl_rconn_commit). */
void sl_rconn_allowed(struct sl_resp_conn *c, int kind, uint32_t replies);

/* A request sluice refuses: how many replies the client expects for it
 * (the rejection goes in their place). Refused under CLIENT REPLY SKIP, it
 * was the request whose reply the client asked Redis to skip, but Redis
 * never sees it and would skip the next one instead: <*ping> is set, a
 * PING must take its place upstream, and Redis skips the PING's reply. */
uint32_t sl_rconn_refused(struct sl_resp_conn *c, int *ping);

/* A refused request inside MULTI dooms the EXEC, as a queuing error does. */
void sl_rconn_rejected(struct sl_resp_conn *c);

/* EXEC after such a rejection went upstream as DISCARD: no transaction. */
void sl_rconn_exec_aborted(struct sl_resp_conn *c);

/* A request of effect <fx> and kind <kind> whose meaning depends on whether
 * the connection is subscribed (under RESP2, outside MULTI, Redis refuses
 * it while subscribed), sent when that is not yet known: it should wait
 * until sl_rconn_sub_unsure() says the confirmations told. */
int sl_rconn_sub_wait(const struct sl_resp_conn *c, uint8_t fx, int kind);
int sl_rconn_sub_unsure(const struct sl_resp_conn *c);

/* ---- the unsubscribe-all markers ---- */

/* A marker of <kind> reached the head of the reply queue (every
 * confirmation before it has come): how many confirmations it brings (the
 * connection's count of that kind, or one when it has none). */
uint32_t sl_rconn_unsub_due(struct sl_resp_conn *c, uint32_t kind);

/* A reply that is not a confirmation came while a marker still expected
 * <n> more: they will not come. */
void sl_rconn_settled(struct sl_resp_conn *c, uint32_t n);

/* A marker left the reply queue. */
void sl_rconn_mark_gone(struct sl_resp_conn *c);

/* ---- replies ---- */

/* Nonzero when a plain command (sl_rconn_plain) sent now is owed exactly
 * one reply and changes nothing in the model (replies on, no MULTI open):
 * sl_rconn_commit() would return 1 and sl_rconn_allowed() do nothing, so a
 * run of them may be counted instead. */
int sl_rconn_plain_one(const struct sl_resp_conn *c);

/* Nonzero when the replies to come need no telling apart (no pub/sub,
 * MONITOR, or RESET answer on its way): a reply that is not a push then
 * answers one request, and begin/bytes/end would change nothing but what
 * this does itself. Call it between replies only. */
int sl_rconn_replies_plain(struct sl_resp_conn *c);

/* A reply begins. */
void sl_rconn_reply_begin(struct sl_resp_conn *c);

/* <n> more bytes of the reply in progress. */
void sl_rconn_reply_bytes(struct sl_resp_conn *c, const char *p, size_t n);

/* The reply ended (<push>: it was a RESP3 push). Returns nonzero when it
 * answers no request (a message, a feed line, a push); <*confirm> is set
 * for an (un)subscribe confirmation. */
int sl_rconn_reply_end(struct sl_resp_conn *c, int push, int *confirm);

/* Pub/sub or MONITOR: replies come unasked (the connection is not idle). */
int sl_rconn_passthru(const struct sl_resp_conn *c);

#endif

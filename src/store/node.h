/* sluice — one connection to one Redis node, on the store's loop.
 *
 * A node connects (to the address its owner gives it: sl_node_connect()),
 * runs the handshake (AUTH, SELECT, SCRIPT LOAD of every script of the
 * store), then carries pipelined requests: one write per loop turn, replies
 * read with hiredis's reader in wire order, each request with its own
 * deadline. A request past its deadline makes the node suspect (not up for
 * new requests) until a probe is answered in time; a lost connection fails
 * everything in flight at once and reconnects with backoff. EVALSHA meeting
 * NOSCRIPT loads the script on this node and retries once.
 *
 * The node tells its owner (store/store-i.h) when its health changes, when
 * it needs an address to connect to, when a reply is a cluster redirection
 * and when a slot map arrives: the owner routes, the node only carries. */
#ifndef SL_STORE_NODE_H
#define SL_STORE_NODE_H

#include "store/node-t.h"

#define SL_NODE_BACKOFF_MIN_MS 100   /* first retry after a failure */
#define SL_NODE_BACKOFF_MAX_MS 2000  /* retries are at most this far apart */

/* A node of <st> named <name> (for logs) at <ss> (copied; may be replaced
 * by sl_node_connect()). It does not connect yet. NULL on OOM. */
struct sl_node *sl_node_new(struct sl_store *st, const char *name,
                            const struct sockaddr_storage *ss);

/* Connects to <ss> (NULL: the address it has) when disconnected; else
 * nothing. A retired node is revived. */
void sl_node_connect(struct sl_node *nd, const struct sockaddr_storage *ss);

/* Drops the connection (requests in flight complete with SL_ESTORE, <why>)
 * and reconnects at once (reconfigure), or, with <retire>, never again
 * until sl_node_connect(). */
void sl_node_drop(struct sl_node *nd, const char *why, int retire);

/* Closes every handle; requests in flight complete with SL_ESTORE first.
 * The owner's sl_store_node_freed() runs once all are closed. */
void sl_node_close(struct sl_node *nd);

/* 1 while connected, scripts loaded, and not suspect. */
int sl_node_up(const struct sl_node *nd);

/* Puts <r> (its <cmd> encoded) on the wire with its deadline <r>->deadline
 * (0: none, an internal command). With <asking>, an ASKING goes first.
 * Returns 0 or -1 (OOM). */
int sl_node_send(struct sl_node *nd, struct sl_store_req *r, int asking);

/* Queues an internal command <argv> (no callback, no deadline) of <kind>.
 * Returns the request or NULL (OOM). */
struct sl_store_req *sl_node_cmd(struct sl_node *nd, enum sl_req_kind kind, int script,
                                 int argc, const struct sl_str *argv);

/* Takes <r> off <nd>'s deadline list (it moves to another node). */
void sl_node_unlist(struct sl_node *nd, struct sl_store_req *r);

/* Runs <r>'s callback (if not cancelled) with <status>, marking it done. */
void sl_node_complete(struct sl_node *nd, struct sl_store_req *r, int status, const int64_t *vals,
                      int n, const char *err);

/* Tries writing what is queued now (close: the heartbeat's goodbye). */
void sl_node_try_write_now(struct sl_node *nd);

#endif

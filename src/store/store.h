/* sluice — the asynchronous client of the quota store (a Redis, or a Redis
 * Cluster: then everything below holds per master, a call goes to the
 * master of its keys' slot, and a call whose keys are in several slots is
 * sent as one call per slot with its reply merged: store/cluster.c).
 *
 * One TCP connection per sluice process (per master), on the process's libuv loop.
 * Requests made during one loop turn are written together (one pipelined
 * write); replies are parsed with hiredis's reader (object functions that
 * keep only integers and an error text); each request has its own deadline
 * (<timeout>); a request past it completes with SL_ESTORE and marks the
 * store down. While down, requests fail at once (SL_ESTORE) and a background
 * probe reconnects with backoff; the store is up again after a successful
 * connect + script load. On connect: AUTH (user/password), SELECT db, SCRIPT
 * LOAD of every script. EVALSHA that meets NOSCRIPT (SCRIPT FLUSH, a store
 * restart) loads the script again and retries once, invisibly to callers.
 *
 * Heartbeat: every second the store client refreshes this instance's entry
 * in the set <key_prefix>instances (a ZSET of instance id -> expiry time,
 * entries expire after 5 s) and reads how many instances are live; the last
 * count seen stays when the store is gone. */
#ifndef SL_STORE_STORE_H
#define SL_STORE_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "conf/conf-t.h"

struct sl_store;     /* opaque outside store/ */
struct sl_store_req; /* one request in flight; opaque */

/* Scripts embedded at build time from lua/. */
enum sl_script {
    SL_SCRIPT_DECIDE = 0, /* lua/decide.lua (+ the algorithms): several limits, all or nothing */
    SL_SCRIPT_HEARTBEAT,  /* lua/heartbeat.lua */
    SL_SCRIPT_CONNECTIONS,/* lua/connections.lua: connection places and the login queue */
    SL_SCRIPT_INSPECT,    /* lua/inspect.lua (+ the algorithms, read-only): one bucket read
                             or reset, for the limits API */
    SL_SCRIPT_USAGE,      /* lua/usage.lua: one identity-window's usage added once */
    SL_SCRIPT_BASELINE,   /* lua/baseline.lua: an upstream's no-load latency, published
                             by each adapting listener, the least of them read back */
    SL_SCRIPT_COUNT
};

#define SL_STORE_MAX_VALS 128 /* integers in one reply, at most */

/* Completion of a request. <status> is 0 with the reply's integers in
 * <vals> (<n> of them; a reply that is a single integer gives n = 1), or
 * SL_ESTORE (timeout, connection lost, store down, an error reply: <err>
 * holds its text or NULL). Called exactly once unless cancelled. */
typedef void sl_store_cb(void *data, int status, const int64_t *vals, int n, const char *err);

/* Completion of an HGET (sl_store_hget()): <status> 0 with the value in
 * <text>, <len> bytes (borrowed: valid during the call; not NUL-terminated
 * by contract), or <text> NULL when the field or key does not exist; or
 * SL_ESTORE (timeout, connection lost, store down, an error reply, a value
 * longer than SL_STORE_TEXT_CAP): <text> then holds the reason or NULL.
 * Called exactly once unless cancelled. */
typedef void sl_store_text_cb(void *data, int status, const char *text, size_t len);

#define SL_STORE_TEXT_CAP 256 /* bytes of an HGET value kept; longer is an error */

/* A byte string argument. */
struct sl_str {
    const char *p;
    size_t      len;
};

/* Creates the client and starts connecting. <conf> is copied. <instance_id>
 * names this process in the heartbeat set. Returns NULL on OOM. */
struct sl_store *sl_store_new(uv_loop_t *loop, const struct sl_store_conf *conf,
                              const char *instance_id);

/* Applies a new configuration (reload): reconnects if the address, user,
 * password or db changed; timeouts apply to new requests. */
void sl_store_reconfigure(struct sl_store *st, const struct sl_store_conf *conf);

/* Closes the connection and every handle; pending requests complete with
 * SL_ESTORE first; the struct is freed once the handles are closed. */
void sl_store_close(struct sl_store *st);

/* Runs script <id> with <nkeys> keys and <nargs> arguments (copied).
 * Returns the request (to cancel it) or NULL when the store is down (in a
 * cluster: the master of a slot of its keys) or out of memory: then <cb> is
 * NOT called and the caller applies on_failure. In a cluster, a decide or
 * connections call whose keys are in several slots is sent as one call per
 * slot and <cb> gets the merged reply in the same layout (docs: "Redis
 * Cluster as the store"); any other call goes to its first key's slot. */
struct sl_store_req *sl_store_eval(struct sl_store *st, enum sl_script id,
                                   int nkeys, const struct sl_str *keys,
                                   int nargs, const struct sl_str *args,
                                   sl_store_cb *cb, void *data);

/* HGET <key> <field>, routed like a script call on <key> (the node serving
 * its slot in a cluster). Returns the request, or NULL when the store (that
 * node) is down or out of memory: then <cb> is NOT called. */
struct sl_store_req *sl_store_hget(struct sl_store *st, struct sl_str key, struct sl_str field,
                                   sl_store_text_cb *cb, void *data);

/* The caller no longer wants the answer (its session closed): <cb> will
 * not be called. The request still completes on the wire. <req> is valid
 * only until its <cb> has run: keep no pointer to it after that. */
void sl_store_cancel(struct sl_store_req *req);

/* 1 while the store is connected and its scripts are loaded. */
int sl_store_up(const struct sl_store *st);

/* This process's name in the store (the heartbeat's member; connection
 * leases are named after it). */
const char *sl_store_instance_id(const struct sl_store *st);

/* Live sluice instances seen in the heartbeat set (at least 1). */
uint64_t sl_store_live_instances(const struct sl_store *st);

/* Counters for the metrics. */
struct sl_store_stats {
    uint64_t requests;        /* requests sent */
    uint64_t errors;          /* completed with SL_ESTORE */
    uint64_t timeouts;        /* of which: deadline passed */
    uint64_t noscript_reloads;/* NOSCRIPT seen and recovered */
    uint64_t reconnects;      /* successful connects after the first */
    uint64_t latency_le[12];  /* round trips <= 100us 250us 500us 1ms 2.5ms 5ms 10ms 25ms 50ms 100ms 250ms +Inf (cumulative NOT required: per bucket) */
    uint64_t latency_sum_us;  /* sum of round trips */
    uint64_t latency_count;   /* round trips measured */
    uint64_t redirects_moved; /* cluster: MOVED replies followed or not */
    uint64_t redirects_ask;   /* cluster: ASK replies */
    uint64_t map_refreshes;   /* cluster: slot maps read */
    uint64_t map_errors;      /* cluster: slot map requests that failed */
    uint64_t split_calls;     /* cluster: calls whose keys were in several slots */
    uint64_t nodes;           /* masters known (gauge; single node: 1) */
    uint64_t nodes_up;        /* of which up (gauge) */
};
extern const uint64_t sl_store_latency_bounds_us[11]; /* the finite bucket bounds above */
const struct sl_store_stats *sl_store_stats(const struct sl_store *st);

/* ---- additions: scripts beyond the built-in ones, introspection -------- */

/* Registers one more script body for <st> (copied); it is loaded on every
 * connect like the built-in ones, and at once through the NOSCRIPT path if
 * the store is already up. Returns its id (>= SL_SCRIPT_COUNT, to pass to
 * sl_store_eval() as an enum sl_script) or -1 (table full, out of memory).
 * For tests and tools. */
int sl_store_script_add(struct sl_store *st, const char *body);

/* Replaces the body of script <id> for <st> (copied): tests stand in their
 * own heartbeat while lua/ holds a placeholder. Returns 0 or -1. */
int sl_store_script_set(struct sl_store *st, int id, const char *body);

/* The 40 hex digits EVALSHA names script <id> by (borrowed from <st>), or
 * NULL for an unknown id. */
const char *sl_store_script_sha(const struct sl_store *st, int id);

/* Requests whose replies are still owed on the connection (timed-out ones
 * included), internal ones too. */
size_t sl_store_in_flight(const struct sl_store *st);

#endif

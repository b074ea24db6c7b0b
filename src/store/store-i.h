/* sluice — the quota store's inside, shared by store.c (the facade: one
 * node or a cluster, requests, heartbeat, stats), cluster.c (the slot map,
 * redirections, calls split over slots) and node.c (one connection). */
#ifndef SL_STORE_STORE_I_H
#define SL_STORE_STORE_I_H

#include "core/resolve-t.h"
#include "store/node-t.h"

#define SL_STORE_MAX_NODES 255      /* cluster nodes known at once */
#define SL_STORE_MAX_REDIRECTS 5    /* MOVED/ASK followed for one request */

struct script {
    char     *body;      /* owned */
    size_t    len;
    char      sha[41];   /* hex SHA-1 of body, what EVALSHA names */
};

/* Where the single node is ("the address source"): called when the node is
 * about to (re)connect. It calls sl_node_connect(<nd>, address) once it
 * knows where to go, at once or later (after a lookup). Today: the url's
 * host, looked up again before each reconnect (core/resolve.h); a Sentinel
 * source asks the sentinels instead and plugs in here. */
typedef void sl_store_locate_fn(struct sl_store *st, struct sl_node *nd);

struct sl_store {
    uv_loop_t            *loop;
    struct sl_store_conf  conf;      /* deep copy, strings owned (seeds too) */
    char                 *id;        /* instance id for the heartbeat */
    char                 *hb_key;    /* <key_prefix>instances */
    uint64_t              timeout_ms;
    struct script         scripts[SL_STORE_MAX_SCRIPTS];
    int                   n_scripts;

    uv_timer_t            hb_timer;      /* heartbeat period */
    uv_timer_t            refresh_timer; /* cluster: the next map refresh */
    int                   handles;       /* own handles + nodes not yet freed */
    struct sl_resolve     res;           /* single node: its address, looked up again */
    sl_store_locate_fn   *locate;        /* single node: the address source */
    struct sl_sentinel   *sentinel;      /* url = redis-sentinel://: where the master is */
    struct sl_tls_ctx    *tls;           /* [store] tls: the context new connections use
                                            (each engine holds a reference), or NULL */

    uint8_t               closing;       /* sl_store_close() called */
    uint8_t               cluster;       /* url = redis-cluster:// */
    int                   logged;        /* -1 nothing logged yet, 0 "down", 1 "up" */
    uint64_t              live;          /* instances seen in the heartbeat set */
    struct sl_store_req  *hb_req;        /* heartbeat in flight, not yet done */

    struct sl_node       *single;        /* !cluster: the one node */
    struct sl_node       *nodes[SL_STORE_MAX_NODES]; /* every node made (single too) */
    int                   n_nodes;
    uint8_t              *slot_node;     /* cluster: slot -> node index + 1 (0: unknown) */
    uint8_t               map_ok;        /* cluster: a map was read */
    uint8_t               map_slots;     /* cluster: CLUSTER SHARDS unknown: ask CLUSTER SLOTS */
    struct sl_store_req  *map_req;       /* cluster: refresh in flight */
    uint64_t              map_last_ms;   /* loop ms of the last refresh sent */
    uint64_t              map_backoff_ms;/* wait before the next one after a failure */
    uint8_t               map_armed;     /* refresh_timer armed */
    uint8_t               map_applying;  /* a new map is being put in place */
    struct sl_resolve    *seed_res;      /* cluster: the seeds' names (n_seeds), made when
                                            one that did not resolve at load is to be
                                            tried: looked up again, off the loop */
    int                   n_seed_res;    /* ... entries (the seeds when it was made) */

    struct sl_store_req  *pool;          /* free request structs */
    size_t                pool_n;

    struct sl_store_stats stats;
};

/* ---- requests (store.c) ---- */
struct sl_store_req *sl_store_req_get(struct sl_store *st);
void sl_store_req_put(struct sl_store *st, struct sl_store_req *r);

/* Makes an EVALSHA request of <kind> on <nd>, with the store's timeout as
 * its deadline; NULL on OOM. */
struct sl_store_req *sl_store_eval_on(struct sl_store *st, struct sl_node *nd, int kind,
                                      int script, int nkeys, const struct sl_str *keys,
                                      int nargs, const struct sl_str *args);
/* 1 when <nd> takes new requests now (up, and its unsent bytes under a cap). */
int sl_store_node_usable(const struct sl_node *nd);

/* The loop ms <ms> from now, read now (for a call's deadline). */
uint64_t sl_store_deadline(struct sl_store *st, uint64_t ms);
/* Makes a node of <st> (not connecting yet); NULL when the table is full or OOM. */
struct sl_node *sl_store_add_node(struct sl_store *st, const char *name,
                                  const struct sockaddr_storage *ss);

/* ---- what a node tells its owner (store.c, cluster.c) ---- */

/* <nd> went up or down (or changed while the store is closing: nothing). */
void sl_store_node_health(struct sl_store *st, struct sl_node *nd, const char *why);
/* <nd> is disconnected and wants to connect again: where to? */
void sl_store_node_locate(struct sl_store *st, struct sl_node *nd);
/* <nd> is suspect: send a probe on it (a heartbeat or a PING). */
void sl_store_node_probe(struct sl_store *st, struct sl_node *nd);
/* A node of <st> is freed after sl_node_close(). */
void sl_store_node_freed(struct sl_store *st);
/* An error reply <text> to <r> on <nd>: a MOVED or ASK is followed (1: <r>
 * went back on a wire, the node must forget it), else 0. */
int sl_store_redirect(struct sl_store *st, struct sl_node *nd, struct sl_store_req *r,
                      const char *text);
/* The reply to a map request (<tk> its elements, or <err>). */
void sl_store_map_reply(struct sl_store *st, struct sl_node *nd, const struct sl_slot_toks *tk,
                        const char *err);
/* The heartbeat's reply: the live count. */
void sl_store_heartbeat_reply(struct sl_store *st, int status, const int64_t *vals, int n);

/* ---- the cluster (cluster.c) ---- */
int sl_cluster_start(struct sl_store *st);
/* The seeds' lookups stop (the store closes, or starts over). */
void sl_cluster_seeds_stop(struct sl_store *st);
/* A refresh of the map is wanted (a redirection, a node lost), rate-limited. */
void sl_cluster_want_refresh(struct sl_store *st);
/* The node serving <slot>, or NULL. */
struct sl_node *sl_cluster_node_of(const struct sl_store *st, unsigned slot);
/* Finds or makes (connecting it) the node at <ip>:<port>. NULL: bad address, table full. */
struct sl_node *sl_cluster_node_at(struct sl_store *st, const char *ip, uint16_t port);
/* sl_store_eval() for a cluster: routes by slot, splits a call over slots. */
struct sl_store_req *sl_cluster_eval(struct sl_store *st, int id, int nkeys,
                                     const struct sl_str *keys, int nargs,
                                     const struct sl_str *args, sl_store_cb *cb, void *data);
/* A node became ready: the map may be asked of it. */
void sl_cluster_node_ready(struct sl_store *st, struct sl_node *nd);

#endif

/* sluice — what the files of the limiter share (private to src/limit/).
 *
 * The limiter is one object cut along its concepts:
 *
 *   limiter.c   building, deciding a request, the store round trip, token leases
 *   match.c     which limits a request meets; the limit-count check at load
 *   buckets.c   in-process buckets and their bounded tables
 *   conns.c     connection places and the login queue (sl_lease_*)
 *   stats.c     counters, delay histograms, busiest identities, reports
 *
 * They include this header, and nothing outside src/limit/ may. Shared
 * internal functions carry the prefix sl_lim_ and are declared here with
 * their contracts, grouped by the file that defines them. */
#ifndef SL_LIMIT_LIMITER_I_H
#define SL_LIMIT_LIMITER_I_H

#include <stdint.h>
#include <stdio.h>

#include "identity/identity-t.h"
#include "limit/algo.h"
#include "limit/idtable.h"
#include "limit/limiter.h"
#include "proto/req-t.h"
#include "store/store.h"

#define MAX_REQ_LIMITS 16 /* limits one request (or byte take) can meet: checked at load */
#define MAX_CONN_LIMITS 8 /* connection limits one connection can meet: checked at load */
#define TOP_K          10 /* busiest identities kept per limit, for /stats */
#define KEY_MAX (64 + SL_ID_MAX + 80) /* a store key: <key_prefix>{<limit>:<identity>} */

/* A "space saving" counter: the K identities seen most, approximately.
 * A newcomer replaces the least counted entry and inherits its count as
 * its error: the identity made at least n - err and at most n of the
 * requests counted, so a spray of new identities can raise what an entry
 * might be, never what it is reported to be for sure (/stats reports
 * n - err and err). */
struct top {
    char     id[SL_ID_MAX + 1];
    uint64_t n;    /* requests counted since it entered, plus <err> */
    uint64_t err;  /* the count it inherited: at most this many are not its own */
};

/* How long requests or bytes waited (or, for a shadow limit, would have),
 * for the metrics' histograms. */
#define DELAY_BUCKETS 12
struct sl_delay_hist {
    uint64_t le[DELAY_BUCKETS + 1]; /* per bucket, the last is +Inf */
    uint64_t sum_us;
    uint64_t max_us;                /* the longest, for /stats */
};

/* An in-process bucket, or an entry of what the store said (key '\0' +
 * identity, see lease_entry): each kind in its own bounded table of the
 * limit (limit/idtable.h, [store] max_identities). */
struct bucket {
    struct sl_idt_node   node;   /* in L->buckets or L->entries (key: key[] below) */
    struct sl_algo_state st;     /* algorithm state */
    /* A lease entry (key: '\0' + identity, see lease_entry) instead: */
    uint64_t             lease;      /* tokens taken from the store, not spent yet */
    uint64_t             deny_until; /* the store said no to <deny_cost> until then (us) */
    uint64_t             deny_cost;
    uint64_t             lean_until; /* a lease was refused: ask for small ones until then */
    uint64_t             seen_left;  /* tokens the store said were left after our last take */
    uint64_t             told_left;  /* tokens left in the store's last answer (+ lease held) ... */
    uint64_t             told_at;    /* ... given to a decision made then (us); 0: none yet */
    uint64_t             told_reset; /* ... and when it said the quota would be whole (us) */
    uint64_t             synced_at;  /* in-process bucket: told_at of the answer it started from */
    uint8_t              asking;     /* a store call that answers for it is in flight */
    struct sl_limiter_req *waiters;  /* requests waiting for that answer, in order */
    struct sl_limiter_req **wait_tail;
    char                 key[];  /* identity, or "c:<conn>"; '\0' + identity for an entry */
};

/* One [limit], copied out of the configuration. */
struct limit {
    char          *name;         /* [limit NAME] */
    char          *listener;     /* NULL: every listener */
    enum sl_metric metric;
    enum sl_scope  scope;
    enum sl_action action;
    struct sl_algo_params p;     /* the algorithm's parameters (max_wait_us: delay) */
    uint64_t       max_delay_us; /* action = delay: longest wait */
    uint64_t       max;          /* metric = connections: max = N */
    char         **commands;     /* upper case, sorted; none of these three: every command */
    int            n_commands;
    uint32_t       cats;         /* commands = @category ...: bits of sl_resp_acl_of() */
    char         **subcmds;      /* commands = CONTAINER|SUB ...: upper case */
    int            n_subcmds;
    char         **methods;      /* http: methods = ..., as written; none: every method */
    int            n_methods;
    char         **paths;        /* http: paths = ..., normalised patterns; none: every path */
    int            n_paths;
    struct sl_cost *costs;       /* per-command costs */
    int            n_costs;
    uint64_t       default_cost;
    char         **match;        /* match_identity, or none */
    int            n_match;
    int            replaces;     /* index of the limit this one replaces, or -1 */
    struct sl_idt  buckets;      /* in-process buckets, by last use, bounded */
    struct sl_idt  entries;      /* what the store said per identity (leases, refusals,
                                    what was left), by last use, bounded */
    uint64_t       ttl_ms;       /* a bucket idle this long is back to full */
    uint64_t       lease_size;   /* [store] lease: tokens asked on top of a cost; 0 = none */
    uint64_t       chunk;        /* at the limit, wait for this many tokens (see chunk_of) */
    uint8_t        remember;     /* keeps an entry per identity (see remembers) */
    /* counters (exported) */
    uint64_t       allowed;      /* decisions that allowed */
    uint64_t       rejected;     /* decisions that rejected (enforcing limits) */
    uint64_t       shadow_hits;  /* shadow limit: would have rejected */
    uint64_t       fallback;     /* decided without the store (on_failure) */
    uint64_t       delayed;      /* action = delay: decisions that made the request wait */
    uint64_t       leased;       /* decisions made from this instance's lease, no store call */
    uint64_t       held;         /* refusals remembered from the store, no store call */
    struct sl_delay_hist delay;  /* ... how long (delay), or would have (shadow) */
    struct top     top[TOP_K];   /* busiest identities */
};

/* The limiter: its limits, built once from a configuration (sl_limiter_new). */
struct sl_limiter {
    int               refs;       /* owner + pending decisions */
    struct sl_store  *store;      /* NULL: url = local */
    enum sl_on_failure on_failure;
    char             *key_prefix; /* store keys start with it */
    struct limit     *limits;
    int               n;
    uint8_t           any_cats;   /* some limit names @categories in `commands` */
    int              *cand;       /* scratch: candidate limits of one decision (n) */
    uint8_t          *keep;       /* scratch: which of them apply to its identity (n) */
    uint64_t          lease_ms;   /* connection leases live this long unrenewed */
};

/* One decision: the limits a request (byte take) met, and, while the store
 * or a lease entry answers for it, what to call back. Pooled (req_pool). */
struct sl_limiter_req {
    struct sl_limiter   *lim;
    uint8_t              metric;   /* enum sl_metric of the limits asked */
    sl_limiter_cb       *cb;       /* NULL once cancelled */
    void                *data;
    uint64_t             now_us;   /* when it was asked: local commits use it */
    uint64_t             conn_id;
    int                  n;        /* limits decided */
    int                  idx[MAX_REQ_LIMITS];
    uint64_t             cost[MAX_REQ_LIMITS];
    uint8_t              remote[MAX_REQ_LIMITS]; /* decided by the store */
    uint64_t             lease_ask[MAX_REQ_LIMITS]; /* tokens asked on top of the cost */
    uint32_t             probe;    /* bits k: lease entries this store call answers for */
    struct sl_limiter_req *next_wait; /* in a lease entry's waiters */
    char                 identity[SL_ID_MAX + 1];
};

/* ---- stats.c ---- */

/* Why work was allowed without being counted (sl_lim_uncounted). */
enum { UNCOUNTED_NO_MEMORY, UNCOUNTED_TOO_MANY, UNCOUNTED_REASONS };

/* Counts work (<what>: "request", "connection") allowed uncounted for
 * reason <why>, for /metrics; logs it at most once a second per reason. */
void sl_lim_uncounted(int why, const char *what);

/* Adds a wait of <us> to histogram <h>. */
void sl_lim_hist_add(struct sl_delay_hist *h, uint64_t us);

/* Counts one request of identity <id> in <L>'s busiest identities. */
void sl_lim_top_count(struct limit *L, const char *id);

/* ---- match.c ---- */

/* Sorts the `commands` of <c> into <L>: plain names (upper case, sorted),
 * CONTAINER|SUB names and @categories (bits); copies its `methods` and
 * `paths`. 0, or -1 when out of memory. */
int sl_lim_copy_commands(struct limit *L, const struct sl_limit_conf *c);

/* An HTTP request's path in normal form (proto/http_path.h), made on
 * first use by sl_lim_http_matches(); sl_lim_path_done() releases it. */
struct sl_lim_path {
    const struct sl_http_head *hd;
    char   *norm;      /* NULL until made; <small> or malloc'd */
    size_t  len;
    int     failed;    /* out of memory: no path matches */
    char    small[512];
};

/* Whether <L> takes HTTP request <pp->hd>: a limit with `commands` takes
 * none; its `methods` (exactly: methods are case-sensitive) and its
 * `paths` (see proto/http_path.h) must each take it. */
int sl_lim_http_matches(const struct limit *L, struct sl_lim_path *pp);

void sl_lim_path_done(struct sl_lim_path *pp);

/* Replaces the <n> match_identity entries <m> in place by the identities
 * they stand for (hashed as identities are); NULL where memory ran out. */
void sl_lim_canon_matches(char **m, int n);

/* Whether <L>'s `commands` take request <r> (NULL: a byte take), whose
 * categories are <cats>. */
int sl_lim_command_matches(const struct limit *L, const struct sl_resp_req *r, uint32_t cats);

/* What request <r> (NULL: none) costs limit <L>: per command (resp) or
 * per method (http, case-sensitive), else the default. */
uint64_t sl_lim_cost_of(const struct limit *L, const struct sl_req *r);

/* Whether <L>'s match_identity takes identity <id> (none: everyone). */
int sl_lim_identity_matches(const struct limit *L, const char *id);

/* Whether request <r> is one that is never limited (MULTI, EXEC, ...). */
int sl_lim_exempt(const struct sl_resp_req *r);

/* Whether limit <L> counts <metric> on listener <lc>. */
int sl_lim_applies(const struct limit *L, const struct sl_listener_conf *lc, int metric);

/* Checks listener <l> for <metric>: writes "FILE:LINE: message" to <errf>
 * and returns 1 when one request (byte take, connection) can meet more
 * limits than a decision holds; else 0. */
int sl_lim_check_listener_caps(const struct sl_conf *conf, const struct sl_listener_conf *l,
                               enum sl_metric metric, FILE *errf);

/* ---- limiter.c ---- */

/* Fills <v> with limit <L>'s denial <res> for <identity>, unless <v>
 * already holds a stricter one (the longest wait wins). */
void sl_lim_deny(struct sl_verdict *v, const struct limit *L, const char *identity,
                 const struct sl_algo_result *res);

/* The store key of limit <L> for <id> ("*" for global scope), written in
 * <buf> of <cap> bytes; the result points into <buf>. */
struct sl_str sl_lim_store_key(const struct sl_limiter *lim, const struct limit *L, const char *id,
                               char *buf, size_t cap);

/* ---- buckets.c ---- */

/* Finds or makes the bucket <key> (<len> bytes) of <L> (an entry when
 * <key> starts with '\0'), touched at <now_ms>; a full table evicts one
 * first. NULL when out of memory. Owned by <L>'s table. */
struct bucket *sl_lim_bucket_get(struct limit *L, const char *key, size_t len, uint64_t now_ms);

/* Removes bucket <b> from <L>'s table and frees it. */
void sl_lim_bucket_drop(struct limit *L, struct bucket *b);

/* Frees table <t> and every bucket in it. */
void sl_lim_table_free(struct sl_idt *t);

/* The most one take of <p> can be: what a full bucket or an empty window
 * allows. */
uint64_t sl_lim_capacity_of(const struct sl_algo_params *p);

/* ---- conns.c ---- */

/* Renews every store place this process holds, in one call, when a third
 * of [store] connection_lease has passed since the last renewal. */
void sl_lim_conns_renew(struct sl_limiter *lim, uint64_t now_us);

#endif

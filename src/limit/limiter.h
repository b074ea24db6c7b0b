/* sluice — the limiter: which limits a request meets and what they say.
 *
 * Built from one configuration (it copies what it needs, so the
 * configuration may be freed after a reload while the old limiter still
 * finishes its pending decisions). For each request it finds the matching
 * limits (listener, command filter, identity tiers), prices the request
 * (cost), and decides: in process (url = local, connection scope, or a
 * store that is down with on_failure = local), or with one script call to
 * the quota store for all of the request's store-backed limits, all or
 * nothing. Shadow limits are decided too but never change the verdict. */
#ifndef SL_LIMIT_LIMITER_H
#define SL_LIMIT_LIMITER_H

#include <stdint.h>
#include <stdio.h>

#include "conf/conf-t.h"
#include "identity/identity-t.h"
#include "proto/req-t.h"
#include "proto/resp-t.h"

struct sl_limiter;
struct sl_limiter_req;
struct sl_store;
struct sl_metrics;

enum sl_verdict_kind { SL_VERDICT_ALLOW = 0, SL_VERDICT_REJECT };

/* What the limits say about one request. */
struct sl_verdict {
    uint8_t     kind;                   /* enum sl_verdict_kind */
    uint8_t     store_down;             /* rejected because the store could not answer (closed) */
    uint8_t     never;                  /* the cost exceeds the limit's capacity */
    char        limit[64];              /* the rejecting limit's name */
    char        identity[SL_ID_MAX + 1];/* the identity it was counted for */
    uint64_t    retry_after_us;         /* when to try again */
    uint64_t    delay_us;               /* allowed after this wait (action = delay reserved it) */
    uint8_t     action;                 /* enum sl_action of the rejecting limit */
    /* The limit that decided, for HTTP's RateLimit fields (docs/http.md,
     * "Answers"): the rejecting limit; for an allowed request the
     * non-shadow limit closest to its limit (the least remaining, the
     * later reset on a tie). policy[0] == '\0' when no such limit was met
     * (no limit, only shadow ones, or on_failure = open without local
     * ones). */
    char        policy[64];             /* its name */
    uint64_t    quota;                  /* q: tokens per window (sl_algo_policy; connections: max) */
    uint64_t    window_s;               /* w: seconds, >= 1 (connections: 0) */
    uint64_t    remaining;              /* r: whole tokens left after this request (rounded down;
                                           refused: what is left, the cost was not taken) */
    uint64_t    reset_s;                /* t: seconds until the quota is whole again (rounded up;
                                           refused: never before the retry) */
    uint8_t     approx;                 /* r and t are what this instance knows, not the store's
                                           word on this request (a lease, a remembered refusal,
                                           the store away) */
    /* A shadow limit that would have rejected the request (the decision
     * log's shadow_rejected line; the verdict itself is not changed):
     * the first such limit, "" when none. */
    char        shadow[64];
    uint64_t    shadow_retry_us;        /* the wait it would have told (UINT64_MAX: never) */
    uint8_t     shadow_global;          /* it counts everyone as one identity ("*") */
};

/* What the limits of one metric on one listener ask of a byte meter. */
#define SL_METER_MIN_CHUNK (16 * 1024)
struct sl_meter_plan {
    int      limits;   /* how many apply */
    uint8_t  enforce;  /* some are not shadow */
    uint8_t  delay;    /* some delay */
    uint8_t  reject;   /* some reject */
    uint8_t  shadow;   /* some are shadow */
    uint64_t chunk;    /* tokens to take per store call (bytes metrics) */
    uint64_t max_take; /* the most one take may ask (the smallest capacity) */
    uint64_t max_delay_us; /* the longest max_delay of the delay limits */
};

typedef void sl_limiter_cb(void *data, const struct sl_verdict *v);

/* What each identity did under a limit, as this process counted it (the
 * limits API): requests that met it, the ones it rejected, the ones it
 * made wait, bytes it let through (bytes_in / bytes_out limits) and
 * connections it admitted (connection limits). */
enum sl_lim_count { SL_LIM_REQUESTS, SL_LIM_REJECTED, SL_LIM_DELAYED, SL_LIM_BYTES_IN,
                    SL_LIM_BYTES_OUT, SL_LIM_CONNECTIONS, SL_LIM_COUNTS };

struct sl_clock;
struct sl_places;

/* What a limiter works with besides its configuration. */
struct sl_limiter_env {
    struct sl_store       *store;  /* NULL: url = local */
    const struct sl_clock *clock;  /* every time the limiter reads (NULL: sl_clock_mono) */
    struct sl_places      *places; /* the process's connection places, kept across
                                      reloads (limit/places.h); NULL: the limiter's own */
};

/* Checks what the configuration loader cannot: that every limit's numbers
 * keep the algorithms exact (docs/algorithms.md). Writes one line
 * "FILE:LINE: message" per bad limit to <errf>; returns how many. */
int sl_limiter_validate(const struct sl_conf *conf, FILE *errf);

/* Builds the limiter for <conf> in <env> (copied; NULL: all defaults). */
struct sl_limiter *sl_limiter_new(const struct sl_conf *conf, const struct sl_limiter_env *env);

/* sl_limiter_new() for a reload that replaces limiter <prev> (NULL: none):
 * each limit of the same name (and metric and scope) as one of <prev>'s
 * carries on its counters and per-identity state, shared with it while
 * <prev> lives (limit/carry.h, docs/limits.md "Reload"). <prev> is not
 * changed until it is released: a failed reload leaves it as it was. */
struct sl_limiter *sl_limiter_reload(const struct sl_conf *conf, const struct sl_limiter_env *env,
                                     struct sl_limiter *prev);

/* Drops the owner's reference; freed once no decision is pending. */
void sl_limiter_release(struct sl_limiter *lim);

/* Nonzero when some limit could apply to requests on listener <name>
 * (lets sessions skip identity work entirely when there is none). */
int sl_limiter_active(const struct sl_limiter *lim, const char *listener);

/* Adaptive concurrency's shedding tiers (docs/adaptive.md): whether a
 * request limit of <listener> has `priority` or match_identity, and the
 * tier (0..3, 3 shed last) identity <id> gets from them. */
int sl_limiter_tiered(const struct sl_limiter *lim, const char *listener);
int sl_limiter_tier(const struct sl_limiter *lim, const char *listener, const char *id);

/* Why HTTP request <hd> on listener <lc> is refused with a 400 before any
 * limit is asked (a static text), or NULL: where a limit on <lc> has
 * `paths`, a path that no reading can stand for (proto/http_path.h,
 * sl_http_path_refusal: %00, overlong UTF-8). (match.c) */
const char *sl_limiter_path_refusal(const struct sl_limiter *lim, const struct sl_listener_conf *lc,
                                    const struct sl_http_head *hd);

/* Decides request <r> (its command and captured arguments) from a client
 * with <ident> on listener <lc>, connection number <conn_id>, now (the
 * limiter's clock).
 * Returns 0 with <v> filled, or 1 when the answer comes later through
 * <cb>(<data>, v) — then *<req> is set so the caller can cancel. */
int sl_limiter_check(struct sl_limiter *lim, const struct sl_listener_conf *lc,
                     const struct sl_ident_state *ident, uint64_t conn_id,
                     const struct sl_resp_req *r, struct sl_verdict *v,
                     sl_limiter_cb *cb, void *data, struct sl_limiter_req **req);

/* Like sl_limiter_check() for request <r> of any protocol (exactly one of
 * r->resp, r->http set): a RESP request as sl_limiter_check() decides it;
 * an HTTP request meets the limits of its listener whose `methods` (exact:
 * methods are case-sensitive) and `paths` (on the path's normal form, see
 * proto/http_path.h) take it, costs their per-method `cost`, and is
 * counted for sl_identity_of_req()'s identity. sl_limiter_check() is this
 * with r->resp only. */
int sl_limiter_check_req(struct sl_limiter *lim, const struct sl_listener_conf *lc,
                         const struct sl_ident_state *ident, uint64_t conn_id,
                         const struct sl_req *r, struct sl_verdict *v,
                         sl_limiter_cb *cb, void *data, struct sl_limiter_req **req);

/* Like sl_limiter_check() for the limits of <metric> (bytes_in, bytes_out)
 * on listener <lc>: takes <amount> tokens (a chunk of bytes). */
int sl_limiter_take(struct sl_limiter *lim, const struct sl_listener_conf *lc,
                    const struct sl_ident_state *ident, uint64_t conn_id, enum sl_metric metric,
                    uint64_t amount, struct sl_verdict *v, sl_limiter_cb *cb,
                    void *data, struct sl_limiter_req **req);

/* Fills <plan> for the limits of <metric> on <lc>; returns nonzero when
 * some apply. */
int sl_limiter_plan(const struct sl_limiter *lim, const struct sl_listener_conf *lc,
                    enum sl_metric metric, struct sl_meter_plan *plan);

/* The caller is gone: <cb> will not be called. */
void sl_limiter_cancel(struct sl_limiter_req *req);

/* Frees the pooled request records (at exit, so leak checkers stay quiet). */
void sl_limiter_pool_drain(void);

/* Periodic housekeeping: renews the process's connection places in the
 * store when due, expires idle in-process buckets. */
void sl_limiter_sweep(struct sl_limiter *lim);

/* Writes the per-limit metrics / the /stats JSON array of limits. */
void sl_limiter_metrics(const struct sl_limiter *lim, struct sl_metrics *m);
void sl_limiter_stats_json(const struct sl_limiter *lim, FILE *out);

/* What a request named <cmd> (<n> bytes: a RESP command name, any case;
 * with <http>, an HTTP method, exact) costs limit <limit> of <lim>: for
 * the decision log, which names the cost of the deciding limit. 0 when no
 * request limit has that name. (match.c) */
uint64_t sl_limiter_cost(const struct sl_limiter *lim, const char *limit, const char *cmd,
                         size_t n, int http);

/* ---- the limits API (inspect.c): one identity looked up or reset ---- */

/* The index of the limit named <name> in <lim>, or -1. */
int sl_limiter_find(const struct sl_limiter *lim, const char *name);

/* Writes GET /limits: {"limits":[...]} with every limit's numbers and
 * counters. */
void sl_limiter_list_json(const struct sl_limiter *lim, FILE *out);

/* Writes {"limit","by","identities":[...]}: the <n> identities of limit
 * <idx> with the most <by> (enum sl_lim_count) this process counted, most
 * first. */
void sl_limiter_top_json(const struct sl_limiter *lim, int idx, int by, size_t n, FILE *out);

/* One identity under one limit, as GET /limits/NAME/identities/ID tells. */
struct sl_lim_look {
    int         status;        /* 0, or SL_ESTORE: the store did not answer (<err>) */
    const char *err;           /* a static text, or the store's (valid during the call) */
    const char *limit;         /* its name */
    const char *identity;      /* as asked */
    const char *key;           /* the bucket's key: the identity, "*" (scope = global) */
    uint8_t     fleet;         /* remaining, retry and reset are the store's (the fleet's) */
    uint8_t     known;         /* state is held for it (else: a full bucket) */
    uint8_t     per_conn;      /* scope = connection: one bucket per connection, none here */
    uint8_t     conn;          /* metric = connections: <max>, places held */
    uint8_t     bytes;         /* a bytes metric (rates are sizes) */
    uint8_t     algo;          /* enum sl_algo */
    uint64_t    amount, period_us, burst, max; /* the numbers in force (an override's) */
    uint8_t     has_override;  /* overrides = store: one applies to it */
    uint64_t    remaining;     /* whole tokens (places) left now */
    int64_t     retry_us;      /* 0: a request of cost 1 passes now; -1: never / unknown */
    uint64_t    reset_us;      /* until the bucket is full (windows: empty) */
    uint64_t    counts[SL_LIM_COUNTS]; /* this process's */
};
typedef void sl_lim_look_cb(void *data, const struct sl_lim_look *r);

/* Looks up <identity> under limit <idx>: <cb> is called exactly once,
 * before this returns (in process) or when the store answers (store-backed:
 * a read-only script, after the identity's override when the limit has
 * them); a store that is down or past its timeout gives SL_ESTORE. Nothing
 * is taken. */
void sl_limiter_look(struct sl_limiter *lim, int idx, const char *identity, sl_lim_look_cb *cb,
                     void *data);

/* Refills <identity>'s bucket under limit <idx>: in process, and in the
 * store (its keys deleted: for the whole fleet); the refusals this process
 * remembered for it are forgotten (other instances ask the store again
 * within overrides_ttl). <cb>(data, status, deleted, err) is called exactly
 * once: status 0 (deleted: store keys deleted, 0 in process), SL_ESTORE,
 * or SL_ECONF for a limit that has no bucket per identity to reset
 * (connections, scope = connection). */
typedef void sl_lim_reset_cb(void *data, int status, int64_t deleted, const char *err);
void sl_limiter_reset(struct sl_limiter *lim, int idx, const char *identity, sl_lim_reset_cb *cb,
                      void *data);

/* How long an instance may still refuse a reset identity from a refusal it
 * remembered (the limit's overrides_ttl), in us. */
uint64_t sl_limiter_forget_us(const struct sl_limiter *lim, int idx);

/* Nonzero when limit <idx> keeps its buckets in the store (the fleet's). */
int sl_limiter_store_backed(const struct sl_limiter *lim, int idx);

/* Formats the RESP rejection line for <v> into <out> (NUL-terminated);
 * returns its length. */
size_t sl_verdict_resp(const struct sl_verdict *v, char *out, size_t cap);

#endif

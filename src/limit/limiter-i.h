/* sluice — the limiter's private types (nothing outside src/limit/ may
 * include this).
 *
 * The limiter is one object cut along its concepts, one file and one
 * header each:
 *
 *   limiter.c   building; a request or byte take in, its limits found, decided
 *   match.c     which limits a request meets; the limit-count check at load
 *   inproc.c    deciding in process (url = local, connection scope), and
 *               on_failure standing in for the store
 *   remote.c    the store round trip: one decide.lua call, its answer
 *   tokens.c    token leases ([store] lease) and refusals remembered from
 *               the store, per identity
 *   overrides.c per-identity rate and burst read from the store, cached
 *   verdict.c   what a decision says: denials, RateLimit policy fields
 *   places.c    connection places and the login queue (metric = connections)
 *   buckets.c   in-process buckets and their bounded tables
 *   stats.c     counters, delay histograms, busiest identities, reports
 *   carry.c     what a reload carries over: each limit's state (struct
 *               lim_state) shared with the next limit of its name
 *
 * Two kinds of things are held for a while and must not be confused: a
 * token lease is a batch of a limit's tokens taken from the store ahead of
 * the requests that spend them (tokens.c); a connection place is a
 * connection's seat under a connection limit, held in the store until
 * renewal stops (places.c, [store] connection_lease). Every time the
 * limiter reads comes from the one clock it was built with (lim->clock). */
#ifndef SL_LIMIT_LIMITER_I_H
#define SL_LIMIT_LIMITER_I_H

#include <stdint.h>
#include <stdio.h>

#include "core/log.h"
#include "identity/identity-t.h"
#include "limit/algo.h"
#include "limit/idtable.h"
#include "limit/limiter.h"
#include "proto/req-t.h"
#include "core/clock.h"
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

/* Requests waiting for one store answer (a token lease, an override), in
 * the order they came, linked through their next_wait. */
struct sl_lim_waiters {
    struct sl_limiter_req  *head;
    struct sl_limiter_req **tail;
};

/* An in-process bucket, or an entry of what the store said (key '\0' +
 * identity, see lease_entry): each kind in its own bounded table of the
 * limit (limit/idtable.h, [store] max_identities). */
struct bucket {
    struct sl_idt_node   node;   /* in L->s->buckets or L->s->entries (key: key[] below) */
    struct sl_algo_state st;     /* algorithm state */
    struct sl_algo_params at;    /* the numbers <st> was last taken under (at.amount 0:
                                    none yet); other ones convert it (sl_lim_bucket_numbers) */
    /* A lease entry (key: '\0' + identity, see lease_entry) instead: */
    uint64_t             lease;      /* tokens taken from the store, not spent yet */
    uint64_t             deny_until; /* the store said no to <deny_cost> until then (us) */
    uint64_t             deny_cost;
    uint64_t             deny_trust; /* ... believed until then (us): then asked again */
    uint64_t             lean_until; /* a lease was refused: ask for small ones until then */
    uint64_t             seen_left;  /* tokens the store said were left after our last take */
    uint64_t             told_left;  /* tokens left in the store's last answer (+ lease held) ... */
    uint64_t             told_at;    /* ... given to a decision made then (us); 0: none yet */
    uint64_t             told_reset; /* ... and when it said the quota would be whole (us) */
    uint64_t             synced_at;  /* in-process bucket: told_at of the answer it started from */
    /* The numbers (rate, burst) the refusals above were remembered under:
     * other numbers (an override came, went or changed, even one whose
     * cached answer was dropped meanwhile) forget them (tokens.c). */
    uint64_t             num_amount, num_period_us, num_burst;
    uint8_t              num_algo;
    uint8_t              asking;     /* a store call that answers for it is in flight */
    struct sl_lim_waiters waiting;  /* requests waiting for that answer */
    char                 key[];  /* identity, or "c:<conn>"; '\0' + identity for an entry */
};

/* What a limit has counted and what it holds per identity. A reload
 * gives it to the new limit of the same name (shared: decisions of the old
 * limiter still pending count and take here too), so SIGHUP forgets
 * nothing (docs/limits.md, "Reload"); freed with the last limit holding
 * it. */
struct lim_state {
    int            refs;         /* limits holding it */
    struct sl_idt  buckets;      /* in-process buckets, by last use, bounded */
    struct sl_idt  entries;      /* what the store said per identity (leases, refusals,
                                    what was left), by last use, bounded */
    struct sl_idt  ovr;          /* overrides read per identity (overrides.c), bounded */
    struct sl_idt  ids;          /* what each identity did (idcount.c), bounded */
    uint64_t       ovr_applied;  /* decisions made with an override */
    uint64_t       ovr_malformed;/* values ignored as malformed */
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
    int            priority;     /* adaptive concurrency's tier of the identities it
                                    takes (0..3), or -1: none (match_identity: 1) */
    struct lim_state *s;         /* counters and per-identity state, kept across reloads */
    size_t         cap;          /* entries per table ([store] max_identities; 0: no bound) */
    uint64_t       ttl_ms;       /* a bucket idle this long is back to full */
    uint64_t       lease_size;   /* [store] lease: tokens asked on top of a cost; 0 = none */
    uint64_t       chunk;        /* at the limit, wait for this many tokens (see chunk_of) */
    uint8_t        remember;     /* keeps an entry per identity (see remembers) */
    uint64_t       ovr_ttl_us;   /* overrides = store: an answer is used this long; 0: off */
    uint64_t       trust_us;     /* a refusal remembered from the store is trusted this long
                                    (overrides_ttl, set or not): then one request asks again,
                                    so a reset made elsewhere is seen (tokens.c) */
    struct sl_log_rate shadow_log; /* shadow rejections logged at most once a second (verdict.c) */
};

/* The limiter: its limits, built once from a configuration (sl_limiter_new). */
struct sl_places;

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
    const struct sl_clock *clock; /* every time read here */
    struct sl_places *places;     /* the process's connection places (places.h) */
    struct sl_places *own_places; /* ... when none was given: our own, freed with us */
    uint64_t          place_ttl_ms; /* a connection place lives this long unrenewed */
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
    struct sl_algo_params p[MAX_REQ_LIMITS]; /* each limit's numbers for this identity: its
                                                own, or an override (overrides.c) */
    uint32_t             probe;    /* bits k: lease entries this store call answers for */
    struct sl_limiter_req *next_wait; /* in a struct sl_lim_waiters */
    char                 identity[SL_ID_MAX + 1];
};

/* Appends pooled request <q> to <w> (limiter.c). */
void sl_lim_waiters_add(struct sl_lim_waiters *w, struct sl_limiter_req *q);

/* Empties <w>, returning its requests in order (linked by next_wait). */
struct sl_limiter_req *sl_lim_waiters_take(struct sl_lim_waiters *w);

/* Gives pooled decision <q> back and drops the reference it held on its
 * limiter (limiter.c). */
void sl_lim_req_free(struct sl_limiter_req *q);

/* Pooled decision <q> waited for the overrides of its identity: decides it
 * now (or it waits again), calling its callback, unless cancelled
 * (limiter.c). */
void sl_lim_resume(struct sl_limiter_req *q);

#endif

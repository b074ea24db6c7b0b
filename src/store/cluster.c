/* sluice — Redis Cluster as the quota store (url = redis-cluster://seeds).
 *
 *   seeds --connect--> any node ready --CLUSTER SHARDS (or SLOTS)--> slot map
 *                                                                      |
 *   sl_store_eval(keys) --slot of each key--> one slot: the master serving it
 *                                       \--> several: one call per slot (a
 *                                            "split"), replies merged back
 *
 * One node (store/node.c: one connection, one pipeline) per master; every
 * script is loaded on each at connect. A MOVED reply points the slot at the
 * node it names, sends the request there (same deadline) and asks for a
 * full map; an ASK reply sends ASKING and the request to the node it names,
 * once. The map is asked again, rate-limited (at most every
 * MAP_MIN_MS, backing off to MAP_MAX_MS while masters stay down), after a
 * redirection and while a master is down (its replica may be promoted).
 *
 * Health is per node: a request routed to a master that is down (not
 * connected, or suspect after a timeout) fails at once with SL_ESTORE, so
 * on_failure applies to the requests of its slots only; the store as a
 * whole (sl_store_up()) is up while the map is known and any master is up.
 *
 * Calls split over slots: decide.lua and connections.lua take the keys of
 * several limits, one hash tag per limit, so in a cluster they may be in
 * different slots (CROSSSLOT). The store sends one call per slot with the
 * keys and per-key arguments of that slot (N rewritten) and merges the
 * replies into the layout the caller expects. Each part is all-or-nothing
 * on its own node only: see docs/configuration.md ("Redis Cluster"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/log.h"
#include "core/resolve.h"
#include "store/node.h"
#include "store/store-i.h"

#define MAP_MIN_MS   100   /* refreshes at most this often */
#define MAP_MAX_MS   1000  /* ... backing off to this while they fail or masters stay down */
#define MAX_RANGES   (SL_SLOTS) /* ranges in one map */

/* The parts of a call split over slots. */
struct sl_split {
    struct sl_store *st;
    int      op;          /* OP_* */
    int      nkeys;
    int      nparts;
    int      pending;     /* parts not completed yet */
    int      failed;      /* a part failed */
    char     err[128];    /* the first failure's text */
    int      nvals;       /* the merged reply's length */
    int64_t  vals[SL_STORE_MAX_VALS];
    uint8_t  kpart[SL_STORE_MAX_VALS];  /* per key: its part (decide, acquire, release) */
    uint8_t  admitted[SL_STORE_MAX_VALS]; /* acquire: per part, admitted there */
    /* acquire: what releasing an admitted part needs (copies) */
    char    *keep;        /* keys, then member, then lease */
    struct sl_str *keys;  /* into keep */
    struct sl_str member, lease;
};

enum { OP_DECIDE, OP_ACQUIRE, OP_RELEASE, OP_RENEW };

/* ---- nodes --------------------------------------------------------------- */

struct sl_node *sl_cluster_node_of(const struct sl_store *st, unsigned slot)
{
    if (st->slot_node == NULL || slot >= SL_SLOTS || st->slot_node[slot] == 0)
        return NULL;
    return st->nodes[st->slot_node[slot] - 1];
}

static struct sl_node *node_at_ss(struct sl_store *st, const struct sockaddr_storage *ss)
{
    for (int i = 0; i < st->n_nodes; i++)
        if (sl_resolve_same_addr(&st->nodes[i]->ss, ss)) {
            if (st->nodes[i]->retired || st->nodes[i]->conn == SL_NODE_DISCONNECTED)
                sl_node_connect(st->nodes[i], NULL);
            return st->nodes[i];
        }
    char name[64];
    sl_resolve_fmt(ss, name, sizeof(name));
    struct sl_node *nd = sl_store_add_node(st, name, ss);
    if (nd == NULL) {
        sl_log_warn_rl("store_cluster_nodes", "quota store: too many cluster nodes", "node=%s",
                       name);
        return NULL;
    }
    sl_node_connect(nd, NULL);
    return nd;
}

struct sl_node *sl_cluster_node_at(struct sl_store *st, const char *ip, uint16_t port)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    if (uv_ip4_addr(ip, port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(ip, port, (struct sockaddr_in6 *)&ss) != 0)
        return NULL; /* nodes are announced by address (cluster-preferred-endpoint-type ip) */
    return node_at_ss(st, &ss);
}

/* ---- the slot map ------------------------------------------------------- */

static void on_refresh(uv_timer_t *t);

void sl_cluster_want_refresh(struct sl_store *st)
{
    if (st->closing || !st->cluster || st->map_req != NULL || st->map_armed)
        return;
    uint64_t now = uv_now(st->loop);
    uint64_t at = st->map_last_ms + st->map_backoff_ms;
    st->map_armed = 1;
    uv_timer_start(&st->refresh_timer, on_refresh, at > now ? at - now : 0, 0);
}

static void send_map(struct sl_store *st, struct sl_node *nd)
{
    struct sl_store_req *r = sl_store_req_get(st);
    if (r == NULL)
        return;
    struct sl_str argv[2] = { { "CLUSTER", 7 }, { "SHARDS", 6 } };
    if (st->map_slots)
        argv[1] = (struct sl_str){ "SLOTS", 5 };
    uint64_t ms = (st->conf.connect_timeout_us + 999) / 1000;
    r->kind = SL_K_MAP;
    r->sent_ns = uv_hrtime();
    r->deadline = sl_store_deadline(st, ms > st->timeout_ms ? ms : st->timeout_ms);
    if (sl_wire_encode(&r->cmd, 2, argv, 0, NULL, 0, NULL) < 0 || sl_node_send(nd, r, 0) < 0) {
        sl_store_req_put(st, r);
        return;
    }
    st->map_req = r;
    st->map_last_ms = uv_now(st->loop);
}

/* A seed named by a host name that did not resolve at load: it has no
 * address yet (the loader warned; conf/resolve.h). */
static int seed_unresolved(const struct sl_store *st, int i)
{
    const struct sl_addr *a = &st->conf.seeds[i];
    return a->named && a->ss.ss_family != AF_INET && a->ss.ss_family != AF_INET6;
}

/* A seed's lookup ended: an answer is a node to connect to (the first
 * ready one asks for the map); a failure is said once, and tried again at
 * the next reseed (every MAP_MAX_MS at most while nobody answers). */
static void on_seed_resolved(struct sl_resolve *r, enum sl_resolve_event ev, int err)
{
    struct sl_store *st = r->data;
    int i = (int)(r - st->seed_res);
    char addr[64];
    if (st->closing || i < 0 || i >= st->n_seed_res || i >= st->conf.n_seeds)
        return;
    if (ev == SL_RESOLVE_CHANGED || ev == SL_RESOLVE_RECOVERED) {
        st->conf.seeds[i].ss = r->ss;
        sl_log_info("quota store cluster seed resolved", "seed=%s addr=%s",
                    st->conf.seeds[i].text, sl_resolve_fmt(&r->ss, addr, sizeof(addr)));
        node_at_ss(st, &r->ss);
    } else if (ev == SL_RESOLVE_FAILING) {
        sl_log_warn("quota store cluster seed name not resolved: retrying",
                    "seed=%s err=\"%s\"", st->conf.seeds[i].text, uv_strerror(err));
    }
}

/* Looks the name of seed <i> up again (one lookup at a time per seed). */
static void seed_lookup(struct sl_store *st, int i)
{
    int n = st->conf.n_seeds;
    if (st->seed_res == NULL) {
        if ((st->seed_res = calloc((size_t)n, sizeof(*st->seed_res))) == NULL)
            return;
        st->n_seed_res = n;
        for (int j = 0; j < n; j++) {
            const struct sl_addr *a = &st->conf.seeds[j];
            char host[sizeof(a->text)];
            snprintf(host, sizeof(host), "%s", a->named ? a->text : "");
            char *colon = strrchr(host, ':');
            if (colon != NULL)
                *colon = '\0';
            st->seed_res[j].cb = on_seed_resolved;
            st->seed_res[j].data = st;
            sl_resolve_set(&st->seed_res[j], host, a->port, &a->ss, uv_now(st->loop));
        }
    }
    (void)sl_resolve_start(&st->seed_res[i], st->loop);
}

void sl_cluster_seeds_stop(struct sl_store *st)
{
    if (st->seed_res == NULL)
        return;
    for (int i = 0; i < st->n_seed_res; i++)
        sl_resolve_stop(&st->seed_res[i]);
    free(st->seed_res);
    st->seed_res = NULL;
    st->n_seed_res = 0;
}

/* Connects every seed again (after all known nodes went away); a seed with
 * no address yet is looked up, and the refresh that follows tries again. */
static void reseed(struct sl_store *st)
{
    int waiting = 0;
    for (int i = 0; i < st->conf.n_seeds; i++) {
        if (seed_unresolved(st, i)) {
            seed_lookup(st, i);
            waiting = 1;
            continue;
        }
        node_at_ss(st, &st->conf.seeds[i].ss);
    }
    if (waiting)
        sl_cluster_want_refresh(st);
}

static void on_refresh(uv_timer_t *t)
{
    struct sl_store *st = t->data;
    st->map_armed = 0;
    if (st->closing || st->map_req != NULL)
        return;
    /* Ask a master that is up, else any node that is up. */
    struct sl_node *ask = NULL;
    for (int i = 0; i < st->n_nodes; i++) {
        struct sl_node *nd = st->nodes[i];
        if (sl_node_up(nd) && (ask == NULL || (nd->master && !ask->master)))
            ask = nd;
    }
    if (ask != NULL) {
        send_map(st, ask);
        return;
    }
    /* Nobody answers: the seeds again; the first ready asks (node_ready). */
    reseed(st);
    st->map_last_ms = uv_now(st->loop);
    st->map_backoff_ms = st->map_backoff_ms * 2 > MAP_MAX_MS ? MAP_MAX_MS : st->map_backoff_ms * 2;
    sl_cluster_want_refresh(st);
}

void sl_cluster_node_ready(struct sl_store *st, struct sl_node *nd)
{
    if (!st->map_ok && st->map_req == NULL)
        send_map(st, nd);
}

void sl_store_map_reply(struct sl_store *st, struct sl_node *nd, const struct sl_slot_toks *tk,
                        const char *err)
{
    char q[160];
    if (st->closing)
        return;
    if (tk == NULL && err != NULL && !st->map_slots && strncmp(err, "ERR", 3) == 0) {
        /* Before Redis 7: no CLUSTER SHARDS. Ask CLUSTER SLOTS from now on. */
        st->map_slots = 1;
        st->map_backoff_ms = 0;
        sl_cluster_want_refresh(st);
        return;
    }
    struct sl_slot_range *rg = NULL;
    int n = -1;
    const char *why = err;
    if (tk != NULL && (rg = malloc(MAX_RANGES * sizeof(*rg))) != NULL)
        n = st->map_slots ? sl_slot_parse_slots(tk, rg, MAX_RANGES, &why)
                          : st->conf.tls ? sl_slot_parse_shards_tls(tk, rg, MAX_RANGES, &why)
                                         : sl_slot_parse_shards(tk, rg, MAX_RANGES, &why);
    else if (tk != NULL)
        why = "out of memory";
    if (n < 0) {
        free(rg);
        st->stats.map_errors++;
        sl_log_warn_rl("store_cluster_map", "quota store: slot map not read", "node=%s error=%s",
                       nd->name, sl_log_quote(why ? why : "?", strlen(why ? why : "?"), q, sizeof(q)));
        st->map_backoff_ms = st->map_backoff_ms * 2 > MAP_MAX_MS ? MAP_MAX_MS
                             : st->map_backoff_ms ? st->map_backoff_ms * 2 : MAP_MIN_MS;
        sl_cluster_want_refresh(st);
        return;
    }
    st->stats.map_refreshes++;
    st->map_applying = 1;
    /* The masters of the new map; every other node is retired. */
    for (int i = 0; i < st->n_nodes; i++)
        st->nodes[i]->master = 0;
    memset(st->slot_node, 0, SL_SLOTS);
    int covered = 0;
    for (int i = 0; i < n; i++) {
        struct sl_node *m = sl_cluster_node_at(st, rg[i].ip, rg[i].port);
        if (m == NULL)
            continue;
        m->master = 1;
        memset(st->slot_node + rg[i].start, m->idx + 1, (size_t)(rg[i].end - rg[i].start) + 1);
        covered += rg[i].end - rg[i].start + 1;
    }
    free(rg);
    int masters = 0, down = 0;
    for (int i = 0; i < st->n_nodes; i++) {
        struct sl_node *x = st->nodes[i];
        if (x->master) {
            masters++;
            down += !sl_node_up(x);
            x->logged = (int8_t)sl_node_up(x); /* the map's line below says it */
        } else if (!x->retired) {
            sl_node_drop(x, "not a master in the slot map", 1);
        }
    }
    int first = !st->map_ok;
    st->map_ok = 1;
    st->map_applying = 0;
    if (first)
        sl_log_info("quota store cluster map", "masters=%d slots=%d", masters, covered);
    else
        sl_log_debug("quota store cluster map", "masters=%d slots=%d down=%d", masters, covered,
                     down);
    /* Masters down, slots unserved: a failover may be under way; look again. */
    if (down > 0 || covered < SL_SLOTS) {
        st->map_backoff_ms = st->map_backoff_ms * 2 > MAP_MAX_MS ? MAP_MAX_MS
                             : st->map_backoff_ms ? st->map_backoff_ms * 2 : MAP_MIN_MS;
        sl_cluster_want_refresh(st);
    } else {
        st->map_backoff_ms = MAP_MIN_MS;
    }
    sl_store_node_health(st, nd, "slot map changed");
}

int sl_cluster_start(struct sl_store *st)
{
    if (st->slot_node == NULL && (st->slot_node = calloc(SL_SLOTS, 1)) == NULL)
        return -1;
    memset(st->slot_node, 0, SL_SLOTS);
    st->map_ok = 0;
    st->map_slots = 0;
    st->map_backoff_ms = MAP_MIN_MS;
    st->map_last_ms = 0;
    sl_cluster_seeds_stop(st); /* the seeds may be others now (a reload) */
    reseed(st);
    return 0;
}

/* ---- redirections --------------------------------------------------------- */

int sl_store_redirect(struct sl_store *st, struct sl_node *nd, struct sl_store_req *r,
                      const char *text)
{
    int ask;
    unsigned slot;
    char host[64];
    uint16_t port;
    if (sl_slot_parse_redirect(text, &ask, &slot, host, sizeof(host), &port) < 0)
        return 0;
    if (ask)
        st->stats.redirects_ask++;
    else
        st->stats.redirects_moved++;
    struct sl_node *to = sl_cluster_node_at(st, host, port);
    if (!ask) {
        if (to != NULL) {
            to->master = 1;
            st->slot_node[slot] = (uint8_t)(to->idx + 1);
        }
        sl_cluster_want_refresh(st); /* a slot moved: others may have too */
    }
    if (to == NULL || to == nd || !sl_store_node_usable(to) ||
        r->redirects >= SL_STORE_MAX_REDIRECTS || r->cmd.len == 0)
        return 0; /* fails with the redirection's text: on_failure for this one */
    r->redirects++;
    sl_node_unlist(nd, r);
    /* The same deadline: the caller's timeout bounds the whole journey. */
    if (sl_node_send(to, r, ask) < 0)
        return 0;
    return 1;
}

/* ---- calls ------------------------------------------------------------------ */

static struct sl_store_req *send_one(struct sl_store *st, struct sl_node *nd, int id, int nkeys,
                                     const struct sl_str *keys, int nargs,
                                     const struct sl_str *args, unsigned slot)
{
    if (nd == NULL || !sl_store_node_usable(nd))
        return NULL;
    struct sl_store_req *r = sl_store_eval_on(st, nd, SL_K_EVAL, id, nkeys, keys, nargs, args);
    if (r != NULL)
        r->slot = (uint16_t)slot;
    return r;
}

/* The op of a call to <id> with these arguments, and whether its layout is
 * one this file knows how to split; -1 when not. */
static int split_op(int id, int nkeys, int nargs, const struct sl_str *args)
{
    if (id == SL_SCRIPT_DECIDE)
        return nargs == 2 + 7 * nkeys && nkeys < (SL_STORE_MAX_VALS - 1) / 4 ? OP_DECIDE : -1;
    if (id != SL_SCRIPT_CONNECTIONS || nargs < 3)
        return -1;
    if (args[0].len == 7 && memcmp(args[0].p, "acquire", 7) == 0)
        return nargs == 5 + 2 * nkeys && nkeys < (SL_STORE_MAX_VALS - 1) / 3 ? OP_ACQUIRE : -1;
    if (args[0].len == 7 && memcmp(args[0].p, "release", 7) == 0)
        return nargs == 4 && nkeys < SL_STORE_MAX_VALS ? OP_RELEASE : -1;
    if (args[0].len == 5 && memcmp(args[0].p, "renew", 5) == 0)
        return OP_RENEW;
    return -1;
}

/* renew: the member count of the group at <args>[<a>], or -1. */
static long group_len(const struct sl_str *args, int nargs, int a)
{
    if (a >= nargs || args[a].len == 0 || args[a].len > 9)
        return -1;
    long m = 0;
    for (size_t i = 0; i < args[a].len; i++) {
        if (args[a].p[i] < '0' || args[a].p[i] > '9')
            return -1;
        m = m * 10 + (args[a].p[i] - '0');
    }
    return a + 1 + m <= nargs ? m : -1;
}

static void split_finish(struct sl_store *st, struct sl_store_req *parent);

static void part_done(void *data, int status, const int64_t *vals, int n, const char *err)
{
    struct sl_store_req *r = data;
    struct sl_store_req *parent = r->parent;
    struct sl_split *sp = parent->split;
    int p = r->part;
    int ok = status == 0;
    if (ok) {
        /* The part's keys, in the caller's order, take their values back. */
        int j = 0;
        switch (sp->op) {
        case OP_DECIDE:
        case OP_ACQUIRE: {
            int per = sp->op == OP_DECIDE ? 4 : 3;
            for (int k = 0; k < sp->nkeys && ok; k++) {
                if (sp->kpart[k] != p)
                    continue;
                if (1 + per * (j + 1) > n) {
                    ok = 0;
                    break;
                }
                memcpy(&sp->vals[1 + per * k], &vals[1 + per * j], (size_t)per * sizeof(*vals));
                j++;
            }
            if (ok && n >= 1) {
                sp->vals[0] = sp->vals[0] && vals[0];
                if (sp->op == OP_ACQUIRE)
                    sp->admitted[p] = vals[0] != 0;
            }
            break;
        }
        case OP_RELEASE:
            for (int k = 0; k < sp->nkeys && ok; k++) {
                if (sp->kpart[k] != p)
                    continue;
                if (j >= n) {
                    ok = 0;
                    break;
                }
                sp->vals[k] = vals[j++];
            }
            break;
        case OP_RENEW:
            sp->vals[0] += n >= 1 ? vals[0] : 0;
            break;
        }
        if (!ok)
            err = "reply shorter than its keys";
    }
    if (!ok && !sp->failed) {
        sp->failed = 1;
        snprintf(sp->err, sizeof(sp->err), "%s", err ? err : "store error");
    }
    if (--sp->pending == 0)
        split_finish(sp->st, parent);
}

/* Every part answered (or failed): the caller gets the merged reply. A
 * connection refused as a whole holds nothing: the parts that admitted it
 * give their places back. */
static void split_finish(struct sl_store *st, struct sl_store_req *parent)
{
    struct sl_split *sp = parent->split;
    int status = sp->failed ? SL_ESTORE : 0;
    if (sp->op == OP_ACQUIRE && (sp->failed || sp->vals[0] == 0) && !st->closing) {
        for (int p = 0; p < sp->nparts; p++) {
            if (!sp->admitted[p])
                continue;
            struct sl_str keys[SL_STORE_MAX_VALS];
            int nk = 0;
            for (int k = 0; k < sp->nkeys; k++)
                if (sp->kpart[k] == p)
                    keys[nk++] = sp->keys[k];
            struct sl_str args[4] = { { "release", 7 }, { "-1", 2 }, sp->lease, sp->member };
            unsigned slot = sl_slot_of_key(keys[0].p, keys[0].len);
            send_one(st, sl_cluster_node_of(st, slot), SL_SCRIPT_CONNECTIONS, nk, keys, 4, args,
                     slot);
        }
    }
    if (status != 0)
        st->stats.errors++;
    parent->done = 1;
    if (parent->cb != NULL) {
        sl_store_cb *cb = parent->cb;
        parent->cb = NULL;
        cb(parent->data, status, sp->vals, sp->nvals, status ? sp->err : NULL);
    }
    free(sp->keep);
    free(sp->keys);
    free(sp);
    parent->split = NULL;
    sl_store_req_put(st, parent);
}

/* Copies what a release of an admitted part needs. Returns 0 or -1. */
static int keep_for_release(struct sl_split *sp, int nkeys, const struct sl_str *keys,
                            const struct sl_str *args)
{
    size_t len = args[2].len + args[3].len;
    for (int k = 0; k < nkeys; k++)
        len += keys[k].len;
    if ((sp->keep = malloc(len + 1)) == NULL ||
        (sp->keys = calloc((size_t)nkeys, sizeof(*sp->keys))) == NULL)
        return -1;
    char *p = sp->keep;
    for (int k = 0; k < nkeys; k++) {
        memcpy(p, keys[k].p, keys[k].len);
        sp->keys[k] = (struct sl_str){ p, keys[k].len };
        p += keys[k].len;
    }
    memcpy(p, args[3].p, args[3].len);
    sp->member = (struct sl_str){ p, args[3].len };
    p += args[3].len;
    memcpy(p, args[2].p, args[2].len);
    sp->lease = (struct sl_str){ p, args[2].len };
    return 0;
}

/* One call per slot for a call whose keys are in several. The parts go out
 * only when every master concerned is up: else the caller applies
 * on_failure to the whole request (NULL). */
static struct sl_store_req *split_eval(struct sl_store *st, int id, int op, int nkeys,
                                       const struct sl_str *keys, const unsigned *slots,
                                       int nargs, const struct sl_str *args, sl_store_cb *cb,
                                       void *data)
{
    struct sl_store_req *parent = NULL;
    struct sl_split *sp = NULL;
    int *part_of = NULL;           /* per key: its part */
    unsigned *pslot = NULL;        /* per part: its slot */
    struct sl_str *pk = NULL, *pa = NULL;
    int nparts = 0;
    if ((part_of = malloc((size_t)nkeys * sizeof(*part_of))) == NULL ||
        (pslot = malloc((size_t)nkeys * sizeof(*pslot))) == NULL ||
        (pk = malloc((size_t)nkeys * sizeof(*pk))) == NULL ||
        (pa = malloc(((size_t)nargs + 8) * sizeof(*pa))) == NULL ||
        (sp = calloc(1, sizeof(*sp))) == NULL)
        goto fail;
    for (int k = 0; k < nkeys; k++) {
        int p = 0;
        while (p < nparts && pslot[p] != slots[k])
            p++;
        if (p == nparts) {
            struct sl_node *nd = sl_cluster_node_of(st, slots[k]);
            if (nd == NULL || !sl_store_node_usable(nd))
                goto fail;
            pslot[nparts++] = slots[k];
        }
        part_of[k] = p;
    }
    /* renew: where each key's group of members starts */
    int *gstart = NULL;
    if (op == OP_RENEW) {
        if ((gstart = malloc((size_t)nkeys * sizeof(*gstart))) == NULL)
            goto fail;
        int a = 3;
        for (int k = 0; k < nkeys; k++) {
            long m = group_len(args, nargs, a);
            if (m < 0) {
                free(gstart);
                goto fail;
            }
            gstart[k] = a;
            a += 1 + (int)m;
        }
        if (a != nargs) {
            free(gstart);
            goto fail;
        }
    }
    if (op != OP_RENEW && nparts > SL_STORE_MAX_VALS) {
        free(gstart);
        goto fail;
    }
    if (op == OP_ACQUIRE && keep_for_release(sp, nkeys, keys, args) < 0) {
        free(gstart);
        goto fail;
    }
    if ((parent = sl_store_req_get(st)) == NULL) {
        free(gstart);
        goto fail;
    }
    sp->st = st;
    sp->op = op;
    sp->nkeys = nkeys;
    sp->nparts = nparts;
    for (int k = 0; k < nkeys && op != OP_RENEW; k++)
        sp->kpart[k] = (uint8_t)part_of[k];
    sp->nvals = op == OP_DECIDE ? 1 + 4 * nkeys : op == OP_ACQUIRE ? 1 + 3 * nkeys
                : op == OP_RELEASE ? nkeys : 1;
    sp->vals[0] = op == OP_RENEW ? 0 : 1;
    parent->kind = SL_K_SPLIT;
    parent->split = sp;
    parent->cb = cb;
    parent->data = data;
    st->stats.split_calls++;

    char nbuf[SL_STORE_MAX_VALS][12];
    for (int p = 0; p < nparts; p++) {
        int nk = 0, na = 0;
        switch (op) {
        case OP_DECIDE:
            pa[na++] = args[0];
            pa[na++] = (struct sl_str){ nbuf[p % SL_STORE_MAX_VALS], 0 };
            for (int k = 0; k < nkeys; k++) {
                if (part_of[k] != p)
                    continue;
                pk[nk++] = keys[k];
                memcpy(&pa[na], &args[2 + 7 * k], 7 * sizeof(*pa));
                na += 7;
            }
            pa[1].len = (size_t)snprintf(nbuf[p % SL_STORE_MAX_VALS], 12, "%d", nk);
            break;
        case OP_ACQUIRE:
            memcpy(pa, args, 5 * sizeof(*pa));
            na = 5;
            for (int k = 0; k < nkeys; k++) {
                if (part_of[k] != p)
                    continue;
                pk[nk++] = keys[k];
                pa[na++] = args[5 + 2 * k];
                pa[na++] = args[6 + 2 * k];
            }
            break;
        case OP_RELEASE:
            memcpy(pa, args, 4 * sizeof(*pa));
            na = 4;
            for (int k = 0; k < nkeys; k++)
                if (part_of[k] == p)
                    pk[nk++] = keys[k];
            break;
        case OP_RENEW:
            memcpy(pa, args, 3 * sizeof(*pa));
            na = 3;
            for (int k = 0; k < nkeys; k++) {
                if (part_of[k] != p)
                    continue;
                pk[nk++] = keys[k];
                int a = gstart[k], m = (int)group_len(args, nargs, a);
                memcpy(&pa[na], &args[a], (size_t)(1 + m) * sizeof(*pa));
                na += 1 + m;
            }
            break;
        }
        struct sl_store_req *r =
            send_one(st, sl_cluster_node_of(st, pslot[p]), id, nk, pk, na, pa, pslot[p]);
        sp->pending++;
        if (r == NULL) {
            /* Out of memory half-way: this part fails; the others answer. */
            sp->pending--;
            sp->failed = 1;
            snprintf(sp->err, sizeof(sp->err), "out of memory");
            continue;
        }
        r->cb = part_done;
        r->data = r;
        r->parent = parent;
        r->part = p;
    }
    free(gstart);
    free(part_of);
    free(pslot);
    free(pk);
    free(pa);
    if (sp->pending == 0) {
        /* Nothing went out: the caller applies on_failure. */
        parent->cb = NULL;
        split_finish(st, parent);
        return NULL;
    }
    return parent;

fail:
    if (sp != NULL) {
        free(sp->keep);
        free(sp->keys);
    }
    free(sp);
    free(part_of);
    free(pslot);
    free(pk);
    free(pa);
    return NULL;
}

struct sl_store_req *sl_cluster_eval(struct sl_store *st, int id, int nkeys,
                                     const struct sl_str *keys, int nargs,
                                     const struct sl_str *args, sl_store_cb *cb, void *data)
{
    if (!st->map_ok)
        return NULL;
    /* The common case, one slot (one limit, or one identity's keys): no
     * allocation, one call, exactly as with a single node. */
    unsigned slot0 = nkeys > 0 ? sl_slot_of_key(keys[0].p, keys[0].len) : 0;
    int same = 1;
    for (int k = 1; k < nkeys && same; k++)
        same = sl_slot_of_key(keys[k].p, keys[k].len) == slot0;
    int op = same ? -1 : split_op(id, nkeys, nargs, args);
    if (op < 0) {
        /* One slot, or a call of unknown layout (Redis answers CROSSSLOT). */
        struct sl_store_req *r =
            send_one(st, sl_cluster_node_of(st, slot0), id, nkeys, keys, nargs, args, slot0);
        if (r != NULL) {
            r->cb = cb;
            r->data = data;
        }
        return r;
    }
    unsigned *slots = malloc((size_t)nkeys * sizeof(*slots));
    if (slots == NULL)
        return NULL;
    for (int k = 0; k < nkeys; k++)
        slots[k] = sl_slot_of_key(keys[k].p, keys[k].len);
    struct sl_store_req *r = split_eval(st, id, op, nkeys, keys, slots, nargs, args, cb, data);
    free(slots);
    return r;
}

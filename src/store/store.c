/* sluice — the asynchronous client of the quota store: the facade.
 *
 *   sl_store_eval() --route--> one node (url = redis://, the "single" node,
 *        |                     whose address comes from an address source)
 *        |          --route--> the master serving the keys' slot (url =
 *        |                     redis-cluster://, store/cluster.c), split
 *        |                     over slots when the keys are in several
 *        v
 *   store/node.c: one connection per node, pipelined, deadlines, NOSCRIPT
 *
 * This file holds what does not depend on how many nodes there are: the
 * scripts and their SHA-1 names, the request pool, the heartbeat, health as
 * the rest of sluice sees it, statistics, configuration and life. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/log.h"
#include "core/resolve.h"
#include "core/tls.h"
#include "store/node.h"
#include "store/scripts.h"
#include "store/sentinel.h"
#include "store/store-i.h"
#include "store/store.h"

#define HEARTBEAT_MS     1000              /* heartbeat period */
#define HEARTBEAT_TTL    "5000"            /* ms an entry lives in the instance set */
#define MAX_OUT          (16 * 1024 * 1024) /* unsent bytes before sl_store_eval() says no */
#define POOL_KEEP        4096              /* idle request structs kept */
#define CMD_KEEP         4096              /* command buffer a pooled request keeps */

const uint64_t sl_store_latency_bounds_us[11] = {
    100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000,
};

/* ---- requests: the pool ------------------------------------------------- */

struct sl_store_req *sl_store_req_get(struct sl_store *st)
{
    struct sl_store_req *r = st->pool;
    if (r != NULL) {
        st->pool = r->next;
        st->pool_n--;
    } else if ((r = calloc(1, sizeof(*r))) == NULL) {
        return NULL;
    }
    struct sl_obuf cmd = r->cmd;
    memset(r, 0, sizeof(*r));
    r->cmd = cmd;
    r->cmd.len = 0;
    return r;
}

void sl_store_req_put(struct sl_store *st, struct sl_store_req *r)
{
    if (st->pool_n >= POOL_KEEP) {
        free(r->cmd.p);
        free(r);
        return;
    }
    if (r->cmd.cap > CMD_KEEP) {
        free(r->cmd.p);
        r->cmd.p = NULL;
        r->cmd.cap = 0;
    }
    r->next = st->pool;
    st->pool = r;
    st->pool_n++;
}

/* Makes an EVALSHA request of <kind> on <nd> with a deadline. */
struct sl_store_req *sl_store_eval_on(struct sl_store *st, struct sl_node *nd, int kind,
                                      int script, int nkeys, const struct sl_str *keys,
                                      int nargs, const struct sl_str *args)
{
    struct sl_store_req *r = sl_store_req_get(st);
    if (r == NULL)
        return NULL;
    r->kind = (uint8_t)kind;
    r->script = script;
    r->sent_ns = uv_hrtime();
    r->deadline = sl_store_deadline(st, st->timeout_ms);
    if (sl_wire_evalsha(&r->cmd, st->scripts[script].sha, nkeys, keys, nargs, args) < 0 ||
        sl_node_send(nd, r, 0) < 0) {
        sl_store_req_put(st, r);
        return NULL;
    }
    return r;
}

/* The loop's clock is when its turn began. A turn that ran long, or a
 * process not run for a while after it read the clock (a loaded machine),
 * gave a call a deadline already close, or already passed, when it was made:
 * the next turn runs its timers before the prepare callback writes, so the
 * call timed out unsent and on_failure decided what the store would have.
 * The clock is read again here (uv_update_time: a coarse clock read), so a
 * call has its whole timeout from when it is made. */
uint64_t sl_store_deadline(struct sl_store *st, uint64_t ms)
{
    uv_update_time(st->loop);
    return uv_now(st->loop) + ms;
}

/* 1 when <nd> takes new requests now. */
int sl_store_node_usable(const struct sl_node *nd)
{
    return sl_node_up(nd) && nd->out.len <= MAX_OUT;
}

/* ---- health --------------------------------------------------------------- */

int sl_store_up(const struct sl_store *st)
{
    if (st == NULL || st->closing)
        return 0;
    if (!st->cluster)
        return sl_node_up(st->single);
    /* A cluster is up while any master serves: a request routed to a master
     * that is down fails on its own (SL_ESTORE), the others go on. */
    if (!st->map_ok)
        return 0;
    for (int i = 0; i < st->n_nodes; i++)
        if (st->nodes[i]->master && sl_node_up(st->nodes[i]))
            return 1;
    return 0;
}

static void send_heartbeat(struct sl_store *st);

void sl_store_node_health(struct sl_store *st, struct sl_node *nd, const char *why)
{
    if (st->closing)
        return;
    char q[160];
    int nup = sl_node_up(nd);
    /* Per node, for the masters: a seed that turns out a replica comes and
     * goes without news. */
    if (st->cluster && nd->logged != nup && (nup || nd->logged == 1) && nd->master) {
        if (nup)
            sl_log_info("quota store node up", "node=%s", nd->name);
        else
            sl_log_warn("quota store node down", "node=%s reason=%s", nd->name,
                        sl_log_quote(why, strlen(why), q, sizeof(q)));
    }
    if (!st->cluster || nd->master || !nup)
        nd->logged = (int8_t)nup;
    if (st->sentinel != NULL && !nup && nd == st->single)
        sl_sentinel_reask(st->sentinel); /* timeouts, a drop, -READONLY: moved? */
    if (st->map_applying)
        return; /* the map's end says what changed, once */
    if (st->cluster) {
        if (nup)
            sl_cluster_node_ready(st, nd);
        else if (nd->master)
            sl_cluster_want_refresh(st); /* a failover may be under way */
    }
    int up = sl_store_up(st);
    /* A cluster is not up before its map: that is no news, a failure is. */
    if (up != st->logged && (up || why[0] != '\0' || st->logged == 1)) {
        st->logged = up;
        if (up)
            sl_log_info("quota store up", "addr=%s", st->conf.addr.text);
        else
            sl_log_warn("quota store down", "addr=%s reason=%s", st->conf.addr.text,
                        sl_log_quote(why, strlen(why), q, sizeof(q)));
    }
    if (nd->just_ready) {
        nd->just_ready = 0;
        send_heartbeat(st); /* the live count, at once */
    }
}

/* ---- the address source of the single node ------------------------------ */

/* A lookup of the store's host name ended: connect to what it gave, or,
 * when it failed, to the last good address. Said once per change. */
static void on_resolved(struct sl_resolve *r, enum sl_resolve_event ev, int err)
{
    struct sl_store *st = r->data;
    char addr[64];
    sl_resolve_fmt(&r->ss, addr, sizeof(addr));
    if (ev == SL_RESOLVE_CHANGED || ev == SL_RESOLVE_RECOVERED)
        sl_log_info(ev == SL_RESOLVE_CHANGED ? "quota store address changed"
                                             : "quota store name resolved again",
                    "url=%s resolved=%s", st->conf.addr.text, addr);
    else if (ev == SL_RESOLVE_FAILING && r->ss.ss_family == AF_UNSPEC)
        sl_log_warn("quota store name not resolved: retrying with backoff, on_failure meanwhile",
                    "url=%s err=\"%s\"", st->conf.addr.text, uv_strerror(err));
    else if (ev == SL_RESOLVE_FAILING)
        sl_log_warn("quota store name not resolved: keeping the last address",
                    "url=%s resolved=%s err=\"%s\"", st->conf.addr.text, addr, uv_strerror(err));
    if (!st->closing && st->single != NULL)
        sl_node_connect(st->single, &st->res.ss);
}

/* The url's host: a store named by a host name may have moved (a failover
 * that repoints a DNS record), so it is looked up again first, off the
 * loop; on_resolved connects. */
static void resolve_locate(struct sl_store *st, struct sl_node *nd)
{
    if (st->res.name[0] != '\0' && sl_resolve_start(&st->res, st->loop) == 0)
        return;
    sl_node_connect(nd, &st->res.ss);
}

/* url = redis-sentinel://: the sentinels say where the master is. Until
 * they have, the node waits (on_master connects it); a node that drops or
 * fails to connect makes them be asked again (a failover may be under
 * way), and connects meanwhile where they last said. */
static void sentinel_locate(struct sl_store *st, struct sl_node *nd)
{
    struct sockaddr_storage ss;
    sl_sentinel_reask(st->sentinel);
    if (sl_sentinel_master(st->sentinel, &ss) == 0)
        sl_node_connect(nd, &ss);
}

/* The sentinels named the master (first, or a new one after a failover). */
static void on_master(void *data, const struct sockaddr_storage *master)
{
    struct sl_store *st = data;
    struct sl_node *nd = st->single;
    char addr[64];
    sl_resolve_fmt(master, addr, sizeof(addr));
    sl_log_info("quota store master from sentinel", "master=%s addr=%s", st->conf.master_name,
                addr);
    if (st->closing || nd == NULL)
        return;
    if (nd->conn == SL_NODE_DISCONNECTED) {
        nd->backoff_ms = SL_NODE_BACKOFF_MIN_MS;
        sl_node_connect(nd, master); /* waiting for an address, or backing off */
    } else if (!sl_resolve_same_addr(&nd->ss, master)) {
        /* Requests on the old master fail (on_failure); the node comes
         * back through sentinel_locate, at the new address. */
        nd->backoff_ms = SL_NODE_BACKOFF_MIN_MS;
        sl_node_drop(nd, "sentinel: the master moved", 0);
    }
}

static int start_sentinel(struct sl_store *st)
{
    const struct sl_sentinel_conf sc = {
        .sentinels = st->conf.seeds,
        .n_sentinels = st->conf.n_seeds,
        .master_name = st->conf.master_name,
        .user = st->conf.sentinel_user,
        .password = st->conf.sentinel_password,
        .tls = st->conf.sentinel_tls,
        .tls_ctx = st->tls,
        .connect_timeout_us = st->conf.connect_timeout_us,
        /* The store's timeout (25 ms by default) is for scripts; a sentinel
         * is asked rarely and may be farther: the connect timeout. */
        .timeout_us = st->conf.connect_timeout_us,
    };
    st->sentinel = sl_sentinel_new(st->loop, &sc, on_master, st);
    return st->sentinel != NULL ? 0 : -1;
}

void sl_store_node_locate(struct sl_store *st, struct sl_node *nd)
{
    if (st->cluster || nd != st->single)
        sl_node_connect(nd, NULL); /* a cluster node stays where the map says */
    else
        st->locate(st, nd);
}

/* ---- heartbeat and probes ---------------------------------------------- */

static struct sl_node *hb_node(struct sl_store *st)
{
    if (!st->cluster)
        return st->single;
    return sl_cluster_node_of(st, sl_slot_of_key(st->hb_key, strlen(st->hb_key)));
}

static void send_heartbeat_on(struct sl_store *st, struct sl_node *nd)
{
    if (st->hb_req != NULL || nd == NULL)
        return;
    struct sl_str key = sl_wire_cstr(st->hb_key);
    struct sl_str args[3] = { sl_wire_cstr(st->id), { HEARTBEAT_TTL, sizeof(HEARTBEAT_TTL) - 1 },
                              { "0", 1 } };
    st->hb_req = sl_store_eval_on(st, nd, SL_K_HB, SL_SCRIPT_HEARTBEAT, 1, &key, 3, args);
}

static void send_heartbeat(struct sl_store *st)
{
    struct sl_node *nd = hb_node(st);
    if (sl_node_up(nd))
        send_heartbeat_on(st, nd);
}

void sl_store_node_probe(struct sl_store *st, struct sl_node *nd)
{
    if (!st->cluster) {
        send_heartbeat_on(st, nd); /* the probe is a heartbeat: scripts run too */
        return;
    }
    if (nd->probe_req != NULL)
        return;
    struct sl_store_req *r = sl_store_req_get(st);
    struct sl_str argv[2] = { { "CLUSTER", 7 }, { "INFO", 4 } };
    if (r == NULL)
        return;
    r->kind = SL_K_PROBE;
    r->sent_ns = uv_hrtime();
    r->deadline = sl_store_deadline(st, st->timeout_ms);
    if (sl_wire_encode(&r->cmd, 2, argv, 0, NULL, 0, NULL) < 0 || sl_node_send(nd, r, 0) < 0) {
        sl_store_req_put(st, r);
        return;
    }
    nd->probe_req = r;
}

void sl_store_heartbeat_reply(struct sl_store *st, int status, const int64_t *vals, int n)
{
    if (status == 0 && n >= 1)
        st->live = vals[0] > 1 ? (uint64_t)vals[0] : 1;
}

static void on_heartbeat(uv_timer_t *t)
{
    struct sl_store *st = t->data;
    if (sl_store_up(st))
        send_heartbeat(st);
}

/* ---- configuration -------------------------------------------------------- */

static void free_conf_strings(struct sl_store_conf *c)
{
    if (c->password != NULL)
        explicit_bzero(c->password, strlen(c->password)); /* not left in freed memory */
    free(c->url);
    free(c->user);
    free(c->password_file);
    free(c->password);
    free(c->key_prefix);
    free(c->seeds);
    free(c->master_name);
    free(c->tls_ca);
    free(c->tls_cert);
    free(c->tls_key);
    free(c->tls_sni);
    if (c->sentinel_password != NULL)
        explicit_bzero(c->sentinel_password, strlen(c->sentinel_password));
    free(c->sentinel_password);
    free(c->sentinel_password_file);
    free(c->sentinel_user);
    c->url = c->user = c->password_file = c->password = c->key_prefix = c->master_name = NULL;
    c->tls_ca = c->tls_cert = c->tls_key = c->tls_sni = NULL;
    c->sentinel_password = c->sentinel_password_file = c->sentinel_user = NULL;
    c->seeds = NULL;
    c->n_seeds = 0;
}

static int dup_str(char **dst, const char *src)
{
    *dst = NULL;
    if (src == NULL)
        return 0;
    *dst = strdup(src);
    return *dst ? 0 : -1;
}

/* 1 when <c>'s url names <host>, which did not resolve at load, and <st>
 * already has an address for that same name and port. */
static int unresolved_same_name(const struct sl_store *st, const struct sl_store_conf *c,
                                const char *host)
{
    return c->kind == SL_STORE_REDIS && c->addr.named && c->addr.ss.ss_family == AF_UNSPEC &&
           st->res.ss.ss_family != AF_UNSPEC && st->res.port == c->addr.port &&
           strcmp(st->res.name, host) == 0;
}

/* Copies <src> into <st>'s own conf (strings duplicated). Returns 0 or -1. */
static int set_conf(struct sl_store *st, const struct sl_store_conf *src)
{
    struct sl_store_conf c = *src;
    c.url = c.user = c.password_file = c.password = c.key_prefix = c.master_name = NULL;
    c.tls_ca = c.tls_cert = c.tls_key = c.tls_sni = NULL;
    c.sentinel_password = c.sentinel_password_file = c.sentinel_user = NULL;
    c.seeds = NULL;
    char *key = NULL;
    const char *prefix = src->key_prefix ? src->key_prefix : "sluice:";
    /* A conf made by hand (tests) may name its address only in addr. */
    int n_seeds = src->n_seeds > 0 && src->seeds != NULL ? src->n_seeds : 1;
    c.n_seeds = n_seeds;
    if (dup_str(&c.url, src->url) || dup_str(&c.user, src->user) ||
        dup_str(&c.password_file, src->password_file) || dup_str(&c.password, src->password) ||
        dup_str(&c.key_prefix, prefix) || dup_str(&c.master_name, src->master_name) ||
        dup_str(&c.tls_ca, src->tls_ca) || dup_str(&c.tls_cert, src->tls_cert) ||
        dup_str(&c.tls_key, src->tls_key) || dup_str(&c.tls_sni, src->tls_sni) ||
        dup_str(&c.sentinel_user, src->sentinel_user) ||
        dup_str(&c.sentinel_password, src->sentinel_password) ||
        dup_str(&c.sentinel_password_file, src->sentinel_password_file) ||
        (c.seeds = calloc((size_t)n_seeds, sizeof(*c.seeds))) == NULL ||
        (key = malloc(strlen(prefix) + 10)) == NULL) {
        free_conf_strings(&c);
        return -1;
    }
    if (src->n_seeds > 0 && src->seeds != NULL)
        memcpy(c.seeds, src->seeds, (size_t)n_seeds * sizeof(*c.seeds));
    else
        c.seeds[0] = src->addr;
    sprintf(key, "%sinstances", prefix);
    /* A new TLS context (files read again: a reload picks up rotated
     * certificates) for new connections; live ones keep theirs. A file
     * that broke since the load keeps the old context. The sentinels use
     * the same one (sentinel_tls). */
    if (c.tls || c.sentinel_tls) {
        struct sl_tls_conf tc = {
            .role = SL_TLS_CLIENT, .ca_file = c.tls_ca, .cert_file = c.tls_cert,
            .key_file = c.tls_key, .verify = c.tls_verify ? SL_TLS_VERIFY_ON : SL_TLS_VERIFY_OFF,
        };
        char err[512];
        struct sl_tls_ctx *ctx = NULL;
        if (sl_tls_ctx_new(&ctx, &tc, err, sizeof(err)) != SL_OK) {
            char q[600];
            sl_log_error("quota store TLS settings not applied", "error=%s",
                         sl_log_quote(err, strlen(err), q, sizeof(q)));
        } else {
            sl_tls_ctx_unref(st->tls);
            st->tls = ctx;
        }
        if (!c.tls_verify && !st->conf.tls && !st->conf.sentinel_tls)
            sl_log_warn("quota store TLS certificate NOT verified (tls_verify = off)",
                        "addr=%s", c.addr.text);
    } else {
        sl_tls_ctx_unref(st->tls);
        st->tls = NULL;
    }
    free_conf_strings(&st->conf);
    free(st->hb_key);
    st->conf = c;
    st->hb_key = key;
    /* Resolved by the loader just now (conf/resolve.h). */
    char host[sizeof(c.addr.text)] = "";
    if (c.addr.named) {
        snprintf(host, sizeof(host), "%s", c.addr.text);
        char *colon = strrchr(host, ':');
        if (colon != NULL)
            *colon = '\0';
    }
    /* A name that did not resolve at this load (conf/resolve.h) but did
     * before keeps its last good address, as a failed lookup at run time
     * does; one never resolved has none and is looked up before connecting
     * (resolve_locate; the node waits with backoff meanwhile). */
    struct sockaddr_storage ss = c.addr.ss;
    if (unresolved_same_name(st, &c, host))
        ss = st->res.ss;
    sl_resolve_set(&st->res, host, c.addr.port, &ss, uv_now(st->loop));
    uint64_t ms = (c.timeout_us + 999) / 1000;
    st->timeout_ms = ms ? ms : 1;
    return 0;
}

static int same_str(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* Whether the TLS settings of <a> and <b> are the same (same file names:
 * rotated contents reach new connections through set_conf's new context). */
static int same_tls(const struct sl_store_conf *a, const struct sl_store_conf *b)
{
    return a->tls == b->tls && a->sentinel_tls == b->sentinel_tls &&
           a->tls_verify == b->tls_verify && same_str(a->tls_ca, b->tls_ca) &&
           same_str(a->tls_cert, b->tls_cert) && same_str(a->tls_key, b->tls_key) &&
           same_str(a->tls_sni, b->tls_sni);
}

static int same_seeds(const struct sl_store_conf *a, const struct sl_store_conf *b)
{
    int nb = b->n_seeds > 0 && b->seeds != NULL ? b->n_seeds : 1;
    if (a->n_seeds != nb)
        return 0;
    for (int i = 0; i < nb; i++)
        if (!sl_resolve_same_addr(&a->seeds[i].ss, b->seeds != NULL ? &b->seeds[i].ss : &b->addr.ss))
            return 0;
    return 1;
}

/* ---- life ------------------------------------------------------------------- */

static int set_script(struct script *s, const char *body)
{
    char *copy = strdup(body);
    if (copy == NULL)
        return -1;
    free(s->body);
    s->body = copy;
    s->len = strlen(copy);
    sl_wire_sha1_hex(copy, s->len, s->sha);
    return 0;
}

static void store_free(struct sl_store *st)
{
    for (int i = 0; i < st->n_scripts; i++)
        free(st->scripts[i].body);
    while (st->pool != NULL) {
        struct sl_store_req *r = st->pool;
        st->pool = r->next;
        free(r->cmd.p);
        free(r);
    }
    free_conf_strings(&st->conf);
    sl_tls_ctx_unref(st->tls);
    free(st->hb_key);
    free(st->id);
    free(st->slot_node);
    free(st);
}

static void on_handle_close(uv_handle_t *h)
{
    struct sl_store *st = h->data;
    if (--st->handles == 0 && st->closing)
        store_free(st);
}

void sl_store_node_freed(struct sl_store *st)
{
    if (--st->handles == 0 && st->closing)
        store_free(st);
}

/* Makes a node and counts it among the store's handles. */
struct sl_node *sl_store_add_node(struct sl_store *st, const char *name,
                                  const struct sockaddr_storage *ss)
{
    if (st->n_nodes >= SL_STORE_MAX_NODES)
        return NULL;
    struct sl_node *nd = sl_node_new(st, name, ss);
    if (nd == NULL)
        return NULL;
    nd->idx = st->n_nodes;
    st->nodes[st->n_nodes++] = nd;
    st->handles++;
    return nd;
}

/* The single node: made (or found again after a reload) and connecting. */
static int start_single(struct sl_store *st)
{
    struct sl_node *nd = NULL;
    for (int i = 0; i < st->n_nodes && nd == NULL; i++)
        if (sl_resolve_same_addr(&st->nodes[i]->ss, &st->res.ss))
            nd = st->nodes[i];
    if (nd == NULL && (nd = sl_store_add_node(st, st->conf.addr.text, &st->res.ss)) == NULL)
        return -1;
    st->single = nd;
    nd->master = 1;
    if (st->sentinel != NULL || st->res.ss.ss_family == AF_UNSPEC)
        st->locate(st, nd); /* connects once the sentinels (the name's lookup) have answered */
    else
        sl_node_connect(nd, &st->res.ss);
    return 0;
}

struct sl_store *sl_store_new(uv_loop_t *loop, const struct sl_store_conf *conf,
                              const char *instance_id)
{
    struct sl_store *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return NULL;
    st->loop = loop;
    st->logged = -1;
    st->live = 1;
    st->res.cb = on_resolved;
    st->res.data = st;
    st->locate = resolve_locate;
    st->cluster = conf->kind == SL_STORE_CLUSTER;
    if (set_conf(st, conf) < 0 || (st->id = strdup(instance_id ? instance_id : "sluice")) == NULL)
        goto fail;
    for (int i = 0; i < SL_SCRIPT_COUNT; i++)
        if (set_script(&st->scripts[i], sl_lua_scripts[i]) < 0)
            goto fail;
    st->n_scripts = SL_SCRIPT_COUNT;

    uv_timer_init(loop, &st->hb_timer);
    uv_timer_init(loop, &st->refresh_timer);
    st->handles = 2;
    st->hb_timer.data = st->refresh_timer.data = st;
    uv_timer_start(&st->hb_timer, on_heartbeat, HEARTBEAT_MS, HEARTBEAT_MS);
    if (conf->kind == SL_STORE_SENTINEL) {
        st->locate = sentinel_locate;
        if (start_sentinel(st) < 0) {
            sl_store_close(st);
            return NULL;
        }
    }
    if ((st->cluster ? sl_cluster_start(st) : start_single(st)) < 0) {
        sl_store_close(st);
        return NULL;
    }
    return st;

fail:
    store_free(st);
    return NULL;
}

/* <conf> names the host <st> connects to now, which did not resolve at
 * this load: set_conf keeps the address, so the connection stays. */
static int same_unresolved(const struct sl_store *st, const struct sl_store_conf *conf)
{
    char host[sizeof(conf->addr.text)];
    snprintf(host, sizeof(host), "%s", conf->addr.text);
    char *colon = strrchr(host, ':');
    if (colon != NULL)
        *colon = '\0';
    return unresolved_same_name(st, conf, host);
}

void sl_store_reconfigure(struct sl_store *st, const struct sl_store_conf *conf)
{
    if (st == NULL || st->closing)
        return;
    int sentinel = conf->kind == SL_STORE_SENTINEL;
    if (sentinel || st->sentinel != NULL) {
        /* To, from or between Sentinel deployments: the same sentinels and
         * master name keep their client; anything else starts over. */
        int same = sentinel && st->sentinel != NULL && same_seeds(&st->conf, conf) &&
                   same_str(st->conf.master_name, conf->master_name) &&
                   same_str(st->conf.user, conf->user) &&
                   same_str(st->conf.password, conf->password) && st->conf.db == conf->db &&
                   same_str(st->conf.sentinel_user, conf->sentinel_user) &&
                   same_str(st->conf.sentinel_password, conf->sentinel_password) &&
                   same_tls(&st->conf, conf);
        if (set_conf(st, conf) < 0) {
            sl_log_error("quota store reconfigure failed", "error=\"%s\"", sl_strerror(SL_ENOMEM));
            return;
        }
        if (same) {
            sl_sentinel_set_tls(st->sentinel, st->tls); /* files read again: next connections */
            return;
        }
        sl_sentinel_close(st->sentinel);
        st->sentinel = NULL;
        st->locate = resolve_locate;
        for (int i = 0; i < st->n_nodes; i++) {
            st->nodes[i]->master = 0;
            sl_node_drop(st->nodes[i], "reconfigured", 1);
        }
        st->single = NULL;
        st->cluster = conf->kind == SL_STORE_CLUSTER;
        if (sentinel) {
            st->locate = sentinel_locate;
            if (start_sentinel(st) < 0) {
                sl_log_error("quota store reconfigure failed", "error=\"%s\"",
                             sl_strerror(SL_ENOMEM));
                return;
            }
        }
        if ((st->cluster ? sl_cluster_start(st) : start_single(st)) < 0)
            sl_log_error("quota store reconfigure failed", "error=\"%s\"", sl_strerror(SL_ENOMEM));
        return;
    }
    int cluster = conf->kind == SL_STORE_CLUSTER;
    int same_place = cluster == st->cluster &&
                     (cluster ? same_seeds(&st->conf, conf)
                              : sl_resolve_same_addr(&st->res.ss, &conf->addr.ss) ||
                                    same_unresolved(st, conf));
    int reconnect = !same_place || !same_str(st->conf.user, conf->user) ||
                    !same_str(st->conf.password, conf->password) || st->conf.db != conf->db ||
                    !same_tls(&st->conf, conf);
    if (set_conf(st, conf) < 0) {
        sl_log_error("quota store reconfigure failed", "error=\"%s\"", sl_strerror(SL_ENOMEM));
        return;
    }
    if (!reconnect)
        return;
    if (cluster != st->cluster || cluster) {
        /* Another kind of store, other seeds or credentials: start over. */
        for (int i = 0; i < st->n_nodes; i++) {
            st->nodes[i]->master = 0;
            sl_node_drop(st->nodes[i], "reconfigured", 1);
        }
        st->single = NULL;
        st->cluster = (uint8_t)cluster;
        if ((cluster ? sl_cluster_start(st) : start_single(st)) < 0)
            sl_log_error("quota store reconfigure failed", "error=\"%s\"", sl_strerror(SL_ENOMEM));
        return;
    }
    st->single->backoff_ms = SL_NODE_BACKOFF_MIN_MS;
    st->single->ss = st->res.ss;
    sl_node_drop(st->single, "reconfigured", 0);
}

void sl_store_close(struct sl_store *st)
{
    if (st == NULL || st->closing)
        return;
    st->closing = 1; /* from here on sl_store_eval() says no */
    sl_resolve_stop(&st->res);
    sl_cluster_seeds_stop(st);
    sl_sentinel_close(st->sentinel);
    st->sentinel = NULL;
    struct sl_node *hb = hb_node(st);
    if (hb != NULL && hb->conn == SL_NODE_READY && !hb->io.writing) {
        /* Best effort: leave the heartbeat set now rather than in 5 s. */
        struct sl_str key = sl_wire_cstr(st->hb_key);
        struct sl_str argv[7] = { { "EVALSHA", 7 }, { st->scripts[SL_SCRIPT_HEARTBEAT].sha, 40 },
                                  { "1", 1 }, key, sl_wire_cstr(st->id),
                                  { HEARTBEAT_TTL, sizeof(HEARTBEAT_TTL) - 1 }, { "1", 1 } };
        hb->out.len = 0;
        if (sl_wire_encode(&hb->out, 7, argv, 0, NULL, 0, NULL) == 0)
            sl_node_try_write_now(hb);
    }
    for (int i = 0; i < st->n_nodes; i++)
        sl_node_close(st->nodes[i]);
    uv_close((uv_handle_t *)&st->hb_timer, on_handle_close);
    uv_close((uv_handle_t *)&st->refresh_timer, on_handle_close);
}

struct sl_store_req *sl_store_eval(struct sl_store *st, enum sl_script id,
                                   int nkeys, const struct sl_str *keys,
                                   int nargs, const struct sl_str *args,
                                   sl_store_cb *cb, void *data)
{
    if (st == NULL || st->closing || (int)id < 0 || (int)id >= st->n_scripts || nkeys < 0 ||
        nargs < 0)
        return NULL;
    struct sl_store_req *r;
    if (st->cluster) {
        r = sl_cluster_eval(st, (int)id, nkeys, keys, nargs, args, cb, data);
    } else {
        if (!sl_store_node_usable(st->single))
            return NULL;
        r = sl_store_eval_on(st, st->single, SL_K_EVAL, (int)id, nkeys, keys, nargs, args);
        if (r != NULL) {
            r->cb = cb;
            r->data = data;
        }
    }
    if (r != NULL)
        st->stats.requests++;
    return r;
}

struct sl_store_req *sl_store_hget(struct sl_store *st, struct sl_str key, struct sl_str field,
                                   sl_store_text_cb *cb, void *data)
{
    if (st == NULL || st->closing)
        return NULL;
    struct sl_node *nd = st->cluster ? sl_cluster_node_of(st, sl_slot_of_key(key.p, key.len))
                                     : st->single;
    if (nd == NULL || !sl_store_node_usable(nd))
        return NULL;
    struct sl_store_req *r = sl_store_req_get(st);
    if (r == NULL)
        return NULL;
    struct sl_str argv[3] = { { "HGET", 4 }, key, field };
    r->kind = SL_K_TEXT;
    r->sent_ns = uv_hrtime();
    r->deadline = sl_store_deadline(st, st->timeout_ms);
    r->slot = (uint16_t)sl_slot_of_key(key.p, key.len);
    if (sl_wire_encode(&r->cmd, 3, argv, 0, NULL, 0, NULL) < 0 || sl_node_send(nd, r, 0) < 0) {
        sl_store_req_put(st, r);
        return NULL;
    }
    r->tcb = cb;
    r->data = data;
    st->stats.requests++;
    return r;
}

void sl_store_cancel(struct sl_store_req *req)
{
    if (req != NULL) {
        req->cb = NULL;
        req->tcb = NULL;
    }
}

uint64_t sl_store_live_instances(const struct sl_store *st)
{
    return st != NULL && st->live > 0 ? st->live : 1;
}

const struct sl_store_stats *sl_store_stats(const struct sl_store *st)
{
    struct sl_store *w = (struct sl_store *)st; /* the gauges are filled in on demand */
    w->stats.nodes = 0;
    w->stats.nodes_up = 0;
    for (int i = 0; i < st->n_nodes; i++) {
        if (!st->nodes[i]->master)
            continue;
        w->stats.nodes++;
        w->stats.nodes_up += (uint64_t)sl_node_up(st->nodes[i]);
    }
    return &st->stats;
}

int sl_store_script_add(struct sl_store *st, const char *body)
{
    if (st == NULL || body == NULL || st->n_scripts >= SL_STORE_MAX_SCRIPTS)
        return -1;
    if (set_script(&st->scripts[st->n_scripts], body) < 0)
        return -1;
    for (int i = 0; i < st->n_nodes; i++)
        st->nodes[i]->load_seq[st->n_scripts] = 0;
    return st->n_scripts++;
}

int sl_store_script_set(struct sl_store *st, int id, const char *body)
{
    if (st == NULL || body == NULL || id < 0 || id >= st->n_scripts)
        return -1;
    if (set_script(&st->scripts[id], body) < 0)
        return -1;
    for (int i = 0; i < st->n_nodes; i++)
        st->nodes[i]->load_seq[id] = 0;
    return 0;
}

const char *sl_store_script_sha(const struct sl_store *st, int id)
{
    if (st == NULL || id < 0 || id >= st->n_scripts)
        return NULL;
    return st->scripts[id].sha;
}

size_t sl_store_in_flight(const struct sl_store *st)
{
    size_t n = 0;
    for (int i = 0; st != NULL && i < st->n_nodes; i++)
        n += st->nodes[i]->fifo_n;
    return n;
}

const char *sl_store_instance_id(const struct sl_store *st)
{
    return st->id;
}

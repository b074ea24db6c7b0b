/* sluice — listeners and the server that owns them.
 *
 * A listener is a listening socket plus the sessions it accepted, kept in
 * three timeout queues (connecting, active, lingering) that one sweep timer
 * a second walks from their expired ends. A reload keeps the sockets of
 * listeners whose name, address and protocol did not change (so no connection
 * is refused during a reload), binds new ones and retires removed ones; a
 * retired listener is freed when its last session goes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sys/socket.h>
#include <unistd.h>

#include "admin/admin.h"
#include "conf/conf.h"
#include "core/err.h"
#include "core/log.h"
#include "limit/limiter.h"
#include "net/listener.h"
#include "net/report.h"
#include "net/session.h"
#include "shape/wait.h"
#include "store/store.h"

#define SWEEP_MS 1000
#define BACKLOG  511

static void on_connection(uv_stream_t *h, int status)
{
    struct sl_listener *l = h->data;
    if (status < 0) {
        sl_log_warn("accept failed", "listener=%s err=%s", l->name, uv_strerror(status));
        return;
    }
    sl_session_accept(l);
}

void sl_listener_stats_add(struct sl_listener_stats *to, const struct sl_listener_stats *from)
{
    /* Every member is a uint64_t: adding them all keeps this right when
     * counters are added to the struct. */
    _Static_assert(sizeof(*to) % sizeof(uint64_t) == 0, "listener stats are uint64_t");
    uint64_t *t = (uint64_t *)to;
    const uint64_t *f = (const uint64_t *)from;
    for (size_t i = 0; i < sizeof(*to) / sizeof(uint64_t); i++)
        t[i] += f[i];
}

/* Another listener of <l>'s name that takes over its counters when it goes:
 * the live one (a moved listener's new socket), else any. */
static struct sl_listener *heir(struct sl_listener *l)
{
    struct sl_listener *any = NULL;
    for (struct sl_listener *o = l->srv->listeners; o != NULL; o = o->next) {
        if (o == l || strcmp(o->name, l->name) != 0)
            continue;
        if (!o->retired)
            return o;
        any = any != NULL ? any : o;
    }
    return any;
}

static void listener_free(struct sl_listener *l)
{
    struct sl_server *srv = l->srv;
    /* One series per name, and counters never go back: what the sessions of
     * a moved (or removed and re-added) listener counted stays in the name's
     * totals once its old socket is gone. */
    struct sl_listener *h = heir(l);
    if (h != NULL) {
        l->stats.conns_active = 0; /* no session left; the heir counts its own */
        sl_listener_stats_add(&h->stats, &l->stats);
    }
    struct sl_listener **pp = &srv->listeners;
    while (*pp != l)
        pp = &(*pp)->next;
    *pp = l->next;
    free(l->name);
    free(l);
}

static void maybe_stopped(struct sl_server *srv);

static void on_listener_close(uv_handle_t *h)
{
    struct sl_listener *l = h->data;
    struct sl_server *srv = l->srv;
    l->open = 0;
    if (l->retired && l->sessions == 0)
        listener_free(l);
    maybe_stopped(srv);
}

static void listener_close(struct sl_listener *l)
{
    if (l->open && !uv_is_closing((uv_handle_t *)&l->handle))
        uv_close((uv_handle_t *)&l->handle, on_listener_close);
}

void sl_listener_session_gone(struct sl_listener *l)
{
    struct sl_server *srv = l->srv;
    l->sessions--;
    if (l->sessions == 0 && l->retired && !l->open)
        listener_free(l);
    maybe_stopped(srv);
}

/* Keeps listeners in file order (metrics and /stats list them so). */
static void append(struct sl_server *srv, struct sl_listener *l)
{
    struct sl_listener **pp = &srv->listeners;
    while (*pp != NULL)
        pp = &(*pp)->next;
    l->next = NULL;
    *pp = l;
}

/* Copies the settings of <lc>: sessions may outlive the configuration that
 * made their listener (reload), so they never point into it. */
static void set_conf(struct sl_listener *l, const struct sl_listener_conf *lc)
{
    l->cf = *lc;
    l->cf.name = l->name;
    l->cf.next = NULL;
    memset(l->cf.identity_header, 0, sizeof(l->cf.identity_header));
    l->conf = &l->cf;
}

/* Makes the listening socket of <l>. A worker's has SO_REUSEPORT: every
 * worker binds its own socket to the address and the kernel spreads new
 * connections over them. A process started without workers does not set it,
 * so it cannot silently share a port with another one. */
static int reuseport_socket(struct sl_server *srv, struct sl_listener *l,
                            const struct sl_listener_conf *lc)
{
    if (!srv->worker) {
        uv_tcp_init(srv->loop, &l->handle);
        return 0;
    }
    int rc = uv_tcp_init_ex(srv->loop, &l->handle, lc->listen.ss.ss_family);
    if (rc < 0) {
        uv_tcp_init(srv->loop, &l->handle); /* so that it can be closed like the others */
        return rc;
    }
    uv_os_fd_t fd;
    int one = 1;
    if ((rc = uv_fileno((uv_handle_t *)&l->handle, &fd)) == 0 &&
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0)
        rc = uv_translate_sys_error(errno);
    return rc;
}

/* Binds a new listener for <lc>; returns it, or NULL (logged). */
static struct sl_listener *listener_open(struct sl_server *srv, struct sl_listener_conf *lc)
{
    struct sl_listener *l = calloc(1, sizeof(*l));
    if (l == NULL || (l->name = strdup(lc->name)) == NULL) {
        free(l);
        return NULL;
    }
    l->srv = srv;
    set_conf(l, lc);
    l->limited = (uint8_t)sl_limiter_active(srv->limiter, l->name);
    l->handle.data = l;
    l->open = 1;
    int rc = reuseport_socket(srv, l, lc);
    if (rc == 0)
        rc = uv_tcp_bind(&l->handle, (const struct sockaddr *)&lc->listen.ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&l->handle, BACKLOG, on_connection);
    if (rc < 0) {
        sl_log_error("cannot listen", "listener=%s addr=%s err=%s", lc->name, lc->listen.text,
                     uv_strerror(rc));
        l->retired = 1;
        append(srv, l);
        listener_close(l);
        return NULL;
    }
    append(srv, l);
    sl_log_info("listening", "listener=%s addr=%s upstream=%s protocol=%s", lc->name,
                lc->listen.text, lc->upstream.text,
                lc->protocol == SL_PROTO_RESP ? "resp" : lc->protocol == SL_PROTO_TCP ? "tcp" : "http");
    return l;
}

static void on_sweep(uv_timer_t *t)
{
    struct sl_server *srv = t->data;
    uint64_t now = uv_now(srv->loop);
    for (struct sl_listener *l = srv->listeners; l != NULL; l = l->next)
        sl_session_sweep(l, now);
    if (srv->limiter)
        sl_limiter_sweep(srv->limiter, uv_hrtime() / 1000);
}

/* The quota store client, for url = redis:// (NULL for local). */
static struct sl_store *store_for(struct sl_server *srv, const struct sl_conf *c)
{
    if (c->store.kind != SL_STORE_REDIS)
        return NULL;
    char host[64] = "sluice", id[128];
    gethostname(host, sizeof(host) - 1);
    snprintf(id, sizeof(id), "%s:%d:%08x", host, (int)getpid(), (unsigned)(uv_hrtime() & 0xffffffffu));
    return sl_store_new(srv->loop, &c->store, id);
}

static void on_turn_pre(uv_prepare_t *h)
{
    (void)h;
    sl_session_turn_end();
}

static void on_turn_post(uv_check_t *h)
{
    (void)h;
    sl_session_turn_end();
}

void sl_server_init(struct sl_server *srv, uv_loop_t *loop, struct sl_conf *conf)
{
    memset(srv, 0, sizeof(*srv));
    srv->loop = loop;
    srv->conf = conf;
    uv_timer_init(loop, &srv->sweep);
    srv->sweep.data = srv;
    uv_timer_init(loop, &srv->grace);
    srv->grace.data = srv;
    sl_waits_init(&srv->waits, loop, NULL);
    sl_waits_default = &srv->waits;
    /* Verdicts from the store land in the poll phase (check runs right
     * after it) or with a timeout in the timer phase (prepare runs before
     * the loop sleeps). Neither keeps the loop alive. */
    uv_prepare_init(loop, &srv->turn_pre);
    uv_prepare_start(&srv->turn_pre, on_turn_pre);
    uv_unref((uv_handle_t *)&srv->turn_pre);
    uv_check_init(loop, &srv->turn_post);
    uv_check_start(&srv->turn_post, on_turn_post);
    uv_unref((uv_handle_t *)&srv->turn_post);
}

void sl_server_admin_cbs(struct sl_server *srv, struct sl_admin_cbs *cbs)
{
    memset(cbs, 0, sizeof(*cbs));
    cbs->metrics = sl_server_metrics;
    cbs->stats = sl_server_stats;
    cbs->ready = sl_server_ready;
    cbs->data = srv;
}

int sl_server_start(struct sl_server *srv)
{
    srv->store = store_for(srv, srv->conf);
    srv->limiter = sl_limiter_new(srv->conf, srv->store);
    if (srv->limiter == NULL || (srv->conf->store.kind == SL_STORE_REDIS && srv->store == NULL)) {
        sl_log_error("cannot set up the limits", "%s", "");
        return SL_ENOMEM;
    }
    if (srv->conf->has_admin && !srv->worker) {
        struct sl_admin_cbs cbs;
        sl_server_admin_cbs(srv, &cbs);
        srv->admin = sl_admin_start(srv->loop, &srv->conf->admin, &cbs);
        if (srv->admin == NULL)
            return SL_ECONF;
    }
    for (struct sl_listener_conf *lc = srv->conf->listeners; lc != NULL; lc = lc->next) {
        if (listener_open(srv, lc) == NULL) {
            for (struct sl_listener *l = srv->listeners; l != NULL; l = l->next) {
                l->retired = 1;
                listener_close(l);
            }
            return SL_ECONF;
        }
    }
    uv_timer_start(&srv->sweep, on_sweep, SWEEP_MS, SWEEP_MS);
    return 0;
}

static struct sl_listener *live_listener(struct sl_server *srv, const char *name)
{
    for (struct sl_listener *l = srv->listeners; l != NULL; l = l->next)
        if (!l->retired && strcmp(l->name, name) == 0)
            return l;
    return NULL;
}

static int same_socket(const struct sl_listener_conf *a, const struct sl_listener_conf *b)
{
    return strcmp(a->listen.text, b->listen.text) == 0 && a->protocol == b->protocol;
}

int sl_server_reload(struct sl_server *srv, struct sl_conf *conf)
{
    /* The new limits first: without them there is nothing to swap in. */
    struct sl_store *store = srv->store;
    int new_store = 0;
    if (conf->store.kind == SL_STORE_REDIS && store == NULL) {
        store = store_for(srv, conf);
        new_store = 1;
    }
    struct sl_limiter *lim = sl_limiter_new(conf, conf->store.kind == SL_STORE_REDIS ? store : NULL);
    if (lim == NULL || (conf->store.kind == SL_STORE_REDIS && store == NULL)) {
        sl_limiter_release(lim);
        if (new_store && store)
            sl_store_close(store);
        sl_conf_free(conf);
        return SL_ENOMEM;
    }
    /* Then bind what is new, so a failure leaves everything as it was. */
    int failed = 0;
    for (struct sl_listener_conf *lc = conf->listeners; lc != NULL && !failed; lc = lc->next) {
        struct sl_listener *old = live_listener(srv, lc->name);
        if (old != NULL && same_socket(old->conf, lc))
            continue;
        /* A listener moving to an address another one holds now cannot be
         * bound before the other lets go: that needs a restart. */
        struct sl_listener *l = listener_open(srv, lc);
        if (l == NULL) {
            failed = 1;
            break;
        }
        l->retired = 2; /* provisional until the swap below */
    }
    if (failed) {
        for (struct sl_listener *l = srv->listeners; l != NULL; l = l->next) {
            if (l->retired == 2) {
                l->retired = 1;
                listener_close(l);
            }
        }
        sl_limiter_release(lim);
        if (new_store && store)
            sl_store_close(store);
        sl_conf_free(conf);
        return SL_ECONF;
    }
    /* Swap the limits: pending decisions keep the old limiter alive. */
    sl_limiter_release(srv->limiter);
    srv->limiter = lim;
    if (conf->store.kind == SL_STORE_REDIS) {
        if (!new_store)
            sl_store_reconfigure(store, &conf->store);
        srv->store = store;
    } else if (srv->store != NULL) {
        /* No decision can reach the old store any more: the old limiter's
         * pending ones complete with an error (on_failure) as it closes. */
        sl_store_close(srv->store);
        srv->store = NULL;
    }
    /* Swap: retire listeners that are gone or moved, point the kept ones at
     * their new configuration, adopt the new ones. */
    for (struct sl_listener *l = srv->listeners; l != NULL; l = l->next) {
        if (l->retired == 1)
            continue;
        if (l->retired == 2) {
            l->retired = 0;
            continue;
        }
        struct sl_listener_conf *lc = sl_conf_listener(conf, l->name);
        if (lc != NULL && same_socket(l->conf, lc)) {
            set_conf(l, lc);
            continue;
        }
        sl_log_info("listener removed", "listener=%s", l->name);
        l->retired = 1;
        listener_close(l);
    }
    for (struct sl_listener *l = srv->listeners; l != NULL; l = l->next)
        l->limited = (uint8_t)sl_limiter_active(srv->limiter, l->name);
    sl_conf_free(srv->conf);
    srv->conf = conf;
    sl_log_level = conf->log_level;
    return 0;
}

static void for_each_session(struct sl_listener *l, void (*fn)(struct sl_session *))
{
    struct sl_tq *qs[4] = { &l->gated, &l->connecting, &l->active, &l->lingering };
    for (int i = 0; i < 4; i++) {
        struct sl_tq_node *n = qs[i]->head;
        while (n != NULL) {
            struct sl_tq_node *next = n->next; /* fn may move or remove n */
            fn(sl_session_of(n));
            n = next;
        }
    }
}

static void on_grace(uv_timer_t *t)
{
    struct sl_server *srv = t->data;
    sl_log_warn("shutdown grace over: closing the rest", "%s", "");
    sl_server_stop(srv);
}

static void maybe_stopped(struct sl_server *srv)
{
    if (!srv->draining || srv->stopped)
        return;
    for (struct sl_listener *l = srv->listeners; l != NULL; l = l->next)
        if (l->sessions > 0 || l->open)
            return;
    srv->stopped = 1;
    if (srv->admin) {
        sl_admin_close(srv->admin);
        srv->admin = NULL;
    }
    if (srv->store) {
        sl_store_close(srv->store);
        srv->store = NULL;
    }
    sl_limiter_release(srv->limiter);
    srv->limiter = NULL;
    /* uv_close stops a timer, prepare or check handle as well */
    uv_handle_t *own[] = { (uv_handle_t *)&srv->sweep, (uv_handle_t *)&srv->grace,
                           (uv_handle_t *)&srv->turn_pre, (uv_handle_t *)&srv->turn_post };
    for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
        if (!uv_is_closing(own[i]))
            uv_close(own[i], NULL);
    sl_waits_close(&srv->waits);
    sl_waits_default = NULL;
    sl_session_turn_end();
}

void sl_server_drain(struct sl_server *srv)
{
    if (srv->draining)
        return;
    srv->draining = 1;
    sl_log_info("draining", "grace_ms=%llu", (unsigned long long)(srv->conf->shutdown_grace_us / 1000));
    uv_timer_start(&srv->grace, on_grace, srv->conf->shutdown_grace_us / 1000, 0);
    for (struct sl_listener *l = srv->listeners; l != NULL; l = l->next) {
        l->retired = 1;
        listener_close(l);
        for_each_session(l, sl_session_drain);
    }
    maybe_stopped(srv);
}

void sl_server_stop(struct sl_server *srv)
{
    srv->draining = 1;
    for (struct sl_listener *l = srv->listeners; l != NULL; l = l->next) {
        l->retired = 1;
        listener_close(l);
        for_each_session(l, sl_session_close);
    }
    maybe_stopped(srv);
}

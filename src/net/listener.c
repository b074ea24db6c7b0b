/* sluice — listeners and the server that owns them.
 *
 * A listener is a listening socket plus the sessions it accepted, kept in
 * timeout queues (connecting, active, lingering, ...) that one timer walks
 * from their expired ends, armed for the earliest deadline among them (a
 * sweep once a second did it before: a 2 s header_timeout answered after up
 * to 3 s). A reload keeps the sockets of
 * listeners whose name, address and protocol did not change (so no connection
 * is refused during a reload), binds new ones and retires removed ones; a
 * retired listener is freed when its last session goes. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "admin/admin.h"
#include "admin/limits_api.h"
#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/resolve.h"
#include "core/tls.h"
#include "limit/limiter.h"
#include "limit/places.h"
#include "net/listener.h"
#include "net/report.h"
#include "net/sess_adapt.h"
#include "net/session.h"
#include "net/upkeep.h"
#include "net/upool-t.h"
#include "net/turn.h"
#include "net/usage_export.h"
#include "net/yield.h"
#include "shape/wait.h"
#include "store/store.h"

#define SWEEP_MS 1000
#define BACKLOG  511

/* ---- descriptors ------------------------------------------------------------
 *
 * A session holds two descriptors (client and upstream). Out of them, the
 * kernel's accept() fails with EMFILE, and libuv then sheds load on its own:
 * it closes a spare descriptor, accepts every pending connection and closes
 * it at once, and reopens the spare (uv__emfile_trick in src/unix/stream.c),
 * all without calling back. So the clients are cut off unanswered and nobody
 * counts them. sluice therefore stops short of the limit: before a new
 * session starts it checks that its two descriptors fit with SL_FD_SLACK to
 * spare, and otherwise refuses it itself, answered (resp), counted and
 * logged. The number open is counted from /proc/self/fd now and then (at
 * start, at a reload, in the sweep when past half the limit, and before a
 * refusal, at most every 100 ms) and followed in between from the sessions
 * and admin connections opened and closed since. */

#define FD_RECOUNT_MS 100 /* at most this often before a refusal */

/* Descriptors open in this process, or -1 when /proc cannot tell. */
static void conf_copies_free(struct sl_listener *l);

static int64_t count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    int64_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own */
}

static uint64_t all_sessions(const struct sl_server *srv)
{
    uint64_t n = 0;
    for (const struct sl_listener *l = srv->listeners; l != NULL; l = l->next)
        n += l->sessions;
    return n;
}

/* Idle upstream connections kept for reuse (net/upkeep.c): one descriptor each. */
static uint64_t all_kept(const struct sl_server *srv)
{
    uint64_t n = 0;
    for (const struct sl_listener *l = srv->listeners; l != NULL; l = l->next)
        n += l->kept.n;
    return n;
}

static int admin_conns(const struct sl_server *srv)
{
    return srv->admin != NULL ? sl_admin_connections(srv->admin) : 0;
}

static void fd_count(struct sl_server *srv)
{
    int64_t n = count_fds();
    if (n < 0 && srv->fds.at_ms != 0)
        return; /* keep following the last count */
    srv->fds.counted = n >= 0 ? n : SL_FD_SLACK; /* no /proc: a guess at the base */
    srv->fds.sessions = all_sessions(srv);
    srv->fds.kept = all_kept(srv);
    srv->fds.admin = admin_conns(srv);
    srv->fds.at_ms = sl_turn_now_ms();
}

/* Descriptors open now, as far as the last count and what changed since tell. */
static int64_t fd_estimate(const struct sl_server *srv)
{
    return srv->fds.counted + 2 * ((int64_t)all_sessions(srv) - (int64_t)srv->fds.sessions) +
           ((int64_t)all_kept(srv) - (int64_t)srv->fds.kept) + (admin_conns(srv) - srv->fds.admin);
}

/* 1 when a new session's two descriptors fit under the limit with
 * SL_FD_SLACK to spare (its client socket is open already: counting it again
 * errs on the safe side by one). */
static int fd_room(struct sl_server *srv)
{
    if (srv->fds.limit == 0)
        return 1;
    int64_t most = (int64_t)srv->fds.limit - SL_FD_SLACK - 2;
    if (fd_estimate(srv) <= most)
        return 1;
    if (sl_turn_now_ms() - srv->fds.at_ms < FD_RECOUNT_MS)
        return 0;
    fd_count(srv); /* sessions may have closed descriptors the estimate still holds */
    return fd_estimate(srv) <= most;
}

static void fd_log(struct sl_listener *l, uint64_t now)
{
    struct sl_server *srv = l->srv;
    sl_log_warn("connections refused: out of file descriptors",
                "listener=%s refused=%llu limit=%llu open=%lld sessions=%llu", l->name,
                (unsigned long long)l->fd_unlogged, (unsigned long long)srv->fds.limit,
                (long long)fd_estimate(srv), (unsigned long long)all_sessions(srv));
    l->fd_unlogged = 0;
    l->fd_logged_ms = now;
}

void sl_listener_refused_fd(struct sl_listener *l, int err)
{
    (void)err; /* EMFILE and ENFILE are told apart by neither the client nor the count */
    l->stats.conns_refused++;
    l->stats.conns_refused_fd++;
    l->fd_unlogged++;
    uint64_t now = sl_turn_now_ms();
    if (l->fd_logged_ms == 0 || now - l->fd_logged_ms >= 1000)
        fd_log(l, now);
}

/* Says at start and at each reload what the limit allows: each listener's
 * max_connections needs two descriptors a session, and the admin endpoint up
 * to SL_ADMIN_MAX_CONNS, on top of what is open now and the slack. */
static void fd_check(struct sl_server *srv)
{
    struct rlimit rl;
    srv->fds.limit = 0;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < INT64_MAX)
        srv->fds.limit = (uint64_t)rl.rlim_cur;
    fd_count(srv);
    if (srv->fds.limit == 0)
        return;
    uint64_t base = (uint64_t)(srv->fds.counted > 0 ? srv->fds.counted : 0) + SL_FD_SLACK;
    uint64_t need = base + (srv->admin != NULL ? SL_ADMIN_MAX_CONNS : 0);
    for (const struct sl_listener_conf *lc = srv->conf->listeners; lc != NULL; lc = lc->next)
        need += 2 * lc->max_connections;
    /* sessions that fit while the admin endpoint holds no connection */
    uint64_t fit = srv->fds.limit > base ? (srv->fds.limit - base) / 2 : 0;
    if (srv->fds.limit < need)
        sl_log_warn("descriptor limit below what max_connections needs",
                    "limit=%llu need=%llu sessions_fit=%llu open=%lld hint=\"raise the hard "
                    "limit (ulimit -Hn, LimitNOFILE=) or lower max_connections\"",
                    (unsigned long long)srv->fds.limit, (unsigned long long)need,
                    (unsigned long long)fit, (long long)srv->fds.counted);
    else
        sl_log_info("descriptor limit", "limit=%llu need=%llu open=%lld",
                    (unsigned long long)srv->fds.limit, (unsigned long long)need,
                    (long long)srv->fds.counted);
}

static void on_refused_close(uv_handle_t *h)
{
    free(h);
}

/* Takes the pending connection of <l> and closes it, telling the client why
 * first in the listener's protocol, if it has words for it (a fresh
 * socket's send buffer takes them at once). */
static void refuse_fd(struct sl_listener *l)
{
    uv_tcp_t *t = malloc(sizeof(*t));
    if (t == NULL) {
        sl_session_accept(l); /* someone must take it, or the listener stalls */
        return;
    }
    uv_tcp_init(l->handle.loop, t);
    if (uv_accept((uv_stream_t *)&l->handle, (uv_stream_t *)t) == 0) {
        l->stats.conns_accepted++; /* accepted, then refused: as over max_connections */
        char why[256];
        size_t n = sl_session_refusal_fd(l, why, sizeof(why));
        if (n > 0) {
            uv_buf_t b = uv_buf_init(why, (unsigned)n);
            (void)uv_try_write((uv_stream_t *)t, &b, 1);
        }
    }
    uv_close((uv_handle_t *)t, on_refused_close);
    sl_listener_refused_fd(l, UV_EMFILE);
}

static void on_connection(uv_stream_t *h, int status)
{
    struct sl_listener *l = h->data;
    if (status == UV_EMFILE || status == UV_ENFILE) {
        /* libuv had no spare descriptor to shed with: the connection waits
         * in the backlog; counted here, logged at a rate. */
        sl_listener_refused_fd(l, status);
        return;
    }
    if (status < 0) {
        sl_log_warn_rl("accept_failed", "accept failed", "listener=%s err=%s", l->name,
                       uv_strerror(status));
        return;
    }
    if (!fd_room(l->srv)) {
        refuse_fd(l);
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
        /* and the pooled engine's, which closes with it */
        struct sl_upool_stats ps;
        sl_session_pool_stats(l, &ps);
        h->pool_failures_gone += l->pool_failures_gone + ps.failures;
        h->pool_dropped_gone += l->pool_dropped_gone + ps.dropped_replies;
    }
    struct sl_listener **pp = &srv->listeners;
    while (*pp != l)
        pp = &(*pp)->next;
    *pp = l->next;
    sl_upkeep_clear(l);
    sl_session_pool_close(l);
    sl_actl_free(l);
    sl_resolve_stop(&l->up);
    conf_copies_free(l);
    sl_tls_ctx_unref(l->tls);
    sl_tls_ctx_unref(l->up_tls);
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

/* The copies of the settings' pointer fields the listener owns. */
static void conf_copies_free(struct sl_listener *l)
{
    for (int i = 0; i < SL_CONF_MAX_IDENTITY; i++) {
        free(l->cf.identity_header[i]);
        l->cf.identity_header[i] = NULL;
    }
    free(l->cf.trusted_proxies);
    l->cf.trusted_proxies = NULL;
}

/* Points <*slot> at <ctx> (the configuration's, built and checked at load:
 * a reload that got this far has every context it names). Sessions hold
 * their own reference, so the swap never touches a connection. */
static void tls_take(struct sl_tls_ctx **slot, struct sl_tls_ctx *ctx)
{
    if (ctx != NULL)
        sl_tls_ctx_ref(ctx);
    sl_tls_ctx_unref(*slot);
    *slot = ctx;
}

/* The TLS contexts of <lc>. -1 when one the listener needs is missing (a
 * configuration that did not come through the loader's checks). */
static int tls_setup(struct sl_listener *l, const struct sl_listener_conf *lc)
{
    tls_take(&l->tls, lc->tls_cert != NULL ? lc->tls_ctx : NULL);
    tls_take(&l->up_tls, lc->upstream_tls ? lc->upstream_tls_ctx : NULL);
    if ((lc->tls_cert != NULL && l->tls == NULL) || (lc->upstream_tls && l->up_tls == NULL)) {
        sl_log_error("TLS context not built", "listener=%s", l->name);
        return -1;
    }
    if (lc->upstream_tls) {
        /* SNI and the name checked: upstream_tls_sni, else the upstream's
         * host name (an address sends none and is matched as an IP SAN). */
        if (lc->upstream_tls_sni != NULL) {
            snprintf(l->up_sni, sizeof(l->up_sni), "%s", lc->upstream_tls_sni);
        } else {
            snprintf(l->up_sni, sizeof(l->up_sni), "%s", lc->upstream.text);
            char *colon = strrchr(l->up_sni, ':');
            if (colon != NULL)
                *colon = '\0';
            if (l->up_sni[0] == '[') { /* [::1] */
                size_t n = strlen(l->up_sni);
                memmove(l->up_sni, l->up_sni + 1, n);
                if (n >= 2 && l->up_sni[n - 2] == ']')
                    l->up_sni[n - 2] = '\0';
            }
        }
        if (!lc->upstream_tls_verify)
            sl_log_warn("UPSTREAM TLS CERTIFICATES ARE NOT VERIFIED (upstream_tls_verify = off): "
                        "anyone on the path can pose as the upstream",
                        "listener=%s upstream=%s", l->name, lc->upstream.text);
    }
    return 0;
}

/* Copies the settings of <lc>: sessions may outlive the configuration that
 * made their listener (reload), so they never point into it. What sessions
 * read through pointers (header:NAME identities, trusted_proxies) is copied
 * too; out of memory, a header source yields nothing and no proxy is
 * trusted. */
static void set_conf(struct sl_listener *l, const struct sl_listener_conf *lc)
{
    conf_copies_free(l);
    l->cf = *lc;
    l->cf.name = l->name;
    l->cf.next = NULL;
    for (int i = 0; i < SL_CONF_MAX_IDENTITY; i++)
        l->cf.identity_header[i] = lc->identity_header[i] ? strdup(lc->identity_header[i]) : NULL;
    l->cf.trusted_proxies = NULL;
    if (lc->n_trusted_proxies > 0) {
        size_t n = (size_t)lc->n_trusted_proxies * sizeof(*lc->trusted_proxies);
        l->cf.trusted_proxies = malloc(n);
        if (l->cf.trusted_proxies != NULL)
            memcpy(l->cf.trusted_proxies, lc->trusted_proxies, n);
        else
            l->cf.n_trusted_proxies = 0;
    }
    l->conf = &l->cf;
    /* Files were read into the contexts; nothing reads these paths later. */
    l->cf.tls_cert = l->cf.tls_key = l->cf.tls_ca = l->cf.tls_protocols = l->cf.tls_ciphers = NULL;
    l->cf.upstream_tls_ca = l->cf.upstream_tls_sni = NULL;
    l->cf.upstream_tls_cert = l->cf.upstream_tls_key = NULL;
    l->cf.tls_ctx = l->cf.upstream_tls_ctx = NULL; /* the listener holds its own references */
    /* The loader has just resolved the upstream's name: that answer is
     * fresh (a reload thus also refreshes it). */
    char host[sizeof(lc->upstream.text)] = "";
    if (lc->upstream.named) {
        snprintf(host, sizeof(host), "%s", lc->upstream.text);
        char *colon = strrchr(host, ':');
        if (colon != NULL)
            *colon = '\0';
    }
    /* A name that did not resolve at this load but did before keeps its
     * last good address, as a failed lookup at run time does; one never
     * resolved has none: it is looked up again (every second by the
     * sweep, and for each new client) and clients get the upstream-down answer
     * meanwhile. */
    struct sockaddr_storage ss = lc->upstream.ss;
    if (lc->upstream.named && ss.ss_family == AF_UNSPEC && l->up.ss.ss_family != AF_UNSPEC &&
        l->up.port == lc->upstream.port && strcmp(l->up.name, host) == 0)
        ss = l->up.ss;
    sl_resolve_set(&l->up, host, lc->upstream.port, &ss, uv_now(l->srv->loop));
}

/* A lookup of <r>, the upstream name of a listener, ended. Said once per
 * change of state: a name that keeps failing is counted, not logged again. */
static void on_upstream_resolved(struct sl_resolve *r, enum sl_resolve_event ev, int err)
{
    struct sl_listener *l = r->data;
    char addr[64];
    sl_resolve_fmt(&r->ss, addr, sizeof(addr));
    switch (ev) {
    case SL_RESOLVE_CHANGED:
        sl_log_info("upstream address changed", "listener=%s upstream=%s addr=%s", l->name,
                    l->conf->upstream.text, addr);
        break;
    case SL_RESOLVE_RECOVERED:
        sl_log_info("upstream name resolved again", "listener=%s upstream=%s addr=%s", l->name,
                    l->conf->upstream.text, addr);
        break;
    case SL_RESOLVE_FAILING:
        if (r->ss.ss_family == AF_UNSPEC)
            sl_log_warn("upstream name not resolved: retrying, clients get an error meanwhile",
                        "listener=%s upstream=%s err=\"%s\"", l->name, l->conf->upstream.text,
                        uv_strerror(err));
        else
            sl_log_warn("upstream name not resolved: keeping the last address",
                        "listener=%s upstream=%s addr=%s err=\"%s\"", l->name,
                        l->conf->upstream.text, addr, uv_strerror(err));
        /* fall through */
    case SL_RESOLVE_STILL:
        l->stats.resolve_failures++;
        break;
    case SL_RESOLVE_SAME:
    case SL_RESOLVE_STALE:
        break;
    }
    if (ev == SL_RESOLVE_CHANGED || ev == SL_RESOLVE_RECOVERED)
        sl_session_pool_reconf(l); /* pooled: new connections go to the new address */
    sl_session_resolved(l);
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

/* Arms the timeouts' timer for the earliest deadline of every listener's
 * sessions (sl_session_next_due), or stops it when none runs. */
static void on_due(uv_timer_t *t);

static void due_arm(struct sl_server *srv)
{
    srv->due_dirty = 0;
    if (uv_is_closing((uv_handle_t *)&srv->due))
        return;
    uint64_t due = UINT64_MAX;
    for (struct sl_listener *l = srv->listeners; l != NULL; l = l->next) {
        uint64_t d = sl_session_next_due(l), k = sl_upkeep_due(l);
        if (k < d)
            d = k;
        if (d < due)
            due = d;
    }
    if (due == srv->due_at)
        return;
    srv->due_at = due;
    if (due == UINT64_MAX) {
        uv_timer_stop(&srv->due);
        return;
    }
    uint64_t now = sl_turn_now_ms();
    uv_timer_start(&srv->due, on_due, sl_tq_delay(now, due), 0);
}

/* tq's on_first: a session entered an empty queue. Armed at the turn's
 * end (on_turn_pre), once for however many came. */
static void due_changed(void *arg)
{
    struct sl_server *srv = arg;
    srv->due_dirty = 1;
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
    /* a first session in a queue may bring the earliest deadline */
    struct sl_tq *qs[] = { &l->connecting, &l->active, &l->lingering, &l->heading,
                           &l->handshaking, &l->awaiting };
    for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
        qs[i]->on_first = due_changed;
        qs[i]->arg = srv;
    }
    l->up.cb = on_upstream_resolved;
    l->up.data = l;
    set_conf(l, lc);
    l->limited = (uint8_t)sl_limiter_active(srv->limiter, l->name);
    sl_actl_conf(l);
    l->handle.data = l;
    l->open = 1;
    int rc = reuseport_socket(srv, l, lc);
    if (rc == 0 && tls_setup(l, lc) < 0)
        rc = UV_EINVAL;
    if (rc == 0)
        rc = uv_tcp_bind(&l->handle, (const struct sockaddr *)&lc->listen.ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&l->handle, BACKLOG, on_connection);
#ifdef __linux__
    /* Linux copies TCP_NODELAY from the listening socket to each socket it
     * accepts: set once here, it saves a setsockopt per client connection
     * (sessions set it themselves when this fails). */
    if (rc == 0 && uv_tcp_nodelay(&l->handle, 1) == 0)
        l->nodelay = 1;
#endif
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
                sl_session_proto_name(l));
    return l;
}

/* The sessions' timeouts that fell due (sl_session_sweep), then the timer
 * again for the next one. */
static void on_due(uv_timer_t *t)
{
    struct sl_server *srv = t->data;
    uint64_t now = sl_turn_now_ms();
    srv->due_at = UINT64_MAX;
    for (struct sl_listener *l = srv->listeners; l != NULL; l = l->next) {
        sl_session_sweep(l, now);
        sl_upkeep_sweep(l, now);
    }
    due_arm(srv);
}

static void on_sweep(uv_timer_t *t)
{
    struct sl_server *srv = t->data;
    uint64_t now = sl_turn_now_ms();
    srv->due_dirty = 1; /* and the timer again, should a reload have changed a timeout */
    for (struct sl_listener *l = srv->listeners; l != NULL; l = l->next) {
        sl_session_sweep(l, now);
        sl_upkeep_sweep(l, now);
        sl_session_pool_sweep(l);
        /* An upstream name without an address yet (it did not resolve at
         * load): looked up again every second, clients or not. */
        if (l->up.name[0] != '\0' && l->up.ss.ss_family == AF_UNSPEC && !l->retired)
            (void)sl_resolve_start(&l->up, srv->loop);
        if (l->fd_unlogged > 0 && now - l->fd_logged_ms >= 1000)
            fd_log(l, now); /* the refusals since the last line */
    }
    /* Near the limit the estimate should be exact: count again. */
    if (srv->fds.limit != 0 && (uint64_t)fd_estimate(srv) * 2 > srv->fds.limit)
        fd_count(srv);
    if (srv->limiter)
        sl_limiter_sweep(srv->limiter);
    sl_log_rate_flush(0); /* the counts of storms that are over */
}

/* The quota store client, for url = redis://, redis-cluster://, ... (NULL for local). */
static struct sl_store *store_for(struct sl_server *srv, const struct sl_conf *c)
{
    if (c->store.kind == SL_STORE_LOCAL)
        return NULL;
    char host[64] = "sluice", id[128];
    gethostname(host, sizeof(host) - 1);
    snprintf(id, sizeof(id), "%s:%d:%08x", host, (int)getpid(), (unsigned)(uv_hrtime() & 0xffffffffu));
    return sl_store_new(srv->loop, &c->store, id);
}

static void on_turn_pre(uv_prepare_t *h)
{
    sl_session_turn_end();
    struct sl_server *srv = h->data;
    if (srv != NULL && srv->due_dirty)
        due_arm(srv); /* before the loop sleeps: its timeout must include the new deadline */
    /* pooled batches: let clients that share the CPU finish their turn
     * before this one sleeps (net/yield.h) */
    sl_yield_turn_end();
    sl_turn_tick(); /* the loop may sleep now: what wakes it reads the clock again */
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
    uv_timer_init(loop, &srv->due);
    srv->due.data = srv;
    srv->due_at = UINT64_MAX;
    /* Every room reads the turn's time (net/turn.h): the timeouts, the
     * waits, the limiter and the meters see one "now" per loop turn. */
    sl_turn_clock_set(&sl_clock_mono);
    srv->clock = &sl_turn_clock;
    sl_waits_init(&srv->waits, loop, srv->clock);
    sl_waits_default = &srv->waits;
    /* Verdicts from the store land in the poll phase (check runs right
     * after it) or with a timeout in the timer phase (prepare runs before
     * the loop sleeps). Neither keeps the loop alive. */
    uv_prepare_init(loop, &srv->turn_pre);
    srv->turn_pre.data = srv;
    uv_prepare_start(&srv->turn_pre, on_turn_pre);
    uv_unref((uv_handle_t *)&srv->turn_pre);
    uv_check_init(loop, &srv->turn_post);
    uv_check_start(&srv->turn_post, on_turn_post);
    uv_unref((uv_handle_t *)&srv->turn_post);
}

/* The limits API, on the limiter in force now. */
static void server_api(void *data, const struct sl_admin_call *call, struct sl_admin_req *req)
{
    struct sl_server *srv = data;
    sl_limits_api(srv->limiter, call, req);
}

void sl_server_admin_cbs(struct sl_server *srv, struct sl_admin_cbs *cbs)
{
    memset(cbs, 0, sizeof(*cbs));
    cbs->metrics = sl_server_metrics;
    cbs->stats = sl_server_stats;
    cbs->ready = sl_server_ready;
    cbs->api = server_api;
    cbs->data = srv;
}

int sl_server_start(struct sl_server *srv)
{
    srv->store = store_for(srv, srv->conf);
    srv->places = sl_places_new();
    const struct sl_limiter_env env = { srv->store, srv->clock, srv->places };
    srv->limiter = srv->places != NULL ? sl_limiter_new(srv->conf, &env) : NULL;
    if (srv->limiter == NULL || (srv->conf->store.kind != SL_STORE_LOCAL && srv->store == NULL)) {
        sl_log_error("cannot set up the limits", "%s", "");
        return SL_ENOMEM;
    }
    if (srv->conf->has_admin && !srv->worker) {
        struct sl_admin_cbs cbs;
        sl_server_admin_cbs(srv, &cbs);
        srv->admin = sl_admin_start(srv->loop, &srv->conf->admin, &cbs);
        if (srv->admin == NULL)
            return SL_ECONF;
        if (sl_admin_set_token(srv->admin, srv->conf->admin_token) < 0)
            return SL_ENOMEM;
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
    if (sl_usage_export_apply(srv) < 0)
        return SL_ECONF;
    uv_timer_start(&srv->sweep, on_sweep, SWEEP_MS, SWEEP_MS);
    fd_check(srv);
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
    srv->due_dirty = 1; /* timeouts may change: the timer is armed again at the turn's end */
    /* The new limits first: without them there is nothing to swap in. */
    struct sl_store *store = srv->store;
    int new_store = 0;
    if (conf->store.kind != SL_STORE_LOCAL && store == NULL) {
        store = store_for(srv, conf);
        new_store = 1;
    }
    /* Each limit of the running ones carries its counters and state over
     * to the one of its name (limit/carry.h): a reload forgets nothing. */
    const struct sl_limiter_env env = { conf->store.kind != SL_STORE_LOCAL ? store : NULL, srv->clock,
                                        srv->places };
    struct sl_limiter *lim = sl_limiter_reload(conf, &env, srv->limiter);
    if (lim == NULL || (conf->store.kind != SL_STORE_LOCAL && store == NULL)) {
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
    if (conf->store.kind != SL_STORE_LOCAL) {
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
            (void)tls_setup(l, lc); /* the loader built them: cannot fail here */
            sl_session_pool_reconf(l); /* new pool settings, maybe a new address */
            continue;
        }
        sl_log_info("listener removed", "listener=%s", l->name);
        l->retired = 1;
        listener_close(l);
    }
    for (struct sl_listener *l = srv->listeners; l != NULL; l = l->next) {
        l->limited = (uint8_t)sl_limiter_active(srv->limiter, l->name);
        if (!l->retired)
            sl_actl_conf(l);
        /* the upstream, its TLS or the cap may have changed: kept
         * connections are not carried over to the new configuration */
        sl_upkeep_clear(l);
    }
    /* The token file is read again at each reload (a rotated token); out of
     * memory keeps the old token, never none. */
    if (srv->admin != NULL && sl_admin_set_token(srv->admin, conf->admin_token) < 0)
        sl_log_error("admin token not changed", "err=%s", sl_strerror(SL_ENOMEM));
    sl_conf_free(srv->conf);
    srv->conf = conf;
    sl_log_level = conf->log_level;
    /* [usage]: the table lives on (what it holds is the process's, not the
     * configuration's); a file that cannot be opened keeps the old one. */
    (void)sl_usage_export_apply(srv);
    fd_check(srv);
    return 0;
}

static void for_each_session(struct sl_listener *l, void (*fn)(struct sl_session *))
{
    struct sl_tq *qs[5] = { &l->gated, &l->connecting, &l->active, &l->lingering, &l->handshaking };
    for (int i = 0; i < 5; i++) {
        struct sl_tq_node *n = qs[i]->head;
        while (n != NULL) {
            struct sl_tq_node *next = n->next; /* fn may move or remove n */
            fn(sl_session_of(n));
            n = next;
        }
    }
}

void sl_listener_each_session(struct sl_listener *l, void (*fn)(struct sl_session *, void *),
                              void *arg)
{
    struct sl_tq *qs[5] = { &l->gated, &l->connecting, &l->active, &l->lingering, &l->handshaking };
    for (int i = 0; i < 5; i++)
        for (struct sl_tq_node *n = qs[i]->head; n != NULL; n = n->next)
            fn(sl_session_of(n), arg);
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
    /* Usage counted up to the last session's close goes out first: the
     * store's answers (each within its timeout) come back here. */
    if (sl_usage_export_final(srv, maybe_stopped))
        return;
    srv->stopped = 1;
    for (struct sl_listener *l = srv->listeners; l != NULL; l = l->next)
        sl_session_pool_close(l); /* its handles must close for the loop to end */
    if (srv->admin) {
        sl_admin_close(srv->admin);
        srv->admin = NULL;
    }
    if (srv->store) {
        sl_store_close(srv->store);
        srv->store = NULL;
    }
    sl_usage_export_close();
    sl_limiter_release(srv->limiter);
    srv->limiter = NULL;
    sl_places_free(srv->places); /* every connection, and so every place, is gone */
    srv->places = NULL;
    /* uv_close stops a timer, prepare or check handle as well */
    uv_handle_t *own[] = { (uv_handle_t *)&srv->sweep, (uv_handle_t *)&srv->grace, (uv_handle_t *)&srv->due,
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
        sl_upkeep_clear(l);
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
        sl_upkeep_clear(l);
        for_each_session(l, sl_session_close);
    }
    maybe_stopped(srv);
}

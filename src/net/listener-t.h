/* sluice — types of listeners and of the server that owns them. */
#ifndef SL_NET_LISTENER_T_H
#define SL_NET_LISTENER_T_H

#include <stdint.h>
#include <uv.h>

#include "conf/conf-t.h"
#include "core/resolve-t.h"
#include "core/tq.h"
#include "net/turn.h"
#include "shape/wait-t.h"

/* Counters per listener, kept in memory (exported by the admin endpoint). */
struct sl_listener_stats {
    uint64_t conns_accepted;   /* connections accepted */
    uint64_t conns_active;     /* sessions open now */
    uint64_t conns_refused;    /* over max_connections or a connection limit, or no
                                  descriptor left: closed at once */
    uint64_t conns_refused_fd; /* of which for lack of file descriptors */
    uint64_t upstream_failed;  /* upstream connect failed or timed out */
    uint64_t idle_closed;      /* closed by idle_timeout */
    uint64_t header_timeouts;  /* closed by header_timeout: a request's head came too slowly */
    uint64_t protocol_errors;  /* malformed client input */
    uint64_t requests;         /* resp requests framed (argc > 0) */
    uint64_t rejected;         /* requests answered by a rejection instead */
    uint64_t bytes_in;         /* bytes read from clients */
    uint64_t bytes_out;        /* bytes read from upstreams (sent on to clients) */
    uint64_t upstream_timeouts;/* http: no response head within upstream_timeout (504) */
    uint64_t resolve_failures; /* lookups of the upstream's name that failed (the last good
                                  address stayed in use) */
    uint64_t tls_handshake_failures; /* TLS handshakes with clients that failed or timed out */
    uint64_t proxy_refused;    /* clients closed for their PROXY header: untrusted peer,
                                  malformed, missing or late (proxy_protocol) */
    uint64_t upstream_tls_resumed;   /* upstream TLS handshakes that resumed a session */
    uint64_t tls_identity_refused;   /* clients closed after the handshake: a certificate name
                                        that cannot be an identity (tls_subject) */
    uint64_t http_responses[5];/* http: responses sent to clients, by status class 1xx..5xx
                                  (the upstream's and sluice's own) */
    uint64_t upstream_connects;/* upstream connections made (connect succeeded) */
    uint64_t upstream_reused;  /* http, upstream_keepalive: kept connections handed to a
                                  session instead of a connect */
    uint64_t upstream_idle;    /* ... kept idle now (a gauge; net/upkeep.c) */
    uint64_t pool_pin_waits;   /* upstream_pool: clients that waited for a pinned connection
                                  past upstream_pool_pinned */
    uint64_t pool_pin_refused; /* ... refused one after upstream_pool_pin_wait (-ERR) */
    uint64_t pool_lost;        /* ... clients whose upstream connection failed under them */
    uint64_t pool_slow_closed; /* ... clients closed past upstream_pool_client_buffer */
};

struct sl_server;
struct sl_limiter;
struct sl_store;
struct sl_admin;
struct sl_tls_ctx;
struct sl_upool;
struct sl_actl;

/* One [listener NAME]: a listening socket and the sessions it accepted. The
 * struct outlives its socket while sessions remain (after a reload removed
 * it, or during a drain). */
struct sl_listener {
    uv_tcp_t                 handle;     /* listening socket; handle.data = this */
    struct sl_server        *srv;        /* owner */
    struct sl_listener_conf *conf;       /* = &cf, for brevity at the call sites */
    struct sl_listener_conf  cf;         /* own copy of the settings (a reload rewrites
                                            it; pointer fields are not used) */
    char                    *name;       /* own copy of conf->name */
    uint8_t                  open;       /* handle is open (listening or closing) */
    uint8_t                  retired;    /* removed by a reload: free when empty */
    uint8_t                  limited;    /* some request limit applies here (set per reload) */
    uint8_t                  nodelay;    /* the listening socket has TCP_NODELAY, which the
                                            sockets it accepts inherit (Linux): no setsockopt
                                            per accepted connection */
    uint64_t                 sessions;   /* sessions alive (open or closing) */
    struct sl_tq             connecting; /* sessions connecting upstream, by start */
    struct sl_tq             active;     /* relaying sessions, least recently active first */
    struct sl_tq             lingering;  /* closing sessions draining the client's input */
    struct sl_tq             gated;      /* sessions waiting for a connection limit's place */
    struct sl_tq             heading;    /* sessions part-way through a request's head, by its start */
    struct sl_tq             handshaking;/* sessions in their TLS handshake with the client */
    struct sl_tq             awaiting;   /* http: sessions waiting for a response's head, by when */
    struct sl_tq             kept;       /* http: idle upstream connections kept for reuse,
                                            oldest first (net/upkeep.c) */
    struct sl_listener_stats stats;      /* counters */
    uint64_t                 fd_unlogged; /* descriptor refusals not logged yet */
    uint64_t                 fd_logged_ms; /* loop time of the last such log line */
    struct sl_resolve        up;         /* the upstream's address: sessions connect to up.ss;
                                            a name is looked up again past resolve_ttl */
    struct sl_tls_ctx       *tls;        /* TLS towards clients (tls_cert), or NULL: new
                                            sessions take a reference; a reload swaps it,
                                            a bad file keeps the old one */
    struct sl_tls_ctx       *up_tls;     /* TLS towards the upstream (upstream_tls), or NULL */
    char                     up_sni[256];/* the name sent as SNI and checked ("" = none) */
    struct sl_upool         *upool;      /* upstream_pool: this worker's pooled upstream
                                            connections (made with the first pooled
                                            session, closed with the listener) */
    struct sl_turn_node      upool_tn;   /* ... its writes at the end of the turn */
    uint64_t                 pool_failures_gone; /* ... counters of the engines of listeners of */
    uint64_t                 pool_dropped_gone;  /* this name already freed (a moved one's old
                                                    socket): the totals never go back */
    struct sl_actl          *adapt;      /* adaptive_concurrency: this worker's controller
                                            (net/sess_adapt.h), or NULL */
    struct sl_listener      *next;       /* in srv->listeners */
};

/* What the process knows of its descriptors: the limit, and a count taken
 * now and then that is kept up to date between counts from the sessions and
 * admin connections opened and closed since (two descriptors per session). */
struct sl_fds {
    uint64_t limit;      /* RLIMIT_NOFILE (soft) at start; 0: unlimited or unknown */
    int64_t  counted;    /* descriptors open at the last count */
    uint64_t sessions;   /* sessions alive then (all listeners) */
    uint64_t kept;       /* idle upstream connections kept then (net/upkeep.c) */
    int      admin;      /* admin connections then */
    uint64_t at_ms;      /* loop time of that count */
};

/* The whole process: loop, configuration, listeners, signals' state. */
struct sl_clock;
struct sl_places;

struct sl_server {
    uv_loop_t          *loop;       /* the one loop */
    struct sl_conf     *conf;       /* current configuration (owned) */
    struct sl_listener *listeners;  /* live and retired listeners */
    uv_timer_t          sweep;      /* once a second: idle buffers, logs, the fd count
                                       (and the timeouts, should a deadline be missed) */
    uv_timer_t          due;        /* the sessions' timeouts: armed at the earliest */
    uint64_t            due_at;     /* loop ms it is armed for; UINT64_MAX: not armed */
    uint8_t             due_dirty;  /* a deadline may be earlier: arm again at the turn's end */
    uv_timer_t          grace;      /* drain deadline */
    uint8_t             draining;   /* SIGTERM seen: no accepts, finish and exit */
    uint8_t             stopped;    /* everything closed; the loop may end */
    int                 exit_code;  /* what main returns */
    const struct sl_clock *clock;   /* what the limiter and the waits read (sl_clock_mono) */
    struct sl_limiter  *limiter;    /* current limits (a reload swaps it) */
    struct sl_places   *places;     /* connection places, kept across reloads (limit/places.h) */
    struct sl_store    *store;      /* quota store client, NULL for url = local */
    struct sl_admin    *admin;      /* admin endpoint, NULL when off */
    uint64_t            next_conn;  /* connection numbers */
    struct sl_waits     waits;      /* parked sessions, byte meters, the login queue */
    uv_prepare_t        turn_pre;   /* end of a loop turn: sessions whose verdicts */
    uv_check_t          turn_post;  /* landed move on (sl_session_turn_end) */
    uint8_t             worker;     /* one of several workers: listen sockets shared by
                                       all (SO_REUSEPORT), the master serves admin */
    struct sl_fds       fds;        /* descriptor budget (accepts stop short of the limit) */
};

#endif

/* sluice — the configuration, as loaded from the INI file.
 *
 * Everything here is owned by its struct sl_conf and freed by sl_conf_free().
 * Durations are microseconds, sizes are bytes. A reload builds a whole new
 * struct sl_conf and swaps it in; nothing points into an old one after that
 * except sessions that copied what they need. */
#ifndef SL_CONF_CONF_T_H
#define SL_CONF_CONF_T_H

#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "core/log.h"
#include "core/tls-t.h"
#include "proto/http_upgrade-t.h"

#define SL_CONF_MAX_IDENTITY 8 /* identity sources per listener */

enum sl_proto      { SL_PROTO_RESP, SL_PROTO_HTTP, SL_PROTO_TCP };
enum sl_id_source  { SL_ID_RESP_USER, SL_ID_CLIENT_NAME, SL_ID_KEY_PREFIX,
                     SL_ID_CLIENT_IP, SL_ID_HEADER, SL_ID_NONE,
                     SL_ID_TLS_SUBJECT /* the client certificate's CN (or first SAN) */ };
/* Per enum sl_id_source, the tag its identities start with ("user" in
 * "user:carol", see identity/identity-t.h); for none, the whole identity.
 * Shared by the identity module and match_identity in the loader. */
#define SL_ID_TAGS { "user", "name", "prefix", "ip", "header", "all", "tls" }
enum sl_metric     { SL_METRIC_REQUESTS, SL_METRIC_BYTES_IN, SL_METRIC_BYTES_OUT,
                     SL_METRIC_CONNECTIONS };
enum sl_scope      { SL_SCOPE_IDENTITY, SL_SCOPE_CONNECTION, SL_SCOPE_GLOBAL };
enum sl_algo       { SL_ALGO_TOKEN_BUCKET, SL_ALGO_GCRA, SL_ALGO_SLIDING_WINDOW,
                     SL_ALGO_SLIDING_LOG, SL_ALGO_FIXED_WINDOW };
enum sl_action     { SL_ACTION_REJECT, SL_ACTION_DELAY, SL_ACTION_SHADOW };
enum sl_on_failure { SL_FAIL_LOCAL, SL_FAIL_OPEN, SL_FAIL_CLOSED };
/* decision_log = in [sluice]: which limit decisions get a log line. */
enum sl_decision_log { SL_DLOG_OFF = 0, SL_DLOG_REJECTIONS, SL_DLOG_ALL };

/* access_log_format = on an http listener. */
enum sl_access_format { SL_ALOG_COMBINED = 0, SL_ALOG_JSON };

/* rate_limit_headers = on an http listener: which rate limit fields answers carry. */
enum sl_rl_headers { SL_RLH_DRAFT, SL_RLH_LEGACY, SL_RLH_BOTH, SL_RLH_NONE };

/* <amount> tokens (requests or bytes) per <period_us> microseconds. */
struct sl_rate {
    uint64_t amount;
    uint64_t period_us;
};

/* A socket address as written ("127.0.0.1:6380", "[::1]:6380", "*:6380",
 * "localhost:6379", "redis.default.svc:6379") and as resolved. A host name
 * is resolved when the file is loaded (conf/resolve.h); an upstream's name
 * again at run time (core/resolve.h). */
struct sl_addr {
    char                    text[80];  /* as written, for logs and -T */
    struct sockaddr_storage ss;        /* resolved numeric address (a name: once loaded) */
    uint8_t                 named;     /* the host is a name, not a number */
    uint16_t                port;      /* host order; what a name's answers are given */
};

/* One entry of `cost = KEYS=100 SCAN=10 *=1` (resp) or `cost = POST=5 *=1` (http). */
struct sl_cost {
    char     cmd[32];                  /* upper-cased command name; on an http listener the
                                          method, as written (methods are case-sensitive) */
    uint64_t cost;
};

/* One entry of `trusted_proxies = 10.0.0.0/8 ::1`: an address range, in one
 * form for both families so a check is one masked compare. */
struct sl_cidr {
    uint8_t addr[16];                  /* the network, host bits zero; IPv4 as ::ffff:a.b.c.d */
    uint8_t bits;                      /* prefix length over the 128 bits (IPv4 /N: 96 + N) */
    uint8_t v4;                        /* written as IPv4: printed back so */
};

#define SL_POOL_MAX 256 /* upstream_pool = N: at most this */

struct sl_listener_conf {
    char          *name;               /* [listener NAME] */
    int            line;               /* line of the section header */
    struct sl_addr listen;             /* listen = */
    struct sl_addr upstream;           /* upstream = */
    enum sl_proto  protocol;           /* protocol = resp | http | tcp (default resp) */
    enum sl_id_source identity[SL_CONF_MAX_IDENTITY]; /* identity = ..., in order */
    char          *identity_header[SL_CONF_MAX_IDENTITY]; /* NAME of header:NAME, else NULL */
    int            n_identity;         /* default: 1 source, client_ip */
    char           key_prefix_separator[8]; /* default ":" */
    uint64_t       max_connections;    /* default 10000 */
    uint64_t       idle_timeout_us;    /* default 300s; 0 = never */
    uint64_t       connect_timeout_us; /* upstream connect, default 2s */
    uint64_t       header_timeout_us;  /* a request's head must be whole within this; default 10s; 0 = never */
    uint64_t       max_replies_owed;   /* replies owed before the client is not read; default 8192 */
    uint64_t       max_request;        /* bytes, default 512mb */
    uint64_t       resolve_ttl_us;     /* an upstream name is looked up again when its answer
                                          is older than this; default 30s; 0 = at every connect */
    int            proxy_protocol;     /* 0 off (default), 1 v1, 2 v2: a PROXY header from a
                                          trusted_proxies peer comes first (net/proxyhdr.h) */
    int            upstream_proxy_protocol; /* 0 off (default), 1 v1, 2 v2: a PROXY header
                                          with the client's address starts each upstream
                                          connection (not with upstream_pool or
                                          upstream_keepalive) */
    /* adaptive concurrency (docs/adaptive.md; resp and http, not with upstream_pool) */
    int            adaptive;           /* adaptive_concurrency: 0 off (default), 1 on, 2 shadow */
    uint64_t       adaptive_min_limit; /* default 1 */
    uint64_t       adaptive_max_limit; /* default 1000 */
    uint64_t       adaptive_initial_limit; /* default 20 */
    uint64_t       adaptive_queue;     /* waiters per worker; default 1024; 0 = none wait */
    uint64_t       adaptive_queue_target_us; /* 0 = auto (the baseline, at least 1 ms) */
    uint64_t       adaptive_queue_interval_us; /* default 100ms */
    uint64_t       adaptive_probe_interval_us; /* default 5s */
    int            adaptive_share;     /* 0 store (default: the baseline shared through
                                          the quota store, when there is one), 1 off */
    /* protocol = resp only (an error on other listeners) */
    uint64_t       setup_commands;     /* connect-time commands not charged to requests
                                          limits, per connection; default 16; 0 = none */
    uint32_t       upstream_pool;      /* pipelined upstream connections per worker and pool
                                          key; 0 = off (one per client, default) */
    uint64_t       pool_pinned;        /* upstream_pool_pinned: clients holding a connection
                                          of their own at once, per worker; default 1000 */
    uint64_t       pool_pin_wait_us;   /* upstream_pool_pin_wait: how long a client waits for
                                          one past that cap; default 1s; 0 = refused at once */
    uint64_t       pool_client_buffer; /* upstream_pool_client_buffer: replies queued to one
                                          client on a pooled listener before it is closed;
                                          default 64mb */
    uint64_t       pool_idle_timeout_us; /* upstream_pool_idle_timeout: a shared upstream
                                          connection idle this long closes; default 60s;
                                          0 = never */
    uint64_t       pool_batch_wait_us; /* upstream_pool_batch_wait: how long a small batch
                                          waits for more requests (net/gather.h); default
                                          50us; 0 = never */
    int            upstream_unresolved_line; /* the upstream's host name did not resolve at
                                          load (the line of upstream, for the warning), else
                                          0; upstream.ss is then empty and the listener looks
                                          the name up again (clients get the upstream-down
                                          answer meanwhile) */
    int            upstream_unresolved_rc; /* that lookup's EAI_* code */
    /* protocol = http only (an error on other listeners) */
    struct sl_cidr *trusted_proxies;   /* trusted_proxies = CIDR ...; NULL: X-Forwarded-For
                                          is not read for client_ip; also the peers a
                                          PROXY header is taken from (any protocol) */
    int            n_trusted_proxies;
    uint64_t       upstream_timeout_us; /* no response head within it: 504; default 60s; 0 = never */
    enum sl_rl_headers rate_limit_headers; /* default draft */
    int            forwarded_headers;  /* add X-Forwarded-For / -Proto: 1 (on, default) or 0 */
    uint64_t       max_request_line;   /* bytes of the request line (414); default 8KiB */
    uint64_t       max_header_line;    /* bytes of one header field line (431); default 8KiB */
    uint64_t       max_headers;        /* header fields in one request (431); default 100 */
    uint64_t       max_header_size;    /* bytes of the whole head (431); default 64KiB */
    struct sl_http_upgrades upgrades;  /* protocols a request may switch to, CONNECT;
                                          default websocket */
    uint64_t       upstream_keepalive; /* idle upstream connections kept per worker for reuse
                                          by any client; default 0 = off */
    uint64_t       upstream_keepalive_timeout_us; /* an idle kept one is closed after this;
                                          default 60s */
    char          *access_log;         /* access_log = FILE: absolute (resolved at load), or
                                          NULL = off (default) */
    int            access_log_format;  /* enum sl_access_format: combined (default) | json */
    /* TLS (docs/configuration.md): paths absolute (resolved at load) or NULL */
    char          *tls_cert;           /* PEM chain: clients speak TLS to this listener */
    char          *tls_key;
    char          *tls_ca;             /* client certificates must lead here */
    int            tls_verify_client;  /* enum sl_tls_verify: off (default) | optional | on */
    char          *tls_protocols;      /* NULL = "TLSv1.2 TLSv1.3" */
    char          *tls_ciphers;        /* NULL = SL_TLS_DEFAULT_CIPHERS (AEAD only) */
    int            upstream_tls;       /* 1: TLS to the upstream; default 0 */
    char          *upstream_tls_ca;    /* NULL = the system's CA store */
    char          *upstream_tls_sni;   /* NULL = the upstream's host as written */
    int            upstream_tls_verify; /* 1 (default) | 0 */
    char          *upstream_tls_cert;  /* client certificate for mutual TLS, or NULL */
    char          *upstream_tls_key;
    struct sl_tls_ctx *tls_ctx;        /* built at load from the tls_* keys (the conf's
                                          reference; listeners take their own), or NULL */
    struct sl_tls_ctx *upstream_tls_ctx; /* the same from the upstream_tls* keys */
    struct sl_listener_conf *next;
};

struct sl_limit_conf {
    char          *name;               /* [limit NAME] */
    int            line;
    char          *listener;           /* listener = NAME or "*" (required) */
    struct sl_listener_conf *lc;       /* resolved; NULL for "*" */
    enum sl_metric metric;             /* default requests */
    struct sl_rate rate;               /* rate = (not for connections) */
    uint64_t       burst;              /* default: one second's worth of rate, at least 1 */
    uint64_t       max;                /* max = N (connections only) */
    enum sl_scope  scope;              /* default identity */
    enum sl_algo   algorithm;          /* default token_bucket */
    enum sl_action action;             /* default reject */
    uint64_t       max_delay_us;       /* default 200ms */
    char         **commands;           /* upper-cased; NULL (n_commands 0) = every command */
    int            n_commands;
    char         **methods;            /* http: as written (case-sensitive); NULL = every method */
    int            n_methods;
    char         **paths;              /* http: path patterns, normalised: exact,
                                          prefix or glob (proto/http_path.h); NULL = every path */
    int            n_paths;
    struct sl_cost *costs;             /* per-command costs */
    int            n_costs;
    uint64_t       default_cost;       /* `*=N` or a bare `cost = N`; default 1 */
    char         **match_identity;     /* NULL = everyone */
    int            n_match_identity;
    char          *replaces;           /* name of another limit, or NULL */
    struct sl_limit_conf *replaces_lc; /* resolved */
    int            overrides;          /* overrides = store: per-identity rate and burst read
                                          from the store's hash <key_prefix>overrides:{NAME} */
    uint64_t       overrides_ttl_us;   /* how long an answer is used; default 5s */
    int            priority;           /* adaptive concurrency's shedding tier of the
                                          identities it takes (0..3), or -1 (default): none */
    struct sl_limit_conf *next;
};

/* local | redis:// | redis-cluster:// | redis-sentinel:// (rediss*:// set tls) */
enum sl_store_kind { SL_STORE_LOCAL, SL_STORE_REDIS, SL_STORE_CLUSTER, SL_STORE_SENTINEL };

struct sl_store_conf {
    char              *url;            /* as written; default "local" */
    enum sl_store_kind kind;
    char              *user;           /* redis://user@..., or NULL */
    struct sl_addr     addr;           /* redis host:port; = seeds[0] */
    struct sl_addr    *seeds;          /* every host:port of the url, in order (owned);
                                          redis://: one, = addr; cluster: the seed nodes;
                                          sentinel: the sentinels */
    int                n_seeds;
    char              *master_name;    /* redis-sentinel://.../MASTER_NAME, else NULL */
    int                db;             /* /db, default 0 */
    char              *password_file;  /* absolute (resolved at load), or NULL */
    char              *password;       /* read from password_file at load; never printed */
    char              *key_prefix;     /* default "sluice:" */
    uint64_t           connect_timeout_us; /* default 200ms */
    uint64_t           timeout_us;     /* default 25ms */
    enum sl_on_failure on_failure;     /* default local */
    int64_t            lease;          /* 0 = off (default), -1 = auto, N > 0 tokens */
    uint64_t           connection_lease_us; /* metric = connections: a slot not renewed
                                          within this is free (a crashed instance); 10s */
    int                password_file_line; /* where password_file was set (warnings) */
    int                unresolved_line; /* redis://: the url's host name did not resolve at
                                          load (the line of url, for the warning), else 0;
                                          addr.ss is then empty and the store looks the
                                          name up again with backoff (on_failure meanwhile) */
    int                unresolved_rc;  /* that lookup's EAI_* code */
    uint64_t           max_identities; /* per limit: in-process buckets, and entries of what
                                          the store said, kept at most (LRU); 100000 */
    int                tls;            /* 1: every store connection speaks TLS (a rediss://,
                                          rediss-cluster:// or rediss-sentinel:// url, or tls = on) */
    int                tls_opt;        /* tls = : -1 not written (default), 0 off, 1 on */
    int                url_tls;        /* the url's scheme was rediss* */
    char              *tls_ca;         /* paths absolute (resolved at load), or NULL */
    char              *tls_cert;       /* client certificate for mutual TLS */
    char              *tls_key;
    char              *tls_sni;        /* NULL = the url's (first) host name */
    int                tls_verify;     /* 1 (default) | 0 */
    int                sentinel_tls;   /* sentinel url: 1 when the sentinels are asked over
                                          TLS (same tls_ca / tls_cert / tls_verify as the
                                          store); default: = tls */
    int                sentinel_tls_opt; /* sentinel_tls = : -1 not written (default), 0 off, 1 on */
    char              *sentinel_user;  /* AUTH user for the sentinels (Redis 6 ACL), or NULL */
    char              *sentinel_password_file; /* absolute (resolved at load), or NULL */
    char              *sentinel_password; /* read from sentinel_password_file at load; never
                                          printed; NULL: the sentinels get no AUTH */
    int                sentinel_password_file_line; /* where it was set (warnings) */
};

/* [usage] export = : where usage that can be billed goes (docs/usage.md). */
enum sl_usage_export { SL_USAGE_OFF = 0, SL_USAGE_STORE, SL_USAGE_FILE };

struct sl_usage_conf {
    int                export_kind;    /* enum sl_usage_export; default off */
    char              *file;           /* export = FILE: absolute (resolved at load), else NULL */
    uint64_t           interval_us;    /* how often counts are delivered; default 10s */
    uint64_t           window_us;      /* the time one hash sums; default 1m: whole minutes
                                          dividing a day */
    uint64_t           ttl_us;         /* usage_ttl: the keys live this long; default 35d */
    uint64_t           max_pending;    /* identity-windows held at once; default 100000 */
};

struct sl_conf {
    char                 *file;        /* path it was loaded from */
    int                   has_admin;   /* admin = non-empty */
    struct sl_addr        admin;       /* default 127.0.0.1:9121 */
    int                   admin_line;  /* where admin was set (warnings); 0: the default */
    char                 *admin_token_file; /* absolute (resolved at load), or NULL: no token */
    char                 *admin_token; /* read from admin_token_file at load (visible ASCII,
                                          no trailing newline); never printed */
    int                   admin_token_file_line; /* where it was set (warnings) */
    enum sl_log_level     log_level;   /* default info */
    char                 *log_file;    /* absolute (resolved at load), or NULL = stderr */
    enum sl_log_format    log_format;  /* default logfmt */
    int                   decision_log; /* enum sl_decision_log: default rejections */
    uint64_t              decision_log_rate; /* decision lines a second at most (per process);
                                          default 100 */
    uint64_t              shutdown_grace_us; /* default 10s */
    int                   workers;     /* processes serving traffic; default 1 */
    int                   workers_auto; /* workers = auto (one per online CPU) */
    struct sl_store_conf  store;
    struct sl_usage_conf  usage;       /* [usage] */
    struct sl_listener_conf *listeners; /* in file order */
    int                   n_listeners;
    struct sl_limit_conf *limits;      /* in file order */
    int                   n_limits;
};

#endif

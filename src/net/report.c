/* sluice — metrics, /stats and readiness, gathered from the listeners, the
 * limiter and the quota store. Identities are never labels. */
#include <inttypes.h>
#include <stddef.h>
#include <string.h>

#include "admin/admin.h"
#include "admin/process.h"
#include "core/lsink.h"
#include "core/buf.h"
#include "limit/limiter.h"
#include "net/usage_export.h"
#include "net/listener.h"
#include "net/report.h"
#include "net/sess_adapt.h"
#include "net/session.h"
#include "net/upool-t.h"
#include "store/store.h"

/* One listener counter as a metric family. */
struct lmetric {
    const char *name;
    const char *type;
    const char *help;
    size_t      off;   /* offset in struct sl_listener_stats */
};

static const struct lmetric lmetrics[] = {
    { "sluice_connections_accepted_total", "counter", "Client connections accepted.",
      offsetof(struct sl_listener_stats, conns_accepted) },
    { "sluice_connections_active", "gauge", "Client connections open now.",
      offsetof(struct sl_listener_stats, conns_active) },
    { "sluice_connections_refused_total", "counter",
      "Connections refused: over max_connections or a connection limit, or out of file descriptors.",
      offsetof(struct sl_listener_stats, conns_refused) },
    { "sluice_connections_refused_descriptors_total", "counter",
      "Connections refused for lack of file descriptors (also in sluice_connections_refused_total).",
      offsetof(struct sl_listener_stats, conns_refused_fd) },
    { "sluice_upstream_failures_total", "counter", "Upstream connects that failed or timed out.",
      offsetof(struct sl_listener_stats, upstream_failed) },
    { "sluice_idle_closed_total", "counter", "Connections closed by idle_timeout.",
      offsetof(struct sl_listener_stats, idle_closed) },
    { "sluice_header_timeouts_total", "counter", "Connections closed by header_timeout (a request's head came too slowly).",
      offsetof(struct sl_listener_stats, header_timeouts) },
    { "sluice_protocol_errors_total", "counter", "Connections closed for malformed input.",
      offsetof(struct sl_listener_stats, protocol_errors) },
    { "sluice_requests_total", "counter", "Requests framed (resp and http).",
      offsetof(struct sl_listener_stats, requests) },
    { "sluice_requests_rejected_total", "counter", "Requests answered by a rejection.",
      offsetof(struct sl_listener_stats, rejected) },
    { "sluice_upstream_timeouts_total", "counter",
      "HTTP requests answered 504: no response head within upstream_timeout.",
      offsetof(struct sl_listener_stats, upstream_timeouts) },
    { "sluice_resolve_failures_total", "counter",
      "Lookups of the upstream's host name that failed (the last good address stayed in use).",
      offsetof(struct sl_listener_stats, resolve_failures) },
    { "sluice_tls_handshake_failures_total", "counter",
      "TLS handshakes with clients that failed or took longer than header_timeout.",
      offsetof(struct sl_listener_stats, tls_handshake_failures) },
    { "sluice_proxy_protocol_refused_total", "counter",
      "Clients closed for their PROXY header: a peer not in trusted_proxies, a header malformed, "
      "missing or not whole within header_timeout.",
      offsetof(struct sl_listener_stats, proxy_refused) },
    { "sluice_tls_identity_refused_total", "counter",
      "Clients closed after the TLS handshake: identity = tls_subject and a certificate name "
      "that cannot be one (a NUL byte inside, more than one CN).",
      offsetof(struct sl_listener_stats, tls_identity_refused) },
    { "sluice_upstream_tls_resumed_total", "counter",
      "TLS handshakes with the upstream that resumed an earlier session (no certificate exchange).",
      offsetof(struct sl_listener_stats, upstream_tls_resumed) },
    { "sluice_upstream_connects_total", "counter",
      "Upstream connections made (connects that succeeded).",
      offsetof(struct sl_listener_stats, upstream_connects) },
    { "sluice_upstream_connections_reused_total", "counter",
      "HTTP, upstream_keepalive: kept idle upstream connections a new client connection took "
      "instead of connecting.",
      offsetof(struct sl_listener_stats, upstream_reused) },
    { "sluice_upstream_connections_idle", "gauge",
      "HTTP, upstream_keepalive: idle upstream connections kept for reuse now.",
      offsetof(struct sl_listener_stats, upstream_idle) },
    { "sluice_pool_pin_waits_total", "counter",
      "RESP, upstream_pool: clients that waited for a connection of their own past "
      "upstream_pool_pinned.",
      offsetof(struct sl_listener_stats, pool_pin_waits) },
    { "sluice_pool_pin_refused_total", "counter",
      "RESP, upstream_pool: requests answered -ERR because no connection of their own could be "
      "had within upstream_pool_pin_wait.",
      offsetof(struct sl_listener_stats, pool_pin_refused) },
    { "sluice_pool_clients_failed_total", "counter",
      "RESP, upstream_pool: clients whose upstream connection failed with replies owed to them "
      "(answered -ERR, or closed when cut inside a reply).",
      offsetof(struct sl_listener_stats, pool_lost) },
    { "sluice_pool_slow_clients_closed_total", "counter",
      "RESP, upstream_pool: clients closed with more than upstream_pool_client_buffer of replies "
      "unread.",
      offsetof(struct sl_listener_stats, pool_slow_closed) },
    { "sluice_client_read_bytes_total", "counter", "Bytes read from clients.",
      offsetof(struct sl_listener_stats, bytes_in) },
    { "sluice_upstream_read_bytes_total", "counter", "Bytes read from upstreams (sent on to clients).",
      offsetof(struct sl_listener_stats, bytes_out) },
};

/* A listener is reported while it listens or has sessions. */
static int shown(const struct sl_listener *l)
{
    return !(l->retired && l->sessions == 0);
}

/* When <l> is the first shown listener of its name, sums into <out> the
 * counters of every shown one of that name and returns 1; else 0. A listener
 * moved by a reload has its new socket and, while its old sessions live, its
 * old one: one name, one series, counting both. */
static int name_totals(const struct sl_server *srv, const struct sl_listener *l,
                       struct sl_listener_stats *out)
{
    if (!shown(l))
        return 0;
    for (const struct sl_listener *o = srv->listeners; o != l; o = o->next)
        if (shown(o) && strcmp(o->name, l->name) == 0)
            return 0;
    *out = l->stats;
    for (const struct sl_listener *o = l->next; o != NULL; o = o->next)
        if (shown(o) && strcmp(o->name, l->name) == 0)
            sl_listener_stats_add(out, &o->stats);
    return 1;
}

/* The pooled engine's figures of every shown listener named as <l> (when
 * <l> is the first of them and pooled): 1, else 0. */
static int pool_totals(const struct sl_server *srv, const struct sl_listener *l,
                       struct sl_upool_stats *out)
{
    struct sl_listener_stats ls;
    /* a listener a reload switched to 1:1 still shows its engine while the
     * pooled clients it had are served */
    int pooled = l->conf->upstream_pool > 0 || l->upool != NULL;
    if (l->conf->protocol != SL_PROTO_RESP || !pooled || !name_totals(srv, l, &ls))
        return 0;
    memset(out, 0, sizeof(*out));
    for (const struct sl_listener *o = l; o != NULL; o = o->next) {
        if (!shown(o) || strcmp(o->name, l->name) != 0)
            continue;
        struct sl_upool_stats st;
        sl_session_pool_stats(o, &st);
        out->conns += st.conns;
        out->pinned += st.pinned;
        out->failures += st.failures + o->pool_failures_gone;
        out->dropped_replies += st.dropped_replies + o->pool_dropped_gone;
        out->pin_waiting += st.pin_waiting;
        out->idle_closed += st.idle_closed;
        out->batch_holds += st.batch_holds;
        out->batch_gained += st.batch_gained;
    }
    return 1;
}

static void pool_metrics(struct sl_server *srv, struct sl_metrics *m)
{
    static const struct {
        const char *name, *type, *help;
        size_t off;
    } pm[] = {
        { "sluice_pool_upstream_connections", "gauge",
          "RESP, upstream_pool: upstream connections open or opening, shared and pinned.",
          offsetof(struct sl_upool_stats, conns) },
        { "sluice_pool_pinned_connections", "gauge",
          "RESP, upstream_pool: upstream connections pinned to one client now.",
          offsetof(struct sl_upool_stats, pinned) },
        { "sluice_pool_pin_waiting", "gauge",
          "RESP, upstream_pool: clients waiting for a connection of their own now.",
          offsetof(struct sl_upool_stats, pin_waiting) },
        { "sluice_pool_upstream_failures_total", "counter",
          "RESP, upstream_pool: pooled upstream connections that failed (connect, setup "
          "refused, I/O, protocol).",
          offsetof(struct sl_upool_stats, failures) },
        { "sluice_pool_replies_dropped_total", "counter",
          "RESP, upstream_pool: replies read for clients already gone, dropped.",
          offsetof(struct sl_upool_stats, dropped_replies) },
        { "sluice_pool_idle_closed_total", "counter",
          "RESP, upstream_pool: shared upstream connections closed after "
          "upstream_pool_idle_timeout idle.",
          offsetof(struct sl_upool_stats, idle_closed) },
        { "sluice_pool_batch_holds_total", "counter",
          "RESP, upstream_pool: small batches held up to upstream_pool_batch_wait for more "
          "requests.",
          offsetof(struct sl_upool_stats, batch_holds) },
        { "sluice_pool_batch_gained_total", "counter",
          "RESP, upstream_pool: requests that joined a held batch while it waited.",
          offsetof(struct sl_upool_stats, batch_gained) },
    };
    for (size_t i = 0; i < sizeof(pm) / sizeof(pm[0]); i++) {
        sl_metrics_family(m, pm[i].name, pm[i].type, pm[i].help);
        for (struct sl_listener *l = srv->listeners; l != NULL; l = l->next) {
            struct sl_upool_stats st;
            if (!pool_totals(srv, l, &st))
                continue;
            const char *labels[] = { "listener", l->name, NULL };
            sl_metrics_u64(m, pm[i].name, labels, *(const uint64_t *)((const char *)&st + pm[i].off));
        }
    }
}

void sl_server_metrics(void *data, struct sl_metrics *m)
{
    struct sl_server *srv = data;
    /* A worker's process_* are its own (the master labels them with
     * worker="N"); the build and the reloads are the master's to say. */
    sl_process_metrics(m);
    if (!srv->worker)
        sl_build_reload_metrics(m);
    for (size_t i = 0; i < sizeof(lmetrics) / sizeof(lmetrics[0]); i++) {
        sl_metrics_family(m, lmetrics[i].name, lmetrics[i].type, lmetrics[i].help);
        for (struct sl_listener *l = srv->listeners; l != NULL; l = l->next) {
            struct sl_listener_stats st;
            if (!name_totals(srv, l, &st))
                continue;
            const char *labels[] = { "listener", l->name, NULL };
            uint64_t v = *(const uint64_t *)((const char *)&st + lmetrics[i].off);
            sl_metrics_u64(m, lmetrics[i].name, labels, v);
        }
    }
    pool_metrics(srv, m);
    sl_actl_metrics(srv, m);
    static const char *const classes[5] = { "1xx", "2xx", "3xx", "4xx", "5xx" };
    sl_metrics_family(m, "sluice_http_responses_total", "counter",
                      "HTTP responses sent to clients (the upstream's and sluice's own), by status class.");
    for (struct sl_listener *l = srv->listeners; l != NULL; l = l->next) {
        struct sl_listener_stats st;
        if (l->conf->protocol != SL_PROTO_HTTP || !name_totals(srv, l, &st))
            continue;
        for (int c = 0; c < 5; c++) {
            const char *labels[] = { "listener", l->name, "class", classes[c], NULL };
            sl_metrics_u64(m, "sluice_http_responses_total", labels, st.http_responses[c]);
        }
    }
    /* The ceiling next to sluice_connections_active, so an alert can say
     * "near max_connections" without copying the configuration into it. */
    sl_metrics_family(m, "sluice_connections_max", "gauge",
                      "max_connections of the listener (a worker's share with workers > 1).");
    for (struct sl_listener *l = srv->listeners; l != NULL; l = l->next) {
        struct sl_listener_stats st;
        if (!name_totals(srv, l, &st))
            continue;
        const char *labels[] = { "listener", l->name, NULL };
        sl_metrics_u64(m, "sluice_connections_max", labels, l->conf->max_connections);
    }
    sl_metrics_family(m, "sluice_log_dropped_total", "counter",
                      "Decision and access log lines dropped: the writer could not keep up "
                      "(its buffer was full) or the write failed.");
    sl_metrics_u64(m, "sluice_log_dropped_total", NULL, sl_lsink_dropped());
    sl_metrics_family(m, "sluice_buffer_chunks", "gauge", "64 KiB data chunks in use.");
    sl_metrics_u64(m, "sluice_buffer_chunks", NULL, sl_buf_in_use());
    if (srv->limiter)
        sl_limiter_metrics(srv->limiter, m);
    if (srv->conf->usage.export_kind != SL_USAGE_OFF)
        sl_usage_export_metrics(m);

    sl_metrics_family(m, "sluice_store_up", "gauge",
                      "1 when the quota store is connected and its scripts loaded (local store: 1).");
    sl_metrics_u64(m, "sluice_store_up", NULL, srv->store ? (uint64_t)sl_store_up(srv->store) : 1);
    if (srv->store == NULL)
        return;
    const struct sl_store_stats *st = sl_store_stats(srv->store);
    struct { const char *name, *help; uint64_t v; } c[] = {
        { "sluice_store_requests_total", "Script calls sent to the quota store.", st->requests },
        { "sluice_store_errors_total", "Store calls that failed (timeouts included).", st->errors },
        { "sluice_store_timeouts_total", "Store calls past the store timeout.", st->timeouts },
        { "sluice_store_noscript_reloads_total", "NOSCRIPT replies recovered by reloading.", st->noscript_reloads },
        { "sluice_store_reconnects_total", "Reconnections to the quota store.", st->reconnects },
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        sl_metrics_family(m, c[i].name, "counter", c[i].help);
        sl_metrics_u64(m, c[i].name, NULL, c[i].v);
    }
    sl_metrics_family(m, "sluice_store_redirects_total", "counter",
                      "Redis Cluster redirections the store met (followed or not).");
    const char *moved[] = { "kind", "moved", NULL }, *ask[] = { "kind", "ask", NULL };
    sl_metrics_u64(m, "sluice_store_redirects_total", moved, st->redirects_moved);
    sl_metrics_u64(m, "sluice_store_redirects_total", ask, st->redirects_ask);
    struct { const char *name, *type, *help; uint64_t v; } cl[] = {
        { "sluice_store_map_refreshes_total", "counter", "Redis Cluster slot maps read.", st->map_refreshes },
        { "sluice_store_map_errors_total", "counter", "Redis Cluster slot map requests that failed.", st->map_errors },
        { "sluice_store_split_calls_total", "counter",
          "Store calls whose keys were in several cluster slots (sent as one call per slot).", st->split_calls },
        { "sluice_store_nodes", "gauge", "Masters the store sends to (one for a single Redis).", st->nodes },
        { "sluice_store_nodes_up", "gauge", "Of those, connected and answering.", st->nodes_up },
    };
    for (size_t i = 0; i < sizeof(cl) / sizeof(cl[0]); i++) {
        sl_metrics_family(m, cl[i].name, cl[i].type, cl[i].help);
        sl_metrics_u64(m, cl[i].name, NULL, cl[i].v);
    }
    sl_metrics_family(m, "sluice_store_live_instances", "gauge",
                      "sluice instances seen in the store's heartbeat set.");
    sl_metrics_u64(m, "sluice_store_live_instances", NULL, sl_store_live_instances(srv->store));
    double bounds[11];
    for (int i = 0; i < 11; i++)
        bounds[i] = (double)sl_store_latency_bounds_us[i] / 1e6;
    sl_metrics_family(m, "sluice_store_round_trip_seconds", "histogram",
                      "Round trip of one store call.");
    sl_metrics_histogram(m, "sluice_store_round_trip_seconds", NULL, bounds, st->latency_le, 11,
                         (double)st->latency_sum_us / 1e6);
}

void sl_server_stats(void *data, FILE *out)
{
    struct sl_server *srv = data;
    fputs("{\"listeners\":[", out);
    int first = 1;
    for (struct sl_listener *l = srv->listeners; l != NULL; l = l->next) {
        struct sl_listener_stats totals;
        if (!name_totals(srv, l, &totals))
            continue;
        const struct sl_listener_stats *s = &totals;
        fprintf(out,
                "%s{\"name\":\"%s\",\"connections_active\":%" PRIu64 ",\"connections_accepted\":%" PRIu64
                ",\"requests\":%" PRIu64 ",\"rejected\":%" PRIu64 ",\"client_read_bytes\":%" PRIu64
                ",\"upstream_read_bytes\":%" PRIu64,
                first ? "" : ",", l->name, s->conns_active, s->conns_accepted, s->requests,
                s->rejected, s->bytes_in, s->bytes_out);
        struct sl_upool_stats ps;
        if (pool_totals(srv, l, &ps))
            fprintf(out,
                    ",\"pool\":{\"upstream_connections\":%" PRIu64 ",\"pinned\":%" PRIu64
                    ",\"pin_waits\":%" PRIu64 ",\"pin_refused\":%" PRIu64
                    ",\"upstream_failures\":%" PRIu64 ",\"clients_failed\":%" PRIu64
                    ",\"slow_clients_closed\":%" PRIu64 ",\"replies_dropped\":%" PRIu64 "}",
                    ps.conns, ps.pinned, s->pool_pin_waits, s->pool_pin_refused, ps.failures,
                    s->pool_lost, s->pool_slow_closed, ps.dropped_replies);
        sl_actl_stats_json(srv, l->name, out);
        fputs("}", out);
        first = 0;
    }
    fputs("],\"limits\":", out);
    if (srv->limiter)
        sl_limiter_stats_json(srv->limiter, out);
    else
        fputs("[]", out);
    if (srv->store)
        fprintf(out, ",\"store\":{\"up\":%d,\"live_instances\":%" PRIu64 "}", sl_store_up(srv->store),
                sl_store_live_instances(srv->store));
    else
        fputs(",\"store\":{\"up\":1,\"local\":true}", out);
    fputs("}\n", out);
}

int sl_server_ready(void *data, const char **why)
{
    struct sl_server *srv = data;
    if (srv->draining) {
        *why = "draining";
        return 0;
    }
    if (srv->store && !sl_store_up(srv->store) && srv->conf->store.on_failure == SL_FAIL_CLOSED) {
        *why = "quota store unreachable and on_failure = closed";
        return 0;
    }
    return 1;
}

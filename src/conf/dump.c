/* sluice — printing the effective configuration (-T).
 *
 * The output is INI that sl_conf_load() reads back to an equal configuration:
 * every default is written out, numbers in the shortest exact unit, lists
 * wrapped on indented continuation lines well inside inih's 200-byte lines.
 * The password itself is never written, only the file it came from. */
#include <stdio.h>
#include <string.h>

#include "conf/conf.h"
#include "conf/http.h"
#include "conf/names.h"
#include "conf/units.h"

#define WRAP 100 /* wrap list values before this column */

#define LINE_MAX_BYTES 198 /* what the loader accepts, line end not counted */

static void kv(FILE *out, const char *key, const char *value)
{
    /* A value that loaded fitted on a line as "key=value" at least: keep
     * the aligned form only where it fits too. */
    size_t klen = strlen(key), vlen = strlen(value);
    if ((klen < 15 ? 15 : klen) + 3 + vlen > LINE_MAX_BYTES) {
        fprintf(out, "%s=%s\n", key, value);
        return;
    }
    /* "key = ;" would read back as an empty value plus a comment; "key =;"
     * does not, because inih only sees a ';' after a blank as a comment. */
    fprintf(out, "%-15s %s%s\n", key, value[0] == ';' ? "=" : "= ", value);
}

static void kv_duration(FILE *out, const char *key, uint64_t us)
{
    char b[32];
    sl_fmt_duration(us, b, sizeof(b));
    kv(out, key, b);
}

static void kv_u64(FILE *out, const char *key, uint64_t v)
{
    char b[32];
    snprintf(b, sizeof(b), "%llu", (unsigned long long)v);
    kv(out, key, b);
}

/* A list value: words separated by blanks, wrapped on indented lines. */
struct words {
    FILE *out;   /* where they go */
    int   col;   /* column of the current line; 0 before the first word */
};

static void word(struct words *w, const char *key, const char *s)
{
    int n = (int)strlen(s);
    if (w->col == 0) {
        w->col = fprintf(w->out, "%-15s = %s", key, s);
    } else if (w->col + 1 + n > WRAP) {
        w->col = fprintf(w->out, "\n    %s", s) - 1;
    } else {
        w->col += fprintf(w->out, " %s", s);
    }
}

static void words_end(struct words *w)
{
    if (w->col != 0)
        fputc('\n', w->out);
    w->col = 0;
}

static void kv_opt(FILE *out, const char *k, const char *v)
{
    if (v != NULL)
        kv(out, k, v);
}

/* The TLS keys, only where TLS is on (elsewhere they are errors). */
static void dump_listener_tls(FILE *out, const struct sl_listener_conf *l)
{
    if (l->tls_cert != NULL) {
        kv(out, "tls_cert", l->tls_cert);
        kv(out, "tls_key", l->tls_key);
        kv_opt(out, "tls_ca", l->tls_ca);
        kv(out, "tls_verify_client", sl_conf_tls_verify_names[l->tls_verify_client]);
        kv(out, "tls_protocols", l->tls_protocols ? l->tls_protocols : "TLSv1.2 TLSv1.3");
        kv_opt(out, "tls_ciphers", l->tls_ciphers);
    }
    if (l->upstream_tls) {
        kv(out, "upstream_tls", "on");
        kv_opt(out, "upstream_tls_ca", l->upstream_tls_ca);
        kv_opt(out, "upstream_tls_sni", l->upstream_tls_sni);
        kv(out, "upstream_tls_verify", sl_conf_onoff_names[l->upstream_tls_verify ? 1 : 0]);
        kv_opt(out, "upstream_tls_cert", l->upstream_tls_cert);
        kv_opt(out, "upstream_tls_key", l->upstream_tls_key);
    }
}

static void dump_listener(FILE *out, const struct sl_listener_conf *l)
{
    struct words w = { out, 0 };
    char b[160];
    fprintf(out, "\n[listener %s]\n", l->name);
    kv(out, "listen", l->listen.text);
    kv(out, "protocol", sl_conf_proto_names[l->protocol]);
    kv(out, "upstream", l->upstream.text);
    for (int i = 0; i < l->n_identity; i++) {
        if (l->identity[i] == SL_ID_HEADER)
            snprintf(b, sizeof(b), "header:%s", l->identity_header[i]);
        else
            snprintf(b, sizeof(b), "%s", sl_conf_id_names[l->identity[i]]);
        word(&w, "identity", b);
    }
    words_end(&w);
    kv(out, "key_prefix_separator", l->key_prefix_separator);
    kv_u64(out, "max_connections", l->max_connections);
    kv_duration(out, "idle_timeout", l->idle_timeout_us);
    kv_duration(out, "connect_timeout", l->connect_timeout_us);
    kv_duration(out, "header_timeout", l->header_timeout_us);
    kv_u64(out, "max_replies_owed", l->max_replies_owed);
    sl_fmt_size(l->max_request, b, sizeof(b));
    kv(out, "max_request", b);
    kv_duration(out, "resolve_ttl", l->resolve_ttl_us);
    kv(out, "proxy_protocol", sl_conf_pp_names[l->proxy_protocol]);
    kv(out, "upstream_proxy_protocol", sl_conf_pp_names[l->upstream_proxy_protocol]);
    if (l->protocol == SL_PROTO_HTTP || l->proxy_protocol != 0) {
        for (int i = 0; i < l->n_trusted_proxies; i++) {
            sl_conf_cidr_fmt(&l->trusted_proxies[i], b, sizeof(b));
            word(&w, "trusted_proxies", b);
        }
        words_end(&w);
    }
    dump_listener_tls(out, l);
    if (l->protocol != SL_PROTO_TCP) {
        kv(out, "adaptive_concurrency", sl_conf_adaptive_names[l->adaptive]);
        kv_u64(out, "adaptive_min_limit", l->adaptive_min_limit);
        kv_u64(out, "adaptive_max_limit", l->adaptive_max_limit);
        kv_u64(out, "adaptive_initial_limit", l->adaptive_initial_limit);
        kv_u64(out, "adaptive_queue", l->adaptive_queue);
        if (l->adaptive_queue_target_us == 0)
            kv(out, "adaptive_queue_target", "auto");
        else
            kv_duration(out, "adaptive_queue_target", l->adaptive_queue_target_us);
        kv_duration(out, "adaptive_queue_interval", l->adaptive_queue_interval_us);
        kv_duration(out, "adaptive_probe_interval", l->adaptive_probe_interval_us);
        kv(out, "adaptive_share", sl_conf_adaptive_share_names[l->adaptive_share]);
    }
    if (l->protocol == SL_PROTO_RESP) {
        kv_u64(out, "setup_commands", l->setup_commands);
        if (l->upstream_pool == 0)
            kv(out, "upstream_pool", "off");
        else
            kv_u64(out, "upstream_pool", l->upstream_pool);
        kv_u64(out, "upstream_pool_pinned", l->pool_pinned);
        kv_duration(out, "upstream_pool_pin_wait", l->pool_pin_wait_us);
        sl_fmt_size(l->pool_client_buffer, b, sizeof(b));
        kv(out, "upstream_pool_client_buffer", b);
        kv_duration(out, "upstream_pool_idle_timeout", l->pool_idle_timeout_us);
        kv_duration(out, "upstream_pool_batch_wait", l->pool_batch_wait_us);
    }
    if (l->protocol != SL_PROTO_HTTP)
        return; /* the keys below are errors elsewhere */
    kv_duration(out, "upstream_timeout", l->upstream_timeout_us);
    kv(out, "rate_limit_headers", sl_conf_rlh_names[l->rate_limit_headers]);
    kv(out, "forwarded_headers", sl_conf_onoff_names[l->forwarded_headers ? 1 : 0]);
    sl_fmt_size(l->max_request_line, b, sizeof(b));
    kv(out, "max_request_line", b);
    sl_fmt_size(l->max_header_line, b, sizeof(b));
    kv(out, "max_header_line", b);
    kv_u64(out, "max_headers", l->max_headers);
    sl_fmt_size(l->max_header_size, b, sizeof(b));
    kv(out, "max_header_size", b);
    for (uint32_t i = 0; i < l->upgrades.n; i++)
        word(&w, "upgrades", l->upgrades.name[i]);
    if (l->upgrades.connect)
        word(&w, "upgrades", "CONNECT");
    if (l->upgrades.n == 0 && !l->upgrades.connect)
        word(&w, "upgrades", "none");
    words_end(&w);
    kv_u64(out, "upstream_keepalive", l->upstream_keepalive);
    kv_duration(out, "upstream_keepalive_timeout", l->upstream_keepalive_timeout_us);
    kv(out, "access_log", l->access_log != NULL ? l->access_log : "off");
    kv(out, "access_log_format", sl_conf_alog_fmt_names[l->access_log_format]);
}

static void dump_limit(FILE *out, const struct sl_limit_conf *m)
{
    struct words w = { out, 0 };
    char b[64];
    fprintf(out, "\n[limit %s]\n", m->name);
    kv(out, "listener", m->listener);
    kv(out, "metric", sl_conf_metric_names[m->metric]);
    if (m->metric == SL_METRIC_CONNECTIONS) {
        kv_u64(out, "max", m->max);
    } else {
        sl_fmt_rate(&m->rate, m->metric != SL_METRIC_REQUESTS, b, sizeof(b));
        kv(out, "rate", b);
        kv_u64(out, "burst", m->burst);
    }
    kv(out, "scope", sl_conf_scope_names[m->scope]);
    kv(out, "algorithm", sl_conf_algo_names[m->algorithm]);
    kv(out, "action", sl_conf_action_names[m->action]);
    kv_duration(out, "max_delay", m->max_delay_us);
    if (m->overrides) { /* only then: files without them print as before */
        kv(out, "overrides", sl_conf_overrides_names[m->overrides]);
        kv_duration(out, "overrides_ttl", m->overrides_ttl_us);
    }
    for (int i = 0; i < m->n_commands; i++)
        word(&w, "commands", m->commands[i]);
    words_end(&w);
    for (int i = 0; i < m->n_methods; i++)
        word(&w, "methods", m->methods[i]);
    words_end(&w);
    for (int i = 0; i < m->n_paths; i++)
        word(&w, "paths", m->paths[i]);
    words_end(&w);
    /* cost is only accepted with metric = requests. */
    if (m->metric == SL_METRIC_REQUESTS) {
        if (m->n_costs == 0) {
            kv_u64(out, "cost", m->default_cost);
        } else {
            for (int i = 0; i < m->n_costs; i++) {
                snprintf(b, sizeof(b), "%s=%llu", m->costs[i].cmd,
                         (unsigned long long)m->costs[i].cost);
                word(&w, "cost", b);
            }
            snprintf(b, sizeof(b), "*=%llu", (unsigned long long)m->default_cost);
            word(&w, "cost", b);
            words_end(&w);
        }
    }
    for (int i = 0; i < m->n_match_identity; i++)
        word(&w, "match_identity", m->match_identity[i]);
    words_end(&w);
    if (m->replaces != NULL)
        kv(out, "replaces", m->replaces);
    if (m->priority >= 0)
        kv_u64(out, "priority", (uint64_t)m->priority);
}

void sl_conf_dump(const struct sl_conf *c, FILE *out)
{
    const struct sl_store_conf *st = &c->store;
    char b[64];
    fprintf(out, "; effective configuration of %s\n\n[sluice]\n", c->file);
    kv(out, "admin", c->has_admin ? c->admin.text : "");
    if (c->admin_token_file != NULL) /* the file, never the token */
        kv(out, "admin_token_file", c->admin_token_file);
    kv(out, "log_level", sl_log_level_name(c->log_level));
    if (c->log_file != NULL)
        kv(out, "log_file", c->log_file);
    kv(out, "log_format", sl_log_format_names[c->log_format]);
    kv(out, "decision_log", sl_conf_dlog_names[c->decision_log]);
    kv_u64(out, "decision_log_rate", c->decision_log_rate);
    kv_duration(out, "shutdown_grace", c->shutdown_grace_us);
    if (c->workers_auto)
        kv(out, "workers", "auto");
    else
        kv_u64(out, "workers", (uint64_t)c->workers);

    fprintf(out, "\n[store]\n");
    kv(out, "url", st->url);
    if (st->password_file != NULL)
        kv(out, "password_file", st->password_file);
    kv(out, "key_prefix", st->key_prefix);
    kv_duration(out, "connect_timeout", st->connect_timeout_us);
    kv_duration(out, "timeout", st->timeout_us);
    kv(out, "on_failure", sl_conf_fail_names[st->on_failure]);
    if (st->lease == 0)
        kv(out, "lease", "off");
    else if (st->lease < 0)
        kv(out, "lease", "auto");
    else {
        snprintf(b, sizeof(b), "%lld", (long long)st->lease);
        kv(out, "lease", b);
    }
    kv_duration(out, "connection_lease", st->connection_lease_us);
    kv_u64(out, "max_identities", st->max_identities);
    if (st->tls || st->sentinel_tls) { /* sentinel_tls alone uses the same files */
        kv(out, "tls", sl_conf_onoff_names[st->tls ? 1 : 0]);
        kv_opt(out, "tls_ca", st->tls_ca);
        kv_opt(out, "tls_cert", st->tls_cert);
        kv_opt(out, "tls_key", st->tls_key);
        kv_opt(out, "tls_sni", st->tls_sni);
        kv(out, "tls_verify", sl_conf_onoff_names[st->tls_verify ? 1 : 0]);
    }
    if (st->kind == SL_STORE_SENTINEL) {
        kv(out, "sentinel_tls", sl_conf_onoff_names[st->sentinel_tls ? 1 : 0]);
        kv_opt(out, "sentinel_user", st->sentinel_user);
        if (st->sentinel_password_file != NULL) /* the file, never the password */
            kv(out, "sentinel_password_file", st->sentinel_password_file);
    }

    if (c->usage.export_kind != SL_USAGE_OFF) {
        const struct sl_usage_conf *u = &c->usage;
        fprintf(out, "\n[usage]\n");
        kv(out, "export", u->export_kind == SL_USAGE_STORE ? "store" : u->file);
        kv_duration(out, "interval", u->interval_us);
        kv_duration(out, "window", u->window_us);
        kv_duration(out, "usage_ttl", u->ttl_us);
        kv_u64(out, "max_pending", u->max_pending);
    }

    for (const struct sl_listener_conf *l = c->listeners; l != NULL; l = l->next)
        dump_listener(out, l);
    for (const struct sl_limit_conf *m = c->limits; m != NULL; m = m->next)
        dump_limit(out, m);
}

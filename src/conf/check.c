/* sluice — the checks run after the last line: derived defaults filled in
 * (a listener's identity, a limit's burst), names resolved (a limit's
 * listener, replaces, match_identity entries) and the rules that span keys
 * or sections (addresses that clash or loop, keys for one protocol only,
 * costs a limit could never hold, cycles of replaces, workers and a local
 * store). Each error is reported at the line of the key it concerns. */
#include <arpa/inet.h>
#include <ctype.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/conf-i.h"
#include "conf/units.h"
#include "conf/conf.h"
#include "conf/http.h"
#include "conf/names.h"
#include "conf/resolve.h"
#include "identity/identity-t.h"

/* The keys of [listener] (sec_listener.c) that only an http listener takes. */
static const char *const http_only_keys[] = { "upstream_timeout",
    "rate_limit_headers", "forwarded_headers", "max_request_line", "max_header_line",
    "max_headers", "max_header_size", "upgrades", "upstream_keepalive",
    "upstream_keepalive_timeout", "access_log", "access_log_format" };
/* ... and those only a resp listener takes. */
static const char *const resp_only_keys[] = { "setup_commands", "upstream_pool",
    "upstream_pool_pinned", "upstream_pool_pin_wait", "upstream_pool_client_buffer",
    "upstream_pool_idle_timeout", "upstream_pool_batch_wait" };

static int is_wildcard(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return ((const struct sockaddr_in *)ss)->sin_addr.s_addr == htonl(INADDR_ANY);
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
    return memcmp(&s6->sin6_addr, &in6addr_any, sizeof(in6addr_any)) == 0;
}

static in_port_t port_of(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return ((const struct sockaddr_in *)ss)->sin_port;
    return ((const struct sockaddr_in6 *)ss)->sin6_port;
}

static int same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return 0;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                  &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
}

/* A name not resolved (-t --no-resolve): nothing to compare. */
static int unresolved(const struct sl_addr *a)
{
    return a->named && a->ss.ss_family == AF_UNSPEC;
}

/* Would binding both fail? Same port, and the same address or a wildcard
 * (which on Linux also takes the port of the other family). */
static int addr_clash(const struct sl_addr *a, const struct sl_addr *b)
{
    if (unresolved(a) || unresolved(b))
        return 0;
    if (port_of(&a->ss) != port_of(&b->ss))
        return 0;
    return same_addr(&a->ss, &b->ss) || is_wildcard(&a->ss) || is_wildcard(&b->ss);
}

static int is_local(const struct sockaddr_storage *ss)
{
    if (is_wildcard(ss))
        return 1;
    if (ss->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
    return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)ss)->sin6_addr);
}

/* Would the listener connect to itself? A wildcard listen also answers on
 * loopback; another host's address on the same port is fine. */
static int is_loop(const struct sl_addr *listen, const struct sl_addr *upstream)
{
    if (unresolved(listen) || unresolved(upstream))
        return 0;
    if (port_of(&listen->ss) != port_of(&upstream->ss))
        return 0;
    return same_addr(&listen->ss, &upstream->ss) ||
           (is_wildcard(&listen->ss) && is_local(&upstream->ss));
}

/* The adaptive_* keys of listener <l>: resp and http only (pooled or not,
 * docs/adaptive.md), and limits in order. */
static void check_adaptive(struct loader *ld, struct section *sec, struct sl_listener_conf *l)
{
    static const char *const keys[] = { "adaptive_concurrency", "adaptive_min_limit",
        "adaptive_max_limit", "adaptive_initial_limit", "adaptive_queue", "adaptive_queue_target",
        "adaptive_queue_interval", "adaptive_probe_interval", "adaptive_share" };
    if (l->protocol == SL_PROTO_TCP) {
        for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
            int line = sl_cf_key_line(sec, keys[k]);
            if (line != 0)
                sl_cf_err(ld, line, "%s: only for resp and http listeners (this listener is tcp)",
                          keys[k]);
        }
        return;
    }
    if (l->adaptive_min_limit > l->adaptive_max_limit)
        sl_cf_err(ld, sl_cf_key_line(sec, "adaptive_min_limit"),
                  "adaptive_min_limit: %llu is above adaptive_max_limit (%llu)",
                  (unsigned long long)l->adaptive_min_limit,
                  (unsigned long long)l->adaptive_max_limit);
    else if (sl_cf_key_line(sec, "adaptive_initial_limit") == 0) {
        /* the default start follows the bounds written (max = 5 starts at 5) */
        if (l->adaptive_initial_limit < l->adaptive_min_limit)
            l->adaptive_initial_limit = l->adaptive_min_limit;
        if (l->adaptive_initial_limit > l->adaptive_max_limit)
            l->adaptive_initial_limit = l->adaptive_max_limit;
    } else if (l->adaptive_initial_limit < l->adaptive_min_limit ||
               l->adaptive_initial_limit > l->adaptive_max_limit) {
        sl_cf_err(ld, sl_cf_key_line(sec, "adaptive_initial_limit"),
                  "adaptive_initial_limit: %llu is outside adaptive_min_limit .. "
                  "adaptive_max_limit (%llu .. %llu)",
                  (unsigned long long)l->adaptive_initial_limit,
                  (unsigned long long)l->adaptive_min_limit,
                  (unsigned long long)l->adaptive_max_limit);
    }
}

static void check_listener(struct loader *ld, struct section *sec)
{
    struct sl_listener_conf *l = sec->obj;
    char t[128];
    int listen_line = sl_cf_key_line(sec, "listen");
    /* An address is valid once its text is filled in: a bad value was
     * reported where it was set and takes no part in the checks below. */
    int has_listen = l->listen.text[0] != '\0', has_upstream = l->upstream.text[0] != '\0';
    if (listen_line == 0)
        sl_cf_err(ld, sec->line, "%s: missing 'listen'", sl_cf_title(sec, t, sizeof(t)));
    if (sl_cf_key_line(sec, "upstream") == 0)
        sl_cf_err(ld, sec->line, "%s: missing 'upstream'", sl_cf_title(sec, t, sizeof(t)));
    else if (has_listen && has_upstream && is_loop(&l->listen, &l->upstream))
        sl_cf_err(ld, sl_cf_key_line(sec, "upstream"),
                  "upstream: %s is this listener's own address (a loop)", l->upstream.text);
    if (l->n_identity == 0) {
        l->identity[0] = SL_ID_CLIENT_IP;
        l->n_identity = 1;
    }
    int id_line = sl_cf_key_line(sec, "identity");
    for (int i = 0; i < l->n_identity; i++) {
        enum sl_id_source s = l->identity[i];
        if ((s == SL_ID_RESP_USER || s == SL_ID_CLIENT_NAME || s == SL_ID_KEY_PREFIX) &&
            l->protocol != SL_PROTO_RESP)
            sl_cf_err(ld, id_line, "identity: %s needs protocol = resp (this listener is %s)",
                      sl_conf_id_names[s], sl_conf_proto_names[l->protocol]);
        if (s == SL_ID_TLS_SUBJECT && (l->tls_cert == NULL || l->tls_verify_client == 0))
            sl_cf_err(ld, id_line, "identity: tls_subject needs tls_cert and tls_verify_client = "
                                   "optional or on (it is the client certificate's name)");
        if (s == SL_ID_HEADER && l->protocol != SL_PROTO_HTTP)
            sl_cf_err(ld, id_line,
                      "identity: header:%s needs protocol = http (this listener is %s)",
                      l->identity_header[i], sl_conf_proto_names[l->protocol]);
    }
    for (size_t k = 0; k < N_OF(resp_only_keys) && l->protocol != SL_PROTO_RESP; k++) {
        int line = sl_cf_key_line(sec, resp_only_keys[k]);
        if (line != 0)
            sl_cf_err(ld, line,
                      "%s: only for resp listeners (this listener is %s)", resp_only_keys[k],
                      sl_conf_proto_names[l->protocol]);
    }
    for (size_t k = 0; k < N_OF(http_only_keys) && l->protocol != SL_PROTO_HTTP; k++) {
        int line = sl_cf_key_line(sec, http_only_keys[k]);
        if (line != 0)
            sl_cf_err(ld, line,
                      "%s: only for http listeners (this listener is %s)", http_only_keys[k],
                      sl_conf_proto_names[l->protocol]);
    }
    /* The PROXY header names anyone: taken only from peers named trusted,
     * so a listener that reads it must say which. */
    int tp_line = sl_cf_key_line(sec, "trusted_proxies");
    if (l->proxy_protocol != 0 && l->n_trusted_proxies == 0)
        sl_cf_err(ld, sl_cf_key_line(sec, "proxy_protocol"),
                  "proxy_protocol: needs trusted_proxies (the load balancers' addresses)");
    if (tp_line != 0 && l->proxy_protocol == 0 && l->protocol != SL_PROTO_HTTP)
        sl_cf_err(ld, tp_line,
                  "trusted_proxies: only for http listeners or with proxy_protocol (this listener "
                  "is %s)", sl_conf_proto_names[l->protocol]);
    /* A shared or reused upstream connection carries one header for many
     * clients: the address would be someone else's. */
    int upp_line = sl_cf_key_line(sec, "upstream_proxy_protocol");
    if (l->upstream_proxy_protocol != 0 && (l->upstream_pool > 0 || l->upstream_keepalive > 0))
        sl_cf_err(ld, upp_line, "upstream_proxy_protocol: not with %s (a connection serves many "
                  "clients)", l->upstream_pool > 0 ? "upstream_pool" : "upstream_keepalive");
    check_adaptive(ld, sec, l);
    if (!has_listen)
        return;
    if (ld->conf->has_admin && addr_clash(&l->listen, &ld->conf->admin))
        sl_cf_err(ld, listen_line, "listen: %s clashes with the admin address %s", l->listen.text,
                  ld->conf->admin.text);
    /* Against every earlier listener, so the later one carries the error. */
    for (size_t i = 0; i < ld->n_secs && ld->secs[i] != sec; i++) {
        struct section *o = ld->secs[i];
        struct sl_listener_conf *ol = o->obj;
        if (o->kind != SEC_LISTENER || ol->listen.text[0] == '\0')
            continue;
        if (addr_clash(&l->listen, &ol->listen))
            sl_cf_err(ld, listen_line, "listen: %s clashes with [listener %s] (line %d)",
                      l->listen.text, ol->name, sl_cf_key_line(o, "listen"));
    }
}

/* A request that costs more than a limit can ever hold is refused forever
 * (docs/algorithms.md: "never"), which is a mistake in the file, not a
 * limit: every cost must fit. The buckets (token_bucket, gcra, and delay,
 * shaped as gcra) hold <burst>; the windows ignore burst and hold the
 * rate's amount. */
static void check_costs(struct loader *ld, const struct sl_limit_conf *m, int cost_line,
                        int per_command)
{
    int bucket = m->algorithm == SL_ALGO_TOKEN_BUCKET || m->algorithm == SL_ALGO_GCRA;
    uint64_t cap = bucket ? m->burst : m->rate.amount;
    char what[96];
    if (bucket)
        snprintf(what, sizeof(what), "the burst (%llu)", (unsigned long long)cap);
    else
        snprintf(what, sizeof(what), "the %llu a window of %s holds (the rate's amount)",
                 (unsigned long long)cap, sl_conf_algo_names[m->algorithm]);
    const char *raise = bucket ? "burst" : "rate";
    int first = -1, more = 0;
    for (int i = 0; per_command && i < m->n_costs; i++) {
        if (m->costs[i].cost <= cap)
            continue;
        if (first < 0)
            first = i;
        else
            more++;
    }
    if (first >= 0) /* one line per limit, however many entries are too big */
        sl_cf_err(ld, cost_line, "cost: %s=%llu is more than %s, so %s could never pass%s; "
                  "raise %s or lower the cost", m->costs[first].cmd,
                  (unsigned long long)m->costs[first].cost, what, m->costs[first].cmd,
                  more ? " (nor could the other commands whose cost is above it)" : "", raise);
    if (m->default_cost > cap)
        sl_cf_err(ld, cost_line, "cost: %llu is more than %s, so no request could pass; "
                  "raise %s or lower the cost", (unsigned long long)m->default_cost, what, raise);
}

/* Whether limit <m> applies to listener <l>. */
static int limit_on(const struct sl_limit_conf *m, const struct sl_listener_conf *l)
{
    return m->lc != NULL ? m->lc == l : m->listener != NULL && strcmp(m->listener, "*") == 0;
}

/* Whether listener <l> has identity source <src> (header:<header>). */
static int has_source(const struct sl_listener_conf *l, int src, const char *header)
{
    for (int i = 0; i < l->n_identity; i++)
        if ((int)l->identity[i] == src &&
            (src != SL_ID_HEADER || header == NULL || strcasecmp(l->identity_header[i], header) == 0))
            return 1;
    return 0;
}

/* match_identity entries name their source, as identities do
 * (identity/identity-t.h): "user:carol", "name:carol", "prefix:t",
 * "ip:10.0.0.1", "header:NAME:value", a hashed form "user#<16 hex>", or
 * "all" (identity = none). A bare value ("carol", "::1") is a value of the
 * first identity source of the limit's listeners, which must agree; it is
 * rewritten here to its prefixed form, so -T prints what is matched. An
 * entry no listener of the limit can produce is an error: it would never
 * match. */
/* Entry <i> of <m>'s match_identity becomes <buf> (its resolved form), or
 * an error at <line> when it is too long for -T's line to load again.
 * Returns -1 when out of memory (reported), else 0. */
static int set_match(struct loader *ld, struct sl_limit_conf *m, int i, const char *buf,
                     int line)
{
    if (strlen(buf) > MAX_IDENTITY + 8) {
        sl_cf_err(ld, line, "match_identity: '%s' is longer than %d bytes", buf,
                  MAX_IDENTITY + 8);
        return 0;
    }
    char *d = sl_cf_strdup(ld, buf);
    if (d == NULL)
        return -1;
    free(m->match_identity[i]);
    m->match_identity[i] = d;
    return 0;
}

static void resolve_matches(struct loader *ld, struct section *sec)
{
    static const char *const tags[] = SL_ID_TAGS;
    struct sl_limit_conf *m = sec->obj;
    int line = sl_cf_key_line(sec, "match_identity");
    const struct sl_listener_conf *first = NULL; /* whose first source a bare value means */
    int agree = 1;

    if (m->n_match_identity == 0 || (m->lc == NULL && (m->listener == NULL ||
                                                        strcmp(m->listener, "*") != 0)))
        return; /* no entries, or a bad listener (reported) */
    for (const struct sl_listener_conf *l = ld->conf->listeners; l != NULL; l = l->next) {
        if (!limit_on(m, l))
            continue;
        if (first == NULL)
            first = l;
        else if (l->identity[0] != first->identity[0] ||
                 (l->identity[0] == SL_ID_HEADER &&
                  strcasecmp(l->identity_header[0], first->identity_header[0]) != 0))
            agree = 0;
    }
    if (first == NULL)
        return;
    for (int i = 0; i < m->n_match_identity; i++) {
        const char *w = m->match_identity[i];
        int src = -1, hashed = 0;
        size_t tn = 0;
        for (int t = 0; t < (int)(sizeof(tags) / sizeof(tags[0])) && src < 0; t++) {
            tn = strlen(tags[t]);
            if (t == SL_ID_NONE ? strcmp(w, tags[t]) == 0
                                : strncmp(w, tags[t], tn) == 0 && (w[tn] == ':' || w[tn] == '#')) {
                src = t;
                hashed = w[tn] == '#';
            }
        }
        if (src < 0) {
            /* A bare value: the first source's. */
            enum sl_id_source f = first->identity[0];
            char buf[MAX_IDENTITY + MAX_HEADER + 16];
            if (!agree) {
                sl_cf_err(ld, line,
                          "match_identity: '%s' names no source, and the listeners of this "
                          "limit differ in their first identity source; write user:%s, "
                          "name:%s, prefix:%s or ip:%s", w, w, w, w, w);
                continue;
            }
            if (f == SL_ID_NONE) {
                sl_cf_err(ld, line, "match_identity: '%s' names no source, and [listener %s] has "
                                    "identity = none (its one identity is 'all')", w, first->name);
                continue;
            }
            if (f == SL_ID_HEADER) {
                int n = snprintf(buf, sizeof(buf), "header:%s:%s", first->identity_header[0], w);
                for (int k = 7; k < n && buf[k] != ':'; k++)
                    buf[k] = (char)tolower((unsigned char)buf[k]);
            } else {
                snprintf(buf, sizeof(buf), "%s:%s", tags[f], w);
            }
            if (set_match(ld, m, i, buf, line) < 0)
                return;
            continue;
        }
        if (hashed) {
            const char *h = w + tn + 1;
            size_t hn = strspn(h, "0123456789abcdef");
            if (hn != 16 || h[hn] != '\0') {
                sl_cf_err(ld, line, "match_identity: '%s' is not a hashed identity (%s# and 16 "
                                    "lowercase hex digits, as /stats shows it)", w, tags[src]);
                continue;
            }
        } else if (src != SL_ID_NONE && w[tn + 1] == '\0') {
            sl_cf_err(ld, line, "match_identity: '%s' has no value after '%s:'", w, tags[src]);
            continue;
        }
        if (src == SL_ID_HEADER && !hashed) {
            /* header:NAME:VALUE, or header:VALUE when the limit's listeners
             * have one header source (rewritten to the first form). */
            const char *hdr = w + tn + 1;
            const char *colon = strchr(hdr, ':');
            char name[MAX_HEADER + 1] = "";
            int found = 0;
            if (colon != NULL && colon != hdr && colon - hdr <= MAX_HEADER) {
                snprintf(name, sizeof(name), "%.*s", (int)(colon - hdr), hdr);
                for (const struct sl_listener_conf *l = ld->conf->listeners; l; l = l->next)
                    found |= limit_on(m, l) && has_source(l, SL_ID_HEADER, name);
            }
            if (found) {
                if (colon[1] == '\0')
                    sl_cf_err(ld, line, "match_identity: '%s' has no value after '%s:'", w, name);
                continue;
            }
            const char *only = NULL;
            int several = 0;
            for (const struct sl_listener_conf *l = ld->conf->listeners; l; l = l->next) {
                for (int k = 0; limit_on(m, l) && k < l->n_identity; k++) {
                    if (l->identity[k] != SL_ID_HEADER)
                        continue;
                    if (only == NULL)
                        only = l->identity_header[k];
                    else if (strcasecmp(only, l->identity_header[k]) != 0)
                        several = 1;
                }
            }
            if (only == NULL) {
                sl_cf_err(ld, line,
                          "match_identity: '%s' can never match: no listener of this limit "
                          "has identity source header:%s", w, name[0] ? name : "NAME");
                continue;
            }
            if (several) {
                sl_cf_err(ld, line,
                          "match_identity: '%s': the listeners of this limit have more than "
                          "one header source; write header:NAME:VALUE", w);
                continue;
            }
            char buf[MAX_IDENTITY + MAX_HEADER + 16];
            int n = snprintf(buf, sizeof(buf), "header:%s:%s", only, hdr);
            for (int k = 7; k < n && buf[k] != ':'; k++)
                buf[k] = (char)tolower((unsigned char)buf[k]);
            if (set_match(ld, m, i, buf, line) < 0)
                return;
            continue;
        }
        int found = 0;
        for (const struct sl_listener_conf *l = ld->conf->listeners; l; l = l->next)
            found |= limit_on(m, l) && has_source(l, src, NULL);
        /* client_ip is every listener's last resort (see sl_identity_of). */
        if (!found && src != SL_ID_CLIENT_IP)
            sl_cf_err(ld, line,
                      "match_identity: '%s' can never match: no listener of this limit has "
                      "identity source %s", w, sl_conf_id_names[src]);
    }
}

/* The names of `cost = NAME=N` are commands (upper-cased) on resp
 * listeners and methods (kept as written: case-sensitive) on http ones;
 * with `listener = *` the listeners must agree on which. */
static void cost_names(struct loader *ld, struct sl_limit_conf *m, int cost_line)
{
    const struct sl_listener_conf *resp = NULL, *http = NULL;
    if (m->lc != NULL) {
        resp = m->lc->protocol == SL_PROTO_HTTP ? NULL : m->lc;
        http = m->lc->protocol == SL_PROTO_HTTP ? m->lc : NULL;
    } else if (m->listener != NULL && strcmp(m->listener, "*") == 0) {
        for (const struct sl_listener_conf *l = ld->conf->listeners; l; l = l->next) {
            if (l->protocol == SL_PROTO_RESP && resp == NULL)
                resp = l;
            if (l->protocol == SL_PROTO_HTTP && http == NULL)
                http = l;
        }
    }
    if (resp != NULL && http != NULL) {
        sl_cf_err(ld, cost_line, "cost: with listener = *, per-name costs need listeners of one "
                                 "protocol: names are commands on [listener %s] (resp) and methods "
                                 "on [listener %s] (http)", resp->name, http->name);
        return;
    }
    for (int i = 0; i < m->n_costs; i++) {
        char *name = m->costs[i].cmd, why[160];
        if (http == NULL) {
            for (char *p = name; *p; p++)
                *p = (char)toupper((unsigned char)*p);
        } else if (sl_conf_method_problem(name, why, sizeof(why)) != NULL) {
            sl_cf_err(ld, cost_line, "cost: %s", why);
        }
    }
}

static void check_limit(struct loader *ld, struct section *sec)
{
    struct sl_limit_conf *m = sec->obj;
    char t[128];
    sl_cf_title(sec, t, sizeof(t));
    int listener_line = sl_cf_key_line(sec, "listener");
    if (listener_line == 0)
        sl_cf_err(ld, sec->line, "%s: missing 'listener'", t);
    else if (m->listener != NULL && strcmp(m->listener, "*") != 0 &&
             (m->lc = sl_conf_listener(ld->conf, m->listener)) == NULL)
        sl_cf_err(ld, listener_line, "listener: no [listener %s]", m->listener);

    int rate_line = sl_cf_key_line(sec, "rate"), max_line = sl_cf_key_line(sec, "max");
    int burst_line = sl_cf_key_line(sec, "burst"), cost_line = sl_cf_key_line(sec, "cost");
    if (m->metric == SL_METRIC_CONNECTIONS) {
        if (rate_line)
            sl_cf_err(ld, rate_line, "rate: not for metric = connections (use max = N)");
        if (burst_line)
            sl_cf_err(ld, burst_line, "burst: not for metric = connections");
        if (!max_line)
            sl_cf_err(ld, sec->line, "%s: metric = connections needs 'max'", t);
        if (m->scope == SL_SCOPE_CONNECTION)
            sl_cf_err(ld, sl_cf_key_line(sec, "scope"), "scope: a connection limit counts "
                      "connections per identity or globally, not per connection");
    } else {
        if (max_line)
            sl_cf_err(ld, max_line, "max: only for metric = connections (use rate)");
        if (!rate_line)
            sl_cf_err(ld, sec->line, "%s: missing 'rate'", t);
        else if (sec->rate_sized && m->metric == SL_METRIC_REQUESTS)
            sl_cf_err(ld, rate_line, "rate: size units are for metric = bytes_in or bytes_out");
        if (burst_line && sec->burst_sized && m->metric == SL_METRIC_REQUESTS)
            sl_cf_err(ld, burst_line, "burst: size units are for metric = bytes_in or bytes_out; "
                                      "a requests limit's burst is a count");
        if (m->burst == 0 && m->rate.amount != 0)
            m->burst = sl_rate_one_second(&m->rate);
    }
    if (cost_line && m->metric != SL_METRIC_REQUESTS)
        sl_cf_err(ld, cost_line, "cost: only for metric = requests");
    int overrides_line = sl_cf_key_line(sec, "overrides");
    if (m->overrides && m->metric == SL_METRIC_CONNECTIONS)
        sl_cf_err(ld, overrides_line, "overrides: a rate and burst per identity; not for "
                                      "metric = connections");
    else if (m->overrides && m->scope == SL_SCOPE_CONNECTION)
        sl_cf_err(ld, overrides_line, "overrides: per identity; not for scope = connection");
    if (!m->overrides && sl_cf_key_line(sec, "overrides_ttl"))
        sl_cf_err(ld, sl_cf_key_line(sec, "overrides_ttl"), "overrides_ttl: needs overrides = store");
    if (m->lc != NULL && m->lc->protocol == SL_PROTO_TCP && m->metric == SL_METRIC_REQUESTS)
        sl_cf_err(ld, sec->line, "%s: a tcp listener has no requests to count; use metric = "
                                 "bytes_in, bytes_out or connections", t);

    int commands_line = sl_cf_key_line(sec, "commands");
    if (sec->commands_star && m->n_commands > 0)
        sl_cf_err(ld, commands_line,
                  "commands: '*' means every command; do not list names with it");
    /* Command names exist only in RESP, methods and paths only in HTTP;
     * with `listener = *` every listener must speak the protocol. */
    int methods_line = sl_cf_key_line(sec, "methods");
    if (sec->methods_star && m->n_methods > 0)
        sl_cf_err(ld, methods_line, "methods: '*' means every method; do not list names with it");
    int per_proto[3] = { m->n_commands > 0 ? commands_line : 0, m->n_methods > 0 ? methods_line : 0,
                         m->n_paths > 0 ? sl_cf_key_line(sec, "paths") : 0 };
    const char *keys[3] = { "commands", "methods", "paths" };
    for (int k = 0; k < 3; k++) {
        enum sl_proto want = k == 0 ? SL_PROTO_RESP : SL_PROTO_HTTP;
        if (!per_proto[k])
            continue;
        if (m->lc != NULL && m->lc->protocol != want) {
            sl_cf_err(ld, per_proto[k], "%s: only for %s listeners ([listener %s] is %s)", keys[k],
                      sl_conf_proto_names[want], m->lc->name, sl_conf_proto_names[m->lc->protocol]);
        } else if (m->lc == NULL && m->listener != NULL && strcmp(m->listener, "*") == 0) {
            for (struct sl_listener_conf *l = ld->conf->listeners; l; l = l->next) {
                if (l->protocol != want) {
                    sl_cf_err(ld, per_proto[k], "%s: only for %s listeners (listener = * includes "
                "[listener %s], which is %s)", keys[k], sl_conf_proto_names[want], l->name,
                sl_conf_proto_names[l->protocol]);
                    break;
                }
            }
        }
    }
    /* Per-name costs: commands on resp, methods on http. */
    if (m->n_costs > 0 && cost_line)
        cost_names(ld, m, cost_line);

    if (cost_line && m->metric == SL_METRIC_REQUESTS && m->rate.amount != 0)
        check_costs(ld, m, cost_line, !(m->lc != NULL && m->lc->protocol == SL_PROTO_TCP));

    int replaces_line = sl_cf_key_line(sec, "replaces");
    if (m->replaces != NULL) {
        if (strcmp(m->replaces, m->name) == 0)
            sl_cf_err(ld, replaces_line, "replaces: a limit cannot replace itself");
        else {
            struct section *o = sl_cf_find_named(ld, SEC_LIMIT, m->replaces);
            if (o == NULL)
                sl_cf_err(ld, replaces_line, "replaces: no [limit %s]", m->replaces);
            else
                m->replaces_lc = o->obj;
        }
    }
    resolve_matches(ld, sec);
}

static void check_cycles(struct loader *ld)
{
    struct sl_conf *c = ld->conf;
    for (size_t i = 0; i < ld->n_secs; i++) {
        struct section *sec = ld->secs[i];
        if (sec->kind != SEC_LIMIT)
            continue;
        struct sl_limit_conf *m = sec->obj, *p = m->replaces_lc;
        for (int steps = 0; p != NULL && steps < c->n_limits; steps++, p = p->replaces_lc) {
            if (p == m) {
                sl_cf_err(ld, sl_cf_key_line(sec, "replaces"),
                          "replaces: [limit %s] is part of a cycle", m->name);
                break;
            }
        }
    }
}

/* Resolves <a> when its host is a name; a name that does not resolve is an
 * error at <line>, and <a> is left out of the checks below (text cleared,
 * as for a bad value). With <soft>, it is no error: the EAI_* code is
 * returned, <a> keeps its text and an empty ss. */
static int resolve_addr(struct loader *ld, struct sl_addr *a, const char *key, int line, int soft)
{
    if (!a->named || sl_conf_no_resolve)
        return 0;
    char host[sizeof(a->text)];
    snprintf(host, sizeof(host), "%s", a->text);
    char *colon = strrchr(host, ':');
    if (colon != NULL)
        *colon = '\0';
    int rc = sl_conf_resolve(host, a->port, &a->ss);
    if (rc != 0 && soft) {
        memset(&a->ss, 0, sizeof(a->ss));
        return rc;
    }
    if (rc != 0) {
        sl_cf_err(ld, line, "%s: cannot resolve '%s': %s", key, host, gai_strerror(rc));
        a->text[0] = '\0';
    }
    return 0;
}

/* Names first: the checks of addresses below compare what they resolve to. */
static void resolve_names(struct loader *ld)
{
    struct sl_conf *c = ld->conf;
    if (c->has_admin && ld->sluice != NULL)
        resolve_addr(ld, &c->admin, "admin", sl_cf_key_line(ld->sluice, "admin"), 0);
    if (c->store.kind != SL_STORE_LOCAL && ld->store != NULL) {
        int line = sl_cf_key_line(ld->store, "url");
        /* A redis:// store is looked up again before each connect
         * (store/store.c), a cluster seed or a sentinel when it is to be
         * tried (store/cluster.c, store/sentinel.c): a name that does not
         * resolve yet is a warning, on_failure applies while the store
         * cannot be reached. */
        for (int i = 0; i < c->store.n_seeds; i++) {
            int rc = resolve_addr(ld, &c->store.seeds[i], "url", line, 1);
            if (rc != 0 && c->store.unresolved_line == 0) {
                c->store.unresolved_line = line > 0 ? line : 1;
                c->store.unresolved_rc = rc;
            }
        }
        if (c->store.n_seeds > 0)
            c->store.addr = c->store.seeds[0];
    }
    for (size_t i = 0; i < ld->n_secs; i++) {
        struct section *sec = ld->secs[i];
        if (sec->kind != SEC_LISTENER)
            continue;
        struct sl_listener_conf *l = sec->obj;
        resolve_addr(ld, &l->listen, "listen", sl_cf_key_line(sec, "listen"), 0);
        /* An upstream is looked up again at run time (net/listener.c): a
         * name that does not resolve yet (Compose start order, a pod not
         * scheduled yet) is a warning; its clients get the upstream-down
         * answer until it does. */
        int line = sl_cf_key_line(sec, "upstream");
        int rc = resolve_addr(ld, &l->upstream, "upstream", line, 1);
        if (rc != 0) {
            l->upstream_unresolved_line = line > 0 ? line : 1;
            l->upstream_unresolved_rc = rc;
        }
    }
}

void sl_cf_finish(struct loader *ld)
{
    resolve_names(ld);
    for (size_t i = 0; i < ld->n_secs; i++)
        if (ld->secs[i]->kind == SEC_LISTENER)
            check_listener(ld, ld->secs[i]);
    for (size_t i = 0; i < ld->n_secs; i++)
        if (ld->secs[i]->kind == SEC_LIMIT)
            check_limit(ld, ld->secs[i]);
    check_cycles(ld);
    sl_cf_check_tls(ld);
    sl_cf_check_usage(ld);
    /* In-process limits would be counted by each worker alone. */
    struct sl_conf *c = ld->conf;
    for (size_t i = 0; i < ld->n_secs; i++) {
        const struct sl_limit_conf *m = ld->secs[i]->obj;
        if (ld->secs[i]->kind == SEC_LIMIT && m->overrides && c->store.kind == SL_STORE_LOCAL)
            sl_cf_err(ld, sl_cf_key_line(ld->secs[i], "overrides"),
                      "overrides: = store reads them from the quota store; [store] url is local");
    }
    if (c->workers > 1 && c->store.kind == SL_STORE_LOCAL && c->n_limits > 0 && ld->sluice != NULL)
        sl_cf_err(ld, sl_cf_key_line(ld->sluice, "workers"),
                  "workers: %d processes need a shared store for their limits (url = redis://...); "
                  "with url = local each would count alone", c->workers);
}

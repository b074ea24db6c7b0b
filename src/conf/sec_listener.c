/* sluice — the [listener NAME] section: its keyword table, its defaults,
 * and the setters of its keys with rules of their own (identity,
 * key_prefix_separator, trusted_proxies). What a listener's keys mean
 * together, and against other listeners, is checked in check.c. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/conf-i.h"
#include "conf/http.h"
#include "conf/names.h"
#include "conf/units.h"

static kw_setter set_identity, set_separator, set_trusted_proxies, set_upgrades, set_pool;
static kw_setter set_access_log, set_queue_target;

static const struct keyword listener_kw[] = {
    ADDR("listen", struct sl_listener_conf, listen),
    ENUM("protocol", struct sl_listener_conf, protocol, sl_conf_proto_names),
    ADDR("upstream", struct sl_listener_conf, upstream),
    FUNC("identity", set_identity, KW_MULTI),
    FUNC("key_prefix_separator", set_separator, 0),
    NUM("max_connections", KW_U64, struct sl_listener_conf, max_connections, 1, UINT32_MAX),
    NUM("idle_timeout", KW_DURATION, struct sl_listener_conf, idle_timeout_us, 0, 365 * DAY_US),
    NUM("connect_timeout", KW_DURATION, struct sl_listener_conf, connect_timeout_us, 1000, HOUR_US),
    NUM("header_timeout", KW_DURATION, struct sl_listener_conf, header_timeout_us, 0, HOUR_US),
    NUM("max_replies_owed", KW_U64, struct sl_listener_conf, max_replies_owed, 2, 1u << 20),
    NUM("max_request", KW_SIZE, struct sl_listener_conf, max_request, 1, 1ULL << 40),
    NUM("resolve_ttl", KW_DURATION, struct sl_listener_conf, resolve_ttl_us, 0, DAY_US),
    ENUM("proxy_protocol", struct sl_listener_conf, proxy_protocol, sl_conf_pp_names),
    ENUM("upstream_proxy_protocol", struct sl_listener_conf, upstream_proxy_protocol,
         sl_conf_pp_names),
    /* adaptive concurrency: resp and http (check.c) */
    ENUM("adaptive_concurrency", struct sl_listener_conf, adaptive, sl_conf_adaptive_names),
    NUM("adaptive_min_limit", KW_U64, struct sl_listener_conf, adaptive_min_limit, 1, 100000),
    NUM("adaptive_max_limit", KW_U64, struct sl_listener_conf, adaptive_max_limit, 1, 100000),
    NUM("adaptive_initial_limit", KW_U64, struct sl_listener_conf, adaptive_initial_limit, 1,
        100000),
    NUM("adaptive_queue", KW_U64, struct sl_listener_conf, adaptive_queue, 0, 65536),
    FUNC("adaptive_queue_target", set_queue_target, 0),
    NUM("adaptive_queue_interval", KW_DURATION, struct sl_listener_conf,
        adaptive_queue_interval_us, 10000, 60 * S_US),
    NUM("adaptive_probe_interval", KW_DURATION, struct sl_listener_conf,
        adaptive_probe_interval_us, 100000, HOUR_US),
    ENUM("adaptive_share", struct sl_listener_conf, adaptive_share, sl_conf_adaptive_share_names),
    /* protocol = resp only (check.c: resp_only_keys) */
    NUM("setup_commands", KW_U64, struct sl_listener_conf, setup_commands, 0, 64),
    FUNC("upstream_pool", set_pool, 0),
    NUM("upstream_pool_pinned", KW_U64, struct sl_listener_conf, pool_pinned, 0, 1u << 20),
    NUM("upstream_pool_pin_wait", KW_DURATION, struct sl_listener_conf, pool_pin_wait_us, 0,
        HOUR_US),
    NUM("upstream_pool_client_buffer", KW_SIZE, struct sl_listener_conf, pool_client_buffer,
        64 * 1024, 1ULL << 40),
    NUM("upstream_pool_idle_timeout", KW_DURATION, struct sl_listener_conf, pool_idle_timeout_us,
        0, DAY_US),
    NUM("upstream_pool_batch_wait", KW_DURATION, struct sl_listener_conf, pool_batch_wait_us,
        0, 1000),
    /* any protocol with proxy_protocol, else http only (check.c) */
    FUNC("trusted_proxies", set_trusted_proxies, KW_MULTI),
    /* protocol = http only (check.c: http_only_keys, check_listener) */
    NUM("upstream_timeout", KW_DURATION, struct sl_listener_conf, upstream_timeout_us, 0, HOUR_US),
    ENUM("rate_limit_headers", struct sl_listener_conf, rate_limit_headers, sl_conf_rlh_names),
    ENUM("forwarded_headers", struct sl_listener_conf, forwarded_headers, sl_conf_onoff_names),
    NUM("max_request_line", KW_SIZE, struct sl_listener_conf, max_request_line, 64, 1u << 20),
    NUM("max_header_line", KW_SIZE, struct sl_listener_conf, max_header_line, 64, 1u << 20),
    NUM("max_headers", KW_U64, struct sl_listener_conf, max_headers, 1, 10000),
    NUM("max_header_size", KW_SIZE, struct sl_listener_conf, max_header_size, 256, 16u << 20),
    FUNC("upgrades", set_upgrades, KW_MULTI),
    NUM("upstream_keepalive", KW_U64, struct sl_listener_conf, upstream_keepalive, 0, 1u << 16),
    NUM("upstream_keepalive_timeout", KW_DURATION, struct sl_listener_conf,
        upstream_keepalive_timeout_us, 1000, DAY_US),
    FUNC("access_log", set_access_log, 0),
    ENUM("access_log_format", struct sl_listener_conf, access_log_format, sl_conf_alog_fmt_names),
    /* TLS (checked together in conf/tls.c) */
    TLSPATH("tls_cert", struct sl_listener_conf, tls_cert),
    TLSPATH("tls_key", struct sl_listener_conf, tls_key),
    TLSPATH("tls_ca", struct sl_listener_conf, tls_ca),
    ENUM("tls_verify_client", struct sl_listener_conf, tls_verify_client, sl_conf_tls_verify_names),
    TLSWORDS("tls_protocols", struct sl_listener_conf, tls_protocols, 64),
    TLSWORDS("tls_ciphers", struct sl_listener_conf, tls_ciphers, 1000),
    ENUM("upstream_tls", struct sl_listener_conf, upstream_tls, sl_conf_onoff_names),
    TLSPATH("upstream_tls_ca", struct sl_listener_conf, upstream_tls_ca),
    STR("upstream_tls_sni", struct sl_listener_conf, upstream_tls_sni, 253),
    ENUM("upstream_tls_verify", struct sl_listener_conf, upstream_tls_verify, sl_conf_onoff_names),
    TLSPATH("upstream_tls_cert", struct sl_listener_conf, upstream_tls_cert),
    TLSPATH("upstream_tls_key", struct sl_listener_conf, upstream_tls_key),
};

_Static_assert(N_OF(listener_kw) <= MAX_KEYWORDS, "section.key_line is too small");
const struct kw_table sl_cf_listener_keys = { listener_kw, N_OF(listener_kw) };

struct sl_listener_conf *sl_cf_new_listener(struct loader *ld, const char *name, int line)
{
    struct sl_listener_conf *l = calloc(1, sizeof(*l));
    if (l == NULL || (l->name = strdup(name)) == NULL) {
        free(l);
        ld->oom = 1;
        return NULL;
    }
    l->line = line;
    l->protocol = SL_PROTO_RESP;
    strcpy(l->key_prefix_separator, ":");
    l->max_connections = 10000;
    l->idle_timeout_us = 300 * S_US;
    l->connect_timeout_us = 2 * S_US;
    l->header_timeout_us = 10 * S_US;
    l->max_replies_owed = 8192;
    l->max_request = 512ULL * 1000 * 1000;
    l->resolve_ttl_us = 30 * S_US;
    l->setup_commands = 16;
    l->adaptive_min_limit = 1;
    l->adaptive_max_limit = 1000;
    l->adaptive_initial_limit = 20;
    l->adaptive_queue = 1024;
    l->adaptive_queue_interval_us = 100000;
    l->adaptive_probe_interval_us = 5 * S_US;
    l->pool_pinned = 1000;
    l->pool_pin_wait_us = 1 * S_US;
    l->pool_client_buffer = 64ULL * 1024 * 1024;
    l->pool_idle_timeout_us = 60 * S_US;
    l->pool_batch_wait_us = 50;
    l->upstream_keepalive_timeout_us = 60 * S_US;
    l->upstream_timeout_us = 60 * S_US;
    l->rate_limit_headers = SL_RLH_DRAFT;
    l->forwarded_headers = 1;
    l->max_request_line = 8192;
    l->max_header_line = 8192;
    l->max_headers = 100;
    l->max_header_size = 65536;
    l->upgrades.n = 1;
    strcpy(l->upgrades.name[0], "websocket");
    l->upstream_tls_verify = 1;
    *ld->ltail = l;
    ld->ltail = &l->next;
    ld->conf->n_listeners++;
    return l;
}

/* An HTTP header name: an RFC 9110 token. */
static int is_token(const char *s)
{
    if (*s == '\0')
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && strchr("!#$%&'*+-.^_`|~", *s) == NULL)
            return 0;
    return 1;
}

static int identity_word(struct loader *ld, struct section *sec, const struct keyword *kw,
                         const char *w)
{
    struct sl_listener_conf *l = sec->obj;
    int src = -1;
    const char *header = NULL;
    (void)kw;
    if (strncmp(w, "header:", 7) == 0) {
        header = w + 7;
        if (!is_token(header) || strlen(header) > MAX_HEADER) {
            sl_cf_err(ld, ld->line, "identity: expected header:NAME with an HTTP header name, "
                                    "got '%s'", w);
            return -1;
        }
        src = SL_ID_HEADER;
    } else {
        for (int i = 0; sl_conf_id_names[i]; i++)
            if (i != SL_ID_HEADER && strcmp(sl_conf_id_names[i], w) == 0)
                src = i;
    }
    if (src < 0) {
        sl_cf_err(ld, ld->line, "identity: expected resp_user, client_name, key_prefix, client_ip, "
                                "header:NAME, tls_subject or none, got '%s'", w);
        return -1;
    }
    for (int i = 0; i < l->n_identity; i++) {
        if (l->identity[i] == SL_ID_NONE) {
            sl_cf_err(ld, ld->line, "identity: nothing can follow 'none', got '%s'", w);
            return -1;
        }
        if ((int)l->identity[i] == src &&
            (src != SL_ID_HEADER || strcasecmp(l->identity_header[i], header) == 0)) {
            sl_cf_err(ld, ld->line, "identity: '%s' is listed twice", w);
            return -1;
        }
    }
    if (l->n_identity == SL_CONF_MAX_IDENTITY) {
        sl_cf_err(ld, ld->line, "identity: more than %d sources", SL_CONF_MAX_IDENTITY);
        return -1;
    }
    char *h = NULL;
    if (header != NULL && (h = sl_cf_strdup(ld, header)) == NULL)
        return -1;
    l->identity[l->n_identity] = (enum sl_id_source)src;
    l->identity_header[l->n_identity] = h;
    l->n_identity++;
    return 0;
}

static void set_identity(struct loader *ld, struct section *sec, const struct keyword *kw,
                         const char *value)
{
    sl_cf_each_word(ld, sec, kw, value, identity_word);
}

static void set_separator(struct loader *ld, struct section *sec, const struct keyword *kw,
                          const char *value)
{
    struct sl_listener_conf *l = sec->obj;
    size_t n = strlen(value);
    if (n == 0 || n >= sizeof(l->key_prefix_separator) || !sl_cf_printable(value)) {
        sl_cf_bad(ld, kw, "1 to 7 characters without blanks", value);
        return;
    }
    memcpy(l->key_prefix_separator, value, n + 1);
}

/* adaptive_queue_target = auto | DURATION (1ms .. 10s): auto (0) is the
 * controller's baseline, at least 1 ms. */
static void set_queue_target(struct loader *ld, struct section *sec, const struct keyword *kw,
                             const char *value)
{
    struct sl_listener_conf *l = sec->obj;
    uint64_t v;
    if (strcmp(value, "auto") == 0) {
        l->adaptive_queue_target_us = 0;
        return;
    }
    if (sl_parse_duration(value, &v) != 0 || v < 1000 || v > 10 * S_US) {
        sl_cf_bad(ld, kw, "auto or a duration from 1ms to 10s", value);
        return;
    }
    l->adaptive_queue_target_us = v;
}

/* access_log = off | FILE: a relative FILE is taken from the directory of
 * the configuration file, as log_file. The file is opened when the
 * configuration is applied (start, reload), not by -t. */
static void set_access_log(struct loader *ld, struct section *sec, const struct keyword *kw,
                           const char *value)
{
    struct sl_listener_conf *l = sec->obj;
    (void)kw;
    free(l->access_log);
    l->access_log = NULL;
    if (value[0] == '\0' || strcmp(value, "off") == 0)
        return;
    char *path = sl_cf_abs_path(ld, value);
    if (path == NULL) {
        ld->oom = 1;
        return;
    }
    l->access_log = sl_cf_strdup(ld, path);
    free(path);
}

/* upstream_pool = off | N: N pipelined upstream connections per worker and
 * pool key (1-256); off (0) = one upstream connection per client. */
static void set_pool(struct loader *ld, struct section *sec, const struct keyword *kw,
                     const char *value)
{
    struct sl_listener_conf *l = sec->obj;
    if (strcmp(value, "off") == 0) {
        l->upstream_pool = 0;
        return;
    }
    char *end;
    unsigned long n = isdigit((unsigned char)value[0]) ? strtoul(value, &end, 10) : 0;
    if (n < 1 || n > SL_POOL_MAX || *end != '\0') {
        sl_cf_bad(ld, kw, "off or a number of connections, 1-256", value);
        return;
    }
    l->upstream_pool = (uint32_t)n;
}

/* trusted_proxies = 10.0.0.0/8 fd00::/8 192.0.2.7: kept parsed (conf/http.h). */
static int trusted_word(struct loader *ld, struct section *sec, const struct keyword *kw,
                        const char *w)
{
    struct sl_listener_conf *l = sec->obj;
    struct sl_cidr c;
    char meant[64];
    (void)kw;
    int rc = sl_conf_cidr_parse(w, &c);
    if (rc == -1) {
        sl_cf_err(ld, ld->line,
                  "trusted_proxies: expected an address or a range like 10.0.0.0/8 or "
                  "fd00::/8, got '%s'", w);
        return -1;
    }
    if (rc == -2) {
        sl_conf_cidr_fmt(&c, meant, sizeof(meant));
        sl_cf_err(ld, ld->line, "trusted_proxies: '%s' has bits set past its prefix length (the "
                                "range is %s)", w, meant);
        return -1;
    }
    for (int i = 0; i < l->n_trusted_proxies; i++)
        if (memcmp(&l->trusted_proxies[i], &c, sizeof(c)) == 0)
            return 0;
    if (l->n_trusted_proxies >= MAX_PROXIES) {
        sl_cf_err(ld, ld->line, "trusted_proxies: more than %d ranges", MAX_PROXIES);
        return -1;
    }
    struct sl_cidr *v = realloc(l->trusted_proxies,
                                (size_t)(l->n_trusted_proxies + 1) * sizeof(*v));
    if (v == NULL) {
        ld->oom = 1;
        return -1;
    }
    l->trusted_proxies = v;
    v[l->n_trusted_proxies++] = c;
    return 0;
}

static void set_trusted_proxies(struct loader *ld, struct section *sec, const struct keyword *kw,
                                const char *value)
{
    sl_cf_each_word(ld, sec, kw, value, trusted_word);
}

/* upgrades = websocket CONNECT: protocol names (RFC 9110 7.8) a request
 * may ask to switch to, and CONNECT (the method, as written: methods are
 * case-sensitive); "none" alone: nothing. */
static int upgrade_word(struct loader *ld, struct section *sec, const struct keyword *kw,
                        const char *w)
{
    struct sl_listener_conf *l = sec->obj;
    struct sl_http_upgrades *u = &l->upgrades;
    (void)kw;
    if (strcmp(w, "none") == 0) {
        if (u->n > 0 || u->connect || sec->upgrades_none) {
            sl_cf_err(ld, ld->line, "upgrades: 'none' stands alone");
            return -1;
        }
        sec->upgrades_none = 1;
        return 0;
    }
    if (sec->upgrades_none) {
        sl_cf_err(ld, ld->line, "upgrades: nothing can follow 'none', got '%s'", w);
        return -1;
    }
    if (strcmp(w, "CONNECT") == 0) {
        u->connect = 1;
        return 0;
    }
    if (strcasecmp(w, "connect") == 0) {
        sl_cf_err(ld, ld->line, "upgrades: '%s' is not CONNECT (methods are case-sensitive)", w);
        return -1;
    }
    if (!is_token(w) || strlen(w) > SL_HTTP_UPGRADE_NAME) {
        sl_cf_err(ld, ld->line, "upgrades: expected a protocol name (a token of 1 to %d "
                                "characters, no version) or CONNECT, got '%s'",
                  SL_HTTP_UPGRADE_NAME, w);
        return -1;
    }
    for (uint32_t i = 0; i < u->n; i++)
        if (strcasecmp(u->name[i], w) == 0)
            return 0;
    if (u->n == SL_HTTP_UPGRADES_MAX) {
        sl_cf_err(ld, ld->line, "upgrades: more than %d protocols", SL_HTTP_UPGRADES_MAX);
        return -1;
    }
    strcpy(u->name[u->n++], w);
    return 0;
}

static void set_upgrades(struct loader *ld, struct section *sec, const struct keyword *kw,
                         const char *value)
{
    struct sl_listener_conf *l = sec->obj;
    if (sl_cf_key_line(sec, "upgrades") == ld->line)
        memset(&l->upgrades, 0, sizeof(l->upgrades)); /* the key replaces the default */
    sl_cf_each_word(ld, sec, kw, value, upgrade_word);
}

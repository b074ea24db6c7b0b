/* sluice — what a loaded configuration allows but an operator should hear
 * about: said by -t on its error stream, and logged at start and reload. */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "conf/conf.h"
#include "core/log.h"

/* Warns when the secret file <pf> (key <key>, set at <line>) can be read
 * by others; returns 1 when it warned. */
static int warn_secret(const struct sl_conf *c, const char *key, const char *pf, int line,
                       FILE *errf)
{
    struct stat st;
    /* Read permission is what exposes the secret; ssh refuses a key for the
     * same bits, sluice only warns (a mounted secret is often 0644). */
    if (pf == NULL || stat(pf, &st) != 0 || (st.st_mode & (S_IRGRP | S_IROTH)) == 0)
        return 0;
    unsigned mode = (unsigned)(st.st_mode & 07777);
    if (errf != NULL) {
        fprintf(errf, "%s:%d: warning: %s '%s' is readable by %s (mode %04o): "
                      "chmod 600 it\n", c->file, line, key, pf,
                (st.st_mode & S_IROTH) ? "others" : "its group", mode);
    } else {
        char q[512], msg[64];
        sl_log_quote(pf, strlen(pf), q, sizeof(q));
        snprintf(msg, sizeof(msg), "%s is readable by others", key);
        sl_log_warn(msg, "file=%s mode=%04o readers=%s", q, mode,
                    (st.st_mode & S_IROTH) ? "others" : "group");
    }
    return 1;
}

/* The host of address text <text> ("host:port"): what a warning names. */
static void host_of(const char *text, char *host, size_t cap)
{
    snprintf(host, cap, "%s", text);
    char *colon = strrchr(host, ':');
    if (colon != NULL)
        *colon = '\0';
}

/* A name of the store's url (<a>: its host, a cluster seed, a sentinel)
 * did not resolve at load: not fatal (conf/resolve.h), but what the
 * operator reads first when every request gets on_failure. */
static int warn_name(const struct sl_conf *c, const struct sl_addr *a, FILE *errf)
{
    const struct sl_store_conf *s = &c->store;
    char host[sizeof(a->text)];
    host_of(a->text, host, sizeof(host));
    const char *why = gai_strerror(s->unresolved_rc);
    if (errf != NULL) {
        fprintf(errf, "%s:%d: warning: url: cannot resolve '%s' now: %s (sluice starts; "
                      "on_failure applies until the name resolves)\n",
                c->file, s->unresolved_line, host, why);
    } else {
        char q[512], e[128];
        sl_log_warn("quota store name does not resolve: on_failure applies until it does",
                    "url=%s err=%s", sl_log_quote(host, strlen(host), q, sizeof(q)),
                    sl_log_quote(why, strlen(why), e, sizeof(e)));
    }
    return 1;
}

/* 1 when <a> can be reached only from this host (127.0.0.0/8, ::1 or
 * ::ffff:127.0.0.0/104), or when that cannot be told: a name not looked up
 * (-t --no-resolve checks everything but names, so it says nothing of
 * where they lead). */
static int loopback(const struct sl_addr *a)
{
    if (a->ss.ss_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)&a->ss;
        return (ntohl(sin->sin_addr.s_addr) >> 24) == 127;
    }
    if (a->ss.ss_family == AF_INET6) {
        const struct in6_addr *in6 = &((const struct sockaddr_in6 *)&a->ss)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(in6) || (IN6_IS_ADDR_V4MAPPED(in6) && in6->s6_addr[12] == 127);
    }
    return 1;
}

/* The admin endpoint answers anyone who reaches it: /stats names every busy
 * identity. Beyond loopback it wants a token (or a network that is trusted). */
static int warn_admin_open(const struct sl_conf *c, FILE *errf)
{
    if (!c->has_admin || c->admin_token != NULL || loopback(&c->admin))
        return 0;
    if (errf != NULL) {
        fprintf(errf, "%s:%d: warning: admin: %s is reachable beyond loopback and "
                      "admin_token_file is not set: anyone who reaches it reads /metrics and "
                      "/stats\n", c->file, c->admin_line > 0 ? c->admin_line : 1, c->admin.text);
    } else {
        char q[200];
        sl_log_warn("admin listens beyond loopback without admin_token_file", "addr=%s",
                    sl_log_quote(c->admin.text, strlen(c->admin.text), q, sizeof(q)));
    }
    return 1;
}

static int warn_unresolved(const struct sl_conf *c, FILE *errf)
{
    const struct sl_store_conf *s = &c->store;
    if (s->unresolved_line == 0)
        return 0;
    int n = 0;
    for (int i = 0; i < s->n_seeds; i++) {
        const struct sl_addr *a = &s->seeds[i];
        if (a->named && a->ss.ss_family != AF_INET && a->ss.ss_family != AF_INET6)
            n += warn_name(c, a, errf);
    }
    return n;
}

/* An upstream name did not resolve at load: not fatal either (the listener
 * looks it up again), but every client is answered an error until it does. */
static int warn_upstream(const struct sl_conf *c, const struct sl_listener_conf *l, FILE *errf)
{
    if (l->upstream_unresolved_line == 0)
        return 0;
    char host[sizeof(l->upstream.text)];
    host_of(l->upstream.text, host, sizeof(host));
    const char *why = gai_strerror(l->upstream_unresolved_rc);
    if (errf != NULL) {
        fprintf(errf, "%s:%d: warning: upstream: cannot resolve '%s' now: %s (sluice starts; "
                      "clients of listener %s get the upstream-unavailable error until the name "
                      "resolves)\n",
                c->file, l->upstream_unresolved_line, host, why, l->name);
    } else {
        char q[512], e[128];
        sl_log_warn("upstream name does not resolve: clients get an error until it does",
                    "listener=%s upstream=%s err=%s", l->name,
                    sl_log_quote(host, strlen(host), q, sizeof(q)),
                    sl_log_quote(why, strlen(why), e, sizeof(e)));
    }
    return 1;
}

int sl_conf_warn(const struct sl_conf *c, FILE *errf)
{
    int n = warn_secret(c, "password_file", c->store.password_file,
                        c->store.password_file_line, errf);
    n += warn_secret(c, "sentinel_password_file", c->store.sentinel_password_file,
                     c->store.sentinel_password_file_line, errf);
    n += warn_unresolved(c, errf);
    n += warn_secret(c, "admin_token_file", c->admin_token_file, c->admin_token_file_line, errf);
    n += warn_admin_open(c, errf);
    for (const struct sl_listener_conf *l = c->listeners; l != NULL; l = l->next)
        n += warn_upstream(c, l, errf);
    return n;
}

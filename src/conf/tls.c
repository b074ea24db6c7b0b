/* sluice — the TLS keys of [store] and [listener]: their setters, and the
 * check that runs once the file is read: keys that mean nothing without
 * TLS on are errors, and every certificate, key and CA file is loaded once
 * (a context built and dropped), so `sluice -t` and a reload report a bad
 * file at its line and a reload keeps the old certificates. The sentinel
 * keys of [store] are checked here too: sentinel_tls follows tls. */
#include <stdlib.h>
#include <string.h>

#include "conf/conf-i.h"
#include "conf/names.h"
#include "core/tls.h"

void sl_cf_set_tls_path(struct loader *ld, struct section *sec, const struct keyword *kw,
                        const char *value)
{
    char **field = (char **)((char *)sec->obj + kw->off);
    free(*field);
    *field = NULL;
    if (value[0] == '\0')
        return;
    if (!sl_cf_printable(value) || strlen(value) > 4000) {
        sl_cf_bad(ld, kw, "a file name", value);
        return;
    }
    if ((*field = sl_cf_abs_path(ld, value)) == NULL)
        ld->oom = 1;
}

/* tls_protocols and tls_ciphers: words separated by blanks. */
void sl_cf_set_tls_words(struct loader *ld, struct section *sec, const struct keyword *kw,
                         const char *value)
{
    char **field = (char **)((char *)sec->obj + kw->off);
    for (const char *s = value; *s; s++)
        if (((unsigned char)*s < ' ' && *s != '\t') || (unsigned char)*s == 0x7f) {
            sl_cf_bad(ld, kw, "words of printable characters", value);
            return;
        }
    if (strlen(value) > kw->max) {
        sl_cf_bad(ld, kw, "a shorter list", value);
        return;
    }
    if (strcmp(kw->name, "tls_protocols") == 0) {
        char err[160];
        if (sl_tls_check_protocols(value, err, sizeof(err)) != 0) {
            sl_cf_err(ld, ld->line, "%s", err);
            return;
        }
    }
    free(*field);
    *field = value[0] != '\0' ? sl_cf_strdup(ld, value) : NULL;
}

/* Reports each of <keys> set in <sec> as meaningless while <why>. */
static void unused_keys(struct loader *ld, const struct section *sec, const char *const *keys,
                        size_t n, const char *why)
{
    for (size_t i = 0; i < n; i++) {
        int line = sl_cf_key_line(sec, keys[i]);
        if (line != 0)
            sl_cf_err(ld, line, "%s: %s", keys[i], why);
    }
}

/* The first line among <keys> set in <sec>, else <dflt>. */
static int first_line(const struct section *sec, const char *const *keys, size_t n, int dflt)
{
    int best = 0;
    for (size_t i = 0; i < n; i++) {
        int line = sl_cf_key_line(sec, keys[i]);
        if (line != 0 && (best == 0 || line < best))
            best = line;
    }
    return best != 0 ? best : dflt;
}

/* Builds the context of <tc> (its files are read now, once per load);
 * NULL and an error at <line> when one does not load. */
static struct sl_tls_ctx *try_ctx(struct loader *ld, int line, const char *where,
                                  const struct sl_tls_conf *tc)
{
    char err[512];
    struct sl_tls_ctx *ctx = NULL;
    if (sl_tls_ctx_new(&ctx, tc, err, sizeof(err)) != 0)
        sl_cf_err(ld, line, "%s: %s", where, err);
    return ctx;
}

/* sentinel_tls, sentinel_user, sentinel_password_file: only with a
 * redis-sentinel:// url; a user needs a password (AUTH user password). */
static void check_sentinel(struct loader *ld, struct section *sec)
{
    static const char *const keys[] = { "sentinel_tls", "sentinel_user",
                                        "sentinel_password_file" };
    struct sl_store_conf *st = sec->obj;
    if (st->kind != SL_STORE_SENTINEL) {
        unused_keys(ld, sec, keys, N_OF(keys),
                    "the url names no sentinels (redis-sentinel://... or rediss-sentinel://...)");
        st->sentinel_tls = 0;
        return;
    }
    st->sentinel_tls = st->sentinel_tls_opt < 0 ? st->tls : st->sentinel_tls_opt;
    if (st->sentinel_user != NULL && st->sentinel_password == NULL)
        sl_cf_err(ld, sl_cf_key_line(sec, "sentinel_user"),
                  "sentinel_user: needs sentinel_password_file (AUTH user password)");
}

static void check_store(struct loader *ld, struct section *sec)
{
    static const char *const keys[] = { "tls_ca", "tls_cert", "tls_key", "tls_sni", "tls_verify" };
    struct sl_store_conf *st = sec->obj;
    int url_line = sl_cf_key_line(sec, "url"), tls_line = sl_cf_key_line(sec, "tls");
    if (st->url_tls && st->tls_opt == 0)
        sl_cf_err(ld, tls_line, "tls: off, but the url (line %d) asks for TLS (rediss...)", url_line);
    st->tls = st->url_tls || st->tls_opt == 1;
    check_sentinel(ld, sec);
    if (st->sentinel_tls && !st->tls && tls_line == 0)
        tls_line = sl_cf_key_line(sec, "sentinel_tls");
    if (st->tls && st->kind == SL_STORE_LOCAL) {
        sl_cf_err(ld, tls_line ? tls_line : url_line, "tls: the store is local (no connection)");
        st->tls = 0;
        return;
    }
    if (!st->tls && !st->sentinel_tls) {
        unused_keys(ld, sec, keys, N_OF(keys),
                    "TLS to the store is off (url = rediss://... or tls = on turns it on)");
        return;
    }
    struct sl_tls_conf tc = {
        .role = SL_TLS_CLIENT, .ca_file = st->tls_ca, .cert_file = st->tls_cert,
        .key_file = st->tls_key, .verify = st->tls_verify ? SL_TLS_VERIFY_ON : SL_TLS_VERIFY_OFF,
    };
    /* Checked only: the store builds its own with the SNI it needs. */
    sl_tls_ctx_unref(try_ctx(ld, first_line(sec, keys, N_OF(keys), tls_line ? tls_line : url_line),
                             "[store] tls", &tc));
}

static void check_listener_tls(struct loader *ld, struct section *sec)
{
    static const char *const server_keys[] = { "tls_cert", "tls_key", "tls_ca",
                                               "tls_verify_client", "tls_protocols",
                                               "tls_ciphers" };
    static const char *const client_keys[] = { "upstream_tls_ca", "upstream_tls_sni",
                                               "upstream_tls_verify", "upstream_tls_cert",
                                               "upstream_tls_key" };
    struct sl_listener_conf *l = sec->obj;
    char where[128];
    snprintf(where, sizeof(where), "[listener %s]", l->name);
    if (l->tls_cert == NULL && l->tls_key == NULL) {
        unused_keys(ld, sec, server_keys + 2, N_OF(server_keys) - 2,
                    "needs tls_cert and tls_key (TLS from clients is off)");
    } else {
        struct sl_tls_conf tc = {
            .role = SL_TLS_SERVER, .cert_file = l->tls_cert, .key_file = l->tls_key,
            .ca_file = l->tls_ca, .verify = (enum sl_tls_verify)l->tls_verify_client,
            .protocols = l->tls_protocols, .ciphers = l->tls_ciphers,
            .alpn = l->protocol == SL_PROTO_HTTP ? "http/1.1" : NULL,
        };
        /* Kept: the listener takes this very context, so what was checked
         * is what serves (a file changed after the check cannot slip in). */
        l->tls_ctx = try_ctx(ld, first_line(sec, server_keys, N_OF(server_keys), sec->line),
                             where, &tc);
    }
    if (!l->upstream_tls) {
        unused_keys(ld, sec, client_keys, N_OF(client_keys),
                    "needs upstream_tls = on (TLS to the upstream is off)");
    } else {
        struct sl_tls_conf tc = {
            .role = SL_TLS_CLIENT, .ca_file = l->upstream_tls_ca,
            .cert_file = l->upstream_tls_cert, .key_file = l->upstream_tls_key,
            .verify = l->upstream_tls_verify ? SL_TLS_VERIFY_ON : SL_TLS_VERIFY_OFF,
            .alpn = l->protocol == SL_PROTO_HTTP ? "http/1.1" : NULL,
        };
        l->upstream_tls_ctx = try_ctx(ld, first_line(sec, client_keys, N_OF(client_keys),
                                                     sl_cf_key_line(sec, "upstream_tls")),
                                      where, &tc);
    }
}

void sl_cf_check_tls(struct loader *ld)
{
    if (ld->store != NULL)
        check_store(ld, ld->store);
    for (size_t i = 0; i < ld->n_secs; i++)
        if (ld->secs[i]->kind == SEC_LISTENER)
            check_listener_tls(ld, ld->secs[i]);
}

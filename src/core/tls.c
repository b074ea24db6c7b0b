/* sluice — TLS engine: OpenSSL 3 over one BIO of our own per connection.
 *
 *   feed() ──> in ──> SSL ──> read()          (ciphertext in, plaintext out)
 *   write() ──> SSL ──> out ──> peek()/take() (plaintext in, ciphertext out)
 *
 * The BIO reads from and writes to two byte buffers the engine owns (<in>,
 * <out>), so what is waiting is a field, not a BIO_ctrl() call, the caller
 * writes ciphertext to the socket straight from <out> (sl_tls_out_peek()),
 * and a buffer is freed as soon as it is drained: an idle connection holds
 * none (SSL_MODE_RELEASE_BUFFERS does the same for OpenSSL's own).
 *
 * Nothing bounds the buffers but the engine's entry points, which check the
 * bounds of tls-t.h before handing bytes to OpenSSL: feed() takes no more
 * than the room left under SL_TLS_IN_MAX, write() stops once SL_TLS_OUT_MAX
 * ciphertext waits, and renegotiation is off so a peer cannot make the engine
 * produce output on its own beyond a handshake's worth. */
#include "core/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "core/err.h"

struct sl_tls_ctx {
    SSL_CTX           *ssl;       /* OpenSSL's context (certificates, CA, versions) */
    unsigned           refs;      /* the owner's + one per engine */
    enum sl_tls_role   role;
    enum sl_tls_verify verify;
    unsigned char      alpn[256]; /* ALPN in wire form (length-prefixed names) */
    unsigned           alpn_len;  /* 0 = no ALPN */
    SSL_SESSION       *resume;    /* client role: the latest session the server gave
                                     (a TLS 1.3 ticket or a 1.2 session), or NULL */
    uint64_t           resume_for; /* name_key() of the name it was made for */
};

/* A byte buffer: bytes [off, len) of <p> wait; NULL when drained. */
struct bytes {
    char  *p;
    size_t off, len, cap;
};

struct sl_tls {
    struct sl_tls_ctx *ctx;       /* referenced */
    SSL               *ssl;       /* owns the BIO, whose data is this engine */
    struct bytes       in;        /* ciphertext fed in, not yet read by OpenSSL */
    struct bytes       out;       /* ciphertext OpenSSL wrote, not yet taken */
    enum sl_tls_state  state;
    uint8_t            eof;       /* the socket ended (sl_tls_feed_eof) */
    uint8_t            shut;      /* close_notify queued */
    uint8_t            verified;  /* peer certificate sent and verified */
    uint8_t            may_hold;  /* OpenSSL may keep a record buffer (see sl_tls_read) */
    char               peer[SL_TLS_NAME_MAX];
    char               alpn[SL_TLS_NAME_MAX];
    char               sni[SL_TLS_NAME_MAX];
    uint64_t           name_key;  /* client role: name_key() of the name given */
    char               err[256];
};

/* ---- the engine's BIO --------------------------------------------------- */

static size_t waiting(const struct bytes *b) { return b->len - b->off; }

static void bytes_free(struct bytes *b)
{
    free(b->p);
    *b = (struct bytes){ 0 };
}

/* Appends <n> bytes of <src>; 0, or -1 when out of memory. */
static int bytes_add(struct bytes *b, const void *src, size_t n)
{
    if (b->off > 0 && b->len + n > b->cap) { /* slide the waiting bytes down first */
        memmove(b->p, b->p + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
    }
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 512;
        while (cap < b->len + n)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

/* Drops <n> waiting bytes; the buffer goes once drained. */
static void bytes_drop(struct bytes *b, size_t n)
{
    b->off += n;
    if (b->off >= b->len)
        bytes_free(b);
}

static int bio_read(BIO *bio, char *dst, int cap)
{
    struct sl_tls *t = BIO_get_data(bio);
    BIO_clear_retry_flags(bio);
    size_t n = waiting(&t->in);
    if (n == 0) {
        if (t->eof)
            return 0; /* the socket's end */
        BIO_set_retry_read(bio);
        return -1;
    }
    if (cap <= 0)
        return 0;
    if (n > (size_t)cap)
        n = (size_t)cap;
    memcpy(dst, t->in.p + t->in.off, n);
    bytes_drop(&t->in, n);
    return (int)n;
}

static int bio_write(BIO *bio, const char *src, int n)
{
    struct sl_tls *t = BIO_get_data(bio);
    BIO_clear_retry_flags(bio);
    if (n <= 0)
        return 0;
    /* Always taken: write() bounds what it asks OpenSSL to encrypt, and a
     * handshake flight is bounded by the certificates. */
    return bytes_add(&t->out, src, (size_t)n) == 0 ? n : -1;
}

static long bio_ctrl(BIO *bio, int cmd, long num, void *ptr)
{
    (void)num;
    (void)ptr;
    struct sl_tls *t = BIO_get_data(bio);
    switch (cmd) {
    case BIO_CTRL_FLUSH:
        return 1; /* the caller flushes <out> */
    case BIO_CTRL_PENDING:
        return (long)waiting(&t->in);
    case BIO_CTRL_WPENDING:
        return (long)waiting(&t->out);
    case BIO_CTRL_EOF:
        return t->eof && waiting(&t->in) == 0;
    default:
        return 0;
    }
}

static int bio_create(BIO *bio)
{
    BIO_set_init(bio, 1);
    return 1;
}

/* One method for every engine of the process (made on first use; the loop
 * is one thread). */
static BIO_METHOD *bio_method(void)
{
    static BIO_METHOD *m;
    if (m != NULL)
        return m;
    BIO_METHOD *nm = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "sluice");
    if (nm == NULL || !BIO_meth_set_read(nm, bio_read) || !BIO_meth_set_write(nm, bio_write)
        || !BIO_meth_set_ctrl(nm, bio_ctrl) || !BIO_meth_set_create(nm, bio_create)) {
        BIO_meth_free(nm);
        return NULL;
    }
    return m = nm;
}

/* OpenSSL's error queue must be empty before an SSL_* call for
 * SSL_get_error() to be right. Every failure drains it, so this is nearly
 * always a cheap look (ERR_clear_error() itself walks the whole queue). */
static void err_reset(void)
{
    if (ERR_peek_error() != 0)
        ERR_clear_error();
}

/* ---- helpers ----------------------------------------------------------- */

static void errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* The reason of the most recent OpenSSL error (the queue is cleared), or
 * <dflt> when there is none. */
static const char *ossl_reason(char *buf, size_t len, const char *dflt)
{
    unsigned long e, last = 0;
    while ((e = ERR_get_error()) != 0)
        last = e;
    if (last == 0)
        return dflt;
    const char *r = ERR_reason_error_string(last);
    if (r != NULL)
        snprintf(buf, len, "%s", r);
    else
        ERR_error_string_n(last, buf, len);
    return buf;
}

static int empty(const char *s) { return s == NULL || s[0] == '\0'; }

#define FILE_MAX (1024 * 1024) /* a PEM file larger than this is refused */

/* OpenSSL names a missing file "system lib": say what the system said. A
 * device or a huge file is refused before OpenSSL reads it (/dev/zero
 * would never end). */
static int unreadable(const char *key, const char *path, char *err, size_t errlen)
{
    struct stat sb;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* a FIFO must not block */
    if (fd < 0) {
        errf(err, errlen, "%s %s: cannot read: %s", key, path, strerror(errno));
        return 1;
    }
    int bad = fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > FILE_MAX;
    close(fd);
    if (bad)
        errf(err, errlen, "%s %s: not a regular file of at most 1 MiB", key, path);
    return bad;
}

/* Parses "TLSv1.2 TLSv1.3" into a version range. */
static int parse_protocols(const char *s, int *min, int *max, char *err, size_t errlen)
{
    static const struct { const char *name; int v; } names[] = {
        { "TLSv1.2", TLS1_2_VERSION }, { "TLSv1.3", TLS1_3_VERSION },
    };
    *min = 0;
    *max = 0;
    if (empty(s)) {
        *min = TLS1_2_VERSION;
        *max = TLS1_3_VERSION;
        return SL_OK;
    }
    const char *p = s;
    while (*p != '\0') {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (*p == '\0')
            break;
        size_t n = strcspn(p, " \t,");
        int v = 0;
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (strlen(names[i].name) == n && strncasecmp(p, names[i].name, n) == 0)
                v = names[i].v;
        if (v == 0) {
            errf(err, errlen, "tls_protocols: unknown or unsupported protocol '%.*s' "
                 "(TLSv1.2 | TLSv1.3)", (int)(n > 40 ? 40 : n), p);
            return SL_ECONF;
        }
        if (*min == 0 || v < *min)
            *min = v;
        if (v > *max)
            *max = v;
        p += n;
    }
    if (*min == 0) {
        errf(err, errlen, "tls_protocols: empty");
        return SL_ECONF;
    }
    return SL_OK;
}

int sl_tls_check_protocols(const char *protocols, char *err, size_t errlen)
{
    int min, max;
    return parse_protocols(protocols, &min, &max, err, errlen);
}

/* "http/1.1,h2" -> wire form. */
static int alpn_wire(struct sl_tls_ctx *c, const char *list, char *err, size_t errlen)
{
    c->alpn_len = 0;
    if (empty(list))
        return SL_OK;
    const char *p = list;
    while (*p != '\0') {
        while (*p == ' ' || *p == ',')
            p++;
        size_t n = strcspn(p, " ,");
        if (n == 0)
            break;
        if (n > 255 || c->alpn_len + 1 + n > sizeof c->alpn) {
            errf(err, errlen, "alpn: list too long");
            return SL_ECONF;
        }
        c->alpn[c->alpn_len++] = (unsigned char)n;
        memcpy(c->alpn + c->alpn_len, p, n);
        c->alpn_len += (unsigned)n;
        p += n;
    }
    return SL_OK;
}

/* Server: picks the first of the client's offers that we accept. A client
 * offering ALPN with nothing in common is refused (RFC 7301 3.2). */
static int on_alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                          const unsigned char *in, unsigned int inlen, void *arg)
{
    (void)ssl;
    struct sl_tls_ctx *c = arg;
    unsigned char *sel = NULL;
    if (SSL_select_next_proto(&sel, outlen, c->alpn, c->alpn_len, in, inlen)
        != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

/* ---- contexts ---------------------------------------------------------- */

/* The name a client engine was made for, as a number (FNV-1a): a session
 * is only offered again to the name it was made for. */
static uint64_t name_key(const char *name)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *p = name != NULL ? name : ""; *p != '\0'; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return h;
}

/* A client engine got a session it may resume later: the context keeps it,
 * for connections to the same name, if the server was verified (or nothing
 * is verified). Returns 1: the reference is the context's now. */
static int on_new_session(SSL *ssl, SSL_SESSION *sess)
{
    struct sl_tls *t = SSL_get_app_data(ssl);
    if (t == NULL || !SSL_SESSION_is_resumable(sess)
        || (t->ctx->verify != SL_TLS_VERIFY_OFF && SSL_get_verify_result(ssl) != X509_V_OK))
        return 0;
    struct sl_tls_ctx *c = t->ctx;
    SSL_SESSION_free(c->resume);
    c->resume = sess;
    c->resume_for = t->name_key;
    return 1;
}

int sl_tls_ctx_new(struct sl_tls_ctx **out, const struct sl_tls_conf *conf,
                   char *err, size_t errlen)
{
    char why[200];
    int rc = SL_ECONF, min, max;
    struct sl_tls_ctx *c = calloc(1, sizeof *c);
    *out = NULL;
    if (c == NULL) {
        errf(err, errlen, "out of memory");
        return SL_ENOMEM;
    }
    c->refs = 1;
    c->role = conf->role;
    c->verify = conf->verify;
    ERR_clear_error();
    c->ssl = SSL_CTX_new(conf->role == SL_TLS_SERVER ? TLS_server_method() : TLS_client_method());
    if (c->ssl == NULL) {
        errf(err, errlen, "cannot make a TLS context: %s", ossl_reason(why, sizeof why, "?"));
        goto fail;
    }
    if (parse_protocols(conf->protocols, &min, &max, err, errlen) != SL_OK)
        goto fail;
    SSL_CTX_set_min_proto_version(c->ssl, min);
    SSL_CTX_set_max_proto_version(c->ssl, max);
    /* Renegotiation would let a peer make the engine write on its own. */
    SSL_CTX_set_options(c->ssl, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
    /* Partial writes: write() returns per record and the caller may retry
     * from another buffer holding the same bytes. */
    SSL_CTX_set_mode(c->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER
                             | SSL_MODE_RELEASE_BUFFERS);

    /* One key for both generations: TLS 1.3 suite names start "TLS_". A
     * list that names no TLS 1.2 cipher leaves TLS 1.2 at our default. */
    char v12[512] = "", v13[512] = "";
    if (!empty(conf->ciphers)) {
        const char *p = conf->ciphers;
        while (*p != '\0') {
            while (*p == ' ' || *p == ':' || *p == ',')
                p++;
            size_t n = strcspn(p, " :,");
            if (n == 0)
                break;
            char *dst = strncmp(p, "TLS_", 4) == 0 ? v13 : v12;
            size_t used = strlen(dst);
            if (used + n + 2 > sizeof v12) {
                errf(err, errlen, "tls_ciphers: too long");
                goto fail;
            }
            if (used > 0)
                dst[used++] = ':';
            memcpy(dst + used, p, n);
            dst[used + n] = '\0';
            p += n;
        }
        if (v13[0] != '\0' && !SSL_CTX_set_ciphersuites(c->ssl, v13)) {
            errf(err, errlen, "tls_ciphers '%s': no usable TLS 1.3 suite (%s)", v13,
                 ossl_reason(why, sizeof why, "?"));
            goto fail;
        }
    }
    if (!SSL_CTX_set_cipher_list(c->ssl, v12[0] != '\0' ? v12 : SL_TLS_DEFAULT_CIPHERS)) {
        errf(err, errlen, "tls_ciphers '%s': no usable cipher (%s)",
             v12[0] != '\0' ? v12 : SL_TLS_DEFAULT_CIPHERS, ossl_reason(why, sizeof why, "?"));
        goto fail;
    }

    if (!empty(conf->cert_file) != !empty(conf->key_file)) {
        errf(err, errlen, "%s", empty(conf->cert_file) ? "tls_key given without tls_cert"
                                                       : "tls_cert given without tls_key");
        goto fail;
    }
    if (conf->role == SL_TLS_SERVER && empty(conf->cert_file)) {
        errf(err, errlen, "tls_cert and tls_key are required to accept TLS");
        goto fail;
    }
    if (!empty(conf->cert_file)) {
        if (unreadable("tls_cert", conf->cert_file, err, errlen) ||
            unreadable("tls_key", conf->key_file, err, errlen))
            goto fail;
        if (SSL_CTX_use_certificate_chain_file(c->ssl, conf->cert_file) != 1) {
            errf(err, errlen, "tls_cert %s: cannot use certificate: %s", conf->cert_file,
                 ossl_reason(why, sizeof why, "?"));
            goto fail;
        }
        if (SSL_CTX_use_PrivateKey_file(c->ssl, conf->key_file, SSL_FILETYPE_PEM) != 1) {
            const char *r = ossl_reason(why, sizeof why, "?");
            if (strstr(r, "mismatch") != NULL)
                errf(err, errlen, "tls_key %s does not match tls_cert %s", conf->key_file,
                     conf->cert_file);
            else
                errf(err, errlen, "tls_key %s: cannot use key: %s", conf->key_file, r);
            goto fail;
        }
        if (SSL_CTX_check_private_key(c->ssl) != 1) {
            errf(err, errlen, "tls_key %s does not match tls_cert %s", conf->key_file,
                 conf->cert_file);
            goto fail;
        }
    }

    int want_ca = conf->role == SL_TLS_SERVER ? conf->verify != SL_TLS_VERIFY_OFF
                                              : conf->verify != SL_TLS_VERIFY_OFF;
    if (!empty(conf->ca_file)) {
        if (unreadable("tls_ca", conf->ca_file, err, errlen))
            goto fail;
        if (SSL_CTX_load_verify_locations(c->ssl, conf->ca_file, NULL) != 1) {
            errf(err, errlen, "tls_ca %s: cannot load: %s", conf->ca_file,
                 ossl_reason(why, sizeof why, "?"));
            goto fail;
        }
        if (conf->role == SL_TLS_SERVER) {
            /* Tell clients which CAs we accept (helps them pick a certificate). */
            STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(conf->ca_file);
            if (names != NULL)
                SSL_CTX_set_client_CA_list(c->ssl, names);
        }
    } else if (want_ca) {
        if (conf->role == SL_TLS_SERVER) {
            errf(err, errlen, "tls_verify_client needs tls_ca");
            goto fail;
        }
        SSL_CTX_set_default_verify_paths(c->ssl);
    }

    if (conf->role == SL_TLS_SERVER) {
        int mode = SSL_VERIFY_NONE;
        if (conf->verify == SL_TLS_VERIFY_OPTIONAL)
            mode = SSL_VERIFY_PEER;
        else if (conf->verify == SL_TLS_VERIFY_ON)
            mode = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
        SSL_CTX_set_verify(c->ssl, mode, NULL);
        /* Stateless tickets only: no per-session memory kept on the server. */
        SSL_CTX_set_session_cache_mode(c->ssl, SSL_SESS_CACHE_OFF);
        static const unsigned char sid[] = "sluice";
        SSL_CTX_set_session_id_context(c->ssl, sid, sizeof sid - 1);
    } else {
        SSL_CTX_set_verify(c->ssl, conf->verify == SL_TLS_VERIFY_OFF ? SSL_VERIFY_NONE
                                                                     : SSL_VERIFY_PEER, NULL);
        /* Resumption, as nginx's proxy_ssl_session_reuse and HAProxy do by
         * default: the context keeps the latest session (on_new_session),
         * so the next connection to the same name skips the certificate
         * exchange and its verification. OpenSSL keeps no cache of its own. */
        SSL_CTX_set_session_cache_mode(c->ssl, SSL_SESS_CACHE_CLIENT
                                                   | SSL_SESS_CACHE_NO_INTERNAL_STORE);
        SSL_CTX_sess_set_new_cb(c->ssl, on_new_session);
    }

    if (alpn_wire(c, conf->alpn, err, errlen) != SL_OK)
        goto fail;
    if (c->alpn_len > 0) {
        if (conf->role == SL_TLS_SERVER)
            SSL_CTX_set_alpn_select_cb(c->ssl, on_alpn_select, c);
        else if (SSL_CTX_set_alpn_protos(c->ssl, c->alpn, c->alpn_len) != 0) {
            errf(err, errlen, "alpn: rejected by OpenSSL");
            goto fail;
        }
    }
    ERR_clear_error();
    *out = c;
    return SL_OK;

fail:
    ERR_clear_error();
    if (c->ssl != NULL)
        SSL_CTX_free(c->ssl);
    free(c);
    return rc;
}

void sl_tls_ctx_ref(struct sl_tls_ctx *ctx) { ctx->refs++; }

void sl_tls_ctx_unref(struct sl_tls_ctx *ctx)
{
    if (ctx == NULL || --ctx->refs > 0)
        return;
    SSL_SESSION_free(ctx->resume);
    SSL_CTX_free(ctx->ssl);
    free(ctx);
}

/* ---- connections ------------------------------------------------------- */

struct sl_tls *sl_tls_new(struct sl_tls_ctx *ctx, const char *name)
{
    BIO_METHOD *m = bio_method();
    struct sl_tls *t = calloc(1, sizeof *t);
    if (t == NULL || m == NULL) {
        free(t);
        return NULL;
    }
    t->ssl = SSL_new(ctx->ssl);
    BIO *bio = BIO_new(m);
    if (t->ssl == NULL || bio == NULL) {
        BIO_free(bio);
        goto fail;
    }
    BIO_set_data(bio, t);
    SSL_set_bio(t->ssl, bio, bio); /* <ssl> owns it from here (one reference for both) */
    if (ctx->role == SL_TLS_CLIENT) {
        SSL_set_connect_state(t->ssl);
        if (!empty(name)) {
            unsigned char ip[16];
            int is_ip = inet_pton(AF_INET, name, ip) == 1 || inet_pton(AF_INET6, name, ip) == 1;
            X509_VERIFY_PARAM *vp = SSL_get0_param(t->ssl);
            if (!is_ip) {
                /* SNI carries host names only (RFC 6066 3). */
                if (!SSL_set_tlsext_host_name(t->ssl, name))
                    goto fail;
                snprintf(t->sni, sizeof t->sni, "%s", name);
            }
            if (ctx->verify != SL_TLS_VERIFY_OFF) {
                int ok = is_ip ? X509_VERIFY_PARAM_set1_ip_asc(vp, name)
                               : X509_VERIFY_PARAM_set1_host(vp, name, 0);
                if (!ok)
                    goto fail;
                X509_VERIFY_PARAM_set_hostflags(vp, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
            }
        }
        t->name_key = name_key(name);
        SSL_set_app_data(t->ssl, t); /* for on_new_session */
        if (ctx->resume != NULL && ctx->resume_for == t->name_key
            && !SSL_set_session(t->ssl, ctx->resume))
            ERR_clear_error(); /* a full handshake then */
    } else {
        SSL_set_accept_state(t->ssl);
    }
    ctx->refs++;
    t->ctx = ctx;
    return t;

fail:
    ERR_clear_error();
    SSL_free(t->ssl); /* and the BIO, once set */
    free(t);
    return NULL;
}

void sl_tls_free(struct sl_tls *t)
{
    if (t == NULL)
        return;
    SSL_free(t->ssl);
    bytes_free(&t->in);
    bytes_free(&t->out);
    sl_tls_ctx_unref(t->ctx);
    free(t);
}

size_t sl_tls_feed_room(const struct sl_tls *t)
{
    size_t held = waiting(&t->in);
    return held >= SL_TLS_IN_MAX ? 0 : SL_TLS_IN_MAX - held;
}

size_t sl_tls_feed(struct sl_tls *t, const void *buf, size_t len)
{
    size_t room = sl_tls_feed_room(t);
    if (len > room)
        len = room;
    if (len == 0 || t->eof)
        return 0;
    return bytes_add(&t->in, buf, len) == 0 ? len : 0;
}

void sl_tls_feed_eof(struct sl_tls *t)
{
    t->eof = 1; /* from now on, drained <in> reads as end of file */
}

/* The name a certificate goes by (see sl_tls_peer_id()): the subject's CN,
 * else its first DNS, else email, else URI SAN, whole, as UTF-8 in *<out>
 * (OPENSSL_malloc'd, the caller frees it; no NUL added). Returns its
 * length, 0 for none, or SL_EPROTO with <why> set when the name is
 * ambiguous: more than one CN (software disagrees on which one counts),
 * or a CN that does not convert to UTF-8. */
static ssize_t peer_name(const X509 *peer, unsigned char **out, const char **why)
{
    *out = NULL;
    const X509_NAME *subj = X509_get_subject_name(peer);
    int i = subj != NULL ? X509_NAME_get_index_by_NID(subj, NID_commonName, -1) : -1;
    if (i >= 0) {
        if (X509_NAME_get_index_by_NID(subj, NID_commonName, i) >= 0) {
            *why = "more than one CN in the certificate's subject";
            return SL_EPROTO;
        }
        const ASN1_STRING *d = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subj, i));
        int n = ASN1_STRING_to_UTF8(out, d);
        if (n < 0) {
            ERR_clear_error();
            *why = "the certificate's CN is not a valid string";
            return SL_EPROTO;
        }
        if (n > 0)
            return n;
        OPENSSL_free(*out); /* an empty CN: as if there were none */
        *out = NULL;
    }
    GENERAL_NAMES *sans = X509_get_ext_d2i(peer, NID_subject_alt_name, NULL, NULL);
    static const int order[] = { GEN_DNS, GEN_EMAIL, GEN_URI };
    ssize_t got = 0;
    for (size_t k = 0; sans != NULL && k < 3 && got == 0; k++)
        for (int j = 0; j < sk_GENERAL_NAME_num(sans); j++) {
            const GENERAL_NAME *g = sk_GENERAL_NAME_value(sans, j);
            if (g->type != order[k])
                continue;
            int n = ASN1_STRING_length(g->d.ia5);
            if (n <= 0)
                continue;
            if ((*out = OPENSSL_malloc((size_t)n)) == NULL)
                break;
            memcpy(*out, ASN1_STRING_get0_data(g->d.ia5), (size_t)n);
            got = n;
            break;
        }
    GENERAL_NAMES_free(sans);
    ERR_clear_error();
    return got;
}

/* Records what the handshake established, once. */
static void on_open(struct sl_tls *t)
{
    t->state = SL_TLS_OPEN;
    const unsigned char *a = NULL;
    unsigned alen = 0;
    SSL_get0_alpn_selected(t->ssl, &a, &alen);
    if (a != NULL && alen > 0)
        snprintf(t->alpn, sizeof t->alpn, "%.*s", (int)alen, (const char *)a);
    if (t->ctx->role == SL_TLS_SERVER) {
        const char *s = SSL_get_servername(t->ssl, TLSEXT_NAMETYPE_host_name);
        if (s != NULL)
            snprintf(t->sni, sizeof t->sni, "%s", s);
    }
    const X509 *peer = SSL_get0_peer_certificate(t->ssl);
    if (peer == NULL)
        return;
    t->verified = SSL_get_verify_result(t->ssl) == X509_V_OK
                  && t->ctx->verify != SL_TLS_VERIFY_OFF;
    /* For logs: the name cut to fit, a byte outside printable ASCII (a
     * NUL too), a quote or a backslash shown as '?', so that it cannot
     * end a quoted log value. sl_tls_peer_id() gives the whole of it. */
    unsigned char *u = NULL;
    const char *why = NULL;
    ssize_t n = peer_name(peer, &u, &why);
    if (n > 0) {
        size_t k = (size_t)n < sizeof t->peer - 1 ? (size_t)n : sizeof t->peer - 1;
        for (size_t i = 0; i < k; i++)
            t->peer[i] = u[i] >= ' ' && u[i] < 0x7f && u[i] != '"' && u[i] != '\\' ? (char)u[i]
                                                                                   : '?';
        t->peer[k] = '\0';
    }
    OPENSSL_free(u);
}

ssize_t sl_tls_peer_id(const struct sl_tls *t, char **name, const char **why)
{
    *name = NULL;
    *why = NULL;
    const X509 *peer = t->state == SL_TLS_HANDSHAKE ? NULL : SSL_get0_peer_certificate(t->ssl);
    if (peer == NULL)
        return 0;
    unsigned char *u = NULL;
    ssize_t n = peer_name(peer, &u, why);
    if (n > 0 && memchr(u, '\0', (size_t)n) != NULL) {
        *why = "NUL byte inside the certificate's name";
        n = SL_EPROTO;
    }
    if (n > 0 && (*name = malloc((size_t)n)) == NULL)
        n = SL_ENOMEM;
    if (n > 0)
        memcpy(*name, u, (size_t)n);
    OPENSSL_free(u);
    return n;
}

/* Turns an SSL_* failure into the engine's state and a code. */
static int failed(struct sl_tls *t, int ret)
{
    int e = SSL_get_error(t->ssl, ret);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        err_reset();
        return SL_EAGAIN;
    }
    if (e == SSL_ERROR_ZERO_RETURN) {
        t->state = SL_TLS_CLOSED;
        ERR_clear_error();
        return SL_ECLOSED;
    }
    char why[200];
    const char *r = ossl_reason(why, sizeof why, NULL);
    if (r == NULL)
        r = t->eof ? "unexpected eof (the peer closed without close_notify)" : "TLS failure";
    long v = SSL_get_verify_result(t->ssl);
    if (v != X509_V_OK && strstr(r, "certificate verify failed") != NULL)
        snprintf(t->err, sizeof t->err, "%s: %s", r, X509_verify_cert_error_string(v));
    else if (strstr(r, "wrong version number") != NULL || strstr(r, "http request") != NULL
             || strstr(r, "packet length too long") != NULL)
        snprintf(t->err, sizeof t->err, "%s (not TLS?)", r);
    else
        snprintf(t->err, sizeof t->err, "%s", r);
    t->state = SL_TLS_FAILED;
    return SL_EPROTO;
}

int sl_tls_handshake(struct sl_tls *t)
{
    if (t->state == SL_TLS_FAILED)
        return SL_EPROTO;
    if (t->state != SL_TLS_HANDSHAKE)
        return SL_OK;
    err_reset();
    t->may_hold = 1;
    int r = SSL_do_handshake(t->ssl);
    if (r == 1) {
        on_open(t);
        return SL_OK;
    }
    return failed(t, r);
}

ssize_t sl_tls_read(struct sl_tls *t, void *buf, size_t cap)
{
    if (t->state == SL_TLS_FAILED)
        return SL_EPROTO;
    if (t->state == SL_TLS_CLOSED)
        return SL_ECLOSED;
    if (t->state == SL_TLS_HANDSHAKE) {
        int r = sl_tls_handshake(t);
        if (r != SL_OK)
            return r;
    }
    if (cap == 0)
        return SL_EAGAIN;
    /* Nothing fed and nothing decrypted: SSL_read() would only say so, at
     * the price of a trip through OpenSSL and its error queue. */
    if (waiting(&t->in) == 0 && !t->eof && !SSL_has_pending(t->ssl)) {
        /* Idle until the peer speaks. SSL_MODE_RELEASE_BUFFERS frees
         * OpenSSL's record buffers after application data, but not after
         * the handshake or a record that brought none (a session ticket):
         * those go now, once (SSL_free_buffers() is not cheap enough to
         * call on every idle turn). */
        if (t->may_hold) {
            SSL_free_buffers(t->ssl);
            t->may_hold = 0;
        }
        return SL_EAGAIN;
    }
    if (cap > INT32_MAX)
        cap = INT32_MAX;
    err_reset();
    int n = SSL_read(t->ssl, buf, (int)cap);
    if (n > 0)
        return n;
    t->may_hold = 1;
    return failed(t, n);
}

size_t sl_tls_read_pending(const struct sl_tls *t)
{
    int n = SSL_pending(t->ssl);
    return n > 0 ? (size_t)n : 0;
}

ssize_t sl_tls_write(struct sl_tls *t, const void *buf, size_t len)
{
    if (t->state == SL_TLS_FAILED)
        return SL_EPROTO;
    if (t->shut)
        return SL_ECLOSED;
    if (t->state == SL_TLS_HANDSHAKE) {
        int r = sl_tls_handshake(t);
        if (r == SL_EAGAIN)
            return 0;
        if (r != SL_OK)
            return r;
    }
    size_t done = 0;
    /* One record at a time, so the ciphertext waiting passes SL_TLS_OUT_MAX
     * by one record at most. */
    while (done < len && waiting(&t->out) < SL_TLS_OUT_MAX) {
        size_t n = len - done;
        if (n > 16384)
            n = 16384;
        err_reset();
        int w = SSL_write(t->ssl, (const char *)buf + done, (int)n);
        if (w <= 0) {
            int r = failed(t, w);
            if (r == SL_EAGAIN || r == SL_ECLOSED) {
                if (r == SL_ECLOSED)
                    t->state = SL_TLS_CLOSED;
                break;
            }
            return done > 0 ? (ssize_t)done : r;
        }
        done += (size_t)w;
    }
    return (ssize_t)done;
}

size_t sl_tls_out_pending(const struct sl_tls *t) { return waiting(&t->out); }

const void *sl_tls_out_peek(const struct sl_tls *t, size_t *len)
{
    *len = waiting(&t->out);
    return *len > 0 ? t->out.p + t->out.off : NULL;
}

void sl_tls_out_drop(struct sl_tls *t, size_t n)
{
    size_t w = waiting(&t->out);
    bytes_drop(&t->out, n < w ? n : w);
}

size_t sl_tls_take(struct sl_tls *t, void *buf, size_t cap)
{
    size_t n = waiting(&t->out);
    if (n > cap)
        n = cap;
    if (n > 0) {
        memcpy(buf, t->out.p + t->out.off, n);
        bytes_drop(&t->out, n);
    }
    return n;
}

void sl_tls_shutdown(struct sl_tls *t)
{
    if (t->shut || t->state == SL_TLS_FAILED)
        return;
    t->shut = 1;
    if (t->state == SL_TLS_HANDSHAKE)
        return; /* nothing was said yet: a close_notify mid-handshake helps no one */
    err_reset();
    (void)SSL_shutdown(t->ssl); /* queues close_notify in <out>; the answer is not awaited */
    ERR_clear_error();
}

enum sl_tls_state sl_tls_state(const struct sl_tls *t) { return t->state; }
enum sl_tls_role sl_tls_role(const struct sl_tls *t) { return t->ctx->role; }
const char *sl_tls_peer_name(const struct sl_tls *t) { return t->peer; }
int sl_tls_peer_verified(const struct sl_tls *t) { return t->verified; }
int sl_tls_resumed(const struct sl_tls *t) { return SSL_session_reused(t->ssl) == 1; }
const char *sl_tls_alpn(const struct sl_tls *t) { return t->alpn; }
const char *sl_tls_sni(const struct sl_tls *t) { return t->sni; }
const char *sl_tls_error(const struct sl_tls *t) { return t->err; }

const char *sl_tls_version(const struct sl_tls *t)
{
    return t->state == SL_TLS_HANDSHAKE ? "" : SSL_get_version(t->ssl);
}

const char *sl_tls_cipher(const struct sl_tls *t)
{
    const char *n = t->state == SL_TLS_HANDSHAKE ? NULL : SSL_get_cipher_name(t->ssl);
    return n != NULL && strcmp(n, "(NONE)") != 0 ? n : "";
}

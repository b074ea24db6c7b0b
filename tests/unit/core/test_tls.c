/* The TLS engine: a client and a server engine talking to each other in
 * memory, with a throwaway CA and certificates made by the `openssl` command
 * in a temporary directory at test time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/ssl.h>

#include "core/err.h"
#include "core/tls.h"
#include "certs.h"

static struct th_certs certs;

static const char *path(const char *name)
{
    return th_certs_path(&certs, name);
}

/* A CA, a server certificate for localhost / 127.0.0.1, a client
 * certificate, an expired server certificate, one with no CN and a second,
 * unrelated CA (ca2.pem). */
static char long_uri[2][400]; /* two URI SANs alike in their first 300 bytes */

static int make_certs(void **state)
{
    (void)state;
    static const struct th_cert want[] = {
        { "server", "/CN=localhost", TH_SAN_LOCAL, 0 },
        { "client", "/CN=client-alice", NULL, TH_CERT_CLIENT },
        { "expired", "/CN=localhost", TH_SAN_LOCAL, TH_CERT_EXPIRED },
        { "nocn", "/O=sluice", "DNS:svc.example", 0 },
    };
    if (th_certs_make(&certs, want, sizeof want / sizeof want[0]) != 0)
        return -1;
    for (int i = 0; i < 2; i++) {
        int n = snprintf(long_uri[i], sizeof long_uri[i], "spiffe://sluice.test/");
        memset(long_uri[i] + n, 'a', 300);
        snprintf(long_uri[i] + n + 300, sizeof long_uri[i] - (size_t)n - 300, "/%s",
                 i == 0 ? "one" : "two");
    }
    /* names the shell cannot carry: made with OpenSSL's API */
    static const char nul_cn[] = "client-alice\0.attacker.example";
    const struct th_raw_cert raw[] = {
        { "nul-cn", { nul_cn, NULL }, { sizeof nul_cn - 1, 0 }, 0, NULL, 0 },
        { "two-cn", { "client-alice", "mallory" }, { 12, 7 }, 0, NULL, 0 },
        { "long-1", { NULL, NULL }, { 0, 0 }, 2, long_uri[0], strlen(long_uri[0]) },
        { "long-2", { NULL, NULL }, { 0, 0 }, 2, long_uri[1], strlen(long_uri[1]) },
        { "nul-san", { NULL, NULL }, { 0, 0 }, 1, "svc.example\0.evil", 17 },
    };
    return th_certs_make_raw(&certs, raw, sizeof raw / sizeof raw[0]);
}

static int remove_certs(void **state)
{
    (void)state;
    return th_certs_remove(&certs);
}

static struct sl_tls_ctx *ctx_or_fail(const struct sl_tls_conf *c)
{
    char err[256] = "";
    struct sl_tls_ctx *ctx = NULL;
    int rc = sl_tls_ctx_new(&ctx, c, err, sizeof err);
    if (rc != SL_OK)
        fail_msg("sl_tls_ctx_new: %s", err);
    return ctx;
}

static struct sl_tls_ctx *server_ctx(enum sl_tls_verify v, const char *alpn, const char *cert)
{
    struct sl_tls_conf c = {
        .role = SL_TLS_SERVER, .cert_file = path(cert ? cert : "server.pem"),
        .key_file = path(cert && strcmp(cert, "expired.pem") == 0 ? "expired.key"
                         : cert && strcmp(cert, "nocn.pem") == 0 ? "nocn.key" : "server.key"),
        .ca_file = v != SL_TLS_VERIFY_OFF ? path("ca.pem") : NULL, .verify = v, .alpn = alpn,
    };
    return ctx_or_fail(&c);
}

static struct sl_tls_ctx *client_ctx(enum sl_tls_verify v, const char *ca, int with_cert,
                                     const char *alpn)
{
    struct sl_tls_conf c = {
        .role = SL_TLS_CLIENT, .ca_file = ca ? path(ca) : NULL, .verify = v, .alpn = alpn,
        .cert_file = with_cert ? path("client.pem") : NULL,
        .key_file = with_cert ? path("client.key") : NULL,
    };
    return ctx_or_fail(&c);
}

/* Moves ciphertext from <from> to <to> in small pieces, within <to>'s room. */
static int move(struct sl_tls *from, struct sl_tls *to)
{
    char buf[1000];
    int moved = 0;
    while (sl_tls_out_pending(from) > 0 && sl_tls_feed_room(to) > 0) {
        size_t cap = sl_tls_feed_room(to) < sizeof buf ? sl_tls_feed_room(to) : sizeof buf;
        size_t n = sl_tls_take(from, buf, cap);
        assert_true(n > 0);
        assert_int_equal(sl_tls_feed(to, buf, n), n);
        moved = 1;
    }
    return moved;
}

/* Runs both handshakes until neither moves; their last results in <rc>. */
static void handshake(struct sl_tls *c, struct sl_tls *s, int rc[2])
{
    for (int i = 0; i < 20; i++) {
        rc[0] = sl_tls_handshake(c);
        int m = move(c, s);
        rc[1] = sl_tls_handshake(s);
        m |= move(s, c);
        if (!m)
            break;
    }
}

struct pair {
    struct sl_tls_ctx *cc, *sc;
    struct sl_tls     *c, *s;
    int                rc[2];
};

static void pair_open(struct pair *p, struct sl_tls_ctx *cc, struct sl_tls_ctx *sc, const char *name)
{
    p->cc = cc;
    p->sc = sc;
    p->c = sl_tls_new(cc, name);
    p->s = sl_tls_new(sc, NULL);
    assert_non_null(p->c);
    assert_non_null(p->s);
    handshake(p->c, p->s, p->rc);
}

static void pair_close(struct pair *p)
{
    sl_tls_free(p->c);
    sl_tls_free(p->s);
    sl_tls_ctx_unref(p->cc);
    sl_tls_ctx_unref(p->sc);
}

/* Sends <len> bytes from <a> to <b> in pieces and checks they arrive. */
static void transfer(struct sl_tls *a, struct sl_tls *b, size_t len)
{
    unsigned char *src = malloc(len), *dst = malloc(len);
    assert_non_null(src);
    assert_non_null(dst);
    for (size_t i = 0; i < len; i++)
        src[i] = (unsigned char)(i * 7 + i / 251);
    size_t sent = 0, got = 0;
    int rounds = 0;
    while (got < len) {
        assert_true(++rounds < 100000);
        if (sent < len) {
            size_t piece = (len - sent) < 3001 ? len - sent : 3001;
            ssize_t w = sl_tls_write(a, src + sent, piece);
            assert_true(w >= 0);
            sent += (size_t)w;
        }
        assert_true(sl_tls_out_pending(a) <= SL_TLS_OUT_MAX + 16384 + 256);
        move(a, b);
        for (;;) {
            size_t cap = (len - got) < 777 ? len - got : 777;
            if (cap == 0)
                break;
            ssize_t r = sl_tls_read(b, dst + got, cap);
            if (r == SL_EAGAIN)
                break;
            assert_true(r > 0);
            got += (size_t)r;
        }
        move(b, a); /* session tickets, key updates */
    }
    assert_memory_equal(src, dst, len);
    free(src);
    free(dst);
}

static void test_tls_handshake_and_data(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p, client_ctx(SL_TLS_VERIFY_ON, "ca.pem", 0, NULL),
              server_ctx(SL_TLS_VERIFY_OFF, NULL, NULL), "localhost");
    assert_int_equal(p.rc[0], SL_OK);
    assert_int_equal(p.rc[1], SL_OK);
    assert_int_equal(sl_tls_state(p.c), SL_TLS_OPEN);
    assert_int_equal(sl_tls_state(p.s), SL_TLS_OPEN);
    assert_string_equal(sl_tls_version(p.c), "TLSv1.3");
    assert_string_equal(sl_tls_peer_name(p.c), "localhost");
    assert_int_equal(sl_tls_peer_verified(p.c), 1);
    assert_string_equal(sl_tls_peer_name(p.s), ""); /* no client certificate */
    assert_string_equal(sl_tls_sni(p.s), "localhost");
    assert_string_equal(sl_tls_sni(p.c), "localhost");
    transfer(p.c, p.s, 1000000);
    transfer(p.s, p.c, 1500000);
    transfer(p.c, p.s, 1);
    pair_close(&p);
}

static void test_tls_ip_name_and_no_sni(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p, client_ctx(SL_TLS_VERIFY_ON, "ca.pem", 0, NULL),
              server_ctx(SL_TLS_VERIFY_OFF, NULL, NULL), "127.0.0.1");
    assert_int_equal(p.rc[0], SL_OK);
    assert_int_equal(p.rc[1], SL_OK);
    assert_string_equal(sl_tls_sni(p.s), ""); /* an address is never sent as SNI */
    assert_int_equal(sl_tls_peer_verified(p.c), 1);
    pair_close(&p);
}

static void test_tls_alpn(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p, client_ctx(SL_TLS_VERIFY_ON, "ca.pem", 0, "h2,http/1.1"),
              server_ctx(SL_TLS_VERIFY_OFF, "http/1.1", NULL), "localhost");
    assert_int_equal(p.rc[0], SL_OK);
    assert_string_equal(sl_tls_alpn(p.c), "http/1.1");
    assert_string_equal(sl_tls_alpn(p.s), "http/1.1");
    pair_close(&p);

    /* a client offering no ALPN is served, with none */
    pair_open(&p, client_ctx(SL_TLS_VERIFY_ON, "ca.pem", 0, NULL),
              server_ctx(SL_TLS_VERIFY_OFF, "http/1.1", NULL), "localhost");
    assert_int_equal(p.rc[1], SL_OK);
    assert_string_equal(sl_tls_alpn(p.s), "");
    pair_close(&p);

    /* nothing in common: refused */
    pair_open(&p, client_ctx(SL_TLS_VERIFY_ON, "ca.pem", 0, "h2"),
              server_ctx(SL_TLS_VERIFY_OFF, "http/1.1", NULL), "localhost");
    assert_int_equal(p.rc[1], SL_EPROTO);
    assert_int_equal(p.rc[0], SL_EPROTO);
    assert_non_null(strstr(sl_tls_error(p.s), "application protocol"));
    pair_close(&p);
}

static void test_tls_mutual(void **state)
{
    (void)state;
    struct pair p;
    char buf[16];
    /* required, none sent: the server refuses; the TLS 1.3 client learns it
     * from the alert at its first read */
    pair_open(&p, client_ctx(SL_TLS_VERIFY_ON, "ca.pem", 0, NULL),
              server_ctx(SL_TLS_VERIFY_ON, NULL, NULL), "localhost");
    assert_int_equal(p.rc[1], SL_EPROTO);
    assert_int_equal(sl_tls_state(p.s), SL_TLS_FAILED);
    assert_non_null(strstr(sl_tls_error(p.s), "certificate"));
    move(p.s, p.c);
    assert_int_equal(sl_tls_read(p.c, buf, sizeof buf), SL_EPROTO);
    assert_true(sl_tls_error(p.c)[0] != '\0');
    pair_close(&p);

    /* required and sent: the subject CN is the peer name */
    pair_open(&p, client_ctx(SL_TLS_VERIFY_ON, "ca.pem", 1, NULL),
              server_ctx(SL_TLS_VERIFY_ON, NULL, NULL), "localhost");
    assert_int_equal(p.rc[0], SL_OK);
    assert_int_equal(p.rc[1], SL_OK);
    assert_string_equal(sl_tls_peer_name(p.s), "client-alice");
    assert_int_equal(sl_tls_peer_verified(p.s), 1);
    transfer(p.c, p.s, 50000);
    pair_close(&p);

    /* optional, none sent: let in, unverified */
    pair_open(&p, client_ctx(SL_TLS_VERIFY_ON, "ca.pem", 0, NULL),
              server_ctx(SL_TLS_VERIFY_OPTIONAL, NULL, NULL), "localhost");
    assert_int_equal(p.rc[1], SL_OK);
    assert_int_equal(sl_tls_peer_verified(p.s), 0);
    transfer(p.c, p.s, 100);
    pair_close(&p);
}

/* The server's view of a client presenting <cert> (NAME.pem / NAME.key). */
static void pair_client_cert(struct pair *p, const char *cert)
{
    char pem[64], key[64];
    snprintf(pem, sizeof pem, "%s.pem", cert);
    snprintf(key, sizeof key, "%s.key", cert);
    struct sl_tls_conf c = { .role = SL_TLS_CLIENT, .ca_file = path("ca.pem"),
                             .verify = SL_TLS_VERIFY_ON, .cert_file = path(pem),
                             .key_file = path(key) };
    pair_open(p, ctx_or_fail(&c), server_ctx(SL_TLS_VERIFY_ON, NULL, NULL), "localhost");
    assert_int_equal(p->rc[0], SL_OK);
    assert_int_equal(p->rc[1], SL_OK);
    assert_int_equal(sl_tls_peer_verified(p->s), 1);
}

/* sl_tls_peer_id(): the whole name, or a refusal when it cannot stand for
 * one peer; sl_tls_peer_name() shows it (cut, NUL as '?') for logs. */
static void test_tls_peer_id(void **state)
{
    (void)state;
    struct pair p;
    char *name = NULL;
    const char *why = NULL;

    pair_client_cert(&p, "client");
    assert_int_equal(sl_tls_peer_id(p.s, &name, &why), 12);
    assert_memory_equal(name, "client-alice", 12);
    free(name);
    pair_close(&p);

    /* a NUL inside the CN: not "client-alice" */
    pair_client_cert(&p, "nul-cn");
    assert_int_equal(sl_tls_peer_id(p.s, &name, &why), SL_EPROTO);
    assert_null(name);
    assert_non_null(strstr(why, "NUL"));
    assert_string_equal(sl_tls_peer_name(p.s), "client-alice?.attacker.example");
    pair_close(&p);

    /* and inside the SAN that would be the name */
    pair_client_cert(&p, "nul-san");
    assert_int_equal(sl_tls_peer_id(p.s, &name, &why), SL_EPROTO);
    assert_string_equal(sl_tls_peer_name(p.s), "svc.example?.evil");
    pair_close(&p);

    /* two CNs: which one counts depends on who reads it */
    pair_client_cert(&p, "two-cn");
    assert_int_equal(sl_tls_peer_id(p.s, &name, &why), SL_EPROTO);
    assert_non_null(strstr(why, "more than one CN"));
    pair_close(&p);

    /* long URI SANs that share their first 300 bytes: whole, so apart */
    char *first = NULL;
    pair_client_cert(&p, "long-1");
    size_t n1 = strlen(long_uri[0]);
    assert_int_equal(sl_tls_peer_id(p.s, &first, &why), (ssize_t)n1);
    assert_memory_equal(first, long_uri[0], n1);
    assert_int_equal(strlen(sl_tls_peer_name(p.s)), SL_TLS_NAME_MAX - 1); /* the log's is cut */
    pair_close(&p);
    pair_client_cert(&p, "long-2");
    assert_int_equal(sl_tls_peer_id(p.s, &name, &why), (ssize_t)strlen(long_uri[1]));
    assert_memory_equal(name, long_uri[1], strlen(long_uri[1]));
    assert_memory_not_equal(name, first, n1);
    free(first);
    free(name);
    pair_close(&p);

    /* no certificate: nothing */
    pair_open(&p, client_ctx(SL_TLS_VERIFY_ON, "ca.pem", 0, NULL),
              server_ctx(SL_TLS_VERIFY_OPTIONAL, NULL, NULL), "localhost");
    assert_int_equal(p.rc[1], SL_OK);
    assert_int_equal(sl_tls_peer_id(p.s, &name, &why), 0);
    assert_null(name);
    pair_close(&p);
}

static void test_tls_peer_name_from_san(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p, client_ctx(SL_TLS_VERIFY_ON, "ca.pem", 0, NULL),
              server_ctx(SL_TLS_VERIFY_OFF, NULL, "nocn.pem"), "svc.example");
    assert_int_equal(p.rc[0], SL_OK);
    assert_string_equal(sl_tls_peer_name(p.c), "svc.example");
    pair_close(&p);
}

static void test_tls_refusals(void **state)
{
    (void)state;
    struct pair p;
    /* wrong host name */
    pair_open(&p, client_ctx(SL_TLS_VERIFY_ON, "ca.pem", 0, NULL),
              server_ctx(SL_TLS_VERIFY_OFF, NULL, NULL), "wrong.example");
    assert_int_equal(p.rc[0], SL_EPROTO);
    assert_non_null(strstr(sl_tls_error(p.c), "hostname mismatch"));
    assert_int_equal(p.rc[1], SL_EPROTO); /* the alert reached the server */
    pair_close(&p);

    /* the same with verification off: accepted (the caller logs it loudly) */
    pair_open(&p, client_ctx(SL_TLS_VERIFY_OFF, NULL, 0, NULL),
              server_ctx(SL_TLS_VERIFY_OFF, NULL, NULL), "wrong.example");
    assert_int_equal(p.rc[0], SL_OK);
    assert_int_equal(sl_tls_peer_verified(p.c), 0);
    pair_close(&p);

    /* expired certificate */
    pair_open(&p, client_ctx(SL_TLS_VERIFY_ON, "ca.pem", 0, NULL),
              server_ctx(SL_TLS_VERIFY_OFF, NULL, "expired.pem"), "localhost");
    assert_int_equal(p.rc[0], SL_EPROTO);
    assert_non_null(strstr(sl_tls_error(p.c), "expired"));
    pair_close(&p);

    /* a CA that did not sign the server's certificate */
    pair_open(&p, client_ctx(SL_TLS_VERIFY_ON, "ca2.pem", 0, NULL),
              server_ctx(SL_TLS_VERIFY_OFF, NULL, NULL), "localhost");
    assert_int_equal(p.rc[0], SL_EPROTO);
    assert_non_null(strstr(sl_tls_error(p.c), "certificate verify failed"));
    pair_close(&p);
}

static void test_tls_plaintext_fails_fast(void **state)
{
    (void)state;
    static const char *hello[] = { "PING\r\n", "*1\r\n$4\r\nPING\r\n",
                                   "GET / HTTP/1.1\r\nHost: x\r\n\r\n" };
    for (size_t i = 0; i < 3; i++) {
        struct sl_tls_ctx *sc = server_ctx(SL_TLS_VERIFY_OFF, NULL, NULL);
        struct sl_tls *s = sl_tls_new(sc, NULL);
        assert_int_equal(sl_tls_feed(s, hello[i], strlen(hello[i])), strlen(hello[i]));
        char buf[64];
        assert_int_equal(sl_tls_read(s, buf, sizeof buf), SL_EPROTO);
        assert_int_equal(sl_tls_state(s), SL_TLS_FAILED);
        assert_non_null(strstr(sl_tls_error(s), "not TLS"));
        sl_tls_free(s);
        sl_tls_ctx_unref(sc);
    }
}

static void test_tls_close_notify_and_eof(void **state)
{
    (void)state;
    struct pair p;
    char buf[64];
    pair_open(&p, client_ctx(SL_TLS_VERIFY_ON, "ca.pem", 0, NULL),
              server_ctx(SL_TLS_VERIFY_OFF, NULL, NULL), "localhost");
    transfer(p.c, p.s, 10);
    sl_tls_shutdown(p.c);
    sl_tls_shutdown(p.c); /* once */
    assert_int_equal(sl_tls_write(p.c, "x", 1), SL_ECLOSED);
    move(p.c, p.s);
    assert_int_equal(sl_tls_read(p.s, buf, sizeof buf), SL_ECLOSED);
    assert_int_equal(sl_tls_state(p.s), SL_TLS_CLOSED);
    assert_int_equal(sl_tls_read(p.s, buf, sizeof buf), SL_ECLOSED);
    pair_close(&p);

    /* the socket ends without close_notify: an error, not a clean end */
    pair_open(&p, client_ctx(SL_TLS_VERIFY_ON, "ca.pem", 0, NULL),
              server_ctx(SL_TLS_VERIFY_OFF, NULL, NULL), "localhost");
    transfer(p.c, p.s, 10);
    sl_tls_feed_eof(p.s);
    assert_int_equal(sl_tls_read(p.s, buf, sizeof buf), SL_EPROTO);
    assert_non_null(strstr(sl_tls_error(p.s), "eof"));
    pair_close(&p);

    /* a handshake cut short by EOF fails too (no hang) */
    struct sl_tls_ctx *sc = server_ctx(SL_TLS_VERIFY_OFF, NULL, NULL);
    struct sl_tls *s = sl_tls_new(sc, NULL);
    assert_int_equal(sl_tls_handshake(s), SL_EAGAIN);
    sl_tls_feed_eof(s);
    assert_int_equal(sl_tls_handshake(s), SL_EPROTO);
    sl_tls_free(s);
    sl_tls_ctx_unref(sc);
}

static void test_tls_bounds(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p, client_ctx(SL_TLS_VERIFY_ON, "ca.pem", 0, NULL),
              server_ctx(SL_TLS_VERIFY_OFF, NULL, NULL), "localhost");
    while (sl_tls_out_pending(p.c) > 0) /* nothing left from the handshake */
        move(p.c, p.s);
    static char big[1 << 20];
    /* nothing taken out: write stops near SL_TLS_OUT_MAX */
    ssize_t w = sl_tls_write(p.c, big, sizeof big);
    assert_true(w > 0 && w < (ssize_t)sizeof big);
    assert_true(sl_tls_out_pending(p.c) >= SL_TLS_OUT_MAX);
    assert_true(sl_tls_out_pending(p.c) <= SL_TLS_OUT_MAX + 16384 + 256);
    assert_int_equal(sl_tls_write(p.c, big + w, sizeof big - (size_t)w), 0);
    /* nothing read out: feed stops at SL_TLS_IN_MAX */
    static char ct[2 * SL_TLS_OUT_MAX];
    size_t n = sl_tls_take(p.c, ct, sizeof ct);
    assert_true(n > SL_TLS_IN_MAX);
    assert_int_equal(sl_tls_feed(p.s, ct, n), SL_TLS_IN_MAX);
    assert_int_equal(sl_tls_feed_room(p.s), 0);
    assert_int_equal(sl_tls_feed(p.s, ct, n), 0);
    /* reading makes room again */
    char buf[20000];
    assert_true(sl_tls_read(p.s, buf, sizeof buf) > 0);
    assert_true(sl_tls_feed_room(p.s) > 0);
    pair_close(&p);
}

static void test_tls_protocols_and_reload(void **state)
{
    (void)state;
    char err[256];
    struct sl_tls_ctx *ctx = NULL;
    assert_int_equal(sl_tls_check_protocols("TLSv1.2 TLSv1.3", err, sizeof err), SL_OK);
    assert_int_equal(sl_tls_check_protocols("TLSv1.1", err, sizeof err), SL_ECONF);
    assert_non_null(strstr(err, "TLSv1.1"));
    struct sl_tls_conf bad = { .role = SL_TLS_SERVER, .cert_file = path("missing.pem"),
                               .key_file = path("server.key") };
    assert_int_equal(sl_tls_ctx_new(&ctx, &bad, err, sizeof err), SL_ECONF);
    assert_null(ctx);
    assert_non_null(strstr(err, "missing.pem"));
    bad.cert_file = path("client.pem");
    assert_int_equal(sl_tls_ctx_new(&ctx, &bad, err, sizeof err), SL_ECONF);
    assert_non_null(strstr(err, "does not match"));
    struct sl_tls_conf nocert = { .role = SL_TLS_SERVER };
    assert_int_equal(sl_tls_ctx_new(&ctx, &nocert, err, sizeof err), SL_ECONF);
    struct sl_tls_conf badcipher = { .role = SL_TLS_CLIENT, .ciphers = "NOPE-CIPHER" };
    assert_int_equal(sl_tls_ctx_new(&ctx, &badcipher, err, sizeof err), SL_ECONF);
    assert_non_null(strstr(err, "NOPE-CIPHER"));

    /* TLS 1.2 only on the server, with a chosen cipher */
    struct sl_tls_conf s12 = { .role = SL_TLS_SERVER, .cert_file = path("server.pem"),
                               .key_file = path("server.key"), .protocols = "TLSv1.2",
                               .ciphers = "ECDHE-ECDSA-AES128-GCM-SHA256" };
    struct pair p;
    pair_open(&p, client_ctx(SL_TLS_VERIFY_ON, "ca.pem", 0, NULL), ctx_or_fail(&s12), "localhost");
    assert_int_equal(p.rc[0], SL_OK);
    assert_int_equal(p.rc[1], SL_OK);
    assert_string_equal(sl_tls_version(p.s), "TLSv1.2");
    transfer(p.c, p.s, 70000);
    transfer(p.s, p.c, 70000);
    pair_close(&p);

    /* no common version */
    struct sl_tls_conf c13 = { .role = SL_TLS_CLIENT, .protocols = "TLSv1.3" };
    pair_open(&p, ctx_or_fail(&c13), ctx_or_fail(&s12), "localhost");
    assert_int_equal(p.rc[1], SL_EPROTO);
    pair_close(&p);

    /* reload: the owner drops the old context; an engine made from it lives on */
    struct sl_tls_ctx *sc = server_ctx(SL_TLS_VERIFY_OFF, NULL, NULL);
    struct sl_tls_ctx *cc = client_ctx(SL_TLS_VERIFY_ON, "ca.pem", 0, NULL);
    struct sl_tls *s = sl_tls_new(sc, NULL), *c = sl_tls_new(cc, "localhost");
    sl_tls_ctx_unref(sc);
    sl_tls_ctx_unref(cc);
    int rc[2];
    handshake(c, s, rc);
    assert_int_equal(rc[0], SL_OK);
    assert_int_equal(rc[1], SL_OK);
    transfer(c, s, 5000);
    sl_tls_free(c);
    sl_tls_free(s);
}

/* Writing straight from the engine (peek, drop) moves the same bytes as
 * take(); once both ends have read everything, a pair holds no buffer:
 * the heap a few dozen idle pairs keep is the SSL objects, not records. */
static void test_tls_peek_drop_and_idle_memory(void **state)
{
    (void)state;
    struct sl_tls_ctx *cc = client_ctx(SL_TLS_VERIFY_ON, "ca.pem", 0, NULL);
    struct sl_tls_ctx *sc = server_ctx(SL_TLS_VERIFY_OFF, NULL, NULL);
    enum { PAIRS = 40 };
    struct pair p[PAIRS];
    size_t heap0 = mallinfo2().uordblks;
    for (int i = 0; i < PAIRS; i++) {
        sl_tls_ctx_ref(cc);
        sl_tls_ctx_ref(sc);
        pair_open(&p[i], cc, sc, "localhost");
        assert_int_equal(p[i].rc[0], SL_OK);
        assert_int_equal(p[i].rc[1], SL_OK);
        /* a request each way, the way the session sends it */
        for (int back = 0; back < 2; back++) {
            struct sl_tls *a = back ? p[i].s : p[i].c, *b = back ? p[i].c : p[i].s;
            assert_int_equal(sl_tls_write(a, "*1\r\n$4\r\nPING\r\n", 14), 14);
            size_t n, left;
            const char *ct = sl_tls_out_peek(a, &n);
            assert_non_null(ct);
            assert_int_equal(n, sl_tls_out_pending(a));
            assert_int_equal(sl_tls_feed(b, ct, 7), 7); /* the socket took 7 bytes */
            sl_tls_out_drop(a, 7);
            ct = sl_tls_out_peek(a, &left);
            assert_int_equal(left, n - 7);
            assert_int_equal(sl_tls_feed(b, ct, left), left);
            sl_tls_out_drop(a, left);
            assert_null(sl_tls_out_peek(a, &n));
            assert_int_equal(n, 0);
            char got[32];
            assert_int_equal(sl_tls_read(b, got, sizeof got), 14);
            assert_memory_equal(got, "*1\r\n$4\r\nPING\r\n", 14);
            assert_int_equal(sl_tls_read(b, got, sizeof got), SL_EAGAIN);
            move(b, a); /* session tickets */
            while (sl_tls_read(a, got, sizeof got) > 0)
                ;
        }
    }
    size_t per_pair = (mallinfo2().uordblks - heap0) / PAIRS;
    print_message("heap per idle pair: %zu bytes\n", per_pair);
    /* About 36 KB here is OpenSSL's state for two engines (the SSL objects
     * alone are 17 KB); one record buffer kept is 16 KB more. */
    assert_true(per_pair < 44 * 1024);
    for (int i = 0; i < PAIRS; i++)
        pair_close(&p[i]);
    sl_tls_ctx_unref(cc);
    sl_tls_ctx_unref(sc);
}

/* A client context resumes the session its last connection was given, for
 * the same name only; the resumed peer still reads as verified. */
static void test_tls_client_resumes(void **state)
{
    (void)state;
    struct sl_tls_ctx *cc = client_ctx(SL_TLS_VERIFY_ON, "ca.pem", 0, NULL);
    struct sl_tls_ctx *sc = server_ctx(SL_TLS_VERIFY_OFF, NULL, NULL);
    struct pair p[4];
    const char *names[4] = { "localhost", "localhost", "127.0.0.1", "127.0.0.1" };
    const int resumed[4] = { 0, 1, 0, 1 };
    for (int i = 0; i < 4; i++) {
        sl_tls_ctx_ref(cc);
        sl_tls_ctx_ref(sc);
        pair_open(&p[i], cc, sc, names[i]);
        assert_int_equal(p[i].rc[0], SL_OK);
        assert_int_equal(p[i].rc[1], SL_OK);
        transfer(p[i].s, p[i].c, 100); /* the server's tickets reach the client */
        assert_int_equal(sl_tls_resumed(p[i].c), resumed[i]);
        assert_int_equal(sl_tls_resumed(p[i].s), resumed[i]);
        assert_int_equal(sl_tls_peer_verified(p[i].c), 1);
        assert_string_equal(sl_tls_peer_name(p[i].c), "localhost");
    }
    for (int i = 0; i < 4; i++)
        pair_close(&p[i]);
    /* another context (a reload) starts afresh */
    struct pair q;
    pair_open(&q, client_ctx(SL_TLS_VERIFY_ON, "ca.pem", 0, NULL), sc, "localhost");
    assert_int_equal(q.rc[0], SL_OK);
    assert_int_equal(sl_tls_resumed(q.c), 0);
    pair_close(&q);
    sl_tls_ctx_unref(cc);
}

/* With no tls_ciphers, TLS 1.2 is ECDHE with AEAD only, on both roles:
 * for every TLS 1.2 suite OpenSSL knows that is not AEAD (the CBC suites
 * testssl calls LUCKY13-prone, RC4, NULL ...), a client offering only it
 * cannot reach a default server, and a default client cannot reach a
 * server offering only it; tls_ciphers still chooses one. */
static void test_tls_default_ciphers_aead_only(void **state)
{
    (void)state;
    SSL_CTX *all = SSL_CTX_new(TLS_method());
    assert_non_null(all);
    SSL_CTX_set_security_level(all, 0);
    assert_int_equal(SSL_CTX_set_cipher_list(all, "ALL:COMPLEMENTOFALL:@SECLEVEL=0"), 1);
    STACK_OF(SSL_CIPHER) *list = SSL_CTX_get_ciphers(all);
    int tried = 0, cbc_ecdsa = 0;
    for (int i = 0; i < sk_SSL_CIPHER_num(list); i++) {
        const SSL_CIPHER *ci = sk_SSL_CIPHER_value(list, i);
        const char *name = SSL_CIPHER_get_name(ci);
        if (SSL_CIPHER_is_aead(ci) || strncmp(name, "TLS_", 4) == 0)
            continue; /* AEAD, or a TLS 1.3 suite (all AEAD) */
        tried++;
        cbc_ecdsa += strncmp(name, "ECDHE-ECDSA-", 12) == 0;
        struct sl_tls_conf c = { .role = SL_TLS_CLIENT, .protocols = "TLSv1.2", .ciphers = name };
        struct sl_tls_conf sv = { .role = SL_TLS_SERVER, .cert_file = path("server.pem"),
                                  .key_file = path("server.key"), .protocols = "TLSv1.2",
                                  .ciphers = name };
        struct sl_tls_ctx *cc = NULL, *sc = NULL;
        char err[256];
        if (sl_tls_ctx_new(&cc, &c, err, sizeof err) != SL_OK)
            continue; /* below OpenSSL's security level: no one can offer it */
        struct pair p;
        pair_open(&p, cc, server_ctx(SL_TLS_VERIFY_OFF, NULL, NULL), "localhost");
        if (p.rc[1] == SL_OK)
            fail_msg("the default server accepted %s (%s)", name, sl_tls_cipher(p.s));
        pair_close(&p);
        if (sl_tls_ctx_new(&sc, &sv, err, sizeof err) != SL_OK)
            continue;
        struct sl_tls_conf dc = { .role = SL_TLS_CLIENT };
        pair_open(&p, ctx_or_fail(&dc), sc, "localhost");
        if (p.rc[0] == SL_OK)
            fail_msg("the default client accepted %s", name);
        /* the same suite chosen on both ends: tls_ciphers overrides */
        if (strcmp(name, "ECDHE-ECDSA-AES128-SHA256") == 0) {
            struct pair q;
            sl_tls_ctx_ref(sc);
            pair_open(&q, ctx_or_fail(&c), sc, "localhost");
            assert_int_equal(q.rc[0], SL_OK);
            assert_string_equal(sl_tls_cipher(q.c), "ECDHE-ECDSA-AES128-SHA256");
            pair_close(&q);
        }
        pair_close(&p);
    }
    SSL_CTX_free(all);
    assert_true(tried >= 10);
    assert_true(cbc_ecdsa >= 4); /* the ones an EC certificate could have served */

    /* defaults on both ends, TLS 1.2: an AEAD suite; TLS 1.3 too */
    struct sl_tls_conf c12 = { .role = SL_TLS_CLIENT, .protocols = "TLSv1.2" };
    struct pair p;
    pair_open(&p, ctx_or_fail(&c12), server_ctx(SL_TLS_VERIFY_OFF, NULL, NULL), "localhost");
    assert_int_equal(p.rc[1], SL_OK);
    assert_string_equal(sl_tls_version(p.s), "TLSv1.2");
    assert_string_equal(sl_tls_cipher(p.s), "ECDHE-ECDSA-AES128-GCM-SHA256");
    pair_close(&p);
    pair_open(&p, client_ctx(SL_TLS_VERIFY_OFF, NULL, 0, NULL),
              server_ctx(SL_TLS_VERIFY_OFF, NULL, NULL), "localhost");
    assert_int_equal(p.rc[1], SL_OK);
    assert_non_null(strstr(sl_tls_cipher(p.s), "TLS_"));
    pair_close(&p);
    /* a list of TLS 1.3 suites only keeps the TLS 1.2 default */
    struct sl_tls_conf only13 = { .role = SL_TLS_CLIENT, .protocols = "TLSv1.2",
                                  .ciphers = "TLS_AES_128_GCM_SHA256" };
    pair_open(&p, ctx_or_fail(&only13), server_ctx(SL_TLS_VERIFY_OFF, NULL, NULL), "localhost");
    assert_int_equal(p.rc[1], SL_OK);
    assert_string_equal(sl_tls_cipher(p.s), "ECDHE-ECDSA-AES128-GCM-SHA256");
    pair_close(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tls_handshake_and_data),
        cmocka_unit_test(test_tls_ip_name_and_no_sni),
        cmocka_unit_test(test_tls_alpn),
        cmocka_unit_test(test_tls_mutual),
        cmocka_unit_test(test_tls_peer_name_from_san),
        cmocka_unit_test(test_tls_peer_id),
        cmocka_unit_test(test_tls_refusals),
        cmocka_unit_test(test_tls_plaintext_fails_fast),
        cmocka_unit_test(test_tls_close_notify_and_eof),
        cmocka_unit_test(test_tls_bounds),
        cmocka_unit_test(test_tls_protocols_and_reload),
        cmocka_unit_test(test_tls_peek_drop_and_idle_memory),
        cmocka_unit_test(test_tls_client_resumes),
        cmocka_unit_test(test_tls_default_ciphers_aead_only),
    };
    return cmocka_run_group_tests(tests, make_certs, remove_certs);
}

/* sluice integration tests — TLS on listeners and to upstreams.
 *
 * Certificates are made at test time by the `openssl` command (tests/certs.h)
 * in a temp directory: a throwaway CA, server certificates for localhost /
 * 127.0.0.1 (CN server-alice, and server2-alice for the reload), a client
 * certificate (CN client-alice), an expired client certificate, an expired
 * server certificate and one for another host (wrong.example). The upstream
 * is a real redis-server serving TLS (sluice is given only its TLS port);
 * two more serve the expired and the other host's certificate. One sluice with:
 *   t  -> TLS in (client certificate optional), TLS out; identity = tls_subject,
 *         3 requests a minute per identity
 *   m  -> TLS in with tls_verify_client = on
 *   w  -> TLS out with upstream_tls_sni = wrong.example (refused by verification)
 *   e  -> TLS out to the upstream with the expired certificate
 *   x  -> TLS out to the upstream whose certificate names wrong.example
 *   h  -> protocol = http, TLS in (ALPN http/1.1) to a plain HTTP upstream
 *   c  -> protocol = tcp, TLS in and TLS out
 *   p  -> plaintext in; reloads turn TLS on with bad files, then good ones
 *   n  -> TLS in (client certificate required), identity = tls_subject only,
 *         2 requests a minute per identity
 * The last test swaps the server certificate's files and sends SIGHUP: new
 * connections get the new certificate, an open one keeps working. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "certs.h"
#include "integration/harness.h"

static struct th_certs certs;
static struct th_proc sluice_p, pyup, redis_p, redis_expired, redis_wrong;
static int rport, rport_expired, rport_wrong; /* the upstreams' TLS ports */
static int tport, mport, wport, eport, xport, hport, cport, pport, nport, admin_port;

static const char *path(const char *name)
{
    return th_certs_path(&certs, name);
}

/* Runs <cmd> through the shell; its first line of output into <out>. */
static int run(const char *cmd, char *out, size_t cap)
{
    FILE *f = popen(cmd, "r");
    if (f == NULL)
        return -1;
    out[0] = '\0';
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    return pclose(f);
}

static int make_certs(void)
{
    static const struct th_cert want[] = {
        { "server", "/CN=server-alice", TH_SAN_LOCAL, 0 },
        { "server2", "/CN=server2-alice", TH_SAN_LOCAL, 0 },
        { "client", "/CN=client-alice", NULL, TH_CERT_CLIENT },
        { "client-expired", "/CN=client-expired", NULL, TH_CERT_CLIENT | TH_CERT_EXPIRED },
        { "server-expired", "/CN=localhost", TH_SAN_LOCAL, TH_CERT_EXPIRED },
        { "wronghost", "/CN=wrong.example", "DNS:wrong.example", 0 },
    };
    if (th_certs_make(&certs, want, sizeof want / sizeof want[0]) != 0)
        return -1;
    /* two URI SANs (no CN) alike in their first 300 bytes; a CN that
     * C-string code reads as client-alice; two CNs */
    static char uri[2][400];
    for (int i = 0; i < 2; i++) {
        int n = snprintf(uri[i], sizeof uri[i], "spiffe://sluice.test/");
        memset(uri[i] + n, 'a', 300);
        snprintf(uri[i] + n + 300, sizeof uri[i] - (size_t)n - 300, "/%d", i);
    }
    static const char nul_cn[] = "client-alice\0.attacker.example";
    const struct th_raw_cert raw[] = {
        { "long-1", { NULL, NULL }, { 0, 0 }, 2, uri[0], strlen(uri[0]) },
        { "long-2", { NULL, NULL }, { 0, 0 }, 2, uri[1], strlen(uri[1]) },
        { "nul-cn", { nul_cn, NULL }, { sizeof nul_cn - 1, 0 }, 0, NULL, 0 },
        { "two-cn", { "client-alice", "mallory" }, { 12, 7 }, 0, NULL, 0 },
    };
    return th_certs_make_raw(&certs, raw, sizeof raw / sizeof raw[0]);
}

/* The configuration; <p_tls>: lines added to listener p (its TLS keys). */
static void conf_text(char *ini, size_t cap, const char *p_tls)
{
    const char *crt = path("server.pem"), *key = path("server.key"), *ca = path("ca.pem");
    int n = snprintf(ini, cap,
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\n[store]\nurl = local\n"
             "[listener t]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "tls_cert = %s\ntls_key = %s\ntls_ca = %s\n"
             "tls_verify_client = optional\nidentity = tls_subject client_ip\n"
             "upstream_tls = on\nupstream_tls_ca = %s\n"
             "[listener m]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "tls_cert = %s\ntls_key = %s\ntls_ca = %s\n"
             "tls_verify_client = on\nupstream_tls = on\nupstream_tls_ca = %s\n"
             "[listener w]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "upstream_tls = on\nupstream_tls_ca = %s\nupstream_tls_sni = wrong.example\n"
             "[listener e]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "upstream_tls = on\nupstream_tls_ca = %s\n"
             "[listener x]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "upstream_tls = on\nupstream_tls_ca = %s\n"
             "[listener h]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "tls_cert = %s\ntls_key = %s\n"
             "[listener c]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = tcp\n"
             "tls_cert = %s\ntls_key = %s\n"
             "upstream_tls = on\nupstream_tls_ca = %s\n"
             "[listener p]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "upstream_tls = on\nupstream_tls_ca = %s\n%s"
             "[listener n]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "tls_cert = %s\ntls_key = %s\ntls_ca = %s\ntls_verify_client = on\n"
             "identity = tls_subject\nupstream_tls = on\nupstream_tls_ca = %s\n"
             "[limit per-cert]\nlistener = t\nrate = 3/m\nburst = 3\n"
             "match_identity = tls:client-alice\n"
             "[limit per-name]\nlistener = n\nrate = 2/m\nburst = 2\n",
             admin_port, tport, rport, crt, key, ca, ca, mport, rport, crt, key, ca, ca, wport,
             rport, ca, eport, rport_expired, ca, xport, rport_wrong, ca, hport, pyup.port, crt,
             key, cport, rport, crt, key, ca, pport, rport, ca, p_tls, nport, rport, crt, key, ca,
             ca);
    assert_true(n > 0 && (size_t)n < cap);
}

static int group_setup(void **state)
{
    (void)state;
    if (make_certs() < 0)
        return -1;
    if (th_redis_tls_start(&redis_p, &rport, path("server.pem"), path("server.key"),
                           path("ca.pem"), 0) < 0 ||
        th_redis_tls_start(&redis_expired, &rport_expired, path("server-expired.pem"),
                           path("server-expired.key"), path("ca.pem"), 0) < 0 ||
        th_redis_tls_start(&redis_wrong, &rport_wrong, path("wronghost.pem"), path("wronghost.key"),
                           path("ca.pem"), 0) < 0)
        return -1;
    tport = th_free_port();
    mport = th_free_port();
    wport = th_free_port();
    eport = th_free_port();
    xport = th_free_port();
    hport = th_free_port();
    cport = th_free_port();
    pport = th_free_port();
    nport = th_free_port();
    admin_port = th_free_port();
    if (th_pyup_start(&pyup) < 0)
        return -1;
    char ini[8192];
    conf_text(ini, sizeof(ini), "");
    return th_sluice_start(&sluice_p, ini, pport);
}

static int group_teardown(void **state)
{
    (void)state;
    int st = th_stop(&sluice_p);
    th_stop(&pyup);
    th_stop(&redis_p);
    th_stop(&redis_expired);
    th_stop(&redis_wrong);
    th_certs_remove(&certs);
    return st == 0 ? 0 : -1;
}

static void cli(int port, const char *cert, const char *args, char *out, size_t cap)
{
    char cmd[2048];
    if (cert != NULL)
        snprintf(cmd, sizeof(cmd), "redis-cli --tls --cacert %s/ca.pem --cert %s/%s.pem --key %s/%s.key "
                 "-p %d %s 2>&1", certs.dir, certs.dir, cert, certs.dir, cert, port, args);
    else if (strcmp(args, "plain") == 0)
        snprintf(cmd, sizeof(cmd), "redis-cli -p %d ping 2>&1", port);
    else
        snprintf(cmd, sizeof(cmd), "redis-cli --tls --cacert %s -p %d %s 2>&1", path("ca.pem"), port,
                 args);
    run(cmd, out, cap);
}

/* redis-cli --tls through a TLS listener to a TLS-only Redis. */
static void test_tls_in_tls_out(void **state)
{
    (void)state;
    char out[512];
    cli(tport, NULL, "set tls-key hello", out, sizeof(out));
    assert_string_equal(out, "OK\n");
    cli(tport, NULL, "get tls-key", out, sizeof(out));
    assert_string_equal(out, "hello\n");
}

/* Upstream sessions are resumed: after the first connection, the next ones
 * to the same Redis skip the certificate exchange (real redis-server). */
static void test_upstream_sessions_resumed(void **state)
{
    (void)state;
    char out[512];
    const char *m = "sluice_upstream_tls_resumed_total{listener=\"t\"}";
    cli(tport, NULL, "ping", out, sizeof(out)); /* a session to resume, whatever came before */
    double before = th_metric(admin_port, m);
    for (int i = 0; i < 3; i++) {
        cli(tport, NULL, "ping", out, sizeof(out));
        assert_string_equal(out, "PONG\n");
    }
    assert_true(th_metric(admin_port, m) - before >= 3);
}

/* identity = tls_subject: the client certificate's CN is who is limited.
 * (EXISTS: a PING alone on its connection is set-up, never charged.) */
static void test_tls_subject_identity(void **state)
{
    (void)state;
    char out[512];
    for (int i = 0; i < 3; i++) {
        cli(tport, "client", "exists tls-subject-k", out, sizeof(out));
        assert_string_equal(out, "0\n");
    }
    cli(tport, "client", "exists tls-subject-k", out, sizeof(out));
    assert_non_null(strstr(out, "THROTTLED limit 'per-cert' exceeded for 'tls:client-alice'"));
    /* without a certificate: another identity (the client ip), not limited */
    cli(tport, NULL, "ping", out, sizeof(out));
    assert_string_equal(out, "PONG\n");
}

/* The TLS 1.2 default is ECDHE with AEAD only: `openssl s_client` offering
 * only a CBC suite (ECDHE-ECDSA-AES128-SHA256: the certificates here are
 * EC) is refused, the GCM suite of the same key exchange gets in. */
static void test_default_ciphers_aead_only(void **state)
{
    (void)state;
    static const char *const cbc[] = { "ECDHE-ECDSA-AES128-SHA256", "ECDHE-ECDSA-AES256-SHA384",
                                       "ECDHE-ECDSA-AES128-SHA", "ECDHE-ECDSA-AES256-SHA" };
    char cmd[1024], out[8192];
    for (size_t i = 0; i < sizeof cbc / sizeof cbc[0]; i++) {
        snprintf(cmd, sizeof(cmd),
                 "openssl s_client -connect 127.0.0.1:%d -tls1_2 -cipher %s -CAfile %s "
                 "</dev/null 2>&1", hport, cbc[i], path("ca.pem"));
        assert_int_not_equal(run(cmd, out, sizeof(out)), 0);
        assert_non_null(strstr(out, "alert handshake failure"));
    }
    snprintf(cmd, sizeof(cmd),
             "openssl s_client -connect 127.0.0.1:%d -tls1_2 -cipher ECDHE-ECDSA-AES128-GCM-SHA256 "
             "-CAfile %s </dev/null 2>&1", hport, path("ca.pem"));
    assert_int_equal(run(cmd, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "Cipher is ECDHE-ECDSA-AES128-GCM-SHA256"));
    assert_non_null(strstr(out, "Verify return code: 0 (ok)"));
}

/* A certificate's whole name is its identity: two URI SANs alike in their
 * first 300 bytes are two identities (each its own 2 a minute); a CN with
 * a NUL inside (client-alice\0.attacker.example) or two CNs are never
 * charged as anyone: the connection is closed after the handshake,
 * counted and logged. */
static void test_tls_subject_whole_name(void **state)
{
    (void)state;
    char out[512];
    /* EXISTS: a PING alone on its connection is set-up, never charged */
    for (int i = 0; i < 2; i++) {
        cli(nport, "long-1", "exists tls-name-k", out, sizeof(out));
        assert_string_equal(out, "0\n");
    }
    cli(nport, "long-1", "exists tls-name-k", out, sizeof(out));
    assert_non_null(strstr(out, "THROTTLED limit 'per-name' exceeded for 'tls#"));
    char first[128];
    snprintf(first, sizeof first, "%s", strstr(out, "tls#"));
    cli(nport, "long-2", "exists tls-name-k", out, sizeof(out)); /* another identity */
    assert_string_equal(out, "0\n");
    cli(nport, "long-2", "exists tls-name-k", out, sizeof(out));
    cli(nport, "long-2", "exists tls-name-k", out, sizeof(out));
    assert_non_null(strstr(out, "THROTTLED limit 'per-name' exceeded for 'tls#"));
    assert_string_not_equal(strstr(out, "tls#"), first);

    const char *refused = "sluice_tls_identity_refused_total{listener=\"t\"}";
    double before = th_metric(admin_port, refused);
    assert_true(before >= 0);
    int logged = th_log_count(sluice_p.log, "client certificate refused as an identity");
    cli(tport, "nul-cn", "ping", out, sizeof(out));
    assert_null(strstr(out, "PONG"));
    assert_null(strstr(out, "client-alice"));
    cli(tport, "two-cn", "ping", out, sizeof(out));
    assert_null(strstr(out, "PONG"));
    assert_true(th_metric(admin_port, refused) == before + 2);
    assert_int_equal(th_log_wait(sluice_p.log, "client certificate refused as an identity",
                                 logged + 1, TH_MS), 0);
    assert_true(th_log_count(sluice_p.log, "name=\"client-alice?.attacker.example\"") >= 1);
    /* a listener that does not use the name lets the same certificate in */
    cli(mport, "nul-cn", "ping", out, sizeof(out));
    assert_string_equal(out, "PONG\n");
}

/* tls_verify_client = on: a client without a certificate is refused. */
static void test_mtls_refuses_no_cert(void **state)
{
    (void)state;
    char out[512];
    double before = th_metric(admin_port, "sluice_tls_handshake_failures_total{listener=\"m\"}");
    cli(mport, NULL, "ping", out, sizeof(out));
    assert_null(strstr(out, "PONG"));
    cli(mport, "client", "ping", out, sizeof(out));
    assert_string_equal(out, "PONG\n");
    double after = th_metric(admin_port, "sluice_tls_handshake_failures_total{listener=\"m\"}");
    assert_true(after >= before + 1);
}

/* 1 when `openssl verify` finds <file> signed by the CA but expired: the
 * refusals below are then the dates', nothing else. */
static int has_expired(const char *file)
{
    char cmd[1024], out[512];
    snprintf(cmd, sizeof(cmd), "openssl verify -CAfile %s %s 2>&1", path("ca.pem"), path(file));
    run(cmd, out, sizeof(out));
    return strstr(out, "certificate has expired") != NULL;
}

/* tls_verify_client = on: a client whose certificate has expired (signed
 * by the right CA, valid only on 2020-01-01) is refused and counted; a
 * valid certificate works on the same listener right after. */
static void test_mtls_refuses_expired_cert(void **state)
{
    (void)state;
    char out[512];
    assert_true(has_expired("client-expired.pem"));
    const char *failures = "sluice_tls_handshake_failures_total{listener=\"m\"}";
    double before = th_metric(admin_port, failures);
    assert_true(before >= 0);
    cli(mport, "client-expired", "ping", out, sizeof(out));
    assert_null(strstr(out, "PONG"));
    /* the server counts the refusal before it closes: no wait needed */
    assert_true(th_metric(admin_port, failures) == before + 1);
    /* and tells the client why, in a TLS alert (redis-cli says only that
     * the server closed): openssl s_client prints it */
    char cmd[1024], alert[4096];
    snprintf(cmd, sizeof(cmd),
             "echo PING | openssl s_client -connect 127.0.0.1:%d -CAfile %s -cert %s -key %s "
             "-quiet 2>&1", mport, path("ca.pem"), path("client-expired.pem"),
             path("client-expired.key"));
    run(cmd, alert, sizeof(alert));
    assert_non_null(strstr(alert, "alert certificate expired"));
    assert_null(strstr(alert, "PONG"));
    assert_true(th_metric(admin_port, failures) == before + 2);
    cli(mport, "client", "ping", out, sizeof(out));
    assert_string_equal(out, "PONG\n");
    assert_true(th_metric(admin_port, failures) == before + 2);
}

/* Plaintext to a TLS port: closed at once, not left hanging. */
static void test_plaintext_closed(void **state)
{
    (void)state;
    int fd = th_connect(tport);
    assert_true(fd >= 0);
    th_write_all(fd, "PING\r\n", 6);
    uint64_t t0 = th_now_ms();
    assert_int_equal(th_wait_eof(fd, 3000), 1);
    assert_true(th_now_ms() - t0 < 2000);
    close(fd);
}

/* The upstream's certificate does not name the SNI sluice was told to
 * expect: the upstream handshake is refused, the client told so. */
static void test_wrong_sni_refused(void **state)
{
    (void)state;
    char out[512];
    cli(wport, NULL, "plain", out, sizeof(out));
    assert_non_null(strstr(out, "upstream unavailable"));
}

/* Upstreams whose certificate does not verify: one expired, one naming
 * another host (wrong.example, while sluice checks the address it dials,
 * 127.0.0.1). Each is refused like an unreachable upstream: the client gets
 * "-ERR upstream unavailable" (docs/interface.md) and the listener counts
 * an upstream failure. */
static void upstream_refused(int port, const char *listener)
{
    char out[512], sample[128];
    snprintf(sample, sizeof(sample), "sluice_upstream_failures_total{listener=\"%s\"}", listener);
    double before = th_metric(admin_port, sample);
    assert_true(before >= 0);
    cli(port, NULL, "plain", out, sizeof(out));
    assert_non_null(strstr(out, "upstream unavailable"));
    assert_true(th_metric(admin_port, sample) == before + 1);
}

static void test_upstream_expired_refused(void **state)
{
    (void)state;
    assert_true(has_expired("server-expired.pem"));
    upstream_refused(eport, "e");
}

static void test_upstream_wrong_host_refused(void **state)
{
    (void)state;
    upstream_refused(xport, "x");
}

/* HTTPS: curl --cacert against an http listener speaking TLS; ALPN
 * settles on http/1.1 and the plain HTTP upstream answers through it. */
static void test_https_curl(void **state)
{
    (void)state;
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof(cmd),
             "curl -sS -v --cacert %s -o /dev/null -w 'code=%%{http_code} v=%%{http_version}\\n' "
             "https://localhost:%d/echo 2>&1", path("ca.pem"), hport);
    assert_int_equal(run(cmd, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "code=200 v=1.1"));
    assert_non_null(strstr(out, "ALPN: server accepted http/1.1"));
}

/* A tcp listener: TLS in, TLS out, bytes relayed between them. */
static void test_tcp_listener_tls(void **state)
{
    (void)state;
    char out[512];
    cli(cport, NULL, "ping", out, sizeof(out));
    assert_string_equal(out, "PONG\n");
}

/* One TLS client connection to tport, verified against the CA. */
static SSL *tls_open(SSL_CTX *ctx, int *fd)
{
    *fd = th_connect(tport);
    assert_true(*fd >= 0);
    SSL *s = SSL_new(ctx);
    assert_non_null(s);
    SSL_set_fd(s, *fd);
    SSL_set_tlsext_host_name(s, "localhost");
    SSL_set1_host(s, "localhost");
    assert_int_equal(SSL_connect(s), 1);
    return s;
}

static void tls_ping(SSL *s)
{
    char buf[16] = "";
    assert_int_equal(SSL_write(s, "PING\r\n", 6), 6);
    assert_true(SSL_read(s, buf, sizeof(buf) - 1) >= 5);
    assert_memory_equal(buf, "+PONG", 5);
}

/* The peer certificate's subject CN of <s>, in <out>. */
static void peer_cn(SSL *s, char *out, size_t cap)
{
    X509 *x = SSL_get1_peer_certificate(s);
    assert_non_null(x);
    X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, out, (int)cap);
    X509_free(x);
}

/* Writes <text> as sluice_p's configuration (whole: renamed into place). */
static void rewrite_conf(const char *text)
{
    char tmp[300];
    snprintf(tmp, sizeof(tmp), "%s.new", sluice_p.conf);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(rename(tmp, sluice_p.conf), 0);
}

/* Rewrites the configuration with TLS on listener p (<cert> and <key>:
 * files in the certificates' directory), sends SIGHUP and waits for its
 * outcome: "msg=reloaded" or "msg=\"reload failed". */
static void reload_p(const char *cert, const char *key, const char *outcome)
{
    char ini[8192], keys[1024];
    snprintf(keys, sizeof(keys), "tls_cert = %s\ntls_key = %s\n", path(cert), path(key));
    conf_text(ini, sizeof(ini), keys);
    rewrite_conf(ini);
    int before = th_log_count(sluice_p.log, outcome);
    assert_int_equal(kill(sluice_p.pid, SIGHUP), 0);
    assert_int_equal(th_log_wait(sluice_p.log, outcome, before + 1, TH_MS), 0);
}

/* A reload turning TLS on for p with files that do not load fails, the
 * log says <why>, and p serves plaintext to a new connection. */
static void reload_p_refused(const char *cert, const char *key, const char *why)
{
    char out[512];
    reload_p(cert, key, "msg=\"reload failed");
    assert_true(th_log_count(sluice_p.log, why) >= 1);
    assert_true(th_running(&sluice_p, NULL));
    cli(pport, NULL, "plain", out, sizeof(out));
    assert_string_equal(out, "PONG\n");
}

/* Listener p serves plaintext; a reload turns TLS on with files that do
 * not load (a key that is not the certificate's, then a certificate that
 * is not there): each reload fails, says why, and p keeps serving
 * plaintext to new connections. With good files the next reload applies:
 * TLS from then on, plaintext closed. */
static void test_reload_to_tls_with_bad_files(void **state)
{
    (void)state;
    char out[512];
    cli(pport, NULL, "plain", out, sizeof(out));
    assert_string_equal(out, "PONG\n");
    reload_p_refused("server.pem", "client.key", "does not match tls_cert");
    reload_p_refused("missing.pem", "server.key", "missing.pem: cannot read");

    reload_p("server.pem", "server.key", "msg=reloaded");
    cli(pport, NULL, "ping", out, sizeof(out));
    assert_string_equal(out, "PONG\n");
    int fd = th_connect(pport); /* plaintext to what is a TLS port now */
    assert_true(fd >= 0);
    th_write_all(fd, "PING\r\n", 6);
    assert_int_equal(th_wait_eof(fd, 3000), 1);
    close(fd);
}

/* SIGHUP rereads the certificates: a new connection gets the new one, a
 * connection open before keeps working with the old. */
static void test_reload_swaps_certificate(void **state)
{
    (void)state;
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    assert_non_null(ctx);
    char cn[128];
    assert_int_equal(SSL_CTX_load_verify_locations(ctx, path("ca.pem"), NULL), 1);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    int fd1, fd2;
    SSL *old = tls_open(ctx, &fd1);
    tls_ping(old);
    peer_cn(old, cn, sizeof(cn));
    assert_string_equal(cn, "server-alice");
    char cmd[1024], out[256];
    snprintf(cmd, sizeof(cmd), "cd %s && cp server2.pem server.pem && cp server2.key server.key",
             certs.dir);
    assert_int_equal(run(cmd, out, sizeof(out)), 0);
    int before = th_log_count(sluice_p.log, "msg=reloaded");
    kill(sluice_p.pid, SIGHUP);
    assert_int_equal(th_log_wait(sluice_p.log, "msg=reloaded", before + 1, TH_MS), 0);
    SSL *fresh = tls_open(ctx, &fd2);
    tls_ping(fresh);
    peer_cn(fresh, cn, sizeof(cn));
    assert_string_equal(cn, "server2-alice");
    tls_ping(old); /* still up, on the certificate it started with */
    peer_cn(old, cn, sizeof(cn));
    assert_string_equal(cn, "server-alice");
    SSL_free(old);
    SSL_free(fresh);
    close(fd1);
    close(fd2);
    SSL_CTX_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tls_in_tls_out),
        cmocka_unit_test(test_upstream_sessions_resumed),
        cmocka_unit_test(test_tls_subject_identity),
        cmocka_unit_test(test_default_ciphers_aead_only),
        cmocka_unit_test(test_tls_subject_whole_name),
        cmocka_unit_test(test_mtls_refuses_no_cert),
        cmocka_unit_test(test_mtls_refuses_expired_cert),
        cmocka_unit_test(test_plaintext_closed),
        cmocka_unit_test(test_wrong_sni_refused),
        cmocka_unit_test(test_upstream_expired_refused),
        cmocka_unit_test(test_upstream_wrong_host_refused),
        cmocka_unit_test(test_https_curl),
        cmocka_unit_test(test_tcp_listener_tls),
        cmocka_unit_test(test_reload_to_tls_with_bad_files),
        cmocka_unit_test(test_reload_swaps_certificate),
    };
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

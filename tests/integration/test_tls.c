/* sluice integration tests — TLS on listeners and to upstreams.
 *
 * Certificates are made at test time by the `openssl` command (tests/certs.h)
 * in a temp directory: a throwaway CA, server certificates for localhost /
 * 127.0.0.1 (CN server-alice, and server2-alice for the reload) and a client
 * certificate (CN client-alice). The upstream is a real redis-server serving
 * TLS (sluice is given only its TLS port). One sluice with:
 *   t  -> TLS in (client certificate optional), TLS out; identity = tls_subject,
 *         3 requests a minute per identity
 *   m  -> TLS in with tls_verify_client = on
 *   w  -> TLS out with upstream_tls_sni = wrong.example (refused by verification)
 *   h  -> protocol = http, TLS in (ALPN http/1.1) to a plain HTTP upstream
 *   c  -> protocol = tcp, TLS in and TLS out
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
static struct th_proc sluice_p, pyup, redis_p;
static int rport; /* the upstream's TLS port */
static int tport, mport, wport, hport, cport, admin_port;

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
    };
    return th_certs_make(&certs, want, sizeof want / sizeof want[0]);
}

/* The configuration. */
static void conf_text(char *ini, size_t cap)
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
             "[listener h]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "tls_cert = %s\ntls_key = %s\n"
             "[listener c]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = tcp\n"
             "tls_cert = %s\ntls_key = %s\n"
             "upstream_tls = on\nupstream_tls_ca = %s\n"
             "[limit per-cert]\nlistener = t\nrate = 3/m\nburst = 3\n"
             "match_identity = tls:client-alice\n",
             admin_port, tport, rport, crt, key, ca, ca, mport, rport, crt, key, ca, ca, wport,
             rport, ca, hport, pyup.port, crt, key, cport, rport, crt, key, ca);
    assert_true(n > 0 && (size_t)n < cap);
}

static int group_setup(void **state)
{
    (void)state;
    if (make_certs() < 0)
        return -1;
    if (th_redis_tls_start(&redis_p, &rport, path("server.pem"), path("server.key"),
                           path("ca.pem"), 0) < 0)
        return -1;
    tport = th_free_port();
    mport = th_free_port();
    wport = th_free_port();
    hport = th_free_port();
    cport = th_free_port();
    admin_port = th_free_port();
    if (th_pyup_start(&pyup) < 0)
        return -1;
    char ini[8192];
    conf_text(ini, sizeof(ini));
    return th_sluice_start(&sluice_p, ini, wport);
}

static int group_teardown(void **state)
{
    (void)state;
    int st = th_stop(&sluice_p);
    th_stop(&pyup);
    th_stop(&redis_p);
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

/* identity = tls_subject: the client certificate's CN is who is limited. */
static void test_tls_subject_identity(void **state)
{
    (void)state;
    char out[512];
    for (int i = 0; i < 3; i++) {
        cli(tport, "client", "ping", out, sizeof(out));
        assert_string_equal(out, "PONG\n");
    }
    cli(tport, "client", "ping", out, sizeof(out));
    assert_non_null(strstr(out, "THROTTLED limit 'per-cert' exceeded for 'tls:client-alice'"));
    /* without a certificate: another identity (the client ip), not limited */
    cli(tport, NULL, "ping", out, sizeof(out));
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
        cmocka_unit_test(test_tls_subject_identity),
        cmocka_unit_test(test_mtls_refuses_no_cert),
        cmocka_unit_test(test_plaintext_closed),
        cmocka_unit_test(test_wrong_sni_refused),
        cmocka_unit_test(test_https_curl),
        cmocka_unit_test(test_tcp_listener_tls),
        cmocka_unit_test(test_reload_swaps_certificate),
    };
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

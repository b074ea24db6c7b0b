/* sluice integration tests — the PROXY protocol on client connections
 * (proxy_protocol = v1 | v2 with trusted_proxies).
 *
 * The headers are written by the test over a raw socket, so every byte and
 * every split is the test's choice. One sluice, shared, with:
 *   one  -> redis, proxy_protocol = v1, trusted 127.0.0.0/8, limit ip_one
 *   two  -> redis, proxy_protocol = v2, trusted 127.0.0.1, limit ip_two
 *   far  -> redis, proxy_protocol = v1, trusted 192.0.2.0/24 only (the
 *           test's loopback peer is not trusted)
 *   late -> redis, proxy_protocol = v1, header_timeout = 1s
 *   echo -> tcp to an echo server, proxy_protocol = v1
 *   pass -> the same, and upstream_proxy_protocol = v1 (the echo server
 *           sends back the header sluice wrote)
 *   tell -> tcp to the echo server, upstream_proxy_protocol = v2 only
 *   web  -> http to an upstream that answers with the X-Forwarded-For it
 *           got, proxy_protocol = v1
 *   tls  -> redis, TLS on the listener, proxy_protocol = v2 (the header
 *           comes first, in clear), limit ip_tls
 * The header's source address shows as the identity in /stats. Last, the
 * headers of a real balancer: HAProxy's send-proxy and send-proxy-v2 in
 * front of one and two, and nginx's stream proxy_protocol in front of one
 * (each skipped when not installed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/ssl.h>

#include "certs.h"
#include "integration/harness.h"

static struct th_proc redis_p, sluice_p;
static pid_t echo_pid, xff_pid;
static int p_one, p_two, p_far, p_late, p_echo, p_pass, p_tell, p_tls, p_web, admin;
static struct th_certs certs;

/* A command the limits charge (PING is not), and what an empty Redis answers. */
static const char GETK[] = "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
#define NIL "$-1\r\n"

/* An HTTP upstream: each request is answered 200 with the value of the
 * X-Forwarded-For field it came with (empty without one). */
static void serve_xff(int lfd, void *arg)
{
    (void)arg;
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0)
            continue;
        char req[4096];
        size_t n = 0;
        while (n < sizeof(req) - 1) {
            ssize_t r = read(fd, req + n, sizeof(req) - 1 - n);
            if (r <= 0)
                break;
            n += (size_t)r;
            req[n] = '\0';
            if (strstr(req, "\r\n\r\n") != NULL)
                break;
        }
        req[n] = '\0';
        const char *v = strstr(req, "X-Forwarded-For: ");
        size_t vl = 0;
        if (v != NULL) {
            v += 17;
            vl = strcspn(v, "\r");
        }
        char resp[4200];
        int m = snprintf(resp, sizeof(resp),
                         "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%.*s",
                         vl, (int)vl, v ? v : "");
        th_write_all(fd, resp, (size_t)m);
        close(fd);
    }
}

static int group_setup(void **state)
{
    (void)state;
    if (th_redis_start(&redis_p, NULL) != 0)
        return -1;
    int echo_up = 0;
    echo_pid = th_fork_server(&echo_up, th_serve_echo, NULL);
    int xff_up = 0;
    xff_pid = th_fork_server(&xff_up, serve_xff, NULL);
    if (echo_pid < 0 || xff_pid < 0)
        return -1;
    p_web = th_free_port();
    p_one = th_free_port();
    p_two = th_free_port();
    p_far = th_free_port();
    p_late = th_free_port();
    p_echo = th_free_port();
    static const struct th_cert want[] = { { "server", "/CN=localhost", TH_SAN_LOCAL, 0 } };
    if (th_certs_make(&certs, want, 1) != 0)
        return -1;
    p_tls = th_free_port();
    p_pass = th_free_port();
    p_tell = th_free_port();
    admin = th_free_port();
    char ini[3072];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\n"
             "[listener one]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "identity = client_ip\nproxy_protocol = v1\ntrusted_proxies = 127.0.0.0/8\n"
             "[listener two]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "identity = client_ip\nproxy_protocol = v2\ntrusted_proxies = 127.0.0.1\n"
             "[listener far]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "proxy_protocol = v1\ntrusted_proxies = 192.0.2.0/24\n"
             "[listener late]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "proxy_protocol = v1\ntrusted_proxies = 127.0.0.1\nheader_timeout = 1s\n"
             "[listener echo]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = tcp\n"
             "proxy_protocol = v1\ntrusted_proxies = 127.0.0.1\n"
             "[listener pass]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = tcp\n"
             "proxy_protocol = v1\ntrusted_proxies = 127.0.0.1\nupstream_proxy_protocol = v1\n"
             "[listener tell]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = tcp\n"
             "upstream_proxy_protocol = v2\n"
             "[listener tls]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "identity = client_ip\nproxy_protocol = v2\ntrusted_proxies = 127.0.0.1\n"
             "tls_cert = %s\ntls_key = %s\n"
             "[limit ip_tls]\nlistener = tls\nrate = 1000/s\nburst = 1000\n"
             "[listener web]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "proxy_protocol = v1\ntrusted_proxies = 127.0.0.1\n"
             "[limit ip_one]\nlistener = one\nrate = 1000/s\nburst = 1000\n"
             "[limit ip_two]\nlistener = two\nrate = 1000/s\nburst = 1000\n",
             admin, p_one, redis_p.port, p_two, redis_p.port, p_far, redis_p.port, p_late,
             redis_p.port, p_echo, echo_up, p_pass, echo_up, p_tell, echo_up, p_tls,
             redis_p.port, th_certs_path(&certs, "server.pem"), th_certs_path(&certs, "server.key"), p_web,
             xff_up);
    return th_sluice_start(&sluice_p, ini, p_echo);
}

static int group_teardown(void **state)
{
    (void)state;
    int st = th_stop(&sluice_p);
    th_kill_server(echo_pid);
    th_kill_server(xff_pid);
    th_stop(&redis_p);
    th_certs_remove(&certs);
    return st == 0 ? 0 : -1;
}

/* 1 when /stats names identity <id> (e.g. "ip:203.0.113.7"). */
static int stats_has(const char *id)
{
    char *body = th_http_get(admin, "/stats");
    char q[96];
    snprintf(q, sizeof(q), "\"%s\"", id);
    int has = body != NULL && strstr(body, q) != NULL;
    if (!has && body != NULL)
        fprintf(stderr, "/stats without %s: %.3000s\n", id, body);
    free(body);
    return has;
}

static double refused(const char *listener)
{
    char s[128];
    snprintf(s, sizeof(s), "sluice_proxy_protocol_refused_total{listener=\"%s\"}", listener);
    return th_metric(admin, s);
}

/* upstream_proxy_protocol = v1: the upstream's first bytes are a header
 * with the address the client's own header gave, and the listener's. */
static void test_upstream_v1_passes_header_source(void **state)
{
    (void)state;
    int fd = th_connect(p_pass);
    assert_true(fd >= 0);
    TH_SEND(fd, "PROXY TCP4 203.0.113.7 127.0.0.1 40000 6379\r\nhello");
    char want[128];
    int n = snprintf(want, sizeof(want), "PROXY TCP4 203.0.113.7 127.0.0.1 40000 %d\r\nhello",
                     p_pass);
    assert_int_equal(th_expect(fd, want, (size_t)n, TH_MS), 0);
    close(fd);
}

/* upstream_proxy_protocol = v2 without one coming in: the peer's address
 * (127.0.0.1 and its port) to the listener's. */
static void test_upstream_v2_from_peer(void **state)
{
    (void)state;
    int fd = th_connect(p_tell);
    assert_true(fd >= 0);
    TH_SEND(fd, "hi");
    unsigned char got[30];
    assert_int_equal(th_read_n(fd, got, sizeof(got), TH_MS), sizeof(got));
    static const unsigned char head[16] = { 13, 10, 13, 10, 0, 13, 10, 'Q', 'U', 'I', 'T', 10,
                                            0x21, 0x11, 0, 12 };
    assert_memory_equal(got, head, 16);
    assert_memory_equal(got + 16, ((const unsigned char[]){ 127, 0, 0, 1, 127, 0, 0, 1 }), 8);
    assert_int_equal(got[26] << 8 | got[27], p_tell);
    assert_memory_equal(got + 28, "hi", 2);
    close(fd);
}

static size_t v2_tcp4(unsigned char *out, const unsigned char src[4], size_t tlv);

/* http: the header's source is the client the upstream is told of. */
static void test_http_forwarded_for(void **state)
{
    (void)state;
    int fd = th_connect(p_web);
    assert_true(fd >= 0);
    TH_SEND(fd, "PROXY TCP4 198.51.100.3 127.0.0.1 40000 80\r\n"
                "GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    char buf[2048];
    int eof = 0;
    size_t n = th_read_until_eof(fd, buf, sizeof(buf) - 1, TH_MS, &eof);
    buf[n] = '\0';
    close(fd);
    assert_non_null(strstr(buf, "HTTP/1.1 200"));
    assert_non_null(strstr(buf, "\r\n\r\n198.51.100.3"));
}

/* TLS on the listener: the PROXY header first in clear, then the
 * handshake, then the command. */
static void test_tls_after_header(void **state)
{
    (void)state;
    int fd = th_connect(p_tls);
    assert_true(fd >= 0);
    unsigned char msg[64];
    size_t n = v2_tcp4(msg, (const unsigned char[]){ 203, 0, 113, 44 }, 0);
    assert_int_equal(th_write_all(fd, msg, n), 0);
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    assert_non_null(ctx);
    SSL *s = SSL_new(ctx);
    assert_non_null(s);
    SSL_set_fd(s, fd);
    assert_int_equal(SSL_connect(s), 1); /* not verified: only the order matters here */
    assert_int_equal(SSL_write(s, GETK, (int)sizeof(GETK) - 1), (int)sizeof(GETK) - 1);
    char buf[16] = "";
    int got = 0;
    while (got < 5) {
        int r = SSL_read(s, buf + got, (int)sizeof(buf) - 1 - got);
        assert_true(r > 0);
        got += r;
    }
    assert_memory_equal(buf, NIL, 5);
    SSL_free(s);
    SSL_CTX_free(ctx);
    close(fd);
    assert_true(stats_has("ip:203.0.113.44"));
}

/* A version 2 header for TCP over IPv4 from <src> (4 bytes) port 40000,
 * plus <tlv> bytes of TLVs; returns its length. */
static size_t v2_tcp4(unsigned char *out, const unsigned char src[4], size_t tlv)
{
    static const unsigned char sig[12] = { 13, 10, 13, 10, 0, 13, 10, 'Q', 'U', 'I', 'T', 10 };
    memcpy(out, sig, 12);
    out[12] = 0x21; /* version 2, PROXY */
    out[13] = 0x11; /* TCP over IPv4 */
    size_t len = 12 + tlv;
    out[14] = (unsigned char)(len >> 8);
    out[15] = (unsigned char)len;
    memcpy(out + 16, src, 4);
    memcpy(out + 20, (const unsigned char[]){ 127, 0, 0, 1 }, 4);
    out[24] = 40000 >> 8;
    out[25] = 40000 & 0xff;
    out[26] = 6379 >> 8;
    out[27] = 6379 & 0xff;
    for (size_t i = 0; i < tlv; i++)
        out[28 + i] = i == 0 ? 0x04 /* PP2_TYPE_NOOP */ : 0;
    if (tlv >= 3) { /* one NOOP TLV covering the rest */
        out[29] = (unsigned char)((tlv - 3) >> 8);
        out[30] = (unsigned char)(tlv - 3);
    }
    return 16 + len;
}

/* v1: header and the first command in one write; the command is not lost
 * and the header's source is the client_ip identity. */
static void test_v1_header_then_command(void **state)
{
    (void)state;
    int fd = th_connect(p_one);
    assert_true(fd >= 0);
    char msg[256];
    int n = snprintf(msg, sizeof(msg), "PROXY TCP4 203.0.113.7 127.0.0.1 40000 6379\r\n%s", GETK);
    assert_int_equal(th_write_all(fd, msg, (size_t)n), 0);
    TH_EXPECT(fd, NIL);
    close(fd);
    assert_true(stats_has("ip:203.0.113.7"));
}

static void test_v1_tcp6(void **state)
{
    (void)state;
    int fd = th_connect(p_one);
    assert_true(fd >= 0);
    TH_SEND(fd, "PROXY TCP6 2001:db8::17 ::1 40000 6379\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
    TH_EXPECT(fd, NIL);
    close(fd);
    assert_true(stats_has("ip:2001:db8::17"));
}

/* The header arrives in two writes, the command in a third: sluice waits
 * for the rest of the header without answering or closing. */
static void test_v1_split(void **state)
{
    (void)state;
    int fd = th_connect(p_one);
    assert_true(fd >= 0);
    TH_SEND(fd, "PROXY TCP4 203.0");
    assert_int_equal(th_quiet(fd, 200), 1);
    TH_SEND(fd, ".113.9 127.0.0.1 40000 6379\r");
    assert_int_equal(th_quiet(fd, 100), 1);
    TH_SEND(fd, "\n*2\r\n$3\r\nGE");
    TH_SEND(fd, "T\r\n$1\r\nk\r\n");
    TH_EXPECT(fd, NIL);
    close(fd);
    assert_true(stats_has("ip:203.0.113.9"));
}

/* v2 with a TLV, the command in the same write. */
static void test_v2_header_then_command(void **state)
{
    (void)state;
    int fd = th_connect(p_two);
    assert_true(fd >= 0);
    unsigned char msg[256];
    size_t n = v2_tcp4(msg, (const unsigned char[]){ 203, 0, 113, 8 }, 7);
    memcpy(msg + n, GETK, sizeof(GETK) - 1);
    assert_int_equal(th_write_all(fd, msg, n + sizeof(GETK) - 1), 0);
    TH_EXPECT(fd, NIL);
    close(fd);
    assert_true(stats_has("ip:203.0.113.8"));
}

/* v2 byte by byte: every split point is waited through. */
static void test_v2_bytewise(void **state)
{
    (void)state;
    int fd = th_connect(p_two);
    assert_true(fd >= 0);
    unsigned char msg[64];
    size_t n = v2_tcp4(msg, (const unsigned char[]){ 203, 0, 113, 10 }, 0);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(th_write_all(fd, msg + i, 1), 0);
    TH_SEND(fd, "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
    TH_EXPECT(fd, NIL);
    close(fd);
    assert_true(stats_has("ip:203.0.113.10"));
}

/* v2 LOCAL (a balancer's health check): the socket's own address stands. */
static void test_v2_local(void **state)
{
    (void)state;
    int fd = th_connect(p_two);
    assert_true(fd >= 0);
    unsigned char msg[64];
    v2_tcp4(msg, (const unsigned char[]){ 0, 0, 0, 0 }, 0);
    msg[12] = 0x20; /* LOCAL */
    msg[13] = 0x00;
    msg[14] = msg[15] = 0;
    memcpy(msg + 16, GETK, sizeof(GETK) - 1);
    assert_int_equal(th_write_all(fd, msg, 16 + sizeof(GETK) - 1), 0);
    TH_EXPECT(fd, NIL);
    close(fd);
    assert_true(stats_has("ip:127.0.0.1"));
}

/* Malformed or missing headers close the connection, answered nothing,
 * and are counted. */
static void test_malformed_closes(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "*1\r\n$4\r\nPING\r\n",                                 /* no header at all */
        "PROXY TCP4 203.0.113.300 127.0.0.1 40000 6379\r\n",    /* not an address */
        "PROXY TCP4 2001:db8::1 127.0.0.1 40000 6379\r\n",      /* IPv6 as TCP4 */
        "PROXY TCP4 203.0.113.7 127.0.0.1 40000 65536\r\n",     /* port past 65535 */
        "PROXY TCP4 203.0.113.7 127.0.0.1 40000\r\n",           /* a field short */
        "PROXY TCP4 203.0.113.7 127.0.0.1 40000 6379\n",        /* LF without CR */
        "PROXY UDP4 203.0.113.7 127.0.0.1 40000 6379\r\n",      /* not TCP */
    };
    double before = refused("one");
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int fd = th_connect(p_one);
        assert_true(fd >= 0);
        assert_int_equal(th_write_all(fd, bad[i], strlen(bad[i])), 0);
        if (!th_wait_eof(fd, TH_MS))
            fail_msg("not closed after %s", bad[i]);
        close(fd);
    }
    /* a line longer than 107 bytes without its end */
    int fd = th_connect(p_one);
    assert_true(fd >= 0);
    char longline[200];
    memset(longline, '1', sizeof(longline));
    memcpy(longline, "PROXY TCP4 ", 11);
    assert_int_equal(th_write_all(fd, longline, sizeof(longline)), 0);
    assert_int_equal(th_wait_eof(fd, TH_MS), 1);
    close(fd);
    assert_true(refused("one") >= before + 8);

    /* v2: a v1 line, a bad version, a length past the cap */
    before = refused("two");
    fd = th_connect(p_two);
    TH_SEND(fd, "PROXY TCP4 203.0.113.7 127.0.0.1 40000 6379\r\n");
    assert_int_equal(th_wait_eof(fd, TH_MS), 1);
    close(fd);
    unsigned char msg[64];
    v2_tcp4(msg, (const unsigned char[]){ 203, 0, 113, 7 }, 0);
    msg[12] = 0x11;
    fd = th_connect(p_two);
    assert_int_equal(th_write_all(fd, msg, 28), 0);
    assert_int_equal(th_wait_eof(fd, TH_MS), 1);
    close(fd);
    v2_tcp4(msg, (const unsigned char[]){ 203, 0, 113, 7 }, 0);
    msg[14] = 0x20; /* 8 KiB of addresses and TLVs */
    fd = th_connect(p_two);
    assert_int_equal(th_write_all(fd, msg, 28), 0);
    assert_int_equal(th_wait_eof(fd, TH_MS), 1);
    close(fd);
    assert_true(refused("two") >= before + 3);
}

/* A peer outside trusted_proxies is closed, its header never believed. */
static void test_untrusted_peer_closes(void **state)
{
    (void)state;
    double before = refused("far");
    int fd = th_connect(p_far);
    assert_true(fd >= 0);
    TH_SEND(fd, "PROXY TCP4 203.0.113.7 127.0.0.1 40000 6379\r\n*1\r\n$4\r\nPING\r\n");
    assert_int_equal(th_wait_eof(fd, TH_MS), 1);
    close(fd);
    assert_true(refused("far") >= before + 1);
}

/* A header not whole within header_timeout: closed. */
static void test_header_timeout(void **state)
{
    (void)state;
    int fd = th_connect(p_late);
    assert_true(fd >= 0);
    TH_SEND(fd, "PROXY TCP4 ");
    assert_int_equal(th_wait_eof(fd, TH_MS), 1);
    close(fd);
    assert_true(refused("late") >= 1);
}

/* tcp relay: the upstream sees exactly the bytes after the header. */
static void test_tcp_bytes_after_header(void **state)
{
    (void)state;
    int fd = th_connect(p_echo);
    assert_true(fd >= 0);
    TH_SEND(fd, "PROXY UNKNOWN ffff::1 ffff::2 1 2\r\nhello after the header");
    TH_EXPECT(fd, "hello after the header");
    close(fd);
}

/* A connection to 127.0.0.1:<port> from 127.0.0.<last> (any 127/8
 * address is the loopback's): how the test looks like another client
 * behind the balancer. */
static int connect_from(int last, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = { .sin_family = AF_INET };
    a.sin_addr.s_addr = htonl(0x7f000000u | (unsigned)last);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
        goto fail;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
        goto fail;
    return fd;
fail:
    close(fd);
    return -1;
}

/* HAProxy in TCP mode with send-proxy (to one) and send-proxy-v2 (to
 * two): a client from 127.0.0.23 is ip:127.0.0.23 in sluice, though the
 * connection sluice sees comes from HAProxy. */
static void test_haproxy_send_proxy(void **state)
{
    (void)state;
    if (system("command -v haproxy >/dev/null 2>&1") != 0) {
        fprintf(stderr, "haproxy not installed: skipped\n");
        skip();
    }
    int h1 = th_free_port(), h2 = th_free_port();
    char cfg[64], text[1024];
    snprintf(cfg, sizeof(cfg), "/tmp/sluice-pp-haproxy-%d.cfg", (int)getpid());
    snprintf(text, sizeof(text),
             "global\n    maxconn 64\n"
             "defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 30s\n"
             "    timeout server 30s\n"
             "listen v1\n    bind 127.0.0.1:%d\n    server s 127.0.0.1:%d send-proxy\n"
             "listen v2\n    bind 127.0.0.1:%d\n    server s 127.0.0.1:%d send-proxy-v2\n",
             h1, p_one, h2, p_two);
    FILE *f = fopen(cfg, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    th_track_file(cfg);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execlp("haproxy", "haproxy", "-db", "-f", cfg, (char *)NULL);
        _exit(127);
    }
    th_track_pid(pid);
    /* up when both ports accept (polled, bounded) */
    int up = 0;
    for (uint64_t t0 = th_now_ms(); th_now_ms() - t0 < TH_MS && !up;) {
        int a = th_connect(h1), b = a >= 0 ? th_connect(h2) : -1;
        up = a >= 0 && b >= 0;
        if (a >= 0)
            close(a);
        if (b >= 0)
            close(b);
        if (!up)
            usleep(20000);
    }
    assert_true(up);

    int fd = connect_from(23, h1);
    assert_true(fd >= 0);
    assert_int_equal(th_write_all(fd, GETK, sizeof(GETK) - 1), 0);
    TH_EXPECT(fd, NIL);
    close(fd);
    assert_true(stats_has("ip:127.0.0.23"));

    fd = connect_from(24, h2);
    assert_true(fd >= 0);
    assert_int_equal(th_write_all(fd, GETK, sizeof(GETK) - 1), 0);
    TH_EXPECT(fd, NIL);
    close(fd);
    assert_true(stats_has("ip:127.0.0.24"));

    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
}

/* nginx's stream module with proxy_protocol on (version 1) in front of
 * one: a client from 127.0.0.25 is ip:127.0.0.25. */
static void test_nginx_proxy_protocol(void **state)
{
    (void)state;
    static const char so[] = "/usr/lib/nginx/modules/ngx_stream_module.so";
    if (access("/usr/sbin/nginx", X_OK) != 0 || access(so, R_OK) != 0) {
        fprintf(stderr, "nginx or its stream module not installed: skipped\n");
        skip();
    }
    int np = th_free_port();
    char dir[64], cfg[128], text[1024];
    snprintf(dir, sizeof(dir), "/tmp/sluice-pp-nginx-%d", (int)getpid());
    snprintf(cfg, sizeof(cfg), "%s/nginx.conf", dir);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "mkdir -p %s/logs", dir);
    assert_int_equal(system(cmd), 0);
    snprintf(text, sizeof(text),
             "load_module %s;\nworker_processes 1;\npid %s/nginx.pid;\n"
             "error_log %s/logs/error.log;\nevents { worker_connections 64; }\n"
             "stream {\n    server {\n        listen 127.0.0.1:%d;\n"
             "        proxy_pass 127.0.0.1:%d;\n        proxy_protocol on;\n    }\n}\n",
             so, dir, dir, np, p_one);
    FILE *f = fopen(cfg, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/usr/sbin/nginx", "nginx", "-p", dir, "-c", cfg, "-g", "daemon off;", (char *)NULL);
        _exit(127);
    }
    th_track_pid(pid);
    int up = 0;
    for (uint64_t t0 = th_now_ms(); th_now_ms() - t0 < TH_MS && !up;) {
        int a = th_connect(np);
        up = a >= 0;
        if (a >= 0)
            close(a);
        else
            usleep(20000);
    }
    assert_true(up);
    int fd = connect_from(25, np);
    assert_true(fd >= 0);
    assert_int_equal(th_write_all(fd, GETK, sizeof(GETK) - 1), 0);
    TH_EXPECT(fd, NIL);
    close(fd);
    assert_true(stats_has("ip:127.0.0.25"));
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v1_header_then_command),
        cmocka_unit_test(test_v1_tcp6),
        cmocka_unit_test(test_v1_split),
        cmocka_unit_test(test_v2_header_then_command),
        cmocka_unit_test(test_v2_bytewise),
        cmocka_unit_test(test_v2_local),
        cmocka_unit_test(test_malformed_closes),
        cmocka_unit_test(test_untrusted_peer_closes),
        cmocka_unit_test(test_header_timeout),
        cmocka_unit_test(test_tcp_bytes_after_header),
        cmocka_unit_test(test_upstream_v1_passes_header_source),
        cmocka_unit_test(test_upstream_v2_from_peer),
        cmocka_unit_test(test_tls_after_header),
        cmocka_unit_test(test_http_forwarded_for),
        cmocka_unit_test(test_haproxy_send_proxy),
        cmocka_unit_test(test_nginx_proxy_protocol),
    };
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

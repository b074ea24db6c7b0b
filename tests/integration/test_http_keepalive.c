/* sluice integration tests — upstream keep-alive reuse (issue 22,
 * upstream_keepalive on an http listener).
 *
 * Clients that send one request per connection ("Connection: close", as
 * curl and health checkers do) cost the upstream one TCP connect each
 * without it; with it, idle upstream connections are kept per worker and
 * handed to the next client. Checked against:
 *   nginx (th_nginx_start), whose access log names each request's
 *     connection: 20 one-request clients arrive on 1 connection with
 *     upstream_keepalive = 4, on 20 with it off;
 *   an upstream played by the test itself (a listening socket accepted
 *     and answered by hand), to close an idle connection, to answer with
 *     "Connection: close", and to see the idle timeout's close;
 *   a second listener of the same sluice serving TLS (upstream_tls reuse:
 *     its accepted-connections counter).
 * Also: the cap closes the oldest kept one, HTTP/1.0 requests are not
 * kept (they go as they came, and nginx closes after them), a reload
 * closes what is kept, a kept connection the upstream closes is dropped as
 * the close comes, and a client that asked to close is not lingered on
 * (one that sent more after its "close" is).
 *
 * KA_ONLY=<cmocka pattern> runs only matching tests. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "certs.h"
#include "integration/harness.h"

static struct th_proc sluice_p;
static struct th_nginx ngx;
static struct th_certs certs;
static int admin_port, ka_port, off_port, man_port, tmo_port, tls_port, tlsfront_port, cap_port;
static int man_lfd = -1, tmo_lfd = -1; /* the hand-played upstreams' listening sockets */

/* ---- the hand-played upstream ----------------------------------------------- */

/* A listening socket on a free loopback port (*port). */
static int up_listen(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 16) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) < 0)
        return -1;
    *port = ntohs(a.sin_port);
    return fd;
}

/* The next connection sluice makes to it, within <ms>; -1 if none came. */
static int up_accept(int lfd, int ms)
{
    struct pollfd p = { .fd = lfd, .events = POLLIN };
    if (poll(&p, 1, ms) != 1)
        return -1;
    return accept(lfd, NULL, NULL);
}

/* Reads one request head (no body) from <fd> into <buf>; 0 or -1. */
static int up_head(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    uint64_t end = th_now_ms() + TH_MS;
    while (n + 1 < cap) {
        buf[n] = '\0';
        if (strstr(buf, "\r\n\r\n") != NULL)
            return 0;
        struct pollfd p = { .fd = fd, .events = POLLIN };
        uint64_t now = th_now_ms();
        if (now >= end || poll(&p, 1, (int)(end - now)) != 1)
            return -1;
        ssize_t r = recv(fd, buf + n, cap - 1 - n, 0);
        if (r <= 0)
            return -1;
        n += (size_t)r;
    }
    return -1;
}

/* Waits until <fd> reads EOF (the peer closed) within <ms>: 0, else -1. */
static int up_eof(int fd, int ms)
{
    char b[256];
    uint64_t end = th_now_ms() + (uint64_t)ms;
    for (;;) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        uint64_t now = th_now_ms();
        if (now >= end || poll(&p, 1, (int)(end - now)) != 1)
            return -1;
        ssize_t r = recv(fd, b, sizeof b, 0);
        if (r == 0 || (r < 0 && errno == ECONNRESET))
            return 0;
        if (r < 0)
            return -1;
    }
}

/* Closes <fd> as an upstream closing an idle connection, and returns once
 * sluice's side has received the FIN (our FIN is acknowledged: FIN-WAIT-2),
 * so what sluice does next happens with the close known to its kernel. */
static void up_close_idle(int fd)
{
    assert_int_equal(shutdown(fd, SHUT_WR), 0);
    uint64_t end = th_now_ms() + TH_MS;
    for (;;) {
        struct tcp_info ti;
        socklen_t len = sizeof(ti);
        assert_int_equal(getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len), 0);
        if (ti.tcpi_state == TCP_FIN_WAIT2 || ti.tcpi_state == TCP_CLOSE_WAIT ||
            ti.tcpi_state == TCP_TIME_WAIT || ti.tcpi_state == TCP_CLOSE)
            break;
        assert_true(th_now_ms() < end);
        poll(NULL, 0, 2); /* polling a condition, with a bound */
    }
    close(fd);
}

/* as many servers say it (Node, Python's http.server): a word for sluice,
 * not for a client that asked to close */
#define UP_OK "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok"

/* The next connection sluice makes from <lfd>, with the head of the
 * request it carries read into <head>. */
static int up_take(int lfd, char *head, size_t cap)
{
    int u = up_accept(lfd, TH_MS);
    assert_true(u >= 0);
    assert_int_equal(up_head(u, head, cap), 0);
    return u;
}

/* ---- clients ---------------------------------------------------------------- */

/* One client connection to <port>: a GET for <target> with "Connection:
 * close"; returns the connection (the response is read by client_done). */
static int client_send(int port, const char *target)
{
    int fd = th_connect(port);
    assert_true(fd >= 0);
    char req[256];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n",
                     target);
    assert_int_equal(th_write_all(fd, req, (size_t)n), 0);
    return fd;
}

/* Reads the whole answer up to sluice's close: it must be a 200 whose body
 * is <body>, and say the connection closes. */
static void client_done(int fd, const char *body)
{
    char buf[4096];
    int eof = 0;
    size_t n = th_read_until_eof(fd, buf, sizeof buf - 1, TH_MS, &eof);
    close(fd);
    buf[n] = '\0';
    assert_true(eof);
    if (strncmp(buf, "HTTP/1.1 200 ", 13) != 0)
        fail_msg("not a 200: %s", buf);
    const char *b = strstr(buf, "\r\n\r\n");
    assert_non_null(b);
    assert_string_equal(b + 4, body);
    /* the client asked to close: the answer says so, though the upstream's did not */
    assert_non_null(strstr(buf, "\r\nConnection: close\r\n"));
    if (strcasestr(buf, "keep-alive") != NULL)
        fail_msg("closed, yet the answer says keep-alive: %s", buf);
}

/* Upstream connection <u> answers 200 "ok" to the request of client <c>,
 * which gets it whole. */
static void up_answer(int u, int c)
{
    TH_SEND(u, UP_OK);
    client_done(c, "ok");
}

/* A client's GET of <target> on <port>, answered 200 "ok" on a new
 * upstream connection from <lfd>; returns that connection, which sluice
 * now keeps. */
static int up_kept(int port, const char *target, int lfd)
{
    char head[4096];
    int c = client_send(port, target);
    int u = up_take(lfd, head, sizeof head);
    up_answer(u, c);
    return u;
}

static double metric(const char *name, const char *listener)
{
    char s[160];
    snprintf(s, sizeof s, "%s{listener=\"%s\"}", name, listener);
    return th_metric(admin_port, s);
}

/* nginx's log reaches <want> requests past <skip> lines (it is written
 * after the response): the connections that carried them. */
static int nginx_conns(int skip, int want)
{
    int conns = -1;
    uint64_t end = th_now_ms() + TH_MS;
    while (th_nginx_requests(&ngx, skip, &conns) < want && th_now_ms() < end)
        poll(NULL, 0, 5);
    assert_int_equal(th_nginx_requests(&ngx, skip, &conns), want);
    return conns;
}

/* ---- setup -------------------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    static const struct th_cert want[] = { { "server", "/CN=server", TH_SAN_LOCAL, 0 } };
    if (th_certs_make(&certs, want, 1) != 0 || th_nginx_start(&ngx, 1024) < 0)
        return -1;
    man_lfd = up_listen(&man_port);
    tmo_lfd = up_listen(&tmo_port);
    if (man_lfd < 0 || tmo_lfd < 0)
        return -1;
    admin_port = th_free_port();
    ka_port = th_free_port();
    off_port = th_free_port();
    int man_front = th_free_port(), tmo_front = th_free_port();
    cap_port = th_free_port();
    tls_port = th_free_port();
    tlsfront_port = th_free_port();
    char ini[8192];
    snprintf(ini, sizeof ini,
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\n[store]\nurl = local\n"
             "[listener ka]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "upstream_keepalive = 4\n"
             "[listener off]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "[listener man]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "upstream_keepalive = 4\n"
             "[listener tmo]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "upstream_keepalive = 4\nupstream_keepalive_timeout = 1s\n"
             /* TLS towards the upstream: tlsfront -> (TLS) -> tls -> nginx */
             "[listener tls]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "tls_cert = %s\ntls_key = %s\n"
             "[listener tlsfront]\nlisten = 127.0.0.1:%d\nupstream = localhost:%d\nprotocol = http\n"
             "upstream_tls = on\nupstream_tls_ca = %s\nupstream_keepalive = 4\n"
             "[listener cap]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "upstream_keepalive = 1\n",
             admin_port, ka_port, ngx.proc.port, off_port, ngx.proc.port, man_front, man_port,
             tmo_front, tmo_port, tls_port, ngx.proc.port, th_certs_path(&certs, "server.pem"),
             th_certs_path(&certs, "server.key"), tlsfront_port, tls_port,
             th_certs_path(&certs, "ca.pem"), cap_port, man_port);
    man_port = man_front; /* from here on: where clients go */
    tmo_port = tmo_front;
    return th_sluice_start(&sluice_p, ini, tlsfront_port);
}

static int group_teardown(void **state)
{
    (void)state;
    int st = th_stop(&sluice_p);
    th_nginx_stop(&ngx);
    close(man_lfd);
    close(tmo_lfd);
    th_certs_remove(&certs);
    th_kill_all();
    if (st != 0) {
        fprintf(stderr, "sluice did not exit cleanly (status %d)\n", st);
        return -1;
    }
    return 0;
}

static int check_alive(void **state)
{
    (void)state;
    return th_alive_or_report(&sluice_p);
}

/* ---- tests ---------------------------------------------------------------------- */

/* 20 one-request clients, one after the other: nginx sees them all on one
 * connection with upstream_keepalive = 4; each answer is whole and tells
 * its client the connection closes. */
static void test_one_request_clients_reuse(void **state)
{
    (void)state;
    int skip = th_nginx_requests(&ngx, 0, NULL);
    double reused = metric("sluice_upstream_connections_reused_total", "ka");
    for (int i = 0; i < 20; i++)
        client_done(client_send(ka_port, "/small"), "hello from nginx\n");
    assert_int_equal(nginx_conns(skip, 20), 1);
    assert_true(metric("sluice_upstream_connections_reused_total", "ka") - reused >= 19);
    assert_true(metric("sluice_upstream_connections_idle", "ka") == 1);
}

/* With it off (the default), each client costs nginx a connection. */
static void test_off_one_connection_each(void **state)
{
    (void)state;
    int skip = th_nginx_requests(&ngx, 0, NULL);
    for (int i = 0; i < 20; i++)
        client_done(client_send(off_port, "/small"), "hello from nginx\n");
    assert_int_equal(nginx_conns(skip, 20), 20);
    assert_true(metric("sluice_upstream_connections_reused_total", "off") == 0);
}

/* The request goes upstream without the client's "close", and the next
 * client's request arrives on the same upstream connection. */
static void test_request_on_kept_connection(void **state)
{
    (void)state;
    char head[4096];
    int c = client_send(man_port, "/a");
    int u = up_take(man_lfd, head, sizeof head);
    assert_null(strcasestr(head, "close"));
    up_answer(u, c);

    c = client_send(man_port, "/b");
    assert_int_equal(up_head(u, head, sizeof head), 0); /* on the kept one */
    assert_non_null(strstr(head, "GET /b "));
    up_answer(u, c);
    /* the upstream closes it (for the next test): sluice drops it at hand-out */
    up_close_idle(u);
}

/* An upstream that closed its idle connection: the connection is never
 * handed out; the next client's request goes on a new one and is answered
 * (no 502). */
static void test_closed_by_upstream_not_reused(void **state)
{
    (void)state;
    char head[4096];
    int u = up_kept(man_port, "/c", man_lfd);
    up_close_idle(u);

    int c = client_send(man_port, "/d");
    int u2 = up_take(man_lfd, head, sizeof head);
    assert_non_null(strstr(head, "GET /d "));
    up_answer(u2, c);
    up_close_idle(u2);
}

/* A response with "Connection: close" ends its connection: sluice closes
 * it (the upstream sees EOF) and the next client gets a new one. */
static void test_upstream_close_answer_not_kept(void **state)
{
    (void)state;
    char head[4096];
    int c = client_send(man_port, "/e");
    int u = up_take(man_lfd, head, sizeof head);
    TH_SEND(u, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
    client_done(c, "ok");
    assert_int_equal(up_eof(u, TH_MS), 0);
    close(u);

    c = client_send(man_port, "/f");
    int u2 = up_take(man_lfd, head, sizeof head);
    up_answer(u2, c);
    up_close_idle(u2);
}

/* A kept connection stays watched while idle: the upstream's close drops
 * it as it comes (the idle gauge falls to 0 with no client arriving), not
 * only at the next hand-out or at the idle timeout (60 s here). */
static void test_kept_close_seen_while_idle(void **state)
{
    (void)state;
    char head[4096];
    int c = client_send(man_port, "/w");
    int u = up_accept(man_lfd, TH_MS);
    assert_true(u >= 0);
    assert_int_equal(up_head(u, head, sizeof head), 0);
    TH_SEND(u, UP_OK);
    client_done(c, "ok");
    assert_true(metric("sluice_upstream_connections_idle", "man") == 1);
    close(u);
    uint64_t end = th_now_ms() + TH_MS;
    while (metric("sluice_upstream_connections_idle", "man") != 0 && th_now_ms() < end)
        poll(NULL, 0, 5); /* polling a condition, with a bound */
    assert_true(metric("sluice_upstream_connections_idle", "man") == 0);
}

/* A client that asked to close, and sent nothing after its request, may
 * send nothing more (RFC 9112, 9.6): sluice closes outright, no half-close
 * and lingering for its FIN. Its session is gone by the time it reads the
 * EOF, though it still holds its end open. One that sent more after its
 * "close" is lingered on as before: its session stays until it closes. */
static void test_asked_close_not_lingered(void **state)
{
    (void)state;
    char buf[4096];
    int eof = 0;
    int c = client_send(ka_port, "/small");
    size_t n = th_read_until_eof(c, buf, sizeof buf - 1, TH_MS, &eof);
    buf[n] = '\0';
    assert_true(eof);
    assert_int_equal(strncmp(buf, "HTTP/1.1 200 ", 13), 0);
    assert_true(metric("sluice_connections_active", "ka") == 0);
    close(c);

    c = th_connect(ka_port);
    assert_true(c >= 0);
    TH_SEND(c, "GET /small HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
               "GET /small HTTP/1.1\r\nHost: test\r\n\r\n");
    n = th_read_until_eof(c, buf, sizeof buf - 1, TH_MS, &eof);
    buf[n] = '\0';
    assert_true(eof);
    assert_int_equal(strncmp(buf, "HTTP/1.1 200 ", 13), 0);
    assert_null(strstr(buf + 13, "HTTP/1.1 ")); /* one answer: nothing after the close is read */
    assert_true(metric("sluice_connections_active", "ka") == 1); /* lingering */
    close(c);
    uint64_t end = th_now_ms() + TH_MS;
    while (metric("sluice_connections_active", "ka") != 0 && th_now_ms() < end)
        poll(NULL, 0, 5); /* polling a condition, with a bound */
    assert_true(metric("sluice_connections_active", "ka") == 0);
}

/* upstream_keepalive_timeout (1s here) closes a kept connection: the
 * upstream sees the close, not before the timeout, and the gauge is 0. */
static void test_idle_timeout_closes(void **state)
{
    (void)state;
    char head[4096];
    int c = client_send(tmo_port, "/g");
    int u = up_take(tmo_lfd, head, sizeof head);
    TH_SEND(u, UP_OK);
    uint64_t t0 = th_now_ms(); /* it is kept after this */
    client_done(c, "ok");
    assert_int_equal(up_eof(u, 15000), 0);
    uint64_t waited = th_now_ms() - t0;
    close(u);
    if (waited < 900)
        fail_msg("closed after %llu ms, before the 1s timeout", (unsigned long long)waited);
    assert_true(metric("sluice_upstream_connections_idle", "tmo") == 0);
}

/* Over TLS: the kept connection keeps its session, so the upstream (a
 * TLS listener of the same sluice) accepts one connection for 10 clients. */
static void test_tls_upstream_reuse(void **state)
{
    (void)state;
    double acc = metric("sluice_connections_accepted_total", "tls");
    for (int i = 0; i < 10; i++)
        client_done(client_send(tlsfront_port, "/small"), "hello from nginx\n");
    assert_true(metric("sluice_connections_accepted_total", "tls") - acc == 1);
    assert_true(metric("sluice_upstream_connections_reused_total", "tlsfront") >= 9);
}

/* The cap: two clients at once on a listener with upstream_keepalive = 1
 * leave one connection kept; the other is closed (the upstream sees it). */
static void test_cap_closes_the_rest(void **state)
{
    (void)state;
    char head[4096];
    int c1 = client_send(cap_port, "/h1");
    int u1 = up_take(man_lfd, head, sizeof head);
    int c2 = client_send(cap_port, "/h2"); /* c1 is unanswered: a second connection */
    int u2 = up_take(man_lfd, head, sizeof head);
    up_answer(u1, c1);
    up_answer(u2, c2);
    /* the oldest kept one (u1) made room for u2 */
    assert_int_equal(up_eof(u1, TH_MS), 0);
    close(u1);
    assert_true(metric("sluice_upstream_connections_idle", "cap") == 1);
    /* and u2 serves the next client */
    int c3 = client_send(cap_port, "/h3");
    assert_int_equal(up_head(u2, head, sizeof head), 0);
    assert_non_null(strstr(head, "GET /h3 "));
    up_answer(u2, c3);
    up_close_idle(u2);
}

/* HTTP/1.0 requests go as they came: nginx answers them with the close,
 * so nothing is kept and each costs a connection. */
static void test_http10_not_kept(void **state)
{
    (void)state;
    int skip = th_nginx_requests(&ngx, 0, NULL);
    for (int i = 0; i < 3; i++) {
        int fd = th_connect(ka_port);
        assert_true(fd >= 0);
        TH_SEND(fd, "GET /small HTTP/1.0\r\n\r\n");
        char buf[2048];
        int eof = 0;
        size_t n = th_read_until_eof(fd, buf, sizeof buf - 1, TH_MS, &eof);
        close(fd);
        buf[n] = '\0';
        assert_true(eof);
        assert_non_null(strstr(buf, " 200 "));
        assert_non_null(strstr(buf, "hello from nginx\n"));
    }
    assert_int_equal(nginx_conns(skip, 3), 3);
}

/* The upstream closes a kept connection just as a request was sent on it
 * (it read the request, then closed without a word): a GET goes once more
 * on a new connection and is answered; a POST (not safe to send twice)
 * gets a 502. */
static void test_closed_as_sent(void **state)
{
    (void)state;
    char head[4096];
    int u = up_kept(man_port, "/j1", man_lfd);

    int c = client_send(man_port, "/j2");
    assert_int_equal(up_head(u, head, sizeof head), 0); /* on the kept one */
    close(u);                                            /* ... which the upstream drops */
    int u2 = up_take(man_lfd, head, sizeof head);
    assert_non_null(strstr(head, "GET /j2 "));
    up_answer(u2, c);

    /* a POST on it now: not sent again */
    c = th_connect(man_port);
    assert_true(c >= 0);
    TH_SEND(c, "POST /j3 HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi");
    assert_int_equal(up_head(u2, head, sizeof head), 0);
    assert_non_null(strstr(head, "POST /j3 "));
    close(u2);
    char buf[2048];
    int eof = 0;
    size_t n = th_read_until_eof(c, buf, sizeof buf - 1, TH_MS, &eof);
    close(c);
    buf[n] = '\0';
    assert_true(eof);
    if (strncmp(buf, "HTTP/1.1 502 ", 13) != 0)
        fail_msg("not a 502: %s", buf);
}

/* A reload closes the kept connections (its upstream may have changed). */
static void test_reload_closes_kept(void **state)
{
    (void)state;
    int u = up_kept(man_port, "/r", man_lfd);
    assert_int_equal(kill(sluice_p.pid, SIGHUP), 0);
    assert_int_equal(up_eof(u, TH_MS), 0);
    close(u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_one_request_clients_reuse, check_alive),
        cmocka_unit_test_teardown(test_off_one_connection_each, check_alive),
        cmocka_unit_test_teardown(test_request_on_kept_connection, check_alive),
        cmocka_unit_test_teardown(test_closed_by_upstream_not_reused, check_alive),
        cmocka_unit_test_teardown(test_upstream_close_answer_not_kept, check_alive),
        cmocka_unit_test_teardown(test_kept_close_seen_while_idle, check_alive),
        cmocka_unit_test_teardown(test_asked_close_not_lingered, check_alive),
        cmocka_unit_test_teardown(test_idle_timeout_closes, check_alive),
        cmocka_unit_test_teardown(test_tls_upstream_reuse, check_alive),
        cmocka_unit_test_teardown(test_cap_closes_the_rest, check_alive),
        cmocka_unit_test_teardown(test_http10_not_kept, check_alive),
        cmocka_unit_test_teardown(test_closed_as_sent, check_alive),
        cmocka_unit_test_teardown(test_reload_closes_kept, check_alive),
    };
    const char *only = getenv("KA_ONLY");
    if (only != NULL)
        cmocka_set_test_filter(only);
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

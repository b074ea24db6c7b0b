/* sluice integration tests — the opaque TCP relay (protocol = tcp).
 *
 * Upstreams are forked from the test: an echo server (every connection gets
 * back what it sends, and is closed after the client's EOF) and a banner
 * server (sends a line and closes at once). One sluice, shared, with:
 *   e  -> echo
 *   b  -> banner
 *   d  -> a free port where nothing listens
 *   m  -> echo, max_connections = 1
 *   i  -> echo, idle_timeout = 1s */
#include <errno.h>
#include <poll.h>
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

#include "integration/harness.h"

static struct th_proc sluice_p;
static pid_t echo_pid, banner_pid;
static int eport, bport, dport, mport, iport;

static const char BANNER[] = "220 hello from upstream\r\n";

static void serve_banner(int lfd, void *arg)
{
    (void)arg;
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            _exit(1);
        }
        th_write_all(fd, BANNER, sizeof(BANNER) - 1);
        close(fd);
    }
}

static int group_setup(void **state)
{
    (void)state;
    int echo_up = 0, banner_up = 0;
    echo_pid = th_fork_server(&echo_up, th_serve_echo, NULL);
    banner_pid = th_fork_server(&banner_up, serve_banner, NULL);
    if (echo_pid < 0 || banner_pid < 0)
        return -1;
    eport = th_free_port();
    bport = th_free_port();
    dport = th_free_port();
    mport = th_free_port();
    iport = th_free_port();
    int nothing = th_free_port();
    char ini[2048];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin =\nshutdown_grace = 2s\n[store]\nurl = local\n"
             "[listener e]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = tcp\n"
             "[listener b]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = tcp\n"
             "[listener d]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = tcp\n"
             "[listener m]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = tcp\n"
             "max_connections = 1\n"
             "[listener i]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = tcp\n"
             "idle_timeout = 1s\n",
             eport, echo_up, bport, banner_up, dport, nothing, mport, echo_up, iport, echo_up);
    return th_sluice_start(&sluice_p, ini, iport);
}

static int group_teardown(void **state)
{
    (void)state;
    int st = th_stop(&sluice_p);
    th_kill_server(echo_pid);
    th_kill_server(banner_pid);
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

/* ---- a pseudo-random byte stream ------------------------------------------- */

#define BLOCK 65536

struct stream {
    uint64_t      s;        /* xorshift64* state */
    unsigned char b[BLOCK]; /* the current block */
    size_t        off;      /* next byte in b */
};

static void stream_init(struct stream *st, uint64_t seed)
{
    st->s = seed ? seed : 1;
    st->off = BLOCK;
}

/* Makes sure st->b has bytes at st->off. */
static void stream_fill(struct stream *st)
{
    if (st->off < BLOCK)
        return;
    for (size_t i = 0; i < BLOCK; i += 8) {
        st->s ^= st->s >> 12;
        st->s ^= st->s << 25;
        st->s ^= st->s >> 27;
        uint64_t v = st->s * 0x2545F4914F6CDD1DULL;
        memcpy(st->b + i, &v, 8);
    }
    st->off = 0;
}

/* Sends <total> bytes of the stream of <seed> through <port> and reads them
 * back, concurrently, checking each byte. With <half_close>, the write side
 * is shut down right after the last byte; either way EOF must follow the
 * last byte echoed. Returns the first mismatching offset or -1 if all is
 * well; *got receives the bytes read back. */
static long long relay(int port, uint64_t total, uint64_t seed, int half_close, uint64_t *got,
                       int *eof)
{
    struct stream *w = malloc(sizeof(*w)), *r = malloc(sizeof(*r));
    assert_non_null(w);
    assert_non_null(r);
    stream_init(w, seed);
    stream_init(r, seed);
    int fd = th_connect(port);
    assert_true(fd >= 0);
    assert_int_equal(th_nonblock(fd), 0);
    uint64_t sent = 0, rcvd = 0;
    long long bad = -1;
    int shut = 0;
    *eof = 0;
    static unsigned char buf[BLOCK];
    uint64_t end = th_now_ms() + 120000;
    while (!*eof && bad < 0 && th_now_ms() < end) {
        if (sent == total && !shut && (half_close || rcvd == total)) {
            assert_int_equal(shutdown(fd, SHUT_WR), 0);
            shut = 1;
        }
        struct pollfd pfd = { .fd = fd, .events = POLLIN | (sent < total ? POLLOUT : 0) };
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t n = read(fd, buf, sizeof(buf));
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                *eof = 1;
            } else if (n > 0) {
                for (ssize_t i = 0; i < n && bad < 0; i++) {
                    stream_fill(r);
                    if (rcvd + (uint64_t)i >= total || buf[i] != r->b[r->off])
                        bad = (long long)(rcvd + (uint64_t)i);
                    r->off++;
                }
                rcvd += (uint64_t)n;
            }
        }
        if (sent < total && (pfd.revents & POLLOUT)) {
            stream_fill(w);
            size_t len = BLOCK - w->off;
            if (len > total - sent)
                len = (size_t)(total - sent);
            ssize_t n = write(fd, w->b + w->off, len);
            if (n > 0) {
                sent += (uint64_t)n;
                w->off += (size_t)n;
            }
        }
    }
    close(fd);
    free(w);
    free(r);
    *got = rcvd;
    return bad;
}

/* ---- 15. relaying ------------------------------------------------------------ */

static void test_tcp_100mb_both_ways(void **state)
{
    (void)state;
    const uint64_t total = 100ull * 1000 * 1000;
    uint64_t got = 0;
    int eof = 0;
    uint64_t t0 = th_now_ms();
    long long bad = relay(eport, total, 0x5eed1234, 0, &got, &eof);
    fprintf(stderr, "tcp relay: %llu of %llu bytes back in %llu ms\n", (unsigned long long)got,
            (unsigned long long)total, (unsigned long long)(th_now_ms() - t0));
    assert_int_equal(bad, -1);
    assert_int_equal(got, total);
    assert_true(eof); /* our FIN went through, the echo closed, we saw it */
}

/* Data, then FIN at once, before anything was read back: all of it still
 * comes back, then EOF. */
static void test_tcp_half_close(void **state)
{
    (void)state;
    const uint64_t sizes[] = { 1, 1000, 3u << 20 };
    for (int i = 0; i < 3; i++) {
        uint64_t got = 0;
        int eof = 0;
        long long bad = relay(eport, sizes[i], 77 + (uint64_t)i, 1, &got, &eof);
        assert_int_equal(bad, -1);
        assert_int_equal(got, sizes[i]);
        assert_true(eof);
    }
    /* A FIN with nothing sent: EOF back, nothing else. */
    int fd = th_connect(eport);
    assert_true(fd >= 0);
    assert_int_equal(shutdown(fd, SHUT_WR), 0);
    assert_int_equal(th_wait_eof(fd, TH_MS), 1);
    close(fd);
}

/* The upstream talks first and closes: the client gets it all, then EOF. */
static void test_tcp_upstream_closes_first(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++) {
        int fd = th_connect(bport);
        assert_true(fd >= 0);
        assert_int_equal(th_expect_close(fd, BANNER, sizeof(BANNER) - 1, TH_MS), 0);
        close(fd);
    }
}

/* Nothing at the upstream address: the client is closed, no bytes. */
static void test_tcp_upstream_unavailable(void **state)
{
    (void)state;
    int fd = th_connect(dport);
    assert_true(fd >= 0);
    th_write_all(fd, "hello\n", 6);
    assert_int_equal(th_wait_eof(fd, TH_MS), 1);
    close(fd);
}

/* Over max_connections: accepted, then closed at once, no bytes; the one
 * connection allowed keeps working; once it goes, a new one is served. */
static void test_tcp_max_connections(void **state)
{
    (void)state;
    int a = th_connect(mport);
    assert_true(a >= 0);
    assert_int_equal(th_write_all(a, "one\n", 4), 0);
    assert_int_equal(th_expect(a, "one\n", 4, TH_MS), 0);
    int b = th_connect(mport);
    assert_true(b >= 0);
    assert_int_equal(th_wait_eof(b, TH_MS), 1);
    close(b);
    assert_int_equal(th_write_all(a, "two\n", 4), 0);
    assert_int_equal(th_expect(a, "two\n", 4, TH_MS), 0);
    close(a);
    /* Room again (once sluice has seen the close). */
    int ok = 0;
    uint64_t end = th_now_ms() + TH_MS;
    while (!ok && th_now_ms() < end) {
        int c = th_connect(mport);
        assert_true(c >= 0);
        char buf[8];
        if (th_write_all(c, "three\n", 6) == 0 && th_read_n(c, buf, 6, 1000) == 6 &&
            memcmp(buf, "three\n", 6) == 0)
            ok = 1;
        close(c);
        if (!ok)
            usleep(20000);
    }
    assert_true(ok);
}

/* idle_timeout applies to tcp sessions too; traffic resets it. */
static void test_tcp_idle_timeout(void **state)
{
    (void)state;
    int busy = th_connect(iport), idle = th_connect(iport);
    assert_true(busy >= 0);
    assert_true(idle >= 0);
    assert_int_equal(th_write_all(idle, "x", 1), 0);
    assert_int_equal(th_expect(idle, "x", 1, TH_MS), 0);
    uint64_t t0 = th_now_ms();
    int closed = 0;
    while (th_now_ms() < t0 + 5000 && !closed) {
        assert_int_equal(th_write_all(busy, "ping", 4), 0);
        assert_int_equal(th_expect(busy, "ping", 4, TH_MS), 0);
        closed = th_wait_eof(idle, 300);
    }
    uint64_t took = th_now_ms() - t0;
    assert_true(closed);
    assert_true(took >= 900);
    assert_true(took <= 4500);
    /* The busy one survived it. */
    assert_int_equal(th_write_all(busy, "last", 4), 0);
    assert_int_equal(th_expect(busy, "last", 4, TH_MS), 0);
    close(busy);
    close(idle);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_tcp_100mb_both_ways, check_alive),
        cmocka_unit_test_teardown(test_tcp_half_close, check_alive),
        cmocka_unit_test_teardown(test_tcp_upstream_closes_first, check_alive),
        cmocka_unit_test_teardown(test_tcp_upstream_unavailable, check_alive),
        cmocka_unit_test_teardown(test_tcp_max_connections, check_alive),
        cmocka_unit_test_teardown(test_tcp_idle_timeout, check_alive),
    };
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

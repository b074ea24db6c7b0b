/* sluice integration tests — memory stays bounded under floods.
 *
 * A client that pipelines 100 MB of SETs without reading the replies, and a
 * client that asks for ~100 MB of GET replies without reading them: sluice
 * must stall them on TCP (write queues capped at 256 KiB a side, 8192 owed
 * replies per client) instead of buffering, so its RSS stays within a bound
 * while the flood goes on; afterwards every reply must arrive, intact.
 * One redis-server and one sluice are shared by both tests. */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "integration/harness.h"

/* RSS growth over the baseline allowed while flooding. */
#define RSS_BOUND_KB (40 * 1024)
#define FLOOD_BYTES  (100ull * 1000 * 1000)
#define STALL_MS     4000  /* phase 1: write without reading for this long */
#define FINISH_MS    120000 /* phase 2 deadline (sanitizer builds are slow) */

static struct th_proc redis_p, sluice_p;
static int sport;

static int group_setup(void **state)
{
    (void)state;
    return th_pair_start(&redis_p, &sluice_p, &sport, NULL, NULL, NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    return th_pair_stop(&redis_p, &sluice_p);
}

static int check_alive(void **state)
{
    (void)state;
    return th_alive_or_report(&sluice_p);
}

/* Sluice's RSS after a little normal traffic (its pool and allocator warm). */
static long warm_baseline(void)
{
    redisContext *c = redisConnect("127.0.0.1", sport);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    struct timeval tv = { 10, 0 };
    redisSetTimeout(c, tv);
    for (int i = 0; i < 2000; i++)
        redisAppendCommand(c, "SET warm:%d %0100d", i, i);
    for (int i = 0; i < 2000; i++) {
        redisReply *r = NULL;
        assert_int_equal(redisGetReply(c, (void **)&r), REDIS_OK);
        freeReplyObject(r);
    }
    redisFree(c);
    long kb = th_rss_kb(sluice_p.pid);
    assert_true(kb > 0);
    return kb;
}

struct rss_watch {
    long     base;
    long     max;
    uint64_t next; /* next sample time */
};

static void rss_sample(struct rss_watch *w)
{
    uint64_t now = th_now_ms();
    if (now < w->next)
        return;
    w->next = now + 20;
    long kb = th_rss_kb(sluice_p.pid);
    if (kb > w->max)
        w->max = kb;
}

/* ---- 10a. requests flood ------------------------------------------------------ */

/* Writes 100 MB of copies of <cmd> on a non-blocking socket: first for
 * STALL_MS without reading anything, then reading the replies while the rest
 * goes out. Every reply must be exactly <reply>, one per command; sluice's
 * RSS must stay within RSS_BOUND_KB of its baseline all along. With
 * <must_stall>, the replies are too big for the kernel's socket buffers, so
 * the flood must have been held back before the client started reading. */
static void flood(const char *cmd, const char *reply, int must_stall)
{
    const size_t CMD = strlen(cmd), RL = strlen(reply);
    const size_t per_block = 65536 / CMD, block_len = per_block * CMD;
    char *block = malloc(block_len);
    assert_non_null(block);
    for (size_t i = 0; i < per_block; i++)
        memcpy(block + i * CMD, cmd, CMD);
    const uint64_t ncmds = (FLOOD_BYTES + CMD - 1) / CMD, total = ncmds * CMD;

    struct rss_watch w = { .base = warm_baseline() };
    w.max = w.base;

    int fd = th_connect(sport);
    assert_true(fd >= 0);
    assert_int_equal(th_nonblock(fd), 0);

    uint64_t sent = 0, rcvd = 0;
    static char rbuf[65536];
    int bad = 0;

    /* Phase 1: write only. */
    uint64_t t0 = th_now_ms(), stall_end = t0 + STALL_MS;
    while (sent < total && th_now_ms() < stall_end) {
        struct pollfd pfd = { .fd = fd, .events = POLLOUT };
        poll(&pfd, 1, 20);
        rss_sample(&w);
        if (!(pfd.revents & POLLOUT))
            continue;
        size_t off = (size_t)(sent % block_len);
        size_t len = block_len - off;
        if (len > total - sent)
            len = (size_t)(total - sent);
        ssize_t n = write(fd, block + off, len);
        if (n > 0)
            sent += (uint64_t)n;
        else
            assert_true(n < 0 && (errno == EAGAIN || errno == EINTR));
    }
    uint64_t stalled_at = sent;
    long max_phase1 = w.max;

    /* Phase 2: read the replies while the rest goes out. */
    uint64_t end = th_now_ms() + FINISH_MS;
    while (rcvd < ncmds * RL && th_now_ms() < end && !bad) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN | (sent < total ? POLLOUT : 0) };
        poll(&pfd, 1, 50);
        rss_sample(&w);
        if (pfd.revents & POLLIN) {
            ssize_t n = read(fd, rbuf, sizeof(rbuf));
            if (n == 0)
                break;
            for (ssize_t i = 0; i < n && !bad; i++)
                bad = rbuf[i] != reply[(rcvd + (uint64_t)i) % RL];
            if (n > 0)
                rcvd += (uint64_t)n;
        }
        if (sent < total && (pfd.revents & POLLOUT)) {
            size_t off = (size_t)(sent % block_len);
            size_t len = block_len - off;
            if (len > total - sent)
                len = (size_t)(total - sent);
            ssize_t n = write(fd, block + off, len);
            if (n > 0)
                sent += (uint64_t)n;
        }
    }
    fprintf(stderr,
            "flood: %llu commands (%llu bytes); %llu bytes taken before reading; "
            "%llu replies; rss base %ld KiB, max %ld KiB (%ld before reading); %llu ms\n",
            (unsigned long long)ncmds, (unsigned long long)total, (unsigned long long)stalled_at,
            (unsigned long long)(rcvd / RL), w.base, w.max, max_phase1,
            (unsigned long long)(th_now_ms() - t0));
    assert_false(bad);
    if (must_stall)
        assert_true(stalled_at < total); /* the flood was held back */
    assert_int_equal(sent, total);
    assert_int_equal(rcvd, ncmds * RL); /* every reply, each the expected one */
    assert_true(max_phase1 - w.base < RSS_BOUND_KB);
    assert_true(w.max - w.base < RSS_BOUND_KB);

    /* Nothing extra, and the connection still works. */
    assert_int_equal(th_write_all(fd, "PING\r\n", 6), 0);
    char pong[8];
    size_t n = 0;
    uint64_t pend = th_now_ms() + TH_MS;
    while (n < 7 && th_now_ms() < pend) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        poll(&pfd, 1, 50);
        ssize_t r = read(fd, pong + n, 7 - n);
        if (r > 0)
            n += (size_t)r;
        else if (r == 0)
            break;
    }
    assert_int_equal(n, 7);
    assert_memory_equal(pong, "+PONG\r\n", 7);
    close(fd);
    free(block);
}

#define V100 "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv"

/* SET key <100-byte value>, 100 MB of it, replies +OK. The replies (~4 MB)
 * fit in the kernel's socket buffers, so this may never stall: it checks
 * that nothing is lost or grows. */
static void test_flood_set(void **state)
{
    (void)state;
    flood("*3\r\n$3\r\nSET\r\n$9\r\nflood:key\r\n$100\r\n" V100 "\r\n", "+OK\r\n", 0);
}

/* SET key <100-byte value> GET: each reply is the previous 100-byte value,
 * so ~100 MB come back, far more than socket buffers hold: the client must be
 * stalled while it does not read, and sluice must not buffer the difference. */
static void test_flood_set_get(void **state)
{
    (void)state;
    redisContext *d = redisConnect("127.0.0.1", redis_p.port);
    assert_non_null(d);
    assert_int_equal(d->err, 0);
    redisReply *r = redisCommand(d, "SET flood:kg %s", V100);
    assert_non_null(r);
    freeReplyObject(r);
    redisFree(d);
    flood("*4\r\n$3\r\nSET\r\n$8\r\nflood:kg\r\n$100\r\n" V100 "\r\n$3\r\nGET\r\n",
          "$100\r\n" V100 "\r\n", 1);
}

/* ---- 10b. replies flood ------------------------------------------------------- */

static void test_big_replies_without_reading(void **state)
{
    (void)state;
    enum { VALUE = 8 << 20, GETS = 12 };
    /* The value goes straight to Redis. */
    redisContext *d = redisConnect("127.0.0.1", redis_p.port);
    assert_non_null(d);
    assert_int_equal(d->err, 0);
    struct timeval tv = { 10, 0 };
    redisSetTimeout(d, tv);
    char *v = malloc(VALUE);
    assert_non_null(v);
    for (size_t i = 0; i < VALUE; i++)
        v[i] = (char)('A' + (i * 7) % 26);
    redisReply *r = redisCommand(d, "SET bp:big %b", v, (size_t)VALUE);
    assert_non_null(r);
    freeReplyObject(r);
    redisFree(d);

    struct rss_watch w = { .base = warm_baseline() };
    w.max = w.base;

    int fd = th_connect(sport);
    assert_true(fd >= 0);
    static const char get[] = "*2\r\n$3\r\nGET\r\n$6\r\nbp:big\r\n";
    for (int i = 0; i < GETS; i++)
        assert_int_equal(th_write_all(fd, get, sizeof(get) - 1), 0);

    /* Phase 1: do not read for a while; ~100 MB of replies wait upstream. */
    uint64_t t0 = th_now_ms();
    while (th_now_ms() < t0 + STALL_MS) {
        rss_sample(&w);
        usleep(20000);
    }
    long max_phase1 = w.max;

    /* Phase 2: read everything and check it. */
    char hdr[32];
    int hl = snprintf(hdr, sizeof(hdr), "$%d\r\n", VALUE);
    const uint64_t one = (uint64_t)hl + VALUE + 2, want = one * GETS;
    uint64_t got = 0;
    int bad = 0;
    char buf[65536];
    assert_int_equal(th_nonblock(fd), 0);
    uint64_t end = th_now_ms() + FINISH_MS;
    while (got < want && th_now_ms() < end && !bad) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        poll(&pfd, 1, 50);
        rss_sample(&w);
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n == 0)
            break;
        for (ssize_t i = 0; i < n && !bad; i++) {
            uint64_t pos = (got + (uint64_t)i) % one;
            char expect = pos < (uint64_t)hl ? hdr[pos]
                          : pos < (uint64_t)hl + VALUE ? v[pos - (uint64_t)hl]
                          : pos == (uint64_t)hl + VALUE ? '\r' : '\n';
            bad = buf[i] != expect;
        }
        if (n > 0)
            got += (uint64_t)n;
    }
    fprintf(stderr, "replies: %llu of %llu bytes; rss base %ld KiB, max %ld KiB (%ld before reading)\n",
            (unsigned long long)got, (unsigned long long)want, w.base, w.max, max_phase1);
    assert_false(bad);
    assert_int_equal(got, want);
    assert_true(th_quiet(fd, 200));
    assert_true(max_phase1 - w.base < RSS_BOUND_KB);
    assert_true(w.max - w.base < RSS_BOUND_KB);
    close(fd);
    free(v);
}

/* ---- 10d. big bulks stream ------------------------------------------------------ */

#define BIG_N    4
#define BIG_BULK (50u * 1000 * 1000)

/* Four connections each part-way through a 50 MB SET, then finishing it:
 * sluice holds a read of each, never the bulk (it held them whole, and
 * kept the last one's buffer after the close). */
static void test_big_bulks_stream(void **state)
{
    (void)state;
    struct rss_watch w = { warm_baseline(), 0, 0 };
    w.max = w.base;
    static char chunk[65536];
    memset(chunk, 'v', sizeof(chunk));
    int fd[BIG_N];
    size_t sent[BIG_N];
    for (int i = 0; i < BIG_N; i++) {
        char head[96];
        int hn = snprintf(head, sizeof(head), "*3\r\n$3\r\nSET\r\n$4\r\nbig%d\r\n$%u\r\n", i, BIG_BULK);
        fd[i] = th_connect(sport);
        assert_true(fd[i] >= 0);
        assert_int_equal(th_write_all(fd[i], head, (size_t)hn), 0);
        sent[i] = 0;
    }
    /* all four part-way (90%), interleaved */
    for (size_t at = 0; at < BIG_BULK / 10 * 9; at += sizeof(chunk)) {
        for (int i = 0; i < BIG_N; i++) {
            size_t k = sizeof(chunk);
            assert_int_equal(th_write_all(fd[i], chunk, k), 0);
            sent[i] += k;
        }
        rss_sample(&w);
    }
    long mid = th_rss_kb(sluice_p.pid);
    if (mid > w.max)
        w.max = mid;
    for (int i = 0; i < BIG_N; i++) {
        while (sent[i] < BIG_BULK) {
            size_t k = BIG_BULK - sent[i] < sizeof(chunk) ? BIG_BULK - sent[i] : sizeof(chunk);
            assert_int_equal(th_write_all(fd[i], chunk, k), 0);
            sent[i] += k;
        }
        assert_int_equal(th_write_all(fd[i], "\r\n", 2), 0);
        assert_int_equal(th_expect(fd[i], "+OK\r\n", 5, 30000), 0);
        close(fd[i]);
    }
    redisContext *c = redisConnect("127.0.0.1", sport);
    redisReply *r = redisCommand(c, "STRLEN big3");
    assert_int_equal(r->integer, BIG_BULK);
    freeReplyObject(r);
    r = redisCommand(c, "DEL big0 big1 big2 big3");
    freeReplyObject(r);
    redisFree(c);
    long after = th_rss_kb(sluice_p.pid);
    print_message("rss: base %ld KiB, peak %ld KiB, after %ld KiB\n", w.base, w.max, after);
    assert_true(w.max - w.base < RSS_BOUND_KB);
    assert_true(after - w.base < 8 * 1024);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_flood_set, check_alive),
        cmocka_unit_test_teardown(test_flood_set_get, check_alive),
        cmocka_unit_test_teardown(test_big_replies_without_reading, check_alive),
        cmocka_unit_test_teardown(test_big_bulks_stream, check_alive),
    };
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

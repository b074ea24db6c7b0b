/* sluice integration tests — traffic shaping (action = delay), bandwidth
 * limits (metric = bytes_in / bytes_out), connection limits
 * (metric = connections, with leases in the quota store) and shadow limits.
 *
 * Real processes throughout: a redis-server as the resp upstream, another
 * as the quota store (shared by two sluice instances where the test is
 * about a fleet), and forked servers for tcp listeners: one streams bytes
 * to every client forever, one reads and discards while counting what it
 * received in shared memory. The figures each test measures are printed
 * (they show in `make test` output), then checked against the limit:
 *
 *   1. request delay: 3x the rate for 5 s on one connection is answered in
 *      full, in order, at the rate; with a short max_delay the excess is
 *      rejected and the admitted rate is still the rate;
 *   2. bandwidth: bytes_out and bytes_in at 1 MiB/s deliver 10 s x rate +
 *      burst, for one client and for two clients on two instances sharing
 *      the store (one identity);
 *   3. connections: max = 5 across two instances (reject), slots freed on
 *      close and, for a kill -9'd instance, after connection_lease; with
 *      action = delay a login queue that admits in arrival order and refuses
 *      after max_delay;
 *   4. store round trips: shaping 100 MiB/s costs fewer than 200 EVALSHA
 *      calls a second;
 *   5. shadow: bytes_out and connections shadow limits change nothing but
 *      count what they would have done;
 * and around them: one long pipeline against a short max_delay (the tail
 * is rejected, the admitted ones are a prefix), bytes_out on a resp
 * listener (delay and reject), reject on tcp listeners (a close).
 *
 * SHAPE_ONLY=<cmocka pattern> runs only matching tests; SHAPE_TRACE=1
 * prints the bytes moved per 100 ms of every bandwidth run. */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "integration/harness.h"

#define MiB (1024.0 * 1024.0)

/* ---- forked servers ------------------------------------------------------ */

/* Each connection (in its own process) is sent bytes as fast as the peer
 * takes them, until it goes away. */
static void serve_stream(int lfd, void *arg)
{
    (void)arg;
    signal(SIGCHLD, SIG_IGN);
    static char buf[256 * 1024];
    memset(buf, 'x', sizeof(buf));
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            _exit(1);
        }
        if (fork() == 0) {
            close(lfd);
            while (th_write_all(fd, buf, sizeof(buf)) == 0)
                ;
            _exit(0);
        }
        close(fd);
    }
}

/* Each connection is read and discarded; every byte received is added to
 * the shared counter <arg> (an anonymous MAP_SHARED page), so the test sees
 * what actually came through sluice. */
static void serve_sink(int lfd, void *arg)
{
    uint64_t *count = arg;
    signal(SIGCHLD, SIG_IGN);
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            _exit(1);
        }
        if (fork() == 0) {
            close(lfd);
            static char buf[256 * 1024];
            for (;;) {
                ssize_t n = read(fd, buf, sizeof(buf));
                if (n < 0 && errno == EINTR)
                    continue;
                if (n <= 0)
                    break;
                uint64_t was = __atomic_fetch_add(count, (uint64_t)n, __ATOMIC_RELAXED);
                /* [1]: when all connections together passed 1 MiB (a
                 * burst), [2]: when the last bytes came (th_now_ms) */
                uint64_t now = th_now_ms(), last;
                if (was < (uint64_t)MiB && was + (uint64_t)n >= (uint64_t)MiB)
                    __atomic_store_n(&count[1], now, __ATOMIC_RELAXED);
                last = __atomic_load_n(&count[2], __ATOMIC_RELAXED);
                while (last < now && !__atomic_compare_exchange_n(&count[2], &last, now, 0, __ATOMIC_RELAXED,
                                                                  __ATOMIC_RELAXED))
                    ;
            }
            _exit(0);
        }
        close(fd);
    }
}

static uint64_t *shared_counter(void)
{
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    memset(p, 0, 4096);
    return p;
}

/* ---- sluice, admin endpoint, store ------------------------------------- */

/* Starts sluice with an admin port, the quota store <store_port> (0: url =
 * local) and <body> (listeners and limits); waits for <wait_port>. A store
 * timeout of 250 ms: on a busy 2-core machine a slow round trip must not
 * turn into an on_failure decision that would skew the figures. */
static void start_sluice(struct th_proc *p, int admin, int store_port, const char *store_extra,
                         const char *body, int wait_port)
{
    char ini[8192], url[64];
    if (store_port > 0)
        snprintf(url, sizeof(url), "redis://127.0.0.1:%d", store_port);
    else
        snprintf(url, sizeof(url), "local");
    /* <store_extra> may name its own timeout */
    int own_timeout = store_extra != NULL && strstr(store_extra, "timeout =") != NULL;
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\n"
             "[store]\nurl = %s\n%s%s\n%s",
             admin, url, own_timeout ? "" : "timeout = 250ms\n", store_extra ? store_extra : "", body);
    assert_int_equal(th_sluice_start(p, ini, wait_port), 0);
}

/* The integer <field> of limit <limit> in /stats, or -1. A limit object
 * starts {"name":"X","algorithm": (listeners have no algorithm). */
static long stats_field(int admin, const char *limit, const char *field)
{
    char *body = th_http_get(admin, "/stats");
    if (body == NULL)
        return -1;
    char key[128];
    snprintf(key, sizeof(key), "{\"name\":\"%s\",\"algorithm\"", limit);
    long v = -1;
    char *at = strstr(body, key);
    if (at != NULL) {
        snprintf(key, sizeof(key), "\"%s\":", field);
        char *f = strstr(at, key);
        if (f != NULL)
            v = strtol(f + strlen(key), NULL, 10);
    }
    free(body);
    return v;
}

/* Waits until the instance reports its store up. */
static void wait_store_up(int admin)
{
    uint64_t end = th_now_ms() + 5000;
    while (th_now_ms() < end && th_metric(admin, "sluice_store_up") != 1)
        usleep(20000);
    assert_true(th_metric(admin, "sluice_store_up") == 1);
}

/* Script calls the store has run: EVALSHA, plus EVAL should sluice ever
 * fall back to sending the body. */
static long store_script_calls(int port)
{
    return th_redis_cmd_calls(port, "evalsha") + th_redis_cmd_calls(port, "eval");
}

/* ---- 1. request delay ------------------------------------------------------ */

/* One connection sends ECHO <seq> at <per_sec> for <secs> seconds (paced on
 * an absolute schedule, non-blocking writes) and reads every reply. */
struct paced {
    int       n;          /* requests sent (and replies expected) */
    uint64_t *t_reply;    /* ms since t0 of reply i */
    char     *ok;         /* reply i was an admission */
    int       admitted;   /* ECHO answered with its own seq */
    int       throttled;  /* -THROTTLED with the expected text */
    int       bad;        /* anything else, or a seq out of order */
    int       missing;    /* replies that never came */
    uint64_t  last_send;  /* ms since t0 of the last request sent */
};

static void paced_echo(int port, int per_sec, int secs, const char *limit, int deadline_ms,
                       struct paced *r)
{
    memset(r, 0, sizeof(*r));
    r->n = per_sec * secs;
    r->t_reply = calloc((size_t)r->n, sizeof(uint64_t));
    r->ok = calloc((size_t)r->n, 1);
    char throttled[160];
    int tl = snprintf(throttled, sizeof(throttled),
                      "-THROTTLED limit '%s' exceeded for 'ip:127.0.0.1', retry in ", limit);
    size_t ocap = 1 << 20, icap = 1 << 20, olen = 0, ooff = 0, ilen = 0;
    char *out = malloc(ocap), *in = malloc(icap);
    uint64_t t0 = th_now_ms();
    int fd = th_connect(port);
    assert_true(fd >= 0);
    th_nonblock(fd);
    int sent = 0, got = 0;
    uint64_t end = t0 + (uint64_t)deadline_ms;
    while (got < r->n) {
        uint64_t now = th_now_ms();
        if (now >= end)
            break;
        /* everything due by now on the schedule request i at i/per_sec */
        while (sent < r->n && t0 + (uint64_t)sent * 1000 / (uint64_t)per_sec <= now) {
            char seq[16];
            int sl = snprintf(seq, sizeof(seq), "%d", sent);
            if (ooff == olen)
                ooff = olen = 0;
            olen += (size_t)snprintf(out + olen, ocap - olen, "*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n", sl, seq);
            sent++;
            r->last_send = now - t0;
        }
        while (ooff < olen) {
            ssize_t w = write(fd, out + ooff, olen - ooff);
            if (w <= 0)
                break;
            ooff += (size_t)w;
        }
        int timeout = 50;
        if (sent < r->n) {
            uint64_t next = t0 + (uint64_t)sent * 1000 / (uint64_t)per_sec;
            timeout = next > now ? (int)(next - now) : 0;
        }
        struct pollfd pfd = { .fd = fd, .events = POLLIN | (ooff < olen ? POLLOUT : 0) };
        if (poll(&pfd, 1, timeout) <= 0 || !(pfd.revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        ssize_t n = read(fd, in + ilen, icap - ilen);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            break;
        if (n < 0)
            continue;
        ilen += (size_t)n;
        now = th_now_ms();
        size_t off = 0;
        for (;;) {
            size_t rl = th_resp_len(in + off, ilen - off);
            if (rl == 0 || rl == SIZE_MAX)
                break;
            const char *p = in + off;
            if (got < r->n)
                r->t_reply[got] = now - t0;
            if (p[0] == '$') {
                const char *v = strstr(p, "\r\n") + 2;
                if (strtol(v, NULL, 10) == got) {
                    r->admitted++;
                    if (got < r->n)
                        r->ok[got] = 1;
                } else
                    r->bad++;
            } else if (strncmp(p, throttled, (size_t)tl) == 0) {
                r->throttled++;
            } else {
                if (r->bad++ == 0)
                    th_dump("unexpected reply", p, rl);
            }
            got++;
            off += rl;
        }
        memmove(in, in + off, ilen - off);
        ilen -= off;
    }
    r->missing = r->n - got;
    close(fd);
    free(out);
    free(in);
}

/* Admissions by time t never outnumber burst + rate x t (+1 for a
 * reservation made right at a boundary): the admitted stream is never ahead
 * of the limit. Times count from before connect, which errs on the side of
 * allowing more. <unstored> decisions made without the store (on_failure =
 * local after a timeout: sluice_limit_fallback_decisions_total) may each
 * admit one that the store's bucket does not hold (docs/algorithms.md,
 * on_failure = local: rate x the outage more): each is allowed one more,
 * and printed, so that a run where the store fell behind says so. */
static void assert_never_ahead(const struct paced *r, double rate, double burst, double unstored)
{
    int admitted = 0, lead_at = -1;
    double lead = -1e9;
    for (int i = 0; i < r->n; i++) {
        if (r->ok[i] && (double)(admitted + 1) - burst - rate * (double)r->t_reply[i] / 1000.0 > lead) {
            lead = (double)(admitted + 1) - burst - rate * (double)r->t_reply[i] / 1000.0;
            lead_at = admitted + 1;
        }
        admitted += r->ok[i];
    }
    printf("  most ahead: admission %d, %.2f over burst + rate x time; %.0f decisions without the store\n",
           lead_at, lead, unstored);
    burst += unstored;
    admitted = 0;
    for (int i = 0; i < r->n; i++) {
        if (!r->ok[i])
            continue;
        admitted++;
        if ((double)admitted > burst + 1.0 + rate * (double)r->t_reply[i] / 1000.0)
            fail_msg("admission %d (request %d) at %llu ms: ahead of %.0f/s + burst %.0f", admitted, i,
                     (unsigned long long)r->t_reply[i], rate, burst);
    }
}

static void paced_free(struct paced *r)
{
    free(r->t_reply);
    free(r->ok);
}

static void test_request_delay(void **state)
{
    (void)state;
    struct th_proc up, store, sl;
    assert_int_equal(th_redis_start(&up, NULL), 0);
    assert_int_equal(th_redis_start(&store, NULL), 0);
    int admin = th_free_port(), plong = th_free_port(), pshort = th_free_port(), ppipe = th_free_port();
    char body[2048];
    /* Three listeners, one limit each: a long max_delay (everything is
     * queued), a short one (the tail of each backlog is rejected), and one
     * for a single long pipeline. */
    snprintf(body, sizeof(body),
             "[listener qlong]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nidentity = client_ip\n"
             "[listener qshort]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nidentity = client_ip\n"
             "[limit rq_long]\nlistener = qlong\nrate = 100/s\nburst = 10\naction = delay\nmax_delay = 30s\n"
             "[limit rq_short]\nlistener = qshort\nrate = 100/s\nburst = 10\naction = delay\nmax_delay = 20ms\n"
             "[listener qpipe]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nidentity = client_ip\n"
             "[limit rq_pipe]\nlistener = qpipe\nrate = 100/s\nburst = 10\naction = delay\nmax_delay = 200ms\n",
             plong, up.port, pshort, up.port, ppipe, up.port);
    start_sluice(&sl, admin, store.port, NULL, body, pshort);
    wait_store_up(admin);

    /* 300/s for 5 s against 100/s: 1500 requests, all queued. The last is
     * answered at about (1500 - 10) / 100 = 14.9 s. */
    struct paced r;
    paced_echo(plong, 300, 5, "rq_long", 25000, &r);
    int from = 100, to = r.n - 1;
    double slope = r.missing ? 0 : (double)(to - from) * 1000.0 / (double)(r.t_reply[to] - r.t_reply[from]);
    long seen = stats_field(admin, "rq_long", "max_delay_seen_ms");
    printf("delay, max_delay 30s: %d sent in %.2fs, %d answered in order, %d throttled, %d bad, "
           "%d missing; last reply at %.2fs; steady rate %.2f/s (replies %d..%d); "
           "max_delay_seen_ms %ld\n",
           r.n, (double)r.last_send / 1000.0, r.admitted, r.throttled, r.bad, r.missing,
           r.missing ? 0.0 : (double)r.t_reply[r.n - 1] / 1000.0, slope, from, to, seen);
    assert_int_equal(r.missing, 0);
    assert_int_equal(r.bad, 0);
    assert_int_equal(r.throttled, 0);
    assert_int_equal(r.admitted, r.n);
    assert_true(slope >= 98.0 && slope <= 102.0);
    /* reply i came no earlier than the bucket allowed (burst 10, then one
     * per 10 ms) */
    assert_never_ahead(&r, 100.0, 10.0,
                       th_metric(admin, "sluice_limit_fallback_decisions_total{limit=\"rq_long\"}"));
    /* What sluice itself held a request back: positive, never past
     * max_delay. (Not the 9.9 s the last request waited as the client
     * sees it: sluice reserves at most PEND_MAX = 256 requests ahead, the
     * rest wait unread in the socket, so about 2.56 s.) */
    assert_true(seen > 0 && seen <= 30000);
    assert_true(th_metric(admin, "sluice_limit_delayed_total{limit=\"rq_long\"}") >= 1000);
    paced_free(&r);

    /* The same load with max_delay 20 ms: only what can be admitted within
     * 20 ms is queued, the rest is rejected at once; the admitted stream
     * is still 100/s: burst + 5 s x 100 (+2 for the 20 ms of queue). */
    paced_echo(pshort, 300, 5, "rq_short", 10000, &r);
    double secs = (double)r.last_send / 1000.0;
    double adm_rate = (double)(r.admitted - 10) / 5.0;
    long seen_short = stats_field(admin, "rq_short", "max_delay_seen_ms");
    printf("delay, max_delay 20ms: %d sent in %.2fs, %d admitted, %d throttled, %d bad, %d missing; "
           "admitted rate (admitted - burst) / 5 s = %.2f/s; max_delay_seen_ms %ld\n",
           r.n, secs, r.admitted, r.throttled, r.bad, r.missing, adm_rate, seen_short);
    assert_int_equal(r.missing, 0);
    assert_int_equal(r.bad, 0);
    assert_int_equal(r.admitted + r.throttled, r.n);
    assert_true(r.throttled > 0);
    assert_never_ahead(&r, 100.0, 10.0,
                       th_metric(admin, "sluice_limit_fallback_decisions_total{limit=\"rq_short\"}"));
    assert_true(adm_rate >= 98.0 && adm_rate <= 102.0 + 3.0 / 5.0);
    /* nothing was held past max_delay (1 ms of timer rounding) */
    assert_true(seen_short >= 1 && seen_short <= 21);
    assert_true(th_metric(admin, "sluice_limit_decisions_total{limit=\"rq_short\",outcome=\"rejected\"}") ==
                r.throttled);
    assert_true(th_metric(admin, "sluice_limit_delayed_total{limit=\"rq_short\"}") > 0);
    paced_free(&r);

    /* One write of 50 requests: each is reserved in order as it is read,
     * so the first 10 (burst) go at once, the next 20 within max_delay
     * (200 ms at 10 ms each; +1 for a reservation right at the boundary),
     * and the tail that would wait longer is rejected: the admitted ones
     * are a prefix, their replies come in order and spaced by the rate. */
    char pipe[50 * 32];
    size_t plen = 0;
    for (int i = 0; i < 50; i++) {
        char seq[16];
        int sl_len = snprintf(seq, sizeof(seq), "%d", i);
        plen += (size_t)snprintf(pipe + plen, sizeof(pipe) - plen, "*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n",
                                 sl_len, seq);
    }
    struct th_conn c;
    assert_int_equal(th_conn_open(&c, ppipe), 0);
    uint64_t t0 = th_now_ms();
    assert_int_equal(th_write_all(c.fd, pipe, plen), 0);
    int prefix = 0, rejected = 0;
    uint64_t t_last_ok = 0;
    for (int i = 0; i < 50; i++) {
        char *rep = th_conn_reply(&c, TH_MS);
        assert_non_null(rep);
        char want[32];
        snprintf(want, sizeof(want), "$%d\r\n%d\r\n", i < 10 ? 1 : 2, i);
        if (strcmp(rep, want) == 0) {
            assert_int_equal(rejected, 0); /* no admission after a rejection */
            prefix++;
            t_last_ok = th_now_ms() - t0;
        } else {
            assert_non_null(strstr(rep, "-THROTTLED limit 'rq_pipe' exceeded for 'ip:127.0.0.1', retry in "));
            rejected++;
        }
        free(rep);
    }
    th_conn_close(&c);
    printf("delay, one pipeline of 50, burst 10, max_delay 200ms: %d admitted (the first %d), %d rejected; "
           "last admitted answered after %llu ms\n",
           prefix, prefix, rejected, (unsigned long long)t_last_ok);
    assert_true(prefix >= 30 && prefix <= 31);
    /* the last admission waited its turn: (prefix - burst) x 10 ms. Only
     * the floor is the limit's; how much later the reply comes is the
     * machine's (it was 400 ms, which a loaded machine may pass), so the
     * ceiling is only "not held for max_delay many times over". */
    assert_true(t_last_ok >= (uint64_t)(prefix - 10 - 1) * 10 && t_last_ok <= 2000);

    assert_int_equal(th_stop(&sl), 0);
    th_stop(&up);
    th_stop(&store);
}

/* ---- 2. bandwidth ---------------------------------------------------------- */

/* A set of client connections run together for a while: downloads read
 * everything that comes, uploads write as fast as the socket takes. */
struct flow {
    int      port;
    int      upload;
    int      fd;
    uint64_t bytes; /* received (download) or written (upload) */
    int      closed;
    uint64_t closed_ms; /* when the close was seen, ms from t0 (the deadline if never) */
    uint64_t last_ms;   /* the last read or write that moved bytes, ms from t0 */
};

static uint64_t flows_t0;       /* t0 of the last run_flows (th_now_ms) */
static uint64_t flows_burst_ms; /* when its downloads together passed 1 MiB, ms from t0 (0: never) */

/* What the last run_flows moved in each 100 ms (all flows together), to
 * show how a flow was shaped when a figure is off (or with SHAPE_TRACE=1). */
static uint64_t timeline[256];
static int      timeline_n;

static void print_timeline(void)
{
    for (int i = 0; i < timeline_n; i++)
        fprintf(stderr, "  %5d ms  +%8.3f MiB\n", (i + 1) * 100, (double)timeline[i] / MiB);
}

/* Connects every flow (t0 is taken before the first connect: figures are
 * measured from connect) and runs them until t0 + ms. The sockets stay
 * open (close_flows) so a server-side count can be read at the deadline. */
static void run_flows(struct flow *f, int n, int ms)
{
    static char buf[1 << 20];
    assert_true(n <= 8);
    uint64_t t0 = th_now_ms();
    flows_t0 = t0;
    flows_burst_ms = 0;
    uint64_t down = 0;
    for (int i = 0; i < n; i++) {
        f[i].last_ms = 0;
        f[i].fd = th_connect(f[i].port);
        assert_true(f[i].fd >= 0);
        th_nonblock(f[i].fd);
        f[i].bytes = 0;
        f[i].closed = 0;
        f[i].closed_ms = (uint64_t)ms;
    }
    struct pollfd pfd[8];
    uint64_t next_mark = t0 + 100, last_total = 0;
    timeline_n = 0;
    for (;;) {
        uint64_t now = th_now_ms();
        while (now >= next_mark && timeline_n < 256) {
            uint64_t total = 0;
            for (int i = 0; i < n; i++)
                total += f[i].bytes;
            timeline[timeline_n++] = total - last_total;
            last_total = total;
            next_mark += 100;
        }
        if (now >= t0 + (uint64_t)ms)
            break;
        for (int i = 0; i < n; i++) {
            pfd[i].fd = f[i].closed ? -1 : f[i].fd;
            pfd[i].events = f[i].upload ? POLLOUT : POLLIN;
            pfd[i].revents = 0;
        }
        int wait = (int)(t0 + (uint64_t)ms - now);
        if (wait > (int)(next_mark - now))
            wait = (int)(next_mark - now);
        if (poll(pfd, (nfds_t)n, wait) <= 0)
            continue;
        for (int i = 0; i < n; i++) {
            if (pfd[i].revents == 0)
                continue;
            ssize_t k = f[i].upload ? write(f[i].fd, buf, sizeof(buf)) : read(f[i].fd, buf, sizeof(buf));
            if (k > 0) {
                f[i].bytes += (uint64_t)k;
                f[i].last_ms = th_now_ms() - t0;
                if (!f[i].upload && down < (uint64_t)MiB && (down += (uint64_t)k) >= (uint64_t)MiB)
                    flows_burst_ms = f[i].last_ms;
            } else if (k == 0 || (errno != EAGAIN && errno != EINTR)) {
                f[i].closed = 1;
                f[i].closed_ms = th_now_ms() - t0;
            }
        }
    }
    if (getenv("SHAPE_TRACE") != NULL)
        print_timeline();
}

static void close_flows(struct flow *f, int n)
{
    for (int i = 0; i < n; i++)
        close(f[i].fd);
}

/* What a 1 MiB/s limit with a 1 MiB burst owes a flow that had moved its
 * first MiB at <burst> ms and its last bytes at <last> ms of a run of <ms>
 * (ms from t0, before connect): 1 MiB + rate x (last - burst). Not burst +
 * rate x ms: until the burst is spent the bucket is full and what a stall
 * then (a loaded machine not running sluice, the store or the client)
 * would have refilled is lost, and what the limit allows in the run's last
 * moments is delivered only if sluice, the client and the sink are run
 * then: a run lost 0.48 s of both flows at once (10.516 MiB of 11; a 600 ms
 * SIGSTOP of sluice across the deadline gives just that). Past the burst
 * the bucket is near empty, and a stall shorter than a second (the burst
 * over the rate) costs nothing: the bucket keeps what was not taken. So
 * this floor still fails a limit that delivers below its rate, or loses
 * what a stall left in its bucket. *<unused> is the time the floor does
 * not count (burst + ms - last), bounded by the caller, so a flow that
 * stopped early or started late is not excused. */
static double bw_owed(uint64_t burst, uint64_t last, int ms, uint64_t *unused)
{
    if (last > (uint64_t)ms)
        last = (uint64_t)ms; /* bytes after the deadline count, their time does not */
    if (burst == 0 || burst > last)
        burst = last;
    *unused = burst + (uint64_t)ms - last;
    return 1.0 * MiB + 1.0 * MiB * (double)(last - burst) / 1000.0;
}

static uint64_t since_t0(uint64_t when)
{
    return when > flows_t0 ? when - flows_t0 : 0;
}

static void test_bandwidth(void **state)
{
    (void)state;
    struct th_proc store, sl[2];
    assert_int_equal(th_redis_start(&store, NULL), 0);
    /* One sink per run: bytes an upload left in socket buffers at its
     * end still trickle through (shaped) afterwards, and must not be
     * counted in the next run. */
    int stream_up = 0, sink_up[2] = { 0, 0 };
    uint64_t *sunk[2] = { shared_counter(), shared_counter() };
    pid_t stream = th_fork_server(&stream_up, serve_stream, NULL);
    pid_t sink[2] = { th_fork_server(&sink_up[0], serve_sink, sunk[0]),
                      th_fork_server(&sink_up[1], serve_sink, sunk[1]) };
    assert_true(stream > 0 && sink[0] > 0 && sink[1] > 0);

    /* Each instance: d1/u1 (used by instance 0 alone) and d2/u2 (used
     * through both instances at once). Separate limits per run, so what a
     * run leaves in its bucket (or in socket buffers) cannot skew the
     * next. Limits of the same name on both instances share the store's
     * keys; identity client_ip puts every client (127.0.0.1) in one. */
    int admin[2], d1[2], u1[2], d2[2], u2[2];
    for (int i = 0; i < 2; i++) {
        admin[i] = th_free_port();
        d1[i] = th_free_port();
        u1[i] = th_free_port();
        d2[i] = th_free_port();
        u2[i] = th_free_port();
        char body[4096];
        snprintf(body, sizeof(body),
                 "[listener d1]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = tcp\nidentity = client_ip\n"
                 "[listener u1]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = tcp\nidentity = client_ip\n"
                 "[listener d2]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = tcp\nidentity = client_ip\n"
                 "[listener u2]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = tcp\nidentity = client_ip\n"
                 "[limit out1]\nlistener = d1\nmetric = bytes_out\nrate = 1MiB/s\naction = delay\n"
                 "[limit in1]\nlistener = u1\nmetric = bytes_in\nrate = 1MiB/s\naction = delay\n"
                 "[limit out2]\nlistener = d2\nmetric = bytes_out\nrate = 1MiB/s\naction = delay\n"
                 "[limit in2]\nlistener = u2\nmetric = bytes_in\nrate = 1MiB/s\naction = delay\n",
                 d1[i], stream_up, u1[i], sink_up[0], d2[i], stream_up, u2[i], sink_up[1]);
        /* The store's answers, not on_failure's: a store that a loaded
         * machine holds up past a 250 ms timeout hands its buckets to the
         * local fallback (on_failure = local, whose bucket starts full),
         * and the bytes then exceed the store's bound by design
         * (docs/limits.md); that fallback is tested on its own. */
        start_sluice(&sl[i], admin[i], store.port, "timeout = 5s", body, u2[i]);
    }
    wait_store_up(admin[0]);
    wait_store_up(admin[1]);

    /* 10 s at 1 MiB/s with a burst of 1 MiB (one second's worth): 11 MiB. */
    const double want = 11.0 * MiB;

    /* One client downloading and one uploading, through instance 0. */
    struct flow one[2] = { { .port = d1[0] }, { .port = u1[0], .upload = 1 } };
    run_flows(one, 2, 10000);
    uint64_t in_one = __atomic_load_n(sunk[0], __ATOMIC_RELAXED);
    uint64_t un_out, un_in;
    double owed_out = bw_owed(flows_burst_ms, one[0].last_ms, 10000, &un_out);
    double owed_in = bw_owed(since_t0(__atomic_load_n(&sunk[0][1], __ATOMIC_RELAXED)),
                             since_t0(__atomic_load_n(&sunk[0][2], __ATOMIC_RELAXED)), 10000, &un_in);
    close_flows(one, 2);
    printf("bandwidth, one instance, 10 s: bytes_out %.3f MiB received, bytes_in %.3f MiB reached "
           "the server (%.3f MiB written by the client); at most %.3f MiB each; owed %.3f and %.3f "
           "MiB (%llu and %llu ms unused at the ends)\n",
           (double)one[0].bytes / MiB, (double)in_one / MiB, (double)one[1].bytes / MiB, want / MiB,
           owed_out / MiB, owed_in / MiB, (unsigned long long)un_out, (unsigned long long)un_in);
    if (!((double)one[0].bytes >= 0.99 * owed_out && (double)in_one >= 0.99 * owed_in))
        print_timeline();
    assert_false(one[0].closed);
    assert_true(un_out <= 1500 && un_in <= 1500);
    assert_true((double)one[0].bytes >= 0.99 * owed_out && (double)one[0].bytes <= 1.01 * want);
    assert_true((double)in_one >= 0.99 * owed_in && (double)in_one <= 1.01 * want);

    /* Two clients each way, one per instance, one identity: together they
     * get what one would. */
    struct flow two[4] = { { .port = d2[0] }, { .port = d2[1] },
                           { .port = u2[0], .upload = 1 }, { .port = u2[1], .upload = 1 } };
    run_flows(two, 4, 10000);
    uint64_t in_two = __atomic_load_n(sunk[1], __ATOMIC_RELAXED);
    /* the two downloads together: to the last bytes of either */
    uint64_t last2 = two[0].last_ms > two[1].last_ms ? two[0].last_ms : two[1].last_ms;
    owed_out = bw_owed(flows_burst_ms, last2, 10000, &un_out);
    owed_in = bw_owed(since_t0(__atomic_load_n(&sunk[1][1], __ATOMIC_RELAXED)),
                      since_t0(__atomic_load_n(&sunk[1][2], __ATOMIC_RELAXED)), 10000, &un_in);
    close_flows(two, 4);
    double out_two = (double)(two[0].bytes + two[1].bytes);
    printf("bandwidth, two instances sharing the store, 10 s: bytes_out %.3f + %.3f = %.3f MiB, "
           "bytes_in %.3f MiB at the server (written %.3f + %.3f MiB); at most %.3f MiB each; owed "
           "%.3f and %.3f MiB (%llu and %llu ms unused at the ends)\n",
           (double)two[0].bytes / MiB, (double)two[1].bytes / MiB, out_two / MiB, (double)in_two / MiB,
           (double)two[2].bytes / MiB, (double)two[3].bytes / MiB, want / MiB, owed_out / MiB,
           owed_in / MiB, (unsigned long long)un_out, (unsigned long long)un_in);
    if (!(out_two >= 0.98 * owed_out && (double)in_two >= 0.98 * owed_in))
        print_timeline();
    assert_true(un_out <= 1500 && un_in <= 1500);
    assert_true(out_two >= 0.98 * owed_out && out_two <= 1.02 * want);
    assert_true((double)in_two >= 0.98 * owed_in && (double)in_two <= 1.02 * want);
    /* both clients got a share (neither instance was starved) */
    assert_true(two[0].bytes > 1.0 * MiB && two[1].bytes > 1.0 * MiB);

    for (int i = 0; i < 2; i++)
        assert_int_equal(th_stop(&sl[i]), 0);
    th_kill_server(stream);
    th_kill_server(sink[0]);
    th_kill_server(sink[1]);
    th_stop(&store);
    munmap(sunk[0], 4096);
    munmap(sunk[1], 4096);
}

/* bytes_out on a resp listener: delay slows the replies to the rate (the
 * upstream side is not read), reject answers -THROTTLED to requests once
 * the burst is spent, and the connection stays usable. */
static void test_resp_bytes(void **state)
{
    (void)state;
    struct th_proc up, store, sl;
    assert_int_equal(th_redis_start(&up, NULL), 0);
    assert_int_equal(th_redis_start(&store, NULL), 0);
    int admin = th_free_port(), pd = th_free_port(), pr = th_free_port();
    char body[2048];
    snprintf(body, sizeof(body),
             "[listener rd]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nidentity = client_ip\n"
             "[listener rr]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nidentity = client_ip\n"
             "[limit rbd]\nlistener = rd\nmetric = bytes_out\nrate = 1MiB/s\naction = delay\n"
             "[limit rbr]\nlistener = rr\nmetric = bytes_out\nrate = 1MiB/s\naction = reject\n",
             pd, up.port, pr, up.port);
    start_sluice(&sl, admin, store.port, NULL, body, pr);
    wait_store_up(admin);

    /* a 64 KiB value, set directly upstream */
    static char val[65536];
    memset(val, 'v', sizeof(val));
    redisContext *rc = redisConnect("127.0.0.1", up.port);
    assert_non_null(rc);
    redisReply *rr = redisCommand(rc, "SET big %b", val, sizeof(val));
    assert_non_null(rr);
    freeReplyObject(rr);
    redisFree(rc);
    const size_t reply_len = sizeof(val) + 10; /* $65536\r\n ... \r\n */

    /* delay: GET big with 4 in flight for 3 s: 3 s x 1 MiB/s + 1 MiB. */
    struct th_conn c;
    assert_int_equal(th_conn_open(&c, pd), 0);
    uint64_t t0 = th_now_ms(), end = t0 + 3000;
    int inflight = 0;
    uint64_t got = 0;
    for (;;) {
        while (inflight < 4 && th_now_ms() < end) {
            assert_int_equal(th_conn_send(&c, "GET big\r\n"), 0);
            inflight++;
        }
        if (inflight == 0)
            break;
        uint64_t now = th_now_ms();
        if (now >= end)
            break;
        char *r = th_conn_reply(&c, (int)(end - now));
        if (r == NULL)
            break;
        assert_int_equal(strlen(r), reply_len);
        got += reply_len;
        inflight--;
        free(r);
    }
    /* whole replies only: add what of the next one has arrived */
    got += c.len;
    th_conn_close(&c);
    double want = 4.0 * MiB;
    printf("resp bytes_out delay 1 MiB/s: %.3f MiB of replies in 3 s (expected %.3f MiB)\n",
           (double)got / MiB, want / MiB);
    assert_true((double)got >= 0.97 * want && (double)got <= 1.03 * want);

    /* reject: one GET at a time for 3 s. The burst (1 MiB) covers 16
     * replies of 64 KiB; each reply puts the meter in debt until its take
     * comes back, and the next GET waits for that answer (it is not let
     * through on credit the store has not granted). Once the bucket is
     * empty, GETs are answered -THROTTLED, retry in N ms, on a connection
     * that stays open, until the debt is paid; the client waits N ms each
     * time.
     *
     * Over the run: burst + 3 s x rate, give or take a reply. (Measured:
     * +0.04 MiB, the first refusal after 16 GETs, every run, also with two
     * busy loops on the 2 cores. Before requests waited for the take,
     * GETs that came while it was at the store went through: up to
     * +2.3 MiB in 3 s on a busy machine.) */
    assert_int_equal(th_conn_open(&c, pr), 0);
    int ok = 0, refused = 0, first_refusal_after = -1;
    long retry_ms = -1, first_retry = -1;
    t0 = th_now_ms();
    end = t0 + 3000;
    while (th_now_ms() < end) {
        assert_int_equal(th_conn_send(&c, "GET big\r\n"), 0);
        char *r = th_conn_reply(&c, TH_MS);
        assert_non_null(r);
        if (r[0] == '$') {
            assert_int_equal(strlen(r), reply_len);
            ok++;
        } else {
            const char *pre = "-THROTTLED limit 'rbr' exceeded for 'ip:127.0.0.1', retry in ";
            if (strncmp(r, pre, strlen(pre)) != 0)
                fail_msg("unexpected reply %s", r);
            retry_ms = strtol(r + strlen(pre), NULL, 10);
            assert_true(retry_ms > 0 && retry_ms <= 1100);
            if (refused++ == 0) {
                first_refusal_after = ok;
                first_retry = retry_ms;
            }
            free(r);
            r = NULL;
            uint64_t now = th_now_ms();
            if (now + (uint64_t)retry_ms >= end)
                break;
            usleep((useconds_t)retry_ms * 1000);
        }
        free(r);
    }
    double secs = (double)(th_now_ms() - t0) / 1000.0;
    th_conn_close(&c);
    double served = (double)ok * (double)reply_len, cap = MiB + MiB * secs;
    printf("resp bytes_out reject 1 MiB/s: first refusal after %d GETs of 64 KiB (retry in %ld ms); "
           "over %.2f s %d served = %.3f MiB (burst + rate x time %.3f MiB, over by %+.3f MiB), "
           "%d refused\n",
           first_refusal_after, first_retry, secs, ok, served / MiB, cap / MiB, (served - cap) / MiB,
           refused);
    assert_true(first_refusal_after >= 16 && first_refusal_after <= 18);
    assert_true(refused > 0);
    assert_true(served <= cap + 2.0 * (double)reply_len);
    assert_true(served >= cap - 4.0 * (double)reply_len);

    assert_int_equal(th_stop(&sl), 0);
    th_stop(&up);
    th_stop(&store);
}

/* ---- 3. connections ---------------------------------------------------------- */

/* Connects to a resp listener and sends PING; returns the fd. */
static int open_ping(int port)
{
    int fd = th_connect(port);
    assert_true(fd >= 0);
    assert_int_equal(th_write_all(fd, "PING\r\n", 6), 0);
    return fd;
}

/* A connection that is admitted: PING answered. */
static int open_ok(int port)
{
    int fd = open_ping(port);
    assert_int_equal(th_expect(fd, "+PONG\r\n", 7, TH_MS), 0);
    return fd;
}

static char refusal[128];
static size_t refusal_len;

static void set_refusal(const char *limit)
{
    refusal_len = (size_t)snprintf(refusal, sizeof(refusal),
                                   "-ERR max number of clients reached (limit '%s')\r\n", limit);
}

/* A connection that is refused: the error text, then EOF. Nothing is sent
 * (a request unread at close could turn the close into a reset that eats
 * the text). */
static void expect_refused(int port)
{
    int fd = th_connect(port);
    assert_true(fd >= 0);
    assert_int_equal(th_expect_close(fd, refusal, refusal_len, TH_MS), 0);
    close(fd);
}

/* Tries to get a connection in until <ms> pass; the fd, or -1. Refused
 * attempts hold nothing. */
static int try_open(int port, int ms)
{
    uint64_t end = th_now_ms() + (uint64_t)ms;
    do {
        int fd = th_connect(port);
        assert_true(fd >= 0);
        char buf[256];
        th_write_all(fd, "PING\r\n", 6);
        size_t n = th_read_n(fd, buf, 7, 2000);
        if (n == 7 && memcmp(buf, "+PONG\r\n", 7) == 0)
            return fd;
        close(fd);
        usleep(50000);
    } while (th_now_ms() < end);
    return -1;
}

static void start_pair_conn(struct th_proc *store, struct th_proc *up, struct th_proc sl[2], int admin[2],
                            int port[2], const char *limit)
{
    assert_int_equal(th_redis_start(up, NULL), 0);
    assert_int_equal(th_redis_start(store, NULL), 0);
    for (int i = 0; i < 2; i++) {
        admin[i] = th_free_port();
        port[i] = th_free_port();
        char body[2048];
        snprintf(body, sizeof(body),
                 "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nidentity = client_ip\n%s",
                 port[i], up->port, limit);
        start_sluice(&sl[i], admin[i], store->port, "connection_lease = 2s", body, port[i]);
    }
    wait_store_up(admin[0]);
    wait_store_up(admin[1]);
}

static void test_connections_reject(void **state)
{
    (void)state;
    struct th_proc store, up, sl[2];
    int admin[2], port[2];
    start_pair_conn(&store, &up, sl, admin, port,
                    "[limit conns]\nlistener = r\nmetric = connections\nmax = 5\nscope = identity\n"
                    "action = reject\n");
    set_refusal("conns");
    const int A = 0, B = 1;
    int a[8], na = 0, b[8], nb = 0;

    /* 3 on A and 2 on B: the 5 the identity may hold, across instances. */
    for (int i = 0; i < 3; i++)
        a[na++] = open_ok(port[A]);
    for (int i = 0; i < 2; i++)
        b[nb++] = open_ok(port[B]);
    /* a 6th is refused on either */
    expect_refused(port[A]);
    expect_refused(port[B]);

    /* A close on B frees its slot at once (well before any lease could
     * run out): a new one on A gets in. */
    close(b[--nb]);
    uint64_t t = th_now_ms();
    a[na] = try_open(port[A], 1500);
    printf("connections: slot freed by a close on B, taken on A after %llu ms\n",
           (unsigned long long)(th_now_ms() - t));
    assert_true(a[na] >= 0);
    na++;
    expect_refused(port[B]);

    /* kill -9 A, holding 4: nobody releases its slots; B still may not
     * open more right away, but once A's leases (2 s, renewed every
     * lease/3) run out, B gets all 5. A slot taken after A's last renewal
     * runs out that much later, so each is polled for, all by kill + 4 s. */
    assert_true(th_signal_wait(&sl[A], SIGKILL, 2000) != -1);
    uint64_t killed = th_now_ms();
    if (getenv("TH_KEEP_LOGS") == NULL) { /* th_stop would have, after a clean exit */
        unlink(sl[A].log);
        unlink(sl[A].conf);
    }
    for (int i = 0; i < na; i++)
        close(a[i]);
    expect_refused(port[B]);
    uint64_t refused_at = th_now_ms() - killed;
    uint64_t freed[4];
    for (int i = 0; i < 4; i++) {
        uint64_t now = th_now_ms() - killed;
        b[nb] = try_open(port[B], now < 4000 ? (int)(4000 - now) : 1);
        freed[i] = th_now_ms() - killed;
        assert_true(b[nb] >= 0);
        nb++;
    }
    printf("connections: instance A (4 slots) killed; B still refused %llu ms after; B took them "
           "back after %llu, %llu, %llu, %llu ms (lease 2 s)\n",
           (unsigned long long)refused_at, (unsigned long long)freed[0], (unsigned long long)freed[1],
           (unsigned long long)freed[2], (unsigned long long)freed[3]);
    /* not before A's lease can have run out (2/3 of it after the last renewal) */
    assert_true(freed[0] >= 1200);
    assert_true(freed[3] <= 4000);
    assert_int_equal(nb, 5);
    expect_refused(port[B]);
    assert_true(th_metric(admin[B], "sluice_limit_decisions_total{limit=\"conns\",outcome=\"rejected\"}") >= 3);

    for (int i = 0; i < nb; i++)
        close(b[i]);
    assert_int_equal(th_stop(&sl[B]), 0);
    th_stop(&up);
    th_stop(&store);
}

static void test_connections_delay_queue(void **state)
{
    (void)state;
    struct th_proc store, up, sl[2];
    int admin[2], port[2];
    start_pair_conn(&store, &up, sl, admin, port,
                    "[limit lq]\nlistener = r\nmetric = connections\nmax = 2\nscope = identity\n"
                    "action = delay\nmax_delay = 3s\n");
    set_refusal("lq");
    const int A = 0, B = 1;

    /* Two holders fill the limit. */
    int h1 = open_ok(port[A]);
    int h2 = open_ok(port[B]);

    /* Three more queue in arrival order, across both instances; each has
     * sent PING, which must not be answered while it waits. The 150 ms
     * between them lets each reach the store's queue before the next. */
    uint64_t tq = th_now_ms();
    int q1 = open_ping(port[A]);
    usleep(150000);
    int q2 = open_ping(port[B]);
    usleep(150000);
    int q3 = open_ping(port[A]);
    assert_true(th_quiet(q1, 300) && th_quiet(q2, 1) && th_quiet(q3, 1));
    /* queued logins are not connected upstream yet: only the holders are
     * (plus the INFO asker itself) */
    assert_int_equal(th_redis_info(up.port, "connected_clients"), 3);

    /* Each holder that leaves lets in the one at the head of the queue, and
     * only that one. */
    close(h1);
    assert_int_equal(th_expect(q1, "+PONG\r\n", 7, 1500), 0);
    uint64_t t1 = th_now_ms() - tq;
    assert_true(th_quiet(q2, 300) && th_quiet(q3, 1));
    close(h2);
    assert_int_equal(th_expect(q2, "+PONG\r\n", 7, 1500), 0);
    uint64_t t2 = th_now_ms() - tq;
    assert_true(th_quiet(q3, 300));
    close(q1);
    assert_int_equal(th_expect(q3, "+PONG\r\n", 7, 1500), 0);
    uint64_t t3 = th_now_ms() - tq;

    /* Nobody leaves now: a fourth waits max_delay (3 s), then is refused. */
    uint64_t t4 = th_now_ms();
    int q4 = th_connect(port[B]);
    assert_true(q4 >= 0);
    assert_int_equal(th_expect_close(q4, refusal, refusal_len, 6000), 0);
    uint64_t waited = th_now_ms() - t4;
    close(q4);
    printf("connections, login queue: Q1 in at %llu ms, Q2 at %llu ms, Q3 at %llu ms; "
           "Q4 refused after %llu ms (max_delay 3 s)\n",
           (unsigned long long)t1, (unsigned long long)t2, (unsigned long long)t3,
           (unsigned long long)waited);
    assert_true(waited >= 2900 && waited <= 4500);
    /* the queued logins were counted as delayed (Q1, Q3 on A; Q2 on B) */
    assert_true(th_metric(admin[A], "sluice_limit_delayed_total{limit=\"lq\"}") >= 2);
    assert_true(th_metric(admin[B], "sluice_limit_delayed_total{limit=\"lq\"}") >= 1);
    /* Q4, refused on B once max_delay passed, is B's one rejection */
    assert_true(th_metric(admin[B], "sluice_limit_decisions_total{limit=\"lq\",outcome=\"rejected\"}") == 1);
    assert_true(th_metric(admin[A], "sluice_limit_decisions_total{limit=\"lq\",outcome=\"rejected\"}") <= 0);

    close(q2);
    close(q3);
    for (int i = 0; i < 2; i++)
        assert_int_equal(th_stop(&sl[i]), 0);
    th_stop(&up);
    th_stop(&store);
}

/* ---- 4. store round trips ------------------------------------------------------ */

static void test_store_round_trips(void **state)
{
    (void)state;
    struct th_proc store, sl;
    assert_int_equal(th_redis_start(&store, NULL), 0);
    int stream_up = 0;
    pid_t stream = th_fork_server(&stream_up, serve_stream, NULL);
    assert_true(stream > 0);
    int admin = th_free_port(), port = th_free_port();
    char body[1024];
    /* burst 10 MiB rather than the default second's worth, so a 3 s run is
     * mostly shaped, not mostly burst. Tokens come in chunks of 10 ms of
     * the rate (1 MiB): about 100 store calls a second. */
    snprintf(body, sizeof(body),
             "[listener fast]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = tcp\n"
             "identity = client_ip\n"
             "[limit big]\nlistener = fast\nmetric = bytes_out\nrate = 100MiB/s\nburst = 10485760\n"
             "action = delay\n",
             port, stream_up);
    start_sluice(&sl, admin, store.port, NULL, body, port);
    wait_store_up(admin);

    long before = store_script_calls(store.port);
    uint64_t t0 = th_now_ms();
    struct flow f = { .port = port };
    run_flows(&f, 1, 3000);
    close_flows(&f, 1);
    double secs = (double)(th_now_ms() - t0) / 1000.0;
    long calls = store_script_calls(store.port) - before;
    double want = 100.0 * MiB * 3.0 + 10.0 * MiB;
    /* a store round trip past the timeout would mean decisions made
     * without it (on_failure): say so, it explains odd figures */
    printf("store round trips: %.1f MiB in %.2f s (expected %.1f MiB: 3 s x 100 MiB/s + 10 MiB burst); "
           "%ld script calls = %.1f/s; store timeouts %.0f, fallback decisions %.0f\n",
           (double)f.bytes / MiB, secs, want / MiB, calls, (double)calls / secs,
           th_metric(admin, "sluice_store_timeouts_total"),
           th_metric(admin, "sluice_limit_fallback_decisions_total{limit=\"big\"}"));
    /* Never ahead of the limit: rate x time + burst, by the client's clock
     * (from before connect, longer than sluice's). Not a floor of 90 % of
     * that: 100 MiB/s through three processes is what the machine can
     * move alone, not under load (a loaded run moved 196 MiB, 50-70 MiB/s,
     * with an 800 ms stretch at 4 MiB/s, every take answered at once);
     * test_bandwidth holds delivery to the rate at 1 MiB/s. What this test
     * is about holds at any speed: one store call per chunk (10 ms of the
     * rate, 1 MiB) moved past the burst, not one per read, so under 200 a
     * second at full speed. */
    double most = 100.0 * MiB * secs + 10.0 * MiB + 1.0 * MiB;
    double chunks = ((double)f.bytes - 10.0 * MiB) / MiB;
    if ((double)f.bytes > most || (double)calls > 1.1 * chunks + 20.0)
        print_timeline();
    assert_true((double)f.bytes <= most);
    assert_true((double)f.bytes > 20.0 * MiB); /* shaped past the burst: takes were answered */
    assert_true((double)calls <= 1.1 * chunks + 20.0); /* + the heartbeat, retried takes */
    assert_true((double)calls / secs < 200.0);
    assert_true(calls > 0); /* the store was asked at all */

    assert_int_equal(th_stop(&sl), 0);
    th_kill_server(stream);
    th_stop(&store);
}

/* ---- reject on tcp --------------------------------------------------------------- */

/* action = reject on a tcp listener has no error to send: a download over
 * bytes_out is closed once the burst is spent, a connection over max is
 * accepted and closed at once, and neither touches the other clients. */
static void test_tcp_reject(void **state)
{
    (void)state;
    struct th_proc store, sl;
    assert_int_equal(th_redis_start(&store, NULL), 0);
    int stream_up = 0;
    pid_t stream = th_fork_server(&stream_up, serve_stream, NULL);
    assert_true(stream > 0);
    int admin = th_free_port(), bport = th_free_port(), cport = th_free_port();
    char body[2048];
    snprintf(body, sizeof(body),
             "[listener tb]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = tcp\n"
             "identity = client_ip\n"
             "[listener tc]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = tcp\n"
             "identity = client_ip\n"
             "[limit tbw]\nlistener = tb\nmetric = bytes_out\nrate = 1MiB/s\naction = reject\n"
             "[limit tconn]\nlistener = tc\nmetric = connections\nmax = 1\naction = reject\n",
             bport, stream_up, cport, stream_up);
    start_sluice(&sl, admin, store.port, NULL, body, cport);
    wait_store_up(admin);

    /* 1 MiB/s, burst 1 MiB: the download ends soon after the first MiB.
     * The bucket refills while the burst drains, so what may pass is the
     * burst plus the rate times the time until the close (the client's
     * count from before connect: sluice's is shorter), plus what was read
     * before the refusal came (one read of 64 KiB and a take's chunk of
     * 16 KiB). Not a fixed 1.1 MiB: on a loaded machine draining the burst
     * took 141 ms, so 1.141 MiB passed, as the limit allows. */
    struct flow f = { .port = bport };
    run_flows(&f, 1, 3000);
    close_flows(&f, 1);
    double most = 1.0 * MiB + 1.0 * MiB * (double)f.closed_ms / 1000.0 + 80.0 * 1024;
    printf("tcp bytes_out reject 1 MiB/s: %.3f MiB received, then %s after %llu ms (at most %.3f MiB)\n",
           (double)f.bytes / MiB, f.closed ? "closed" : "still open", (unsigned long long)f.closed_ms,
           most / MiB);
    assert_true(f.closed);
    assert_true((double)f.bytes >= 1.0 * MiB && (double)f.bytes <= most);
    assert_true(th_metric(admin, "sluice_limit_decisions_total{limit=\"tbw\",outcome=\"rejected\"}") >= 1);

    /* max = 1: the second connection is accepted, then closed with nothing
     * sent; the first keeps streaming. */
    int c1 = th_connect(cport);
    assert_true(c1 >= 0);
    char buf[65536];
    assert_true(th_read_n(c1, buf, sizeof(buf), TH_MS) == sizeof(buf));
    int c2 = th_connect(cport);
    assert_true(c2 >= 0);
    assert_true(th_wait_eof(c2, TH_MS));
    close(c2);
    assert_true(th_read_n(c1, buf, sizeof(buf), TH_MS) == sizeof(buf));
    close(c1);
    assert_true(th_metric(admin, "sluice_limit_decisions_total{limit=\"tconn\",outcome=\"rejected\"}") == 1);

    assert_int_equal(th_stop(&sl), 0);
    th_kill_server(stream);
    th_stop(&store);
}

/* ---- 5. shadow ------------------------------------------------------------------ */

static void test_shadow(void **state)
{
    (void)state;
    struct th_proc store, up, sl;
    assert_int_equal(th_redis_start(&store, NULL), 0);
    assert_int_equal(th_redis_start(&up, NULL), 0);
    int stream_up = 0;
    pid_t stream = th_fork_server(&stream_up, serve_stream, NULL);
    assert_true(stream > 0);
    int admin = th_free_port(), sport = th_free_port(), rport = th_free_port();
    char body[2048];
    snprintf(body, sizeof(body),
             "[listener s]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = tcp\n"
             "identity = client_ip\n"
             "[listener c]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nidentity = client_ip\n"
             "[limit sbw]\nlistener = s\nmetric = bytes_out\nrate = 1MiB/s\naction = shadow\n"
             "[limit sconn]\nlistener = c\nmetric = connections\nmax = 1\naction = shadow\n",
             sport, stream_up, rport, up.port);
    start_sluice(&sl, admin, store.port, NULL, body, rport);
    wait_store_up(admin);

    /* A 1 MiB/s shadow limit lets a 2 s download run at full speed, and
     * says how often and how long it would have held it back. */
    long before = store_script_calls(store.port);
    struct flow f = { .port = sport };
    run_flows(&f, 1, 2000);
    close_flows(&f, 1);
    long calls = store_script_calls(store.port) - before;
    double shadow = th_metric(admin, "sluice_limit_decisions_total{limit=\"sbw\",outcome=\"shadow_rejected\"}");
    double hist = th_metric(admin, "sluice_limit_delay_seconds_count{limit=\"sbw\"}");
    double hsum = th_metric(admin, "sluice_limit_delay_seconds_sum{limit=\"sbw\"}");
    printf("shadow bytes_out 1 MiB/s: %.1f MiB in 2 s; shadow_rejected %.0f, delay histogram count "
           "%.0f sum %.2f s; %ld store script calls\n",
           (double)f.bytes / MiB, shadow, hist, hsum, calls);
    assert_false(f.closed);
    assert_true((double)f.bytes > 10.0 * MiB);
    assert_true(shadow > 0);
    assert_true(hist > 0);

    /* A shadow max = 1: the second connection works all the same. */
    int c1 = open_ok(rport);
    int c2 = open_ok(rport);
    double cshadow = th_metric(admin, "sluice_limit_decisions_total{limit=\"sconn\",outcome=\"shadow_rejected\"}");
    printf("shadow connections max 1: two connections served, shadow_rejected %.0f\n", cshadow);
    assert_true(cshadow >= 1);
    assert_true(th_metric(admin, "sluice_limit_decisions_total{limit=\"sconn\",outcome=\"rejected\"}") <= 0);
    close(c1);
    close(c2);

    assert_int_equal(th_stop(&sl), 0);
    th_kill_server(stream);
    th_stop(&up);
    th_stop(&store);
}

int main(void)
{
    /* printf lines appear in order with cmocka's output */
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* SHAPE_ONLY=test_name runs just that one (when looking into it) */
    if (getenv("SHAPE_ONLY") != NULL)
        cmocka_set_test_filter(getenv("SHAPE_ONLY"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shadow),
        cmocka_unit_test(test_store_round_trips),
        cmocka_unit_test(test_tcp_reject),
        cmocka_unit_test(test_resp_bytes),
        cmocka_unit_test(test_connections_reject),
        cmocka_unit_test(test_connections_delay_queue),
        cmocka_unit_test(test_request_delay),
        cmocka_unit_test(test_bandwidth),
    };
    return th_finish(cmocka_run_group_tests(tests, NULL, NULL));
}

/* Usage that can be billed ([usage], docs/usage.md): traffic from clients
 * at distinct loopback addresses (identity = client_ip: ip:127.0.0.2 ...)
 * through real sluice processes, a real upstream and a real quota store;
 * the store's hashes, summed over their windows, must equal exactly what
 * was sent. Also: two instances sum in one place, usage.lua applies a
 * delivery number once, the store away and back (kept, then delivered;
 * past max_pending, dropped and counted), and export = FILE. Flushes are
 * forced by a short interval and waited for by polling with deadlines. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "integration/harness.h"

static const char set_cmd[] = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n";
static const char get_cmd[] = "*2\r\n$3\r\nGET\r\n$6\r\nnokey0\r\n";

/* What one client did, as the store should have it. */
struct sent {
    long requests, rejected, bytes_in, bytes_out;
};

/* A connection to 127.0.0.1:<port> from <ip> (another loopback address). */
static int conn_from(const char *ip, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = { .sin_family = AF_INET };
    inet_pton(AF_INET, ip, &a.sin_addr);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&to, sizeof(to)), 0);
    return fd;
}

/* From <ip>: <nset> SETs, then <nget> GETs of a missing key (when a limit
 * of <allowed> GETs applies to it, the rest are refused by sluice: their
 * answers are not the upstream's bytes). Waits for every reply; adds what
 * was done to <s>. */
static void traffic(int port, const char *ip, int nset, int nget, int allowed, struct sent *s)
{
    int fd = conn_from(ip, port);
    for (int i = 0; i < nset; i++)
        assert_int_equal(th_write_all(fd, set_cmd, strlen(set_cmd)), 0);
    char buf[64];
    for (int i = 0; i < nset; i++) {
        assert_int_equal(th_read_n(fd, buf, 5, 5000), 5);
        assert_memory_equal(buf, "+OK\r\n", 5);
    }
    /* GETs one at a time: which are refused is then the first <allowed>. */
    for (int i = 0; i < nget; i++) {
        assert_int_equal(th_write_all(fd, get_cmd, strlen(get_cmd)), 0);
        assert_int_equal(th_read_n(fd, buf, 1, 5000), 1);
        if (buf[0] == '$') {
            assert_int_equal(th_read_n(fd, buf + 1, 4, 5000), 4);
            assert_memory_equal(buf, "$-1\r\n", 5);
            s->bytes_out += 5;
        } else {
            assert_int_equal(buf[0], '-');
            while (th_read_n(fd, buf, 1, 5000) == 1 && buf[0] != '\n')
                ;
            s->rejected++;
        }
    }
    assert_int_equal(s->rejected, nget > allowed ? nget - allowed : 0);
    close(fd);
    s->requests += nset + nget;
    s->bytes_in += (long)(nset * strlen(set_cmd) + nget * strlen(get_cmd));
    s->bytes_out += 5L * nset;
}

/* Field <field> summed over every window's hash of <identity> in the store
 * at <port> (-1: the store did not answer). */
static double store_sum(int port, const char *identity, const char *field)
{
    redisContext *c = redisConnect("127.0.0.1", port);
    if (c == NULL || c->err) {
        if (c)
            redisFree(c);
        return -1;
    }
    double sum = 0;
    redisReply *keys = redisCommand(c, "KEYS sluice:usage:{%s}:*", identity);
    assert_non_null(keys);
    for (size_t i = 0; i < keys->elements; i++) {
        redisReply *v = redisCommand(c, "HGET %s %s", keys->element[i]->str, field);
        assert_non_null(v);
        if (v->type == REDIS_REPLY_STRING)
            sum += strtod(v->str, NULL);
        freeReplyObject(v);
    }
    freeReplyObject(keys);
    redisFree(c);
    return sum;
}

/* Waits until the store's <field> of <identity> is <want>; 0 or -1. */
static int store_wait(int port, const char *identity, const char *field, double want, int ms)
{
    uint64_t end = th_now_ms() + (uint64_t)ms;
    do {
        if (store_sum(port, identity, field) == want)
            return 0;
        usleep(20000); /* the poll's pace; the deadline is the condition */
    } while (th_now_ms() < end);
    fprintf(stderr, "store: %s %s = %g, want %g\n", identity, field, store_sum(port, identity, field),
            want);
    return -1;
}

/* Every counted field of <identity> equals <s> (and nothing was delayed). */
static void assert_store_is(int port, const char *identity, const struct sent *s)
{
    assert_int_equal(store_wait(port, identity, "requests", (double)s->requests, 10000), 0);
    assert_int_equal(store_wait(port, identity, "bytes_out", (double)s->bytes_out, 10000), 0);
    assert_int_equal(store_sum(port, identity, "bytes_in"), (double)s->bytes_in);
    assert_int_equal(store_sum(port, identity, "rejected"), (double)s->rejected);
    assert_int_equal(store_sum(port, identity, "delayed"), 0);
}

struct world {
    struct th_proc up, store, sl[2];
    int            port[2], admin[2];
};

/* Sluice <i> of <w>: a resp listener in front of the upstream, identity =
 * client_ip, a store-backed limit of 3 GETs an hour for ip:127.0.0.2, and
 * [usage] with <usage> (export, interval ...). */
static void start_sluice_with(struct world *w, int i, const char *usage, const char *global)
{
    char ini[2048];
    w->port[i] = th_free_port();
    w->admin[i] = th_free_port();
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\n%s"
             "[store]\nurl = redis://127.0.0.1:%d\ntimeout = 1s\n"
             "[usage]\n%s"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nidentity = client_ip\n"
             "[limit g]\nlistener = r\ncommands = GET\nrate = 3/h\nburst = 3\n"
             "match_identity = ip:127.0.0.2\n",
             w->admin[i], global, w->store.port, usage, w->port[i], w->up.port);
    assert_int_equal(th_sluice_start(&w->sl[i], ini, w->port[i]), 0);
}

static void start_sluice(struct world *w, int i, const char *usage)
{
    start_sluice_with(w, i, usage, "");
    assert_int_equal(th_metric_wait(w->admin[i], "sluice_store_up", 1, 5000), 0);
}

static struct world *world_new(int n, const char *usage)
{
    struct world *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    assert_int_equal(th_redis_start(&w->up, NULL), 0);
    assert_int_equal(th_redis_start(&w->store, NULL), 0);
    for (int i = 0; i < n; i++)
        start_sluice(w, i, usage);
    return w;
}

static void world_free(struct world *w)
{
    for (int i = 0; i < 2; i++)
        if (w->sl[i].pid > 0)
            assert_int_equal(th_stop(&w->sl[i]), 0);
    th_stop(&w->up);
    th_stop(&w->store);
    free(w);
}

/* Two identities through one instance: each identity's hashes hold exactly
 * its requests, rejections and bytes; connection time is there and no more
 * than the test took; the keys live usage_ttl. */
static void test_store_exact(void **state)
{
    (void)state;
    uint64_t t0 = th_now_ms();
    struct world *w = world_new(1, "export = store\ninterval = 100ms\nusage_ttl = 2d\n");
    struct sent a = { 0 }, b = { 0 };
    traffic(w->port[0], "127.0.0.1", 7, 2, 2, &a);
    traffic(w->port[0], "127.0.0.2", 3, 6, 3, &b);
    traffic(w->port[0], "127.0.0.1", 4, 0, 0, &a);
    assert_store_is(w->store.port, "ip:127.0.0.1", &a);
    assert_store_is(w->store.port, "ip:127.0.0.2", &b);
    assert_int_equal(b.rejected, 3);
    double secs = store_sum(w->store.port, "ip:127.0.0.1", "connection_seconds");
    assert_true(secs > 0);
    assert_true(secs <= (double)(th_now_ms() - t0) / 1000.0);
    /* the layout: usage:{identity}:YYYYMMDDHHMM and its applied ids, with a TTL */
    redisContext *c = redisConnect("127.0.0.1", w->store.port);
    assert_non_null(c);
    redisReply *k = redisCommand(c, "KEYS sluice:usage:{ip:127.0.0.2}:*");
    assert_true(k->elements >= 1);
    const char *key = k->element[0]->str;
    const char *stamp = strrchr(key, ':') + 1;
    assert_int_equal(strlen(stamp), 12);
    redisReply *t = redisCommand(c, "PTTL %s", key);
    assert_true(t->integer > 0 && t->integer <= 2 * 86400 * 1000LL);
    freeReplyObject(t);
    t = redisCommand(c, "PTTL sluice:usage_applied:{ip:127.0.0.2}:%s", stamp);
    assert_true(t->integer > 0 && t->integer <= 2 * 86400 * 1000LL);
    freeReplyObject(t);
    freeReplyObject(k);
    redisFree(c);
    /* more intervals pass: nothing is counted twice */
    assert_int_equal(th_metric_wait(w->admin[0], "sluice_usage_entries", 0, 5000), 0);
    usleep(300000); /* three more intervals, to see that nothing moves (not a sync) */
    assert_store_is(w->store.port, "ip:127.0.0.1", &a);
    assert_true(th_metric(w->admin[0], "sluice_usage_flushed_total") >= 2);
    world_free(w);
}

/* Two instances sharing one store: the hashes hold the sum, exactly. */
static void test_two_instances_sum(void **state)
{
    (void)state;
    struct world *w = world_new(2, "export = store\ninterval = 100ms\n");
    struct sent a = { 0 }, b = { 0 };
    traffic(w->port[0], "127.0.0.1", 5, 0, 0, &a);
    traffic(w->port[1], "127.0.0.1", 8, 0, 0, &a);
    traffic(w->port[0], "127.0.0.2", 2, 2, 2, &b);
    traffic(w->port[1], "127.0.0.2", 1, 3, 1, &b); /* the limit is the fleet's: 1 GET left */
    traffic(w->port[1], "127.0.0.1", 3, 0, 0, &a);
    assert_store_is(w->store.port, "ip:127.0.0.1", &a);
    assert_store_is(w->store.port, "ip:127.0.0.2", &b);
    /* each instance applied its own deliveries: two ids in the applied hash */
    redisContext *c = redisConnect("127.0.0.1", w->store.port);
    redisReply *k = redisCommand(c, "KEYS sluice:usage_applied:{ip:127.0.0.1}:*");
    long fields = 0;
    for (size_t i = 0; i < k->elements; i++) {
        redisReply *n = redisCommand(c, "HLEN %s", k->element[i]->str);
        fields += n->integer;
        freeReplyObject(n);
    }
    assert_true(fields >= 2);
    freeReplyObject(k);
    redisFree(c);
    world_free(w);
}

/* usage.lua itself: a delivery applied twice under one number (its reply
 * was lost, it was sent again) counts once; a higher number counts; a
 * lower one (an old retry arriving late) does not. */
static void test_script_once(void **state)
{
    (void)state;
    struct th_proc store;
    assert_int_equal(th_redis_start(&store, NULL), 0);
    char *body = th_slurp("lua/usage.lua");
    assert_non_null(body);
    redisContext *c = redisConnect("127.0.0.1", store.port);
    assert_non_null(c);
    const char *k1 = "sluice:usage:{user:alice}:202611280312";
    const char *k2 = "sluice:usage_applied:{user:alice}:202611280312";
    long want[] = { 1, 0, 1, 0, 0 };
    const char *seqs[] = { "5", "5", "6", "4", "6" };
    for (int i = 0; i < 5; i++) {
        redisReply *r = redisCommand(c, "EVAL %s 2 %s %s host:1:a %s 60000 requests 10 bytes_in 100 "
                                        "connection_seconds 1.500001",
                                     body, k1, k2, seqs[i]);
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_INTEGER);
        assert_int_equal(r->integer, want[i]);
        freeReplyObject(r);
    }
    /* another instance's number 5 is its own */
    redisReply *r = redisCommand(c, "EVAL %s 2 %s %s host:2:b 5 60000 requests 1", body, k1, k2);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    r = redisCommand(c, "HGET %s requests", k1);
    assert_string_equal(r->str, "21");
    freeReplyObject(r);
    r = redisCommand(c, "HGET %s connection_seconds", k1);
    assert_string_equal(r->str, "3.000002");
    freeReplyObject(r);
    r = redisCommand(c, "HGET %s host:1:a", k2);
    assert_string_equal(r->str, "6");
    freeReplyObject(r);
    r = redisCommand(c, "PTTL %s", k2);
    assert_true(r->integer > 0 && r->integer <= 60000);
    freeReplyObject(r);
    /* refused, nothing changed: bad arguments */
    r = redisCommand(c, "EVAL %s 2 %s %s host:1:a 0 60000 requests 1", body, k1, k2);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    redisFree(c);
    free(body);
    th_stop(&store);
}

/* A redis-server on <port> exactly (the store coming back where it was). */
static pid_t redis_on(int port)
{
    char p[16];
    snprintf(p, sizeof(p), "%d", port);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        dup2(fd, 2);
        execlp("redis-server", "redis-server", "--port", p, "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--protected-mode", "no", (char *)NULL);
        _exit(127);
    }
    th_track_pid(pid);
    uint64_t end = th_now_ms() + 5000;
    while (th_now_ms() < end) {
        char *r = th_redis_cmd(port, "PING");
        int ok = r != NULL && strncmp(r, "+PONG", 5) == 0;
        free(r);
        if (ok)
            return pid;
        usleep(20000);
    }
    fail_msg("redis-server on %d did not start", port);
    return -1;
}

/* The store away: what is counted meanwhile is kept (merged per
 * identity-window) and delivered once it is back; past max_pending the
 * counts of a new identity are dropped and counted per field. */
static void test_store_down_then_up(void **state)
{
    (void)state;
    /* a window of a day: the test never sees two windows of one identity
     * (except across midnight UTC, when the bound counts one more) */
    struct world *w = world_new(1, "export = store\ninterval = 100ms\nwindow = 1d\nmax_pending = 2\n");
    int port = w->store.port;
    assert_int_equal(th_stop(&w->store), 0);
    assert_int_equal(th_metric_wait(w->admin[0], "sluice_store_up", 0, 5000), 0);
    struct sent a = { 0 }, b = { 0 }, c = { 0 };
    traffic(w->port[0], "127.0.0.1", 3, 0, 0, &a);
    traffic(w->port[0], "127.0.0.1", 2, 0, 0, &a); /* merged with the first */
    traffic(w->port[0], "127.0.0.2", 4, 0, 0, &b);
    assert_int_equal(th_metric_wait(w->admin[0], "sluice_usage_pending", 2, 5000), 0);
    assert_true(th_metric(w->admin[0], "sluice_usage_flush_failures_total") >= 2);
    /* a third identity does not fit: dropped, every field counted */
    traffic(w->port[0], "127.0.0.3", 6, 0, 0, &c);
    assert_int_equal(th_metric_wait(w->admin[0], "sluice_usage_dropped_total{field=\"requests\"}",
                                    6, 5000), 0);
    assert_int_equal(th_metric(w->admin[0], "sluice_usage_dropped_total{field=\"bytes_in\"}"),
                     (double)c.bytes_in);
    assert_int_equal(th_metric(w->admin[0], "sluice_usage_dropped_total{field=\"bytes_out\"}"),
                     (double)c.bytes_out);
    assert_true(th_log_count(w->sl[0].log, "usage: counts dropped") >= 1); /* once a second at most */
    /* back: what was kept goes, exactly */
    pid_t again = redis_on(port);
    assert_int_equal(th_metric_wait(w->admin[0], "sluice_store_up", 1, 10000), 0);
    assert_store_is(port, "ip:127.0.0.1", &a);
    assert_store_is(port, "ip:127.0.0.2", &b);
    assert_int_equal(th_metric_wait(w->admin[0], "sluice_usage_pending", 0, 5000), 0);
    assert_int_equal(store_sum(port, "ip:127.0.0.3", "requests"), 0);
    /* and room again */
    struct sent d = { 0 };
    traffic(w->port[0], "127.0.0.3", 2, 0, 0, &d);
    assert_store_is(port, "ip:127.0.0.3", &d);
    assert_int_equal(th_stop(&w->sl[0]), 0);
    kill(again, SIGTERM);
    waitpid(again, NULL, 0);
    th_stop(&w->up);
    free(w);
}

/* Replies lost: the store is paused past sluice's timeout, so deliveries
 * it will still run time out and are sent again under their numbers. The
 * sum stays exact. */
static void test_lost_replies(void **state)
{
    (void)state;
    struct world *w = world_new(1, "export = store\ninterval = 100ms\n");
    struct sent a = { 0 };
    traffic(w->port[0], "127.0.0.1", 3, 0, 0, &a);
    assert_store_is(w->store.port, "ip:127.0.0.1", &a);
    double failed0 = th_metric(w->admin[0], "sluice_usage_flush_failures_total");
    free(th_redis_cmd(w->store.port, "CLIENT PAUSE 2500 WRITE"));
    traffic(w->port[0], "127.0.0.1", 4, 0, 0, &a);
    /* a delivery of these waited past the timeout (1 s; the limit's
     * store calls get that long on a loaded machine) */
    uint64_t end = th_now_ms() + 10000;
    while (th_metric(w->admin[0], "sluice_usage_flush_failures_total") <= failed0 &&
           th_now_ms() < end)
        usleep(20000);
    assert_true(th_metric(w->admin[0], "sluice_usage_flush_failures_total") > failed0);
    assert_store_is(w->store.port, "ip:127.0.0.1", &a);
    assert_int_equal(th_metric_wait(w->admin[0], "sluice_usage_pending", 0, 10000), 0);
    usleep(300000); /* three intervals more: the sum does not move (not a sync) */
    assert_store_is(w->store.port, "ip:127.0.0.1", &a);
    /* (whether the store ran the timed-out call after the pause, so that
     * the retry was a duplicate, sluice_usage_duplicates_total, is the
     * store's affair: the sum is exact either way) */
    world_free(w);
}

/* export = FILE: one JSON line per identity-window per delivery; summed,
 * exactly what was sent. */
static double file_sum(const char *path, const char *identity, const char *field)
{
    char *text = th_slurp(path);
    if (text == NULL)
        return -1;
    char id[64], key[64];
    snprintf(id, sizeof(id), "{\"identity\":\"%s\",", identity);
    snprintf(key, sizeof(key), "\"%s\":", field);
    double sum = 0;
    for (char *line = text; line != NULL && *line;) {
        char *nl = strchr(line, '\n');
        if (nl != NULL)
            *nl = '\0';
        if (strncmp(line, id, strlen(id)) == 0) {
            char *v = strstr(line, key);
            assert_non_null(v);
            sum += strtod(v + strlen(key), NULL);
        }
        line = nl != NULL ? nl + 1 : NULL;
    }
    free(text);
    return sum;
}

static void test_file_export(void **state)
{
    (void)state;
    char path[128], usage[256];
    snprintf(path, sizeof(path), "/tmp/sluice-test-usage-%d.jsonl", (int)getpid());
    unlink(path);
    th_track_file(path);
    snprintf(usage, sizeof(usage), "export = %s\ninterval = 100ms\n", path);
    struct world *w = world_new(1, usage);
    struct sent a = { 0 }, b = { 0 };
    traffic(w->port[0], "127.0.0.1", 6, 0, 0, &a);
    traffic(w->port[0], "127.0.0.2", 2, 5, 3, &b);
    uint64_t end = th_now_ms() + 10000;
    while ((file_sum(path, "ip:127.0.0.1", "requests") != a.requests ||
            file_sum(path, "ip:127.0.0.2", "requests") != b.requests) &&
           th_now_ms() < end)
        usleep(20000);
    assert_int_equal(file_sum(path, "ip:127.0.0.1", "requests"), a.requests);
    assert_int_equal(file_sum(path, "ip:127.0.0.1", "bytes_in"), a.bytes_in);
    assert_int_equal(file_sum(path, "ip:127.0.0.1", "bytes_out"), a.bytes_out);
    assert_int_equal(file_sum(path, "ip:127.0.0.2", "requests"), b.requests);
    assert_int_equal(file_sum(path, "ip:127.0.0.2", "rejected"), 2);
    assert_int_equal(file_sum(path, "ip:127.0.0.2", "bytes_out"), b.bytes_out);
    /* nothing in the store */
    assert_int_equal(store_sum(w->store.port, "ip:127.0.0.1", "requests"), 0);
    char *text = th_slurp(path);
    assert_non_null(strstr(text, "\"window_start\":\""));
    assert_non_null(strstr(text, "\"connection_seconds\":"));
    free(text);
    world_free(w);
}

/* Rewrites sluice <i>'s file with [usage] <usage> and reloads it. */
static void reload_usage(struct world *w, int i, const char *usage, int nth)
{
    char *text = th_slurp(w->sl[i].conf);
    assert_non_null(text);
    char *u = strstr(text, "[usage]\n"), *next = strstr(text, "[listener r]");
    assert_true(u != NULL && next != NULL);
    char tmp[300];
    snprintf(tmp, sizeof(tmp), "%s.new", w->sl[i].conf);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fwrite(text, 1, (size_t)(u - text) + 8, f);
    fputs(usage, f);
    fputs(next, f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(rename(tmp, w->sl[i].conf), 0);
    free(text);
    assert_int_equal(kill(w->sl[i].pid, SIGHUP), 0);
    assert_int_equal(th_log_wait(w->sl[i].log, "msg=reloaded ", nth, 10000), 0);
}

/* Export turned off and on again by reloads: what was counted while on is
 * in the store exactly, and the new table's deliveries (numbered from 1
 * again) are not taken for the old one's. */
static void test_reload_off_on(void **state)
{
    (void)state;
    struct world *w = world_new(1, "export = store\ninterval = 100ms\n");
    struct sent a = { 0 }, off = { 0 };
    traffic(w->port[0], "127.0.0.1", 5, 0, 0, &a);
    assert_store_is(w->store.port, "ip:127.0.0.1", &a);
    reload_usage(w, 0, "export = off\n", 1);
    traffic(w->port[0], "127.0.0.1", 3, 0, 0, &off); /* not counted */
    reload_usage(w, 0, "export = store\ninterval = 100ms\n", 2);
    traffic(w->port[0], "127.0.0.1", 2, 0, 0, &a);
    assert_store_is(w->store.port, "ip:127.0.0.1", &a);
    world_free(w);
}

/* A connection open before export is turned on (by a reload) counts its
 * time from then, never from before. */
static void test_reload_on_open_connection(void **state)
{
    (void)state;
    struct world *w = world_new(1, "export = off\n");
    int fd = conn_from("127.0.0.5", w->port[0]);
    assert_int_equal(th_write_all(fd, set_cmd, strlen(set_cmd)), 0);
    char buf[8];
    assert_int_equal(th_read_n(fd, buf, 5, 5000), 5);
    usleep(1500000); /* time before export is on: must not be counted (not a sync) */
    uint64_t t_on = th_now_ms();
    reload_usage(w, 0, "export = store\ninterval = 100ms\n", 1);
    /* intervals see it open */
    uint64_t end = th_now_ms() + 10000;
    while (store_sum(w->store.port, "ip:127.0.0.5", "connection_seconds") <= 0.05 && th_now_ms() < end)
        usleep(20000);
    close(fd);
    uint64_t t_close = th_now_ms();
    /* whether or not its close is counted yet, no more than since "on" */
    assert_int_equal(th_metric_wait(w->admin[0], "sluice_usage_entries", 0, 10000), 0);
    double secs = store_sum(w->store.port, "ip:127.0.0.5", "connection_seconds");
    assert_true(secs > 0.05);
    assert_true(secs <= (double)(t_close - t_on) / 1000.0 + 0.2);
    /* the request it made before is not there either */
    assert_int_equal(store_sum(w->store.port, "ip:127.0.0.5", "requests"), 0);
    world_free(w);
}

/* A reload keeps what was counted; the exit delivers it (the interval is
 * an hour: nothing goes before). */
static void test_reload_then_exit(void **state)
{
    (void)state;
    struct world *w = world_new(1, "export = store\ninterval = 1h\n");
    struct sent a = { 0 }, b = { 0 };
    traffic(w->port[0], "127.0.0.1", 4, 0, 0, &a);
    assert_int_equal(kill(w->sl[0].pid, SIGHUP), 0);
    assert_int_equal(th_log_wait(w->sl[0].log, "msg=reloaded ", 1, 10000), 0);
    traffic(w->port[0], "127.0.0.1", 3, 0, 0, &a);
    traffic(w->port[0], "127.0.0.2", 2, 4, 3, &b);
    assert_int_equal(store_sum(w->store.port, "ip:127.0.0.1", "requests"), 0);
    assert_int_equal(th_stop(&w->sl[0]), 0);
    assert_store_is(w->store.port, "ip:127.0.0.1", &a);
    assert_store_is(w->store.port, "ip:127.0.0.2", &b);
    world_free(w);
}

/* The exit delivers once: a store that answers every delivery with an
 * error (here it refuses writes: no replica for min-replicas-to-write)
 * gets one round, then the process ends and logs what it dropped,
 * instead of retrying forever and never exiting. */
static void test_exit_store_refuses(void **state)
{
    (void)state;
    struct world *w = world_new(1, "export = store\ninterval = 1h\n");
    struct sent a = { 0 };
    traffic(w->port[0], "127.0.0.1", 4, 0, 0, &a);
    free(th_redis_cmd(w->store.port, "CONFIG SET min-replicas-to-write 1"));
    int st = th_signal_wait(&w->sl[0], SIGTERM, 15000);
    if (st == -1)
        fprintf(stderr, "sluice did not exit: %s\n", w->sl[0].log);
    assert_true(st != -1);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_true(th_log_count(w->sl[0].log, "usage: not delivered, dropped") >= 1);
    w->sl[0].pid = 0;
    th_stop(&w->up);
    th_stop(&w->store);
    free(w);
}

/* workers = 2: each worker counts and delivers on its own; the store
 * holds their sum. */
static void test_workers_sum(void **state)
{
    (void)state;
    struct world *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    assert_int_equal(th_redis_start(&w->up, NULL), 0);
    assert_int_equal(th_redis_start(&w->store, NULL), 0);
    start_sluice_with(w, 0, "export = store\ninterval = 100ms\n", "workers = 2\n");
    struct sent a = { 0 };
    for (int i = 0; i < 12; i++) /* connections land on either worker */
        traffic(w->port[0], "127.0.0.1", 3, 0, 0, &a);
    assert_store_is(w->store.port, "ip:127.0.0.1", &a);
    world_free(w);
}

/* export = FILE at exit: the last counts are written before the process
 * ends (the interval is an hour). */
static void test_file_exit(void **state)
{
    (void)state;
    char path[128], usage[256];
    snprintf(path, sizeof(path), "/tmp/sluice-test-usage-exit-%d.jsonl", (int)getpid());
    unlink(path);
    th_track_file(path);
    snprintf(usage, sizeof(usage), "export = %s\ninterval = 1h\n", path);
    struct world *w = world_new(1, usage);
    struct sent a = { 0 };
    traffic(w->port[0], "127.0.0.1", 5, 0, 0, &a);
    assert_true(file_sum(path, "ip:127.0.0.1", "requests") <= 0);
    assert_int_equal(th_stop(&w->sl[0]), 0);
    assert_int_equal(file_sum(path, "ip:127.0.0.1", "requests"), a.requests);
    assert_int_equal(file_sum(path, "ip:127.0.0.1", "bytes_in"), a.bytes_in);
    world_free(w);
}

/* action = delay: requests made to wait are counted as delayed (and as
 * requests), for the identity they were keyed by. */
static void test_delayed(void **state)
{
    (void)state;
    struct th_proc up, store, sl;
    assert_int_equal(th_redis_start(&up, NULL), 0);
    assert_int_equal(th_redis_start(&store, NULL), 0);
    int port = th_free_port(), admin = th_free_port();
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\n"
             "[store]\nurl = redis://127.0.0.1:%d\ntimeout = 1s\n"
             "[usage]\nexport = store\ninterval = 100ms\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nidentity = client_ip\n"
             /* in process: one a second, the next ones wait (1 s, 2 s) */
             "[limit d]\nlistener = r\nrate = 1/s\nburst = 1\naction = delay\nmax_delay = 10s\n"
             "scope = connection\n",
             admin, store.port, port, up.port);
    assert_int_equal(th_sluice_start(&sl, ini, port), 0);
    int fd = conn_from("127.0.0.6", port);
    for (int i = 0; i < 3; i++) /* pipelined: decided together */
        assert_int_equal(th_write_all(fd, set_cmd, strlen(set_cmd)), 0);
    char buf[16];
    assert_int_equal(th_read_n(fd, buf, 15, 10000), 15);
    assert_memory_equal(buf, "+OK\r\n+OK\r\n+OK\r\n", 15);
    close(fd);
    assert_int_equal(store_wait(store.port, "ip:127.0.0.6", "requests", 3, 10000), 0);
    assert_int_equal(store_wait(store.port, "ip:127.0.0.6", "delayed", 2, 10000), 0);
    assert_int_equal(store_sum(store.port, "ip:127.0.0.6", "rejected"), 0);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&up);
    th_stop(&store);
}

/* An http listener: requests and their refusals (429) counted for the
 * identity, bytes read from the client exactly, the upstream's bytes. */
static void test_http(void **state)
{
    (void)state;
    struct th_proc up, store, sl;
    assert_int_equal(th_pyup_start(&up), 0);
    assert_int_equal(th_redis_start(&store, NULL), 0);
    int port = th_free_port(), admin = th_free_port();
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\n"
             "[store]\nurl = redis://127.0.0.1:%d\ntimeout = 250ms\n"
             "[usage]\nexport = store\ninterval = 100ms\n"
             "[listener h]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "identity = client_ip\n"
             /* decided in process: a store answer late on a loaded machine
              * (on_failure) cannot change which requests pass */
             "[limit hg]\nlistener = h\nrate = 4/h\nburst = 4\nscope = connection\n",
             admin, store.port, port, up.port);
    assert_int_equal(th_sluice_start(&sl, ini, port), 0);
    const char req[] = "GET /fixed?size=100 HTTP/1.1\r\nHost: x\r\n\r\n";
    int fd = conn_from("127.0.0.4", port);
    char buf[4096] = { 0 };
    int ok = 0, refused = 0;
    for (int i = 0; i < 6; i++) {
        assert_int_equal(th_write_all(fd, req, strlen(req)), 0);
        /* a response: its head, then Content-Length bytes */
        size_t n = 0;
        char *end = NULL;
        while ((end = strstr(buf, "\r\n\r\n")) == NULL || n == 0) {
            size_t got = th_read_n(fd, buf + n, 1, 20000); /* a deadline: a loaded machine is slow */
            assert_int_equal(got, 1);
            n += got;
            buf[n] = '\0';
        }
        long cl = atol(strcasestr(buf, "content-length:") + 15);
        size_t body = (size_t)(end + 4 - buf);
        assert_int_equal(th_read_n(fd, buf + n, (size_t)cl - (n - body), 20000), (size_t)cl - (n - body));
        if (strncmp(buf, "HTTP/1.1 200", 12) == 0)
            ok++;
        else if (strncmp(buf, "HTTP/1.1 429", 12) == 0)
            refused++;
        memset(buf, 0, sizeof(buf));
    }
    close(fd);
    assert_int_equal(ok, 4);
    assert_int_equal(refused, 2);
    assert_int_equal(store_wait(store.port, "ip:127.0.0.4", "requests", 6, 10000), 0);
    assert_int_equal(store_wait(store.port, "ip:127.0.0.4", "bytes_in", 6.0 * (double)strlen(req), 10000), 0);
    assert_int_equal(store_sum(store.port, "ip:127.0.0.4", "rejected"), 2);
    assert_true(store_sum(store.port, "ip:127.0.0.4", "bytes_out") >= 400);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&up);
    th_stop(&store);
}

/* HTTP with identity = header:X-Key: each key its own (hashed) identity;
 * a request naming two keys is refused and counted for no one. */
static void test_http_header_identity(void **state)
{
    (void)state;
    struct th_proc up, store, sl;
    assert_int_equal(th_pyup_start(&up), 0);
    assert_int_equal(th_redis_start(&store, NULL), 0);
    int port = th_free_port(), admin = th_free_port();
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\n"
             "[store]\nurl = redis://127.0.0.1:%d\ntimeout = 250ms\n"
             "[usage]\nexport = store\ninterval = 100ms\n"
             "[listener h]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "identity = header:X-Key client_ip\n",
             admin, store.port, port, up.port);
    assert_int_equal(th_sluice_start(&sl, ini, port), 0);
    const char *keys[] = { "k1", "k1", "k2", "k1" };
    int fd = conn_from("127.0.0.4", port);
    char req[256], buf[4096];
    for (int i = 0; i < 4; i++) {
        int n = snprintf(req, sizeof(req), "GET /fixed?size=10 HTTP/1.1\r\nHost: x\r\nX-Key: %s\r\n\r\n",
                         keys[i]);
        assert_int_equal(th_write_all(fd, req, (size_t)n), 0);
        assert_true(th_read_n(fd, buf, 17, 5000) == 17); /* "HTTP/1.1 200 OK\r\n" */
        assert_memory_equal(buf, "HTTP/1.1 200", 12);
        /* the rest of the head and the 10 bytes */
        size_t got = 17;
        while (got < sizeof(buf) - 1 && th_read_n(fd, buf + got, 1, 5000) == 1) {
            got++;
            buf[got] = '\0';
            char *e = strstr(buf, "\r\n\r\n");
            if (e != NULL && (size_t)(buf + got - (e + 4)) == 10)
                break;
        }
        memset(buf, 0, sizeof(buf));
    }
    const char two[] = "GET /fixed?size=10 HTTP/1.1\r\nHost: x\r\nX-Key: k1\r\nX-Key: k2\r\n\r\n";
    assert_int_equal(th_write_all(fd, two, strlen(two)), 0);
    assert_true(th_read_n(fd, buf, 12, 5000) == 12);
    assert_memory_equal(buf, "HTTP/1.1 400", 12);
    close(fd);
    /* two hashed identities, 3 and 1 requests (summed over their windows);
     * nothing for the address */
    uint64_t end = th_now_ms() + 10000;
    char names[8][64];
    double sums[8];
    int ids = 0;
    double total = 0;
    do {
        redisContext *c = redisConnect("127.0.0.1", store.port);
        assert_non_null(c);
        redisReply *k = redisCommand(c, "KEYS sluice:usage:{header#*}:*");
        total = 0;
        ids = 0;
        for (size_t i = 0; i < k->elements && i < 8; i++) {
            const char *key = k->element[i]->str;
            size_t idlen = (size_t)(strrchr(key, ':') - key);
            int j = 0;
            while (j < ids && !(strlen(names[j]) == idlen && strncmp(names[j], key, idlen) == 0))
                j++;
            if (j == ids) {
                snprintf(names[ids], sizeof(names[ids]), "%.*s", (int)idlen, key);
                sums[ids++] = 0;
            }
            redisReply *v = redisCommand(c, "HGET %s requests", key);
            double d = v->type == REDIS_REPLY_STRING ? strtod(v->str, NULL) : 0;
            sums[j] += d;
            total += d;
            freeReplyObject(v);
        }
        freeReplyObject(k);
        redisFree(c);
        if (total == 4)
            break;
        usleep(20000);
    } while (th_now_ms() < end);
    assert_int_equal(total, 4);
    assert_int_equal(ids, 2);
    assert_true((sums[0] == 3 && sums[1] == 1) || (sums[0] == 1 && sums[1] == 3));
    assert_int_equal(store_sum(store.port, "ip:127.0.0.4", "requests"), 0);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&up);
    th_stop(&store);
}

/* Many identities in one interval (identity = key_prefix: one per key's
 * prefix): delivered over several loop turns, every one exactly. */
static void test_many_identities(void **state)
{
    (void)state;
    struct th_proc up, store, sl;
    assert_int_equal(th_redis_start(&up, NULL), 0);
    assert_int_equal(th_redis_start(&store, NULL), 0);
    int port = th_free_port(), admin = th_free_port();
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\n"
             "[store]\nurl = redis://127.0.0.1:%d\ntimeout = 1s\n"
             "[usage]\nexport = store\ninterval = 200ms\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "identity = key_prefix\n",
             admin, store.port, port, up.port);
    assert_int_equal(th_sluice_start(&sl, ini, port), 0);
    enum { N = 3000 };
    int fd = conn_from("127.0.0.1", port);
    char cmd[128];
    for (int i = 0; i < N; i++) {
        int n = snprintf(cmd, sizeof(cmd), "SET t%d:k v\r\n", i);
        assert_int_equal(th_write_all(fd, cmd, (size_t)n), 0);
    }
    char *replies = malloc(5 * N);
    assert_non_null(replies);
    assert_int_equal(th_read_n(fd, replies, 5 * N, 20000), 5 * N);
    free(replies);
    close(fd);
    /* every identity's one request, in as many hashes */
    uint64_t end = th_now_ms() + 20000;
    long keys = 0;
    while (th_now_ms() < end) {
        redisContext *c = redisConnect("127.0.0.1", store.port);
        assert_non_null(c);
        redisReply *k = redisCommand(c, "EVAL %s 0 %s", "return #redis.call('KEYS', ARGV[1])",
                                     "sluice:usage:{prefix:t*}:*");
        assert_int_equal(k->type, REDIS_REPLY_INTEGER);
        keys = k->integer;
        freeReplyObject(k);
        redisFree(c);
        if (keys >= N)
            break;
        usleep(50000);
    }
    assert_true(keys >= N);
    int probe[] = { 0, 1, 777, 2999 };
    for (int i = 0; i < 4; i++) {
        char id[32];
        snprintf(id, sizeof(id), "prefix:t%d", probe[i]);
        assert_int_equal(store_wait(store.port, id, "requests", 1, 10000), 0);
    }
    assert_int_equal(th_metric_wait(admin, "sluice_usage_entries", 0, 10000), 0);
    assert_true(th_metric(admin, "sluice_usage_flushed_total") >= N);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&up);
    th_stop(&store);
}

/* A Redis Cluster as the store: each identity's keys (its windows and
 * what was applied) sit on the master of its hash tag's slot, whose sum is
 * exact; identities spread over the masters. */
static void test_cluster(void **state)
{
    (void)state;
    struct th_cluster cl;
    struct th_proc up, sl;
    assert_int_equal(th_cluster_start(&cl), 0);
    assert_int_equal(th_redis_start(&up, NULL), 0);
    char url[512], ini[1536];
    th_cluster_url(&cl, url, sizeof(url));
    int port = th_free_port(), admin = th_free_port();
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\n"
             "[store]\nurl = %s\ntimeout = 250ms\n"
             "[usage]\nexport = store\ninterval = 100ms\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nidentity = client_ip\n",
             admin, url, port, up.port);
    assert_int_equal(th_sluice_start(&sl, ini, port), 0);
    assert_int_equal(th_metric_wait(admin, "sluice_store_up", 1, 10000), 0);
    const char *ips[] = { "127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.5", "127.0.0.6" };
    struct sent s[5];
    memset(s, 0, sizeof(s));
    int masters_seen[TH_CLUSTER_NODES] = { 0 }, distinct = 0;
    for (int i = 0; i < 5; i++)
        traffic(port, ips[i], 2 + i, 0, 0, &s[i]);
    for (int i = 0; i < 5; i++) {
        char id[32], cmd[64];
        snprintf(id, sizeof(id), "ip:%s", ips[i]);
        snprintf(cmd, sizeof(cmd), "CLUSTER KEYSLOT {%s}", id);
        char *r = th_redis_cmd(cl.node[0].port, cmd);
        assert_non_null(r);
        int m = th_cluster_master_of(&cl, (unsigned)atoi(r + 1));
        free(r);
        assert_true(m >= 0);
        distinct += masters_seen[m]++ == 0;
        assert_store_is(cl.node[m].port, id, &s[i]);
    }
    assert_true(distinct >= 2);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&up);
    th_cluster_stop(&cl);
}

/* -t refuses export = store without a store, and a window that does not
 * divide a day. */
static void test_conf_rules(void **state)
{
    (void)state;
    const char *bad[] = {
        "[usage]\nexport = store\n[listener r]\nlisten = 127.0.0.1:1\nupstream = 127.0.0.1:2\n",
        "[store]\nurl = redis://127.0.0.1:1\n[usage]\nexport = store\nwindow = 7m\n"
        "[listener r]\nlisten = 127.0.0.1:1\nupstream = 127.0.0.1:2\n",
    };
    const char *why[] = { "[store] url is local", "whole minutes that divide a day" };
    for (int i = 0; i < 2; i++) {
        char path[128], cmd[512];
        snprintf(path, sizeof(path), "/tmp/sluice-test-usage-conf-%d-%d.ini", (int)getpid(), i);
        th_track_file(path);
        FILE *f = fopen(path, "w");
        fputs(bad[i], f);
        fclose(f);
        snprintf(cmd, sizeof(cmd), "%s -t --no-resolve -c %s 2>&1", th_sluice_bin(), path);
        FILE *p = popen(cmd, "r");
        char out[4096] = { 0 };
        size_t n = fread(out, 1, sizeof(out) - 1, p);
        out[n] = '\0';
        int rc = pclose(p);
        assert_true(rc != 0);
        assert_non_null(strstr(out, why[i]));
    }
}

int main(void)
{
    const char *only = getenv("USAGE_ONLY");
    const struct CMUnitTest all[] = {
        cmocka_unit_test(test_store_exact),
        cmocka_unit_test(test_two_instances_sum),
        cmocka_unit_test(test_workers_sum),
        cmocka_unit_test(test_script_once),
        cmocka_unit_test(test_store_down_then_up),
        cmocka_unit_test(test_lost_replies),
        cmocka_unit_test(test_file_export),
        cmocka_unit_test(test_file_exit),
        cmocka_unit_test(test_delayed),
        cmocka_unit_test(test_http),
        cmocka_unit_test(test_http_header_identity),
        cmocka_unit_test(test_many_identities),
        cmocka_unit_test(test_cluster),
        cmocka_unit_test(test_reload_then_exit),
        cmocka_unit_test(test_exit_store_refuses),
        cmocka_unit_test(test_reload_off_on),
        cmocka_unit_test(test_reload_on_open_connection),
        cmocka_unit_test(test_conf_rules),
    };
    if (only != NULL)
        cmocka_set_test_filter(only);
    return th_finish(cmocka_run_group_tests(all, NULL, NULL));
}

/* The fleet's baseline end to end (docs/adaptive.md, "The fleet's
 * baseline"): two real build/sluice instances with adaptive concurrency in
 * front of one redis-server, one real quota store. Each publishes its own
 * baseline in the store's hash for the upstream (an entry with an expiry,
 * the hash with a TTL), and each one's /stats shows the least live entry
 * as the fleet's baseline: a lower entry written by hand shows on both
 * until it expires. A third instance with adaptive_share = off publishes
 * nothing. With the store stopped, the fleet's value expires and each
 * instance is back on its own baseline; nothing is refused meanwhile.
 *
 * The machine is shared and loaded: what must change is polled with
 * deadlines; nothing depends on how fast. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hiredis/hiredis.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integration/harness.h"

/* ---- instances and load -------------------------------------------------------- */

struct inst {
    struct th_proc p;
    int port, admin;
};

static int inst_start(struct inst *in, int up_port, int store_port, const char *extra)
{
    char ini[2048];
    in->port = th_free_port();
    in->admin = th_free_port();
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\n"
             "[store]\nurl = redis://127.0.0.1:%d\ntimeout = 250ms\n"
             "[listener a]\nprotocol = resp\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "adaptive_concurrency = on\nadaptive_probe_interval = 1s\n%s",
             in->admin, store_port, in->port, up_port, extra);
    return th_sluice_start(&in->p, ini, in->port);
}

struct load {
    int port;
    volatile int *stop;
    long ok, other;
    char bad[128];
};

static void *client(void *arg)
{
    struct load *l = arg;
    redisContext *c = redisConnect("127.0.0.1", l->port);
    if (c == NULL || c->err) {
        l->other++;
        if (c)
            redisFree(c);
        return NULL;
    }
    while (!*l->stop) {
        redisReply *x = redisCommand(c, "INCR fleet");
        if (x == NULL) {
            l->other++;
            break;
        }
        if (x->type == REDIS_REPLY_INTEGER)
            l->ok++;
        else if (l->other++ == 0)
            snprintf(l->bad, sizeof(l->bad), "type %d %s", x->type,
                     x->type == REDIS_REPLY_ERROR ? x->str : "");
        freeReplyObject(x);
        usleep(1000); /* light load: about a thousand requests a second each */
    }
    redisFree(c);
    return NULL;
}

/* ---- /stats and the store -------------------------------------------------------- */

/* The number after "<key>": in /stats' "adaptive" object, or -1. */
static double stat(int admin, const char *key)
{
    char *body = th_http_get(admin, "/stats");
    if (body == NULL)
        return -1;
    double v = th_json_num(body, "\"adaptive\":{", key);
    free(body);
    return v;
}

/* The one adaptive key in the store (the upstream's hash), in <key>. */
static int fleet_key(redisContext *r, char *key, size_t cap)
{
    redisReply *x = redisCommand(r, "KEYS sluice:adaptive:*");
    int ok = x != NULL && x->type == REDIS_REPLY_ARRAY && x->elements == 1;
    if (ok)
        snprintf(key, cap, "%s", x->element[0]->str);
    if (x)
        freeReplyObject(x);
    return ok ? 0 : -1;
}

static long long store_ms(redisContext *r)
{
    redisReply *x = redisCommand(r, "TIME");
    assert_non_null(x);
    long long ms = atoll(x->element[0]->str) * 1000 + atoll(x->element[1]->str) / 1000;
    freeReplyObject(x);
    return ms;
}

/* The store's entries: how many, and the least baseline (ns). Checks
 * each: "<expiry ms> <baseline ns>", expiring within the ttl (3 probe
 * periods: 3 s). */
static int entries(redisContext *r, const char *key, double *least)
{
    long long now = store_ms(r);
    redisReply *x = redisCommand(r, "HGETALL %s", key);
    assert_non_null(x);
    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    int n = (int)x->elements / 2;
    *least = 0;
    for (int i = 0; i < n; i++) {
        long long exp = 0, ns = 0;
        assert_int_equal(sscanf(x->element[2 * i + 1]->str, "%lld %lld", &exp, &ns), 2);
        assert_true(ns > 0);
        assert_true(exp - now <= 3000);
        if (*least == 0 || ns < *least)
            *least = (double)ns;
    }
    freeReplyObject(x);
    return n;
}

/* Polls until both instances show <want> (seconds, as /stats prints it:
 * 9 decimals) as the fleet's baseline; <want> < 0: any value above
 * -<want>. 0, or -1 past <ms>. */
static int both_show(const struct inst *a, const struct inst *b, double want, int ms)
{
    uint64_t end = th_now_ms() + (uint64_t)ms;
    do {
        double fa = stat(a->admin, "fleet_baseline_seconds");
        double fb = stat(b->admin, "fleet_baseline_seconds");
        if (want >= 0 ? fabs(fa - want) < 1e-9 && fabs(fb - want) < 1e-9
                      : fa > -want && fb > -want)
            return 0;
        usleep(50000);
    } while (th_now_ms() < end);
    return -1;
}

static void test_fleet_baseline(void **state)
{
    (void)state;
    struct th_proc up, store;
    struct inst a, b, c;
    assert_int_equal(th_redis_start(&up, NULL), 0);
    assert_int_equal(th_redis_start(&store, NULL), 0);
    assert_int_equal(inst_start(&a, up.port, store.port, ""), 0);
    assert_int_equal(inst_start(&b, up.port, store.port, ""), 0);
    assert_int_equal(inst_start(&c, up.port, store.port, "adaptive_share = off\n"), 0);
    volatile int stop = 0;
    struct load ld[6];
    pthread_t t[6];
    const struct inst *to[6] = { &a, &a, &b, &b, &c, &c };
    for (int i = 0; i < 6; i++) {
        ld[i] = (struct load){ .port = to[i]->port, .stop = &stop };
        assert_int_equal(pthread_create(&t[i], NULL, client, &ld[i]), 0);
    }
    redisContext *r = redisConnect("127.0.0.1", store.port);
    assert_non_null(r);
    assert_int_equal(r->err, 0);

    /* both publish (C does not): two entries, the hash with a TTL */
    char key[256];
    double least = 0;
    uint64_t end = th_now_ms() + TH_MS;
    while ((fleet_key(r, key, sizeof(key)) != 0 || entries(r, key, &least) != 2) &&
           th_now_ms() < end)
        usleep(50000);
    assert_int_equal(fleet_key(r, key, sizeof(key)), 0);
    print_message("fleet key %s\n", key);
    assert_int_equal(entries(r, key, &least), 2);
    redisReply *x = redisCommand(r, "PTTL %s", key);
    assert_true(x != NULL && x->type == REDIS_REPLY_INTEGER && x->integer > 0 && x->integer <= 6000);
    freeReplyObject(x);

    /* each shows the least of the entries as the fleet's baseline (they
     * move as the baselines do: polled until one reading agrees) */
    int agreed = 0;
    end = th_now_ms() + TH_MS;
    while (!agreed && th_now_ms() < end) {
        entries(r, key, &least);
        double fa = stat(a.admin, "fleet_baseline_seconds");
        double fb = stat(b.admin, "fleet_baseline_seconds");
        double ea = stat(a.admin, "fleet_entries"), eb = stat(b.admin, "fleet_entries");
        agreed = fabs(fa - least / 1e9) < 1e-9 && fabs(fb - least / 1e9) < 1e-9 && ea == 2 && eb == 2;
        if (!agreed)
            usleep(50000);
    }
    print_message("fleet baseline %.9f s; own: %.9f and %.9f s\n", least / 1e9,
                  stat(a.admin, "baseline_seconds"), stat(b.admin, "baseline_seconds"));
    assert_true(agreed);
    assert_true(stat(c.admin, "fleet_baseline_seconds") == 0); /* adaptive_share = off */

    /* a lower entry (another instance's) shows on both, until it expires */
    long long now = store_ms(r);
    char val[48];
    snprintf(val, sizeof(val), "%lld 1000", now + 2500);
    x = redisCommand(r, "HSET %s other/a %s", key, val);
    assert_non_null(x);
    freeReplyObject(x);
    assert_int_equal(both_show(&a, &b, 0.000001, TH_MS), 0);
    assert_true(stat(a.admin, "fleet_entries") == 3);
    assert_int_equal(both_show(&a, &b, -0.000001, TH_MS), 0);

    /* the store stops: the fleet's value expires (3 s), each instance is on
     * its own baseline, and nothing is refused because of it */
    redisFree(r);
    th_stop(&store);
    assert_int_equal(both_show(&a, &b, 0, TH_MS), 0);
    assert_true(stat(a.admin, "baseline_seconds") > 0);
    usleep(500000);
    stop = 1;
    long ok = 0, other = 0;
    for (int i = 0; i < 6; i++) {
        pthread_join(t[i], NULL);
        ok += ld[i].ok;
        other += ld[i].other;
        if (ld[i].bad[0])
            print_message("client %d: %s\n", i, ld[i].bad);
    }
    print_message("ok %ld other %ld\n", ok, other);
    assert_true(ok > 100);
    assert_int_equal(other, 0);
    const struct inst *all[3] = { &a, &b, &c };
    for (int i = 0; i < 3; i++) {
        char m[128];
        static const char *const why[] = { "queue_full", "evicted", "standing", "expired" };
        for (int k = 0; k < 4; k++) {
            snprintf(m, sizeof(m), "sluice_adaptive_shed_total{listener=\"a\",reason=\"%s\"}", why[k]);
            assert_true(th_metric(all[i]->admin, m) == 0);
        }
    }
    assert_true(th_metric(a.admin, "sluice_adaptive_fleet_baseline_seconds{listener=\"a\"}") == 0);
    th_stop(&c.p);
    th_stop(&b.p);
    th_stop(&a.p);
    th_stop(&up);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fleet_baseline),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    return th_finish(failed);
}

/* sluice integration tests — a pooled listener holds a small batch for more
 * requests (upstream_pool_batch_wait; net/gather.h).
 *
 * Through a real sluice: one client's requests wait (the metrics count
 * it), nothing joins them, so after a few holds they stop (a back-off)
 * and no request waits for good; `0`: never held, whatever many clients
 * send. That requests sent while a batch waits join it, in one write, is
 * test_upool.c's (test_batch_wait_gathers): there the engine's clock is
 * the test's, here it is the machine's.
 *
 * docs/resp.md, "Pooled listeners (upstream_pool)", is the contract.
 * BATCH_ONLY=<cmocka pattern> picks tests. */
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

#define NCLIENTS 12

static struct th_proc redis_p, sl_p;
static int port_w, port_z, admin;

static int group_setup(void **state)
{
    (void)state;
    if (th_redis_start(&redis_p, NULL) < 0)
        return -1;
    port_w = th_free_port();
    do
        port_z = th_free_port();
    while (port_z == port_w);
    do
        admin = th_free_port();
    while (admin == port_w || admin == port_z);
    char ini[1024];
    /* one worker: every client on the same engine */
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 2s\nworkers = 1\n"
             "[store]\nurl = local\n"
             "[listener w]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nupstream_pool = 1\n"
             "upstream_pool_batch_wait = 1ms\n"
             "[listener z]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nupstream_pool = 1\n"
             "upstream_pool_batch_wait = 0\n",
             admin, port_w, redis_p.port, port_z, redis_p.port);
    if (th_sluice_start(&sl_p, ini, port_z) < 0) {
        th_stop(&redis_p);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    int st = th_stop(&sl_p);
    th_stop(&redis_p);
    return st == 0 ? 0 : -1;
}

static double metric(const char *name, const char *listener)
{
    char sample[128];
    snprintf(sample, sizeof(sample), "%s{listener=\"%s\"}", name, listener);
    double v = th_metric(admin, sample);
    return v < 0 ? 0 : v; /* no sample before the listener's first pooled client */
}

/* Every client sends ECHO <its number> as fast as it can, then each reads
 * its own answer. */
static void round_of(const int *fd, int n)
{
    char req[64], want[32];
    for (int i = 0; i < n; i++) {
        int len = snprintf(req, sizeof(req), "*2\r\n$4\r\nECHO\r\n$2\r\n%02d\r\n", i);
        assert_int_equal(th_write_all(fd[i], req, (size_t)len), 0);
    }
    for (int i = 0; i < n; i++) {
        int len = snprintf(want, sizeof(want), "$2\r\n%02d\r\n", i);
        assert_int_equal(th_expect(fd[i], want, (size_t)len, TH_MS), 0);
    }
}

static void open_clients(int *fd, int n, int port)
{
    for (int i = 0; i < n; i++) {
        fd[i] = th_connect(port);
        assert_true(fd[i] >= 0);
    }
}

static void close_clients(const int *fd, int n)
{
    for (int i = 0; i < n; i++)
        close(fd[i]);
}

/* One client: nothing joins its requests; the holds stop after a few (a
 * back-off of 100 ms, doubling), and every request is answered. */
static void test_one_client_stops_them(void **state)
{
    (void)state;
    redisContext *c = redisConnect("127.0.0.1", port_w);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    struct timeval tv = { TH_MS / 1000, 0 };
    redisSetTimeout(c, tv);
    double h0 = metric("sluice_pool_batch_holds_total", "w");
    for (int i = 0; i < 300; i++) {
        redisReply *r = redisCommand(c, "ECHO %d", i);
        assert_non_null(r);
        char want[16];
        snprintf(want, sizeof(want), "%d", i);
        assert_int_equal(r->type, REDIS_REPLY_STRING);
        assert_string_equal(r->str, want);
        freeReplyObject(r);
    }
    double held = metric("sluice_pool_batch_holds_total", "w") - h0;
    /* 8 holds start a back-off (100 ms, doubling): a slow machine may see a
     * few back-offs end during the 300 requests, not dozens */
    assert_true(held >= 1);
    assert_true(held <= 100);
    assert_true(th_metric(admin, "sluice_pool_batch_gained_total{listener=\"w\"}") >= 0);
    redisFree(c);
}

/* upstream_pool_batch_wait = 0: nothing is ever held. */
static void test_zero_never_holds(void **state)
{
    (void)state;
    int fd[NCLIENTS];
    open_clients(fd, NCLIENTS, port_z);
    for (int r = 0; r < 20; r++)
        round_of(fd, NCLIENTS);
    assert_int_equal(metric("sluice_pool_batch_holds_total", "z"), 0);
    close_clients(fd, NCLIENTS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_client_stops_them),
        cmocka_unit_test(test_zero_never_holds),
    };
    const char *only = getenv("BATCH_ONLY");
    if (only != NULL)
        cmocka_set_test_filter(only);
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

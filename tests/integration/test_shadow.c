/* action = shadow with the quota store: a shadow limit changes nothing,
 * counts what it would have done both ways (sluice_limit_decisions_total
 * allowed and shadow_rejected) and logs its would-be rejections at most
 * once a second per limit, the ones left out counted (repeated=N). Real
 * upstream and quota-store redis-servers, a real sluice, hiredis. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integration/harness.h"

#define MSG "a shadow limit would have rejected"

/* Would-be rejections the log of <path> accounts for: one per line naming
 * an identity, plus every repeated=N. */
static long logged_events(const char *path)
{
    char *log = th_slurp(path);
    if (log == NULL)
        return 0;
    long n = 0;
    for (char *line = strtok(log, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        if (strstr(line, MSG) == NULL)
            continue;
        if (strstr(line, "identity=") != NULL) {
            assert_non_null(strstr(line, "limit=watch identity=\"ip:127.0.0.1\" retry_ms="));
            n++;
        }
        const char *rep = strstr(line, "kind=shadow_reject repeated=");
        if (rep != NULL)
            n += atol(rep + strlen("kind=shadow_reject repeated="));
    }
    free(log);
    return n;
}

static void test_shadow_counts_and_logs(void **state)
{
    (void)state;
    struct th_proc up, store, sl;
    assert_int_equal(th_redis_start(&up, NULL), 0);
    assert_int_equal(th_redis_start(&store, NULL), 0);
    int port = th_free_port(), admin = th_free_port();
    char ini[2048];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\n"
             "[store]\nurl = redis://127.0.0.1:%d\ntimeout = 250ms\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "identity = client_ip\n"
             "[limit watch]\nlistener = r\nrate = 1/d\nburst = 2\ncommands = GET\n"
             "action = shadow\n",
             admin, store.port, port, up.port);
    assert_int_equal(th_sluice_start(&sl, ini, port), 0);
    assert_int_equal(th_metric_wait(admin, "sluice_store_up", 1, 5000), 0);
    redisContext *c = redisConnect("127.0.0.1", port);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    /* 50 GETs, all answered: 2 would have been allowed, 48 rejected */
    uint64_t t0 = th_now_ms();
    for (int i = 0; i < 50; i++) {
        redisReply *r = redisCommand(c, "GET k");
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_NIL);
        freeReplyObject(r);
    }
    uint64_t secs = (th_now_ms() - t0) / 1000;
    assert_int_equal(
        th_metric(admin, "sluice_limit_decisions_total{limit=\"watch\",outcome=\"allowed\"}"), 2);
    assert_int_equal(
        th_metric(admin, "sluice_limit_decisions_total{limit=\"watch\",outcome=\"shadow_rejected\"}"),
        48);
    assert_int_equal(
        th_metric(admin, "sluice_limit_decisions_total{limit=\"watch\",outcome=\"rejected\"}"), 0);
    /* Logged: the first at once; the others on the next line or, the
     * storm over, on a count line of their own (the sweep, once a second
     * after two quiet ones): all 48 accounted for, in at most a line a
     * second (and the count line). */
    uint64_t end = th_now_ms() + 10000;
    while (logged_events(sl.log) < 48 && th_now_ms() < end)
        usleep(50000);
    assert_int_equal(logged_events(sl.log), 48);
    assert_true(th_log_count(sl.log, MSG) <= (int)secs + 3);
    assert_true(th_log_count(sl.log, MSG) >= 2);
    redisFree(c);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&up);
    th_stop(&store);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shadow_counts_and_logs),
    };
    return th_finish(cmocka_run_group_tests(tests, NULL, NULL));
}

/* A host name looked up again at run time: the state machine with a fake
 * clock, the choice among answers, and real lookups on a real loop through an
 * injected lookup function (no DNS server: names map to numbers here, and
 * numbers are resolved by getaddrinfo itself, AI_NUMERICHOST). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <string.h>

#include "core/resolve.h"

static struct sockaddr_storage v4(const char *ip, uint16_t port)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
    sin->sin_family = AF_INET;
    sin->sin_port = htons(port);
    assert_int_equal(inet_pton(AF_INET, ip, &sin->sin_addr), 1);
    return ss;
}

static const char *fmt(const struct sockaddr_storage *ss)
{
    static char buf[64];
    return sl_resolve_fmt(ss, buf, sizeof(buf));
}

static void test_apply_states(void **state)
{
    (void)state;
    struct sl_resolve r;
    memset(&r, 0, sizeof(r));
    struct sockaddr_storage a = v4("10.0.0.1", 6379), b = v4("10.0.0.2", 6379);
    sl_resolve_set(&r, "db.test", 6379, &a, 1000);
    assert_int_equal(sl_resolve_apply(&r, 0, &a, 2000), SL_RESOLVE_SAME);
    assert_int_equal(sl_resolve_apply(&r, 0, &b, 3000), SL_RESOLVE_CHANGED);
    assert_string_equal(fmt(&r.ss), "10.0.0.2:6379");
    /* failures keep the last good address; said once, counted each time */
    assert_int_equal(sl_resolve_apply(&r, UV_EAI_NONAME, NULL, 4000), SL_RESOLVE_FAILING);
    assert_int_equal(sl_resolve_apply(&r, UV_EAI_AGAIN, NULL, 5000), SL_RESOLVE_STILL);
    assert_int_equal(sl_resolve_apply(&r, UV_EAI_AGAIN, NULL, 6000), SL_RESOLVE_STILL);
    assert_string_equal(fmt(&r.ss), "10.0.0.2:6379");
    assert_int_equal(r.failures, 3);
    assert_int_equal(r.at_ms, 6000);
    assert_int_equal(sl_resolve_apply(&r, 0, &a, 7000), SL_RESOLVE_RECOVERED);
    assert_string_equal(fmt(&r.ss), "10.0.0.1:6379");
    assert_int_equal(sl_resolve_apply(&r, UV_EAI_NONAME, NULL, 8000), SL_RESOLVE_FAILING);
    /* a reload sets the name again: the state starts over */
    sl_resolve_set(&r, "db.test", 6379, &b, 9000);
    assert_int_equal(r.failing, 0);
    assert_int_equal(sl_resolve_apply(&r, UV_EAI_NONAME, NULL, 9500), SL_RESOLVE_FAILING);
}

static void test_stale(void **state)
{
    (void)state;
    struct sl_resolve r;
    memset(&r, 0, sizeof(r));
    struct sockaddr_storage a = v4("10.0.0.1", 80);
    sl_resolve_set(&r, "web.test", 80, &a, 1000);
    assert_false(sl_resolve_stale(&r, 1000, 30000000));
    assert_false(sl_resolve_stale(&r, 30999, 30000000));
    assert_true(sl_resolve_stale(&r, 31000, 30000000));
    assert_true(sl_resolve_stale(&r, 1000, 0));      /* ttl 0: at every use */
    assert_false(sl_resolve_stale(&r, 1000, 1000));  /* 1ms: not yet */
    assert_true(sl_resolve_stale(&r, 1001, 1000));
    /* a failure waits out the ttl too */
    sl_resolve_apply(&r, UV_EAI_AGAIN, NULL, 50000);
    assert_false(sl_resolve_stale(&r, 79999, 30000000));
    assert_true(sl_resolve_stale(&r, 80000, 30000000));
    /* a numeric address is never looked up */
    sl_resolve_set(&r, NULL, 80, &a, 1000);
    assert_false(sl_resolve_stale(&r, 1u << 30, 0));
    struct sl_resolve q = r;
    assert_int_equal(sl_resolve_start(&q, NULL), 0);
    assert_null(q.req);
}

static void test_pick_ipv4_first(void **state)
{
    (void)state;
    struct sockaddr_in6 s6;
    memset(&s6, 0, sizeof(s6));
    s6.sin6_family = AF_INET6;
    inet_pton(AF_INET6, "::1", &s6.sin6_addr);
    struct sockaddr_storage s4 = v4("127.0.0.1", 0);
    struct addrinfo a4 = { .ai_family = AF_INET, .ai_addrlen = sizeof(struct sockaddr_in),
                           .ai_addr = (struct sockaddr *)&s4 };
    struct addrinfo a6 = { .ai_family = AF_INET6, .ai_addrlen = sizeof(s6),
                           .ai_addr = (struct sockaddr *)&s6, .ai_next = &a4 };
    struct sockaddr_storage out;
    assert_int_equal(sl_resolve_pick(&a6, 6379, &out), 0);
    assert_string_equal(fmt(&out), "127.0.0.1:6379");
    a6.ai_next = NULL;
    assert_int_equal(sl_resolve_pick(&a6, 7000, &out), 0);
    assert_string_equal(fmt(&out), "[::1]:7000");
    struct addrinfo unix_ai = { .ai_family = AF_UNIX };
    assert_int_equal(sl_resolve_pick(&unix_ai, 1, &out), -1);
}

/* ---- real lookups on a loop ------------------------------------------------ */

static const char *answer; /* what the fake DNS says for every name: a number, or
                              "fail" */
static int lookups;        /* lookups made */

static int fake_lookup(uv_loop_t *loop, uv_getaddrinfo_t *req, uv_getaddrinfo_cb cb,
                       const char *node, const char *service, const struct addrinfo *hints)
{
    (void)node;
    struct addrinfo h = *hints;
    h.ai_flags |= AI_NUMERICHOST; /* "fail" fails at once, without DNS */
    lookups++;
    return uv_getaddrinfo(loop, req, cb, answer, service, &h);
}

static enum sl_resolve_event last_ev;
static int calls;

static void on_done(struct sl_resolve *r, enum sl_resolve_event ev, int err)
{
    (void)r;
    (void)err;
    last_ev = ev;
    calls++;
}

/* Starts a lookup of <r> with the fake DNS saying <says>; runs the loop until
 * it ends. Returns the event. */
static enum sl_resolve_event lookup(uv_loop_t *loop, struct sl_resolve *r, const char *says)
{
    answer = says;
    int before = calls;
    assert_int_equal(sl_resolve_start(r, loop), 0);
    assert_non_null(r->req);
    uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(calls, before + 1);
    assert_null(r->req);
    return last_ev;
}

static void test_lookups_on_loop(void **state)
{
    (void)state;
    sl_resolve_lookup_fn *saved = sl_resolve_lookup;
    sl_resolve_lookup = fake_lookup;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct sl_resolve r;
    memset(&r, 0, sizeof(r));
    r.cb = on_done;
    struct sockaddr_storage a = v4("10.0.0.1", 6379);
    sl_resolve_set(&r, "db.test", 6379, &a, uv_now(&loop));

    /* the record moved (a replaced pod) */
    assert_int_equal(lookup(&loop, &r, "10.0.0.2"), SL_RESOLVE_CHANGED);
    assert_string_equal(fmt(&r.ss), "10.0.0.2:6379");
    /* DNS down: the last good address stays */
    assert_int_equal(lookup(&loop, &r, "fail"), SL_RESOLVE_FAILING);
    assert_int_equal(lookup(&loop, &r, "fail"), SL_RESOLVE_STILL);
    assert_string_equal(fmt(&r.ss), "10.0.0.2:6379");
    assert_int_equal(r.failures, 2);
    assert_int_equal(lookup(&loop, &r, "10.0.0.2"), SL_RESOLVE_RECOVERED);
    assert_int_equal(lookup(&loop, &r, "10.0.0.2"), SL_RESOLVE_SAME);
    /* an IPv6-only answer is taken */
    assert_int_equal(lookup(&loop, &r, "::1"), SL_RESOLVE_CHANGED);
    assert_string_equal(fmt(&r.ss), "[::1]:6379");

    /* one lookup at a time */
    answer = "10.0.0.3";
    lookups = 0;
    assert_int_equal(sl_resolve_start(&r, &loop), 0);
    assert_int_equal(sl_resolve_start(&r, &loop), 0);
    assert_false(sl_resolve_stale(&r, uv_now(&loop), 0));
    assert_int_equal(lookups, 1);
    /* a reload renamed the upstream meanwhile: the answer is dropped */
    struct sockaddr_storage o = v4("10.9.9.9", 1);
    sl_resolve_set(&r, "other.test", 1, &o, uv_now(&loop));
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(last_ev, SL_RESOLVE_STALE);
    assert_string_equal(fmt(&r.ss), "10.9.9.9:1");

    /* the owner goes while a lookup runs: no callback, nothing leaks */
    int before = calls;
    assert_int_equal(sl_resolve_start(&r, &loop), 0);
    sl_resolve_stop(&r);
    assert_null(r.req);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(calls, before);

    assert_int_equal(uv_loop_close(&loop), 0);
    sl_resolve_lookup = saved;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_apply_states),
        cmocka_unit_test(test_stale),
        cmocka_unit_test(test_pick_ipv4_first),
        cmocka_unit_test(test_lookups_on_loop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The reply router of a pooled upstream connection (src/net/upool_route.c),
 * without sockets: FIFO entries of several owners, reply bytes fed whole
 * and split at every byte, setup and RESET checks, forgotten owners, pushes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/buf.h"
#include "core/err.h"
#include "net/upool_route.h"

/* What each owner was given. */
struct rec {
    struct sl_upool_owner o;
    char     got[4096];
    size_t   len;
    unsigned done;   /* pieces flagged DONE */
    unsigned push;   /* ... and PUSH */
    unsigned ended;  /* reply_end calls */
    int      refuse; /* deliver says stop */
};

static unsigned dropped_ends; /* reply_end(NULL) */
static int kinds_done[8];

static int deliver(void *ctx, struct sl_upool_owner *o, struct sl_buf *b, uint32_t from,
                   uint32_t to, unsigned flags)
{
    (void)ctx;
    struct rec *r = o->data;
    assert_true(r->len + (to - from) <= sizeof(r->got));
    memcpy(r->got + r->len, b->data + from, to - from);
    r->len += to - from;
    r->done += (flags & SL_UPOOL_DONE) != 0;
    r->push += (flags & SL_UPOOL_PUSH) && (flags & SL_UPOOL_DONE);
    return r->refuse;
}

static void reply_end(void *ctx, struct sl_upool_owner *o)
{
    (void)ctx;
    if (o == NULL)
        dropped_ends++;
    else
        ((struct rec *)o->data)->ended++;
}

static int entry_done(void *ctx, int kind)
{
    (void)ctx;
    kinds_done[kind]++;
    return 0;
}

static const struct sl_upool_route_ops ops = { deliver, reply_end, entry_done };

static void recs_init(struct rec *r, int n)
{
    memset(r, 0, sizeof(*r) * (size_t)n);
    for (int i = 0; i < n; i++)
        r[i].o.data = &r[i];
    dropped_ends = 0;
    memset(kinds_done, 0, sizeof(kinds_done));
}

/* Feeds <wire> in pieces of <step> bytes (0: whole); returns the first
 * nonzero result, or 0. */
static int feed(struct sl_upool_route *rt, const char *wire, size_t len, size_t step, char *why)
{
    struct sl_buf *b = sl_buf_get();
    assert_non_null(b);
    size_t off = 0;
    int rc = 0;
    while (off < len && rc == 0) {
        size_t n = step == 0 || len - off < step ? len - off : step;
        b->start = b->end = 0;
        memcpy(b->data, wire + off, n);
        b->end = (uint32_t)n;
        rc = sl_upool_route_feed(rt, b, 0, (uint32_t)n, &ops, NULL, why, 200);
        off += n;
    }
    sl_buf_unref(b);
    return rc;
}

static const char WIRE[] = "+OK\r\n"                       /* setup 1: SELECT */
                           "%1\r\n+server\r\n+redis\r\n"   /* setup 2: HELLO 3 */
                           "$3\r\nfoo\r\n"                 /* A */
                           ":1\r\n"                        /* A */
                           "*2\r\n$1\r\na\r\n*1\r\n:2\r\n" /* B */
                           "-ERR wrong\r\n"                /* A: errors are replies too */
                           "_\r\n";                        /* C */

static void test_routes_in_order_any_split(void **state)
{
    (void)state;
    for (size_t step = 0; step <= 9; step++) {
        struct rec r[3];
        recs_init(r, 3);
        struct sl_upool_route rt;
        char why[200];
        sl_upool_route_init(&rt);
        assert_int_equal(sl_upool_route_push(&rt, NULL, 2, SL_UPE_SETUP), 0);
        assert_int_equal(sl_upool_route_push(&rt, &r[0].o, 2, SL_UPE_OWNER), 0);
        assert_int_equal(sl_upool_route_push(&rt, &r[1].o, 1, SL_UPE_OWNER), 0);
        assert_int_equal(sl_upool_route_push(&rt, &r[0].o, 1, SL_UPE_OWNER), 0);
        assert_int_equal(sl_upool_route_push(&rt, &r[2].o, 1, SL_UPE_OWNER), 0);
        assert_int_equal(rt.owed, 5);
        assert_int_equal(feed(&rt, WIRE, sizeof(WIRE) - 1, step, why), 0);
        assert_int_equal(r[0].len, strlen("$3\r\nfoo\r\n:1\r\n-ERR wrong\r\n"));
        assert_memory_equal(r[0].got, "$3\r\nfoo\r\n:1\r\n-ERR wrong\r\n", r[0].len);
        assert_int_equal(r[1].len, strlen("*2\r\n$1\r\na\r\n*1\r\n:2\r\n"));
        assert_memory_equal(r[1].got, "*2\r\n$1\r\na\r\n*1\r\n:2\r\n", r[1].len);
        assert_int_equal(r[2].len, 3);
        assert_int_equal(r[0].done, 3);
        assert_int_equal(r[0].ended, 3);
        assert_int_equal(r[1].done, 1);
        assert_int_equal(r[2].ended, 1);
        assert_int_equal(kinds_done[SL_UPE_SETUP], 1);
        assert_int_equal(kinds_done[SL_UPE_OWNER], 4);
        assert_int_equal(rt.n, 0);
        assert_int_equal(rt.owed, 0);
        /* one more reply: nobody asked */
        assert_int_equal(feed(&rt, "+OK\r\n", 5, step, why), SL_EPROTO);
        assert_non_null(strstr(why, "no request"));
        sl_upool_route_free(&rt);
    }
}

static void test_forgotten_owner_dropped(void **state)
{
    (void)state;
    struct rec r[2];
    recs_init(r, 2);
    struct sl_upool_route rt;
    char why[200];
    sl_upool_route_init(&rt);
    sl_upool_route_push(&rt, &r[0].o, 1, SL_UPE_OWNER);
    sl_upool_route_push(&rt, &r[1].o, 1, SL_UPE_OWNER);
    sl_upool_route_push(&rt, &r[0].o, 1, SL_UPE_OWNER);
    /* A's first reply comes in part, then A goes */
    assert_int_equal(feed(&rt, "$10\r\n01234", 10, 0, why), 0);
    assert_int_equal(r[0].len, 10);
    sl_upool_route_forget(&rt, &r[0].o);
    assert_int_equal(feed(&rt, "56789\r\n+b\r\n+a2\r\n", 16, 3, why), 0);
    assert_int_equal(r[0].len, 10); /* nothing more to A, nothing of A's to B */
    assert_int_equal(r[1].len, 4);
    assert_memory_equal(r[1].got, "+b\r\n", 4);
    assert_int_equal(dropped_ends, 2);
    assert_int_equal(rt.n, 0);
    sl_upool_route_free(&rt);
}

static void test_setup_refused(void **state)
{
    (void)state;
    struct rec r[1];
    recs_init(r, 1);
    struct sl_upool_route rt;
    char why[200];
    sl_upool_route_init(&rt);
    sl_upool_route_push(&rt, NULL, 2, SL_UPE_SETUP);
    sl_upool_route_push(&rt, &r[0].o, 1, SL_UPE_OWNER);
    assert_int_equal(feed(&rt, "+OK\r\n-WRONGPASS invalid username-password pair\r\n:1\r\n", 52,
                          4, why),
                     SL_EPROTO);
    assert_string_equal(why, "a setup command was refused: -WRONGPASS invalid username-password pair");
    assert_int_equal(r[0].len, 0);
    sl_upool_route_free(&rt);
}

static void test_push_on_shared_fails(void **state)
{
    (void)state;
    struct rec r[1];
    recs_init(r, 1);
    struct sl_upool_route rt;
    char why[200];
    sl_upool_route_init(&rt);
    sl_upool_route_push(&rt, &r[0].o, 1, SL_UPE_OWNER);
    assert_int_equal(feed(&rt, ">2\r\n+invalidate\r\n_\r\n", 20, 1, why), SL_EPROTO);
    assert_non_null(strstr(why, "push"));
    assert_int_equal(r[0].len, 0); /* not one byte of it reached the owner */
    sl_upool_route_free(&rt);
}

static void test_raw_then_reset(void **state)
{
    (void)state;
    struct rec r[2];
    recs_init(r, 2);
    struct sl_upool_route rt;
    char why[200];
    sl_upool_route_init(&rt);
    sl_upool_route_push(&rt, &r[0].o, 1, SL_UPE_RAW);
    const char w0[] = "+QUEUED\r\n>3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n";
    assert_int_equal(feed(&rt, w0, sizeof(w0) - 1, 5, why), 0);
    assert_int_equal(r[0].done, 2);
    assert_int_equal(r[0].push, 1);
    /* unpin with 1 reply owed: popped, skip 1 (a push between does not
     * count), RESET exact, then the key's setup, then B */
    sl_upool_route_pop(&rt);
    sl_upool_route_push(&rt, NULL, 1, SL_UPE_SKIP);
    sl_upool_route_push(&rt, NULL, 1, SL_UPE_RESET);
    sl_upool_route_push(&rt, NULL, 1, SL_UPE_SETUP);
    sl_upool_route_push(&rt, &r[1].o, 1, SL_UPE_OWNER);
    const char w[] = ">2\r\n+x\r\n+y\r\n+RESET\r\n+RESET\r\n+OK\r\n:7\r\n";
    assert_int_equal(feed(&rt, w, sizeof(w) - 1, 2, why), 0);
    /* the first +RESET was the skipped reply: it ends the skip, not the RESET */
    assert_int_equal(r[0].len, sizeof(w0) - 1);
    assert_int_equal(r[1].len, 4);
    assert_int_equal(kinds_done[SL_UPE_RESET], 1);
    sl_upool_route_free(&rt);

    /* RESET answered otherwise: the connection must go */
    sl_upool_route_init(&rt);
    sl_upool_route_push(&rt, NULL, 1, SL_UPE_RESET);
    assert_int_equal(feed(&rt, "$6\r\n+RESET\r\n", 12, 0, why), SL_EPROTO);
    sl_upool_route_free(&rt);

    /* by scan: everything dropped up to a top-level +RESET */
    sl_upool_route_init(&rt);
    sl_upool_route_push(&rt, NULL, 1, SL_UPE_RESET_SCAN);
    sl_upool_route_push(&rt, &r[1].o, 1, SL_UPE_OWNER);
    const char w2[] = "*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$8\r\n+RESET\r\n\r\n+RESET\r\n:8\r\n";
    assert_int_equal(feed(&rt, w2, sizeof(w2) - 1, 1, why), 0);
    assert_int_equal(r[1].len, 8);
    assert_memory_equal(r[1].got + 4, ":8\r\n", 4);
    sl_upool_route_free(&rt);
}

static void test_refusal_stops(void **state)
{
    (void)state;
    struct rec r[1];
    recs_init(r, 1);
    r[0].refuse = 1;
    struct sl_upool_route rt;
    char why[200];
    sl_upool_route_init(&rt);
    sl_upool_route_push(&rt, &r[0].o, 2, SL_UPE_OWNER);
    assert_int_equal(feed(&rt, "+a\r\n+b\r\n", 8, 0, why), 1);
    assert_int_equal(r[0].len, 4);
    sl_upool_route_free(&rt);
}

static void test_ring_grows(void **state)
{
    (void)state;
    struct rec r[2];
    recs_init(r, 2);
    struct sl_upool_route rt;
    char why[200];
    sl_upool_route_init(&rt);
    char wire[100 * 8];
    size_t len = 0;
    for (int i = 0; i < 100; i++) {
        /* alternate owners: no merging, the ring grows past 8 several times */
        assert_int_equal(sl_upool_route_push(&rt, &r[i & 1].o, 1, SL_UPE_OWNER), 0);
        len += (size_t)snprintf(wire + len, sizeof(wire) - len, ":%d\r\n", i);
        if (i % 7 == 6) /* and some of it is consumed in between */
            assert_int_equal(feed(&rt, wire, len, 0, why), 0), len = 0;
    }
    assert_int_equal(feed(&rt, wire, len, 0, why), 0);
    assert_int_equal(r[0].done, 50);
    assert_int_equal(r[1].done, 50);
    assert_memory_equal(r[1].got, ":1\r\n:3\r\n:5\r\n", 12);
    sl_upool_route_free(&rt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routes_in_order_any_split),
        cmocka_unit_test(test_forgotten_owner_dropped),
        cmocka_unit_test(test_setup_refused),
        cmocka_unit_test(test_push_on_shared_fails),
        cmocka_unit_test(test_raw_then_reset),
        cmocka_unit_test(test_refusal_stops),
        cmocka_unit_test(test_ring_grows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

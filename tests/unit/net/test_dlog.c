/* The decision log's pure parts (src/net/dlog.c): the rate bound (at most
 * N lines a window, the rest counted by outcome and handed over once the
 * window is over, never lost) and the line's fields in logfmt and json.
 * No loop, no sink. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/log.h"
#include "net/dlog.h"

static void test_rate_bound_counts_every_decision(void **state)
{
    (void)state;
    struct sl_dlog_rate r;
    memset(&r, 0, sizeof(r));
    uint64_t by[SL_DLOG_N_OUTCOMES], told = 0, written = 0;
    uint64_t now = 5000000;
    /* 1000 decisions in 2.5 s, 10 a window: lines + counts = 1000 */
    for (int i = 0; i < 1000; i++) {
        now += 2500;
        int outcome = i % 3 == 0 ? SL_DLOG_DELAYED : SL_DLOG_REJECTED;
        written += (uint64_t)sl_dlog_rate_take(&r, now, 10, outcome, by);
        for (int k = 0; k < SL_DLOG_N_OUTCOMES; k++)
            told += by[k];
    }
    /* the last window's count is handed over by the next decision */
    now += 1000000;
    written += (uint64_t)sl_dlog_rate_take(&r, now, 10, SL_DLOG_REJECTED, by);
    for (int k = 0; k < SL_DLOG_N_OUTCOMES; k++)
        told += by[k];
    assert_int_equal(written + told, 1001);
    assert_int_equal(written, 10 * 3 + 1); /* windows at 0, 1 s, 2 s, then the last one */
}

static void test_rate_counts_by_outcome(void **state)
{
    (void)state;
    struct sl_dlog_rate r;
    memset(&r, 0, sizeof(r));
    uint64_t by[SL_DLOG_N_OUTCOMES];
    assert_int_equal(sl_dlog_rate_take(&r, 1000, 1, SL_DLOG_REJECTED, by), 1);
    assert_int_equal(sl_dlog_rate_take(&r, 2000, 1, SL_DLOG_REJECTED, by), 0);
    assert_int_equal(sl_dlog_rate_take(&r, 3000, 1, SL_DLOG_DELAYED, by), 0);
    assert_int_equal(sl_dlog_rate_take(&r, 4000, 1, SL_DLOG_SHADOW, by), 0);
    assert_int_equal(sl_dlog_rate_take(&r, 1001000, 1, SL_DLOG_ALLOWED, by), 1);
    assert_int_equal(by[SL_DLOG_REJECTED], 1);
    assert_int_equal(by[SL_DLOG_DELAYED], 1);
    assert_int_equal(by[SL_DLOG_SHADOW], 1);
    assert_int_equal(by[SL_DLOG_ALLOWED], 0);
}

static void test_line_fields(void **state)
{
    (void)state;
    char out[1024];
    struct sl_dlog_entry e = {
        .listener = "api", .limit = "per_key", .identity = "user:alice",
        .request = "GET /v1/items", .request_len = 13, .cost = 3,
        .outcome = SL_DLOG_REJECTED, .wait_ms = 1200,
    };
    sl_dlog_format(out, sizeof(out), SL_LOG_LOGFMT, "T", &e);
    assert_string_equal(out, "ts=T level=info msg=decision listener=api limit=per_key "
                             "identity=user:alice request=\"GET /v1/items\" cost=3 "
                             "outcome=rejected retry_ms=1200\n");
    e.outcome = SL_DLOG_DELAYED;
    e.wait_ms = 40;
    e.cost = 0;
    sl_dlog_format(out, sizeof(out), SL_LOG_JSON, "T", &e);
    assert_string_equal(out, "{\"ts\":\"T\",\"level\":\"info\",\"msg\":\"decision\",\"listener\":\"api\","
                             "\"limit\":\"per_key\",\"identity\":\"user:alice\","
                             "\"request\":\"GET /v1/items\",\"outcome\":\"delayed\","
                             "\"delay_ms\":\"40\"}\n");
    e.outcome = SL_DLOG_REJECTED;
    e.wait_ms = SL_DLOG_NEVER;
    e.request = "SET";
    e.request_len = 3;
    sl_dlog_format(out, sizeof(out), SL_LOG_LOGFMT, "T", &e);
    assert_non_null(strstr(out, " request=SET outcome=rejected retry_ms=never\n"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rate_bound_counts_every_decision),
        cmocka_unit_test(test_rate_counts_by_outcome),
        cmocka_unit_test(test_line_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

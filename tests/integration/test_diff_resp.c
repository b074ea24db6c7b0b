/* sluice integration test — the differential RESP fuzzer, short and seeded.
 *
 * Runs tests/fuzz/diff_resp.c (included here, its main() left out) for a
 * fixed seed and number of streams: every stream goes to Redis directly and
 * through sluice's two listeners (no limits; store-backed limits that never
 * refuse), and the replies must match. SLUICE_BIN selects the binary, so
 * `make check` runs it against the ASan + UBSan build. The long run is
 * `make fuzz-diff`. DIFF_RESP_STREAMS and DIFF_RESP_SEED override the
 * defaults (200 streams, seed 11).
 *
 * Then its pooled mode: rounds of 4 concurrent clients through a listener
 * with upstream_pool = 2, each client's replies against the same stream
 * sent directly at the same time as the others' (DIFF_RESP_ROUNDS, default
 * 25 rounds, about 10 s). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#define DIFF_RESP_NO_MAIN
#include "fuzz/diff_resp.c"

static void test_diff_resp_smoke(void **state)
{
    (void)state;
    const char *n = getenv("DIFF_RESP_STREAMS"), *seed = getenv("DIFF_RESP_SEED");
    char *argv[] = { "diff_resp", "--seed", (char *)(seed ? seed : "11"), "--streams",
                     (char *)(n ? n : "200"), "--out", "build/diff-resp-smoke", "--no-minimize", NULL };
    assert_int_equal(diff_resp_main(8, argv), 0);
}

static void test_diff_resp_pooled(void **state)
{
    (void)state;
    const char *n = getenv("DIFF_RESP_ROUNDS"), *seed = getenv("DIFF_RESP_SEED");
    char *argv[] = { "diff_resp", "--pooled", "4", "--pool-size", "2", "--seed",
                     (char *)(seed ? seed : "11"), "--streams", (char *)(n ? n : "25"), "--quiet",
                     "500", "--out", "build/diff-resp-pooled", NULL };
    assert_int_equal(diff_resp_main(13, argv), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_diff_resp_smoke),
        cmocka_unit_test(test_diff_resp_pooled),
    };
    return th_finish(cmocka_run_group_tests(tests, NULL, NULL));
}

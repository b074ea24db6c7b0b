/* sluice integration tests — hostile HTTP clients and upstreams (issue 12).
 *
 * Runs tests/integration/http_hostile.py against a sluice with three http listeners in front of our Python
 * upstream (tests/integration/http_upstream.py): plain (header_timeout 1s,
 * upstream_timeout 2s, max_request 64kb), limited (every request refused
 * after the first) and delayed (action = delay). The driver draws seeded
 * cases (random bytes, mutated and split requests, pipelines with bad
 * ones, caps, disconnects at every point, half-closes, 100-continue,
 * tunnels, a slowloris, odd and cut upstream responses) and checks each
 * ends or proceeds in time with answers docs/http.md allows. Here, after
 * it: sluice is alive, no session is left (sluice_connections_active 0),
 * no head carrying X-Poison (sent only in requests sluice must refuse)
 * reached the upstream, and sluice exits cleanly (under `make check`, no
 * ASan/UBSan report).
 *
 * The cases are fixed: HOSTILE_SEED (default 1) and HOSTILE_CASES per
 * worker (default 250, four workers) name the same cases on any machine,
 * however loaded, and a failure prints the line that replays it. Random
 * seeds and long runs are for `make fuzz-hostile` (HOSTILE_SEED=random,
 * HOSTILE_SECONDS=T: as many cases as T seconds allow, the seed printed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <errno.h> /* program_invocation_name */

#include "integration/harness.h"

/* How to run the same cases again (HOSTILE_SEED=... with the count or the time). */
static char replay[256];

static void print_replay(void)
{
    const char *bin = getenv("SLUICE_BIN");
    fprintf(stderr, "replay: %s%s%s%s %s\n", bin ? "SLUICE_BIN=" : "", bin ? bin : "", bin ? " " : "", replay,
            program_invocation_name);
}

static void test_hostile(void **state)
{
    (void)state;
    struct th_proc pyup, sl;
    assert_int_equal(th_pyup_start(&pyup), 0);
    int plain = th_free_port(), limited = th_free_port(), delayed = th_free_port();
    int admin = th_free_port();
    char ini[4096];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\n[store]\nurl = local\n"
             "[listener plain]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "header_timeout = 1s\nupstream_timeout = 2s\nmax_request = 64kb\n"
             "[listener limited]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "identity = client_ip\n"
             "[listener delayed]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "identity = client_ip\n"
             "[limit never]\nlistener = limited\nrate = 1/h\nburst = 1\n"
             "[limit shape]\nlistener = delayed\nrate = 50/s\nburst = 5\naction = delay\nmax_delay = 10s\n",
             admin, plain, pyup.port, limited, pyup.port, delayed, pyup.port);
    assert_int_equal(th_sluice_start(&sl, ini, delayed), 0);
    /* the limited listener's one request: every later one is refused */
    char *first = th_http_get(limited, "/echo");
    assert_non_null(first);
    free(first);

    const char *env = getenv("HOSTILE_SEED");
    long seed = 1;
    if (env && strcmp(env, "random") == 0)
        seed = (long)(time(NULL) ^ getpid()) % 100000;
    else if (env && *env)
        seed = atol(env);
    env = getenv("HOSTILE_SECONDS");
    double secs = env && *env ? atof(env) : 0;
    env = getenv("HOSTILE_CASES");
    long cases = env && *env ? atol(env) : 250;
    char cmd[512], out[8192];
    if (secs > 0) {
        snprintf(cmd, sizeof(cmd),
                 "python3 tests/integration/http_hostile.py --plain %d --limited %d --delay %d "
                 "--upstream %d --seed %ld --seconds %.1f 2>&1",
                 plain, limited, delayed, pyup.port, seed, secs);
        snprintf(replay, sizeof(replay), "HOSTILE_SEED=%ld HOSTILE_SECONDS=%.1f", seed, secs);
    } else {
        snprintf(cmd, sizeof(cmd),
                 "python3 tests/integration/http_hostile.py --plain %d --limited %d --delay %d "
                 "--upstream %d --seed %ld --cases %ld 2>&1",
                 plain, limited, delayed, pyup.port, seed, cases);
        snprintf(replay, sizeof(replay), "HOSTILE_SEED=%ld HOSTILE_CASES=%ld", seed, cases);
    }
    fprintf(stderr, "%s\n", cmd);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t got = fread(out, 1, sizeof(out) - 1, p);
    out[got] = '\0';
    int st = pclose(p);
    fprintf(stderr, "%s", out);
    int alive = th_alive_or_report(&sl);
    if (st != 0 || strstr(out, "hostile: ok") == NULL || alive != 0)
        print_replay();
    assert_int_equal(alive, 0);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "hostile: ok"));

    /* every session let go once its clients left */
    static const char *const names[] = { "plain", "limited", "delayed" };
    for (int i = 0; i < 3; i++) {
        char sample[128];
        snprintf(sample, sizeof(sample), "sluice_connections_active{listener=\"%s\"}", names[i]);
        double v = -1;
        for (uint64_t end = th_now_ms() + 5000; th_now_ms() < end; usleep(100000))
            if ((v = th_metric(admin, sample)) == 0)
                break;
        if (v != 0) {
            print_replay();
            fail_msg("%s = %.0f after the clients left", sample, v);
        }
    }
    char *stats = th_http_get(pyup.port, "/__stats");
    assert_non_null(stats);
    fprintf(stderr, "upstream: %s\n", stats);
    if (strstr(stats, "\"poison\":0") == NULL)
        print_replay();
    assert_non_null(strstr(stats, "\"poison\":0"));
    free(stats);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&pyup);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostile),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    th_kill_all();
    return th_finish(failed);
}

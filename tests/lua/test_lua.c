/* sluice Lua tests — the scripts in lua/ on a real redis-server.
 *
 * The shared table (tests/unit/limit/cases.h) runs through every algorithm
 * script on its own (loaded from lua/ at run time) and through the embedded
 * decide script (sl_lua_scripts[SL_SCRIPT_DECIDE], SCRIPT LOAD + EVALSHA),
 * with explicit times. Random traffic, including clock steps back and
 * reloads, runs through the scripts and through src/limit/algo.c side by
 * side: the answers must be identical (gcra with a random max_wait, 0
 * included). The worked reservation cases (tests/unit/limit/reserve_cases.h)
 * run through lua/gcra.lua with ARGV[6] and through decide, against the table
 * and the C answers. Then decide's all-or-nothing and shadow rules, with
 * reserving limits too, TIME mode, errors, the heartbeat, the TTLs, and
 * that a key outlives its reservations.
 *
 * Explicit times are not Redis's clock: a limit whose PEXPIRE is 1 ms
 * would expire (in real time) between two steps that are seconds apart in
 * the test's time. So runs of steps go through "checked" copies of the
 * scripts: the script's own text, run as a function that sees a `redis`
 * whose PEXPIRE records the TTL asked for (returned, compared with
 * sl_algo_ttl_us()) and sets an hour instead; then, in the same call, the
 * keys without an expiry are counted (there must be none). The unwrapped
 * scripts run everywhere else; there, with real time, every key's PTTL
 * must be > 0. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "core/err.h"
#include "integration/harness.h"
#include "limit/algo.h"
#include "store/scripts.h"
#include "unit/limit/cases.h"
#include "unit/limit/reserve_cases.h"

#define S_US 1000000ULL
#define DAY  (86400 * S_US)
#define YEAR (365 * DAY)
#define N_ALGOS 5

static struct th_proc redis_p;
static redisContext *rc;
static char sha_algo[N_ALGOS][48];    /* lua/<algorithm>.lua, standalone */
static char sha_algo_chk[N_ALGOS][48];/* the same, checked (see the top) */
static char sha_decide[48];           /* the embedded composite */
static char sha_decide_chk[48];       /* the same, checked */
static char sha_heartbeat[48];        /* the embedded heartbeat */

/* A script made "checked" (see the top): head + the script + tail. */
static const char check_head[] =
    "local sluice_real, sluice_ttl = redis, 0\n"
    "local redis = setmetatable({\n"
    "  call = function(cmd, ...)\n"
    "    if cmd == 'PEXPIRE' then\n"
    "      local k, ms = ...\n"
    "      sluice_ttl = tonumber(ms)\n"
    "      return sluice_real.call('PEXPIRE', k, 3600000)\n"
    "    end\n"
    "    return sluice_real.call(cmd, ...)\n"
    "  end,\n"
    "}, {__index = sluice_real})\n"
    "local function sluice_test_run()\n";
static const char check_tail[] =
    "\nend\n"
    "local r = sluice_test_run()\n"
    "local immortal = 0\n"
    "for _, k in ipairs(sluice_real.call('KEYS', '*')) do\n"
    "  if sluice_real.call('PTTL', k) == -1 then immortal = immortal + 1 end\n"
    "end\n"
    "r[#r + 1] = immortal\n"
    "r[#r + 1] = sluice_ttl\n"
    "return r\n";

/* ---- helpers -------------------------------------------------------------- */

/* <text> up to its line starting "-- standalone" (what lua/embed.sh keeps). */
static void cut_standalone(char *text)
{
    for (char *line = text; *line != '\0';) {
        if (strncmp(line, "-- standalone", 13) == 0) {
            *line = '\0';
            return;
        }
        char *nl = strchr(line, '\n');
        if (nl == NULL)
            return;
        line = nl + 1;
    }
}

static int load(const char *text, char *sha)
{
    redisReply *r = redisCommand(rc, "SCRIPT LOAD %b", text, strlen(text));
    int ok = r != NULL && r->type == REDIS_REPLY_STRING && r->len < 48;
    if (ok)
        memcpy(sha, r->str, (size_t)r->len + 1);
    else
        print_error("SCRIPT LOAD: %s\n", r && r->str ? r->str : "no reply");
    freeReplyObject(r);
    return ok ? 0 : -1;
}

/* Loads <text> and its checked copy. */
static int load2(const char *text, char *sha, char *sha_chk)
{
    size_t n = strlen(check_head) + strlen(text) + strlen(check_tail) + 1;
    char *w = malloc(n);
    if (w == NULL)
        return -1;
    snprintf(w, n, "%s%s%s", check_head, text, check_tail);
    int rcode = load(text, sha) == 0 && load(w, sha_chk) == 0 ? 0 : -1;
    free(w);
    return rcode;
}

static void flushall(void)
{
    redisReply *r = redisCommand(rc, "FLUSHALL");
    assert_non_null(r);
    freeReplyObject(r);
}

/* Every key has a PTTL > 0 (no transaction around: real time). */
static void assert_all_keys_expire(void)
{
    redisReply *k = redisCommand(rc, "KEYS *");
    assert_non_null(k);
    assert_int_equal(k->type, REDIS_REPLY_ARRAY);
    for (size_t i = 0; i < k->elements; i++) {
        redisReply *t = redisCommand(rc, "PTTL %b", k->element[i]->str, (size_t)k->element[i]->len);
        assert_non_null(t);
        if (!(t->type == REDIS_REPLY_INTEGER && (t->integer > 0 || t->integer == -2)))
            print_error("key %s: PTTL %lld\n", k->element[i]->str, t->integer);
        assert_true(t->integer > 0 || t->integer == -2); /* -2: expired just now */
        freeReplyObject(t);
    }
    freeReplyObject(k);
}

/* ---- running requests ----------------------------------------------------- */

struct req {
    enum sl_algo algo;
    uint64_t amount, period_us, burst, cost;
    int64_t  now;                 /* -1: TIME */
    uint64_t max_wait_us;         /* gcra: > 0 reserves (action = delay); others: 0 */
};

struct ans {
    int64_t allowed, remaining, retry, reset;
    int64_t pexpire_ms;           /* checked scripts: the PEXPIRE asked for, 0: none */
};

enum via { VIA_FILE, VIA_DECIDE };

/* The parameters of <q> as the C versions take them. */
static struct sl_algo_params params_of(const struct req *q)
{
    struct sl_algo_params p = { .algo = q->algo, .amount = q->amount, .period_us = q->period_us,
                                .burst = q->burst, .max_wait_us = q->max_wait_us };
    return p;
}

/* Standalone: <amount> <period_us> <burst> <cost> <now> [max_wait_us] (gcra
 * only; "no reservations" is sent both ways: absent, and an explicit 0 on
 * odd times). Through decide, per limit: algorithm, amount, period_us,
 * burst, cost, shadow (0), max_wait_us. */
static void append_req(const char *key, enum via v, int checked, const struct req *q)
{
    char num[6][32];
    snprintf(num[0], sizeof(num[0]), "%" PRIu64, q->amount);
    snprintf(num[1], sizeof(num[1]), "%" PRIu64, q->period_us);
    snprintf(num[2], sizeof(num[2]), "%" PRIu64, q->burst);
    snprintf(num[3], sizeof(num[3]), "%" PRIu64, q->cost);
    snprintf(num[4], sizeof(num[4]), "%" PRId64, q->now);
    snprintf(num[5], sizeof(num[5]), "%" PRIu64, q->max_wait_us);
    const char *argv[16];
    int argc = 0;
    argv[argc++] = "EVALSHA";
    if (v == VIA_FILE) {
        argv[argc++] = checked ? sha_algo_chk[q->algo] : sha_algo[q->algo];
        argv[argc++] = "1";
        argv[argc++] = key;
        for (int i = 0; i < 5; i++)
            argv[argc++] = num[i];
        if (q->algo == SL_ALGO_GCRA && (q->max_wait_us > 0 || (q->now & 1)))
            argv[argc++] = num[5];
    } else {
        argv[argc++] = checked ? sha_decide_chk : sha_decide;
        argv[argc++] = "1";
        argv[argc++] = key;
        argv[argc++] = num[4];
        argv[argc++] = "1";
        argv[argc++] = sl_algo_name(q->algo);
        for (int i = 0; i < 4; i++)
            argv[argc++] = num[i];
        argv[argc++] = "0";
        argv[argc++] = num[5];
    }
    assert_int_equal(redisAppendCommandArgv(rc, argc, argv, NULL), REDIS_OK);
}

/* An algorithm's answer from a reply: 4 integers (a script of lua/), or
 * 5 from decide with one limit (its all_allowed must equal allowed); a
 * checked script adds the count of keys without an expiry (must be 0) and
 * the PEXPIRE it asked for. */
static int parse_ans(const redisReply *r, enum via v, int checked, struct ans *a)
{
    size_t off = v == VIA_FILE ? 0 : 1, want = 4 + off + (checked ? 2 : 0);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != want) {
        print_error("unexpected reply: %s\n", r && r->type == REDIS_REPLY_ERROR ? r->str : "?");
        return -1;
    }
    for (size_t i = 0; i < want; i++)
        if (r->element[i]->type != REDIS_REPLY_INTEGER)
            return -1;
    a->allowed = r->element[off]->integer;
    a->remaining = r->element[off + 1]->integer;
    a->retry = r->element[off + 2]->integer;
    a->reset = r->element[off + 3]->integer;
    if (v == VIA_DECIDE && r->element[0]->integer != a->allowed) {
        print_error("decide: all_allowed %lld but allowed %lld\n", r->element[0]->integer,
                    (long long)a->allowed);
        return -1;
    }
    a->pexpire_ms = checked ? r->element[want - 1]->integer : 0;
    if (checked && r->element[want - 2]->integer != 0) {
        print_error("%lld key(s) without an expiry\n", r->element[want - 2]->integer);
        return -1;
    }
    return 0;
}

/* Runs <n> requests on <key> through the checked scripts, pipelined; fills
 * <out>. Returns 0, or -1 with the reason printed. */
static int run_batch(const char *key, enum via v, const struct req *q, int n, struct ans *out)
{
    for (int i = 0; i < n; i++)
        append_req(key, v, 1, &q[i]);
    int rcode = 0;
    for (int i = 0; i < n; i++) {
        redisReply *r = NULL;
        assert_int_equal(redisGetReply(rc, (void **)&r), REDIS_OK);
        if (rcode == 0 && parse_ans(r, v, 1, &out[i]) != 0) {
            print_error("  at request %d\n", i);
            rcode = -1;
        }
        freeReplyObject(r);
    }
    return rcode;
}

static struct ans from_c(const struct sl_algo_result *r)
{
    struct ans a = { r->allowed, (int64_t)r->remaining,
                     r->retry_after_us == UINT64_MAX ? -1 : (int64_t)r->retry_after_us,
                     (int64_t)r->reset_us, 0 };
    return a;
}

static int same(const struct ans *x, const struct ans *y)
{
    return x->allowed == y->allowed && x->remaining == y->remaining && x->retry == y->retry &&
           x->reset == y->reset;
}

/* One request now, outside a transaction. */
static struct ans one(const char *key, enum via v, const struct req *q)
{
    append_req(key, v, 0, q);
    redisReply *r = NULL;
    assert_int_equal(redisGetReply(rc, (void **)&r), REDIS_OK);
    struct ans a;
    assert_int_equal(parse_ans(r, v, 0, &a), 0);
    freeReplyObject(r);
    return a;
}

/* ---- setup ---------------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    if (th_redis_start(&redis_p, NULL) < 0)
        return -1;
    rc = redisConnect("127.0.0.1", redis_p.port);
    if (rc == NULL || rc->err)
        return -1;
    for (int a = 0; a < N_ALGOS; a++) {
        char path[128];
        snprintf(path, sizeof(path), "lua/%s.lua", sl_algo_name((enum sl_algo)a));
        char *text = th_slurp(path);
        if (text == NULL) {
            print_error("cannot read %s (run from the repository root)\n", path);
            return -1;
        }
        int rcode = load2(text, sha_algo[a], sha_algo_chk[a]);
        free(text);
        if (rcode != 0)
            return -1;
    }
    if (load2(sl_lua_scripts[SL_SCRIPT_DECIDE], sha_decide, sha_decide_chk) != 0 ||
        load(sl_lua_scripts[SL_SCRIPT_HEARTBEAT], sha_heartbeat) != 0)
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    if (rc != NULL)
        redisFree(rc);
    th_stop(&redis_p);
    return 0;
}

/* ---- the shared table ------------------------------------------------------ */

static void run_cases(enum via v)
{
    int failures = 0, runs = 0, steps = 0;
    for (size_t ci = 0; ci < SL_N_CASES; ci++) {
        const struct sl_case *c = &sl_cases[ci];
        for (int a = 0; a < N_ALGOS; a++) {
            if (!(c->algos & (1u << a)))
                continue;
            struct req q[SL_CASE_MAX_STEPS];
            struct ans got[SL_CASE_MAX_STEPS];
            int n = 0;
            for (; n < SL_CASE_MAX_STEPS && c->steps[n].now_us != SL_CASE_END_US; n++)
                q[n] = (struct req){ (enum sl_algo)a, c->amount, c->period_us, c->burst,
                                     c->steps[n].cost, (int64_t)c->steps[n].now_us, 0 };
            flushall();
            char key[64];
            snprintf(key, sizeof(key), "sluice:{case%zu:%s}", ci, sl_algo_name((enum sl_algo)a));
            if (run_batch(key, v, q, n, got) != 0) {
                print_error("case '%s' (%s)\n", c->name, sl_algo_name((enum sl_algo)a));
                failures++;
                continue;
            }
            runs++;
            for (int i = 0; i < n; i++) {
                const struct sl_case_step *s = &c->steps[i];
                struct ans want = { s->allowed, (int64_t)s->remaining, s->retry_after_us,
                                    (int64_t)s->reset_us, 0 };
                steps++;
                if (same(&got[i], &want))
                    continue;
                print_error("case '%s' (%s, %s) step %d (now %" PRIu64 ", cost %" PRIu64 "):\n"
                            "  want %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 "\n"
                            "  got  %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 "\n",
                            c->name, sl_algo_name((enum sl_algo)a),
                            v == VIA_FILE ? "file" : "decide", i, s->now_us, s->cost,
                            want.allowed, want.remaining, want.retry, want.reset, got[i].allowed,
                            got[i].remaining, got[i].retry, got[i].reset);
                failures++;
            }
        }
    }
    print_message("%d runs, %d steps\n", runs, steps);
    assert_true(steps >= 200);
    assert_int_equal(failures, 0);
}

static void test_cases_each_script(void **state)
{
    (void)state;
    run_cases(VIA_FILE);
}

static void test_cases_embedded_decide(void **state)
{
    (void)state;
    run_cases(VIA_DECIDE);
}

/* The embedded scripts are exactly the files (the build is current). */
static void test_embedded_is_the_files(void **state)
{
    (void)state;
    size_t len = 0, cap = 1 << 16;
    char *all = calloc(1, cap);
    assert_non_null(all);
    static const char *const order[] = { "token_bucket", "gcra", "sliding_window", "sliding_log",
                                         "fixed_window", "decide" };
    for (size_t i = 0; i < 6; i++) {
        char path[64];
        snprintf(path, sizeof(path), "lua/%s.lua", order[i]);
        char *t = th_slurp(path);
        assert_non_null(t);
        if (i < 5)
            cut_standalone(t);
        size_t n = strlen(t);
        while (len + n + 1 > cap) {
            cap *= 2;
            all = realloc(all, cap);
            assert_non_null(all);
        }
        memcpy(all + len, t, n + 1);
        len += n;
        free(t);
    }
    assert_string_equal(all, sl_lua_scripts[SL_SCRIPT_DECIDE]);
    free(all);
    char *hb = th_slurp("lua/heartbeat.lua");
    assert_non_null(hb);
    assert_string_equal(hb, sl_lua_scripts[SL_SCRIPT_HEARTBEAT]);
    free(hb);
}

/* ---- C and Lua side by side ------------------------------------------------ */

static uint64_t rng = 0x2545f4914f6cdd1dULL;

static uint64_t rnd(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 2685821657736338717ULL;
}

static uint64_t rnd_in(uint64_t lo, uint64_t hi)
{
    return lo + rnd() % (hi - lo + 1);
}

static uint64_t gcd(uint64_t a, uint64_t b)
{
    while (b != 0) {
        uint64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/* A random max_wait for gcra inside cap + max_wait x K <= 2^52: a third
 * of the time 0 (no reservations), else anything from a few us to the
 * bound itself. */
static uint64_t random_max_wait(const struct req *q)
{
    uint64_t g = gcd(q->amount, q->period_us), S = q->period_us / g, K = q->amount / g;
    uint64_t wmax = (SL_ALGO_MAX_UNITS - q->burst * S) / K;
    uint64_t fill = (uint64_t)(((unsigned __int128)q->burst * q->period_us) / q->amount);
    uint64_t w;
    switch (rnd() % 6) {
    case 0: case 1: w = 0; break;
    case 2: w = rnd_in(1, 10); break;
    case 3: w = rnd_in(1, fill < 1000000000 ? fill + 1 : 1000000000); break;
    case 4: w = rnd_in(1, 3600 * S_US); break;
    default: w = rnd() % 2 ? wmax : rnd_in(0, wmax); break;
    }
    return w < wmax ? w : wmax;
}

/* Random parameters for <a>, inside the bounds (big ones included). */
static void random_params(enum sl_algo a, struct req *q)
{
    static const uint64_t periods[] = { 1, 3, 7, 10, 1000, S_US, 7 * S_US, 60 * S_US,
                                        3600 * S_US, DAY, YEAR };
    for (;;) {
        q->algo = a;
        q->period_us = rnd() % 5 == 0 ? rnd_in(1, SL_ALGO_MAX_PERIOD_US)
                                      : periods[rnd() % (sizeof(periods) / sizeof(periods[0]))];
        switch (rnd() % 4) {
        case 0: q->amount = rnd_in(1, 10); break;
        case 1: q->amount = rnd_in(1, 1000); break;
        case 2: q->amount = rnd_in(1, 20000000); break;
        default: q->amount = rnd_in(1, SL_ALGO_MAX_AMOUNT); break;
        }
        if (a == SL_ALGO_SLIDING_LOG)
            q->amount = rnd_in(1, 60);
        q->burst = rnd() % 3 == 0 ? rnd_in(1, SL_ALGO_MAX_AMOUNT) : rnd_in(1, 2000);
        q->max_wait_us = 0;
        struct sl_algo_params p = params_of(q);
        if (sl_algo_check(&p, NULL) != 0)
            continue;
        if (a == SL_ALGO_GCRA) {
            q->max_wait_us = random_max_wait(q);
            p = params_of(q);
            assert_int_equal(sl_algo_check(&p, NULL), 0);
        }
        return;
    }
}

/* Random traffic through C and Lua at once: forward steps of all sizes,
 * same-time bursts, clock steps back, idle years, and now and then a reload
 * with other parameters. gcra runs with a random max_wait (0 included), so
 * reservations, denials past max_wait and reloads that change max_wait
 * (the debt read clamped to the new top) are compared too. */
static void test_c_and_lua_agree(void **state)
{
    (void)state;
    const char *seed = getenv("SLUICE_TEST_SEED"); /* to replay or vary the traffic */
    if (seed != NULL && strtoull(seed, NULL, 0) != 0)
        rng = strtoull(seed, NULL, 0);
    int compared = 0, pexpires = 0, reservations = 0;
    for (int seq = 0; seq < 200; seq++) {
        enum sl_algo a = (enum sl_algo)(seq % N_ALGOS);
        enum via v = seq % 4 == 3 ? VIA_DECIDE : VIA_FILE;
        struct req q[120];
        struct ans want[120], got[120];
        struct sl_algo_state st = { 0 };
        struct req cur = { 0 };
        random_params(a, &cur);
        uint64_t now = SL_CASE_T0 + rnd_in(0, YEAR);
        int n = 60 + (int)(rnd() % 60);
        for (int i = 0; i < n; i++) {
            if (rnd() % 40 == 0)
                random_params(a, &cur); /* a reload */
            uint64_t r = rnd() % 100;
            if (r < 20)
                ; /* same time */
            else if (r < 85)
                now += rnd_in(1, cur.period_us / rnd_in(1, 100) + 1);
            else if (r < 93)
                now -= rnd_in(1, now - SL_CASE_T0 < cur.period_us ? now - SL_CASE_T0 + 1
                                                                  : cur.period_us);
            else if (r < 98)
                now += rnd_in(cur.period_us, 3 * cur.period_us);
            else if (now < SL_CASE_T0 + 20 * YEAR)
                now += rnd_in(YEAR, 10 * YEAR);
            uint64_t capn = a <= SL_ALGO_GCRA ? cur.burst : cur.amount;
            switch (rnd() % 5) {
            case 0: cur.cost = 0; break;
            case 1: cur.cost = 1; break;
            case 2: cur.cost = rnd_in(1, capn < 5 ? capn : 5); break;
            case 3: cur.cost = rnd_in(1, capn / 3 + 1); break;
            default: cur.cost = rnd_in(capn, capn + 1); break;
            }
            if (a == SL_ALGO_SLIDING_LOG && cur.cost > 61)
                cur.cost = 61;
            cur.now = (int64_t)now;
            q[i] = cur;
            struct sl_algo_params p = params_of(&cur);
            struct sl_algo_result res;
            assert_int_equal(sl_algo_take(&st, &p, now, cur.cost, 1, &res), 0);
            want[i] = from_c(&res);
            reservations += res.allowed && res.retry_after_us > 0;
        }
        sl_algo_state_free(&st);
        flushall();
        assert_int_equal(run_batch("sluice:{random:x}", v, q, n, got), 0);
        for (int i = 0; i < n; i++) {
            compared++;
            struct sl_algo_params p = params_of(&q[i]);
            if (got[i].pexpire_ms != 0) {
                /* a write: the PEXPIRE is the C ttl */
                assert_int_equal(got[i].pexpire_ms, sl_algo_ttl_us(&p) / 1000);
                pexpires++;
            }
            if (same(&want[i], &got[i]))
                continue;
            print_error("seq %d (%s) step %d: amount %" PRIu64 " period %" PRIu64
                        " burst %" PRIu64 " max_wait %" PRIu64 " now %" PRId64 " cost %" PRIu64
                        "\n"
                        "  C   %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 "\n"
                        "  Lua %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 "\n",
                        seq, sl_algo_name(a), i, q[i].amount, q[i].period_us, q[i].burst,
                        q[i].max_wait_us, q[i].now, q[i].cost, want[i].allowed,
                        want[i].remaining, want[i].retry,
                        want[i].reset, got[i].allowed, got[i].remaining, got[i].retry,
                        got[i].reset);
            fail();
        }
    }
    print_message("%d answers compared, %d PEXPIREs, %d reservations\n", compared, pexpires,
                  reservations);
    assert_true(pexpires > 1000);
    assert_true(reservations > 100);
}

/* The PEXPIRE the scripts set is sl_algo_ttl_us(), in ms. */
static void test_ttl_is_the_c_ttl(void **state)
{
    (void)state;
    static const struct req ps[] = {
        { SL_ALGO_TOKEN_BUCKET, 10, S_US, 25, 1, -1, 0 },
        { SL_ALGO_TOKEN_BUCKET, 3, S_US, 1, 1, -1, 0 },
        { SL_ALGO_GCRA, 1, DAY, 1, 1, -1, 0 },
        { SL_ALGO_GCRA, 1000000, S_US, 1, 1, -1, 0 },
        { SL_ALGO_GCRA, 10, S_US, 2, 1, -1, 500000 },      /* 200 ms + max_wait 500 ms */
        { SL_ALGO_GCRA, 3, S_US, 1, 1, -1, 667 },          /* 334001 us -> 335 ms */
        { SL_ALGO_GCRA, 1, DAY, 1, 1, -1, 3600 * S_US },   /* a day and an hour */
        { SL_ALGO_FIXED_WINDOW, 10, 60 * S_US, 1, 1, -1, 0 },
        { SL_ALGO_SLIDING_WINDOW, 10, 60 * S_US, 1, 1, -1, 0 },
        { SL_ALGO_SLIDING_WINDOW, 10, 10, 1, 1, -1, 0 },
        { SL_ALGO_SLIDING_LOG, 10, 1500, 1, 1, -1, 0 },
    };
    static const char *const suffix[] = { ":tb", ":gc", ":sw", ":sl", ":fw" };
    for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
        flushall();
        struct ans a = one("sluice:{ttl:x}", VIA_DECIDE, &ps[i]);
        assert_int_equal(a.allowed, 1);
        char key[64];
        snprintf(key, sizeof(key), "sluice:{ttl:x}%s", suffix[ps[i].algo]);
        redisReply *r = redisCommand(rc, "PTTL %s", key);
        assert_non_null(r);
        struct sl_algo_params p = params_of(&ps[i]);
        long long ttl_ms = (long long)(sl_algo_ttl_us(&p) / 1000);
        if (ttl_ms > 50) { /* the short ones may be gone already */
            assert_true(r->integer <= ttl_ms);
            assert_true(r->integer > ttl_ms - 50);
        } else {
            assert_true(r->integer <= ttl_ms);
        }
        freeReplyObject(r);
    }
    /* every take sets the whole PEXPIRE again (not only the first) */
    for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
        struct sl_algo_params p = params_of(&ps[i]);
        long long ttl_ms = (long long)(sl_algo_ttl_us(&p) / 1000);
        if (ttl_ms < 1000)
            continue;
        flushall();
        struct ans a = one("sluice:{ttl:y}", VIA_FILE, &ps[i]);
        assert_int_equal(a.allowed, 1);
        usleep(60 * 1000);
        struct req q = ps[i];
        q.cost = 0; /* a cost of 0 writes nothing */
        one("sluice:{ttl:y}", VIA_FILE, &q);
        char key[64];
        snprintf(key, sizeof(key), "sluice:{ttl:y}%s", suffix[ps[i].algo]);
        redisReply *r = redisCommand(rc, "PTTL %s", key);
        assert_true(r->integer <= ttl_ms - 50);
        freeReplyObject(r);
        a = one("sluice:{ttl:y}", VIA_FILE, &ps[i]);
        r = redisCommand(rc, "PTTL %s", key);
        if (a.allowed)
            assert_true(r->integer > ttl_ms - 50);
        freeReplyObject(r);
    }
}

/* ---- decide: several limits ------------------------------------------------ */

/* One limit of a decide call. */
struct lim {
    const char  *key;
    enum sl_algo algo;
    uint64_t     amount, period_us, burst, cost;
    int          shadow;
    uint64_t     max_wait_us;
};

/* decide with <n> limits (at most 4) at <now>; <out> gets the 1 + 4n integers. */
static void decide_n(int64_t now, const struct lim *l, int n, long long *out)
{
    char num[4][6][32], snow[32], sn[8];
    const char *argv[3 + 4 + 2 + 4 * 7];
    int argc = 0;
    snprintf(snow, sizeof(snow), "%" PRId64, now);
    snprintf(sn, sizeof(sn), "%d", n);
    argv[argc++] = "EVALSHA";
    argv[argc++] = sha_decide;
    argv[argc++] = sn;
    for (int i = 0; i < n; i++)
        argv[argc++] = l[i].key;
    argv[argc++] = snow;
    argv[argc++] = sn;
    for (int i = 0; i < n; i++) {
        snprintf(num[i][0], 32, "%" PRIu64, l[i].amount);
        snprintf(num[i][1], 32, "%" PRIu64, l[i].period_us);
        snprintf(num[i][2], 32, "%" PRIu64, l[i].burst);
        snprintf(num[i][3], 32, "%" PRIu64, l[i].cost);
        snprintf(num[i][4], 32, "%d", l[i].shadow);
        snprintf(num[i][5], 32, "%" PRIu64, l[i].max_wait_us);
        argv[argc++] = sl_algo_name(l[i].algo);
        for (int j = 0; j < 6; j++)
            argv[argc++] = num[i][j];
    }
    redisReply *r = redisCommandArgv(rc, argc, argv, NULL);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR)
        print_error("decide: %s\n", r->str);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 1 + 4 * (size_t)n);
    for (int i = 0; i < 1 + 4 * n; i++)
        out[i] = r->element[i]->integer;
    freeReplyObject(r);
}

static enum sl_algo algo_of(const char *name)
{
    for (int a = 0; a < N_ALGOS; a++)
        if (strcmp(sl_algo_name((enum sl_algo)a), name) == 0)
            return (enum sl_algo)a;
    fail_msg("unknown algorithm %s", name);
    return SL_ALGO_TOKEN_BUCKET;
}

/* decide with two limits of cost 1, no reservations; returns the 9 integers. */
static void decide2(const char *k1, const char *k2, int64_t now, const char *a1, uint64_t amt1,
                    uint64_t per1, uint64_t burst1, int shadow1, const char *a2, uint64_t amt2,
                    uint64_t per2, uint64_t burst2, int shadow2, long long out[9])
{
    const struct lim l[2] = {
        { k1, algo_of(a1), amt1, per1, burst1, 1, shadow1, 0 },
        { k2, algo_of(a2), amt2, per2, burst2, 1, shadow2, 0 },
    };
    decide_n(now, l, 2, out);
}

static char *hgetall(const char *key)
{
    redisReply *r = redisCommand(rc, "HGETALL %s", key);
    assert_non_null(r);
    char *s = calloc(1, 1024);
    assert_non_null(s);
    for (size_t i = 0; i < r->elements; i++) {
        strncat(s, r->element[i]->str, 1023 - strlen(s));
        strncat(s, " ", 1023 - strlen(s));
    }
    freeReplyObject(r);
    return s;
}

/* The second limit rejects: the first takes nothing, whichever order, for
 * every algorithm as the first; a following call shows its state as it
 * was (compared with the C version, which saw only the admitted calls). */
static void test_decide_all_or_nothing(void **state)
{
    (void)state;
    const uint64_t t0 = SL_CASE_T0;
    for (int a = 0; a < N_ALGOS; a++) {
        for (int order = 0; order < 2; order++) {
            flushall();
            const char *name = sl_algo_name((enum sl_algo)a);
            const char *ka = "sluice:{a:u}", *kb = "sluice:{b:u}";
            struct sl_algo_params p = { .algo = (enum sl_algo)a, .amount = 10, .period_us = S_US,
                                        .burst = 10, .max_wait_us = 0 };
            struct sl_algo_state st = { 0 };
            struct sl_algo_result res;
            long long o[9];
            /* call 1: both allow (fixed window of 1 per second) */
            if (order == 0)
                decide2(ka, kb, (int64_t)t0, name, 10, S_US, 10, 0, "fixed_window", 1, S_US, 1, 0, o);
            else
                decide2(kb, ka, (int64_t)t0, "fixed_window", 1, S_US, 1, 0, name, 10, S_US, 10, 0, o);
            assert_int_equal(o[0], 1);
            assert_int_equal(sl_algo_take(&st, &p, t0, 1, 1, &res), 0);
            const long long *mine = order == 0 ? &o[1] : &o[5];
            assert_int_equal(mine[0], 1);
            assert_int_equal(mine[1], (long long)res.remaining);
            char suffixed[64];
            static const char *const suffix[] = { ":tb", ":gc", ":sw", ":sl", ":fw" };
            snprintf(suffixed, sizeof(suffixed), "%s%s", ka, suffix[a]);
            char *before = hgetall(suffixed);
            redisReply *zb = redisCommand(rc, "ZRANGE %s 0 -1 WITHSCORES", suffixed);
            /* call 2, 1 ms later: the fixed window rejects -> nothing taken anywhere */
            if (order == 0)
                decide2(ka, kb, (int64_t)t0 + 1000, name, 10, S_US, 10, 0, "fixed_window", 1, S_US, 1, 0, o);
            else
                decide2(kb, ka, (int64_t)t0 + 1000, "fixed_window", 1, S_US, 1, 0, name, 10, S_US, 10, 0, o);
            assert_int_equal(o[0], 0);
            const long long *other = order == 0 ? &o[5] : &o[1];
            mine = order == 0 ? &o[1] : &o[5];
            assert_int_equal(other[0], 0);
            assert_int_equal(other[2], 999000); /* retry: the window's end */
            assert_int_equal(mine[0], 1);       /* it would have allowed ... */
            assert_int_equal(sl_algo_take(&st, &p, t0 + 1000, 1, 0, &res), 0); /* ... a peek */
            assert_int_equal(mine[1], (long long)res.remaining);
            assert_int_equal(mine[3], (long long)res.reset_us);
            char *after = hgetall(suffixed);
            redisReply *za = redisCommand(rc, "ZRANGE %s 0 -1 WITHSCORES", suffixed);
            assert_string_equal(before, after); /* not written */
            assert_int_equal(zb->elements, za->elements);
            free(before);
            free(after);
            freeReplyObject(zb);
            freeReplyObject(za);
            /* call 3: the first limit alone: as if call 2 never happened */
            struct req q = { (enum sl_algo)a, 10, S_US, 10, 1, (int64_t)t0 + 2000, 0 };
            struct ans got = one(ka, VIA_DECIDE, &q);
            assert_int_equal(sl_algo_take(&st, &p, t0 + 2000, 1, 1, &res), 0);
            struct ans want = from_c(&res);
            assert_true(same(&got, &want));
            assert_int_equal(got.remaining, 8);
            sl_algo_state_free(&st);
            assert_all_keys_expire();
        }
    }
}

/* Shadow limits are decided on their own and never change the answer. */
static void test_decide_shadow(void **state)
{
    (void)state;
    flushall();
    const int64_t t0 = (int64_t)SL_CASE_T0;
    const char *ka = "sluice:{real:u}", *ks = "sluice:{shadow:u}";
    long long o[9];
    /* real: token bucket of 2; shadow: 1 per second */
    decide2(ka, ks, t0, "token_bucket", 1, S_US, 2, 0, "sliding_log", 1, S_US, 1, 1, o);
    assert_int_equal(o[0], 1);
    assert_int_equal(o[1], 1);
    assert_int_equal(o[2], 1); /* real: 1 left */
    assert_int_equal(o[5], 1); /* shadow allowed and took */
    assert_int_equal(o[6], 0);
    /* the shadow rejects: the answer is still yes, and the real limit took */
    decide2(ka, ks, t0, "token_bucket", 1, S_US, 2, 0, "sliding_log", 1, S_US, 1, 1, o);
    assert_int_equal(o[0], 1);
    assert_int_equal(o[1], 1);
    assert_int_equal(o[2], 0);
    assert_int_equal(o[5], 0);
    assert_int_equal(o[7], S_US);
    /* the real one rejects; a shadow that allows still takes */
    const char *ks2 = "sluice:{shadow2:u}";
    decide2(ka, ks2, t0, "token_bucket", 1, S_US, 2, 0, "fixed_window", 100, S_US, 1, 1, o);
    assert_int_equal(o[0], 0);
    assert_int_equal(o[1], 0);
    assert_int_equal(o[3], S_US); /* 1 token per second */
    assert_int_equal(o[5], 1);
    assert_int_equal(o[6], 99);
    decide2(ka, ks2, t0, "token_bucket", 1, S_US, 2, 0, "fixed_window", 100, S_US, 1, 1, o);
    assert_int_equal(o[6], 98);
    /* a shadow alone */
    redisReply *r = redisCommand(rc, "EVALSHA %s 1 %s %lld 1 gcra 1 1000000 1 1 1 0", sha_decide,
                                 "sluice:{s3:u}", (long long)t0);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->element[0]->integer, 1);
    freeReplyObject(r);
    r = redisCommand(rc, "EVALSHA %s 1 %s %lld 1 gcra 1 1000000 1 1 1 0", sha_decide,
                     "sluice:{s3:u}", (long long)t0);
    assert_int_equal(r->element[0]->integer, 1); /* shadow denies: still allowed */
    assert_int_equal(r->element[1]->integer, 0);
    freeReplyObject(r);
    /* no limits at all: allowed */
    r = redisCommand(rc, "EVALSHA %s 0 -1 0", sha_decide);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 1);
    assert_int_equal(r->element[0]->integer, 1);
    freeReplyObject(r);
    assert_all_keys_expire();
}

/* now = -1: the store's clock. Every algorithm, through decide and alone;
 * every key expires. */
static void test_time_mode(void **state)
{
    (void)state;
    flushall();
    for (int a = 0; a < N_ALGOS; a++) {
        for (int v = 0; v < 2; v++) {
            char key[64];
            snprintf(key, sizeof(key), "sluice:{time%d:%d}", a, v);
            /* 3 per hour: the test runs far faster than anything refills,
             * and a fixed window boundary in between is unlikely (1 in 1e6) */
            struct req q = { (enum sl_algo)a, 3, 3600 * S_US, 3, 1, -1, 0 };
            for (int i = 0; i < 3; i++) {
                struct ans got = one(key, (enum via)v, &q);
                assert_int_equal(got.allowed, 1);
                assert_int_equal(got.remaining, 2 - i);
                assert_true(got.reset > 0 && got.reset <= (int64_t)(7200 * S_US));
                assert_all_keys_expire();
            }
            struct ans got = one(key, (enum via)v, &q);
            assert_int_equal(got.allowed, 0);
            assert_true(got.retry > 0 && got.retry <= (int64_t)(7200 * S_US));
            q.cost = 4;
            got = one(key, (enum via)v, &q);
            assert_int_equal(got.allowed, 0);
            assert_int_equal(got.retry, -1);
            assert_all_keys_expire();
        }
    }
    /* a fast rate: TIME advances between calls and refills */
    struct req q = { SL_ALGO_TOKEN_BUCKET, 1000, 1000, 1, 1, -1, 0 }; /* 1 per us */
    struct ans x = one("sluice:{fast:u}", VIA_DECIDE, &q);
    assert_int_equal(x.allowed, 1);
    usleep(2000);
    x = one("sluice:{fast:u}", VIA_DECIDE, &q);
    assert_int_equal(x.allowed, 1);
}

/* <r> is an error reply from a sluice script, saying <text> when not NULL
 * (so a test reaches the check it means to, not an earlier one). */
static void expect_error_text(const char *what, redisReply *r, const char *text)
{
    assert_non_null(r);
    if (r->type != REDIS_REPLY_ERROR)
        print_error("%s: no error\n", what);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(r->str, "sluice"));
    if (text != NULL && strstr(r->str, text) == NULL)
        print_error("%s: '%s' does not say '%s'\n", what, r->str, text);
    if (text != NULL)
        assert_non_null(strstr(r->str, text));
    freeReplyObject(r);
}

static void expect_error(const char *what, redisReply *r)
{
    expect_error_text(what, r, NULL);
}

static void test_errors(void **state)
{
    (void)state;
    flushall();
    expect_error_text("unknown algorithm",
                      redisCommand(rc, "EVALSHA %s 1 k{x} 5 1 leaky 1 1000000 1 1 0 0", sha_decide),
                      "unknown algorithm leaky");
    /* 7 values per limit: the old 6 (no max_wait) and 8 are refused */
    expect_error_text("6 values per limit",
                      redisCommand(rc, "EVALSHA %s 1 k{x} 5 1 gcra 1 1000000 1 1 0", sha_decide),
                      "2 + 7N arguments");
    expect_error_text("8 values per limit",
                      redisCommand(rc, "EVALSHA %s 1 k{x} 5 1 gcra 1 1000000 1 1 0 0 0", sha_decide),
                      "2 + 7N arguments");
    expect_error_text("13 values for 2 limits",
                      redisCommand(rc, "EVALSHA %s 2 k{x} k{y} 5 2 gcra 1 1000000 1 1 0 0 "
                                       "gcra 1 1000000 1 1 0", sha_decide),
                      "2 + 7N arguments");
    expect_error_text("key count",
                      redisCommand(rc, "EVALSHA %s 0 5 1 gcra 1 1000000 1 1 0 0", sha_decide),
                      "2 + 7N arguments");
    /* burst x period / gcd over 2^52: 52125 at 1/d */
    expect_error("burst bound",
                 redisCommand(rc, "EVALSHA %s 1 k{x} 5 1 token_bucket 1 86400000000 52125 1 0 0",
                              sha_decide));
    /* cap + max_wait x K over 2^52: at 1/d with burst 52124, 2^52 - cap =
     * 86027370496 units = us (K = 1); one more is refused, alone and in decide */
    expect_error_text("max_wait bound",
                      redisCommand(rc, "EVALSHA %s 1 k{x} 1 86400000000 52124 1 5 86027370497",
                                   sha_algo[SL_ALGO_GCRA]),
                      "max_wait");
    expect_error_text("max_wait bound in decide",
                      redisCommand(rc, "EVALSHA %s 1 k{x} 5 1 gcra 1 86400000000 52124 1 0 "
                                       "86027370497", sha_decide),
                      "max_wait");
    expect_error_text("negative max_wait",
                      redisCommand(rc, "EVALSHA %s 1 k{x} 10 1000000 2 1 5 -1",
                                   sha_algo[SL_ALGO_GCRA]),
                      "out of range");
    expect_error_text("negative max_wait in decide",
                      redisCommand(rc, "EVALSHA %s 1 k{x} 5 1 gcra 10 1000000 2 1 0 -1", sha_decide),
                      "out of range");
    expect_error_text("max_wait not a number",
                      redisCommand(rc, "EVALSHA %s 1 k{x} 10 1000000 2 1 5 soon",
                                   sha_algo[SL_ALGO_GCRA]),
                      "not a number");
    expect_error_text("max_wait not a number in decide",
                      redisCommand(rc, "EVALSHA %s 1 k{x} 5 1 gcra 10 1000000 2 1 0 soon", sha_decide),
                      "not a number");
    /* exactly at the bound: fine (cost 0 writes nothing) */
    redisReply *ok = redisCommand(rc, "EVALSHA %s 1 k{x} 1 86400000000 52124 0 5 86027370496",
                                  sha_algo[SL_ALGO_GCRA]);
    assert_int_equal(ok->type, REDIS_REPLY_ARRAY);
    freeReplyObject(ok);
    expect_error("burst bound gcra",
                 redisCommand(rc, "EVALSHA %s 1 k{x} 1 86400000000 52125 1 5",
                              sha_algo[SL_ALGO_GCRA]));
    expect_error("amount 0",
                 redisCommand(rc, "EVALSHA %s 1 k{x} 0 1000000 1 1 5", sha_algo[SL_ALGO_FIXED_WINDOW]));
    expect_error("period over a year",
                 redisCommand(rc, "EVALSHA %s 1 k{x} 1 31536000000001 1 1 5",
                              sha_algo[SL_ALGO_SLIDING_WINDOW]));
    expect_error("sliding log too big",
                 redisCommand(rc, "EVALSHA %s 1 k{x} 100001 1000000 1 1 5",
                              sha_algo[SL_ALGO_SLIDING_LOG]));
    expect_error("not a number",
                 redisCommand(rc, "EVALSHA %s 1 k{x} ten 1000000 1 1 5",
                              sha_algo[SL_ALGO_TOKEN_BUCKET]));
    /* the same bound in C */
    struct sl_algo_params p = { .algo = SL_ALGO_TOKEN_BUCKET, .amount = 1, .period_us = DAY,
                                .burst = 52125, .max_wait_us = 0 };
    assert_int_equal(sl_algo_check(&p, NULL), SL_ECONF);
    p.burst = 52124;
    assert_int_equal(sl_algo_check(&p, NULL), 0);
    redisReply *r = redisCommand(rc, "EVALSHA %s 1 k{x} 1 86400000000 52124 1 5",
                                 sha_algo[SL_ALGO_TOKEN_BUCKET]);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    redisReply *k = redisCommand(rc, "DBSIZE");
    assert_int_equal(k->integer, 1); /* the errors wrote nothing */
    freeReplyObject(k);
}

/* A sliding log request of many events (ZADD in batches). */
static void test_sliding_log_many_events(void **state)
{
    (void)state;
    flushall();
    struct req q = { SL_ALGO_SLIDING_LOG, 100000, 60 * S_US, 1, 25000, (int64_t)SL_CASE_T0, 0 };
    struct ans a = one("sluice:{log:u}", VIA_FILE, &q);
    assert_int_equal(a.allowed, 1);
    assert_int_equal(a.remaining, 75000);
    q.cost = 75000;
    q.now += 1;
    a = one("sluice:{log:u}", VIA_DECIDE, &q);
    assert_int_equal(a.allowed, 1);
    assert_int_equal(a.remaining, 0);
    redisReply *r = redisCommand(rc, "ZCARD sluice:{log:u}:sl");
    assert_int_equal(r->integer, 100000);
    freeReplyObject(r);
    q.cost = 1;
    a = one("sluice:{log:u}", VIA_FILE, &q);
    assert_int_equal(a.allowed, 0);
    assert_int_equal(a.retry, (int64_t)(60 * S_US) - 1);
    assert_all_keys_expire();
}

/* ---- reservations (gcra, max_wait_us > 0) ------------------------------------ */

/* The worked cases of reserve_cases.h through lua/gcra.lua with ARGV[6], or
 * through the embedded decide (7th value), as checked scripts: each answer
 * must be the table's and the C version's. Each write's PEXPIRE must be the
 * C ttl and cover the reservation just made (ttl >= reset = TAT - now). */
static void run_rcases(enum via v)
{
    int failures = 0, steps = 0, covered = 0;
    for (size_t ci = 0; ci < SL_N_RCASES; ci++) {
        const struct sl_rcase *c = &sl_rcases[ci];
        struct req q[SL_RCASE_MAX_STEPS];
        struct ans got[SL_RCASE_MAX_STEPS], cv[SL_RCASE_MAX_STEPS];
        struct sl_algo_state st = { 0 };
        int n = 0;
        for (; n < SL_RCASE_MAX_STEPS && c->steps[n].now_us != SL_CASE_END_US; n++) {
            q[n] = (struct req){ SL_ALGO_GCRA, c->amount, c->period_us, c->burst,
                                 c->steps[n].cost, (int64_t)c->steps[n].now_us, c->max_wait_us };
            struct sl_algo_params p = params_of(&q[n]);
            struct sl_algo_result res;
            assert_int_equal(sl_algo_take(&st, &p, c->steps[n].now_us, c->steps[n].cost, 1, &res), 0);
            cv[n] = from_c(&res);
        }
        sl_algo_state_free(&st);
        flushall();
        char key[64];
        snprintf(key, sizeof(key), "sluice:{rcase%zu:u}", ci);
        if (run_batch(key, v, q, n, got) != 0) {
            print_error("case '%s'\n", c->name);
            failures++;
            continue;
        }
        struct sl_algo_params p = params_of(&q[0]);
        int64_t ttl_ms = (int64_t)(sl_algo_ttl_us(&p) / 1000);
        for (int i = 0; i < n; i++) {
            const struct sl_case_step *s = &c->steps[i];
            struct ans want = { s->allowed, (int64_t)s->remaining, s->retry_after_us,
                                (int64_t)s->reset_us, 0 };
            steps++;
            if (got[i].pexpire_ms != 0) {
                assert_int_equal(got[i].pexpire_ms, ttl_ms);
                assert_true(got[i].pexpire_ms * 1000 >= got[i].reset);
                covered++;
            }
            if (same(&got[i], &want) && same(&got[i], &cv[i]))
                continue;
            print_error("case '%s' (%s) step %d (now T0%+" PRId64 ", cost %" PRIu64 "):\n"
                        "  want %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 "\n"
                        "  C    %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 "\n"
                        "  Lua  %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 "\n",
                        c->name, v == VIA_FILE ? "gcra.lua" : "decide", i,
                        (int64_t)(s->now_us - SL_CASE_T0), s->cost, want.allowed, want.remaining,
                        want.retry, want.reset, cv[i].allowed, cv[i].remaining, cv[i].retry,
                        cv[i].reset, got[i].allowed, got[i].remaining, got[i].retry,
                        got[i].reset);
            failures++;
        }
    }
    print_message("%zu cases, %d steps, %d writes with their PEXPIRE\n", SL_N_RCASES, steps,
                  covered);
    assert_true(steps >= 50);
    assert_true(covered >= 30);
    assert_int_equal(failures, 0);
}

static void test_reserve_cases_gcra_script(void **state)
{
    (void)state;
    run_rcases(VIA_FILE);
}

static void test_reserve_cases_embedded_decide(void **state)
{
    (void)state;
    run_rcases(VIA_DECIDE);
}

/* <o> from <off> (1 + 4 x limit index) is the C answer <res>. */
static void assert_answer(const long long *o, int off, const struct sl_algo_result *res)
{
    struct ans got = { o[off], o[off + 1], o[off + 2], o[off + 3], 0 };
    struct ans want = from_c(res);
    if (!same(&got, &want))
        print_error("limit at %d: Lua %lld %lld %lld %lld, C %" PRId64 " %" PRId64 " %" PRId64
                    " %" PRId64 "\n", off, o[off], o[off + 1], o[off + 2], o[off + 3],
                    want.allowed, want.remaining, want.retry, want.reset);
    assert_true(same(&got, &want));
}

/* decide's all or nothing with a reserving limit, in both orders:
 * - beside a limit that rejects, the reservation is not made (its hash is
 *   unchanged; alone afterwards it answers as if the call never happened);
 * - a reservation past max_wait is a denial of the whole request: a limit
 *   that would have allowed takes nothing (its key is never written);
 * - two reserving limits both reserve, each with its own wait;
 * - a window given a max_wait ignores it.
 * The C version, which sees only the admitted calls, gives every answer. */
static void test_decide_reserve_all_or_nothing(void **state)
{
    (void)state;
    const int64_t t0 = (int64_t)SL_CASE_T0;
    for (int order = 0; order < 2; order++) {
        flushall();
        /* r: gcra 10/s burst 2, max_wait 500 ms; w: fixed window of 3 per second */
        const struct lim r = { "sluice:{resv:u}", SL_ALGO_GCRA, 10, S_US, 2, 1, 0, 500000 };
        const struct lim w = { "sluice:{win:u}", SL_ALGO_FIXED_WINDOW, 3, S_US, 3, 1, 0, 0 };
        const struct lim l[2] = { order == 0 ? r : w, order == 0 ? w : r };
        const int ir = order == 0 ? 1 : 5, iw = order == 0 ? 5 : 1;
        struct sl_algo_params rp = { .algo = SL_ALGO_GCRA, .amount = 10, .period_us = S_US,
                                     .burst = 2, .max_wait_us = 500000 };
        struct sl_algo_state st = { 0 };
        struct sl_algo_result res;
        long long o[9];

        /* calls 1-3 at t0: both allow; the 3rd is a reservation of 100 ms */
        for (int k = 0; k < 3; k++) {
            decide_n(t0, l, 2, o);
            assert_int_equal(o[0], 1);
            assert_int_equal(o[iw], 1);
            assert_int_equal(sl_algo_take(&st, &rp, (uint64_t)t0, 1, 1, &res), 0);
            assert_answer(o, ir, &res);
        }
        assert_int_equal(o[ir + 2], 100000);

        /* call 4, 1 ms later: r would reserve (wait 199 ms), the window is
         * full: denied, r takes nothing */
        char *before = hgetall("sluice:{resv:u}:gc");
        decide_n(t0 + 1000, l, 2, o);
        assert_int_equal(o[0], 0);
        assert_int_equal(o[iw], 0);
        assert_int_equal(o[iw + 2], 999000);
        assert_int_equal(o[ir], 1);
        assert_int_equal(o[ir + 2], 199000);
        assert_int_equal(sl_algo_take(&st, &rp, (uint64_t)t0 + 1000, 1, 0, &res), 0); /* a peek */
        assert_answer(o, ir, &res);
        char *after = hgetall("sluice:{resv:u}:gc");
        assert_string_equal(before, after);
        free(before);
        free(after);

        /* r alone: as if call 4 never happened (wait 198 ms at +2 ms) */
        struct req q = { SL_ALGO_GCRA, 10, S_US, 2, 1, t0 + 2000, 500000 };
        struct ans got = one(r.key, VIA_DECIDE, &q);
        assert_int_equal(sl_algo_take(&st, &rp, (uint64_t)t0 + 2000, 1, 1, &res), 0);
        struct ans want = from_c(&res);
        assert_true(same(&got, &want));
        assert_int_equal(got.retry, 198000);

        /* fill r's queue up to max_wait, alone */
        int queued = 0;
        for (;;) {
            assert_int_equal(sl_algo_take(&st, &rp, (uint64_t)t0 + 2000, 1, 0, &res), 0);
            if (!res.allowed)
                break;
            got = one(r.key, VIA_FILE, &q);
            assert_int_equal(sl_algo_take(&st, &rp, (uint64_t)t0 + 2000, 1, 1, &res), 0);
            want = from_c(&res);
            assert_true(same(&got, &want));
            queued++;
        }
        assert_int_equal(queued, 3); /* waits 298, 398, 498 ms; the next would be 598 ms */

        /* a reservation past max_wait: the whole request is denied, a fresh
         * token bucket beside it is never written */
        const struct lim t = { "sluice:{fresh:u}", SL_ALGO_TOKEN_BUCKET, 5, S_US, 5, 1, 0, 0 };
        const struct lim l2[2] = { order == 0 ? r : t, order == 0 ? t : r };
        const int it = order == 0 ? 5 : 1;
        before = hgetall("sluice:{resv:u}:gc");
        decide_n(t0 + 2000, l2, 2, o);
        assert_int_equal(o[0], 0);
        assert_int_equal(o[ir], 0);
        assert_int_equal(o[ir + 2], 98000); /* wait 598 ms: 98 ms too soon */
        assert_int_equal(sl_algo_take(&st, &rp, (uint64_t)t0 + 2000, 1, 0, &res), 0);
        assert_answer(o, ir, &res);
        struct sl_algo_params tp = { .algo = SL_ALGO_TOKEN_BUCKET, .amount = 5, .period_us = S_US,
                                     .burst = 5, .max_wait_us = 0 };
        struct sl_algo_state tst = { 0 };
        assert_int_equal(sl_algo_take(&tst, &tp, (uint64_t)t0 + 2000, 1, 0, &res), 0);
        assert_int_equal(o[it], 1); /* it would have allowed ... */
        assert_answer(o, it, &res);
        redisReply *e = redisCommand(rc, "EXISTS sluice:{fresh:u}:tb");
        assert_int_equal(e->integer, 0); /* ... and took nothing */
        freeReplyObject(e);
        after = hgetall("sluice:{resv:u}:gc");
        assert_string_equal(before, after);
        free(before);
        free(after);
        sl_algo_state_free(&st);
        sl_algo_state_free(&tst);
        assert_all_keys_expire();
    }

    /* two reserving limits: both reserve, each says its own wait */
    flushall();
    const struct lim a = { "sluice:{ra:u}", SL_ALGO_GCRA, 10, S_US, 1, 1, 0, S_US };
    const struct lim b = { "sluice:{rb:u}", SL_ALGO_GCRA, 4, S_US, 1, 1, 0, S_US };
    const struct lim ab[2] = { a, b };
    struct sl_algo_params ap = { .algo = SL_ALGO_GCRA, .amount = 10, .period_us = S_US,
                                 .burst = 1, .max_wait_us = S_US };
    struct sl_algo_params bp = ap;
    bp.amount = 4;
    struct sl_algo_state sa = { 0 }, sb = { 0 };
    struct sl_algo_result ra, rb;
    long long o[9];
    for (int k = 0; k < 5; k++) {
        decide_n(t0, ab, 2, o);
        assert_int_equal(sl_algo_take(&sa, &ap, (uint64_t)t0, 1, 0, &ra), 0);
        assert_int_equal(sl_algo_take(&sb, &bp, (uint64_t)t0, 1, 0, &rb), 0);
        assert_answer(o, 1, &ra);
        assert_answer(o, 5, &rb);
        assert_int_equal(o[0], ra.allowed && rb.allowed);
        if (o[0] == 1) {
            assert_int_equal(sl_algo_take(&sa, &ap, (uint64_t)t0, 1, 1, &ra), 0);
            assert_int_equal(sl_algo_take(&sb, &bp, (uint64_t)t0, 1, 1, &rb), 0);
        }
    }
    /* a (S = 100000, K = 1): waits 0 ... 400 ms; b (S = 250000, K = 1): 0,
     * 250, 500, 750 ms and 1 s, exactly max_wait */
    assert_int_equal(o[0], 1);
    assert_int_equal(o[3], 400000);
    assert_int_equal(o[7], 1000000);
    decide_n(t0, ab, 2, o);
    assert_int_equal(o[0], 0); /* b would wait 1.25 s */
    assert_int_equal(o[1], 1);
    assert_int_equal(o[3], 500000);
    assert_int_equal(o[5], 0);
    assert_int_equal(o[7], 250000); /* 1.25 s - max_wait 1 s */
    char *ha = hgetall("sluice:{ra:u}:gc");
    decide_n(t0, ab, 2, o); /* a took nothing: the same answer again */
    assert_int_equal(o[3], 500000);
    char *ha2 = hgetall("sluice:{ra:u}:gc");
    assert_string_equal(ha, ha2);
    free(ha);
    free(ha2);
    sl_algo_state_free(&sa);
    sl_algo_state_free(&sb);

    /* windows ignore max_wait: the answers of max_wait 0 */
    for (int alg = SL_ALGO_SLIDING_WINDOW; alg <= SL_ALGO_FIXED_WINDOW; alg++) {
        struct lim wl = { "sluice:{wl:u}", (enum sl_algo)alg, 2, S_US, 2, 1, 0, 777777 };
        struct sl_algo_params wp = { .algo = (enum sl_algo)alg, .amount = 2, .period_us = S_US,
                                     .burst = 2, .max_wait_us = 0 };
        struct sl_algo_state ws = { 0 };
        struct sl_algo_result wr;
        for (int k = 0; k < 3; k++) {
            long long o1[5];
            decide_n(t0 + k, &wl, 1, o1);
            assert_int_equal(sl_algo_take(&ws, &wp, (uint64_t)t0 + k, 1, 1, &wr), 0);
            assert_answer(o1, 1, &wr);
        }
        assert_int_equal(wr.allowed, 0); /* the 3rd: denied, not reserved */
        sl_algo_state_free(&ws);
    }
    assert_all_keys_expire();
}

/* The key outlives its reservations: after every take, the key expires
 * (the store's TIME + PTTL) no earlier than its TAT, to Redis's
 * millisecond. TIME mode, so the script's now is that same clock. The 7th
 * take of the first limit reserves the whole max_wait: TAT - now is then
 * the whole ttl (a ttl without max_wait would be 500 ms short). */
static void test_reserve_pttl(void **state)
{
    (void)state;
    static const struct req ps[] = {
        { SL_ALGO_GCRA, 10, S_US, 2, 1, -1, 500000 }, /* ttl 700 ms */
        { SL_ALGO_GCRA, 3, S_US, 2, 1, -1, 333334 },  /* ttl 1001 ms */
        { SL_ALGO_GCRA, 1, 60 * S_US, 1, 1, -1, 3600 * S_US }, /* ttl 1 h 1 min */
    };
    static const char probe[] =
        "local t = redis.call('TIME')\n"
        "local h = redis.call('HMGET', KEYS[1], 't', 'f')\n"
        "return {t[1], t[2], redis.call('PTTL', KEYS[1]), h[1] or '-1', h[2] or '-1'}\n";
    int64_t longest = 0;
    for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
        flushall();
        for (int k = 0; k < 9; k++) {
            struct ans a = one("sluice:{pttl:u}", k % 2 ? VIA_DECIDE : VIA_FILE, &ps[i]);
            if (!a.allowed)
                continue;
            redisReply *r = redisCommand(rc, "EVAL %s 1 %s", probe, "sluice:{pttl:u}:gc");
            assert_non_null(r);
            assert_int_equal(r->type, REDIS_REPLY_ARRAY);
            assert_int_equal(r->elements, 5);
            int64_t now_us = strtoll(r->element[0]->str, NULL, 10) * 1000000 +
                             strtoll(r->element[1]->str, NULL, 10);
            int64_t pttl = r->element[2]->integer;
            int64_t tat = strtoll(r->element[3]->str, NULL, 10) +
                          (strtoll(r->element[4]->str, NULL, 10) > 0); /* the fraction, up */
            freeReplyObject(r);
            assert_true(pttl > 0);
            int64_t expiry_us = (now_us / 1000 + pttl) * 1000;
            if (expiry_us + 2000 < tat)
                print_error("limit %zu take %d: expires at %" PRId64 ", TAT %" PRId64 "\n", i, k,
                            expiry_us, tat);
            assert_true(expiry_us + 2000 >= tat); /* PEXPIRE counts in ms */
            if (tat - now_us > longest)
                longest = tat - now_us;
        }
    }
    assert_true(longest > 600000); /* the check did meet a long reservation */
}

/* ---- heartbeat ---------------------------------------------------------- */

static long long heartbeat(const char *id, int ttl_ms, int leave)
{
    redisReply *r = redisCommand(rc, "EVALSHA %s 1 sluice:instances %s %d %d", sha_heartbeat, id,
                                 ttl_ms, leave);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR)
        print_error("heartbeat: %s\n", r->str);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    long long n = r->integer;
    freeReplyObject(r);
    return n;
}

static void test_heartbeat(void **state)
{
    (void)state;
    flushall();
    assert_int_equal(heartbeat("a", 5000, 0), 1);
    assert_int_equal(heartbeat("b", 5000, 0), 2);
    assert_int_equal(heartbeat("a", 5000, 0), 2); /* a refresh */
    redisReply *r = redisCommand(rc, "PTTL sluice:instances");
    assert_true(r->integer > 9000 && r->integer <= 10000); /* 2 x ttl */
    freeReplyObject(r);
    assert_int_equal(heartbeat("b", 5000, 1), 1); /* b leaves */
    assert_int_equal(heartbeat("c", 30, 0), 2);
    r = redisCommand(rc, "PTTL sluice:instances");
    assert_true(r->integer > 9000); /* c's short ttl did not shorten the set's */
    freeReplyObject(r);
    usleep(80 * 1000); /* c's entry expires */
    assert_int_equal(heartbeat("a", 5000, 0), 1);
    r = redisCommand(rc, "ZRANGE sluice:instances 0 -1");
    assert_int_equal(r->elements, 1);
    assert_string_equal(r->element[0]->str, "a");
    freeReplyObject(r);
    assert_int_equal(heartbeat("a", 5000, 1), 0); /* the last one leaves */
    r = redisCommand(rc, "EXISTS sluice:instances");
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    r = redisCommand(rc, "EVALSHA %s 1 sluice:instances a 0 0", sha_heartbeat);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    assert_all_keys_expire();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedded_is_the_files),
        cmocka_unit_test(test_cases_each_script),
        cmocka_unit_test(test_cases_embedded_decide),
        cmocka_unit_test(test_c_and_lua_agree),
        cmocka_unit_test(test_ttl_is_the_c_ttl),
        cmocka_unit_test(test_decide_all_or_nothing),
        cmocka_unit_test(test_decide_shadow),
        cmocka_unit_test(test_reserve_cases_gcra_script),
        cmocka_unit_test(test_reserve_cases_embedded_decide),
        cmocka_unit_test(test_decide_reserve_all_or_nothing),
        cmocka_unit_test(test_reserve_pttl),
        cmocka_unit_test(test_time_mode),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_sliding_log_many_events),
        cmocka_unit_test(test_heartbeat),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

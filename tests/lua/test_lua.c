/* sluice Lua tests — the scripts in lua/ on a real redis-server.
 *
 * The shared table (tests/unit/limit/cases.h) runs through every algorithm
 * script on its own (loaded from lua/ at run time) and through the embedded
 * decide script (sl_lua_scripts[SL_SCRIPT_DECIDE], SCRIPT LOAD + EVALSHA),
 * with explicit times. Random traffic, including clock steps back and
 * reloads, runs through the scripts and through src/limit/algo.c side by
 * side: the answers must be identical. Then decide's all-or-nothing and
 * shadow rules, TIME mode, errors, the heartbeat, and the TTLs.
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

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (cap - len < 4096) {
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, cap + 1);
            if (nb == NULL) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        if (n == 0)
            break;
        len += n;
    }
    fclose(f);
    buf[len] = '\0';
    return buf;
}

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
};

struct ans {
    int64_t allowed, remaining, retry, reset;
    int64_t pexpire_ms;           /* checked scripts: the PEXPIRE asked for, 0: none */
};

enum via { VIA_FILE, VIA_DECIDE };

static void append_req(const char *key, enum via v, int checked, const struct req *q)
{
    char num[6][32];
    snprintf(num[0], sizeof(num[0]), "%" PRIu64, q->amount);
    snprintf(num[1], sizeof(num[1]), "%" PRIu64, q->period_us);
    snprintf(num[2], sizeof(num[2]), "%" PRIu64, q->burst);
    snprintf(num[3], sizeof(num[3]), "%" PRIu64, q->cost);
    snprintf(num[4], sizeof(num[4]), "%" PRId64, q->now);
    const char *argv[12];
    int argc = 0;
    argv[argc++] = "EVALSHA";
    if (v == VIA_FILE) {
        argv[argc++] = checked ? sha_algo_chk[q->algo] : sha_algo[q->algo];
        argv[argc++] = "1";
        argv[argc++] = key;
        for (int i = 0; i < 5; i++)
            argv[argc++] = num[i];
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
        char *text = slurp(path);
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
                                     c->steps[n].cost, (int64_t)c->steps[n].now_us };
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
        char *t = slurp(path);
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
    char *hb = slurp("lua/heartbeat.lua");
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
        struct sl_algo_params p = { a, q->amount, q->period_us, q->burst };
        if (sl_algo_check(&p, NULL) == 0)
            return;
    }
}

/* Random traffic through C and Lua at once: forward steps of all sizes,
 * same-time bursts, clock steps back, idle years, and now and then a reload
 * with other parameters. */
static void test_c_and_lua_agree(void **state)
{
    (void)state;
    const char *seed = getenv("SLUICE_TEST_SEED"); /* to replay or vary the traffic */
    if (seed != NULL && strtoull(seed, NULL, 0) != 0)
        rng = strtoull(seed, NULL, 0);
    int compared = 0, pexpires = 0;
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
            struct sl_algo_params p = { a, cur.amount, cur.period_us, cur.burst };
            struct sl_algo_result res;
            assert_int_equal(sl_algo_take(&st, &p, now, cur.cost, 1, &res), 0);
            want[i] = from_c(&res);
        }
        sl_algo_state_free(&st);
        flushall();
        assert_int_equal(run_batch("sluice:{random:x}", v, q, n, got), 0);
        for (int i = 0; i < n; i++) {
            compared++;
            struct sl_algo_params p = { a, q[i].amount, q[i].period_us, q[i].burst };
            if (got[i].pexpire_ms != 0) {
                /* a write: the PEXPIRE is the C ttl */
                assert_int_equal(got[i].pexpire_ms, sl_algo_ttl_us(&p) / 1000);
                pexpires++;
            }
            if (same(&want[i], &got[i]))
                continue;
            print_error("seq %d (%s) step %d: amount %" PRIu64 " period %" PRIu64
                        " burst %" PRIu64 " now %" PRId64 " cost %" PRIu64 "\n"
                        "  C   %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 "\n"
                        "  Lua %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 "\n",
                        seq, sl_algo_name(a), i, q[i].amount, q[i].period_us, q[i].burst,
                        q[i].now, q[i].cost, want[i].allowed, want[i].remaining, want[i].retry,
                        want[i].reset, got[i].allowed, got[i].remaining, got[i].retry,
                        got[i].reset);
            fail();
        }
    }
    print_message("%d answers compared, %d PEXPIREs\n", compared, pexpires);
    assert_true(pexpires > 1000);
}

/* The PEXPIRE the scripts set is sl_algo_ttl_us(), in ms. */
static void test_ttl_is_the_c_ttl(void **state)
{
    (void)state;
    static const struct req ps[] = {
        { SL_ALGO_TOKEN_BUCKET, 10, S_US, 25, 1, -1 },
        { SL_ALGO_TOKEN_BUCKET, 3, S_US, 1, 1, -1 },
        { SL_ALGO_GCRA, 1, DAY, 1, 1, -1 },
        { SL_ALGO_GCRA, 1000000, S_US, 1, 1, -1 },
        { SL_ALGO_FIXED_WINDOW, 10, 60 * S_US, 1, 1, -1 },
        { SL_ALGO_SLIDING_WINDOW, 10, 60 * S_US, 1, 1, -1 },
        { SL_ALGO_SLIDING_WINDOW, 10, 10, 1, 1, -1 },
        { SL_ALGO_SLIDING_LOG, 10, 1500, 1, 1, -1 },
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
        struct sl_algo_params p = { ps[i].algo, ps[i].amount, ps[i].period_us, ps[i].burst };
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
        struct sl_algo_params p = { ps[i].algo, ps[i].amount, ps[i].period_us, ps[i].burst };
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

/* decide with two limits; returns the 9 integers. */
static void decide2(const char *k1, const char *k2, int64_t now, const char *a1, uint64_t amt1,
                    uint64_t per1, uint64_t burst1, int shadow1, const char *a2, uint64_t amt2,
                    uint64_t per2, uint64_t burst2, int shadow2, long long out[9])
{
    redisReply *r = redisCommand(rc,
        "EVALSHA %s 2 %s %s %lld 2 %s %llu %llu %llu 1 %d %s %llu %llu %llu 1 %d", sha_decide,
        k1, k2, (long long)now, a1, (unsigned long long)amt1, (unsigned long long)per1,
        (unsigned long long)burst1, shadow1, a2, (unsigned long long)amt2,
        (unsigned long long)per2, (unsigned long long)burst2, shadow2);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR)
        print_error("decide: %s\n", r->str);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 9);
    for (int i = 0; i < 9; i++)
        out[i] = r->element[i]->integer;
    freeReplyObject(r);
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
            struct sl_algo_params p = { (enum sl_algo)a, 10, S_US, 10 };
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
            struct req q = { (enum sl_algo)a, 10, S_US, 10, 1, (int64_t)t0 + 2000 };
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
    redisReply *r = redisCommand(rc, "EVALSHA %s 1 %s %lld 1 gcra 1 1000000 1 1 1", sha_decide,
                                 "sluice:{s3:u}", (long long)t0);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->element[0]->integer, 1);
    freeReplyObject(r);
    r = redisCommand(rc, "EVALSHA %s 1 %s %lld 1 gcra 1 1000000 1 1 1", sha_decide,
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
            struct req q = { (enum sl_algo)a, 3, 3600 * S_US, 3, 1, -1 };
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
    struct req q = { SL_ALGO_TOKEN_BUCKET, 1000, 1000, 1, 1, -1 }; /* 1 per us */
    struct ans x = one("sluice:{fast:u}", VIA_DECIDE, &q);
    assert_int_equal(x.allowed, 1);
    usleep(2000);
    x = one("sluice:{fast:u}", VIA_DECIDE, &q);
    assert_int_equal(x.allowed, 1);
}

static void expect_error(const char *what, redisReply *r)
{
    assert_non_null(r);
    if (r->type != REDIS_REPLY_ERROR)
        print_error("%s: no error\n", what);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(r->str, "sluice"));
    freeReplyObject(r);
}

static void test_errors(void **state)
{
    (void)state;
    flushall();
    expect_error("unknown algorithm",
                 redisCommand(rc, "EVALSHA %s 1 k{x} 5 1 leaky 1 1000000 1 1 0", sha_decide));
    expect_error("argument count",
                 redisCommand(rc, "EVALSHA %s 1 k{x} 5 1 gcra 1 1000000 1 1", sha_decide));
    expect_error("key count",
                 redisCommand(rc, "EVALSHA %s 0 5 1 gcra 1 1000000 1 1 0", sha_decide));
    /* burst x period / gcd over 2^52: 52125 at 1/d */
    expect_error("burst bound",
                 redisCommand(rc, "EVALSHA %s 1 k{x} 5 1 token_bucket 1 86400000000 52125 1 0",
                              sha_decide));
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
    struct sl_algo_params p = { SL_ALGO_TOKEN_BUCKET, 1, DAY, 52125 };
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
    struct req q = { SL_ALGO_SLIDING_LOG, 100000, 60 * S_US, 1, 25000, (int64_t)SL_CASE_T0 };
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
        cmocka_unit_test(test_time_mode),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_sliding_log_many_events),
        cmocka_unit_test(test_heartbeat),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

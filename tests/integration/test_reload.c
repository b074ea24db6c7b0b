/* sluice integration tests — a reload that forgets nothing (docs/limits.md,
 * "Reload").
 *
 * One redis-server is the upstream and, for store-backed limits, the quota
 * store; each test starts its own sluice with one resp listener [r] whose
 * identity is the key prefix (INCR a:k is prefix:a), rewrites its file and
 * sends SIGHUP. Every limit refills slowly (one token an hour, or windows
 * of a year), so nothing the scheduler does between two requests can
 * change what a bucket holds: what a test sees after the reload is what
 * the reload did to it. Before: every reload, even of an unchanged file,
 * refilled every in-process bucket, dropped leases, remembered refusals and
 * cached overrides, and set every per-limit counter and /stats back to 0.
 *
 * RELOAD_ONLY=<cmocka pattern> runs only matching tests. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "integration/harness.h"

static struct th_proc redis_p, sluice_p;
static int port, admin, reloads;

static int group_setup(void **state)
{
    (void)state;
    return th_redis_start(&redis_p, NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    th_stop(&redis_p);
    return 0;
}

/* sluice must still run, and exit cleanly (a sanitizer build: no leak of
 * the state limits share). */
static int stop_sluice(void **state)
{
    (void)state;
    int rc = th_alive_or_report(&sluice_p);
    int st = th_stop(&sluice_p);
    if (st != 0) {
        fprintf(stderr, "sluice exited with status 0x%x (log %s)\n", (unsigned)st, sluice_p.log);
        rc = -1;
    }
    return rc;
}

/* The whole file: [store] <store> (url = local when NULL), [listener r],
 * then <limits>, into <out>. */
static void conf_text(char *out, size_t cap, const char *store, const char *limits)
{
    int n = snprintf(out, cap,
                     "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 2s\n"
                     "[store]\n%s\n"
                     "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
                     "identity = key_prefix\n%s",
                     admin, store != NULL ? store : "url = local", port, redis_p.port, limits);
    assert_true(n > 0 && (size_t)n < cap);
}

static void start(const char *store, const char *limits)
{
    redisContext *r = redisConnect("127.0.0.1", redis_p.port);
    assert_true(r != NULL && r->err == 0);
    freeReplyObject(redisCommand(r, "FLUSHALL"));
    redisFree(r);
    port = th_free_port();
    admin = th_free_port();
    reloads = 0;
    char ini[4096];
    conf_text(ini, sizeof(ini), store, limits);
    assert_int_equal(th_sluice_start(&sluice_p, ini, port), 0);
    if (store != NULL)
        assert_int_equal(th_metric_wait(admin, "sluice_store_up", 1, TH_MS), 0);
}

/* Writes the file anew (never half-written) and reloads it; waits until
 * the reload is logged. */
static void reload(const char *store, const char *limits)
{
    char ini[4096], tmp[300];
    conf_text(ini, sizeof(ini), store, limits);
    snprintf(tmp, sizeof(tmp), "%s.new", sluice_p.conf);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs(ini, f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(rename(tmp, sluice_p.conf), 0);
    assert_int_equal(kill(sluice_p.pid, SIGHUP), 0);
    reloads++;
    assert_int_equal(th_log_wait(sluice_p.log, "msg=reloaded ", reloads, TH_MS), 0);
}

static redisContext *client(void)
{
    redisContext *c = redisConnect("127.0.0.1", port);
    assert_true(c != NULL && c->err == 0);
    return c;
}

/* INCR <prefix>:k: 1 when it passed, 0 when a limit refused it. */
static int incr(redisContext *c, const char *prefix)
{
    redisReply *rep = redisCommand(c, "INCR %s:k", prefix);
    assert_non_null(rep);
    int ok = rep->type == REDIS_REPLY_INTEGER;
    if (!ok) {
        if (rep->type != REDIS_REPLY_ERROR || strncmp(rep->str, "THROTTLED", 9) != 0)
            fail_msg("INCR %s:k: unexpected reply type %d: %s", prefix, rep->type,
                     rep->str ? rep->str : "");
    }
    freeReplyObject(rep);
    return ok;
}

/* How many of <n> INCRs of <prefix> pass. */
static int passed(redisContext *c, const char *prefix, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        k += incr(c, prefix);
    return k;
}

/* ---- /metrics as counter samples ------------------------------------------ */

#define MAX_SAMPLES 2048

struct samples {
    int    n;
    char   key[MAX_SAMPLES][200];  /* name{labels} */
    double v[MAX_SAMPLES];
};

/* Whether sample name <name> (up to '{' or ' ') belongs to family <fam>
 * of type <type> (a histogram's _bucket, _sum and _count do). */
static int of_family(const char *name, size_t len, const char *fam, const char *type)
{
    size_t fl = strlen(fam);
    if (len == fl && strncmp(name, fam, fl) == 0)
        return 1;
    if (strcmp(type, "histogram") != 0 || len <= fl || strncmp(name, fam, fl) != 0)
        return 0;
    const char *suf = name + fl;
    size_t sl = len - fl;
    return (sl == 7 && strncmp(suf, "_bucket", 7) == 0) || (sl == 4 && strncmp(suf, "_sum", 4) == 0) ||
           (sl == 6 && strncmp(suf, "_count", 6) == 0);
}

/* Every sample of a counter or histogram family on the page. */
static void scrape(struct samples *s)
{
    char *body = th_http_get(admin, "/metrics");
    assert_non_null(body);
    s->n = 0;
    char fam[160] = "", type[32] = "";
    for (char *line = body; line != NULL && *line != '\0';) {
        char *nl = strchr(line, '\n');
        if (nl != NULL)
            *nl = '\0';
        if (sscanf(line, "# TYPE %159s %31s", fam, type) == 2) {
            /* the family's type is known */
        } else if (line[0] != '#' && line[0] != '\0' &&
                   (strcmp(type, "counter") == 0 || strcmp(type, "histogram") == 0)) {
            char *sp = strrchr(line, ' ');
            size_t nlen = strcspn(line, "{ ");
            if (sp != NULL && of_family(line, nlen, fam, type)) {
                assert_true(s->n < MAX_SAMPLES);
                size_t kl = (size_t)(sp - line);
                assert_true(kl < sizeof(s->key[0]));
                memcpy(s->key[s->n], line, kl);
                s->key[s->n][kl] = '\0';
                s->v[s->n] = strtod(sp + 1, NULL);
                s->n++;
            }
        }
        line = nl != NULL ? nl + 1 : NULL;
    }
    free(body);
}

/* Counters a reload itself moves, or the process's own clock: they may
 * only grow. Everything else must stay as it was while no traffic ran. */
static int moves_by_itself(const char *key)
{
    return strncmp(key, "process_", 8) == 0 || strstr(key, "reload") != NULL ||
           strncmp(key, "sluice_store_", 13) == 0; /* heartbeat and probes */
}

/* Every sample of <before> is in <after>, never lower; equal unless
 * <traffic> ran between them or it moves by itself. Returns how many. */
static int check_monotonic(const struct samples *before, const struct samples *after, int traffic)
{
    for (int i = 0; i < before->n; i++) {
        int j = 0;
        while (j < after->n && strcmp(after->key[j], before->key[i]) != 0)
            j++;
        if (j == after->n)
            fail_msg("counter %s went away after the reload", before->key[i]);
        if (after->v[j] < before->v[i])
            fail_msg("counter %s went back: %.0f -> %.0f", before->key[i], before->v[i], after->v[j]);
        if (!traffic && !moves_by_itself(before->key[i]) && after->v[j] != before->v[i])
            fail_msg("counter %s changed with no traffic: %.0f -> %.0f", before->key[i],
                     before->v[i], after->v[j]);
    }
    return before->n;
}

static double sample(const struct samples *s, const char *key)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->key[i], key) == 0)
            return s->v[i];
    return -1;
}

/* The "limits" array of /stats (malloc'd). */
static char *stats_limits(void)
{
    char *body = th_http_get(admin, "/stats");
    assert_non_null(body);
    char *a = strstr(body, "\"limits\":"), *b = a != NULL ? strstr(a, ",\"store\":") : NULL;
    assert_non_null(a);
    assert_non_null(b);
    *b = '\0';
    char *out = strdup(a);
    free(body);
    return out;
}

/* ---- 1. an unchanged file ---------------------------------------------------------- */

#define TB_LIMIT "[limit tb]\nlistener = r\nrate = 1/h\nburst = 3\ncommands = INCR\n"

/* A drained in-process bucket stays drained, every counter sample stays
 * what it was and /stats (its busiest identities too) is the same text. */
static void test_unchanged_file_keeps_everything(void **state)
{
    (void)state;
    start(NULL, TB_LIMIT);
    redisContext *c = client();
    assert_int_equal(passed(c, "a", 3), 3);
    assert_int_equal(incr(c, "a"), 0); /* drained: one token an hour */
    assert_int_equal(passed(c, "b", 2), 2);
    struct samples *before = malloc(sizeof(*before)), *after = malloc(sizeof(*after));
    assert_non_null(before);
    assert_non_null(after);
    scrape(before);
    assert_true(sample(before, "sluice_limit_decisions_total{limit=\"tb\",outcome=\"allowed\"}") == 5);
    assert_true(sample(before, "sluice_limit_decisions_total{limit=\"tb\",outcome=\"rejected\"}") == 1);
    char *st0 = stats_limits();
    assert_non_null(strstr(st0, "\"identity\":\"prefix:a\",\"requests\":4"));

    reload(NULL, TB_LIMIT);
    scrape(after);
    int n = check_monotonic(before, after, 0);
    char *st1 = stats_limits();
    assert_string_equal(st1, st0);
    /* the request that was over the limit still is, right after */
    assert_int_equal(incr(c, "a"), 0);
    assert_int_equal(incr(c, "b"), 1); /* b had 1 of 3 left */
    assert_int_equal(incr(c, "b"), 0);
    assert_int_equal(th_metric(admin, "sluice_limit_decisions_total{limit=\"tb\",outcome=\"rejected\"}"),
                     3);
    printf("unchanged file: %d counter samples kept\n", n);
    free(st0);
    free(st1);
    free(before);
    free(after);
    redisFree(c);
}

/* Under traffic (a client hammering its own identity the whole time),
 * three reloads of the same file: no counter sample ever goes back, and a
 * drained bucket stays drained through all of them. */
static void test_reloads_under_traffic_monotonic(void **state)
{
    (void)state;
    start(NULL, TB_LIMIT);
    redisContext *c = client();
    assert_int_equal(passed(c, "a", 3), 3);
    pid_t kid = fork();
    assert_true(kid >= 0);
    if (kid == 0) {
        redisContext *k = redisConnect("127.0.0.1", port);
        if (k == NULL || k->err != 0)
            _exit(1);
        for (;;) { /* pipelined: 64 at a time, replies read */
            for (int i = 0; i < 64; i++)
                redisAppendCommand(k, "INCR t:k");
            for (int i = 0; i < 64; i++) {
                void *rep = NULL;
                if (redisGetReply(k, &rep) != REDIS_OK)
                    _exit(0);
                freeReplyObject(rep);
            }
        }
    }
    th_track_pid(kid);
    struct samples *prev = malloc(sizeof(*prev)), *cur = malloc(sizeof(*cur));
    assert_non_null(prev);
    assert_non_null(cur);
    /* the hammer is under way once its identity is refused */
    uint64_t end = th_now_ms() + TH_MS;
    while (th_metric(admin, "sluice_limit_decisions_total{limit=\"tb\",outcome=\"rejected\"}") < 100 &&
           th_now_ms() < end)
        usleep(10000);
    scrape(prev);
    for (int r = 0; r < 3; r++) {
        reload(NULL, TB_LIMIT);
        assert_int_equal(incr(c, "a"), 0);
        scrape(cur);
        check_monotonic(prev, cur, 1);
        struct samples *t = prev;
        prev = cur;
        cur = t;
    }
    double rej = sample(prev, "sluice_limit_decisions_total{limit=\"tb\",outcome=\"rejected\"}");
    printf("three reloads under traffic: %.0f rejections counted, none lost\n", rej);
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    free(prev);
    free(cur);
    redisFree(c);
}

/* A connection limit counts the connections open: a reload keeps them
 * counted, so one more than max is still refused. Before: the new limits
 * counted from 0 and let max more in. */
/* A client let in by connection limit 'one' (the start's probe of the port
 * may still hold the place for a moment): retried until PING passes. */
static redisContext *admitted_client(void)
{
    uint64_t end = th_now_ms() + TH_MS;
    for (;;) {
        redisContext *d = client();
        redisReply *rep = redisCommand(d, "PING");
        int in = rep != NULL && rep->type == REDIS_REPLY_STATUS;
        if (rep != NULL)
            freeReplyObject(rep);
        if (in)
            return d;
        redisFree(d);
        if (th_now_ms() > end)
            fail_msg("no connection let in by limit 'one'");
        usleep(20000);
    }
}

static void test_connection_count_survives(void **state)
{
    (void)state;
    const char *lim = "[limit one]\nlistener = r\nmetric = connections\nmax = 1\nscope = global\n";
    start(NULL, lim);
    redisContext *c = admitted_client();
    reload(NULL, lim);
    int fd = th_connect(port);
    assert_true(fd >= 0);
    TH_EXPECT_CLOSE(fd, "-ERR max number of clients reached (limit 'one')\r\n");
    close(fd);
    assert_int_equal(incr(c, "a"), 1);
    redisFree(c);
    /* the place is given back to the count both limits share */
    redisFree(admitted_client());
}

/* ---- 2. changed numbers ------------------------------------------------------------ */

/* A token bucket keeps its level across a change of burst, capped at the
 * new burst: 1 token left of 5 is 1 of 3 (not a full 3), and 0 left stays
 * 0 under a burst of 10. The counters go on from where they were. */
static void test_changed_burst_keeps_level(void **state)
{
    (void)state;
    start(NULL, "[limit tb]\nlistener = r\nrate = 1/h\nburst = 5\ncommands = INCR\n");
    redisContext *c = client();
    assert_int_equal(passed(c, "a", 4), 4); /* 1 left of 5 */
    assert_int_equal(passed(c, "z", 5), 5); /* 0 left of 5 */
    struct samples *before = malloc(sizeof(*before)), *after = malloc(sizeof(*after));
    assert_non_null(before);
    assert_non_null(after);
    scrape(before);
    reload(NULL, "[limit tb]\nlistener = r\nrate = 1/h\nburst = 3\ncommands = INCR\n");
    scrape(after);
    check_monotonic(before, after, 0);
    assert_int_equal(passed(c, "a", 3), 1);
    reload(NULL, "[limit tb]\nlistener = r\nrate = 1/h\nburst = 10\ncommands = INCR\n");
    assert_int_equal(passed(c, "a", 3), 0);
    assert_int_equal(passed(c, "z", 3), 0);
    assert_int_equal(passed(c, "n", 11), 10); /* a new identity: the new burst, full */
    free(before);
    free(after);
    redisFree(c);
}

/* A window keeps its count across a change of amount: 4 of 6 counted
 * leaves 2 under amount 6, 6 under amount 10. */
static void test_changed_amount_window_keeps_count(void **state)
{
    (void)state;
    const char *fw = "[limit fw]\nlistener = r\nrate = %d/365d\nalgorithm = fixed_window\ncommands = INCR\n";
    char lim[256];
    snprintf(lim, sizeof(lim), fw, 6);
    start(NULL, lim);
    redisContext *c = client();
    assert_int_equal(passed(c, "a", 4), 4);
    snprintf(lim, sizeof(lim), fw, 10);
    reload(NULL, lim);
    assert_int_equal(passed(c, "a", 8), 6);
    redisFree(c);
}

/* Another scope keys the state differently: it starts afresh (the global
 * bucket is full), but the counters of the limit's name go on. */
static void test_changed_scope_counters_go_on(void **state)
{
    (void)state;
    start(NULL, TB_LIMIT);
    redisContext *c = client();
    assert_int_equal(passed(c, "a", 4), 3);
    struct samples *before = malloc(sizeof(*before)), *after = malloc(sizeof(*after));
    assert_non_null(before);
    assert_non_null(after);
    scrape(before);
    reload(NULL, TB_LIMIT "scope = global\n");
    scrape(after);
    check_monotonic(before, after, 0);
    assert_int_equal(passed(c, "a", 4), 3);
    assert_int_equal(th_metric(admin, "sluice_limit_decisions_total{limit=\"tb\",outcome=\"allowed\"}"), 6);
    free(before);
    free(after);
    redisFree(c);
}

/* ---- 3. a changed algorithm -------------------------------------------------------- */

/* Through every algorithm, the whole tokens left are kept: 6 to start
 * with, one taken under each of token_bucket, fixed_window, sliding_log
 * (another period), sliding_window and gcra, so token_bucket again holds
 * exactly 1. */
static void test_changed_algorithm_keeps_what_is_left(void **state)
{
    (void)state;
    static const char *const chain[] = {
        "rate = 1/h\nburst = 6\nalgorithm = token_bucket\n",
        "rate = 6/365d\nalgorithm = fixed_window\n",
        "rate = 6/300d\nalgorithm = sliding_log\n",
        "rate = 6/365d\nalgorithm = sliding_window\n",
        "rate = 1/h\nburst = 6\nalgorithm = gcra\n",
        "rate = 1/h\nburst = 6\nalgorithm = token_bucket\n",
    };
    char lim[512];
    redisContext *c = NULL;
    for (size_t i = 0; i < sizeof(chain) / sizeof(chain[0]); i++) {
        snprintf(lim, sizeof(lim), "[limit x]\nlistener = r\ncommands = INCR\n%s", chain[i]);
        if (i == 0) {
            start(NULL, lim);
            c = client();
        } else {
            reload(NULL, lim);
        }
        if (i + 1 < sizeof(chain) / sizeof(chain[0])) {
            if (!incr(c, "a"))
                fail_msg("step %zu (%s): refused with tokens left", i, chain[i]);
        }
    }
    assert_int_equal(passed(c, "a", 3), 1);
    assert_int_equal(th_metric(admin, "sluice_limit_decisions_total{limit=\"x\",outcome=\"allowed\"}"), 6);
    redisFree(c);
}

/* ---- 4. remembered refusals and cached overrides ----------------------------------- */

#define STORE_URL_FMT "url = redis://127.0.0.1:%d/0\n%s"

/* A refusal of the store remembered until its retry time (an hour) is
 * still remembered after a reload: the next request is refused in
 * process, without asking the store (held refusals count it). */
static void test_remembered_refusal_survives(void **state)
{
    (void)state;
    char store[256];
    snprintf(store, sizeof(store), STORE_URL_FMT, redis_p.port, "");
    const char *lim = "[limit st]\nlistener = r\nrate = 1/h\nburst = 1\ncommands = INCR\n";
    start(store, lim);
    redisContext *c = client();
    /* the take that emptied the bucket is remembered as a refusal until
     * a token is back (an hour): the next ones are refused here */
    assert_int_equal(incr(c, "a"), 1);
    assert_int_equal(incr(c, "a"), 0);
    assert_int_equal(incr(c, "a"), 0);
    const char *held = "sluice_limit_held_refusals_total{limit=\"st\"}";
    double h0 = th_metric(admin, held);
    assert_true(h0 >= 1);
    reload(store, lim);
    assert_int_equal(incr(c, "a"), 0);
    assert_true(th_metric(admin, held) == h0 + 1); /* refused here, not by the store */
    redisFree(c);
}

/* A cached override (overrides_ttl = 1h) is still used after a reload:
 * no HGET is made for it, and the decisions keep its numbers though the
 * operator deleted it meanwhile (it is read again once the hour is over). */
static void test_cached_override_survives(void **state)
{
    (void)state;
    char store[256];
    snprintf(store, sizeof(store), STORE_URL_FMT, redis_p.port, "");
    const char *lim = "[limit ov]\nlistener = r\nrate = 1/h\nburst = 1\ncommands = INCR\n"
                      "overrides = store\noverrides_ttl = 1d\n";
    redisContext *r = redisConnect("127.0.0.1", redis_p.port);
    assert_true(r != NULL && r->err == 0);
    start(store, lim);
    freeReplyObject(redisCommand(r, "HSET sluice:overrides:{ov} prefix:a %s", "1/h 4"));
    redisContext *c = client();
    assert_int_equal(passed(c, "a", 1), 1); /* read: burst 4, 3 left */
    long hget0 = th_redis_cmd_calls(redis_p.port, "hget");
    freeReplyObject(redisCommand(r, "HDEL sluice:overrides:{ov} prefix:a"));
    reload(store, lim);
    assert_int_equal(passed(c, "a", 4), 3);
    assert_int_equal(th_redis_cmd_calls(redis_p.port, "hget"), hget0);
    assert_int_equal(th_metric(admin, "sluice_limit_override_decisions_total{limit=\"ov\"}"), 5);
    redisFree(r);
    redisFree(c);
}

/* A cached override made by the old limits, where its limit had index 1,
 * is asked again (stale) by the new ones, where it has index 0 and no
 * index 1 exists: the answer goes to the asking limits' limit. (A wait past
 * overrides_ttl is the point here; nothing races with it.) */
static void test_stale_override_asked_by_new_limits(void **state)
{
    (void)state;
    char store[256];
    snprintf(store, sizeof(store), STORE_URL_FMT, redis_p.port, "");
    const char *ov = "[limit ov]\nlistener = r\nrate = 1/h\nburst = 1\ncommands = INCR\n"
                     "overrides = store\noverrides_ttl = 100ms\n";
    char two[512];
    snprintf(two, sizeof(two), "[limit x]\nlistener = r\nrate = 1/h\ncommands = GET\n%s", ov);
    redisContext *r = redisConnect("127.0.0.1", redis_p.port);
    assert_true(r != NULL && r->err == 0);
    start(store, two);
    freeReplyObject(redisCommand(r, "HSET sluice:overrides:{ov} prefix:a %s", "1/h 5"));
    redisContext *c = client();
    assert_int_equal(passed(c, "a", 1), 1);
    reload(store, ov);
    usleep(300000); /* stale now */
    long hget0 = th_redis_cmd_calls(redis_p.port, "hget");
    assert_int_equal(passed(c, "a", 1), 1); /* the stale answer, while asked again */
    uint64_t end = th_now_ms() + TH_MS;
    while (th_redis_cmd_calls(redis_p.port, "hget") == hget0 && th_now_ms() < end)
        usleep(5000);
    assert_true(th_redis_cmd_calls(redis_p.port, "hget") > hget0);
    assert_int_equal(passed(c, "a", 5), 3); /* 5 of the override's burst in all */
    redisFree(r);
    redisFree(c);
}

/* ---- 5. leases --------------------------------------------------------------------- */

/* Tokens leased from the store before a reload are spent after it: the
 * five left of a lease of 5 decide five requests without a store call.
 * Before, they were dropped (the store had counted them: the identity lost
 * them) and the next request took a lease again. */
static void test_lease_survives(void **state)
{
    (void)state;
    char store[256];
    snprintf(store, sizeof(store), STORE_URL_FMT, redis_p.port, "lease = 5\n");
    const char *lim = "[limit ls]\nlistener = r\nrate = 1/h\nburst = 20\ncommands = INCR\n";
    start(store, lim);
    redisContext *c = client();
    assert_int_equal(incr(c, "a"), 1); /* takes 1 + a lease of 5 */
    const char *leased = "sluice_limit_leased_decisions_total{limit=\"ls\"}";
    assert_int_equal(th_metric(admin, leased), 0);
    reload(store, lim);
    assert_int_equal(passed(c, "a", 5), 5);
    assert_int_equal(th_metric(admin, leased), 5);
    /* the store counted 6: 14 are left there for this identity */
    assert_int_equal(passed(c, "a", 20), 14);
    redisFree(c);
}

/* A reload while a lease is being asked: the store (stopped) holds the
 * old limits' call; a request of the new limits, where the limit has
 * another index (a limit was added before it), waits for that call's
 * answer on the entry both share, and is then decided from the lease it
 * brought, with the new limits. Before: the second request asked the store
 * itself (nothing was shared). */
static void test_lease_asked_across_reload(void **state)
{
    (void)state;
    struct th_proc store_p;
    memset(&store_p, 0, sizeof(store_p));
    assert_int_equal(th_redis_start(&store_p, NULL), 0);
    char store[256];
    snprintf(store, sizeof(store), "url = redis://127.0.0.1:%d/0\nlease = 5\ntimeout = 1h\n",
             store_p.port);
    const char *lim = "[limit ls]\nlistener = r\nrate = 1/h\nburst = 20\ncommands = INCR\n";
    char lim2[512];
    snprintf(lim2, sizeof(lim2), "[limit first]\nlistener = r\nrate = 1/h\ncommands = GET\n%s", lim);
    start(store, lim);
    redisContext *a = client(), *b = client();
    const char *sent = "sluice_store_requests_total";
    const char *framed = "sluice_requests_total{listener=\"r\"}";
    double calls0 = th_metric(admin, sent), framed0 = th_metric(admin, framed);
    assert_int_equal(kill(store_p.pid, SIGSTOP), 0);
    int wdone = 0;
    redisAppendCommand(a, "INCR a:k");
    while (!wdone)
        assert_int_equal(redisBufferWrite(a, &wdone), REDIS_OK);
    uint64_t end = th_now_ms() + TH_MS;
    while (th_metric(admin, sent) < calls0 + 1 && th_now_ms() < end)
        usleep(5000);
    assert_true(th_metric(admin, sent) >= calls0 + 1); /* a's call is out */
    reload(store, lim2);
    redisAppendCommand(b, "INCR a:k");
    wdone = 0;
    while (!wdone)
        assert_int_equal(redisBufferWrite(b, &wdone), REDIS_OK);
    end = th_now_ms() + TH_MS;
    while (th_metric(admin, framed) < framed0 + 2 && th_now_ms() < end)
        usleep(5000);
    assert_true(th_metric(admin, framed) >= framed0 + 2); /* b is read: it waits */
    assert_int_equal(kill(store_p.pid, SIGCONT), 0);
    redisReply *ra = NULL, *rb = NULL;
    assert_int_equal(redisGetReply(a, (void **)&ra), REDIS_OK);
    assert_int_equal(redisGetReply(b, (void **)&rb), REDIS_OK);
    assert_int_equal(ra->type, REDIS_REPLY_INTEGER);
    assert_int_equal(rb->type, REDIS_REPLY_INTEGER);
    freeReplyObject(ra);
    freeReplyObject(rb);
    assert_int_equal(th_metric(admin, "sluice_limit_leased_decisions_total{limit=\"ls\"}"), 1);
    redisFree(a);
    redisFree(b);
    th_stop(&store_p);
}

/* ---- workers ----------------------------------------------------------------------- */

/* With two workers each one carries its own limits over: the per-worker
 * counters the master shows are the same after the reload, and a bucket
 * drained in the store stays drained (workers need a store). */
static void test_workers_keep_counters(void **state)
{
    (void)state;
    redisContext *r = redisConnect("127.0.0.1", redis_p.port);
    assert_true(r != NULL && r->err == 0);
    freeReplyObject(redisCommand(r, "FLUSHALL"));
    redisFree(r);
    port = th_free_port();
    admin = th_free_port();
    char ini[2048];
    const char *fmt = "[sluice]\nadmin = 127.0.0.1:%d\nworkers = 2\nshutdown_grace = 2s\n"
                      "[store]\nurl = redis://127.0.0.1:%d/0\n"
                      "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
                      "identity = key_prefix\n"
                      "[limit st]\nlistener = r\nrate = 1/h\nburst = 3\ncommands = INCR\n";
    snprintf(ini, sizeof(ini), fmt, admin, redis_p.port, port, redis_p.port);
    assert_int_equal(th_sluice_start(&sluice_p, ini, port), 0);
    uint64_t end = th_now_ms() + TH_MS;
    while (th_metric(admin, "sluice_workers_ready") != 2 && th_now_ms() < end)
        usleep(20000);
    assert_int_equal(th_metric(admin, "sluice_workers_ready"), 2);
    for (int w = 0; w < 2; w++) { /* each worker's store is up: no decision by on_failure */
        char k[64];
        snprintf(k, sizeof(k), "sluice_store_up{worker=\"%d\"}", w);
        assert_int_equal(th_metric_wait(admin, k, 1, TH_MS), 0);
    }
    /* connections spread over both workers */
    for (int i = 0; i < 8; i++) {
        redisContext *c = client();
        incr(c, "a");
        redisFree(c);
    }
    struct samples *before = malloc(sizeof(*before)), *after = malloc(sizeof(*after));
    assert_non_null(before);
    assert_non_null(after);
    scrape(before);
    double total = 0;
    for (int w = 0; w < 2; w++) {
        char k[160];
        snprintf(k, sizeof(k), "sluice_limit_decisions_total{worker=\"%d\",limit=\"st\",outcome=\"rejected\"}", w);
        total += sample(before, k) > 0 ? sample(before, k) : 0;
    }
    if (total != 5)
        fail_msg("5 rejections expected before the reload, %.0f counted", total);
    FILE *f = fopen(sluice_p.conf, "w");
    assert_non_null(f);
    fputs(ini, f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(kill(sluice_p.pid, SIGHUP), 0);
    assert_int_equal(th_log_wait(sluice_p.log, "msg=reloaded worker=", 2, TH_MS), 0);
    scrape(after);
    check_monotonic(before, after, 0);
    free(before);
    free(after);
}

/* ---- listeners -------------------------------------------------------------------- */

/* A pooled listener moved to another address: the pooled engine of its old
 * socket goes with the old socket's last session, and its counters stay in
 * the name's totals. Before: sluice_pool_upstream_failures_total went back
 * to what the new socket's engine had counted (0). */
static void test_moved_pooled_listener_counters(void **state)
{
    (void)state;
    int pa = th_free_port(), pb = th_free_port(), dead = th_free_port();
    admin = th_free_port();
    reloads = 0;
    const char *fmt = "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 2s\n[store]\nurl = local\n"
                      "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
                      "upstream_pool = 1\nconnect_timeout = 500ms\n";
    char ini[1024];
    snprintf(ini, sizeof(ini), fmt, admin, pa, dead);
    assert_int_equal(th_sluice_start(&sluice_p, ini, pa), 0);
    const char *failures = "sluice_pool_upstream_failures_total{listener=\"r\"}";
    const char *active = "sluice_connections_active{listener=\"r\"}";
    struct th_conn c;
    assert_int_equal(th_conn_open(&c, pa), 0);
    assert_int_equal(th_conn_send(&c, "PING\r\n"), 0);
    char *rep = th_conn_reply(&c, TH_MS);
    if (rep != NULL)
        assert_int_equal(rep[0], '-'); /* nothing listens upstream */
    free(rep);
    uint64_t end = th_now_ms() + TH_MS;
    while (th_metric(admin, failures) < 1 && th_now_ms() < end)
        usleep(10000);
    double f0 = th_metric(admin, failures);
    assert_true(f0 >= 1);

    snprintf(ini, sizeof(ini), fmt, admin, pb, dead);
    char tmp[300];
    snprintf(tmp, sizeof(tmp), "%s.new", sluice_p.conf);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs(ini, f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(rename(tmp, sluice_p.conf), 0);
    assert_int_equal(kill(sluice_p.pid, SIGHUP), 0);
    assert_int_equal(th_log_wait(sluice_p.log, "msg=reloaded ", 1, TH_MS), 0);
    assert_true(th_metric(admin, failures) >= f0);
    th_conn_close(&c); /* the old socket goes with it */
    end = th_now_ms() + TH_MS;
    while (th_metric(admin, active) != 0 && th_now_ms() < end)
        usleep(10000);
    assert_int_equal(th_metric(admin, active), 0);
    double f1 = th_metric(admin, failures);
    if (f1 < f0)
        fail_msg("%s went back: %.0f -> %.0f", failures, f0, f1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_unchanged_file_keeps_everything, stop_sluice),
        cmocka_unit_test_teardown(test_reloads_under_traffic_monotonic, stop_sluice),
        cmocka_unit_test_teardown(test_connection_count_survives, stop_sluice),
        cmocka_unit_test_teardown(test_changed_burst_keeps_level, stop_sluice),
        cmocka_unit_test_teardown(test_changed_amount_window_keeps_count, stop_sluice),
        cmocka_unit_test_teardown(test_changed_scope_counters_go_on, stop_sluice),
        cmocka_unit_test_teardown(test_changed_algorithm_keeps_what_is_left, stop_sluice),
        cmocka_unit_test_teardown(test_remembered_refusal_survives, stop_sluice),
        cmocka_unit_test_teardown(test_cached_override_survives, stop_sluice),
        cmocka_unit_test_teardown(test_stale_override_asked_by_new_limits, stop_sluice),
        cmocka_unit_test_teardown(test_lease_survives, stop_sluice),
        cmocka_unit_test_teardown(test_lease_asked_across_reload, stop_sluice),
        cmocka_unit_test_teardown(test_workers_keep_counters, stop_sluice),
        cmocka_unit_test_teardown(test_moved_pooled_listener_counters, stop_sluice),
    };
    const char *only = getenv("RELOAD_ONLY");
    if (only != NULL && *only != '\0')
        cmocka_set_test_filter(only);
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

/* sluice — differential RESP fuzzer, pooled mode (--pooled K): included by
 * tests/fuzz/diff_resp.c, whose generator, runner and comparison it uses. */

/* ---- pooled mode: rounds of concurrent clients ------------------------------------------------ */

/* With --pooled K, stream index I is a round: K streams (I * 64 + k), each
 * with its own key and channel prefix, sent at once on K connections to
 * Redis directly, then at once on K connections to the pooled listener
 * (upstream_pool = --pool-size), where they interleave on shared upstream
 * connections, pin for MULTI / WATCH / BLPOP / SUBSCRIBE / CLIENT REPLY,
 * move between pool keys on SELECT / HELLO / AUTH / RESET, and unpin. As
 * no client touches another's keys or channels, each client's replies
 * depend on its own stream alone and must be what Redis gave it directly.
 * Client k's prefix is "{<I>.<k>}" in both runs (the same names, so the
 * same hash order where Redis lists them: an unsubscribe of everything);
 * between the runs the upstream is flushed once the direct run's
 * connections are gone (the pool's idle ones stay: the count must come
 * back to what it was before the direct run). A new round's prefix is new,
 * so what an earlier round's pooled run may still do touches nothing. */

#define POOL_MAX_CLIENTS 64

struct side_job {
    pthread_t            th;
    int                  port;
    const struct stream *s;
    struct buf           data;
    struct outcome       o;
    int                  rc;
};

static void *side_thread(void *p)
{
    struct side_job *j = p;
    j->rc = run_side(j->port, j->s, j->data.p, j->data.len, &j->o);
    return NULL;
}

/* Sends streams <s>[0..n) at once, each on its own connection to <port>. */
static int run_sides(int port, const struct stream *s, struct side_job *jobs, unsigned n)
{
    int rc = 0;
    for (unsigned k = 0; k < n; k++) {
        memset(&jobs[k], 0, sizeof(jobs[k]));
        jobs[k].port = port;
        jobs[k].s = &s[k];
        st_join(&s[k], &jobs[k].data);
        if (pthread_create(&jobs[k].th, NULL, side_thread, &jobs[k]) != 0)
            abort();
    }
    for (unsigned k = 0; k < n; k++) {
        pthread_join(jobs[k].th, NULL);
        rc |= jobs[k].rc;
    }
    return rc;
}

static void jobs_free(struct side_job *jobs, unsigned n)
{
    for (unsigned k = 0; k < n; k++) {
        out_free(&jobs[k].o);
        buf_free(&jobs[k].data);
    }
}

/* The streams of round <idx>. */
static void generate_round(uint64_t seed, uint64_t idx, struct stream *ds)
{
    for (unsigned k = 0; k < g_pooled; k++) {
        char pfx[64];
        snprintf(pfx, sizeof(pfx), "{%llu.%u}", (unsigned long long)idx, k);
        generate_for(seed, idx * 64 + k, pfx, &ds[k]);
    }
}

/* connected_clients of the upstream (the control connection included), or -1. */
static long upstream_clients(void)
{
    char r[4096];
    static const char info[] = "*2\r\n$4\r\nINFO\r\n$7\r\nclients\r\n";
    if (ctl_cmd(info, sizeof(info) - 1, r, sizeof(r)) < 0)
        return -1;
    const char *c = strstr(r, "connected_clients:");
    return c ? atol(c + 18) : -1;
}

static int upstream_flush(void)
{
    char r[256];
    static const char fl[] = "*1\r\n$8\r\nFLUSHALL\r\n";
    return ctl_cmd(fl, sizeof(fl) - 1, r, sizeof(r)) < 0 || strcmp(r, "+OK\r\n") != 0 ? -1 : 0;
}

/* Runs round <idx>; fills <v> (its why names every client that differs). */
static void check_round(const struct stream *ds, struct verdict *v, int *bad_client)
{
    struct side_job d[POOL_MAX_CLIENTS], p[POOL_MAX_CLIENTS];
    v->fail = 0;
    v->why.len = 0;
    v->sig.len = 0;
    memset(bad_client, 0, sizeof(int) * g_pooled);
    long before = upstream_clients();
    if (before < 0 || upstream_flush() < 0) {
        v->fail = 3;
        buf_str(&v->why, "the upstream did not answer INFO / FLUSHALL");
        return;
    }
    if (run_sides(W.up.port, ds, d, g_pooled) < 0) {
        v->fail = 3;
        buf_str(&v->why, "the direct run failed (upstream Redis gone?)");
        jobs_free(d, g_pooled);
        return;
    }
    /* the direct run's connections gone (the pool's own can only have
     * fewer by now), then its data */
    uint64_t end = th_now_ms() + 5000;
    long now;
    while ((now = upstream_clients()) > before && th_now_ms() < end)
        usleep(2000);
    if (now > before)
        fprintf(stderr, "diff_resp: the upstream still has clients of the direct run\n");
    if (upstream_flush() < 0) {
        v->fail = 3;
        buf_str(&v->why, "the upstream did not answer FLUSHALL");
        jobs_free(d, g_pooled);
        return;
    }
    int rc = run_sides(W.pool, ds, p, g_pooled);
    if (!sluice_alive()) {
        v->fail = 2;
        buf_str(&v->why, "sluice died on the pooled listener");
        buf_fmt(&v->sig, "pool: sluice died: %s", g_death.p ? g_death.p : "");
    } else if (rc < 0) {
        v->fail = 3;
        buf_str(&v->why, "could not connect to the pooled listener");
    }
    for (unsigned k = 0; k < g_pooled && v->fail != 2 && v->fail != 3; k++) {
        const struct buf *data = &d[k].data;
        int long_line = 0;
        for (size_t at = 0, run = 0; at < data->len && !long_line; at++) {
            run = data->p[at] == '\n' ? 0 : run + 1;
            long_line = run > 64 * 1024;
        }
        int reply_off = memmem(data->p, data->len, "REPLY", 5) != NULL;
        struct buf why = { 0 }, sig = { 0 };
        if (compare(&d[k].o, &p[k].o, reply_off, long_line, &why, &sig)) {
            bad_client[k] = 1;
            if (!v->fail) /* the class of the first one groups the round */
                buf_fmt(&v->sig, "pool: ");
            if (!v->fail)
                buf_add(&v->sig, sig.p, sig.len);
            v->fail = 1;
            buf_fmt(&v->why, "%sclient %u: ", v->why.len ? "\n   " : "", k);
            buf_add(&v->why, why.p, why.len);
        }
        buf_free(&why);
        buf_free(&sig);
    }
    jobs_free(d, g_pooled);
    jobs_free(p, g_pooled);
    if (!v->fail && !sluice_alive()) {
        v->fail = 2;
        buf_fmt(&v->why, "sluice died after the pooled runs");
        buf_fmt(&v->sig, "after: sluice died: %s", g_death.p ? g_death.p : "");
    }
}

/* The loop of --pooled: rounds from <first>, for <rounds> or <seconds>. */
static int pooled_main(uint64_t seed, uint64_t rounds, uint64_t first, double seconds, int keep_going)
{
    uint64_t t0 = th_now_ms(), done = 0, failures = 0, deaths = 0;
    struct stream ds[POOL_MAX_CLIENTS];
    int bad[POOL_MAX_CLIENTS];
    struct {
        char    *sig;
        uint64_t first, count;
    } sigs[64];
    size_t nsigs = 0;
    printf("diff_resp: pooled: rounds of %u concurrent clients, upstream_pool = %u, listener :%d\n",
           g_pooled, g_pool_size, W.pool);
    fflush(stdout);
    for (uint64_t idx = first;; idx++) {
        if (rounds && done >= rounds)
            break;
        if (seconds > 0 && th_now_ms() - t0 >= (uint64_t)(seconds * 1000))
            break;
        struct verdict v = { 0 };
        memset(ds, 0, sizeof(ds));
        generate_round(seed, idx, ds);
        check_round(ds, &v, bad);
        done++;
        if (g_verbose)
            printf("round %llu: %s\n", (unsigned long long)idx, v.fail ? "FAIL" : "ok");
        size_t known_sig = nsigs;
        for (size_t k = 0; v.fail && k < nsigs; k++)
            if (!strcmp(sigs[k].sig, v.sig.p ? v.sig.p : ""))
                known_sig = k;
        if (v.fail && known_sig < nsigs) {
            failures++;
            deaths += v.fail == 2;
            sigs[known_sig].count++;
            fprintf(stderr, "!! round %llu: again [%zu] %s\n", (unsigned long long)idx, known_sig + 1,
                    sigs[known_sig].sig);
            revive();
        } else if (v.fail) {
            failures++;
            deaths += v.fail == 2;
            if (nsigs < sizeof(sigs) / sizeof(sigs[0])) {
                sigs[nsigs].sig = strdup(v.sig.p ? v.sig.p : "");
                sigs[nsigs].first = idx;
                sigs[nsigs].count = 1;
                nsigs++;
            }
            fprintf(stderr, "\n!! round %llu of seed %llu (pooled, %u clients): %s %s\n",
                    (unsigned long long)idx, (unsigned long long)seed, g_pooled,
                    v.fail == 2 ? "SLUICE DIED" : v.fail == 1 ? "MISMATCH" : "ERROR",
                    v.sig.p ? v.sig.p : "");
            fprintf(stderr, "   rerun: --pooled %u --pool-size %u --seed %llu --first %llu --streams 1\n",
                    g_pooled, g_pool_size, (unsigned long long)seed, (unsigned long long)idx);
            fprintf(stderr, "   what differs: %s\n", v.why.p ? v.why.p : "");
            for (unsigned k = 0; k < g_pooled; k++) {
                char label[64], name[128];
                if (!bad[k] && v.fail == 1)
                    continue;
                snprintf(label, sizeof(label), "client %u's stream", k);
                report(label, &ds[k], &v);
                snprintf(name, sizeof(name), "s%llu-r%llu-c%u.resp", (unsigned long long)seed,
                         (unsigned long long)idx, k);
                save(&ds[k], name);
            }
            fflush(stderr);
            revive();
        }
        int stop = v.fail && (v.fail == 3 || !keep_going);
        buf_free(&v.why);
        buf_free(&v.sig);
        for (unsigned k = 0; k < g_pooled; k++)
            st_free(&ds[k]);
        if (stop)
            break;
        if (done % 100 == 0) {
            printf("diff_resp: %llu rounds, %llu failures, %.0f s\n", (unsigned long long)done,
                   (unsigned long long)failures, (th_now_ms() - t0) / 1000.0);
            fflush(stdout);
        }
    }
    int stop_rc = world_stop();
    for (size_t k = 0; k < nsigs; k++) {
        printf("diff_resp: failure [%zu] x%llu (first: round %llu): %s\n", k + 1,
               (unsigned long long)sigs[k].count, (unsigned long long)sigs[k].first, sigs[k].sig);
        free(sigs[k].sig);
    }
    printf("diff_resp: seed %llu: pooled: %llu rounds of %u clients in %.1f s: %llu failures "
           "(%llu sluice deaths, %u restarts)%s\n",
           (unsigned long long)seed, (unsigned long long)done, g_pooled, (th_now_ms() - t0) / 1000.0,
           (unsigned long long)failures, (unsigned long long)deaths, W.restarts,
           stop_rc ? "; sluice did not exit cleanly" : "");
    return failures || stop_rc ? 1 : 0;
}

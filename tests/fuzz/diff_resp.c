/* sluice — differential RESP fuzzer: Redis directly versus Redis through sluice.
 *
 * Every generated stream of requests is sent three times, each time on a
 * fresh connection and after a FLUSHALL of the upstream (so every run starts
 * from the same data): to Redis directly, through a sluice listener with no
 * limits ("plain"), and through a listener whose store-backed limits never
 * refuse ("lim": identity from AUTH / client name / first key, a request
 * limit, a delay limit and a bytes_in limit, all far above what a stream
 * sends, lease off: every request goes through the store verdict path; and
 * one limit that refuses the identity "deny", which no request has: "deny:x"
 * is only ever an ECHO or PING argument, so a THROTTLED reply means a
 * request was decided on another request's arguments). The
 * replies that come back must be the same, reply for reply, and both sides
 * must end the same way (closed, or answered up to the end marker), up to the
 * known differences listed in <known[]> (diff_resp_cmp.c). sluice must stay
 * alive: a sanitizer report kills it (SLUICE_BIN=build/san/sluice, the ASan +
 * UBSan build) and is a failure with its log printed.
 *
 *    generator --pieces--> stream bytes --writes (whole | byte by byte |
 *    random sizes | at piece boundaries, slowly)--> Redis      -> replies A
 *                                                   sluice plain -> replies B
 *                                                   sluice lim   -> replies C
 *    A == B == C (after normalisation), same ending, sluice alive
 *
 * A stream is a list of pieces: valid commands (multibulk or inline, with
 * quotes and escapes; GET/SET/INCR/DEL/lists/hashes/MULTI/EXEC/DISCARD/PING/
 * ECHO/CLIENT SETNAME/SELECT/HELLO 2|3/AUTH/BLPOP with short timeouts/
 * SUBSCRIBE/UNSUBSCRIBE/PUBLISH/RESET/EVAL/big SETs and ECHOs of up to
 * 400 KB), empty frames (*0, *-1, blank lines), malformed frames (bad
 * lengths, bad type bytes, NUL in a name, CR without LF, 80 KB lines,
 * negative lengths, `$x`), byte flips and truncations. The stream ends with
 * a marker (`PING __diff_resp_end__`, after an EXEC / CLIENT REPLY ON when
 * the generator left the connection in MULTI or with replies off): a run is
 * over when the marker's answer comes, the peer closes, or nothing came for
 * --quiet ms.
 *
 * Usage:
 *   diff_resp [--seed S] [--streams N] [--seconds T] [--first I] [--quiet MS]
 *             [--keep-going] [--no-minimize] [--out DIR] [--verbose]
 *   diff_resp --pooled K [--pool-size N] [--seed S] [--streams N] ...
 *                                  rounds of K concurrent clients through a
 *                                  pooled listener (upstream_pool = N, default
 *                                  2), each against the same K sent directly
 *                                  (below, "pooled mode"); --streams counts rounds
 *   diff_resp --replay FILE...     send each file's bytes (several ways of
 *                                  splitting them) and compare
 *   diff_resp --list-known         print the known differences
 * Stream i of seed S is generated from (S, i) alone: `--seed S --first i
 * --streams 1` runs it again. On a failure the stream is minimised (pieces
 * dropped while it still fails) and both versions are written to --out
 * (default build/diff-resp) as raw bytes, for --replay. SLUICE_BIN selects
 * the sluice binary (default build/sluice). Exit status: 0 when every stream
 * matched, 1 otherwise.
 *
 * The files, each included here in this order (one program, one translation
 * unit): diff_resp_gen.c (the generator), diff_resp_side.c (one side: a
 * stream written, its replies read), diff_resp_cmp.c (the known differences,
 * the comparison), diff_resp_proc.c (redis-servers and sluice: start, reset,
 * deaths, stop), this file (one stream's three runs, minimising, replay,
 * main) and diff_resp_pool.c (the pooled mode).
 *
 * Built by `make fuzz-diff` (runs it for FUZZ_SECONDS against the ASan build);
 * tests/integration/test_diff_resp.c runs a short seeded smoke mode of it in
 * `make test`. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "integration/harness.h"
#include "proto/resp_reply.h"

#define END_TOKEN "__diff_resp_end__"

/* ---- small helpers -------------------------------------------------------- */

struct buf {
    char  *p;
    size_t len, cap;
};

static void buf_add(struct buf *b, const void *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p)
            abort();
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void buf_str(struct buf *b, const char *s) { buf_add(b, s, strlen(s)); }

static void buf_fmt(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_fmt(struct buf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    buf_add(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

static void buf_free(struct buf *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

/* splitmix64: stream i of seed S is generated from mix(S, i) alone. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static unsigned rnd(uint64_t *s, unsigned n) { return n ? (unsigned)(rng_next(s) % n) : 0; }
static int chance(uint64_t *s, unsigned pct) { return rnd(s, 100) < pct; }

/* Prints <p,n> escaped, at most <max> bytes of it. */
static void dump(FILE *f, const char *p, size_t n, size_t max)
{
    size_t i;
    for (i = 0; i < n && i < max; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\r')
            fputs("\\r", f);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c == '\\')
            fputs("\\\\", f);
        else if (c < 32 || c >= 127)
            fprintf(f, "\\x%02x", c);
        else
            fputc(c, f);
    }
    if (n > max)
        fprintf(f, "... (%zu bytes in all)", n);
}

#include "diff_resp_gen.c"  /* the generator: seeded streams of pieces */
#include "diff_resp_side.c" /* one side: writing a stream, reading its replies */
#include "diff_resp_cmp.c"  /* the known differences and the comparison */
#include "diff_resp_proc.c" /* the processes: redis-servers and sluice */

/* ---- one stream, three runs -------------------------------------------------------------- */

struct verdict {
    int       fail;   /* 0 ok, 1 mismatch, 2 sluice died, 3 could not run */
    struct buf why;
    struct buf sig;   /* the class of the failure, to group repeats */
};

/* Runs <s> directly and through both listeners; fills <v>. */
static void check_stream(const struct stream *s, struct verdict *v)
{
    struct buf data = { 0 };
    struct outcome d, p, l;
    memset(&d, 0, sizeof(d));
    memset(&p, 0, sizeof(p));
    memset(&l, 0, sizeof(l));
    v->fail = 0;
    v->why.len = 0;
    v->sig.len = 0;
    st_join(s, &data);
    /* a run of more than 64 KiB without LF: an inline line sluice refuses */
    int long_line = 0;
    for (size_t at = 0, run = 0; at < data.len && !long_line; at++) {
        run = data.p[at] == '\n' ? 0 : run + 1;
        long_line = run > 64 * 1024;
    }
    /* CLIENT REPLY may be spelled with inline escapes ("O\\x46F"): any
     * REPLY in the stream may have turned replies off */
    int reply_off = memmem(data.p, data.len, "REPLY", 5) != NULL;

    if (upstream_reset() < 0 || run_side(W.up.port, s, data.p, data.len, &d) < 0) {
        v->fail = 3;
        buf_str(&v->why, "the direct run failed (upstream Redis gone?)");
        goto out;
    }
    const int ports[2] = { W.plain, W.lim };
    const char *const names[2] = { "plain", "lim" };
    struct outcome *o[2] = { &p, &l };
    for (int k = 0; k < 2 && !v->fail; k++) {
        if (upstream_reset() < 0) {
            v->fail = 3;
            buf_str(&v->why, "the upstream did not answer FLUSHALL");
            break;
        }
        int rc = run_side(ports[k], s, data.p, data.len, o[k]);
        if (!sluice_alive()) {
            v->fail = 2;
            buf_fmt(&v->why, "sluice died on listener %s", names[k]);
            buf_fmt(&v->sig, "%s: sluice died: %s", names[k], g_death.p ? g_death.p : "");
            break;
        }
        if (rc < 0) {
            v->fail = 3;
            buf_fmt(&v->why, "could not connect to listener %s", names[k]);
            break;
        }
        struct buf why = { 0 }, sig = { 0 };
        if (compare(&d, o[k], reply_off, long_line, &why, &sig)) {
            v->fail = 1;
            buf_fmt(&v->why, "listener %s: ", names[k]);
            buf_add(&v->why, why.p, why.len);
            buf_fmt(&v->sig, "%s: ", names[k]);
            buf_add(&v->sig, sig.p, sig.len);
        }
        buf_free(&why);
        buf_free(&sig);
    }
    /* a late verdict can still hit a closed session: wait until the
     * upstream saw the last connection go, and look again, so a death is
     * blamed on this stream and not the next one */
    if (!v->fail && (upstream_reset() < 0 || !sluice_alive())) {
        v->fail = W.sl_pid > 0 ? 3 : 2;
        buf_fmt(&v->why, "sluice died after the runs");
        buf_fmt(&v->sig, "after: sluice died: %s", g_death.p ? g_death.p : "");
    }
out:
    out_free(&d);
    out_free(&p);
    out_free(&l);
    buf_free(&data);
}

/* ---- minimising, saving -------------------------------------------------------------------- */

static int g_verbose;

/* Restarts sluice after it died, so the search can go on. */
static void revive(void)
{
    if (W.sl_pid > 0)
        return;
    W.restarts++;
    if (sluice_start() < 0) {
        fprintf(stderr, "diff_resp: cannot restart sluice\n");
        exit(1);
    }
}

/* Two failures are "the same" for minimising when their classes are equal
 * (sig_pair: what Redis answered counts only as "a reply"). */
static int same_failure(const struct verdict *a, const char *sig)
{
    if (!a->fail || !a->sig.p)
        return 0;
    return !strcmp(a->sig.p, sig);
}

/* Drops pieces (halves, then one at a time) while the stream still fails
 * the same way. */
static void minimise(struct stream *s, const char *sig)
{
    struct verdict v = { 0 };
    size_t tries = 0;
    g_minimising = 1;
    for (size_t chunk = s->n / 2; chunk >= 1; chunk /= 2) {
        for (size_t at = 0; at + chunk <= s->n && s->n > 1 && tries < 300;) {
            struct stream t = { 0 };
            t.mode = s->mode;
            t.wseed = s->wseed;
            for (size_t i = 0; i < s->n; i++)
                if (i < at || i >= at + chunk)
                    st_add(&t, s->v[i].p, s->v[i].len);
            check_stream(&t, &v);
            revive();
            tries++;
            if (same_failure(&v, sig)) {
                st_free(s);
                *s = t;
            } else {
                st_free(&t);
                at += chunk;
            }
        }
        if (chunk == 1)
            break;
    }
    g_minimising = 0;
    buf_free(&v.why);
    buf_free(&v.sig);
}

static const char *g_out = "build/diff-resp";

static void save(const struct stream *s, const char *name)
{
    char path[512];
    struct buf data = { 0 };
    mkdir(g_out, 0755);
    snprintf(path, sizeof(path), "%s/%s", g_out, name);
    st_join(s, &data);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data.p, 1, data.len, f);
        fclose(f);
        fprintf(stderr, "   saved %s (%zu bytes, written %s)\n", path, data.len, wmode_name[s->mode]);
    }
    buf_free(&data);
}

static void report(const char *label, const struct stream *s, const struct verdict *v)
{
    struct buf data = { 0 };
    st_join(s, &data);
    fprintf(stderr, "   %s (%zu pieces, %zu bytes, written %s): ", label, s->n, data.len,
            wmode_name[s->mode]);
    dump(stderr, data.p, data.len, 1500);
    fprintf(stderr, "\n   what differs: %s\n", v->why.p ? v->why.p : "");
    buf_free(&data);
}

/* ---- replay ------------------------------------------------------------------------------------- */

static int replay(int nfiles, char **files)
{
    int bad = 0;
    for (int i = 0; i < nfiles; i++) {
        char *raw = NULL;
        size_t len = 0;
        FILE *f = fopen(files[i], "rb");
        if (!f) {
            perror(files[i]);
            return 1;
        }
        struct buf b = { 0 };
        char tmp[65536];
        size_t k;
        while ((k = fread(tmp, 1, sizeof(tmp), f)) > 0)
            buf_add(&b, tmp, k);
        fclose(f);
        raw = b.p;
        len = b.len;
        for (int mode = 0; mode < W_NMODES; mode++) {
            if (mode == W_BYTES && len > 65536)
                continue;
            struct stream s = { 0 };
            st_add(&s, raw ? raw : "", len);
            s.mode = mode;
            s.wseed = 1;
            struct verdict v = { 0 };
            check_stream(&s, &v);
            printf("%s written %s: %s %s\n", files[i], wmode_name[mode],
                   v.fail ? (v.fail == 2 ? "SLUICE DIED" : "MISMATCH") : "match",
                   v.sig.p ? v.sig.p : "");
            if (v.fail) {
                report("stream", &s, &v);
                bad = 1;
            }
            revive();
            buf_free(&v.why);
            buf_free(&v.sig);
            st_free(&s);
        }
        buf_free(&b);
    }
    return bad;
}

#include "diff_resp_pool.c" /* the pooled mode: rounds of concurrent clients */

/* ---- main ---------------------------------------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr, "usage: diff_resp [--seed S] [--streams N] [--seconds T] [--first I] [--quiet MS]\n"
                    "                 [--keep-going] [--no-minimize] [--out DIR] [--verbose]\n"
                    "                 [--pooled K [--pool-size N]]\n"
                    "       diff_resp --replay FILE...\n"
                    "       diff_resp --list-known\n");
}

int diff_resp_main(int argc, char **argv);
int diff_resp_main(int argc, char **argv)
{
    uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16);
    uint64_t streams = 0, first = 0;
    double seconds = 0;
    int keep_going = 0, minimize = 1, i;
    int replay_at = 0;

    signal(SIGPIPE, SIG_IGN);
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--seed") && val) {
            seed = strtoull(val, NULL, 0);
            i++;
        } else if (!strcmp(a, "--streams") && val) {
            streams = strtoull(val, NULL, 0);
            i++;
        } else if (!strcmp(a, "--first") && val) {
            first = strtoull(val, NULL, 0);
            i++;
        } else if (!strcmp(a, "--seconds") && val) {
            seconds = atof(val);
            i++;
        } else if (!strcmp(a, "--quiet") && val) {
            g_quiet_ms = atoi(val);
            i++;
        } else if (!strcmp(a, "--out") && val) {
            g_out = val;
            i++;
        } else if (!strcmp(a, "--keep-going")) {
            keep_going = 1;
        } else if (!strcmp(a, "--no-minimize")) {
            minimize = 0;
        } else if (!strcmp(a, "--pooled") && val) {
            g_pooled = (unsigned)strtoul(val, NULL, 0);
            if (g_pooled < 1 || g_pooled > POOL_MAX_CLIENTS) {
                fprintf(stderr, "diff_resp: --pooled takes 1 to %d clients\n", POOL_MAX_CLIENTS);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--pool-size") && val) {
            g_pool_size = (unsigned)strtoul(val, NULL, 0);
            i++;
        } else if (!strcmp(a, "--verbose")) {
            g_verbose = 1;
        } else if (!strcmp(a, "--replay") && val) {
            replay_at = i + 1;
            break;
        } else if (!strcmp(a, "--list-known")) {
            for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); k++)
                printf("- %s\n  %s\n  documented: %s\n", known[k].what, known[k].how, known[k].readme);
            return 0;
        } else {
            usage();
            return 2;
        }
    }
    if (!streams && seconds <= 0)
        streams = 200;

    if (world_start() < 0) {
        fprintf(stderr, "diff_resp: could not start redis-server / sluice (%s)\n", th_sluice_bin());
        world_stop();
        return 1;
    }
    printf("diff_resp: sluice %s, upstream :%d, store :%d, listeners plain :%d lim :%d\n",
           th_sluice_bin(), W.up.port, W.store.port, W.plain, W.lim);
    if (replay_at) {
        int bad = replay(argc - replay_at, argv + replay_at);
        bad |= world_stop() != 0;
        return bad;
    }
    printf("diff_resp: seed %llu (replay one %s: --seed %llu --first I --streams 1)\n",
           (unsigned long long)seed, g_pooled ? "round" : "stream", (unsigned long long)seed);
    fflush(stdout);
    if (g_pooled)
        return pooled_main(seed, streams, first, seconds, keep_going);

    uint64_t t0 = th_now_ms(), done = 0, failures = 0, deaths = 0, timeouts = 0;
    uint64_t by_mode[W_NMODES] = { 0 };
    struct {
        char    *sig;
        uint64_t first, count;
    } sigs[64];
    size_t nsigs = 0;
    for (uint64_t idx = first;; idx++) {
        if (streams && done >= streams)
            break;
        if (seconds > 0 && th_now_ms() - t0 >= (uint64_t)(seconds * 1000))
            break;
        struct stream s = { 0 };
        struct verdict v = { 0 };
        generate(seed, idx, &s);
        by_mode[s.mode]++;
        check_stream(&s, &v);
        done++;
        if (g_verbose) {
            struct buf data = { 0 };
            st_join(&s, &data);
            printf("stream %llu (%zu bytes, %s): %s\n", (unsigned long long)idx, data.len,
                   wmode_name[s.mode], v.fail ? "FAIL" : "ok");
            buf_free(&data);
        }
        if (v.fail) {
            failures++;
            deaths += v.fail == 2;
            size_t k;
            for (k = 0; k < nsigs; k++)
                if (!strcmp(sigs[k].sig, v.sig.p ? v.sig.p : ""))
                    break;
            if (k < nsigs) {
                sigs[k].count++;
                fprintf(stderr, "!! stream %llu: again [%zu] %s\n", (unsigned long long)idx, k + 1,
                        sigs[k].sig);
                revive();
            } else {
                if (nsigs < sizeof(sigs) / sizeof(sigs[0])) {
                    sigs[nsigs].sig = strdup(v.sig.p ? v.sig.p : "");
                    sigs[nsigs].first = idx;
                    sigs[nsigs].count = 1;
                    nsigs++;
                }
                fprintf(stderr, "\n!! stream %llu of seed %llu: %s [%zu] %s\n",
                        (unsigned long long)idx, (unsigned long long)seed,
                        v.fail == 2 ? "SLUICE DIED" : v.fail == 1 ? "MISMATCH" : "ERROR", nsigs,
                        v.sig.p ? v.sig.p : "");
                fprintf(stderr, "   rerun: --seed %llu --first %llu --streams 1\n",
                        (unsigned long long)seed, (unsigned long long)idx);
                report("stream", &s, &v);
                char name[128];
                snprintf(name, sizeof(name), "s%llu-i%llu.resp", (unsigned long long)seed,
                         (unsigned long long)idx);
                save(&s, name);
                revive();
                if (minimize && v.fail != 3) {
                    minimise(&s, v.sig.p ? v.sig.p : "");
                    struct verdict m = { 0 };
                    check_stream(&s, &m);
                    revive();
                    report("minimised", &s, m.fail ? &m : &v);
                    snprintf(name, sizeof(name), "s%llu-i%llu.min.resp", (unsigned long long)seed,
                             (unsigned long long)idx);
                    save(&s, name);
                    buf_free(&m.why);
                    buf_free(&m.sig);
                }
            }
            fflush(stderr);
            if (v.fail == 3 || !keep_going) {
                buf_free(&v.why);
                buf_free(&v.sig);
                st_free(&s);
                break;
            }
        }
        buf_free(&v.sig);
        buf_free(&v.why);
        st_free(&s);
        if (done % 500 == 0) {
            printf("diff_resp: %llu streams, %llu failures, %.0f s\n", (unsigned long long)done,
                   (unsigned long long)failures, (th_now_ms() - t0) / 1000.0);
            fflush(stdout);
        }
    }
    (void)timeouts;
    int stop_rc = world_stop();
    for (size_t k = 0; k < nsigs; k++) {
        printf("diff_resp: failure [%zu] x%llu (first: stream %llu): %s\n", k + 1,
               (unsigned long long)sigs[k].count, (unsigned long long)sigs[k].first, sigs[k].sig);
        free(sigs[k].sig);
    }
    printf("diff_resp: seed %llu: %llu streams (whole %llu, bytes %llu, random %llu, pieces %llu, "
           "slow %llu) in %.1f s: %llu failures (%llu sluice deaths, %u restarts)%s\n",
           (unsigned long long)seed, (unsigned long long)done, (unsigned long long)by_mode[0],
           (unsigned long long)by_mode[1], (unsigned long long)by_mode[2],
           (unsigned long long)by_mode[3], (unsigned long long)by_mode[4],
           (th_now_ms() - t0) / 1000.0, (unsigned long long)failures, (unsigned long long)deaths,
           W.restarts, stop_rc ? "; sluice did not exit cleanly" : "");
    return failures || stop_rc ? 1 : 0;
}

#ifndef DIFF_RESP_NO_MAIN
int main(int argc, char **argv)
{
    return diff_resp_main(argc, argv);
}
#endif

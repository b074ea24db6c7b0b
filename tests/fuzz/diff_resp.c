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
 * known differences listed in <known[]> below. sluice must stay alive: a
 * sanitizer report kills it (SLUICE_BIN=build/san/sluice, the ASan + UBSan
 * build) and is a failure with its log printed.
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

/* ---- known differences ---------------------------------------------------
 *
 * Nothing is ignored silently: every difference the comparison forgives, or
 * the generator avoids, is listed here with the README line that documents
 * it. "normalised": the comparison masks it; "not generated": the generator
 * never produces the input (so it can neither fail nor pass). */
struct known {
    const char *what;
    const char *how;
    const char *readme; /* where README.md documents it */
};

static const struct known known[] = {
    { "connection ids (HELLO's \"id\" field)", "normalised: the integer after a bulk \"id\" is masked",
      "README \"Transparent, 1:1\": each client connection gets its own upstream connection "
      "(so its own id, directly as through sluice); pooled mode: docs/resp.md \"Pooled "
      "listeners\": HELLO's reply carries the id of the upstream connection that answered it" },
    { "CLIENT ID / CLIENT INFO / CLIENT LIST / INFO / TIME / RANDOMKEY / KEYS / MONITOR",
      "not generated",
      "not a sluice difference: ids, addresses, ports, clocks and hash order differ between any "
      "two connections or runs" },
    { "inline lines between 60 KiB and 70 KiB, count lines near 64 KiB", "not generated",
      "README Reference \"Big requests\": inline requests are held whole ... `too big inline "
      "request` (Redis's limit is the same 64 KiB, give or take the CRLF)" },
    { "an inline line over 64 KiB whose LF arrived (a mutated stream makes one)",
      "forgiven: sluice's `too big inline request` where Redis answered the line",
      "README \"RESP framing\": a line without CRLF is capped at 64 KiB (Redis checks only "
      "while the LF has not arrived, so it runs a longer line that came whole)" },
    { "multibulk counts above 1,048,576", "not generated",
      "README \"RESP framing\": sluice caps the argument count (1,048,576)" },
    { "CLIENT REPLY inside MULTI; UNSUBSCRIBE/PUNSUBSCRIBE of named channels inside MULTI; WATCH",
      "not generated",
      "README Reference \"Pub/sub\": Not followed: a CLIENT REPLY queued inside MULTI, an "
      "unsubscribe of named channels queued inside MULTI, and an EXEC that WATCH makes fail" },
    { "CLIENT REPLY OFF (or SKIP) and then a protocol error",
      "normalised: Redis 7.0 leaves the connection open (no reply, input no longer read), "
      "sluice closes it; forgiven when the stream holds REPLY OFF/SKIP",
      "docs/resp.md \"CLIENT REPLY OFF (or SKIP with its skip still to come) and a protocol "
      "error\": no word is said; Redis keeps the connection open but reads no more, sluice "
      "closes it" },
    { "connection reset instead of FIN after a protocol error", "normalised: both are a close",
      "README Reference \"Closing\": sluice half-closes and lingers; Redis closes at once (a "
      "reset when unread input remains)" },
    { "replies lost to Redis's reset after a protocol error",
      "forgiven: fewer replies directly when the direct connection was reset and sluice's "
      "last reply is the protocol error",
      "a reset discards what the client had received and not read yet (a large reply "
      "ahead of the error, seen under load); sluice's close delivers them" },
    { "pooled mode: a key or channel of another client, DBSIZE, byte flips", "not generated",
      "not a sluice difference: concurrent clients sharing data have no defined order, "
      "directly as through sluice, so each client has its own key and channel prefix (a flip "
      "could make one client's key another's)" },
    { "pooled mode: HELLO queued in MULTI under a WATCH", "not generated",
      "docs/resp.md \"Pub/sub\" (1:1 too): Not followed: ... an EXEC that WATCH makes fail "
      "(taken as run)" },
};

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

/* ---- the stream: pieces ---------------------------------------------------- */

struct piece {
    char  *p;
    size_t len;
};

struct stream {
    struct piece *v;
    size_t        n, cap;
    int           mode;     /* how it is written (enum wmode) */
    uint64_t      wseed;    /* seed of the write sizes */
};

static void st_add(struct stream *s, const char *p, size_t len)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->v = realloc(s->v, s->cap * sizeof(*s->v));
        if (!s->v)
            abort();
    }
    s->v[s->n].p = malloc(len ? len : 1);
    if (!s->v[s->n].p)
        abort();
    memcpy(s->v[s->n].p, p, len);
    s->v[s->n].len = len;
    s->n++;
}

static void st_free(struct stream *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i].p);
    free(s->v);
    memset(s, 0, sizeof(*s));
}

static void st_join(const struct stream *s, struct buf *out)
{
    out->len = 0;
    for (size_t i = 0; i < s->n; i++)
        buf_add(out, s->v[i].p, s->v[i].len);
    if (!out->p)
        buf_add(out, "", 0);
}

/* ---- the generator ---------------------------------------------------------- */

struct arg {
    const char *p;
    size_t      len;
};

struct gen {
    uint64_t rng;
    int      multi;     /* the generator left the connection in MULTI */
    int      reply_off; /* ... with CLIENT REPLY OFF/SKIP */
    int      resp3;
    int      subscribed;
    char     scratch[16][64]; /* short argument texts */
    unsigned nscratch;
    const char *pfx;    /* pooled mode: the client's key and channel prefix */
    int      watched;   /* pooled mode: a WATCH may be in force */
};

static const char *const keys[] = { "k1", "k2", "n", "alice:x", "bob:y", "l", "h", "s", "z", "big" };

static const char *gkey(struct gen *g) { return keys[rnd(&g->rng, sizeof(keys) / sizeof(keys[0]))]; }

/* A short value: plain, empty, with blanks and quotes, or binary. */
static struct arg gval(struct gen *g)
{
    char *t = g->scratch[g->nscratch++ % 16];
    size_t n = 0;
    switch (rnd(&g->rng, 6)) {
    case 0:
        break; /* empty */
    case 1:
        n = (size_t)snprintf(t, 64, "%u", rnd(&g->rng, 1000));
        break;
    case 2: {
        static const char odd[] = " \"'\\\t\x01\x7f\xff\0\r\nab";
        n = 1 + rnd(&g->rng, 12);
        for (size_t i = 0; i < n; i++)
            t[i] = odd[rnd(&g->rng, sizeof(odd) - 1)];
        break;
    }
    default:
        n = 1 + rnd(&g->rng, 10);
        for (size_t i = 0; i < n; i++)
            t[i] = (char)('a' + rnd(&g->rng, 26));
    }
    return (struct arg){ t, n };
}

static struct arg lit(const char *s) { return (struct arg){ s, strlen(s) }; }

/* A key or channel name: as is, or (pooled mode) behind the client's own
 * prefix, so concurrent clients never share data and each one's replies
 * depend on its own stream alone. */
static struct arg K(struct gen *g, const char *name)
{
    if (!g->pfx)
        return lit(name);
    char *t = g->scratch[g->nscratch++ % 16];
    int n = snprintf(t, 64, "%s%s", g->pfx, name);
    return (struct arg){ t, (size_t)n };
}

static int plain_word(struct arg a)
{
    if (a.len == 0)
        return 0;
    for (size_t i = 0; i < a.len; i++) {
        unsigned char c = (unsigned char)a.p[i];
        if (c <= ' ' || c >= 127 || c == '"' || c == '\'' || c == '\\')
            return 0;
    }
    return 1;
}

/* Renders <argv> as one request: multibulk, or inline (quoted and escaped as
 * Redis's sdssplitargs reads them) when it is small enough. */
static void render(struct gen *g, struct stream *s, const struct arg *argv, unsigned argc, int inl_ok)
{
    struct buf b = { 0 };
    size_t total = 0;
    for (unsigned i = 0; i < argc; i++)
        total += argv[i].len;
    if (inl_ok && total < 2048 && chance(&g->rng, 30)) {
        static const char *const seps[] = { " ", " ", "  ", "\t" };
        for (unsigned i = 0; i < argc; i++) {
            struct arg a = argv[i];
            if (i)
                buf_str(&b, seps[rnd(&g->rng, 4)]);
            if (plain_word(a) && !chance(&g->rng, 20)) {
                buf_add(&b, a.p, a.len);
            } else if (plain_word(a) && chance(&g->rng, 50)) {
                buf_str(&b, "'");
                buf_add(&b, a.p, a.len);
                buf_str(&b, "'");
            } else {
                buf_str(&b, "\"");
                for (size_t k = 0; k < a.len; k++) {
                    unsigned char c = (unsigned char)a.p[k];
                    if (c == '"' || c == '\\')
                        buf_fmt(&b, "\\%c", c);
                    else if (c == '\n')
                        buf_str(&b, "\\n");
                    else if (c == '\r')
                        buf_str(&b, "\\r");
                    else if (c == '\t')
                        buf_str(&b, "\\t");
                    else if (c < 32 || c >= 127 || chance(&g->rng, 5))
                        buf_fmt(&b, "\\x%02x", c);
                    else
                        buf_add(&b, &a.p[k], 1);
                }
                buf_str(&b, "\"");
            }
        }
        buf_str(&b, chance(&g->rng, 80) ? "\r\n" : "\n");
    } else {
        buf_fmt(&b, "*%u\r\n", argc);
        for (unsigned i = 0; i < argc; i++) {
            buf_fmt(&b, "$%zu\r\n", argv[i].len);
            buf_add(&b, argv[i].p, argv[i].len);
            buf_str(&b, "\r\n");
        }
    }
    st_add(s, b.p, b.len);
    buf_free(&b);
}

/* One valid command (as Redis would see it; it may still be an error reply). */
static void gen_command(struct gen *g, struct stream *s)
{
    struct arg a[8];
    unsigned n = 0;
    char num[32];
    int inl = 1;

    /* RESP2 subscribed: Redis allows only (P|S)(UN)SUBSCRIBE, PING, QUIT,
     * RESET; the rest are errors, which is fine to send too. */
    switch (rnd(&g->rng, 40)) {
    case 0: case 1:
        a[n++] = lit("PING");
        if (chance(&g->rng, 50))
            a[n++] = chance(&g->rng, 30) ? lit("deny:x") : gval(g);
        break;
    case 2:
        a[n++] = lit("ECHO");
        a[n++] = chance(&g->rng, 40) ? lit("deny:x") : gval(g);
        break;
    case 3: case 4: case 5:
        a[n++] = lit("SET");
        a[n++] = K(g, gkey(g));
        a[n++] = gval(g);
        if (chance(&g->rng, 20))
            a[n++] = lit(chance(&g->rng, 50) ? "NX" : "GET");
        break;
    case 6: case 7: case 8:
        a[n++] = lit("GET");
        a[n++] = K(g, gkey(g));
        break;
    case 9: case 10:
        a[n++] = lit(chance(&g->rng, 70) ? "INCR" : "DECR");
        a[n++] = K(g, chance(&g->rng, 70) ? "n" : gkey(g));
        break;
    case 11:
        a[n++] = lit("DEL");
        a[n++] = K(g, gkey(g));
        if (chance(&g->rng, 50))
            a[n++] = K(g, gkey(g));
        break;
    case 12:
        a[n++] = lit(chance(&g->rng, 50) ? "LPUSH" : "RPUSH");
        a[n++] = K(g, "l");
        a[n++] = gval(g);
        break;
    case 13:
        a[n++] = lit("LRANGE");
        a[n++] = K(g, "l");
        a[n++] = lit("0");
        a[n++] = lit("-1");
        break;
    case 14: {
        static const char *const tmo[] = { "0.05", "0.1", "0.02" };
        a[n++] = lit("BLPOP");
        a[n++] = K(g, chance(&g->rng, 50) ? "l" : "nolist");
        a[n++] = lit(tmo[rnd(&g->rng, 3)]);
        break;
    }
    case 15:
        a[n++] = lit("HSET");
        a[n++] = K(g, "h");
        a[n++] = lit(chance(&g->rng, 50) ? "f1" : "f2");
        a[n++] = gval(g);
        break;
    case 16:
        a[n++] = lit("HGETALL");
        a[n++] = K(g, "h");
        break;
    case 17:
        a[n++] = lit("ZADD");
        a[n++] = K(g, "z");
        snprintf(num, sizeof(num), "%u.5", rnd(&g->rng, 100));
        a[n++] = lit(num);
        a[n++] = lit(chance(&g->rng, 50) ? "m1" : "m2");
        break;
    case 18:
        a[n++] = lit("ZRANGE");
        a[n++] = K(g, "z");
        a[n++] = lit("0");
        a[n++] = lit("-1");
        a[n++] = lit("WITHSCORES");
        break;
    case 19: case 20:
        if (g->multi) {
            a[n++] = lit(chance(&g->rng, 75) ? "EXEC" : "DISCARD");
            g->multi = g->watched = 0;
        } else {
            a[n++] = lit("MULTI");
            if (!g->subscribed || g->resp3)
                g->multi = 1;
        }
        break;
    case 21:
        a[n++] = lit(chance(&g->rng, 50) ? "EXEC" : "DISCARD");
        g->multi = g->watched = 0;
        break;
    case 22:
        a[n++] = lit("SELECT");
        snprintf(num, sizeof(num), "%u", rnd(&g->rng, 4));
        a[n++] = lit(num);
        break;
    case 23:
        a[n++] = lit("CLIENT");
        if (chance(&g->rng, 60)) {
            static const char *const names[] = { "carol", "alice", "127.0.0.1", "a b", "" };
            a[n++] = lit("SETNAME");
            a[n++] = lit(names[rnd(&g->rng, 5)]);
        } else {
            a[n++] = lit("GETNAME");
        }
        break;
    case 24:
        if (g->multi && g->watched)
            goto ping; /* an EXEC that WATCH makes fail is not followed (README) */
        a[n++] = lit("HELLO");
        if (g->multi || (g->subscribed && !g->resp3)) {
            a[n++] = lit("2"); /* queued / refused: its effect is not tracked here */
            break;
        }
        g->resp3 = chance(&g->rng, 50);
        a[n++] = lit(g->resp3 ? "3" : "2");
        if (chance(&g->rng, 30)) {
            a[n++] = lit("AUTH");
            a[n++] = lit("default");
            a[n++] = lit("pw");
        }
        if (chance(&g->rng, 30)) {
            a[n++] = lit("SETNAME");
            a[n++] = lit("hello-name");
        }
        break;
    case 25:
        a[n++] = lit("AUTH");
        if (chance(&g->rng, 50))
            a[n++] = lit(chance(&g->rng, 50) ? "default" : "alice");
        a[n++] = lit("wrong");
        break;
    case 26:
        if (g->multi)
            goto ping; /* subscribes in MULTI are followed, but keep tail logic simple */
        a[n++] = lit(chance(&g->rng, 70) ? "SUBSCRIBE" : "PSUBSCRIBE");
        a[n++] = K(g, "ch1");
        if (chance(&g->rng, 50))
            a[n++] = K(g, "ch2");
        g->subscribed = 1;
        break;
    case 27:
        if (g->multi)
            goto ping; /* not followed in MULTI (README): not generated */
        a[n++] = lit(chance(&g->rng, 70) ? "UNSUBSCRIBE" : "PUNSUBSCRIBE");
        if (chance(&g->rng, 50))
            a[n++] = K(g, "ch1");
        break;
    case 28:
        a[n++] = lit("PUBLISH");
        a[n++] = K(g, "ch1");
        a[n++] = gval(g);
        break;
    case 29:
        if (g->multi)
            goto ping;
        a[n++] = lit("RESET");
        g->multi = g->reply_off = g->resp3 = g->subscribed = g->watched = 0;
        break;
    case 30:
        a[n++] = lit("EVAL");
        /* pooled: the script's own key is the client's, not the shared 'n' */
        a[n++] = lit(chance(&g->rng, 50) ? (g->pfx ? "return {1,{2,{'x',{3}}},redis.call('INCR',KEYS[1])}"
                                                   : "return {1,{2,{'x',{3}}},redis.call('INCR','n')}")
                                          : "return redis.call('GET', KEYS[1])");
        a[n++] = lit("1");
        a[n++] = K(g, gkey(g));
        break;
    case 31:
        a[n++] = lit("NOSUCHCMD");
        a[n++] = gval(g);
        break;
    case 32:
        a[n++] = lit("GET"); /* wrong arity */
        break;
    case 33:
        a[n++] = lit("MSET");
        a[n++] = K(g, "alice:x");
        a[n++] = gval(g);
        a[n++] = K(g, "bob:y");
        a[n++] = gval(g);
        break;
    case 34:
        a[n++] = lit("APPEND");
        a[n++] = K(g, gkey(g));
        a[n++] = gval(g);
        break;
    case 35:
        if (g->pfx)
            goto ping; /* pooled: the database holds the other clients' keys too */
        a[n++] = lit("DBSIZE");
        break;
    case 36:
        if (g->multi)
            goto ping; /* CLIENT REPLY in MULTI is not followed (README) */
        a[n++] = lit("CLIENT");
        a[n++] = lit("REPLY");
        switch (rnd(&g->rng, 3)) {
        case 0: a[n++] = lit("OFF"); g->reply_off = 1; break;
        case 1: a[n++] = lit("SKIP"); g->reply_off = 1; break;
        default: a[n++] = lit("ON"); g->reply_off = 0;
        }
        break;
    case 37: case 38: {
        /* a big argument: 16 KB .. 400 KB, split across reads by the writer */
        size_t len = 16384 + rnd(&g->rng, chance(&g->rng, 30) ? 400000 : 40000);
        char *v = malloc(len);
        if (!v)
            abort();
        for (size_t i = 0; i < len; i++)
            v[i] = (char)('a' + (i * 7 + len) % 26);
        if (chance(&g->rng, 60)) {
            a[n++] = lit("SET");
            a[n++] = K(g, chance(&g->rng, 50) ? "big" : "bob:big");
        } else {
            a[n++] = lit("ECHO");
        }
        a[n++] = (struct arg){ v, len };
        render(g, s, a, n, 0);
        free(v);
        return;
    }
    case 39:
        if (!g->pfx)
            goto ping;
        /* pooled only: WATCH of the client's own keys (its own writes alone
         * decide whether EXEC runs), UNWATCH; inside MULTI Redis refuses it */
        if (chance(&g->rng, 70)) {
            a[n++] = lit("WATCH");
            a[n++] = K(g, gkey(g));
            g->watched |= !g->multi;
        } else {
            a[n++] = lit("UNWATCH");
            g->watched &= g->multi; /* queued in MULTI: EXEC ends it anyway */
        }
        break;
    default:
    ping:
        a[n++] = lit("PING");
        inl = 1;
    }
    render(g, s, a, n, inl);
}

/* A malformed (or odd but valid) frame, as a piece of its own. Returns 1
 * for an 80 KB+ line without CR: it must end the stream (nothing after it,
 * no end marker), or a CR sent after it could reach Redis before or after
 * its 64 KiB check, depending on how its reads fall. */
static int gen_bad(struct gen *g, struct stream *s)
{
    static const struct {
        const char *p;
        size_t      len;
    } bad[] = {
#define B(x) { x, sizeof(x) - 1 }
        B("*1\r\n$x\r\n"),
        B("*abc\r\n"),
        B("*1\r\n:1\r\n"),
        B("*2\r\n$3\r\nGET\r\n+k\r\n"),
        B("*1\r\n$4\r\nSET\0\r\n"),
        B("*3\r\n$3\r\nSET\r\n$2\r\nk\0\r\n$1\r\nv\r\n"),
        B("*2\r\n$3\r\nGET\r\n$8\r\nalice\0:x\r\n"),
        B("*1\r\n$-1\r\n"),
        B("*-7\r\n"),
        B("*0\r\n"),
        B("*-1\r\n"),
        B("\r\n"),
        B("\n"),
        B("   \r\n"),
        B("*2\r\n$3\r\nGET\r\n$600000000\r\n"),
        B("*1\r\n$99999999999999999999\r\n"),
        B("*99999999999999999999\r\n"),
        B("*1\r$4\r\nPING\r\n"),
        B("*1\r\n$4\r\nPINGxx"),
        B("*1\r\n$4\r\nPING\rx"),
        B("\x00\x01garbage\r\n"),
        B("SET \"k v\r\n"),
        B("SET \"a\"b c\r\n"),
        B("SET 'a\\'b' c\r\n"),
        B("ECHO \"\\x4x\\q\"\r\n"),
        B("*1\r\n$0\r\n\r\n"),
        B("*1 \r\n$4\r\nPING\r\n"),
        B("*+1\r\n$4\r\nPING\r\n"),
        B("*01\r\n$4\r\nPING\r\n"),
        B("*1\r\n$04\r\nPING\r\n"),
        B("*1\r\n$ 4\r\nPING\r\n"),
        B("*1\r\n\r\n"),
        B("*1\r\n\xff"),
        B("*2\r\n$4\r\nECHO\r\n$-0\r\n"),
        B("$4\r\nPING\r\n"),
        B(":1\r\n"),
        B("*2\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n"),
        B("*1\r\n$4\r\nQUIT\r\n"),
        B("*3\r\n$5\r\nBLPOP\r\n$6\r\nnolist\r\n$3\r\n0.1\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"
          "*1\r\n$x\r\n"),
        B("*3\r\n$3\r\nSET\r\n$6\r\ndropme\r\n$1\r\nv\r\n*1\r\n$x\r\n"),
#undef B
    };
    unsigned k = rnd(&g->rng, sizeof(bad) / sizeof(bad[0]) + 3);
    if (k < sizeof(bad) / sizeof(bad[0])) {
        st_add(s, bad[k].p, bad[k].len);
        return 0;
    }
    /* an 80 KB .. 150 KB line without CR: count, bulk length, or inline */
    struct buf b = { 0 };
    size_t len = 80000 + rnd(&g->rng, 70000);
    const char *head = k == sizeof(bad) / sizeof(bad[0]) ? "*" : k == sizeof(bad) / sizeof(bad[0]) + 1 ? "*1\r\n$" : "ECHO ";
    buf_str(&b, head);
    while (b.len < len)
        buf_str(&b, head[0] == 'E' ? "abcdefgh" : "1234567890");
    st_add(s, b.p, b.len);
    buf_free(&b);
    return 1;
}

/* Flips 1..3 bytes of a random piece (the end marker is added after this). */
static void mutate_flip(struct gen *g, struct stream *s)
{
    static const char special[] = "\0\r\n$*-:+ \"'\\0123456789x";
    if (s->n == 0)
        return;
    struct piece *p = &s->v[rnd(&g->rng, (unsigned)s->n)];
    if (p->len == 0)
        return;
    unsigned flips = 1 + rnd(&g->rng, 3);
    for (unsigned i = 0; i < flips; i++) {
        /* mostly near the head, where the framing is */
        size_t at = rnd(&g->rng, (unsigned)(p->len < 64 || chance(&g->rng, 20) ? p->len : 64));
        p->p[at] = chance(&g->rng, 60) ? special[rnd(&g->rng, sizeof(special) - 1)]
                                       : (char)rnd(&g->rng, 256);
    }
}

enum wmode { W_WHOLE, W_BYTES, W_RANDOM, W_PIECES, W_SLOW, W_NMODES };
static const char *const wmode_name[] = { "whole", "bytes", "random", "pieces", "slow" };

/* Stream <idx> of <seed>; <pfx> (pooled mode) prefixes every key and
 * channel, makes streams longer (so concurrent clients overlap) and flips
 * no bytes (a flip could make one client's key another's). */
static void generate_for(uint64_t seed, uint64_t idx, const char *pfx, struct stream *s)
{
    struct gen g = { 0 };
    g.rng = seed * 0x2545f4914f6cdd1dull + idx;
    g.pfx = pfx;
    rng_next(&g.rng);

    unsigned n = chance(&g.rng, 15) ? 10 + rnd(&g.rng, 40) : 1 + rnd(&g.rng, 10);
    int bad = chance(&g.rng, 40), flip = chance(&g.rng, 12), cut = chance(&g.rng, 4);
    if (pfx) {
        n = 5 + rnd(&g.rng, 40);
        bad = chance(&g.rng, 25);
        flip = 0;
    }
    unsigned bad_at = rnd(&g.rng, n + 1);

    int last = 0;
    for (unsigned i = 0; i <= n && !last; i++) {
        if (bad && i == bad_at)
            last = gen_bad(&g, s);
        if (i < n && !last)
            gen_command(&g, s);
    }
    if (flip)
        mutate_flip(&g, s);
    if (cut && s->n > 0) {
        struct piece *p = &s->v[rnd(&g.rng, (unsigned)s->n)];
        p->len = rnd(&g.rng, (unsigned)p->len);
    }
    /* the end marker: leave MULTI and CLIENT REPLY OFF first */
    if (last)
        ;
    else if (g.multi)
        st_add(s, "*1\r\n$4\r\nEXEC\r\n", 14);
    if (!last && g.reply_off)
        st_add(s, "*3\r\n$6\r\nCLIENT\r\n$5\r\nREPLY\r\n$2\r\nON\r\n", 35);
    static const char marker[] = "*2\r\n$4\r\nPING\r\n$17\r\n" END_TOKEN "\r\n";
    if (!last)
        st_add(s, marker, sizeof(marker) - 1);

    size_t total = 0;
    for (size_t i = 0; i < s->n; i++)
        total += s->v[i].len;
    s->mode = (int)rnd(&g.rng, W_NMODES);
    if (s->mode == W_BYTES && total > 8192)
        s->mode = W_RANDOM;
    s->wseed = rng_next(&g.rng);
}

static void generate(uint64_t seed, uint64_t idx, struct stream *s) { generate_for(seed, idx, NULL, s); }

/* ---- running one side --------------------------------------------------------- */

enum ending { END_MARKER, END_CLOSED, END_TIMEOUT };
static const char *const ending_name[] = { "answered up to the end marker", "closed by the peer",
                                           "no answer (quiet timeout)" };

struct outcome {
    struct buf raw;    /* every byte received */
    size_t    *ends;   /* end offset of each complete reply */
    size_t     n, cap;
    int        ending;
    int        bad;    /* the replies were not RESP (offset of the trouble in raw) */
    size_t     bad_at;
    int        reset;  /* the peer reset the connection: what it sent unread may be lost */
};

static void out_free(struct outcome *o)
{
    buf_free(&o->raw);
    free(o->ends);
    memset(o, 0, sizeof(*o));
}

/* Write sizes for <len> bytes of <s> in its mode; returns the count. */
static size_t plan(const struct stream *s, size_t len, size_t **sizes, int *gap_us)
{
    uint64_t r = s->wseed;
    size_t cap = 16, n = 0;
    size_t *v = malloc(cap * sizeof(*v));
    *gap_us = 0;
#define PUSH(x)                                                     \
    do {                                                            \
        if (n == cap) {                                             \
            cap *= 2;                                               \
            v = realloc(v, cap * sizeof(*v));                       \
        }                                                           \
        v[n++] = (x);                                               \
    } while (0)
    switch (s->mode) {
    case W_WHOLE:
        PUSH(len);
        break;
    case W_BYTES:
        for (size_t i = 0; i < len; i++)
            PUSH((size_t)1);
        break;
    case W_RANDOM: {
        static const unsigned maxes[] = { 7, 64, 1024, 16384 };
        unsigned mx = maxes[rnd(&r, 4)];
        for (size_t at = 0; at < len;) {
            size_t k = 1 + rnd(&r, mx);
            if (k > len - at)
                k = len - at;
            PUSH(k);
            at += k;
        }
        break;
    }
    case W_PIECES:
        *gap_us = 2000;
        for (size_t i = 0; i < s->n; i++)
            if (s->v[i].len)
                PUSH(s->v[i].len);
        break;
    default: { /* W_SLOW: up to 12 writes at random places, 3 ms apart */
        *gap_us = 3000;
        unsigned k = 2 + rnd(&r, 11);
        size_t at = 0;
        for (unsigned i = 1; i < k && at < len; i++) {
            size_t step = 1 + rnd(&r, (unsigned)((len - at) / (k - i) * 2 + 1));
            if (step > len - at)
                step = len - at;
            PUSH(step);
            at += step;
        }
        if (at < len)
            PUSH(len - at);
    }
    }
#undef PUSH
    *sizes = v;
    return n;
}

struct reader {
    struct sl_reply_scan scan;
    size_t               scanned; /* bytes of raw already given to the scanner */
    size_t               start;   /* where the reply being scanned began */
};

/* Scans what arrived; sets o->ending = END_MARKER once the marker's answer came. */
static void reader_scan(struct reader *rd, struct outcome *o)
{
    while (!o->bad && rd->scanned < o->raw.len) {
        unsigned f = 0;
        long got = sl_reply_scan(&rd->scan, o->raw.p + rd->scanned, o->raw.len - rd->scanned, &f);
        if (got < 0) {
            o->bad = 1;
            o->bad_at = rd->scanned;
            return;
        }
        rd->scanned += (size_t)got;
        if (f & SL_REPLY_DONE) {
            if (o->n == o->cap) {
                o->cap = o->cap ? o->cap * 2 : 64;
                o->ends = realloc(o->ends, o->cap * sizeof(*o->ends));
                if (!o->ends)
                    abort();
            }
            o->ends[o->n++] = rd->scanned;
            if (memmem(o->raw.p + rd->start, rd->scanned - rd->start, END_TOKEN,
                       sizeof(END_TOKEN) - 1))
                o->ending = END_MARKER;
            rd->start = rd->scanned;
        }
    }
}

/* Reads what is there (without blocking); returns -1 once the peer closed. */
static int drain(int fd, struct reader *rd, struct outcome *o)
{
    char tmp[65536];
    for (;;) {
        ssize_t k = read(fd, tmp, sizeof(tmp));
        if (k > 0) {
            buf_add(&o->raw, tmp, (size_t)k);
            continue;
        }
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && errno == ECONNRESET)
            o->reset = 1;
        reader_scan(rd, o);
        return -1; /* EOF or a reset: both a close (known[]) */
    }
    reader_scan(rd, o);
    return 0;
}

static int g_quiet_ms = 1000;

/* Sends <data,len> to <port> on a fresh connection with the write plan of
 * <s>, reading all the while, then reads until the marker's answer, a close,
 * or --quiet ms without a byte. */
static int run_side(int port, const struct stream *s, const char *data, size_t len,
                    struct outcome *o)
{
    struct reader rd;
    size_t *sizes = NULL;
    int gap_us;
    size_t nw = plan(s, len, &sizes, &gap_us);
    int closed = 0;

    memset(o, 0, sizeof(*o));
    buf_add(&o->raw, "", 0);
    o->ending = END_TIMEOUT;
    memset(&rd, 0, sizeof(rd));
    sl_reply_init(&rd.scan);

    int fd = th_connect(port);
    if (fd < 0) {
        free(sizes);
        sl_reply_release(&rd.scan);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    th_nonblock(fd);

    size_t at = 0;
    for (size_t w = 0; w < nw && !closed; w++) {
        size_t left = sizes[w];
        while (left > 0 && !closed) {
            ssize_t k = write(fd, data + at, left);
            if (k > 0) {
                at += (size_t)k;
                left -= (size_t)k;
                continue;
            }
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                struct pollfd pf = { fd, POLLIN | POLLOUT, 0 };
                poll(&pf, 1, 1000);
                if (pf.revents & (POLLIN | POLLHUP | POLLERR))
                    closed = drain(fd, &rd, o) < 0;
                continue;
            }
            /* EPIPE / ECONNRESET: the peer closed (after a protocol error) */
            if (k < 0 && (errno == ECONNRESET || errno == EPIPE))
                o->reset = 1;
            drain(fd, &rd, o);
            closed = 1;
        }
        if (gap_us && w + 1 < nw)
            usleep((useconds_t)gap_us); /* so sluice reads the next write apart */
        if (!closed)
            closed = drain(fd, &rd, o) < 0;
    }
    free(sizes);

    uint64_t last = th_now_ms(), hard = last + 30000;
    while (!closed && o->ending != END_MARKER && !o->bad) {
        uint64_t now = th_now_ms();
        if (now >= last + (uint64_t)g_quiet_ms || now >= hard)
            break;
        struct pollfd pf = { fd, POLLIN, 0 };
        int pr = poll(&pf, 1, (int)(last + (uint64_t)g_quiet_ms - now));
        if (pr > 0) {
            size_t before = o->raw.len;
            closed = drain(fd, &rd, o) < 0;
            if (o->raw.len > before)
                last = th_now_ms();
        }
    }
    if (closed && o->ending != END_MARKER)
        o->ending = END_CLOSED;
    close(fd);
    sl_reply_release(&rd.scan);
    return 0;
}

/* ---- comparing ------------------------------------------------------------------ */

/* A reply with connection ids masked (known[0]): the integer that follows a
 * bulk "id" key (HELLO's reply, RESP2 array or RESP3 map). */
static void normalise(const char *p, size_t n, struct buf *out)
{
    static const char key[] = "$2\r\nid\r\n:";
    out->len = 0;
    for (size_t i = 0; i < n;) {
        if (n - i >= sizeof(key) - 1 && memcmp(p + i, key, sizeof(key) - 1) == 0) {
            buf_add(out, key, sizeof(key) - 1);
            i += sizeof(key) - 1;
            while (i < n && p[i] >= '0' && p[i] <= '9')
                i++;
            buf_str(out, "<id>");
            continue;
        }
        buf_add(out, p + i, 1);
        i++;
    }
    if (!out->p)
        buf_add(out, "", 0);
}

/* A short class of a reply for grouping failures: its type byte, or for an
 * error its first line (digits masked). */
static void sig_of(const char *p, size_t n, struct buf *sig)
{
    if (n == 0) {
        buf_str(sig, "(none)");
        return;
    }
    if (p[0] != '-') {
        buf_add(sig, p, 1);
        return;
    }
    for (size_t i = 0; i < n && i < 48 && p[i] != '\r'; i++)
        buf_add(sig, p[i] >= '0' && p[i] <= '9' ? "N" : p + i, 1);
}

/* The class of a reply where sluice's differs: a protocol error by its
 * text, anything else by its type; what Redis answered in its place only as
 * "a reply" or its error text when it was a protocol error too. */
static void sig_pair(const char *d, size_t dn, const char *l, size_t ln, struct buf *sig)
{
    static const char pe[] = "-ERR Protocol error";
    int dpe = dn >= sizeof(pe) - 1 && !memcmp(d, pe, sizeof(pe) - 1);
    int lpe = ln >= sizeof(pe) - 1 && !memcmp(l, pe, sizeof(pe) - 1);
    buf_str(sig, "Redis ");
    if (dpe || !lpe)
        sig_of(d, dn, sig);
    else
        buf_str(sig, "a reply");
    buf_str(sig, " / sluice ");
    sig_of(l, ln, sig);
}

/* Compares <b> (through sluice) with <a> (direct). Returns 0 when they
 * match; otherwise writes what differs into <why>. */
static int compare(const struct outcome *a, const struct outcome *b, int reply_off,
                   int long_line, struct buf *why, struct buf *sig)
{
    static const char too_big[] = "-ERR Protocol error: too big inline request\r\n";
    struct buf x = { 0 }, y = { 0 };
    int rc = 0;
    size_t n = a->n < b->n ? a->n : b->n;

    for (size_t i = 0; i < n && !rc; i++) {
        size_t as = i ? a->ends[i - 1] : 0, bs = i ? b->ends[i - 1] : 0;
        normalise(a->raw.p + as, a->ends[i] - as, &x);
        normalise(b->raw.p + bs, b->ends[i] - bs, &y);
        if (long_line && y.len == sizeof(too_big) - 1 && memcmp(y.p, too_big, y.len) == 0) {
            /* known[]: a line over 64 KiB is always refused by sluice;
             * Redis refuses it only when its LF has not arrived yet */
            buf_free(&x);
            buf_free(&y);
            return 0;
        }
        if (x.len != y.len || memcmp(x.p, y.p, x.len) != 0) {
            buf_fmt(why, "reply %zu differs", i + 1);
            rc = 1;
            sig_pair(x.p, x.len, y.p, y.len, sig);
            char *t = NULL;
            size_t tl = 0;
            FILE *f = open_memstream(&t, &tl);
            fputs("\n    direct: ", f);
            dump(f, x.p, x.len, 600);
            fputs("\n    sluice: ", f);
            dump(f, y.p, y.len, 600);
            /* a long reply: where the two part */
            size_t at = 0;
            while (at < x.len && at < y.len && x.p[at] == y.p[at])
                at++;
            if (at > 400) {
                size_t from = at - 100;
                fprintf(f, "\n    from byte %zu: direct: ", from);
                dump(f, x.p + from, x.len - from, 300);
                fputs("\n                    sluice: ", f);
                dump(f, y.p + from, y.len - from, 300);
            }
            fclose(f);
            buf_add(why, t, tl);
            free(t);
        }
    }
    /* known[]: Redis closes at once after a protocol error, with a reset
     * when input it did not read remains, and the reset throws away what
     * this client had not read yet: replies it sent may never arrive. So
     * fewer direct replies, the rest of sluice's ending in the same
     * protocol error, are the same conversation. */
    static const char proto_err[] = "-ERR Protocol error";
    if (!rc && a->n < b->n && a->reset &&
        b->raw.len - (b->n > 1 ? b->ends[b->n - 2] : 0) >= sizeof(proto_err) - 1 &&
        memcmp(b->raw.p + (b->n > 1 ? b->ends[b->n - 2] : 0), proto_err,
               sizeof(proto_err) - 1) == 0) {
        buf_free(&x);
        buf_free(&y);
        return 0;
    }
    if (!rc && a->n != b->n) {
        buf_fmt(why, "%zu replies directly, %zu through sluice", a->n, b->n);
        buf_fmt(sig, "%s replies, then ", a->n > b->n ? "fewer" : "more");
        const struct outcome *m = a->n > b->n ? a : b;
        size_t from = n ? m->ends[n - 1] : 0;
        char *t = NULL;
        size_t tl = 0;
        FILE *f = open_memstream(&t, &tl);
        fprintf(f, "; the extra ones (%s): ", m == a ? "direct" : "sluice");
        sig_of(m->raw.p + from, m->ends[m->n - 1] - from, sig);
        dump(f, m->raw.p + from, m->ends[m->n - 1] - from, 600);
        fclose(f);
        buf_add(why, t, tl);
        free(t);
        rc = 1;
    }
    /* known[]: under CLIENT REPLY OFF Redis leaves a connection open after a
     * protocol error (without reading on); sluice closes it */
    if (!rc && reply_off && a->ending == END_TIMEOUT && b->ending == END_CLOSED)
        ;
    else if (!rc && a->ending != b->ending) {
        buf_fmt(why, "directly: %s; through sluice: %s", ending_name[a->ending],
                ending_name[b->ending]);
        buf_fmt(sig, "ending %d / %d", a->ending, b->ending);
        rc = 1;
    }
    /* bytes after the last complete reply (a reply cut short by the close) */
    size_t ta = a->n ? a->ends[a->n - 1] : 0, tb = b->n ? b->ends[b->n - 1] : 0;
    if (!rc && (a->raw.len - ta != b->raw.len - tb ||
                memcmp(a->raw.p + ta, b->raw.p + tb, a->raw.len - ta) != 0)) {
        buf_fmt(why, "incomplete tails differ (%zu bytes directly, %zu through sluice)",
                a->raw.len - ta, b->raw.len - tb);
        buf_str(sig, "tail");
        rc = 1;
    }
    if (!rc && a->bad != b->bad) {
        buf_fmt(why, "replies unframeable %s", a->bad ? "directly" : "through sluice");
        buf_str(sig, "unframeable");
        rc = 1;
    }
    buf_free(&x);
    buf_free(&y);
    return rc;
}

/* ---- the processes -------------------------------------------------------------------- */

struct world {
    struct th_proc up, store;
    pid_t          sl_pid;
    int            plain, lim;   /* sluice's two listeners */
    int            pool;         /* --pooled: a third, upstream_pool = --pool-size */
    int            ctl;          /* control connection to the upstream */
    char           conf[256], log[256];
    unsigned       restarts;
};

static struct world W;

static unsigned g_pooled;        /* --pooled K: rounds of K concurrent clients */
static unsigned g_pool_size = 2; /* --pool-size N: the pooled listener's upstream_pool */

static pid_t spawn_sluice(const char *conf, const char *log)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
    }
    /* sanitizer reports must end the process (so they are seen) and name the line */
    setenv("ASAN_OPTIONS", "abort_on_error=1:detect_leaks=1", 0);
    setenv("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1", 0);
    execl(th_sluice_bin(), th_sluice_bin(), "-c", conf, "-v", "warn", (char *)NULL);
    _exit(127);
}

static int ctl_cmd(const char *cmd, size_t len, char *reply, size_t cap)
{
    if (th_write_all(W.ctl, cmd, len) < 0)
        return -1;
    size_t got = 0;
    uint64_t end = th_now_ms() + 10000;
    while (th_now_ms() < end) {
        size_t k = th_read_n(W.ctl, reply + got, 1, 10000);
        if (k == 0)
            return -1;
        got++;
        size_t full = th_resp_len(reply, got);
        if (full == SIZE_MAX)
            return -1;
        if (full)
            break;
        if (got + 1 >= cap)
            return -1;
    }
    reply[got] = 0;
    return 0;
}

/* FLUSHALL, once the upstream has no client but the control connection
 * (so nothing of the previous run can still change the data). */
static int upstream_reset(void)
{
    char r[4096];
    static const char info[] = "*2\r\n$4\r\nINFO\r\n$7\r\nclients\r\n";
    uint64_t end = th_now_ms() + 5000;
    for (;;) {
        if (ctl_cmd(info, sizeof(info) - 1, r, sizeof(r)) < 0)
            return -1;
        const char *c = strstr(r, "connected_clients:");
        if (c && atoi(c + 18) <= 1)
            break;
        if (th_now_ms() > end) {
            fprintf(stderr, "diff_resp: the upstream still has clients of the last run\n");
            break;
        }
        usleep(2000);
    }
    static const char fl[] = "*1\r\n$8\r\nFLUSHALL\r\n";
    if (ctl_cmd(fl, sizeof(fl) - 1, r, sizeof(r)) < 0 || strcmp(r, "+OK\r\n") != 0)
        return -1;
    return 0;
}

static int sluice_start(void)
{
    char ini[2560];
    W.plain = th_free_port();
    W.lim = th_free_port();
    while (W.lim == W.plain)
        W.lim = th_free_port();
    W.pool = 0;
    while (g_pooled && (W.pool == 0 || W.pool == W.plain || W.pool == W.lim))
        W.pool = th_free_port();
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin =\nshutdown_grace = 1s\n"
             "[store]\nurl = redis://127.0.0.1:%d\ntimeout = 250ms\non_failure = open\n"
             "[listener plain]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "[listener lim]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "identity = resp_user client_name key_prefix client_ip\n"
             "[limit all]\nlistener = lim\nrate = 1000000/s\nburst = 1000000\n"
             "[limit writes]\nlistener = lim\ncommands = SET INCR DEL LPUSH RPUSH MSET\n"
             "rate = 1000000/s\nburst = 1000000\naction = delay\nmax_delay = 1s\n"
             "[limit bytes]\nlistener = lim\nmetric = bytes_in\nrate = 1GiB/s\nburst = 1GiB\n"
             /* the one limit that refuses: identity "deny", which no request
              * of a stream has (no key, name or user is "deny"; "deny:x" is
              * only ever an ECHO or PING argument). A THROTTLED reply means
              * a request was charged to another request's arguments. */
             "[limit deny]\nlistener = lim\nmatch_identity = deny\nrate = 1/d\nburst = 1\n",
             W.store.port, W.plain, W.up.port, W.lim, W.up.port);
    if (g_pooled) {
        size_t at = strlen(ini);
        snprintf(ini + at, sizeof(ini) - at,
                 "[listener pool]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nupstream_pool = %u\n",
                 W.pool, W.up.port, g_pool_size);
    }
    snprintf(W.conf, sizeof(W.conf), "/tmp/sluice-diff-%d.ini", (int)getpid());
    snprintf(W.log, sizeof(W.log), "/tmp/sluice-diff-%d.log", (int)getpid());
    FILE *f = fopen(W.conf, "w");
    if (!f)
        return -1;
    fputs(ini, f);
    fclose(f);
    unlink(W.log);
    W.sl_pid = spawn_sluice(W.conf, W.log);
    if (W.sl_pid < 0)
        return -1;
    uint64_t end = th_now_ms() + 10000;
    while (th_now_ms() < end) {
        int a = th_connect(W.plain), b = a >= 0 ? th_connect(W.lim) : -1;
        int c = b >= 0 && W.pool ? th_connect(W.pool) : -1;
        if (a >= 0)
            close(a);
        if (b >= 0)
            close(b);
        if (c >= 0)
            close(c);
        if (b >= 0 && (c >= 0 || !W.pool))
            return 0;
        if (waitpid(W.sl_pid, NULL, WNOHANG) == W.sl_pid)
            break;
        usleep(20000);
    }
    fprintf(stderr, "diff_resp: sluice did not start; its log %s:\n", W.log);
    char *t = th_slurp(W.log);
    fprintf(stderr, "%s\n", t ? t : "");
    free(t);
    return -1;
}

static int        g_minimising; /* while minimising, deaths are expected: no log dumps */
static struct buf g_death;      /* the sanitizer's first line from the last death */

/* Keeps the first sanitizer line of <log> (or the signal) in g_death. */
static void death_note(const char *log, int st)
{
    g_death.len = 0;
    buf_add(&g_death, "", 0);
    char *t = th_slurp(log);
    const char *m = NULL;
    if (t) {
        m = strstr(t, "runtime error:");
        if (!m)
            m = strstr(t, "ERROR: AddressSanitizer");
        if (!m)
            m = strstr(t, "ERROR: LeakSanitizer");
    }
    if (m) {
        while (m > t && m[-1] != '\n')
            m--;
        const char *e = strchr(m, '\n');
        buf_add(&g_death, m, e ? (size_t)(e - m) : strlen(m));
        /* the first frame inside sluice says where */
        const char *f = strstr(m, "#0 ");
        if (f && (f = strstr(f, " in ")) != NULL) {
            const char *fe = strchr(f, '\n');
            buf_str(&g_death, " |");
            buf_add(&g_death, f, fe ? (size_t)(fe - f) : strlen(f));
        }
    } else {
        buf_fmt(&g_death, "%s %d", WIFSIGNALED(st) ? "signal" : "exit status",
                WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    }
    /* masks addresses so repeats group */
    for (size_t i = 0; i + 1 < g_death.len; i++)
        if (g_death.p[i] == '0' && g_death.p[i + 1] == 'x')
            for (i += 2; i < g_death.len && strchr("0123456789abcdef", g_death.p[i]); i++)
                g_death.p[i] = 'X';
    if (!g_minimising) {
        fprintf(stderr, "!! sluice died (%s); its log (%s):\n", g_death.p, log);
        if (t) {
            size_t n = strlen(t);
            fputs(n > 12000 ? t + n - 12000 : t, stderr);
        }
    }
    free(t);
}

/* 1 while sluice runs; 0 once it died (what killed it is in g_death). */
static int sluice_alive(void)
{
    int st;
    if (W.sl_pid <= 0)
        return 0;
    if (waitpid(W.sl_pid, &st, WNOHANG) != W.sl_pid)
        return 1;
    W.sl_pid = 0;
    death_note(W.log, st);
    return 0;
}

static int sluice_stop(void)
{
    if (W.sl_pid <= 0)
        return -1;
    kill(W.sl_pid, SIGTERM);
    int st = -1;
    uint64_t end = th_now_ms() + 10000;
    while (th_now_ms() < end) {
        if (waitpid(W.sl_pid, &st, WNOHANG) == W.sl_pid) {
            W.sl_pid = 0;
            break;
        }
        usleep(10000);
    }
    if (W.sl_pid > 0) {
        kill(-W.sl_pid, SIGKILL);
        waitpid(W.sl_pid, &st, 0);
        W.sl_pid = 0;
        fprintf(stderr, "!! sluice did not exit on SIGTERM\n");
        return -1;
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "!! sluice exited with status %d at the end; its log (%s):\n", st, W.log);
        char *t = th_slurp(W.log);
        if (t) {
            size_t n = strlen(t);
            fputs(n > 12000 ? t + n - 12000 : t, stderr);
        }
        free(t);
        return -1;
    }
    unlink(W.conf);
    unlink(W.log);
    return 0;
}

static int world_start(void)
{
    memset(&W, 0, sizeof(W));
    if (th_redis_start(&W.up, NULL) < 0 || th_redis_start(&W.store, NULL) < 0)
        return -1;
    W.ctl = th_connect(W.up.port);
    if (W.ctl < 0)
        return -1;
    return sluice_start();
}

static int world_stop(void)
{
    int rc = sluice_stop();
    if (W.ctl >= 0)
        close(W.ctl);
    th_stop(&W.up);
    th_stop(&W.store);
    return rc;
}

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

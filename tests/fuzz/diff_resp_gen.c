/* sluice — differential RESP fuzzer, the generator: included by
 * tests/fuzz/diff_resp.c. A stream is a list of pieces (valid commands,
 * empty and malformed frames, byte flips), generated from (seed, index)
 * alone, and the way it is to be written (enum wmode). */

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

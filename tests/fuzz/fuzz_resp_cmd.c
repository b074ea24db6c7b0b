/* sluice — libFuzzer target for the command classifier of pooled listeners
 * (proto/resp_cmd.c): the allow-list, the pin tracker and the pool key.
 *
 * Input: a script of steps, each opened by one byte <op>:
 *   op % 4 == 0, 1  a request is written upstream: its argv follows (below);
 *                   (op >> 2) & 1 is whether its answer will be OK, and
 *                   (op & 0x38) == 0x38 makes it one whose reply Redis skips
 *                   (no answer ever comes for it) when CLIENT REPLY OFF or
 *                   SKIP is in force;
 *   op % 4 == 2     the oldest request awaiting its answer gets it;
 *   op % 4 == 3     an (un)subscribe confirmation: the next byte, signed, is
 *                   the count of subscriptions left.
 * An argv: a count byte c (c < 0xf0: c % 12 arguments; else 3 more bytes
 * give a huge count, capped at the framer's 1,048,576), then, for each
 * captured argument (SL_RESP_CAPTURE_ARGS at most), a length byte L:
 * 0xff: the next byte picks a word of words[] (command names, subcommands,
 * options, numbers); 0xf0-0xfe: a huge argument (3 more bytes of length,
 * above the capture), its first SL_RESP_CAPTURE_LEN bytes follow; else L
 * bytes follow (cut at the capture length, as the framer keeps them). Bytes
 * missing at the end of the input are zeros: binary, empty and NUL-holding
 * arguments all come.
 *
 * Checked: the class is one of the four and its fields agree with it
 * (pin bits only with PIN, a LOCAL answer only with LOCAL, argument indexes
 * within the captured ones, a KEY's user, database and protocol valid);
 * the classification is the same twice, whatever the request holds past
 * its captured bytes, and in either case of the ASCII letters; the pin
 * tracker never lets the client go while its connection holds state the
 * requests answered so far left on it (a model of that state, fed the same
 * answers in the same order; an EXEC or DISCARD written with no
 * transaction open ends nothing), nor holds it longer when every reply
 * came, counts its one-answer pins right, and is
 * clean after an answered RESET; the pool key stays valid, its compare is
 * antisymmetric and its hash follows it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "proto/resp_cmd.h"

static const char *const words[] = {
    "GET", "SET", "PING", "ECHO", "MULTI", "EXEC", "DISCARD", "WATCH", "UNWATCH", "BLPOP",
    "BRPOP", "WAIT", "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE",
    "SUNSUBSCRIBE", "MONITOR", "CLIENT", "REPLY", "ON", "OFF", "SKIP", "TRACKING", "NO-EVICT",
    "NO-TOUCH", "SETNAME", "GETNAME", "SETINFO", "ID", "INFO", "LIST", "KILL", "UNBLOCK",
    "PAUSE", "CACHING", "READONLY", "READWRITE", "ASKING", "DEBUG", "SCRIPT", "FUNCTION",
    "SHUTDOWN", "SYNC", "PSYNC", "REPLCONF", "AUTH", "HELLO", "SELECT", "RESET", "QUIT",
    "XREAD", "XREADGROUP", "BLOCK", "COUNT", "STREAMS", "GROUP", "NOACK", "YES", "NO",
    "default", "alice", "0", "1", "2", "3", "-1", "15", "2147483647", "2147483648",
    "9223372036854775807", "-9223372036854775808", "9223372036854775808", "00", "+1",
    "evalsha_ro", "georadiusbymember_ro", "client", "hello", "auth", "select", "reset",
};
#define NWORDS (sizeof(words) / sizeof(words[0]))

/* -DFUZZ_TRACE: each step printed (to read a crash input) */
#ifdef FUZZ_TRACE
#define TRACE(...) fprintf(stderr, __VA_ARGS__)
#else
#define TRACE(...) ((void)0)
#endif

#define MAXQ 64 /* requests awaiting their answer (older ones are answered first) */
#define COUNT_CAP 1048576u

struct in {
    const uint8_t *p;
    size_t         n;
};

static uint8_t take(struct in *in)
{
    if (in->n == 0)
        return 0;
    in->n--;
    return *in->p++;
}

static uint32_t take3(struct in *in)
{
    uint32_t v = take(in);
    v = v << 8 | take(in);
    return v << 8 | take(in);
}

/* Decodes one argv into <r>: its unused parts hold <junk>, as a framer's
 * reused request holds what earlier requests left. */
static void decode(struct in *in, struct sl_resp_req *r, uint8_t junk)
{
    memset(r, junk, sizeof(*r));
    uint8_t c = take(in);
    uint32_t argc = c < 0xf0 ? c % 12u : 12 + take3(in) % (COUNT_CAP - 11);
    r->argc = argc;
    r->is_inline = c & 1;
    r->ncap = (uint8_t)(argc < SL_RESP_CAPTURE_ARGS ? argc : SL_RESP_CAPTURE_ARGS);
    r->size = 4;
    for (unsigned i = 0; i < r->ncap; i++) {
        uint8_t l = take(in);
        uint32_t len, k;
        if (l == 0xff) {
            const char *w = words[take(in) % NWORDS];
            len = (uint32_t)strlen(w);
            memcpy(r->argv[i], w, len);
            k = len;
        } else {
            len = l >= 0xf0 ? SL_RESP_CAPTURE_LEN + 1 + take3(in) : l;
            k = len < SL_RESP_CAPTURE_LEN ? len : SL_RESP_CAPTURE_LEN;
            for (uint32_t j = 0; j < k; j++)
                r->argv[i][j] = (char)take(in);
        }
        r->argv[i][k] = '\0';
        r->arglen[i] = len;
        r->size += 6 + (uint64_t)len;
    }
}

static void check_info(const struct sl_resp_req *r, const struct sl_rcmd_info *o, int cls)
{
    const uint32_t all = (SL_PIN_STICKY << 1) - 1;
    if (cls != o->cls || o->cls > SL_RCMD_LOCAL)
        abort();
    if ((o->cls == SL_RCMD_LOCAL) != (o->local != SL_RLOCAL_NONE) || o->local > SL_RLOCAL_UNBLOCK)
        abort();
    if ((o->cls == SL_RCMD_PIN) != (o->pin != 0) || (o->pin & ~all) || (o->ends & ~all))
        abort();
    if (o->opt > SL_RLOPT_LIST_ID || (o->opt != SL_RLOPT_NONE && o->cls != SL_RCMD_LOCAL))
        abort(); /* options are read for what sluice answers itself */
    if (o->slow > 1 || (o->slow && o->cls != SL_RCMD_POOL))
        abort(); /* a script: stateless, only kept last on its connection */
    if (r->argc == 0 && !(o->cls == SL_RCMD_LOCAL && o->local == SL_RLOCAL_EMPTY))
        abort();
    /* the caller reads these arguments' captured text */
    if ((o->pass_arg && o->pass_arg >= r->ncap) || (o->name_arg && o->name_arg >= r->ncap))
        abort();
    if (o->cls == SL_RCMD_KEY) {
        if (o->set & ~(SL_RKEY_USER | SL_RKEY_DB | SL_RKEY_RESP | SL_RKEY_RESET))
            abort();
        if ((o->set & SL_RKEY_RESP) && o->resp != 2 && o->resp != 3)
            abort();
        if ((o->set & SL_RKEY_DB) && o->db < 0)
            abort();
        if ((o->set & SL_RKEY_USER) &&
            (o->user_len > SL_POOL_USER_MAX || o->user[o->user_len] != '\0' ||
             memchr(o->user, '\0', o->user_len) != NULL))
            abort();
    }
}

/* The same request with other junk past its captured bytes, and with the
 * case of its letters swapped. */
static void check_again(const struct sl_resp_req *r, const struct sl_rcmd_info *o)
{
    struct sl_resp_req t;
    struct sl_rcmd_info a;
    memset(&t, 0x5a, sizeof(t));
    t.size = r->size;
    t.argc = r->argc;
    t.is_inline = r->is_inline;
    t.ncap = r->ncap;
    for (unsigned i = 0; i < r->ncap; i++) {
        uint32_t k = r->arglen[i] < SL_RESP_CAPTURE_LEN ? r->arglen[i] : SL_RESP_CAPTURE_LEN;
        t.arglen[i] = r->arglen[i];
        memcpy(t.argv[i], r->argv[i], k);
        t.argv[i][k] = '\0';
    }
    if (sl_rcmd_class(&t, &a) != o->cls || memcmp(&a, o, sizeof(a)) != 0)
        abort();
    for (unsigned i = 0; i < t.ncap; i++)
        for (uint32_t j = 0; j < t.arglen[i] && j < SL_RESP_CAPTURE_LEN; j++) {
            char ch = t.argv[i][j];
            if (ch >= 'a' && ch <= 'z')
                t.argv[i][j] = (char)(ch - 'a' + 'A');
            else if (ch >= 'A' && ch <= 'Z')
                t.argv[i][j] = (char)(ch - 'A' + 'a');
        }
    sl_rcmd_class(&t, &a);
    if (a.cls != o->cls || a.local != o->local || a.ends_any != o->ends_any || a.slow != o->slow ||
        a.pin != o->pin ||
        a.ends != o->ends || a.set != o->set || a.pass_arg != o->pass_arg ||
        a.name_arg != o->name_arg || a.opt != o->opt || a.resp != o->resp || a.db != o->db ||
        a.user_len != o->user_len || strncasecmp(a.user, o->user, o->user_len) != 0)
        abort();
}

static void check_key(const struct sl_pool_key *k)
{
    if ((k->resp != 2 && k->resp != 3) || k->db < 0 || k->user_len > SL_POOL_USER_MAX)
        abort();
    for (size_t i = k->user_len; i < sizeof(k->user); i++)
        if (k->user[i] != '\0')
            abort(); /* zero-padded */
}

static int sign(int v) { return (v > 0) - (v < 0); }

/* One request written upstream, as the model sees it. */
struct sent {
    struct sl_rcmd_info info;  /* as sl_rcmd_pin_sent() left it */
    struct sl_rcmd_info asked; /* as sl_rcmd_class() gave it */
    uint32_t            token; /* sl_rcmd_pin_sent's return */
    int                 ok, skipped;
    int                 in_txn; /* a transaction was open when it was written */
};

/* The state the requests executed so far left on the connection (pin bits
 * other than the one-answer ones, NEXT and SUB, which have their own
 * checks): a request sets its bits when it runs (those in SL_PIN_UNDO only
 * when it succeeds) and ends its <ends> when it succeeds (or whatever it
 * answers, with ends_any); an EXEC or DISCARD (a request other than RESET
 * that ends MULTI) with no transaction open ends nothing, as Redis refuses
 * it and keeps the keys watched. */
static void execute(uint32_t *state, const struct sent *x)
{
    const struct sl_rcmd_info *i = &x->asked;
    uint32_t want = i->cls == SL_RCMD_PIN ? i->pin : 0;
    int refused_end = (i->ends & SL_PIN_MULTI) && i->cls != SL_RCMD_KEY && !x->in_txn;
    if ((x->ok || i->ends_any) && !refused_end)
        *state &= ~i->ends;
    want &= ~(uint32_t)(SL_PIN_ONCE | SL_PIN_NEXT | SL_PIN_SUB);
    *state |= want & (x->ok ? ~0u : ~(uint32_t)SL_PIN_UNDO);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct sent q[MAXQ];
    struct in in = { data, size };
    struct sl_rcmd_pin pin;
    struct sl_pool_key key;
    uint32_t state = 0, once_skipped = 0;
    size_t head = 0, nq = 0, pending = 0; /* q[head..]: skipped ones included */
    int last_reset = 0, any_unseen = 0;
    int reply_on = 0; /* a request written since the last OFF or SKIP turned replies on */
    int txn = 0; /* the requests written leave a transaction open (MULTI; EXEC, DISCARD, RESET end it) */
    const uint32_t model = ~(uint32_t)(SL_PIN_ONCE | SL_PIN_NEXT | SL_PIN_SUB);

    sl_rcmd_pin_init(&pin);
    sl_pool_key_default(&key);
    check_key(&key);
    while (in.n > 0) {
        uint8_t op = take(&in);
        if (op % 4 < 2 && nq == MAXQ)
            op = 2; /* full: the oldest is answered first */
        if (op % 4 < 2) {
            struct sl_resp_req r;
            struct sl_rcmd_info o;
            decode(&in, &r, op);
            int cls = sl_rcmd_class(&r, &o);
            check_info(&r, &o, cls);
            check_again(&r, &o);
            if (o.cls == SL_RCMD_LOCAL)
                continue; /* sluice answers it: nothing goes upstream */
            struct sent *x = &q[(head + nq++) % MAXQ];
            x->info = o;
            x->asked = o;
            x->ok = (op >> 2) & 1;
            x->in_txn = txn;
            if (o.cls == SL_RCMD_PIN && (o.pin & SL_PIN_MULTI))
                txn = 1;
            else if (o.ends & SL_PIN_MULTI)
                txn = 0;
            /* replies are skipped under CLIENT REPLY OFF or SKIP only; a
             * CLIENT REPLY ON or RESET written before it (answered or not:
             * Redis runs them in order) turned them on again */
            int unseen = (pin.why & (SL_PIN_REPLY | SL_PIN_NEXT)) != 0;
            x->skipped = (op & 0x38) == 0x38 && unseen && !reply_on;
            if (x->ok && (o.ends & SL_PIN_REPLY))
                reply_on = 1;
            else if (o.cls == SL_RCMD_PIN && (o.pin & (SL_PIN_REPLY | SL_PIN_NEXT)))
                reply_on = 0;
            any_unseen |= unseen;
            x->token = sl_rcmd_pin_sent(&pin, &x->info, x->in_txn);
            TRACE("sent %.20s %.20s %.20s (argc %u) cls %d pin %#x ends %#x%s%s: why %#x\n",
                  r.ncap > 0 ? r.argv[0] : "", r.ncap > 1 ? r.argv[1] : "",
                  r.ncap > 2 ? r.argv[2] : "", r.argc, o.cls, o.pin, x->info.ends,
                  x->ok ? " ok" : " refused", x->skipped ? " skipped" : "", pin.why);
            pending += !x->skipped;
            if (x->skipped && (o.pin & SL_PIN_ONCE))
                once_skipped++; /* its answer never comes to end it */
            last_reset = 0;
        } else if (op % 4 == 2) {
            /* the skipped requests before the oldest answered one ran first */
            while (nq > 0 && q[head].skipped) {
                execute(&state, &q[head]);
                head = (head + 1) % MAXQ;
                nq--;
            }
            if (nq == 0)
                goto check;
            struct sent *x = &q[head];
            head = (head + 1) % MAXQ;
            nq--;
            pending--;
            execute(&state, x);
            sl_rcmd_pin_done(&pin, &x->info, x->token, x->ok);
            TRACE("answered cls %d pin %#x ends %#x%s: why %#x, state %#x\n", x->info.cls,
                  x->info.pin, x->info.ends, x->ok ? " ok" : " refused", pin.why, state);
            struct sl_pool_key old = key;
            int changed = sl_pool_key_apply(&key, &x->info, x->ok);
            check_key(&key);
            int c = sl_pool_key_cmp(&old, &key);
            if ((c != 0) != changed || sign(c) != -sign(sl_pool_key_cmp(&key, &old)) ||
                sl_pool_key_cmp(&key, &key) != 0)
                abort();
            struct sl_pool_key copy;
            sl_pool_key_default(&copy);
            copy.db = key.db;
            copy.resp = key.resp;
            copy.user_len = key.user_len;
            memset(copy.user, 0, sizeof(copy.user));
            memcpy(copy.user, key.user, key.user_len);
            if (sl_pool_key_cmp(&copy, &key) != 0 || sl_pool_key_hash(&copy) != sl_pool_key_hash(&key))
                abort();
            last_reset = x->ok && x->info.cls == SL_RCMD_KEY && (x->info.set & SL_RKEY_RESET);
        } else {
            long n = (int8_t)take(&in);
            sl_rcmd_pin_subs(&pin, n);
            last_reset = 0; /* a confirmation after it: SUB is its own */
            if (((pin.why & SL_PIN_SUB) != 0) != (n > 0))
                abort();
            continue;
        }
    check:;
        /* one-answer pins: counted per request awaiting its answer */
        uint32_t once = once_skipped;
        for (size_t k = 0; k < nq; k++) {
            const struct sent *x = &q[(head + k) % MAXQ];
            once += !x->skipped && x->info.cls == SL_RCMD_PIN && (x->info.pin & SL_PIN_ONCE);
        }
        if (pin.once != once || ((pin.why & SL_PIN_ONCE) != 0) != (once > 0))
            abort();
        if (pin.why & ~(uint32_t)((SL_PIN_STICKY << 1) - 1))
            abort();
        if (sl_rcmd_pinned(&pin) != (pin.why != 0) ||
            sl_rcmd_pin_clean(&pin) != ((pin.why & SL_PIN_DIRTY) == 0))
            abort();
        if (pending == 0 && nq == 0) {
            /* every answer in: the connection's state is pinned for */
            if ((state & model) & ~pin.why)
                abort();
            /* and no more than that, unless a request went out while
             * replies were off (its answer unseen: taken as a success) */
            if (!any_unseen && (pin.why & model) != (state & model))
                abort();
            /* an answered RESET, the last request: only what it cannot clear */
            if (last_reset && (pin.why & SL_PIN_RESET_CLEARS & ~(uint32_t)SL_PIN_ONCE))
                abort();
        }
    }
    /* client names: printable ASCII without spaces, as Redis takes them */
    for (size_t n = 0; n <= size && n <= 16; n++) {
        int ok = 1;
        for (size_t j = 0; j < n; j++)
            ok &= data[j] >= '!' && data[j] <= '~';
        if (sl_rcmd_name_ok((const char *)data, n) != ok)
            abort();
    }
    return 0;
}

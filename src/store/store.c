/* sluice — the asynchronous client of the quota store.
 *
 *   sl_store_eval() --encode--> req->cmd --copy--> out
 *        |                                          | prepare/check handle: one
 *        | fifo (wire order)                        | uv_try_write per batch, the
 *        | deadline list (deadline order)           v rest with uv_write
 *        |   one uv_timer for its head           store (Redis)
 *        v                                          |
 *   on_reply(fifo head) <-- object functions <-- one redisReaderFeed per read
 *                           fill st->reply (integers, a text), build nothing
 *
 * The connection:
 *
 *   DISCONNECTED --retry timer--> CONNECTING --tcp up--> HANDSHAKE --AUTH, SELECT,
 *        ^                            |                      |       SCRIPT LOAD ok
 *        |                            v                      v
 *        +--- tcp close cb <------ DROPPING <--- error ---- READY
 *             (retry timer armed                  (+ connect_timeout before READY)
 *              with the backoff)
 *
 * "Up" is READY and not suspect. A request past its deadline makes the
 * connection suspect (the store is down for new requests) without dropping
 * it: replies still come in order and are consumed. While suspect, the
 * retry timer sends a heartbeat as a probe with backoff; one answered within
 * its deadline makes the store up again. A suspect connection with no reply
 * for STALL_DROP_NS is dropped and made again.
 *
 * Batching: requests only append to <out>. A prepare handle (before the loop
 * blocks: requests from timers) and a check handle (after the I/O callbacks:
 * requests from reads) write <out> with one uv_try_write; what the kernel
 * does not take goes out with one uv_write, and the next batch waits for it.
 * Both handles run only while something is queued, and are unreferenced.
 *
 * Timeouts: all requests of one configuration share a timeout, so the
 * deadline list is nearly always in FIFO order; it is a list of its own
 * anyway because a NOSCRIPT retry goes to the FIFO's tail with its first
 * deadline, and a reload may shorten the timeout. The timer is lazy: it is
 * armed for the earliest deadline when that gets earlier, never disarmed when
 * a request completes; firing early only re-arms it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/read.h>

#include "core/err.h"
#include "core/log.h"
#include "core/resolve.h"
#include "store/scripts.h"
#include "store/store.h"

#define MAX_SCRIPTS      16                /* built-in + sl_store_script_add() */
#define BACKOFF_MIN_MS   100               /* first retry after a failure */
#define BACKOFF_MAX_MS   2000              /* retries are at most this far apart */
#define HEARTBEAT_MS     1000              /* heartbeat period */
#define HEARTBEAT_TTL    "5000"            /* ms an entry lives in the instance set */
#define STALL_DROP_NS    (5000ull * 1000 * 1000) /* suspect and no reply for this long: reconnect */
#define READ_SIZE        (64 * 1024)       /* one read */
#define MAX_UNPARSED     (1024 * 1024)     /* largest reply the reader may hold unfinished */
#define MAX_OUT          (16 * 1024 * 1024) /* unsent bytes before sl_store_eval() says no */
#define POOL_KEEP        4096              /* idle request structs kept */
#define CMD_KEEP         4096              /* command buffer a pooled request keeps */
#define TEXT_MAX         128               /* kept of an error, status or bulk reply */

enum conn_state { DISCONNECTED, CONNECTING, HANDSHAKE, READY, DROPPING };

enum req_kind {
    K_EVAL,     /* a caller's EVALSHA */
    K_HB,       /* a heartbeat (a probe while suspect) */
    K_HS,       /* AUTH or SELECT of the handshake */
    K_HS_LOAD,  /* SCRIPT LOAD of the handshake */
    K_LOAD,     /* SCRIPT LOAD after NOSCRIPT */
};

/* A growing byte buffer. */
struct obuf {
    char  *p;
    size_t len;
    size_t cap;
};

struct script {
    char     *body;      /* owned */
    size_t    len;
    char      sha[41];   /* hex SHA-1 of body, what EVALSHA names */
    uint64_t  load_seq;  /* wire sequence of the last SCRIPT LOAD sent on this connection */
};

struct sl_store_req {
    struct sl_store_req *next;       /* FIFO (wire order), or the pool's free list */
    struct sl_store_req *dl_prev;    /* deadline list neighbours */
    struct sl_store_req *dl_next;
    sl_store_cb         *cb;         /* NULL once cancelled, and for internal requests */
    void                *data;       /* the caller's, for cb */
    uint64_t             deadline;   /* loop ms; in the deadline list while !done */
    uint64_t             sent_ns;    /* uv_hrtime() when made, for the latency */
    uint64_t             seq;        /* wire sequence of its last send */
    int                  script;     /* K_EVAL, K_HB, K_*LOAD: which script; K_HS: 0 AUTH, 1 SELECT */
    uint8_t              kind;       /* enum req_kind */
    uint8_t              done;       /* completed (cb ran or timed out): the reply is dropped */
    uint8_t              retried;    /* NOSCRIPT retry spent */
    uint8_t              in_dl;      /* in the deadline list */
    struct obuf          cmd;        /* K_EVAL, K_HB: the encoded EVALSHA, for the retry */
};

/* The reply being parsed: what the object functions kept. */
struct reply {
    int         type;                /* REDIS_REPLY_* of the top level, 0 before it */
    int         n;                   /* integers in vals */
    const char *bad;                 /* not a flat integer array (or too long): why */
    size_t      textlen;             /* full length of a string/status/error */
    char        text[TEXT_MAX];      /* its first bytes, NUL-terminated */
    int64_t     vals[SL_STORE_MAX_VALS];
};

struct sl_store {
    uv_loop_t            *loop;
    struct sl_store_conf  conf;      /* deep copy, strings owned */
    char                 *id;        /* instance id for the heartbeat */
    char                 *hb_key;    /* <key_prefix>instances */
    uint64_t              timeout_ms;
    struct script         scripts[MAX_SCRIPTS];
    int                   n_scripts;

    uv_tcp_t              tcp;       /* valid while tcp_open */
    uv_connect_t          connect_req;
    uv_write_t            write_req; /* one write in flight at most */
    uv_timer_t            connect_timer; /* connect + handshake must finish in connect_timeout */
    uv_timer_t            retry_timer;   /* reconnect, or probe while suspect */
    uv_timer_t            dl_timer;      /* the earliest deadline */
    uv_timer_t            hb_timer;      /* heartbeat period */
    uv_prepare_t          prepare;       /* flush before the loop blocks */
    uv_check_t            check;         /* flush after the I/O callbacks */
    int                   handles;       /* initialized and not yet closed */
    struct sl_resolve     res;           /* the store's address; a host name is looked up
                                            again before each reconnect */

    enum conn_state       conn;
    uint8_t               tcp_open;      /* tcp initialized, its close cb pending */
    uint8_t               writing;       /* write_req in flight (wbuf) */
    uint8_t               flush_armed;   /* prepare/check started */
    uint8_t               closing;       /* sl_store_close() called */
    uint8_t               suspect;       /* a deadline passed on this connection */
    uint8_t               connected_once;
    uint8_t               reconnect_now; /* skip the backoff once (reconfigure) */
    int                   logged;        /* -1 nothing logged yet, 0 "down", 1 "up" */
    int                   hs_pending;    /* handshake replies still expected */
    uint64_t              gen;           /* connection generation, for stale callbacks */
    uint64_t              seq;           /* commands sent on this connection */
    uint64_t              backoff_ms;
    uint64_t              rng;
    uint64_t              live;          /* instances seen in the heartbeat set */
    struct sl_store_req  *hb_req;        /* heartbeat in flight, not yet done */

    redisReader          *reader;        /* per connection */
    struct reply          reply;
    char                 *rbuf;          /* READ_SIZE bytes */
    struct obuf           out;           /* commands of this turn */
    struct obuf           wbuf;          /* what write_req is sending */

    struct sl_store_req  *fifo_head, *fifo_tail;
    size_t                fifo_n;
    struct sl_store_req  *dl_head, *dl_tail;
    uint64_t              dl_armed;      /* loop ms dl_timer fires at; 0 when idle */
    struct sl_store_req  *pool;          /* free request structs */
    size_t                pool_n;

    struct sl_store_stats stats;
};

const uint64_t sl_store_latency_bounds_us[11] = {
    100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000,
};

static void start_connect(struct sl_store *st);
static void drop_conn(struct sl_store *st, const char *why);
static void flush(struct sl_store *st);
static void on_write(uv_write_t *w, int status);

/* ---- SHA-1 (FIPS 180-4), for the names EVALSHA uses -------------------- */

static uint32_t rol(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

static void sha1_block(uint32_t h[5], const unsigned char *p)
{
    uint32_t w[80];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 80; i++)
        w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20)      { f = (b & c) | (~b & d);          k = 0x5a827999; }
        else if (i < 40) { f = b ^ c ^ d;                   k = 0x6ed9eba1; }
        else if (i < 60) { f = (b & c) | (b & d) | (c & d); k = 0x8f1bbcdc; }
        else             { f = b ^ c ^ d;                   k = 0xca62c1d6; }
        uint32_t t = rol(a, 5) + f + e + k + w[i];
        e = d;
        d = c;
        c = rol(b, 30);
        b = a;
        a = t;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e;
}

/* Writes the 40 hex digits of SHA-1(<p>, <len>) and a NUL to <hex>. */
static void sha1_hex(const void *p, size_t len, char hex[41])
{
    uint32_t h[5] = { 0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0 };
    const unsigned char *s = p;
    size_t left = len;
    for (; left >= 64; s += 64, left -= 64)
        sha1_block(h, s);
    unsigned char tail[128] = { 0 };
    memcpy(tail, s, left);
    tail[left] = 0x80;
    size_t tlen = left < 56 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++)
        tail[tlen - 1 - i] = (unsigned char)(bits >> (8 * i));
    sha1_block(h, tail);
    if (tlen == 128)
        sha1_block(h, tail + 64);
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 20; i++) {
        unsigned char byte = (unsigned char)(h[i / 4] >> (24 - 8 * (i % 4)));
        hex[2 * i] = digits[byte >> 4];
        hex[2 * i + 1] = digits[byte & 15];
    }
    hex[40] = '\0';
}

/* ---- buffers and RESP encoding ------------------------------------------ */

static int ob_reserve(struct obuf *b, size_t more)
{
    if (b->cap - b->len >= more)
        return 0;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap - b->len < more)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (p == NULL)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int ob_append(struct obuf *b, const char *p, size_t len)
{
    if (ob_reserve(b, len) < 0)
        return -1;
    memcpy(b->p + b->len, p, len);
    b->len += len;
    return 0;
}

static char *put_u64(char *p, uint64_t v)
{
    char tmp[20];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

static char *put_bulk(char *p, const char *s, size_t len)
{
    *p++ = '$';
    p = put_u64(p, len);
    *p++ = '\r';
    *p++ = '\n';
    memcpy(p, s, len);
    p += len;
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

#define BULK_OVERHEAD 25 /* '$' + 20 digits + 2 CRLF */

/* Appends one command to <o>: `*<argc>` then the bulks of <a>, <b> and <c>
 * (<na>, <nb>, <nc> of them; any may be 0). Returns 0 or -1 (out of memory). */
static int encode(struct obuf *o, int na, const struct sl_str *a, int nb, const struct sl_str *b,
                  int nc, const struct sl_str *c)
{
    const struct sl_str *part[3] = { a, b, c };
    int count[3] = { na, nb, nc };
    size_t need = BULK_OVERHEAD;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < count[k]; i++)
            need += part[k][i].len + BULK_OVERHEAD;
    if (ob_reserve(o, need) < 0)
        return -1;
    char *p = o->p + o->len;
    *p++ = '*';
    p = put_u64(p, (uint64_t)na + (uint64_t)nb + (uint64_t)nc);
    *p++ = '\r';
    *p++ = '\n';
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < count[k]; i++)
            p = put_bulk(p, part[k][i].p, part[k][i].len);
    o->len = (size_t)(p - o->p);
    return 0;
}

static struct sl_str cstr(const char *s)
{
    struct sl_str r = { s, strlen(s) };
    return r;
}

/* Encodes EVALSHA <sha> <nkeys> <keys...> <args...> into <o> (emptied first). */
static int encode_evalsha(struct obuf *o, const char *sha, int nkeys, const struct sl_str *keys,
                          int nargs, const struct sl_str *args)
{
    char num[24];
    char *e = put_u64(num, (uint64_t)nkeys);
    struct sl_str head[3] = { { "EVALSHA", 7 }, { sha, 40 }, { num, (size_t)(e - num) } };
    o->len = 0;
    return encode(o, 3, head, nkeys, keys, nargs, args);
}

/* ---- requests: pool, FIFO, deadlines ------------------------------------ */

static struct sl_store_req *req_get(struct sl_store *st)
{
    struct sl_store_req *r = st->pool;
    if (r != NULL) {
        st->pool = r->next;
        st->pool_n--;
    } else if ((r = calloc(1, sizeof(*r))) == NULL) {
        return NULL;
    }
    struct obuf cmd = r->cmd;
    memset(r, 0, sizeof(*r));
    r->cmd = cmd;
    r->cmd.len = 0;
    return r;
}

static void req_put(struct sl_store *st, struct sl_store_req *r)
{
    if (st->pool_n >= POOL_KEEP) {
        free(r->cmd.p);
        free(r);
        return;
    }
    if (r->cmd.cap > CMD_KEEP) {
        free(r->cmd.p);
        r->cmd.p = NULL;
        r->cmd.cap = 0;
    }
    r->next = st->pool;
    st->pool = r;
    st->pool_n++;
}

static void fifo_push(struct sl_store *st, struct sl_store_req *r)
{
    r->next = NULL;
    if (st->fifo_tail)
        st->fifo_tail->next = r;
    else
        st->fifo_head = r;
    st->fifo_tail = r;
    st->fifo_n++;
}

static struct sl_store_req *fifo_pop(struct sl_store *st)
{
    struct sl_store_req *r = st->fifo_head;
    if (r != NULL) {
        st->fifo_head = r->next;
        if (st->fifo_head == NULL)
            st->fifo_tail = NULL;
        st->fifo_n--;
        r->next = NULL;
    }
    return r;
}

static void on_deadline(uv_timer_t *t);

static void dl_arm(struct sl_store *st, uint64_t at)
{
    uint64_t now = uv_now(st->loop);
    uv_timer_start(&st->dl_timer, on_deadline, at > now ? at - now : 0, 0);
    st->dl_armed = at;
}

/* Inserts <r> by deadline; nearly always at the tail. */
static void dl_insert(struct sl_store *st, struct sl_store_req *r)
{
    struct sl_store_req *after = st->dl_tail;
    while (after != NULL && after->deadline > r->deadline)
        after = after->dl_prev;
    r->dl_prev = after;
    r->dl_next = after ? after->dl_next : st->dl_head;
    if (r->dl_next)
        r->dl_next->dl_prev = r;
    else
        st->dl_tail = r;
    if (after)
        after->dl_next = r;
    else
        st->dl_head = r;
    r->in_dl = 1;
    if (st->dl_armed == 0 || r->deadline < st->dl_armed)
        dl_arm(st, r->deadline);
}

static void dl_remove(struct sl_store *st, struct sl_store_req *r)
{
    if (!r->in_dl)
        return;
    if (r->dl_prev)
        r->dl_prev->dl_next = r->dl_next;
    else
        st->dl_head = r->dl_next;
    if (r->dl_next)
        r->dl_next->dl_prev = r->dl_prev;
    else
        st->dl_tail = r->dl_prev;
    r->dl_prev = r->dl_next = NULL;
    r->in_dl = 0;
}

/* ---- health --------------------------------------------------------------- */

int sl_store_up(const struct sl_store *st)
{
    return st != NULL && !st->closing && st->conn == READY && !st->suspect;
}

/* Logs a change of sl_store_up(), once. */
static void health_changed(struct sl_store *st, const char *why)
{
    int up = sl_store_up(st);
    if (up == st->logged || st->closing)
        return;
    st->logged = up;
    if (up) {
        sl_log_info("quota store up", "addr=%s", st->conf.addr.text);
    } else {
        char q[160];
        sl_log_warn("quota store down", "addr=%s reason=%s", st->conf.addr.text,
                    sl_log_quote(why, strlen(why), q, sizeof(q)));
    }
}

static uint64_t next_backoff(struct sl_store *st)
{
    uint64_t ms = st->backoff_ms;
    st->backoff_ms = ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : ms * 2;
    /* +-25% so a fleet does not come back in step after a store restart. */
    st->rng = st->rng * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t span = ms / 2;
    return ms - ms / 4 + (span ? (st->rng >> 33) % span : 0);
}

static void on_retry(uv_timer_t *t);

/* A deadline passed: no new requests until a probe is answered in time. */
static void mark_suspect(struct sl_store *st, const char *why)
{
    if (st->conn != READY || st->suspect)
        return;
    st->suspect = 1;
    health_changed(st, why);
    uv_timer_start(&st->retry_timer, on_retry, next_backoff(st), 0);
}

static void clear_suspect(struct sl_store *st)
{
    if (!st->suspect)
        return;
    st->suspect = 0;
    st->backoff_ms = BACKOFF_MIN_MS;
    uv_timer_stop(&st->retry_timer);
    health_changed(st, "");
}

/* Error replies that say something about the store rather than the request:
 * 1 = busy or unable to serve now (mark down, probe), 2 = this connection
 * needs its handshake again (drop and reconnect), 0 = the request's own. */
static int error_class(const char *e)
{
    static const char *const busy[] = { "BUSY", "LOADING", "MASTERDOWN", "OOM", "MISCONF",
                                        "TRYAGAIN", "CLUSTERDOWN" };
    static const char *const redo[] = { "NOAUTH", "NOPERM", "WRONGPASS", "READONLY" };
    for (size_t i = 0; i < sizeof(busy) / sizeof(busy[0]); i++)
        if (strncmp(e, busy[i], strlen(busy[i])) == 0)
            return 1;
    for (size_t i = 0; i < sizeof(redo) / sizeof(redo[0]); i++)
        if (strncmp(e, redo[i], strlen(redo[i])) == 0)
            return 2;
    return 0;
}

/* ---- completing requests ------------------------------------------------ */

static void count_latency(struct sl_store *st, struct sl_store_req *r, uint64_t now_ns)
{
    uint64_t us = now_ns > r->sent_ns ? (now_ns - r->sent_ns) / 1000 : 0;
    int b = 0;
    while (b < 11 && us > sl_store_latency_bounds_us[b])
        b++;
    st->stats.latency_le[b]++;
    st->stats.latency_sum_us += us;
    st->stats.latency_count++;
}

/* Marks <r> done and runs its callback (if not cancelled). */
static void complete(struct sl_store *st, struct sl_store_req *r, int status,
                     const int64_t *vals, int n, const char *err)
{
    r->done = 1;
    dl_remove(st, r);
    if (st->hb_req == r)
        st->hb_req = NULL;
    if (r->kind == K_EVAL && status != 0)
        st->stats.errors++;
    if (r->cb != NULL) {
        sl_store_cb *cb = r->cb;
        r->cb = NULL;
        cb(r->data, status, vals, n, err);
    }
}

/* Completes every request in flight with SL_ESTORE and recycles them. */
static void fail_all(struct sl_store *st, const char *why)
{
    /* Detached first: a callback may make requests or close the store. */
    struct sl_store_req *r = st->fifo_head;
    st->fifo_head = st->fifo_tail = NULL;
    st->fifo_n = 0;
    while (r != NULL) {
        struct sl_store_req *next = r->next;
        if (!r->done)
            complete(st, r, SL_ESTORE, NULL, 0, why);
        dl_remove(st, r);
        req_put(st, r);
        r = next;
    }
    st->hb_req = NULL;
}

static void on_deadline(uv_timer_t *t)
{
    struct sl_store *st = t->data;
    uint64_t now = uv_now(st->loop);
    st->dl_armed = 0;
    if (st->dl_head != NULL && st->dl_head->deadline <= now)
        mark_suspect(st, "timeout"); /* before the callbacks: they see the store down */
    struct sl_store_req *r;
    while (!st->closing && (r = st->dl_head) != NULL && r->deadline <= now) {
        /* It stays in the FIFO: its reply is still owed and will be dropped. */
        if (r->kind == K_EVAL)
            st->stats.timeouts++;
        complete(st, r, SL_ESTORE, NULL, 0, "timeout");
    }
    if (!st->closing && st->dl_head != NULL && st->dl_armed == 0)
        dl_arm(st, st->dl_head->deadline);
}

/* ---- sending --------------------------------------------------------------- */

static void arm_flush(struct sl_store *st);

/* Queues an internal command (no callback, no deadline). */
static struct sl_store_req *send_cmd(struct sl_store *st, enum req_kind kind, int script,
                                     int argc, const struct sl_str *argv)
{
    struct sl_store_req *r = req_get(st);
    if (r == NULL)
        return NULL;
    if (encode(&st->out, argc, argv, 0, NULL, 0, NULL) < 0) {
        req_put(st, r);
        return NULL;
    }
    r->kind = (uint8_t)kind;
    r->script = script;
    r->sent_ns = uv_hrtime();
    r->seq = ++st->seq;
    fifo_push(st, r);
    arm_flush(st);
    return r;
}

static int send_load(struct sl_store *st, enum req_kind kind, int i)
{
    struct sl_str argv[3] = { { "SCRIPT", 6 }, { "LOAD", 4 },
                              { st->scripts[i].body, st->scripts[i].len } };
    struct sl_store_req *r = send_cmd(st, kind, i, 3, argv);
    if (r == NULL)
        return -1;
    st->scripts[i].load_seq = r->seq;
    return 0;
}

/* Queues an encoded EVALSHA (<r>->cmd) on the wire. */
static int send_eval(struct sl_store *st, struct sl_store_req *r)
{
    if (ob_append(&st->out, r->cmd.p, r->cmd.len) < 0)
        return -1;
    r->seq = ++st->seq;
    fifo_push(st, r);
    arm_flush(st);
    return 0;
}

/* Makes an EVALSHA request with a deadline. */
static struct sl_store_req *eval_req(struct sl_store *st, enum req_kind kind, int script,
                                     int nkeys, const struct sl_str *keys,
                                     int nargs, const struct sl_str *args)
{
    struct sl_store_req *r = req_get(st);
    if (r == NULL)
        return NULL;
    r->kind = (uint8_t)kind;
    r->script = script;
    r->sent_ns = uv_hrtime();
    /* The loop time is when this turn began: the deadline errs early. */
    r->deadline = uv_now(st->loop) + st->timeout_ms;
    if (encode_evalsha(&r->cmd, st->scripts[script].sha, nkeys, keys, nargs, args) < 0 ||
        send_eval(st, r) < 0) {
        req_put(st, r);
        return NULL;
    }
    dl_insert(st, r);
    return r;
}

static void send_heartbeat(struct sl_store *st)
{
    if (st->hb_req != NULL)
        return;
    struct sl_str key = cstr(st->hb_key);
    struct sl_str args[3] = { cstr(st->id), { HEARTBEAT_TTL, sizeof(HEARTBEAT_TTL) - 1 }, { "0", 1 } };
    st->hb_req = eval_req(st, K_HB, SL_SCRIPT_HEARTBEAT, 1, &key, 3, args);
}

/* Writes everything queued: one uv_try_write, the rest with uv_write. */
static void flush(struct sl_store *st)
{
    if (st->writing || st->out.len == 0 || (st->conn != HANDSHAKE && st->conn != READY))
        return;
    uv_buf_t b = uv_buf_init(st->out.p, (unsigned)st->out.len);
    int n = uv_try_write((uv_stream_t *)&st->tcp, &b, 1);
    if (n == (int)st->out.len) {
        st->out.len = 0;
        return;
    }
    if (n < 0 && n != UV_EAGAIN) {
        drop_conn(st, uv_strerror(n));
        return;
    }
    if (n < 0)
        n = 0;
    /* The kernel took part: the rest goes with a write request from wbuf. */
    struct obuf tmp = st->wbuf;
    st->wbuf = st->out;
    st->out = tmp;
    st->out.len = 0;
    b = uv_buf_init(st->wbuf.p + n, (unsigned)(st->wbuf.len - (size_t)n));
    int rc = uv_write(&st->write_req, (uv_stream_t *)&st->tcp, &b, 1, on_write);
    if (rc < 0) {
        drop_conn(st, uv_strerror(rc));
        return;
    }
    st->writing = 1;
}

static void on_write(uv_write_t *w, int status)
{
    struct sl_store *st = w->data;
    st->writing = 0;
    st->wbuf.len = 0;
    if (status == UV_ECANCELED || st->closing)
        return; /* the connection is closing */
    if (status < 0) {
        drop_conn(st, uv_strerror(status));
        return;
    }
    flush(st);
}

static void on_flush_prepare(uv_prepare_t *h)
{
    struct sl_store *st = h->data;
    flush(st);
    if (st->out.len == 0 || (st->conn != HANDSHAKE && st->conn != READY)) {
        uv_prepare_stop(&st->prepare);
        uv_check_stop(&st->check);
        st->flush_armed = 0;
    }
}

static void on_flush_check(uv_check_t *h)
{
    struct sl_store *st = h->data;
    flush(st);
}

static void arm_flush(struct sl_store *st)
{
    if (st->flush_armed || st->closing)
        return;
    st->flush_armed = 1;
    uv_prepare_start(&st->prepare, on_flush_prepare);
    uv_check_start(&st->check, on_flush_check);
}

/* ---- the reply path ---------------------------------------------------------- */

static void *on_string(const redisReadTask *t, char *s, size_t len)
{
    struct sl_store *st = t->privdata;
    struct reply *rp = &st->reply;
    if (t->parent != NULL) {
        if (!rp->bad)
            rp->bad = "reply is not a flat array of integers";
        return st;
    }
    rp->type = t->type;
    size_t n = len < TEXT_MAX - 1 ? len : TEXT_MAX - 1;
    memcpy(rp->text, s, n);
    rp->text[n] = '\0';
    rp->textlen = len;
    return st; /* any non-NULL pointer: nothing is built */
}

static void *on_array(const redisReadTask *t, int elements)
{
    struct sl_store *st = t->privdata;
    struct reply *rp = &st->reply;
    if (t->parent != NULL) {
        if (!rp->bad)
            rp->bad = "reply is not a flat array of integers";
        return st;
    }
    rp->type = REDIS_REPLY_ARRAY;
    if (elements > SL_STORE_MAX_VALS)
        rp->bad = "reply has too many integers";
    return st;
}

static void *on_integer(const redisReadTask *t, long long v)
{
    struct sl_store *st = t->privdata;
    struct reply *rp = &st->reply;
    if (t->parent == NULL) {
        rp->type = REDIS_REPLY_INTEGER;
        rp->vals[0] = v;
        rp->n = 1;
    } else if (t->parent->parent != NULL) {
        if (!rp->bad)
            rp->bad = "reply is not a flat array of integers";
    } else if (t->idx >= 0 && t->idx < SL_STORE_MAX_VALS) {
        rp->vals[t->idx] = v;
        rp->n = t->idx + 1;
    } else if (!rp->bad) {
        rp->bad = "reply has too many integers";
    }
    return st;
}

static void *on_nil(const redisReadTask *t)
{
    struct sl_store *st = t->privdata;
    struct reply *rp = &st->reply;
    if (t->parent == NULL)
        rp->type = REDIS_REPLY_NIL;
    else if (!rp->bad)
        rp->bad = "reply is not a flat array of integers";
    return st;
}

static void on_free_obj(void *obj)
{
    (void)obj; /* nothing was built */
}

static redisReplyObjectFunctions reply_fn = {
    .createString  = on_string,
    .createArray   = on_array,
    .createInteger = on_integer,
    .createNil     = on_nil,
    .freeObject    = on_free_obj,
};

static void become_ready(struct sl_store *st)
{
    st->conn = READY;
    st->suspect = 0;
    st->backoff_ms = BACKOFF_MIN_MS;
    uv_timer_stop(&st->connect_timer);
    uv_timer_stop(&st->retry_timer);
    if (st->connected_once)
        st->stats.reconnects++;
    st->connected_once = 1;
    health_changed(st, "");
    send_heartbeat(st); /* the live count, at once */
}

/* A reply to the handshake. Returns 0, or -1 after dropping the connection. */
static int on_handshake_reply(struct sl_store *st, struct sl_store_req *r, const struct reply *rp)
{
    char why[TEXT_MAX + 64];
    if (rp->type == REDIS_REPLY_ERROR) {
        snprintf(why, sizeof(why), "%s failed: %s",
                 r->kind == K_HS_LOAD ? "SCRIPT LOAD" : r->script == 0 ? "AUTH" : "SELECT",
                 rp->text);
        drop_conn(st, why);
        return -1;
    }
    if (r->kind == K_HS_LOAD &&
        (rp->type != REDIS_REPLY_STRING || rp->textlen != 40 ||
         memcmp(rp->text, st->scripts[r->script].sha, 40) != 0)) {
        /* Our SHA-1 disagrees with the store's: EVALSHA would never work. */
        snprintf(why, sizeof(why), "SCRIPT LOAD of %d returned an unexpected sha", r->script);
        drop_conn(st, why);
        return -1;
    }
    if (--st->hs_pending == 0)
        become_ready(st);
    return 0;
}

/* A reply to an EVALSHA (K_EVAL or K_HB). Returns 1 when <r> went back on
 * the wire (NOSCRIPT retry): it must not be recycled. */
static int on_eval_reply(struct sl_store *st, struct sl_store_req *r, const struct reply *rp,
                         uint64_t now_ns)
{
    int errcls = rp->type == REDIS_REPLY_ERROR ? error_class(rp->text) : 0;

    if (rp->type == REDIS_REPLY_ERROR && strncmp(rp->text, "NOSCRIPT", 8) == 0 && !r->retried &&
        !r->done && (r->cb != NULL || r->kind == K_HB)) {
        /* SCRIPT FLUSH or a restart behind our back: load it and go again,
         * unless a load sent after this request already did. */
        struct script *s = &st->scripts[r->script];
        int ok = 1;
        if (s->load_seq < r->seq) {
            ok = send_load(st, K_LOAD, r->script) == 0;
            if (ok)
                st->stats.noscript_reloads++;
        }
        if (ok) {
            r->retried = 1;
            if (send_eval(st, r) == 0)
                return 1;
        }
    }
    if (r->kind == K_EVAL)
        count_latency(st, r, now_ns);
    if (r->done)
        return 0; /* timed out: the reply is dropped */

    const char *err = NULL;
    int status = SL_ESTORE;
    if (rp->bad)
        err = rp->bad;
    else if (rp->type == REDIS_REPLY_INTEGER || rp->type == REDIS_REPLY_ARRAY)
        status = 0;
    else if (rp->type == REDIS_REPLY_ERROR)
        err = rp->text;
    else
        err = "unexpected reply type";

    if (r->kind == K_HB) {
        char q[160];
        int was_probe = st->suspect;
        if (status == 0 && rp->n >= 1)
            st->live = rp->vals[0] > 1 ? (uint64_t)rp->vals[0] : 1;
        complete(st, r, status, rp->vals, rp->n, err);
        if (errcls == 1)
            mark_suspect(st, rp->text);
        else if (errcls == 0 && was_probe)
            clear_suspect(st); /* answered in time: the store serves again */
        else if (errcls == 0 && status != 0)
            sl_log_debug("quota store heartbeat failed", "error=%s",
                         sl_log_quote(err, strlen(err), q, sizeof(q)));
    } else {
        if (errcls == 1)
            mark_suspect(st, rp->text); /* first: the callback sees the store down */
        complete(st, r, status, rp->vals, rp->n, err);
    }
    if (errcls == 2 && !st->closing && st->conn == READY) {
        char why[TEXT_MAX + 16];
        snprintf(why, sizeof(why), "%s", rp->text);
        drop_conn(st, why);
    }
    return 0;
}

static void on_reply(struct sl_store *st, uint64_t now_ns)
{
    struct reply *rp = &st->reply;
    struct sl_store_req *r = fifo_pop(st);
    if (r == NULL) {
        drop_conn(st, "reply without a request");
        return;
    }
    switch ((enum req_kind)r->kind) {
    case K_HS:
    case K_HS_LOAD:
        on_handshake_reply(st, r, rp);
        break;
    case K_LOAD:
        if (rp->type != REDIS_REPLY_STRING) {
            const char *e = rp->type == REDIS_REPLY_ERROR ? rp->text : "unexpected reply";
            char q[160];
            sl_log_warn_rl("store_script_load", "quota store script load failed",
                           "script=%d error=%s", r->script,
                           sl_log_quote(e, strlen(e), q, sizeof(q)));
        }
        break;
    case K_EVAL:
    case K_HB:
        if (on_eval_reply(st, r, rp, now_ns))
            return;
        break;
    }
    /* Recycled after the callbacks: a request dropped by drop_conn() above
     * was popped already, so only <r> is ours here. */
    req_put(st, r);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    (void)hint;
    struct sl_store *st = h->data;
    *buf = uv_buf_init(st->rbuf, READ_SIZE);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct sl_store *st = s->data;
    if (nread == 0)
        return;
    if (nread < 0) {
        drop_conn(st, nread == UV_EOF ? "connection closed by the store" : uv_strerror((int)nread));
        return;
    }
    if (redisReaderFeed(st->reader, buf->base, (size_t)nread) != REDIS_OK) {
        drop_conn(st, "out of memory");
        return;
    }
    uint64_t now_ns = uv_hrtime();
    uint64_t gen = st->gen;
    for (;;) {
        void *obj = NULL;
        if (redisReaderGetReply(st->reader, &obj) != REDIS_OK) {
            char why[160];
            snprintf(why, sizeof(why), "bad reply: %s", st->reader->errstr);
            drop_conn(st, why);
            return;
        }
        if (obj == NULL)
            break;
        on_reply(st, now_ns);
        if (st->gen != gen || st->closing)
            return; /* dropped or closed by a callback: the reader is gone */
        st->reply.type = 0;
        st->reply.n = 0;
        st->reply.bad = NULL;
        st->reply.textlen = 0;
        st->reply.text[0] = '\0';
    }
    /* hiredis waits for a whole bulk before its callback: cap what it holds. */
    if (st->reader->len - st->reader->pos > MAX_UNPARSED)
        drop_conn(st, "reply too large");
}

/* ---- connection ----------------------------------------------------------- */

static void on_handle_close(uv_handle_t *h);

static void on_tcp_close(uv_handle_t *h)
{
    struct sl_store *st = h->data;
    st->tcp_open = 0;
    if (st->closing) {
        on_handle_close(h);
        return;
    }
    st->handles--;
    st->conn = DISCONNECTED;
    uint64_t wait = next_backoff(st);
    if (st->reconnect_now) {
        st->reconnect_now = 0;
        wait = 0;
    }
    uv_timer_start(&st->retry_timer, on_retry, wait, 0);
}

/* Ends the connection: every request in flight completes with SL_ESTORE. */
static void drop_conn(struct sl_store *st, const char *why)
{
    if (!st->tcp_open || st->conn == DROPPING)
        return;
    char q[160];
    sl_log_debug("quota store connection lost", "addr=%s reason=%s", st->conf.addr.text,
                 sl_log_quote(why, strlen(why), q, sizeof(q)));
    st->gen++;
    st->conn = DROPPING;
    st->suspect = 0;
    st->hs_pending = 0;
    uv_timer_stop(&st->connect_timer);
    uv_timer_stop(&st->retry_timer);
    uv_read_stop((uv_stream_t *)&st->tcp);
    uv_close((uv_handle_t *)&st->tcp, on_tcp_close);
    if (st->reader != NULL) {
        redisReaderFree(st->reader);
        st->reader = NULL;
    }
    st->out.len = 0;
    health_changed(st, why);
    fail_all(st, why);
}

static void on_connect_timeout(uv_timer_t *t)
{
    struct sl_store *st = t->data;
    drop_conn(st, st->conn == CONNECTING ? "connect timeout" : "handshake timeout");
}

static void on_connect(uv_connect_t *c, int status)
{
    struct sl_store *st = c->data;
    if (status == UV_ECANCELED || st->conn != CONNECTING)
        return; /* closed while connecting */
    if (status < 0) {
        drop_conn(st, uv_strerror(status));
        return;
    }
    uv_tcp_nodelay(&st->tcp, 1);
    uv_tcp_keepalive(&st->tcp, 1, 30);
    st->reader = redisReaderCreateWithFunctions(&reply_fn);
    if (st->reader == NULL) {
        drop_conn(st, "out of memory");
        return;
    }
    st->reader->privdata = st;
    /* hiredis frees its buffer when it empties above maxbuf (16 KiB): a big
     * batch of replies would do that every read. Keep a larger one. */
    st->reader->maxbuf = 256 * 1024;
    st->reply.type = 0;
    st->reply.n = 0;
    st->reply.bad = NULL;
    st->seq = 0;
    st->conn = HANDSHAKE;
    int rc = uv_read_start((uv_stream_t *)&st->tcp, on_alloc, on_read);
    if (rc < 0) {
        drop_conn(st, uv_strerror(rc));
        return;
    }
    int fail = 0;
    st->hs_pending = 0;
    if (st->conf.password != NULL || st->conf.user != NULL) {
        struct sl_str argv[3] = { { "AUTH", 4 } };
        int argc = 1;
        if (st->conf.user != NULL)
            argv[argc++] = cstr(st->conf.user);
        argv[argc++] = cstr(st->conf.password ? st->conf.password : "");
        fail |= send_cmd(st, K_HS, 0, argc, argv) == NULL;
        st->hs_pending++;
    }
    if (st->conf.db != 0) {
        char db[16];
        snprintf(db, sizeof(db), "%d", st->conf.db);
        struct sl_str argv[2] = { { "SELECT", 6 }, cstr(db) };
        fail |= send_cmd(st, K_HS, 1, 2, argv) == NULL;
        st->hs_pending++;
    }
    for (int i = 0; i < st->n_scripts; i++) {
        fail |= send_load(st, K_HS_LOAD, i) < 0;
        st->hs_pending++;
    }
    if (fail)
        drop_conn(st, "out of memory");
}

static void start_connect(struct sl_store *st)
{
    int rc = uv_tcp_init(st->loop, &st->tcp);
    if (rc < 0) {
        st->conn = DISCONNECTED;
        uv_timer_start(&st->retry_timer, on_retry, next_backoff(st), 0);
        return;
    }
    st->tcp.data = st;
    st->tcp_open = 1;
    st->handles++;
    st->conn = CONNECTING;
    st->connect_req.data = st;
    rc = uv_tcp_connect(&st->connect_req, &st->tcp, (const struct sockaddr *)&st->res.ss,
                        on_connect);
    if (rc < 0) {
        drop_conn(st, uv_strerror(rc));
        return;
    }
    uint64_t ms = (st->conf.connect_timeout_us + 999) / 1000;
    uv_timer_start(&st->connect_timer, on_connect_timeout, ms ? ms : 1, 0);
}

/* A lookup of the store's host name ended: connect to what it gave, or,
 * when it failed, to the last good address. Said once per change. */
static void on_resolved(struct sl_resolve *r, enum sl_resolve_event ev, int err)
{
    struct sl_store *st = r->data;
    char addr[64];
    sl_resolve_fmt(&r->ss, addr, sizeof(addr));
    if (ev == SL_RESOLVE_CHANGED || ev == SL_RESOLVE_RECOVERED)
        sl_log_info(ev == SL_RESOLVE_CHANGED ? "quota store address changed"
                                             : "quota store name resolved again",
                    "url=%s resolved=%s", st->conf.addr.text, addr);
    else if (ev == SL_RESOLVE_FAILING)
        sl_log_warn("quota store name not resolved: keeping the last address",
                    "url=%s resolved=%s err=\"%s\"", st->conf.addr.text, addr, uv_strerror(err));
    if (!st->closing && st->conn == DISCONNECTED)
        start_connect(st);
}

static void on_retry(uv_timer_t *t)
{
    struct sl_store *st = t->data;
    if (st->closing)
        return;
    if (st->conn == DISCONNECTED) {
        /* A store named by a host name may have moved (a failover that
         * repoints a DNS record): look it up again first, off the loop;
         * on_resolved connects. */
        if (st->res.name[0] != '\0' && sl_resolve_start(&st->res, st->loop) == 0)
            return;
        start_connect(st);
        return;
    }
    if (st->conn != READY || !st->suspect)
        return;
    /* Suspect: a connection that answers nothing at all is dropped; else probe. */
    if (st->fifo_head != NULL && uv_hrtime() - st->fifo_head->sent_ns > STALL_DROP_NS) {
        drop_conn(st, "store stalled");
        return;
    }
    send_heartbeat(st);
    uv_timer_start(&st->retry_timer, on_retry, next_backoff(st), 0);
}

static void on_heartbeat(uv_timer_t *t)
{
    struct sl_store *st = t->data;
    if (sl_store_up(st))
        send_heartbeat(st);
}

/* ---- configuration -------------------------------------------------------- */

static void free_conf_strings(struct sl_store_conf *c)
{
    if (c->password != NULL)
        explicit_bzero(c->password, strlen(c->password)); /* not left in freed memory */
    free(c->url);
    free(c->user);
    free(c->password_file);
    free(c->password);
    free(c->key_prefix);
    c->url = c->user = c->password_file = c->password = c->key_prefix = NULL;
}

static int dup_str(char **dst, const char *src)
{
    *dst = NULL;
    if (src == NULL)
        return 0;
    *dst = strdup(src);
    return *dst ? 0 : -1;
}

/* Copies <src> into <st>'s own conf (strings duplicated). Returns 0 or -1. */
static int set_conf(struct sl_store *st, const struct sl_store_conf *src)
{
    struct sl_store_conf c = *src;
    c.url = c.user = c.password_file = c.password = c.key_prefix = NULL;
    char *key = NULL;
    const char *prefix = src->key_prefix ? src->key_prefix : "sluice:";
    if (dup_str(&c.url, src->url) || dup_str(&c.user, src->user) ||
        dup_str(&c.password_file, src->password_file) || dup_str(&c.password, src->password) ||
        dup_str(&c.key_prefix, prefix) || (key = malloc(strlen(prefix) + 10)) == NULL) {
        free_conf_strings(&c);
        return -1;
    }
    sprintf(key, "%sinstances", prefix);
    free_conf_strings(&st->conf);
    free(st->hb_key);
    st->conf = c;
    st->hb_key = key;
    /* Resolved by the loader just now (conf/resolve.h). */
    char host[sizeof(c.addr.text)] = "";
    if (c.addr.named) {
        snprintf(host, sizeof(host), "%s", c.addr.text);
        char *colon = strrchr(host, ':');
        if (colon != NULL)
            *colon = '\0';
    }
    sl_resolve_set(&st->res, host, c.addr.port, &c.addr.ss, uv_now(st->loop));
    uint64_t ms = (c.timeout_us + 999) / 1000;
    st->timeout_ms = ms ? ms : 1;
    return 0;
}

static int same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return 0;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
        return x->sin6_port == y->sin6_port &&
               memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
    }
    return memcmp(a, b, sizeof(*a)) == 0;
}

static int same_str(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* ---- API -------------------------------------------------------------------- */

static int set_script(struct script *s, const char *body)
{
    char *copy = strdup(body);
    if (copy == NULL)
        return -1;
    free(s->body);
    s->body = copy;
    s->len = strlen(copy);
    sha1_hex(copy, s->len, s->sha);
    s->load_seq = 0;
    return 0;
}

static void store_free(struct sl_store *st)
{
    for (int i = 0; i < st->n_scripts; i++)
        free(st->scripts[i].body);
    while (st->pool != NULL) {
        struct sl_store_req *r = st->pool;
        st->pool = r->next;
        free(r->cmd.p);
        free(r);
    }
    if (st->reader != NULL)
        redisReaderFree(st->reader);
    free_conf_strings(&st->conf);
    free(st->hb_key);
    free(st->id);
    free(st->rbuf);
    free(st->out.p);
    free(st->wbuf.p);
    free(st);
}

static void on_handle_close(uv_handle_t *h)
{
    struct sl_store *st = h->data;
    if (--st->handles == 0 && st->closing)
        store_free(st);
}

struct sl_store *sl_store_new(uv_loop_t *loop, const struct sl_store_conf *conf,
                              const char *instance_id)
{
    struct sl_store *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return NULL;
    st->loop = loop;
    st->logged = -1;
    st->live = 1;
    st->backoff_ms = BACKOFF_MIN_MS;
    st->rng = uv_hrtime() ^ (uint64_t)(uintptr_t)st;
    st->res.cb = on_resolved;
    st->res.data = st;
    if (set_conf(st, conf) < 0 || (st->id = strdup(instance_id ? instance_id : "sluice")) == NULL ||
        (st->rbuf = malloc(READ_SIZE)) == NULL)
        goto fail;
    for (int i = 0; i < SL_SCRIPT_COUNT; i++)
        if (set_script(&st->scripts[i], sl_lua_scripts[i]) < 0)
            goto fail;
    st->n_scripts = SL_SCRIPT_COUNT;

    uv_timer_init(loop, &st->connect_timer);
    uv_timer_init(loop, &st->retry_timer);
    uv_timer_init(loop, &st->dl_timer);
    uv_timer_init(loop, &st->hb_timer);
    uv_prepare_init(loop, &st->prepare);
    uv_check_init(loop, &st->check);
    st->handles = 6;
    st->connect_timer.data = st->retry_timer.data = st->dl_timer.data = st->hb_timer.data = st;
    st->prepare.data = st->check.data = st->write_req.data = st;
    /* Flushing alone must not keep the loop running. */
    uv_unref((uv_handle_t *)&st->prepare);
    uv_unref((uv_handle_t *)&st->check);
    uv_timer_start(&st->hb_timer, on_heartbeat, HEARTBEAT_MS, HEARTBEAT_MS);
    start_connect(st);
    return st;

fail:
    store_free(st);
    return NULL;
}

void sl_store_reconfigure(struct sl_store *st, const struct sl_store_conf *conf)
{
    if (st == NULL || st->closing)
        return;
    int reconnect = !same_addr(&st->res.ss, &conf->addr.ss) ||
                    !same_str(st->conf.user, conf->user) ||
                    !same_str(st->conf.password, conf->password) || st->conf.db != conf->db;
    if (set_conf(st, conf) < 0) {
        sl_log_error("quota store reconfigure failed", "error=\"%s\"", sl_strerror(SL_ENOMEM));
        return;
    }
    if (!reconnect)
        return;
    st->backoff_ms = BACKOFF_MIN_MS;
    if (st->conn == DISCONNECTED) {
        uv_timer_stop(&st->retry_timer);
        start_connect(st);
    } else {
        st->reconnect_now = 1;
        drop_conn(st, "reconfigured");
    }
}

void sl_store_close(struct sl_store *st)
{
    if (st == NULL || st->closing)
        return;
    st->closing = 1; /* from here on sl_store_eval() says no */
    sl_resolve_stop(&st->res);
    fail_all(st, "store closed");
    if (st->conn == READY && !st->writing) {
        /* Best effort: leave the heartbeat set now rather than in 5 s. */
        struct sl_str key = cstr(st->hb_key);
        char num[2] = "1";
        struct sl_str argv[7] = { { "EVALSHA", 7 }, { st->scripts[SL_SCRIPT_HEARTBEAT].sha, 40 },
                                  { "1", 1 }, key, cstr(st->id),
                                  { HEARTBEAT_TTL, sizeof(HEARTBEAT_TTL) - 1 }, { num, 1 } };
        st->out.len = 0;
        if (encode(&st->out, 7, argv, 0, NULL, 0, NULL) == 0) {
            uv_buf_t b = uv_buf_init(st->out.p, (unsigned)st->out.len);
            (void)uv_try_write((uv_stream_t *)&st->tcp, &b, 1);
        }
    }
    st->out.len = 0;
    if (st->tcp_open && st->conn != DROPPING) {
        uv_read_stop((uv_stream_t *)&st->tcp);
        uv_close((uv_handle_t *)&st->tcp, on_tcp_close);
    }
    st->conn = DROPPING;
    uv_close((uv_handle_t *)&st->connect_timer, on_handle_close);
    uv_close((uv_handle_t *)&st->retry_timer, on_handle_close);
    uv_close((uv_handle_t *)&st->dl_timer, on_handle_close);
    uv_close((uv_handle_t *)&st->hb_timer, on_handle_close);
    uv_close((uv_handle_t *)&st->prepare, on_handle_close);
    uv_close((uv_handle_t *)&st->check, on_handle_close);
}

struct sl_store_req *sl_store_eval(struct sl_store *st, enum sl_script id,
                                   int nkeys, const struct sl_str *keys,
                                   int nargs, const struct sl_str *args,
                                   sl_store_cb *cb, void *data)
{
    if (!sl_store_up(st) || (int)id < 0 || (int)id >= st->n_scripts || nkeys < 0 || nargs < 0 ||
        st->out.len > MAX_OUT)
        return NULL;
    struct sl_store_req *r = eval_req(st, K_EVAL, (int)id, nkeys, keys, nargs, args);
    if (r == NULL)
        return NULL;
    r->cb = cb;
    r->data = data;
    st->stats.requests++;
    return r;
}

void sl_store_cancel(struct sl_store_req *req)
{
    if (req != NULL)
        req->cb = NULL;
}

uint64_t sl_store_live_instances(const struct sl_store *st)
{
    return st != NULL && st->live > 0 ? st->live : 1;
}

const struct sl_store_stats *sl_store_stats(const struct sl_store *st)
{
    return &st->stats;
}

int sl_store_script_add(struct sl_store *st, const char *body)
{
    if (st == NULL || body == NULL || st->n_scripts >= MAX_SCRIPTS)
        return -1;
    if (set_script(&st->scripts[st->n_scripts], body) < 0)
        return -1;
    return st->n_scripts++;
}

int sl_store_script_set(struct sl_store *st, int id, const char *body)
{
    if (st == NULL || body == NULL || id < 0 || id >= st->n_scripts)
        return -1;
    return set_script(&st->scripts[id], body);
}

const char *sl_store_script_sha(const struct sl_store *st, int id)
{
    if (st == NULL || id < 0 || id >= st->n_scripts)
        return NULL;
    return st->scripts[id].sha;
}

size_t sl_store_in_flight(const struct sl_store *st)
{
    return st != NULL ? st->fifo_n : 0;
}

const char *sl_store_instance_id(const struct sl_store *st)
{
    return st->id;
}

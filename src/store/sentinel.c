/* sluice — where the master is, asked of Redis Sentinel.
 *
 * Two connections, each one struct link, each to one sentinel at a time:
 *
 *   ask link (short-lived, one per sentinel tried)
 *     start_round --> connect order[0] --> [AUTH] SENTINEL get-master-addr-by-name NAME
 *         ^             |  refused, timeout, error, nil, not an address
 *         |             v
 *         |          next in order[] ... none left: "no master known",
 *         |             retry after the backoff
 *         |          an address: that sentinel goes first in order[],
 *         |             the link closes, report() if the address changed
 *         +-- sl_sentinel_reask(), a resubscription, the retry timer
 *
 *   sub link (long-lived)
 *     connect sentinel[i] --> [AUTH] SUBSCRIBE +switch-master --> "subscribe" confirmed
 *         ^                                                          |  PING every ping_us,
 *         |  lost, refused, timeout, PING unanswered:                |  "message" for NAME:
 *         +-- i = i + 1 (at once; after the backoff once every       |  report() at once
 *             sentinel failed in a row)                              v
 *                                                          resubscribed: start_round
 *
 * Link states: IDLE (no socket; its timer may wait for a retry) ->
 * CONNECTING (timer: connect_timeout) -> ACTIVE (timer: the question's
 * deadline; for a confirmed subscription the PING period, then the PING's
 * deadline) -> DROPPING (uv_close pending) -> IDLE in the close callback,
 * where the flow goes on. One timer per link serves every state.
 *
 * Replies go through hiredis's reader with object functions that build
 * nothing: they keep the top-level type and the first few elements of a
 * flat array, cut to TEXT_MAX bytes. What the reader may hold unparsed is
 * capped before each feed (MAX_UNPARSED): a sentinel cannot make us buffer
 * more than that plus one read.
 *
 * TLS (conf tls): on connect the link makes its engine (store/tlsio.h, the
 * pumping store nodes use too); commands wait in <out> until the handshake
 * is done, replies come out of the engine into the same reader. The
 * question's deadline covers the handshake. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/read.h>

#include "core/err.h"
#include "core/log.h"
#include "core/resolve.h"
#include "core/tls.h"
#include "store/sentinel.h"
#include "store/tlsio.h"

#define BACKOFF_MIN_MS  100           /* first retry after a failed round */
#define BACKOFF_MAX_MS  2000          /* retries are at most this far apart */
#define PING_MS_DEFAULT 1000          /* subscription PING period when ping_us is 0 */
#define READ_SIZE       4096          /* one read: sentinel replies are small */
#define MAX_UNPARSED    (64 * 1024)   /* reply bytes the reader may hold unfinished */
#define TEXT_MAX        256           /* kept of each string: a switch message fits */
#define ELEMS           4             /* array elements kept */
#define WHY_MAX         160

enum link_state { L_IDLE, L_CONNECTING, L_ACTIVE, L_DROPPING };

/* The reply being parsed: what the object functions kept. */
struct reply {
    int         type;                 /* REDIS_REPLY_* of the top level, 0 before it */
    int         n;                    /* top-level array: elements announced */
    const char *bad;                  /* nested deeper than one array: why */
    int         etype[ELEMS];         /* type of element i (element 0 also holds a
                                         top-level string, status or error) */
    size_t      elen[ELEMS];          /* its full length (may exceed TEXT_MAX - 1) */
    char        e[ELEMS][TEXT_MAX];   /* its first bytes, NUL-terminated */
};

struct link {
    struct sl_sentinel *s;
    uint8_t             sub;          /* 1: the subscription, 0: the ask link */
    enum link_state     state;
    int                 target;       /* index in s->addr of the sentinel it talks to */
    uint64_t            gen;          /* bumped on every drop: stale callbacks see it */
    uint8_t             expect_auth;  /* an AUTH reply comes first */
    uint8_t             subscribed;   /* sub: the subscription is confirmed */
    uint8_t             ping_out;     /* sub: a PING is unanswered */
    uv_tcp_t            tcp;          /* initialized from CONNECTING until its close cb */
    uv_connect_t        creq;
    uv_timer_t          timer;        /* connect timeout, deadline, PING period, retry */
    redisReader        *reader;       /* while ACTIVE */
    struct sl_tlsio     io;           /* TLS: the engine (io.tls, while ACTIVE) and its writes */
    struct sl_obuf      out;          /* TLS: commands the engine has not taken yet (a few
                                         short ones; AUTH: wiped when the link drops) */
    struct reply        rp;
    char                rbuf[READ_SIZE];
};

/* One write in flight; freed (and wiped: AUTH carries a password) in its callback. */
struct wreq {
    uv_write_t req;
    size_t     len;
    char       data[];
};

struct sl_sentinel {
    uv_loop_t              *loop;
    sl_sentinel_cb         *cb;
    void                   *data;
    int                     n;                        /* sentinels */
    struct sockaddr_storage addr[SL_SENTINEL_MAX];    /* as configured */
    char                    text[SL_SENTINEL_MAX][80];/* as written, for logs */
    char                    host[SL_SENTINEL_MAX][80];/* TLS: the name its certificate must
                                                         carry (host name, or address) */
    int                     order[SL_SENTINEL_MAX];   /* indexes into addr: asking order */
    struct sl_resolve       res[SL_SENTINEL_MAX];     /* a name that did not resolve at
                                                         load (addr empty): looked up again
                                                         when it is to be tried */
    char                   *name;                     /* master name */
    char                   *user;                     /* AUTH user or NULL */
    char                   *password;                 /* AUTH password or NULL */
    uint8_t                 tls;                      /* the sentinels speak TLS */
    struct sl_tls_ctx      *tls_ctx;                  /* its context (a reference), or NULL */
    uint64_t                connect_ms;
    uint64_t                timeout_ms;
    uint64_t                ping_ms;

    struct link             ask;
    struct link             sub;
    int                     handles;                  /* initialized and not yet closed */
    uint8_t                 closing;

    uint8_t                 known;                    /* <master> holds an address */
    struct sockaddr_storage master;                   /* the last one reported */
    struct sockaddr_storage switched_from;            /* the old address of the last
                                                         +switch-master (family 0: none) */
    uint64_t                switched_ms;              /* loop time it was heard */

    uint8_t                 round_active;             /* a round is asking */
    uint8_t                 round_waiting;            /* a failed round waits for its retry */
    uint8_t                 ask_wanted;               /* a round is due once the ask link closed */
    int                     round_pos;                /* next position in order[] to try */
    int                     failing;                  /* -1 nothing logged, 0 known, 1 "no master known" */
    char                    last_why[WHY_MAX];        /* the last sentinel's failure, for that line */
    uint64_t                ask_backoff_ms;

    int                     sub_next;                 /* sentinel the sub link tries next */
    int                     sub_fails;                /* sub attempts failed in a row */
    uint8_t                 sub_once;                 /* a subscription was confirmed before */
    uint64_t                sub_backoff_ms;
    uint64_t                rng;

    struct sl_sentinel_stats stats;
};

static void link_connect(struct link *l, int target);
static void link_fail(struct link *l, const char *why);
static void start_round(struct sl_sentinel *s);
static void on_link_timer(uv_timer_t *t);

/* ---- pure parts ------------------------------------------------------------ */

int sl_sentinel_parse_addr(const char *ip, size_t iplen, const char *port, size_t portlen,
                           struct sockaddr_storage *out)
{
    char buf[64];
    if (iplen == 0 || iplen >= sizeof(buf) || portlen == 0 || portlen > 5)
        return -1;
    unsigned long p = 0;
    for (size_t i = 0; i < portlen; i++) {
        if (port[i] < '0' || port[i] > '9')
            return -1;
        p = p * 10 + (unsigned long)(port[i] - '0');
    }
    if (p == 0 || p > 65535)
        return -1;
    memcpy(buf, ip, iplen);
    buf[iplen] = '\0';
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, buf, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)p);
    } else if (inet_pton(AF_INET6, buf, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)p);
    } else {
        return -1;
    }
    *out = ss;
    return 0;
}

int sl_sentinel_parse_switch(const char *msg, size_t len, const char *name,
                             struct sockaddr_storage *out, struct sockaddr_storage *old)
{
    /* <name> <oldip> <oldport> <newip> <newport>: five words, one space apart. */
    const char *w[5];
    size_t wl[5];
    size_t i = 0;
    for (int k = 0; k < 5; k++) {
        if (i >= len || msg[i] == ' ')
            return -1;
        w[k] = msg + i;
        while (i < len && msg[i] != ' ')
            i++;
        wl[k] = (size_t)(msg + i - w[k]);
        if (k < 4) {
            if (i >= len)
                return -1;
            i++; /* the space */
        }
    }
    if (i != len)
        return -1;
    struct sockaddr_storage ss;
    if (sl_sentinel_parse_addr(w[3], wl[3], w[4], wl[4], &ss) < 0)
        return -1;
    if (wl[0] != strlen(name) || memcmp(w[0], name, wl[0]) != 0)
        return 0;
    *out = ss;
    if (old != NULL && sl_sentinel_parse_addr(w[1], wl[1], w[2], wl[2], old) < 0)
        memset(old, 0, sizeof(*old));
    return 1;
}


int sl_sentinel_stale(const struct sockaddr_storage *answer, const struct sockaddr_storage *from,
                      uint64_t switched_ms, uint64_t now_ms)
{
    return from->ss_family != 0 && now_ms - switched_ms < SL_SENTINEL_HOLD_MS &&
           sl_resolve_same_addr(answer, from);
}

/* ---- small helpers ------------------------------------------------------------ */

static uint64_t next_backoff(struct sl_sentinel *s, uint64_t *backoff)
{
    uint64_t ms = *backoff;
    *backoff = ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : ms * 2;
    /* +-25% so a fleet does not ask in step after the sentinels come back. */
    s->rng = s->rng * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t span = ms / 2;
    return ms - ms / 4 + (span ? (s->rng >> 33) % span : 0);
}

static const char *qs(const char *v, char *buf, size_t cap)
{
    return sl_log_quote(v, strlen(v), buf, cap);
}

/* Reports <addr> as the master unless it is the one reported last. */
static void report(struct sl_sentinel *s, const struct sockaddr_storage *addr, const char *how)
{
    if (s->closing || (s->known && sl_resolve_same_addr(&s->master, addr)))
        return;
    char now[64], before[64] = "none", q[96];
    sl_resolve_fmt(addr, now, sizeof(now));
    if (s->known)
        sl_resolve_fmt(&s->master, before, sizeof(before));
    sl_log_info("sentinel: master address", "master=%s addr=%s previous=%s via=%s",
                qs(s->name, q, sizeof(q)), now, before, how);
    s->master = *addr;
    s->known = 1;
    s->stats.changes++;
    struct sockaddr_storage copy = *addr; /* the callback may close us */
    s->cb(s->data, &copy);
}

/* ---- RESP out -------------------------------------------------------------------- */

static size_t cmd_size(int argc, const char *const *argv)
{
    size_t n = 16;
    for (int i = 0; i < argc; i++)
        n += strlen(argv[i]) + 32;
    return n;
}

static char *cmd_put(char *p, int argc, const char *const *argv)
{
    p += sprintf(p, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++) {
        size_t len = strlen(argv[i]);
        p += sprintf(p, "$%zu\r\n", len);
        memcpy(p, argv[i], len);
        p += len;
        *p++ = '\r';
        *p++ = '\n';
    }
    return p;
}

static void on_written(uv_write_t *req, int status)
{
    struct wreq *w = (struct wreq *)req;
    struct link *l = req->data;
    explicit_bzero(w->data, w->len);
    free(w);
    if (status < 0 && status != UV_ECANCELED && l->state == L_ACTIVE)
        link_fail(l, uv_strerror(status));
}

/* A TLS link's ciphertext write is done: the next one goes. */
static void on_tls_written(uv_write_t *req, int status)
{
    struct link *l = req->data;
    char why[WHY_MAX];
    sl_tlsio_written(&l->io);
    if (status == UV_ECANCELED || l->state != L_ACTIVE || l->io.tls == NULL)
        return; /* dropped or closed meanwhile */
    if (status < 0)
        link_fail(l, uv_strerror(status));
    else if (sl_tlsio_flush(&l->io, &l->out, why, sizeof(why)) < 0)
        link_fail(l, why);
}

/* Writes [AUTH ...] (when <auth> and a password is set) then <argv> in one
 * write (TLS: queued for the engine, and as much written as it takes).
 * Returns 0, a libuv error, or 1 when the link failed on the way (already
 * dropped: the caller stops). */
static int link_send(struct link *l, int auth, int argc, const char *const *argv)
{
    struct sl_sentinel *s = l->s;
    const char *av[3] = { "AUTH", NULL, NULL };
    int ac = 0;
    if (auth && s->password != NULL) {
        ac = 1;
        if (s->user != NULL)
            av[ac++] = s->user;
        av[ac++] = s->password;
    }
    size_t cap = (ac ? cmd_size(ac, av) : 0) + cmd_size(argc, argv);
    if (l->io.tls != NULL) {
        /* Encrypted once the handshake is done; until then it waits. */
        char why[WHY_MAX];
        if (sl_wire_reserve(&l->out, cap) < 0)
            return UV_ENOMEM;
        char *q = l->out.p + l->out.len;
        if (ac)
            q = cmd_put(q, ac, av);
        q = cmd_put(q, argc, argv);
        l->out.len = (size_t)(q - l->out.p);
        l->expect_auth |= ac > 0;
        if (sl_tlsio_flush(&l->io, &l->out, why, sizeof(why)) < 0) {
            link_fail(l, why);
            return 1;
        }
        return 0;
    }
    struct wreq *w = malloc(sizeof(*w) + cap);
    if (w == NULL)
        return UV_ENOMEM;
    char *p = w->data;
    if (ac)
        p = cmd_put(p, ac, av);
    p = cmd_put(p, argc, argv);
    w->len = (size_t)(p - w->data);
    w->req.data = l;
    uv_buf_t b = uv_buf_init(w->data, (unsigned)w->len);
    int rc = uv_write(&w->req, (uv_stream_t *)&l->tcp, &b, 1, on_written);
    if (rc < 0) {
        explicit_bzero(w->data, w->len);
        free(w);
        return rc;
    }
    l->expect_auth |= ac > 0;
    return 0;
}

/* ---- RESP in: object functions that keep a little, build nothing ----------- */

static void keep(struct reply *rp, int i, int type, const char *str, size_t len)
{
    if (i < 0 || i >= ELEMS)
        return;
    rp->etype[i] = type;
    rp->elen[i] = len;
    size_t n = len < TEXT_MAX - 1 ? len : TEXT_MAX - 1;
    if (str != NULL)
        memcpy(rp->e[i], str, n);
    else
        n = 0;
    rp->e[i][n] = '\0';
}

/* Where a value at <t> goes: -1 top level, an element index, or -2 deeper. */
static int slot(const redisReadTask *t)
{
    if (t->parent == NULL)
        return -1;
    return t->parent->parent == NULL ? t->idx : -2;
}

static void *on_string(const redisReadTask *t, char *str, size_t len)
{
    struct link *l = t->privdata;
    int i = slot(t);
    if (i == -1) {
        l->rp.type = t->type;
        keep(&l->rp, 0, t->type, str, len);
    } else if (i >= 0) {
        keep(&l->rp, i, t->type, str, len);
    } else if (!l->rp.bad) {
        l->rp.bad = "nested reply";
    }
    return l; /* any non-NULL pointer: nothing is built */
}

static void *on_array(const redisReadTask *t, int elements)
{
    struct link *l = t->privdata;
    int i = slot(t);
    if (i == -1) {
        l->rp.type = REDIS_REPLY_ARRAY;
        l->rp.n = elements;
    } else if (!l->rp.bad) {
        l->rp.bad = "nested reply";
    }
    return l;
}

static void *on_integer(const redisReadTask *t, long long v)
{
    struct link *l = t->privdata;
    char num[24];
    int n = snprintf(num, sizeof(num), "%lld", v);
    int i = slot(t);
    if (i == -1)
        l->rp.type = REDIS_REPLY_INTEGER;
    else if (i == -2 && !l->rp.bad)
        l->rp.bad = "nested reply";
    keep(&l->rp, i == -1 ? 0 : i, REDIS_REPLY_INTEGER, num, (size_t)n);
    return l;
}

static void *on_nil(const redisReadTask *t)
{
    struct link *l = t->privdata;
    int i = slot(t);
    if (i == -1)
        l->rp.type = REDIS_REPLY_NIL;
    else if (i == -2 && !l->rp.bad)
        l->rp.bad = "nested reply";
    keep(&l->rp, i == -1 ? 0 : i, REDIS_REPLY_NIL, NULL, 0);
    return l;
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

static void reply_reset(struct reply *rp)
{
    rp->type = 0;
    rp->n = 0;
    rp->bad = NULL;
    for (int i = 0; i < ELEMS; i++) {
        rp->etype[i] = 0;
        rp->elen[i] = 0;
        rp->e[i][0] = '\0';
    }
}

/* Element <i> is a string equal to <want>. */
static int elem_is(const struct reply *rp, int i, const char *want)
{
    return i < rp->n && i < ELEMS &&
           (rp->etype[i] == REDIS_REPLY_STRING || rp->etype[i] == REDIS_REPLY_STATUS) &&
           rp->elen[i] == strlen(want) && strcasecmp(rp->e[i], want) == 0;
}

/* ---- the ask link ------------------------------------------------------------ */

static void round_failed(struct sl_sentinel *s)
{
    char q[96], w[WHY_MAX + 8];
    s->round_active = 0;
    s->stats.rounds_failed++;
    if (s->known) {
        /* A re-ask no sentinel could answer: the last address stays, and no
         * retry is armed here: the store asks again while the master fails,
         * and +switch-master still reports a failover. */
        char addr[64];
        sl_resolve_fmt(&s->master, addr, sizeof(addr));
        sl_log_warn_rl("sentinel_round_failed", "sentinel: no sentinel answered, keeping the master",
                       "master=%s addr=%s last_error=%s", qs(s->name, q, sizeof(q)), addr,
                       qs(s->last_why, w, sizeof(w)));
        return;
    }
    if (s->failing != 1) {
        /* Once per state change; each retry after it is a debug line. */
        sl_log_warn("sentinel: no master known", "master=%s sentinels=%d last_error=%s",
                    qs(s->name, q, sizeof(q)), s->n, qs(s->last_why, w, sizeof(w)));
        s->failing = 1;
    } else {
        sl_log_debug("sentinel: no master known", "master=%s sentinels=%d last_error=%s",
                     qs(s->name, q, sizeof(q)), s->n, qs(s->last_why, w, sizeof(w)));
    }
    s->round_waiting = 1;
    uv_timer_start(&s->ask.timer, on_link_timer, next_backoff(s, &s->ask_backoff_ms), 0);
}

/* Tries the next sentinel of the round, or ends it as failed. */
static void ask_next(struct sl_sentinel *s)
{
    if (s->closing)
        return;
    if (s->round_pos >= s->n) {
        round_failed(s);
        return;
    }
    link_connect(&s->ask, s->order[s->round_pos++]);
}

static void start_round(struct sl_sentinel *s)
{
    if (s->closing || s->round_active)
        return;
    if (s->ask.state != L_IDLE) {
        s->ask_wanted = 1; /* the last round's link is still closing */
        return;
    }
    s->round_active = 1;
    s->round_waiting = 0;
    s->ask_wanted = 0;
    s->round_pos = 0;
    s->stats.rounds++;
    uv_timer_stop(&s->ask.timer);
    ask_next(s);
}

/* Moves sentinel <target> to the front of order[]: asked first next time. */
static void prefer(struct sl_sentinel *s, int target)
{
    int at = 0;
    while (at < s->n && s->order[at] != target)
        at++;
    if (at == 0 || at == s->n)
        return;
    memmove(&s->order[1], &s->order[0], (size_t)at * sizeof(s->order[0]));
    s->order[0] = target;
}

static void link_drop(struct link *l, const char *why);

static void on_ask_reply(struct link *l)
{
    struct sl_sentinel *s = l->s;
    const struct reply *rp = &l->rp;
    char why[WHY_MAX];
    if (l->expect_auth) {
        l->expect_auth = 0;
        if (rp->type == REDIS_REPLY_ERROR) {
            snprintf(why, sizeof(why), "AUTH: %.120s", rp->e[0]);
            link_fail(l, why);
        }
        return;
    }
    if (rp->type == REDIS_REPLY_NIL) {
        s->stats.unknown++;
        link_fail(l, "the sentinel does not know this master");
        return;
    }
    if (rp->type == REDIS_REPLY_ERROR) {
        link_fail(l, rp->e[0]);
        return;
    }
    struct sockaddr_storage ss;
    if (rp->type != REDIS_REPLY_ARRAY || rp->bad || rp->n != 2 ||
        rp->etype[0] != REDIS_REPLY_STRING || rp->etype[1] != REDIS_REPLY_STRING ||
        sl_sentinel_parse_addr(rp->e[0], rp->elen[0], rp->e[1], rp->elen[1], &ss) < 0) {
        link_fail(l, "the answer is not an address");
        return;
    }
    if (sl_sentinel_stale(&ss, &s->switched_from, s->switched_ms, uv_now(s->loop))) {
        s->stats.stale++;
        link_fail(l, "stale: names the master a +switch-master left");
        return;
    }
    s->stats.answers++;
    prefer(s, l->target);
    s->round_active = 0;
    s->ask_backoff_ms = BACKOFF_MIN_MS;
    if (s->failing == 1) {
        char q[96];
        sl_log_info("sentinel: master known again", "master=%s sentinel=%s",
                    qs(s->name, q, sizeof(q)), s->text[l->target]);
    }
    s->failing = 0;
    link_drop(l, NULL); /* a short connection: done */
    report(s, &ss, "ask");
}

/* ---- the subscription ------------------------------------------------------ */

static void sub_ping_later(struct link *l)
{
    uv_timer_start(&l->timer, on_link_timer, l->s->ping_ms, 0);
}

static void on_sub_reply(struct link *l)
{
    struct sl_sentinel *s = l->s;
    const struct reply *rp = &l->rp;
    char why[WHY_MAX], q[96];
    if (l->expect_auth) {
        l->expect_auth = 0;
        if (rp->type == REDIS_REPLY_ERROR) {
            snprintf(why, sizeof(why), "AUTH: %.120s", rp->e[0]);
            link_fail(l, why);
        }
        return;
    }
    if (rp->type == REDIS_REPLY_ERROR) {
        link_fail(l, rp->e[0]);
        return;
    }
    if (rp->type == REDIS_REPLY_ARRAY && !rp->bad && elem_is(rp, 0, "subscribe")) {
        l->subscribed = 1;
        s->sub_fails = 0;
        s->sub_backoff_ms = BACKOFF_MIN_MS;
        s->stats.subscribes++;
        sl_log_debug("sentinel: subscribed to +switch-master", "sentinel=%s", s->text[l->target]);
        sub_ping_later(l);
        /* A switch may have happened while nobody listened: ask again. */
        if (s->sub_once)
            start_round(s);
        s->sub_once = 1;
        return;
    }
    if (rp->type == REDIS_REPLY_ARRAY && !rp->bad && elem_is(rp, 0, "pong")) {
        l->ping_out = 0;
        sub_ping_later(l);
        return;
    }
    if (rp->type == REDIS_REPLY_ARRAY && !rp->bad && rp->n == 3 && elem_is(rp, 0, "message") &&
        elem_is(rp, 1, "+switch-master")) {
        struct sockaddr_storage ss, old;
        int r = rp->elen[2] < TEXT_MAX
                    ? sl_sentinel_parse_switch(rp->e[2], rp->elen[2], s->name, &ss, &old)
                    : -1;
        if (r < 0) {
            sl_log_warn_rl("sentinel_bad_switch", "sentinel: malformed +switch-master message",
                           "sentinel=%s message=%s", s->text[l->target],
                           qs(rp->e[2], why, sizeof(why)));
        } else if (r == 1) {
            s->stats.switch_messages++;
            s->switched_from = old;
            s->switched_ms = uv_now(s->loop);
            sl_log_info("sentinel: +switch-master", "master=%s sentinel=%s message=%s",
                        qs(s->name, q, sizeof(q)), s->text[l->target],
                        qs(rp->e[2], why, sizeof(why)));
            report(s, &ss, "switch-master");
        }
        return;
    }
    /* Anything else on a subscribed connection (a message of another kind)
     * says nothing about our master. */
}

/* ---- one link: connect, read, drop ------------------------------------------ */

static void handle_gone(struct sl_sentinel *s);

static void link_closed(struct link *l)
{
    struct sl_sentinel *s = l->s;
    if (!l->sub) {
        if (s->round_active)
            ask_next(s); /* the drop was a failure: on to the next sentinel */
        else if (s->ask_wanted)
            start_round(s);
        return;
    }
    /* The subscription moves on to the next sentinel: at once, unless every
     * sentinel failed in a row (then the backoff). */
    uint64_t wait = 0;
    if (++s->sub_fails >= s->n)
        wait = next_backoff(s, &s->sub_backoff_ms);
    uv_timer_start(&l->timer, on_link_timer, wait, 0);
}

static void on_link_close(uv_handle_t *h)
{
    struct link *l = h->data;
    struct sl_sentinel *s = l->s;
    l->state = L_IDLE;
    if (s->closing) {
        handle_gone(s);
        return;
    }
    s->handles--;
    link_closed(l);
}

/* Drops the link's TLS engine and what waited for it (an AUTH, wiped). */
static void link_forget(struct link *l)
{
    sl_tlsio_stop(&l->io);
    if (l->out.p != NULL)
        explicit_bzero(l->out.p, l->out.cap);
    l->out.len = 0;
}

/* Ends <l>'s connection (<why> is for the caller's logs, NULL on success). */
static void link_drop(struct link *l, const char *why)
{
    (void)why;
    if (l->state == L_IDLE || l->state == L_DROPPING)
        return;
    l->gen++;
    l->state = L_DROPPING;
    l->subscribed = 0;
    l->ping_out = 0;
    l->expect_auth = 0;
    uv_timer_stop(&l->timer);
    uv_read_stop((uv_stream_t *)&l->tcp);
    uv_close((uv_handle_t *)&l->tcp, on_link_close);
    if (l->reader != NULL) {
        redisReaderFree(l->reader);
        l->reader = NULL;
    }
    link_forget(l);
}

/* A sentinel did not do what was asked: log (rate-limited: every sentinel
 * down is a storm), count, drop; the close callback goes on. */
static void link_fail(struct link *l, const char *why)
{
    struct sl_sentinel *s = l->s;
    char q[WHY_MAX + 8];
    if (l->state == L_IDLE || l->state == L_DROPPING)
        return;
    if (!l->sub) {
        s->stats.failures++;
        snprintf(s->last_why, sizeof(s->last_why), "%.60s: %.90s", s->text[l->target], why);
        sl_log_warn_rl("sentinel_ask_failed", "sentinel: no usable answer, asking the next",
                       "sentinel=%s reason=%s", s->text[l->target], qs(why, q, sizeof(q)));
    } else {
        sl_log_warn_rl("sentinel_sub_lost", "sentinel: subscription failed, moving to the next",
                       "sentinel=%s reason=%s", s->text[l->target], qs(why, q, sizeof(q)));
    }
    link_drop(l, why);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    (void)hint;
    struct link *l = h->data;
    *buf = uv_buf_init(l->rbuf, sizeof(l->rbuf));
}

/* Plaintext from the sentinel (as read, or out of the TLS engine): fed to
 * the reader, each reply handled. Returns nonzero when the link dropped or
 * the client closed meanwhile (the reader, and the engine, are gone). */
static int link_plain(void *arg, const char *p, size_t len)
{
    struct link *l = arg;
    struct sl_sentinel *s = l->s;
    /* hiredis holds an unfinished reply whole (a bulk string until its last
     * byte): cap what it may hold before it copies more in. */
    if (l->reader->len - l->reader->pos + len > MAX_UNPARSED) {
        link_fail(l, "reply too large");
        return 1;
    }
    if (redisReaderFeed(l->reader, p, len) != REDIS_OK) {
        link_fail(l, "out of memory");
        return 1;
    }
    uint64_t gen = l->gen;
    for (;;) {
        void *obj = NULL;
        if (redisReaderGetReply(l->reader, &obj) != REDIS_OK) {
            char why[WHY_MAX];
            snprintf(why, sizeof(why), "bad reply: %s", l->reader->errstr);
            link_fail(l, why);
            return 1;
        }
        if (obj == NULL)
            break;
        if (l->sub)
            on_sub_reply(l);
        else
            on_ask_reply(l);
        if (s->closing || l->gen != gen)
            return 1; /* dropped or closed: the reader is gone */
        reply_reset(&l->rp);
    }
    return 0;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct link *l = st->data;
    struct sl_sentinel *s = l->s;
    char why[320];
    if (nread == 0)
        return;
    if (nread < 0) {
        link_fail(l, nread == UV_EOF ? "connection closed by the sentinel" : uv_strerror((int)nread));
        return;
    }
    if (l->state != L_ACTIVE || l->reader == NULL)
        return;
    if (l->io.tls == NULL) {
        (void)link_plain(l, buf->base, (size_t)nread);
        return;
    }
    int rc = sl_tlsio_read(&l->io, buf->base, (size_t)nread, &l->out, link_plain, l, why,
                           sizeof(why));
    if (rc == 1)
        return;
    if (l->io.opened) {
        l->io.opened = 0;
        sl_log_debug("sentinel TLS up", "sentinel=%s version=%s peer=\"%s\"", s->text[l->target],
                     sl_tls_version(l->io.tls), sl_tls_peer_name(l->io.tls));
    }
    if (rc == SL_ECLOSED)
        link_fail(l, "connection closed by the sentinel (TLS close_notify)");
    else if (rc < 0)
        link_fail(l, why);
}

static void on_connect(uv_connect_t *c, int status)
{
    struct link *l = c->data;
    struct sl_sentinel *s = l->s;
    if (status == UV_ECANCELED || l->state != L_CONNECTING)
        return; /* dropped or closed while connecting */
    if (status < 0) {
        link_fail(l, uv_strerror(status));
        return;
    }
    uv_tcp_nodelay(&l->tcp, 1);
    uv_tcp_keepalive(&l->tcp, 1, 30);
    l->reader = redisReaderCreateWithFunctions(&reply_fn);
    if (l->reader == NULL) {
        link_fail(l, "out of memory");
        return;
    }
    l->reader->privdata = l;
    reply_reset(&l->rp);
    l->state = L_ACTIVE;
    if (s->tls) {
        /* The handshake first: the commands below wait in <out> for it. */
        if (s->tls_ctx == NULL) {
            link_fail(l, "TLS: no usable context (see the reload's error)");
            return;
        }
        if (sl_tlsio_start(&l->io, (uv_stream_t *)&l->tcp, s->tls_ctx, s->host[l->target],
                           on_tls_written) != SL_OK) {
            link_fail(l, "out of memory");
            return;
        }
    }
    int rc = uv_read_start((uv_stream_t *)&l->tcp, on_alloc, on_read);
    if (rc == 0) {
        if (l->sub) {
            const char *argv[2] = { "SUBSCRIBE", "+switch-master" };
            rc = link_send(l, 1, 2, argv);
        } else {
            const char *argv[3] = { "SENTINEL", "get-master-addr-by-name", s->name };
            rc = link_send(l, 1, 3, argv);
        }
    }
    if (rc > 0)
        return; /* failed and dropped already */
    if (rc < 0) {
        link_fail(l, uv_strerror(rc));
        return;
    }
    /* One deadline for the TLS handshake, AUTH and the question (or the
     * subscription). */
    uv_timer_start(&l->timer, on_link_timer, s->timeout_ms, 0);
}

/* A sentinel's name that did not resolve at load answered at last (or
 * failed again): its address is used from the next attempt on. */
static void on_resolved(struct sl_resolve *r, enum sl_resolve_event ev, int err)
{
    struct sl_sentinel *s = r->data;
    int i = (int)(r - s->res);
    char addr[64];
    if (s->closing)
        return;
    if (ev == SL_RESOLVE_CHANGED || ev == SL_RESOLVE_RECOVERED) {
        s->addr[i] = r->ss;
        sl_log_info("sentinel: name resolved", "sentinel=%s addr=%s", s->text[i],
                    sl_resolve_fmt(&r->ss, addr, sizeof(addr)));
        if (!s->known && s->round_waiting) {
            uv_timer_stop(&s->ask.timer); /* no need to wait out the backoff */
            s->round_waiting = 0;
            start_round(s);
        }
    } else if (ev == SL_RESOLVE_FAILING) {
        sl_log_warn("sentinel: name not resolved: retrying", "sentinel=%s err=\"%s\"",
                    s->text[i], uv_strerror(err));
    }
}

static void link_connect(struct link *l, int target)
{
    struct sl_sentinel *s = l->s;
    l->target = target;
    int rc = uv_tcp_init(s->loop, &l->tcp);
    if (rc < 0) {
        /* No handle to close: fail the attempt by hand. */
        char q[WHY_MAX];
        sl_log_warn_rl("sentinel_socket", "sentinel: cannot make a socket", "error=%s",
                       qs(uv_strerror(rc), q, sizeof(q)));
        if (!l->sub)
            snprintf(s->last_why, sizeof(s->last_why), "%s", uv_strerror(rc));
        link_closed(l);
        return;
    }
    s->handles++;
    l->tcp.data = l;
    l->creq.data = l;
    l->state = L_CONNECTING;
    int family = s->addr[target].ss_family;
    if (family != AF_INET && family != AF_INET6) {
        /* Its name did not resolve at load: looked up again (off the
         * loop) for the next attempt; this one fails as a refused one. */
        (void)sl_resolve_start(&s->res[target], s->loop);
        link_fail(l, "the sentinel's name does not resolve (yet)");
        return;
    }
    rc = uv_tcp_connect(&l->creq, &l->tcp, (const struct sockaddr *)&s->addr[target], on_connect);
    if (rc < 0) {
        link_fail(l, uv_strerror(rc));
        return;
    }
    uv_timer_start(&l->timer, on_link_timer, s->connect_ms, 0);
}

static void on_link_timer(uv_timer_t *t)
{
    struct link *l = t->data;
    struct sl_sentinel *s = l->s;
    if (s->closing)
        return;
    switch (l->state) {
    case L_IDLE:
        if (!l->sub) {
            s->round_waiting = 0; /* the retry of a failed round */
            start_round(s);
        } else {
            int target = s->sub_next;
            s->sub_next = (s->sub_next + 1) % s->n;
            link_connect(l, target);
        }
        break;
    case L_CONNECTING:
        link_fail(l, "connect timeout");
        break;
    case L_ACTIVE:
        if (!l->sub || !l->subscribed) {
            link_fail(l, "timeout");
        } else if (l->ping_out) {
            link_fail(l, "PING not answered");
        } else {
            const char *argv[1] = { "PING" };
            int rc = link_send(l, 0, 1, argv);
            if (rc != 0) {
                if (rc < 0)
                    link_fail(l, uv_strerror(rc));
                break;
            }
            l->ping_out = 1;
            uv_timer_start(&l->timer, on_link_timer, s->timeout_ms, 0);
        }
        break;
    case L_DROPPING:
        break;
    }
}

/* ---- API ------------------------------------------------------------------------ */

static void sentinel_free(struct sl_sentinel *s)
{
    struct link *links[2] = { &s->ask, &s->sub };
    for (int i = 0; i < 2; i++) {
        link_forget(links[i]);
        sl_tlsio_free(&links[i]->io);
        free(links[i]->out.p);
    }
    sl_tls_ctx_unref(s->tls_ctx);
    if (s->password != NULL)
        explicit_bzero(s->password, strlen(s->password)); /* not left in freed memory */
    free(s->password);
    free(s->user);
    free(s->name);
    free(s);
}

static void handle_gone(struct sl_sentinel *s)
{
    if (--s->handles == 0 && s->closing)
        sentinel_free(s);
}

static void on_timer_close(uv_handle_t *h)
{
    struct link *l = h->data;
    handle_gone(l->s);
}

static uint64_t us_to_ms(uint64_t us, uint64_t dflt)
{
    uint64_t ms = (us + 999) / 1000;
    return us == 0 ? dflt : ms;
}

/* The name a sentinel's certificate must carry: its host as written when
 * that is a name ("s1.example:26379" -> "s1.example"), else its address
 * (numeric: checked against the certificate's IP SANs, no SNI sent). */
static void host_name(const struct sl_addr *a, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (a->named) {
        snprintf(buf, cap, "%s", a->text);
        char *colon = strrchr(buf, ':');
        if (colon != NULL)
            *colon = '\0';
    } else if (a->ss.ss_family == AF_INET6) {
        uv_ip6_name((const struct sockaddr_in6 *)&a->ss, buf, cap);
    } else {
        uv_ip4_name((const struct sockaddr_in *)&a->ss, buf, cap);
    }
}

struct sl_sentinel *sl_sentinel_new(uv_loop_t *loop, const struct sl_sentinel_conf *conf,
                                    sl_sentinel_cb *cb, void *data)
{
    if (conf == NULL || cb == NULL || conf->n_sentinels < 1 || conf->n_sentinels > SL_SENTINEL_MAX ||
        conf->sentinels == NULL || conf->master_name == NULL || conf->master_name[0] == '\0')
        return NULL;
    struct sl_sentinel *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->loop = loop;
    s->cb = cb;
    s->data = data;
    s->n = conf->n_sentinels;
    for (int i = 0; i < s->n; i++) {
        s->addr[i] = conf->sentinels[i].ss;
        snprintf(s->text[i], sizeof(s->text[i]), "%s", conf->sentinels[i].text);
        if (s->text[i][0] == '\0')
            sl_resolve_fmt(&s->addr[i], s->text[i], sizeof(s->text[i]));
        host_name(&conf->sentinels[i], s->host[i], sizeof(s->host[i]));
        s->order[i] = i;
        s->res[i].cb = on_resolved;
        s->res[i].data = s;
        if (conf->sentinels[i].named)
            sl_resolve_set(&s->res[i], s->host[i], conf->sentinels[i].port, &s->addr[i],
                           uv_now(loop));
    }
    s->tls = conf->tls != 0;
    sl_sentinel_set_tls(s, conf->tls_ctx);
    if ((s->name = strdup(conf->master_name)) == NULL ||
        (conf->user != NULL && (s->user = strdup(conf->user)) == NULL) ||
        (conf->password != NULL && (s->password = strdup(conf->password)) == NULL))
        goto fail;
    s->connect_ms = us_to_ms(conf->connect_timeout_us, 200);
    s->timeout_ms = us_to_ms(conf->timeout_us, 200);
    s->ping_ms = us_to_ms(conf->ping_us, PING_MS_DEFAULT);
    s->failing = -1;
    s->ask_backoff_ms = s->sub_backoff_ms = BACKOFF_MIN_MS;
    s->rng = uv_hrtime() ^ (uint64_t)(uintptr_t)s;
    snprintf(s->last_why, sizeof(s->last_why), "none");

    struct link *links[2] = { &s->ask, &s->sub };
    for (int i = 0; i < 2; i++) {
        links[i]->s = s;
        links[i]->sub = (uint8_t)i;
        links[i]->state = L_IDLE;
        links[i]->io.req.data = links[i];
        uv_timer_init(loop, &links[i]->timer);
        links[i]->timer.data = links[i];
        s->handles++;
    }
    start_round(s);
    /* The subscription starts on the first sentinel of the list. */
    uv_timer_start(&s->sub.timer, on_link_timer, 0, 0);
    return s;

fail:
    sentinel_free(s);
    return NULL;
}

void sl_sentinel_set_tls(struct sl_sentinel *s, struct sl_tls_ctx *ctx)
{
    if (s == NULL || ctx == NULL || ctx == s->tls_ctx)
        return;
    sl_tls_ctx_ref(ctx);
    sl_tls_ctx_unref(s->tls_ctx);
    s->tls_ctx = ctx;
}

void sl_sentinel_reask(struct sl_sentinel *s)
{
    if (s == NULL || s->closing || s->round_active || s->round_waiting)
        return;
    start_round(s);
}

int sl_sentinel_master(const struct sl_sentinel *s, struct sockaddr_storage *out)
{
    if (s == NULL || !s->known)
        return -1;
    *out = s->master;
    return 0;
}

void sl_sentinel_close(struct sl_sentinel *s)
{
    if (s == NULL || s->closing)
        return;
    s->closing = 1;
    for (int i = 0; i < s->n; i++)
        sl_resolve_stop(&s->res[i]);
    struct link *links[2] = { &s->ask, &s->sub };
    for (int i = 0; i < 2; i++) {
        struct link *l = links[i];
        if (l->state == L_CONNECTING || l->state == L_ACTIVE) {
            l->state = L_DROPPING;
            uv_read_stop((uv_stream_t *)&l->tcp);
            uv_close((uv_handle_t *)&l->tcp, on_link_close);
        }
        if (l->reader != NULL) {
            redisReaderFree(l->reader);
            l->reader = NULL;
        }
        uv_close((uv_handle_t *)&l->timer, on_timer_close);
    }
}

const struct sl_sentinel_stats *sl_sentinel_stats(const struct sl_sentinel *s)
{
    return &s->stats;
}

int sl_sentinel_preferred(const struct sl_sentinel *s)
{
    return s->order[0];
}

int sl_sentinel_subscribed(const struct sl_sentinel *s)
{
    return s->sub.subscribed ? s->sub.target : -1;
}

/* sluice — the RESP connection model (see resp_conn.h). */
#include <string.h>
#include <strings.h>

#include "proto/resp_conn.h"

void sl_rconn_init(struct sl_resp_conn *c)
{
    memset(c, 0, sizeof(*c));
}

/* ---- requests, when framed ---------------------------------------------- */

static int name_is(const struct sl_resp_req *r, unsigned i, const char *lit, uint32_t n)
{
    return r->ncap > i && r->arglen[i] == n && strncasecmp(r->argv[i], lit, n) == 0;
}
#define NAME_IS(r, i, lit) name_is((r), (i), (lit), (uint32_t)(sizeof(lit) - 1))

uint8_t sl_rconn_classify(const struct sl_resp_req *r, uint32_t *nchan)
{
    *nchan = r->argc > 0 ? r->argc - 1 : 0;
    if (r->argc == 0)
        return SL_FX_EMPTY;
    if (NAME_IS(r, 0, "CLIENT") && NAME_IS(r, 1, "REPLY") && r->argc == 3) {
        if (NAME_IS(r, 2, "OFF"))
            return SL_FX_REPLY_OFF;
        if (NAME_IS(r, 2, "SKIP"))
            return SL_FX_REPLY_SKIP;
        if (NAME_IS(r, 2, "ON"))
            return SL_FX_REPLY_ON;
    }
    if (NAME_IS(r, 0, "HELLO") && r->argc >= 2)
        return NAME_IS(r, 1, "3") ? SL_FX_HELLO3 : NAME_IS(r, 1, "2") ? SL_FX_HELLO2 : SL_FX_PLAIN;
#define FX(name, fx) { name, sizeof(name) - 1, fx }
    static const struct { const char *name; uint32_t len; uint8_t fx; } one[] = {
        FX("MONITOR", SL_FX_MONITOR),     FX("SUBSCRIBE", SL_FX_SUB),
        FX("PSUBSCRIBE", SL_FX_PSUB),     FX("SSUBSCRIBE", SL_FX_SSUB),
        FX("UNSUBSCRIBE", SL_FX_UNSUB),   FX("PUNSUBSCRIBE", SL_FX_PUNSUB),
        FX("SUNSUBSCRIBE", SL_FX_SUNSUB),
    };
#undef FX
    for (size_t i = 0; i < sizeof(one) / sizeof(one[0]); i++)
        if (name_is(r, 0, one[i].name, one[i].len))
            return one[i].fx;
    if (NAME_IS(r, 0, "RESET") && r->argc == 1)
        return SL_FX_RESET;
    return SL_FX_PLAIN;
}

int sl_rconn_kind(const struct sl_resp_req *r)
{
    if (NAME_IS(r, 0, "MULTI"))   return SL_PK_MULTI;
    if (NAME_IS(r, 0, "EXEC"))    return SL_PK_EXEC;
    if (NAME_IS(r, 0, "DISCARD")) return SL_PK_DISCARD;
    if (NAME_IS(r, 0, "RESET"))   return SL_PK_RESET;
    if (NAME_IS(r, 0, "AUTH") || NAME_IS(r, 0, "HELLO")) return SL_PK_AUTH;
    if (NAME_IS(r, 0, "QUIT"))    return SL_PK_QUIT;
    /* the client expects no answer to OFF and SKIP and would take a
     * refusal for the next command's; a refused ON would leave it waiting */
    if (NAME_IS(r, 0, "CLIENT") && NAME_IS(r, 1, "REPLY")) return SL_PK_STATE;
    return SL_PK_PLAIN;
}

int sl_rconn_plain(const struct sl_resp_req *r)
{
    /* Every name sl_rconn_kind() or sl_rconn_classify() tells apart is 4 to
     * 12 bytes long, none 8 (tests/unit/proto/test_resp_conn.c holds this
     * to every Redis command name): GET, SET, HGETALL ... need no compare. */
    static const uint32_t told = 0x1ef0; /* bits 4-7 and 9-12 */
    uint32_t nchan;
    if (r->argc == 0)
        return 0;
    if (r->arglen[0] > 12 || !(told & (UINT32_C(1) << r->arglen[0])))
        return 1;
    return sl_rconn_kind(r) == SL_PK_PLAIN && sl_rconn_classify(r, &nchan) == SL_FX_PLAIN;
}

struct cmd_name {
    const char *name;
    uint32_t    len;
};

static int name_in(const struct sl_resp_req *r, unsigned i, const struct cmd_name *list, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (name_is(r, i, list[k].name, list[k].len))
            return 1;
    return 0;
}

/* What client libraries send when they connect, before the application's
 * first command (docs/resp.md lists which library sends what): choosing
 * the database and the protocol, naming the connection, learning the
 * server (INFO, ROLE, COMMAND and its listings, the cluster's layout),
 * checking it answers (PING). Each reads or sets only the connection's own
 * state or what the server says of itself. AUTH and HELLO are not here:
 * they are never limited at all. Nor is ECHO: no library sends it on
 * connect, and applications do use it as a cheap command. */
int sl_rconn_is_setup(const struct sl_resp_req *r)
{
#define CN(name) { name, sizeof(name) - 1 }
#define IN(list, i) name_in(r, (i), (list), sizeof(list) / sizeof(list[0]))
    static const struct cmd_name alone[] = {
        CN("SELECT"), CN("READONLY"), CN("READWRITE"), CN("PING"), CN("INFO"), CN("ROLE"),
    };
    static const struct cmd_name client[] = {
        CN("SETNAME"), CN("SETINFO"), CN("GETNAME"), CN("ID"), CN("INFO"), CN("TRACKING"),
    };
    static const struct cmd_name command[] = { CN("DOCS"), CN("INFO"), CN("COUNT"), CN("LIST") };
    static const struct cmd_name cluster[] = {
        CN("SLOTS"), CN("SHARDS"), CN("NODES"), CN("MYID"), CN("INFO"),
    };
    int yes = 0;
    if (r->argc == 0)
        yes = 0;
    else if (IN(alone, 0))
        yes = 1;
    else if (NAME_IS(r, 0, "COMMAND"))
        yes = r->argc == 1 || IN(command, 1);
    else if (r->argc >= 2 && NAME_IS(r, 0, "CLIENT"))
        yes = IN(client, 1);
    else if (r->argc >= 2 && NAME_IS(r, 0, "CLUSTER"))
        yes = IN(cluster, 1);
    return yes;
#undef IN
#undef CN
}

/* ---- subscriptions ------------------------------------------------------- */

/* multi_subs: a subscribe, an unsubscribe of all of kind k queued in MULTI */
#define MULTI_SUB(k)    (1u << (k))
#define MULTI_UNSUB(k)  (8u << (k))
#define MULTI_UNSUB_ALL (MULTI_UNSUB(0) | MULTI_UNSUB(1) | MULTI_UNSUB(2))

/* Effects that change the connection's mode (reply mode, protocol,
 * MONITOR): under RESP2 Redis refuses them while subscribed. */
static int mode_fx(uint8_t fx)
{
    return fx == SL_FX_REPLY_OFF || fx == SL_FX_REPLY_SKIP || fx == SL_FX_REPLY_ON ||
           fx == SL_FX_MONITOR || fx == SL_FX_HELLO2 || fx == SL_FX_HELLO3;
}

/* No subscription left and none to be confirmed: pub/sub is over. */
static int pubsub_over(const struct sl_resp_conn *c)
{
    return c->subs[0] + c->subs[1] + c->subs[2] == 0 && c->sub_owed == 0 && !c->monitor &&
           !c->sub_by_exec;
}

/* Whether an (un)subscribe or RESET sent is still to be answered. */
static int sub_pending(const struct sl_resp_conn *c)
{
    return c->sub_owed > 0 || c->resets_sent != c->resets_seen || c->marks > 0;
}

/* Whether Redis will have the connection subscribed when it runs the
 * request being committed. Exact when no confirmation is outstanding (the
 * counts they carried are all in); with some outstanding, certain if the
 * last change sent of some kind was a subscribe, or if each kind's last
 * was an unsubscribe of all. Else (sub_unsure()) taken as not: on a
 * listener with limits the requests that depend on it wait (sub_wait()). */
static int subscribed(const struct sl_resp_conn *c)
{
    if (!sub_pending(c))
        return c->passthru && (c->subs[0] + c->subs[1] + c->subs[2] > 0 || c->sub_by_exec);
    /* some kind surely has one; else taken as not */
    return c->pred_sub[0] == SL_PRED_YES || c->pred_sub[1] == SL_PRED_YES ||
           c->pred_sub[2] == SL_PRED_YES;
}

int sl_rconn_sub_unsure(const struct sl_resp_conn *c)
{
    int yes = 0, unknown = 0;
    for (int k = 0; k < 3; k++) {
        yes |= c->pred_sub[k] == SL_PRED_YES;
        unknown |= c->pred_sub[k] == SL_PRED_UNKNOWN;
    }
    return unknown && !yes && sub_pending(c);
}

int sl_rconn_sub_wait(const struct sl_resp_conn *c, uint8_t fx, int kind)
{
    return (kind == SL_PK_MULTI || mode_fx(fx)) && !c->in_multi && !c->resp3 &&
           sl_rconn_sub_unsure(c);
}

/* ---- requests, when decided ---------------------------------------------- */

uint32_t sl_rconn_commit(struct sl_resp_conn *c, uint8_t fx, uint32_t nchan, int *unsub)
{
    *unsub = -1;
    /* Inside MULTI a command is queued: one +QUEUED, its effects at EXEC.
     * CLIENT REPLY and MONITOR then change nothing (Redis refuses MONITOR
     * there); HELLO and SUBSCRIBE are taken to apply (below). */
    int changes_mode = mode_fx(fx);
    if (c->in_multi && changes_mode && fx != SL_FX_HELLO2 && fx != SL_FX_HELLO3)
        fx = SL_FX_PLAIN;
    /* Subscribed under RESP2, Redis answers anything but (un)subscribe,
     * PING, QUIT and RESET with an error, and the command does nothing. */
    else if (changes_mode && !c->in_multi && !c->resp3 && subscribed(c))
        fx = SL_FX_PLAIN;
    switch (fx) {
    case SL_FX_EMPTY:
        return 0;
    case SL_FX_REPLY_OFF:
        c->reply_mode = SL_REPLY_OFF;
        return 0;
    case SL_FX_REPLY_SKIP:
        /* SKIP while OFF changes nothing in Redis either. */
        if (c->reply_mode != SL_REPLY_OFF)
            c->reply_mode = SL_REPLY_SKIP;
        return 0;
    case SL_FX_REPLY_ON:
        c->reply_mode = SL_REPLY_ON;
        return 1;
    case SL_FX_RESET: {
        /* Redis puts the connection back as it was at the start (reply
         * mode, protocol, pub/sub, MONITOR) and answers +RESET, even under
         * CLIENT REPLY OFF; a SKIP still skips it. Pub/sub and MONITOR end
         * when the +RESET comes back (at_reset()): what arrives before it
         * is still theirs. */
        uint32_t n = c->reply_mode == SL_REPLY_SKIP ? 0 : 1;
        c->reply_mode = SL_REPLY_ON;
        c->resp3 = 0;
        memset(c->pred_sub, SL_PRED_NO, sizeof(c->pred_sub));
        c->resets_sent += n; /* a skipped +RESET never comes */
        return n;
    }
    default:
        break;
    }
    /* OFF and SKIP silence the reply, not what the command does. */
    int quiet = c->reply_mode != SL_REPLY_ON;
    if (c->reply_mode == SL_REPLY_SKIP)
        c->reply_mode = SL_REPLY_ON;
    if (fx == SL_FX_HELLO2 || fx == SL_FX_HELLO3)
        c->resp3 = fx == SL_FX_HELLO3;
    if (c->in_multi) {
        /* applied when the EXEC goes out (multi_exec()) */
        if (fx >= SL_FX_SUB && fx <= SL_FX_SSUB)
            c->multi_subs |= (uint8_t)MULTI_SUB(fx - SL_FX_SUB);
        else if (fx >= SL_FX_UNSUB && fx <= SL_FX_SUNSUB && nchan == 0) /* undoes one before */
            c->multi_subs = (uint8_t)((c->multi_subs & ~MULTI_SUB(fx - SL_FX_UNSUB)) |
                                      MULTI_UNSUB(fx - SL_FX_UNSUB));
        return quiet ? 0 : 1;
    }
    if (fx == SL_FX_MONITOR) {
        /* Its +OK (none when already monitoring); commands after it are
         * answered as before, between feed lines that answer nothing. */
        int again = c->mon_sent && c->mon_at == c->resets_sent; /* no RESET since */
        c->mon_sent = 1;
        c->mon_at = c->resets_sent;
        c->monitor = 1;
        c->passthru = 1;
        return quiet || again ? 0 : 1;
    }
    /* (Un)subscribe confirmations come under OFF and SKIP too (Redis sends
     * them as it sends messages); a SKIP is used up all the same. */
    if (fx >= SL_FX_SUB && fx <= SL_FX_SSUB) {
        /* One confirmation per channel named (under RESP3 a push, which
         * answers it all the same); messages come whenever they like. */
        c->passthru = 1;
        c->sub_owed += nchan;
        c->pred_sub[fx - SL_FX_SUB] = SL_PRED_YES;
        return nchan;
    }
    if (fx >= SL_FX_UNSUB && fx <= SL_FX_SUNSUB) {
        /* Confirmations, subscribed or not (then one per channel named, or
         * one with a nil channel); told apart as long as any is owed. */
        c->pred_sub[fx - SL_FX_UNSUB] = nchan > 0 ? SL_PRED_UNKNOWN : SL_PRED_NO;
        if (nchan > 0) {
            c->sub_owed += nchan;
            return nchan;
        }
        /* Of everything: one confirmation per channel (pattern, shard
         * channel) the connection has when Redis runs it, or one when it
         * has none, which is known only once every confirmation before it
         * has come: a marker in the reply queue counts them then. */
        *unsub = fx - SL_FX_UNSUB;
        c->marks++;
        return 0;
    }
    return quiet ? 0 : 1;
}

/* An EXEC goes out: the (un)subscribes queued in its transaction take
 * effect. Their confirmations come inside the EXEC's reply, where sluice
 * does not read the counts: a subscribe leaves the connection subscribed
 * until a later confirmation's count or RESET says otherwise; an
 * unsubscribe of all of a kind ends that kind. (An EXEC that WATCH makes
 * fail runs none of them; sluice takes it as run.) */
static void multi_exec(struct sl_resp_conn *c)
{
    for (int k = 0; k < 3; k++) {
        if (c->multi_subs & MULTI_UNSUB(k)) {
            c->pred_sub[k] = SL_PRED_NO;
            c->subs[k] = 0;
            c->sub_by_exec &= (uint8_t)~(1u << k);
        }
        if (c->multi_subs & MULTI_SUB(k)) {
            c->pred_sub[k] = SL_PRED_YES;
            c->sub_by_exec |= (uint8_t)(1u << k);
            c->sub_exec_at = c->resets_sent;
            c->passthru = 1;
        }
    }
    if ((c->multi_subs & MULTI_UNSUB_ALL) && pubsub_over(c))
        c->passthru = 0;
    c->multi_subs = 0;
}

void sl_rconn_allowed(struct sl_resp_conn *c, int kind, uint32_t replies)
{
    if (kind == SL_PK_MULTI) {
        /* subscribed under RESP2, Redis refuses MULTI */
        c->in_multi = c->resp3 || !subscribed(c);
        c->multi_dirty = 0;
        c->multi_subs = 0;
        c->multi_queued = 0;
    } else if (kind == SL_PK_EXEC || kind == SL_PK_DISCARD || kind == SL_PK_RESET) {
        if (kind == SL_PK_EXEC && c->in_multi)
            multi_exec(c);
        c->multi_subs = 0;
        c->in_multi = 0;
    }
    if (c->in_multi && kind != SL_PK_MULTI && replies > 0)
        c->multi_queued++;
}

uint32_t sl_rconn_refused(struct sl_resp_conn *c, int *ping)
{
    *ping = 0;
    if (c->reply_mode == SL_REPLY_OFF)
        return 0;
    if (c->reply_mode == SL_REPLY_SKIP) {
        c->reply_mode = SL_REPLY_ON;
        *ping = 1;
        return 0;
    }
    return 1;
}

void sl_rconn_rejected(struct sl_resp_conn *c)
{
    if (c->in_multi)
        c->multi_dirty = 1;
}

void sl_rconn_exec_aborted(struct sl_resp_conn *c)
{
    c->in_multi = 0;
    c->multi_dirty = 0;
    c->multi_subs = 0;
}

/* ---- the unsubscribe-all markers ----------------------------------------- */

uint32_t sl_rconn_unsub_due(struct sl_resp_conn *c, uint32_t kind)
{
    uint32_t k = c->subs[kind] > 0 ? c->subs[kind] : 1;
    c->sub_owed += k; /* told apart even if pub/sub ended meanwhile */
    return k;
}

void sl_rconn_settled(struct sl_resp_conn *c, uint32_t n)
{
    c->sub_owed = c->sub_owed > n ? c->sub_owed - n : 0;
}

void sl_rconn_mark_gone(struct sl_resp_conn *c)
{
    if (c->marks > 0)
        c->marks--;
}

/* ---- replies ---------------------------------------------------------------- */

enum { PS_OTHER = 0, PS_MESSAGE, PS_SUBSCRIBED, PS_UNSUBSCRIBED };

/* In pub/sub mode, what the frame that just ended is, from its first bytes
 * in c->head: "*N\r\n" (or ">N\r\n") "$L\r\n" then its kind, 22 bytes
 * at most. */
static int pubsub_kind(const struct sl_resp_conn *c, int *which)
{
    static const char *const msgs[] = { "message", "pmessage", "smessage" };
    static const char *const subs[] = { "subscribe", "psubscribe", "ssubscribe" };
    static const char *const unsubs[] = { "unsubscribe", "punsubscribe", "sunsubscribe" };
    const char *h = c->head, *end = c->head + c->head_len;
    if (h == end || (*h != '*' && *h != '>'))
        return PS_OTHER;
    const char *nl = memchr(h, '\n', (size_t)(end - h));
    if (nl == NULL || nl + 1 >= end || nl[1] != '$')
        return PS_OTHER;
    const char *nl2 = memchr(nl + 1, '\n', (size_t)(end - nl - 1));
    if (nl2 == NULL)
        return PS_OTHER;
    const char *name = nl2 + 1;
    size_t room = (size_t)(end - name);
    const char *const *lists[3] = { msgs, subs, unsubs };
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < 3; i++) {
            size_t n = strlen(lists[k][i]);
            if (room > n && strncasecmp(name, lists[k][i], n) == 0 && name[n] == '\r') {
                *which = i;
                return PS_MESSAGE + k;
            }
        }
    }
    return PS_OTHER;
}

/* The frame that just ended (first bytes in c->head) is RESET's answer:
 * pub/sub and MONITOR are over. */
static int at_reset(struct sl_resp_conn *c)
{
    if (c->head_len < 8 || memcmp(c->head, "+RESET\r\n", 8) != 0)
        return 0;
    /* What was sent after that RESET (and already counted) still holds:
     * a MONITOR, (un)subscribes whose confirmations are owed. */
    if (c->resets_seen != c->resets_sent)
        c->resets_seen++;
    c->monitor = c->mon_sent && c->mon_at >= c->resets_seen; /* a MONITOR sent after it */
    if (c->sub_exec_at < c->resets_seen)
        c->sub_by_exec = 0; /* else an EXEC sent after it subscribed */
    c->passthru = c->monitor || c->sub_owed > 0 || c->sub_by_exec;
    memset(c->subs, 0, sizeof(c->subs));
    return 1;
}

/* Under MONITOR, the frame that just ended is a feed line, which answers
 * nothing: "+<seconds>.<micros> [" (commands are still answered). */
static int feed_line(const struct sl_resp_conn *c)
{
    const char *h = c->head, *end = c->head + c->head_len;
    if (h == end || *h++ != '+')
        return 0;
    const char *d = h;
    while (h < end && *h >= '0' && *h <= '9')
        h++;
    if (h == d || h == end || *h++ != '.')
        return 0;
    d = h;
    while (h < end && *h >= '0' && *h <= '9')
        h++;
    return h > d && end - h >= 2 && h[0] == ' ' && h[1] == '[';
}

/* Keeps the last bytes of the frame in progress (pub/sub): a confirmation
 * ends with the connection's subscription count. */
static void keep_tail(struct sl_resp_conn *c, const char *p, uint32_t n)
{
    const uint32_t cap = (uint32_t)sizeof(c->tail);
    if (n >= cap) {
        memcpy(c->tail, p + n - cap, cap);
        c->tail_len = (uint8_t)cap;
        return;
    }
    if (c->tail_len + n > cap) {
        uint32_t drop = c->tail_len + n - cap;
        memmove(c->tail, c->tail + drop, c->tail_len - drop);
        c->tail_len = (uint8_t)(c->tail_len - drop);
    }
    memcpy(c->tail + c->tail_len, p, n);
    c->tail_len = (uint8_t)(c->tail_len + n);
}

/* The count a confirmation ends with (":N\r\n"), or -1. */
static long frame_count(const struct sl_resp_conn *c)
{
    int i = (int)c->tail_len - 3;
    long v = 0, mul = 1;
    if (i < 1 || c->tail[c->tail_len - 2] != '\r')
        return -1;
    for (; i >= 0 && c->tail[i] >= '0' && c->tail[i] <= '9' && mul <= 1000000000L; i--) {
        v += (c->tail[i] - '0') * mul;
        mul *= 10;
    }
    return i >= 0 && c->tail[i] == ':' && mul > 1 ? v : -1;
}

/* A pub/sub frame ended: whether it answers a request. A message never
 * does; a confirmation does when one is owed (every one is: by channels
 * named, or by an unsubscribe-all's count) and tells how many channels,
 * patterns and shard channels the connection has (Redis counts the first
 * two together); when none is left, pub/sub is over. */
static int pubsub_pays(struct sl_resp_conn *c, int push, int *confirm)
{
    if (at_reset(c))
        return 1;
    int which = 0;
    int kind = pubsub_kind(c, &which);
    *confirm = kind == PS_SUBSCRIBED || kind == PS_UNSUBSCRIBED;
    if (*confirm) {
        long n = frame_count(c);
        if (n >= 0) {
            /* a count covers what an EXEC subscribed to as well */
            /* channels and patterns are counted together */
            uint32_t v = (uint32_t)n;
            if (which == 2) {
                c->subs[2] = v;
                c->sub_by_exec &= (uint8_t)~4u;
            } else if (c->sub_by_exec & 3u) {
                c->subs[which] = v; /* how they split is not known */
                c->subs[!which] = 0;
                c->sub_by_exec &= (uint8_t)~3u;
            } else {
                c->subs[which] = v > c->subs[!which] ? v - c->subs[!which] : 0;
            }
        }
        int pays = c->sub_owed > 0;
        if (pays)
            c->sub_owed--;
        /* none left, and no (un)subscribe sent since is still to be confirmed */
        if (kind == PS_UNSUBSCRIBED && pubsub_over(c))
            c->passthru = 0;
        return pays;
    }
    return !push && kind == PS_OTHER;
}

int sl_rconn_plain_one(const struct sl_resp_conn *c)
{
    return c->reply_mode == SL_REPLY_ON && !c->in_multi;
}

int sl_rconn_replies_plain(struct sl_resp_conn *c)
{
    /* what sl_rconn_reply_bytes() classifies by, and the feed's lines */
    if (c->passthru || c->monitor || c->sub_owed > 0 || c->resets_sent != c->resets_seen)
        return 0;
    c->classifying = 0;
    c->head_len = 0;
    c->tail_len = 0;
    return 1;
}

void sl_rconn_reply_begin(struct sl_resp_conn *c)
{
    c->head_len = 0;
    c->tail_len = 0;
}

void sl_rconn_reply_bytes(struct sl_resp_conn *c, const char *p, size_t n)
{
    /* Pub/sub: keep the frame's first bytes to tell messages from answers
     * (they may arrive split over reads). Confirmations owed are told
     * apart even once pub/sub is over. A RESET's answer is told apart too,
     * even when it comes while nothing else is classified: its count must
     * catch up (else sub_pending() stays true and a request held by
     * sub_wait() is never let go). MONITOR keeps passthru set. */
    c->classifying = c->passthru || c->sub_owed > 0 || c->resets_sent != c->resets_seen;
    if (!c->classifying)
        return;
    if (c->head_len < sizeof(c->head)) {
        size_t take = sizeof(c->head) - c->head_len;
        if (take > n)
            take = n;
        memcpy(c->head + c->head_len, p, take);
        c->head_len = (uint8_t)(c->head_len + take);
    }
    keep_tail(c, p, (uint32_t)n);
}

int sl_rconn_reply_end(struct sl_resp_conn *c, int push, int *confirm)
{
    *confirm = 0;
    if (c->monitor && feed_line(c))
        return 1;
    if (c->classifying)
        return !pubsub_pays(c, push, confirm);
    return push;
}

int sl_rconn_passthru(const struct sl_resp_conn *c)
{
    return c->passthru;
}

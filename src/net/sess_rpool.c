/* sluice — RESP sessions on a pooled listener (`upstream_pool = N`): which
 * requests may share an upstream connection, which wait for a connection of
 * the client's own and when it goes back, which pool key the client is on,
 * what sluice answers itself (docs/resp.md, "Pooled listeners").
 *
 * sess_resp.c frames, decides and forwards as on a 1:1 listener and calls
 * in here at four points: a request is framed (sl_rpool_classify: a record
 * of its class joins the ring's order when it is not plainly stateless), the
 * ring's head is allowed (sl_rpool_wait: pin first; sl_rpool_local: sluice
 * answers), a request was forwarded (sl_rpool_sent: the pin tracker), and a
 * reply was paid (sl_rpool_answered: pins end, the key moves on OK). The
 * link to the engine is net/sess_pool.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/log.h"
#include "core/resolve.h"
#include "net/listener.h"
#include "net/session.h"
#include "net/session-i.h"
#include "net/sess_resp-i.h"
#include "proto/resp_cmd.h"
#include "proto/resp_conn.h"
#include "proto/resp_reply.h"

/* What sluice learnt of a request of a pooled session when it framed it
 * (its words are gone once it is decided), kept in ring order while it
 * waits (pool_pre) and, once written upstream, until its answer says what
 * it did to the pin and the pool key (pool_ans). */
struct prec {
    struct sl_rcmd_info info;
    uint64_t seq;      /* pool_ans: the reply number that answers it */
    uint32_t added;    /* pin bits it started (sl_rcmd_pin_sent) */
    uint8_t  stream;   /* the head of a request streamed in parts: pins */
    uint8_t  passok;   /* KEY naming a user: its password is in <arg> */
    char    *arg;      /* the password (KEY), the name (SETNAME), the value (SETINFO) */
    uint32_t arglen;
    char    *hname;    /* HELLO ... SETNAME: the name, kept once HELLO succeeds */
    char    *mname;    /* EXEC, DISCARD: the name a SETNAME queued in their */
    uint8_t  mnamed;   /* ... transaction gives if it runs (<mnamed>: one was queued) */
    uint8_t  unanswered; /* a request Redis ran with no reply: its name (<hname>, when
                            set) and protocol (<uresp>, 0: none) apply in its turn */
    uint8_t  uresp;
    uint8_t  mresp;    /* EXEC, DISCARD: the protocol a HELLO queued in their transaction
                          switches to if it runs (0: none) */
};

static void prec_free(struct prec *p)
{
    if (p != NULL) {
        free(p->arg);
        free(p->hname);
        free(p->mname);
        free(p);
    }
}

static int pq_push(struct pq *q, struct prec *p)
{
    if (q->n == q->cap) {
        uint32_t cap = q->cap ? q->cap * 2 : 8;
        struct prec **ne = malloc(cap * sizeof(*ne));
        if (ne == NULL)
            return -1;
        for (uint32_t i = 0; i < q->n; i++)
            ne[i] = q->e[(q->head + i) % q->cap];
        free(q->e);
        q->e = ne;
        q->head = 0;
        q->cap = cap;
    }
    q->e[(q->head + q->n) % q->cap] = p;
    q->n++;
    return 0;
}

static struct prec *pq_head(const struct pq *q)
{
    return q->n > 0 ? q->e[q->head] : NULL;
}

static struct prec *pq_pop(struct pq *q)
{
    if (q->n == 0)
        return NULL;
    struct prec *p = q->e[q->head];
    q->head = (q->head + 1) % q->cap;
    q->n--;
    return p;
}

static void pq_free(struct pq *q)
{
    struct prec *p;
    while ((p = pq_pop(q)) != NULL)
        prec_free(p);
    free(q->e);
    memset(q, 0, sizeof(*q));
}

static char *dup_arg(const char *p, size_t n)
{
    char *d = malloc(n + 1);
    if (d != NULL) {
        memcpy(d, p, n);
        d[n] = '\0';
    }
    return d;
}

/* The kept name becomes <name> (taken; NULL: none). A connection pinned
 * to the client from now on is given it first (CLIENT SETNAME, its reply
 * dropped), so that what runs there (a GETNAME queued in MULTI) sees it. */
static void set_name(struct sl_session *s, char *name)
{
    struct sl_resp_sess *r = rs(s);
    free(r->name);
    r->name = name;
    if (s->link == NULL)
        return;
    char cmd[SL_RESP_CAPTURE_LEN + 64];
    int n = 0;
    if (name != NULL)
        n = snprintf(cmd, sizeof(cmd), "*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$%zu\r\n%s\r\n",
                     strlen(name), name);
    if (n < 0 || (size_t)n >= sizeof(cmd) ||
        sl_sess_link_prelude(s, cmd, (size_t)n, 1) < 0)
        (void)sl_sess_link_prelude(s, NULL, 0, 0); /* too long, or no memory: none */
}

/* The pool key's name for the engine (the key, then its password: users
 * may have several) and the commands that bring a fresh connection to it. */
static int key_setup(const struct sl_pool_key *k, const char *pass, size_t plen, char **id,
                     size_t *idlen, char **setup, size_t *setuplen, uint32_t *nsetup)
{
    size_t cap = 256 + 2 * plen + k->user_len;
    char *i = malloc(sizeof(*k) + plen), *u = malloc(cap);
    if (i == NULL || u == NULL) {
        free(i);
        free(u);
        return -1;
    }
    memcpy(i, k, sizeof(*k));
    if (plen > 0)
        memcpy(i + sizeof(*k), pass, plen);
    size_t n = 0;
    uint32_t c = 0;
    if (pass != NULL) {
        /* the user's bytes by their length, never as a C string: a NUL in
         * a name must not cut the bulk string short of what its length
         * says (the rest would be read as commands) */
        n += (size_t)snprintf(u + n, cap - n, "*3\r\n$4\r\nAUTH\r\n$%u\r\n",
                              (unsigned)k->user_len);
        memcpy(u + n, k->user, k->user_len);
        n += k->user_len;
        n += (size_t)snprintf(u + n, cap - n, "\r\n$%zu\r\n", plen);
        memcpy(u + n, pass, plen);
        n += plen;
        memcpy(u + n, "\r\n", 2);
        n += 2;
        c++;
    }
    if (k->resp == 3) {
        n += (size_t)snprintf(u + n, cap - n, "*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n");
        c++;
    }
    if (k->db != 0) {
        char db[16];
        int dl = snprintf(db, sizeof(db), "%d", (int)k->db);
        n += (size_t)snprintf(u + n, cap - n, "*2\r\n$6\r\nSELECT\r\n$%d\r\n%s\r\n", dl, db);
        c++;
    }
    *id = i;
    *idlen = sizeof(*k) + plen;
    *setup = u;
    *setuplen = n;
    *nsetup = c;
    return 0;
}

/* The session's link goes to the key it is on now. */
static int pool_rekey(struct sl_session *s, int open)
{
    struct sl_resp_sess *r = rs(s);
    char *id, *setup;
    size_t idlen, setuplen;
    uint32_t nsetup;
    if (key_setup(&r->key, r->pass, r->pass_len, &id, &idlen, &setup, &setuplen, &nsetup) < 0)
        return SL_ENOMEM;
    int rc = open ? sl_sess_link_open(s, id, idlen, setup, setuplen, nsetup)
                  : sl_sess_link_rekey(s, id, idlen, setup, setuplen, nsetup);
    free(id);
    free(setup);
    return rc;
}

int sl_rpool_link_open(struct sl_session *s)
{
    sl_pool_key_default(&rs(s)->key);
    sl_rcmd_pin_init(&rs(s)->pin);
    return pool_rekey(s, 1);
}

/* Classifies request <q> of a pooled session; returns 1 when it needs its
 * turn in the ring (a record is queued for it), 0 when it goes as any
 * stateless request does (*<slow> set when it is a script: see
 * sl_sess_link_slow), -1 when out of memory. */
int sl_rpool_classify(struct sl_session *s, const struct sl_resp_req *q, int stream,
                      uint8_t *slow)
{
    struct sl_rcmd_info info;
    sl_rcmd_class(q, &info);
    if (!stream && info.cls == SL_RCMD_POOL && info.pin == 0 && info.ends == 0) {
        if (slow != NULL)
            *slow = info.slow;
        return 0;
    }
    if (!stream && info.cls == SL_RCMD_LOCAL && info.local == SL_RLOCAL_EMPTY)
        return 0; /* no reply, no change: harmless anywhere */
    struct prec *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return -1;
    p->info = info;
    p->stream = (uint8_t)stream;
    uint8_t a = 0;
    if (info.cls == SL_RCMD_KEY && info.pass_arg > 0) {
        a = info.pass_arg;
        p->passok = a < q->ncap && q->arglen[a] <= SL_RESP_CAPTURE_LEN;
    } else if (info.cls == SL_RCMD_LOCAL) {
        a = info.name_arg; /* SETNAME's name, SETINFO's value */
        if (info.opt == SL_RLOPT_LIST_ID)
            p->info.opt = sl_rcmd_list_id(q, s->id) ? SL_RLOPT_NONE : SL_RLOPT_LIST_EMPTY;
    }
    if (info.cls == SL_RCMD_KEY && info.name_arg > 0 && info.name_arg < q->ncap &&
        q->arglen[info.name_arg] <= SL_RESP_CAPTURE_LEN &&
        (p->hname = dup_arg(q->argv[info.name_arg], q->arglen[info.name_arg])) == NULL) {
        free(p);
        return -1;
    }
    if (a > 0 && a < q->ncap) {
        p->arglen = q->arglen[a] < SL_RESP_CAPTURE_LEN ? q->arglen[a] : SL_RESP_CAPTURE_LEN;
        if ((p->arg = dup_arg(q->argv[a], p->arglen)) == NULL) {
            free(p);
            return -1;
        }
    }
    if (pq_push(&rs(s)->pool_pre, p) < 0) {
        prec_free(p);
        return -1;
    }
    return 1;
}

/* The ring's head <p> (with record <c>) is allowed: may it go now? 0 yes,
 * 1 it waits for a connection of its own (the session is resumed when it
 * has one), -1 refused (no connection could be had: counted). */
int sl_rpool_wait(struct sl_session *s, const struct prec *c)
{
    struct sl_resp_sess *r = rs(s);
    if (sl_rpool_is_local(s, c)) {
        /* answered as Redis would once the requests before it ran: a
         * HELLO, RESET, SELECT ... ahead of it changes the answer (its
         * protocol), a blocking one delays it; the session is resumed
         * when their answers are in */
        r->pool_hold = r->pool_ans.n > 0;
        return r->pool_hold;
    }
    int pin = c->stream || c->info.cls == SL_RCMD_PIN || c->info.cls == SL_RCMD_KEY ||
              c->info.cls == SL_RCMD_LOCAL;
    if (!pin || sl_sess_link_pinned(s))
        return 0;
    uint64_t now = sl_sess_waits_now();
    if (r->pool_hold && r->pin_until != 0 && now >= r->pin_until) {
        sl_sess_link_unwait(s);
        r->pool_hold = 0;
        r->pin_until = 0;
        s->l->stats.pool_pin_refused++;
        return -1;
    }
    int rc = sl_sess_link_pin(s, s->l->conf->pool_pin_wait_us > 0);
    if (rc == 1) {
        r->pool_hold = 0;
        r->pin_until = 0;
        return 0;
    }
    if (rc < 0) {
        r->pool_hold = 0;
        s->l->stats.pool_pin_refused++;
        return -1;
    }
    r->pool_hold = 1;
    if (sl_sess_link_waiting(s) && r->pin_until == 0) {
        r->pin_until = now + s->l->conf->pool_pin_wait_us;
        sl_sess_park(s, r->pin_until);
    }
    return 1;
}

/* The protocol sluice's own answers speak: the pool key's, unless a HELLO
 * the key could not follow ran since (queued in MULTI, which EXEC ran; one
 * sent under CLIENT REPLY OFF / SKIP): then the one it switched to. */
static int local_resp3(const struct sl_resp_sess *r)
{
    return r->resp_local != 0 ? r->resp_local == 3 : r->key.resp == 3;
}

/* The local reply to a pooled session's request <c>, in <out>. */
static size_t local_text(struct sl_session *s, const struct prec *c, char *out, size_t cap)
{
    struct sl_resp_sess *r = rs(s);
    int n = 0;
    switch (c->info.local) {
    case SL_RLOCAL_SETNAME:
        if (c->arg != NULL && !sl_rcmd_name_ok(c->arg, c->arglen) && c->arglen > 0) {
            n = snprintf(out, cap, "-ERR Client names cannot contain spaces, newlines or special "
                                   "characters.\r\n");
            break;
        }
        set_name(s, c->arglen > 0 ? dup_arg(c->arg, c->arglen) : NULL);
        n = snprintf(out, cap, "+OK\r\n");
        break;
    case SL_RLOCAL_GETNAME:
        if (r->name == NULL)
            n = snprintf(out, cap, local_resp3(r) ? "_\r\n" : "$-1\r\n");
        else
            n = snprintf(out, cap, "$%zu\r\n%s\r\n", strlen(r->name), r->name);
        break;
    case SL_RLOCAL_SETINFO:
        if ((c->info.opt != SL_RLOPT_LIB_NAME && c->info.opt != SL_RLOPT_LIB_VER) ||
            c->arg == NULL) {
            n = snprintf(out, cap, "-ERR Unrecognized option\r\n");
            break;
        }
        int lib = c->info.opt == SL_RLOPT_LIB_VER;
        free(r->lib[lib]);
        r->lib[lib] = c->arglen > 0 ? dup_arg(c->arg, c->arglen) : NULL;
        n = snprintf(out, cap, "+OK\r\n");
        break;
    case SL_RLOCAL_ID:
        n = snprintf(out, cap, ":%llu\r\n", (unsigned long long)s->id);
        break;
    case SL_RLOCAL_INFO:
    case SL_RLOCAL_LIST: {
        if (c->info.local == SL_RLOCAL_LIST && c->info.opt != SL_RLOPT_NONE) {
            n = snprintf(out, cap, c->info.opt == SL_RLOPT_LIST_ERR     ? "-ERR syntax error\r\n"
                                   : c->info.opt == SL_RLOPT_LIST_BADID ? "-ERR Invalid client ID\r\n"
                                   : local_resp3(r)                     ? "=4\r\ntxt:\r\n"
                                                                        : "$0\r\n\r\n");
            break;
        }
        char line[1024], peer[64] = "?", self[64] = "?";
        struct sockaddr_storage ss;
        int sl = sizeof(ss);
        if (uv_tcp_getpeername(&s->client, (struct sockaddr *)&ss, &sl) == 0)
            sl_resolve_fmt(&ss, peer, sizeof(peer));
        sl = sizeof(ss);
        if (uv_tcp_getsockname(&s->client, (struct sockaddr *)&ss, &sl) == 0)
            sl_resolve_fmt(&ss, self, sizeof(self));
        int k = snprintf(line, sizeof(line),
                         "id=%llu addr=%s laddr=%s fd=0 name=%s age=0 idle=0 flags=N db=%d sub=0 "
                         "psub=0 ssub=0 multi=-1 watch=0 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 "
                         "rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd=client|%s user=%s "
                         "redir=-1 resp=%d lib-name=%s lib-ver=%s\n",
                         (unsigned long long)s->id, peer, self, r->name ? r->name : "",
                         (int)r->key.db, c->info.local == SL_RLOCAL_INFO ? "info" : "list",
                         r->key.user, local_resp3(r) ? 3 : 2, r->lib[0] ? r->lib[0] : "",
                         r->lib[1] ? r->lib[1] : "");
        /* under RESP3 Redis answers a verbatim string ("txt") */
        if (k > 0 && (size_t)k < sizeof(line))
            n = local_resp3(r) ? snprintf(out, cap, "=%d\r\ntxt:%s\r\n", k + 4, line)
                               : snprintf(out, cap, "$%d\r\n%s\r\n", k, line);
        break;
    }
    case SL_RLOCAL_KILL:
        n = snprintf(out, cap,
                     c->info.opt == SL_RLOPT_KILL_OLD ? "-ERR No such client\r\n" : ":0\r\n");
        break;
    case SL_RLOCAL_UNBLOCK:
        n = snprintf(out, cap, ":0\r\n");
        break;
    case SL_RLOCAL_QUIT:
        n = snprintf(out, cap, "+OK\r\n");
        break;
    default:
        break;
    }
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* Request <c> is answered by sluice (inside a transaction it is queued
 * upstream instead, as Redis would run it at EXEC). */
int sl_rpool_is_local(const struct sl_session *s, const struct prec *c)
{
    const struct sl_resp_sess *r = rs(s);
    /* Subscribed under RESP2, Redis refuses CLIENT ... with its own
     * error: the client is pinned then, its connection answers (QUIT is
     * allowed, and answered here). */
    if (c->info.local != SL_RLOCAL_QUIT && sl_rconn_passthru(&r->rc) && !r->rc.monitor &&
        !r->rc.resp3 && sl_sess_link_pinned(s))
        return 0;
    /* Pinned, a SETNAME names the connection too (the kept name follows
     * its +OK): a GETNAME queued in MULTI there answers it. */
    if (c->info.local == SL_RLOCAL_SETNAME && sl_sess_link_pinned(s))
        return 0;
    return c->info.cls == SL_RCMD_LOCAL && !c->stream && !r->rc.in_multi;
}

/* Request <c> of a pooled session is answered by sluice in its place. */
void sl_rpool_local(struct sl_session *s, const struct prec *c)
{
    char line[1200];
    size_t n = local_text(s, c, line, sizeof(line));
    uint32_t replies = sl_rsess_refused(s);
    if (s->state >= SL_SESS_CLOSED)
        return;
    uint8_t close = c->info.local == SL_RLOCAL_QUIT ? SL_SEG_CLOSE : 0;
    if (replies == 0 || n == 0) {
        if (close) {
            static char none[] = "";
            sl_sess_local(s, none, 0, SL_SEG_CLOSE);
        }
        return;
    }
    char *text = malloc(n);
    if (text == NULL) {
        sl_session_close(s);
        return;
    }
    memcpy(text, line, n);
    sl_sess_local(s, text, (uint32_t)n, SL_SEG_OWNED | close);
}

/* What an unanswered request did (sl_rpool_sent): the name in <c->hname>
 * ("" for none; NULL: unchanged) and the protocol <resp> (0: unchanged). */
static void unanswered_apply(struct sl_session *s, struct prec *c, uint8_t resp)
{
    struct sl_resp_sess *r = rs(s);
    if (c->hname != NULL) {
        set_name(s, c->hname[0] != '\0' ? c->hname : NULL);
        if (r->name != NULL)
            c->hname = NULL;
    }
    if (resp != 0)
        r->resp_local = resp;
}

/* Request <c> named the client (<c->hname>, "" for none, NULL: it did
 * not) or switched its protocol to <resp> (0: it did not), and Redis sends
 * no reply to it (CLIENT REPLY OFF, or the one SKIP covers): that holds
 * once every reply owed before it is in (a RESET or HELLO pipelined before
 * it acts when its answer comes, not after). Takes <c>. */
static void unanswered(struct sl_session *s, struct prec *c, uint8_t resp)
{
    struct sl_resp_sess *r = rs(s);
    if (r->owed_total == r->paid_total) {
        unanswered_apply(s, c, resp);
        prec_free(c);
        return;
    }
    /* The one before it waits for the same reply (nothing that owes one
     * was sent between): one entry says what both did, the later winning.
     * Otherwise a client could pile up an entry per request, each owing
     * nothing (so max_replies_owed never stops it), behind a reply that
     * does not come (BLPOP k 0, CLIENT REPLY OFF, then SETNAME after
     * SETNAME): memory without bound. */
    struct prec *t = r->pool_ans.n > 0
                         ? r->pool_ans.e[(r->pool_ans.head + r->pool_ans.n - 1) % r->pool_ans.cap]
                         : NULL;
    if (t != NULL && t->unanswered && t->seq == r->owed_total) {
        if (c->hname != NULL) {
            free(t->hname);
            t->hname = c->hname;
            c->hname = NULL;
        }
        if (resp != 0)
            t->uresp = resp;
        prec_free(c);
        return;
    }
    c->unanswered = 1;
    c->uresp = resp;
    c->seq = r->owed_total;
    if (pq_push(&r->pool_ans, c) < 0) {
        prec_free(c);
        sl_session_close(s);
    }
}

/* Request <c> went upstream (the replies owed were <before>, now
 * owed_total; <in_multi>: a MULTI was written before it and no EXEC or
 * DISCARD since): the pins it starts, and its answer awaited when it ends
 * one or moves the key (the pin tracker settles what it ends: nothing for
 * an EXEC or DISCARD outside a transaction). Takes <c>. */
void sl_rpool_sent(struct sl_session *s, struct prec *c, uint64_t before, int in_multi)
{
    struct sl_resp_sess *r = rs(s);
    c->added = sl_rcmd_pin_sent(&r->pin, &c->info, in_multi);
    if (c->stream && c->info.cls == SL_RCMD_KEY)
        sl_rcmd_pin_hold(&r->pin, c->added, SL_PIN_ODD); /* a key change too big to read */
    if (c->info.cls == SL_RCMD_KEY && (r->rc.in_multi || r->owed_total == before)) {
        /* its answer is in EXEC's reply, or there is none: the key is not
         * known any more, the connection stays the client's until RESET */
        sl_rcmd_pin_hold(&r->pin, c->added, SL_PIN_ODD);
        if (!r->rc.in_multi && (c->info.set & SL_RKEY_RESET)) {
            /* a RESET with no reply (the request a SKIP covers): Redis
             * forgets the name and goes back to RESP2 all the same */
            free(c->hname);
            if ((c->hname = dup_arg("", 0)) == NULL) {
                prec_free(c);
                sl_session_close(s);
                return;
            }
            unanswered(s, c, 2);
            return;
        }
        if (c->info.pass_arg != 0) {
            prec_free(c); /* its password may be refused unseen: not followed */
            return;
        }
        /* a HELLO: the protocol it asks for is the client's once it runs
         * (EXEC's, or at once), and so is a name it sets */
        uint8_t resp = (c->info.set & SL_RKEY_RESP) ? c->info.resp : 0;
        if (r->rc.in_multi) {
            if (resp != 0)
                r->multi_resp = resp;
            prec_free(c);
            return;
        }
        if (c->hname != NULL && c->hname[0] != '\0' && !sl_rcmd_name_ok(c->hname, strlen(c->hname))) {
            prec_free(c); /* a name Redis refuses: the HELLO fails whole */
            return;
        }
        unanswered(s, c, resp);
        return;
    }
    if (c->info.cls == SL_RCMD_LOCAL && c->info.local == SL_RLOCAL_SETNAME &&
        (r->owed_total != before || !r->rc.in_multi) && !c->stream &&
        (c->arglen == 0 || sl_rcmd_name_ok(c->arg, c->arglen))) {
        /* a name Redis will take: kept when it ran (EXEC's reply inside a
         * transaction, else its own +OK; at once when Redis sends no reply,
         * under CLIENT REPLY OFF or SKIP: it takes every name let through) */
        char *name = c->arglen > 0 ? dup_arg(c->arg, c->arglen) : NULL;
        if (c->arglen > 0 && name == NULL) {
            prec_free(c);
            sl_session_close(s);
            return;
        }
        if (r->owed_total == before) {
            free(c->hname);
            c->hname = name != NULL ? name : dup_arg("", 0);
            if (c->hname == NULL) {
                prec_free(c);
                sl_session_close(s);
                return;
            }
            unanswered(s, c, 0);
            return;
        }
        if (r->rc.in_multi) {
            free(r->multi_name);
            r->multi_name = name;
            r->multi_named = 1;
            prec_free(c);
            return;
        }
        free(c->hname);
        c->hname = name != NULL ? name : dup_arg("", 0);
        c->seq = r->owed_total;
        if (c->hname == NULL || pq_push(&r->pool_ans, c) < 0) {
            prec_free(c);
            sl_session_close(s);
        }
        return;
    }
    if (c->info.ends & SL_PIN_MULTI) {
        /* EXEC or DISCARD ends the transaction a SETNAME may be queued in:
         * its name goes with it (an earlier EXEC still unanswered must not
         * take it) */
        c->mname = r->multi_name;
        c->mnamed = r->multi_named;
        c->mresp = r->multi_resp;
        r->multi_name = NULL;
        r->multi_named = 0;
        r->multi_resp = 0;
    }
    if (r->owed_total == before || (c->info.cls != SL_RCMD_KEY && c->info.pin == 0 &&
                                    c->info.ends == 0)) {
        prec_free(c);
        return;
    }
    c->seq = r->owed_total; /* its last reply */
    if (pq_push(&r->pool_ans, c) < 0) {
        prec_free(c);
        sl_session_close(s);
    }
}

/* Reply number paid_total came: the requests it answers take effect. */
void sl_rpool_answered(struct sl_session *s)
{
    struct sl_resp_sess *r = rs(s);
    struct prec *c;
    while ((c = pq_head(&r->pool_ans)) != NULL && c->seq <= r->paid_total) {
        pq_pop(&r->pool_ans);
        if (c->unanswered) {
            /* its turn: the replies owed before it are in (unanswered()) */
            unanswered_apply(s, c, c->uresp);
            prec_free(c);
            continue;
        }
        int ok = r->reply_first != '-' && r->reply_first != '!' && c->seq == r->paid_total;
        if (ok && c->hname != NULL) {
            /* HELLO ... SETNAME (or CLIENT SETNAME while pinned) named the
             * pinned connection: the kept name too */
            set_name(s, c->hname[0] != '\0' ? c->hname : NULL);
            if (r->name != NULL)
                c->hname = NULL;
        }
        if (c->info.ends & SL_PIN_MULTI) {
            /* EXEC ran the transaction (an array; DISCARD is +OK, an
             * aborted one an error, one a WATCH stopped the nil array
             * "*-1", or "_" in RESP3): a SETNAME queued in it took effect */
            if (ok && r->reply_first == '*' && r->reply_second != '-' && c->mnamed) {
                set_name(s, c->mname);
                c->mname = NULL;
            }
            if (ok && r->reply_first == '*' && r->reply_second != '-' && c->mresp != 0)
                r->resp_local = c->mresp; /* a HELLO queued in it ran */
        }
        sl_rcmd_pin_done(&r->pin, &c->info, c->added, ok);
        if (ok && c->info.cls == SL_RCMD_KEY && (c->info.set & (SL_RKEY_RESP | SL_RKEY_RESET)))
            r->resp_local = 0; /* the key follows the protocol again */
        struct sl_pool_key old = r->key;
        if (sl_pool_key_apply(&r->key, &c->info, ok) ||
            (ok && c->info.cls == SL_RCMD_KEY && (c->info.set & (SL_RKEY_USER | SL_RKEY_RESET)))) {
            if (c->info.set & SL_RKEY_RESET) {
                free(r->pass);
                r->pass = NULL;
                r->pass_len = 0;
                set_name(s, NULL); /* Redis's RESET forgets the name too */
            }
            if ((c->info.set & SL_RKEY_USER) && c->info.pass_arg > 0) {
                if (!c->passok) {
                    /* no password to open its key with */
                    sl_rcmd_pin_hold(&r->pin, c->added, SL_PIN_ODD);
                } else {
                    free(r->pass);
                    r->pass = c->arg;
                    r->pass_len = c->arglen;
                    c->arg = NULL;
                }
            }
            (void)old;
            if (pool_rekey(s, 0) < 0)
                sl_session_close(s);
        }
        prec_free(c);
    }
}

/* The pinned connection goes back once nothing of the client's lives on it
 * (at the end of a turn: never from inside a delivery). */
int sl_rpool_unpin_due(const struct sl_session *s)
{
    const struct sl_resp_sess *r = rs(s);
    return s->link != NULL && sl_sess_link_pinned(s) && !sl_rcmd_pinned(&r->pin) &&
           r->owed_total == r->paid_total && r->head_state == 0 && !r->rc.in_multi &&
           !sl_rconn_passthru(&r->rc) && r->rc.reply_mode == SL_REPLY_ON && r->rc.sub_owed == 0 &&
           r->rc.marks == 0 && r->pool_ans.n == 0 && !r->pool_hold && sl_reply_idle(&r->scan);
}

void sl_rpool_settle(struct sl_session *s)
{
    if (sl_rpool_unpin_due(s))
        sl_sess_link_unpin(s, sl_rcmd_pin_clean(&rs(s)->pin));
}

/* The upstream connection a pooled session's replies were owed on failed:
 * each reply owed is answered by an error in its place, unless the client
 * already has part of one (then it is closed: its stream cannot be made
 * whole), or its own pinned connection failed (closed, as on 1:1). */
void sl_rpool_link_lost(struct sl_session *s, int pinned, int err, const char *why)
{
    (void)err;
    struct sl_resp_sess *r = rs(s);
    sl_log_debug_rl("pool_lost", "pooled upstream connection lost", "listener=%s why=\"%s\"",
                    s->l->name, why);
    if (pinned || !sl_reply_idle(&r->scan)) {
        sl_sess_finish(s);
        return;
    }
    static const char msg[] = "-ERR sluice: upstream connection lost\r\n";
    uint64_t owed = r->owed_total - r->paid_total;
    while (owed > 0 && s->state < SL_SESS_FLUSHING) {
        struct sl_buf *b = sl_buf_get();
        if (b == NULL) {
            sl_session_close(s);
            return;
        }
        b->start = b->end = 0;
        while (owed > 0 && SL_BUF_SIZE - b->end >= sizeof(msg) - 1) {
            memcpy(b->data + b->end, msg, sizeof(msg) - 1);
            b->end += sizeof(msg) - 1;
            owed--;
        }
        /* adaptive concurrency takes them for overload, not latency */
        r->reply_lost = 1;
        (void)sl_sess_link_got(s, b, 0, b->end, 0);
        sl_buf_unref(b);
        if (s->state >= SL_SESS_CLOSED)
            return;
        r->reply_lost = 0;
    }
    if (s->state < SL_SESS_FLUSHING)
        sl_sess_resume_later(s); /* a request held for a pin may go now */
}



struct prec *sl_rpool_peek(struct sl_session *s)
{
    return pq_head(&rs(s)->pool_pre);
}

struct prec *sl_rpool_next(struct sl_session *s)
{
    return pq_pop(&rs(s)->pool_pre);
}

void sl_rpool_done(struct prec *c)
{
    prec_free(c);
}

void sl_rpool_free(struct sl_session *s)
{
    struct sl_resp_sess *r = rs(s);
    pq_free(&r->pool_pre);
    pq_free(&r->pool_ans);
    free(r->pass);
    free(r->name);
    free(r->multi_name);
    free(r->lib[0]);
    free(r->lib[1]);
}

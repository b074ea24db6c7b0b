/* sluice — inside RESP sessions: the state sess_resp.c (framing, verdicts,
 * replies) and sess_rpool.c (pooled listeners) share. */
#ifndef SL_NET_SESS_RESP_I_H
#define SL_NET_SESS_RESP_I_H

#include <stdint.h>

#include "net/session-t.h"
#include "proto/resp-t.h"
#include "proto/resp_cmd-t.h"
#include "proto/resp_conn-t.h"
#include "proto/resp_reply-t.h"

struct sl_resp;
struct sl_ident_state;

struct prec;
/* A queue of records of a pooled session's requests (see struct prec). */
struct pq {
    struct prec **e;
    uint32_t      head, n, cap;
};

/* What only RESP keeps of a session: it lives right after the session
 * (state_size), zeroed at the start; the core never reads it. */
struct sl_resp_sess {
    struct sl_resp_conn rc;         /* what Redis makes of the connection */
    struct sl_resp     *framer;     /* request framer, while requests come */
    uint64_t            req_fwd;    /* bytes of the request in progress already sent on */
    uint8_t             head_state; /* request in progress decided at its head: 1 sent, 2 dropped */
    uint32_t            head_replies; /* ... replies it will owe once complete (1 sent) */
    uint8_t             quit;       /* a QUIT was framed: nothing after it is */
    uint8_t             silent;     /* the last request sent on has no reply (CLIENT REPLY
                                       OFF, or the one SKIP covers): nothing owed says it ran */
    uint64_t            catch_until;/* a protocol error's close waits for the upstream's
                                       answer (catch_up()) until then, in µs (0: no bound) */
    uint8_t             setup_left; /* set-up commands that may still go uncharged;
                                       0 once the connection's set-up is over */
    uint8_t             sub_hold;   /* the ring's head waits for confirmations that say
                                       if the client is still subscribed */
    struct sl_ident_state *auth_next; /* who it will be if the AUTH / HELLO sent succeeds */
    uint64_t            auth_seq;   /* ... which is reply number <auth_seq> */
    struct sl_reply_pick *auth_pick;/* ... an EXEC's reply, judged by element <auth_elem> */
    uint32_t            auth_elem;  /* ... the AUTH's place among the commands queued */
    uint8_t             auth_in_multi; /* ... the AUTH was queued in MULTI: judged at EXEC */
    uint8_t             auth_exec_framed; /* ... and an EXEC behind it is framed, not sent */
    uint8_t             auth_hold;  /* framing stops until the AUTH is answered (limits
                                       by resp_user: what follows is charged to its user) */
    uint64_t            owed_total; /* upstream replies owed since the start */
    uint64_t            paid_total; /* upstream replies received against them */
    struct sl_reply_scan scan;      /* upstream reply boundaries */
    uint8_t             reply_first;/* first byte of the upstream reply in progress */
    uint8_t             reply_second;/* ... its second, on a pooled listener (0 until seen: "*-1" is EXEC's nil) */
    uint8_t             reply_seen; /* ... how many of those two were seen */
    uint8_t             reply_busy; /* ... it is -BUSY or -LOADING (adaptive concurrency:
                                       overload, not a latency) */
    uint8_t             reply_lost; /* pooled: the replies being fed are sluice's errors for
                                       a shared connection lost (overload, as a timeout) */
    uint8_t             swallow;    /* dropping the upstream reply in progress */
    uint8_t             pick_on;    /* the reply in progress is fed to <auth_pick> */
    /* a pooled listener's (s->link): */
    struct sl_rcmd_pin  pin;        /* why the client holds a connection of its own */
    struct sl_pool_key  key;        /* the pool key its connection state selects */
    char               *pass;       /* ... the password that key's connections log in with */
    uint32_t            pass_len;
    struct pq           pool_pre;   /* records of the requests in the ring that have one */
    struct pq           pool_ans;   /* ... of requests sent whose answers say something */
    uint8_t             pool_hold;  /* the ring's head waits for a pinned connection */
    uint64_t            pin_until;  /* ... queued past the cap until then (waits' clock) */
    char               *name;       /* CLIENT SETNAME, kept here */
    uint8_t             multi_resp; /* the protocol a HELLO queued in the MULTI sent
                                       asks for (0: none) */
    uint8_t             resp_local; /* the protocol of sluice's own answers when a HELLO
                                       the key could not follow ran (0: the key's) */
    char               *multi_name; /* ... set by a SETNAME queued in the MULTI sent */
    uint8_t             multi_named;/* ... such a SETNAME was queued (<multi_name> NULL:
                                       it clears the name) */
    char               *lib[2];     /* CLIENT SETINFO LIB-NAME, LIB-VER */
};

static inline struct sl_resp_sess *rs(const struct sl_session *s)
{
    return s->pstate;
}

/* sess_resp.c: how many replies the client expects for a request sluice
 * answers in its place (a PING takes its place upstream under CLIENT REPLY
 * SKIP); may close the session. */
uint32_t sl_rsess_refused(struct sl_session *s);

/* ---- sess_rpool.c: pooled listeners (upstream_pool = N) ---- */

/* Request <q> is framed: 1 it takes its turn in the ring with a record
 * (mark its entry pooled), 0 it goes as any stateless one, -1 out of
 * memory. <stream>: the head of a request streamed in parts. */
int  sl_rpool_classify(struct sl_session *s, const struct sl_resp_req *q, int stream,
                       uint8_t *slow);
/* The records of the ring's pooled entries, in order. */
struct prec *sl_rpool_peek(struct sl_session *s);
struct prec *sl_rpool_next(struct sl_session *s);
void sl_rpool_done(struct prec *c);
/* The ring's head (record <c>) is allowed: 0 it goes, 1 it waits for a
 * connection of its own (the session is resumed), -1 refused (counted). */
int  sl_rpool_wait(struct sl_session *s, const struct prec *c);
/* Record <c>'s request is answered by sluice (sl_rpool_local queues it). */
int  sl_rpool_is_local(const struct sl_session *s, const struct prec *c);
void sl_rpool_local(struct sl_session *s, const struct prec *c);
/* <c>'s request went upstream (owed_total was <before>); takes <c>. */
void sl_rpool_sent(struct sl_session *s, struct prec *c, uint64_t before, int in_multi);
/* Reply number paid_total came. */
void sl_rpool_answered(struct sl_session *s);
/* The pinned connection can go back (sl_rpool_settle does it; never from
 * inside a delivery). */
int  sl_rpool_unpin_due(const struct sl_session *s);
void sl_rpool_settle(struct sl_session *s);
int  sl_rpool_link_open(struct sl_session *s);
void sl_rpool_link_lost(struct sl_session *s, int pinned, int err, const char *why);
void sl_rpool_free(struct sl_session *s);

#endif

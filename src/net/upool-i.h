/* sluice — inside the pooled upstream connections: the state upool.c
 * (connections, batches, replies, reloads) and upool_pin.c (pinning and
 * the pin wait queue) share. Everyone else goes through net/upool.h. */
#ifndef SL_NET_UPOOL_I_H
#define SL_NET_UPOOL_I_H

#include <stdint.h>

#include "net/gather.h"
#include "net/habit-t.h"
#include "net/upool.h"
#include "net/upool_route.h"
#include "store/tlsio.h"
#include "store/wire.h"

enum { C_CONNECTING = 0, C_HANDSHAKE, C_SETUP, C_READY, C_CLOSING };

struct sl_upool_conn {
    uv_tcp_t              tcp;      /* data = this */
    uv_timer_t            timer;    /* connect + setup deadline */
    uv_connect_t          creq;
    uv_write_t            wreq;
    struct sl_upool      *pool;
    struct sl_upool_key  *key;
    struct sl_upool_conn *next, *prev; /* in key->conns (shared) or pool->pinned */
    struct sl_upool_conn *dnext;    /* in pool->dirty while <dirty> */
    struct sl_upool_conn *snext, *sprev; /* in pool->starting while <starting> */
    struct sl_upool_conn *hnext, *hprev; /* in pool->holds while <holding> */
    uint64_t              hold_until; /* holding: its batch leaves then at the latest (µs) */
    uint32_t              hold_from;/* holding: requests in the batch when the hold began */
    uint64_t              seq;      /* when it was made (the pool's count) */
    struct sl_upool_owner *pin;     /* the owner it is pinned to, or NULL */
    struct sl_upool_route rt;       /* whose each reply is */
    struct sl_obuf        out;      /* bytes waiting to be written */
    struct sl_obuf        wbuf;     /* what the write in flight writes */
    size_t                go;       /* bytes of <out> that may leave before READY */
    uint32_t              unwritten;/* replies owed for bytes of <out> not written yet */
    uint32_t              slow_left;/* owners' replies still to come up to the end of the
                                       last slow request's (SL_UPOOL_SLOW); 0: none */
    uint64_t              slow_seq; /* when that slow request came (the pool's count) */
    struct sl_buf        *in;       /* read chunk */
    struct sl_tlsio       io;       /* TLS: the engine and its write (io.tls NULL: plain) */
    struct sl_obuf        plain;    /* TLS: bytes taken from <out> to leave, being encrypted */
    uint64_t              used_ms;  /* last submit or read (the idle clock) */
    uint64_t              flight_ms;/* when the batch in flight was committed (a stall's start) */
    uint8_t               state;
    uint8_t               dirty;
    uint8_t               writing;
    uint8_t               listed;   /* in key->conns, pool->pinned or pool->cleaning */
    uint8_t               cleaning; /* unpinned clean: RESET and setup under way */
    uint8_t               handles;  /* open handles (tcp, timer) */
    uint8_t               starting; /* new, not READY yet (in pool->starting) */
    uint8_t               held;     /* READY, its bytes held behind an older one starting */
    uint8_t               holding;  /* its small batch waits for more (net/gather.h) */
    uint8_t               hold_due; /* ... and the wait is over: it leaves at the next flush */
    uint8_t               retired;  /* shared, set aside by a reload (in pool->retiring):
                                       takes no new owner, closes once nothing is owed */
    uint8_t               stale;    /* made for an upstream address a reload replaced: never
                                       back in the pool (a pin given back closes it) */
    uint8_t               noaddr;   /* made while the upstream had no address (its name
                                       not resolved yet): fails at the next loop turn */
};

struct sl_upool_key {
    struct sl_upool      *pool;
    struct sl_upool_key  *next;     /* in pool->keys */
    struct sl_upool_conn *conns;    /* shared connections */
    uint32_t              nconns;
    uint32_t              npinned;  /* pinned connections made for it */
    uint32_t              nretired; /* its shared connections set aside by a reload */
    uint32_t              refs;     /* the callers' */
    uint32_t              nsetup;   /* replies the setup owes */
    char                 *setup;    /* RESP commands */
    size_t                setuplen;
    size_t                idlen;
    char                  id[];
};

struct sl_upool {
    uv_loop_t            *loop;
    struct sl_upool_conf  conf;
    struct sl_upool_cbs   cbs;
    struct sl_upool_key  *keys;
    struct sl_upool_conn *pinned;   /* pinned connections */
    struct sl_upool_conn *cleaning; /* unpinned ones being made clean */
    struct sl_upool_conn *retiring; /* shared ones a reload set aside (sl_upool_reconfigure) */
    struct sl_upool_conn *dirty;    /* connections with bytes to write, in the order */
    struct sl_upool_conn *dirty_tail; /* ... they got them (see mark_dirty) */
    struct sl_upool_conn *starting; /* new connections not READY yet */
    struct sl_upool_conn *holds;    /* connections whose batch waits for more */
    struct sl_habit       gather;   /* the holds, judged (net/gather.h) */
    struct sl_gather_timer gtimer;  /* fires at the earliest hold's end */
    uint64_t              seq;      /* connections made */
    uint64_t              slow_seq; /* slow requests submitted */
    struct sl_upool_owner *wait_head, *wait_tail; /* pin wait queue */
    uint32_t              nwait;
    uint32_t              npinned;
    uint32_t              handles;  /* open handles of every connection + the flush pair */
    uint8_t               closing;
    uv_prepare_t          prep;     /* own_flush: before the loop blocks */
    uv_check_t            check;    /* own_flush: after the I/O callbacks */
    uv_timer_t            idle;     /* idle_timeout_ms: the sweep of shared connections */
    uv_timer_t            retire;   /* while <retiring>: closes those with nothing owed */
    char                 *cbuf;     /* TLS reads' ciphertext (TLS_READ bytes; every read
                                       is decrypted before the loop reads another) */
    struct sl_upool_stats st;
};

/* Shared and pinned connections' lists (key->conns, pool->pinned, ...). */
static inline void sl_upool_list_add(struct sl_upool_conn **head, struct sl_upool_conn *c)
{
    c->prev = NULL;
    c->next = *head;
    if (*head)
        (*head)->prev = c;
    *head = c;
    c->listed = 1;
}

static inline void sl_upool_list_del(struct sl_upool_conn **head, struct sl_upool_conn *c)
{
    if (!c->listed)
        return;
    if (c->prev)
        c->prev->next = c->next;
    else
        *head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->next = c->prev = NULL;
    c->listed = 0;
}

/* upool.c */
struct sl_upool_conn *sl_upool_conn_new(struct sl_upool_key *k, int *err);
void sl_upool_conn_fail(struct sl_upool_conn *c, int err, const char *why);
void sl_upool_mark_dirty(struct sl_upool_conn *c);  /* bytes to write at the turn's end */
void sl_upool_on_timer(uv_timer_t *t);              /* a connection's connect/setup deadline */
/* upool_pin.c */
void sl_upool_serve_waiters(struct sl_upool *p);    /* a pinned place freed */

#endif

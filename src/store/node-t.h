/* sluice — types of one connection to one Redis node (store/node.c) and of
 * the requests that travel on it. Internal to store/. */
#ifndef SL_STORE_NODE_T_H
#define SL_STORE_NODE_T_H

#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include <hiredis/read.h>

#include "store/slot.h"
#include "store/store.h"
#include "store/tlsio.h"
#include "store/wire.h"

#define SL_STORE_MAX_SCRIPTS 16   /* built-in + sl_store_script_add() */
#define SL_STORE_TEXT_MAX    260  /* kept of an error, status or bulk reply (HGET: 256) */

enum sl_node_state {
    SL_NODE_DISCONNECTED,  /* retry timer armed (or retired: nothing armed) */
    SL_NODE_CONNECTING,    /* TCP connect in flight */
    SL_NODE_HANDSHAKE,     /* AUTH, SELECT, SCRIPT LOAD sent, replies owed */
    SL_NODE_READY,         /* serves requests (unless suspect) */
    SL_NODE_DROPPING,      /* TCP closing; its close callback re-arms the retry */
};

enum sl_req_kind {
    SL_K_EVAL,     /* a caller's EVALSHA */
    SL_K_HB,       /* a heartbeat (single node: also the probe while suspect) */
    SL_K_HS,       /* AUTH or SELECT of the handshake */
    SL_K_HS_LOAD,  /* SCRIPT LOAD of the handshake */
    SL_K_LOAD,     /* SCRIPT LOAD after NOSCRIPT */
    SL_K_PROBE,    /* PING while suspect (cluster nodes) */
    SL_K_ASKING,   /* ASKING before a request sent after an ASK redirection */
    SL_K_MAP,      /* CLUSTER SHARDS / CLUSTER SLOTS: the slot map */
    SL_K_TEXT,     /* a caller's HGET: a string reply */
    SL_K_SPLIT,    /* a caller's call split over slots: on no wire, its parts are */
};

struct sl_split; /* store.c: the parts of a call split over slots */

struct sl_store_req {
    struct sl_store_req *next;       /* the node's FIFO (wire order), or the pool's free list */
    struct sl_store_req *dl_prev;    /* the node's deadline list neighbours */
    struct sl_store_req *dl_next;
    sl_store_cb         *cb;         /* NULL once cancelled, and for internal requests */
    sl_store_text_cb    *tcb;        /* SL_K_TEXT: instead of cb */
    void                *data;       /* the caller's, for cb */
    struct sl_node      *node;       /* the node whose FIFO holds it (NULL: none) */
    struct sl_store_req *parent;     /* a part of a split call: the call */
    struct sl_split     *split;      /* SL_K_SPLIT: the parts' bookkeeping (owned) */
    uint64_t             deadline;   /* loop ms; in the deadline list while !done */
    uint64_t             sent_ns;    /* uv_hrtime() when made, for the latency */
    uint64_t             seq;        /* wire sequence of its last send */
    int                  script;     /* EVAL, HB, *LOAD: which script; HS: 0 AUTH, 1 SELECT */
    int                  part;       /* a part: its index in the parent's split */
    uint8_t              kind;       /* enum sl_req_kind */
    uint8_t              done;       /* completed (cb ran or timed out): the reply is dropped */
    uint8_t              retried;    /* NOSCRIPT retry spent */
    uint8_t              in_dl;      /* in the deadline list */
    uint8_t              redirects;  /* MOVED / ASK followed so far */
    uint16_t             slot;       /* cluster: the slot of its keys */
    struct sl_obuf       cmd;        /* EVAL, HB, TEXT: the encoded command, for a resend */
};

/* The reply being parsed: what the object functions kept. */
struct sl_reply {
    int         type;                /* REDIS_REPLY_* of the top level, 0 before it */
    int         n;                   /* integers in vals */
    const char *bad;                 /* not a flat integer array (or too long): why */
    size_t      textlen;             /* full length of a string/status/error */
    char        text[SL_STORE_TEXT_MAX]; /* its first bytes, NUL-terminated */
    int64_t     vals[SL_STORE_MAX_VALS];
};

/* One connection to one Redis node. */
struct sl_node {
    struct sl_store      *st;        /* owner: scripts, conf, pool, stats */
    char                  name[64];  /* numeric "ip:port", for logs */
    struct sockaddr_storage ss;      /* where it connects */
    int                   idx;       /* its index in st->nodes */

    uv_tcp_t              tcp;       /* valid while tcp_open */
    uv_connect_t          connect_req;
    uv_timer_t            connect_timer; /* connect + handshake must finish in connect_timeout */
    uv_timer_t            retry_timer;   /* reconnect, or probe while suspect */
    uv_timer_t            dl_timer;      /* the earliest deadline */
    uv_prepare_t          prepare;       /* flush before the loop blocks */
    uv_check_t            check;         /* flush after the I/O callbacks */
    int                   handles;       /* initialized and not yet closed */

    enum sl_node_state    conn;
    uint8_t               tcp_open;      /* tcp initialized, its close cb pending */
    uint8_t               flush_armed;   /* prepare/check started */
    uint8_t               closing;       /* sl_node_close() called */
    uint8_t               suspect;       /* a deadline passed on this connection */
    uint8_t               connected_once;
    uint8_t               reconnect_now; /* skip the backoff once (reconfigure) */
    uint8_t               retired;       /* cluster: not a master any more: no reconnect */
    uint8_t               master;        /* the map names it a master (single: always) */
    uint8_t               just_ready;    /* handshake done; the owner has not seen it yet */
    int8_t                logged;        /* cluster: -1 nothing logged, 0 down, 1 up */
    int                   hs_pending;    /* handshake replies still expected */
    uint64_t              gen;           /* connection generation, for stale callbacks */
    uint64_t              seq;           /* commands sent on this connection */
    uint64_t              backoff_ms;
    uint64_t              rng;
    uint64_t              load_seq[SL_STORE_MAX_SCRIPTS]; /* wire seq of the last SCRIPT LOAD */
    struct sl_store_req  *probe_req;     /* SL_K_PROBE in flight */

    struct sl_tlsio       io;            /* the write in flight (io.req, io.wbuf, io.writing: one
                                            at most, plaintext too) and, with [store] tls, the
                                            connection's TLS engine (io.tls) */
    redisReader          *reader;        /* per connection */
    struct sl_reply       reply;
    struct sl_slot_toks  *toks;          /* SL_K_MAP reply being collected, or NULL */
    char                 *rbuf;          /* SL_NODE_READ_SIZE bytes */
    struct sl_obuf        out;           /* commands of this turn */

    struct sl_store_req  *fifo_head, *fifo_tail;
    size_t                fifo_n;
    struct sl_store_req  *dl_head, *dl_tail;
    uint64_t              dl_armed;      /* loop ms dl_timer fires at; 0 when idle */
    const struct sl_store_req *dl_reread; /* the head whose timeout waited for a read (on_deadline) */

    uint64_t              redirects_in;  /* MOVED/ASK replies this node gave */
};

#endif

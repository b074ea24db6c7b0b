/* sluice — types of a session: one client connection and its own upstream.
 * What only one protocol keeps is that protocol's (struct sl_resp_sess in
 * sess_resp.c, struct sl_http_sess in sess_http.c). */
#ifndef SL_NET_SESSION_T_H
#define SL_NET_SESSION_T_H

#include <stdint.h>
#include <uv.h>

#include "core/buf-t.h"
#include "core/tq.h"
#include "net/outbuf.h"
#include "net/turn.h"
#include "shape/wait-t.h"
#include "net/pend-t.h"

struct sl_listener;
struct sl_sess_proto;
struct sl_http_sess;
struct sl_session;
struct sl_limiter_req;
struct sl_ident_state;
struct sl_meter;
struct sl_place;
struct sl_tls;
struct sl_sess_link;
struct sl_alog_sess;
struct sl_sadapt;

enum sl_sess_state {
    SL_SESS_CONNECTING = 0, /* accepted; upstream connect in progress */
    SL_SESS_RELAY,          /* both sides open */
    SL_SESS_FLUSHING,       /* no more reads; close once the client has every byte */
    SL_SESS_LINGER,         /* client shut down for writing; discarding its input */
    SL_SESS_CLOSED,         /* handles closing; freed in the last close callback */
};

/* Why a side is not being read (bits; reading runs when none is set). */
enum sl_pause {
    SL_PAUSE_PEERQ    = 1, /* the other side's write queue is above the high mark */
    SL_PAUSE_INFLIGHT = 2, /* client: too many requests await replies */
    SL_PAUSE_DONE     = 4, /* no more input wanted from this side (EOF, error, drain) */
    SL_PAUSE_CONNECT  = 8, /* upstream not connected yet */
    SL_PAUSE_DECIDE   = 16,/* client: requests wait for the limiter's verdicts */
    SL_PAUSE_SHAPE    = 32,/* a byte meter has no credit for this side */
    SL_PAUSE_OWNQ     = 64,/* client: its own write queue is above the high mark (the
                              answers its requests would get are not being read) */
};

/* One entry of the reply queue: <n> upstream replies pass to the client, then
 * the local reply <text> (a rejection, a protocol error) goes out in their
 * place in the order. Plain requests after the last local reply are only
 * counted (struct sl_session.tail_n), so the queue is empty in the common
 * case and costs a counter per request. */
struct sl_reply_seg {
    uint32_t n;       /* upstream replies before the local one */
    uint32_t len;     /* bytes of <text> */
    char    *text;    /* the local reply, RESP-encoded (owned when SEG_OWNED) */
    uint8_t  flags;   /* SL_SEG_* */
};
#define SL_SEG_OWNED 1 /* free(text) after use */
#define SL_SEG_CLOSE 2 /* close the session once this reply is sent */
#define SL_SEG_SWALLOW 4 /* the last of the <n> upstream replies is dropped: <text> replaces it */
#define SL_SEG_UNSUB 8   /* no text: an unsubscribe-all of kind <len> (0 channels, 1 patterns,
                            2 shard channels) whose confirmations are counted at its turn */
#define SL_SEG_MARK 16   /* no text: <n> such confirmations, then nothing is sent */


struct sl_session {
    uv_tcp_t            client;     /* accepted socket; data = this */
    uv_tcp_t           *up_tcp;     /* our own connection upstream, NULL when none (the
                                       handle of a struct sl_upconn, net/upkeep.h: it may
                                       outlive the session, kept for another); data = this */
    uint32_t            up_wreqs;   /* writes queued on it whose callback is still due */
    struct sl_listener *l;          /* owner (counters, configuration) */
    const struct sl_sess_proto *proto; /* what the bytes mean (net/session-i.h) */
    struct sl_tq_node   tq;         /* place in l->connecting / active / lingering */
    struct sl_tq_node   hq;         /* place in l->heading while a request's head comes */
    struct sl_tq_node   wq;         /* http: place in l->awaiting while a response's head is due */
    struct sl_http_sess *http;      /* http: the protocol's state (sess_http.c) */
    void               *pstate;     /* the protocol's own state, proto->state_size bytes
                                       allocated with the session; the core never reads it */
    uint8_t             state;      /* enum sl_sess_state */
    uint8_t             cl_pause;   /* enum sl_pause bits for reading the client */
    uint8_t             up_pause;   /* enum sl_pause bits for reading the upstream */
    uint8_t             handles;    /* handles still to see their close callback */
    uint8_t             cl_eof;     /* the client sent EOF */
    uint8_t             cl_said;    /* the client may send nothing more (http: it asked for the
                                       close with its last request, read whole, nothing after):
                                       the close needs no half-close and no lingering */
    uint8_t             up_up;      /* the upstream handle was initialised */
    uint8_t             up_kept;    /* http keep-alive: 1 the upstream connection was taken
                                       from the kept ones; 2 it replaces one that failed so */
    uint8_t             resolving;  /* in l->connecting, waiting for a lookup of the upstream's
                                       name (resolve_ttl = 0) before connecting */
    uint8_t             draining;   /* server drain: close when nothing is in flight */
    uint8_t             meter_hold; /* the ring's head waits for a byte meter's take */
    struct sl_turn_node resume_tn;  /* verdicts landed: resumed at the turn's end */
    uint64_t            id;         /* connection number (connection-scoped limits) */
    struct sl_ident_state *ident;   /* who the client is (resp) */
    struct sl_pend_ring pend;       /* requests in order waiting for verdicts (net/pend.h) */
    struct sl_buf      *cin;        /* chunk receiving client bytes, or NULL */
    struct sl_buf      *uin;        /* chunk receiving upstream bytes, or NULL */
    uint32_t            inflight;   /* replies owed to the client (upstream + local) */
    uint32_t            tail_n;     /* upstream replies owed after the last segment */
    struct sl_reply_seg *segs;      /* ring of segments (NULL until a local reply) */
    uint32_t            seg_head;   /* first segment */
    uint32_t            seg_n;      /* segments queued */
    uint32_t            seg_cap;    /* ring size */
    struct sl_wait      park;       /* parked: a delayed request's due time, or the
                                       login queue's next poll */
    struct sl_meter    *meter[2];   /* bytes_in (client reads), bytes_out (upstream
                                       reads); NULL when not metered */
    struct sl_place    *place;      /* places under connection limits, or NULL */
    uint64_t            gate_until; /* login queue: refuse after this (us) */
    struct sl_tls      *tls[2];     /* TLS engine of the client [0] / upstream [1] socket,
                                       NULL: plain TCP (see the transport in session.c) */
    uint8_t             tls_hs[2];  /* its handshake is under way: the socket is read
                                       whatever the pause bits say */
    uint8_t             tls_eof[2]; /* the socket reached EOF */
    uint8_t             pp_ver;     /* the PROXY header's version read (sess_pp.c) */
    uint16_t            pp_got;     /* its bytes read so far */
    uint16_t            pp_want;    /* ... and the length to read up to */
    unsigned char      *pp;         /* its bytes while it is read, else NULL */
    struct sockaddr_storage *pp_src; /* its source, kept for upstream_proxy_protocol */
    struct sl_turn_node kick_tn;    /* pumped at the turn's end: plaintext may wait in the
                                       engine for a side just unpaused */
    struct sl_outbuf    out[2];     /* what goes to the client [0] / upstream [1] socket
                                       next, in one write (net/outbuf.h) */
    struct sl_sess_link *link;      /* pooled listener (upstream_pool): the way to the
                                       shared upstream connections instead of <upstream>
                                       (net/sess_pool.c); NULL: 1:1 */
    uint64_t            usage_at;   /* [usage]: wall-clock us its time was counted up to;
                                       0: not counted (net/usage_export.h) */
    struct sl_alog_sess *alog;      /* http, access_log: requests waiting for their line
                                       (net/alog.c); NULL when the listener does not log */
    struct sl_sadapt    *adapt;     /* adaptive concurrency: its waiter and the places its
                                       requests hold (net/sess_adapt.h); NULL until needed */
};

#endif

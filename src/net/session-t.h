/* sluice — types of a session: one client connection and its own upstream. */
#ifndef SL_NET_SESSION_T_H
#define SL_NET_SESSION_T_H

#include <stdint.h>
#include <uv.h>

#include "core/buf-t.h"
#include "core/tq.h"
#include "proto/resp-t.h"
#include "proto/resp_reply-t.h"

struct sl_listener;

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
};

/* Reply modes a client chooses with CLIENT REPLY. */
enum sl_reply_mode { SL_REPLY_ON = 0, SL_REPLY_OFF, SL_REPLY_SKIP };

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

struct sl_session {
    uv_tcp_t            client;     /* accepted socket; data = this */
    uv_tcp_t            upstream;   /* our own connection upstream; data = this */
    struct sl_listener *l;          /* owner (counters, configuration) */
    struct sl_tq_node   tq;         /* place in l->connecting / active / lingering */
    uint8_t             state;      /* enum sl_sess_state */
    uint8_t             cl_pause;   /* enum sl_pause bits for reading the client */
    uint8_t             up_pause;   /* enum sl_pause bits for reading the upstream */
    uint8_t             handles;    /* handles still to see their close callback */
    uint8_t             resp;       /* the listener speaks RESP (else raw tcp) */
    uint8_t             passthru;   /* resp: pub/sub or MONITOR: replies not 1:1 */
    uint8_t             reply_mode; /* enum sl_reply_mode */
    uint8_t             cl_eof;     /* the client sent EOF */
    uint8_t             up_up;      /* the upstream handle was initialised */
    uint8_t             draining;   /* server drain: close when nothing is in flight */
    struct sl_buf      *cin;        /* chunk receiving client bytes, or NULL */
    struct sl_buf      *uin;        /* chunk receiving upstream bytes, or NULL */
    struct sl_resp     *framer;     /* resp: request framer, while requests come */
    uint64_t            req_fwd;    /* bytes of the request in progress already sent on */
    uint32_t            inflight;   /* replies owed to the client (upstream + local) */
    uint32_t            tail_n;     /* upstream replies owed after the last segment */
    struct sl_reply_seg *segs;      /* ring of segments (NULL until a local reply) */
    uint32_t            seg_head;   /* first segment */
    uint32_t            seg_n;      /* segments queued */
    uint32_t            seg_cap;    /* ring size */
    struct sl_reply_scan scan;      /* resp: upstream reply boundaries */
};

#endif

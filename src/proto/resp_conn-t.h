/* sluice — types of the RESP connection model: what Redis makes of a
 * connection, from what was sent on it and what came back. */
#ifndef SL_PROTO_RESP_CONN_T_H
#define SL_PROTO_RESP_CONN_T_H

#include <stdint.h>

/* What a request does to the connection's reply accounting, read off it
 * when it is framed (the request's words are gone by the time it is
 * decided) and applied by sl_rconn_commit() only if it goes upstream: a
 * request that sluice refuses changes nothing in Redis, so it must change
 * nothing here. */
enum sl_fx {
    SL_FX_PLAIN = 0, /* one reply, in the connection's mode */
    SL_FX_EMPTY,     /* `*0`: no reply, no change */
    SL_FX_REPLY_OFF, SL_FX_REPLY_SKIP, SL_FX_REPLY_ON, /* CLIENT REPLY ... */
    SL_FX_HELLO2, SL_FX_HELLO3, /* HELLO 2 | 3 (other HELLOs: PLAIN) */
    SL_FX_MONITOR,
    SL_FX_SUB, SL_FX_PSUB, SL_FX_SSUB, /* nchan channels named */
    SL_FX_UNSUB, SL_FX_PUNSUB, SL_FX_SUNSUB, /* nchan channels named, 0 = all */
    SL_FX_RESET,
};

/* What a request is to the order of verdicts and to the transaction. */
enum sl_pk {
    SL_PK_PLAIN = 0, SL_PK_MULTI, SL_PK_EXEC, SL_PK_DISCARD, SL_PK_RESET,
    SL_PK_AUTH,   /* AUTH or HELLO with AUTH: identity changes on its success */
    SL_PK_STATE,  /* CLIENT REPLY: never refused, by a byte meter either */
    SL_PK_HEAD,   /* the first bytes of a request too big to hold: decided early */
    SL_PK_TAIL,   /* the rest of such a request: follows its head's verdict */
    SL_PK_QUIT,   /* QUIT: never refused; the connection ends with its answer */
};

/* Whether Redis will have the connection subscribed, from what was sent. */
enum { SL_PRED_NO = 0, SL_PRED_YES, SL_PRED_UNKNOWN };

/* Reply modes a client chooses with CLIENT REPLY. */
enum sl_reply_mode { SL_REPLY_ON = 0, SL_REPLY_OFF, SL_REPLY_SKIP };

struct sl_resp_conn {
    uint8_t  passthru;   /* pub/sub or MONITOR: replies not 1:1 */
    uint8_t  monitor;    /* MONITOR: every later reply is a feed line */
    uint8_t  resp3;      /* HELLO 3 was sent: pub/sub frames are pushes */
    uint8_t  head_len;   /* bytes in <head> */
    uint8_t  tail_len;   /* bytes in <tail> */
    uint8_t  pred_sub[3];/* after what was sent: SL_PRED_* subscribed to channels,
                            patterns, shard channels */
    uint8_t  mon_sent;   /* a MONITOR was sent ... */
    uint8_t  reply_mode; /* enum sl_reply_mode */
    uint8_t  in_multi;   /* a MULTI was sent and no EXEC/DISCARD yet */
    uint8_t  multi_dirty;/* ... and a command inside it was rejected: EXEC aborts */
    uint8_t  multi_subs; /* ... bit k: a subscribe of kind k is queued in it;
                            bit 3+k: an unsubscribe of all of kind k */
    uint8_t  sub_by_exec;/* bit k: subscribed by an EXEC (its confirmations are
                            inside the EXEC's reply): until a count is seen */
    uint8_t  classifying;/* the reply in progress is being told apart */
    uint32_t sub_owed;   /* (un)subscribe confirmations owed (RESP3: pushes) */
    uint32_t marks;      /* unsubscribe-all markers in the reply queue */
    uint32_t subs[3];    /* channels, patterns, shard channels (confirmed) */
    uint32_t resets_sent;/* RESETs sent (answered), and +RESETs seen */
    uint32_t resets_seen;
    uint32_t mon_at;     /* ... after this many RESETs */
    uint32_t sub_exec_at;/* sub_by_exec: by an EXEC sent after this many RESETs */
    uint32_t multi_queued; /* commands queued in the MULTI sent (EXEC's elements) */
    char     head[24];   /* first bytes of the reply in progress (pub/sub, MONITOR) */
    char     tail[24];   /* last bytes of the reply in progress (pub/sub) */
};

#endif

/* sluice — inside a session: what the session core offers the protocols,
 * and the table each protocol fills.
 *
 * The core (session.c) owns what every protocol shares: the two sockets,
 * pooled chunks, pause bits and watermarks, the queue of replies owed with
 * room for local replies, the ring of requests waiting for verdicts (its
 * entries are net/pend.c's: everyone else goes through net/pend.h), byte
 * meters, parking for `delay`, connection limits, closing and lingering.
 * A protocol (sess_resp.c, sess_http.c, sess_tcp.c) frames what each side
 * sends, decides what a request does to the connection, and renders local
 * answers, also the listener's refusals before a session exists; it
 * reaches the sockets only through the core's functions below. What only
 * it keeps of a session is its own (s->pstate, state_size bytes; HTTP's in
 * s->http). The core never asks which protocol it runs: the listener's
 * protocol picks one from a table (sl_sess_proto_of). */
#ifndef SL_NET_SESSION_I_H
#define SL_NET_SESSION_I_H

#include <stddef.h>
#include <stdint.h>

#include "limit/limiter.h"
#include "net/pend.h"
#include "net/session-t.h"
#include "proto/req-t.h"

#define SL_STREAM_AT (16 * 1024)     /* a partial request this big is committed */

/* What a client's EOF does (client_eof). */
#define SL_EOF_FORWARD 1
#define SL_EOF_KEEP    2

/* Local answers a session gives on its own (not to a request). */
enum sl_answer {
    SL_ANSWER_MAX_CLIENTS = 0, /* past max_connections */
    SL_ANSWER_NO_FD,           /* out of descriptors for the upstream */
    SL_ANSWER_UPSTREAM_DOWN,   /* the upstream refused or did not answer the connect */
    SL_ANSWER_CONN_LIMIT,      /* a connection limit refused (<limit> names it) */
};

struct sl_sess_proto {
    const char *name;
    size_t      state_size;  /* bytes of its per-session state (s->pstate, zeroed) */
    uint8_t     framed;      /* requests have boundaries: local answers go in order,
                                a drain ends at a boundary, byte limits refuse requests */
    /* a session begins (its upstream is being connected) */
    void (*init)(struct sl_session *s);
    /* the upstream's stream is between two replies: a local one may go */
    int (*at_boundary)(const struct sl_session *s);
    /* <n> bytes were just read from the client into the end of <b> */
    void (*client_in)(struct sl_session *s, struct sl_buf *b, size_t n);
    /* the client sent EOF; returns SL_EOF_* bits: FORWARD, the bytes it
     * left unframed still go upstream (before the half-close travels on);
     * KEEP, the half-close does not travel: the protocol still has whole
     * requests to send and ends the session itself */
    int (*client_eof)(struct sl_session *s);
    /* bytes were read from the upstream into <b>[start, end) */
    void (*upstream_in)(struct sl_session *s, struct sl_buf *b);
    /* the upstream closed or failed (<err>: UV_EOF or an error) */
    void (*upstream_eof)(struct sl_session *s, int err);
    /* verdicts landed, a parked request's time came, a hold was lifted:
     * move on what can move */
    void (*resume)(struct sl_session *s);
    /* after a read was handled: give back what an idle session need not hold */
    void (*release)(struct sl_session *s);
    /* the session is freed */
    void (*free)(struct sl_session *s);
    /* renders answer <what> (<limit>: the refusing limit, or NULL) into
     * <out>; returns its length, 0 = close without a word */
    size_t (*answer)(struct sl_session *s, enum sl_answer what, const char *limit, char *out,
                     size_t cap);
    /* the same for a connection the listener refuses before it has a
     * session (SL_ANSWER_NO_FD): written once to the fresh socket, which
     * is then closed; 0 = closed without a word */
    size_t (*refusal)(enum sl_answer what, char *out, size_t cap);
    /* a queue marker (SL_SEG_UNSUB of <kind>) reached its turn: how many
     * upstream replies it stands for; one left the queue */
    uint32_t (*marker_due)(struct sl_session *s, uint32_t kind);
    void (*marker_gone)(struct sl_session *s);
    /* the verdict <v> on a request: its refusal (rejected) or what its
     * answer gains (allowed: RateLimit fields), into <out>; 0 = nothing */
    size_t (*verdict_text)(struct sl_session *s, const struct sl_verdict *v, char *out,
                           size_t cap);
    /* the client took longer than header_timeout to send a request's head */
    void (*header_late)(struct sl_session *s);
    /* no response head came within upstream_timeout (http) */
    void (*upstream_late)(struct sl_session *s);
    /* replies may come unasked: an idle-looking session is not idle */
    int (*busy)(const struct sl_session *s);
    /* at exit: free pooled state */
    void (*pool_drain)(void);
    /* the upstream connection is at a message boundary the upstream did
     * not end, with nothing in flight: another session may reuse it
     * (upstream_keepalive; NULL: never) */
    int (*reusable)(const struct sl_session *s);
    /* pooled listener: the upstream connection the session's replies were
     * owed on failed (<pinned>: its own); NULL for protocols never pooled */
    void (*link_lost)(struct sl_session *s, int pinned, int err, const char *why);
    /* ... the session starts pooled: its link to the listener's engine
     * (sl_sess_link_open with its first pool key); 0 or an error */
    int (*link_open)(struct sl_session *s);
};

extern const struct sl_sess_proto sl_sess_resp, sl_sess_http, sl_sess_tcp;

/* The protocol of a listener (enum sl_proto of its configuration). */
const struct sl_sess_proto *sl_sess_proto_of(const struct sl_listener *l);

/* ---- the core, for the protocols (session.c) ---- */

uint64_t sl_sess_now_ms(struct sl_session *s);            /* the turn's time (net/turn.h) */
uint64_t sl_sess_waits_now(void);                         /* the waits' clock (us) */
void sl_sess_pause(struct sl_session *s, int upstream, uint8_t bit, int on);
/* Sends <len> bytes at <p> to <dst>: appended to the side's buffer
 * (s->out[], net/outbuf.h), written with the rest of the side's bytes when
 * the core flushes it (after the read being handled, at the turn's end, at
 * a close, or when full). <b>: the chunk holding them (referenced), or NULL:
 * copied. 0 or a libuv error. */
int  sl_sess_send(struct sl_session *s, uv_stream_t *dst, struct sl_buf *b, const char *p,
                  size_t len);
void sl_sess_to_upstream(struct sl_session *s, struct sl_buf *b, uint32_t from, uint32_t to);
void sl_sess_to_client(struct sl_session *s, struct sl_buf *b, uint32_t from, uint32_t to);
void sl_sess_owe(struct sl_session *s, uint32_t n);       /* <n> upstream replies are owed */
void sl_sess_paid(struct sl_session *s);                  /* one reply owed was delivered */
void sl_sess_drain_check(struct sl_session *s);
/* Queues local reply <text> after every reply owed so far (SL_SEG_*). */
void sl_sess_local(struct sl_session *s, char *text, uint32_t len, uint8_t flags);
void sl_sess_emit_locals(struct sl_session *s);
void sl_sess_finish(struct sl_session *s);                /* close once the client has all */
void sl_sess_cork(struct sl_session *s);  /* what goes to the client next leaves with the FIN */
void sl_sess_resume(struct sl_session *s);
void sl_sess_resume_later(struct sl_session *s);          /* at the end of the loop turn */
void sl_sess_flush(struct sl_session *s);  /* both sides' buffers are written now */
/* Asks the limiter about request <r> (complete, or the head of a big one)
 * and queues it in order. 0, or -1 when the ring is full (or closed). */
int  sl_sess_enqueue(struct sl_session *s, const struct sl_req *r, uint32_t span, uint8_t fx,
                     uint32_t nchan, int kind);
void sl_sess_verdict(struct sl_pend *e, const struct sl_verdict *v);
void sl_sess_park(struct sl_session *s, uint64_t due_us);
int  sl_sess_meters_owe(const struct sl_session *s);
int  sl_sess_meter_gate(struct sl_session *s, int kind, uint32_t span, struct sl_verdict *v);
struct sl_ident_state *sl_sess_ident(struct sl_session *s);
uint32_t sl_sess_pend_bytes(const struct sl_session *s);
void sl_sess_rx_release(struct sl_buf **slot);
/* A deadline of the session: node <n> in timeout queue <q> from now on
 * while <running> (kept where it is if already there), out of it when not. */
void sl_sess_clock(struct sl_session *s, struct sl_tq *q, struct sl_tq_node *n, int running);
void sl_sess_ring_release(struct sl_session *s);  /* the verdict ring goes back when empty */
/* The kept upstream connection the session took (up_kept = 1) ended before
 * answering the request sent on it: a new one replaces it, the <unowe>
 * replies owed on the old one are no longer owed, and the protocol's
 * resume runs once it is up (the protocol sends the request again). If
 * the connect fails, the client gets the usual answer and the close. */
void sl_sess_upstream_again(struct sl_session *s, uint32_t unowe);

/* ---- the pooled link (sess_pool.c; upstream_pool = N) ----------------------- */

/* The session goes pooled, on the key named <id> (made with <setup>, <nsetup>
 * replies, when new): 0 or SL_ENOMEM. */
int  sl_sess_link_open(struct sl_session *s, const void *id, size_t idlen, const char *setup,
                       size_t setuplen, uint32_t nsetup);
/* Moves the session to another key (its next shared submissions go there). */
int  sl_sess_link_rekey(struct sl_session *s, const void *id, size_t idlen, const char *setup,
                        size_t setuplen, uint32_t nsetup);
void sl_sess_link_close(struct sl_session *s);   /* the engine forgets it */
void sl_sess_link_free(struct sl_session *s);
void sl_sess_link_owe(struct sl_session *s, uint32_t n);
/* The replies just owed (sl_sess_link_owe) include a script's: the bytes
 * submitted next carry SL_UPOOL_SLOW (net/upool.h). */
void sl_sess_link_slow(struct sl_session *s);
/* Requests written first on every connection pinned to the session from
 * now on (<replies> replies, dropped): its own state a shared connection
 * lacks (its name). <len> 0: none. 0 or SL_ENOMEM. */
int  sl_sess_link_prelude(struct sl_session *s, const char *p, size_t len, uint32_t replies);
/* Bytes for the upstream (whole requests; the replies owed since the last
 * call go with them on a shared connection): 0 or an error. */
int  sl_sess_link_send(struct sl_session *s, const char *p, size_t len);
int  sl_sess_link_pinned(const struct sl_session *s);
uint32_t sl_sess_link_inflight(const struct sl_session *s); /* replies owed on shared ones */
/* A connection of its own: 1 pinned, 0 not yet (pooled replies to come, or
 * queued past the cap: the session is resumed), or an error (SL_ELIMIT). */
int  sl_sess_link_pin(struct sl_session *s, int wait);
int  sl_sess_link_waiting(const struct sl_session *s); /* queued for a pin */
void sl_sess_link_unwait(struct sl_session *s);   /* gives up a queued pin */
void sl_sess_link_unpin(struct sl_session *s, int clean);
/* session.c: the engine read a piece of a reply for <s> (flags: SL_UPOOL_*);
 * 0 taken, nonzero refused (the session is closed: past its cap, or gone). */
int  sl_sess_link_got(struct sl_session *s, struct sl_buf *b, uint32_t from, uint32_t to,
                      unsigned flags);

/* ---- inside the core, between its files ---- */

/* sess_decide.c: <n> bytes were read from side <up> (its byte meter
 * charges them); the session's meters are set up (-1: out of memory). */
void sl_sess_meter_read(struct sl_session *s, int up, size_t n);
int  sl_sess_meters_init(struct sl_session *s);
/* session.c: the session parked on wait <w>; answer <what> then the close;
 * the upstream connection of an admitted session starts. */
struct sl_session *sl_sess_of_park(struct sl_wait *w);
void sl_sess_answer_close(struct sl_session *s, enum sl_answer what, const char *limit);
void sl_sess_connect_upstream(struct sl_session *s);
void sl_sess_accepted(struct sl_session *s);  /* PROXY header read: TLS or the protocol */
void sl_sess_pp_start(struct sl_session *s);  /* sess_pp.c: reads the PROXY header */
void sl_sess_pp_refuse(struct sl_session *s, const char *why);

/* For the timeout sweep (sess_sweep.c): an upstream connect given up as
 * timed out (the client is answered). */
void sl_sess_connect_timed_out(struct sl_session *s);
int  sl_sess_pp_upstream(struct sl_session *s); /* writes the header upstream; <0: failed */
/* sess_gate.c: a session under connection limits asks for its places. */
void sl_sess_gate_try(struct sl_session *s);

/* ---- the transport (session.c) and TLS under it (sess_tls.c) ---------------- */

/* The socket of side <up> (0 the client, 1 the upstream). */
uv_stream_t *sl_sess_side_stream(struct sl_session *s, int up);

/* Writes <len> bytes at <p> to socket <dst> as they are, at once, past the
 * side's buffer (<b>: the chunk holding them, or NULL: copied if the kernel
 * does not take them at once). Returns 0 or a libuv error. */
int sl_sess_plain_send(struct sl_session *s, uv_stream_t *dst, struct sl_buf *b, const char *p,
                       size_t len);

/* The chunk of <slot> with room to read into (a new one when it is full);
 * NULL when out of memory. */
struct sl_buf *sl_sess_rx_chunk(struct sl_buf **slot);

/* What meter <m> (NULL: none) lets a read of up to <len> bytes take. */
unsigned sl_sess_room_of(struct sl_meter *m, unsigned len);

/* Side <up> got <nread> plaintext bytes in its chunk (or EOF, an error). */
void sl_sess_got(struct sl_session *s, int up, ssize_t nread);

/* Side <up>'s TLS handshake ended (<ok>: established). */
void sl_sess_tls_done(struct sl_session *s, int up, int ok);

/* sess_keep.c (http upstream keep-alive, net/upkeep.h): */
/* The session's upstream connection is done with (<queued> bytes not yet
 * taken by its socket): 1 when it went to the listener's kept ones (it
 * stands at a clean boundary: proto->reusable and the transport agree; the
 * caller forgets the handle, no longer the session's), 0 when the caller
 * closes it. */
int  sl_sess_keep_give(struct sl_session *s, size_t queued);
/* Takes a kept connection as the session's upstream: 1 (up_up set, the
 * handle open and the session's), 0 (none: connect). */
int  sl_sess_keep_take(struct sl_session *s);
/* The state of a session whose kept connection failed, made ready for a
 * new connect (sl_sess_upstream_again): <unowe> replies no longer owed. */
void sl_sess_keep_again(struct sl_session *s, uint32_t unowe);

/* sess_tls.c: */
/* Encrypts and sends <len> bytes at <p> on side <up>: 0 or a libuv error. */
int sl_sess_tls_send(struct sl_session *s, int up, const char *p, size_t len);
/* Writes out what side <up>'s engine holds for the socket: 0 or an error. */
int sl_sess_tls_flush(struct sl_session *s, int up);
/* Reads side <up>'s socket while its handshake runs, or while the session
 * wants bytes and the engine has room. */
void sl_sess_tls_sync_read(struct sl_session *s, int up);
/* Moves side <up>'s engine on: the handshake, then plaintext to the session. */
void sl_sess_tls_pump(struct sl_session *s, int up);
/* Pumps <s> at the end of the loop turn (plaintext may wait in an engine
 * for a side whose reading was turned back on; not from inside whatever
 * turned it on): s->kick_tn, net/turn.h. */
void sl_sess_tls_kick(struct sl_session *s);

#endif

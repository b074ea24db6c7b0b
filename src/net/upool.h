/* sluice — pooled upstream connections: many owners (sessions), few
 * pipelined connections to a Redis, per worker and per pool key.
 *
 *   owner A --submit--\                         /--deliver(A, piece)
 *   owner B --submit----> conn (key K) --wire--> FIFO [A x2][B x1][A x1]
 *   owner C --submit--/   one write per turn     \--deliver(B, piece) ...
 *                         (sl_upool_flush_all)
 *
 * One pool per listener per worker loop (no locks: everything runs on that
 * loop). A pool KEY is what a connection's state makes visible to a command
 * (user, database, protocol); the engine does not interpret it: the caller
 * names it with opaque bytes and gives the setup commands (RESP, e.g. AUTH
 * u p, SELECT 3, HELLO 3) that bring a fresh connection to it. Their replies
 * are swallowed and checked; an error reply fails the connection and every
 * owner waiting on it, with the reply's first line in the reason.
 *
 * Shared connections: up to conf.per_key per key, opened lazily (a new one
 * when every open one has requests in flight), each with connect_timeout
 * covering the TCP connect and the setup replies. An owner with requests in
 * flight stays on the connection they are on (its replies come back in its
 * order); an owner with none goes to the connection with the fewest in flight,
 * never behind another owner's unanswered script (SL_UPOOL_SLOW), nor behind
 * a batch in flight unanswered for SL_UPOOL_STALL_MS (a stall), while another
 * connection can take it.
 * Between owners: a READY connection made after one that is still starting
 * (connect, setup) with owners' requests on it holds its bytes until that
 * one is READY and has written them, so a request that waits for a new
 * connection is not overtaken by one submitted after it that found a newer
 * connection ready (an older connection, ready already, is not held).
 * Owners' bytes wait (copied) until the setup replies are all in and OK, so
 * nothing runs under the wrong user or database.
 *
 * Submitting COPIES the bytes into the connection's output buffer: requests
 * are small in the common case, the copy lets the caller give its read chunk
 * back at once (an idle session holds no chunk), and all the submissions of a
 * turn leave in ONE contiguous write. Big requests: the caller's own
 * backpressure (max_replies_owed, its read pauses) bounds them.
 *
 * Replies: pieces of each reply go to the owner at the FIFO's head as they
 * are read, by cbs.deliver(owner, chunk, from, to, flags); the chunk is the
 * engine's read chunk: the owner may take a reference (sl_buf_ref, as
 * sl_sess_send does for a queued write) to send the bytes without a copy.
 *
 * SLOW OWNERS (the contract): the engine never stops reading a shared
 * connection for one owner. deliver() returns 0 when the owner took the
 * piece (sent it, or queued it below its own cap), nonzero when it will not
 * (its client's output is past the cap the caller configures, as Redis's
 * client-output-buffer-limit): the engine then forgets the owner at once
 * (as sl_upool_forget), the rest of its replies are read and dropped, never
 * given to anyone else, and failed() is NOT called: the owner refused, it
 * closes itself. Memory is thus bounded by the owners' caps, not by a
 * reply's size.
 *
 * FAILURES: a shared connection that fails (connect, timeout, setup refused,
 * EOF, I/O error, bytes that are not RESP, a RESP3 push) fails exactly the
 * owners with replies owed on it, each once: cbs.failed(owner, err, why)
 * (owner->conn is NULL again by then: it may submit at once, to a new
 * connection). Nothing read after the failure is delivered. Connections are
 * made again lazily, by the next submit.
 *
 * PINNING: sl_upool_pin() gives an owner a connection of its own (an idle
 * shared one with nothing in flight, or a fresh one) for MULTI, WATCH,
 * blocking commands, SUBSCRIBE ...: it submits as before, and everything read
 * goes to it (pushes too, flag SL_UPOOL_PUSH; the owner counts its replies
 * itself, as a 1:1 session does). sl_upool_unpin() gives it back: clean
 * (RESET, then the key's setup replayed, replies swallowed and checked; the
 * connection then rejoins the pool, or closes when the key has enough) or
 * closed. Pinned connections per pool are capped (conf.max_pinned); past the
 * cap the caller chooses: an error at once, or a place in a bounded wait
 * queue (conf.pin_wait_max) answered later by cbs.pinned().
 *
 * LEAVING: an owner that goes away calls sl_upool_forget() (pinned: its
 * connection is closed, unless it was unpinned clean first).
 *
 * WIRING (phase 2): a session on a pooled listener has no upstream socket.
 * It embeds a struct sl_upool_owner; its stateless requests go through
 * sl_upool_submit(key, owner, bytes, 1) instead of sl_sess_to_upstream;
 * deliver() feeds what sess_resp.c's upstream_in does today (counting,
 * local replies in order, sending to the client with a chunk reference) and
 * refuses past the client's output cap; failed() answers every reply still
 * owed with an error and closes (or retries nothing: the requests may have
 * run); pin triggers (MULTI ...) wait until owner->inflight is 0, then pin;
 * the session's AUTH/SELECT/HELLO pick another key; sl_upool_flush_all()
 * moves to the end-of-turn mechanism (net/turn.h) with conf.own_flush = 0.
 *
 * TLS (conf.tls): each connection speaks TLS once its TCP connect is up
 * (store/tlsio.h drives the engine over the stream); the handshake runs
 * within connect_timeout, before the setup commands leave, and a failed
 * one fails the connection like any other failure (its owners hear
 * failed(), the reason in <why>). What is read is decrypted into the read
 * chunk and routed exactly as plaintext is, so the rest of the engine does
 * not know. The context is read at each connect from the caller's slot: a
 * reload that swaps it reaches new connections, as on a 1:1 listener.
 *
 * IDLE: a shared connection with nothing owed, queued or being written for
 * conf.idle_timeout_ms closes (cleanly: a TLS close_notify first). One
 * repeating timer per pool looks every quarter of that timeout, while the
 * pool has shared connections (so one closes after between 1 and 1.25
 * times the timeout idle); nothing is armed per connection or per turn.
 *
 * RELOAD: sl_upool_reconfigure() applies new settings to a running pool,
 * as a reload of nginx or HAProxy does: they reach new connections and new
 * requests, never a request already submitted. A smaller per_key sets
 * the surplus shared connections of each key aside (the least busy first):
 * they take no new owner, the owners with replies owed there keep their
 * order on them, and they close once nothing is owed, queued or being
 * written (looked at every 50 ms while there are any). A larger one opens
 * more as the load asks. Another upstream address sets every shared
 * connection aside the same way, so new owners go to the new address at
 * once; pinned connections stay with their owners until the pin is given
 * back, and then close instead of rejoining the pool. max_pinned, the
 * timeouts and the rest apply from the next pin, connect or sweep; a
 * larger max_pinned grants waiting pins at once.
 *
 * NOT YET: requests split over several submissions (a request is
 * submitted whole: one bigger than the caller's chunk must be buffered or
 * pinned, or another owner's bytes could land inside it). A new shared
 * connection is opened whenever every open one has requests in flight,
 * connecting ones included, so a burst opens up to per_key at once. */
#ifndef SL_NET_UPOOL_H
#define SL_NET_UPOOL_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "net/upool-t.h"

struct sl_tls_ctx;

struct sl_upool_conf {
    struct sockaddr_storage addr;   /* the upstream (copied) */
    uint32_t per_key;               /* N: shared connections per key (>= 1) */
    uint32_t max_pinned;            /* pinned connections per pool (0: none allowed) */
    uint32_t pin_wait_max;          /* owners that may wait for a pin past the cap */
    uint64_t connect_timeout_ms;    /* connect + setup replies (and a clean unpin's) */
    uint8_t  own_flush;             /* the pool flushes by itself at the end of each loop
                                       turn (uv prepare + check); 0: the caller calls
                                       sl_upool_flush_all() */
    /* own_flush = 0: called (with <wake_arg>) when a connection gets bytes to
     * write, so the caller can have sl_upool_flush_all() run at the end of
     * the turn (net/turn.h); NULL: the caller flushes on its own schedule */
    void   (*wake)(void *wake_arg);
    void    *wake_arg;
    /* TLS towards the upstream: the context new connections are made from,
     * read at each connect (*<tls> NULL, or <tls> NULL: plain TCP), and the
     * name sent as SNI and checked against the certificate ("" or NULL:
     * none; see sl_tls_new). Both point into the caller's storage, which
     * outlives the pool (a reload may change what they hold). */
    struct sl_tls_ctx *const *tls;
    const char       *tls_name;
    uint64_t         *tls_resumed;  /* counts handshakes that resumed a session (NULL: none) */
    const char       *label;        /* who the pool is for, in logs (the listener's name) */
    uint64_t          idle_timeout_ms; /* a shared connection idle this long closes; 0: never */
    uint64_t          batch_wait_us;   /* a small batch waits this long for more (net/gather.h);
                                          0: never */
    uint64_t        (*now_ms)(void);   /* the idle clock; NULL: the turn's (net/turn.h) */
};

struct sl_upool_cbs {
    /* A piece of a reply for <o> (see SLOW OWNERS): 0 taken, nonzero refused. */
    int  (*deliver)(struct sl_upool_owner *o, struct sl_buf *b, uint32_t from, uint32_t to,
                    unsigned flags);
    /* <o>'s connection failed: every reply it was owed is lost (<err>: a
     * libuv or sluice code, <why>: one line; borrowed). Called once. */
    void (*failed)(struct sl_upool_owner *o, int err, const char *why);
    /* A pin that waited (sl_upool_pin said SL_EAGAIN) is granted: <c> is
     * <o>'s now. */
    void (*pinned)(struct sl_upool_owner *o, struct sl_upool_conn *c);
};

/* A pool on <loop>; NULL when out of memory. */
struct sl_upool *sl_upool_new(uv_loop_t *loop, const struct sl_upool_conf *conf,
                              const struct sl_upool_cbs *cbs);

/* Closes every connection (owners in flight fail with SL_ECLOSED, waiting
 * pins too) and frees the pool once the handles are closed (run the loop). */
void sl_upool_close(struct sl_upool *p);

/* Applies <conf> to the running pool <p> (see RELOAD): per_key 0 keeps
 * the current one (the caller stopped making new owners, e.g. a listener
 * switched to 1:1, and the pool serves the ones it has as it was); own_flush
 * cannot change (kept). */
void sl_upool_reconfigure(struct sl_upool *p, const struct sl_upool_conf *conf);

/* 1 when no owner holds a key of <p> or waits for a pin (the caller may
 * close it: only connections nobody uses are left). */
int sl_upool_unused(const struct sl_upool *p);

/* The key named <id> (<idlen> bytes), made with setup commands <setup>
 * (<setuplen> bytes of RESP, <nsetup> replies owed) when it is new; the
 * caller holds a reference (sl_upool_key_put). NULL when out of memory. */
struct sl_upool_key *sl_upool_key_get(struct sl_upool *p, const void *id, size_t idlen,
                                      const char *setup, size_t setuplen, uint32_t nsetup);
void sl_upool_key_put(struct sl_upool_key *k);

void sl_upool_owner_init(struct sl_upool_owner *o, void *data);

/* <o> sends <len> bytes at <p> (whole requests, copied) owing <replies>
 * replies, on a shared connection of <k> (or its pinned one: <k> and
 * <replies> are then not used). Leaves at the next flush. 0, or an error
 * (SL_ENOMEM, a libuv error when no connection can be started).
 * <replies> 0 on a shared connection: the bytes must be requests Redis
 * neither answers nor acts on (empty ones: *0, *-1, a blank line); they
 * ride the connection <o> has replies owed on, or are dropped when it has
 * none. Either way <o> is attached to no connection it owes nothing on. */
int sl_upool_submit(struct sl_upool_key *k, struct sl_upool_owner *o, const char *p, size_t len,
                    uint32_t replies);

/* Flags of sl_upool_submit_flags. */
#define SL_UPOOL_SLOW 1u /* the bytes hold a request that may run long while the
                            upstream answers other connections (a script: -BUSY past
                            busy-reply-threshold): until their replies are in, no
                            other owner's request joins their shared connection while
                            another one (or a new one, under per_key) can take it */

/* A shared connection whose batch in flight is not fully answered this long
 * after it was written is stalled (a write held by CLIENT PAUSE, a slow
 * command): until its answers come, no other owner's request joins it
 * while another connection (or a new one, under per_key) can take it, as
 * for SL_UPOOL_SLOW. What was queued behind it before is not moved. */
#define SL_UPOOL_STALL_MS 100

/* sl_upool_submit with <flags> (SL_UPOOL_*; ignored on a pinned connection). */
int sl_upool_submit_flags(struct sl_upool_key *k, struct sl_upool_owner *o, const char *p,
                          size_t len, uint32_t replies, unsigned flags);

/* <o> goes away (or gives up): its replies are read and dropped; a waiting
 * pin is withdrawn; its pinned connection is closed. No callback follows. */
void sl_upool_forget(struct sl_upool_owner *o);

/* A connection of <o>'s own, for key <k>: returned at once (maybe still
 * connecting: submissions wait). NULL with *<err>: UV_EBUSY while <o> has
 * pooled replies in flight (pin once they are in), SL_ELIMIT at the cap
 * (<wait> 0 or the wait queue full), SL_EAGAIN queued (cbs.pinned() later;
 * sl_upool_forget withdraws), or another error. */
struct sl_upool_conn *sl_upool_pin(struct sl_upool_key *k, struct sl_upool_owner *o, int wait,
                                   int *err);

/* What a clean unpin is told about the replies still to come. */
#define SL_UPOOL_OWED_SCAN UINT32_MAX /* unknown (a RESP2 subscriber): drop replies until
                                         a top-level +RESET (only safe when none of them can
                                         be one: no script, no other command) */

/* Gives <c> back. <clean>: RESET and the key's setup are sent, the <owed>
 * replies the owner had not seen end (a reply in progress counts) and
 * pushes are dropped, the RESET's reply must then be +RESET, the setup's
 * must be OK (else <c> closes: never a doubtful connection back in the
 * pool); then <c> rejoins the pool, or closes when the key already has
 * per_key shared ones. Not clean, or <c> not ready yet (its own setup not
 * over): <c> is closed. Either way the owner hears nothing more about <c>
 * and a waiting pin may be granted. */
void sl_upool_unpin(struct sl_upool_conn *c, int clean, uint32_t owed);

/* Writes what every connection has waiting: one write each. */
void sl_upool_flush_all(struct sl_upool *p);

void sl_upool_stats(const struct sl_upool *p, struct sl_upool_stats *st);
void sl_upool_key_stats(const struct sl_upool_key *k, struct sl_upool_key_stats *st);

#endif

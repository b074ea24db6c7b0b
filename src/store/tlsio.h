/* sluice — TLS on one TCP connection of the quota store: the pumping a store
 * node (store/node.c) and a sentinel link (store/sentinel.c) share.
 *
 *   owner's plaintext ──> sl_tlsio_flush() ──> engine ──> wbuf ──> uv_try_write,
 *   (an sl_obuf, consumed                                         the rest with one
 *    as the engine takes it)                                      uv_write (<req>)
 *
 *   socket read ──> sl_tlsio_read() ──> engine ──> <cb>(plaintext) ... then
 *                                                  sl_tlsio_flush() (handshake
 *                                                  flights, tickets, alerts)
 *
 * One ciphertext write is in flight at most (<writing>); its callback is the
 * owner's, which clears <writing> and <wbuf> (sl_tlsio_written()) and calls
 * sl_tlsio_flush() again. What waits is bounded by the engine
 * (SL_TLS_OUT_MAX) plus the owner's plaintext buffer, which the owner caps. */
#ifndef SL_STORE_TLSIO_H
#define SL_STORE_TLSIO_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "core/tls.h"
#include "store/wire.h"

struct sl_tlsio {
    struct sl_tls *tls;      /* the engine of the connection; NULL: none (plaintext) */
    uv_stream_t   *stream;   /* the connection's socket (borrowed) */
    uv_write_cb    on_write; /* the owner's callback of <req>; <req>.data is the owner's */
    uv_write_t     req;      /* the write in flight, at most one */
    struct sl_obuf wbuf;     /* what <req> is writing (owned) */
    uint8_t        writing;  /* <req> in flight */
    uint8_t        opened;   /* a read finished the handshake; the owner clears it */
};

/* A plaintext piece read from the connection: <len> bytes at <p>, borrowed
 * for the call. Returns 0 to go on, nonzero when the connection was ended
 * or closed meanwhile (the engine may be gone: nothing more is read). */
typedef int sl_tlsio_plain_cb(void *arg, const char *p, size_t len);

/* Makes the engine of a new connection on <stream> from <ctx> (which gains
 * a reference), for the server named <name> (SNI unless it is an address,
 * and the name the certificate must carry; see sl_tls_new()), and starts
 * the handshake: the ClientHello waits in the engine for the next
 * sl_tlsio_flush(). <on_write> completes <io>'s writes. Returns SL_OK or
 * SL_ENOMEM. An engine left from an earlier connection is freed first. */
int sl_tlsio_start(struct sl_tlsio *io, uv_stream_t *stream, struct sl_tls_ctx *ctx,
                   const char *name, uv_write_cb on_write);

/* The connection ends: the engine goes (a write in flight uses <wbuf>, not
 * the engine). <wbuf> stays for the next connection. */
void sl_tlsio_stop(struct sl_tlsio *io);

/* Frees everything <io> holds (the handle's owner is being freed). */
void sl_tlsio_free(struct sl_tlsio *io);

/* <req> completed: nothing is in flight any more. */
void sl_tlsio_written(struct sl_tlsio *io);

/* Encrypts what the engine takes of <plain> (removed from it) and writes
 * the ciphertext the engine holds: one uv_try_write, the rest with <req>;
 * with a write in flight, nothing (its callback flushes again). Returns 0,
 * or -1 with <why> (<cap> bytes) saying why the connection must end. */
int sl_tlsio_flush(struct sl_tlsio *io, struct sl_obuf *plain, char *why, size_t cap);

/* Ciphertext read from the socket (<len> bytes at <p>): fed to the engine
 * as it has room, the plaintext handed to <cb>(<arg>, ...), then whatever
 * the engine has to say written (sl_tlsio_flush() of <plain>). Sets
 * <opened> when the handshake completes here. Returns 0; 1 when <cb> said
 * the connection is gone; SL_ECLOSED after the peer's close_notify; or
 * SL_EPROTO / -1 with <why> ("TLS handshake failed: ...", "TLS: ...", a
 * write error): the connection must end. Before SL_EPROTO the engine's
 * alert was written (best effort), so the peer's log says why too. */
int sl_tlsio_read(struct sl_tlsio *io, const char *p, size_t len, struct sl_obuf *plain,
                  sl_tlsio_plain_cb *cb, void *arg, char *why, size_t cap);

/* Closing: encrypts <plain> and writes what the kernel takes now, no more
 * (the store's goodbye heartbeat). <plain> is emptied. */
void sl_tlsio_write_now(struct sl_tlsio *io, struct sl_obuf *plain);

#endif

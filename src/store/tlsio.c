/* sluice — TLS on one TCP connection of the quota store (store/tlsio.h):
 * the engine (core/tls.h) driven over a libuv stream, for a store node and
 * for a sentinel link alike. The owner keeps its socket, its states and
 * its reader; this only turns its plaintext into writes and its reads into
 * plaintext. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "store/tlsio.h"

#define PLAIN_CHUNK (16 * 1024) /* one sl_tls_read(): a TLS record */

int sl_tlsio_start(struct sl_tlsio *io, uv_stream_t *stream, struct sl_tls_ctx *ctx,
                   const char *name, uv_write_cb on_write)
{
    sl_tls_free(io->tls);
    io->stream = stream;
    io->on_write = on_write;
    io->opened = 0;
    if ((io->tls = sl_tls_new(ctx, name)) == NULL)
        return SL_ENOMEM;
    (void)sl_tls_handshake(io->tls); /* the ClientHello, sent by the next flush */
    return SL_OK;
}

void sl_tlsio_stop(struct sl_tlsio *io)
{
    sl_tls_free(io->tls);
    io->tls = NULL;
}

void sl_tlsio_free(struct sl_tlsio *io)
{
    sl_tlsio_stop(io);
    free(io->wbuf.p);
    io->wbuf.p = NULL;
    io->wbuf.len = io->wbuf.cap = 0;
}

void sl_tlsio_written(struct sl_tlsio *io)
{
    io->writing = 0;
    io->wbuf.len = 0;
}

int sl_tlsio_flush(struct sl_tlsio *io, struct sl_obuf *plain, char *why, size_t cap)
{
    while (!io->writing && io->tls != NULL) {
        if (plain->len > 0) {
            ssize_t w = sl_tls_write(io->tls, plain->p, plain->len);
            if (w < 0) {
                snprintf(why, cap, "TLS: %s", sl_tls_error(io->tls));
                return -1;
            }
            if (w > 0) {
                memmove(plain->p, plain->p + w, plain->len - (size_t)w);
                plain->len -= (size_t)w;
            }
        }
        size_t pend;
        const char *ct = sl_tls_out_peek(io->tls, &pend);
        if (ct == NULL)
            return 0;
        /* Straight from the engine; only what the socket leaves is copied. */
        uv_buf_t b = uv_buf_init((char *)ct, (unsigned)pend);
        int n = uv_try_write(io->stream, &b, 1);
        if (n == (int)pend) {
            sl_tls_out_drop(io->tls, pend);
            continue; /* more plaintext may be waiting for room */
        }
        if (n < 0 && n != UV_EAGAIN) {
            snprintf(why, cap, "%s", uv_strerror(n));
            return -1;
        }
        if (n < 0)
            n = 0;
        io->wbuf.len = 0;
        if (sl_wire_reserve(&io->wbuf, pend - (size_t)n) < 0) {
            snprintf(why, cap, "out of memory");
            return -1;
        }
        memcpy(io->wbuf.p, ct + n, pend - (size_t)n);
        io->wbuf.len = pend - (size_t)n;
        sl_tls_out_drop(io->tls, pend);
        b = uv_buf_init(io->wbuf.p, (unsigned)io->wbuf.len);
        int rc = uv_write(&io->req, io->stream, &b, 1, io->on_write);
        if (rc < 0) {
            snprintf(why, cap, "%s", uv_strerror(rc));
            return -1;
        }
        io->writing = 1;
    }
    return 0;
}

/* A TLS failure: the alert goes out first (best effort) so the peer's log
 * says why too. */
static int tls_failed(struct sl_tlsio *io, int in_handshake, char *why, size_t cap)
{
    char alert[512];
    size_t n = sl_tls_take(io->tls, alert, sizeof(alert));
    if (n > 0) {
        uv_buf_t b = uv_buf_init(alert, (unsigned)n);
        (void)uv_try_write(io->stream, &b, 1);
    }
    snprintf(why, cap, "%s: %s", in_handshake ? "TLS handshake failed" : "TLS",
             sl_tls_error(io->tls));
    return SL_EPROTO;
}

int sl_tlsio_read(struct sl_tlsio *io, const char *p, size_t len, struct sl_obuf *plain,
                  sl_tlsio_plain_cb *cb, void *arg, char *why, size_t cap)
{
    char buf[PLAIN_CHUNK];
    size_t off = 0;
    do {
        off += sl_tls_feed(io->tls, p + off, len - off);
        int in_handshake = sl_tls_state(io->tls) == SL_TLS_HANDSHAKE;
        for (;;) {
            ssize_t r = sl_tls_read(io->tls, buf, sizeof(buf));
            if (r == SL_EAGAIN)
                break;
            if (r == SL_ECLOSED)
                return SL_ECLOSED;
            if (r < 0)
                return tls_failed(io, in_handshake, why, cap);
            if (cb(arg, buf, (size_t)r) != 0)
                return 1; /* ended or closed: the engine may be gone */
        }
        if (in_handshake && sl_tls_state(io->tls) == SL_TLS_OPEN)
            io->opened = 1;
        if (sl_tlsio_flush(io, plain, why, cap) < 0)
            return -1;
    } while (off < len);
    return 0;
}

void sl_tlsio_write_now(struct sl_tlsio *io, struct sl_obuf *plain)
{
    char ct[16 * 1024];
    if (io->tls != NULL && sl_tls_write(io->tls, plain->p, plain->len) > 0) {
        size_t n = sl_tls_take(io->tls, ct, sizeof(ct));
        uv_buf_t c = uv_buf_init(ct, (unsigned)n);
        (void)uv_try_write(io->stream, &c, 1);
    }
    plain->len = 0;
}

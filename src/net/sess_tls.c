/* sluice — TLS under the session's transport seam (session.c's side_*):
 * the socket's ciphertext through a core/tls engine into the session's
 * chunks, plaintext out through the engine to the socket, handshakes, and
 * the sessions whose engines may hold plaintext when reading resumes.
 * Private to src/net/ (session-i.h). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/log.h"
#include "core/tls.h"
#include "net/listener-t.h"
#include "net/session.h"
#include "net/session-i.h"
#include "net/turn.h"


static void on_client_tls(uv_stream_t *st, ssize_t nread, const uv_buf_t *ub);
static void on_upstream_tls(uv_stream_t *st, ssize_t nread, const uv_buf_t *ub);

/* ---- TLS under the seam ----------------------------------------------------
 *
 *   socket --read--> scratch --sl_tls_feed--> engine --sl_tls_read--> cin/uin chunk
 *                                                    (metered room, pause bits)
 *   plaintext --sl_tls_write--> engine --sl_tls_out_peek--> socket (try_write,
 *                                                   else a queued copy)
 *
 * Ciphertext is held only inside the engine (SL_TLS_IN_MAX / OUT_MAX) and in
 * the socket's write queue, which the watermarks bound as for plain TCP. */

#define TLS_SCRATCH (SL_TLS_IN_MAX)
static char tls_scratch[TLS_SCRATCH]; /* one read at a time: the loop is one thread */

/* Writes out what the engine of side <up> has for the socket. */
int sl_sess_tls_flush(struct sl_session *s, int up)
{
    struct sl_tls *t = s->tls[up];
    uv_stream_t *dst = sl_sess_side_stream(s, up);
    size_t n;
    const void *p = sl_tls_out_peek(t, &n);
    if (p == NULL)
        return 0;
    /* Straight from the engine's buffer: what the socket does not take now
     * is copied into a queued write. */
    int rc = sl_sess_plain_send(s, dst, NULL, p, n);
    sl_tls_out_drop(t, n);
    return rc < 0 ? rc : 0;
}

int sl_sess_tls_send(struct sl_session *s, int up, const char *p, size_t len)
{
    struct sl_tls *t = s->tls[up];
    while (len > 0) {
        ssize_t n = sl_tls_write(t, p, len);
        if (n < 0)
            return UV_EPROTO;
        int rc = sl_sess_tls_flush(s, up);
        if (rc < 0)
            return rc;
        if (n == 0 && sl_tls_out_pending(t) == 0)
            return UV_EAGAIN; /* handshake not done: nothing is sent before it */
        p += n;
        len -= (size_t)n;
    }
    return 0;
}



/* TLS: the socket is read into the scratch and fed to the engine at once. */
static void alloc_tls(uv_handle_t *h, size_t hint, uv_buf_t *ub)
{
    (void)hint;
    struct sl_session *s = h->data;
    int up = h != (uv_handle_t *)&s->client;
    size_t room = sl_tls_feed_room(s->tls[up]);
    *ub = uv_buf_init(tls_scratch, (unsigned)(room < TLS_SCRATCH ? room : TLS_SCRATCH));
}


/* Side <up> reads its socket while its handshake runs, or while the
 * session wants its bytes and the engine has room for them. */
void sl_sess_tls_sync_read(struct sl_session *s, int up)
{
    if (s->state >= SL_SESS_LINGER)
        return; /* the close path drives the socket */
    uint8_t pause = up ? s->up_pause : s->cl_pause;
    uv_stream_t *st = sl_sess_side_stream(s, up);
    if (!s->tls_eof[up] && (s->tls_hs[up] || pause == 0) && sl_tls_feed_room(s->tls[up]) > 0)
        uv_read_start(st, alloc_tls, up ? on_upstream_tls : on_client_tls);
    else
        uv_read_stop(st);
}

/* Moves what the engine of side <up> holds on: the handshake's next step,
 * then plaintext into the side's chunk for as long as the session reads it. */
void sl_sess_tls_pump(struct sl_session *s, int up)
{
    struct sl_tls *t = s->tls[up];
    if (s->tls_hs[up]) {
        int rc = sl_tls_handshake(t);
        if (sl_sess_tls_flush(s, up) < 0 && rc == SL_OK)
            rc = SL_EPROTO;
        if (rc == SL_EAGAIN && !s->tls_eof[up]) {
            sl_sess_tls_sync_read(s, up);
            return;
        }
        s->tls_hs[up] = 0;
        sl_sess_tls_done(s, up, rc == SL_OK);
        if (rc != SL_OK || s->state >= SL_SESS_CLOSED)
            return;
    }
    for (;;) {
        uint8_t pause = up ? s->up_pause : s->cl_pause;
        if (pause != 0 || s->state >= SL_SESS_LINGER)
            break;
        struct sl_buf **slot = up ? &s->uin : &s->cin;
        struct sl_buf *b = sl_sess_rx_chunk(slot);
        if (b == NULL) {
            sl_session_close(s);
            return;
        }
        unsigned room = sl_sess_room_of(s->meter[up], SL_BUF_SIZE - b->end);
        ssize_t n = sl_tls_read(t, b->data + b->end, room);
        if (sl_sess_tls_flush(s, up) < 0) {
            sl_session_close(s);
            return;
        }
        if (n > 0) {
            sl_sess_got(s, up, n);
            if (s->state >= SL_SESS_CLOSED)
                return;
            continue;
        }
        if (n == SL_EAGAIN && !s->tls_eof[up]) {
            sl_sess_rx_release(slot); /* an idle session holds no chunk */
            break;
        }
        if (n == SL_EPROTO && !s->tls_eof[up])
            sl_log_debug_rl("tls_failed", "TLS failed", "listener=%s side=%s err=\"%s\"", s->l->name,
                            up ? "upstream" : "client", sl_tls_error(t));
        /* The peer's close_notify, or EOF (with or without it: many peers
         * just close), or a TLS failure: the end of this side's data. */
        ssize_t end = n == SL_EPROTO && !s->tls_eof[up] ? UV_EPROTO : UV_EOF;
        s->tls_eof[up] = 1;
        uv_read_stop(sl_sess_side_stream(s, up));
        sl_sess_got(s, up, end);
        return;
    }
    sl_sess_tls_sync_read(s, up);
}

static void tls_on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *ub, int up)
{
    struct sl_session *s = st->data;
    if (nread == 0 || s->state >= SL_SESS_CLOSED)
        return;
    if (nread < 0) {
        if (nread != UV_EOF) {
            if (s->tls_hs[up]) {
                s->tls_hs[up] = 0;
                sl_sess_tls_done(s, up, 0);
                return;
            }
            sl_sess_got(s, up, nread);
            return;
        }
        s->tls_eof[up] = 1;
        sl_tls_feed_eof(s->tls[up]);
        uv_read_stop(st);
    } else {
        sl_tls_feed(s->tls[up], ub->base, (size_t)nread);
    }
    sl_sess_tls_pump(s, up);
}

static void on_client_tls(uv_stream_t *st, ssize_t nread, const uv_buf_t *ub)
{
    tls_on_read(st, nread, ub, 0);
}

static void on_upstream_tls(uv_stream_t *st, ssize_t nread, const uv_buf_t *ub)
{
    tls_on_read(st, nread, ub, 1);
}

static void on_kick(struct sl_turn_node *n)
{
    struct sl_session *s = (struct sl_session *)((char *)n - offsetof(struct sl_session, kick_tn));
    for (int up = 0; up < 2 && s->state < SL_SESS_LINGER; up++)
        if (s->tls[up] != NULL && !s->tls_hs[up] && !s->tls_eof[up])
            sl_sess_tls_pump(s, up);
}

void sl_sess_tls_kick(struct sl_session *s)
{
    /* no list (out of memory): the next read from the socket pumps it */
    (void)sl_turn_later(&s->kick_tn, on_kick);
}

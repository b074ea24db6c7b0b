/*
 * A client connection's PROXY header (proxy_protocol = v1 | v2): taken
 * from a trusted_proxies peer before any protocol byte and before TLS, and
 * its source address made the session's client_ip.
 *
 * The header is read in steps of exactly the bytes it still lacks
 * (net/proxyhdr.h), so the first bytes of the protocol behind it stay in
 * the socket for the protocol's own reader. The read runs in the
 * listener's handshaking queue: header_timeout bounds it (the sweep).
 */
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>

#include "conf/http.h"
#include "core/log.h"
#include "core/resolve.h"
#include "identity/identity.h"
#include "net/listener.h"
#include "net/proxyhdr.h"
#include "net/session.h"
#include "net/session-i.h"
#include "net/turn.h"

void sl_sess_pp_refuse(struct sl_session *s, const char *why)
{
    struct sl_listener *l = s->l;
    char peer[64] = "?";
    struct sockaddr_storage ss;
    int sl = sizeof(ss);
    if (uv_tcp_getpeername(&s->client, (struct sockaddr *)&ss, &sl) == 0)
        sl_resolve_fmt(&ss, peer, sizeof(peer));
    l->stats.proxy_refused++;
    sl_log_warn_rl("proxy_protocol", "client closed: no valid PROXY header",
                   "listener=%s peer=%s err=\"%s\"", l->name, peer, why);
    sl_session_close(s);
}

/* The peer's address as conf/http.h's ranges hold them (IPv4 mapped). */
static int peer_trusted(struct sl_session *s)
{
    const struct sl_listener_conf *lc = s->l->conf;
    struct sockaddr_storage ss;
    int sl = sizeof(ss);
    unsigned char a[16] = { 0 };
    if (uv_tcp_getpeername(&s->client, (struct sockaddr *)&ss, &sl) != 0)
        return 0;
    if (ss.ss_family == AF_INET) {
        a[10] = a[11] = 0xff;
        memcpy(a + 12, &((struct sockaddr_in *)&ss)->sin_addr, 4);
    } else if (ss.ss_family == AF_INET6) {
        memcpy(a, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
    } else {
        return 0;
    }
    for (int i = 0; i < lc->n_trusted_proxies; i++)
        if (sl_conf_cidr_has(&lc->trusted_proxies[i], a))
            return 1;
    return 0;
}

static void pp_alloc(uv_handle_t *h, size_t hint, uv_buf_t *ub)
{
    struct sl_session *s = h->data;
    (void)hint;
    ub->base = (char *)s->pp + s->pp_got;
    ub->len = (size_t)(s->pp_want - s->pp_got);
}

static void on_pp_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *ub)
{
    struct sl_session *s = st->data;
    (void)ub;
    if (nread == 0)
        return;
    if (nread < 0) {
        sl_sess_pp_refuse(s, nread == UV_EOF ? "closed before the header was whole"
                                             : uv_strerror((int)nread));
        return;
    }
    s->pp_got += (uint16_t)nread;
    size_t want = 0;
    struct sockaddr_storage src;
    const char *why = "";
    int rc = sl_pp_parse(s->pp_ver, s->pp, s->pp_got, &want, &src, &why);
    if (rc < 0) {
        sl_sess_pp_refuse(s, why);
        return;
    }
    if (rc == 0) {
        s->pp_want = (uint16_t)want;
        return;
    }
    uv_read_stop(st);
    free(s->pp);
    s->pp = NULL;
    sl_tq_remove(&s->tq);
    if (src.ss_family != AF_UNSPEC) {
        if (s->ident == NULL && (s->ident = malloc(sizeof(*s->ident))) == NULL) {
            sl_session_close(s);
            return;
        }
        sl_identity_init(s->ident, (const struct sockaddr *)&src);
        if (s->l->conf->upstream_proxy_protocol && (s->pp_src = malloc(sizeof(src))) != NULL)
            *s->pp_src = src; /* else the peer's own address goes upstream */
    }
    sl_sess_accepted(s);
}

void sl_sess_pp_start(struct sl_session *s)
{
    if (!peer_trusted(s)) {
        sl_sess_pp_refuse(s, "peer not in trusted_proxies");
        return;
    }
    s->pp_ver = (uint8_t)s->l->conf->proxy_protocol;
    s->pp = malloc(SL_PP_MAX);
    if (s->pp == NULL) {
        sl_session_close(s);
        return;
    }
    s->pp_got = 0;
    s->pp_want = s->pp_ver == 1 ? 15 : 16;
    sl_tq_touch(&s->l->handshaking, &s->tq, sl_turn_now_ms());
    if (uv_read_start((uv_stream_t *)&s->client, pp_alloc, on_pp_read) < 0)
        sl_session_close(s);
}

static void on_pp_written(uv_write_t *req, int status)
{
    (void)status; /* a failed write fails the relay's writes after it too */
    free(req);
}

/* upstream_proxy_protocol: the client's address (the PROXY header's it
 * came with, or its peer's) and the address it reached, as the first
 * bytes on the new upstream connection, before TLS and before anything
 * the client sent. libuv writes a stream's requests in order. */
int sl_sess_pp_upstream(struct sl_session *s)
{
    struct sockaddr_storage src, dst;
    int sl = sizeof(src), dl = sizeof(dst);
    if (s->pp_src != NULL)
        src = *s->pp_src;
    else if (uv_tcp_getpeername(&s->client, (struct sockaddr *)&src, &sl) != 0)
        src.ss_family = AF_UNSPEC;
    if (uv_tcp_getsockname(&s->client, (struct sockaddr *)&dst, &dl) != 0)
        dst.ss_family = AF_UNSPEC;
    struct {
        uv_write_t    req;
        unsigned char bytes[232];
    } *w = malloc(sizeof(*w));
    if (w == NULL)
        goto fail;
    size_t n = sl_pp_write(s->l->conf->upstream_proxy_protocol, &src, &dst, w->bytes,
                           sizeof(w->bytes));
    uv_buf_t b = uv_buf_init((char *)w->bytes, (unsigned)n);
    if (n == 0 || uv_write(&w->req, (uv_stream_t *)s->up_tcp, &b, 1, on_pp_written) < 0)
        goto fail;
    return 0;
fail:
    free(w);
    sl_session_close(s);
    return -1;
}

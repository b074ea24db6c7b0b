/* sluice — idle upstream connections kept for reuse (see upkeep.h). */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "core/tls.h"
#include "core/tq.h"
#include "net/upkeep.h"

/* A watched connection kept this long (ms) or more is checked too when
 * handed out: its close may have come in the batch of events the loop is
 * working through, not yet seen. One kept for less was in use a moment
 * ago; nothing closes an idle HTTP connection that fast but the races no
 * check can close (the close crossing the request: docs/http.md). */
#define RECHECK_MS 1000

static uint64_t timeout_ms(const struct sl_listener *l)
{
    uint64_t ms = l->conf->upstream_keepalive_timeout_us / 1000;
    return ms ? ms : 1;
}

static struct sl_upconn *of_node(struct sl_tq_node *n)
{
    return (struct sl_upconn *)((char *)n - offsetof(struct sl_upconn, node));
}

uv_tcp_t *sl_upconn_new(uv_loop_t *loop)
{
    struct sl_upconn *c = calloc(1, sizeof(*c));
    if (c == NULL || uv_tcp_init(loop, &c->tcp) < 0) {
        free(c);
        return NULL;
    }
    return &c->tcp;
}

void sl_upconn_free(uv_tcp_t *t)
{
    free((struct sl_upconn *)t); /* tcp is the first member */
}

static void on_drop_close(uv_handle_t *h)
{
    sl_upconn_free((uv_tcp_t *)h);
}

/* Closes <c> (and frees <tls>, after a best-effort close_notify). */
static void drop(struct sl_upconn *c, struct sl_tls *tls)
{
    if (tls != NULL) {
        /* Tell a TLS upstream the end is clean; never wait for the socket. */
        uv_os_fd_t fd;
        sl_tls_shutdown(tls);
        size_t len = 0;
        const void *p = sl_tls_out_peek(tls, &len);
        if (p != NULL && len > 0 && uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0)
            (void)send(fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        sl_tls_free(tls);
    }
    c->tcp.data = NULL;
    uv_close((uv_handle_t *)&c->tcp, on_drop_close);
}

static void forget(struct sl_listener *l, struct sl_upconn *c)
{
    sl_tq_remove(&c->node);
    l->stats.upstream_idle--;
}

static void drop_kept(struct sl_listener *l, struct sl_upconn *c)
{
    forget(l, c);
    drop(c, c->tls);
}

void sl_upkeep_put(struct sl_listener *l, uv_tcp_t *t, struct sl_tls *tls, int watched,
                   uint64_t now)
{
    struct sl_upconn *c = (struct sl_upconn *)t;
    uint64_t cap = l->conf->upstream_keepalive;
    if (!watched)
        uv_read_stop((uv_stream_t *)t);
    t->data = NULL;
    if (cap == 0 || l->retired || l->srv->draining) {
        drop(c, tls);
        return;
    }
    /* Past the cap the oldest goes: the newest is the likeliest still open. */
    while (l->kept.n >= cap && l->kept.head != NULL)
        drop_kept(l, of_node(l->kept.head));
    c->l = l;
    c->tls = tls;
    c->watched = (uint8_t)(watched != 0);
    c->node.q = NULL;
    c->node.prev = c->node.next = NULL;
    if (l->kept.n == 0)
        l->srv->due_dirty = 1; /* its timeout may be the earliest deadline */
    sl_tq_touch(&l->kept, &c->node, now);
    l->stats.upstream_idle++;
}

/* The upstream has neither closed <t> nor sent anything on it: an idle
 * HTTP connection owes us nothing, so any byte (or EOF, an error) means it
 * is not one to send a request on. */
static int alive(uv_tcp_t *t)
{
    uv_os_fd_t fd;
    char ch;
    if (uv_fileno((uv_handle_t *)t, &fd) != 0)
        return 0;
    ssize_t n = recv(fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

uv_tcp_t *sl_upkeep_take(struct sl_listener *l, uint64_t now, struct sl_tls **tls, int *watched)
{
    uint64_t t = timeout_ms(l);
    struct sl_tq_node *n;
    while ((n = l->kept.tail) != NULL) {
        struct sl_upconn *c = of_node(n);
        if (now >= n->at + t ||
            ((!c->watched || now >= n->at + RECHECK_MS) && !alive(&c->tcp))) {
            drop_kept(l, c);
            continue;
        }
        forget(l, c);
        *tls = c->tls;
        *watched = c->watched;
        c->tls = NULL;
        c->l = NULL;
        return &c->tcp;
    }
    return NULL;
}

void sl_upkeep_lost(uv_tcp_t *t)
{
    struct sl_upconn *c = (struct sl_upconn *)t;
    if (c->l != NULL)
        drop_kept(c->l, c);
}

void sl_upkeep_sweep(struct sl_listener *l, uint64_t now)
{
    struct sl_tq_node *n;
    if (l->kept.n > 0 && (l->retired || l->srv->draining || l->conf->upstream_keepalive == 0)) {
        sl_upkeep_clear(l);
        return;
    }
    while ((n = sl_tq_expired(&l->kept, now, timeout_ms(l))) != NULL)
        drop_kept(l, of_node(n));
    while (l->kept.n > l->conf->upstream_keepalive) /* a reload lowered the cap */
        drop_kept(l, of_node(l->kept.head));
}

uint64_t sl_upkeep_due(const struct sl_listener *l)
{
    return sl_tq_due(&l->kept, timeout_ms(l));
}

void sl_upkeep_clear(struct sl_listener *l)
{
    while (l->kept.head != NULL)
        drop_kept(l, of_node(l->kept.head));
}

/* sluice — idle upstream connections kept for reuse (see upkeep.h). */
#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/tls.h"
#include "core/tq.h"
#include "net/upkeep.h"

/* One kept socket: its node in l->kept (oldest first) stamps when it went idle. */
struct kept {
    struct sl_tq_node node; /* first: the node is the entry */
    int               fd;
    struct sl_tls    *tls;
};

static uint64_t timeout_ms(const struct sl_listener *l)
{
    uint64_t ms = l->conf->upstream_keepalive_timeout_us / 1000;
    return ms ? ms : 1;
}

void sl_upkeep_drop(int fd, struct sl_tls *tls)
{
    if (tls != NULL) {
        /* Tell a TLS upstream the end is clean; never wait for the socket. */
        sl_tls_shutdown(tls);
        size_t len = 0;
        const void *p = sl_tls_out_peek(tls, &len);
        if (p != NULL && len > 0)
            (void)send(fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        sl_tls_free(tls);
    }
    close(fd);
}

static void forget(struct sl_listener *l, struct kept *k)
{
    sl_tq_remove(&k->node);
    l->stats.upstream_idle--;
}

static void drop_kept(struct sl_listener *l, struct kept *k)
{
    forget(l, k);
    sl_upkeep_drop(k->fd, k->tls);
    free(k);
}

void sl_upkeep_put(struct sl_listener *l, int fd, struct sl_tls *tls, uint64_t now)
{
    uint64_t cap = l->conf->upstream_keepalive;
    struct kept *k = NULL;
    if (cap == 0 || l->retired || l->srv->draining || (k = malloc(sizeof(*k))) == NULL) {
        sl_upkeep_drop(fd, tls);
        return;
    }
    /* Past the cap the oldest goes: the newest is the likeliest still open. */
    while (l->kept.n >= cap && l->kept.head != NULL)
        drop_kept(l, (struct kept *)l->kept.head);
    k->fd = fd;
    k->tls = tls;
    k->node.q = NULL;
    k->node.prev = k->node.next = NULL;
    if (l->kept.n == 0)
        l->srv->due_dirty = 1; /* its timeout may be the earliest deadline */
    sl_tq_touch(&l->kept, &k->node, now);
    l->stats.upstream_idle++;
}

/* The upstream has neither closed <fd> nor sent anything on it: an idle
 * HTTP connection owes us nothing, so any byte (or EOF, an error) means it
 * is not one to send a request on. */
static int alive(int fd)
{
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

int sl_upkeep_take(struct sl_listener *l, uint64_t now, struct sl_tls **tls)
{
    uint64_t t = timeout_ms(l);
    struct kept *k;
    while ((k = (struct kept *)l->kept.tail) != NULL) {
        if (now >= k->node.at + t || !alive(k->fd)) {
            drop_kept(l, k);
            continue;
        }
        forget(l, k);
        int fd = k->fd;
        *tls = k->tls;
        free(k);
        return fd;
    }
    return -1;
}

void sl_upkeep_sweep(struct sl_listener *l, uint64_t now)
{
    struct sl_tq_node *n;
    if (l->kept.n > 0 && (l->retired || l->srv->draining || l->conf->upstream_keepalive == 0)) {
        sl_upkeep_clear(l);
        return;
    }
    while ((n = sl_tq_expired(&l->kept, now, timeout_ms(l))) != NULL)
        drop_kept(l, (struct kept *)n);
    while (l->kept.n > l->conf->upstream_keepalive) /* a reload lowered the cap */
        drop_kept(l, (struct kept *)l->kept.head);
}

uint64_t sl_upkeep_due(const struct sl_listener *l)
{
    return sl_tq_due(&l->kept, timeout_ms(l));
}

void sl_upkeep_clear(struct sl_listener *l)
{
    while (l->kept.head != NULL)
        drop_kept(l, (struct kept *)l->kept.head);
}

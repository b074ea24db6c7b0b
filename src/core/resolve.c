/* sluice — a host name looked up again at run time, off the loop (see
 * core/resolve.h).
 *
 *   owner: stale? --yes--> sl_resolve_start --uv_getaddrinfo--> thread pool
 *     |                                                             |
 *     +-- connects with r->ss (last good) meanwhile   on_lookup <---+
 *                                                     sl_resolve_apply: new
 *                                                     address, or keep the old
 *                                                     one and say "failing" once
 *
 * A lookup lives in its own struct sl_resolve_req so that its owner can go
 * (sl_resolve_stop) while getaddrinfo still runs in a worker thread: the
 * request then finishes alone and frees itself. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/resolve.h"

/* One lookup in flight. */
struct sl_resolve_req {
    uv_getaddrinfo_t   req;       /* libuv's; first, so the callback finds the struct */
    struct sl_resolve *r;         /* owner, or NULL once it stopped */
    char               name[80];  /* what is looked up: the owner's name may change meanwhile */
};

sl_resolve_lookup_fn *sl_resolve_lookup = uv_getaddrinfo;

int sl_resolve_same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return 0;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
        return x->sin6_port == y->sin6_port &&
               memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
    }
    return 0;
}

int sl_resolve_pick(const struct addrinfo *ai, uint16_t port, struct sockaddr_storage *out)
{
    const struct addrinfo *v6 = NULL;
    for (; ai != NULL; ai = ai->ai_next) {
        if (ai->ai_family == AF_INET && ai->ai_addrlen >= sizeof(struct sockaddr_in)) {
            memset(out, 0, sizeof(*out));
            memcpy(out, ai->ai_addr, sizeof(struct sockaddr_in));
            ((struct sockaddr_in *)out)->sin_port = htons(port);
            return 0;
        }
        if (ai->ai_family == AF_INET6 && v6 == NULL &&
            ai->ai_addrlen >= sizeof(struct sockaddr_in6))
            v6 = ai;
    }
    if (v6 == NULL)
        return -1;
    memset(out, 0, sizeof(*out));
    memcpy(out, v6->ai_addr, sizeof(struct sockaddr_in6));
    ((struct sockaddr_in6 *)out)->sin6_port = htons(port);
    return 0;
}

const char *sl_resolve_fmt(const struct sockaddr_storage *ss, char *buf, size_t cap)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *s4 = (const void *)ss;
        inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof(ip));
        snprintf(buf, cap, "%s:%u", ip, (unsigned)ntohs(s4->sin_port));
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const void *)ss;
        inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof(ip));
        snprintf(buf, cap, "[%s]:%u", ip, (unsigned)ntohs(s6->sin6_port));
    } else {
        snprintf(buf, cap, "none");
    }
    return buf;
}

void sl_resolve_set(struct sl_resolve *r, const char *host, uint16_t port,
                    const struct sockaddr_storage *ss, uint64_t now_ms)
{
    snprintf(r->name, sizeof(r->name), "%s", host != NULL ? host : "");
    r->port = port;
    r->ss = *ss;
    r->at_ms = now_ms;
    r->failing = 0;
}

int sl_resolve_stale(const struct sl_resolve *r, uint64_t now_ms, uint64_t ttl_us)
{
    if (r->name[0] == '\0' || r->req != NULL)
        return 0;
    if (ttl_us == 0 || now_ms < r->at_ms)
        return ttl_us == 0;
    return (now_ms - r->at_ms) * 1000 >= ttl_us;
}

enum sl_resolve_event sl_resolve_apply(struct sl_resolve *r, int status,
                                       const struct sockaddr_storage *ss, uint64_t now_ms)
{
    r->at_ms = now_ms; /* a failure waits out the ttl too: no lookup storm */
    if (status != 0) {
        r->failures++;
        if (r->failing)
            return SL_RESOLVE_STILL;
        r->failing = 1;
        return SL_RESOLVE_FAILING;
    }
    int was_failing = r->failing, same = sl_resolve_same_addr(&r->ss, ss);
    r->failing = 0;
    r->ss = *ss;
    if (was_failing)
        return SL_RESOLVE_RECOVERED;
    return same ? SL_RESOLVE_SAME : SL_RESOLVE_CHANGED;
}

static void on_lookup(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    struct sl_resolve_req *q = (struct sl_resolve_req *)req;
    struct sl_resolve *r = q->r;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    if (status == 0 && (r == NULL || sl_resolve_pick(res, r->port, &ss) != 0))
        status = UV_EAI_NODATA; /* no address of a family we connect to */
    if (res != NULL)
        uv_freeaddrinfo(res);
    if (r == NULL) {
        free(q); /* the owner went away meanwhile */
        return;
    }
    r->req = NULL;
    enum sl_resolve_event ev = strcmp(q->name, r->name) != 0
                                   ? SL_RESOLVE_STALE
                                   : sl_resolve_apply(r, status, &ss, uv_now(req->loop));
    free(q);
    if (r->cb != NULL)
        r->cb(r, ev, status);
}

int sl_resolve_start(struct sl_resolve *r, uv_loop_t *loop)
{
    if (r->name[0] == '\0' || r->req != NULL)
        return 0;
    struct sl_resolve_req *q = calloc(1, sizeof(*q));
    if (q == NULL)
        return UV_ENOMEM;
    q->r = r;
    memcpy(q->name, r->name, sizeof(q->name));
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    int rc = sl_resolve_lookup(loop, &q->req, on_lookup, q->name, NULL, &hints);
    if (rc < 0) {
        free(q);
        return rc;
    }
    r->req = q;
    return 0;
}

void sl_resolve_stop(struct sl_resolve *r)
{
    if (r->req == NULL)
        return;
    r->req->r = NULL;
    /* Not yet started: on_lookup runs with UV_EAI_CANCELED and frees it. */
    (void)uv_cancel((uv_req_t *)&r->req->req);
    r->req = NULL;
}

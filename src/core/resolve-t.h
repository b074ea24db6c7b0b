/* sluice — types of a host name looked up again at run time. */
#ifndef SL_CORE_RESOLVE_T_H
#define SL_CORE_RESOLVE_T_H

#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

struct sl_resolve;
struct sl_resolve_req;

/* What a finished lookup meant for the address in use. */
enum sl_resolve_event {
    SL_RESOLVE_SAME,       /* answered; the address did not change */
    SL_RESOLVE_CHANGED,    /* answered with another address: in use from now on */
    SL_RESOLVE_FAILING,    /* failed after answering before: the last good address stays */
    SL_RESOLVE_STILL,      /* failed again: nothing new to say (not logged again) */
    SL_RESOLVE_RECOVERED,  /* answered after failing */
    SL_RESOLVE_STALE,      /* the answer was for a name no longer configured: dropped */
};

/* Called when a lookup of <r> finished (<event>; <err> the EAI_* or libuv
 * code of a failure, else 0). Waiters go on from here. */
typedef void sl_resolve_cb(struct sl_resolve *r, enum sl_resolve_event event, int err);

/* How a lookup is made: uv_getaddrinfo by default; a test puts its own
 * (same contract as uv_getaddrinfo, asynchronous). */
typedef int sl_resolve_lookup_fn(uv_loop_t *loop, uv_getaddrinfo_t *req, uv_getaddrinfo_cb cb,
                                 const char *node, const char *service,
                                 const struct addrinfo *hints);

/* One host name and its last good address. */
struct sl_resolve {
    char                    name[80]; /* the host name; "" for a numeric address (never looked up) */
    uint16_t                port;     /* host order */
    struct sockaddr_storage ss;       /* last good address: what connects use */
    uint64_t                at_ms;    /* loop time of the last answer or failure */
    uint8_t                 failing;  /* the last lookup failed */
    uint64_t                failures; /* lookups that failed, ever */
    struct sl_resolve_req  *req;      /* lookup in flight, or NULL */
    sl_resolve_cb          *cb;       /* owner's callback, or NULL */
    void                   *data;     /* owner's, for <cb> */
};

#endif

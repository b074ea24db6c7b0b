/* sluice — the fleet's baseline through the quota store (net/adapt_share.h,
 * docs/adaptive.md "The fleet's baseline"). */
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "core/resolve.h"
#include "net/adapt_share.h"
#include "net/listener-t.h"
#include "net/turn.h"
#include "shape/adapt.h"
#include "store/store.h"

#define SEC_NS 1000000000ull

/* How often a listener publishes: every second (a baseline moves at probe
 * boundaries, and the others learn a new low within a second of it), or
 * every probe period when that is shorter. Entries live three periods: a
 * publisher that stopped (gone, its store link down, its traffic over) no
 * longer holds the fleet's value after that. */
static uint64_t share_every(const struct sl_actl *c)
{
    return c->a.p.probe_ns < SEC_NS ? c->a.p.probe_ns : SEC_NS;
}

static uint64_t share_ttl_ms(const struct sl_actl *c)
{
    uint64_t ms = 3 * c->a.p.probe_ns / 1000000;
    return ms > 0 ? ms : 1;
}

/* 1 for 127.0.0.0/8 and ::1: another host's such address is another service. */
static int is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
    if (ss->ss_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)ss)->sin6_addr);
    return 0;
}

size_t sl_actl_share_key(const struct sl_actl *c, char *buf, size_t cap)
{
    const struct sl_listener *l = c->l;
    char addr[80], host[72] = "";
    if (l->up.ss.ss_family != AF_INET && l->up.ss.ss_family != AF_INET6)
        return 0;
    sl_resolve_fmt(&l->up.ss, addr, sizeof(addr));
    if (is_loopback(&l->up.ss)) {
        /* Each host's own upstream. A host name with braces would move
         * the key's hash tag: such a name is left out (rare, and then
         * hosts share their loopback upstreams' entry, as without it). */
        if (gethostname(host, sizeof(host) - 2) != 0 || strpbrk(host, "{}") != NULL)
            host[0] = '\0';
        host[sizeof(host) - 2] = '\0';
        if (host[0] != '\0')
            strcat(host, "/");
    }
    int n = snprintf(buf, cap, "%sadaptive:{%s%s}", l->srv->conf->store.key_prefix, host, addr);
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* The store's answer: {least baseline ns, ms until its entry expires, live
 * entries}. A failure keeps the last answer, which expires by itself. */
static void on_shared(void *data, int status, const int64_t *vals, int n, const char *err)
{
    struct sl_actl *c = data;
    c->share_req = NULL;
    if (status != 0 || n != 3 || vals[0] < 0 || vals[1] < 0 || vals[2] < 0) {
        c->share_errors++;
        if (status == 0)
            sl_log_warn_rl("adaptive_share_reply", "adaptive concurrency: unexpected baseline reply",
                           "listener=%s values=%d err=\"%s\"", c->l->name, n, err ? err : "");
        return;
    }
    c->shares++;
    uint64_t now = sl_turn_now_us() * 1000;
    /* never held longer than an entry lives, whatever the answer says */
    uint64_t ms = (uint64_t)vals[1] < share_ttl_ms(c) ? (uint64_t)vals[1] : share_ttl_ms(c);
    c->fleet_live = (uint64_t)vals[2];
    sl_adapt_fleet(&c->a, (double)vals[0], now + ms * 1000000ull);
}

void sl_actl_share(struct sl_actl *c, uint64_t now)
{
    struct sl_store *st = c->l->srv->store;
    if (c->mode == 0 || c->l->conf->adaptive_share != 0 || st == NULL) {
        if (c->a.fleet_ns > 0 || c->share_req != NULL)
            sl_actl_share_stop(c);
        return;
    }
    if (c->share_req != NULL || (c->share_at_ns != 0 && now - c->share_at_ns < share_every(c)))
        return;
    c->share_at_ns = now ? now : 1;
    char key[256], member[256], base[24], ttl[24];
    size_t klen = sl_actl_share_key(c, key, sizeof(key));
    if (klen == 0)
        return; /* no address yet: nothing to name the upstream by */
    int mlen = snprintf(member, sizeof(member), "%s/%s", sl_store_instance_id(st), c->l->name);
    if (mlen <= 0 || (size_t)mlen >= sizeof(member))
        return;
    /* 0: nothing to publish yet (no baseline, or a guess), only read */
    double own = sl_adapt_own_baseline(&c->a);
    int blen = snprintf(base, sizeof(base), "%" PRIu64, own >= 1 ? (uint64_t)own : 0);
    int tlen = snprintf(ttl, sizeof(ttl), "%" PRIu64, share_ttl_ms(c));
    struct sl_str keys[1] = { { key, klen } };
    struct sl_str args[3] = { { member, (size_t)mlen }, { base, (size_t)blen }, { ttl, (size_t)tlen } };
    /* NULL: the store is down (or out of memory); the last answer expires
     * by itself and the controller goes back to its own baseline */
    c->share_req = sl_store_eval(st, SL_SCRIPT_BASELINE, 1, keys, 3, args, on_shared, c);
    if (c->share_req == NULL)
        c->share_errors++;
}

void sl_actl_share_stop(struct sl_actl *c)
{
    if (c->share_req != NULL) {
        sl_store_cancel(c->share_req);
        c->share_req = NULL;
    }
    c->fleet_live = 0;
    sl_adapt_fleet(&c->a, 0, 0);
}

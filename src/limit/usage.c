/* sluice — the usage table: counts per identity and window until they are
 * delivered (limit/usage.h). A chained hash on (identity, window start),
 * grown by doubling; entries leave once delivered and empty. */
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "limit/usage.h"

const char *const sl_usage_field_names[SL_USAGE_FIELDS] = {
    "requests", "rejected", "delayed", "bytes_in", "bytes_out", "connection_seconds",
};

struct sl_usage {
    struct sl_usage_entry **b;   /* buckets */
    size_t   nb;                 /* a power of two */
    size_t   n;                  /* entries */
    size_t   max;
    uint64_t window_s;
    uint64_t seq;                /* the last delivery number given */
    uint64_t delivered, failed;
    uint64_t dropped[SL_USAGE_FIELDS];
    size_t   cursor;             /* sl_usage_take_some(): the bucket it goes on from */
    struct sl_usage_entry *last; /* the entry found last: the same identity comes in runs
                                    (a connection's requests, its reads), so it is
                                    compared first, before any hashing */
    uint64_t warned_us;          /* when drops were last logged (the caller's clock) */
    uint64_t unwarned;           /* drops since then */
};

#define MIN_BUCKETS 64

struct sl_usage *sl_usage_new(uint64_t window_s, size_t max_entries)
{
    struct sl_usage *u = calloc(1, sizeof(*u));
    if (u == NULL || (u->b = calloc(MIN_BUCKETS, sizeof(*u->b))) == NULL) {
        free(u);
        return NULL;
    }
    u->nb = MIN_BUCKETS;
    sl_usage_set(u, window_s, max_entries);
    return u;
}

void sl_usage_set(struct sl_usage *u, uint64_t window_s, size_t max_entries)
{
    u->window_s = window_s > 0 ? window_s : 1;
    u->max = max_entries > 0 ? max_entries : 1;
}

void sl_usage_free(struct sl_usage *u)
{
    if (u == NULL)
        return;
    for (size_t i = 0; i < u->nb; i++) {
        struct sl_usage_entry *e = u->b[i];
        while (e != NULL) {
            struct sl_usage_entry *next = e->next;
            free(e);
            e = next;
        }
    }
    free(u->b);
    free(u);
}

uint64_t sl_usage_window_of(const struct sl_usage *u, uint64_t now_us)
{
    uint64_t s = now_us / 1000000u;
    return s - s % u->window_s;
}

static uint32_t hash_of(const char *id, size_t len, uint64_t window)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)id[i]) * 1099511628211ULL;
    for (int i = 0; i < 8; i++)
        h = (h ^ ((window >> (8 * i)) & 0xff)) * 1099511628211ULL;
    return (uint32_t)(h ^ (h >> 32));
}

/* Doubles the buckets when entries outnumber them; keeps the old ones
 * when out of memory (longer chains, still right). */
static void grow(struct sl_usage *u)
{
    if (u->n < u->nb)
        return;
    size_t nb = u->nb * 2;
    struct sl_usage_entry **b = calloc(nb, sizeof(*b));
    if (b == NULL)
        return;
    for (size_t i = 0; i < u->nb; i++) {
        struct sl_usage_entry *e = u->b[i];
        while (e != NULL) {
            struct sl_usage_entry *next = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
            e = next;
        }
    }
    free(u->b);
    u->b = b;
    u->nb = nb;
    u->cursor = 0; /* a walk in progress starts over (busy entries are not handed twice) */
}

/* Counts <n> of field <f> dropped; a warning at most once a second of
 * <now_us> with the drops since the last one. */
static void dropped(struct sl_usage *u, enum sl_usage_field f, uint64_t n, uint64_t now_us)
{
    u->dropped[f] += n;
    u->unwarned++;
    /* (a wall clock stepped back by more than a second logs at once) */
    if (u->warned_us != 0 && now_us < u->warned_us + 1000000u && now_us + 1000000u > u->warned_us)
        return;
    sl_log_warn("usage: counts dropped, the table is full (max_pending)",
                "entries=%zu drops=%" PRIu64 " requests_dropped_total=%" PRIu64, u->n, u->unwarned,
                u->dropped[SL_USAGE_REQUESTS]);
    u->warned_us = now_us;
    u->unwarned = 0;
}

/* The entry of (<id>, <window>), made if need be; NULL when full. */
static struct sl_usage_entry *entry_of(struct sl_usage *u, const char *id, uint64_t window)
{
    if (u->last != NULL && u->last->window == window && strcmp(u->last->id, id) == 0)
        return u->last;
    size_t len = strlen(id);
    uint32_t h = hash_of(id, len, window);
    for (struct sl_usage_entry *e = u->b[h & (u->nb - 1)]; e != NULL; e = e->next)
        if (e->hash == h && e->window == window && strcmp(e->id, id) == 0)
            return u->last = e;
    if (u->n >= u->max)
        return NULL;
    struct sl_usage_entry *e = calloc(1, sizeof(*e) + len + 1);
    if (e == NULL)
        return NULL;
    memcpy(e->id, id, len + 1);
    e->window = window;
    e->hash = h;
    e->next = u->b[h & (u->nb - 1)];
    u->b[h & (u->nb - 1)] = e;
    u->n++;
    grow(u);
    return u->last = e;
}

/* Adds <n> to field <f> of <id> in the window of <at_us>; drops are
 * logged on the clock of <now_us>. */
static int add_at(struct sl_usage *u, const char *id, enum sl_usage_field f, uint64_t n,
                  uint64_t at_us, uint64_t now_us)
{
    if (n == 0)
        return 0;
    struct sl_usage_entry *e = entry_of(u, id, sl_usage_window_of(u, at_us));
    if (e == NULL) {
        dropped(u, f, n, now_us);
        return -1;
    }
    e->live[f] += n;
    return 0;
}

int sl_usage_add(struct sl_usage *u, const char *id, enum sl_usage_field f, uint64_t n,
                 uint64_t now_us)
{
    return add_at(u, id, f, n, now_us, now_us);
}

int sl_usage_add_span(struct sl_usage *u, const char *id, uint64_t from_us, uint64_t to_us)
{
    int rc = 0;
    uint64_t w_us = u->window_s * 1000000u;
    /* one piece per window: from up to the next window start or <to> */
    while (from_us < to_us) {
        uint64_t end = (from_us / w_us + 1) * w_us;
        if (end > to_us)
            end = to_us;
        if (add_at(u, id, SL_USAGE_CONN_US, end - from_us, from_us, to_us) < 0)
            rc = -1;
        from_us = end;
    }
    return rc;
}

static int empty(const uint64_t *v)
{
    for (int f = 0; f < SL_USAGE_FIELDS; f++)
        if (v[f] != 0)
            return 0;
    return 1;
}

static void unlink_entry(struct sl_usage *u, struct sl_usage_entry *e)
{
    struct sl_usage_entry **p = &u->b[e->hash & (u->nb - 1)];
    while (*p != e)
        p = &(*p)->next;
    *p = e->next;
    u->n--;
    if (u->last == e)
        u->last = NULL;
    free(e);
}

/* Makes <e>'s delivery ready: a failed one again as it was, else its
 * counts since the last take under a new number. 0 when it has nothing to
 * deliver or is out already. */
static int ready(struct sl_usage *u, struct sl_usage_entry *e)
{
    if (e->busy)
        return 0;
    if (e->seq == 0) {
        if (empty(e->live))
            return 0;
        memcpy(e->out, e->live, sizeof(e->out));
        memset(e->live, 0, sizeof(e->live));
        e->seq = ++u->seq;
    }
    e->busy = 1;
    return 1;
}

size_t sl_usage_take_some(struct sl_usage *u, sl_usage_deliver *fn, void *data, size_t max,
                          int *more)
{
    size_t handed = 0, i = u->cursor;
    /* Whole chains: a deliverer done at once frees only its own entry, so
     * the next one, read before the call, stays valid. */
    for (; i < u->nb && handed < max; i++) {
        struct sl_usage_entry *e = u->b[i];
        while (e != NULL) {
            struct sl_usage_entry *next = e->next;
            if (ready(u, e)) {
                handed++;
                fn(data, e);
            }
            e = next;
        }
    }
    *more = i < u->nb;
    u->cursor = *more ? i : 0;
    return handed;
}

size_t sl_usage_take(struct sl_usage *u, sl_usage_deliver *fn, void *data)
{
    int more = 0;
    u->cursor = 0;
    return sl_usage_take_some(u, fn, data, SIZE_MAX, &more);
}

void sl_usage_done(struct sl_usage *u, struct sl_usage_entry *e, int ok)
{
    e->busy = 0;
    if (!ok) {
        u->failed++;
        return;
    }
    u->delivered++;
    memset(e->out, 0, sizeof(e->out));
    e->seq = 0;
    if (empty(e->live))
        unlink_entry(u, e);
}

void sl_usage_drain(struct sl_usage *u, uint64_t lost[SL_USAGE_FIELDS])
{
    memset(lost, 0, SL_USAGE_FIELDS * sizeof(lost[0]));
    for (size_t i = 0; i < u->nb; i++) {
        struct sl_usage_entry *e = u->b[i];
        while (e != NULL) {
            struct sl_usage_entry *next = e->next;
            for (int f = 0; f < SL_USAGE_FIELDS; f++)
                lost[f] += e->live[f] + (e->seq != 0 ? e->out[f] : 0);
            free(e);
            e = next;
        }
        u->b[i] = NULL;
    }
    u->n = 0;
    u->last = NULL;
}

void sl_usage_stats(const struct sl_usage *u, struct sl_usage_stats *out)
{
    memset(out, 0, sizeof(*out));
    out->entries = u->n;
    for (size_t i = 0; i < u->nb; i++)
        for (const struct sl_usage_entry *e = u->b[i]; e != NULL; e = e->next)
            out->waiting += e->seq != 0 && !e->busy;
    out->delivered = u->delivered;
    out->failed = u->failed;
    memcpy(out->dropped, u->dropped, sizeof(out->dropped));
}

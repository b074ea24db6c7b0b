/* sluice — the reply router of a pooled upstream connection (upool_route.h).
 *
 * For every piece sl_reply_scan returns, the head entry decides: an owner
 * gets it at once (partial replies included), setup and RESET replies are
 * captured (their first SL_UPOOL_CAPTURE bytes: enough to see an error or
 * +RESET) and checked when they end, skipped replies are dropped. An entry
 * leaves the FIFO when its last reply ends. The head is looked up again
 * after every callback: a callback may push, forget or pop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf-t.h"
#include "core/err.h"
#include "net/upool_route.h"
#include "proto/resp_reply.h"

void sl_upool_route_init(struct sl_upool_route *rt)
{
    memset(rt, 0, sizeof(*rt));
    sl_reply_init(&rt->scan);
}

void sl_upool_route_free(struct sl_upool_route *rt)
{
    free(rt->e);
    sl_reply_release(&rt->scan);
    memset(rt, 0, sizeof(*rt));
}

struct sl_upool_ent *sl_upool_route_at(struct sl_upool_route *rt, uint32_t i)
{
    return i < rt->n ? &rt->e[(rt->head + i) & (rt->cap - 1)] : NULL;
}

int sl_upool_route_idle(const struct sl_upool_route *rt)
{
    return sl_reply_idle(&rt->scan);
}

int sl_upool_route_push(struct sl_upool_route *rt, struct sl_upool_owner *o, uint32_t owed, int kind)
{
    if (kind == SL_UPE_RAW)
        owed = 1;
    if (owed == 0)
        return 0;
    struct sl_upool_ent *last = rt->n ? sl_upool_route_at(rt, rt->n - 1) : NULL;
    /* Only an entry not at the head merges: the head's count may be
     * mid-reply, and merging there is right too, but keeping the head
     * apart makes the accounting easier to follow. */
    if (last != NULL && rt->n > 1 && last->kind == kind && last->owner == o &&
        (kind == SL_UPE_OWNER || kind == SL_UPE_SETUP || kind == SL_UPE_SKIP ||
         kind == SL_UPE_DROP) &&
        last->owed <= UINT32_MAX - owed) {
        last->owed += owed;
        goto counted;
    }
    if (rt->n == rt->cap) {
        uint32_t cap = rt->cap ? rt->cap * 2 : 8;
        struct sl_upool_ent *ne = malloc(cap * sizeof(*ne));
        if (ne == NULL)
            return SL_ENOMEM;
        for (uint32_t i = 0; i < rt->n; i++)
            ne[i] = *sl_upool_route_at(rt, i);
        free(rt->e);
        rt->e = ne;
        rt->head = 0;
        rt->cap = cap;
    }
    struct sl_upool_ent *e = &rt->e[(rt->head + rt->n) & (rt->cap - 1)];
    e->owner = o;
    e->owed = owed;
    e->kind = (uint8_t)kind;
    rt->n++;
counted:
    if (kind == SL_UPE_OWNER)
        rt->owed += owed;
    return 0;
}

void sl_upool_route_pop(struct sl_upool_route *rt)
{
    if (rt->n == 0)
        return;
    struct sl_upool_ent *e = sl_upool_route_at(rt, 0);
    if (e->kind == SL_UPE_OWNER)
        rt->owed -= e->owed;
    rt->head = (rt->head + 1) & (rt->cap - 1);
    rt->n--;
}

void sl_upool_route_forget(struct sl_upool_route *rt, const struct sl_upool_owner *o)
{
    for (uint32_t i = 0; i < rt->n; i++) {
        struct sl_upool_ent *e = sl_upool_route_at(rt, i);
        if (e->owner == o)
            e->owner = NULL;
    }
}

/* The first bytes of the reply in progress, for the checks at its end. */
static void capture(struct sl_upool_route *rt, const char *p, size_t len)
{
    size_t room = SL_UPOOL_CAPTURE - rt->caplen;
    size_t n = len < room ? len : room;
    memcpy(rt->capture + rt->caplen, p, n);
    rt->caplen += (uint32_t)n;
}

/* The captured reply's first line, printable, for an error message. */
static void first_line(const struct sl_upool_route *rt, char *out, size_t cap)
{
    size_t n = 0;
    for (uint32_t i = 0; i < rt->caplen && rt->capture[i] != '\r' && n + 1 < cap; i++) {
        char c = rt->capture[i];
        out[n++] = c >= 0x20 && c < 0x7f && c != '"' ? c : '?';
    }
    out[n] = '\0';
}

static int is_reset(const struct sl_upool_route *rt)
{
    return rt->caplen == 8 && memcmp(rt->capture, "+RESET\r\n", 8) == 0;
}

int sl_upool_route_feed(struct sl_upool_route *rt, struct sl_buf *b, uint32_t from, uint32_t to,
                        const struct sl_upool_route_ops *ops, void *ctx, char *why, size_t cap)
{
    char line[SL_UPOOL_CAPTURE + 1];
    uint32_t off = from;

    while (off < to) {
        struct sl_upool_ent *e = sl_upool_route_at(rt, 0);
        if (e == NULL) {
            snprintf(why, cap, "a reply came that no request asked for");
            return SL_EPROTO;
        }
        if (sl_reply_idle(&rt->scan)) {
            /* a reply starts: a capture made now holds its first bytes */
            rt->caplen = 0;
            rt->capok = 1;
        }
        unsigned f = 0;
        long k = sl_reply_scan(&rt->scan, b->data + off, to - off, &f);
        if (k < 0) {
            snprintf(why, cap, "the upstream sent bytes that are not RESP");
            return SL_EPROTO;
        }
        uint32_t end = off + (uint32_t)k;
        int done = (f & SL_REPLY_DONE) != 0;
        /* '>' is a push's first byte: the scanner knows it before the end */
        int push = (f & SL_REPLY_PUSH) || (!done && rt->scan.top_push);
        int kind = e->kind;

        if (push && (kind == SL_UPE_OWNER || kind == SL_UPE_SETUP)) {
            snprintf(why, cap, "a RESP3 push on a shared connection");
            return SL_EPROTO;
        }
        if (kind == SL_UPE_OWNER || kind == SL_UPE_RAW) {
            rt->capok = 0;
            if (e->owner != NULL &&
                ops->deliver(ctx, e->owner, b, off, end,
                             (done ? SL_UPOOL_DONE : 0u) | (push ? SL_UPOOL_PUSH : 0u)) != 0)
                return 1;
        } else if (kind == SL_UPE_SKIP || kind == SL_UPE_DROP) {
            rt->capok = 0;
        } else {
            capture(rt, b->data + off, (size_t)k);
        }
        off = end;
        if (!done || kind == SL_UPE_RAW)
            continue; /* RAW: the pinned owner's until unpin pops it */
        if (push && kind != SL_UPE_OWNER)
            continue; /* a push answers no request: SKIP and RESET do not count it */
        if (kind == SL_UPE_SETUP && rt->capok && rt->caplen > 0 &&
            (rt->capture[0] == '-' || rt->capture[0] == '!')) {
            first_line(rt, line, sizeof(line));
            snprintf(why, cap, "a setup command was refused: %s", line);
            return SL_EPROTO;
        }
        if (kind == SL_UPE_RESET && !(rt->capok && is_reset(rt))) {
            first_line(rt, line, sizeof(line));
            snprintf(why, cap, "RESET was answered \"%s\"", rt->capok ? line : "(cut)");
            return SL_EPROTO;
        }
        if (kind == SL_UPE_RESET_SCAN && !(rt->capok && is_reset(rt)))
            continue; /* dropped: not the RESET's reply yet */
        /* The head is still the entry of the reply that ended: callbacks may
         * push and forget, never pop (pinned RAW entries returned above). */
        e = sl_upool_route_at(rt, 0);
        struct sl_upool_owner *o = e->owner;
        e->owed--;
        if (kind == SL_UPE_OWNER)
            rt->owed--;
        if (e->owed == 0) {
            sl_upool_route_pop(rt);
            if (kind == SL_UPE_OWNER && ops->reply_end)
                ops->reply_end(ctx, o);
            if (ops->entry_done && ops->entry_done(ctx, kind) != 0)
                return 1;
            continue;
        }
        if (kind == SL_UPE_OWNER && ops->reply_end)
            ops->reply_end(ctx, o);
    }
    return 0;
}

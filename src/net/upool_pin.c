/* sluice — pooled upstream connections: pinning a connection to one owner,
 * the wait for a pinned place, and giving a connection back clean (see
 * upool.h, PINNING). */
#include <string.h>

#include "core/err.h"
#include "net/upool-i.h"

/* <c> (out of every list) becomes <o>'s. */
static int pin_to(struct sl_upool_conn *c, struct sl_upool_owner *o)
{
    struct sl_upool *p = c->pool;
    if (o->prelude_len > 0) {
        /* the owner's own state first, its replies dropped (before RAW) */
        size_t was = c->out.len;
        if (sl_wire_append(&c->out, o->prelude, o->prelude_len) < 0)
            return SL_ENOMEM;
        if (o->prelude_n > 0 && sl_upool_route_push(&c->rt, NULL, o->prelude_n, SL_UPE_DROP) < 0) {
            c->out.len = was;
            return SL_ENOMEM;
        }
    }
    if (sl_upool_route_push(&c->rt, o, 1, SL_UPE_RAW) < 0)
        return SL_ENOMEM;
    c->pin = o;
    o->conn = c;
    o->pinned = 1;
    o->inflight = 0;
    sl_upool_list_add(&p->pinned, c);
    p->npinned++;
    c->key->npinned++;
    p->st.pinned++;
    return 0;
}

static struct sl_upool_conn *pin_now(struct sl_upool_key *k, struct sl_upool_owner *o, int *err)
{
    struct sl_upool *p = k->pool;
    struct sl_upool_conn *c;
    for (c = k->conns; c != NULL; c = c->next)
        if (c->rt.owed == 0 && c->state != C_CLOSING)
            break;
    if (c != NULL) {
        sl_upool_list_del(&k->conns, c);
        k->nconns--;
        p->st.pooled--;
    } else if ((c = sl_upool_conn_new(k, err)) == NULL) {
        return NULL;
    }
    if ((*err = pin_to(c, o)) < 0) {
        sl_upool_conn_fail(c, *err, "out of memory");
        return NULL;
    }
    return c;
}

struct sl_upool_conn *sl_upool_pin(struct sl_upool_key *k, struct sl_upool_owner *o, int wait,
                                   int *err)
{
    struct sl_upool *p = k->pool;
    if (p->closing) {
        *err = SL_ECLOSED;
        return NULL;
    }
    if (o->pinned || o->waiting || o->inflight > 0) {
        *err = UV_EBUSY;
        return NULL;
    }
    if (p->npinned >= p->conf.max_pinned || p->nwait > 0) {
        if (!wait || p->nwait >= p->conf.pin_wait_max) {
            p->st.pin_refused++;
            *err = SL_ELIMIT;
            return NULL;
        }
        o->waiting = 1;
        o->wkey = k;
        o->wnext = NULL;
        if (p->wait_tail)
            p->wait_tail->wnext = o;
        else
            p->wait_head = o;
        p->wait_tail = o;
        p->nwait++;
        p->st.pin_waiting++;
        k->refs++; /* the key outlives the wait */
        *err = SL_EAGAIN;
        return NULL;
    }
    return pin_now(k, o, err);
}

static void wait_del(struct sl_upool *p, struct sl_upool_owner *o)
{
    struct sl_upool_owner **pp = &p->wait_head, *prev = NULL;
    while (*pp != NULL && *pp != o) {
        prev = *pp;
        pp = &(*pp)->wnext;
    }
    if (*pp == NULL)
        return;
    *pp = o->wnext;
    if (p->wait_tail == o)
        p->wait_tail = prev;
    o->wnext = NULL;
    o->waiting = 0;
    p->nwait--;
    p->st.pin_waiting--;
}

/* A pinned place freed: the waiters at the head get theirs. */
void sl_upool_serve_waiters(struct sl_upool *p)
{
    while (p->wait_head != NULL && p->npinned < p->conf.max_pinned && !p->closing) {
        struct sl_upool_owner *o = p->wait_head;
        struct sl_upool_key *k = o->wkey;
        wait_del(p, o);
        o->wkey = NULL;
        int err = 0;
        struct sl_upool_conn *c = pin_now(k, o, &err);
        sl_upool_key_put(k);
        if (c == NULL) {
            p->st.owners_failed++;
            p->cbs.failed(o, err, "no upstream connection for a pin");
        } else {
            p->cbs.pinned(o, c);
        }
    }
}

void sl_upool_unpin(struct sl_upool_conn *c, int clean, uint32_t owed)
{
    struct sl_upool *p = c->pool;
    struct sl_upool_owner *o = c->pin;
    if (o == NULL || c->state == C_CLOSING)
        return;
    /* Not ready yet: the owner's bytes still wait behind the setup, and
     * letting them go now could run them on a connection whose setup then
     * fails; nothing of it is worth keeping. */
    if (!clean || p->closing || c->state != C_READY || c->stale) {
        /* the owner hears nothing more (conn_fail tells only owners still
         * attached): it gave the connection up */
        sl_upool_route_forget(&c->rt, o);
        o->conn = NULL;
        o->pinned = 0;
        sl_upool_conn_fail(c, SL_ECLOSED, "unpinned");
        return;
    }
    /* The owner hears no more; the connection is in no list while it is
     * made clean (it counts as pinned for its key until it rejoins). */
    o->conn = NULL;
    o->pinned = 0;
    c->pin = NULL;
    sl_upool_route_forget(&c->rt, o); /* no entry may name it once it hears no more */
    sl_upool_list_del(&p->pinned, c);
    p->npinned--;
    p->st.pinned--;
    sl_upool_list_add(&p->cleaning, c);
    c->cleaning = 1;
    /* The RAW entry is the last one (a pinned owner's submissions push
     * none), at the head or behind a fresh connection's setup: it goes, and
     * what the owner still had coming is skipped by count or by scan. */
    struct sl_upool_key *k = c->key;
    struct sl_upool_ent *raw = c->rt.n ? sl_upool_route_at(&c->rt, c->rt.n - 1) : NULL;
    int rc = 0;
    if (raw != NULL && raw->kind == SL_UPE_RAW)
        c->rt.n--;
    if (owed != SL_UPOOL_OWED_SCAN && owed > 0)
        rc |= sl_upool_route_push(&c->rt, NULL, owed, SL_UPE_SKIP);
    rc |= sl_upool_route_push(&c->rt, NULL, 1,
                              owed == SL_UPOOL_OWED_SCAN ? SL_UPE_RESET_SCAN : SL_UPE_RESET);
    if (k->nsetup > 0)
        rc |= sl_upool_route_push(&c->rt, NULL, k->nsetup, SL_UPE_SETUP);
    static const char reset[] = "*1\r\n$5\r\nRESET\r\n";
    rc |= sl_wire_append(&c->out, reset, sizeof(reset) - 1);
    if (k->nsetup > 0)
        rc |= sl_wire_append(&c->out, k->setup, k->setuplen);
    if (rc != 0) {
        sl_upool_conn_fail(c, SL_ENOMEM, "out of memory");
        return;
    }
    c->state = C_SETUP;
    uv_timer_start(&c->timer, sl_upool_on_timer,
                   p->conf.connect_timeout_ms ? p->conf.connect_timeout_ms : 1, 0);
    c->go = c->out.len; /* the owner's last bytes, RESET and the setup; nothing after */
    sl_upool_mark_dirty(c);
    sl_upool_serve_waiters(p);
}

void sl_upool_forget(struct sl_upool_owner *o)
{
    if (o->waiting) {
        struct sl_upool *p = o->wkey->pool;
        struct sl_upool_key *k = o->wkey;
        wait_del(p, o);
        o->wkey = NULL;
        sl_upool_key_put(k);
    }
    struct sl_upool_conn *c = o->conn;
    if (c == NULL)
        return;
    if (o->pinned) {
        sl_upool_unpin(c, 0, 0);
        return;
    }
    sl_upool_route_forget(&c->rt, o);
    o->conn = NULL;
    o->inflight = 0;
}

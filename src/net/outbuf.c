/* sluice — one side's output buffer (outbuf.h). */
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "core/buf.h"
#include "core/pool.h"
#include "net/outbuf.h"

/* Copy areas are lent while bytes wait: a buffer holds one only between an
 * append and its flush, so a few serve every session. */
static struct sl_pool area_pool = SL_POOL_INIT(SL_OUTBUF_AREA, 16);

static void on_turn_end(struct sl_turn_node *n)
{
    struct sl_outbuf *ob = (struct sl_outbuf *)((char *)n - offsetof(struct sl_outbuf, tn));
    (void)sl_outbuf_flush(ob); /* an error is the write function's to act on */
}

void sl_outbuf_init(struct sl_outbuf *ob, sl_outbuf_write_fn write, void *owner)
{
    memset(ob, 0, sizeof(*ob));
    ob->write = write;
    ob->owner = owner;
}

static void area_give(struct sl_outbuf *ob)
{
    if (ob->area == NULL)
        return;
    if (ob->area_cap == SL_OUTBUF_AREA)
        sl_pool_give(&area_pool, ob->area);
    else
        free(ob->area); /* one piece bigger than an area */
    ob->area = NULL;
    ob->area_len = ob->area_cap = 0;
}

void sl_outbuf_reset(struct sl_outbuf *ob)
{
    for (uint32_t i = 0; i < ob->nseg; i++)
        if (ob->seg[i].b != NULL)
            sl_buf_unref(ob->seg[i].b);
    ob->nseg = 0;
    ob->bytes = 0;
    area_give(ob);
    sl_turn_forget(&ob->tn);
}

int sl_outbuf_flush(struct sl_outbuf *ob)
{
    if (ob->nseg == 0) {
        sl_turn_forget(&ob->tn);
        area_give(ob);
        return 0;
    }
    struct sl_outbuf_iov iov[SL_OUTBUF_SEGS];
    for (uint32_t i = 0; i < ob->nseg; i++) {
        const struct sl_outbuf_seg *g = &ob->seg[i];
        iov[i].p = (g->b != NULL ? g->b->data : ob->area) + g->off;
        iov[i].len = g->len;
        iov[i].b = g->b;
    }
    /* Emptied before the call: the write function may append again (a
     * close it triggers, a watermark it crosses). */
    struct sl_outbuf_seg seg[SL_OUTBUF_SEGS];
    uint32_t nseg = ob->nseg;
    size_t total = ob->bytes;
    memcpy(seg, ob->seg, nseg * sizeof(seg[0]));
    char *area = ob->area;
    uint32_t area_cap = ob->area_cap;
    ob->nseg = 0;
    ob->bytes = 0;
    ob->area = NULL;
    ob->area_len = ob->area_cap = 0;
    sl_turn_forget(&ob->tn);
    int rc = ob->write(ob, iov, nseg, total);
    for (uint32_t i = 0; i < nseg; i++)
        if (seg[i].b != NULL)
            sl_buf_unref(seg[i].b);
    if (area != NULL) {
        if (area_cap == SL_OUTBUF_AREA)
            sl_pool_give(&area_pool, area);
        else
            free(area);
    }
    ob->err = rc;
    return rc;
}

/* Makes room for one more piece of <len> bytes: flushes when the pieces or
 * the bytes are full. 0 or the flush's error. */
static int make_room(struct sl_outbuf *ob, size_t len)
{
    if (ob->nseg < SL_OUTBUF_SEGS && ob->bytes + len <= SL_OUTBUF_MAX)
        return 0;
    return sl_outbuf_flush(ob);
}

static void held(struct sl_outbuf *ob, size_t len)
{
    ob->bytes += (uint32_t)len;
    ob->total += len;
    if (!sl_turn_pending(&ob->tn) && sl_turn_later(&ob->tn, on_turn_end) < 0)
        (void)sl_outbuf_flush(ob); /* no list: at once */
}

char *sl_outbuf_room(struct sl_outbuf *ob, size_t n)
{
    if (n > UINT32_MAX / 2)
        return NULL;
    if (ob->area != NULL && ob->area_len + n > ob->area_cap) {
        if (sl_outbuf_flush(ob) < 0) /* the area is full: what it holds goes now */
            return NULL;
    }
    if (ob->nseg > 0 && ob->seg[ob->nseg - 1].b != NULL && make_room(ob, n) < 0)
        return NULL; /* a new piece, and no room for one */
    if (ob->area == NULL) {
        ob->area_cap = n <= SL_OUTBUF_AREA ? SL_OUTBUF_AREA : (uint32_t)n;
        /* one piece bigger than an area gets its own */
        ob->area = n <= SL_OUTBUF_AREA ? sl_pool_take(&area_pool) : malloc(n);
        if (ob->area == NULL) {
            ob->area_cap = 0;
            return NULL;
        }
        ob->area_len = 0;
    }
    return ob->area + ob->area_len;
}

void sl_outbuf_commit(struct sl_outbuf *ob, size_t n)
{
    if (n == 0)
        return;
    struct sl_outbuf_seg *last = ob->nseg > 0 ? &ob->seg[ob->nseg - 1] : NULL;
    if (last != NULL && last->b == NULL && last->off + last->len == ob->area_len) {
        last->len += (uint32_t)n; /* after the copied bytes before it: one piece */
    } else {
        struct sl_outbuf_seg *g = &ob->seg[ob->nseg++];
        g->b = NULL;
        g->off = ob->area_len;
        g->len = (uint32_t)n;
    }
    ob->area_len += (uint32_t)n;
    held(ob, n);
}

int sl_outbuf_copy(struct sl_outbuf *ob, const char *p, size_t len)
{
    if (len == 0)
        return 0;
    char *d = sl_outbuf_room(ob, len);
    if (d == NULL)
        return ob->err < 0 ? ob->err : UV_ENOMEM;
    memcpy(d, p, len);
    sl_outbuf_commit(ob, len);
    return 0;
}

int sl_outbuf_ref(struct sl_outbuf *ob, struct sl_buf *b, uint32_t from, uint32_t to)
{
    if (to <= from)
        return 0;
    size_t len = to - from;
    struct sl_outbuf_seg *last = ob->nseg > 0 ? &ob->seg[ob->nseg - 1] : NULL;
    if (last != NULL && last->b == b && last->off + last->len == from &&
        ob->bytes + len <= SL_OUTBUF_MAX) {
        last->len += (uint32_t)len; /* the next bytes of the same chunk: one piece */
        held(ob, len);
        return 0;
    }
    int rc = make_room(ob, len);
    if (rc < 0)
        return rc;
    struct sl_outbuf_seg *g = &ob->seg[ob->nseg++];
    g->b = b;
    g->off = from;
    g->len = (uint32_t)len;
    sl_buf_ref(b);
    held(ob, len);
    return 0;
}

void sl_outbuf_pool_drain(void)
{
    sl_pool_drain(&area_pool);
}

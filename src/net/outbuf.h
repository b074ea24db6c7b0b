/* sluice — one side's output buffer: what a turn writes to one socket,
 * gathered into one write.
 *
 * Bytes appended for a side go out together: when the owner flushes (the
 * session core does after each read it handled), at the end of the loop
 * turn (the buffer registers itself on its first append, net/turn.h), or
 * at once when the buffer is full. Bytes that live in a pooled chunk are
 * referenced, not copied (the chunk gets a reference until the flush);
 * other bytes (local replies, rewritten heads) are copied into a pooled
 * area. A flush hands every piece, in order, to the owner's write function
 * in one call (one writev).
 *
 * The buffer belongs to a side (a socket), not to a pair of sockets: many
 * writers may append to one side in a turn and it still costs one write. */
#ifndef SL_NET_OUTBUF_H
#define SL_NET_OUTBUF_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf-t.h"
#include "net/turn.h"

#define SL_OUTBUF_SEGS 8             /* pieces in one write; a ninth flushes first */
#define SL_OUTBUF_AREA (16 * 1024)   /* copied bytes held before a write */
#define SL_OUTBUF_MAX  (256 * 1024)  /* bytes (copied or referenced) held before a write */

/* One piece of the next write. */
struct sl_outbuf_iov {
    const char    *p;
    size_t         len;
    struct sl_buf *b;   /* the chunk holding them (the write function takes a
                           reference to keep them), or NULL: valid only during
                           the call (copy what is not written at once) */
};

struct sl_outbuf;
/* Writes <n> pieces (<total> bytes) in order: 0 or a libuv error. */
typedef int (*sl_outbuf_write_fn)(struct sl_outbuf *ob, const struct sl_outbuf_iov *iov,
                                  unsigned n, size_t total);

struct sl_outbuf_seg {
    struct sl_buf *b;     /* referenced chunk, or NULL: bytes in the area */
    uint32_t       off;   /* offset in b->data, or in the area */
    uint32_t       len;
};

struct sl_outbuf {
    struct sl_outbuf_seg seg[SL_OUTBUF_SEGS];
    uint32_t             nseg;
    uint32_t             bytes;      /* held in all */
    char                *area;       /* copied bytes (pooled; NULL when none) */
    uint32_t             area_len;
    uint32_t             area_cap;
    struct sl_turn_node  tn;         /* registered while bytes are held */
    sl_outbuf_write_fn   write;
    void                *owner;      /* for the write function */
    int                  err;        /* the last flush's error (0: none) */
    uint64_t             total;      /* bytes ever appended (the access log's byte counts) */
};

/* An empty buffer writing through <write> (<owner>: the caller's). */
void sl_outbuf_init(struct sl_outbuf *ob, sl_outbuf_write_fn write, void *owner);

/* Appends <len> bytes at <p>, copied. 0, or an error (out of memory, or
 * the write a full buffer needed failed). */
int sl_outbuf_copy(struct sl_outbuf *ob, const char *p, size_t len);

/* Appends chunk <b>'s bytes [from, to), referenced. 0 or an error. */
int sl_outbuf_ref(struct sl_outbuf *ob, struct sl_buf *b, uint32_t from, uint32_t to);

/* Room for <n> bytes to be copied in place: where to put them (then
 * sl_outbuf_commit with how many were put), or NULL (out of memory, or a
 * write failed). */
char *sl_outbuf_room(struct sl_outbuf *ob, size_t n);
void  sl_outbuf_commit(struct sl_outbuf *ob, size_t n);

/* Writes what is held, in one call of the write function: 0 or its error. */
int sl_outbuf_flush(struct sl_outbuf *ob);

static inline size_t sl_outbuf_held(const struct sl_outbuf *ob)
{
    return ob->bytes;
}

/* Drops what is held, unwritten (the socket is gone). */
void sl_outbuf_reset(struct sl_outbuf *ob);

/* Frees the pooled areas (at exit). */
void sl_outbuf_pool_drain(void);

#endif

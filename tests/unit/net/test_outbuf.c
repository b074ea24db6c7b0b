/* One side's output buffer (src/net/outbuf.c), without sockets: a fake
 * write function records each write's pieces. Appends batch into one write;
 * chunk bytes are referenced (the chunk stays alive until the flush, and
 * is released after it); copied bytes merge into one piece; a full buffer
 * (pieces, bytes or copy area) writes what it holds first and goes on in a
 * new write; the turn's end flushes; a reset drops everything. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <uv.h>

#include "core/buf.h"
#include "net/outbuf.h"
#include "net/turn.h"

#define MAX_WRITES 16
#define OUT_CAP    (2 * SL_OUTBUF_MAX)

/* What the fake socket received: every write's bytes, and per write its
 * piece count, its size and whether each piece came as a chunk. */
struct sink {
    char     bytes[OUT_CAP];
    size_t   len;
    int      writes;
    unsigned pieces[MAX_WRITES];
    size_t   sizes[MAX_WRITES];
    int      refs[MAX_WRITES];      /* pieces given as chunk references */
    uint32_t chunk_refs[MAX_WRITES];/* the first chunk piece's refcount during the write */
    int      fail;                  /* the next write fails with this */
    int      append_in_write;       /* the write appends these bytes again (re-entry) */
};

static struct sink sink;

static int fake_write(struct sl_outbuf *ob, const struct sl_outbuf_iov *iov, unsigned n,
                      size_t total)
{
    struct sink *k = ob->owner;
    assert_true(k->writes < MAX_WRITES);
    if (k->fail) {
        int rc = k->fail;
        k->fail = 0;
        return rc;
    }
    size_t sum = 0;
    int refs = 0;
    k->chunk_refs[k->writes] = 0;
    for (unsigned i = 0; i < n; i++) {
        assert_true(k->len + iov[i].len <= OUT_CAP);
        memcpy(k->bytes + k->len, iov[i].p, iov[i].len);
        k->len += iov[i].len;
        sum += iov[i].len;
        if (iov[i].b != NULL) {
            if (refs++ == 0)
                k->chunk_refs[k->writes] = iov[i].b->refs;
        }
    }
    assert_int_equal(sum, total);
    k->pieces[k->writes] = n;
    k->sizes[k->writes] = total;
    k->refs[k->writes] = refs;
    k->writes++;
    if (k->append_in_write) {
        k->append_in_write = 0;
        assert_int_equal(sl_outbuf_copy(ob, "again", 5), 0);
    }
    return 0;
}

static struct sl_outbuf *fresh(void)
{
    static struct sl_outbuf ob;
    memset(&sink, 0, sizeof(sink));
    sl_outbuf_init(&ob, fake_write, &sink);
    return &ob;
}

static struct sl_buf *chunk(const char *text)
{
    struct sl_buf *b = sl_buf_get();
    assert_non_null(b);
    size_t n = strlen(text);
    memcpy(b->data, text, n);
    b->start = 0;
    b->end = (uint32_t)n;
    return b;
}

static void test_append_batches(void **state)
{
    (void)state;
    struct sl_outbuf *ob = fresh();
    assert_int_equal(sl_outbuf_copy(ob, "HTTP/1.1 200 OK\r\n", 17), 0);
    assert_int_equal(sl_outbuf_copy(ob, "\r\n", 2), 0);
    assert_int_equal(sl_outbuf_held(ob), 19);
    assert_int_equal(sink.writes, 0); /* nothing until the flush */
    assert_int_equal(sl_outbuf_flush(ob), 0);
    assert_int_equal(sink.writes, 1);
    assert_int_equal(sink.pieces[0], 1); /* copies one after the other: one piece */
    assert_int_equal(sink.len, 19);
    assert_memory_equal(sink.bytes, "HTTP/1.1 200 OK\r\n\r\n", 19);
    assert_int_equal(sl_outbuf_held(ob), 0);
    assert_null(ob->area); /* the copy area went back to the pool */
    assert_int_equal(sl_outbuf_flush(ob), 0); /* empty: no write */
    assert_int_equal(sink.writes, 1);
}

static void test_chunk_refs(void **state)
{
    (void)state;
    struct sl_outbuf *ob = fresh();
    struct sl_buf *b = chunk("*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n");
    assert_int_equal(b->refs, 1);
    assert_int_equal(sl_outbuf_ref(ob, b, 0, 14), 0);
    assert_int_equal(b->refs, 2); /* held by the buffer */
    assert_int_equal(sl_outbuf_ref(ob, b, 14, 28), 0); /* the next bytes: the same piece */
    assert_int_equal(b->refs, 2);
    assert_int_equal(sl_outbuf_copy(ob, "+OK\r\n", 5), 0);
    assert_int_equal(sl_outbuf_ref(ob, b, 0, 4), 0); /* not contiguous: a new piece */
    assert_int_equal(b->refs, 3);
    sl_buf_unref(b); /* the reader lets go: the buffer's references keep it */
    assert_int_equal(b->refs, 2);
    assert_int_equal(sl_outbuf_flush(ob), 0);
    assert_int_equal(sink.writes, 1);
    assert_int_equal(sink.pieces[0], 3);
    assert_int_equal(sink.refs[0], 2);
    assert_int_equal(sink.chunk_refs[0], 2); /* alive during the write */
    assert_int_equal(sink.len, 28 + 5 + 4);
    assert_memory_equal(sink.bytes + 28, "+OK\r\n*1\r\n", 9);
    /* the flush released both references: the chunk went back to its pool */
    assert_int_equal(sl_outbuf_held(ob), 0);
}

static void test_copy_then_ref_then_copy(void **state)
{
    (void)state;
    struct sl_outbuf *ob = fresh();
    struct sl_buf *b = chunk("body-bytes");
    char *p = sl_outbuf_room(ob, 64);
    assert_non_null(p);
    memcpy(p, "HEAD\r\n", 6);
    sl_outbuf_commit(ob, 6);
    assert_int_equal(sl_outbuf_ref(ob, b, 0, 10), 0);
    assert_int_equal(sl_outbuf_copy(ob, "TAIL", 4), 0); /* after the chunk: a third piece */
    sl_buf_unref(b);
    assert_int_equal(sl_outbuf_flush(ob), 0);
    assert_int_equal(sink.writes, 1);
    assert_int_equal(sink.pieces[0], 3);
    assert_int_equal(sink.len, 20);
    assert_memory_equal(sink.bytes, "HEAD\r\nbody-bytesTAIL", 20);
}

/* A ninth piece: the eight held go in one write, the ninth starts the next. */
static void test_overflow_pieces(void **state)
{
    (void)state;
    struct sl_outbuf *ob = fresh();
    struct sl_buf *b = chunk("abcdefghijklmnopqrstuvwxyz");
    for (uint32_t i = 0; i < SL_OUTBUF_SEGS + 1; i++)
        assert_int_equal(sl_outbuf_ref(ob, b, i * 2, i * 2 + 1), 0); /* gaps: one piece each */
    assert_int_equal(sink.writes, 1);
    assert_int_equal(sink.pieces[0], SL_OUTBUF_SEGS);
    assert_int_equal(sl_outbuf_held(ob), 1);
    assert_int_equal(sl_outbuf_flush(ob), 0);
    assert_int_equal(sink.writes, 2);
    assert_memory_equal(sink.bytes, "acegikmoq", 9);
    assert_int_equal(b->refs, 1);
    sl_buf_unref(b);
}

/* More bytes than SL_OUTBUF_MAX: written before the buffer holds more. */
static void test_overflow_bytes(void **state)
{
    (void)state;
    struct sl_outbuf *ob = fresh();
    struct sl_buf *b[6];
    size_t total = 0;
    for (int i = 0; i < 6; i++) {
        b[i] = sl_buf_get();
        assert_non_null(b[i]);
        memset(b[i]->data, 'a' + i, SL_BUF_SIZE);
        assert_int_equal(sl_outbuf_ref(ob, b[i], 0, SL_BUF_SIZE), 0);
        total += SL_BUF_SIZE;
        assert_true(sl_outbuf_held(ob) <= SL_OUTBUF_MAX);
    }
    assert_int_equal(sl_outbuf_flush(ob), 0);
    assert_int_equal(sink.len, total);
    assert_true(sink.writes >= (int)((total + SL_OUTBUF_MAX - 1) / SL_OUTBUF_MAX));
    for (int w = 0; w < sink.writes; w++)
        assert_true(sink.sizes[w] <= SL_OUTBUF_MAX);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(sink.bytes[(size_t)i * SL_BUF_SIZE], 'a' + i);
        assert_int_equal(b[i]->refs, 1);
        sl_buf_unref(b[i]);
    }
}

/* Copies past the copy area: what it holds goes first, in order; one copy
 * bigger than an area gets its own. */
static void test_overflow_area(void **state)
{
    (void)state;
    struct sl_outbuf *ob = fresh();
    static char big[SL_OUTBUF_AREA * 2];
    memset(big, 'x', sizeof(big));
    assert_int_equal(sl_outbuf_copy(ob, "first", 5), 0);
    assert_int_equal(sl_outbuf_copy(ob, big, SL_OUTBUF_AREA - 2), 0); /* does not fit after "first" */
    assert_int_equal(sink.writes, 1);
    assert_int_equal(sink.sizes[0], 5);
    assert_int_equal(sl_outbuf_copy(ob, big, sizeof(big)), 0); /* bigger than an area */
    assert_int_equal(sl_outbuf_copy(ob, "last", 4), 0);
    assert_int_equal(sl_outbuf_flush(ob), 0);
    assert_int_equal(sink.len, 5 + SL_OUTBUF_AREA - 2 + sizeof(big) + 4);
    assert_memory_equal(sink.bytes, "first", 5);
    assert_memory_equal(sink.bytes + sink.len - 4, "last", 4);
    assert_int_equal(sink.bytes[5], 'x');
}

/* Nobody flushes: the turn's end does, once, in one write. */
static void test_turn_end_flushes(void **state)
{
    (void)state;
    struct sl_outbuf *ob = fresh();
    struct sl_buf *b = chunk("GET / HTTP/1.1\r\n\r\n");
    assert_int_equal(sl_outbuf_copy(ob, "x", 1), 0);
    assert_true(sl_turn_pending(&ob->tn));
    assert_int_equal(sl_outbuf_ref(ob, b, 0, 18), 0);
    sl_buf_unref(b);
    assert_int_equal(sink.writes, 0);
    sl_turn_run();
    assert_int_equal(sink.writes, 1);
    assert_int_equal(sink.pieces[0], 2);
    assert_false(sl_turn_pending(&ob->tn));
    /* flushed early: no work left for the turn's end */
    assert_int_equal(sl_outbuf_copy(ob, "y", 1), 0);
    assert_int_equal(sl_outbuf_flush(ob), 0);
    assert_false(sl_turn_pending(&ob->tn));
    sl_turn_run();
    assert_int_equal(sink.writes, 2);
}

/* The write function appends (a close it triggers writes last words): the
 * bytes wait for the next flush, and the turn's end still sees them. */
static void test_append_during_write(void **state)
{
    (void)state;
    struct sl_outbuf *ob = fresh();
    sink.append_in_write = 1;
    assert_int_equal(sl_outbuf_copy(ob, "one", 3), 0);
    assert_int_equal(sl_outbuf_flush(ob), 0);
    assert_int_equal(sink.writes, 1);
    assert_int_equal(sl_outbuf_held(ob), 5);
    assert_true(sl_turn_pending(&ob->tn));
    sl_turn_run();
    assert_int_equal(sink.writes, 2);
    assert_memory_equal(sink.bytes, "oneagain", 8);
}

static void test_write_error(void **state)
{
    (void)state;
    struct sl_outbuf *ob = fresh();
    struct sl_buf *b = chunk("abc");
    assert_int_equal(sl_outbuf_ref(ob, b, 0, 3), 0);
    sink.fail = UV_EPIPE;
    assert_int_equal(sl_outbuf_flush(ob), UV_EPIPE);
    assert_int_equal(ob->err, UV_EPIPE);
    assert_int_equal(sl_outbuf_held(ob), 0); /* dropped: the socket is gone */
    assert_int_equal(b->refs, 1);
    sl_buf_unref(b);
}

static void test_reset(void **state)
{
    (void)state;
    struct sl_outbuf *ob = fresh();
    struct sl_buf *b = chunk("abc");
    assert_int_equal(sl_outbuf_copy(ob, "x", 1), 0);
    assert_int_equal(sl_outbuf_ref(ob, b, 0, 3), 0);
    assert_int_equal(b->refs, 2);
    sl_outbuf_reset(ob); /* the session is freed */
    assert_int_equal(b->refs, 1);
    assert_false(sl_turn_pending(&ob->tn));
    sl_turn_run();
    assert_int_equal(sink.writes, 0);
    sl_buf_unref(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_batches),
        cmocka_unit_test(test_chunk_refs),
        cmocka_unit_test(test_copy_then_ref_then_copy),
        cmocka_unit_test(test_overflow_pieces),
        cmocka_unit_test(test_overflow_bytes),
        cmocka_unit_test(test_overflow_area),
        cmocka_unit_test(test_turn_end_flushes),
        cmocka_unit_test(test_append_during_write),
        cmocka_unit_test(test_write_error),
        cmocka_unit_test(test_reset),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    sl_turn_drain();
    sl_outbuf_pool_drain();
    sl_buf_pool_drain();
    return rc;
}

/* sluice — RESP reply scanner (RESP2 and RESP3).
 *
 * Finds where each top-level reply ends in an upstream's byte stream, with a
 * counter stack instead of recursion and without copying or allocating:
 * replies of any size and nesting up to SL_REPLY_MAX_DEPTH, split anywhere.
 * hiredis 0.14 cannot do this (it stops at depth 7 and knows no RESP3).
 *
 * Types: + - : $ * (RESP2); _ , # ( ! = % ~ | > (RESP3), including the null
 * forms $-1 and *-1. Streamed types (`$?`, `*?`, `;`, `.`) are NOT supported
 * and are a protocol error: Redis never sends them.
 *
 *   size_t off = 0;
 *   while (off < len) {
 *       unsigned f;
 *       long n = sl_reply_scan(&s, buf + off, len - off, &f);
 *       if (n < 0) ... protocol error ...
 *       off += n;
 *       if (f & SL_REPLY_DONE) ... a reply ends at <off>; push if f & SL_REPLY_PUSH ...
 *   }
 */
#ifndef SL_PROTO_RESP_REPLY_H
#define SL_PROTO_RESP_REPLY_H

#include <stddef.h>

#include "proto/resp_reply-t.h"

void sl_reply_init(struct sl_reply_scan *s);

/* Scans <buf,len> continuing where the last call stopped. Returns the number
 * of bytes consumed: up to and including the end of the first top-level reply
 * that completes in <buf> (and sets SL_REPLY_DONE, plus SL_REPLY_PUSH for a
 * push, in <*flags>), or all of <len> with <*flags> 0 when none completes.
 * Returns SL_EPROTO on bytes that are not RESP (the state is then dead).
 * An attribute (`|`) before a reply belongs to that reply. */
long sl_reply_scan(struct sl_reply_scan *s, const char *buf, size_t len, unsigned *flags);

/* Frees what a deep reply took (done by itself when a reply ends; call it
 * when the scanner is dropped in the middle of one). */
void sl_reply_release(struct sl_reply_scan *s);

/* Nonzero when the scanner is between replies. */
int sl_reply_idle(const struct sl_reply_scan *s);

/* The whole small replies (lines: `+OK`, `-ERR ...`, `:1`; bulks: `$3 bar`,
 * `$-1`) back to back at the start of <buf>, at most <max> of them, when
 * the scanner is between replies: returns their bytes, their number in
 * <*n> and where the last one starts in <*last> (untouched when none).
 * Reads no state and writes none: sl_reply_scan() would have said DONE at
 * the end of each, and is the way on from there. */
size_t sl_reply_whole(const struct sl_reply_scan *s, const char *buf, size_t len, uint32_t max,
                      uint32_t *n, size_t *last);

/* Prepares <p> to find element <k> of the reply whose bytes will be fed. */
void sl_reply_pick_init(struct sl_reply_pick *p, uint32_t k);

/* Feeds the next <len> bytes of that one reply (from its first byte on, in
 * order, split anywhere). Sets p->found to element k's type byte once it is
 * seen; a reply that is not an aggregate of more than k elements (`-ERR`,
 * `*-1`, `_`, `*0`) leaves it 0. Bytes that are not RESP leave it 0 too. */
void sl_reply_pick_feed(struct sl_reply_pick *p, const char *buf, size_t len);

#endif

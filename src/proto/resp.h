/* sluice — RESP request framer.
 *
 * Finds request boundaries in a client's byte stream and names what each
 * request is. Pure: no I/O, no clock, no allocation per request; a bulk's
 * payload is counted as it passes, never held.
 *
 *   sl_resp_feed(st, buf, len);             // copies what it cannot consume
 *   while ((rc = sl_resp_next(st, &req)) == 1)
 *       ... req->size bytes form one request, in the order fed ...
 *   if (rc < 0) reply "-ERR <st->err>" and close
 *
 * Multibulk requests (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`) and inline commands
 * (`PING\r\n`, words split by blanks, "quoted" and 'quoted' words as Redis
 * does) are both framed. Before anything large is buffered, the framer
 * caps: the argument count (SL_RESP_MAX_ARGS), a bulk length (max_bulk), the
 * whole request (max_request) and a line without CRLF (SL_RESP_MAX_LINE).
 * While a request is incomplete, st->req holds its head: argc as announced,
 * and ncap arguments captured so far (never anything of an earlier request). The
 * errors and their texts are Redis's own:
 *   "Protocol error: invalid multibulk length"
 *   "Protocol error: invalid bulk length"
 *   "Protocol error: expected '$', got 'X'"
 *   "Protocol error: too big mbulk count string"
 *   "Protocol error: too big bulk count string"
 *   "Protocol error: too big inline request"
 *   "Protocol error: unbalanced quotes in request"
 * After an error the state is dead: every later call returns SL_EPROTO. */
#ifndef SL_PROTO_RESP_H
#define SL_PROTO_RESP_H

#include <string.h>

#include "proto/resp-t.h"

/* Prepares <st>; returns 0. */
int sl_resp_init(struct sl_resp *st, uint64_t max_request);

/* Makes an idle framer (sl_resp_idle) ready for a new stream with a new
 * <max_request>, keeping its input buffer; anything else is re-initialised
 * from scratch. Returns 0 or SL_ENOMEM. */
int sl_resp_reuse(struct sl_resp *st, uint64_t max_request);

/* Releases the input buffer. <st> may be sl_resp_init()ed again. */
void sl_resp_free(struct sl_resp *st);

/* Appends <len> bytes of <buf> to the input (payload bytes are counted off,
 * the rest is copied). Returns 0, SL_ENOMEM or
 * SL_EPROTO (already dead). */
int sl_resp_feed(struct sl_resp *st, const char *buf, size_t len);

/* Returns 1 and points <*out> at the next complete request (borrowed: valid
 * until the next call), 0 when the rest of the input is an incomplete request
 * (more must be fed), or SL_EPROTO with the message in st->err. Requests come
 * out in the order their bytes were fed; their sizes add up to the bytes fed. */
int sl_resp_next(struct sl_resp *st, struct sl_resp_req **out);

/* Bytes of a line that has begun and not ended (an inline command, a count
 * or length line): 0 while a bulk's payload streams. */
size_t sl_resp_line_len(const struct sl_resp *st);

/* The caller can hold no more of the line in progress (it filled its
 * buffer): fails it with the error Redis gives a line that long ("too big
 * inline request", "too big mbulk count string", "too big bulk count
 * string") and returns SL_EPROTO; returns 0 when no line is in progress. */
int sl_resp_line_full(struct sl_resp *st);

/* Bytes fed but not yet returned as part of a complete request. */
size_t sl_resp_pending(const struct sl_resp *st);

/* Nonzero when no partial request is buffered (the state may be freed and
 * re-initialised without losing anything). */
int sl_resp_idle(const struct sl_resp *st);

/* Case-insensitive compare of a captured argument with <lit> (upper case).
 * Inline: callers pass literals, whose strlen() the compiler folds, and
 * the length test turns most names away before a byte is read (it runs
 * several times for every request framed). */
static inline int sl_resp_arg_is(const struct sl_resp_req *r, unsigned i, const char *lit)
{
    size_t n = strlen(lit);

    if (i >= r->ncap || r->arglen[i] != n || n > SL_RESP_CAPTURE_LEN)
        return 0;
    const char *a = r->argv[i];
    for (size_t k = 0; k < n; k++) {
        unsigned char c = (unsigned char)a[k];
        if (c >= 'a' && c <= 'z')
            c -= 'a' - 'A';
        if (c != (unsigned char)lit[k])
            return 0;
    }
    return 1;
}

#endif

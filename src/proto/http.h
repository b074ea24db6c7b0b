/* sluice — HTTP/1.1 framer (RFC 9112), for requests and for responses.
 *
 * Pure: bytes in, events out; no I/O, no clock. It holds a message's head
 * (capped) until it is whole, then reports it parsed; a body is never held:
 * its bytes (chunk framing included) are reported as spans of the input,
 * to be forwarded as they are.
 *
 *   for (;;) {
 *       long used = sl_http_parse(h, p, n, &ev);
 *       ... ev == SL_HTTP_EV_HEAD:  h->head is whole (valid until the next call)
 *           ev == SL_HTTP_EV_BODY:  the <used> bytes at <p> are body (forward them)
 *           ev == SL_HTTP_EV_END:   the message is over (the next one may follow)
 *           ev == SL_HTTP_EV_NEED:  <used> == n: every byte was taken, feed more
 *           ev == SL_HTTP_EV_ERROR: h->status (400, 413, 414, 431; 502 for a
 *                                   response; 500 if memory ran out) and h->err
 *                                   say why; dead from now on
 *       p += used; n -= used;
 *   }
 *
 * Strict where RFC 9112 lets a recipient be lenient, because a proxy that
 * reads a message differently from the server behind it is a smuggling
 * hole: CRLF only (a bare LF or bare CR is an error), no obs-fold, no blank
 * before a field's colon, no control bytes (NUL included) in the start
 * line or fields, one valid Content-Length (repeats must agree), never both
 * Content-Length and Transfer-Encoding, a Transfer-Encoding whose last
 * coding is chunked (requests; a response's other codings are delimited by
 * close), chunk sizes of hex digits only (at most 16), chunk extensions and
 * trailer fields checked like fields. Up to 4 empty lines before a request
 * line are skipped (RFC 9112 2.2), none before a status line.
 *
 * Every event, every body byte and every error is the same however the
 * input is split into calls (byte by byte included). */
#ifndef SL_PROTO_HTTP_H
#define SL_PROTO_HTTP_H

#include "proto/http-t.h"

enum sl_http_side { SL_HTTP_REQUESTS = 0, SL_HTTP_RESPONSES };

enum sl_http_ev {
    SL_HTTP_EV_NEED = 0, /* everything given was taken; feed more */
    SL_HTTP_EV_HEAD,     /* a head is whole: h->head */
    SL_HTTP_EV_BODY,     /* the bytes taken are body bytes */
    SL_HTTP_EV_END,      /* the message is complete */
    SL_HTTP_EV_ERROR,    /* h->status, h->err */
};

struct sl_http; /* the framer's state: http-t.h (private fields) */

/* Prepares <h> to frame <side> under <caps> (copied; NULL or a cap of 0:
 * the default in http-t.h). Returns 0 or SL_ENOMEM. */
int sl_http_init(struct sl_http *h, enum sl_http_side side, const struct sl_http_caps *caps);

/* Releases what <h> holds. It may be sl_http_init()ed again. */
void sl_http_free(struct sl_http *h);

/* Takes bytes from <p, n> up to the next event; returns how many (0 is
 * possible, e.g. for SL_HTTP_EV_END of a message without a body), or -1
 * with SL_HTTP_EV_ERROR. At most one event per call. SL_HTTP_EV_HEAD's
 * bytes include empty lines skipped before the request line; END always
 * takes 0 bytes; NEED takes all <n> (in a head: copied, so <p> may be
 * reused). An error found in a body after some of this call's bytes were
 * good reports those as SL_HTTP_EV_BODY first, the error on the next call.
 * After the SL_HTTP_EV_END of a 101 or of a 2xx answering a CONNECT, the
 * stream is no longer HTTP: nothing more is framed, every later byte is
 * reported as SL_HTTP_EV_BODY (opaque: the caller tunnels). */
long sl_http_parse(struct sl_http *h, const char *p, size_t n, enum sl_http_ev *ev);

/* Responses: the next response answers a HEAD request (it has no body
 * whatever its fields say) or a CONNECT (a 2xx ends the framing). Set
 * before the response's head is whole: at the start, and after each
 * SL_HTTP_EV_END. A 1xx (other than 101) is followed by another response
 * to the same request; the flag stays. */
void sl_http_expect(struct sl_http *h, int head_request, int connect_request);

/* The connection was closed by the peer. Returns SL_HTTP_EV_END when that
 * ends a body delimited by close, a tunnel, or a message whose last byte
 * was taken, or when nothing had begun; else SL_HTTP_EV_ERROR (a message
 * cut short: h->status 400, or 502 for a response). Either way nothing is
 * framed after it. */
enum sl_http_ev sl_http_eof(struct sl_http *h);

/* Nonzero between messages: no byte of the next one taken yet. */
int sl_http_idle(const struct sl_http *h);

/* Requests: the request being framed, or framed last, names the method
 * HEAD, as far as its request line came (also after an error in its head:
 * an answer to it must then carry no body). */
int sl_http_names_head(const struct sl_http *h);

/* The value of the first field named <name> (case-insensitive) in <hd>:
 * returns its length and points <*val> at it, or -1 if absent. */
long sl_http_field(const struct sl_http_head *hd, const char *name, const char **val);

#endif

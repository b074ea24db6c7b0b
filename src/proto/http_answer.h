/* sluice — the HTTP/1.1 answers sluice writes itself (docs/http.md, "Answers").
 *
 * Pure renderers: each writes one complete HTTP/1.1 response (status line,
 * fields, an application/problem+json body, RFC 9457) into the caller's
 * buffer; no I/O, no clock, no allocation. Every answer has Content-Length
 * and at most SL_HTTP_ANSWER_MAX bytes. Names in answers are limit names
 * from the configuration; an identity is never written (a header identity
 * may be a secret: an API key).
 *
 * Each returns the answer's length, or 0 when <cap> is too small (never
 * with cap >= SL_HTTP_ANSWER_MAX); the output is not NUL-terminated. */
#ifndef SL_PROTO_HTTP_ANSWER_H
#define SL_PROTO_HTTP_ANSWER_H

#include <stddef.h>

#include "limit/limiter.h"
#include "proto/http_answer-t.h"

/* What the request being answered asks of an answer's framing (flags of
 * sl_http_answer_limited). */
enum {
    SL_HTTP_ANS_CLOSE = 1, /* "Connection: close": the connection ends after it */
    SL_HTTP_ANS_KEEP = 2,  /* "Connection: keep-alive": an HTTP/1.0 client's connection stays
                              open (HTTP/1.0 closes unless told so; ignored with CLOSE) */
    SL_HTTP_ANS_HEAD = 4,  /* the request is a HEAD: the head alone, no body (RFC 9110
                              9.3.2), Content-Length still the length a GET would get */
};

/* The answer to a request refused by limit verdict <v> (v->kind ==
 * SL_VERDICT_REJECT): 429 Too Many Requests with Retry-After (whole seconds
 * rounded up, at least 1; absent when the request can never pass,
 * v->never) and the rate-limit fields <mode> asks for, for the limit
 * v->policy; or, when the limit could not be checked (v->store_down,
 * on_failure = closed), 503 Service Unavailable with Retry-After.
 * <flags>: SL_HTTP_ANS_*. */
size_t sl_http_answer_limited(const struct sl_verdict *v, enum sl_http_rl_mode mode,
                              unsigned flags, char *out, size_t cap);

/* The rate-limit fields <mode> asks for on a response to a request that
 * verdict <v> allowed, each line ending in CRLF, to insert into the
 * upstream's response head; 0 (nothing) when <v> names no rate policy
 * (no limit, or a connection limit) or <mode> is none. At most
 * SL_HTTP_ANSWER_MAX bytes. */
size_t sl_http_answer_fields(const struct sl_verdict *v, enum sl_http_rl_mode mode, char *out,
                             size_t cap);

/* The answer to a connection refused by connection limit <limit> (its
 * name): 429 with "Connection: close". */
size_t sl_http_answer_connections(const char *limit, char *out, size_t cap);

/* A plain error answer with "Connection: close": <status> one of 400, 405, 408,
 * 413, 414, 431, 501, 502, 503, 504 (anything else is answered as 500),
 * the reason phrase as the body's title, and <detail> (NULL: none; a
 * static text such as the framer's h->err, never client data; at most
 * 256 bytes of it are written) as its detail. */
size_t sl_http_answer_error(int status, const char *detail, char *out, size_t cap);

/* A rendered answer <out, len> as it goes to a HEAD request: its head
 * alone (fields unchanged, Content-Length included: RFC 9110 9.3.2 lets it
 * state the length a GET would get, as nginx's own pages do). Returns the
 * head's length; <len> when it has no empty line (not an answer). */
size_t sl_http_answer_head_only(const char *out, size_t len);

/* Adaptive concurrency refused the request (docs/adaptive.md): 503
 * Service Unavailable with "Retry-After: 1" (the smallest whole number of
 * seconds: the queue's waits are milliseconds), the body naming <why> (a
 * static reason: "queue_full", "expired" ...). <flags>: SL_HTTP_ANS_*. */
size_t sl_http_answer_overloaded(const char *why, unsigned flags, char *out, size_t cap);

/* The reason phrase of <status> (RFC 9110), or "Error" for one unknown. */
const char *sl_http_reason(int status);

#endif

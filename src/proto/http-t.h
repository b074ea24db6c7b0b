/* sluice — types of the HTTP/1.1 framer (requests and responses). */
#ifndef SL_PROTO_HTTP_T_H
#define SL_PROTO_HTTP_T_H

#include <stddef.h>
#include <stdint.h>

/* Caps on what the framer holds of one message's head (the listener's
 * configuration sets them; defaults in parentheses, used for a cap given
 * as 0). Every cap applies to requests and responses alike (a response past
 * one is a 502), except max_body, which bounds requests only. */
struct sl_http_caps {
    uint32_t max_line;        /* request / status line, CRLF excluded (8 KiB): 414 past it */
    uint32_t max_field_line;  /* one header field line (8 KiB): 431 */
    uint32_t max_fields;      /* header fields in one head, trailers apart (100): 431 */
    uint32_t max_head;        /* the whole head, final CRLF included (64 KiB): 431 */
    uint64_t max_body;        /* body bytes of one request, decoded (max_request): 413 */
};

/* One header field: offsets into the head's bytes (struct sl_http_head.buf). */
struct sl_http_field {
    uint32_t name, name_len;   /* as sent (case kept) */
    uint32_t value, value_len; /* leading and trailing blanks trimmed */
};

/* Methods told apart (others: SL_HTTP_M_OTHER, the text is in the head). */
enum sl_http_method {
    SL_HTTP_M_OTHER = 0, SL_HTTP_M_GET, SL_HTTP_M_HEAD, SL_HTTP_M_POST, SL_HTTP_M_PUT,
    SL_HTTP_M_DELETE, SL_HTTP_M_CONNECT, SL_HTTP_M_OPTIONS, SL_HTTP_M_TRACE, SL_HTTP_M_PATCH,
};

/* How a message's body is delimited. */
enum sl_http_body {
    SL_HTTP_BODY_NONE = 0, /* no body (a request without framing fields; HEAD, 1xx, 204, 304) */
    SL_HTTP_BODY_LENGTH,   /* Content-Length bytes */
    SL_HTTP_BODY_CHUNKED,  /* Transfer-Encoding: ..., chunked */
    SL_HTTP_BODY_CLOSE,    /* response only: until the connection closes */
};

/* A message head, once whole. Every offset points into <buf>, which holds
 * the head exactly as received (start line to the empty line, CRLFs
 * included; empty lines skipped before a request line are not part of it).
 * The head, <buf> and <fields> stay valid through the message's body events
 * and its SL_HTTP_EV_END, until the first byte of the next message is taken
 * (or sl_http_free). */
struct sl_http_head {
    const char *buf;
    uint32_t    len;             /* bytes of the head on the wire */
    uint8_t     is_request;
    uint8_t     minor;           /* HTTP/1.<minor>: 0 or 1 */
    /* requests */
    uint8_t     method;          /* enum sl_http_method */
    uint32_t    method_off, method_len;
    uint32_t    target_off, target_len; /* the request-target as sent */
    uint32_t    path_off, path_len;     /* its path: origin-form without "?query", the path of
                                           an absolute-form target ("/" if it has none); 0 long
                                           for authority-form (CONNECT) and "*" */
    /* responses */
    uint16_t    status;          /* 100..999 */
    /* fields, in order */
    const struct sl_http_field *fields;
    uint32_t    nfields;
    /* what the fields say */
    uint8_t     body;            /* enum sl_http_body */
    uint64_t    content_length;  /* SL_HTTP_BODY_LENGTH */
    uint8_t     keep_alive;      /* the connection may carry another message after this one:
                                    HTTP/1.1 without "Connection: close", or HTTP/1.0 with
                                    "Connection: keep-alive" */
    uint8_t     upgrade;         /* request: has Upgrade and "Connection: upgrade";
                                    response: status 101 */
    uint8_t     expect_continue; /* request: "Expect: 100-continue" */
};

/* The framer's state for one direction of one connection. <head>, <status>
 * and <err> are for the caller to read; the rest is private (http.c). */
struct sl_http {
    struct sl_http_head  head;    /* the last head reported by SL_HTTP_EV_HEAD */
    uint16_t             status;  /* after SL_HTTP_EV_ERROR: 400, 413, 414 or 431
                                     (requests); 502 (responses) */
    const char          *err;     /* after SL_HTTP_EV_ERROR: why, static text; else "" */

    struct sl_http_caps  caps;    /* copied at init, zeros replaced by defaults */
    uint8_t              side;    /* enum sl_http_side */
    uint8_t              phase;   /* where the parse stands (http.c) */
    uint8_t              sub;     /* chunked body: where in the chunk framing (http.c) */
    uint8_t              cr;      /* head: the last byte taken was a CR, an LF is due */
    uint8_t              started; /* head: the start line is parsed, fields follow */
    uint8_t              skipped; /* empty lines skipped before this request line */
    uint8_t              want_head;    /* sl_http_expect(): the response answers a HEAD */
    uint8_t              want_connect; /* sl_http_expect(): the response answers a CONNECT */

    char                *buf;     /* the head being read / last read (owned) */
    uint32_t             buflen;  /* bytes of it held */
    uint32_t             bufcap;  /* room in buf: at most caps.max_head */
    uint32_t             line;    /* offset in buf where the current line starts */
    struct sl_http_field *fields; /* the head's fields (owned) */
    uint32_t             nfields; /* fields held */
    uint32_t             fieldcap; /* room in fields: at most caps.max_fields */

    uint64_t             left;    /* Content-Length bytes, or the chunk's data bytes, to come */
    uint64_t             taken;   /* decoded body bytes of this message so far (max_body) */
    uint64_t             chunk;   /* chunk size being read */
    uint32_t             digits;  /* hex digits of it so far */
    uint32_t             linelen; /* chunk-size line or trailer line: bytes so far */
    uint32_t             ntrailers; /* trailer fields so far */
};

#endif

/* sluice — types of the RESP request framer. */
#ifndef SL_PROTO_RESP_T_H
#define SL_PROTO_RESP_T_H

#include <stddef.h>
#include <stdint.h>

#define SL_RESP_MAX_ARGS     (1024 * 1024) /* arguments in one multibulk request */
#define SL_RESP_MAX_LINE     (64 * 1024)   /* a header or inline line without CRLF */
#define SL_RESP_CAPTURE_ARGS 8             /* arguments whose text is kept */
#define SL_RESP_CAPTURE_LEN  64            /* bytes kept of each captured argument */

/* What the framer saw of one complete request. */
struct sl_resp_req {
    uint64_t size;        /* bytes of this request on the wire, CRLFs included */
    uint32_t argc;        /* 0 for an empty request (`*0`, `*-1`, blank inline line): no reply */
    uint8_t  is_inline;   /* came as an inline command */
    uint8_t  ncap;        /* arguments captured: min(argc, SL_RESP_CAPTURE_ARGS) */
    uint32_t arglen[SL_RESP_CAPTURE_ARGS]; /* full length of each captured argument */
    /* The first bytes of each captured argument, NUL-terminated (an argument
     * longer than SL_RESP_CAPTURE_LEN is cut; arglen tells). argv[0] is the
     * command name as sent (not case-folded). */
    char     argv[SL_RESP_CAPTURE_ARGS][SL_RESP_CAPTURE_LEN + 1];
};

/* Framer state for one client connection. */
struct sl_resp {
    char    *in;                  /* bytes fed and not consumed yet: in[pos, len) (owned) */
    uint32_t pos, len, cap;
    uint8_t  phase;               /* where the parse stands (resp.c) */
    uint32_t idx;                 /* argument being read */
    uint32_t want;                /* bytes of it to capture: min(length, SL_RESP_CAPTURE_LEN) */
    uint32_t got;                 /* bytes of it captured so far */
    uint32_t len_full;            /* its length, for arglen */
    uint64_t left;                /* bytes of its payload (CRLF included) still to come */
    uint64_t max_bulk;            /* cap on one bulk's length (max_request) */
    uint64_t max_request;         /* cap on one request's total size */
    uint64_t cur_size;            /* bytes of the request in progress consumed so far */
    struct sl_resp_req req;       /* the request in progress / just completed */
    char     err[128];            /* "Protocol error: ..." after SL_EPROTO */
};

#endif

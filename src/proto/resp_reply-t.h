/* sluice — types of the RESP reply scanner. */
#ifndef SL_PROTO_RESP_REPLY_T_H
#define SL_PROTO_RESP_REPLY_T_H

#include <stdint.h>

#define SL_REPLY_MAX_DEPTH    65536 /* nesting of aggregates; deeper is a protocol error
                                      (Redis can send thousands: a Lua script returning a
                                      table that contains itself) */
#define SL_REPLY_INLINE_DEPTH 16    /* levels kept in the struct; deeper ones on the heap */
/* Length lines (`$ * % ~ | > ! =`) are capped at 19 digits; the lines of
 * `+ - : , # (` are not capped (a Redis error message may be long) and are
 * never buffered: the scanner only looks for their end. */

/* Flags of one complete top-level reply. */
enum sl_reply_flag {
    SL_REPLY_DONE = 1, /* a top-level reply ended */
    SL_REPLY_PUSH = 2, /* ... and it was a RESP3 push (`>`): consumes no request */
};

/* Scanner state: a counter stack, no buffer of the data itself. Aggregates
 * push the number of items still expected; attributes (`|`) are skipped as a
 * prefix that is not a reply of its own. All zero is the idle state. The
 * first SL_REPLY_INLINE_DEPTH levels live here (a session carries one of
 * these, so it stays small); deeper ones go to <deep>, allocated when a
 * reply gets there and freed when it ends. */
struct sl_reply_scan {
    uint32_t  left[SL_REPLY_INLINE_DEPTH]; /* items still expected at each level */
    uint64_t *deep;       /* (private) deeper levels: count | attribute flag << 32 */
    uint32_t  deep_cap;   /* (private) entries allocated in <deep> */
    uint32_t  depth;      /* levels open */
    uint32_t  attr_mask;  /* (private) bit i set: inline level i is an attribute */
    uint64_t  num;        /* (private) length being parsed */
    uint64_t  bulk_left;  /* payload bytes still to skip (the CRLF after it is checked apart) */
    uint8_t   state;      /* (private) where inside an item the scan is */
    uint8_t   type;       /* type byte of the item being read */
    uint8_t   top_push;   /* the top-level item is a push */
    uint8_t   attr;       /* (private) a top-level attribute ended; its reply has not */
    uint8_t   neg;        /* (private) the length line began with '-' */
    uint8_t   ndigits;    /* (private) digits of the length line seen so far */
    uint8_t   cr;         /* (private) a line's last byte seen so far was '\r' */
};

/* Finds the type byte of one element of a top-level aggregate reply (which
 * command of a transaction EXEC's reply says failed). */
struct sl_reply_pick {
    struct sl_reply_scan sub; /* scans the elements as if each were a reply */
    uint32_t k;               /* the element wanted (0-based) */
    uint32_t seen;            /* elements passed so far */
    uint8_t  stage;           /* (private) where the pick stands (resp_reply.c) */
    uint8_t  found;           /* element k's type byte; 0 while unknown or when there is none */
};

#endif

/* sluice — types of the ring of requests waiting for their verdicts. */
#ifndef SL_NET_PEND_T_H
#define SL_NET_PEND_T_H

#include <stdint.h>

#include "proto/resp_conn-t.h" /* SL_PK_*: what a request is to the connection */

struct sl_session;
struct sl_limiter_req;

#define SL_PEND_MAX 256 /* requests in order behind an undecided one */

/* A request waiting for its turn: its verdict is not in yet, or one before
 * it is still waiting. Entries never move while waiting (the ring is
 * allocated once, SL_PEND_MAX long), so a verdict can land in place. */
struct sl_pend {
    struct sl_session     *s;       /* owner (the verdict callback's data is the entry) */
    struct sl_limiter_req *h;       /* the limiter's pending decision, while waiting */
    char                  *text;    /* rejection line (owned), when rejected */
    uint32_t               span;    /* bytes of the request in the client chunk */
    uint32_t               len;     /* bytes of <text> */
    uint32_t               nchan;   /* SL_FX_(UN)SUB: channels named */
    uint64_t               due_us;  /* SL_PEND_DELAY: when it may go */
    uint8_t                state;   /* SL_PEND_WAIT | SL_PEND_ALLOW | SL_PEND_REJECT */
    uint8_t                kind;    /* SL_PK_* */
    uint8_t                fx;      /* enum sl_fx: what it changes if it goes upstream */
    char                  *note;    /* decision log: what the line needs of the request
                                       while its verdict is out (owned; sess_decide.c) */
    uint8_t                pooled;  /* pooled listener: the protocol keeps a record of
                                       its class for it, in order (sess_resp.c) */
    uint8_t                slow;    /* pooled listener: a script (sl_sess_link_slow) */
    uint8_t                adapt;   /* adaptive concurrency may count it (the protocol's
                                       SL_ADAPT_* kind; 0: never) */
    uint8_t                tier;    /* ... its shedding tier */
    uint8_t                shed;    /* ... refused by it: 1 + enum sl_adapt_reason */
};
enum { SL_PEND_WAIT = 0, SL_PEND_ALLOW, SL_PEND_REJECT,
       SL_PEND_DELAY }; /* allowed at due_us (action = delay reserved its place) */

/* The ring of one session. Its storage is lent from a pool while requests
 * wait (NULL otherwise); the fields are net/pend.c's alone. */
struct sl_pend_ring {
    struct sl_pend *e;    /* SL_PEND_MAX entries, or NULL */
    uint32_t        head; /* first entry */
    uint32_t        n;    /* entries in the ring */
};

#endif

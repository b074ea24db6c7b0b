/* sluice — types of the pooled upstream connection engine (net/upool.h) and
 * of its reply router (net/upool_route.h). */
#ifndef SL_NET_UPOOL_T_H
#define SL_NET_UPOOL_T_H

#include <stdint.h>
#include <sys/socket.h>

#include "proto/resp_reply-t.h"

struct sl_buf;
struct sl_upool;
struct sl_upool_key;
struct sl_upool_conn;

/* What the engine knows of one caller (a session): embedded in it, set up
 * with sl_upool_owner_init(). The fields are the engine's; the caller only
 * reads them. An owner's requests in flight are all on one connection
 * (<conn>), so its replies can only come back in the order it asked. */
struct sl_upool_owner {
    void                  *data;     /* the caller's (its session) */
    struct sl_upool_conn  *conn;     /* where its requests in flight are; NULL: none */
    struct sl_upool_key   *wkey;     /* waiting for a pin of this key (wait queue) */
    struct sl_upool_owner *wnext;    /* wait queue link */
    uint32_t               inflight; /* replies owed to it on <conn> (pooled only) */
    /* Set by the caller: requests written first on a connection pinned to
     * it (its own state a shared connection lacks, e.g. its name), their
     * <prelude_n> replies dropped; the bytes stay the caller's. */
    const char            *prelude;
    uint32_t               prelude_len;
    uint32_t               prelude_n;
    uint8_t                pinned;   /* <conn> is its own (sl_upool_pin) */
    uint8_t                waiting;  /* in the pin wait queue */
};

/* What the bytes of one reply are for (one FIFO entry covers <owed> replies
 * of the same kind and owner). */
enum sl_upool_ek {
    SL_UPE_OWNER = 0, /* to <owner> (NULL: forgotten, read and dropped) */
    SL_UPE_RAW,       /* pinned: everything to <owner>, pushes too, never ends by itself */
    SL_UPE_SETUP,     /* the key's setup commands: swallowed, an error reply fails */
    SL_UPE_SKIP,      /* replies a pinned owner left behind: dropped */
    SL_UPE_RESET,     /* the RESET's reply, which must be exactly +RESET */
    SL_UPE_RESET_SCAN,/* replies dropped until a top-level +RESET (no count known) */
    SL_UPE_DROP,      /* a pinned owner's prelude (sl_upool_owner): dropped */
};

struct sl_upool_ent {
    struct sl_upool_owner *owner; /* OWNER, RAW: to whom; NULL: dropped */
    uint32_t               owed;  /* replies this entry still stands for */
    uint8_t                kind;  /* enum sl_upool_ek */
};

#define SL_UPOOL_CAPTURE 96 /* first bytes of a checked reply kept (setup errors) */

/* The FIFO of one connection: who each reply in wire order belongs to. */
struct sl_upool_route {
    struct sl_upool_ent *e;        /* ring of entries (grown by doubling) */
    uint32_t             head;     /* first entry */
    uint32_t             n;        /* entries queued */
    uint32_t             cap;      /* ring size (a power of two) */
    uint32_t             owed;     /* replies owed to owners (OWNER entries, forgotten too) */
    struct sl_reply_scan scan;     /* where the reply in progress ends */
    uint32_t             caplen;   /* bytes in <capture> of the reply in progress */
    uint8_t              capok;    /* <capture> holds the reply from its first byte */
    char                 capture[SL_UPOOL_CAPTURE];
};

/* Flags of a piece delivered to an owner. */
enum sl_upool_piece {
    SL_UPOOL_DONE = 1, /* the piece ends a top-level reply */
    SL_UPOOL_PUSH = 2, /* ... which was a RESP3 push (pinned connections only) */
};

/* Numbers for the metrics (one pool: one listener in one worker). */
struct sl_upool_stats {
    uint64_t conns;          /* connections open or opening, pooled and pinned */
    uint64_t pooled;         /* ... shared ones */
    uint64_t pinned;         /* ... pinned to an owner */
    uint64_t inflight;       /* replies owed to owners on shared connections */
    uint64_t connects;       /* connections started since the start */
    uint64_t failures;       /* connections that failed (connect, setup, I/O, protocol) */
    uint64_t setup_failures; /* ... of them because a setup command was refused */
    uint64_t owners_failed;  /* failed() calls */
    uint64_t pin_waiting;    /* owners in the pin wait queue */
    uint64_t pin_refused;    /* pins refused at the cap */
    uint64_t dropped_replies;/* replies read for forgotten owners and dropped */
    uint64_t idle_closed;    /* shared connections closed after idle_timeout_ms */
    uint64_t batch_holds;    /* small batches held for more requests (batch_wait_us) */
    uint64_t batch_gained;   /* requests that joined them while held */
};

struct sl_upool_key_stats {
    uint32_t conns;    /* shared connections of the key, open or opening */
    uint32_t pinned;   /* pinned connections made for the key */
    uint64_t inflight; /* replies owed to owners on its shared connections */
};

#endif

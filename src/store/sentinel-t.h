/* sluice — types of the Redis Sentinel client (store/sentinel.h). */
#ifndef SL_STORE_SENTINEL_T_H
#define SL_STORE_SENTINEL_T_H

#include <stdint.h>
#include <sys/socket.h>

#include "conf/conf-t.h"

struct sl_sentinel; /* opaque outside store/ */
struct sl_tls_ctx;  /* core/tls.h */

/* What the client is given. Everything is copied by sl_sentinel_new(). */
struct sl_sentinel_conf {
    const struct sl_addr *sentinels;   /* <n_sentinels> addresses (their resolved <ss> is
                                          used), in the order to ask them first */
    int                   n_sentinels; /* 1 .. SL_SENTINEL_MAX */
    const char           *master_name; /* the name the sentinels monitor it by */
    const char           *user;        /* AUTH user for the sentinels, or NULL */
    const char           *password;    /* AUTH password for the sentinels; NULL: no AUTH */
    int                   tls;         /* 1: the sentinels are asked over TLS */
    struct sl_tls_ctx    *tls_ctx;     /* with <tls>: the context (client role; it gains a
                                          reference); NULL fails every connection */
    uint64_t              connect_timeout_us; /* one TCP connect to a sentinel */
    uint64_t              timeout_us;  /* one question (AUTH included) or PING answered within
                                          this, else the next sentinel: a few hundred ms */
    uint64_t              ping_us;     /* the subscription is PINGed this often; a PING not
                                          answered in timeout_us moves it on. 0: 1 s */
};

#define SL_SENTINEL_MAX 16 /* sentinels in one list, at most */

/* After a +switch-master, an answer naming the address it left is stale for
 * this long (a sentinel that has not heard of the failover yet: they tell
 * each other every 2 s). Sentinel starts no new failover of the same master
 * within 2 x failover-timeout, far longer. */
#define SL_SENTINEL_HOLD_MS 10000

/* The master's address is known for the first time, or it changed:
 * <master> (borrowed for the call) is where the master is now. Not called
 * again for the same address. The callback may call any sl_sentinel_*
 * function, sl_sentinel_close() included. */
typedef void sl_sentinel_cb(void *data, const struct sockaddr_storage *master);

/* Counters, for the metrics and the tests. */
struct sl_sentinel_stats {
    uint64_t rounds;          /* asking rounds started (the start, reasks, retries, resubscribes) */
    uint64_t answers;         /* a sentinel gave an address */
    uint64_t unknown;         /* of the failures: nil, the sentinel does not know the master */
    uint64_t failures;        /* a sentinel did not answer: refused, timeout, error reply, bad
                                 reply, nil (unknown), a stale answer */
    uint64_t stale;           /* of which: the address a recent +switch-master left */
    uint64_t rounds_failed;   /* no sentinel gave an address ("no master known") */
    uint64_t switch_messages; /* +switch-master messages for our master */
    uint64_t changes;         /* callbacks: the address became known or changed */
    uint64_t subscribes;      /* subscriptions confirmed */
};

#endif

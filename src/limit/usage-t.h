/* sluice — the types of the usage table (limit/usage.h). */
#ifndef SL_LIMIT_USAGE_T_H
#define SL_LIMIT_USAGE_T_H

#include <stdint.h>

enum sl_usage_field {
    SL_USAGE_REQUESTS = 0,
    SL_USAGE_REJECTED,
    SL_USAGE_DELAYED,
    SL_USAGE_BYTES_IN,
    SL_USAGE_BYTES_OUT,
    SL_USAGE_CONN_US,   /* connection time, in microseconds (exported in seconds) */
    SL_USAGE_FIELDS
};

/* One identity-window. */
struct sl_usage_entry {
    struct sl_usage_entry *next;            /* hash chain */
    uint64_t window;                         /* its start, seconds since the epoch (UTC) */
    uint64_t live[SL_USAGE_FIELDS];          /* counted since it was last taken */
    uint64_t out[SL_USAGE_FIELDS];           /* being delivered (seq != 0) */
    uint64_t seq;                            /* the number of that delivery; 0: none */
    uint8_t  busy;                           /* handed to a deliverer, not done yet */
    uint32_t hash;
    char     id[];                           /* the identity, as /stats writes it */
};

struct sl_usage_stats {
    uint64_t entries;                        /* held now (gauge) */
    uint64_t waiting;                        /* of which: a delivery failed, to retry (gauge) */
    uint64_t delivered;                      /* deliveries done */
    uint64_t failed;                         /* deliveries that failed (each retried) */
    uint64_t dropped[SL_USAGE_FIELDS];       /* counts dropped past max_entries */
};

#endif

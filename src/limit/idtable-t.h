/* sluice — types of the bounded identity table.
 *
 * Per-identity state (in-process buckets, remembered store answers) lives in
 * hash tables keyed by a short string. Each table keeps its entries in order
 * of last use (a timeout queue, core/tq.h) and holds at most <cap> of them:
 * a new key beyond the cap first evicts one old entry, chosen by the owner's
 * judge (see idtable.h). The owner embeds struct sl_idt_node in its entry
 * and allocates the key with it. */
#ifndef SL_LIMIT_IDTABLE_T_H
#define SL_LIMIT_IDTABLE_T_H

#include <stddef.h>
#include <stdint.h>

#include "core/tq.h"

struct sl_idt_node {
    struct sl_tq_node   lru;   /* in the table's queue, by last use */
    struct sl_idt_node *next;  /* hash chain */
    uint64_t            hash;  /* of the key */
    const char         *key;   /* owned by the entry (usually right after it) */
    uint16_t            len;   /* key length */
};

/* How an entry may go, asked of the owner when the table is full. */
enum sl_idt_judgement {
    SL_IDT_PINNED = -1,        /* in use: never evicted */
    SL_IDT_KEEP   = 0,         /* holds state: evicted only as the least recently used */
    SL_IDT_FRESH  = 1,         /* equal to a new entry: evicted first */
};

typedef enum sl_idt_judgement sl_idt_judge(struct sl_idt_node *n, void *arg);

struct sl_idt {
    struct sl_idt_node **tab;  /* buckets of the hash table */
    uint32_t            mask;  /* table size - 1 (a power of two) */
    size_t              n;     /* entries */
    size_t              cap;   /* most entries kept (SIZE_MAX: no bound) */
    struct sl_tq        lru;   /* entries by last use: head = least recent */
    uint64_t            evicted; /* entries evicted to stay within <cap> */
};

#endif

/* sluice — a hash table of per-identity entries, bounded and least
 * recently used first.
 *
 * No clock and no allocation of entries: the owner allocates an entry
 * (embedding struct sl_idt_node, key stored with it), inserts it, and frees
 * what it removes. Times are loop milliseconds passed in. When the table is
 * full, sl_idt_victim() names the entry to evict: among the SL_IDT_SCAN
 * least recently used, the first the judge calls fresh (state equal to a new
 * entry: evicting it loses nothing), else the least recently used one not
 * pinned. Looking further than SL_IDT_SCAN entries for a fresh one would
 * make each insert cost more than a constant; looking only at pinned
 * entries (every one in use) finds nothing, and the table then grows past
 * its cap by the entries in use (bounded by the requests in flight). */
#ifndef SL_LIMIT_IDTABLE_H
#define SL_LIMIT_IDTABLE_H

#include "limit/idtable-t.h"

#define SL_IDT_SCAN 16          /* entries looked at for a fresh one */
#define SL_IDT_SCAN_PINNED 1024 /* entries passed over while all are pinned */

/* Sets up <t> empty, holding at most <cap> entries (0: no bound). Returns 0
 * or SL_ENOMEM. */
int sl_idt_init(struct sl_idt *t, size_t cap);

/* Unlinks every entry and frees the table itself; the owner frees the
 * entries first (sl_idt_first() / the next pointers) or after. */
void sl_idt_free(struct sl_idt *t);

/* FNV-1a of <len> bytes at <key>. */
uint64_t sl_idt_hash(const char *key, size_t len);

/* The entry for <key> of <len> bytes, touched at <now_ms>, or NULL. */
struct sl_idt_node *sl_idt_find(struct sl_idt *t, const char *key, size_t len, uint64_t now_ms);

/* Like sl_idt_find() without touching (the order of use stays). */
struct sl_idt_node *sl_idt_peek(const struct sl_idt *t, const char *key, size_t len);

/* Nonzero when one more entry would pass the cap. */
int sl_idt_full(const struct sl_idt *t);

/* The entry to evict before inserting into full <t>, judged by
 * <judge>(node, <arg>), or NULL when every entry looked at is pinned. The
 * caller removes it (sl_idt_remove), counts it (t->evicted++) and frees it. */
struct sl_idt_node *sl_idt_victim(struct sl_idt *t, sl_idt_judge *judge, void *arg);

/* Inserts <node> whose key (node->key, node->len) is set and not in <t>
 * yet, touched at <now_ms>. Grows the hash table as needed (keeping the old
 * one when out of memory: longer chains, still correct). */
void sl_idt_insert(struct sl_idt *t, struct sl_idt_node *node, uint64_t now_ms);

/* Takes <node> out of <t> (the caller frees it). */
void sl_idt_remove(struct sl_idt *t, struct sl_idt_node *node);

/* Marks <node> used at <now_ms> (most recent). */
void sl_idt_touch(struct sl_idt *t, struct sl_idt_node *node, uint64_t now_ms);

/* The least recently used entry if it was last used at or before
 * <now_ms> - <idle_ms>, else NULL (for expiring idle entries). */
struct sl_idt_node *sl_idt_expired(const struct sl_idt *t, uint64_t now_ms, uint64_t idle_ms);

#endif

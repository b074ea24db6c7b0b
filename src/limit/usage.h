/* sluice — usage that can be billed: what each identity used, per window
 * of wall-clock time, kept until it is delivered (docs/usage.md).
 *
 *   sl_usage_add(id, field, n, now)      counts, into the entry of
 *   sl_usage_add_span(id, from, to)      (identity, window start)
 *                 |
 *   sl_usage_take(deliver)   every interval: each entry's counts since the
 *                 |          last take become its delivery <out>, named by
 *                 |          a sequence number of this table
 *   sl_usage_done(e, ok)     delivered: forgotten (the entry too, once it
 *                            holds nothing); not delivered: the same <out>
 *                            with the same number is offered again at the
 *                            next take, while new counts wait beside it
 *
 * An entry has at most one delivery out at a time and its numbers only
 * grow, so the store can tell a retry (a number it has applied) from new
 * counts by keeping, per identity-window and instance, the highest number
 * applied (lua/usage.lua). Counts that arrive while a delivery is out are
 * merged into the entry's next one: what waits for the store is one entry
 * per identity-window, however long the store is away.
 *
 * Memory: one entry per identity-window counted since the last take, plus
 * those whose delivery failed; at most <max_entries> in all. Counts for a
 * new entry past that are dropped and counted per field (never silently:
 * sl_usage_stats() for the metrics, and a warning at most once a second).
 *
 * No clock of its own: every time is passed in (wall-clock microseconds
 * since the epoch), so the tests move it by hand. One table per process
 * (per worker); nothing here is shared between threads. */
#ifndef SL_LIMIT_USAGE_H
#define SL_LIMIT_USAGE_H

#include <stddef.h>
#include <stdint.h>

#include "limit/usage-t.h"

/* The hash field (and JSON key) of each: "requests", ..., "connection_seconds". */
extern const char *const sl_usage_field_names[SL_USAGE_FIELDS];

struct sl_usage;

/* A table of <window_s>-second windows (>= 1, aligned on the epoch) holding
 * at most <max_entries> entries (>= 1). NULL when out of memory. */
struct sl_usage *sl_usage_new(uint64_t window_s, size_t max_entries);

/* New numbers (a reload): windows of new counts, and the bound. */
void sl_usage_set(struct sl_usage *u, uint64_t window_s, size_t max_entries);

/* Frees the table and its entries; no entry may be busy. */
void sl_usage_free(struct sl_usage *u);

/* Adds <n> to field <f> of identity <id> in the window of <now_us>.
 * Returns 0, or -1 when dropped (the table full, or out of memory). */
int sl_usage_add(struct sl_usage *u, const char *id, enum sl_usage_field f, uint64_t n,
                 uint64_t now_us);

/* Adds the connection time [<from_us>, <to_us>) of <id>, split across the
 * windows it spans. Returns 0, or -1 when some of it was dropped. */
int sl_usage_add_span(struct sl_usage *u, const char *id, uint64_t from_us, uint64_t to_us);

/* Delivers one entry: called by sl_usage_take() with the entry's <out> and
 * <seq> set; the deliverer calls sl_usage_done() on it, at once or later.
 * It must not add to the table, nor end the delivery of another entry. */
typedef void sl_usage_deliver(void *data, struct sl_usage_entry *e);

/* Hands every entry that has something to deliver and is not busy to
 * <fn>: a failed delivery again (same out, same seq), else its counts
 * since the last take (a new seq). Returns how many were handed. */
size_t sl_usage_take(struct sl_usage *u, sl_usage_deliver *fn, void *data);

/* sl_usage_take() a part at a time, so that a loop turn hands a bounded
 * number: about <max> entries (it stops at the end of the hash chain where
 * <max> is reached: chains are short), from where the last call stopped; *<more> is nonzero when the walk has not
 * reached the end yet (call again, in a later turn). Entries made meanwhile
 * behind the walk wait for the next one. */
size_t sl_usage_take_some(struct sl_usage *u, sl_usage_deliver *fn, void *data, size_t max,
                          int *more);

/* The delivery of <e> ended: <ok> nonzero when it was applied (or found
 * applied already), 0 when it is to be tried again. <e> may be freed. */
void sl_usage_done(struct sl_usage *u, struct sl_usage_entry *e, int ok);

/* Empties the table (it is being closed): adds what each entry held, its
 * delivery out and its counts since, into <lost>, and frees them. No
 * entry may be busy. */
void sl_usage_drain(struct sl_usage *u, uint64_t lost[SL_USAGE_FIELDS]);

/* Counts so far. */
void sl_usage_stats(const struct sl_usage *u, struct sl_usage_stats *out);

/* The window start of <now_us> (seconds), as new counts would get it. */
uint64_t sl_usage_window_of(const struct sl_usage *u, uint64_t now_us);

#endif

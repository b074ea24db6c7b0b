/* sluice — in-process buckets and their bounded tables (private to
 * src/limit/; see limiter-i.h). */
#ifndef SL_LIMIT_BUCKETS_H
#define SL_LIMIT_BUCKETS_H

#include "limit/limiter-i.h"

/* Finds or makes the bucket <key> (<len> bytes) of <L> (an entry when
 * <key> starts with '\0'), touched at <now_ms>; a full table evicts one
 * first. NULL when out of memory. Owned by <L>'s table. */
struct bucket *sl_lim_bucket_get(struct limit *L, const char *key, size_t len, uint64_t now_ms);

/* In-process bucket <b> is about to be taken under the numbers <p> (the
 * limit's, an override, a share of them) at <now_us>: its state is
 * converted when it was last taken under numbers the algorithm cannot read
 * it with (another algorithm, a window of another period: a reload; see
 * sl_algo_convert), and <p> is what it is taken under from now on. */
void sl_lim_bucket_numbers(struct bucket *b, const struct sl_algo_params *p, uint64_t now_us);

/* <L>'s tables take its cap (a reload changed [store] max_identities),
 * evicting down to it what is not in use (the sweep). */
void sl_lim_tables_fit(struct limit *L, uint64_t now_us);

/* Removes bucket <b> from <L>'s table and frees it. */
void sl_lim_bucket_drop(struct limit *L, struct bucket *b);

/* Frees table <t> and every bucket in it. */
void sl_lim_table_free(struct sl_idt *t);

/* The most one take of <p> can be: what a full bucket or an empty window
 * allows. */
uint64_t sl_lim_capacity_of(const struct sl_algo_params *p);

#endif

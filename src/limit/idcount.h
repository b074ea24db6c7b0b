/* sluice — what each identity did under a limit: requests, rejections,
 * delays, bytes and connections, for the limits API (private to
 * src/limit/; see limiter-i.h).
 *
 * One entry per limit and identity in the limit's bounded table
 * (lim_state.ids, [store] max_identities, least recently used first), so
 * the memory is that of the other per-identity tables. The counts are this
 * process's: an evicted identity that comes back starts from zero. */
#ifndef SL_LIMIT_IDCOUNT_H
#define SL_LIMIT_IDCOUNT_H

#include "limit/limiter-i.h"

/* Counts <n> more of <field> (enum sl_lim_count) for <identity> under
 * <L> at <now_ms>: the entry is made (evicting the least recently used
 * one when the table is full) or touched. Out of memory: not counted. */
void sl_lim_idc_add(struct limit *L, const char *identity, int field, uint64_t n,
                    uint64_t now_ms);

/* The counts of <identity> under <L> into <out> (all zero when unknown);
 * nothing is touched. */
void sl_lim_idc_get(const struct limit *L, const char *identity, uint64_t out[SL_LIM_COUNTS]);

/* The counts of an entry of a limit's ids table. */
const uint64_t *sl_lim_idc_counts(const struct sl_idt_node *n);

/* Frees table <t> and every entry in it. */
void sl_lim_idc_free(struct sl_idt *t);

/* Counts decision <v> of pooled or stacked request <q>: for every limit it
 * met, one request (or the bytes taken, when allowed), a rejection when
 * that limit refused it, a delay when that limit made it wait. */
void sl_lim_count_verdict(struct sl_limiter *lim, const struct sl_limiter_req *q,
                          const struct sl_verdict *v);

/* Tells pooled request <q>'s caller (unless cancelled) its verdict <v>,
 * counted first. */
void sl_lim_deliver(struct sl_limiter_req *q, const struct sl_verdict *v);

#endif

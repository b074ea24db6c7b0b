/* sluice — the limits API with workers: the master adds up the workers'
 * answers (each worker counts its own traffic; the store's numbers are the
 * same in every answer).
 *
 * Pure text functions over the documents limits_api.c writes, so they
 * stay in step with it: the same fields in the same order in every
 * worker's document. */
#ifndef SL_ADMIN_LIMITS_MERGE_H
#define SL_ADMIN_LIMITS_MERGE_H

#include <stddef.h>
#include <stdio.h>

/* Writes <texts>[0] (NULL entries skipped: the first non-NULL one) with
 * every count field (requests, rejected, delayed, bytes_in, bytes_out,
 * connections, allowed, shadow_rejected, fallback, leased, held,
 * local_buckets, store_entries, identities_counted, store_keys_deleted)
 * replaced by the sum of that field's occurrence of the same rank in
 * every text. Other fields are the first text's. */
void sl_limits_merge_sum(FILE *out, const char *const *texts, const size_t *lens, int n);

/* Writes one ?top answer from the workers' ones: each identity's counts
 * added up over the workers, the <top> with the most <by> first (ties by
 * identity), identities_counted summed. Returns 0, or -1 when out of
 * memory or a text is not such an answer. */
int sl_limits_merge_top(FILE *out, const char *const *texts, const size_t *lens, int n,
                        size_t top);

#endif

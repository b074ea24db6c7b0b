/* sluice — the store round trip of a decision (private to src/limit/;
 * see limiter-i.h). */
#ifndef SL_LIMIT_REMOTE_H
#define SL_LIMIT_REMOTE_H

#include "limit/limiter-i.h"

/* One decide.lua call for every store-backed limit of pooled request <q>
 * (its cost, plus any token lease asked). Returns 1 when sent: the answer
 * decides <q>, calls its callback and frees it; 0 when the store cannot
 * take it (the caller applies on_failure). */
int sl_lim_send(struct sl_limiter *lim, struct sl_limiter_req *q);

/* Limit <k>'s part of the store's answer <vals> to <q>: {all_allowed,
 * (allowed, remaining, retry_us, reset_us) per store-backed limit, in
 * order}; points at its allowed. */
const int64_t *sl_lim_answer_of(const struct sl_limiter_req *q, const int64_t *vals, int k);

/* The store key of limit <L> for <id> ("*" for global scope), written in
 * <buf> of <cap> bytes: <key_prefix>{<limit>:<identity>}, one hash tag per
 * bucket; the result points into <buf>. */
struct sl_str sl_lim_store_key(const struct sl_limiter *lim, const struct limit *L, const char *id,
                               char *buf, size_t cap);

#endif

/* sluice — per-identity rate and burst read from the store (overrides =
 * store), cached (private to src/limit/; see limiter-i.h).
 *
 * An operator writes HSET <key_prefix>overrides:{LIMIT} IDENTITY "RATE
 * [BURST]" (conf/units.h: sl_parse_override); every instance reads it the
 * first time the identity meets the limit, and again once the answer is
 * older than overrides_ttl: the first request of an identity waits for
 * the answer, later ones use what is cached while a refresh is asked
 * (never more than one a limit and identity at a time). No field: the
 * limit's own numbers. A malformed value is ignored (the limit's own
 * numbers), logged at most once a second and counted; an unanswered ask
 * keeps what was cached. Entries live in one bounded table per limit
 * ([store] max_identities, least recently used first). */
#ifndef SL_LIMIT_OVERRIDES_H
#define SL_LIMIT_OVERRIDES_H

#include "limit/limiter-i.h"

struct sl_ovr; /* one limit's override for one identity, as last read */

/* Frees every cached override held in <s> (and its table). */
void sl_lim_overrides_free(struct lim_state *s);

/* Fills q->p[k] for every limit <k> of <q>: its own parameters, or the
 * override cached for q's identity (asking for a stale one again). Returns
 * 0 when every one is known, or 1 when <q> must wait for the first answer
 * for entry *<wait_on> (asked now or before). */
int sl_lim_overrides_resolve(struct sl_limiter *lim, struct sl_limiter_req *q,
                             struct sl_ovr **wait_on);

/* Pooled request <q> (holding a reference on its limiter) waits for <o>'s
 * answer; it then goes on through sl_lim_resume(). */
void sl_lim_overrides_wait(struct sl_ovr *o, struct sl_limiter_req *q);

/* Drops the overrides of <L> idle past overrides_ttl at <now_us> (the
 * sweep): they are asked again at their next use anyway. */
void sl_lim_overrides_sweep(struct limit *L, uint64_t now_us);

/* The /stats object of <L>'s overrides (limits with overrides = store). */
void sl_lim_overrides_json(const struct limit *L, FILE *out);

#endif

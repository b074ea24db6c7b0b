/* sluice — counters, delay histograms, busiest identities (private to
 * src/limit/; see limiter-i.h). */
#ifndef SL_LIMIT_STATS_H
#define SL_LIMIT_STATS_H

#include "limit/limiter-i.h"

/* Why work was allowed without being counted (sl_lim_uncounted). */
enum { UNCOUNTED_NO_MEMORY, UNCOUNTED_TOO_MANY, UNCOUNTED_REASONS };

/* Counts work (<what>: "request", "connection") allowed uncounted for
 * reason <why>, for /metrics; logs it at most once a second per reason. */
void sl_lim_uncounted(int why, const char *what);

/* Adds a wait of <us> to histogram <h>. */
void sl_lim_hist_add(struct sl_delay_hist *h, uint64_t us);

/* Counts one request of identity <id> in <L>'s busiest identities. */
void sl_lim_top_count(struct limit *L, const char *id);

#endif

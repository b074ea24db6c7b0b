/* sluice — the decision log: one line per limit decision that changed a
 * request's fate (decision_log = rejections: rejected, delayed, and a
 * shadow limit's would-be rejection; all: allowed ones too), to the main
 * log's destination and format, through a sink that never blocks the loop
 * (core/lsink.h).
 *
 *   ts=… level=info msg=decision listener=api limit=per_key identity=user:alice
 *       request="GET /v1/items" cost=1 outcome=rejected retry_ms=1200
 *
 * The request is named, never quoted: a RESP command by its name (upper
 * case, no argument: keys and values may be secrets), an HTTP request by
 * its method and path (no query string), a connection refused under a
 * connection limit as "connection", a TCP stream refused by a bytes limit
 * as "bytes".
 *
 * At most decision_log_rate lines a second per process; the lines past it
 * are counted, and the count is written once the second is over (by the
 * next decision, or a timer when none comes):
 *
 *   ts=… level=info msg="decision lines left out" repeated=990 rejected=990
 *       delayed=0 shadow_rejected=0 allowed=0 */
#ifndef SL_NET_DLOG_H
#define SL_NET_DLOG_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "conf/conf-t.h"

enum sl_dlog_outcome {
    SL_DLOG_ALLOWED = 0,
    SL_DLOG_REJECTED,
    SL_DLOG_DELAYED,
    SL_DLOG_SHADOW, /* a shadow limit would have rejected */
    SL_DLOG_N_OUTCOMES
};

#define SL_DLOG_NEVER UINT64_MAX /* retry_ms: the cost never fits (over the burst) */
#define SL_DLOG_NONE  (UINT64_MAX - 1) /* no wait to tell (connection limits) */

/* One decision line's fields. */
struct sl_dlog_entry {
    const char *listener;
    const char *limit;
    const char *identity;
    const char *request;  /* its name as the header says (already safe: no argument) */
    size_t      request_len;
    uint64_t    cost;     /* 0: not told */
    int         outcome;  /* enum sl_dlog_outcome */
    uint64_t    wait_ms;  /* retry_ms (rejected, shadow) or delay_ms (delayed); SL_DLOG_NEVER,
                             SL_DLOG_NONE */
    uint8_t     store_down; /* rejected because the store could not be asked */
};

/* Whether configuration <c> wants a line for decisions of <outcome>: one
 * comparison, for the callers' fast path. */
static inline int sl_dlog_wants(const struct sl_conf *c, int outcome)
{
    return c->decision_log == SL_DLOG_ALL ||
           (c->decision_log == SL_DLOG_REJECTIONS && outcome != SL_DLOG_ALLOWED);
}

/* Writes (or counts, past the rate) the line of decision <e> under
 * configuration <c>, on <loop> (the sink is made on first use). */
void sl_dlog_write(uv_loop_t *loop, const struct sl_conf *c, const struct sl_dlog_entry *e);

/* The two halves of sl_dlog_write(), for a caller whose entry costs work
 * to fill: sl_dlog_take() asks the rate bound for a line of <outcome>
 * (0: left out and counted, nothing more to do; 1: write it), then
 * sl_dlog_put() writes the line. */
int sl_dlog_take(uv_loop_t *loop, const struct sl_conf *c, int outcome);
void sl_dlog_put(const struct sl_conf *c, const struct sl_dlog_entry *e);

/* Formats the line of <e> into <out> (<cap> bytes) in <format> with
 * timestamp <ts>; returns its length. Pure: for tests. */
size_t sl_dlog_format(char *out, size_t cap, int format, const char *ts,
                      const struct sl_dlog_entry *e);

/* The rate bound, pure (for tests): at <now_us>, with at most <rate> lines
 * a second, may a line of <outcome> be written? 1 = yes, with
 * *<left_out> set to the lines left out in the windows before (counts per
 * outcome in <by>, restarted), which the caller writes first; 0 = left
 * out (counted). */
struct sl_dlog_rate {
    uint64_t window_us;  /* start of the current one-second window; 0 = none yet */
    uint64_t lines;      /* written in it */
    uint64_t left[SL_DLOG_N_OUTCOMES]; /* left out, not yet said */
};
int sl_dlog_rate_take(struct sl_dlog_rate *r, uint64_t now_us, uint64_t rate, int outcome,
                      uint64_t by[SL_DLOG_N_OUTCOMES]);

/* Writes the count of lines left out once their window is over (the timer
 * does, so a burst that stops is told too), or at once when <all>. */
void sl_dlog_flush(int all);

/* Writes what is left (counts included) and closes the sink (at exit). */
void sl_dlog_close(void);

#endif

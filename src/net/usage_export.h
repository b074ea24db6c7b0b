/* sluice — usage that can be billed, from the sessions to the store or a
 * file ([usage], docs/usage.md).
 *
 *   sessions --sl_usage_sess_*()--> the process's table (limit/usage.h)
 *                                         |  every `interval`
 *                                         v
 *        export = store: one usage.lua call per identity-window, each
 *                        numbered so a retry is applied once
 *        export = FILE:  one JSON line per identity-window (core/lsink.h)
 *
 * Which identity: the one the request's limits are keyed by, as /stats
 * writes it (sl_identity_of_req() on the listener's sources), once per
 * request whatever the number of limits it meets. Bytes and connection
 * time go to the connection's identity (the same, asked without a
 * request: what byte limits use). Every listener is counted while export
 * is on, limited or not.
 *
 * Workers: each process (worker) keeps its own table and delivers it on
 * its own, under its own instance id; the store sums them as it sums
 * instances. Nothing is shared between processes. */
#ifndef SL_NET_USAGE_EXPORT_H
#define SL_NET_USAGE_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "limit/usage.h"
#include "proto/req-t.h"

struct sl_server;
struct sl_session;
struct sl_pend;
struct sl_verdict;
struct sl_metrics;

/* The process's exporter, NULL while export = off: the hooks below test it
 * first, so counting costs a branch when off. */
extern struct sl_uexp *sl_uexp_cur;

/* Sets the exporter up for srv->conf->usage (start, and after a reload
 * swapped the configuration in): made, reconfigured, or, for export = off,
 * closed (counts not yet delivered are dropped, counted and logged).
 * Returns 0 or -1 (out of memory, the file cannot be opened: logged). */
int sl_usage_export_apply(struct sl_server *srv);

/* At drain's end: delivers what is left. Returns 1 while deliveries are
 * in flight (then <done>(<srv>) is called once they have ended), 0 when
 * there is nothing to wait for. */
int sl_usage_export_final(struct sl_server *srv, void (*done)(struct sl_server *));

/* Closes the exporter (its timer, file); what was not delivered is
 * counted and logged. */
void sl_usage_export_close(void);

/* The sluice_usage_* metrics. */
void sl_usage_export_metrics(struct sl_metrics *m);

/* ---- the hooks (call only while sl_uexp_cur != NULL) ---------------------- */

/* A request <r> was framed on <s>. */
void sl_usage_sess_request(struct sl_session *s, const struct sl_req *r);

/* <n> of field <f> (bytes_in, bytes_out, rejected, delayed) for the
 * identity <id> (NULL: the connection's). */
void sl_usage_sess_add(struct sl_session *s, const char *id, enum sl_usage_field f, uint64_t n);

/* The connection's time is counted from now (accepted) / up to now (closed). */
void sl_usage_sess_open(struct sl_session *s);
void sl_usage_sess_close(struct sl_session *s);

/* The same, for the session core: nothing while export is off. */
static inline void sl_usage_open(struct sl_session *s)
{
    if (sl_uexp_cur != NULL)
        sl_usage_sess_open(s);
}

void sl_usage_close(struct sl_session *s);

#endif

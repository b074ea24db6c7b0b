/* sluice — access logs of http listeners (access_log = FILE): one line per
 * response, in the combined format of Apache and nginx or in json, written
 * through a sink that never blocks the loop (core/lsink.h), reopened on
 * SIGUSR1.
 *
 *   combined: 10.0.0.7 - - [28/Nov/2026:03:12:01 +0000] "GET /v1/items HTTP/1.1" 429 121 "-" "curl/8.0"
 *   json:     {"time":"2026-11-28T03:12:01.123Z","client_ip":"10.0.0.7","method":"GET",
 *              "path":"/v1/items","status":429,"bytes":121,"duration_ms":0.4,
 *              "identity":"ip:10.0.0.7","outcome":"rejected","limit":"per_ip"}
 *
 * The path is written without its query string (it often carries keys).
 * <bytes> counts what sluice sent to the client for the response, head
 * included; <duration_ms> runs from the request's head being whole to the
 * response's last byte handed to the socket.
 *
 * The session side is a few calls in sess_http.c, each behind one test of
 * a pointer (s->alog) or of sl_alog_any: a listener without access_log
 * pays nothing else. Requests are kept in order (pipelining): a response
 * from the upstream ends the oldest request sent upstream; an answer of
 * sluice's own (429, 400 ...) ends the request being decided. */
#ifndef SL_NET_ALOG_H
#define SL_NET_ALOG_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "conf/conf-t.h"
#include "proto/http-t.h"

struct sl_session;
struct sl_verdict;

/* Nonzero when some listener of the running configuration has an access log. */
extern int sl_alog_any;

/* Opens the access logs configuration <c> names (a file already open stays
 * open; one no longer named is closed once its lines are written).
 * Returns 0, or -1 when a file cannot be opened (logged; the logs of the
 * configuration before stay as they were). */
int sl_alog_apply(uv_loop_t *loop, const struct sl_conf *c);

/* Closes every access log once its lines are written (at exit). */
void sl_alog_close_all(void);

/* ---- the session's side (sess_http.c) ------------------------------------ */

/* Request head <hd> is whole: a record starts (the session's state is made
 * when its listener logs). */
void sl_alog_begin(struct sl_session *s, const struct sl_http_head *hd);

/* The limits' verdict on the request being decided (sess_decide.c). */
void sl_alog_verdict(struct sl_session *s, const struct sl_verdict *v);

/* The request being decided went upstream. */
void sl_alog_sent(struct sl_session *s);

/* An answer of sluice's own, <status>, <len> bytes, ends the request being
 * decided (or one whose head never was whole: a framing error, 408). */
void sl_alog_local(struct sl_session *s, int status, size_t len);

/* A final response's head from the upstream is about to go out. */
void sl_alog_head(struct sl_session *s);

/* The response to the oldest request sent upstream ended with <status>
 * (its own, or 502/504 in its place). */
void sl_alog_done(struct sl_session *s, int status);

/* The session ends: records never answered are written with status 499
 * (nginx's "client closed request"); the state is freed. */
void sl_alog_free(struct sl_session *s);

/* Formats one line (pure: for tests). <t_us>: wall clock at the request's
 * start; <dur_us> its duration. Returns the length. */
struct sl_alog_rec;
size_t sl_alog_format(char *out, size_t cap, int format, const struct sl_alog_rec *r,
                      int status, uint64_t bytes, uint64_t dur_us);

#endif

/* sluice — the admin HTTP endpoint: /metrics /healthz /readyz /stats, and
 * the limits API under /limits (admin/limits_api.h, through cbs.api).
 *
 * A minimal HTTP/1.1 server on the process's loop: GET only (and what
 * cbs.api takes under /limits), one request per
 * connection (Connection: close), request head capped at 8 KiB, 1 s to send
 * it, at most 64 connections (when full, the oldest one still sending its
 * head is closed for the new one). What it serves comes from callbacks, so admin/ knows nothing of the
 * modules it reports on. With a token set (sl_admin_set_token), every
 * request but /healthz and /readyz must carry it (admin/auth.h). */
#ifndef SL_ADMIN_ADMIN_H
#define SL_ADMIN_ADMIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <uv.h>

#include "conf/conf-t.h"

#define SL_ADMIN_MAX_CONNS 64 /* admin connections at once (each a descriptor) */

struct sl_admin;     /* opaque */
struct sl_metrics;   /* a Prometheus text writer, opaque */

/* Writes the metrics: call the sl_metrics_* functions below on <m>. */
typedef void sl_admin_metrics_cb(void *data, struct sl_metrics *m);
/* Writes the /stats JSON document to <out>. */
typedef void sl_admin_stats_cb(void *data, FILE *out);
/* Returns 1 when ready (for /readyz), else 0 and may set *why. */
typedef int sl_admin_ready_cb(void *data, const char **why);

/* The pages whose content comes from the callbacks. */
enum sl_admin_page { SL_ADMIN_METRICS, SL_ADMIN_STATS, SL_ADMIN_READY,
                     SL_ADMIN_API /* a JSON answer of cbs.api */ };

/* An answer owed to an admin client (see defer below); opaque. */
struct sl_admin_req;

/* Takes over a page request instead of the callbacks above: the answer is
 * given later with sl_admin_answer(). The master of several workers uses it
 * to gather their figures. */
typedef void sl_admin_defer_cb(void *data, enum sl_admin_page page, struct sl_admin_req *req);

/* A request for /limits or a path below it, as it came (the bytes are
 * valid during the call only; the path is not percent-decoded). */
struct sl_admin_call {
    const char *method;
    size_t      mlen;
    const char *path;    /* without the query */
    size_t      plen;
    const char *query;   /* after '?' ("" when none) */
    size_t      qlen;
};

/* Takes over a request under /limits (any method): answered exactly once,
 * at once or later, with sl_admin_answer_allow(). */
typedef void sl_admin_api_cb(void *data, const struct sl_admin_call *call,
                             struct sl_admin_req *req);

struct sl_admin_cbs {
    sl_admin_metrics_cb *metrics;
    sl_admin_stats_cb   *stats;
    sl_admin_ready_cb   *ready;
    void                *data;
    sl_admin_defer_cb   *defer;   /* NULL: answer at once from the callbacks */
    sl_admin_api_cb     *api;     /* NULL: /limits is not found */
};

/* Answers <req> (200 or 503) with <len> bytes of <body> (copied) and frees
 * it. Every deferred request must be answered exactly once; when its client
 * has gone meanwhile the answer is dropped. */
void sl_admin_answer(struct sl_admin_req *req, int status, const char *body, size_t len);

/* sl_admin_answer() with any status, an Allow header when <allow> is not
 * NULL (a 405's methods), and, for cbs.api's requests, application/json.
 * A 500 without a body says "internal server error". */
void sl_admin_answer_allow(struct sl_admin_req *req, int status, const char *allow,
                           const char *body, size_t len);

/* A request answered to a function instead of a client (a worker serving
 * the master's question): <done>(data, status, allow, body, len) gets
 * what sl_admin_answer_allow() was given (body NULL: a 500 without one).
 * NULL when out of memory. */
typedef void sl_admin_done_cb(void *data, int status, const char *allow, const char *body,
                              size_t len);
struct sl_admin_req *sl_admin_req_detached(sl_admin_done_cb *done, void *data);

/* Renders <page> from the callbacks of <cbs> into *body (malloc'd, *len
 * bytes). Returns the HTTP status: 200, 503 (not ready) or 500 (no memory;
 * *body is then NULL). */
int sl_admin_render(const struct sl_admin_cbs *cbs, enum sl_admin_page page, char **body,
                    size_t *len);

/* Binds <addr> and serves. Returns NULL (and logs) on failure. */
struct sl_admin *sl_admin_start(uv_loop_t *loop, const struct sl_addr *addr,
                                const struct sl_admin_cbs *cbs);

/* Sets the token every request but GET /healthz and /readyz must carry as
 * `Authorization: Bearer TOKEN` (else 401 with a WWW-Authenticate: Bearer
 * challenge); <token> is copied, NULL or "" for none. At start and at each
 * reload. Returns 0, or -1 when out of memory (the old token stays). */
int sl_admin_set_token(struct sl_admin *a, const char *token);

/* Stops listening, closes open admin connections, frees when closed. */
void sl_admin_close(struct sl_admin *a);

/* The port <a> listens on (the one the kernel chose when <addr> said 0). */
int sl_admin_port(const struct sl_admin *a);

/* Admin connections open now (accepted and not yet freed; the ones closing
 * included). */
int sl_admin_connections(const struct sl_admin *a);

/* How long a connection accepted from now on may take to send its request
 * head before it is closed (default 1000 ms). For tests. */
void sl_admin_set_head_timeout(struct sl_admin *a, uint64_t ms);

/* ---- Prometheus text format 0.0.4 writer ---- */

/* A writer onto <out> (borrowed: not closed by sl_metrics_close()). Write
 * errors are left in <out> for the caller (ferror). NULL when out of memory. */
struct sl_metrics *sl_metrics_open(FILE *out);
void sl_metrics_close(struct sl_metrics *m);

/* Writes to <out> one document made of the <n> Prometheus texts (texts[i],
 * lens[i] bytes; NULL: left out), one per worker: each family once, with the
 * HELP and TYPE lines of its first appearance, then the samples of worker 0,
 * 1, ... each with worker="<i>" as its first label. Returns 0, or -1 when out
 * of memory (part of the document may have been written). */
int sl_metrics_merge(FILE *out, const char *const *texts, const size_t *lens, int n);

/* Formats <v> as a sample value into <out> (size <cap>, 32 is enough): the
 * shortest decimal that reads back exactly, "+Inf", "-Inf" or "NaN". Returns
 * the length (as snprintf would). */
size_t sl_metrics_fmt_f64(char *out, size_t cap, double v);

/* Starts a metric family: "# HELP name help" and "# TYPE name type"
 * (type: "counter" | "gauge" | "histogram"). Each family once per scrape. */
void sl_metrics_family(struct sl_metrics *m, const char *name, const char *type,
                       const char *help);

/* One sample: name{labels} value. <labels> is NULL or pairs of strings
 * terminated by NULL: {"listener", "cache", NULL}; values are escaped. */
void sl_metrics_u64(struct sl_metrics *m, const char *name, const char *const *labels,
                    uint64_t v);
void sl_metrics_f64(struct sl_metrics *m, const char *name, const char *const *labels,
                    double v);

/* A histogram's samples (_bucket with le, _sum, _count) from per-bucket
 * (non-cumulative) counts; <bounds> in the unit of the metric (seconds),
 * <n> finite bounds, <counts> has n + 1 entries (the last is +Inf). */
void sl_metrics_histogram(struct sl_metrics *m, const char *name, const char *const *labels,
                          const double *bounds, const uint64_t *counts, int n, double sum);

#endif

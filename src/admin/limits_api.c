/* sluice — the limits API of the admin endpoint (see limits_api.h).
 *
 *   route: /limits[/NAME[/identities[/IDENTITY[/reset]]]]
 *     segments percent-decoded (bad: 400) --> the limit found (none: 404)
 *     --> method checked (405 with Allow) --> the limiter asked
 *     (limit/inspect.c) --> JSON written when it answers */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "admin/json.h"
#include "admin/limits_api.h"
#include "conf/units.h"
#include "core/err.h"
#include "identity/identity-t.h"
#include "limit/limiter.h"

#define NAME_MAX_LEN 64  /* a limit's name, decoded */
#define TOP_DEFAULT  10
#define TOP_CAP      1000

/* Closes memory stream <f> (writing into *<body>, *<len>: they are set by
 * the close) and answers with it. */
static void answer_json(struct sl_admin_req *req, int status, const char *allow, FILE *f,
                        char **body, size_t *len)
{
    int bad = ferror(f) != 0;
    bad |= fclose(f) != 0;
    if (bad)
        sl_admin_answer_allow(req, 500, NULL, NULL, 0);
    else
        sl_admin_answer_allow(req, status, allow, *body, *len);
    free(*body);
}

/* A stream for a JSON body into <*body>/<*len>; NULL (and a 500 answered
 * to <req>) when none can be had. */
static FILE *json_open(struct sl_admin_req *req, char **body, size_t *len)
{
    FILE *f = open_memstream(body, len);
    if (f == NULL)
        sl_admin_answer_allow(req, 500, NULL, NULL, 0);
    return f;
}

/* {"error": <msg>} with <status>. */
static void answer_error(struct sl_admin_req *req, int status, const char *allow, const char *msg)
{
    char *body = NULL;
    size_t len = 0;
    FILE *f = json_open(req, &body, &len);
    if (f == NULL) {
        return;
    }
    fputs("{\"error\":", f);
    sl_json_str(f, msg, strlen(msg));
    fputs("}\n", f);
    answer_json(req, status, allow, f, &body, &len);
}

static int is(const char *s, size_t n, const char *lit)
{
    return n == strlen(lit) && memcmp(s, lit, n) == 0;
}

/* ---- one identity ------------------------------------------------------ */

static void rate_str(FILE *f, uint64_t amount, uint64_t period_us, int bytes)
{
    char b[64];
    struct sl_rate r = { amount, period_us };
    sl_fmt_rate(&r, bytes, b, sizeof(b));
    sl_json_str(f, b, strlen(b));
}

static const char *const count_names[SL_LIM_COUNTS] = { "requests",  "rejected",  "delayed",
                                                        "bytes_in",  "bytes_out", "connections" };

static void on_look(void *data, const struct sl_lim_look *r)
{
    struct sl_admin_req *req = data;
    if (r->status != 0) {
        answer_error(req, r->status == SL_ESTORE ? 503 : 500, NULL, r->err);
        return;
    }
    char *body = NULL;
    size_t len = 0;
    FILE *f = json_open(req, &body, &len);
    if (f == NULL) {
        return;
    }
    fputs("{\"limit\":", f);
    sl_json_str(f, r->limit, strlen(r->limit));
    fputs(",\"identity\":", f);
    sl_json_str(f, r->identity, strlen(r->identity));
    fputs(",\"bucket\":", f);
    sl_json_str(f, r->key, strlen(r->key));
    fprintf(f, ",\"source\":\"%s\",\"known\":%s",
            r->per_conn ? "per_connection" : r->fleet ? "store" : "local",
            r->known ? "true" : "false");
    if (r->conn) {
        fprintf(f, ",\"max\":%" PRIu64 ",\"rate\":null,\"burst\":null", r->max);
    } else {
        fputs(",\"rate\":", f);
        rate_str(f, r->amount, r->period_us, r->bytes);
        fprintf(f, ",\"burst\":%" PRIu64, r->burst);
    }
    if (r->has_override) {
        fputs(",\"override\":{\"rate\":", f);
        rate_str(f, r->amount, r->period_us, r->bytes);
        fprintf(f, ",\"burst\":%" PRIu64 "}", r->burst);
    } else {
        fputs(",\"override\":null", f);
    }
    fprintf(f, ",\"remaining\":%" PRIu64, r->remaining);
    if (r->retry_us < 0)
        fputs(",\"retry_ms\":null", f);
    else
        fprintf(f, ",\"retry_ms\":%" PRIu64, ((uint64_t)r->retry_us + 999) / 1000);
    fprintf(f, ",\"reset_ms\":%" PRIu64, (r->reset_us + 999) / 1000);
    for (int c = 0; c < SL_LIM_COUNTS; c++)
        fprintf(f, ",\"%s\":%" PRIu64, count_names[c], r->counts[c]);
    fputs(",\"counts\":\"this instance\"}\n", f);
    answer_json(req, 200, NULL, f, &body, &len);
}

/* ---- reset ------------------------------------------------------------- */

struct reset_ctx {
    struct sl_admin_req *req;
    uint64_t             forget_ms;
    int                  fleet;
    char                 limit[NAME_MAX_LEN + 1];
    char                 identity[SL_ID_MAX + 1];
};

static void on_reset(void *data, int status, int64_t deleted, const char *err)
{
    struct reset_ctx *rc = data;
    if (status != 0) {
        answer_error(rc->req, status == SL_ECONF ? 409 : status == SL_ESTORE ? 503 : 500, NULL,
                     err != NULL ? err : "reset failed");
        free(rc);
        return;
    }
    char *body = NULL;
    size_t len = 0;
    FILE *f = json_open(rc->req, &body, &len);
    if (f == NULL) {
        free(rc);
        return;
    }
    fputs("{\"limit\":", f);
    sl_json_str(f, rc->limit, strlen(rc->limit));
    fputs(",\"identity\":", f);
    sl_json_str(f, rc->identity, strlen(rc->identity));
    fprintf(f, ",\"reset\":true,\"scope\":\"%s\",\"store_keys_deleted\":%" PRId64
               ",\"others_forget_within_ms\":%" PRIu64 "}\n",
            rc->fleet ? "fleet" : "process", deleted, rc->forget_ms);
    answer_json(rc->req, 200, NULL, f, &body, &len);
    free(rc);
}

/* ---- the busiest ------------------------------------------------------- */

/* Parses "top=N&by=COUNT" into *<n>, *<by>. Returns NULL or why it is bad. */
static const char *parse_top(const char *q, size_t qlen, size_t *n, int *by)
{
    *n = TOP_DEFAULT;
    *by = SL_LIM_REQUESTS;
    size_t i = 0;
    while (i < qlen) {
        size_t end = i;
        while (end < qlen && q[end] != '&')
            end++;
        const char *kv = q + i;
        size_t kvlen = end - i;
        i = end + 1;
        if (kvlen == 0)
            continue;
        const char *eq = memchr(kv, '=', kvlen);
        if (eq == NULL)
            return "a query parameter without a value";
        size_t klen = (size_t)(eq - kv), vlen = kvlen - klen - 1;
        char v[32];
        long dl = sl_pct_decode(eq + 1, vlen, v, sizeof(v));
        if (dl < 0)
            return "a query value is too long or badly percent-encoded";
        if (is(kv, klen, "top")) {
            if (dl == 0 || dl > 7 || strspn(v, "0123456789") != (size_t)dl)
                return "top: a whole number from 1 to 1000";
            unsigned long t = strtoul(v, NULL, 10);
            if (t < 1 || t > TOP_CAP)
                return "top: a whole number from 1 to 1000";
            *n = t;
        } else if (is(kv, klen, "by")) {
            if (strcmp(v, "requests") == 0)
                *by = SL_LIM_REQUESTS;
            else if (strcmp(v, "rejected") == 0)
                *by = SL_LIM_REJECTED;
            else if (strcmp(v, "bytes_in") == 0)
                *by = SL_LIM_BYTES_IN;
            else if (strcmp(v, "bytes_out") == 0)
                *by = SL_LIM_BYTES_OUT;
            else if (strcmp(v, "delayed") == 0)
                *by = SL_LIM_DELAYED;
            else if (strcmp(v, "connections") == 0)
                *by = SL_LIM_CONNECTIONS;
            else
                return "by: requests, rejected, delayed, bytes_in, bytes_out or connections";
        } else {
            return "unknown query parameter (top and by are known)";
        }
    }
    return NULL;
}

/* ---- routing ----------------------------------------------------------- */

void sl_limits_api(struct sl_limiter *lim, const struct sl_admin_call *call,
                   struct sl_admin_req *req)
{
    int get = is(call->method, call->mlen, "GET") || is(call->method, call->mlen, "HEAD");
    int post = is(call->method, call->mlen, "POST");
    /* the path after "/limits", split at '/' into at most 5 segments */
    const char *p = call->path + 7, *end = call->path + call->plen;
    const char *seg[5];
    size_t seglen[5];
    int nseg = 0;
    while (p < end) {
        p++; /* the '/' */
        const char *s = p;
        while (p < end && *p != '/')
            p++;
        if (nseg == 5) {
            answer_error(req, 404, NULL, "not found");
            return;
        }
        seg[nseg] = s;
        seglen[nseg++] = (size_t)(p - s);
    }
    if (nseg == 0 || (nseg == 1 && seglen[0] == 0)) {
        if (!get) {
            answer_error(req, 405, "GET, HEAD", "method not allowed");
            return;
        }
        char *body = NULL;
        size_t len = 0;
        FILE *f = json_open(req, &body, &len);
        if (f == NULL) {
            return;
        }
        if (lim != NULL)
            sl_limiter_list_json(lim, f);
        else
            fputs("{\"limits\":[]}\n", f);
        answer_json(req, 200, NULL, f, &body, &len);
        return;
    }
    if (nseg < 2 || !is(seg[1], seglen[1], "identities") ||
        (nseg == 4 && !is(seg[3], seglen[3], "reset")) || nseg > 4 ||
        (nseg >= 3 && seglen[2] == 0)) {
        answer_error(req, 404, NULL, "not found");
        return;
    }
    /* the method before anything else is looked at: a 405 says which */
    const char *allow = nseg == 4 ? "POST" : "GET, HEAD";
    if (nseg == 4 ? !post : !get) {
        answer_error(req, 405, allow, "method not allowed");
        return;
    }
    char name[NAME_MAX_LEN + 1];
    if (sl_pct_decode(seg[0], seglen[0], name, sizeof(name)) < 0) {
        answer_error(req, 400, NULL, "the limit name is badly percent-encoded or too long");
        return;
    }
    char identity[SL_ID_MAX + 1];
    if (nseg >= 3 && sl_pct_decode(seg[2], seglen[2], identity, sizeof(identity)) < 0) {
        answer_error(req, 400, NULL, "the identity is badly percent-encoded or too long");
        return;
    }
    int idx = lim != NULL ? sl_limiter_find(lim, name) : -1;
    if (idx < 0) {
        answer_error(req, 404, NULL, "no such limit");
        return;
    }
    if (nseg == 2) {
        size_t n;
        int by;
        const char *why = parse_top(call->query, call->qlen, &n, &by);
        if (why != NULL) {
            answer_error(req, 400, NULL, why);
            return;
        }
        char *body = NULL;
        size_t len = 0;
        FILE *f = json_open(req, &body, &len);
        if (f == NULL) {
            return;
        }
        sl_limiter_top_json(lim, idx, by, n, f);
        answer_json(req, 200, NULL, f, &body, &len);
        return;
    }
    if (nseg == 3) {
        sl_limiter_look(lim, idx, identity, on_look, req);
        return;
    }
    struct reset_ctx *rc = calloc(1, sizeof(*rc));
    if (rc == NULL) {
        sl_admin_answer_allow(req, 500, NULL, NULL, 0);
        return;
    }
    rc->req = req;
    rc->forget_ms = sl_limiter_forget_us(lim, idx) / 1000;
    rc->fleet = sl_limiter_store_backed(lim, idx);
    snprintf(rc->limit, sizeof(rc->limit), "%s", name);
    snprintf(rc->identity, sizeof(rc->identity), "%s", identity);
    sl_limiter_reset(lim, idx, identity, on_reset, rc);
}

/* sluice — usage that can be billed: counted from the sessions into the
 * process's table, delivered every interval to the store (usage.lua, each
 * delivery numbered so a retry is applied once) or to a file (JSON lines
 * through the threadpool sink). See net/usage_export.h, docs/usage.md. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "admin/admin.h"
#include "core/log.h"
#include "core/lsink.h"
#include "identity/identity.h"
#include "net/listener.h"
#include "net/session.h"
#include "net/session-i.h"
#include "net/turn.h"
#include "net/usage_export.h"
#include "store/store.h"

struct sl_uexp {
    struct sl_server *srv;
    struct sl_usage  *t;
    uv_timer_t       *timer;       /* every interval; closed on its own (its memory outlives us) */
    uv_timer_t       *more;        /* the rest of a delivery round, in the next loop turn */
    int               kind;        /* enum sl_usage_export */
    struct sl_lsink  *sink;        /* export = FILE */
    char             *path;
    uint64_t          interval_ms;
    uint64_t          ttl_ms;
    char              prefix[72];  /* [store] key_prefix */
    char              instance[128]; /* names this process's deliveries */
    int64_t           wall_off_us; /* wall clock minus the turn clock */
    uint64_t          since_us;    /* made then (wall clock): no time before it is counted */
    size_t            in_flight;   /* store calls not answered yet */
    uint64_t          duplicates;  /* deliveries the store had applied already */
    uint8_t           off;         /* export turned off with calls in flight: counts
                                      nothing, closed when the last one answers */
    uint8_t           flushed;     /* the exit's one delivery round is made: what it
                                      could not deliver is dropped, not retried */
    void            (*final_done)(struct sl_server *);
};

struct sl_uexp *sl_uexp_cur;

/* What was lost with tables closed (export turned off, exit), so the
 * counters stay monotonic across them. */
static uint64_t gone_dropped[SL_USAGE_FIELDS], gone_delivered, gone_failed, gone_duplicates;

static uint64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Now on the wall clock, read as the turn's time (one clock read a turn)
 * plus the offset measured at the last interval. */
static uint64_t now_us(const struct sl_uexp *x)
{
    return (uint64_t)((int64_t)sl_turn_now_us() + x->wall_off_us);
}

/* ---- the hooks --------------------------------------------------------------- */

/* The identity of request <r> on <s> (NULL: the connection's) into <out>;
 * 0 when memory ran short (nothing is counted then). */
static int identity_of(struct sl_session *s, const struct sl_req *r, char out[SL_ID_MAX + 1])
{
    if (sl_sess_ident(s) == NULL)
        return 0;
    sl_identity_of_req(s->l->conf, s->ident, r, out);
    return 1;
}

void sl_usage_sess_request(struct sl_session *s, const struct sl_req *r)
{
    char id[SL_ID_MAX + 1];
    if (!sl_uexp_cur->off && identity_of(s, r, id))
        sl_usage_add(sl_uexp_cur->t, id, SL_USAGE_REQUESTS, 1, now_us(sl_uexp_cur));
}

void sl_usage_sess_add(struct sl_session *s, const char *id, enum sl_usage_field f, uint64_t n)
{
    char buf[SL_ID_MAX + 1];
    if (sl_uexp_cur->off)
        return;
    if (id == NULL || id[0] == '\0') {
        if (!identity_of(s, NULL, buf))
            return;
        id = buf;
    }
    sl_usage_add(sl_uexp_cur->t, id, f, n, now_us(sl_uexp_cur));
}

void sl_usage_sess_open(struct sl_session *s)
{
    s->usage_at = now_us(sl_uexp_cur);
}

/* The time of <s> since it was last counted, up to now. */
static void count_time(struct sl_session *s, uint64_t now)
{
    char id[SL_ID_MAX + 1];
    /* (a mark left by an exporter closed since is not this one's) */
    uint64_t from = s->usage_at > sl_uexp_cur->since_us ? s->usage_at : sl_uexp_cur->since_us;
    if (sl_uexp_cur->off || s->usage_at == 0 || now <= from || !identity_of(s, NULL, id))
        return;
    sl_usage_add_span(sl_uexp_cur->t, id, from, now);
    s->usage_at = now;
}

void sl_usage_close(struct sl_session *s)
{
    if (s->usage_at != 0 && sl_uexp_cur != NULL)
        sl_usage_sess_close(s);
}

void sl_usage_sess_close(struct sl_session *s)
{
    count_time(s, now_us(sl_uexp_cur));
    s->usage_at = 0;
}

/* ---- delivery ---------------------------------------------------------------- */

/* "YYYYMMDDHHMM" (UTC) of window start <w> (seconds). */
static void stamp(uint64_t w, char out[16])
{
    time_t t = (time_t)w;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 16, "%Y%m%d%H%M", &tm);
}

/* Connection time <us> as seconds, exactly: "12.000345". */
static int secs(uint64_t us, char *out, size_t cap)
{
    return snprintf(out, cap, "%" PRIu64 ".%06" PRIu64, us / 1000000u, us % 1000000u);
}

static void maybe_final(struct sl_uexp *x);

static void on_applied(void *data, int status, const int64_t *vals, int n, const char *err)
{
    struct sl_usage_entry *e = data;
    struct sl_uexp *x = sl_uexp_cur;
    x->in_flight--;
    if (status != 0 || n < 1) {
        sl_log_warn_rl("usage_store", "usage: delivery to the store failed, kept to retry",
                       "identity=%s err=\"%s\"", e->id, err ? err : "");
        sl_usage_done(x->t, e, 0);
    } else {
        x->duplicates += vals[0] == 0; /* a retry of one the store had applied */
        sl_usage_done(x->t, e, 1);
    }
    maybe_final(x);
}

static void deliver_store(void *data, struct sl_usage_entry *e)
{
    struct sl_uexp *x = data;
    struct sl_store *st = x->srv->store;
    /* <prefix> (at most 64 bytes) usage_applied:{<identity>}:<12 digits> */
    char w[16], k1[128 + SL_ID_MAX], k2[128 + SL_ID_MAX], seq[24], ttl[24];
    char vals[SL_USAGE_FIELDS][32];
    stamp(e->window, w);
    int n1 = snprintf(k1, sizeof(k1), "%susage:{%s}:%s", x->prefix, e->id, w);
    int n2 = snprintf(k2, sizeof(k2), "%susage_applied:{%s}:%s", x->prefix, e->id, w);
    struct sl_str keys[2] = { { k1, (size_t)n1 }, { k2, (size_t)n2 } };
    struct sl_str args[3 + 2 * SL_USAGE_FIELDS];
    int na = 0;
    args[na++] = (struct sl_str){ x->instance, strlen(x->instance) };
    args[na].p = seq;
    args[na++].len = (size_t)snprintf(seq, sizeof(seq), "%" PRIu64, e->seq);
    args[na].p = ttl;
    args[na++].len = (size_t)snprintf(ttl, sizeof(ttl), "%" PRIu64, x->ttl_ms);
    for (int f = 0; f < SL_USAGE_FIELDS; f++) {
        if (e->out[f] == 0)
            continue;
        args[na++] = (struct sl_str){ sl_usage_field_names[f], strlen(sl_usage_field_names[f]) };
        args[na].p = vals[f];
        args[na++].len = f == SL_USAGE_CONN_US
                             ? (size_t)secs(e->out[f], vals[f], sizeof(vals[f]))
                             : (size_t)snprintf(vals[f], sizeof(vals[f]), "%" PRIu64, e->out[f]);
    }
    if (st == NULL || sl_store_eval(st, SL_SCRIPT_USAGE, 2, keys, na, args, on_applied, e) == NULL) {
        sl_usage_done(x->t, e, 0); /* the store is down: kept, merged, retried */
        return;
    }
    x->in_flight++;
}

static void deliver_file(void *data, struct sl_usage_entry *e)
{
    struct sl_uexp *x = data;
    char line[1024 + SL_ID_MAX], w[16], cs[32];
    time_t t = (time_t)e->window;
    struct tm tm;
    gmtime_r(&t, &tm);
    stamp(e->window, w);
    char iso[32];
    strftime(iso, sizeof(iso), "%Y-%m-%dT%H:%M:%SZ", &tm);
    secs(e->out[SL_USAGE_CONN_US], cs, sizeof(cs));
    /* Identities are printable and quote-free (the identity module hashes
     * anything else), so they go in as they are. */
    int n = snprintf(line, sizeof(line),
                     "{\"identity\":\"%s\",\"window\":\"%s\",\"window_start\":\"%s\","
                     "\"requests\":%" PRIu64 ",\"rejected\":%" PRIu64 ",\"delayed\":%" PRIu64
                     ",\"bytes_in\":%" PRIu64 ",\"bytes_out\":%" PRIu64
                     ",\"connection_seconds\":%s,\"instance\":\"%s\",\"seq\":%" PRIu64 "}\n",
                     e->id, w, iso, e->out[SL_USAGE_REQUESTS], e->out[SL_USAGE_REJECTED],
                     e->out[SL_USAGE_DELAYED], e->out[SL_USAGE_BYTES_IN],
                     e->out[SL_USAGE_BYTES_OUT], cs, x->instance, e->seq);
    /* A line the sink cannot take now (its buffer full) is kept and offered
     * again at the next interval, unchanged. */
    int ok = n > 0 && (size_t)n < sizeof(line) && sl_lsink_put(x->sink, line, (size_t)n) == 0;
    sl_usage_done(x->t, e, ok);
}

static void session_time(struct sl_session *s, void *arg)
{
    /* A PROXY header still coming will say who the client is: its time
     * so far goes to that identity, counted later. A connection older
     * than export = on is counted from the first interval that sees it. */
    if (s->usage_at == 0)
        s->usage_at = *(const uint64_t *)arg;
    else if (s->pp == NULL)
        count_time(s, *(const uint64_t *)arg);
}

/* Identity-windows delivered in one loop turn at most (about): a round of
 * a hundred thousand goes over a few hundred turns, with the traffic's I/O
 * between them, instead of holding the loop for all of it. */
#define BATCH 512

static sl_usage_deliver *deliverer(const struct sl_uexp *x)
{
    return x->kind == SL_USAGE_FILE ? deliver_file : deliver_store;
}

static void on_more(uv_timer_t *t)
{
    struct sl_uexp *x = t->data;
    int more = 0;
    if (x->off)
        return;
    sl_usage_take_some(x->t, deliverer(x), x, BATCH, &more);
    if (more)
        uv_timer_start(x->more, on_more, 0, 0);
}

/* The connections' time so far, for every open connection. */
static void count_sessions(struct sl_uexp *x)
{
    x->wall_off_us = (int64_t)wall_us() - (int64_t)sl_turn_now_us();
    uint64_t now = now_us(x);
    for (struct sl_listener *l = x->srv->listeners; l != NULL; l = l->next)
        sl_listener_each_session(l, session_time, &now);
}

/* Every interval: the connections' time, then a round over every
 * identity-window with something to deliver, BATCH a turn. A round still
 * going when the next interval comes goes on (what is behind it waits). */
static void on_timer(uv_timer_t *t)
{
    struct sl_uexp *x = t->data;
    count_sessions(x);
    if (!uv_is_active((uv_handle_t *)x->more))
        on_more(x->more);
}

/* At the end: everything at once (no traffic is left to interleave). */
static void flush(struct sl_uexp *x)
{
    count_sessions(x);
    uv_timer_stop(x->more);
    sl_usage_take(x->t, deliverer(x), x);
}

static void maybe_final(struct sl_uexp *x)
{
    if (x->in_flight != 0)
        return;
    void (*done)(struct sl_server *) = x->final_done;
    struct sl_server *srv = x->srv;
    x->final_done = NULL;
    if (x->off)
        sl_usage_export_close(); /* turned off while calls were in flight */
    if (done != NULL)
        done(srv);
}

int sl_usage_export_final(struct sl_server *srv, void (*done)(struct sl_server *))
{
    struct sl_uexp *x = sl_uexp_cur;
    if (x == NULL || x->srv != srv)
        return 0;
    /* One round only: when its answers are in, this is called again, and a
     * store that fails every delivery (an error reply, a timeout) would
     * otherwise be retried without end and the process never exit. */
    if (!x->flushed && x->in_flight == 0 && !x->off) {
        x->flushed = 1;
        flush(x);
    }
    if (x->in_flight == 0)
        return 0;
    x->final_done = done;
    return 1;
}

/* ---- setting up, closing ------------------------------------------------------- */

static void free_timer(uv_handle_t *h)
{
    free(h);
}

/* Counts what <x> still holds as dropped (it is closing), logs it. */
static void drop_rest(struct sl_uexp *x)
{
    struct sl_usage_stats st;
    sl_usage_stats(x->t, &st);
    gone_delivered += st.delivered;
    gone_failed += st.failed;
    gone_duplicates += x->duplicates;
    for (int f = 0; f < SL_USAGE_FIELDS; f++)
        gone_dropped[f] += st.dropped[f];
    if (st.entries == 0)
        return;
    uint64_t lost[SL_USAGE_FIELDS];
    sl_usage_drain(x->t, lost);
    for (int f = 0; f < SL_USAGE_FIELDS; f++)
        gone_dropped[f] += lost[f];
    sl_log_warn("usage: not delivered, dropped", "entries=%" PRIu64 " requests=%" PRIu64
                " bytes_in=%" PRIu64 " bytes_out=%" PRIu64, st.entries, lost[SL_USAGE_REQUESTS],
                lost[SL_USAGE_BYTES_IN], lost[SL_USAGE_BYTES_OUT]);
}

void sl_usage_export_close(void)
{
    struct sl_uexp *x = sl_uexp_cur;
    if (x == NULL)
        return;
    sl_uexp_cur = NULL;
    uv_close((uv_handle_t *)x->timer, free_timer);
    uv_close((uv_handle_t *)x->more, free_timer);
    drop_rest(x);
    sl_usage_free(x->t);
    if (x->sink != NULL)
        sl_lsink_close(x->sink);
    free(x->path);
    free(x);
}

int sl_usage_export_apply(struct sl_server *srv)
{
    const struct sl_usage_conf *c = &srv->conf->usage;
    struct sl_uexp *x = sl_uexp_cur;
    if (c->export_kind == SL_USAGE_OFF || (c->export_kind == SL_USAGE_STORE && srv->store == NULL)) {
        if (x != NULL && x->in_flight == 0) {
            sl_usage_export_close();
        } else if (x != NULL) {
            x->off = 1; /* closed when the calls in flight have answered */
            uv_timer_stop(x->timer);
            uv_timer_stop(x->more);
        }
        return 0;
    }
    int fresh = x == NULL;
    if (fresh) {
        if ((x = calloc(1, sizeof(*x))) == NULL || (x->timer = malloc(sizeof(*x->timer))) == NULL ||
            (x->more = malloc(sizeof(*x->more))) == NULL ||
            (x->t = sl_usage_new(c->window_us / 1000000u, (size_t)c->max_pending)) == NULL) {
            if (x != NULL) {
                free(x->timer);
                free(x->more);
            }
            free(x);
            sl_log_error("usage: out of memory", "%s", "");
            return -1;
        }
        x->srv = srv;
        uv_timer_init(srv->loop, x->timer);
        x->timer->data = x;
        uv_timer_init(srv->loop, x->more);
        x->more->data = x;
        x->wall_off_us = (int64_t)wall_us() - (int64_t)sl_turn_now_us();
        x->since_us = now_us(x);
        char host[64] = "sluice";
        gethostname(host, sizeof(host) - 1);
        /* Its own name, not the store client's: a table made anew (export
         * off, then on) numbers its deliveries from 1 again, and must not
         * meet the record of the old one's. */
        snprintf(x->instance, sizeof(x->instance), "%s:%d:%08x", host, (int)getpid(),
                 (unsigned)(uv_hrtime() & 0xffffffffu));
    }
    /* The file first: if it cannot be opened, nothing changes. */
    if (c->export_kind == SL_USAGE_FILE && (x->path == NULL || strcmp(x->path, c->file) != 0)) {
        int err = 0;
        struct sl_lsink *k = sl_lsink_open(srv->loop, c->file, &err);
        char *p = k != NULL ? strdup(c->file) : NULL;
        if (p == NULL) {
            sl_log_error("usage: cannot open the export file", "file=%s err=%s", c->file,
                         err ? uv_strerror(err) : "out of memory");
            if (k != NULL)
                sl_lsink_close(k);
            if (fresh) {
                sl_usage_free(x->t);
                uv_close((uv_handle_t *)x->timer, free_timer);
                uv_close((uv_handle_t *)x->more, free_timer);
                free(x);
            }
            return -1;
        }
        if (x->sink != NULL)
            sl_lsink_close(x->sink);
        free(x->path);
        x->sink = k;
        x->path = p;
    } else if (c->export_kind != SL_USAGE_FILE && x->sink != NULL) {
        sl_lsink_close(x->sink);
        x->sink = NULL;
        free(x->path);
        x->path = NULL;
    }
    x->kind = c->export_kind;
    x->off = 0;
    x->ttl_ms = c->ttl_us / 1000u;
    snprintf(x->prefix, sizeof(x->prefix), "%s", srv->conf->store.key_prefix);
    sl_usage_set(x->t, c->window_us / 1000000u, (size_t)c->max_pending);
    uint64_t ms = c->interval_us / 1000u;
    if (fresh || ms != x->interval_ms || !uv_is_active((uv_handle_t *)x->timer))
        uv_timer_start(x->timer, on_timer, ms, ms);
    x->interval_ms = ms;
    sl_uexp_cur = x;
    return 0;
}

void sl_usage_export_metrics(struct sl_metrics *m)
{
    struct sl_usage_stats st;
    memset(&st, 0, sizeof(st));
    uint64_t dups = gone_duplicates;
    if (sl_uexp_cur != NULL) {
        sl_usage_stats(sl_uexp_cur->t, &st);
        dups += sl_uexp_cur->duplicates;
    }
    sl_metrics_family(m, "sluice_usage_flushed_total", "counter",
                      "[usage]: identity-window deliveries applied (by the store, or written to "
                      "the sink of export = FILE).");
    sl_metrics_u64(m, "sluice_usage_flushed_total", NULL, st.delivered + gone_delivered);
    sl_metrics_family(m, "sluice_usage_flush_failures_total", "counter",
                      "[usage]: deliveries that failed (store down, timeout, error reply, sink "
                      "full); each is kept and retried with its number.");
    sl_metrics_u64(m, "sluice_usage_flush_failures_total", NULL, st.failed + gone_failed);
    sl_metrics_family(m, "sluice_usage_duplicates_total", "counter",
                      "[usage]: retried deliveries the store had applied already (a reply was "
                      "lost), not counted again.");
    sl_metrics_u64(m, "sluice_usage_duplicates_total", NULL, dups);
    sl_metrics_family(m, "sluice_usage_entries", "gauge",
                      "[usage]: identity-windows held (counted since the last interval, or "
                      "waiting for the store); at most max_pending.");
    sl_metrics_u64(m, "sluice_usage_entries", NULL, st.entries);
    sl_metrics_family(m, "sluice_usage_pending", "gauge",
                      "[usage]: identity-windows whose delivery failed, waiting to be retried.");
    sl_metrics_u64(m, "sluice_usage_pending", NULL, st.waiting);
    sl_metrics_family(m, "sluice_usage_dropped_total", "counter",
                      "[usage]: counts dropped because max_pending identity-windows were held "
                      "(or export was turned off with counts undelivered), per field.");
    for (int f = 0; f < SL_USAGE_FIELDS; f++) {
        const char *labels[] = { "field", sl_usage_field_names[f], NULL };
        uint64_t v = st.dropped[f] + gone_dropped[f];
        if (f == SL_USAGE_CONN_US)
            sl_metrics_f64(m, "sluice_usage_dropped_total", labels, (double)v / 1e6);
        else
            sl_metrics_u64(m, "sluice_usage_dropped_total", labels, v);
    }
}

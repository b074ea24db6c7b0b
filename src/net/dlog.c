/* sluice — the decision log (see dlog.h). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "core/log.h"
#include "core/lsink.h"
#include "net/dlog.h"
#include "net/turn.h"

#define WINDOW_US 1000000u
#define LINE_CAP  4096

static const char *const outcome_names[SL_DLOG_N_OUTCOMES] = { "allowed", "rejected", "delayed",
                                                              "shadow_rejected" };

/* The process's decision log: one sink, one rate. */
static struct sl_lsink *sink;
static struct sl_dlog_rate rate;
static int cur_format;       /* log_format of the last line */
static uv_timer_t timer;     /* writes the count once a window with lines left out ends */
static uint8_t timer_open, timer_armed;

static void on_timer(uv_timer_t *t);

int sl_dlog_rate_take(struct sl_dlog_rate *r, uint64_t now_us, uint64_t max, int outcome,
                      uint64_t by[SL_DLOG_N_OUTCOMES])
{
    memset(by, 0, SL_DLOG_N_OUTCOMES * sizeof(by[0]));
    if (r->window_us == 0 || now_us - r->window_us >= WINDOW_US) {
        /* a new window: what the last ones left out is said first */
        memcpy(by, r->left, sizeof(r->left));
        memset(r->left, 0, sizeof(r->left));
        r->window_us = now_us != 0 ? now_us : 1;
        r->lines = 0;
    }
    if (r->lines >= max) {
        r->left[outcome]++;
        return 0;
    }
    r->lines++;
    return 1;
}

static void timestamp(char *ts, size_t cap)
{
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    snprintf(ts, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000));
}

/* Appends " key=value" (value quoted as logfmt wants) to <kv>. */
static size_t put(char *kv, size_t o, size_t cap, const char *k, const char *v, size_t vn)
{
    char q[600];
    if (o >= cap)
        return o;
    int n = snprintf(kv + o, cap - o, "%s%s=%s", o > 0 ? " " : "", k, sl_log_quote(v, vn, q, sizeof(q)));
    return n < 0 ? o : o + (size_t)n;
}

static size_t put_u64(char *kv, size_t o, size_t cap, const char *k, uint64_t v)
{
    char b[24];
    int n = snprintf(b, sizeof(b), "%" PRIu64, v);
    return put(kv, o, cap, k, b, (size_t)n);
}

size_t sl_dlog_format(char *out, size_t cap, int format, const char *ts,
                      const struct sl_dlog_entry *e)
{
    char kv[2048];
    size_t o = 0;
    if (sl_log_tag[0] != '\0')
        o = (size_t)snprintf(kv, sizeof(kv), "%s", sl_log_tag);
    o = put(kv, o, sizeof(kv), "listener", e->listener, strlen(e->listener));
    o = put(kv, o, sizeof(kv), "limit", e->limit, strlen(e->limit));
    o = put(kv, o, sizeof(kv), "identity", e->identity, strlen(e->identity));
    o = put(kv, o, sizeof(kv), "request", e->request, e->request_len);
    if (e->cost > 0)
        o = put_u64(kv, o, sizeof(kv), "cost", e->cost);
    o = put(kv, o, sizeof(kv), "outcome", outcome_names[e->outcome], strlen(outcome_names[e->outcome]));
    const char *wk = e->outcome == SL_DLOG_DELAYED ? "delay_ms" : "retry_ms";
    if (e->wait_ms == SL_DLOG_NEVER)
        o = put(kv, o, sizeof(kv), wk, "never", 5);
    else if (e->wait_ms != SL_DLOG_NONE && e->outcome != SL_DLOG_ALLOWED)
        o = put_u64(kv, o, sizeof(kv), wk, e->wait_ms);
    if (e->store_down)
        o = put(kv, o, sizeof(kv), "store_down", "1", 1);
    if (o >= sizeof(kv))
        kv[sizeof(kv) - 1] = '\0';
    return sl_log_format_line(out, cap, (enum sl_log_format)format, ts, SL_LOG_INFO, "decision", kv);
}

static void put_line(const char *line, size_t n)
{
    if (sink != NULL)
        (void)sl_lsink_put(sink, line, n);
}

/* The count line of what the windows before left out. */
static void write_left_out(const uint64_t by[SL_DLOG_N_OUTCOMES])
{
    uint64_t total = 0;
    for (int i = 0; i < SL_DLOG_N_OUTCOMES; i++)
        total += by[i];
    if (total == 0)
        return;
    char kv[512], ts[64], line[LINE_CAP];
    size_t o = 0;
    if (sl_log_tag[0] != '\0')
        o = (size_t)snprintf(kv, sizeof(kv), "%s", sl_log_tag);
    o = put_u64(kv, o, sizeof(kv), "repeated", total);
    for (int i = 0; i < SL_DLOG_N_OUTCOMES; i++)
        o = put_u64(kv, o, sizeof(kv), outcome_names[i], by[i]);
    timestamp(ts, sizeof(ts));
    put_line(line, sl_log_format_line(line, sizeof(line), (enum sl_log_format)cur_format, ts,
                                      SL_LOG_INFO, "decision lines left out", kv));
}

void sl_dlog_flush(int all)
{
    uint64_t by[SL_DLOG_N_OUTCOMES] = { 0 };
    uint64_t now = sl_turn_now_us();
    if (all || (rate.window_us != 0 && now - rate.window_us >= WINDOW_US)) {
        memcpy(by, rate.left, sizeof(by));
        memset(rate.left, 0, sizeof(rate.left));
    }
    write_left_out(by);
}

static void arm(uint64_t now)
{
    uint64_t end = rate.window_us + WINDOW_US;
    uint64_t left_ms = end > now ? (end - now + 999) / 1000 : 0;
    timer_armed = 1;
    uv_timer_start(&timer, on_timer, left_ms + 1, 0);
}

static void on_timer(uv_timer_t *t)
{
    (void)t;
    timer_armed = 0;
    uint64_t now = sl_turn_now_us();
    if (now - rate.window_us < WINDOW_US) {
        /* the loop's clock runs behind this one: not over yet */
        arm(now);
        return;
    }
    sl_dlog_flush(0);
}

int sl_dlog_take(uv_loop_t *loop, const struct sl_conf *c, int outcome)
{
    uint64_t now = sl_turn_now_us();
    if (sink != NULL && rate.window_us != 0 && now - rate.window_us < WINDOW_US &&
        rate.lines >= c->decision_log_rate) {
        /* the common case in a storm: counted, nothing else */
        rate.left[outcome]++;
        if (!timer_armed && timer_open)
            arm(now);
        return 0;
    }
    if (sink == NULL) {
        int err;
        sink = sl_lsink_open(loop, NULL, &err);
        if (sink == NULL)
            return 0;
        uv_timer_init(loop, &timer);
        uv_unref((uv_handle_t *)&timer);
        timer_open = 1;
    }
    cur_format = (int)c->log_format;
    uint64_t by[SL_DLOG_N_OUTCOMES];
    int ok = sl_dlog_rate_take(&rate, now, c->decision_log_rate, outcome, by);
    write_left_out(by);
    if (!ok && !timer_armed && timer_open)
        arm(now); /* the count is written when this window ends, should no
                     decision come then to carry it */
    return ok;
}

void sl_dlog_put(const struct sl_conf *c, const struct sl_dlog_entry *e)
{
    char ts[64], line[LINE_CAP];
    timestamp(ts, sizeof(ts));
    put_line(line, sl_dlog_format(line, sizeof(line), (int)c->log_format, ts, e));
}

void sl_dlog_write(uv_loop_t *loop, const struct sl_conf *c, const struct sl_dlog_entry *e)
{
    if (sl_dlog_take(loop, c, e->outcome))
        sl_dlog_put(c, e);
}

void sl_dlog_close(void)
{
    if (sink == NULL)
        return;
    sl_dlog_flush(1);
    if (timer_open) {
        uv_close((uv_handle_t *)&timer, NULL);
        timer_open = 0;
        timer_armed = 0;
    }
    sl_lsink_close(sink);
    sink = NULL;
}

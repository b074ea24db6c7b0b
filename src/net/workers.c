/* sluice — worker processes and their master (see workers.h).
 *
 * The master's view of one worker slot:
 *
 *   spawn ──> RUNNING ──('R' frame)──> READY ──(exit)──> DEAD ──(1 s, or at
 *               │                                        once if it lived 1 s
 *               └──(exit before 'R' at startup: the      or more)──> spawn
 *                   master stops the others, exits 1)
 *
 * A question to the workers (an admin page) is a round: one byte to every
 * READY worker, answered in order on each pipe; the round completes when every
 * worker asked has answered or died, or after ROUND_MS with what it has. */
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "admin/admin.h"
#include "admin/json.h"
#include "admin/limits_merge.h"
#include "admin/process.h"
#include "conf/conf.h"
#include "core/err.h"
#include "core/log.h"
#include "core/notify.h"
#include "net/listener.h"
#include "net/workers.h"

#define CHAN_FD       3                 /* the control pipe in a worker */
#define FRAME_HEAD    7                 /* type, status, length */
#define FRAME_MAX     (256u << 20)      /* a worker's answer larger than this is an error */
#define ROUND_MS      2000              /* a question waits this long for the workers */
#define RESPAWN_MS    1000              /* a worker that died young waits this long */

extern char **environ;

static void put_u16(unsigned char *p, unsigned v)
{
    p[0] = (unsigned char)(v & 0xff);
    p[1] = (unsigned char)(v >> 8);
}

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---- the worker's side -------------------------------------------------- */

int sl_worker_from_env(int *index, int *count)
{
    const char *v = getenv("SLUICE_WORKER");
    if (v == NULL)
        return 0;
    int i, n, used = 0;
    if (sscanf(v, "%d/%d%n", &i, &n, &used) != 2 || v[used] != '\0' || n < 2 || n > 64 || i < 0 ||
        i >= n) {
        sl_log_error("SLUICE_WORKER is malformed (expected i/N)", "value=\"%.40s\"", v);
        return -1;
    }
    *index = i;
    *count = n;
    return 1;
}

void sl_worker_share(struct sl_conf *conf, int count)
{
    for (struct sl_listener_conf *l = conf->listeners; l != NULL; l = l->next)
        l->max_connections = (l->max_connections + (uint64_t)count - 1) / (uint64_t)count;
}

struct frame_write {
    uv_write_t    req;
    unsigned char data[];
};

/* An answer owed to the master, in the order the questions came: a limits
 * API question may be answered later (the store), and the master reads the
 * answers of one pipe in order. */
struct owed {
    struct owed *next;
    char         type;
    int          done;
    int          status;
    char        *body;
    size_t       len;
};

#define API_MAX 16384 /* a limits API question: method, path, query (the admin head is 8 KiB) */

static struct {
    uv_pipe_t          pipe;
    struct sl_server  *srv;
    int                open;
    struct owed       *owed, **owed_tail;
    /* a limits API question being read: 'L', u32 length, then the bytes */
    unsigned char      hdr[5];
    size_t             hdr_got;
    char              *q;
    size_t             q_len, q_got;
} chan;

static void on_frame_written(uv_write_t *req, int status)
{
    (void)status; /* a master that has gone is seen by the read side */
    free(req);
}

static void send_frame(char type, int status, const char *body, size_t len)
{
    struct frame_write *w = malloc(sizeof(*w) + FRAME_HEAD + len);
    if (w == NULL) {
        sl_log_error("cannot answer the master", "err=\"out of memory\"");
        return;
    }
    w->data[0] = (unsigned char)type;
    put_u16(w->data + 1, (unsigned)status);
    put_u32(w->data + 3, (uint32_t)len);
    if (len > 0)
        memcpy(w->data + FRAME_HEAD, body, len);
    uv_buf_t b = uv_buf_init((char *)w->data, (unsigned)(FRAME_HEAD + len));
    if (uv_write(&w->req, (uv_stream_t *)&chan.pipe, &b, 1, on_frame_written) < 0)
        free(w);
}

/* Sends the answers now complete at the head of the queue. */
static void owed_flush(void)
{
    while (chan.owed != NULL && chan.owed->done) {
        struct owed *o = chan.owed;
        chan.owed = o->next;
        if (chan.owed == NULL)
            chan.owed_tail = &chan.owed;
        if (chan.open)
            send_frame(o->type, o->status, o->body, o->len);
        free(o->body);
        free(o);
    }
}

static struct owed *owed_add(char type)
{
    struct owed *o = calloc(1, sizeof(*o));
    if (o == NULL)
        return NULL;
    o->type = type;
    if (chan.owed_tail == NULL)
        chan.owed_tail = &chan.owed;
    *chan.owed_tail = o;
    chan.owed_tail = &o->next;
    return o;
}

/* Owed answer <o> is ready: <body> copied (NULL: none). */
static void owed_done(struct owed *o, int status, const char *body, size_t len)
{
    o->status = status;
    o->done = 1;
    if (body != NULL && len > 0 && (o->body = malloc(len)) != NULL) {
        memcpy(o->body, body, len);
        o->len = len;
    }
    owed_flush();
}

/* A limits API answer: "<Allow value>\0<JSON>" (the master needs both). */
static void on_api_done(void *data, int status, const char *allow, const char *body, size_t len)
{
    struct owed *o = data;
    size_t al = allow != NULL ? strlen(allow) : 0;
    char *b = malloc(al + 1 + len);
    if (b == NULL) {
        owed_done(o, 500, NULL, 0);
        return;
    }
    memcpy(b, allow != NULL ? allow : "", al);
    b[al] = '\0';
    if (len > 0)
        memcpy(b + al + 1, body, len);
    owed_done(o, body == NULL && status == 500 ? 500 : status, b, al + 1 + len);
    free(b);
}

/* The master's limits API question <q> (<len> bytes: method, path and
 * query, each ending in NUL) served by this worker. */
static void serve_api_question(const char *q, size_t len)
{
    struct owed *o = owed_add('L');
    if (o == NULL)
        return; /* the master's round times out for this worker */
    const char *m = q, *p = memchr(q, '\0', len);
    const char *qs = p != NULL ? memchr(p + 1, '\0', len - (size_t)(p + 1 - q)) : NULL;
    if (p == NULL || qs == NULL || chan.srv->stopped) {
        owed_done(o, 503, NULL, 0);
        return;
    }
    p++;
    qs++;
    struct sl_admin_req *req = sl_admin_req_detached(on_api_done, o);
    if (req == NULL) {
        owed_done(o, 500, NULL, 0);
        return;
    }
    const struct sl_admin_call call = { m, strlen(m), p, strlen(p), qs, strnlen(qs, len) };
    struct sl_admin_cbs cbs;
    sl_server_admin_cbs(chan.srv, &cbs);
    cbs.api(cbs.data, &call, req);
}

static void chan_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    static char in[64];
    (void)h;
    (void)hint;
    *buf = uv_buf_init(in, sizeof(in));
}

static void chan_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    if (nread < 0) {
        uv_read_stop(s);
        if (!chan.srv->draining)
            sl_log_warn("the master has gone: draining", "%s", "");
        sl_server_drain(chan.srv);
        return;
    }
    struct sl_admin_cbs cbs;
    sl_server_admin_cbs(chan.srv, &cbs);
    for (ssize_t i = 0; i < nread; i++) {
        char q = buf->base[i];
        /* inside a limits API question: its header, then its bytes */
        if (chan.hdr_got > 0 && chan.hdr_got < 5) {
            chan.hdr[chan.hdr_got++] = (unsigned char)q;
            if (chan.hdr_got == 5) {
                chan.q_len = get_u32(chan.hdr + 1);
                chan.q_got = 0;
                chan.q = chan.q_len <= API_MAX ? malloc(chan.q_len + 1) : NULL;
                if (chan.q_len == 0 || chan.q == NULL) {
                    /* not a question we can hold: the pipe is out of step */
                    sl_log_error("bad question from the master: draining", "len=%zu", chan.q_len);
                    uv_read_stop(s);
                    sl_server_drain(chan.srv);
                    return;
                }
            }
            continue;
        }
        if (chan.q != NULL) {
            chan.q[chan.q_got++] = q;
            if (chan.q_got == chan.q_len) {
                char *question = chan.q;
                question[chan.q_len] = '\0';
                chan.q = NULL;
                chan.hdr_got = 0;
                serve_api_question(question, chan.q_len);
                free(question);
            }
            continue;
        }
        if (q == 'L') {
            chan.hdr[0] = (unsigned char)q;
            chan.hdr_got = 1;
            continue;
        }
        struct owed *o = owed_add(q);
        if (o == NULL)
            continue;
        if (chan.srv->stopped) { /* nothing left to report on */
            owed_done(o, 503, "not ready: stopped\n", 20);
            continue;
        }
        enum sl_admin_page page = q == 'm' ? SL_ADMIN_METRICS : q == 's' ? SL_ADMIN_STATS
                                                                          : SL_ADMIN_READY;
        char *body;
        size_t len;
        int status = sl_admin_render(&cbs, page, &body, &len);
        owed_done(o, status, body, len);
        free(body);
    }
}

int sl_worker_attach(struct sl_server *srv)
{
    chan.srv = srv;
    int rc = uv_pipe_init(srv->loop, &chan.pipe, 0);
    if (rc == 0) {
        chan.open = 1;
        rc = uv_pipe_open(&chan.pipe, CHAN_FD);
    }
    if (rc == 0)
        rc = uv_read_start((uv_stream_t *)&chan.pipe, chan_alloc, chan_read);
    if (rc < 0) {
        sl_log_error("cannot use the master's pipe", "fd=%d err=%s", CHAN_FD, uv_strerror(rc));
        return -1;
    }
    /* The pipe alone does not keep a draining worker running. */
    uv_unref((uv_handle_t *)&chan.pipe);
    send_frame('R', 0, NULL, 0);
    return 0;
}

void sl_worker_detach(void)
{
    if (chan.open && !uv_is_closing((uv_handle_t *)&chan.pipe))
        uv_close((uv_handle_t *)&chan.pipe, NULL);
    chan.open = 0;
}

/* ---- the master --------------------------------------------------------- */

struct master;

struct round {
    struct master       *m;
    enum sl_admin_page   page;
    struct sl_admin_req *req;
    int                  owed;      /* answers still to come */
    int                  answered;  /* the admin request has its answer */
    int                  timer_open;
    uv_timer_t           timer;
    char               **body;      /* [n]: a worker's answer, NULL if none */
    size_t              *len;
    int                 *status;
    size_t               top;       /* a limits API ?top question: its N; 0: another */
};

struct ask {                        /* a question a worker has not answered yet */
    struct round *r;
    struct ask   *next;
};

struct worker {
    struct master *m;
    int            idx;
    uv_process_t   proc;
    uv_pipe_t      chan;
    int            handles;         /* of proc and chan, not yet closed */
    int            running;         /* spawned, exit not seen */
    int            ready;           /* its 'R' came */
    uint64_t       born_ms;
    unsigned char *in;              /* frames not complete yet */
    size_t         in_len, in_cap;
    struct ask    *asks, *asks_tail;
};

struct master {
    uv_loop_t         *loop;
    struct sl_conf    *conf;
    sl_master_load_fn *load;
    char             **argv;
    char               exe[PATH_MAX];
    int                n;
    struct worker     *w;
    uv_signal_t        sigs[4];
    uv_timer_t         respawn;
    struct sl_admin   *admin;
    int                starting;    /* not every worker has said 'R' yet */
    int                stopping;    /* a stop signal came */
    uint64_t           restarts;
    int                exit_code;
};

static void spawn(struct worker *w);

/* SIGTERM goes to every running worker (one still starting just ends);
 * other signals only to those that said they are up: before that their
 * default action would end the worker. */
static void signal_workers(struct master *m, int sig)
{
    for (int i = 0; i < m->n; i++)
        if (m->w[i].running && (m->w[i].ready || sig == SIGTERM))
            uv_process_kill(&m->w[i].proc, sig);
}

static int all_gone(const struct master *m)
{
    for (int i = 0; i < m->n; i++)
        if (m->w[i].running || m->w[i].handles > 0)
            return 0;
    return 1;
}

/* Once the workers are gone after a stop, the master's own handles go. */
static void maybe_done(struct master *m)
{
    if (!m->stopping || !all_gone(m))
        return;
    if (m->admin != NULL) {
        sl_admin_close(m->admin);
        m->admin = NULL;
    }
    if (!uv_is_closing((uv_handle_t *)&m->respawn))
        uv_close((uv_handle_t *)&m->respawn, NULL);
    for (int i = 0; i < 4; i++)
        if (!uv_is_closing((uv_handle_t *)&m->sigs[i]))
            uv_close((uv_handle_t *)&m->sigs[i], NULL);
    sl_notify_close();
}

/* ---- rounds: questions to every worker ---------------------------------- */

static void round_maybe_free(struct round *r)
{
    if (!r->answered || r->timer_open || r->owed > 0)
        return;
    for (int i = 0; i < r->m->n; i++)
        free(r->body[i]);
    free(r->body);
    free(r->len);
    free(r->status);
    free(r);
}

static void on_round_timer_close(uv_handle_t *h)
{
    struct round *r = h->data;
    r->timer_open = 0;
    round_maybe_free(r);
}

static void answer_metrics(struct round *r, FILE *f)
{
    struct master *m = r->m;
    const char *texts[64];
    int got = 0;
    for (int i = 0; i < m->n; i++) {
        texts[i] = r->body[i] != NULL && r->status[i] == 200 ? r->body[i] : NULL;
        got += texts[i] != NULL;
    }
    int failed = sl_metrics_merge(f, texts, r->len, m->n) < 0;
    struct sl_metrics *mw = sl_metrics_open(f);
    if (mw == NULL) {
        fputs("# out of memory\n", f);
        return;
    }
    int up = 0;
    for (int i = 0; i < m->n; i++)
        up += m->w[i].ready;
    sl_metrics_family(mw, "sluice_workers", "gauge", "Worker processes configured.");
    sl_metrics_u64(mw, "sluice_workers", NULL, (uint64_t)m->n);
    sl_metrics_family(mw, "sluice_workers_ready", "gauge", "Worker processes running and listening.");
    sl_metrics_u64(mw, "sluice_workers_ready", NULL, (uint64_t)up);
    sl_metrics_family(mw, "sluice_worker_restarts_total", "counter",
                      "Workers that exited unexpectedly and were started again.");
    sl_metrics_u64(mw, "sluice_worker_restarts_total", NULL, m->restarts);
    sl_metrics_family(mw, "sluice_workers_answered", "gauge",
                      "Workers whose figures are in this document.");
    sl_metrics_u64(mw, "sluice_workers_answered", NULL, (uint64_t)got);
    sl_build_reload_metrics(mw);
    sl_metrics_close(mw);
    if (failed)
        fputs("# out of memory: some workers' figures are missing\n", f);
}

static void answer_stats(struct round *r, FILE *f)
{
    struct master *m = r->m;
    fprintf(f, "{\"workers\":[");
    for (int i = 0; i < m->n; i++) {
        const struct worker *w = &m->w[i];
        size_t len = r->len[i];
        while (r->body[i] != NULL && len > 0 && r->body[i][len - 1] == '\n')
            len--;
        fprintf(f, "%s{\"worker\":%d,\"pid\":%d,\"ready\":%s,\"stats\":", i ? "," : "", i,
                w->running ? w->proc.pid : 0, w->running && w->ready ? "true" : "false");
        if (r->body[i] != NULL && r->status[i] == 200 && len > 0)
            fprintf(f, "%.*s}", (int)len, r->body[i]);
        else
            fputs("null}", f);
    }
    fprintf(f, "],\"worker_restarts\":%" PRIu64 "}\n", m->restarts);
}

/* 200 when every worker is ready, else 503 with the first reason. */
static int answer_ready(struct round *r, FILE *f)
{
    struct master *m = r->m;
    for (int i = 0; i < m->n; i++) {
        if (r->body[i] == NULL) {
            fprintf(f, "not ready: worker %d is not running\n", i);
            return 503;
        }
        if (r->status[i] != 200) {
            size_t len = r->len[i];
            const char *b = r->body[i];
            if (len >= 11 && memcmp(b, "not ready: ", 11) == 0) {
                b += 11;
                len -= 11;
            }
            fprintf(f, "not ready: worker %d: %.*s", i, (int)len, b);
            return 503;
        }
    }
    fputs("ready\n", f);
    return 200;
}

/* A limits API question: the first answer that is not a 200 as it is (a
 * 404, 405 ... is every worker's; a 503 from the store too), else the 200s
 * added up (limits_merge.h). Each answer is "<Allow>\0<JSON>". */
static void round_answer_api(struct round *r)
{
    struct master *m = r->m;
    const char *texts[64];
    size_t lens[64];
    int got = 0;
    for (int i = 0; i < m->n; i++) {
        texts[i] = NULL;
        lens[i] = 0;
        const char *b = r->body[i];
        const char *nul = b != NULL ? memchr(b, '\0', r->len[i]) : NULL;
        if (nul == NULL)
            continue;
        size_t jl = r->len[i] - (size_t)(nul + 1 - b);
        if (r->status[i] != 200) {
            sl_admin_answer_allow(r->req, r->status[i], nul != b ? b : NULL, nul + 1, jl);
            return;
        }
        texts[i] = nul + 1;
        lens[i] = jl;
        got++;
    }
    if (got == 0) {
        static const char none[] = "{\"error\":\"no worker answered\"}\n";
        sl_admin_answer_allow(r->req, 503, NULL, none, sizeof(none) - 1);
        return;
    }
    char *body = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&body, &len);
    int failed = f == NULL;
    if (f != NULL) {
        if (r->top > 0)
            failed = sl_limits_merge_top(f, texts, lens, m->n, r->top) < 0;
        else
            sl_limits_merge_sum(f, texts, lens, m->n);
        failed |= ferror(f) != 0;
        failed |= fclose(f) != 0;
    }
    sl_admin_answer_allow(r->req, failed ? 500 : 200, NULL, failed ? NULL : body, len);
    free(body);
}

static void round_answer(struct round *r)
{
    if (r->answered)
        return;
    r->answered = 1;
    if (r->page == SL_ADMIN_API) {
        round_answer_api(r);
        uv_close((uv_handle_t *)&r->timer, on_round_timer_close);
        return;
    }
    char *body = NULL;
    size_t len = 0;
    int status = 200;
    FILE *f = open_memstream(&body, &len);
    if (f == NULL) {
        status = 500;
    } else {
        if (r->page == SL_ADMIN_METRICS)
            answer_metrics(r, f);
        else if (r->page == SL_ADMIN_STATS)
            answer_stats(r, f);
        else
            status = answer_ready(r, f);
        if (ferror(f) != 0)
            status = 500;
        if (fclose(f) != 0)
            status = 500;
    }
    sl_admin_answer(r->req, status, body, len);
    free(body);
    uv_close((uv_handle_t *)&r->timer, on_round_timer_close);
}

static void on_round_timer(uv_timer_t *t)
{
    struct round *r = t->data;
    sl_log_warn("workers slow to answer the admin endpoint", "owed=%d", r->owed);
    round_answer(r);
}

static void round_reply(struct round *r, int idx, int status, const unsigned char *body, size_t len)
{
    if (body != NULL && !r->answered) {
        r->body[idx] = malloc(len + 1);
        if (r->body[idx] != NULL) {
            memcpy(r->body[idx], body, len);
            r->body[idx][len] = '\0';
            r->len[idx] = len;
            r->status[idx] = status;
        }
    }
    r->owed--;
    if (r->owed == 0)
        round_answer(r);
    round_maybe_free(r);
}

static void on_ask_written(uv_write_t *req, int status)
{
    (void)status; /* a worker that cannot be written to is seen when it exits */
    free(req);
}

/* Asks <w> question <q> (<qlen> bytes: one byte, or a limits API frame). */
static void ask_worker(struct worker *w, struct round *r, const char *q, size_t qlen)
{
    struct ask *a = malloc(sizeof(*a));
    struct frame_write *wr = malloc(sizeof(*wr) + qlen);
    if (a == NULL || wr == NULL) {
        free(a);
        free(wr);
        return;
    }
    memcpy(wr->data, q, qlen);
    uv_buf_t b = uv_buf_init((char *)wr->data, (unsigned)qlen);
    if (uv_write(&wr->req, (uv_stream_t *)&w->chan, &b, 1, on_ask_written) < 0) {
        free(a);
        free(wr);
        return;
    }
    a->r = r;
    a->next = NULL;
    if (w->asks_tail != NULL)
        w->asks_tail->next = a;
    else
        w->asks = a;
    w->asks_tail = a;
    r->owed++;
}

/* Asks every ready worker question <q> (<qlen> bytes) for round <r>. */
static void round_start(struct master *m, struct round *r, const char *q, size_t qlen)
{
    for (int i = 0; i < m->n; i++)
        if (m->w[i].running && m->w[i].ready)
            ask_worker(&m->w[i], r, q, qlen);
    if (r->owed == 0) {
        round_answer(r);
        return;
    }
    uv_timer_start(&r->timer, on_round_timer, ROUND_MS, 0);
}

static struct round *round_new(struct master *m, enum sl_admin_page page,
                               struct sl_admin_req *req);

static void on_admin_page(void *data, enum sl_admin_page page, struct sl_admin_req *req)
{
    struct master *m = data;
    struct round *r = round_new(m, page, req);
    if (r == NULL)
        return;
    char q = page == SL_ADMIN_METRICS ? 'm' : page == SL_ADMIN_STATS ? 's' : 'r';
    round_start(m, r, &q, 1);
}

/* N of a ?top=N question (already checked by the workers: a wrong one is
 * their 400), 10 when not given. */
static size_t top_of(const struct sl_admin_call *call)
{
    size_t top = 10;
    const char *q = call->query, *end = q + call->qlen;
    while (q < end) {
        const char *amp = memchr(q, '&', (size_t)(end - q));
        /* the value percent-decoded as the workers read it (top=%35 is 5) */
        char v[32];
        if (end - q > 4 && memcmp(q, "top=", 4) == 0 &&
            sl_pct_decode(q + 4, (size_t)((amp != NULL ? amp : end) - (q + 4)), v, sizeof(v)) >= 0)
            top = strtoul(v, NULL, 10);
        q = amp != NULL ? amp + 1 : end;
    }
    return top;
}

/* The limits API: the question goes to every worker as 'L', u32 length,
 * method NUL path NUL query NUL; the answers are added up. */
static void on_admin_api(void *data, const struct sl_admin_call *call, struct sl_admin_req *req)
{
    struct master *m = data;
    size_t len = call->mlen + call->plen + call->qlen + 3;
    char *q = malloc(5 + len);
    struct round *r = q != NULL ? round_new(m, SL_ADMIN_API, req) : NULL;
    if (r == NULL) {
        if (q == NULL)
            sl_admin_answer_allow(req, 500, NULL, NULL, 0);
        free(q);
        return;
    }
    q[0] = 'L';
    put_u32((unsigned char *)q + 1, (uint32_t)len);
    char *p = q + 5;
    memcpy(p, call->method, call->mlen);
    p += call->mlen;
    *p++ = '\0';
    memcpy(p, call->path, call->plen);
    p += call->plen;
    *p++ = '\0';
    memcpy(p, call->query, call->qlen);
    p += call->qlen;
    *p = '\0';
    /* GET /limits/NAME/identities (no identity): the busiest, merged as
     * such. The segments are counted: an identity that is itself called
     * "identities" (/limits/NAME/identities/identities) is a lookup. */
    if (call->plen > 19 && memcmp(call->path + call->plen - 11, "/identities", 11) == 0 &&
        memchr(call->path + 8, '/', call->plen - 19) == NULL)
        r->top = top_of(call);
    round_start(m, r, q, 5 + len);
    free(q);
}

static struct round *round_new(struct master *m, enum sl_admin_page page,
                               struct sl_admin_req *req)
{
    struct round *r = calloc(1, sizeof(*r));
    if (r != NULL) {
        r->body = calloc((size_t)m->n, sizeof(*r->body));
        r->len = calloc((size_t)m->n, sizeof(*r->len));
        r->status = calloc((size_t)m->n, sizeof(*r->status));
    }
    if (r == NULL || r->body == NULL || r->len == NULL || r->status == NULL) {
        if (r != NULL) {
            free(r->body);
            free(r->len);
            free(r->status);
        }
        free(r);
        sl_admin_answer(req, 500, NULL, 0);
        return NULL;
    }
    r->m = m;
    r->page = page;
    r->req = req;
    uv_timer_init(m->loop, &r->timer);
    r->timer.data = r;
    r->timer_open = 1;
    return r;
}

/* ---- worker processes --------------------------------------------------- */

/* Every question still owed by <w> is answered with nothing. */
static void forget_asks(struct worker *w)
{
    struct ask *a = w->asks;
    w->asks = w->asks_tail = NULL;
    while (a != NULL) {
        struct ask *next = a->next;
        round_reply(a->r, w->idx, 0, NULL, 0);
        free(a);
        a = next;
    }
}

/* STATUS= from the master: connection counts live in the workers (a round
 * would be needed to sum them: /stats has them), so it says how many are up. */
static void master_status(void *data, char *buf, size_t cap)
{
    const struct master *m = data;
    int up = 0, listeners = 0;
    for (int i = 0; i < m->n; i++)
        up += m->w[i].ready;
    for (const struct sl_listener_conf *l = m->conf->listeners; l != NULL; l = l->next)
        listeners++;
    snprintf(buf, cap, "%s workers=%d/%d listeners=%d worker_restarts=%" PRIu64,
             m->stopping ? "stopping" : "serving", up, m->n, listeners, m->restarts);
}

static void startup_done(struct master *m)
{
    for (int i = 0; i < m->n; i++)
        if (!m->w[i].ready)
            return;
    m->starting = 0;
    sl_log_info("started", "version=%s pid=%d workers=%d", SL_VERSION, (int)getpid(), m->n);
    /* Every worker has said 'R': each has bound every listener. */
    sl_notify_status_start(m->loop, SL_NOTIFY_STATUS_MS, master_status, m);
    sl_notify_ready();
}

static void on_frame(struct worker *w, char type, int status, const unsigned char *body, size_t len)
{
    if (type == 'R') {
        w->ready = 1;
        sl_log_info("worker listening", "worker=%d pid=%d", w->idx, w->proc.pid);
        if (w->m->starting)
            startup_done(w->m);
        return;
    }
    struct ask *a = w->asks;
    if (a == NULL) {
        sl_log_warn("unexpected answer from a worker", "worker=%d type=%d", w->idx, (int)type);
        return;
    }
    w->asks = a->next;
    if (w->asks == NULL)
        w->asks_tail = NULL;
    round_reply(a->r, w->idx, status, body, len);
    free(a);
}

static void worker_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    struct worker *w = h->data;
    (void)hint;
    if (w->in_cap - w->in_len < 4096) {
        size_t cap = w->in_cap ? w->in_cap * 2 : 16384;
        unsigned char *p = realloc(w->in, cap);
        if (p == NULL) {
            *buf = uv_buf_init(NULL, 0); /* libuv reports UV_ENOBUFS */
            return;
        }
        w->in = p;
        w->in_cap = cap;
    }
    *buf = uv_buf_init((char *)w->in + w->in_len, (unsigned)(w->in_cap - w->in_len));
}

static void worker_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct worker *w = s->data;
    (void)buf;
    if (nread < 0) {
        uv_read_stop(s); /* the exit callback closes it */
        return;
    }
    w->in_len += (size_t)nread;
    size_t pos = 0;
    while (w->in_len - pos >= FRAME_HEAD) {
        const unsigned char *p = w->in + pos;
        uint32_t len = get_u32(p + 3);
        if (len > FRAME_MAX) {
            sl_log_error("a worker sent a frame too large: stopping it", "worker=%d len=%" PRIu32,
                         w->idx, len);
            uv_read_stop(s);
            uv_process_kill(&w->proc, SIGKILL);
            return;
        }
        if (w->in_len - pos < FRAME_HEAD + (size_t)len)
            break;
        on_frame(w, (char)p[0], p[1] | p[2] << 8, p + FRAME_HEAD, len);
        pos += FRAME_HEAD + len;
    }
    memmove(w->in, w->in + pos, w->in_len - pos);
    w->in_len -= pos;
}

static void on_worker_handle_close(uv_handle_t *h)
{
    struct worker *w = h->data;
    if (--w->handles > 0)
        return;
    free(w->in);
    w->in = NULL;
    w->in_len = w->in_cap = 0;
    maybe_done(w->m);
}

static void on_respawn(uv_timer_t *t)
{
    struct master *m = t->data;
    if (m->stopping)
        return;
    for (int i = 0; i < m->n; i++) {
        struct worker *w = &m->w[i];
        if (w->running)
            continue;
        if (w->handles > 0) { /* the last run's handles are still closing */
            uv_timer_start(&m->respawn, on_respawn, 10, 0);
            continue;
        }
        spawn(w);
    }
}

static void on_worker_exit(uv_process_t *p, int64_t status, int sig)
{
    struct worker *w = p->data;
    struct master *m = w->m;
    uint64_t lived = uv_now(m->loop) - w->born_ms;
    int was_ready = w->ready;
    w->running = 0;
    w->ready = 0;
    forget_asks(w);
    uv_close((uv_handle_t *)&w->proc, on_worker_handle_close);
    uv_close((uv_handle_t *)&w->chan, on_worker_handle_close);
    if (m->stopping) {
        sl_log_info("worker exited", "worker=%d status=%" PRId64 " signal=%d", w->idx, status, sig);
        if (status != 0 || (sig != 0 && !(sig == SIGTERM && !was_ready)))
            m->exit_code = 1; /* a worker still starting may die of the SIGTERM */
        return;
    }
    if (m->starting && !was_ready) {
        sl_log_error("a worker could not start: stopping", "worker=%d status=%" PRId64 " signal=%d",
                     w->idx, status, sig);
        m->exit_code = 1;
        m->stopping = 1;
        signal_workers(m, SIGTERM);
        maybe_done(m);
        return;
    }
    m->restarts++;
    uint64_t wait = lived < RESPAWN_MS ? RESPAWN_MS : 0;
    sl_log_error("worker exited: starting it again", "worker=%d status=%" PRId64
                 " signal=%d lived_ms=%" PRIu64 " in_ms=%" PRIu64, w->idx, status, sig, lived, wait);
    uv_timer_start(&m->respawn, on_respawn, wait, 0);
}

/* The environment with SLUICE_WORKER=<idx>/<n> in place of any other. */
static char **worker_env(int idx, int n, char *slot, size_t cap)
{
    size_t count = 0;
    while (environ[count] != NULL)
        count++;
    char **env = calloc(count + 2, sizeof(*env));
    if (env == NULL)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < count; i++)
        if (strncmp(environ[i], "SLUICE_WORKER=", 14) != 0)
            env[k++] = environ[i];
    snprintf(slot, cap, "SLUICE_WORKER=%d/%d", idx, n);
    env[k++] = slot;
    env[k] = NULL;
    return env;
}

static void spawn(struct worker *w)
{
    struct master *m = w->m;
    char slot[48];
    char **env = worker_env(w->idx, m->n, slot, sizeof(slot));
    uv_pipe_init(m->loop, &w->chan, 0);
    w->chan.data = w;
    w->proc.data = w;
    uv_stdio_container_t io[4];
    for (int i = 0; i < 3; i++) {
        io[i].flags = UV_INHERIT_FD;
        io[i].data.fd = i;
    }
    io[3].flags = (uv_stdio_flags)(UV_CREATE_PIPE | UV_READABLE_PIPE | UV_WRITABLE_PIPE);
    io[3].data.stream = (uv_stream_t *)&w->chan;
    uv_process_options_t o;
    memset(&o, 0, sizeof(o));
    o.file = m->exe;
    o.args = m->argv;
    o.env = env;
    o.stdio = io;
    o.stdio_count = 4;
    /* Same session as the master (not detached: a new session would also be
     * a new scheduler autogroup). A terminal's Ctrl-C reaches the workers
     * too; they ignore SIGINT and wait for the master's SIGTERM. */
    o.exit_cb = on_worker_exit;
    int rc = UV_ENOMEM;
    w->handles = 1;
    if (env != NULL) {
        rc = uv_spawn(m->loop, &w->proc, &o); /* on failure the handle is set up, to be closed */
        w->handles = 2;
    }
    free(env);
    if (rc < 0) {
        sl_log_error("cannot start a worker", "worker=%d err=%s", w->idx, uv_strerror(rc));
        if (w->handles == 2)
            uv_close((uv_handle_t *)&w->proc, on_worker_handle_close);
        uv_close((uv_handle_t *)&w->chan, on_worker_handle_close);
        if (m->starting) {
            m->exit_code = 1;
            m->stopping = 1;
            signal_workers(m, SIGTERM);
            maybe_done(m);
        } else {
            uv_timer_start(&m->respawn, on_respawn, RESPAWN_MS, 0);
        }
        return;
    }
    w->running = 1;
    w->ready = 0;
    w->born_ms = uv_now(m->loop);
    uv_read_start((uv_stream_t *)&w->chan, worker_alloc, worker_read);
}

/* ---- signals ------------------------------------------------------------ */

static void on_master_signal(uv_signal_t *h, int signum)
{
    struct master *m = h->data;
    switch (signum) {
    case SIGHUP: {
        if (m->stopping)
            return;
        /* While the workers start, READY=1 is startup_done()'s to send. */
        int tell = !m->starting;
        if (tell)
            sl_notify_reloading();
        struct sl_conf *c = m->load();
        sl_reloads_count(c != NULL); /* the master's check is the reload's outcome */
        if (c == NULL) {
            sl_log_error("reload failed: keeping the running configuration", "file=%s", m->conf->file);
            if (tell)
                sl_notify_ready();
            return;
        }
        if (c->workers != m->n)
            sl_log_warn("workers: a new count takes a restart; keeping the running one",
                        "running=%d configured=%d", m->n, c->workers);
        if (m->admin != NULL && sl_admin_set_token(m->admin, c->admin_token) < 0)
            sl_log_error("admin token not changed", "err=%s", sl_strerror(SL_ENOMEM));
        sl_conf_free(m->conf);
        m->conf = c;
        sl_log_info("reloading the workers", "file=%s", c->file);
        signal_workers(m, SIGHUP);
        /* The workers apply the file on their own loops and do not report
         * back: the master's check of it is what READY=1 stands for. */
        if (tell)
            sl_notify_ready();
        return;
    }
    case SIGTERM:
    case SIGINT:
        sl_log_info(m->stopping ? "second stop signal: workers exit now" : "stopping the workers",
                    "signal=%d", signum);
        if (!m->stopping) {
            m->stopping = 1;
            sl_notify_stopping();
        }
        uv_timer_stop(&m->respawn);
        signal_workers(m, SIGTERM);
        maybe_done(m);
        return;
    case SIGUSR1:
        (void)sl_log_reopen(); /* the master's own descriptor; each worker has its own */
        signal_workers(m, SIGUSR1);
        return;
    }
}

int sl_master_run(struct sl_conf *conf, char **argv, sl_master_load_fn *load)
{
    struct master *m = calloc(1, sizeof(*m));
    struct worker *ws = calloc((size_t)conf->workers, sizeof(*ws));
    if (m == NULL || ws == NULL) {
        sl_log_error("cannot start the workers", "err=\"out of memory\"");
        free(m);
        free(ws);
        sl_conf_free(conf);
        return 1;
    }
    m->loop = uv_default_loop();
    m->conf = conf;
    m->load = load;
    m->argv = argv;
    m->n = conf->workers;
    m->w = ws;
    m->starting = 1;
    size_t exelen = sizeof(m->exe);
    int rc = uv_exepath(m->exe, &exelen);
    if (rc < 0) {
        sl_log_error("cannot find this program's path", "err=%s", uv_strerror(rc));
        free(ws);
        free(m);
        sl_conf_free(conf);
        return 1;
    }
    uv_timer_init(m->loop, &m->respawn);
    m->respawn.data = m;
    static const int signums[] = { SIGHUP, SIGTERM, SIGINT, SIGUSR1 };
    for (int i = 0; i < 4; i++) {
        uv_signal_init(m->loop, &m->sigs[i]);
        m->sigs[i].data = m;
        uv_signal_start(&m->sigs[i], on_master_signal, signums[i]);
    }
    if (conf->has_admin) {
        struct sl_admin_cbs cbs;
        memset(&cbs, 0, sizeof(cbs));
        cbs.data = m;
        cbs.defer = on_admin_page;
        cbs.api = on_admin_api;
        m->admin = sl_admin_start(m->loop, &conf->admin, &cbs);
        if (m->admin != NULL && sl_admin_set_token(m->admin, conf->admin_token) < 0) {
            sl_admin_close(m->admin);
            m->admin = NULL;
        }
        if (m->admin == NULL) {
            m->exit_code = 1;
            m->stopping = 1;
        }
    }
    for (int i = 0; i < m->n && !m->stopping; i++) {
        ws[i].m = m;
        ws[i].idx = i;
        spawn(&ws[i]);
    }
    maybe_done(m);
    uv_run(m->loop, UV_RUN_DEFAULT);
    (void)uv_loop_close(m->loop);
    int code = m->exit_code;
    sl_log_info("stopped", "workers=%d", m->n);
    sl_conf_free(m->conf);
    free(ws);
    free(m);
    return code;
}

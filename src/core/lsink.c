/* sluice — a line sink that never blocks the loop (see lsink.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "core/lsink.h"

#define EAGAIN_TRIES 5 /* a non-blocking pipe that stays full this many seconds loses the batch */

struct sl_lsink {
    uv_loop_t       *loop;
    char            *path;     /* own file, or NULL: the main log */
    int              fd;       /* own file's descriptor; -1 for the main log */
    char            *buf;      /* lines being queued: buf[0, len) */
    size_t           len;
    char            *wbuf;     /* lines being written by the job: wbuf[0, wlen) */
    size_t           wlen;
    int              wfd;      /* the job's dup() of the destination */
    uint64_t         wlost;    /* lines the job could not write */
    uv_work_t        work;
    uv_timer_t       timer;    /* starts a job SL_LSINK_DELAY ms after the first line */
    uint8_t          busy;     /* a job is in flight */
    uint8_t          armed;    /* the timer runs */
    uint8_t          closing;  /* sl_lsink_close() was called */
    uint8_t          timer_open;
    uint64_t         unreported; /* lines dropped and not yet said in the main log */
    struct sl_lsink *next;     /* every sink of the process */
};

static struct sl_lsink *sinks;
static uint64_t dropped_total;

uint64_t sl_lsink_dropped(void)
{
    return dropped_total;
}

const char *sl_lsink_path(const struct sl_lsink *k)
{
    return k->path;
}

static int open_file(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY, 0640);
    return fd < 0 ? -errno : fd;
}

static uint64_t count_lines(const char *p, size_t n)
{
    uint64_t c = 0;
    for (const char *e = p + n; (p = memchr(p, '\n', (size_t)(e - p))) != NULL; p++)
        c++;
    return c;
}

/* write(2) of all of <p, n>; returns 0 or -1 (errno set). */
static int write_all(int fd, const char *p, size_t n)
{
    int tries = 0;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if ((errno == EAGAIN || errno == EWOULDBLOCK) && tries++ < EAGAIN_TRIES) {
                /* a descriptor someone made non-blocking (a shared pipe):
                 * this is the writer's thread, it may wait */
                struct pollfd pfd = { .fd = fd, .events = POLLOUT };
                (void)poll(&pfd, 1, 1000);
                continue;
            }
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Writes <p, n> (whole lines) to <fd>: in one write to a regular file
 * (O_APPEND keeps it whole), else in pieces of whole lines of at most
 * PIPE_BUF bytes, which a pipe never interleaves with other writers'.
 * Returns the lines that could not be written. */
static uint64_t write_lines(int fd, const char *p, size_t n)
{
    struct stat st;
    if (fd < 0)
        return count_lines(p, n);
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        return write_all(fd, p, n) == 0 ? 0 : count_lines(p, n);
    while (n > 0) {
        size_t take = n;
        if (take > PIPE_BUF) {
            /* the last line end within PIPE_BUF; a longer line goes alone */
            const char *nl = NULL;
            for (size_t i = PIPE_BUF; i > 0; i--)
                if (p[i - 1] == '\n') {
                    nl = p + i;
                    break;
                }
            if (nl != NULL) {
                take = (size_t)(nl - p);
            } else {
                const char *e = memchr(p, '\n', n);
                take = e != NULL ? (size_t)(e - p) + 1 : n;
            }
        }
        if (write_all(fd, p, take) < 0)
            return count_lines(p, n);
        p += take;
        n -= take;
    }
    return 0;
}

static void on_work(uv_work_t *w)
{
    struct sl_lsink *k = w->data;
    k->wlost = write_lines(k->wfd, k->wbuf, k->wlen);
}

static void sink_free(struct sl_lsink *k)
{
    for (struct sl_lsink **pp = &sinks; *pp != NULL; pp = &(*pp)->next)
        if (*pp == k) {
            *pp = k->next;
            break;
        }
    if (k->fd >= 0)
        close(k->fd);
    free(k->path);
    free(k->buf);
    free(k->wbuf);
    free(k);
}

static void on_timer_closed(uv_handle_t *h)
{
    struct sl_lsink *k = h->data;
    k->timer_open = 0;
    if (!k->busy)
        sink_free(k);
}

static void start_job(struct sl_lsink *k);
static void on_timer(uv_timer_t *t);

/* After a line was queued or a job ended: a job now, or the timer. */
static void schedule(struct sl_lsink *k)
{
    if (k->busy || k->len == 0)
        return;
    if (k->len >= SL_LSINK_EAGER || k->closing) {
        start_job(k);
        return;
    }
    if (!k->armed && k->timer_open) {
        k->armed = 1;
        uv_timer_start(&k->timer, on_timer, SL_LSINK_DELAY, 0);
    }
}

static void on_after_work(uv_work_t *w, int status)
{
    struct sl_lsink *k = w->data;
    (void)status;
    if (k->wfd >= 0)
        close(k->wfd);
    k->wfd = -1;
    k->busy = 0;
    k->wlen = 0;
    if (k->wlost > 0) {
        dropped_total += k->wlost;
        k->unreported += k->wlost;
        k->wlost = 0;
    }
    if (k->closing && k->len == 0) {
        if (!k->timer_open)
            sink_free(k);
        return;
    }
    schedule(k);
}

static void start_job(struct sl_lsink *k)
{
    if (k->armed) {
        uv_timer_stop(&k->timer);
        k->armed = 0;
    }
    int src = k->path != NULL ? k->fd : sl_log_fd();
    k->wfd = src >= 0 ? dup(src) : -1;
    /* the halves swap: the loop fills the other while this one is written */
    char *t = k->wbuf;
    k->wbuf = k->buf;
    k->wlen = k->len;
    k->buf = t;
    k->len = 0;
    k->work.data = k;
    if (uv_queue_work(k->loop, &k->work, on_work, on_after_work) != 0) {
        /* no threadpool: write here rather than lose the lines */
        k->wlost = write_lines(k->wfd, k->wbuf, k->wlen);
        k->busy = 1;
        on_after_work(&k->work, 0);
        return;
    }
    k->busy = 1;
}

static void on_timer(uv_timer_t *t)
{
    struct sl_lsink *k = t->data;
    k->armed = 0;
    if (!k->busy && k->len > 0)
        start_job(k);
}

struct sl_lsink *sl_lsink_open(uv_loop_t *loop, const char *path, int *err)
{
    struct sl_lsink *k = calloc(1, sizeof(*k));
    *err = -ENOMEM;
    if (k == NULL)
        return NULL;
    k->loop = loop;
    k->fd = -1;
    k->wfd = -1;
    k->buf = malloc(SL_LSINK_CAP);
    k->wbuf = malloc(SL_LSINK_CAP);
    if (k->buf == NULL || k->wbuf == NULL || (path != NULL && (k->path = strdup(path)) == NULL))
        goto fail;
    if (path != NULL && (k->fd = open_file(path)) < 0) {
        *err = k->fd;
        k->fd = -1;
        goto fail;
    }
    uv_timer_init(loop, &k->timer);
    uv_unref((uv_handle_t *)&k->timer); /* a sink alone does not keep the process up */
    k->timer.data = k;
    k->timer_open = 1;
    k->next = sinks;
    sinks = k;
    *err = 0;
    return k;
fail:
    if (k->fd >= 0)
        close(k->fd);
    free(k->buf);
    free(k->wbuf);
    free(k->path);
    free(k);
    return NULL;
}

int sl_lsink_put(struct sl_lsink *k, const char *line, size_t n)
{
    if (k->unreported > 0 && k->len + n <= SL_LSINK_CAP) {
        /* room again: the main log says what was lost (sl_log writes
         * synchronously, at most once a second for this kind) */
        char q[512];
        const char *p = k->path != NULL ? k->path : "log";
        sl_log_warn_rl("log_dropped", "log lines dropped: the writer could not keep up",
                       "file=%s dropped=%llu", sl_log_quote(p, strlen(p), q, sizeof(q)),
                       (unsigned long long)k->unreported);
        k->unreported = 0;
    }
    if (n > SL_LSINK_CAP - k->len || k->closing) {
        uint64_t c = count_lines(line, n);
        dropped_total += c;
        k->unreported += c;
        return -1;
    }
    memcpy(k->buf + k->len, line, n);
    k->len += n;
    schedule(k);
    return 0;
}

int sl_lsink_reopen(struct sl_lsink *k)
{
    if (k->path == NULL)
        return 0;
    char q[512];
    int fd = open_file(k->path);
    if (fd < 0) {
        const char *why = strerror(-fd);
        char e[128];
        sl_log_error("cannot reopen log: writing to the old file", "file=%s err=%s",
                     sl_log_quote(k->path, strlen(k->path), q, sizeof(q)),
                     sl_log_quote(why, strlen(why), e, sizeof(e)));
        return fd;
    }
    /* a job in flight writes to its own dup() of the old descriptor */
    close(k->fd);
    k->fd = fd;
    sl_log_info("log file reopened", "file=%s", sl_log_quote(k->path, strlen(k->path), q, sizeof(q)));
    return 0;
}

void sl_lsink_reopen_all(void)
{
    for (struct sl_lsink *k = sinks; k != NULL; k = k->next)
        if (!k->closing)
            (void)sl_lsink_reopen(k);
}

void sl_lsink_close(struct sl_lsink *k)
{
    if (k == NULL || k->closing)
        return;
    k->closing = 1;
    if (k->armed) {
        uv_timer_stop(&k->timer);
        k->armed = 0;
    }
    schedule(k); /* what it holds goes out first */
    uv_close((uv_handle_t *)&k->timer, on_timer_closed);
}

void sl_lsink_flush_all_sync(void)
{
    for (struct sl_lsink *k = sinks; k != NULL; k = k->next) {
        if (k->busy || k->len == 0)
            continue;
        uint64_t lost = write_lines(k->path != NULL ? k->fd : sl_log_fd(), k->buf, k->len);
        dropped_total += lost;
        k->len = 0;
    }
}

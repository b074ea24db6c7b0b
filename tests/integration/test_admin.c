/* The admin HTTP endpoint, served on a fresh uv loop inside this process.
 *
 * Clients are non-blocking sockets; the test steps the loop with
 * uv_run(UV_RUN_NOWAIT) between polls of the client sockets, so one thread
 * plays both sides. Every test ends with sl_admin_close() and
 * uv_loop_close() == 0 (in the teardown). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "admin/admin.h"
#include "core/log.h"
#include "integration/harness.h"

/* ---- fixture ------------------------------------------------------------ */

struct fx {
    uv_loop_t        loop;
    struct sl_admin *a;
    int              port;
    int              ready;     /* what the ready callback answers */
    const char      *why;
    int              big;       /* metrics: add many samples (a large body) */
    int              metrics_calls;
    int              stats_calls;
};

static void metrics_cb(void *data, struct sl_metrics *m)
{
    struct fx *f = data;
    static const char *const cache[] = { "listener", "cache", NULL };
    static const char *const odd[] = { "listener", "we\"ird\\na\nme", NULL };
    static const double bounds[] = { 0.0001, 0.001, 0.01, 0.1 };
    static const uint64_t counts[] = { 5, 1, 0, 2, 1 };
    f->metrics_calls++;
    sl_metrics_family(m, "sluice_requests_total", "counter", "Requests seen, per listener.");
    sl_metrics_u64(m, "sluice_requests_total", cache, 12);
    sl_metrics_u64(m, "sluice_requests_total", odd, UINT64_MAX);
    sl_metrics_family(m, "sluice_up", "gauge", "1 while the process runs.");
    sl_metrics_f64(m, "sluice_up", NULL, 1);
    sl_metrics_family(m, "sluice_store_latency_seconds", "histogram",
                      "Quota store round trips.");
    sl_metrics_histogram(m, "sluice_store_latency_seconds", cache, bounds, counts, 4, 0.2345);
    if (f->big) {
        sl_metrics_family(m, "sluice_big", "gauge", "Padding.");
        for (int i = 0; i < 40000; i++) {
            char v[16];
            snprintf(v, sizeof(v), "%d", i);
            const char *lb[] = { "i", v, NULL };
            sl_metrics_u64(m, "sluice_big", lb, (uint64_t)i);
        }
    }
}

static const char METRICS_TEXT[] =
    "# HELP sluice_requests_total Requests seen, per listener.\n"
    "# TYPE sluice_requests_total counter\n"
    "sluice_requests_total{listener=\"cache\"} 12\n"
    "sluice_requests_total{listener=\"we\\\"ird\\\\na\\nme\"} 18446744073709551615\n"
    "# HELP sluice_up 1 while the process runs.\n"
    "# TYPE sluice_up gauge\n"
    "sluice_up 1\n"
    "# HELP sluice_store_latency_seconds Quota store round trips.\n"
    "# TYPE sluice_store_latency_seconds histogram\n"
    "sluice_store_latency_seconds_bucket{listener=\"cache\",le=\"0.0001\"} 5\n"
    "sluice_store_latency_seconds_bucket{listener=\"cache\",le=\"0.001\"} 6\n"
    "sluice_store_latency_seconds_bucket{listener=\"cache\",le=\"0.01\"} 6\n"
    "sluice_store_latency_seconds_bucket{listener=\"cache\",le=\"0.1\"} 8\n"
    "sluice_store_latency_seconds_bucket{listener=\"cache\",le=\"+Inf\"} 9\n"
    "sluice_store_latency_seconds_sum{listener=\"cache\"} 0.2345\n"
    "sluice_store_latency_seconds_count{listener=\"cache\"} 9\n";

static const char STATS_TEXT[] =
    "{\"listeners\":[{\"name\":\"cache\",\"requests\":12}],\"limits\":[],\"top\":[]}\n";

static void stats_cb(void *data, FILE *out)
{
    struct fx *f = data;
    f->stats_calls++;
    fputs(STATS_TEXT, out);
}

static int ready_cb(void *data, const char **why)
{
    struct fx *f = data;
    if (!f->ready)
        *why = f->why;
    return f->ready;
}

static void make_addr(struct sl_addr *addr, int port)
{
    memset(addr, 0, sizeof(*addr));
    snprintf(addr->text, sizeof(addr->text), "127.0.0.1:%d", port);
    struct sockaddr_in *sin = (struct sockaddr_in *)&addr->ss;
    sin->sin_family = AF_INET;
    sin->sin_port = htons((uint16_t)port);
    sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    f->ready = 1;
    struct sl_admin_cbs cbs = { metrics_cb, stats_cb, ready_cb, f, NULL, NULL };
    struct sl_addr addr;
    for (int tries = 0; tries < 5 && f->a == NULL; tries++) {
        f->port = th_free_port();
        make_addr(&addr, f->port);
        f->a = sl_admin_start(&f->loop, &addr, &cbs);
    }
    assert_non_null(f->a);
    assert_int_equal(sl_admin_port(f->a), f->port);
    *state = f;
    return 0;
}

/* Closes the server, runs the loop dry and checks that nothing is left. */
static int teardown(void **state)
{
    struct fx *f = *state;
    sl_admin_close(f->a);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    int rc = uv_loop_close(&f->loop);
    if (rc != 0)
        uv_print_all_handles(&f->loop, stderr);
    assert_int_equal(rc, 0);
    free(f);
    return 0;
}

/* ---- clients ------------------------------------------------------------ */

struct client {
    int         fd;
    const char *req;      /* what to send (borrowed) */
    size_t      len;
    size_t      sent;
    int         trickle;  /* one byte per step */
    int         shut;     /* shutdown(SHUT_WR) once everything is sent */
    char       *out;      /* what came back (malloc'd, NUL-terminated) */
    size_t      olen;
    size_t      ocap;
    int         eof;      /* the server closed (EOF or reset) */
    int         send_failed;
};

static int cl_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    int rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
    assert_true(rc == 0 || errno == EINPROGRESS);
    return fd;
}

static void cl_init(struct client *c, int port, const char *req, size_t len)
{
    memset(c, 0, sizeof(*c));
    c->fd = cl_connect(port);
    c->req = req;
    c->len = len;
    c->ocap = 4096;
    c->out = malloc(c->ocap);
    assert_non_null(c->out);
    c->out[0] = '\0';
}

static void cl_free(struct client *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    free(c->out);
    c->out = NULL;
}

/* One non-blocking step of <c>: send what it may, read what there is. */
static void cl_step(struct client *c, short revents)
{
    if ((revents & POLLOUT) && c->sent < c->len && !c->send_failed) {
        size_t n = c->trickle ? 1 : c->len - c->sent;
        ssize_t w = send(c->fd, c->req + c->sent, n, MSG_NOSIGNAL);
        if (w > 0)
            c->sent += (size_t)w;
        else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            c->send_failed = 1; /* the server may close before taking it all */
        if (c->sent == c->len && c->shut)
            shutdown(c->fd, SHUT_WR);
    }
    if (revents & (POLLIN | POLLHUP | POLLERR)) {
        for (;;) {
            if (c->ocap - c->olen < 2048) {
                c->ocap *= 2;
                c->out = realloc(c->out, c->ocap);
                assert_non_null(c->out);
            }
            ssize_t r = recv(c->fd, c->out + c->olen, c->ocap - c->olen - 1, 0);
            if (r > 0) {
                c->olen += (size_t)r;
                c->out[c->olen] = '\0';
                continue;
            }
            if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
                c->eof = 1;
            break;
        }
    }
}

/* Steps the loop and the clients until every client saw EOF or <ms> pass.
 * Returns 0 if all did. */
static int run_clients(struct fx *f, struct client *cs, int n, int ms)
{
    uint64_t end = th_now_ms() + (uint64_t)ms;
    struct pollfd pf[128];
    assert_true(n <= 128);
    for (;;) {
        uv_run(&f->loop, UV_RUN_NOWAIT);
        int open = 0;
        for (int i = 0; i < n; i++) {
            pf[i].fd = cs[i].eof ? -1 : cs[i].fd;
            pf[i].events = POLLIN | (cs[i].sent < cs[i].len && !cs[i].send_failed ? POLLOUT : 0);
            pf[i].revents = 0;
            open += !cs[i].eof;
        }
        if (open == 0)
            return 0;
        if (th_now_ms() >= end)
            return -1;
        if (poll(pf, (nfds_t)n, 1) > 0)
            for (int i = 0; i < n; i++)
                if (pf[i].revents)
                    cl_step(&cs[i], pf[i].revents);
    }
}

/* Steps the loop for <ms>. */
static void step_for(struct fx *f, int ms)
{
    uint64_t end = th_now_ms() + (uint64_t)ms;
    while (th_now_ms() < end) {
        uv_run(&f->loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
}

/* Steps the loop until the server has <n> connections; 0 or -1. */
static int wait_conns(struct fx *f, int n, int ms)
{
    uint64_t end = th_now_ms() + (uint64_t)ms;
    while (th_now_ms() < end) {
        uv_run(&f->loop, UV_RUN_NOWAIT);
        if (sl_admin_connections(f->a) == n)
            return 0;
        usleep(1000);
    }
    fprintf(stderr, "connections: %d, want %d\n", sl_admin_connections(f->a), n);
    return -1;
}

/* Sends <req> on a new connection and returns everything until the server
 * closed (malloc'd; *len set). Fails the test if the server does not close. */
static char *exchange_n(struct fx *f, const char *req, size_t rlen, size_t *len)
{
    struct client c;
    cl_init(&c, f->port, req, rlen);
    if (run_clients(f, &c, 1, TH_MS) != 0) {
        th_dump("no close after", c.out, c.olen);
        cl_free(&c);
        fail_msg("the server did not close");
    }
    close(c.fd);
    char *out = c.out;
    *len = c.olen;
    return out;
}

static char *exchange(struct fx *f, const char *req, size_t *len)
{
    return exchange_n(f, req, strlen(req), len);
}

/* ---- responses ---------------------------------------------------------- */

struct resp {
    int         status;
    char        ctype[128];
    long        clen;       /* -1 when missing */
    int         conn_close;
    char        allow[64];
    int         n_headers;
    const char *body;
    size_t      blen;
};

/* Parses a whole response; fails the test when it is not well formed. */
static void parse_resp(const char *raw, size_t n, struct resp *r)
{
    memset(r, 0, sizeof(*r));
    r->clen = -1;
    const char *end = memmem(raw, n, "\r\n\r\n", 4);
    if (end == NULL || strncmp(raw, "HTTP/1.1 ", 9) != 0) {
        th_dump("bad response", raw, n);
        fail_msg("not an HTTP/1.1 response");
    }
    r->status = atoi(raw + 9);
    const char *line = strstr(raw, "\r\n") + 2;
    while (line < end + 2) {
        const char *eol = strstr(line, "\r\n");
        const char *colon = memchr(line, ':', (size_t)(eol - line));
        assert_non_null(colon);
        size_t nlen = (size_t)(colon - line);
        const char *v = colon + 1;
        while (*v == ' ')
            v++;
        int vlen = (int)(eol - v);
        if (nlen == 12 && strncasecmp(line, "Content-Type", 12) == 0)
            snprintf(r->ctype, sizeof(r->ctype), "%.*s", vlen, v);
        else if (nlen == 14 && strncasecmp(line, "Content-Length", 14) == 0)
            r->clen = strtol(v, NULL, 10);
        else if (nlen == 10 && strncasecmp(line, "Connection", 10) == 0)
            r->conn_close = strncmp(v, "close", 5) == 0;
        else if (nlen == 5 && strncasecmp(line, "Allow", 5) == 0)
            snprintf(r->allow, sizeof(r->allow), "%.*s", vlen, v);
        r->n_headers++;
        line = eol + 2;
    }
    r->body = end + 4;
    r->blen = n - (size_t)(r->body - raw);
}

/* GETs (or whatever <req> says) and checks the framing every response has. */
static char *request(struct fx *f, const char *req, struct resp *r, int head_only)
{
    size_t n;
    char *raw = exchange(f, req, &n);
    parse_resp(raw, n, r);
    assert_true(r->conn_close);
    assert_true(r->clen >= 0);
    assert_true(r->ctype[0] != '\0');
    if (!head_only)
        assert_int_equal((size_t)r->clen, r->blen);
    else
        assert_int_equal(r->blen, 0);
    return raw;
}

static void expect_status(struct fx *f, const char *req, int status)
{
    struct resp r;
    char *raw = request(f, req, &r, 0);
    if (r.status != status)
        th_dump("response", raw, strlen(raw));
    assert_int_equal(r.status, status);
    free(raw);
}

/* ---- a Prometheus text format 0.0.4 checker ----------------------------- */

struct family {
    char name[128];
    char type[16];
    int  help, typed, closed;
};

struct prom {
    struct family fam[64];
    int           n;
    int           current;        /* family of the previous sample, or -1 */
    char          inf_key[512];   /* histogram: labels (without le) of the last +Inf bucket */
    double        inf;
    int           have_inf;
    char          bucket_key[512];
    double        last_le, last_count;
    int           samples;
};

static int name_ok(const char *s, size_t n, int colon)
{
    if (n == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_' || (colon && s[0] == ':')))
        return 0;
    for (size_t i = 1; i < n; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || (colon && s[i] == ':')))
            return 0;
    return 1;
}

static int value_ok(const char *s, double *v)
{
    if (strcmp(s, "+Inf") == 0 || strcmp(s, "Inf") == 0) {
        *v = INFINITY;
        return 1;
    }
    if (strcmp(s, "-Inf") == 0) {
        *v = -INFINITY;
        return 1;
    }
    if (strcmp(s, "NaN") == 0) {
        *v = NAN;
        return 1;
    }
    if (*s == '\0' || isspace((unsigned char)*s))
        return 0;
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return *end == '\0' && !isnan(*v) && !isinf(*v);
}

static struct family *family_of(struct prom *p, const char *name, size_t n, int create)
{
    for (int i = 0; i < p->n; i++)
        if (strlen(p->fam[i].name) == n && memcmp(p->fam[i].name, name, n) == 0)
            return &p->fam[i];
    if (!create || p->n == 64 || n >= sizeof(p->fam[0].name))
        return NULL;
    struct family *f = &p->fam[p->n++];
    memset(f, 0, sizeof(*f));
    memcpy(f->name, name, n);
    return f;
}

#define PROM_FAIL(...) do { snprintf(err, cap, __VA_ARGS__); return -1; } while (0)

/* Checks one sample line. */
static int prom_sample(struct prom *p, char *line, char *err, size_t cap)
{
    size_t nlen = strcspn(line, "{ ");
    if (!name_ok(line, nlen, 1))
        PROM_FAIL("bad metric name in: %s", line);
    /* the family: the name itself, or a histogram/summary base */
    struct family *f = family_of(p, line, nlen, 0);
    const char *suffix = "";
    if (f == NULL || !f->typed) {
        static const char *const sfx[] = { "_bucket", "_sum", "_count" };
        for (int i = 0; i < 3; i++) {
            size_t sl = strlen(sfx[i]);
            if (nlen > sl && memcmp(line + nlen - sl, sfx[i], sl) == 0) {
                struct family *b = family_of(p, line, nlen - sl, 0);
                if (b != NULL && (strcmp(b->type, "histogram") == 0 ||
                                  (strcmp(b->type, "summary") == 0 && i > 0))) {
                    f = b;
                    suffix = sfx[i];
                }
            }
        }
    }
    if (f == NULL || !f->help || !f->typed)
        PROM_FAIL("no HELP and TYPE before: %s", line);
    int idx = (int)(f - p->fam);
    if (f->closed || (p->current >= 0 && p->current != idx && p->fam[idx].closed))
        PROM_FAIL("family %s is not contiguous: %s", f->name, line);
    if (p->current >= 0 && p->current != idx)
        p->fam[p->current].closed = 1;
    p->current = idx;

    /* labels */
    char *s = line + nlen;
    char key[512] = "", le[256] = "";
    size_t klen = 0;
    int has_le = 0;
    if (*s == '{') {
        s++;
        while (*s != '}') {
            size_t ln = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
            if (!name_ok(s, ln, 0) || s[ln] != '=' || s[ln + 1] != '"')
                PROM_FAIL("bad label in: %s", line);
            int is_le = ln == 2 && memcmp(s, "le", 2) == 0;
            char *lname = s;
            s += ln + 2;
            char val[256];
            size_t vl = 0;
            while (*s != '"') {
                if (*s == '\0' || *s == '\n')
                    PROM_FAIL("unterminated label value in: %s", line);
                if (*s == '\\') {
                    s++;
                    if (*s != '\\' && *s != '"' && *s != 'n')
                        PROM_FAIL("bad escape in: %s", line);
                }
                if (vl < sizeof(val) - 1)
                    val[vl++] = *s;
                s++;
            }
            val[vl] = '\0';
            s++;
            if (is_le) {
                has_le = 1;
                snprintf(le, sizeof(le), "%s", val);
            } else {
                klen += (size_t)snprintf(key + klen, sizeof(key) - klen, "%.*s=%s,",
                                         (int)ln, lname, val);
                if (klen >= sizeof(key))
                    PROM_FAIL("labels too long: %s", line);
            }
            if (*s == ',')
                s++;
            else if (*s != '}')
                PROM_FAIL("bad label list in: %s", line);
        }
        s++;
    }
    if (*s != ' ')
        PROM_FAIL("no space before the value: %s", line);
    s++;
    char *ts = strchr(s, ' ');
    if (ts != NULL) {
        *ts++ = '\0';
        char *e;
        strtoll(ts, &e, 10);
        if (*ts == '\0' || *e != '\0')
            PROM_FAIL("bad timestamp: %s", ts);
    }
    double v;
    if (!value_ok(s, &v))
        PROM_FAIL("bad value \"%s\"", s);

    if (strcmp(suffix, "_bucket") == 0) {
        double lev;
        if (!has_le || !value_ok(le, &lev))
            PROM_FAIL("bucket without a good le: %s", line);
        if (strcmp(key, p->bucket_key) == 0 && p->samples > 0) {
            if (!(lev > p->last_le) || v < p->last_count)
                PROM_FAIL("buckets not increasing at le=%s", le);
        }
        snprintf(p->bucket_key, sizeof(p->bucket_key), "%s", key);
        p->last_le = lev;
        p->last_count = v;
        if (isinf(lev)) {
            snprintf(p->inf_key, sizeof(p->inf_key), "%s", key);
            p->inf = v;
            p->have_inf = 1;
        }
    } else if (strcmp(suffix, "_count") == 0 && strcmp(f->type, "histogram") == 0) {
        if (!p->have_inf || strcmp(key, p->inf_key) != 0)
            PROM_FAIL("_count without a +Inf bucket: %s", line);
        if (v != p->inf)
            PROM_FAIL("_count differs from the +Inf bucket: %s", line);
        p->have_inf = 0;
        p->bucket_key[0] = '\0';
    } else if (has_le && strcmp(f->type, "histogram") == 0) {
        PROM_FAIL("le on a non-bucket sample: %s", line);
    }
    p->samples++;
    return 0;
}

/* 0 if <text> is valid exposition format, else -1 with a reason in <err>. */
static int prom_check(const char *text, char *err, size_t cap)
{
    struct prom *p = calloc(1, sizeof(*p));
    assert_non_null(p);
    p->current = -1;
    char *copy = strdup(text), *save = NULL;
    assert_non_null(copy);
    int rc = 0;
    size_t tl = strlen(text);
    if (tl > 0 && text[tl - 1] != '\n') {
        snprintf(err, cap, "the text does not end with a newline");
        rc = -1;
    }
    for (char *line = strtok_r(copy, "\n", &save); line != NULL && rc == 0;
         line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "# HELP ", 7) == 0 || strncmp(line, "# TYPE ", 7) == 0) {
            int help = line[2] == 'H';
            char *name = line + 7;
            size_t nlen = strcspn(name, " ");
            if (!name_ok(name, nlen, 1) || (!help && name[nlen] != ' ')) {
                snprintf(err, cap, "bad comment line: %s", line);
                rc = -1;
                break;
            }
            struct family *f = family_of(p, name, nlen, 1);
            if (f == NULL || f->closed || (help ? f->help : f->typed)) {
                snprintf(err, cap, "HELP/TYPE repeated or too late: %s", line);
                rc = -1;
                break;
            }
            if (help) {
                for (char *h = name + nlen; *h != '\0'; h++)
                    if (*h == '\\' && h[1] != '\\' && h[1] != 'n') {
                        snprintf(err, cap, "bad escape in HELP: %s", line);
                        rc = -1;
                    } else if (*h == '\\') {
                        h++;
                    }
                f->help = 1;
            } else {
                const char *t = name + nlen + 1;
                if (strcmp(t, "counter") && strcmp(t, "gauge") && strcmp(t, "histogram") &&
                    strcmp(t, "summary") && strcmp(t, "untyped")) {
                    snprintf(err, cap, "bad TYPE: %s", line);
                    rc = -1;
                    break;
                }
                snprintf(f->type, sizeof(f->type), "%s", t);
                f->typed = 1;
            }
        } else if (line[0] == '#') {
            continue; /* a plain comment */
        } else {
            rc = prom_sample(p, line, err, cap);
        }
    }
    if (rc == 0 && p->have_inf) {
        snprintf(err, cap, "a histogram without _count");
        rc = -1;
    }
    free(copy);
    free(p);
    return rc;
}

/* ---- tests -------------------------------------------------------------- */

/* The checker itself rejects what it should (else it proves nothing). */
static void test_prom_checker(void **state)
{
    (void)state;
    char err[256];
    assert_int_equal(prom_check(METRICS_TEXT, err, sizeof(err)), 0);
    static const char *const bad[] = {
        "x_total 1\n",                                            /* no HELP/TYPE */
        "# HELP x y\nx 1\n",                                      /* no TYPE */
        "# HELP 1x y\n# TYPE 1x gauge\n1x 1\n",                   /* bad name */
        "# HELP x y\n# TYPE x gauge\nx one\n",                    /* bad value */
        "# HELP x y\n# TYPE x gauge\nx{a=\"b} 1\n",               /* unterminated */
        "# HELP x y\n# TYPE x gauge\nx{a=\"\\t\"} 1\n",           /* bad escape */
        "# HELP x y\n# TYPE x gauge\nx 1",                        /* no final newline */
        "# HELP x y\n# TYPE x gauge\n# HELP z y\n# TYPE z gauge\nx 1\nz 1\nx 2\n",
        "# HELP h y\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 3\n"
        "h_sum 1\nh_count 4\n",                                   /* +Inf != _count */
        "# HELP h y\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n"
        "h_sum 1\nh_count 1\n",                                   /* not cumulative */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (prom_check(bad[i], err, sizeof(err)) == 0)
            fail_msg("the checker accepted bad text #%zu", i);
    }
}

static void test_healthz(void **state)
{
    struct fx *f = *state;
    size_t n;
    char *raw = exchange(f, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n", &n);
    static const char want[] = "HTTP/1.1 200 OK\r\n"
                               "Content-Type: text/plain\r\n"
                               "Content-Length: 3\r\n"
                               "Connection: close\r\n"
                               "\r\n"
                               "ok\n";
    if (n != strlen(want) || memcmp(raw, want, n) != 0)
        th_dump("healthz", raw, n);
    assert_int_equal(n, strlen(want));
    assert_memory_equal(raw, want, n);
    free(raw);
    /* HTTP/1.0, a bare-LF client, a query string, an absolute-form target */
    expect_status(f, "GET /healthz HTTP/1.0\r\n\r\n", 200);
    expect_status(f, "GET /healthz HTTP/1.1\n\n", 200);
    expect_status(f, "\r\nGET /healthz?verbose=1&x=%20 HTTP/1.1\r\n\r\n", 200);
    expect_status(f, "GET http://localhost:9121/healthz HTTP/1.1\r\n\r\n", 200);
    expect_status(f, "GET /healthz HTTP/1.1\r\nX-Empty:\r\nA: b\tc\r\n\r\n", 200);
}

static void test_readyz(void **state)
{
    struct fx *f = *state;
    struct resp r;
    char *raw = request(f, "GET /readyz HTTP/1.1\r\n\r\n", &r, 0);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.ctype, "text/plain");
    assert_string_equal(r.body, "ready\n");
    free(raw);

    f->ready = 0;
    f->why = "store unreachable (on_failure=closed)";
    raw = request(f, "GET /readyz HTTP/1.1\r\n\r\n", &r, 0);
    assert_int_equal(r.status, 503);
    assert_memory_equal(raw, "HTTP/1.1 503 Service Unavailable\r\n", 34);
    assert_non_null(strstr(r.body, "store unreachable (on_failure=closed)"));
    free(raw);

    f->why = NULL; /* not ready, no reason given */
    raw = request(f, "GET /readyz HTTP/1.1\r\n\r\n", &r, 0);
    assert_int_equal(r.status, 503);
    assert_true(r.blen > 0);
    free(raw);
}

static void test_metrics(void **state)
{
    struct fx *f = *state;
    struct resp r;
    char *raw = request(f, "GET /metrics HTTP/1.1\r\nAccept: text/plain\r\n\r\n", &r, 0);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.ctype, "text/plain; version=0.0.4; charset=utf-8");
    assert_string_equal(r.body, METRICS_TEXT);
    char err[256] = "";
    if (prom_check(r.body, err, sizeof(err)) != 0)
        fail_msg("/metrics: %s", err);
    assert_int_equal(f->metrics_calls, 1);
    free(raw);
}

/* A body larger than any socket buffer still comes whole, and validates. */
static void test_metrics_large(void **state)
{
    struct fx *f = *state;
    f->big = 1;
    struct resp r;
    char *raw = request(f, "GET /metrics HTTP/1.1\r\n\r\n", &r, 0);
    assert_int_equal(r.status, 200);
    assert_true(r.blen > 500000);
    char err[256] = "";
    if (prom_check(r.body, err, sizeof(err)) != 0)
        fail_msg("/metrics: %s", err);
    assert_non_null(strstr(r.body, "sluice_big{i=\"39999\"} 39999\n"));
    free(raw);
}

static void test_stats(void **state)
{
    struct fx *f = *state;
    struct resp r;
    char *raw = request(f, "GET /stats HTTP/1.1\r\n\r\n", &r, 0);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.ctype, "application/json");
    assert_string_equal(r.body, STATS_TEXT);
    assert_int_equal(f->stats_calls, 1);
    free(raw);
}

static void test_head(void **state)
{
    struct fx *f = *state;
    struct resp g, h;
    char *graw = request(f, "GET /metrics HTTP/1.1\r\n\r\n", &g, 0);
    char *hraw = request(f, "HEAD /metrics HTTP/1.1\r\n\r\n", &h, 1);
    assert_int_equal(h.status, 200);
    assert_int_equal(h.blen, 0);
    assert_int_equal(h.clen, g.clen); /* what a GET would send */
    assert_string_equal(h.ctype, g.ctype);
    free(graw);
    free(hraw);
    hraw = request(f, "HEAD /healthz HTTP/1.1\r\n\r\n", &h, 1);
    assert_int_equal(h.status, 200);
    assert_int_equal(h.clen, 3);
    free(hraw);
    hraw = request(f, "HEAD /nope HTTP/1.1\r\n\r\n", &h, 1);
    assert_int_equal(h.status, 404);
    free(hraw);
}

static void test_not_found(void **state)
{
    struct fx *f = *state;
    expect_status(f, "GET / HTTP/1.1\r\n\r\n", 404);
    expect_status(f, "GET /nope HTTP/1.1\r\n\r\n", 404);
    expect_status(f, "GET /metrics/ HTTP/1.1\r\n\r\n", 404);
    expect_status(f, "GET /metricsx HTTP/1.1\r\n\r\n", 404);
    expect_status(f, "GET /METRICS HTTP/1.1\r\n\r\n", 404);
}

static void test_method_not_allowed(void **state)
{
    struct fx *f = *state;
    struct resp r;
    char *raw = request(f, "POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", &r, 0);
    assert_int_equal(r.status, 405);
    assert_string_equal(r.allow, "GET, HEAD");
    free(raw);
    expect_status(f, "DELETE /stats HTTP/1.1\r\n\r\n", 405);
    expect_status(f, "get /healthz HTTP/1.1\r\n\r\n", 405); /* methods are case-sensitive */
    assert_int_equal(f->metrics_calls + f->stats_calls, 0);
}

static void test_bad_request(void **state)
{
    struct fx *f = *state;
    static const char *const bad[] = {
        "hello\r\n\r\n",
        "GET /healthz\r\n\r\n",
        "GET  /healthz HTTP/1.1\r\n\r\n",
        "GET /healthz HTTP/1.1 \r\n\r\n",
        "GET /healthz HTTX/1.1\r\n\r\n",
        "GET healthz HTTP/1.1\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nno colon here\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nBad Name: x\r\n\r\n",
        "GET /healthz HTTP/1.1\r\n: x\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nA: b\r\n folded\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nA: b\rc\r\n\r\n",
        "GET /he\x01lthz HTTP/1.1\r\n\r\n",
        "\x16\x03\x01\x02\x05\x01\n\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        expect_status(f, bad[i], 400);
    /* a NUL byte in the head */
    size_t n;
    static const char nul[] = "GET /healthz HTTP/1.1\r\nA: \0b\r\n\r\n";
    char *raw = exchange_n(f, nul, sizeof(nul) - 1, &n);
    struct resp r;
    parse_resp(raw, n, &r);
    assert_int_equal(r.status, 400);
    free(raw);
    expect_status(f, "GET /healthz HTTP/2.0\r\n\r\n", 505);
    assert_int_equal(f->metrics_calls + f->stats_calls, 0);
}

/* Builds a head of exactly <size> bytes: GET /healthz with one padding header. */
static char *head_of_size(size_t size)
{
    static const char start[] = "GET /healthz HTTP/1.1\r\nX-Pad: ";
    char *s = malloc(size + 1);
    assert_non_null(s);
    memcpy(s, start, sizeof(start) - 1);
    memset(s + sizeof(start) - 1, 'a', size - (sizeof(start) - 1) - 4);
    memcpy(s + size - 4, "\r\n\r\n", 5);
    assert_int_equal(strlen(s), size);
    return s;
}

static void test_head_too_large(void **state)
{
    struct fx *f = *state;
    char *req = head_of_size(9 * 1024);
    expect_status(f, req, 431);
    free(req);
    req = head_of_size(8192); /* exactly the cap: fine */
    expect_status(f, req, 200);
    free(req);
    req = head_of_size(8193);
    expect_status(f, req, 431);
    free(req);
    /* no line end at all */
    req = malloc(20001);
    memset(req, 'G', 20000);
    req[20000] = '\0';
    expect_status(f, req, 431);
    free(req);
}

/* A client that sends nothing, or half a head, is closed at the deadline. */
static void test_head_timeout(void **state)
{
    struct fx *f = *state;
    sl_admin_set_head_timeout(f->a, 300);
    struct client c[2];
    cl_init(&c[0], f->port, "", 0);
    cl_init(&c[1], f->port, "GET /healthz HTTP/1.1\r\nHost: x\r\n", 33);
    uint64_t t0 = th_now_ms();
    assert_int_equal(run_clients(f, c, 2, TH_MS), 0);
    uint64_t took = th_now_ms() - t0;
    assert_true(took >= 250);
    assert_true(took < 5000);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(c[i].olen, 0); /* closed without a word */
        cl_free(&c[i]);
    }
    assert_int_equal(wait_conns(f, 0, TH_MS), 0);
}

/* One byte at a time, then the client's half-close: still answered. */
static void test_trickle_and_half_close(void **state)
{
    struct fx *f = *state;
    static const char req[] = "GET /stats HTTP/1.1\r\nHost: localhost\r\n\r\n";
    struct client c[2];
    cl_init(&c[0], f->port, req, sizeof(req) - 1);
    c[0].trickle = 1;
    cl_init(&c[1], f->port, req, sizeof(req) - 1);
    c[1].shut = 1;
    assert_int_equal(run_clients(f, c, 2, TH_MS), 0);
    for (int i = 0; i < 2; i++) {
        struct resp r;
        parse_resp(c[i].out, c[i].olen, &r);
        assert_int_equal(r.status, 200);
        assert_string_equal(r.body, STATS_TEXT);
        cl_free(&c[i]);
    }
}

/* After the response the server half-closes and waits for the client's
 * EOF; a client that never closes is dropped after the linger time (2 s). */
static void test_linger(void **state)
{
    struct fx *f = *state;
    static const char req[] = "POST /healthz HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc";
    struct client c;
    cl_init(&c, f->port, req, sizeof(req) - 1);
    assert_int_equal(run_clients(f, &c, 1, TH_MS), 0); /* the FIN came */
    struct resp r;
    parse_resp(c.out, c.olen, &r);
    assert_int_equal(r.status, 405);
    assert_int_equal(sl_admin_connections(f->a), 1);  /* still lingering */
    uint64_t t0 = th_now_ms();
    assert_int_equal(wait_conns(f, 0, TH_MS), 0);
    uint64_t took = th_now_ms() - t0;
    assert_true(took >= 1500 && took < 4000);
    cl_free(&c);
}

/* Many at once are all served. */
static void test_concurrent(void **state)
{
    struct fx *f = *state;
    static const char *const reqs[] = { "GET /metrics HTTP/1.1\r\n\r\n",
                                        "GET /healthz HTTP/1.1\r\n\r\n",
                                        "GET /stats HTTP/1.1\r\n\r\n",
                                        "GET /readyz HTTP/1.1\r\n\r\n" };
    enum { N = 60 };
    struct client c[N];
    for (int i = 0; i < N; i++)
        cl_init(&c[i], f->port, reqs[i % 4], strlen(reqs[i % 4]));
    assert_int_equal(run_clients(f, c, N, TH_MS), 0);
    for (int i = 0; i < N; i++) {
        struct resp r;
        parse_resp(c[i].out, c[i].olen, &r);
        assert_int_equal(r.status, 200);
        assert_int_equal((size_t)r.clen, r.blen);
        cl_free(&c[i]);
    }
    assert_int_equal(f->metrics_calls, N / 4);
    assert_int_equal(wait_conns(f, 0, TH_MS), 0);
}

/* Past 64 open connections a new one evicts the oldest connection still
 * waiting for its head; connections that completed a request are never
 * evicted, and when all 64 places hold such, the new one is closed at once. */
static void test_connection_cap(void **state)
{
    struct fx *f = *state;
    enum { CAP = 64 };
    sl_admin_set_head_timeout(f->a, 60000); /* eviction alone makes room here */
    int fds[CAP];
    for (int i = 0; i < CAP; i++) {
        fds[i] = cl_connect(f->port);
        assert_int_equal(wait_conns(f, i + 1, TH_MS), 0); /* one by one: fds[0] is the oldest */
    }
    struct client next;
    cl_init(&next, f->port, "GET /healthz HTTP/1.1\r\n\r\n", 26);
    assert_int_equal(run_clients(f, &next, 1, TH_MS), 0);
    assert_non_null(strstr(next.out, "200 OK"));
    assert_non_null(strstr(next.out, "\r\n\r\nok\n"));
    cl_free(&next);
    assert_int_equal(th_wait_eof(fds[0], TH_MS), 1); /* the oldest silent one went */
    step_for(f, 20);
    for (int i = 1; i < CAP; i++)
        assert_int_equal(th_quiet(fds[i], 0), 1);  /* the others live */
    for (int i = 0; i < CAP; i++)
        close(fds[i]);
    assert_int_equal(wait_conns(f, 0, TH_MS), 0);

    /* 64 answered clients that do not close: they linger (2 s) and stay */
    static const char req[] = "GET /healthz HTTP/1.1\r\n\r\n";
    struct client c[CAP];
    for (int i = 0; i < CAP; i++)
        cl_init(&c[i], f->port, req, sizeof(req) - 1);
    assert_int_equal(run_clients(f, c, CAP, TH_MS), 0); /* each got its answer and the FIN */
    for (int i = 0; i < CAP; i++)
        assert_non_null(strstr(c[i].out, "200 OK"));
    assert_int_equal(sl_admin_connections(f->a), CAP);
    struct client extra;
    cl_init(&extra, f->port, req, sizeof(req) - 1);
    assert_int_equal(run_clients(f, &extra, 1, TH_MS), 0);
    assert_int_equal(extra.olen, 0);
    cl_free(&extra);
    for (int i = 0; i < CAP; i++)
        cl_free(&c[i]);
    assert_int_equal(wait_conns(f, 0, TH_MS), 0);
}

/* A socket that drips a head which never ends, and comes back when closed. */
struct drip {
    int      fd;
    size_t   sent;   /* bytes of the head sent on this connection */
    uint64_t next;   /* when to send the next byte */
};

static void drip_step(struct drip *d, int port, uint64_t now)
{
    static const char start[] = "GET /healthz HTTP/1.1\r\nX-Slow: ";
    char junk[256];
    ssize_t r = recv(d->fd, junk, sizeof(junk), MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOTCONN)) {
        close(d->fd); /* closed by the server: come back at once */
        d->fd = cl_connect(port);
        d->sent = 0;
        d->next = now;
    }
    if (now < d->next)
        return;
    const char *p = d->sent < sizeof(start) - 1 ? start + d->sent : "a";
    size_t n = d->sent < sizeof(start) - 1 ? sizeof(start) - 1 - d->sent : 1;
    ssize_t w = send(d->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0)
        d->sent += (size_t)w;
    d->next = now + 100;
}

/* Slowloris on the admin port: 70 sockets (more than the 64 places) each
 * drip a head that never ends, one byte per 100 ms, and reconnect when
 * closed; every /healthz probe is still answered. Before: the drippers held
 * all 64 places for 5 s each and every probe was closed unanswered. */
static void test_slow_sockets_do_not_block_probes(void **state)
{
    struct fx *f = *state;
    enum { SLOW = 70, PROBES = 20 };
    struct drip d[SLOW];
    for (int i = 0; i < SLOW; i++) {
        d[i].fd = cl_connect(f->port);
        d[i].sent = 0;
        d[i].next = 0;
    }
    uint64_t end = th_now_ms() + TH_MS;
    while (sl_admin_connections(f->a) < 64 && th_now_ms() < end) {
        uv_run(&f->loop, UV_RUN_NOWAIT);
        for (int i = 0; i < SLOW; i++)
            drip_step(&d[i], f->port, th_now_ms());
        usleep(1000);
    }
    assert_int_equal(sl_admin_connections(f->a), 64);

    int answered = 0;
    uint64_t worst = 0;
    for (int p = 0; p < PROBES; p++) {
        static const char req[] = "GET /healthz HTTP/1.1\r\n\r\n";
        struct client c;
        cl_init(&c, f->port, req, sizeof(req) - 1);
        uint64_t t0 = th_now_ms();
        while (!c.eof && th_now_ms() < t0 + 3000) {
            uv_run(&f->loop, UV_RUN_NOWAIT);
            for (int i = 0; i < SLOW; i++)
                drip_step(&d[i], f->port, th_now_ms());
            struct pollfd pf = { .fd = c.fd,
                                 .events = POLLIN | (c.sent < c.len ? POLLOUT : 0) };
            if (poll(&pf, 1, 1) > 0)
                cl_step(&c, pf.revents);
        }
        uint64_t took = th_now_ms() - t0;
        worst = took > worst ? took : worst;
        if (strstr(c.out, "200 OK") != NULL && strstr(c.out, "\r\n\r\nok\n") != NULL)
            answered++;
        else
            th_dump("probe answer", c.out, c.olen);
        cl_free(&c);
        for (int k = 0; k < 50; k++) { /* 50 ms of dripping between probes */
            uv_run(&f->loop, UV_RUN_NOWAIT);
            for (int i = 0; i < SLOW; i++)
                drip_step(&d[i], f->port, th_now_ms());
            usleep(1000);
        }
    }
    fprintf(stderr, "probes answered: %d of %d under %d dripping sockets, slowest %llu ms\n",
            answered, PROBES, SLOW, (unsigned long long)worst);
    assert_int_equal(answered, PROBES);
    assert_true(sl_admin_connections(f->a) <= 64 + SLOW);
    for (int i = 0; i < SLOW; i++)
        close(d[i].fd);
    assert_int_equal(wait_conns(f, 0, TH_MS), 0);
}

/* Closing with connections in every state: reading, and writing a response
 * the client does not read. The teardown checks uv_loop_close() == 0. */
static void test_close_with_open_connections(void **state)
{
    struct fx *f = *state;
    f->big = 1;
    int idle = cl_connect(f->port);
    struct client slow;
    cl_init(&slow, f->port, "GET /metrics HTTP/1.1\r\n\r\n", 25);
    int one = 4096;
    setsockopt(slow.fd, SOL_SOCKET, SO_RCVBUF, &one, sizeof(one));
    /* send the request, but never read the big response */
    uint64_t end = th_now_ms() + TH_MS;
    while (slow.sent < slow.len && th_now_ms() < end) {
        uv_run(&f->loop, UV_RUN_NOWAIT);
        cl_step(&slow, POLLOUT);
        usleep(1000);
    }
    assert_int_equal(wait_conns(f, 2, TH_MS), 0);
    step_for(f, 100);
    assert_int_equal(f->metrics_calls, 1);
    sl_admin_close(f->a);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    assert_int_equal(th_wait_eof(idle, TH_MS), 1);
    close(idle);
    cl_free(&slow);
    /* the teardown closes the loop again: make it a fresh, empty one */
    assert_int_equal(uv_loop_init(&f->loop), 0);
    f->a = NULL;
}

static void test_bind_failure(void **state)
{
    struct fx *f = *state;
    struct sl_addr addr;
    make_addr(&addr, f->port); /* taken by the fixture's server */
    struct sl_admin_cbs cbs = { 0 };
    assert_null(sl_admin_start(&f->loop, &addr, &cbs));
    memset(&addr.ss, 0, sizeof(addr.ss)); /* no address family */
    assert_null(sl_admin_start(&f->loop, &addr, NULL));
    /* the fixture's server is unharmed */
    expect_status(f, "GET /healthz HTTP/1.1\r\n\r\n", 200);
}

/* No callbacks at all: defaults, no crash. */
static void test_no_callbacks(void **state)
{
    struct fx *f = *state;
    sl_admin_close(f->a);
    struct sl_addr addr;
    f->port = th_free_port();
    make_addr(&addr, f->port);
    f->a = sl_admin_start(&f->loop, &addr, NULL);
    assert_non_null(f->a);
    struct resp r;
    char *raw = request(f, "GET /metrics HTTP/1.1\r\n\r\n", &r, 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.blen, 0);
    free(raw);
    raw = request(f, "GET /readyz HTTP/1.1\r\n\r\n", &r, 0);
    assert_int_equal(r.status, 200);
    free(raw);
    raw = request(f, "GET /stats HTTP/1.1\r\n\r\n", &r, 0);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{}\n");
    free(raw);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (getenv("SL_TEST_LOG") == NULL)
        sl_log_level = SL_LOG_WARN;
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prom_checker),
        T(test_healthz),
        T(test_readyz),
        T(test_metrics),
        T(test_metrics_large),
        T(test_stats),
        T(test_head),
        T(test_not_found),
        T(test_method_not_allowed),
        T(test_bad_request),
        T(test_head_too_large),
        T(test_head_timeout),
        T(test_trickle_and_half_close),
        T(test_linger),
        T(test_concurrent),
        T(test_connection_cap),
        T(test_slow_sockets_do_not_block_probes),
        T(test_close_with_open_connections),
        T(test_bind_failure),
        T(test_no_callbacks),
    };
    return th_finish(cmocka_run_group_tests(tests, NULL, NULL));
}

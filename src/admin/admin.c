/* sluice — the admin HTTP endpoint: /metrics /healthz /readyz /stats.
 *
 * One request per connection, on the process's loop, never blocking it:
 *
 *   accept ──> READ ──(blank line)──> route ──> WRITE ──(done)──> LINGER ──> close
 *     │  cap 64   │ head in c->head (8 KiB)        one buffer:       FIN sent; reads
 *     │  full:    │ full: 431 ─────────────────>  head + body        discarded until
 *     │  evict    │ EOF, error, head timer (1 s): close              EOF, 64 KiB or 2 s
 *     v  oldest READ, else close the new one
 *
 * A probe (a Prometheus scrape, a kubelet's /healthz) sends its head in one
 * packet, so 1 s for the head is plenty for it, and sockets that trickle or
 * say nothing cannot hold the 64 places: when they are all taken, the oldest
 * connection still reading its head is closed to admit the new one. Only
 * connections that completed a request (being answered or lingering) are
 * never evicted; when all 64 are such, the new one is closed at once.
 *
 * LINGER exists because closing a socket with unread bytes in it sends a RST,
 * which can destroy the response before the client reads it (a 9 KiB head
 * answered with 431, a GET with a body). Each connection owns a TCP handle and
 * one timer (head, write or linger deadline) and is freed in the last close
 * callback; the server is freed when its listener and every connection are.
 *
 * With admin_token_file, handle() checks the bearer token before it looks
 * the path up (authorized()), so every page is covered and an unknown path
 * answers 401 to a client without the token, never 404. */
#include <inttypes.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "admin/admin.h"
#include "admin/auth.h"
#include "core/err.h"
#include "core/log.h"

#define HEAD_MAX         8192   /* request head cap; longer: 431 */
#define MAX_CONNS        SL_ADMIN_MAX_CONNS /* at once; more: the oldest head evicted */
#define HEAD_TIMEOUT_MS  1000   /* to send the whole head (a deadline, not reset by bytes) */
#define WRITE_TIMEOUT_MS 10000  /* for the client to take the response */
#define LINGER_MS        2000   /* to close its side after the response */
#define LINGER_MAX       65536  /* bytes discarded while lingering */
#define BACKLOG          128

enum conn_state {
    C_READ,     /* reading the request head */
    C_WAIT,     /* the head is in; the answer is owed by cbs.defer */
    C_WRITE,    /* the response is being written; not reading */
    C_LINGER,   /* response written, FIN sent; discarding until EOF */
    C_CLOSING,  /* uv_close() called on both handles */
};

struct conn {
    struct sl_admin *a;         /* the server that accepted it */
    uv_tcp_t         tcp;       /* the client socket; data = this */
    uv_timer_t       timer;     /* the deadline of the current state; data = this */
    uv_write_t       wr;        /* the one response write */
    uv_shutdown_t    sd;        /* the FIN after it */
    enum conn_state  state;
    int              handles;   /* handles not yet closed: freed at 0 */
    char            *resp;      /* the response (head + body), owned */
    size_t           len;       /* bytes in head[] */
    size_t           line;      /* start of the first line not complete yet */
    size_t           searched;  /* head[line, searched) holds no '\n' */
    int              got_line;  /* a non-empty line (the request line) was seen */
    size_t           discarded; /* bytes read and dropped in C_LINGER */
    struct sl_admin_req *req;   /* the deferred answer, in C_WAIT */
    struct conn     *prev;      /* in a->conns */
    struct conn     *next;
    char             head[HEAD_MAX + 1]; /* the request head (+ NUL); scratch in C_LINGER */
};

struct sl_admin {
    uv_loop_t          *loop;
    uv_tcp_t            listener;     /* data = this */
    struct sl_admin_cbs cbs;          /* copied at start; NULL members allowed */
    int                 listening;    /* listener handle not closed yet */
    int                 closing;      /* sl_admin_close() was called (or start failed) */
    int                 n_conns;      /* connections in conns, until freed */
    int                 n_closing;    /* of which closing (socket closed, memory not yet freed) */
    struct conn        *conns;
    uint64_t            head_timeout_ms;
    int                 port;         /* bound port */
    char               *token;        /* admin_token_file's token, or NULL: no check */
    size_t              token_len;
    char                addr[80];     /* as configured, for logs */
};

/* A deferred answer; outlives its connection when that closes first. */
struct sl_admin_req {
    struct conn       *c;         /* NULL once the connection has gone */
    enum sl_admin_page page;
    int                head_only;
    sl_admin_done_cb  *done;      /* a detached request: the answer goes here */
    void              *done_data;
};

/* ---- lifetime ----------------------------------------------------------- */

static void maybe_free(struct sl_admin *a)
{
    if (a->closing && !a->listening && a->n_conns == 0)
        free(a);
}

static void on_listener_close(uv_handle_t *h)
{
    struct sl_admin *a = h->data;
    a->listening = 0;
    maybe_free(a);
}

static void on_conn_handle_close(uv_handle_t *h)
{
    struct conn *c = h->data;
    if (--c->handles > 0)
        return;
    struct sl_admin *a = c->a;
    a->n_closing--;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        a->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    free(c->resp);
    free(c);
    a->n_conns--;
    maybe_free(a);
}

/* The one way a connection ends. Pending write and shutdown requests are
 * cancelled by libuv before the close callbacks run. */
static void conn_close(struct conn *c)
{
    if (c->state == C_CLOSING)
        return;
    c->state = C_CLOSING;
    c->a->n_closing++;
    if (c->req != NULL) {
        c->req->c = NULL; /* the answer will be dropped */
        c->req = NULL;
    }
    uv_close((uv_handle_t *)&c->tcp, on_conn_handle_close);
    uv_close((uv_handle_t *)&c->timer, on_conn_handle_close);
}

static void on_timer(uv_timer_t *t)
{
    struct conn *c = t->data;
    sl_log_debug("admin connection timed out", "state=%d", (int)c->state);
    conn_close(c);
}

static void on_free_handle_close(uv_handle_t *h)
{
    free(h);
}

/* ---- responses ---------------------------------------------------------- */

static const char *reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default:  return "Unknown";
    }
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    struct conn *c = req->data;
    if (c->state != C_CLOSING && status < 0)
        conn_close(c);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    struct conn *c = h->data;
    (void)hint;
    if (c->state == C_READ)
        *buf = uv_buf_init(c->head + c->len, (unsigned)(HEAD_MAX - c->len));
    else
        *buf = uv_buf_init(c->head, HEAD_MAX); /* lingering: the head is done with */
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void on_write(uv_write_t *req, int status)
{
    struct conn *c = req->data;
    if (c->state == C_CLOSING)
        return;
    if (status < 0) {
        conn_close(c);
        return;
    }
    free(c->resp);
    c->resp = NULL;
    c->state = C_LINGER;
    c->sd.data = c;
    if (uv_shutdown(&c->sd, (uv_stream_t *)&c->tcp, on_shutdown) < 0 ||
        uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0) {
        conn_close(c);
        return;
    }
    uv_timer_start(&c->timer, on_timer, LINGER_MS, 0);
}

/* Sends the status line, the headers and (unless <head_only>) <body>, then
 * lingers and closes. <extra> is more header lines, each ending in CRLF. */
static void respond(struct conn *c, int status, const char *ctype, const char *extra,
                    const char *body, size_t blen, int head_only)
{
    char hdr[512];
    int hlen = snprintf(hdr, sizeof(hdr),
                        "HTTP/1.1 %d %s\r\n"
                        "Content-Type: %s\r\n"
                        "Content-Length: %zu\r\n"
                        "%s"
                        "Connection: close\r\n"
                        "\r\n",
                        status, reason(status), ctype, blen, extra != NULL ? extra : "");
    if (hlen < 0 || (size_t)hlen >= sizeof(hdr)) {
        conn_close(c); /* cannot happen: every argument is a constant or a number */
        return;
    }
    size_t total = (size_t)hlen + (head_only ? 0 : blen);
    c->resp = malloc(total);
    if (c->resp == NULL) {
        conn_close(c);
        return;
    }
    memcpy(c->resp, hdr, (size_t)hlen);
    if (!head_only && blen > 0)
        memcpy(c->resp + hlen, body, blen);

    uv_read_stop((uv_stream_t *)&c->tcp);
    c->state = C_WRITE;
    c->wr.data = c;
    uv_buf_t b = uv_buf_init(c->resp, (unsigned)total);
    if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, on_write) < 0) {
        conn_close(c);
        return;
    }
    uv_timer_start(&c->timer, on_timer, WRITE_TIMEOUT_MS, 0);
}

static void respond_text(struct conn *c, int status, const char *text, int head_only)
{
    const char *extra = status == 405 ? "Allow: GET, HEAD\r\n" : NULL;
    respond(c, status, "text/plain", extra, text, strlen(text), head_only);
}

/* ---- the endpoints ------------------------------------------------------ */

static const char *const page_ctype[] = {
    [SL_ADMIN_METRICS] = "text/plain; version=0.0.4; charset=utf-8",
    [SL_ADMIN_STATS]   = "application/json",
    [SL_ADMIN_READY]   = "text/plain",
    [SL_ADMIN_API]     = "application/json",
};

static int render_metrics(const struct sl_admin_cbs *cbs, FILE *f)
{
    struct sl_metrics *m = sl_metrics_open(f);
    if (m == NULL)
        return -1;
    if (cbs->metrics != NULL)
        cbs->metrics(cbs->data, m);
    sl_metrics_close(m);
    return 0;
}

int sl_admin_render(const struct sl_admin_cbs *cbs, enum sl_admin_page page, char **body,
                    size_t *len)
{
    int status = 200;
    *body = NULL;
    *len = 0;
    FILE *f = open_memstream(body, len);
    if (f == NULL)
        return 500;
    int failed = 0;
    if (page == SL_ADMIN_METRICS) {
        failed = render_metrics(cbs, f) < 0;
    } else if (page == SL_ADMIN_STATS) {
        if (cbs->stats != NULL)
            cbs->stats(cbs->data, f);
        else
            fputs("{}\n", f);
    } else {
        const char *why = NULL;
        if (cbs->ready == NULL || cbs->ready(cbs->data, &why) == 1) {
            fputs("ready\n", f);
        } else {
            status = 503;
            fprintf(f, "not ready: %s\n", why != NULL ? why : "unknown");
        }
    }
    failed |= ferror(f) != 0;
    failed |= fclose(f) != 0;
    if (failed) {
        free(*body);
        *body = NULL;
        *len = 0;
        return 500;
    }
    return status;
}

static void serve_page(struct conn *c, enum sl_admin_page page, int head_only)
{
    struct sl_admin *a = c->a;
    if (a->cbs.defer != NULL) {
        struct sl_admin_req *req = malloc(sizeof(*req));
        if (req == NULL) {
            respond_text(c, 500, "internal server error\n", head_only);
            return;
        }
        req->c = c;
        req->page = page;
        req->head_only = head_only;
        req->done = NULL;
        c->req = req;
        c->state = C_WAIT;
        uv_read_stop((uv_stream_t *)&c->tcp);
        uv_timer_start(&c->timer, on_timer, WRITE_TIMEOUT_MS, 0);
        a->cbs.defer(a->cbs.data, page, req);
        return;
    }
    char *body;
    size_t blen;
    int status = sl_admin_render(&a->cbs, page, &body, &blen);
    if (status == 500)
        respond_text(c, 500, "internal server error\n", head_only);
    else
        respond(c, status, page_ctype[page], NULL, body, blen, head_only);
    free(body);
}

void sl_admin_answer(struct sl_admin_req *req, int status, const char *body, size_t len)
{
    sl_admin_answer_allow(req, status, NULL, body, len);
}

void sl_admin_answer_allow(struct sl_admin_req *req, int status, const char *allow,
                           const char *body, size_t len)
{
    if (req->done != NULL) {
        req->done(req->done_data, status, allow, body, len);
        free(req);
        return;
    }
    struct conn *c = req->c;
    if (c != NULL) {
        c->req = NULL;
        char extra[96] = "";
        /* a constant of the caller's: methods, never client bytes */
        if (allow != NULL && strlen(allow) < sizeof(extra) - 10)
            snprintf(extra, sizeof(extra), "Allow: %s\r\n", allow);
        if (status == 500 && body == NULL)
            respond_text(c, 500, "internal server error\n", req->head_only);
        else
            respond(c, status, page_ctype[req->page], extra, body, len, req->head_only);
    }
    free(req);
}


/* ---- the request -------------------------------------------------------- */

static int is_tchar(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           (ch != '\0' && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

/* One line of head[] from <*pos>: sets [*s, *s + *n) to it without its CRLF
 * (or bare LF) and moves *pos past it. The head is complete, so there is one. */
static void next_line(const char *head, size_t *pos, const char **s, size_t *n)
{
    const char *p = head + *pos;
    const char *nl = strchr(p, '\n');
    *s = p;
    *n = (size_t)(nl - p);
    if (*n > 0 && p[*n - 1] == '\r')
        (*n)--;
    *pos += (size_t)(nl - p) + 1;
}

struct request {
    const char *method;
    size_t      mlen;
    const char *path;   /* without the query string */
    size_t      plen;
    const char *auth;   /* the Authorization field's value, trimmed, or NULL */
    size_t      alen;
    int         n_auth; /* Authorization fields seen */
    const char *query;  /* after '?', up to any '#' ("" when none) */
    size_t      qlen;
};

/* Parses the complete head in head[0, <end>), NUL-terminating it there
 * (<end> <= HEAD_MAX: the array has room).
 * Returns 0, or the status to answer with (400 or 505). */
static int parse_head(char *head, size_t end, struct request *r)
{
    size_t pos = 0;
    const char *s;
    size_t n;
    head[end] = '\0';
    if (memchr(head, '\0', end) != NULL)
        return 400;
    /* RFC 9112 2.2: empty lines before the request line are ignored. */
    do
        next_line(head, &pos, &s, &n);
    while (n == 0);

    /* method SP request-target SP HTTP-version */
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)s[i]))
        i++;
    if (i == 0 || i >= n || s[i] != ' ')
        return 400;
    r->method = s;
    r->mlen = i;
    const char *target = s + ++i;
    while (i < n && (unsigned char)s[i] > ' ' && (unsigned char)s[i] < 0x7f)
        i++;
    size_t tlen = (size_t)(s + i - target);
    if (tlen == 0 || i >= n || s[i] != ' ')
        return 400;
    const char *ver = s + i + 1;
    size_t vlen = n - i - 1;
    if (vlen != 8 || memcmp(ver, "HTTP/", 5) != 0 || ver[6] != '.' ||
        ver[5] < '0' || ver[5] > '9' || ver[7] < '0' || ver[7] > '9')
        return 400;
    if (ver[5] != '1')
        return 505;

    /* origin-form "/path?query", or absolute-form "http://host/path?query";
     * the target holds no space and the line goes on with " HTTP/1.x". */
    const char *path = target;
    if (*target != '/') {
        size_t skip = tlen >= 7 && strncasecmp(target, "http://", 7) == 0   ? 7
                    : tlen >= 8 && strncasecmp(target, "https://", 8) == 0 ? 8
                                                                            : 0;
        if (skip == 0)
            return 400;
        path = target + skip + strcspn(target + skip, "/?# ");
        if (*path != '/')
            path = "/";
    }
    r->path = path;
    r->plen = strcspn(path, "?# ");
    r->auth = NULL;
    r->alen = 0;
    r->n_auth = 0;
    r->query = "";
    r->qlen = 0;
    if (path[r->plen] == '?') {
        r->query = path + r->plen + 1;
        r->qlen = strcspn(r->query, "# ");
    }

    /* header-field lines: token ":" value, no CTLs, no obsolete folding */
    for (;;) {
        next_line(head, &pos, &s, &n);
        if (n == 0)
            break;
        i = 0;
        while (i < n && is_tchar((unsigned char)s[i]))
            i++;
        if (i == 0 || i >= n || s[i] != ':')
            return 400;
        if (i == 13 && strncasecmp(s, "Authorization", 13) == 0) {
            size_t v = i + 1, e = n;
            while (v < e && (s[v] == ' ' || s[v] == '\t'))
                v++;
            while (e > v && (s[e - 1] == ' ' || s[e - 1] == '\t'))
                e--;
            r->auth = s + v;
            r->alen = e - v;
            r->n_auth++;
        }
        for (i++; i < n; i++) {
            unsigned char ch = (unsigned char)s[i];
            if ((ch < ' ' && ch != '\t') || ch == 0x7f)
                return 400;
        }
    }
    return 0;
}

static int eq(const char *s, size_t n, const char *lit)
{
    return n == strlen(lit) && memcmp(s, lit, n) == 0;
}

/* With a token set, every request but the probes' must carry it: answers
 * 401 and returns 0 when this one does not. Checked before the path is
 * looked at, so it covers every page, and an unknown path tells a client
 * without the token nothing (401, not 404). */
static int authorized(struct conn *c, const struct request *r, int probe, int head_only)
{
    struct sl_admin *a = c->a;
    if (a->token == NULL || probe)
        return 1;
    /* RFC 9110 11.6.2: one Authorization field; two are refused as wrong. */
    enum sl_admin_auth v = r->n_auth > 1 ? SL_AUTH_INVALID
                                         : sl_admin_auth_check(a->token, a->token_len, r->auth, r->alen);
    if (v == SL_AUTH_OK)
        return 1;
    static const char body[] = "unauthorized\n";
    respond(c, 401, "text/plain",
            v == SL_AUTH_MISSING ? "WWW-Authenticate: Bearer realm=\"sluice\"\r\n"
                                 : "WWW-Authenticate: Bearer realm=\"sluice\", error=\"invalid_token\"\r\n",
            body, sizeof(body) - 1, head_only);
    sl_log_debug_rl("admin_unauthorized", "admin request refused: no valid token", "why=%s",
                    v == SL_AUTH_MISSING ? "missing" : "invalid");
    return 0;
}

struct sl_admin_req *sl_admin_req_detached(sl_admin_done_cb *done, void *data)
{
    struct sl_admin_req *req = calloc(1, sizeof(*req));
    if (req == NULL)
        return NULL;
    req->page = SL_ADMIN_API;
    req->done = done;
    req->done_data = data;
    return req;
}

/* Hands a request under /limits to cbs.api, which answers it later (or
 * at once) with sl_admin_answer_allow(). */
static void serve_api(struct conn *c, const struct request *r, int head_only)
{
    struct sl_admin *a = c->a;
    struct sl_admin_req *req = malloc(sizeof(*req));
    if (req == NULL) {
        respond_text(c, 500, "internal server error\n", head_only);
        return;
    }
    req->c = c;
    req->page = SL_ADMIN_API;
    req->head_only = head_only;
    req->done = NULL;
    c->req = req;
    c->state = C_WAIT;
    uv_read_stop((uv_stream_t *)&c->tcp);
    uv_timer_start(&c->timer, on_timer, WRITE_TIMEOUT_MS, 0);
    const struct sl_admin_call call = { r->method, r->mlen, r->path, r->plen, r->query, r->qlen };
    a->cbs.api(a->cbs.data, &call, req);
}

static void handle(struct conn *c, size_t end)
{
    struct request r;
    int status = parse_head(c->head, end, &r);
    if (status != 0) {
        respond_text(c, status, status == 505 ? "http version not supported\n" : "bad request\n", 0);
        return;
    }
    int head_only = eq(r.method, r.mlen, "HEAD");
    int get = head_only || eq(r.method, r.mlen, "GET");
    enum { P_NONE, P_METRICS, P_HEALTHZ, P_READYZ, P_STATS } p =
        eq(r.path, r.plen, "/metrics") ? P_METRICS
        : eq(r.path, r.plen, "/healthz") ? P_HEALTHZ
        : eq(r.path, r.plen, "/readyz") ? P_READYZ
        : eq(r.path, r.plen, "/stats") ? P_STATS
                                        : P_NONE;
    if (!authorized(c, &r, p == P_HEALTHZ || p == P_READYZ, head_only))
        return;
    /* /limits and below: the limits API (its own methods: POST too),
     * behind the token as every page but the probes */
    if (c->a->cbs.api != NULL && r.plen >= 7 && memcmp(r.path, "/limits", 7) == 0 &&
        (r.plen == 7 || r.path[7] == '/')) {
        serve_api(c, &r, head_only);
        return;
    }
    if (p == P_NONE)
        respond_text(c, 404, "not found\n", head_only);
    else if (!get)
        respond_text(c, 405, "method not allowed\n", 0);
    else if (p == P_HEALTHZ)
        respond_text(c, 200, "ok\n", head_only);
    else
        serve_page(c, p == P_READYZ ? SL_ADMIN_READY : p == P_METRICS ? SL_ADMIN_METRICS
                                                                        : SL_ADMIN_STATS,
                   head_only);
}

/* Looks at the lines completed by the latest read; returns the length of the
 * head once its terminating empty line is in, else 0. Linear in the bytes
 * read, however they trickle in. */
static size_t head_end(struct conn *c)
{
    while (c->searched < c->len) {
        char *nl = memchr(c->head + c->searched, '\n', c->len - c->searched);
        if (nl == NULL) {
            c->searched = c->len;
            return 0;
        }
        size_t start = c->line, stop = (size_t)(nl - c->head);
        c->line = c->searched = stop + 1;
        int empty = stop == start || (stop == start + 1 && c->head[start] == '\r');
        if (!empty)
            c->got_line = 1;
        else if (c->got_line)
            return c->line;
    }
    return 0;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct conn *c = s->data;
    (void)buf;
    if (c->state == C_CLOSING)
        return;
    if (nread < 0) {
        conn_close(c); /* EOF or error: before a whole head, or while lingering */
        return;
    }
    if (nread == 0)
        return;
    if (c->state != C_READ) {
        /* lingering (C_WRITE does not read): the bytes are dropped */
        c->discarded += (size_t)nread;
        if (c->discarded > LINGER_MAX)
            conn_close(c);
        return;
    }
    c->len += (size_t)nread;
    size_t end = head_end(c);
    if (end > 0) {
        handle(c, end);
    } else if (c->len == HEAD_MAX) {
        respond_text(c, 431, "request header fields too large\n", 0);
    }
}

/* ---- accepting ---------------------------------------------------------- */

/* Takes the pending connection off the listener and closes it at once. */
static void reject(struct sl_admin *a, uv_stream_t *server)
{
    uv_tcp_t *t = malloc(sizeof(*t));
    if (t == NULL)
        return;
    uv_tcp_init(a->loop, t);
    uv_accept(server, (uv_stream_t *)t);
    uv_close((uv_handle_t *)t, on_free_handle_close);
}

/* The connection that has waited longest for its head (conns is newest
 * first, so the last one reading), or NULL when every one completed a request. */
static struct conn *oldest_reading(struct sl_admin *a)
{
    struct conn *found = NULL;
    for (struct conn *c = a->conns; c != NULL; c = c->next)
        if (c->state == C_READ)
            found = c;
    return found;
}

static void on_connection(uv_stream_t *server, int status)
{
    struct sl_admin *a = server->data;
    if (status < 0) {
        sl_log_warn_rl("admin_accept_failed", "admin accept failed", "err=%s", uv_strerror(status));
        return;
    }
    if (!a->closing && a->n_conns >= MAX_CONNS) {
        /* Full: make room by closing the slowest head. Its socket is closed
         * now (uv_close closes the descriptor at once); its memory goes in
         * the close callback, so it is counted apart until then. */
        struct conn *old = oldest_reading(a);
        if (old != NULL) {
            sl_log_debug("admin connection evicted", "open=%d max=%d", a->n_conns, MAX_CONNS);
            conn_close(old);
        }
    }
    int room = a->n_conns - a->n_closing < MAX_CONNS;
    struct conn *c = a->closing || !room ? NULL : calloc(1, sizeof(*c));
    if (c == NULL) {
        sl_log_debug_rl("admin_refused", "admin connection refused", "open=%d max=%d",
                        a->n_conns - a->n_closing, MAX_CONNS);
        reject(a, server);
        return;
    }
    c->a = a;
    uv_tcp_init(a->loop, &c->tcp);
    uv_timer_init(a->loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    c->handles = 2;
    c->state = C_READ;
    c->next = a->conns;
    if (a->conns != NULL)
        a->conns->prev = c;
    a->conns = c;
    a->n_conns++;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0 ||
        uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0) {
        conn_close(c);
        return;
    }
    uv_timer_start(&c->timer, on_timer, a->head_timeout_ms, 0);
}

/* ---- the server --------------------------------------------------------- */

struct sl_admin *sl_admin_start(uv_loop_t *loop, const struct sl_addr *addr,
                                const struct sl_admin_cbs *cbs)
{
    char qaddr[100];
    sl_log_quote(addr->text, strlen(addr->text), qaddr, sizeof(qaddr));
    struct sl_admin *a = calloc(1, sizeof(*a));
    if (a == NULL) {
        sl_log_error("admin cannot listen", "addr=%s err=%s", qaddr, sl_strerror(SL_ENOMEM));
        return NULL;
    }
    a->loop = loop;
    if (cbs != NULL)
        a->cbs = *cbs;
    a->head_timeout_ms = HEAD_TIMEOUT_MS;
    snprintf(a->addr, sizeof(a->addr), "%s", addr->text);
    int rc = uv_tcp_init(loop, &a->listener);
    if (rc < 0) {
        sl_log_error("admin cannot listen", "addr=%s err=%s", qaddr, uv_strerror(rc));
        free(a);
        return NULL;
    }
    a->listener.data = a;
    a->listening = 1;
    rc = uv_tcp_bind(&a->listener, (const struct sockaddr *)&addr->ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&a->listener, BACKLOG, on_connection);
    if (rc < 0) {
        sl_log_error("admin cannot listen", "addr=%s err=%s", qaddr, uv_strerror(rc));
        a->closing = 1;
        uv_close((uv_handle_t *)&a->listener, on_listener_close); /* frees <a> */
        return NULL;
    }
    struct sockaddr_storage ss;
    int sslen = sizeof(ss);
    if (uv_tcp_getsockname(&a->listener, (struct sockaddr *)&ss, &sslen) == 0)
        a->port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                           : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    sl_log_info("admin listening", "addr=%s port=%d", qaddr, a->port);
    return a;
}

int sl_admin_set_token(struct sl_admin *a, const char *token)
{
    char *copy = NULL;
    if (token != NULL && token[0] != '\0' && (copy = strdup(token)) == NULL)
        return -1;
    if (a->token != NULL) {
        explicit_bzero(a->token, a->token_len);
        free(a->token);
    }
    a->token = copy;
    a->token_len = copy != NULL ? strlen(copy) : 0;
    return 0;
}

void sl_admin_close(struct sl_admin *a)
{
    if (a == NULL || a->closing)
        return;
    a->closing = 1;
    (void)sl_admin_set_token(a, NULL);
    uv_close((uv_handle_t *)&a->listener, on_listener_close);
    for (struct conn *c = a->conns; c != NULL; c = c->next)
        conn_close(c);
    /* freed by the last close callback */
}

int sl_admin_port(const struct sl_admin *a)
{
    return a->port;
}

int sl_admin_connections(const struct sl_admin *a)
{
    return a->n_conns;
}

void sl_admin_set_head_timeout(struct sl_admin *a, uint64_t ms)
{
    a->head_timeout_ms = ms;
}

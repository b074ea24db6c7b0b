/*
 * capsrv — an HTTP/1.1 upstream with a fixed capacity, for the adaptive
 * concurrency benchmark (docs/adaptive.md).
 *
 *   capsrv [-n SLOTS] [-t SERVICE_MS] [-p PORT] [-b BODY_BYTES]
 *
 * Listens on 127.0.0.1:PORT (default 8090; 0 = ephemeral, then the port is
 * printed on stdout, the only thing it ever prints there). Each request
 * takes one of SLOTS service slots (default 8) for SERVICE_MS milliseconds
 * (default 10), then gets `200` with a body of BODY_BYTES (default 2);
 * requests that find every slot busy wait in one FIFO, unbounded, as a
 * thread-pool server's accept queue would. Its capacity is therefore
 * SLOTS / SERVICE_MS requests per millisecond, and latency beyond the
 * service time is queueing, nothing else: what an overloaded upstream
 * looks like to the proxy in front of it.
 *
 * Keep-alive (HTTP/1.1 by default, HTTP/1.0 with `Connection: keep-alive`);
 * one request at a time per connection (pipelined requests wait in the
 * connection's buffer); request bodies with Content-Length are read and
 * dropped. Headers over 8 KiB get 431, bodies over 1 MiB 413, chunked
 * bodies 501, garbage 400, each then closed. Timers are libuv's: whole
 * milliseconds. SIGINT/SIGTERM stop it. Exit status 1 on a setup error.
 */
#include <ctype.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <uv.h>

#define HDR_MAX  8192
#define BODY_MAX (1024 * 1024)

struct conn {
    uv_tcp_t     tcp;
    uv_timer_t   timer;         /* the service time */
    struct conn *next;          /* in the wait FIFO */
    char         buf[HDR_MAX];  /* bytes read, not yet parsed */
    size_t       len;
    size_t       skip;          /* body bytes still to drop */
    int          busy;          /* a request is waiting or in service */
    int          closing;
    int          reading;
    int          close_after;   /* the request said so */
    int          handles;       /* open handles (tcp, timer) */
};

static uv_loop_t *loop;
static unsigned   slots = 8, in_service;
static uint64_t   service_ms = 10;
static char      *reply, *reply_close;
static size_t     reply_len, reply_close_len;
static struct conn *wait_head, *wait_tail;

static void on_closed(uv_handle_t *h)
{
    struct conn *c = h->data;
    if (--c->handles == 0)
        free(c);
}

static void start_service(struct conn *c);

/* A slot is free: the longest waiter takes it. */
static void slot_freed(void)
{
    in_service--;
    if (wait_head) {
        struct conn *n = wait_head;
        wait_head = n->next;
        if (!wait_head)
            wait_tail = NULL;
        n->next = NULL;
        start_service(n);
    }
}

static void conn_close(struct conn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    /* closing the timer cancels it: give its slot back here */
    if (uv_is_active((uv_handle_t *)&c->timer))
        slot_freed();
    /* a waiting connection leaves the FIFO; one in service gives its slot back */
    struct conn **pp = &wait_head, *prev = NULL;
    for (; *pp; prev = *pp, pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            if (wait_tail == c)
                wait_tail = prev;
            break;
        }
    uv_close((uv_handle_t *)&c->tcp, on_closed);
    uv_close((uv_handle_t *)&c->timer, on_closed);
}

static void on_written(uv_write_t *w, int status)
{
    free(w);
    (void)status;
}

static void send_text(struct conn *c, const char *s, size_t n)
{
    uv_write_t *w = malloc(sizeof(*w));
    if (!w) {
        conn_close(c);
        return;
    }
    uv_buf_t b = uv_buf_init((char *)s, (unsigned)n);
    if (uv_write(w, (uv_stream_t *)&c->tcp, &b, 1, on_written) != 0) {
        free(w);
        conn_close(c);
    }
}

static void fail(struct conn *c, const char *status)
{
    static char msg[128];
    int n = snprintf(msg, sizeof(msg),
                     "HTTP/1.1 %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", status);
    send_text(c, msg, (size_t)n);
    conn_close(c);
}

static void parse(struct conn *c);
static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b);
static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b);

static void on_served(uv_timer_t *t)
{
    struct conn *c = t->data;
    slot_freed();
    if (c->closing)
        return;
    c->busy = 0;
    if (c->close_after) {
        send_text(c, reply_close, reply_close_len);
        conn_close(c);
        return;
    }
    send_text(c, reply, reply_len);
    parse(c); /* a pipelined request may be waiting in the buffer */
    if (!c->closing && !c->reading && c->len < sizeof(c->buf)) {
        c->reading = 1;
        uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    }
}

static void start_service(struct conn *c)
{
    in_service++;
    uv_timer_start(&c->timer, on_served, service_ms, 0);
}

/* A complete request: take a slot or wait for one. */
static void admit(struct conn *c)
{
    c->busy = 1;
    if (in_service < slots) {
        start_service(c);
        return;
    }
    c->next = NULL;
    if (wait_tail)
        wait_tail->next = c;
    else
        wait_head = c;
    wait_tail = c;
}

/* The value of header <name> in <hdr> (lines ending in \r\n), or NULL. */
static const char *header(const char *hdr, const char *end, const char *name, size_t *vlen)
{
    size_t nl = strlen(name);
    for (const char *p = hdr; p < end;) {
        const char *eol = memmem(p, (size_t)(end - p), "\r\n", 2);
        if (!eol)
            eol = end;
        if ((size_t)(eol - p) > nl && p[nl] == ':' && strncasecmp(p, name, nl) == 0) {
            const char *v = p + nl + 1;
            while (v < eol && (*v == ' ' || *v == '\t'))
                v++;
            *vlen = (size_t)(eol - v);
            return v;
        }
        p = eol + 2;
    }
    return NULL;
}

static int has_token(const char *v, size_t n, const char *tok)
{
    size_t tl = strlen(tok);
    for (size_t i = 0; i + tl <= n; i++)
        if (strncasecmp(v + i, tok, tl) == 0)
            return 1;
    return 0;
}

static void parse(struct conn *c)
{
    while (!c->busy && !c->closing) {
        if (c->skip) { /* the rest of a body */
            size_t k = c->skip < c->len ? c->skip : c->len;
            memmove(c->buf, c->buf + k, c->len - k);
            c->len -= k;
            c->skip -= k;
            if (c->skip)
                return;
            admit(c);
            return;
        }
        char *e = memmem(c->buf, c->len, "\r\n\r\n", 4);
        if (!e) {
            if (c->len == sizeof(c->buf))
                fail(c, "431 Request Header Fields Too Large");
            return;
        }
        char *line_end = memmem(c->buf, c->len, "\r\n", 2);
        const char *sp = memchr(c->buf, ' ', (size_t)(line_end - c->buf));
        if (!sp || line_end - c->buf < 14 || memcmp(line_end - 8, "HTTP/1.", 7) != 0) {
            fail(c, "400 Bad Request");
            return;
        }
        int http10 = line_end[-1] == '0';
        const char *hs = line_end + 2, *he = e + 2;
        size_t vl;
        const char *v = header(hs, he, "Connection", &vl);
        c->close_after = http10 ? !(v && has_token(v, vl, "keep-alive")) : (v && has_token(v, vl, "close"));
        if (header(hs, he, "Transfer-Encoding", &vl)) {
            fail(c, "501 Not Implemented");
            return;
        }
        uint64_t body = 0;
        if ((v = header(hs, he, "Content-Length", &vl)) != NULL) {
            for (size_t i = 0; i < vl; i++) {
                if (!isdigit((unsigned char)v[i]) || body > BODY_MAX) {
                    fail(c, body > BODY_MAX ? "413 Content Too Large" : "400 Bad Request");
                    return;
                }
                body = body * 10 + (uint64_t)(v[i] - '0');
            }
            if (body > BODY_MAX) {
                fail(c, "413 Content Too Large");
                return;
            }
        }
        size_t used = (size_t)(e + 4 - c->buf);
        memmove(c->buf, c->buf + used, c->len - used);
        c->len -= used;
        c->skip = (size_t)body;
        if (!c->skip) {
            admit(c);
            return;
        }
    }
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    struct conn *c = h->data;
    (void)hint;
    /* the connection's own buffer: when it is full, reading waits */
    *b = uv_buf_init(c->buf + c->len, (unsigned)(sizeof(c->buf) - c->len));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    struct conn *c = s->data;
    (void)b;
    if (n < 0) {
        conn_close(c);
        return;
    }
    c->len += (size_t)n;
    parse(c);
    /* a full buffer while a request is served: stop reading until it is parsed */
    if (!c->closing && c->len == sizeof(c->buf) && c->busy) {
        c->reading = 0;
        uv_read_stop(s);
    }
}

static void on_conn(uv_stream_t *srv, int status)
{
    if (status < 0)
        return;
    struct conn *c = calloc(1, sizeof(*c));
    if (!c)
        return;
    uv_tcp_init(loop, &c->tcp);
    uv_timer_init(loop, &c->timer);
    c->tcp.data = c->timer.data = c;
    c->handles = 2;
    if (uv_accept(srv, (uv_stream_t *)&c->tcp) != 0) {
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    c->reading = 1;
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

static void on_signal(uv_signal_t *s, int signum)
{
    (void)signum;
    uv_stop(s->loop);
}

static char *make_reply(size_t body, int close_it, size_t *len)
{
    char head[160];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n%s\r\n",
                     body, close_it ? "Connection: close\r\n" : "");
    char *r = malloc((size_t)n + body);
    if (!r)
        return NULL;
    memcpy(r, head, (size_t)n);
    memset(r + n, 'x', body);
    if (body)
        r[(size_t)n + body - 1] = '\n';
    *len = (size_t)n + body;
    return r;
}

int main(int argc, char **argv)
{
    int port = 8090, opt;
    size_t body = 2;
    while ((opt = getopt(argc, argv, "n:t:p:b:")) != -1) {
        switch (opt) {
        case 'n': slots = (unsigned)strtoul(optarg, NULL, 10); break;
        case 't': service_ms = strtoull(optarg, NULL, 10); break;
        case 'p': port = atoi(optarg); break;
        case 'b': body = strtoul(optarg, NULL, 10); break;
        default:
            fprintf(stderr, "usage: capsrv [-n SLOTS] [-t SERVICE_MS] [-p PORT] [-b BODY_BYTES]\n");
            return 1;
        }
    }
    if (slots < 1 || port < 0 || port > 65535 || body > BODY_MAX) {
        fprintf(stderr, "capsrv: bad option\n");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    reply = make_reply(body, 0, &reply_len);
    reply_close = make_reply(body, 1, &reply_close_len);
    if (!reply || !reply_close)
        return 1;
    loop = uv_default_loop();
    uv_tcp_t srv;
    struct sockaddr_in addr;
    uv_ip4_addr("127.0.0.1", port, &addr);
    uv_tcp_init(loop, &srv);
    int rc = uv_tcp_bind(&srv, (const struct sockaddr *)&addr, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&srv, 1024, on_conn);
    if (rc != 0) {
        fprintf(stderr, "capsrv: 127.0.0.1:%d: %s\n", port, uv_strerror(rc));
        return 1;
    }
    if (port == 0) {
        struct sockaddr_storage ss;
        int sl = sizeof(ss);
        uv_tcp_getsockname(&srv, (struct sockaddr *)&ss, &sl);
        printf("%d\n", ntohs(((struct sockaddr_in *)&ss)->sin_port));
        fflush(stdout);
    }
    uv_signal_t sint, sterm;
    uv_signal_init(loop, &sint);
    uv_signal_init(loop, &sterm);
    uv_signal_start(&sint, on_signal, SIGINT);
    uv_signal_start(&sterm, on_signal, SIGTERM);
    uv_run(loop, UV_RUN_DEFAULT);
    return 0;
}

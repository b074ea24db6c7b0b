/* aload — an open-loop load generator for the adaptive concurrency
 * benchmark (tests/bench/adaptive.sh, docs/adaptive.md).
 *
 * Requests arrive at a fixed rate whatever the answers do (an open loop:
 * a closed loop slows down with the server and hides an overload), each on
 * an idle connection of a pool (a new one while under -c, else it waits its
 * turn in a FIFO here: its latency counts from when it was due). HTTP: a GET
 * with "X-Who: vip" for a fraction -v of them, else "X-Who: cN". RESP: an
 * EVAL spinning -s ms inside Redis; VIP connections say CLIENT SETNAME vip
 * first (identity = client_name). Per class (vip, others): answered (200 /
 * an integer), refused (503 / -TRYAGAIN), other; the answered ones'
 * latencies give p50 and p99. One line of results on stdout.
 *
 *   aload -m http|resp -p PORT -r RATE -d SECONDS [-w WARMUP] [-c CONNS]
 *         [-v VIPFRACTION] [-s SPINMS]
 *
 * libuv only. Not a test: a tool for the benchmark script. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <uv.h>

#define MAXC 4096

struct conn {
    uv_tcp_t   h;
    uv_connect_t cr;
    int        vip, busy, up, setup; /* setup: CLIENT SETNAME's reply is due */
    int        dead;                 /* failed: closing, never used again */
    uint64_t   due_ns;               /* the request in flight was due then */
    char       buf[16384];
    size_t     len;
    struct conn *next_idle;
};

struct cls {
    uint64_t ok, refused, other;
    double  *lat;  /* ms, answered ones */
    size_t   n, cap;
};

static uv_loop_t *loop;
static int mode_resp, port, maxc = 512;
static double rate = 100, vipf = 0, spin_ms = 5, dur = 10, warm = 2;
static uint64_t t0, sent, idx;
static struct conn *idle[2];
static int nconn;
static struct cls cl[2];
/* requests due with no connection free: a FIFO of due times and classes */
static uint64_t *pend_due;
static uint8_t *pend_vip;
static size_t pend_h, pend_n, pend_cap;
static uint64_t backlog_max;

static void issue(struct conn *c, uint64_t due, int vip);
static void conn_open(int vip);

static void record(int vip, uint64_t due, int what)
{
    uint64_t now = uv_hrtime();
    if ((double)(due - t0) / 1e9 < warm)
        return;
    struct cls *k = &cl[vip];
    if (what == 0) {
        k->ok++;
        if (k->n == k->cap) {
            k->cap = k->cap ? k->cap * 2 : 4096;
            k->lat = realloc(k->lat, k->cap * sizeof(double));
        }
        k->lat[k->n++] = (double)(now - due) / 1e6;
    } else if (what == 1) {
        k->refused++;
    } else {
        k->other++;
    }
}

static void make_idle(struct conn *c)
{
    c->busy = 0;
    /* a waiting request of its class goes now */
    for (size_t i = 0; i < pend_n; i++) {
        size_t j = (pend_h + i) % pend_cap;
        if (pend_vip[j] == c->vip && i == 0) {
            uint64_t d = pend_due[j];
            pend_h = (pend_h + 1) % pend_cap;
            pend_n--;
            issue(c, d, c->vip);
            return;
        }
    }
    c->next_idle = idle[c->vip];
    idle[c->vip] = c;
}

static void on_alloc(uv_handle_t *h, size_t s, uv_buf_t *b)
{
    struct conn *c = h->data;
    (void)s;
    b->base = c->buf + c->len;
    b->len = sizeof(c->buf) - c->len;
}

static void on_closed(uv_handle_t *h)
{
    free(h->data);
}

static void conn_fail(struct conn *c)
{
    if (c->dead)
        return;
    c->dead = 1;
    if (c->busy)
        record(c->vip, c->due_ns, 2);
    else /* out of the idle list: it is freed once closed */
        for (struct conn **pp = &idle[c->vip]; *pp != NULL; pp = &(*pp)->next_idle)
            if (*pp == c) {
                *pp = c->next_idle;
                break;
            }
    nconn--;
    if (!uv_is_closing((uv_handle_t *)&c->h))
        uv_close((uv_handle_t *)&c->h, on_closed);
}

/* One whole answer at the start of c->buf: its length, 0 if not whole yet;
 * *what: 0 answered, 1 refused, 2 other. */
static size_t answer(struct conn *c, int *what)
{
    c->buf[c->len < sizeof(c->buf) ? c->len : sizeof(c->buf) - 1] = '\0';
    if (mode_resp) {
        char *e = memmem(c->buf, c->len, "\r\n", 2);
        if (e == NULL)
            return 0;
        *what = c->buf[0] == ':' || c->buf[0] == '+' ? 0
                : strncmp(c->buf, "-TRYAGAIN", 9) == 0 ? 1 : 2;
        return (size_t)(e - c->buf) + 2;
    }
    char *e = memmem(c->buf, c->len, "\r\n\r\n", 4);
    if (e == NULL)
        return 0;
    const char *cl_ = strcasestr(c->buf, "\r\ncontent-length:");
    size_t body = cl_ && cl_ < e ? (size_t)atol(cl_ + 17) : 0;
    size_t total = (size_t)(e - c->buf) + 4 + body;
    if (c->len < total)
        return 0;
    int st = atoi(c->buf + 9);
    *what = st == 200 ? 0 : st == 503 ? 1 : 2;
    return total;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    struct conn *c = s->data;
    (void)b;
    if (n < 0) {
        conn_fail(c);
        return;
    }
    c->len += (size_t)n;
    int what;
    size_t used;
    while ((used = answer(c, &what)) > 0) {
        memmove(c->buf, c->buf + used, c->len - used);
        c->len -= used;
        if (c->setup) {
            c->setup = 0;
            continue;
        }
        if (c->busy)
            record(c->vip, c->due_ns, what);
        make_idle(c);
    }
}

static void on_write(uv_write_t *w, int st)
{
    free(w);
    (void)st;
}

static void send_text(struct conn *c, const char *p, size_t n)
{
    uv_write_t *w = malloc(sizeof(*w) + n);
    memcpy((char *)(w + 1), p, n);
    uv_buf_t b = uv_buf_init((char *)(w + 1), (unsigned)n);
    if (c->dead || uv_write(w, (uv_stream_t *)&c->h, &b, 1, on_write) < 0) {
        free(w);
        conn_fail(c);
    }
}

static void issue(struct conn *c, uint64_t due, int vip)
{
    char req[512];
    int n;
    c->busy = 1;
    c->due_ns = due;
    (void)vip;
    if (mode_resp)
        n = snprintf(req, sizeof(req),
                     "*5\r\n$4\r\nEVAL\r\n$%d\r\n%s\r\n$1\r\n1\r\n$1\r\ns\r\n$%d\r\n%g\r\n",
                     (int)strlen("local t=redis.call('TIME') local s=t[1]*1e6+t[2] repeat "
                                 "t=redis.call('TIME') until t[1]*1e6+t[2]-s >= "
                                 "tonumber(ARGV[1])*1000 return redis.call('INCR', KEYS[1])"),
                     "local t=redis.call('TIME') local s=t[1]*1e6+t[2] repeat "
                     "t=redis.call('TIME') until t[1]*1e6+t[2]-s >= "
                     "tonumber(ARGV[1])*1000 return redis.call('INCR', KEYS[1])",
                     (int)snprintf(NULL, 0, "%g", spin_ms), spin_ms);
    else if (c->vip)
        n = snprintf(req, sizeof(req), "GET / HTTP/1.1\r\nHost: b\r\nX-Who: vip\r\n\r\n");
    else
        n = snprintf(req, sizeof(req), "GET / HTTP/1.1\r\nHost: b\r\nX-Who: c%d\r\n\r\n",
                     (int)(idx % 1000));
    send_text(c, req, (size_t)n);
}

static void on_connect(uv_connect_t *r, int st)
{
    struct conn *c = r->data;
    if (st < 0) {
        conn_fail(c);
        return;
    }
    c->up = 1;
    uv_read_start((uv_stream_t *)&c->h, on_alloc, on_read);
    if (mode_resp && c->vip) {
        static const char nm[] = "*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$3\r\nvip\r\n";
        c->setup = 1;
        send_text(c, nm, sizeof(nm) - 1);
    }
    make_idle(c);
}

static void conn_open(int vip)
{
    struct conn *c = calloc(1, sizeof(*c));
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", port, &a);
    uv_tcp_init(loop, &c->h);
    uv_tcp_nodelay(&c->h, 1);
    c->h.data = c;
    c->cr.data = c;
    c->vip = vip;
    c->busy = 1; /* not idle until connected */
    nconn++;
    if (uv_tcp_connect(&c->cr, &c->h, (const struct sockaddr *)&a, on_connect) < 0)
        conn_fail(c);
}

static void on_tick(uv_timer_t *t)
{
    uint64_t now = uv_hrtime();
    double el = (double)(now - t0) / 1e9;
    if (el >= warm + dur) {
        uv_timer_stop(t);
        uv_stop(loop);
        return;
    }
    uint64_t want = (uint64_t)(el * rate);
    while (sent < want) {
        uint64_t due = t0 + (uint64_t)((double)sent / rate * 1e9);
        int vip = vipf > 0 && (double)((sent * 2654435761u) % 10000) / 10000.0 < vipf;
        sent++;
        idx++;
        struct conn *c = idle[vip];
        if (c != NULL) {
            idle[vip] = c->next_idle;
            issue(c, due, vip);
            continue;
        }
        if (nconn < maxc)
            conn_open(vip);
        if (pend_n == pend_cap) {
            size_t nc = pend_cap ? pend_cap * 2 : 1024;
            uint64_t *d = malloc(nc * sizeof(*d));
            uint8_t *v = malloc(nc);
            for (size_t i = 0; i < pend_n; i++) {
                d[i] = pend_due[(pend_h + i) % pend_cap];
                v[i] = pend_vip[(pend_h + i) % pend_cap];
            }
            free(pend_due);
            free(pend_vip);
            pend_due = d;
            pend_vip = v;
            pend_h = 0;
            pend_cap = nc;
        }
        pend_due[(pend_h + pend_n) % pend_cap] = due;
        pend_vip[(pend_h + pend_n) % pend_cap] = (uint8_t)vip;
        pend_n++;
        if (pend_n > backlog_max)
            backlog_max = pend_n;
    }
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(struct cls *k, double p)
{
    if (k->n == 0)
        return 0;
    size_t i = (size_t)(p * (double)(k->n - 1));
    return k->lat[i];
}

int main(int argc, char **argv)
{
    int o;
    while ((o = getopt(argc, argv, "m:p:r:d:w:c:v:s:")) != -1) {
        switch (o) {
        case 'm': mode_resp = strcmp(optarg, "resp") == 0; break;
        case 'p': port = atoi(optarg); break;
        case 'r': rate = atof(optarg); break;
        case 'd': dur = atof(optarg); break;
        case 'w': warm = atof(optarg); break;
        case 'c': maxc = atoi(optarg) < MAXC ? atoi(optarg) : MAXC; break;
        case 'v': vipf = atof(optarg); break;
        case 's': spin_ms = atof(optarg); break;
        default:
            fprintf(stderr, "usage: aload -m http|resp -p PORT -r RATE -d S [-w S] [-c N] "
                            "[-v FRACTION] [-s SPINMS]\n");
            return 2;
        }
    }
    loop = uv_default_loop();
    uv_timer_t tick;
    uv_timer_init(loop, &tick);
    t0 = uv_hrtime();
    uv_timer_start(&tick, on_tick, 1, 1);
    uv_run(loop, UV_RUN_DEFAULT);
    for (int k = 0; k < 2; k++)
        qsort(cl[k].lat, cl[k].n, sizeof(double), cmpd);
    struct cls all = cl[0];
    uint64_t ok = cl[0].ok + cl[1].ok, ref = cl[0].refused + cl[1].refused,
             oth = cl[0].other + cl[1].other;
    (void)all;
    /* the others' and everyone's latencies (VIPs' separately) */
    printf("goodput=%.1f/s refused=%.1f/s other=%llu others_p50=%.2fms others_p99=%.2fms "
           "others_ok=%.4f vip_ok=%.4f vip_p99=%.2fms backlog_max=%llu conns=%d\n",
           (double)ok / dur, (double)ref / dur, (unsigned long long)oth, pct(&cl[0], 0.5),
           pct(&cl[0], 0.99),
           cl[0].ok + cl[0].refused + cl[0].other
               ? (double)cl[0].ok / (double)(cl[0].ok + cl[0].refused + cl[0].other) : 0,
           cl[1].ok + cl[1].refused + cl[1].other
               ? (double)cl[1].ok / (double)(cl[1].ok + cl[1].refused + cl[1].other) : 0,
           pct(&cl[1], 0.99), (unsigned long long)backlog_max, nconn);
    return 0;
}

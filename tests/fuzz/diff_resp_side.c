/* sluice — differential RESP fuzzer, one side of a run: included by
 * tests/fuzz/diff_resp.c. Writes a stream on a fresh connection the way its
 * mode says (whole, byte by byte, random sizes, at piece boundaries,
 * slowly) while reading the replies, and records how the run ended. */

/* ---- running one side --------------------------------------------------------- */

enum ending { END_MARKER, END_CLOSED, END_TIMEOUT };
static const char *const ending_name[] = { "answered up to the end marker", "closed by the peer",
                                           "no answer (quiet timeout)" };

struct outcome {
    struct buf raw;    /* every byte received */
    size_t    *ends;   /* end offset of each complete reply */
    size_t     n, cap;
    int        ending;
    int        bad;    /* the replies were not RESP (offset of the trouble in raw) */
    size_t     bad_at;
    int        reset;  /* the peer reset the connection: what it sent unread may be lost */
};

static void out_free(struct outcome *o)
{
    buf_free(&o->raw);
    free(o->ends);
    memset(o, 0, sizeof(*o));
}

/* Write sizes for <len> bytes of <s> in its mode; returns the count. */
static size_t plan(const struct stream *s, size_t len, size_t **sizes, int *gap_us)
{
    uint64_t r = s->wseed;
    size_t cap = 16, n = 0;
    size_t *v = malloc(cap * sizeof(*v));
    *gap_us = 0;
#define PUSH(x)                                                     \
    do {                                                            \
        if (n == cap) {                                             \
            cap *= 2;                                               \
            v = realloc(v, cap * sizeof(*v));                       \
        }                                                           \
        v[n++] = (x);                                               \
    } while (0)
    switch (s->mode) {
    case W_WHOLE:
        PUSH(len);
        break;
    case W_BYTES:
        for (size_t i = 0; i < len; i++)
            PUSH((size_t)1);
        break;
    case W_RANDOM: {
        static const unsigned maxes[] = { 7, 64, 1024, 16384 };
        unsigned mx = maxes[rnd(&r, 4)];
        for (size_t at = 0; at < len;) {
            size_t k = 1 + rnd(&r, mx);
            if (k > len - at)
                k = len - at;
            PUSH(k);
            at += k;
        }
        break;
    }
    case W_PIECES:
        *gap_us = 2000;
        for (size_t i = 0; i < s->n; i++)
            if (s->v[i].len)
                PUSH(s->v[i].len);
        break;
    default: { /* W_SLOW: up to 12 writes at random places, 3 ms apart */
        *gap_us = 3000;
        unsigned k = 2 + rnd(&r, 11);
        size_t at = 0;
        for (unsigned i = 1; i < k && at < len; i++) {
            size_t step = 1 + rnd(&r, (unsigned)((len - at) / (k - i) * 2 + 1));
            if (step > len - at)
                step = len - at;
            PUSH(step);
            at += step;
        }
        if (at < len)
            PUSH(len - at);
    }
    }
#undef PUSH
    *sizes = v;
    return n;
}

struct reader {
    struct sl_reply_scan scan;
    size_t               scanned; /* bytes of raw already given to the scanner */
    size_t               start;   /* where the reply being scanned began */
};

/* Scans what arrived; sets o->ending = END_MARKER once the marker's answer came. */
static void reader_scan(struct reader *rd, struct outcome *o)
{
    while (!o->bad && rd->scanned < o->raw.len) {
        unsigned f = 0;
        long got = sl_reply_scan(&rd->scan, o->raw.p + rd->scanned, o->raw.len - rd->scanned, &f);
        if (got < 0) {
            o->bad = 1;
            o->bad_at = rd->scanned;
            return;
        }
        rd->scanned += (size_t)got;
        if (f & SL_REPLY_DONE) {
            if (o->n == o->cap) {
                o->cap = o->cap ? o->cap * 2 : 64;
                o->ends = realloc(o->ends, o->cap * sizeof(*o->ends));
                if (!o->ends)
                    abort();
            }
            o->ends[o->n++] = rd->scanned;
            if (memmem(o->raw.p + rd->start, rd->scanned - rd->start, END_TOKEN,
                       sizeof(END_TOKEN) - 1))
                o->ending = END_MARKER;
            rd->start = rd->scanned;
        }
    }
}

/* Reads what is there (without blocking); returns -1 once the peer closed. */
static int drain(int fd, struct reader *rd, struct outcome *o)
{
    char tmp[65536];
    for (;;) {
        ssize_t k = read(fd, tmp, sizeof(tmp));
        if (k > 0) {
            buf_add(&o->raw, tmp, (size_t)k);
            continue;
        }
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && errno == ECONNRESET)
            o->reset = 1;
        reader_scan(rd, o);
        return -1; /* EOF or a reset: both a close (known[]) */
    }
    reader_scan(rd, o);
    return 0;
}

static int g_quiet_ms = 1000;

/* Sends <data,len> to <port> on a fresh connection with the write plan of
 * <s>, reading all the while, then reads until the marker's answer, a close,
 * or --quiet ms without a byte. */
static int run_side(int port, const struct stream *s, const char *data, size_t len,
                    struct outcome *o)
{
    struct reader rd;
    size_t *sizes = NULL;
    int gap_us;
    size_t nw = plan(s, len, &sizes, &gap_us);
    int closed = 0;

    memset(o, 0, sizeof(*o));
    buf_add(&o->raw, "", 0);
    o->ending = END_TIMEOUT;
    memset(&rd, 0, sizeof(rd));
    sl_reply_init(&rd.scan);

    int fd = th_connect(port);
    if (fd < 0) {
        free(sizes);
        sl_reply_release(&rd.scan);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    th_nonblock(fd);

    size_t at = 0;
    for (size_t w = 0; w < nw && !closed; w++) {
        size_t left = sizes[w];
        while (left > 0 && !closed) {
            ssize_t k = write(fd, data + at, left);
            if (k > 0) {
                at += (size_t)k;
                left -= (size_t)k;
                continue;
            }
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                struct pollfd pf = { fd, POLLIN | POLLOUT, 0 };
                poll(&pf, 1, 1000);
                if (pf.revents & (POLLIN | POLLHUP | POLLERR))
                    closed = drain(fd, &rd, o) < 0;
                continue;
            }
            /* EPIPE / ECONNRESET: the peer closed (after a protocol error) */
            if (k < 0 && (errno == ECONNRESET || errno == EPIPE))
                o->reset = 1;
            drain(fd, &rd, o);
            closed = 1;
        }
        if (gap_us && w + 1 < nw)
            usleep((useconds_t)gap_us); /* so sluice reads the next write apart */
        if (!closed)
            closed = drain(fd, &rd, o) < 0;
    }
    free(sizes);

    uint64_t last = th_now_ms(), hard = last + 30000;
    while (!closed && o->ending != END_MARKER && !o->bad) {
        uint64_t now = th_now_ms();
        if (now >= last + (uint64_t)g_quiet_ms || now >= hard)
            break;
        struct pollfd pf = { fd, POLLIN, 0 };
        int pr = poll(&pf, 1, (int)(last + (uint64_t)g_quiet_ms - now));
        if (pr > 0) {
            size_t before = o->raw.len;
            closed = drain(fd, &rd, o) < 0;
            if (o->raw.len > before)
                last = th_now_ms();
        }
    }
    if (closed && o->ending != END_MARKER)
        o->ending = END_CLOSED;
    close(fd);
    sl_reply_release(&rd.scan);
    return 0;
}


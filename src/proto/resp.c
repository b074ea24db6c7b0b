/* sluice — RESP request framer.
 *
 * A small state machine over the client's bytes. Multibulk requests are read
 * item by item; only what the limiter needs is kept of a request: argc, the
 * first SL_RESP_CAPTURE_LEN bytes of the first SL_RESP_CAPTURE_ARGS
 * arguments and their full lengths, and how much of the request has passed.
 * A bulk's payload is never held: its bytes are counted (and the first ones
 * captured) as they pass, so a 500 MB SET costs the framer what a GET does.
 *
 *   input: consumed | *3\r\n$3\r\nSET\r\n$1\r\nk\r\n$9000000\r\n...... | (next read)
 *                     ^ BOUNDARY   ^ ITEM: one header line,  ^ PAYLOAD: counted down,
 *                       count line   checked whole, then       captured while idx < 8,
 *                       checked      its payload               never buffered
 *
 * What is buffered (st->in) is bounded: the bytes of the last feed not yet
 * consumed, and a header or inline line that is not complete yet (at most
 * SL_RESP_MAX_LINE, the cap after which it is an error). A feed that lands
 * inside a payload with nothing else pending is counted off without a copy.
 *
 * Every line is checked before it is believed: the type byte must be '$',
 * the length a Redis-valid number within max_bulk, the request within
 * max_request. The error texts are Redis's own.
 *
 * hiredis's reader did this job until bulks had to stream: it keeps an
 * incomplete bulk whole in its buffer, so a client part-way through a big
 * SET held that many bytes of memory. Store replies still use hiredis.
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/hex.h"
#include "proto/resp.h"

/* max_request when sl_resp_init() is given 0: Redis's proto-max-bulk-len. */
#define DEFAULT_MAX_REQUEST (512ull * 1024 * 1024)

/* An empty input buffer bigger than this is given back rather than kept. */
#define KEEP_CAP (2 * SL_RESP_MAX_LINE)

/* Where the parse stands (st->phase). */
enum {
    P_BOUNDARY = 0, /* between requests */
    P_ITEM,         /* before argument <idx>'s length line */
    P_PAYLOAD,      /* inside argument <idx>'s payload: <left> bytes to come */
};

/* Results of reading a length line. */
enum {
    LINE_MORE = -1, /* no CRLF yet, still short enough */
    LINE_LONG = -2, /* no CR within SL_RESP_MAX_LINE bytes */
};

/* Redis's isspace() set: what separates inline words. */
static const unsigned char blank[256] = {
    [' '] = 1, ['\t'] = 1, ['\n'] = 1, ['\v'] = 1, ['\f'] = 1, ['\r'] = 1,
};

static int fail(struct sl_resp *st, const char *msg)
{
    size_t n = strlen(msg);
    if (n >= sizeof(st->err))
        n = sizeof(st->err) - 1;
    memcpy(st->err, msg, n);
    st->err[n] = '\0';
    return -1;
}

static int fail_type(struct sl_resp *st, char c)
{
    static const char pre[] = "Protocol error: expected '$', got '";
    char *e = st->err;
    memcpy(e, pre, sizeof(pre) - 1);
    e += sizeof(pre) - 1;
    /* As Redis's reply: CR and LF would break the -ERR line, so they become
     * blanks; a NUL ends the message right there, as it does in Redis. */
    *e++ = (c == '\r' || c == '\n') ? ' ' : c;
    *e++ = '\'';
    *e = '\0';
    return -1;
}

/* Parses <n> bytes at <p> as Redis's string2ll() does: optional '-', no
 * leading zeros, no '+', no blanks, must fit a long long. Returns 1 or 0. */
static int parse_ll(const char *p, size_t n, long long *out)
{
    int neg = 0;
    unsigned long long v;

    if (n == 1 && p[0] == '0') {
        *out = 0;
        return 1;
    }
    if (n > 0 && p[0] == '-') {
        neg = 1;
        p++;
        n--;
    }
    if (n == 0 || n > 19 || p[0] < '1' || p[0] > '9')
        return 0;
    v = (unsigned long long)(p[0] - '0');
    for (size_t i = 1; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return 0;
        /* 19 digits fit an unsigned long long, so no overflow check per step. */
        v = v * 10 + (unsigned long long)(p[i] - '0');
    }
    if (neg) {
        if (v > (unsigned long long)LLONG_MAX + 1)
            return 0;
        *out = v == (unsigned long long)LLONG_MAX + 1 ? LLONG_MIN : -(long long)v;
    } else {
        if (v > (unsigned long long)LLONG_MAX)
            return 0;
        *out = (long long)v;
    }
    return 1;
}

/* Finds the CRLF ending the length line whose digits start at <p>, with
 * <avail> bytes there. Returns the digits' length or a LINE_* code. The type
 * byte before <p> counts toward SL_RESP_MAX_LINE, as in Redis. */
static long len_line(const char *p, size_t avail)
{
    size_t n = avail < SL_RESP_MAX_LINE ? avail : SL_RESP_MAX_LINE;
    const char *cr = memchr(p, '\r', n);
    /* Redis finds the CR with strchr(): a NUL before it hides it, and Redis
     * waits for a CR until the line is too long. */
    if (cr != NULL && memchr(p, '\0', (size_t)(cr - p)) != NULL)
        cr = NULL;
    if (cr == NULL)
        return avail >= SL_RESP_MAX_LINE ? LINE_LONG : LINE_MORE;
    size_t i = (size_t)(cr - p);
    if (i + 1 >= avail)
        return LINE_MORE;
    /* Redis skips whatever byte follows the CR (it never checks for the
     * LF): so does the framer, so both end the line at the same byte. */
    return (long)i;
}

/* The common case of a length line, read in one pass: 1 to 18 digits, no
 * sign, no leading zero, then CRLF. Returns the number of digits with <*n>
 * set, or 0 when the general path (len_line + parse_ll) must decide. */
static inline size_t quick_len(const char *p, size_t avail, uint64_t *n)
{
    size_t lim = avail < 18 ? avail : 18;
    uint64_t v = 0;
    size_t i = 0;

    while (i < lim && (unsigned char)(p[i] - '0') <= 9) {
        v = v * 10 + (uint64_t)(p[i] - '0');
        i++;
    }
    if (i == 0 || i + 1 >= avail || p[i] != '\r' || p[i + 1] != '\n' || (p[0] == '0' && i > 1))
        return 0;
    *n = v;
    return i;
}

/* Reads the length line whose digits start at <p>, <avail> bytes there.
 * Returns 1 with the value in <*n> and the digits' length in <*dl>, 0 when the
 * line is not complete, or -1 after fail() with <too_big> or <invalid>. */
static int read_len(struct sl_resp *st, const char *p, size_t avail, long long *n, size_t *dl,
                    const char *too_big, const char *invalid)
{
    uint64_t q;
    size_t i = quick_len(p, avail, &q);

    if (i != 0) {
        *n = (long long)q;
        *dl = i;
        return 1;
    }
    long line = len_line(p, avail);
    if (line == LINE_MORE)
        return 0;
    if (line == LINE_LONG)
        return fail(st, too_big);
    if (!parse_ll(p, (size_t)line, n))
        return fail(st, invalid);
    *dl = (size_t)line;
    return 1;
}

/* Starts a request: what the last one captured must not leak into this one
 * (a big request is decided on its head, before it is complete). */
static void req_reset(struct sl_resp_req *q)
{
    q->argc = 0;
    q->ncap = 0;
    q->is_inline = 0;
    for (unsigned i = 0; i < SL_RESP_CAPTURE_ARGS; i++) {
        q->arglen[i] = 0;
        q->argv[i][0] = '\0';
    }
}

/* <n> payload bytes at <p> of argument <idx> pass: the first ones are
 * captured, the rest only counted. */
static void payload(struct sl_resp *st, const char *p, uint64_t n)
{
    if (st->idx < SL_RESP_CAPTURE_ARGS && st->got < st->want) {
        uint64_t k = st->want - st->got;
        if (k > n)
            k = n;
        memcpy(st->req.argv[st->idx] + st->got, p, (size_t)k);
        st->got += (uint32_t)k;
    }
    st->left -= n;
    st->cur_size += n;
}

/* Argument <idx> has all its payload: it counts as captured. */
static void arg_done(struct sl_resp *st)
{
    if (st->idx < SL_RESP_CAPTURE_ARGS) {
        st->req.argv[st->idx][st->want] = '\0';
        st->req.arglen[st->idx] = st->len_full;
        st->req.ncap = (uint8_t)(st->idx + 1);
    }
    st->idx++;
}

/* Splits the inline line [p, end) into st->req as Redis's sdssplitargs()
 * does. The line holds no NUL and no LF. Returns 0 or -1 (unbalanced). */
static int split_inline(struct sl_resp_req *q, const char *p, const char *end)
{
    uint32_t argc = 0;

    for (;;) {
        while (p < end && blank[(unsigned char)*p])
            p++;
        if (p == end)
            break;
        char *cap = argc < SL_RESP_CAPTURE_ARGS ? q->argv[argc] : NULL;
        uint32_t len = 0;
        int inq = 0, insq = 0;
/* Appends byte <c> to the word: counted always, kept while there is room. */
#define EMIT(c)                                                  \
    do {                                                         \
        if (cap != NULL && len < SL_RESP_CAPTURE_LEN)            \
            cap[len] = (char)(c);                                \
        len++;                                                   \
    } while (0)
        for (;;) {
            if (inq) {
                if (p == end)
                    return -1;
                int hi, lo;
                if (*p == '\\' && end - p >= 4 && p[1] == 'x' && (hi = sl_hexval(p[2])) >= 0 &&
                    (lo = sl_hexval(p[3])) >= 0) {
                    EMIT(hi * 16 + lo);
                    p += 4;
                } else if (*p == '\\' && end - p >= 2) {
                    char c = p[1];
                    switch (c) {
                    case 'n': c = '\n'; break;
                    case 'r': c = '\r'; break;
                    case 't': c = '\t'; break;
                    case 'b': c = '\b'; break;
                    case 'a': c = '\a'; break;
                    default: break;
                    }
                    EMIT(c);
                    p += 2;
                } else if (*p == '"') {
                    /* A closing quote must be followed by a blank or the end. */
                    if (p + 1 < end && !blank[(unsigned char)p[1]])
                        return -1;
                    p++;
                    break;
                } else {
                    EMIT(*p);
                    p++;
                }
            } else if (insq) {
                if (p == end)
                    return -1;
                if (*p == '\\' && end - p >= 2 && p[1] == '\'') {
                    EMIT('\'');
                    p += 2;
                } else if (*p == '\'') {
                    if (p + 1 < end && !blank[(unsigned char)p[1]])
                        return -1;
                    p++;
                    break;
                } else {
                    EMIT(*p);
                    p++;
                }
            } else {
                if (p == end)
                    break;
                char c = *p++;
                /* Only these end an unquoted word: \v and \f are part of it
                 * (though they separate words), as in sdssplitargs(). */
                if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
                    break;
                if (c == '"')
                    inq = 1;
                else if (c == '\'')
                    insq = 1;
                else
                    EMIT(c);
            }
        }
#undef EMIT
        if (cap != NULL) {
            cap[len < SL_RESP_CAPTURE_LEN ? len : SL_RESP_CAPTURE_LEN] = '\0';
            q->arglen[argc] = len;
        }
        argc++;
    }
    q->argc = argc;
    q->ncap = argc < SL_RESP_CAPTURE_ARGS ? (uint8_t)argc : SL_RESP_CAPTURE_ARGS;
    return 0;
}

/* Frames the inline command at <p>, <avail> bytes there. Returns 1 (framed,
 * st->req.size bytes), 0 (line not complete) or -1. */
static int frame_inline(struct sl_resp *st, const char *p, size_t avail)
{
    size_t scan = avail < SL_RESP_MAX_LINE + 1 ? avail : SL_RESP_MAX_LINE + 1;
    const char *nl = memchr(p, '\n', scan);

    /* Redis finds the line's end with strchr(): a NUL before the LF hides it
     * for good, and Redis waits until the line is too big. So do we. */
    if (nl != NULL && memchr(p, '\0', (size_t)(nl - p)) != NULL)
        nl = NULL;
    if (nl == NULL) {
        if (avail > SL_RESP_MAX_LINE || avail >= st->max_request)
            return fail(st, "Protocol error: too big inline request");
        return 0;
    }
    size_t size = (size_t)(nl - p) + 1;
    if (size > st->max_request)
        return fail(st, "Protocol error: too big inline request");
    const char *end = nl;
    if (end > p && end[-1] == '\r')
        end--;
    uint8_t was = st->req.ncap;
    if (split_inline(&st->req, p, end) < 0)
        return fail(st, "Protocol error: unbalanced quotes in request");
    /* nothing of the request before shows past this one's arguments */
    for (unsigned i = st->req.ncap; i < was; i++) {
        st->req.arglen[i] = 0;
        st->req.argv[i][0] = '\0';
    }
    st->req.is_inline = 1;
    st->req.size = size;
    return 1;
}

/* Makes room for <n> more bytes in the input buffer. Returns 0 or -1. */
static int room(struct sl_resp *st, size_t n)
{
    size_t tail = st->len - st->pos;
    if (st->pos > 0) {
        memmove(st->in, st->in + st->pos, tail);
        st->pos = 0;
        st->len = tail;
    }
    if (tail + n <= st->cap)
        return 0;
    if (tail + n > UINT32_MAX)
        return -1;
    size_t cap = st->cap ? st->cap : 4096;
    while (cap < tail + n)
        cap *= 2;
    char *in = realloc(st->in, cap);
    if (in == NULL)
        return -1;
    st->in = in;
    st->cap = (uint32_t)cap;
    return 0;
}

/* Nothing is left to read in the buffer: start it over, and give a big one
 * back so a burst does not pin memory. */
static void drained(struct sl_resp *st)
{
    st->pos = st->len = 0;
    if (st->cap > KEEP_CAP) {
        free(st->in);
        st->in = NULL;
        st->cap = 0;
    }
}

int sl_resp_init(struct sl_resp *st, uint64_t max_request)
{
    memset(st, 0, sizeof(*st));
    st->max_request = max_request != 0 ? max_request : DEFAULT_MAX_REQUEST;
    st->max_bulk = st->max_request;
    return 0;
}

int sl_resp_reuse(struct sl_resp *st, uint64_t max_request)
{
    char *in = st->in;
    uint32_t cap = st->cap;
    if (st->err[0] != '\0' || !sl_resp_idle(st) || cap > KEEP_CAP) {
        sl_resp_free(st);
        return sl_resp_init(st, max_request);
    }
    /* An idle framer holds nothing of the last stream: keep its buffer. */
    sl_resp_init(st, max_request);
    st->in = in;
    st->cap = cap;
    return 0;
}

void sl_resp_free(struct sl_resp *st)
{
    free(st->in);
    st->in = NULL;
    st->cap = st->len = st->pos = 0;
}

int sl_resp_feed(struct sl_resp *st, const char *buf, size_t len)
{
    if (st->err[0] != '\0')
        return SL_EPROTO;
    if (st->phase == P_PAYLOAD && st->pos == st->len) {
        /* Inside a payload with nothing else pending: count it off here. */
        uint64_t k = st->left < len ? st->left : len;
        payload(st, buf, k);
        buf += k;
        len -= (size_t)k;
    }
    if (len == 0)
        return 0;
    if (room(st, len) < 0) {
        fail(st, "out of memory");
        return SL_ENOMEM;
    }
    memcpy(st->in + st->len, buf, len);
    st->len += (uint32_t)len;
    return 0;
}

/* The common case, taken before the state machine: at a boundary, a whole
 * multibulk request of at most SL_RESP_CAPTURE_ARGS arguments, every line
 * in quick_len()'s plain form, is in the buffer (a pipelined GET or SET).
 * It is framed in one pass with the same checks and the same result as the
 * state machine's; the state is written only when the request is whole, so
 * anything else (a line cut by the read, a bigger request, any doubt about
 * the syntax, a cap passed) returns 0 and the state machine decides, with
 * its own errors. Returns the request's size or 0. */
static size_t quick_request(struct sl_resp *st, const char *p, size_t avail)
{
    struct sl_resp_req *q = &st->req;
    uint32_t was = q->ncap; /* past the last request's captures all is clear */
    uint64_t argc, n;
    size_t dl = quick_len(p + 1, avail - 1, &argc);
    if (dl == 0 || argc == 0 || argc > SL_RESP_CAPTURE_ARGS)
        return 0;
    size_t at = dl + 3; /* also the request's size so far (cur_size) */
    for (uint32_t i = 0; i < argc; i++) {
        if (at >= avail || p[at] != '$')
            return 0;
        dl = quick_len(p + at + 1, avail - at - 1, &n);
        if (dl == 0)
            return 0;
        uint64_t end = at + dl + 5;
        if (n > st->max_bulk || end > st->max_request || n > st->max_request - end)
            return 0; /* the state machine says so */
        at += dl + 3;
        if (n + 2 > avail - at)
            return 0; /* its payload is not all here */
        /* n <= max_request here, and payloads are counted, never checked
         * (their CRLF included, as Redis and the state machine do) */
        uint32_t want = n < SL_RESP_CAPTURE_LEN ? (uint32_t)n : SL_RESP_CAPTURE_LEN;
        memcpy(q->argv[i], p + at, want);
        q->argv[i][want] = '\0';
        q->arglen[i] = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
        at += (size_t)n + 2;
    }
    /* nothing of the request before shows past this one's arguments */
    for (uint32_t i = (uint32_t)argc; i < was; i++) {
        q->arglen[i] = 0;
        q->argv[i][0] = '\0';
    }
    q->argc = (uint32_t)argc;
    q->ncap = (uint8_t)argc;
    q->is_inline = 0;
    q->size = at;
    return at;
}

int sl_resp_next(struct sl_resp *st, struct sl_resp_req **out)
{
    if (st->err[0] != '\0')
        return SL_EPROTO;
    if (st->phase == P_BOUNDARY && st->len - st->pos > 4 && st->in[st->pos] == '*') {
        size_t size = quick_request(st, st->in + st->pos, st->len - st->pos);
        if (size != 0) {
            st->pos += (uint32_t)size;
            *out = &st->req;
            return 1;
        }
    }
    for (;;) {
        /* nothing fed yet: no buffer (NULL + 0 is undefined in C) */
        const char *p = st->in != NULL ? st->in + st->pos : "";
        size_t avail = st->len - st->pos;
        long long n;
        size_t dl;
        int rc;

        switch (st->phase) {
        case P_BOUNDARY:
            if (avail == 0) {
                drained(st);
                return 0;
            }
            if (p[0] != '*') {
                rc = frame_inline(st, p, avail);
                if (rc < 0)
                    return SL_EPROTO;
                if (rc == 0)
                    return 0;
                st->pos += (uint32_t)st->req.size;
                *out = &st->req;
                return 1;
            }
            rc = read_len(st, p + 1, avail - 1, &n, &dl, "Protocol error: too big mbulk count string",
                          "Protocol error: invalid multibulk length");
            if (rc < 0)
                return SL_EPROTO;
            if (rc == 0)
                return 0;
            if (n > SL_RESP_MAX_ARGS) {
                fail(st, "Protocol error: invalid multibulk length");
                return SL_EPROTO;
            }
            req_reset(&st->req);
            st->pos += (uint32_t)(dl + 3);
            st->cur_size = dl + 3;
            if (n <= 0) {
                /* Redis ignores `*0` and `*-N` without a reply. */
                st->req.size = st->cur_size;
                st->cur_size = 0;
                *out = &st->req;
                return 1;
            }
            st->req.argc = (uint32_t)n;
            st->idx = 0;
            st->phase = P_ITEM;
            continue;

        case P_ITEM:
            if (avail == 0)
                return 0;
            if (p[0] != '$') {
                /* Redis names a wrong type byte only once its line is
                 * whole (a CR, not hidden by a NUL, and a byte after it). */
                long line = len_line(p, avail);
                if (line == LINE_MORE)
                    return 0;
                if (line == LINE_LONG)
                    fail(st, "Protocol error: too big bulk count string");
                else
                    fail_type(st, p[0]);
                return SL_EPROTO;
            }
            rc = read_len(st, p + 1, avail - 1, &n, &dl, "Protocol error: too big bulk count string",
                          "Protocol error: invalid bulk length");
            if (rc < 0)
                return SL_EPROTO;
            if (rc == 0)
                return 0;
            /* The whole request must fit max_request: what is before, this
             * line, the payload and its CRLF. */
            uint64_t end = st->cur_size + dl + 5;
            if (n < 0 || (uint64_t)n > st->max_bulk || end > st->max_request ||
                (uint64_t)n > st->max_request - end) {
                fail(st, "Protocol error: invalid bulk length");
                return SL_EPROTO;
            }
            st->pos += (uint32_t)(dl + 3);
            st->cur_size += dl + 3;
            st->left = (uint64_t)n + 2; /* its CRLF is not checked, by Redis either */
            st->len_full = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
            st->want = n < SL_RESP_CAPTURE_LEN ? (uint32_t)n : SL_RESP_CAPTURE_LEN;
            st->got = 0;
            st->phase = P_PAYLOAD;
            continue;

        case P_PAYLOAD: {
            uint64_t k = st->left < avail ? st->left : avail;
            payload(st, p, k);
            st->pos += (uint32_t)k;
            if (st->left > 0) {
                drained(st);
                return 0;
            }
            arg_done(st);
            if (st->idx < st->req.argc) {
                st->phase = P_ITEM;
                continue;
            }
            st->phase = P_BOUNDARY;
            st->req.size = st->cur_size;
            st->cur_size = 0;
            *out = &st->req;
            return 1;
        }
        }
    }
}

size_t sl_resp_line_len(const struct sl_resp *st)
{
    return st->phase == P_PAYLOAD ? 0 : st->len - st->pos;
}

int sl_resp_line_full(struct sl_resp *st)
{
    if (st->err[0] != '\0')
        return SL_EPROTO;
    if (st->phase == P_PAYLOAD || st->pos == st->len)
        return 0;
    if (st->phase == P_ITEM)
        fail(st, "Protocol error: too big bulk count string");
    else if (st->in[st->pos] == '*')
        fail(st, "Protocol error: too big mbulk count string");
    else
        fail(st, "Protocol error: too big inline request");
    return SL_EPROTO;
}

size_t sl_resp_pending(const struct sl_resp *st)
{
    return (size_t)st->cur_size + (st->len - st->pos);
}

int sl_resp_idle(const struct sl_resp *st)
{
    return sl_resp_pending(st) == 0;
}

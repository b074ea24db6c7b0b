/* sluice — RESP request framer.
 *
 * hiredis's redisReader does the multibulk parsing, with object functions
 * that build nothing: each returns a dummy non-NULL pointer (NULL would mean
 * "out of memory" to hiredis) and only copies into st->req what the limiter
 * needs - argc from the top-level createArray, the first bytes of the first
 * SL_RESP_CAPTURE_ARGS bulks by task->idx. The framer wraps the reader in
 * three ways:
 *
 *   reader buffer: consumed | *2\r\n$3\r\nGET\r\n$1\r\nk\r\n | PING\r\n | *3\r\n$3\r\nS
 *                             ^ pos                            ^          ^
 *              '*': count line checked here,      not '*': inline,   partial request:
 *              then hiredis parses the request    split and skipped  pending, waits
 *              (its items checked as it goes)     here               for more bytes
 *
 *  1. At a request boundary the framer looks at the next byte itself. Not
 *     '*' means an inline command, which hiredis cannot parse: the framer
 *     splits the line as Redis's sdssplitargs() does and moves reader->pos
 *     past it. '*' means a multibulk request: the framer checks its count
 *     line and only then lets hiredis at it (`*0`, `*-1` are skipped here as
 *     empty requests, like Redis does).
 *  2. Every item inside a request is checked before hiredis parses it: the
 *     type byte must be '$', the length a Redis-valid number within max_bulk,
 *     the request within max_request, a line without CRLF within
 *     SL_RESP_MAX_LINE. hiredis parses items one after another inside one
 *     redisReaderGetReply(), so the check of item i+1 runs in the callback
 *     that completes item i (hiredis has not moved past item i yet, so item
 *     i+1 starts at its payload + 2), and the check of the item it stops in
 *     runs before the next call. A failed check in a callback returns NULL,
 *     which stops hiredis at once. hiredis thus never sees anything it would
 *     reject with its own words, nor a length it would wait for.
 *  3. Sizes are counted in bytes consumed (reader->pos advances) rather than
 *     buffer offsets, because redisReaderGetReply() drops the consumed prefix
 *     of its buffer (sdsrange, pos back to 0) once pos >= 1024. The unconsumed
 *     tail len - pos is the invariant: consumed = tail before - tail after.
 *
 * hiredis 0.14 facts this relies on (read.h shows the fields; checked against
 * Debian's 0.14.1): processItem consumes the type byte first; a bulk whose
 * payload is incomplete leaves pos just after its '$'; createArray runs after
 * pos moved past the count line; createString runs before pos moves past the
 * bulk; the buffer is trimmed only at the end of redisReaderGetReply().
 */
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include <hiredis/read.h>

#include "core/err.h"
#include "proto/resp.h"

/* max_request when sl_resp_init() is given 0: Redis's proto-max-bulk-len. */
#define DEFAULT_MAX_REQUEST (512ull * 1024 * 1024)

/* hiredis drops its consumed prefix once pos reaches this (read.c). */
#define HIREDIS_TRIM_AT 1024

/* Results of reading a length line. */
enum {
    LINE_MORE = -1, /* no CRLF yet, still short enough */
    LINE_LONG = -2, /* no CR within SL_RESP_MAX_LINE bytes */
    LINE_BAD  = -3, /* a CR not followed by LF */
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
    if (cr == NULL)
        return avail >= SL_RESP_MAX_LINE ? LINE_LONG : LINE_MORE;
    size_t i = (size_t)(cr - p);
    if (i + 1 >= avail)
        return LINE_MORE;
    /* Redis skips whatever byte follows the CR; hiredis wants LF. A stray CR
     * would make the two disagree on where the request ends: refuse it. */
    if (cr[1] != '\n')
        return LINE_BAD;
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

/* Checks the bulk length line whose digits start at <p> (the '$' is just
 * before), <avail> bytes there, <off> bytes into the request. Returns 0 when
 * it is fine or not complete yet, -1 on error. */
static int check_bulk(struct sl_resp *st, const char *p, size_t avail, uint64_t off)
{
    uint64_t n;
    size_t i = quick_len(p, avail, &n);

    if (i == 0) {
        long line = len_line(p, avail);
        long long v;
        if (line == LINE_MORE)
            return 0;
        if (line == LINE_LONG)
            return fail(st, "Protocol error: too big bulk count string");
        if (line == LINE_BAD || !parse_ll(p, (size_t)line, &v) || v < 0)
            return fail(st, "Protocol error: invalid bulk length");
        i = (size_t)line;
        n = (uint64_t)v;
    }
    if (n > st->max_bulk)
        return fail(st, "Protocol error: invalid bulk length");
    /* The whole request must fit max_request: what is before, the rest of
     * this line, the payload and its CRLF. */
    uint64_t end = off + i + 4;
    if (end > st->max_request || n > st->max_request - end)
        return fail(st, "Protocol error: invalid bulk length");
    return 0;
}

/* Checks the item starting at <p> (its type byte), <avail> bytes there,
 * <off> bytes into the request. Returns 0 or -1. */
static int check_item(struct sl_resp *st, const char *p, size_t avail, uint64_t off)
{
    if (avail == 0)
        return 0;
    if (p[0] != '$')
        return fail_type(st, p[0]);
    return check_bulk(st, p + 1, avail - 1, off + 1);
}

/* Where the parse stands relative to the current request: the request offset
 * of pointer <p> into the reader's buffer, valid during a GetReply call (the
 * buffer is trimmed only at its end). */
static uint64_t req_off(const struct sl_resp *st, const char *p)
{
    return st->cur_size + (uint64_t)(p - (st->reader->buf + st->cur_base));
}

/* ---- hiredis object functions ------------------------------------------- */

static void *on_string(const redisReadTask *t, char *s, size_t n)
{
    struct sl_resp *st = t->privdata;
    redisReader *r = st->reader;

    /* Only bulks inside a request get here: items are checked beforehand and
     * hiredis never reads a top-level type byte other than '*'. */
    if (t->parent == NULL || t->type != REDIS_REPLY_STRING) {
        fail_type(st, t->type == REDIS_REPLY_STATUS ? '+' : t->type == REDIS_REPLY_ERROR ? '-' : '$');
        return NULL;
    }
    if (t->idx < SL_RESP_CAPTURE_ARGS) {
        size_t k = n < SL_RESP_CAPTURE_LEN ? n : SL_RESP_CAPTURE_LEN;
        memcpy(st->req.argv[t->idx], s, k);
        st->req.argv[t->idx][k] = '\0';
        st->req.arglen[t->idx] = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
    }
    if (t->idx + 1 < t->parent->elements) {
        /* hiredis goes on with the next item in this same call: check it now.
         * The payload's CRLF is not checked, by hiredis or by Redis. */
        const char *next = s + n + 2;
        if (check_item(st, next, (size_t)(r->buf + r->len - next), req_off(st, next)) < 0)
            return NULL;
    }
    return st; /* any non-NULL pointer: nothing is built */
}

static void *on_array(const redisReadTask *t, int elements)
{
    struct sl_resp *st = t->privdata;
    redisReader *r = st->reader;

    if (t->parent != NULL) {
        fail_type(st, '*');
        return NULL;
    }
    st->req.argc = elements > 0 ? (uint32_t)elements : 0;
    st->req.ncap = st->req.argc < SL_RESP_CAPTURE_ARGS ? (uint8_t)st->req.argc
                                                       : SL_RESP_CAPTURE_ARGS;
    st->req.is_inline = 0;
    /* hiredis already moved pos past the count line: the first item is next. */
    const char *next = r->buf + r->pos;
    if (elements > 0 && check_item(st, next, r->len - r->pos, req_off(st, next)) < 0)
        return NULL;
    return st;
}

static void *on_integer(const redisReadTask *t, long long v)
{
    (void)v;
    fail_type(t->privdata, ':'); /* unreachable: items are checked first */
    return NULL;
}

static void *on_nil(const redisReadTask *t)
{
    struct sl_resp *st = t->privdata;
    /* Unreachable too: `$-1` fails the length check, `*-1` is skipped. */
    if (t->type == REDIS_REPLY_ARRAY && t->parent != NULL)
        fail_type(st, '*');
    else
        fail(st, "Protocol error: invalid bulk length");
    return NULL;
}

static void on_free(void *obj)
{
    (void)obj; /* nothing was built */
}

static redisReplyObjectFunctions resp_fn = {
    .createString  = on_string,
    .createArray   = on_array,
    .createInteger = on_integer,
    .createNil     = on_nil,
    .freeObject    = on_free,
};

/* ---- framing ------------------------------------------------------------- */

/* hiredis is between requests: nothing of one is consumed. After a GetReply
 * that found no byte to read, ridx is 0 with no type yet. */
static int at_boundary(const redisReader *r)
{
    return r->ridx < 0 || (r->ridx == 0 && r->rstack[0].type < 0);
}

/* Drops the consumed prefix of the reader's buffer. hiredis does that only
 * inside redisReaderGetReply(), which inline and empty requests (consumed
 * here) never reach, so a stream of them would grow the buffer without end.
 * Call at a boundary only. Setting len to pos hides the unconsumed tail, so
 * GetReply reads no type byte; its trim then recomputes len from the sds
 * string, which still holds the tail. */
static void trim(redisReader *r)
{
    if (r->pos < HIREDIS_TRIM_AT)
        return;
    r->len = r->pos;
    redisReaderGetReply(r, NULL);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
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
                if (*p == '\\' && end - p >= 4 && p[1] == 'x' && (hi = hexval(p[2])) >= 0 &&
                    (lo = hexval(p[3])) >= 0) {
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

/* Frames the inline command at reader->pos. Returns 1 (framed, pos moved
 * past it), 0 (line not complete) or -1. */
static int frame_inline(struct sl_resp *st, redisReader *r)
{
    const char *p = r->buf + r->pos;
    size_t avail = r->len - r->pos;
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
    if (split_inline(&st->req, p, end) < 0)
        return fail(st, "Protocol error: unbalanced quotes in request");
    st->req.is_inline = 1;
    st->req.size = size;
    r->pos += size;
    return 1;
}

/* At a boundary with '*' at reader->pos: checks the count line. Returns 1
 * with <*count> and <*hlen> (the line's bytes, CRLF included), 0 when the
 * line is not complete, -1 on error. */
static int check_count(struct sl_resp *st, const redisReader *r, long long *count, size_t *hlen)
{
    const char *p = r->buf + r->pos + 1;
    size_t avail = r->len - r->pos - 1;
    uint64_t n;
    size_t i = quick_len(p, avail, &n);

    if (i == 0) {
        long line = len_line(p, avail);
        if (line == LINE_MORE)
            return 0;
        if (line == LINE_LONG)
            return fail(st, "Protocol error: too big mbulk count string");
        if (line == LINE_BAD || !parse_ll(p, (size_t)line, count))
            return fail(st, "Protocol error: invalid multibulk length");
        i = (size_t)line;
    } else {
        *count = (long long)n;
    }
    if (*count > SL_RESP_MAX_ARGS)
        return fail(st, "Protocol error: invalid multibulk length");
    *hlen = i + 3;
    return 1;
}

int sl_resp_init(struct sl_resp *st, uint64_t max_request)
{
    memset(st, 0, sizeof(*st));
    st->max_request = max_request != 0 ? max_request : DEFAULT_MAX_REQUEST;
    st->max_bulk = st->max_request;
    st->reader = redisReaderCreateWithFunctions(&resp_fn);
    if (st->reader == NULL)
        return SL_ENOMEM;
    /* Copied into every read task: the object functions find the state there. */
    st->reader->privdata = st;
    return 0;
}

int sl_resp_reuse(struct sl_resp *st, uint64_t max_request)
{
    struct redisReader *r = st->reader;
    if (r == NULL || st->err[0] != '\0' || !sl_resp_idle(st) || r->ridx != -1) {
        sl_resp_free(st);
        return sl_resp_init(st, max_request);
    }
    /* An idle reader holds nothing of the last stream: keep it (and its
     * buffer, which hiredis itself drops at the next feed if it grew big). */
    memset(st, 0, sizeof(*st));
    st->reader = r;
    st->max_request = max_request != 0 ? max_request : DEFAULT_MAX_REQUEST;
    st->max_bulk = st->max_request;
    r->privdata = st;
    return 0;
}

void sl_resp_free(struct sl_resp *st)
{
    if (st->reader != NULL)
        redisReaderFree(st->reader);
    st->reader = NULL;
}

int sl_resp_feed(struct sl_resp *st, const char *buf, size_t len)
{
    if (st->err[0] != '\0' || st->reader == NULL)
        return SL_EPROTO;
    if (redisReaderFeed(st->reader, buf, len) != REDIS_OK) {
        /* Only a failed allocation gets here; hiredis dropped its buffer. */
        fail(st, "out of memory");
        return SL_ENOMEM;
    }
    return 0;
}

int sl_resp_next(struct sl_resp *st, struct sl_resp_req **out)
{
    redisReader *r = st->reader;
    void *reply;

    if (st->err[0] != '\0' || r == NULL)
        return SL_EPROTO;

    if (at_boundary(r)) {
        if (r->pos == r->len) {
            trim(r);
            return 0;
        }
        if (r->buf[r->pos] != '*') {
            int rc = frame_inline(st, r);
            if (rc < 0)
                return SL_EPROTO;
            if (rc == 0) {
                trim(r);
                return 0;
            }
            *out = &st->req;
            return 1;
        }
        long long count;
        size_t hlen;
        int rc = check_count(st, r, &count, &hlen);
        if (rc < 0)
            return SL_EPROTO;
        if (rc == 0) {
            /* hiredis is not called before the count line is whole: a
             * request never starts inside it, and its checks stay ours. */
            trim(r);
            return 0;
        }
        if (count <= 0) {
            /* Redis ignores `*0` and `*-N` without a reply; hiredis would
             * refuse `*-2`. Skip them here. */
            r->pos += hlen;
            st->req.size = hlen;
            st->req.argc = 0;
            st->req.ncap = 0;
            st->req.is_inline = 0;
            *out = &st->req;
            return 1;
        }
    } else {
        /* Inside a request: check the item hiredis stopped in (or is about
         * to start) before it reads on. */
        const redisReadTask *t = &r->rstack[r->ridx];
        const char *p = r->buf + r->pos;
        int rc;
        if (r->ridx != 1)
            rc = fail(st, "Protocol error: invalid multibulk length"); /* never: see check_count */
        else if (t->type < 0)
            rc = check_item(st, p, r->len - r->pos, st->cur_size);
        else if (t->type == REDIS_REPLY_STRING)
            rc = check_bulk(st, p, r->len - r->pos, st->cur_size);
        else
            rc = fail_type(st, t->type == REDIS_REPLY_ARRAY ? '*' : '+'); /* never */
        if (rc < 0)
            return SL_EPROTO;
    }

    size_t tail = r->len - r->pos;
    st->cur_base = r->pos;
    int hrc = redisReaderGetReply(r, &reply);
    if (st->err[0] != '\0')
        return SL_EPROTO;
    if (hrc != REDIS_OK) {
        /* Not reachable with the checks above; keep hiredis's words. */
        fail(st, r->errstr[0] ? r->errstr : "Protocol error");
        return SL_EPROTO;
    }
    st->cur_size += tail - (r->len - r->pos);
    if (reply == NULL)
        return 0;
    st->req.size = st->cur_size;
    st->cur_size = 0;
    *out = &st->req;
    return 1;
}

size_t sl_resp_pending(const struct sl_resp *st)
{
    if (st->reader == NULL)
        return 0;
    return (size_t)st->cur_size + (st->reader->len - st->reader->pos);
}

int sl_resp_idle(const struct sl_resp *st)
{
    return sl_resp_pending(st) == 0;
}

int sl_resp_arg_is(const struct sl_resp_req *r, unsigned i, const char *lit)
{
    size_t n = strlen(lit);

    if (i >= r->ncap || r->arglen[i] != n || n > SL_RESP_CAPTURE_LEN)
        return 0;
    const char *a = r->argv[i];
    for (size_t k = 0; k < n; k++) {
        unsigned char c = (unsigned char)a[k];
        if (c >= 'a' && c <= 'z')
            c -= 'a' - 'A';
        if (c != (unsigned char)lit[k])
            return 0;
    }
    return 1;
}

/* sluice — RESP reply scanner (RESP2 and RESP3).
 *
 * The scanner never looks at what a reply says, only at where it ends. It
 * keeps a stack of counters instead of recursing:
 *
 *   bytes:  *2\r\n  %1\r\n  +k\r\n  :1\r\n         $3\r\nbar\r\n
 *   stack:  [2]     [2 2]   [2 1]   [2 0] -> [1]   [0] -> []: the reply ends
 *
 * An aggregate header pushes how many items it still expects (a map or an
 * attribute of N pairs expects 2N). Every complete item - a line, a bulk, a
 * null, an empty aggregate - takes one off the counter on top; a counter that
 * reaches zero pops and is itself one complete item of the level below. An
 * attribute (`|`) is pushed like a map but marked in attr_mask: when it pops,
 * it counts as nothing, because it is only a prefix of the item that follows.
 * When an item completes with no level open, a top-level reply has ended.
 *
 * The state (counters, the length being parsed, the bulk bytes left to skip)
 * is all the scanner remembers, so it can stop at any byte and go on in the
 * next buffer. Bulk payloads are skipped with pointer arithmetic and lines are
 * searched with memchr (after a short inline look); only the few digits of
 * length lines are read one by one. A whole small reply at the start of the
 * buffer (`+OK`, `$3 bar`) takes a shortcut past the state machine.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "proto/resp_reply.h"

/* Digits allowed in a length line: 10^19 - 1 fits in a uint64 with room to
 * spare, so neither the count nor payload + CRLF can overflow. */
#define MAX_DIGITS 19

enum {
    S_TYPE = 0, /* expects the type byte of an item (0: init is a memset) */
    S_LEN,      /* in a length line, after the type byte */
    S_LEN_LF,   /* a length line saw its '\r', expects '\n' */
    S_LINE,     /* in a line item (+ - : , # (), looking for '\n' */
    S_BULK,     /* skipping bulk_left payload bytes */
    S_CR,       /* expects the '\r' after a payload or after `_` */
    S_LF,       /* expects the '\n' that ends the item */
    S_DEAD,     /* saw bytes that are not RESP: every call fails */
};

/* Where the first '\n' in [p, end) is, or NULL. Most reply lines are a few
 * bytes (`+OK`, `:1`, `+k` in a map): for them a short inline look is about
 * twice as fast as the call to memchr; longer lines go to memchr. */
static inline const char *find_lf(const char *p, const char *end)
{
    const char *stop = end - p > 16 ? p + 16 : end;

    for (const char *q = p; q < stop; q++) {
        if (*q == '\n')
            return q;
    }
    return stop < end ? memchr(stop, '\n', (size_t)(end - stop)) : NULL;
}

/* The common case, taken before the general loop: the scanner is between
 * replies and <buf> starts with a whole small reply, a line or a bulk
 * (`+OK`, `$3 bar`, `:1`). Reads no state and writes none; returns the
 * reply's size, or 0 to leave everything else - aggregates, nulls, a reply
 * cut short, any doubt about the syntax - to the general loop. */
static inline size_t fast_reply(const char *buf, size_t len)
{
    const char *p = buf + 1;
    const char *end = buf + len;

    switch (buf[0]) {
    case '+': case '-': case ':': {
        const char *q = find_lf(p, end);

        /* q[-1] is at worst buf[0], which is not '\r' */
        if (q && q[-1] == '\r')
            return (size_t)(q + 1 - buf);
        return 0;
    }
    case '$': {
        const char *digits = p;
        uint64_t n;
        unsigned d;

        /* a null (`$-1`): what a GET of a missing key answers */
        if (end - p >= 4 && p[0] == '-' && p[1] == '1' && p[2] == '\r' && p[3] == '\n')
            return 5;
        if (end - p < 5) /* "0\r\n\r\n" is the least that can follow */
            return 0;
        if ((n = (unsigned)(*p++ - '0')) >= 10)
            return 0;
        /* One digit (`$3 bar`) is the usual case and skips the loop. */
        if (*p != '\r') {
            /* n may wrap past 19 digits: then it is not used */
            while (p < end && (d = (unsigned)(*p - '0')) < 10) {
                n = n * 10 + d;
                p++;
            }
            if (p - digits > MAX_DIGITS || end - p < 2 || *p != '\r')
                return 0;
        }
        if (p[1] != '\n')
            return 0;
        p += 2;
        if ((uint64_t)(end - p) < n + 2 || p[n] != '\r' || p[n + 1] != '\n')
            return 0;
        return (size_t)(p + n + 2 - buf);
    }
    default:
        return 0;
    }
}

void sl_reply_init(struct sl_reply_scan *s)
{
    memset(s, 0, sizeof(*s));
}

int sl_reply_idle(const struct sl_reply_scan *s)
{
    return s->state == S_TYPE && s->depth == 0 && !s->attr;
}

size_t sl_reply_whole(const struct sl_reply_scan *s, const char *buf, size_t len, uint32_t max,
                      uint32_t *n, size_t *last)
{
    size_t off = 0, m;
    uint32_t k = 0;
    if (sl_reply_idle(s))
        while (k < max && off < len && (m = fast_reply(buf + off, len - off)) > 0) {
            *last = off;
            off += m;
            k++;
        }
    *n = k;
    return off;
}

/* Opens a level of <items> items (an attribute when <attr>). */
static int push_level(struct sl_reply_scan *s, uint32_t items, int attr)
{
    uint32_t d = s->depth;
    if (d < SL_REPLY_INLINE_DEPTH) {
        s->left[d] = items;
        s->attr_mask = (s->attr_mask & ~(UINT32_C(1) << d)) | ((uint32_t)attr << d);
        s->depth = d + 1;
        return 0;
    }
    if (d == SL_REPLY_MAX_DEPTH)
        return -1;
    uint32_t k = d - SL_REPLY_INLINE_DEPTH;
    if (k == s->deep_cap) {
        uint32_t cap = s->deep_cap ? s->deep_cap * 2 : 64;
        uint64_t *n = realloc(s->deep, (size_t)cap * sizeof(*n));
        if (n == NULL)
            return -1;
        s->deep = n;
        s->deep_cap = cap;
    }
    s->deep[k] = items | (uint64_t)(attr != 0) << 32;
    s->depth = d + 1;
    return 0;
}

void sl_reply_release(struct sl_reply_scan *s)
{
    free(s->deep);
    s->deep = NULL;
    s->deep_cap = 0;
}

long sl_reply_scan(struct sl_reply_scan *s, const char *buf, size_t len, unsigned *flags)
{
    const char *p = buf;
    const char *end = buf + len;

    /* At depth 0 between items no push can be pending (a top-level push
     * either opened a level or was already done), so DONE alone is right. */
    if (s->state == S_TYPE && s->depth == 0 && len > 0) {
        size_t n = fast_reply(buf, len);

        if (n) {
            *flags = SL_REPLY_DONE;
            s->attr = 0; /* the item after a top-level attribute */
            return (long)n;
        }
    }
    *flags = 0;
    if (s->state == S_DEAD)
        return SL_EPROTO;

    while (p < end) {
        switch (s->state) {
        case S_TYPE: {
            unsigned char c = (unsigned char)*p++;

            s->type = c;
            switch (c) {
            case '+': case '-': case ':': case ',': case '#': case '(':
                s->cr = 0;
                s->state = S_LINE;
                continue;
            case '_':
                s->state = S_CR;
                continue;
            case '>':
                if (s->depth == 0)
                    s->top_push = 1;
                __attribute__((fallthrough));
            case '$': case '!': case '=':
            case '*': case '%': case '~': case '|':
                s->num = 0;
                s->ndigits = 0;
                s->neg = 0;
                s->state = S_LEN;
                break; /* to the digits, below */
            default:
                goto fail; /* includes the streamed `;` and `.` */
            }
        }
            __attribute__((fallthrough)); /* to the digits */
        case S_LEN: {
            /* Locals, so the digit loop keeps them in registers. */
            uint64_t n = s->num;
            unsigned nd = s->ndigits;

            for (;;) {
                unsigned char c;
                unsigned d;

                if (p == end) {
                    s->num = n;
                    s->ndigits = (uint8_t)nd;
                    s->state = S_LEN;
                    goto more;
                }
                c = (unsigned char)*p++;
                d = (unsigned)c - '0';
                if (d < 10) {
                    if (++nd > MAX_DIGITS)
                        goto fail;
                    n = n * 10 + d;
                    continue;
                }
                if (c == '\r')
                    break;
                /* '-' only leads; whether it is "-1" is checked at the end.
                 * `?` (streamed `$?`, `*?`) lands in fail here too. */
                if (c == '-' && nd == 0 && !s->neg) {
                    s->neg = 1;
                    continue;
                }
                goto fail;
            }
            s->num = n;
            s->ndigits = (uint8_t)nd;
            if (p == end) {
                s->state = S_LEN_LF;
                goto more;
            }
        }
            __attribute__((fallthrough));
        case S_LEN_LF:
            if (*p++ != '\n')
                goto fail;
            if (s->ndigits == 0)
                goto fail;
            if (s->neg) {
                /* The one negative length is -1, a null (RESP2's `$-1`,
                 * `*-1`; hiredis takes it for every length type, so do we).
                 * A null attribute would be a prefix of nothing. */
                if (s->num != 1 || s->ndigits != 1 || s->type == '|')
                    goto fail;
                goto item_done;
            }
            switch (s->type) {
            case '$': case '!': case '=':
                /* Skip the payload without reading it when it is all here;
                 * the compare is in 64 bits so a huge length cannot wrap. */
                if ((uint64_t)(end - p) >= s->num + 2) {
                    p += s->num;
                    if (p[0] != '\r' || p[1] != '\n')
                        goto fail;
                    p += 2;
                    goto item_done;
                }
                s->bulk_left = s->num;
                s->state = S_BULK;
                continue;
            default: {
                unsigned pairs = s->type == '%' || s->type == '|';
                /* A push inside an aggregate is none of its items, as an
                 * attribute is none: Redis writes one in the middle of
                 * EXEC's reply (the message a PUBLISH in the transaction
                 * delivers to the client's own subscription), whose count
                 * holds only the commands' replies. (Inside a push, as
                 * Redis never writes, it stays an item.) */
                int none = s->type == '|' || (s->type == '>' && s->depth > 0 && !s->top_push);
                uint32_t items;

                if (s->num > (UINT32_MAX >> pairs))
                    goto fail;
                items = (uint32_t)s->num << pairs;
                if (items == 0) {
                    if (!none)
                        goto item_done; /* `*0`, `%0`...: a complete item */
                    /* `|0`: a prefix of nothing; the item is still to come
                     * (a nested `>0`: nothing at all). */
                    if (s->depth == 0)
                        s->attr = 1;
                    s->state = S_TYPE;
                    continue;
                }
                if (push_level(s, items, none) < 0)
                    goto fail;
                s->state = S_TYPE;
                continue;
            }
            }

        case S_LINE: {
            const char *q = find_lf(p, end);

            if (!q) {
                /* The '\r' may be the last byte here, its '\n' the first of
                 * the next buffer. */
                s->cr = end[-1] == '\r';
                p = end;
                goto more;
            }
            if (q > p ? q[-1] != '\r' : !s->cr)
                goto fail;
            p = q + 1;
            goto item_done;
        }

        case S_BULK: {
            size_t avail = (size_t)(end - p);

            if (s->bulk_left > avail) {
                s->bulk_left -= avail;
                p = end;
                goto more;
            }
            p += s->bulk_left;
            s->bulk_left = 0;
            s->state = S_CR;
            continue;
        }

        case S_CR:
            if (*p++ != '\r')
                goto fail;
            s->state = S_LF;
            continue;

        case S_LF:
            if (*p++ != '\n')
                goto fail;
            goto item_done;

        default:
            goto fail;
        }

    item_done:
        /* One item is complete: take it off the counter on top, pop every
         * level it finishes. */
        s->state = S_TYPE;
        for (;;) {
            unsigned d;

            if (s->depth == 0) {
                *flags = SL_REPLY_DONE | (s->top_push ? SL_REPLY_PUSH : 0);
                s->top_push = 0;
                s->attr = 0;
                if (s->deep != NULL)
                    sl_reply_release(s);
                return (long)(p - buf);
            }
            d = s->depth - 1u;
            if (d >= SL_REPLY_INLINE_DEPTH) {
                uint64_t *e = &s->deep[d - SL_REPLY_INLINE_DEPTH];
                if ((uint32_t)--*e != 0)
                    break;
                s->depth = d;
                if (*e >> 32 & 1)
                    break; /* an attribute ended, deep inside: its item follows */
                continue;
            }
            if (--s->left[d] != 0)
                break;
            s->depth = d;
            if (s->attr_mask >> d & 1) {
                /* An attribute ended: it is no item of the level below, the
                 * item it describes comes next. */
                if (d == 0)
                    s->attr = 1;
                break;
            }
        }
    }
more:
    return (long)(p - buf);

fail:
    sl_reply_release(s); /* a dead scanner holds nothing */
    s->state = S_DEAD;
    return SL_EPROTO;
}

/* ---- picking one element ------------------------------------------------- */

enum { PK_TOP = 0, PK_COUNT, PK_LINE, PK_ELEMS, PK_DONE };

void sl_reply_pick_init(struct sl_reply_pick *p, uint32_t k)
{
    memset(p, 0, sizeof(*p));
    p->k = k;
}

void sl_reply_pick_feed(struct sl_reply_pick *p, const char *buf, size_t len)
{
    const char *end = buf + len;

    while (buf < end && p->stage != PK_DONE) {
        if (p->stage == PK_TOP) {
            /* Only an array (RESP2 and RESP3 alike for EXEC) has elements. */
            p->stage = *buf == '*' ? PK_COUNT : PK_DONE;
            buf++;
        } else if (p->stage == PK_COUNT) {
            /* `*-1` holds no element; `*0` ends before element k appears.
             * The count is not needed otherwise: the elements end where
             * the sub-scanner says. */
            p->stage = *buf == '-' ? PK_DONE : PK_LINE;
        } else if (p->stage == PK_LINE) {
            const char *lf = memchr(buf, '\n', (size_t)(end - buf));
            if (lf == NULL)
                return;
            buf = lf + 1;
            p->stage = PK_ELEMS;
        } else {
            if (sl_reply_idle(&p->sub) && p->seen == p->k && *buf != '>') {
                p->found = (uint8_t)*buf;
                p->stage = PK_DONE;
                break;
            }
            unsigned f = 0;
            long n = sl_reply_scan(&p->sub, buf, (size_t)(end - buf), &f);
            if (n < 0) {
                p->stage = PK_DONE;
                break;
            }
            buf += n;
            if ((f & SL_REPLY_DONE) && !(f & SL_REPLY_PUSH))
                p->seen++; /* a push among the elements is none of them */
        }
    }
    if (p->stage == PK_DONE)
        sl_reply_release(&p->sub);
}

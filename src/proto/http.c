/* sluice — HTTP/1.1 framer (RFC 9112).
 *
 * One state machine per direction of a connection. A head is copied into
 * h->buf as it arrives, checked byte by byte (control bytes, bare CR or
 * LF, the caps) and line by line (start line, field syntax); once the
 * empty line is in, the framing fields are read and the head reported. A
 * body is never copied: Content-Length and close-delimited bodies are
 * counted down in bulk, a chunked one is walked byte by byte through its
 * framing (size, extensions, CRLFs, trailers) and in bulk through its data.
 *
 *   phase:  HEAD ---------------------------> (SL_HTTP_EV_HEAD)
 *             | LENGTH: left counted down       \
 *             | CHUNKED: sub-states below        > (SL_HTTP_EV_BODY)*
 *             | CLOSE: until sl_http_eof        /
 *           DONE -----------------------------> (SL_HTTP_EV_END), then HEAD again,
 *                                                or TUNNEL after a 101 / CONNECT 2xx
 *   chunked: SIZE0 SIZE [ext...] SIZE_LF DATA DATA_CR DATA_LF ... SIZE0 "0"
 *            SIZE_LF TR_START [TR_NAME TR_VALUE TR_LF]* END_LF
 *
 * Every decision depends on the bytes only, never on where the input was
 * split: the state carried between calls is what a byte-at-a-time reader
 * would carry, and bulk paths reproduce what it would decide (the same
 * error at the same byte). An error found after some body bytes of the same
 * call were taken is kept for the next call, so the body bytes reported
 * before an error do not depend on the split either. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "proto/http.h"

/* Defaults for caps given as 0. */
#define DEF_MAX_LINE       (8u * 1024)
#define DEF_MAX_FIELD_LINE (8u * 1024)
#define DEF_MAX_FIELDS     100u
#define DEF_MAX_HEAD       (64u * 1024)
#define DEF_MAX_BODY       (512ull * 1024 * 1024)

/* Empty lines (CRLF) ignored before a request line (RFC 9112 2.2 asks for
 * at least one; clients that add a CRLF after a POST body send one). */
#define MAX_SKIP 4

/* First size of h->buf and h->fields; both grow by doubling up to the caps. */
#define BUF_START    1024u
#define FIELDS_START 16u

/* Hex digits a chunk size may have: 16 fill a uint64_t. */
#define MAX_CHUNK_DIGITS 16

/* h->phase */
enum {
    P_HEAD = 0, /* reading a head */
    P_LENGTH,   /* Content-Length body: <left> bytes to come */
    P_CHUNKED,  /* chunked body: <sub> says where */
    P_CLOSE,    /* body until the connection closes */
    P_DONE,     /* the message is whole: the next call reports SL_HTTP_EV_END */
    P_TUNNEL,   /* after a 101 or a 2xx to CONNECT: the stream is not HTTP any more */
    P_DEAD,     /* after an error, or after sl_http_eof */
};

/* h->sub, inside a chunked body. */
enum {
    C_SIZE0 = 0,  /* a chunk-size's first hex digit is due */
    C_SIZE,       /* in the hex digits */
    C_SIZE_WS,    /* blanks after the size or an extension value: ';' due */
    C_EXT_NAME0,  /* after ';' (and blanks): an extension name is due */
    C_EXT_NAME,   /* in the name */
    C_EXT_NAME_WS, /* blanks after the name: '=' or ';' due */
    C_EXT_VAL0,   /* after '=' (and blanks): a token or a quoted string is due */
    C_EXT_TOKEN,  /* in a token value */
    C_EXT_QUOTED, /* in a quoted value */
    C_EXT_QPAIR,  /* after a backslash in it */
    C_EXT_QEND,   /* after the closing quote */
    C_SIZE_LF,    /* the chunk-size line's CR is in: LF due */
    C_DATA,       /* <left> data bytes to come */
    C_DATA_CR,    /* after the data: CR due */
    C_DATA_LF,    /* LF due */
    C_TR_START,   /* start of a trailer line, or of the final empty line */
    C_TR_NAME,    /* in a trailer field's name */
    C_TR_VALUE,   /* after its colon */
    C_TR_LF,      /* the trailer line's CR is in: LF due */
    C_END_LF,     /* the final empty line's CR is in: LF due */
};

/* Byte classes in a head: what the byte-by-byte check needs. */
enum { B_PLAIN = 0, B_CR, B_LF, B_CTL };

/* Constant tables (no lazy set-up: framers run on several worker threads). */
static const unsigned char hclass[256] = {
    [0x00 ... 0x08] = B_CTL, ['\n'] = B_LF, [0x0b ... 0x0c] = B_CTL, ['\r'] = B_CR,
    [0x0e ... 0x1f] = B_CTL, [0x7f] = B_CTL, /* HT and everything else: plain */
};

/* RFC 9110 5.6.2 token characters. */
static const unsigned char tchar[256] = {
    ['0' ... '9'] = 1, ['a' ... 'z'] = 1, ['A' ... 'Z'] = 1,
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1,
    ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1, ['~'] = 1,
};

/* A hex digit's value + 1; 0 = not a hex digit. */
static const unsigned char hexv[256] = {
    ['0'] = 1, ['1'] = 2, ['2'] = 3, ['3'] = 4, ['4'] = 5, ['5'] = 6, ['6'] = 7, ['7'] = 8,
    ['8'] = 9, ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15,
    ['f'] = 16, ['A'] = 11, ['B'] = 12, ['C'] = 13, ['D'] = 14, ['E'] = 15, ['F'] = 16,
};

static int is_ws(unsigned char c)
{
    return c == ' ' || c == '\t';
}

/* Kills <h> with <status> (any response error is a 502: the client is told
 * the upstream failed, whatever the upstream got wrong). */
static void die(struct sl_http *h, uint16_t status, const char *why)
{
    h->status = h->side == SL_HTTP_RESPONSES ? 502 : status;
    h->err = why;
    h->phase = P_DEAD;
}

static long fail(struct sl_http *h, uint16_t status, const char *why, enum sl_http_ev *ev)
{
    die(h, status, why);
    *ev = SL_HTTP_EV_ERROR;
    return -1;
}

/* Case-insensitive comparison of <p, n> with the lower-case literal <lit>. */
static int eq_ci(const char *p, size_t n, const char *lit)
{
    size_t k = strlen(lit);
    if (n != k)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 'A' && c <= 'Z')
            c = (unsigned char)(c - 'A' + 'a');
        if (c != (unsigned char)lit[i])
            return 0;
    }
    return 1;
}

/* ---- the head ------------------------------------------------------------ */

/* Makes room in h->buf for <n> more bytes; the caller has checked max_head. */
static int buf_room(struct sl_http *h, size_t n)
{
    size_t need = (size_t)h->buflen + n;
    if (need <= h->bufcap)
        return 0;
    size_t cap = h->bufcap ? h->bufcap : BUF_START;
    while (cap < need)
        cap *= 2;
    if (cap > h->caps.max_head)
        cap = h->caps.max_head;
    char *nb = realloc(h->buf, cap);
    if (nb == NULL)
        return SL_ENOMEM;
    h->buf = nb;
    h->bufcap = (uint32_t)cap;
    return 0;
}

static void head_reset(struct sl_http *h)
{
    h->phase = P_HEAD;
    h->buflen = 0;
    h->line = 0;
    h->nfields = 0;
    h->cr = 0;
    h->started = 0;
    h->skipped = 0;
}

static const struct {
    const char *name;
    uint8_t     m;
} methods[] = {
    { "GET", SL_HTTP_M_GET },         { "HEAD", SL_HTTP_M_HEAD },
    { "POST", SL_HTTP_M_POST },       { "PUT", SL_HTTP_M_PUT },
    { "DELETE", SL_HTTP_M_DELETE },   { "CONNECT", SL_HTTP_M_CONNECT },
    { "OPTIONS", SL_HTTP_M_OPTIONS }, { "TRACE", SL_HTTP_M_TRACE },
    { "PATCH", SL_HTTP_M_PATCH },
};

/* "HTTP/1.0" or "HTTP/1.1" at <p> (8 bytes): the minor version, or -1. */
static int version(const char *p)
{
    if (memcmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1'))
        return -1;
    return p[7] - '0';
}

/* Reads the request-target at <t, n> (offset <off> in buf) into h->head's
 * path. Returns NULL or what is wrong. */
static const char *target(struct sl_http *h, uint32_t off, uint32_t n)
{
    struct sl_http_head *hd = &h->head;
    const char *t = h->buf + off;

    hd->path_off = off;
    hd->path_len = 0;
    for (uint32_t i = 0; i < n; i++)
        if ((unsigned char)t[i] <= ' ' || t[i] == '#')
            return "invalid request-target";
    if (hd->method == SL_HTTP_M_CONNECT) {
        /* authority-form: host:port, nothing else. */
        const char *colon = memrchr(t, ':', n);
        if (t[0] == '/' || colon == NULL || colon == t || colon + 1 == t + n ||
            memchr(t, '/', n) != NULL || memchr(t, '?', n) != NULL || memchr(t, '@', n) != NULL)
            return "invalid request-target for CONNECT";
        for (const char *q = colon + 1; q < t + n; q++)
            if (*q < '0' || *q > '9')
                return "invalid request-target for CONNECT";
        return NULL;
    }
    if (t[0] == '*') {
        if (n != 1 || hd->method != SL_HTTP_M_OPTIONS)
            return "invalid request-target";
        return NULL;
    }
    uint32_t p0 = 0; /* where the path starts in the target */
    if (t[0] != '/') {
        /* absolute-form: scheme "://" authority [path] ["?" query] */
        uint32_t i = 0;
        if (!((t[0] >= 'a' && t[0] <= 'z') || (t[0] >= 'A' && t[0] <= 'Z')))
            return "invalid request-target";
        while (i < n && ((t[i] >= 'a' && t[i] <= 'z') || (t[i] >= 'A' && t[i] <= 'Z') ||
                         (t[i] >= '0' && t[i] <= '9') || t[i] == '+' || t[i] == '-' || t[i] == '.'))
            i++; /* scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) */
        if (n - i < 3 || memcmp(t + i, "://", 3) != 0)
            return "invalid request-target";
        uint32_t a = i + 3, e = a;
        while (e < n && t[e] != '/' && t[e] != '?')
            e++;
        if (e == a)
            return "invalid request-target: no host";
        if (e == n || t[e] == '?') {
            /* No path: it is "/", and the target has one to point at (in "://"). */
            hd->path_off = off + i + 1;
            hd->path_len = 1;
            return NULL;
        }
        p0 = e;
    }
    const char *q = memchr(t + p0, '?', n - p0);
    hd->path_off = off + p0;
    hd->path_len = q ? (uint32_t)(q - (t + p0)) : n - p0;
    return NULL;
}

/* Parses the start line at buf[line, line + n) into h->head. */
static const char *start_line(struct sl_http *h, uint32_t n)
{
    struct sl_http_head *hd = &h->head;
    const char *l = h->buf + h->line;

    if (h->side == SL_HTTP_RESPONSES) {
        /* status-line = HTTP-version SP 3DIGIT SP [ reason-phrase ]; a
         * missing last SP is let pass (it cannot change the framing). */
        int minor = n >= 12 ? version(l) : -1;
        if (minor < 0)
            return "invalid status line";
        if (l[8] != ' ' || l[9] < '1' || l[9] > '9' || l[10] < '0' || l[10] > '9' ||
            l[11] < '0' || l[11] > '9' || (n > 12 && l[12] != ' '))
            return "invalid status line";
        hd->minor = (uint8_t)minor;
        hd->status = (uint16_t)((l[9] - '0') * 100 + (l[10] - '0') * 10 + (l[11] - '0'));
        return NULL;
    }
    /* request-line = method SP request-target SP HTTP-version */
    uint32_t m = 0;
    while (m < n && tchar[(unsigned char)l[m]])
        m++;
    if (m == 0 || m == n || l[m] != ' ')
        return "invalid method";
    if (n - m < 1 + 1 + 1 + 8)
        return "invalid request line";
    uint32_t v = n - 8; /* the version's offset */
    if (l[v - 1] != ' ')
        return "invalid request line";
    int minor = version(l + v);
    if (minor < 0)
        return "invalid HTTP version";
    hd->minor = (uint8_t)minor;
    hd->method = SL_HTTP_M_OTHER;
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
        if (strlen(methods[i].name) == m && memcmp(l, methods[i].name, m) == 0)
            hd->method = methods[i].m;
    hd->method_off = h->line;
    hd->method_len = m;
    hd->target_off = h->line + m + 1;
    hd->target_len = v - 1 - (m + 1);
    if (hd->target_len == 0)
        return "invalid request line";
    return target(h, hd->target_off, hd->target_len);
}

/* Parses the field line at buf[line, line + n) into h->fields. Returns NULL
 * or what is wrong; *<status> gets 431 for a field too many. */
static const char *field_line(struct sl_http *h, uint32_t n, uint16_t *status)
{
    const char *l = h->buf + h->line;
    uint32_t c = 0;

    if (is_ws((unsigned char)l[0]))
        return h->nfields ? "obs-fold in a field" : "whitespace before the first field";
    while (c < n && tchar[(unsigned char)l[c]])
        c++;
    if (c == n)
        return "field without a colon";
    if (l[c] != ':')
        return is_ws((unsigned char)l[c]) ? "whitespace before a field's colon" : "invalid field name";
    if (c == 0)
        return "empty field name";
    if (h->nfields >= h->caps.max_fields) {
        *status = 431;
        return "too many fields";
    }
    if (h->nfields == h->fieldcap) {
        uint32_t cap = h->fieldcap ? h->fieldcap * 2 : FIELDS_START;
        if (cap > h->caps.max_fields)
            cap = h->caps.max_fields;
        struct sl_http_field *nf = realloc(h->fields, cap * sizeof(*nf));
        if (nf == NULL) {
            *status = 500;
            return "out of memory";
        }
        h->fields = nf;
        h->fieldcap = cap;
    }
    uint32_t v = c + 1, e = n;
    while (v < e && is_ws((unsigned char)l[v]))
        v++;
    while (e > v && is_ws((unsigned char)l[e - 1]))
        e--;
    struct sl_http_field *f = &h->fields[h->nfields++];
    f->name = h->line;
    f->name_len = c;
    f->value = h->line + v;
    f->value_len = e - v;
    return NULL;
}

/* Content-Length's value <v, n> ("1*DIGIT", or a list of equal ones),
 * merged into <*cl> (<*seen>: an earlier value is there). Returns 0, -1
 * (invalid) or -2 (differs from an earlier value). */
static int content_length(const char *v, size_t n, uint64_t *cl, int *seen)
{
    size_t i = 0;
    for (;;) {
        while (i < n && is_ws((unsigned char)v[i]))
            i++;
        if (i == n || v[i] < '0' || v[i] > '9')
            return -1;
        uint64_t x = 0;
        while (i < n && v[i] >= '0' && v[i] <= '9') {
            if (x > (UINT64_MAX - 9) / 10)
                return -1;
            x = x * 10 + (uint64_t)(v[i++] - '0');
        }
        if (*seen && x != *cl)
            return -2;
        *cl = x;
        *seen = 1;
        while (i < n && is_ws((unsigned char)v[i]))
            i++;
        if (i == n)
            return 0;
        if (v[i++] != ',')
            return -1;
    }
}

/* Transfer-Encoding's value <v, n>: transfer-coding *( OWS "," OWS
 * transfer-coding ), each `token *( OWS ";" OWS token BWS "=" BWS ( token /
 * quoted-string ) )`. Adds to <*codings>, <*chunked> (how many are
 * "chunked") and sets <*last_chunked>. Returns 0 or -1. */
static int transfer_encoding(const char *v, size_t n, unsigned *codings, unsigned *chunked,
                             int *last_chunked)
{
    size_t i = 0;
    for (;;) {
        while (i < n && (is_ws((unsigned char)v[i]) || v[i] == ','))
            i++; /* empty list elements are allowed (RFC 9110 5.6.1) */
        if (i == n)
            return 0;
        size_t t = i;
        while (i < n && tchar[(unsigned char)v[i]])
            i++;
        if (i == t)
            return -1;
        (*codings)++;
        *last_chunked = eq_ci(v + t, i - t, "chunked");
        *chunked += (unsigned)*last_chunked;
        for (;;) {
            while (i < n && is_ws((unsigned char)v[i]))
                i++;
            if (i == n || v[i] == ',')
                break;
            if (v[i++] != ';')
                return -1;
            while (i < n && is_ws((unsigned char)v[i]))
                i++;
            t = i;
            while (i < n && tchar[(unsigned char)v[i]])
                i++;
            if (i == t)
                return -1;
            while (i < n && is_ws((unsigned char)v[i]))
                i++;
            if (i == n || v[i++] != '=')
                return -1;
            while (i < n && is_ws((unsigned char)v[i]))
                i++;
            if (i < n && v[i] == '"') {
                for (i++;; i++) {
                    if (i >= n)
                        return -1;
                    if (v[i] == '\\')
                        i++;
                    else if (v[i] == '"')
                        break;
                }
                i++;
            } else {
                t = i;
                while (i < n && tchar[(unsigned char)v[i]])
                    i++;
                if (i == t)
                    return -1;
            }
        }
        if (*last_chunked && *chunked > 1)
            return -1; /* chunked applied twice (RFC 9112 6.1) */
    }
}

/* Whether the Host value <v, n> is a valid uri-host [ ":" port ] (empty
 * is allowed: RFC 9112 3.2). */
static int host_ok(const char *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              strchr("-._~!$&'()*+,;=:[]%", c) != NULL) || c == 0)
            return 0;
    }
    return 1;
}

/* The head is whole: reads its fields and decides how its body is framed.
 * Returns NULL or what is wrong, with *<status>. */
static const char *head_done(struct sl_http *h, uint16_t *status)
{
    struct sl_http_head *hd = &h->head;
    int req = h->side == SL_HTTP_REQUESTS;
    uint64_t cl = 0;
    int has_cl = 0, has_te = 0, close = 0, keep = 0, conn_upgrade = 0, upgrade = 0;
    unsigned codings = 0, chunked = 0, hosts = 0;
    int last_chunked = 0;

    *status = 400;
    hd->buf = h->buf;
    hd->len = h->buflen;
    hd->is_request = (uint8_t)req;
    hd->fields = h->fields;
    hd->nfields = h->nfields;
    hd->content_length = 0;
    hd->expect_continue = 0;
    for (uint32_t i = 0; i < h->nfields; i++) {
        const struct sl_http_field *f = &h->fields[i];
        const char *name = h->buf + f->name, *v = h->buf + f->value;
        size_t nl = f->name_len, vl = f->value_len;
        switch (name[0] | 0x20) {
        case 'c':
            if (eq_ci(name, nl, "content-length")) {
                int r = content_length(v, vl, &cl, &has_cl);
                if (r < 0)
                    return r == -2 ? "differing Content-Length values" : "invalid Content-Length";
            } else if (eq_ci(name, nl, "connection")) {
                /* A comma list of tokens; only three matter here. */
                size_t a = 0;
                while (a < vl) {
                    size_t e = a;
                    while (e < vl && v[e] != ',')
                        e++;
                    size_t s = a, t = e;
                    while (s < t && is_ws((unsigned char)v[s]))
                        s++;
                    while (t > s && is_ws((unsigned char)v[t - 1]))
                        t--;
                    close |= eq_ci(v + s, t - s, "close");
                    keep |= eq_ci(v + s, t - s, "keep-alive");
                    conn_upgrade |= eq_ci(v + s, t - s, "upgrade");
                    a = e + 1;
                }
            }
            break;
        case 't':
            if (eq_ci(name, nl, "transfer-encoding")) {
                has_te = 1;
                if (transfer_encoding(v, vl, &codings, &chunked, &last_chunked) < 0)
                    return "invalid Transfer-Encoding";
            }
            break;
        case 'h':
            if (req && eq_ci(name, nl, "host")) {
                if (++hosts > 1)
                    return "more than one Host";
                if (!host_ok(v, vl))
                    return "invalid Host";
            }
            break;
        case 'u':
            upgrade |= eq_ci(name, nl, "upgrade");
            break;
        case 'e':
            if (req && hd->minor == 1 && eq_ci(name, nl, "expect") && eq_ci(v, vl, "100-continue"))
                hd->expect_continue = 1;
            break;
        }
    }
    if (has_te && codings == 0)
        return "invalid Transfer-Encoding";
    if (has_cl && has_te)
        return "both Content-Length and Transfer-Encoding";
    hd->content_length = has_cl ? cl : 0;
    hd->keep_alive = (uint8_t)(!close && (hd->minor == 1 || keep));

    if (req) {
        if (hd->minor == 1 && hosts == 0)
            return "no Host";
        hd->status = 0;
        hd->upgrade = (uint8_t)(upgrade && conn_upgrade);
        if (has_te) {
            if (hd->minor == 0)
                return "Transfer-Encoding in an HTTP/1.0 request";
            if (!last_chunked)
                return "Transfer-Encoding does not end in chunked";
            hd->body = SL_HTTP_BODY_CHUNKED;
        } else if (has_cl) {
            if (cl > h->caps.max_body) {
                *status = 413;
                return "Content-Length above max_request";
            }
            hd->body = SL_HTTP_BODY_LENGTH;
        } else {
            hd->body = SL_HTTP_BODY_NONE;
        }
    } else {
        unsigned st = hd->status;
        hd->method = SL_HTTP_M_OTHER;
        hd->method_off = hd->method_len = hd->target_off = hd->target_len = 0;
        hd->path_off = hd->path_len = 0;
        hd->upgrade = st == 101;
        if (st < 200 || st == 204 || st == 304 || h->want_head || (h->want_connect && st < 300)) {
            hd->body = SL_HTTP_BODY_NONE;
        } else if (has_te && hd->minor == 1 && last_chunked) {
            hd->body = SL_HTTP_BODY_CHUNKED;
        } else if (has_te) {
            /* Not chunked last (or from an HTTP/1.0 server): only the close
             * tells where it ends (RFC 9112 6.3). */
            hd->body = SL_HTTP_BODY_CLOSE;
        } else if (has_cl) {
            hd->body = SL_HTTP_BODY_LENGTH;
        } else {
            hd->body = SL_HTTP_BODY_CLOSE;
        }
        if (hd->body == SL_HTTP_BODY_CLOSE || st == 101 || (h->want_connect && st >= 200 && st < 300))
            hd->keep_alive = 0;
    }

    switch (hd->body) {
    case SL_HTTP_BODY_LENGTH:
        h->phase = cl ? P_LENGTH : P_DONE;
        h->left = cl;
        break;
    case SL_HTTP_BODY_CHUNKED:
        h->phase = P_CHUNKED;
        h->sub = C_SIZE0;
        h->linelen = 0;
        h->digits = 0;
        h->chunk = 0;
        h->ntrailers = 0;
        break;
    case SL_HTTP_BODY_CLOSE:
        h->phase = P_CLOSE;
        break;
    default:
        h->phase = P_DONE;
    }
    h->taken = 0;
    return NULL;
}

/* A line of the head is whole in buf[line, buflen) (CRLF included).
 * Returns 0 (more lines), 1 (the head is whole) or -1 (h is dead). */
static int line_done(struct sl_http *h)
{
    uint32_t n = h->buflen - h->line - 2;
    uint16_t status = 400;
    const char *why;

    if (!h->started) {
        why = start_line(h, n);
        h->started = 1;
    } else if (n == 0) {
        why = head_done(h, &status);
        if (why == NULL)
            return 1;
    } else {
        why = field_line(h, n, &status);
    }
    if (why != NULL) {
        die(h, status, why);
        return -1;
    }
    h->line = h->buflen;
    return 0;
}

static long parse_head(struct sl_http *h, const char *p, size_t n, enum sl_http_ev *ev)
{
    size_t i = 0;

    while (i < n) {
        unsigned char c = (unsigned char)p[i];
        uint32_t cap = h->started ? h->caps.max_field_line : h->caps.max_line;
        uint16_t over = h->started ? 431 : 414; /* a line past its cap */

        if (h->cr) {
            if (c != '\n')
                return fail(h, 400, "bare CR in the head", ev);
            h->cr = 0;
            i++;
            if (!h->started && h->buflen == 0) {
                /* An empty line before a request line (nothing was held). */
                if (h->side == SL_HTTP_RESPONSES || ++h->skipped > MAX_SKIP)
                    return fail(h, 400, "empty line before the start line", ev);
                continue;
            }
            if ((uint64_t)h->buflen + 1 > h->caps.max_head)
                return fail(h, 431, "head too large", ev);
            if (buf_room(h, 1) < 0)
                return fail(h, 500, "out of memory", ev);
            h->buf[h->buflen++] = '\n';
            int r = line_done(h);
            if (r < 0) {
                *ev = SL_HTTP_EV_ERROR;
                return -1;
            }
            if (r > 0) {
                *ev = SL_HTTP_EV_HEAD;
                return (long)i;
            }
            continue;
        }
        switch (hclass[c]) {
        case B_LF:
            return fail(h, 400, "bare LF in the head", ev);
        case B_CTL:
            return fail(h, 400, "control byte in the head", ev);
        case B_CR:
            i++;
            h->cr = 1;
            if (!h->started && h->buflen == 0)
                continue; /* maybe an empty line to skip: hold nothing */
            if ((uint64_t)h->buflen + 1 > h->caps.max_head)
                return fail(h, 431, "head too large", ev);
            if (buf_room(h, 1) < 0)
                return fail(h, 500, "out of memory", ev);
            h->buf[h->buflen++] = '\r';
            continue;
        }
        /* A run of plain bytes: copied at once, but failed at the byte a
         * byte-at-a-time reader would fail at (the line's cap first). */
        size_t have = h->buflen - h->line;
        size_t room_line = cap > have ? cap - have : 0;
        size_t room_head = h->caps.max_head - h->buflen;
        size_t lim = (room_line < room_head ? room_line : room_head) + 1, j = i + 1;
        if (lim > n - i)
            lim = n - i;
        while (j < i + lim && hclass[(unsigned char)p[j]] == B_PLAIN)
            j++;
        size_t run = j - i;
        if (run > room_line || run > room_head) {
            if (room_line <= room_head)
                return fail(h, over, h->started ? "field line too long" : "start line too long", ev);
            return fail(h, 431, "head too large", ev);
        }
        if (buf_room(h, run) < 0)
            return fail(h, 500, "out of memory", ev);
        memcpy(h->buf + h->buflen, p + i, run);
        h->buflen += (uint32_t)run;
        i = j;
    }
    *ev = SL_HTTP_EV_NEED;
    return (long)n;
}

/* ---- a chunked body ------------------------------------------------------- */

static long parse_chunked(struct sl_http *h, const char *p, size_t n, enum sl_http_ev *ev)
{
    size_t i = 0;
    uint16_t status = 400;
    const char *why = NULL;

    while (i < n) {
        if (h->sub == C_DATA) {
            size_t k = n - i;
            if (k > h->left)
                k = (size_t)h->left;
            i += k;
            h->left -= k;
            if (h->left == 0)
                h->sub = C_DATA_CR;
            continue;
        }
        unsigned char c = (unsigned char)p[i];
        int ws = is_ws(c);

        if (h->sub <= C_EXT_QEND && c != '\r' && ++h->linelen > h->caps.max_field_line) {
            why = "chunk-size line too long";
            goto bad;
        }
        switch (h->sub) {
        case C_SIZE0:
        case C_SIZE:
            if (hexv[c]) {
                if (++h->digits > MAX_CHUNK_DIGITS) {
                    why = "chunk size too long";
                    goto bad;
                }
                h->chunk = h->chunk * 16 + (uint64_t)(hexv[c] - 1);
                h->sub = C_SIZE;
                break;
            }
            if (h->sub == C_SIZE0) {
                why = "invalid chunk size";
                goto bad;
            }
            /* What may follow the digits may follow an extension's value. */
            /* fallthrough */
        case C_EXT_TOKEN:
            if (h->sub == C_EXT_TOKEN && tchar[c])
                break;
            /* fallthrough */
        case C_EXT_QEND:
        case C_SIZE_WS:
            if (c == ';')
                h->sub = C_EXT_NAME0;
            else if (ws)
                h->sub = C_SIZE_WS;
            else if (c == '\r' && h->sub != C_SIZE_WS)
                h->sub = C_SIZE_LF;
            else {
                why = h->sub == C_SIZE ? "invalid chunk size" : "invalid chunk extension";
                goto bad;
            }
            break;
        case C_EXT_NAME0:
            if (ws)
                break;
            if (!tchar[c]) {
                why = "invalid chunk extension";
                goto bad;
            }
            h->sub = C_EXT_NAME;
            break;
        case C_EXT_NAME:
        case C_EXT_NAME_WS:
            if (h->sub == C_EXT_NAME && tchar[c])
                break;
            if (c == '=')
                h->sub = C_EXT_VAL0;
            else if (c == ';')
                h->sub = C_EXT_NAME0;
            else if (ws)
                h->sub = C_EXT_NAME_WS;
            else if (c == '\r' && h->sub == C_EXT_NAME)
                h->sub = C_SIZE_LF;
            else {
                why = "invalid chunk extension";
                goto bad;
            }
            break;
        case C_EXT_VAL0:
            if (ws)
                break;
            if (c == '"')
                h->sub = C_EXT_QUOTED;
            else if (tchar[c])
                h->sub = C_EXT_TOKEN;
            else {
                why = "invalid chunk extension";
                goto bad;
            }
            break;
        case C_EXT_QUOTED:
            /* qdtext = HTAB / SP / %x21 / %x23-5B / %x5D-7E / obs-text */
            if (c == '"')
                h->sub = C_EXT_QEND;
            else if (c == '\\')
                h->sub = C_EXT_QPAIR;
            else if (hclass[c] != B_PLAIN) {
                why = "invalid chunk extension";
                goto bad;
            }
            break;
        case C_EXT_QPAIR:
            if (hclass[c] != B_PLAIN) {
                why = "invalid chunk extension";
                goto bad;
            }
            h->sub = C_EXT_QUOTED;
            break;
        case C_SIZE_LF:
            if (c != '\n') {
                why = "bare CR in a chunk-size line";
                goto bad;
            }
            h->linelen = 0;
            h->digits = 0;
            if (h->side == SL_HTTP_REQUESTS && h->chunk > h->caps.max_body - h->taken) {
                status = 413;
                why = "chunked body above max_request";
                goto bad;
            }
            h->taken += h->chunk;
            h->left = h->chunk;
            h->chunk = 0;
            h->sub = h->left ? C_DATA : C_TR_START;
            break;
        case C_DATA_CR:
            if (c != '\r') {
                why = "chunk data not followed by CRLF";
                goto bad;
            }
            h->sub = C_DATA_LF;
            break;
        case C_DATA_LF:
            if (c != '\n') {
                why = "chunk data not followed by CRLF";
                goto bad;
            }
            h->sub = C_SIZE0;
            break;
        case C_TR_START:
            if (c == '\r') {
                h->sub = C_END_LF;
                break;
            }
            if (!tchar[c]) {
                why = ws ? "obs-fold in a trailer" : "invalid trailer field";
                goto bad;
            }
            if (++h->ntrailers > h->caps.max_fields) {
                status = 431;
                why = "too many trailer fields";
                goto bad;
            }
            h->linelen = 1;
            h->sub = C_TR_NAME;
            break;
        case C_TR_NAME:
        case C_TR_VALUE:
            if (c != '\r' && ++h->linelen > h->caps.max_field_line) {
                status = 431;
                why = "trailer line too long";
                goto bad;
            }
            if (h->sub == C_TR_NAME && !tchar[c] && c != ':') {
                why = ws ? "whitespace before a trailer's colon" : "invalid trailer field";
                goto bad;
            }
            if (c == ':')
                h->sub = C_TR_VALUE;
            else if (c == '\r' && h->sub == C_TR_VALUE)
                h->sub = C_TR_LF;
            else if (hclass[c] != B_PLAIN) {
                why = c == '\n' ? "bare LF in a trailer" : "control byte in a trailer";
                goto bad;
            }
            break;
        case C_TR_LF:
        case C_END_LF:
            if (c != '\n') {
                why = "bare CR in the trailers";
                goto bad;
            }
            if (h->sub == C_END_LF) {
                h->phase = P_DONE;
                *ev = SL_HTTP_EV_BODY;
                return (long)(i + 1);
            }
            h->sub = C_TR_START;
            break;
        }
        i++;
    }
    *ev = i ? SL_HTTP_EV_BODY : SL_HTTP_EV_NEED;
    return (long)i;

bad:
    die(h, status, why);
    if (i > 0) {
        /* Report the good bytes first; the next call reports the error. */
        *ev = SL_HTTP_EV_BODY;
        return (long)i;
    }
    *ev = SL_HTTP_EV_ERROR;
    return -1;
}

/* ---- the API --------------------------------------------------------------- */

int sl_http_init(struct sl_http *h, enum sl_http_side side, const struct sl_http_caps *caps)
{
    memset(h, 0, sizeof(*h));
    h->side = (uint8_t)side;
    h->err = "";
    if (caps != NULL)
        h->caps = *caps;
    if (h->caps.max_line == 0)
        h->caps.max_line = DEF_MAX_LINE;
    if (h->caps.max_field_line == 0)
        h->caps.max_field_line = DEF_MAX_FIELD_LINE;
    if (h->caps.max_fields == 0)
        h->caps.max_fields = DEF_MAX_FIELDS;
    if (h->caps.max_head == 0)
        h->caps.max_head = DEF_MAX_HEAD;
    if (h->caps.max_body == 0)
        h->caps.max_body = DEF_MAX_BODY;
    uint32_t start = h->caps.max_head < BUF_START ? h->caps.max_head : BUF_START;
    h->buf = malloc(start);
    if (h->buf == NULL)
        return SL_ENOMEM;
    h->bufcap = start;
    head_reset(h);
    return 0;
}

void sl_http_free(struct sl_http *h)
{
    free(h->buf);
    free(h->fields);
    memset(h, 0, sizeof(*h));
    h->phase = P_DEAD;
    h->err = "";
}

long sl_http_parse(struct sl_http *h, const char *p, size_t n, enum sl_http_ev *ev)
{
    switch (h->phase) {
    case P_HEAD:
        return parse_head(h, p, n, ev);
    case P_LENGTH: {
        size_t k = n < h->left ? n : (size_t)h->left;
        h->left -= k;
        if (h->left == 0)
            h->phase = P_DONE;
        *ev = k ? SL_HTTP_EV_BODY : SL_HTTP_EV_NEED;
        return (long)k;
    }
    case P_CHUNKED:
        return parse_chunked(h, p, n, ev);
    case P_CLOSE:
    case P_TUNNEL:
        /* Every byte is body (or tunnel) until the close. */
        *ev = n ? SL_HTTP_EV_BODY : SL_HTTP_EV_NEED;
        return (long)n;
    case P_DONE:
        *ev = SL_HTTP_EV_END;
        if (h->side == SL_HTTP_RESPONSES) {
            unsigned st = h->head.status;
            if (st == 101 || (h->want_connect && st >= 200 && st < 300)) {
                h->phase = P_TUNNEL;
                return 0;
            }
            if (st >= 200)
                h->want_head = h->want_connect = 0; /* a 1xx: the same request's answer follows */
        }
        head_reset(h);
        return 0;
    default:
        if (h->status == 0) {
            h->status = h->side == SL_HTTP_RESPONSES ? 502 : 400;
            h->err = "the connection was closed";
        }
        *ev = SL_HTTP_EV_ERROR;
        return -1;
    }
}

void sl_http_expect(struct sl_http *h, int head_request, int connect_request)
{
    h->want_head = head_request != 0;
    h->want_connect = connect_request != 0;
}

enum sl_http_ev sl_http_eof(struct sl_http *h)
{
    switch (h->phase) {
    case P_HEAD:
        if (h->buflen == 0 && !h->cr)
            break; /* between messages (empty lines apart) */
        die(h, 400, "the connection was closed in a head");
        return SL_HTTP_EV_ERROR;
    case P_CLOSE:
    case P_DONE:
    case P_TUNNEL:
        break;
    case P_DEAD:
        if (h->status == 0)
            break; /* a second eof */
        return SL_HTTP_EV_ERROR;
    default:
        die(h, 400, "the connection was closed in a body");
        return SL_HTTP_EV_ERROR;
    }
    h->phase = P_DEAD;
    return SL_HTTP_EV_END;
}

int sl_http_idle(const struct sl_http *h)
{
    return h->phase == P_HEAD && h->buflen == 0 && !h->cr && h->skipped == 0;
}

int sl_http_names_head(const struct sl_http *h)
{
    /* buf holds the head from its request line on (empty lines skipped
     * before it are not kept), whole or not */
    return h->side == SL_HTTP_REQUESTS && h->buf != NULL && h->buflen >= 5 &&
           memcmp(h->buf, "HEAD ", 5) == 0;
}

long sl_http_field(const struct sl_http_head *hd, const char *name, const char **val)
{
    size_t n = strlen(name);
    for (uint32_t i = 0; i < hd->nfields; i++) {
        const struct sl_http_field *f = &hd->fields[i];
        if (f->name_len != n)
            continue;
        const char *a = hd->buf + f->name;
        size_t k = 0;
        while (k < n) {
            unsigned char x = (unsigned char)a[k], y = (unsigned char)name[k];
            if (x >= 'A' && x <= 'Z')
                x = (unsigned char)(x - 'A' + 'a');
            if (y >= 'A' && y <= 'Z')
                y = (unsigned char)(y - 'A' + 'a');
            if (x != y)
                break;
            k++;
        }
        if (k == n) {
            *val = hd->buf + f->value;
            return f->value_len;
        }
    }
    return -1;
}

/* sluice — libFuzzer target for what limits and identities do with an
 * HTTP request: path normalisation and patterns (src/proto/http_path.c),
 * header and X-Forwarded-For identities (sl_identity_of_req) and the
 * decision (sl_limiter_check_req, url = local).
 *
 * Input: byte 0 picks the peer and whether an X-Api-Key field is sent;
 * the rest is lines: the method, the path, the API key, then one
 * X-Forwarded-For field per line. The head is built as the framer would
 * give it. Checked: the normal form starts with '/', has no empty, "." or
 * ".." segment and is a fixed point unless decoding made an escape; the
 * readings are distinct, bounded, the path as sent first, the normal form
 * among them; a path with %00 or overlong UTF-8 is refused exactly where
 * the listener's limits have paths; the
 * identity is "header#" + 16 hex digits (equal to its match_identity
 * form) or "ip:" + an address in canonical text; a verdict is whole. */
#include <arpa/inet.h>
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "core/clock.h"
#include "identity/identity.h"
#include "limit/limiter.h"
#include "proto/http_path.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The limiter's clock: the input moves it. */
static uint64_t fuzz_us;

static uint64_t fuzz_now(const struct sl_clock *c)
{
    (void)c;
    return fuzz_us;
}

static const struct sl_clock fuzz_clock = { fuzz_now };
static const struct sl_limiter_env fuzz_env = { NULL, &fuzz_clock, NULL };

static const char conf_text[] =
    "[store]\nurl = local\n"
    "[listener w]\nlisten = 127.0.0.1:7001\nupstream = 127.0.0.1:7002\nprotocol = http\n"
    "identity = header:X-Api-Key client_ip\ntrusted_proxies = 10.0.0.0/8 fd00::/8\n"
    "[limit api]\nlistener = w\nrate = 100/s\nburst = 100\npaths = /api/* /v?/x /img/*.png\n"
    "[limit writes]\nlistener = w\nrate = 50/s\nburst = 50\nmethods = POST PUT DELETE\n"
    "cost = POST=5 *=1\n"
    "[limit everyone]\nlistener = w\nrate = 20/s\nburst = 20\n"
    "[limit vip]\nlistener = w\nrate = 100/s\nburst = 100\nmatch_identity = gold ip:10.0.0.1\n"
    "replaces = everyone\n";

static struct sl_conf *conf;
static struct sl_limiter *lim;

static void never(void *d, const struct sl_verdict *v)
{
    (void)d;
    (void)v;
    abort();
}

static int has_escape(const char *a, size_t an)
{
    for (size_t i = 0; i + 2 < an; i++)
        if (a[i] == '%' && isxdigit((unsigned char)a[i + 1]) && isxdigit((unsigned char)a[i + 2]))
            return 1;
    return 0;
}

static void check_norm(const char *p, size_t n)
{
    if (memchr(p, '\0', n) != NULL)
        return; /* the framer refuses control bytes in a request line */
    char *a = malloc(SL_HTTP_PATH_NORM_CAP(n)), *b = malloc(SL_HTTP_PATH_NORM_CAP(n + 1));
    char *scratch = malloc(SL_HTTP_PATH_FORMS_CAP(n));
    if (a == NULL || b == NULL || scratch == NULL)
        abort();
    /* the normal form (RESOLVED): no empty, "." or ".." segment */
    size_t an = sl_http_path_norm(p, n, a);
    if (an > n + 1 || a[an] != '\0' || a[0] != '/')
        abort();
    if (memmem(a, an, "//", 2) != NULL || memmem(a, an, "/./", 3) != NULL ||
        memmem(a, an, "/../", 4) != NULL)
        abort();
    if ((an >= 2 && memcmp(a + an - 2, "/.", 2) == 0) || (an >= 3 && memcmp(a + an - 3, "/..", 3) == 0))
        abort();
    /* a fixed point unless decoding made a new escape ("%252F") */
    size_t bn = sl_http_path_norm(a, an, b);
    if (!has_escape(a, an) && (bn != an || memcmp(a, b, an) != 0))
        abort();
    /* the readings: the path as sent first, all distinct, RESOLVED among them */
    struct sl_http_path_forms f;
    sl_http_path_forms(p, n, scratch, &f);
    if (f.n < 1 || f.n > SL_HTTP_PATH_READINGS || f.form[0] != p || f.len[0] != n)
        abort();
    if (sl_http_path_plain(p, n) && (f.n != 1 || an != n || memcmp(a, p, n) != 0))
        abort();
    int resolved = 0;
    for (int i = 0; i < f.n; i++) {
        if (f.len[i] > n + 1)
            abort();
        if (i > 0 && (f.form[i] < scratch || f.form[i] + f.len[i] > scratch + SL_HTTP_PATH_FORMS_CAP(n)))
            abort();
        for (int j = 0; j < i; j++)
            if (f.len[i] == f.len[j] && memcmp(f.form[i], f.form[j], f.len[i]) == 0)
                abort();
        resolved |= f.len[i] == an && memcmp(f.form[i], a, an) == 0;
        if (f.len[i] > 0 && f.form[i][0] == '/' && !sl_http_path_match("/*", f.form[i], f.len[i]))
            abort();
    }
    if (!resolved && !sl_http_path_plain(p, n))
        abort();
    /* patterns: a normal path matches itself (in any case), and "/" + '*' matches all */
    if (memchr(a, '*', an) == NULL && memchr(a, '?', an) == NULL && strlen(a) == an) {
        struct sl_http_path_forms self = { 1, { a }, { an } };
        if (!sl_http_path_match(a, a, an) || !sl_http_path_match_forms(a, &self))
            abort();
        for (size_t i = 0; i < an; i++)
            b[i] = (char)toupper((unsigned char)a[i]);
        if (!sl_http_path_match(a, b, an))
            abort();
    }
    if (!sl_http_path_match("/*", a, an))
        abort();
    (void)sl_http_path_refusal(p, n);
    free(scratch);
    free(a);
    free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char buf[70000];
    static struct sl_http_field fields[64];
    if (conf == NULL) {
        conf = sl_conf_load_string(conf_text, "fuzz.ini", stderr);
        if (conf == NULL || (lim = sl_limiter_new(conf, &fuzz_env)) == NULL)
            abort();
    }
    if (size < 1 || size > 60000)
        return 0;
    uint8_t mode = data[0];
    const char *p = (const char *)data + 1, *end = (const char *)data + size;

    /* lines */
    const char *line[66];
    size_t len[66];
    int nl = 0;
    while (nl < 66 && p <= end) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        if (e == NULL)
            e = end;
        line[nl] = p;
        len[nl++] = (size_t)(e - p);
        p = e + 1;
    }
    if (nl < 2)
        return 0;
    check_norm(line[1], len[1]);

    struct sl_http_head hd;
    memset(&hd, 0, sizeof(hd));
    size_t at = 0;
    hd.method_len = (uint32_t)len[0];
    memcpy(buf + at, line[0], len[0]);
    at += len[0];
    buf[at++] = ' ';
    hd.path_off = (uint32_t)at;
    hd.path_len = (uint32_t)len[1];
    memcpy(buf + at, line[1], len[1]);
    at += len[1];
    uint32_t nf = 0;
    for (int i = 2; i < nl && nf < 64; i++) {
        static const char xff[] = "X-Forwarded-For", key[] = "X-Api-Key";
        int is_key = i == 2 && (mode & 4);
        const char *name = is_key ? key : xff;
        fields[nf].name = (uint32_t)at;
        fields[nf].name_len = (uint32_t)strlen(name);
        memcpy(buf + at, name, strlen(name));
        at += strlen(name);
        fields[nf].value = (uint32_t)at;
        fields[nf].value_len = (uint32_t)len[i];
        memcpy(buf + at, line[i], len[i]);
        at += len[i];
        nf++;
    }
    hd.buf = buf;
    hd.len = (uint32_t)at;
    hd.fields = fields;
    hd.nfields = nf;
    hd.is_request = 1;

    static const char *const peers[] = { "10.0.0.1", "192.0.2.1", "fd00::1", "2001:db8::1" };
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    const char *peer = peers[mode & 3];
    if (strchr(peer, ':')) {
        ss.ss_family = AF_INET6;
        inet_pton(AF_INET6, peer, &((struct sockaddr_in6 *)&ss)->sin6_addr);
    } else {
        ss.ss_family = AF_INET;
        inet_pton(AF_INET, peer, &((struct sockaddr_in *)&ss)->sin_addr);
    }
    struct sl_ident_state st;
    sl_identity_init(&st, (const struct sockaddr *)&ss);
    struct sl_req r = { .resp = NULL, .http = &hd };
    char id[SL_ID_MAX + 1], why[160];
    /* the ambiguity check: a verdict either way, a reason when refused */
    why[0] = '\0';
    if (sl_identity_http_check(conf->listeners, &st, &hd, why, sizeof why) != 0 &&
        (why[0] == '\0' || strlen(why) >= sizeof why))
        abort();
    size_t n = sl_identity_of_req(conf->listeners, &st, &r, id);
    if (n == 0 || n > SL_ID_MAX || strlen(id) != n)
        abort();
    if (strncmp(id, "header#", 7) == 0) {
        if (n != 23 || strspn(id + 7, "0123456789abcdef") != 16 || !(mode & 4) || len[2] == 0)
            abort();
        char entry[70100], canon[SL_ID_MAX + 1];
        if (memchr(line[2], '\0', len[2]) == NULL) {
            snprintf(entry, sizeof(entry), "header:X-Api-Key:%.*s", (int)len[2], line[2]);
            if (sl_identity_canon(entry, canon) != n || strcmp(canon, id) != 0)
                abort();
        }
    } else if (strncmp(id, "ip:", 3) == 0) {
        unsigned char a[16];
        char text[64];
        int v6 = strchr(id + 3, ':') != NULL;
        if (inet_pton(v6 ? AF_INET6 : AF_INET, id + 3, a) != 1)
            abort();
        inet_ntop(v6 ? AF_INET6 : AF_INET, a, text, sizeof(text));
        if (strcmp(text, id + 3) != 0)
            abort();
    } else {
        abort();
    }

    struct sl_verdict v;
    struct sl_limiter_req *h = NULL;
    static uint64_t now_us = 1000000;
    now_us += 997;
    memset(&v, 0xa5, sizeof(v));
    fuzz_us = now_us;
    /* the [limit api] has paths: refused exactly when the path is */
    const char *bad = sl_limiter_path_refusal(lim, conf->listeners, &hd);
    if ((bad == NULL) != (hd.path_len == 0 || sl_http_path_refusal(buf + hd.path_off, hd.path_len) == NULL))
        abort();
    if (sl_limiter_check_req(lim, conf->listeners, &st, 1, &r, &v, never, NULL, &h) != 0)
        abort();
    if (v.kind != SL_VERDICT_ALLOW && v.kind != SL_VERDICT_REJECT)
        abort();
    if (v.kind == SL_VERDICT_REJECT &&
        (memchr(v.limit, '\0', sizeof(v.limit)) == NULL || v.limit[0] == '\0' ||
         memchr(v.identity, '\0', sizeof(v.identity)) == NULL || v.identity[0] == '\0'))
        abort();
    return 0;
}

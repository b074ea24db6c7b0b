/* sluice — parsing and printing the units of the configuration file.
 *
 * Every parser is strict: the whole text must be one value, digits are plain
 * ASCII (no sign, no blanks, no fractions), and any multiplication that would
 * wrap around a uint64_t is a rejection, never a silent wrap. */
#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "conf/conf-i.h"
#include "conf/units.h"

#define US_PER_MS  1000ULL
#define US_PER_S   1000000ULL
#define US_PER_M   (60ULL * US_PER_S)
#define US_PER_H   (60ULL * US_PER_M)
#define US_PER_D   (24ULL * US_PER_H)

struct unit {
    const char *suffix; /* as written after the number */
    uint64_t    mult;   /* value of one unit in the base unit */
};

/* Longest suffix first is not needed: suffixes are compared whole. */
static const struct unit duration_units[] = {
    { "us", 1 },         { "ms", US_PER_MS }, { "s", US_PER_S },
    { "m", US_PER_M },   { "h", US_PER_H },   { "d", US_PER_D },
};

static const struct unit size_units[] = {
    { "", 1 },           { "b", 1 },
    { "kb", 1000ULL },   { "mb", 1000000ULL }, { "gb", 1000000000ULL },
    { "tb", 1000000000000ULL },
    { "kib", 1ULL << 10 }, { "mib", 1ULL << 20 }, { "gib", 1ULL << 30 },
    { "tib", 1ULL << 40 },
};

/* Reads the leading run of decimal digits of <s> into <v>. Returns the number
 * of digits (0 when there are none) or -1 on overflow. */
static int digits(const char *s, uint64_t *v)
{
    uint64_t n = 0;
    int i = 0;
    for (; s[i] >= '0' && s[i] <= '9'; i++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (n > (UINT64_MAX - d) / 10)
            return -1;
        n = n * 10 + d;
    }
    *v = n;
    return i;
}

static int mul_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    if (b != 0 && a > UINT64_MAX / b)
        return -1;
    *out = a * b;
    return 0;
}

int sl_parse_duration(const char *s, uint64_t *us)
{
    uint64_t n;
    int nd = digits(s, &n);
    if (nd <= 0)
        return -1;
    const char *suf = s + nd;
    /* A bare number is seconds, as in nginx. */
    if (*suf == '\0')
        return mul_ok(n, US_PER_S, us);
    for (size_t i = 0; i < sizeof(duration_units) / sizeof(duration_units[0]); i++) {
        if (strcmp(suf, duration_units[i].suffix) == 0)
            return mul_ok(n, duration_units[i].mult, us);
    }
    return -1;
}

int sl_parse_size(const char *s, uint64_t *bytes)
{
    uint64_t n;
    int nd = digits(s, &n);
    if (nd <= 0)
        return -1;
    const char *suf = s + nd;
    for (size_t i = 0; i < sizeof(size_units) / sizeof(size_units[0]); i++) {
        if (strcasecmp(suf, size_units[i].suffix) == 0)
            return mul_ok(n, size_units[i].mult, bytes);
    }
    return -1;
}

/* The period of a rate: "s", "m", "h", "d", "sec", "min", "hour", "day", or a
 * count with a duration unit ("10s", "500ms"). A bare number is rejected
 * here, unlike in sl_parse_duration(): "100/10" reads as a fraction. */
static int parse_period(const char *s, uint64_t *us)
{
    static const struct unit words[] = {
        { "sec", US_PER_S }, { "min", US_PER_M }, { "hour", US_PER_H }, { "day", US_PER_D },
    };
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        if (strcmp(s, words[i].suffix) == 0) {
            *us = words[i].mult;
            return 0;
        }
    }
    if (*s >= '0' && *s <= '9') {
        size_t n = strspn(s, "0123456789");
        if (s[n] == '\0')
            return -1;
        return sl_parse_duration(s, us);
    }
    char one[16];
    if (*s == '\0')
        return -1;
    if (snprintf(one, sizeof(one), "1%s", s) >= (int)sizeof(one))
        return -1;
    return sl_parse_duration(one, us);
}

int sl_parse_rate(const char *s, int bytes, struct sl_rate *out)
{
    const char *slash = strchr(s, '/');
    if (slash == NULL || slash == s)
        return -1;
    char amount_text[64];
    size_t alen = (size_t)(slash - s);
    if (alen >= sizeof(amount_text))
        return -1;
    memcpy(amount_text, s, alen);
    amount_text[alen] = '\0';

    uint64_t amount, period;
    if (bytes) {
        if (sl_parse_size(amount_text, &amount) != 0)
            return -1;
    } else {
        int nd = digits(amount_text, &amount);
        if (nd <= 0 || amount_text[nd] != '\0')
            return -1;
    }
    if (amount == 0)
        return -1;
    if (parse_period(slash + 1, &period) != 0 || period == 0)
        return -1;
    out->amount = amount;
    out->period_us = period;
    return 0;
}

uint64_t sl_rate_one_second(const struct sl_rate *r)
{
    uint64_t q = r->amount / r->period_us, rem = r->amount % r->period_us;
    /* rem < period_us <= 365d in us (~3.2e13), so rem * 1e6 fits in 64 bits;
     * q * 1e6 <= amount. */
    uint64_t b = q * S_US + (rem * S_US + r->period_us - 1) / r->period_us;
    return b ? b : 1;
}

int sl_parse_override(const char *s, size_t len, int bytes, struct sl_rate *rate,
                      uint64_t *burst, const char **why)
{
    char text[128], *words[3];
    int n = 0;
    *why = "empty";
    if (len >= sizeof(text)) {
        *why = "longer than 127 bytes";
        return -1;
    }
    memcpy(text, s, len);
    text[len] = '\0';
    if (memchr(text, '\0', len) != NULL) {
        *why = "a NUL byte";
        return -1;
    }
    for (char *p = text, *save = NULL; n < 3 && (p = strtok_r(p, " \t", &save)) != NULL; p = NULL)
        words[n++] = p;
    if (n == 0)
        return -1;
    if (n > 2) {
        *why = "expected RATE [BURST]";
        return -1;
    }
    if (sl_parse_rate(words[0], bytes, rate) != 0) {
        *why = bytes ? "RATE is not a rate like 10MiB/s or 500kb/m" : "RATE is not a rate like 500/s";
        return -1;
    }
    if (rate->amount > MAX_AMOUNT || rate->period_us > MAX_PERIOD) {
        *why = "RATE out of range";
        return -1;
    }
    if (n == 1) {
        *burst = sl_rate_one_second(rate);
        return 0;
    }
    if (sl_parse_size(words[1], burst) != 0 || *burst == 0 || *burst > MAX_AMOUNT ||
        (!bytes && strspn(words[1], "0123456789") != strlen(words[1]))) {
        *why = "BURST is not a positive count (or size, for bytes)";
        return -1;
    }
    return 0;
}

static int parse_port(const char *s, in_port_t *port)
{
    uint64_t v;
    int nd = digits(s, &v);
    /* Five digits at most so "000000080" is not a port either. */
    if (nd <= 0 || nd > 5 || s[nd] != '\0' || v == 0 || v > 65535)
        return -1;
    *port = htons((uint16_t)v);
    return 0;
}

/* A DNS host name (RFC 1123): labels of letters, digits, '-' (and '_', which
 * service records and some clusters use), 1 to 63 bytes each, not starting or
 * ending with '-'. What inet_aton would read as a number ("10.1", "0x7f")
 * is not a name: getaddrinfo would turn it into an address nobody meant. */
static int is_host_name(const char *h)
{
    size_t len = strlen(h);
    struct in_addr ia;
    if (len == 0 || len > 253 || inet_aton(h, &ia) != 0)
        return 0;
    /* Nor is what ends in an all-digit label ("256.0.0.1"): no top-level
     * domain is one (RFC 3696, 2). */
    const char *last = strrchr(h, '.');
    last = last != NULL ? last + 1 : h;
    if (strspn(last, "0123456789") == strlen(last))
        return 0;
    for (const char *p = h; *p;) {
        size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_");
        if (n == 0 || n > 63 || p[0] == '-' || p[n - 1] == '-')
            return 0;
        p += n;
        if (*p == '.') {
            p++;
            if (*p == '\0')
                return 0; /* a trailing dot: not taken, so each name has one spelling */
        } else if (*p != '\0') {
            return 0;
        }
    }
    return 1;
}

int sl_parse_addr(const char *s, struct sl_addr *out)
{
    struct sl_addr a;
    memset(&a, 0, sizeof(a));
    size_t len = strlen(s);
    if (len == 0 || len >= sizeof(a.text))
        return -1;
    memcpy(a.text, s, len + 1);

    char host[sizeof(a.text)];
    const char *port;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (close == NULL || close[1] != ':')
            return -1;
        size_t hlen = (size_t)(close - s - 1);
        memcpy(host, s + 1, hlen);
        host[hlen] = '\0';
        port = close + 2;
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&a.ss;
        if (inet_pton(AF_INET6, host, &sin6->sin6_addr) != 1)
            return -1;
        if (parse_port(port, &sin6->sin6_port) != 0)
            return -1;
        a.port = ntohs(sin6->sin6_port);
        sin6->sin6_family = AF_INET6;
    } else {
        const char *colon = strrchr(s, ':');
        if (colon == NULL || colon == s)
            return -1;
        size_t hlen = (size_t)(colon - s);
        memcpy(host, s, hlen);
        host[hlen] = '\0';
        port = colon + 1;
        struct sockaddr_in *sin = (struct sockaddr_in *)&a.ss;
        if (parse_port(port, &sin->sin_port) != 0)
            return -1;
        a.port = ntohs(sin->sin_port);
        if (strcmp(host, "*") == 0)
            sin->sin_addr.s_addr = htonl(INADDR_ANY);
        /* inet_pton, not inet_aton: "10.1" and "0x7f.1" are not addresses here. */
        else if (inet_pton(AF_INET, host, &sin->sin_addr) == 1)
            ;
        else if (is_host_name(host)) {
            /* Resolved by the loader (conf/resolve.h): ss stays empty here. */
            memset(&a.ss, 0, sizeof(a.ss));
            a.named = 1;
            *out = a;
            return 0;
        } else
            return -1;
        sin->sin_family = AF_INET;
    }
    *out = a;
    return 0;
}

void sl_fmt_duration(uint64_t us, char *out, unsigned cap)
{
    if (cap == 0)
        return;
    if (us == 0) {
        snprintf(out, cap, "0s");
        return;
    }
    /* Largest unit that divides exactly; duration_units runs smallest first. */
    for (size_t i = sizeof(duration_units) / sizeof(duration_units[0]); i-- > 0;) {
        if (us % duration_units[i].mult == 0) {
            snprintf(out, cap, "%llu%s", (unsigned long long)(us / duration_units[i].mult),
                     duration_units[i].suffix);
            return;
        }
    }
}

void sl_fmt_size(uint64_t bytes, char *out, unsigned cap)
{
    /* How each unit is spelled on output: the forms the documentation uses. */
    static const struct unit shown[] = {
        { "TiB", 1ULL << 40 }, { "tb", 1000000000000ULL },
        { "GiB", 1ULL << 30 }, { "gb", 1000000000ULL },
        { "MiB", 1ULL << 20 }, { "mb", 1000000ULL },
        { "KiB", 1ULL << 10 }, { "kb", 1000ULL },
    };
    char best[32], cand[32];
    int bare = 1; /* best is still the plain number: a unit of equal length beats it */
    snprintf(best, sizeof(best), "%llu", (unsigned long long)bytes);
    for (size_t i = 0; bytes != 0 && i < sizeof(shown) / sizeof(shown[0]); i++) {
        if (bytes % shown[i].mult != 0)
            continue;
        snprintf(cand, sizeof(cand), "%llu%s", (unsigned long long)(bytes / shown[i].mult),
                 shown[i].suffix);
        if (strlen(cand) < strlen(best) + (size_t)bare) {
            memcpy(best, cand, sizeof(best));
            bare = 0;
        }
    }
    if (cap != 0)
        snprintf(out, cap, "%s", best);
}

void sl_fmt_rate(const struct sl_rate *r, int bytes, char *out, unsigned cap)
{
    char amount[32], period[32];
    if (bytes)
        sl_fmt_size(r->amount, amount, sizeof(amount));
    else
        snprintf(amount, sizeof(amount), "%llu", (unsigned long long)r->amount);
    sl_fmt_duration(r->period_us, period, sizeof(period));
    /* "1s" reads better as "/s"; "10s" and "100ms" keep their count. */
    const char *p = period;
    if (p[0] == '1' && !isdigit((unsigned char)p[1]))
        p++;
    if (cap != 0)
        snprintf(out, cap, "%s/%s", amount, p);
}

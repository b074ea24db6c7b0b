/*
 * PROXY protocol headers, versions 1 (text) and 2 (binary): see
 * net/proxyhdr.h.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "net/proxyhdr.h"

static const unsigned char v2_sig[12] = { '\r', '\n', '\r', '\n', 0, '\r', '\n', 'Q', 'U', 'I', 'T', '\n' };

/* A decimal port 0..65535 written without a leading zero (the spec's form). */
static int port_of(const char *s, size_t n, unsigned *port)
{
    if (n == 0 || n > 5 || (n > 1 && s[0] == '0'))
        return -1;
    unsigned v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    if (v > 65535)
        return -1;
    *port = v;
    return 0;
}

/* "PROXY TCP4 src dst sport dport" (no CRLF): fields split on single spaces. */
static int v1_line(const char *line, size_t len, struct sockaddr_storage *src, const char **why)
{
    const char *f[6];
    size_t fl[6];
    int nf = 0;
    size_t i = 0;
    while (i <= len && nf < 6) {
        size_t j = i;
        while (j < len && line[j] != ' ')
            j++;
        f[nf] = line + i;
        fl[nf++] = j - i;
        i = j + 1;
    }
    if (nf >= 2 && fl[1] == 7 && memcmp(f[1], "UNKNOWN", 7) == 0)
        return 1; /* whatever follows UNKNOWN is ignored, as the spec says */
    if (nf != 6 || i <= len) {
        *why = "v1: not six fields";
        return -1;
    }
    int fam;
    if (fl[1] == 4 && memcmp(f[1], "TCP4", 4) == 0)
        fam = AF_INET;
    else if (fl[1] == 4 && memcmp(f[1], "TCP6", 4) == 0)
        fam = AF_INET6;
    else {
        *why = "v1: unknown protocol";
        return -1;
    }
    char a[INET6_ADDRSTRLEN + 1], b[INET6_ADDRSTRLEN + 1];
    unsigned char bin[16];
    unsigned sport, dport;
    if (fl[2] >= sizeof(a) || fl[3] >= sizeof(b) || port_of(f[4], fl[4], &sport) < 0 ||
        port_of(f[5], fl[5], &dport) < 0) {
        *why = "v1: bad address or port";
        return -1;
    }
    memcpy(a, f[2], fl[2]);
    a[fl[2]] = '\0';
    memcpy(b, f[3], fl[3]);
    b[fl[3]] = '\0';
    if (inet_pton(fam, a, bin) != 1 || inet_pton(fam, b, bin) != 1) {
        *why = "v1: bad address";
        return -1;
    }
    memset(src, 0, sizeof(*src));
    if (fam == AF_INET) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)src;
        s4->sin_family = AF_INET;
        inet_pton(AF_INET, a, &s4->sin_addr);
        s4->sin_port = htons((uint16_t)sport);
    } else {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)src;
        s6->sin6_family = AF_INET6;
        inet_pton(AF_INET6, a, &s6->sin6_addr);
        s6->sin6_port = htons((uint16_t)sport);
    }
    return 1;
}

static int parse_v1(const unsigned char *p, size_t n, size_t *want, struct sockaddr_storage *src,
                    const char **why)
{
    static const char pre[] = "PROXY ";
    size_t k = n < 6 ? n : 6;
    if (memcmp(p, pre, k) != 0) {
        *why = "v1: no PROXY signature";
        return -1;
    }
    /* "PROXY UNKNOWN\r\n" (15) is the shortest; then one byte at a time
     * until the LF, so nothing past it is read. */
    if (n < 15) {
        *want = 15;
        return 0;
    }
    if (p[n - 1] != '\n') {
        if (memchr(p, '\n', n) != NULL || memchr(p, '\0', n) != NULL) {
            *why = "v1: bad byte in the line";
            return -1;
        }
        if (n >= SL_PP_V1_MAX) {
            *why = "v1: line too long";
            return -1;
        }
        *want = n + 1;
        return 0;
    }
    if (p[n - 2] != '\r' || memchr(p, '\n', n - 1) != NULL || memchr(p, '\r', n - 2) != NULL) {
        *why = "v1: line not ended by CRLF";
        return -1;
    }
    return v1_line((const char *)p, n - 2, src, why);
}

static int parse_v2(const unsigned char *p, size_t n, size_t *want, struct sockaddr_storage *src,
                    const char **why)
{
    size_t k = n < 12 ? n : 12;
    if (memcmp(p, v2_sig, k) != 0) {
        *why = "v2: no signature";
        return -1;
    }
    if (n < 16) {
        *want = 16;
        return 0;
    }
    if ((p[12] >> 4) != 2 || (p[12] & 0xf) > 1) {
        *why = "v2: bad version or command";
        return -1;
    }
    size_t len = (size_t)p[14] << 8 | p[15];
    if (len > SL_PP_V2_TLVS) {
        *why = "v2: header too long";
        return -1;
    }
    if (n < 16 + len) {
        *want = 16 + len;
        return 0;
    }
    if ((p[12] & 0xf) == 0)
        return 1; /* LOCAL: the balancer's own connection (health checks) */
    memset(src, 0, sizeof(*src));
    switch (p[13]) {
    case 0x11: /* TCP over IPv4 */
    case 0x12: /* UDP over IPv4 */
        if (len < 12)
            break;
        {
            struct sockaddr_in *s4 = (struct sockaddr_in *)src;
            s4->sin_family = AF_INET;
            memcpy(&s4->sin_addr, p + 16, 4);
            memcpy(&s4->sin_port, p + 24, 2);
        }
        return 1;
    case 0x21: /* TCP over IPv6 */
    case 0x22:
        if (len < 36)
            break;
        {
            struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)src;
            s6->sin6_family = AF_INET6;
            memcpy(&s6->sin6_addr, p + 16, 16);
            memcpy(&s6->sin6_port, p + 48, 2);
        }
        return 1;
    case 0x00: /* UNSPEC */
    case 0x31: /* unix sockets: no IP address to take */
    case 0x32:
        return 1;
    default:
        *why = "v2: unknown address family";
        return -1;
    }
    *why = "v2: addresses shorter than their family";
    return -1;
}

int sl_pp_parse(int version, const unsigned char *p, size_t n, size_t *want,
                struct sockaddr_storage *src, const char **why)
{
    src->ss_family = AF_UNSPEC;
    *why = "";
    return version == 1 ? parse_v1(p, n, want, src, why) : parse_v2(p, n, want, src, why);
}

/* An IPv4-mapped IPv6 address (a dual-stack socket's IPv4 peer) as the
 * IPv4 address it is, so both ends of a header have one family. */
static void unmap(struct sockaddr_storage *ss)
{
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
    if (ss->ss_family != AF_INET6 || !IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))
        return;
    struct sockaddr_in s4 = { .sin_family = AF_INET, .sin_port = s6->sin6_port };
    memcpy(&s4.sin_addr, &s6->sin6_addr.s6_addr[12], 4);
    memset(ss, 0, sizeof(*ss));
    memcpy(ss, &s4, sizeof(s4));
}

size_t sl_pp_write(int version, const struct sockaddr_storage *src_in,
                   const struct sockaddr_storage *dst_in, unsigned char *out, size_t cap)
{
    struct sockaddr_storage src = *src_in, dst = *dst_in;
    unmap(&src);
    unmap(&dst);
    int fam = src.ss_family == dst.ss_family &&
                      (src.ss_family == AF_INET || src.ss_family == AF_INET6)
                  ? src.ss_family
                  : AF_UNSPEC;
    const struct sockaddr_in *s4 = (const struct sockaddr_in *)&src, *d4 = (const void *)&dst;
    const struct sockaddr_in6 *s6 = (const void *)&src, *d6 = (const void *)&dst;
    if (version == 1) {
        if (fam == AF_UNSPEC) {
            int n = snprintf((char *)out, cap, "PROXY UNKNOWN\r\n");
            return n > 0 && (size_t)n < cap ? (size_t)n : 0;
        }
        char a[INET6_ADDRSTRLEN], b[INET6_ADDRSTRLEN];
        const void *sa = fam == AF_INET ? (const void *)&s4->sin_addr : (const void *)&s6->sin6_addr;
        const void *da = fam == AF_INET ? (const void *)&d4->sin_addr : (const void *)&d6->sin6_addr;
        inet_ntop(fam, sa, a, sizeof(a));
        inet_ntop(fam, da, b, sizeof(b));
        unsigned sp = ntohs(fam == AF_INET ? s4->sin_port : s6->sin6_port);
        unsigned dp = ntohs(fam == AF_INET ? d4->sin_port : d6->sin6_port);
        int n = snprintf((char *)out, cap, "PROXY %s %s %s %u %u\r\n",
                         fam == AF_INET ? "TCP4" : "TCP6", a, b, sp, dp);
        return n > 0 && (size_t)n < cap ? (size_t)n : 0;
    }
    size_t len = fam == AF_INET ? 12 : fam == AF_INET6 ? 36 : 0;
    if (cap < 16 + len)
        return 0;
    memcpy(out, v2_sig, 12);
    out[12] = 0x21; /* version 2, PROXY */
    out[13] = fam == AF_INET ? 0x11 : fam == AF_INET6 ? 0x21 : 0x00;
    out[14] = 0;
    out[15] = (unsigned char)len;
    if (fam == AF_INET) {
        memcpy(out + 16, &s4->sin_addr, 4);
        memcpy(out + 20, &d4->sin_addr, 4);
        memcpy(out + 24, &s4->sin_port, 2);
        memcpy(out + 26, &d4->sin_port, 2);
    } else if (fam == AF_INET6) {
        memcpy(out + 16, &s6->sin6_addr, 16);
        memcpy(out + 32, &d6->sin6_addr, 16);
        memcpy(out + 48, &s6->sin6_port, 2);
        memcpy(out + 50, &d6->sin6_port, 2);
    }
    return 16 + len;
}

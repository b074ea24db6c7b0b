/* sluice — libFuzzer target for the PROXY header parser (net/proxyhdr.c).
 *
 * Input: one byte picking the version (odd: 1, even: 2), one byte picking
 * how the bytes arrive (0: as few as the parser asks for, else in reads of
 * that many at most, never past what it asks for), then the bytes.
 *
 * Fed as net/sess_pp.c feeds it: the first read asks for 15 (v1) or 16
 * (v2) bytes, then each answer 0 says how far to read next. Checked: what
 * it asks for is always more than it has and never past SL_PP_MAX (the
 * buffer a session holds); an answer is the same when given the same bytes
 * again (it keeps no state); a whole header naming an IP address, written
 * back by sl_pp_write, parses to the same address (an IPv4-mapped IPv6
 * one comes back as IPv4).
 */
#include <assert.h>
#include <stdint.h>
#include <string.h>
#include <netinet/in.h>

#include "net/proxyhdr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An IPv4-mapped IPv6 address as the IPv4 address it holds (the writer
 * writes such a source as IPv4: the same client). */
static void unmap(const struct sockaddr_storage *in, struct sockaddr_storage *out)
{
    *out = *in;
    const struct sockaddr_in6 *x = (const void *)in;
    if (in->ss_family != AF_INET6 || !IN6_IS_ADDR_V4MAPPED(&x->sin6_addr))
        return;
    struct sockaddr_in *y = (void *)out;
    memset(out, 0, sizeof(*out));
    y->sin_family = AF_INET;
    y->sin_port = x->sin6_port;
    memcpy(&y->sin_addr, &x->sin6_addr.s6_addr[12], 4);
}

static int same_addr(const struct sockaddr_storage *a0, const struct sockaddr_storage *b0)
{
    struct sockaddr_storage sa, sb;
    unmap(a0, &sa);
    unmap(b0, &sb);
    const struct sockaddr_storage *a = &sa, *b = &sb;
    if (a->ss_family != b->ss_family)
        return 0;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
        return x->sin_port == y->sin_port &&
               memcmp(&x->sin_addr, &y->sin_addr, sizeof(x->sin_addr)) == 0;
    }
    if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
        return x->sin6_port == y->sin6_port &&
               memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    int version = (data[0] & 1) ? 1 : 2;
    size_t step = data[1];
    data += 2;
    size -= 2;
    static unsigned char buf[SL_PP_MAX];
    size_t want = version == 1 ? 15 : 16, n = 0;
    for (;;) {
        size_t take = want - n;
        if (step > 0 && take > step)
            take = step;
        if (n + take > size)
            return 0; /* the connection ends before the header does */
        memcpy(buf + n, data + n, take);
        n += take;
        if (n < want)
            continue; /* a short read: the parser is asked when it has all */
        size_t next = 0, again_next = 0;
        struct sockaddr_storage src, again_src;
        const char *why = NULL, *again_why = NULL;
        int rc = sl_pp_parse(version, buf, n, &next, &src, &why);
        int again = sl_pp_parse(version, buf, n, &again_next, &again_src, &again_why);
        assert(rc == again);
        if (rc < 0) {
            assert(why != NULL);
            return 0;
        }
        if (rc == 0) {
            assert(next > n && next <= SL_PP_MAX && next == again_next);
            want = next;
            continue;
        }
        assert(rc == 1 && same_addr(&src, &again_src));
        if (src.ss_family == AF_INET || src.ss_family == AF_INET6) {
            unsigned char out[232];
            size_t len = sl_pp_write(version, &src, &src, out, sizeof(out));
            assert(len > 0);
            size_t w2 = 0;
            struct sockaddr_storage back;
            const char *why2 = NULL;
            assert(sl_pp_parse(version, out, len, &w2, &back, &why2) == 1);
            assert(same_addr(&src, &back));
        }
        return 0;
    }
}

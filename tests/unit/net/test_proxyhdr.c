/* The PROXY header parser and writer (net/proxyhdr.c): every prefix of a
 * good header asks for more and never for less than it has, hostile bytes
 * are refused without reading past the bounds, and what sl_pp_write makes
 * sl_pp_parse reads back. Fixed seed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <cmocka.h>

#include "net/proxyhdr.h"

/* Feeds <p> the way the session reads: only up to what the parser wants. */
static int feed(int version, const unsigned char *p, size_t len, size_t *used,
                struct sockaddr_storage *src)
{
    size_t n = 0, want = 0;
    const char *why;
    for (;;) {
        int rc = sl_pp_parse(version, p, n, &want, src, &why);
        if (rc != 0) {
            *used = n;
            return rc;
        }
        assert_true(want > n);
        assert_true(want <= SL_PP_MAX);
        if (version == 1)
            assert_true(want <= SL_PP_V1_MAX);
        if (want > len)
            return 0; /* would wait for more */
        n = n == 0 ? want : n + 1 < want ? n + 1 : want; /* arrive in small steps */
    }
}

static void test_v1_good(void **state)
{
    (void)state;
    static const char line[] = "PROXY TCP4 203.0.113.7 10.0.0.1 40000 6379\r\nGET";
    struct sockaddr_storage src;
    size_t used = 0;
    assert_int_equal(feed(1, (const unsigned char *)line, sizeof(line) - 1, &used, &src), 1);
    assert_int_equal(used, sizeof(line) - 1 - 3); /* not a byte of "GET" */
    assert_int_equal(src.ss_family, AF_INET);
    const struct sockaddr_in *s4 = (const struct sockaddr_in *)&src;
    assert_int_equal(ntohs(s4->sin_port), 40000);
    assert_int_equal(ntohl(s4->sin_addr.s_addr), 0xcb007107u);
    static const char unk[] = "PROXY UNKNOWN\r\n";
    assert_int_equal(feed(1, (const unsigned char *)unk, sizeof(unk) - 1, &used, &src), 1);
    assert_int_equal(src.ss_family, AF_UNSPEC);
}

static void test_round_trip(void **state)
{
    (void)state;
    struct sockaddr_storage a = { 0 }, b = { 0 }, got;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&a, *b6 = (struct sockaddr_in6 *)&b;
    a6->sin6_family = b6->sin6_family = AF_INET6;
    inet_pton(AF_INET6, "2001:db8::5", &a6->sin6_addr);
    inet_pton(AF_INET6, "2001:db8::6", &b6->sin6_addr);
    a6->sin6_port = htons(1234);
    b6->sin6_port = htons(6379);
    for (int v = 1; v <= 2; v++) {
        unsigned char out[232];
        size_t n = sl_pp_write(v, &a, &b, out, sizeof(out)), used = 0;
        assert_true(n > 0);
        assert_int_equal(feed(v, out, n, &used, &got), 1);
        assert_int_equal(used, n);
        assert_int_equal(got.ss_family, AF_INET6);
        assert_memory_equal(&((struct sockaddr_in6 *)&got)->sin6_addr, &a6->sin6_addr, 16);
        assert_int_equal(ntohs(((struct sockaddr_in6 *)&got)->sin6_port), 1234);
    }
    /* an IPv4-mapped client is written as IPv4 */
    inet_pton(AF_INET6, "::ffff:192.0.2.9", &a6->sin6_addr);
    inet_pton(AF_INET6, "::ffff:10.0.0.1", &b6->sin6_addr);
    unsigned char out[232];
    size_t n = sl_pp_write(1, &a, &b, out, sizeof(out));
    assert_int_equal(n, strlen("PROXY TCP4 192.0.2.9 10.0.0.1 1234 6379\r\n"));
    assert_memory_equal(out, "PROXY TCP4 192.0.2.9 10.0.0.1 1234 6379\r\n", n);
}

/* Random bytes, and good headers with one byte changed: refused or asked
 * for more, never a read past what was given (run under the sanitizers by
 * make check). */
static void test_hostile(void **state)
{
    (void)state;
    srand(23);
    unsigned char buf[SL_PP_MAX];
    struct sockaddr_storage src;
    size_t used;
    for (int round = 0; round < 20000; round++) {
        int v = 1 + (round & 1);
        size_t len = (size_t)(rand() % 300);
        if (round % 3 == 0) {
            struct sockaddr_storage a = { 0 }, b = { 0 };
            struct sockaddr_in *a4 = (struct sockaddr_in *)&a, *b4 = (struct sockaddr_in *)&b;
            a4->sin_family = b4->sin_family = AF_INET;
            a4->sin_addr.s_addr = (in_addr_t)rand();
            a4->sin_port = (in_port_t)rand();
            len = sl_pp_write(v, &a, &b, buf, sizeof(buf));
            buf[rand() % len] ^= (unsigned char)(1 + rand() % 255);
        } else {
            for (size_t i = 0; i < len; i++)
                buf[i] = (unsigned char)rand();
            if (len >= 6 && v == 1)
                memcpy(buf, "PROXY ", 6);
        }
        int rc = feed(v, buf, len, &used, &src);
        assert_true(rc >= -1 && rc <= 1);
        if (rc == 1)
            assert_true(used <= len);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v1_good),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_hostile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

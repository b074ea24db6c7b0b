/* The pure parts of the Sentinel client: the address a sentinel gives and
 * the +switch-master message (src/store/sentinel.c). The client itself runs
 * against real sentinels in tests/integration/test_sentinel.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <string.h>

#include "core/resolve.h"
#include "store/sentinel.h"

static const char *fmt(const struct sockaddr_storage *ss)
{
    static char buf[64];
    return sl_resolve_fmt(ss, buf, sizeof(buf));
}

static int addr(const char *ip, const char *port, struct sockaddr_storage *out)
{
    return sl_sentinel_parse_addr(ip, strlen(ip), port, strlen(port), out);
}

static void test_parse_addr(void **state)
{
    (void)state;
    struct sockaddr_storage ss;
    assert_int_equal(addr("10.0.0.7", "6379", &ss), 0);
    assert_string_equal(fmt(&ss), "10.0.0.7:6379");
    assert_int_equal(addr("::1", "26379", &ss), 0);
    assert_string_equal(fmt(&ss), "[::1]:26379");
    assert_int_equal(addr("127.0.0.1", "65535", &ss), 0);
    assert_int_equal(addr("127.0.0.1", "1", &ss), 0);

    /* What is not a numeric address and a port in range is refused, and
     * <out> stays as it was. */
    struct sockaddr_storage before = ss;
    const char *bad_ip[] = { "", "localhost", "redis.svc", "10.0.0", "1.2.3.4 ", "::g",
                             "127.0.0.1:6379" };
    for (size_t i = 0; i < sizeof(bad_ip) / sizeof(bad_ip[0]); i++)
        assert_int_equal(addr(bad_ip[i], "6379", &ss), -1);
    const char *bad_port[] = { "", "0", "65536", "99999", "123456", "-1", "+1", "63 79", "6379x" };
    for (size_t i = 0; i < sizeof(bad_port) / sizeof(bad_port[0]); i++)
        assert_int_equal(addr("127.0.0.1", bad_port[i], &ss), -1);
    assert_memory_equal(&ss, &before, sizeof(ss));

    /* Not NUL-terminated: only <len> bytes are read. */
    assert_int_equal(sl_sentinel_parse_addr("10.1.2.3XYZ", 8, "80XY", 2, &ss), 0);
    assert_string_equal(fmt(&ss), "10.1.2.3:80");
    /* An ip longer than any address is refused before it is copied. */
    char longip[200];
    memset(longip, '1', sizeof(longip));
    assert_int_equal(sl_sentinel_parse_addr(longip, sizeof(longip), "80", 2, &ss), -1);
}

static int sw(const char *msg, const char *name, struct sockaddr_storage *out)
{
    return sl_sentinel_parse_switch(msg, strlen(msg), name, out, NULL);
}

static void test_parse_switch(void **state)
{
    (void)state;
    struct sockaddr_storage ss;
    assert_int_equal(sw("mymaster 10.0.0.1 6379 10.0.0.2 6380", "mymaster", &ss), 1);
    assert_string_equal(fmt(&ss), "10.0.0.2:6380");
    assert_int_equal(sw("mymaster ::1 6379 ::2 6390", "mymaster", &ss), 1);
    assert_string_equal(fmt(&ss), "[::2]:6390");

    /* Another master's switch: not ours (a prefix is not a match either). */
    assert_int_equal(sw("other 10.0.0.1 6379 10.0.0.3 6380", "mymaster", &ss), 0);
    assert_int_equal(sw("mymaster2 10.0.0.1 6379 10.0.0.3 6380", "mymaster", &ss), 0);
    assert_int_equal(sw("my 10.0.0.1 6379 10.0.0.3 6380", "mymaster", &ss), 0);
    assert_string_equal(fmt(&ss), "[::2]:6390"); /* untouched */

    const char *bad[] = {
        "",
        "mymaster",
        "mymaster 10.0.0.1 6379 10.0.0.2",          /* four words */
        "mymaster 10.0.0.1 6379 10.0.0.2 6380 x",   /* six */
        "mymaster 10.0.0.1 6379 10.0.0.2 6380 ",    /* trailing space */
        " mymaster 10.0.0.1 6379 10.0.0.2 6380",    /* leading space */
        "mymaster  10.0.0.1 6379 10.0.0.2 6380",    /* two spaces */
        "mymaster 10.0.0.1 6379 host.example 6380", /* a host name */
        "mymaster 10.0.0.1 6379 10.0.0.2 0",        /* port 0 */
        "mymaster 10.0.0.1 6379 10.0.0.2 70000",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(sw(bad[i], "mymaster", &ss), -1);
    /* The old address is not checked: only the new one is used. */
    assert_int_equal(sw("mymaster old-host 6379 10.0.0.9 6379", "mymaster", &ss), 1);
    assert_string_equal(fmt(&ss), "10.0.0.9:6379");

    /* ... but given when asked for, when it is numeric. */
    struct sockaddr_storage old;
    const char *m = "mymaster 10.0.0.1 6379 10.0.0.2 6380";
    assert_int_equal(sl_sentinel_parse_switch(m, strlen(m), "mymaster", &ss, &old), 1);
    assert_string_equal(fmt(&old), "10.0.0.1:6379");
    m = "mymaster old-host 6379 10.0.0.2 6380";
    assert_int_equal(sl_sentinel_parse_switch(m, strlen(m), "mymaster", &ss, &old), 1);
    assert_int_equal(old.ss_family, 0);
}

static void test_stale(void **state)
{
    (void)state;
    struct sockaddr_storage old, new_, none;
    memset(&none, 0, sizeof(none));
    assert_int_equal(addr("10.0.0.1", "6379", &old), 0);
    assert_int_equal(addr("10.0.0.2", "6379", &new_), 0);
    uint64_t at = 50000;
    /* The old master named within the hold: stale; after it: believed. */
    assert_int_equal(sl_sentinel_stale(&old, &old, at, at), 1);
    assert_int_equal(sl_sentinel_stale(&old, &old, at, at + SL_SENTINEL_HOLD_MS - 1), 1);
    assert_int_equal(sl_sentinel_stale(&old, &old, at, at + SL_SENTINEL_HOLD_MS), 0);
    /* Any other address, or no switch heard: never stale. */
    assert_int_equal(sl_sentinel_stale(&new_, &old, at, at), 0);
    assert_int_equal(sl_sentinel_stale(&old, &none, 0, 0), 0);
    /* Same host, another port: another address. */
    struct sockaddr_storage other_port;
    assert_int_equal(addr("10.0.0.1", "6380", &other_port), 0);
    assert_int_equal(sl_sentinel_stale(&other_port, &old, at, at), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_addr),
        cmocka_unit_test(test_parse_switch),
        cmocka_unit_test(test_stale),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Redis 7's ACL categories: lookups by name, and the categories of
 * requests as the real framer captures them (subcommands, odd bytes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "proto/resp.h"
#include "proto/resp_acl.h"

static uint32_t bit(const char *name)
{
    int b = sl_resp_acl_category(name, strlen(name));
    assert_true(b >= 0);
    return 1u << b;
}

/* The categories of the request in the raw bytes <wire>. */
static uint32_t cats_of(const char *wire, size_t len)
{
    struct sl_resp fr;
    struct sl_resp_req *r;
    assert_int_equal(sl_resp_init(&fr, 1 << 20), 0);
    assert_int_equal(sl_resp_feed(&fr, wire, len), 0);
    assert_int_equal(sl_resp_next(&fr, &r), 1);
    uint32_t c = sl_resp_acl_of(r);
    sl_resp_free(&fr);
    return c;
}

static uint32_t cats_inline(const char *line)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s\r\n", line);
    return cats_of(buf, strlen(buf));
}

static void test_table_and_names(void **state)
{
    (void)state;
    assert_int_equal(sl_resp_acl_selftest(), 0);
    assert_int_equal(sl_resp_acl_category("write", 5), 2);
    assert_int_equal(sl_resp_acl_category("WRITE", 5), 2);
    assert_int_equal(sl_resp_acl_category("writes", 5), 2); /* by length */
    assert_int_equal(sl_resp_acl_category("writes", 6), -1);
    assert_int_equal(sl_resp_acl_category("all", 3), -1);
    assert_int_equal(sl_resp_acl_category("", 0), -1);
    assert_string_equal(sl_resp_acl_category_name(0), "keyspace");
    assert_string_equal(sl_resp_acl_category_name(SL_RESP_ACL_CATEGORIES - 1), "scripting");
    assert_null(sl_resp_acl_category_name(SL_RESP_ACL_CATEGORIES));
    assert_null(sl_resp_acl_category_name(-1));
    const char *cmd, *sub;
    uint32_t c;
    size_t n = 0, nsub = 0;
    for (size_t i = 0; sl_resp_acl_entry(i, &cmd, &sub, &c) == 0; i++) {
        n++;
        nsub += sub != NULL;
        assert_true(c != 0);
    }
    assert_int_equal(n - nsub, 241); /* Redis 7.0's 240 and WAITAOF */
    assert_int_equal(nsub, 126);
}

static void test_commands(void **state)
{
    (void)state;
    uint32_t w = bit("write"), r = bit("read"), fast = bit("fast"), slow = bit("slow");
    assert_int_equal(cats_inline("INCRBY k 1"), w | bit("string") | fast);
    assert_int_equal(cats_inline("incrby k 1"), w | bit("string") | fast);
    assert_int_equal(cats_inline("GET k"), r | bit("string") | fast);
    assert_int_equal(cats_inline("BLPOP l 0"), w | bit("list") | slow | bit("blocking"));
    assert_int_equal(cats_inline("EVAL s 0"), slow | bit("scripting"));
    assert_int_equal(cats_inline("MULTI"), fast | bit("transaction"));
    assert_int_equal(cats_inline("FLUSHALL"), w | bit("keyspace") | slow | bit("dangerous"));
    assert_int_equal(cats_inline("RESTORE-ASKING k 0 x"),
                     w | bit("keyspace") | slow | bit("dangerous"));
    assert_int_equal(cats_inline("WAITAOF 1 0 0"), slow | bit("blocking") | bit("connection"));
    /* not Redis 7's: in no category */
    assert_int_equal(cats_inline("MY.MODULECMD x"), 0);
    assert_int_equal(cats_inline("GETX k"), 0);
    static const char get_nul[] = "*2\r\n$4\r\nGET\0\r\n$1\r\nk\r\n";
    assert_int_equal(cats_of(get_nul, sizeof(get_nul) - 1), 0);
    static const char get_k[] = "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
    assert_int_equal(cats_of(get_k, sizeof(get_k) - 1), r | bit("string") | fast);
}

/* A container's subcommand decides; without one (or with one Redis does
 * not have), the container's own categories. */
static void test_subcommands(void **state)
{
    (void)state;
    uint32_t admin = bit("admin"), slow = bit("slow"), dang = bit("dangerous");
    uint32_t conn = bit("connection");
    assert_int_equal(cats_inline("CONFIG SET maxmemory 1"), admin | slow | dang);
    assert_int_equal(cats_inline("config get maxmemory"), admin | slow | dang);
    assert_int_equal(cats_inline("CONFIG HELP"), slow);
    assert_int_equal(cats_inline("CONFIG"), slow);
    assert_int_equal(cats_inline("CONFIG NOSUCH"), slow);
    assert_int_equal(cats_inline("CLIENT KILL ID 1"), admin | slow | dang | conn);
    assert_int_equal(cats_inline("CLIENT NO-EVICT on"), admin | slow | dang | conn);
    assert_int_equal(cats_inline("CLIENT SETNAME x"), slow | conn);
    assert_int_equal(cats_inline("OBJECT ENCODING k"), bit("keyspace") | bit("read") | slow);
    assert_int_equal(cats_inline("MEMORY USAGE k"), bit("read") | slow);
    assert_int_equal(cats_inline("CLUSTER COUNT-FAILURE-REPORTS n"), admin | slow | dang);
    /* a subcommand longer than the capture is not compared on its cut bytes */
    char big[200];
    snprintf(big, sizeof(big), "CONFIG SET%0100d x", 0);
    assert_int_equal(cats_inline(big), slow);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_and_names),
        cmocka_unit_test(test_commands),
        cmocka_unit_test(test_subcommands),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

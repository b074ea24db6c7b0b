/* sluice integration tests — the ACL category table against Redis itself.
 *
 * src/proto/resp_acl.c holds Redis 7's command categories as a table. Here
 * the installed redis-server is asked `ACL CAT <category>` for each of
 * them, and every command and subcommand it names must have that bit in
 * the table, and every table entry with the bit must be named: the table
 * holds facts, not guesses. Commands the server does not have (WAITAOF on
 * 7.0) are left out of the comparison. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "integration/harness.h"
#include "proto/resp_acl.h"

static struct th_proc redis_p;

static int group_setup(void **state)
{
    (void)state;
    return th_redis_start(&redis_p, NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    th_stop(&redis_p);
    return 0;
}

/* "config|set" for an entry, lower case as Redis names it. */
static void entry_name(const char *cmd, const char *sub, char *out, size_t cap)
{
    snprintf(out, cap, sub ? "%s|%s" : "%s", cmd, sub);
    for (char *p = out; *p; p++)
        if (*p >= 'A' && *p <= 'Z')
            *p = (char)(*p + 32);
}

static int in_reply(const redisReply *r, const char *name)
{
    for (size_t i = 0; i < r->elements; i++)
        if (strcasecmp(r->element[i]->str, name) == 0)
            return 1;
    return 0;
}

static void test_table_matches_acl_cat(void **state)
{
    (void)state;
    assert_int_equal(sl_resp_acl_selftest(), 0);
    redisContext *c = redisConnect("127.0.0.1", redis_p.port);
    assert_non_null(c);
    assert_int_equal(c->err, 0);

    /* The categories are Redis's, in its order. */
    redisReply *cats = redisCommand(c, "ACL CAT");
    assert_non_null(cats);
    assert_int_equal(cats->type, REDIS_REPLY_ARRAY);
    assert_int_equal(cats->elements, SL_RESP_ACL_CATEGORIES);
    for (int b = 0; b < SL_RESP_ACL_CATEGORIES; b++)
        assert_string_equal(cats->element[b]->str, sl_resp_acl_category_name(b));
    freeReplyObject(cats);

    /* Which table entries this server has (COMMAND INFO name: nil if not). */
    int checked = 0, mismatches = 0;
    for (int b = 0; b < SL_RESP_ACL_CATEGORIES; b++) {
        redisReply *r = redisCommand(c, "ACL CAT %s", sl_resp_acl_category_name(b));
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        const char *cmd, *sub;
        uint32_t bits;
        size_t named = 0;
        for (size_t i = 0; sl_resp_acl_entry(i, &cmd, &sub, &bits) == 0; i++) {
            char name[64];
            entry_name(cmd, sub, name, sizeof(name));
            if (strcmp(name, "waitaof") == 0)
                continue; /* Redis 7.2: not on this server */
            int want = in_reply(r, name), have = (bits >> b) & 1;
            named += (size_t)want;
            checked++;
            if (want != have) {
                print_error("@%s: %s is %s Redis's list but %s the table\n",
                            sl_resp_acl_category_name(b), name, want ? "in" : "not in",
                            have ? "in" : "not in");
                mismatches++;
            }
        }
        /* ... and Redis names nothing the table lacks */
        if (named != r->elements) {
            print_error("@%s: Redis names %zu commands, the table has %zu of them\n",
                        sl_resp_acl_category_name(b), r->elements, named);
            mismatches++;
        }
        freeReplyObject(r);
    }
    assert_int_equal(mismatches, 0);
    assert_true(checked > 21 * 300);
    redisFree(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_matches_acl_cat),
    };
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

/* sluice integration tests — the pooled listener's command classes
 * (src/proto/resp_cmd.c) against the command table of the redis-server on
 * this machine: every command and subcommand it lists has a class of its
 * own (none falls to "unknown"), so a command a newer Redis adds is
 * noticed here; and Redis's own categories agree with the classes (every
 * @blocking command pins until answered, no @transaction or @connection
 * command is pooled unless reviewed below, every subscribe pins). */
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
#include "proto/resp_cmd.h"

static struct th_proc redis_p;
static redisContext *rc;

/* The request "<name> <words...>" for a COMMAND LIST entry such as
 * "client|tracking" (a container and its subcommand are two words). */
static struct sl_resp_req req_of(const char *entry, const char *const *extra)
{
    struct sl_resp_req r;
    memset(&r, 0, sizeof(r));
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", entry);
    char *save = NULL;
    const char *words[16];
    size_t n = 0;
    for (char *w = strtok_r(buf, "|", &save); w != NULL && n < 8; w = strtok_r(NULL, "|", &save))
        words[n++] = w;
    for (size_t i = 0; extra != NULL && extra[i] != NULL && n < 16; i++)
        words[n++] = extra[i];
    for (size_t i = 0; i < n; i++) {
        if (r.argc < SL_RESP_CAPTURE_ARGS) {
            size_t len = strlen(words[i]);
            assert_true(len <= SL_RESP_CAPTURE_LEN);
            r.arglen[r.argc] = (uint32_t)len;
            memcpy(r.argv[r.argc], words[i], len + 1);
            r.ncap++;
        }
        r.argc++;
    }
    return r;
}

/* The names Redis answers to <cmd> (an array of strings); frees with
 * freeReplyObject. */
static redisReply *names(const char *cmd)
{
    redisReply *rr = redisCommand(rc, cmd);
    assert_non_null(rr);
    assert_int_equal(rr->type, REDIS_REPLY_ARRAY);
    return rr;
}

static void test_every_command_has_a_class(void **state)
{
    (void)state;
    redisReply *rr = names("COMMAND LIST");
    assert_true(rr->elements > 200);
    int unknown = 0;
    for (size_t i = 0; i < rr->elements; i++) {
        struct sl_resp_req r = req_of(rr->element[i]->str, NULL);
        struct sl_rcmd_info o;
        int c = sl_rcmd_class(&r, &o);
        if (c == SL_RCMD_PIN && (o.pin & SL_PIN_UNKNOWN)) {
            fprintf(stderr, "test_resp_cmd: \"%s\" has no class in src/proto/resp_cmd.c\n",
                    rr->element[i]->str);
            unknown++;
        }
    }
    freeReplyObject(rr);
    assert_int_equal(unknown, 0);
}

static void test_blocking_commands_pin(void **state)
{
    (void)state;
    redisReply *rr = names("ACL CAT blocking");
    assert_true(rr->elements >= 10);
    static const char *const with_block[] = { "BLOCK", "0", "STREAMS", "s", "$", NULL };
    static const char *const with_group[] = { "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s",
                                              ">", NULL };
    for (size_t i = 0; i < rr->elements; i++) {
        const char *name = rr->element[i]->str;
        const char *const *extra = strcasecmp(name, "xread") == 0        ? with_block
                                   : strcasecmp(name, "xreadgroup") == 0 ? with_group
                                                                          : NULL;
        struct sl_resp_req r = req_of(name, extra);
        struct sl_rcmd_info o;
        if (sl_rcmd_class(&r, &o) != SL_RCMD_PIN || !(o.pin & SL_PIN_BLOCK)) {
            fprintf(stderr, "test_resp_cmd: @blocking \"%s\" does not pin until answered\n",
                    name);
            fail();
        }
    }
    freeReplyObject(rr);
}

/* Commands of the categories about the connection itself: pooled only
 * when reviewed as stateless (or as only ending a pin). */
static void test_connection_commands_reviewed(void **state)
{
    (void)state;
    static const char *const stateless[] = {
        "client|caching", "client|getredir", "client|help", "client|pause",
        "client|trackinginfo", "client|unpause", "command", "command|count", "command|docs",
        "command|getkeys", "command|getkeysandflags", "command|help", "command|info",
        "command|list", "echo", "ping", "publish", "spublish", "pubsub|channels",
        "pubsub|numpat", "pubsub|numsub", "pubsub|shardchannels", "pubsub|shardnumsub",
    };
    static const char *const cats[] = { "ACL CAT connection", "ACL CAT transaction",
                                        "ACL CAT pubsub" };
    for (size_t c = 0; c < sizeof(cats) / sizeof(cats[0]); c++) {
        redisReply *rr = names(cats[c]);
        for (size_t i = 0; i < rr->elements; i++) {
            const char *name = rr->element[i]->str;
            struct sl_resp_req r = req_of(name, NULL);
            struct sl_rcmd_info o;
            if (sl_rcmd_class(&r, &o) != SL_RCMD_POOL || o.ends != 0)
                continue;
            size_t k = 0;
            while (k < sizeof(stateless) / sizeof(stateless[0]) &&
                   strcasecmp(stateless[k], name) != 0)
                k++;
            if (k == sizeof(stateless) / sizeof(stateless[0])) {
                fprintf(stderr, "test_resp_cmd: %s: \"%s\" is pooled but not reviewed\n",
                        cats[c], name);
                fail();
            }
        }
        freeReplyObject(rr);
    }
    /* and the subscribes pin */
    static const char *const subs[] = { "subscribe", "psubscribe", "ssubscribe" };
    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
        static const char *const ch[] = { "c", NULL };
        struct sl_resp_req r = req_of(subs[i], ch);
        struct sl_rcmd_info o;
        assert_int_equal(sl_rcmd_class(&r, &o), SL_RCMD_PIN);
        assert_int_equal(o.pin, SL_PIN_SUB);
    }
}

/* What Redis answers on the connection-state commands the classes rely on:
 * a refused SELECT, HELLO or READONLY leaves the connection as it was (the
 * pin tracker drops a pin whose request failed). */
static void test_refusals_change_nothing(void **state)
{
    (void)state;
    redisReply *rr = redisCommand(rc, "SELECT 1");
    assert_int_equal(rr->type, REDIS_REPLY_STATUS);
    freeReplyObject(rr);
    static const char *const refused[] = { "SELECT x", "SELECT 01", "SELECT -1", "SELECT +2",
                                           "HELLO 4", "HELLO 3 SETNAME", "READONLY" };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        rr = redisCommand(rc, refused[i]);
        assert_non_null(rr);
        assert_int_equal(rr->type, REDIS_REPLY_ERROR);
        freeReplyObject(rr);
    }
    rr = redisCommand(rc, "CLIENT INFO");
    assert_non_null(rr);
    assert_non_null(strstr(rr->str, " db=1 "));
    assert_non_null(strstr(rr->str, " resp=2"));
    assert_non_null(strstr(rr->str, " flags=N "));
    freeReplyObject(rr);
    rr = redisCommand(rc, "RESET");
    freeReplyObject(rr);
}

/* The exception: HELLO authenticates before it checks SETNAME's name, so
 * its error may leave the connection with a new user (SL_PIN_STICKY). */
static void test_hello_refused_name_after_auth(void **state)
{
    (void)state;
    redisReply *rr = redisCommand(rc, "ACL SETUSER pooluser on >pw ~* +@all");
    assert_int_equal(rr->type, REDIS_REPLY_STATUS);
    freeReplyObject(rr);
    redisContext *c = redisConnect("127.0.0.1", redis_p.port);
    assert_true(c != NULL && c->err == 0);
    rr = redisCommand(c, "HELLO 3 AUTH pooluser pw SETNAME %s", "a b");
    assert_int_equal(rr->type, REDIS_REPLY_ERROR);
    freeReplyObject(rr);
    rr = redisCommand(c, "ACL WHOAMI");
    assert_string_equal(rr->str, "pooluser");
    freeReplyObject(rr);
    redisFree(c);
    struct sl_resp_req r = req_of("hello|3|auth|pooluser|pw|setname|a b", NULL);
    struct sl_rcmd_info o;
    assert_int_equal(sl_rcmd_class(&r, &o), SL_RCMD_PIN);
    assert_int_equal(o.pin, SL_PIN_STICKY);
}

static int group_setup(void **state)
{
    (void)state;
    if (th_redis_start(&redis_p, NULL) < 0)
        return -1;
    rc = redisConnect("127.0.0.1", redis_p.port);
    return rc != NULL && rc->err == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    if (rc != NULL)
        redisFree(rc);
    th_stop(&redis_p);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_command_has_a_class),
        cmocka_unit_test(test_blocking_commands_pin),
        cmocka_unit_test(test_connection_commands_reviewed),
        cmocka_unit_test(test_refusals_change_nothing),
        cmocka_unit_test(test_hello_refused_name_after_auth),
    };
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

/* sluice integration tests — the start of a RESP connection: the commands
 * client libraries send as they connect are not charged to requests limits
 * while the connection sets itself up (at most setup_commands of them), so
 * a client whose identity is throttled can still connect (and QUIT: its
 * +OK, then the close).
 *
 * One redis-server and one sluice are shared:
 *   t  identity = client_name client_ip, every command limited to 1 a day
 *      (burst 1) per identity, and ROLE by name to 1 a day too
 *   z  as t with identity = client_ip and setup_commands = 0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "integration/harness.h"

static struct th_proc redis_p, sluice_p;
static int tport, zport;

/* ---- the group ------------------------------------------------------------ */

static int group_setup(void **state)
{
    (void)state;
    if (th_redis_start(&redis_p, NULL) < 0)
        return -1;
    tport = th_free_port();
    zport = th_free_port();
    char ini[2048];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin =\nshutdown_grace = 2s\n[store]\nurl = local\n"
             "[listener t]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "identity = client_name client_ip\n"
             "[listener z]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "setup_commands = 0\n"
             "[limit lt]\nlistener = t\nrate = 1/d\nburst = 1\n"
             "[limit lz]\nlistener = z\nrate = 1/d\nburst = 1\n"
             "[limit role]\nlistener = t\nrate = 1/d\nburst = 1\ncommands = ROLE\n",
             tport, redis_p.port, zport, redis_p.port);
    if (th_sluice_start(&sluice_p, ini, zport) < 0) {
        th_stop(&redis_p);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    int st = th_stop(&sluice_p);
    th_stop(&redis_p);
    th_kill_all();
    if (st != 0) {
        fprintf(stderr, "sluice did not exit cleanly (status %d)\n", st);
        return -1;
    }
    return 0;
}

static int check_alive(void **state)
{
    (void)state;
    return th_alive_or_report(&sluice_p);
}

/* The next reply on <c>, which must not be an error. */
static void reply_ok(struct th_conn *c, const char *what)
{
    char *r = th_conn_reply(c, TH_MS);
    if (r == NULL || r[0] == '-' || r[0] == '!') {
        fprintf(stderr, "%s: got %s\n", what, r ? r : "(nothing)");
        fail();
    }
    free(r);
}

/* The next reply on <c>, which must come from Redis (an error is fine:
 * Redis before 7.2 has no CLIENT SETINFO, and libraries ignore that). */
static void reply_answered(struct th_conn *c, const char *what)
{
    char *r = th_conn_reply(c, TH_MS);
    if (r == NULL || strncmp(r, "-THROTTLED", 10) == 0) {
        fprintf(stderr, "%s: got %s\n", what, r ? r : "(nothing)");
        fail();
    }
    free(r);
}

/* The next reply on <c>, which must be sluice's refusal. */
static void reply_throttled(struct th_conn *c, const char *what)
{
    char *r = th_conn_reply(c, TH_MS);
    if (r == NULL || strncmp(r, "-THROTTLED ", 11) != 0) {
        fprintf(stderr, "%s: want -THROTTLED, got %s\n", what, r ? r : "(nothing)");
        fail();
    }
    free(r);
}

/* Spends the day's one request of the identity <name> on listener <port>
 * (client_name identity when <name> is set, else the client's address):
 * GETs until one is refused. */
static void exhaust(int port, const char *name)
{
    struct th_conn c;
    assert_int_equal(th_conn_open(&c, port), 0);
    if (name != NULL) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "CLIENT SETNAME %s\r\n", name);
        assert_int_equal(th_conn_send(&c, cmd), 0);
        reply_ok(&c, "CLIENT SETNAME");
    }
    int refused = 0;
    for (int i = 0; i < 3 && !refused; i++) {
        assert_int_equal(th_conn_send(&c, "GET setup:k\r\n"), 0);
        char *r = th_conn_reply(&c, TH_MS);
        assert_non_null(r);
        refused = strncmp(r, "-THROTTLED ", 11) == 0;
        free(r);
    }
    assert_true(refused);
    th_conn_close(&c);
}

/* ---- QUIT ------------------------------------------------------------------- */

/* A client over its limit can still QUIT, and is closed with the +OK. */
static void test_quit_when_throttled(void **state)
{
    (void)state;
    exhaust(tport, "setup-quit");
    struct th_conn c;
    assert_int_equal(th_conn_open(&c, tport), 0);
    assert_int_equal(th_conn_send(&c, "CLIENT SETNAME setup-quit\r\nGET setup:k\r\nQUIT\r\nPING\r\n"),
                     0);
    reply_ok(&c, "SETNAME");
    reply_throttled(&c, "GET");
    char *r = th_conn_reply(&c, TH_MS);
    assert_non_null(r);
    assert_string_equal(r, "+OK\r\n");
    free(r);
    assert_int_equal(c.len, 0);
    assert_true(th_wait_eof(c.fd, TH_MS));
    th_conn_close(&c);
}

/* ---- connection set-up ------------------------------------------------------ */

/* What client libraries send on connect, from a client whose identity is
 * over its limit: all answered by Redis; its first real command is
 * refused, and so is INFO once the set-up is over. */
static void test_setup_when_throttled(void **state)
{
    (void)state;
    exhaust(tport, "setup-a");
    struct th_conn c;
    assert_int_equal(th_conn_open(&c, tport), 0);
    static const char *const setup[] = {
        "HELLO 3\r\n",                          /* redis-py 5 protocol=3, go-redis, lettuce */
        "CLIENT SETNAME setup-a\r\n",
        "CLIENT SETINFO LIB-NAME redis-py\r\n", /* redis-py, go-redis, jedis, lettuce */
        "CLIENT SETINFO LIB-VER 5.0.0\r\n",
        "SELECT 0\r\n",
        "INFO\r\n",                             /* ioredis' ready check */
        "COMMAND DOCS GET\r\n",                 /* redis-cli */
        "PING\r\n",
    };
    for (size_t i = 0; i < sizeof(setup) / sizeof(setup[0]); i++) {
        assert_int_equal(th_conn_send(&c, setup[i]), 0);
        reply_answered(&c, setup[i]);
    }
    assert_int_equal(th_conn_send(&c, "GET setup:k\r\n"), 0);
    reply_throttled(&c, "GET after the set-up");
    assert_int_equal(th_conn_send(&c, "INFO\r\n"), 0);
    reply_throttled(&c, "INFO after the set-up");
    th_conn_close(&c);

    /* Pipelined in one write, as go-redis and redis-py do. */
    assert_int_equal(th_conn_open(&c, tport), 0);
    assert_int_equal(th_conn_send(&c, "CLIENT SETNAME setup-a\r\nSELECT 0\r\nINFO server\r\n"
                                      "PING\r\nGET setup:k\r\nPING\r\n"),
                     0);
    reply_ok(&c, "SETNAME");
    reply_ok(&c, "SELECT");
    reply_ok(&c, "INFO");
    reply_ok(&c, "PING");
    reply_throttled(&c, "GET");
    reply_throttled(&c, "PING after GET");
    th_conn_close(&c);
}

/* At most setup_commands (16) go uncharged: the 17th is charged. */
static void test_setup_is_bounded(void **state)
{
    (void)state;
    exhaust(tport, "setup-b");
    struct th_conn c;
    assert_int_equal(th_conn_open(&c, tport), 0);
    assert_int_equal(th_conn_send(&c, "CLIENT SETNAME setup-b\r\n"), 0);
    reply_ok(&c, "SETNAME");
    /* never-limited commands neither use the set-up up nor end it */
    assert_int_equal(th_conn_send(&c, "MULTI\r\nDISCARD\r\nCLIENT REPLY ON\r\n"), 0);
    for (int i = 0; i < 3; i++)
        reply_ok(&c, "never limited");
    for (int i = 2; i <= 16; i++) {
        assert_int_equal(th_conn_send(&c, "PING\r\n"), 0);
        reply_ok(&c, "set-up PING");
    }
    assert_int_equal(th_conn_send(&c, "PING\r\n"), 0);
    reply_throttled(&c, "the 17th set-up command");
    th_conn_close(&c);
}

/* A limit that names a set-up command counts it during the set-up too:
 * naming it says it is meant. */
static void test_setup_named_limit(void **state)
{
    (void)state;
    struct th_conn c;
    assert_int_equal(th_conn_open(&c, tport), 0);
    assert_int_equal(th_conn_send(&c, "CLIENT SETNAME setup-n\r\nROLE\r\nROLE\r\nPING\r\n"), 0);
    reply_ok(&c, "SETNAME");
    reply_ok(&c, "the first ROLE (the limit naming it has one token)");
    reply_throttled(&c, "the second ROLE, in set-up");
    reply_ok(&c, "PING (set-up, no limit names it)");
    th_conn_close(&c);
}

/* setup_commands = 0: every command is charged from the first. */
static void test_setup_off(void **state)
{
    (void)state;
    exhaust(zport, NULL);
    struct th_conn c;
    assert_int_equal(th_conn_open(&c, zport), 0);
    assert_int_equal(th_conn_send(&c, "INFO\r\n"), 0);
    reply_throttled(&c, "INFO with setup_commands = 0");
    assert_int_equal(th_conn_send(&c, "HELLO 3\r\n"), 0);
    reply_ok(&c, "HELLO (never limited)");
    th_conn_close(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_quit_when_throttled, check_alive),
        cmocka_unit_test_teardown(test_setup_when_throttled, check_alive),
        cmocka_unit_test_teardown(test_setup_is_bounded, check_alive),
        cmocka_unit_test_teardown(test_setup_named_limit, check_alive),
        cmocka_unit_test_teardown(test_setup_off, check_alive),
    };
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

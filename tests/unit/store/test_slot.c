/* sluice unit tests — Redis Cluster key slots and the slot map (store/slot.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "store/slot.h"

static unsigned slot(const char *k)
{
    return sl_slot_of_key(k, strlen(k));
}

static void test_crc16_and_slots(void **state)
{
    (void)state;
    /* CRC-16/XMODEM check value, as in the cluster specification */
    assert_int_equal(sl_slot_crc16("123456789", 9), 0x31C3);
    assert_int_equal(sl_slot_crc16("", 0), 0);
    assert_int_equal(slot("123456789"), 0x31C3);
    /* values Redis gives (CLUSTER KEYSLOT) */
    assert_int_equal(slot("foo"), 12182);
    assert_int_equal(slot("bar"), 5061);
    assert_int_equal(slot("hello"), 866);
    /* hash tags (cluster spec): the first {...} that is not empty */
    assert_int_equal(slot("{user1000}.following"), slot("user1000"));
    assert_int_equal(slot("{user1000}.followers"), slot("user1000"));
    assert_int_equal(slot("foo{}{bar}"), sl_slot_crc16("foo{}{bar}", 10) & 16383);
    assert_int_equal(slot("foo{{bar}}zap"), slot("{bar"));
    assert_int_equal(slot("foo{bar}{zap}"), slot("bar"));
    assert_int_equal(slot("{}"), sl_slot_crc16("{}", 2) & 16383);
    assert_int_equal(slot("{a"), sl_slot_crc16("{a", 2) & 16383);
    /* a limit's keys share its tag */
    assert_int_equal(slot("sluice:{lim:user:alice}:tb"), slot("sluice:{lim:user:alice}:cn"));
}

#define NODE(ip, port, role, health)                                                            \
    "*14\r\n$2\r\nid\r\n$1\r\nx\r\n$4\r\nport\r\n:" port "\r\n$2\r\nip\r\n$9\r\n" ip         \
    "\r\n$8\r\nendpoint\r\n$9\r\n" ip "\r\n$4\r\nrole\r\n" role                                \
    "\r\n$18\r\nreplication-offset\r\n:1\r\n$6\r\nhealth\r\n" health "\r\n"

/* A TLS cluster's node: its TLS port as "tls-port", the plaintext one as "port". */
static void test_parse_shards_tls_port(void **state)
{
    (void)state;
    const char *reply =
        "*1\r\n"
        "*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n"
        "*8\r\n$4\r\nport\r\n:7000\r\n$8\r\ntls-port\r\n:8000\r\n"
        "$2\r\nip\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n";
    struct sl_slot_toks tk = { 0 };
    assert_int_equal(sl_slot_toks_from_resp(&tk, reply, strlen(reply)), 0);
    struct sl_slot_range r[2];
    const char *why = NULL;
    assert_int_equal(sl_slot_parse_shards(&tk, r, 2, &why), 1);
    assert_int_equal(r[0].port, 7000);
    assert_int_equal(sl_slot_parse_shards_tls(&tk, r, 2, &why), 1);
    assert_int_equal(r[0].port, 8000);
    sl_slot_toks_free(&tk);
    /* TLS on the only port: "port" it is */
    const char *plain_only =
        "*1\r\n"
        "*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n"
        "*6\r\n$4\r\nport\r\n:7000\r\n"
        "$2\r\nip\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n";
    memset(&tk, 0, sizeof tk);
    assert_int_equal(sl_slot_toks_from_resp(&tk, plain_only, strlen(plain_only)), 0);
    assert_int_equal(sl_slot_parse_shards_tls(&tk, r, 2, &why), 1);
    assert_int_equal(r[0].port, 7000);
    sl_slot_toks_free(&tk);
}

static void test_parse_shards(void **state)
{
    (void)state;
    const char *reply =
        "*2\r\n"
        "*4\r\n$5\r\nslots\r\n*4\r\n:0\r\n:99\r\n:200\r\n:5460\r\n$5\r\nnodes\r\n*2\r\n"
        NODE("127.0.0.1", "7000", "$6\r\nmaster", "$6\r\nonline")
        NODE("127.0.0.1", "7003", "$7\r\nreplica", "$6\r\nonline")
        "*4\r\n$5\r\nslots\r\n*2\r\n:5461\r\n:16383\r\n$5\r\nnodes\r\n*2\r\n"
        NODE("127.0.0.1", "7001", "$6\r\nmaster", "$4\r\nfail")
        NODE("127.0.0.2", "7004", "$6\r\nmaster", "$6\r\nonline");
    struct sl_slot_toks tk = { 0 };
    assert_int_equal(sl_slot_toks_from_resp(&tk, reply, strlen(reply)), 0);
    struct sl_slot_range r[8];
    const char *why = NULL;
    int n = sl_slot_parse_shards(&tk, r, 8, &why);
    assert_int_equal(n, 3);
    assert_int_equal(r[0].start, 0);
    assert_int_equal(r[0].end, 99);
    assert_string_equal(r[0].ip, "127.0.0.1");
    assert_int_equal(r[0].port, 7000);
    assert_int_equal(r[1].start, 200);
    assert_int_equal(r[1].end, 5460);
    /* of two masters (a failover under way), the online one */
    assert_int_equal(r[2].start, 5461);
    assert_int_equal(r[2].end, 16383);
    assert_string_equal(r[2].ip, "127.0.0.2");
    assert_int_equal(r[2].port, 7004);
    /* not room for all */
    assert_int_equal(sl_slot_parse_shards(&tk, r, 2, &why), -1);
    /* CLUSTER SLOTS's shape is not CLUSTER SHARDS's */
    assert_int_equal(sl_slot_parse_slots(&tk, r, 8, &why), -1);
    sl_slot_toks_free(&tk);
}

static void test_parse_slots(void **state)
{
    (void)state;
    const char *reply =
        "*2\r\n"
        "*4\r\n:0\r\n:5460\r\n*4\r\n$9\r\n127.0.0.1\r\n:7000\r\n$1\r\na\r\n*0\r\n"
        "*4\r\n$9\r\n127.0.0.1\r\n:7003\r\n$1\r\nb\r\n*0\r\n"
        "*3\r\n:5461\r\n:16383\r\n*3\r\n$3\r\n::1\r\n:7001\r\n$1\r\nc\r\n";
    struct sl_slot_toks tk = { 0 };
    assert_int_equal(sl_slot_toks_from_resp(&tk, reply, strlen(reply)), 0);
    struct sl_slot_range r[4];
    const char *why = NULL;
    assert_int_equal(sl_slot_parse_slots(&tk, r, 4, &why), 2);
    assert_int_equal(r[0].end, 5460);
    assert_int_equal(r[0].port, 7000);
    assert_string_equal(r[1].ip, "::1");
    assert_int_equal(r[1].start, 5461);
    /* a slot out of range */
    const char *bad = "*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n";
    assert_int_equal(sl_slot_toks_from_resp(&tk, bad, strlen(bad)), 0);
    assert_int_equal(sl_slot_parse_slots(&tk, r, 4, &why), -1);
    assert_non_null(why);
    /* an error reply, a reply cut short */
    assert_int_equal(sl_slot_toks_from_resp(&tk, "*1\r\n*3\r\n:0\r\n", 12), -1);
    const char *err = "-ERR unknown subcommand\r\n";
    assert_int_equal(sl_slot_toks_from_resp(&tk, err, strlen(err)), 0);
    assert_int_equal(sl_slot_parse_slots(&tk, r, 4, &why), -1);
    sl_slot_toks_free(&tk);
}

static void test_token_cap(void **state)
{
    (void)state;
    /* an array larger than the cap is refused, not buffered */
    char head[32];
    snprintf(head, sizeof(head), "*%d\r\n", SL_SLOT_TOK_MAX + 1);
    static char big[(SL_SLOT_TOK_MAX + 2) * 4 + 32];
    size_t len = strlen(head);
    memcpy(big, head, len);
    for (int i = 0; i <= SL_SLOT_TOK_MAX; i++) {
        memcpy(big + len, ":1\r\n", 4);
        len += 4;
    }
    struct sl_slot_toks tk = { 0 };
    assert_int_equal(sl_slot_toks_from_resp(&tk, big, len), -1);
    assert_non_null(tk.bad);
    sl_slot_toks_free(&tk);
}

static void test_parse_redirect(void **state)
{
    (void)state;
    int ask;
    unsigned s;
    char host[64];
    uint16_t port;
    assert_int_equal(sl_slot_parse_redirect("MOVED 3999 127.0.0.1:6381", &ask, &s, host,
                                            sizeof(host), &port), 0);
    assert_int_equal(ask, 0);
    assert_int_equal(s, 3999);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 6381);
    assert_int_equal(sl_slot_parse_redirect("ASK 16383 [::1]:7000", &ask, &s, host, sizeof(host),
                                            &port), 0);
    assert_int_equal(ask, 1);
    assert_string_equal(host, "::1");
    assert_int_equal(sl_slot_parse_redirect("MOVED 16384 h:1", &ask, &s, host, sizeof(host), &port), -1);
    assert_int_equal(sl_slot_parse_redirect("MOVED 1 h:0", &ask, &s, host, sizeof(host), &port), -1);
    assert_int_equal(sl_slot_parse_redirect("MOVED 1 :1", &ask, &s, host, sizeof(host), &port), -1);
    assert_int_equal(sl_slot_parse_redirect("MOVEDX 1 h:1", &ask, &s, host, sizeof(host), &port), -1);
    assert_int_equal(sl_slot_parse_redirect("ERR x", &ask, &s, host, sizeof(host), &port), -1);
    assert_int_equal(sl_slot_parse_redirect("MOVED 1 hostname:1", &ask, &s, host, 4, &port), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc16_and_slots),
        cmocka_unit_test(test_parse_shards),
        cmocka_unit_test(test_parse_shards_tls_port),
        cmocka_unit_test(test_parse_slots),
        cmocka_unit_test(test_token_cap),
        cmocka_unit_test(test_parse_redirect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

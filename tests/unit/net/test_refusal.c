/* The listener's refusal of a connection it has no descriptors for is
 * worded by the listener's protocol (sl_session_refusal_fd), chosen from
 * the protocols' table by the configuration's protocol: RESP says why,
 * HTTP answers 503, TCP closes without a word. No socket: only the words. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "net/listener-t.h"
#include "net/session.h"

static struct sl_listener *listener(enum sl_proto p)
{
    struct sl_listener *l = calloc(1, sizeof(*l));
    assert_non_null(l);
    l->conf = &l->cf;
    l->cf.protocol = p;
    return l;
}

static void test_resp(void **state)
{
    (void)state;
    struct sl_listener *l = listener(SL_PROTO_RESP);
    static const char want[] =
        "-ERR max number of clients reached (sluice is out of file descriptors)\r\n";
    char out[256];
    size_t n = sl_session_refusal_fd(l, out, sizeof(out));
    assert_int_equal(n, sizeof(want) - 1);
    assert_memory_equal(out, want, n);
    assert_int_equal(sl_session_refusal_fd(l, out, 10), 0); /* no room: nothing, not a cut line */
    assert_string_equal(sl_session_proto_name(l), "resp");
    free(l);
}

static void test_http_tcp(void **state)
{
    (void)state;
    char out[256];
    struct sl_listener *l = listener(SL_PROTO_HTTP);
    size_t n = sl_session_refusal_fd(l, out, sizeof(out));
    assert_true(n > 12);
    assert_memory_equal(out, "HTTP/1.1 503 ", 13);
    assert_non_null(memmem(out, n, "Connection: close\r\n", 19));
    assert_string_equal(sl_session_proto_name(l), "http");
    l->cf.protocol = SL_PROTO_TCP;
    assert_int_equal(sl_session_refusal_fd(l, out, sizeof(out)), 0);
    assert_string_equal(sl_session_proto_name(l), "tcp");
    free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resp),
        cmocka_unit_test(test_http_tcp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

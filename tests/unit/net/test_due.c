/* The deadline the process's timeout timer is armed for
 * (sl_session_next_due, src/net/session.c): the earliest of a listener's
 * queues, each with the timeout the sweep applies to it. A fake clock:
 * nodes are touched at chosen loop times. (Sessions are not needed: only
 * the queues' heads are read.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/tq.h"
#include "net/listener-t.h"
#include "net/session.h"

#define S_US 1000000ULL

static void test_next_due(void **state)
{
    (void)state;
    struct sl_listener *l = calloc(1, sizeof(*l));
    assert_non_null(l);
    l->conf = &l->cf;
    l->cf.header_timeout_us = 2 * S_US;
    l->cf.upstream_timeout_us = 1 * S_US;
    l->cf.idle_timeout_us = 300 * S_US;
    l->cf.connect_timeout_us = 2 * S_US;
    struct sl_tq_node head = { 0 }, wait = { 0 }, idle = { 0 }, conn = { 0 }, linger = { 0 };
    assert_int_equal(sl_session_next_due(l), UINT64_MAX);

    sl_tq_touch(&l->active, &idle, 500);
    assert_int_equal(sl_session_next_due(l), 500 + 300000);
    sl_tq_touch(&l->heading, &head, 1000);
    assert_int_equal(sl_session_next_due(l), 3000); /* header_timeout = 2s: at 3 s, not later */
    sl_tq_touch(&l->awaiting, &wait, 1500);
    assert_int_equal(sl_session_next_due(l), 2500); /* upstream_timeout = 1s */
    sl_tq_touch(&l->connecting, &conn, 400);
    assert_int_equal(sl_session_next_due(l), 2400);
    sl_tq_touch(&l->lingering, &linger, 100);
    assert_int_equal(sl_session_next_due(l), 2100); /* the lingering close: 2 s */
    sl_tq_remove(&linger);
    sl_tq_remove(&conn);
    sl_tq_remove(&wait);
    assert_int_equal(sl_session_next_due(l), 3000);

    /* timeouts off: idle never; header/upstream 0 (a reload turned them
     * off) take their nodes out at once */
    l->cf.idle_timeout_us = 0;
    sl_tq_remove(&head);
    assert_int_equal(sl_session_next_due(l), UINT64_MAX);
    l->cf.header_timeout_us = 0;
    sl_tq_touch(&l->heading, &head, 7000);
    assert_int_equal(sl_session_next_due(l), 7001);
    /* a TLS handshake gets header_timeout, 10 s when it is off */
    sl_tq_remove(&head);
    sl_tq_touch(&l->handshaking, &head, 7000);
    assert_int_equal(sl_session_next_due(l), 17000);
    sl_tq_remove(&head);
    sl_tq_remove(&idle);
    free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_next_due),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

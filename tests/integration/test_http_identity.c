/* sluice integration tests — HTTP identities that could be read two ways
 * (issue 21).
 *
 * With identity = header:X-Api-Key, a request with two X-Api-Key fields
 * used to be charged for the first while many upstreams read the last (or
 * both joined): one client could spend another's quota, or none at all.
 * Such a request is refused with 400 and the connection closed, as is a
 * value with a comma (RFC 9110 lets a hop join two fields into "a, b"),
 * except in fields whose grammar holds commas (Authorization ...). A
 * single clean key is charged as before.
 *
 * One sluice in front of our Python upstream (tests/integration/
 * http_upstream.py: /echo answers what it received):
 *   key  -> identity = header:X-Api-Key client_ip, 2 requests a minute each
 *   auth -> identity = header:Authorization, 2 requests a minute each
 *   ip   -> identity = client_ip: header fields play no part */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "integration/harness.h"

static struct th_proc sluice_p, pyup;
static int key_port, auth_port, ip_port, admin_port;

static int group_setup(void **state)
{
    (void)state;
    if (th_pyup_start(&pyup) < 0)
        return -1;
    key_port = th_free_port();
    auth_port = th_free_port();
    ip_port = th_free_port();
    admin_port = th_free_port();
    char ini[2048];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\n[store]\nurl = local\n"
             "[listener key]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "identity = header:X-Api-Key client_ip\n"
             "[listener auth]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "identity = header:Authorization\n"
             "[listener ip]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "[limit per-key]\nlistener = key\nrate = 2/m\nburst = 2\n"
             "[limit per-auth]\nlistener = auth\nrate = 2/m\nburst = 2\n",
             admin_port, key_port, pyup.port, auth_port, pyup.port, ip_port, pyup.port);
    return th_sluice_start(&sluice_p, ini, ip_port);
}

static int group_teardown(void **state)
{
    (void)state;
    int st = th_stop(&sluice_p);
    th_stop(&pyup);
    return st == 0 ? 0 : -1;
}

/* Sends <req> on a fresh connection and reads until sluice closes it (or
 * TH_MS); the bytes received, malloc'd. <eof>: whether it closed. */
static char *exchange(int port, const char *req, int *eof)
{
    size_t n = 0;
    char *out = th_transcript(port, req, strlen(req), &n, TH_MS, eof);
    assert_non_null(out);
    return out;
}

/* The number of responses in <s> (status lines). */
static int responses(const char *s)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, "HTTP/1.1 ")) != NULL; p += 9)
        n++;
    return n;
}

/* <req> is refused: one 400 that names the field and closes, nothing of
 * the key in it, the upstream never asked. */
static void refused(int port, const char *req, const char *field, const char *key)
{
    const char *ok = "sluice_http_responses_total{listener=\"key\",class=\"2xx\"}";
    double heads = th_metric(admin_port, ok);
    assert_true(heads >= 0);
    int eof = 0;
    char *out = exchange(port, req, &eof);
    if (strncmp(out, "HTTP/1.1 400 ", 13) != 0)
        th_dump("instead of a 400", out, strlen(out));
    assert_memory_equal(out, "HTTP/1.1 400 ", 13);
    assert_int_equal(responses(out), 1);
    assert_true(eof);
    assert_non_null(strstr(out, "Connection: close"));
    assert_non_null(strstr(out, field));
    assert_null(strstr(out, key));
    assert_true(th_metric(admin_port, ok) == heads);
    free(out);
}

/* Two X-Api-Key fields (any case, an empty one too), or one holding a
 * comma list: 400 and the close, whichever key comes first. On the old
 * code the first was charged and the upstream got both. */
static void test_duplicate_key_refused(void **state)
{
    (void)state;
    refused(key_port,
            "GET /echo HTTP/1.1\r\nHost: x\r\nX-Api-Key: victim\r\nX-Api-Key: k-mallory\r\n\r\n",
            "X-Api-Key", "k-mallory");
    refused(key_port,
            "GET /echo HTTP/1.1\r\nHost: x\r\nx-api-key: k-mallory\r\nX-API-KEY: victim\r\n\r\n",
            "X-Api-Key", "k-mallory");
    refused(key_port, "GET /echo HTTP/1.1\r\nHost: x\r\nX-Api-Key:\r\nX-Api-Key: k-mallory\r\n\r\n",
            "X-Api-Key", "k-mallory");
    refused(key_port, "GET /echo HTTP/1.1\r\nHost: x\r\nX-Api-Key: victim, k-mallory\r\n\r\n",
            "comma", "k-mallory");
    refused(key_port, "GET /echo HTTP/1.1\r\nHost: x\r\nX-Api-Key: k-mallory,\r\n\r\n", "comma",
            "k-mallory");
}

/* Ahead of a refused request, a good one on the same connection is
 * answered first; nothing after the refused one is read. */
static void test_pipeline_then_refusal(void **state)
{
    (void)state;
    int eof = 0;
    char *out = exchange(key_port,
                         "GET /echo HTTP/1.1\r\nHost: x\r\nX-Api-Key: k-pipe\r\n\r\n"
                         "GET /echo HTTP/1.1\r\nHost: x\r\nX-Api-Key: a\r\nX-Api-Key: b\r\n\r\n"
                         "GET /echo HTTP/1.1\r\nHost: x\r\nX-Api-Key: k-pipe\r\n\r\n",
                         &eof);
    assert_memory_equal(out, "HTTP/1.1 200 ", 13);
    const char *second = strstr(out + 13, "HTTP/1.1 ");
    assert_non_null(second);
    assert_memory_equal(second, "HTTP/1.1 400 ", 13);
    assert_int_equal(responses(out), 2);
    assert_true(eof);
    free(out);
}

/* One clean key per request: charged as before (2 a minute, each key its
 * own), and a key absent falls to the client address. */
static void test_single_key_charged(void **state)
{
    (void)state;
    int eof = 0;
    for (int i = 0; i < 2; i++) {
        char *out = exchange(key_port,
                             "GET /echo HTTP/1.1\r\nHost: x\r\nX-Api-Key: k-one\r\n"
                             "Connection: close\r\n\r\n", &eof);
        assert_memory_equal(out, "HTTP/1.1 200 ", 13);
        free(out);
    }
    char *out = exchange(key_port, "GET /echo HTTP/1.1\r\nHost: x\r\nX-Api-Key: k-one\r\n"
                                   "Connection: close\r\n\r\n", &eof);
    assert_memory_equal(out, "HTTP/1.1 429 ", 13);
    free(out);
    out = exchange(key_port, "GET /echo HTTP/1.1\r\nHost: x\r\nX-Api-Key: k-two\r\n"
                             "Connection: close\r\n\r\n", &eof);
    assert_memory_equal(out, "HTTP/1.1 200 ", 13);
    free(out);
}

/* Authorization's grammar holds commas (auth-params): one field with them
 * is one credential, charged whole; two Authorization fields are refused. */
static void test_authorization_commas(void **state)
{
    (void)state;
    int eof = 0;
    char *out = exchange(auth_port,
                         "GET /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Digest username=\"u\", "
                         "realm=\"r\", nonce=\"n\"\r\nConnection: close\r\n\r\n", &eof);
    assert_memory_equal(out, "HTTP/1.1 200 ", 13);
    free(out);
    out = exchange(auth_port,
                   "GET /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\r\n"
                   "Authorization: Bearer b\r\n\r\n", &eof);
    assert_memory_equal(out, "HTTP/1.1 400 ", 13);
    assert_true(eof);
    free(out);
}

/* Where no header is the identity, repeated fields are the upstream's
 * business: passed on as they came. */
static void test_other_listeners_unchanged(void **state)
{
    (void)state;
    int eof = 0;
    char *out = exchange(ip_port, "GET /echo HTTP/1.1\r\nHost: x\r\nX-Api-Key: a\r\n"
                                  "X-Api-Key: b\r\nConnection: close\r\n\r\n", &eof);
    assert_memory_equal(out, "HTTP/1.1 200 ", 13);
    assert_non_null(strstr(out, "\"x-api-key\":\"a, b\""));
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_duplicate_key_refused),
        cmocka_unit_test(test_pipeline_then_refusal),
        cmocka_unit_test(test_single_key_charged),
        cmocka_unit_test(test_authorization_commas),
        cmocka_unit_test(test_other_listeners_unchanged),
    };
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

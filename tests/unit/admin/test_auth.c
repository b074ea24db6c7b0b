/* sluice unit tests — admin/auth.c: the Authorization field against the
 * admin token (RFC 6750 2.1 `Bearer TOKEN`, the scheme in any case) and
 * the comparison that takes the same path whatever the guess. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "admin/auth.h"

#define TOK "s3cret-Token_1"

static enum sl_admin_auth check(const char *val)
{
    return sl_admin_auth_check(TOK, strlen(TOK), val, val != NULL ? strlen(val) : 0);
}

static void test_check(void **state)
{
    (void)state;
    assert_int_equal(check("Bearer " TOK), SL_AUTH_OK);
    assert_int_equal(check("bearer " TOK), SL_AUTH_OK);
    assert_int_equal(check("BEARER  \t " TOK), SL_AUTH_OK);
    assert_int_equal(check(NULL), SL_AUTH_MISSING);
    assert_int_equal(check(""), SL_AUTH_MISSING);
    assert_int_equal(check("Bearer"), SL_AUTH_MISSING);
    assert_int_equal(check(TOK), SL_AUTH_MISSING);
    assert_int_equal(check("Basic " TOK), SL_AUTH_MISSING);
    assert_int_equal(check("Bearer" TOK), SL_AUTH_MISSING);
    assert_int_equal(check("Bearerx " TOK), SL_AUTH_MISSING);
    assert_int_equal(check("Bearer "), SL_AUTH_INVALID);
    assert_int_equal(check("Bearer x"), SL_AUTH_INVALID);
    assert_int_equal(check("Bearer " TOK "x"), SL_AUTH_INVALID);
    assert_int_equal(check("Bearer s3cret-Token_"), SL_AUTH_INVALID);
    assert_int_equal(check("Bearer S3cret-Token_1"), SL_AUTH_INVALID); /* the token is exact */
    assert_int_equal(check("Bearer " TOK " " TOK), SL_AUTH_INVALID);
}

static void test_ct_equal(void **state)
{
    (void)state;
    assert_true(sl_admin_ct_equal("abc", 3, "abc", 3));
    assert_false(sl_admin_ct_equal("abd", 3, "abc", 3));
    assert_false(sl_admin_ct_equal("ab", 2, "abc", 3));
    assert_false(sl_admin_ct_equal("abcd", 4, "abc", 3));
    assert_false(sl_admin_ct_equal("", 0, "abc", 3));
    /* a guess padded with NULs to the token's length is not the token */
    assert_false(sl_admin_ct_equal("ab\0", 3, "ab", 2));
    assert_false(sl_admin_ct_equal("ab", 2, "ab\0", 3));
    /* a difference in any one byte, every bit */
    char tok[64], guess[64];
    for (int i = 0; i < 64; i++)
        tok[i] = (char)('!' + i);
    for (int i = 0; i < 64; i++) {
        for (int bit = 0; bit < 8; bit++) {
            memcpy(guess, tok, sizeof(tok));
            guess[i] = (char)(guess[i] ^ (1 << bit));
            assert_false(sl_admin_ct_equal(guess, 64, tok, 64));
        }
    }
    assert_true(sl_admin_ct_equal(tok, 64, tok, 64));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_ct_equal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

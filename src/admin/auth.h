/* sluice — the admin endpoint's bearer token (admin_token_file).
 *
 * RFC 6750 2.1: `Authorization: Bearer TOKEN`, the scheme matched without
 * regard to case, one or more spaces before the token. The token is
 * compared in time that depends only on the configured token's length, so
 * a client timing the answers learns nothing of how much of its guess was
 * right. */
#ifndef SL_ADMIN_AUTH_H
#define SL_ADMIN_AUTH_H

#include <stddef.h>

/* What an Authorization field value says against the token <tok> (<tlen>
 * bytes, > 0). */
enum sl_admin_auth {
    SL_AUTH_OK,       /* Bearer and the token */
    SL_AUTH_MISSING,  /* no field, or another scheme: 401 with a bare challenge */
    SL_AUTH_INVALID,  /* Bearer, but not the token: 401 with error="invalid_token" */
};

/* <val> (<vlen> bytes, surrounding whitespace already trimmed) is the one
 * Authorization field's value, or NULL when the request had none. */
enum sl_admin_auth sl_admin_auth_check(const char *tok, size_t tlen, const char *val, size_t vlen);

/* 1 when [a, a + alen) and [b, b + blen) are equal, in time that depends on
 * <blen> only (b is the secret). */
int sl_admin_ct_equal(const char *a, size_t alen, const char *b, size_t blen);

#endif

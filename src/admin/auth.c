/* sluice — the admin endpoint's bearer token check (auth.h). */
#include <strings.h>

#include "admin/auth.h"

int sl_admin_ct_equal(const char *a, size_t alen, const char *b, size_t blen)
{
    /* Every byte of the secret is looked at, whatever the guess: a guess of
     * another length reads as zeros past its end, and the lengths differing
     * is folded into the same accumulator, so neither the position of the
     * first wrong byte nor an early exit shows in the time taken. The
     * volatile keeps the compiler from turning it into an early-exit loop. */
    volatile unsigned char diff = (unsigned char)(alen != blen);
    for (size_t i = 0; i < blen; i++) {
        unsigned char x = i < alen ? (unsigned char)a[i] : 0;
        diff |= (unsigned char)(x ^ (unsigned char)b[i]);
    }
    return diff == 0;
}

enum sl_admin_auth sl_admin_auth_check(const char *tok, size_t tlen, const char *val, size_t vlen)
{
    if (val == NULL || vlen < 7 || strncasecmp(val, "Bearer", 6) != 0 ||
        (val[6] != ' ' && val[6] != '\t'))
        return SL_AUTH_MISSING;
    size_t i = 7;
    while (i < vlen && (val[i] == ' ' || val[i] == '\t'))
        i++;
    return sl_admin_ct_equal(val + i, vlen - i, tok, tlen) ? SL_AUTH_OK : SL_AUTH_INVALID;
}

/* sluice — one hexadecimal digit's value, for the decoders of %XX (paths,
 * admin URLs) and \xXX (inline RESP, quoted log text). */
#ifndef SL_CORE_HEX_H
#define SL_CORE_HEX_H

/* The value of hex digit <c> (either case), or -1 when it is none. */
static inline int sl_hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

#endif

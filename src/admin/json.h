/* sluice — JSON strings and percent-encoded path segments for the admin
 * endpoint's limits API (admin/limits_api.c).
 *
 * Identities come from clients, so what is written as a JSON string may
 * hold any byte: a quote, a control byte, bytes that are not UTF-8. And
 * what an operator writes in a path is percent-encoded. */
#ifndef SL_ADMIN_JSON_H
#define SL_ADMIN_JSON_H

#include <stddef.h>
#include <stdio.h>

/* Writes <n> bytes of <s> to <out> as one JSON string, quotes included:
 * '"' and '\' escaped, control bytes (and DEL) as \u00XX, well-formed
 * UTF-8 (RFC 3629: no overlong forms, no surrogates, at most U+10FFFF) as
 * it is, and each byte of a malformed sequence as U+FFFD (written
 * \ufffd), so the output is always valid JSON in valid UTF-8. */
void sl_json_str(FILE *out, const char *s, size_t n);

/* Decodes percent-encoded <in> (<n> bytes: one path segment) into <out>
 * (room for <cap> bytes, NUL-terminated). '%' must be followed by two hex
 * digits; %00 is refused (no identity holds a NUL), '+' stays '+' (a path,
 * not a form). Returns the decoded length, or -1 when the encoding is bad
 * or the result does not fit. */
long sl_pct_decode(const char *in, size_t n, char *out, size_t cap);

#endif

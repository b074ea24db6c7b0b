/* sluice — the values of the configuration keys of http listeners and of
 * limits on them: address ranges (trusted_proxies), methods and path
 * patterns. Pure checks and conversions; the loader reports (sec_listener.c,
 * sec_limit.c, check.c). */
#ifndef SL_CONF_HTTP_H
#define SL_CONF_HTTP_H

#include <stddef.h>

#include "conf/conf-t.h"

#define SL_CONF_METHOD_MAX 31 /* bytes of a method name (struct sl_cost.cmd) */

/* Parses "10.0.0.0/8", "fd00::/8", or an address alone (a range of one)
 * into <out>. Returns 0; -1 if <w> is not one; -2 if bits are set past the
 * prefix ("10.0.0.1/8"): then <out> holds the range meant (10.0.0.0/8). */
int sl_conf_cidr_parse(const char *w, struct sl_cidr *out);

/* Writes <c> as sl_conf_cidr_parse() reads it back (an address alone for a
 * range of one) into <out> of <cap> bytes (64 is enough). */
void sl_conf_cidr_fmt(const struct sl_cidr *c, char *out, size_t cap);

/* Whether the 16-byte address <a> (IPv4 as ::ffff:a.b.c.d) is in <c>. */
int sl_conf_cidr_has(const struct sl_cidr *c, const unsigned char a[16]);

/* NULL if <w> is a method name (an RFC 9110 token of at most
 * SL_CONF_METHOD_MAX bytes), else why not, e.g. "'get' is not GET
 * (methods are case-sensitive)" for a standard method in another case,
 * written into <why> of <cap> bytes. */
const char *sl_conf_method_problem(const char *w, char *why, size_t cap);

/* Checks the path pattern <w> and writes its normal form (see
 * proto/http_path.h) into <out> of <cap> bytes (SL_HTTP_PATH_NORM_CAP(strlen(w)), proto/http_path.h).
 * Returns NULL, or why it is not one (written into <why>). */
const char *sl_conf_path_pattern(const char *w, char *out, size_t cap, char *why, size_t wcap);

#endif

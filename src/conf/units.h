/* sluice — the units of the configuration file.
 *
 * Each parser takes the whole value (leading/trailing blanks already
 * stripped), returns 0 and fills <out>, or -1 when the text is not exactly one
 * valid value of that kind (trailing junk, overflow, negative, empty). */
#ifndef SL_CONF_UNITS_H
#define SL_CONF_UNITS_H

#include <stdint.h>

#include "conf/conf-t.h"

/* Durations: "250ms", "2s", "5m", "1h", "1d", "100us"; a bare integer is
 * seconds (as nginx). "0" is zero. Result in microseconds. */
int sl_parse_duration(const char *s, uint64_t *us);

/* Sizes: "512" (bytes), "64kb" "10mb" "1gb" "1tb" (powers of 1000, any case),
 * "64KiB" "10MiB" "1GiB" "1TiB" (powers of 1024, any case). Bare "k", "m",
 * "g" are rejected: they are ambiguous. Result in bytes. */
int sl_parse_size(const char *s, uint64_t *bytes);

/* Rates: "N/s" "N/m" "N/h" "N/d" (also "N/sec" "N/min" "N/hour" "N/day"),
 * and when <bytes> is nonzero a size per period: "10MiB/s", "500kb/m".
 * N must be positive. */
int sl_parse_rate(const char *s, int bytes, struct sl_rate *out);

/* One second's worth of rate <r>, rounded up, at least 1: a limit's
 * default burst. */
uint64_t sl_rate_one_second(const struct sl_rate *r);

/* A per-identity override of a limit's rate and burst, as kept in the
 * store (overrides = store): "RATE" or "RATE BURST", blanks between, e.g.
 * "5000/s 10000" or "10MiB/s 20MiB" (sizes only when <bytes>), <len>
 * bytes at <s> (not NUL-terminated). RATE as sl_parse_rate() within the
 * bounds the file's `rate` has; BURST a positive count or size within the
 * file's bounds for `burst` (default: one second's worth of RATE).
 * Returns 0, or -1 with <why> saying what is wrong. */
int sl_parse_override(const char *s, size_t len, int bytes, struct sl_rate *rate,
                      uint64_t *burst, const char **why);

/* Parses "a.b.c.d:port", "[v6]:port", "*:port" (any IPv4 address) or
 * "name:port" (a DNS host name, "localhost" too) into <out>. A name is not
 * resolved here: <out> has named = 1 and an empty ss (conf/resolve.h fills
 * it). Does no I/O. */
int sl_parse_addr(const char *s, struct sl_addr *out);

/* Formats helpers for -T: the shortest exact unit text of a value. */
void sl_fmt_duration(uint64_t us, char *out, unsigned cap);
void sl_fmt_size(uint64_t bytes, char *out, unsigned cap);
void sl_fmt_rate(const struct sl_rate *r, int bytes, char *out, unsigned cap);

#endif

/* sluice — HTTP request paths: the form limits compare, and the patterns
 * of a limit's `paths`.
 *
 * Pure functions over bytes. A path is compared in a normal form, so a
 * client cannot step around a limit on the paths under "/search/" by writing its path as
 * the server behind sluice reads it but differently spelt ("/%73earch/x",
 * "/./search/x", "//search/x", "/a/../search/x"):
 *
 *   - a percent-encoded unreserved character (RFC 3986 2.3: ALPHA DIGIT
 *     - . _ ~) is decoded; any other %XX keeps its encoding, hex in upper
 *     case (RFC 3986 6.2.2.1-2); a '%' that starts no escape (invalid in
 *     a URI) becomes "%25", so that the form is a fixed point: decoding
 *     "%3%33" must not make a new escape "%33" for a second pass;
 *   - "." and ".." segments are removed (RFC 3986 5.2.4; ".." never climbs
 *     above the root);
 *   - runs of '/' are one '/' (as nginx's merge_slashes);
 *   - the result starts with '/'.
 *
 * Patterns (normalised the same way when the configuration loads):
 *   "/a/b"      that path exactly;
 *   "/a/" + '*' (a pattern that ends in '/' and '*'): everything under
 *               "/a/", whatever follows, '/' too (a prefix);
 *   '*' elsewhere, and '?': a glob; '*' is any run of bytes within one
 *               segment (never '/'), '?' one byte other than '/'
 *               ("/img/" + '*' + ".png", "/v?/x").
 * Paths and patterns are case-sensitive (RFC 3986 6.2.2.1). */
#ifndef SL_PROTO_HTTP_PATH_H
#define SL_PROTO_HTTP_PATH_H

#include <stddef.h>

/* Writes the normal form of the <n> bytes at <p> into <out>, which must
 * hold SL_HTTP_PATH_NORM_CAP(<n>) bytes, NUL-terminated; returns its
 * length (<= 3 * n + 1). */
#define SL_HTTP_PATH_NORM_CAP(n) (3 * (size_t)(n) + 2)
size_t sl_http_path_norm(const char *p, size_t n, char *out);

/* Whether the normalised path <path> (<n> bytes) matches <pattern>
 * (NUL-terminated, normalised). Time: O(n * strlen(pattern)) at worst. */
int sl_http_path_match(const char *pattern, const char *path, size_t n);

#endif

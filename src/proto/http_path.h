/* sluice — HTTP request paths: the readings limits compare, and the
 * patterns of a limit's `paths`.
 *
 * Pure functions over bytes. The server behind sluice routes on its own
 * reading of a request's path, and servers read paths differently: nginx
 * decodes every %XX ("%2F" too) and then removes dot segments and merges
 * slashes; Express routes on the path as sent; Tomcat and Jetty drop
 * ";params" first; the WHATWG URL parser (Node's `new URL`, Deno, Bun)
 * takes '\' for '/' and "%2e" for '.' but decodes nothing. So that no
 * spelling steps around a limit on the paths under "/api/", a path is
 * matched in each of these readings (docs/http.md, "Paths"), and a
 * pattern takes the request when it matches any of them:
 *
 *   RAW       the bytes as sent;
 *   DECODED   every %XX decoded once (either case of hex), nothing else;
 *   RESOLVED  DECODED, then "." and ".." segments removed (RFC 3986
 *             5.2.4, never above the root) and runs of '/' made one;
 *   WIDE      decoded twice (a decoding proxy in front of a decoding
 *             application), '\' taken for '/', each segment cut at its
 *             first ';' (path parameters), then as RESOLVED;
 *   URL       as sent, '\' taken for '/', dot segments (".", "%2e", "..",
 *             ".%2e", "%2e.", "%2e%2e", any case) removed, slashes kept.
 *
 * Every reading starts with '/'. A path without '%', '\', ';', "//" and
 * dot segments reads the same in all of them: it is matched as sent, with
 * no copy (sl_http_path_plain).
 *
 * Patterns (normalised as RESOLVED when the configuration loads):
 *   "/a/b"      that path exactly;
 *   "/a/" + '*' (a pattern that ends in '/' and '*'): everything under
 *               "/a/", whatever follows, '/' too (a prefix);
 *   '*' elsewhere, and '?': a glob; '*' is any run of bytes within one
 *               segment (never '/'), '?' one byte other than '/'
 *               ("/img/" + '*' + ".png", "/v?/x").
 * Letters match in either case (ASCII): Express and ASP.NET route
 * "/API/x" where "/api/" + '*' goes. */
#ifndef SL_PROTO_HTTP_PATH_H
#define SL_PROTO_HTTP_PATH_H

#include <stddef.h>

/* Writes the RESOLVED reading of the <n> bytes at <p> into <out>, which
 * must hold SL_HTTP_PATH_NORM_CAP(<n>) bytes, NUL-terminated (it may hold
 * a NUL before its end: %00 decodes to one); returns its length (<= n + 1).
 * The normal form of patterns. */
#define SL_HTTP_PATH_NORM_CAP(n) ((size_t)(n) + 2)
size_t sl_http_path_norm(const char *p, size_t n, char *out);

/* Whether every reading of the path <p> (<n> bytes) is the path itself:
 * no '%', '\', ';', "//", "." or ".." segment. */
int sl_http_path_plain(const char *p, size_t n);

/* The distinct readings of one path: form[0] is the path as sent. */
#define SL_HTTP_PATH_READINGS 5
struct sl_http_path_forms {
    int         n;
    const char *form[SL_HTTP_PATH_READINGS];
    size_t      len[SL_HTTP_PATH_READINGS];
};

/* Bytes of scratch sl_http_path_forms() needs for a path of <n> bytes. */
#define SL_HTTP_PATH_FORMS_CAP(n) (4 * ((size_t)(n) + 2))

/* Fills <f> with the distinct readings of the path <p> (<n> bytes), those
 * that are not the path itself written into <scratch>
 * (SL_HTTP_PATH_FORMS_CAP(<n>) bytes; untouched when the path is plain). */
void sl_http_path_forms(const char *p, size_t n, char *scratch, struct sl_http_path_forms *f);

/* Why a path that no set of readings can stand for is refused where limits
 * have `paths` (a static text), or NULL: an encoded NUL ("%00": C servers
 * end the path there, nginx refuses it), or an overlong UTF-8 sequence
 * ("%C0%AF": lenient decoders read it as '/'). Reads the path once, no copy. */
const char *sl_http_path_refusal(const char *p, size_t n);

/* Whether the path <path> (<n> bytes, one reading) matches <pattern>
 * (NUL-terminated, normalised); ASCII letters in either case. Time:
 * O(n * strlen(pattern)) at worst. */
int sl_http_path_match(const char *pattern, const char *path, size_t n);

/* Whether any reading in <f> matches <pattern>. */
int sl_http_path_match_forms(const char *pattern, const struct sl_http_path_forms *f);

#endif

/* sluice — what the proxy changes in a message head it passes on.
 *
 * Pure: a whole head in (as the framer holds it), the head to send out.
 * sluice pairs each client connection with its own upstream connection,
 * so the hop-by-hop fields (Connection, Keep-Alive, Upgrade, TE) pass as
 * they are: the upstream sees the client's wishes and the client the
 * upstream's; except that a request's wish to switch protocols is cut
 * down to the listener's `upgrades` (proto/http_upgrade.h). A request gains X-Forwarded-For (the peer's address appended
 * to the list the client sent, as one field) and X-Forwarded-Proto (the
 * scheme the client used; one the client sent is dropped); a response may
 * gain fields (RateLimit) before its empty line. */
#ifndef SL_PROTO_HTTP_FWD_H
#define SL_PROTO_HTTP_FWD_H

#include <stddef.h>

#include "proto/http-t.h"
#include "proto/http_upgrade-t.h"

/* Room a forwarded request head may need beyond the head itself. */
#define SL_HTTP_FWD_EXTRA 160

/* Writes request head <h> as it goes upstream into <out> (<cap> bytes, at
 * least h->len + SL_HTTP_FWD_EXTRA): with <peer> (an address, or NULL)
 * appended to X-Forwarded-For and X-Forwarded-Proto set to <scheme> (or
 * NULL: both left as they are). Returns the length, or 0 if <cap> is too
 * small. */
size_t sl_http_fwd_request(const struct sl_http_head *h, const char *peer, const char *scheme,
                           char *out, size_t cap);

/* The same, with what <h> says about switching protocols cut down to the
 * upgrades <u> allows (proto/http_upgrade.h; NULL: left as it is), and the
 * mask of allowed protocols it still offers in <*offered> (0: it goes as
 * a plain request). */
size_t sl_http_fwd_request_in(const struct sl_http_head *h, const char *peer, const char *scheme,
                              const struct sl_http_upgrades *u, uint32_t *offered, char *out,
                              size_t cap);

/* Writes head <h> with <extra> (<extra_len> bytes of complete field lines,
 * each ending in CRLF) inserted before its empty line. Returns the length,
 * or 0 if <cap> (at least h->len + extra_len) is too small. */
size_t sl_http_fwd_with(const struct sl_http_head *h, const char *extra, size_t extra_len,
                        char *out, size_t cap);

/* Removes the "close" option from the Connection fields of head <head>
 * (<len> bytes, as sl_http_fwd_request wrote it), in place; a field left
 * with no option goes. Returns the new length. For a request that goes
 * upstream on a connection kept for reuse (upstream_keepalive): the client
 * asked to close, and sluice closes the client's connection itself. */
size_t sl_http_fwd_drop_close(char *head, size_t len);

/* The same for the "keep-alive" option: for a response sluice answers with
 * "Connection: close" (the client asked to close) from an upstream
 * connection kept for reuse, whose own "Connection: keep-alive" is a
 * hop-by-hop word for sluice, not for the client. */
size_t sl_http_fwd_drop_keepalive(char *head, size_t len);

#endif

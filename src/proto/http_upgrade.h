/* sluice — which upgrades pass an http listener (RFC 9110 7.8).
 *
 * Pure: a listener lets a request switch protocols only to what its
 * `upgrades` list names. Everything else the request says about switching
 * is removed before it goes upstream, so that an upstream able to speak
 * another protocol on the same connection (h2c: HTTP/2, where sluice no
 * longer sees requests) is never asked to; and a 101 is accepted only when
 * it answers a protocol the request offered and the list allows.
 *
 *   request  Upgrade: h2c, websocket     -->  Upgrade: websocket
 *            Connection: Upgrade, HTTP2-Settings  -->  Connection: Upgrade
 *            HTTP2-Settings: ...          -->  (removed)
 *   request  Upgrade: h2c (nothing allowed left) --> no Upgrade, and
 *            "upgrade" leaves Connection: a plain request
 *   response 101 Upgrade: websocket      --> accepted if offered and allowed */
#ifndef SL_PROTO_HTTP_UPGRADE_H
#define SL_PROTO_HTTP_UPGRADE_H

#include <stddef.h>
#include <stdint.h>

#include "proto/http-t.h"
#include "proto/http_upgrade-t.h"

/* The index in <u> of protocol <p, n> ("name" or "name/version"), or -1
 * when it is not allowed (or not a protocol). */
int sl_http_upgrade_find(const struct sl_http_upgrades *u, const char *p, size_t n);

/* Writes field <f> of request <h> as it goes upstream under <u> into
 * <out> (room for at least <len>: the result is never longer): an Upgrade
 * field keeps only the allowed protocols, and goes when <keep_upgrade> is
 * 0 (sl_http_upgrade_offered() found none allowed); a Connection field
 * loses the options naming what goes ("HTTP2-Settings" always, "upgrade"
 * when <keep_upgrade> is 0); HTTP2-Settings goes. Returns the length
 * written (CRLF included), 0 when the field goes altogether; any other
 * field, or one with nothing to remove, is <line, len> (its whole line as
 * received) unchanged. */
size_t sl_http_upgrade_field(const struct sl_http_head *h, const struct sl_http_field *f,
                             const char *line, size_t len, const struct sl_http_upgrades *u,
                             int keep_upgrade, char *out);

/* The allowed protocols request <h> offers: the mask of <u>'s names its
 * Upgrade fields list (0 for an HTTP/1.0 request, whose Upgrade a server
 * must ignore, or for one that does not also say "Connection: upgrade"). */
uint32_t sl_http_upgrade_offered(const struct sl_http_head *h, const struct sl_http_upgrades *u);

/* A 101 response <res> answers an upgrade the request offered (<offered>,
 * a mask of <u>'s names): it has an Upgrade field, and every protocol it
 * names is one of them. */
int sl_http_upgrade_answers(const struct sl_http_head *res, const struct sl_http_upgrades *u,
                            uint32_t offered);

#endif

/* sluice — types of the upgrades an http listener lets through. */
#ifndef SL_PROTO_HTTP_UPGRADE_T_H
#define SL_PROTO_HTTP_UPGRADE_T_H

#include <stdint.h>

#define SL_HTTP_UPGRADES_MAX 16 /* protocol names in a listener's list, at most */
#define SL_HTTP_UPGRADE_NAME 32 /* bytes of one protocol name, at most */

/* A listener's `upgrades` (docs/http.md, "Upgrade and CONNECT"): the
 * protocol names (RFC 9110 7.8, compared case-insensitively, any version)
 * a request may ask to switch to, and whether CONNECT may go upstream.
 * Bit i of an "offered" mask stands for name[i]. */
struct sl_http_upgrades {
    uint32_t n;
    char     name[SL_HTTP_UPGRADES_MAX][SL_HTTP_UPGRADE_NAME + 1];
    uint8_t  connect;
};

#endif

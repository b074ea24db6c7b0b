/* sluice — host names in the configuration, resolved at load (see
 * conf/resolve.h). The loader's use of it is in check.c (resolve_names). */
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>

#include "conf/resolve.h"
#include "core/resolve.h"

int sl_conf_resolve_system(const char *host, uint16_t port, struct sockaddr_storage *out)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0)
        return rc;
    rc = sl_resolve_pick(res, port, out) == 0 ? 0 : EAI_NODATA;
    freeaddrinfo(res);
    return rc;
}

sl_conf_resolve_fn *sl_conf_resolve = sl_conf_resolve_system;
int sl_conf_no_resolve;

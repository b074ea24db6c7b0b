/* sluice — what limits and identities see of one request, whatever its
 * protocol: exactly one of the views is set. */
#ifndef SL_PROTO_REQ_T_H
#define SL_PROTO_REQ_T_H

#include "proto/http-t.h"
#include "proto/resp-t.h"

struct sl_req {
    const struct sl_resp_req  *resp; /* resp: the command as framed */
    const struct sl_http_head *http; /* http: the request's head */
    uint8_t                    setup;  /* resp: a connection's set-up command, which
                                          only limits naming it count (sess_resp.c) */
};

#endif

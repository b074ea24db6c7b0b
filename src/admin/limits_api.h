/* sluice — the limits API of the admin endpoint: look up and correct one
 * identity (docs/operations.md, "Limits API").
 *
 *   GET  /limits                                     every limit, its numbers
 *   GET  /limits/NAME/identities?top=N&by=COUNT      the identities counted most
 *   GET  /limits/NAME/identities/IDENTITY            one identity's bucket and counts
 *   POST /limits/NAME/identities/IDENTITY/reset      its bucket refilled
 *
 * NAME and IDENTITY are percent-decoded path segments. Answers are JSON,
 * errors too ({"error": "..."}); a store-backed limit's bucket is read from
 * the store without blocking the loop (503 when it cannot answer). */
#ifndef SL_ADMIN_LIMITS_API_H
#define SL_ADMIN_LIMITS_API_H

#include "admin/admin.h"

struct sl_limiter;

/* Serves <call> from limiter <lim> (NULL: no limits), answering <req>
 * exactly once, at once or when the store answers. */
void sl_limits_api(struct sl_limiter *lim, const struct sl_admin_call *call,
                   struct sl_admin_req *req);

#endif

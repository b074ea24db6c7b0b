/* sluice — types of identities: who a request belongs to. */
#ifndef SL_IDENTITY_IDENTITY_T_H
#define SL_IDENTITY_IDENTITY_T_H

#include <stdint.h>

#define SL_ID_MAX 64 /* bytes of an identity value; longer or binary ones are hashed */

/* What a connection has told us about itself so far. */
struct sl_ident_state {
    char    user[SL_ID_MAX + 1]; /* AUTH / HELLO AUTH user ("default" for 1-arg AUTH), "" if none */
    char    name[SL_ID_MAX + 1]; /* CLIENT SETNAME / HELLO SETNAME, "" if none (or reset) */
    char    ip[48];              /* client address without port, e.g. "127.0.0.1", "::1" */
};

#endif

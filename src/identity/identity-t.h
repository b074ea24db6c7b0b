/* sluice — types of identities: who a request belongs to. */
#ifndef SL_IDENTITY_IDENTITY_T_H
#define SL_IDENTITY_IDENTITY_T_H

#include <stdint.h>

/* An identity names its source, so that no source can stand in for
 * another: "user:carol" (resp_user), "name:carol" (client_name),
 * "prefix:tenant" (key_prefix), "ip:127.0.0.1" (client_ip), "all" (none),
 * and for header:NAME only the hashed form "header#..." (a header value is
 * often a secret: an API key).
 * A value that cannot be kept as is (see identity.h) becomes its source's
 * hashed form, "name#" + 16 hex digits, which no literal value can take:
 * a literal always follows a ':'. */
#define SL_ID_VALUE_MAX 64                    /* bytes of a value kept as is; longer: hashed */
#define SL_ID_MAX       (SL_ID_VALUE_MAX + 8) /* bytes of an identity: "prefix:" + value */

/* What a connection has told us about itself so far, each in identity form
 * ("user:alice", "name#03b69dd1582e6208"), "" if not told. */
struct sl_ident_state {
    char    user[SL_ID_MAX + 1]; /* AUTH / HELLO AUTH user ("user:default" for 1-arg AUTH) */
    char    name[SL_ID_MAX + 1]; /* CLIENT SETNAME / HELLO SETNAME ("" once reset) */
    char    tls[SL_ID_MAX + 1];  /* the client certificate's CN or first SAN ("tls:carol"), ""
                                    without a verified one */
    char    ip[48];              /* client address without port, e.g. "127.0.0.1", "::1" (bare) */
    char    last[SL_ID_MAX + 1]; /* http: the identity the connection's latest request head
                                    gave (byte limits charge it); "" before one */
};

#endif

/* sluice — one error space.
 *
 * sluice's own codes live beside libuv's negative errno values, so a function
 * can return either and sl_strerror() names both. 0 is success everywhere. */
#ifndef SL_CORE_ERR_H
#define SL_CORE_ERR_H

enum sl_err {
    SL_OK       = 0,
    SL_EPROTO   = -4001, /* malformed input from a peer */
    SL_ELIMIT   = -4002, /* over a limit */
    SL_ESTORE   = -4003, /* the quota store failed or timed out */
    SL_ECONF    = -4004, /* bad configuration */
    SL_ETOOBIG  = -4005, /* a size from the wire passed its cap */
    SL_ENOMEM   = -4006, /* allocation failed */
    SL_EAGAIN   = -4007, /* not enough input yet */
    SL_ECLOSED  = -4008, /* the peer or the session is gone */
};

/* Returns a static description of <err>: a sluice code or a libuv code. */
const char *sl_strerror(int err);

#endif

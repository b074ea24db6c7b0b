/* sluice — types of the RESP command classes for pooled listeners
 * (`upstream_pool = N`): what a command needs of the upstream connection it
 * runs on, and the pool key a client's connection state selects. */
#ifndef SL_PROTO_RESP_CMD_T_H
#define SL_PROTO_RESP_CMD_T_H

#include <stdint.h>

/* What a request needs of the upstream connection it is written to. */
enum sl_rcmd_class {
    SL_RCMD_POOL = 0, /* stateless: any connection of the client's pool key */
    SL_RCMD_PIN,      /* leaves (or may leave) state on the connection: the
                         client gets a connection of its own (pin bits below) */
    SL_RCMD_KEY,      /* moves the client to another pool key once the upstream
                         answers it OK (AUTH, HELLO, SELECT, RESET) */
    SL_RCMD_LOCAL,    /* answered by sluice for this client (enum sl_rlocal) */
};

/* Why a client is pinned. A request sets some bits when it is written
 * upstream; each bit ends as its comment says. Bits in SL_PIN_RESET_CLEARS
 * are state a RESET takes off the connection; the others (SL_PIN_DIRTY) are
 * not: such a connection is closed when its client leaves, never returned. */
enum sl_pin {
    SL_PIN_MULTI    = 1u << 0,  /* MULTI: until EXEC or DISCARD answers */
    SL_PIN_WATCH    = 1u << 1,  /* WATCH: until EXEC, DISCARD or UNWATCH answers */
    SL_PIN_BLOCK    = 1u << 2,  /* a blocking command: until it answers */
    SL_PIN_SUB      = 1u << 3,  /* (P|S)SUBSCRIBE: until a confirmation counts 0 */
    SL_PIN_UNSUB    = 1u << 4,  /* (P|S)UNSUBSCRIBE outside a pin: until it answers */
    SL_PIN_MONITOR  = 1u << 5,  /* MONITOR: until RESET */
    SL_PIN_TRACKING = 1u << 6,  /* CLIENT TRACKING ON: until OFF answers OK */
    SL_PIN_REPLY    = 1u << 7,  /* CLIENT REPLY OFF: until CLIENT REPLY ON */
    SL_PIN_NEXT     = 1u << 8,  /* CLIENT REPLY SKIP, ASKING: until the next
                                   request is written on the pinned connection */
    SL_PIN_NOEVICT  = 1u << 9,  /* CLIENT NO-EVICT ON: until OFF answers OK */
    SL_PIN_NOTOUCH  = 1u << 10, /* CLIENT NO-TOUCH ON: until OFF answers OK */
    SL_PIN_READONLY = 1u << 11, /* READONLY: until READWRITE answers OK */
    SL_PIN_DEBUG    = 1u << 12, /* DEBUG, SCRIPT KILL, FUNCTION KILL, SHUTDOWN:
                                   until it answers */
    SL_PIN_ODD      = 1u << 13, /* a state command sluice cannot read (SELECT x,
                                   CLIENT TRACKING maybe, AUTH of a user name
                                   longer than the key holds): ends if it fails,
                                   else until RESET */
    SL_PIN_UNKNOWN  = 1u << 14, /* not known to be stateless: ends if it fails,
                                   else for the client's life */
    SL_PIN_SCRIPT   = 1u << 15, /* SCRIPT DEBUG YES|SYNC: for the client's life */
    SL_PIN_REPLICA  = 1u << 16, /* SYNC, PSYNC, REPLCONF: for the client's life */
    SL_PIN_STICKY   = 1u << 17, /* HELLO whose SETNAME sluice cannot check: Redis
                                   may authenticate, then refuse the name, so
                                   even its error may leave a new user: until
                                   RESET */
};

/* Bits that end with their own request's answer (counted, see sl_rcmd_pin). */
#define SL_PIN_ONCE   (SL_PIN_BLOCK | SL_PIN_UNSUB | SL_PIN_DEBUG)
/* Bits whose state a RESET does not clear. */
#define SL_PIN_DIRTY  (SL_PIN_UNKNOWN | SL_PIN_SCRIPT | SL_PIN_REPLICA)
/* Bits whose request sets no state when the upstream refuses it. */
#define SL_PIN_UNDO   (SL_PIN_WATCH | SL_PIN_SUB | SL_PIN_MONITOR | SL_PIN_TRACKING | \
                       SL_PIN_NOEVICT | SL_PIN_NOTOUCH | SL_PIN_READONLY | SL_PIN_ODD | \
                       SL_PIN_UNKNOWN | SL_PIN_SCRIPT)
#define SL_PIN_RESET_CLEARS (~(uint32_t)SL_PIN_DIRTY & ((SL_PIN_STICKY << 1) - 1))

/* What sluice answers itself on a pooled listener (docs/resp.md). */
enum sl_rlocal {
    SL_RLOCAL_NONE = 0,
    SL_RLOCAL_EMPTY,   /* `*0`, a blank inline line: nothing, no reply */
    SL_RLOCAL_QUIT,    /* +OK, then the client's connection ends */
    SL_RLOCAL_SETNAME, /* CLIENT SETNAME name: kept per client */
    SL_RLOCAL_GETNAME, /* CLIENT GETNAME: the kept name */
    SL_RLOCAL_SETINFO, /* CLIENT SETINFO LIB-NAME|LIB-VER value: kept per client */
    SL_RLOCAL_ID,      /* CLIENT ID: sluice's id of this client */
    SL_RLOCAL_INFO,    /* CLIENT INFO: this client's line */
    SL_RLOCAL_LIST,    /* CLIENT LIST: this client's line only */
    SL_RLOCAL_KILL,    /* CLIENT KILL: matches no other client */
    SL_RLOCAL_UNBLOCK, /* CLIENT UNBLOCK: no client of this listener to unblock: 0 */
};

/* What the options of a request sluice answers itself say (<opt>). */
enum sl_rlopt {
    SL_RLOPT_NONE = 0,
    SL_RLOPT_LIB_NAME,   /* CLIENT SETINFO LIB-NAME value */
    SL_RLOPT_LIB_VER,    /* CLIENT SETINFO LIB-VER value (another attribute: NONE,
                            which Redis answers "Unrecognized option") */
    SL_RLOPT_KILL_OLD,   /* CLIENT KILL addr:port, the old form ("No such client") */
    SL_RLOPT_LIST_EMPTY, /* CLIENT LIST TYPE of a type no client of the caller's
                            view has: an empty list */
    SL_RLOPT_LIST_ERR,   /* CLIENT LIST with options it reads as a syntax error */
    SL_RLOPT_LIST_BADID, /* CLIENT LIST ID with an id that is not an integer */
    SL_RLOPT_LIST_ID,    /* CLIENT LIST ID id...: the caller's line when one is its
                            id (sl_rcmd_list_id), else an empty list */
};

/* Longest user name a pool key holds (bytes); no more of the request's
 * argument is captured (SL_RESP_CAPTURE_LEN). */
#define SL_POOL_USER_MAX 64

/* What a connection's state makes visible to a stateless command: requests
 * of clients with equal keys may share upstream connections. */
struct sl_pool_key {
    uint8_t user_len;
    uint8_t resp;                     /* 2 or 3 */
    int32_t db;
    char    user[SL_POOL_USER_MAX + 1]; /* NUL-terminated, zero-padded */
};

/* What a KEY request changes (enum sl_rkey bits in <set>). */
enum sl_rkey {
    SL_RKEY_USER  = 1u << 0,
    SL_RKEY_DB    = 1u << 1,
    SL_RKEY_RESP  = 1u << 2,
    SL_RKEY_RESET = 1u << 3, /* back to the default key before the rest */
};

/* What sl_rcmd_class() read off one request. Nothing in it points into the
 * request; argument indexes refer to the request's captured arguments. */
struct sl_rcmd_info {
    uint8_t  cls;      /* enum sl_rcmd_class */
    uint8_t  local;    /* LOCAL: enum sl_rlocal */
    uint8_t  ends_any; /* <ends> end on any answer (EXEC, DISCARD), not only OK */
    uint8_t  slow;     /* POOL: a script or function (EVAL*, FCALL*): it may run
                          long while Redis answers other connections (-BUSY past
                          busy-reply-threshold), so nothing of another client
                          may queue behind it on a shared connection */
    uint32_t pin;      /* PIN: enum sl_pin bits the request starts */
    uint32_t ends;     /* enum sl_pin bits its answer ends (any class) */
    /* KEY: the new key's parts, those named in <set> */
    uint8_t  set;      /* enum sl_rkey bits */
    uint8_t  pass_arg; /* AUTH, HELLO AUTH: index of the password (0: none);
                          it is captured cut when longer than
                          SL_RESP_CAPTURE_LEN (the request's arglen tells) */
    uint8_t  name_arg; /* HELLO SETNAME, CLIENT SETNAME: index of the name; CLIENT
                          SETINFO: of the value (0: none) */
    uint8_t  opt;      /* LOCAL: what its options say (enum sl_rlopt) */
    uint8_t  resp;     /* 2 or 3 */
    int32_t  db;
    uint8_t  user_len;
    char     user[SL_POOL_USER_MAX + 1];
};

#define SL_PIN_NBITS 18 /* bits of enum sl_pin */

/* A client's pins: which state its upstream connection holds for it. */
struct sl_rcmd_pin {
    uint32_t why;   /* enum sl_pin bits in force (SL_PIN_ONCE ones: see <once>) */
    uint32_t once;  /* requests written whose answer ends a SL_PIN_ONCE bit */
    /* Pipelined requests share bits: a bit stays while a request that
     * wants it still awaits its answer, whatever an earlier one answered.
     * Requests are numbered as they are written (<seq>, the token of
     * sl_rcmd_pin_sent); per bit, the last one that wants it, and the one
     * whose answer decides whether it stays (0: a request that wants it
     * succeeded, so only an end takes it). */
    uint32_t seq;
    uint32_t last[SL_PIN_NBITS];
    uint32_t since[SL_PIN_NBITS];
    /* per bit, the last request that wants it written while its reply is
     * skipped (taken as a success when written): an end or a refusal
     * before it leaves the bit held, not to the answers after it */
    uint32_t unseen[SL_PIN_NBITS];
};

#endif

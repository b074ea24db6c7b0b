/* sluice — RESP command classes for pooled listeners (see resp_cmd.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "proto/resp_cmd.h"

/* What a command name means before its arguments are read. */
enum code {
    C_POOL = 0, C_CLIENT, C_XREAD, C_XREADGROUP, C_BLOCK, C_MULTI, C_WATCH, C_UNWATCH,
    C_EXEC, C_SUB, C_UNSUB, C_MONITOR, C_READONLY, C_READWRITE, C_ASKING, C_DEBUG,
    C_REPLICA, C_SCRIPT, C_AUTH, C_HELLO, C_SELECT, C_RESET, C_QUIT, C_FUNCTION,
    C_SHUTDOWN, C_RUN,
};

/* Every command of Redis 7.0's command table (`COMMAND LIST` of
 * redis-server 7.0.15, checked by tests/integration/test_resp_cmd.c against
 * the running Redis), plus those Redis 7.2 added (WAITAOF) and 7.4's hash
 * field expiry: C_POOL (and C_RUN, the scripts) marks the allow-list of
 * stateless ones. Sorted by name (lower case, strcmp order) for bsearch.
 *
 * Stateless means the command leaves nothing on the connection that a
 * later command of another client would see. That holds for every data
 * command, for the server-wide administration (CONFIG, FLUSHALL, SWAPDB:
 * its effect is the server's, which every connection sees alike, pooled or
 * not) and for scripts: EVAL, EVALSHA and FCALL keep no state per
 * connection (since Redis 7 a SELECT inside a script no longer changes the
 * caller's database); they are C_RUN only because they may run long (see
 * sl_rcmd_info.slow). Containers (ACL, CONFIG, CLUSTER ...) are stateless
 * in every subcommand, except CLIENT and SCRIPT, read by argument. */
static const struct cmd { const char *name; uint8_t code; } cmds[] = {
    { "acl", C_POOL }, { "append", C_POOL }, { "asking", C_ASKING }, { "auth", C_AUTH },
    { "bgrewriteaof", C_POOL }, { "bgsave", C_POOL }, { "bitcount", C_POOL },
    { "bitfield", C_POOL }, { "bitfield_ro", C_POOL }, { "bitop", C_POOL },
    { "bitpos", C_POOL }, { "blmove", C_BLOCK }, { "blmpop", C_BLOCK }, { "blpop", C_BLOCK },
    { "brpop", C_BLOCK }, { "brpoplpush", C_BLOCK }, { "bzmpop", C_BLOCK },
    { "bzpopmax", C_BLOCK }, { "bzpopmin", C_BLOCK }, { "client", C_CLIENT },
    { "cluster", C_POOL }, { "command", C_POOL }, { "config", C_POOL }, { "copy", C_POOL },
    { "dbsize", C_POOL }, { "debug", C_DEBUG }, { "decr", C_POOL }, { "decrby", C_POOL },
    { "del", C_POOL }, { "discard", C_EXEC }, { "dump", C_POOL }, { "echo", C_POOL },
    { "eval", C_RUN }, { "eval_ro", C_RUN }, { "evalsha", C_RUN },
    { "evalsha_ro", C_RUN }, { "exec", C_EXEC }, { "exists", C_POOL }, { "expire", C_POOL },
    { "expireat", C_POOL }, { "expiretime", C_POOL }, { "failover", C_POOL },
    { "fcall", C_RUN }, { "fcall_ro", C_RUN }, { "flushall", C_POOL },
    { "flushdb", C_POOL }, { "function", C_FUNCTION }, { "geoadd", C_POOL },
    { "geodist", C_POOL }, { "geohash", C_POOL }, { "geopos", C_POOL },
    { "georadius", C_POOL }, { "georadius_ro", C_POOL }, { "georadiusbymember", C_POOL },
    { "georadiusbymember_ro", C_POOL }, { "geosearch", C_POOL },
    { "geosearchstore", C_POOL }, { "get", C_POOL }, { "getbit", C_POOL },
    { "getdel", C_POOL }, { "getex", C_POOL }, { "getrange", C_POOL }, { "getset", C_POOL },
    { "hdel", C_POOL }, { "hello", C_HELLO }, { "hexists", C_POOL }, { "hexpire", C_POOL },
    { "hexpireat", C_POOL }, { "hexpiretime", C_POOL }, { "hget", C_POOL },
    { "hgetall", C_POOL }, { "hincrby", C_POOL }, { "hincrbyfloat", C_POOL },
    { "hkeys", C_POOL }, { "hlen", C_POOL }, { "hmget", C_POOL }, { "hmset", C_POOL },
    { "hpersist", C_POOL }, { "hpexpire", C_POOL }, { "hpexpireat", C_POOL },
    { "hpexpiretime", C_POOL }, { "hpttl", C_POOL }, { "hrandfield", C_POOL },
    { "hscan", C_POOL }, { "hset", C_POOL }, { "hsetnx", C_POOL }, { "hstrlen", C_POOL },
    { "httl", C_POOL }, { "hvals", C_POOL }, { "incr", C_POOL }, { "incrby", C_POOL },
    { "incrbyfloat", C_POOL }, { "info", C_POOL }, { "keys", C_POOL },
    { "lastsave", C_POOL }, { "latency", C_POOL }, { "lcs", C_POOL }, { "lindex", C_POOL },
    { "linsert", C_POOL }, { "llen", C_POOL }, { "lmove", C_POOL }, { "lmpop", C_POOL },
    { "lolwut", C_POOL }, { "lpop", C_POOL }, { "lpos", C_POOL }, { "lpush", C_POOL },
    { "lpushx", C_POOL }, { "lrange", C_POOL }, { "lrem", C_POOL }, { "lset", C_POOL },
    { "ltrim", C_POOL }, { "memory", C_POOL }, { "mget", C_POOL }, { "migrate", C_POOL },
    { "module", C_POOL }, { "monitor", C_MONITOR }, { "move", C_POOL }, { "mset", C_POOL },
    { "msetnx", C_POOL }, { "multi", C_MULTI }, { "object", C_POOL }, { "persist", C_POOL },
    { "pexpire", C_POOL }, { "pexpireat", C_POOL }, { "pexpiretime", C_POOL },
    { "pfadd", C_POOL }, { "pfcount", C_POOL }, { "pfdebug", C_POOL }, { "pfmerge", C_POOL },
    { "pfselftest", C_POOL }, { "ping", C_POOL }, { "psetex", C_POOL },
    { "psubscribe", C_SUB }, { "psync", C_REPLICA }, { "pttl", C_POOL },
    { "publish", C_POOL }, { "pubsub", C_POOL }, { "punsubscribe", C_UNSUB },
    { "quit", C_QUIT }, { "randomkey", C_POOL }, { "readonly", C_READONLY },
    { "readwrite", C_READWRITE }, { "rename", C_POOL }, { "renamenx", C_POOL },
    { "replconf", C_REPLICA }, { "replicaof", C_POOL }, { "reset", C_RESET },
    { "restore", C_POOL }, { "restore-asking", C_POOL }, { "role", C_POOL },
    { "rpop", C_POOL }, { "rpoplpush", C_POOL }, { "rpush", C_POOL }, { "rpushx", C_POOL },
    { "sadd", C_POOL }, { "save", C_POOL }, { "scan", C_POOL }, { "scard", C_POOL },
    { "script", C_SCRIPT }, { "sdiff", C_POOL }, { "sdiffstore", C_POOL },
    { "select", C_SELECT }, { "set", C_POOL }, { "setbit", C_POOL }, { "setex", C_POOL },
    { "setnx", C_POOL }, { "setrange", C_POOL }, { "shutdown", C_SHUTDOWN },
    { "sinter", C_POOL }, { "sintercard", C_POOL }, { "sinterstore", C_POOL },
    { "sismember", C_POOL }, { "slaveof", C_POOL }, { "slowlog", C_POOL },
    { "smembers", C_POOL }, { "smismember", C_POOL }, { "smove", C_POOL }, { "sort", C_POOL },
    { "sort_ro", C_POOL }, { "spop", C_POOL }, { "spublish", C_POOL },
    { "srandmember", C_POOL }, { "srem", C_POOL }, { "sscan", C_POOL },
    { "ssubscribe", C_SUB }, { "strlen", C_POOL }, { "subscribe", C_SUB },
    { "substr", C_POOL }, { "sunion", C_POOL }, { "sunionstore", C_POOL },
    { "sunsubscribe", C_UNSUB }, { "swapdb", C_POOL }, { "sync", C_REPLICA },
    { "time", C_POOL }, { "touch", C_POOL }, { "ttl", C_POOL }, { "type", C_POOL },
    { "unlink", C_POOL }, { "unsubscribe", C_UNSUB }, { "unwatch", C_UNWATCH },
    { "wait", C_BLOCK }, { "waitaof", C_BLOCK }, { "watch", C_WATCH }, { "xack", C_POOL },
    { "xadd", C_POOL }, { "xautoclaim", C_POOL }, { "xclaim", C_POOL }, { "xdel", C_POOL },
    { "xgroup", C_POOL }, { "xinfo", C_POOL }, { "xlen", C_POOL }, { "xpending", C_POOL },
    { "xrange", C_POOL }, { "xread", C_XREAD }, { "xreadgroup", C_XREADGROUP },
    { "xrevrange", C_POOL }, { "xsetid", C_POOL }, { "xtrim", C_POOL }, { "zadd", C_POOL },
    { "zcard", C_POOL }, { "zcount", C_POOL }, { "zdiff", C_POOL }, { "zdiffstore", C_POOL },
    { "zincrby", C_POOL }, { "zinter", C_POOL }, { "zintercard", C_POOL },
    { "zinterstore", C_POOL }, { "zlexcount", C_POOL }, { "zmpop", C_POOL },
    { "zmscore", C_POOL }, { "zpopmax", C_POOL }, { "zpopmin", C_POOL },
    { "zrandmember", C_POOL }, { "zrange", C_POOL }, { "zrangebylex", C_POOL },
    { "zrangebyscore", C_POOL }, { "zrangestore", C_POOL }, { "zrank", C_POOL },
    { "zrem", C_POOL }, { "zremrangebylex", C_POOL }, { "zremrangebyrank", C_POOL },
    { "zremrangebyscore", C_POOL }, { "zrevrange", C_POOL }, { "zrevrangebylex", C_POOL },
    { "zrevrangebyscore", C_POOL }, { "zrevrank", C_POOL }, { "zscan", C_POOL },
    { "zscore", C_POOL }, { "zunion", C_POOL }, { "zunionstore", C_POOL },
};
#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))
#define NAME_MAX_LEN 24 /* longer than any name above: unknown */

static int cmd_cmp(const void *key, const void *elem)
{
    return strcmp((const char *)key, ((const struct cmd *)elem)->name);
}

/* The table's entry for command name <s> (<n> bytes, any case), or NULL. */
static const struct cmd *lookup(const char *s, uint32_t n)
{
    char low[NAME_MAX_LEN + 1];
    if (n == 0 || n > NAME_MAX_LEN)
        return NULL;
    for (uint32_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '\0')
            return NULL; /* a NUL inside the name: no command has one */
        low[i] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    }
    low[n] = '\0';
    return bsearch(low, cmds, NCMDS, sizeof(cmds[0]), cmd_cmp);
}

/* Argument <i> is <lit>, in any case, whole (not cut by the capture). */
static int arg_is(const struct sl_resp_req *r, unsigned i, const char *lit)
{
    size_t n = strlen(lit);
    return i < r->ncap && r->arglen[i] == n && strncasecmp(r->argv[i], lit, n) == 0;
}

/* Argument <i> as Redis reads a 64-bit integer (string2ll): an optional
 * '-', then "0" alone or a digit 1-9 and digits; nothing else (no '+', no
 * spaces, no leading zeros). 0 when it is not one. */
static int arg_ll(const struct sl_resp_req *r, unsigned i, long long *v)
{
    if (i >= r->ncap || r->arglen[i] == 0 || r->arglen[i] > 20)
        return 0;
    const char *s = r->argv[i];
    uint32_t n = r->arglen[i], k = 0;
    int neg = 0;
    if (s[0] == '-') {
        neg = 1;
        k = 1;
    }
    if (k == n)
        return 0;
    if (s[k] == '0')
        return n == 1 ? (*v = 0, 1) : 0;
    unsigned long long acc = 0;
    for (; k < n; k++) {
        if (s[k] < '0' || s[k] > '9')
            return 0;
        if (acc > (~0ull - 9) / 10)
            return 0;
        acc = acc * 10 + (unsigned)(s[k] - '0');
    }
    if (neg ? acc > (unsigned long long)9223372036854775807ll + 1 : acc > 9223372036854775807ull)
        return 0;
    *v = neg ? (long long)(0 - acc) : (long long)acc;
    return 1;
}

static int pin(struct sl_rcmd_info *o, uint32_t why)
{
    o->cls = SL_RCMD_PIN;
    o->pin = why;
    return o->cls;
}

static int local(struct sl_rcmd_info *o, uint8_t what)
{
    o->cls = SL_RCMD_LOCAL;
    o->local = what;
    return o->cls;
}

/* A stateless command that also ends pins (when the client has them, it
 * goes to its own connection anyway; without, it is harmless anywhere). */
static int pool_ending(struct sl_rcmd_info *o, uint32_t ends, int any)
{
    o->cls = SL_RCMD_POOL;
    o->ends = ends;
    o->ends_any = (uint8_t)any;
    return o->cls;
}

/* XREAD [COUNT n] [BLOCK ms] STREAMS k.. id.. and XREADGROUP GROUP g c
 * [COUNT n] [BLOCK ms] [NOACK] STREAMS ...: the options are read as Redis
 * reads them, in any order and repeated, each with its value, up to
 * STREAMS; what follows are stream names and ids, so a stream named BLOCK
 * does not block. Options not captured (too many before STREAMS): pin. */
static int xread(const struct sl_resp_req *r, struct sl_rcmd_info *o, int group)
{
    for (unsigned i = 1; i < r->argc; i++) {
        unsigned more = r->argc - i - 1;
        if (i >= r->ncap)
            return pin(o, SL_PIN_BLOCK); /* could not see: maybe blocking */
        if (arg_is(r, i, "BLOCK") && more >= 1)
            return pin(o, SL_PIN_BLOCK);
        if (arg_is(r, i, "COUNT") && more >= 1)
            i++;
        else if (arg_is(r, i, "STREAMS") && more >= 1)
            break;
        else if (group && arg_is(r, i, "GROUP") && more >= 2)
            i += 2;
        else if (group && arg_is(r, i, "NOACK"))
            ;
        else
            break; /* Redis answers a syntax error: nothing blocks */
    }
    o->cls = SL_RCMD_POOL;
    return o->cls;
}

/* Argument <i> is <lit> read as Redis reads the options of CLIENT
 * SETINFO, LIST and KILL: a C string, letters in either case (its text
 * ends at a NUL, as there). */
static int arg_cstr_is(const struct sl_resp_req *r, unsigned i, const char *lit)
{
    return i < r->ncap && strcasecmp(r->argv[i], lit) == 0;
}

/* The options of CLIENT SETINFO, KILL and LIST (arity checked), which
 * sluice answers itself as Redis would on a server where the caller is
 * the only client (docs/resp.md, "What sluice answers itself"); -1: one
 * Redis refuses with words of its own (an unknown client type, which it
 * quotes): it goes to Redis, which lists nothing then. */
static int local_opt(const struct sl_resp_req *r, uint8_t what, struct sl_rcmd_info *o)
{
    switch (what) {
    case SL_RLOCAL_SETINFO:
        o->name_arg = 3;
        return arg_cstr_is(r, 2, "LIB-NAME")  ? SL_RLOPT_LIB_NAME
               : arg_cstr_is(r, 2, "LIB-VER") ? SL_RLOPT_LIB_VER
                                              : SL_RLOPT_NONE;
    case SL_RLOCAL_KILL:
        return r->argc == 3 ? SL_RLOPT_KILL_OLD : SL_RLOPT_NONE;
    case SL_RLOCAL_LIST:
        /* Redis reads TYPE t (alone), or ID and one id or more */
        if (r->argc == 2)
            return SL_RLOPT_NONE;
        if (r->argc == 4 && arg_cstr_is(r, 2, "TYPE")) {
            if (arg_cstr_is(r, 3, "normal"))
                return SL_RLOPT_NONE;
            static const char *const other[] = { "master", "replica", "slave", "pubsub" };
            for (size_t k = 0; k < sizeof(other) / sizeof(other[0]); k++)
                if (arg_cstr_is(r, 3, other[k]))
                    return SL_RLOPT_LIST_EMPTY;
            return -1;
        }
        if (r->argc > 3 && arg_cstr_is(r, 2, "ID")) {
            /* every id an integer as Redis reads one; ids past those
             * captured are taken as ids of no client */
            long long id;
            for (unsigned i = 3; i < r->argc && i < r->ncap; i++)
                if (!arg_ll(r, i, &id))
                    return SL_RLOPT_LIST_BADID;
            return SL_RLOPT_LIST_ID;
        }
        return SL_RLOPT_LIST_ERR;
    default:
        return SL_RLOPT_NONE;
    }
}

/* CLIENT <sub> ... */
static int client(const struct sl_resp_req *r, struct sl_rcmd_info *o)
{
    if (r->argc < 2)
        return pin(o, SL_PIN_ODD); /* Redis answers an arity error */
    if (arg_is(r, 1, "SETNAME")) {
        /* kept by sluice, which checks the name as Redis does; an arity
         * error, or a name longer than the framer keeps, goes to Redis */
        if (r->argc != 3 || r->arglen[2] > SL_RESP_CAPTURE_LEN)
            return pin(o, SL_PIN_ODD);
        o->name_arg = 2;
        return local(o, SL_RLOCAL_SETNAME);
    }
    /* the argument counts Redis accepts (min, max; 0: no max): outside
     * them Redis answers its arity error, so they go to Redis */
    static const struct { const char *sub; uint8_t what, min, max; } loc[] = {
        { "GETNAME", SL_RLOCAL_GETNAME, 2, 2 }, { "SETINFO", SL_RLOCAL_SETINFO, 4, 4 },
        { "ID", SL_RLOCAL_ID, 2, 2 },           { "INFO", SL_RLOCAL_INFO, 2, 2 },
        { "LIST", SL_RLOCAL_LIST, 2, 0 },       { "KILL", SL_RLOCAL_KILL, 3, 0 },
        { "UNBLOCK", SL_RLOCAL_UNBLOCK, 3, 4 },
    };
    for (size_t k = 0; k < sizeof(loc) / sizeof(loc[0]); k++) {
        if (!arg_is(r, 1, loc[k].sub))
            continue;
        if (r->argc < loc[k].min || (loc[k].max > 0 && r->argc > loc[k].max))
            return pin(o, SL_PIN_ODD); /* Redis answers an arity error */
        int opt = local_opt(r, loc[k].what, o);
        if (opt < 0)
            return (o->cls = SL_RCMD_POOL);
        o->opt = (uint8_t)opt;
        return local(o, loc[k].what);
    }
    /* Server-wide, or reading state a shared connection never has on
     * (tracking, its redirection): the same answer on any connection. */
    static const char *const stateless[] = { "PAUSE", "UNPAUSE", "HELP", "GETREDIR",
                                             "TRACKINGINFO", "CACHING" };
    for (size_t k = 0; k < sizeof(stateless) / sizeof(stateless[0]); k++)
        if (arg_is(r, 1, stateless[k]))
            return (o->cls = SL_RCMD_POOL);
    if (arg_is(r, 1, "REPLY")) {
        if (r->argc != 3)
            return pin(o, SL_PIN_ODD); /* Redis answers an arity error */
        if (arg_is(r, 2, "ON"))
            return pool_ending(o, SL_PIN_REPLY, 0);
        if (arg_is(r, 2, "OFF"))
            return pin(o, SL_PIN_REPLY);
        if (arg_is(r, 2, "SKIP"))
            return pin(o, SL_PIN_NEXT);
        return pin(o, SL_PIN_ODD);
    }
    /* CLIENT TRACKING on|off [options], CLIENT NO-EVICT on|off, CLIENT
     * NO-TOUCH on|off: ON is state on the connection, OFF its default. */
    static const struct { const char *sub; uint32_t bit; } sw[] = {
        { "TRACKING", SL_PIN_TRACKING }, { "NO-EVICT", SL_PIN_NOEVICT },
        { "NO-TOUCH", SL_PIN_NOTOUCH },
    };
    for (size_t k = 0; k < sizeof(sw) / sizeof(sw[0]); k++) {
        if (!arg_is(r, 1, sw[k].sub))
            continue;
        if (arg_is(r, 2, "ON"))
            return pin(o, sw[k].bit);
        if (arg_is(r, 2, "OFF")) {
            /* TRACKING OFF takes no options; with some it fails. */
            return pool_ending(o, sw[k].bit, 0);
        }
        return pin(o, SL_PIN_ODD);
    }
    return pin(o, SL_PIN_UNKNOWN);
}

/* Copies user name argument <i> into the key parts; 0 when it is longer
 * than a key holds (or than was captured). */
static int take_user(const struct sl_resp_req *r, unsigned i, struct sl_rcmd_info *o)
{
    if (i >= r->ncap || r->arglen[i] > SL_POOL_USER_MAX || r->arglen[i] > SL_RESP_CAPTURE_LEN)
        return 0;
    if (memchr(r->argv[i], '\0', r->arglen[i]) != NULL)
        return 0; /* a NUL in a user name: not one the key can hold */
    memcpy(o->user, r->argv[i], r->arglen[i]);
    o->user[r->arglen[i]] = '\0';
    o->user_len = (uint8_t)r->arglen[i];
    o->set |= SL_RKEY_USER;
    return 1;
}

static int key(struct sl_rcmd_info *o)
{
    o->cls = SL_RCMD_KEY;
    return o->cls;
}

/* AUTH password | AUTH user password (one argument: the user "default"). */
static int auth(const struct sl_resp_req *r, struct sl_rcmd_info *o)
{
    if (r->argc == 2) {
        memcpy(o->user, "default", 8);
        o->user_len = 7;
        o->set = SL_RKEY_USER;
        o->pass_arg = 1;
        return key(o);
    }
    if (r->argc == 3) {
        if (!take_user(r, 1, o))
            return pin(o, SL_PIN_ODD);
        o->pass_arg = 2;
        return key(o);
    }
    /* a syntax error upstream; on the client's key's connection it changes
     * nothing, but sluice sends it where nothing else is: pinned, ending with
     * its error */
    return pin(o, SL_PIN_ODD);
}

/* HELLO [protover [AUTH user pass] [SETNAME name]], read as Redis reads it. */
static int hello(const struct sl_resp_req *r, struct sl_rcmd_info *o)
{
    if (r->argc == 1)
        return key(o); /* changes nothing: the key stays */
    long long ver;
    if (!arg_ll(r, 1, &ver) || (ver != 2 && ver != 3))
        return pin(o, SL_PIN_ODD); /* Redis answers an error (NOPROTO) */
    o->resp = (uint8_t)ver;
    o->set |= SL_RKEY_RESP;
    int sticky = 0;
    for (unsigned i = 2; i < r->argc; i++) {
        unsigned more = r->argc - i - 1;
        if (arg_is(r, i, "AUTH") && more >= 2) {
            o->set &= (uint8_t)~SL_RKEY_USER;
            if (!take_user(r, i + 1, o) || i + 2 >= r->ncap)
                return pin(o, SL_PIN_ODD);
            o->pass_arg = (uint8_t)(i + 2);
            i += 2;
        } else if (arg_is(r, i, "SETNAME") && more >= 1) {
            if (i + 1 >= r->ncap)
                return pin(o, SL_PIN_ODD);
            o->name_arg = (uint8_t)(i + 1);
            i += 1;
            /* Redis authenticates before it checks the name: a name it
             * refuses answers an error after the user changed */
            if (r->arglen[i] > SL_RESP_CAPTURE_LEN || !sl_rcmd_name_ok(r->argv[i], r->arglen[i]))
                sticky = 1;
        } else {
            return pin(o, SL_PIN_ODD); /* a syntax error, or not captured */
        }
    }
    if (sticky)
        return pin(o, SL_PIN_STICKY);
    return key(o);
}

int sl_rcmd_class(const struct sl_resp_req *r, struct sl_rcmd_info *o)
{
    memset(o, 0, sizeof(*o));
    if (r->argc == 0)
        return local(o, SL_RLOCAL_EMPTY);
    const struct cmd *c = r->ncap > 0 ? lookup(r->argv[0], r->arglen[0]) : NULL;
    if (c == NULL)
        return pin(o, SL_PIN_UNKNOWN);
    switch (c->code) {
    case C_POOL:       o->cls = SL_RCMD_POOL; return o->cls;
    case C_RUN:        /* stateless too, but see <slow> (resp_cmd-t.h) */
                       o->slow = 1;
                       o->cls = SL_RCMD_POOL;
                       return o->cls;
    case C_CLIENT:     return client(r, o);
    case C_XREAD:      return xread(r, o, 0);
    case C_XREADGROUP: return xread(r, o, 1);
    case C_BLOCK:      return pin(o, SL_PIN_BLOCK);
    case C_MULTI:      return pin(o, SL_PIN_MULTI);
    case C_WATCH:      return pin(o, SL_PIN_WATCH);
    case C_UNWATCH:    return pool_ending(o, SL_PIN_WATCH, 1);
    case C_EXEC:       /* EXEC and DISCARD end both, whatever they answer
                        * (EXECABORT too); without MULTI, an error anywhere */
                       return pool_ending(o, SL_PIN_MULTI | SL_PIN_WATCH, 1);
    case C_SUB:        return pin(o, SL_PIN_SUB);
    case C_UNSUB:      return pin(o, SL_PIN_UNSUB); /* its confirmations: one per name */
    case C_MONITOR:    return pin(o, SL_PIN_MONITOR);
    case C_READONLY:   return pin(o, SL_PIN_READONLY);
    case C_READWRITE:  return pool_ending(o, SL_PIN_READONLY, 0);
    case C_ASKING:     return pin(o, SL_PIN_NEXT);
    case C_DEBUG:      return pin(o, SL_PIN_DEBUG);
    case C_REPLICA:    return pin(o, SL_PIN_REPLICA);
    case C_SCRIPT:
        /* SCRIPT DEBUG YES|SYNC turns the connection's next EVALs into
         * debugging sessions; NO and the other subcommands are stateless */
        if (arg_is(r, 1, "DEBUG") && !arg_is(r, 2, "NO"))
            return pin(o, SL_PIN_SCRIPT);
        if (arg_is(r, 1, "KILL"))
            return pin(o, SL_PIN_DEBUG); /* below */
        return (o->cls = SL_RCMD_POOL);
    case C_FUNCTION:
    case C_SHUTDOWN:
        /* SCRIPT KILL, FUNCTION KILL and SHUTDOWN are how a client reaches
         * a server busy in a script: on a shared connection they would
         * queue behind the script's own request and never arrive. A
         * connection of the client's own (an idle one, or a new one) takes
         * them at once; it goes back once they are answered. */
        if (c->code == C_SHUTDOWN || arg_is(r, 1, "KILL"))
            return pin(o, SL_PIN_DEBUG);
        return (o->cls = SL_RCMD_POOL);
    case C_AUTH:       return auth(r, o);
    case C_HELLO:      return hello(r, o);
    case C_SELECT: {
        long long db;
        if (r->argc != 2 || !arg_ll(r, 1, &db) || db < 0 || db > 0x7fffffff)
            return pin(o, SL_PIN_ODD); /* Redis answers an error */
        o->db = (int32_t)db;
        o->set = SL_RKEY_DB;
        return key(o);
    }
    case C_RESET:
        /* RESET takes no arguments; with some it is an arity error */
        if (r->argc != 1)
            return pin(o, SL_PIN_ODD);
        o->set = SL_RKEY_RESET;
        o->ends = SL_PIN_RESET_CLEARS;
        return key(o);
    case C_QUIT:       return local(o, SL_RLOCAL_QUIT);
    }
    return pin(o, SL_PIN_UNKNOWN);
}

int sl_rcmd_list_id(const struct sl_resp_req *r, unsigned long long id)
{
    char text[24];
    snprintf(text, sizeof(text), "%llu", id);
    for (unsigned i = 3; i < r->argc && i < r->ncap; i++)
        if (strcmp(r->argv[i], text) == 0)
            return 1;
    return 0;
}

int sl_rcmd_name_ok(const char *name, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (name[i] < '!' || name[i] > '~')
            return 0;
    return 1;
}

/* ---- the pin tracker ----------------------------------------------------- */

void sl_rcmd_pin_init(struct sl_rcmd_pin *p)
{
    memset(p, 0, sizeof(*p));
}

int sl_rcmd_pinned(const struct sl_rcmd_pin *p)
{
    return p->why != 0;
}

int sl_rcmd_pin_clean(const struct sl_rcmd_pin *p)
{
    return (p->why & SL_PIN_DIRTY) == 0;
}

uint32_t sl_rcmd_pin_sent(struct sl_rcmd_pin *p, struct sl_rcmd_info *i, int in_txn)
{
    if ((i->ends & SL_PIN_MULTI) && i->cls != SL_RCMD_KEY && !in_txn) {
        /* EXEC or DISCARD (RESET, a KEY request, ends a transaction too,
         * and what else it clears, in one or not) with no transaction open:
         * Redis refuses it ("without MULTI") and keeps the keys watched, so
         * its answer, an error, ends nothing (an EXECABORT does end the
         * WATCH). What was written tells, not the pins: an earlier
         * transaction's MULTI pin stays until its EXEC's answer comes, which
         * a pipelined EXEC does not wait for. */
        i->ends = 0;
        i->ends_any = 0;
    }
    /* CLIENT REPLY SKIP and ASKING cover the one request after them: it has
     * now been written where they were. */
    uint32_t unseen = p->why & (SL_PIN_REPLY | SL_PIN_NEXT);
    p->why &= ~(uint32_t)SL_PIN_NEXT;
    uint32_t want = i->cls == SL_RCMD_PIN ? i->pin : 0;
    if (want & SL_PIN_ONCE)
        p->once++;
    uint32_t token = ++p->seq;
    if (token == 0)
        token = p->seq = 1; /* 0 is <since>'s "held" */
    for (unsigned b = 0; b < SL_PIN_NBITS; b++) {
        if (!(want & (1u << b)))
            continue;
        p->last[b] = token;
        if (unseen && ((1u << b) & SL_PIN_UNDO)) {
            p->since[b] = 0; /* its reply is skipped: taken as a success */
            p->unseen[b] = token;
        }
        else if (!(p->why & (1u << b)))
            p->since[b] = token;
    }
    p->why |= want;
    return token;
}

void sl_rcmd_pin_done(struct sl_rcmd_pin *p, const struct sl_rcmd_info *i, uint32_t token, int ok)
{
    uint32_t want = i->cls == SL_RCMD_PIN ? i->pin : 0;
    if ((want & SL_PIN_ONCE) && p->once > 0 && --p->once == 0)
        p->why &= ~(uint32_t)SL_PIN_ONCE;
    for (unsigned b = 0; b < SL_PIN_NBITS; b++) {
        uint32_t bit = 1u << b;
        /* a request written since wants it (0: none ever did, say a bit the
         * caller set itself) */
        int later = p->last[b] != 0 && (int32_t)(p->last[b] - token) > 0;
        /* one of those was taken as a success: it holds the bit */
        uint32_t next = p->unseen[b] != 0 && (int32_t)(p->unseen[b] - token) > 0 ? 0 : p->last[b];
        if ((want & bit & SL_PIN_UNDO) && ok) {
            p->since[b] = 0; /* its state is on the connection: only an end takes it */
        } else if ((want & bit & SL_PIN_UNDO) && p->since[b] == token) {
            /* a refused request set no state: what it alone pinned for is
             * gone; with requests written since, the last one's answer
             * decides (any of those in between that succeeds marks it held) */
            if (later)
                p->since[b] = next;
            else
                p->why &= ~bit;
        }
        /* an end ends the state of the requests written before it; those
         * written since decide, as above */
        if ((ok || i->ends_any) && (i->ends & bit & ~(uint32_t)SL_PIN_ONCE)) {
            if (later)
                p->since[b] = next;
            else
                p->why &= ~bit;
        }
    }
}

void sl_rcmd_pin_hold(struct sl_rcmd_pin *p, uint32_t token, uint32_t bits)
{
    for (unsigned b = 0; b < SL_PIN_NBITS; b++) {
        if (!(bits & (1u << b)))
            continue;
        /* as a request that wants it and succeeded: an earlier one's
         * refusal does not take it, nor an end answered before it */
        if (p->last[b] == 0 || (int32_t)(token - p->last[b]) > 0)
            p->last[b] = token;
        p->since[b] = 0;
    }
    p->why |= bits;
}

void sl_rcmd_pin_subs(struct sl_rcmd_pin *p, long n)
{
    if (n <= 0)
        p->why &= ~(uint32_t)SL_PIN_SUB;
    else
        p->why |= SL_PIN_SUB;
}

/* ---- the pool key -------------------------------------------------------- */

void sl_pool_key_default(struct sl_pool_key *k)
{
    memset(k, 0, sizeof(*k));
    memcpy(k->user, "default", 8);
    k->user_len = 7;
    k->resp = 2;
}

int sl_pool_key_cmp(const struct sl_pool_key *a, const struct sl_pool_key *b)
{
    if (a->db != b->db)
        return a->db < b->db ? -1 : 1;
    if (a->resp != b->resp)
        return a->resp < b->resp ? -1 : 1;
    if (a->user_len != b->user_len)
        return a->user_len < b->user_len ? -1 : 1;
    return memcmp(a->user, b->user, a->user_len);
}

uint32_t sl_pool_key_hash(const struct sl_pool_key *k)
{
    /* FNV-1a over the fields compared, not the padding */
    uint32_t h = 2166136261u;
    unsigned char head[6] = { k->resp, k->user_len, (unsigned char)k->db,
                              (unsigned char)(k->db >> 8), (unsigned char)(k->db >> 16),
                              (unsigned char)(k->db >> 24) };
    for (size_t i = 0; i < sizeof(head); i++)
        h = (h ^ head[i]) * 16777619u;
    for (size_t i = 0; i < k->user_len; i++)
        h = (h ^ (unsigned char)k->user[i]) * 16777619u;
    return h;
}

int sl_pool_key_apply(struct sl_pool_key *k, const struct sl_rcmd_info *i, int ok)
{
    if (!ok || i->cls != SL_RCMD_KEY || i->set == 0)
        return 0;
    struct sl_pool_key n = *k;
    if (i->set & SL_RKEY_RESET)
        sl_pool_key_default(&n);
    if (i->set & SL_RKEY_USER) {
        memset(n.user, 0, sizeof(n.user));
        memcpy(n.user, i->user, i->user_len);
        n.user_len = i->user_len;
    }
    if (i->set & SL_RKEY_DB)
        n.db = i->db;
    if (i->set & SL_RKEY_RESP)
        n.resp = i->resp;
    int changed = sl_pool_key_cmp(&n, k) != 0;
    *k = n;
    return changed;
}

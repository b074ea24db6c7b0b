/* sluice — Redis 7's ACL command categories.
 *
 *   request --> sl_resp_acl_of()  argv[0] upper-cased, binary search in cmds[]
 *                  |               a container: argv[1] in its run of subs[]
 *                  v
 *               categories (one bit each, in Redis's ACL CAT order)
 *
 * The table between the markers is generated (tests/tools/gen_resp_acl.py
 * from `redis-cli --json COMMAND INFO` on redis-server 7.0.15) and checked
 * against the installed redis-server by tests/integration/test_resp_acl.c. */
#include <string.h>
#include <strings.h>

#include "proto/resp_acl.h"

/* Category bits, in the order of Redis 7.0's ACL CAT. */
#define C_KEYSPACE     (1u << 0)
#define C_READ         (1u << 1)
#define C_WRITE        (1u << 2)
#define C_SET          (1u << 3)
#define C_SORTEDSET    (1u << 4)
#define C_LIST         (1u << 5)
#define C_HASH         (1u << 6)
#define C_STRING       (1u << 7)
#define C_BITMAP       (1u << 8)
#define C_HYPERLOGLOG  (1u << 9)
#define C_GEO          (1u << 10)
#define C_STREAM       (1u << 11)
#define C_PUBSUB       (1u << 12)
#define C_ADMIN        (1u << 13)
#define C_FAST         (1u << 14)
#define C_SLOW         (1u << 15)
#define C_BLOCKING     (1u << 16)
#define C_DANGEROUS    (1u << 17)
#define C_CONNECTION   (1u << 18)
#define C_TRANSACTION  (1u << 19)
#define C_SCRIPTING    (1u << 20)

static const char *const cat_names[SL_RESP_ACL_CATEGORIES] = {
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
};

#define NAME_MAX_ 24 /* longer than any command or subcommand name */

struct acl_cmd {
    const char *name;  /* upper case */
    uint32_t    cats;  /* C_* */
    uint16_t    sub;   /* a container: its first subcommand in subs[] */
    uint16_t    n_sub; /* ... and how many (0: not a container) */
};

struct acl_sub {
    const char *name;  /* upper case, without "CONTAINER|" */
    uint32_t    cats;
};

/* ---- generated: tests/tools/gen_resp_acl.py (WAITAOF by hand) ---- */
static const struct acl_cmd cmds[] = {
    { "ACL", C_SLOW, 0, 13 },
    { "APPEND", C_WRITE | C_STRING | C_FAST, 0, 0 },
    { "ASKING", C_FAST | C_CONNECTION, 0, 0 },
    { "AUTH", C_FAST | C_CONNECTION, 0, 0 },
    { "BGREWRITEAOF", C_ADMIN | C_SLOW | C_DANGEROUS, 0, 0 },
    { "BGSAVE", C_ADMIN | C_SLOW | C_DANGEROUS, 0, 0 },
    { "BITCOUNT", C_READ | C_BITMAP | C_SLOW, 0, 0 },
    { "BITFIELD", C_WRITE | C_BITMAP | C_SLOW, 0, 0 },
    { "BITFIELD_RO", C_READ | C_BITMAP | C_FAST, 0, 0 },
    { "BITOP", C_WRITE | C_BITMAP | C_SLOW, 0, 0 },
    { "BITPOS", C_READ | C_BITMAP | C_SLOW, 0, 0 },
    { "BLMOVE", C_WRITE | C_LIST | C_SLOW | C_BLOCKING, 0, 0 },
    { "BLMPOP", C_WRITE | C_LIST | C_SLOW | C_BLOCKING, 0, 0 },
    { "BLPOP", C_WRITE | C_LIST | C_SLOW | C_BLOCKING, 0, 0 },
    { "BRPOP", C_WRITE | C_LIST | C_SLOW | C_BLOCKING, 0, 0 },
    { "BRPOPLPUSH", C_WRITE | C_LIST | C_SLOW | C_BLOCKING, 0, 0 },
    { "BZMPOP", C_WRITE | C_SORTEDSET | C_SLOW | C_BLOCKING, 0, 0 },
    { "BZPOPMAX", C_WRITE | C_SORTEDSET | C_FAST | C_BLOCKING, 0, 0 },
    { "BZPOPMIN", C_WRITE | C_SORTEDSET | C_FAST | C_BLOCKING, 0, 0 },
    { "CLIENT", C_SLOW, 13, 16 },
    { "CLUSTER", C_SLOW, 29, 27 },
    { "COMMAND", C_SLOW | C_CONNECTION, 56, 7 },
    { "CONFIG", C_SLOW, 63, 5 },
    { "COPY", C_KEYSPACE | C_WRITE | C_SLOW, 0, 0 },
    { "DBSIZE", C_KEYSPACE | C_READ | C_FAST, 0, 0 },
    { "DEBUG", C_ADMIN | C_SLOW | C_DANGEROUS, 0, 0 },
    { "DECR", C_WRITE | C_STRING | C_FAST, 0, 0 },
    { "DECRBY", C_WRITE | C_STRING | C_FAST, 0, 0 },
    { "DEL", C_KEYSPACE | C_WRITE | C_SLOW, 0, 0 },
    { "DISCARD", C_FAST | C_TRANSACTION, 0, 0 },
    { "DUMP", C_KEYSPACE | C_READ | C_SLOW, 0, 0 },
    { "ECHO", C_FAST | C_CONNECTION, 0, 0 },
    { "EVAL", C_SLOW | C_SCRIPTING, 0, 0 },
    { "EVALSHA", C_SLOW | C_SCRIPTING, 0, 0 },
    { "EVALSHA_RO", C_SLOW | C_SCRIPTING, 0, 0 },
    { "EVAL_RO", C_SLOW | C_SCRIPTING, 0, 0 },
    { "EXEC", C_SLOW | C_TRANSACTION, 0, 0 },
    { "EXISTS", C_KEYSPACE | C_READ | C_FAST, 0, 0 },
    { "EXPIRE", C_KEYSPACE | C_WRITE | C_FAST, 0, 0 },
    { "EXPIREAT", C_KEYSPACE | C_WRITE | C_FAST, 0, 0 },
    { "EXPIRETIME", C_KEYSPACE | C_READ | C_FAST, 0, 0 },
    { "FAILOVER", C_ADMIN | C_SLOW | C_DANGEROUS, 0, 0 },
    { "FCALL", C_SLOW | C_SCRIPTING, 0, 0 },
    { "FCALL_RO", C_SLOW | C_SCRIPTING, 0, 0 },
    { "FLUSHALL", C_KEYSPACE | C_WRITE | C_SLOW | C_DANGEROUS, 0, 0 },
    { "FLUSHDB", C_KEYSPACE | C_WRITE | C_SLOW | C_DANGEROUS, 0, 0 },
    { "FUNCTION", C_SLOW, 68, 9 },
    { "GEOADD", C_WRITE | C_GEO | C_SLOW, 0, 0 },
    { "GEODIST", C_READ | C_GEO | C_SLOW, 0, 0 },
    { "GEOHASH", C_READ | C_GEO | C_SLOW, 0, 0 },
    { "GEOPOS", C_READ | C_GEO | C_SLOW, 0, 0 },
    { "GEORADIUS", C_WRITE | C_GEO | C_SLOW, 0, 0 },
    { "GEORADIUSBYMEMBER", C_WRITE | C_GEO | C_SLOW, 0, 0 },
    { "GEORADIUSBYMEMBER_RO", C_READ | C_GEO | C_SLOW, 0, 0 },
    { "GEORADIUS_RO", C_READ | C_GEO | C_SLOW, 0, 0 },
    { "GEOSEARCH", C_READ | C_GEO | C_SLOW, 0, 0 },
    { "GEOSEARCHSTORE", C_WRITE | C_GEO | C_SLOW, 0, 0 },
    { "GET", C_READ | C_STRING | C_FAST, 0, 0 },
    { "GETBIT", C_READ | C_BITMAP | C_FAST, 0, 0 },
    { "GETDEL", C_WRITE | C_STRING | C_FAST, 0, 0 },
    { "GETEX", C_WRITE | C_STRING | C_FAST, 0, 0 },
    { "GETRANGE", C_READ | C_STRING | C_SLOW, 0, 0 },
    { "GETSET", C_WRITE | C_STRING | C_FAST, 0, 0 },
    { "HDEL", C_WRITE | C_HASH | C_FAST, 0, 0 },
    { "HELLO", C_FAST | C_CONNECTION, 0, 0 },
    { "HEXISTS", C_READ | C_HASH | C_FAST, 0, 0 },
    { "HGET", C_READ | C_HASH | C_FAST, 0, 0 },
    { "HGETALL", C_READ | C_HASH | C_SLOW, 0, 0 },
    { "HINCRBY", C_WRITE | C_HASH | C_FAST, 0, 0 },
    { "HINCRBYFLOAT", C_WRITE | C_HASH | C_FAST, 0, 0 },
    { "HKEYS", C_READ | C_HASH | C_SLOW, 0, 0 },
    { "HLEN", C_READ | C_HASH | C_FAST, 0, 0 },
    { "HMGET", C_READ | C_HASH | C_FAST, 0, 0 },
    { "HMSET", C_WRITE | C_HASH | C_FAST, 0, 0 },
    { "HRANDFIELD", C_READ | C_HASH | C_SLOW, 0, 0 },
    { "HSCAN", C_READ | C_HASH | C_SLOW, 0, 0 },
    { "HSET", C_WRITE | C_HASH | C_FAST, 0, 0 },
    { "HSETNX", C_WRITE | C_HASH | C_FAST, 0, 0 },
    { "HSTRLEN", C_READ | C_HASH | C_FAST, 0, 0 },
    { "HVALS", C_READ | C_HASH | C_SLOW, 0, 0 },
    { "INCR", C_WRITE | C_STRING | C_FAST, 0, 0 },
    { "INCRBY", C_WRITE | C_STRING | C_FAST, 0, 0 },
    { "INCRBYFLOAT", C_WRITE | C_STRING | C_FAST, 0, 0 },
    { "INFO", C_SLOW | C_DANGEROUS, 0, 0 },
    { "KEYS", C_KEYSPACE | C_READ | C_SLOW | C_DANGEROUS, 0, 0 },
    { "LASTSAVE", C_ADMIN | C_FAST | C_DANGEROUS, 0, 0 },
    { "LATENCY", C_SLOW, 77, 7 },
    { "LCS", C_READ | C_STRING | C_SLOW, 0, 0 },
    { "LINDEX", C_READ | C_LIST | C_SLOW, 0, 0 },
    { "LINSERT", C_WRITE | C_LIST | C_SLOW, 0, 0 },
    { "LLEN", C_READ | C_LIST | C_FAST, 0, 0 },
    { "LMOVE", C_WRITE | C_LIST | C_SLOW, 0, 0 },
    { "LMPOP", C_WRITE | C_LIST | C_SLOW, 0, 0 },
    { "LOLWUT", C_READ | C_FAST, 0, 0 },
    { "LPOP", C_WRITE | C_LIST | C_FAST, 0, 0 },
    { "LPOS", C_READ | C_LIST | C_SLOW, 0, 0 },
    { "LPUSH", C_WRITE | C_LIST | C_FAST, 0, 0 },
    { "LPUSHX", C_WRITE | C_LIST | C_FAST, 0, 0 },
    { "LRANGE", C_READ | C_LIST | C_SLOW, 0, 0 },
    { "LREM", C_WRITE | C_LIST | C_SLOW, 0, 0 },
    { "LSET", C_WRITE | C_LIST | C_SLOW, 0, 0 },
    { "LTRIM", C_WRITE | C_LIST | C_SLOW, 0, 0 },
    { "MEMORY", C_SLOW, 84, 6 },
    { "MGET", C_READ | C_STRING | C_FAST, 0, 0 },
    { "MIGRATE", C_KEYSPACE | C_WRITE | C_SLOW | C_DANGEROUS, 0, 0 },
    { "MODULE", C_SLOW, 90, 5 },
    { "MONITOR", C_ADMIN | C_SLOW | C_DANGEROUS, 0, 0 },
    { "MOVE", C_KEYSPACE | C_WRITE | C_FAST, 0, 0 },
    { "MSET", C_WRITE | C_STRING | C_SLOW, 0, 0 },
    { "MSETNX", C_WRITE | C_STRING | C_SLOW, 0, 0 },
    { "MULTI", C_FAST | C_TRANSACTION, 0, 0 },
    { "OBJECT", C_SLOW, 95, 5 },
    { "PERSIST", C_KEYSPACE | C_WRITE | C_FAST, 0, 0 },
    { "PEXPIRE", C_KEYSPACE | C_WRITE | C_FAST, 0, 0 },
    { "PEXPIREAT", C_KEYSPACE | C_WRITE | C_FAST, 0, 0 },
    { "PEXPIRETIME", C_KEYSPACE | C_READ | C_FAST, 0, 0 },
    { "PFADD", C_WRITE | C_HYPERLOGLOG | C_FAST, 0, 0 },
    { "PFCOUNT", C_READ | C_HYPERLOGLOG | C_SLOW, 0, 0 },
    { "PFDEBUG", C_WRITE | C_HYPERLOGLOG | C_ADMIN | C_SLOW | C_DANGEROUS, 0, 0 },
    { "PFMERGE", C_WRITE | C_HYPERLOGLOG | C_SLOW, 0, 0 },
    { "PFSELFTEST", C_HYPERLOGLOG | C_ADMIN | C_SLOW | C_DANGEROUS, 0, 0 },
    { "PING", C_FAST | C_CONNECTION, 0, 0 },
    { "PSETEX", C_WRITE | C_STRING | C_SLOW, 0, 0 },
    { "PSUBSCRIBE", C_PUBSUB | C_SLOW, 0, 0 },
    { "PSYNC", C_ADMIN | C_SLOW | C_DANGEROUS, 0, 0 },
    { "PTTL", C_KEYSPACE | C_READ | C_FAST, 0, 0 },
    { "PUBLISH", C_PUBSUB | C_FAST, 0, 0 },
    { "PUBSUB", C_SLOW, 100, 6 },
    { "PUNSUBSCRIBE", C_PUBSUB | C_SLOW, 0, 0 },
    { "QUIT", C_FAST | C_CONNECTION, 0, 0 },
    { "RANDOMKEY", C_KEYSPACE | C_READ | C_SLOW, 0, 0 },
    { "READONLY", C_FAST | C_CONNECTION, 0, 0 },
    { "READWRITE", C_FAST | C_CONNECTION, 0, 0 },
    { "RENAME", C_KEYSPACE | C_WRITE | C_SLOW, 0, 0 },
    { "RENAMENX", C_KEYSPACE | C_WRITE | C_FAST, 0, 0 },
    { "REPLCONF", C_ADMIN | C_SLOW | C_DANGEROUS, 0, 0 },
    { "REPLICAOF", C_ADMIN | C_SLOW | C_DANGEROUS, 0, 0 },
    { "RESET", C_FAST | C_CONNECTION, 0, 0 },
    { "RESTORE", C_KEYSPACE | C_WRITE | C_SLOW | C_DANGEROUS, 0, 0 },
    { "RESTORE-ASKING", C_KEYSPACE | C_WRITE | C_SLOW | C_DANGEROUS, 0, 0 },
    { "ROLE", C_ADMIN | C_FAST | C_DANGEROUS, 0, 0 },
    { "RPOP", C_WRITE | C_LIST | C_FAST, 0, 0 },
    { "RPOPLPUSH", C_WRITE | C_LIST | C_SLOW, 0, 0 },
    { "RPUSH", C_WRITE | C_LIST | C_FAST, 0, 0 },
    { "RPUSHX", C_WRITE | C_LIST | C_FAST, 0, 0 },
    { "SADD", C_WRITE | C_SET | C_FAST, 0, 0 },
    { "SAVE", C_ADMIN | C_SLOW | C_DANGEROUS, 0, 0 },
    { "SCAN", C_KEYSPACE | C_READ | C_SLOW, 0, 0 },
    { "SCARD", C_READ | C_SET | C_FAST, 0, 0 },
    { "SCRIPT", C_SLOW, 106, 6 },
    { "SDIFF", C_READ | C_SET | C_SLOW, 0, 0 },
    { "SDIFFSTORE", C_WRITE | C_SET | C_SLOW, 0, 0 },
    { "SELECT", C_FAST | C_CONNECTION, 0, 0 },
    { "SET", C_WRITE | C_STRING | C_SLOW, 0, 0 },
    { "SETBIT", C_WRITE | C_BITMAP | C_SLOW, 0, 0 },
    { "SETEX", C_WRITE | C_STRING | C_SLOW, 0, 0 },
    { "SETNX", C_WRITE | C_STRING | C_FAST, 0, 0 },
    { "SETRANGE", C_WRITE | C_STRING | C_SLOW, 0, 0 },
    { "SHUTDOWN", C_ADMIN | C_SLOW | C_DANGEROUS, 0, 0 },
    { "SINTER", C_READ | C_SET | C_SLOW, 0, 0 },
    { "SINTERCARD", C_READ | C_SET | C_SLOW, 0, 0 },
    { "SINTERSTORE", C_WRITE | C_SET | C_SLOW, 0, 0 },
    { "SISMEMBER", C_READ | C_SET | C_FAST, 0, 0 },
    { "SLAVEOF", C_ADMIN | C_SLOW | C_DANGEROUS, 0, 0 },
    { "SLOWLOG", C_SLOW, 112, 4 },
    { "SMEMBERS", C_READ | C_SET | C_SLOW, 0, 0 },
    { "SMISMEMBER", C_READ | C_SET | C_FAST, 0, 0 },
    { "SMOVE", C_WRITE | C_SET | C_FAST, 0, 0 },
    { "SORT", C_WRITE | C_SET | C_SORTEDSET | C_LIST | C_SLOW | C_DANGEROUS, 0, 0 },
    { "SORT_RO", C_READ | C_SET | C_SORTEDSET | C_LIST | C_SLOW | C_DANGEROUS, 0, 0 },
    { "SPOP", C_WRITE | C_SET | C_FAST, 0, 0 },
    { "SPUBLISH", C_PUBSUB | C_FAST, 0, 0 },
    { "SRANDMEMBER", C_READ | C_SET | C_SLOW, 0, 0 },
    { "SREM", C_WRITE | C_SET | C_FAST, 0, 0 },
    { "SSCAN", C_READ | C_SET | C_SLOW, 0, 0 },
    { "SSUBSCRIBE", C_PUBSUB | C_SLOW, 0, 0 },
    { "STRLEN", C_READ | C_STRING | C_FAST, 0, 0 },
    { "SUBSCRIBE", C_PUBSUB | C_SLOW, 0, 0 },
    { "SUBSTR", C_READ | C_STRING | C_SLOW, 0, 0 },
    { "SUNION", C_READ | C_SET | C_SLOW, 0, 0 },
    { "SUNIONSTORE", C_WRITE | C_SET | C_SLOW, 0, 0 },
    { "SUNSUBSCRIBE", C_PUBSUB | C_SLOW, 0, 0 },
    { "SWAPDB", C_KEYSPACE | C_WRITE | C_FAST | C_DANGEROUS, 0, 0 },
    { "SYNC", C_ADMIN | C_SLOW | C_DANGEROUS, 0, 0 },
    { "TIME", C_FAST, 0, 0 },
    { "TOUCH", C_KEYSPACE | C_READ | C_FAST, 0, 0 },
    { "TTL", C_KEYSPACE | C_READ | C_FAST, 0, 0 },
    { "TYPE", C_KEYSPACE | C_READ | C_FAST, 0, 0 },
    { "UNLINK", C_KEYSPACE | C_WRITE | C_FAST, 0, 0 },
    { "UNSUBSCRIBE", C_PUBSUB | C_SLOW, 0, 0 },
    { "UNWATCH", C_FAST | C_TRANSACTION, 0, 0 },
    { "WAIT", C_SLOW | C_CONNECTION, 0, 0 },
    { "WAITAOF", C_SLOW | C_BLOCKING | C_CONNECTION, 0, 0 }, /* 7.2: by hand */
    { "WATCH", C_FAST | C_TRANSACTION, 0, 0 },
    { "XACK", C_WRITE | C_STREAM | C_FAST, 0, 0 },
    { "XADD", C_WRITE | C_STREAM | C_FAST, 0, 0 },
    { "XAUTOCLAIM", C_WRITE | C_STREAM | C_FAST, 0, 0 },
    { "XCLAIM", C_WRITE | C_STREAM | C_FAST, 0, 0 },
    { "XDEL", C_WRITE | C_STREAM | C_FAST, 0, 0 },
    { "XGROUP", C_SLOW, 116, 6 },
    { "XINFO", C_SLOW, 122, 4 },
    { "XLEN", C_READ | C_STREAM | C_FAST, 0, 0 },
    { "XPENDING", C_READ | C_STREAM | C_SLOW, 0, 0 },
    { "XRANGE", C_READ | C_STREAM | C_SLOW, 0, 0 },
    { "XREAD", C_READ | C_STREAM | C_SLOW | C_BLOCKING, 0, 0 },
    { "XREADGROUP", C_WRITE | C_STREAM | C_SLOW | C_BLOCKING, 0, 0 },
    { "XREVRANGE", C_READ | C_STREAM | C_SLOW, 0, 0 },
    { "XSETID", C_WRITE | C_STREAM | C_FAST, 0, 0 },
    { "XTRIM", C_WRITE | C_STREAM | C_SLOW, 0, 0 },
    { "ZADD", C_WRITE | C_SORTEDSET | C_FAST, 0, 0 },
    { "ZCARD", C_READ | C_SORTEDSET | C_FAST, 0, 0 },
    { "ZCOUNT", C_READ | C_SORTEDSET | C_FAST, 0, 0 },
    { "ZDIFF", C_READ | C_SORTEDSET | C_SLOW, 0, 0 },
    { "ZDIFFSTORE", C_WRITE | C_SORTEDSET | C_SLOW, 0, 0 },
    { "ZINCRBY", C_WRITE | C_SORTEDSET | C_FAST, 0, 0 },
    { "ZINTER", C_READ | C_SORTEDSET | C_SLOW, 0, 0 },
    { "ZINTERCARD", C_READ | C_SORTEDSET | C_SLOW, 0, 0 },
    { "ZINTERSTORE", C_WRITE | C_SORTEDSET | C_SLOW, 0, 0 },
    { "ZLEXCOUNT", C_READ | C_SORTEDSET | C_FAST, 0, 0 },
    { "ZMPOP", C_WRITE | C_SORTEDSET | C_SLOW, 0, 0 },
    { "ZMSCORE", C_READ | C_SORTEDSET | C_FAST, 0, 0 },
    { "ZPOPMAX", C_WRITE | C_SORTEDSET | C_FAST, 0, 0 },
    { "ZPOPMIN", C_WRITE | C_SORTEDSET | C_FAST, 0, 0 },
    { "ZRANDMEMBER", C_READ | C_SORTEDSET | C_SLOW, 0, 0 },
    { "ZRANGE", C_READ | C_SORTEDSET | C_SLOW, 0, 0 },
    { "ZRANGEBYLEX", C_READ | C_SORTEDSET | C_SLOW, 0, 0 },
    { "ZRANGEBYSCORE", C_READ | C_SORTEDSET | C_SLOW, 0, 0 },
    { "ZRANGESTORE", C_WRITE | C_SORTEDSET | C_SLOW, 0, 0 },
    { "ZRANK", C_READ | C_SORTEDSET | C_FAST, 0, 0 },
    { "ZREM", C_WRITE | C_SORTEDSET | C_FAST, 0, 0 },
    { "ZREMRANGEBYLEX", C_WRITE | C_SORTEDSET | C_SLOW, 0, 0 },
    { "ZREMRANGEBYRANK", C_WRITE | C_SORTEDSET | C_SLOW, 0, 0 },
    { "ZREMRANGEBYSCORE", C_WRITE | C_SORTEDSET | C_SLOW, 0, 0 },
    { "ZREVRANGE", C_READ | C_SORTEDSET | C_SLOW, 0, 0 },
    { "ZREVRANGEBYLEX", C_READ | C_SORTEDSET | C_SLOW, 0, 0 },
    { "ZREVRANGEBYSCORE", C_READ | C_SORTEDSET | C_SLOW, 0, 0 },
    { "ZREVRANK", C_READ | C_SORTEDSET | C_FAST, 0, 0 },
    { "ZSCAN", C_READ | C_SORTEDSET | C_SLOW, 0, 0 },
    { "ZSCORE", C_READ | C_SORTEDSET | C_FAST, 0, 0 },
    { "ZUNION", C_READ | C_SORTEDSET | C_SLOW, 0, 0 },
    { "ZUNIONSTORE", C_WRITE | C_SORTEDSET | C_SLOW, 0, 0 },
};

static const struct acl_sub subs[] = {
    { "CAT", C_SLOW },
    { "DELUSER", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "DRYRUN", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "GENPASS", C_SLOW },
    { "GETUSER", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "HELP", C_SLOW },
    { "LIST", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "LOAD", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "LOG", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "SAVE", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "SETUSER", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "USERS", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "WHOAMI", C_SLOW },
    { "CACHING", C_SLOW | C_CONNECTION },
    { "GETNAME", C_SLOW | C_CONNECTION },
    { "GETREDIR", C_SLOW | C_CONNECTION },
    { "HELP", C_SLOW | C_CONNECTION },
    { "ID", C_SLOW | C_CONNECTION },
    { "INFO", C_SLOW | C_CONNECTION },
    { "KILL", C_ADMIN | C_SLOW | C_DANGEROUS | C_CONNECTION },
    { "LIST", C_ADMIN | C_SLOW | C_DANGEROUS | C_CONNECTION },
    { "NO-EVICT", C_ADMIN | C_SLOW | C_DANGEROUS | C_CONNECTION },
    { "PAUSE", C_ADMIN | C_SLOW | C_DANGEROUS | C_CONNECTION },
    { "REPLY", C_SLOW | C_CONNECTION },
    { "SETNAME", C_SLOW | C_CONNECTION },
    { "TRACKING", C_SLOW | C_CONNECTION },
    { "TRACKINGINFO", C_SLOW | C_CONNECTION },
    { "UNBLOCK", C_ADMIN | C_SLOW | C_DANGEROUS | C_CONNECTION },
    { "UNPAUSE", C_ADMIN | C_SLOW | C_DANGEROUS | C_CONNECTION },
    { "ADDSLOTS", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "ADDSLOTSRANGE", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "BUMPEPOCH", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "COUNT-FAILURE-REPORTS", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "COUNTKEYSINSLOT", C_SLOW },
    { "DELSLOTS", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "DELSLOTSRANGE", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "FAILOVER", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "FLUSHSLOTS", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "FORGET", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "GETKEYSINSLOT", C_SLOW },
    { "HELP", C_SLOW },
    { "INFO", C_SLOW },
    { "KEYSLOT", C_SLOW },
    { "LINKS", C_SLOW },
    { "MEET", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "MYID", C_SLOW },
    { "NODES", C_SLOW },
    { "REPLICAS", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "REPLICATE", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "RESET", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "SAVECONFIG", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "SET-CONFIG-EPOCH", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "SETSLOT", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "SHARDS", C_SLOW },
    { "SLAVES", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "SLOTS", C_SLOW },
    { "COUNT", C_SLOW | C_CONNECTION },
    { "DOCS", C_SLOW | C_CONNECTION },
    { "GETKEYS", C_SLOW | C_CONNECTION },
    { "GETKEYSANDFLAGS", C_SLOW | C_CONNECTION },
    { "HELP", C_SLOW | C_CONNECTION },
    { "INFO", C_SLOW | C_CONNECTION },
    { "LIST", C_SLOW | C_CONNECTION },
    { "GET", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "HELP", C_SLOW },
    { "RESETSTAT", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "REWRITE", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "SET", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "DELETE", C_WRITE | C_SLOW | C_SCRIPTING },
    { "DUMP", C_SLOW | C_SCRIPTING },
    { "FLUSH", C_WRITE | C_SLOW | C_SCRIPTING },
    { "HELP", C_SLOW | C_SCRIPTING },
    { "KILL", C_SLOW | C_SCRIPTING },
    { "LIST", C_SLOW | C_SCRIPTING },
    { "LOAD", C_WRITE | C_SLOW | C_SCRIPTING },
    { "RESTORE", C_WRITE | C_SLOW | C_SCRIPTING },
    { "STATS", C_SLOW | C_SCRIPTING },
    { "DOCTOR", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "GRAPH", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "HELP", C_SLOW },
    { "HISTOGRAM", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "HISTORY", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "LATEST", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "RESET", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "DOCTOR", C_SLOW },
    { "HELP", C_SLOW },
    { "MALLOC-STATS", C_SLOW },
    { "PURGE", C_SLOW },
    { "STATS", C_SLOW },
    { "USAGE", C_READ | C_SLOW },
    { "HELP", C_SLOW },
    { "LIST", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "LOAD", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "LOADEX", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "UNLOAD", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "ENCODING", C_KEYSPACE | C_READ | C_SLOW },
    { "FREQ", C_KEYSPACE | C_READ | C_SLOW },
    { "HELP", C_KEYSPACE | C_SLOW },
    { "IDLETIME", C_KEYSPACE | C_READ | C_SLOW },
    { "REFCOUNT", C_KEYSPACE | C_READ | C_SLOW },
    { "CHANNELS", C_PUBSUB | C_SLOW },
    { "HELP", C_SLOW },
    { "NUMPAT", C_PUBSUB | C_SLOW },
    { "NUMSUB", C_PUBSUB | C_SLOW },
    { "SHARDCHANNELS", C_PUBSUB | C_SLOW },
    { "SHARDNUMSUB", C_PUBSUB | C_SLOW },
    { "DEBUG", C_SLOW | C_SCRIPTING },
    { "EXISTS", C_SLOW | C_SCRIPTING },
    { "FLUSH", C_SLOW | C_SCRIPTING },
    { "HELP", C_SLOW | C_SCRIPTING },
    { "KILL", C_SLOW | C_SCRIPTING },
    { "LOAD", C_SLOW | C_SCRIPTING },
    { "GET", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "HELP", C_SLOW },
    { "LEN", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "RESET", C_ADMIN | C_SLOW | C_DANGEROUS },
    { "CREATE", C_WRITE | C_STREAM | C_SLOW },
    { "CREATECONSUMER", C_WRITE | C_STREAM | C_SLOW },
    { "DELCONSUMER", C_WRITE | C_STREAM | C_SLOW },
    { "DESTROY", C_WRITE | C_STREAM | C_SLOW },
    { "HELP", C_STREAM | C_SLOW },
    { "SETID", C_WRITE | C_STREAM | C_SLOW },
    { "CONSUMERS", C_READ | C_STREAM | C_SLOW },
    { "GROUPS", C_READ | C_STREAM | C_SLOW },
    { "HELP", C_STREAM | C_SLOW },
    { "STREAM", C_READ | C_STREAM | C_SLOW },
};
/* ---- end of generated ---- */

#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))
#define NSUBS (sizeof(subs) / sizeof(subs[0]))

int sl_resp_acl_category(const char *name, size_t len)
{
    for (int i = 0; i < SL_RESP_ACL_CATEGORIES; i++)
        if (strlen(cat_names[i]) == len && strncasecmp(name, cat_names[i], len) == 0)
            return i;
    return -1;
}

const char *sl_resp_acl_category_name(int bit)
{
    return bit >= 0 && bit < SL_RESP_ACL_CATEGORIES ? cat_names[bit] : NULL;
}

/* Argument <i> of <r> upper-cased into <up> (NAME_MAX_ + 1 bytes); its
 * length, or 0 when it is missing, not captured whole, too long for a name,
 * or holds a byte no name has (a NUL, a blank ...). */
static size_t upper_arg(const struct sl_resp_req *r, unsigned i, char *up)
{
    if (i >= r->ncap || i >= r->argc || r->arglen[i] == 0 || r->arglen[i] > NAME_MAX_)
        return 0;
    size_t n = r->arglen[i];
    for (size_t k = 0; k < n; k++) {
        unsigned char c = (unsigned char)r->argv[i][k];
        if (c >= 'a' && c <= 'z')
            c = (unsigned char)(c - ('a' - 'A'));
        else if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return 0;
        up[k] = (char)c;
    }
    up[n] = '\0';
    return n;
}

uint32_t sl_resp_acl_of(const struct sl_resp_req *r)
{
    char up[NAME_MAX_ + 1];
    if (r == NULL || upper_arg(r, 0, up) == 0)
        return 0;
    size_t lo = 0, hi = NCMDS;
    const struct acl_cmd *c = NULL;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int d = strcmp(up, cmds[mid].name);
        if (d == 0) {
            c = &cmds[mid];
            break;
        }
        if (d < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    if (c == NULL)
        return 0;
    if (c->n_sub == 0 || upper_arg(r, 1, up) == 0)
        return c->cats;
    for (size_t k = c->sub; k < (size_t)c->sub + c->n_sub; k++)
        if (strcmp(up, subs[k].name) == 0)
            return subs[k].cats;
    return c->cats;
}

int sl_resp_acl_entry(size_t i, const char **cmd, const char **sub, uint32_t *cats)
{
    /* The commands first, then every subcommand with its container. */
    if (i < NCMDS) {
        *cmd = cmds[i].name;
        *sub = NULL;
        *cats = cmds[i].cats;
        return 0;
    }
    i -= NCMDS;
    if (i >= NSUBS)
        return -1;
    for (size_t c = 0; c < NCMDS; c++) {
        if (cmds[c].n_sub > 0 && i >= cmds[c].sub && i < (size_t)cmds[c].sub + cmds[c].n_sub) {
            *cmd = cmds[c].name;
            *sub = subs[i].name;
            *cats = subs[i].cats;
            return 0;
        }
    }
    return -1;
}

static int name_ok(const char *n)
{
    if (*n == '\0' || strlen(n) > NAME_MAX_)
        return 0;
    for (; *n; n++)
        if (!((*n >= 'A' && *n <= 'Z') || (*n >= '0' && *n <= '9') || *n == '_' || *n == '-'))
            return 0;
    return 1;
}

int sl_resp_acl_selftest(void)
{
    size_t covered = 0;
    for (size_t i = 0; i < NCMDS; i++) {
        if (!name_ok(cmds[i].name) || (i > 0 && strcmp(cmds[i - 1].name, cmds[i].name) >= 0))
            return -1;
        if (cmds[i].cats == 0 || cmds[i].cats >> SL_RESP_ACL_CATEGORIES)
            return -1;
        if (cmds[i].n_sub == 0)
            continue;
        if (cmds[i].sub != covered || (size_t)cmds[i].sub + cmds[i].n_sub > NSUBS)
            return -1; /* runs in order, back to back */
        for (size_t k = cmds[i].sub; k < (size_t)cmds[i].sub + cmds[i].n_sub; k++)
            if (!name_ok(subs[k].name) || subs[k].cats == 0 ||
                (k > cmds[i].sub && strcmp(subs[k - 1].name, subs[k].name) >= 0))
                return -1;
        covered += cmds[i].n_sub;
    }
    return covered == NSUBS ? 0 : -1;
}

/* sluice — identity: who a request belongs to.
 *
 *   request --> sl_identity_observe()  AUTH / HELLO / CLIENT SETNAME / RESET
 *      |                 |               update the connection's state
 *      |                 v
 *      +-------> sl_identity_of()  walks the listener's sources in order:
 *                  resp_user, client_name, key_prefix, client_ip, none
 *                  (the first with a value wins; key_prefix asks
 *                   sl_resp_first_key(), a binary search of Redis's table)
 *
 * Everything works on what the framer captured: the first
 * SL_RESP_CAPTURE_ARGS arguments, each cut at SL_RESP_CAPTURE_LEN bytes, with
 * their full lengths. An identity is its source's tag and its value
 * ("user:alice", "ip:10.0.0.1", "all"), so one source can never name
 * another's identity. A value that is cut, empty, longer than
 * SL_ID_VALUE_MAX or holds an unsafe byte is replaced by its hash, tagged
 * with its source and '#' ("user#" + 16 hex digits) where a literal has ':'
 * ("user:#..." is a literal), so an identity is always 1..SL_ID_MAX
 * printable bytes that can go into a store key, a log line and an error
 * message as they are, and no literal can take a hash's place.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "conf/http.h"
#include "identity/identity.h"
#include "proto/resp.h"

/* ---- the first-key table --------------------------------------------------- */

/* Where a command's first key is. */
enum {
    K_NONE,    /* no key */
    K_AT,      /* at argument <arg> */
    K_NUMKEYS, /* argument <arg> is numkeys; the keys follow it */
    K_STREAMS, /* after the STREAMS keyword, searched from argument <arg> */
    K_SUB,     /* a container: subcommands of group <arg> take a key at 2 */
    K_MIGRATE, /* at 3, unless that is "" (then the keys follow KEYS) */
};

/* Containers with subcommands that take a key (every other container, e.g.
 * CLIENT, CONFIG, SCRIPT, FUNCTION, takes none). */
enum { SUB_MEMORY, SUB_OBJECT, SUB_XGROUP, SUB_XINFO };

static const char *const subcommands[][6] = {
    [SUB_MEMORY] = { "USAGE", NULL },
    [SUB_OBJECT] = { "ENCODING", "FREQ", "IDLETIME", "REFCOUNT", NULL },
    [SUB_XGROUP] = { "CREATE", "CREATECONSUMER", "DELCONSUMER", "DESTROY", "SETID", NULL },
    [SUB_XINFO]  = { "CONSUMERS", "GROUPS", "STREAM", NULL },
};

#define CMD_NAME_MAX 20 /* longest name in the table: GEORADIUSBYMEMBER_RO */

struct cmd {
    char    name[CMD_NAME_MAX + 1]; /* upper case */
    uint8_t kind;                   /* K_* */
    uint8_t arg;                    /* its argument, see K_* */
};

/* Every command of Redis 7.0 (COMMAND on redis-server 7.0.15, first key from
 * the first key spec), plus WAITAOF (7.2). Sorted by strcmp() of the upper
 * case names, for the binary search: '-' < letters < '_'. */
static const struct cmd cmds[] = {
    { "ACL", K_NONE, 0 },                { "APPEND", K_AT, 1 },
    { "ASKING", K_NONE, 0 },             { "AUTH", K_NONE, 0 },
    { "BGREWRITEAOF", K_NONE, 0 },       { "BGSAVE", K_NONE, 0 },
    { "BITCOUNT", K_AT, 1 },             { "BITFIELD", K_AT, 1 },
    { "BITFIELD_RO", K_AT, 1 },          { "BITOP", K_AT, 2 },
    { "BITPOS", K_AT, 1 },               { "BLMOVE", K_AT, 1 },
    { "BLMPOP", K_NUMKEYS, 2 },          { "BLPOP", K_AT, 1 },
    { "BRPOP", K_AT, 1 },                { "BRPOPLPUSH", K_AT, 1 },
    { "BZMPOP", K_NUMKEYS, 2 },          { "BZPOPMAX", K_AT, 1 },
    { "BZPOPMIN", K_AT, 1 },             { "CLIENT", K_NONE, 0 },
    { "CLUSTER", K_NONE, 0 },            { "COMMAND", K_NONE, 0 },
    { "CONFIG", K_NONE, 0 },             { "COPY", K_AT, 1 },
    { "DBSIZE", K_NONE, 0 },             { "DEBUG", K_NONE, 0 },
    { "DECR", K_AT, 1 },                 { "DECRBY", K_AT, 1 },
    { "DEL", K_AT, 1 },                  { "DISCARD", K_NONE, 0 },
    { "DUMP", K_AT, 1 },                 { "ECHO", K_NONE, 0 },
    { "EVAL", K_NUMKEYS, 2 },            { "EVALSHA", K_NUMKEYS, 2 },
    { "EVALSHA_RO", K_NUMKEYS, 2 },      { "EVAL_RO", K_NUMKEYS, 2 },
    { "EXEC", K_NONE, 0 },               { "EXISTS", K_AT, 1 },
    { "EXPIRE", K_AT, 1 },               { "EXPIREAT", K_AT, 1 },
    { "EXPIRETIME", K_AT, 1 },           { "FAILOVER", K_NONE, 0 },
    { "FCALL", K_NUMKEYS, 2 },           { "FCALL_RO", K_NUMKEYS, 2 },
    { "FLUSHALL", K_NONE, 0 },           { "FLUSHDB", K_NONE, 0 },
    { "FUNCTION", K_NONE, 0 },           { "GEOADD", K_AT, 1 },
    { "GEODIST", K_AT, 1 },              { "GEOHASH", K_AT, 1 },
    { "GEOPOS", K_AT, 1 },               { "GEORADIUS", K_AT, 1 },
    { "GEORADIUSBYMEMBER", K_AT, 1 },    { "GEORADIUSBYMEMBER_RO", K_AT, 1 },
    { "GEORADIUS_RO", K_AT, 1 },         { "GEOSEARCH", K_AT, 1 },
    { "GEOSEARCHSTORE", K_AT, 1 },       { "GET", K_AT, 1 },
    { "GETBIT", K_AT, 1 },               { "GETDEL", K_AT, 1 },
    { "GETEX", K_AT, 1 },                { "GETRANGE", K_AT, 1 },
    { "GETSET", K_AT, 1 },               { "HDEL", K_AT, 1 },
    { "HELLO", K_NONE, 0 },              { "HEXISTS", K_AT, 1 },
    { "HGET", K_AT, 1 },                 { "HGETALL", K_AT, 1 },
    { "HINCRBY", K_AT, 1 },              { "HINCRBYFLOAT", K_AT, 1 },
    { "HKEYS", K_AT, 1 },                { "HLEN", K_AT, 1 },
    { "HMGET", K_AT, 1 },                { "HMSET", K_AT, 1 },
    { "HRANDFIELD", K_AT, 1 },           { "HSCAN", K_AT, 1 },
    { "HSET", K_AT, 1 },                 { "HSETNX", K_AT, 1 },
    { "HSTRLEN", K_AT, 1 },              { "HVALS", K_AT, 1 },
    { "INCR", K_AT, 1 },                 { "INCRBY", K_AT, 1 },
    { "INCRBYFLOAT", K_AT, 1 },          { "INFO", K_NONE, 0 },
    { "KEYS", K_NONE, 0 },               { "LASTSAVE", K_NONE, 0 },
    { "LATENCY", K_NONE, 0 },            { "LCS", K_AT, 1 },
    { "LINDEX", K_AT, 1 },               { "LINSERT", K_AT, 1 },
    { "LLEN", K_AT, 1 },                 { "LMOVE", K_AT, 1 },
    { "LMPOP", K_NUMKEYS, 1 },           { "LOLWUT", K_NONE, 0 },
    { "LPOP", K_AT, 1 },                 { "LPOS", K_AT, 1 },
    { "LPUSH", K_AT, 1 },                { "LPUSHX", K_AT, 1 },
    { "LRANGE", K_AT, 1 },               { "LREM", K_AT, 1 },
    { "LSET", K_AT, 1 },                 { "LTRIM", K_AT, 1 },
    { "MEMORY", K_SUB, SUB_MEMORY },     { "MGET", K_AT, 1 },
    { "MIGRATE", K_MIGRATE, 3 },         { "MODULE", K_NONE, 0 },
    { "MONITOR", K_NONE, 0 },            { "MOVE", K_AT, 1 },
    { "MSET", K_AT, 1 },                 { "MSETNX", K_AT, 1 },
    { "MULTI", K_NONE, 0 },              { "OBJECT", K_SUB, SUB_OBJECT },
    { "PERSIST", K_AT, 1 },              { "PEXPIRE", K_AT, 1 },
    { "PEXPIREAT", K_AT, 1 },            { "PEXPIRETIME", K_AT, 1 },
    { "PFADD", K_AT, 1 },                { "PFCOUNT", K_AT, 1 },
    { "PFDEBUG", K_AT, 2 },              { "PFMERGE", K_AT, 1 },
    { "PFSELFTEST", K_NONE, 0 },         { "PING", K_NONE, 0 },
    { "PSETEX", K_AT, 1 },               { "PSUBSCRIBE", K_NONE, 0 },
    { "PSYNC", K_NONE, 0 },              { "PTTL", K_AT, 1 },
    { "PUBLISH", K_NONE, 0 },            { "PUBSUB", K_NONE, 0 },
    { "PUNSUBSCRIBE", K_NONE, 0 },       { "QUIT", K_NONE, 0 },
    { "RANDOMKEY", K_NONE, 0 },          { "READONLY", K_NONE, 0 },
    { "READWRITE", K_NONE, 0 },          { "RENAME", K_AT, 1 },
    { "RENAMENX", K_AT, 1 },             { "REPLCONF", K_NONE, 0 },
    { "REPLICAOF", K_NONE, 0 },          { "RESET", K_NONE, 0 },
    { "RESTORE", K_AT, 1 },              { "RESTORE-ASKING", K_AT, 1 },
    { "ROLE", K_NONE, 0 },               { "RPOP", K_AT, 1 },
    { "RPOPLPUSH", K_AT, 1 },            { "RPUSH", K_AT, 1 },
    { "RPUSHX", K_AT, 1 },               { "SADD", K_AT, 1 },
    { "SAVE", K_NONE, 0 },               { "SCAN", K_NONE, 0 },
    { "SCARD", K_AT, 1 },                { "SCRIPT", K_NONE, 0 },
    { "SDIFF", K_AT, 1 },                { "SDIFFSTORE", K_AT, 1 },
    { "SELECT", K_NONE, 0 },             { "SET", K_AT, 1 },
    { "SETBIT", K_AT, 1 },               { "SETEX", K_AT, 1 },
    { "SETNX", K_AT, 1 },                { "SETRANGE", K_AT, 1 },
    { "SHUTDOWN", K_NONE, 0 },           { "SINTER", K_AT, 1 },
    { "SINTERCARD", K_NUMKEYS, 1 },      { "SINTERSTORE", K_AT, 1 },
    { "SISMEMBER", K_AT, 1 },            { "SLAVEOF", K_NONE, 0 },
    { "SLOWLOG", K_NONE, 0 },            { "SMEMBERS", K_AT, 1 },
    { "SMISMEMBER", K_AT, 1 },           { "SMOVE", K_AT, 1 },
    { "SORT", K_AT, 1 },                 { "SORT_RO", K_AT, 1 },
    { "SPOP", K_AT, 1 },                 { "SPUBLISH", K_AT, 1 },
    { "SRANDMEMBER", K_AT, 1 },          { "SREM", K_AT, 1 },
    { "SSCAN", K_AT, 1 },                { "SSUBSCRIBE", K_AT, 1 },
    { "STRLEN", K_AT, 1 },               { "SUBSCRIBE", K_NONE, 0 },
    { "SUBSTR", K_AT, 1 },               { "SUNION", K_AT, 1 },
    { "SUNIONSTORE", K_AT, 1 },          { "SUNSUBSCRIBE", K_AT, 1 },
    { "SWAPDB", K_NONE, 0 },             { "SYNC", K_NONE, 0 },
    { "TIME", K_NONE, 0 },               { "TOUCH", K_AT, 1 },
    { "TTL", K_AT, 1 },                  { "TYPE", K_AT, 1 },
    { "UNLINK", K_AT, 1 },               { "UNSUBSCRIBE", K_NONE, 0 },
    { "UNWATCH", K_NONE, 0 },            { "WAIT", K_NONE, 0 },
    { "WAITAOF", K_NONE, 0 },            { "WATCH", K_AT, 1 },
    { "XACK", K_AT, 1 },                 { "XADD", K_AT, 1 },
    { "XAUTOCLAIM", K_AT, 1 },           { "XCLAIM", K_AT, 1 },
    { "XDEL", K_AT, 1 },                 { "XGROUP", K_SUB, SUB_XGROUP },
    { "XINFO", K_SUB, SUB_XINFO },       { "XLEN", K_AT, 1 },
    { "XPENDING", K_AT, 1 },             { "XRANGE", K_AT, 1 },
    { "XREAD", K_STREAMS, 1 },           { "XREADGROUP", K_STREAMS, 4 },
    { "XREVRANGE", K_AT, 1 },            { "XSETID", K_AT, 1 },
    { "XTRIM", K_AT, 1 },                { "ZADD", K_AT, 1 },
    { "ZCARD", K_AT, 1 },                { "ZCOUNT", K_AT, 1 },
    { "ZDIFF", K_NUMKEYS, 1 },           { "ZDIFFSTORE", K_AT, 1 },
    { "ZINCRBY", K_AT, 1 },              { "ZINTER", K_NUMKEYS, 1 },
    { "ZINTERCARD", K_NUMKEYS, 1 },      { "ZINTERSTORE", K_AT, 1 },
    { "ZLEXCOUNT", K_AT, 1 },            { "ZMPOP", K_NUMKEYS, 1 },
    { "ZMSCORE", K_AT, 1 },              { "ZPOPMAX", K_AT, 1 },
    { "ZPOPMIN", K_AT, 1 },              { "ZRANDMEMBER", K_AT, 1 },
    { "ZRANGE", K_AT, 1 },               { "ZRANGEBYLEX", K_AT, 1 },
    { "ZRANGEBYSCORE", K_AT, 1 },        { "ZRANGESTORE", K_AT, 1 },
    { "ZRANK", K_AT, 1 },                { "ZREM", K_AT, 1 },
    { "ZREMRANGEBYLEX", K_AT, 1 },       { "ZREMRANGEBYRANK", K_AT, 1 },
    { "ZREMRANGEBYSCORE", K_AT, 1 },     { "ZREVRANGE", K_AT, 1 },
    { "ZREVRANGEBYLEX", K_AT, 1 },       { "ZREVRANGEBYSCORE", K_AT, 1 },
    { "ZREVRANK", K_AT, 1 },             { "ZSCAN", K_AT, 1 },
    { "ZSCORE", K_AT, 1 },               { "ZUNION", K_NUMKEYS, 1 },
    { "ZUNIONSTORE", K_AT, 1 },
};

#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))

/* Finds the command named by r->argv[0], or NULL. */
static const struct cmd *lookup(const struct sl_resp_req *r)
{
    char up[CMD_NAME_MAX + 1];
    uint32_t n = r->arglen[0];

    if (n == 0 || n > CMD_NAME_MAX)
        return NULL;
    /* Fold to upper case; any byte no command name has (a NUL, a blank,
     * binary) means no match, which also keeps strcmp() below honest. */
    for (uint32_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)r->argv[0][i];
        if (c >= 'a' && c <= 'z')
            c -= 'a' - 'A';
        else if (!((c >= 'A' && c <= 'Z') || c == '_' || c == '-'))
            return NULL;
        up[i] = (char)c;
    }
    up[n] = '\0';

    size_t lo = 0, hi = NCMDS;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(up, cmds[mid].name);
        if (c == 0)
            return &cmds[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

int sl_resp_first_key_selftest(void)
{
    for (size_t i = 0; i < NCMDS; i++) {
        const char *n = cmds[i].name;
        if (n[0] == '\0' || (i > 0 && strcmp(cmds[i - 1].name, n) >= 0))
            return -1;
        for (; *n != '\0'; n++)
            if (!((*n >= 'A' && *n <= 'Z') || *n == '_' || *n == '-'))
                return -1;
        if (cmds[i].kind > K_MIGRATE)
            return -1;
    }
    return 0;
}

/* <i> if argument <i> exists and was captured, else -1. */
static int captured(const struct sl_resp_req *r, uint32_t i)
{
    return i < r->argc && i < r->ncap ? (int)i : -1;
}

/* Argument <i> as a non-negative decimal (as Redis's string2ll() reads it:
 * no sign, no leading zero but "0"), or -1. */
static int64_t arg_count(const struct sl_resp_req *r, uint32_t i)
{
    if (i >= r->ncap)
        return -1;

    uint32_t n = r->arglen[i];
    const char *a = r->argv[i];
    int64_t v = 0;

    if (n == 0 || n > 18 || (a[0] == '0' && n > 1))
        return -1;
    for (uint32_t k = 0; k < n; k++) {
        if (a[k] < '0' || a[k] > '9')
            return -1;
        v = v * 10 + (a[k] - '0');
    }
    return v;
}

int sl_resp_first_key(const struct sl_resp_req *r)
{
    if (r == NULL || r->argc == 0 || r->ncap == 0)
        return -1;

    const struct cmd *c = lookup(r);
    if (c == NULL) /* a module's command, or a newer Redis's: guess 1 */
        return captured(r, 1);

    switch (c->kind) {
    case K_AT:
        return captured(r, c->arg);

    case K_NUMKEYS: {
        /* Redis refuses numkeys larger than the arguments left. */
        int64_t nk = arg_count(r, c->arg);
        if (nk <= 0 || (uint64_t)nk > (uint64_t)r->argc - c->arg - 1)
            return -1;
        return captured(r, c->arg + 1u);
    }

    case K_STREAMS:
        /* The first STREAMS from <arg> on (a group or consumer before it
         * may be named STREAMS, hence <arg>); then as many ids as keys. */
        for (uint32_t i = c->arg; i < r->argc && i < r->ncap; i++) {
            if (sl_resp_arg_is(r, i, "STREAMS")) {
                uint32_t rest = r->argc - i - 1;
                if (rest == 0 || rest % 2 != 0)
                    return -1;
                return captured(r, i + 1);
            }
        }
        return -1;

    case K_SUB:
        if (r->argc < 3)
            return -1;
        for (const char *const *s = subcommands[c->arg]; *s != NULL; s++)
            if (sl_resp_arg_is(r, 1, *s))
                return captured(r, 2);
        return -1;

    case K_MIGRATE:
        if (r->argc < 4 || r->ncap < 4 || r->arglen[3] == 0)
            return -1; /* MIGRATE host port "" db timeout ... KEYS k1 k2 */
        return 3;

    default:
        return -1;
    }
}

/* ---- values ------------------------------------------------------------------ */

/* Bytes an identity may hold as is: printable ASCII but blank, the quotes,
 * backslash (error messages, logs, JSON), ':' (store key separator), '{' and
 * '}' (Redis Cluster hash tags in store keys). */
static int safe_byte(unsigned char c)
{
    return c > ' ' && c < 0x7f && c != '"' && c != '\'' && c != '\\' &&
           c != ':' && c != '{' && c != '}';
}

static const char *const tags[] = SL_ID_TAGS; /* per enum sl_id_source */

#define N_TAGS (sizeof(tags) / sizeof(tags[0]))

/* SipHash-2-4 (Aumasson and Bernstein, 2012), written from the paper, fed
 * in pieces. A keyed hash with a fixed key: every instance of a fleet must
 * give a value the same store key, so the key cannot be secret; what it
 * buys over FNV is that finding a second value with a given hash (another
 * client's bucket) costs a search of 2^64, not an equation to solve. */
struct sip {
    uint64_t v0, v1, v2, v3;
    uint64_t tail;  /* bytes not yet in a full word, little endian */
    uint64_t total; /* bytes fed */
};

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

static void sip_round(struct sip *s)
{
    s->v0 += s->v1; s->v1 = ROTL(s->v1, 13); s->v1 ^= s->v0; s->v0 = ROTL(s->v0, 32);
    s->v2 += s->v3; s->v3 = ROTL(s->v3, 16); s->v3 ^= s->v2;
    s->v0 += s->v3; s->v3 = ROTL(s->v3, 21); s->v3 ^= s->v0;
    s->v2 += s->v1; s->v1 = ROTL(s->v1, 17); s->v1 ^= s->v2; s->v2 = ROTL(s->v2, 32);
}

static void sip_init(struct sip *s, uint64_t k0, uint64_t k1)
{
    s->v0 = k0 ^ 0x736f6d6570736575ull;
    s->v1 = k1 ^ 0x646f72616e646f6dull;
    s->v2 = k0 ^ 0x6c7967656e657261ull;
    s->v3 = k1 ^ 0x7465646279746573ull;
    s->tail = 0;
    s->total = 0;
}

static void sip_feed(struct sip *s, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        s->tail |= (uint64_t)p[i] << (8 * (s->total % 8));
        if (++s->total % 8 == 0) {
            s->v3 ^= s->tail;
            sip_round(s);
            sip_round(s);
            s->v0 ^= s->tail;
            s->tail = 0;
        }
    }
}

static uint64_t sip_end(struct sip *s)
{
    uint64_t b = s->tail | (s->total << 56);
    s->v3 ^= b;
    sip_round(s);
    sip_round(s);
    s->v0 ^= b;
    s->v2 ^= 0xff;
    for (int i = 0; i < 4; i++)
        sip_round(s);
    return s->v0 ^ s->v1 ^ s->v2 ^ s->v3;
}

uint64_t sl_identity_siphash(const uint8_t key[16], const void *p, size_t n)
{
    struct sip s;
    uint64_t k[2] = { 0, 0 };
    for (int i = 0; i < 16; i++)
        k[i / 8] |= (uint64_t)key[i] << (8 * (i % 8));
    sip_init(&s, k[0], k[1]);
    sip_feed(&s, p, n);
    return sip_end(&s);
}

/* The hashed form of a value of source <src>: <tag>#<16 hex digits> of
 * SipHash over the tag, a NUL, <n> bytes of <p>, then the 8 bytes of <len>
 * (the value's full length, so two values cut to the same captured bytes
 * but of different lengths differ). The tag in the hash and in the text
 * keeps each source's hashes apart. Writes into <out>, returns the length. */
static size_t put_hash2(enum sl_id_source src, const char *pre, size_t pn, const char *p,
                        size_t n, uint64_t len, char *out);

static size_t put_hash(enum sl_id_source src, const char *p, size_t n, uint64_t len, char *out)
{
    return put_hash2(src, NULL, 0, p, n, len, out);
}

/* put_hash() of the <pn> bytes at <pre> followed by the <n> at <p> (as if
 * they were one value; <len> counts both). */
static size_t put_hash2(enum sl_id_source src, const char *pre, size_t pn, const char *p,
                        size_t n, uint64_t len, char *out)
{
    static const char hex[] = "0123456789abcdef";
    const char *tag = tags[src];
    size_t tn = strlen(tag);
    unsigned char lb[8];
    struct sip s;

    for (int i = 0; i < 8; i++)
        lb[i] = (unsigned char)(len >> (8 * i));
    sip_init(&s, 0x65636975736c732dull, 0x7974697469646e65ull); /* "-slsuice", "enditity" */
    sip_feed(&s, tag, tn + 1);
    if (pn > 0)
        sip_feed(&s, pre, pn);
    sip_feed(&s, p, n);
    sip_feed(&s, lb, sizeof(lb));
    uint64_t h = sip_end(&s);

    memcpy(out, tag, tn);
    out[tn] = '#';
    for (int i = 0; i < 16; i++)
        out[tn + 1 + i] = hex[(h >> (60 - 4 * i)) & 0xf];
    out[tn + 17] = '\0';
    return tn + 17;
}

size_t sl_identity_hash(enum sl_id_source src, const char *p, size_t len, char out[SL_ID_MAX + 1])
{
    return put_hash(src, p, len, len, out);
}

/* <tag>:<the <n> bytes at <p>> into <out>, which must have room. */
static size_t put_literal(enum sl_id_source src, const char *p, size_t n, char *out)
{
    size_t tn = strlen(tags[src]);
    memcpy(out, tags[src], tn);
    out[tn] = ':';
    memcpy(out + tn + 1, p, n);
    out[tn + 1 + n] = '\0';
    return tn + 1 + n;
}

/* Writes the identity form of a value of source <src> into <out>
 * (SL_ID_MAX + 1 bytes): its <n> known bytes at <p>, of full length <len>
 * (> n when cut). Returns the length written. */
static size_t put_value(enum sl_id_source src, const char *p, size_t n, uint64_t len, char *out)
{
    if (n == 0 || n != len || n > SL_ID_VALUE_MAX)
        return put_hash(src, p, n, len, out);
    for (size_t i = 0; i < n; i++)
        if (!safe_byte((unsigned char)p[i]))
            return put_hash(src, p, n, len, out);
    return put_literal(src, p, n, out);
}

/* Bytes captured of argument <i> (which must be < r->ncap). */
static size_t cap_len(const struct sl_resp_req *r, unsigned i)
{
    return r->arglen[i] < SL_RESP_CAPTURE_LEN ? r->arglen[i] : SL_RESP_CAPTURE_LEN;
}

/* Stores argument <i> in identity form of source <src> into <dst>
 * (SL_ID_MAX + 1 bytes). */
static void put_arg(enum sl_id_source src, const struct sl_resp_req *r, unsigned i, char *dst)
{
    put_value(src, r->argv[i], cap_len(r, i), r->arglen[i], dst);
}

/* ---- what a connection tells about itself --------------------------------- */

void sl_identity_init(struct sl_ident_state *st, const struct sockaddr *peer)
{
    memset(st, 0, sizeof(*st));
    strcpy(st->ip, "unknown");
    if (peer == NULL)
        return;

    if (peer->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)(const void *)peer;
        inet_ntop(AF_INET, &a->sin_addr, st->ip, sizeof(st->ip));
    } else if (peer->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)(const void *)peer;
        /* ::ffff:10.0.0.1 (an IPv4 client on a dual-stack socket) is the
         * same client as 10.0.0.1 and must get the same identity. */
        if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr))
            inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], st->ip, sizeof(st->ip));
        else
            inet_ntop(AF_INET6, &a->sin6_addr, st->ip, sizeof(st->ip));
    }
}

/* Whether a client name passes Redis's validateClientName(): no blanks, no
 * newlines, nothing outside '!'..'~'. Redis refuses the others, so they
 * never become the name. Only the captured bytes can be checked. */
static int valid_name(const struct sl_resp_req *r, unsigned i)
{
    size_t n = cap_len(r, i);
    for (size_t k = 0; k < n; k++) {
        unsigned char c = (unsigned char)r->argv[i][k];
        if (c < '!' || c > '~')
            return 0;
    }
    return 1;
}

static void set_name(struct sl_ident_state *st, const struct sl_resp_req *r, unsigned i)
{
    if (r->arglen[i] == 0)
        st->name[0] = '\0'; /* CLIENT SETNAME "": no name */
    else
        put_arg(SL_ID_CLIENT_NAME, r, i, st->name);
}

/* HELLO [protover [AUTH user pass] [SETNAME name]], as Redis 7.0 runs it:
 * protover must be 2 or 3; options are taken in order, AUTH at once, so a
 * later bad option still leaves it applied; the name only if every option
 * was fine. */
static void observe_hello(struct sl_ident_state *st, const struct sl_resp_req *r)
{
    int name_at = -1;

    if (r->argc < 2)
        return;
    if (!sl_resp_arg_is(r, 1, "2") && !sl_resp_arg_is(r, 1, "3"))
        return;
    for (uint32_t j = 2; j < r->argc; j++) {
        uint32_t more = r->argc - 1 - j;
        if (j >= r->ncap)
            return; /* options past the capture: cannot tell */
        if (sl_resp_arg_is(r, j, "AUTH") && more >= 2) {
            if (j + 1 >= r->ncap)
                return;
            put_arg(SL_ID_RESP_USER, r, j + 1, st->user);
            j += 2;
        } else if (sl_resp_arg_is(r, j, "SETNAME") && more >= 1) {
            if (j + 1 >= r->ncap || !valid_name(r, j + 1))
                return;
            name_at = (int)j + 1;
            j++;
        } else {
            return;
        }
    }
    if (name_at >= 0)
        set_name(st, r, (unsigned)name_at);
}

int sl_identity_learns(const struct sl_resp_req *r)
{
    if (r == NULL || r->ncap == 0)
        return 0;
    return sl_resp_arg_is(r, 0, "AUTH") || sl_resp_arg_is(r, 0, "HELLO") ||
           sl_resp_arg_is(r, 0, "CLIENT") || sl_resp_arg_is(r, 0, "RESET");
}

void sl_identity_observe(struct sl_ident_state *st, const struct sl_resp_req *r)
{
    if (r == NULL || r->ncap == 0)
        return;

    if (sl_resp_arg_is(r, 0, "AUTH")) {
        if (r->argc == 2)
            strcpy(st->user, "user:default");
        else if (r->argc == 3)
            put_arg(SL_ID_RESP_USER, r, 1, st->user);
    } else if (sl_resp_arg_is(r, 0, "HELLO")) {
        observe_hello(st, r);
    } else if (sl_resp_arg_is(r, 0, "CLIENT")) {
        if (r->argc == 3 && sl_resp_arg_is(r, 1, "SETNAME") && valid_name(r, 2))
            set_name(st, r, 2);
    } else if (sl_resp_arg_is(r, 0, "RESET")) {
        if (r->argc == 1) {
            st->user[0] = '\0';
            st->name[0] = '\0';
        }
    }
}

/* ---- resolving ----------------------------------------------------------------- */

/* The key_prefix identity of <r> into <out>, or 0 if its command has no key
 * (among the captured arguments). */
static size_t key_prefix(const struct sl_listener_conf *lc, const struct sl_resp_req *r, char *out)
{
    int k = sl_resp_first_key(r);
    if (k < 0)
        return 0;

    const char *key = r->argv[k];
    size_t n = cap_len(r, (unsigned)k);
    const char *sep = lc->key_prefix_separator;
    size_t sn = strnlen(sep, sizeof(lc->key_prefix_separator));

    if (sn > 0) {
        const char *at = memmem(key, n, sep, sn);
        if (at != NULL) /* the prefix is all there, however long the key */
            return put_value(SL_ID_KEY_PREFIX, key, (size_t)(at - key), (uint64_t)(at - key), out);
        if (n < r->arglen[k]) {
            /* A cut key with no separator in its first bytes: the prefix,
             * if any, is longer than what we hold. Its hash covers the
             * captured bytes and not the key's length, so that every key
             * under one long prefix still counts as one identity. */
            return put_hash(SL_ID_KEY_PREFIX, key, n, UINT64_MAX, out);
        }
    }
    return put_value(SL_ID_KEY_PREFIX, key, n, r->arglen[k], out); /* no separator: the whole key */
}

/* Copies the string in <s> (an array of <cap> bytes) into <out>. */
static size_t put_str(const char *s, size_t cap, char *out)
{
    size_t n = strnlen(s, cap < SL_ID_MAX ? cap : SL_ID_MAX);
    memcpy(out, s, n);
    out[n] = '\0';
    return n;
}

/* The client ip as an identity: never hashed (see identity.h). */
static size_t put_ip(const struct sl_ident_state *st, char *out)
{
    const char *ip = st != NULL && st->ip[0] != '\0' ? st->ip : "unknown";
    return put_literal(SL_ID_CLIENT_IP, ip, strnlen(ip, sizeof(st->ip) - 1), out);
}

/* ---- HTTP ------------------------------------------------------------------ */

#define HEADER_NAME_MAX 64 /* bytes of NAME in header:NAME (the loader's cap) */

/* The identity of value <v> (<vn> bytes) of header <name> (<nn> bytes, any
 * case): always hashed, over the lower-cased name, ':' and the value, so
 * that an API key never shows in a log, a metric, a store key or an
 * answer, and the same value in two headers is two identities. */
static size_t put_header(const char *name, size_t nn, const char *v, size_t vn, char *out)
{
    char pre[HEADER_NAME_MAX + 1];
    if (nn > HEADER_NAME_MAX)
        nn = HEADER_NAME_MAX;
    for (size_t i = 0; i < nn; i++)
        pre[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32 : name[i]);
    pre[nn] = ':';
    return put_hash2(SL_ID_HEADER, pre, nn + 1, v, vn, (uint64_t)(nn + 1 + vn), out);
}

/* Whether field <f> of <hd> is named <name> (<nn> bytes, any case). */
static int field_is(const struct sl_http_head *hd, const struct sl_http_field *f,
                    const char *name, size_t nn)
{
    return f->name_len == nn && strncasecmp(hd->buf + f->name, name, nn) == 0;
}

/* Parses the <n> bytes at <p> as an IPv4 or IPv6 address into <a> (IPv4
 * and IPv4-mapped IPv6 as ::ffff:a.b.c.d). Returns 0, or -1. */
static int parse_ip(const char *p, size_t n, unsigned char a[16])
{
    char buf[INET6_ADDRSTRLEN + 1];
    if (n == 0 || n >= sizeof(buf))
        return -1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    memset(a, 0, 16);
    if (inet_pton(AF_INET, buf, a + 12) == 1) {
        a[10] = a[11] = 0xff;
        return 0;
    }
    return inet_pton(AF_INET6, buf, a) == 1 ? 0 : -1;
}

static int trusted(const struct sl_listener_conf *lc, const unsigned char a[16])
{
    for (int i = 0; i < lc->n_trusted_proxies; i++)
        if (sl_conf_cidr_has(&lc->trusted_proxies[i], a))
            return 1;
    return 0;
}

/* The client ip of an HTTP request: the peer, or, when the peer is a
 * trusted proxy, the right-most X-Forwarded-For address that is not one
 * (every X-Forwarded-For field, in order, each a comma list): what a
 * trusted hop appended is the truth about the hop before it, while
 * anything to its left may have been written by the client. If every
 * address is trusted, the left-most; a malformed entry ends the walk
 * (what is left of it cannot be trusted to be in order): the last good
 * address then, or the peer. */
static size_t put_http_ip(const struct sl_listener_conf *lc, const struct sl_ident_state *st,
                          const struct sl_http_head *hd, char *out)
{
    unsigned char a[16], best[16];
    const char *peer = st != NULL ? st->ip : "unknown";

    if (lc == NULL || lc->n_trusted_proxies == 0 || hd == NULL ||
        parse_ip(peer, strnlen(peer, sizeof(st->ip)), a) != 0 || !trusted(lc, a))
        return put_ip(st, out);
    int have = 0; /* <best> holds an address from the header */
    for (uint32_t k = hd->nfields; k-- > 0;) {
        const struct sl_http_field *f = &hd->fields[k];
        if (!field_is(hd, f, "X-Forwarded-For", 15))
            continue;
        const char *v = hd->buf + f->value;
        size_t end = f->value_len;
        for (;;) { /* the entries of this field, right to left */
            size_t start = end;
            while (start > 0 && v[start - 1] != ',')
                start--;
            size_t b = start, e = end;
            while (b < e && (v[b] == ' ' || v[b] == '\t'))
                b++;
            while (e > b && (v[e - 1] == ' ' || v[e - 1] == '\t'))
                e--;
            if (e > b) { /* an empty list element is no entry (RFC 9110 5.6.1) */
                if (parse_ip(v + b, e - b, a) != 0)
                    goto done;
                memcpy(best, a, 16);
                have = 1;
                if (!trusted(lc, a))
                    goto done;
            }
            if (start == 0)
                break;
            end = start - 1;
        }
    }
done:
    if (!have)
        return put_ip(st, out);
    static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    char text[INET6_ADDRSTRLEN];
    if (memcmp(best, mapped, 12) == 0)
        inet_ntop(AF_INET, best + 12, text, sizeof(text));
    else
        inet_ntop(AF_INET6, best, text, sizeof(text));
    return put_literal(SL_ID_CLIENT_IP, text, strlen(text), out);
}

/* Standard fields that are one value whose grammar holds commas (RFC 9110
 * credentials with auth-params, product comments, cookie pairs): nobody
 * splits them, so a comma in them is no list. */
static int comma_is_content(const char *name, size_t nn)
{
    static const char *const names[] = { "Authorization", "Proxy-Authorization", "User-Agent",
                                         "Cookie" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i]) == nn && strncasecmp(names[i], name, nn) == 0)
            return 1;
    return 0;
}

int sl_identity_http_check(const struct sl_listener_conf *lc, const struct sl_ident_state *st,
                           const struct sl_http_head *hd, char *why, size_t cap)
{
    int n_src = lc != NULL ? lc->n_identity : 0;
    if (n_src > SL_CONF_MAX_IDENTITY)
        n_src = SL_CONF_MAX_IDENTITY;
    for (int i = 0; hd != NULL && i < n_src; i++) {
        switch (lc->identity[i]) {
        case SL_ID_HEADER: {
            const char *name = lc->identity_header[i];
            size_t nn = name != NULL ? strlen(name) : 0;
            const struct sl_http_field *one = NULL;
            uint32_t count = 0;
            for (uint32_t k = 0; nn > 0 && k < hd->nfields; k++)
                if (field_is(hd, &hd->fields[k], name, nn)) {
                    one = &hd->fields[k];
                    count++;
                }
            /* Two fields: sluice would charge one while the upstream may
             * read the other (the last, or both joined). */
            if (count > 1) {
                snprintf(why, cap, "more than one %s field: which one is the identity is "
                         "ambiguous", name);
                return -1;
            }
            if (count == 0 || one->value_len == 0)
                break; /* nothing: the next source */
            /* "a, b" is the same as two fields to HTTP (RFC 9110 5.3):
             * a hop may join them so, a framework may split them again. */
            if (memchr(hd->buf + one->value, ',', one->value_len) != NULL &&
                !comma_is_content(name, nn)) {
                snprintf(why, cap, "a comma list in %s: which value is the identity is "
                         "ambiguous", name);
                return -1;
            }
            return 0;
        }
        case SL_ID_TLS_SUBJECT:
            if (st != NULL && st->tls[0] != '\0')
                return 0;
            break;
        case SL_ID_CLIENT_IP:
        case SL_ID_NONE:
            return 0;
        default:
            break;
        }
    }
    return 0;
}

size_t sl_identity_of_req(const struct sl_listener_conf *lc, const struct sl_ident_state *st,
                          const struct sl_req *r, char out[SL_ID_MAX + 1])
{
    if ((r == NULL || (r->resp == NULL && r->http == NULL)) && st != NULL && st->last[0] != '\0')
        return put_str(st->last, SL_ID_MAX + 1, out); /* bytes on http: the latest request's */
    if (r == NULL || r->http == NULL)
        return sl_identity_of(lc, st, r != NULL ? r->resp : NULL, out);

    const struct sl_http_head *hd = r->http;
    int n_src = lc != NULL ? lc->n_identity : 0;
    if (n_src > SL_CONF_MAX_IDENTITY)
        n_src = SL_CONF_MAX_IDENTITY;
    for (int i = 0; i < n_src; i++) {
        switch (lc->identity[i]) {
        case SL_ID_HEADER: {
            const char *name = lc->identity_header[i];
            size_t nn = name != NULL ? strlen(name) : 0;
            for (uint32_t k = 0; nn > 0 && k < hd->nfields; k++) {
                const struct sl_http_field *f = &hd->fields[k];
                /* The first field of that name (sl_identity_http_check()
                 * refused a request with two); an empty one yields nothing. */
                if (field_is(hd, f, name, nn)) {
                    if (f->value_len > 0)
                        return put_header(name, nn, hd->buf + f->value, f->value_len, out);
                    break;
                }
            }
            break;
        }
        case SL_ID_CLIENT_IP:
            return put_http_ip(lc, st, hd, out);
        case SL_ID_TLS_SUBJECT:
            if (st != NULL && st->tls[0] != '\0')
                return put_str(st->tls, sizeof(st->tls), out);
            break;
        case SL_ID_NONE:
            return put_str(tags[SL_ID_NONE], SL_ID_MAX, out);
        default: /* resp sources: nothing in an HTTP request */
            break;
        }
    }
    return put_http_ip(lc, st, hd, out);
}

size_t sl_identity_canon(const char *entry, char out[SL_ID_MAX + 1])
{
    size_t len = strlen(entry);

    if (strcmp(entry, tags[SL_ID_NONE]) == 0)
        return put_str(entry, len + 1, out);
    for (size_t src = 0; src < N_TAGS; src++) {
        size_t tn = strlen(tags[src]);
        if (src == SL_ID_NONE || strncmp(entry, tags[src], tn) != 0)
            continue;
        const char *v = entry + tn + 1;
        size_t vn = len - tn - 1;
        if (src == SL_ID_HEADER && entry[tn] == ':') {
            /* header:NAME:VALUE: always hashed, as header_value() does. */
            const char *colon = memchr(v, ':', vn);
            if (colon == NULL || colon == v || (size_t)(colon - v) > HEADER_NAME_MAX)
                return 0;
            return put_header(v, (size_t)(colon - v), colon + 1, vn - (size_t)(colon - v) - 1,
                              out);
        }
        if (entry[tn] == '#' || (entry[tn] == ':' && src == SL_ID_CLIENT_IP))
            /* A hashed form, or a value that is never hashed: as written,
             * and too long to be any identity means no match. */
            return len <= SL_ID_MAX ? put_str(entry, len + 1, out) : 0;
        if (entry[tn] == ':')
            return put_value((enum sl_id_source)src, v, vn, vn, out);
    }
    return 0;
}

void sl_identity_set_tls(struct sl_ident_state *st, const char *name, size_t n)
{
    st->tls[0] = '\0';
    if (n > 0) /* whole: a long name is hashed over all of its bytes */
        put_value(SL_ID_TLS_SUBJECT, name, n, n, st->tls);
}

int sl_identity_uses(const struct sl_listener_conf *lc, enum sl_id_source src)
{
    for (int i = 0; lc != NULL && i < lc->n_identity && i < SL_CONF_MAX_IDENTITY; i++)
        if (lc->identity[i] == src)
            return 1;
    return 0;
}

size_t sl_identity_of(const struct sl_listener_conf *lc, const struct sl_ident_state *st,
                      const struct sl_resp_req *r, char out[SL_ID_MAX + 1])
{
    int n_src = lc != NULL ? lc->n_identity : 0;
    size_t n;

    if (n_src > SL_CONF_MAX_IDENTITY)
        n_src = SL_CONF_MAX_IDENTITY;
    for (int i = 0; i < n_src; i++) {
        switch (lc->identity[i]) {
        case SL_ID_RESP_USER:
            if (st != NULL && st->user[0] != '\0')
                return put_str(st->user, sizeof(st->user), out);
            break;
        case SL_ID_CLIENT_NAME:
            if (st != NULL && st->name[0] != '\0')
                return put_str(st->name, sizeof(st->name), out);
            break;
        case SL_ID_KEY_PREFIX:
            if (r != NULL && (n = key_prefix(lc, r, out)) > 0)
                return n;
            break;
        case SL_ID_CLIENT_IP:
            return put_ip(st, out);
        case SL_ID_TLS_SUBJECT:
            if (st != NULL && st->tls[0] != '\0')
                return put_str(st->tls, sizeof(st->tls), out);
            break;
        case SL_ID_NONE:
            return put_str(tags[SL_ID_NONE], SL_ID_MAX, out);
        case SL_ID_HEADER: /* HTTP: the HTTP code resolves it */
        default:
            break;
        }
    }
    return put_ip(st, out);
}

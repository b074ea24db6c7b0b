/* sluice — Redis Cluster's key slots and the slot map (see slot.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/read.h>

#include "store/slot.h"

/* The CRC of each byte value, made on first use from the polynomial: every
 * store call in a cluster hashes its keys, one table step a byte. (One
 * process, one thread: no race on the first use.) */
static uint16_t crc_table[256];
static int crc_ready;

static void crc_init(void)
{
    for (int v = 0; v < 256; v++) {
        uint16_t crc = (uint16_t)(v << 8);
        for (int b = 0; b < 8; b++)
            crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
        crc_table[v] = crc;
    }
    crc_ready = 1;
}

uint16_t sl_slot_crc16(const char *p, size_t len)
{
    if (!crc_ready)
        crc_init();
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++)
        crc = (uint16_t)((crc << 8) ^ crc_table[((crc >> 8) ^ (unsigned char)p[i]) & 0xff]);
    return crc;
}

unsigned sl_slot_of_key(const char *p, size_t len)
{
    const char *open = memchr(p, '{', len);
    if (open != NULL) {
        size_t rest = len - (size_t)(open - p) - 1;
        const char *close = memchr(open + 1, '}', rest);
        if (close != NULL && close > open + 1)
            return sl_slot_crc16(open + 1, (size_t)(close - open - 1)) & (SL_SLOTS - 1);
    }
    return sl_slot_crc16(p, len) & (SL_SLOTS - 1);
}

/* ---- tokens --------------------------------------------------------------- */

int sl_slot_tok_add(struct sl_slot_toks *tk, int parent, int type, int64_t i, const char *s,
                    size_t len)
{
    if (tk->bad != NULL)
        return -1;
    if (tk->n >= SL_SLOT_TOK_MAX) {
        tk->bad = "slot map reply too large";
        return -1;
    }
    if (tk->n == tk->cap) {
        int cap = tk->cap ? tk->cap * 2 : 256;
        struct sl_slot_tok *t = realloc(tk->t, (size_t)cap * sizeof(*t));
        if (t == NULL) {
            tk->bad = "out of memory";
            return -1;
        }
        tk->t = t;
        tk->cap = cap;
    }
    int k = tk->n++;
    struct sl_slot_tok *t = &tk->t[k];
    t->parent = parent;
    t->first = t->last = t->next = -1;
    t->type = type;
    t->i = i;
    size_t n = s == NULL ? 0 : len < SL_SLOT_STR_MAX ? len : SL_SLOT_STR_MAX;
    if (n)
        memcpy(t->s, s, n);
    t->s[n] = '\0';
    if (parent >= 0 && parent < k) {
        struct sl_slot_tok *p = &tk->t[parent];
        if (p->last < 0)
            p->first = k;
        else
            tk->t[p->last].next = k;
        p->last = k;
    }
    return k;
}

void sl_slot_toks_reset(struct sl_slot_toks *tk)
{
    tk->n = 0;
    tk->bad = NULL;
}

void sl_slot_toks_free(struct sl_slot_toks *tk)
{
    free(tk->t);
    tk->t = NULL;
    tk->n = tk->cap = 0;
    tk->bad = NULL;
}

/* hiredis object functions for sl_slot_toks_from_resp(): the object is the
 * token's index + 1 (never NULL), so a child finds its parent's index. */
static int parent_of(const redisReadTask *t)
{
    return t->parent != NULL ? (int)((uintptr_t)t->parent->obj - 1) : -1;
}

static void *tok_obj(int k)
{
    return k < 0 ? (void *)(uintptr_t)1 : (void *)(uintptr_t)(k + 1);
}

static void *tk_string(const redisReadTask *t, char *s, size_t len)
{
    struct sl_slot_toks *tk = t->privdata;
    return tok_obj(sl_slot_tok_add(tk, parent_of(t), t->type, 0, s, len));
}

static void *tk_array(const redisReadTask *t, int elements)
{
    (void)elements;
    struct sl_slot_toks *tk = t->privdata;
    return tok_obj(sl_slot_tok_add(tk, parent_of(t), REDIS_REPLY_ARRAY, 0, NULL, 0));
}

static void *tk_integer(const redisReadTask *t, long long v)
{
    struct sl_slot_toks *tk = t->privdata;
    return tok_obj(sl_slot_tok_add(tk, parent_of(t), REDIS_REPLY_INTEGER, v, NULL, 0));
}

static void *tk_nil(const redisReadTask *t)
{
    struct sl_slot_toks *tk = t->privdata;
    return tok_obj(sl_slot_tok_add(tk, parent_of(t), REDIS_REPLY_NIL, 0, NULL, 0));
}

static void tk_free(void *obj)
{
    (void)obj;
}

int sl_slot_toks_from_resp(struct sl_slot_toks *tk, const char *resp, size_t len)
{
    static redisReplyObjectFunctions fn = {
        .createString = tk_string, .createArray = tk_array, .createInteger = tk_integer,
        .createNil = tk_nil, .freeObject = tk_free,
    };
    sl_slot_toks_reset(tk);
    redisReader *r = redisReaderCreateWithFunctions(&fn);
    if (r == NULL)
        return -1;
    r->privdata = tk;
    void *obj = NULL;
    int rc = redisReaderFeed(r, resp, len) == REDIS_OK && redisReaderGetReply(r, &obj) == REDIS_OK &&
                     obj != NULL && tk->bad == NULL
                 ? 0
                 : -1;
    redisReaderFree(r);
    return rc;
}

/* ---- the map ----------------------------------------------------------------- */

static const struct sl_slot_tok *child(const struct sl_slot_toks *tk, int k, int nth)
{
    int c = tk->t[k].first;
    while (c >= 0 && nth-- > 0)
        c = tk->t[c].next;
    return c >= 0 ? &tk->t[c] : NULL;
}

static int is_str(const struct sl_slot_tok *t)
{
    return t != NULL && (t->type == REDIS_REPLY_STRING || t->type == REDIS_REPLY_STATUS);
}

/* In a RESP2 "map" (a flat array of key, value, ...) at <k>: the value of <key>. */
static const struct sl_slot_tok *field(const struct sl_slot_toks *tk, int k, const char *key)
{
    for (int c = tk->t[k].first; c >= 0 && tk->t[c].next >= 0; c = tk->t[tk->t[c].next].next)
        if (is_str(&tk->t[c]) && strcmp(tk->t[c].s, key) == 0)
            return &tk->t[tk->t[c].next];
    return NULL;
}

static int add_range(struct sl_slot_range *out, int *n, int cap, int64_t a, int64_t b,
                     const char *ip, int64_t port, const char **why)
{
    if (a < 0 || b < a || b >= SL_SLOTS || port <= 0 || port > 65535 || ip[0] == '\0') {
        *why = "slot map: a range or an address out of bounds";
        return -1;
    }
    if (*n >= cap) {
        *why = "slot map: too many ranges";
        return -1;
    }
    out[*n].start = (uint16_t)a;
    out[*n].end = (uint16_t)b;
    snprintf(out[*n].ip, sizeof(out[*n].ip), "%s", ip);
    out[*n].port = (uint16_t)port;
    (*n)++;
    return 0;
}

static int parse_shards(const struct sl_slot_toks *tk, struct sl_slot_range *out, int cap,
                        const char **why, int tls);

int sl_slot_parse_shards(const struct sl_slot_toks *tk, struct sl_slot_range *out, int cap,
                         const char **why)
{
    return parse_shards(tk, out, cap, why, 0);
}

int sl_slot_parse_shards_tls(const struct sl_slot_toks *tk, struct sl_slot_range *out, int cap,
                             const char **why)
{
    return parse_shards(tk, out, cap, why, 1);
}

static int parse_shards(const struct sl_slot_toks *tk, struct sl_slot_range *out, int cap,
                        const char **why, int tls)
{
    *why = "CLUSTER SHARDS: unexpected reply";
    if (tk->n == 0 || tk->t[0].type != REDIS_REPLY_ARRAY)
        return -1;
    int n = 0;
    for (int s = tk->t[0].first; s >= 0; s = tk->t[s].next) {
        if (tk->t[s].type != REDIS_REPLY_ARRAY)
            return -1;
        const struct sl_slot_tok *slots = field(tk, s, "slots");
        const struct sl_slot_tok *nodes = field(tk, s, "nodes");
        if (slots == NULL || nodes == NULL || slots->type != REDIS_REPLY_ARRAY ||
            nodes->type != REDIS_REPLY_ARRAY)
            return -1;
        const struct sl_slot_tok *master = NULL, *mport = NULL;
        int online = 0;
        for (int c = nodes->first; c >= 0; c = tk->t[c].next) {
            if (tk->t[c].type != REDIS_REPLY_ARRAY)
                return -1;
            const struct sl_slot_tok *role = field(tk, c, "role");
            const struct sl_slot_tok *ip = field(tk, c, "ip");
            /* A TLS cluster (tls-cluster yes) names its TLS port "tls-port"
             * and its plaintext one, if any, "port". */
            const struct sl_slot_tok *port = tls ? field(tk, c, "tls-port") : NULL;
            if (port == NULL)
                port = field(tk, c, "port");
            const struct sl_slot_tok *health = field(tk, c, "health");
            if (!is_str(role) || strcmp(role->s, "master") != 0 || !is_str(ip) || port == NULL ||
                port->type != REDIS_REPLY_INTEGER)
                continue;
            int on = is_str(health) && strcmp(health->s, "online") == 0;
            if (master == NULL || (on && !online)) {
                master = ip;
                mport = port;
                online = on;
            }
        }
        if (master == NULL)
            continue;
        for (int c = slots->first; c >= 0; c = tk->t[c].next) {
            int d = tk->t[c].next;
            if (d < 0 || tk->t[c].type != REDIS_REPLY_INTEGER || tk->t[d].type != REDIS_REPLY_INTEGER)
                return -1;
            if (add_range(out, &n, cap, tk->t[c].i, tk->t[d].i, master->s, mport->i, why) < 0)
                return -1;
            c = d;
        }
    }
    return n;
}

int sl_slot_parse_slots(const struct sl_slot_toks *tk, struct sl_slot_range *out, int cap,
                        const char **why)
{
    *why = "CLUSTER SLOTS: unexpected reply";
    if (tk->n == 0 || tk->t[0].type != REDIS_REPLY_ARRAY)
        return -1;
    int n = 0;
    for (int e = tk->t[0].first; e >= 0; e = tk->t[e].next) {
        const struct sl_slot_tok *a = child(tk, e, 0), *b = child(tk, e, 1), *m = child(tk, e, 2);
        if (tk->t[e].type != REDIS_REPLY_ARRAY || a == NULL || b == NULL || m == NULL ||
            a->type != REDIS_REPLY_INTEGER || b->type != REDIS_REPLY_INTEGER ||
            m->type != REDIS_REPLY_ARRAY)
            return -1;
        int mk = (int)(m - tk->t);
        const struct sl_slot_tok *ip = child(tk, mk, 0), *port = child(tk, mk, 1);
        if (!is_str(ip) || port == NULL || port->type != REDIS_REPLY_INTEGER)
            return -1;
        if (add_range(out, &n, cap, a->i, b->i, ip->s, port->i, why) < 0)
            return -1;
    }
    return n;
}

int sl_slot_parse_redirect(const char *text, int *ask, unsigned *slot, char *host, size_t cap,
                           uint16_t *port)
{
    const char *p;
    if (strncmp(text, "MOVED ", 6) == 0) {
        *ask = 0;
        p = text + 6;
    } else if (strncmp(text, "ASK ", 4) == 0) {
        *ask = 1;
        p = text + 4;
    } else {
        return -1;
    }
    char *end;
    unsigned long s = strtoul(p, &end, 10);
    if (end == p || *end != ' ' || s >= SL_SLOTS)
        return -1;
    p = end + 1;
    const char *colon = strrchr(p, ':');
    if (colon == NULL || colon == p)
        return -1;
    unsigned long pt = strtoul(colon + 1, &end, 10);
    if (end == colon + 1 || (*end != '\0' && *end != ' ') || pt == 0 || pt > 65535)
        return -1;
    const char *h = p, *he = colon;
    if (*h == '[' && he > h + 1 && he[-1] == ']') {
        h++;
        he--;
    }
    size_t hl = (size_t)(he - h);
    if (hl == 0 || hl >= cap)
        return -1;
    memcpy(host, h, hl);
    host[hl] = '\0';
    *slot = (unsigned)s;
    *port = (uint16_t)pt;
    return 0;
}

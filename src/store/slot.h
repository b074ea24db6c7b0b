/* sluice — Redis Cluster's key slots and the slot map, pure: no I/O, no clock.
 *
 * A key's slot is CRC16(key) mod 16384 (CRC-16/XMODEM: polynomial 0x1021,
 * initial value 0, no reflection), where only the hash tag is hashed when
 * the key has one: the bytes between the first '{' and the first '}' after
 * it, if that span is not empty ("{user1000}.following" hashes "user1000";
 * "foo{}{bar}" hashes the whole key; "foo{{bar}}zap" hashes "{bar").
 *
 * The slot map comes from CLUSTER SHARDS (Redis 7) or CLUSTER SLOTS (older,
 * and the fallback). hiredis's reader hands over the nested reply one
 * element at a time; sl_slot_tok_add() keeps each as a token linked to its
 * parent, then sl_slot_parse_*() read the masters' slot ranges out of it. */
#ifndef SL_STORE_SLOT_H
#define SL_STORE_SLOT_H

#include <stddef.h>
#include <stdint.h>

#define SL_SLOTS        16384
#define SL_SLOT_TOK_MAX 32768  /* elements of one map reply, at most (a few per node) */
#define SL_SLOT_STR_MAX 63     /* bytes of a string element kept (an address fits) */

/* CRC-16/XMODEM of <len> bytes at <p>. */
uint16_t sl_slot_crc16(const char *p, size_t len);

/* The cluster slot (0 .. 16383) of the key <p>, <len> bytes (hash tags as above). */
unsigned sl_slot_of_key(const char *p, size_t len);

/* One element of a map reply. */
struct sl_slot_tok {
    int      parent;   /* index of the enclosing array, -1 for the top */
    int      first;    /* first child (arrays), -1 when none */
    int      last;     /* last child so far, -1 when none */
    int      next;     /* next sibling, -1 when last */
    int      type;     /* REDIS_REPLY_* */
    int64_t  i;        /* an integer's value */
    char     s[SL_SLOT_STR_MAX + 1]; /* a string's first bytes, NUL-terminated */
};

struct sl_slot_toks {
    struct sl_slot_tok *t;  /* owned */
    int                 n;
    int                 cap;
    const char         *bad; /* set when the reply did not fit: why */
};

/* Adds an element under the array token <parent> (-1: the top); <s>,<len>
 * for strings, <i> for integers. Returns its index, or -1 (too many, out
 * of memory: <tk>->bad says which). */
int sl_slot_tok_add(struct sl_slot_toks *tk, int parent, int type, int64_t i, const char *s,
                    size_t len);

/* Empties <tk> (keeping its memory); sl_slot_toks_free() releases it. */
void sl_slot_toks_reset(struct sl_slot_toks *tk);
void sl_slot_toks_free(struct sl_slot_toks *tk);

/* Fills <tk> from <len> bytes of one RESP2 reply at <resp> (tests, tools).
 * Returns 0, or -1 (incomplete, malformed, too large). */
int sl_slot_toks_from_resp(struct sl_slot_toks *tk, const char *resp, size_t len);

/* One range of slots served by a master. */
struct sl_slot_range {
    uint16_t start, end;   /* inclusive */
    char     ip[SL_SLOT_STR_MAX + 1];
    uint16_t port;
};

/* The masters' ranges in a CLUSTER SHARDS (..._shards) or CLUSTER SLOTS
 * (..._slots) reply held in <tk>: up to <cap> into <out>. Returns how many,
 * or -1 with *<why> set (not that reply's shape, a range out of bounds, more
 * than <cap>). A shard without a master is left out (its slots stay
 * unknown); of several masters the one whose health is "online" wins. */
int sl_slot_parse_shards(const struct sl_slot_toks *tk, struct sl_slot_range *out, int cap,
                         const char **why);
/* The same for a store reached over TLS: a node's "tls-port" when it has one. */
int sl_slot_parse_shards_tls(const struct sl_slot_toks *tk, struct sl_slot_range *out, int cap,
                             const char **why);
int sl_slot_parse_slots(const struct sl_slot_toks *tk, struct sl_slot_range *out, int cap,
                        const char **why);

/* Parses "MOVED <slot> <host>:<port>" or "ASK ..." (an error reply's text):
 * *<ask> 1 for ASK, the slot, the host into <host> (<cap> bytes, brackets of
 * an IPv6 address removed) and the port. Returns 0 or -1 (not a redirection). */
int sl_slot_parse_redirect(const char *text, int *ask, unsigned *slot, char *host, size_t cap,
                           uint16_t *port);

#endif

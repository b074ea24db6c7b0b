/* sluice — the quota store's wire helpers: growing byte buffers, RESP
 * command encoding, SHA-1 (what EVALSHA names a script by). Pure. */
#ifndef SL_STORE_WIRE_H
#define SL_STORE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

/* A growing byte buffer; all zero is empty. */
struct sl_obuf {
    char  *p;
    size_t len;
    size_t cap;
};

/* Makes room for <more> bytes after <b>'s length. Returns 0 or -1 (OOM). */
int sl_wire_reserve(struct sl_obuf *b, size_t more);

/* Appends <len> bytes. Returns 0 or -1 (OOM). */
int sl_wire_append(struct sl_obuf *b, const char *p, size_t len);

/* Writes <v> in decimal at <p> (no NUL); returns the end. */
char *sl_wire_put_u64(char *p, uint64_t v);

/* Appends one command to <o>: `*<argc>` then the bulks of <a>, <b> and <c>
 * (<na>, <nb>, <nc> of them; any may be 0). Returns 0 or -1 (OOM). */
int sl_wire_encode(struct sl_obuf *o, int na, const struct sl_str *a, int nb,
                   const struct sl_str *b, int nc, const struct sl_str *c);

/* Encodes EVALSHA <sha> <nkeys> <keys...> <args...> into <o> (emptied first). */
int sl_wire_evalsha(struct sl_obuf *o, const char *sha, int nkeys, const struct sl_str *keys,
                    int nargs, const struct sl_str *args);

/* <s> as a string view (borrowed). */
struct sl_str sl_wire_cstr(const char *s);

/* Writes the 40 hex digits of SHA-1(<p>, <len>) and a NUL to <hex>. */
void sl_wire_sha1_hex(const void *p, size_t len, char hex[41]);

#endif

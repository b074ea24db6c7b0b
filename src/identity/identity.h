/* sluice — identity: AUTH user, client name, key prefix, client IP.
 *
 * Pure functions over what the framer captured of a request (struct
 * sl_resp_req: the first SL_RESP_CAPTURE_ARGS arguments, each cut at
 * SL_RESP_CAPTURE_LEN bytes, with their full lengths).
 *
 * An identity is its source and its value: "user:carol", "name:carol",
 * "prefix:tenant", "ip:127.0.0.1", or "all" (source none), so a client
 * name of "127.0.0.1" or "carol" never shares the bucket of that IP or of
 * AUTH user carol. A value that is cut, empty, longer than SL_ID_VALUE_MAX
 * or holds bytes outside printable ASCII (or a blank, quote, backslash,
 * '{', '}' or ':' that would confuse keys and messages) is replaced by its
 * hashed form: the source, '#', and 16 hex digits of SipHash-2-4 over the
 * source and the value ("name#03b69dd1582e6208"). A literal value always
 * follows a ':', so a client that names itself "#03b69dd1582e6208" is
 * "name:#03b69dd1582e6208" and cannot reach a hashed identity. Identities
 * are safe to put in a store key, a log line, JSON and an error message. */
#ifndef SL_IDENTITY_IDENTITY_H
#define SL_IDENTITY_IDENTITY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "conf/conf-t.h"
#include "identity/identity-t.h"
#include "proto/req-t.h"
#include "proto/resp-t.h"

/* Sets up <st> for a new connection from <peer> (may be NULL: ip "unknown"). */
void sl_identity_init(struct sl_ident_state *st, const struct sockaddr *peer);

/* Learns the verified client certificate's name: the <n> bytes at <name>
 * (sl_tls_peer_id(): the CN, else the first DNS, email or URI SAN, whole;
 * 0 bytes = none), the identity source tls_subject: "tls:" + the name, or
 * its hashed form "tls#..." over every byte of it when it is long or holds
 * an unsafe byte. */
void sl_identity_set_tls(struct sl_ident_state *st, const char *name, size_t n);

/* Nonzero if <lc>'s identity sources include <src>. */
int sl_identity_uses(const struct sl_listener_conf *lc, enum sl_id_source src);

/* Learns from a request the connection sent: AUTH pass (user "default"),
 * AUTH user pass, HELLO ver [AUTH user pass] [SETNAME name], CLIENT SETNAME
 * name (an empty name clears it), RESET (clears user back to "" and name).
 * Case-insensitive command names. */
void sl_identity_observe(struct sl_ident_state *st, const struct sl_resp_req *r);

/* Nonzero if <r> is a request sl_identity_observe() may learn from (AUTH,
 * HELLO, CLIENT, RESET): one test of the command name, for a caller that
 * holds such requests back until Redis has answered them (a refused AUTH
 * must not change the identity). */
int sl_identity_learns(const struct sl_resp_req *r);

/* Resolves the identity of request <r> (NULL for a non-RESP connection) on
 * a listener configured with <lc>'s identity sources, in order; the first
 * source that yields a value wins: resp_user (if AUTH seen: "user:..."),
 * client_name (if set: "name:..."), key_prefix (the request's first key up
 * to the listener's key_prefix_separator, or the whole key if it has none;
 * only if the command has a key: "prefix:..."), client_ip (always:
 * "ip:..."), none ("all": everyone is one identity), header:NAME (HTTP: not
 * handled here, skipped). If no source yields, the client ip. Writes the
 * identity NUL-terminated into <out> and returns its length
 * (1..SL_ID_MAX). The client ip is the one value never hashed: an IPv6
 * address keeps its ':' ("ip:::1"), so operators can name it in
 * match_identity. */
size_t sl_identity_of(const struct sl_listener_conf *lc, const struct sl_ident_state *st,
                      const struct sl_resp_req *r, char out[SL_ID_MAX + 1]);

/* Resolves the identity of request <r> whatever its protocol (NULL: no
 * request, e.g. at accept): a RESP request (or none) as sl_identity_of();
 * an HTTP request (r->http) by the listener's sources in order:
 *   header:NAME  the first field NAME (any case) with a non-empty value:
 *                always its hashed form, "header#" + 16 hex digits of
 *                SipHash over the lower-cased NAME, ':' and the value, so
 *                an API key never appears raw anywhere (match_identity
 *                "header:NAME:VALUE" canonicalises to it);
 *   client_ip    the peer's address, or, when the peer is in the
 *                listener's trusted_proxies, the right-most address of
 *                X-Forwarded-For (all such fields in order, comma lists)
 *                that is not; if all are, the left-most; a malformed
 *                entry ends the walk at the last good address (or the
 *                peer). Without trusted_proxies the header is ignored;
 *   none         "all";
 * resp sources yield nothing. If no source yields, client_ip. Writes into
 * <out>; returns the length (1..SL_ID_MAX). */
size_t sl_identity_of_req(const struct sl_listener_conf *lc, const struct sl_ident_state *st,
                          const struct sl_req *r, char out[SL_ID_MAX + 1]);

/* Whether HTTP request <hd> names its identity without ambiguity, on a
 * listener with <lc>'s sources, walked as sl_identity_of_req() does up to
 * the one that yields: a header:NAME source must not meet NAME in two
 * fields (any case, empty ones too), nor a value holding a comma (RFC 9110
 * lets a hop join two fields into "a, b", and frameworks split it again),
 * except in Authorization, Proxy-Authorization, User-Agent and Cookie,
 * single values whose grammar holds commas. Either way sluice would charge
 * one value while the upstream may authenticate another. Returns 0, or -1
 * with the reason (naming the field, never its value) in <why> (<cap>
 * bytes): the request is to be refused (400). */
int sl_identity_http_check(const struct sl_listener_conf *lc, const struct sl_ident_state *st,
                           const struct sl_http_head *hd, char *why, size_t cap);

/* Index (into r->argv) of the request's first key, or -1 if the command
 * takes no key or the key is not among the captured arguments. From a
 * table of Redis 7's commands: most take their key at 1; no-key commands
 * (PING, AUTH, SELECT, MULTI, PUBLISH, SCAN, KEYS, INFO, ...) give -1;
 * subcommand containers (OBJECT ENCODING key, MEMORY USAGE key, XINFO
 * STREAM key ...) at 2; numkeys commands (EVAL/EVALSHA/FCALL script numkeys
 * key..., ZUNION/ZINTER/ZDIFF/SINTERCARD/LMPOP/ZMPOP numkeys key...,
 * BLMPOP/BZMPOP timeout numkeys key...) when numkeys > 0; XREAD/XREADGROUP
 * after STREAMS; BITOP op destkey at 2; MIGRATE host port key at 3 (or -1 for
 * the KEYS form). Unknown commands (modules): 1 if argc > 1. */
int sl_resp_first_key(const struct sl_resp_req *r);

/* Checks the command table behind sl_resp_first_key(): sorted, upper case.
 * Returns 0 if it is fine (for the tests). */
int sl_resp_first_key_selftest(void);

/* The hashed form of the <len> bytes at <p> as a value of source <src>:
 * its tag ("user", "name", "prefix", "ip"), "#", 16 lowercase hex digits.
 * Writes it NUL-terminated into <out>; returns its length. */
size_t sl_identity_hash(enum sl_id_source src, const char *p, size_t len,
                        char out[SL_ID_MAX + 1]);

/* SipHash-2-4 of the <n> bytes at <p> under the 16-byte <key>, the hash
 * behind the hashed forms (exposed for its test vectors). */
uint64_t sl_identity_siphash(const uint8_t key[16], const void *p, size_t n);

/* The identity a match_identity entry (as the configuration resolved it:
 * "user:carol", "ip:::1", "name#03b69dd1582e6208", "all",
 * "header:x-api-key:k123") stands for, as sl_identity_of() and
 * sl_identity_of_req() would write it: a literal value that identities
 * carry hashed ("user:" + a 100-byte name, every header:NAME:VALUE)
 * becomes its hashed form. Writes it into
 * <out> and returns its length, or 0 if <entry> names no source (then it
 * matches no identity). */
size_t sl_identity_canon(const char *entry, char out[SL_ID_MAX + 1]);

#endif

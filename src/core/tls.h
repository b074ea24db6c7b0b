/* sluice — TLS engine: OpenSSL 3 driven through a BIO over the engine's own buffers.
 *
 * The caller owns the socket and the loop; the engine only turns bytes into
 * bytes, so it never blocks and needs no thread:
 *
 *       socket read ──> sl_tls_feed()  ──> [engine] ──> sl_tls_read()  ──> plaintext (to the app)
 *   plaintext (app) ──> sl_tls_write() ──> [engine] ──> sl_tls_take()  ──> socket write
 *
 * The handshake runs inside those calls (or sl_tls_handshake()); it needs
 * both directions, so the caller's one rule is: after EVERY call into the
 * engine, if sl_tls_out_pending() > 0, sl_tls_take() it and write it to the
 * socket. That is also how handshake messages, session tickets, alerts and
 * close_notify leave. Reading: read the socket while sl_tls_feed_room() > 0
 * (size the read buffer to it), feed what arrived, then sl_tls_read() until it
 * returns 0 (or stop early for backpressure: ciphertext then waits inside the
 * engine, bounded by SL_TLS_IN_MAX, and the caller must stop reading the
 * socket once sl_tls_feed_room() is 0).
 *
 * Contexts are reference-counted: a reload builds a new one for new
 * connections; each engine holds a reference to the context it was made
 * from, so existing connections keep their certificates.
 *
 * Return codes are sluice's (core/err.h): SL_OK, SL_EAGAIN (needs more bytes
 * from the peer), SL_ECLOSED (the peer's close_notify), SL_EPROTO (a TLS
 * failure: sl_tls_error() has the reason), SL_ENOMEM, SL_ECONF. */
#ifndef SL_CORE_TLS_H
#define SL_CORE_TLS_H

#include <sys/types.h>
#include "core/tls-t.h"

/* ---- contexts ---------------------------------------------------------- */

/* Builds a context from <conf> (files are read now). On success *<out> holds
 * it with one reference (the caller's) and SL_OK is returned; on failure
 * SL_ECONF (or SL_ENOMEM) and <err> (<errlen> bytes, NUL-terminated) says
 * why in one line naming the file, e.g.
 *   "tls_cert /etc/x.pem: cannot read certificate: no start line". */
int sl_tls_ctx_new(struct sl_tls_ctx **out, const struct sl_tls_conf *conf,
                   char *err, size_t errlen);

/* Adds a reference to <ctx>. */
void sl_tls_ctx_ref(struct sl_tls_ctx *ctx);

/* Drops a reference; the last one frees <ctx>. NULL is ignored. */
void sl_tls_ctx_unref(struct sl_tls_ctx *ctx);

/* Checks a tls_protocols value without building anything: SL_OK, or
 * SL_ECONF with <err> naming the bad word. */
int sl_tls_check_protocols(const char *protocols, char *err, size_t errlen);

/* ---- connections ------------------------------------------------------- */

/* Makes an engine from <ctx> (which gains a reference). <name>, client role
 * only: the server's name, sent as SNI (unless it is an IP address) and, when
 * the context verifies, matched against the certificate (DNS SAN / CN, or the
 * IP SANs for an address); NULL = no SNI, no name check. Ignored for the
 * server role. Returns NULL when out of memory. */
struct sl_tls *sl_tls_new(struct sl_tls_ctx *ctx, const char *name);

/* Frees <t> (no close_notify: call sl_tls_shutdown() first for a clean end).
 * NULL is ignored. */
void sl_tls_free(struct sl_tls *t);

/* Ciphertext bytes sl_tls_feed() will take now (0 .. SL_TLS_IN_MAX). */
size_t sl_tls_feed_room(const struct sl_tls *t);

/* Takes ciphertext read from the socket: up to sl_tls_feed_room() bytes of
 * <buf> (copied). Returns how many were taken; the caller keeps the rest
 * (none when it sized its read to the room). Nothing is decrypted yet. */
size_t sl_tls_feed(struct sl_tls *t, const void *buf, size_t len);

/* Tells the engine the socket reached EOF with no close_notify. Later reads
 * fail with SL_EPROTO ("unexpected eof") once the fed bytes are used up. */
void sl_tls_feed_eof(struct sl_tls *t);

/* Drives the handshake. SL_OK once done (state SL_TLS_OPEN), SL_EAGAIN while
 * it needs more from the peer, SL_EPROTO when it failed (refused
 * certificate, wrong name, plaintext from the peer, no common protocol...).
 * Then take out what is pending (an alert, or the next flight). */
int sl_tls_handshake(struct sl_tls *t);

/* Decrypts into <buf> (<cap> bytes), driving the handshake first if needed.
 * Returns > 0 bytes of plaintext, SL_EAGAIN when it needs more ciphertext (or
 * the handshake is still under way), SL_ECLOSED after the peer's close_notify
 * (its data is over; ours may still go out), SL_EPROTO on a TLS failure. */
ssize_t sl_tls_read(struct sl_tls *t, void *buf, size_t cap);

/* Plaintext ready to be read without feeding more (already decrypted). */
size_t sl_tls_read_pending(const struct sl_tls *t);

/* Encrypts up to <len> bytes of <buf>. Returns how many were taken (the
 * caller keeps the rest and calls again after sl_tls_take()), 0 when none
 * can be taken now (handshake not done yet, or SL_TLS_OUT_MAX ciphertext
 * waiting), SL_EPROTO after a failure, SL_ECLOSED after sl_tls_shutdown().
 * The caller may pass a different buffer holding the same bytes on retry. */
ssize_t sl_tls_write(struct sl_tls *t, const void *buf, size_t len);

/* Ciphertext waiting to be written to the socket. */
size_t sl_tls_out_pending(const struct sl_tls *t);

/* Moves up to <cap> bytes of waiting ciphertext into <buf>; returns how many. */
size_t sl_tls_take(struct sl_tls *t, void *buf, size_t cap);

/* The same without a copy: the waiting ciphertext in place (*<len> bytes;
 * NULL when none), valid until the next call into the engine; once written,
 * sl_tls_out_drop() the bytes the socket took. */
const void *sl_tls_out_peek(const struct sl_tls *t, size_t *len);
void        sl_tls_out_drop(struct sl_tls *t, size_t n);

/* Queues close_notify (once; later calls do nothing). Take it out, write it,
 * then shut the socket down. Nothing can be written after it. */
void sl_tls_shutdown(struct sl_tls *t);

/* ---- what the handshake established ------------------------------------ */

enum sl_tls_state sl_tls_state(const struct sl_tls *t);
enum sl_tls_role  sl_tls_role(const struct sl_tls *t);

/* The peer certificate's subject CN, or when it has none its first DNS (else
 * email, else URI) SAN, for logs: cut at SL_TLS_NAME_MAX - 1 bytes, bytes
 * outside printable ASCII, quotes and backslashes shown as '?'; "" when
 * the peer sent no certificate. Borrowed: valid while <t> lives. Set once
 * the handshake is done. An identity takes sl_tls_peer_id() instead. */
const char *sl_tls_peer_name(const struct sl_tls *t);

/* The whole of the name sl_tls_peer_name() shows, for an identity: the
 * subject's CN, else the first DNS, else email, else URI SAN, as UTF-8,
 * uncut, into *<name> (malloc'd: the caller frees it). Returns its
 * length (> 0), 0 when the peer sent no certificate or it names nothing,
 * SL_ENOMEM, or SL_EPROTO (*<name> NULL, <why> a static reason) when the
 * name cannot stand for one peer: a NUL byte inside it (software that
 * reads it as a C string sees another name), more than one CN, a CN that
 * does not decode. Valid once the handshake is done, while <t> lives. */
ssize_t sl_tls_peer_id(const struct sl_tls *t, char **name, const char **why);

/* 1 when the peer sent a certificate and it verified (chain, dates, and for
 * the client role the name); 0 otherwise. */
int sl_tls_peer_verified(const struct sl_tls *t);

/* 1 when the handshake resumed an earlier session. A client context keeps
 * the latest session its engines were given (for a verified server, or
 * with verification off) and offers it to the next engine made for the
 * same name: no certificate exchange, no chain to verify again. */
int sl_tls_resumed(const struct sl_tls *t);

/* The negotiated ALPN protocol, or "" (none). Borrowed, as above. */
const char *sl_tls_alpn(const struct sl_tls *t);

/* Server role: the SNI name the client sent, or "". Client role: the one we
 * sent, or "". Borrowed, as above. */
const char *sl_tls_sni(const struct sl_tls *t);

/* The negotiated protocol version, e.g. "TLSv1.3", or "" before the end of
 * the handshake. Static string. */
const char *sl_tls_version(const struct sl_tls *t);

/* The negotiated cipher suite in OpenSSL's name, e.g.
 * "ECDHE-ECDSA-AES128-GCM-SHA256" or "TLS_AES_256_GCM_SHA384", or "" before
 * the end of the handshake. Static string. */
const char *sl_tls_cipher(const struct sl_tls *t);

/* Why the engine failed, in one line, e.g. "certificate verify failed:
 * certificate has expired" or "wrong version number (not TLS?)"; "" when it
 * has not failed. Borrowed, as above. */
const char *sl_tls_error(const struct sl_tls *t);

#endif

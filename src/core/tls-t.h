/* sluice — types of the TLS engine (OpenSSL 3, no socket of its own). */
#ifndef SL_CORE_TLS_T_H
#define SL_CORE_TLS_T_H

#include <stddef.h>
#include <stdint.h>

/* A context: certificates, CA, verification and protocol settings, shared by
 * the connections made from it. Opaque; reference-counted (see tls.h). */
struct sl_tls_ctx;

/* One TLS connection's engine: no socket, no loop, no clock. Opaque. */
struct sl_tls;

/* Which end of the handshake an engine plays. */
enum sl_tls_role {
    SL_TLS_SERVER = 0, /* a listener: accepts, presents <cert> */
    SL_TLS_CLIENT = 1, /* an upstream or the store: connects, verifies the server */
};

/* How the peer's certificate is checked.
 *   server role (tls_verify_client): off = no certificate asked;
 *     optional = asked, checked against <ca_file> when sent, a client without
 *     one is let in (sl_tls_peer_verified() says 0); on = required.
 *   client role (upstream_tls_verify, [store] tls_verify): off = anything
 *     accepted (the caller logs it loudly); optional and on = the chain must
 *     verify against <ca_file> (or the system store when none) and the name
 *     given to sl_tls_new() must match the certificate. */
enum sl_tls_verify {
    SL_TLS_VERIFY_OFF      = 0,
    SL_TLS_VERIFY_OPTIONAL = 1,
    SL_TLS_VERIFY_ON       = 2,
};

/* What a context is built from. Every string is borrowed for the call to
 * sl_tls_ctx_new() only (files are read then); NULL or "" = not set. */
struct sl_tls_conf {
    enum sl_tls_role   role;
    const char        *cert_file;  /* PEM, leaf first then the chain; server: required;
                                      client: optional (mutual TLS) */
    const char        *key_file;   /* PEM private key of <cert_file>; required with it */
    const char        *ca_file;    /* PEM bundle the peer's chain must lead to; client role
                                      without one: the system's default store */
    enum sl_tls_verify verify;
    const char        *protocols;  /* "TLSv1.2 TLSv1.3" (default); any of TLSv1.2 TLSv1.3,
                                      the lowest and highest named bound the range */
    const char        *ciphers;    /* OpenSSL cipher list for TLS 1.2 (SSL_CTX_set_cipher_list);
                                      names starting "TLS_" are TLS 1.3 suites and go to
                                      SSL_CTX_set_ciphersuites; NULL = SL_TLS_DEFAULT_CIPHERS
                                      for TLS 1.2, OpenSSL's (all AEAD) for TLS 1.3 */
    const char        *alpn;       /* comma-separated protocols, e.g. "http/1.1"; server: the
                                      ones it accepts (a client offering ALPN with none of
                                      them is refused); client: the ones it offers */
};

/* The TLS 1.2 ciphers of a context whose tls_ciphers names none, on both
 * roles: ECDHE key exchange (forward secrecy) with AEAD encryption only.
 * OpenSSL's own default adds CBC suites (MAC-then-encrypt: the padding
 * oracles of the LUCKY13 family) and RSA key exchange; every TLS 1.2 stack
 * of the last decade has at least one of these. The TLS 1.3 suites
 * (OpenSSL's defaults) are all AEAD already. */
#define SL_TLS_DEFAULT_CIPHERS                                                                   \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"                                 \
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"                                 \
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"

/* Where an engine is. */
enum sl_tls_state {
    SL_TLS_HANDSHAKE = 0, /* handshake under way */
    SL_TLS_OPEN      = 1, /* handshake done: application data flows */
    SL_TLS_CLOSED    = 2, /* the peer's close_notify arrived (clean end of its data) */
    SL_TLS_FAILED    = 3, /* a fatal TLS error: sl_tls_error() says which; close the socket */
};

/* Bounds. The engine never holds more than these, whatever the peer sends:
 *  SL_TLS_IN_MAX   ciphertext fed in and not yet decrypted (sl_tls_feed_room()
 *                  says how much more fits; at 0 the caller stops reading the
 *                  socket until it has read plaintext out with sl_tls_read()).
 *                  At least one full TLS record (16 KiB + 2 KiB) always fits
 *                  once the engine is drained, so progress never stalls.
 *  SL_TLS_OUT_MAX  ciphertext produced and not yet taken out by sl_tls_take():
 *                  sl_tls_write() stops accepting plaintext once this much is
 *                  waiting (it may go past by one record, 16 KiB + 256 bytes).
 *  SL_TLS_NAME_MAX longest peer name / SNI / ALPN kept (longer ones are cut). */
#define SL_TLS_IN_MAX   (64 * 1024)
#define SL_TLS_OUT_MAX  (64 * 1024)
#define SL_TLS_NAME_MAX 256

#endif

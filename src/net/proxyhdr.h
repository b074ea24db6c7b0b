/*
 * The PROXY protocol header (versions 1 and 2) a load balancer writes
 * first on a connection to say whose it is: parsed here, read in
 * session.c (proxy_protocol = v1 | v2 on a listener).
 *
 * The header is read in steps of exactly the bytes it still needs, so no
 * byte of the protocol behind it is ever taken: sl_pp_parse says how many
 * bytes the header has at least, given the <n> read so far.
 */
#ifndef SL_NET_PROXYHDR_H
#define SL_NET_PROXYHDR_H

#include <stddef.h>
#include <sys/socket.h>

#define SL_PP_V1_MAX  107  /* the longest version 1 line, CRLF included */
#define SL_PP_V2_TLVS 4096 /* bytes past a version 2 header's fixed 16: more is refused */
#define SL_PP_MAX     (16 + SL_PP_V2_TLVS)

/* Parses the <n> bytes at <p> as a header of <version> (1 or 2).
 * Returns 1 when the header is whole: *src is the source address it
 * names, or has family AF_UNSPEC when it names none (v1 UNKNOWN, v2 LOCAL
 * or a family without an IP address: the socket's address stands);
 * 0 when more is needed: *want is the length to read up to (> n);
 * -1 when the bytes cannot be such a header (*why says why). */
int sl_pp_parse(int version, const unsigned char *p, size_t n, size_t *want,
                struct sockaddr_storage *src, const char **why);

/* Writes into <out> (<cap> bytes; 232 always do) the header of <version>
 * for a connection from <src> to <dst>; returns its length, 0 if it does
 * not fit. Ends of different or non-IP families: v1 UNKNOWN, v2 UNSPEC. */
size_t sl_pp_write(int version, const struct sockaddr_storage *src,
                   const struct sockaddr_storage *dst, unsigned char *out, size_t cap);

#endif

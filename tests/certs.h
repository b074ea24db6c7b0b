/* sluice tests — throwaway certificates, made with the `openssl` command.
 *
 * One place for the unit tests (tests/unit/core/test_tls.c) and the
 * integration tests (test_tls, test_store_tls): a temporary directory with
 *
 *   ca.pem  / ca.key     a CA (CN sluice-test-ca) that signs every NAME.pem
 *   ca2.pem / ca2.key    a second, unrelated CA (CN other-ca): signs nothing
 *   NAME.pem / NAME.key  one certificate per entry asked for
 *
 * Keys are EC P-256 (quick to make). Certificates are signed with
 * `openssl ca`, which takes a validity window in the past
 * (-startdate/-enddate): OpenSSL 3.0's `openssl x509 -req` has no
 * -not_before, and `-days -1` makes a certificate that ends before it
 * starts. Uses libc only (no cmocka, no harness), so any test links it. */
#ifndef SL_TEST_CERTS_H
#define SL_TEST_CERTS_H

#include <stddef.h>

/* subjectAltName of a server on this machine */
#define TH_SAN_LOCAL "DNS:localhost,IP:127.0.0.1"

enum {
    TH_CERT_CLIENT = 1, /* extendedKeyUsage = clientAuth */
    TH_CERT_EXPIRED = 2 /* valid on 2020-01-01 only: long expired */
};

/* One certificate to make (not expired: valid from now for two days). */
struct th_cert {
    const char *name;    /* the files NAME.pem and NAME.key */
    const char *subject; /* e.g. "/CN=localhost" */
    const char *san;     /* subjectAltName, e.g. TH_SAN_LOCAL; NULL: none */
    unsigned    flags;   /* TH_CERT_* */
};

struct th_certs {
    char dir[64]; /* the directory, made by th_certs_make() */
};

/* Makes a fresh temporary directory in <c> and in it the two CAs and the
 * <n> certificates of <certs>. Names, subjects and SANs are limited to
 * letters, digits and "/=.,:-_" (they go through the shell). Returns 0, or
 * -1 after printing what openssl said (the directory is then removed). */
int th_certs_make(struct th_certs *c, const struct th_cert *certs, size_t n);

/* A client certificate whose names the shell cannot carry (a NUL byte
 * inside, hundreds of bytes): made with OpenSSL's API, signed by ca.pem. */
struct th_raw_cert {
    const char *name;       /* the files NAME.pem and NAME.key */
    const char *cn[2];      /* up to two CN entries (NULL: none) ... */
    size_t      cn_len[2];  /* ... of these many bytes each */
    int         san_type;   /* 0: no subjectAltName; else 1 DNS, 2 URI */
    const char *san;        /* the SAN's bytes */
    size_t      san_len;
};

/* Makes NAME.pem / NAME.key for each of the <n> <certs> in <c>'s directory
 * (after th_certs_make()): EC P-256, clientAuth, valid from an hour ago for
 * two days. Returns 0, or -1 after printing why. */
int th_certs_make_raw(const struct th_certs *c, const struct th_raw_cert *certs, size_t n);

/* "<dir>/<file>" in one of eight rotating static buffers: valid until the
 * eighth call after this one (enough for one call's arguments). */
const char *th_certs_path(const struct th_certs *c, const char *file);

/* Removes the directory and everything in it; 0 or -1. */
int th_certs_remove(struct th_certs *c);

#endif

/* sluice tests — throwaway certificates (see certs.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "certs.h"

/* What may go through the shell unquoted inside '...'. */
static int safe(const char *s)
{
    if (s == NULL || *s == '\0')
        return 0;
    for (; *s; s++)
        if (strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/=.,:-_", *s) ==
            NULL)
            return 0;
    return 1;
}

/* Writes <text> to <dir>/<name>; 0 or -1. */
static int write_file(const char *dir, const char *name, const char *text)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f == NULL)
        return -1;
    int rc = fputs(text, f) < 0 ? -1 : 0;
    return fclose(f) != 0 ? -1 : rc;
}

static void print_log(const char *dir)
{
    char p[256], line[512];
    snprintf(p, sizeof p, "%s/certs.log", dir);
    FILE *f = fopen(p, "r");
    fprintf(stderr, "th_certs_make failed; openssl said:\n");
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        fputs(line, stderr);
    if (f != NULL)
        fclose(f);
}

/* The CA's database for `openssl ca`: no prompts, any subject (also one
 * without a CN, or one used twice), the request's order of its fields. */
static const char ca_cnf[] =
    "[ca]\ndefault_ca = d\n"
    "[d]\ndatabase = index.txt\nnew_certs_dir = issued\nserial = serial\n"
    "certificate = ca.pem\nprivate_key = ca.key\ndefault_md = sha256\npolicy = p\n"
    "unique_subject = no\n"
    "[p]\ncommonName = optional\n";

int th_certs_make(struct th_certs *c, const struct th_cert *certs, size_t n)
{
    char *cmd = NULL;
    snprintf(c->dir, sizeof c->dir, "/tmp/sluice-certs-XXXXXX");
    if (mkdtemp(c->dir) == NULL) {
        perror("th_certs_make: mkdtemp");
        c->dir[0] = '\0';
        return -1;
    }
    if (write_file(c->dir, "ca.cnf", ca_cnf) < 0)
        goto fail;
    size_t cap = 1024 + n * 256, len = 0;
    if ((cmd = malloc(cap)) == NULL)
        goto fail;
    len += (size_t)snprintf(
        cmd + len, cap - len,
        "set -e; cd %s; exec >certs.log 2>&1\n"
        "EC='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'\n"
        "openssl req -x509 $EC -keyout ca.key -out ca.pem -days 2 -subj /CN=sluice-test-ca\n"
        "openssl req -x509 $EC -keyout ca2.key -out ca2.pem -days 2 -subj /CN=other-ca\n"
        "mkdir issued; : > index.txt; echo 1000 > serial\n"
        "sign() { n=$1 s=$2; shift 2; openssl req $EC -keyout $n.key -out $n.csr -subj \"$s\"; "
        "openssl ca -batch -config ca.cnf -notext -preserveDN -in $n.csr -out $n.pem "
        "-extfile $n.ext \"$@\"; }\n",
        c->dir);
    for (size_t i = 0; i < n; i++) {
        const struct th_cert *t = &certs[i];
        if (!safe(t->name) || !safe(t->subject) || (t->san != NULL && !safe(t->san))) {
            fprintf(stderr, "th_certs_make: %s: a name, subject or SAN the shell could misread\n",
                    t->name ? t->name : "(null)");
            goto fail;
        }
        char ext[512], file[128];
        snprintf(ext, sizeof ext, "basicConstraints = CA:FALSE\n%s%s%s%s",
                 t->san ? "subjectAltName = " : "", t->san ? t->san : "", t->san ? "\n" : "",
                 t->flags & TH_CERT_CLIENT ? "extendedKeyUsage = clientAuth\n" : "");
        snprintf(file, sizeof file, "%s.ext", t->name);
        if (write_file(c->dir, file, ext) < 0)
            goto fail;
        len += (size_t)snprintf(cmd + len, cap - len, "sign '%s' '%s' %s\n", t->name, t->subject,
                                t->flags & TH_CERT_EXPIRED
                                    ? "-startdate 20200101000000Z -enddate 20200102000000Z"
                                    : "-days 2");
        if (len >= cap)
            goto fail;
    }
    if (system(cmd) != 0) {
        print_log(c->dir);
        goto fail;
    }
    free(cmd);
    return 0;
fail:
    free(cmd);
    th_certs_remove(c);
    return -1;
}

const char *th_certs_path(const struct th_certs *c, const char *file)
{
    static char bufs[8][192];
    static unsigned i;
    char *p = bufs[i++ % 8];
    snprintf(p, sizeof bufs[0], "%s/%s", c->dir, file);
    return p;
}

int th_certs_remove(struct th_certs *c)
{
    if (c->dir[0] == '\0')
        return 0;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", c->dir);
    c->dir[0] = '\0';
    return system(cmd) == 0 ? 0 : -1;
}

/* Reads ca.pem / ca.key of <c>; 0 or -1. */
static int load_ca(const struct th_certs *c, X509 **ca, EVP_PKEY **key)
{
    FILE *f = fopen(th_certs_path(c, "ca.pem"), "r");
    *ca = f != NULL ? PEM_read_X509(f, NULL, NULL, NULL) : NULL;
    if (f != NULL)
        fclose(f);
    f = fopen(th_certs_path(c, "ca.key"), "r");
    *key = f != NULL ? PEM_read_PrivateKey(f, NULL, NULL, NULL) : NULL;
    if (f != NULL)
        fclose(f);
    return *ca != NULL && *key != NULL ? 0 : -1;
}

/* Writes <x> and <key> to NAME.pem / NAME.key; 0 or -1. */
static int write_pem(const struct th_certs *c, const char *name, X509 *x, EVP_PKEY *key)
{
    char file[128];
    snprintf(file, sizeof file, "%s.pem", name);
    FILE *f = fopen(th_certs_path(c, file), "w");
    int ok = f != NULL && PEM_write_X509(f, x);
    if (f != NULL && fclose(f) != 0)
        ok = 0;
    snprintf(file, sizeof file, "%s.key", name);
    f = fopen(th_certs_path(c, file), "w");
    ok = ok && f != NULL && PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL);
    if (f != NULL && fclose(f) != 0)
        ok = 0;
    return ok ? 0 : -1;
}

static int make_raw(const struct th_certs *c, const struct th_raw_cert *t, X509 *ca,
                    EVP_PKEY *ca_key, long serial)
{
    int rc = -1;
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    GENERAL_NAMES *sans = NULL;
    if (key == NULL || x == NULL)
        goto out;
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), serial);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 2 * 86400);
    X509_set_pubkey(x, key);
    X509_set_issuer_name(x, X509_get_subject_name(ca));
    X509_NAME *subj = X509_get_subject_name(x);
    if (!X509_NAME_add_entry_by_txt(subj, "O", MBSTRING_ASC, (const unsigned char *)"sluice", -1,
                                    -1, 0))
        goto out;
    for (int i = 0; i < 2; i++)
        if (t->cn[i] != NULL &&
            !X509_NAME_add_entry_by_txt(subj, "CN", MBSTRING_UTF8, (const unsigned char *)t->cn[i],
                                        (int)t->cn_len[i], -1, 0))
            goto out;
    if (t->san_type != 0) {
        GENERAL_NAME *g = GENERAL_NAME_new();
        ASN1_IA5STRING *v = ASN1_IA5STRING_new();
        sans = sk_GENERAL_NAME_new_null();
        if (g == NULL || v == NULL || sans == NULL ||
            !ASN1_STRING_set(v, t->san, (int)t->san_len)) {
            GENERAL_NAME_free(g);
            ASN1_IA5STRING_free(v);
            goto out;
        }
        GENERAL_NAME_set0_value(g, t->san_type == 1 ? GEN_DNS : GEN_URI, v);
        sk_GENERAL_NAME_push(sans, g);
        if (!X509_add1_ext_i2d(x, NID_subject_alt_name, sans, 0, X509V3_ADD_DEFAULT))
            goto out;
    }
    X509V3_CTX v3;
    X509V3_set_ctx(&v3, ca, x, NULL, NULL, 0);
    X509_EXTENSION *eku = X509V3_EXT_conf_nid(NULL, &v3, NID_ext_key_usage, "clientAuth");
    if (eku == NULL || !X509_add_ext(x, eku, -1)) {
        X509_EXTENSION_free(eku);
        goto out;
    }
    X509_EXTENSION_free(eku);
    if (!X509_sign(x, ca_key, EVP_sha256()))
        goto out;
    rc = write_pem(c, t->name, x, key);
out:
    GENERAL_NAMES_free(sans);
    X509_free(x);
    EVP_PKEY_free(key);
    return rc;
}

int th_certs_make_raw(const struct th_certs *c, const struct th_raw_cert *certs, size_t n)
{
    X509 *ca = NULL;
    EVP_PKEY *ca_key = NULL;
    int rc = load_ca(c, &ca, &ca_key);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = make_raw(c, &certs[i], ca, ca_key, 5000 + (long)i);
    if (rc != 0) {
        fprintf(stderr, "th_certs_make_raw failed:\n");
        ERR_print_errors_fp(stderr);
    }
    X509_free(ca);
    EVP_PKEY_free(ca_key);
    return rc;
}

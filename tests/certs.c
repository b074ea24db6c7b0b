/* sluice tests — throwaway certificates (see certs.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* sluice — what a loaded configuration allows but an operator should hear
 * about: said by -t on its error stream, and logged at start and reload. */
#include <string.h>
#include <sys/stat.h>

#include "conf/conf.h"
#include "core/log.h"

int sl_conf_warn(const struct sl_conf *c, FILE *errf)
{
    int n = 0;
    const char *pf = c->store.password_file;
    struct stat st;
    /* Read permission is what exposes the secret; ssh refuses a key for the
     * same bits, sluice only warns (a mounted secret is often 0644). */
    if (pf != NULL && stat(pf, &st) == 0 && (st.st_mode & (S_IRGRP | S_IROTH)) != 0) {
        unsigned mode = (unsigned)(st.st_mode & 07777);
        if (errf != NULL)
            fprintf(errf, "%s:%d: warning: password_file '%s' is readable by %s (mode %04o): "
                          "chmod 600 it\n", c->file, c->store.password_file_line, pf,
                    (st.st_mode & S_IROTH) ? "others" : "its group", mode);
        else {
            char q[512];
            sl_log_quote(pf, strlen(pf), q, sizeof(q));
            sl_log_warn("password_file is readable by others", "file=%s mode=%04o readers=%s", q,
                        mode, (st.st_mode & S_IROTH) ? "others" : "group");
        }
        n++;
    }
    return n;
}

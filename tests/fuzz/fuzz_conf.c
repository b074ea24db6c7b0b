/* libFuzzer target for the configuration loader: the reader in front of
 * inih, every keyword setter, the cross-section checks and the dump.
 *
 *   make fuzz            (or build by hand, see docs/configuration.md) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <netdb.h>
#include <netinet/in.h>

#include "conf/conf.h"
#include "conf/resolve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Host names never reach DNS from here: names starting with 'x' do not
 * resolve, every other one is 127.0.0.1. */
static int fuzz_resolve(const char *host, uint16_t port, struct sockaddr_storage *out)
{
    if (host[0] == 'x' || host[0] == 'X')
        return EAI_NONAME;
    struct sockaddr_in *sin = (struct sockaddr_in *)out;
    memset(out, 0, sizeof(*out));
    sin->sin_family = AF_INET;
    sin->sin_port = htons(port);
    sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Opened once: errors are many and their text does not matter here. */
    static FILE *devnull;
    if (devnull == NULL && (devnull = fopen("/dev/null", "w")) == NULL)
        abort();
    sl_conf_resolve = fuzz_resolve;
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0'; /* sl_conf_load_string() reads up to the first NUL */
    struct sl_conf *c = sl_conf_load_string(text, "fuzz.ini", devnull);
    if (c != NULL) {
        /* A configuration that loads must dump to one that loads again. */
        char *out = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&out, &len);
        if (f != NULL) {
            sl_conf_dump(c, f);
            fclose(f);
            struct sl_conf *again = sl_conf_load_string(out, "dump.ini", devnull);
            /* A relative password_file may not be there for the dump. */
            if (again == NULL && c->store.password_file == NULL)
                abort();
            sl_conf_free(again);
            free(out);
        }
        sl_conf_free(c);
    }
    free(text);
    return 0;
}

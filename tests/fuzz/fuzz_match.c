/* sluice — libFuzzer target for limit matching (src/limit/match.c and the
 * decision path of src/limit/limiter.c, url = local).
 *
 * Input: a client's byte stream, framed by the real framer, then every
 * request (and, when the stream ends inside one, its head) goes through
 * sl_identity_observe(), sl_identity_of() and sl_limiter_check() against a
 * fixed configuration that uses every way a limit names commands: plain
 * names, CONTAINER|SUB names, @categories, per-command costs, tiers by
 * match_identity and replaces. Names are compared by their captured length
 * (a command name may hold a NUL, an argument may be cut); the sanitizers
 * catch any read past them. A verdict must be whole: a known kind, and a
 * rejection names a limit of the configuration and a non-empty identity. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "core/clock.h"
#include "identity/identity.h"
#include "limit/limiter.h"
#include "proto/resp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The limiter's clock: the input moves it. */
static uint64_t fuzz_us;

static uint64_t fuzz_now(const struct sl_clock *c)
{
    (void)c;
    return fuzz_us;
}

static const struct sl_clock fuzz_clock = { fuzz_now };
static const struct sl_limiter_env fuzz_env = { NULL, &fuzz_clock, NULL };

static const char conf_text[] =
    "[store]\nurl = local\n"
    "[listener r]\nlisten = 127.0.0.1:7001\nupstream = 127.0.0.1:7002\n"
    "identity = resp_user client_name key_prefix client_ip\n"
    "[limit names]\nlistener = r\nrate = 1000/s\nburst = 1000\n"
    "commands = GET SET MSET CONFIG|SET CLIENT|SETNAME OBJECT\ncost = MSET=10 SET=2 *=1\n"
    "[limit cats]\nlistener = r\nrate = 50/s\nburst = 50\ncommands = @write @admin @dangerous\n"
    "[limit everyone]\nlistener = r\nrate = 20/s\nburst = 20\n"
    "[limit vip]\nlistener = r\nrate = 100/s\nburst = 100\nmatch_identity = alice prefix:t ip:127.0.0.1\n"
    "replaces = everyone\n"
    "[limit shadowed]\nlistener = r\nrate = 1/s\nburst = 5\naction = shadow\ncommands = @read\n";

static struct sl_conf *conf;
static struct sl_limiter *lim;

static void never(void *data, const struct sl_verdict *v)
{
    (void)data;
    (void)v;
    abort(); /* url = local decides at once */
}

static void check(const struct sl_ident_state *id, const struct sl_resp_req *r, uint64_t now_us)
{
    struct sl_verdict v;
    struct sl_limiter_req *h = NULL;
    char who[SL_ID_MAX + 1];

    if (sl_identity_of(conf->listeners, id, r, who) == 0)
        abort();
    memset(&v, 0xa5, sizeof(v));
    fuzz_us = now_us;
    int rc = sl_limiter_check(lim, conf->listeners, id, 1, r, &v, never, NULL, &h);
    if (rc != 0)
        abort();
    if (v.kind != SL_VERDICT_ALLOW && v.kind != SL_VERDICT_REJECT)
        abort();
    if (v.kind == SL_VERDICT_REJECT) {
        if (memchr(v.limit, '\0', sizeof(v.limit)) == NULL || v.limit[0] == '\0' ||
            memchr(v.identity, '\0', sizeof(v.identity)) == NULL || v.identity[0] == '\0')
            abort();
        char line[512];
        if (sl_verdict_resp(&v, line, sizeof(line)) == 0)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (conf == NULL) {
        conf = sl_conf_load_string(conf_text, "fuzz.ini", stderr);
        if (conf == NULL || (lim = sl_limiter_new(conf, &fuzz_env)) == NULL)
            abort();
    }
    struct sl_resp st;
    struct sl_resp_req *q;
    struct sl_ident_state id;
    uint64_t now_us = 1000000;

    sl_identity_init(&id, NULL);
    if (sl_resp_init(&st, 1 << 20) != 0)
        abort();
    /* in reads of up to 64 bytes, as a slow client sends them */
    for (size_t at = 0; at < size;) {
        size_t k = size - at < 64 ? size - at : 64;
        if (sl_resp_feed(&st, (const char *)data + at, k) != 0)
            break;
        at += k;
        int rc;
        while ((rc = sl_resp_next(&st, &q)) == 1) {
            now_us += 997;
            if (q->argc == 0)
                continue;
            if (sl_identity_learns(q))
                sl_identity_observe(&id, q);
            check(&id, q, now_us);
        }
        if (rc < 0)
            break;
        if (!sl_resp_idle(&st) && st.req.argc > 0 && st.req.ncap > 0)
            check(&id, &st.req, now_us); /* a big request is decided at its head */
    }
    sl_resp_free(&st);
    return 0;
}

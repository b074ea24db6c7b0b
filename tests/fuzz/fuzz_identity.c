/* sluice — libFuzzer target for identity (src/identity/identity.c).
 *
 * Input: byte 0 picks the listener's identity sources and separator, the rest
 * is a client's byte stream, framed by the real framer. Every request goes
 * through sl_resp_first_key(), sl_identity_observe() and sl_identity_of();
 * the first key must be a captured argument, the identity 1..SL_ID_MAX
 * printable bytes with no blank, quote, backslash or brace, in one of the
 * forms "all", "<tag>:<value>" (':' in the value only for an IPv6 address)
 * or "<tag>#<16 hex>", with the tag of a source the listener has (or ip),
 * its own match_identity form (sl_identity_canon), and the state's strings
 * must stay NUL-terminated. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <netinet/in.h>

#include "identity/identity.h"
#include "proto/resp.h"

static const char *const seps[] = { ":", ".", "::", "", "/", "|", "-", "_" };

static void check_value(const char *s, size_t n, int colon_ok)
{
    if (n < 1 || n > SL_ID_MAX || strlen(s) != n)
        abort();
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= ' ' || c >= 0x7f || c == '"' || c == '\'' || c == '\\' || c == '{' || c == '}')
            abort();
        if (c == ':' && !colon_ok)
            abort();
    }
}

/* <s> of length <n> is an identity of source <src> ("all" for none):
 * "<tag>:<value>" or "<tag>#<16 hex>". */
static void check_form(const char *s, size_t n, enum sl_id_source src, int colon_ok)
{
    static const char *const tags[] = SL_ID_TAGS;
    size_t tn = strlen(tags[src]);
    char canon[SL_ID_MAX + 1];

    check_value(s, n, 1);
    if (src == SL_ID_NONE) {
        if (strcmp(s, "all") != 0)
            abort();
    } else if (n <= tn + 1 || memcmp(s, tags[src], tn) != 0) {
        abort();
    } else if (s[tn] == '#') {
        if (n != tn + 17 || strspn(s + tn + 1, "0123456789abcdef") != 16)
            abort();
    } else if (s[tn] != ':' || n - tn - 1 > SL_ID_VALUE_MAX ||
               (!colon_ok && memchr(s + tn + 1, ':', n - tn - 1) != NULL)) {
        abort();
    }
    /* An identity written in match_identity stands for itself. */
    if (sl_identity_canon(s, canon) != n || strcmp(canon, s) != 0)
        abort();
}

/* The source whose tag <s> starts with, among <lc>'s and ip. */
static enum sl_id_source source_of(const struct sl_listener_conf *lc, const char *s)
{
    static const char *const tags[] = SL_ID_TAGS;
    if (strcmp(s, "all") == 0)
        return SL_ID_NONE;
    for (int i = 0; i < lc->n_identity; i++) {
        size_t tn = strlen(tags[lc->identity[i]]);
        if (strncmp(s, tags[lc->identity[i]], tn) == 0 && (s[tn] == ':' || s[tn] == '#'))
            return lc->identity[i];
    }
    if (strncmp(s, "ip:", 3) == 0)
        return SL_ID_CLIENT_IP;
    abort();
}

static void check_state(const struct sl_ident_state *st)
{
    if (memchr(st->user, '\0', sizeof(st->user)) == NULL ||
        memchr(st->name, '\0', sizeof(st->name)) == NULL ||
        memchr(st->ip, '\0', sizeof(st->ip)) == NULL)
        abort();
    if (st->user[0] != '\0')
        check_form(st->user, strlen(st->user), SL_ID_RESP_USER, 0);
    if (st->name[0] != '\0')
        check_form(st->name, strlen(st->name), SL_ID_CLIENT_NAME, 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int selftested;
    struct sl_listener_conf lc;
    struct sl_ident_state st;
    struct sl_resp rs;
    struct sl_resp_req *q;
    struct sockaddr_in6 peer;
    char out[SL_ID_MAX + 1];

    if (!selftested) {
        if (sl_resp_first_key_selftest() != 0)
            abort();
        selftested = 1;
    }
    if (size < 1)
        return 0;

    /* Sources: key_prefix, user, name first in a rotating order, then ip or
     * none; the separator from the table. */
    uint8_t mode = data[0];
    static const enum sl_id_source order[][4] = {
        { SL_ID_KEY_PREFIX, SL_ID_RESP_USER, SL_ID_CLIENT_NAME, SL_ID_CLIENT_IP },
        { SL_ID_RESP_USER, SL_ID_CLIENT_NAME, SL_ID_KEY_PREFIX, SL_ID_CLIENT_IP },
        { SL_ID_CLIENT_NAME, SL_ID_KEY_PREFIX, SL_ID_RESP_USER, SL_ID_NONE },
        { SL_ID_HEADER, SL_ID_KEY_PREFIX, SL_ID_HEADER, SL_ID_HEADER },
    };
    memset(&lc, 0, sizeof(lc));
    memcpy(lc.identity, order[mode & 3], sizeof(order[0]));
    lc.n_identity = 1 + ((mode >> 2) & 3);
    strcpy(lc.key_prefix_separator, seps[(mode >> 4) & 7]);
    data++;
    size--;

    /* An IPv6 peer half the time (':' allowed in its identity), IPv4-mapped
     * otherwise. */
    memset(&peer, 0, sizeof(peer));
    peer.sin6_family = AF_INET6;
    peer.sin6_addr.s6_addr[15] = 1;
    if (mode & 0x80) {
        peer.sin6_addr.s6_addr[10] = 0xff;
        peer.sin6_addr.s6_addr[11] = 0xff;
        peer.sin6_addr.s6_addr[12] = 10;
    }
    sl_identity_init(&st, (const struct sockaddr *)&peer);
    int ip_colon = (mode & 0x80) == 0;

    if (sl_resp_init(&rs, 1024 * 1024) != 0)
        abort();
    if (sl_resp_feed(&rs, (const char *)data, size) != 0)
        abort();
    while (sl_resp_next(&rs, &q) == 1) {
        int k = sl_resp_first_key(q);
        if (k < -1 || (k >= 0 && ((uint32_t)k >= q->argc || k >= (int)q->ncap)))
            abort();
        if (k == 0)
            abort(); /* the command name is never a key */
        sl_identity_observe(&st, q);
        check_state(&st);
        size_t n = sl_identity_of(&lc, &st, q, out);
        enum sl_id_source src = source_of(&lc, out);
        check_form(out, n, src, ip_colon && src == SL_ID_CLIENT_IP);
        n = sl_identity_of(&lc, &st, NULL, out);
        src = source_of(&lc, out);
        check_form(out, n, src, ip_colon && src == SL_ID_CLIENT_IP);
    }
    sl_resp_free(&rs);
    return 0;
}

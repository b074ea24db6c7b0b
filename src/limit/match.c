/* sluice — matching: which limits a request meets, and what it costs them.
 *
 *   request (command + captured args), listener, metric
 *     |
 *     |-- sl_lim_exempt            MULTI, EXEC, AUTH, ... are never limited
 *     |-- sl_lim_applies           the limit's listener and metric
 *     |-- sl_lim_command_matches   its `commands`: a name, CONTAINER|SUB, @category
 *     |   (sl_lim_command_named: by name only, for a connection's set-up)
 *     |      = the candidates (no identity work before this)
 *     |-- sl_lim_identity_matches  its match_identity (tiers: `replaces`, in limiter.c)
 *     '-- sl_lim_cost_of           its per-command cost
 *
 * At build, sl_lim_copy_commands and sl_lim_canon_matches prepare a
 * limit's names for these; at load, sl_lim_check_listener_caps refuses a
 * file where one request (byte take, connection) could meet more limits
 * than a decision holds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "identity/identity.h"
#include "limit/limiter-i.h"
#include "limit/limiter.h"
#include "limit/match.h"
#include "proto/http_path.h"
#include "proto/resp_acl.h"

/* ---- preparing a limit's matchers (at build) ------------------------------ */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorts the `commands` of <c> into <L>: plain names (upper case, sorted
 * for the binary search), CONTAINER|SUB names, and @categories (bits).
 * Returns 0, or -1 when out of memory. */
int sl_lim_copy_commands(struct limit *L, const struct sl_limit_conf *c)
{
    if (c->n_commands > 0) {
        L->commands = calloc((size_t)c->n_commands, sizeof(char *));
        L->subcmds = calloc((size_t)c->n_commands, sizeof(char *));
        if (L->commands == NULL || L->subcmds == NULL)
            return -1;
    }
    for (int i = 0; i < c->n_commands; i++) {
        const char *w = c->commands[i];
        if (w[0] == '@') {
            int bit = sl_resp_acl_category(w + 1, strlen(w + 1));
            if (bit >= 0) /* the loader refused the others */
                L->cats |= 1u << bit;
            continue;
        }
        char *d = strdup(w);
        if (d == NULL)
            return -1;
        for (char *p = d; *p; p++)
            if (*p >= 'a' && *p <= 'z')
                *p = (char)(*p - 32);
        if (strchr(d, '|') != NULL)
            L->subcmds[L->n_subcmds++] = d;
        else
            L->commands[L->n_commands++] = d;
    }
    if (L->n_commands > 0)
        qsort(L->commands, (size_t)L->n_commands, sizeof(char *), cmp_str);
    char **const src[2] = { c->methods, c->paths };
    char ***dst[2] = { &L->methods, &L->paths };
    int n[2] = { c->n_methods, c->n_paths }, *dn[2] = { &L->n_methods, &L->n_paths };
    for (int k = 0; k < 2; k++) {
        if (n[k] == 0)
            continue;
        if ((*dst[k] = calloc((size_t)n[k], sizeof(char *))) == NULL)
            return -1;
        for (int i = 0; i < n[k]; i++, (*dn[k])++)
            if (((*dst[k])[i] = strdup(src[k][i])) == NULL)
                return -1;
    }
    return 0;
}

/* Turns the match_identity entries <m> (as the configuration resolved
 * them: "user:carol") into the identities they stand for, hashed where
 * identities are ("user:" + a 100-byte name), so a strcmp() decides. An
 * entry that names no source becomes "", which no identity is. */
void sl_lim_canon_matches(char **m, int n)
{
    for (int i = 0; m != NULL && i < n; i++) {
        char id[SL_ID_MAX + 1];
        if (m[i] == NULL)
            continue;
        size_t len = sl_identity_canon(m[i], id);
        id[len] = '\0';
        free(m[i]);
        m[i] = strdup(id); /* NULL (no memory): matches nothing */
    }
}

/* ---- matching ----------------------------------------------------------------- */

/* Compares a command name as sent, <len> bytes at <name> in any case (it
 * may hold any byte, a NUL too: only <len> says where it ends), with the
 * NUL-terminated upper-case <upper>. The order is strcmp()'s of the name
 * upper-cased, the order the configured names are sorted in (folding to
 * lower case, as strncasecmp() does, puts '_' before the letters and makes
 * the binary search miss GEORADIUS_RO among GEORADIUSBYMEMBER ...). Reads
 * at most min(<len>, strlen(<upper>)) bytes of <name>. */
static int cmd_cmp(const char *name, size_t len, const char *upper)
{
    size_t ulen = strlen(upper);
    size_t n = len < ulen ? len : ulen;
    for (size_t i = 0; i < n; i++) {
        unsigned char a = (unsigned char)name[i], b = (unsigned char)upper[i];
        if (a >= 'a' && a <= 'z')
            a = (unsigned char)(a - ('a' - 'A'));
        if (a != b)
            return a < b ? -1 : 1;
    }
    return len < ulen ? -1 : len > ulen;
}

/* Argument <i> of <r> was captured whole (its text is all in argv[i]). */
static int arg_whole(const struct sl_resp_req *r, unsigned i)
{
    return i < r->ncap && i < r->argc && r->arglen[i] <= SL_RESP_CAPTURE_LEN;
}

/* Whether CONTAINER|SUB <name> names request <r>'s command and subcommand. */
static int subcommand_is(const struct sl_resp_req *r, const char *name)
{
    const char *bar = strchr(name, '|');
    char head[64];
    size_t hl = (size_t)(bar - name);
    if (hl >= sizeof(head) || !arg_whole(r, 1))
        return 0;
    memcpy(head, name, hl);
    head[hl] = '\0';
    return cmd_cmp(r->argv[0], r->arglen[0], head) == 0 &&
           cmd_cmp(r->argv[1], r->arglen[1], bar + 1) == 0;
}

/* Whether <L>'s `commands` take request <r>, whose categories are <cats>
 * (sl_resp_acl_of(), asked once per request when some limit has any):
 * its name exactly (any case), its CONTAINER|SUB, or one of its
 * categories. */
int sl_lim_command_matches(const struct limit *L, const struct sl_resp_req *r, uint32_t cats)
{
    if (L->n_methods > 0 || L->n_paths > 0)
        return 0; /* an http limit (the loader keeps them off resp listeners) */
    if (L->n_commands == 0 && L->n_subcmds == 0 && L->cats == 0)
        return 1;
    if (L->cats & cats)
        return 1;
    return sl_lim_command_named(L, r);
}

int sl_lim_command_named(const struct limit *L, const struct sl_resp_req *r)
{
    if (L->n_methods > 0 || L->n_paths > 0 || r == NULL || !arg_whole(r, 0))
        return 0;
    for (int i = 0; i < L->n_subcmds; i++)
        if (subcommand_is(r, L->subcmds[i]))
            return 1;
    size_t len = r->arglen[0];
    int lo = 0, hi = L->n_commands - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int c = cmd_cmp(r->argv[0], len, L->commands[mid]);
        if (c == 0)
            return 1;
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return 0;
}

/* The method of HTTP request <hd>: <*len> bytes. */
static const char *method_of(const struct sl_http_head *hd, size_t *len)
{
    *len = hd->method_len;
    return hd->buf + hd->method_off;
}

int sl_lim_http_matches(const struct limit *L, struct sl_lim_path *pp)
{
    const struct sl_http_head *hd = pp->hd;
    if (L->n_commands > 0 || L->n_subcmds > 0 || L->cats != 0)
        return 0; /* a resp limit (the loader keeps them off http listeners) */
    if (L->n_methods > 0) {
        size_t mn;
        const char *m = method_of(hd, &mn);
        int hit = 0;
        for (int i = 0; i < L->n_methods && !hit; i++)
            hit = strlen(L->methods[i]) == mn && memcmp(L->methods[i], m, mn) == 0;
        if (!hit)
            return 0;
    }
    if (L->n_paths == 0)
        return 1;
    if (!pp->made && !pp->failed) {
        const char *path = hd->buf + hd->path_off;
        size_t n = hd->path_len;
        pp->made = 1;
        if (n == 0) {
            /* authority-form (CONNECT) and "*": no path, no pattern takes it */
            pp->forms.n = 0;
        } else if (sl_http_path_plain(path, n)) {
            /* the common case: every reading is the path as sent, no copy */
            sl_http_path_forms(path, n, NULL, &pp->forms);
        } else {
            size_t cap = SL_HTTP_PATH_FORMS_CAP(n);
            pp->scratch = cap <= sizeof(pp->small) ? pp->small : malloc(cap);
            if (pp->scratch == NULL)
                pp->failed = 1;
            else
                sl_http_path_forms(path, n, pp->scratch, &pp->forms);
        }
    }
    if (pp->failed)
        return 0;
    for (int i = 0; i < L->n_paths; i++)
        if (sl_http_path_match_forms(L->paths[i], &pp->forms))
            return 1;
    return 0;
}

void sl_lim_path_done(struct sl_lim_path *pp)
{
    if (pp->scratch != NULL && pp->scratch != pp->small)
        free(pp->scratch);
    pp->scratch = NULL;
}

const char *sl_limiter_path_refusal(const struct sl_limiter *lim, const struct sl_listener_conf *lc,
                                    const struct sl_http_head *hd)
{
    if (lim == NULL || hd->path_len == 0)
        return NULL;
    const char *why = sl_http_path_refusal(hd->buf + hd->path_off, hd->path_len);
    if (why == NULL)
        return NULL;
    for (int i = 0; i < lim->n; i++)
        if (lim->limits[i].n_paths > 0 && sl_lim_applies(&lim->limits[i], lc, SL_METRIC_REQUESTS))
            return why;
    return NULL;
}

uint64_t sl_lim_cost_of(const struct limit *L, const struct sl_req *q)
{
    if (q != NULL && q->http != NULL) {
        size_t mn;
        const char *m = method_of(q->http, &mn);
        for (int i = 0; i < L->n_costs; i++)
            if (strlen(L->costs[i].cmd) == mn && memcmp(L->costs[i].cmd, m, mn) == 0)
                return L->costs[i].cost;
        return L->default_cost;
    }
    const struct sl_resp_req *r = q != NULL ? q->resp : NULL;
    if (r != NULL && arg_whole(r, 0))
        for (int i = 0; i < L->n_costs; i++)
            if (cmd_cmp(r->argv[0], r->arglen[0], L->costs[i].cmd) == 0)
                return L->costs[i].cost;
    return L->default_cost;
}

uint64_t sl_limiter_cost(const struct sl_limiter *lim, const char *limit, const char *cmd,
                         size_t n, int http)
{
    for (int i = 0; lim != NULL && i < lim->n; i++) {
        const struct limit *L = &lim->limits[i];
        if (strcmp(L->name, limit) != 0)
            continue;
        if (L->metric != SL_METRIC_REQUESTS)
            return 0;
        for (int k = 0; k < L->n_costs; k++)
            if (http ? strlen(L->costs[k].cmd) == n && memcmp(L->costs[k].cmd, cmd, n) == 0
                     : cmd_cmp(cmd, n, L->costs[k].cmd) == 0)
                return L->costs[k].cost;
        return L->default_cost;
    }
    return 0;
}

int sl_lim_identity_matches(const struct limit *L, const char *id)
{
    if (L->n_match == 0)
        return 1;
    for (int i = 0; i < L->n_match; i++)
        if (L->match[i] != NULL && strcmp(L->match[i], id) == 0)
            return 1;
    return 0;
}

/* Commands that are never limited: refusing them would leave a connection
 * in a state the client cannot reason about (an open MULTI, a half-done
 * handshake, replies it no longer expects or waits for in vain: an
 * unsubscribe is answered by one confirmation per channel, which a single
 * refusal cannot stand for). Leaving pub/sub only lightens the upstream. */
int sl_lim_exempt(const struct sl_resp_req *r)
{
    static const char *const names[] = { "MULTI", "EXEC", "DISCARD", "RESET", "QUIT", "AUTH", "HELLO",
                                         "UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE" };
    if (r == NULL || !arg_whole(r, 0) || r->arglen[0] > 12)
        return 0;
    if (arg_whole(r, 1) && cmd_cmp(r->argv[0], r->arglen[0], "CLIENT") == 0 &&
        cmd_cmp(r->argv[1], r->arglen[1], "REPLY") == 0)
        return 1;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (cmd_cmp(r->argv[0], r->arglen[0], names[i]) == 0)
            return 1;
    return 0;
}

int sl_lim_applies(const struct limit *L, const struct sl_listener_conf *lc, int metric)
{
    return L->metric == (enum sl_metric)metric &&
           (L->listener == NULL || strcmp(L->listener, lc->name ? lc->name : "") == 0);
}

/* ---- how many limits one decision can meet ------------------------------------
 *
 * A decision holds at most MAX_REQ_LIMITS limits (requests, byte takes) or
 * MAX_CONN_LIMITS (connections). Rather than skip the rest at run time, a
 * file where one request or connection can meet more is refused: per
 * listener and metric, for every kind of request (every command and
 * subcommand of Redis 7's table, and every name a limit lists), the limits
 * it can meet are those whose listener and commands take it; of them, the
 * ones with match_identity count only for the identities they name, so the
 * worst identity meets the others plus the most that name one identity
 * (`replaces` is ignored: at most this many). */

/* One kind of request: a command, its subcommand (or NULL), its categories. */
struct req_kind {
    const char *cmd;
    const char *sub;
    uint32_t    cats;
};

/* Whether the `commands` of <c> take requests of kind <k> (as
 * sl_lim_command_matches() does at run time). */
static int conf_takes(const struct sl_limit_conf *c, const struct req_kind *k)
{
    if (c->n_commands == 0)
        return 1;
    for (int i = 0; i < c->n_commands; i++) {
        const char *w = c->commands[i], *bar = strchr(w, '|');
        if (w[0] == '@') {
            int b = sl_resp_acl_category(w + 1, strlen(w + 1));
            if (b >= 0 && (k->cats >> b & 1))
                return 1;
        } else if (bar == NULL) {
            if (strcasecmp(w, k->cmd) == 0)
                return 1;
        } else if (k->sub != NULL && strlen(k->cmd) == (size_t)(bar - w) &&
                   strncasecmp(w, k->cmd, (size_t)(bar - w)) == 0 &&
                   strcasecmp(bar + 1, k->sub) == 0) {
            return 1;
        }
    }
    return 0;
}

/* A (match_identity name, limit) pair, sorted by name. */
struct named {
    const char *name;
    int         limit;
};

static int cmp_named(const void *a, const void *b)
{
    const struct named *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c != 0 ? c : x->limit - y->limit;
}

/* The most limits of <lims> (n, with <in> set for those that take the
 * request) one identity meets; *<worst> is set to the name of the identity
 * that meets them (NULL: everyone alike). */
static int most_met(const struct sl_limit_conf *const *lims, int n, const uint8_t *in,
                    const struct named *names, size_t n_names, const char **worst)
{
    int base = 0, best = 0;
    for (int i = 0; i < n; i++)
        base += in[i] && lims[i]->n_match_identity == 0;
    *worst = NULL;
    for (size_t j = 0; j < n_names;) {
        size_t e = j;
        int count = 0;
        for (; e < n_names && strcmp(names[e].name, names[j].name) == 0; e++)
            count += in[names[e].limit] && (e == j || names[e].limit != names[e - 1].limit);
        if (count > best) {
            best = count;
            *worst = names[j].name;
        }
        j = e;
    }
    return base + best;
}

/* Checks listener <l> for <metric>: writes an error and returns 1 when one
 * request (byte take, connection) can meet more limits than a decision
 * holds. */
int sl_lim_check_listener_caps(const struct sl_conf *conf, const struct sl_listener_conf *l,
                               enum sl_metric metric, FILE *errf)
{
    int cap = metric == SL_METRIC_CONNECTIONS ? MAX_CONN_LIMITS : MAX_REQ_LIMITS;
    int n = 0, bad = 0;
    size_t n_names = 0, n_kinds = 0;
    for (const struct sl_limit_conf *c = conf->limits; c != NULL; c = c->next)
        if (c->metric == metric && (strcmp(c->listener, "*") == 0 || strcmp(c->listener, l->name) == 0))
            n++;
    if (n <= cap)
        return 0; /* the common case: nothing to count */

    const struct sl_limit_conf **lims = calloc((size_t)n, sizeof(*lims));
    uint8_t *in = calloc((size_t)n, 1);
    struct named *names = NULL;
    struct req_kind *kinds = NULL;
    if (lims == NULL || in == NULL)
        goto oom;
    n = 0;
    for (const struct sl_limit_conf *c = conf->limits; c != NULL; c = c->next) {
        if (c->metric != metric || (strcmp(c->listener, "*") != 0 && strcmp(c->listener, l->name) != 0))
            continue;
        lims[n++] = c;
        n_names += (size_t)c->n_match_identity;
        n_kinds += (size_t)c->n_commands;
    }
    names = calloc(n_names ? n_names : 1, sizeof(*names));
    if (names == NULL)
        goto oom;
    n_names = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < lims[i]->n_match_identity; j++)
            names[n_names++] = (struct named){ lims[i]->match_identity[j], i };
    qsort(names, n_names, sizeof(*names), cmp_named);

    /* The kinds of request: one for bytes and connections; for requests
     * every entry of Redis 7's table and every name a limit lists. */
    const char *cmd, *sub;
    uint32_t cats;
    size_t n_table = 0;
    if (metric == SL_METRIC_REQUESTS)
        while (sl_resp_acl_entry(n_table, &cmd, &sub, &cats) == 0)
            n_table++;
    kinds = calloc(n_table + n_kinds + 1, sizeof(*kinds));
    char (*words)[2][SL_RESP_CAPTURE_LEN + 1] = calloc(n_kinds + 1, sizeof(*words));
    if (kinds == NULL || words == NULL) {
        free(words);
        goto oom;
    }
    n_kinds = 0;
    if (metric != SL_METRIC_REQUESTS) {
        kinds[n_kinds++] = (struct req_kind){ "", NULL, 0 };
    } else {
        for (size_t i = 0; i < n_table; i++) {
            sl_resp_acl_entry(i, &kinds[n_kinds].cmd, &kinds[n_kinds].sub, &kinds[n_kinds].cats);
            n_kinds++;
        }
        size_t nw = 0;
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < lims[i]->n_commands; j++, nw++) {
                const char *w = lims[i]->commands[j], *bar = strchr(w, '|');
                if (w[0] == '@')
                    continue;
                /* a listed name, as a request: its categories from the table */
                struct sl_resp_req r;
                memset(&r, 0, sizeof(r));
                size_t hl = bar ? (size_t)(bar - w) : strlen(w);
                snprintf(words[nw][0], sizeof(words[0][0]), "%.*s", (int)hl, w);
                snprintf(words[nw][1], sizeof(words[0][1]), "%s", bar ? bar + 1 : "");
                r.argc = r.ncap = bar ? 2 : 1;
                for (unsigned a = 0; a < r.ncap; a++) {
                    r.arglen[a] = (uint32_t)strlen(words[nw][a]);
                    memcpy(r.argv[a], words[nw][a], r.arglen[a] + 1);
                }
                kinds[n_kinds++] = (struct req_kind){ words[nw][0], bar ? words[nw][1] : NULL,
                                                      sl_resp_acl_of(&r) };
            }
        }
    }
    for (size_t k = 0; k < n_kinds && !bad; k++) {
        for (int i = 0; i < n; i++)
            in[i] = metric != SL_METRIC_REQUESTS || conf_takes(lims[i], &kinds[k]);
        const char *worst;
        int met = most_met(lims, n, in, names, n_names, &worst);
        if (met <= cap)
            continue;
        /* Name the limit that goes over: the (cap + 1)-th in file order. */
        int seen = 0;
        const struct sl_limit_conf *over = NULL;
        for (int i = 0; i < n && over == NULL; i++) {
            int counts = in[i] && (lims[i]->n_match_identity == 0 || worst != NULL);
            if (counts && lims[i]->n_match_identity > 0) {
                counts = 0;
                for (int j = 0; j < lims[i]->n_match_identity; j++)
                    counts |= strcmp(lims[i]->match_identity[j], worst) == 0;
            }
            if (counts && ++seen > cap)
                over = lims[i];
        }
        char what[160];
        if (metric == SL_METRIC_CONNECTIONS)
            snprintf(what, sizeof(what), "a connection");
        else if (metric != SL_METRIC_REQUESTS)
            snprintf(what, sizeof(what), "a %s take",
                     metric == SL_METRIC_BYTES_IN ? "bytes_in" : "bytes_out");
        else
            snprintf(what, sizeof(what), "a request '%s%s%s'", kinds[k].cmd, kinds[k].sub ? " " : "",
                     kinds[k].sub ? kinds[k].sub : "");
        char who[SL_ID_MAX + 40] = "";
        if (worst != NULL)
            snprintf(who, sizeof(who), " of identity '%s'", worst);
        fprintf(errf, "%s:%d: limit '%s': %s%s on listener '%s' would meet %d limits; one %s "
                "meets at most %d (narrow their listener, commands or match_identity)\n",
                conf->file ? conf->file : "-", over ? over->line : 0, over ? over->name : "?",
                what, who, l->name, met, metric == SL_METRIC_CONNECTIONS ? "connection" : "decision",
                cap);
        bad = 1;
    }
    free(words);
    free(kinds);
    free(names);
    free(in);
    free(lims);
    return bad;
oom:
    free(kinds);
    free(names);
    free(in);
    free(lims);
    fprintf(errf, "%s:0: out of memory checking listener '%s'\n", conf->file ? conf->file : "-",
            l->name);
    return 1;
}

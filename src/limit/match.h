/* sluice — which limits a request meets (private to src/limit/; see
 * limiter-i.h). */
#ifndef SL_LIMIT_MATCH_H
#define SL_LIMIT_MATCH_H

#include "limit/limiter-i.h"
#include "proto/http_path.h"

/* Sorts the `commands` of <c> into <L>: plain names (upper case, sorted),
 * CONTAINER|SUB names and @categories (bits); copies its `methods` and
 * `paths`. 0, or -1 when out of memory. */
int sl_lim_copy_commands(struct limit *L, const struct sl_limit_conf *c);

/* An HTTP request's path in its readings (proto/http_path.h), made on
 * first use by sl_lim_http_matches(); sl_lim_path_done() releases it. */
struct sl_lim_path {
    const struct sl_http_head *hd;
    int     made;      /* <forms> is filled */
    int     failed;    /* out of memory: no path matches */
    char   *scratch;   /* NULL, <small> or malloc'd */
    struct sl_http_path_forms forms;
    char    small[1024];
};

/* Whether <L> takes HTTP request <pp->hd>: a limit with `commands` takes
 * none; its `methods` (exactly: methods are case-sensitive) and its
 * `paths` (see proto/http_path.h) must each take it. */
int sl_lim_http_matches(const struct limit *L, struct sl_lim_path *pp);

void sl_lim_path_done(struct sl_lim_path *pp);

/* Replaces the <n> match_identity entries <m> in place by the identities
 * they stand for (hashed as identities are); NULL where memory ran out. */
void sl_lim_canon_matches(char **m, int n);

/* Whether <L>'s `commands` take request <r> (NULL: a byte take), whose
 * categories are <cats>. */
int sl_lim_command_matches(const struct limit *L, const struct sl_resp_req *r, uint32_t cats);

/* Whether <L>'s `commands` name request <r> itself: its name or its
 * CONTAINER|SUB, not a category nor every command by default. A
 * connection's set-up commands are charged only to such limits. */
int sl_lim_command_named(const struct limit *L, const struct sl_resp_req *r);

/* What request <r> (NULL: none) costs limit <L>: per command (resp) or
 * per method (http, case-sensitive), else the default. */
uint64_t sl_lim_cost_of(const struct limit *L, const struct sl_req *r);

/* Whether <L>'s match_identity takes identity <id> (none: everyone). */
int sl_lim_identity_matches(const struct limit *L, const char *id);

/* Whether request <r> is one that is never limited (MULTI, EXEC, ...). */
int sl_lim_exempt(const struct sl_resp_req *r);

/* Whether limit <L> counts <metric> on listener <lc>. */
int sl_lim_applies(const struct limit *L, const struct sl_listener_conf *lc, int metric);

/* Checks listener <l> for <metric>: writes "FILE:LINE: message" to <errf>
 * and returns 1 when one request (byte take, connection) can meet more
 * limits than a decision holds; else 0. */
int sl_lim_check_listener_caps(const struct sl_conf *conf, const struct sl_listener_conf *l,
                               enum sl_metric metric, FILE *errf);

#endif

/* sluice — the [limit NAME] section: its keyword table, its defaults, and
 * the setters of its keys with rules of their own (listener, rate,
 * commands, cost, methods, paths). What a limit's keys mean together, and
 * against the listeners it names, is checked in check.c. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/conf-i.h"
#include "conf/http.h"
#include "conf/names.h"
#include "conf/units.h"
#include "proto/resp_acl.h"

static kw_setter set_limit_listener, set_rate, set_burst, set_commands, set_cost, set_methods, set_paths;
static kw_setter set_priority;

static const struct keyword limit_kw[] = {
    FUNC("listener", set_limit_listener, 0),
    ENUM("metric", struct sl_limit_conf, metric, sl_conf_metric_names),
    FUNC("rate", set_rate, 0),
    FUNC("burst", set_burst, 0), /* 64KiB for bytes */
    NUM("max", KW_U64, struct sl_limit_conf, max, 1, UINT32_MAX),
    ENUM("scope", struct sl_limit_conf, scope, sl_conf_scope_names),
    ENUM("algorithm", struct sl_limit_conf, algorithm, sl_conf_algo_names),
    ENUM("action", struct sl_limit_conf, action, sl_conf_action_names),
    NUM("max_delay", KW_DURATION, struct sl_limit_conf, max_delay_us, 0, HOUR_US),
    FUNC("commands", set_commands, KW_MULTI),
    FUNC("cost", set_cost, KW_MULTI),
    FUNC("methods", set_methods, KW_MULTI),
    FUNC("paths", set_paths, KW_MULTI),
    /* the source's tag on top of a value of MAX_IDENTITY: -T writes bare
     * values with it, and that line must load again */
    LIST("match_identity", struct sl_limit_conf, match_identity, n_match_identity, MAX_IDENTITY + 8),
    STR("replaces", struct sl_limit_conf, replaces, MAX_NAME),
    ENUM("overrides", struct sl_limit_conf, overrides, sl_conf_overrides_names),
    NUM("overrides_ttl", KW_DURATION, struct sl_limit_conf, overrides_ttl_us, 100000, DAY_US),
    FUNC("priority", set_priority, 0),
};

_Static_assert(N_OF(limit_kw) <= MAX_KEYWORDS, "section.key_line is too small");
const struct kw_table sl_cf_limit_keys = { limit_kw, N_OF(limit_kw) };

struct sl_limit_conf *sl_cf_new_limit(struct loader *ld, const char *name, int line)
{
    struct sl_limit_conf *m = calloc(1, sizeof(*m));
    if (m == NULL || (m->name = strdup(name)) == NULL) {
        free(m);
        ld->oom = 1;
        return NULL;
    }
    m->line = line;
    m->metric = SL_METRIC_REQUESTS;
    m->scope = SL_SCOPE_IDENTITY;
    m->algorithm = SL_ALGO_TOKEN_BUCKET;
    m->action = SL_ACTION_REJECT;
    m->max_delay_us = 200000;
    m->default_cost = 1;
    m->overrides_ttl_us = 5000000;
    m->priority = -1;
    *ld->mtail = m;
    ld->mtail = &m->next;
    ld->conf->n_limits++;
    return m;
}

/* A limit's listener is required: unlike other text keys, an empty value
 * does not keep a default. */
static void set_limit_listener(struct loader *ld, struct section *sec, const struct keyword *kw,
                               const char *value)
{
    if (value[0] == '\0') {
        sl_cf_bad(ld, kw, "a listener's name or *", value);
        return;
    }
    const struct keyword as_string = { .name = kw->name, .type = KW_STRING,
                                       .off = offsetof(struct sl_limit_conf, listener),
                                       .max = MAX_NAME };
    sl_cf_set_string(ld, sec, &as_string, value);
}

static void set_rate(struct loader *ld, struct section *sec, const struct keyword *kw,
                     const char *value)
{
    struct sl_limit_conf *m = sec->obj;
    struct sl_rate r;
    /* Parse with size units allowed; whether they are allowed depends on
     * `metric`, which may come later in the section: sl_cf_finish() checks. */
    if (sl_parse_rate(value, 1, &r) != 0) {
        sl_cf_bad(ld, kw, "a rate like 500/s, 100/m or 10MiB/s", value);
        return;
    }
    if (r.amount > MAX_AMOUNT) {
        sl_cf_err(ld, ld->line, "rate: at most %llu per period, got '%s'",
                  (unsigned long long)MAX_AMOUNT, value);
        return;
    }
    if (r.period_us > MAX_PERIOD) {
        sl_cf_err(ld, ld->line, "rate: the period must be at most 365d, got '%s'", value);
        return;
    }
    struct sl_rate plain;
    sec->rate_sized = sl_parse_rate(value, 0, &plain) != 0;
    m->rate = r;
}

/* A count, or a size (64KiB) for bytes: as with `rate`, whether a unit
 * is allowed depends on `metric`, which may come later: sl_cf_finish()
 * checks. */
static void set_burst(struct loader *ld, struct section *sec, const struct keyword *kw,
                      const char *value)
{
    const struct keyword as_size = { .name = kw->name, .type = KW_SIZE,
                                     .off = offsetof(struct sl_limit_conf, burst),
                                     .min = 1, .max = MAX_AMOUNT };
    sl_cf_set_value(ld, sec, &as_size, value);
    sec->burst_sized = value[strspn(value, "0123456789")] != '\0';
}

static int command_ok(const char *w)
{
    for (; *w; w++)
        if (!isalnum((unsigned char)*w) && strchr("_-|.:", *w) == NULL)
            return 0;
    return 1;
}

static int command_word(struct loader *ld, struct section *sec, const struct keyword *kw,
                        const char *w)
{
    struct sl_limit_conf *m = sec->obj;
    char up[MAX_CMD + 1];
    (void)kw;
    if (strcmp(w, "*") == 0) {
        sec->commands_star = 1;
        return 0;
    }
    if (w[0] == '@') {
        /* A Redis ACL category, kept as Redis writes it ("@write"). */
        int bit = sl_resp_acl_category(w + 1, strlen(w + 1));
        if (bit < 0) {
            char all[400];
            size_t o = 0;
            for (int i = 0; i < SL_RESP_ACL_CATEGORIES && o < sizeof(all); i++)
                o += (size_t)snprintf(all + o, sizeof(all) - o, " @%s", sl_resp_acl_category_name(i));
            sl_cf_err(ld, ld->line, "commands: unknown category '%s'%s (Redis 7's are:%s)", w,
                      strcasecmp(w, "@all") == 0 ? "; '*' means every command" : "", all);
            return -1;
        }
        char cat[MAX_CMD + 2];
        snprintf(cat, sizeof(cat), "@%s", sl_resp_acl_category_name(bit));
        if (sl_cf_listed(m->commands, m->n_commands, cat))
            return 0;
        if (m->n_commands >= MAX_LIST) {
            sl_cf_err(ld, ld->line, "commands: more than %d entries", MAX_LIST);
            return -1;
        }
        return sl_cf_push(ld, &m->commands, &m->n_commands, cat);
    }
    if (strlen(w) > MAX_CMD || !command_ok(w)) {
        sl_cf_err(ld, ld->line, "commands: expected command names like GET SET, or *, got '%s'", w);
        return -1;
    }
    size_t i = 0;
    for (; w[i]; i++)
        up[i] = (char)toupper((unsigned char)w[i]);
    up[i] = '\0';
    if (sl_cf_listed(m->commands, m->n_commands, up))
        return 0;
    if (m->n_commands >= MAX_LIST) {
        sl_cf_err(ld, ld->line, "commands: more than %d entries", MAX_LIST);
        return -1;
    }
    return sl_cf_push(ld, &m->commands, &m->n_commands, up);
}

static void set_commands(struct loader *ld, struct section *sec, const struct keyword *kw,
                         const char *value)
{
    sl_cf_each_word(ld, sec, kw, value, command_word);
}

/* One of `cost = 5` or `cost = KEYS=100 SCAN=10 *=1`. */
static int cost_word(struct loader *ld, struct section *sec, const struct keyword *kw,
                     const char *w)
{
    struct sl_limit_conf *m = sec->obj;
    const char *eq = strchr(w, '=');
    const char *num = eq ? eq + 1 : w;
    size_t clen = eq ? (size_t)(eq - w) : 0;
    uint64_t v;
    (void)kw;
    if (sl_cf_parse_uint(num, MAX_COST, &v) != 0 || (eq != NULL && clen == 0)) {
        sl_cf_err(ld, ld->line, "cost: expected a number or COMMAND=N entries like KEYS=100 *=1, "
                                "got '%s'", w);
        return -1;
    }
    if (eq == NULL || (clen == 1 && w[0] == '*')) {
        if (sec->cost_default) {
            sl_cf_err(ld, ld->line, "cost: the default cost is given twice ('%s')", w);
            return -1;
        }
        sec->cost_default = 1;
        m->default_cost = v;
        return 0;
    }
    char up[MAX_CMD + 1];
    if (clen > MAX_CMD)
        goto bad_name;
    for (size_t i = 0; i < clen; i++)
        up[i] = (char)toupper((unsigned char)w[i]);
    up[clen] = '\0';
    if (!command_ok(up))
        goto bad_name;
    for (int i = 0; i < m->n_costs; i++) {
        if (strcasecmp(m->costs[i].cmd, up) == 0) {
            sl_cf_err(ld, ld->line, "cost: %s is given twice", up);
            return -1;
        }
    }
    if (m->n_costs >= MAX_COSTS) {
        sl_cf_err(ld, ld->line, "cost: more than %d entries", MAX_COSTS);
        return -1;
    }
    struct sl_cost *nc = realloc(m->costs, (size_t)(m->n_costs + 1) * sizeof(*nc));
    if (nc == NULL) {
        ld->oom = 1;
        return -1;
    }
    m->costs = nc;
    memset(&nc[m->n_costs], 0, sizeof(nc[0]));
    /* As written: on an http listener it is a method, which is
     * case-sensitive; check_limit() upper-cases command names. */
    memcpy(nc[m->n_costs].cmd, w, clen);
    nc[m->n_costs].cost = v;
    m->n_costs++;
    return 0;
bad_name:
    sl_cf_err(ld, ld->line, "cost: '%.*s' is not a command name", (int)clen, w);
    return -1;
}

static void set_cost(struct loader *ld, struct section *sec, const struct keyword *kw,
                     const char *value)
{
    sl_cf_each_word(ld, sec, kw, value, cost_word);
}

static int method_word(struct loader *ld, struct section *sec, const struct keyword *kw,
                       const char *w)
{
    struct sl_limit_conf *m = sec->obj;
    char why[160];
    (void)kw;
    if (strcmp(w, "*") == 0) {
        sec->methods_star = 1;
        return 0;
    }
    if (sl_conf_method_problem(w, why, sizeof(why)) != NULL) {
        sl_cf_err(ld, ld->line, "methods: %s", why);
        return -1;
    }
    if (sl_cf_listed(m->methods, m->n_methods, w))
        return 0;
    if (m->n_methods >= MAX_LIST) {
        sl_cf_err(ld, ld->line, "methods: more than %d entries", MAX_LIST);
        return -1;
    }
    return sl_cf_push(ld, &m->methods, &m->n_methods, w);
}

static void set_methods(struct loader *ld, struct section *sec, const struct keyword *kw,
                        const char *value)
{
    sl_cf_each_word(ld, sec, kw, value, method_word);
}

static int path_word(struct loader *ld, struct section *sec, const struct keyword *kw,
                     const char *w)
{
    struct sl_limit_conf *m = sec->obj;
    char norm[3 * 256 + 2], why[400];
    (void)kw;
    if (sl_conf_path_pattern(w, norm, sizeof(norm), why, sizeof(why)) != NULL) {
        sl_cf_err(ld, ld->line, "paths: %s", why);
        return -1;
    }
    if (strlen(norm) > MAX_PATH) {
        sl_cf_err(ld, ld->line,
                  "paths: '%s' is longer than %d bytes (in normal form)", w, MAX_PATH);
        return -1;
    }
    if (sl_cf_listed(m->paths, m->n_paths, norm))
        return 0;
    if (m->n_paths >= MAX_LIST) {
        sl_cf_err(ld, ld->line, "paths: more than %d entries", MAX_LIST);
        return -1;
    }
    return sl_cf_push(ld, &m->paths, &m->n_paths, norm);
}

static void set_paths(struct loader *ld, struct section *sec, const struct keyword *kw,
                      const char *value)
{
    sl_cf_each_word(ld, sec, kw, value, path_word);
}

/* priority = none | 0..3: the shedding tier (adaptive concurrency,
 * docs/adaptive.md) of the identities this limit takes; 3 is shed last. */
static void set_priority(struct loader *ld, struct section *sec, const struct keyword *kw,
                         const char *value)
{
    struct sl_limit_conf *m = sec->obj;
    if (strcmp(value, "none") == 0) {
        m->priority = -1;
        return;
    }
    if (value[0] < '0' || value[0] > '3' || value[1] != '\0') {
        sl_cf_bad(ld, kw, "none or a tier from 0 to 3", value);
        return;
    }
    m->priority = value[0] - '0';
}

/* sluice — the [usage] section: usage that can be billed (docs/usage.md).
 * Its keyword table, the setter of export, its defaults and the rules that
 * span sections (export = store needs a store). */
#include <stdlib.h>
#include <string.h>

#include "conf/conf-i.h"
#include "conf/conf.h"

#define MIN_US  (60ULL * S_US)

static kw_setter set_export;

static const struct keyword usage_kw[] = {
    FUNC("export", set_export, 0),
    /* At least 10 ms (the tests flush fast); at most an hour, so a window
     * of counts is never held longer than the store can be trusted to be
     * away without an operator noticing. */
    NUM("interval", KW_DURATION, struct sl_usage_conf, interval_us, 10000, HOUR_US),
    /* Whole minutes dividing a day (checked in sl_cf_check_usage): a key
     * names its minute, and a day's (a month's) keys are whole windows. */
    NUM("window", KW_DURATION, struct sl_usage_conf, window_us, MIN_US, DAY_US),
    NUM("usage_ttl", KW_DURATION, struct sl_usage_conf, ttl_us, HOUR_US, 400 * DAY_US),
    NUM("max_pending", KW_U64, struct sl_usage_conf, max_pending, 1, 100000000),
};

const struct kw_table sl_cf_usage_keys = { usage_kw, N_OF(usage_kw) };

void sl_cf_usage_defaults(struct sl_conf *c)
{
    c->usage.export_kind = SL_USAGE_OFF;
    c->usage.interval_us = 10 * S_US;
    c->usage.window_us = MIN_US;
    /* A month and a few days: the longest month's keys are still there
     * when the billing run reads them after the month ends. */
    c->usage.ttl_us = 35 * DAY_US;
    c->usage.max_pending = 100000;
}

/* export = off | store | FILE (a path, relative to the configuration's
 * directory). */
static void set_export(struct loader *ld, struct section *sec, const struct keyword *kw,
                       const char *value)
{
    struct sl_usage_conf *u = sec->obj;
    free(u->file);
    u->file = NULL;
    if (value[0] == '\0') {
        sl_cf_bad(ld, kw, "off, store or a file", value);
        return;
    }
    if (strcmp(value, "off") == 0) {
        u->export_kind = SL_USAGE_OFF;
        return;
    }
    if (strcmp(value, "store") == 0) {
        u->export_kind = SL_USAGE_STORE;
        return;
    }
    if (!sl_cf_printable(value)) {
        sl_cf_bad(ld, kw, "off, store or a file without blanks", value);
        return;
    }
    u->file = sl_cf_abs_path(ld, value);
    if (u->file == NULL) {
        ld->oom = 1;
        return;
    }
    u->export_kind = SL_USAGE_FILE;
}

void sl_cf_check_usage(struct loader *ld)
{
    const struct sl_usage_conf *u = &ld->conf->usage;
    if (ld->usage == NULL)
        return;
    if (u->export_kind == SL_USAGE_STORE && ld->conf->store.kind == SL_STORE_LOCAL)
        sl_cf_err(ld, sl_cf_key_line(ld->usage, "export"),
                  "export: = store adds usage to the quota store; [store] url is local");
    if (u->window_us % MIN_US != 0 || DAY_US % u->window_us != 0)
        sl_cf_err(ld, sl_cf_key_line(ld->usage, "window"),
                  "window: whole minutes that divide a day (1m, 5m, 15m, 1h, 1d ...)");
}

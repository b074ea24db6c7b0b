/* sluice — loading, checking and printing the configuration. */
#ifndef SL_CONF_CONF_H
#define SL_CONF_CONF_H

#include <stdio.h>

#include "conf/conf-t.h"

/* Loads and validates the INI file at <path>. Each error is written to <errf>
 * as one line "FILE:LINE: message" (LINE 0 when it belongs to no line, e.g.
 * the file cannot be opened). Returns the new configuration (the caller owns
 * it; free with sl_conf_free()) or NULL when there was at least one error. */
struct sl_conf *sl_conf_load(const char *path, FILE *errf);

/* Same, from the NUL-terminated text <text>; <name> stands for FILE in errors. */
struct sl_conf *sl_conf_load_string(const char *text, const char *name, FILE *errf);

/* Writes the effective configuration, defaults filled in, as INI that
 * sl_conf_load() accepts again. Secrets (the password) are never written. */
void sl_conf_dump(const struct sl_conf *c, FILE *out);

void sl_conf_free(struct sl_conf *c);

/* Says what <c> allows but should not (a password_file readable by its group
 * or others): each as "FILE:LINE: warning: ..." to <errf>, or logged at warn
 * level when <errf> is NULL. Returns how many there were. */
int sl_conf_warn(const struct sl_conf *c, FILE *errf);

/* Finds the listener named <name>, or NULL. */
struct sl_listener_conf *sl_conf_listener(const struct sl_conf *c, const char *name);

#endif

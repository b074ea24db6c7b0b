/* sluice — the store's Lua scripts, embedded at build time (lua/embed.sh). */
#ifndef SL_STORE_SCRIPTS_H
#define SL_STORE_SCRIPTS_H

#include "store/store.h"

extern const char *const sl_lua_scripts[SL_SCRIPT_COUNT];      /* script bodies */
extern const char *const sl_lua_script_names[SL_SCRIPT_COUNT]; /* for logs */

#endif

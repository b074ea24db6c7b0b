/* sluice — Redis 7's ACL command categories (@read, @write, @admin ...).
 *
 * A table of every command of Redis 7.0 and its subcommands with the
 * categories Redis gives them (ACL CAT on redis-server 7.0.15; WAITAOF from
 * Redis 7.2's command table), so a limit can say `commands = @write`
 * without its author knowing every command that writes. Pure data and
 * lookups: no allocation, no I/O.
 *
 * Subcommands: for a container (CONFIG, CLIENT, OBJECT, XINFO ...) the
 * categories are those of the subcommand named by argument 1 (CONFIG SET
 * is @admin @slow @dangerous, CONFIG HELP only @slow), or the container's
 * own (@slow) when argument 1 is missing or names no subcommand (Redis
 * refuses those). A command Redis 7.0 does not have (a module's, a newer
 * Redis's) is in no category. */
#ifndef SL_PROTO_RESP_ACL_H
#define SL_PROTO_RESP_ACL_H

#include <stddef.h>
#include <stdint.h>

#include "proto/resp-t.h"

#define SL_RESP_ACL_CATEGORIES 21 /* Redis 7.0's ACL CAT */

/* The bit (0 .. SL_RESP_ACL_CATEGORIES - 1) of the category named by the
 * <len> bytes at <name> (without the '@', any case), or -1. */
int sl_resp_acl_category(const char *name, size_t len);

/* The name of category bit <bit> as Redis writes it ("write"), or NULL. */
const char *sl_resp_acl_category_name(int bit);

/* The categories of request <r> (bit i set: in category i), from its
 * command name and, for a container, its subcommand; 0 when the command is
 * not in the table. Reads only captured arguments, by their lengths. */
uint32_t sl_resp_acl_of(const struct sl_resp_req *r);

/* Entry <i> of the table, for checks that must consider every command: its
 * command (upper case), its subcommand (upper case, or NULL for the command
 * itself) and its categories. Returns 0, or -1 when <i> is past the end. */
int sl_resp_acl_entry(size_t i, const char **cmd, const char **sub, uint32_t *cats);

/* Checks the table: sorted, upper case, subcommand ranges in bounds.
 * Returns 0 if it is fine (for the tests). */
int sl_resp_acl_selftest(void);

#endif

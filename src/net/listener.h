/* sluice — listeners and the server: bind, accept, reload, drain, sweep. */
#ifndef SL_NET_LISTENER_H
#define SL_NET_LISTENER_H

#include "net/listener-t.h"

/* Prepares <srv> on <loop> with <conf> (ownership passes to <srv>). */
void sl_server_init(struct sl_server *srv, uv_loop_t *loop, struct sl_conf *conf);

/* Binds every listener of the configuration and starts the sweep timer.
 * Returns 0, or the first bind error (logged) with nothing left bound. */
int sl_server_start(struct sl_server *srv);

/* Swaps in <conf> (ownership passes): listeners keep their sockets when their
 * name, address and protocol are unchanged, new ones are bound, removed ones
 * stop accepting and go away once their sessions have. Existing sessions see
 * the new settings from their next event on. Returns 0, or a bind error after
 * which the old configuration stays in force (<conf> is freed). */
int sl_server_reload(struct sl_server *srv, struct sl_conf *conf);

/* Stops accepting and lets sessions finish within shutdown_grace; the loop
 * ends when the last session has closed or the grace has passed. */
void sl_server_drain(struct sl_server *srv);

/* Closes every handle at once (second SIGTERM, or the grace ran out). */
void sl_server_stop(struct sl_server *srv);

/* Calls <fn>(session, <arg>) for every open session of <l>. */
struct sl_session;
void sl_listener_each_session(struct sl_listener *l, void (*fn)(struct sl_session *, void *),
                              void *arg);

/* The admin endpoint's callbacks that report on <srv>. */
struct sl_admin_cbs;
void sl_server_admin_cbs(struct sl_server *srv, struct sl_admin_cbs *cbs);

/* Called by a session when it is freed. */
void sl_listener_session_gone(struct sl_listener *l);

/* Adds every counter of <from> to <to>. A name can have several listener
 * structs at once (a listener moved by a reload keeps its old one while its
 * sessions live): reports sum them into one series per name, and a struct
 * that goes hands its counts to another of its name. */
void sl_listener_stats_add(struct sl_listener_stats *to, const struct sl_listener_stats *from);

/* Descriptors kept free for what is not a session (store reconnects, admin
 * connections, reading the configuration at a reload, libuv's own). */
#define SL_FD_SLACK 16

/* Counts a connection of <l> refused for lack of file descriptors (<err>:
 * UV_EMFILE or UV_ENFILE), in sluice_connections_refused_total and
 * sluice_connections_refused_descriptors_total, and logs it at a rate: the
 * first at once, then at most one line per second per listener with the
 * count since the last line. For the session, when its upstream socket
 * cannot be made. */
void sl_listener_refused_fd(struct sl_listener *l, int err);

#endif

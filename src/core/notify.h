/* sluice — telling systemd how the service is doing (sd_notify without libsystemd).
 *
 * Under `Type=notify` systemd puts the path of a datagram socket in
 * $NOTIFY_SOCKET (an absolute path, or "@name" for an abstract socket) and
 * reads newline-separated KEY=VALUE messages from it:
 *
 *   READY=1                          every listener is bound (start, end of a reload)
 *   RELOADING=1 + MONOTONIC_USEC=N   a reload starts (N: CLOCK_MONOTONIC in us)
 *   STOPPING=1                       the drain starts
 *   STATUS=...                       one line for `systemctl status`
 *
 * Only the process systemd started talks to it: sl_notify_init() removes the
 * variable from the environment, so workers never see it. With the variable
 * unset or empty every call here returns at once, having done nothing.
 *
 * Sends never block the loop (MSG_DONTWAIT): a datagram systemd has no room
 * for is dropped and logged once until a send succeeds again. */
#ifndef SL_CORE_NOTIFY_H
#define SL_CORE_NOTIFY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <uv.h>

/* Parses a $NOTIFY_SOCKET value <v> into <sa> and its length <*len>:
 * "/path" (shorter than sun_path) or "@abstract". Returns 0, or -1 for
 * anything else (empty, relative, too long, "vsock:..."). Pure. */
int sl_notify_addr(const char *v, struct sockaddr_un *sa, socklen_t *len);

/* Reads $NOTIFY_SOCKET, unsets it and opens a close-on-exec datagram socket.
 * Returns 1 when notifications are on, 0 when the variable is unset or
 * empty, -1 (logged) when it is malformed or no socket can be made: sluice
 * runs on without notifying. Call once, before any other call here. */
int sl_notify_init(void);

/* 1 when sl_notify_init() found a socket to talk to. */
int sl_notify_on(void);

/* How often STATUS= is sent on its own. */
#define SL_NOTIFY_STATUS_MS 5000

/* Writes the operator's one-line summary into <buf> (<cap> bytes, NUL-terminated). */
typedef void sl_notify_status_fn(void *data, char *buf, size_t cap);

/* Makes <fn>(<data>) the source of STATUS=: it is appended to every state
 * message below and sent alone every <every_ms> from an unreferenced timer
 * on <loop> (it does not keep the loop alive). Nothing when off. */
void sl_notify_status_start(uv_loop_t *loop, uint64_t every_ms, sl_notify_status_fn *fn, void *data);

/* READY=1 (with STATUS= when a source is set). */
void sl_notify_ready(void);

/* RELOADING=1 and MONOTONIC_USEC= the CLOCK_MONOTONIC time now, in us. */
void sl_notify_reloading(void);

/* STOPPING=1 (with STATUS=). */
void sl_notify_stopping(void);

/* STATUS= alone, now. */
void sl_notify_status(void);

/* Closes the timer and the socket (the loop must run once more for the
 * timer's close). Safe when off or called twice. */
void sl_notify_close(void);

#endif

/* sluice — worker processes: `workers = N` in [sluice].
 *
 * With N > 1 the process started by the operator becomes the master: it
 * serves no traffic itself but spawns N workers (this same binary, with
 * SLUICE_WORKER=i/N in the environment and a control pipe on descriptor 3),
 * restarts any that dies, passes SIGHUP/SIGTERM/SIGINT/SIGUSR1 on to them,
 * and serves the admin endpoint, answering from what every worker reports.
 *
 * Each worker is a whole sluice instance: its own loop, its own listening
 * sockets (SO_REUSEPORT on the same addresses: the kernel spreads new
 * connections over the workers), its own store client and instance id, so the
 * limits of the store see N instances. max_connections is shared out: a
 * worker takes ceil(max / N).
 *
 * The control pipe carries one byte per question from the master ('m'
 * metrics, 's' stats, 'r' readiness) and frames back from the worker:
 *
 *   type (1 byte) | status (2 bytes, little endian) | length (4 bytes, LE) | body
 *
 * where type 'R' (no body) says the worker listens and handles signals, and 'm' 's' 'r'
 * answer the questions in the order they were asked. */
#ifndef SL_NET_WORKERS_H
#define SL_NET_WORKERS_H

#include "conf/conf-t.h"
#include "net/listener-t.h"

/* The worker this process is, from SLUICE_WORKER=i/N: returns 1 and sets
 * *index and *count, 0 when not a worker, -1 (logged) when malformed. */
int sl_worker_from_env(int *index, int *count);

/* A worker's share of each listener's max_connections: ceil(max / count). */
void sl_worker_share(struct sl_conf *conf, int count);

/* In a worker whose server has started: answers the master on descriptor 3
 * and tells it the worker is listening. When the master goes away the server
 * drains. Returns 0, or -1 (logged) when the pipe cannot be used. */
int sl_worker_attach(struct sl_server *srv);

/* Closes the control pipe (after the loop has ended). */
void sl_worker_detach(void);

/* Loads and checks the configuration again (SIGHUP); NULL on error (logged). */
typedef struct sl_conf *sl_master_load_fn(void);

/* Runs the master until every worker has exited after a stop signal.
 * <conf> (owned) has workers > 1; <argv> is this process's argument vector,
 * given to each worker. Returns the exit code. */
int sl_master_run(struct sl_conf *conf, char **argv, sl_master_load_fn *load);

#endif

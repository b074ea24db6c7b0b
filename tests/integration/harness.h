/* sluice integration tests — starting and stopping real processes.
 *
 * Every test starts real redis-server and build/sluice processes on free
 * loopback ports and stops them again. SLUICE_BIN overrides the binary
 * (`make check` uses the sanitizer build). */
#ifndef SL_TEST_HARNESS_H
#define SL_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct th_proc {
    pid_t pid;        /* 0 when not running */
    int   port;       /* the port it serves */
    char  conf[256];  /* sluice: its configuration file */
    char  log[256];   /* where its stderr goes */
};

/* A loopback TCP port nobody listens on right now. */
int th_free_port(void);

/* Starts redis-server on a free port (no persistence); waits until it
 * answers PING. Extra arguments (NULL-terminated list) are appended. Returns
 * 0 or -1. */
int th_redis_start(struct th_proc *p, ...);

/* Starts build/sluice with the configuration text <ini> (written to a temp
 * file); waits until port <wait_port> accepts connections (0: do not wait).
 * Returns 0 or -1 (and prints the log). */
int th_sluice_start(struct th_proc *p, const char *ini, int wait_port);

/* Sends SIGTERM, waits up to 5 s, then SIGKILL. Returns the exit status as
 * waitpid gives it, or -1. */
int th_stop(struct th_proc *p);

/* Sends <sig> and waits up to <ms> for the process to exit; returns its
 * waitpid status or -1 if it is still running. */
int th_signal_wait(struct th_proc *p, int sig, int ms);

/* Resident set size of <pid> in KiB (VmRSS), or -1. */
long th_rss_kb(pid_t pid);

/* A connected blocking TCP socket to 127.0.0.1:<port>, or -1. */
int th_connect(int port);

/* Writes all of <buf>; returns 0 or -1. */
int th_write_all(int fd, const void *buf, size_t len);

/* Reads until <len> bytes or EOF or <ms> elapse; returns bytes read. */
size_t th_read_n(int fd, void *buf, size_t len, int ms);

/* Reads until the peer closes or <ms> elapse; returns bytes read (<= cap).
 * *eof is set to 1 if EOF (or a reset) was seen. */
size_t th_read_until_eof(int fd, void *buf, size_t cap, int ms, int *eof);

/* Milliseconds on a monotonic clock. */
uint64_t th_now_ms(void);

/* The path of the sluice binary (SLUICE_BIN or build/sluice). */
const char *th_sluice_bin(void);

#endif

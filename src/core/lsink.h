/* sluice — a line sink that never blocks the loop: the decision log and
 * the access logs.
 *
 *   sl_lsink_put(line) --> buffer (bounded) --timer / half full--> one job
 *                                                  in libuv's threadpool:
 *                                                  write(2) of whole lines
 *
 * A line is copied into the sink's buffer and the loop goes on; the bytes
 * are written by a job in libuv's threadpool (one job in flight per sink at
 * most), so a slow disk or a full pipe (stderr read by a stalled journald)
 * stalls that thread, never the loop. Memory is bounded: a buffer being
 * filled and one being written, SL_LSINK_CAP bytes each (a job starts at
 * once when SL_LSINK_EAGER bytes wait, so a busy log keeps its writer
 * busy and the other half free). A line that does
 * not fit is dropped and counted (sl_lsink_dropped(), the metric
 * sluice_log_dropped_total), and the next line that fits is preceded in
 * the main log by a warning with the count: never silently lost.
 *
 * Writes are of whole lines, at most PIPE_BUF (4096) bytes each when the
 * destination is not a regular file, so lines written by other processes
 * to the same pipe never cut into them; a regular file is opened with
 * O_APPEND, where a write lands whole at its end.
 *
 * A sink writes to a file of its own (access logs), or to wherever the
 * main log goes now (the decision log: stderr or log_file, followed across
 * SIGUSR1 and reloads). Each job writes to a dup() of the descriptor taken
 * when it starts, so a reopen never closes a descriptor under a writer. */
#ifndef SL_CORE_LSINK_H
#define SL_CORE_LSINK_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define SL_LSINK_CAP   (1024 * 1024) /* bytes buffered per half */
#define SL_LSINK_EAGER (64 * 1024)   /* a job starts at once past this much */
#define SL_LSINK_DELAY 50           /* ms a line waits at most before its write starts */

struct sl_lsink;

/* A sink on <loop> writing to the file <path> (opened O_WRONLY | O_CREAT |
 * O_APPEND, mode 0640), or, with <path> NULL, to the main log's current
 * destination (core/log.h). Returns NULL with *<err> set to a negative
 * errno when the file cannot be opened or memory is short. */
struct sl_lsink *sl_lsink_open(uv_loop_t *loop, const char *path, int *err);

/* The path it writes to (NULL: the main log). Borrowed. */
const char *sl_lsink_path(const struct sl_lsink *k);

/* Queues the <n> bytes at <line> (one or more whole lines, each ending in
 * '\n'). Returns 0, or -1 when they did not fit (dropped, counted). */
int sl_lsink_put(struct sl_lsink *k, const char *line, size_t n);

/* Opens the sink's file again by its name (logrotate moved it); the lines
 * already queued go to the new file. Nothing to do for a main-log sink
 * (sl_log_reopen() moves that). Returns 0 or a negative errno (the old
 * file stays, and the error is logged). */
int sl_lsink_reopen(struct sl_lsink *k);

/* Closes the sink once what it holds is written: at once when no job is
 * in flight, else when it ends. */
void sl_lsink_close(struct sl_lsink *k);

/* Writes what every sink holds, synchronously (at exit, after the loop
 * ended: no job can be in flight). */
void sl_lsink_flush_all_sync(void);

/* Reopens every sink that has a file of its own (SIGUSR1). */
void sl_lsink_reopen_all(void);

/* Lines dropped so far by all sinks of the process (full buffers, failed
 * writes). */
uint64_t sl_lsink_dropped(void);

#endif

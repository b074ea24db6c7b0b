/* sluice — what /metrics says of the process itself: the build
 * (sluice_build_info), the process_* set every Prometheus client exports
 * (CPU, memory, descriptors, start time; read from /proc, as those clients
 * do on Linux) and the configuration reloads (sluice_reloads_total and the
 * last good one's time, as Prometheus' own prometheus_config_* series).
 *
 * With workers, each worker writes its own process_* (the master's merge
 * labels them worker="N"); the build and the reloads are the master's, which
 * checks the file at every SIGHUP, and only it writes them. */
#ifndef SL_ADMIN_PROCESS_H
#define SL_ADMIN_PROCESS_H

#include <sys/types.h>

struct sl_metrics;

/* The process started with this configuration loaded: the reload figures
 * start from now (the first load counts as the last good one, as in
 * Prometheus). Called once, before the first scrape. */
void sl_reloads_init(void);

/* A SIGHUP's outcome: <ok> 1 applied, 0 refused (the running configuration
 * stays). */
void sl_reloads_count(int ok);

/* process_cpu_seconds_total, process_resident_memory_bytes,
 * process_virtual_memory_bytes, process_open_fds, process_max_fds,
 * process_start_time_seconds of the calling process; a figure /proc cannot
 * give is left out (no sample, not a false 0). */
void sl_process_metrics(struct sl_metrics *m);

/* sluice_build_info{version} 1, sluice_reloads_total{result},
 * sluice_last_reload_success_timestamp_seconds and
 * sluice_config_last_reload_successful. */
void sl_build_reload_metrics(struct sl_metrics *m);

/* Parses the text of /proc/PID/stat: utime + stime and starttime in clock
 * ticks, vsize in bytes, rss in pages. Returns 0, or -1 when <text> is not
 * such a line. (Here for the unit test.) */
int sl_process_parse_stat(const char *text, unsigned long long *cpu_ticks,
                          unsigned long long *start_ticks, unsigned long long *vsize,
                          long long *rss_pages);

#endif

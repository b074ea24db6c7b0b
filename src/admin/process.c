/* sluice — the process's own metrics: build, process_*, reloads (see
 * admin/process.h). Read at each scrape: a few small /proc files, no state
 * kept but the reload counts. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "admin/admin.h"
#include "admin/process.h"

/* Reloads since start; written by the loop's signal handler only. */
static struct {
    uint64_t success, failure;
    double   last_success_s; /* wall clock, seconds since the epoch */
    int      last_ok;        /* the last reload (or the start) applied its file */
} reloads = { 0, 0, 0, 1 };

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void sl_reloads_init(void)
{
    reloads.last_success_s = wall_now();
    reloads.last_ok = 1;
}

void sl_reloads_count(int ok)
{
    if (ok) {
        reloads.success++;
        reloads.last_success_s = wall_now();
    } else {
        reloads.failure++;
    }
    reloads.last_ok = ok != 0;
}

int sl_process_parse_stat(const char *text, unsigned long long *cpu_ticks,
                          unsigned long long *start_ticks, unsigned long long *vsize,
                          long long *rss_pages)
{
    /* "pid (comm) state ppid ...": comm may hold blanks and parentheses,
     * so the fields are counted from the last ')'. */
    const char *p = strrchr(text, ')');
    if (p == NULL)
        return -1;
    unsigned long long utime, stime;
    /* After ')': field 3 (state) ... 14 utime, 15 stime, 22 starttime,
     * 23 vsize, 24 rss (proc(5)). */
    /* %*s skips one field whatever its size (no conversion to overflow). */
    int n = sscanf(p + 1,
                   " %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu %llu"
                   " %*s %*s %*s %*s %*s %*s %llu %llu %lld",
                   &utime, &stime, start_ticks, vsize, rss_pages);
    if (n != 5)
        return -1;
    *cpu_ticks = utime + stime;
    return 0;
}

/* Seconds since the epoch at boot (/proc/stat btime), or -1. */
static long long boot_time(void)
{
    FILE *f = fopen("/proc/stat", "r");
    if (f == NULL)
        return -1;
    char line[256];
    long long bt = -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "btime %lld", &bt) == 1)
            break;
    fclose(f);
    return bt;
}

/* Descriptors open now (/proc/self/fd less the one reading it), or -1. */
static long long open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    long long n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1;
}

void sl_process_metrics(struct sl_metrics *m)
{
    char text[1024];
    size_t len = 0;
    FILE *f = fopen("/proc/self/stat", "r");
    if (f != NULL) {
        len = fread(text, 1, sizeof(text) - 1, f);
        fclose(f);
    }
    text[len] = '\0';
    unsigned long long cpu, start, vsize;
    long long rss;
    long tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    if (len > 0 && tck > 0 && sl_process_parse_stat(text, &cpu, &start, &vsize, &rss) == 0) {
        sl_metrics_family(m, "process_cpu_seconds_total", "counter",
                          "Total user and system CPU time spent in seconds.");
        sl_metrics_f64(m, "process_cpu_seconds_total", NULL, (double)cpu / (double)tck);
        if (page > 0 && rss >= 0) {
            sl_metrics_family(m, "process_resident_memory_bytes", "gauge",
                              "Resident memory size in bytes.");
            sl_metrics_u64(m, "process_resident_memory_bytes", NULL,
                           (uint64_t)rss * (uint64_t)page);
        }
        sl_metrics_family(m, "process_virtual_memory_bytes", "gauge",
                          "Virtual memory size in bytes.");
        sl_metrics_u64(m, "process_virtual_memory_bytes", NULL, vsize);
        long long bt = boot_time();
        if (bt >= 0) {
            sl_metrics_family(m, "process_start_time_seconds", "gauge",
                              "Start time of the process since unix epoch in seconds.");
            sl_metrics_f64(m, "process_start_time_seconds", NULL,
                           (double)bt + (double)start / (double)tck);
        }
    }
    long long fds = open_fds();
    if (fds >= 0) {
        sl_metrics_family(m, "process_open_fds", "gauge", "Number of open file descriptors.");
        sl_metrics_u64(m, "process_open_fds", NULL, (uint64_t)fds);
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        sl_metrics_family(m, "process_max_fds", "gauge",
                          "Maximum number of open file descriptors.");
        sl_metrics_u64(m, "process_max_fds", NULL, (uint64_t)rl.rlim_cur);
    }
}

void sl_build_reload_metrics(struct sl_metrics *m)
{
    static const char *const version[] = { "version", SL_VERSION, NULL };
    sl_metrics_family(m, "sluice_build_info", "gauge",
                      "Always 1; the version of the running binary is its label.");
    sl_metrics_u64(m, "sluice_build_info", version, 1);
    static const char *const ok[] = { "result", "success", NULL };
    static const char *const bad[] = { "result", "failure", NULL };
    sl_metrics_family(m, "sluice_reloads_total", "counter",
                      "Configuration reloads (SIGHUP) since start: applied, or refused "
                      "with the running configuration kept.");
    sl_metrics_u64(m, "sluice_reloads_total", ok, reloads.success);
    sl_metrics_u64(m, "sluice_reloads_total", bad, reloads.failure);
    sl_metrics_family(m, "sluice_last_reload_success_timestamp_seconds", "gauge",
                      "When the running configuration was loaded (start, or the last "
                      "applied reload), in seconds since the epoch.");
    sl_metrics_f64(m, "sluice_last_reload_success_timestamp_seconds", NULL,
                   reloads.last_success_s);
    sl_metrics_family(m, "sluice_config_last_reload_successful", "gauge",
                      "1 when the last reload applied its file (or none was tried), 0 when "
                      "it was refused.");
    sl_metrics_u64(m, "sluice_config_last_reload_successful", NULL, (uint64_t)reloads.last_ok);
}

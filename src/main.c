/* sluice — arguments, configuration, the loop, signals, reload.
 *
 *   sluice [-c FILE] [-t [--no-resolve]] [-T] [-V] [-v LEVEL] [-h]
 *          (--version, --help)
 *
 * SIGHUP reloads (validate first; on error keep the old configuration),
 * SIGTERM/SIGINT drain (a second one stops at once), SIGUSR1 opens log_file
 * again by its name (logrotate's postrotate).
 *
 * With workers = N > 1 this process is the master and runs the workers
 * instead (net/workers.h); a worker (SLUICE_WORKER in its environment) runs
 * the loop below like a single process. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <uv.h>

#include "admin/process.h"
#include "conf/conf.h"
#include "conf/resolve.h"
#include "core/buf.h"
#include "core/log.h"
#include "core/lsink.h"
#include "core/notify.h"
#include "limit/limiter.h"
#include "net/alog.h"
#include "net/dlog.h"
#include "net/listener.h"
#include "net/session.h"
#include "net/workers.h"
#include "store/store.h"

#define DEFAULT_CONF "/etc/sluice/sluice.ini"

static const char *conf_path = DEFAULT_CONF;
static int level_override = -1; /* -v LEVEL, kept across reloads */
static int worker_count;         /* > 0 in a worker: how many there are */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sluice [-c FILE] [-t [--no-resolve]] [-T] [-V] [-v LEVEL] [-h]\n"
            "  -c FILE        configuration file (default: " DEFAULT_CONF ")\n"
            "  -t             check the configuration and exit\n"
            "  -T             check, then print the effective configuration\n"
            "  --no-resolve   with -t or -T: check everything but host names (a file\n"
            "                 for another network: Compose, Kubernetes)\n"
            "  -V, --version  print the version and exit\n"
            "  -v LEVEL       log level override: error | warn | info | debug\n"
            "  -h, --help     print this help and exit\n");
}

/* Loads <path> and checks the limits' numbers too; errors go to <errf>. */
static struct sl_conf *load_checked(const char *path, FILE *errf)
{
    struct sl_conf *c = sl_conf_load(path, errf);
    if (c != NULL && sl_limiter_validate(c, errf) > 0) {
        sl_conf_free(c);
        return NULL;
    }
    return c;
}

/* Loads the configuration, logging each error line; NULL on any error. */
static struct sl_conf *load_logged(const char *path)
{
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (mem == NULL)
        return load_checked(path, stderr);
    struct sl_conf *c = load_checked(path, mem);
    fclose(mem);
    char q[1024];
    for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n"))
        sl_log_error("configuration error", "error=%s", sl_log_quote(line, strlen(line), q, sizeof(q)));
    free(text);
    if (c != NULL && worker_count == 0) /* a worker's master has said it */
        sl_conf_warn(c, NULL);
    return c;
}

static void apply_level(const struct sl_conf *c)
{
    sl_log_level = level_override >= 0 ? (enum sl_log_level)level_override : c->log_level;
}

/* Sends the logs where <c> says; a file that cannot be opened is logged
 * (to where logs went so far, which stay) and makes a reload fail. */
static int apply_log(const struct sl_conf *c)
{
    int rc = sl_log_open(c->log_file, c->log_format);
    if (rc < 0) {
        char q[512], e[128];
        sl_log_error("cannot open log_file", "file=%s err=%s",
                     sl_log_quote(c->log_file, strlen(c->log_file), q, sizeof(q)),
                     sl_log_quote(strerror(-rc), strlen(strerror(-rc)), e, sizeof(e)));
    }
    return rc;
}

/* A reload in the master: the workers load the file themselves. */
static struct sl_conf *master_load(void)
{
    sl_log_info("reloading", "file=%s", conf_path);
    struct sl_conf *c = load_logged(conf_path);
    if (c != NULL && apply_log(c) < 0) {
        sl_conf_free(c);
        return NULL;
    }
    if (c != NULL)
        apply_level(c);
    return c;
}

/* STATUS= for systemctl status: what an operator checks first. */
static void server_status(void *data, char *buf, size_t cap)
{
    const struct sl_server *srv = data;
    unsigned listeners = 0;
    uint64_t conns = 0;
    for (const struct sl_listener *l = srv->listeners; l != NULL; l = l->next) {
        listeners += !l->retired && l->open;
        conns += l->stats.conns_active;
    }
    snprintf(buf, cap, "%s listeners=%u connections=%llu store=%s",
             srv->draining ? "draining" : "serving", listeners, (unsigned long long)conns,
             srv->store == NULL ? "local" : sl_store_up(srv->store) ? "up" : "down");
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct sl_server *srv = h->data;
    switch (signum) {
    case SIGHUP: {
        if (srv->draining)
            return;
        /* READY=1 follows on every path: after a failed reload the old
         * configuration serves on, and that is ready too. */
        sl_notify_reloading();
        sl_log_info("reloading", "file=%s", conf_path);
        struct sl_conf *c = load_logged(conf_path);
        if (c == NULL) {
            sl_reloads_count(0);
            sl_log_error("reload failed: keeping the running configuration", "file=%s", conf_path);
            sl_notify_ready();
            return;
        }
        if (apply_log(c) < 0) {
            sl_conf_free(c);
            sl_reloads_count(0);
            sl_log_error("reload failed: keeping the running configuration", "file=%s", conf_path);
            sl_notify_ready(); /* the old configuration serves on */
            return;
        }
        if (sl_alog_apply(srv->loop, c) < 0) {
            (void)apply_log(srv->conf);
            sl_conf_free(c);
            sl_log_error("reload failed: keeping the running configuration", "file=%s", conf_path);
            sl_notify_ready();
            return;
        }
        if (worker_count > 0)
            sl_worker_share(c, worker_count);
        if (sl_server_reload(srv, c) < 0) {
            sl_reloads_count(0);
            (void)apply_log(srv->conf); /* back to the running configuration's log */
            (void)sl_alog_apply(srv->loop, srv->conf);
            sl_log_error("reload failed: keeping the running configuration", "file=%s", conf_path);
            sl_notify_ready();
            return;
        }
        sl_reloads_count(1);
        apply_level(srv->conf);
        sl_log_info("reloaded", "file=%s", conf_path);
        sl_notify_ready();
        return;
    }
    case SIGINT:
        if (worker_count > 0)
            return; /* the master passes a stop on as SIGTERM */
        /* fall through */
    case SIGTERM:
        if (srv->draining) {
            sl_log_info("second stop signal: exiting now", "signal=%d", signum);
            sl_server_stop(srv);
        } else {
            sl_server_drain(srv);
            sl_notify_stopping();
        }
        return;
    case SIGUSR1:
        (void)sl_log_reopen();
        sl_lsink_reopen_all(); /* the access logs */
        return;
    }
}

/* Many idle connections need two descriptors each: take what the hard limit
 * allows, as Redis and nginx do. */
static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            sl_log_warn("cannot raise the descriptor limit", "max=%llu",
                        (unsigned long long)rl.rlim_max);
    }
}

int main(int argc, char **argv)
{
    int check = 0, dump = 0, no_resolve = 0, opt;
    enum { OPT_NO_RESOLVE = 256 };
    static const struct option longs[] = {
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { "no-resolve", no_argument, NULL, OPT_NO_RESOLVE },
        { NULL, 0, NULL, 0 },
    };
    while ((opt = getopt_long(argc, argv, "c:tTVv:h", longs, NULL)) != -1) {
        switch (opt) {
        case 'c': conf_path = optarg; break;
        case 't': check = 1; break;
        case 'T': check = 1; dump = 1; break;
        case OPT_NO_RESOLVE: no_resolve = 1; break;
        case 'V': printf("sluice %s\n", SL_VERSION); return 0;
        case 'v': {
            enum sl_log_level lv;
            if (sl_log_level_parse(optarg, &lv) < 0) {
                fprintf(stderr, "sluice: -v: expected error | warn | info | debug, got '%s'\n", optarg);
                return 1;
            }
            level_override = (int)lv;
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 1;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 1;
    }
    /* Running without addresses would bind and connect to nothing. */
    if (no_resolve && !check) {
        fprintf(stderr, "sluice: --no-resolve goes with -t or -T\n");
        return 1;
    }
    sl_conf_no_resolve = no_resolve;

    if (check) {
        struct sl_conf *c = load_checked(conf_path, stderr);
        if (c == NULL)
            return 1;
        sl_conf_warn(c, stderr);
        if (dump)
            sl_conf_dump(c, stdout);
        else
            printf("configuration OK\n");
        sl_conf_free(c);
        return 0;
    }

    int worker_index = -1;
    switch (sl_worker_from_env(&worker_index, &worker_count)) {
    case -1: return 1;
    case 1: snprintf(sl_log_tag, sizeof(sl_log_tag), "worker=%d", worker_index); break;
    default: worker_count = 0; break;
    }
    struct sl_conf *conf = load_logged(conf_path);
    if (conf == NULL)
        return 1;
    if (apply_log(conf) < 0) {
        sl_conf_free(conf);
        return 1;
    }
    apply_level(conf);
    sl_reloads_init();
    /* Before the workers are started: it takes NOTIFY_SOCKET out of the
     * environment they inherit (only the master speaks to systemd). */
    sl_notify_init();
    signal(SIGPIPE, SIG_IGN);
    raise_nofile();
    if (worker_count == 0 && conf->workers > 1)
        return sl_master_run(conf, argv, master_load);
    if (worker_count > 0)
        sl_worker_share(conf, worker_count);

    uv_loop_t *loop = uv_default_loop();
    struct sl_server srv;
    sl_server_init(&srv, loop, conf);
    srv.worker = worker_count > 0;
    if (sl_alog_apply(loop, conf) < 0) {
        sl_conf_free(conf);
        return 1;
    }

    /* Signals are ours before the first listener accepts: a SIGTERM sent as
     * soon as the port answers drains instead of killing the process. One
     * that comes before the loop runs is taken on its first turn. */
    static const int signums[] = { SIGHUP, SIGTERM, SIGINT, SIGUSR1 };
    uv_signal_t sigs[4];
    for (int i = 0; i < 4; i++) {
        uv_signal_init(loop, &sigs[i]);
        sigs[i].data = &srv;
        uv_signal_start(&sigs[i], on_signal, signums[i]);
        uv_unref((uv_handle_t *)&sigs[i]); /* signals alone do not keep us running */
    }
    if (sl_server_start(&srv) < 0) {
        sl_server_stop(&srv);
        for (int i = 0; i < 4; i++)
            uv_close((uv_handle_t *)&sigs[i], NULL);
        uv_run(loop, UV_RUN_DEFAULT); /* let the closed handles go */
        sl_conf_free(srv.conf);
        return 1;
    }
    /* A worker says it is up once its signals are handled: the master then
     * passes SIGHUP and SIGUSR1 on to it (their default would end it). */
    if (srv.worker && sl_worker_attach(&srv) < 0) {
        srv.exit_code = 1;
        sl_server_stop(&srv);
    }
    sl_log_info("started", "version=%s pid=%d file=%s", SL_VERSION, (int)getpid(), conf_path);
    /* Every listener is bound and listening: connections queue in the
     * backlog and are accepted on the loop's first turn. */
    sl_notify_status_start(loop, SL_NOTIFY_STATUS_MS, server_status, &srv);
    if (!srv.draining)
        sl_notify_ready();

    uv_run(loop, UV_RUN_DEFAULT);

    for (int i = 0; i < 4; i++)
        uv_close((uv_handle_t *)&sigs[i], NULL);
    sl_dlog_close(); /* their last lines go out in the run below */
    sl_alog_close_all();
    sl_notify_close();
    sl_worker_detach();
    uv_run(loop, UV_RUN_DEFAULT);
    (void)uv_loop_close(loop);
    int rc = srv.exit_code;
    sl_lsink_flush_all_sync();
    sl_log_rate_flush(1); /* the counts of storms not written yet */
    sl_log_info("stopped", "%s", "");
    sl_conf_free(srv.conf);
    sl_buf_pool_drain();
    sl_session_pool_drain();
    sl_limiter_pool_drain();
    return rc;
}

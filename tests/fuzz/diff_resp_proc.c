/* sluice — differential RESP fuzzer, the processes: included by
 * tests/fuzz/diff_resp.c. The world a run needs (the upstream and store
 * redis-servers, sluice with its listeners, a control connection to the
 * upstream): starting, resetting between runs, noticing a death and
 * stopping. */

/* ---- the processes -------------------------------------------------------------------- */

struct world {
    struct th_proc up, store;
    pid_t          sl_pid;
    int            plain, lim;   /* sluice's two listeners */
    int            pool;         /* --pooled: a third, upstream_pool = --pool-size */
    int            ctl;          /* control connection to the upstream */
    char           conf[256], log[256];
    unsigned       restarts;
};

static struct world W;

static unsigned g_pooled;        /* --pooled K: rounds of K concurrent clients */
static unsigned g_pool_size = 2; /* --pool-size N: the pooled listener's upstream_pool */

static pid_t spawn_sluice(const char *conf, const char *log)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
    }
    /* sanitizer reports must end the process (so they are seen) and name the line */
    setenv("ASAN_OPTIONS", "abort_on_error=1:detect_leaks=1", 0);
    setenv("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1", 0);
    execl(th_sluice_bin(), th_sluice_bin(), "-c", conf, "-v", "warn", (char *)NULL);
    _exit(127);
}

static int ctl_cmd(const char *cmd, size_t len, char *reply, size_t cap)
{
    if (th_write_all(W.ctl, cmd, len) < 0)
        return -1;
    size_t got = 0;
    uint64_t end = th_now_ms() + 10000;
    while (th_now_ms() < end) {
        size_t k = th_read_n(W.ctl, reply + got, 1, 10000);
        if (k == 0)
            return -1;
        got++;
        size_t full = th_resp_len(reply, got);
        if (full == SIZE_MAX)
            return -1;
        if (full)
            break;
        if (got + 1 >= cap)
            return -1;
    }
    reply[got] = 0;
    return 0;
}

/* FLUSHALL, once the upstream has no client but the control connection
 * (so nothing of the previous run can still change the data). */
static int upstream_reset(void)
{
    char r[4096];
    static const char info[] = "*2\r\n$4\r\nINFO\r\n$7\r\nclients\r\n";
    uint64_t end = th_now_ms() + 5000;
    for (;;) {
        if (ctl_cmd(info, sizeof(info) - 1, r, sizeof(r)) < 0)
            return -1;
        const char *c = strstr(r, "connected_clients:");
        if (c && atoi(c + 18) <= 1)
            break;
        if (th_now_ms() > end) {
            fprintf(stderr, "diff_resp: the upstream still has clients of the last run\n");
            break;
        }
        usleep(2000);
    }
    static const char fl[] = "*1\r\n$8\r\nFLUSHALL\r\n";
    if (ctl_cmd(fl, sizeof(fl) - 1, r, sizeof(r)) < 0 || strcmp(r, "+OK\r\n") != 0)
        return -1;
    return 0;
}

static int sluice_start(void)
{
    char ini[2560];
    W.plain = th_free_port();
    W.lim = th_free_port();
    while (W.lim == W.plain)
        W.lim = th_free_port();
    W.pool = 0;
    while (g_pooled && (W.pool == 0 || W.pool == W.plain || W.pool == W.lim))
        W.pool = th_free_port();
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin =\nshutdown_grace = 1s\n"
             "[store]\nurl = redis://127.0.0.1:%d\ntimeout = 250ms\non_failure = open\n"
             "[listener plain]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "[listener lim]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "identity = resp_user client_name key_prefix client_ip\n"
             "[limit all]\nlistener = lim\nrate = 1000000/s\nburst = 1000000\n"
             "[limit writes]\nlistener = lim\ncommands = SET INCR DEL LPUSH RPUSH MSET\n"
             "rate = 1000000/s\nburst = 1000000\naction = delay\nmax_delay = 1s\n"
             "[limit bytes]\nlistener = lim\nmetric = bytes_in\nrate = 1GiB/s\nburst = 1GiB\n"
             /* the one limit that refuses: identity "deny", which no request
              * of a stream has (no key, name or user is "deny"; "deny:x" is
              * only ever an ECHO or PING argument). A THROTTLED reply means
              * a request was charged to another request's arguments. */
             "[limit deny]\nlistener = lim\nmatch_identity = deny\nrate = 1/d\nburst = 1\n",
             W.store.port, W.plain, W.up.port, W.lim, W.up.port);
    if (g_pooled) {
        size_t at = strlen(ini);
        snprintf(ini + at, sizeof(ini) - at,
                 "[listener pool]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nupstream_pool = %u\n",
                 W.pool, W.up.port, g_pool_size);
    }
    snprintf(W.conf, sizeof(W.conf), "/tmp/sluice-diff-%d.ini", (int)getpid());
    snprintf(W.log, sizeof(W.log), "/tmp/sluice-diff-%d.log", (int)getpid());
    FILE *f = fopen(W.conf, "w");
    if (!f)
        return -1;
    fputs(ini, f);
    fclose(f);
    unlink(W.log);
    W.sl_pid = spawn_sluice(W.conf, W.log);
    if (W.sl_pid < 0)
        return -1;
    uint64_t end = th_now_ms() + 10000;
    while (th_now_ms() < end) {
        int a = th_connect(W.plain), b = a >= 0 ? th_connect(W.lim) : -1;
        int c = b >= 0 && W.pool ? th_connect(W.pool) : -1;
        if (a >= 0)
            close(a);
        if (b >= 0)
            close(b);
        if (c >= 0)
            close(c);
        if (b >= 0 && (c >= 0 || !W.pool))
            return 0;
        if (waitpid(W.sl_pid, NULL, WNOHANG) == W.sl_pid)
            break;
        usleep(20000);
    }
    fprintf(stderr, "diff_resp: sluice did not start; its log %s:\n", W.log);
    char *t = th_slurp(W.log);
    fprintf(stderr, "%s\n", t ? t : "");
    free(t);
    return -1;
}

static int        g_minimising; /* while minimising, deaths are expected: no log dumps */
static struct buf g_death;      /* the sanitizer's first line from the last death */

/* Keeps the first sanitizer line of <log> (or the signal) in g_death. */
static void death_note(const char *log, int st)
{
    g_death.len = 0;
    buf_add(&g_death, "", 0);
    char *t = th_slurp(log);
    const char *m = NULL;
    if (t) {
        m = strstr(t, "runtime error:");
        if (!m)
            m = strstr(t, "ERROR: AddressSanitizer");
        if (!m)
            m = strstr(t, "ERROR: LeakSanitizer");
    }
    if (m) {
        while (m > t && m[-1] != '\n')
            m--;
        const char *e = strchr(m, '\n');
        buf_add(&g_death, m, e ? (size_t)(e - m) : strlen(m));
        /* the first frame inside sluice says where */
        const char *f = strstr(m, "#0 ");
        if (f && (f = strstr(f, " in ")) != NULL) {
            const char *fe = strchr(f, '\n');
            buf_str(&g_death, " |");
            buf_add(&g_death, f, fe ? (size_t)(fe - f) : strlen(f));
        }
    } else {
        buf_fmt(&g_death, "%s %d", WIFSIGNALED(st) ? "signal" : "exit status",
                WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    }
    /* masks addresses so repeats group */
    for (size_t i = 0; i + 1 < g_death.len; i++)
        if (g_death.p[i] == '0' && g_death.p[i + 1] == 'x')
            for (i += 2; i < g_death.len && strchr("0123456789abcdef", g_death.p[i]); i++)
                g_death.p[i] = 'X';
    if (!g_minimising) {
        fprintf(stderr, "!! sluice died (%s); its log (%s):\n", g_death.p, log);
        if (t) {
            size_t n = strlen(t);
            fputs(n > 12000 ? t + n - 12000 : t, stderr);
        }
    }
    free(t);
}

/* 1 while sluice runs; 0 once it died (what killed it is in g_death). */
static int sluice_alive(void)
{
    int st;
    if (W.sl_pid <= 0)
        return 0;
    if (waitpid(W.sl_pid, &st, WNOHANG) != W.sl_pid)
        return 1;
    W.sl_pid = 0;
    death_note(W.log, st);
    return 0;
}

static int sluice_stop(void)
{
    if (W.sl_pid <= 0)
        return -1;
    kill(W.sl_pid, SIGTERM);
    int st = -1;
    uint64_t end = th_now_ms() + 10000;
    while (th_now_ms() < end) {
        if (waitpid(W.sl_pid, &st, WNOHANG) == W.sl_pid) {
            W.sl_pid = 0;
            break;
        }
        usleep(10000);
    }
    if (W.sl_pid > 0) {
        kill(-W.sl_pid, SIGKILL);
        waitpid(W.sl_pid, &st, 0);
        W.sl_pid = 0;
        fprintf(stderr, "!! sluice did not exit on SIGTERM\n");
        return -1;
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "!! sluice exited with status %d at the end; its log (%s):\n", st, W.log);
        char *t = th_slurp(W.log);
        if (t) {
            size_t n = strlen(t);
            fputs(n > 12000 ? t + n - 12000 : t, stderr);
        }
        free(t);
        return -1;
    }
    unlink(W.conf);
    unlink(W.log);
    return 0;
}

static int world_start(void)
{
    memset(&W, 0, sizeof(W));
    if (th_redis_start(&W.up, NULL) < 0 || th_redis_start(&W.store, NULL) < 0)
        return -1;
    W.ctl = th_connect(W.up.port);
    if (W.ctl < 0)
        return -1;
    return sluice_start();
}

static int world_stop(void)
{
    int rc = sluice_stop();
    if (W.ctl >= 0)
        close(W.ctl);
    th_stop(&W.up);
    th_stop(&W.store);
    return rc;
}


#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "integration/harness.h"

uint64_t th_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

const char *th_sluice_bin(void)
{
    const char *b = getenv("SLUICE_BIN");
    return b && *b ? b : "build/sluice";
}

int th_free_port(void)
{
    /* Ports handed out by the kernel for port 0 are free now; remembering
     * the ones given keeps two calls in one test from colliding. */
    static int used[64];
    static int nused;
    for (int tries = 0; tries < 50; tries++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t al = sizeof(a);
        if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
            getsockname(fd, (struct sockaddr *)&a, &al) < 0) {
            close(fd);
            continue;
        }
        close(fd);
        int port = ntohs(a.sin_port), dup = 0;
        for (int i = 0; i < nused && i < 64; i++) /* the last 64 given */
            dup |= used[i] == port;
        if (dup)
            continue;
        used[nused++ % 64] = port;
        return port;
    }
    return -1;
}

int th_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static int wait_port(int port, pid_t pid, int ms)
{
    uint64_t end = th_now_ms() + (uint64_t)ms;
    while (th_now_ms() < end) {
        int fd = th_connect(port);
        if (fd >= 0) {
            close(fd);
            return 0;
        }
        if (pid > 0 && waitpid(pid, NULL, WNOHANG) == pid)
            return -1;
        usleep(10000);
    }
    return -1;
}

static void print_log(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    char line[512];
    fprintf(stderr, "---- %s\n", path);
    while (fgets(line, sizeof(line), f))
        fputs(line, stderr);
    fclose(f);
}

/* ---- bookkeeping ---------------------------------------------------------- */

#define MAX_TRACKED 64
static pid_t tracked[MAX_TRACKED];

static void untrack(pid_t pid)
{
    for (int i = 0; i < MAX_TRACKED; i++)
        if (tracked[i] == pid)
            tracked[i] = 0;
}

static void track(pid_t pid);

void th_track_pid(pid_t pid)
{
    track(pid);
}

static void track(pid_t pid)
{
    static int registered;
    if (!registered) {
        atexit(th_kill_all);
        registered = 1;
    }
    for (int i = 0; i < MAX_TRACKED; i++) {
        if (tracked[i] == 0) {
            tracked[i] = pid;
            return;
        }
    }
}

/* Files the harness wrote (configurations, logs): th_finish() removes them
 * when every test passed, and keeps them for a look when one failed. */
#define MAX_FILES 256
static char *files[MAX_FILES];
static int nfiles;

void th_track_file(const char *path)
{
    for (int i = 0; i < nfiles; i++)
        if (strcmp(files[i], path) == 0)
            return;
    if (nfiles < MAX_FILES)
        files[nfiles++] = strdup(path);
}

int th_finish(int failed)
{
    th_kill_all();
    if (failed == 0 && getenv("TH_KEEP_LOGS") == NULL)
        for (int i = 0; i < nfiles; i++)
            unlink(files[i]);
    for (int i = 0; i < nfiles; i++)
        free(files[i]);
    nfiles = 0;
    return failed;
}

void th_kill_all(void)
{
    for (int i = 0; i < MAX_TRACKED; i++) {
        if (tracked[i] > 0) {
            kill(-tracked[i], SIGKILL); /* each child leads its own group */
            kill(tracked[i], SIGKILL);
            waitpid(tracked[i], NULL, 0);
            tracked[i] = 0;
        }
    }
}

/* RLIMIT_NOFILE for the next spawn() (th_sluice_start_nofile); soft < 0: none. */
static long spawn_nofile_soft = -1, spawn_nofile_hard = -1;

static pid_t spawn(char *const argv[], const char *log)
{
    /* A log an earlier process left under this name (a port used again)
     * must not answer for this one: the child truncates it only once it
     * runs, and a wait for its first line may look before then. */
    unlink(log);
    pid_t pid = fork();
    if (pid > 0)
        track(pid);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
        if (spawn_nofile_soft >= 0) {
            struct rlimit rl = { (rlim_t)spawn_nofile_soft, (rlim_t)spawn_nofile_hard };
            if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
                _exit(126);
        }
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        setpgid(0, 0);
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

int th_redis_start(struct th_proc *p, ...)
{
    memset(p, 0, sizeof(*p));
    p->port = th_free_port();
    char port[16];
    snprintf(port, sizeof(port), "%d", p->port);
    snprintf(p->log, sizeof(p->log), "/tmp/sluice-test-redis-%d.log", p->port);
    th_track_file(p->log);
    char *argv[64] = { "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
                       "--appendonly", "no", "--daemonize", "no", "--protected-mode", "no" };
    int n = 13;
    va_list ap;
    va_start(ap, p);
    char *extra;
    while ((extra = va_arg(ap, char *)) != NULL && n < 62)
        argv[n++] = extra;
    va_end(ap);
    argv[n] = NULL;
    p->pid = spawn(argv, p->log);
    if (p->pid < 0 || wait_port(p->port, p->pid, 5000) < 0) {
        print_log(p->log);
        th_stop(p);
        return -1;
    }
    /* Listening is not yet serving while it loads: ask. */
    uint64_t end = th_now_ms() + 5000;
    while (th_now_ms() < end) {
        int fd = th_connect(p->port);
        char buf[16] = { 0 };
        if (fd >= 0 && th_write_all(fd, "PING\r\n", 6) == 0 && th_read_n(fd, buf, 7, 500) == 7 &&
            memcmp(buf, "+PONG\r\n", 7) == 0) {
            close(fd);
            return 0;
        }
        if (fd >= 0)
            close(fd);
        usleep(10000);
    }
    th_stop(p);
    return -1;
}

/* Waits until the redis-server (or sentinel) at <port> answers PING. */
static int wait_pong(int port, int ms)
{
    uint64_t end = th_now_ms() + (uint64_t)ms;
    while (th_now_ms() < end) {
        int fd = th_connect(port);
        char buf[16] = { 0 };
        /* -NOAUTH: it serves, and wants a password (requirepass). */
        if (fd >= 0 && th_write_all(fd, "PING\r\n", 6) == 0 && th_read_n(fd, buf, 7, 500) == 7 &&
            (memcmp(buf, "+PONG\r\n", 7) == 0 || memcmp(buf, "-NOAUTH", 7) == 0)) {
            close(fd);
            return 0;
        }
        if (fd >= 0)
            close(fd);
        usleep(10000);
    }
    return -1;
}

int th_sentinel_start(struct th_proc *p, const char *name, int master_port, const char *extra)
{
    memset(p, 0, sizeof(*p));
    p->port = th_free_port();
    snprintf(p->conf, sizeof(p->conf), "/tmp/sluice-test-sentinel-%d.conf", p->port);
    snprintf(p->log, sizeof(p->log), "/tmp/sluice-test-sentinel-%d.log", p->port);
    th_track_file(p->conf);
    th_track_file(p->log);
    FILE *f = fopen(p->conf, "w");
    if (f == NULL)
        return -1;
    fprintf(f, "port %d\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir /tmp\n"
               "sentinel monitor %s 127.0.0.1 %d 2\n%s\n",
            p->port, name, master_port, extra ? extra : "");
    fclose(f);
    char *argv[] = { "redis-server", p->conf, "--sentinel", NULL };
    p->pid = spawn(argv, p->log);
    if (p->pid < 0 || wait_port(p->port, p->pid, 5000) < 0 || wait_pong(p->port, 5000) < 0) {
        print_log(p->log);
        if (p->pid > 0)
            th_stop(p);
        return -1;
    }
    return 0;
}

int th_sluice_start(struct th_proc *p, const char *ini, int wait)
{
    memset(p, 0, sizeof(*p));
    p->port = wait;
    static int seq;
    snprintf(p->conf, sizeof(p->conf), "/tmp/sluice-test-%d-%d.ini", (int)getpid(), ++seq);
    snprintf(p->log, sizeof(p->log), "/tmp/sluice-test-%d-%d.log", (int)getpid(), seq);
    th_track_file(p->conf);
    th_track_file(p->log);
    FILE *f = fopen(p->conf, "w");
    if (f == NULL)
        return -1;
    /* A test that says nothing of [sluice] gets no admin endpoint: the
     * default 127.0.0.1:9121 may be taken on a machine that runs other
     * things (another sluice), and the start would fail on it. */
    if (strstr(ini, "[sluice]") == NULL)
        fputs("[sluice]\nadmin =\n", f);
    fputs(ini, f);
    fclose(f);
    char *argv[] = { (char *)th_sluice_bin(), "-c", p->conf, "-v", "debug", NULL };
    p->pid = spawn(argv, p->log);
    if (p->pid < 0)
        return -1;
    if (wait > 0 && wait_port(wait, p->pid, 5000) < 0) {
        print_log(p->log);
        th_stop(p);
        return -1;
    }
    return 0;
}

int th_sluice_start_nofile(struct th_proc *p, const char *ini, int wait, long soft, long hard)
{
    spawn_nofile_soft = soft;
    spawn_nofile_hard = hard;
    int rc = th_sluice_start(p, ini, wait);
    spawn_nofile_soft = spawn_nofile_hard = -1;
    return rc;
}

int th_signal_wait(struct th_proc *p, int sig, int ms)
{
    if (p->pid <= 0)
        return -1;
    kill(p->pid, sig);
    uint64_t end = th_now_ms() + (uint64_t)ms;
    do {
        int st;
        if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
            untrack(p->pid);
            p->pid = 0;
            return st;
        }
        usleep(5000);
    } while (th_now_ms() < end);
    return -1;
}

int th_stop(struct th_proc *p)
{
    if (p->pid <= 0)
        return -1;
    int st = th_signal_wait(p, SIGTERM, 5000);
    if (st == 0 && getenv("TH_KEEP_LOGS") == NULL) {
        /* A clean exit: its files are of no more use. */
        unlink(p->log);
        if (p->conf[0] != '\0')
            unlink(p->conf);
    }
    if (st == -1) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, &st, 0);
        untrack(p->pid);
        p->pid = 0;
        print_log(p->log);
        return -1;
    }
    return st;
}

long th_rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

int th_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static size_t read_loop(int fd, char *buf, size_t len, int ms, int *eof)
{
    size_t got = 0;
    uint64_t end = th_now_ms() + (uint64_t)ms;
    *eof = 0;
    while (got < len) {
        uint64_t now = th_now_ms();
        if (now >= end)
            break;
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        int r = poll(&pfd, 1, (int)(end - now));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        ssize_t n = read(fd, buf + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            *eof = 1;
            break;
        }
        got += (size_t)n;
    }
    return got;
}

size_t th_read_n(int fd, void *buf, size_t len, int ms)
{
    int eof;
    return read_loop(fd, buf, len, ms, &eof);
}

size_t th_read_until_eof(int fd, void *buf, size_t cap, int ms, int *eof)
{
    size_t got = read_loop(fd, buf, cap, ms, eof);
    if (got == cap && !*eof) {
        /* Full: keep reading into a scratch buffer to see the EOF. */
        char scratch[4096];
        uint64_t end = th_now_ms() + (uint64_t)ms;
        while (!*eof && th_now_ms() < end)
            read_loop(fd, scratch, sizeof(scratch), (int)(end - th_now_ms()), eof);
    }
    return got;
}

int th_running(struct th_proc *p, int *status)
{
    if (p->pid <= 0)
        return 0;
    int st;
    pid_t r = waitpid(p->pid, &st, WNOHANG);
    if (r == 0)
        return 1;
    if (r == p->pid && status != NULL)
        *status = st;
    untrack(p->pid);
    p->pid = 0;
    return 0;
}

/* ---- forked servers ------------------------------------------------------- */

pid_t th_fork_server(int *port, th_serve_fn fn, void *arg)
{
    int lfd = -1;
    for (int tries = 0; tries < 20 && lfd < 0; tries++) {
        int p = th_free_port();
        lfd = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)p),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 64) < 0) {
            close(lfd);
            lfd = -1;
            continue;
        }
        *port = p;
    }
    if (lfd < 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(lfd);
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        signal(SIGPIPE, SIG_IGN);
        fn(lfd, arg);
        _exit(0);
    }
    setpgid(pid, pid); /* also here, so the group exists before we return */
    track(pid);
    close(lfd);
    return pid;
}

void th_kill_server(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    untrack(pid);
}

static void echo_conn(int fd)
{
    char buf[65536];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (th_write_all(fd, buf, (size_t)n) < 0)
            break;
    }
    close(fd);
}

void th_serve_echo(int lfd, void *arg)
{
    (void)arg;
    signal(SIGCHLD, SIG_IGN); /* connection processes reap themselves */
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            _exit(1);
        }
        pid_t c = fork();
        if (c == 0) {
            close(lfd);
            echo_conn(fd);
            _exit(0);
        }
        close(fd);
    }
}

/* ---- bytes ---------------------------------------------------------------- */

int th_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

void th_dump(const char *label, const void *p, size_t len)
{
    const unsigned char *s = p;
    fprintf(stderr, "%s (%zu bytes): \"", label, len);
    for (size_t i = 0; i < len && i < 400; i++) {
        if (s[i] == '\r')
            fputs("\\r", stderr);
        else if (s[i] == '\n')
            fputs("\\n", stderr);
        else if (s[i] < 32 || s[i] > 126)
            fprintf(stderr, "\\x%02x", s[i]);
        else
            fputc(s[i], stderr);
    }
    fprintf(stderr, "%s\"\n", len > 400 ? "..." : "");
}

int th_expect(int fd, const void *want, size_t len, int ms)
{
    char *got = malloc(len + 1);
    if (got == NULL)
        return -1;
    size_t n = th_read_n(fd, got, len, ms);
    int ok = n == len && memcmp(got, want, len) == 0;
    if (!ok) {
        th_dump("expected", want, len);
        th_dump("received", got, n);
    }
    free(got);
    return ok ? 0 : -1;
}

int th_expect_close(int fd, const void *want, size_t len, int ms)
{
    size_t cap = len + 4096;
    char *got = malloc(cap);
    if (got == NULL)
        return -1;
    int eof = 0;
    size_t n = th_read_until_eof(fd, got, cap, ms, &eof);
    int ok = eof && n == len && memcmp(got, want, len) == 0;
    if (!ok) {
        th_dump("expected (then EOF)", want, len);
        th_dump(eof ? "received (then EOF)" : "received (no EOF)", got, n);
    }
    free(got);
    return ok ? 0 : -1;
}

int th_quiet(int fd, int ms)
{
    uint64_t end = th_now_ms() + (uint64_t)ms;
    for (;;) {
        uint64_t now = th_now_ms();
        if (now >= end)
            return 1;
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        int r = poll(&pfd, 1, (int)(end - now));
        if (r < 0 && errno == EINTR)
            continue;
        return r == 0;
    }
}

int th_wait_eof(int fd, int ms)
{
    char c;
    int eof = 0;
    size_t n = th_read_until_eof(fd, &c, 1, ms, &eof);
    if (n > 0)
        th_dump("unexpected data before EOF", &c, 1);
    return n == 0 && eof;
}

static size_t crlf_at(const char *p, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++)
        if (p[i] == '\r' && p[i + 1] == '\n')
            return i;
    return SIZE_MAX;
}

static size_t resp_len(const char *p, size_t n, int depth)
{
    if (n == 0)
        return 0;
    if (depth > 64)
        return SIZE_MAX;
    size_t e = crlf_at(p, n);
    if (e == SIZE_MAX)
        return 0;
    size_t hdr = e + 2;
    char num[32];
    size_t nl = e - 1 < sizeof(num) - 1 ? e - 1 : sizeof(num) - 1;
    memcpy(num, p + 1, nl);
    num[nl] = '\0';
    long long v = strtoll(num, NULL, 10);
    switch (p[0]) {
    case '+': case '-': case ':': case '_': case ',': case '#': case '(':
        return hdr;
    case '$': case '!': case '=':
        if (v < 0)
            return hdr;
        return n < hdr + (size_t)v + 2 ? 0 : hdr + (size_t)v + 2;
    case '*': case '~': case '>': case '%': case '|': {
        if (v < 0)
            return hdr;
        size_t items = (size_t)v * (p[0] == '%' || p[0] == '|' ? 2 : 1);
        size_t off = hdr;
        for (size_t i = 0; i < items; i++) {
            size_t r = resp_len(p + off, n - off, depth + 1);
            if (r == 0 || r == SIZE_MAX)
                return r;
            off += r;
        }
        if (p[0] == '|') { /* an attribute precedes the value it describes */
            size_t r = resp_len(p + off, n - off, depth + 1);
            if (r == 0 || r == SIZE_MAX)
                return r;
            off += r;
        }
        return off;
    }
    default:
        return SIZE_MAX;
    }
}

size_t th_resp_len(const char *p, size_t n)
{
    return resp_len(p, n, 0);
}

int th_conn_open(struct th_conn *c, int port)
{
    memset(c, 0, sizeof(*c));
    c->fd = th_connect(port);
    if (c->fd < 0)
        return -1;
    c->cap = 65536;
    c->buf = malloc(c->cap);
    if (c->buf == NULL) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    return 0;
}

void th_conn_close(struct th_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    free(c->buf);
    c->buf = NULL;
    c->len = c->cap = 0;
}

int th_conn_send(struct th_conn *c, const char *s)
{
    return th_write_all(c->fd, s, strlen(s));
}

char *th_conn_reply(struct th_conn *c, int ms)
{
    uint64_t end = th_now_ms() + (uint64_t)ms;
    for (;;) {
        size_t r = th_resp_len(c->buf, c->len);
        if (r == SIZE_MAX) {
            th_dump("malformed reply", c->buf, c->len);
            return NULL;
        }
        if (r > 0) {
            char *out = malloc(r + 1);
            if (out == NULL)
                return NULL;
            memcpy(out, c->buf, r);
            out[r] = '\0';
            memmove(c->buf, c->buf + r, c->len - r);
            c->len -= r;
            return out;
        }
        if (c->len == c->cap) {
            char *nb = realloc(c->buf, c->cap * 2);
            if (nb == NULL)
                return NULL;
            c->buf = nb;
            c->cap *= 2;
        }
        uint64_t now = th_now_ms();
        if (now >= end)
            return NULL;
        struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
        int pr = poll(&pfd, 1, (int)(end - now));
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            return NULL;
        ssize_t n = read(c->fd, c->buf + c->len, c->cap - c->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return NULL;
        c->len += (size_t)n;
    }
}

char *th_transcript(int port, const void *in, size_t inlen, size_t *outlen, int ms, int *eof)
{
    int fd = th_connect(port);
    if (fd < 0)
        return NULL;
    size_t cap = 1 << 20;
    char *out = malloc(cap + 1);
    if (out == NULL || th_write_all(fd, in, inlen) < 0) {
        free(out);
        close(fd);
        return NULL;
    }
    *outlen = th_read_until_eof(fd, out, cap, ms, eof);
    out[*outlen] = '\0';
    close(fd);
    return out;
}

/* ---- logs and Redis ----------------------------------------------------- */

long th_redis_cmd_calls(int port, const char *cmd)
{
    redisContext *c = redisConnect("127.0.0.1", port);
    if (c == NULL || c->err) {
        if (c)
            redisFree(c);
        return -1;
    }
    long v = -1;
    redisReply *r = redisCommand(c, "INFO commandstats");
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        char key[64];
        snprintf(key, sizeof(key), "cmdstat_%s:calls=", cmd);
        char *s = strstr(r->str, key);
        v = s ? strtol(s + strlen(key), NULL, 10) : 0;
    }
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return v;
}

char *th_slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (cap - len < 4096) {
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, cap + 1);
            if (nb == NULL) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        if (n == 0)
            break;
        len += n;
    }
    fclose(f);
    buf[len] = '\0';
    return buf;
}

int th_log_count(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    int count = 0;
    char line[4096];
    while (fgets(line, sizeof(line), f))
        for (const char *s = line; (s = strstr(s, needle)) != NULL; s++)
            count++;
    fclose(f);
    return count;
}

int th_log_wait(const char *path, const char *needle, int n, int ms)
{
    uint64_t end = th_now_ms() + (uint64_t)ms;
    do {
        if (th_log_count(path, needle) >= n)
            return 0;
        usleep(10000);
    } while (th_now_ms() < end);
    return -1;
}

long th_redis_info(int port, const char *field)
{
    struct timeval tv = { 2, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c == NULL || c->err) {
        if (c)
            redisFree(c);
        return -1;
    }
    redisSetTimeout(c, tv);
    long v = -1;
    redisReply *r = redisCommand(c, "INFO");
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        size_t fl = strlen(field);
        for (const char *s = r->str; (s = strstr(s, field)) != NULL; s += fl) {
            if ((s == r->str || s[-1] == '\n') && s[fl] == ':') {
                v = strtol(s + fl + 1, NULL, 10);
                break;
            }
        }
    }
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return v;
}

int th_redis_wait_info(int port, const char *field, long want, int ms)
{
    uint64_t end = th_now_ms() + (uint64_t)ms;
    do {
        if (th_redis_info(port, field) == want)
            return 0;
        usleep(10000);
    } while (th_now_ms() < end);
    return -1;
}

int th_alive_or_report(struct th_proc *p)
{
    int st = 0;
    if (!th_running(p, &st)) {
        fprintf(stderr, "exited during the test (status %d), log %s\n", st, p->log);
        return -1;
    }
    return 0;
}

int th_pair_start(struct th_proc *redis, struct th_proc *sl, int *port, const char *listener_extra,
                  const char *redis_opt, const char *redis_val)
{
    /* a NULL <redis_opt> ends th_redis_start's list right there */
    if (th_redis_start(redis, redis_opt, redis_val, NULL) < 0)
        return -1;
    *port = th_free_port();
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin =\nshutdown_grace = 2s\n[store]\nurl = local\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n%s",
             *port, redis->port, listener_extra ? listener_extra : "");
    if (th_sluice_start(sl, ini, *port) < 0) {
        th_stop(redis);
        return -1;
    }
    return 0;
}

int th_pair_stop(struct th_proc *redis, struct th_proc *sl)
{
    int st = th_stop(sl);
    th_stop(redis);
    th_kill_all();
    if (st != 0) {
        fprintf(stderr, "sluice did not exit cleanly (status %d)\n", st);
        return -1;
    }
    return 0;
}

char *th_http_get(int port, const char *path)
{
    int fd = th_connect(port);
    if (fd < 0)
        return NULL;
    char req[256];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
    th_write_all(fd, req, (size_t)n);
    size_t cap = 1 << 20;
    char *buf = malloc(cap + 1);
    if (buf == NULL) {
        close(fd);
        return NULL;
    }
    int eof;
    size_t got = th_read_until_eof(fd, buf, cap, 3000, &eof);
    close(fd);
    buf[got] = '\0';
    char *body = strstr(buf, "\r\n\r\n");
    if (body == NULL) {
        free(buf);
        return NULL;
    }
    memmove(buf, body + 4, strlen(body + 4) + 1);
    return buf;
}

double th_json_num(const char *body, const char *within, const char *key)
{
    const char *from = within != NULL ? strstr(body, within) : body;
    char k[128];
    snprintf(k, sizeof(k), "\"%s\":", key);
    const char *p = from != NULL ? strstr(from, k) : NULL;
    return p != NULL ? strtod(p + strlen(k), NULL) : -1;
}

double th_metric(int port, const char *sample)
{
    char *body = th_http_get(port, "/metrics");
    if (body == NULL)
        return -1;
    double v = -1;
    size_t sl = strlen(sample);
    for (char *line = body; line != NULL && *line != '\0';) {
        if (strncmp(line, sample, sl) == 0 && line[sl] == ' ') {
            v = strtod(line + sl + 1, NULL);
            break;
        }
        line = strchr(line, '\n');
        if (line != NULL)
            line++;
    }
    free(body);
    return v;
}

/* ---- HTTP upstreams ------------------------------------------------------ */

/* SHA-256 (FIPS 180-4), small and slow enough: tests hash a few MiB. */
static const uint32_t sha_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha_block(struct th_sha256 *c, const unsigned char *b)
{
    uint32_t w[64], v[8];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)b[4 * i] << 24 | (uint32_t)b[4 * i + 1] << 16 | (uint32_t)b[4 * i + 2] << 8 |
               b[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    memcpy(v, c->h, sizeof(v));
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = v[7] + (ROR(v[4], 6) ^ ROR(v[4], 11) ^ ROR(v[4], 25)) +
                      ((v[4] & v[5]) ^ (~v[4] & v[6])) + sha_k[i] + w[i];
        uint32_t t2 = (ROR(v[0], 2) ^ ROR(v[0], 13) ^ ROR(v[0], 22)) +
                      ((v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]));
        memmove(v + 1, v, 7 * sizeof(uint32_t));
        v[4] += t1;
        v[0] = t1 + t2;
    }
    for (int i = 0; i < 8; i++)
        c->h[i] += v[i];
}

void th_sha256_init(struct th_sha256 *c)
{
    static const uint32_t h0[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
    memcpy(c->h, h0, sizeof(h0));
    c->len = 0;
    c->n = 0;
}

void th_sha256_update(struct th_sha256 *c, const void *p, size_t len)
{
    const unsigned char *s = p;
    c->len += len;
    while (len > 0) {
        size_t take = 64 - c->n < len ? 64 - c->n : len;
        memcpy(c->blk + c->n, s, take);
        c->n += take;
        s += take;
        len -= take;
        if (c->n == 64) {
            sha_block(c, c->blk);
            c->n = 0;
        }
    }
}

void th_sha256_final(struct th_sha256 *c, unsigned char out[32])
{
    uint64_t bits = c->len * 8;
    unsigned char pad = 0x80, zero = 0, lenb[8];
    th_sha256_update(c, &pad, 1);
    while (c->n != 56)
        th_sha256_update(c, &zero, 1);
    for (int i = 0; i < 8; i++)
        lenb[i] = (unsigned char)(bits >> (56 - 8 * i));
    th_sha256_update(c, lenb, 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (unsigned char)(c->h[i] >> 24);
        out[4 * i + 1] = (unsigned char)(c->h[i] >> 16);
        out[4 * i + 2] = (unsigned char)(c->h[i] >> 8);
        out[4 * i + 3] = (unsigned char)c->h[i];
    }
}

static void hex32(const unsigned char d[32], char hex[65])
{
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

void th_sha256_hex(const void *p, size_t len, char hex[65])
{
    struct th_sha256 c;
    unsigned char d[32];
    th_sha256_init(&c);
    th_sha256_update(&c, p, len);
    th_sha256_final(&c, d);
    hex32(d, hex);
}

void th_pattern(void *buf, size_t len, uint64_t off)
{
    unsigned char *b = buf;
    unsigned r = (unsigned)(off % 251);
    for (size_t i = 0; i < len; i++) {
        b[i] = (unsigned char)((r * 7 + 13) % 251);
        if (++r == 251)
            r = 0;
    }
}

static const char *nginx_bin(void)
{
    return access("/usr/sbin/nginx", X_OK) == 0 ? "/usr/sbin/nginx" : "nginx";
}

int th_nginx_start(struct th_nginx *n, uint64_t big_len)
{
    memset(n, 0, sizeof(*n));
    snprintf(n->dir, sizeof(n->dir), "/tmp/sluice-test-nginx-XXXXXX");
    if (mkdtemp(n->dir) == NULL)
        return -1;
    /* nginx's workers run as nobody when it starts as root: they must be
     * able to read the files */
    chmod(n->dir, 0755);
    char path[320];
    snprintf(path, sizeof(path), "%s/root", n->dir);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/tmp", n->dir);
    mkdir(path, 0777);
    /* /big.bin: the pattern, hashed as it is written */
    snprintf(path, sizeof(path), "%s/root/big.bin", n->dir);
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    struct th_sha256 sc;
    th_sha256_init(&sc);
    static unsigned char chunk[65536];
    for (uint64_t off = 0; off < big_len;) {
        size_t k = big_len - off < sizeof(chunk) ? (size_t)(big_len - off) : sizeof(chunk);
        th_pattern(chunk, k, off);
        th_sha256_update(&sc, chunk, k);
        fwrite(chunk, 1, k, f);
        off += k;
    }
    fclose(f);
    chmod(path, 0644);
    unsigned char d[32];
    th_sha256_final(&sc, d);
    hex32(d, n->big_sha256);
    n->big_len = big_len;

    n->proc.port = th_free_port();
    snprintf(n->access_log, sizeof(n->access_log), "%s/access.log", n->dir);
    snprintf(n->proc.conf, sizeof(n->proc.conf), "%s/nginx.conf", n->dir);
    snprintf(n->proc.log, sizeof(n->proc.log), "%s/stderr.log", n->dir);
    f = fopen(n->proc.conf, "w");
    if (f == NULL)
        return -1;
    fprintf(f,
            "worker_processes 1;\n"
            "pid %s/nginx.pid;\n"
            "error_log %s/error.log info;\n"
            "events { worker_connections 1024; }\n"
            "http {\n"
            "    log_format conn '$connection $connection_requests $status \"$request\"';\n"
            "    access_log %s conn;\n"
            "    client_body_temp_path %s/tmp/body;\n"
            "    proxy_temp_path %s/tmp/proxy;\n"
            "    keepalive_timeout 60s;\n"
            "    keepalive_requests 100000;\n"
            "    sendfile on;\n"
            "    server {\n"
            "        listen 127.0.0.1:%d;\n"
            "        root %s/root;\n"
            "        location = /small { default_type text/plain; return 200 \"hello from nginx\\n\"; }\n"
            "        location / { }\n"
            "    }\n"
            "}\n",
            n->dir, n->dir, n->access_log, n->dir, n->dir, n->proc.port, n->dir);
    fclose(f);
    char early_log[192];
    snprintf(early_log, sizeof(early_log), "%s/error.log", n->dir);
    char *argv[] = { (char *)nginx_bin(), "-p", n->dir, "-e", early_log, "-c", n->proc.conf,
                     "-g", "daemon off;", NULL };
    n->proc.pid = spawn(argv, n->proc.log);
    if (n->proc.pid < 0 || wait_port(n->proc.port, n->proc.pid, 5000) < 0) {
        fprintf(stderr, "nginx did not start (is it installed? `make deps` installs nginx-light)\n");
        print_log(n->proc.log);
        print_log(early_log);
        th_nginx_stop(n);
        return -1;
    }
    return 0;
}

void th_nginx_stop(struct th_nginx *n)
{
    if (n->proc.pid > 0) {
        /* nginx's master stops its workers on SIGTERM; its whole group is
         * killed if it does not. */
        if (th_signal_wait(&n->proc, SIGTERM, 5000) == -1) {
            kill(-n->proc.pid, SIGKILL);
            kill(n->proc.pid, SIGKILL);
            waitpid(n->proc.pid, NULL, 0);
            untrack(n->proc.pid);
            n->proc.pid = 0;
        }
    }
    if (n->dir[0] != '\0' && getenv("TH_KEEP_LOGS") == NULL) {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", n->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", n->dir);
    }
    n->dir[0] = '\0';
}

int th_nginx_requests(const struct th_nginx *n, int skip, int *conns)
{
    FILE *f = fopen(n->access_log, "r");
    if (f == NULL)
        return -1;
    /* connection serials: few per test, a linear set is plenty */
    long seen[1024];
    int nseen = 0, requests = 0, lineno = 0;
    char line[1024];
    while (fgets(line, sizeof(line), f)) {
        if (lineno++ < skip)
            continue;
        long c = strtol(line, NULL, 10);
        requests++;
        int dup = 0;
        for (int i = 0; i < nseen && !dup; i++)
            dup = seen[i] == c;
        if (!dup && nseen < 1024)
            seen[nseen++] = c;
    }
    fclose(f);
    if (conns != NULL)
        *conns = nseen;
    return requests;
}

int th_pyup_start(struct th_proc *p)
{
    memset(p, 0, sizeof(*p));
    p->port = th_free_port();
    char port[16];
    snprintf(port, sizeof(port), "%d", p->port);
    snprintf(p->log, sizeof(p->log), "/tmp/sluice-test-pyup-%d.log", p->port);
    th_track_file(p->log);
    char *argv[] = { "python3", "-u", "tests/integration/http_upstream.py", port, NULL };
    p->pid = spawn(argv, p->log);
    char want[32];
    snprintf(want, sizeof(want), "listening %d", p->port);
    if (p->pid < 0 || th_log_wait(p->log, want, 1, 10000) < 0) {
        fprintf(stderr, "the Python upstream did not start\n");
        print_log(p->log);
        th_stop(p);
        return -1;
    }
    return 0;
}

int th_pyup_stats(int port, struct th_pyup_stats *st)
{
    char *body = th_http_get(port, "/__stats");
    if (body == NULL)
        return -1;
    const char *keys[4] = { "\"connections\":", "\"heads\":", "\"requests\":", "\"bytes\":" };
    long *vals[4] = { &st->connections, &st->heads, &st->requests, &st->bytes };
    int rc = 0;
    for (int i = 0; i < 4; i++) {
        char *at = strstr(body, keys[i]);
        if (at == NULL)
            rc = -1;
        else
            *vals[i] = strtol(at + strlen(keys[i]), NULL, 10);
    }
    if (rc < 0)
        th_dump("/__stats", body, strlen(body));
    free(body);
    return rc;
}

/* ---- Redis Cluster -------------------------------------------------------- */

char *th_redis_cmd(int port, const char *cmd)
{
    struct th_conn c;
    if (th_conn_open(&c, port) < 0)
        return NULL;
    char line[1024];
    snprintf(line, sizeof(line), "%s\r\n", cmd);
    char *reply = NULL;
    if (th_conn_send(&c, line) == 0)
        reply = th_conn_reply(&c, TH_MS);
    th_conn_close(&c);
    return reply;
}

long th_redis_dbsize(int port)
{
    char *r = th_redis_cmd(port, "DBSIZE");
    long n = r != NULL && r[0] == ':' ? strtol(r + 1, NULL, 10) : -1;
    free(r);
    return n;
}

void th_cluster_url(const struct th_cluster *c, char *buf, size_t cap)
{
    size_t len = (size_t)snprintf(buf, cap, "redis-cluster://");
    const char *sep = "";
    for (int i = 0; i < TH_CLUSTER_NODES && len < cap; i++) {
        if (c->node[i].pid <= 0)
            continue;
        len += (size_t)snprintf(buf + len, cap - len, "%s127.0.0.1:%d", sep, c->node[i].port);
        sep = ",";
    }
}

/* The CLUSTER NODES text of the first running node that answers (malloc'd). */
static char *cluster_nodes(const struct th_cluster *c)
{
    for (int i = 0; i < TH_CLUSTER_NODES; i++) {
        if (c->node[i].pid <= 0)
            continue;
        char *r = th_redis_cmd(c->node[i].port, "CLUSTER NODES");
        if (r != NULL && r[0] == '$')
            return r;
        free(r);
    }
    return NULL;
}

static int index_of_port(const struct th_cluster *c, int port)
{
    for (int i = 0; i < TH_CLUSTER_NODES; i++)
        if (c->node[i].pid > 0 && c->node[i].port == port)
            return i;
    return -1;
}

int th_cluster_master_of(const struct th_cluster *c, unsigned slot)
{
    char *text = cluster_nodes(c);
    if (text == NULL)
        return -1;
    int found = -1;
    char *save = NULL;
    for (char *line = strtok_r(strchr(text, '\n') + 1, "\n", &save); line != NULL && found < 0;
         line = strtok_r(NULL, "\n", &save)) {
        /* <id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <link> <slot>... */
        char *f[64];
        int n = 0;
        char *s2 = NULL;
        for (char *w = strtok_r(line, " \r", &s2); w != NULL && n < 64; w = strtok_r(NULL, " \r", &s2))
            f[n++] = w;
        if (n < 8 || strstr(f[2], "master") == NULL || strstr(f[2], "fail") != NULL)
            continue;
        for (int k = 8; k < n; k++) {
            unsigned a, b;
            if (f[k][0] == '[')
                continue;
            if (sscanf(f[k], "%u-%u", &a, &b) != 2) {
                if (sscanf(f[k], "%u", &a) != 1)
                    continue;
                b = a;
            }
            if (slot >= a && slot <= b) {
                char *colon = strchr(f[1], ':');
                found = colon ? index_of_port(c, atoi(colon + 1)) : -1;
                break;
            }
        }
    }
    free(text);
    return found;
}

int th_cluster_is_master(const struct th_cluster *c, int i)
{
    char *r = th_redis_cmd(c->node[i].port, "CLUSTER NODES");
    int yes = r != NULL && strstr(r, "myself,master") != NULL;
    free(r);
    return yes;
}

int th_cluster_wait_ok(struct th_cluster *c, int ms)
{
    uint64_t end = th_now_ms() + (uint64_t)ms;
    while (th_now_ms() < end) {
        int ok = 1;
        for (int i = 0; i < TH_CLUSTER_NODES && ok; i++) {
            if (c->node[i].pid <= 0)
                continue;
            char *r = th_redis_cmd(c->node[i].port, "CLUSTER INFO");
            ok = r != NULL && strstr(r, "cluster_state:ok") != NULL;
            free(r);
        }
        /* every slot's master runs (a dead master may still be named ok
         * for a moment by nodes that have not marked it failed yet) */
        for (unsigned s = 0; s < 16384 && ok; s += 5461)
            ok = th_cluster_master_of(c, s) >= 0;
        if (ok)
            return 0;
        usleep(50000);
    }
    return -1;
}

int th_cluster_start(struct th_cluster *c)
{
    memset(c, 0, sizeof(*c));
    char cmd[2048];
    int len = snprintf(cmd, sizeof(cmd), "timeout 60 redis-cli --cluster create");
    for (int i = 0; i < TH_CLUSTER_NODES; i++) {
        /* The bus port is named: port + 10000 may be past 65535. */
        char bus[16];
        snprintf(bus, sizeof(bus), "%d", th_free_port());
        snprintf(c->nodes_conf[i], sizeof(c->nodes_conf[i]), "/tmp/sluice-test-nodes-%d-%d.conf",
                 (int)getpid(), i);
        unlink(c->nodes_conf[i]);
        th_track_file(c->nodes_conf[i]);
        /* A replica's full sync writes an RDB even with --save "": not in the
         * working directory, one file per node. */
        char rdb[64];
        snprintf(rdb, sizeof(rdb), "sluice-test-dump-%d-%d.rdb", (int)getpid(), i);
        snprintf(c->rdb[i], sizeof(c->rdb[i]), "/tmp/%s", rdb);
        th_track_file(c->rdb[i]);
        if (th_redis_start(&c->node[i], "--cluster-enabled", "yes", "--cluster-node-timeout",
                           "1000", "--cluster-config-file", c->nodes_conf[i], "--cluster-port", bus,
                           "--dir", "/tmp", "--dbfilename", rdb, (char *)NULL) < 0) {
            fprintf(stderr, "th_cluster_start: node %d did not start\n", i);
            th_cluster_stop(c);
            return -1;
        }
        len += snprintf(cmd + len, sizeof(cmd) - (size_t)len, " 127.0.0.1:%d", c->node[i].port);
    }
    char log[128];
    snprintf(log, sizeof(log), "/tmp/sluice-test-cluster-create-%d.log", (int)getpid());
    th_track_file(log);
    snprintf(cmd + len, sizeof(cmd) - (size_t)len, " --cluster-replicas 1 --cluster-yes >%s 2>&1",
             log);
    if (system(cmd) != 0 || th_cluster_wait_ok(c, 20000) < 0) {
        fprintf(stderr, "th_cluster_start: the cluster did not form (%s)\n", log);
        print_log(log);
        th_cluster_stop(c);
        return -1;
    }
    /* Replicas in sync: a failover then loses nothing acknowledged before. */
    uint64_t end = th_now_ms() + 15000;
    for (int i = 0; i < TH_CLUSTER_NODES; i++) {
        while (!th_cluster_is_master(c, i)) {
            char *r = th_redis_cmd(c->node[i].port, "INFO replication");
            int up = r != NULL && strstr(r, "master_link_status:up") != NULL;
            free(r);
            if (up)
                break;
            if (th_now_ms() > end) {
                fprintf(stderr, "th_cluster_start: replica %d not in sync\n", i);
                th_cluster_stop(c);
                return -1;
            }
            usleep(50000);
        }
    }
    return 0;
}

void th_cluster_stop(struct th_cluster *c)
{
    for (int i = 0; i < TH_CLUSTER_NODES; i++)
        if (c->node[i].pid > 0)
            th_stop(&c->node[i]);
}

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

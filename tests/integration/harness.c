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
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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
        for (int i = 0; i < nused; i++)
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

static pid_t spawn(char *const argv[], const char *log)
{
    pid_t pid = fork();
    if (pid == 0) {
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

int th_signal_wait(struct th_proc *p, int sig, int ms)
{
    if (p->pid <= 0)
        return -1;
    kill(p->pid, sig);
    uint64_t end = th_now_ms() + (uint64_t)ms;
    do {
        int st;
        if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
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
    if (st == -1) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, &st, 0);
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

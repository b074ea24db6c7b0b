/*
 * idle — open N client connections and keep them idle.
 *
 *   idle HOST PORT N [ping|get]
 *
 * Connects N TCP sockets to HOST:PORT (raising RLIMIT_NOFILE as needed). With
 * `ping`, sends one RESP PING on each and waits for each +PONG, so that a proxy
 * surely holds an established upstream connection for every client. Then prints
 * "ready N" on stdout and holds the connections until SIGTERM/SIGINT (or until
 * stdin reaches EOF, when stdin is not a terminal and is not /dev/null).
 *
 * With `get`, each connection sends one GET of a key that does not exist and
 * expects the nil reply ($-1); a connection that fails (refused, reset, an
 * error reply such as Redis's "max number of clients reached", no answer in
 * 10 s) is counted instead of ending the run. It prints
 * "ready N ok K failed F" (the first failure's reason on stderr) and holds
 * the connections that are left open, as above: a fan-in test.
 *
 * Exit status: 0 after a clean stop, 1 on any error (message on stderr).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BATCH 500 /* connections in flight at once (keeps listen backlogs happy) */
#define PING "*1\r\n$4\r\nPING\r\n"
#define PONG "+PONG\r\n"
#define GET "*2\r\n$3\r\nGET\r\n$24\r\nsluice:bench:no-such-key\r\n"
#define NIL "$-1\r\n"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static void die(const char *what)
{
    fprintf(stderr, "idle: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void raise_nofile(long n)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return;
    rlim_t want = (rlim_t)n + 64;
    if (rl.rlim_cur >= want)
        return;
    if (rl.rlim_max < want) {
        rl.rlim_max = want; /* works as root */
    }
    rl.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
        getrlimit(RLIMIT_NOFILE, &rl);
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* Reads exactly len bytes of the expected reply from fd, with a deadline. */
static int expect(int fd, const char *want, size_t len, int timeout_ms)
{
    char got[64];
    size_t have = 0;
    while (have < len) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, timeout_ms);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        ssize_t n = read(fd, got + have, len - have);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (n == 0) {
            errno = ECONNRESET;
            return -1;
        }
        have += (size_t)n;
    }
    if (memcmp(got, want, len) != 0) {
        errno = EPROTO;
        return -1;
    }
    return 0;
}

/* get mode: one connection failed; counted, its reason told once, closed. */
static void fail_one(int *fd, long *failed, long i, const char *what)
{
    if (*failed == 0)
        fprintf(stderr, "idle: connection %ld: %s: %s (first failure)\n", i, what, strerror(errno));
    (*failed)++;
    close(*fd);
    *fd = -1;
}

int main(int argc, char **argv)
{
    if (argc < 4 || argc > 5 || (argc == 5 && strcmp(argv[4], "ping") && strcmp(argv[4], "get"))) {
        fprintf(stderr, "usage: idle HOST PORT N [ping|get]\n");
        return 2;
    }
    const char *host = argv[1];
    int port = atoi(argv[2]);
    long n = atol(argv[3]);
    int ping = argc == 5 && !strcmp(argv[4], "ping");
    int get = argc == 5 && !strcmp(argv[4], "get");
    long ok = 0, failed = 0;
    if (n <= 0)
        return 2;

    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    raise_nofile(n);

    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "idle: bad address %s\n", host);
        return 1;
    }

    int *fds = calloc((size_t)n, sizeof *fds);
    if (!fds)
        die("calloc");
    for (long base = 0; base < n && !stop; base += BATCH) {
        long end = base + BATCH < n ? base + BATCH : n;
        for (long i = base; i < end; i++) {
            fds[i] = socket(AF_INET, SOCK_STREAM, 0);
            if (fds[i] < 0)
                die("socket");
            if (get) {
                if (connect(fds[i], (struct sockaddr *)&addr, sizeof addr) < 0 ||
                    write(fds[i], GET, sizeof GET - 1) != (ssize_t)(sizeof GET - 1))
                    fail_one(&fds[i], &failed, i, "connect/write");
                continue;
            }
            if (connect(fds[i], (struct sockaddr *)&addr, sizeof addr) < 0) {
                fprintf(stderr, "idle: connection %ld: ", i);
                die("connect");
            }
            if (ping && write(fds[i], PING, sizeof PING - 1) != (ssize_t)(sizeof PING - 1)) {
                fprintf(stderr, "idle: connection %ld: ", i);
                die("write");
            }
        }
        if (get) {
            for (long i = base; i < end; i++) {
                if (fds[i] < 0)
                    continue;
                if (expect(fds[i], NIL, sizeof NIL - 1, 10000) < 0)
                    fail_one(&fds[i], &failed, i, "waiting for $-1");
                else
                    ok++;
            }
        }
        if (ping) {
            for (long i = base; i < end; i++) {
                if (expect(fds[i], PONG, sizeof PONG - 1, 10000) < 0) {
                    fprintf(stderr, "idle: connection %ld: ", i);
                    die("waiting for +PONG");
                }
            }
        }
    }
    if (stop)
        return 1;

    if (get)
        printf("ready %ld ok %ld failed %ld\n", n, ok, failed);
    else
        printf("ready %ld\n", n);
    fflush(stdout);

    /* Hold until a signal, or until stdin closes when it is a pipe/fifo. */
    struct stat st;
    int watch_stdin = fstat(0, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode));
    while (!stop) {
        if (watch_stdin) {
            struct pollfd p = {.fd = 0, .events = POLLIN};
            int r = poll(&p, 1, 1000);
            if (r > 0) {
                char c[256];
                ssize_t k = read(0, c, sizeof c);
                if (k <= 0)
                    break;
            }
        } else {
            pause();
        }
    }
    for (long i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(fds);
    return 0;
}

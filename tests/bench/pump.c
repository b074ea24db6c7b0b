/*
 * pump — a TCP byte source and sink for the throughput benchmark.
 *
 *   pump sink [PORT]              listen on 127.0.0.1:PORT (0/none = ephemeral),
 *                                 print the port on stdout, then serve connections
 *                                 one after another: read and discard until EOF,
 *                                 close, print the byte count received on its own
 *                                 line. Runs until killed.
 *   pump send HOST PORT BYTES     connect, write BYTES as fast as possible, half-close,
 *                                 wait until the peer closes (every byte went through),
 *                                 print "BYTES SECONDS MB/s" (MB = 10^6 bytes), timed
 *                                 from the first write to the peer's close.
 *   pump source [PORT] BYTES      like sink, but writes BYTES to each connection, then closes.
 *   pump recv HOST PORT           connect, read until EOF, print "BYTES SECONDS MB/s",
 *                                 timed from the first byte received to EOF.
 *
 * Exit status: 0 on success, 1 on any error (message on stderr).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BUF_SIZE (256 * 1024)

static char buf[BUF_SIZE];

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
    fprintf(stderr, "pump: %s: %s\n", what, strerror(errno));
    exit(1);
}

static int listen_on(int port)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    int one = 1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        die("socket");
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
        die("bind");
    if (listen(fd, 64) < 0)
        die("listen");
    if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
        die("getsockname");
    printf("%d\n", ntohs(sa.sin_port));
    fflush(stdout);
    return fd;
}

static int connect_to(const char *host, int port)
{
    struct sockaddr_in sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        die("socket");
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "pump: bad address %s\n", host);
        exit(1);
    }
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
        die("connect");
    return fd;
}

static void write_all(int fd, unsigned long long total)
{
    while (total > 0) {
        size_t n = total < BUF_SIZE ? (size_t)total : BUF_SIZE;
        ssize_t w = write(fd, buf, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            die("write");
        }
        total -= (unsigned long long)w;
    }
}

static unsigned long long drain(int fd, double *first)
{
    unsigned long long total = 0;
    for (;;) {
        ssize_t r = read(fd, buf, BUF_SIZE);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == ECONNRESET)
                break;
            die("read");
        }
        if (r == 0)
            break;
        if (total == 0 && first)
            *first = now();
        total += (unsigned long long)r;
    }
    return total;
}

static void report(unsigned long long bytes, double secs)
{
    if (secs <= 0)
        secs = 1e-9;
    printf("%llu %.6f %.1f\n", bytes, secs, (double)bytes / secs / 1e6);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (char)('a' + i % 26);

    if (argc >= 2 && (!strcmp(argv[1], "sink") || !strcmp(argv[1], "source"))) {
        int is_source = !strcmp(argv[1], "source");
        int port = 0;
        unsigned long long bytes = 0;
        if (is_source) {
            if (argc < 3)
                goto usage;
            if (argc >= 4) {
                port = atoi(argv[2]);
                bytes = strtoull(argv[3], NULL, 10);
            } else {
                bytes = strtoull(argv[2], NULL, 10);
            }
        } else if (argc >= 3) {
            port = atoi(argv[2]);
        }
        int lfd = listen_on(port);
        for (;;) {
            int fd = accept(lfd, NULL, NULL);
            if (fd < 0) {
                if (errno == EINTR || errno == ECONNABORTED)
                    continue;
                die("accept");
            }
            if (is_source) {
                write_all(fd, bytes);
                shutdown(fd, SHUT_WR);
            }
            unsigned long long got = drain(fd, NULL);
            close(fd);
            if (!is_source) {
                /* one line per connection: how many bytes arrived */
                printf("%llu\n", got);
                fflush(stdout);
            }
        }
    }
    if (argc == 5 && !strcmp(argv[1], "send")) {
        unsigned long long bytes = strtoull(argv[4], NULL, 10);
        int fd = connect_to(argv[2], atoi(argv[3]));
        double t0 = now();
        write_all(fd, bytes);
        if (shutdown(fd, SHUT_WR) < 0)
            die("shutdown");
        drain(fd, NULL); /* the sink closes once it has read everything */
        double t1 = now();
        close(fd);
        report(bytes, t1 - t0);
        return 0;
    }
    if (argc == 4 && !strcmp(argv[1], "recv")) {
        int fd = connect_to(argv[2], atoi(argv[3]));
        double t0 = now();
        unsigned long long got = drain(fd, &t0);
        double t1 = now();
        close(fd);
        report(got, t1 - t0);
        return 0;
    }
usage:
    fprintf(stderr,
            "usage: pump sink [PORT] | pump source [PORT] BYTES |\n"
            "       pump send HOST PORT BYTES | pump recv HOST PORT\n");
    return 2;
}

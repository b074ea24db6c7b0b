/*
 * relay — the least a 1:1 TCP proxy can do, as a floor for the benchmark.
 *
 *   relay LISTEN_PORT UPSTREAM_PORT PROCESSES
 *
 * Listens on 127.0.0.1:LISTEN_PORT in PROCESSES processes (SO_REUSEPORT, one
 * epoll loop each, no threads). Each accepted client gets its own connection
 * to 127.0.0.1:UPSTREAM_PORT; bytes are read and written on, nothing else:
 * no parsing, no counting, no timers, no allocation after the accept. A write
 * that does not take everything parks the rest, stops reading the source and
 * waits for the destination to drain (the only epoll_ctl after the accept).
 *
 * RELAY_EPOLLET=1 in the environment registers the sockets edge-triggered
 * (EPOLLET, as nginx does) instead of level-triggered (as libuv, and so
 * sluice, does): a read then repeats until it comes back short, since no
 * other event would come for what is left. It measures what level-triggered
 * epoll costs a relay (docs/benchmarks.md, "1:1 -P 16 against nginx
 * stream"); make bench runs the default.
 *
 * It answers one question in `make bench`: how fast is a 1:1 proxy on this
 * machine when it does nothing but relay? The gap between it and Redis
 * directly is what the kernel charges for the extra hop; the gap between it
 * and sluice is what sluice's own work costs.
 *
 * The parent forwards SIGTERM/SIGINT to the children; children exit when the
 * parent dies. Exit status 1 on a setup error (message on stderr).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define BUF_SIZE (16 * 1024)
#define MAX_EVENTS 256

/* One direction: bytes read from fd[src] waiting to be written to fd[!src]. */
struct half {
    uint32_t off, len;
    char buf[BUF_SIZE];
};

struct pair {
    int fd[2]; /* 0: client, 1: upstream */
    int dead;
    struct pair *next_dead;
    struct half h[2]; /* h[d]: read from fd[d] */
};

static int ep;
static uint32_t et; /* EPOLLET or 0 */
static int upstream_port;
static struct pair *dead_list;

static void die(const char *what)
{
    fprintf(stderr, "relay: %s: %s\n", what, strerror(errno));
    exit(1);
}

static struct sockaddr_in loopback(int port)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return sa;
}

/* epoll data: the pair's address with the side in bit 0; NULL = listener */
static void watch(struct pair *p, int d, int op, uint32_t events)
{
    struct epoll_event ev = {.events = events | et, .data.u64 = (uint64_t)(uintptr_t)p | (uint64_t)d};
    if (epoll_ctl(ep, op, p->fd[d], &ev) < 0)
        die("epoll_ctl");
}

static void kill_pair(struct pair *p)
{
    if (p->dead)
        return;
    p->dead = 1;
    close(p->fd[0]);
    close(p->fd[1]);
    /* freed after this batch of events: later events may still name it */
    p->next_dead = dead_list;
    dead_list = p;
}

static void accept_one(int lfd)
{
    int one = 1;
    int cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
    if (cfd < 0)
        return;
    int ufd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = loopback(upstream_port);
    /* A blocking connect: loopback answers at once, and it keeps this short. */
    if (ufd < 0 || connect(ufd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(cfd);
        if (ufd >= 0)
            close(ufd);
        return;
    }
    if (fcntl(ufd, F_SETFL, fcntl(ufd, F_GETFL) | O_NONBLOCK) < 0) {
        close(cfd);
        close(ufd);
        return;
    }
    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(ufd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct pair *p = calloc(1, sizeof *p);
    if (p == NULL) {
        close(cfd);
        close(ufd);
        return;
    }
    p->fd[0] = cfd;
    p->fd[1] = ufd;
    watch(p, 0, EPOLL_CTL_ADD, EPOLLIN);
    watch(p, 1, EPOLL_CTL_ADD, EPOLLIN);
}

/* Writes what side <d> has parked to the other side. Returns 1 when all of
 * it went, 0 when some is left (EAGAIN), -1 on error. */
static int flush(struct pair *p, int d)
{
    struct half *h = &p->h[d];
    while (h->off < h->len) {
        ssize_t n = write(p->fd[!d], h->buf + h->off, h->len - h->off);
        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -1;
        h->off += (uint32_t)n;
    }
    h->off = h->len = 0;
    return 1;
}

/* fd[d] is readable: read once and write it on (edge-triggered: again
 * while a read fills the buffer). */
static void relay_in(struct pair *p, int d)
{
    struct half *h = &p->h[d];
    ssize_t n;
    do {
        n = read(p->fd[d], h->buf, BUF_SIZE);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            kill_pair(p);
            return;
        }
        if (n < 0)
            return;
        h->off = 0;
        h->len = (uint32_t)n;
        int rc = flush(p, d);
        if (rc < 0) {
            kill_pair(p);
            return;
        }
        if (rc == 0) {
            /* the destination is full: stop reading here until it drains
             * (a MOD looks at the socket again: no edge is lost) */
            watch(p, d, EPOLL_CTL_MOD, 0);
            watch(p, !d, EPOLL_CTL_MOD, EPOLLIN | EPOLLOUT);
            return;
        }
    } while (et && n == BUF_SIZE);
}

/* fd[d] is writable again: finish what the other side parked. */
static void relay_out(struct pair *p, int d)
{
    int rc = flush(p, !d);
    if (rc < 0) {
        kill_pair(p);
    } else if (rc == 1) {
        watch(p, d, EPOLL_CTL_MOD, EPOLLIN);
        watch(p, !d, EPOLL_CTL_MOD, EPOLLIN);
    }
}

static void serve(int port)
{
    int one = 1;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in sa = loopback(port);
    if (lfd < 0)
        die("socket");
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(lfd, 1024) < 0)
        die("bind/listen");
    ep = epoll_create1(0);
    if (ep < 0)
        die("epoll_create1");
    struct epoll_event lev = {.events = EPOLLIN, .data.u64 = 0};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev) < 0)
        die("epoll_ctl");

    struct epoll_event evs[MAX_EVENTS];
    for (;;) {
        int n = epoll_wait(ep, evs, MAX_EVENTS, -1);
        if (n < 0 && errno != EINTR)
            die("epoll_wait");
        for (int i = 0; i < n; i++) {
            uint64_t u = evs[i].data.u64;
            if (u == 0) {
                accept_one(lfd);
                continue;
            }
            struct pair *p = (struct pair *)(uintptr_t)(u & ~(uint64_t)1);
            int d = (int)(u & 1);
            if (p->dead)
                continue;
            if (evs[i].events & EPOLLOUT)
                relay_out(p, d);
            if (p->dead)
                continue;
            if (p->h[d].len != 0) {
                /* parked: only a hang-up can come here; nothing will drain */
                if (evs[i].events & (EPOLLHUP | EPOLLERR))
                    kill_pair(p);
            } else if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                relay_in(p, d);
            }
        }
        while (dead_list != NULL) {
            struct pair *p = dead_list;
            dead_list = p->next_dead;
            free(p);
        }
    }
}

static pid_t kids[64];
static int nkids;

static void on_signal(int sig)
{
    for (int i = 0; i < nkids; i++)
        kill(kids[i], sig);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: relay LISTEN_PORT UPSTREAM_PORT PROCESSES\n");
        return 1;
    }
    int port = atoi(argv[1]);
    int procs = atoi(argv[3]);
    upstream_port = atoi(argv[2]);
    if (port <= 0 || upstream_port <= 0 || procs <= 0 || procs > 64) {
        fprintf(stderr, "relay: bad arguments\n");
        return 1;
    }
    if (getenv("RELAY_EPOLLET") != NULL && strcmp(getenv("RELAY_EPOLLET"), "1") == 0)
        et = EPOLLET;
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    for (int i = 0; i < procs; i++) {
        pid_t pid = fork();
        if (pid < 0)
            die("fork");
        if (pid == 0) {
            signal(SIGTERM, SIG_DFL);
            signal(SIGINT, SIG_DFL);
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() == 1)
                exit(0);
            serve(port);
        }
        kids[nkids++] = pid;
    }
    int status, failed = 0;
    while (wait(&status) > 0)
        if (!WIFSIGNALED(status) && WEXITSTATUS(status) != 0)
            failed = 1;
    return failed;
}

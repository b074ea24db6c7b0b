/*
 * idle_tls — open N TLS client connections and keep them idle.
 *
 *   idle_tls HOST PORT N CAFILE
 *
 * Connects N TCP sockets to HOST:PORT (raising RLIMIT_NOFILE as needed), does
 * a TLS handshake on each (verifying the server against CAFILE), sends one
 * RESP PING through it and waits for +PONG, so a proxy surely holds an
 * established TLS upstream connection for every client. Then prints
 * "ready N" on stdout and holds the connections until SIGTERM/SIGINT.
 *
 * Exit status: 0 after a clean stop, 1 on any error (message on stderr).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

static volatile sig_atomic_t done;

static void on_signal(int sig)
{
    (void)sig;
    done = 1;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: idle_tls HOST PORT N CAFILE\n");
        return 1;
    }
    int n = atoi(argv[3]);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)n + 64) {
        rl.rlim_cur = (rlim_t)n + 64 > rl.rlim_max ? rl.rlim_max : (rlim_t)n + 64;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL || SSL_CTX_load_verify_locations(ctx, argv[4], NULL) != 1) {
        fprintf(stderr, "idle_tls: cannot load %s\n", argv[4]);
        return 1;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
    inet_pton(AF_INET, argv[1], &sa.sin_addr);
    SSL **conns = calloc((size_t)n, sizeof(*conns));
    for (int i = 0; i < n; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
            fprintf(stderr, "idle_tls: connect %d: %m\n", i);
            return 1;
        }
        SSL *s = SSL_new(ctx);
        SSL_set_fd(s, fd);
        SSL_set_tlsext_host_name(s, "localhost");
        SSL_set1_host(s, "localhost");
        char pong[8];
        if (SSL_connect(s) != 1 || SSL_write(s, "PING\r\n", 6) != 6 ||
            SSL_read(s, pong, sizeof(pong)) < 5 || memcmp(pong, "+PONG", 5) != 0) {
            fprintf(stderr, "idle_tls: connection %d: handshake or PING failed\n", i);
            ERR_print_errors_fp(stderr);
            return 1;
        }
        conns[i] = s;
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    printf("ready %d\n", n);
    fflush(stdout);
    while (!done)
        pause();
    for (int i = 0; i < n; i++) {
        close(SSL_get_fd(conns[i]));
        SSL_free(conns[i]);
    }
    free(conns);
    SSL_CTX_free(ctx);
    return 0;
}

/* framer_bench — ns per request of the RESP request framer, run by hand.
 *
 *   gcc -std=gnu11 -O2 -D_GNU_SOURCE -Isrc $(pkg-config --cflags hiredis) \
 *       -o /tmp/framer_bench tests/bench/framer_bench.c src/proto/resp.c src/core/err.c \
 *       $(pkg-config --libs hiredis libuv)
 *   /tmp/framer_bench [ITERATIONS [CASE-NAME-PREFIX]]
 *
 * Each case feeds one read holding a pipeline (as one uv read callback would)
 * and calls sl_resp_next until it returns 0, over and over on one state. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto/resp.h"

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* <n> requests alternating SET key:NNNNNNNNNNNN xxx / GET key:NNNNNNNNNNNN. */
static size_t build(char *buf, size_t cap, int n, int is_inline)
{
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof(key), "key:%012d", i * 7919 % 100000);
        if (is_inline)
            len += (size_t)snprintf(buf + len, cap - len, i % 2 ? "GET %s\r\n" : "SET %s xxx\r\n", key);
        else if (i % 2)
            len += (size_t)snprintf(buf + len, cap - len, "*2\r\n$3\r\nGET\r\n$%zu\r\n%s\r\n", strlen(key), key);
        else
            len += (size_t)snprintf(buf + len, cap - len, "*3\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n$3\r\nxxx\r\n",
                                    strlen(key), key);
    }
    return len;
}

static const char *only; /* run only the case whose name starts so */

static void bench(const char *name, int n, int is_inline, long iters)
{
    if (only != NULL && strncmp(name, only, strlen(only)) != 0)
        return;
    static char buf[1 << 20];
    size_t len = build(buf, sizeof(buf), n, is_inline);
    struct sl_resp st;
    struct sl_resp_req *q;
    uint64_t count = 0, bytes = 0;

    if (sl_resp_init(&st, 0) != 0)
        exit(1);
    for (long i = 0; i < iters / 10; i++) { /* warm up */
        sl_resp_feed(&st, buf, len);
        while (sl_resp_next(&st, &q) == 1)
            ;
    }
    double t0 = now_ns();
    for (long i = 0; i < iters; i++) {
        sl_resp_feed(&st, buf, len);
        while (sl_resp_next(&st, &q) == 1) {
            count++;
            bytes += q->size;
        }
    }
    double t1 = now_ns();
    if (bytes != (uint64_t)iters * len || count != (uint64_t)iters * (uint64_t)n) {
        fprintf(stderr, "%s: framing mismatch\n", name);
        exit(1);
    }
    printf("%-34s %6.1f ns/request  %7.2f Mreq/s  %6.0f MB/s\n", name, (t1 - t0) / (double)count,
           (double)count / (t1 - t0) * 1e3, (double)bytes / (t1 - t0) * 1e3);
    sl_resp_free(&st);
}

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 200000;
    only = argc > 2 ? argv[2] : NULL;
    bench("multibulk, 16 per read", 16, 0, iters);
    bench("inline, 16 per read", 16, 1, iters);
    bench("multibulk, 1 per read", 1, 0, iters * 16);
    bench("multibulk, 256 per read", 256, 0, iters / 16);
    bench("multibulk, 4096 per read", 4096, 0, iters / 256);
    return 0;
}

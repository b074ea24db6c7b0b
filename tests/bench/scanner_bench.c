/* sluice — micro-benchmark of the RESP reply scanner.
 *
 * Scans a buffer of 16 small replies over and over, one sl_reply_scan() call
 * per reply as the session does, and prints nanoseconds per reply (the best
 * of 5 runs).
 *
 *   cc -std=gnu11 -O2 -D_GNU_SOURCE -Isrc -o build/scanner_bench \
 *      tests/bench/scanner_bench.c src/proto/resp_reply.c
 *   build/scanner_bench [seconds-per-case]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto/resp_reply.h"

/* CPU time of this thread, not wall time: on a busy machine the time spent
 * descheduled is not the scanner's. */
static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Runs <buf,len> (holding <per_buf> replies) for about <secs>; returns ns per
 * reply. */
static double run_once(const char *buf, size_t len, unsigned per_buf, double secs)
{
    struct sl_reply_scan s;
    uint64_t replies = 0, rounds = 0, sink = 0;
    double t0 = now_s(), t = t0;

    sl_reply_init(&s);
    while (t - t0 < secs) {
        for (int r = 0; r < 4096; r++) {
            size_t off = 0;

            while (off < len) {
                unsigned f;
                long n = sl_reply_scan(&s, buf + off, len - off, &f);

                if (n < 0) {
                    fprintf(stderr, "scan error\n");
                    exit(1);
                }
                off += (size_t)n;
                sink += f;
            }
        }
        rounds += 4096;
        t = now_s();
    }
    replies = rounds * per_buf;
    if (sink != replies) { /* also keeps the loop from being optimized away */
        fprintf(stderr, "expected %llu replies, saw %llu\n", (unsigned long long)replies,
                (unsigned long long)sink);
        exit(1);
    }
    return (t - t0) * 1e9 / (double)replies;
}

/* The best of 5 runs: the machine's noise only ever adds time. */
static double run(const char *buf, size_t len, unsigned per_buf, double secs)
{
    double best = run_once(buf, len, per_buf, secs / 5);

    for (int i = 1; i < 5; i++) {
        double t = run_once(buf, len, per_buf, secs / 5);

        if (t < best)
            best = t;
    }
    return best;
}

static void fill(char *buf, size_t *len, const char *reply, unsigned times)
{
    size_t n = strlen(reply);

    *len = 0;
    for (unsigned i = 0; i < times; i++) {
        memcpy(buf + *len, reply, n);
        *len += n;
    }
}

int main(int argc, char **argv)
{
    static char buf[1 << 16];
    double secs = argc > 1 ? atof(argv[1]) : 1.0;
    size_t len;

    fill(buf, &len, "$3\r\nbar\r\n", 16);
    printf("16 x $3 bar          %6.2f ns/reply\n", run(buf, len, 16, secs));
    {
        char big[160];

        memset(big, 'v', sizeof(big));
        memcpy(big, "$100\r\n", 6);
        memcpy(big + 106, "\r\n", 3);
        fill(buf, &len, big, 16);
        printf("16 x $100            %6.2f ns/reply\n", run(buf, len, 16, secs));
    }
    fill(buf, &len, "+OK\r\n", 16);
    printf("16 x +OK             %6.2f ns/reply\n", run(buf, len, 16, secs));
    fill(buf, &len, "*3\r\n$3\r\nfoo\r\n:1\r\n%1\r\n+k\r\n,1.5\r\n", 16);
    printf("16 x small aggregate %6.2f ns/reply\n", run(buf, len, 16, secs));
    return 0;
}

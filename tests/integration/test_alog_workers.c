/* sluice integration tests — two workers appending to one access log.
 *
 * `workers = 2`, one http listener with `access_log = FILE` in front of a
 * real nginx: each worker opens the file itself (O_APPEND) and writes its
 * lines from a threadpool job, in batches, while the other does the same.
 * Many keep-alive connections, held until the kernel has given each worker
 * some of them (SO_REUSEPORT spreads them by address), each send a window
 * of pipelined requests at a time from a process of their own, so both
 * workers log at once. Every request carries its connection and number in
 * its Referer and a long User-Agent (some of it bytes written as \xHH, so
 * lines run from 0.7 to 1.5 KB): every line of the file must be whole and
 * well formed (no piece of another inside it), every request must be there
 * exactly once, and lines + sluice_log_dropped_total = requests.
 *
 * The same through a FIFO, as with `access_log = /dev/stdout` under a
 * container runtime: a pipe shared by both workers, where only writes of at
 * most PIPE_BUF bytes are atomic. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "integration/harness.h"

#define MAX_CONNS   64  /* connections opened at most while waiting for both workers */
#define PER_CONN    96  /* requests per connection */
#define WINDOW      8   /* pipelined at a time */
#define REF_FILL    180 /* 'f' bytes after the id in the Referer */
#define UA_LEN      250 /* User-Agent bytes (kept whole: the log keeps 255) */

static struct th_nginx ngx;

static int group_setup(void **state)
{
    (void)state;
    return th_nginx_start(&ngx, 1024);
}

static int group_teardown(void **state)
{
    (void)state;
    th_nginx_stop(&ngx);
    th_kill_all();
    return 0;
}

/* Request <r> of connection <c>: every fourth one with a User-Agent of
 * 0xFF bytes (logged as \xFF, four bytes each). */
static size_t request(char *out, size_t cap, int c, int r)
{
    char ua[UA_LEN + 1], fill[REF_FILL + 1];
    memset(ua, (r % 4 == 3) ? 0xff : 'u', UA_LEN);
    ua[UA_LEN] = '\0';
    memset(fill, 'f', REF_FILL);
    fill[REF_FILL] = '\0';
    int n = snprintf(out, cap,
                     "GET /small HTTP/1.1\r\nHost: x\r\nReferer: http://t/c%03d/r%04d/%s\r\n"
                     "User-Agent: %s\r\n\r\n",
                     c, r, fill, ua);
    return (size_t)n;
}

static int count_bodies(const char *p, size_t n)
{
    static const char body[] = "hello from nginx\n";
    int k = 0;
    const char *e = p + n;
    while ((p = memmem(p, (size_t)(e - p), body, sizeof(body) - 1)) != NULL) {
        k++;
        p += sizeof(body) - 1;
    }
    return k;
}

/* A client process: PER_CONN requests on <fd>, WINDOW at a time, each
 * window's responses read before the next is sent. Exits 0 when every
 * response came. */
static void client(int fd, int c)
{
    static char in[1 << 16];
    char req[WINDOW * 1024];
    for (int r = 0; r < PER_CONN; r += WINDOW) {
        size_t len = 0;
        for (int i = 0; i < WINDOW && r + i < PER_CONN; i++)
            len += request(req + len, sizeof(req) - len, c, r + i);
        if (th_write_all(fd, req, len) < 0)
            _exit(1);
        int want = PER_CONN - r < WINDOW ? PER_CONN - r : WINDOW;
        size_t got = 0;
        /* responses are small: a window's fit in[] */
        while (count_bodies(in, got) < want) {
            struct pollfd pfd = { .fd = fd, .events = POLLIN };
            if (got == sizeof(in) || poll(&pfd, 1, TH_MS) != 1)
                _exit(2);
            ssize_t k = read(fd, in + got, sizeof(in) - got);
            if (k <= 0)
                _exit(3);
            got += (size_t)k;
        }
    }
    _exit(0);
}

static double metric(int admin, const char *name, int worker)
{
    char s[128];
    snprintf(s, sizeof(s), "%s{worker=\"%d\",listener=\"h\"}", name, worker);
    return th_metric(admin, s);
}

static double dropped(int admin)
{
    double d = 0;
    for (int w = 0; w < 2; w++) {
        char s[64];
        snprintf(s, sizeof(s), "sluice_log_dropped_total{worker=\"%d\"}", w);
        double v = th_metric(admin, s);
        assert_true(v >= 0);
        d += v;
    }
    return d;
}

/* Opens connections to <port>, eight at a time, until each worker holds
 * at least two (polled on sluice_connections_active). Returns how many. */
static int open_spread(int port, int admin, int *fds)
{
    int n = 0;
    while (n < MAX_CONNS) {
        for (int i = 0; i < 8; i++) {
            fds[n] = th_connect(port);
            assert_true(fds[n] >= 0);
            n++;
        }
        double a0 = 0, a1 = 0;
        uint64_t end = th_now_ms() + TH_MS;
        do {
            a0 = metric(admin, "sluice_connections_active", 0);
            a1 = metric(admin, "sluice_connections_active", 1);
            if (a0 + a1 == n)
                break;
            usleep(10000);
        } while (th_now_ms() < end);
        assert_true(a0 + a1 == n);
        if (a0 >= 2 && a1 >= 2)
            return n;
    }
    fail_msg("%d connections all went to one worker", n);
    return 0;
}

/* Lines in the text <log>: each checked whole; marks seen[c][r]. Returns
 * the number of lines, or -1 (after printing the line) on one malformed. */
static int check_lines(char *log, unsigned char (*seen)[PER_CONN], int nconn)
{
    regex_t re;
    static const char pat[] =
        "^127\\.0\\.0\\.1 - - \\[[0-9]{2}/[A-Z][a-z]{2}/[0-9]{4}:[0-9]{2}:[0-9]{2}:[0-9]{2} "
        "\\+0000\\] \"GET /small HTTP/1\\.1\" 200 [0-9]+ "
        "\"http://t/c([0-9]{3})/r([0-9]{4})/f{180}\" \"(u{250}|(\\\\xFF){250})\"$";
    assert_int_equal(regcomp(&re, pat, REG_EXTENDED), 0);
    size_t len = strlen(log);
    if (len > 0 && log[len - 1] != '\n') {
        fprintf(stderr, "the log does not end with a line end\n");
        regfree(&re);
        return -1;
    }
    int n = 0;
    for (char *line = log, *nl; line < log + len; line = nl + 1) {
        nl = strchr(line, '\n');
        *nl = '\0';
        regmatch_t m[4];
        int ok = regexec(&re, line, 4, m, 0) == 0;
        int c = ok ? atoi(line + m[1].rm_so) : -1, r = ok ? atoi(line + m[2].rm_so) : -1;
        if (!ok || c >= nconn || r >= PER_CONN || seen[c][r]++) {
            fprintf(stderr, "line %d %s: %.300s%s\n", n + 1,
                    ok ? "repeats a request" : "is not one whole line", line,
                    strlen(line) > 300 ? "..." : "");
            regfree(&re);
            return -1;
        }
        n++;
    }
    regfree(&re);
    return n;
}

static int count_nl(const char *path)
{
    char *t = th_slurp(path);
    int n = 0;
    for (const char *p = t; p != NULL && (p = strchr(p, '\n')) != NULL; p++)
        n++;
    free(t);
    return n;
}

/* Runs the traffic against a sluice whose listener h logs to <logpath>;
 * <readpath> is where the lines can be read (the file itself, or what a
 * FIFO's reader copied). */
static void run(const char *logpath, const char *readpath, pid_t reader)
{
    int port = th_free_port(), admin = th_free_port();
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nworkers = 2\nshutdown_grace = 2s\n"
             "[listener h]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "access_log = %s\n",
             admin, port, ngx.proc.port, logpath);
    struct th_proc sl;
    assert_int_equal(th_sluice_start(&sl, ini, admin), 0);
    uint64_t end = th_now_ms() + TH_MS;
    while (th_metric(admin, "sluice_workers_ready") != 2 && th_now_ms() < end)
        usleep(20000);
    assert_int_equal(th_metric(admin, "sluice_workers_ready"), 2);

    int fds[MAX_CONNS];
    int nconn = open_spread(port, admin, fds);
    pid_t kids[MAX_CONNS];
    for (int c = 0; c < nconn; c++) {
        fflush(NULL);
        kids[c] = fork();
        assert_true(kids[c] >= 0);
        if (kids[c] == 0)
            client(fds[c], c);
    }
    for (int c = 0; c < nconn; c++) {
        int st;
        assert_int_equal(waitpid(kids[c], &st, 0), kids[c]);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        close(fds[c]);
    }
    int total = nconn * PER_CONN;
    /* both workers served */
    double r0 = metric(admin, "sluice_requests_total", 0), r1 = metric(admin, "sluice_requests_total", 1);
    assert_true(r0 >= 2 * PER_CONN && r1 >= 2 * PER_CONN);
    assert_int_equal((int)(r0 + r1), total);

    /* every line written (or counted as dropped) */
    double d = 0;
    int lines = 0;
    end = th_now_ms() + TH_MS;
    do {
        d = dropped(admin);
        lines = count_nl(readpath);
        if (lines + (int)d >= total)
            break;
        usleep(20000);
    } while (th_now_ms() < end);
    assert_int_equal(th_stop(&sl), 0);
    if (reader > 0) {
        int st;
        assert_int_equal(waitpid(reader, &st, 0), reader); /* EOF: every writer closed */
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    char *log = th_slurp(readpath);
    assert_non_null(log);
    unsigned char (*seen)[PER_CONN] = calloc((size_t)nconn, sizeof(*seen));
    assert_non_null(seen);
    int n = check_lines(log, seen, nconn);
    free(log);
    free(seen);
    printf("    %d connections, %d requests (worker 0: %.0f, worker 1: %.0f), %d lines, %.0f dropped\n",
           nconn, total, r0, r1, n, d);
    assert_true(n >= 0);
    assert_int_equal(n + (int)d, total);
}

static void test_two_workers_one_file(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof(path), "/tmp/sluice-alog-workers-%d.log", (int)getpid());
    unlink(path);
    th_track_file(path);
    run(path, path, 0);
}

/* A FIFO read by a process that copies it to a file as it comes. */
static void test_two_workers_one_pipe(void **state)
{
    (void)state;
    char fifo[128], copy[128];
    snprintf(fifo, sizeof(fifo), "/tmp/sluice-alog-workers-%d.fifo", (int)getpid());
    snprintf(copy, sizeof(copy), "/tmp/sluice-alog-workers-%d.copy", (int)getpid());
    unlink(fifo);
    unlink(copy);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    th_track_file(fifo);
    th_track_file(copy);
    fflush(NULL);
    pid_t reader = fork();
    assert_true(reader >= 0);
    if (reader > 0)
        th_track_pid(reader);
    if (reader == 0) {
        /* blocks until sluice opens its end; reads until every writer closed */
        int in = open(fifo, O_RDONLY);
        int out = open(copy, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (in < 0 || out < 0)
            _exit(1);
        char buf[65536];
        ssize_t k;
        while ((k = read(in, buf, sizeof(buf))) > 0 || (k < 0 && errno == EINTR))
            if (k > 0 && th_write_all(out, buf, (size_t)k) < 0)
                _exit(1);
        _exit(k == 0 ? 0 : 1);
    }
    run(fifo, copy, reader);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_workers_one_file),
        cmocka_unit_test(test_two_workers_one_pipe),
    };
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

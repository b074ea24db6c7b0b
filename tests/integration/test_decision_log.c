/* sluice integration tests — logs that answer "why was I throttled"
 * (issue 23, section 2): the decision log (decision_log, decision_log_rate)
 * and the access logs of http listeners (access_log, access_log_format,
 * SIGUSR1). Real redis-server upstream, the Python HTTP upstream, a real
 * sluice, hiredis and raw sockets. Every wait polls the log files for the
 * condition (the lines are written by a threadpool job, a few tens of ms
 * after the decision). */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integration/harness.h"

/* ---- reading the logs ------------------------------------------------------ */

/* Lines of <path> holding <needle>; 0 when the file is missing. */
static int count_lines(const char *path, const char *needle)
{
    char *log = th_slurp(path);
    if (log == NULL)
        return 0;
    int n = 0;
    for (char *line = strtok(log, "\n"); line != NULL; line = strtok(NULL, "\n"))
        n += strstr(line, needle) != NULL;
    free(log);
    return n;
}

/* Polls until <path> has at least <want> lines holding <needle>. */
static int wait_lines(const char *path, const char *needle, int want, int ms)
{
    uint64_t end = th_now_ms() + (uint64_t)ms;
    while (th_now_ms() < end) {
        if (count_lines(path, needle) >= want)
            return 0;
        usleep(20000);
    }
    return -1;
}

/* The first line of <path> holding <needle>, malloc'd, or NULL. */
static char *line_with(const char *path, const char *needle)
{
    char *log = th_slurp(path);
    if (log == NULL)
        return NULL;
    char *out = NULL;
    for (char *line = strtok(log, "\n"); line != NULL && out == NULL; line = strtok(NULL, "\n"))
        if (strstr(line, needle) != NULL)
            out = strdup(line);
    free(log);
    return out;
}

/* 1 when some line of <path> holds <needle>. */
static int has_line(const char *path, const char *needle)
{
    char *l = line_with(path, needle);
    free(l);
    return l != NULL;
}

/* The decisions the log of <path> accounts for: one per decision line,
 * plus every repeated=N of the count lines; *<lines> the decision lines. */
static long decisions_logged(const char *path, int *lines)
{
    char *log = th_slurp(path);
    *lines = 0;
    if (log == NULL)
        return 0;
    long n = 0;
    for (char *line = strtok(log, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        if (strstr(line, "msg=decision ") != NULL) {
            (*lines)++;
            n++;
        }
        const char *rep = strstr(line, "msg=\"decision lines left out\" repeated=");
        if (rep != NULL)
            n += atol(rep + strlen("msg=\"decision lines left out\" repeated="));
    }
    free(log);
    return n;
}

/* ---- an HTTP request on a connection of its own ------------------------------ */

/* Sends <req> and reads the answer until the close; returns its status. */
static int http_once(int port, const char *req)
{
    int fd = th_connect(port);
    if (fd < 0)
        return -1;
    if (th_write_all(fd, req, strlen(req)) < 0) {
        close(fd);
        return -1;
    }
    char buf[8192];
    int eof = 0;
    size_t n = th_read_until_eof(fd, buf, sizeof(buf) - 1, TH_MS, &eof);
    close(fd);
    buf[n] = '\0';
    if (n < 12 || strncmp(buf, "HTTP/1.", 7) != 0)
        return -1;
    return atoi(buf + 9);
}

/* ---- the decision log ---------------------------------------------------- */

/* A RESP rejection: one line with listener, limit, identity, the command's
 * name (never its key or value), cost and retry_ms. */
static void test_resp_rejection_line(void **state)
{
    (void)state;
    struct th_proc up, sl;
    assert_int_equal(th_redis_start(&up, NULL), 0);
    int port = th_free_port(), admin = th_free_port();
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nidentity = client_ip\n"
             "[limit per_ip]\nlistener = r\nrate = 1/d\nburst = 3\ncost = SET=2 *=1\n",
             admin, port, up.port);
    assert_int_equal(th_sluice_start(&sl, ini, port), 0);
    redisContext *c = redisConnect("127.0.0.1", port);
    assert_non_null(c);
    redisReply *r = redisCommand(c, "SET secret-key-1 secret-value-1"); /* 2 of 3 */
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    r = redisCommand(c, "set secret-key-2 secret-value-2"); /* 2 more: refused */
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(r->str, "THROTTLED"));
    freeReplyObject(r);
    assert_int_equal(wait_lines(sl.log, "msg=decision ", 1, TH_MS), 0);
    char *line = line_with(sl.log, "msg=decision ");
    assert_non_null(line);
    assert_non_null(strstr(line, " listener=r limit=per_ip identity=ip:127.0.0.1 request=SET "
                                 "cost=2 outcome=rejected retry_ms="));
    assert_null(strstr(line, "secret"));
    free(line);
    /* the allowed SET has no line at the default (rejections) */
    assert_int_equal(count_lines(sl.log, "msg=decision "), 1);
    redisFree(c);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&up);
}

/* An HTTP 429: the line names the method and path, never the query. */
static void test_http_429_line(void **state)
{
    (void)state;
    struct th_proc py, sl;
    assert_int_equal(th_pyup_start(&py), 0);
    int port = th_free_port(), admin = th_free_port();
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\nlog_format = json\n"
             "[listener h]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "identity = client_ip\n"
             "[limit api]\nlistener = h\nrate = 1/d\nburst = 1\n",
             admin, port, py.port);
    assert_int_equal(th_sluice_start(&sl, ini, port), 0);
    const char *req = "GET /echo/items?api_key=SECRET123 HTTP/1.1\r\nHost: x\r\n"
                      "Connection: close\r\n\r\n";
    assert_int_equal(http_once(port, req), 200);
    assert_int_equal(http_once(port, req), 429);
    assert_int_equal(wait_lines(sl.log, "\"msg\":\"decision\"", 1, TH_MS), 0);
    char *line = line_with(sl.log, "\"msg\":\"decision\"");
    assert_non_null(line);
    assert_non_null(strstr(line, "\"listener\":\"h\",\"limit\":\"api\",\"identity\":\"ip:127.0.0.1\","
                                 "\"request\":\"GET /echo/items\",\"cost\":\"1\","
                                 "\"outcome\":\"rejected\",\"retry_ms\":\""));
    assert_null(strstr(line, "SECRET"));
    free(line);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&py);
}

/* decision_log = all: the allowed request has its line too; off: none. */
static void test_all_and_off(void **state)
{
    (void)state;
    struct th_proc up, sl;
    assert_int_equal(th_redis_start(&up, NULL), 0);
    for (int all = 0; all < 2; all++) {
        int port = th_free_port(), admin = th_free_port();
        char ini[1024];
        snprintf(ini, sizeof(ini),
                 "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\ndecision_log = %s\n"
                 "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
                 "identity = client_ip\n"
                 "[limit l]\nlistener = r\nrate = 1/d\nburst = 1\n",
                 admin, all ? "all" : "off", port, up.port);
        assert_int_equal(th_sluice_start(&sl, ini, port), 0);
        redisContext *c = redisConnect("127.0.0.1", port);
        assert_non_null(c);
        for (int i = 0; i < 2; i++)
            freeReplyObject(redisCommand(c, "GET k"));
        redisFree(c);
        if (all) {
            assert_int_equal(wait_lines(sl.log, "outcome=allowed", 1, TH_MS), 0);
            assert_int_equal(wait_lines(sl.log, "outcome=rejected", 1, TH_MS), 0);
            assert_true(has_line(sl.log, "limit=l identity=ip:127.0.0.1 request=GET cost=1 "
                                              "outcome=allowed"));
        }
        /* th_stop writes what is queued: off has written nothing */
        char logpath[256];
        snprintf(logpath, sizeof(logpath), "%s", sl.log);
        setenv("TH_KEEP_LOGS", "1", 1);
        assert_int_equal(th_stop(&sl), 0);
        unsetenv("TH_KEEP_LOGS");
        if (!all)
            assert_int_equal(count_lines(logpath, "msg=decision"), 0);
        th_track_file(logpath);
    }
    th_stop(&up);
}

/* A shadow limit's would-be rejections: a line each, the request served. */
static void test_shadow_line(void **state)
{
    (void)state;
    struct th_proc up, sl;
    assert_int_equal(th_redis_start(&up, NULL), 0);
    int port = th_free_port(), admin = th_free_port();
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nidentity = client_ip\n"
             "[limit watch]\nlistener = r\nrate = 1/d\nburst = 1\naction = shadow\n",
             admin, port, up.port);
    assert_int_equal(th_sluice_start(&sl, ini, port), 0);
    redisContext *c = redisConnect("127.0.0.1", port);
    assert_non_null(c);
    for (int i = 0; i < 3; i++) {
        redisReply *r = redisCommand(c, "GET k");
        assert_int_equal(r->type, REDIS_REPLY_NIL);
        freeReplyObject(r);
    }
    assert_int_equal(wait_lines(sl.log, "outcome=shadow_rejected", 2, TH_MS), 0);
    assert_true(has_line(sl.log, "msg=decision listener=r limit=watch identity=ip:127.0.0.1 "
                                      "request=GET cost=1 outcome=shadow_rejected retry_ms="));
    redisFree(c);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&up);
}

/* The rate bound: 1000 rejections with decision_log_rate = 10 give at most
 * 10 lines per second they span, and counts that make up the rest exactly. */
static void test_rate_bound(void **state)
{
    (void)state;
    struct th_proc up, sl;
    assert_int_equal(th_redis_start(&up, NULL), 0);
    int port = th_free_port(), admin = th_free_port();
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\ndecision_log_rate = 10\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nidentity = client_ip\n"
             "[limit l]\nlistener = r\nrate = 1/d\nburst = 1\ncommands = GET\n",
             admin, port, up.port);
    assert_int_equal(th_sluice_start(&sl, ini, port), 0);
    redisContext *c = redisConnect("127.0.0.1", port);
    assert_non_null(c);
    freeReplyObject(redisCommand(c, "GET k")); /* the one allowed */
    uint64_t t0 = th_now_ms();
    for (int i = 0; i < 1000; i++)
        redisAppendCommand(c, "GET k");
    for (int i = 0; i < 1000; i++) {
        redisReply *r;
        assert_int_equal(redisGetReply(c, (void **)&r), REDIS_OK);
        assert_int_equal(r->type, REDIS_REPLY_ERROR);
        freeReplyObject(r);
    }
    uint64_t secs = (th_now_ms() - t0) / 1000 + 1;
    /* the count line comes once the second is over (a timer writes it) */
    uint64_t end = th_now_ms() + TH_MS;
    int lines = 0;
    long n = 0;
    while (th_now_ms() < end && (n = decisions_logged(sl.log, &lines)) < 1000)
        usleep(50000);
    assert_int_equal(n, 1000);
    assert_true(lines >= 10);
    assert_true((uint64_t)lines <= 10 * (secs + 1));
    assert_true(count_lines(sl.log, "msg=\"decision lines left out\"") >= 1);
    assert_true(has_line(sl.log, "rejected="));
    assert_int_equal(th_metric(admin, "sluice_log_dropped_total"), 0);
    redisFree(c);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&up);
}

/* A connection refused under a connection limit has its line. */
static void test_connection_limit_line(void **state)
{
    (void)state;
    struct th_proc up, sl;
    assert_int_equal(th_redis_start(&up, NULL), 0);
    int port = th_free_port(), admin = th_free_port();
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nidentity = client_ip\n"
             "[limit conns]\nlistener = r\nmetric = connections\nmax = 1\n",
             admin, port, up.port);
    assert_int_equal(th_sluice_start(&sl, ini, port), 0);
    redisContext *a = redisConnect("127.0.0.1", port);
    freeReplyObject(redisCommand(a, "PING"));
    redisContext *b = redisConnect("127.0.0.1", port);
    redisReply *r = redisCommand(b, "PING");
    if (r != NULL)
        freeReplyObject(r);
    assert_int_equal(wait_lines(sl.log, "request=connection", 1, TH_MS), 0);
    assert_true(has_line(sl.log, "listener=r limit=conns identity=ip:127.0.0.1 "
                                      "request=connection cost=1 outcome=rejected"));
    redisFree(a);
    redisFree(b);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&up);
}

/* ---- access logs --------------------------------------------------------------- */

/* A small check that <line> is one json object with the fields wanted:
 * string values for time, client_ip, method, path, identity, outcome;
 * numbers for status, bytes, duration_ms; limit a string or null. */
static void check_json_line(const char *line, const char *path, int status, const char *outcome)
{
    char want[256];
    assert_true(line[0] == '{' && line[strlen(line) - 1] == '}');
    assert_non_null(strstr(line, "{\"time\":\"20"));
    assert_non_null(strstr(line, ",\"client_ip\":\"127.0.0.1\",\"method\":\"GET\",\"path\":\""));
    snprintf(want, sizeof(want), "\"path\":\"%s\",\"status\":%d,\"bytes\":", path, status);
    assert_non_null(strstr(line, want));
    const char *b = strstr(line, "\"bytes\":") + 8;
    assert_true(atol(b) > 0);
    const char *d = strstr(line, ",\"duration_ms\":");
    assert_non_null(d);
    assert_true(d[15] >= '0' && d[15] <= '9');
    assert_non_null(strstr(line, ",\"identity\":\"ip:127.0.0.1\",\"outcome\":\""));
    snprintf(want, sizeof(want), "\"outcome\":\"%s\",\"limit\":", outcome);
    assert_non_null(strstr(line, want));
    /* every quote is paired: no raw quote inside a value */
    int q = 0;
    for (const char *p = line; *p; p++)
        if (*p == '"' && p[-1] != '\\')
            q++;
    assert_int_equal(q % 2, 0);
}

static void test_access_log_formats_and_reopen(void **state)
{
    (void)state;
    struct th_proc py, sl;
    assert_int_equal(th_pyup_start(&py), 0);
    int port = th_free_port(), jport = th_free_port(), admin = th_free_port();
    char comb[128], json[128], moved[160];
    snprintf(comb, sizeof(comb), "/tmp/sluice-access-%d.log", (int)getpid());
    snprintf(json, sizeof(json), "/tmp/sluice-access-%d.json", (int)getpid());
    snprintf(moved, sizeof(moved), "%s.1", comb);
    unlink(comb);
    unlink(json);
    unlink(moved);
    th_track_file(comb);
    th_track_file(json);
    th_track_file(moved);
    char ini[2048];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\n"
             "[listener h]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "identity = client_ip\naccess_log = %s\n"
             "[listener j]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "identity = client_ip\naccess_log = %s\naccess_log_format = json\n"
             "[limit api]\nlistener = j\nrate = 1/d\nburst = 1\npaths = /echo*\n",
             admin, port, py.port, comb, jport, py.port, json);
    assert_int_equal(th_sluice_start(&sl, ini, port), 0);
    /* combined */
    assert_int_equal(http_once(port, "GET /fixed?size=100 HTTP/1.1\r\nHost: x\r\n"
                                     "Referer: http://r/\r\nUser-Agent: t\"1\r\n"
                                     "Connection: close\r\n\r\n"),
                     200);
    assert_int_equal(wait_lines(comb, "\"GET /fixed HTTP/1.1\" 200 ", 1, TH_MS), 0);
    char *line = line_with(comb, "GET /fixed");
    assert_non_null(line);
    /* 127.0.0.1 - - [28/Nov/2026:03:12:01 +0000] "GET /fixed HTTP/1.1" 200 N "http://r/" "t\"1" */
    assert_true(strncmp(line, "127.0.0.1 - - [", 15) == 0);
    assert_non_null(strstr(line, " +0000] \"GET /fixed HTTP/1.1\" 200 "));
    assert_true(atol(strstr(line, "\" 200 ") + 6) > 100); /* head + 100 bytes of body */
    assert_non_null(strstr(line, " \"http://r/\" \"t\\\"1\""));
    free(line);
    /* json: an allowed request under a limit and its 429 */
    const char *req = "GET /echo?token=SECRET HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert_int_equal(http_once(jport, req), 200);
    assert_int_equal(http_once(jport, req), 429);
    assert_int_equal(wait_lines(json, "\"path\":\"/echo\"", 2, TH_MS), 0);
    char *l429 = line_with(json, "\"status\":429");
    char *l200 = line_with(json, "\"status\":200");
    assert_non_null(l429);
    assert_non_null(l200);
    check_json_line(l200, "/echo", 200, "allowed");
    check_json_line(l429, "/echo", 429, "rejected");
    assert_non_null(strstr(l429, "\"limit\":\"api\"}"));
    assert_null(strstr(l429, "SECRET"));
    free(l429);
    free(l200);
    /* rotation: the file moved, SIGUSR1, the next line is in a new file */
    assert_int_equal(rename(comb, moved), 0);
    assert_int_equal(kill(sl.pid, SIGUSR1), 0);
    assert_int_equal(wait_lines(sl.log, "msg=\"log file reopened\"", 1, TH_MS), 0);
    assert_int_equal(http_once(port, "GET /fixed?size=1 HTTP/1.1\r\nHost: x\r\n"
                                     "Connection: close\r\n\r\n"),
                     200);
    assert_int_equal(wait_lines(comb, "\"GET /fixed HTTP/1.1\" 200 ", 1, TH_MS), 0);
    assert_int_equal(count_lines(moved, "GET /fixed"), 1);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&py);
}

/* A keep-alive connection with pipelined requests: one line per response,
 * in order, each with its own status. */
static void test_access_log_pipelined(void **state)
{
    (void)state;
    struct th_proc py, sl;
    assert_int_equal(th_pyup_start(&py), 0);
    int port = th_free_port(), admin = th_free_port();
    char path[128];
    snprintf(path, sizeof(path), "/tmp/sluice-access-p-%d.log", (int)getpid());
    unlink(path);
    th_track_file(path);
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\n"
             "[listener h]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n"
             "access_log = %s\n",
             admin, port, py.port, path);
    assert_int_equal(th_sluice_start(&sl, ini, port), 0);
    const char *reqs = "GET /fixed?size=10 HTTP/1.1\r\nHost: x\r\n\r\n"
                       "GET /status/204 HTTP/1.1\r\nHost: x\r\n\r\n"
                       "GET /chunked?n=3&size=5 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    int fd = th_connect(port);
    assert_true(fd >= 0);
    assert_int_equal(th_write_all(fd, reqs, strlen(reqs)), 0);
    char buf[8192];
    int eof = 0;
    (void)th_read_until_eof(fd, buf, sizeof(buf), TH_MS, &eof);
    close(fd);
    assert_int_equal(wait_lines(path, "HTTP/1.1\" ", 3, TH_MS), 0);
    char *log = th_slurp(path);
    assert_non_null(log);
    char *a = strstr(log, "\"GET /fixed HTTP/1.1\" 200 ");
    char *b = strstr(log, "\"GET /status/204 HTTP/1.1\" 204 ");
    char *c = strstr(log, "\"GET /chunked HTTP/1.1\" 200 ");
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_true(a < b && b < c);
    free(log);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&py);
}

/* A reload that moves the access log: the next line is in the new file,
 * the old one keeps what it had; a file that cannot be opened fails the
 * reload and the old log goes on. */
static void test_access_log_reload(void **state)
{
    (void)state;
    struct th_proc py, sl;
    assert_int_equal(th_pyup_start(&py), 0);
    int port = th_free_port(), admin = th_free_port();
    char a[128], b[128];
    snprintf(a, sizeof(a), "/tmp/sluice-access-a-%d.log", (int)getpid());
    snprintf(b, sizeof(b), "/tmp/sluice-access-b-%d.log", (int)getpid());
    unlink(a);
    unlink(b);
    th_track_file(a);
    th_track_file(b);
    const char *fmt = "[sluice]\nadmin = 127.0.0.1:%d\nshutdown_grace = 1s\n"
                      "[listener h]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
                      "protocol = http\naccess_log = %s\n";
    char ini[1024];
    snprintf(ini, sizeof(ini), fmt, admin, port, py.port, a);
    assert_int_equal(th_sluice_start(&sl, ini, port), 0);
    const char *req = "GET /fixed?size=3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert_int_equal(http_once(port, req), 200);
    assert_int_equal(wait_lines(a, "GET /fixed", 1, TH_MS), 0);
    /* a file in a directory that does not exist: the reload fails */
    snprintf(ini, sizeof(ini), fmt, admin, port, py.port, "/nonexistent-dir/x.log");
    FILE *f = fopen(sl.conf, "w");
    assert_non_null(f);
    fputs(ini, f);
    fclose(f);
    assert_int_equal(kill(sl.pid, SIGHUP), 0);
    assert_int_equal(wait_lines(sl.log, "reload failed", 1, TH_MS), 0);
    assert_int_equal(http_once(port, req), 200);
    assert_int_equal(wait_lines(a, "GET /fixed", 2, TH_MS), 0);
    /* now to b */
    snprintf(ini, sizeof(ini), fmt, admin, port, py.port, b);
    f = fopen(sl.conf, "w");
    assert_non_null(f);
    fputs(ini, f);
    fclose(f);
    assert_int_equal(kill(sl.pid, SIGHUP), 0);
    assert_int_equal(wait_lines(sl.log, "msg=reloaded", 1, TH_MS), 0);
    assert_int_equal(http_once(port, req), 200);
    assert_int_equal(wait_lines(b, "GET /fixed", 1, TH_MS), 0);
    assert_int_equal(count_lines(a, "GET /fixed"), 2);
    assert_int_equal(th_stop(&sl), 0);
    th_stop(&py);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resp_rejection_line),
        cmocka_unit_test(test_http_429_line),
        cmocka_unit_test(test_all_and_off),
        cmocka_unit_test(test_shadow_line),
        cmocka_unit_test(test_rate_bound),
        cmocka_unit_test(test_connection_limit_line),
        cmocka_unit_test(test_access_log_formats_and_reopen),
        cmocka_unit_test(test_access_log_pipelined),
        cmocka_unit_test(test_access_log_reload),
    };
    return th_finish(cmocka_run_group_tests(tests, NULL, NULL));
}

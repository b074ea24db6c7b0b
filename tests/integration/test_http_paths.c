/* sluice integration tests — a differential test of `paths` (issue 21):
 * whenever a real upstream routes a spelling of a path under a limited
 * prefix, sluice counts the request against that limit (or refuses it with
 * a 400). docs/http.md, "Paths".
 *
 * Upstreams, each on a free loopback port:
 *   nginx    (Debian's) with `location /api/ { return 200 "api\n"; }` and
 *            404 "other\n" for the rest;
 *   Express  (npm's, tests/integration/http_paths_upstream.js): a router
 *            mounted at /api answers 200 "api\n", the rest 404 "other\n".
 *            Installed under build/node when missing (`npm install express@5`); the
 *            test is skipped, saying so, only when the npm registry cannot
 *            be reached.
 * One sluice with an http listener in front of each, both with the limit
 * `paths = /api /api/` + "*" (a rate no request reaches) and rate_limit_headers:
 * a request the limit counted gets the RateLimit fields on its response;
 * one it did not, none.
 *
 * The table of spellings is fixed (no randomness): heads before "api"
 * (dot segments in every encoding, %2F, '\', %5C, ;params, double and
 * overlong encodings, %00), spellings of "api" (case, escapes), separators
 * after it and tails, combined in fixed sweeps. Each is sent to the
 * upstream directly (where it routes it) and through sluice (whether it was
 * counted, and that the upstream answered the same). The test prints the
 * table's size and, per upstream, how many it routed under /api/, how many
 * sluice counted or refused, and how many it counted that the upstream
 * routed elsewhere (what reading every spelling costs).
 *
 * PATHS_VERBOSE=1 prints every row. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "integration/harness.h"

#define NODE_PREFIX "build/node"
#define MAX_SPELLINGS 2048

/* ---- processes ---------------------------------------------------------------- */

/* Forks <argv> with stdout and stderr into <log>, in its own process
 * group, killed with the test; NULL <env_name>: no extra variable. */
static pid_t spawn(char *const argv[], const char *log, const char *env_name, const char *env_val)
{
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        setpgid(0, 0);
        if (env_name != NULL)
            setenv(env_name, env_val, 1);
        execvp(argv[0], argv);
        _exit(127);
    }
    if (pid > 0)
        th_track_pid(pid);
    return pid;
}

/* Polls until <port> accepts a connection, <pid> dies, or TH_MS pass. */
static int wait_listening(int port, pid_t pid)
{
    uint64_t end = th_now_ms() + TH_MS;
    while (th_now_ms() < end) {
        int fd = th_connect(port);
        if (fd >= 0) {
            close(fd);
            return 0;
        }
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return -1;
        usleep(20000);
    }
    return -1;
}

static void print_file(const char *path)
{
    char *t = th_slurp(path);
    if (t != NULL)
        fprintf(stderr, "--- %s\n%s\n", path, t);
    free(t);
}

static char ng_dir[64];
static pid_t ng_pid, ex_pid;
static int ng_port, ex_port;

static int nginx_start(void)
{
    snprintf(ng_dir, sizeof(ng_dir), "/tmp/sluice-test-paths-XXXXXX");
    if (mkdtemp(ng_dir) == NULL)
        return -1;
    chmod(ng_dir, 0755);
    char path[128], conf[128], log[128], elog[128];
    snprintf(path, sizeof(path), "%s/tmp", ng_dir);
    mkdir(path, 0777);
    snprintf(conf, sizeof(conf), "%s/nginx.conf", ng_dir);
    snprintf(log, sizeof(log), "%s/stderr.log", ng_dir);
    snprintf(elog, sizeof(elog), "%s/error.log", ng_dir);
    ng_port = th_free_port();
    FILE *f = fopen(conf, "w");
    if (f == NULL)
        return -1;
    fprintf(f,
            "worker_processes 1;\n"
            "pid %s/nginx.pid;\n"
            "error_log %s info;\n"
            "events { worker_connections 256; }\n"
            "http {\n"
            "    access_log off;\n"
            "    client_body_temp_path %s/tmp/body;\n"
            "    proxy_temp_path %s/tmp/proxy;\n"
            "    fastcgi_temp_path %s/tmp/fcgi;\n"
            "    uwsgi_temp_path %s/tmp/uwsgi;\n"
            "    scgi_temp_path %s/tmp/scgi;\n"
            "    server {\n"
            "        listen 127.0.0.1:%d;\n"
            "        default_type text/plain;\n"
            "        location /api/ { return 200 \"api\\n\"; }\n"
            "        location / { return 404 \"other\\n\"; }\n"
            "    }\n"
            "}\n",
            ng_dir, elog, ng_dir, ng_dir, ng_dir, ng_dir, ng_dir, ng_port);
    fclose(f);
    const char *bin = access("/usr/sbin/nginx", X_OK) == 0 ? "/usr/sbin/nginx" : "nginx";
    char *argv[] = { (char *)bin, "-p", ng_dir, "-e", elog, "-c", conf, "-g", "daemon off;", NULL };
    ng_pid = spawn(argv, log, NULL, NULL);
    if (ng_pid < 0 || wait_listening(ng_port, ng_pid) < 0) {
        fprintf(stderr, "nginx did not start (`make deps-http` installs nginx-light)\n");
        print_file(log);
        print_file(elog);
        return -1;
    }
    return 0;
}

/* 1 when express is installed under NODE_PREFIX (installing it if not),
 * 0 when the npm registry cannot be reached (skip), -1 on another failure. */
static int express_ready(void)
{
    if (access(NODE_PREFIX "/node_modules/express/package.json", R_OK) == 0)
        return 1;
    if (system("command -v node >/dev/null && command -v npm >/dev/null") != 0) {
        fprintf(stderr, "node or npm is missing (`make deps-http` installs nodejs and npm)\n");
        return -1;
    }
    fprintf(stderr, "installing express into " NODE_PREFIX " (npm install)\n");
    if (system("mkdir -p " NODE_PREFIX " && npm install --prefix " NODE_PREFIX
               " --no-audit --no-fund --no-save --loglevel=error express@5 >&2") == 0 &&
        access(NODE_PREFIX "/node_modules/express/package.json", R_OK) == 0)
        return 1;
    if (system("npm ping --loglevel=error >/dev/null 2>&1") != 0) {
        fprintf(stderr, "SKIP: the npm registry cannot be reached (npm ping failed), so express "
                        "cannot be installed into " NODE_PREFIX "\n");
        return 0;
    }
    fprintf(stderr, "npm install express failed although the registry answers\n");
    return -1;
}

static int express_start(void)
{
    char modules[4096 + 32], log[64];
    if (getcwd(modules, 4096) == NULL)
        return -1;
    strcat(modules, "/" NODE_PREFIX "/node_modules");
    snprintf(log, sizeof(log), "/tmp/sluice-test-paths-express-%d.log", (int)getpid());
    th_track_file(log);
    ex_port = th_free_port();
    char port[16];
    snprintf(port, sizeof(port), "%d", ex_port);
    char *argv[] = { "node", "tests/integration/http_paths_upstream.js", port, NULL };
    ex_pid = spawn(argv, log, "NODE_PATH", modules);
    if (ex_pid < 0 || wait_listening(ex_port, ex_pid) < 0) {
        fprintf(stderr, "the Express server did not start\n");
        print_file(log);
        return -1;
    }
    return 0;
}

/* ---- the table of spellings ------------------------------------------------------ */

/* Before "api": the root spelt many ways, and detours back to it. */
static const char *const heads[] = {
    "/", "//", "///", "/./", "/%2e/", "/%2E/", "/%2f", "/%2F", "/%2f%2f", "/%5c", "\\",
    "/public/../", "/public/%2e%2e/", "/public/%2E%2E/", "/public/.%2e/", "/public/%2e./",
    "/public/..%2f", "/public/..%2F", "/public/%2e%2e%2f", "/public/..%5c", "/public/..\\",
    "/public\\..\\", "/public%5c..%5c", "/public/..;/", "/public;x/..;y/", "/public/..;x=1/",
    "/x/y/../../", "/x/y/..%2f..%2f", "/x/./y/%2e%2e/../", "/../", "/%2e%2e/", "/public/..%252f",
    "/public/%252e%252e/", "/%c0%af", "/public/..%c0%af", "/public%00/../", "/public/%00/../../",
    "/public/...%2f", "/public/..../", "/public/.../",
};

/* "api" and its spellings. */
static const char *const names[] = {
    "api", "API", "Api", "aPi", "%61pi", "%41PI", "a%70i", "a%50I", "ap%69", "%61%70%69", "%2561pi",
    "ap%zzi", "apix", "ap",
};

/* After "api". */
static const char *const seps[] = {
    "/", "%2f", "%2F", "//", "/./", "/%2e/", ";v=1/", ";/", "%3b/", "%5c", "%5C", "\\", "%252f",
    "%c0%af", "%e0%80%af", "%00/", "/%00", "", "?q=/api/",
};

/* What follows: a file, and detours out of /api/. */
static const char *const tails[] = {
    "x", "", "x/../../public", "%2e%2e/public", "..", ".", "x/..%2f..%2fpublic", "..;/public",
    "x\\..\\..\\public",
};

static char *table[MAX_SPELLINGS];
static int n_table;

static void add(const char *a, const char *b, const char *c, const char *d)
{
    char s[256];
    snprintf(s, sizeof(s), "%s%s%s%s", a, b, c, d);
    if (s[0] != '/')
        return; /* origin-form only */
    for (int i = 0; i < n_table; i++)
        if (strcmp(table[i], s) == 0)
            return;
    assert_true(n_table < MAX_SPELLINGS);
    table[n_table++] = strdup(s);
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void make_table(void)
{
    n_table = 0;
    /* every head, with each separator; every name, with each separator;
     * every tail behind a few heads; a few plain controls */
    for (size_t h = 0; h < N(heads); h++)
        for (size_t s = 0; s < N(seps); s++)
            add(heads[h], "api", seps[s], "x");
    for (size_t n = 0; n < N(names); n++)
        for (size_t s = 0; s < N(seps); s++)
            add("/", names[n], seps[s], "x");
    static const char *const some_heads[] = { "/", "//", "/public/..%2f", "/public/..;/", "/%2f" };
    for (size_t h = 0; h < N(some_heads); h++)
        for (size_t t = 0; t < N(tails); t++)
            for (size_t s = 0; s < 4; s++)
                add(some_heads[h], "api", seps[s], tails[t]);
    for (size_t n = 0; n < N(names); n++)
        for (size_t t = 0; t < N(tails); t++)
            add("/", names[n], "/", tails[t]);
    add("/", "", "", "");
    add("/public/x", "", "", "");
    add("/x/api/y", "", "", "");
    add("/api", "", "", "");
}

/* ---- one request ----------------------------------------------------------------- */

struct answer {
    int status;
    int api;      /* the body is "api\n": routed under /api/ */
    int counted;  /* the head has RateLimit fields */
    int refused;  /* sluice's own 400 (problem+json) */
    char body[64];
};

static int ask(int port, const char *path, struct answer *a)
{
    char req[512];
    snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", path);
    size_t n;
    int eof;
    char *r = th_transcript(port, req, strlen(req), &n, TH_MS, &eof);
    memset(a, 0, sizeof(*a));
    if (r == NULL)
        return -1;
    char *end = strstr(r, "\r\n\r\n");
    if (n < 12 || memcmp(r, "HTTP/1.", 7) != 0 || end == NULL) {
        th_dump("no response", r, n);
        free(r);
        return -1;
    }
    a->status = atoi(r + 9);
    *end = '\0';
    for (char *p = r; (p = strstr(p, "\r\n")) != NULL; p += 2)
        if (strncasecmp(p + 2, "RateLimit", 9) == 0)
            a->counted = 1;
    a->refused = a->status == 400 && strcasestr(r, "\r\ncontent-type: application/problem+json") != NULL;
    snprintf(a->body, sizeof(a->body), "%s", end + 4);
    a->api = strcmp(a->body, "api\n") == 0;
    free(r);
    return 0;
}

/* Whether the spelling holds what sluice refuses: %00, overlong UTF-8. */
static int refusable(const char *p)
{
    return strcasestr(p, "%00") != NULL || strcasestr(p, "%c0%") != NULL ||
           strcasestr(p, "%e0%80") != NULL;
}

struct tally {
    int routed, counted, refused, missed, over, over_bad, differ, wrong_refusal;
};

static void run_upstream(const char *name, int direct_port, int via_port, struct tally *t, int verbose)
{
    memset(t, 0, sizeof(*t));
    for (int i = 0; i < n_table; i++) {
        struct answer d, v;
        if (ask(direct_port, table[i], &d) < 0 || ask(via_port, table[i], &v) < 0)
            fail_msg("%s: no answer to %s", name, table[i]);
        t->routed += d.api;
        t->counted += v.counted;
        t->refused += v.refused;
        if (d.api && !v.counted && !v.refused) {
            t->missed++;
            fprintf(stderr, "MISSED %s: %s routed under /api/ (%d) but not counted (%d)\n", name,
                    table[i], d.status, v.status);
        }
        if (!d.api && (v.counted || v.refused)) {
            if (d.status == 404)
                t->over++;     /* the upstream routed it elsewhere */
            else
                t->over_bad++; /* the upstream refused it itself (400) */
        }
        if (v.refused != refusable(table[i])) {
            t->wrong_refusal++;
            fprintf(stderr, "%s %s: %s\n", v.refused ? "REFUSED" : "NOT REFUSED", name, table[i]);
        }
        /* transparent: the upstream answers the same through sluice */
        if (!v.refused && (v.status != d.status || strcmp(v.body, d.body) != 0)) {
            t->differ++;
            fprintf(stderr, "DIFFERS %s: %s directly %d, through sluice %d\n", name, table[i],
                    d.status, v.status);
        }
        if (verbose)
            fprintf(stderr, "%-8s %-40s upstream %d %-5s sluice %s\n", name, table[i], d.status,
                    d.api ? "api" : "-", v.refused ? "refused" : v.counted ? "counted" : "-");
    }
}

static void test_paths_differential(void **state)
{
    (void)state;
    int ready = express_ready();
    if (ready == 0)
        skip();
    assert_int_equal(ready, 1);
    assert_int_equal(nginx_start(), 0);
    assert_int_equal(express_start(), 0);
    make_table();

    struct th_proc sl;
    int p_ng = th_free_port(), p_ex = th_free_port(), p_plain = th_free_port();
    char ini[2048];
    static const char limit[] = "identity = client_ip\nrate_limit_headers = draft\n";
    snprintf(ini, sizeof(ini),
             "[listener ng]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n%s"
             "[listener ex]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n%s"
             "[limit api_ng]\nlistener = ng\nrate = 100000/s\nburst = 100000\npaths = /api /api/*\n"
             "[limit api_ex]\nlistener = ex\nrate = 100000/s\nburst = 100000\npaths = /api /api/*\n"
             "[listener plain]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nprotocol = http\n%s"
             "[limit all]\nlistener = plain\nrate = 100000/s\nburst = 100000\n",
             p_ng, ng_port, limit, p_ex, ex_port, limit, p_plain, ng_port, limit);
    assert_int_equal(th_sluice_start(&sl, ini, p_ng), 0);

    int verbose = getenv("PATHS_VERBOSE") != NULL;
    struct tally tn, te;
    run_upstream("nginx", ng_port, p_ng, &tn, verbose);
    run_upstream("express", ex_port, p_ex, &te, verbose);
    fprintf(stderr, "paths table: %d spellings\n", n_table);
    const struct { const char *name; struct tally *t; } rows[] = { { "nginx", &tn }, { "express", &te } };
    for (int i = 0; i < 2; i++)
        fprintf(stderr, "  %-8s routed under /api/ %3d; sluice counted %3d, refused %3d (wrongly "
                "refused or not %d); routed under /api/ but not counted %d; counted or refused "
                "but routed elsewhere %d, or refused by the upstream itself %d\n",
                rows[i].name, rows[i].t->routed, rows[i].t->counted, rows[i].t->refused,
                rows[i].t->wrong_refusal, rows[i].t->missed, rows[i].t->over, rows[i].t->over_bad);
    /* where no limit has paths, nothing is refused: nginx answers %00 itself */
    struct answer a;
    assert_int_equal(ask(p_plain, "/api%00/x", &a), 0);
    assert_int_equal(a.status, 400);
    assert_false(a.refused);
    assert_true(a.counted);
    assert_int_equal(ask(p_plain, "/%c0%afapi/x", &a), 0);
    assert_int_equal(a.status, 404);
    assert_int_equal(th_stop(&sl), 0);
    th_kill_server(ng_pid);
    th_kill_server(ex_pid);
    ng_pid = ex_pid = 0;
    if (getenv("TH_KEEP_LOGS") == NULL) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", ng_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", ng_dir);
    }
    for (int i = 0; i < n_table; i++)
        free(table[i]);
    assert_true(n_table >= 100);
    assert_true(tn.routed > 0 && te.routed > 0);
    assert_int_equal(tn.missed, 0);
    assert_int_equal(te.missed, 0);
    assert_int_equal(tn.differ, 0);
    assert_int_equal(te.differ, 0);
    assert_int_equal(tn.wrong_refusal, 0);
    assert_int_equal(te.wrong_refusal, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths_differential),
    };
    return th_finish(cmocka_run_group_tests(tests, NULL, NULL));
}

/* sluice integration tests — starting and stopping real processes.
 *
 * Every test starts real redis-server and build/sluice processes on free
 * loopback ports and stops them again. SLUICE_BIN overrides the binary
 * (`make check` uses the sanitizer build). */
#ifndef SL_TEST_HARNESS_H
#define SL_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct th_proc {
    pid_t pid;        /* 0 when not running */
    int   port;       /* the port it serves */
    char  conf[256];  /* sluice: its configuration file */
    char  log[256];   /* where its stderr goes */
};

/* A loopback TCP port nobody listens on right now. */
int th_free_port(void);

/* Starts redis-server on a free port (no persistence); waits until it
 * answers PING. Extra arguments (NULL-terminated list) are appended. Returns
 * 0 or -1. */
int th_redis_start(struct th_proc *p, ...);

/* Starts a Redis Sentinel (`redis-server FILE --sentinel`) on a free port,
 * with a configuration file written for it (a sentinel rewrites its own)
 * that monitors <name> at 127.0.0.1:<master_port> with quorum 2, plus the
 * lines <extra> (e.g. "sentinel down-after-milliseconds NAME 1000"); waits
 * until it answers PING. Returns 0 or -1 (and prints its log). */
int th_sentinel_start(struct th_proc *p, const char *name, int master_port, const char *extra);

/* Starts build/sluice with the configuration text <ini> (written to a temp
 * file); waits until port <wait_port> accepts connections (0: do not wait).
 * Returns 0 or -1 (and prints the log). */
int th_sluice_start(struct th_proc *p, const char *ini, int wait_port);

/* th_sluice_start() with RLIMIT_NOFILE set to <soft> / <hard> in the child
 * before exec (start it before opening sockets: the child inherits those
 * that are not close-on-exec). */
int th_sluice_start_nofile(struct th_proc *p, const char *ini, int wait_port, long soft, long hard);

/* Sends SIGTERM, waits up to 5 s, then SIGKILL. Returns the exit status as
 * waitpid gives it, or -1. After a clean exit (status 0) its log and
 * configuration files are removed (unless TH_KEEP_LOGS is set). */
int th_stop(struct th_proc *p);

/* Remembers a file a test wrote; th_finish(failed) kills what is left and,
 * when no test failed (and TH_KEEP_LOGS is unset), removes those files.
 * A test program ends with `return th_finish(cmocka_run_group_tests(...))`. */
void th_track_file(const char *path);
int th_finish(int failed);

/* Sends <sig> and waits up to <ms> for the process to exit; returns its
 * waitpid status or -1 if it is still running. */
int th_signal_wait(struct th_proc *p, int sig, int ms);

/* Resident set size of <pid> in KiB (VmRSS), or -1. */
long th_rss_kb(pid_t pid);

/* A connected blocking TCP socket to 127.0.0.1:<port>, or -1. */
int th_connect(int port);

/* Writes all of <buf>; returns 0 or -1. */
int th_write_all(int fd, const void *buf, size_t len);

/* Reads until <len> bytes or EOF or <ms> elapse; returns bytes read. */
size_t th_read_n(int fd, void *buf, size_t len, int ms);

/* Reads until the peer closes or <ms> elapse; returns bytes read (<= cap).
 * *eof is set to 1 if EOF (or a reset) was seen. */
size_t th_read_until_eof(int fd, void *buf, size_t cap, int ms, int *eof);

/* Milliseconds on a monotonic clock. */
uint64_t th_now_ms(void);

/* The path of the sluice binary (SLUICE_BIN or build/sluice). */
const char *th_sluice_bin(void);

/* ---- bookkeeping -------------------------------------------------------- */

/* Every process the harness starts (redis-server, sluice, forked servers) is
 * remembered until it is stopped; th_kill_all() SIGKILLs (its whole process
 * group) and reaps whatever is still running. It also runs at exit. */
void th_kill_all(void);

/* Kills <pid> with the rest at exit or th_finish() (a process a test
 * started by hand must not outlive a failed assertion). */
void th_track_pid(pid_t pid);

/* GET <path> from an admin endpoint on <port>: the malloc'd body (up to
 * 1 MiB), or NULL. */
char *th_http_get(int port, const char *path);

/* The number after the JSON key "<key>": in <body>, searched from the
 * first occurrence of <within> (e.g. "\"adaptive\":{", NULL: from the
 * start), or -1 when there is none. */
double th_json_num(const char *body, const char *within, const char *key);

/* The value of the /metrics sample whose name and labels are exactly
 * <sample>, or -1 when there is none. */
double th_metric(int port, const char *sample);

/* Waits until th_metric(port, sample) == <want> (e.g. sluice_store_up 1);
 * 0, or -1 when <ms> pass first. (harness_store.c) */
int th_metric_wait(int port, const char *sample, double want, int ms);

/* A condition th_run_until() checks: nonzero when it holds. */
typedef int th_cond_fn(void *arg);

/* Runs the libuv loop <loop> (a uv_loop_t) until cond(arg) holds or <ms>
 * pass; returns 1 if it held. A NULL <cond> just runs the loop for <ms>.
 * A 2 ms tick wakes the loop to look at the clock; it is closed again
 * before this returns. (harness_store.c) */
struct uv_loop_s;
int th_run_until(struct uv_loop_s *loop, th_cond_fn *cond, void *arg, int ms);

/* Starts redis-server as th_redis_start() does (plaintext on p->port, for
 * the test to look), serving TLS too on a free port (*<tls_port>) with the
 * certificate <cert> / <key> and CA <ca>; clients must show a certificate
 * when <auth_clients>. 0 or -1. (harness_store.c) */
int th_redis_tls_start(struct th_proc *p, int *tls_port, const char *cert, const char *key,
                       const char *ca, int auth_clients);

/* Default deadline for one expected event (generous: sanitizer builds on a
 * busy 2-core machine). */
#define TH_MS 8000

/* In a cmocka test: the string literal <lit> must be what <fd> gives next
 * (TH_EXPECT), or all it gives before the close (TH_EXPECT_CLOSE), within
 * TH_MS; TH_SEND writes <lit> whole. (th_expect, th_expect_close, th_write_all) */
#define TH_EXPECT(fd, lit) assert_int_equal(th_expect((fd), (lit), sizeof(lit) - 1, TH_MS), 0)
#define TH_EXPECT_CLOSE(fd, lit) \
    assert_int_equal(th_expect_close((fd), (lit), sizeof(lit) - 1, TH_MS), 0)
#define TH_SEND(fd, lit) assert_int_equal(th_write_all((fd), (lit), sizeof(lit) - 1), 0)

/* ---- forked servers ------------------------------------------------------- */

typedef void (*th_serve_fn)(int lfd, void *arg);

/* Binds a listening socket on a free loopback port (stored in *port), then
 * forks a child in its own process group that runs fn(lfd, arg) and exits.
 * The socket listens before this returns (no race). Returns the pid or -1. */
pid_t th_fork_server(int *port, th_serve_fn fn, void *arg);

/* SIGKILLs the process group of a th_fork_server() child and reaps it. */
void th_kill_server(pid_t pid);

/* A th_serve_fn: each accepted connection (in its own process) gets back
 * every byte it sends; after the client's EOF the echo closes. */
void th_serve_echo(int lfd, void *arg);

/* ---- bytes ---------------------------------------------------------------- */

/* Sets O_NONBLOCK; returns 0 or -1. */
int th_nonblock(int fd);

/* Reads exactly <len> bytes and compares them with <want>. Returns 0 on a
 * match; otherwise prints what came (escaped) and returns -1. */
int th_expect(int fd, const void *want, size_t len, int ms);

/* Reads until EOF: returns 0 if exactly <want> came and then EOF, otherwise
 * prints what came and returns -1. */
int th_expect_close(int fd, const void *want, size_t len, int ms);

/* 1 if nothing (no byte, no EOF) arrives on <fd> within <ms>, else 0. */
int th_quiet(int fd, int ms);

/* 1 if the peer closes (EOF or reset) within <ms> with no byte before it;
 * 0 otherwise (timeout or data). */
int th_wait_eof(int fd, int ms);

/* Prints <len> bytes at <p> with \r \n and non-printables escaped
 * (at most the first 400 bytes). */
void th_dump(const char *label, const void *p, size_t len);

/* Length of the complete RESP2/RESP3 value at the start of <p> (n bytes),
 * 0 if it is not complete yet, SIZE_MAX if it is malformed. */
size_t th_resp_len(const char *p, size_t n);

/* A raw socket with a read buffer, for reading whole RESP replies. */
struct th_conn {
    int    fd;
    char  *buf;
    size_t len;
    size_t cap;
};

/* Connects to <port>; returns 0 or -1. */
int th_conn_open(struct th_conn *c, int port);
void th_conn_close(struct th_conn *c);
/* Sends the NUL-terminated <s>; returns 0 or -1. */
int th_conn_send(struct th_conn *c, const char *s);
/* The next complete reply as a malloc'd NUL-terminated string (raw RESP),
 * or NULL on timeout, EOF or malformed input. */
char *th_conn_reply(struct th_conn *c, int ms);

/* Connects, sends <in>, reads until the peer closes (or <ms> elapse).
 * Returns the malloc'd bytes (NUL-terminated, length in *outlen), *eof says
 * whether the close was seen. NULL if the connection failed. */
char *th_transcript(int port, const void *in, size_t inlen, size_t *outlen, int ms, int *eof);

/* ---- logs and Redis ----------------------------------------------------- */

/* The whole file <path>, malloc'd and NUL-terminated, or NULL. */
char *th_slurp(const char *path);

/* calls=N of `INFO commandstats` line cmdstat_<cmd> on the redis at <port>
 * (0 when the command never ran), -1 when redis does not answer. */
long th_redis_cmd_calls(int port, const char *cmd);

/* How many times <needle> occurs in the file <path> (0 if unreadable). */
int th_log_count(const char *path, const char *needle);

/* Waits until <needle> occurs at least <n> times in <path>; 0 or -1. */
int th_log_wait(const char *path, const char *needle, int n, int ms);

/* The integer field <field> of Redis's INFO (e.g. "blocked_clients") asked
 * directly at <port>, or -1. */
long th_redis_info(int port, const char *field);

/* Waits until th_redis_info(port, field) == want; 0 or -1. */
int th_redis_wait_info(int port, const char *field, long want, int ms);

/* 1 while the process of <p> runs; 0 once it has exited (then it is reaped,
 * p->pid becomes 0 and *status, if not NULL, gets the waitpid status). */
int th_running(struct th_proc *p, int *status);

/* Starts a throwaway redis-server (with the option <redis_opt> <redis_val>
 * when <redis_opt> is not NULL) and a sluice with one resp listener [r] in
 * front of it (<listener_extra>, if any, appended to the listener's keys);
 * *<port> is the listener's port. Returns 0, or -1 with nothing left running. */
int th_pair_start(struct th_proc *redis, struct th_proc *sl, int *port, const char *listener_extra,
                  const char *redis_opt, const char *redis_val);

/* Stops both (and every tracked process); -1, said on stderr, if sluice did
 * not exit cleanly. */
int th_pair_stop(struct th_proc *redis, struct th_proc *sl);

/* For cmocka teardowns: 0 while <p> still runs, else -1 (and says on
 * stderr how it ended and where its log is). */
int th_alive_or_report(struct th_proc *p);

/* ---- HTTP upstreams (test_http, the benchmark's twins) ------------------ */

/* SHA-256 of <len> bytes at <p> into <out> (32 bytes); a streaming form for
 * bodies read in pieces. */
struct th_sha256 {
    uint32_t h[8];
    uint64_t len;
    unsigned char blk[64];
    size_t   n;
};
void th_sha256_init(struct th_sha256 *c);
void th_sha256_update(struct th_sha256 *c, const void *p, size_t len);
void th_sha256_final(struct th_sha256 *c, unsigned char out[32]);
/* The digest of <p, len> as 64 lower-case hex digits into <hex> (65 bytes). */
void th_sha256_hex(const void *p, size_t len, char hex[65]);

/* Byte <i> of the test pattern both upstreams serve:
 * (i * 7 + 13) mod 251 (i taken mod 251 first). Fills <len> bytes of it
 * starting at offset <off>. */
void th_pattern(void *buf, size_t len, uint64_t off);

/* nginx from Debian, started on a free loopback port with a generated
 * configuration (one worker, keep-alive on: keepalive_requests 100000,
 * keepalive_timeout 60s) in a fresh directory, serving:
 *   GET /small    200 "hello from nginx\n" (17 bytes, text/plain)
 *   GET /big.bin  <big_len> bytes of th_pattern (a static file: sendfile)
 *   anything else from that directory's root/ (404 when absent)
 * Its access log has one line per request: "<connection serial>
 * <request number on it> <status> <request line>". */
struct th_nginx {
    struct th_proc proc;             /* pid, port; conf = nginx.conf, log = its stderr */
    char           dir[128];         /* the prefix directory */
    char           access_log[192];
    uint64_t       big_len;
    char           big_sha256[65];   /* hex digest of /big.bin */
};

/* Returns 0, or -1 (printing why: nginx not installed, did not start). */
int th_nginx_start(struct th_nginx *n, uint64_t big_len);
/* Stops it (SIGTERM, then SIGKILL) and removes its directory unless
 * TH_KEEP_LOGS is set. */
void th_nginx_stop(struct th_nginx *n);
/* Requests in the access log past its first <skip> lines, and in *conns
 * (if not NULL) how many distinct connections carried them; -1 when the
 * log is unreadable. */
int th_nginx_requests(const struct th_nginx *n, int skip, int *conns);

/* The Python upstream for odd responses, tests/integration/http_upstream.py
 * (its header lists the paths), started on a free loopback port; waits
 * until it listens (without connecting: connections are counted). */
int th_pyup_start(struct th_proc *p);

/* What the Python upstream saw, asked on a connection of its own (not
 * counted): connections, request heads, whole requests, bytes received.
 * Returns 0 or -1. */
struct th_pyup_stats {
    long connections, heads, requests, bytes;
};
int th_pyup_stats(int port, struct th_pyup_stats *st);

/* ---- names that resolve later (harness_hosts.c) -------------------------- */

/* Writes the machine's /etc/hosts, then <line> (or "" for nothing more),
 * into <path> in place; 0 or -1. */
int th_hosts_write(const char *path, const char *line);

/* Starts sluice on <ini> (waiting until <wait> accepts) in a mount
 * namespace of its own where the file <hosts> is /etc/hosts. 0; 1 when no
 * namespace can be made here (the caller skips); -1 when it did not start. */
int th_sluice_start_hosts(struct th_proc *p, const char *ini, int wait, const char *hosts);

#endif

/* ---- Redis Cluster -------------------------------------------------------- */

#define TH_CLUSTER_NODES 6

/* A real Redis Cluster on loopback: three masters with one replica each
 * (`redis-server --cluster-enabled yes`, `redis-cli --cluster create
 * --cluster-replicas 1`), cluster-node-timeout 1000 ms so a failover takes
 * a few seconds. */
struct th_cluster {
    struct th_proc node[TH_CLUSTER_NODES];
    char           nodes_conf[TH_CLUSTER_NODES][128]; /* each node's cluster-config-file */
    char           rdb[TH_CLUSTER_NODES][96];         /* each node's RDB (a replica's sync) */
};

/* Starts the nodes, creates the cluster, waits until every node says
 * cluster_state:ok and every replica is in sync. Returns 0 or -1 (printing
 * why; nothing left running). */
int th_cluster_start(struct th_cluster *c);

/* Stops every node and removes their files (th_track_file). */
void th_cluster_stop(struct th_cluster *c);

/* Writes "redis-cluster://127.0.0.1:P,..." naming every running node. */
void th_cluster_url(const struct th_cluster *c, char *buf, size_t cap);

/* Waits until every running node says cluster_state:ok and each of the
 * slots' masters is a running node; 0 or -1. */
int th_cluster_wait_ok(struct th_cluster *c, int ms);

/* The index in <c> of the running master serving <slot> (as CLUSTER NODES
 * of a running node says), or -1. */
int th_cluster_master_of(const struct th_cluster *c, unsigned slot);

/* 1 when node <i> is a master (CLUSTER NODES "myself,master"), else 0. */
int th_cluster_is_master(const struct th_cluster *c, int i);

/* Sends the inline command <cmd> (no CRLF) to 127.0.0.1:<port>; the raw
 * reply (malloc'd) or NULL. */
char *th_redis_cmd(int port, const char *cmd);

/* DBSIZE of the redis at <port>, or -1. */
long th_redis_dbsize(int port);

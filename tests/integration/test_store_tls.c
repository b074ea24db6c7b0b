/* sluice integration tests — the quota store over TLS (issue 15).
 *
 * A real redis-server serves TLS on one port (what sluice is given, with
 * `url = rediss://...`) and plaintext on another (what the test inspects),
 * with certificates made by the `openssl` command at test time: a CA, the
 * server's for localhost / 127.0.0.1, a client's, and an unrelated CA.
 * Decisions go through a real build/sluice. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fcntl.h>
#include <signal.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "certs.h"
#include "integration/harness.h"

static struct th_certs certs;

static const char *path(const char *name)
{
    return th_certs_path(&certs, name);
}

static int make_certs(void **state)
{
    (void)state;
    static const struct th_cert want[] = {
        { "server", "/CN=localhost", TH_SAN_LOCAL, 0 },
        { "client", "/CN=sluice-store-client", NULL, TH_CERT_CLIENT },
    };
    return th_certs_make(&certs, want, sizeof want / sizeof want[0]);
}

static int remove_certs(void **state)
{
    (void)state;
    return th_certs_remove(&certs);
}

struct world {
    struct th_proc store;  /* redis: plaintext on store.port, TLS on tls_port */
    struct th_proc up;     /* the upstream redis */
    struct th_proc sl;
    int            tls_port;
    int            port;   /* sluice's listener */
    int            admin;
};

/* Starts the TLS store (clients must show a certificate when <auth>) and
 * the upstream. */
static void world_start(struct world *w, int auth)
{
    memset(w, 0, sizeof(*w));
    assert_int_equal(th_redis_tls_start(&w->store, &w->tls_port, path("server.pem"),
                                        path("server.key"), path("ca.pem"), auth), 0);
    assert_int_equal(th_redis_start(&w->up, (char *)NULL), 0);
}

static const char *connect_timeout = "1s"; /* [store] connect_timeout of the next start */

/* Starts sluice with [store] <url> (NULL: rediss:// to the TLS port), lines
 * <store_extra> and one INCR limit of 3. */
static void sluice_start_url(struct world *w, const char *url, const char *store_extra,
                             const char *on_failure)
{
    w->port = th_free_port();
    w->admin = th_free_port();
    char ini[2048], dflt[64];
    snprintf(dflt, sizeof dflt, "rediss://127.0.0.1:%d", w->tls_port);
    snprintf(ini, sizeof ini,
             "[sluice]\nadmin = 127.0.0.1:%d\n"
             "[store]\nurl = %s\ntimeout = 250ms\nconnect_timeout = %s\n"
             "on_failure = %s\n%s\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "[limit l]\nlistener = r\nrate = 1/d\nburst = 3\ncommands = INCR\n",
             w->admin, url ? url : dflt, connect_timeout, on_failure, store_extra, w->port,
             w->up.port);
    assert_int_equal(th_sluice_start(&w->sl, ini, w->port), 0);
}

static void sluice_start(struct world *w, const char *store_extra, const char *on_failure)
{
    sluice_start_url(w, NULL, store_extra, on_failure);
}

static void world_stop(struct world *w)
{
    assert_int_equal(th_stop(&w->sl), 0);
    th_stop(&w->up);
    th_stop(&w->store);
}

static int store_up(struct world *w, int ms)
{
    return th_metric_wait(w->admin, "sluice_store_up", 1, ms) == 0;
}

/* Sends five INCRs through sluice; returns how many were admitted (the rest
 * must be THROTTLED). */
static int five_incrs(struct world *w)
{
    redisContext *c = redisConnect("127.0.0.1", w->port);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    int ok = 0;
    for (int i = 0; i < 5; i++) {
        redisReply *r = redisCommand(c, "INCR n");
        assert_non_null(r);
        if (r->type == REDIS_REPLY_INTEGER)
            ok++;
        else
            assert_non_null(strstr(r->str, "THROTTLED"));
        freeReplyObject(r);
    }
    redisFree(c);
    return ok;
}

/* rediss:// with the CA and an SNI name the certificate carries: the
 * handshake, then AUTH-less SCRIPT LOAD and EVALSHA, all over TLS; the
 * limit holds as with a plaintext store. */
static void test_rediss_store_decides(void **state)
{
    (void)state;
    struct world w;
    world_start(&w, 0);
    char extra[512];
    snprintf(extra, sizeof extra, "tls_ca = %s\ntls_sni = localhost", path("ca.pem"));
    sluice_start(&w, extra, "closed");
    assert_true(store_up(&w, 5000));
    long before = th_redis_cmd_calls(w.store.port, "evalsha");
    assert_int_equal(five_incrs(&w), 3);
    /* the decisions were the store's (sluice knows only its TLS port) */
    assert_true(th_redis_cmd_calls(w.store.port, "evalsha") >= before + 3);
    assert_true(th_redis_info(w.store.port, "connected_clients") >= 2);
    world_stop(&w);
}

/* The store asks for a client certificate: without one sluice is refused
 * (logged, the store counted down, on_failure = closed rejects); with
 * tls_cert / tls_key it decides. The name checked is the url's address
 * (an IP SAN) when no tls_sni is given. */
static void test_rediss_mutual_tls(void **state)
{
    (void)state;
    struct world w;
    world_start(&w, 1);
    char extra[512];
    snprintf(extra, sizeof extra, "tls_ca = %s", path("ca.pem"));
    sluice_start(&w, extra, "closed");
    assert_true(th_log_wait(w.sl.log, "quota store down", 1, 5000) == 0);
    assert_true(th_log_count(w.sl.log, "certificate required") >= 1);
    assert_false(store_up(&w, 300));
    assert_int_equal(five_incrs(&w), 0);
    assert_int_equal(th_stop(&w.sl), 0);

    snprintf(extra, sizeof extra, "tls_ca = %s\ntls_cert = %s\ntls_key = %s", path("ca.pem"),
             path("client.pem"), path("client.key"));
    sluice_start(&w, extra, "closed");
    assert_true(store_up(&w, 5000));
    assert_int_equal(five_incrs(&w), 3);
    world_stop(&w);
}

/* A CA that did not sign the store's certificate: one clear log line
 * naming the cause, and on_failure applies (local: the limit is kept in
 * process, 3 of 5). tls_verify = off connects anyway (and says so). */
static void test_rediss_wrong_ca(void **state)
{
    (void)state;
    struct world w;
    world_start(&w, 0);
    char extra[512];
    snprintf(extra, sizeof extra, "tls_ca = %s", path("ca2.pem"));
    sluice_start(&w, extra, "local");
    assert_true(th_log_wait(w.sl.log, "quota store down", 1, 5000) == 0);
    /* "self-signed certificate in certificate chain" when the store sends
     * its CA along, "unable to get local issuer certificate" when not */
    assert_true(th_log_count(w.sl.log, "level=warn msg=\"quota store down\" addr=127.0.0.1:") == 1);
    assert_true(th_log_count(w.sl.log, "reason=\"TLS handshake failed: certificate verify "
                                       "failed: ") >= 1);
    assert_false(store_up(&w, 300));
    assert_int_equal(five_incrs(&w), 3);
    assert_int_equal(th_redis_cmd_calls(w.store.port, "evalsha"), 0);
    assert_int_equal(th_stop(&w.sl), 0);

    snprintf(extra, sizeof extra, "tls_ca = %s\ntls_verify = off", path("ca2.pem"));
    sluice_start(&w, extra, "closed");
    assert_true(store_up(&w, 5000));
    assert_true(th_log_count(w.sl.log, "NOT verified") >= 1);
    assert_int_equal(five_incrs(&w), 3);
    world_stop(&w);
}

/* rediss-sentinel:// with sentinel_tls = off: the sentinel (plaintext
 * only) names the master at its TLS port; the master connection speaks
 * TLS, its name checked against the certificate's IP SAN. */
static void test_rediss_sentinel(void **state)
{
    (void)state;
    struct world w;
    world_start(&w, 0);
    struct th_proc sen;
    char extra[1024];
    snprintf(extra, sizeof extra,
             "tls-replication yes\ntls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\n",
             path("server.pem"), path("server.key"), path("ca.pem"));
    assert_int_equal(th_sentinel_start(&sen, "m", w.tls_port, extra), 0);
    char url[128];
    snprintf(url, sizeof url, "rediss-sentinel://127.0.0.1:%d/m", sen.port);
    snprintf(extra, sizeof extra, "tls_ca = %s\nsentinel_tls = off", path("ca.pem"));
    sluice_start_url(&w, url, extra, "closed");
    assert_true(store_up(&w, 5000));
    assert_int_equal(five_incrs(&w), 3);
    world_stop(&w);
    th_stop(&sen);
}

/* Starts a sentinel that speaks only TLS (port 0, tls-port <p>->port, the
 * test CA's server certificate), monitoring <name> at 127.0.0.1's TLS port
 * <master_tls_port> with quorum 1, plus the lines <extra>; waits until it
 * accepts connections. Returns 0 or -1. */
static int tls_sentinel_start(struct th_proc *p, const char *name, int master_tls_port,
                              const char *extra)
{
    memset(p, 0, sizeof(*p));
    p->port = th_free_port();
    snprintf(p->conf, sizeof p->conf, "%s/sentinel-%d.conf", certs.dir, p->port);
    snprintf(p->log, sizeof p->log, "%s/sentinel-%d.log", certs.dir, p->port);
    FILE *f = fopen(p->conf, "w");
    if (f == NULL)
        return -1;
    fprintf(f, "port 0\ntls-port %d\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir %s\n"
               "tls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\ntls-auth-clients no\n"
               "tls-replication yes\nsentinel monitor %s 127.0.0.1 %d 1\n%s\n",
            p->port, certs.dir, path("server.pem"), path("server.key"), path("ca.pem"), name,
            master_tls_port, extra ? extra : "");
    fclose(f);
    p->pid = fork();
    if (p->pid == 0) {
        int fd = open(p->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execlp("redis-server", "redis-server", p->conf, "--sentinel", (char *)NULL);
        _exit(127);
    }
    if (p->pid < 0)
        return -1;
    th_track_pid(p->pid);
    uint64_t end = th_now_ms() + 5000;
    while (th_now_ms() < end) {
        int fd = th_connect(p->port);
        if (fd >= 0) {
            close(fd);
            return 0;
        }
        usleep(10000);
    }
    return -1;
}

/* Starts sluice with url = rediss-sentinel://<host>:<sen_port>/m and
 * tls_ca = <ca>. */
static void sluice_start_sentinel(struct world *w, const char *host, int sen_port, const char *ca,
                                  const char *on_failure)
{
    char url[128], extra[512];
    snprintf(url, sizeof url, "rediss-sentinel://%s:%d/m", host, sen_port);
    snprintf(extra, sizeof extra, "tls_ca = %s", path(ca));
    sluice_start_url(w, url, extra, on_failure);
}

/* rediss-sentinel:// and sentinels that speak only TLS (port 0): sluice
 * asks them over TLS (the sentinel named by host: SNI and the name checked
 * are "localhost"), with the store's CA, and decides through the master
 * they name. The count lives in the store: a second sluice (a fresh
 * process) finds the limit spent. Before, the sentinels were asked in
 * plaintext and the store never came up. */
static void test_rediss_sentinel_tls(void **state)
{
    (void)state;
    struct world w;
    world_start(&w, 0);
    struct th_proc sen;
    assert_int_equal(tls_sentinel_start(&sen, "m", w.tls_port, NULL), 0);
    sluice_start_sentinel(&w, "localhost", sen.port, "ca.pem", "closed");
    assert_true(store_up(&w, 5000));
    assert_true(th_log_count(w.sl.log, "msg=\"sentinel TLS up\" sentinel=localhost:") >= 1);
    long before = th_redis_cmd_calls(w.store.port, "evalsha");
    assert_int_equal(five_incrs(&w), 3);
    assert_true(th_redis_cmd_calls(w.store.port, "evalsha") >= before + 3);
    assert_int_equal(th_stop(&w.sl), 0);
    /* another instance, same store: the limit is spent for it too */
    sluice_start_sentinel(&w, "localhost", sen.port, "ca.pem", "closed");
    assert_true(store_up(&w, 5000));
    assert_int_equal(five_incrs(&w), 0);
    world_stop(&w);
    th_stop(&sen);
}

/* A TLS sentinel whose certificate the configured CA did not sign: one
 * clear line names the sentinel and the cause, the store stays down and
 * on_failure applies (local: 3 of 5 in process). */
static void test_rediss_sentinel_tls_wrong_ca(void **state)
{
    (void)state;
    struct world w;
    world_start(&w, 0);
    struct th_proc sen;
    assert_int_equal(tls_sentinel_start(&sen, "m", w.tls_port, NULL), 0);
    sluice_start_sentinel(&w, "127.0.0.1", sen.port, "ca2.pem", "local");
    assert_int_equal(th_log_wait(w.sl.log, "msg=\"sentinel: no master known\"", 1, 5000), 0);
    assert_true(th_log_count(w.sl.log, "last_error=\"127.0.0.1:") >= 1);
    assert_true(th_log_count(w.sl.log, ": TLS handshake failed: certificate verify failed") >= 1);
    assert_false(store_up(&w, 300));
    assert_int_equal(five_incrs(&w), 3);
    assert_int_equal(th_redis_cmd_calls(w.store.port, "evalsha"), 0);
    world_stop(&w);
    th_stop(&sen);
}

/* A failover, everything over TLS: a TLS master and its replica
 * (tls-replication), one TLS-only sentinel (quorum 1, down-after 1 s).
 * The master goes away: the +switch-master heard over TLS moves sluice to
 * the promoted replica, where the limit's count (replicated) still holds:
 * 2 of 3 spent before, so 1 of 5 passes after (on_failure = open would
 * pass 5, a store without the count 3). */
static void test_rediss_sentinel_tls_failover(void **state)
{
    (void)state;
    struct world w;
    world_start(&w, 0);
    struct th_proc rep, sen;
    char rport[16], mport[16];
    snprintf(rport, sizeof rport, "%d", th_free_port());
    snprintf(mport, sizeof mport, "%d", w.tls_port);
    /* The master's full sync to a new replica waits repl-diskless-sync-delay
     * (5 s by default) for more replicas to join: the replica held nothing
     * for 5 s, as long as the wait below allowed, and the test depended on
     * sentinel and sluice taking long enough to start. No wait here. */
    char *cs = th_redis_cmd(w.store.port, "CONFIG SET repl-diskless-sync-delay 0");
    assert_true(cs != NULL && strcmp(cs, "+OK\r\n") == 0);
    free(cs);
    assert_int_equal(th_redis_start(&rep, "--tls-port", rport, "--tls-cert-file",
                                    path("server.pem"), "--tls-key-file", path("server.key"),
                                    "--tls-ca-cert-file", path("ca.pem"), "--tls-auth-clients",
                                    "no", "--tls-replication", "yes", "--replicaof", "127.0.0.1",
                                    mport, "--dir", certs.dir, (char *)NULL), 0); /* its rdb: not here */
    assert_int_equal(th_redis_wait_info(w.store.port, "connected_slaves", 1, 10000), 0);
    assert_int_equal(tls_sentinel_start(&sen, "m", w.tls_port,
                                        "sentinel down-after-milliseconds m 1000\n"
                                        "sentinel failover-timeout m 5000\n"), 0);
    sluice_start_sentinel(&w, "127.0.0.1", sen.port, "ca.pem", "open");
    assert_true(store_up(&w, 5000));
    assert_true(th_log_wait(w.sl.log, "sentinel: subscribed to +switch-master", 1, 5000) == 0);
    redisContext *c = redisConnect("127.0.0.1", w.port);
    assert_non_null(c);
    for (int i = 0; i < 2; i++) {
        redisReply *r = redisCommand(c, "INCR n");
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_INTEGER);
        freeReplyObject(r);
    }
    redisFree(c);
    /* the count is on the replica: it has applied the master's stream so
     * far. A bound for a stuck replica, not a timing: 20 s. */
    long off = th_redis_info(w.store.port, "master_repl_offset");
    uint64_t t_sync = th_now_ms(), end = t_sync + 20000;
    long roff;
    while ((roff = th_redis_info(rep.port, "master_repl_offset")) < off) {
        if (th_now_ms() >= end)
            fail_msg("replica at offset %ld of the master's %ld after %llu ms (sync in progress: %ld)",
                     roff, off, (unsigned long long)(th_now_ms() - t_sync),
                     th_redis_info(rep.port, "master_sync_in_progress"));
        usleep(10000);
    }
    printf("replica caught up with the master's offset %ld in %llu ms\n", off,
           (unsigned long long)(th_now_ms() - t_sync));
    /* the sentinel has the replica's INFO (its link to the master is up):
     * before that, a failover finds no good replica and waits to retry */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "redis-cli --tls --cacert %s -p %d SENTINEL replicas m 2>/dev/null"
             " | grep -A1 -x master-link-status | grep -qx ok", path("ca.pem"), sen.port);
    end = th_now_ms() + 10000;
    while (system(cmd) != 0) {
        assert_true(th_now_ms() < end);
        usleep(50000);
    }
    uint64_t t0 = th_now_ms();
    kill(w.store.pid, SIGKILL);
    if (th_log_wait(w.sl.log, "via=switch-master", 1, 20000) != 0) {
        char *log = th_slurp(sen.log); /* why the sentinel did not fail over */
        fprintf(stderr, "sentinel log:\n%s\n", log ? log : "(none)");
        free(log);
        fail();
    }
    assert_true(store_up(&w, 5000));
    uint64_t took = th_now_ms() - t0;
    char want[128];
    snprintf(want, sizeof want, "addr=127.0.0.1:%s previous=127.0.0.1:%s via=switch-master",
             rport, mport);
    assert_int_equal(th_log_count(w.sl.log, want), 1);
    long before = th_redis_cmd_calls(rep.port, "evalsha");
    assert_int_equal(five_incrs(&w), 1);
    assert_true(th_redis_cmd_calls(rep.port, "evalsha") > before);
    print_message("TLS sentinel failover: store back on the replica %llu ms after the kill\n",
                  (unsigned long long)took);
    assert_int_equal(th_stop(&w.sl), 0);
    th_stop(&w.up);
    th_stop(&w.store);
    th_stop(&rep);
    th_stop(&sen);
}

/* rediss-cluster://: three TLS masters (tls-cluster yes: their bus and the
 * ports they announce are TLS); the slot map's "tls-port" is where sluice
 * connects, each node's certificate checked against its address. */
static void test_rediss_cluster(void **state)
{
    (void)state;
    struct th_proc node[3], up;
    int tport[3];
    char cmd[2048];
    int len = snprintf(cmd, sizeof cmd, "timeout 60 redis-cli --tls --cacert %s --cluster create",
                       path("ca.pem"));
    for (int i = 0; i < 3; i++) {
        char t[16], bus[16], conf[96], rdb[64];
        tport[i] = th_free_port();
        snprintf(t, sizeof t, "%d", tport[i]);
        snprintf(bus, sizeof bus, "%d", th_free_port());
        snprintf(conf, sizeof conf, "/tmp/sluice-test-tls-nodes-%d-%d.conf", (int)getpid(), i);
        snprintf(rdb, sizeof rdb, "sluice-test-tls-dump-%d-%d.rdb", (int)getpid(), i);
        unlink(conf);
        th_track_file(conf);
        assert_int_equal(th_redis_start(&node[i], "--tls-port", t, "--tls-cert-file",
                                        path("server.pem"), "--tls-key-file", path("server.key"),
                                        "--tls-ca-cert-file", path("ca.pem"), "--tls-auth-clients",
                                        "no", "--tls-cluster", "yes", "--tls-replication", "yes",
                                        "--cluster-enabled", "yes", "--cluster-node-timeout",
                                        "1000", "--cluster-config-file", conf, "--cluster-port",
                                        bus, "--dir", "/tmp", "--dbfilename", rdb, (char *)NULL),
                         0);
        len += snprintf(cmd + len, sizeof cmd - (size_t)len, " 127.0.0.1:%d", tport[i]);
    }
    snprintf(cmd + len, sizeof cmd - (size_t)len, " --cluster-yes >%s 2>&1", path("create.log"));
    assert_int_equal(system(cmd), 0);
    uint64_t end = th_now_ms() + 20000;
    for (int i = 0; i < 3; i++) {
        for (;;) {
            char *r = th_redis_cmd(node[i].port, "CLUSTER INFO");
            int ok = r != NULL && strstr(r, "cluster_state:ok") != NULL;
            free(r);
            if (ok)
                break;
            assert_true(th_now_ms() < end);
            usleep(50000);
        }
    }
    struct world w;
    memset(&w, 0, sizeof w);
    assert_int_equal(th_redis_start(&up, (char *)NULL), 0);
    w.up = up;
    char url[128], extra[256];
    snprintf(url, sizeof url, "rediss-cluster://127.0.0.1:%d,127.0.0.1:%d", tport[0], tport[1]);
    snprintf(extra, sizeof extra, "tls_ca = %s", path("ca.pem"));
    sluice_start_url(&w, url, extra, "closed");
    assert_true(store_up(&w, 10000));
    assert_int_equal(five_incrs(&w), 3);
    assert_true(th_log_count(w.sl.log, "quota store TLS up") >= 3); /* seed + the masters */
    assert_int_equal(th_stop(&w.sl), 0);
    th_stop(&w.up);
    for (int i = 0; i < 3; i++)
        th_stop(&node[i]);
}

/* A th_serve_fn that never accepts: the kernel completes the TCP handshake,
 * nobody ever answers the ClientHello. */
static void serve_silence(int lfd, void *arg)
{
    (void)lfd;
    (void)arg;
    for (;;)
        pause();
}

/* A store that takes the TCP connection and never answers the TLS
 * handshake: connect_timeout ends it ("handshake timeout"), on_failure
 * applies (open: everything admitted), and it is tried again. */
static void test_rediss_handshake_timeout(void **state)
{
    (void)state;
    struct world w;
    memset(&w, 0, sizeof w);
    int port = 0;
    pid_t silent = th_fork_server(&port, serve_silence, NULL);
    assert_true(silent > 0);
    assert_int_equal(th_redis_start(&w.up, (char *)NULL), 0);
    w.tls_port = port;
    char extra[256];
    snprintf(extra, sizeof extra, "tls_ca = %s", path("ca.pem"));
    connect_timeout = "300ms";
    sluice_start(&w, extra, "open");
    connect_timeout = "1s";
    uint64_t t0 = th_now_ms();
    assert_int_equal(th_log_wait(w.sl.log, "reason=\"handshake timeout\"", 1, 5000), 0);
    assert_true(th_now_ms() - t0 < 3000);
    assert_int_equal(five_incrs(&w), 5);
    /* and again, with backoff: the timeout is not a one-off */
    assert_int_equal(th_log_wait(w.sl.log, "reason=\"handshake timeout\"", 3, 8000), 0);
    assert_int_equal(th_stop(&w.sl), 0);
    th_stop(&w.up);
    th_kill_server(silent);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rediss_store_decides),
        cmocka_unit_test(test_rediss_mutual_tls),
        cmocka_unit_test(test_rediss_wrong_ca),
        cmocka_unit_test(test_rediss_sentinel),
        cmocka_unit_test(test_rediss_sentinel_tls),
        cmocka_unit_test(test_rediss_sentinel_tls_wrong_ca),
        cmocka_unit_test(test_rediss_sentinel_tls_failover),
        cmocka_unit_test(test_rediss_cluster),
        cmocka_unit_test(test_rediss_handshake_timeout),
    };
    /* STORE_TLS_ONLY=<cmocka pattern> runs only matching tests */
    if (getenv("STORE_TLS_ONLY") != NULL)
        cmocka_set_test_filter(getenv("STORE_TLS_ONLY"));
    return th_finish(cmocka_run_group_tests(tests, make_certs, remove_certs));
}

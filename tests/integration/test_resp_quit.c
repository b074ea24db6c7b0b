/* sluice integration tests — the end of a RESP connection: QUIT (the
 * client's side closes together with QUIT's +OK, as Redis closes it).
 *
 * One redis-server, one fake upstream and one sluice are shared:
 *   q  upstream = a fake Redis that answers PING and QUIT but, unlike
 *      Redis, never closes after QUIT: it only closes once sluice does, and
 *      then writes how many bytes came after the QUIT to a file
 *   r  upstream = Redis, no limits */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "integration/harness.h"

static struct th_proc redis_p, sluice_p;
static int qport, rport, fake_port;
static pid_t fake_pid;
static char after_quit_file[128];

/* ---- the fake upstream -------------------------------------------------- */

/* One connection of the fake: inline commands, one a line. PING is
 * answered +PONG; QUIT +OK, and then the connection stays open until the
 * peer closes it; the bytes that came after the QUIT are written to the
 * file <path> (as a decimal count). */
static void fake_conn(int fd, const char *path)
{
    char buf[4096];
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, buf + len, sizeof(buf) - len);
        if (n <= 0)
            return;
        len += (size_t)n;
        char *nl;
        while ((nl = memchr(buf, '\n', len)) != NULL) {
            size_t ll = (size_t)(nl - buf) + 1;
            int quit = ll >= 5 && strncasecmp(buf, "QUIT", 4) == 0;
            const char *ans = quit ? "+OK\r\n"
                              : ll >= 5 && strncasecmp(buf, "PING", 4) == 0 ? "+PONG\r\n"
                                                                            : "-ERR fake\r\n";
            if (th_write_all(fd, ans, strlen(ans)) < 0)
                return;
            memmove(buf, buf + ll, len - ll);
            len -= ll;
            if (quit) {
                size_t after = len;
                while ((n = read(fd, buf, sizeof(buf))) > 0)
                    after += (size_t)n;
                FILE *f = fopen(path, "w");
                if (f != NULL) {
                    fprintf(f, "%zu\n", after);
                    fclose(f);
                }
                return;
            }
        }
        if (len == sizeof(buf))
            return;
    }
}

static void serve_lingering(int lfd, void *arg)
{
    signal(SIGCHLD, SIG_IGN);
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0)
            continue;
        if (fork() == 0) {
            close(lfd);
            fake_conn(fd, arg);
            _exit(0);
        }
        close(fd);
    }
}

/* ---- the group ------------------------------------------------------------ */

static int group_setup(void **state)
{
    (void)state;
    snprintf(after_quit_file, sizeof(after_quit_file), "/tmp/sl_after_quit_%d", (int)getpid());
    unlink(after_quit_file);
    th_track_file(after_quit_file);
    fake_pid = th_fork_server(&fake_port, serve_lingering, after_quit_file);
    if (fake_pid < 0 || th_redis_start(&redis_p, NULL) < 0)
        return -1;
    qport = th_free_port();
    rport = th_free_port();
    char ini[2048];
    snprintf(ini, sizeof(ini),
             "[sluice]\nadmin =\nshutdown_grace = 2s\n[store]\nurl = local\n"
             "[listener q]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n"
             "[listener r]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\n",
             qport, fake_port, rport, redis_p.port);
    if (th_sluice_start(&sluice_p, ini, rport) < 0) {
        th_stop(&redis_p);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    int st = th_stop(&sluice_p);
    th_stop(&redis_p);
    th_kill_server(fake_pid);
    th_kill_all();
    if (st != 0) {
        fprintf(stderr, "sluice did not exit cleanly (status %d)\n", st);
        return -1;
    }
    return 0;
}

static int check_alive(void **state)
{
    (void)state;
    return th_alive_or_report(&sluice_p);
}

/* ---- QUIT ------------------------------------------------------------------- */

/* The client sees EOF right behind QUIT's +OK, whatever the upstream does
 * with its side; what was pipelined after the QUIT never reaches it. (The
 * fake never closes on its own: a sluice that waits for the upstream's
 * close never closes the client either.) */
static void test_quit_closes_with_its_answer(void **state)
{
    (void)state;
    int fd = th_connect(qport);
    assert_true(fd >= 0);
    TH_SEND(fd, "PING\r\nQUIT\r\nPING\r\nPING\r\n");
    TH_EXPECT_CLOSE(fd, "+PONG\r\n+OK\r\n");
    close(fd);
    /* The fake sees sluice close its side, and nothing after the QUIT. */
    char *after = NULL;
    for (uint64_t end = th_now_ms() + TH_MS; after == NULL && th_now_ms() < end;) {
        after = th_slurp(after_quit_file);
        if (after == NULL || strchr(after, '\n') == NULL) {
            free(after);
            after = NULL;
            usleep(10 * 1000); /* polling a condition, not a sleep as synchronisation */
        }
    }
    assert_non_null(after);
    assert_string_equal(after, "0\n");
    free(after);
    unlink(after_quit_file);

    /* Alone on its connection, the same. */
    fd = th_connect(qport);
    assert_true(fd >= 0);
    TH_SEND(fd, "QUIT\r\n");
    TH_EXPECT_CLOSE(fd, "+OK\r\n");
    close(fd);
}

/* The close leaves with the +OK (in the same segment): a client that has
 * read the +OK finds the EOF already there, as from Redis itself, so a
 * pool that checks a connection before reusing it never sends into a
 * closing one. Through real Redis, 100 times: sluice holds the +OK until
 * its FIN (TCP_CORK; the kernel lets go after 200 ms whatever happens, so
 * a few misses are allowed for a stalled machine; before, three in four
 * missed). */
static void test_quit_eof_with_the_ok(void **state)
{
    (void)state;
    int at_once = 0;
    for (int i = 0; i < 100; i++) {
        int fd = th_connect(rport);
        assert_true(fd >= 0);
        TH_SEND(fd, "PING\r\n");
        TH_EXPECT(fd, "+PONG\r\n");
        TH_SEND(fd, "QUIT\r\n");
        TH_EXPECT(fd, "+OK\r\n");
        char c;
        ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
        if (n == 0) {
            at_once++;
        } else {
            assert_true(n < 0); /* no byte after +OK */
            assert_true(th_wait_eof(fd, TH_MS));
        }
        close(fd);
    }
    if (at_once < 90)
        fail_msg("the EOF came with the +OK %d times of 100", at_once);
}

/* Redis answers QUIT inside MULTI with +OK and closes: the transaction
 * never runs, and what follows is not answered. */
static void test_quit_inside_multi(void **state)
{
    (void)state;
    redisContext *d = redisConnect("127.0.0.1", redis_p.port);
    assert_non_null(d);
    redisReply *rr = redisCommand(d, "DEL setup:mq");
    assert_non_null(rr);
    freeReplyObject(rr);
    static const char in[] = "MULTI\r\nSET setup:mq 1\r\nQUIT\r\nGET setup:mq\r\nEXEC\r\n";
    size_t n_sl, n_redis;
    int eof_sl, eof_redis;
    char *via = th_transcript(rport, in, sizeof(in) - 1, &n_sl, TH_MS, &eof_sl);
    char *direct = th_transcript(redis_p.port, in, sizeof(in) - 1, &n_redis, TH_MS, &eof_redis);
    assert_non_null(via);
    assert_non_null(direct);
    assert_true(eof_sl);
    assert_true(eof_redis);
    assert_string_equal(via, direct);
    assert_string_equal(via, "+OK\r\n+QUEUED\r\n+OK\r\n");
    free(via);
    free(direct);
    rr = redisCommand(d, "EXISTS setup:mq");
    assert_non_null(rr);
    assert_int_equal(rr->integer, 0);
    freeReplyObject(rr);
    redisFree(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_quit_closes_with_its_answer, check_alive),
        cmocka_unit_test_teardown(test_quit_eof_with_the_ok, check_alive),
        cmocka_unit_test_teardown(test_quit_inside_multi, check_alive),
    };
    return th_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}

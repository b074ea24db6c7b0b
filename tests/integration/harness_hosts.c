/* sluice integration tests — the harness's helpers for names that resolve
 * later: a sluice started in a mount namespace of its own where a scratch
 * file is /etc/hosts (the machine's is never touched), and that file
 * rewritten in place. Declared in harness.h. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "integration/harness.h"

int th_hosts_write(const char *path, const char *line)
{
    char *base = th_slurp("/etc/hosts");
    FILE *f = fopen(path, "r+"); /* in place: the bind mount holds the inode */
    if (f == NULL) {
        free(base);
        return -1;
    }
    int rc = ftruncate(fileno(f), 0);
    fprintf(f, "%s\n%s", base != NULL ? base : "127.0.0.1 localhost\n", line);
    rc |= fclose(f);
    free(base);
    return rc == 0 ? 0 : -1;
}

int th_sluice_start_hosts(struct th_proc *p, const char *ini, int wait, const char *hosts)
{
    memset(p, 0, sizeof(*p));
    p->port = wait;
    snprintf(p->conf, sizeof(p->conf), "/tmp/sluice-test-hosts-%d.ini", (int)getpid());
    snprintf(p->log, sizeof(p->log), "/tmp/sluice-test-hosts-%d.log", (int)getpid());
    th_track_file(p->conf);
    th_track_file(p->log);
    FILE *f = fopen(p->conf, "w");
    if (f == NULL)
        return -1;
    fputs(ini, f);
    fclose(f);
    fflush(stdout);
    unlink(p->log); /* an older log under this name must not answer for this one (spawn()) */
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(p->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        setpgid(0, 0);
        /* Private mounts: the bind is seen by this process only. */
        if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
            mount(hosts, "/etc/hosts", NULL, MS_BIND, NULL) != 0) {
            fprintf(stderr, "no mount namespace: %s\n", strerror(errno));
            _exit(77);
        }
        execl(th_sluice_bin(), th_sluice_bin(), "-c", p->conf, "-v", "debug", (char *)NULL);
        _exit(127);
    }
    th_track_pid(pid);
    p->pid = pid;
    for (uint64_t end = th_now_ms() + 5000; th_now_ms() < end; usleep(10 * 1000)) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            p->pid = 0;
            return WIFEXITED(st) && WEXITSTATUS(st) == 77 ? 1 : -1;
        }
        int fd = th_connect(wait);
        if (fd >= 0) {
            close(fd);
            return 0;
        }
    }
    return -1;
}

/* sluice — sd_notify over $NOTIFY_SOCKET (see notify.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/notify.h"

#define MSG_MAX 1024 /* a state line and a STATUS= line fit with room to spare */

static struct {
    int                   fd;         /* datagram socket, -1 when off */
    struct sockaddr_un    sa;         /* systemd's socket */
    socklen_t             salen;
    int                   failing;    /* the last send failed (logged once) */
    sl_notify_status_fn  *status_fn;  /* STATUS= source, NULL when none */
    void                 *status_data;
    uv_timer_t            timer;      /* sends STATUS= now and then */
    int                   timer_open;
} nt = { .fd = -1 };

int sl_notify_addr(const char *v, struct sockaddr_un *sa, socklen_t *len)
{
    if (v == NULL || (v[0] != '/' && v[0] != '@'))
        return -1;
    size_t n = strlen(v);
    if (n < 2 || n >= sizeof(sa->sun_path)) /* a path's NUL must fit too */
        return -1;
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path, v, n);
    /* An abstract name starts with a NUL byte and is exactly as long as
     * given: no terminator is counted in its length. */
    if (v[0] == '@') {
        sa->sun_path[0] = '\0';
        *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    } else {
        *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
    }
    return 0;
}

int sl_notify_init(void)
{
    const char *v = getenv("NOTIFY_SOCKET");
    if (v == NULL || v[0] == '\0') {
        unsetenv("NOTIFY_SOCKET");
        return 0;
    }
    int rc = 1;
    if (sl_notify_addr(v, &nt.sa, &nt.salen) < 0) {
        sl_log_error("NOTIFY_SOCKET is not an absolute path or @name: not notifying",
                     "value=\"%.60s\"", v);
        rc = -1;
    } else {
        nt.fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (nt.fd < 0) {
            sl_log_error("cannot make a socket for NOTIFY_SOCKET: not notifying", "err=\"%s\"",
                         strerror(errno));
            rc = -1;
        }
    }
    /* Workers (and anything else we start) must not speak for the service. */
    unsetenv("NOTIFY_SOCKET");
    return rc;
}

int sl_notify_on(void)
{
    return nt.fd >= 0;
}

static void send_msg(const char *msg, size_t len)
{
    /* MSG_DONTWAIT: a systemd that is not reading must not stall the loop. */
    ssize_t n = sendto(nt.fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&nt.sa,
                       nt.salen);
    if (n < 0) {
        if (!nt.failing)
            sl_log_warn("cannot notify systemd (dropped)", "err=\"%s\"", strerror(errno));
        nt.failing = 1;
        return;
    }
    if (nt.failing)
        sl_log_info("notifying systemd again", "%s", "");
    nt.failing = 0;
}

/* Sends <head> (a state line, or "" for none) followed by STATUS= when a
 * source is set. */
static void send_with_status(const char *head)
{
    if (nt.fd < 0)
        return;
    char msg[MSG_MAX];
    size_t len = (size_t)snprintf(msg, sizeof(msg), "%s", head);
    if (nt.status_fn != NULL && len + 16 < sizeof(msg)) {
        if (len > 0)
            msg[len++] = '\n';
        memcpy(msg + len, "STATUS=", 7);
        len += 7;
        char *status = msg + len;
        nt.status_fn(nt.status_data, status, sizeof(msg) - len);
        /* One line: a newline would start another (unknown) assignment. */
        for (char *p = status; *p != '\0'; p++)
            if (*p == '\n')
                *p = ' ';
        len += strlen(status);
    }
    if (len > 0)
        send_msg(msg, len);
}

static void on_status_timer(uv_timer_t *t)
{
    (void)t;
    send_with_status("");
}

void sl_notify_status_start(uv_loop_t *loop, uint64_t every_ms, sl_notify_status_fn *fn, void *data)
{
    if (nt.fd < 0)
        return;
    nt.status_fn = fn;
    nt.status_data = data;
    if (nt.timer_open || every_ms == 0)
        return;
    uv_timer_init(loop, &nt.timer);
    nt.timer_open = 1;
    uv_timer_start(&nt.timer, on_status_timer, every_ms, every_ms);
    uv_unref((uv_handle_t *)&nt.timer);
}

void sl_notify_ready(void)
{
    send_with_status("READY=1");
}

void sl_notify_reloading(void)
{
    if (nt.fd < 0)
        return;
    /* systemd matches the reload by this time (CLOCK_MONOTONIC, as it reads it). */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char msg[96];
    int len = snprintf(msg, sizeof(msg), "RELOADING=1\nMONOTONIC_USEC=%llu",
                       (unsigned long long)ts.tv_sec * 1000000ull +
                           (unsigned long long)ts.tv_nsec / 1000ull);
    send_msg(msg, (size_t)len);
}

void sl_notify_stopping(void)
{
    send_with_status("STOPPING=1");
}

void sl_notify_status(void)
{
    send_with_status("");
}

void sl_notify_close(void)
{
    if (nt.timer_open && !uv_is_closing((uv_handle_t *)&nt.timer))
        uv_close((uv_handle_t *)&nt.timer, NULL);
    nt.timer_open = 0;
    nt.status_fn = NULL;
    if (nt.fd >= 0)
        close(nt.fd);
    nt.fd = -1;
}

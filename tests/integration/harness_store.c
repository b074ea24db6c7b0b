/* sluice integration tests — the harness's helpers for quota-store tests:
 * a Redis serving TLS, waiting on a sluice's metrics, and running a libuv
 * loop of this process (the store, cluster and sentinel clients driven
 * in-process) until something holds. Declared in harness.h. */
#include <stdio.h>
#include <unistd.h>

#include <uv.h>

#include "integration/harness.h"

int th_metric_wait(int port, const char *sample, double want, int ms)
{
    uint64_t end = th_now_ms() + (uint64_t)ms;
    for (;;) {
        if (th_metric(port, sample) == want)
            return 0;
        if (th_now_ms() >= end)
            return -1;
        usleep(20 * 1000); /* polling a process we only see through HTTP */
    }
}

static void on_tick(uv_timer_t *t)
{
    (void)t;
}

int th_run_until(uv_loop_t *loop, th_cond_fn *cond, void *arg, int ms)
{
    uv_timer_t tick;
    uv_timer_init(loop, &tick);
    uv_timer_start(&tick, on_tick, 2, 2);
    uint64_t end = th_now_ms() + (uint64_t)ms;
    int ok;
    while (!(ok = cond == NULL ? 0 : cond(arg)) && th_now_ms() < end)
        uv_run(loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&tick, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    return ok;
}

int th_redis_tls_start(struct th_proc *p, int *tls_port, const char *cert, const char *key,
                       const char *ca, int auth_clients)
{
    char port[16];
    *tls_port = th_free_port();
    snprintf(port, sizeof port, "%d", *tls_port);
    return th_redis_start(p, "--tls-port", port, "--tls-cert-file", cert, "--tls-key-file", key,
                          "--tls-ca-cert-file", ca, "--tls-auth-clients", auth_clients ? "yes" : "no",
                          (char *)NULL);
}

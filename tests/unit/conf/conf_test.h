/* What the tests of the configuration loader share (test_conf.c,
 * test_conf_store.c, test_conf_http.c): loading a text as "t.ini" and
 * checking its errors, a temporary file, the dump and the load -> dump ->
 * load round trip. All static inline: a file that leaves one unused still
 * builds under -Werror. */
#ifndef SL_TEST_CONF_TEST_H
#define SL_TEST_CONF_TEST_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf/conf.h"

#define S 1000000ULL

/* Lines 1-3 of many tests: one valid resp listener. */
#define L_A "[listener a]\nlisten = 127.0.0.1:7001\nupstream = 127.0.0.1:6379\n"

/* Loads <text> as "t.ini"; *errs receives everything written to errf. */
static inline struct sl_conf *load(const char *text, char **errs)
{
    size_t len = 0;
    FILE *f = open_memstream(errs, &len);
    assert_non_null(f);
    struct sl_conf *c = sl_conf_load_string(text, "t.ini", f);
    fclose(f);
    return c;
}

static inline struct sl_conf *load_ok(const char *text)
{
    char *errs = NULL;
    struct sl_conf *c = load(text, &errs);
    if (errs[0] != '\0')
        print_error("unexpected errors:\n%s", errs);
    assert_string_equal(errs, "");
    free(errs);
    assert_non_null(c);
    return c;
}

/* <text> must fail with exactly <expected> (all lines, in order). */
static inline void expect_errors(const char *text, const char *expected)
{
    char *errs = NULL;
    struct sl_conf *c = load(text, &errs);
    assert_string_equal(errs, expected);
    assert_null(c);
    free(errs);
}

static inline char *tmp_file(const char *content, size_t len)
{
    char *path = strdup("/tmp/sluice-test-conf-XXXXXX");
    assert_non_null(path);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, content, len), (ssize_t)len);
    close(fd);
    return path;
}

static inline unsigned port(const struct sl_addr *a)
{
    if (a->ss.ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)&a->ss)->sin6_port);
    return ntohs(((const struct sockaddr_in *)&a->ss)->sin_port);
}

static inline void addr_equal(const struct sl_addr *a, const struct sl_addr *b)
{
    assert_string_equal(a->text, b->text);
    assert_memory_equal(&a->ss, &b->ss, sizeof(a->ss));
    assert_int_equal(a->named, b->named);
    assert_int_equal(a->port, b->port);
}

static inline void str_equal(const char *a, const char *b)
{
    if (a == NULL || b == NULL)
        assert_ptr_equal(a, b);
    else
        assert_string_equal(a, b);
}

static inline void conf_equal(const struct sl_conf *a, const struct sl_conf *b)
{
    assert_int_equal(a->has_admin, b->has_admin);
    if (a->has_admin)
        addr_equal(&a->admin, &b->admin);
    assert_int_equal(a->log_level, b->log_level);
    assert_int_equal(a->decision_log, b->decision_log);
    assert_int_equal(a->decision_log_rate, b->decision_log_rate);
    assert_int_equal(a->shutdown_grace_us, b->shutdown_grace_us);
    assert_int_equal(a->workers, b->workers);
    assert_int_equal(a->workers_auto, b->workers_auto);
    assert_int_equal(a->usage.export_kind, b->usage.export_kind);
    str_equal(a->usage.file, b->usage.file);
    assert_int_equal(a->usage.interval_us, b->usage.interval_us);
    assert_int_equal(a->usage.window_us, b->usage.window_us);
    assert_int_equal(a->usage.ttl_us, b->usage.ttl_us);
    assert_int_equal(a->usage.max_pending, b->usage.max_pending);
    str_equal(a->store.url, b->store.url);
    assert_int_equal(a->store.kind, b->store.kind);
    str_equal(a->store.user, b->store.user);
    if (a->store.kind == SL_STORE_REDIS)
        addr_equal(&a->store.addr, &b->store.addr);
    assert_int_equal(a->store.db, b->store.db);
    str_equal(a->store.password_file, b->store.password_file);
    str_equal(a->store.password, b->store.password);
    assert_int_equal(a->store.sentinel_tls, b->store.sentinel_tls);
    str_equal(a->store.sentinel_user, b->store.sentinel_user);
    str_equal(a->store.sentinel_password, b->store.sentinel_password);
    str_equal(a->store.key_prefix, b->store.key_prefix);
    assert_int_equal(a->store.connect_timeout_us, b->store.connect_timeout_us);
    assert_int_equal(a->store.timeout_us, b->store.timeout_us);
    assert_int_equal(a->store.on_failure, b->store.on_failure);
    assert_int_equal(a->store.lease, b->store.lease);

    assert_int_equal(a->n_listeners, b->n_listeners);
    const struct sl_listener_conf *x = a->listeners, *y = b->listeners;
    for (; x && y; x = x->next, y = y->next) {
        assert_string_equal(x->name, y->name);
        addr_equal(&x->listen, &y->listen);
        addr_equal(&x->upstream, &y->upstream);
        assert_int_equal(x->protocol, y->protocol);
        assert_int_equal(x->n_identity, y->n_identity);
        for (int i = 0; i < x->n_identity; i++) {
            assert_int_equal(x->identity[i], y->identity[i]);
            str_equal(x->identity_header[i], y->identity_header[i]);
        }
        assert_string_equal(x->key_prefix_separator, y->key_prefix_separator);
        assert_int_equal(x->max_connections, y->max_connections);
        assert_int_equal(x->idle_timeout_us, y->idle_timeout_us);
        assert_int_equal(x->connect_timeout_us, y->connect_timeout_us);
        assert_int_equal(x->max_request, y->max_request);
        assert_int_equal(x->resolve_ttl_us, y->resolve_ttl_us);
        assert_int_equal(x->n_trusted_proxies, y->n_trusted_proxies);
        assert_memory_equal(&x->upgrades, &y->upgrades, sizeof(x->upgrades));
        str_equal(x->access_log, y->access_log);
        assert_int_equal(x->access_log_format, y->access_log_format);
        for (int i = 0; i < x->n_trusted_proxies; i++) {
            assert_memory_equal(x->trusted_proxies[i].addr, y->trusted_proxies[i].addr, 16);
            assert_int_equal(x->trusted_proxies[i].bits, y->trusted_proxies[i].bits);
            assert_int_equal(x->trusted_proxies[i].v4, y->trusted_proxies[i].v4);
        }
        assert_int_equal(x->upstream_timeout_us, y->upstream_timeout_us);
        assert_int_equal(x->rate_limit_headers, y->rate_limit_headers);
        assert_int_equal(x->forwarded_headers, y->forwarded_headers);
        assert_int_equal(x->max_request_line, y->max_request_line);
        assert_int_equal(x->max_header_line, y->max_header_line);
        assert_int_equal(x->max_headers, y->max_headers);
        assert_int_equal(x->max_header_size, y->max_header_size);
    }
    assert_null(x);
    assert_null(y);

    assert_int_equal(a->n_limits, b->n_limits);
    const struct sl_limit_conf *m = a->limits, *n = b->limits;
    for (; m && n; m = m->next, n = n->next) {
        assert_string_equal(m->name, n->name);
        assert_string_equal(m->listener, n->listener);
        assert_int_equal(m->lc == NULL, n->lc == NULL);
        if (m->lc)
            assert_string_equal(m->lc->name, n->lc->name);
        assert_int_equal(m->metric, n->metric);
        assert_int_equal(m->rate.amount, n->rate.amount);
        assert_int_equal(m->rate.period_us, n->rate.period_us);
        assert_int_equal(m->burst, n->burst);
        assert_int_equal(m->max, n->max);
        assert_int_equal(m->scope, n->scope);
        assert_int_equal(m->algorithm, n->algorithm);
        assert_int_equal(m->action, n->action);
        assert_int_equal(m->max_delay_us, n->max_delay_us);
        assert_int_equal(m->n_commands, n->n_commands);
        for (int i = 0; i < m->n_commands; i++)
            assert_string_equal(m->commands[i], n->commands[i]);
        assert_int_equal(m->n_methods, n->n_methods);
        for (int i = 0; i < m->n_methods; i++)
            assert_string_equal(m->methods[i], n->methods[i]);
        assert_int_equal(m->n_paths, n->n_paths);
        for (int i = 0; i < m->n_paths; i++)
            assert_string_equal(m->paths[i], n->paths[i]);
        assert_int_equal(m->n_costs, n->n_costs);
        for (int i = 0; i < m->n_costs; i++) {
            assert_string_equal(m->costs[i].cmd, n->costs[i].cmd);
            assert_int_equal(m->costs[i].cost, n->costs[i].cost);
        }
        assert_int_equal(m->default_cost, n->default_cost);
        assert_int_equal(m->n_match_identity, n->n_match_identity);
        for (int i = 0; i < m->n_match_identity; i++)
            assert_string_equal(m->match_identity[i], n->match_identity[i]);
        str_equal(m->replaces, n->replaces);
        assert_int_equal(m->replaces_lc == NULL, n->replaces_lc == NULL);
        if (m->replaces_lc)
            assert_string_equal(m->replaces_lc->name, n->replaces_lc->name);
    }
    assert_null(m);
    assert_null(n);
}

/* Dumps <c> into a malloc'd string. */
static inline char *dump(const struct sl_conf *c)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    assert_non_null(f);
    sl_conf_dump(c, f);
    fclose(f);
    return out;
}

/* load -> dump -> load gives an equal configuration, dumping that gives
 * the same text again, and no line of the dump is <max_line> bytes or
 * longer. Returns the dump (malloc'd). */
static inline char *round_trip_within(const char *text, long max_line)
{
    struct sl_conf *a = load_ok(text);
    char *d1 = dump(a);
    char *errs = NULL;
    struct sl_conf *b = load(d1, &errs);
    if (b == NULL)
        print_error("dump does not load:\n%s\n%s", d1, errs);
    assert_string_equal(errs, "");
    free(errs);
    assert_non_null(b);
    conf_equal(a, b);
    char *d2 = dump(b);
    assert_string_equal(d1, d2);
    for (char *p = d1, *nl; (nl = strchr(p, '\n')) != NULL; p = nl + 1)
        assert_true(nl - p < max_line);
    free(d2);
    sl_conf_free(a);
    sl_conf_free(b);
    return d1;
}

/* The same, and no line of the dump is near inih's limit. */
static inline void round_trip(const char *text)
{
    free(round_trip_within(text, 190));
}

#endif

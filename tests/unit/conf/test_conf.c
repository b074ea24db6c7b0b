/* Unit tests for the loader (src/conf/; conf-i.h lists its files) and dump.c:
 * a full file, the defaults, every error path with its exact "FILE:LINE:
 * message" text, inih's quirks (continuation lines, the 200-byte line,
 * 49-byte names, `key value`), the dump round trip, and every file shipped
 * in conf/. The [store] section and its secrets are in test_conf_store.c,
 * the keys of http listeners and their limits in test_conf_http.c, the
 * shared helpers in conf_test.h. Run from the repo root. */
#include <dirent.h>
#include <netdb.h>

#include "conf/resolve.h"
#include "conf/units.h"
#include "unit/conf/conf_test.h"

static const char full[] =
    "; every key, none at its default\n"                              /* 1 */
    "[sluice]\n"                                                      /* 2 */
    "admin = 127.0.0.1:9200\n"                                        /* 3 */
    "log_level = debug\n"                                             /* 4 */
    "shutdown_grace = 30s\n"                                          /* 5 */
    "\n"                                                              /* 6 */
    "[store]\n"                                                       /* 7 */
    "url = redis://quota@10.0.0.5:6390/3\n"                           /* 8 */
    "key_prefix = q:\n"                                               /* 9 */
    "connect_timeout = 1s\n"                                          /* 10 */
    "timeout = 50ms\n"                                                /* 11 */
    "on_failure = closed\n"                                           /* 12 */
    "lease = 64\n"                                                    /* 13 */
    "\n"                                                              /* 14 */
    "[listener cache]\n"                                              /* 15 */
    "listen = [::1]:6380\n"                                           /* 16 */
    "protocol = resp\n"                                               /* 17 */
    "upstream = 127.0.0.1:6379\n"                                     /* 18 */
    "identity = resp_user client_name key_prefix client_ip none\n"    /* 19 */
    "key_prefix_separator = /\n"                                      /* 20 */
    "max_connections = 500\n"                                         /* 21 */
    "idle_timeout = 0\n"                                              /* 22 */
    "connect_timeout = 750ms\n"                                       /* 23 */
    "max_request = 1MiB\n"                                            /* 24 */
    "\n"                                                              /* 25 */
    "[listener web]\n"                                                /* 26 */
    "listen = *:8080\n"                                               /* 27 */
    "protocol = http\n"                                               /* 28 */
    "upstream = 10.0.0.7:80\n"                                        /* 29 */
    "identity = header:X-Api-Key client_ip\n"                         /* 30 */
    "\n"                                                              /* 31 */
    "[limit writes]\n"                                                /* 32 */
    "listener = cache\n"                                              /* 33 */
    "metric = requests\n"                                             /* 34 */
    "rate = 500/s\n"                                                  /* 35 */
    "burst = 1000\n"                                                  /* 36 */
    "scope = connection\n"                                            /* 37 */
    "algorithm = sliding_log\n"                                       /* 38 */
    "action = delay\n"                                                /* 39 */
    "max_delay = 1s\n"                                                /* 40 */
    "commands = set mset\n"                                           /* 41 */
    "  HSET del ; a comment\n"                                        /* 42 */
    "cost = KEYS=100 scan=10\n"                                       /* 43 */
    "    *=2\n"                                                       /* 44 */
    "match_identity = alice bob\n"                                    /* 45 */
    "  carol\n"                                                       /* 46 */
    "\n"                                                              /* 47 */
    "[limit writes-vip]\n"                                            /* 48 */
    "listener = cache\n"                                              /* 49 */
    "rate = 5000/m\n"                                                 /* 50 */
    "replaces = writes\n"                                             /* 51 */
    "\n"                                                              /* 52 */
    "[limit bw]\n"                                                    /* 53 */
    "listener = *\n"                                                  /* 54 */
    "metric = bytes_out\n"                                            /* 55 */
    "rate = 10MiB/s\n"                                                /* 56 */
    "scope = global\n"                                                /* 57 */
    "algorithm = fixed_window\n"                                      /* 58 */
    "action = shadow\n"                                               /* 59 */
    "\n"                                                              /* 60 */
    "[limit conns]\n"                                                 /* 61 */
    "listener = web\n"                                                /* 62 */
    "metric = connections\n"                                          /* 63 */
    "max = 20\n"                                                      /* 64 */
    "\n"                                                              /* 65 */
    "[limit in]\n"                                                    /* 66 */
    "listener = web\n"                                                /* 67 */
    "metric = bytes_in\n"                                             /* 68 */
    "rate = 1/s\n"                                                    /* 69 */
    "algorithm = gcra\n"                                              /* 70 */
    "[limit sw]\n"                                                    /* 71 */
    "listener = cache\n"                                              /* 72 */
    "rate = 7/h\n"                                                    /* 73 */
    "algorithm = sliding_window\n"                                    /* 74 */
    "cost = 3\n";                                                     /* 75 */

static const struct sl_limit_conf *limit(const struct sl_conf *c, const char *name)
{
    for (const struct sl_limit_conf *m = c->limits; m; m = m->next)
        if (strcmp(m->name, name) == 0)
            return m;
    fail_msg("no limit %s", name);
    return NULL;
}

static void test_full_file(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok(full);
    assert_string_equal(c->file, "t.ini");
    assert_int_equal(c->has_admin, 1);
    assert_string_equal(c->admin.text, "127.0.0.1:9200");
    assert_int_equal(port(&c->admin), 9200);
    assert_int_equal(c->log_level, SL_LOG_DEBUG);
    assert_int_equal(c->shutdown_grace_us, 30 * S);

    assert_string_equal(c->store.url, "redis://quota@10.0.0.5:6390/3");
    assert_int_equal(c->store.kind, SL_STORE_REDIS);
    assert_string_equal(c->store.user, "quota");
    assert_string_equal(c->store.addr.text, "10.0.0.5:6390");
    assert_int_equal(port(&c->store.addr), 6390);
    assert_int_equal(c->store.db, 3);
    assert_null(c->store.password_file);
    assert_null(c->store.password);
    assert_string_equal(c->store.key_prefix, "q:");
    assert_int_equal(c->store.connect_timeout_us, S);
    assert_int_equal(c->store.timeout_us, 50000);
    assert_int_equal(c->store.on_failure, SL_FAIL_CLOSED);
    assert_int_equal(c->store.lease, 64);

    assert_int_equal(c->n_listeners, 2);
    struct sl_listener_conf *l = sl_conf_listener(c, "cache");
    assert_ptr_equal(l, c->listeners);
    assert_int_equal(l->line, 15);
    assert_int_equal(l->listen.ss.ss_family, AF_INET6);
    assert_int_equal(port(&l->listen), 6380);
    assert_string_equal(l->upstream.text, "127.0.0.1:6379");
    assert_int_equal(l->protocol, SL_PROTO_RESP);
    assert_int_equal(l->n_identity, 5);
    assert_int_equal(l->identity[0], SL_ID_RESP_USER);
    assert_int_equal(l->identity[1], SL_ID_CLIENT_NAME);
    assert_int_equal(l->identity[2], SL_ID_KEY_PREFIX);
    assert_int_equal(l->identity[3], SL_ID_CLIENT_IP);
    assert_int_equal(l->identity[4], SL_ID_NONE);
    assert_string_equal(l->key_prefix_separator, "/");
    assert_int_equal(l->max_connections, 500);
    assert_int_equal(l->idle_timeout_us, 0);
    assert_int_equal(l->connect_timeout_us, 750000);
    assert_int_equal(l->max_request, 1048576);

    struct sl_listener_conf *w = sl_conf_listener(c, "web");
    assert_ptr_equal(w, l->next);
    assert_null(w->next);
    assert_int_equal(w->protocol, SL_PROTO_HTTP);
    assert_int_equal(w->n_identity, 2);
    assert_int_equal(w->identity[0], SL_ID_HEADER);
    assert_string_equal(w->identity_header[0], "X-Api-Key");
    assert_int_equal(w->identity[1], SL_ID_CLIENT_IP);
    assert_null(w->identity_header[1]);
    assert_null(sl_conf_listener(c, "nope"));

    assert_int_equal(c->n_limits, 6);
    const struct sl_limit_conf *m = limit(c, "writes");
    assert_ptr_equal(m, c->limits);
    assert_int_equal(m->line, 32);
    assert_string_equal(m->listener, "cache");
    assert_ptr_equal(m->lc, l);
    assert_int_equal(m->metric, SL_METRIC_REQUESTS);
    assert_int_equal(m->rate.amount, 500);
    assert_int_equal(m->rate.period_us, S);
    assert_int_equal(m->burst, 1000);
    assert_int_equal(m->scope, SL_SCOPE_CONNECTION);
    assert_int_equal(m->algorithm, SL_ALGO_SLIDING_LOG);
    assert_int_equal(m->action, SL_ACTION_DELAY);
    assert_int_equal(m->max_delay_us, S);
    assert_int_equal(m->n_commands, 4);
    assert_string_equal(m->commands[0], "SET");
    assert_string_equal(m->commands[1], "MSET");
    assert_string_equal(m->commands[2], "HSET");
    assert_string_equal(m->commands[3], "DEL");
    assert_int_equal(m->n_costs, 2);
    assert_string_equal(m->costs[0].cmd, "KEYS");
    assert_int_equal(m->costs[0].cost, 100);
    assert_string_equal(m->costs[1].cmd, "SCAN");
    assert_int_equal(m->costs[1].cost, 10);
    assert_int_equal(m->default_cost, 2);
    assert_int_equal(m->n_match_identity, 3);
    /* Bare values: the listener's first identity source (resp_user). */
    assert_string_equal(m->match_identity[0], "user:alice");
    assert_string_equal(m->match_identity[2], "user:carol");
    assert_null(m->replaces);
    assert_null(m->replaces_lc);

    const struct sl_limit_conf *vip = limit(c, "writes-vip");
    assert_string_equal(vip->replaces, "writes");
    assert_ptr_equal(vip->replaces_lc, m);
    assert_int_equal(vip->burst, 84); /* 5000/m = 83.3 a second, rounded up */
    assert_int_equal(vip->n_commands, 0);
    assert_null(vip->commands);
    assert_int_equal(vip->default_cost, 1);

    const struct sl_limit_conf *bw = limit(c, "bw");
    assert_string_equal(bw->listener, "*");
    assert_null(bw->lc);
    assert_int_equal(bw->metric, SL_METRIC_BYTES_OUT);
    assert_int_equal(bw->rate.amount, 10485760);
    assert_int_equal(bw->burst, 10485760);
    assert_int_equal(bw->scope, SL_SCOPE_GLOBAL);
    assert_int_equal(bw->algorithm, SL_ALGO_FIXED_WINDOW);
    assert_int_equal(bw->action, SL_ACTION_SHADOW);

    const struct sl_limit_conf *cn = limit(c, "conns");
    assert_ptr_equal(cn->lc, w);
    assert_int_equal(cn->metric, SL_METRIC_CONNECTIONS);
    assert_int_equal(cn->max, 20);
    assert_int_equal(cn->rate.amount, 0);
    assert_int_equal(cn->burst, 0);

    const struct sl_limit_conf *in = limit(c, "in");
    assert_int_equal(in->metric, SL_METRIC_BYTES_IN);
    assert_int_equal(in->burst, 1);
    assert_int_equal(in->algorithm, SL_ALGO_GCRA);

    const struct sl_limit_conf *sw = limit(c, "sw");
    assert_int_equal(sw->burst, 1); /* 7/h: a fraction a second, at least 1 */
    assert_int_equal(sw->algorithm, SL_ALGO_SLIDING_WINDOW);
    assert_int_equal(sw->default_cost, 3);
    assert_int_equal(sw->n_costs, 0);
    sl_conf_free(c);
}

static void test_defaults(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok(L_A "[limit x]\nlistener = a\nrate = 10/s\n");
    assert_int_equal(c->has_admin, 1);
    assert_string_equal(c->admin.text, "127.0.0.1:9121");
    assert_int_equal(port(&c->admin), 9121);
    assert_int_equal(c->log_level, SL_LOG_INFO);
    assert_int_equal(c->shutdown_grace_us, 10 * S);
    assert_string_equal(c->store.url, "local");
    assert_int_equal(c->store.kind, SL_STORE_LOCAL);
    assert_null(c->store.user);
    assert_int_equal(c->store.db, 0);
    assert_null(c->store.password_file);
    assert_string_equal(c->store.key_prefix, "sluice:");
    assert_int_equal(c->store.connect_timeout_us, 200000);
    assert_int_equal(c->store.timeout_us, 25000);
    assert_int_equal(c->store.on_failure, SL_FAIL_LOCAL);
    assert_int_equal(c->store.lease, 0);

    struct sl_listener_conf *l = c->listeners;
    assert_int_equal(l->protocol, SL_PROTO_RESP);
    assert_int_equal(l->n_identity, 1);
    assert_int_equal(l->identity[0], SL_ID_CLIENT_IP);
    assert_string_equal(l->key_prefix_separator, ":");
    assert_int_equal(l->max_connections, 10000);
    assert_int_equal(l->idle_timeout_us, 300 * S);
    assert_int_equal(l->connect_timeout_us, 2 * S);
    assert_int_equal(l->max_request, 512000000);

    const struct sl_limit_conf *m = c->limits;
    assert_int_equal(m->metric, SL_METRIC_REQUESTS);
    assert_int_equal(m->burst, 10);
    assert_int_equal(m->scope, SL_SCOPE_IDENTITY);
    assert_int_equal(m->algorithm, SL_ALGO_TOKEN_BUCKET);
    assert_int_equal(m->action, SL_ACTION_REJECT);
    assert_int_equal(m->max_delay_us, 200000);
    assert_int_equal(m->n_commands, 0);
    assert_int_equal(m->n_costs, 0);
    assert_int_equal(m->default_cost, 1);
    assert_int_equal(m->n_match_identity, 0);
    assert_null(m->match_identity);
    assert_null(m->replaces);
    sl_conf_free(c);

    /* An empty file is a valid (if useless) configuration. */
    c = load_ok("");
    assert_int_equal(c->n_listeners, 0);
    assert_int_equal(c->n_limits, 0);
    assert_null(c->listeners);
    sl_conf_free(c);
}

static void test_admin_off(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok("[sluice]\nadmin =\n");
    assert_int_equal(c->has_admin, 0);
    sl_conf_free(c);
    c = load_ok("[sluice]\nadmin = off\n");
    assert_int_equal(c->has_admin, 0);
    sl_conf_free(c);
    c = load_ok("[sluice]\nadmin = *:9999\n");
    assert_int_equal(c->has_admin, 1);
    assert_int_equal(port(&c->admin), 9999);
    sl_conf_free(c);
}

static void test_documented_empty_forms(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok("[store]\npassword_file =\n" L_A
                                "[limit x]\nlistener = a\nrate = 1/s\nmatch_identity =\n"
                                "replaces =\ncommands = *\n");
    assert_null(c->store.password_file);
    assert_null(c->limits->replaces);
    assert_int_equal(c->limits->n_match_identity, 0);
    assert_int_equal(c->limits->n_commands, 0);
    sl_conf_free(c);
}

static void test_workers(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok("[sluice]\n");
    assert_int_equal(c->workers, 1);
    sl_conf_free(c);
    c = load_ok("[sluice]\nworkers = 64\n");
    assert_int_equal(c->workers, 64);
    assert_int_equal(c->workers_auto, 0);
    sl_conf_free(c);
    c = load_ok("[sluice]\nworkers = auto\n");
    assert_true(c->workers >= 1 && c->workers <= 64);
    assert_int_equal(c->workers_auto, 1);
    sl_conf_free(c);
    const char *bad[] = { "0", "65", "-1", "two", "Auto", "" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[64], want[160];
        snprintf(text, sizeof(text), "[sluice]\nworkers = %s\n", bad[i]);
        snprintf(want, sizeof(want), "t.ini:2: workers: expected auto or a number of processes "
                 "from 1 to 64, got '%s'\n", bad[i]);
        expect_errors(text, want);
    }
    /* Limits counted in process would be counted by each worker alone. */
    const char *limit = "[listener a]\nlisten = 127.0.0.1:7001\nupstream = 127.0.0.1:6379\n"
                        "[limit l]\nlistener = a\nrate = 10/s\n";
    char text[512];
    snprintf(text, sizeof(text), "[sluice]\nadmin =\nworkers = 2\n%s", limit);
    expect_errors(text, "t.ini:3: workers: 2 processes need a shared store for their limits "
                        "(url = redis://...); with url = local each would count alone\n");
    snprintf(text, sizeof(text), "[sluice]\nadmin =\nworkers = 2\n[store]\n"
             "url = redis://127.0.0.1:6390\n%s", limit);
    c = load_ok(text);
    assert_int_equal(c->workers, 2);
    sl_conf_free(c);
    snprintf(text, sizeof(text), "[sluice]\nadmin =\nworkers = 1\n%s", limit);
    c = load_ok(text);
    sl_conf_free(c);
}

static void test_cost_and_commands(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok(L_A "[limit x]\nlistener = a\nrate = 5/s\ncost = 5\n"
                                "commands = get Client|SetName get\n");
    const struct sl_limit_conf *m = c->limits;
    assert_int_equal(m->default_cost, 5);
    assert_int_equal(m->n_costs, 0);
    assert_int_equal(m->n_commands, 2); /* the repeated GET counts once */
    assert_string_equal(m->commands[1], "CLIENT|SETNAME");
    sl_conf_free(c);

    c = load_ok(L_A "[limit x]\nlistener = a\nrate = 1/s\ncost = keys=0\n");
    assert_int_equal(c->limits->n_costs, 1);
    assert_int_equal(c->limits->costs[0].cost, 0);
    assert_int_equal(c->limits->default_cost, 1);
    sl_conf_free(c);

    expect_errors(L_A "[limit x]\nlistener = a\nrate = 1/s\ncost = KEYS=1 keys=2\n",
                  "t.ini:7: cost: KEYS is given twice\n");
    expect_errors(L_A "[limit x]\nlistener = a\nrate = 5/s\ncost = 2 *=3\n",
                  "t.ini:7: cost: the default cost is given twice ('*=3')\n");
    expect_errors(L_A "[limit x]\nlistener = a\nrate = 1/s\ncost = KEYS=x\n",
                  "t.ini:7: cost: expected a number or COMMAND=N entries like KEYS=100 *=1, "
                  "got 'KEYS=x'\n");
    expect_errors(L_A "[limit x]\nlistener = a\nrate = 1/s\ncost = =4\n",
                  "t.ini:7: cost: expected a number or COMMAND=N entries like KEYS=100 *=1, "
                  "got '=4'\n");
    expect_errors(L_A "[limit x]\nlistener = a\nrate = 1/s\ncost = K@Y=4\n",
                  "t.ini:7: cost: 'K@Y' is not a command name\n");
    expect_errors(L_A "[limit x]\nlistener = a\nrate = 1/s\ncost = 1000000001\n",
                  "t.ini:7: cost: expected a number or COMMAND=N entries like KEYS=100 *=1, "
                  "got '1000000001'\n");
    expect_errors(L_A "[limit x]\nlistener = a\nrate = 1/s\ncommands = GET SET$\n",
                  "t.ini:7: commands: expected command names like GET SET, or *, got 'SET$'\n");
    expect_errors(L_A "[limit x]\nlistener = a\nrate = 1/s\ncommands = GET *\n",
                  "t.ini:7: commands: '*' means every command; do not list names with it\n");
    expect_errors(L_A "[limit x]\nlistener = a\nmetric = bytes_in\nrate = 1/s\ncost = 2\n",
                  "t.ini:8: cost: only for metric = requests\n");
}

/* A cost above what the limit holds could never pass: an error, at the
 * cost line. The buckets hold burst (default: a second of the rate); the
 * windows hold the rate's amount and ignore burst. */
static void test_cost_above_capacity(void **state)
{
    (void)state;
    expect_errors(L_A "[limit x]\nlistener = a\nrate = 1000/m\ncommands = KEYS SCAN\n"
                  "cost = KEYS=100 SCAN=10 *=1\n",
                  "t.ini:8: cost: KEYS=100 is more than the burst (17), so KEYS could never pass; "
                  "raise burst or lower the cost\n");
    expect_errors(L_A "[limit x]\nlistener = a\nrate = 10/s\nburst = 3\nalgorithm = gcra\n"
                  "cost = A=4 B=3\n  C=9 *=5\n",
                  "t.ini:9: cost: A=4 is more than the burst (3), so A could never pass (nor could "
                  "the other commands whose cost is above it); raise burst or lower the cost\n"
                  "t.ini:9: cost: 5 is more than the burst (3), so no request could pass; raise "
                  "burst or lower the cost\n");
    expect_errors(L_A "[limit x]\nlistener = a\nrate = 10/s\nburst = 3\naction = delay\ncost = 4\n",
                  "t.ini:9: cost: 4 is more than the burst (3), so no request could pass; raise "
                  "burst or lower the cost\n");
    expect_errors(L_A "[limit x]\nlistener = a\nrate = 5/m\nburst = 100\n"
                  "algorithm = sliding_window\ncost = KEYS=6\n",
                  "t.ini:9: cost: KEYS=6 is more than the 5 a window of sliding_window holds (the "
                  "rate's amount), so KEYS could never pass; raise rate or lower the cost\n");
    /* at the capacity it fits */
    struct sl_conf *c = load_ok(L_A "[limit x]\nlistener = a\nrate = 1000/m\nburst = 100\n"
                                "cost = KEYS=100 *=100\n"
                                "[limit y]\nlistener = a\nrate = 5/m\nburst = 1\n"
                                "algorithm = fixed_window\ncost = KEYS=5 *=0\n");
    sl_conf_free(c);
}

static void test_unknown_section(void **state)
{
    (void)state;
    expect_errors("[foo]\nx = 1\n[listener]\ny = 2\n[sluice main]\n[limit a b]\n[]\n"
                  "[listener a/b]\n[Listener x]\n",
                  "t.ini:1: unknown section [foo] (expected [sluice], [store], [listener NAME] "
                  "or [limit NAME])\n"
                  "t.ini:3: [listener] needs a name: [listener NAME]\n"
                  "t.ini:5: [sluice] takes no name\n"
                  "t.ini:6: [limit a ...]: a section name is one word\n"
                  "t.ini:7: unknown section [] (expected [sluice], [store], [listener NAME] "
                  "or [limit NAME])\n"
                  "t.ini:8: invalid name 'a/b': use letters, digits, '_', '-' and '.'\n"
                  "t.ini:9: unknown section [Listener x] (expected [sluice], [store], "
                  "[listener NAME] or [limit NAME])\n");
    expect_errors("[store] junk\nurl = local\n", "t.ini:1: unexpected text after ']'\n");
    /* A comment after the header is fine. */
    sl_conf_free(load_ok("[store]   ; where state lives\nurl = local\n[sluice] # x\n"));
}

static void test_unknown_key(void **state)
{
    (void)state;
    expect_errors(L_A "bogus = 1\n[sluice]\nurl = local\n[store]\nadmin = *:1\n",
                  "t.ini:4: unknown key 'bogus' in [listener a]\n"
                  "t.ini:6: unknown key 'url' in [sluice]\n"
                  "t.ini:8: unknown key 'admin' in [store]\n");
    expect_errors("x = 1\n[store]\n", "t.ini:1: key 'x' outside of any section\n");
    /* Keys are exact and case-sensitive. */
    expect_errors(L_A "Listen = *:1\n", "t.ini:4: unknown key 'Listen' in [listener a]\n");
}

static void test_bad_values(void **state)
{
    (void)state;
    struct { const char *line; const char *msg; } cases[] = {
        { "idle_timeout = abc", "idle_timeout: expected a duration like 250ms, 2s, 5m, got 'abc'" },
        { "idle_timeout = 366d", "idle_timeout: must be at most 365d, got '366d'" },
        { "connect_timeout = 1us", "connect_timeout: must be at least 1ms, got '1us'" },
        { "max_request = 10k", "max_request: expected a size like 512, 64kb, 10MiB, got '10k'" },
        { "max_request = 0", "max_request: must be at least 1, got '0'" },
        { "max_request = 2TiB", "max_request: must be at most 1TiB, got '2TiB'" },
        { "max_connections = 1e3", "max_connections: expected a whole number, got '1e3'" },
        { "max_connections = 10kb", "max_connections: expected a whole number, got '10kb'" },
        { "max_connections = 0", "max_connections: must be at least 1, got '0'" },
        { "max_connections = 4294967296", "max_connections: must be at most 4294967295, got '4294967296'" },
        { "max_connections = 99999999999999999999", "max_connections: expected a whole number, got '99999999999999999999'" },
        { "protocol = RESP", "protocol: expected one of resp | http | tcp, got 'RESP'" },
        { "identity = ip", "identity: expected resp_user, client_name, key_prefix, client_ip, header:NAME, tls_subject or none, got 'ip'" },
        { "identity = client_ip client_ip", "identity: 'client_ip' is listed twice" },
        { "identity = none client_ip", "identity: nothing can follow 'none', got 'client_ip'" },
        { "identity = header:", "identity: expected header:NAME with an HTTP header name, got 'header:'" },
        { "identity = header:a(b)", "identity: expected header:NAME with an HTTP header name, got 'header:a(b)'" },
        { "key_prefix_separator = 12345678", "key_prefix_separator: expected 1 to 7 characters without blanks, got '12345678'" },
        { "key_prefix_separator = a b", "key_prefix_separator: expected 1 to 7 characters without blanks, got 'a b'" },
        { "listen = 127.0.0.1", "listen: expected an address like 127.0.0.1:6380, [::1]:6380 or *:6380, got '127.0.0.1'" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char text[512], want[512];
        /* The key goes into a fresh listener section (listen/upstream set after it). */
        snprintf(text, sizeof(text), "[listener a]\n%s\nupstream = 127.0.0.1:6379\n%s",
                 cases[i].line,
                 strncmp(cases[i].line, "listen ", 7) == 0 ? "" : "listen = 127.0.0.1:7001\n");
        snprintf(want, sizeof(want), "t.ini:2: %s\n", cases[i].msg);
        expect_errors(text, want);
    }
    expect_errors("[listener w]\nlisten = *:80\nupstream = 10.0.0.1:80\nprotocol = http\n"
                  "identity = header:a header:b header:c header:d header:e header:f header:g\n"
                  "  header:h header:i\n",
                  "t.ini:6: identity: more than 8 sources\n");
    /* header:NAME is case-insensitive when looking for repeats. */
    expect_errors("[listener w]\nlisten = *:80\nupstream = 10.0.0.1:80\nprotocol = http\n"
                  "identity = header:X-Key header:x-key\n",
                  "t.ini:5: identity: 'header:x-key' is listed twice\n");

    struct { const char *section, *line, *msg; } more[] = {
        { "[sluice]", "log_level = verbose", "log_level: expected one of error | warn | info | debug, got 'verbose'" },
        { "[sluice]", "admin = localhost", "admin: expected an address like 127.0.0.1:9121, or nothing for off, got 'localhost'" },
        { "[sluice]", "shutdown_grace = -1s", "shutdown_grace: expected a duration like 250ms, 2s, 5m, got '-1s'" },
        { "[store]", "on_failure = fail", "on_failure: expected one of local | open | closed, got 'fail'" },
        { "[store]", "timeout = 0", "timeout: must be at least 1us, got '0'" },
        { "[store]", "key_prefix = a b", "key_prefix: expected one word of at most 64 bytes, got 'a b'" },
        { "[store]", "key_prefix = 12345678901234567890123456789012345678901234567890123456789012345",
          "key_prefix: expected one word of at most 64 bytes, got '12345678901234567890123456789012345678901234567890123456789012345'" },
    };
    for (size_t i = 0; i < sizeof(more) / sizeof(more[0]); i++) {
        char text[512], want[512];
        snprintf(text, sizeof(text), "%s\n%s\n", more[i].section, more[i].line);
        snprintf(want, sizeof(want), "t.ini:2: %s\n", more[i].msg);
        expect_errors(text, want);
    }

    struct { const char *line, *msg; } lim[] = {
        { "metric = calls", "metric: expected one of requests | bytes_in | bytes_out | connections, got 'calls'" },
        { "scope = user", "scope: expected one of identity | connection | global, got 'user'" },
        { "algorithm = leaky", "algorithm: expected one of token_bucket | gcra | sliding_window | sliding_log | fixed_window, got 'leaky'" },
        { "action = drop", "action: expected one of reject | delay | shadow, got 'drop'" },
        { "max_delay = 2h", "max_delay: must be at most 1h, got '2h'" },
        { "burst = 0", "burst: must be at least 1, got '0'" },
        { "burst = 1099511627777", "burst: must be at most 1TiB, got '1099511627777'" },
        { "rate = 500", "rate: expected a rate like 500/s, 100/m or 10MiB/s, got '500'" },
        { "rate = 0/s", "rate: expected a rate like 500/s, 100/m or 10MiB/s, got '0/s'" },
        { "rate = 2TiB/s", "rate: at most 1099511627776 per period, got '2TiB/s'" },
        { "rate = 1/366d", "rate: the period must be at most 365d, got '1/366d'" },
        { "match_identity = [x]", "match_identity: an entry cannot start with '[', got '[x]'" },
        { "match_identity = #x", "match_identity: an entry cannot start with '#', got '#x'" },
        { "listener = a b", "listener: expected one word of at most 49 bytes, got 'a b'" },
    };
    for (size_t i = 0; i < sizeof(lim) / sizeof(lim[0]); i++) {
        char text[512], want[512];
        int is_listener = strncmp(lim[i].line, "listener", 8) == 0;
        int is_rate = strncmp(lim[i].line, "rate", 4) == 0;
        snprintf(text, sizeof(text), L_A "[limit x]\n%s\n%s%s", lim[i].line,
                 is_listener ? "" : "listener = a\n", is_rate ? "" : "rate = 1/s\n");
        /* A key with a bad value is not also reported as missing. */
        snprintf(want, sizeof(want), "t.ini:5: %s\n", lim[i].msg);
        expect_errors(text, want);
    }
}

static void test_duplicate_key(void **state)
{
    (void)state;
    expect_errors(L_A "listen = 127.0.0.1:7002\n",
                  "t.ini:4: duplicate key 'listen' (first set on line 2)\n");
    /* List keys too: more entries go on continuation lines, not a second key. */
    expect_errors(L_A "identity = client_ip\nidentity = resp_user\n",
                  "t.ini:5: duplicate key 'identity' (first set on line 4)\n");
    /* A duplicate key's continuation lines are dropped without more errors. */
    expect_errors(L_A "[limit x]\nlistener = a\nrate = 1/s\ncommands = GET\ncommands = SET\n"
                  "  DEL\n  $$$\n",
                  "t.ini:8: duplicate key 'commands' (first set on line 7)\n");
}

static void test_continuation(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok(L_A "identity = resp_user\n"
                                "\tclient_ip ; from the address\n"
                                "\n"
                                "  ; a comment line between continuation lines\n"
                                "[limit x]\nlistener = a\nrate = 1/s\nburst = 3\n"
                                "match_identity = a\n  b c\n   d\n"
                                "cost = GET=2\n SET=3\n");
    assert_int_equal(c->listeners->n_identity, 2);
    assert_int_equal(c->listeners->identity[1], SL_ID_CLIENT_IP);
    assert_int_equal(c->limits->n_match_identity, 4);
    assert_string_equal(c->limits->match_identity[3], "user:d");
    assert_int_equal(c->limits->n_costs, 2);
    sl_conf_free(c);

    /* Indenting a single-value key after another key is a continuation in
     * inih's eyes, so an error here. */
    expect_errors("[listener a]\n  listen = 127.0.0.1:7001\n  upstream = 127.0.0.1:6379\n",
                  "t.ini:1: [listener a]: missing 'upstream'\n"
                  "t.ini:3: unexpected indented line: it would continue 'listen', which takes "
                  "one value (only commands, cost, identity, match_identity, methods, paths, "
                  "trusted_proxies and upgrades continue on indented lines)\n");
    /* An indented section header would be swallowed by inih: refused. */
    expect_errors(L_A "identity = client_ip\n  [limit x]\n",
                  "t.ini:5: a section header must not be indented\n");
    /* Errors inside a continuation line carry its own line number. */
    expect_errors(L_A "identity = client_ip\n  bogus\n",
                  "t.ini:5: identity: expected resp_user, client_name, key_prefix, client_ip, "
                  "header:NAME, tls_subject or none, got 'bogus'\n");
    /* After a header, an indented key is an ordinary key. */
    c = load_ok("[listener a]\n   listen = 127.0.0.1:7001\nupstream = 127.0.0.1:6379\n");
    sl_conf_free(c);
    /* The continuation of an unknown key is not reported again. */
    expect_errors(L_A "bogus = 1\n  2\n", "t.ini:4: unknown key 'bogus' in [listener a]\n");
}

static void test_duplicate_sections(void **state)
{
    (void)state;
    expect_errors(L_A "[listener a]\nlisten = 127.0.0.1:7002\n"
                  "[sluice]\n[store]\n[sluice]\nadmin = *:1\n[store]\n"
                  "[limit x]\nlistener = a\nrate = 1/s\n[limit x]\n",
                  "t.ini:4: duplicate section [listener a] (first on line 1)\n"
                  "t.ini:8: duplicate section [sluice] (first on line 6)\n"
                  "t.ini:10: duplicate section [store] (first on line 7)\n"
                  "t.ini:14: duplicate section [limit x] (first on line 11)\n");
    /* A listener and a limit may share a name: different kinds. */
    sl_conf_free(load_ok(L_A "[limit a]\nlistener = a\nrate = 1/s\n"));
}

static void test_references(void **state)
{
    (void)state;
    expect_errors(L_A "[limit x]\nlistener = b\nrate = 1/s\n",
                  "t.ini:5: listener: no [listener b]\n");
    expect_errors(L_A "[limit x]\nlistener = a\nrate = 1/s\nreplaces = y\n",
                  "t.ini:7: replaces: no [limit y]\n");
    expect_errors(L_A "[limit x]\nlistener = a\nrate = 1/s\nreplaces = x\n",
                  "t.ini:7: replaces: a limit cannot replace itself\n");
    expect_errors(L_A "[limit x]\nlistener = a\nrate = 1/s\nreplaces = y\n"
                  "[limit y]\nlistener = a\nrate = 1/s\nreplaces = x\n",
                  "t.ini:7: replaces: [limit x] is part of a cycle\n"
                  "t.ini:11: replaces: [limit y] is part of a cycle\n");
    /* Forward references are fine. */
    struct sl_conf *c = load_ok("[limit x]\nlistener = a\nrate = 1/s\nreplaces = y\n"
                                "[limit y]\nlistener = a\nrate = 1/s\n" L_A);
    assert_ptr_equal(c->limits->lc, c->listeners);
    assert_ptr_equal(c->limits->replaces_lc, c->limits->next);
    sl_conf_free(c);
}

static void test_missing_required(void **state)
{
    (void)state;
    expect_errors("[listener a]\n[listener b]\nlisten = 127.0.0.1:1\n[limit x]\n",
                  "t.ini:1: [listener a]: missing 'listen'\n"
                  "t.ini:1: [listener a]: missing 'upstream'\n"
                  "t.ini:2: [listener b]: missing 'upstream'\n"
                  "t.ini:4: [limit x]: missing 'listener'\n"
                  "t.ini:4: [limit x]: missing 'rate'\n");
    expect_errors(L_A "[limit c]\nlistener = a\nmetric = connections\n",
                  "t.ini:4: [limit c]: metric = connections needs 'max'\n");
    /* An empty listener is no listener (found by fuzz_conf: -T crashed). */
    expect_errors(L_A "[limit e]\nlistener =\nrate = 5/s\n",
                  "t.ini:5: listener: expected a listener's name or *, got ''\n");
    expect_errors(L_A "[limit c]\nlistener = a\nmetric = connections\nmax = 5\nscope = connection\n",
                  "t.ini:8: scope: a connection limit counts connections per identity or globally, "
                  "not per connection\n");
    expect_errors(L_A "[limit c]\nlistener = a\nmetric = connections\nmax = 5\nrate = 5/s\n"
                  "burst = 3\n",
                  "t.ini:8: rate: not for metric = connections (use max = N)\n"
                  "t.ini:9: burst: not for metric = connections\n");
    expect_errors(L_A "[limit c]\nlistener = a\nrate = 5/s\nmax = 5\n",
                  "t.ini:7: max: only for metric = connections (use rate)\n");
    expect_errors(L_A "[limit c]\nlistener = a\nrate = 5MiB/s\n",
                  "t.ini:6: rate: size units are for metric = bytes_in or bytes_out\n");
    /* A size is no count: burst and rate of a requests limit take none
     * (metric may come after them), max none at all; bytes limits do. */
    expect_errors(L_A "[limit c]\nlistener = a\nrate = 5/s\nburst = 10kb\n",
                  "t.ini:7: burst: size units are for metric = bytes_in or bytes_out; "
                  "a requests limit's burst is a count\n");
    expect_errors(L_A "[limit c]\nlistener = a\nburst = 1b\nrate = 10MiB/s\nmetric = requests\n",
                  "t.ini:6: burst: size units are for metric = bytes_in or bytes_out; "
                  "a requests limit's burst is a count\n"
                  "t.ini:7: rate: size units are for metric = bytes_in or bytes_out\n");
    expect_errors(L_A "[limit c]\nlistener = a\nmetric = connections\nmax = 10kb\n",
                  "t.ini:7: max: expected a whole number, got '10kb'\n");
    struct sl_conf *c = load_ok(L_A "[limit b]\nlistener = a\nburst = 64KiB\nrate = 10MiB/s\n"
                                "metric = bytes_out\n[limit r]\nlistener = a\nrate = 5/s\n"
                                "burst = 20\n");
    assert_int_equal(c->limits->burst, 65536);
    assert_int_equal(c->limits->next->burst, 20);
    sl_conf_free(c);
}

static void test_protocol_rules(void **state)
{
    (void)state;
    const char *web = "[listener w]\nlisten = *:8080\nupstream = 10.0.0.1:80\nprotocol = http\n";
    char text[1024];
    snprintf(text, sizeof(text), "%s[limit x]\nlistener = w\nrate = 1/s\ncommands = GET\n"
             "cost = GET=1\n", web);
    /* On an http listener cost names are methods. */
    expect_errors(text, "t.ini:8: commands: only for resp listeners ([listener w] is http)\n");
    /* A bare cost is fine anywhere requests are counted. */
    snprintf(text, sizeof(text), "%s[limit x]\nlistener = w\nrate = 2/s\ncost = 2\n", web);
    sl_conf_free(load_ok(text));
    /* listener = * takes in the http listener. */
    snprintf(text, sizeof(text), L_A "%s[limit x]\nlistener = *\nrate = 1/s\ncommands = GET\n", web);
    expect_errors(text, "t.ini:11: commands: only for resp listeners (listener = * includes "
                        "[listener w], which is http)\n");
    snprintf(text, sizeof(text), L_A "[limit x]\nlistener = *\nrate = 1/s\ncommands = GET\n");
    sl_conf_free(load_ok(text));

    expect_errors("[listener w]\nlisten = *:8080\nupstream = 10.0.0.1:80\nprotocol = http\n"
                  "identity = resp_user client_name key_prefix client_ip\n",
                  "t.ini:5: identity: resp_user needs protocol = resp (this listener is http)\n"
                  "t.ini:5: identity: client_name needs protocol = resp (this listener is http)\n"
                  "t.ini:5: identity: key_prefix needs protocol = resp (this listener is http)\n");
    expect_errors(L_A "identity = header:X-User\n",
                  "t.ini:4: identity: header:X-User needs protocol = http (this listener is resp)\n");
    expect_errors("[listener t]\nlisten = *:5432\nupstream = 10.0.0.1:5432\nprotocol = tcp\n"
                  "identity = header:X-User\n[limit x]\nlistener = t\nrate = 1/s\n",
                  "t.ini:5: identity: header:X-User needs protocol = http (this listener is tcp)\n"
                  "t.ini:6: [limit x]: a tcp listener has no requests to count; use metric = "
                  "bytes_in, bytes_out or connections\n");
}

static void test_listen_clash(void **state)
{
    (void)state;
    expect_errors(L_A "[listener b]\nlisten = 127.0.0.1:7001\nupstream = 127.0.0.1:6379\n"
                  "[listener c]\nlisten = *:7001\nupstream = 127.0.0.1:6379\n",
                  "t.ini:5: listen: 127.0.0.1:7001 clashes with [listener a] (line 2)\n"
                  "t.ini:8: listen: *:7001 clashes with [listener a] (line 2)\n"
                  "t.ini:8: listen: *:7001 clashes with [listener b] (line 5)\n");
    /* Same address, other port; other address, same port: fine. */
    sl_conf_free(load_ok(L_A "[listener b]\nlisten = 127.0.0.1:7002\nupstream = 127.0.0.1:6379\n"
                         "[listener c]\nlisten = 127.0.0.2:7001\nupstream = 127.0.0.1:6379\n"));
    expect_errors("[listener a]\nlisten = 127.0.0.1:9121\nupstream = 127.0.0.1:6379\n",
                  "t.ini:2: listen: 127.0.0.1:9121 clashes with the admin address 127.0.0.1:9121\n");
    sl_conf_free(load_ok("[sluice]\nadmin =\n[listener a]\nlisten = 127.0.0.1:9121\n"
                         "upstream = 127.0.0.1:6379\n"));
    expect_errors("[listener a]\nlisten = *:6379\nupstream = 127.0.0.1:6379\n",
                  "t.ini:3: upstream: 127.0.0.1:6379 is this listener's own address (a loop)\n");
    sl_conf_free(load_ok("[listener a]\nlisten = *:6379\nupstream = 10.1.1.1:6379\n"));
    /* Bad addresses are reported once, and take no part in clash checks. */
    expect_errors("[listener a]\nlisten = x\nupstream = 1.2.3.4:1\n"
                  "[listener b]\nlisten = y\nupstream = 1.2.3.4:1\n",
                  "t.ini:2: listen: expected an address like 127.0.0.1:6380, [::1]:6380 or "
                  "*:6380, got 'x'\n"
                  "t.ini:5: listen: expected an address like 127.0.0.1:6380, [::1]:6380 or "
                  "*:6380, got 'y'\n");
}

static void test_long_line(void **state)
{
    (void)state;
    /* inih's buffer is 200 bytes: 198 of text, the '\n' and the NUL. */
    char text[1024];
    char pad[256];
    memset(pad, 'x', sizeof(pad));
    /* Entries are at most 128 bytes, so split: 17 + 117 + 1 + 63 = 198. */
    snprintf(text, sizeof(text), L_A "[limit x]\nlistener = a\nrate = 1/s\nmatch_identity = "
             "%.117s %.63s\n", pad, pad);
    struct sl_conf *c = load_ok(text);
    assert_int_equal(c->limits->n_match_identity, 2);
    assert_int_equal(strlen(c->limits->match_identity[1]), 3 + 63); /* "ip:" */
    sl_conf_free(c);

    /* One byte more: an error, and the tail is not read as a line of its own
     * (it would be "xx...x = y", a key). */
    snprintf(text, sizeof(text), L_A "[limit x]\nlistener = a\nrate = 1/s\nmatch_identity = "
             "%.117s %.64s\n", pad, pad);
    expect_errors(text, "t.ini:7: line too long (max 198 bytes)\n");
    snprintf(text, sizeof(text), L_A "; %.195s = y\nidle_timeout = 1s\n", pad);
    expect_errors(text, "t.ini:4: line too long (max 198 bytes)\n");
    /* A long comment after the last line without a newline: 199 bytes fit in
     * fgets terms, but the rule is the same for every line. */
    snprintf(text, sizeof(text), L_A "; %.197s", pad);
    expect_errors(text, "t.ini:4: line too long (max 198 bytes)\n");
    /* CRLF: the '\r' does not count. */
    snprintf(text, sizeof(text), L_A "; %.196s\r\n", pad);
    sl_conf_free(load_ok(text));
    /* A too-long section header: its keys are skipped, not put in [listener a]. */
    snprintf(text, sizeof(text), L_A "[limit %.200s]\nlisten = 1.2.3.4:5\n", pad);
    expect_errors(text, "t.ini:4: line too long (max 198 bytes)\n");
}

static void test_long_names(void **state)
{
    (void)state;
    /* inih keeps 49 bytes of a section or key name and drops the rest. */
    char n43[44], n44[45], k50[51], text[512];
    memset(n43, 'n', 43);
    n43[43] = '\0';
    memset(n44, 'n', 44);
    n44[44] = '\0';
    memset(k50, 'k', 50);
    k50[50] = '\0';
    snprintf(text, sizeof(text), "[limit %s]\nlistener = a\nrate = 1/s\n" L_A, n43); /* 49 */
    struct sl_conf *c = load_ok(text);
    assert_string_equal(c->limits->name, n43);
    sl_conf_free(c);
    snprintf(text, sizeof(text), "[limit %s]\nlistener = a\nrate = 1/s\n" L_A, n44); /* 50 */
    expect_errors(text, "t.ini:1: section name too long (max 49 bytes)\n");
    snprintf(text, sizeof(text), L_A "%s = 1\n", k50);
    expect_errors(text, "t.ini:4: key name too long (max 49 bytes)\n");
    snprintf(text, sizeof(text), L_A "%.49s = 1\n", k50);
    char want[256];
    snprintf(want, sizeof(want), "t.ini:4: unknown key '%.49s' in [listener a]\n", k50);
    expect_errors(text, want);
}

static void test_key_value_form(void **state)
{
    (void)state;
    /* inih splits "listen 127.0.0.1:6380" at the ':'. */
    expect_errors("[listener a]\nlisten 127.0.0.1:7001\nupstream = 127.0.0.1:6379\n",
                  "t.ini:1: [listener a]: missing 'listen'\n"
                  "t.ini:2: expected 'key = value'\n");
    expect_errors(L_A "= 5\n", "t.ini:4: expected 'key = value'\n");
    expect_errors(L_A "cost KEYS=100\n", "t.ini:4: expected 'key = value'\n");
    /* "key: value" is inih's other form, and a fine one. */
    struct sl_conf *c = load_ok("[listener a]\nlisten: 127.0.0.1:7001\nupstream : 127.0.0.1:6379\n");
    assert_int_equal(port(&c->listeners->listen), 7001);
    sl_conf_free(c);
}

static void test_syntax_error(void **state)
{
    (void)state;
    expect_errors(L_A "idle_timeout\n[limit x\nlistener = b\n[store\n",
                  "t.ini:4: syntax error\n"
                  "t.ini:5: syntax error\n"
                  "t.ini:7: syntax error\n");
    /* A ';' after a blank starts a comment, also before '=': no '=' is left. */
    expect_errors(L_A "idle_timeout ;= 5s\n", "t.ini:4: syntax error\n");
    expect_errors(L_A "[limit x ; ]\n", "t.ini:4: syntax error\n");
    /* Errors everywhere: all of them, in line order, loading goes on. */
    expect_errors("[nope]\nx = 1\n[listener a]\nlisten = 1.2.3.4:1\nupstream = 1.2.3.4:2\n"
                  "idle_timeout = soon\nfoo\nmax_request = 1m\n[limit l]\nlistener = zz\n"
                  "rate = 1/s\n",
                  "t.ini:1: unknown section [nope] (expected [sluice], [store], [listener NAME] "
                  "or [limit NAME])\n"
                  "t.ini:6: idle_timeout: expected a duration like 250ms, 2s, 5m, got 'soon'\n"
                  "t.ini:7: syntax error\n"
                  "t.ini:8: max_request: expected a size like 512, 64kb, 10MiB, got '1m'\n"
                  "t.ini:10: listener: no [listener zz]\n");
}

static void test_bom_crlf_comments(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok("\xEF\xBB\xBF[listener a]\r\nlisten = 127.0.0.1:7001 ; inline\r\n"
                                "# hash comment\r\n; semicolon comment\r\n"
                                "upstream = 127.0.0.1:6379\r\nkey_prefix_separator =;\r\n");
    assert_int_equal(port(&c->listeners->listen), 7001);
    assert_string_equal(c->listeners->key_prefix_separator, ";");
    sl_conf_free(c);
}

/* ---- files ---------------------------------------------------------------- */

static void test_file_errors(void **state)
{
    (void)state;
    char *errs = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&errs, &len);
    assert_null(sl_conf_load("/nonexistent/sluice.ini", f));
    fclose(f);
    assert_string_equal(errs, "/nonexistent/sluice.ini:0: cannot open: No such file or directory\n");
    free(errs);

    f = open_memstream(&errs, &len);
    assert_null(sl_conf_load("/tmp", f));
    fclose(f);
    assert_string_equal(errs, "/tmp:0: cannot open: Is a directory\n");
    free(errs);

    /* Larger than 1 MiB. */
    size_t big = 1024 * 1024 + 1;
    char *text = malloc(big);
    assert_non_null(text);
    memset(text, '\n', big);
    char *path = tmp_file(text, big);
    f = open_memstream(&errs, &len);
    assert_null(sl_conf_load(path, f));
    fclose(f);
    char want[256];
    snprintf(want, sizeof(want), "%s:0: file too large (max 1048576 bytes)\n", path);
    assert_string_equal(errs, want);
    free(errs);
    unlink(path);
    free(path);

    /* Exactly 1 MiB is fine. */
    path = tmp_file(text, big - 1);
    f = open_memstream(&errs, &len);
    struct sl_conf *c = sl_conf_load(path, f);
    fclose(f);
    assert_string_equal(errs, "");
    assert_non_null(c);
    assert_string_equal(c->file, path);
    sl_conf_free(c);
    free(errs);
    unlink(path);
    free(path);
    free(text);

    /* The same cap holds for text given as a string. */
    text = malloc(big + 1);
    assert_non_null(text);
    memset(text, ';', big);
    text[big] = '\0';
    expect_errors(text, "t.ini:0: file too large (max 1048576 bytes)\n");
    free(text);

    /* A NUL byte inside a line. */
    static const char nul[] = "[store]\nurl = lo\0cal\n";
    path = tmp_file(nul, sizeof(nul) - 1);
    f = open_memstream(&errs, &len);
    assert_null(sl_conf_load(path, f));
    fclose(f);
    snprintf(want, sizeof(want), "%s:2: unexpected NUL byte\n", path);
    assert_string_equal(errs, want);
    free(errs);
    unlink(path);
    free(path);
}

/* ---- dump ----------------------------------------------------------------- */

/* A value that only fits on its line without the aligned form's padding
 * (found by fuzz_conf) is dumped as key=value and loads again. */
static void test_dump_long_value(void **state)
{
    (void)state;
    char text[256];
    int o = snprintf(text, sizeof(text), "[store]\nurl=redis://");
    while (o < 8 + 198 - (int)strlen("@localhost:7"))
        text[o++] = 'u';
    snprintf(text + o, sizeof(text) - (size_t)o, "@localhost:7\n");
    char *d = round_trip_within(text, 199);
    assert_non_null(strstr(d, "\nurl=redis://uuu"));
    free(d);
}

/* log_file is kept absolute (relative to the file's directory, like
 * password_file), log_format is logfmt | json; -T prints both and its
 * output loads again. */
static void test_log_keys(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok(L_A);
    assert_null(c->log_file);
    assert_int_equal(c->log_format, SL_LOG_LOGFMT);
    sl_conf_free(c);

    c = load_ok("[sluice]\nlog_file = /var/log/sluice/sluice.log\nlog_format = json\n" L_A);
    assert_string_equal(c->log_file, "/var/log/sluice/sluice.log");
    assert_int_equal(c->log_format, SL_LOG_JSON);
    sl_conf_free(c);

    c = load_ok("[sluice]\nlog_file = logs/s.log\n" L_A);
    assert_int_equal(c->log_file[0], '/');
    size_t n = strlen(c->log_file);
    assert_true(n > 11 && strcmp(c->log_file + n - 11, "/logs/s.log") == 0);
    sl_conf_free(c);

    c = load_ok("[sluice]\nlog_file =\n" L_A);
    assert_null(c->log_file); /* empty: stderr */
    sl_conf_free(c);

    expect_errors("[sluice]\nlog_format = xml\n" L_A,
                  "t.ini:2: log_format: expected one of logfmt | json, got 'xml'\n");
    round_trip("[sluice]\nlog_file = /var/log/sluice/sluice.log\nlog_format = json\n" L_A);
    round_trip("[sluice]\nlog_file = rel.log\n" L_A);
}

static void test_dump_round_trip(void **state)
{
    (void)state;
    round_trip(full);
    round_trip("");
    round_trip("[sluice]\nadmin =\nlog_level = error\n[store]\nlease = auto\n"
               "url = redis://[::1]\n" L_A "key_prefix_separator =;\n"
               "[limit x]\nlistener = a\nrate = 100/10s\ncost = 0\n");

    /* Long lists wrap on continuation lines. */
    char text[16384];
    int o = snprintf(text, sizeof(text), L_A "[limit x]\nlistener = a\nrate = 1/s\nburst = 200\n"
                     "commands = C0");
    for (int i = 1; i < 300; i++)
        o += snprintf(text + o, sizeof(text) - (size_t)o, "%sCMD%d", i % 10 ? " " : "\n  ", i);
    o += snprintf(text + o, sizeof(text) - (size_t)o, "\ncost = *=7");
    for (int i = 0; i < 200; i++)
        o += snprintf(text + o, sizeof(text) - (size_t)o, "%sC%d=%d", i % 10 ? " " : "\n  ", i, i);
    o += snprintf(text + o, sizeof(text) - (size_t)o, "\nmatch_identity = ");
    for (int i = 0; i < 60; i++)
        o += snprintf(text + o, sizeof(text) - (size_t)o, "%suser-%d-with-a-longish-name",
                      i % 4 ? " " : "\n  ", i);
    snprintf(text + o, sizeof(text) - (size_t)o, "\n");
    round_trip(text);

    struct sl_conf *c = load_ok(full);
    char *d = dump(c);
    /* Readable units. */
    assert_non_null(strstr(d, "shutdown_grace  = 30s\n"));
    assert_non_null(strstr(d, "max_request     = 1MiB\n"));
    assert_non_null(strstr(d, "rate            = 10MiB/s\n"));
    assert_non_null(strstr(d, "rate            = 5000/m\n"));
    assert_non_null(strstr(d, "idle_timeout    = 0s\n"));
    assert_non_null(strstr(d, "cost            = KEYS=100 SCAN=10 *=2\n"));
    assert_non_null(strstr(d, "lease           = 64\n"));
    free(d);
    sl_conf_free(c);
}

/* ---- host names ------------------------------------------------------------ */

/* The loader's resolver for the tests below: a few names, no DNS. */
static int fake_resolve(const char *host, uint16_t port, struct sockaddr_storage *out)
{
    const char *ip = strcmp(host, "up.test") == 0      ? "10.0.0.7"
                   : strcmp(host, "store.test") == 0   ? "10.0.0.9"
                   : strcmp(host, "admin.test") == 0   ? "127.0.0.2"
                   : strcmp(host, "listen.test") == 0  ? "127.0.0.3"
                   : strcmp(host, "self.test") == 0    ? "127.0.0.1"
                                                        : NULL;
    if (ip == NULL)
        return EAI_NONAME;
    struct sockaddr_in *sin = (struct sockaddr_in *)out;
    memset(out, 0, sizeof(*out));
    sin->sin_family = AF_INET;
    sin->sin_port = htons(port);
    inet_pton(AF_INET, ip, &sin->sin_addr);
    return 0;
}

static const char *ip_of(const struct sl_addr *a, char *buf)
{
    assert_int_equal(a->ss.ss_family, AF_INET);
    return inet_ntop(AF_INET, &((const struct sockaddr_in *)&a->ss)->sin_addr, buf, INET_ADDRSTRLEN);
}

/* upstream, listen, url and admin take host names, resolved at load; -T
 * prints them as written; a name that does not resolve is an error at its
 * line. */
static void test_names(void **state)
{
    (void)state;
    char ip[INET_ADDRSTRLEN];
    sl_conf_resolve = fake_resolve;
    static const char text[] =
        "[sluice]\nadmin = admin.test:9121\n"
        "[store]\nurl = redis://store.test/3\n"
        "[listener a]\nlisten = listen.test:7001\nupstream = up.test:6380\nresolve_ttl = 0\n"
        "[listener b]\nlisten = 127.0.0.1:7002\nupstream = 10.0.0.1:6379\n";
    struct sl_conf *c = load_ok(text);
    assert_string_equal(ip_of(&c->admin, ip), "127.0.0.2");
    assert_string_equal(c->store.addr.text, "store.test:6379");
    assert_string_equal(ip_of(&c->store.addr, ip), "10.0.0.9");
    assert_int_equal(port(&c->store.addr), 6379);
    const struct sl_listener_conf *a = c->listeners, *b = a->next;
    assert_string_equal(a->upstream.text, "up.test:6380");
    assert_int_equal(a->upstream.named, 1);
    assert_string_equal(ip_of(&a->upstream, ip), "10.0.0.7");
    assert_int_equal(port(&a->upstream), 6380);
    assert_string_equal(ip_of(&a->listen, ip), "127.0.0.3");
    assert_int_equal(a->resolve_ttl_us, 0);
    assert_int_equal(b->resolve_ttl_us, 30 * 1000000ULL); /* the default */
    assert_int_equal(b->upstream.named, 0);
    char *d = dump(c);
    assert_non_null(strstr(d, "upstream        = up.test:6380\n"));
    assert_non_null(strstr(d, "url             = redis://store.test/3\n"));
    assert_non_null(strstr(d, "admin           = admin.test:9121\n"));
    assert_non_null(strstr(d, "resolve_ttl     = 0s\n"));
    assert_non_null(strstr(d, "resolve_ttl     = 30s\n"));
    free(d);
    sl_conf_free(c);
    round_trip(text);

    expect_errors("[sluice]\nadmin = gone.test:1\n[store]\nurl = redis://gone.test\n"
                  "[listener a]\nlisten = gone.test:7001\nupstream = gone.test:6379\n",
                  "t.ini:2: admin: cannot resolve 'gone.test': Name or service not known\n"
                  "t.ini:6: listen: cannot resolve 'gone.test': Name or service not known\n");
    /* An upstream's name is looked up again at run time: not resolving
     * yet is a warning too; its address stays empty. */
    c = load_ok("[listener a]\nlisten = 127.0.0.1:7001\nupstream = gone.test:6379\n");
    assert_int_equal(c->listeners->upstream_unresolved_line, 3);
    assert_int_equal(c->listeners->upstream.ss.ss_family, AF_UNSPEC);
    assert_string_equal(c->listeners->upstream.text, "gone.test:6379");
    sl_conf_free(c);
    /* A redis:// store's name is looked up again at run time: not resolving
     * yet is no error (a warning, conf/warn.c); its address stays empty. */
    c = load_ok("[store]\nurl = redis://gone.test:7000\n"
                "[listener a]\nlisten = 127.0.0.1:7001\nupstream = 10.0.0.1:6379\n");
    assert_int_equal(c->store.unresolved_line, 2);
    assert_int_equal(c->store.addr.ss.ss_family, AF_UNSPEC);
    assert_string_equal(c->store.addr.text, "gone.test:7000");
    sl_conf_free(c);
    /* Cluster seeds and sentinels are looked up again when they are to be
     * tried: the same warning, the others resolved as usual. */
    c = load_ok("[store]\nurl = redis-cluster://gone.test:7000,store.test:7001\n"
                "[listener a]\nlisten = 127.0.0.1:7001\nupstream = 10.0.0.1:6379\n");
    assert_int_equal(c->store.unresolved_line, 2);
    assert_int_equal(c->store.seeds[0].ss.ss_family, AF_UNSPEC);
    assert_string_equal(ip_of(&c->store.seeds[1], ip), "10.0.0.9");
    sl_conf_free(c);
    c = load_ok("[store]\nurl = redis-sentinel://gone.test:26379/mymaster\n"
                "[listener a]\nlisten = 127.0.0.1:7001\nupstream = 10.0.0.1:6379\n");
    assert_int_equal(c->store.unresolved_line, 2);
    assert_int_equal(c->store.seeds[0].ss.ss_family, AF_UNSPEC);
    sl_conf_free(c);
    /* --no-resolve: no name is looked up, none is an error. */
    sl_conf_no_resolve = 1;
    c = load_ok("[sluice]\nadmin = gone.test:1\n[store]\nurl = redis-cluster://gone.test:7000\n"
                "[listener a]\nlisten = gone.test:7001\nupstream = gone.test:6379\n");
    assert_int_equal(c->store.unresolved_line, 0);
    assert_int_equal(c->listeners->upstream.ss.ss_family, AF_UNSPEC);
    sl_conf_free(c);
    sl_conf_no_resolve = 0;
    /* The checks compare what names resolve to: a loop is one. */
    expect_errors("[listener a]\nlisten = 127.0.0.1:7001\nupstream = self.test:7001\n",
                  "t.ini:3: upstream: self.test:7001 is this listener's own address (a loop)\n");
    expect_errors(L_A "resolve_ttl = 2d\n", "t.ini:4: resolve_ttl: must be at most 1d, got '2d'\n");
    expect_errors(L_A "resolve_ttl = soon\n",
                  "t.ini:4: resolve_ttl: expected a duration like 250ms, 2s, 5m, got 'soon'\n");

    /* The system's resolver: localhost is 127.0.0.1 (IPv4 first). */
    sl_conf_resolve = sl_conf_resolve_system;
    c = load_ok("[store]\nurl = redis://localhost:7000\n"
                "[listener a]\nlisten = 127.0.0.1:7001\nupstream = localhost:6379\n");
    assert_string_equal(ip_of(&c->listeners->upstream, ip), "127.0.0.1");
    assert_string_equal(ip_of(&c->store.addr, ip), "127.0.0.1");
    sl_conf_free(c);
}

/* ---- command categories and match_identity -------------------------------- */

/* commands = @category: Redis 7's ACL categories, kept as Redis writes
 * them (lower case) and printed back so by -T; an unknown one is an error. */
#define CATS "@keyspace @read @write @set @sortedset @list @hash @string @bitmap " \
             "@hyperloglog @geo @stream @pubsub @admin @fast @slow @blocking @dangerous " \
             "@connection @transaction @scripting"
static void test_command_categories(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok(L_A "[limit x]\nlistener = a\nrate = 1/s\n"
                                "commands = @WRITE get @write @Admin\n");
    assert_int_equal(c->limits->n_commands, 3);
    assert_string_equal(c->limits->commands[0], "@write");
    assert_string_equal(c->limits->commands[1], "GET");
    assert_string_equal(c->limits->commands[2], "@admin");
    char *d = dump(c);
    assert_non_null(strstr(d, "commands        = @write GET @admin\n"));
    free(d);
    sl_conf_free(c);
    round_trip(L_A "[limit x]\nlistener = a\nrate = 1/s\ncommands = @read @sortedset\n");

    expect_errors(L_A "[limit x]\nlistener = a\nrate = 1/s\ncommands = GET @writes\n",
                  "t.ini:7: commands: unknown category '@writes' (Redis 7's are: " CATS ")\n");
    expect_errors(L_A "[limit x]\nlistener = a\nrate = 1/s\ncommands = @all\n",
                  "t.ini:7: commands: unknown category '@all'; '*' means every command (Redis 7's "
                  "are: " CATS ")\n");
    expect_errors(L_A "[limit x]\nlistener = a\nrate = 1/s\ncommands = @\n",
                  "t.ini:7: commands: unknown category '@' (Redis 7's are: " CATS ")\n");
    expect_errors("[listener t]\nlisten = 127.0.0.1:7001\nupstream = 127.0.0.1:6379\n"
                  "protocol = tcp\n[limit x]\nlistener = t\nmetric = bytes_in\nrate = 1/s\n"
                  "commands = @write\n",
                  "t.ini:9: commands: only for resp listeners ([listener t] is tcp)\n");
}

/* match_identity names identities with their source (issue 11): a bare
 * value is the first source's, printed by -T in its prefixed form; no
 * other source's value reaches the tier. */
/* A bare match_identity value of the longest length: -T writes it with its
 * source, and that loads again (fuzz_conf found the dump refused). */
static void test_match_identity_long_bare_round_trip(void **state)
{
    (void)state;
    char text[1024], v[129];
    memset(v, 'a', 128);
    v[128] = '\0';
    snprintf(text, sizeof(text), L_A "identity = resp_user client_ip\n"
             "[limit x]\nlistener = a\nrate = 1/s\nmatch_identity = %s\n", v);
    round_trip(text);
}

static void test_match_identity_sources(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok("[listener a]\nlisten = 127.0.0.1:7001\nupstream = 127.0.0.1:6379\n"
                                "identity = resp_user client_name client_ip\n"
                                "[limit x]\nlistener = a\nrate = 1/s\n"
                                "match_identity = alice name:svc ip:10.0.0.1 ::1 user:bob\n"
                                "  name#03b69dd1582e6208 user:#03b69dd1582e6208\n");
    const struct sl_limit_conf *m = c->limits;
    const char *want[] = { "user:alice", "name:svc", "ip:10.0.0.1", "user:::1", "user:bob",
                           "name#03b69dd1582e6208", "user:#03b69dd1582e6208" };
    assert_int_equal(m->n_match_identity, 7);
    for (int i = 0; i < 7; i++)
        assert_string_equal(m->match_identity[i], want[i]);
    sl_conf_free(c);

    c = load_ok(L_A "identity = client_ip resp_user\n"
                "[limit x]\nlistener = a\nrate = 1/s\n"
                "match_identity = ::1 10.0.0.1 user:carol\n");
    m = c->limits;
    assert_int_equal(m->n_match_identity, 3);
    assert_string_equal(m->match_identity[0], "ip:::1");
    assert_string_equal(m->match_identity[1], "ip:10.0.0.1");
    assert_string_equal(m->match_identity[2], "user:carol");
    char *d = dump(c);
    assert_non_null(strstr(d, "match_identity  = ip:::1 ip:10.0.0.1 user:carol\n"));
    free(d);
    sl_conf_free(c);

    /* identity = none: its one identity is "all"; listener = * with one
     * first source resolves bare values for all of them. */
    c = load_ok(L_A "identity = none\n[limit x]\nlistener = a\nrate = 1/s\nmatch_identity = all\n");
    assert_string_equal(c->limits->match_identity[0], "all");
    sl_conf_free(c);
    c = load_ok(L_A "identity = resp_user\n"
                "[listener b]\nlisten = 127.0.0.1:7002\nupstream = 127.0.0.1:6379\n"
                "identity = resp_user client_ip\n"
                "[limit x]\nlistener = *\nrate = 1/s\nmatch_identity = alice ip:::1\n");
    assert_string_equal(c->limits->match_identity[0], "user:alice");
    sl_conf_free(c);

    /* Errors. */
    expect_errors(L_A "identity = resp_user\n[limit x]\nlistener = a\nrate = 1/s\n"
                  "match_identity = name:svc\n",
                  "t.ini:8: match_identity: 'name:svc' can never match: no listener of this "
                  "limit has identity source client_name\n");
    expect_errors(L_A "identity = none\n[limit x]\nlistener = a\nrate = 1/s\n"
                  "match_identity = alice\n",
                  "t.ini:8: match_identity: 'alice' names no source, and [listener a] has "
                  "identity = none (its one identity is 'all')\n");
    expect_errors(L_A "identity = resp_user client_ip\n"
                  "[listener b]\nlisten = 127.0.0.1:7002\nupstream = 127.0.0.1:6379\n"
                  "[limit x]\nlistener = *\nrate = 1/s\nmatch_identity = alice\n",
                  "t.ini:11: match_identity: 'alice' names no source, and the listeners of "
                  "this limit differ in their first identity source; write user:alice, "
                  "name:alice, prefix:alice or ip:alice\n");
    expect_errors(L_A "[limit x]\nlistener = a\nrate = 1/s\nmatch_identity = ip: user#x\n",
                  "t.ini:7: match_identity: 'ip:' has no value after 'ip:'\n"
                  "t.ini:7: match_identity: 'user#x' is not a hashed identity (user# and 16 "
                  "lowercase hex digits, as /stats shows it)\n");
}

/* ---- shipped files -------------------------------------------------------- */

static void load_file_ok(const char *path)
{
    char *errs = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&errs, &len);
    struct sl_conf *c = sl_conf_load(path, f);
    fclose(f);
    if (c == NULL)
        print_error("%s does not load:\n%s", path, errs);
    assert_string_equal(errs, "");
    assert_non_null(c);
    char *d = dump(c);
    char *errs2 = NULL;
    struct sl_conf *b = load(d, &errs2);
    /* The dump of a file that uses a relative password_file reloads only
     * from the file's own directory; compare what can be compared. */
    if (c->store.password_file == NULL || c->store.password_file[0] == '/') {
        assert_string_equal(errs2, "");
        assert_non_null(b);
        conf_equal(c, b);
    }
    sl_conf_free(b);
    free(errs2);
    free(d);
    sl_conf_free(c);
    free(errs);
}

static void test_shipped_files(void **state)
{
    (void)state;
    load_file_ok("conf/sluice.ini");
    struct sl_conf *c = sl_conf_load("conf/sluice.ini", stderr);
    assert_non_null(c);
    assert_int_equal(c->has_admin, 1);
    assert_string_equal(c->admin.text, "127.0.0.1:9121");
    assert_int_equal(c->store.kind, SL_STORE_LOCAL);
    assert_int_equal(c->n_listeners, 1);
    assert_string_equal(c->listeners->name, "cache");
    assert_string_equal(c->listeners->listen.text, "127.0.0.1:6380");
    assert_string_equal(c->listeners->upstream.text, "127.0.0.1:6379");
    assert_int_equal(c->listeners->protocol, SL_PROTO_RESP);
    assert_int_equal(c->n_limits, 0);
    sl_conf_free(c);

    DIR *d = opendir("conf/examples");
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 4, ".ini") != 0)
            continue;
        char path[512];
        snprintf(path, sizeof(path), "conf/examples/%s", e->d_name);
        load_file_ok(path);
        n++;
    }
    closedir(d);
    assert_true(n >= 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_file),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_admin_off),
        cmocka_unit_test(test_documented_empty_forms),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_workers),
        cmocka_unit_test(test_cost_and_commands),
        cmocka_unit_test(test_cost_above_capacity),
        cmocka_unit_test(test_command_categories),
        cmocka_unit_test(test_unknown_section),
        cmocka_unit_test(test_unknown_key),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_duplicate_key),
        cmocka_unit_test(test_continuation),
        cmocka_unit_test(test_duplicate_sections),
        cmocka_unit_test(test_references),
        cmocka_unit_test(test_missing_required),
        cmocka_unit_test(test_protocol_rules),
        cmocka_unit_test(test_listen_clash),
        cmocka_unit_test(test_long_line),
        cmocka_unit_test(test_match_identity_sources),
        cmocka_unit_test(test_match_identity_long_bare_round_trip),
        cmocka_unit_test(test_long_names),
        cmocka_unit_test(test_key_value_form),
        cmocka_unit_test(test_syntax_error),
        cmocka_unit_test(test_bom_crlf_comments),
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_dump_round_trip),
        cmocka_unit_test(test_log_keys),
        cmocka_unit_test(test_dump_long_value),
        cmocka_unit_test(test_shipped_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

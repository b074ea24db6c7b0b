/* Unit tests for the loader's [store] section and the secrets it reads
 * (src/conf/; conf-i.h lists its files): the url forms (redis://,
 * redis-cluster://, redis-sentinel://, masked when echoed in an error),
 * TLS (rediss*, tls_* keys, and the listeners' TLS keys), the sentinels'
 * own TLS and AUTH, lease, overrides = store, and password_file (read,
 * resolved, printed by -T without the secret, its mode warned about).
 * The general loader is in test_conf.c. Run from the repo root. */
#include <sys/stat.h>

#include "unit/conf/conf_test.h"

#define STORE_URL_EXPECTED                                                                   \
    "local, redis://[user@]host[:port][/db], redis-cluster://[user@]host:port[,host:port...] " \
    "or redis-sentinel://[user@]host:port[,host:port...]/MASTER_NAME[/db]"

static void test_store_url(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok("[store]\nurl = redis://127.0.0.1\n");
    assert_int_equal(c->store.kind, SL_STORE_REDIS);
    assert_null(c->store.user);
    assert_string_equal(c->store.addr.text, "127.0.0.1:6379");
    assert_int_equal(c->store.db, 0);
    sl_conf_free(c);
    c = load_ok("[store]\nurl = redis://localhost/2\n");
    assert_int_equal(port(&c->store.addr), 6379);
    assert_int_equal(c->store.db, 2);
    sl_conf_free(c);
    c = load_ok("[store]\nurl = redis://u@[::1]:7000/15\n");
    assert_string_equal(c->store.user, "u");
    assert_int_equal(c->store.addr.ss.ss_family, AF_INET6);
    assert_int_equal(port(&c->store.addr), 7000);
    assert_int_equal(c->store.db, 15);
    sl_conf_free(c);
    c = load_ok("[store]\nurl = redis://[::1]\n");
    assert_int_equal(port(&c->store.addr), 6379);
    sl_conf_free(c);

    const char *exp = STORE_URL_EXPECTED;
    const char *bad[] = { "redis", "redis://", "redis://redis..internal:6379", "redisx://1.2.3.4",
                          "redis://1.2.3.4:0", "redis://1.2.3.4/x", "redis://1.2.3.4/",
                          "redis://@1.2.3.4", "redis://1.2.3.4:6379/1/2", "LOCAL",
                          "redis://1.2.3.4/-1", "redis://1.2.3.4/2147483648" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[128], want[256];
        snprintf(text, sizeof(text), "[store]\nurl = %s\n", bad[i]);
        snprintf(want, sizeof(want), "t.ini:2: url: expected %s, got '%s'\n", exp, bad[i]);
        expect_errors(text, want);
    }
    expect_errors("[store]\nurl = redis://u:secret@1.2.3.4\n",
                  "t.ini:2: url: no password in the url; put it in password_file\n");
}

/* TLS keys (issue 15): rediss* schemes, tls = on, keys that need TLS on,
 * files checked at load. Real certificates are in tests/unit/core/test_tls.c
 * and tests/integration/test_store_tls.c. */
static void test_tls_keys(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok("[store]\nurl = rediss://127.0.0.1:7000/2\ntls_sni = redis.example\n");
    assert_int_equal(c->store.kind, SL_STORE_REDIS);
    assert_int_equal(c->store.tls, 1);
    assert_int_equal(c->store.tls_verify, 1);
    assert_int_equal(c->store.db, 2);
    assert_string_equal(c->store.tls_sni, "redis.example");
    sl_conf_free(c);
    c = load_ok("[store]\nurl = rediss-cluster://127.0.0.1:7000,127.0.0.1:7001\n");
    assert_int_equal(c->store.kind, SL_STORE_CLUSTER);
    assert_int_equal(c->store.tls, 1);
    sl_conf_free(c);
    c = load_ok("[store]\nurl = rediss-sentinel://127.0.0.1/m\ntls_verify = off\n");
    assert_int_equal(c->store.kind, SL_STORE_SENTINEL);
    assert_int_equal(c->store.tls, 1);
    assert_int_equal(c->store.tls_verify, 0);
    sl_conf_free(c);
    c = load_ok("[store]\nurl = redis://127.0.0.1:7000\ntls = on\n");
    assert_int_equal(c->store.tls, 1);
    sl_conf_free(c);
    c = load_ok("[store]\nurl = redis://127.0.0.1:7000\n");
    assert_int_equal(c->store.tls, 0);
    sl_conf_free(c);
    expect_errors("[store]\nurl = rediss://127.0.0.1:7000\ntls = off\n",
                  "t.ini:3: tls: off, but the url (line 2) asks for TLS (rediss...)\n");
    expect_errors("[store]\nurl = redis://127.0.0.1:7000\ntls_ca = /nonexistent/ca.pem\n",
                  "t.ini:3: tls_ca: TLS to the store is off (url = rediss://... or tls = on "
                  "turns it on)\n");
    expect_errors("[store]\nurl = rediss://127.0.0.1:7000\ntls_ca = /nonexistent/ca.pem\n",
                  "t.ini:3: [store] tls: tls_ca /nonexistent/ca.pem: cannot read: "
                  "No such file or directory\n");
    expect_errors("[store]\ntls = on\n", "t.ini:2: tls: the store is local (no connection)\n");
    expect_errors(L_A "tls_ca = /x.pem\nupstream_tls_sni = a.example\n",
                  "t.ini:4: tls_ca: needs tls_cert and tls_key (TLS from clients is off)\n"
                  "t.ini:5: upstream_tls_sni: needs upstream_tls = on (TLS to the upstream is off)\n");
    expect_errors(L_A "tls_cert = /nonexistent/s.pem\ntls_key = /nonexistent/s.key\n",
                  "t.ini:4: [listener a]: tls_cert /nonexistent/s.pem: cannot read: "
                  "No such file or directory\n");
    expect_errors(L_A "tls_protocols = TLSv1.2 SSLv3\n",
                  "t.ini:4: tls_protocols: unknown or unsupported protocol 'SSLv3' "
                  "(TLSv1.2 | TLSv1.3)\n"
                  "t.ini:4: tls_protocols: needs tls_cert and tls_key (TLS from clients is off)\n");
    expect_errors(L_A "tls_verify_client = maybe\n",
                  "t.ini:4: tls_verify_client: expected one of off | optional | on, got 'maybe'\n"
                  "t.ini:4: tls_verify_client: needs tls_cert and tls_key (TLS from clients is off)\n");
    c = load_ok(L_A "upstream_tls = on\nupstream_tls_verify = off\nupstream_tls_sni = up.example\n");
    assert_int_equal(c->listeners->upstream_tls, 1);
    assert_int_equal(c->listeners->upstream_tls_verify, 0);
    assert_string_equal(c->listeners->upstream_tls_sni, "up.example");
    sl_conf_free(c);
}

/* url = redis-cluster:// and redis-sentinel://: every host:port in order as
 * seeds (addr the first), the master's name, and errors at FILE:LINE. */
static void test_store_url_cluster_sentinel(void **state)
{
    (void)state;
    struct sl_conf *c = load_ok("[store]\nurl = redis-cluster://127.0.0.1:7000,127.0.0.2:7001,[::1]\n");
    assert_int_equal(c->store.kind, SL_STORE_CLUSTER);
    assert_int_equal(c->store.n_seeds, 3);
    assert_string_equal(c->store.seeds[0].text, "127.0.0.1:7000");
    assert_string_equal(c->store.seeds[1].text, "127.0.0.2:7001");
    assert_int_equal(port(&c->store.seeds[2]), 6379);
    assert_string_equal(c->store.addr.text, "127.0.0.1:7000");
    assert_null(c->store.master_name);
    sl_conf_free(c);
    c = load_ok("[store]\nurl = redis-cluster://u@localhost:7000/0\n");
    assert_string_equal(c->store.user, "u");
    assert_int_equal(c->store.n_seeds, 1);
    sl_conf_free(c);
    c = load_ok("[store]\nurl = redis-sentinel://127.0.0.1,127.0.0.1:26380/mymaster/3\n");
    assert_int_equal(c->store.kind, SL_STORE_SENTINEL);
    assert_int_equal(c->store.n_seeds, 2);
    assert_int_equal(port(&c->store.seeds[0]), 26379);
    assert_int_equal(port(&c->store.seeds[1]), 26380);
    assert_string_equal(c->store.master_name, "mymaster");
    assert_int_equal(c->store.db, 3);
    sl_conf_free(c);
    c = load_ok("[store]\nurl = redis://127.0.0.1:7000\n");
    assert_int_equal(c->store.n_seeds, 1);
    assert_string_equal(c->store.seeds[0].text, "127.0.0.1:7000");
    sl_conf_free(c);

    const char *bad[] = { "redis-cluster://", "redis-cluster://a:1,", "redis-cluster://,a:1",
                          "redis-cluster://1.2.3.4:1,1.2.3.4:0", "redis://1.2.3.4:1,1.2.3.4:2",
                          "redis-sentinel://1.2.3.4:1/m/x", "redis-cluster://1.2.3.4:1/x" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[128], want[400];
        snprintf(text, sizeof(text), "[store]\nurl = %s\n", bad[i]);
        snprintf(want, sizeof(want), "t.ini:2: url: expected %s, got '%s'\n", STORE_URL_EXPECTED,
                 bad[i]);
        expect_errors(text, want);
    }
    expect_errors("[store]\nurl = redis-cluster://1.2.3.4:1/2\n",
                  "t.ini:2: url: a Redis Cluster has only database 0 (drop the /2)\n");
    expect_errors("[store]\nurl = redis-sentinel://1.2.3.4:1\n",
                  "t.ini:2: url: redis-sentinel:// needs the master's name: "
                  "redis-sentinel://host:port[,host:port...]/MASTER_NAME[/db]\n");
    expect_errors("[store]\nurl = redis-cluster://u:pw@1.2.3.4:1\n",
                  "t.ini:2: url: no password in the url; put it in password_file\n");
}

/* A bad url is echoed in the error (logged on a reload) with a userinfo
 * password and a query string masked. Before, the query string came whole. */
static void test_store_url_redacted(void **state)
{
    (void)state;
    const char *exp = STORE_URL_EXPECTED;
    struct { const char *url, *shown; } cases[] = {
        { "redis://user@h:1/0?password=secret", "redis://user@h:1/0?***" },
        { "redis://1.2.3.4:1/0?password=secret", "redis://1.2.3.4:1/0?***" },
        { "redisx://user:secret@h:1/0?password=secret", "redisx://user:***@h:1/0?***" },
        { "redisx://user:secret@h:1", "redisx://user:***@h:1" },
        { "http://h/x#secret", "http://h/x?***" },
        { "redis://1.2.3.4/x", "redis://1.2.3.4/x" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char text[160], want[300];
        snprintf(text, sizeof(text), "[store]\nurl = %s\n", cases[i].url);
        snprintf(want, sizeof(want), "t.ini:2: url: expected %s, got '%s'\n", exp, cases[i].shown);
        expect_errors(text, want);
    }
    /* The issue's own example: refused, and the secret is nowhere. */
    char *errs = NULL;
    struct sl_conf *c = load("[store]\nurl = redis://user:secret@h:1/0?password=secret\n", &errs);
    assert_null(c);
    assert_non_null(strstr(errs, "t.ini:2: url:"));
    assert_null(strstr(errs, "secret@"));
    assert_null(strstr(errs, "password=secret"));
    free(errs);
}

static void test_lease(void **state)
{
    (void)state;
    struct { const char *v; int64_t lease; } ok[] = {
        { "off", 0 }, { "auto", -1 }, { "1", 1 }, { "1000000", 1000000 },
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        char text[64];
        snprintf(text, sizeof(text), "[store]\nlease = %s\n", ok[i].v);
        struct sl_conf *c = load_ok(text);
        assert_int_equal(c->store.lease, ok[i].lease);
        sl_conf_free(c);
    }
    const char *bad[] = { "0", "-1", "on", "1000001", "10k", "Auto" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[64], want[160];
        snprintf(text, sizeof(text), "[store]\nlease = %s\n", bad[i]);
        snprintf(want, sizeof(want), "t.ini:2: lease: expected off, auto or a number of tokens "
                 "from 1 to 1000000, got '%s'\n", bad[i]);
        expect_errors(text, want);
    }
}

/* overrides = store: needs a store, a rate (not connections) and a scope
 * with identities; overrides_ttl only with it. */
static void test_overrides(void **state)
{
    (void)state;
    static const char head[] =
        "[store]\nurl = redis://127.0.0.1:7000\n"
        "[listener r]\nlisten = 127.0.0.1:7001\nupstream = 127.0.0.1:7002\n";
    char text[512];
    snprintf(text, sizeof(text), "%s[limit a]\nlistener = r\nrate = 10/s\noverrides = store\n", head);
    struct sl_conf *c = load_ok(text);
    assert_int_equal(c->limits->overrides, 1);
    assert_int_equal(c->limits->overrides_ttl_us, 5000000);
    sl_conf_free(c);
    snprintf(text, sizeof(text), "%s[limit a]\nlistener = r\nrate = 10/s\noverrides = store\n"
             "overrides_ttl = 250ms\n", head);
    c = load_ok(text);
    assert_int_equal(c->limits->overrides_ttl_us, 250000);
    sl_conf_free(c);
    expect_errors("[listener r]\nlisten = 127.0.0.1:7001\nupstream = 127.0.0.1:7002\n"
                  "[limit a]\nlistener = r\nrate = 10/s\noverrides = store\n",
                  "t.ini:7: overrides: = store reads them from the quota store; [store] url is "
                  "local\n");
    snprintf(text, sizeof(text), "%s[limit a]\nlistener = r\nmetric = connections\nmax = 3\n"
             "overrides = store\n", head);
    expect_errors(text, "t.ini:10: overrides: a rate and burst per identity; not for "
                        "metric = connections\n");
    snprintf(text, sizeof(text), "%s[limit a]\nlistener = r\nrate = 10/s\nscope = connection\n"
             "overrides = store\n", head);
    expect_errors(text, "t.ini:10: overrides: per identity; not for scope = connection\n");
    snprintf(text, sizeof(text), "%s[limit a]\nlistener = r\nrate = 10/s\noverrides_ttl = 1s\n", head);
    expect_errors(text, "t.ini:9: overrides_ttl: needs overrides = store\n");
    snprintf(text, sizeof(text), "%s[limit a]\nlistener = r\nrate = 10/s\noverrides = yes\n", head);
    expect_errors(text, "t.ini:9: overrides: expected one of off | store, got 'yes'\n");
}

/* The sentinels' own TLS and AUTH (issue 15): sentinel_tls follows the
 * store's TLS unless written; sentinel_user and sentinel_password_file
 * (never the password itself in the file, nor in -T); all three only
 * with a sentinel url; errors at their lines. */
static void test_sentinel_keys(void **state)
{
    (void)state;
    /* defaults: follows tls, no AUTH */
    struct sl_conf *c = load_ok("[store]\nurl = rediss-sentinel://127.0.0.1:26379/m\n");
    assert_int_equal(c->store.tls, 1);
    assert_int_equal(c->store.sentinel_tls, 1);
    assert_null(c->store.sentinel_user);
    assert_null(c->store.sentinel_password);
    sl_conf_free(c);
    c = load_ok("[store]\nurl = redis-sentinel://127.0.0.1:26379/m\ntls = on\n");
    assert_int_equal(c->store.sentinel_tls, 1);
    sl_conf_free(c);
    c = load_ok("[store]\nurl = redis-sentinel://127.0.0.1:26379/m\n");
    assert_int_equal(c->store.tls, 0);
    assert_int_equal(c->store.sentinel_tls, 0);
    sl_conf_free(c);
    /* plaintext sentinels in front of TLS data nodes, and the other way */
    c = load_ok("[store]\nurl = rediss-sentinel://127.0.0.1:26379/m\nsentinel_tls = off\n");
    assert_int_equal(c->store.tls, 1);
    assert_int_equal(c->store.sentinel_tls, 0);
    sl_conf_free(c);
    c = load_ok("[store]\nurl = redis-sentinel://127.0.0.1:26379/m\nsentinel_tls = on\n"
                "tls_verify = off\n");
    assert_int_equal(c->store.tls, 0);
    assert_int_equal(c->store.sentinel_tls, 1);
    assert_int_equal(c->store.tls_verify, 0); /* the TLS keys apply to the sentinels */
    sl_conf_free(c);

    /* AUTH: user and password from a file; -T shows the file, never the secret */
    char *pw = tmp_file("sen-s3cret\n", 11);
    char text[512], want[512];
    snprintf(text, sizeof(text),
             "[store]\nurl = redis-sentinel://127.0.0.1:26379/m\nsentinel_user = watcher\n"
             "sentinel_password_file = %s\n", pw);
    c = load_ok(text);
    assert_string_equal(c->store.sentinel_user, "watcher");
    assert_string_equal(c->store.sentinel_password, "sen-s3cret");
    assert_string_equal(c->store.sentinel_password_file, pw);
    assert_null(c->store.password); /* the master's are its own */
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    sl_conf_dump(c, f);
    fclose(f);
    assert_non_null(strstr(out, "sentinel_tls    = off\n"));
    assert_non_null(strstr(out, "sentinel_user   = watcher\n"));
    snprintf(want, sizeof(want), "sentinel_password_file = %s\n", pw);
    assert_non_null(strstr(out, want));
    assert_null(strstr(out, "sen-s3cret"));
    sl_conf_free(c);
    /* ... and what -T printed loads to the same */
    c = load_ok(out);
    assert_string_equal(c->store.sentinel_password, "sen-s3cret");
    assert_string_equal(c->store.sentinel_user, "watcher");
    assert_int_equal(c->store.sentinel_tls, 0);
    sl_conf_free(c);
    free(out);
    /* a password alone: AUTH password */
    snprintf(text, sizeof(text),
             "[store]\nurl = redis-sentinel://127.0.0.1:26379/m\nsentinel_password_file = %s\n", pw);
    c = load_ok(text);
    assert_null(c->store.sentinel_user);
    assert_string_equal(c->store.sentinel_password, "sen-s3cret");
    /* readable by others: a warning naming the key and line */
    assert_int_equal(chmod(pw, 0644), 0);
    out = NULL;
    f = open_memstream(&out, &len);
    assert_int_equal(sl_conf_warn(c, f), 1);
    fclose(f);
    snprintf(want, sizeof(want), "t.ini:3: warning: sentinel_password_file '%s' is readable by "
             "others (mode 0644): chmod 600 it\n", pw);
    assert_string_equal(out, want);
    free(out);
    sl_conf_free(c);
    unlink(pw);

    /* errors, each at its line */
    snprintf(text, sizeof(text),
             "[store]\nurl = redis-sentinel://127.0.0.1:26379/m\nsentinel_password_file = %s\n", pw);
    snprintf(want, sizeof(want), "t.ini:3: sentinel_password_file: cannot read '%s': "
             "No such file or directory\n", pw);
    expect_errors(text, want);
    free(pw);
    expect_errors("[store]\nurl = redis-sentinel://127.0.0.1:26379/m\nsentinel_password = x\n",
                  "t.ini:3: sentinel_password: a password is not written in the file; put it in "
                  "a file named by sentinel_password_file\n");
    expect_errors("[store]\nurl = redis-sentinel://127.0.0.1:26379/m\nsentinel_user = w\n",
                  "t.ini:3: sentinel_user: needs sentinel_password_file (AUTH user password)\n");
    expect_errors("[store]\nurl = redis-sentinel://127.0.0.1:26379/m\nsentinel_tls = yes\n",
                  "t.ini:3: sentinel_tls: expected on or off, got 'yes'\n");
    expect_errors("[store]\nurl = redis://127.0.0.1:6379\n\nsentinel_tls = off\nsentinel_user = w\n",
                  "t.ini:4: sentinel_tls: the url names no sentinels (redis-sentinel://... or "
                  "rediss-sentinel://...)\n"
                  "t.ini:5: sentinel_user: the url names no sentinels (redis-sentinel://... or "
                  "rediss-sentinel://...)\n");
    expect_errors("[store]\nurl = redis-sentinel://127.0.0.1:26379/m\nsentinel_user = two words\n",
                  "t.ini:3: sentinel_user: expected one word of at most 255 bytes, got 'two "
                  "words'\n");
    expect_errors("[store]\nurl = redis-sentinel://127.0.0.1:26379/m\nsentinel_tls = on\n"
                  "tls_ca = /nonexistent/ca.pem\n",
                  "t.ini:4: [store] tls: tls_ca /nonexistent/ca.pem: cannot read: "
                  "No such file or directory\n");
}

static void test_password_file(void **state)
{
    (void)state;
    char *pw = tmp_file("s3cret\n", 7);
    char text[512], want[512];
    snprintf(text, sizeof(text), "[store]\nurl = redis://sluice@127.0.0.1:6390\npassword_file = %s\n", pw);
    struct sl_conf *c = load_ok(text);
    assert_string_equal(c->store.password_file, pw);
    assert_string_equal(c->store.password, "s3cret");
    assert_string_equal(c->store.user, "sluice");

    /* The dump names the file, never the secret. */
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    sl_conf_dump(c, f);
    fclose(f);
    assert_non_null(strstr(out, pw));
    assert_null(strstr(out, "s3cret"));
    free(out);
    sl_conf_free(c);

    /* Only one trailing newline goes; a CRLF too. */
    unlink(pw);
    free(pw);
    pw = tmp_file("two\n\n", 5);
    snprintf(text, sizeof(text), "[store]\npassword_file = %s\n", pw);
    c = load_ok(text);
    assert_string_equal(c->store.password, "two\n");
    sl_conf_free(c);
    unlink(pw);
    free(pw);
    pw = tmp_file("crlf\r\n", 6);
    snprintf(text, sizeof(text), "[store]\npassword_file = %s\n", pw);
    c = load_ok(text);
    assert_string_equal(c->store.password, "crlf");
    sl_conf_free(c);
    unlink(pw);

    /* Unreadable, empty, too big. */
    snprintf(text, sizeof(text), "[store]\npassword_file = %s\n", pw);
    snprintf(want, sizeof(want), "t.ini:2: password_file: cannot read '%s': "
             "No such file or directory\n", pw);
    expect_errors(text, want);
    free(pw);
    pw = tmp_file("\n", 1);
    snprintf(text, sizeof(text), "[store]\npassword_file = %s\n", pw);
    snprintf(want, sizeof(want), "t.ini:2: password_file: '%s' is empty\n", pw);
    expect_errors(text, want);
    unlink(pw);
    free(pw);
    char big[5000];
    memset(big, 'p', sizeof(big));
    pw = tmp_file(big, sizeof(big));
    snprintf(text, sizeof(text), "[store]\npassword_file = %s\n", pw);
    snprintf(want, sizeof(want), "t.ini:2: password_file: '%s' is larger than 4096 bytes\n", pw);
    expect_errors(text, want);
    unlink(pw);
    free(pw);

    /* From a file, a relative password_file is next to the configuration. */
    char dir[] = "/tmp/sluice-test-dir-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char p1[128], p2[128];
    snprintf(p1, sizeof(p1), "%s/pw", dir);
    snprintf(p2, sizeof(p2), "%s/s.ini", dir);
    f = fopen(p1, "w");
    fputs("rel\n", f);
    fclose(f);
    f = fopen(p2, "w");
    fputs("[store]\npassword_file = pw\n", f);
    fclose(f);
    out = NULL;
    FILE *e = open_memstream(&out, &len);
    c = sl_conf_load(p2, e);
    fclose(e);
    assert_string_equal(out, "");
    assert_non_null(c);
    assert_string_equal(c->store.password, "rel");
    assert_string_equal(c->store.password_file, p1); /* resolved: absolute */
    sl_conf_free(c);
    free(out);
    unlink(p1);
    unlink(p2);
    rmdir(dir);
}

/* -T writes a relative password_file resolved (absolute), so what it prints
 * loads from another directory. Before, it wrote "pw" as given, which then
 * named a file next to wherever the output was saved, or none. */
static void test_dump_password_file_absolute(void **state)
{
    (void)state;
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    char dir[] = "/tmp/sluice-test-dir-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char sub[128], pw[160], ini[160], abs_pw[160];
    snprintf(sub, sizeof(sub), "%s/etc", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    snprintf(pw, sizeof(pw), "%s/pw", sub);
    snprintf(ini, sizeof(ini), "%s/s.ini", sub);
    FILE *f = fopen(pw, "w");
    fputs("rel\n", f);
    fclose(f);
    chmod(pw, 0600);
    f = fopen(ini, "w");
    fputs("[store]\nurl = redis://u@127.0.0.1:6390\npassword_file = pw\n" L_A, f);
    fclose(f);

    /* loaded as a relative path from the directory above (dir of the file: "etc") */
    assert_int_equal(chdir(dir), 0);
    char *errs = NULL;
    size_t elen = 0;
    FILE *e = open_memstream(&errs, &elen);
    struct sl_conf *c = sl_conf_load("etc/s.ini", e);
    fclose(e);
    assert_string_equal(errs, "");
    free(errs);
    assert_non_null(c);
    snprintf(abs_pw, sizeof(abs_pw), "%s/etc/pw", dir);
    assert_string_equal(c->store.password_file, abs_pw);
    char *out = dump(c);
    char line[200];
    snprintf(line, sizeof(line), "%-15s = %s\n", "password_file", abs_pw);
    assert_non_null(strstr(out, line));
    sl_conf_free(c);

    /* the dump, loaded from somewhere else, finds the secret */
    assert_int_equal(chdir("/"), 0);
    c = load_ok(out);
    assert_string_equal(c->store.password, "rel");
    sl_conf_free(c);
    free(out);

    /* a file name alone (no directory): relative to the working directory */
    assert_int_equal(chdir(sub), 0);
    errs = NULL;
    e = open_memstream(&errs, &elen);
    c = sl_conf_load("s.ini", e);
    fclose(e);
    assert_string_equal(errs, "");
    free(errs);
    assert_non_null(c);
    assert_string_equal(c->store.password_file, abs_pw);
    sl_conf_free(c);

    assert_int_equal(chdir(cwd), 0);
    unlink(pw);
    unlink(ini);
    rmdir(sub);
    rmdir(dir);
}

/* A password_file readable by group or others is a warning: -t prints it
 * (FILE:LINE: warning: ...), a start or reload logs it; 0600 is quiet. */
static void test_password_file_mode_warning(void **state)
{
    (void)state;
    char *pw = tmp_file("s3cret\n", 7); /* mkstemp: 0600 */
    char text[512];
    snprintf(text, sizeof(text), "[store]\nurl = redis://u@127.0.0.1:6390\npassword_file = %s\n", pw);
    struct sl_conf *c = load_ok(text);
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    assert_int_equal(sl_conf_warn(c, f), 0);
    fclose(f);
    assert_string_equal(out, "");
    free(out);

    assert_int_equal(chmod(pw, 0644), 0);
    out = NULL;
    f = open_memstream(&out, &len);
    assert_int_equal(sl_conf_warn(c, f), 1);
    fclose(f);
    char want[512];
    snprintf(want, sizeof(want), "t.ini:3: warning: password_file '%s' is readable by others "
             "(mode 0644): chmod 600 it\n", pw);
    assert_string_equal(out, want);
    free(out);

    assert_int_equal(chmod(pw, 0640), 0);
    out = NULL;
    f = open_memstream(&out, &len);
    assert_int_equal(sl_conf_warn(c, f), 1);
    fclose(f);
    assert_non_null(strstr(out, "readable by its group (mode 0640)"));
    free(out);
    sl_conf_free(c);
    unlink(pw);
    free(pw);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_url),
        cmocka_unit_test(test_store_url_redacted),
        cmocka_unit_test(test_store_url_cluster_sentinel),
        cmocka_unit_test(test_tls_keys),
        cmocka_unit_test(test_sentinel_keys),
        cmocka_unit_test(test_lease),
        cmocka_unit_test(test_overrides),
        cmocka_unit_test(test_password_file),
        cmocka_unit_test(test_dump_password_file_absolute),
        cmocka_unit_test(test_password_file_mode_warning),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

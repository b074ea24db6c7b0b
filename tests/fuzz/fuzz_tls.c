/* sluice — libFuzzer target for the TLS engine (core/tls.c) fed hostile bytes.
 *
 * Input: byte 0 picks the mode and how the rest is cut into reads:
 *   mode 0: a server engine reads the bytes as a client's (ClientHello...);
 *   mode 1: a client engine that sent its ClientHello reads them as the
 *           server's answer;
 *   mode 2: a real client and server finish a handshake in memory, then the
 *           bytes are fed to the server as if the client had sent them
 *           after its records (corrupt or foreign records on an open link).
 * After every step the engine's bounds hold (tls-t.h), a failure stays a
 * failure with a reason, and nothing it returns exceeds what was asked.
 * A certificate is made once with the `openssl` command at start-up. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/err.h"
#include "core/tls.h"

static struct sl_tls_ctx *server_ctx, *client_ctx;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char dir[] = "/tmp/sluice-fuzz-tls-XXXXXX", cmd[1024], cert[96], key[96], err[256];
    if (mkdtemp(dir) == NULL)
        abort();
    snprintf(cmd, sizeof cmd,
             "cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
             "-nodes -keyout k.pem -out c.pem -days 3650 -subj /CN=localhost "
             "-addext subjectAltName=DNS:localhost >/dev/null 2>&1", dir);
    if (system(cmd) != 0)
        abort();
    snprintf(cert, sizeof cert, "%s/c.pem", dir);
    snprintf(key, sizeof key, "%s/k.pem", dir);
    struct sl_tls_conf s = { .role = SL_TLS_SERVER, .cert_file = cert, .key_file = key,
                             .alpn = "http/1.1" };
    struct sl_tls_conf c = { .role = SL_TLS_CLIENT, .ca_file = cert, .verify = SL_TLS_VERIFY_ON,
                             .alpn = "http/1.1" };
    if (sl_tls_ctx_new(&server_ctx, &s, err, sizeof err) != SL_OK ||
        sl_tls_ctx_new(&client_ctx, &c, err, sizeof err) != SL_OK) {
        fprintf(stderr, "fuzz_tls: %s\n", err);
        abort();
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        abort();
    return 0;
}

static void check(const struct sl_tls *t)
{
    if (sl_tls_feed_room(t) > SL_TLS_IN_MAX)
        abort();
    if (sl_tls_out_pending(t) > SL_TLS_OUT_MAX + 16384 + 256)
        abort();
    if (sl_tls_state(t) == SL_TLS_FAILED && sl_tls_error(t)[0] == '\0')
        abort();
}

static void drain(struct sl_tls *t)
{
    char out[4096];
    while (sl_tls_take(t, out, sizeof out) > 0)
        ;
}

/* Moves what <from> has to say into <to>. */
static void move(struct sl_tls *from, struct sl_tls *to)
{
    char buf[4096];
    size_t n;
    while (sl_tls_feed_room(to) > 0 &&
           (n = sl_tls_take(from, buf, sl_tls_feed_room(to) < sizeof buf ? sl_tls_feed_room(to)
                                                                       : sizeof buf)) > 0)
        if (sl_tls_feed(to, buf, n) != n)
            abort();
}

/* Feeds <data> to <t> in pieces of <piece> bytes, reading after each. */
static void feed_all(struct sl_tls *t, const uint8_t *data, size_t size, size_t piece)
{
    char plain[2048];
    size_t off = 0;
    int failed = 0;
    while (off < size) {
        size_t n = size - off < piece ? size - off : piece;
        size_t took = sl_tls_feed(t, data + off, n);
        off += took;
        for (int i = 0; i < 64; i++) {
            ssize_t r = sl_tls_read(t, plain, sizeof plain);
            if (r > (ssize_t)sizeof plain)
                abort();
            if (r == SL_EPROTO)
                failed = 1;
            if (r <= 0)
                break;
        }
        if (failed && sl_tls_state(t) != SL_TLS_FAILED)
            abort();
        check(t);
        drain(t);
        if (failed) {
            /* A failure is final. */
            if (sl_tls_read(t, plain, sizeof plain) != SL_EPROTO ||
                sl_tls_write(t, "x", 1) != SL_EPROTO)
                abort();
            return;
        }
        if (took == 0 && sl_tls_feed_room(t) == 0)
            return; /* full and nothing read: the caller would stop reading */
        if (sl_tls_state(t) == SL_TLS_OPEN && sl_tls_write(t, "pong", 4) < 0)
            abort();
    }
    sl_tls_feed_eof(t);
    (void)sl_tls_read(t, plain, sizeof plain);
    check(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int mode = data[0] % 3;
    size_t piece = 1 + (size_t)(data[0] / 3) * 97;
    data++;
    size--;
    struct sl_tls *s = NULL, *c = NULL;
    if (mode == 0) {
        s = sl_tls_new(server_ctx, NULL);
        feed_all(s, data, size, piece);
    } else if (mode == 1) {
        c = sl_tls_new(client_ctx, "localhost");
        if (sl_tls_handshake(c) != SL_EAGAIN || sl_tls_out_pending(c) == 0)
            abort(); /* the ClientHello waits */
        drain(c);
        feed_all(c, data, size, piece);
    } else {
        s = sl_tls_new(server_ctx, NULL);
        c = sl_tls_new(client_ctx, "localhost");
        for (int i = 0; i < 10; i++) {
            (void)sl_tls_handshake(c);
            move(c, s);
            (void)sl_tls_handshake(s);
            move(s, c);
        }
        if (sl_tls_state(c) != SL_TLS_OPEN || sl_tls_state(s) != SL_TLS_OPEN)
            abort();
        if (sl_tls_write(c, "hello", 5) != 5)
            abort();
        move(c, s);
        feed_all(s, data, size, piece);
    }
    sl_tls_free(s);
    sl_tls_free(c);
    return 0;
}

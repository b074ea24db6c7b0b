/* sluice — differential RESP fuzzer, the comparison: included by
 * tests/fuzz/diff_resp.c. The known differences (what the comparison
 * forgives or the generator avoids, each with where it is documented) and
 * the reply-by-reply comparison of two runs of a stream. */

/* ---- known differences ---------------------------------------------------
 *
 * Nothing is ignored silently: every difference the comparison forgives, or
 * the generator avoids, is listed here with the README line that documents
 * it. "normalised": the comparison masks it; "not generated": the generator
 * never produces the input (so it can neither fail nor pass). */
struct known {
    const char *what;
    const char *how;
    const char *readme; /* where README.md documents it */
};

static const struct known known[] = {
    { "connection ids (HELLO's \"id\" field)", "normalised: the integer after a bulk \"id\" is masked",
      "README \"Transparent, 1:1\": each client connection gets its own upstream connection "
      "(so its own id, directly as through sluice); pooled mode: docs/resp.md \"Pooled "
      "listeners\": HELLO's reply carries the id of the upstream connection that answered it" },
    { "CLIENT ID / CLIENT INFO / CLIENT LIST / INFO / TIME / RANDOMKEY / KEYS / MONITOR",
      "not generated",
      "not a sluice difference: ids, addresses, ports, clocks and hash order differ between any "
      "two connections or runs" },
    { "inline lines between 60 KiB and 70 KiB, count lines near 64 KiB", "not generated",
      "README Reference \"Big requests\": inline requests are held whole ... `too big inline "
      "request` (Redis's limit is the same 64 KiB, give or take the CRLF)" },
    { "an inline line over 64 KiB whose LF arrived (a mutated stream makes one)",
      "forgiven: sluice's `too big inline request` where Redis answered the line (under "
      "CLIENT REPLY OFF, where the refusal says nothing: sluice's fewer replies and close)",
      "README \"RESP framing\": a line without CRLF is capped at 64 KiB (Redis checks only "
      "while the LF has not arrived, so it runs a longer line that came whole)" },
    { "multibulk counts above 1,048,576", "not generated",
      "README \"RESP framing\": sluice caps the argument count (1,048,576)" },
    { "CLIENT REPLY inside MULTI; UNSUBSCRIBE/PUNSUBSCRIBE of named channels inside MULTI; WATCH",
      "not generated",
      "README Reference \"Pub/sub\": Not followed: a CLIENT REPLY queued inside MULTI, an "
      "unsubscribe of named channels queued inside MULTI, and an EXEC that WATCH makes fail" },
    { "CLIENT REPLY OFF (or SKIP) and then a protocol error",
      "normalised: Redis 7.0 leaves the connection open (no reply, input no longer read), "
      "sluice closes it; forgiven when the stream holds REPLY OFF/SKIP",
      "docs/resp.md \"CLIENT REPLY OFF (or SKIP with its skip still to come) and a protocol "
      "error\": no word is said; Redis keeps the connection open but reads no more, sluice "
      "closes it" },
    { "connection reset instead of FIN after a protocol error", "normalised: both are a close",
      "README Reference \"Closing\": sluice half-closes and lingers; Redis closes at once (a "
      "reset when unread input remains)" },
    { "replies lost to Redis's reset after a protocol error",
      "forgiven: fewer replies directly when the direct connection was reset and sluice's "
      "last reply is the protocol error",
      "a reset discards what the client had received and not read yet (a large reply "
      "ahead of the error, seen under load); sluice's close delivers them" },
    { "pooled mode: a key or channel of another client, DBSIZE, byte flips", "not generated",
      "not a sluice difference: concurrent clients sharing data have no defined order, "
      "directly as through sluice, so each client has its own key and channel prefix (a flip "
      "could make one client's key another's)" },
    { "pooled mode: HELLO queued in MULTI under a WATCH", "not generated",
      "docs/resp.md \"Pub/sub\" (1:1 too): Not followed: ... an EXEC that WATCH makes fail "
      "(taken as run)" },
};

/* ---- comparing ------------------------------------------------------------------ */

/* A reply with connection ids masked (known[0]): the integer that follows a
 * bulk "id" key (HELLO's reply, RESP2 array or RESP3 map). */
static void normalise(const char *p, size_t n, struct buf *out)
{
    static const char key[] = "$2\r\nid\r\n:";
    out->len = 0;
    for (size_t i = 0; i < n;) {
        if (n - i >= sizeof(key) - 1 && memcmp(p + i, key, sizeof(key) - 1) == 0) {
            buf_add(out, key, sizeof(key) - 1);
            i += sizeof(key) - 1;
            while (i < n && p[i] >= '0' && p[i] <= '9')
                i++;
            buf_str(out, "<id>");
            continue;
        }
        buf_add(out, p + i, 1);
        i++;
    }
    if (!out->p)
        buf_add(out, "", 0);
}

/* A short class of a reply for grouping failures: its type byte, or for an
 * error its first line (digits masked). */
static void sig_of(const char *p, size_t n, struct buf *sig)
{
    if (n == 0) {
        buf_str(sig, "(none)");
        return;
    }
    if (p[0] != '-') {
        buf_add(sig, p, 1);
        return;
    }
    for (size_t i = 0; i < n && i < 48 && p[i] != '\r'; i++)
        buf_add(sig, p[i] >= '0' && p[i] <= '9' ? "N" : p + i, 1);
}

/* The class of a reply where sluice's differs: a protocol error by its
 * text, anything else by its type; what Redis answered in its place only as
 * "a reply" or its error text when it was a protocol error too. */
static void sig_pair(const char *d, size_t dn, const char *l, size_t ln, struct buf *sig)
{
    static const char pe[] = "-ERR Protocol error";
    int dpe = dn >= sizeof(pe) - 1 && !memcmp(d, pe, sizeof(pe) - 1);
    int lpe = ln >= sizeof(pe) - 1 && !memcmp(l, pe, sizeof(pe) - 1);
    buf_str(sig, "Redis ");
    if (dpe || !lpe)
        sig_of(d, dn, sig);
    else
        buf_str(sig, "a reply");
    buf_str(sig, " / sluice ");
    sig_of(l, ln, sig);
}

/* Compares <b> (through sluice) with <a> (direct). Returns 0 when they
 * match; otherwise writes what differs into <why>. */
static int compare(const struct outcome *a, const struct outcome *b, int reply_off,
                   int long_line, struct buf *why, struct buf *sig)
{
    static const char too_big[] = "-ERR Protocol error: too big inline request\r\n";
    struct buf x = { 0 }, y = { 0 };
    int rc = 0;
    size_t n = a->n < b->n ? a->n : b->n;

    for (size_t i = 0; i < n && !rc; i++) {
        size_t as = i ? a->ends[i - 1] : 0, bs = i ? b->ends[i - 1] : 0;
        normalise(a->raw.p + as, a->ends[i] - as, &x);
        normalise(b->raw.p + bs, b->ends[i] - bs, &y);
        if (long_line && y.len == sizeof(too_big) - 1 && memcmp(y.p, too_big, y.len) == 0) {
            /* known[]: a line over 64 KiB is always refused by sluice;
             * Redis refuses it only when its LF has not arrived yet */
            buf_free(&x);
            buf_free(&y);
            return 0;
        }
        if (x.len != y.len || memcmp(x.p, y.p, x.len) != 0) {
            buf_fmt(why, "reply %zu differs", i + 1);
            rc = 1;
            sig_pair(x.p, x.len, y.p, y.len, sig);
            char *t = NULL;
            size_t tl = 0;
            FILE *f = open_memstream(&t, &tl);
            fputs("\n    direct: ", f);
            dump(f, x.p, x.len, 600);
            fputs("\n    sluice: ", f);
            dump(f, y.p, y.len, 600);
            /* a long reply: where the two part */
            size_t at = 0;
            while (at < x.len && at < y.len && x.p[at] == y.p[at])
                at++;
            if (at > 400) {
                size_t from = at - 100;
                fprintf(f, "\n    from byte %zu: direct: ", from);
                dump(f, x.p + from, x.len - from, 300);
                fputs("\n                    sluice: ", f);
                dump(f, y.p + from, y.len - from, 300);
            }
            fclose(f);
            buf_add(why, t, tl);
            free(t);
        }
    }
    /* known[]: Redis closes at once after a protocol error, with a reset
     * when input it did not read remains, and the reset throws away what
     * this client had not read yet: replies it sent may never arrive. So
     * fewer direct replies, the rest of sluice's ending in the same
     * protocol error, are the same conversation. */
    static const char proto_err[] = "-ERR Protocol error";
    if (!rc && a->n < b->n && a->reset &&
        b->raw.len - (b->n > 1 ? b->ends[b->n - 2] : 0) >= sizeof(proto_err) - 1 &&
        memcmp(b->raw.p + (b->n > 1 ? b->ends[b->n - 2] : 0), proto_err,
               sizeof(proto_err) - 1) == 0) {
        buf_free(&x);
        buf_free(&y);
        return 0;
    }
    /* known[]: the same line over 64 KiB under CLIENT REPLY OFF, where the
     * refusal says nothing: sluice closes there, Redis ran it (its LF had
     * arrived) and what followed */
    if (!rc && long_line && reply_off && b->n < a->n && b->ending == END_CLOSED) {
        buf_free(&x);
        buf_free(&y);
        return 0;
    }
    if (!rc && a->n != b->n) {
        buf_fmt(why, "%zu replies directly, %zu through sluice", a->n, b->n);
        buf_fmt(sig, "%s replies, then ", a->n > b->n ? "fewer" : "more");
        const struct outcome *m = a->n > b->n ? a : b;
        size_t from = n ? m->ends[n - 1] : 0;
        char *t = NULL;
        size_t tl = 0;
        FILE *f = open_memstream(&t, &tl);
        fprintf(f, "; the extra ones (%s): ", m == a ? "direct" : "sluice");
        sig_of(m->raw.p + from, m->ends[m->n - 1] - from, sig);
        dump(f, m->raw.p + from, m->ends[m->n - 1] - from, 600);
        fclose(f);
        buf_add(why, t, tl);
        free(t);
        rc = 1;
    }
    /* known[]: under CLIENT REPLY OFF Redis leaves a connection open after a
     * protocol error (without reading on); sluice closes it */
    if (!rc && reply_off && a->ending == END_TIMEOUT && b->ending == END_CLOSED)
        ;
    else if (!rc && a->ending != b->ending) {
        buf_fmt(why, "directly: %s; through sluice: %s", ending_name[a->ending],
                ending_name[b->ending]);
        buf_fmt(sig, "ending %d / %d", a->ending, b->ending);
        rc = 1;
    }
    /* bytes after the last complete reply (a reply cut short by the close) */
    size_t ta = a->n ? a->ends[a->n - 1] : 0, tb = b->n ? b->ends[b->n - 1] : 0;
    if (!rc && (a->raw.len - ta != b->raw.len - tb ||
                memcmp(a->raw.p + ta, b->raw.p + tb, a->raw.len - ta) != 0)) {
        buf_fmt(why, "incomplete tails differ (%zu bytes directly, %zu through sluice)",
                a->raw.len - ta, b->raw.len - tb);
        buf_str(sig, "tail");
        rc = 1;
    }
    if (!rc && a->bad != b->bad) {
        buf_fmt(why, "replies unframeable %s", a->bad ? "directly" : "through sluice");
        buf_str(sig, "unframeable");
        rc = 1;
    }
    buf_free(&x);
    buf_free(&y);
    return rc;
}


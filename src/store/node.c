/* sluice — one connection to one Redis node of the quota store.
 *
 *   sl_node_send() ------------------------------> out
 *        |                                          | prepare/check handle: one
 *        | fifo (wire order)                        | uv_try_write per batch, the
 *        | deadline list (deadline order)           v rest with uv_write
 *        |   one uv_timer for its head           Redis node
 *        v                                          |
 *   on_reply(fifo head) <-- object functions <-- one redisReaderFeed per read
 *                           fill nd->reply (integers, a text) or, for a
 *                           map request, nd->toks; build nothing
 *
 * The connection:
 *
 *   DISCONNECTED --retry timer--> CONNECTING --tcp up--> HANDSHAKE --AUTH, SELECT,
 *        ^      (owner: locate)       |                      |       SCRIPT LOAD ok
 *        |                            v                      v
 *        +--- tcp close cb <------ DROPPING <--- error ---- READY
 *             (retry timer armed                  (+ connect_timeout before READY)
 *              with the backoff)
 *
 * "Up" is READY and not suspect. A request past its deadline makes the
 * connection suspect (not up for new requests) without dropping it: replies
 * still come in order and are consumed. While suspect, the retry timer has
 * the owner send a probe with backoff; one answered within its deadline
 * makes the node up again. A suspect connection with no reply for
 * STALL_DROP_NS is dropped and made again.
 *
 * Batching: requests only append to <out>. A prepare handle (before the loop
 * blocks: requests from timers) and a check handle (after the I/O callbacks:
 * requests from reads) write <out> with one uv_try_write; what the kernel
 * does not take goes out with one uv_write, and the next batch waits for it.
 * Both handles run only while something is queued, and are unreferenced.
 *
 * Timeouts: all requests of one configuration share a timeout, so the
 * deadline list is nearly always in FIFO order; it is a list of its own
 * anyway because a NOSCRIPT retry goes to the FIFO's tail with its first
 * deadline, a redirected request arrives from another node with its first
 * deadline, and a reload may shorten the timeout. The timer is lazy: it is
 * armed for the earliest deadline when that gets earlier, never disarmed when
 * a request completes; firing early only re-arms it. */
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/log.h"
#include "core/resolve.h"
#include "core/tls.h"
#include "store/node.h"
#include "store/store-i.h"

#define STALL_DROP_NS    (5000ull * 1000 * 1000) /* suspect and no reply for this long: reconnect */
#define READ_SIZE        (64 * 1024)       /* one read */
#define MAX_UNPARSED     (1024 * 1024)     /* largest reply the reader may hold unfinished */

static void start_connect(struct sl_node *nd);
static void drop_conn(struct sl_node *nd, const char *why);
static void flush(struct sl_node *nd);
static void on_write(uv_write_t *w, int status);
static void on_retry(uv_timer_t *t);

/* ---- FIFO and deadlines ------------------------------------------------- */

static void fifo_push(struct sl_node *nd, struct sl_store_req *r)
{
    r->next = NULL;
    r->node = nd;
    if (nd->fifo_tail)
        nd->fifo_tail->next = r;
    else
        nd->fifo_head = r;
    nd->fifo_tail = r;
    nd->fifo_n++;
}

static struct sl_store_req *fifo_pop(struct sl_node *nd)
{
    struct sl_store_req *r = nd->fifo_head;
    if (r != NULL) {
        nd->fifo_head = r->next;
        if (nd->fifo_head == NULL)
            nd->fifo_tail = NULL;
        nd->fifo_n--;
        r->next = NULL;
        r->node = NULL;
    }
    return r;
}

static void on_deadline(uv_timer_t *t);

static void dl_arm(struct sl_node *nd, uint64_t at)
{
    uint64_t now = uv_now(nd->st->loop);
    uv_timer_start(&nd->dl_timer, on_deadline, at > now ? at - now : 0, 0);
    nd->dl_armed = at;
}

/* Inserts <r> by deadline; nearly always at the tail. */
static void dl_insert(struct sl_node *nd, struct sl_store_req *r)
{
    struct sl_store_req *after = nd->dl_tail;
    while (after != NULL && after->deadline > r->deadline)
        after = after->dl_prev;
    r->dl_prev = after;
    r->dl_next = after ? after->dl_next : nd->dl_head;
    if (r->dl_next)
        r->dl_next->dl_prev = r;
    else
        nd->dl_tail = r;
    if (after)
        after->dl_next = r;
    else
        nd->dl_head = r;
    r->in_dl = 1;
    if (nd->dl_armed == 0 || r->deadline < nd->dl_armed)
        dl_arm(nd, r->deadline);
}

static void dl_remove(struct sl_node *nd, struct sl_store_req *r)
{
    if (!r->in_dl)
        return;
    if (r->dl_prev)
        r->dl_prev->dl_next = r->dl_next;
    else
        nd->dl_head = r->dl_next;
    if (r->dl_next)
        r->dl_next->dl_prev = r->dl_prev;
    else
        nd->dl_tail = r->dl_prev;
    r->dl_prev = r->dl_next = NULL;
    r->in_dl = 0;
}

void sl_node_unlist(struct sl_node *nd, struct sl_store_req *r)
{
    dl_remove(nd, r);
}

/* ---- health --------------------------------------------------------------- */

int sl_node_up(const struct sl_node *nd)
{
    return nd != NULL && !nd->closing && nd->conn == SL_NODE_READY && !nd->suspect;
}

static uint64_t next_backoff(struct sl_node *nd)
{
    uint64_t ms = nd->backoff_ms;
    nd->backoff_ms = ms * 2 > SL_NODE_BACKOFF_MAX_MS ? SL_NODE_BACKOFF_MAX_MS : ms * 2;
    /* +-25% so a fleet does not come back in step after a store restart. */
    nd->rng = nd->rng * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t span = ms / 2;
    return ms - ms / 4 + (span ? (nd->rng >> 33) % span : 0);
}

/* A deadline passed: no new requests until a probe is answered in time. */
static void mark_suspect(struct sl_node *nd, const char *why)
{
    if (nd->conn != SL_NODE_READY || nd->suspect)
        return;
    nd->suspect = 1;
    sl_store_node_health(nd->st, nd, why);
    uv_timer_start(&nd->retry_timer, on_retry, next_backoff(nd), 0);
}

static void clear_suspect(struct sl_node *nd)
{
    if (!nd->suspect)
        return;
    nd->suspect = 0;
    nd->backoff_ms = SL_NODE_BACKOFF_MIN_MS;
    uv_timer_stop(&nd->retry_timer);
    sl_store_node_health(nd->st, nd, "");
}

/* Error replies that say something about the node rather than the request:
 * 1 = busy or unable to serve now (mark down, probe), 2 = this connection
 * needs its handshake again (drop and reconnect), 0 = the request's own. */
static int error_class(const char *e)
{
    static const char *const busy[] = { "BUSY", "LOADING", "MASTERDOWN", "OOM", "MISCONF",
                                        "TRYAGAIN", "CLUSTERDOWN" };
    static const char *const redo[] = { "NOAUTH", "NOPERM", "WRONGPASS", "READONLY" };
    for (size_t i = 0; i < sizeof(busy) / sizeof(busy[0]); i++)
        if (strncmp(e, busy[i], strlen(busy[i])) == 0)
            return 1;
    for (size_t i = 0; i < sizeof(redo) / sizeof(redo[0]); i++)
        if (strncmp(e, redo[i], strlen(redo[i])) == 0)
            return 2;
    return 0;
}

/* ---- completing requests ------------------------------------------------ */

static void count_latency(struct sl_node *nd, struct sl_store_req *r, uint64_t now_ns)
{
    uint64_t us = now_ns > r->sent_ns ? (now_ns - r->sent_ns) / 1000 : 0;
    int b = 0;
    while (b < 11 && us > sl_store_latency_bounds_us[b])
        b++;
    nd->st->stats.latency_le[b]++;
    nd->st->stats.latency_sum_us += us;
    nd->st->stats.latency_count++;
}

void sl_node_complete(struct sl_node *nd, struct sl_store_req *r, int status, const int64_t *vals,
                      int n, const char *err)
{
    r->done = 1;
    if (nd != NULL)
        dl_remove(nd, r);
    if (nd != NULL && nd->probe_req == r)
        nd->probe_req = NULL;
    struct sl_store *st = nd != NULL ? nd->st : NULL;
    if (st != NULL && st->hb_req == r)
        st->hb_req = NULL;
    if (st != NULL && (r->kind == SL_K_EVAL || r->kind == SL_K_TEXT) && status != 0 &&
        r->parent == NULL)
        st->stats.errors++;
    if (r->kind == SL_K_TEXT) {
        if (r->tcb != NULL) {
            sl_store_text_cb *tcb = r->tcb;
            r->tcb = NULL;
            /* a failure's text is its reason; the caller sees status first */
            tcb(r->data, status, status == 0 ? NULL : err, status == 0 || err == NULL ? 0 : strlen(err));
        }
        return;
    }
    if (r->cb != NULL) {
        sl_store_cb *cb = r->cb;
        r->cb = NULL;
        cb(r->data, status, vals, n, err);
    }
}

static void complete(struct sl_node *nd, struct sl_store_req *r, int status,
                     const int64_t *vals, int n, const char *err)
{
    sl_node_complete(nd, r, status, vals, n, err);
}

/* Completes every request in flight with SL_ESTORE and recycles them. */
static void fail_all(struct sl_node *nd, const char *why)
{
    /* Detached first: a callback may make requests or close the store. */
    struct sl_store_req *r = nd->fifo_head;
    nd->fifo_head = nd->fifo_tail = NULL;
    nd->fifo_n = 0;
    while (r != NULL) {
        struct sl_store_req *next = r->next;
        r->node = NULL;
        if (r->kind == SL_K_MAP && nd->st->map_req == r) {
            nd->st->map_req = NULL;
            if (!r->done) {
                r->done = 1;
                sl_store_map_reply(nd->st, nd, NULL, why);
            }
        }
        if (!r->done)
            complete(nd, r, SL_ESTORE, NULL, 0, why);
        dl_remove(nd, r);
        sl_store_req_put(nd->st, r);
        r = next;
    }
}

/* 1 when the node's socket has bytes that the loop has not read yet. */
static int unread(struct sl_node *nd)
{
    uv_os_fd_t fd;
    if (!nd->tcp_open || nd->conn != SL_NODE_READY || uv_fileno((uv_handle_t *)&nd->tcp, &fd) != 0)
        return 0;
    struct pollfd p = { .fd = fd, .events = POLLIN };
    return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

static void on_deadline(uv_timer_t *t)
{
    struct sl_node *nd = t->data;
    struct sl_store *st = nd->st;
    uint64_t now = uv_now(st->loop);
    nd->dl_armed = 0;
    /* libuv runs timers before it reads: when this process was not run
     * for a while (a loaded machine) the deadline is seen passed while the
     * answer, come in time, waits unread in the socket; a timeout then
     * would let on_failure decide (a refusal, or a decision the store
     * never counts) what the store has decided. So with bytes waiting, the
     * loop reads first and the deadline is looked at again 1 ms on: once
     * per head, so a node that keeps sending never postpones a timeout. */
    if (nd->dl_head != NULL && nd->dl_head->deadline <= now && nd->dl_reread != nd->dl_head &&
        unread(nd)) {
        nd->dl_reread = nd->dl_head;
        dl_arm(nd, now + 1);
        return;
    }
    if (nd->dl_head != NULL && nd->dl_head->deadline <= now)
        mark_suspect(nd, "timeout"); /* before the callbacks: they see the node down */
    struct sl_store_req *r;
    while (!nd->closing && (r = nd->dl_head) != NULL && r->deadline <= now) {
        /* It stays in the FIFO: its reply is still owed and will be dropped. */
        if ((r->kind == SL_K_EVAL || r->kind == SL_K_TEXT) && r->parent == NULL)
            st->stats.timeouts++;
        if (r->kind == SL_K_MAP) {
            dl_remove(nd, r);
            r->done = 1;
            if (st->map_req == r) {
                st->map_req = NULL;
                sl_store_map_reply(st, nd, NULL, "timeout");
            }
            continue;
        }
        complete(nd, r, SL_ESTORE, NULL, 0, "timeout");
    }
    if (!nd->closing && nd->dl_head != NULL && nd->dl_armed == 0)
        dl_arm(nd, nd->dl_head->deadline);
}

/* ---- sending --------------------------------------------------------------- */

static void arm_flush(struct sl_node *nd);

struct sl_store_req *sl_node_cmd(struct sl_node *nd, enum sl_req_kind kind, int script,
                                 int argc, const struct sl_str *argv)
{
    struct sl_store_req *r = sl_store_req_get(nd->st);
    if (r == NULL)
        return NULL;
    if (sl_wire_encode(&nd->out, argc, argv, 0, NULL, 0, NULL) < 0) {
        sl_store_req_put(nd->st, r);
        return NULL;
    }
    r->kind = (uint8_t)kind;
    r->script = script;
    r->sent_ns = uv_hrtime();
    r->seq = ++nd->seq;
    fifo_push(nd, r);
    arm_flush(nd);
    return r;
}

static int send_load(struct sl_node *nd, enum sl_req_kind kind, int i)
{
    struct sl_str argv[3] = { { "SCRIPT", 6 }, { "LOAD", 4 },
                              { nd->st->scripts[i].body, nd->st->scripts[i].len } };
    struct sl_store_req *r = sl_node_cmd(nd, kind, i, 3, argv);
    if (r == NULL)
        return -1;
    nd->load_seq[i] = r->seq;
    return 0;
}

/* Queues an encoded command (<r>->cmd) on the wire. */
static int send_encoded(struct sl_node *nd, struct sl_store_req *r)
{
    if (sl_wire_append(&nd->out, r->cmd.p, r->cmd.len) < 0)
        return -1;
    r->seq = ++nd->seq;
    fifo_push(nd, r);
    arm_flush(nd);
    return 0;
}

int sl_node_send(struct sl_node *nd, struct sl_store_req *r, int asking)
{
    if (asking) {
        struct sl_str argv[1] = { { "ASKING", 6 } };
        if (sl_node_cmd(nd, SL_K_ASKING, 0, 1, argv) == NULL)
            return -1;
    }
    if (send_encoded(nd, r) < 0)
        return -1;
    if (r->deadline != 0)
        dl_insert(nd, r);
    return 0;
}

void sl_node_try_write_now(struct sl_node *nd)
{
    if (nd->conn != SL_NODE_READY || nd->io.writing || nd->out.len == 0)
        return;
    if (nd->io.tls != NULL) {
        sl_tlsio_write_now(&nd->io, &nd->out); /* as much as the kernel takes now */
        return;
    }
    uv_buf_t b = uv_buf_init(nd->out.p, (unsigned)nd->out.len);
    (void)uv_try_write((uv_stream_t *)&nd->tcp, &b, 1);
    nd->out.len = 0;
}

/* TLS: encrypts what is queued and writes the ciphertext (store/tlsio.h). */
static void tls_flush(struct sl_node *nd)
{
    char why[320];
    if (nd->io.tls == NULL || (nd->conn != SL_NODE_HANDSHAKE && nd->conn != SL_NODE_READY))
        return;
    if (sl_tlsio_flush(&nd->io, &nd->out, why, sizeof(why)) < 0)
        drop_conn(nd, why);
}

/* Writes everything queued: one uv_try_write, the rest with uv_write. */
static void flush(struct sl_node *nd)
{
    if (nd->io.tls != NULL) {
        tls_flush(nd);
        return;
    }
    if (nd->io.writing || nd->out.len == 0 ||
        (nd->conn != SL_NODE_HANDSHAKE && nd->conn != SL_NODE_READY))
        return;
    uv_buf_t b = uv_buf_init(nd->out.p, (unsigned)nd->out.len);
    int n = uv_try_write((uv_stream_t *)&nd->tcp, &b, 1);
    if (n == (int)nd->out.len) {
        nd->out.len = 0;
        return;
    }
    if (n < 0 && n != UV_EAGAIN) {
        drop_conn(nd, uv_strerror(n));
        return;
    }
    if (n < 0)
        n = 0;
    /* The kernel took part: the rest goes with a write request from wbuf. */
    struct sl_obuf tmp = nd->io.wbuf;
    nd->io.wbuf = nd->out;
    nd->out = tmp;
    nd->out.len = 0;
    b = uv_buf_init(nd->io.wbuf.p + n, (unsigned)(nd->io.wbuf.len - (size_t)n));
    int rc = uv_write(&nd->io.req, (uv_stream_t *)&nd->tcp, &b, 1, on_write);
    if (rc < 0) {
        drop_conn(nd, uv_strerror(rc));
        return;
    }
    nd->io.writing = 1;
}

static void on_write(uv_write_t *w, int status)
{
    struct sl_node *nd = w->data;
    sl_tlsio_written(&nd->io);
    if (status == UV_ECANCELED || nd->closing)
        return; /* the connection is closing */
    if (status < 0) {
        drop_conn(nd, uv_strerror(status));
        return;
    }
    flush(nd);
}

static void on_flush_prepare(uv_prepare_t *h)
{
    struct sl_node *nd = h->data;
    flush(nd);
    if (nd->out.len == 0 || (nd->conn != SL_NODE_HANDSHAKE && nd->conn != SL_NODE_READY)) {
        uv_prepare_stop(&nd->prepare);
        uv_check_stop(&nd->check);
        nd->flush_armed = 0;
    }
}

static void on_flush_check(uv_check_t *h)
{
    struct sl_node *nd = h->data;
    flush(nd);
}

static void arm_flush(struct sl_node *nd)
{
    if (nd->flush_armed || nd->closing)
        return;
    nd->flush_armed = 1;
    uv_prepare_start(&nd->prepare, on_flush_prepare);
    uv_check_start(&nd->check, on_flush_check);
}

/* ---- the reply path ---------------------------------------------------------- */

/* A map reply is collected as tokens (store/slot.h); the object returned is
 * then the token's index + 1, so a child finds its parent. */
static int map_reply(const struct sl_node *nd)
{
    return nd->fifo_head != NULL && nd->fifo_head->kind == SL_K_MAP && nd->toks != NULL;
}

static void *map_tok(struct sl_node *nd, const redisReadTask *t, int type, int64_t i,
                     const char *s, size_t len)
{
    int parent = t->parent != NULL ? (int)((uintptr_t)t->parent->obj - 1) : -1;
    int k = sl_slot_tok_add(nd->toks, parent, type, i, s, len);
    return (void *)(uintptr_t)(k < 0 ? 1 : k + 1);
}

static void *on_string(const redisReadTask *t, char *s, size_t len)
{
    struct sl_node *nd = t->privdata;
    struct sl_reply *rp = &nd->reply;
    if (map_reply(nd) && !(t->parent == NULL && t->type == REDIS_REPLY_ERROR))
        return map_tok(nd, t, t->type, 0, s, len);
    if (t->parent != NULL) {
        if (!rp->bad)
            rp->bad = "reply is not a flat array of integers";
        return nd;
    }
    rp->type = t->type;
    size_t n = len < SL_STORE_TEXT_MAX - 1 ? len : SL_STORE_TEXT_MAX - 1;
    memcpy(rp->text, s, n);
    rp->text[n] = '\0';
    rp->textlen = len;
    return nd; /* any non-NULL pointer: nothing is built */
}

static void *on_array(const redisReadTask *t, int elements)
{
    struct sl_node *nd = t->privdata;
    struct sl_reply *rp = &nd->reply;
    if (map_reply(nd))
        return map_tok(nd, t, REDIS_REPLY_ARRAY, 0, NULL, 0);
    if (t->parent != NULL) {
        if (!rp->bad)
            rp->bad = "reply is not a flat array of integers";
        return nd;
    }
    rp->type = REDIS_REPLY_ARRAY;
    if (elements > SL_STORE_MAX_VALS)
        rp->bad = "reply has too many integers";
    return nd;
}

static void *on_integer(const redisReadTask *t, long long v)
{
    struct sl_node *nd = t->privdata;
    struct sl_reply *rp = &nd->reply;
    if (map_reply(nd))
        return map_tok(nd, t, REDIS_REPLY_INTEGER, v, NULL, 0);
    if (t->parent == NULL) {
        rp->type = REDIS_REPLY_INTEGER;
        rp->vals[0] = v;
        rp->n = 1;
    } else if (t->parent->parent != NULL) {
        if (!rp->bad)
            rp->bad = "reply is not a flat array of integers";
    } else if (t->idx >= 0 && t->idx < SL_STORE_MAX_VALS) {
        rp->vals[t->idx] = v;
        rp->n = t->idx + 1;
    } else if (!rp->bad) {
        rp->bad = "reply has too many integers";
    }
    return nd;
}

static void *on_nil(const redisReadTask *t)
{
    struct sl_node *nd = t->privdata;
    struct sl_reply *rp = &nd->reply;
    if (map_reply(nd))
        return map_tok(nd, t, REDIS_REPLY_NIL, 0, NULL, 0);
    if (t->parent == NULL)
        rp->type = REDIS_REPLY_NIL;
    else if (!rp->bad)
        rp->bad = "reply is not a flat array of integers";
    return nd;
}

static void on_free_obj(void *obj)
{
    (void)obj; /* nothing was built */
}

static redisReplyObjectFunctions reply_fn = {
    .createString  = on_string,
    .createArray   = on_array,
    .createInteger = on_integer,
    .createNil     = on_nil,
    .freeObject    = on_free_obj,
};

static void become_ready(struct sl_node *nd)
{
    nd->conn = SL_NODE_READY;
    nd->suspect = 0;
    nd->backoff_ms = SL_NODE_BACKOFF_MIN_MS;
    uv_timer_stop(&nd->connect_timer);
    uv_timer_stop(&nd->retry_timer);
    if (nd->connected_once)
        nd->st->stats.reconnects++;
    nd->connected_once = 1;
    nd->just_ready = 1;
    sl_store_node_health(nd->st, nd, "");
}

/* A reply to the handshake. Returns 0, or -1 after dropping the connection. */
static int on_handshake_reply(struct sl_node *nd, struct sl_store_req *r, const struct sl_reply *rp)
{
    char why[SL_STORE_TEXT_MAX + 64];
    if (rp->type == REDIS_REPLY_ERROR) {
        snprintf(why, sizeof(why), "%s failed: %s",
                 r->kind == SL_K_HS_LOAD ? "SCRIPT LOAD" : r->script == 0 ? "AUTH" : "SELECT",
                 rp->text);
        drop_conn(nd, why);
        return -1;
    }
    if (r->kind == SL_K_HS_LOAD &&
        (rp->type != REDIS_REPLY_STRING || rp->textlen != 40 ||
         memcmp(rp->text, nd->st->scripts[r->script].sha, 40) != 0)) {
        /* Our SHA-1 disagrees with the store's: EVALSHA would never work. */
        snprintf(why, sizeof(why), "SCRIPT LOAD of %d returned an unexpected sha", r->script);
        drop_conn(nd, why);
        return -1;
    }
    if (--nd->hs_pending == 0)
        become_ready(nd);
    return 0;
}

/* A reply to an EVALSHA (EVAL or HB), an HGET (TEXT) or a PING (PROBE).
 * Returns 1 when <r> went back on a wire (NOSCRIPT retry, a redirection):
 * it must not be recycled. */
static int on_eval_reply(struct sl_node *nd, struct sl_store_req *r, const struct sl_reply *rp,
                         uint64_t now_ns)
{
    struct sl_store *st = nd->st;
    int errcls = rp->type == REDIS_REPLY_ERROR ? error_class(rp->text) : 0;

    if (rp->type == REDIS_REPLY_ERROR && st->cluster && !r->done && r->kind != SL_K_PROBE &&
        (rp->text[0] == 'M' || rp->text[0] == 'A')) {
        nd->redirects_in++;
        if (sl_store_redirect(st, nd, r, rp->text))
            return 1;
    }
    if (rp->type == REDIS_REPLY_ERROR && strncmp(rp->text, "NOSCRIPT", 8) == 0 && !r->retried &&
        !r->done && r->kind != SL_K_TEXT && r->kind != SL_K_PROBE &&
        (r->cb != NULL || r->kind == SL_K_HB)) {
        /* SCRIPT FLUSH or a restart behind our back: load it and go again,
         * unless a load sent after this request already did. */
        int ok = 1;
        if (nd->load_seq[r->script] < r->seq) {
            ok = send_load(nd, SL_K_LOAD, r->script) == 0;
            if (ok)
                st->stats.noscript_reloads++;
        }
        if (ok) {
            r->retried = 1;
            dl_remove(nd, r);
            if (sl_node_send(nd, r, 0) == 0)
                return 1;
        }
    }
    if (r->kind == SL_K_EVAL || r->kind == SL_K_TEXT)
        count_latency(nd, r, now_ns);
    if (r->done)
        return 0; /* timed out: the reply is dropped */

    const char *err = NULL;
    int status = SL_ESTORE;
    if (r->kind == SL_K_TEXT) {
        if (rp->type == REDIS_REPLY_NIL) {
            status = 0;
        } else if (rp->type == REDIS_REPLY_STRING && rp->textlen <= SL_STORE_TEXT_CAP) {
            r->done = 1;
            dl_remove(nd, r);
            if (r->tcb != NULL) {
                sl_store_text_cb *tcb = r->tcb;
                r->tcb = NULL;
                tcb(r->data, 0, rp->text, rp->textlen);
            }
            return 0;
        } else if (rp->type == REDIS_REPLY_STRING) {
            err = "reply longer than the text cap";
        } else if (rp->type == REDIS_REPLY_ERROR) {
            err = rp->text;
        } else {
            err = "unexpected reply type";
        }
        if (errcls == 1)
            mark_suspect(nd, rp->text);
        complete(nd, r, status, NULL, 0, err);
    } else if (r->kind == SL_K_PROBE) {
        /* CLUSTER INFO: a node that answers while the cluster is down
         * (CLUSTERDOWN for every key until a failover ends) is not up. */
        int ok = rp->type == REDIS_REPLY_STRING && strncmp(rp->text, "cluster_state:ok", 16) == 0;
        complete(nd, r, 0, NULL, 0, NULL);
        if (ok)
            clear_suspect(nd); /* answered in time: the node serves again */
    } else {
        if (rp->bad)
            err = rp->bad;
        else if (rp->type == REDIS_REPLY_INTEGER || rp->type == REDIS_REPLY_ARRAY)
            status = 0;
        else if (rp->type == REDIS_REPLY_ERROR)
            err = rp->text;
        else
            err = "unexpected reply type";

        if (r->kind == SL_K_HB) {
            char q[160];
            int was_probe = nd->suspect;
            sl_store_heartbeat_reply(st, status, rp->vals, rp->n);
            complete(nd, r, status, rp->vals, rp->n, err);
            if (errcls == 1)
                mark_suspect(nd, rp->text);
            else if (errcls == 0 && was_probe)
                clear_suspect(nd); /* answered in time: the store serves again */
            else if (errcls == 0 && status != 0)
                sl_log_debug("quota store heartbeat failed", "error=%s",
                             sl_log_quote(err, strlen(err), q, sizeof(q)));
        } else {
            if (errcls == 1)
                mark_suspect(nd, rp->text); /* first: the callback sees the node down */
            complete(nd, r, status, rp->vals, rp->n, err);
        }
    }
    if (errcls == 2 && !nd->closing && nd->conn == SL_NODE_READY) {
        char why[SL_STORE_TEXT_MAX + 16];
        snprintf(why, sizeof(why), "%s", rp->text);
        drop_conn(nd, why);
    }
    return 0;
}

static void on_reply(struct sl_node *nd, uint64_t now_ns)
{
    struct sl_reply *rp = &nd->reply;
    struct sl_store_req *r = fifo_pop(nd);
    if (r == NULL) {
        drop_conn(nd, "reply without a request");
        return;
    }
    switch ((enum sl_req_kind)r->kind) {
    case SL_K_HS:
    case SL_K_HS_LOAD:
        on_handshake_reply(nd, r, rp);
        break;
    case SL_K_LOAD:
        if (rp->type != REDIS_REPLY_STRING) {
            const char *e = rp->type == REDIS_REPLY_ERROR ? rp->text : "unexpected reply";
            char q[160];
            sl_log_warn_rl("store_script_load", "quota store script load failed",
                           "script=%d error=%s", r->script,
                           sl_log_quote(e, strlen(e), q, sizeof(q)));
        }
        break;
    case SL_K_ASKING:
    case SL_K_SPLIT:
        break;
    case SL_K_MAP:
        dl_remove(nd, r);
        if (!r->done && nd->st->map_req == r) {
            r->done = 1;
            nd->st->map_req = NULL;
            const char *err = rp->type == REDIS_REPLY_ERROR ? rp->text
                              : nd->toks == NULL ? "out of memory"
                              : nd->toks->bad;
            sl_store_map_reply(nd->st, nd, err == NULL ? nd->toks : NULL, err);
        }
        if (nd->toks != NULL)
            sl_slot_toks_reset(nd->toks);
        break;
    case SL_K_EVAL:
    case SL_K_HB:
    case SL_K_TEXT:
    case SL_K_PROBE:
        if (on_eval_reply(nd, r, rp, now_ns))
            return;
        break;
    }
    /* Recycled after the callbacks: a request dropped by drop_conn() above
     * was popped already, so only <r> is ours here. */
    sl_store_req_put(nd->st, r);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    (void)hint;
    struct sl_node *nd = h->data;
    *buf = uv_buf_init(nd->rbuf, READ_SIZE);
}

static void on_plain(struct sl_node *nd, const char *p, size_t len);
static void tls_on_read(struct sl_node *nd, const char *p, size_t len);

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct sl_node *nd = s->data;
    if (nread == 0)
        return;
    if (nread < 0) {
        drop_conn(nd, nread == UV_EOF ? "connection closed by the store" : uv_strerror((int)nread));
        return;
    }
    if (nd->io.tls != NULL)
        tls_on_read(nd, buf->base, (size_t)nread);
    else
        on_plain(nd, buf->base, (size_t)nread);
}

struct tls_read {
    struct sl_node *nd;
    uint64_t        gen;
};

static int tls_plain(void *arg, const char *p, size_t len)
{
    struct tls_read *tr = arg;
    struct sl_node *nd = tr->nd;
    on_plain(nd, p, len);
    return nd->gen != tr->gen || nd->closing || nd->st->closing; /* the engine is gone */
}

/* Ciphertext from the store (store/tlsio.h): replies out to the reader; a
 * TLS failure or the store's close_notify ends the connection. */
static void tls_on_read(struct sl_node *nd, const char *p, size_t len)
{
    char why[320];
    struct tls_read tr = { nd, nd->gen };
    int rc = sl_tlsio_read(&nd->io, p, len, &nd->out, tls_plain, &tr, why, sizeof(why));
    if (rc == 1)
        return;
    if (nd->io.opened) {
        nd->io.opened = 0;
        sl_log_debug("quota store TLS up", "addr=%s version=%s peer=\"%s\"", nd->name,
                     sl_tls_version(nd->io.tls), sl_tls_peer_name(nd->io.tls));
    }
    if (rc == SL_ECLOSED)
        drop_conn(nd, "connection closed by the store (TLS close_notify)");
    else if (rc < 0)
        drop_conn(nd, why);
}

/* Plaintext from the store: replies in wire order. */
static void on_plain(struct sl_node *nd, const char *p, size_t len)
{
    if (redisReaderFeed(nd->reader, p, len) != REDIS_OK) {
        drop_conn(nd, "out of memory");
        return;
    }
    uint64_t now_ns = uv_hrtime();
    uint64_t gen = nd->gen;
    for (;;) {
        void *obj = NULL;
        if (nd->fifo_head != NULL && nd->fifo_head->kind == SL_K_MAP && nd->toks == NULL &&
            (nd->toks = calloc(1, sizeof(*nd->toks))) == NULL) {
            drop_conn(nd, "out of memory");
            return;
        }
        if (redisReaderGetReply(nd->reader, &obj) != REDIS_OK) {
            char why[160];
            snprintf(why, sizeof(why), "bad reply: %s", nd->reader->errstr);
            drop_conn(nd, why);
            return;
        }
        if (obj == NULL)
            break;
        on_reply(nd, now_ns);
        if (nd->gen != gen || nd->closing || nd->st->closing)
            return; /* dropped or closed by a callback: the reader is gone */
        nd->reply.type = 0;
        nd->reply.n = 0;
        nd->reply.bad = NULL;
        nd->reply.textlen = 0;
        nd->reply.text[0] = '\0';
    }
    /* hiredis waits for a whole bulk before its callback: cap what it holds. */
    if (nd->reader->len - nd->reader->pos > MAX_UNPARSED)
        drop_conn(nd, "reply too large");
}

/* ---- connection ----------------------------------------------------------- */

static void on_handle_close(uv_handle_t *h);

static void on_tcp_close(uv_handle_t *h)
{
    struct sl_node *nd = h->data;
    nd->tcp_open = 0;
    if (nd->closing) {
        on_handle_close(h);
        return;
    }
    nd->handles--;
    nd->conn = SL_NODE_DISCONNECTED;
    if (nd->retired)
        return;
    uint64_t wait = next_backoff(nd);
    if (nd->reconnect_now) {
        nd->reconnect_now = 0;
        wait = 0;
    }
    uv_timer_start(&nd->retry_timer, on_retry, wait, 0);
}

/* Ends the connection: every request in flight completes with SL_ESTORE. */
static void drop_conn(struct sl_node *nd, const char *why)
{
    if (!nd->tcp_open || nd->conn == SL_NODE_DROPPING)
        return;
    char q[160];
    sl_log_debug("quota store connection lost", "addr=%s reason=%s", nd->name,
                 sl_log_quote(why, strlen(why), q, sizeof(q)));
    nd->gen++;
    nd->conn = SL_NODE_DROPPING;
    nd->suspect = 0;
    nd->hs_pending = 0;
    uv_timer_stop(&nd->connect_timer);
    uv_timer_stop(&nd->retry_timer);
    uv_read_stop((uv_stream_t *)&nd->tcp);
    uv_close((uv_handle_t *)&nd->tcp, on_tcp_close);
    if (nd->reader != NULL) {
        redisReaderFree(nd->reader);
        nd->reader = NULL;
    }
    sl_tlsio_stop(&nd->io); /* a write in flight uses io.wbuf, not the engine */
    if (nd->toks != NULL)
        sl_slot_toks_reset(nd->toks);
    nd->out.len = 0;
    sl_store_node_health(nd->st, nd, why);
    fail_all(nd, why);
}

void sl_node_drop(struct sl_node *nd, const char *why, int retire)
{
    nd->retired = (uint8_t)(retire != 0);
    if (nd->conn == SL_NODE_DISCONNECTED) {
        uv_timer_stop(&nd->retry_timer);
        if (!retire)
            start_connect(nd);
        return;
    }
    nd->reconnect_now = !retire;
    drop_conn(nd, why);
}

static void on_connect_timeout(uv_timer_t *t)
{
    struct sl_node *nd = t->data;
    drop_conn(nd, nd->conn == SL_NODE_CONNECTING ? "connect timeout" : "handshake timeout");
}

/* The name a TLS connection sends as SNI and checks the certificate for:
 * tls_sni, else the url's host when it is a name (not for Sentinel: its
 * hosts are the sentinels), else the node's own address. */
static const char *tls_name(const struct sl_node *nd, char *buf, size_t cap)
{
    const struct sl_store_conf *c = &nd->st->conf;
    if (c->tls_sni != NULL && c->tls_sni[0] != '\0')
        return c->tls_sni;
    if (c->addr.named && c->kind != SL_STORE_SENTINEL) {
        snprintf(buf, cap, "%s", c->addr.text);
        char *colon = strrchr(buf, ':');
        if (colon != NULL)
            *colon = '\0';
        return buf;
    }
    buf[0] = '\0';
    if (nd->ss.ss_family == AF_INET6)
        uv_ip6_name((const struct sockaddr_in6 *)&nd->ss, buf, cap);
    else
        uv_ip4_name((const struct sockaddr_in *)&nd->ss, buf, cap);
    return buf;
}

static void on_connect(uv_connect_t *c, int status)
{
    struct sl_node *nd = c->data;
    struct sl_store *st = nd->st;
    if (status == UV_ECANCELED || nd->conn != SL_NODE_CONNECTING)
        return; /* closed while connecting */
    if (status < 0) {
        drop_conn(nd, uv_strerror(status));
        return;
    }
    uv_tcp_nodelay(&nd->tcp, 1);
    uv_tcp_keepalive(&nd->tcp, 1, 30);
    nd->reader = redisReaderCreateWithFunctions(&reply_fn);
    if (nd->reader == NULL) {
        drop_conn(nd, "out of memory");
        return;
    }
    nd->reader->privdata = nd;
    /* hiredis frees its buffer when it empties above maxbuf (16 KiB): a big
     * batch of replies would do that every read. Keep a larger one. */
    nd->reader->maxbuf = 256 * 1024;
    nd->reply.type = 0;
    nd->reply.n = 0;
    nd->reply.bad = NULL;
    nd->seq = 0;
    nd->conn = SL_NODE_HANDSHAKE;
    if (st->conf.tls) {
        /* TLS first: AUTH, SELECT and SCRIPT LOAD below wait in <out> until
         * the engine is open; connect_timeout covers both handshakes. */
        char name[256];
        if (st->tls == NULL) {
            drop_conn(nd, "TLS: no usable context (see the reload's error)");
            return;
        }
        if (sl_tlsio_start(&nd->io, (uv_stream_t *)&nd->tcp, st->tls,
                           tls_name(nd, name, sizeof(name)), on_write) != SL_OK) {
            drop_conn(nd, "out of memory");
            return;
        }
    }
    int rc = uv_read_start((uv_stream_t *)&nd->tcp, on_alloc, on_read);
    if (rc < 0) {
        drop_conn(nd, uv_strerror(rc));
        return;
    }
    int fail = 0;
    nd->hs_pending = 0;
    if (st->conf.password != NULL || st->conf.user != NULL) {
        struct sl_str argv[3] = { { "AUTH", 4 } };
        int argc = 1;
        if (st->conf.user != NULL)
            argv[argc++] = sl_wire_cstr(st->conf.user);
        argv[argc++] = sl_wire_cstr(st->conf.password ? st->conf.password : "");
        fail |= sl_node_cmd(nd, SL_K_HS, 0, argc, argv) == NULL;
        nd->hs_pending++;
    }
    if (st->conf.db != 0) {
        char db[16];
        snprintf(db, sizeof(db), "%d", st->conf.db);
        struct sl_str argv[2] = { { "SELECT", 6 }, sl_wire_cstr(db) };
        fail |= sl_node_cmd(nd, SL_K_HS, 1, 2, argv) == NULL;
        nd->hs_pending++;
    }
    for (int i = 0; i < st->n_scripts; i++) {
        fail |= send_load(nd, SL_K_HS_LOAD, i) < 0;
        nd->hs_pending++;
    }
    if (fail) {
        drop_conn(nd, "out of memory");
        return;
    }
    if (nd->io.tls != NULL)
        tls_flush(nd);
}

static void start_connect(struct sl_node *nd)
{
    if (nd->ss.ss_family == AF_UNSPEC) {
        /* No address yet (a store name that has not resolved): wait, then
         * the owner looks it up again (on_retry: locate). */
        nd->conn = SL_NODE_DISCONNECTED;
        uv_timer_start(&nd->retry_timer, on_retry, next_backoff(nd), 0);
        return;
    }
    int rc = uv_tcp_init(nd->st->loop, &nd->tcp);
    if (rc < 0) {
        nd->conn = SL_NODE_DISCONNECTED;
        uv_timer_start(&nd->retry_timer, on_retry, next_backoff(nd), 0);
        return;
    }
    nd->tcp.data = nd;
    nd->tcp_open = 1;
    nd->handles++;
    nd->conn = SL_NODE_CONNECTING;
    nd->connect_req.data = nd;
    rc = uv_tcp_connect(&nd->connect_req, &nd->tcp, (const struct sockaddr *)&nd->ss, on_connect);
    if (rc < 0) {
        drop_conn(nd, uv_strerror(rc));
        return;
    }
    uint64_t ms = (nd->st->conf.connect_timeout_us + 999) / 1000;
    uv_timer_start(&nd->connect_timer, on_connect_timeout, ms ? ms : 1, 0);
}

void sl_node_connect(struct sl_node *nd, const struct sockaddr_storage *ss)
{
    if (ss != NULL)
        nd->ss = *ss;
    nd->retired = 0;
    if (nd->closing || nd->st->closing || nd->conn != SL_NODE_DISCONNECTED)
        return;
    uv_timer_stop(&nd->retry_timer);
    start_connect(nd);
}

static void on_retry(uv_timer_t *t)
{
    struct sl_node *nd = t->data;
    if (nd->closing || nd->st->closing)
        return;
    if (nd->conn == SL_NODE_DISCONNECTED) {
        if (!nd->retired)
            sl_store_node_locate(nd->st, nd);
        return;
    }
    if (nd->conn != SL_NODE_READY || !nd->suspect)
        return;
    /* Suspect: a connection that answers nothing at all is dropped; else probe. */
    if (nd->fifo_head != NULL && uv_hrtime() - nd->fifo_head->sent_ns > STALL_DROP_NS) {
        drop_conn(nd, "store stalled");
        return;
    }
    sl_store_node_probe(nd->st, nd);
    uv_timer_start(&nd->retry_timer, on_retry, next_backoff(nd), 0);
}

/* ---- life ----------------------------------------------------------------- */

static void node_free(struct sl_node *nd)
{
    struct sl_store *st = nd->st;
    if (nd->reader != NULL)
        redisReaderFree(nd->reader);
    sl_tlsio_free(&nd->io);
    if (nd->toks != NULL) {
        sl_slot_toks_free(nd->toks);
        free(nd->toks);
    }
    free(nd->rbuf);
    free(nd->out.p);
    free(nd);
    sl_store_node_freed(st);
}

static void on_handle_close(uv_handle_t *h)
{
    struct sl_node *nd = h->data;
    if (--nd->handles == 0 && nd->closing)
        node_free(nd);
}

struct sl_node *sl_node_new(struct sl_store *st, const char *name,
                            const struct sockaddr_storage *ss)
{
    struct sl_node *nd = calloc(1, sizeof(*nd));
    if (nd == NULL || (nd->rbuf = malloc(READ_SIZE)) == NULL) {
        free(nd);
        return NULL;
    }
    nd->st = st;
    snprintf(nd->name, sizeof(nd->name), "%s", name);
    if (ss != NULL)
        nd->ss = *ss;
    nd->backoff_ms = SL_NODE_BACKOFF_MIN_MS;
    nd->rng = uv_hrtime() ^ (uint64_t)(uintptr_t)nd;
    nd->conn = SL_NODE_DISCONNECTED;
    nd->logged = -1;
    uv_timer_init(st->loop, &nd->connect_timer);
    uv_timer_init(st->loop, &nd->retry_timer);
    uv_timer_init(st->loop, &nd->dl_timer);
    uv_prepare_init(st->loop, &nd->prepare);
    uv_check_init(st->loop, &nd->check);
    nd->handles = 5;
    nd->connect_timer.data = nd->retry_timer.data = nd->dl_timer.data = nd;
    nd->prepare.data = nd->check.data = nd->io.req.data = nd;
    /* Flushing alone must not keep the loop running. */
    uv_unref((uv_handle_t *)&nd->prepare);
    uv_unref((uv_handle_t *)&nd->check);
    return nd;
}

void sl_node_close(struct sl_node *nd)
{
    if (nd == NULL || nd->closing)
        return;
    fail_all(nd, "store closed");
    nd->closing = 1;
    nd->out.len = 0;
    if (nd->tcp_open && nd->conn != SL_NODE_DROPPING) {
        uv_read_stop((uv_stream_t *)&nd->tcp);
        uv_close((uv_handle_t *)&nd->tcp, on_tcp_close);
    }
    nd->conn = SL_NODE_DROPPING;
    uv_close((uv_handle_t *)&nd->connect_timer, on_handle_close);
    uv_close((uv_handle_t *)&nd->retry_timer, on_handle_close);
    uv_close((uv_handle_t *)&nd->dl_timer, on_handle_close);
    uv_close((uv_handle_t *)&nd->prepare, on_handle_close);
    uv_close((uv_handle_t *)&nd->check, on_handle_close);
}

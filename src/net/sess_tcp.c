/* sluice — raw TCP in a session: bytes relayed as they come, both ways.
 * No request boundaries: limits count bytes and connections only, and a
 * refusal is a close. */
#include "net/session.h"
#include "net/session-i.h"

static void client_in(struct sl_session *s, struct sl_buf *b, size_t n)
{
    (void)n;
    sl_sess_to_upstream(s, b, b->start, b->end);
    b->start = b->end;
}

static int client_eof(struct sl_session *s)
{
    (void)s;
    return SL_EOF_FORWARD;
}

static void upstream_in(struct sl_session *s, struct sl_buf *b)
{
    sl_sess_to_client(s, b, b->start, b->end);
    b->start = b->end;
}

static void upstream_eof(struct sl_session *s, int err)
{
    (void)err;
    sl_sess_finish(s);
}

static void nothing(struct sl_session *s)
{
    (void)s;
}

static size_t answer(struct sl_session *s, enum sl_answer what, const char *limit, char *out,
                     size_t cap)
{
    (void)s, (void)what, (void)limit, (void)out, (void)cap;
    return 0; /* tcp has no words: the close says it */
}

static size_t refusal(enum sl_answer what, char *out, size_t cap)
{
    (void)what, (void)out, (void)cap;
    return 0;
}

static size_t verdict_text(struct sl_session *s, const struct sl_verdict *v, char *out,
                           size_t cap)
{
    (void)s, (void)v, (void)out, (void)cap;
    return 0;
}

static void late(struct sl_session *s)
{
    sl_session_close(s);
}

static uint32_t marker_due(struct sl_session *s, uint32_t kind)
{
    (void)s, (void)kind;
    return 0;
}

static int at_boundary(const struct sl_session *s)
{
    (void)s;
    return 1;
}

static int busy(const struct sl_session *s)
{
    (void)s;
    return 0;
}

static void pool_drain(void)
{
}

const struct sl_sess_proto sl_sess_tcp = {
    .name = "tcp",
    .framed = 0,
    .init = nothing,
    .at_boundary = at_boundary,
    .client_in = client_in,
    .client_eof = client_eof,
    .upstream_in = upstream_in,
    .upstream_eof = upstream_eof,
    .resume = nothing,
    .release = nothing,
    .free = nothing,
    .answer = answer,
    .refusal = refusal,
    .verdict_text = verdict_text,
    .header_late = late,
    .upstream_late = late,
    .marker_due = marker_due,
    .marker_gone = nothing,
    .busy = busy,
    .pool_drain = pool_drain,
};

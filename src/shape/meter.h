/* sluice — byte meters: bandwidth limits (metric = bytes_in | bytes_out).
 *
 * One meter per shaped direction of a session. Bytes are charged as they
 * are read; the meter holds a local credit of tokens taken from the limits
 * in chunks (sl_limiter_plan: 10 ms of the rate, at least 16 KiB), so the
 * store sees one call per chunk, not one per read. A take is made ahead of
 * need (when the credit falls below half a chunk), so a steady transfer
 * never stalls on a round trip.
 *
 *   delay:  a take reserves its chunk (GCRA); the tokens become credit when
 *           the reservation is due. With no credit the side is not read, so
 *           TCP flow control slows the sender. A take refused because the
 *           wait would pass max_delay is asked again later: never a close.
 *   reject: the meter says "refused until T" (sl_meter_refused): a tcp
 *           session closes, a resp session answers -THROTTLED to requests
 *           until the debt can be paid. A resp meter in debt lets no
 *           request by while its take is at the store (sl_meter_gate):
 *           the request waits for the answer, so the debt stays within
 *           what was already in flight.
 *   shadow: takes are made and counted; reading never stops. */
#ifndef SL_SHAPE_METER_H
#define SL_SHAPE_METER_H

#include <stdint.h>

#include "conf/conf-t.h"
#include "limit/limiter.h"
#include "shape/wait-t.h"

struct sl_meter;
typedef void sl_meter_cb(struct sl_meter *m);

/* Who is metered: what a take needs to ask the limiter. */
struct sl_meter_ctx {
    struct sl_limiter             *lim;
    const struct sl_listener_conf *lc;
    const struct sl_ident_state   *ident;
    uint64_t                       conn_id;
};

struct sl_meter {
    struct sl_wait         wait;        /* a reservation's due time / a refused take's retry */
    struct sl_limiter_req *req;         /* take in flight */
    struct sl_limiter     *lim;         /* the limiter <plan> comes from (compared, not held) */
    struct sl_meter_plan   plan;
    struct sl_meter_ctx    ctx;         /* as of the last call */
    int64_t                credit;      /* bytes that may be read now; < 0: a debt */
    uint64_t               grant;       /* tokens that become credit at wait.due_us */
    uint64_t               asked;       /* tokens of the take in flight */
    uint64_t               refused_until_us; /* reject: the limits said no until then */
    struct sl_verdict     *refusal;     /* ... and how (owned), or NULL */
    uint8_t                metric;      /* SL_METRIC_BYTES_IN | SL_METRIC_BYTES_OUT */
    uint8_t                resp;        /* resp listener: a refusal rejects requests instead of closing */
    sl_meter_cb           *on_change;   /* credit arrived or a refusal came */
    void                  *owner;
};

/* Sets up <m> for <metric> under <ctx>; returns 0 when no limit of that
 * metric applies (then the meter is never needed). */
int sl_meter_init(struct sl_meter *m, const struct sl_meter_ctx *ctx, enum sl_metric metric,
                  int resp, sl_meter_cb *on_change, void *owner);

/* Bytes that may be read now (SIZE_MAX when reading need not wait). */
uint64_t sl_meter_room(const struct sl_meter *m);

/* <n> bytes were read (or, negative, given back: a rejected request that
 * never went upstream); takes more tokens when the credit runs low. */
void sl_meter_charge(struct sl_meter *m, const struct sl_meter_ctx *ctx, int64_t n,
                     uint64_t now_us);

/* Nonzero while a reject limit refuses (and until when, in *<until_us>). */
int sl_meter_refused(const struct sl_meter *m, uint64_t now_us);

/* Nonzero when requests must ask sl_meter_gate before going upstream:
 * a reject meter in debt, or one that refused. */
int sl_meter_owes(const struct sl_meter *m);

/* resp: may a request go upstream now? SL_METER_GO; SL_METER_HOLD: a take
 * is at the store, the meter's on_change will tell when to ask again;
 * SL_METER_REFUSE: refused until m->refused_until_us (m->refusal says how).
 * Asks for the debt again once a refusal's time is over. */
enum { SL_METER_GO = 0, SL_METER_HOLD, SL_METER_REFUSE };
int sl_meter_gate(struct sl_meter *m, const struct sl_meter_ctx *ctx, uint64_t now_us);

/* Drops any take in flight and any timer. */
void sl_meter_close(struct sl_meter *m);

#endif

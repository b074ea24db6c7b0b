/* sluice — the rate-limiting algorithms, in process.
 *
 * The same arithmetic as the scripts in lua/, statement for statement, so a limit
 * gives the same answers with url = local as with url = redis://
 * (tests/unit/limit/cases.h holds both to one table). docs/algorithms.md
 * states the definitions; here is how they are computed.
 *
 * Units. A bucket of <burst> tokens refilled with <amount> tokens per
 * <period_us> holds an exact number of "units": with g = gcd(amount,
 * period_us), one token is S = period_us / g units and one microsecond
 * refills K = amount / g units. Refill, take, retry and reset are then
 * integer operations that never round (a fixed micro-token would: 1/d
 * refills 1e6 / 8.64e10 micro-tokens per microsecond). Results are rounded
 * only when reported: remaining down (whole tokens), waits up (whole us).
 *
 *   units:  |<------ S ------>|<------ S ------>| ...  burst * S = capacity
 *   time:   each us adds K units; a token takes S / K us (a fraction)
 *
 * Every intermediate stays below 2^53 inside the bounds of algo.h, where the
 * Lua doubles are still exact; the 128-bit products here are for the one
 * place (the sliding window's weighting) where the scripts do a long
 * multiplication instead. */
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "limit/algo.h"

static const char *const names[] = {
    [SL_ALGO_TOKEN_BUCKET]   = "token_bucket",
    [SL_ALGO_GCRA]           = "gcra",
    [SL_ALGO_SLIDING_WINDOW] = "sliding_window",
    [SL_ALGO_SLIDING_LOG]    = "sliding_log",
    [SL_ALGO_FIXED_WINDOW]   = "fixed_window",
};

const char *sl_algo_name(enum sl_algo a)
{
    if ((unsigned)a < sizeof(names) / sizeof(names[0]) && names[a] != NULL)
        return names[a];
    return "unknown";
}

/* ---- integer helpers (the scripts have the same ones) ------------------- */

static uint64_t gcd(uint64_t a, uint64_t b)
{
    while (b != 0) {
        uint64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/* ceil(a / b), b > 0. */
static uint64_t cdiv(uint64_t a, uint64_t b)
{
    return a / b + (a % b != 0);
}

/* floor(a * b / c) and its remainder in *<rem>; the quotient must fit. */
static uint64_t muldiv(uint64_t a, uint64_t b, uint64_t c, uint64_t *rem)
{
    unsigned __int128 x = (unsigned __int128)a * b;
    *rem = (uint64_t)(x % c);
    return (uint64_t)(x / c);
}

/* A bucket's units (see the top of the file). */
struct units {
    uint64_t S;   /* units per token */
    uint64_t K;   /* units refilled per microsecond */
    uint64_t cap; /* burst * S */
};

/* sl_algo_check(), also filling <u> for the buckets. */
static int check(const struct sl_algo_params *p, const char **why, struct units *u)
{
    const char *w = NULL;
    if (p->amount < 1 || p->amount > SL_ALGO_MAX_AMOUNT)
        w = "the rate's amount must be 1 to 2^40";
    else if (p->period_us < 1 || p->period_us > SL_ALGO_MAX_PERIOD_US)
        w = "the rate's period must be 1 us to 365 days";
    else {
        switch (p->algo) {
        case SL_ALGO_TOKEN_BUCKET:
        case SL_ALGO_GCRA: {
            uint64_t g = gcd(p->amount, p->period_us);
            u->S = p->period_us / g;
            u->K = p->amount / g;
            if (p->burst < 1 || p->burst > SL_ALGO_MAX_AMOUNT)
                w = "burst must be 1 to 2^40";
            else if (p->burst > SL_ALGO_MAX_UNITS / u->S)
                w = "burst x period / gcd(amount, period) must be at most 2^52 "
                    "(a smaller burst, or a rate in coarser units)";
            else
                u->cap = p->burst * u->S;
            if (w == NULL && p->max_wait_us > 0 &&
                (p->algo != SL_ALGO_GCRA || p->max_wait_us > (SL_ALGO_MAX_UNITS - u->cap) / u->K))
                w = p->algo != SL_ALGO_GCRA
                        ? "reservations (action = delay) are made by gcra (token_bucket maps to it)"
                        : "burst x period / gcd(amount, period) + max_delay x amount / gcd(amount, "
                          "period) must be at most 2^52 (a shorter max_delay or a smaller burst)";
            break;
        }
        case SL_ALGO_SLIDING_LOG:
            if (p->amount > SL_ALGO_MAX_LOG)
                w = "sliding_log keeps one event per token: amount must be at most 100000";
            break;
        case SL_ALGO_SLIDING_WINDOW:
        case SL_ALGO_FIXED_WINDOW:
            break;
        default:
            w = "unknown algorithm";
            break;
        }
        if (w == NULL && p->max_wait_us > 0 && p->algo != SL_ALGO_GCRA &&
            p->algo != SL_ALGO_TOKEN_BUCKET)
            w = "action = delay needs algorithm = token_bucket or gcra (a window cannot reserve "
                "a place in the future)";
    }
    if (why != NULL)
        *why = w;
    return w == NULL ? 0 : SL_ECONF;
}

int sl_algo_check(const struct sl_algo_params *p, const char **why)
{
    struct units u;
    return check(p, why, &u);
}

static void answer(struct sl_algo_result *out, int allowed, uint64_t remaining,
                   uint64_t retry_after_us, uint64_t reset_us)
{
    out->allowed = allowed;
    out->remaining = remaining;
    out->retry_after_us = retry_after_us;
    out->reset_us = reset_us;
}

/* ---- token_bucket ------------------------------------------------------ */

/* A bucket holding <v> units, as reported. */
static void bucket_answer(struct sl_algo_result *out, const struct units *u, int allowed,
                          uint64_t v, uint64_t retry_after_us)
{
    answer(out, allowed, v / u->S, retry_after_us, cdiv(u->cap - v, u->K));
}

static void token_bucket(struct sl_algo_state *st, const struct sl_algo_params *p,
                         const struct units *u, uint64_t now, uint64_t cost, int commit,
                         struct sl_algo_result *out)
{
    uint64_t v = u->cap, t = now; /* no state: full */
    if (st->init && st->c != 0) {
        v = st->a;
        t = st->b;
        if (st->c != u->S) {
            /* The rate changed (a reload): keep the whole tokens. */
            uint64_t tokens = v / st->c;
            v = (tokens < p->burst ? tokens : p->burst) * u->S;
        }
        if (v > u->cap)
            v = u->cap;
    }
    if (now < t)
        now = t; /* time went backwards: as at the last take */
    if (v < u->cap) {
        /* Clamp the elapsed time before multiplying: past the time to fill
         * up, the bucket is simply full. */
        uint64_t e = now - t;
        if (e >= cdiv(u->cap - v, u->K))
            v = u->cap;
        else
            v += e * u->K;
    }
    if (cost > p->burst) {
        bucket_answer(out, u, 0, v, UINT64_MAX);
        return;
    }
    uint64_t need = cost * u->S;
    if (need > v) {
        bucket_answer(out, u, 0, v, cdiv(need - v, u->K));
        return;
    }
    if (commit && cost > 0) {
        v -= need;
        st->a = v;
        st->b = now;
        st->c = u->S;
        st->init = 1;
    }
    bucket_answer(out, u, 1, v, 0);
}

/* ---- gcra ---------------------------------------------------------------- */

/* The theoretical arrival time TAT = a + c / K us: the moment the bucket is
 * full again. The debt TAT - now, in units, is what is missing from a full
 * bucket. Only TAT is kept, so an earlier now cannot be told from an early
 * request: the debt is clamped to one full bucket plus max_wait_us of
 * reservations (never worse than a delay limit may legitimately be). */
/* TAT <tu> us and <tf> units, under the numbers of <u> and <p>. */
static void gcra_store(struct sl_algo_state *st, const struct units *u,
                       const struct sl_algo_params *p, uint64_t tu, uint64_t tf)
{
    st->a = tu;
    st->c = tf;
    st->b = u->S;
    st->hw = u->K;
    st->burst = p->burst;
    st->init = 1;
}

static void gcra(struct sl_algo_state *st, const struct sl_algo_params *p, const struct units *u,
                 uint64_t now, uint64_t cost, int commit, struct sl_algo_result *out)
{
    uint64_t tu = st->init ? st->a : 0, tf = st->init ? st->c : 0;
    if (st->init && st->b != 0 && (st->b != u->S || st->hw != u->K || st->burst != p->burst)) {
        /* Stored under other numbers (an override came, changed or went,
         * a reload, another share of live instances): the whole tokens the
         * bucket holds now under the old ones are kept, up to the new
         * burst, as token_bucket does, and that is the state from now on
         * (even for a peek: nothing is taken). Kept as it was, a TAT far
         * ahead under a slow rate would refuse under the new numbers until
         * the old ones' time. As lua/gcra.lua. */
        uint64_t tokens = st->burst, ocap = st->burst * st->b;
        if (tu >= now) {
            uint64_t dt = tu - now;
            tokens = 0;
            if (dt <= ocap / st->hw && dt * st->hw + tf < ocap)
                tokens = (ocap - dt * st->hw - tf) / st->b;
        }
        uint64_t d = u->cap - (tokens < p->burst ? tokens : p->burst) * u->S;
        tu = now + d / u->K;
        tf = d % u->K;
        if (d > 0)
            gcra_store(st, u, p, tu, tf);
    } else if (tf >= u->K) {
        /* Stored under another rate without the numbers: round up to a
         * whole us. */
        tu += 1;
        tf = 0;
    }
    /* With reservations the debt may pass a full bucket by up to the
     * longest wait; that is also the clamp for a clock stepping back. */
    uint64_t W = p->max_wait_us, top = u->cap + W * u->K;
    uint64_t debt = 0;
    if (tu >= now) {
        uint64_t dt = tu - now;
        debt = dt > top / u->K ? top : dt * u->K + tf;
        if (debt > top)
            debt = top;
    }
    uint64_t v = debt < u->cap ? u->cap - debt : 0;
    if (cost > p->burst) {
        answer(out, 0, v / u->S, UINT64_MAX, cdiv(debt, u->K));
        return;
    }
    uint64_t need = cost * u->S, wait = 0;
    if (debt + need > u->cap) {
        wait = cdiv(debt + need - u->cap, u->K);
        if (wait > W) {
            answer(out, 0, v / u->S, W > 0 ? wait - W : wait, cdiv(debt, u->K));
            return;
        }
    }
    if (commit && cost > 0) {
        debt += need;
        gcra_store(st, u, p, now + debt / u->K, debt % u->K);
    }
    answer(out, 1, (need < v ? v - need : 0) / u->S, wait, cdiv(debt + (commit ? 0 : need), u->K));
}

/* ---- fixed_window -------------------------------------------------------- */

/* Windows are aligned to multiples of period_us since the epoch, so every
 * instance agrees on them. */
static void fixed_window(struct sl_algo_state *st, const struct sl_algo_params *p, uint64_t now,
                         uint64_t cost, int commit, struct sl_algo_result *out)
{
    uint64_t P = p->period_us, A = p->amount;
    if (st->init && now < st->hw)
        now = st->hw; /* never back into an older window */
    uint64_t ws = now - now % P;
    uint64_t k = st->init && st->b == ws ? st->a : 0;
    uint64_t reset = ws + P - now;
    if (cost > A) {
        answer(out, 0, A > k ? A - k : 0, UINT64_MAX, reset);
        return;
    }
    if (k + cost > A) {
        answer(out, 0, A > k ? A - k : 0, reset, reset);
        return;
    }
    if (commit && cost > 0) {
        k += cost;
        st->a = k;
        st->b = ws;
        st->hw = now;
        st->init = 1;
    }
    answer(out, 1, A - k, 0, reset);
}

/* ---- sliding_window ------------------------------------------------------ */

/* estimate = ceil(prev * (P - elapsed) / P) + cur: the previous window's
 * count weighted by the part of it still inside the sliding window, rounded
 * up so the comparison with amount is the exact one. */
static void sliding_window(struct sl_algo_state *st, const struct sl_algo_params *p,
                           uint64_t now, uint64_t cost, int commit, struct sl_algo_result *out)
{
    uint64_t P = p->period_us, A = p->amount;
    if (st->init && now < st->hw)
        now = st->hw;
    uint64_t ws = now - now % P;
    uint64_t k = 0, prev = 0;
    if (st->init) {
        if (st->b == ws) {
            k = st->a;
            prev = st->c;
        } else if (st->b + P == ws) {
            prev = st->a;
        }
    }
    uint64_t el = now - ws, x = P - el, rem;
    uint64_t shared = muldiv(prev, x, P, &rem);
    if (rem != 0)
        shared++;
    uint64_t used = shared + k;
    /* empty once cur has passed through the previous slot, or prev is gone */
    uint64_t reset = k > 0 ? 2 * P - el : prev > 0 ? x : 0;
    uint64_t left = A > used ? A - used : 0;
    if (cost > A) {
        answer(out, 0, left, UINT64_MAX, reset);
        return;
    }
    if (used + cost > A) {
        uint64_t retry;
        if (k + cost <= A) {
            /* In this window, once ceil(prev * x' / P) <= A - k - cost: x' <=
             * floor((A - k - cost) * P / prev). prev > 0 here, and the
             * quotient is below P (the room is below prev). */
            retry = x - muldiv(A - k - cost, P, prev, &rem);
        } else {
            /* Only in the next window, where cur becomes prev: once
             * ceil(k * x'' / P) <= A - cost. k > A - cost >= 0 here. */
            retry = 2 * P - el - muldiv(A - cost, P, k, &rem);
        }
        answer(out, 0, left, retry, reset);
        return;
    }
    if (commit && cost > 0) {
        k += cost;
        st->a = k;
        st->b = ws;
        st->c = prev;
        st->hw = now;
        st->init = 1;
        used += cost;
        reset = 2 * P - el;
    }
    answer(out, 1, A - used, 0, reset);
}

/* ---- sliding_log --------------------------------------------------------- */

/* The ring holds event times in order (times never go backwards for it:
 * an earlier now counts as the newest event's time). An event at time e
 * counts while now < e + P. */

static uint64_t ev(const struct sl_algo_state *st, uint64_t i)
{
    return st->log[(st->log_head + i) % st->log_cap];
}

/* Room for <need> events, at most <max>; keeps the events in order. */
static int log_reserve(struct sl_algo_state *st, uint64_t need, uint64_t max)
{
    if (need <= st->log_cap)
        return 0;
    uint64_t cap = st->log_cap ? st->log_cap : 16;
    while (cap < need)
        cap *= 2;
    if (cap > max)
        cap = max;
    uint64_t *log = malloc(cap * sizeof(*log));
    if (log == NULL)
        return SL_ENOMEM;
    for (uint64_t i = 0; i < st->log_n; i++)
        log[i] = ev(st, i);
    free(st->log);
    st->log = log;
    st->log_head = 0;
    st->log_cap = (uint32_t)cap;
    return 0;
}

static int sliding_log(struct sl_algo_state *st, const struct sl_algo_params *p, uint64_t now,
                       uint64_t cost, int commit, struct sl_algo_result *out)
{
    uint64_t P = p->period_us, A = p->amount;
    uint64_t n = st->log_n;
    if (n > 0 && now < ev(st, n - 1))
        now = ev(st, n - 1);
    /* The first event still inside: a binary search over the ring. */
    uint64_t lo = 0, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (ev(st, mid) + P > now)
            hi = mid;
        else
            lo = mid + 1;
    }
    uint64_t first = lo, cnt = n - first;
    uint64_t reset = cnt > 0 ? ev(st, n - 1) + P - now : 0;
    if (cost > A) {
        answer(out, 0, A > cnt ? A - cnt : 0, UINT64_MAX, reset);
        return 0;
    }
    if (cnt + cost > A) {
        /* The (cnt + cost - A)-th event inside must leave first. */
        uint64_t e = ev(st, first + cnt + cost - A - 1);
        answer(out, 0, A > cnt ? A - cnt : 0, e + P - now, reset);
        return 0;
    }
    if (commit && cost > 0) {
        st->log_head = (uint32_t)((st->log_head + first) % (st->log_cap ? st->log_cap : 1));
        st->log_n = (uint32_t)cnt;
        int rc = log_reserve(st, cnt + cost, A);
        if (rc != 0) {
            answer(out, 0, A - cnt, 0, reset);
            return rc;
        }
        for (uint64_t i = 0; i < cost; i++)
            st->log[(st->log_head + st->log_n++) % st->log_cap] = now;
        st->init = 1;
        cnt += cost;
        reset = P;
    }
    answer(out, 1, A - cnt, 0, reset);
    return 0;
}

/* ---- the API ------------------------------------------------------------- */

int sl_algo_take(struct sl_algo_state *st, const struct sl_algo_params *p, uint64_t now_us,
                 uint64_t cost, int commit, struct sl_algo_result *out)
{
    struct units u;
    if (check(p, NULL, &u) != 0) {
        answer(out, 0, 0, UINT64_MAX, 0);
        return SL_ECONF;
    }
    switch (p->algo) {
    case SL_ALGO_TOKEN_BUCKET:
        token_bucket(st, p, &u, now_us, cost, commit, out);
        return 0;
    case SL_ALGO_GCRA:
        gcra(st, p, &u, now_us, cost, commit, out);
        return 0;
    case SL_ALGO_FIXED_WINDOW:
        fixed_window(st, p, now_us, cost, commit, out);
        return 0;
    case SL_ALGO_SLIDING_WINDOW:
        sliding_window(st, p, now_us, cost, commit, out);
        return 0;
    case SL_ALGO_SLIDING_LOG:
        return sliding_log(st, p, now_us, cost, commit, out);
    }
    return SL_ECONF; /* not reached: check() knows every algorithm */
}

/* ---- other numbers (a reload) -------------------------------------------- */

static int is_window(enum sl_algo a)
{
    return a == SL_ALGO_FIXED_WINDOW || a == SL_ALGO_SLIDING_WINDOW || a == SL_ALGO_SLIDING_LOG;
}

int sl_algo_convert(struct sl_algo_state *st, const struct sl_algo_params *from,
                    const struct sl_algo_params *to, uint64_t now_us)
{
    if (!st->init)
        return 0;
    if (from->algo == to->algo) {
        /* The buckets convert themselves (whole tokens kept, token_bucket
         * and gcra above); a sliding log's events are times, counted under
         * any period; a window of the same period is the same window. */
        if (to->algo != SL_ALGO_FIXED_WINDOW && to->algo != SL_ALGO_SLIDING_WINDOW)
            return 0;
        if (from->period_us == to->period_us)
            return 0;
    }
    struct units u;
    if (check(to, NULL, &u) != 0)
        return SL_ECONF;
    /* What the state holds now under its own numbers: the whole tokens
     * left, and (windows) the tokens counted. A peek: nothing is taken. */
    struct sl_algo_params f = *from;
    f.max_wait_us = 0;
    struct sl_algo_result res;
    if (sl_algo_take(st, &f, now_us, 0, 0, &res) != 0)
        res.remaining = 0; /* numbers it cannot have been written under: as empty */
    uint64_t fcap = from->algo == SL_ALGO_TOKEN_BUCKET || from->algo == SL_ALGO_GCRA ? from->burst
                                                                                     : from->amount;
    uint64_t left = res.remaining < fcap ? res.remaining : fcap;
    uint64_t used = fcap - left;
    uint64_t last = now_us;
    if ((from->algo == SL_ALGO_FIXED_WINDOW || from->algo == SL_ALGO_SLIDING_WINDOW) &&
        st->hw != 0 && st->hw < now_us)
        last = st->hw; /* the last take, for a log's events */
    sl_algo_state_free(st);
    switch (to->algo) {
    case SL_ALGO_TOKEN_BUCKET:
    case SL_ALGO_GCRA: {
        /* A bucket holds what was left, up to its burst. */
        uint64_t level = left < to->burst ? left : to->burst;
        if (level == to->burst)
            return 0; /* full: as new */
        uint64_t v = level * u.S;
        if (to->algo == SL_ALGO_TOKEN_BUCKET) {
            st->a = v;
            st->b = now_us;
            st->c = u.S;
            st->init = 1;
        } else {
            uint64_t debt = u.cap - v;
            gcra_store(st, &u, to, now_us + debt / u.K, debt % u.K);
        }
        return 0;
    }
    case SL_ALGO_FIXED_WINDOW:
    case SL_ALGO_SLIDING_WINDOW: {
        /* A window counts, in the window that holds now, what was counted
         * (from a window) or what was missing from the capacity (from a
         * bucket). */
        uint64_t k = is_window(from->algo) ? used : to->amount - (left < to->amount ? left : to->amount);
        if (k == 0)
            return 0;
        st->a = k;
        st->b = now_us - now_us % to->period_us;
        st->c = 0;
        st->hw = now_us;
        st->init = 1;
        return 0;
    }
    case SL_ALGO_SLIDING_LOG: {
        /* As many events as a window would count, made at the last take
         * (at most what the log can hold). */
        uint64_t k = is_window(from->algo) ? used : to->amount - (left < to->amount ? left : to->amount);
        if (k > to->amount)
            k = to->amount;
        if (k == 0)
            return 0;
        st->log = malloc(k * sizeof(*st->log));
        if (st->log == NULL)
            return SL_ENOMEM;
        for (uint64_t i = 0; i < k; i++)
            st->log[i] = last;
        st->log_cap = (uint32_t)k;
        st->log_n = (uint32_t)k;
        st->log_head = 0;
        st->init = 1;
        return 0;
    }
    }
    return SL_ECONF; /* not reached: check() knows every algorithm */
}

uint64_t sl_algo_ttl_us(const struct sl_algo_params *p)
{
    uint64_t us;
    switch (p->algo) {
    case SL_ALGO_TOKEN_BUCKET:
    case SL_ALGO_GCRA: {
        /* From empty to full: burst * S / K = burst * period / amount. */
        if (p->amount == 0)
            return UINT64_MAX;
        unsigned __int128 x = ((unsigned __int128)p->burst * p->period_us + p->amount - 1) / p->amount;
        if (p->algo == SL_ALGO_GCRA)
            x += p->max_wait_us; /* a reservation runs up to this far past a full bucket */
        us = x > UINT64_MAX / 2 ? UINT64_MAX / 2 : (uint64_t)x;
        break;
    }
    case SL_ALGO_SLIDING_WINDOW:
        us = p->period_us > UINT64_MAX / 4 ? UINT64_MAX / 2 : 2 * p->period_us;
        break;
    default:
        us = p->period_us;
        break;
    }
    uint64_t ms = cdiv(us, 1000);
    if (ms < 1)
        ms = 1;
    return ms > UINT64_MAX / 1000 ? UINT64_MAX : ms * 1000;
}

void sl_algo_policy(const struct sl_algo_params *p, uint64_t *quota, uint64_t *window_s)
{
    unsigned __int128 us = p->period_us;
    *quota = p->amount;
    if (p->algo == SL_ALGO_TOKEN_BUCKET || p->algo == SL_ALGO_GCRA) {
        /* q = burst, w = the time to refill it: q per w is the rate, and a
         * full bucket allows all of q at once, so r <= q always holds. */
        *quota = p->burst;
        us = p->amount > 0 ? ((unsigned __int128)p->burst * p->period_us + p->amount - 1) / p->amount
                           : 0;
    }
    unsigned __int128 s = (us + 999999) / 1000000;
    *window_s = s < 1 ? 1 : s > UINT64_MAX ? UINT64_MAX : (uint64_t)s;
}

void sl_algo_state_free(struct sl_algo_state *st)
{
    free(st->log);
    memset(st, 0, sizeof(*st));
}

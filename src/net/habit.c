/* sluice — a habit kept while it pays (habit.h). */
#include "net/habit.h"

int sl_habit_due(const struct sl_habit *h, uint64_t now)
{
    return now >= h->off_until;
}

static int popcount16(uint16_t v)
{
    int n = 0;
    for (; v != 0; v &= (uint16_t)(v - 1))
        n++;
    return n;
}

int sl_habit_judge(struct sl_habit *h, const struct sl_habit_rule *r, uint64_t now, int bad)
{
    unsigned window = r->window == 0 ? 1 : r->window > 16 ? 16 : r->window;
    uint16_t mask = (uint16_t)(window == 16 ? 0xffffu : (1u << window) - 1u);
    /* calm for as long as the longest back-off since the last one ended:
     * whatever made it bad then is gone, start again from the shortest */
    if (h->backoff != 0 && now >= h->off_until + r->max_us)
        h->backoff = 0;
    h->recent = (uint16_t)(((unsigned)h->recent << 1 | (bad ? 1u : 0u)) & mask);
    if (popcount16(h->recent) < (r->bad == 0 ? 1 : r->bad))
        return 0;
    h->backoff = h->backoff == 0 ? r->min_us
               : h->backoff >= r->max_us / 2 ? r->max_us
               : h->backoff * 2;
    h->off_until = now + h->backoff;
    h->recent = 0; /* after the back-off, judged afresh */
    return 1;
}

/* sluice — a habit kept while it pays: something a worker does by default
 * because it usually helps (yield the CPU at a pooled turn's end, hold a
 * small batch for more requests), judged by each outcome, and stopped for
 * a while when it stops paying.
 *
 * Each outcome is good or bad. <bad> bad ones among the last <window>
 * start a back-off: the habit is off for <min_us>, doubling at each
 * back-off up to <max_us>; the doubling starts over once <max_us> has
 * passed since a back-off ended without another. After a back-off the
 * outcomes are judged afresh (a few bad ones may be anything that ran once;
 * something lasting makes them often).
 *
 * Time is an argument (monotonic µs); nothing here reads a clock. */
#ifndef SL_NET_HABIT_H
#define SL_NET_HABIT_H

#include <stdint.h>

#include "net/habit-t.h"

/* 1 when <h> may be followed at <now>: no back-off under way. */
int sl_habit_due(const struct sl_habit *h, uint64_t now);

/* One outcome of <h> (<bad> nonzero: it did not pay), known at <now>.
 * Returns 1 when this starts a back-off (sl_habit_due is 0 until it ends). */
int sl_habit_judge(struct sl_habit *h, const struct sl_habit_rule *r, uint64_t now, int bad);

#endif

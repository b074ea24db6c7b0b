/* sluice — the loop's turn: work deferred to its end, and its clock (turn.h).
 *
 * One list for the process (each worker is its own process with one loop):
 * pointers to registered nodes, in order. A forgotten node leaves a NULL
 * behind, skipped by the run, so forgetting costs nothing but a store. */
#include <stdlib.h>

#include "net/turn.h"

static struct sl_turn_node **list;
static uint32_t              list_n, list_cap;

int sl_turn_later(struct sl_turn_node *n, sl_turn_fn fn)
{
    if (n->at != 0)
        return 0;
    if (list_n == list_cap) {
        uint32_t cap = list_cap ? list_cap * 2 : 64;
        struct sl_turn_node **nl = realloc(list, cap * sizeof(*nl));
        if (nl == NULL)
            return -1;
        list = nl;
        list_cap = cap;
    }
    n->fn = fn;
    list[list_n++] = n;
    n->at = list_n;
    return 0;
}

void sl_turn_forget(struct sl_turn_node *n)
{
    if (n->at == 0)
        return;
    list[n->at - 1] = NULL;
    n->at = 0;
}

void sl_turn_run(void)
{
    /* A function may register more (the list may move): up to the end. */
    for (uint32_t i = 0; i < list_n; i++) {
        struct sl_turn_node *n = list[i];
        if (n == NULL)
            continue;
        list[i] = NULL;
        n->at = 0;
        n->fn(n);
    }
    list_n = 0;
    sl_turn_tick();
}

void sl_turn_drain(void)
{
    for (uint32_t i = 0; i < list_n; i++)
        if (list[i] != NULL)
            list[i]->at = 0;
    free(list);
    list = NULL;
    list_n = list_cap = 0;
}

/* ---- the turn's clock ------------------------------------------------------ */

static const struct sl_clock *turn_src;
static uint64_t               turn_us;
static uint8_t                turn_read; /* turn_us was read in this turn */

void sl_turn_clock_set(const struct sl_clock *src)
{
    turn_src = src;
    turn_us = 0;
    turn_read = 0;
}

void sl_turn_tick(void)
{
    turn_read = 0;
}

uint64_t sl_turn_now_us(void)
{
    if (!turn_read) {
        uint64_t now = sl_clock_us(turn_src != NULL ? turn_src : &sl_clock_mono);
        /* never back, whatever the source was changed to */
        if (now > turn_us)
            turn_us = now;
        turn_read = 1;
    }
    return turn_us;
}

uint64_t sl_turn_now_ms(void)
{
    return sl_turn_now_us() / 1000;
}

static uint64_t turn_clock_now(const struct sl_clock *c)
{
    (void)c;
    return sl_turn_now_us();
}

const struct sl_clock sl_turn_clock = { turn_clock_now };

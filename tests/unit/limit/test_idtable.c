/* The bounded identity table: a cap on entries, least recently used first,
 * fresh entries before any other, pinned ones never; time is passed in. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "limit/idtable.h"

struct ent {
    struct sl_idt_node node; /* first: a node is its entry */
    int  fresh, pinned;
    char key[16];
};

static enum sl_idt_judgement judge(struct sl_idt_node *n, void *arg)
{
    (void)arg;
    struct ent *e = (struct ent *)n;
    return e->pinned ? SL_IDT_PINNED : e->fresh ? SL_IDT_FRESH : SL_IDT_KEEP;
}

/* Gets or makes <key> at <now>, evicting first when the table is full as
 * the limiter does; returns the entry, *<evicted> the key evicted or "". */
static struct ent *get(struct sl_idt *t, const char *key, uint64_t now, char *evicted)
{
    evicted[0] = '\0';
    struct sl_idt_node *n = sl_idt_find(t, key, strlen(key), now);
    if (n != NULL)
        return (struct ent *)n;
    if (sl_idt_full(t)) {
        struct sl_idt_node *v = sl_idt_victim(t, judge, NULL);
        if (v != NULL) {
            snprintf(evicted, 16, "%s", ((struct ent *)v)->key);
            sl_idt_remove(t, v);
            t->evicted++;
            free(v);
        }
    }
    struct ent *e = calloc(1, sizeof(*e));
    snprintf(e->key, sizeof(e->key), "%s", key);
    e->node.key = e->key;
    e->node.len = (uint16_t)strlen(key);
    sl_idt_insert(t, &e->node, now);
    return e;
}

static void drain(struct sl_idt *t)
{
    struct sl_idt_node *n;
    while ((n = sl_idt_expired(t, UINT64_MAX / 2, 0)) != NULL) {
        sl_idt_remove(t, n);
        free(n);
    }
    assert_int_equal(t->n, 0);
    sl_idt_free(t);
}

/* N + k identities keep the table at N; the least recently used goes. */
static void test_cap_holds_lru_first(void **state)
{
    (void)state;
    struct sl_idt t;
    char ev[16];
    assert_int_equal(sl_idt_init(&t, 4), 0);
    const char *keys[] = { "a", "b", "c", "d" };
    for (int i = 0; i < 4; i++)
        get(&t, keys[i], (uint64_t)i, ev), assert_string_equal(ev, "");
    get(&t, "a", 10, ev); /* a is now the most recent: b is the oldest */
    for (int i = 0; i < 100; i++) {
        char k[16];
        snprintf(k, sizeof(k), "n%d", i);
        get(&t, k, 20 + (uint64_t)i, ev);
        if (i == 0)
            assert_string_equal(ev, "b");
        if (i == 1)
            assert_string_equal(ev, "c");
        assert_int_equal(t.n, 4);
    }
    assert_int_equal(t.evicted, 100);
    assert_null(sl_idt_peek(&t, "a", 1)); /* gone in its turn */
    assert_non_null(sl_idt_peek(&t, "n99", 3));
    drain(&t);
}

/* A fresh entry (the same as a new one) goes before older ones that hold
 * state; a pinned one never goes, even when it is the oldest. */
static void test_fresh_first_pinned_never(void **state)
{
    (void)state;
    struct sl_idt t;
    char ev[16];
    assert_int_equal(sl_idt_init(&t, 4), 0);
    struct ent *a = get(&t, "a", 1, ev);
    get(&t, "b", 2, ev);
    struct ent *c = get(&t, "c", 3, ev);
    struct ent *d = get(&t, "d", 4, ev);
    c->fresh = 1;
    d->fresh = 1;
    get(&t, "e", 5, ev);
    assert_string_equal(ev, "c"); /* the oldest fresh, not the oldest (a) */
    get(&t, "f", 6, ev);
    assert_string_equal(ev, "d");
    a->pinned = 1;
    get(&t, "g", 7, ev);
    assert_string_equal(ev, "b"); /* a is in use */
    assert_non_null(sl_idt_peek(&t, "a", 1));
    /* everything pinned: the table passes its cap instead of dropping state in use */
    for (struct sl_idt_node *n = (struct sl_idt_node *)t.lru.head; n != NULL;
         n = (struct sl_idt_node *)n->lru.next)
        ((struct ent *)n)->pinned = 1;
    get(&t, "h", 8, ev);
    assert_string_equal(ev, "");
    assert_int_equal(t.n, 5);
    assert_int_equal(t.evicted, 3);
    drain(&t);
}

/* Idle entries come out of the head in order of last use. */
static void test_expired_in_order(void **state)
{
    (void)state;
    struct sl_idt t;
    char ev[16];
    assert_int_equal(sl_idt_init(&t, 0), 0); /* 0: no bound */
    for (int i = 0; i < 1000; i++) {
        char k[16];
        snprintf(k, sizeof(k), "k%d", i);
        get(&t, k, (uint64_t)i, ev);
    }
    assert_int_equal(t.n, 1000);
    assert_int_equal(t.evicted, 0);
    get(&t, "k0", 2000, ev); /* touched: no longer idle */
    struct sl_idt_node *n = sl_idt_expired(&t, 1100, 200);
    assert_non_null(n);
    assert_string_equal(((struct ent *)n)->key, "k1");
    assert_null(sl_idt_expired(&t, 1100, 1200));
    drain(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cap_holds_lru_first),
        cmocka_unit_test(test_fresh_first_pinned_never),
        cmocka_unit_test(test_expired_in_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

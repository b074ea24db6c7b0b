/* sluice — a free list of fixed-size objects.
 *
 * For objects a hot path takes and gives back at a high rate (a pending
 * store decision per request, a verdict ring per batch): taking and giving
 * are two pointer moves; at most <cap> free objects are kept, so an idle
 * process gives its memory back. Not thread-safe (one loop). */
#ifndef SL_CORE_POOL_H
#define SL_CORE_POOL_H

#include <stddef.h>

struct sl_pool {
    size_t   size;     /* bytes of one object */
    unsigned cap;      /* free objects kept at most */
    unsigned n;        /* free objects held now */
    void   **free;     /* the free objects (allocated on first give) */
};

#define SL_POOL_INIT(size_, cap_) { (size_), (cap_), 0, NULL }

/* An object of p->size bytes (uninitialised), or NULL when out of memory. */
void *sl_pool_take(struct sl_pool *p);

/* Gives <obj> back (kept for reuse or freed). */
void sl_pool_give(struct sl_pool *p, void *obj);

/* Frees every kept object (at exit, so leak checkers stay quiet). */
void sl_pool_drain(struct sl_pool *p);

#endif

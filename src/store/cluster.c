/* sluice — Redis Cluster as the quota store: not built yet (the next
 * commits); the single node does not reach any of this. */
#include "store/store-i.h"

int sl_cluster_start(struct sl_store *st)
{
    (void)st;
    return -1;
}

void sl_cluster_want_refresh(struct sl_store *st)
{
    (void)st;
}

struct sl_node *sl_cluster_node_of(const struct sl_store *st, unsigned slot)
{
    (void)st, (void)slot;
    return NULL;
}

struct sl_node *sl_cluster_node_at(struct sl_store *st, const char *ip, uint16_t port)
{
    (void)st, (void)ip, (void)port;
    return NULL;
}

struct sl_store_req *sl_cluster_eval(struct sl_store *st, int id, int nkeys,
                                     const struct sl_str *keys, int nargs,
                                     const struct sl_str *args, sl_store_cb *cb, void *data)
{
    (void)st, (void)id, (void)nkeys, (void)keys, (void)nargs, (void)args, (void)cb, (void)data;
    return NULL;
}

void sl_cluster_node_ready(struct sl_store *st, struct sl_node *nd)
{
    (void)st, (void)nd;
}

int sl_store_redirect(struct sl_store *st, struct sl_node *nd, struct sl_store_req *r,
                      const char *text)
{
    (void)st, (void)nd, (void)r, (void)text;
    return 0;
}

void sl_store_map_reply(struct sl_store *st, struct sl_node *nd, const struct sl_slot_toks *tk,
                        const char *err)
{
    (void)st, (void)nd, (void)tk, (void)err;
}

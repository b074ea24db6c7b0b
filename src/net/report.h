/* sluice — what the admin endpoint reports about the server. */
#ifndef SL_NET_REPORT_H
#define SL_NET_REPORT_H

#include <stdio.h>

struct sl_metrics;

/* Admin callbacks; <data> is the struct sl_server. */
void sl_server_metrics(void *data, struct sl_metrics *m);
void sl_server_stats(void *data, FILE *out);
int sl_server_ready(void *data, const char **why);

#endif

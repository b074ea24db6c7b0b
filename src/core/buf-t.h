/* sluice — types of the data chunks that carry bytes between sockets. */
#ifndef SL_CORE_BUF_T_H
#define SL_CORE_BUF_T_H

#include <stdint.h>

#define SL_BUF_SIZE (64 * 1024) /* one chunk: also the largest single read */

/* A fixed-size chunk. The reader of a socket owns one reference while it
 * fills the chunk; each queued write of bytes inside it holds another, so the
 * bytes stay put until the kernel has them. Bytes are appended at <end> and
 * consumed from <start>; queued writes only ever point below <start>. */
struct sl_buf {
    struct sl_buf *next;  /* free-list link while pooled */
    uint32_t       refs;  /* holders: the filling reader + queued writes */
    uint32_t       start; /* first byte not yet consumed */
    uint32_t       end;   /* one past the last byte received */
    char           data[SL_BUF_SIZE];
};

#endif

#include <uv.h>

#include "core/err.h"

const char *sl_strerror(int err)
{
    switch (err) {
    case SL_OK:      return "ok";
    case SL_EPROTO:  return "protocol error";
    case SL_ELIMIT:  return "over limit";
    case SL_ESTORE:  return "quota store failed";
    case SL_ECONF:   return "bad configuration";
    case SL_ETOOBIG: return "size over its cap";
    case SL_ENOMEM:  return "out of memory";
    case SL_EAGAIN:  return "need more input";
    case SL_ECLOSED: return "closed";
    default:         return uv_strerror(err);
    }
}

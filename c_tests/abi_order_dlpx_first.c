/* Include order 2: dlpx.h first, then the official DLPack 1.3 header. dlpx.h brings its own
 * generated dlpack.h, which takes the shared include guard, so the official header is skipped. */
#include "dlpx/dlpx.h"

#include <dlpack/dlpack.h>

#define ORDER_FN abi_order_dlpx_first
#define ORDER_NAME "dlpx.h first"
#include "abi_order_body.inc"

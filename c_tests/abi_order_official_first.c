/* Include order 1: the official DLPack 1.3 header first, then dlpx.h. The official header wins
 * the shared include guard (DLPACK_DLPACK_H_), dlpx's own dlpack.h is skipped, and dlpx.h's
 * version check accepts it; test_abi.c calls the function, proving this order compiles and links. */
#include <dlpack/dlpack.h>

#include "dlpx/dlpx.h"

#define ORDER_FN abi_order_official_first
#define ORDER_NAME "official dlpack.h first"
#include "abi_order_body.inc"

/* A kernel whose signature the loader cannot read: ImportError naming the kernel. */
#include "dlpx/kernel.h"

static int f(DlpxCall *call) {
  (void)call;
  return 0;
}
DLPX_EXPORT_KERNEL(f, f, "f(a, scale=oops)")

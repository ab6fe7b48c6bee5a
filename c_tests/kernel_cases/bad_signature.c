/* A kernel whose signature the loader cannot read: ImportError naming the kernel. The loader
 * reads `g` first (the list runs backwards): a library refused after a good kernel leaks nothing
 * of it (its name was leaked once). */
#include "dlpx/kernel.h"

static int f(DlpxCall *call) {
  (void)call;
  return 0;
}
DLPX_EXPORT_KERNEL(f, f, "f(a, scale=oops)")

static int g(DlpxCall *call) {
  (void)call;
  return 0;
}
DLPX_EXPORT_KERNEL(g, g, "g(a): a good kernel, read before f.")

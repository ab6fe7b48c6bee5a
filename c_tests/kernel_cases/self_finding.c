/* A library whose own constructor asks dlpx for its kernels while dlopen is still running its
 * constructors: `early`'s export is linked by then (constructors run in the order they are
 * defined: GCC is told not to reorder them), `late`'s is not. The constructor sees the kernels linked so far; the library, once
 * loaded, has all of them (it was cached with `early` alone). */
#define _GNU_SOURCE
#include <dlfcn.h>

#include "dlpx/kernel.h"

static int early(DlpxCall *call) {
  (void)call;
  return 0;
}
DLPX_EXPORT_KERNEL(early, early, "early()")

/* What the constructor's finds returned (0 found, -1 not; 1 until it ran). */
static int found_early = 1, found_late = 1;

__attribute__((constructor)) static void find_own_kernels(void) {
  Dl_info info;
  if (!dladdr((void *)&find_own_kernels, &info) || !info.dli_fname) return;
  const DlpxKernel *kernel = NULL;
  found_early = dlpx_kernel_find(info.dli_fname, "early", &kernel);
  found_late = dlpx_kernel_find(info.dli_fname, "late", &kernel);
}

static int late(DlpxCall *call) { return dlpx_call_return_int(call, 10 * found_early + found_late); }
DLPX_EXPORT_KERNEL(late, late, "late() -> int: 10 * (what finding early returned) + (what finding late returned)")

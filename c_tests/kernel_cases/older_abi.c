/* A library built for kernel ABI 1 (before kernels read their arguments in place), written by
 * hand as kernel.h 1 laid it out: a loader of ABI 2 still runs it, through the call functions. */
#include <stdint.h>
#include <stddef.h>

#include "dlpx/dlpx.h"

struct export_ {
  uint32_t abi_version;
  uint32_t flags;
  const char *name;
  const char *signature;
  int (*function)(DlpxCall *call);
  const struct export_ *next;
};

struct record {
  uint32_t abi_version;
  uint32_t reserved;
  const struct export_ *first;
};

/* tensors(*ts) -> int: how many tensors it read, each through dlpx_call_tensor. */
static int tensors(DlpxCall *call) {
  int32_t n = dlpx_call_argument_count(call);
  for (int32_t i = 0; i < n; ++i) {
    const DLTensor *t;
    if (dlpx_call_tensor(call, i, &t, NULL) != 0) return -1;
  }
  return dlpx_call_return_int(call, n);
}

static const struct export_ export_ = {1, 0, "tensors", "tensors(*ts) -> int: how many tensors.", tensors, NULL};
static const struct record record = {1, 0, &export_};

__attribute__((visibility("default"))) const struct record *dlpx_kernel_library(void);
__attribute__((visibility("default"))) const struct record *dlpx_kernel_library(void) { return &record; }

/* Allocates a tensor through an installed dlpx's exchange table and checks it. */
#include <stdio.h>

#include "dlpx/dlpx.h"

int main(void) {
  const DLPackExchangeAPI *api = dlpx_exchange_api();
  int64_t shape[2] = {3, 4};
  DLTensor prototype = {0};
  prototype.device.device_type = kDLCPU;
  prototype.ndim = 2;
  prototype.dtype.code = kDLFloat;
  prototype.dtype.bits = 32;
  prototype.dtype.lanes = 1;
  prototype.shape = shape;
  DLManagedTensorVersioned *t = NULL;
  if (api->managed_tensor_allocator(&prototype, &t, NULL, NULL) != 0) {
    fprintf(stderr, "allocation failed: %s\n", dlpx_last_error());
    return 1;
  }
  int ok = t->dl_tensor.ndim == 2 && t->dl_tensor.strides[0] == 4 && t->dl_tensor.strides[1] == 1 &&
           ((uintptr_t)t->dl_tensor.data % 256) == 0;
  printf("dlpx %s: allocated 3x4 float32 at %p: %s\n", dlpx_version(), t->dl_tensor.data, ok ? "ok" : "WRONG");
  t->deleter(t);
  return ok ? 0 : 1;
}

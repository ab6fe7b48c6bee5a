/* Include order 1: the official DLPack 1.3 header first, then dlpx.h. The official header wins
 * the shared include guard (DLPACK_DLPACK_H_), dlpx's own dlpack.h is skipped, and dlpx.h's
 * version check accepts it. The function below uses the table and a DLTensor through the
 * official declarations; test_abi.c calls it, proving this order compiles and links. */
#include <dlpack/dlpack.h>

#include "dlpx/dlpx.h"

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif
int abi_order_official_first(void);
#ifdef __cplusplus
}
#endif

#define ORDER_NAME "official dlpack.h first"
#define ORDER_CHECK(cond)                                                        \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: [" ORDER_NAME "] FAILED: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                                \
    }                                                                            \
  } while (0)

/* Allocates a 2x3 float32 tensor through dlpx's table, checks it, deletes it. Returns the number
 * of failed checks (each printed to stderr). */
int abi_order_official_first(void) {
  int failures = 0;
  const DLPackExchangeAPI *api = dlpx_exchange_api();
  ORDER_CHECK(api != NULL);
  if (api == NULL) return failures;
  ORDER_CHECK(api->header.version.major == DLPACK_MAJOR_VERSION);
  ORDER_CHECK(api->header.version.minor == DLPACK_MINOR_VERSION);
  ORDER_CHECK(dlpx_exchange_api_select(&api->header) == api);

  int64_t shape[2] = {2, 3};
  DLTensor prototype;
  prototype.data = NULL;
  prototype.device.device_type = kDLCPU;
  prototype.device.device_id = 0;
  prototype.ndim = 2;
  prototype.dtype.code = kDLFloat;
  prototype.dtype.bits = 32;
  prototype.dtype.lanes = 1;
  prototype.shape = shape;
  prototype.strides = NULL;
  prototype.byte_offset = 0;

  DLManagedTensorVersioned *out = NULL;
  ORDER_CHECK(api->managed_tensor_allocator(&prototype, &out, NULL, NULL) == 0);
  if (out == NULL) return failures + 1;
  DLTensor *t = &out->dl_tensor;
  ORDER_CHECK(out->version.major == 1 && out->version.minor == 3);
  ORDER_CHECK(t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3);
  ORDER_CHECK(t->strides != NULL && t->strides[0] == 3 && t->strides[1] == 1);
  ORDER_CHECK(t->device.device_type == kDLCPU);
  float *data = (float *)t->data;
  for (int i = 0; i < 6; ++i) data[i] = (float)i;
  ORDER_CHECK(data[5] == 5.0f);

  void *stream = &failures;
  ORDER_CHECK(api->current_work_stream(kDLCPU, 0, &stream) == 0 && stream == NULL);
  out->deleter(out);
  return failures;
}

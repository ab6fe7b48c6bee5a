/*
 * The arithmetic of the examples' add(a, b), written once for the two ways of shipping it: the
 * kernel library (kernels.c, no Python in it) and the CPython extension written the older way
 * (../add_extension/dlpx_demo.c). What differs between them is only how the tensors come in,
 * how the output is made and how an error is reported; these functions need only DLPack.
 */
#ifndef DLPX_EXAMPLE_STRIDED_ADD_H
#define DLPX_EXAMPLE_STRIDED_ADD_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dlpx/dlpx.h"

/* Why a and b cannot be added: the Python exception's name ("TypeError", "ValueError") with the
 * reason written into message; NULL when they can. */
static inline const char *strided_add_refusal(const DLTensor *a, const DLTensor *b, char *message, size_t size) {
  if (a->device.device_type != kDLCPU || b->device.device_type != kDLCPU) {
    snprintf(message, size, "tensors must be on the CPU, got device types %d and %d", (int)a->device.device_type,
             (int)b->device.device_type);
    return "ValueError";
  }
  if (a->dtype.code != b->dtype.code || a->dtype.bits != b->dtype.bits || a->dtype.lanes != b->dtype.lanes) {
    snprintf(message, size, "dtypes differ: (code %d, bits %d) and (code %d, bits %d)", a->dtype.code,
             a->dtype.bits, b->dtype.code, b->dtype.bits);
    return "TypeError";
  }
  DLDataType t = a->dtype;
  if (!(t.lanes == 1 && (t.code == kDLFloat || t.code == kDLInt) && (t.bits == 32 || t.bits == 64))) {
    snprintf(message, size, "unsupported dtype (code %d, bits %d, lanes %d); expected float32, float64, int32 or int64",
             t.code, t.bits, t.lanes);
    return "TypeError";
  }
  if (a->ndim != b->ndim || (a->ndim > 0 && memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) != 0)) {
    snprintf(message, size, "shapes differ");
    return "ValueError";
  }
  return NULL;
}

/* out[i] = a[i] + b[i] over any strides; out is compact (written in order). At most 64
 * dimensions: dlpx refuses more in any tensor it hands a kernel (DLPack's limit it keeps). */
#define STRIDED_ADD(T)                                                                          \
  static inline void strided_add_##T(const DLTensor *a, const DLTensor *b, T *out, int64_t numel) { \
    const char *pa = (const char *)a->data + a->byte_offset;                                    \
    const char *pb = (const char *)b->data + b->byte_offset;                                    \
    int64_t index[64] = {0};                                                                    \
    for (int64_t n = 0; n < numel; ++n) {                                                       \
      int64_t oa = 0, ob = 0;                                                                   \
      for (int d = 0; d < a->ndim; ++d) {                                                       \
        oa += index[d] * a->strides[d];                                                         \
        ob += index[d] * b->strides[d];                                                         \
      }                                                                                         \
      out[n] = ((const T *)pa)[oa] + ((const T *)pb)[ob];                                       \
      for (int d = a->ndim - 1; d >= 0; --d) {                                                  \
        if (++index[d] < a->shape[d]) break;                                                    \
        index[d] = 0;                                                                           \
      }                                                                                         \
    }                                                                                           \
  }
STRIDED_ADD(float)
STRIDED_ADD(double)
STRIDED_ADD(int32_t)
STRIDED_ADD(int64_t)
#undef STRIDED_ADD

/* out = a + b, for a and b that strided_add_refusal passed and out a compact tensor like a. */
static inline void strided_add(const DLTensor *a, const DLTensor *b, DLTensor *out) {
  int64_t numel = 1;
  for (int d = 0; d < a->ndim; ++d) numel *= a->shape[d];
  if (numel == 0) return;
  void *o = (char *)out->data + out->byte_offset;
  if (a->dtype.code == kDLFloat && a->dtype.bits == 32) strided_add_float(a, b, (float *)o, numel);
  else if (a->dtype.code == kDLFloat) strided_add_double(a, b, (double *)o, numel);
  else if (a->dtype.bits == 32) strided_add_int32_t(a, b, (int32_t *)o, numel);
  else strided_add_int64_t(a, b, (int64_t *)o, numel);
}

#endif /* DLPX_EXAMPLE_STRIDED_ADD_H */

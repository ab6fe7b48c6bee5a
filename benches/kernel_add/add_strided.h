/*
 * The add kernel of examples/kernel_library/kernels.c, for the tvm-ffi and nanobind versions of
 * benches/kernel_add.py: out = a + b over any strides (float32, float64, int32, int64), out compact.
 * Header-only C and C++, no dependency: each binding hands it its arguments' fields.
 */
#ifndef DLPX_BENCH_ADD_STRIDED_H
#define DLPX_BENCH_ADD_STRIDED_H

#include <stdint.h>

/* One operand: its data (byte offset applied) and its strides in elements. */
typedef struct {
  const void *data;
  const int64_t *strides;
} AddOperand;

#define ADD_STRIDED_DEFINE(T)                                                                    \
  static inline void add_strided_##T(int ndim, const int64_t *shape, AddOperand a, AddOperand b, \
                                     T *out, int64_t numel) {                                    \
    int64_t index[64] = {0};                                                                     \
    for (int64_t n = 0; n < numel; ++n) {                                                        \
      int64_t oa = 0, ob = 0;                                                                    \
      for (int d = 0; d < ndim; ++d) {                                                           \
        oa += index[d] * a.strides[d];                                                           \
        ob += index[d] * b.strides[d];                                                           \
      }                                                                                          \
      out[n] = ((const T *)a.data)[oa] + ((const T *)b.data)[ob];                                \
      for (int d = ndim - 1; d >= 0; --d) {                                                      \
        if (++index[d] < shape[d]) break;                                                        \
        index[d] = 0;                                                                            \
      }                                                                                          \
    }                                                                                            \
  }
ADD_STRIDED_DEFINE(float)
ADD_STRIDED_DEFINE(double)
ADD_STRIDED_DEFINE(int32_t)
ADD_STRIDED_DEFINE(int64_t)

/* is_float: a floating-point dtype; bits: 32 or 64 (the binding has checked both). */
static inline void add_strided(int ndim, const int64_t *shape, int is_float, int bits, AddOperand a, AddOperand b,
                               void *out) {
  int64_t numel = 1;
  for (int d = 0; d < ndim; ++d) numel *= shape[d];
  if (numel == 0) return;
  if (is_float && bits == 32) add_strided_float(ndim, shape, a, b, (float *)out, numel);
  else if (is_float) add_strided_double(ndim, shape, a, b, (double *)out, numel);
  else if (bits == 32) add_strided_int32_t(ndim, shape, a, b, (int32_t *)out, numel);
  else add_strided_int64_t(ndim, shape, a, b, (int64_t *)out, numel);
}

#endif

/*
 * libdlpx_example_kernels.so: a kernel library, with no Python in it. Load it from Python with
 * dlpx.load_library(path) (or from C with dlpx_kernel_find) and call
 *
 *   add(a, b)       elementwise a + b over any strides (float32, float64, int32, int64): a new
 *                   tensor shaped like a, allocated by a's framework and returned as a's type;
 *   nop(*tensors)   views each tensor and returns None (what taking N tensors costs).
 */
#include <stdio.h>
#include <string.h>

#include "dlpx/kernel.h"

static int same_dtype(DLDataType x, DLDataType y) {
  return x.code == y.code && x.bits == y.bits && x.lanes == y.lanes;
}

static int supported(DLDataType t) {
  return t.lanes == 1 && ((t.code == kDLFloat && (t.bits == 32 || t.bits == 64)) ||
                          (t.code == kDLInt && (t.bits == 32 || t.bits == 64)));
}

/* Reports why a and b cannot be added (-1), or 0. */
static int check_arguments(DlpxCall *call, const DLTensor *a, const DLTensor *b) {
  char message[160];
  if (a->device.device_type != kDLCPU || b->device.device_type != kDLCPU) {
    snprintf(message, sizeof message, "tensors must be on the CPU, got device types %d and %d",
             (int)a->device.device_type, (int)b->device.device_type);
    return dlpx_call_error(call, "ValueError", message);
  }
  if (!same_dtype(a->dtype, b->dtype)) {
    snprintf(message, sizeof message, "dtypes differ: (code %d, bits %d) and (code %d, bits %d)", a->dtype.code,
             a->dtype.bits, b->dtype.code, b->dtype.bits);
    return dlpx_call_error(call, "TypeError", message);
  }
  if (!supported(a->dtype)) {
    snprintf(message, sizeof message,
             "unsupported dtype (code %d, bits %d, lanes %d); expected float32, float64, int32 or int64",
             a->dtype.code, a->dtype.bits, a->dtype.lanes);
    return dlpx_call_error(call, "TypeError", message);
  }
  if (a->ndim != b->ndim || (a->ndim > 0 && memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) != 0)) {
    return dlpx_call_error(call, "ValueError", "shapes differ");
  }
  return 0;
}

/* out[i] = a[i] + b[i] over any strides; out is compact (written in order). */
#define DEFINE_ADD(T)                                                                 \
  static void add_##T(const DLTensor *a, const DLTensor *b, T *out, int64_t numel) { \
    const char *pa = (const char *)a->data + a->byte_offset;                         \
    const char *pb = (const char *)b->data + b->byte_offset;                         \
    int64_t index[64] = {0};                                                         \
    for (int64_t n = 0; n < numel; ++n) {                                            \
      int64_t oa = 0, ob = 0;                                                        \
      for (int d = 0; d < a->ndim; ++d) {                                            \
        oa += index[d] * a->strides[d];                                              \
        ob += index[d] * b->strides[d];                                              \
      }                                                                              \
      out[n] = ((const T *)pa)[oa] + ((const T *)pb)[ob];                            \
      for (int d = a->ndim - 1; d >= 0; --d) {                                       \
        if (++index[d] < a->shape[d]) break;                                         \
        index[d] = 0;                                                                \
      }                                                                              \
    }                                                                                \
  }
DEFINE_ADD(float)
DEFINE_ADD(double)
DEFINE_ADD(int32_t)
DEFINE_ADD(int64_t)

static void compute(const DLTensor *a, const DLTensor *b, DLTensor *out) {
  int64_t numel = 1;
  for (int d = 0; d < a->ndim; ++d) numel *= a->shape[d];
  if (numel == 0) return;
  void *o = (char *)out->data + out->byte_offset;
  if (a->dtype.code == kDLFloat && a->dtype.bits == 32) add_float(a, b, (float *)o, numel);
  else if (a->dtype.code == kDLFloat) add_double(a, b, (double *)o, numel);
  else if (a->dtype.bits == 32) add_int32_t(a, b, (int32_t *)o, numel);
  else add_int64_t(a, b, (int64_t *)o, numel);
}

static int add(DlpxCall *call) {
  const DLTensor *a, *b;
  DLTensor *out;
  if (dlpx_argument_tensor(call, 0, &a, NULL) != 0 || dlpx_argument_tensor(call, 1, &b, NULL) != 0) return -1;
  if (check_arguments(call, a, b) != 0) return -1;
  /* In a's framework (torch in: torch's allocator), like a; the call deletes it unless returned. */
  if (dlpx_call_allocate(call, a->device, a->dtype, a->ndim, a->shape, &out) != 0) return -1;
  compute(a, b, out);
  return dlpx_call_return_tensor(call, out);
}
DLPX_EXPORT_KERNEL(add, add, "add(a, b) -> tensor: a + b elementwise (any strides; float32, float64, int32, int64), "
                             "a new tensor like a in a's framework.")

static int nop(DlpxCall *call) {
  int64_t sum = 0; /* what every kernel reads first: rank and data pointer */
  /* Read in place, unchecked: every argument of `*tensors` is a tensor (the loader converts each
   * argument to its parameter's type before the kernel runs). */
  for (int32_t i = 0; i < call->argument_count; ++i) {
    const DLTensor *t = &call->arguments[i].value.tensor.tensor;
    sum += t->ndim + (int64_t)(intptr_t)t->data;
  }
  /* One store the compiler must keep, so the reads stay (benches/kernel_overhead/dlpx_nop.c
   * reads the same way). */
  volatile int64_t sink = sum;
  (void)sink;
  return 0;
}
/* Short: it returns long before releasing and taking back the GIL would. */
DLPX_EXPORT_KERNEL_SHORT(nop, nop, "nop(*tensors) -> None: Views each tensor and returns None.")

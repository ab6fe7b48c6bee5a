/*
 * libdlpx_example_kernels.so: a kernel library, with no Python in it. Load it from Python with
 * dlpx.load_library(path) (or from C with dlpx_kernel_find) and call
 *
 *   add(a, b)       elementwise a + b over any strides (float32, float64, int32, int64): a new
 *                   tensor shaped like a, allocated by a's framework and returned as a's type;
 *   nop(*tensors)   views each tensor and returns None (what taking N tensors costs).
 */
#include "dlpx/kernel.h"
#include "strided_add.h"

static int add(DlpxCall *call) {
  const DLTensor *a, *b;
  DLTensor *out;
  if (dlpx_argument_tensor(call, 0, &a, NULL) != 0 || dlpx_argument_tensor(call, 1, &b, NULL) != 0) return -1;
  char message[160];
  const char *refused = strided_add_refusal(a, b, message, sizeof message);
  if (refused) return dlpx_call_error(call, refused, message);
  /* In a's framework (torch in: torch's allocator), like a; the call deletes it unless returned. */
  if (dlpx_call_allocate(call, a->device, a->dtype, a->ndim, a->shape, &out) != 0) return -1;
  strided_add(a, b, out);
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

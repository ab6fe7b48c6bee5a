/* Typed C++ kernels (include/dlpx/kernel.hpp, c_tests/kernel_cases/typed_cases.cpp) called from
 * C, and from C++ (this file's C++17 variant), with no Python in the process: dlpx_kernel_find
 * and dlpx_kernel_call, DLTensors and scalars in, managed tensors and scalars out; a C++
 * exception is a clean -1 with the kind its type names and the kernel's name in the message,
 * and the outputs a kernel allocated before throwing are deleted once (the ASan variant's LSan
 * and valgrind see any left).
 *
 * argv: the typed_cases library. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dlpx/kernel.h"
#include "test_util.h"

/* `huge` asks for 128 TiB. */
TEST_HUGE_ALLOCATIONS_MAY_FAIL

static const char *cases_path;

static const DlpxKernel *find(const char *name) {
  const DlpxKernel *kernel = NULL;
  int rc = dlpx_kernel_find(cases_path, name, &kernel);
  CHECK(rc == 0 && kernel != NULL, "dlpx_kernel_find(%s): %s", name, test_str(dlpx_last_error()));
  return kernel;
}

static DlpxValue value(int32_t kind) {
  DlpxValue v;
  memset(&v, 0, sizeof v);
  v.kind = kind;
  return v;
}

static DlpxValue str(const char *s) {
  DlpxValue v = value(DLPX_VALUE_STR);
  v.str_data = s;
  v.str_size = strlen(s);
  return v;
}

/* A 1-d tensor of 4 values with stride 2 over `data` (8 values of `bits` bits, float). */
static DLTensor strided(void *data, uint8_t bits, int64_t *shape, int64_t *strides) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = 1;
  t.dtype.code = kDLFloat;
  t.dtype.bits = bits;
  t.dtype.lanes = 1;
  shape[0] = 4;
  strides[0] = 2;
  t.shape = shape;
  t.strides = strides;
  return t;
}

static void check_fails(const char *name, const DlpxValue *args, size_t nargs, const char *kind, const char *message) {
  DlpxValue results[4];
  size_t n = 99;
  int rc = dlpx_kernel_call(find(name), args, nargs, results, 4, &n);
  CHECK(rc == -1 && n == 99, "%s: rc %d, n %zu", name, rc, n);
  CHECK(test_streq(dlpx_last_error_kind(), kind), "%s: kind %s, expected %s", name, test_str(dlpx_last_error_kind()),
        kind);
  CHECK(test_streq(dlpx_last_error(), message), "%s: \"%s\", expected \"%s\"", name, test_str(dlpx_last_error()),
        message);
}

static void test_scale_reads_any_stride_and_returns_an_output_to_delete(void) {
  double data[8] = {0, -1, 1, -1, 2, -1, 3, -1};
  int64_t shape[1], strides[1];
  DLTensor x = strided(data, 64, shape, strides);
  DlpxValue args[2] = {value(DLPX_VALUE_TENSOR), value(DLPX_VALUE_FLOAT)};
  args[0].tensor = &x;
  args[1].float64 = 3.0;
  DlpxValue results[1];
  size_t n = 0;
  int rc = dlpx_kernel_call(find("scale"), args, 2, results, 1, &n);
  CHECK(rc == 0 && n == 1 && results[0].kind == DLPX_VALUE_TENSOR, "rc %d, n %zu: %s", rc, n,
        test_str(dlpx_last_error()));
  if (rc != 0 || n != 1) return;
  DLManagedTensorVersioned *m = results[0].managed;
  const double *out = (const double *)m->dl_tensor.data;
  CHECK(m->dl_tensor.shape[0] == 4 && out[0] == 0 && out[1] == 3 && out[2] == 6 && out[3] == 9, "3 x");
  m->deleter(m);
}

static void test_a_tuple_of_outputs_and_a_scalar(void) {
  float data[8] = {0, -1, 1, -1, 2, -1, 3, -1};
  int64_t shape[1], strides[1];
  DLTensor x = strided(data, 32, shape, strides);
  DlpxValue args[1] = {value(DLPX_VALUE_TENSOR)};
  args[0].tensor = &x;
  DlpxValue results[3];
  size_t n = 0;
  int rc = dlpx_kernel_call(find("pair"), args, 1, results, 3, &n);
  CHECK(rc == 0 && n == 3, "rc %d, n %zu: %s", rc, n, test_str(dlpx_last_error()));
  if (rc != 0 || n != 3) return;
  const float *plus = (const float *)results[0].managed->dl_tensor.data;
  const float *twice = (const float *)results[1].managed->dl_tensor.data;
  CHECK(plus[3] == 4 && twice[3] == 6, "x + 1, 2 x");
  CHECK(results[2].kind == DLPX_VALUE_INT && results[2].int64 == 4, "len(x)");
  results[0].managed->deleter(results[0].managed);
  results[1].managed->deleter(results[1].managed);
}

static void test_exceptions_fail_cleanly_with_their_kind_and_lose_nothing(void) {
  static const struct {
    const char *what, *kind, *message;
  } cases[] = {
      {"dlpx:KeyError", "KeyError", "dlpx: throw_: it failed"},
      {"invalid_argument", "ValueError", "dlpx: throw_: it failed"},
      {"out_of_range", "IndexError", "dlpx: throw_: it failed"},
      {"overflow_error", "OverflowError", "dlpx: throw_: it failed"},
      {"bad_alloc", "MemoryError", "dlpx: throw_: std::bad_alloc"},
      {"runtime_error", "RuntimeError", "dlpx: throw_: it failed"},
      {"int", "RuntimeError", "dlpx: throw_: a C++ exception not derived from std::exception"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    DlpxValue args[2] = {str(cases[i].what), str("it failed")};
    check_fails("throw_", args, 2, cases[i].kind, cases[i].message);
  }
  float data[8] = {0};
  int64_t shape[1], strides[1];
  DLTensor x = strided(data, 32, shape, strides);
  DlpxValue args[1] = {value(DLPX_VALUE_TENSOR)};
  args[0].tensor = &x;
  for (int round = 0; round < 100; ++round) {
    check_fails("allocate_then_throw", args, 1, "RuntimeError", "dlpx: allocate_then_throw: failed after allocating");
  }
  check_fails("sum1", args, 1, "TypeError", "dlpx: sum1: parameter 'x': as_mdspan: expected float64, got float32");
  check_fails("huge", args, 1, "MemoryError", "dlpx: huge: output: allocator: out of memory allocating 140737488355328 bytes");
  check_fails("empty_output", NULL, 0, "ValueError", "dlpx: empty_output: returned an empty dlpx::OutputTensor");
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s TYPED_CASES\n", argv[0]);
    return 2;
  }
  cases_path = argv[1];
  test_scale_reads_any_stride_and_returns_an_output_to_delete();
  test_a_tuple_of_outputs_and_a_scalar();
  test_exceptions_fail_cleanly_with_their_kind_and_lose_nothing();
  return test_summary();
}

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
#include "kernel_call_util.h"

/* `huge` asks for 128 TiB. */
TEST_HUGE_ALLOCATIONS_MAY_FAIL

static void check_fails(const char *name, const DlpxValue *args, size_t nargs, const char *kind, const char *message) {
  const char *got = call_fails(name, args, nargs, kind);
  CHECK(test_streq(got, message), "%s: \"%s\", expected \"%s\"", name, test_str(got), message);
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

/* What the C tests of kernel libraries share (test_kernel_library.c, test_typed_kernels.c): the
 * kernel by name from the cases library, argument values, a strided tensor, and a call that must
 * fail. Include after test_util.h and dlpx/kernel.h; set `cases_path` from argv first. */
#ifndef DLPX_KERNEL_CALL_UTIL_H
#define DLPX_KERNEL_CALL_UTIL_H

#include <stdint.h>
#include <string.h>

static const char *cases_path;

static inline const DlpxKernel *find(const char *name) {
  const DlpxKernel *kernel = NULL;
  int rc = dlpx_kernel_find(cases_path, name, &kernel);
  CHECK(rc == 0 && kernel != NULL, "dlpx_kernel_find(%s): %s", name, test_str(dlpx_last_error()));
  return kernel;
}

static inline DlpxValue value(int32_t kind) {
  DlpxValue v;
  memset(&v, 0, sizeof v);
  v.kind = kind;
  return v;
}

static inline DlpxValue tensor(const DLTensor *t) {
  DlpxValue v = value(DLPX_VALUE_TENSOR);
  v.tensor = t;
  return v;
}

static inline DlpxValue str(const char *s) {
  DlpxValue v = value(DLPX_VALUE_STR);
  v.str_data = s;
  v.str_size = strlen(s);
  return v;
}

/* A 1-d float tensor of `bits` bits, 4 values with stride 2 over `data` (8 values). */
static inline DLTensor strided(void *data, uint8_t bits, int64_t *shape, int64_t *strides) {
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

/* Calls kernel `name`, which must fail with `kind` and write no result count; its message. */
static inline const char *call_fails(const char *name, const DlpxValue *args, size_t nargs, const char *kind) {
  DlpxValue results[4];
  size_t n = 99;
  int rc = dlpx_kernel_call(find(name), args, nargs, results, 4, &n);
  CHECK(rc == -1, "%s: rc %d", name, rc);
  CHECK(n == 0, "%s: nresults not 0 on failure (%zu): no count of results that are not there", name, n);
  CHECK(test_streq(dlpx_last_error_kind(), kind), "%s: kind %s, expected %s", name, test_str(dlpx_last_error_kind()),
        kind);
  return dlpx_last_error();
}

#endif /* DLPX_KERNEL_CALL_UTIL_H */

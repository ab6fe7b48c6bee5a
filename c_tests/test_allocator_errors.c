/* Every bad input to dlpx's allocator (dlpx_exchange_api()->managed_tensor_allocator): it returns
 * -1, leaves *out untouched, calls SetError exactly once with the right kind (a Python exception
 * name) and a message that starts with "dlpx: allocator: " and names the problem. Then the same
 * list once more with SetError == NULL: the kind and message reach dlpx_last_error_kind() and
 * dlpx_last_error(). Run under LeakSanitizer, nothing may leak. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlpx/dlpx.h"
#include "test_util.h"

/* The MemoryError case asks for 2^59 bytes. */
TEST_HUGE_ALLOCATIONS_MAY_FAIL

/* One bad input: the prototype (or NULL), whether `out` is NULL, and what must be reported. */
struct bad_case {
  const char *name;
  int null_prototype;
  int null_out;
  int32_t ndim;
  int null_shape;
  int64_t shape[4];
  int code;
  int bits;
  int lanes;
  int device_type;
  int32_t device_id;
  const char *kind;
  const char *needle; /* a fragment the message must contain, after "dlpx: allocator: " */
};

#define I64MAX INT64_MAX
#define CPU kDLCPU

static const struct bad_case cases[] = {
    /* name,                   NULL proto, NULL out, ndim, NULL shape, shape, code, bits, lanes, device, id, kind, needle */
    {"NULL prototype", 1, 0, 1, 0, {4, 0, 0, 0}, kDLFloat, 32, 1, CPU, 0, "ValueError", "prototype is NULL"},
    {"NULL out", 0, 1, 1, 0, {4, 0, 0, 0}, kDLFloat, 32, 1, CPU, 0, "ValueError", "out is NULL"},
    {"ndim -1", 0, 0, -1, 0, {4, 0, 0, 0}, kDLFloat, 32, 1, CPU, 0, "ValueError", "ndim = -1 is negative"},
    {"ndim INT32_MIN", 0, 0, INT32_MIN, 0, {4, 0, 0, 0}, kDLFloat, 32, 1, CPU, 0, "ValueError", "is negative"},
    {"ndim 65", 0, 0, 65, 0, {4, 0, 0, 0}, kDLFloat, 32, 1, CPU, 0, "ValueError", "ndim = 65 exceeds the maximum of 64"},
    {"ndim INT32_MAX", 0, 0, INT32_MAX, 0, {4, 0, 0, 0}, kDLFloat, 32, 1, CPU, 0, "ValueError", "exceeds the maximum"},
    {"NULL shape with ndim 2", 0, 0, 2, 1, {0, 0, 0, 0}, kDLFloat, 32, 1, CPU, 0, "ValueError", "shape is NULL"},
    {"negative extent", 0, 0, 3, 0, {2, -3, 4, 0}, kDLFloat, 32, 1, CPU, 0, "ValueError", "shape[1] = -3 is negative"},
    {"INT64_MIN extent", 0, 0, 1, 0, {INT64_MIN, 0, 0, 0}, kDLFloat, 32, 1, CPU, 0, "ValueError", "shape[0] ="},
    {"element count overflows", 0, 0, 2, 0, {I64MAX, 3, 0, 0}, kDLFloat, 32, 1, CPU, 0, "ValueError", "overflow"},
    {"element count overflows (4-d)", 0, 0, 4, 0, {1 << 20, 1 << 20, 1 << 20, 1 << 20}, kDLUInt, 8, 1, CPU, 0,
     "ValueError", "overflow"},
    {"byte count overflows", 0, 0, 1, 0, {(int64_t)1 << 62, 0, 0, 0}, kDLFloat, 32, 1, CPU, 0, "ValueError", "overflow"},
    /* 2^62 bytes: their 2^65 bits pass 64 bits, the bytes do not (they were refused as an overflow). */
    {"bytes that fit though their bits do not", 0, 0, 1, 0, {(int64_t)1 << 60, 0, 0, 0}, kDLFloat, 32, 1, CPU, 0,
     "MemoryError", "out of memory allocating 4611686018427387904 bytes"},
    {"bit count overflows with lanes", 0, 0, 1, 0, {(int64_t)1 << 50, 0, 0, 0}, kDLFloat, 64, 65535, CPU, 0,
     "ValueError", "overflow"},
    {"bits 0", 0, 0, 1, 0, {4, 0, 0, 0}, kDLFloat, 0, 1, CPU, 0, "ValueError", "bits = 0"},
    {"lanes 0", 0, 0, 1, 0, {4, 0, 0, 0}, kDLFloat, 32, 0, CPU, 0, "ValueError", "lanes = 0"},
    {"dtype code 19", 0, 0, 1, 0, {4, 0, 0, 0}, 19, 32, 1, CPU, 0, "ValueError", "unknown dtype code 19"},
    {"dtype code 255", 0, 0, 1, 0, {4, 0, 0, 0}, 255, 8, 1, CPU, 0, "ValueError", "unknown dtype code 255"},
    {"fp4 with bits 8", 0, 0, 1, 0, {4, 0, 0, 0}, kDLFloat4_e2m1fn, 8, 1, CPU, 0, "ValueError", "needs bits = 4"},
    {"fp6 with bits 8", 0, 0, 1, 0, {4, 0, 0, 0}, kDLFloat6_e2m3fn, 8, 1, CPU, 0, "ValueError", "needs bits = 6"},
    {"bool with bits 1", 0, 0, 1, 0, {4, 0, 0, 0}, kDLBool, 1, 1, CPU, 0, "ValueError", "needs bits = 8"},
    {"bfloat with bits 32", 0, 0, 1, 0, {4, 0, 0, 0}, kDLBfloat, 32, 1, CPU, 0, "ValueError", "needs bits = 16"},
    {"fp8 with bits 16", 0, 0, 1, 0, {4, 0, 0, 0}, kDLFloat8_e4m3fn, 16, 1, CPU, 0, "ValueError", "needs bits = 8"},
    {"unknown device type 99", 0, 0, 1, 0, {4, 0, 0, 0}, kDLFloat, 32, 1, 99, 0, "ValueError", "unknown device type 99"},
    {"device type 0", 0, 0, 1, 0, {4, 0, 0, 0}, kDLFloat, 32, 1, 0, 0, "ValueError", "unknown device type 0"},
    {"device type 5 (a gap in the enum)", 0, 0, 1, 0, {4, 0, 0, 0}, kDLFloat, 32, 1, 5, 0, "ValueError",
     "unknown device type 5"},
    {"ROCm", 0, 0, 1, 0, {4, 0, 0, 0}, kDLFloat, 32, 1, kDLROCM, 0, "NotImplementedError", "rocm:0"},
    {"Vulkan device 3", 0, 0, 1, 0, {4, 0, 0, 0}, kDLFloat, 32, 1, kDLVulkan, 3, "NotImplementedError", "vulkan:3"},
    {"CUDA device -1", 0, 0, 1, 0, {4, 0, 0, 0}, kDLFloat, 32, 1, kDLCUDA, -1, "ValueError", "cuda:-1"},
    {"CUDA host device 1", 0, 0, 1, 0, {4, 0, 0, 0}, kDLFloat, 32, 1, kDLCUDAHost, 1, "ValueError", "cuda_host:1"},
    {"OpenCL", 0, 0, 1, 0, {4, 0, 0, 0}, kDLFloat, 32, 1, kDLOpenCL, 0, "NotImplementedError", "opencl:0"},
    {"CPU device_id 1", 0, 0, 1, 0, {4, 0, 0, 0}, kDLFloat, 32, 1, CPU, 1, "ValueError", "cpu:1"},
    {"CPU device_id -1", 0, 0, 1, 0, {4, 0, 0, 0}, kDLFloat, 32, 1, CPU, -1, "ValueError", "cpu:-1"},
    {"2^59 bytes", 0, 0, 1, 0, {(int64_t)1 << 59, 0, 0, 0}, kDLUInt, 8, 1, CPU, 0, "MemoryError", "bytes"},
    {"2^59 bytes in 3-d", 0, 0, 3, 0, {(int64_t)1 << 20, (int64_t)1 << 20, (int64_t)1 << 16, 0}, kDLFloat, 64, 1, CPU, 0,
     "MemoryError", "bytes"},
};

#define N_CASES ((int)(sizeof cases / sizeof cases[0]))
#define PREFIX "dlpx: allocator: "

static DLTensor prototype_of(const struct bad_case *c, int64_t *shape_storage) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  for (int i = 0; i < 4; ++i) shape_storage[i] = c->shape[i];
  t.data = NULL;
  /* Stored bit for bit: a value outside the C++ enum's range may not be converted to it. */
  int32_t device_type = c->device_type;
  memcpy(&t.device.device_type, &device_type, sizeof device_type);
  t.device.device_id = c->device_id;
  t.ndim = c->ndim;
  t.dtype.code = (uint8_t)c->code;
  t.dtype.bits = (uint8_t)c->bits;
  t.dtype.lanes = (uint16_t)c->lanes;
  t.shape = c->null_shape ? NULL : shape_storage;
  t.strides = NULL;
  t.byte_offset = 0;
  return t;
}

/* The sentinel *out must still hold after a failure. */
static DLManagedTensorVersioned sentinel_tensor;

static int call_allocator(const struct bad_case *c, DLManagedTensorVersioned **out, void *ctx,
                          void (*set_error)(void *, const char *, const char *)) {
  int64_t shape[4];
  DLTensor prototype = prototype_of(c, shape);
  *out = &sentinel_tensor;
  return dlpx_exchange_api()->managed_tensor_allocator(c->null_prototype ? NULL : &prototype,
                                                       c->null_out ? NULL : out, ctx, set_error);
}

static void test_every_bad_input_calls_set_error_once(void) {
  for (int i = 0; i < N_CASES; ++i) {
    const struct bad_case *c = &cases[i];
    struct error_record rec;
    memset(&rec, 0, sizeof rec);
    DLManagedTensorVersioned *out = NULL;
    int rc = call_allocator(c, &out, &rec, record_error);
    CHECK(rc == -1, "[%s] returned %d, want -1", c->name, rc);
    CHECK(out == &sentinel_tensor, "[%s] *out was overwritten", c->name);
    if (rc == 0 && out != NULL && out != &sentinel_tensor) out->deleter(out);
    CHECK(rec.calls == 1, "[%s] SetError called %d times, want 1", c->name, rec.calls);
    CHECK(rec.ctx == &rec, "[%s] SetError got error_ctx %p, want %p", c->name, rec.ctx, (void *)&rec);
    CHECK(test_streq(rec.kind, c->kind), "[%s] kind %s, want %s", c->name, rec.kind, c->kind);
    CHECK(test_starts_with(rec.message, PREFIX), "[%s] message \"%s\" does not start with \"" PREFIX "\"", c->name,
          rec.message);
    CHECK(test_contains(rec.message, c->needle), "[%s] message \"%s\" does not name the problem (\"%s\")", c->name,
          rec.message, c->needle);
  }
}

static const struct bad_case *find_case(const char *name) {
  for (int i = 0; i < N_CASES; ++i)
    if (strcmp(cases[i].name, name) == 0) return &cases[i];
  return NULL;
}

static void test_messages_say_exactly_what_is_wrong(void) {
  static const struct {
    const char *case_name;
    const char *message;
  } exact[] = {
      {"NULL prototype", PREFIX "prototype is NULL"},
      {"NULL out", PREFIX "out is NULL"},
      {"ndim -1", PREFIX "ndim = -1 is negative"},
      {"ndim 65", PREFIX "ndim = 65 exceeds the maximum of 64"},
      {"NULL shape with ndim 2", PREFIX "prototype.shape is NULL with ndim = 2"},
      {"negative extent", PREFIX "shape[1] = -3 is negative"},
      {"bits 0", PREFIX "dtype code 2 has bits = 0"},
      {"lanes 0", PREFIX "dtype code 2 has lanes = 0"},
      {"dtype code 19", PREFIX "unknown dtype code 19 (DLPack names 0..=18)"},
      {"fp4 with bits 8", PREFIX "dtype code 17 (float4_e2m1fn) needs bits = 4, got 8"},
      {"unknown device type 99", PREFIX "unknown device type 99 (DLPack names 1..=21)"},
      {"ROCm", PREFIX "allocation on device rocm:0 is not supported (dlpx allocates on cpu, cuda, cuda_host and cuda_managed)"},
      {"OpenCL", PREFIX "allocation on device opencl:0 is not supported (dlpx allocates on cpu, cuda, cuda_host and cuda_managed)"},
      {"CPU device_id 1", PREFIX "device cpu:1 is invalid: device_id must be 0 for host, pinned and managed memory"},
  };
  for (size_t k = 0; k < sizeof exact / sizeof exact[0]; ++k) {
    const struct bad_case *c = find_case(exact[k].case_name);
    CHECK(c != NULL, "no case named %s", exact[k].case_name);
    if (c == NULL) continue;
    struct error_record rec;
    memset(&rec, 0, sizeof rec);
    DLManagedTensorVersioned *out = NULL;
    call_allocator(c, &out, &rec, record_error);
    CHECK(test_streq(rec.message, exact[k].message), "[%s] message \"%s\", want \"%s\"", c->name, rec.message,
          exact[k].message);
  }
}

static void test_null_set_error_leaves_the_error_in_last_error(void) {
  for (int i = 0; i < N_CASES; ++i) {
    const struct bad_case *c = &cases[i];
    dlpx_clear_last_error();
    CHECK(dlpx_last_error() == NULL && dlpx_last_error_kind() == NULL, "[%s] the last error was not cleared", c->name);
    DLManagedTensorVersioned *out = NULL;
    int rc = call_allocator(c, &out, NULL, NULL);
    CHECK(rc == -1, "[%s, SetError NULL] returned %d, want -1", c->name, rc);
    CHECK(out == &sentinel_tensor, "[%s, SetError NULL] *out was overwritten", c->name);
    if (rc == 0 && out != NULL && out != &sentinel_tensor) out->deleter(out);
    const char *kind = dlpx_last_error_kind();
    const char *message = dlpx_last_error();
    CHECK(test_streq(kind, c->kind), "[%s, SetError NULL] last error kind %s, want %s", c->name, test_str(kind),
          c->kind);
    CHECK(test_starts_with(message, PREFIX), "[%s, SetError NULL] last error \"%s\"", c->name, test_str(message));
    CHECK(test_contains(message, c->needle), "[%s, SetError NULL] last error \"%s\" does not contain \"%s\"", c->name,
          test_str(message), c->needle);
  }
}

static void test_a_failure_after_a_success_reports_only_the_failure(void) {
  /* A good allocation between two bad ones neither calls SetError nor disturbs the error slot. */
  int64_t shape[1] = {4};
  DLTensor good = test_prototype(kDLCPU, 0, kDLFloat, 32, 1, shape);
  struct error_record rec;
  memset(&rec, 0, sizeof rec);
  DLManagedTensorVersioned *out = NULL;
  CHECK(dlpx_exchange_api()->managed_tensor_allocator(&good, &out, &rec, record_error) == 0, "good allocation");
  CHECK(rec.calls == 0, "SetError called on success: %s", rec.message);
  if (out != NULL) out->deleter(out);
  good.dtype.bits = 0;
  out = NULL;
  CHECK(dlpx_exchange_api()->managed_tensor_allocator(&good, &out, &rec, record_error) == -1, "bad allocation");
  CHECK(rec.calls == 1 && out == NULL, "one SetError call, out untouched (calls %d)", rec.calls);
}

int main(void) {
  test_every_bad_input_calls_set_error_once();
  test_messages_say_exactly_what_is_wrong();
  test_null_set_error_leaves_the_error_in_last_error();
  test_a_failure_after_a_success_reports_only_the_failure();
  return test_summary();
}

/* dlpx's CPU allocator through the exchange table (dlpx_exchange_api()->managed_tensor_allocator):
 * shapes from 0-d to 64-d, zero-size tensors, every DLPack 1.3 dtype code with packed sub-byte
 * sizes, lanes, alignment, strides, the managed tensor's header fields, and the deleter (run it
 * under AddressSanitizer/LeakSanitizer: every byte of the computed size is written, every tensor
 * freed). Ends with an informational timing of allocate+delete beside malloc+free. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dlpx/dlpx.h"
#include "test_util.h"

/* ---- helpers ---------------------------------------------------------------------------- */


static DLTensor make_prototype(int32_t ndim, int64_t *shape, int code, int bits, int lanes) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = NULL;
  t.device.device_type = kDLCPU;
  t.device.device_id = 0;
  t.ndim = ndim;
  t.dtype.code = (uint8_t)code;
  t.dtype.bits = (uint8_t)bits;
  t.dtype.lanes = (uint16_t)lanes;
  t.shape = shape;
  t.strides = NULL;
  t.byte_offset = 0;
  return t;
}

/* Calls the table's allocator with a recording SetError; returns its result. */
static int allocate(DLTensor *prototype, DLManagedTensorVersioned **out, struct error_record *rec) {
  memset(rec, 0, sizeof *rec);
  return dlpx_exchange_api()->managed_tensor_allocator(prototype, out, rec, record_error);
}

/* Packed bytes per DLPack 1.3: ceil(numel * bits * lanes / 8). */
static unsigned long long packed_bytes(int32_t ndim, const int64_t *shape, DLDataType dtype) {
  unsigned long long numel = 1;
  for (int32_t i = 0; i < ndim; ++i) numel *= (unsigned long long)shape[i];
  unsigned long long bits = numel * dtype.bits * dtype.lanes;
  return (bits + 7) / 8;
}

static unsigned long long expected_bytes(const DLTensor *prototype) {
  return packed_bytes(prototype->ndim, prototype->shape, prototype->dtype);
}

/* Checks everything the allocator promises about `t`, made from `prototype` (whose shape is
 * `shape`, a copy taken before the call), writes and reads back every byte of the computed size,
 * then deletes it. `what` names the case in failure messages. */
static void check_and_delete(const char *what, DLManagedTensorVersioned *m, const DLTensor *prototype,
                             const int64_t *shape) {
  CHECK(m != NULL, "%s: no tensor returned", what);
  if (m == NULL) return;
  const DLTensor *t = &m->dl_tensor;
  CHECK(m->version.major == 1 && m->version.minor == 3, "%s: version %u.%u, want 1.3", what, m->version.major,
        m->version.minor);
  CHECK(m->flags == 0, "%s: flags = %llu, want 0", what, (unsigned long long)m->flags);
  CHECK(m->deleter != NULL, "%s: deleter is NULL", what);
  CHECK(t->byte_offset == 0, "%s: byte_offset = %llu", what, (unsigned long long)t->byte_offset);
  CHECK(t->device.device_type == prototype->device.device_type && t->device.device_id == prototype->device.device_id,
        "%s: device (%d, %d), want (%d, %d)", what, (int)t->device.device_type, t->device.device_id,
        (int)prototype->device.device_type, prototype->device.device_id);
  CHECK(t->ndim == prototype->ndim, "%s: ndim = %d, want %d", what, t->ndim, prototype->ndim);
  CHECK(t->dtype.code == prototype->dtype.code && t->dtype.bits == prototype->dtype.bits &&
            t->dtype.lanes == prototype->dtype.lanes,
        "%s: dtype (%d, %d, %d)", what, t->dtype.code, t->dtype.bits, t->dtype.lanes);
  if (t->ndim > 0) {
    CHECK(t->shape != NULL && t->shape != prototype->shape, "%s: shape must be the tensor's own copy", what);
    CHECK(t->strides != NULL, "%s: strides are NULL with ndim = %d", what, t->ndim);
    CHECK(t->strides != prototype->strides, "%s: strides must be the tensor's own", what);
    if (t->shape != NULL && t->strides != NULL) {
      int shape_ok = 1;
      int strides_ok = 1;
      int64_t stride = 1;
      for (int32_t i = t->ndim - 1; i >= 0; --i) {
        if (t->shape[i] != shape[i]) shape_ok = 0;
        if (t->strides[i] != stride) strides_ok = 0;
        stride *= shape[i] > 1 ? shape[i] : 1;
      }
      CHECK(shape_ok, "%s: shape differs from the prototype's", what);
      CHECK(strides_ok, "%s: strides are not compact row-major", what);
    }
  }
  unsigned long long nbytes = packed_bytes(prototype->ndim, shape, prototype->dtype);
  if (nbytes == 0) {
    CHECK(t->data == NULL, "%s: zero-size tensor has data %p, want NULL", what, t->data);
  } else {
    CHECK(t->data != NULL, "%s: data is NULL for %llu bytes", what, nbytes);
    CHECK(((uintptr_t)t->data % 256) == 0, "%s: data %p is not 256-byte aligned", what, t->data);
    if (t->data != NULL) {
      unsigned char *bytes = (unsigned char *)t->data;
      for (unsigned long long i = 0; i < nbytes; ++i) bytes[i] = (unsigned char)(i * 7 + 3);
      int ok = 1;
      for (unsigned long long i = 0; i < nbytes; ++i) ok &= bytes[i] == (unsigned char)(i * 7 + 3);
      CHECK(ok, "%s: the %llu data bytes do not keep what was written", what, nbytes);
    }
  }
  if (m->deleter != NULL) m->deleter(m);
}

/* Allocates like `prototype`, checks, deletes; SetError must stay silent. */
static void allocate_check_delete(const char *what, DLTensor *prototype) {
  int64_t shape[64];
  for (int32_t i = 0; i < prototype->ndim && i < 64; ++i) shape[i] = prototype->shape[i];
  struct error_record rec;
  DLManagedTensorVersioned *m = NULL;
  int rc = allocate(prototype, &m, &rec);
  CHECK(rc == 0, "%s: allocator returned %d: %s", what, rc, rec.message);
  CHECK(rec.calls == 0, "%s: SetError called %d times on success (%s)", what, rec.calls, rec.message);
  if (rc == 0) check_and_delete(what, m, prototype, shape);
}

/* ---- cases -------------------------------------------------------------------------------- */

static void test_table_has_an_allocator(void) {
  const DLPackExchangeAPI *api = dlpx_exchange_api();
  CHECK(api != NULL && api->managed_tensor_allocator != NULL, "the table or its allocator is NULL");
}

static void test_zero_dim_tensor_holds_one_element(void) {
  DLTensor p = make_prototype(0, NULL, kDLFloat, 64, 1);
  allocate_check_delete("0-d float64, shape NULL", &p);
  int64_t ignored = 5;
  DLTensor q = make_prototype(0, &ignored, kDLInt, 32, 1);
  allocate_check_delete("0-d int32, shape non-NULL", &q);
}

static void test_zero_size_tensors_have_null_data(void) {
  int64_t a[1] = {0};
  DLTensor p = make_prototype(1, a, kDLFloat, 32, 1);
  allocate_check_delete("shape (0,)", &p);
  int64_t b[3] = {3, 0, 5};
  DLTensor q = make_prototype(3, b, kDLFloat, 32, 1);
  allocate_check_delete("shape (3, 0, 5)", &q);
  int64_t c[2] = {0, INT64_MAX};
  DLTensor r = make_prototype(2, c, kDLUInt, 8, 1);
  allocate_check_delete("shape (0, INT64_MAX): zero elements, no overflow", &r);
  int64_t d[1] = {0};
  DLTensor s = make_prototype(1, d, kDLFloat4_e2m1fn, 4, 1);
  allocate_check_delete("fp4 shape (0,)", &s);
}

static void test_one_to_thirty_two_dimensions(void) {
  for (int32_t ndim = 1; ndim <= 32; ++ndim) {
    int64_t shape[32];
    /* 2, 3, 4, 5, then 2 at every fifth axis and 1 elsewhere: at most 7680 elements. */
    for (int32_t i = 0; i < ndim; ++i) shape[i] = i < 4 ? i + 2 : (i % 5 == 0 ? 2 : 1);
    DLTensor p = make_prototype(ndim, shape, kDLFloat, 32, 1);
    char what[64];
    snprintf(what, sizeof what, "%d-d float32", ndim);
    allocate_check_delete(what, &p);
  }
}

static void test_sixty_four_dimensions_is_the_maximum_accepted(void) {
  int64_t shape[64];
  for (int i = 0; i < 64; ++i) shape[i] = (i % 16 == 0) ? 2 : 1;
  DLTensor p = make_prototype(64, shape, kDLInt, 16, 1);
  allocate_check_delete("64-d int16", &p);
}

struct dtype_case {
  int code;
  int bits;
  const char *name;
};

static const struct dtype_case all_dtypes[] = {
    {kDLInt, 8, "int8"},
    {kDLInt, 16, "int16"},
    {kDLInt, 32, "int32"},
    {kDLInt, 64, "int64"},
    {kDLUInt, 8, "uint8"},
    {kDLUInt, 16, "uint16"},
    {kDLUInt, 32, "uint32"},
    {kDLUInt, 64, "uint64"},
    {kDLFloat, 16, "float16"},
    {kDLFloat, 32, "float32"},
    {kDLFloat, 64, "float64"},
    {kDLOpaqueHandle, 64, "handle64"},
    {kDLBfloat, 16, "bfloat16"},
    {kDLComplex, 64, "complex64"},
    {kDLComplex, 128, "complex128"},
    {kDLBool, 8, "bool"},
    {kDLFloat8_e3m4, 8, "float8_e3m4"},
    {kDLFloat8_e4m3, 8, "float8_e4m3"},
    {kDLFloat8_e4m3b11fnuz, 8, "float8_e4m3b11fnuz"},
    {kDLFloat8_e4m3fn, 8, "float8_e4m3fn"},
    {kDLFloat8_e4m3fnuz, 8, "float8_e4m3fnuz"},
    {kDLFloat8_e5m2, 8, "float8_e5m2"},
    {kDLFloat8_e5m2fnuz, 8, "float8_e5m2fnuz"},
    {kDLFloat8_e8m0fnu, 8, "float8_e8m0fnu"},
    {kDLFloat6_e2m3fn, 6, "float6_e2m3fn"},
    {kDLFloat6_e3m2fn, 6, "float6_e3m2fn"},
    {kDLFloat4_e2m1fn, 4, "float4_e2m1fn"},
};

static void test_every_dtype_code_with_its_bit_width(void) {
  int seen[18] = {0};
  const int n = (int)(sizeof all_dtypes / sizeof all_dtypes[0]);
  for (int i = 0; i < n; ++i) {
    seen[all_dtypes[i].code] = 1;
    const int lanes_list[3] = {1, 2, 3};
    for (int l = 0; l < 3; ++l) {
      int64_t shapes[3][2] = {{3, 1}, {2, 5}, {7, 1}};
      int32_t ndims[3] = {1, 2, 1};
      for (int s = 0; s < 3; ++s) {
        DLTensor p = make_prototype(ndims[s], shapes[s], all_dtypes[i].code, all_dtypes[i].bits, lanes_list[l]);
        char what[96];
        snprintf(what, sizeof what, "%s lanes %d shape #%d", all_dtypes[i].name, lanes_list[l], s);
        allocate_check_delete(what, &p);
      }
    }
  }
  int all = 1;
  for (int c = 0; c < 18; ++c) all &= seen[c];
  CHECK(all, "the dtype list misses a DLPack 1.3 code");
}

static void test_sub_byte_types_are_packed(void) {
  /* The expected sizes, spelled out: 3 fp4 -> 12 bits -> 2 bytes; 4 fp6 -> 24 bits -> 3 bytes;
   * 5 fp6 -> 30 bits -> 4 bytes; 3 fp4 x 3 lanes -> 36 bits -> 5 bytes; 1 fp4 -> 1 byte. Every
   * byte of each is written by check_and_delete (an overrun past the block is ASan's to see). */
  int64_t three[1] = {3};
  DLTensor fp4 = make_prototype(1, three, kDLFloat4_e2m1fn, 4, 1);
  CHECK(expected_bytes(&fp4) == 2, "3 fp4 elements need 2 bytes");
  allocate_check_delete("3 x float4_e2m1fn", &fp4);
  int64_t four[1] = {4};
  DLTensor fp6 = make_prototype(1, four, kDLFloat6_e2m3fn, 6, 1);
  CHECK(expected_bytes(&fp6) == 3, "4 fp6 elements need 3 bytes");
  allocate_check_delete("4 x float6_e2m3fn", &fp6);
  int64_t five[1] = {5};
  DLTensor fp6b = make_prototype(1, five, kDLFloat6_e3m2fn, 6, 1);
  CHECK(expected_bytes(&fp6b) == 4, "5 fp6 elements need 4 bytes");
  allocate_check_delete("5 x float6_e3m2fn", &fp6b);
  DLTensor fp4x3 = make_prototype(1, three, kDLFloat4_e2m1fn, 4, 3);
  CHECK(expected_bytes(&fp4x3) == 5, "3 fp4x3 elements need 5 bytes");
  allocate_check_delete("3 x float4_e2m1fn x3 lanes", &fp4x3);
  DLTensor fp4_scalar = make_prototype(0, NULL, kDLFloat4_e2m1fn, 4, 1);
  CHECK(expected_bytes(&fp4_scalar) == 1, "one fp4 element needs 1 byte");
  allocate_check_delete("0-d float4_e2m1fn", &fp4_scalar);
}

static void test_lanes_multiply_the_element_size(void) {
  int64_t shape[2] = {2, 3};
  DLTensor p = make_prototype(2, shape, kDLFloat, 32, 4);
  CHECK(expected_bytes(&p) == 96, "float32x4 (2, 3) is 96 bytes");
  allocate_check_delete("float32x4 (2, 3)", &p);
  DLTensor q = make_prototype(2, shape, kDLInt, 8, 65535);
  allocate_check_delete("int8 x 65535 lanes (2, 3)", &q);
}

static void test_large_tensors_are_aligned_and_writable(void) {
  int64_t shape[2] = {1000, 100}; /* 400 kB: past any small-block cache */
  DLTensor p = make_prototype(2, shape, kDLFloat, 32, 1);
  allocate_check_delete("float32 (1000, 100)", &p);
  int64_t odd[3] = {17, 33, 129};
  DLTensor q = make_prototype(3, odd, kDLComplex, 128, 1);
  allocate_check_delete("complex128 (17, 33, 129)", &q);
}

static void test_prototype_strides_data_and_offset_are_ignored(void) {
  int64_t shape[3] = {2, 3, 4};
  int64_t junk_strides[3] = {1, 2, -7};
  DLTensor p = make_prototype(3, shape, kDLFloat, 32, 1);
  p.strides = junk_strides;
  p.data = (void *)(uintptr_t)0x1234;
  p.byte_offset = 64;
  struct error_record rec;
  DLManagedTensorVersioned *m = NULL;
  int rc = allocate(&p, &m, &rec);
  CHECK(rc == 0 && m != NULL, "allocation with junk strides failed: %s", rec.message);
  if (m == NULL) return;
  CHECK(m->dl_tensor.data != p.data, "the prototype's data pointer was copied");
  /* The result owns its shape: changing the prototype afterwards changes nothing. */
  int64_t saved[3] = {2, 3, 4};
  shape[0] = 99;
  check_and_delete("junk prototype strides", m, &p, saved);
  CHECK(junk_strides[0] == 1 && junk_strides[1] == 2 && junk_strides[2] == -7, "the prototype's strides were written");
}

static void test_set_error_is_never_called_on_success(void) {
  int64_t shape[1] = {16};
  DLTensor p = make_prototype(1, shape, kDLFloat, 32, 1);
  int calls = 0;
  for (int i = 0; i < 100; ++i) {
    struct error_record rec;
    DLManagedTensorVersioned *m = NULL;
    if (allocate(&p, &m, &rec) == 0 && m != NULL) m->deleter(m);
    calls += rec.calls;
  }
  CHECK(calls == 0, "SetError was called %d times over 100 successful allocations", calls);
  /* A NULL SetError is legal on success too. */
  DLManagedTensorVersioned *m = NULL;
  CHECK(dlpx_exchange_api()->managed_tensor_allocator(&p, &m, NULL, NULL) == 0 && m != NULL,
        "allocation with SetError == NULL failed");
  if (m != NULL) m->deleter(m);
}

static void *delete_on_this_thread(void *arg) {
  DLManagedTensorVersioned **tensors = (DLManagedTensorVersioned **)arg;
  for (int i = 0; tensors[i] != NULL; ++i) tensors[i]->deleter(tensors[i]);
  return NULL;
}

struct allocate_job {
  int64_t elements;
  DLManagedTensorVersioned *result;
};

static void *allocate_on_this_thread(void *arg) {
  struct allocate_job *job = (struct allocate_job *)arg;
  int64_t shape[1] = {job->elements};
  DLTensor p = make_prototype(1, shape, kDLUInt, 8, 1);
  struct error_record rec;
  if (allocate(&p, &job->result, &rec) == 0) memset(job->result->dl_tensor.data, 0xAB, (size_t)job->elements);
  return NULL;
}

static void test_deleter_runs_on_another_thread(void) {
  /* Tensors of several size classes (and one past the cache) allocated here, deleted there. */
  DLManagedTensorVersioned *tensors[9] = {NULL};
  const int64_t sizes[8] = {1, 16, 300, 4096, 5000, 70000, 1 << 20, 0};
  for (int i = 0; i < 8; ++i) {
    int64_t shape[1] = {sizes[i]};
    DLTensor p = make_prototype(1, shape, kDLUInt, 8, 1);
    struct error_record rec;
    CHECK(allocate(&p, &tensors[i], &rec) == 0, "allocating %lld bytes: %s", (long long)sizes[i], rec.message);
    if (tensors[i] != NULL && tensors[i]->dl_tensor.data != NULL)
      memset(tensors[i]->dl_tensor.data, 0x5A, (size_t)sizes[i]);
  }
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, delete_on_this_thread, tensors) == 0, "pthread_create");
  pthread_join(thread, NULL);

  /* And the other way: allocated on a thread that then exits, deleted here. */
  struct allocate_job job = {300, NULL};
  CHECK(pthread_create(&thread, NULL, allocate_on_this_thread, &job) == 0, "pthread_create");
  pthread_join(thread, NULL);
  CHECK(job.result != NULL, "allocation on a worker thread failed");
  if (job.result != NULL) {
    const unsigned char *data = (const unsigned char *)job.result->dl_tensor.data;
    CHECK(data[0] == 0xAB && data[299] == 0xAB, "data written on the dead thread is intact");
    job.result->deleter(job.result);
  }
}

static void test_freed_blocks_are_reused_safely(void) {
  /* Allocate, fill, delete, re-allocate the same shape many times: stale contents are allowed,
   * but each new tensor must be fully writable and distinct from every live one. */
  int64_t shape[1] = {100};
  DLTensor p = make_prototype(1, shape, kDLFloat, 32, 1);
  DLManagedTensorVersioned *live[40] = {NULL};
  int distinct = 1;
  for (int i = 0; i < 40; ++i) {
    struct error_record rec;
    if (allocate(&p, &live[i], &rec) != 0) continue;
    memset(live[i]->dl_tensor.data, i, 400);
    for (int j = 0; j < i; ++j) distinct &= live[j] == NULL || live[j]->dl_tensor.data != live[i]->dl_tensor.data;
  }
  CHECK(distinct, "two live tensors share data");
  int intact = 1;
  for (int i = 0; i < 40; ++i) {
    if (live[i] == NULL) continue;
    const unsigned char *d = (const unsigned char *)live[i]->dl_tensor.data;
    intact &= d[0] == (unsigned char)i && d[399] == (unsigned char)i;
    live[i]->deleter(live[i]);
  }
  CHECK(intact, "a live tensor's contents changed while others were allocated");
}

/* ---- timing (informational, never asserted) ---------------------------------------------- */

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void *volatile sink;

static void time_allocate_delete_against_malloc(void) {
  const int iterations = 1000000;
  int64_t shape[1] = {16};
  DLTensor p = make_prototype(1, shape, kDLFloat, 32, 1);
  DLPackManagedTensorAllocator alloc = dlpx_exchange_api()->managed_tensor_allocator;
  int failures = 0;
  for (int i = 0; i < 1000; ++i) { /* warm-up */
    DLManagedTensorVersioned *m = NULL;
    if (alloc(&p, &m, NULL, NULL) == 0) m->deleter(m);
  }
  double t0 = now_ns();
  for (int i = 0; i < iterations; ++i) {
    DLManagedTensorVersioned *m = NULL;
    if (alloc(&p, &m, NULL, NULL) != 0) {
      ++failures;
      continue;
    }
    sink = m->dl_tensor.data;
    m->deleter(m);
  }
  double t1 = now_ns();
  for (int i = 0; i < iterations; ++i) {
    void *b = malloc(64);
    sink = b;
    free(b);
  }
  double t2 = now_ns();
  CHECK(failures == 0, "%d allocations failed during timing", failures);
  printf("timing: float32[16] allocate+delete: %.1f ns/op; malloc(64)+free: %.1f ns/op (%d iterations)\n",
         (t1 - t0) / iterations, (t2 - t1) / iterations, iterations);
}

int main(void) {
  test_table_has_an_allocator();
  test_zero_dim_tensor_holds_one_element();
  test_zero_size_tensors_have_null_data();
  test_one_to_thirty_two_dimensions();
  test_sixty_four_dimensions_is_the_maximum_accepted();
  test_every_dtype_code_with_its_bit_width();
  test_sub_byte_types_are_packed();
  test_lanes_multiply_the_element_size();
  test_large_tensors_are_aligned_and_writable();
  test_prototype_strides_data_and_offset_are_ignored();
  test_set_error_is_never_called_on_success();
  test_deleter_runs_on_another_thread();
  test_freed_blocks_are_reused_safely();
  time_allocate_delete_against_malloc();
  return test_summary();
}

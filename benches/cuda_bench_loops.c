/*
 * The timed loops of benches/cuda_bench.py, in C: allocator + deleter and current_work_stream
 * through any producer's DLPackExchangeAPI, called as a kernel library would call them. Built
 * as a plain shared library (no Python headers, no libdlpx: only the table's function
 * pointers), so the Python driver can load it with ctypes on any machine — including the GPU
 * machine, whose Python may have no development files. ctypes.PyDLL keeps the GIL held.
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime under -std=c11 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "dlpx/dlpack.h"

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

struct failure {
  char *text;
  size_t size;
};

static void record_failure(void *ctx, const char *kind, const char *message) {
  struct failure *f = (struct failure *)ctx;
  snprintf(f->text, f->size, "%s: %s", kind, message);
}

/* ns per allocator + deleter of `numel` float32 on the device, after one untimed warm-up call;
 * -1 with the producer's reason in `why` when it refuses (the loop stops at the first failure). */
__attribute__((visibility("default"))) double dlpx_bench_alloc(const DLPackExchangeAPI *api, int32_t device_type,
                                                              int32_t device_id, int64_t numel, long iterations,
                                                              char *why, size_t why_size) {
  int64_t shape[1];
  shape[0] = numel;
  DLTensor proto;
  memset(&proto, 0, sizeof proto);
  proto.device.device_type = (DLDeviceType)device_type;
  proto.device.device_id = device_id;
  proto.ndim = 1;
  proto.dtype.code = kDLFloat;
  proto.dtype.bits = 32;
  proto.dtype.lanes = 1;
  proto.shape = shape;
  struct failure failure = {why, why_size};
  DLManagedTensorVersioned *out = NULL;
  if (api->managed_tensor_allocator(&proto, &out, &failure, record_failure) != 0) return -1;
  out->deleter(out);
  double t0 = now_ns();
  for (long i = 0; i < iterations; ++i) {
    if (api->managed_tensor_allocator(&proto, &out, &failure, record_failure) != 0) return -1;
    out->deleter(out);
  }
  return (now_ns() - t0) / (double)iterations;
}

/* ns per current_work_stream(device); -1 when it fails. */
__attribute__((visibility("default"))) double dlpx_bench_stream(const DLPackExchangeAPI *api, int32_t device_type,
                                                               int32_t device_id, long iterations) {
  void *stream = NULL;
  if (api->current_work_stream((DLDeviceType)device_type, device_id, &stream) != 0) return -1;
  uintptr_t sink = 0;
  double t0 = now_ns();
  for (long i = 0; i < iterations; ++i) {
    api->current_work_stream((DLDeviceType)device_type, device_id, &stream);
    sink += (uintptr_t)stream;
  }
  double ns = (now_ns() - t0) / (double)iterations;
  if (sink == 42) puts(""); /* keeps the loop's results alive */
  return ns;
}

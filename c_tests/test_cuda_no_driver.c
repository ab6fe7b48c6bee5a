/* Without a CUDA driver, every CUDA allocation fails cleanly: -1, SetError called once with
 * RuntimeError "CUDA driver not found", nothing leaked, no panic and no abort. On a machine with
 * a driver this test has nothing to observe: it exits TEST_SKIPPED, which ctest reports as skipped. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "dlpx/dlpx.h"
#include "test_util.h"

static void expect_failure(DLDeviceType type, int32_t id, int64_t extent, const char *kind, const char *text) {
  int64_t shape[1];
  shape[0] = extent;
  DLTensor proto = test_prototype(type, id, kDLFloat, 32, 1, shape);
  struct error_record r;
  memset(&r, 0, sizeof r);
  DLManagedTensorVersioned *out = NULL;
  int rc = dlpx_exchange_api()->managed_tensor_allocator(&proto, &out, &r, record_error);
  CHECK(rc == -1 && out == NULL, "device type %d id %d extent %lld fails", (int)type, id, (long long)extent);
  CHECK(r.calls == 1, "SetError called once (%d)", r.calls);
  CHECK(test_streq(r.kind, kind), "kind %s, expected %s", r.kind, kind);
  CHECK(test_starts_with(r.message, "dlpx: allocator: ") && test_contains(r.message, text), "message: %s", r.message);
  /* the same through dlpx_last_error with a NULL SetError */
  rc = dlpx_exchange_api()->managed_tensor_allocator(&proto, &out, NULL, NULL);
  CHECK(rc == -1 && test_streq(dlpx_last_error_kind(), kind) && test_contains(dlpx_last_error(), text),
        "NULL SetError: %s", test_str(dlpx_last_error()));
}

int main(void) {
  void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!driver) driver = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
  if (driver) {
    dlclose(driver);
    return test_skip("a CUDA driver is present, so its absence cannot be observed here");
  }
  const char *missing = "CUDA driver not found";
  expect_failure(kDLCUDA, 0, 16, "RuntimeError", missing);
  expect_failure(kDLCUDA, 1, 16, "RuntimeError", missing);
  expect_failure(kDLCUDA, 0, 0, "RuntimeError", missing); /* zero-size: the device must still exist */
  expect_failure(kDLCUDAHost, 0, 16, "RuntimeError", missing);
  expect_failure(kDLCUDAManaged, 0, 16, "RuntimeError", missing);
  expect_failure(kDLCUDA, -1, 16, "ValueError", "cuda:-1");
  expect_failure(kDLCUDAHost, 2, 16, "ValueError", "cuda_host:2");
  DlpxCudaMemoryStats stats;
  CHECK(dlpx_cuda_memory_stats(0, &stats) == -1 && test_contains(dlpx_last_error(), "dlpx: cuda_memory_stats: CUDA driver not found"),
        "memory_stats: %s", test_str(dlpx_last_error()));
  CHECK(dlpx_cuda_empty_cache() == -1 && test_contains(dlpx_last_error(), missing), "empty_cache: %s",
        test_str(dlpx_last_error()));
  /* the CPU keeps working after CUDA failures */
  int64_t shape[1] = {4};
  DLTensor proto = test_prototype(kDLCPU, 0, kDLFloat, 32, 1, shape);
  DLManagedTensorVersioned *out = NULL;
  CHECK(dlpx_exchange_api()->managed_tensor_allocator(&proto, &out, NULL, NULL) == 0 && out, "cpu allocation");
  if (out) out->deleter(out);
  return test_summary();
}

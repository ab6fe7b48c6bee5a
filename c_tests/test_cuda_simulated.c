/* dlpx's CUDA allocator and streams through the C API, against the simulated driver
 * (c_tests/sim_cuda), so machines without a GPU check what dlpx asks of a driver: memory of each
 * kind on the right device and stream, contexts pushed and popped in pairs, frees ordered after
 * the streams that used the memory, clean errors (including codes no CUDA version defines), and
 * deleters on other threads. Under ASan/LSan this also shows dlpx's own leaks and overflows. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dlpx/dlpx.h"
#define SIM_CUDA_DECLARE_DRIVER
#include "sim_cuda/sim_cuda.h"
#include "test_util.h"

static DLTensor prototype(DLDeviceType type, int32_t id, int64_t *shape, int32_t ndim) {
  DLTensor proto = test_prototype(type, id, kDLFloat, 32, ndim, shape);
  return proto;
}

static DLManagedTensorVersioned *allocate(DLDeviceType type, int32_t id, int64_t extent, struct error_record *r) {
  int64_t shape[2];
  shape[0] = extent;
  shape[1] = 4;
  DLTensor proto = prototype(type, id, shape, 2);
  DLManagedTensorVersioned *out = NULL;
  int rc = dlpx_exchange_api()->managed_tensor_allocator(&proto, &out, r, record_error);
  CHECK((rc == 0) == (out != NULL), "rc %d agrees with out %p", rc, (void *)out);
  return out;
}

static void release(DLManagedTensorVersioned *t) {
  if (t != NULL) t->deleter(t);
}

static void each_kind_lands_where_asked(void) {
  static const struct {
    DLDeviceType type;
    int32_t id;
    int kind;
  } cases[] = {{kDLCUDA, 0, SIM_CUDA_DEVICE}, {kDLCUDA, 1, SIM_CUDA_DEVICE}, {kDLCUDAHost, 0, SIM_CUDA_HOST},
               {kDLCUDAManaged, 0, SIM_CUDA_MANAGED}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    struct error_record r;
    memset(&r, 0, sizeof r);
    long before = sim_cuda_live(cases[i].kind, -1);
    DLManagedTensorVersioned *t = allocate(cases[i].type, cases[i].id, 8, &r);
    CHECK(t != NULL && r.calls == 0, "case %zu allocates (%s)", i, r.message);
    if (t == NULL) continue;
    const DLTensor *dl = &t->dl_tensor;
    CHECK(dl->device.device_type == cases[i].type && dl->device.device_id == cases[i].id, "case %zu device", i);
    CHECK(dl->strides[0] == 4 && dl->strides[1] == 1 && dl->byte_offset == 0, "case %zu compact", i);
    CHECK((uintptr_t)dl->data % 256 == 0, "case %zu aligned: %p", i, dl->data);
    CHECK(sim_cuda_alloc_device(dl->data) == (cases[i].kind == SIM_CUDA_DEVICE ? cases[i].id : 0),
          "case %zu on its device (%d)", i, sim_cuda_alloc_device(dl->data));
    CHECK(sim_cuda_context_depth() == 0, "case %zu: contexts popped", i);
    if (cases[i].kind != SIM_CUDA_HOST || before == 0) {
      CHECK(sim_cuda_live(cases[i].kind, -1) == before + 1, "case %zu: one allocation more", i);
    }
    release(t);
    long after = sim_cuda_live(cases[i].kind, -1);
    /* pinned blocks go back to dlpx's cache, the others to the driver */
    CHECK(cases[i].kind == SIM_CUDA_HOST ? after >= before : after == before, "case %zu freed: %ld -> %ld", i, before, after);
    CHECK(sim_cuda_context_depth() == 0, "case %zu: contexts popped after the deleter", i);
  }
}

static void expect_error(DLDeviceType type, int32_t id, int64_t extent, const char *kind, const char *text) {
  struct error_record r;
  memset(&r, 0, sizeof r);
  DLManagedTensorVersioned *t = allocate(type, id, extent, &r);
  CHECK(t == NULL && r.calls == 1, "%s: fails once (%d calls)", text, r.calls);
  CHECK(test_streq(r.kind, kind) && test_contains(r.message, text), "%s: got %s %s", text, r.kind, r.message);
  CHECK(sim_cuda_context_depth() == 0, "%s: contexts popped", text);
  release(t);
}

static void errors_are_clear(void) {
  expect_error(kDLCUDA, 2, 8, "ValueError", "device cuda:2 does not exist: this machine has 2 CUDA device(s)");
  expect_error(kDLCUDA, 0, (int64_t)1 << 40, "MemoryError", "out of memory allocating 17592186044416 bytes on CUDA device 0");
  sim_cuda_fail("cuMemAllocFromPoolAsync", 987654, 1);
  expect_error(kDLCUDA, 0, 8, "RuntimeError", "CUDA error 987654 (unknown to this driver)");
  sim_cuda_fail("cuMemAllocFromPoolAsync", 1, 1);
  expect_error(kDLCUDA, 0, 8, "RuntimeError", "CUDA_ERROR_INVALID_VALUE (1)");
  sim_cuda_fail("cuCtxPushCurrent_v2", 201, 1);
  expect_error(kDLCUDA, 1, 8, "RuntimeError", "cuCtxPushCurrent failed: CUDA_ERROR_INVALID_CONTEXT (201)");
  sim_cuda_fail("cuMemAllocManaged", 2, 1);
  expect_error(kDLCUDAManaged, 0, 8, "MemoryError", "out of memory allocating 128 bytes of managed memory");
  /* A deleter cannot fail to its caller: the reason goes to dlpx_last_error() */
  struct error_record r;
  memset(&r, 0, sizeof r);
  DLManagedTensorVersioned *t = allocate(kDLCUDA, 0, 8, &r);
  CUdeviceptr kept = (CUdeviceptr)(uintptr_t)t->dl_tensor.data;
  sim_cuda_fail("cuMemFreeAsync", 700, 1);
  dlpx_clear_last_error();
  release(t);
  CHECK(test_contains(dlpx_last_error(), "cuMemFreeAsync failed: CUDA_ERROR_ILLEGAL_ADDRESS (700)"), "deleter error: %s",
        test_str(dlpx_last_error()));
  CHECK(sim_cuda_context_depth() == 0, "contexts popped after a failed free");
  /* the driver refused that free, so the memory is still there: give it back by hand */
  CUcontext ctx = NULL;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS && cuCtxPushCurrent_v2(ctx) == CUDA_SUCCESS, "push");
  CHECK(cuMemFree_v2(kept) == CUDA_SUCCESS, "the refused block frees");
  CHECK(cuCtxPopCurrent_v2(NULL) == CUDA_SUCCESS && cuDevicePrimaryCtxRelease_v2(0) == CUDA_SUCCESS, "pop");
}

static void streams_order_allocation_and_free(void) {
  void *s = sim_cuda_stream_create(0);
  void *consumer = sim_cuda_stream_create(0);
  void *previous = (void *)0x77;
  CHECK(dlpx_set_current_stream(kDLCUDA, 0, s, &previous) == 0 && previous == NULL, "set the stream");
  void *current = NULL;
  CHECK(dlpx_exchange_api()->current_work_stream(kDLCUDA, 0, &current) == 0 && current == s, "current_work_stream");
  CHECK(dlpx_exchange_api()->current_work_stream(kDLCUDA, 1, &current) == 0 && current == NULL, "other device");
  struct error_record r;
  memset(&r, 0, sizeof r);
  DLManagedTensorVersioned *t = allocate(kDLCUDA, 0, 8, &r);
  CHECK(t != NULL && sim_cuda_alloc_stream(t->dl_tensor.data) == s, "allocated on the current stream");
  CHECK(dlpx_set_current_stream(kDLCUDA, 0, NULL, NULL) == 0, "restore");
  /* a consumer works on another stream; the free waits for it */
  CHECK(dlpx_record_stream(t, 0, consumer) == 0, "record_stream");
  CHECK(dlpx_record_stream(t, 0, consumer) == 0, "record_stream twice is one use");
  CHECK(dlpx_record_stream(t, 0, s) == 0, "the allocation stream itself needs nothing");
  long waits = sim_cuda_calls("cuStreamWaitEvent"), frees_waiting = sim_cuda_frees_waiting();
  release(t);
  CHECK(sim_cuda_waits(s, consumer) == 1, "the free waited for the consumer (%ld)", sim_cuda_waits(s, consumer));
  CHECK(sim_cuda_calls("cuStreamWaitEvent") == waits + 1, "one wait only");
  CHECK(sim_cuda_last_free_stream() == s && sim_cuda_frees_waiting() == frees_waiting + 1, "freed on its stream after the wait");
  CHECK(dlpx_record_stream(NULL, 0, s) == -1 && test_contains(dlpx_last_error(), "tensor is NULL"), "NULL tensor");
  {
    DLManagedTensorVersioned *u = allocate(kDLCUDA, 0, 64, &r);
    CHECK(dlpx_record_stream(u, 64, consumer) == -1 && test_contains(dlpx_last_error(), "cuda:64 does not exist"),
          "a stream on a device that does not exist: %s", test_str(dlpx_last_error()));
    CHECK(dlpx_record_stream(u, -1, consumer) == -1, "a negative device");
    release(u);
  }
  sim_cuda_stream_destroy(s);
  sim_cuda_stream_destroy(consumer);
}

static void pinned_reuse_waits_for_recorded_work(void) {
  void *s = sim_cuda_stream_create(0);
  struct error_record r;
  memset(&r, 0, sizeof r);
  DLManagedTensorVersioned *t = allocate(kDLCUDAHost, 0, 3000, &r);
  void *address = t->dl_tensor.data;
  CHECK(dlpx_record_stream(t, 0, s) == 0, "record a use of the pinned block");
  sim_cuda_hold(s);
  release(t);
  DLManagedTensorVersioned *second = allocate(kDLCUDAHost, 0, 3000, &r);
  CHECK(second->dl_tensor.data != address, "not reused while its work runs");
  sim_cuda_release(s);
  DLManagedTensorVersioned *third = allocate(kDLCUDAHost, 0, 3000, &r);
  CHECK(third->dl_tensor.data == address, "reused once the work is done");
  release(second);
  release(third);
  CHECK(dlpx_cuda_empty_cache() == 0, "empty_cache: %s", test_str(dlpx_last_error()));
  CHECK(sim_cuda_live(SIM_CUDA_HOST, -1) == 0, "pinned blocks given back (%ld)", sim_cuda_live(SIM_CUDA_HOST, -1));
  sim_cuda_stream_destroy(s);
}

static void pinned_out_of_memory_gives_the_cache_back_and_retries(void) {
  struct error_record r;
  memset(&r, 0, sizeof r);
  release(allocate(kDLCUDAHost, 0, 3000, &r)); /* a 64 KiB block, kept for reuse */
  CHECK(sim_cuda_live(SIM_CUDA_HOST, -1) == 1, "the block is cached (%ld)", sim_cuda_live(SIM_CUDA_HOST, -1));
  long frees = sim_cuda_calls("cuMemFreeHost");
  sim_cuda_fail("cuMemHostAlloc", 2, 1); /* CUDA_ERROR_OUT_OF_MEMORY, once */
  DLManagedTensorVersioned *t = allocate(kDLCUDAHost, 0, 60000, &r);
  CHECK(t != NULL, "the retry after giving the cache back succeeds: %s", r.message);
  CHECK(sim_cuda_calls("cuMemFreeHost") == frees + 1, "the cached block went back to the driver");
  CHECK(sim_cuda_live(SIM_CUDA_HOST, -1) == 1, "only the new block is live (%ld)", sim_cuda_live(SIM_CUDA_HOST, -1));
  memset(&r, 0, sizeof r);
  sim_cuda_fail("cuMemHostAlloc", 2, 2); /* nothing cached to give back: out of memory it is */
  CHECK(allocate(kDLCUDAHost, 0, 3000, &r) == NULL && strcmp(r.kind, "MemoryError") == 0 &&
            strstr(r.message, "out of memory allocating 65536 bytes of pinned host memory") != NULL,
        "MemoryError: %s: %s", r.kind, r.message);
  sim_cuda_fail("cuMemHostAlloc", 0, 0);
  /* A free that fails while the cache is given back leaves the retry its chance. */
  release(allocate(kDLCUDAHost, 0, 3000, &r));
  sim_cuda_fail("cuMemFreeHost", 700, 1);
  sim_cuda_fail("cuMemHostAlloc", 2, 1);
  memset(&r, 0, sizeof r);
  DLManagedTensorVersioned *u = allocate(kDLCUDAHost, 0, 30000, &r);
  CHECK(u != NULL, "retried after a failed free: %s: %s", r.kind, r.message);
  release(u);
  release(t);
  CHECK(dlpx_cuda_empty_cache() == 0, "empty_cache: %s", test_str(dlpx_last_error()));
}

#define THREADS 8
#define ROUNDS 300

static void *churn(void *arg) {
  int index = (int)(intptr_t)arg;
  struct error_record r;
  for (int i = 0; i < ROUNDS; ++i) {
    memset(&r, 0, sizeof r);
    DLDeviceType type = (i % 3 == 0) ? kDLCUDAHost : kDLCUDA;
    DLManagedTensorVersioned *t = allocate(type, type == kDLCUDA ? (index + i) % 2 : 0, 1 + (i * 37) % 4096, &r);
    CHECK(t != NULL, "thread %d round %d: %s", index, i, r.message);
    release(t);
  }
  CHECK(sim_cuda_context_depth() == 0, "thread %d: contexts popped", index);
  return NULL;
}

static void threads_share_the_allocator(void) {
  pthread_t threads[THREADS];
  long device_before = sim_cuda_live(SIM_CUDA_DEVICE, -1);
  for (int i = 0; i < THREADS; ++i) pthread_create(&threads[i], NULL, churn, (void *)(intptr_t)i);
  for (int i = 0; i < THREADS; ++i) pthread_join(threads[i], NULL);
  CHECK(sim_cuda_live(SIM_CUDA_DEVICE, -1) == device_before, "no device memory left behind");
}

static void *free_elsewhere(void *arg) {
  release((DLManagedTensorVersioned *)arg);
  CHECK(sim_cuda_context_depth() == 0, "the deleter's thread has no context left pushed");
  return NULL;
}

static void a_deleter_runs_on_another_thread(void) {
  struct error_record r;
  memset(&r, 0, sizeof r);
  DLManagedTensorVersioned *t = allocate(kDLCUDA, 1, 64, &r);
  long before = sim_cuda_live(SIM_CUDA_DEVICE, 1);
  pthread_t thread;
  pthread_create(&thread, NULL, free_elsewhere, t);
  pthread_join(thread, NULL);
  CHECK(sim_cuda_live(SIM_CUDA_DEVICE, 1) == before - 1, "freed from the other thread");
}

int main(void) {
  sim_cuda_reset_counts();
  each_kind_lands_where_asked();
  errors_are_clear();
  streams_order_allocation_and_free();
  pinned_reuse_waits_for_recorded_work();
  pinned_out_of_memory_gives_the_cache_back_and_retries();
  threads_share_the_allocator();
  a_deleter_runs_on_another_thread();
  CHECK(sim_cuda_calls("cuCtxSynchronize") == 0, "never a device-wide synchronisation");
  CHECK(sim_cuda_misuses() == 0, "no driver misuse (%ld; see the sim_cuda: lines above)", sim_cuda_misuses());
  CHECK(sim_cuda_pool_count() == 2, "one dlpx pool per device used (%d)", sim_cuda_pool_count());
  CHECK(sim_cuda_live(SIM_CUDA_DEVICE, -1) == 0, "all device memory freed (%ld)", sim_cuda_live(SIM_CUDA_DEVICE, -1));
  CHECK(sim_cuda_live(SIM_CUDA_MANAGED, -1) == 0, "all managed memory freed");
  return test_summary();
}

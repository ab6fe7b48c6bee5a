/* Self-test of the simulated CUDA driver: every driver function's success and error cases, the
 * thread-local context stack, hold/release, wait accounting, stream order (which reuses of memory
 * it reports), fail injection and error names.
 * argv[1] names the configuration the environment was set up for (ctest runs one process per
 * configuration, since the simulator reads its environment once): "default" (2 devices, pools),
 * "nopools" (SIM_CUDA_NO_POOLS=1, 1 device of 4096 bytes, driver 11020), "nodevice" (0 devices). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SIM_CUDA_DECLARE_DRIVER
#include "sim_cuda/sim_cuda.h"
#include "test_util.h"

/* EXPECT(call, code): the call returns `code`. */
#define EXPECT(call, code)                                                          \
  do {                                                                              \
    int got_ = (int)(call);                                                         \
    CHECK(got_ == (int)(code), "%s returned %d, expected %d", #call, got_, (int)(code)); \
  } while (0)

static CUcontext ctx0, ctx1;

/* The library loaded by name (as dlpx loads it) is the very instance linked into this test. */
static void test_loading(void) {
  const char *names[2] = {"libcuda.so", "libcuda.so.1"};
  for (int i = 0; i < 2; i++) {
    void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    CHECK(lib != NULL, "dlopen(%s): %s", names[i], dlerror());
    if (lib == NULL) continue;
    void *init = dlsym(lib, "cuInit");
    void *calls = dlsym(lib, "sim_cuda_calls");
    CHECK(init == (void *)&cuInit && calls == (void *)&sim_cuda_calls, "%s resolves to the linked instance", names[i]);
    CHECK(dlsym(lib, "need_ctx") == NULL && dlsym(lib, "g_lock") == NULL, "internals are hidden");
    dlclose(lib);
  }
}

static void test_before_init(void) {
  int n = -1;
  EXPECT(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT(cuMemAlloc_v2(NULL, 16), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT(cuCtxPopCurrent_v2(NULL), CUDA_ERROR_NOT_INITIALIZED);
  const char *name = NULL;
  EXPECT(cuGetErrorName(CUDA_ERROR_NOT_INITIALIZED, &name), CUDA_SUCCESS);
  CHECK(test_streq(name, "CUDA_ERROR_NOT_INITIALIZED"), "name %s", test_str(name));
}

static void test_init_and_devices(void) {
  sim_cuda_fail("cuInit", CUDA_ERROR_UNKNOWN, 1);
  EXPECT(cuInit(0), CUDA_ERROR_UNKNOWN);
  EXPECT(cuDeviceGetCount(NULL), CUDA_ERROR_NOT_INITIALIZED); /* the injected failure did nothing */
  EXPECT(cuInit(1), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuInit(0), CUDA_SUCCESS);
  EXPECT(cuInit(0), CUDA_SUCCESS);
  int version = 0, count = 0, value = -1;
  EXPECT(cuDriverGetVersion(&version), CUDA_SUCCESS);
  CHECK(version == 12080, "version %d", version);
  EXPECT(cuDriverGetVersion(NULL), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuDeviceGetCount(&count), CUDA_SUCCESS);
  CHECK(count == 2, "count %d", count);
  CUdevice dev = -1;
  EXPECT(cuDeviceGet(&dev, 1), CUDA_SUCCESS);
  CHECK(dev == 1, "device %d", dev);
  EXPECT(cuDeviceGet(&dev, 2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT(cuDeviceGet(&dev, -1), CUDA_ERROR_INVALID_DEVICE);
  EXPECT(cuDeviceGet(NULL, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuDeviceGetAttribute(&value, SIM_CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1), CUDA_SUCCESS);
  CHECK(value == 1, "pools supported %d", value);
  EXPECT(cuDeviceGetAttribute(&value, SIM_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0), CUDA_SUCCESS);
  CHECK(value == 132, "SMs %d", value);
  EXPECT(cuDeviceGetAttribute(&value, 1, 0), CUDA_SUCCESS);
  CHECK(value == 0, "other attribute %d", value);
  EXPECT(cuDeviceGetAttribute(&value, 16, 7), CUDA_ERROR_INVALID_DEVICE);
  EXPECT(cuDeviceGetAttribute(NULL, 16, 0), CUDA_ERROR_INVALID_VALUE);
}

static void test_contexts(void) {
  CUcontext c = NULL;
  int dev = -1;
  EXPECT(cuCtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT(cuCtxPopCurrent_v2(&c), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT(cuCtxGetCurrent(&c), CUDA_SUCCESS);
  CHECK(c == NULL, "no current context");
  EXPECT(cuDevicePrimaryCtxRetain(&ctx0, 0), CUDA_SUCCESS);
  EXPECT(cuDevicePrimaryCtxRetain(&ctx1, 1), CUDA_SUCCESS);
  EXPECT(cuDevicePrimaryCtxRetain(&c, 1), CUDA_SUCCESS);
  CHECK(c == ctx1 && ctx0 != ctx1 && ctx0 != NULL, "one primary context per device");
  CHECK(sim_cuda_retains(0) == 1 && sim_cuda_retains(1) == 2 && sim_cuda_retains(5) == -1, "retains %d %d",
        sim_cuda_retains(0), sim_cuda_retains(1));
  EXPECT(cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS);
  EXPECT(cuDevicePrimaryCtxRetain(&c, 2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT(cuDevicePrimaryCtxRetain(NULL, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuDevicePrimaryCtxRelease_v2(3), CUDA_ERROR_INVALID_DEVICE);
  EXPECT(cuCtxPushCurrent_v2(NULL), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuCtxPushCurrent_v2((CUcontext)&dev), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT(cuCtxPushCurrent_v2(ctx0), CUDA_SUCCESS);
  CHECK(sim_cuda_context_depth() == 1, "depth %d", sim_cuda_context_depth());
  EXPECT(cuCtxGetDevice(&dev), CUDA_SUCCESS);
  CHECK(dev == 0, "device %d", dev);
  EXPECT(cuCtxPushCurrent_v2(ctx1), CUDA_SUCCESS);
  EXPECT(cuCtxGetCurrent(&c), CUDA_SUCCESS);
  CHECK(c == ctx1, "current is ctx1");
  EXPECT(cuCtxGetDevice(&dev), CUDA_SUCCESS);
  CHECK(dev == 1, "device %d", dev);
  EXPECT(cuCtxGetCurrent(NULL), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuCtxPopCurrent_v2(&c), CUDA_SUCCESS);
  CHECK(c == ctx1, "popped ctx1");
  EXPECT(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS);
  EXPECT(cuCtxPopCurrent_v2(NULL), CUDA_ERROR_INVALID_CONTEXT);
  CHECK(sim_cuda_context_depth() == 0, "depth %d", sim_cuda_context_depth());
  /* a released primary context can be neither pushed nor used while still current */
  EXPECT(cuDevicePrimaryCtxRetain(&c, 1), CUDA_SUCCESS);
  EXPECT(cuCtxPushCurrent_v2(ctx1), CUDA_SUCCESS);
  EXPECT(cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS);
  EXPECT(cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS);
  EXPECT(cuDevicePrimaryCtxRelease_v2(1), CUDA_ERROR_INVALID_CONTEXT);
  CUdeviceptr p = 0;
  EXPECT(cuMemAlloc_v2(&p, 16), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT(cuCtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT(cuCtxPushCurrent_v2(ctx1), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS);
  EXPECT(cuDevicePrimaryCtxRetain(&c, 1), CUDA_SUCCESS);
  CHECK(c == ctx1 && sim_cuda_retains(1) == 1, "the same context comes back");
}

/* Two threads with their own stacks, both alive at once, while the main thread has ctx0. */
static pthread_barrier_t barrier;
struct thread_arg {
  CUcontext ctx;
  int device;
};

static void *context_thread(void *p) {
  struct thread_arg *arg = (struct thread_arg *)p;
  CUcontext c = (CUcontext)&c;
  CHECK(sim_cuda_context_depth() == 0, "a new thread starts with no context");
  EXPECT(cuCtxGetCurrent(&c), CUDA_SUCCESS);
  CHECK(c == NULL, "a new thread has no current context");
  EXPECT(cuCtxPushCurrent_v2(arg->ctx), CUDA_SUCCESS);
  EXPECT(cuCtxPushCurrent_v2(arg->ctx), CUDA_SUCCESS);
  pthread_barrier_wait(&barrier); /* both threads have pushed */
  int dev = -1;
  EXPECT(cuCtxGetDevice(&dev), CUDA_SUCCESS);
  CHECK(dev == arg->device && sim_cuda_context_depth() == 2, "thread of device %d sees %d at depth %d", arg->device,
        dev, sim_cuda_context_depth());
  EXPECT(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS);
  pthread_barrier_wait(&barrier); /* both threads have popped once */
  EXPECT(cuCtxGetCurrent(&c), CUDA_SUCCESS);
  CHECK(c == arg->ctx && sim_cuda_context_depth() == 1, "thread of device %d keeps its context", arg->device);
  EXPECT(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS);
  return NULL;
}

/* Many threads allocating, recording and freeing at once: the counts must balance. */
static void *stress_thread(void *p) {
  CUcontext ctx = *(CUcontext *)p;
  for (int i = 0; i < 500; i++) {
    CUdeviceptr d = 0;
    CUevent e = NULL;
    EXPECT(cuCtxPushCurrent_v2(ctx), CUDA_SUCCESS);
    EXPECT(cuMemAllocAsync(&d, 64 + (size_t)i, NULL), CUDA_SUCCESS);
    EXPECT(cuEventCreate(&e, 2), CUDA_SUCCESS);
    EXPECT(cuEventRecord(e, NULL), CUDA_SUCCESS);
    EXPECT(cuStreamWaitEvent(SIM_CU_STREAM_PER_THREAD, e, 0), CUDA_SUCCESS);
    EXPECT(cuMemFreeAsync(d, NULL), CUDA_SUCCESS);
    EXPECT(cuEventDestroy_v2(e), CUDA_SUCCESS);
    EXPECT(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS);
  }
  /* 0x2 is this thread's own default stream: it waited 500 times, whatever the others did */
  CHECK(sim_cuda_waits(SIM_CU_STREAM_PER_THREAD, NULL) == 500, "this thread's waits: %ld",
        sim_cuda_waits(SIM_CU_STREAM_PER_THREAD, NULL));
  return NULL;
}

static void test_threads(void) {
  EXPECT(cuCtxPushCurrent_v2(ctx0), CUDA_SUCCESS);
  pthread_barrier_init(&barrier, NULL, 2);
  struct thread_arg args[2] = {{ctx0, 0}, {ctx1, 1}};
  pthread_t threads[4];
  for (int i = 0; i < 2; i++) pthread_create(&threads[i], NULL, context_thread, &args[i]);
  for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
  pthread_barrier_destroy(&barrier);
  CUcontext c = NULL;
  EXPECT(cuCtxGetCurrent(&c), CUDA_SUCCESS);
  CHECK(c == ctx0 && sim_cuda_context_depth() == 1, "the main thread's stack is its own");
  EXPECT(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS);

  sim_cuda_reset_counts();
  CUcontext ctxs[4] = {ctx0, ctx1, ctx0, ctx1};
  for (int i = 0; i < 4; i++) pthread_create(&threads[i], NULL, stress_thread, &ctxs[i]);
  for (int i = 0; i < 4; i++) pthread_join(threads[i], NULL);
  CHECK(sim_cuda_calls("cuMemAllocAsync") == 2000 && sim_cuda_calls("cuCtxPushCurrent") == 2000, "calls %ld %ld",
        sim_cuda_calls("cuMemAllocAsync"), sim_cuda_calls("cuCtxPushCurrent"));
  CHECK(sim_cuda_live(SIM_CUDA_DEVICE, -1) == 0 && sim_cuda_live_events() == 0, "balanced: %ld allocations, %ld events",
        sim_cuda_live(SIM_CUDA_DEVICE, -1), sim_cuda_live_events());
  CHECK(sim_cuda_waits(SIM_CU_STREAM_PER_THREAD, NULL) == 0, "the main thread's default stream waited %ld times",
        sim_cuda_waits(SIM_CU_STREAM_PER_THREAD, NULL));
  CHECK(sim_cuda_misuses() == 0, "no misuse (%ld)", sim_cuda_misuses());
}

static void test_streams(void) {
  CUstream s = NULL, nb = NULL;
  CUcontext c = NULL;
  long streams = sim_cuda_live_streams();
  EXPECT(cuStreamCreate(&s, 0), CUDA_ERROR_INVALID_CONTEXT);
  CUstream s1 = (CUstream)sim_cuda_stream_create(1);
  CHECK(s1 != NULL && sim_cuda_stream_create(2) == NULL, "sim_cuda_stream_create");
  EXPECT(cuStreamQuery(s1), CUDA_SUCCESS); /* a created stream needs no current context */
  EXPECT(cuStreamQuery(NULL), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT(cuStreamSynchronize(SIM_CU_STREAM_LEGACY), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT(cuStreamGetCtx(s1, &c), CUDA_SUCCESS);
  CHECK(c == ctx1, "s1 is in ctx1");
  EXPECT(cuCtxPushCurrent_v2(ctx0), CUDA_SUCCESS);
  EXPECT(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  EXPECT(cuStreamCreate(&nb, 1), CUDA_SUCCESS);
  EXPECT(cuStreamCreate(&nb, 5), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuStreamCreate(NULL, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK(sim_cuda_live_streams() == streams + 3, "live streams %ld", sim_cuda_live_streams());
  EXPECT(cuStreamGetCtx(s, &c), CUDA_SUCCESS);
  CHECK(c == ctx0, "s is in ctx0");
  EXPECT(cuStreamGetCtx(SIM_CU_STREAM_PER_THREAD, &c), CUDA_SUCCESS);
  CHECK(c == ctx0, "the per-thread stream is the current context's");
  EXPECT(cuStreamGetCtx(s, NULL), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuStreamQuery(NULL), CUDA_SUCCESS);
  EXPECT(cuStreamQuery(SIM_CU_STREAM_LEGACY), CUDA_SUCCESS);
  EXPECT(cuStreamQuery(SIM_CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  EXPECT(cuStreamQuery((CUstream)&c), CUDA_ERROR_INVALID_HANDLE);
  sim_cuda_hold(s);
  EXPECT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  EXPECT(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT(cuStreamQuery(s), CUDA_SUCCESS);
  sim_cuda_hold(NULL);
  EXPECT(cuStreamQuery(SIM_CU_STREAM_LEGACY), CUDA_ERROR_NOT_READY); /* NULL and 0x1 are one stream */
  sim_cuda_release(SIM_CU_STREAM_LEGACY);
  EXPECT(cuStreamQuery(NULL), CUDA_SUCCESS);
  EXPECT(cuStreamDestroy_v2(nb), CUDA_SUCCESS);
  EXPECT(cuStreamDestroy_v2(nb), CUDA_ERROR_INVALID_HANDLE);
  EXPECT(cuStreamQuery(nb), CUDA_ERROR_INVALID_HANDLE);
  EXPECT(cuStreamSynchronize(nb), CUDA_ERROR_INVALID_HANDLE);
  EXPECT(cuStreamDestroy_v2(NULL), CUDA_ERROR_INVALID_HANDLE);
  EXPECT(cuStreamDestroy_v2(SIM_CU_STREAM_PER_THREAD), CUDA_ERROR_INVALID_HANDLE);
  EXPECT(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  sim_cuda_stream_destroy(s1);
  CHECK(sim_cuda_live_streams() == streams, "live streams %ld", sim_cuda_live_streams());
  EXPECT(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS);
}

static void test_events(void) {
  CUevent e = NULL, other = NULL;
  CUstream s = NULL, t = NULL;
  CUstream s1 = (CUstream)sim_cuda_stream_create(1);
  long events = sim_cuda_live_events();
  EXPECT(cuEventCreate(&e, 0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT(cuCtxPushCurrent_v2(ctx0), CUDA_SUCCESS);
  EXPECT(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  EXPECT(cuStreamCreate(&t, 0), CUDA_SUCCESS);
  EXPECT(cuEventCreate(&e, 4), CUDA_ERROR_INVALID_VALUE); /* interprocess needs disable-timing */
  EXPECT(cuEventCreate(&e, 8), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuEventCreate(NULL, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuEventCreate(&e, 2), CUDA_SUCCESS);
  EXPECT(cuEventCreate(&other, 0), CUDA_SUCCESS);
  CHECK(sim_cuda_live_events() == events + 2, "live events %ld", sim_cuda_live_events());
  EXPECT(cuEventQuery(e), CUDA_SUCCESS); /* never recorded: complete, as in CUDA */
  EXPECT(cuEventRecord(e, s), CUDA_SUCCESS);
  EXPECT(cuEventQuery(e), CUDA_SUCCESS);
  /* held: NOT_READY until released */
  sim_cuda_hold(s);
  EXPECT(cuEventRecord(e, s), CUDA_SUCCESS);
  EXPECT(cuEventQuery(e), CUDA_ERROR_NOT_READY);
  EXPECT(cuEventQuery(e), CUDA_ERROR_NOT_READY);
  sim_cuda_release(s);
  EXPECT(cuEventQuery(e), CUDA_SUCCESS);
  /* ... or synchronized */
  sim_cuda_hold(s);
  EXPECT(cuEventRecord(e, s), CUDA_SUCCESS);
  EXPECT(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT(cuEventQuery(e), CUDA_SUCCESS);
  /* an event recorded before the hold is complete; one synchronized is complete */
  EXPECT(cuEventRecord(other, s), CUDA_SUCCESS);
  sim_cuda_hold(s);
  EXPECT(cuEventRecord(e, s), CUDA_SUCCESS);
  EXPECT(cuEventQuery(other), CUDA_SUCCESS);
  EXPECT(cuEventSynchronize(e), CUDA_SUCCESS);
  EXPECT(cuEventQuery(e), CUDA_SUCCESS);
  EXPECT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  /* destroying a stream lets its work finish */
  EXPECT(cuEventRecord(e, s), CUDA_SUCCESS);
  EXPECT(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT(cuEventQuery(e), CUDA_SUCCESS);
  EXPECT(cuEventRecord(e, s), CUDA_ERROR_INVALID_HANDLE);
  /* strictness: stream and event of the current device */
  EXPECT(cuEventRecord(e, s1), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT(cuEventRecord((CUevent)&s, t), CUDA_ERROR_INVALID_HANDLE);
  EXPECT(cuCtxPushCurrent_v2(ctx1), CUDA_SUCCESS);
  EXPECT(cuEventRecord(e, s1), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT(cuEventRecord(e, NULL), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS);

  /* waits: counted by (consumer, producer of the event's last record), across devices too */
  sim_cuda_reset_counts();
  EXPECT(cuStreamWaitEvent(t, other, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuStreamWaitEvent(t, (CUevent)&s, 0), CUDA_ERROR_INVALID_HANDLE);
  EXPECT(cuStreamWaitEvent(s, other, 0), CUDA_ERROR_INVALID_HANDLE);
  CHECK(sim_cuda_misuses() == 3, "misuses %ld", sim_cuda_misuses());
  CUevent fresh = NULL;
  EXPECT(cuEventCreate(&fresh, 0), CUDA_SUCCESS);
  EXPECT(cuStreamWaitEvent(t, fresh, 0), CUDA_SUCCESS); /* legal but never recorded: a misuse */
  CHECK(sim_cuda_misuses() == 4, "misuses %ld", sim_cuda_misuses());
  EXPECT(cuEventRecord(fresh, t), CUDA_SUCCESS);
  EXPECT(cuStreamWaitEvent(s1, fresh, 0), CUDA_SUCCESS);
  CHECK(sim_cuda_waits(s1, t) == 1 && sim_cuda_waits(t, s1) == 0, "waits(s1, t) %ld", sim_cuda_waits(s1, t));
  EXPECT(cuEventRecord(fresh, NULL), CUDA_SUCCESS);
  EXPECT(cuStreamWaitEvent(t, fresh, 0), CUDA_SUCCESS);
  EXPECT(cuEventRecord(fresh, SIM_CU_STREAM_LEGACY), CUDA_SUCCESS);
  EXPECT(cuStreamWaitEvent(t, fresh, 0), CUDA_SUCCESS);
  CHECK(sim_cuda_waits(t, NULL) == 2 && sim_cuda_waits(t, SIM_CU_STREAM_LEGACY) == 2, "waits(t, legacy) %ld",
        sim_cuda_waits(t, NULL));
  CHECK(sim_cuda_waits(t, SIM_CU_STREAM_PER_THREAD) == 0 && sim_cuda_waits(t, (void *)&s) == 0, "no other waits");
  EXPECT(cuEventDestroy_v2(fresh), CUDA_SUCCESS);
  EXPECT(cuEventDestroy_v2(fresh), CUDA_ERROR_INVALID_HANDLE);
  EXPECT(cuEventQuery(fresh), CUDA_ERROR_INVALID_HANDLE);
  EXPECT(cuEventSynchronize(fresh), CUDA_ERROR_INVALID_HANDLE);
  EXPECT(cuStreamWaitEvent(t, fresh, 0), CUDA_ERROR_INVALID_HANDLE);
  EXPECT(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT(cuEventDestroy_v2(other), CUDA_SUCCESS);
  CHECK(sim_cuda_live_events() == events, "live events %ld", sim_cuda_live_events());
  EXPECT(cuStreamDestroy_v2(t), CUDA_SUCCESS);
  sim_cuda_stream_destroy(s1);
  EXPECT(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS);
}

static void test_memory(void) {
  CUdeviceptr d = 0, big[3] = {0, 0, 0};
  void *h = NULL;
  EXPECT(cuMemAlloc_v2(&d, 16), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT(cuMemHostAlloc(&h, 16, 0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT(cuMemAllocManaged(&d, 16, 1), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT(cuCtxPushCurrent_v2(ctx0), CUDA_SUCCESS);
  EXPECT(cuMemAlloc_v2(&d, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemAlloc_v2(NULL, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemAlloc_v2(&d, 1000), CUDA_SUCCESS);
  CHECK(d != 0 && d % 256 == 0, "aligned: 0x%llx", d);
  memset((void *)(uintptr_t)d, 7, 1000); /* device memory is host memory */
  CHECK(sim_cuda_live(SIM_CUDA_DEVICE, 0) == 1 && sim_cuda_live_bytes(SIM_CUDA_DEVICE, 0) == 1000 &&
            sim_cuda_live(SIM_CUDA_DEVICE, 1) == 0 && sim_cuda_live(SIM_CUDA_DEVICE, -1) == 1,
        "live device memory");
  CHECK(sim_cuda_live(7, -1) == -1 && sim_cuda_live_bytes(-1, -1) == -1, "unknown kind");
  CHECK(sim_cuda_alloc_device((void *)(uintptr_t)(d + 999)) == 0 && sim_cuda_alloc_device((void *)(uintptr_t)(d + 1000)) == -1 &&
            sim_cuda_alloc_device(&d) == -1,
        "alloc_device");
  CHECK(sim_cuda_alloc_stream((void *)(uintptr_t)d) == NULL, "not stream-ordered");
  EXPECT(cuMemFree_v2(d + 8), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemFreeHost((void *)(uintptr_t)d), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemFree_v2(d), CUDA_SUCCESS);
  EXPECT(cuMemFree_v2(d), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemFree_v2(0), CUDA_ERROR_INVALID_VALUE);
  /* capacity: 1 GiB per device, counted per device */
  long misuses = sim_cuda_misuses();
  EXPECT(cuMemAlloc_v2(&d, (1u << 30) + 1u), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT(cuMemAlloc_v2(&d, SIZE_MAX), CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(sim_cuda_misuses() == misuses, "out of memory is no misuse");
  EXPECT(cuMemAlloc_v2(&big[0], 1u << 29), CUDA_SUCCESS);
  EXPECT(cuMemAllocAsync(&big[1], 1u << 29, NULL), CUDA_SUCCESS);
  EXPECT(cuMemAlloc_v2(&big[2], 1), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT(cuCtxPushCurrent_v2(ctx1), CUDA_SUCCESS);
  EXPECT(cuMemAlloc_v2(&big[2], 1u << 29), CUDA_SUCCESS);
  EXPECT(cuMemFree_v2(big[0]), CUDA_SUCCESS); /* cuMemFree works from any device's context */
  EXPECT(cuMemFree_v2(big[2]), CUDA_SUCCESS);
  EXPECT(cuMemFreeAsync(big[1], NULL), CUDA_ERROR_INVALID_CONTEXT); /* not from another device's */
  EXPECT(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS);
  EXPECT(cuMemFreeAsync(big[1], NULL), CUDA_SUCCESS);
  CHECK(sim_cuda_live(SIM_CUDA_DEVICE, -1) == 0, "all device memory freed");

  /* pinned host memory */
  EXPECT(cuMemHostAlloc(&h, 64, 8), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemHostAlloc(&h, 0, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemHostAlloc(NULL, 64, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemHostAlloc(&h, 64, 1), CUDA_SUCCESS);
  memset(h, 1, 64);
  CHECK(sim_cuda_live(SIM_CUDA_HOST, -1) == 1 && sim_cuda_live_bytes(SIM_CUDA_HOST, 0) == 64 &&
            sim_cuda_alloc_device(h) == 0,
        "live host memory");
  EXPECT(cuMemFree_v2((CUdeviceptr)(uintptr_t)h), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemFreeAsync((CUdeviceptr)(uintptr_t)h, NULL), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemFreeHost(h), CUDA_SUCCESS);
  EXPECT(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
  CHECK(sim_cuda_live(SIM_CUDA_HOST, -1) == 0, "host memory freed");

  /* managed memory */
  EXPECT(cuMemAllocManaged(&d, 64, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemAllocManaged(&d, 64, 3), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemAllocManaged(&d, 0, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemAllocManaged(&d, 64, 2), CUDA_SUCCESS);
  CHECK(sim_cuda_live(SIM_CUDA_MANAGED, 0) == 1 && sim_cuda_live_bytes(SIM_CUDA_MANAGED, -1) == 64 &&
            sim_cuda_live(SIM_CUDA_DEVICE, -1) == 0,
        "live managed memory");
  EXPECT(cuMemFreeHost((void *)(uintptr_t)d), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemFree_v2(d), CUDA_SUCCESS);
  CHECK(sim_cuda_live(SIM_CUDA_MANAGED, -1) == 0, "managed memory freed");
  EXPECT(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS);
}

static void test_stream_ordered(void) {
  CUstream s = NULL, t = NULL;
  CUstream s1 = (CUstream)sim_cuda_stream_create(1);
  CUevent e = NULL;
  CUdeviceptr d = 0, q = 0;
  EXPECT(cuMemAllocAsync(&d, 256, NULL), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT(cuCtxPushCurrent_v2(ctx0), CUDA_SUCCESS);
  EXPECT(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  EXPECT(cuStreamCreate(&t, 0), CUDA_SUCCESS);
  EXPECT(cuEventCreate(&e, 2), CUDA_SUCCESS);
  EXPECT(cuMemAllocAsync(&d, 256, s1), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT(cuMemAllocAsync(&d, 256, (CUstream)&d), CUDA_ERROR_INVALID_HANDLE);
  EXPECT(cuMemAllocAsync(&d, 0, s), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemAllocAsync(NULL, 16, s), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemAllocAsync(&d, 256, s), CUDA_SUCCESS);
  CHECK(sim_cuda_alloc_stream((void *)(uintptr_t)(d + 5)) == (void *)s && sim_cuda_alloc_device((void *)(uintptr_t)d) == 0,
        "allocated on s");
  EXPECT(cuMemFreeAsync(d, s1), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT(cuMemFreeAsync(d + 1, s), CUDA_ERROR_INVALID_VALUE);
  /* frees_waiting: s waits on t's work after the allocation, then frees */
  sim_cuda_reset_counts();
  EXPECT(cuEventRecord(e, t), CUDA_SUCCESS);
  EXPECT(cuStreamWaitEvent(s, e, 0), CUDA_SUCCESS);
  EXPECT(cuMemFreeAsync(d, s), CUDA_SUCCESS);
  CHECK(sim_cuda_frees_waiting() == 1 && sim_cuda_last_free_stream() == (void *)s, "ordered free: %ld",
        sim_cuda_frees_waiting());
  EXPECT(cuMemFreeAsync(d, s), CUDA_ERROR_INVALID_VALUE);
  /* a wait before the allocation, or on the stream's own event, does not count */
  EXPECT(cuEventRecord(e, t), CUDA_SUCCESS);
  EXPECT(cuStreamWaitEvent(s, e, 0), CUDA_SUCCESS);
  EXPECT(cuMemAllocAsync(&q, 64, SIM_CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  EXPECT(cuEventRecord(e, s), CUDA_SUCCESS);
  EXPECT(cuStreamWaitEvent(s, e, 0), CUDA_SUCCESS);
  EXPECT(cuMemFreeAsync(q, s), CUDA_SUCCESS);
  CHECK(sim_cuda_frees_waiting() == 1, "unordered free: %ld", sim_cuda_frees_waiting());
  EXPECT(cuMemAllocAsync(&q, 64, SIM_CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  CHECK(sim_cuda_alloc_stream((void *)(uintptr_t)q) == (void *)SIM_CU_STREAM_PER_THREAD, "allocated on per-thread");
  EXPECT(cuMemFreeAsync(q, NULL), CUDA_SUCCESS);
  CHECK(sim_cuda_last_free_stream() == NULL, "freed on the legacy stream");
  CHECK(sim_cuda_calls("cuMemFreeAsync") == 4 && sim_cuda_calls("cuMemFreeAsync_v2") == 4, "calls %ld",
        sim_cuda_calls("cuMemFreeAsync"));

  /* pools */
  CUmemoryPool dp = NULL, pool = NULL;
  EXPECT(cuDeviceGetDefaultMemPool(&dp, 0), CUDA_SUCCESS);
  EXPECT(cuDeviceGetDefaultMemPool(&dp, 9), CUDA_ERROR_INVALID_DEVICE);
  EXPECT(cuDeviceGetDefaultMemPool(NULL, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK(dp != NULL && sim_cuda_pool_release_threshold(dp) == 0 && sim_cuda_pool_count() == 0, "default pool");
  EXPECT(cuMemPoolDestroy(dp), CUDA_ERROR_INVALID_VALUE);
  CUmemPoolProps props;
  memset(&props, 0, sizeof props);
  CHECK(sizeof props == 88, "CUmemPoolProps is %zu bytes, as in CUDA 12", sizeof props);
  props.allocType = 1;
  props.location.type = 1;
  props.location.id = 1;
  EXPECT(cuMemPoolCreate(&pool, NULL), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemPoolCreate(NULL, &props), CUDA_ERROR_INVALID_VALUE);
  props.allocType = 0;
  EXPECT(cuMemPoolCreate(&pool, &props), CUDA_ERROR_INVALID_VALUE);
  props.allocType = 1;
  props.location.type = 2;
  EXPECT(cuMemPoolCreate(&pool, &props), CUDA_ERROR_INVALID_VALUE);
  props.location.type = 1;
  props.location.id = 2;
  EXPECT(cuMemPoolCreate(&pool, &props), CUDA_ERROR_INVALID_VALUE);
  props.location.id = 1;
  props.reserved[53] = 1;
  EXPECT(cuMemPoolCreate(&pool, &props), CUDA_ERROR_INVALID_VALUE);
  props.reserved[53] = 0;
  props.handleTypes = 1;
  EXPECT(cuMemPoolCreate(&pool, &props), CUDA_ERROR_NOT_SUPPORTED);
  props.handleTypes = 0;
  EXPECT(cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  CHECK(sim_cuda_pool_count() == 1, "pool count %d", sim_cuda_pool_count());
  uint64_t threshold = UINT64_MAX, got = 0;
  int reuse = 0;
  EXPECT(cuMemPoolSetAttribute(pool, SIM_CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), CUDA_SUCCESS);
  CHECK(sim_cuda_pool_release_threshold(pool) == UINT64_MAX, "threshold %llu", sim_cuda_pool_release_threshold(pool));
  EXPECT(cuMemPoolGetAttribute(pool, SIM_CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &got), CUDA_SUCCESS);
  CHECK(got == UINT64_MAX, "got threshold");
  EXPECT(cuMemPoolGetAttribute(pool, 1, &reuse), CUDA_SUCCESS);
  CHECK(reuse == 1, "reuse %d", reuse);
  EXPECT(cuMemPoolSetAttribute(pool, 7, &threshold), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemPoolSetAttribute(pool, 8, &threshold), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemPoolSetAttribute(pool, 4, NULL), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemPoolGetAttribute(pool, 99, &got), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemPoolSetAttribute((CUmemoryPool)&got, 4, &threshold), CUDA_ERROR_INVALID_HANDLE);
  /* allocation from a pool of device 1: only with device 1's context current */
  EXPECT(cuMemAllocFromPoolAsync(&d, 100, pool, NULL), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT(cuCtxPushCurrent_v2(ctx1), CUDA_SUCCESS);
  EXPECT(cuMemAllocFromPoolAsync(&d, 100, pool, s), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT(cuMemAllocFromPoolAsync(&d, 100, NULL, s1), CUDA_ERROR_INVALID_HANDLE);
  EXPECT(cuMemAllocFromPoolAsync(&d, 100, pool, s1), CUDA_SUCCESS);
  CHECK(sim_cuda_alloc_device((void *)(uintptr_t)d) == 1 && sim_cuda_alloc_stream((void *)(uintptr_t)d) == (void *)s1 &&
            sim_cuda_live(SIM_CUDA_DEVICE, 1) == 1,
        "pool allocation");
  EXPECT(cuMemPoolGetAttribute(pool, 7, &got), CUDA_SUCCESS);
  CHECK(got == 100, "used %llu", (unsigned long long)got);
  EXPECT(cuMemPoolTrimTo(pool, 0), CUDA_SUCCESS);
  EXPECT(cuMemPoolTrimTo(NULL, 0), CUDA_ERROR_INVALID_HANDLE);
  EXPECT(cuMemFreeAsync(d, s1), CUDA_SUCCESS);
  got = 0;
  EXPECT(cuMemPoolSetAttribute(pool, 8, &got), CUDA_SUCCESS);
  EXPECT(cuMemPoolGetAttribute(pool, 8, &got), CUDA_SUCCESS);
  CHECK(got == 0, "high watermark reset: %llu", (unsigned long long)got);
  EXPECT(cuMemPoolDestroy(pool), CUDA_SUCCESS);
  EXPECT(cuMemPoolDestroy(pool), CUDA_ERROR_INVALID_HANDLE);
  EXPECT(cuMemAllocFromPoolAsync(&d, 100, pool, s1), CUDA_ERROR_INVALID_HANDLE);
  CHECK(sim_cuda_pool_count() == 0, "pool count %d", sim_cuda_pool_count());
  /* a pool's maxSize bounds it */
  props.maxSize = 512;
  EXPECT(cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  EXPECT(cuMemAllocFromPoolAsync(&d, 256, pool, NULL), CUDA_SUCCESS);
  EXPECT(cuMemAllocFromPoolAsync(&q, 257, pool, NULL), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT(cuMemFree_v2(d), CUDA_SUCCESS); /* cuMemFree frees pool memory too */
  EXPECT(cuMemPoolDestroy(pool), CUDA_SUCCESS);
  EXPECT(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS);

  EXPECT(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT(cuStreamDestroy_v2(t), CUDA_SUCCESS);
  sim_cuda_stream_destroy(s1);
  EXPECT(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS);
  CHECK(sim_cuda_live(SIM_CUDA_DEVICE, -1) == 0, "all freed");
}

static void test_copies(void) {
  unsigned char host[300], back[300];
  for (int i = 0; i < 300; i++) host[i] = (unsigned char)i;
  CUdeviceptr a = 0, b = 0, m = 0;
  void *pinned = NULL;
  CUstream s1 = (CUstream)sim_cuda_stream_create(1);
  EXPECT(cuMemcpyHtoDAsync_v2(a, host, 1, NULL), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT(cuCtxPushCurrent_v2(ctx0), CUDA_SUCCESS);
  EXPECT(cuMemAlloc_v2(&a, 300), CUDA_SUCCESS);
  EXPECT(cuMemAllocAsync(&b, 300, NULL), CUDA_SUCCESS);
  EXPECT(cuMemAllocManaged(&m, 300, 1), CUDA_SUCCESS);
  EXPECT(cuMemHostAlloc(&pinned, 300, 1), CUDA_SUCCESS);
  EXPECT(cuMemcpyHtoDAsync_v2(a, host, 300, NULL), CUDA_SUCCESS);
  CHECK(memcmp((void *)(uintptr_t)a, host, 300) == 0, "HtoD copied");
  EXPECT(cuMemcpyDtoDAsync_v2(b + 100, a, 200, SIM_CU_STREAM_LEGACY), CUDA_SUCCESS);
  EXPECT(cuMemcpyDtoDAsync_v2(m, a, 300, SIM_CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  memset(back, 0, sizeof back);
  EXPECT(cuMemcpyDtoHAsync_v2(back, b + 100, 200, NULL), CUDA_SUCCESS);
  CHECK(memcmp(back, host, 200) == 0, "DtoD and DtoH copied");
  EXPECT(cuMemcpyDtoHAsync_v2(back, m, 300, NULL), CUDA_SUCCESS);
  CHECK(memcmp(back, host, 300) == 0, "managed memory copies");
  EXPECT(cuMemcpyDtoDAsync_v2(a + 1, a, 299, NULL), CUDA_SUCCESS); /* overlapping */
  CHECK(((unsigned char *)(uintptr_t)a)[299] == (unsigned char)298 && ((unsigned char *)(uintptr_t)a)[1] == 0, "overlapping copy moved");
  /* ranges must lie inside one live device allocation */
  EXPECT(cuMemcpyDtoHAsync_v2(back, a, 301, NULL), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemcpyDtoHAsync_v2(back, a + 1, 300, NULL), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemcpyDtoHAsync_v2(back, (CUdeviceptr)(uintptr_t)host, 10, NULL), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemcpyDtoHAsync_v2(back, (CUdeviceptr)(uintptr_t)pinned, 10, NULL), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemcpyHtoDAsync_v2(b + 200, host, 101, NULL), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemcpyDtoDAsync_v2(a, b + 1, 300, NULL), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemcpyDtoHAsync_v2(NULL, a, 10, NULL), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemcpyHtoDAsync_v2(a, NULL, 10, NULL), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuMemcpyDtoHAsync_v2(NULL, 0, 0, NULL), CUDA_SUCCESS); /* zero bytes: nothing to check */
  EXPECT(cuMemcpyDtoHAsync_v2(back, a, 10, s1), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT(cuMemcpyHtoDAsync_v2(a, host, 10, s1), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT(cuMemcpyDtoDAsync_v2(a, b, 10, (CUstream)&a), CUDA_ERROR_INVALID_HANDLE);
  EXPECT(cuMemFree_v2(a), CUDA_SUCCESS);
  EXPECT(cuMemcpyDtoHAsync_v2(back, a, 10, NULL), CUDA_ERROR_INVALID_VALUE); /* freed */
  EXPECT(cuMemFreeAsync(b, NULL), CUDA_SUCCESS);
  EXPECT(cuMemFree_v2(m), CUDA_SUCCESS);
  EXPECT(cuMemFreeHost(pinned), CUDA_SUCCESS);
  EXPECT(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS);
  sim_cuda_stream_destroy(s1);
}

static void test_fail_injection_and_counts(void) {
  CUdeviceptr d = 12345;
  EXPECT(cuCtxPushCurrent_v2(ctx0), CUDA_SUCCESS);
  sim_cuda_reset_counts();
  sim_cuda_fail("cuMemAlloc", 987654, 2); /* "_v2" may be left off */
  EXPECT(cuMemAlloc_v2(&d, 16), 987654);
  EXPECT(cuMemAlloc_v2(&d, 16), 987654);
  CHECK(d == 12345 && sim_cuda_live(SIM_CUDA_DEVICE, -1) == 0, "an injected failure does nothing");
  EXPECT(cuMemAlloc_v2(&d, 16), CUDA_SUCCESS);
  CHECK(sim_cuda_calls("cuMemAlloc_v2") == 3 && sim_cuda_calls("cuMemAlloc") == 3, "calls %ld",
        sim_cuda_calls("cuMemAlloc_v2"));
  CHECK(sim_cuda_misuses() == 0, "an injected failure is no misuse");
  sim_cuda_fail("cuMemFree_v2", CUDA_ERROR_ILLEGAL_ADDRESS, 1);
  EXPECT(cuMemFree_v2(d), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT(cuMemFree_v2(d), CUDA_SUCCESS);
  sim_cuda_fail("cuCtxPopCurrent_v2", CUDA_ERROR_INVALID_CONTEXT, 1);
  EXPECT(cuCtxPopCurrent_v2(NULL), CUDA_ERROR_INVALID_CONTEXT);
  CHECK(sim_cuda_context_depth() == 1, "the injected pop popped nothing");
  sim_cuda_fail("cuStreamQuery", CUDA_ERROR_NOT_READY, 5);
  sim_cuda_fail("cuStreamQuery", 0, 0); /* cancelled */
  EXPECT(cuStreamQuery(NULL), CUDA_SUCCESS);
  sim_cuda_fail("cuNoSuchFunction", 1, 1); /* logged, ignored */
  CHECK(sim_cuda_calls("cuNoSuchFunction") == -1 && sim_cuda_calls(NULL) == -1, "unknown names");
  CHECK(sim_cuda_calls("cuCtxSynchronize") == 0, "never synchronised");
  CUstream s = NULL;
  EXPECT(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  sim_cuda_hold(s);
  sim_cuda_hold(NULL);
  EXPECT(cuCtxSynchronize(), CUDA_SUCCESS);
  CHECK(sim_cuda_calls("cuCtxSynchronize") == 1, "counted");
  EXPECT(cuStreamQuery(s), CUDA_SUCCESS);
  EXPECT(cuStreamQuery(NULL), CUDA_SUCCESS);
  EXPECT(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS);
  sim_cuda_reset_counts();
  CHECK(sim_cuda_calls("cuMemAlloc") == 0 && sim_cuda_calls("cuStreamQuery") == 0, "reset");
}

static void test_error_names(void) {
  static const struct {
    int code;
    const char *name, *text;
  } codes[] = {
      {0, "CUDA_SUCCESS", "no error"},
      {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
      {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
      {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
      {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
      {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
      {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
      {600, "CUDA_ERROR_NOT_READY", "device not ready"},
      {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
  };
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
    const char *name = NULL, *text = NULL;
    EXPECT(cuGetErrorName(codes[i].code, &name), CUDA_SUCCESS);
    EXPECT(cuGetErrorString(codes[i].code, &text), CUDA_SUCCESS);
    CHECK(test_streq(name, codes[i].name) && test_streq(text, codes[i].text), "%d: %s / %s", codes[i].code,
          test_str(name), test_str(text));
  }
  const char *name = "unset";
  EXPECT(cuGetErrorName(987654, &name), CUDA_ERROR_INVALID_VALUE);
  CHECK(name == NULL, "unknown code: NULL name");
  name = "unset";
  EXPECT(cuGetErrorString(-1, &name), CUDA_ERROR_INVALID_VALUE);
  CHECK(name == NULL, "unknown code: NULL string");
  EXPECT(cuGetErrorName(0, NULL), CUDA_ERROR_INVALID_VALUE);
}

/* What stream order counts as ordered, and that every other reuse is reported. */
static long unordered_after(long before) { return sim_cuda_unordered_reuses() - before; }

static void *use_on_own_default_stream(void *ptr) {
  CHECK(sim_cuda_use(SIM_CU_STREAM_PER_THREAD, ptr, 64, 1) == 0, "a write on another thread's default stream");
  return NULL;
}

static void test_stream_order(void) {
  EXPECT(cuCtxPushCurrent_v2(ctx0), CUDA_SUCCESS);
  CUstream a = (CUstream)sim_cuda_stream_create_nonblocking(0), b = (CUstream)sim_cuda_stream_create_nonblocking(0);
  CUstream blocking = (CUstream)sim_cuda_stream_create(0);
  CUdeviceptr d = 0;
  CUevent e = NULL;
  EXPECT(cuMemAllocAsync(&d, 256, a), CUDA_SUCCESS);
  EXPECT(cuEventCreate(&e, 2), CUDA_SUCCESS);
  void *p = (void *)(uintptr_t)d;
  long base = sim_cuda_unordered_reuses();

  CHECK(sim_cuda_use(a, p, 256, 1) == 0 && sim_cuda_use(a, p, 256, 0) == 0, "write then read on one stream");
  CHECK(unordered_after(base) == 0, "one stream is in order");
  CHECK(sim_cuda_use(b, p, 128, 1) == 0 && unordered_after(base) == 1, "a write on another stream, unordered");
  CHECK(sim_cuda_use(b, (char *)p + 128, 128, 0) == 0 && unordered_after(base) == 2, "a read after a's write, unordered");
  base = sim_cuda_unordered_reuses();

  EXPECT(cuEventRecord(e, b), CUDA_SUCCESS);
  EXPECT(cuStreamWaitEvent(a, e, 0), CUDA_SUCCESS);
  CHECK(sim_cuda_use(a, p, 256, 1) == 0 && unordered_after(base) == 0, "a waited for b's event");
  CHECK(sim_cuda_use(b, p, 16, 0) == 0 && sim_cuda_use(a, p, 16, 0) == 0 && unordered_after(base) == 1,
        "b reads what a wrote without waiting; a's read beside it is no conflict");
  base = sim_cuda_unordered_reuses();

  /* what the host has seen complete orders everything enqueued after it */
  sim_cuda_hold(b);
  EXPECT(cuEventRecord(e, b), CUDA_SUCCESS);
  EXPECT(cuEventQuery(e), CUDA_ERROR_NOT_READY);
  CHECK(sim_cuda_use(a, p, 256, 1) == 0 && unordered_after(base) == 1, "a query that failed orders nothing");
  sim_cuda_release(b);
  EXPECT(cuEventRecord(e, a), CUDA_SUCCESS);
  EXPECT(cuEventQuery(e), CUDA_SUCCESS);
  CHECK(sim_cuda_use(b, p, 256, 1) == 0 && unordered_after(base) == 1, "after a successful query, in order");
  EXPECT(cuStreamSynchronize(b), CUDA_SUCCESS);
  CHECK(sim_cuda_use(a, p, 256, 1) == 0 && unordered_after(base) == 1, "after a stream synchronisation, in order");
  base = sim_cuda_unordered_reuses();

  /* the legacy stream waits for blocking streams and they for it; non-blocking ones do neither */
  CHECK(sim_cuda_use(blocking, p, 256, 1) == 0 && unordered_after(base) == 1, "blocking after a: unordered");
  CHECK(sim_cuda_use(NULL, p, 256, 1) == 0 && unordered_after(base) == 1, "legacy after a blocking stream");
  CHECK(sim_cuda_use(blocking, p, 256, 1) == 0 && unordered_after(base) == 1, "a blocking stream after legacy");
  CHECK(sim_cuda_use(a, p, 256, 1) == 0 && unordered_after(base) == 2, "non-blocking after legacy: unordered");
  CHECK(sim_cuda_use(NULL, p, 256, 1) == 0 && unordered_after(base) == 3, "legacy after non-blocking: unordered");
  base = sim_cuda_unordered_reuses();

  /* each thread's default stream is its own */
  pthread_t other;
  pthread_create(&other, NULL, use_on_own_default_stream, p);
  pthread_join(other, NULL);
  CHECK(unordered_after(base) == 0, "another thread's default stream (blocking) waits for the legacy stream");
  CHECK(sim_cuda_use(SIM_CU_STREAM_PER_THREAD, p, 64, 1) == 0 && unordered_after(base) == 1,
        "this thread's default stream does not wait for another thread's");
  base = sim_cuda_unordered_reuses();
  EXPECT(cuCtxSynchronize(), CUDA_SUCCESS);
  CHECK(sim_cuda_use(b, p, 256, 1) == 0 && unordered_after(base) == 0, "everything after a device synchronisation");

  /* the driver orders its own reuse: a new allocation starts with no uses */
  EXPECT(cuMemFreeAsync(d, a), CUDA_SUCCESS);
  EXPECT(cuMemAllocAsync(&d, 256, b), CUDA_SUCCESS);
  CHECK(sim_cuda_use(a, (void *)(uintptr_t)d, 256, 1) == 0 && unordered_after(base) == 0, "fresh memory has no past");
  CHECK(sim_cuda_alloc_captured((void *)(uintptr_t)d) == 0, "not made during a capture");
  EXPECT(cuMemFreeAsync(d, a), CUDA_SUCCESS);
  sim_cuda_set_capturing(b, 1);
  EXPECT(cuMemAllocAsync(&d, 256, b), CUDA_SUCCESS);
  CHECK(sim_cuda_alloc_captured((void *)(uintptr_t)d) == 1, "made during a capture");
  sim_cuda_set_capturing(b, 0);
  EXPECT(cuMemFreeAsync(d, b), CUDA_SUCCESS);
  CHECK(sim_cuda_use(a, (void *)(uintptr_t)d, 1, 0) == -1, "a use of freed memory is refused");
  sim_cuda_reset_counts();
  CHECK(sim_cuda_unordered_reuses() == 0, "reset");
  EXPECT(cuEventDestroy_v2(e), CUDA_SUCCESS);
  sim_cuda_stream_destroy(a);
  sim_cuda_stream_destroy(b);
  sim_cuda_stream_destroy(blocking);
  EXPECT(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS);
}

static void test_final_state(void) {
  CHECK(sim_cuda_live(SIM_CUDA_DEVICE, -1) == 0 && sim_cuda_live(SIM_CUDA_HOST, -1) == 0 &&
            sim_cuda_live(SIM_CUDA_MANAGED, -1) == 0,
        "no allocation left");
  CHECK(sim_cuda_live_streams() == 0 && sim_cuda_live_events() == 0 && sim_cuda_pool_count() == 0,
        "no stream, event or pool left: %ld %ld %d", sim_cuda_live_streams(), sim_cuda_live_events(),
        sim_cuda_pool_count());
  CHECK(sim_cuda_context_depth() == 0, "balanced context stack");
  EXPECT(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
  EXPECT(cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS);
  CHECK(sim_cuda_retains(0) == 0 && sim_cuda_retains(1) == 0, "released");
}

static void run_default(void) {
  test_loading();
  test_before_init();
  test_init_and_devices();
  test_contexts();
  test_threads();
  test_streams();
  test_events();
  test_memory();
  test_stream_ordered();
  test_copies();
  test_stream_order();
  test_fail_injection_and_counts();
  test_error_names();
  test_final_state();
}

/* SIM_CUDA_NO_POOLS=1, one device of 4096 bytes, driver 11020. */
static void run_nopools(void) {
  int version = 0, count = 0, value = -1;
  EXPECT(cuInit(0), CUDA_SUCCESS);
  EXPECT(cuDriverGetVersion(&version), CUDA_SUCCESS);
  EXPECT(cuDeviceGetCount(&count), CUDA_SUCCESS);
  CHECK(version == 11020 && count == 1, "version %d, count %d", version, count);
  EXPECT(cuDeviceGetAttribute(&value, SIM_CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0), CUDA_SUCCESS);
  CHECK(value == 0, "no pools: %d", value);
  CUcontext ctx = NULL;
  CUmemoryPool pool = NULL;
  CUdeviceptr d = 0, e = 0;
  CUmemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = 1;
  props.location.type = 1;
  EXPECT(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  EXPECT(cuCtxPushCurrent_v2(ctx), CUDA_SUCCESS);
  EXPECT(cuMemAllocAsync(&d, 16, NULL), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT(cuMemPoolCreate(&pool, &props), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT(cuMemAllocFromPoolAsync(&d, 16, pool, NULL), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT(cuDeviceGetDefaultMemPool(&pool, 0), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT(cuMemAlloc_v2(&d, 4097), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT(cuMemAlloc_v2(&d, 4000), CUDA_SUCCESS);
  EXPECT(cuMemAlloc_v2(&e, 97), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT(cuMemAlloc_v2(&e, 96), CUDA_SUCCESS); /* exactly full */
  CHECK(sim_cuda_live_bytes(SIM_CUDA_DEVICE, 0) == 4096, "full: %lld", sim_cuda_live_bytes(SIM_CUDA_DEVICE, 0));
  CUdeviceptr m = 0;
  EXPECT(cuMemAllocManaged(&m, 8192, 1), CUDA_SUCCESS); /* managed memory is not capped */
  EXPECT(cuMemFree_v2(m), CUDA_SUCCESS);
  EXPECT(cuMemFree_v2(d), CUDA_SUCCESS);
  EXPECT(cuMemAlloc_v2(&d, 4001), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT(cuMemAlloc_v2(&d, 4000), CUDA_SUCCESS); /* freed bytes count again */
  EXPECT(cuMemFree_v2(d), CUDA_SUCCESS);
  EXPECT(cuMemFree_v2(e), CUDA_SUCCESS);
  CHECK(sim_cuda_live(SIM_CUDA_DEVICE, -1) == 0 && sim_cuda_live(SIM_CUDA_MANAGED, -1) == 0, "all freed");
  EXPECT(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS);
  EXPECT(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
}

/* SIM_CUDA_DEVICES=0: the driver loads but finds no device, as on a GPU-less host. */
static void run_nodevice(void) {
  int version = 0, count = -1;
  EXPECT(cuDriverGetVersion(&version), CUDA_SUCCESS);
  CHECK(version == 12080, "version %d", version);
  EXPECT(cuInit(0), CUDA_ERROR_NO_DEVICE);
  EXPECT(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
  const char *name = NULL;
  EXPECT(cuGetErrorName(CUDA_ERROR_NO_DEVICE, &name), CUDA_SUCCESS);
  CHECK(test_streq(name, "CUDA_ERROR_NO_DEVICE"), "name %s", test_str(name));
  CHECK(sim_cuda_stream_create(0) == NULL && sim_cuda_retains(0) == -1, "no device 0");
}

int main(int argc, char **argv) {
  const char *scenario = argc > 1 ? argv[1] : "default";
  if (strcmp(scenario, "default") == 0) {
    setenv("SIM_CUDA_VERBOSE", "0", 0); /* this test misuses the driver on purpose, a lot */
    run_default();
  } else if (strcmp(scenario, "nopools") == 0) {
    /* as ctest sets them, so that the scenario also runs by hand */
    setenv("SIM_CUDA_NO_POOLS", "1", 0);
    setenv("SIM_CUDA_DEVICES", "1", 0);
    setenv("SIM_CUDA_MEMORY", "4096", 0);
    setenv("SIM_CUDA_DRIVER_VERSION", "11020", 0);
    run_nopools();
  } else if (strcmp(scenario, "nodevice") == 0) {
    setenv("SIM_CUDA_DEVICES", "0", 0);
    run_nodevice();
  } else {
    fprintf(stderr, "unknown scenario %s\n", scenario);
    return 2;
  }
  return test_summary();
}

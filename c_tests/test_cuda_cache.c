/* dlpx's CUDA block cache through the C API, against the simulated driver (c_tests/sim_cuda):
 * steady-state allocation without the driver, reuse per device and stream, blocks used on other
 * streams held back until their events complete, the statistics, out of memory, a destroyed
 * stream, a tensor deleted twice, and empty_cache. (The randomized ordering test is
 * test_cuda_cache_random.c; the exit hook, test_cuda_cache_exit.c.) The simulated devices have
 * 64 MiB here (set before the driver loads), so that running out of memory is quick. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* setenv */
#endif
#include <pthread.h>
#include <stdlib.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dlpx/dlpx.h"
#define SIM_CUDA_DECLARE_DRIVER
#include "sim_cuda/sim_cuda.h"
#include "test_util.h"

static DLManagedTensorVersioned *allocate_on(int32_t device_id, void *stream, int64_t nbytes, struct error_record *r) {
  int64_t shape[1];
  shape[0] = nbytes;
  DLTensor proto = test_prototype(kDLCUDA, device_id, kDLUInt, 8, 1, shape);
  void *previous = NULL;
  CHECK(dlpx_set_current_stream(kDLCUDA, device_id, stream, &previous) == 0, "set the stream");
  DLManagedTensorVersioned *out = NULL;
  memset(r, 0, sizeof *r);
  int rc = dlpx_exchange_api()->managed_tensor_allocator(&proto, &out, r, record_error);
  CHECK((rc == 0) == (out != NULL), "rc %d agrees with out %p", rc, (void *)out);
  CHECK(dlpx_set_current_stream(kDLCUDA, device_id, previous, NULL) == 0, "restore the stream");
  return out;
}

static DLManagedTensorVersioned *allocate(int32_t device_id, void *stream, int64_t nbytes) {
  struct error_record r;
  DLManagedTensorVersioned *t = allocate_on(device_id, stream, nbytes, &r);
  CHECK(t != NULL, "allocation of %lld bytes on cuda:%d: %s", (long long)nbytes, device_id, r.message);
  return t;
}

static void release(DLManagedTensorVersioned *t) {
  if (t != NULL) t->deleter(t);
}

static DlpxCudaMemoryStats stats(int32_t device_id) {
  DlpxCudaMemoryStats s;
  memset(&s, 0xff, sizeof s);
  CHECK(dlpx_cuda_memory_stats(device_id, &s) == 0, "memory_stats: %s", test_str(dlpx_last_error()));
  return s;
}

static void empty_cache(void) { CHECK(dlpx_cuda_empty_cache() == 0, "empty_cache: %s", test_str(dlpx_last_error())); }

/* Allocations + frees per stream in the steady-state case. */
#define STEADY 500

static long allocation_calls(void) {
  return sim_cuda_calls("cuMemAllocFromPoolAsync") + sim_cuda_calls("cuMemAlloc") + sim_cuda_calls("cuMemFreeAsync") +
         sim_cuda_calls("cuMemFree");
}

static void steady_state_makes_no_driver_call(void) {
  void *user = sim_cuda_stream_create_nonblocking(0);
  void *streams[3] = {NULL, user, (void *)2};
  for (int s = 0; s < 3; s++) {
    release(allocate(0, streams[s], 64)); /* the first allocation asks the driver */
    sim_cuda_reset_counts();
    for (int i = 0; i < STEADY; i++) release(allocate(0, streams[s], 64));
    CHECK(allocation_calls() == 0, "stream %p: %ld driver allocations and frees in the steady state", streams[s],
          allocation_calls());
    /* The legacy stream cannot be captured: nothing at all is asked there. On the others the
     * allocation and the free each ask whether the stream is being captured (a graph's memory is
     * the graph's, and a free during a capture waits for its end); the per-thread stream is the
     * current context's, so that takes a context push. */
    CHECK(sim_cuda_calls("cuCtxPushCurrent") == (s == 2 ? 2 * STEADY : 0) && sim_cuda_calls("cuEventQuery") == 0,
          "stream %p: %ld context pushes", streams[s], sim_cuda_calls("cuCtxPushCurrent"));
    CHECK(sim_cuda_calls("cuStreamIsCapturing") == (s == 0 ? 0 : 2 * STEADY), "stream %p: %ld capture queries", streams[s],
          sim_cuda_calls("cuStreamIsCapturing"));
  }
  DlpxCudaMemoryStats s = stats(0);
  CHECK(s.cache_hits >= 3 * STEADY && s.allocated_bytes == 0 && s.allocations == 0, "%llu hits, %llu bytes allocated",
        (unsigned long long)s.cache_hits, (unsigned long long)s.allocated_bytes);
  CHECK(s.cached_bytes == s.reserved_bytes && s.segments == 3 && s.reserved_bytes == 3 * 512,
        "three 512-byte blocks cached, one per stream: %llu of %llu, %llu segments", (unsigned long long)s.cached_bytes,
        (unsigned long long)s.reserved_bytes, (unsigned long long)s.segments);
  empty_cache();
  sim_cuda_stream_destroy(user);
}

static void blocks_are_reused_on_their_device_and_stream_only(void) {
  void *a = sim_cuda_stream_create_nonblocking(0), *b = sim_cuda_stream_create_nonblocking(0);
  DLManagedTensorVersioned *t = allocate(0, a, 1000);
  void *address = t->dl_tensor.data;
  release(t);
  DLManagedTensorVersioned *other = allocate(0, b, 1000);
  CHECK(other->dl_tensor.data != address, "not on another stream");
  DLManagedTensorVersioned *again = allocate(0, a, 900);
  CHECK(again->dl_tensor.data == address, "reused on its stream, for a request of the same class");
  release(other);
  release(again);
  /* cuda:1, while this thread has cuda:0's context current */
  CUcontext ctx0 = NULL;
  CHECK(cuDevicePrimaryCtxRetain(&ctx0, 0) == CUDA_SUCCESS && cuCtxPushCurrent_v2(ctx0) == CUDA_SUCCESS, "push cuda:0");
  DLManagedTensorVersioned *on1 = allocate(1, NULL, 4096);
  void *address1 = on1->dl_tensor.data;
  CHECK(sim_cuda_alloc_device(address1) == 1, "on cuda:1");
  release(on1);
  DLManagedTensorVersioned *on0 = allocate(0, NULL, 4096);
  CHECK(on0->dl_tensor.data != address1, "cuda:1's block is not cuda:0's");
  DLManagedTensorVersioned *back = allocate(1, NULL, 4096);
  CHECK(back->dl_tensor.data == address1, "cuda:1's cache kept it");
  CHECK(stats(1).cache_hits >= 1, "a hit on cuda:1");
  release(on0);
  release(back);
  CHECK(cuCtxPopCurrent_v2(NULL) == CUDA_SUCCESS && cuDevicePrimaryCtxRelease_v2(0) == CUDA_SUCCESS, "pop");
  empty_cache();
  sim_cuda_stream_destroy(a);
  sim_cuda_stream_destroy(b);
}

static void a_block_used_elsewhere_waits_for_its_event(void) {
  void *a = sim_cuda_stream_create_nonblocking(0), *consumer = sim_cuda_stream_create_nonblocking(0);
  DLManagedTensorVersioned *t = allocate(0, a, 4096);
  void *address = t->dl_tensor.data;
  CHECK(dlpx_record_stream(t, 0, consumer) == 0, "record_stream");
  sim_cuda_hold(consumer); /* its kernel still reads the block */
  release(t);
  CHECK(stats(0).fenced_blocks == 1, "held back");
  DLManagedTensorVersioned *second = allocate(0, a, 4096);
  CHECK(second->dl_tensor.data != address, "not handed out while the consumer's work runs");
  sim_cuda_release(consumer);
  DLManagedTensorVersioned *third = allocate(0, a, 4096);
  CHECK(third->dl_tensor.data == address, "handed out once its event completed");
  CHECK(sim_cuda_calls("cuStreamWaitEvent") == 0 || sim_cuda_waits(a, consumer) == 0,
        "the allocation stream was never made to wait for the consumer");
  DlpxCudaMemoryStats s = stats(0);
  CHECK(s.fenced_frees >= 1 && s.fenced_blocks == 0, "%llu fenced frees, %llu waiting", (unsigned long long)s.fenced_frees,
        (unsigned long long)s.fenced_blocks);
  release(second);
  release(third);
  empty_cache();
  sim_cuda_stream_destroy(a);
  sim_cuda_stream_destroy(consumer);
}

static void the_statistics_add_up(void) {
  empty_cache();
  DlpxCudaMemoryStats before = stats(0);
  DLManagedTensorVersioned *t[4];
  for (int i = 0; i < 4; i++) t[i] = allocate(0, NULL, 3000); /* class 3072 */
  DlpxCudaMemoryStats live = stats(0);
  CHECK(live.allocated_bytes == before.allocated_bytes + 4 * 3072, "allocated %llu", (unsigned long long)live.allocated_bytes);
  CHECK(live.allocations == before.allocations + 4 && live.allocated_bytes_peak >= live.allocated_bytes, "counts");
  CHECK(live.reserved_bytes == live.allocated_bytes && live.cached_bytes == 0, "nothing idle");
  for (int i = 0; i < 4; i++) release(t[i]);
  DlpxCudaMemoryStats idle = stats(0);
  CHECK(idle.allocated_bytes == before.allocated_bytes && idle.cached_bytes == 4 * 3072, "cached %llu",
        (unsigned long long)idle.cached_bytes);
  CHECK(idle.allocated_bytes_total - idle.freed_bytes_total == idle.allocated_bytes, "allocated minus freed is current");
  CHECK(idle.allocated_bytes_peak >= before.allocated_bytes + 4 * 3072, "the peak stays");
  CHECK(idle.device_allocs == before.device_allocs + 4, "four driver allocations");
  empty_cache();
  DlpxCudaMemoryStats after = stats(0);
  CHECK(after.reserved_bytes == 0 && after.segments == 0 && after.cached_bytes == 0, "all given back");
  CHECK(after.device_frees == before.device_frees + 4, "four driver frees");
  CHECK(sim_cuda_live(SIM_CUDA_DEVICE, 0) == 0, "the driver has them");
  DlpxCudaMemoryStats none;
  CHECK(dlpx_cuda_memory_stats(2, &none) == -1 &&
            test_contains(dlpx_last_error(), "device cuda:2 does not exist: this machine has 2 CUDA device(s)"),
        "a device that does not exist: %s", test_str(dlpx_last_error()));
  CHECK(dlpx_cuda_memory_stats(0, NULL) == -1 && test_contains(dlpx_last_error(), "out is NULL"), "NULL out");
}

static void out_of_memory_gives_the_cache_back_then_fails_with_the_size(void) {
  empty_cache();
  /* 15 blocks of 4 MiB cached: 60 MiB of the simulated 64 */
  DLManagedTensorVersioned *t[15];
  for (int i = 0; i < 15; i++) t[i] = allocate(0, NULL, (int64_t)4 << 20);
  for (int i = 0; i < 15; i++) release(t[i]);
  CHECK(stats(0).cached_bytes == (uint64_t)15 << 22, "cached");
  DlpxCudaMemoryStats before = stats(0);
  DLManagedTensorVersioned *big = allocate(0, NULL, (int64_t)32 << 20); /* another class */
  DlpxCudaMemoryStats after = stats(0);
  CHECK(big != NULL && after.alloc_retries == before.alloc_retries + 1 && after.ooms == before.ooms,
        "retried once the cache gave its blocks back");
  CHECK(after.cached_bytes == 0 && after.allocated_bytes == (uint64_t)32 << 20, "the cache is empty");
  release(big);
  struct error_record r;
  DLManagedTensorVersioned *none = allocate_on(0, NULL, (int64_t)2 << 30, &r);
  CHECK(none == NULL && test_streq(r.kind, "MemoryError") &&
            test_contains(r.message, "out of memory allocating 2147483648 bytes on CUDA device 0"),
        "%s: %s", r.kind, r.message);
  CHECK(stats(0).ooms == before.ooms + 1, "counted");
  empty_cache();
}

static void a_destroyed_stream_is_never_named_again(void) {
  void *s = sim_cuda_stream_create_nonblocking(0);
  DLManagedTensorVersioned *t = allocate(0, s, 512);
  void *address = t->dl_tensor.data;
  release(t);
  sim_cuda_stream_destroy(s); /* with a block of it cached: its tensors are gone, as promised */
  long misuses = sim_cuda_misuses();
  DLManagedTensorVersioned *other = allocate(0, NULL, 512);
  CHECK(other->dl_tensor.data != address, "its blocks serve no other stream");
  release(other);
  long syncs = sim_cuda_calls("cuCtxSynchronize");
  empty_cache(); /* cannot order after a stream it may not name: synchronises the device */
  CHECK(sim_cuda_misuses() == misuses, "the destroyed stream was not named (%ld misuses)", sim_cuda_misuses() - misuses);
  CHECK(sim_cuda_calls("cuCtxSynchronize") == syncs + 1 && stats(0).syncs >= 1, "one device synchronisation");
  CHECK(sim_cuda_live(SIM_CUDA_DEVICE, 0) == 0, "given back");

  /* A tensor that outlives its stream breaks the promise: its free still asks whether the
   * stream is being captured (a real driver may crash there, as on any call naming it). The
   * simulator refuses the handle; dlpx keeps the block cached and never names the stream again. */
  void *gone = sim_cuda_stream_create_nonblocking(0);
  DLManagedTensorVersioned *orphan = allocate(0, gone, 512);
  sim_cuda_stream_destroy(gone);
  misuses = sim_cuda_misuses();
  release(orphan);
  CHECK(sim_cuda_misuses() == misuses + 1, "one refused call on the dead stream (%ld)", sim_cuda_misuses() - misuses);
  empty_cache();
  CHECK(sim_cuda_misuses() == misuses + 1 && sim_cuda_live(SIM_CUDA_DEVICE, 0) == 0, "and no other");
  sim_cuda_reset_counts(); /* that refusal was this case's own */
}

static void a_tensor_deleted_twice_is_refused(void) {
  DLManagedTensorVersioned *t = allocate(0, NULL, 2048);
  void *address = t->dl_tensor.data;
  release(t);
  dlpx_clear_last_error();
  t->deleter(t); /* its header is still dlpx's (not reused yet): the second call is caught */
  CHECK(test_contains(dlpx_last_error(), "was deleted twice"), "deleted twice: %s", test_str(dlpx_last_error()));
  DLManagedTensorVersioned *a = allocate(0, NULL, 2048), *b = allocate(0, NULL, 2048);
  CHECK(a->dl_tensor.data != b->dl_tensor.data, "never one block for two tensors");
  CHECK(a->dl_tensor.data == address || b->dl_tensor.data == address, "the block came back once");
  CHECK(a != b, "nor one header");
  release(a);
  release(b);
  empty_cache();
}

static void *free_here(void *t) {
  release((DLManagedTensorVersioned *)t);
  return NULL;
}

static void another_thread_s_default_stream_block_serves_the_legacy_stream(void) {
  DLManagedTensorVersioned *t = allocate(0, (void *)2, 1024); /* this thread's default stream */
  void *address = t->dl_tensor.data;
  pthread_t thread;
  pthread_create(&thread, NULL, free_here, t); /* kept by that thread's cache, then given up */
  pthread_join(thread, NULL);
  DLManagedTensorVersioned *legacy = allocate(0, NULL, 1024);
  CHECK(legacy->dl_tensor.data == address, "on the legacy stream, which waits for every default stream");
  release(legacy);
  empty_cache();
}

/* A thread writes a block on its own default stream, frees it and exits; another thread's
 * default stream takes it, after waiting for the legacy stream (which waited for the first
 * thread's): a pool of short-lived threads reuses its blocks instead of growing the cache. */
static void *write_on_my_default_stream_and_exit(void *address) {
  DLManagedTensorVersioned *t = allocate(0, (void *)2, 768);
  *(void **)address = t->dl_tensor.data;
  CHECK(sim_cuda_use((void *)2, t->dl_tensor.data, 768, 1) == 0, "the exiting thread's write");
  release(t);
  return NULL;
}

static long driver_allocations(void) { return sim_cuda_calls("cuMemAllocFromPoolAsync") + sim_cuda_calls("cuMemAlloc"); }

static void an_exited_thread_s_block_serves_another_thread_s_default_stream_in_order(void) {
  long unordered = sim_cuda_unordered_reuses(), waits = sim_cuda_calls("cuStreamWaitEvent");
  for (int round = 0; round < 3; round++) {
    void *address = NULL;
    pthread_t thread;
    pthread_create(&thread, NULL, write_on_my_default_stream_and_exit, &address);
    pthread_join(thread, NULL);
    long before = driver_allocations();
    DLManagedTensorVersioned *mine = allocate(0, (void *)2, 768);
    CHECK(mine->dl_tensor.data == address && driver_allocations() == before,
          "round %d: the exited thread's block (%ld driver allocations)", round, driver_allocations() - before);
    CHECK(sim_cuda_use((void *)2, mine->dl_tensor.data, 768, 1) == 0, "this thread's write");
    CHECK(sim_cuda_unordered_reuses() == unordered, "round %d: this write is ordered after the exited thread's",
          round);
    release(mine);
    empty_cache(); /* each round from an empty cache: the block this thread keeps is not in the way */
  }
  CHECK(sim_cuda_calls("cuStreamWaitEvent") == waits + 3, "one wait a reuse (%ld)",
        sim_cuda_calls("cuStreamWaitEvent") - waits);
}

/* Thread B reads a tensor of thread A's default stream on B's own default stream. */
static void *read_on_my_default_stream(void *t) {
  DLManagedTensorVersioned *tensor = (DLManagedTensorVersioned *)t;
  CHECK(dlpx_record_stream(tensor, 0, (void *)2) == 0, "record_stream: %s", test_str(dlpx_last_error()));
  CHECK(sim_cuda_use((void *)2, tensor->dl_tensor.data, 256, 0) == 0, "B's read");
  return NULL;
}

static void another_thread_s_default_stream_use_is_waited_for(void) {
  /* Each thread's default stream is a stream of its own: B's read was taken for the allocation
   * stream (both "the default stream") and the block was reused on A's stream under it. */
  long before = sim_cuda_unordered_reuses();
  DLManagedTensorVersioned *t = allocate(0, (void *)2, 256);
  CHECK(sim_cuda_use((void *)2, t->dl_tensor.data, 256, 1) == 0, "A's write");
  /* The host waits for A's write, so that B's read is ordered after it: only the reuse is tested. */
  CUcontext context;
  CHECK(cuDevicePrimaryCtxRetain(&context, 0) == CUDA_SUCCESS && cuCtxPushCurrent_v2(context) == CUDA_SUCCESS, "ctx");
  CHECK(cuStreamSynchronize((CUstream)2) == CUDA_SUCCESS, "B reads what A wrote");
  CHECK(cuCtxPopCurrent_v2(NULL) == CUDA_SUCCESS && cuDevicePrimaryCtxRelease_v2(0) == CUDA_SUCCESS, "ctx back");
  pthread_t b;
  pthread_create(&b, NULL, read_on_my_default_stream, t);
  pthread_join(b, NULL);
  release(t);
  DLManagedTensorVersioned *again = allocate(0, (void *)2, 256);
  CHECK(sim_cuda_use((void *)2, again->dl_tensor.data, 256, 1) == 0, "A's next write");
  CHECK(sim_cuda_unordered_reuses() == before, "A's write is ordered after B's read (%ld unordered)",
        sim_cuda_unordered_reuses() - before);
  release(again);
  empty_cache();
}

#define OVERFLOW_BLOCKS 20 /* more than a thread's bin of one class holds */

static void *allocate_and_free_many(void *unused) {
  (void)unused;
  DLManagedTensorVersioned *ts[OVERFLOW_BLOCKS];
  for (int i = 0; i < OVERFLOW_BLOCKS; i++) ts[i] = allocate(0, (void *)2, 400);
  for (int i = 0; i < OVERFLOW_BLOCKS; i++) release(ts[i]);
  return NULL;
}

static void an_exited_thread_s_blocks_all_serve_the_legacy_stream(void) {
  /* Those its full bins had given the shared list stayed keyed to its default stream: stranded. */
  pthread_t thread;
  pthread_create(&thread, NULL, allocate_and_free_many, NULL);
  pthread_join(thread, NULL);
  long before = driver_allocations();
  DLManagedTensorVersioned *ts[OVERFLOW_BLOCKS];
  for (int i = 0; i < OVERFLOW_BLOCKS; i++) ts[i] = allocate(0, NULL, 400);
  long driver = driver_allocations() - before;
  CHECK(driver == 0, "%ld of %d legacy-stream allocations went to the driver", driver, OVERFLOW_BLOCKS);
  for (int i = 0; i < OVERFLOW_BLOCKS; i++) release(ts[i]);
  empty_cache();
}

int main(void) {
  setenv("SIM_CUDA_MEMORY", "67108864", 1);
  sim_cuda_reset_counts();
  steady_state_makes_no_driver_call();
  blocks_are_reused_on_their_device_and_stream_only();
  a_block_used_elsewhere_waits_for_its_event();
  the_statistics_add_up();
  out_of_memory_gives_the_cache_back_then_fails_with_the_size();
  a_tensor_deleted_twice_is_refused();
  another_thread_s_default_stream_block_serves_the_legacy_stream();
  another_thread_s_default_stream_use_is_waited_for();
  an_exited_thread_s_blocks_all_serve_the_legacy_stream();
  an_exited_thread_s_block_serves_another_thread_s_default_stream_in_order();
  a_destroyed_stream_is_never_named_again();
  CHECK(sim_cuda_misuses() == 0, "no driver misuse (%ld; see the sim_cuda: lines above)", sim_cuda_misuses());
  CHECK(sim_cuda_unordered_reuses() == 0, "no unordered reuse (%ld)", sim_cuda_unordered_reuses());
  CHECK(sim_cuda_live(SIM_CUDA_DEVICE, -1) == 0, "all device memory given back (%ld)", sim_cuda_live(SIM_CUDA_DEVICE, -1));
  return test_summary();
}

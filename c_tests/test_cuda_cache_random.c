/* The CUDA block cache under random stream orderings, against the simulated driver's stream
 * timeline (sim_cuda_use, sim_cuda_unordered_reuses): threads allocate on the legacy, per-thread,
 * blocking and non-blocking streams of two devices; use tensors on other streams (ordered by the
 * test itself, and told to dlpx with dlpx_record_stream), also on the peer device; hold streams
 * so that events stay incomplete; capture a stream into a "graph" for a while; free on the
 * owner's thread or hand tensors to another thread to free; empty the cache and read statistics
 * meanwhile. A capture begins or ends only while no other thread allocates or frees: dlpx asks
 * whether a stream is captured and then frees on it (a put-off free, a block the cache gives
 * back), and a capture that begins in between takes the free into its graph, a race no driver
 * call closes; a program must not begin a capture then, and neither does the test. Every allocation's producer writes the whole tensor on its allocation stream, so a
 * block handed out before its previous user's work is ordered before that write is reported.
 *
 * Required: no unordered reuse, no block handed to two live tensors, no graph memory outside its
 * capture and no cached memory inside one, no driver misuse, nothing left after empty_cache.
 * argv[1] "ignore_uses" or "ignore_capture" (with DLPX_CUDA_CACHE_FAULT set to the same) runs a
 * deliberately wrong cache and requires the matching check to catch it. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* pthread_rwlock_t under -std=c11 */
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlpx/dlpx.h"
#define SIM_CUDA_DECLARE_DRIVER
#include "sim_cuda/sim_cuda.h"
#include "test_util.h"

#define THREADS 3
#define STEPS 2000
#define KEEP 24 /* live tensors per thread at most */

/* The streams: legacy, this thread's default, two non-blocking, one blocking (cuda:0), and the
 * capture stream; on cuda:1 the legacy stream and a non-blocking one. */
static void *streams0[6], *streams1[2];
static void *capture_stream;
static int capturing; /* written under capture_lock's write side; allocations and frees hold its read side */
static CUcontext contexts[2];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t capture_lock = PTHREAD_RWLOCK_INITIALIZER;

static long handed_out_twice, mixed_with_capture;

struct tensor {
  DLManagedTensorVersioned *t;
  int device;
  void *users[8]; /* streams that used it since its last write (the first is the writer) */
  int nusers;
};

/* Live tensors of every thread, to catch one block under two of them. */
static struct {
  uintptr_t start, end;
} live[THREADS * KEEP + 64];
static int nlive;

static void track(void *data, size_t bytes, int add) {
  pthread_mutex_lock(&g_lock);
  uintptr_t start = (uintptr_t)data, end = start + bytes;
  if (add) {
    for (int i = 0; i < nlive; i++)
      if (start < live[i].end && live[i].start < end) handed_out_twice++;
    live[nlive].start = start;
    live[nlive].end = end;
    nlive++;
  } else {
    for (int i = 0; i < nlive; i++)
      if (live[i].start == start) live[i] = live[--nlive];
  }
  pthread_mutex_unlock(&g_lock);
}

/* Tensors handed from one thread to another, which frees them. */
static DLManagedTensorVersioned *handed[THREADS * KEEP];
static int nhanded;

/* xorshift32: a fixed seed per thread, so a run repeats as far as thread timing lets it. */
static int next_random(unsigned *state) {
  *state ^= *state << 13;
  *state ^= *state >> 17;
  *state ^= *state << 5;
  return (int)(*state >> 1);
}

static size_t bytes_of(DLManagedTensorVersioned *t) { return (size_t)t->dl_tensor.shape[0]; }

static void delete_tensor(DLManagedTensorVersioned *t) {
  track(t->dl_tensor.data, bytes_of(t), 0);
  pthread_rwlock_rdlock(&capture_lock); /* a capture neither begins nor ends meanwhile */
  t->deleter(t);
  pthread_rwlock_unlock(&capture_lock);
}

/* `to` waits for the work of each of `t`'s users (the test's own ordering; `events` of the
 * users' devices, this thread's). */
static void order_after_users(struct tensor *t, void *to, CUevent events[2]) {
  for (int i = 0; i < t->nusers; i++) {
    if (t->users[i] == to) continue;
    int device = t->device == 1 || t->users[i] == streams1[1] ? 1 : 0;
    CHECK(cuCtxPushCurrent_v2(contexts[device]) == CUDA_SUCCESS, "push");
    CHECK(cuEventRecord(events[device], (CUstream)t->users[i]) == CUDA_SUCCESS, "record on %p", t->users[i]);
    CHECK(cuStreamWaitEvent((CUstream)to, events[device], 0) == CUDA_SUCCESS, "wait");
    CHECK(cuCtxPopCurrent_v2(NULL) == CUDA_SUCCESS, "pop");
  }
}

static void *worker(void *arg) {
  int index = (int)(intptr_t)arg;
  unsigned seed = 12345u + 7919u * (unsigned)index;
  struct tensor mine[KEEP];
  int n = 0;
  CUevent events[2];
  for (int d = 0; d < 2; d++) {
    cuCtxPushCurrent_v2(contexts[d]);
    CHECK(cuEventCreate(&events[d], 2) == CUDA_SUCCESS, "event");
    cuCtxPopCurrent_v2(NULL);
  }
  static const int64_t sizes[] = {16, 500, 3000, 70000, 1 << 20, 16, 4096, 70 << 20};
  for (int step = 0; step < STEPS; step++) {
    int r = next_random(&seed) % 100;
    if (r < 30 && n < KEEP) { /* allocate, and write it on its stream */
      int device = next_random(&seed) % 5 == 0;
      void *stream = device ? streams1[next_random(&seed) % 2] : streams0[next_random(&seed) % 6];
      int64_t nbytes = sizes[next_random(&seed) % (next_random(&seed) % 20 == 0 ? 8 : 7)];
      int64_t shape[1];
      shape[0] = nbytes;
      DLTensor proto = test_prototype(kDLCUDA, device, kDLUInt, 8, 1, shape);
      dlpx_set_current_stream(kDLCUDA, device, stream, NULL);
      pthread_rwlock_rdlock(&capture_lock); /* a capture neither begins nor ends meanwhile */
      int graph = stream == capture_stream && capturing;
      DLManagedTensorVersioned *t = NULL;
      struct error_record e;
      memset(&e, 0, sizeof e);
      int rc = dlpx_exchange_api()->managed_tensor_allocator(&proto, &t, &e, record_error);
      if (rc == 0 && sim_cuda_alloc_captured(t->dl_tensor.data) != graph)
        __atomic_add_fetch(&mixed_with_capture, 1, __ATOMIC_RELAXED);
      pthread_rwlock_unlock(&capture_lock);
      dlpx_set_current_stream(kDLCUDA, device, NULL, NULL);
      /* Memory may run out (the simulated devices have 1 GiB): after the cache gave its blocks
       * back, that is a MemoryError like any other. */
      CHECK(rc == 0 || test_streq(e.kind, "MemoryError"), "thread %d step %d: %s", index, step, e.message);
      if (rc != 0) continue;
      track(t->dl_tensor.data, (size_t)nbytes, 1);
      CHECK(sim_cuda_use(stream, t->dl_tensor.data, (size_t)nbytes, 1) == 0, "the producer's write");
      mine[n].t = t;
      mine[n].device = device;
      mine[n].users[0] = stream;
      mine[n].nusers = 1;
      n++;
    } else if (r < 55 && n > 0) { /* a consumer on another stream, perhaps on the peer device */
      struct tensor *t = &mine[next_random(&seed) % n];
      void *u = next_random(&seed) % 4 == 0 ? streams1[1] : streams0[next_random(&seed) % 6];
      if (t->device == 1 && u != streams1[1]) u = streams1[next_random(&seed) % 2];
      int write = next_random(&seed) % 3 == 0;
      order_after_users(t, u, events); /* a read needs only the writer; waiting for more is harmless */
      CHECK(sim_cuda_use(u, t->t->dl_tensor.data, bytes_of(t->t), write) == 0, "the consumer's use");
      CHECK(dlpx_record_stream(t->t, u == streams1[1] ? 1 : t->device, u) == 0, "record_stream");
      if (write) t->nusers = 0;
      int seen = 0;
      for (int i = 0; i < t->nusers; i++) seen |= t->users[i] == u;
      if (!seen && t->nusers < 8) t->users[t->nusers++] = u;
    } else if (r < 80 && n > 0) { /* free, here or on another thread */
      int i = next_random(&seed) % n;
      DLManagedTensorVersioned *t = mine[i].t;
      mine[i] = mine[--n];
      if (next_random(&seed) % 3 == 0) {
        pthread_mutex_lock(&g_lock);
        handed[nhanded++] = t;
        pthread_mutex_unlock(&g_lock);
      } else {
        delete_tensor(t);
      }
    } else if (r < 87) { /* free what other threads handed over */
      pthread_mutex_lock(&g_lock);
      DLManagedTensorVersioned *t = nhanded > 0 ? handed[--nhanded] : NULL;
      pthread_mutex_unlock(&g_lock);
      if (t != NULL) delete_tensor(t);
    } else if (r < 93) { /* work that has not finished yet, or that now has */
      void *s = next_random(&seed) % 3 == 0 ? streams1[1] : streams0[2 + next_random(&seed) % 2];
      if (next_random(&seed) % 2) sim_cuda_hold(s);
      else sim_cuda_release(s);
    } else if (r < 96 && index == 0) { /* a capture begins or ends */
      pthread_rwlock_wrlock(&capture_lock);
      capturing = !capturing;
      sim_cuda_set_capturing(capture_stream, capturing);
      pthread_rwlock_unlock(&capture_lock);
    } else if (r < 98) {
      DlpxCudaMemoryStats s;
      CHECK(dlpx_cuda_memory_stats(index % 2, &s) == 0, "stats: %s", test_str(dlpx_last_error()));
    } else {
      /* (torch refuses to empty its cache during a capture; dlpx waits for the ones it knows) */
      pthread_rwlock_rdlock(&capture_lock);
      if (!capturing) CHECK(dlpx_cuda_empty_cache() == 0, "empty_cache: %s", test_str(dlpx_last_error()));
      pthread_rwlock_unlock(&capture_lock);
    }
  }
  while (n > 0) delete_tensor(mine[--n].t);
  for (int d = 0; d < 2; d++) cuEventDestroy_v2(events[d]);
  return NULL;
}

int main(int argc, char **argv) {
  const char *fault = argc > 1 ? argv[1] : "none";
  for (int d = 0; d < 2; d++) CHECK(cuInit(0) == 0 && cuDevicePrimaryCtxRetain(&contexts[d], d) == 0, "retain");
  streams0[0] = NULL;
  streams0[1] = (void *)2;
  streams0[2] = sim_cuda_stream_create_nonblocking(0);
  streams0[3] = sim_cuda_stream_create_nonblocking(0);
  streams0[4] = sim_cuda_stream_create(0);
  streams0[5] = capture_stream = sim_cuda_stream_create_nonblocking(0);
  streams1[0] = NULL;
  streams1[1] = sim_cuda_stream_create_nonblocking(1);
  sim_cuda_reset_counts();

  pthread_t threads[THREADS];
  for (int i = 0; i < THREADS; i++) pthread_create(&threads[i], NULL, worker, (void *)(intptr_t)i);
  for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
  while (nhanded > 0) delete_tensor(handed[--nhanded]);
  sim_cuda_set_capturing(capture_stream, 0);
  for (int i = 2; i < 6; i++) sim_cuda_release(streams0[i]);
  sim_cuda_release(streams1[1]);
  CHECK(dlpx_cuda_empty_cache() == 0, "empty_cache: %s", test_str(dlpx_last_error()));

  long unordered = sim_cuda_unordered_reuses();
  printf("%d threads x %d steps: %ld unordered reuses, %ld blocks under two tensors, %ld capture mixes\n", THREADS,
         STEPS, unordered, handed_out_twice, mixed_with_capture);
  DlpxCudaMemoryStats s0;
  if (dlpx_cuda_memory_stats(0, &s0) == 0)
    printf("cuda:0: %llu allocations, %llu cache hits, %llu misses, %llu fenced frees, %llu out-of-memory retries, "
           "%llu device synchronisations\n",
           (unsigned long long)s0.allocations_total, (unsigned long long)s0.cache_hits, (unsigned long long)s0.cache_misses,
           (unsigned long long)s0.fenced_frees, (unsigned long long)s0.alloc_retries, (unsigned long long)s0.syncs);
  if (strcmp(fault, "ignore_uses") == 0) {
    CHECK(unordered > 0, "a cache that ignores other streams' uses must be caught");
  } else if (strcmp(fault, "ignore_capture") == 0) {
    CHECK(mixed_with_capture > 0, "a cache that hands cached blocks to a capture must be caught");
  } else {
    CHECK(unordered == 0, "no unordered reuse (%ld; see the sim_cuda: lines above)", unordered);
    CHECK(mixed_with_capture == 0, "graph memory only inside its capture (%ld)", mixed_with_capture);
  }
  CHECK(handed_out_twice == 0, "no block under two live tensors (%ld)", handed_out_twice);
  CHECK(sim_cuda_misuses() == 0, "no driver misuse (%ld)", sim_cuda_misuses());
  CHECK(sim_cuda_live(SIM_CUDA_DEVICE, -1) == 0, "all device memory given back (%ld)", sim_cuda_live(SIM_CUDA_DEVICE, -1));
  for (int d = 0; d < 2; d++) {
    DlpxCudaMemoryStats s;
    CHECK(dlpx_cuda_memory_stats(d, &s) == 0 && s.allocated_bytes == 0 && s.allocations == 0 && s.reserved_bytes == 0,
          "cuda:%d balanced: %llu bytes, %llu allocations, %llu reserved", d, (unsigned long long)s.allocated_bytes,
          (unsigned long long)s.allocations, (unsigned long long)s.reserved_bytes);
    CHECK(s.cache_hits > 0 || strcmp(fault, "none") != 0, "cuda:%d: the cache served allocations", d);
  }
  for (int i = 2; i < 6; i++) sim_cuda_stream_destroy(streams0[i]);
  sim_cuda_stream_destroy(streams1[1]);
  for (int d = 0; d < 2; d++) cuDevicePrimaryCtxRelease_v2(d);
  return test_summary();
}

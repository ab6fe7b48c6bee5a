/* dlpx's allocator under concurrency: 8 threads allocate tensors of many sizes at once, fill
 * each with a pattern unique to it, verify the pattern before freeing, and pass part of their
 * tensors to the next thread, which verifies and frees them (a deleter on another thread than
 * the allocating one). Under AddressSanitizer and LeakSanitizer any overlap, use after free,
 * double free or leak shows. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlpx/dlpx.h"
#include "test_util.h"

#define THREADS 8
#define ROUNDS 2000
#define LIVE 24        /* tensors each thread keeps alive at once */
#define MAILBOX 64     /* tensors in flight from one thread to the next */

/* A tensor handed from thread i to thread (i + 1) % THREADS, with what its bytes must read. */
struct parcel {
  DLManagedTensorVersioned *tensor;
  uint32_t seed;
};

struct mailbox {
  pthread_mutex_t lock;
  struct parcel items[MAILBOX];
  int count;
};

static struct mailbox mailboxes[THREADS];

struct worker {
  int index;
  int allocated;
  int freed_here;
  int freed_from_neighbour;
  int alloc_failures;
  int corrupted;
  int bad_metadata;
};

static uint32_t next_random(uint32_t *state) {
  /* xorshift32: deterministic per thread. */
  uint32_t x = *state;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  *state = x;
  return x;
}

static size_t nbytes_of(const DLManagedTensorVersioned *m) {
  const DLTensor *t = &m->dl_tensor;
  size_t numel = 1;
  for (int32_t i = 0; i < t->ndim; ++i) numel *= (size_t)t->shape[i];
  return (numel * t->dtype.bits * t->dtype.lanes + 7) / 8;
}

static unsigned char pattern_byte(uint32_t seed, size_t i) { return (unsigned char)((seed >> (i % 24)) + i * 31u); }

static void fill(DLManagedTensorVersioned *m, uint32_t seed) {
  unsigned char *bytes = (unsigned char *)m->dl_tensor.data;
  size_t n = nbytes_of(m);
  for (size_t i = 0; i < n; ++i) bytes[i] = pattern_byte(seed, i);
}

static int intact(const DLManagedTensorVersioned *m, uint32_t seed) {
  const unsigned char *bytes = (const unsigned char *)m->dl_tensor.data;
  size_t n = nbytes_of(m);
  if (n > 0 && (bytes == NULL || (uintptr_t)bytes % 256 != 0)) return 0;
  for (size_t i = 0; i < n; ++i)
    if (bytes[i] != pattern_byte(seed, i)) return 0;
  return 1;
}

/* A random shape: mostly small (the per-thread cache), some zero-size, some past 64 KiB. */
static DLManagedTensorVersioned *allocate_random(uint32_t *rng, struct worker *w) {
  int64_t shape[3];
  DLTensor p;
  memset(&p, 0, sizeof p);
  p.device.device_type = kDLCPU;
  p.device.device_id = 0;
  p.dtype.lanes = 1;
  uint32_t r = next_random(rng);
  switch (r % 8) {
    case 0: /* zero-size */
      p.ndim = 2;
      shape[0] = (int64_t)(r >> 8) % 5;
      shape[1] = 0;
      p.dtype.code = kDLFloat;
      p.dtype.bits = 32;
      break;
    case 1: /* large: 64 KiB .. 128 KiB */
      p.ndim = 1;
      shape[0] = 65536 + (int64_t)((r >> 8) % 65536);
      p.dtype.code = kDLUInt;
      p.dtype.bits = 8;
      break;
    case 2: /* packed fp4 */
      p.ndim = 1;
      shape[0] = 1 + (int64_t)((r >> 8) % 999);
      p.dtype.code = kDLFloat4_e2m1fn;
      p.dtype.bits = 4;
      break;
    case 3: /* 3-d complex64 */
      p.ndim = 3;
      shape[0] = 1 + (int64_t)((r >> 8) % 7);
      shape[1] = 1 + (int64_t)((r >> 12) % 9);
      shape[2] = 1 + (int64_t)((r >> 16) % 11);
      p.dtype.code = kDLComplex;
      p.dtype.bits = 64;
      break;
    case 4: /* 0-d */
      p.ndim = 0;
      p.dtype.code = kDLInt;
      p.dtype.bits = 64;
      break;
    default: /* small float32, 1 .. 4096 elements */
      p.ndim = 1;
      shape[0] = 1 + (int64_t)((r >> 8) % 4096);
      p.dtype.code = kDLFloat;
      p.dtype.bits = 32;
      break;
  }
  p.shape = p.ndim > 0 ? shape : NULL;
  DLManagedTensorVersioned *m = NULL;
  if (dlpx_exchange_api()->managed_tensor_allocator(&p, &m, NULL, NULL) != 0 || m == NULL) {
    w->alloc_failures++;
    return NULL;
  }
  w->allocated++;
  if (m->deleter == NULL || m->dl_tensor.ndim != p.ndim || (p.ndim > 0 && m->dl_tensor.strides == NULL))
    w->bad_metadata++;
  return m;
}

static void release(DLManagedTensorVersioned *m, uint32_t seed, struct worker *w) {
  if (!intact(m, seed)) w->corrupted++;
  m->deleter(m);
}

/* Takes what the previous thread sent, verifies and frees it. */
static void collect(struct mailbox *box, struct worker *w) {
  struct parcel taken[MAILBOX];
  int n;
  pthread_mutex_lock(&box->lock);
  n = box->count;
  memcpy(taken, box->items, (size_t)n * sizeof taken[0]);
  box->count = 0;
  pthread_mutex_unlock(&box->lock);
  for (int i = 0; i < n; ++i) {
    release(taken[i].tensor, taken[i].seed, w);
    w->freed_from_neighbour++;
  }
}

/* Sends to the next thread; returns 0 when its mailbox is full (the caller frees it instead). */
static int post(struct mailbox *box, DLManagedTensorVersioned *m, uint32_t seed) {
  int sent = 0;
  pthread_mutex_lock(&box->lock);
  if (box->count < MAILBOX) {
    box->items[box->count].tensor = m;
    box->items[box->count].seed = seed;
    box->count++;
    sent = 1;
  }
  pthread_mutex_unlock(&box->lock);
  return sent;
}

static void *work(void *arg) {
  struct worker *w = (struct worker *)arg;
  uint32_t rng = 0x9E3779B9u ^ (uint32_t)(w->index * 7919 + 1);
  DLManagedTensorVersioned *live[LIVE] = {NULL};
  uint32_t seeds[LIVE] = {0};
  struct mailbox *inbox = &mailboxes[w->index];
  struct mailbox *outbox = &mailboxes[(w->index + 1) % THREADS];
  for (int round = 0; round < ROUNDS; ++round) {
    int slot = (int)(next_random(&rng) % LIVE);
    if (live[slot] != NULL) {
      if ((next_random(&rng) & 3) == 0 && post(outbox, live[slot], seeds[slot])) {
        /* the neighbour frees it */
      } else {
        release(live[slot], seeds[slot], w);
        w->freed_here++;
      }
      live[slot] = NULL;
    }
    live[slot] = allocate_random(&rng, w);
    seeds[slot] = next_random(&rng);
    if (live[slot] != NULL) fill(live[slot], seeds[slot]);
    if (round % 16 == 0) collect(inbox, w);
  }
  for (int i = 0; i < LIVE; ++i) {
    if (live[i] != NULL) {
      release(live[i], seeds[i], w);
      w->freed_here++;
    }
  }
  collect(inbox, w);
  return NULL;
}

static void test_eight_threads_allocate_and_free_concurrently(void) {
  pthread_t threads[THREADS];
  struct worker workers[THREADS];
  for (int i = 0; i < THREADS; ++i) {
    pthread_mutex_init(&mailboxes[i].lock, NULL);
    mailboxes[i].count = 0;
    memset(&workers[i], 0, sizeof workers[i]);
    workers[i].index = i;
  }
  int started = 0;
  for (int i = 0; i < THREADS; ++i) {
    int rc = pthread_create(&threads[i], NULL, work, &workers[i]);
    CHECK(rc == 0, "pthread_create %d failed: %d", i, rc);
    if (rc == 0) started++;
  }
  for (int i = 0; i < started; ++i) pthread_join(threads[i], NULL);

  /* Parcels sent after their receiver's last drain are freed here, by yet another thread. */
  struct worker main_thread;
  memset(&main_thread, 0, sizeof main_thread);
  for (int i = 0; i < THREADS; ++i) {
    collect(&mailboxes[i], &main_thread);
    pthread_mutex_destroy(&mailboxes[i].lock);
  }

  int allocated = 0, freed = 0, from_neighbour = main_thread.freed_from_neighbour;
  for (int i = 0; i < started; ++i) {
    const struct worker *w = &workers[i];
    CHECK(w->alloc_failures == 0, "thread %d: %d allocations failed", i, w->alloc_failures);
    CHECK(w->corrupted == 0, "thread %d: %d tensors lost their contents before being freed", i, w->corrupted);
    CHECK(w->bad_metadata == 0, "thread %d: %d tensors had bad metadata", i, w->bad_metadata);
    CHECK(w->allocated == ROUNDS, "thread %d: %d of %d allocations", i, w->allocated, ROUNDS);
    allocated += w->allocated;
    freed += w->freed_here + w->freed_from_neighbour;
    from_neighbour += w->freed_from_neighbour;
  }
  CHECK(main_thread.corrupted == 0, "%d late parcels lost their contents", main_thread.corrupted);
  freed += main_thread.freed_from_neighbour;
  CHECK(freed == allocated, "%d tensors allocated, %d freed", allocated, freed);
  CHECK(from_neighbour > 0, "no tensor was freed by another thread than its allocator");
  printf("threads: %d tensors allocated by %d threads, %d of them freed by another thread\n", allocated, THREADS,
         from_neighbour);
}

int main(void) {
  test_eight_threads_allocate_and_free_concurrently();
  return test_summary();
}

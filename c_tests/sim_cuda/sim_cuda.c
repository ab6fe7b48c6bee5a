/* sim_cuda: a simulated CUDA driver for tests on machines without a GPU (see sim_cuda.h).
 *
 * It exists to check how a program *uses* the driver — context push/pop balance, which stream
 * each call is ordered on, events and waits between streams, leaks, error handling — so it is
 * deliberately stricter than a real driver: where CUDA would accept a call that is only correct
 * by accident (a stream of another device, a released primary context still current, a stale
 * handle) it refuses the call, counts a misuse and logs it. Device memory is plain host memory
 * aligned to 256 bytes, so copies really copy and tests may read and write it directly.
 *
 * Concurrency: one global mutex guards all shared state; each driver function takes it for its
 * whole duration (the simulated work is instantaneous), so calls are atomic with respect to each
 * other. The context stack is thread-local, as in CUDA.
 *
 * A stale handle is worse on a real driver than here: cuEventRecord on a destroyed stream crashed
 * inside libcuda (driver 580, H100) instead of returning CUDA_ERROR_INVALID_HANDLE, so a program
 * may not count on the refusal; a misuse here is a crash there.
 *
 * Handles never dangle: destroyed streams, events and pools stay allocated (marked dead) for the
 * life of the process, so a stale handle is reliably refused instead of aliasing a new object
 * that malloc happened to put at the same address. They stay reachable from globals, so leak
 * checkers do not report them. */
#define _POSIX_C_SOURCE 200809L

#define SIM_CUDA_API __attribute__((visibility("default")))
#define SIM_CUDA_DECLARE_DRIVER
#include "sim_cuda.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the driver functions, by name: for call counts and fail injection ---------------------- */

#define SIM_FUNCTIONS(X)                                                                        \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGetCount)     \
  X(cuDeviceGet) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease_v2) \
  X(cuCtxPushCurrent_v2) X(cuCtxPopCurrent_v2) X(cuCtxGetCurrent) X(cuCtxGetDevice) X(cuCtxSynchronize) \
  X(cuStreamCreate) X(cuStreamDestroy_v2) X(cuStreamQuery) X(cuStreamSynchronize) X(cuStreamGetCtx) \
  X(cuStreamWaitEvent) X(cuEventCreate) X(cuEventRecord) X(cuEventQuery) X(cuEventSynchronize)  \
  X(cuEventDestroy_v2) X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemAllocAsync) X(cuMemFreeAsync)     \
  X(cuMemAllocManaged) X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemPoolCreate) X(cuMemPoolDestroy) \
  X(cuMemPoolSetAttribute) X(cuMemPoolGetAttribute) X(cuMemPoolTrimTo) X(cuDeviceGetDefaultMemPool) \
  X(cuMemAllocFromPoolAsync) X(cuMemcpyDtoHAsync_v2) X(cuMemcpyHtoDAsync_v2) X(cuMemcpyDtoDAsync_v2) \
  X(cuDeviceCanAccessPeer) X(cuMemPoolSetAccess) X(cuDevicePrimaryCtxGetState) X(cuStreamIsCapturing) \
  X(cuPointerGetAttribute)

enum sim_fn {
#define SIM_ENUM(name) FN_##name,
  SIM_FUNCTIONS(SIM_ENUM)
#undef SIM_ENUM
  FN_COUNT
};

static const char *const fn_names[FN_COUNT] = {
#define SIM_NAME(name) #name,
    SIM_FUNCTIONS(SIM_NAME)
#undef SIM_NAME
};

/* ---- state -------------------------------------------------------------------------------- */

#define SIM_MAX_DEVICES 64
#define SIM_MAX_DEPTH 128 /* contexts one thread may have pushed; far beyond any sane use */
#define SIM_ALIGN 256     /* cudaMalloc's documented minimum alignment */
#define SIM_FILL_BYTES 65536 /* fresh memory starts with 0xCD here, so "it was zero" bugs show */

struct CUctx_st {
  int device;
  int retains;
};

struct CUstream_st {
  int device;  /* -1 for the built-in streams, which exist in every context */
  int live;    /* 0 once destroyed (the object stays, see the top of the file) */
  int held;    /* sim_cuda_hold: work on it has not finished */
  int capturing; /* sim_cuda_set_capturing: being captured into a CUDA graph */
  unsigned long long completions;     /* bumped when its work finishes: release, sync, destroy */
  unsigned long long last_cross_wait; /* g_seq at its last wait on another stream's event */
  struct CUstream_st *next;
  /* Stream order (see "stream order" below): the stream's index in every vector clock (-1:
   * past SIM_CLOCKS, not tracked), whether it skips the legacy stream's implicit
   * synchronisation (CU_STREAM_NON_BLOCKING), and its clock: clock[i] is how much of stream
   * i's work (counted in operations) its next operation is ordered after; clock[index] is its
   * own last operation. NULL until its first operation. */
  int index;
  int nonblocking;
  unsigned long long *clock;
};

struct CUevent_st {
  int device;
  int live;
  int recorded;
  struct CUstream_st *stream;    /* of the last record */
  int pending;                   /* recorded while `stream` was held ... */
  unsigned long long pending_at; /* ... and it has not completed since (completions unchanged) */
  struct CUevent_st *next;
  unsigned long long *clock; /* the recording stream's clock at the last record */
};

struct CUmemPoolHandle_st {
  int device;
  int live;
  int is_default;
  unsigned long long release_threshold;
  int reuse[4]; /* attributes 1-3, CU_MEMPOOL_ATTR_REUSE_*: ints, 1 by default */
  size_t max_size; /* 0: the device's memory */
  long long used, used_high, reserved_high;
  int access[64]; /* CUmemAccess_flags granted to each device (the owner's is implicit) */
  struct CUmemPoolHandle_st *next;
};

/* A use of bytes [off, off + len) of an allocation by one stream operation: the stream's clock
 * index and the operation's position in it. */
struct sim_use {
  size_t off, len;
  int index;
  unsigned long long at;
  int write;
};

struct sim_alloc {
  char *base;
  size_t size;
  int kind;   /* SIM_CUDA_DEVICE, SIM_CUDA_HOST, SIM_CUDA_MANAGED */
  int device; /* the device of the current context when it was made */
  int stream_ordered;
  int captured; /* made on a stream being captured */
  CUstream stream; /* as passed, for stream-ordered allocations */
  struct CUmemPoolHandle_st *pool;
  unsigned long long seq; /* g_seq when made: "since the allocation" for sim_cuda_frees_waiting */
  struct sim_alloc *next;
  /* Its timeline: the last writes and the reads since, by range (see "stream order"). */
  struct sim_use *uses;
  size_t nuses, uses_cap;
};

struct sim_wait {
  struct CUstream_st *consumer, *producer;
  long count;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static struct {
  int loaded;
  int devices;
  int version;
  unsigned long long memory;
  int no_pools;
  int verbose;
} g_cfg;
static int g_initialized;
static int g_deinitialized; /* sim_cuda_deinitialize: the driver is shutting down */

static long g_calls[FN_COUNT];
static struct {
  int code;
  int times;
} g_fail[FN_COUNT];
static long g_misuses;

static struct CUctx_st g_ctx[SIM_MAX_DEVICES];
static struct CUmemPoolHandle_st g_default_pool[SIM_MAX_DEVICES];
static long long g_device_bytes[SIM_MAX_DEVICES]; /* live SIM_CUDA_DEVICE bytes, for OOM */

/* NULL and CU_STREAM_LEGACY are the same stream; CU_STREAM_PER_THREAD is another. One of each
 * for the whole machine (not per device or thread): enough to observe which one a call used. */
static struct CUstream_st g_legacy = {-1, 1, 0, 0, 0, 0, NULL, 0, 0, NULL};
static struct CUstream_st *g_streams;
/* CU_STREAM_PER_THREAD is a different blocking stream on each thread: made on a thread's first
 * use of the handle, listed here (never freed, so a leak checker does not see them). */
static struct CUstream_st *g_per_thread_streams;
static _Thread_local struct CUstream_st *tl_per_thread;
static struct CUevent_st *g_events;
static struct CUmemPoolHandle_st *g_pools;
static struct sim_alloc *g_allocs; /* live allocations only */

static struct sim_wait *g_waits;
static size_t g_nwaits, g_waits_cap;
static unsigned long long g_seq;
static CUstream g_last_free_stream;
static long g_frees_waiting;

/* Stream order: vector clocks over at most SIM_CLOCKS streams (the legacy one is index 0). */
#define SIM_CLOCKS 1024
#define SIM_MAX_USES 256 /* uses kept per allocation; the oldest reads go first beyond it */
static int g_nclocks = 1;
static unsigned long long g_host[SIM_CLOCKS]; /* work the host has seen complete */
static long g_unordered;

static _Thread_local CUcontext tl_stack[SIM_MAX_DEPTH];
static _Thread_local int tl_depth;

/* ---- configuration and logging ------------------------------------------------------------ */

static long long env_number(const char *name, long long fallback, long long lo, long long hi) {
  const char *text = getenv(name);
  if (text == NULL || *text == '\0') return fallback;
  char *end = NULL;
  errno = 0;
  long long value = strtoll(text, &end, 0);
  if (errno != 0 || *end != '\0' || value < lo || value > hi) {
    fprintf(stderr, "sim_cuda: ignoring %s=%s (expected %lld..%lld), using %lld\n", name, text, lo, hi, fallback);
    return fallback;
  }
  return value;
}

/* Lock held. Once per process: the simulated machine cannot change under live handles. */
static void load_config(void) {
  if (g_cfg.loaded) return;
  g_cfg.devices = (int)env_number("SIM_CUDA_DEVICES", 2, 0, SIM_MAX_DEVICES);
  g_cfg.version = (int)env_number("SIM_CUDA_DRIVER_VERSION", 12080, 0, INT_MAX);
  g_cfg.memory = (unsigned long long)env_number("SIM_CUDA_MEMORY", 1LL << 30, 0, LLONG_MAX);
  const char *no_pools = getenv("SIM_CUDA_NO_POOLS");
  g_cfg.no_pools = no_pools != NULL && strcmp(no_pools, "1") == 0;
  const char *verbose = getenv("SIM_CUDA_VERBOSE");
  g_cfg.verbose = !(verbose != NULL && strcmp(verbose, "0") == 0);
  for (int i = 0; i < SIM_MAX_DEVICES; i++) {
    g_ctx[i].device = i;
    g_default_pool[i].device = i;
    g_default_pool[i].live = 1;
    g_default_pool[i].is_default = 1;
    for (int a = 1; a < 4; a++) g_default_pool[i].reuse[a] = 1;
  }
  g_cfg.loaded = 1;
}

static void vnote(enum sim_fn fn, const char *fmt, va_list args) {
  if (!g_cfg.verbose) return;
  fprintf(stderr, "sim_cuda: %s: ", fn < FN_COUNT ? fn_names[fn] : "control");
  vfprintf(stderr, fmt, args);
  fputc('\n', stderr);
}

/* Lock held. Logs something legal but noteworthy. */
static void note(enum sim_fn fn, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vnote(fn, fmt, args);
  va_end(args);
}

/* Lock held. Counts and logs a misuse; returns `code` so a caller can refuse in one line. */
static CUresult bad(enum sim_fn fn, CUresult code, const char *fmt, ...) {
  g_misuses++;
  va_list args;
  va_start(args, fmt);
  vnote(fn, fmt, args);
  va_end(args);
  return code;
}

/* ---- entry and exit of every driver function ---------------------------------------------- */

/* Takes the lock, counts the call, applies an injected failure and the cuInit requirement.
 * Returns 1 with *rc set and the lock released when the call must return now; 0 with the lock
 * held otherwise. */
static int enter(enum sim_fn fn, CUresult *rc) {
  pthread_mutex_lock(&g_lock);
  g_calls[fn]++;
  if (g_fail[fn].times > 0) {
    g_fail[fn].times--;
    *rc = g_fail[fn].code;
    pthread_mutex_unlock(&g_lock);
    return 1;
  }
  load_config();
  if (g_deinitialized) { /* as a driver whose process teardown has begun: refused, not misuse */
    *rc = CUDA_ERROR_DEINITIALIZED;
    pthread_mutex_unlock(&g_lock);
    return 1;
  }
  int exempt = fn == FN_cuInit || fn == FN_cuDriverGetVersion || fn == FN_cuGetErrorName || fn == FN_cuGetErrorString;
  if (!g_initialized && !exempt) {
    *rc = bad(fn, CUDA_ERROR_NOT_INITIALIZED, "called before a successful cuInit");
    pthread_mutex_unlock(&g_lock);
    return 1;
  }
  return 0;
}

static CUresult leave(CUresult rc) {
  pthread_mutex_unlock(&g_lock);
  return rc;
}

/* Every driver function starts with ENTER; with the lock then held, it returns through leave()
 * (REFUSE and TRY do), never directly. */
#define ENTER(name)                         \
  const enum sim_fn fn_ = FN_##name;        \
  do {                                      \
    CUresult early_;                        \
    if (enter(fn_, &early_)) return early_; \
  } while (0)
#define REFUSE(code, ...) return leave(bad(fn_, (code), __VA_ARGS__))
#define TRY(expr)                             \
  do {                                        \
    CUresult try_ = (expr);                   \
    if (try_ != CUDA_SUCCESS) return leave(try_); \
  } while (0)

/* ---- checks shared by the driver functions (lock held; they count and log refusals) --------- */

static int valid_device(int device) { return device >= 0 && device < g_cfg.devices; }

/* The current context's device in *device, or INVALID_CONTEXT. */
static CUresult need_ctx(enum sim_fn fn, int *device) {
  if (tl_depth == 0) return bad(fn, CUDA_ERROR_INVALID_CONTEXT, "no current context on this thread");
  CUcontext ctx = tl_stack[tl_depth - 1];
  if (ctx->retains == 0)
    return bad(fn, CUDA_ERROR_INVALID_CONTEXT, "the current context (device %d's primary context) was released", ctx->device);
  *device = ctx->device;
  return CUDA_SUCCESS;
}

static struct CUstream_st *new_stream(int device);

/* Lock held. This thread's default stream (NULL when out of memory). */
static struct CUstream_st *per_thread_stream(void) {
  if (tl_per_thread == NULL) {
    tl_per_thread = new_stream(-1);
    if (tl_per_thread != NULL) {
      g_streams = tl_per_thread->next; /* new_stream listed it with the created ones: move it */
      tl_per_thread->next = g_per_thread_streams;
      g_per_thread_streams = tl_per_thread;
    }
  }
  return tl_per_thread;
}

/* A stream handle, live created streams only when !allow_dead; NULL for an unknown one. */
static struct CUstream_st *find_stream(CUstream handle, int allow_dead) {
  if (handle == NULL || handle == SIM_CU_STREAM_LEGACY) return &g_legacy;
  if (handle == SIM_CU_STREAM_PER_THREAD) return per_thread_stream();
  for (struct CUstream_st *s = g_streams; s != NULL; s = s->next)
    if (s == handle && (s->live || allow_dead)) return s;
  return NULL;
}

/* A usable stream: live; a created one must belong to `device` (-1: any device). A built-in
 * stream means the current context's, so it needs one. */
static CUresult need_stream(enum sim_fn fn, CUstream handle, int device, struct CUstream_st **out) {
  struct CUstream_st *s = find_stream(handle, 0);
  if (s == NULL)
    return bad(fn, CUDA_ERROR_INVALID_HANDLE, "stream %p is not a live stream", (void *)handle);
  if (s->device < 0 && device < 0) {
    int current;
    CUresult rc = need_ctx(fn, &current);
    if (rc != CUDA_SUCCESS) return rc;
  }
  if (s->device >= 0 && device >= 0 && s->device != device)
    return bad(fn, CUDA_ERROR_INVALID_CONTEXT, "stream %p belongs to device %d, the current context to device %d",
               (void *)handle, s->device, device);
  *out = s;
  return CUDA_SUCCESS;
}

static CUresult need_event(enum sim_fn fn, CUevent handle, struct CUevent_st **out) {
  for (struct CUevent_st *e = g_events; e != NULL; e = e->next)
    if (e == handle && e->live) {
      *out = e;
      return CUDA_SUCCESS;
    }
  return bad(fn, CUDA_ERROR_INVALID_HANDLE, "event %p is not a live event", (void *)handle);
}

static struct CUmemPoolHandle_st *find_pool(CUmemoryPool handle) {
  for (int i = 0; i < g_cfg.devices; i++)
    if (handle == &g_default_pool[i]) return handle;
  for (struct CUmemPoolHandle_st *p = g_pools; p != NULL; p = p->next)
    if (p == handle) return p;
  return NULL;
}

static CUresult need_pool(enum sim_fn fn, CUmemoryPool handle, struct CUmemPoolHandle_st **out) {
  struct CUmemPoolHandle_st *p = find_pool(handle);
  if (p == NULL || !p->live) return bad(fn, CUDA_ERROR_INVALID_HANDLE, "pool %p is not a live pool", (void *)handle);
  *out = p;
  return CUDA_SUCCESS;
}

static CUresult need_out(enum sim_fn fn, const void *out) {
  return out != NULL ? CUDA_SUCCESS : bad(fn, CUDA_ERROR_INVALID_VALUE, "NULL output pointer");
}

/* ---- allocations (lock held) -------------------------------------------------------------- */

static struct sim_alloc *find_alloc(const void *ptr, size_t bytes) {
  uintptr_t p = (uintptr_t)ptr;
  for (struct sim_alloc *a = g_allocs; a != NULL; a = a->next) {
    uintptr_t base = (uintptr_t)a->base;
    if (p >= base && p - base < a->size && bytes <= a->size - (p - base)) return a;
  }
  return NULL;
}

static CUresult new_alloc(enum sim_fn fn, int kind, int device, size_t size, struct CUmemPoolHandle_st *pool,
                          struct sim_alloc **out) {
  if (size == 0) return bad(fn, CUDA_ERROR_INVALID_VALUE, "zero-byte allocation");
  if (size > SIZE_MAX - SIM_ALIGN) return CUDA_ERROR_OUT_OF_MEMORY;
  /* Only device memory has a simulated capacity; host and managed fail only when malloc does. */
  if (kind == SIM_CUDA_DEVICE && (unsigned long long)size > g_cfg.memory - (unsigned long long)g_device_bytes[device])
    return CUDA_ERROR_OUT_OF_MEMORY;
  if (pool != NULL && pool->max_size != 0 && (unsigned long long)size > pool->max_size - (unsigned long long)pool->used)
    return CUDA_ERROR_OUT_OF_MEMORY;
  struct sim_alloc *a = (struct sim_alloc *)calloc(1, sizeof *a);
  void *base = NULL;
  if (a == NULL || posix_memalign(&base, SIM_ALIGN, (size + SIM_ALIGN - 1) / SIM_ALIGN * SIM_ALIGN) != 0) {
    free(a);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  memset(base, 0xCD, size < SIM_FILL_BYTES ? size : SIM_FILL_BYTES);
  a->base = (char *)base;
  a->size = size;
  a->kind = kind;
  a->device = device;
  a->pool = pool;
  a->seq = ++g_seq;
  a->next = g_allocs;
  g_allocs = a;
  if (kind == SIM_CUDA_DEVICE) g_device_bytes[device] += (long long)size;
  if (pool != NULL) {
    pool->used += (long long)size;
    if (pool->used > pool->used_high) pool->used_high = pool->used;
    if (pool->used > pool->reserved_high) pool->reserved_high = pool->used;
  }
  *out = a;
  return CUDA_SUCCESS;
}

static void free_alloc(struct sim_alloc *a) {
  free(a->uses);
  for (struct sim_alloc **link = &g_allocs; *link != NULL; link = &(*link)->next)
    if (*link == a) {
      *link = a->next;
      break;
    }
  if (a->kind == SIM_CUDA_DEVICE) g_device_bytes[a->device] -= (long long)a->size;
  if (a->pool != NULL) a->pool->used -= (long long)a->size;
  free(a->base);
  free(a);
}

/* The allocation that `dptr` is the start of, which must be of device memory (device or
 * managed) when `device_memory`, else host memory. */
static CUresult need_alloc_start(enum sim_fn fn, const void *ptr, int device_memory, struct sim_alloc **out) {
  struct sim_alloc *a = find_alloc(ptr, 1);
  if (a == NULL || a->base != (const char *)ptr)
    return bad(fn, CUDA_ERROR_INVALID_VALUE, "%p is not the start of a live allocation", ptr);
  if ((a->kind == SIM_CUDA_HOST) == device_memory)
    return bad(fn, CUDA_ERROR_INVALID_VALUE, "%p is %s memory", ptr,
               a->kind == SIM_CUDA_HOST ? "pinned host" : a->kind == SIM_CUDA_MANAGED ? "managed" : "device");
  *out = a;
  return CUDA_SUCCESS;
}

/* A device-side range of a copy: inside one live device or managed allocation. */
static CUresult need_device_range(enum sim_fn fn, CUdeviceptr dptr, size_t bytes, const char *which) {
  struct sim_alloc *a = find_alloc((const void *)(uintptr_t)dptr, bytes);
  if (a == NULL || a->kind == SIM_CUDA_HOST)
    return bad(fn, CUDA_ERROR_INVALID_VALUE, "%s range [0x%llx, +%zu) is not inside one live device allocation", which,
               dptr, bytes);
  return CUDA_SUCCESS;
}


/* ---- stream order ------------------------------------------------------------------------
 *
 * Each stream operation (a use, a copy, an event record) is numbered in its stream, and each
 * stream carries a vector clock: how many operations of every stream its next operation is
 * ordered after. An event carries its stream's clock as of its record; a wait merges that into
 * the waiting stream's clock. The host's clock holds the work the host has seen complete (an
 * event query or stream query that succeeded, a synchronisation): whatever is enqueued later is
 * ordered after it. Before each of its operations the legacy stream waits for every blocking
 * stream's work so far, and a blocking stream for the legacy stream's.
 *
 * Every use of an allocation's bytes is checked against its timeline: a write must be ordered
 * after every earlier use of those bytes, a read after the last write. One that is not is an
 * unordered reuse (counted, sim_cuda_unordered_reuses, and logged). The driver orders its own
 * reuse of memory it was given back, so a new allocation starts with an empty timeline; memory a
 * caching allocator hands out again keeps its timeline, which is what this checks. */

/* Lock held. A stream's clock, made on first use (NULL when not tracked or out of memory). */
static unsigned long long *clock_of(struct CUstream_st *s) {
  if (s->index < 0) return NULL;
  if (s->clock == NULL) s->clock = (unsigned long long *)calloc(SIM_CLOCKS, sizeof *s->clock);
  return s->clock;
}

static void merge(unsigned long long *into, const unsigned long long *from) {
  if (into == NULL || from == NULL) return;
  for (int i = 0; i < g_nclocks; i++)
    if (from[i] > into[i]) into[i] = from[i];
}

/* Lock held. Numbers the next operation on `s` after what it is ordered after; its position
 * there, 0 for a stream that is not tracked. */
static unsigned long long enqueue(struct CUstream_st *s) {
  unsigned long long *c = clock_of(s);
  if (c == NULL) return 0;
  merge(c, g_host);
  if (s == &g_legacy) {
    for (struct CUstream_st *b = g_streams; b != NULL; b = b->next)
      if (!b->nonblocking) merge(c, b->clock);
    for (struct CUstream_st *b = g_per_thread_streams; b != NULL; b = b->next) merge(c, b->clock);
  } else if (!s->nonblocking) {
    merge(c, g_legacy.clock);
  }
  return ++c[s->index];
}

/* Lock held. The host has seen the work of `clock` complete. */
static void observe(const unsigned long long *clock) { merge(g_host, clock); }

/* Lock held. An operation on `s` reads or writes bytes [off, off + len) of `a`. */
static void use_range(enum sim_fn fn, struct CUstream_st *s, struct sim_alloc *a, size_t off, size_t len, int write) {
  unsigned long long at = enqueue(s);
  if (at == 0 || len == 0) return;
  const unsigned long long *c = s->clock;
  size_t kept = 0;
  int reported = 0; /* one report per use, however many earlier uses it is unordered with */
  for (size_t i = 0; i < a->nuses; i++) {
    struct sim_use u = a->uses[i];
    int overlaps = u.off < off + len && off < u.off + u.len;
    if (!reported && overlaps && (write || u.write) && u.index != s->index && c[u.index] < u.at) {
      reported = 1;
      g_unordered++;
      if (g_cfg.verbose)
        fprintf(stderr,
                "sim_cuda: %s: unordered reuse: bytes [%zu, +%zu) of %p %s on stream %d, operation %llu, "
                "but stream %d's %s of bytes [%zu, +%zu) (operation %llu) is not ordered before it\n",
                fn < FN_COUNT ? fn_names[fn] : "sim_cuda_use", off, len, (void *)a->base, write ? "written" : "read",
                s->index, at, u.index, u.write ? "write" : "read", u.off, u.len, u.at);
    }
    /* A write ordered after every use it covers stands for them; a stream's read, for its earlier one. */
    int superseded = write ? overlaps && u.off >= off && u.off + u.len <= off + len
                           : !u.write && u.index == s->index && u.off == off && u.len == len;
    if (!superseded) a->uses[kept++] = u;
  }
  a->nuses = kept;
  if (a->nuses == SIM_MAX_USES) { /* drop the oldest read: a later check may then miss it */
    size_t oldest = 0;
    while (oldest < a->nuses && a->uses[oldest].write) oldest++;
    if (oldest == a->nuses) oldest = 0;
    memmove(&a->uses[oldest], &a->uses[oldest + 1], (a->nuses - oldest - 1) * sizeof *a->uses);
    a->nuses--;
  }
  if (a->nuses == a->uses_cap) {
    size_t cap = a->uses_cap != 0 ? 2 * a->uses_cap : 4;
    struct sim_use *grown = (struct sim_use *)realloc(a->uses, cap * sizeof *grown);
    if (grown == NULL) return;
    a->uses = grown;
    a->uses_cap = cap;
  }
  a->uses[a->nuses].off = off;
  a->uses[a->nuses].len = len;
  a->uses[a->nuses].index = s->index;
  a->uses[a->nuses].at = at;
  a->uses[a->nuses].write = write;
  a->nuses++;
}

/* Lock held. An operation on `s` uses [ptr, ptr + bytes), if that lies in one live allocation. */
static void use_bytes(enum sim_fn fn, struct CUstream_st *s, const void *ptr, size_t bytes, int write) {
  struct sim_alloc *a = find_alloc(ptr, bytes);
  if (a != NULL) use_range(fn, s, a, (size_t)((const char *)ptr - a->base), bytes, write);
}

/* ---- initialisation, errors, devices ------------------------------------------------------ */

SIM_CUDA_API CUresult cuInit(unsigned int flags) {
  ENTER(cuInit);
  if (flags != 0) REFUSE(CUDA_ERROR_INVALID_VALUE, "flags %u must be 0", flags);
  if (g_cfg.devices == 0) return leave(CUDA_ERROR_NO_DEVICE); /* as a driver on a GPU-less host */
  g_initialized = 1;
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuDriverGetVersion(int *version) {
  ENTER(cuDriverGetVersion);
  TRY(need_out(fn_, version));
  *version = g_cfg.version;
  return leave(CUDA_SUCCESS);
}

static const struct {
  int code;
  const char *name, *text;
} error_table[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

/* Like the real driver: an unknown code is CUDA_ERROR_INVALID_VALUE with *out = NULL. */
static CUresult describe(enum sim_fn fn, CUresult code, const char **out, int want_name) {
  TRY(need_out(fn, out));
  for (size_t i = 0; i < sizeof error_table / sizeof error_table[0]; i++)
    if (error_table[i].code == code) {
      *out = want_name ? error_table[i].name : error_table[i].text;
      return leave(CUDA_SUCCESS);
    }
  *out = NULL;
  return leave(CUDA_ERROR_INVALID_VALUE);
}

SIM_CUDA_API CUresult cuGetErrorName(CUresult error, const char **name) {
  ENTER(cuGetErrorName);
  return describe(fn_, error, name, 1);
}

SIM_CUDA_API CUresult cuGetErrorString(CUresult error, const char **text) {
  ENTER(cuGetErrorString);
  return describe(fn_, error, text, 0);
}

SIM_CUDA_API CUresult cuDeviceGetCount(int *count) {
  ENTER(cuDeviceGetCount);
  TRY(need_out(fn_, count));
  *count = g_cfg.devices;
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  ENTER(cuDeviceGet);
  TRY(need_out(fn_, device));
  if (!valid_device(ordinal)) REFUSE(CUDA_ERROR_INVALID_DEVICE, "no device %d", ordinal);
  *device = ordinal;
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuDeviceGetAttribute(int *value, int attrib, CUdevice device) {
  ENTER(cuDeviceGetAttribute);
  TRY(need_out(fn_, value));
  if (!valid_device(device)) REFUSE(CUDA_ERROR_INVALID_DEVICE, "no device %d", device);
  if (attrib == SIM_CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)
    *value = !g_cfg.no_pools;
  else if (attrib == SIM_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
    *value = 132; /* an H100 SXM */
  else
    *value = 0;
  return leave(CUDA_SUCCESS);
}

/* ---- contexts ----------------------------------------------------------------------------- */

SIM_CUDA_API CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice device) {
  ENTER(cuDevicePrimaryCtxRetain);
  TRY(need_out(fn_, ctx));
  if (!valid_device(device)) REFUSE(CUDA_ERROR_INVALID_DEVICE, "no device %d", device);
  g_ctx[device].retains++;
  *ctx = &g_ctx[device];
  return leave(CUDA_SUCCESS);
}

/* Active while someone holds a retain on the primary context (as a framework using the device does). */
SIM_CUDA_API CUresult cuDevicePrimaryCtxGetState(CUdevice device, unsigned int *flags, int *active) {
  ENTER(cuDevicePrimaryCtxGetState);
  TRY(need_out(fn_, flags));
  TRY(need_out(fn_, active));
  if (!valid_device(device)) REFUSE(CUDA_ERROR_INVALID_DEVICE, "no device %d", device);
  *flags = 0;
  *active = g_ctx[device].retains > 0;
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  ENTER(cuDevicePrimaryCtxRelease_v2);
  if (!valid_device(device)) REFUSE(CUDA_ERROR_INVALID_DEVICE, "no device %d", device);
  if (g_ctx[device].retains == 0) REFUSE(CUDA_ERROR_INVALID_CONTEXT, "device %d's primary context is not retained", device);
  if (--g_ctx[device].retains == 0) {
    /* A real driver would now destroy everything made in the context; here it stays, so that
     * leak checks still see it, and later use is refused through need_ctx. */
    long left = 0;
    for (struct sim_alloc *a = g_allocs; a != NULL; a = a->next) left += a->device == device;
    if (left != 0) note(fn_, "device %d's primary context released with %ld live allocations", device, left);
  }
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  ENTER(cuCtxPushCurrent_v2);
  if (ctx == NULL) REFUSE(CUDA_ERROR_INVALID_VALUE, "NULL context");
  int device = -1;
  for (int i = 0; i < g_cfg.devices; i++)
    if (ctx == &g_ctx[i]) device = i;
  if (device < 0) REFUSE(CUDA_ERROR_INVALID_CONTEXT, "%p is not a context", (void *)ctx);
  if (ctx->retains == 0) REFUSE(CUDA_ERROR_INVALID_CONTEXT, "device %d's primary context is not retained", device);
  if (tl_depth == SIM_MAX_DEPTH) REFUSE(CUDA_ERROR_OUT_OF_MEMORY, "%d contexts pushed on this thread", tl_depth);
  tl_stack[tl_depth++] = ctx;
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuCtxPopCurrent_v2(CUcontext *ctx) {
  ENTER(cuCtxPopCurrent_v2);
  if (tl_depth == 0) REFUSE(CUDA_ERROR_INVALID_CONTEXT, "pop with no context pushed on this thread");
  CUcontext top = tl_stack[--tl_depth];
  if (ctx != NULL) *ctx = top;
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuCtxGetCurrent(CUcontext *ctx) {
  ENTER(cuCtxGetCurrent);
  TRY(need_out(fn_, ctx));
  *ctx = tl_depth > 0 ? tl_stack[tl_depth - 1] : NULL;
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuCtxGetDevice(CUdevice *device) {
  ENTER(cuCtxGetDevice);
  TRY(need_out(fn_, device));
  int current = -1;
  TRY(need_ctx(fn_, &current));
  *device = current;
  return leave(CUDA_SUCCESS);
}

/* Its work is done: events recorded on it while held complete too. */
static void complete(struct CUstream_st *s) {
  s->held = 0;
  s->completions++;
}

/* Completes every stream of the current device (and the built-in ones). Counted so that tests
 * can assert it is never called: it would serialise the whole device. */
SIM_CUDA_API CUresult cuCtxSynchronize(void) {
  ENTER(cuCtxSynchronize);
  int device = -1;
  TRY(need_ctx(fn_, &device));
  for (struct CUstream_st *s = g_streams; s != NULL; s = s->next)
    if (s->live && s->device == device) {
      complete(s);
      observe(s->clock);
    }
  complete(&g_legacy);
  observe(g_legacy.clock);
  for (struct CUstream_st *s = g_per_thread_streams; s != NULL; s = s->next) {
    complete(s);
    observe(s->clock);
  }
  return leave(CUDA_SUCCESS);
}

/* ---- streams ------------------------------------------------------------------------------ */

static struct CUstream_st *new_stream(int device) {
  struct CUstream_st *s = (struct CUstream_st *)calloc(1, sizeof *s);
  if (s == NULL) return NULL;
  s->device = device;
  s->live = 1;
  s->index = g_nclocks < SIM_CLOCKS ? g_nclocks++ : -1;
  s->next = g_streams;
  g_streams = s;
  return s;
}

SIM_CUDA_API CUresult cuStreamCreate(CUstream *stream, unsigned int flags) {
  ENTER(cuStreamCreate);
  TRY(need_out(fn_, stream));
  if (flags > 1) REFUSE(CUDA_ERROR_INVALID_VALUE, "flags %u (CU_STREAM_DEFAULT or CU_STREAM_NON_BLOCKING)", flags);
  int device = -1;
  TRY(need_ctx(fn_, &device));
  struct CUstream_st *s = new_stream(device);
  if (s == NULL) return leave(CUDA_ERROR_OUT_OF_MEMORY);
  s->nonblocking = (int)(flags & 1u);
  *stream = s;
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuStreamDestroy_v2(CUstream stream) {
  ENTER(cuStreamDestroy_v2);
  struct CUstream_st *s = find_stream(stream, 0);
  if (s == NULL || s->device < 0) REFUSE(CUDA_ERROR_INVALID_HANDLE, "stream %p cannot be destroyed", (void *)stream);
  complete(s); /* pending work still finishes in CUDA */
  s->live = 0;
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuStreamQuery(CUstream stream) {
  ENTER(cuStreamQuery);
  struct CUstream_st *s = NULL;
  TRY(need_stream(fn_, stream, -1, &s));
  if (s->held) return leave(CUDA_ERROR_NOT_READY);
  observe(s->clock);
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuStreamSynchronize(CUstream stream) {
  ENTER(cuStreamSynchronize);
  struct CUstream_st *s = NULL;
  TRY(need_stream(fn_, stream, -1, &s));
  complete(s);
  observe(s->clock);
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuStreamGetCtx(CUstream stream, CUcontext *ctx) {
  ENTER(cuStreamGetCtx);
  TRY(need_out(fn_, ctx));
  struct CUstream_st *s = NULL;
  TRY(need_stream(fn_, stream, -1, &s));
  *ctx = s->device >= 0 ? &g_ctx[s->device] : tl_stack[tl_depth - 1]; /* need_stream checked the depth */
  return leave(CUDA_SUCCESS);
}

static void count_wait(struct CUstream_st *consumer, struct CUstream_st *producer) {
  for (size_t i = 0; i < g_nwaits; i++)
    if (g_waits[i].consumer == consumer && g_waits[i].producer == producer) {
      g_waits[i].count++;
      return;
    }
  if (g_nwaits == g_waits_cap) {
    size_t cap = g_waits_cap != 0 ? 2 * g_waits_cap : 16;
    struct sim_wait *grown = (struct sim_wait *)realloc(g_waits, cap * sizeof *grown);
    if (grown == NULL) {
      note(FN_cuStreamWaitEvent, "out of memory: this wait is not counted");
      return;
    }
    g_waits = grown;
    g_waits_cap = cap;
  }
  g_waits[g_nwaits].consumer = consumer;
  g_waits[g_nwaits].producer = producer;
  g_waits[g_nwaits].count = 1;
  g_nwaits++;
}

/* May cross devices (the stream's and the event's). A never-recorded event is a no-op wait in
 * CUDA, so it succeeds, but it is almost certainly a bug in the caller: counted as misuse. */
SIM_CUDA_API CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags) {
  ENTER(cuStreamWaitEvent);
  if (flags != 0) REFUSE(CUDA_ERROR_INVALID_VALUE, "flags %u must be 0", flags);
  struct CUstream_st *s = NULL;
  TRY(need_stream(fn_, stream, -1, &s));
  struct CUevent_st *e = NULL;
  TRY(need_event(fn_, event, &e));
  if (!e->recorded) return leave(bad(fn_, CUDA_SUCCESS, "waits on event %p, which was never recorded", (void *)event));
  count_wait(s, e->stream);
  if (e->stream != s) s->last_cross_wait = ++g_seq;
  merge(clock_of(s), e->clock);
  return leave(CUDA_SUCCESS);
}

/* ---- events ------------------------------------------------------------------------------- */

SIM_CUDA_API CUresult cuEventCreate(CUevent *event, unsigned int flags) {
  ENTER(cuEventCreate);
  TRY(need_out(fn_, event));
  /* CU_EVENT_BLOCKING_SYNC 1, DISABLE_TIMING 2, INTERPROCESS 4 (which needs DISABLE_TIMING) */
  if ((flags & ~7u) != 0 || ((flags & 4u) && !(flags & 2u))) REFUSE(CUDA_ERROR_INVALID_VALUE, "flags 0x%x", flags);
  int device = -1;
  TRY(need_ctx(fn_, &device));
  struct CUevent_st *e = (struct CUevent_st *)calloc(1, sizeof *e);
  if (e == NULL) return leave(CUDA_ERROR_OUT_OF_MEMORY);
  e->device = device;
  e->live = 1;
  e->next = g_events;
  g_events = e;
  *event = e;
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuEventRecord(CUevent event, CUstream stream) {
  ENTER(cuEventRecord);
  int device = -1;
  TRY(need_ctx(fn_, &device));
  struct CUevent_st *e = NULL;
  TRY(need_event(fn_, event, &e));
  if (e->device != device)
    REFUSE(CUDA_ERROR_INVALID_CONTEXT, "event %p belongs to device %d, the current context to device %d", (void *)event,
           e->device, device);
  struct CUstream_st *s = NULL;
  TRY(need_stream(fn_, stream, device, &s));
  e->recorded = 1;
  e->stream = s;
  e->pending = s->held;
  e->pending_at = s->completions;
  enqueue(s);
  if (s->clock != NULL && e->clock == NULL) e->clock = (unsigned long long *)calloc(SIM_CLOCKS, sizeof *e->clock);
  if (e->clock != NULL) { /* no clock has an entry at or past g_nclocks */
    if (s->clock != NULL) memcpy(e->clock, s->clock, (size_t)g_nclocks * sizeof *e->clock);
    else memset(e->clock, 0, (size_t)g_nclocks * sizeof *e->clock);
  }
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuEventQuery(CUevent event) {
  ENTER(cuEventQuery);
  struct CUevent_st *e = NULL;
  TRY(need_event(fn_, event, &e));
  if (e->pending && e->stream->completions == e->pending_at) return leave(CUDA_ERROR_NOT_READY);
  e->pending = 0;
  observe(e->clock);
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuEventSynchronize(CUevent event) {
  ENTER(cuEventSynchronize);
  struct CUevent_st *e = NULL;
  TRY(need_event(fn_, event, &e));
  e->pending = 0; /* the recorded work finished; later work on a held stream need not have */
  observe(e->clock);
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuEventDestroy_v2(CUevent event) {
  ENTER(cuEventDestroy_v2);
  struct CUevent_st *e = NULL;
  TRY(need_event(fn_, event, &e));
  e->live = 0;
  return leave(CUDA_SUCCESS);
}

/* ---- memory ------------------------------------------------------------------------------- */

SIM_CUDA_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
  ENTER(cuMemAlloc_v2);
  TRY(need_out(fn_, dptr));
  int device = -1;
  TRY(need_ctx(fn_, &device));
  struct sim_alloc *a = NULL;
  TRY(new_alloc(fn_, SIM_CUDA_DEVICE, device, bytesize, NULL, &a));
  *dptr = (CUdeviceptr)(uintptr_t)a->base;
  return leave(CUDA_SUCCESS);
}

/* Frees device, pool and managed memory, from a context of any device. */
SIM_CUDA_API CUresult cuMemFree_v2(CUdeviceptr dptr) {
  ENTER(cuMemFree_v2);
  int device = -1;
  TRY(need_ctx(fn_, &device));
  struct sim_alloc *a = NULL;
  TRY(need_alloc_start(fn_, (const void *)(uintptr_t)dptr, 1, &a));
  free_alloc(a);
  return leave(CUDA_SUCCESS);
}

/* A stream-ordered allocation on the current device, from `pool` (NULL: its default pool). */
static CUresult alloc_async(enum sim_fn fn, CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream stream) {
  if (g_cfg.no_pools) return leave(CUDA_ERROR_NOT_SUPPORTED);
  TRY(need_out(fn, dptr));
  int device = -1;
  TRY(need_ctx(fn, &device));
  struct CUmemPoolHandle_st *p = &g_default_pool[device];
  if (pool != NULL || fn == FN_cuMemAllocFromPoolAsync) {
    TRY(need_pool(fn, pool, &p));
    if (p->device != device)
      return leave(bad(fn, CUDA_ERROR_INVALID_CONTEXT, "pool %p is on device %d, the current context on device %d",
                       (void *)pool, p->device, device));
  }
  struct CUstream_st *s = NULL;
  TRY(need_stream(fn, stream, device, &s));
  struct sim_alloc *a = NULL;
  TRY(new_alloc(fn, SIM_CUDA_DEVICE, device, bytesize, p, &a));
  a->stream_ordered = 1;
  a->captured = s->capturing;
  a->stream = stream;
  *dptr = (CUdeviceptr)(uintptr_t)a->base;
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream stream) {
  ENTER(cuMemAllocAsync);
  return alloc_async(fn_, dptr, bytesize, NULL, stream);
}

SIM_CUDA_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream stream) {
  ENTER(cuMemAllocFromPoolAsync);
  return alloc_async(fn_, dptr, bytesize, pool, stream);
}

/* Like CUDA, any device allocation may be freed stream-ordered, but (stricter) only with its own
 * device's context current and on a stream of that device. */
SIM_CUDA_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  ENTER(cuMemFreeAsync);
  int device = -1;
  TRY(need_ctx(fn_, &device));
  struct CUstream_st *s = NULL;
  TRY(need_stream(fn_, stream, device, &s));
  struct sim_alloc *a = NULL;
  TRY(need_alloc_start(fn_, (const void *)(uintptr_t)dptr, 1, &a));
  if (a->device != device)
    REFUSE(CUDA_ERROR_INVALID_CONTEXT, "0x%llx is on device %d, the current context on device %d", dptr, a->device,
           device);
  /* Legal in CUDA, but it would put a free node into the graph, replayed at every launch: a
   * program freeing memory from outside the capture this way has a bug, so it is misuse here. */
  if (s->capturing) REFUSE(CUDA_ERROR_INVALID_VALUE, "freeing pre-capture memory on stream %p while it is captured", (void *)stream);
  if (s->last_cross_wait > a->seq) g_frees_waiting++;
  g_last_free_stream = stream;
  free_alloc(a);
  return leave(CUDA_SUCCESS);
}

/* CU_STREAM_CAPTURE_STATUS_NONE 0 or _ACTIVE 1, as sim_cuda_set_capturing says. */
SIM_CUDA_API CUresult cuStreamIsCapturing(CUstream stream, int *status) {
  ENTER(cuStreamIsCapturing);
  TRY(need_out(fn_, status));
  struct CUstream_st *s = find_stream(stream, 0);
  if (s == NULL) REFUSE(CUDA_ERROR_INVALID_HANDLE, "stream %p is not a live stream", (void *)stream);
  *status = s->capturing ? 1 : 0;
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
  ENTER(cuMemAllocManaged);
  TRY(need_out(fn_, dptr));
  if (flags != 1 && flags != 2) REFUSE(CUDA_ERROR_INVALID_VALUE, "flags %u (CU_MEM_ATTACH_GLOBAL or _HOST)", flags);
  int device = -1;
  TRY(need_ctx(fn_, &device));
  struct sim_alloc *a = NULL;
  TRY(new_alloc(fn_, SIM_CUDA_MANAGED, device, bytesize, NULL, &a));
  *dptr = (CUdeviceptr)(uintptr_t)a->base;
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags) {
  ENTER(cuMemHostAlloc);
  TRY(need_out(fn_, pp));
  /* CU_MEMHOSTALLOC_PORTABLE 1, DEVICEMAP 2, WRITECOMBINED 4 */
  if ((flags & ~7u) != 0) REFUSE(CUDA_ERROR_INVALID_VALUE, "flags 0x%x", flags);
  int device = -1;
  TRY(need_ctx(fn_, &device));
  struct sim_alloc *a = NULL;
  TRY(new_alloc(fn_, SIM_CUDA_HOST, device, bytesize, NULL, &a));
  *pp = a->base;
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuMemFreeHost(void *p) {
  ENTER(cuMemFreeHost);
  int device = -1;
  TRY(need_ctx(fn_, &device));
  struct sim_alloc *a = NULL;
  TRY(need_alloc_start(fn_, p, 0, &a));
  free_alloc(a);
  return leave(CUDA_SUCCESS);
}

/* What the driver knows of an address (unified addressing: every allocation, any context):
 * CU_POINTER_ATTRIBUTE_MEMORY_TYPE (2: an unsigned int, CU_MEMORYTYPE_HOST 1 or _DEVICE 2; managed
 * memory reads as device memory), _IS_MANAGED (8: a bool, written as one byte, as the driver
 * does) and _DEVICE_ORDINAL (9: an int). An address inside no allocation is
 * CUDA_ERROR_INVALID_VALUE, as the real driver answers for memory it did not map (not misuse:
 * asking is how a reader finds out). */
SIM_CUDA_API CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr ptr) {
  ENTER(cuPointerGetAttribute);
  TRY(need_out(fn_, data));
  struct sim_alloc *a = find_alloc((const void *)(uintptr_t)ptr, 1);
  if (a == NULL) return leave(CUDA_ERROR_INVALID_VALUE);
  switch (attribute) {
  case 2: *(unsigned int *)data = a->kind == SIM_CUDA_HOST ? 1u : 2u; break;
  case 8: *(unsigned char *)data = a->kind == SIM_CUDA_MANAGED; break;
  case 9: *(int *)data = a->device; break;
  default: REFUSE(CUDA_ERROR_INVALID_VALUE, "pointer attribute %d is not simulated", attribute);
  }
  return leave(CUDA_SUCCESS);
}

/* ---- memory pools ------------------------------------------------------------------------- */

SIM_CUDA_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
  ENTER(cuMemPoolCreate);
  if (g_cfg.no_pools) return leave(CUDA_ERROR_NOT_SUPPORTED);
  TRY(need_out(fn_, pool));
  if (props == NULL) REFUSE(CUDA_ERROR_INVALID_VALUE, "NULL props");
  if (props->allocType != 1) REFUSE(CUDA_ERROR_INVALID_VALUE, "allocType %d (CU_MEM_ALLOCATION_TYPE_PINNED is 1)", props->allocType);
  if (props->location.type != 1)
    REFUSE(CUDA_ERROR_INVALID_VALUE, "location.type %d (CU_MEM_LOCATION_TYPE_DEVICE is 1)", props->location.type);
  if (!valid_device(props->location.id)) REFUSE(CUDA_ERROR_INVALID_VALUE, "location.id %d: no such device", props->location.id);
  if (props->handleTypes != 0) REFUSE(CUDA_ERROR_NOT_SUPPORTED, "handleTypes %d: only CU_MEM_HANDLE_TYPE_NONE is simulated", props->handleTypes);
  for (size_t i = 0; i < sizeof props->reserved; i++)
    if (props->reserved[i] != 0) REFUSE(CUDA_ERROR_INVALID_VALUE, "reserved bytes must be zero");
  struct CUmemPoolHandle_st *p = (struct CUmemPoolHandle_st *)calloc(1, sizeof *p);
  if (p == NULL) return leave(CUDA_ERROR_OUT_OF_MEMORY);
  p->device = props->location.id;
  p->live = 1;
  p->max_size = props->maxSize;
  for (int a = 1; a < 4; a++) p->reuse[a] = 1;
  p->next = g_pools;
  g_pools = p;
  *pool = p;
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  ENTER(cuMemPoolDestroy);
  struct CUmemPoolHandle_st *p = NULL;
  TRY(need_pool(fn_, pool, &p));
  if (p->is_default) REFUSE(CUDA_ERROR_INVALID_VALUE, "a device's default pool cannot be destroyed");
  /* CUDA allows this and frees the pool once its last allocation is freed. */
  if (p->used != 0) note(fn_, "pool %p destroyed with %lld bytes still allocated from it", (void *)pool, p->used);
  p->live = 0;
  return leave(CUDA_SUCCESS);
}

/* Attributes: 1-3 CU_MEMPOOL_ATTR_REUSE_* (int), 4 RELEASE_THRESHOLD, 5 RESERVED_MEM_CURRENT,
 * 6 RESERVED_MEM_HIGH, 7 USED_MEM_CURRENT, 8 USED_MEM_HIGH (cuuint64_t; 6 and 8 may only be
 * set, to 0, which resets them; 5 and 7 are read-only). Reserved memory is modelled as used. */
SIM_CUDA_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void *value) {
  ENTER(cuMemPoolSetAttribute);
  struct CUmemPoolHandle_st *p = NULL;
  TRY(need_pool(fn_, pool, &p));
  if (value == NULL) REFUSE(CUDA_ERROR_INVALID_VALUE, "NULL value");
  if (attr >= 1 && attr <= 3) {
    p->reuse[attr] = *(const int *)value;
  } else if (attr == SIM_CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) {
    p->release_threshold = *(const uint64_t *)value;
  } else if (attr == 6 || attr == 8) {
    if (*(const uint64_t *)value != 0) REFUSE(CUDA_ERROR_INVALID_VALUE, "attribute %d can only be reset to 0", attr);
    if (attr == 6) p->reserved_high = p->used;
    else p->used_high = p->used;
  } else {
    REFUSE(CUDA_ERROR_INVALID_VALUE, "attribute %d cannot be set", attr);
  }
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, int attr, void *value) {
  ENTER(cuMemPoolGetAttribute);
  struct CUmemPoolHandle_st *p = NULL;
  TRY(need_pool(fn_, pool, &p));
  if (value == NULL) REFUSE(CUDA_ERROR_INVALID_VALUE, "NULL value");
  switch (attr) {
    case 1: case 2: case 3: *(int *)value = p->reuse[attr]; break;
    case 4: *(uint64_t *)value = p->release_threshold; break;
    case 5: case 7: *(uint64_t *)value = (uint64_t)p->used; break;
    case 6: *(uint64_t *)value = (uint64_t)p->reserved_high; break;
    case 8: *(uint64_t *)value = (uint64_t)p->used_high; break;
    default: REFUSE(CUDA_ERROR_INVALID_VALUE, "no attribute %d", attr);
  }
  return leave(CUDA_SUCCESS);
}

/* Nothing is cached in the simulation, so there is nothing to trim; the call is counted. */
SIM_CUDA_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  ENTER(cuMemPoolTrimTo);
  (void)minBytesToKeep;
  struct CUmemPoolHandle_st *p = NULL;
  TRY(need_pool(fn_, pool, &p));
  return leave(CUDA_SUCCESS);
}

/* Every pair of distinct simulated devices can access each other (like NVLink peers). */
SIM_CUDA_API CUresult cuDeviceCanAccessPeer(int *can, CUdevice device, CUdevice peer) {
  ENTER(cuDeviceCanAccessPeer);
  TRY(need_out(fn_, can));
  if (!valid_device(device) || !valid_device(peer)) REFUSE(CUDA_ERROR_INVALID_DEVICE, "no device %d or %d", device, peer);
  *can = device != peer;
  return leave(CUDA_SUCCESS);
}

/* Grants devices access to a pool's memory. As in CUDA, the owner's own access cannot be changed. */
SIM_CUDA_API CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count) {
  ENTER(cuMemPoolSetAccess);
  struct CUmemPoolHandle_st *p = NULL;
  TRY(need_pool(fn_, pool, &p));
  if (count > 0 && map == NULL) REFUSE(CUDA_ERROR_INVALID_VALUE, "map is NULL with count %zu", count);
  for (size_t i = 0; i < count; i++) {
    if (map[i].location.type != 1 || !valid_device(map[i].location.id))
      REFUSE(CUDA_ERROR_INVALID_VALUE, "map[%zu]: not a device location", i);
    if (map[i].flags < 0 || map[i].flags > 3 || map[i].flags == 2)
      REFUSE(CUDA_ERROR_INVALID_VALUE, "map[%zu]: flags %d", i, map[i].flags);
    if (map[i].location.id == p->device) REFUSE(CUDA_ERROR_INVALID_DEVICE, "the pool's own device %d", p->device);
  }
  for (size_t i = 0; i < count; i++) p->access[map[i].location.id] = map[i].flags;
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice device) {
  ENTER(cuDeviceGetDefaultMemPool);
  TRY(need_out(fn_, pool));
  if (!valid_device(device)) REFUSE(CUDA_ERROR_INVALID_DEVICE, "no device %d", device);
  if (g_cfg.no_pools) return leave(CUDA_ERROR_NOT_SUPPORTED);
  *pool = &g_default_pool[device];
  return leave(CUDA_SUCCESS);
}

/* ---- copies: done at once; the device side must lie in one live allocation ----------------- */

SIM_CUDA_API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  ENTER(cuMemcpyDtoHAsync_v2);
  int device = -1;
  TRY(need_ctx(fn_, &device));
  struct CUstream_st *s = NULL;
  TRY(need_stream(fn_, stream, device, &s));
  if (bytes == 0) return leave(CUDA_SUCCESS);
  if (dst == NULL) REFUSE(CUDA_ERROR_INVALID_VALUE, "NULL destination");
  TRY(need_device_range(fn_, src, bytes, "source"));
  use_bytes(fn_, s, (const void *)(uintptr_t)src, bytes, 0);
  use_bytes(fn_, s, dst, bytes, 1); /* pinned host memory has a timeline too */
  memcpy(dst, (const void *)(uintptr_t)src, bytes);
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes, CUstream stream) {
  ENTER(cuMemcpyHtoDAsync_v2);
  int device = -1;
  TRY(need_ctx(fn_, &device));
  struct CUstream_st *s = NULL;
  TRY(need_stream(fn_, stream, device, &s));
  if (bytes == 0) return leave(CUDA_SUCCESS);
  if (src == NULL) REFUSE(CUDA_ERROR_INVALID_VALUE, "NULL source");
  TRY(need_device_range(fn_, dst, bytes, "destination"));
  use_bytes(fn_, s, src, bytes, 0);
  use_bytes(fn_, s, (const void *)(uintptr_t)dst, bytes, 1);
  memcpy((void *)(uintptr_t)dst, src, bytes);
  return leave(CUDA_SUCCESS);
}

SIM_CUDA_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  ENTER(cuMemcpyDtoDAsync_v2);
  int device = -1;
  TRY(need_ctx(fn_, &device));
  struct CUstream_st *s = NULL;
  TRY(need_stream(fn_, stream, device, &s));
  if (bytes == 0) return leave(CUDA_SUCCESS);
  TRY(need_device_range(fn_, src, bytes, "source"));
  TRY(need_device_range(fn_, dst, bytes, "destination"));
  use_bytes(fn_, s, (const void *)(uintptr_t)src, bytes, 0);
  use_bytes(fn_, s, (const void *)(uintptr_t)dst, bytes, 1);
  memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
  return leave(CUDA_SUCCESS);
}

/* ---- control API -------------------------------------------------------------------------- */

/* The function named `name`, ignoring a trailing "_v2" on either side; FN_COUNT if none. */
static enum sim_fn lookup_fn(const char *name) {
  if (name == NULL) return FN_COUNT;
  size_t n = strlen(name);
  if (n > 3 && strcmp(name + n - 3, "_v2") == 0) n -= 3;
  for (int i = 0; i < FN_COUNT; i++) {
    size_t m = strlen(fn_names[i]);
    if (m > 3 && strcmp(fn_names[i] + m - 3, "_v2") == 0) m -= 3;
    if (m == n && strncmp(fn_names[i], name, n) == 0) return (enum sim_fn)i;
  }
  return FN_COUNT;
}

static void lock(void) {
  pthread_mutex_lock(&g_lock);
  load_config();
}
static void unlock(void) { pthread_mutex_unlock(&g_lock); }

SIM_CUDA_API void sim_cuda_fail(const char *function, int code, int times) {
  lock();
  enum sim_fn fn = lookup_fn(function);
  if (fn == FN_COUNT) {
    fprintf(stderr, "sim_cuda: sim_cuda_fail: %s is not a simulated driver function\n", function ? function : "(null)");
  } else {
    g_fail[fn].code = code;
    g_fail[fn].times = times > 0 ? times : 0;
  }
  unlock();
}

SIM_CUDA_API long sim_cuda_calls(const char *function) {
  lock();
  enum sim_fn fn = lookup_fn(function);
  long calls = fn == FN_COUNT ? -1 : g_calls[fn];
  unlock();
  return calls;
}

SIM_CUDA_API void sim_cuda_reset_counts(void) {
  lock();
  memset(g_calls, 0, sizeof g_calls);
  g_misuses = 0;
  g_frees_waiting = 0;
  g_nwaits = 0;
  g_unordered = 0;
  unlock();
}

SIM_CUDA_API long sim_cuda_misuses(void) {
  lock();
  long n = g_misuses;
  unlock();
  return n;
}

SIM_CUDA_API int sim_cuda_context_depth(void) { return tl_depth; }

static void tally(int kind, int device, long *count, long long *bytes) {
  *count = 0;
  *bytes = 0;
  if (kind < SIM_CUDA_DEVICE || kind > SIM_CUDA_MANAGED) {
    *count = *bytes = -1;
    return;
  }
  for (struct sim_alloc *a = g_allocs; a != NULL; a = a->next)
    if (a->kind == kind && (device == -1 || a->device == device)) {
      ++*count;
      *bytes += (long long)a->size;
    }
}

SIM_CUDA_API long sim_cuda_live(int kind, int device) {
  long count;
  long long bytes;
  lock();
  tally(kind, device, &count, &bytes);
  unlock();
  return count;
}

SIM_CUDA_API long long sim_cuda_live_bytes(int kind, int device) {
  long count;
  long long bytes;
  lock();
  tally(kind, device, &count, &bytes);
  unlock();
  return bytes;
}

SIM_CUDA_API long sim_cuda_live_events(void) {
  long n = 0;
  lock();
  for (struct CUevent_st *e = g_events; e != NULL; e = e->next) n += e->live;
  unlock();
  return n;
}

SIM_CUDA_API long sim_cuda_live_streams(void) {
  long n = 0;
  lock();
  for (struct CUstream_st *s = g_streams; s != NULL; s = s->next) n += s->live;
  unlock();
  return n;
}

static void *control_stream_create(int device, int nonblocking) {
  lock();
  struct CUstream_st *s = valid_device(device) ? new_stream(device) : NULL;
  if (s != NULL) s->nonblocking = nonblocking;
  unlock();
  return s;
}

SIM_CUDA_API void *sim_cuda_stream_create(int device) { return control_stream_create(device, 0); }

SIM_CUDA_API void *sim_cuda_stream_create_nonblocking(int device) { return control_stream_create(device, 1); }

SIM_CUDA_API void sim_cuda_stream_destroy(void *stream) {
  lock();
  struct CUstream_st *s = find_stream((CUstream)stream, 0);
  if (s == NULL || s->device < 0) {
    fprintf(stderr, "sim_cuda: sim_cuda_stream_destroy: %p is not a live created stream\n", stream);
  } else {
    complete(s);
    s->live = 0;
  }
  unlock();
}

SIM_CUDA_API void sim_cuda_hold(void *stream) {
  lock();
  struct CUstream_st *s = find_stream((CUstream)stream, 0);
  if (s == NULL) fprintf(stderr, "sim_cuda: sim_cuda_hold: %p is not a live stream\n", stream);
  else s->held = 1;
  unlock();
}

SIM_CUDA_API void sim_cuda_release(void *stream) {
  lock();
  struct CUstream_st *s = find_stream((CUstream)stream, 1);
  if (s == NULL) fprintf(stderr, "sim_cuda: sim_cuda_release: %p is not a stream\n", stream);
  else complete(s);
  unlock();
}

SIM_CUDA_API long sim_cuda_waits(void *consumer, void *producer) {
  long n = 0;
  lock();
  struct CUstream_st *c = find_stream((CUstream)consumer, 1), *p = find_stream((CUstream)producer, 1);
  for (size_t i = 0; c != NULL && p != NULL && i < g_nwaits; i++)
    if (g_waits[i].consumer == c && g_waits[i].producer == p) n = g_waits[i].count;
  unlock();
  return n;
}

SIM_CUDA_API void *sim_cuda_last_free_stream(void) {
  lock();
  void *s = g_last_free_stream;
  unlock();
  return s;
}

SIM_CUDA_API long sim_cuda_frees_waiting(void) {
  lock();
  long n = g_frees_waiting;
  unlock();
  return n;
}

SIM_CUDA_API unsigned long long sim_cuda_pool_release_threshold(void *pool) {
  lock();
  struct CUmemPoolHandle_st *p = find_pool((CUmemoryPool)pool);
  unsigned long long threshold = p != NULL ? p->release_threshold : 0;
  unlock();
  return threshold;
}

SIM_CUDA_API int sim_cuda_pool_count(void) {
  int n = 0;
  lock();
  for (struct CUmemPoolHandle_st *p = g_pools; p != NULL; p = p->next) n += p->live;
  unlock();
  return n;
}

SIM_CUDA_API int sim_cuda_alloc_device(void *ptr) {
  lock();
  struct sim_alloc *a = find_alloc(ptr, 1);
  int device = a != NULL ? a->device : -1;
  unlock();
  return device;
}

SIM_CUDA_API void *sim_cuda_alloc_stream(void *ptr) {
  lock();
  struct sim_alloc *a = find_alloc(ptr, 1);
  void *stream = a != NULL && a->stream_ordered ? (void *)a->stream : NULL;
  unlock();
  return stream;
}

SIM_CUDA_API int sim_cuda_retains(int device) {
  lock();
  int retains = valid_device(device) ? g_ctx[device].retains : -1;
  unlock();
  return retains;
}

SIM_CUDA_API void *sim_cuda_alloc_pool(void *ptr) {
  lock();
  struct sim_alloc *a = find_alloc(ptr, 1);
  void *pool = a != NULL ? (void *)a->pool : NULL;
  unlock();
  return pool;
}

SIM_CUDA_API int sim_cuda_pool_access(void *pool, int device) {
  lock();
  struct CUmemPoolHandle_st *p = find_pool((CUmemoryPool)pool);
  int flags = p != NULL && valid_device(device) ? (device == p->device ? 3 : p->access[device]) : -1;
  unlock();
  return flags;
}

SIM_CUDA_API void sim_cuda_set_capturing(void *stream, int capturing) {
  lock();
  struct CUstream_st *s = find_stream((CUstream)stream, 0);
  if (s != NULL) s->capturing = capturing;
  unlock();
}

SIM_CUDA_API int sim_cuda_use(void *stream, void *ptr, size_t bytes, int write) {
  lock();
  struct CUstream_st *s = find_stream((CUstream)stream, 0);
  struct sim_alloc *a = find_alloc(ptr, bytes);
  int rc = -1;
  if (s == NULL || a == NULL || bytes == 0) {
    fprintf(stderr, "sim_cuda: sim_cuda_use: stream %p is not live, or [%p, +%zu) is not inside one live allocation\n",
            stream, ptr, bytes);
  } else {
    use_range(FN_COUNT, s, a, (size_t)((char *)ptr - a->base), bytes, write != 0);
    rc = 0;
  }
  unlock();
  return rc;
}

SIM_CUDA_API long sim_cuda_unordered_reuses(void) {
  lock();
  long n = g_unordered;
  unlock();
  return n;
}

SIM_CUDA_API int sim_cuda_alloc_captured(void *ptr) {
  lock();
  struct sim_alloc *a = find_alloc(ptr, 1);
  int captured = a != NULL ? a->captured : -1;
  unlock();
  return captured;
}

SIM_CUDA_API void sim_cuda_deinitialize(void) {
  lock();
  g_deinitialized = 1;
  unlock();
}

/* SIM_CUDA_EXIT_REPORT=1: what is still allocated when the library is unloaded at exit (after
 * every atexit function), as compute-sanitizer's leak check reports it. */
__attribute__((destructor)) static void report_at_exit(void) {
  const char *report = getenv("SIM_CUDA_EXIT_REPORT");
  if (report == NULL || strcmp(report, "1") != 0) return;
  long count[3] = {0, 0, 0};
  long long bytes[3] = {0, 0, 0};
  pthread_mutex_lock(&g_lock);
  for (int kind = 0; kind < 3; kind++) tally(kind, -1, &count[kind], &bytes[kind]);
  pthread_mutex_unlock(&g_lock);
  fprintf(stderr, "sim_cuda: at exit: %ld device (%lld bytes), %ld pinned, %ld managed allocations live\n", count[0],
          bytes[0], count[1], count[2]);
}

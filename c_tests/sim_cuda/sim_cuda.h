/* sim_cuda: a simulated CUDA driver (libcuda.so / libcuda.so.1) for machines without a GPU.
 *
 * It implements the subset of the driver API that dlpx calls, with host memory standing in for
 * device memory, and is strict where a real driver would be lenient or would fail later: calls
 * that need a current context get CUDA_ERROR_INVALID_CONTEXT without one, streams and
 * allocations must belong to the current context's device, stale handles are
 * CUDA_ERROR_INVALID_HANDLE. Every such misuse is counted (sim_cuda_misuses) and logged to
 * stderr with a "sim_cuda:" prefix (SIM_CUDA_VERBOSE=0 silences the log).
 *
 * Configuration, read from the environment once, at the first cuInit (or the first control
 * call that needs it):
 *   SIM_CUDA_DEVICES         number of devices (default 2, at most 64; 0: cuInit fails with
 *                            CUDA_ERROR_NO_DEVICE as a real driver does on a GPU-less machine)
 *   SIM_CUDA_DRIVER_VERSION  what cuDriverGetVersion reports (default 12080)
 *   SIM_CUDA_MEMORY          bytes of device memory per device (default 1 << 30)
 *   SIM_CUDA_NO_POOLS        "1": no stream-ordered allocator (attribute 115 reads 0;
 *                            cuMemAllocAsync, cuMemPoolCreate, cuMemAllocFromPoolAsync and
 *                            cuDeviceGetDefaultMemPool return CUDA_ERROR_NOT_SUPPORTED)
 *   SIM_CUDA_VERBOSE         "0": do not log misuse to stderr
 *   SIM_CUDA_EXIT_REPORT     "1": when the library is unloaded at exit (after every atexit
 *                            function), print the allocations still live to stderr:
 *                            "sim_cuda: at exit: N device (B bytes), N pinned, N managed
 *                            allocations live" (what compute-sanitizer's leak check reports)
 *
 * The control API below is for tests. It is exported by the same library, so a test reaches the
 * very instance dlpx loaded either by linking with it (its SONAME is libcuda.so.1 and libcuda.so
 * is a symlink to it, so dlopen of either name finds the loaded copy), by dlsym on a dlopen
 * handle, or from Python with ctypes.CDLL("libcuda.so"). Every function is thread-safe.
 * Stream handles are the CUstream values: NULL and (void*)0x1 are the legacy default stream (one
 * for the whole simulated machine), (void*)0x2 the calling thread's per-thread default stream.
 *
 * Define SIM_CUDA_DECLARE_DRIVER before including this header to also get the simulated driver
 * API's types and prototypes (never together with the real cuda.h). */
#ifndef DLPX_SIM_CUDA_H_
#define DLPX_SIM_CUDA_H_

#include <stddef.h>

#ifndef SIM_CUDA_API
#define SIM_CUDA_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Allocation kinds for sim_cuda_live / sim_cuda_live_bytes. */
#define SIM_CUDA_DEVICE 0  /* cuMemAlloc_v2, cuMemAllocAsync, cuMemAllocFromPoolAsync */
#define SIM_CUDA_HOST 1    /* cuMemHostAlloc */
#define SIM_CUDA_MANAGED 2 /* cuMemAllocManaged */

/* The next `times` calls of driver function `function` (its exported name; a trailing "_v2" may
 * be left off) return `code` (any int, even one unknown to CUDA) and do nothing else. times <= 0
 * cancels a pending injection. An unknown function name is logged and ignored. */
SIM_CUDA_API void sim_cuda_fail(const char *function, int code, int times);

/* Calls of driver function `function` since the last reset, failed ones included; -1 for a name
 * that is not a simulated driver function. */
SIM_CUDA_API long sim_cuda_calls(const char *function);
/* Zeroes every call counter, sim_cuda_misuses, sim_cuda_frees_waiting, sim_cuda_unordered_reuses
 * and the wait counters (allocations, streams, events, pools and stream order are untouched). */
SIM_CUDA_API void sim_cuda_reset_counts(void);
/* Calls refused (or, for cuStreamWaitEvent on a never-recorded event, accepted) as misuse since
 * the last reset; each was also logged. */
SIM_CUDA_API long sim_cuda_misuses(void);

/* The calling thread's context stack depth (pushes minus pops). */
SIM_CUDA_API int sim_cuda_context_depth(void);

/* Live allocations of `kind` (SIM_CUDA_DEVICE/HOST/MANAGED) on `device` (-1: all devices) and
 * their requested bytes; -1 for an unknown kind. Host and managed allocations belong to the
 * device whose context was current when they were made. */
SIM_CUDA_API long sim_cuda_live(int kind, int device);
SIM_CUDA_API long long sim_cuda_live_bytes(int kind, int device);
/* Events and created streams (cuStreamCreate and sim_cuda_stream_create) not yet destroyed. */
SIM_CUDA_API long sim_cuda_live_events(void);
SIM_CUDA_API long sim_cuda_live_streams(void);

/* A stream on `device`, created without a context (NULL for an invalid device), and its
 * destruction (the same as cuStreamDestroy_v2, without counting a driver call). The stream is a
 * blocking one (cuStreamCreate's CU_STREAM_DEFAULT): it and the legacy stream wait for each
 * other's work; _nonblocking makes one that does not (CU_STREAM_NON_BLOCKING, as torch's are). */
SIM_CUDA_API void *sim_cuda_stream_create(int device);
SIM_CUDA_API void *sim_cuda_stream_create_nonblocking(int device);
SIM_CUDA_API void sim_cuda_stream_destroy(void *stream);

/* While a stream is held, cuStreamQuery on it is CUDA_ERROR_NOT_READY and every event recorded
 * on it stays NOT_READY until the stream is released or synchronized (cuStreamSynchronize,
 * cuCtxSynchronize) or destroyed: this models work that has not finished yet. */
SIM_CUDA_API void sim_cuda_hold(void *stream);
SIM_CUDA_API void sim_cuda_release(void *stream);

/* How many cuStreamWaitEvent calls made `consumer` wait on an event whose last record was on
 * `producer` (NULL and 0x1 are the same stream here). */
SIM_CUDA_API long sim_cuda_waits(void *consumer, void *producer);

/* The stream handle (as passed) of the last successful cuMemFreeAsync; NULL before any. */
SIM_CUDA_API void *sim_cuda_last_free_stream(void);
/* Successful cuMemFreeAsync calls whose stream had, after the allocation was made and before
 * the free, waited (cuStreamWaitEvent) on an event last recorded on a different stream. */
SIM_CUDA_API long sim_cuda_frees_waiting(void);

/* The release threshold (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) of a pool, 0 for an unknown one;
 * the number of live pools made with cuMemPoolCreate (default pools are not counted). */
SIM_CUDA_API unsigned long long sim_cuda_pool_release_threshold(void *pool);
SIM_CUDA_API int sim_cuda_pool_count(void);

/* The device of the live allocation (of any kind) containing `ptr`, -1 if none; the stream
 * handle (as passed) a stream-ordered allocation was made on, NULL if none or not stream-ordered. */
SIM_CUDA_API int sim_cuda_alloc_device(void *ptr);
SIM_CUDA_API void *sim_cuda_alloc_stream(void *ptr);

/* The pool a stream-ordered allocation containing `ptr` came from (NULL: none, or not pooled). */
SIM_CUDA_API void *sim_cuda_alloc_pool(void *ptr);

/* The access (CUmemAccess_flags: 0 none, 1 read, 3 read-write) `device` has to `pool`'s memory;
 * the owner always has 3; -1 for an unknown pool or device. */
SIM_CUDA_API int sim_cuda_pool_access(void *pool, int device);

/* Marks a stream as being captured into a CUDA graph (cuStreamIsCapturing reports it), or not.
 * While it is, cuMemFreeAsync on it of memory allocated before is refused as misuse. */
SIM_CUDA_API void sim_cuda_set_capturing(void *stream, int capturing);
/* 1 when the live allocation containing `ptr` was made on a stream being captured, 0 when not,
 * -1 when there is none. */
SIM_CUDA_API int sim_cuda_alloc_captured(void *ptr);

/* Stream order. The simulator keeps, for every stream, which work of every other stream its
 * next operation is ordered after (event records and waits, the legacy stream's implicit
 * synchronisation with blocking streams, and what the host has seen complete: a successful
 * cuEventQuery or cuStreamQuery, cuEventSynchronize, cuStreamSynchronize, cuCtxSynchronize),
 * and, for every allocation, which stream last wrote each byte range and which read it since,
 * up to which of their operations. sim_cuda_use enqueues an operation on `stream` (the calling
 * thread's for 0x2) that reads (write = 0) or writes [ptr, ptr + bytes), as a kernel would; the
 * driver's copies are such operations too. A write not ordered after every earlier use of its
 * bytes, or a read not ordered after their last write, is an unordered reuse: counted and
 * logged. A test that orders its own work sees one only when memory was handed out again before
 * its previous user's work was known to be done — a caching allocator's bug; the driver's own
 * reuse is ordered by the driver (a new allocation starts with no uses). Returns 0, or -1 when
 * the stream is not live or the range is not inside one live allocation. */
SIM_CUDA_API int sim_cuda_use(void *stream, void *ptr, size_t bytes, int write);
/* Unordered reuses since the last reset. */
SIM_CUDA_API long sim_cuda_unordered_reuses(void);

/* From now on every driver function returns CUDA_ERROR_DEINITIALIZED and does nothing, as a
 * driver does once the process's teardown has shut it down (not counted as misuse). */
SIM_CUDA_API void sim_cuda_deinitialize(void);

/* The primary context retain count of `device` (-1 for an invalid device). */
SIM_CUDA_API int sim_cuda_retains(int device);

#ifdef SIM_CUDA_DECLARE_DRIVER
/* ---- The simulated driver API (names and values as in CUDA 12's cuda.h) ---- */
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmemPoolHandle_st *CUmemoryPool;

typedef struct CUmemPoolProps_st {
  int allocType;   /* CU_MEM_ALLOCATION_TYPE_PINNED = 1 */
  int handleTypes; /* CUmemAllocationHandleType */
  struct {
    int type; /* CU_MEM_LOCATION_TYPE_DEVICE = 1 */
    int id;
  } location;
  void *win32SecurityAttributes;
  size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
} CUmemPoolProps;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_DEINITIALIZED = 4,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_UNKNOWN = 999
};

typedef struct CUmemAccessDesc_st {
  struct {
    int type; /* CU_MEM_LOCATION_TYPE_DEVICE = 1 */
    int id;
  } location;
  int flags; /* CU_MEM_ACCESS_FLAGS_PROT_NONE 0, _READ 1, _READWRITE 3 */
} CUmemAccessDesc;

#define SIM_CU_STREAM_LEGACY ((CUstream)0x1)
#define SIM_CU_STREAM_PER_THREAD ((CUstream)0x2)
#define SIM_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define SIM_CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED 115
#define SIM_CU_MEMPOOL_ATTR_RELEASE_THRESHOLD 4

SIM_CUDA_API CUresult cuInit(unsigned int flags);
SIM_CUDA_API CUresult cuDriverGetVersion(int *version);
SIM_CUDA_API CUresult cuGetErrorName(CUresult error, const char **name);
SIM_CUDA_API CUresult cuGetErrorString(CUresult error, const char **text);
SIM_CUDA_API CUresult cuDeviceGetCount(int *count);
SIM_CUDA_API CUresult cuDeviceGet(CUdevice *device, int ordinal);
SIM_CUDA_API CUresult cuDeviceGetAttribute(int *value, int attrib, CUdevice device);
SIM_CUDA_API CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice device);
SIM_CUDA_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device);
SIM_CUDA_API CUresult cuDevicePrimaryCtxGetState(CUdevice device, unsigned int *flags, int *active);
SIM_CUDA_API CUresult cuCtxPushCurrent_v2(CUcontext ctx);
SIM_CUDA_API CUresult cuCtxPopCurrent_v2(CUcontext *ctx);
SIM_CUDA_API CUresult cuCtxGetCurrent(CUcontext *ctx);
SIM_CUDA_API CUresult cuCtxGetDevice(CUdevice *device);
SIM_CUDA_API CUresult cuCtxSynchronize(void);
SIM_CUDA_API CUresult cuStreamCreate(CUstream *stream, unsigned int flags);
SIM_CUDA_API CUresult cuStreamDestroy_v2(CUstream stream);
SIM_CUDA_API CUresult cuStreamQuery(CUstream stream);
SIM_CUDA_API CUresult cuStreamSynchronize(CUstream stream);
SIM_CUDA_API CUresult cuStreamGetCtx(CUstream stream, CUcontext *ctx);
SIM_CUDA_API CUresult cuStreamIsCapturing(CUstream stream, int *captureStatus);
SIM_CUDA_API CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags);
SIM_CUDA_API CUresult cuEventCreate(CUevent *event, unsigned int flags);
SIM_CUDA_API CUresult cuEventRecord(CUevent event, CUstream stream);
SIM_CUDA_API CUresult cuEventQuery(CUevent event);
SIM_CUDA_API CUresult cuEventSynchronize(CUevent event);
SIM_CUDA_API CUresult cuEventDestroy_v2(CUevent event);
SIM_CUDA_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
SIM_CUDA_API CUresult cuMemFree_v2(CUdeviceptr dptr);
SIM_CUDA_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream stream);
SIM_CUDA_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream);
SIM_CUDA_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
SIM_CUDA_API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags);
SIM_CUDA_API CUresult cuMemFreeHost(void *p);
SIM_CUDA_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props);
SIM_CUDA_API CUresult cuMemPoolDestroy(CUmemoryPool pool);
SIM_CUDA_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void *value);
SIM_CUDA_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, int attr, void *value);
SIM_CUDA_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep);
SIM_CUDA_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice device);
SIM_CUDA_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream stream);
SIM_CUDA_API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, CUstream stream);
SIM_CUDA_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes, CUstream stream);
SIM_CUDA_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
SIM_CUDA_API CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev);
SIM_CUDA_API CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count);
SIM_CUDA_API CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr ptr);
#endif /* SIM_CUDA_DECLARE_DRIVER */

#ifdef __cplusplus
}
#endif

#endif /* DLPX_SIM_CUDA_H_ */

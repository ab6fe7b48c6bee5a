/*
 * Times every DLPackExchangeAPI entry point of several producers in one process, from C, with
 * the GIL held, as a kernel library would call them.
 *
 *   exchange_bench [--quick] dlpx.Tensor torch.Tensor ...
 *
 * Each type's table is found the way a consumer finds it (the capsule
 * __dlpack_c_exchange_api__, else the int __c_dlpack_exchange_api__). A measurement is the
 * best of several repeats of a timed loop; results are ns per call. The first type is the one
 * the ratios are about (dlpx); the second is the reference (torch).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dlpx/dlpx.h"
#include "bench_python.h"

#define MAX_TYPES 4
#define MEASURES 16

static long g_iterations = 1000000;
static int g_repeats = 5;

typedef struct {
  const char *name;
  const DLPackExchangeAPI *api;
  PyObject *sample;   /* a 16-element float32 CPU tensor of this type */
  PyObject *by_ndim[4];
  double ns[MEASURES];
} Producer;

static const int k_ndims[4] = {1, 4, 16, 32};

static PyObject *make_sample(const char *type_name, int ndim) {
  char shape[256] = "(16,)";
  if (ndim > 1) {
    /* 16 elements spread over ndim dims: (2,2,2,2,1,1,...) */
    int pos = snprintf(shape, sizeof shape, "(");
    for (int i = 0; i < ndim; ++i) pos += snprintf(shape + pos, sizeof shape - pos, "%d,", i < 4 ? 2 : 1);
    snprintf(shape + pos, sizeof shape - pos, ")");
  }
  char expression[512];
  if (strcmp(type_name, "dlpx.Tensor") == 0)
    snprintf(expression, sizeof expression, "dlpx.empty(%s, 'float32')", shape);
  else if (strcmp(type_name, "torch.Tensor") == 0)
    snprintf(expression, sizeof expression, "torch.empty(%s, dtype=torch.float32)", shape);
  else
    die("unknown type (known: dlpx.Tensor, torch.Tensor)");
  return eval(expression);
}

static PyObject *type_of(const char *type_name) {
  char expression[256];
  snprintf(expression, sizeof expression, "%s", type_name);
  return eval(expression);
}

/* ---- the measured loops ---------------------------------------------------------------- */

static DLTensor prototype_16 = {0};
static int64_t shape_16[1] = {16};

static double bench_alloc_free(const DLPackExchangeAPI *api) {
  double t0 = now_ns();
  for (long i = 0; i < g_iterations; ++i) {
    DLManagedTensorVersioned *out = NULL;
    if (api->managed_tensor_allocator(&prototype_16, &out, NULL, NULL) != 0) die("allocator failed");
    out->deleter(out);
  }
  return (now_ns() - t0) / (double)g_iterations;
}

static double bench_alloc_to_py(const DLPackExchangeAPI *api) {
  double t0 = now_ns();
  for (long i = 0; i < g_iterations; ++i) {
    DLManagedTensorVersioned *out = NULL;
    void *object = NULL;
    if (api->managed_tensor_allocator(&prototype_16, &out, NULL, NULL) != 0) die("allocator failed");
    if (api->managed_tensor_to_py_object_no_sync(out, &object) != 0) die("to_py failed");
    Py_DECREF((PyObject *)object);
  }
  return (now_ns() - t0) / (double)g_iterations;
}

static double bench_view(const DLPackExchangeAPI *api, PyObject *sample) {
  DLTensor view;
  int64_t sink = 0;
  double t0 = now_ns();
  for (long i = 0; i < g_iterations; ++i) {
    if (api->dltensor_from_py_object_no_sync(sample, &view) != 0) die("view failed");
    sink += view.ndim;
  }
  double ns = (now_ns() - t0) / (double)g_iterations;
  if (sink == 42) puts("");
  return ns;
}

static double bench_managed(const DLPackExchangeAPI *api, PyObject *sample) {
  double t0 = now_ns();
  for (long i = 0; i < g_iterations; ++i) {
    DLManagedTensorVersioned *out = NULL;
    if (api->managed_tensor_from_py_object_no_sync(sample, &out) != 0) die("from_py failed");
    out->deleter(out);
  }
  return (now_ns() - t0) / (double)g_iterations;
}

static double bench_round_trip(const DLPackExchangeAPI *api, PyObject *sample) {
  double t0 = now_ns();
  for (long i = 0; i < g_iterations; ++i) {
    DLManagedTensorVersioned *out = NULL;
    void *object = NULL;
    if (api->managed_tensor_from_py_object_no_sync(sample, &out) != 0) die("from_py failed");
    if (api->managed_tensor_to_py_object_no_sync(out, &object) != 0) die("to_py failed");
    Py_DECREF((PyObject *)object);
  }
  return (now_ns() - t0) / (double)g_iterations;
}

static double bench_stream(const DLPackExchangeAPI *api) {
  void *stream = NULL;
  uintptr_t sink = 0;
  double t0 = now_ns();
  for (long i = 0; i < g_iterations; ++i) {
    if (api->current_work_stream(kDLCPU, 0, &stream) != 0) die("current_work_stream failed");
    sink += (uintptr_t)stream;
  }
  double ns = (now_ns() - t0) / (double)g_iterations;
  if (sink == 42) puts("");
  return ns;
}

typedef struct {
  const DLPackExchangeAPI *api;
  double ns;
} ThreadArg;

static void *alloc_free_thread(void *p) {
  ThreadArg *arg = (ThreadArg *)p;
  arg->ns = bench_alloc_free(arg->api);
  return NULL;
}

/* Allocator + deleter on 2 threads at once, GIL released (as tvm-ffi calls it): ns per call per thread. */
static double bench_alloc_free_2threads(const DLPackExchangeAPI *api) {
  ThreadArg args[2] = {{api, 0}, {api, 0}};
  pthread_t threads[2];
  Py_BEGIN_ALLOW_THREADS
  for (int i = 0; i < 2; ++i) pthread_create(&threads[i], NULL, alloc_free_thread, &args[i]);
  for (int i = 0; i < 2; ++i) pthread_join(threads[i], NULL);
  Py_END_ALLOW_THREADS
  return args[0].ns > args[1].ns ? args[0].ns : args[1].ns;
}

/* ---- memory per tensor ------------------------------------------------------------------ */

static size_t heap_in_use(void) {
  struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd; /* malloc'd bytes + mmap'd blocks (CPython's arenas among them) */
}

#define MEMORY_COUNT 20000

/* Heap bytes per live Python tensor made by allocator + to_py (shape: ndim dims, 16 elements). */
static double bytes_per_tensor(const DLPackExchangeAPI *api, int ndim) {
  static PyObject *held[MEMORY_COUNT];
  int64_t shape[32];
  for (int i = 0; i < ndim; ++i) shape[i] = i < 4 ? 2 : 1;
  if (ndim == 1) shape[0] = 16;
  DLTensor proto = prototype_16;
  proto.ndim = ndim;
  proto.shape = shape;
  size_t before = heap_in_use();
  for (int i = 0; i < MEMORY_COUNT; ++i) {
    DLManagedTensorVersioned *out = NULL;
    void *object = NULL;
    if (api->managed_tensor_allocator(&proto, &out, NULL, NULL) != 0) die("allocator failed");
    if (api->managed_tensor_to_py_object_no_sync(out, &object) != 0) die("to_py failed");
    held[i] = (PyObject *)object;
  }
  double per = (double)(heap_in_use() - before) / MEMORY_COUNT;
  for (int i = 0; i < MEMORY_COUNT; ++i) Py_DECREF(held[i]);
  return per;
}

/* Heap bytes per live exported managed tensor of one Python tensor. */
static double bytes_per_export(const DLPackExchangeAPI *api, PyObject *sample) {
  static DLManagedTensorVersioned *held[MEMORY_COUNT];
  size_t before = heap_in_use();
  for (int i = 0; i < MEMORY_COUNT; ++i)
    if (api->managed_tensor_from_py_object_no_sync(sample, &held[i]) != 0) die("from_py failed");
  double per = (double)(heap_in_use() - before) / MEMORY_COUNT;
  for (int i = 0; i < MEMORY_COUNT; ++i) held[i]->deleter(held[i]);
  return per;
}

static void print_memory(Producer *producers, int n) {
  printf("\nheap bytes per live object (16 elements = 64 bytes of data included in tensors), by ndim\n\n");
  printf("| %-34s |", "object");
  for (int i = 0; i < n; ++i) printf(" %12s |", producers[i].name);
  printf("\n|------------------------------------|");
  for (int i = 0; i < n; ++i) printf("--------------|");
  printf("\n");
  for (int k = 0; k < 4; ++k) {
    char label[64];
    snprintf(label, sizeof label, "tensor (allocator + to_py), ndim %d", k_ndims[k]);
    printf("| %-34s |", label);
    for (int i = 0; i < n; ++i) printf(" %12.0f |", bytes_per_tensor(producers[i].api, k_ndims[k]));
    printf("\n");
  }
  for (int k = 0; k < 4; ++k) {
    char label[64];
    snprintf(label, sizeof label, "exported managed tensor, ndim %d", k_ndims[k]);
    printf("| %-34s |", label);
    for (int i = 0; i < n; ++i) printf(" %12.0f |", bytes_per_export(producers[i].api, producers[i].by_ndim[k]));
    printf("\n");
  }
}

/* ---- driver ---------------------------------------------------------------------------- */

enum {
  M_VIEW, M_MANAGED, M_ROUND_TRIP, M_ALLOC, M_ALLOC_TO_PY, M_STREAM, M_ALLOC_2T,
  M_VIEW_ND0, M_MANAGED_ND0 = M_VIEW_ND0 + 4, M_COUNT = M_MANAGED_ND0 + 4
};

static double best_of(double (*run)(const Producer *, int), const Producer *p, int arg) {
  double best = 1e30;
  for (int r = 0; r < g_repeats; ++r) {
    double ns = run(p, arg);
    if (ns < best) best = ns;
  }
  return best;
}

static double run_measure(const Producer *p, int m) {
  const DLPackExchangeAPI *api = p->api;
  switch (m) {
    case M_VIEW: return bench_view(api, p->sample);
    case M_MANAGED: return bench_managed(api, p->sample);
    case M_ROUND_TRIP: return bench_round_trip(api, p->sample);
    case M_ALLOC: return bench_alloc_free(api);
    case M_ALLOC_TO_PY: return bench_alloc_to_py(api);
    case M_STREAM: return bench_stream(api);
    case M_ALLOC_2T: return bench_alloc_free_2threads(api);
    default:
      if (m >= M_VIEW_ND0 && m < M_VIEW_ND0 + 4) return bench_view(api, p->by_ndim[m - M_VIEW_ND0]);
      return bench_managed(api, p->by_ndim[m - M_MANAGED_ND0]);
  }
}

typedef struct {
  int measure;
  const char *label;
  double target; /* ratio target (<= target), or absolute ns target when absolute != 0 */
  int absolute;
} Row;

int main(int argc, char **argv) {
  Producer producers[MAX_TYPES];
  int n = 0;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--quick") == 0) {
      g_iterations = 100000;
      g_repeats = 3;
    } else if (n < MAX_TYPES) {
      producers[n++].name = argv[i];
    }
  }
  if (n == 0) {
    fprintf(stderr, "usage: exchange_bench [--quick] dlpx.Tensor torch.Tensor\n");
    return 2;
  }
  if (MEASURES < M_COUNT) die("MEASURES too small");
  Py_Initialize();
  prototype_16.device.device_type = kDLCPU;
  prototype_16.ndim = 1;
  prototype_16.dtype.code = kDLFloat;
  prototype_16.dtype.bits = 32;
  prototype_16.dtype.lanes = 1;
  prototype_16.shape = shape_16;

  for (int i = 0; i < n; ++i) {
    PyObject *type = type_of(producers[i].name);
    producers[i].api = find_table(type);
    if (!producers[i].api) die(dlpx_last_error());
    Py_DECREF(type);
    producers[i].sample = make_sample(producers[i].name, 1);
    for (int k = 0; k < 4; ++k) producers[i].by_ndim[k] = make_sample(producers[i].name, k_ndims[k]);
    for (int m = 0; m < M_COUNT; ++m) {
      if (m == M_VIEW || (m >= M_VIEW_ND0 && m < M_VIEW_ND0 + 4)) {
        if (!producers[i].api->dltensor_from_py_object_no_sync) {
          producers[i].ns[m] = -1;
          continue;
        }
      }
      producers[i].ns[m] = best_of(run_measure, &producers[i], m);
    }
  }

  const Row rows[] = {
    {M_VIEW, "dltensor_from_py_object_no_sync", 0.25, 0},
    {M_MANAGED, "managed from PyObject + deleter", 0.5, 0},
    {M_ROUND_TRIP, "from + to PyObject round trip", 0.33, 0},
    {M_ALLOC, "allocator + deleter", 0.33, 0},
    {M_ALLOC_TO_PY, "allocator + to_py + decref", 0.33, 0},
    {M_STREAM, "current_work_stream(kDLCPU)", 5.0, 1},
    {M_ALLOC_2T, "allocator + deleter, 2 threads", 0, 0},
    {M_VIEW_ND0 + 0, "view, ndim 1", 0, 0},
    {M_VIEW_ND0 + 1, "view, ndim 4", 0, 0},
    {M_VIEW_ND0 + 2, "view, ndim 16", 0, 0},
    {M_VIEW_ND0 + 3, "view, ndim 32", 0, 0},
    {M_MANAGED_ND0 + 0, "managed + deleter, ndim 1", 0, 0},
    {M_MANAGED_ND0 + 1, "managed + deleter, ndim 4", 0, 0},
    {M_MANAGED_ND0 + 2, "managed + deleter, ndim 16", 0, 0},
    {M_MANAGED_ND0 + 3, "managed + deleter, ndim 32", 0, 0},
  };
  printf("\n16-element float32 CPU tensor, GIL held, best of %d x %ld calls, ns per call\n\n", g_repeats, g_iterations);
  printf("| %-34s |", "entry point");
  for (int i = 0; i < n; ++i) printf(" %12s |", producers[i].name);
  if (n >= 2) printf(" %s / %s | target | |", producers[0].name, producers[1].name);
  printf("\n|%s|", "------------------------------------");
  for (int i = 0; i < n; ++i) printf("--------------|");
  if (n >= 2) printf("------|--------|---|");
  printf("\n");
  int missed = 0;
  for (size_t r = 0; r < sizeof rows / sizeof rows[0]; ++r) {
    printf("| %-34s |", rows[r].label);
    for (int i = 0; i < n; ++i) {
      double ns = producers[i].ns[rows[r].measure];
      if (ns < 0) printf(" %12s |", "n/a");
      else printf(" %12.1f |", ns);
    }
    if (n >= 2) {
      double a = producers[0].ns[rows[r].measure], b = producers[1].ns[rows[r].measure];
      double ratio = (a >= 0 && b > 0) ? a / b : -1;
      if (ratio >= 0) printf(" %5.3f |", ratio);
      else printf(" %5s |", "n/a");
      if (rows[r].absolute) {
        int ok = a <= rows[r].target;
        missed += !ok;
        printf(" <= %.0f ns | %s |", rows[r].target, ok ? "ok" : "MISSED");
      } else if (rows[r].target > 0) {
        int ok = ratio >= 0 && ratio <= rows[r].target;
        missed += !ok;
        printf(" <= %.2f | %s |", rows[r].target, ok ? "ok" : "MISSED");
      } else {
        printf(" | |");
      }
    }
    printf("\n");
  }
  printf("\ntargets missed: %d\n", missed);
  print_memory(producers, n);
  for (int i = 0; i < n; ++i) {
    Py_DECREF(producers[i].sample);
    for (int k = 0; k < 4; ++k) Py_DECREF(producers[i].by_ndim[k]);
  }
  Py_Finalize();
  return 0;
}

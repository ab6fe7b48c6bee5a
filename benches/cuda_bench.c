/*
 * CUDA rows of the exchange-table benchmark: allocator + deleter on the GPU (16 floats and
 * 64 MiB), pinned host memory after warm-up, and current_work_stream(kDLCUDA, 0), for dlpx's
 * table beside torch's, from C with the GIL held, in one run.
 *
 *   cuda_bench [--quick]
 *
 * A measurement is the best of several repeats of a timed loop, each preceded by one untimed
 * call (warm-up: pools and caches filled) and followed by an untimed device synchronisation,
 * so the loops measure what the caller waits for. A producer whose allocator refuses a device
 * shows n/a with its reason. Where no GPU is visible to torch only dlpx's rows are measured.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dlpx/dlpx.h"
#include "bench_python.h"

static long g_iterations = 200000;
static int g_repeats = 5;

enum { M_CUDA_16, M_CUDA_64M, M_PINNED_16, M_PINNED_64M, M_STREAM, M_STREAM_SET, M_COUNT };

typedef struct {
  const char *name;
  const DLPackExchangeAPI *api;
  double ns[M_COUNT];
  char why[M_COUNT][160];
} Producer;

static void synchronize(int have_torch_gpu) {
  if (have_torch_gpu) Py_DECREF(eval("torch.cuda.synchronize()"));
}

static void set_failure(void *ctx, const char *kind, const char *message) {
  snprintf((char *)ctx, 160, "%s: %s", kind, message);
}

/* ns per allocator + deleter of `numel` float32 on `device`, or -1 with the reason in `why`. */
static double bench_alloc(const DLPackExchangeAPI *api, DLDevice device, int64_t numel, long iterations, char *why) {
  int64_t shape[1];
  shape[0] = numel;
  DLTensor proto;
  memset(&proto, 0, sizeof proto);
  proto.device = device;
  proto.ndim = 1;
  proto.dtype.code = kDLFloat;
  proto.dtype.bits = 32;
  proto.dtype.lanes = 1;
  proto.shape = shape;
  DLManagedTensorVersioned *out = NULL;
  if (api->managed_tensor_allocator(&proto, &out, why, set_failure) != 0) {
    PyErr_Clear();
    return -1;
  }
  out->deleter(out); /* warm-up */
  double t0 = now_ns();
  for (long i = 0; i < iterations; ++i) {
    if (api->managed_tensor_allocator(&proto, &out, why, set_failure) != 0) die(why);
    out->deleter(out);
  }
  return (now_ns() - t0) / (double)iterations;
}

static double bench_stream(const DLPackExchangeAPI *api, long iterations, char *why) {
  void *stream = NULL;
  if (api->current_work_stream(kDLCUDA, 0, &stream) != 0) {
    snprintf(why, 160, "current_work_stream failed");
    PyErr_Clear();
    return -1;
  }
  uintptr_t sink = 0;
  double t0 = now_ns();
  for (long i = 0; i < iterations; ++i) {
    api->current_work_stream(kDLCUDA, 0, &stream);
    sink += (uintptr_t)stream;
  }
  double ns = (now_ns() - t0) / (double)iterations;
  if (sink == 42) puts("");
  return ns;
}

static double measure(const Producer *p, int m, char *why) {
  const DLDevice cuda = {kDLCUDA, 0}, pinned = {kDLCUDAHost, 0};
  switch (m) {
    case M_CUDA_16: return bench_alloc(p->api, cuda, 16, g_iterations, why);
    case M_CUDA_64M: return bench_alloc(p->api, cuda, 16 << 20, g_iterations / 10, why);
    case M_PINNED_16: return bench_alloc(p->api, pinned, 16, g_iterations, why);
    case M_PINNED_64M: return bench_alloc(p->api, pinned, 16 << 20, g_iterations / 10, why);
    case M_STREAM: return bench_stream(p->api, g_iterations * 10, why);
    default: {
      /* a stream made current the framework's own way: dlpx's setter, torch.cuda.set_stream */
      const int is_dlpx = p->api == dlpx_exchange_api();
      void *previous = NULL;
      if (is_dlpx) dlpx_set_current_stream(kDLCUDA, 0, (void *)0x5000, &previous);
      else Py_DECREF(eval("torch.cuda.set_stream(torch.cuda.Stream())"));
      double ns = bench_stream(p->api, g_iterations * 10, why);
      if (is_dlpx) dlpx_set_current_stream(kDLCUDA, 0, previous, NULL);
      else Py_DECREF(eval("torch.cuda.set_stream(torch.cuda.default_stream())"));
      return ns;
    }
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--quick") == 0) {
    g_iterations = 20000;
    g_repeats = 3;
  }
  Py_Initialize();
  PyObject *gpu = eval("torch.cuda.is_available()");
  int have_torch_gpu = PyObject_IsTrue(gpu);
  Py_DECREF(gpu);
  Producer producers[2];
  memset(producers, 0, sizeof producers);
  producers[0].name = "dlpx.Tensor";
  producers[1].name = "torch.Tensor";
  int n = have_torch_gpu ? 2 : 1;
  if (!have_torch_gpu) printf("torch sees no GPU: measuring dlpx only\n");
  for (int i = 0; i < n; ++i) {
    PyObject *type = eval(producers[i].name);
    producers[i].api = find_table(type);
    Py_DECREF(type);
    if (!producers[i].api) die(dlpx_last_error());
    for (int m = 0; m < M_COUNT; ++m) {
      double best = -1;
      for (int r = 0; r < g_repeats; ++r) {
        double ns = measure(&producers[i], m, producers[i].why[m]);
        synchronize(have_torch_gpu);
        if (ns < 0) break;
        if (best < 0 || ns < best) best = ns;
      }
      producers[i].ns[m] = best;
    }
  }

  static const struct {
    int measure;
    const char *label;
    double target;
    int absolute;
  } rows[] = {
    {M_CUDA_16, "allocator + deleter, cuda, 16 floats", 0.5, 0},
    {M_CUDA_64M, "allocator + deleter, cuda, 64 MiB", 0.5, 0},
    {M_PINNED_16, "allocator + deleter, cuda_host, 64 B", 0, 0},
    {M_PINNED_64M, "allocator + deleter, cuda_host, 64 MiB", 0, 0},
    {M_STREAM, "current_work_stream(kDLCUDA, 0)", 5.0, 1},
    {M_STREAM_SET, "current_work_stream, a stream set", 0, 0},
  };
  printf("\nGIL held, best of %d repeats (after a warm-up call), ns per call\n\n", g_repeats);
  printf("| %-40s | %12s | %12s | dlpx / torch | target | |\n", "entry point", "dlpx.Tensor", "torch.Tensor");
  printf("|------------------------------------------|--------------|--------------|------|--------|---|\n");
  int missed = 0;
  for (size_t r = 0; r < sizeof rows / sizeof rows[0]; ++r) {
    double a = producers[0].ns[rows[r].measure], b = n > 1 ? producers[1].ns[rows[r].measure] : -1;
    printf("| %-40s |", rows[r].label);
    for (int i = 0; i < 2; ++i) {
      double ns = i == 0 ? a : b;
      if (ns >= 0) printf(" %12.1f |", ns);
      else printf(" %12s |", "n/a");
    }
    double ratio = (a >= 0 && b > 0) ? a / b : -1;
    if (ratio >= 0) printf(" %5.3f |", ratio);
    else printf(" %5s |", "n/a");
    if (rows[r].absolute) {
      int ok = a >= 0 && a <= rows[r].target;
      missed += !ok;
      printf(" <= %.0f ns | %s |\n", rows[r].target, ok ? "ok" : "MISSED");
    } else if (rows[r].target > 0 && n > 1) {
      int ok = ratio >= 0 && ratio <= rows[r].target;
      missed += !ok;
      printf(" <= %.2f | %s |\n", rows[r].target, ok ? "ok" : "MISSED");
    } else {
      printf(" | |\n");
    }
  }
  for (int i = 0; i < n; ++i)
    for (int m = 0; m < M_COUNT; ++m)
      if (producers[i].ns[m] < 0) printf("%s, %s: %s\n", producers[i].name, rows[m].label, producers[i].why[m]);
  printf("\ntargets missed: %d\n", missed);
  Py_Finalize();
  return 0;
}

/* The block cache's exit hook, against the simulated driver. argv[1]:
 *   "release": blocks the cache keeps go back to the driver at exit, so that a leak check then
 *     (compute-sanitizer's, or this test's own atexit function, registered before dlpx's and so
 *     run after it) sees only the memory a live tensor still holds; a pinned tensor freed after
 *     the hook goes to the driver;
 *   "shut_down": the driver is shut down before dlpx's hook runs (an atexit function registered
 *     after dlpx's runs first): every call then fails, and the hook must still not crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlpx/dlpx.h"
#define SIM_CUDA_DECLARE_DRIVER
#include "sim_cuda/sim_cuda.h"
#include "test_util.h"

static DLManagedTensorVersioned *allocate(int32_t device_type, int64_t nbytes) {
  int64_t shape[1];
  shape[0] = nbytes;
  DLTensor proto = test_prototype(device_type, 0, kDLUInt, 8, 1, shape);
  DLManagedTensorVersioned *out = NULL;
  struct error_record r;
  memset(&r, 0, sizeof r);
  CHECK(dlpx_exchange_api()->managed_tensor_allocator(&proto, &out, &r, record_error) == 0, "allocate: %s", r.message);
  return out;
}

/* Live at exit (a global, so that a leak checker counts it reachable). */
static DLManagedTensorVersioned *kept;

/* A pinned tensor freed after dlpx's hook (an atexit function registered before it): it goes
 * to the driver, not to a cache nobody empties again. */
static DLManagedTensorVersioned *late_pinned;

static void free_late_pinned(void) { late_pinned->deleter(late_pinned); }

/* Runs after dlpx's hook. */
static void leak_check(void) {
  long device = sim_cuda_live(SIM_CUDA_DEVICE, -1), pinned = sim_cuda_live(SIM_CUDA_HOST, -1);
  printf("at exit, after dlpx's hook: %ld device and %ld pinned allocations live\n", device, pinned);
  fflush(stdout);
  if (device != 1 || pinned != 0) _Exit(1); /* the one live tensor only */
}

static void shut_down(void) { sim_cuda_deinitialize(); }

static void survived(void) {
  printf("dlpx's exit hook survived a driver that was shut down\n");
  fflush(stdout);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "release";
  if (strcmp(mode, "release") == 0) atexit(leak_check);
  if (strcmp(mode, "shut_down") == 0) atexit(survived);
  late_pinned = allocate(kDLCUDAHost, 3000);
  if (strcmp(mode, "release") == 0) atexit(free_late_pinned); /* runs after dlpx's hook, before the check */
  kept = allocate(kDLCUDA, 4096);
  for (int i = 0; i < 4; i++) {
    DLManagedTensorVersioned *t = allocate(kDLCUDA, 1000 << i);
    DLManagedTensorVersioned *p = allocate(kDLCUDAHost, 1000 << i);
    t->deleter(t);
    p->deleter(p);
  }
  CHECK(kept != NULL && sim_cuda_live(SIM_CUDA_DEVICE, -1) == 5, "four blocks cached, one live: %ld",
        sim_cuda_live(SIM_CUDA_DEVICE, -1));
  if (strcmp(mode, "shut_down") == 0) atexit(shut_down); /* after dlpx's: runs before it */
  return test_summary();
}

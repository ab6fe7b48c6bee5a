/* A library that says it was built for kernel ABI 3, by hand (no kernel.h): the loader refuses
 * it naming both versions. */
#include <stdint.h>
#include <stddef.h>

struct record {
  uint32_t abi_version;
  uint32_t reserved;
  const void *first;
};

static const struct record record = {3, 0, NULL};

__attribute__((visibility("default"))) const struct record *dlpx_kernel_library(void);
__attribute__((visibility("default"))) const struct record *dlpx_kernel_library(void) { return &record; }

/* A library that includes kernel.h and exports no kernel: "holds no dlpx kernels". */
#include "dlpx/kernel.h"

__attribute__((visibility("default"))) int dlpx_test_not_a_kernel(void);
__attribute__((visibility("default"))) int dlpx_test_not_a_kernel(void) { return 0; }

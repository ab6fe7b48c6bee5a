// Compiled by ctest: to_dltensor of an element type that stores its sub-byte
// value padded (one fp4 a byte, as CUDA's __nv_fp4_e2m1 does) must not
// compile: a DLTensor has no flag to say so, and every reader takes the bytes
// as packed. With DLPX_EXPECT_ERROR, the padded type; the positive control
// converts the packed one (two fp4 a byte, as __nv_fp4x2_e2m1 holds them).
#include "fp4_stand_ins.hpp"

int main() {
#ifdef DLPX_EXPECT_ERROR
  Fp4 a[4] = {};
#else
  Fp4x2 a[4] = {};
#endif
  auto holder = dlpx::to_dltensor(a, {4});
  return holder.get().ndim == 1 ? 0 : 1;
}

// Compiled by ctest: to_dltensor of an element type that stores its sub-byte
// value padded (one fp4 a byte, as CUDA's __nv_fp4_e2m1 does) must not
// compile: a DLTensor has no flag to say so, and every reader takes the bytes
// as packed. With DLPX_EXPECT_ERROR, the padded type; the positive control
// converts the packed one (two fp4 a byte, as __nv_fp4x2_e2m1 holds them).
#include <dlpx/dlpx.hpp>

struct Fp4 {
  unsigned char bits;
};
struct Fp4x2 {
  unsigned char bits;
};
template <>
struct dlpx::dtype_traits<Fp4> {
  static constexpr DLDataType value{kDLFloat4_e2m1fn, 4, 1};
};
template <>
struct dlpx::dtype_traits<Fp4x2> {
  static constexpr DLDataType value{kDLFloat4_e2m1fn, 4, 2};
};

int main() {
#ifdef DLPX_EXPECT_ERROR
  Fp4 a[4] = {};
#else
  Fp4x2 a[4] = {};
#endif
  auto holder = dlpx::to_dltensor(a, {4});
  return holder.get().ndim == 1 ? 0 : 1;
}

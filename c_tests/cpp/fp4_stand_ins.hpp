// fp4 element types without CUDA's headers, for the tests of sub-byte layouts:
// Fp4 holds one value a byte (padded, as CUDA's __nv_fp4_e2m1), Fp4x2 two
// (packed, as __nv_fp4x2_e2m1).
#ifndef DLPX_C_TESTS_CPP_FP4_STAND_INS_HPP_
#define DLPX_C_TESTS_CPP_FP4_STAND_INS_HPP_

#include <dlpx/dlpx.hpp>

#include <cstdint>

struct Fp4 {
  uint8_t bits;
};
struct Fp4x2 {
  uint8_t bits;
};

template <>
struct dlpx::dtype_traits<Fp4> {
  static constexpr DLDataType value{kDLFloat4_e2m1fn, 4, 1};
};
template <>
struct dlpx::dtype_traits<Fp4x2> {
  static constexpr DLDataType value{kDLFloat4_e2m1fn, 4, 2};
};

#endif  // DLPX_C_TESTS_CPP_FP4_STAND_INS_HPP_

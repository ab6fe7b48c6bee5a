// A DLTensor over caller-owned shape and stride vectors on the CPU, so each C++
// test case states its metadata in one line. Include after dlpx's headers.
#ifndef DLPX_C_TESTS_CPP_FIXTURE_HPP_
#define DLPX_C_TESTS_CPP_FIXTURE_HPP_

#include <cstdint>
#include <utility>
#include <vector>

struct Fixture {
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  DLTensor t{};
  // Empty `st` (or `null_strides`) leaves strides NULL, as a pre-1.2 producer would.
  Fixture(void* data, DLDataType dtype, std::vector<int64_t> s, std::vector<int64_t> st, bool null_strides = false)
      : shape(std::move(s)), strides(std::move(st)) {
    t.data = data;
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = static_cast<int32_t>(shape.size());
    t.dtype = dtype;
    t.shape = shape.empty() ? nullptr : shape.data();
    t.strides = null_strides || strides.empty() ? nullptr : strides.data();
  }
};

#endif  // DLPX_C_TESTS_CPP_FIXTURE_HPP_

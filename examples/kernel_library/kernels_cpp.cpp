// The example library's C++ kernels (dlpx/kernel.hpp): ordinary C++ functions, exported typed.
// The macro reads each argument as its parameter's C++ type (an mdspan's dtype and rank are
// checked, the error naming the parameter), returns the result in the caller's framework and
// turns a C++ exception into the Python exception its type names.
//
//   scale(x, alpha=1.0)   alpha * x over any strides and rank (float32, float64): a new tensor
//                         like x, allocated by x's framework and returned as x's type;
//   axpy(alpha, x, y)     alpha * x + y of 1-d float32 tensors (any positive strides), as a new tensor.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "dlpx/kernel.hpp"

namespace {

// out[...] = alpha * x[...]: x any strides, out compact (written in order).
template <class T>
void scale_into(const dlpx::TensorView& x, double alpha, T* out) {
  const T* in = x.data<const T>();  // an input may be read-only (a jax array, bytes)
  const int32_t ndim = x.ndim();
  int64_t index[64] = {0};
  const int64_t n = x.numel();
  for (int64_t k = 0; k < n; ++k) {
    int64_t offset = 0;
    for (int32_t d = 0; d < ndim; ++d) offset += index[d] * x.stride(d);
    out[k] = static_cast<T>(alpha * in[offset]);
    for (int32_t d = ndim - 1; d >= 0; --d) {
      if (++index[d] < x.size(d)) break;
      index[d] = 0;
    }
  }
}

dlpx::OutputTensor scale(dlpx::Call& call, dlpx::TensorView x, double alpha) {
  if (x.device().device_type != kDLCPU) throw std::invalid_argument("x must be a CPU tensor, got " + x.device_name());
  if (x.ndim() > 64) throw std::invalid_argument("x has more than 64 dimensions");
  // In x's framework (torch in: torch's allocator), like x; the call deletes it if we throw.
  dlpx::OutputTensor out = call.empty_like(x);
  if (x.numel() == 0) return out;
  if (dlpx::same_dtype(x.dtype(), dlpx::dtype_of<float>())) {
    scale_into(x, alpha, out.data<float>());
  } else if (dlpx::same_dtype(x.dtype(), dlpx::dtype_of<double>())) {
    scale_into(x, alpha, out.data<double>());
  } else {
    throw dlpx::Error("TypeError", "x must be float32 or float64, got " + x.dtype_name());
  }
  return out;
}

dlpx::OutputTensor axpy(dlpx::Call& call, double alpha, dlpx::mdspan_t<const float, 1> x,
                        dlpx::mdspan_t<const float, 1> y) {
  if (x.extent(0) != y.extent(0)) {
    throw std::invalid_argument("x and y differ in length: " + std::to_string(x.extent(0)) + " and " +
                                std::to_string(y.extent(0)));
  }
  dlpx::OutputTensor out = call.allocate({x.extent(0)}, dlpx::dtype_of<float>());
  auto z = out.as_mdspan<float, 1>();
  for (int64_t i = 0; i < x.extent(0); ++i) z(i) = static_cast<float>(alpha) * x(i) + y(i);
  return out;
}

}  // namespace

DLPX_EXPORT_TYPED_KERNEL(scale, scale, "scale(x, alpha=1.0) -> tensor: alpha * x (any strides; float32, float64), "
                                       "a new tensor like x in x's framework.")
DLPX_EXPORT_TYPED_KERNEL(axpy, axpy, "axpy(alpha: float, x, y) -> tensor: alpha * x + y of 1-d float32 tensors "
                                     "(any positive strides), in x's framework.")

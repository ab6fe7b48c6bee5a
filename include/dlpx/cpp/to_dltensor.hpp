// dlpx C++ layer: to_dltensor, a non-owning DLTensor for any mdspan-like view
// or pointer + shape, with the shape and strides stored inline (no heap), as
// CCCL's cuda::to_dlpack_tensor does for cuda::host/device/managed_mdspan.
#ifndef DLPX_CPP_TO_DLTENSOR_HPP_
#define DLPX_CPP_TO_DLTENSOR_HPP_

#include <dlpx/cpp/dtype.hpp>
#include <dlpx/cpp/integers.hpp>
#include <dlpx/dlpack.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace dlpx {

/// Holds a DLTensor together with the storage of its shape and strides
/// (`Rank` values each, inline). `get()` exists only on lvalues, because the
/// DLTensor it returns points into this holder and must not outlive it:
/// `auto h = to_dltensor(md); const DLTensor& t = h.get();` — never
/// `to_dltensor(md).get()`. Copies are safe: a copy's `get()` points into it.
template <std::size_t Rank>
class DLTensorHolder {
 public:
  /// Builds the holder from already checked metadata.
  DLTensorHolder(void* data, DLDevice device, DLDataType dtype, const std::array<int64_t, Rank>& shape,
                 const std::array<int64_t, Rank>& strides) noexcept
      : shape_(shape), strides_(strides) {
    tensor_.data = data;
    tensor_.device = device;
    tensor_.ndim = static_cast<int32_t>(Rank);
    tensor_.dtype = dtype;
    tensor_.byte_offset = 0;
    point_inside();
  }
  /// A copy's DLTensor points into the copy.
  DLTensorHolder(const DLTensorHolder& other) noexcept
      : shape_(other.shape_), strides_(other.strides_), tensor_(other.tensor_) {
    point_inside();
  }
  DLTensorHolder& operator=(const DLTensorHolder& other) noexcept {
    shape_ = other.shape_;
    strides_ = other.strides_;
    tensor_ = other.tensor_;
    point_inside();
    return *this;
  }

  /// The DLTensor; its shape and strides point into this holder (NULL for
  /// rank 0), so it is valid while the holder lives (`dlpx::TensorView
  /// tv(holder.get())` views it).
  const DLTensor& get() const& noexcept { return tensor_; }
  /// Deleted: the DLTensor of a temporary holder would dangle.
  const DLTensor& get() const&& = delete;

  /// The number of dimensions.
  static constexpr std::size_t rank() noexcept { return Rank; }

 private:
  void point_inside() noexcept {
    tensor_.shape = Rank > 0 ? shape_.data() : nullptr;
    tensor_.strides = Rank > 0 ? strides_.data() : nullptr;
  }

  std::array<int64_t, Rank> shape_;
  std::array<int64_t, Rank> strides_;
  DLTensor tensor_{};
};

namespace detail {

template <class M, class = void>
struct is_mdspan_like : std::false_type {};
// Only data_handle() and a constant rank() are required up front: extent(i)
// and stride(i) are called for rank > 0 only, since a rank-0 layout_right
// mapping has no stride().
template <class M>
struct is_mdspan_like<M, std::void_t<decltype(std::declval<const M&>().data_handle()),
                                     std::integral_constant<std::size_t, M::rank()>>> : std::true_type {};

// Error paths live out of line so that the conversion itself stays small.
template <class I>
[[noreturn]] void throw_not_int64(const char* what, std::size_t i, I v) {
  throw std::invalid_argument(std::string("dlpx: to_dltensor: ") + what + "(" + std::to_string(i) +
                              ") = " + integer_text(v) + " does not fit in int64_t");
}

template <class I>
[[noreturn]] void throw_negative_extent(std::size_t i, I v) {
  throw std::invalid_argument("dlpx: to_dltensor: extent(" + std::to_string(i) + ") = " + integer_text(v) +
                              " is negative");
}

[[noreturn]] inline void throw_stride_overflow() {
  throw std::invalid_argument("dlpx: to_dltensor: the row-major strides of this shape overflow int64_t");
}

template <class I>
int64_t checked_extent(std::size_t i, I v) {
  static_assert(std::is_integral<I>::value, "dlpx: to_dltensor: extents must be integers");
  if constexpr (std::is_signed<I>::value) {
    if (v < 0) throw_negative_extent(i, v);
  }
  if (!fits_int64(v)) throw_not_int64("extent", i, v);
  return static_cast<int64_t>(v);
}

template <class I>
int64_t checked_stride(std::size_t i, I v) {
  static_assert(std::is_integral<I>::value, "dlpx: to_dltensor: strides must be integers");
  if (!fits_int64(v)) throw_not_int64("stride", i, v);
  return static_cast<int64_t>(v);
}

template <std::size_t Rank>
std::array<int64_t, Rank> row_major_strides(const std::array<int64_t, Rank>& shape) {
  std::array<int64_t, Rank> strides{};
  if (!row_major_strides(shape, 0, &strides)) throw_stride_overflow();
  return strides;
}

template <std::size_t Rank>
bool has_zero_extent(const std::array<int64_t, Rank>& shape) noexcept {
  for (int64_t e : shape) {
    if (e == 0) return true;
  }
  return false;
}

template <class T, std::size_t Rank>
DLTensorHolder<Rank> make_holder(T* data, DLDevice device, const std::array<int64_t, Rank>& shape,
                                 const std::array<int64_t, Rank>& strides) {
  using U = std::remove_cv_t<T>;
  static_assert(8 * sizeof(U) == std::size_t{dtype_of<U>().bits} * dtype_of<U>().lanes,
                "dlpx::to_dltensor: this element type stores its sub-byte values padded (one fp4/fp6 value a "
                "byte, as __nv_fp4_e2m1 and __nv_fp6x2_e2m3 do), which a DLTensor cannot say (it has no flags): "
                "every DLPack reader would take the bytes as packed. Convert packed types (__nv_fp4x2_e2m1), or "
                "hand over a managed tensor flagged DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED");
  // DLTensor::data is unqualified: a view of const elements is const_cast,
  // as CCCL does; the DLTensor carries no read-only flag to say so.
  void* p = has_zero_extent(shape) ? nullptr : const_cast<U*>(data);
  return DLTensorHolder<Rank>(p, device, dtype_of<U>(), shape, strides);
}

// The offset of element (0, ..., 0) from `data_handle()`, in elements: its mapping's, which
// is not 0 for cuda::layout_stride_relaxed (cuda::to_host_mdspan's default: an offset, and
// negative strides); 0 for a view without a `mapping()` (dlpx::StridedView). Asked only of a
// view with elements (a mapping takes no index of an empty extent).
template <class M, std::size_t... I>
auto first_element_offset(const M& md, std::index_sequence<I...>, int) -> decltype(md.mapping()(((void)I, 0)...)) {
  return md.mapping()(((void)I, 0)...);
}
template <class M, std::size_t... I>
int first_element_offset(const M&, std::index_sequence<I...>, long) {
  return 0;
}

}  // namespace detail

// What `to_dltensor(md)` defaults to depends on whether <cuda/mdspan> came first, which may
// differ between two files of one program: each way is its own inline namespace, so the two are
// different functions (one name for both broke the one-definition rule, and the linker kept
// whichever it met first for every file).
#if defined(_CUDA___MDSPAN_HOST_DEVICE_ACCESSOR_H)
#define DLPX_DETAIL_DEFAULT_DEVICE_NS after_cuda_mdspan
#else
#define DLPX_DETAIL_DEFAULT_DEVICE_NS without_cuda_mdspan
#endif

namespace detail {
inline namespace DLPX_DETAIL_DEFAULT_DEVICE_NS {

#if defined(_CUDA___MDSPAN_HOST_DEVICE_ACCESSOR_H)
template <class M>
constexpr DLDevice default_device() noexcept {
  using A = typename M::accessor_type;
  static_assert(!::cuda::is_device_accessor_v<A>,
                "dlpx::to_dltensor: a cuda::device_mdspan's device id is known only at run time; "
                "pass it: to_dltensor(md, DLDevice{kDLCUDA, id})");
  if constexpr (::cuda::is_managed_accessor_v<A>) {
    return DLDevice{kDLCUDAManaged, 0};
  } else {
    return DLDevice{kDLCPU, 0};
  }
}
#else
template <class M>
constexpr DLDevice default_device() noexcept {
  return DLDevice{kDLCPU, 0};
}
#endif

}  // inline namespace DLPX_DETAIL_DEFAULT_DEVICE_NS
}  // namespace detail

/// A non-owning DLTensor of any mdspan-like view — std::mdspan,
/// cuda::std::mdspan, cuda::host/device/managed_mdspan, Kokkos' mdspan,
/// dlpx::StridedView: anything with a constant `rank()`, `extent(i)`,
/// `stride(i)` and a pointer `data_handle()` — on `device`. `data` is NULL when
/// the view has no elements, else element (0, ..., 0): `data_handle()` plus
/// its mapping's offset; `byte_offset` is 0. Throws std::invalid_argument
/// when an extent or stride does not fit in int64_t. Allocates nothing.
template <class M, std::enable_if_t<detail::is_mdspan_like<M>::value, int> = 0>
DLTensorHolder<M::rank()> to_dltensor(const M& md, DLDevice device) {
  using Handle = std::decay_t<decltype(md.data_handle())>;
  static_assert(std::is_pointer<Handle>::value, "dlpx::to_dltensor: the mdspan's data_handle_type must be a pointer");
  constexpr std::size_t rank = M::rank();
  std::array<int64_t, rank> shape{};
  std::array<int64_t, rank> strides{};
  if constexpr (rank > 0) {
    for (std::size_t i = 0; i < rank; ++i) {
      shape[i] = detail::checked_extent(i, md.extent(i));
      strides[i] = detail::checked_stride(i, md.stride(i));
    }
  }
  auto* data = md.data_handle();
  if (!detail::has_zero_extent(shape)) data += detail::first_element_offset(md, std::make_index_sequence<rank>{}, 0);
  return detail::make_holder(data, device, shape, strides);
}

/// `to_dltensor(md, device)` on the device the view's type implies: CPU,
/// except cuda::managed_mdspan (cuda_managed:0) when <cuda/mdspan> came
/// first; a cuda::device_mdspan must name its device.
inline namespace DLPX_DETAIL_DEFAULT_DEVICE_NS {
template <class M, std::enable_if_t<detail::is_mdspan_like<M>::value, int> = 0>
DLTensorHolder<M::rank()> to_dltensor(const M& md) {
  return ::dlpx::to_dltensor(md, detail::default_device<M>());
}
}  // inline namespace DLPX_DETAIL_DEFAULT_DEVICE_NS

/// A non-owning, row-major DLTensor of `Rank` extents at `data`:
/// `to_dltensor(p, {2, 3})`. Extents must be non-negative.
template <class T, class I, std::size_t Rank>
DLTensorHolder<Rank> to_dltensor(T* data, const I (&shape)[Rank], DLDevice device = DLDevice{kDLCPU, 0}) {
  std::array<int64_t, Rank> s{};
  for (std::size_t i = 0; i < Rank; ++i) s[i] = detail::checked_extent(i, shape[i]);
  return detail::make_holder(data, device, s, detail::row_major_strides(s));
}

/// A non-owning DLTensor of `Rank` extents and strides (in elements) at
/// `data`: `to_dltensor(p, {2, 3}, {1, 2})`.
template <class T, class I, class J, std::size_t Rank>
DLTensorHolder<Rank> to_dltensor(T* data, const I (&shape)[Rank], const J (&strides)[Rank],
                                 DLDevice device = DLDevice{kDLCPU, 0}) {
  std::array<int64_t, Rank> s{};
  std::array<int64_t, Rank> st{};
  for (std::size_t i = 0; i < Rank; ++i) {
    s[i] = detail::checked_extent(i, shape[i]);
    st[i] = detail::checked_stride(i, strides[i]);
  }
  return detail::make_holder(data, device, s, st);
}

/// `to_dltensor(data, shape)` with the shape in a std::array (rank 0 too).
template <class T, class I, std::size_t Rank>
DLTensorHolder<Rank> to_dltensor(T* data, const std::array<I, Rank>& shape, DLDevice device = DLDevice{kDLCPU, 0}) {
  std::array<int64_t, Rank> s{};
  for (std::size_t i = 0; i < Rank; ++i) s[i] = detail::checked_extent(i, shape[i]);
  return detail::make_holder(data, device, s, detail::row_major_strides(s));
}

/// `to_dltensor(data, shape, strides)` with std::arrays.
template <class T, class I, class J, std::size_t Rank>
DLTensorHolder<Rank> to_dltensor(T* data, const std::array<I, Rank>& shape, const std::array<J, Rank>& strides,
                                 DLDevice device = DLDevice{kDLCPU, 0}) {
  std::array<int64_t, Rank> s{};
  std::array<int64_t, Rank> st{};
  for (std::size_t i = 0; i < Rank; ++i) {
    s[i] = detail::checked_extent(i, shape[i]);
    st[i] = detail::checked_stride(i, strides[i]);
  }
  return detail::make_holder(data, device, s, st);
}

}  // namespace dlpx

#endif  // DLPX_CPP_TO_DLTENSOR_HPP_

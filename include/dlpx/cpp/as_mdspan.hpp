// dlpx C++ layer: as_mdspan, a typed, strided, mdspan-like view of a DLTensor
// for kernel code, made only after checking that the tensor really is what
// the kernel expects (rank, dtype, device kind, alignment, strides).
#ifndef DLPX_CPP_AS_MDSPAN_HPP_
#define DLPX_CPP_AS_MDSPAN_HPP_

#include <dlpx/cpp/dtype.hpp>
#include <dlpx/cpp/error.hpp>
#include <dlpx/cpp/integers.hpp>
#include <dlpx/cpp/tensor_view.hpp>
#include <dlpx/dlpack.h>
#include <dlpx/dlpx.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#if defined(__has_include)
#if __has_include(<version>)
#include <version>
#endif
#endif

// Which mdspan as_mdspan returns: DLPX_MDSPAN_NAMESPACE when the user names
// one (cuda::std, Kokkos: anything with mdspan, dextents and layout_stride),
// else std::mdspan where the standard library has it, else dlpx::StridedView.
// The strides reach layout_stride::mapping in DLPX_MDSPAN_ARRAY, that
// namespace's array by default (Kokkos users set it to std::array).
#if defined(DLPX_MDSPAN_NAMESPACE)
#define DLPX_DETAIL_MDSPAN_NS DLPX_MDSPAN_NAMESPACE
#if !defined(DLPX_MDSPAN_ARRAY)
#define DLPX_MDSPAN_ARRAY DLPX_MDSPAN_NAMESPACE::array
#endif
#elif defined(__cpp_lib_mdspan) && !defined(DLPX_NO_STD_MDSPAN)
#include <mdspan>
#define DLPX_DETAIL_MDSPAN_NS std
#if !defined(DLPX_MDSPAN_ARRAY)
#define DLPX_MDSPAN_ARRAY std::array
#endif
#endif

namespace dlpx {

/// dlpx's own strided view, with the members of std::mdspan<T,
/// dextents<int64_t, Rank>, layout_stride> that kernels use: `rank()`,
/// `extent(i)`, `stride(i)`, `size()`, `data_handle()` and element access
/// `md(i, j, ...)` (and `md[i, j, ...]` in C++23). It is what `as_mdspan`
/// returns where no mdspan is available, and `to_dltensor` accepts it.
template <class T, std::size_t Rank>
class StridedView {
 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  using index_type = int64_t;
  using size_type = uint64_t;
  using rank_type = std::size_t;
  using data_handle_type = T*;
  using reference = T&;

  /// A view of nothing: no data, every extent 0, so no element (of rank 0 it
  /// has no extent to be 0, and `size()` counts the one element a rank-0 view
  /// has: give it data before reading it, as std::mdspan has no such view).
  constexpr StridedView() noexcept = default;
  /// A view of `data` with the given extents and strides (in elements); the
  /// caller vouches that they describe valid, distinct elements.
  constexpr StridedView(T* data, const std::array<int64_t, Rank>& extents,
                        const std::array<int64_t, Rank>& strides) noexcept
      : data_(data), extents_(extents), strides_(strides) {}

  /// Number of dimensions.
  static constexpr rank_type rank() noexcept { return Rank; }
  /// Number of run-time extents (all of them).
  static constexpr rank_type rank_dynamic() noexcept { return Rank; }
  /// Extent of dimension `r`.
  constexpr index_type extent(rank_type r) const noexcept { return extents_[r]; }
  /// Stride of dimension `r`, in elements.
  constexpr index_type stride(rank_type r) const noexcept { return strides_[r]; }
  /// Pointer to element (0, ..., 0).
  constexpr data_handle_type data_handle() const noexcept { return data_; }
  /// Number of elements.
  constexpr size_type size() const noexcept {
    size_type n = 1;
    for (int64_t e : extents_) n *= static_cast<size_type>(e);
    return n;
  }
  /// True when the view has no elements.
  constexpr bool empty() const noexcept { return size() == 0; }

  /// The element at the given indices (one per dimension, unchecked).
  template <class... I>
  constexpr reference operator()(I... idx) const noexcept {
    static_assert(sizeof...(I) == Rank, "dlpx::StridedView: give one index per dimension");
    static_assert((std::is_integral<I>::value && ...), "dlpx::StridedView: indices must be integers");
    const std::array<int64_t, Rank> ix{static_cast<int64_t>(idx)...};
    int64_t off = 0;
    for (std::size_t k = 0; k < Rank; ++k) off += ix[k] * strides_[k];
    return data_[off];
  }
#if defined(__cpp_multidimensional_subscript) && __cpp_multidimensional_subscript >= 202110L
  /// The element at the given indices, C++23 spelling.
  template <class... I>
  constexpr reference operator[](I... idx) const noexcept {
    return (*this)(idx...);
  }
#endif

 private:
  T* data_ = nullptr;
  std::array<int64_t, Rank> extents_{};
  std::array<int64_t, Rank> strides_{};
};

#if defined(DLPX_DETAIL_MDSPAN_NS)
/// The type as_mdspan<T, Rank> returns: a layout_stride mdspan with int64
/// extents, from DLPX_DETAIL_MDSPAN_NS.
template <class T, std::size_t Rank>
using mdspan_t = DLPX_DETAIL_MDSPAN_NS::mdspan<T, DLPX_DETAIL_MDSPAN_NS::dextents<int64_t, Rank>,
                                               DLPX_DETAIL_MDSPAN_NS::layout_stride>;
#else
/// The type as_mdspan<T, Rank> returns: dlpx::StridedView (no <mdspan>).
template <class T, std::size_t Rank>
using mdspan_t = StridedView<T, Rank>;
#endif

namespace detail {

// All failures go through here; the checks themselves build no strings, so
// a successful as_mdspan allocates nothing.
[[noreturn]] inline void as_mdspan_fail(const char* kind, const std::string& what) {
  throw Error(kind, "dlpx: as_mdspan: " + what);
}

inline bool mul_ok(int64_t a, int64_t b, int64_t* out) noexcept {
  if (a != 0 && (b > std::numeric_limits<int64_t>::max() / a || b < std::numeric_limits<int64_t>::min() / a)) {
    return false;
  }
  *out = a * b;
  return true;
}

// True when (e, s) is what std::layout_stride::mapping accepts: positive
// strides, some order of the dimensions in which each stride is at least the
// previous stride times its extent (so elements are distinct), and a span
// that fits in int64_t.
template <std::size_t Rank>
bool is_layout_stride(const std::array<int64_t, Rank>& e, const std::array<int64_t, Rank>& s) noexcept {
  std::array<std::size_t, Rank> order{};
  for (std::size_t i = 0; i < Rank; ++i) {
    if (s[i] <= 0) return false;
    order[i] = i;
  }
  // Insertion sort by (stride, extent): the chain condition forces strides to
  // be non-decreasing, and among equal strides only an extent <= 1 may come
  // first. Rank is small and there must be no heap.
  for (std::size_t i = 1; i < Rank; ++i) {
    const std::size_t d = order[i];
    std::size_t j = i;
    while (j > 0 && (s[order[j - 1]] > s[d] || (s[order[j - 1]] == s[d] && e[order[j - 1]] > e[d]))) {
      order[j] = order[j - 1];
      --j;
    }
    order[j] = d;
  }
  int64_t span = 1;
  for (std::size_t k = 0; k < Rank; ++k) {
    const std::size_t d = order[k];
    int64_t reach = 0;
    if (k > 0 && (!mul_ok(s[order[k - 1]], e[order[k - 1]], &reach) || s[d] < reach)) return false;
    int64_t step = 0;
    if (e[d] > 0 && (!mul_ok(e[d] - 1, s[d], &step) || span > std::numeric_limits<int64_t>::max() - step)) {
      return false;
    }
    span += step;
  }
  return true;
}

#if defined(DLPX_DETAIL_MDSPAN_NS)
template <class T, std::size_t Rank, std::size_t... I>
mdspan_t<T, Rank> make_mdspan(T* data, const std::array<int64_t, Rank>& e, const std::array<int64_t, Rank>& s,
                              std::index_sequence<I...>) {
  using extents_t = DLPX_DETAIL_MDSPAN_NS::dextents<int64_t, Rank>;
  using mapping_t = typename DLPX_DETAIL_MDSPAN_NS::layout_stride::template mapping<extents_t>;
  const DLPX_MDSPAN_ARRAY<int64_t, Rank> strides{{s[I]...}};
  return mdspan_t<T, Rank>(data, mapping_t(extents_t(e[I]...), strides));
}
#endif

template <class T, std::size_t Rank>
mdspan_t<T, Rank> make_mdspan(T* data, const std::array<int64_t, Rank>& e, const std::array<int64_t, Rank>& s) {
#if defined(DLPX_DETAIL_MDSPAN_NS)
  return make_mdspan<T, Rank>(data, e, s, std::make_index_sequence<Rank>{});
#else
  return mdspan_t<T, Rank>(data, e, s);
#endif
}

/// Compact row-major strides of extents `e`, each positive, as layout_stride needs. A tensor
/// with elements must count them in int64_t too (an empty one has none to count).
template <std::size_t Rank>
std::array<int64_t, Rank> compact_strides(const std::array<int64_t, Rank>& e, bool empty) {
  std::array<int64_t, Rank> s{};
  int64_t count = 1;
  if (!row_major_strides(e, 1, &s) || (!empty && Rank > 0 && !mul_nonneg(s[0], e[0], &count))) {
    as_mdspan_fail("ValueError", "the shape overflows int64_t");
  }
  return s;
}

template <class T, std::size_t Rank>
mdspan_t<T, Rank> as_mdspan_impl(const DLTensor& t, DLDeviceType device_type, uint64_t flags) {
  constexpr DLDataType want = dtype_of<T>();
  if (!std::is_const<T>::value && (flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0) refuse_read_only();
  const bool subbyte_padded = (flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) != 0;
  if (t.ndim != static_cast<int32_t>(Rank)) {
    as_mdspan_fail("ValueError", "expected ndim " + std::to_string(Rank) + ", got " + std::to_string(t.ndim));
  }
  if (!same_dtype(t.dtype, want)) {
    as_mdspan_fail("TypeError", "expected " + dtype_name(want) + ", got " + dtype_name(t.dtype));
  }
  if (device_type_of(t.device) != static_cast<int32_t>(device_type)) {
    const char* name = device_type_name(static_cast<int32_t>(device_type));
    as_mdspan_fail("ValueError", std::string("expected a ") + (name != nullptr ? name : "device(type=?)") +
                                     " tensor, got " + device_name(t.device));
  }
  // fp4/fp6 travel packed unless the producer set IS_SUBBYTE_TYPE_PADDED;
  // T must occupy exactly the bits one element occupies in memory.
  const int64_t storage_bits = storage_bits_of(t.dtype, subbyte_padded);
  if (storage_bits != static_cast<int64_t>(8 * sizeof(T))) {
    as_mdspan_fail("TypeError", "an element of this " + dtype_name(t.dtype) + " tensor occupies " +
                                    std::to_string(storage_bits) + " bits (" + (subbyte_padded ? "padded" : "packed") +
                                    ") but T occupies " + std::to_string(8 * sizeof(T)));
  }
  std::array<int64_t, Rank> e{};
  bool empty = false;
  if constexpr (Rank > 0) {
    if (t.shape == nullptr) as_mdspan_fail("ValueError", "shape is NULL");
    for (std::size_t i = 0; i < Rank; ++i) {
      e[i] = t.shape[i];
      if (e[i] < 0) {
        as_mdspan_fail("ValueError", "shape[" + std::to_string(i) + "] = " + std::to_string(e[i]) + " is negative");
      }
      empty = empty || e[i] == 0;
    }
  }
  if (t.data == nullptr && !empty) as_mdspan_fail("ValueError", "data is NULL for a tensor with elements");
  T* data = t.data == nullptr ? nullptr : reinterpret_cast<T*>(static_cast<char*>(t.data) + t.byte_offset);
  if (reinterpret_cast<std::uintptr_t>(data) % alignof(T) != 0) {
    as_mdspan_fail("ValueError", "data + byte_offset is not aligned to " + std::to_string(alignof(T)) +
                                     " bytes for " + dtype_name(want));
  }
  std::array<int64_t, Rank> s{};
  if constexpr (Rank > 0) {
    if (t.strides != nullptr) {
      for (std::size_t i = 0; i < Rank; ++i) s[i] = t.strides[i];
    } else {
      // NULL strides (DLPack < 1.2) mean compact row-major.
      s = compact_strides(e, empty);
    }
    if (!is_layout_stride(e, s)) {
      // The stride of an extent-1 (or empty) dimension never moves the
      // pointer, so producers leave anything there (torch: 0 after expand);
      // normalising it loses nothing and lets layout_stride accept it.
      for (std::size_t i = 0; i < Rank; ++i) {
        if (e[i] <= 1 || (empty && s[i] <= 0)) s[i] = 1;
      }
      if (!is_layout_stride(e, s)) {
        if (!empty) {
          for (std::size_t i = 0; i < Rank; ++i) {
            if (s[i] <= 0) {
              as_mdspan_fail("ValueError", "strides[" + std::to_string(i) + "] = " + std::to_string(s[i]) +
                                               " is not positive; a layout_stride mdspan cannot express "
                                               "broadcast or reversed dimensions");
            }
          }
          as_mdspan_fail("ValueError", "the strides are no layout_stride mdspan's: one needs the dimensions "
                                       "nested, each stride at least the span of those inside it (these "
                                       "overlap or interleave), and a span that does not overflow int64_t");
        }
        // No element is reachable: any valid strides describe it.
        s = compact_strides(e, empty);
      }
    }
  }
  return make_mdspan<T, Rank>(data, e, s);
}

}  // namespace detail

/// A strided mdspan of `tensor` as `T` elements in `Rank` dimensions, after
/// checking, in this order, ndim, dtype, device type, element size (fp4/fp6
/// are taken as packed), shape, data and its alignment for `T`, and that the
/// strides form a layout_stride (positive, distinct elements; strides of
/// extent-1 dimensions are normalised). NULL strides mean row-major. Throws
/// dlpx::Error whose message names the failed check ("dlpx: as_mdspan:
/// expected float32, got bfloat16"). Allocates nothing unless it throws.
/// A bare DLTensor carries no flags: it is taken as writable, and fp4/fp6 as
/// packed; the overloads below take a view or managed tensor with its flags.
template <class T, std::size_t Rank>
mdspan_t<T, Rank> as_mdspan(const DLTensor& tensor, DLDeviceType device_type = kDLCPU) {
  return detail::as_mdspan_impl<T, Rank>(tensor, device_type, 0);
}

/// `as_mdspan` of a managed tensor's DLTensor, which also honours its flags:
/// IS_SUBBYTE_TYPE_PADDED (one fp4/fp6 value per byte), and READ_ONLY (a
/// non-const `T` throws dlpx::Error, ValueError: read it as `const T`).
template <class T, std::size_t Rank>
mdspan_t<T, Rank> as_mdspan(const DLManagedTensorVersioned& tensor, DLDeviceType device_type = kDLCPU) {
  return detail::as_mdspan_impl<T, Rank>(tensor.dl_tensor, device_type, tensor.flags);
}

/// `as_mdspan` of a view with its flags, as for a managed tensor: a read-only
/// `TensorView` (or `ManagedTensor::view()`) gives no mdspan of non-const `T`.
template <class T, std::size_t Rank>
mdspan_t<T, Rank> as_mdspan(const TensorView& view, DLDeviceType device_type = kDLCPU) {
  return detail::as_mdspan_impl<T, Rank>(view.dltensor(), device_type, view.flags());
}

/// `as_mdspan` of a kernel's view (`dlpx_view_of`, `dlpx_read_view_of`) with its
/// flags, as for a managed tensor: pass the view, not `view.tensor`, whose bare
/// DLTensor cannot say it is read-only (`bytes`, a read-only numpy array).
template <class T, std::size_t Rank>
mdspan_t<T, Rank> as_mdspan(const DlpxTensorView& view, DLDeviceType device_type = kDLCPU) {
  return detail::as_mdspan_impl<T, Rank>(view.tensor, device_type, view.flags);
}

}  // namespace dlpx

#endif  // DLPX_CPP_AS_MDSPAN_HPP_

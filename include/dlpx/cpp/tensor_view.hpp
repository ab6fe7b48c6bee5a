// dlpx C++ layer: TensorView, a non-owning, checked reader of a DLTensor for
// kernel code (metadata queries and a typed data pointer).
#ifndef DLPX_CPP_TENSOR_VIEW_HPP_
#define DLPX_CPP_TENSOR_VIEW_HPP_

#include <dlpx/cpp/dtype.hpp>
#include <dlpx/cpp/error.hpp>
#include <dlpx/cpp/integers.hpp>
#include <dlpx/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

namespace dlpx {

/// A read-only view of `size()` int64 values (a DLTensor's shape or strides);
/// it borrows the DLTensor's array and lives no longer than it.
class Int64Span {
 public:
  /// An empty span.
  constexpr Int64Span() noexcept = default;
  /// A span over `size` values at `data`.
  constexpr Int64Span(const int64_t* data, std::size_t size) noexcept : data_(data), size_(size) {}
  /// The first value (may be NULL when empty).
  constexpr const int64_t* data() const noexcept { return data_; }
  /// The number of values.
  constexpr std::size_t size() const noexcept { return size_; }
  /// True when there are no values.
  constexpr bool empty() const noexcept { return size_ == 0; }
  /// The i-th value; `i < size()` is the caller's to ensure.
  constexpr int64_t operator[](std::size_t i) const noexcept { return data_[i]; }
  /// Iterator to the first value.
  constexpr const int64_t* begin() const noexcept { return data_; }
  /// Iterator past the last value.
  constexpr const int64_t* end() const noexcept { return data_ + size_; }

 private:
  const int64_t* data_ = nullptr;
  std::size_t size_ = 0;
};

namespace detail {

[[noreturn]] inline void throw_error(const char* kind, const std::string& message) {
  throw Error(kind, message);
}

// A read-only tensor asked for as a non-const T (data<T>(), as_mdspan<T>).
[[noreturn]] inline void refuse_read_only() {
  throw_error("ValueError", "dlpx: the tensor is read-only; read it as const T");
}

}  // namespace detail

/// A non-owning view of a DLTensor, in the manner of tvm::ffi::TensorView:
/// the tensor (and its shape and strides arrays) must outlive the view.
/// Metadata is read as the producer left it; `data<T>()` checks the dtype,
/// the element size and, where the view has the producer's DLPack flags (a
/// managed tensor's `view()`, a kernel's `TensorArg`), that a read-only
/// tensor is read as `const T`.
class TensorView {
 public:
  /// Views `tensor`, which must outlive the view (a bare DLTensor carries no
  /// flags: it is taken as writable and fp4/fp6 as packed).
  explicit TensorView(const DLTensor& tensor) noexcept : t_(&tensor) {}
  /// Views `tensor` with its DLPack `flags` (DLPACK_FLAG_BITMASK_*).
  TensorView(const DLTensor& tensor, uint64_t flags) noexcept : t_(&tensor), flags_(flags) {}
  /// Deleted: a temporary DLTensor is gone before the view is used.
  explicit TensorView(const DLTensor&& tensor) = delete;
  TensorView(const DLTensor&& tensor, uint64_t flags) = delete;
  /// Views `*tensor`; throws dlpx::Error (ValueError) when `tensor` is NULL.
  explicit TensorView(const DLTensor* tensor) : t_(tensor) {
    if (tensor == nullptr) detail::throw_error("ValueError", "dlpx: TensorView: tensor is NULL");
  }

  /// The DLTensor being viewed.
  const DLTensor& dltensor() const noexcept { return *t_; }
  /// The producer's DLPack flags (DLPACK_FLAG_BITMASK_*; 0 for a bare DLTensor).
  uint64_t flags() const noexcept { return flags_; }
  /// True when the producer marked the data read-only.
  bool read_only() const noexcept { return (flags_ & DLPACK_FLAG_BITMASK_READ_ONLY) != 0; }
  /// Number of dimensions.
  int32_t ndim() const noexcept { return t_->ndim; }
  /// The shape, `ndim()` values.
  Int64Span shape() const noexcept {
    return t_->ndim > 0 ? Int64Span(t_->shape, static_cast<std::size_t>(t_->ndim)) : Int64Span();
  }
  /// The strides in elements, `ndim()` values; empty when the producer left
  /// them NULL (compact row-major, allowed before DLPack 1.2). `stride(i)`
  /// answers in both cases.
  Int64Span strides() const noexcept {
    return t_->ndim > 0 && t_->strides != nullptr ? Int64Span(t_->strides, static_cast<std::size_t>(t_->ndim))
                                                  : Int64Span();
  }
  /// Extent of dimension `i` (`i < ndim()` is the caller's to ensure).
  int64_t size(int32_t i) const noexcept { return t_->shape[i]; }
  /// Stride of dimension `i` in elements, computed as compact row-major when
  /// the producer left strides NULL: 0 where a later extent is 0 (or
  /// negative), INT64_MAX where the product passes int64_t (only a tensor
  /// with no elements, or a producer's impossible shape, has such a stride).
  int64_t stride(int32_t i) const noexcept {
    if (t_->strides != nullptr) return t_->strides[i];
    for (int32_t k = i + 1; k < t_->ndim; ++k) {
      if (t_->shape[k] <= 0) return 0;
    }
    int64_t s = 1;
    for (int32_t k = i + 1; k < t_->ndim; ++k) {
      if (!detail::mul_nonneg(s, t_->shape[k], &s)) return std::numeric_limits<int64_t>::max();
    }
    return s;
  }
  /// Element type.
  DLDataType dtype() const noexcept { return t_->dtype; }
  /// Device the data lives on.
  DLDevice device() const noexcept { return t_->device; }
  /// Offset in bytes from `DLTensor::data` to the first element.
  uint64_t byte_offset() const noexcept { return t_->byte_offset; }
  /// Address of the first element (`data + byte_offset`), untyped; NULL for
  /// a tensor without data (zero-size tensors may have none).
  void* data_ptr() const noexcept {
    return t_->data == nullptr ? nullptr : static_cast<char*>(t_->data) + t_->byte_offset;
  }
  /// Name of the dtype as Python prints it ("float32").
  std::string dtype_name() const { return dlpx::dtype_name(t_->dtype); }
  /// Name of the device as Python prints it ("cuda:1").
  std::string device_name() const { return dlpx::device_name(t_->device); }

  /// Number of elements; throws dlpx::Error (ValueError) for a negative
  /// extent or a count beyond int64_t.
  int64_t numel() const {
    bool empty = false;
    for (int32_t i = 0; i < t_->ndim; ++i) {
      const int64_t e = t_->shape[i];
      if (e < 0) {
        detail::throw_error("ValueError",
                            "dlpx: TensorView: shape[" + std::to_string(i) + "] = " + std::to_string(e) + " is negative");
      }
      empty = empty || e == 0;
    }
    // An extent of 0 anywhere makes 0, whatever the others multiply to.
    if (empty) return 0;
    int64_t n = 1;
    for (int32_t i = 0; i < t_->ndim; ++i) {
      if (!detail::mul_nonneg(n, t_->shape[i], &n)) {
        detail::throw_error("ValueError", "dlpx: TensorView: the number of elements overflows int64_t");
      }
    }
    return n;
  }

  /// Bytes spanned by `numel()` compact elements: bits * lanes / 8 each, and
  /// sub-byte types (fp6, fp4) packed, ceil(numel * bits * lanes / 8), unless
  /// the view's flags say IS_SUBBYTE_TYPE_PADDED (one byte a value), as
  /// `data<T>()` reads them. Throws dlpx::Error (ValueError) past int64_t.
  int64_t nbytes() const {
    const bool padded = (flags_ & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) != 0;
    const int64_t bits = detail::storage_bits_of(t_->dtype, padded);
    // numel * bits / 8 as (numel / 8) * bits + ceil((numel % 8) * bits / 8): exact, and it
    // overflows only where the byte count does (not 8 times sooner, as the bit count did).
    const int64_t n = numel();
    int64_t whole = 0;
    const int64_t rest = ((n % 8) * bits + 7) / 8;
    if (!detail::mul_nonneg(n / 8, bits, &whole) || whole > std::numeric_limits<int64_t>::max() - rest) {
      detail::throw_error("ValueError", "dlpx: TensorView: the size in bytes overflows int64_t");
    }
    return whole + rest;
  }

  /// True when the elements are compact and row-major (C order). Extents of
  /// 1 do not constrain their stride and a zero-size tensor is contiguous, as
  /// in torch and numpy.
  bool is_contiguous() const noexcept {
    // A negative extent is no layout at all, with strides or without (numel()
    // refuses it too).
    bool empty = false;
    for (int32_t i = 0; i < t_->ndim; ++i) {
      if (t_->shape[i] < 0) return false;
      empty = empty || t_->shape[i] == 0;
    }
    if (t_->strides == nullptr || empty) return true;
    // Past int64_t the next stride could not be expected: only extents of 1
    // may follow then.
    int64_t expected = 1;
    bool beyond = false;
    for (int32_t i = t_->ndim - 1; i >= 0; --i) {
      if (t_->shape[i] == 1) continue;
      if (beyond || t_->shape[i] < 0 || t_->strides[i] != expected) return false;
      beyond = !detail::mul_nonneg(expected, t_->shape[i], &expected);
    }
    return true;
  }

  /// The first element as `T*`; throws dlpx::Error (TypeError) when `T`'s
  /// dtype is not the tensor's or `T` does not occupy what one element does
  /// (fp4/fp6 are packed unless the flags say IS_SUBBYTE_TYPE_PADDED),
  /// (ValueError) when the address is not aligned for `T`, and (ValueError)
  /// for a non-const `T` of a read-only tensor: read it as `data<const T>()`.
  /// NULL for a tensor without data.
  template <class T>
  T* data() const {
    if (!std::is_const<T>::value && read_only()) detail::refuse_read_only();
    constexpr DLDataType want = dtype_of<std::remove_cv_t<T>>();
    if (!same_dtype(want, t_->dtype)) {
      detail::throw_error("TypeError", "dlpx: TensorView::data: expected " + dlpx::dtype_name(want) + ", got " +
                                           dlpx::dtype_name(t_->dtype));
    }
    const bool padded = (flags_ & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) != 0;
    const int64_t storage_bits = detail::storage_bits_of(t_->dtype, padded);
    if (storage_bits != static_cast<int64_t>(8 * sizeof(T))) {
      detail::throw_error("TypeError", "dlpx: TensorView::data: an element of this " + dlpx::dtype_name(want) +
                                           " tensor occupies " + std::to_string(storage_bits) + " bits (" +
                                           (padded ? "padded" : "packed") + ") but T occupies " +
                                           std::to_string(8 * sizeof(T)));
    }
    void* p = data_ptr();
    if (reinterpret_cast<std::uintptr_t>(p) % alignof(T) != 0) {
      detail::throw_error("ValueError", "dlpx: TensorView::data: data + byte_offset is not aligned to " +
                                            std::to_string(alignof(T)) + " bytes for " + dlpx::dtype_name(want));
    }
    return static_cast<T*>(p);
  }

 private:
  const DLTensor* t_;
  uint64_t flags_ = 0;
};

}  // namespace dlpx

#endif  // DLPX_CPP_TENSOR_VIEW_HPP_

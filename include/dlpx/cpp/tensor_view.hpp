// dlpx C++ layer: TensorView, a non-owning, checked reader of a DLTensor for
// kernel code (metadata queries and a typed data pointer).
#ifndef DLPX_CPP_TENSOR_VIEW_HPP_
#define DLPX_CPP_TENSOR_VIEW_HPP_

#include <dlpx/cpp/dtype.hpp>
#include <dlpx/cpp/error.hpp>
#include <dlpx/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

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

// a * b into *out, or false when the product leaves int64_t; a and b >= 0.
inline bool mul_nonneg(int64_t a, int64_t b, int64_t* out) noexcept {
  if (a != 0 && b > std::numeric_limits<int64_t>::max() / a) return false;
  *out = a * b;
  return true;
}

[[noreturn]] inline void throw_error(const char* kind, const std::string& message) {
  throw Error(kind, message);
}

}  // namespace detail

/// A non-owning view of a DLTensor, in the manner of tvm::ffi::TensorView:
/// the tensor (and its shape and strides arrays) must outlive the view.
/// Metadata is read as the producer left it; `data<T>()` checks the dtype.
class TensorView {
 public:
  /// Views `tensor`, which must outlive the view.
  explicit TensorView(const DLTensor& tensor) noexcept : t_(&tensor) {}
  /// Views `*tensor`; throws dlpx::Error (ValueError) when `tensor` is NULL.
  explicit TensorView(const DLTensor* tensor) : t_(tensor) {
    if (tensor == nullptr) detail::throw_error("ValueError", "dlpx: TensorView: tensor is NULL");
  }

  /// The DLTensor being viewed.
  const DLTensor& dltensor() const noexcept { return *t_; }
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
  /// the producer left strides NULL.
  int64_t stride(int32_t i) const noexcept {
    if (t_->strides != nullptr) return t_->strides[i];
    int64_t s = 1;
    for (int32_t k = i + 1; k < t_->ndim; ++k) s *= t_->shape[k];
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
    int64_t n = 1;
    for (int32_t i = 0; i < t_->ndim; ++i) {
      const int64_t e = t_->shape[i];
      if (e < 0) {
        detail::throw_error("ValueError",
                            "dlpx: TensorView: shape[" + std::to_string(i) + "] = " + std::to_string(e) + " is negative");
      }
      if (!detail::mul_nonneg(n, e, &n)) {
        detail::throw_error("ValueError", "dlpx: TensorView: the number of elements overflows int64_t");
      }
    }
    return n;
  }

  /// Bytes spanned by `numel()` compact elements; sub-byte types (fp6, fp4)
  /// count as packed, ceil(numel * bits * lanes / 8), which is DLPack's
  /// default when IS_SUBBYTE_TYPE_PADDED is not set.
  int64_t nbytes() const {
    const int64_t bits_per_element = static_cast<int64_t>(t_->dtype.bits) * t_->dtype.lanes;
    int64_t bits = 0;
    if (!detail::mul_nonneg(numel(), bits_per_element, &bits)) {
      detail::throw_error("ValueError", "dlpx: TensorView: the size in bytes overflows int64_t");
    }
    return bits / 8 + (bits % 8 != 0 ? 1 : 0);
  }

  /// True when the elements are compact and row-major (C order). Extents of
  /// 1 do not constrain their stride and a zero-size tensor is contiguous, as
  /// in torch and numpy.
  bool is_contiguous() const noexcept {
    if (t_->strides == nullptr) return true;
    for (int32_t i = 0; i < t_->ndim; ++i) {
      if (t_->shape[i] == 0) return true;
    }
    int64_t expected = 1;
    for (int32_t i = t_->ndim - 1; i >= 0; --i) {
      if (t_->shape[i] == 1) continue;
      if (t_->strides[i] != expected) return false;
      expected *= t_->shape[i];
    }
    return true;
  }

  /// The first element as `T*`; throws dlpx::Error (TypeError) when `T`'s
  /// dtype is not the tensor's, and (ValueError) when the address is not
  /// aligned for `T`. NULL for a tensor without data.
  template <class T>
  T* data() const {
    constexpr DLDataType want = dtype_of<T>();
    if (!same_dtype(want, t_->dtype)) {
      detail::throw_error("TypeError", "dlpx: TensorView::data: expected " + dlpx::dtype_name(want) + ", got " +
                                           dlpx::dtype_name(t_->dtype));
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
};

}  // namespace dlpx

#endif  // DLPX_CPP_TENSOR_VIEW_HPP_

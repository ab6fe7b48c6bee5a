// dlpx C++ layer: ManagedTensor, the move-only owner of a
// DLManagedTensorVersioned, made by any exchange table's allocator or adopted
// from a producer.
#ifndef DLPX_CPP_MANAGED_TENSOR_HPP_
#define DLPX_CPP_MANAGED_TENSOR_HPP_

#include <dlpx/cpp/error.hpp>
#include <dlpx/cpp/tensor_view.hpp>
#include <dlpx/dlpx.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace dlpx {

namespace detail {

// What the allocator's SetError delivered; `called` tells a failure that
// came with a message from one that did not (a broken producer).
struct AllocationError {
  bool called = false;
  std::string kind;
  std::string message;
};

// Handed to C as SetError: it must not throw, so a failure to copy the
// strings (out of memory) degrades to a fixed message instead.
inline void capture_set_error(void* ctx, const char* kind, const char* message) noexcept {
  auto* err = static_cast<AllocationError*>(ctx);
  err->called = true;
  try {
    err->kind = kind != nullptr ? kind : "RuntimeError";
    err->message = message != nullptr ? message : "dlpx: allocator failed without a message";
  } catch (...) {
    err->kind.clear();
    err->message.clear();
  }
}

// A table of a newer major keeps older ones on its prev_api chain: dlpx's own
// walk (bounded and cycle-safe, the one Rust and C use too) finds the v1 table
// this header understands.
inline const DLPackExchangeAPI* find_v1_table(const DLPackExchangeAPI* api, const char* where) {
  if (api == nullptr) throw_error("ValueError", std::string("dlpx: ") + where + ": exchange API table is NULL");
  const DLPackExchangeAPI* v1 = dlpx_exchange_api_select(&api->header);
  if (v1 == nullptr) {
    const char* why = dlpx_last_error();
    throw_error("BufferError", std::string("dlpx: ") + where + ": exchange API table of DLPack major " +
                                   std::to_string(api->header.version.major) + " has no v" +
                                   std::to_string(DLPACK_MAJOR_VERSION) + " table on its prev_api chain (" +
                                   (why != nullptr ? why : "") + ")");
  }
  return v1;
}

// An integer as a count: an integral type that is not a character or a bool (a std::string is
// no shape: "ab" would be (97, 98)). int8_t and uint8_t are.
template <class I>
constexpr bool is_extent = std::is_integral<I>::value && !std::is_same<I, bool>::value && !std::is_same<I, char>::value &&
                           !std::is_same<I, wchar_t>::value && !std::is_same<I, char16_t>::value &&
                           !std::is_same<I, char32_t>::value
#if defined(__cpp_char8_t)
                           && !std::is_same<I, char8_t>::value
#endif
    ;

template <class S, class = void>
struct is_shape_container : std::false_type {};
template <class S>
struct is_shape_container<S, std::void_t<decltype(std::data(std::declval<const S&>())),
                                         decltype(std::size(std::declval<const S&>()))>>
    : std::bool_constant<is_extent<std::remove_cv_t<std::remove_pointer_t<decltype(std::data(std::declval<const S&>()))>>>> {};

}  // namespace detail

/// Move-only owner of a `DLManagedTensorVersioned*`: its destructor calls the
/// producer's deleter exactly once (never, once `release()`d). Obtain one from
/// an exchange table's allocator with `allocate`, from a Python object with
/// `from_py_object`, or adopt a pointer you own with the constructor.
class ManagedTensor {
 public:
  /// An empty owner.
  ManagedTensor() noexcept = default;

  /// Takes ownership of `owned` (may be NULL). A tensor of a DLPack major
  /// this header does not know is released at once through its deleter, as
  /// DLPack requires, and dlpx::Error (BufferError) is thrown.
  explicit ManagedTensor(DLManagedTensorVersioned* owned) : p_(owned) {
    if (owned != nullptr && owned->version.major != DLPACK_MAJOR_VERSION) {
      const uint32_t major = owned->version.major;
      reset();
      detail::throw_error("BufferError", "dlpx: ManagedTensor: unsupported DLPack major version " +
                                             std::to_string(major) + " (expected " +
                                             std::to_string(DLPACK_MAJOR_VERSION) + ")");
    }
  }

  ManagedTensor(const ManagedTensor&) = delete;
  ManagedTensor& operator=(const ManagedTensor&) = delete;

  /// Moves ownership; `other` is left empty.
  ManagedTensor(ManagedTensor&& other) noexcept : p_(other.release()) {}

  /// Releases the current tensor (if any) and takes `other`'s.
  ManagedTensor& operator=(ManagedTensor&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }

  /// Calls the deleter of the owned tensor, if any.
  ~ManagedTensor() { reset(); }

  /// Allocates through `api`'s `managed_tensor_allocator` a compact tensor
  /// of `ndim` extents at `shape`. A failure throws dlpx::Error with the kind
  /// and message the allocator passed to SetError.
  static ManagedTensor allocate(const DLPackExchangeAPI* api, const int64_t* shape, int32_t ndim, DLDataType dtype,
                                DLDevice device) {
    const DLPackExchangeAPI* table = detail::find_v1_table(api, "ManagedTensor::allocate");
    if (table->managed_tensor_allocator == nullptr) {
      detail::throw_error("NotImplementedError", "dlpx: ManagedTensor::allocate: the table has no allocator");
    }
    if (ndim < 0 || (ndim > 0 && shape == nullptr)) {
      detail::throw_error("ValueError", "dlpx: ManagedTensor::allocate: ndim = " + std::to_string(ndim) +
                                            (ndim < 0 ? " is negative" : " but shape is NULL"));
    }
    DLTensor prototype{};
    prototype.device = device;
    prototype.ndim = ndim;
    prototype.dtype = dtype;
    // Allocators only read the prototype's shape (see DLPackManagedTensorAllocator).
    prototype.shape = const_cast<int64_t*>(shape);
    DLManagedTensorVersioned* out = nullptr;
    detail::AllocationError err;
    const int rc = table->managed_tensor_allocator(&prototype, &out, &err, &detail::capture_set_error);
    if (rc != 0 || out == nullptr) return allocation_failed(rc, out, err);
    return ManagedTensor(out);
  }

  /// `allocate` with the shape as a braced list: `allocate(api, {2, 3}, dtype)`.
  static ManagedTensor allocate(const DLPackExchangeAPI* api, std::initializer_list<int64_t> shape, DLDataType dtype,
                                DLDevice device = DLDevice{kDLCPU, 0}) {
    return allocate(api, shape.begin(), checked_ndim(shape.size()), dtype, device);
  }

  /// `allocate` with the shape from any contiguous container of integers
  /// (std::vector, std::array, ...).
  template <class Shape, std::enable_if_t<detail::is_shape_container<Shape>::value, int> = 0>
  static ManagedTensor allocate(const DLPackExchangeAPI* api, const Shape& shape, DLDataType dtype,
                                DLDevice device = DLDevice{kDLCPU, 0}) {
    using I = std::remove_cv_t<std::remove_pointer_t<decltype(std::data(shape))>>;
    if constexpr (std::is_same<I, int64_t>::value) {
      return allocate(api, std::data(shape), checked_ndim(std::size(shape)), dtype, device);
    } else {
      std::vector<int64_t> s;
      s.reserve(std::size(shape));
      for (const I& extent : shape) {
        // A uint64_t past INT64_MAX or an __int128 is refused as it is, not read wrapped.
        if (!detail::fits_int64(extent)) {
          detail::throw_error("ValueError", "dlpx: ManagedTensor::allocate: shape[" + std::to_string(s.size()) +
                                                "] = " + detail::integer_text(extent) + " does not fit in int64_t");
        }
        s.push_back(static_cast<int64_t>(extent));
      }
      return allocate(api, s.data(), checked_ndim(s.size()), dtype, device);
    }
  }

  /// `allocate` through dlpx's own table (`dlpx_exchange_api()`).
  static ManagedTensor allocate(std::initializer_list<int64_t> shape, DLDataType dtype,
                                DLDevice device = DLDevice{kDLCPU, 0}) {
    return allocate(dlpx_exchange_api(), shape, dtype, device);
  }

  /// `allocate` through dlpx's own table, shape from a container.
  template <class Shape, std::enable_if_t<detail::is_shape_container<Shape>::value, int> = 0>
  static ManagedTensor allocate(const Shape& shape, DLDataType dtype, DLDevice device = DLDevice{kDLCPU, 0}) {
    return allocate(dlpx_exchange_api(), shape, dtype, device);
  }

  /// Exports `py_object` (a `PyObject*` of the type `api` was read from) as
  /// an owned tensor, without stream synchronisation. Call with the GIL held.
  /// On failure the producer has set a Python exception, which stays set;
  /// dlpx::Error (kind "PythonError") says so.
  static ManagedTensor from_py_object(const DLPackExchangeAPI* api, void* py_object) {
    const DLPackExchangeAPI* table = detail::find_v1_table(api, "ManagedTensor::from_py_object");
    if (table->managed_tensor_from_py_object_no_sync == nullptr) {
      detail::throw_error("NotImplementedError",
                          "dlpx: ManagedTensor::from_py_object: the table has no managed_tensor_from_py_object_no_sync");
    }
    DLManagedTensorVersioned* out = nullptr;
    if (table->managed_tensor_from_py_object_no_sync(py_object, &out) != 0 || out == nullptr) {
      // A producer that failed yet gave a tensor still gave us something to free.
      ManagedTensor guard;
      guard.p_ = out;
      detail::throw_error("PythonError",
                          "dlpx: ManagedTensor::from_py_object: the producer failed; its Python exception is set");
    }
    return ManagedTensor(out);
  }

  /// The owned tensor (NULL when empty); ownership stays here.
  DLManagedTensorVersioned* get() const noexcept { return p_; }
  /// Member access to the owned tensor.
  DLManagedTensorVersioned* operator->() const noexcept { return p_; }
  /// True when a tensor is owned.
  explicit operator bool() const noexcept { return p_ != nullptr; }

  /// Gives up ownership without calling the deleter and returns the tensor;
  /// the caller now owns it.
  DLManagedTensorVersioned* release() noexcept {
    DLManagedTensorVersioned* p = p_;
    p_ = nullptr;
    return p;
  }

  /// Calls the deleter of the owned tensor (if any) and owns `owned` instead.
  /// Unlike the constructor it does not check the version.
  void reset(DLManagedTensorVersioned* owned = nullptr) noexcept {
    DLManagedTensorVersioned* old = p_;
    p_ = owned;
    // A NULL deleter is DLPack's way to say there is nothing to free.
    if (old != nullptr && old->deleter != nullptr) old->deleter(old);
  }

  /// A TensorView of the owned tensor's DLTensor with its flags (a read-only
  /// tensor is read as `const T`), valid while this owner keeps it; throws
  /// dlpx::Error (ValueError) when empty.
  TensorView view() const& {
    if (p_ == nullptr) detail::throw_error("ValueError", "dlpx: ManagedTensor::view: no tensor is owned");
    return TensorView(p_->dl_tensor, p_->flags);
  }
  /// Deleted: the view of a temporary owner would outlive its tensor.
  TensorView view() const&& = delete;

  /// The DLPACK_FLAG_BITMASK_* flags of the owned tensor (0 when empty).
  uint64_t flags() const noexcept { return p_ != nullptr ? p_->flags : 0; }
  /// True when the producer marked the data read-only.
  bool read_only() const noexcept { return (flags() & DLPACK_FLAG_BITMASK_READ_ONLY) != 0; }

 private:
  static int32_t checked_ndim(std::size_t n) {
    if (n > static_cast<std::size_t>(std::numeric_limits<int32_t>::max())) {
      detail::throw_error("ValueError", "dlpx: ManagedTensor::allocate: too many dimensions");
    }
    return static_cast<int32_t>(n);
  }

  // Out of line: the hot path above stays a few lines.
  [[noreturn]] static ManagedTensor allocation_failed(int rc, DLManagedTensorVersioned* out,
                                                      const detail::AllocationError& err) {
    // A producer that reports success with no tensor, or returns a tensor
    // with an error, still gave us something to free.
    ManagedTensor guard;
    guard.p_ = out;
    if (err.called && !err.kind.empty()) detail::throw_error(err.kind.c_str(), err.message);
    if (err.called) detail::throw_error("MemoryError", "dlpx: ManagedTensor::allocate: allocation failed");
    detail::throw_error("RuntimeError", "dlpx: ManagedTensor::allocate: the allocator returned " + std::to_string(rc) +
                                            " with " + (out == nullptr ? "no tensor" : "a tensor") +
                                            " and did not call SetError");
  }

  DLManagedTensorVersioned* p_ = nullptr;
};

}  // namespace dlpx

#endif  // DLPX_CPP_MANAGED_TENSOR_HPP_

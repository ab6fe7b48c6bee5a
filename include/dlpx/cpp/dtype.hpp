// dlpx C++ layer: C++ element types <-> DLDataType, and printable names of
// dtypes and devices that are equal to the names the Python side prints.
#ifndef DLPX_CPP_DTYPE_HPP_
#define DLPX_CPP_DTYPE_HPP_

#include <dlpx/dlpx.h>

#include <cfloat>
#include <complex>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <type_traits>

namespace dlpx {

/// Customisation point: specialise `dtype_traits<T>` with
/// `static constexpr DLDataType value = ...;` to give your own element type
/// a DLPack dtype. dlpx specialises it for the standard arithmetic types,
/// complex types and (when their headers come first) the CUDA types.
template <class T, class Enable = void>
struct dtype_traits {};

namespace detail {

template <class T, class = void>
struct has_dtype : std::false_type {};
template <class T>
struct has_dtype<T, std::void_t<decltype(dtype_traits<T>::value)>> : std::true_type {};

// Instantiated only for a type without a dtype, so that the compiler's
// "in instantiation of" note names the offending type next to the message.
template <class T>
struct unsupported_element_type {
  static_assert(sizeof(T) == 0,
                "dlpx::dtype_of<T>: T has no DLPack dtype. Supported: bool, signed and unsigned "
                "integers (not plain char or character types), float, double, complex of "
                "__half/float/double, and __half, __nv_bfloat16, fp8/fp6/fp4 and CUDA vector types "
                "with 2 or 4 lanes when their headers are included before dlpx; specialise "
                "dlpx::dtype_traits<T> for your own types.");
};

template <uint8_t Code, uint8_t Bits, uint16_t Lanes = 1>
struct dtype_constant {
  static constexpr DLDataType value{Code, Bits, Lanes};
};

template <class T>
struct integer_dtype : dtype_constant<std::is_signed<T>::value ? kDLInt : kDLUInt,
                                      static_cast<uint8_t>(sizeof(T) * 8)> {};

template <class Scalar, uint16_t Lanes>
struct vector_dtype {
  static_assert(Lanes == 2 || Lanes == 4, "dlpx: only 2- and 4-lane vector types have a DLPack dtype");
  static constexpr DLDataType value{dtype_traits<Scalar>::value.code, dtype_traits<Scalar>::value.bits, Lanes};
};

// A complex type is recognised by shape rather than by name, so that
// std::complex, cuda::std::complex, thrust::complex and Kokkos::complex all
// map without dlpx having to include their headers.
template <class T, class = void>
struct is_complex_like : std::false_type {};
template <class T>
struct is_complex_like<T, std::void_t<typename T::value_type, decltype(std::declval<const T&>().real()),
                                      decltype(std::declval<const T&>().imag())>>
    : std::bool_constant<std::is_class<T>::value && std::is_standard_layout<T>::value &&
                         sizeof(T) == 2 * sizeof(typename T::value_type)> {};

template <class T, class = void>
struct complex_part_is_ieee : std::false_type {};
// DLPack's complex codes mean pairs of IEEE binary16/32/64; a complex of
// bfloat16 or fp8 has no encoding and must not be passed off as complex32.
template <class T>
struct complex_part_is_ieee<T, std::enable_if_t<has_dtype<typename T::value_type>::value>>
    : std::bool_constant<dtype_traits<typename T::value_type>::value.code == kDLFloat &&
                         dtype_traits<typename T::value_type>::value.lanes == 1 &&
                         (dtype_traits<typename T::value_type>::value.bits == 16 ||
                          dtype_traits<typename T::value_type>::value.bits == 32 ||
                          dtype_traits<typename T::value_type>::value.bits == 64)> {};

}  // namespace detail

/// True when `dtype_of<T>()` compiles, i.e. `T` (cv-qualifiers ignored) has a
/// DLPack dtype.
template <class T>
inline constexpr bool has_dtype_v = detail::has_dtype<std::remove_cv_t<T>>::value;

namespace detail {
// Bits one element of `dtype` occupies in memory: fp4/fp6 travel packed
// (bits * lanes) unless the producer set IS_SUBBYTE_TYPE_PADDED (a byte a lane).
constexpr int64_t storage_bits_of(DLDataType dtype, bool subbyte_padded) noexcept {
  return (subbyte_padded && dtype.bits < 8) ? 8 * static_cast<int64_t>(dtype.lanes)
                                            : static_cast<int64_t>(dtype.bits) * dtype.lanes;
}
}  // namespace detail

/// The DLPack dtype of the element type `T` (cv-qualifiers ignored), following
/// CCCL's `cuda::to_dlpack_tensor` mapping; an unsupported `T` is a compile-time
/// error whose diagnostic names `T`.
template <class T>
constexpr DLDataType dtype_of() noexcept {
  using U = std::remove_cv_t<T>;
  if constexpr (detail::has_dtype<U>::value) {
    return dtype_traits<U>::value;
  } else {
    (void)sizeof(detail::unsupported_element_type<U>);
    return DLDataType{};
  }
}

template <>
struct dtype_traits<bool> : detail::dtype_constant<kDLBool, 8> {};
template <>
struct dtype_traits<signed char> : detail::integer_dtype<signed char> {};
template <>
struct dtype_traits<unsigned char> : detail::integer_dtype<unsigned char> {};
template <>
struct dtype_traits<short> : detail::integer_dtype<short> {};
template <>
struct dtype_traits<unsigned short> : detail::integer_dtype<unsigned short> {};
template <>
struct dtype_traits<int> : detail::integer_dtype<int> {};
template <>
struct dtype_traits<unsigned int> : detail::integer_dtype<unsigned int> {};
template <>
struct dtype_traits<long> : detail::integer_dtype<long> {};
template <>
struct dtype_traits<unsigned long> : detail::integer_dtype<unsigned long> {};
template <>
struct dtype_traits<long long> : detail::integer_dtype<long long> {};
template <>
struct dtype_traits<unsigned long long> : detail::integer_dtype<unsigned long long> {};
#if defined(__SIZEOF_INT128__)
namespace detail {
// __extension__ keeps -Wpedantic quiet about the GNU 128-bit integers.
__extension__ typedef __int128 int128;
__extension__ typedef unsigned __int128 uint128;
}  // namespace detail
template <>
struct dtype_traits<detail::int128> : detail::dtype_constant<kDLInt, 128> {};
template <>
struct dtype_traits<detail::uint128> : detail::dtype_constant<kDLUInt, 128> {};
#endif

template <>
struct dtype_traits<float> : detail::dtype_constant<kDLFloat, 32> {};
template <>
struct dtype_traits<double> : detail::dtype_constant<kDLFloat, 64> {};
// long double is mapped only where it is an IEEE format: x87's 80-bit
// extended type padded to 16 bytes is not binary128, whatever its sizeof.
#if LDBL_MANT_DIG == 53
template <>
struct dtype_traits<long double> : detail::dtype_constant<kDLFloat, 64> {};
#elif LDBL_MANT_DIG == 113
template <>
struct dtype_traits<long double> : detail::dtype_constant<kDLFloat, 128> {};
#endif
#if defined(__SIZEOF_FLOAT128__) && LDBL_MANT_DIG != 113 && !defined(__CUDACC__)
namespace detail {
__extension__ typedef __float128 float128;
}  // namespace detail
template <>
struct dtype_traits<detail::float128> : detail::dtype_constant<kDLFloat, 128> {};
#endif

template <class T>
struct dtype_traits<T, std::enable_if_t<detail::is_complex_like<T>::value &&
                                        detail::complex_part_is_ieee<T>::value>>
    : detail::dtype_constant<kDLComplex, static_cast<uint8_t>(sizeof(T) * 8)> {};

/// True when two dtypes are the same (code, bits and lanes).
constexpr bool same_dtype(DLDataType a, DLDataType b) noexcept {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

/// The device type of `device` as a plain integer. A newer producer may send
/// a type this header's enum does not list, and where DLDeviceType has no
/// fixed underlying type, loading such a value as the enum is undefined
/// behaviour; the bytes are therefore copied, never read as the enum.
inline int32_t device_type_of(const DLDevice& device) noexcept {
  static_assert(sizeof(device.device_type) == sizeof(int32_t), "DLDeviceType must be 32 bits (DLPack ABI)");
  int32_t type = 0;
  std::memcpy(&type, &device.device_type, sizeof type);
  return type;
}

/// True when two devices are the same (type and id).
inline bool same_device(const DLDevice& a, const DLDevice& b) noexcept {
  return device_type_of(a) == device_type_of(b) && a.device_id == b.device_id;
}

namespace detail {

// DLPack's dtype codes and device types with their printed names, from the one
// table dlpx keeps (dlpx.h's X-macros, generated from src/abi/enums.rs).
struct named_value {
  int32_t value;
  const char* name;
  uint8_t fixed_bits;  // the width a dtype code fixes; 0: any
};
#define DLPX_DETAIL_DTYPE_ROW(value, name, bits) named_value{value, name, bits},
#define DLPX_DETAIL_DEVICE_ROW(value, name) named_value{value, name, 0},
inline constexpr named_value k_dtype_codes[] = {DLPX_DTYPE_CODE_NAMES(DLPX_DETAIL_DTYPE_ROW)};
inline constexpr named_value k_device_types[] = {DLPX_DEVICE_TYPE_NAMES(DLPX_DETAIL_DEVICE_ROW)};
#undef DLPX_DETAIL_DTYPE_ROW
#undef DLPX_DETAIL_DEVICE_ROW

inline const named_value* find_named(const named_value* first, const named_value* last, int32_t value) noexcept {
  for (; first != last; ++first) {
    if (first->value == value) return first;
  }
  return nullptr;
}

}  // namespace detail

/// The name of a device type as the Python side spells it ("cpu", "cuda",
/// "cuda_host", ...), or NULL for a type this header does not know.
inline const char* device_type_name(int32_t device_type) noexcept {
  const detail::named_value* row =
      detail::find_named(std::begin(detail::k_device_types), std::end(detail::k_device_types), device_type);
  return row != nullptr ? row->name : nullptr;
}

/// The printable name of a dtype, equal to the Python side's (src/dtype.rs):
/// "float32", "bfloat16", any width of a code that fixes none ("int4",
/// "complex32"), "float32x4" for lanes > 1, and "dtype(code=C,bits=B,lanes=L)"
/// for anything without a name (a width its code does not have, no lanes).
inline std::string dtype_name(DLDataType dtype) {
  const detail::named_value* row =
      detail::find_named(std::begin(detail::k_dtype_codes), std::end(detail::k_dtype_codes), dtype.code);
  const bool named = row != nullptr && dtype.lanes != 0 && (row->fixed_bits == 0 || dtype.bits == row->fixed_bits);
  if (!named) {
    return "dtype(code=" + std::to_string(dtype.code) + ",bits=" + std::to_string(dtype.bits) +
           ",lanes=" + std::to_string(dtype.lanes) + ")";
  }
  std::string name(row->name);
  if (row->fixed_bits == 0) name += std::to_string(dtype.bits);
  if (dtype.lanes > 1) {
    // Two appends, not name += "x" + to_string(...): that operator+ is an insert at 0, which
    // GCC 12 at -O3 under C++20 inlines and then flags with a false -Wrestrict overlap.
    name += 'x';
    name += std::to_string(dtype.lanes);
  }
  return name;
}

/// The printable name of a device, equal to the Python side's: "cpu:0",
/// "cuda:1", and "device(type=N):id" for a type this header does not know.
inline std::string device_name(const DLDevice& device) {
  const int32_t type = device_type_of(device);
  const char* base = device_type_name(type);
  std::string name = base != nullptr ? std::string(base) : "device(type=" + std::to_string(type) + ")";
  return name + ":" + std::to_string(device.device_id);
}

}  // namespace dlpx

#include <dlpx/cpp/dtype_cuda.hpp>

#endif  // DLPX_CPP_DTYPE_HPP_

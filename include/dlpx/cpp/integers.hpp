// dlpx C++ layer: the integer checks the other headers share: a product of
// extents that must stay in int64_t, compact row-major strides, an integer of
// any width that must fit int64_t (a shape from a container of uint64_t or
// __int128), and its text.
#ifndef DLPX_CPP_INTEGERS_HPP_
#define DLPX_CPP_INTEGERS_HPP_

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

namespace dlpx {
namespace detail {

// a * b into *out, or false when the product leaves int64_t; a and b >= 0.
inline bool mul_nonneg(int64_t a, int64_t b, int64_t* out) noexcept {
  if (a != 0 && b > std::numeric_limits<int64_t>::max() / a) return false;
  *out = a * b;
  return true;
}

// The compact row-major strides of `shape` (extents >= 0) into *out, an extent of 0 counted as
// `empty_as` (0: an empty tensor's strides as DLPack and numpy spell them; 1: positive, as a
// layout_stride mapping needs); false where a stride leaves int64_t. The product of all the
// extents is no stride: only the inner ones must fit ({2^62, 4, 0} has strides).
template <std::size_t Rank>
bool row_major_strides(const std::array<int64_t, Rank>& shape, int64_t empty_as,
                       std::array<int64_t, Rank>* out) noexcept {
  int64_t s = 1;
  for (std::size_t k = Rank; k-- > 0;) {
    (*out)[k] = s;
    if (k > 0 && !mul_nonneg(s, shape[k] != 0 ? shape[k] : empty_as, &s)) return false;
  }
  return true;
}

// Whether the integer `v` (of any integral type, __int128 included) is an int64_t value.
template <class I>
constexpr bool fits_int64(I v) noexcept {
  if constexpr (std::is_signed<I>::value) {
    return sizeof(I) <= sizeof(int64_t) || (v >= static_cast<I>(std::numeric_limits<int64_t>::min()) &&
                                            v <= static_cast<I>(std::numeric_limits<int64_t>::max()));
  } else {
    return v <= static_cast<std::make_unsigned_t<int64_t>>(std::numeric_limits<int64_t>::max());
  }
}

// `v` in decimal, whatever its width (std::to_string stops at long long).
template <class I>
std::string integer_text(I v) {
  if constexpr (sizeof(I) <= sizeof(long long)) {
    if constexpr (std::is_signed<I>::value) {
      return std::to_string(static_cast<long long>(v));
    } else {
      return std::to_string(static_cast<unsigned long long>(v));
    }
  } else {
    bool negative = false;
    if constexpr (std::is_signed<I>::value) negative = v < 0;
    std::string reversed;
    do {
      const int digit = static_cast<int>(v % 10);
      reversed.push_back(static_cast<char>('0' + (digit < 0 ? -digit : digit)));
      v /= 10;
    } while (v != 0);
    if (negative) reversed.push_back('-');
    return std::string(reversed.rbegin(), reversed.rend());
  }
}

}  // namespace detail
}  // namespace dlpx

#endif  // DLPX_CPP_INTEGERS_HPP_

// dlpx::dtype_of<T>(): the C++ element type -> DLDataType mapping for the
// standard types, complex types found by shape, and the customisation point.
// Expected codes and widths are computed from std::numeric_limits, not typed in.
#include <dlpx/dlpx.hpp>

#include <complex>
#include <cstdint>
#include <limits>
#include <string>

#include "check.hpp"

namespace {

template <class T>
void check_integer() {
  using L = std::numeric_limits<T>;
  constexpr DLDataType d = dlpx::dtype_of<T>();  // constexpr: usable at compile time
  CHECK_EQ(int(d.code), int(L::is_signed ? kDLInt : kDLUInt));
  CHECK_EQ(int(d.bits), L::digits + (L::is_signed ? 1 : 0));
  CHECK_EQ(int(d.lanes), 1);
  CHECK(dlpx::has_dtype_v<T>);
  CHECK(dlpx::same_dtype(dlpx::dtype_of<const T>(), d));
  CHECK(dlpx::same_dtype(dlpx::dtype_of<volatile T>(), d));
}

template <class T>
void check_float() {
  using L = std::numeric_limits<T>;
  constexpr DLDataType d = dlpx::dtype_of<T>();
  CHECK(L::is_iec559);
  CHECK_EQ(int(d.code), int(kDLFloat));
  CHECK_EQ(int(d.bits), int(sizeof(T) * 8));
  CHECK_EQ(int(d.lanes), 1);
}

template <class C>
void check_complex() {
  using V = typename C::value_type;
  constexpr DLDataType d = dlpx::dtype_of<C>();
  CHECK_EQ(int(d.code), int(kDLComplex));
  CHECK_EQ(int(d.bits), 2 * int(dlpx::dtype_of<V>().bits));
  CHECK_EQ(int(d.lanes), 1);
}

// A complex type of someone else's library: recognised by value_type, real(),
// imag() and its size, without dlpx knowing its name.
struct MyComplex {
  using value_type = double;
  double re, im;
  double real() const { return re; }
  double imag() const { return im; }
};

// Looks complex but is not a pair of IEEE halves: must have no dtype.
struct IntComplex {
  using value_type = int;
  int re, im;
  int real() const { return re; }
  int imag() const { return im; }
};

struct Opaque {
  int x;
};

// A user type given a dtype through the customisation point.
struct Pixel {
  uint8_t r, g, b, a;
};

}  // namespace

template <>
struct dlpx::dtype_traits<Pixel> {
  static constexpr DLDataType value{kDLUInt, 8, 4};
};

int main() {
  check::run("bool_is_kDLBool_8_bits", [] {
    constexpr DLDataType d = dlpx::dtype_of<bool>();
    CHECK_EQ(int(d.code), int(kDLBool));
    CHECK_EQ(int(d.bits), int(sizeof(bool) * 8));
    CHECK_EQ(int(d.lanes), 1);
  });
  check::run("every_signed_and_unsigned_integer", [] {
    check_integer<signed char>();
    check_integer<unsigned char>();
    check_integer<short>();
    check_integer<unsigned short>();
    check_integer<int>();
    check_integer<unsigned>();
    check_integer<long>();
    check_integer<unsigned long>();
    check_integer<long long>();
    check_integer<unsigned long long>();
    check_integer<int8_t>();
    check_integer<uint64_t>();
  });
#if defined(__SIZEOF_INT128__)
  check::run("gnu_int128_is_128_bits", [] {
    CHECK_EQ(int(dlpx::dtype_of<dlpx::detail::int128>().bits), 128);
    CHECK_EQ(int(dlpx::dtype_of<dlpx::detail::uint128>().code), int(kDLUInt));
  });
#endif
  check::run("float_and_double_are_ieee", [] {
    check_float<float>();
    check_float<double>();
  });
  check::run("long_double_only_when_ieee", [] {
    // x87's 80-bit format is not binary128, so it must not claim float128.
    constexpr bool ieee = std::numeric_limits<long double>::digits == 53 || std::numeric_limits<long double>::digits == 113;
    CHECK_EQ(dlpx::has_dtype_v<long double>, ieee);
  });
  check::run("complex_by_shape", [] {
    check_complex<std::complex<float>>();
    check_complex<std::complex<double>>();
    check_complex<MyComplex>();
    CHECK(!dlpx::has_dtype_v<IntComplex>);
    CHECK(!dlpx::has_dtype_v<std::complex<long double>> || std::numeric_limits<long double>::digits == 53);
  });
  check::run("character_and_other_types_have_no_dtype", [] {
    // Plain char's signedness is the platform's choice: it has no honest dtype.
    CHECK(!dlpx::has_dtype_v<char>);
    CHECK(!dlpx::has_dtype_v<wchar_t>);
    CHECK(!dlpx::has_dtype_v<char16_t>);
    CHECK(!dlpx::has_dtype_v<char32_t>);
#if defined(__cpp_char8_t)
    CHECK(!dlpx::has_dtype_v<char8_t>);
#endif
    CHECK(!dlpx::has_dtype_v<Opaque>);
    CHECK(!dlpx::has_dtype_v<float*>);
    CHECK(!dlpx::has_dtype_v<std::byte>);
  });
  check::run("customisation_point", [] {
    constexpr DLDataType d = dlpx::dtype_of<const Pixel>();
    CHECK_EQ(int(d.code), int(kDLUInt));
    CHECK_EQ(int(d.bits) * int(d.lanes), int(sizeof(Pixel) * 8));
    CHECK_EQ(dlpx::dtype_name(d), std::string("uint8x4"));
  });
  check::run("same_dtype_and_same_device_compare_all_fields", [] {
    CHECK(dlpx::same_dtype(DLDataType{kDLFloat, 32, 1}, DLDataType{kDLFloat, 32, 1}));
    CHECK(!dlpx::same_dtype(DLDataType{kDLFloat, 32, 1}, DLDataType{kDLFloat, 32, 2}));
    CHECK(!dlpx::same_dtype(DLDataType{kDLFloat, 16, 1}, DLDataType{kDLBfloat, 16, 1}));
    CHECK(!dlpx::same_dtype(DLDataType{kDLInt, 8, 1}, DLDataType{kDLInt, 16, 1}));
    CHECK(dlpx::same_device(DLDevice{kDLCUDA, 1}, DLDevice{kDLCUDA, 1}));
    CHECK(!dlpx::same_device(DLDevice{kDLCUDA, 1}, DLDevice{kDLCUDA, 0}));
    CHECK(!dlpx::same_device(DLDevice{kDLCUDA, 0}, DLDevice{kDLCUDAHost, 0}));
  });
  return check::finish();
}

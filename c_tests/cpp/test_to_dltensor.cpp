// dlpx::to_dltensor: pointer + shape (+ strides) and mdspan-like views to a
// non-owning DLTensor whose shape/strides live inline in the holder.
#include <dlpx/dlpx.hpp>

#include <array>
#include <complex>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "check.hpp"

namespace {

// get() must exist on lvalues and be deleted on rvalues (spec 004).
template <class H, class = void>
struct get_on_rvalue : std::false_type {};
template <class H>
struct get_on_rvalue<H, std::void_t<decltype(std::declval<H&&>().get())>> : std::true_type {};
template <class H, class = void>
struct get_on_lvalue : std::false_type {};
template <class H>
struct get_on_lvalue<H, std::void_t<decltype(std::declval<H&>().get())>> : std::true_type {};
static_assert(get_on_lvalue<dlpx::DLTensorHolder<2>>::value, "get() on an lvalue holder");
static_assert(get_on_lvalue<const dlpx::DLTensorHolder<2>>::value, "get() on a const lvalue holder");
static_assert(!get_on_rvalue<dlpx::DLTensorHolder<2>>::value, "get() on a temporary must not compile");
static_assert(!get_on_rvalue<const dlpx::DLTensorHolder<0>>::value, "get() on a const temporary must not compile");

// A minimal mdspan-like type of someone else's library, with unsigned
// 64-bit extents and strides that may not fit in int64_t.
template <std::size_t R>
struct ForeignView {
  double* p;
  std::array<uint64_t, R> e;
  std::array<uint64_t, R> s;
  static constexpr std::size_t rank() { return R; }
  uint64_t extent(std::size_t i) const { return e[i]; }
  uint64_t stride(std::size_t i) const { return s[i]; }
  double* data_handle() const { return p; }
};

template <std::size_t R>
void expect_tensor(const DLTensor& t, const void* data, const std::array<int64_t, R>& shape,
                   const std::array<int64_t, R>& strides, DLDataType dtype, DLDevice device) {
  CHECK_EQ(t.data, data);
  CHECK_EQ(t.ndim, int32_t(R));
  CHECK(dlpx::same_dtype(t.dtype, dtype));
  CHECK(dlpx::same_device(t.device, device));
  CHECK_EQ(t.byte_offset, uint64_t(0));
  for (std::size_t i = 0; i < R; ++i) {
    CHECK_EQ(t.shape[i], shape[i]);
    CHECK_EQ(t.strides[i], strides[i]);
  }
}

}  // namespace

int main() {
  double buf[24] = {};

  check::run("pointer_and_shape_is_row_major", [&] {
    auto h = dlpx::to_dltensor(buf, {2, 3, 4});
    DLTensor t = h.get();
    expect_tensor<3>(t, buf, {2, 3, 4}, {12, 4, 1}, dlpx::dtype_of<double>(), DLDevice{kDLCPU, 0});
    // Shape and strides point into the holder, not into the caller's list.
    const char* lo = reinterpret_cast<const char*>(&h);
    CHECK(reinterpret_cast<const char*>(t.shape) >= lo && reinterpret_cast<const char*>(t.shape) < lo + sizeof h);
    CHECK(reinterpret_cast<const char*>(t.strides) >= lo && reinterpret_cast<const char*>(t.strides) < lo + sizeof h);
    CHECK_EQ(decltype(h)::rank(), std::size_t(3));
  });
  check::run("explicit_strides_and_device", [&] {
    auto h = dlpx::to_dltensor(buf, {3, 2}, {1, 3}, DLDevice{kDLCUDA, 2});
    DLTensor t = h.get();
    expect_tensor<2>(t, buf, {3, 2}, {1, 3}, dlpx::dtype_of<double>(), DLDevice{kDLCUDA, 2});
    std::array<std::size_t, 2> shape{4, 6};
    std::array<long, 2> strides{6, 1};
    auto g = dlpx::to_dltensor(buf, shape, strides);
    expect_tensor<2>(g.get(), buf, {4, 6}, {6, 1}, dlpx::dtype_of<double>(), DLDevice{kDLCPU, 0});
  });
  check::run("copies_point_into_themselves", [&] {
    auto h = dlpx::to_dltensor(buf, {2, 3});
    auto copy = h;
    DLTensor a = h.get();
    DLTensor b = copy.get();
    CHECK(a.shape != b.shape);
    CHECK_EQ(b.shape[1], int64_t(3));
    CHECK_EQ(b.strides[0], int64_t(3));
  });
  check::run("rank_zero_has_null_shape_and_strides", [&] {
    auto h = dlpx::to_dltensor(buf, std::array<int64_t, 0>{});
    DLTensor t = h.get();
    CHECK_EQ(t.ndim, 0);
    CHECK(t.shape == nullptr);
    CHECK(t.strides == nullptr);
    CHECK_EQ(t.data, static_cast<void*>(buf));  // a scalar has one element
  });
  check::run("zero_size_has_null_data", [&] {
    auto h = dlpx::to_dltensor(buf, {3, 0});
    DLTensor t = h.get();
    CHECK(t.data == nullptr);
    CHECK_EQ(t.shape[0], int64_t(3));
    CHECK_EQ(t.shape[1], int64_t(0));
  });
  check::run("const_elements_are_const_cast", [&] {
    const double* cp = buf;
    auto h = dlpx::to_dltensor(cp, {4});
    CHECK_EQ(h.get().data, static_cast<void*>(buf));
    CHECK(dlpx::same_dtype(h.get().dtype, dlpx::dtype_of<double>()));
  });
  check::run("element_types", [&] {
    std::complex<float> c[2];
    auto hc = dlpx::to_dltensor(c, {2});
    CHECK_EQ(dlpx::dtype_name(hc.get().dtype), std::string("complex64"));
    bool b[2] = {};
    auto hb = dlpx::to_dltensor(b, {2});
    CHECK_EQ(dlpx::dtype_name(hb.get().dtype), std::string("bool"));
    uint16_t u[2] = {};
    auto hu = dlpx::to_dltensor(u, {2});
    CHECK_EQ(dlpx::dtype_name(hu.get().dtype), std::string("uint16"));
  });
  check::run("mdspan_like_views", [&] {
    dlpx::StridedView<double, 2> sv(buf, {3, 4}, {1, 3});
    auto h = dlpx::to_dltensor(sv);
    expect_tensor<2>(h.get(), buf, {3, 4}, {1, 3}, dlpx::dtype_of<double>(), DLDevice{kDLCPU, 0});
    ForeignView<2> fv{buf, {2, 5}, {5, 1}};
    auto g = dlpx::to_dltensor(fv, DLDevice{kDLCUDAHost, 0});
    expect_tensor<2>(g.get(), buf, {2, 5}, {5, 1}, dlpx::dtype_of<double>(), DLDevice{kDLCUDAHost, 0});
  });
  check::run("values_beyond_int64_throw_invalid_argument", [&] {
    const uint64_t big = uint64_t(std::numeric_limits<int64_t>::max()) + 1;
    ForeignView<2> fe{buf, {2, big}, {1, 1}};
    CHECK_THROWS(std::invalid_argument, "dlpx: to_dltensor: extent(1) = 9223372036854775808 does not fit in int64_t",
                 dlpx::to_dltensor(fe));
    ForeignView<2> fs{buf, {2, 2}, {big, 1}};
    CHECK_THROWS(std::invalid_argument, "stride(0) = 9223372036854775808 does not fit", dlpx::to_dltensor(fs));
    // The largest representable value passes.
    ForeignView<1> ok{buf, {uint64_t(std::numeric_limits<int64_t>::max())}, {1}};
    auto h = dlpx::to_dltensor(ok);
    CHECK_EQ(h.get().shape[0], std::numeric_limits<int64_t>::max());
    const std::size_t sbig[1] = {static_cast<std::size_t>(big)};
    CHECK_THROWS(std::invalid_argument, "extent(0)", dlpx::to_dltensor(buf, sbig));
  });
  check::run("negative_extents_and_stride_overflow_throw", [&] {
    CHECK_THROWS(std::invalid_argument, "extent(1) = -2 is negative", dlpx::to_dltensor(buf, {3, -2}));
    const int64_t huge = int64_t(1) << 40;
    CHECK_THROWS(std::invalid_argument, "row-major strides", dlpx::to_dltensor(buf, {huge, huge, huge}));
    // Only strides must fit, not the element count: 2^40 x 2^30 is fine.
    auto h = dlpx::to_dltensor(buf, {huge, int64_t(1) << 30});
    CHECK_EQ(h.get().strides[0], int64_t(1) << 30);
  });
  return check::finish();
}

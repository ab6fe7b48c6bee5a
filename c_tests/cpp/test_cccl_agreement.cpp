// dlpx against CUDA's own implementation (CCCL, from the nvidia-cuda-cccl
// wheel, compiled by the host compiler against the official dlpack.h):
//  - dlpx::to_dltensor vs cuda::to_dlpack_tensor on the same cuda::host_mdspan,
//    field by field, for element types x layouts x ranks 0..4 x (non-empty,
//    zero-size);
//  - dlpx::dtype_of vs CCCL's mapping for every CUDA scalar and vector type;
//  - dlpx::as_mdspan vs cuda::to_host_mdspan<T, R, layout_stride> on the
//    resulting DLTensors.
// Where the two differ, spec 004 / DLPack decide, and each case below says
// why dlpx differs and asserts both behaviours, so a change on either side
// shows up here.
#include <dlpack/dlpack.h>  // the official header first: dlpx's shares its guard

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp4.h>
#include <cuda_fp6.h>
#include <cuda_fp8.h>
#include <vector_types.h>

#include <cuda/mdspan>
#include <cuda/std/complex>

#include <dlpx/dlpx.hpp>

#include <array>
#include <cfloat>
#include <complex>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "check.hpp"
#include "fixture.hpp"

namespace {

int g_cases = 0;        // (type, layout, rank, size) conversions compared
int g_dtype_types = 0;  // element types whose dtypes were compared

bool same_tensor(const DLTensor& a, const DLTensor& b, std::string* why) {
  auto fail = [&](const std::string& w) {
    *why = w;
    return false;
  };
  if (a.data != b.data) return fail("data");
  if (!dlpx::same_device(a.device, b.device)) return fail("device");
  if (a.ndim != b.ndim) return fail("ndim");
  if (!dlpx::same_dtype(a.dtype, b.dtype)) return fail("dtype " + dlpx::dtype_name(a.dtype) + " vs " + dlpx::dtype_name(b.dtype));
  if (a.byte_offset != b.byte_offset) return fail("byte_offset");
  if ((a.shape == nullptr) != (b.shape == nullptr)) return fail("shape NULL-ness");
  if ((a.strides == nullptr) != (b.strides == nullptr)) return fail("strides NULL-ness");
  for (int i = 0; i < a.ndim; ++i) {
    if (a.shape[i] != b.shape[i]) return fail("shape[" + std::to_string(i) + "]");
    if (a.strides[i] != b.strides[i]) return fail("strides[" + std::to_string(i) + "]");
  }
  return true;
}

// The dtype CCCL gives T, read from a rank-0 conversion.
template <class T>
DLDataType cccl_dtype() {
  alignas(64) static unsigned char storage[64];
  cuda::host_mdspan<T, cuda::std::extents<int>> md{reinterpret_cast<T*>(storage), cuda::std::extents<int>{}};
  auto dl = cuda::to_dlpack_tensor(md);
  return dl.get().dtype;
}

template <class... T>
void compare_dtypes() {
  (
      [] {
        ++g_dtype_types;
        const DLDataType c = cccl_dtype<T>();
        constexpr DLDataType d = dlpx::dtype_of<T>();
        const bool ok = dlpx::same_dtype(c, d);
        ::check::record(ok, __FILE__, __LINE__, "dtype_of agrees with CCCL",
                        ok ? std::string() : dlpx::dtype_name(c) + " (CCCL) vs " + dlpx::dtype_name(d) + " (dlpx)");
      }(),
      ...);
}

constexpr std::array<std::size_t, 4> kDims = {2, 3, 4, 5};

template <class L, std::size_t R>
struct MappingMaker;

template <std::size_t R>
struct MappingMaker<cuda::std::layout_right, R> {
  template <class E>
  static auto make(const E& e) {
    return typename cuda::std::layout_right::template mapping<E>(e);
  }
};
template <std::size_t R>
struct MappingMaker<cuda::std::layout_left, R> {
  template <class E>
  static auto make(const E& e) {
    return typename cuda::std::layout_left::template mapping<E>(e);
  }
};
// layout_stride with padded, neither row- nor column-major strides: every
// other dimension is the fastest-moving one, and each is padded by one.
template <std::size_t R>
struct MappingMaker<cuda::std::layout_stride, R> {
  template <class E>
  static auto make(const E& e) {
    cuda::std::array<std::size_t, R> s{};
    std::size_t acc = 1;
    for (std::size_t k = 0; k < R; ++k) {
      const std::size_t d = (k % 2 == 0) ? R - 1 - k / 2 : k / 2;
      s[d] = acc;
      acc *= e.extent(d) + 1;
    }
    return typename cuda::std::layout_stride::template mapping<E>(e, s);
  }
};

template <class T, class L, std::size_t R, std::size_t... I>
void compare_one(bool zero_size, std::index_sequence<I...>) {
  using E = cuda::std::dextents<std::size_t, R>;
  const E e{(zero_size && I == R - 1 ? std::size_t(0) : kDims[I])...};
  alignas(64) static unsigned char storage[sizeof(T) * 2048];
  T* data = reinterpret_cast<T*>(storage);
  const auto mapping = MappingMaker<L, R>::make(e);
  cuda::host_mdspan<T, E, L> md{data, mapping};

  auto theirs = cuda::to_dlpack_tensor(md);
  auto ours = dlpx::to_dltensor(md);
  const DLTensor c = theirs.get();
  const DLTensor d = ours.get();
  std::string why;
  const bool ok = same_tensor(c, d, &why);
  ++g_cases;
  ::check::record(ok, __FILE__, __LINE__, "to_dltensor agrees with cuda::to_dlpack_tensor", why);

  // The reverse, on a tensor that both libraries produced identically.
  if (!ok || c.data == nullptr) return;  // zero-size: see zero_size_tensors_round_trip
  auto back_c = cuda::to_host_mdspan<T, R, cuda::std::layout_stride>(c);
  auto back_d = dlpx::as_mdspan<T, R>(c);
  bool same = static_cast<const void*>(back_c.data_handle()) == static_cast<const void*>(back_d.data_handle());
  for (std::size_t k = 0; k < R; ++k) {
    same = same && int64_t(back_c.extent(k)) == int64_t(back_d.extent(k)) &&
           int64_t(back_c.stride(k)) == int64_t(back_d.stride(k));
  }
  ::check::record(same, __FILE__, __LINE__, "as_mdspan agrees with cuda::to_host_mdspan");
}

template <class T, class L, std::size_t R>
void compare_rank() {
  compare_one<T, L, R>(false, std::make_index_sequence<R>{});
  if constexpr (R > 0) compare_one<T, L, R>(true, std::make_index_sequence<R>{});
}

template <class T, class L>
void compare_layout() {
  compare_rank<T, L, 0>();
  compare_rank<T, L, 1>();
  compare_rank<T, L, 2>();
  compare_rank<T, L, 3>();
  compare_rank<T, L, 4>();
}

template <class... T>
void compare_conversions() {
  ((compare_layout<T, cuda::std::layout_right>(), compare_layout<T, cuda::std::layout_left>(),
    compare_layout<T, cuda::std::layout_stride>()),
   ...);
}

template <class F>
bool throws(F&& f) {
  try {
    f();
  } catch (const std::exception&) {
    return true;
  }
  return false;
}

}  // namespace

int main() {
  check::run("to_dltensor_matches_cuda_to_dlpack_tensor", [] {
    compare_conversions<bool, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, float, double,
                        __half, __nv_bfloat16, __nv_fp8_e4m3, __nv_fp8_e5m2, cuda::std::complex<float>,
                        cuda::std::complex<double>, float2, int4, __half2>();
  });
  check::run("dtype_of_matches_cccl_for_cuda_types", [] {
    compare_dtypes<bool, signed char, unsigned char, short, unsigned short, int, unsigned, long, unsigned long,
                   long long, unsigned long long, float, double, dlpx::detail::int128, dlpx::detail::uint128,
                   __half, __half2, __nv_bfloat16, __nv_bfloat162, __nv_fp8_e4m3, __nv_fp8x2_e4m3, __nv_fp8x4_e4m3,
                   __nv_fp8_e5m2, __nv_fp8x2_e5m2, __nv_fp8x4_e5m2, __nv_fp8_e8m0, __nv_fp8x2_e8m0, __nv_fp8x4_e8m0,
                   __nv_fp6_e2m3, __nv_fp6x2_e2m3, __nv_fp6x4_e2m3, __nv_fp6_e3m2, __nv_fp6x2_e3m2, __nv_fp6x4_e3m2,
                   __nv_fp4_e2m1, __nv_fp4x2_e2m1, __nv_fp4x4_e2m1, cuda::std::complex<__half>,
                   cuda::std::complex<float>, cuda::std::complex<double>, char2, char4, uchar2, uchar4, short2,
                   short4, ushort2, ushort4, int2, int4, uint2, uint4, long2, ulong2, longlong2, ulonglong2, float2,
                   float4, double2, long4_16a, long4_32a, ulong4_16a, ulong4_32a, longlong4_16a, longlong4_32a,
                   ulonglong4_16a, ulonglong4_32a, double4_16a, double4_32a>();
  });
  check::run("const_elements_agree", [] {
    static float data[6];
    using E = cuda::std::extents<std::size_t, 2, 3>;
    cuda::host_mdspan<const float, E> md{data, E{}};
    auto c = cuda::to_dlpack_tensor(md);
    auto d = dlpx::to_dltensor(md);
    std::string why;
    CHECK(same_tensor(c.get(), d.get(), &why));
  });
  check::run("managed_mdspan_defaults_to_cuda_managed_like_cccl", [] {
    static float data[6];
    using E = cuda::std::extents<std::size_t, 2, 3>;
    cuda::managed_mdspan<float, E> md{data, E{}};
    auto c = cuda::to_dlpack_tensor(md);
    auto d = dlpx::to_dltensor(md);
    std::string why;
    CHECK(same_tensor(c.get(), d.get(), &why));
    CHECK_EQ(dlpx::device_name(d.get().device), std::string("cuda_managed:0"));
  });
  check::run("both_reject_extents_beyond_int64", [] {
    using E = cuda::std::dextents<std::size_t, 1>;
    const std::size_t big = std::size_t(INT64_MAX) + 1;
    cuda::host_mdspan<float, E> md{static_cast<float*>(nullptr), E{big}};
    CHECK(throws([&] { (void)cuda::to_dlpack_tensor(md); }));
    CHECK_THROWS(std::invalid_argument, "extent(0) = 9223372036854775808", dlpx::to_dltensor(md));
  });
  check::run("both_reject_bad_tensors_in_as_mdspan", [] {
    alignas(16) static float data[12];
    using E = cuda::std::extents<std::size_t, 3, 4>;
    cuda::host_mdspan<float, E> md{data, E{}};
    auto h = dlpx::to_dltensor(md);
    DLTensor t = h.get();
    using S = cuda::std::layout_stride;
    auto both = [&](const DLTensor& x, auto tag) {
      using T = typename decltype(tag)::type;
      return throws([&] { (void)cuda::to_host_mdspan<T, 2, S>(x); }) && throws([&] { (void)dlpx::as_mdspan<T, 2>(x); });
    };
    CHECK(both(t, std::common_type<int32_t>{}));  // dtype
    DLTensor r = t;
    r.ndim = 3;
    CHECK(both(r, std::common_type<float>{}));  // ndim
    DLTensor g = t;
    g.device = DLDevice{kDLCUDA, 0};
    CHECK(both(g, std::common_type<float>{}));  // device
    DLTensor m = t;
    m.byte_offset = 2;
    CHECK(both(m, std::common_type<float>{}));  // alignment
    int64_t bad_strides[2] = {0, 1};
    DLTensor b = t;
    b.strides = bad_strides;
    CHECK(both(b, std::common_type<float>{}));  // broadcast stride on a real extent
  });

  // ---- Documented differences: dlpx follows spec 004 / DLPack here. ----

  check::run("difference_a_mapping_s_offset_is_kept", [] {
    // cuda::to_host_mdspan's default layout (layout_stride_relaxed) keeps a DLTensor's
    // byte_offset, or a reversed view's start, as its mapping's offset: element 0 is
    // data_handle() + mapping()(0). dlpx's DLTensor starts at element 0; CCCL's
    // cuda::to_dlpack_tensor (13.x) takes data_handle() as element 0 and loses the offset.
    float buf[6] = {0, 1, 2, 3, 4, 5};
    Fixture f(buf, dlpx::dtype_of<float>(), {4}, {1});
    f.t.byte_offset = 2 * sizeof(float);
    auto md = cuda::to_host_mdspan<float, 1>(f.t);
    CHECK_EQ(md(0), 2.0f);
    auto h = dlpx::to_dltensor(md);
    const DLTensor& u = h.get();
    CHECK(static_cast<float*>(u.data) + u.byte_offset / sizeof(float) == &buf[2]);
    auto c = cuda::to_dlpack_tensor(md);
    CHECK(static_cast<float*>(c.get().data) + c.get().byte_offset / sizeof(float) == &buf[0]);
    // A reversed view: elements buf[5], buf[4], buf[3], from buf + 3 with offset 2.
    using E = cuda::std::dims<1, int64_t>;
    using M = cuda::layout_stride_relaxed::mapping<E, cuda::steps<1, int64_t>>;
    cuda::host_mdspan<float, E, cuda::layout_stride_relaxed> reversed(buf + 3, M(E(3), cuda::steps<1, int64_t>(-1), 2));
    auto r = dlpx::to_dltensor(reversed);
    const float* first = static_cast<const float*>(r.get().data);
    CHECK(first == &buf[5] && r.get().strides[0] == -1);
    for (int64_t i = 0; i < 3; ++i) CHECK_EQ(first[i * r.get().strides[0]], reversed(i));
  });
  check::run("difference_zero_size_tensors_round_trip", [] {
    // Both produce data = NULL for a zero-size view (spec 004). CCCL's own
    // to_host_mdspan then refuses that tensor ("data must be non-null");
    // dlpx accepts it, since zero-size tensors legitimately have no data
    // (dlpx's allocator makes them that way too).
    using E = cuda::std::dextents<std::size_t, 2>;
    cuda::host_mdspan<float, E> md{static_cast<float*>(nullptr) + 0, E{0, 3}};
    auto h = cuda::to_dlpack_tensor(md);
    const DLTensor t = h.get();
    CHECK(t.data == nullptr);
    CHECK(throws([&] { (void)cuda::to_host_mdspan<float, 2, cuda::std::layout_stride>(t); }));
    auto v = dlpx::as_mdspan<float, 2>(t);
    CHECK_EQ(int64_t(v.extent(1)), int64_t(3));
  });
  check::run("difference_extent_one_strides", [] {
    // A stride on an extent-1 dimension never moves the pointer, and torch
    // leaves 0 there after expand(). CCCL's layout_stride rejects it; dlpx
    // normalises it to 1 and keeps the other strides.
    alignas(16) static float data[12];
    int64_t shape[3] = {3, 1, 4};
    int64_t strides[3] = {4, 0, 1};
    DLTensor t{};
    t.data = data;
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 3;
    t.dtype = dlpx::dtype_of<float>();
    t.shape = shape;
    t.strides = strides;
    CHECK(throws([&] { (void)cuda::to_host_mdspan<float, 3, cuda::std::layout_stride>(t); }));
    auto v = dlpx::as_mdspan<float, 3>(t);
    CHECK_EQ(int64_t(v.stride(0)), int64_t(4));
    CHECK_EQ(int64_t(v.stride(1)), int64_t(1));
  });
  check::run("difference_packed_fp4_is_not_one_byte_per_element", [] {
    // DLPack packs sub-byte types unless IS_SUBBYTE_TYPE_PADDED is set, and a
    // bare DLTensor cannot carry that flag. CCCL views a float4_e2m1fn tensor
    // as one __nv_fp4_e2m1 (1 byte) per element regardless, reading packed
    // data wrongly; dlpx refuses unless the managed tensor says "padded".
    alignas(16) static unsigned char bytes[8];
    int64_t shape[1] = {8};
    int64_t strides[1] = {1};
    DLTensor t{};
    t.data = bytes;
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = dlpx::dtype_of<__nv_fp4_e2m1>();
    t.shape = shape;
    t.strides = strides;
    CHECK(!throws([&] { (void)cuda::to_host_mdspan<__nv_fp4_e2m1, 1, cuda::std::layout_stride>(t); }));
    CHECK_THROWS(dlpx::Error, "packed", (dlpx::as_mdspan<__nv_fp4_e2m1, 1>(t)));
    DLManagedTensorVersioned m{};
    m.version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    m.dl_tensor = t;
    m.flags = DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;
    CHECK_EQ(int64_t(dlpx::as_mdspan<__nv_fp4_e2m1, 1>(m).extent(0)), int64_t(8));
  });
  check::run("difference_long_double_is_not_float128", [] {
    // CCCL maps long double to float128 by its size; on x86-64 it is the
    // 80-bit x87 format, which is not IEEE binary128, so dlpx gives it no dtype.
    const DLDataType c = cccl_dtype<long double>();
    CHECK_EQ(int(c.code), int(kDLFloat));
    CHECK_EQ(int(c.bits), int(sizeof(long double) * 8));
    CHECK_EQ(dlpx::has_dtype_v<long double>, LDBL_MANT_DIG == 53 || LDBL_MANT_DIG == 113);
  });
  check::run("difference_complex_bfloat16_has_no_dtype", [] {
    // DLPack's complex32 means two float16s. CCCL also calls a complex of
    // bfloat16 complex32, which a consumer would decode as float16 halves.
    const DLDataType c = cccl_dtype<cuda::std::complex<__nv_bfloat16>>();
    CHECK(dlpx::same_dtype(c, cccl_dtype<cuda::std::complex<__half>>()));
    CHECK(!dlpx::has_dtype_v<cuda::std::complex<__nv_bfloat16>>);
    CHECK(dlpx::same_dtype(dlpx::dtype_of<cuda::std::complex<__half>>(), c));
  });
  check::run("extension_std_complex", [] {
    // CCCL maps only cuda::std::complex; dlpx maps every complex type by
    // shape, so std::complex<float> is complex64 like cuda::std::complex<float>.
    CHECK(dlpx::same_dtype(dlpx::dtype_of<std::complex<float>>(), cccl_dtype<cuda::std::complex<float>>()));
    CHECK(dlpx::same_dtype(dlpx::dtype_of<std::complex<double>>(), cccl_dtype<cuda::std::complex<double>>()));
  });

  std::printf("compared %d conversions (20 element types x 3 layouts x ranks 0-4, non-empty and zero-size) "
              "and the dtypes of %d element types\n",
              g_cases, g_dtype_types);
  return check::finish();
}

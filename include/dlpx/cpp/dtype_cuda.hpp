// dlpx C++ layer: DLPack dtypes of the CUDA element types (__half,
// __nv_bfloat16, fp8/fp6/fp4 and the built-in vector types). Each group is
// declared only when its CUDA header was included before dlpx, so dlpx itself
// never needs the CUDA toolkit. Included by <dlpx/cpp/dtype.hpp>.
//
// The codes follow CCCL's cuda::to_dlpack_tensor: __nv_fp8_e4m3 is
// float8_e4m3fn (it has no infinities), vector types map to their scalar's
// dtype with lanes = 2 or 4, and 1- or 3-lane vectors have no dtype.
//
// There is deliberately no include guard: each group has its own, so a
// translation unit that includes a CUDA header after dlpx can include this
// file once more to pick the new types up.

#include <dlpx/cpp/dtype.hpp>

#ifndef DLPX_DETAIL_SCALAR_DTYPE
#define DLPX_DETAIL_SCALAR_DTYPE(type, code, bits) \
  namespace dlpx {                                 \
  template <>                                      \
  struct dtype_traits<type> : detail::dtype_constant<code, bits> {}; \
  }
#define DLPX_DETAIL_VECTOR_DTYPE(type, scalar, lanes) \
  namespace dlpx {                                    \
  template <>                                         \
  struct dtype_traits<type> : detail::vector_dtype<scalar, lanes> {}; \
  }
#endif

#if defined(__CUDA_FP16_H__) && !defined(DLPX_DETAIL_HAVE_FP16)
#define DLPX_DETAIL_HAVE_FP16
DLPX_DETAIL_SCALAR_DTYPE(__half, kDLFloat, 16)
DLPX_DETAIL_VECTOR_DTYPE(__half2, __half, 2)
#endif

#if defined(__CUDA_BF16_H__) && !defined(DLPX_DETAIL_HAVE_BF16)
#define DLPX_DETAIL_HAVE_BF16
DLPX_DETAIL_SCALAR_DTYPE(__nv_bfloat16, kDLBfloat, 16)
DLPX_DETAIL_VECTOR_DTYPE(__nv_bfloat162, __nv_bfloat16, 2)
#endif

#if defined(__CUDA_FP8_H__) && !defined(DLPX_DETAIL_HAVE_FP8)
#define DLPX_DETAIL_HAVE_FP8
DLPX_DETAIL_SCALAR_DTYPE(__nv_fp8_e4m3, kDLFloat8_e4m3fn, 8)
DLPX_DETAIL_VECTOR_DTYPE(__nv_fp8x2_e4m3, __nv_fp8_e4m3, 2)
DLPX_DETAIL_VECTOR_DTYPE(__nv_fp8x4_e4m3, __nv_fp8_e4m3, 4)
DLPX_DETAIL_SCALAR_DTYPE(__nv_fp8_e5m2, kDLFloat8_e5m2, 8)
DLPX_DETAIL_VECTOR_DTYPE(__nv_fp8x2_e5m2, __nv_fp8_e5m2, 2)
DLPX_DETAIL_VECTOR_DTYPE(__nv_fp8x4_e5m2, __nv_fp8_e5m2, 4)
// cuda_fp8.h includes cuda_runtime_api.h, which defines CUDART_VERSION;
// e8m0 appeared in CUDA 12.8.
#if defined(CUDART_VERSION) && CUDART_VERSION >= 12080
DLPX_DETAIL_SCALAR_DTYPE(__nv_fp8_e8m0, kDLFloat8_e8m0fnu, 8)
DLPX_DETAIL_VECTOR_DTYPE(__nv_fp8x2_e8m0, __nv_fp8_e8m0, 2)
DLPX_DETAIL_VECTOR_DTYPE(__nv_fp8x4_e8m0, __nv_fp8_e8m0, 4)
#endif
#endif

// Each fp6 value occupies a whole byte in these types (fp6x2 is 2 bytes, fp6x4
// 4), as one fp4 does in __nv_fp4_e2m1, so a tensor of them is "padded" in
// DLPack's sense (DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED); fp4x2 and fp4x4
// pack theirs (1 and 2 bytes). The dtype still says 6 or 4 bits, as CCCL and
// DLPack have it; to_dltensor refuses the padded ones (a DLTensor has no flags).
#if defined(__CUDA_FP6_H__) && !defined(DLPX_DETAIL_HAVE_FP6)
#define DLPX_DETAIL_HAVE_FP6
DLPX_DETAIL_SCALAR_DTYPE(__nv_fp6_e2m3, kDLFloat6_e2m3fn, 6)
DLPX_DETAIL_VECTOR_DTYPE(__nv_fp6x2_e2m3, __nv_fp6_e2m3, 2)
DLPX_DETAIL_VECTOR_DTYPE(__nv_fp6x4_e2m3, __nv_fp6_e2m3, 4)
DLPX_DETAIL_SCALAR_DTYPE(__nv_fp6_e3m2, kDLFloat6_e3m2fn, 6)
DLPX_DETAIL_VECTOR_DTYPE(__nv_fp6x2_e3m2, __nv_fp6_e3m2, 2)
DLPX_DETAIL_VECTOR_DTYPE(__nv_fp6x4_e3m2, __nv_fp6_e3m2, 4)
#endif

#if defined(__CUDA_FP4_H__) && !defined(DLPX_DETAIL_HAVE_FP4)
#define DLPX_DETAIL_HAVE_FP4
DLPX_DETAIL_SCALAR_DTYPE(__nv_fp4_e2m1, kDLFloat4_e2m1fn, 4)
DLPX_DETAIL_VECTOR_DTYPE(__nv_fp4x2_e2m1, __nv_fp4_e2m1, 2)
DLPX_DETAIL_VECTOR_DTYPE(__nv_fp4x4_e2m1, __nv_fp4_e2m1, 4)
#endif

#if defined(__VECTOR_TYPES_H__) && !defined(DLPX_DETAIL_HAVE_VECTOR_TYPES)
#define DLPX_DETAIL_HAVE_VECTOR_TYPES
DLPX_DETAIL_VECTOR_DTYPE(char2, signed char, 2)
DLPX_DETAIL_VECTOR_DTYPE(char4, signed char, 4)
DLPX_DETAIL_VECTOR_DTYPE(uchar2, unsigned char, 2)
DLPX_DETAIL_VECTOR_DTYPE(uchar4, unsigned char, 4)
DLPX_DETAIL_VECTOR_DTYPE(short2, short, 2)
DLPX_DETAIL_VECTOR_DTYPE(short4, short, 4)
DLPX_DETAIL_VECTOR_DTYPE(ushort2, unsigned short, 2)
DLPX_DETAIL_VECTOR_DTYPE(ushort4, unsigned short, 4)
DLPX_DETAIL_VECTOR_DTYPE(int2, int, 2)
DLPX_DETAIL_VECTOR_DTYPE(int4, int, 4)
DLPX_DETAIL_VECTOR_DTYPE(uint2, unsigned int, 2)
DLPX_DETAIL_VECTOR_DTYPE(uint4, unsigned int, 4)
DLPX_DETAIL_VECTOR_DTYPE(long2, long, 2)
DLPX_DETAIL_VECTOR_DTYPE(ulong2, unsigned long, 2)
DLPX_DETAIL_VECTOR_DTYPE(longlong2, long long, 2)
DLPX_DETAIL_VECTOR_DTYPE(ulonglong2, unsigned long long, 2)
DLPX_DETAIL_VECTOR_DTYPE(float2, float, 2)
DLPX_DETAIL_VECTOR_DTYPE(float4, float, 4)
DLPX_DETAIL_VECTOR_DTYPE(double2, double, 2)
// CUDA 13 deprecates the 4-lane 64-bit vectors in favour of explicitly
// aligned ones; both stay usable, so both get a dtype without the warning.
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#elif defined(_MSC_VER)
#pragma warning(push)
#pragma warning(disable : 4996)
#endif
DLPX_DETAIL_VECTOR_DTYPE(long4, long, 4)
DLPX_DETAIL_VECTOR_DTYPE(ulong4, unsigned long, 4)
DLPX_DETAIL_VECTOR_DTYPE(longlong4, long long, 4)
DLPX_DETAIL_VECTOR_DTYPE(ulonglong4, unsigned long long, 4)
DLPX_DETAIL_VECTOR_DTYPE(double4, double, 4)
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#elif defined(_MSC_VER)
#pragma warning(pop)
#endif
#if defined(CUDART_VERSION) && CUDART_VERSION >= 13000
DLPX_DETAIL_VECTOR_DTYPE(long4_16a, long, 4)
DLPX_DETAIL_VECTOR_DTYPE(long4_32a, long, 4)
DLPX_DETAIL_VECTOR_DTYPE(ulong4_16a, unsigned long, 4)
DLPX_DETAIL_VECTOR_DTYPE(ulong4_32a, unsigned long, 4)
DLPX_DETAIL_VECTOR_DTYPE(longlong4_16a, long long, 4)
DLPX_DETAIL_VECTOR_DTYPE(longlong4_32a, long long, 4)
DLPX_DETAIL_VECTOR_DTYPE(ulonglong4_16a, unsigned long long, 4)
DLPX_DETAIL_VECTOR_DTYPE(ulonglong4_32a, unsigned long long, 4)
DLPX_DETAIL_VECTOR_DTYPE(double4_16a, double, 4)
DLPX_DETAIL_VECTOR_DTYPE(double4_32a, double, 4)
#endif
#endif

// Printable dtype and device names: they must equal the names the Python
// side prints (dlpx.Tensor.dtype / .device), so kernels' error messages and
// Python's agree (tests/python/kernels/test_cpp_names.py compares them over
// every code and many widths; these are the cases spelled out).
#include <dlpx/dlpx.hpp>

#include <cstdint>
#include <cstring>
#include <string>

#include "check.hpp"

namespace {

DLDataType dt(int code, int bits, int lanes = 1) {
  return DLDataType{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), static_cast<uint16_t>(lanes)};
}

// Unknown types are written as bytes: casting 42 to an enum without a fixed
// underlying type would itself be undefined behaviour.
DLDevice dev(int32_t type, int id) {
  DLDevice d{};
  std::memcpy(&d.device_type, &type, sizeof type);
  d.device_id = id;
  return d;
}

}  // namespace

int main() {
  check::run("dtype_names_match_python", [] {
    const struct {
      DLDataType dtype;
      const char* name;
    } cases[] = {
        {dt(kDLBool, 8), "bool"},
        {dt(kDLInt, 8), "int8"},
        {dt(kDLInt, 16), "int16"},
        {dt(kDLInt, 32), "int32"},
        {dt(kDLInt, 64), "int64"},
        {dt(kDLUInt, 8), "uint8"},
        {dt(kDLUInt, 16), "uint16"},
        {dt(kDLUInt, 32), "uint32"},
        {dt(kDLUInt, 64), "uint64"},
        {dt(kDLFloat, 16), "float16"},
        {dt(kDLFloat, 32), "float32"},
        {dt(kDLFloat, 64), "float64"},
        {dt(kDLBfloat, 16), "bfloat16"},
        {dt(kDLComplex, 64), "complex64"},
        {dt(kDLComplex, 128), "complex128"},
        {dt(kDLFloat8_e3m4, 8), "float8_e3m4"},
        {dt(kDLFloat8_e4m3, 8), "float8_e4m3"},
        {dt(kDLFloat8_e4m3b11fnuz, 8), "float8_e4m3b11fnuz"},
        {dt(kDLFloat8_e4m3fn, 8), "float8_e4m3fn"},
        {dt(kDLFloat8_e4m3fnuz, 8), "float8_e4m3fnuz"},
        {dt(kDLFloat8_e5m2, 8), "float8_e5m2"},
        {dt(kDLFloat8_e5m2fnuz, 8), "float8_e5m2fnuz"},
        {dt(kDLFloat8_e8m0fnu, 8), "float8_e8m0fnu"},
        {dt(kDLFloat6_e2m3fn, 6), "float6_e2m3fn"},
        {dt(kDLFloat6_e3m2fn, 6), "float6_e3m2fn"},
        {dt(kDLFloat4_e2m1fn, 4), "float4_e2m1fn"},
        {dt(kDLFloat, 32, 4), "float32x4"},
        {dt(kDLBfloat, 16, 2), "bfloat16x2"},
        {dt(kDLFloat, 8), "float8"},
        {dt(kDLInt, 128), "int128"},
        {dt(kDLBool, 1), "dtype(code=6,bits=1,lanes=1)"},
        {dt(kDLComplex, 32), "complex32"},
        {dt(kDLOpaqueHandle, 64), "handle64"},
        {dt(kDLInt, 4), "int4"},
        {dt(kDLFloat8_e4m3fn, 16), "dtype(code=10,bits=16,lanes=1)"},
        {dt(99, 16, 2), "dtype(code=99,bits=16,lanes=2)"},
        {dt(kDLFloat, 32, 0), "dtype(code=2,bits=32,lanes=0)"},
    };
    for (const auto& c : cases) CHECK_EQ(dlpx::dtype_name(c.dtype), std::string(c.name));
  });
  check::run("dtype_of_names_round_trip", [] {
    CHECK_EQ(dlpx::dtype_name(dlpx::dtype_of<float>()), std::string("float32"));
    CHECK_EQ(dlpx::dtype_name(dlpx::dtype_of<uint16_t>()), std::string("uint16"));
    CHECK_EQ(dlpx::dtype_name(dlpx::dtype_of<std::complex<double>>()), std::string("complex128"));
  });
  check::run("device_names_match_python", [] {
    const struct {
      DLDevice device;
      const char* name;
    } cases[] = {
        {dev(kDLCPU, 0), "cpu:0"},
        {dev(kDLCUDA, 1), "cuda:1"},
        {dev(kDLCUDAHost, 0), "cuda_host:0"},
        {dev(kDLCUDAManaged, 0), "cuda_managed:0"},
        {dev(kDLROCM, 0), "rocm:0"},
        {dev(kDLROCMHost, 0), "rocm_host:0"},
        {dev(kDLOpenCL, 2), "opencl:2"},
        {dev(kDLVulkan, 0), "vulkan:0"},
        {dev(kDLMetal, 0), "metal:0"},
        {dev(kDLVPI, 0), "vpi:0"},
        {dev(kDLExtDev, 0), "ext_dev:0"},
        {dev(kDLOneAPI, 0), "oneapi:0"},
        {dev(kDLWebGPU, 0), "webgpu:0"},
        {dev(kDLHexagon, 0), "hexagon:0"},
        {dev(kDLMAIA, 3), "maia:3"},
        {dev(kDLTrn, 0), "trn:0"},
        {dev(42, 7), "device(type=42):7"},
        {dev(0, 0), "device(type=0):0"},
        {dev(5, 0), "device(type=5):0"},
    };
    for (const auto& c : cases) CHECK_EQ(dlpx::device_name(c.device), std::string(c.name));
  });
  return check::finish();
}

// benches/kernel_add.py's tvm-ffi add, compiled by tvm_ffi.cpp.load_inline: the kernel of
// examples/kernel_library/kernels.c written as tvm-ffi's Kernel Library Guide writes one. The
// output comes from the caller's environment allocator (ffi::Tensor::FromEnvAlloc with
// TVMFFIEnvTensorAlloc: torch's allocator when torch tensors are passed), and tvm-ffi's Python
// side returns it as the caller's type (torch in, torch.Tensor out).
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

#include <cstring>

#include "add_strided.h"

namespace ffi = tvm::ffi;

static bool supported(DLDataType t) {
  return t.lanes == 1 && ((t.code == kDLFloat && (t.bits == 32 || t.bits == 64)) ||
                          (t.code == kDLInt && (t.bits == 32 || t.bits == 64)));
}

ffi::Tensor add(ffi::TensorView a, ffi::TensorView b) {
  DLDataType t = a.dtype(), u = b.dtype();
  if (a.device().device_type != kDLCPU || b.device().device_type != kDLCPU)
    TVM_FFI_THROW(ValueError) << "tensors must be on the CPU";
  if (t.code != u.code || t.bits != u.bits || t.lanes != u.lanes) TVM_FFI_THROW(TypeError) << "dtypes differ";
  if (!supported(t)) TVM_FFI_THROW(TypeError) << "unsupported dtype";
  int ndim = a.ndim();
  if (ndim != b.ndim() || (ndim > 0 && std::memcmp(a.shape().data(), b.shape().data(), sizeof(int64_t) * ndim) != 0))
    TVM_FFI_THROW(ValueError) << "shapes differ";
  ffi::Tensor out = ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, a.shape(), t, a.device());
  // A TensorView's strides are always there (tvm-ffi fills compact ones in where a producer gives none).
  AddOperand oa{static_cast<const char *>(a.data_ptr()) + a.byte_offset(), a.strides().data()};
  AddOperand ob{static_cast<const char *>(b.data_ptr()) + b.byte_offset(), b.strides().data()};
  add_strided(ndim, a.shape().data(), t.code == kDLFloat, t.bits, oa, ob, out.data_ptr());
  return out;
}

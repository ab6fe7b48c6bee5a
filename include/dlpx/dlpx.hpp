// dlpx C++ layer (header-only, C++17) over the dlpx C API and DLPack v1.3.
//
//   dlpx::ManagedTensor  move-only owner of a DLManagedTensorVersioned*
//   dlpx::TensorView     non-owning, checked reader of a DLTensor
//   dlpx::dtype_of<T>()  C++ element type -> DLDataType (CCCL's mapping)
//   dlpx::to_dltensor()  mdspan-like view -> non-owning DLTensor, no heap
//   dlpx::as_mdspan<T,R> DLTensor -> checked layout_stride mdspan, no heap
//
// Include CUDA's cuda_fp16.h, cuda_bf16.h, cuda_fp8.h, cuda_fp6.h, cuda_fp4.h,
// vector_types.h (and <cuda/mdspan>) before this header to map their types.
// Everything here is inline C++: no exception reaches the C API, whose
// functions stay extern "C" and are called, never implemented, here.
#ifndef DLPX_DLPX_HPP_
#define DLPX_DLPX_HPP_

#if !defined(__cplusplus) || __cplusplus < 201703L
#if !defined(_MSVC_LANG) || _MSVC_LANG < 201703L
#error "dlpx/dlpx.hpp needs C++17 or later"
#endif
#endif

#include <dlpx/dlpx.h>

#include <dlpx/cpp/error.hpp>
#include <dlpx/cpp/dtype.hpp>
#include <dlpx/cpp/tensor_view.hpp>
#include <dlpx/cpp/managed_tensor.hpp>
#include <dlpx/cpp/to_dltensor.hpp>
#include <dlpx/cpp/as_mdspan.hpp>

#endif  // DLPX_DLPX_HPP_

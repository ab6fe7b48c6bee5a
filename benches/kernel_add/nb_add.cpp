// benches/kernel_add.py's nanobind add: the kernel of examples/kernel_library/kernels.c written
// as nanobind's documentation writes a function returning a new array: nb::ndarray<> arguments
// (CPU, any dtype and strides), the output allocated here and owned by a capsule, returned as
// nb::ndarray<nb::pytorch> (a torch.Tensor).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "add_strided.h"

namespace nb = nanobind;
using In = nb::ndarray<nb::device::cpu>;
using Out = nb::ndarray<nb::pytorch, nb::device::cpu>;

static bool supported(nb::dlpack::dtype t) {
  return t.lanes == 1 && ((t.code == (uint8_t)nb::dlpack::dtype_code::Float && (t.bits == 32 || t.bits == 64)) ||
                          (t.code == (uint8_t)nb::dlpack::dtype_code::Int && (t.bits == 32 || t.bits == 64)));
}

static Out add(In a, In b) {
  nb::dlpack::dtype t = a.dtype();
  if (t != b.dtype()) throw nb::type_error("dtypes differ");
  if (!supported(t)) throw nb::type_error("unsupported dtype");
  int ndim = (int)a.ndim();
  if ((size_t)ndim != b.ndim() || (ndim > 0 && std::memcmp(a.shape_ptr(), b.shape_ptr(), sizeof(int64_t) * ndim) != 0))
    throw nb::value_error("shapes differ");
  size_t numel = a.size(), itemsize = t.bits / 8;
  void *data = std::malloc(numel * itemsize > 0 ? numel * itemsize : 1);
  if (!data) throw std::bad_alloc();
  nb::capsule owner(data, [](void *p) noexcept { std::free(p); });
  // nanobind's data() already includes the byte offset.
  AddOperand oa{a.data(), a.stride_ptr()}, ob{b.data(), b.stride_ptr()};
  add_strided(ndim, a.shape_ptr(), t.code == (uint8_t)nb::dlpack::dtype_code::Float, t.bits, oa, ob, data);
  return Out(data, (size_t)ndim, (const size_t *)a.shape_ptr(), owner, nullptr, t);
}

NB_MODULE(nb_add, m) { m.def("add", &add, nb::arg("a"), nb::arg("b")); }

// dlpx_cpp_kernel.matmul(a, b): a (m x k) @ b (k x n) for float32 CPU tensors of any DLPack
// framework, written against dlpx's C++ layer:
//   - arguments arrive through the kernel API (dlpx_view_of) and are read with as_mdspan,
//     which checks dtype, rank, device and alignment and honours any strides;
//   - the result is a dlpx::ManagedTensor from the caller's framework's allocator (torch in ->
//     torch's allocator) and goes back as that framework's tensor.
// C++ exceptions stop at the Python boundary and become Python exceptions.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdexcept>

#include <dlpx/dlpx.hpp>

namespace {

// A DlpxTensorView released when the scope ends, also on exceptions.
class Argument {
 public:
  explicit Argument(PyObject* object) {
    if (dlpx_view_of(object, &view_) != 0) throw dlpx::Error("python", "");
  }
  ~Argument() { dlpx_view_release(&view_); }
  Argument(const Argument&) = delete;
  Argument& operator=(const Argument&) = delete;
  // The view with its flags (read-only, padded sub-byte), which as_mdspan honours.
  const DlpxTensorView& view() const { return view_; }

 private:
  DlpxTensorView view_{};
};

PyObject* matmul_impl(PyObject* a_object, PyObject* b_object) {
  Argument a_arg(a_object);
  Argument b_arg(b_object);
  auto a = dlpx::as_mdspan<const float, 2>(a_arg.view());
  auto b = dlpx::as_mdspan<const float, 2>(b_arg.view());
  if (a.extent(1) != b.extent(0)) {
    throw dlpx::Error("ValueError", "dlpx_cpp_kernel.matmul: inner dimensions differ: " +
                                        std::to_string(a.extent(1)) + " and " + std::to_string(b.extent(0)));
  }
  const DLPackExchangeAPI* api = dlpx_exchange_api_of(a_object);
  if (api == nullptr) throw dlpx::Error("python", "");
  auto out = dlpx::ManagedTensor::allocate(api, {static_cast<int64_t>(a.extent(0)), static_cast<int64_t>(b.extent(1))},
                                           dlpx::dtype_of<float>());
  auto c = dlpx::as_mdspan<float, 2>(out.view());
  for (int64_t i = 0; i < c.extent(0); ++i) {
    for (int64_t j = 0; j < c.extent(1); ++j) {
      float sum = 0;
      for (int64_t p = 0; p < a.extent(1); ++p) sum += a(i, p) * b(p, j);
      c(i, j) = sum;
    }
  }
  void* result = nullptr;
  if (dlpx_to_py_like(a_object, out.get(), &result) != 0) return nullptr;  // `out` still owns it
  out.release();                                                           // the object owns it now
  return static_cast<PyObject*>(result);
}

PyObject* exception_for(const std::string& kind) {
  if (kind == "ValueError") return PyExc_ValueError;
  if (kind == "TypeError") return PyExc_TypeError;
  if (kind == "MemoryError") return PyExc_MemoryError;
  if (kind == "BufferError") return PyExc_BufferError;
  if (kind == "NotImplementedError") return PyExc_NotImplementedError;
  return PyExc_RuntimeError;
}

PyObject* matmul(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "dlpx_cpp_kernel.matmul(a, b) takes exactly two tensors");
    return nullptr;
  }
  try {
    return matmul_impl(args[0], args[1]);
  } catch (const dlpx::Error& e) {
    if (e.kind() != "python") PyErr_SetString(exception_for(e.kind()), e.what());  // else already set
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

PyMethodDef methods[] = {
    {"matmul", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(matmul)), METH_FASTCALL,
     "matmul(a, b): float32 (m x k) @ (k x n) on the CPU, returned in a's framework."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "dlpx_cpp_kernel", "A C++ kernel over dlpx.hpp.", -1, methods,
                      nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit_dlpx_cpp_kernel(void) { return PyModule_Create(&module); }

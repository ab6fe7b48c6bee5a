// dlpx_cuda_overhead: examples/cuda_kernel's launch_empty written by hand as a CPython
// extension (the way a kernel author took tensors before kernel libraries), and the floor
// beneath both: the same launch with no tensors. benches/cuda_kernel_bench.py times them
// beside the kernel library's launch_empty, so that what the library adds is its own cost.
//
//   launch_empty(*tensors)  what the library's launch_empty does: a view of each float32 CUDA
//                           tensor on the first one's device (dlpx_view_of), that device made
//                           current, the first one's framework's current stream
//                           (dlpx_current_stream_of), one launch;
//   launch_floor(stream)    the launch alone, on the stream given as an int (no tensors).
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cuda_runtime.h>
#include <dlpx/dlpx.h>

#include <cstdint>

namespace {

constexpr Py_ssize_t kMaxArgs = 16;

struct Pointers {
  const void* p[kMaxArgs];
};

__global__ void empty_kernel(Pointers) {}

PyObject* launch_failed(cudaError_t rc) {
  PyErr_Format(PyExc_RuntimeError, "kernel launch failed: %s", cudaGetErrorName(rc));
  return nullptr;
}

PyObject* launch_empty(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1 || nargs > kMaxArgs) {
    PyErr_SetString(PyExc_TypeError, "launch_empty(*tensors) takes 1 to 16 tensors");
    return nullptr;
  }
  DlpxTensorView views[kMaxArgs];
  Pointers pointers{};
  Py_ssize_t held = 0;
  PyObject* result = nullptr;
  void* stream = nullptr;
  for (; held < nargs; ++held) {
    if (dlpx_view_of(args[held], &views[held]) != 0) goto done;
    const DLTensor& t = views[held].tensor;
    if (t.device.device_type != kDLCUDA || t.dtype.code != kDLFloat || t.dtype.bits != 32 ||
        t.device.device_id != views[0].tensor.device.device_id) {
      PyErr_Format(PyExc_TypeError, "launch_empty: tensors[%zd] is not a float32 tensor on the first one's GPU", held);
      ++held;
      goto done;
    }
    pointers.p[held] = static_cast<const char*>(t.data) + t.byte_offset;
  }
  {
    // The device guard the library's kernels keep: a stream belongs to one device.
    const int device = views[0].tensor.device.device_id;
    int previous = 0;
    if (cudaError_t rc = cudaGetDevice(&previous); rc != cudaSuccess) {
      launch_failed(rc);
      goto done;
    }
    if (previous != device) cudaSetDevice(device);
    if (dlpx_current_stream_of(args[0], kDLCUDA, device, &stream) == 0) {
      empty_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(pointers);
      if (cudaError_t rc = cudaGetLastError(); rc != cudaSuccess) {
        launch_failed(rc);
      } else {
        result = Py_NewRef(Py_None);
      }
    }
    if (previous != device) cudaSetDevice(previous);
  }
done:
  for (Py_ssize_t i = 0; i < held; ++i) dlpx_view_release(&views[i]);
  return result;
}

PyObject* launch_floor(PyObject*, PyObject* stream) {
  void* s = PyLong_AsVoidPtr(stream);
  if (s == nullptr && PyErr_Occurred()) return nullptr;
  empty_kernel<<<1, 1, 0, static_cast<cudaStream_t>(s)>>>(Pointers{});
  if (cudaError_t rc = cudaGetLastError(); rc != cudaSuccess) return launch_failed(rc);
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"launch_empty", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(&launch_empty)), METH_FASTCALL,
     "launch_empty(*tensors): an empty kernel taking 1 to 16 float32 CUDA tensors, on the first one's stream."},
    {"launch_floor", launch_floor, METH_O, "launch_floor(stream): the same empty kernel with no tensors, on `stream`."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "dlpx_cuda_overhead", "launch_empty by hand, and its floor.", -1,
                      methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit_dlpx_cuda_overhead(void) { return PyModule_Create(&module); }

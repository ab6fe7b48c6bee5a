// dlpx_cuda_kernel: CUDA kernels over any framework's CUDA tensors (torch, cupy, jax, dlpx),
// written against dlpx's C++ layer and kernel API:
//   - arguments arrive through dlpx_view_of (torch: its own non-owning view, no allocation;
//     cupy, jax: __dlpack__(stream=...), which orders dlpx's stream after the producer's work)
//     and are checked (dtype, device, shape, layout) before anything is allocated;
//   - outputs are dlpx::ManagedTensor from the first input's framework's allocator (torch in ->
//     torch's caching allocator on its current stream; no table -> dlpx's CUDA pool);
//   - kernels launch on dlpx_current_stream_of(first input): torch's current stream for torch
//     inputs (so `with torch.cuda.stream(s)` and CUDA graph capture just work), dlpx's
//     per-thread stream otherwise. Nothing here synchronises the device or the stream;
//   - the result goes back as the first input's framework's tensor (dlpx.Tensor when it has no
//     table), and C++ exceptions stop at the Python boundary as Python exceptions.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cuda_runtime.h>
// Only the CUDA runtime's own header: <cuda/mdspan> or CUB would work too but cost seconds of
// compile time each, and the CI compiles this file on every run.
#include <dlpx/dlpx.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace {

constexpr int kThreads = 256;
// Grid-stride loops keep any size within the grid limits; this many blocks fill any GPU.
constexpr int64_t kMaxBlocks = 1 << 16;
// launch_empty's kernel takes its pointers by value in one parameter block.
constexpr Py_ssize_t kMaxEmptyArgs = 16;

// ---- kernels ---------------------------------------------------------------------------------

__global__ void axpby_kernel(float a, const float* __restrict__ x, float b, const float* __restrict__ y,
                             float* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = a * x[i] + b * y[i];
  }
}

__device__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

// One block per row (grid-stride over rows), any positive strides (as_mdspan checked them):
// each thread sums a strided part of the row, then warps and the block combine the parts.
__global__ void row_sum_kernel(const float* __restrict__ x, int64_t rows, int64_t cols, int64_t row_stride,
                               int64_t col_stride, float* __restrict__ out) {
  __shared__ float warp_sums[kThreads / 32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    float sum = 0.0f;
    for (int64_t col = threadIdx.x; col < cols; col += kThreads) sum += x[row * row_stride + col * col_stride];
    sum = warp_sum(sum);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
    __syncthreads();
    if (threadIdx.x < 32) {
      sum = warp_sum(threadIdx.x < kThreads / 32 ? warp_sums[threadIdx.x] : 0.0f);
      if (threadIdx.x == 0) out[row] = sum;
    }
    __syncthreads();  // warp_sums is reused by the next row
  }
}

struct Pointers {
  const void* p[kMaxEmptyArgs];
};

// Does nothing: launch_empty measures what reaching a kernel costs on the host.
__global__ void empty_kernel(Pointers) {}

// ---- arguments -------------------------------------------------------------------------------

// A DlpxTensorView released when the scope ends, also on exceptions.
class Argument {
 public:
  explicit Argument(PyObject* object) : object_(object) {
    if (dlpx_view_of(object, &view_) != 0) throw dlpx::Error("python", "");
  }
  ~Argument() { dlpx_view_release(&view_); }
  Argument(const Argument&) = delete;
  Argument& operator=(const Argument&) = delete;
  PyObject* object() const { return object_; }
  const DLTensor& tensor() const { return view_.tensor; }
  dlpx::TensorView view() const { return dlpx::TensorView(view_.tensor); }

 private:
  PyObject* object_;
  DlpxTensorView view_{};
};

[[noreturn]] void fail(const char* kind, const std::string& message) {
  throw dlpx::Error(kind, "dlpx_cuda_kernel." + message);
}

std::string shape_text(const dlpx::TensorView& v) {
  std::string s = "(";
  for (int32_t i = 0; i < v.ndim(); ++i) s += (i ? ", " : "") + std::to_string(v.size(i));
  return s + (v.ndim() == 1 ? ",)" : ")");
}

// A CUDA tensor of float32 on `device` (the first argument's, when given). The device check
// comes first: a CPU tensor is the most likely mistake, and its message names the device.
void check_float32_cuda(const char* fn, const char* name, const Argument& arg, const DLDevice* device = nullptr) {
  const dlpx::TensorView v = arg.view();
  if (v.device().device_type != kDLCUDA) {
    fail("ValueError", std::string(fn) + ": " + name + " is on " + v.device_name() + "; expected a cuda tensor");
  }
  if (device != nullptr && v.device().device_id != device->device_id) {
    fail("ValueError", std::string(fn) + ": " + name + " is on " + v.device_name() + ", the first tensor on " +
                           dlpx::device_name(*device) + "; all tensors must be on one device");
  }
  if (!dlpx::same_dtype(v.dtype(), dlpx::dtype_of<float>())) {
    fail("TypeError", std::string(fn) + ": " + name + " has dtype " + v.dtype_name() + "; expected float32");
  }
}

void check_contiguous(const char* fn, const char* name, const Argument& arg) {
  const dlpx::TensorView v = arg.view();
  if (v.is_contiguous()) return;
  std::string strides = "(";
  for (int32_t i = 0; i < v.ndim(); ++i) strides += (i ? ", " : "") + std::to_string(v.stride(i));
  fail("ValueError", std::string(fn) + ": " + name + " is not contiguous (shape " + shape_text(v) + ", strides " +
                         strides + (v.ndim() == 1 ? ",)" : ")") + "); pass a contiguous tensor");
}

// Any layout a layout_stride mdspan can express (transposed, sliced); broadcast (stride 0) or
// overlapping dimensions are refused with as_mdspan's reason. Kernels take the view's parts.
dlpx::mdspan_t<const float, 2> strided_view(const char* fn, const char* name, const Argument& arg) {
  try {
    return dlpx::as_mdspan<const float, 2>(arg.tensor(), kDLCUDA);
  } catch (const dlpx::Error& e) {
    fail(e.kind().c_str(), std::string(fn) + ": " + name + " cannot be read as a strided view (" + e.what() + ")");
  }
}

float scalar(const char* fn, const char* name, PyObject* object) {
  const double value = PyFloat_AsDouble(object);
  if (value == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    fail("TypeError", std::string(fn) + ": " + name + " must be a real number, not " + Py_TYPE(object)->tp_name);
  }
  return static_cast<float>(value);
}

// ---- launching -------------------------------------------------------------------------------

// Makes the tensors' device current for the launch and restores the caller's after: a stream
// belongs to one device, and launching on another device's stream is an error.
class DeviceGuard {
 public:
  explicit DeviceGuard(const DLDevice& device) {
    check("cudaGetDevice", cudaGetDevice(&previous_));
    if (previous_ != device.device_id) check("cudaSetDevice", cudaSetDevice(device.device_id));
    target_ = device.device_id;
  }
  ~DeviceGuard() {
    if (target_ != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  static void check(const char* what, cudaError_t rc) {
    if (rc != cudaSuccess) {
      throw dlpx::Error("RuntimeError", std::string("dlpx_cuda_kernel: ") + what + " failed: " +
                                            cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ")");
    }
  }

 private:
  int previous_ = 0;
  int target_ = 0;
};

// The stream the caller's framework works on now: torch's current stream (captured into a graph
// while torch captures), dlpx's per-thread stream for frameworks without a table.
cudaStream_t stream_of(const Argument& first) {
  void* stream = nullptr;
  const DLDevice device = first.tensor().device;
  if (dlpx_current_stream_of(first.object(), device.device_type, device.device_id, &stream) != 0) {
    throw dlpx::Error("python", "");
  }
  return static_cast<cudaStream_t>(stream);
}

// A launch error (bad configuration, no driver, a stream from another device) surfaces here,
// without waiting for the kernel: cudaGetLastError does not synchronise.
void check_launch(const char* fn) {
  const cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess) {
    throw dlpx::Error("RuntimeError", std::string("dlpx_cuda_kernel.") + fn + ": kernel launch failed: " +
                                          cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ")");
  }
}

int blocks_for(int64_t work) { return static_cast<int>(std::min<int64_t>((work + kThreads - 1) / kThreads, kMaxBlocks)); }

// Hands `out` to the caller's framework; on failure it stays ours and is freed.
PyObject* to_python(const Argument& like, dlpx::ManagedTensor& out) {
  void* result = nullptr;
  if (dlpx_to_py_like(like.object(), out.get(), &result) != 0) throw dlpx::Error("python", "");
  out.release();  // the Python object owns it now
  return static_cast<PyObject*>(result);
}

// ---- entry points ----------------------------------------------------------------------------

PyObject* axpby_impl(PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3 && nargs != 4) fail("TypeError", "axpby(a, x, y, b=1.0) takes 3 or 4 arguments");
  const float a = scalar("axpby", "a", args[0]);
  const float b = nargs == 4 ? scalar("axpby", "b", args[3]) : 1.0f;
  Argument x(args[1]);
  Argument y(args[2]);
  check_float32_cuda("axpby", "x", x);
  check_float32_cuda("axpby", "y", y, &x.tensor().device);
  const dlpx::TensorView xv = x.view(), yv = y.view();
  if (xv.ndim() != yv.ndim() || !std::equal(xv.shape().begin(), xv.shape().end(), yv.shape().begin())) {
    fail("ValueError", "axpby: shapes differ: x " + shape_text(xv) + " and y " + shape_text(yv));
  }
  check_contiguous("axpby", "x", x);
  check_contiguous("axpby", "y", y);
  const DLDevice device = x.tensor().device;
  const DLPackExchangeAPI* api = dlpx_exchange_api_of(x.object());
  if (api == nullptr) throw dlpx::Error("python", "");
  DeviceGuard guard(device);
  const cudaStream_t stream = stream_of(x);
  auto out = dlpx::ManagedTensor::allocate(api, xv.shape().data(), xv.ndim(), dlpx::dtype_of<float>(), device);
  const int64_t n = xv.numel();
  if (n > 0) {
    axpby_kernel<<<blocks_for(n), kThreads, 0, stream>>>(a, xv.data<float>(), b, yv.data<float>(),
                                                        out.view().data<float>(), n);
    check_launch("axpby");
  }
  return to_python(x, out);
}

PyObject* row_sum_impl(PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 1) fail("TypeError", "row_sum(x) takes exactly one tensor");
  Argument x(args[0]);
  check_float32_cuda("row_sum", "x", x);
  if (x.tensor().ndim != 2) {
    fail("ValueError", "row_sum: x has " + std::to_string(x.tensor().ndim) + " dimensions; expected 2 (rows, columns)");
  }
  const auto xs = strided_view("row_sum", "x", x);
  const DLDevice device = x.tensor().device;
  const DLPackExchangeAPI* api = dlpx_exchange_api_of(x.object());
  if (api == nullptr) throw dlpx::Error("python", "");
  DeviceGuard guard(device);
  const cudaStream_t stream = stream_of(x);
  auto out = dlpx::ManagedTensor::allocate(api, {xs.extent(0)}, dlpx::dtype_of<float>(), device);
  if (xs.extent(0) > 0) {
    row_sum_kernel<<<static_cast<int>(std::min<int64_t>(xs.extent(0), kMaxBlocks)), kThreads, 0, stream>>>(
        xs.data_handle(), xs.extent(0), xs.extent(1), xs.stride(0), xs.stride(1), out.view().data<float>());
    check_launch("row_sum");
  }
  return to_python(x, out);
}

PyObject* launch_empty_impl(PyObject* const* args, Py_ssize_t nargs) {
  static const char* const names[kMaxEmptyArgs] = {
      "tensors[0]", "tensors[1]", "tensors[2]",  "tensors[3]",  "tensors[4]",  "tensors[5]",  "tensors[6]",  "tensors[7]",
      "tensors[8]", "tensors[9]", "tensors[10]", "tensors[11]", "tensors[12]", "tensors[13]", "tensors[14]", "tensors[15]"};
  if (nargs < 1 || nargs > kMaxEmptyArgs) {
    fail("TypeError", "launch_empty(*tensors) takes 1 to " + std::to_string(kMaxEmptyArgs) + " tensors");
  }
  // The views are held until the launch is enqueued (the pointers must stay valid that long),
  // in place: this path is what the benchmark measures, so it allocates nothing.
  std::array<std::optional<Argument>, kMaxEmptyArgs> held;
  Pointers pointers{};
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    held[i].emplace(args[i]);
    check_float32_cuda("launch_empty", names[i], *held[i], i ? &held[0]->tensor().device : nullptr);
    pointers.p[i] = held[i]->view().data_ptr();
  }
  DeviceGuard guard(held[0]->tensor().device);
  empty_kernel<<<1, 1, 0, stream_of(*held[0])>>>(pointers);
  check_launch("launch_empty");
  Py_RETURN_NONE;
}

// Runs an entry point with C++ exceptions turned into Python ones: dlpx_set_error_python raises
// the exception an error's kind names (kind "python": dlpx or the producer has set one already).
template <PyObject* (*Impl)(PyObject* const*, Py_ssize_t)>
PyObject* entry(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  try {
    return Impl(args, nargs);
  } catch (const dlpx::Error& e) {
    if (e.kind() != "python") dlpx_set_error_python(nullptr, e.kind().c_str(), e.what());
  } catch (const std::exception& e) {
    dlpx_set_error_python(nullptr, "RuntimeError", e.what());
  }
  return nullptr;
}

template <PyObject* (*Impl)(PyObject* const*, Py_ssize_t)>
PyCFunction fastcall() {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(&entry<Impl>));
}

PyMethodDef methods[] = {
    {"axpby", fastcall<axpby_impl>(), METH_FASTCALL,
     "axpby(a, x, y, b=1.0): a * x + b * y for contiguous float32 CUDA tensors of one shape, on the caller's "
     "stream, returned in x's framework."},
    {"row_sum", fastcall<row_sum_impl>(), METH_FASTCALL,
     "row_sum(x): the sum of each row of a 2-D float32 CUDA tensor (any strides), on the caller's stream, "
     "returned in x's framework."},
    {"launch_empty", fastcall<launch_empty_impl>(), METH_FASTCALL,
     "launch_empty(*tensors): launches an empty kernel taking 1 to 16 float32 CUDA tensors on the first one's "
     "stream (what this path costs on the host)."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "dlpx_cuda_kernel", "CUDA kernels over dlpx.hpp.", -1, methods,
                      nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit_dlpx_cuda_kernel(void) { return PyModule_Create(&module); }

// libdlpx_cuda_kernel.so: CUDA kernels over any framework's CUDA tensors (torch, cupy, jax,
// dlpx), as a kernel library of typed C++ kernels (include/dlpx/kernel.hpp): a plain shared
// library with no Python in it, one build for every CPython, loaded with
// dlpx.load_library(path). dlpx does what touches Python around each call:
//   - arguments arrive as DLTensor views (torch: its own non-owning view, no allocation; cupy,
//     jax: __dlpack__(stream=...), which orders the read after the producer's work), checked
//     here (dtype, device, shape, layout) before anything is allocated;
//   - outputs come from the first tensor's framework's allocator (call.allocate: torch in ->
//     torch's caching allocator, its graph pool while torch captures a CUDA graph);
//   - kernels launch on call.stream: torch's current stream for torch inputs (so
//     `with torch.cuda.stream(s)` and graph capture just work), dlpx's per-thread stream
//     otherwise. Nothing here synchronises the device or the stream;
//   - results come back as the first tensor's type, errors as the Python exception they name.
// The way with the CPython API (a Python extension per Python version) is
// examples/add_extension; benches/cuda_kernel_overhead is launch_empty written that way.
#include <cuda_runtime.h>
// Only the CUDA runtime's own header: <cuda/mdspan> or CUB would work too but cost seconds of
// compile time each, and the CI compiles this file on every run.
#include <dlpx/kernel.hpp>

#include <algorithm>
#include <cstdint>
#include <string>

namespace {

constexpr int kThreads = 256;
// Grid-stride loops keep any size within the grid limits; this many blocks fill any GPU.
constexpr int64_t kMaxBlocks = 1 << 16;
// launch_empty's kernel takes its pointers by value in one parameter block.
constexpr int32_t kMaxEmptyArgs = 16;

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

// A failure the kernel reports: the call raises `kind` with "dlpx: <kernel>: <message>".
[[noreturn]] void fail(const char* kind, const std::string& message) { throw dlpx::Error(kind, message); }

std::string shape_text(const dlpx::TensorView& v) {
  std::string s = "(";
  for (int32_t i = 0; i < v.ndim(); ++i) s += (i ? ", " : "") + std::to_string(v.size(i));
  return s + (v.ndim() == 1 ? ",)" : ")");
}

// An argument's name in messages: `name`, or `name[index]` for one of `*name`'s values. Made
// into a string only when a check fails (launch_empty's calls are what the benchmark times).
struct Name {
  const char* name;
  int32_t index = -1;
  std::string text() const { return index < 0 ? name : std::string(name) + "[" + std::to_string(index) + "]"; }
};

// A CUDA tensor of float32 on `device` (the first argument's, when given). The device check
// comes first: a CPU tensor is the most likely mistake, and its message names the device.
void check_float32_cuda(Name name, const dlpx::TensorView& v, const DLDevice* device = nullptr) {
  if (v.device().device_type != kDLCUDA) {
    fail("ValueError", name.text() + " is on " + v.device_name() + "; expected a cuda tensor");
  }
  if (device != nullptr && v.device().device_id != device->device_id) {
    fail("ValueError", name.text() + " is on " + v.device_name() + ", the first tensor on " +
                           dlpx::device_name(*device) + "; all tensors must be on one device");
  }
  if (!dlpx::same_dtype(v.dtype(), dlpx::dtype_of<float>())) {
    fail("TypeError", name.text() + " has dtype " + v.dtype_name() + "; expected float32");
  }
}

void check_contiguous(const char* name, const dlpx::TensorView& v) {
  if (v.is_contiguous()) return;
  std::string strides = "(";
  for (int32_t i = 0; i < v.ndim(); ++i) strides += (i ? ", " : "") + std::to_string(v.stride(i));
  fail("ValueError", std::string(name) + " is not contiguous (shape " + shape_text(v) + ", strides " + strides +
                         (v.ndim() == 1 ? ",)" : ")") + "); pass a contiguous tensor");
}

// Any layout a layout_stride mdspan can express (transposed, sliced); broadcast (stride 0) or
// overlapping dimensions are refused with as_mdspan's reason. Kernels take the view's parts.
dlpx::mdspan_t<const float, 2> strided_view(const char* name, const dlpx::TensorArg& v) {
  try {
    return v.as_mdspan<const float, 2>(kDLCUDA);
  } catch (const dlpx::Error& e) {
    fail(e.kind().c_str(), std::string(name) + " cannot be read as a strided view (" + e.what() + ")");
  }
}

// ---- launching -------------------------------------------------------------------------------

void check_cuda(const char* what, cudaError_t rc) {
  if (rc != cudaSuccess) {
    fail("RuntimeError", std::string(what) + " failed: " + cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ")");
  }
}

// Makes the tensors' device current for the launch and restores the caller's after: a stream
// belongs to one device, and launching on another device's stream is an error.
class DeviceGuard {
 public:
  explicit DeviceGuard(const DLDevice& device) {
    check_cuda("cudaGetDevice", cudaGetDevice(&previous_));
    if (previous_ != device.device_id) check_cuda("cudaSetDevice", cudaSetDevice(device.device_id));
    target_ = device.device_id;
  }
  ~DeviceGuard() {
    if (target_ != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  int target_ = 0;
};

// The caller's current stream on `device`: torch's (captured into a graph while torch
// captures) for torch inputs, dlpx's per-thread stream otherwise.
cudaStream_t stream_of(dlpx::Call& call, const DLDevice& device) { return static_cast<cudaStream_t>(call.stream(device)); }

// A launch error (bad configuration, no driver, a stream from another device) surfaces here,
// without waiting for the kernel: cudaGetLastError does not synchronise.
void check_launch() {
  const cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess) {
    fail("RuntimeError", std::string("kernel launch failed: ") + cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ")");
  }
}

int blocks_for(int64_t work) { return static_cast<int>(std::min<int64_t>((work + kThreads - 1) / kThreads, kMaxBlocks)); }

// ---- kernels as the library exports them -------------------------------------------------------

dlpx::OutputTensor axpby(dlpx::Call& call, double a, dlpx::TensorView x, dlpx::TensorView y, double b) {
  check_float32_cuda({"x"}, x);
  check_float32_cuda({"y"}, y, &x.dltensor().device);
  if (x.ndim() != y.ndim() || !std::equal(x.shape().begin(), x.shape().end(), y.shape().begin())) {
    fail("ValueError", "shapes differ: x " + shape_text(x) + " and y " + shape_text(y));
  }
  check_contiguous("x", x);
  check_contiguous("y", y);
  const DLDevice device = x.device();
  DeviceGuard guard(device);
  const cudaStream_t stream = stream_of(call, device);
  dlpx::OutputTensor out = call.empty_like(x);  // the call deletes it if a check below throws
  const int64_t n = x.numel();
  if (n > 0) {
    axpby_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<float>(a), x.data<const float>(),
                                                        static_cast<float>(b), y.data<const float>(),
                                                        out.data<float>(), n);
    check_launch();
  }
  return out;
}

dlpx::OutputTensor row_sum(dlpx::Call& call, dlpx::TensorArg x) {
  check_float32_cuda({"x"}, x);
  if (x.ndim() != 2) {
    fail("ValueError", "x has " + std::to_string(x.ndim()) + " dimensions; expected 2 (rows, columns)");
  }
  const auto xs = strided_view("x", x);
  const DLDevice device = x.device();
  DeviceGuard guard(device);
  const cudaStream_t stream = stream_of(call, device);
  const int64_t rows = xs.extent(0);
  dlpx::OutputTensor out = call.allocate({rows}, dlpx::dtype_of<float>(), device);
  if (rows > 0) {
    row_sum_kernel<<<static_cast<int>(std::min<int64_t>(rows, kMaxBlocks)), kThreads, 0, stream>>>(
        xs.data_handle(), rows, xs.extent(1), xs.stride(0), xs.stride(1), out.data<float>());
    check_launch();
  }
  return out;
}

void launch_empty(dlpx::Call& call, dlpx::TensorList tensors) {
  const int32_t n = static_cast<int32_t>(tensors.size());
  if (n < 1 || n > kMaxEmptyArgs) fail("TypeError", "takes 1 to " + std::to_string(kMaxEmptyArgs) + " tensors");
  // The views stay valid until the kernel returns, after the launch is enqueued. This path is
  // what the benchmark measures: it allocates nothing.
  Pointers pointers{};
  DLDevice device{};
  for (int32_t i = 0; i < n; ++i) {
    const dlpx::TensorArg t = tensors[i];
    if (i == 0) device = t.device();
    check_float32_cuda({"tensors", i}, t, i ? &device : nullptr);
    pointers.p[i] = t.data_ptr();
  }
  DeviceGuard guard(device);
  empty_kernel<<<1, 1, 0, stream_of(call, device)>>>(pointers);
  check_launch();
}

// launch_empty on the C ABI alone (kernel.h: its arguments read in place, dlpx_call_stream,
// dlpx_call_error), with the same checks and messages: beside launch_empty, the benchmark shows
// what the C++ layer's wrapper costs a call (benches/cuda_kernel_bench.py).
int refuse_tensor(DlpxCall* call, int32_t i, const DLTensor& t, const DLDevice& first) {
  try {
    check_float32_cuda({"tensors", i}, dlpx::TensorView(t), i ? &first : nullptr);
  } catch (const dlpx::Error& e) {
    return dlpx_call_error(call, e.kind().c_str(), e.what());
  }
  return dlpx_call_error(call, "TypeError", "a tensor that is not float32 on the first one's GPU");
}

int launch_empty_c(DlpxCall* call) {
  const int32_t n = call->argument_count;
  if (n < 1 || n > kMaxEmptyArgs) return dlpx_call_error(call, "TypeError", "takes 1 to 16 tensors");
  Pointers pointers{};
  // `*tensors`: every argument is a tensor (the loader converted each before the call).
  const DLDevice device = call->arguments[0].value.tensor.tensor.device;
  for (int32_t i = 0; i < n; ++i) {
    const DLTensor& t = call->arguments[i].value.tensor.tensor;
    if (t.device.device_type != kDLCUDA || t.device.device_id != device.device_id || t.dtype.code != kDLFloat ||
        t.dtype.bits != 32 || t.dtype.lanes != 1) {
      return refuse_tensor(call, i, t, device);
    }
    pointers.p[i] = static_cast<const char*>(t.data) + t.byte_offset;
  }
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess ||
      (previous != device.device_id && cudaSetDevice(device.device_id) != cudaSuccess)) {
    return dlpx_call_error(call, "RuntimeError", "cannot make the tensors' device current");
  }
  void* stream = nullptr;
  int rc = dlpx_call_stream(call, device, &stream);
  if (rc == 0) {
    empty_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(pointers);
    if (cudaGetLastError() != cudaSuccess) rc = dlpx_call_error(call, "RuntimeError", "kernel launch failed");
  }
  if (previous != device.device_id) cudaSetDevice(previous);
  return rc;
}

}  // namespace

// Long kernels release the GIL while they run (the launch and the allocator's call); the empty
// launch keeps it: it returns sooner than releasing and taking back the GIL would.
DLPX_EXPORT_TYPED_KERNEL(axpby, axpby,
                   "axpby(a: float, x, y, b: float = 1.0) -> tensor: a * x + b * y for contiguous float32 CUDA "
                   "tensors of one shape, on the caller's stream, in x's framework.")
DLPX_EXPORT_TYPED_KERNEL(row_sum, row_sum,
                   "row_sum(x) -> tensor: the sum of each row of a 2-D float32 CUDA tensor (any strides), on the "
                   "caller's stream, in x's framework.")
DLPX_EXPORT_TYPED_KERNEL_SHORT(launch_empty, launch_empty,
                         "launch_empty(*tensors) -> None: launches an empty kernel taking 1 to 16 float32 CUDA "
                         "tensors on the first one's stream (what this path costs on the host).")
DLPX_EXPORT_KERNEL_SHORT(launch_empty_c, launch_empty_c,
                         "launch_empty_c(*tensors) -> None: launch_empty written on the C ABI alone (kernel.h), "
                         "for the benchmark.")

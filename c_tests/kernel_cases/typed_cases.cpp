// Typed C++ kernels (include/dlpx/kernel.hpp) that dlpx's tests call from Python
// (tests/python/kernels/test_kernel_cpp.py) and from C++ (c_tests/cpp/test_typed_kernels.cpp): each
// pins one conversion of a parameter or a result, or one exception's mapping.
#include <cstdint>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "dlpx/kernel.hpp"

// A TensorView: (ndim, numel, contiguous).
static std::tuple<int64_t, int64_t, bool> view_info(dlpx::TensorView x) {
  return {x.ndim(), x.numel(), x.is_contiguous()};
}
DLPX_EXPORT_TYPED_KERNEL_SHORT(view_info, view_info, "view_info(x) -> tuple: ndim, numel, contiguous.")

// A TensorArg: whether the tensor is read-only.
static bool read_only(const dlpx::TensorArg& x) { return x.read_only(); }
DLPX_EXPORT_TYPED_KERNEL_SHORT(read_only, read_only, "read_only(x: tensor) -> bool: x's read-only flag.")

// A TensorArg's data: its first byte, or (write) set to 'X' through a writable pointer, which a
// read-only tensor refuses.
static int64_t first_byte(const dlpx::TensorArg& x, bool write) {
  if (write) return *x.data<uint8_t>() = 'X';
  return *x.data<const uint8_t>();
}
DLPX_EXPORT_TYPED_KERNEL_SHORT(first_byte, first_byte, "first_byte(x: tensor, write: bool) -> int: x's first byte.")

// The same through a TensorView parameter, which has the tensor's flags too.
static int64_t view_first_byte(dlpx::TensorView x, bool write) {
  if (write) return *x.data<uint8_t>() = 'Y';
  return x.read_only() ? -*x.data<const uint8_t>() : *x.data<const uint8_t>();
}
DLPX_EXPORT_TYPED_KERNEL_SHORT(view_first_byte, view_first_byte,
                               "view_first_byte(x: tensor, write: bool) -> int: x's first byte (negated: read-only).")

// A checked, strided, read-only mdspan: the sum.
static double sum1(dlpx::mdspan_t<const double, 1> x) {
  double s = 0;
  for (int64_t i = 0; i < x.extent(0); ++i) s += x(i);
  return s;
}
DLPX_EXPORT_TYPED_KERNEL(sum1, sum1, "sum1(x) -> float: the sum of a 1-d float64 tensor, any stride.")

// A writable mdspan: fills x in place (refused for a read-only x).
static void fill2(dlpx::mdspan_t<float, 2> x, double value) {
  for (int64_t i = 0; i < x.extent(0); ++i)
    for (int64_t j = 0; j < x.extent(1); ++j) x(i, j) = static_cast<float>(value);
}
DLPX_EXPORT_TYPED_KERNEL(fill2, fill2, "fill2(x, value: float) -> None: fills a 2-d float32 tensor in place.")

// Scalars in, a tuple of scalars out.
static std::tuple<int64_t, double, bool, int64_t> scalars(int64_t n, double x, bool flag, std::string_view text) {
  return {n + 1, 2 * x, !flag, static_cast<int64_t>(text.size())};
}
DLPX_EXPORT_TYPED_KERNEL_SHORT(scalars, scalars,
                               "scalars(n: int, x=1.0, *, flag=True, text=\"abc\") -> tuple: n + 1, 2 x, not flag, len(text).")

// A narrower integer: a value it cannot hold is an OverflowError naming the parameter.
static int32_t narrow(int8_t small, uint16_t unsigned_small) { return small + unsigned_small; }
DLPX_EXPORT_TYPED_KERNEL_SHORT(narrow, narrow, "narrow(small: int, unsigned_small: int) -> int: their sum.")

// std::string and float.
static std::string echo_impl(const std::string& text, float times) {
  std::string out;
  for (int i = 0; i < static_cast<int>(times); ++i) out += text;
  return out;
}
static int64_t echo(std::string text, float times) { return static_cast<int64_t>(echo_impl(text, times).size()); }
DLPX_EXPORT_TYPED_KERNEL_SHORT(echo, echo, "echo(text: str, times: float) -> int: len(text * int(times)).")

// Parameters taken by rvalue reference (the converted value is moved in) and by lvalue reference.
static std::string steal_impl(std::string&& text, std::string& suffix) {
  std::string taken = std::move(text);
  return taken + suffix;
}
static int64_t steal(std::string&& text, std::string& suffix, int64_t&& times) {
  return static_cast<int64_t>(steal_impl(std::move(text), suffix).size()) * times;
}
DLPX_EXPORT_TYPED_KERNEL_SHORT(steal, steal, "steal(text: str, suffix: str, times: int = 2) -> int: len(text + suffix) * times.")

// A float parameter, given back as a double: what it was rounded to.
static double widen(float v) { return v; }
DLPX_EXPORT_TYPED_KERNEL_SHORT(widen, widen, "widen(v: float = 3.4028235e38) -> float: v rounded to a 32-bit float.")

// Optionals: (x given, eps or -1, len(name) or -1).
static std::tuple<bool, double, int64_t> maybe(std::optional<dlpx::TensorView> x, std::optional<double> eps,
                                               std::optional<std::string_view> name) {
  return {x.has_value(), eps.value_or(-1.0), name ? static_cast<int64_t>(name->size()) : -1};
}
DLPX_EXPORT_TYPED_KERNEL_SHORT(maybe, maybe,
                               "maybe(x=None, *, eps: float | None = None, name: str | None = None) -> tuple: "
                               "whether x was given, eps or -1, len(name) or -1.")

// An output through the call, in the caller's framework.
static dlpx::OutputTensor scale(dlpx::Call& call, dlpx::mdspan_t<const double, 1> x, double alpha) {
  dlpx::OutputTensor out = call.allocate({x.extent(0)}, dlpx::dtype_of<double>());
  auto y = out.as_mdspan<double, 1>();
  for (int64_t i = 0; i < x.extent(0); ++i) y(i) = alpha * x(i);
  return out;
}
DLPX_EXPORT_TYPED_KERNEL(scale, scale, "scale(x, alpha=1.0) -> tensor: alpha * x (1-d float64).")

// The same without a dlpx::Call& parameter: dlpx::Call::current().
static dlpx::OutputTensor negate(dlpx::TensorView x) {
  dlpx::OutputTensor out = dlpx::Call::current().empty_like(x);
  auto in = dlpx::as_mdspan<const float, 1>(x.dltensor());
  auto y = out.as_mdspan<float, 1>();
  for (int64_t i = 0; i < in.extent(0); ++i) y(i) = -in(i);
  return out;
}
DLPX_EXPORT_TYPED_KERNEL(negate, negate, "negate(x) -> tensor: -x (1-d float32), through Call::current().")

// Several outputs and a scalar: a tuple.
static std::tuple<dlpx::OutputTensor, dlpx::OutputTensor, int64_t> pair(dlpx::Call& call, dlpx::TensorView x) {
  auto in = dlpx::as_mdspan<const float, 1>(x.dltensor());
  dlpx::OutputTensor plus = call.empty_like(x), twice = call.empty_like(x);
  auto p = plus.as_mdspan<float, 1>();
  auto t = twice.as_mdspan<float, 1>();
  for (int64_t i = 0; i < in.extent(0); ++i) {
    p(i) = in(i) + 1;
    t(i) = 2 * in(i);
  }
  return {std::move(plus), std::move(twice), in.extent(0)};
}
DLPX_EXPORT_TYPED_KERNEL(pair, pair, "pair(x) -> tuple: x + 1, 2 x (1-d float32) and len(x).")

// Nothing: None.
static void nothing() {}
DLPX_EXPORT_TYPED_KERNEL_SHORT(nothing, nothing, "nothing() -> None: does nothing.")

// *tensors: the total number of elements, times `scale`.
static int64_t count(dlpx::TensorList tensors, int64_t scale) {
  int64_t n = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) n += tensors[i].numel();
  return n * scale;
}
DLPX_EXPORT_TYPED_KERNEL_SHORT(count, count, "count(*tensors, scale: int = 1) -> int: elements of all, times scale.")

struct NotAnException {};

// throw_(what, message): throws the exception `what` names.
static void throw_(std::string_view what, std::string message) {
  if (what.substr(0, 5) == "dlpx:") throw dlpx::Error(std::string(what.substr(5)), message);
  if (what == "invalid_argument") throw std::invalid_argument(message);
  if (what == "out_of_range") throw std::out_of_range(message);
  if (what == "overflow_error") throw std::overflow_error(message);
  if (what == "bad_alloc") throw std::bad_alloc();
  if (what == "runtime_error") throw std::runtime_error(message);
  if (what == "logic_error") throw std::logic_error(message);
  if (what == "int") throw 42;
  throw NotAnException{};
}
DLPX_EXPORT_TYPED_KERNEL(throw_, throw_, "throw_(what: str, message: str) -> None: throws what `what` names.")

// The C macro's kernel in C++ (no typed layer) lets what it calls throw: std::vector::at out of
// range, dlpx::Call::current() outside a typed kernel. The export catches it: an IndexError, a
// RuntimeError, never std::terminate.
static int plain_throw(DlpxCall* call) {
  int64_t which = 0;
  if (dlpx_call_int(call, 0, &which)) return -1;
  if (which == 0) return static_cast<int>(std::vector<int>(2).at(5));
  if (which == 1) return dlpx::Call::current().argument_count();
  throw dlpx::Error("KeyError", "dlpx: its own kind");
}
DLPX_EXPORT_KERNEL(plain_throw, plain_throw, "plain_throw(which: int) -> None: a C-macro kernel that throws.")

// A typed kernel that calls plain_throw(1) of the library at `path` (this one) from C: inside it
// no typed call runs, so Call::current() refuses, rather than give this call (it did once).
static bool nested_current(std::string path) {
  const DlpxKernel* plain = nullptr;
  if (dlpx_kernel_find(path.c_str(), "plain_throw", &plain) != 0) throw std::runtime_error(dlpx_last_error());
  DlpxValue which = {};
  which.kind = DLPX_VALUE_INT;
  which.int64 = 1;
  std::size_t count = 0;
  if (dlpx_kernel_call(plain, &which, 1, nullptr, 0, &count) == 0) return false;
  return std::string_view(dlpx_last_error()).find("Call::current: no typed dlpx kernel runs on this thread") !=
         std::string_view::npos;
}
DLPX_EXPORT_TYPED_KERNEL(nested_current, nested_current,
                         "nested_current(path: str) -> bool: whether plain_throw(1), called from here, was refused.")

// Allocates an output like x, then throws: the call deletes the output.
static dlpx::OutputTensor allocate_then_throw(dlpx::Call& call, dlpx::TensorView x) {
  dlpx::OutputTensor out = call.empty_like(x);
  dlpx::OutputTensor second = call.empty_like(x);
  (void)second;
  throw std::runtime_error("failed after allocating");
  return out;
}
DLPX_EXPORT_TYPED_KERNEL(allocate_then_throw, allocate_then_throw,
                         "allocate_then_throw(x) -> tensor: allocates two outputs like x, then throws.")

// An output the allocator cannot give (128 TiB): MemoryError.
static dlpx::OutputTensor huge(dlpx::Call& call, dlpx::TensorView x) {
  return call.allocate({int64_t{1} << 45}, x.dtype(), x.device());
}
DLPX_EXPORT_TYPED_KERNEL(huge, huge, "huge(x) -> tensor: asks for 128 TiB.")

// Returns an empty OutputTensor: a ValueError.
static dlpx::OutputTensor empty_output() { return dlpx::OutputTensor(); }
DLPX_EXPORT_TYPED_KERNEL_SHORT(empty_output, empty_output, "empty_output() -> tensor: returns no tensor.")

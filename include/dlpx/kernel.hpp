/*
 * dlpx/kernel.hpp: typed C++ kernels over the kernel ABI (dlpx/kernel.h). A kernel is an
 * ordinary C++ function; one macro exports it, and the code it generates reads each argument
 * as the parameter's C++ type (checking dtype and rank where the type says them), calls the
 * function, returns its result to the caller and turns any exception it throws into the
 * Python exception its type names. Header-only C++17, no Python.h: the library links libdlpx
 * and nothing of Python, like a C kernel library.
 *
 *   #include <dlpx/kernel.hpp>
 *
 *   dlpx::OutputTensor scale(dlpx::Call& call, dlpx::mdspan_t<const double, 1> x, double alpha) {
 *     dlpx::OutputTensor out = call.allocate({x.extent(0)}, dlpx::dtype_of<double>());
 *     auto y = out.as_mdspan<double, 1>();          // in the caller's framework, compact
 *     for (int64_t i = 0; i < x.extent(0); ++i) y(i) = alpha * x(i);   // x: positive strides
 *     return out;                                   // torch in -> torch.Tensor out
 *   }
 *   DLPX_EXPORT_TYPED_KERNEL(scale, scale, "scale(x, alpha=1.0) -> tensor: alpha * x.")
 *
 * The function takes, optionally first, a `dlpx::Call&` (the call: outputs, the stream), then
 * one C++ parameter per signature parameter, in order:
 *
 *   signature type   C++ parameter type
 *   tensor           dlpx::TensorView or dlpx::TensorArg (with the tensor's flags: data<T>()
 *                    of a non-const T refuses a read-only tensor; read inputs as data<const T>()),
 *                    dlpx::mdspan_t<T, R> (checked: rank R, T's dtype, a
 *                    CPU tensor, positive strides (a reversed or broadcast view is refused:
 *                    read it through TensorView); a non-const T refuses a read-only tensor)
 *   int              int64_t (any integer type of 64 bits or fewer but bool and the character
 *                    types; a value it cannot hold is an OverflowError; an int argument is
 *                    int64, so uint64_t takes 0 to 2**63-1)
 *   float            double (or float: a finite value past its range is an OverflowError)
 *   bool             bool
 *   str              std::string_view (valid until the function returns), std::string
 *   T | None         std::optional<the type for T>
 *   *name            dlpx::TensorList (the tensors it took; `*name: int` and other annotated
 *                    ones have no C++ type: read them from call->arguments)
 *
 * and returns void (None), dlpx::OutputTensor (a tensor this call allocated), an integer, a
 * floating-point number, bool, or a std::tuple of two or more of them (a Python tuple; not
 * nested: one result comes back as itself).
 *
 * Checked when the library is compiled (static_assert): that the signature names the kernel,
 * lists as many parameters as the function takes, that each C++ type takes its parameter's
 * type, and that a return annotation dlpx spells (tensor, int, float, bool, None, tuple[...])
 * says what the function returns (the stub python -m dlpx.stubgen writes is typed from it). A parameter whose tensor does not fit (wrong dtype, rank or device) is an
 * error of the call naming the parameter: `TypeError: dlpx: scale: parameter 'x': as_mdspan:
 * expected float64, got float32`.
 *
 * Exceptions: whatever the function throws becomes the caller's exception, never
 * std::terminate. dlpx::Error(kind, message) raises `kind` (any Python exception name
 * dlpx_call_error takes); std::invalid_argument → ValueError, std::out_of_range → IndexError,
 * std::overflow_error → OverflowError, std::bad_alloc → MemoryError, any other std::exception
 * → RuntimeError, anything else → RuntimeError. The message is `dlpx: <kernel>: <what()>`.
 * Outputs allocated before the exception are deleted by the call: nothing leaks.
 */
#ifndef DLPX_KERNEL_HPP_
#define DLPX_KERNEL_HPP_

#include <dlpx/dlpx.hpp>
#include <dlpx/kernel.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace dlpx {

/**
 * What a dlpx::Call request throws when the C call refused it (an output the allocator could
 * not give, an argument index out of range): the call has recorded its own error, which is
 * the one the caller gets, whatever the kernel does next. Catching it does not undo that.
 */
class CallError : public Error {
 public:
  using Error::Error;
};

/**
 * A tensor argument with its DLPack flags, as a dlpx::TensorView parameter also has them
 * (`read_only()`: `bytes`, a read-only numpy array, a jax array), and `as_mdspan` honouring
 * them. Valid until the kernel returns.
 */
class TensorArg : public TensorView {
 public:
  /** Views `tensor` (which must outlive the view) with its DLPack `flags`. */
  TensorArg(const DLTensor& tensor, uint64_t flags) noexcept : TensorView(tensor, flags) {}

  /**
   * dlpx::as_mdspan<T, Rank> of the tensor on `device_type`, honouring its flags: a non-const
   * `T` of a read-only tensor throws dlpx::Error (ValueError); a padded fp4/fp6 is a byte each.
   */
  template <class T, std::size_t Rank>
  mdspan_t<T, Rank> as_mdspan(DLDeviceType device_type = kDLCPU) const {
    return detail::as_mdspan_impl<T, Rank>(dltensor(), device_type, flags());
  }
};

/**
 * An output of the running call: a tensor `dlpx::Call::allocate` got from the caller's
 * framework (torch in: torch's allocator; dlpx's otherwise), compact row-major. Move-only. It
 * owns nothing: the call owns the tensor until the kernel returns it (by returning this object,
 * alone or in a std::tuple) and deletes it if the kernel does not, so an exception thrown after
 * the allocation leaks nothing and nothing is deleted twice. Valid until the kernel returns.
 */
class OutputTensor {
 public:
  /** An empty output (returning one is a ValueError). */
  OutputTensor() noexcept = default;
  OutputTensor(const OutputTensor&) = delete;
  OutputTensor& operator=(const OutputTensor&) = delete;
  /** Moves the handle; `other` is left empty. */
  OutputTensor(OutputTensor&& other) noexcept : tensor_(std::exchange(other.tensor_, nullptr)) {}
  /** Takes `other`'s handle; the tensor this one had stays the call's (deleted unless returned). */
  OutputTensor& operator=(OutputTensor&& other) noexcept {
    tensor_ = std::exchange(other.tensor_, nullptr);
    return *this;
  }
  /** Does nothing: the call owns the tensor. */
  ~OutputTensor() = default;

  /** The DLTensor to write (NULL when empty). */
  DLTensor* get() const noexcept { return tensor_; }
  /** True when a tensor is held. */
  explicit operator bool() const noexcept { return tensor_ != nullptr; }
  /** The DLTensor to write; throws dlpx::Error (ValueError) when empty. */
  DLTensor& dltensor() const {
    if (tensor_ == nullptr) detail::throw_error("ValueError", "dlpx: OutputTensor: empty");
    return *tensor_;
  }
  /** A dlpx::TensorView of the output (shape, dtype, `data<T>()`, ...). */
  TensorView view() const { return TensorView(dltensor()); }
  /** The first element as `T*`, its dtype checked (dlpx::TensorView::data). */
  template <class T>
  T* data() const {
    return view().template data<T>();
  }
  /** dlpx::as_mdspan<T, Rank> of the output on its own device type. */
  template <class T, std::size_t Rank>
  mdspan_t<T, Rank> as_mdspan() const {
    const DLTensor& t = dltensor();
    return dlpx::as_mdspan<T, Rank>(t, static_cast<DLDeviceType>(t.device.device_type));
  }

  /**
   * Gives up the handle and returns the tensor, for `dlpx_call_return_tensor`; the call still
   * owns it until then.
   */
  DLTensor* release() noexcept { return std::exchange(tensor_, nullptr); }

 private:
  friend class Call;
  explicit OutputTensor(DLTensor* tensor) noexcept : tensor_(tensor) {}
  DLTensor* tensor_ = nullptr;
};

// detail::current_call, the call a typed kernel runs on this thread (Call::current), is declared
// in kernel.h: a kernel exported with its C macro, called from a typed one (dlpx_kernel_call),
// runs outside any typed call, and its guard says so.

/**
 * The running call, as a typed kernel sees it: outputs in the caller's framework and the
 * caller's stream. A typed kernel gets it as its first parameter (`dlpx::Call&`), or from
 * `dlpx::Call::current()`. Valid until the kernel returns, on the thread that runs it.
 */
class Call {
 public:
  /** Wraps the C call a kernel was handed. */
  explicit Call(DlpxCall* call) noexcept : call_(call) {}
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  /** The C call, for the `dlpx_call_*` functions. */
  DlpxCall* get() const noexcept { return call_; }

  /** How many arguments the call has (the parameters, `*name`'s tensors where it stands). */
  int32_t argument_count() const noexcept { return call_->argument_count; }

  /**
   * A new output of `ndim` extents at `shape` from the caller's framework, compact row-major,
   * on `device`. Throws dlpx::CallError when the allocator fails (the call raises its
   * MemoryError).
   */
  OutputTensor allocate(const int64_t* shape, int32_t ndim, DLDataType dtype,
                        DLDevice device = DLDevice{kDLCPU, 0}) {
    DLTensor* out = nullptr;
    if (dlpx_call_allocate(call_, device, dtype, ndim, shape, &out) != 0 || out == nullptr) {
      throw CallError("MemoryError", "dlpx: the caller's framework did not allocate the output");
    }
    return OutputTensor(out);
  }

  /** `allocate` with a braced shape: `call.allocate({n, m}, dlpx::dtype_of<float>())`. */
  OutputTensor allocate(std::initializer_list<int64_t> shape, DLDataType dtype,
                        DLDevice device = DLDevice{kDLCPU, 0}) {
    return allocate(shape.begin(), checked_ndim(shape.size()), dtype, device);
  }

  /** `allocate` with the shape from a contiguous container of integers (std::vector, Int64Span, ...). */
  template <class Shape, std::enable_if_t<detail::is_shape_container<Shape>::value, int> = 0>
  OutputTensor allocate(const Shape& shape, DLDataType dtype, DLDevice device = DLDevice{kDLCPU, 0}) {
    using I = std::remove_cv_t<std::remove_pointer_t<decltype(std::data(shape))>>;
    if constexpr (std::is_same<I, int64_t>::value) {
      return allocate(std::data(shape), checked_ndim(std::size(shape)), dtype, device);
    } else {
      std::vector<int64_t> s(std::begin(shape), std::end(shape));
      return allocate(s.data(), checked_ndim(s.size()), dtype, device);
    }
  }

  /** A new output with `like`'s shape, dtype and device, compact row-major. */
  OutputTensor empty_like(const TensorView& like) {
    const DLTensor& t = like.dltensor();
    return allocate(t.shape, t.ndim, t.dtype, t.device);
  }

  /** The caller's current stream on `device` (NULL for the CPU): launch there. */
  void* stream(DLDevice device) const {
    void* stream = nullptr;
    if (dlpx_call_stream(call_, device, &stream) != 0) {
      throw CallError("RuntimeError", "dlpx: the caller's stream could not be read");
    }
    return stream;
  }

  /**
   * The call the typed kernel running on this thread was handed, for a kernel function that
   * takes no `dlpx::Call&`. Throws dlpx::Error (RuntimeError) outside a typed kernel (and on
   * threads the kernel starts itself).
   */
  static Call& current() {
    if (detail::current_call == nullptr) {
      detail::throw_error("RuntimeError", "dlpx: Call::current: no typed dlpx kernel runs on this thread");
    }
    return *detail::current_call;
  }

 private:
  static int32_t checked_ndim(std::size_t n) {
    if (n > static_cast<std::size_t>(std::numeric_limits<int32_t>::max())) {
      detail::throw_error("ValueError", "dlpx: Call::allocate: too many dimensions");
    }
    return static_cast<int32_t>(n);
  }

  DlpxCall* call_;
};

/**
 * The tensors a `*name` parameter took, in order: `size()` of them, each a dlpx::TensorArg.
 * Valid until the kernel returns.
 */
class TensorList {
 public:
  /** The tensors of arguments `first` to `first + count - 1` of `call`. */
  TensorList(DlpxCall* call, int32_t first, int32_t count) noexcept : call_(call), first_(first), count_(count) {}

  /** How many tensors. */
  std::size_t size() const noexcept { return static_cast<std::size_t>(count_); }
  /** True when there are none. */
  bool empty() const noexcept { return count_ == 0; }
  /** Tensor `i`; throws dlpx::Error (IndexError) for `i >= size()`. */
  TensorArg operator[](std::size_t i) const {
    if (i >= size()) {
      detail::throw_error("IndexError", "dlpx: TensorList: index " + std::to_string(i) + " of " +
                                            std::to_string(count_) + " tensors");
    }
    const DLTensor* t = nullptr;
    uint64_t flags = 0;
    if (dlpx_argument_tensor(call_, first_ + static_cast<int32_t>(i), &t, &flags) != 0) {
      throw CallError("TypeError", "dlpx: TensorList: the argument is not a tensor");
    }
    return TensorArg(*t, flags);
  }

 private:
  DlpxCall* call_;
  int32_t first_;
  int32_t count_;
};

namespace detail {
namespace sig {

// The signature string read at compile time (and again on an error path at run time), as
// far as the typed export needs it: the kernel's name, and each parameter's name, type,
// whether it takes None, and whether it is `*name`. The loader reads it in full at load.

constexpr bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

constexpr std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

constexpr std::string_view kernel_name(std::string_view s) { return trim(s.substr(0, s.find('('))); }

// Follows quotes and brackets through a scan: `top(c)` is true when `c` stands outside both.
struct Nesting {
  char quote = 0;
  int depth = 0;
  constexpr bool top(char c) {
    if (quote != 0) {
      if (c == quote) quote = 0;
      return false;
    }
    if (c == '"' || c == '\'') {
      quote = c;
      return false;
    }
    if (c == '(' || c == '[') {
      ++depth;
      return false;
    }
    if ((c == ')' || c == ']') && depth > 0) {
      --depth;
      return false;
    }
    return depth == 0;
  }
};

// The text between the first '(' and its ')'.
constexpr std::string_view parameter_text(std::string_view s) {
  const std::size_t open = s.find('(');
  if (open == std::string_view::npos) return {};
  Nesting nesting;
  for (std::size_t i = open + 1; i < s.size(); ++i) {
    if (nesting.top(s[i]) && s[i] == ')') return s.substr(open + 1, i - open - 1);
  }
  return {};
}

// Piece `n` of the parameter list split at top-level commas (bare `*` and `/` count as pieces).
constexpr std::string_view piece(std::string_view list, int n, int* count = nullptr) {
  Nesting nesting;
  int index = 0;
  std::size_t start = 0;
  std::string_view found;
  for (std::size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (nesting.top(c) && c == ',') {
      const std::string_view p = trim(list.substr(start, i - start));
      if (!(p.empty() && i == list.size() && index == 0)) {  // "()" has no pieces
        if (index == n) found = p;
        ++index;
      }
      start = i + 1;
    }
  }
  if (count != nullptr) *count = index;
  return found;
}

constexpr bool is_marker(std::string_view p) { return p == "*" || p == "/"; }

// The number of parameters (bare `*` and `/` are none).
constexpr int count(std::string_view s) {
  const std::string_view list = parameter_text(s);
  int pieces = 0;
  piece(list, -1, &pieces);
  int n = 0;
  for (int i = 0; i < pieces; ++i) n += is_marker(piece(list, i)) ? 0 : 1;
  return n;
}

// Parameter `n`'s text, as written.
constexpr std::string_view parameter(std::string_view s, int n) {
  const std::string_view list = parameter_text(s);
  int pieces = 0;
  piece(list, -1, &pieces);
  for (int i = 0, k = 0; i < pieces; ++i) {
    const std::string_view p = piece(list, i);
    if (is_marker(p)) continue;
    if (k++ == n) return p;
  }
  return {};
}

constexpr bool is_star(std::string_view p) { return !p.empty() && p.front() == '*'; }

// Where `what` (`:`, `=`) first stands in `p` outside quotes and brackets; npos when nowhere.
constexpr std::size_t find_top(std::string_view p, char what) {
  Nesting nesting;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (nesting.top(p[i]) && p[i] == what) return i;
  }
  return std::string_view::npos;
}

constexpr std::string_view name_of(std::string_view p) {
  while (!p.empty() && p.front() == '*') p.remove_prefix(1);
  std::size_t end = p.size();
  const std::size_t colon = find_top(p, ':'), equals = find_top(p, '=');
  if (colon < end) end = colon;
  if (equals < end) end = equals;
  return trim(p.substr(0, end));
}

// The kinds a parameter's type settles on: DLPX_VALUE_TENSOR to DLPX_VALUE_STR, kVariadic for
// `*name`, kUnknown for a type the loader refuses anyway.
constexpr int kVariadic = 100;
constexpr int kUnknown = -1;

constexpr int type_kind(std::string_view t) {
  if (t == "tensor") return DLPX_VALUE_TENSOR;
  if (t == "int") return DLPX_VALUE_INT;
  if (t == "float") return DLPX_VALUE_FLOAT;
  if (t == "bool") return DLPX_VALUE_BOOL;
  if (t == "str") return DLPX_VALUE_STR;
  return kUnknown;
}

constexpr bool is_number_char(char c) {
  return (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E';
}

constexpr int default_kind(std::string_view d) {
  if (d == "None") return DLPX_VALUE_TENSOR;
  if (d == "True" || d == "False") return DLPX_VALUE_BOOL;
  if (!d.empty() && (d.front() == '"' || d.front() == '\'')) return DLPX_VALUE_STR;
  bool floating = false;
  for (char c : d) {
    if (!is_number_char(c)) return kUnknown;
    floating = floating || c == '.' || c == 'e' || c == 'E';
  }
  return d.empty() ? kUnknown : floating ? DLPX_VALUE_FLOAT : DLPX_VALUE_INT;
}

struct Type {
  int kind;
  bool optional;
};

// Parameter text -> its kind and whether None is allowed: the annotation says it, else the
// default (none: tensor; None: optional tensor).
constexpr Type type_of(std::string_view p) {
  const std::size_t colon = find_top(p, ':'), equals = find_top(p, '=');
  // `*name` (or `*name: tensor`) takes tensors: dlpx::TensorList. `*name: int` and the like have
  // no C++ type here; such a kernel reads call->arguments (kernel.h).
  if (is_star(p)) return {colon == std::string_view::npos || trim(p.substr(colon + 1)) == "tensor" ? kVariadic : kUnknown, false};
  const std::string_view dflt = equals == std::string_view::npos ? std::string_view() : trim(p.substr(equals + 1));
  const bool defaults_to_none = dflt == "None";
  if (colon != std::string_view::npos && (equals == std::string_view::npos || colon < equals)) {
    std::string_view annotation = trim(p.substr(colon + 1, equals == std::string_view::npos ? p.npos : equals - colon - 1));
    int kind = kUnknown, named = 0;
    bool nullable = false;
    while (true) {
      const std::size_t bar = annotation.find('|');
      const std::string_view part = trim(annotation.substr(0, bar));
      if (part == "None") {
        nullable = true;
      } else {
        kind = type_kind(part);
        ++named;
      }
      if (bar == std::string_view::npos) break;
      annotation.remove_prefix(bar + 1);
    }
    return {named == 1 ? kind : kUnknown, nullable || defaults_to_none};
  }
  if (equals == std::string_view::npos) return {DLPX_VALUE_TENSOR, false};
  return {default_kind(dflt), defaults_to_none};
}

// The return annotation: the text between `->` and the doc's `:`, trimmed; empty without one.
constexpr std::string_view returns(std::string_view s) {
  const std::size_t open = s.find('(');
  if (open == std::string_view::npos) return {};
  Nesting nesting;
  for (std::size_t i = open + 1; i < s.size(); ++i) {
    if (nesting.top(s[i]) && s[i] == ')') {
      const std::string_view rest = trim(s.substr(i + 1));
      if (rest.substr(0, 2) != "->") return {};
      const std::string_view annotation = rest.substr(2);
      return trim(annotation.substr(0, find_top(annotation, ':')));
    }
  }
  return {};
}

// A parameter's default as written (`1.0` of `x: float = 1.0`); empty without one.
constexpr std::string_view default_of(std::string_view p) {
  const std::size_t equals = find_top(p, '=');
  return equals == std::string_view::npos ? std::string_view() : trim(p.substr(equals + 1));
}

// Takes a leading `-` or `+` off `d`; true for `-`.
constexpr bool take_sign(std::string_view& d) {
  const bool minus = !d.empty() && d.front() == '-';
  if (!d.empty() && (d.front() == '-' || d.front() == '+')) d.remove_prefix(1);
  return minus;
}

// Whether the decimal integer `d` (`-5`, `+7`) lies in [-negative, positive]; true for text that
// is no such integer (another check refuses it).
constexpr bool integer_within(std::string_view d, uint64_t negative, uint64_t positive) {
  const bool minus = take_sign(d);
  if (d.empty()) return true;
  uint64_t magnitude = 0;
  for (char c : d) {
    if (c < '0' || c > '9') return true;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (magnitude > (std::numeric_limits<uint64_t>::max() - digit) / 10) return false;
    magnitude = magnitude * 10 + digit;
  }
  return magnitude <= (minus ? negative : positive);
}

// Whether the decimal number `d` (`1e300`, `-3.5`) is, by more than rounding, past `limit` in
// magnitude; false for text that is no such number. What is near the limit is left to the call.
constexpr bool number_past(std::string_view d, long double limit) {
  take_sign(d);
  long double mantissa = 0;
  int exponent = 0, digits = 0;
  bool point = false;
  std::size_t i = 0;
  for (; i < d.size() && d[i] != 'e' && d[i] != 'E'; ++i) {
    if (d[i] == '.' && !point) {
      point = true;
    } else if (d[i] >= '0' && d[i] <= '9') {
      if (mantissa < 1e30L) {
        mantissa = mantissa * 10 + (d[i] - '0');
        exponent -= point ? 1 : 0;
      } else {
        exponent += point ? 0 : 1;
      }
      ++digits;
    } else {
      return false;
    }
  }
  if (digits == 0) return false;
  if (i < d.size()) {
    std::string_view e = d.substr(i + 1);
    const bool minus = take_sign(e);
    if (e.empty()) return false;
    int written = 0;
    for (char c : e) {
      if (c < '0' || c > '9') return false;
      if (written < 100000) written = written * 10 + (c - '0');
    }
    exponent += minus ? -written : written;
  }
  if (mantissa == 0) return false;
  for (; exponent > 0 && mantissa <= limit * 2; --exponent) mantissa *= 10;
  for (; exponent < 0 && mantissa > limit; ++exponent) mantissa /= 10;
  return exponent >= 0 && mantissa > limit * (1 + 1e-9L);
}

// ---- result annotations, read as `python -m dlpx.stubgen` reads them (Python's grammar): the
// names `tensor int float bool str None`, `X | Y`, `tuple` and `list` bare or subscripted
// (`tuple[int, float]`, `tuple[tensor, ...]`, `list[int]`), in brackets or not, spaced as Python
// allows. Any other text is no type (`Any`, `tensor, tensor`): the stub says Any, and it says
// nothing of the result here either.

// `a` trimmed, without brackets around all of it (`(int)` is `int`; `(int, float)` is a tuple
// expression, no type: its brackets stay).
constexpr std::string_view unbracketed(std::string_view a) {
  a = trim(a);
  while (a.size() >= 2 && a.front() == '(' && a.back() == ')') {
    Nesting nesting;
    std::size_t close = 0;
    for (std::size_t i = 0; i < a.size() && close == 0; ++i) {
      nesting.top(a[i]);
      if (i > 0 && nesting.depth == 0 && nesting.quote == 0) close = i;
    }
    const std::string_view inner = a.substr(1, a.size() - 2);
    if (close != a.size() - 1 || find_top(inner, ',') != std::string_view::npos) break;
    a = trim(inner);
  }
  return a;
}

// The name `a` subscripts (`tuple` of `tuple [int]`), or empty.
constexpr std::string_view subscripted(std::string_view a) {
  const std::size_t open = a.find('[');
  if (open == std::string_view::npos || a.back() != ']') return {};
  return trim(a.substr(0, open));
}

// What `a` subscripts it with (`int` of `tuple[int]`); `a` is subscripted.
constexpr std::string_view subscript(std::string_view a) {
  const std::size_t open = a.find('[');
  return a.substr(open + 1, a.size() - open - 2);
}

// Whether `a` is written in the grammar above.
constexpr bool is_result_type(std::string_view a) {
  a = unbracketed(a);
  const std::size_t bar = find_top(a, '|');
  if (bar != std::string_view::npos) return is_result_type(a.substr(0, bar)) && is_result_type(a.substr(bar + 1));
  if (a.empty() || find_top(a, ',') != std::string_view::npos) return false;
  if (a == "None" || type_kind(a) != kUnknown || a == "tuple" || a == "list") return true;
  const std::string_view name = subscripted(a);
  if (name != "tuple" && name != "list") return false;
  const std::string_view inner = subscript(a);
  int n = 0;
  piece(inner, -1, &n);
  if (name == "tuple" && n == 2 && piece(inner, 1) == "...") return is_result_type(piece(inner, 0));
  if (n == 0 || (name == "list" && n != 1)) return false;
  for (int i = 0; i < n; ++i) {
    if (!is_result_type(piece(inner, i))) return false;
  }
  return true;
}

// Whether the result type `a` admits one value of kind `k` (DLPX_VALUE_NONE: none).
constexpr bool admits(std::string_view a, int k) {
  a = unbracketed(a);
  const std::size_t bar = find_top(a, '|');
  if (bar != std::string_view::npos) return admits(a.substr(0, bar), k) || admits(a.substr(bar + 1), k);
  return a == "None" ? k == DLPX_VALUE_NONE : type_kind(a) == k;
}

// Whether the result type `a` admits a tuple of `n` values of `kinds`.
constexpr bool admits_tuple(std::string_view a, const int* kinds, int n) {
  a = unbracketed(a);
  const std::size_t bar = find_top(a, '|');
  if (bar != std::string_view::npos) return admits_tuple(a.substr(0, bar), kinds, n) || admits_tuple(a.substr(bar + 1), kinds, n);
  if (a == "tuple") return true;
  if (subscripted(a) != "tuple") return false;
  const std::string_view inner = subscript(a);
  int m = 0;
  piece(inner, -1, &m);
  const bool any_number = m == 2 && piece(inner, 1) == "...";
  if (!any_number && m != n) return false;
  for (int i = 0; i < n; ++i) {
    if (!admits(piece(inner, any_number ? 0 : i), kinds[i])) return false;
  }
  return true;
}

// The index of the `*name` parameter, or -1.
constexpr int variadic_index(std::string_view s) {
  const int n = count(s);
  for (int i = 0; i < n; ++i) {
    if (is_star(parameter(s, i))) return i;
  }
  return -1;
}

}  // namespace sig

// ---- parameters: how each C++ type is read from the call ------------------------------------

// Where a parameter's arguments are: `index` (and `count`, for `*name`).
struct Slot {
  int32_t index;
  int32_t count;
};

inline const DLTensor* call_tensor(DlpxCall* call, int32_t index, uint64_t* flags) {
  const DLTensor* t = nullptr;
  if (dlpx_argument_tensor(call, index, &t, flags) != 0 || t == nullptr) {
    throw CallError("TypeError", "dlpx: the argument is not a tensor");
  }
  return t;
}

// cv-qualifiers ignored: a function returning `const char` gives a `char`, which is no int.
template <class T, class U = std::remove_cv_t<T>>
inline constexpr bool is_int_parameter =
    is_extent<U> && sizeof(std::conditional_t<std::is_integral<U>::value, U, int>) <= sizeof(int64_t);

// param<P>: `kind` (sig's kinds; 0 for a type no parameter takes), `optional`, and
// `read(call, slot)`.
template <class P, class Enable = void>
struct param {
  static constexpr int kind = 0;
  static constexpr bool optional = false;
};

template <>
struct param<TensorView> {
  static constexpr int kind = DLPX_VALUE_TENSOR;
  static constexpr bool optional = false;
  static TensorView read(DlpxCall* call, Slot slot) {
    uint64_t flags = 0;
    const DLTensor* t = call_tensor(call, slot.index, &flags);
    return TensorView(*t, flags);
  }
};

template <>
struct param<TensorArg> {
  static constexpr int kind = DLPX_VALUE_TENSOR;
  static constexpr bool optional = false;
  static TensorArg read(DlpxCall* call, Slot slot) {
    uint64_t flags = 0;
    const DLTensor* t = call_tensor(call, slot.index, &flags);
    return TensorArg(*t, flags);
  }
};

template <>
struct param<TensorList> {
  static constexpr int kind = sig::kVariadic;
  static constexpr bool optional = false;
  static TensorList read(DlpxCall* call, Slot slot) { return TensorList(call, slot.index, slot.count); }
};

// A typed, checked view: dlpx::mdspan_t<T, Rank> (std::mdspan or dlpx::StridedView).
template <class T, std::size_t Rank>
struct mdspan_param {
  static constexpr int kind = DLPX_VALUE_TENSOR;
  static constexpr bool optional = false;
  static mdspan_t<T, Rank> read(DlpxCall* call, Slot slot) {
    uint64_t flags = 0;
    const DLTensor* t = call_tensor(call, slot.index, &flags);
    return TensorArg(*t, flags).as_mdspan<T, Rank>(kDLCPU);
  }
};

template <class T, std::size_t Rank>
struct param<StridedView<T, Rank>> : mdspan_param<T, Rank> {};

#if defined(DLPX_DETAIL_MDSPAN_NS)
template <class T, std::size_t... E>
struct param<DLPX_DETAIL_MDSPAN_NS::mdspan<T, DLPX_DETAIL_MDSPAN_NS::extents<int64_t, E...>,
                                           DLPX_DETAIL_MDSPAN_NS::layout_stride,
                                           DLPX_DETAIL_MDSPAN_NS::default_accessor<T>>>
    : mdspan_param<T, sizeof...(E)> {
  static_assert(((E == DLPX_DETAIL_MDSPAN_NS::dynamic_extent) && ...),
                "dlpx: a typed kernel's mdspan parameter is dlpx::mdspan_t<T, Rank> (all extents dynamic)");
};
#endif

template <class I>
struct param<I, std::enable_if_t<is_int_parameter<I>>> {
  static constexpr int kind = DLPX_VALUE_INT;
  static constexpr bool optional = false;
  static I read(DlpxCall* call, Slot slot) {
    int64_t v = 0;
    if (dlpx_argument_int(call, slot.index, &v) != 0) throw CallError("TypeError", "dlpx: the argument is not an int");
    if constexpr (!std::is_same<I, int64_t>::value) {
      const bool fits = std::is_signed<I>::value
                            ? (v >= static_cast<int64_t>(std::numeric_limits<I>::min()) &&
                               (sizeof(I) >= sizeof(int64_t) || v <= static_cast<int64_t>(std::numeric_limits<I>::max())))
                            : (v >= 0 && (sizeof(I) >= sizeof(int64_t) ||
                                          static_cast<uint64_t>(v) <= static_cast<uint64_t>(std::numeric_limits<I>::max())));
      if (!fits) {
        throw Error("OverflowError", std::to_string(v) + " does not fit in a " + std::to_string(8 * sizeof(I)) + "-bit " +
                                         (std::is_signed<I>::value ? "signed" : "unsigned") + " integer");
      }
    }
    return static_cast<I>(v);
  }
};

// Half a last place past the largest F: what is below rounds to at most it, what is not to
// infinity (the tie goes to the even one). Exact (a float's is 0x1.ffffffp+127).
template <class F>
constexpr long double rounds_past() {
  long double past = 2.0L - 1.0L / static_cast<long double>(uint64_t{1} << std::numeric_limits<F>::digits);
  for (int i = 1; i < std::numeric_limits<F>::max_exponent; ++i) past *= 2;
  return past;
}

// `v` as Python's repr writes it: the fewest digits that read back as `v` (1e+300, not 301 digits).
inline std::string shortest(double v) {
  char shown[32] = {0};
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(shown, sizeof shown, "%.*g", digits, v);
    if (std::strtod(shown, nullptr) == v) break;
  }
  return shown;
}

template <class F>
struct param<F, std::enable_if_t<std::is_floating_point<F>::value>> {
  static constexpr int kind = DLPX_VALUE_FLOAT;
  static constexpr bool optional = false;
  static F read(DlpxCall* call, Slot slot) {
    double v = 0;
    if (dlpx_argument_float(call, slot.index, &v) != 0) throw CallError("TypeError", "dlpx: the argument is not a float");
    // A finite value that rounds past the type's range is an error (its conversion is undefined
    // in C++; struct.pack("f") gives inf, numpy warns), one below its precision rounds (to 0),
    // inf and nan stay. What rounds to the largest value is below it by half its last place (the
    // tie goes to the even infinity): 3.4028235e38, numpy's float32 max as printed, is taken.
    if constexpr (sizeof(F) < sizeof(double)) {
      constexpr double past = static_cast<double>(rounds_past<F>());
      if (v == v && v - v == 0 && (v >= past || v <= -past)) {
        throw Error("OverflowError", shortest(v) + " is out of range for a " + std::to_string(8 * sizeof(F)) + "-bit float");
      }
    }
    return static_cast<F>(v);
  }
};

template <>
struct param<bool> {
  static constexpr int kind = DLPX_VALUE_BOOL;
  static constexpr bool optional = false;
  static bool read(DlpxCall* call, Slot slot) {
    bool v = false;
    if (dlpx_argument_bool(call, slot.index, &v) != 0) throw CallError("TypeError", "dlpx: the argument is not a bool");
    return v;
  }
};

template <>
struct param<std::string_view> {
  static constexpr int kind = DLPX_VALUE_STR;
  static constexpr bool optional = false;
  static std::string_view read(DlpxCall* call, Slot slot) {
    const char* data = nullptr;
    std::size_t size = 0;
    if (dlpx_argument_str(call, slot.index, &data, &size) != 0) throw CallError("TypeError", "dlpx: the argument is not a str");
    return std::string_view(data, size);
  }
};

template <>
struct param<std::string> {
  static constexpr int kind = DLPX_VALUE_STR;
  static constexpr bool optional = false;
  static std::string read(DlpxCall* call, Slot slot) { return std::string(param<std::string_view>::read(call, slot)); }
};

template <class T>
struct param<std::optional<T>> {
  static constexpr int kind = param<T>::kind;
  static constexpr bool optional = true;
  static std::optional<T> read(DlpxCall* call, Slot slot) {
    const bool in_range = static_cast<uint32_t>(slot.index) < static_cast<uint32_t>(call->argument_count);
    const DlpxValueKind k = in_range ? call->arguments[slot.index].kind : dlpx_call_argument_kind(call, slot.index);
    if (k < 0) throw CallError("IndexError", "dlpx: no such argument");
    if (k == DLPX_VALUE_NONE) return std::nullopt;
    return param<T>::read(call, slot);
  }
};

// Reads parameter `n` (type P) and names it in any error a conversion reports.
template <class P>
P read_parameter(DlpxCall* call, const char* signature, int n, Slot slot) {
  try {
    return param<P>::read(call, slot);
  } catch (const CallError&) {
    throw;  // the call's own error (which names the parameter) is the one raised
  } catch (const Error& e) {
    std::string_view what = e.what();
    if (what.substr(0, 6) == "dlpx: ") what.remove_prefix(6);
    const std::string_view name = sig::name_of(sig::parameter(signature, n));
    throw Error(e.kind(), "parameter '" + std::string(name) + "': " + std::string(what));
  }
}

// ---- results ---------------------------------------------------------------------------------

// The kind of result a C++ result type gives (DLPX_VALUE_*, as an annotation spells it);
// sig::kUnknown for a type a kernel cannot return (a const dlpx::OutputTensor cannot be given up).
template <class R>
constexpr int result_kind() {
  using U = std::remove_cv_t<R>;
  if constexpr (std::is_void<U>::value) return DLPX_VALUE_NONE;
  if constexpr (std::is_same<R, OutputTensor>::value) return DLPX_VALUE_TENSOR;
  if constexpr (std::is_same<U, bool>::value) return DLPX_VALUE_BOOL;
  if constexpr (is_int_parameter<U>) return DLPX_VALUE_INT;
  if constexpr (std::is_floating_point<U>::value) return DLPX_VALUE_FLOAT;
  return sig::kUnknown;
}

template <class R>
struct result {
  static constexpr bool single = result_kind<R>() != sig::kUnknown && result_kind<R>() != DLPX_VALUE_NONE;
  static constexpr bool ok = single;
};
// A tuple of two or more results, none of them a tuple: the call returns one result as itself
// and several as a flat tuple, so `(x,)` and `(a, (b, c))` have no spelling.
template <class... R>
struct result<std::tuple<R...>> {
  static constexpr bool single = false;
  static constexpr bool ok = sizeof...(R) > 1 && (result<R>::single && ...);
};

inline int give(DlpxCall* call, OutputTensor&& out) {
  if (!out) throw Error("ValueError", "returned an empty dlpx::OutputTensor");
  return dlpx_call_return_tensor(call, out.release());
}
inline int give(DlpxCall* call, bool v) { return dlpx_call_return_bool(call, v); }
template <class R, std::enable_if_t<is_int_parameter<R>, int> = 0>
int give(DlpxCall* call, R v) {
  if constexpr (std::is_unsigned<R>::value && sizeof(R) >= sizeof(int64_t)) {
    if (v > static_cast<R>(std::numeric_limits<int64_t>::max())) {
      throw Error("OverflowError", "the result " + std::to_string(v) + " does not fit in int64");
    }
  }
  return dlpx_call_return_int(call, static_cast<int64_t>(v));
}
template <class R, std::enable_if_t<std::is_floating_point<R>::value, int> = 0>
int give(DlpxCall* call, R v) {
  return dlpx_call_return_float(call, static_cast<double>(v));
}
template <class... R>
int give(DlpxCall* call, std::tuple<R...>&& results) {
  return std::apply([call](auto&&... r) { return ((give(call, std::move(r)) == 0) && ...) ? 0 : -1; },
                    std::move(results));
}

// ---- the function ----------------------------------------------------------------------------

template <class F>
struct function_traits {
  static constexpr bool ok = false;
};

template <class R, class... A>
struct function_traits<R (*)(A...)> {
  static constexpr bool ok = true;
  using result_type = R;
  using first = std::tuple_element_t<0, std::tuple<A..., void>>;
  // Takes the call first (dlpx::Call&).
  static constexpr bool takes_call = std::is_same<first, Call&>::value;
  using params = std::conditional_t<takes_call, std::tuple<std::decay_t<A>...>, std::tuple<void, std::decay_t<A>...>>;
  // As declared (`T`, `const T&`, `T&`, `T&&`): what each converted argument is passed as.
  using declared = std::conditional_t<takes_call, std::tuple<A...>, std::tuple<void, A...>>;
  static constexpr int arity = static_cast<int>(sizeof...(A)) - (takes_call ? 1 : 0);
};
template <class R, class... A>
struct function_traits<R (*)(A...) noexcept> : function_traits<R (*)(A...)> {};

// The C++ parameter types after the call, as a tuple.
template <class F, std::size_t... I>
auto parameter_types(std::index_sequence<I...>)
    -> std::tuple<std::tuple_element_t<I + 1, typename function_traits<F>::params>...>;
template <class F>
using parameters_of =
    decltype(parameter_types<F>(std::make_index_sequence<static_cast<std::size_t>(function_traits<F>::arity)>{}));

// Whether a parameter of C++ type T holds its default `d` (none: it does): an integer in T's
// range, a number that does not round past a float's. Every call relying on such a default
// would fail; what the signature spells otherwise is the loader's to refuse.
// An optional parameter's default is its value type's (`std::optional<uint8_t>` and `= 300`
// does not compile either; `None` is no number, which each check lets through).
template <class T>
struct value_of_optional {
  using type = T;
};
template <class T>
struct value_of_optional<std::optional<T>> {
  using type = T;
};

template <class T>
constexpr bool holds_default(std::string_view d) {
  using U = std::remove_cv_t<typename value_of_optional<std::remove_cv_t<T>>::type>;
  if constexpr (is_int_parameter<U>) {
    const uint64_t positive = static_cast<uint64_t>(std::numeric_limits<U>::max());
    const uint64_t negative = std::is_signed<U>::value ? static_cast<uint64_t>(-(std::numeric_limits<U>::min() + 1)) + 1 : 0;
    return sig::integer_within(d, negative, positive);
  } else if constexpr (std::is_floating_point<U>::value && sizeof(U) < sizeof(double)) {
    return !sig::number_past(d, rounds_past<U>());
  } else {
    return true;
  }
}

// The first parameter whose C++ type does not take its signature type (or its default), or -1.
template <class F, std::size_t... I>
constexpr int first_mismatch(std::string_view signature, std::index_sequence<I...>) {
  using P = parameters_of<F>;
  const int kinds[] = {param<std::tuple_element_t<I, P>>::kind..., 0};
  const bool optionals[] = {param<std::tuple_element_t<I, P>>::optional..., false};
  const bool defaults[] = {
      holds_default<std::tuple_element_t<I, P>>(sig::default_of(sig::parameter(signature, static_cast<int>(I))))...,
      true};
  for (std::size_t i = 0; i < sizeof...(I); ++i) {
    const sig::Type t = sig::type_of(sig::parameter(signature, static_cast<int>(i)));
    if (t.kind != kinds[i] || t.optional != optionals[i] || !defaults[i]) return static_cast<int>(i);
  }
  return -1;
}

/** -1 when every parameter of F takes its signature type; else the first that does not. */
template <class F>
constexpr int parameter_that_does_not_fit(std::string_view signature) {
  if constexpr (!function_traits<F>::ok) {
    return 0;
  } else {
    if (function_traits<F>::arity != sig::count(signature)) return 0;
    return first_mismatch<F>(signature, std::make_index_sequence<static_cast<std::size_t>(function_traits<F>::arity)>{});
  }
}

template <class F>
constexpr int arity_of() {
  if constexpr (function_traits<F>::ok) {
    return function_traits<F>::arity;
  } else {
    return -1;
  }
}

// Whether the return annotation `a` says what a function returning R returns: `tensor`, `int`,
// `float`, `bool`, `None` (void), `tuple[...]` of them for a std::tuple (`tuple[int, ...]`: any
// number), or a union one of whose members does (`int | None`); none, or text that is no type
// (`Any`), says anything, as the stub does.
template <class R>
struct annotated {
  static constexpr bool as(std::string_view a) {
    return a.empty() || !sig::is_result_type(a) || sig::admits(a, result_kind<R>());
  }
};
template <class... R>
struct annotated<std::tuple<R...>> {
  static constexpr bool as(std::string_view a) {
    const int kinds[] = {result_kind<R>()..., 0};
    return a.empty() || !sig::is_result_type(a) || sig::admits_tuple(a, kinds, static_cast<int>(sizeof...(R)));
  }
};

// Whether `signature`'s return annotation says what F returns (true where F or its result is
// refused for another reason: one error at a time).
template <class F>
constexpr bool returns_as_annotated(std::string_view signature) {
  if constexpr (function_traits<F>::ok) {
    using R = typename function_traits<F>::result_type;
    if constexpr (std::is_void<R>::value || result<R>::ok) return annotated<R>::as(sig::returns(signature));
  }
  return true;
}

template <class F>
constexpr bool result_fits() {
  if constexpr (function_traits<F>::ok) {
    using R = typename function_traits<F>::result_type;
    return std::is_void<R>::value || result<R>::ok;
  } else {
    return true;
  }
}

// Where parameter `n` of `count` reads: past a `*name` (at `star`, taking what the others leave
// of `argc`), one slot further per tensor it took, less one.
inline Slot slot_of(int n, int count, int star, int32_t argc) {
  if (star < 0 || n < star) return {n, 1};
  const int32_t taken = argc - (count - 1);
  if (n == star) return {n, taken < 0 ? 0 : taken};
  return {n + taken - 1, 1};
}

template <auto Function, const char* Signature, std::size_t... I>
int run(Call& call, std::index_sequence<I...>) {
  using traits = function_traits<decltype(Function)>;
  using P = parameters_of<decltype(Function)>;
  [[maybe_unused]] constexpr int count = static_cast<int>(sizeof...(I));
  [[maybe_unused]] constexpr int star = sig::variadic_index(Signature);
  [[maybe_unused]] const int32_t argc = star >= 0 ? call.argument_count() : 0;
  [[maybe_unused]] DlpxCall* raw = call.get();
  // Braced: the parameters are read in order, so the first bad one is the one reported.
  [[maybe_unused]] std::tuple<std::tuple_element_t<I, P>...> args{read_parameter<std::tuple_element_t<I, P>>(
      raw, Signature, static_cast<int>(I), slot_of(static_cast<int>(I), count, star, argc))...};
  using R = typename traits::result_type;
  // Each argument passed as its parameter is declared: a by-value or `T&&` parameter takes the
  // converted value moved (it is not read again), a reference parameter the value itself.
  using D = typename traits::declared;
  if constexpr (std::is_void<R>::value) {
    if constexpr (traits::takes_call) {
      Function(call, std::forward<std::tuple_element_t<I + 1, D>>(std::get<I>(args))...);
    } else {
      Function(std::forward<std::tuple_element_t<I + 1, D>>(std::get<I>(args))...);
    }
    return 0;
  } else {
    if constexpr (traits::takes_call) {
      return give(raw, Function(call, std::forward<std::tuple_element_t<I + 1, D>>(std::get<I>(args))...));
    } else {
      return give(raw, Function(std::forward<std::tuple_element_t<I + 1, D>>(std::get<I>(args))...));
    }
  }
}

// Restores the thread's previous current call, whatever happens.
class CurrentCall {
 public:
  explicit CurrentCall(Call* call) noexcept : previous_(std::exchange(current_call, call)) {}
  CurrentCall(const CurrentCall&) = delete;
  CurrentCall& operator=(const CurrentCall&) = delete;
  ~CurrentCall() { current_call = previous_; }

 private:
  Call* previous_;
};

/** The C kernel (DlpxKernelFunction) a typed export registers for `Function`. */
template <auto Function, const char* Signature>
int invoke(DlpxCall* raw) noexcept {
  using F = decltype(Function);
  Call call(raw);
  CurrentCall current(&call);
  try {
    return run<Function, Signature>(call,
                                    std::make_index_sequence<static_cast<std::size_t>(function_traits<F>::arity)>{});
  } catch (...) {
    return report_exception(raw);
  }
}

}  // namespace detail
}  // namespace dlpx

/* Each public macro spells the name as written (`#name`) and pastes the identifiers it makes
 * from it where it is an argument, as dlpx/kernel.h's do (a name that is a macro, passed on,
 * would be expanded first), each a prefix of its own and the name: the typed kernel's C function
 * (`fn_id`), its signature (`signature_id`), and the export's two (`export_id`, `register_id`). */
#define DLPX_EXPORT_TYPED_KERNEL_NAMED_(fn_id, signature_id, export_id, register_id, name_text, function, signature, \
                                        flags)                                                                       \
  static_assert(::dlpx::detail::function_traits<decltype(&function)>::ok,                                            \
                "DLPX_EXPORT_TYPED_KERNEL(" name_text "): " #function " must be a function (not an overload set)");  \
  static_assert(::dlpx::detail::sig::kernel_name(signature) == name_text,                                            \
                "DLPX_EXPORT_TYPED_KERNEL(" name_text "): the signature must begin with " name_text "(");            \
  static_assert(::dlpx::detail::arity_of<decltype(&function)>() == ::dlpx::detail::sig::count(signature),            \
                "DLPX_EXPORT_TYPED_KERNEL(" name_text "): " #function                                                \
                " takes a different number of parameters (after dlpx::Call&) than the signature lists");             \
  static_assert(::dlpx::detail::parameter_that_does_not_fit<decltype(&function)>(signature) == -1,                   \
                "DLPX_EXPORT_TYPED_KERNEL(" name_text "): a parameter's C++ type does not take its signature type "  \
                "(tensor: dlpx::TensorView, dlpx::TensorArg or dlpx::mdspan_t<T, R>; int: int64_t; float: double; "  \
                "bool: bool; str: std::string_view; T | None: std::optional<...>; *name: dlpx::TensorList; "         \
                "a default the type holds)");                                                                        \
  static_assert(::dlpx::detail::result_fits<decltype(&function)>(),                                                  \
                "DLPX_EXPORT_TYPED_KERNEL(" name_text "): " #function                                                \
                " must return void, dlpx::OutputTensor, an integer (64 bits at most), a floating-point number, "     \
                "bool or a std::tuple of two or more of them (not nested)");                                         \
  static_assert(::dlpx::detail::returns_as_annotated<decltype(&function)>(signature),                                \
                "DLPX_EXPORT_TYPED_KERNEL(" name_text "): the signature's return annotation is not what " #function  \
                " returns (tensor: dlpx::OutputTensor; int, float, bool: those; None: void; tuple[...]: a "          \
                "std::tuple of as many)");                                                                           \
  static constexpr char signature_id[] = signature;                                                                  \
  static int fn_id(DlpxCall* call) noexcept {                                                                        \
    return ::dlpx::detail::invoke<&function, signature_id>(call);                                                    \
  }                                                                                                                  \
  DLPX_EXPORT_KERNEL_NAMED_(export_id, register_id, name_text, fn_id, signature_id, flags)

/**
 * Exports the C++ function `function` (a function, not an overload set) as the kernel `name`
 * (an identifier: the attribute the loaded library gets) with `signature` (a string literal:
 * `"name(a, b, alpha=1.0) -> tensor: doc"`, the syntax of dlpx/kernel.h), flags as given
 * (DLPX_KERNEL_FLAG_*). At file scope, once per kernel. Fails to compile when the signature
 * does not start with `name`, when it lists a different number of parameters than `function`
 * takes (after a first `dlpx::Call&`), when a C++ parameter type does not take its
 * parameter's type (the compiler's note gives the parameter's index: "reduces to (1 == -1)"),
 * or when the result type is not one a kernel returns.
 */
#define DLPX_EXPORT_TYPED_KERNEL_WITH_FLAGS(name, function, signature, flags)                                \
  DLPX_EXPORT_TYPED_KERNEL_NAMED_(dlpx_typed_kernel_fn_##name, dlpx_typed_kernel_signature_##name,           \
                                  dlpx_typed_kernel_export_##name, dlpx_typed_kernel_register_##name, #name, \
                                  function, signature, flags)

/** Exports a typed kernel that runs without the GIL (the default: see DLPX_KERNEL_FLAG_SHORT). */
#define DLPX_EXPORT_TYPED_KERNEL(name, function, signature)                                                  \
  DLPX_EXPORT_TYPED_KERNEL_NAMED_(dlpx_typed_kernel_fn_##name, dlpx_typed_kernel_signature_##name,           \
                                  dlpx_typed_kernel_export_##name, dlpx_typed_kernel_register_##name, #name, \
                                  function, signature, 0)

/** Exports a typed kernel that keeps the GIL: one that returns sooner than releasing it would take. */
#define DLPX_EXPORT_TYPED_KERNEL_SHORT(name, function, signature)                                            \
  DLPX_EXPORT_TYPED_KERNEL_NAMED_(dlpx_typed_kernel_fn_##name, dlpx_typed_kernel_signature_##name,           \
                                  dlpx_typed_kernel_export_##name, dlpx_typed_kernel_register_##name, #name, \
                                  function, signature, DLPX_KERNEL_FLAG_SHORT)

#endif  // DLPX_KERNEL_HPP_

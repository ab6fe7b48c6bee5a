/*
 * dlpx/kernel.h: the kernel ABI. A kernel library is a plain shared library with no Python in
 * it: it links libdlpx, includes this header, and exports each kernel with one macro. dlpx
 * loads it (`dlpx.load_library(path)` in Python, `dlpx_kernel_find` in C) and does everything
 * that touches Python around the call: reading arguments from any framework's objects, the
 * caller's allocator and stream, returning outputs as the caller's type, raising errors.
 *
 *   #include <dlpx/kernel.h>
 *
 *   static int scale(DlpxCall *call) {
 *     const DLTensor *x;
 *     double alpha;
 *     DLTensor *out;
 *     if (dlpx_argument_tensor(call, 0, &x, NULL) || dlpx_argument_float(call, 1, &alpha)) return -1;
 *     if (dlpx_call_allocate(call, x->device, x->dtype, x->ndim, x->shape, &out)) return -1;
 *     ...                                           // compute out = alpha * x
 *     return dlpx_call_return_tensor(call, out);
 *   }
 *   DLPX_EXPORT_KERNEL(scale, scale, "scale(x, alpha=1.0) -> tensor: alpha * x, in x's framework.")
 *
 * A kernel is `int fn(DlpxCall *call)`: it returns 0, or -1 after an error was reported
 * (`dlpx_call_error`, or a `dlpx_call_*` function that failed and returned -1). It reads its
 * arguments in place (`call->arguments`, or the `dlpx_argument_*` readers below, which do the
 * checks and report what fails); the `dlpx_call_*` functions (declared in dlpx.h) are the rest
 * of its interface to the caller: outputs, the stream, results, errors. None needs the GIL. A
 * kernel runs without the GIL unless it is exported with DLPX_EXPORT_KERNEL_SHORT.
 *
 * The signature string is `name(parameters) [-> returns] [: doc]`, Python's syntax: a
 * parameter is `name`, `name: type` or `name=default` (types tensor, int, float, bool, str,
 * `T | None`; without an annotation the default says it: none → tensor, 1.0 → float, 1 → int,
 * True → bool, "x" → str, None → optional tensor), `*name` takes any number of tensors (or of
 * its annotated type: `*sizes: int`), and the parameters after it (or after a bare `*`) are
 * keyword-only. The kernel reads its arguments by
 * index, in parameter order, with `*name`'s values where it stands.
 *
 * C11 or C++ (any standard dlpx's C API compiles with), GCC or Clang, ELF; no Python.h. In C++
 * an exception a kernel lets out is its call's error (DLPX_EXPORT_KERNEL_WITH_FLAGS).
 */
#ifndef DLPX_KERNEL_H
#define DLPX_KERNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlpx.h"

/**
 * The kernel ABI version this header writes into every export and library record. A loader
 * refuses a library of a newer version (naming both); every later version keeps the
 * `abi_version` fields first, where an older loader reads them. 2: kernels read their arguments
 * in place (`struct DlpxCall`, `DlpxArgument`); a loader of 2 runs libraries of 1 unchanged.
 */
#define DLPX_KERNEL_ABI_VERSION 2

/**
 * `DlpxKernelExport.flags`: the kernel keeps the GIL while it runs. For kernels that return in
 * well under a microsecond (releasing and taking back the GIL costs about that much); any
 * longer kernel should let the caller's other Python threads run.
 */
#define DLPX_KERNEL_FLAG_SHORT (UINT32_C(1) << 0)

#ifdef __cplusplus
extern "C" {
#endif

/**
 * One argument of a call, read in place (`call->arguments[i]`): `kind` (`DLPX_VALUE_*`) says
 * which member of `value` holds it. Everything it points to is the caller's, valid until the
 * kernel returns; a kernel never writes an argument. 64 bytes.
 */
typedef struct DlpxArgument {
  /** `DLPX_VALUE_*`: NONE (an optional parameter left at None), TENSOR, INT, FLOAT, BOOL, STR. */
  int32_t kind;
  union {
    /** DLPX_VALUE_TENSOR. */
    struct {
      /** The tensor: shape and strides never NULL (strides are filled in for a compact tensor). */
      DLTensor tensor;
      /**
       * Its DLPack flags: `DLPACK_FLAG_BITMASK_READ_ONLY` means the kernel must not write
       * through `data` (`bytes`, a read-only numpy array, a jax array), whichever way dlpx read
       * it (`DlpxTensorView.flags`' rule); `DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED` means a
       * sub-byte dtype (int4, fp4) is stored one element per byte. The other bits are 0.
       */
      uint64_t flags;
    } tensor;
    /** DLPX_VALUE_INT. */
    int64_t int64;
    /** DLPX_VALUE_FLOAT. */
    double float64;
    /** DLPX_VALUE_BOOL. */
    bool boolean;
    /** DLPX_VALUE_STR: UTF-8 bytes, `size` of them, not NUL-terminated. */
    struct {
      const char *data;
      size_t size;
    } str;
  } value;
} DlpxArgument;

/**
 * One call of a kernel, as the kernel sees it: its arguments, in parameter order with `*name`'s
 * values where it stands, each already of its parameter's type (a `tensor` parameter's is a
 * tensor, an `int | None` one's an int or NONE, `*name`'s are tensors): a kernel may read the
 * member its signature names without checking `kind`. The rest of the call is dlpx's (a kernel
 * never copies or makes one); the `dlpx_call_*` functions reach it. Valid until the kernel
 * returns, and the thread's that runs the kernel: the `dlpx_call_*` functions are called on it
 * (the caller's current stream is that thread's, as every framework's current stream is a
 * thread's, and a call is not changed by two threads at once). A thread the kernel starts gets
 * what it needs (the stream, an output) from the kernel; it may read the arguments.
 */
struct DlpxCall {
  /** `argument_count` arguments (none to read when it is 0: then it need not be NULL). */
  const DlpxArgument *arguments;
  /** How many: what `dlpx_call_argument_count` returns. */
  int32_t argument_count;
};

/*
 * The readers: argument `index` as a kind, read in place when it is one; otherwise the
 * `dlpx_call_*` function of the same name, which records the error in the call (`argument 9
 * asked for; the call has 3`, `argument 1 ('b') is a str, not a tensor`) and returns -1. Each
 * returns 0, or -1: the kernel then returns -1. `call` is the call the kernel was handed (never
 * NULL); a NULL out-pointer is an error the function reports.
 */

/** Argument `index` as a tensor (`*out_flags` its flags; `out_flags` may be NULL). */
static inline int dlpx_argument_tensor(DlpxCall *call, int32_t index, const DLTensor **out_tensor,
                                       uint64_t *out_flags) {
  if ((uint32_t)index < (uint32_t)call->argument_count && call->arguments[index].kind == DLPX_VALUE_TENSOR &&
      out_tensor) {
    *out_tensor = &call->arguments[index].value.tensor.tensor;
    if (out_flags) *out_flags = call->arguments[index].value.tensor.flags;
    return 0;
  }
  return dlpx_call_tensor(call, index, out_tensor, out_flags);
}

/** Argument `index` as an `int64_t`. */
static inline int dlpx_argument_int(DlpxCall *call, int32_t index, int64_t *out) {
  if ((uint32_t)index < (uint32_t)call->argument_count && call->arguments[index].kind == DLPX_VALUE_INT && out) {
    *out = call->arguments[index].value.int64;
    return 0;
  }
  return dlpx_call_int(call, index, out);
}

/** Argument `index` as a `double`. */
static inline int dlpx_argument_float(DlpxCall *call, int32_t index, double *out) {
  if ((uint32_t)index < (uint32_t)call->argument_count && call->arguments[index].kind == DLPX_VALUE_FLOAT && out) {
    *out = call->arguments[index].value.float64;
    return 0;
  }
  return dlpx_call_float(call, index, out);
}

/** Argument `index` as a `bool`. */
static inline int dlpx_argument_bool(DlpxCall *call, int32_t index, bool *out) {
  if ((uint32_t)index < (uint32_t)call->argument_count && call->arguments[index].kind == DLPX_VALUE_BOOL && out) {
    *out = call->arguments[index].value.boolean;
    return 0;
  }
  return dlpx_call_bool(call, index, out);
}

/** Argument `index` as a string: `*out_size` UTF-8 bytes at `*out_data`, not NUL-terminated. */
static inline int dlpx_argument_str(DlpxCall *call, int32_t index, const char **out_data, size_t *out_size) {
  if ((uint32_t)index < (uint32_t)call->argument_count && call->arguments[index].kind == DLPX_VALUE_STR && out_data &&
      out_size) {
    *out_data = call->arguments[index].value.str.data;
    *out_size = call->arguments[index].value.str.size;
    return 0;
  }
  return dlpx_call_str(call, index, out_data, out_size);
}

/** A kernel: reads its arguments from `call`, returns 0, or -1 with an error reported there. */
typedef int (*DlpxKernelFunction)(DlpxCall *call);

/**
 * One exported kernel: what DLPX_EXPORT_KERNEL defines, in the library's static storage.
 */
typedef struct DlpxKernelExport {
  /** DLPX_KERNEL_ABI_VERSION of the kernel.h the export was compiled with. First, always. */
  uint32_t abi_version;
  /** DLPX_KERNEL_FLAG_* bits; 0 for a kernel that releases the GIL. */
  uint32_t flags;
  /** The kernel's name, a C identifier: the attribute of the loaded library. NUL-terminated. */
  const char *name;
  /**
   * `name(parameters) [-> returns] [: doc]` (above), NUL-terminated, UTF-8. Its name must be
   * the export's; the loader reads it once, when the library is loaded, and refuses a library
   * with a signature it cannot read (ImportError naming the kernel).
   */
  const char *signature;
  /** The kernel. Never NULL. */
  DlpxKernelFunction function;
  /** The library's next export, or NULL: set by the export's constructor, read by the loader. */
  const struct DlpxKernelExport *next;
} DlpxKernelExport;

/**
 * The library's record: what `dlpx_kernel_library()` returns. One per shared library (the
 * weak definitions below merge into one), hidden from every other library.
 */
typedef struct DlpxKernelLibrary {
  /** DLPX_KERNEL_ABI_VERSION of the kernel.h the library was built with. First, always. */
  uint32_t abi_version;
  /** 0. */
  uint32_t reserved;
  /** The last export registered (the list runs from it through `next`); NULL before any. */
  const DlpxKernelExport *first;
} DlpxKernelLibrary;

/*
 * How a library lists its kernels without a table anyone writes by hand: each export's
 * constructor (run by dlopen, before the loader looks) links it in front of the list in the
 * library's one record, a weak variable every translation unit defines and the linker merges,
 * hidden so that no two libraries share it. The loader finds the record through
 * `dlpx_kernel_library`, weak as well and the one symbol a kernel library exports for dlpx
 * (default visibility, so -fvisibility=hidden builds keep it). dlsym on the library's own
 * handle finds its own definition first.
 */
__attribute__((weak, visibility("hidden")))
DlpxKernelLibrary dlpx_kernel_library_record = {DLPX_KERNEL_ABI_VERSION, 0, 0};

__attribute__((weak, visibility("default")))
const DlpxKernelLibrary *dlpx_kernel_library(void);

__attribute__((weak, visibility("default"), used))
const DlpxKernelLibrary *dlpx_kernel_library(void) {
  return &dlpx_kernel_library_record;
}

#ifdef __cplusplus
}  // extern "C"
#endif

#if defined(__cplusplus) && __cplusplus >= 201703L
namespace dlpx {
class Call;
namespace detail {
/* The call a typed kernel (kernel.hpp) runs on this thread, for dlpx::Call::current; saved and
 * restored around each typed kernel, and cleared around a kernel of the C macro (`guarded`). */
inline thread_local Call *current_call = nullptr;
}  // namespace detail
}  // namespace dlpx
#endif

#if defined(__cplusplus) && (defined(__cpp_exceptions) || defined(__EXCEPTIONS))
#include <exception>
#include <new>
#include <stdexcept>
#include <string_view>

#include "cpp/error.hpp"

namespace dlpx {
namespace detail {

/*
 * What an exception thrown out of a C++ kernel becomes: the error of its call, of the kind its
 * type names (dlpx::Error its own kind; std::invalid_argument ValueError, std::out_of_range
 * IndexError, std::overflow_error OverflowError, std::bad_alloc MemoryError, any other
 * std::exception RuntimeError), the message without a leading "dlpx: " (the call's message
 * begins with it). Called inside a catch. Never throws.
 */
inline int report_exception(DlpxCall *call) noexcept {
  try {
    throw;
  } catch (const Error &e) {
    const char *what = e.what();
    if (std::string_view(what).substr(0, 6) == "dlpx: ") what += 6;
    return dlpx_call_error(call, e.kind().c_str(), what);
  } catch (const std::invalid_argument &e) {
    return dlpx_call_error(call, "ValueError", e.what());
  } catch (const std::out_of_range &e) {
    return dlpx_call_error(call, "IndexError", e.what());
  } catch (const std::overflow_error &e) {
    return dlpx_call_error(call, "OverflowError", e.what());
  } catch (const std::bad_alloc &e) {
    return dlpx_call_error(call, "MemoryError", e.what());
  } catch (const std::exception &e) {
    return dlpx_call_error(call, "RuntimeError", e.what());
  } catch (...) {
    return dlpx_call_error(call, "RuntimeError", "a C++ exception not derived from std::exception");
  }
}

/* A kernel function whose exceptions become its call's error: an exception that left a kernel
 * would cross the C loader and end the process (std::terminate). */
template <int (*Function)(DlpxCall *)>
int guarded(DlpxCall *call) noexcept {
  // No typed call runs here, though one may have called this kernel (dlpx_kernel_call):
  // dlpx::Call::current() refuses rather than give the caller's call.
  struct Outside {
    Call *saved = current_call;
    Outside() noexcept { current_call = nullptr; }
    ~Outside() { current_call = saved; }
  } outside;
  try {
    return Function(call);
  } catch (...) {
    return report_exception(call);
  }
}

}  // namespace detail
}  // namespace dlpx

#define DLPX_KERNEL_GUARDED_(function) (&::dlpx::detail::guarded<function>)
#else
#define DLPX_KERNEL_GUARDED_(function) (function)
#endif

/**
 * Exports `function` (a DlpxKernelFunction, by its name) as the kernel `name` (an identifier:
 * the attribute the loaded library gets) with `signature` (a string literal:
 * `"name(a, b) -> tensor: doc"`), flags as given (DLPX_KERNEL_FLAG_*). At file scope, once per
 * kernel. Compiled as C++ (with exceptions), an exception the function lets out becomes the
 * call's error, of the kind its type names (`dlpx::detail::report_exception`), never
 * std::terminate.
 */
#define DLPX_EXPORT_KERNEL_WITH_FLAGS(name, function, signature, flags) \
  DLPX_EXPORT_KERNEL_NAMED_(dlpx_kernel_export_##name, dlpx_kernel_register_##name, #name, function, signature, flags)

/* Each public macro spells the name as written (`#name`) and pastes the identifiers it makes
 * from it, where it is an argument: passed on, a name that is also a macro (`bool` with
 * <stdbool.h>, `linux` and `unix` in GNU C, both 1) would be expanded first. Each identifier
 * is a prefix of its own and the name, so no two kernels' identifiers meet (a suffix would:
 * `foo` and `foo_export`). */
#define DLPX_EXPORT_KERNEL_NAMED_(export_id, register_id, name_text, function, signature, flags)  \
  static DlpxKernelExport export_id = {                                                           \
      DLPX_KERNEL_ABI_VERSION, (flags), name_text, signature, DLPX_KERNEL_GUARDED_(function), 0}; \
  __attribute__((constructor)) static void register_id(void) {                                    \
    export_id.next = dlpx_kernel_library_record.first;                                            \
    dlpx_kernel_library_record.first = &export_id;                                                \
  }

/** Exports a kernel that runs without the GIL (the default: see DLPX_KERNEL_FLAG_SHORT). */
#define DLPX_EXPORT_KERNEL(name, function, signature) \
  DLPX_EXPORT_KERNEL_NAMED_(dlpx_kernel_export_##name, dlpx_kernel_register_##name, #name, function, signature, 0)

/** Exports a kernel that keeps the GIL: one that returns sooner than releasing it would take. */
#define DLPX_EXPORT_KERNEL_SHORT(name, function, signature)                                                     \
  DLPX_EXPORT_KERNEL_NAMED_(dlpx_kernel_export_##name, dlpx_kernel_register_##name, #name, function, signature, \
                            DLPX_KERNEL_FLAG_SHORT)

#endif /* DLPX_KERNEL_H */

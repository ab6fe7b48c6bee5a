"""Typed C++ kernels (include/dlpx/kernel.hpp) through dlpx.load_library: the test cases
(c_tests/kernel_cases/typed_cases.cpp) for each parameter and result type, each exception's
mapping, the checks of typed mdspan parameters, the checks made when the library is compiled,
outputs of the caller's type and nothing lost when a kernel throws after allocating; the
example's C++ kernels (examples/kernel_library/kernels_cpp.cpp)."""

import gc
import glob
import math
import os
import sys

import numpy as np
import pytest

import c_build
import dlpx
import dlpx.cpp
from tensor_makers import make_torch

REPO = c_build.REPO
CASES = os.path.join(REPO, "c_tests", "kernel_cases", "typed_cases.cpp")
EXAMPLE = os.path.join(REPO, "examples", "kernel_library", "kernels_cpp.cpp")


def build_library(tmp_path_factory, source, name, flags=()):
    return c_build.kernel_library(tmp_path_factory, "c++", source, name, flags)


@pytest.fixture(scope="module")
def cases_path(tmp_path_factory):
    return build_library(tmp_path_factory, CASES, "typed_cases")


@pytest.fixture(scope="module")
def cases(cases_path):
    return dlpx.load_library(cases_path)


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    return dlpx.load_library(build_library(tmp_path_factory, EXAMPLE, "example_cpp"))


def to_numpy(x):
    return x.numpy() if type(x).__module__.startswith("torch") else np.from_dlpack(x)


# ---- parameters -------------------------------------------------------------------------------


def test_a_tensor_view_and_its_read_only_flag(cases):
    assert cases.view_info(np.ones((2, 3))) == (2, 6, True)
    assert cases.view_info(np.ones((2, 4))[:, ::2]) == (2, 4, False)
    assert cases.read_only(b"abc") is True
    assert cases.read_only(bytearray(b"abc")) is False
    frozen = np.ones(3)
    frozen.flags.writeable = False
    assert cases.read_only(frozen) is True and cases.read_only(np.ones(3)) is False


def test_a_tensor_arg_gives_a_writable_pointer_only_to_a_writable_tensor(cases):
    # bytes is immutable (and hashed): a write through data<uint8_t>() once changed it.
    frozen, spare = b"abcd", bytearray(b"abcd")
    assert cases.first_byte(frozen, False) == ord("a")
    with pytest.raises(ValueError, match="^dlpx: first_byte: the tensor is read-only; read it as const T$"):
        cases.first_byte(frozen, True)
    assert frozen == b"abcd"
    assert cases.first_byte(spare, True) == ord("X") and spare == bytearray(b"Xbcd")
    # A TensorView parameter has the flags as well (it lost them: bytes were written).
    assert cases.view_first_byte(frozen, False) == -ord("a")
    with pytest.raises(ValueError, match="^dlpx: view_first_byte: the tensor is read-only; read it as const T$"):
        cases.view_first_byte(frozen, True)
    assert frozen == b"abcd"
    assert cases.view_first_byte(spare, True) == ord("Y") and spare == bytearray(b"Ybcd")


def test_a_typed_mdspan_reads_any_strides_and_writes_in_place(cases):
    assert cases.sum1(np.arange(10.0)[::3]) == 0 + 3 + 6 + 9
    a = np.zeros((3, 4), np.float32)
    assert cases.fill2(a[:, ::2], 5) is None
    assert a.tolist() == [[5, 0, 5, 0]] * 3
    torch = pytest.importorskip("torch")
    t = torch.zeros(2, 3)
    cases.fill2(t.T, value=2.5)
    assert t.tolist() == [[2.5] * 3] * 2


@pytest.mark.parametrize("call,error,message", [
    (lambda c: c.sum1(np.ones(3, np.float32)), TypeError, r"^dlpx: sum1: parameter 'x': as_mdspan: expected float64, got float32$"),
    (lambda c: c.sum1(np.ones((3, 1))), ValueError, r"^dlpx: sum1: parameter 'x': as_mdspan: expected ndim 1, got 2$"),
    (lambda c: c.fill2(np.ones(2, np.float32), 1.0), ValueError, r"^dlpx: fill2: parameter 'x': as_mdspan: expected ndim 2"),
    (lambda c: c.fill2(np.ones((2, 2)), 1.0), TypeError, r"^dlpx: fill2: parameter 'x': as_mdspan: expected float32, got float64"),
    (lambda c: c.fill2(np.broadcast_to(np.ones(2, np.float32), (2, 2)), 1.0), ValueError,
     r"^dlpx: fill2: parameter 'x': the tensor is read-only"),
    (lambda c: c.sum1("x"), TypeError, r"^dlpx: sum1: parameter 'x' takes a tensor, got str$"),
])
def test_a_tensor_that_does_not_fit_a_typed_parameter_is_an_error_naming_it(cases, call, error, message):
    with pytest.raises(error, match=message):
        call(cases)


def test_a_read_only_tensor_is_refused_for_a_writable_mdspan(cases):
    frozen = np.zeros((2, 2), np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="dlpx: fill2: parameter 'x': the tensor is read-only; read it as const T"):
        cases.fill2(frozen, 1.0)
    assert frozen.tolist() == [[0, 0], [0, 0]]


def test_scalars_keywords_and_defaults(cases):
    assert cases.scalars(41) == (42, 2.0, False, 3)
    assert cases.scalars(n=1, x=2, flag=False, text="") == (2, 4.0, True, 0)
    assert cases.scalars(1, 0.5, text="héllo") == (2, 1.0, False, 6)  # UTF-8 bytes
    assert cases.echo("ab", 3.0) == 6 and cases.echo(text="", times=2) == 0
    # `std::string&&`, `std::string&` and `int64_t&&` parameters take the converted values.
    assert cases.steal("abc", "de") == 10 and cases.steal("", "x", times=3) == 3
    assert cases.narrow(-128, 65535) == 65407
    # A float parameter: a value that rounds past its range is an OverflowError (its conversion
    # is undefined in C++); one below its precision rounds; one that rounds to the largest float
    # (numpy's printed float32 max) is taken: the edge is half a last place above it.
    assert cases.echo("ab", 1e-50) == 0
    edge = (2 - 2**-24) * 2**127
    largest = float(np.finfo(np.float32).max)
    for near, rounded in ((3.4028235e38, largest), (math.nextafter(edge, 0), largest), (-math.nextafter(edge, 0), -largest)):
        assert cases.widen(near) == rounded
    assert cases.widen() == largest  # a default at the edge compiles (one past it does not)
    for far in (1e300, -1e39, 2.0**1000, edge, -edge):
        with pytest.raises(OverflowError, match="^dlpx: echo: parameter 'times': .* is out of range for a 32-bit float$"):
            cases.echo("ab", far)
    with pytest.raises(OverflowError, match="'times': 1e\\+300 is out"):
        cases.echo("ab", 1e300)
    with pytest.raises(TypeError, match="dlpx: scalars: parameter 'n' takes an int, got str"):
        cases.scalars("1")


@pytest.mark.parametrize("args,message", [
    ((128, 0), "parameter 'small': 128 does not fit in a 8-bit signed integer"),
    ((-129, 0), "parameter 'small': -129 does not fit in a 8-bit signed integer"),
    ((0, -1), "parameter 'unsigned_small': -1 does not fit in a 16-bit unsigned integer"),
    ((0, 65536), "parameter 'unsigned_small': 65536 does not fit in a 16-bit unsigned integer"),
])
def test_an_integer_a_narrower_parameter_cannot_hold_is_an_overflow_error(cases, args, message):
    with pytest.raises(OverflowError, match=f"^dlpx: narrow: {message}$"):
        cases.narrow(*args)


def test_optionals_take_none(cases):
    assert cases.maybe() == (False, -1.0, -1)
    assert cases.maybe(None, eps=None, name=None) == (False, -1.0, -1)
    assert cases.maybe(np.ones(1), eps=0.5, name="four") == (True, 0.5, 4)
    assert cases.maybe(eps=2) == (False, 2.0, -1)


def test_a_tensor_list_takes_what_star_args_took(cases):
    assert cases.count() == 0
    assert cases.count(np.ones(3)) == 3
    assert cases.count(np.ones(3), np.ones((2, 2)), b"ab", scale=2) == 18


def test_signatures_and_docs_come_from_the_export(cases):
    assert cases.scale.__text_signature__ == "(x, alpha=1.0)"
    assert cases.scale.__doc__.startswith("scale(x: tensor, alpha: float = 1.0) -> tensor\n\nalpha * x")
    assert cases.count.__text_signature__ == "(*tensors, scale=1)"


# ---- results ----------------------------------------------------------------------------------


FRAMEWORKS = {
    "numpy": (lambda v, d: np.asarray(v, dtype=d), lambda out: type(out) is np.ndarray),
    "dlpx": (lambda v, d: dlpx.from_dlpack(np.asarray(v, dtype=d)), lambda out: type(out) is dlpx.Tensor),
    "torch": (make_torch, lambda out: type(out).__module__ == "torch" and type(out).__name__ == "Tensor"),
}


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_outputs_come_back_as_the_callers_type(cases, framework):
    make, is_callers_type = FRAMEWORKS[framework]
    out = cases.scale(make(np.arange(4), "float64"), 3)
    assert is_callers_type(out) and to_numpy(out).tolist() == [0.0, 3.0, 6.0, 9.0]
    out = cases.negate(make(np.arange(3), "float32"))  # through dlpx::Call::current()
    assert is_callers_type(out) and to_numpy(out).tolist() == [0.0, -1.0, -2.0]
    plus, twice, n = cases.pair(make(np.arange(3), "float32"))
    assert is_callers_type(plus) and is_callers_type(twice) and n == 3
    assert to_numpy(plus).tolist() == [1.0, 2.0, 3.0] and to_numpy(twice).tolist() == [0.0, 2.0, 4.0]


def test_void_is_none_and_scalars_are_python_numbers(cases):
    assert cases.nothing() is None
    assert type(cases.sum1(np.ones(2))) is float
    assert type(cases.read_only(np.ones(2))) is bool
    assert type(cases.count(np.ones(2))) is int


def test_an_empty_output_tensor_is_a_value_error(cases):
    with pytest.raises(ValueError, match="^dlpx: empty_output: returned an empty dlpx::OutputTensor$"):
        cases.empty_output()


def test_an_output_the_allocator_cannot_give_is_a_memory_error(cases):
    with pytest.raises(MemoryError, match="^dlpx: huge: output:"):
        cases.huge(np.ones(1, np.float32))


# ---- exceptions -------------------------------------------------------------------------------


@pytest.mark.parametrize("what,error,message", [
    ("dlpx:ValueError", ValueError, "it failed"),
    ("dlpx:TypeError", TypeError, "it failed"),
    ("dlpx:KeyError", KeyError, "it failed"),
    ("dlpx:NotImplementedError", NotImplementedError, "it failed"),
    ("dlpx:BufferError", BufferError, "it failed"),
    ("dlpx:LinAlgError", RuntimeError, "LinAlgError: it failed"),
    ("invalid_argument", ValueError, "it failed"),
    ("out_of_range", IndexError, "it failed"),
    ("overflow_error", OverflowError, "it failed"),
    ("bad_alloc", MemoryError, "std::bad_alloc"),
    ("runtime_error", RuntimeError, "it failed"),
    ("logic_error", RuntimeError, "it failed"),
    ("int", RuntimeError, "a C++ exception not derived from std::exception"),
    ("struct", RuntimeError, "a C++ exception not derived from std::exception"),
])
def test_a_cpp_exception_is_raised_as_the_python_exception_its_type_names(cases, what, error, message):
    with pytest.raises(error) as info:
        cases.throw_(what, "it failed")
    assert type(info.value) is error
    assert info.value.args == (f"dlpx: throw_: {message}",)


def test_a_cpp_kernel_exported_with_the_c_macro_raises_what_it_throws(cases):
    # kernel.h's export catches in C++ as kernel.hpp's does: the process once ended (std::terminate).
    with pytest.raises(IndexError, match="^dlpx: plain_throw: .*"):
        cases.plain_throw(0)
    with pytest.raises(RuntimeError, match="^dlpx: plain_throw: Call::current: no typed dlpx kernel runs on this thread$"):
        cases.plain_throw(1)
    with pytest.raises(KeyError, match="dlpx: plain_throw: its own kind"):
        cases.plain_throw(2)


def test_a_c_macro_kernel_called_from_a_typed_one_has_no_current_call(cases, cases_path):
    # Through dlpx_kernel_call inside a typed kernel: Call::current() gave the caller's call.
    assert cases.nested_current(cases_path) is True


def test_an_exception_after_allocating_is_raised_and_the_outputs_deleted(cases):
    with pytest.raises(RuntimeError, match="^dlpx: allocate_then_throw: failed after allocating$"):
        cases.allocate_then_throw(np.ones(3))


# ---- checked when the library is compiled -----------------------------------------------------


BAD_EXPORTS = r"""
#include <dlpx/kernel.hpp>
static void two(dlpx::TensorView, double) {}
DLPX_EXPORT_TYPED_KERNEL(arity, two, "arity(x) -> None: one parameter, two in C++.")
static void takes_int(int64_t) {}
DLPX_EXPORT_TYPED_KERNEL(kind, takes_int, "kind(x) -> None: a tensor, an int in C++.")
static void takes_double(double) {}
DLPX_EXPORT_TYPED_KERNEL(optional, takes_double, "optional(x: float | None = None) -> None: None needs std::optional.")
DLPX_EXPORT_TYPED_KERNEL(named, takes_double, "other(x: float) -> None: another name.")
static dlpx::ManagedTensor owned(double) { return {}; }
DLPX_EXPORT_TYPED_KERNEL(result, owned, "result(x: float) -> tensor: a ManagedTensor is not the call's.")
static std::tuple<int64_t> one(double) { return {1}; }
DLPX_EXPORT_TYPED_KERNEL(one_tuple, one, "one_tuple(x: float) -> int: one result comes back as itself, not (1,).")
static std::tuple<int64_t, std::tuple<int64_t, int64_t>> nested(double) { return {1, {2, 3}}; }
DLPX_EXPORT_TYPED_KERNEL(nested_tuple, nested, "nested_tuple(x: float): results are one flat tuple.")
static void wide(unsigned __int128) {}
DLPX_EXPORT_TYPED_KERNEL(wide_int, wide, "wide_int(n: int) -> None: an int argument is int64.")
static void ints(dlpx::TensorList) {}
DLPX_EXPORT_TYPED_KERNEL(star_ints, ints, "star_ints(*xs: int) -> None: a TensorList takes tensors.")
static const char letter(double) { return 'a'; }
DLPX_EXPORT_TYPED_KERNEL(const_char, letter, "const_char(x: float) -> int: a const char is no int (it was a bool).")
static dlpx::OutputTensor output(dlpx::Call& call) { return call.allocate({1}, dlpx::dtype_of<float>()); }
DLPX_EXPORT_TYPED_KERNEL(says_int, output, "says_int() -> int: the stub would say int of a tensor.")
static void nothing() {}
DLPX_EXPORT_TYPED_KERNEL(says_float, nothing, "says_float() -> float: None, not a float.")
static std::tuple<int64_t, double> pair() { return {1, 2.0}; }
DLPX_EXPORT_TYPED_KERNEL(says_three, pair, "says_three() -> tuple[int, float, int]: two, not three.")
DLPX_EXPORT_TYPED_KERNEL(says_ints, pair, "says_ints() -> tuple[int, ...]: the float is no int.")
DLPX_EXPORT_TYPED_KERNEL(says_tensor, pair, "says_tensor() -> tensor: a tuple.")
DLPX_EXPORT_TYPED_KERNEL(says_spaced, pair, "says_spaced() -> tuple [int, int]: spaced, as Python allows; a float.")
DLPX_EXPORT_TYPED_KERNEL(says_nested, pair, "says_nested() -> tuple[int, tuple[int, int]]: a float, not a tuple.")
DLPX_EXPORT_TYPED_KERNEL(says_union, pair, "says_union() -> int | None: a tuple, neither.")
DLPX_EXPORT_TYPED_KERNEL(says_list, pair, "says_list() -> list[int]: no kernel returns a list.")
static int64_t count() { return 1; }
DLPX_EXPORT_TYPED_KERNEL(says_tuple, count, "says_tuple() -> tuple: an int.")
static int64_t byte(uint8_t n) { return n; }
DLPX_EXPORT_TYPED_KERNEL(byte_default, byte, "byte_default(n: int = 256) -> int: every call relying on it would fail.")
static double single(float x) { return x; }
DLPX_EXPORT_TYPED_KERNEL(float_default, single, "float_default(x: float = 1e300) -> float: past a float's range.")
static int64_t maybe_byte(std::optional<uint8_t> n) { return n.value_or(0); }
DLPX_EXPORT_TYPED_KERNEL(optional_byte_default, maybe_byte, "optional_byte_default(n: int | None = 300) -> int: as byte_default.")
static double maybe_single(std::optional<float> x) { return x.value_or(0.0f); }
DLPX_EXPORT_TYPED_KERNEL(optional_float_default, maybe_single, "optional_float_default(x: float | None = 1e300) -> float: as float_default.")
static dlpx::OutputTensor chars(dlpx::Call& call) { return call.allocate(std::string_view("ab"), dlpx::dtype_of<float>()); }
DLPX_EXPORT_TYPED_KERNEL(char_shape, chars, "char_shape() -> tensor: a string is no shape (it was (97, 98)).")
"""


def test_a_function_that_does_not_fit_its_signature_does_not_compile(tmp_path):
    source = tmp_path / "bad.cpp"
    source.write_text(BAD_EXPORTS)
    try:
        done = c_build.build("c++", [str(source)], str(tmp_path / "bad.o"), flags=["-c", "-fPIC"])
    except c_build.NoCompiler as missing:
        c_build.skip_or_fail(str(missing))
    assert done.returncode != 0
    for message in [
        "DLPX_EXPORT_TYPED_KERNEL(arity): two takes a different number of parameters (after dlpx::Call&) than the signature lists",
        "DLPX_EXPORT_TYPED_KERNEL(kind): a parameter's C++ type does not take its signature type",
        "DLPX_EXPORT_TYPED_KERNEL(optional): a parameter's C++ type does not take its signature type",
        "DLPX_EXPORT_TYPED_KERNEL(named): the signature must begin with named(",
        "DLPX_EXPORT_TYPED_KERNEL(result): owned must return void, dlpx::OutputTensor",
        "DLPX_EXPORT_TYPED_KERNEL(one_tuple): one must return void",
        "DLPX_EXPORT_TYPED_KERNEL(nested_tuple): nested must return void",
        "DLPX_EXPORT_TYPED_KERNEL(wide_int): a parameter's C++ type does not take its signature type",
        "DLPX_EXPORT_TYPED_KERNEL(star_ints): a parameter's C++ type does not take its signature type",
        "DLPX_EXPORT_TYPED_KERNEL(const_char): letter must return void",
        *[f"DLPX_EXPORT_TYPED_KERNEL({kernel}): the signature's return annotation is not what {function} returns"
          for kernel, function in [("says_int", "output"), ("says_float", "nothing"), ("says_three", "pair"),
                                   ("says_ints", "pair"), ("says_tensor", "pair"), ("says_spaced", "pair"),
                                   ("says_nested", "pair"), ("says_union", "pair"), ("says_list", "pair"),
                                   ("says_tuple", "count")]],
        "dlpx::Call::allocate(std::string_view, DLDataType)",  # no overload takes it
        "DLPX_EXPORT_TYPED_KERNEL(byte_default): a parameter's C++ type does not take its signature type",
        "DLPX_EXPORT_TYPED_KERNEL(float_default): a parameter's C++ type does not take its signature type",
        "DLPX_EXPORT_TYPED_KERNEL(optional_byte_default): a parameter's C++ type does not take its signature type",
        "DLPX_EXPORT_TYPED_KERNEL(optional_float_default): a parameter's C++ type does not take its signature type",
    ]:
        assert message in done.stderr, f"{message!r} not in:\n{done.stderr}"


# ---- nothing lost -----------------------------------------------------------------------------


def _rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _calls(cases, a, wrong_rank):
    """Every path once: outputs returned, outputs allocated before a throw, every exception."""
    cases.scale(a, 2.0)
    for call in (lambda: cases.allocate_then_throw(a), lambda: cases.huge(a), lambda: cases.sum1(wrong_rank),
                 lambda: cases.throw_("bad_alloc", ""), lambda: cases.throw_("runtime_error", "x" * 100),
                 lambda: cases.throw_("dlpx:KeyError", "k"), lambda: cases.throw_("int", ""),
                 lambda: cases.narrow(1000, 0), cases.empty_output):
        try:
            call()
        except (ValueError, RuntimeError, MemoryError, KeyError, OverflowError):
            pass
        else:
            raise AssertionError("a bad call succeeded")


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_references_and_memory_are_flat_over_many_calls(cases, framework):
    make, _ = FRAMEWORKS[framework]
    # A megabyte: an output of allocate_then_throw leaked per call would show in the RSS at once.
    a = make(np.arange(1 << 17), "float64")
    wrong_rank = make(np.ones((2, 2)), "float64")
    for _ in range(50):
        _calls(cases, a, wrong_rank)
    gc.collect()
    refs, wrong_refs = sys.getrefcount(a), sys.getrefcount(wrong_rank)
    rss = _rss_kib()
    for _ in range(400):
        _calls(cases, a, wrong_rank)
    gc.collect()
    assert sys.getrefcount(a) == refs and sys.getrefcount(wrong_rank) == wrong_refs
    grown = _rss_kib() - rss
    assert grown < 16 * 1024, f"RSS grew by {grown} KiB over 400 rounds"


def test_a_cpp_kernel_library_needs_nothing_of_python(cases_path):
    python = [fields[-1] for fields in c_build.dynamic_symbols(cases_path) if fields[-1].lstrip("_").startswith("Py")]
    assert python == [], f"Python symbols in a C++ kernel library: {python}"


# ---- the example and other mdspans -----------------------------------------------------------


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_the_example_scales_any_strides_in_the_callers_type(example, framework):
    make, is_callers_type = FRAMEWORKS[framework]
    for dtype in ("float32", "float64"):
        x = make(np.arange(12).reshape(3, 4), dtype)
        out = example.scale(x.T if framework != "dlpx" else x, alpha=0.5)
        want = np.arange(12).reshape(3, 4).astype(dtype) * 0.5
        assert is_callers_type(out)
        np.testing.assert_array_equal(to_numpy(out), want.T if framework != "dlpx" else want)
    with pytest.raises(TypeError, match="^dlpx: scale: x must be float32 or float64, got int32$"):
        example.scale(np.ones(2, np.int32))


def test_the_example_axpy_checks_its_mdspans(example):
    x = np.arange(6, dtype=np.float32)[::2]
    np.testing.assert_array_equal(example.axpy(2, x, np.ones(3, np.float32)), 2 * x + 1)
    with pytest.raises(TypeError, match="^dlpx: axpy: parameter 'y': as_mdspan: expected float32, got float64$"):
        example.axpy(1.0, x, np.ones(3))
    with pytest.raises(ValueError, match="^dlpx: axpy: x and y differ in length: 3 and 2$"):
        example.axpy(1.0, x, np.ones(2, np.float32))


CUDA_STD = r"""
#include <cuda/std/mdspan>
#define DLPX_MDSPAN_NAMESPACE cuda::std
#include <dlpx/kernel.hpp>
static double sum2(dlpx::mdspan_t<const double, 2> x, std::optional<dlpx::mdspan_t<float, 1>> y) {
  double s = 0;
  for (int64_t i = 0; i < x.extent(0); ++i)
    for (int64_t j = 0; j < x.extent(1); ++j) s += x(i, j);
  if (y) (*y)(0) = static_cast<float>(s);
  return s;
}
DLPX_EXPORT_TYPED_KERNEL(sum2, sum2, "sum2(x, y=None) -> float: the sum, written to y[0] too.")
"""


def test_a_real_mdspan_parameter_cuda_std(tmp_path_factory, tmp_path):
    """dlpx::mdspan_t as a standard mdspan (cuda::std's, from the CUDA wheel's CCCL): GCC 12 has
    no std::mdspan, so this is where the mdspan specialisation is compiled and run."""
    found = [d for p in sys.path if p for d in glob.glob(os.path.join(p, "nvidia", "cu1*", "include"))
             if os.path.exists(os.path.join(d, "cccl", "cuda", "std", "mdspan"))]
    if not found:
        pytest.skip("no CCCL (cuda/std/mdspan) in the CUDA wheels here")
    source = tmp_path / "cuda_std.cpp"
    source.write_text(CUDA_STD)
    lib = dlpx.load_library(build_library(tmp_path_factory, str(source), "cuda_std",
                                          flags=["-isystem", os.path.join(found[0], "cccl"), "-isystem", found[0]]))
    y = np.zeros(1, np.float32)
    assert lib.sum2(np.arange(6.0).reshape(2, 3).T, y) == 15.0 and y.tolist() == [15.0]
    with pytest.raises(ValueError, match="^dlpx: sum2: parameter 'x': as_mdspan: expected ndim 2, got 1$"):
        lib.sum2(np.ones(3))


def test_a_space_kernel_hpp_reads_otherwise_is_refused_at_load(tmp_path, monkeypatch):
    # "k(a,\u00a0*xs)": kernel.hpp read two tensors, the loader a tensor and *xs; the function of
    # two tensors compiled and a third argument was dropped.
    monkeypatch.setenv("DLPX_CACHE_DIR", str(tmp_path))
    source = ("static int64_t two(dlpx::TensorView, dlpx::TensorView) { return 2; }\n"
              'DLPX_EXPORT_TYPED_KERNEL(k, two, "k(a,\\u00a0*xs) -> int: a no-break space.")\n')
    try:
        path = dlpx.cpp.build_inline("nbsp", cpp_sources=source)
    except dlpx.cpp.BuildError as err:
        pytest.skip(f"no C++ compiler: {err}")
    with pytest.raises(ImportError, match=r"kernel 'k': signature: U\+00A0 is a space kernel.hpp does not read as one"):
        dlpx.load_library(path)


def test_a_typed_kernel_named_as_a_macro_is_exported_under_its_name(tmp_path, monkeypatch):
    # Passed on to the next macro, a name that is a macro was expanded: `unix` (GNU C++'s 1)
    # failed to compile ("the signature must begin with 1("), through
    # DLPX_EXPORT_TYPED_KERNEL_WITH_FLAGS it was exported as '1', and `unix` and `linux` (both 1)
    # pasted the same names.
    monkeypatch.setenv("DLPX_CACHE_DIR", str(tmp_path))
    source = ("#define twice 2\n"
              "static int64_t seven() { return 7; }\n"
              'DLPX_EXPORT_TYPED_KERNEL(twice, seven, "twice() -> int: a name that is a macro.")\n'
              'DLPX_EXPORT_TYPED_KERNEL_SHORT(unix, seven, "unix() -> int: GNU C++ defines it.")\n'
              'DLPX_EXPORT_TYPED_KERNEL_WITH_FLAGS(linux, seven, "linux() -> int: with flags.", 0)\n')
    try:
        path = dlpx.cpp.build_inline("macro_names", cpp_sources=source, extra_cflags=["-std=gnu++17"])
    except dlpx.cpp.BuildError as err:
        if "must begin with" in str(err) or "error:" in str(err):
            raise
        pytest.skip(f"no C++ compiler: {err}")
    lib = dlpx.load_library(path)
    assert lib.twice() == 7 and lib.unix() == 7 and lib.linux() == 7

"""Kernel libraries (include/dlpx/kernel.h) through dlpx.load_library: the example library
(examples/kernel_library: add and nop) over every producer dlpx reads, outputs of the caller's
type; the test cases (c_tests/kernel_cases, which test_kernel_library.c calls from C) for
binding, scalars, results, every error and the GIL; nothing lost over many calls."""

import builtins
import gc
import inspect
import os
import pickle
import pydoc
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import c_build
import dlpx
from dlpx.conform.abi import FLAG_IS_SUBBYTE_TYPE_PADDED, FLAG_READ_ONLY
from numpy_producers import Managed, Producer
from tensor_makers import make_jax, make_torch, make_tvm_ffi

REPO = c_build.REPO
CASES = os.path.join(REPO, "c_tests", "kernel_cases")


def build_library(tmp_path_factory, source, name):
    """A kernel library built as a user builds one (hidden visibility, linked to libdlpx)."""
    return c_build.kernel_library(tmp_path_factory, "c", source, name)


@pytest.fixture(scope="module")
def example_path(tmp_path_factory):
    return build_library(tmp_path_factory, os.path.join(REPO, "examples", "kernel_library", "kernels.c"),
                         "dlpx_example_kernels")


@pytest.fixture(scope="module")
def lib(example_path):
    return dlpx.load_library(example_path)


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    return dlpx.load_library(build_library(tmp_path_factory, os.path.join(CASES, "kernel_cases.c"), "kernel_cases"))


# ---- the example: add and nop over every producer ------------------------------------------


def make_array_api_strict(values, dtype):
    xp = pytest.importorskip("array_api_strict")
    return xp.asarray(np.asarray(values, dtype=dtype))


def type_name(x):
    return f"{type(x).__module__.split('.')[0]}.{type(x).__name__}"


def expected_jax(out):
    import jax

    return isinstance(out, jax.Array)


FRAMEWORKS = {
    # framework: (constructor, whether the output is that framework's type)
    "numpy": (lambda v, d: np.asarray(v, dtype=d), lambda out: type(out) is np.ndarray),
    "dlpx": (lambda v, d: dlpx.from_dlpack(np.asarray(v, dtype=d)), lambda out: type(out) is dlpx.Tensor),
    "torch": (make_torch, lambda out: type_name(out) == "torch.Tensor"),
    "jax": (make_jax, expected_jax),
    "tvm_ffi": (make_tvm_ffi, lambda out: type_name(out) == "tvm_ffi.Tensor"),
    "array_api_strict": (make_array_api_strict, lambda out: type_name(out) == "array_api_strict.Array"),
    # Buffers (the buffer protocol row) have no framework of their own: dlpx.Tensor.
    "memoryview": (lambda v, d: memoryview(np.asarray(v, dtype=d)), lambda out: type(out) is dlpx.Tensor),
}


def as_numpy(x):
    return np.asarray(x.numpy() if type_name(x) == "torch.Tensor" else np.from_dlpack(x))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_add_is_correct_and_returns_the_callers_type(lib, framework, dtype):
    make, is_callers_type = FRAMEWORKS[framework]
    a_values = np.arange(12).reshape(3, 4)
    b_values = np.arange(12).reshape(3, 4) * 10
    out = lib.add(make(a_values, dtype), make(b_values, dtype))
    assert is_callers_type(out), f"{framework} in, {type_name(out)} out"
    np.testing.assert_array_equal(as_numpy(out), (a_values + b_values).astype(dtype))


def test_the_first_tensor_argument_decides_the_output_type(lib):
    torch = pytest.importorskip("torch")
    a, t = np.ones(3, np.float32), torch.ones(3)
    assert type(lib.add(a, t)) is np.ndarray
    assert type(lib.add(t, a)) is torch.Tensor
    assert type(lib.add(dlpx.from_dlpack(a), t)) is dlpx.Tensor


def test_add_reads_any_strides(lib):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(lib.add(a[:, ::-1], b.T), a[:, ::-1] + b.T)
    torch = pytest.importorskip("torch")
    t = torch.arange(24, dtype=torch.float64).reshape(4, 6)[::2, 1::2]
    np.testing.assert_array_equal(lib.add(t, t).numpy(), (t + t).numpy())


def test_add_of_zero_size_and_zero_d(lib):
    assert lib.add(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32)).shape == (0, 3)
    assert lib.add(np.full((), 2.0), np.ones(())).item() == 3.0


def test_add_takes_buffers_and_array_modules(lib):
    import array

    out = lib.add(array.array("d", [1.0, 2.0]), array.array("d", [3.0, 4.0]))
    assert type(out) is dlpx.Tensor and np.from_dlpack(out).tolist() == [4.0, 6.0]


def test_add_takes_a_dlpack_producer_and_releases_its_tensor(lib):
    a, b = Producer(np.arange(4, dtype=np.float32)), Producer(np.ones(4, np.float32))
    out = lib.add(a, b)
    assert type(out) is dlpx.Tensor and np.from_dlpack(out).tolist() == [1.0, 2.0, 3.0, 4.0]
    assert [m.calls for m in a.made + b.made] == [1, 1], "each view is released once"


@pytest.mark.parametrize("framework", ["numpy", "dlpx", "torch", "tvm_ffi", "jax", "array_api_strict", "memoryview"])
@pytest.mark.parametrize("n", [0, 1, 3, 8])
def test_nop_views_any_number_of_tensors(lib, framework, n):
    make, _ = FRAMEWORKS[framework]
    assert lib.nop(*[make(np.arange(4), "float32") for _ in range(n)]) is None


def test_nop_takes_read_only_bytes(lib, cases):
    assert lib.nop(b"abc", bytearray(b"de")) is None
    assert cases.flags(b"abc") & FLAG_READ_ONLY
    assert not cases.flags(bytearray(b"abc")) & FLAG_READ_ONLY
    read_only = np.ones(3)
    read_only.flags.writeable = False
    assert cases.flags(read_only) & FLAG_READ_ONLY


def test_a_padded_sub_byte_tensor_says_so_to_the_kernel(cases):
    # fp4 stored one element per byte: a kernel reading it packed would read the wrong values.
    array = (np.arange(8) % 16).astype(np.uint8)
    padded = dlpx.from_dlpack(Managed(array, dtype=(17, 4, 1), flags=FLAG_IS_SUBBYTE_TYPE_PADDED).capsule())
    assert cases.flags(padded) == FLAG_IS_SUBBYTE_TYPE_PADDED
    assert cases.flags(Managed(array, dtype=(17, 4, 1), flags=FLAG_IS_SUBBYTE_TYPE_PADDED).capsule()) == (
        FLAG_IS_SUBBYTE_TYPE_PADDED)
    assert cases.flags(array) == 0


def test_the_example_needs_nothing_of_python(example_path):
    symbols = subprocess.run(["nm", "-D", example_path], capture_output=True, text=True)
    if symbols.returncode != 0:
        c_build.skip_or_fail(f"nm -D failed: {symbols.stderr}")
    python = [line for line in symbols.stdout.splitlines() if line.split()[-1].lstrip("_").startswith("Py")]
    assert python == [], f"Python symbols in a kernel library: {python}"
    exported = [line.split()[-1] for line in symbols.stdout.splitlines() if line.split()[-2] in "TW"]
    assert exported == ["dlpx_kernel_library"], "a kernel library exports its anchor alone"


def test_the_example_builds_with_find_package(tmp_path_factory):
    from examples_build import configure_and_build

    build = configure_and_build("kernel_library", tmp_path_factory)
    path = os.path.join(build, "libdlpx_example_kernels.so")
    assert dlpx.load_library(path).add(np.ones(2), np.ones(2)).tolist() == [2.0, 2.0]


# ---- the module and its functions ---------------------------------------------------------


def test_a_kernel_is_a_builtin_function_with_its_signature_and_doc(lib, example_path):
    assert lib.__name__ == "dlpx_example_kernels" and lib.__file__ == example_path
    assert {"add", "nop"} <= set(dir(lib))
    assert lib.add.__name__ == "add" and lib.add.__module__ == "dlpx_example_kernels"
    assert lib.add.__text_signature__ == "(a, b)"
    assert str(inspect.signature(lib.add)) == "(a, b)"
    assert lib.add.__doc__.startswith("add(a: tensor, b: tensor) -> tensor\n\na + b elementwise")
    assert str(inspect.signature(lib.nop)) == "(*tensors)"
    assert type(lib.add).__name__ == "builtin_function_or_method"


def test_a_kernel_reads_as_a_function_not_a_method_of_some_object(lib):
    # Python calls a builtin a function when its `self` is a module: repr, qualname, help.
    assert repr(lib.add) == "<built-in function add>"
    assert lib.add.__qualname__ == "add"
    assert repr(lib.add.__self__) == "<module 'dlpx_example_kernels'>"
    page = pydoc.render_doc(lib.add, renderer=pydoc.plaintext)
    assert page.startswith("Python Library Documentation: built-in function add") and "method of" not in page
    # Each kernel's own: the call finds its kernel through it.
    assert lib.add.__self__ is not lib.nop.__self__
    with pytest.raises(pickle.PicklingError, match="dlpx_example_kernels"):
        pickle.dumps(lib.add)


def test_keywords_and_defaults_bind_as_in_python(cases):
    assert cases.scalars(41) == (42, 2.0, False, 3)
    assert cases.scalars(n=1, x=2, flag=False, text="") == (2, 4.0, True, 0)
    assert cases.scalars(1, 0.5, text="hello") == (2, 1.0, False, 5)
    assert str(inspect.signature(cases.scalars)) == "(n, x=1.0, *, flag=True, text='abc')"
    a = np.ones(2)
    assert cases.describe(a) == (3, 1, 0, 0)
    assert cases.describe(a, a, scale=2) == (3, 1, 1, 3)
    assert cases.describe(a, None, scale=None) == (3, 1, 0, 0)


def test_loading_a_library_twice_gives_the_same_module(example_path, lib, tmp_path):
    assert dlpx.load_library(example_path) is lib
    link = tmp_path / "another_name.so"
    link.symlink_to(example_path)
    assert dlpx.load_library(link) is lib, "the same file by another path"
    assert dlpx.load_library(os.fsencode(example_path)) is lib, "bytes, as os functions take"
    with pytest.raises(OSError, match="dlpx opens libraries by UTF-8 names"):
        dlpx.load_library(os.fsencode(str(tmp_path)) + b"/lib\xff.so")


def test_a_module_s_file_is_the_absolute_path_it_was_first_loaded_by(example_path, tmp_path, monkeypatch):
    shutil.copy(example_path, tmp_path / "relative_kernels.so")
    monkeypatch.chdir(tmp_path)
    module = dlpx.load_library("./relative_kernels.so")
    assert module.__file__ == str(tmp_path / "relative_kernels.so")
    # A file's name with a trailing slash is no path to it, relative as absolute.
    for name in ("relative_kernels.so/", "./relative_kernels.so//", "relative_kernels.so/.",
                 str(tmp_path / "relative_kernels.so") + "/"):
        with pytest.raises(OSError, match="Not a directory"):
            dlpx.load_library(name)


def test_a_bare_name_is_looked_up_as_dlopen_does_and_the_error_says_so(example_path, lib, tmp_path, monkeypatch):
    # ld.so read LD_LIBRARY_PATH at start: an empty entry there (a stray ':') is the current
    # directory, where this test puts the library.
    if "" in os.environ.get("LD_LIBRARY_PATH", "x").split(":") or "." in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        pytest.skip("LD_LIBRARY_PATH names the current directory")
    shutil.copy(example_path, tmp_path / "copied_kernels.so")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OSError, match=r"library search path: \./copied_kernels\.so is the one here"):
        dlpx.load_library("copied_kernels.so")
    assert dlpx.load_library("./copied_kernels.so").add(np.ones(2), np.ones(2)).tolist() == [2.0, 2.0]
    with pytest.raises(OSError, match=r"cannot load nowhere\.so: [^(]*$"):
        dlpx.load_library("nowhere.so")


def test_several_results_come_back_as_a_tuple_in_the_callers_type(cases):
    torch = pytest.importorskip("torch")
    plus, twice = cases.pair(torch.arange(4, dtype=torch.float32)[::2])
    assert type(plus) is torch.Tensor and plus.tolist() == [1.0, 3.0] and twice.tolist() == [0.0, 4.0]
    plus, twice = cases.pair(np.arange(3, dtype=np.float32))
    assert type(plus) is np.ndarray and twice.tolist() == [0.0, 2.0, 4.0]
    assert cases.allocate_and_drop(np.ones(3)) is None
    assert cases.stream(np.ones(3)) is True


# ---- bad input ---------------------------------------------------------------------------------


def test_a_path_that_is_no_kernel_library_is_refused_naming_it(tmp_path_factory, tmp_path):
    missing = str(tmp_path / "missing.so")
    with pytest.raises(OSError, match=f"dlpx: load_library: cannot load {missing}"):
        dlpx.load_library(missing)
    text = tmp_path / "text.so"
    text.write_text("not a library")
    with pytest.raises(OSError, match="cannot load"):
        dlpx.load_library(text)
    with pytest.raises(ImportError, match=f"{dlpx.library_path()}: holds no dlpx kernels"):
        dlpx.load_library(dlpx.library_path())
    empty = build_library(tmp_path_factory, os.path.join(CASES, "no_kernels.c"), "no_kernels")
    with pytest.raises(ImportError, match="includes <dlpx/kernel.h> but exports none"):
        dlpx.load_library(empty)
    # dlopen("") gives the program's own global scope, no library file.
    with pytest.raises(OSError, match="^dlpx: load_library: cannot load '': an empty path names no library"):
        dlpx.load_library("")


def test_an_anchor_that_is_data_or_a_dependency_s_is_refused(example_path, tmp_path):
    # dlsym finds a data symbol of the anchor's name too (called, it crashed), and searches the
    # library's dependencies (a library without kernels that links a kernel library passed for it).
    data = tmp_path / "data_anchor.c"
    data.write_text('__attribute__((visibility("default"))) const int dlpx_kernel_library[4] = {2, 0, 0, 0};\n')
    plain = tmp_path / "plain.c"
    plain.write_text("int plain(void) { return 1; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", str(data), "-o", str(tmp_path / "data_anchor.so")], check=True)
    subprocess.run(["gcc", "-shared", "-fPIC", str(plain), "-o", str(tmp_path / "plain.so"), "-Wl,--no-as-needed",
                    example_path, f"-Wl,-rpath,{os.path.dirname(example_path)}"], check=True)
    with pytest.raises(ImportError, match="data_anchor.so: its dlpx_kernel_library is no function"):
        dlpx.load_library(tmp_path / "data_anchor.so")
    with pytest.raises(ImportError, match=r"plain.so: holds no dlpx kernels of its own \(the dlpx_kernel_library "
                                          r"dlsym found is .*dlpx_example_kernels.*'s, a library it links\)"):
        dlpx.load_library(tmp_path / "plain.so")


HAND_WRITTEN_TABLE = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "dlpx/dlpx.h"
struct export_ { uint32_t abi_version, flags; const char *name, *signature; int (*function)(DlpxCall *);
                 const struct export_ *next; };
struct record { uint32_t abi_version, reserved; const struct export_ *first; };
static int seven(DlpxCall *call) { return dlpx_call_return_int(call, 7); }
"""


def test_a_list_of_exports_that_loops_is_refused_and_a_long_one_loads(tmp_path):
    # The list is checked with sets: a loop is found at its first repeat (it took a 100 000-step
    # count, then a quadratic name check, ~30 s, and a real list that long was refused).
    looped = HAND_WRITTEN_TABLE + """
static struct export_ e = {2, 0, "k", "k() -> int", seven, &e};
static const struct record r = {2, 0, &e};
__attribute__((visibility("default"))) const struct record *dlpx_kernel_library(void) { return &r; }
"""
    many = HAND_WRITTEN_TABLE + """
static struct record r = {2, 0, NULL};
__attribute__((constructor)) static void make(void) {
  for (int i = 0; i < 100001; ++i) {
    struct export_ *e = malloc(sizeof *e);
    char *name = malloc(16), *signature = malloc(32);
    snprintf(name, 16, "k%d", i);
    snprintf(signature, 32, "k%d() -> int", i);
    *e = (struct export_){2, 0, name, signature, seven, r.first};
    r.first = e;
  }
}
__attribute__((visibility("default"))) const struct record *dlpx_kernel_library(void) { return &r; }
"""
    for name, text in (("looped", looped), ("many", many)):
        (tmp_path / f"{name}.c").write_text(text)
        subprocess.run(["gcc", "-shared", "-fPIC", f"-I{REPO}/include", str(tmp_path / f"{name}.c"), "-o",
                        str(tmp_path / f"{name}.so"), dlpx.library_path()], check=True)
    with pytest.raises(ImportError, match=r"looped.so: its list of kernels does not end \(an export links back"):
        dlpx.load_library(tmp_path / "looped.so")
    started = time.perf_counter()
    module = dlpx.load_library(tmp_path / "many.so")
    assert (module.k0(), module.k100000()) == (7, 7)
    assert time.perf_counter() - started < 10


def test_a_kernel_name_is_copied_at_load(tmp_path):
    # dlpx kept the library's own name: one the library then changed became dlpx's (a str that
    # is no UTF-8, undefined behaviour), one it freed a dangling pointer.
    text = HAND_WRITTEN_TABLE + """
static char name[] = "named";
static int fail(DlpxCall *call) { return dlpx_call_error(call, "ValueError", "boom"); }
static int rename_(DlpxCall *call) { (void)call; name[0] = (char)0xff; name[1] = (char)0xfe; return 0; }
static const struct export_ second = {2, 0, "rename_", "rename_()", rename_, NULL};
static const struct export_ first = {2, 0, name, "named()", fail, &second};
static const struct record r = {2, 0, &first};
__attribute__((visibility("default"))) const struct record *dlpx_kernel_library(void) { return &r; }
"""
    (tmp_path / "renaming.c").write_text(text)
    subprocess.run(["gcc", "-shared", "-fPIC", f"-I{REPO}/include", str(tmp_path / "renaming.c"), "-o",
                    str(tmp_path / "renaming.so"), dlpx.library_path()], check=True)
    module = dlpx.load_library(tmp_path / "renaming.so")
    module.rename_()
    with pytest.raises(ValueError, match="^dlpx: named: boom$"):
        module.named()


@pytest.mark.parametrize("signature,message", [
    ("__file__(a) -> None", "'__file__' is a module attribute's name"),
    ("__getattr__(name: str) -> None", "'__getattr__' is a module attribute's name"),
    ("accent(s='h\u00e9llo') -> None", r"is not a plain string literal \(printable ASCII"),
    ("octal(n=01) -> None", "default 01 is no Python int"),
])
def test_a_name_or_default_python_cannot_spell_is_refused_at_load(signature, message, tmp_path, monkeypatch):
    # Each would overwrite the module's own attribute, or break inspect.signature.
    from dlpx import cpp

    monkeypatch.setenv("DLPX_CACHE_DIR", str(tmp_path))
    name = signature.split("(")[0]
    source = (f"static int k(DlpxCall *call) {{ (void)call; return 0; }}\n"
              f"DLPX_EXPORT_KERNEL({name}, k, \"{signature.replace(chr(34), chr(92) + chr(34))}\")\n")
    path = cpp.build_inline("refused", c_sources=source)
    with pytest.raises(ImportError, match=message):
        dlpx.load_library(path)


def test_a_newer_kernel_abi_is_refused_naming_both_versions(tmp_path_factory):
    newer = build_library(tmp_path_factory, os.path.join(CASES, "newer_abi.c"), "newer_abi")
    with pytest.raises(ImportError, match="built for dlpx kernel ABI 3; this libdlpx .* reads kernel ABI 2 and older"):
        dlpx.load_library(newer)


def stream_outcome(kernel, x, device):
    try:
        return "stream", kernel(x, *device)
    except Exception as err:  # noqa: BLE001 - the two kernels must fail alike
        # The first line: torch's message goes on with its C++ frames, addresses and all.
        return type(err), str(err).replace(kernel.__name__, "<kernel>").splitlines()[0]


def test_a_short_kernel_asks_the_stream_as_a_released_one_does(cases):
    # A short kernel's stream is asked with the GIL its call holds, a released one's with the GIL
    # taken back: the same answer, or the same error, either way (kDLCUDA 0 and 1; kDLCUDAHost).
    torch = pytest.importorskip("torch")
    inputs = [np.ones(2), dlpx.empty((2,), "float32"), torch.ones(2)]
    for x in inputs:
        for device in ((2, 0), (2, 1), (3, 0)):
            short = stream_outcome(cases.stream_on_short, x, device)
            assert short == stream_outcome(cases.stream_on_released, x, device), (type(x), device)


def test_a_stream_the_framework_cannot_give_is_the_kernels_error(cases):
    # As an output's failure is: named by the kernel and what it asked, torch's C++ frames cut.
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("torch gives a CUDA stream here")
    for kernel in (cases.stream_on_short, cases.stream_on_released):
        with pytest.raises(Exception) as raised:
            kernel(torch.ones(2), 2, 0)
        assert str(raised.value).startswith(f"dlpx: {kernel.__name__}: stream: "), str(raised.value)
        assert "frame #0" not in str(raised.value) and "Exception raised from" not in str(raised.value)
    with pytest.raises(ValueError, match="^dlpx: stream_on_released: stream: unknown device type 9999"):
        cases.stream_on_released(np.ones(2), 9999, 0)
    # A negative index, as dlpx.cuda refuses to set one (the kernel got NULL): numpy's caller and
    # torch's (whose table reads -1 as its current device) alike.
    for x in (np.ones(2), torch.ones(2)):
        with pytest.raises(ValueError, match="^dlpx: stream_on_released: stream: device_id = -1 is negative$"):
            cases.stream_on_released(x, 2, -1)


def test_a_library_of_kernel_abi_1_still_runs(tmp_path_factory):
    # Its kernels read their arguments through the call functions; ABI 2 added the in-place ones.
    older = dlpx.load_library(build_library(tmp_path_factory, os.path.join(CASES, "older_abi.c"), "older_abi"))
    assert older.tensors(np.ones(2), np.ones(3, np.float32), dlpx.empty((1,), "float32")) == 3


def test_arguments_read_in_place_agree_with_the_call_functions(cases):
    a = np.ones(3, np.float32)
    frozen = np.ones(2)
    frozen.flags.writeable = False
    # a, bias, *rest, then n, x, flag, text, none: 2 + len(rest) + 5 arguments, each compared.
    assert cases.agree(a) == 7
    assert cases.agree(a, frozen, a, frozen, n=-3, x=2.0, flag=False, text="é", none=4) == 9


def test_arguments_past_the_inline_room_agree_and_are_all_released(cases):
    # A call keeps 16 arguments, and 16 views' owners, in place; past that, all move to the heap.
    # numpy views own a managed tensor each, so both lists spill; every one is released once.
    a = np.ones(3, np.float32)
    frozen = np.ones(2)
    frozen.flags.writeable = False
    rest = [a, frozen, dlpx.empty((2,), "float32")] * 10
    refs = (sys.getrefcount(a), sys.getrefcount(frozen))
    for _ in range(3):
        assert cases.agree(a, frozen, *rest, n=1, text="xyz") == 2 + len(rest) + 5
        # A conversion that fails past the spill drops what was taken, and loses nothing.
        with pytest.raises(TypeError, match="dlpx: agree: parameter 'rest' takes a tensor, got str"):
            cases.agree(a, frozen, *rest, "not a tensor")
        with pytest.raises(TypeError, match="dlpx: agree: parameter 'x' takes a float, got str"):
            cases.agree(a, frozen, *rest, x="not a float")
    assert (sys.getrefcount(a), sys.getrefcount(frozen)) == refs


def test_a_signature_the_loader_cannot_read_is_refused_naming_the_kernel(tmp_path_factory):
    bad = build_library(tmp_path_factory, os.path.join(CASES, "bad_signature.c"), "bad_signature")
    with pytest.raises(ImportError, match="kernel 'f': signature: parameter 'scale': default oops is not None"):
        dlpx.load_library(bad)


@pytest.mark.parametrize("call,message", [
    (lambda lib: lib.add(np.ones(1)), "dlpx: add: missing required argument 'b'"),
    (lambda lib: lib.add(np.ones(1), np.ones(1), np.ones(1)), r"dlpx: add: takes at most 2 positional arguments \(3 given\)"),
    (lambda lib: lib.add(np.ones(1), c=np.ones(1)), "dlpx: add: got an unexpected keyword argument 'c'"),
    (lambda lib: lib.add(np.ones(1), a=np.ones(1)), "dlpx: add: got multiple values for argument 'a'"),
    (lambda lib: lib.add(np.ones(1), "x"), "dlpx: add: parameter 'b' takes a tensor, got str"),
    (lambda lib: lib.add(None, np.ones(1)), "dlpx: add: parameter 'a' takes a tensor, got NoneType"),
    (lambda lib: lib.add(3, np.ones(1)), "dlpx: add: parameter 'a' takes a tensor, got int"),
    (lambda lib: lib.nop(np.ones(1), 2.5), "dlpx: nop: parameter 'tensors' takes a tensor, got float"),
    (lambda lib: lib.nop(tensors=np.ones(1)), "dlpx: nop: got an unexpected keyword argument 'tensors'"),
    # More unknown keywords than the kernel has parameters (or than any kernel has): the first.
    (lambda lib: lib.add(**{f"k{n}": 1 for n in range(65)}), "dlpx: add: got an unexpected keyword argument 'k0'"),
    # A name with no UTF-8, as Python's repr spells it.
    (lambda lib: lib.add(np.ones(1), **{"b\ud800": 1}), r"dlpx: add: got an unexpected keyword argument 'b\\ud800'$"),
])
def test_a_call_that_does_not_fit_the_signature_is_a_type_error(lib, call, message):
    with pytest.raises(TypeError, match=message):
        call(lib)


def test_a_producer_s_own_refusal_names_the_parameter_and_is_raised_from_it(lib):
    # numpy's __dlpack__ refuses a big-endian array with a BufferError: the same type, naming the
    # kernel and the parameter, raised from numpy's (its __cause__).
    with pytest.raises(BufferError, match="^dlpx: add: parameter 'b': DLPack only supports native byte order") as info:
        lib.add(np.ones(2, np.float32), np.ones(2, ">f4"))
    assert type(info.value.__cause__) is BufferError and "dlpx" not in str(info.value.__cause__)

    class Refusal(BufferError):
        pass

    class Refusing:
        def __dlpack__(self, **kwargs):
            raise Refusal("mine")

        def __dlpack_device__(self):
            return (1, 0)

    # A producer's own exception type (a subclass), or one no kind names, passes as it is.
    with pytest.raises(Refusal, match="^mine$"):
        lib.add(np.ones(2), Refusing())
    Refusing.__dlpack__ = lambda self, **kwargs: (_ for _ in ()).throw(KeyboardInterrupt)
    with pytest.raises(KeyboardInterrupt):
        lib.add(np.ones(2), Refusing())

    def user_error(self, **kwargs):
        raise ValueError("no view of this one")

    Refusing.__dlpack__ = user_error
    with pytest.raises(ValueError, match="^dlpx: add: parameter 'b': no view of this one$") as info:
        lib.add(np.ones(2), Refusing())
    assert info.value.__cause__.__traceback__.tb_frame.f_code.co_name == "user_error", "its traceback is kept"

    # torch's tables set exceptions whose text ends in a C++ backtrace (c10::Error::what()): the
    # reworded message leaves it out, as torch's own Python errors do; the cause keeps it.
    backtrace = ("\nException raised from toScalarType at aten/src/ATen/DLConvertor.cpp:191 (most recent call first):"
                 "\nframe #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98")

    def torch_error(self, **kwargs):
        raise RuntimeError("Unsupported kUInt bits 8 lanes 4" + backtrace)

    Refusing.__dlpack__ = torch_error
    with pytest.raises(RuntimeError, match="^dlpx: add: parameter 'b': Unsupported kUInt bits 8 lanes 4$") as info:
        lib.add(np.ones(2), Refusing())
    assert str(info.value.__cause__).endswith(backtrace)


@pytest.mark.parametrize("call,message", [
    (lambda c: c.scalars("1"), "dlpx: scalars: parameter 'n' takes an int, got str"),
    (lambda c: c.scalars(1.5), "dlpx: scalars: parameter 'n' takes an int, got float"),
    (lambda c: c.scalars(1, "x"), "dlpx: scalars: parameter 'x' takes a float, got str"),
    (lambda c: c.scalars(1, flag=1), "dlpx: scalars: parameter 'flag' takes a bool, got int"),
    (lambda c: c.scalars(1, text=b"x"), "dlpx: scalars: parameter 'text' takes a str, got bytes"),
    (lambda c: c.scalars(1, 2, 3), r"dlpx: scalars: takes at most 2 positional arguments \(3 given\)"),
    (lambda c: c.describe(np.ones(1), scale="x"), r"dlpx: describe: parameter 'scale' takes a float or None, got str"),
])
def test_a_scalar_of_the_wrong_type_is_a_type_error_naming_the_parameter(cases, call, message):
    with pytest.raises(TypeError, match=message):
        call(cases)


def test_a_bool_parameter_takes_numpy_s_bool_as_pybind11_does(cases):
    assert cases.scalars(1, flag=np.bool_(False)) == (2, 2.0, True, 3)
    assert cases.scalars(1, flag=np.True_) == (2, 2.0, False, 3)
    with pytest.raises(TypeError, match="parameter 'flag' takes a bool, got numpy.ndarray"):
        cases.scalars(1, flag=np.ones(1) > 0)


def test_a_float_conversion_s_own_error_passes_unchanged(cases):
    class Interrupting:
        def __float__(self):
            raise KeyboardInterrupt

    with pytest.raises(OverflowError):
        cases.scalars(1, 10**400)  # an int is a float parameter's, this one too large for a double
    with pytest.raises(KeyboardInterrupt):
        cases.scalars(1, Interrupting())
    assert cases.scalars(1, 2**60) == (2, 2.0**61, False, 3)


def test_a_str_with_no_utf8_is_a_value_error_naming_the_parameter(cases):
    # A lone surrogate (what os.fsdecode makes of undecodable bytes) has no UTF-8 to hand over.
    with pytest.raises(ValueError, match="^dlpx: scalars: parameter 'text': a str with no UTF-8 encoding"):
        cases.scalars(1, text="caf\udce9")
    assert cases.scalars(1, text="a\0b") == (2, 2.0, False, 3)


def test_a_number_too_large_for_int64_is_an_overflow_error(cases):
    # As CPython's own conversions say, and a typed C++ parameter that narrows it.
    for n in (2**70, 2**63, -(2**63) - 1):
        with pytest.raises(OverflowError, match="^dlpx: scalars: parameter 'n': the int does not fit in 64 bits"):
            cases.scalars(n)
    assert cases.scalars(-(2**63))[0] == -(2**63) + 1  # the ends of int64 are taken


def test_a_0d_tensor_reaches_the_kernel_with_shape_and_strides(cases):
    # dlpx's own, jax's and tvm-ffi's 0-d tensors carry NULL shape and strides (legal for ndim 0);
    # kernel.h promises a kernel neither is NULL.
    scalars = [np.float32(2.0) * np.ones(()), dlpx.from_dlpack(np.ones(()))]
    for module, make in (("jax.numpy", lambda m: m.ones(())), ("tvm_ffi", lambda m: m.from_dlpack(np.ones(()))),
                         ("torch", lambda m: m.ones(()))):
        try:
            scalars.append(make(__import__(module, fromlist=["_"])))
        except ImportError:
            pass
    for x in scalars:
        assert cases.null_dims(x) == 0, type(x)


def test_an_array_for_an_int_parameter_is_a_type_error_naming_it(cases):
    # numpy's __index__ raises its own TypeError ("only integer scalar arrays ..."): ours names the parameter.
    with pytest.raises(TypeError, match="^dlpx: scalars: parameter 'n' takes an int, got numpy.ndarray"):
        cases.scalars(np.ones(3))
    assert cases.scalars(np.int64(3))[0] == 4


@pytest.mark.parametrize("kind", ["ValueError", "TypeError", "IndexError", "KeyError", "MemoryError", "OverflowError",
                                  "ZeroDivisionError", "NotImplementedError", "BufferError", "RuntimeError"])
def test_a_kernel_s_error_is_raised_as_the_kind_it_named(cases, kind):
    with pytest.raises(getattr(builtins, kind)) as info:
        cases.raise_(kind, "it failed")
    assert type(info.value).__name__ == kind and info.value.args == ("dlpx: raise_: it failed",)


def test_a_kind_dlpx_does_not_know_is_a_runtime_error_keeping_its_name(cases):
    with pytest.raises(RuntimeError, match="^dlpx: raise_: LinAlgError: singular$"):
        cases.raise_("LinAlgError", "singular")


@pytest.mark.parametrize("kernel,error,message", [
    ("ninth", IndexError, r"dlpx: ninth: argument 9 asked for; the call has 1 \(0 to 0\)"),
    ("ninth_ignored", IndexError, "dlpx: ninth_ignored: argument 9 asked for"),
    ("wrong_kind", TypeError, r"dlpx: wrong_kind: argument 0 \('a'\) is a tensor, not an int"),
    ("ninth_in_place", IndexError, r"dlpx: ninth_in_place: argument 9 asked for; the call has 1 \(0 to 0\)"),
    ("wrong_kind_in_place", TypeError, r"dlpx: wrong_kind_in_place: argument 0 \('a'\) is a tensor, not an int"),
    ("allocate_then_fail", ValueError, "dlpx: allocate_then_fail: failed after allocating"),
    ("huge", MemoryError, "dlpx: huge: output: allocator: out of memory"),
    ("return_twice", ValueError, "dlpx: return_twice: returned a tensor this call did not allocate, or returned it twice"),
    ("return_argument", ValueError, "dlpx: return_argument: returned a tensor this call did not allocate"),
])
def test_a_kernel_s_bad_request_is_an_error_naming_it(cases, kernel, error, message):
    with pytest.raises(error, match=message):
        getattr(cases, kernel)(np.ones(3, np.float32))


@pytest.mark.parametrize("which,message", [
    (0, r"shape\[0\] = -5 is negative"),
    (1, r"unknown dtype code 99 \(DLPack names 0..=18\)"),
    (2, "4611686018427387904 elements of float32 overflow the byte size"),
    (3, "ndim = -1 is negative"),
    (4, "shape is NULL"),
])
def test_a_request_no_tensor_can_answer_is_the_same_value_error_in_every_framework(cases, which, message):
    # Refused before the framework's allocator is asked: torch's table calls them MemoryErrors.
    torch = pytest.importorskip("torch")
    for a in (np.ones(3, np.float32), torch.ones(3), dlpx.from_dlpack(np.ones(3, np.float32))):
        with pytest.raises(ValueError, match=rf"^dlpx: impossible: output: {message}"):
            cases.impossible(a, which)


def test_an_argument_asked_of_a_call_with_none_says_it_has_none():
    source = ("static int first(DlpxCall *call) { const DLTensor *t; return dlpx_call_tensor(call, 0, &t, NULL); }\n"
              'DLPX_EXPORT_KERNEL(first, first, "first(*xs): asks for argument 0.")\n')
    import dlpx.cpp

    lib = dlpx.cpp.load_inline("asks_of_none", c_sources=source)
    with pytest.raises(IndexError, match=r"^dlpx: first: argument 0 asked for; the call has none$"):
        lib.first()
    assert lib.first(np.ones(1)) is None


def test_dlpx_reads_its_own_argument_count_whatever_the_kernel_writes_in_its_call(cases):
    # struct DlpxCall is in the kernel's reach: a write to its count once sent dlpx's readers
    # past the arguments (a crash).
    with pytest.raises(IndexError, match=r"^dlpx: overwrite_count: argument 3 asked for; the call has 1 \(0 to 0\)$"):
        cases.overwrite_count(5)


@pytest.mark.parametrize("framework", ["numpy", "dlpx", "torch"])
@pytest.mark.parametrize("field", ["ndim", "shape", "data", "dtype", "unreturned"])
def test_a_kernel_that_changes_its_output_s_header_is_an_error_not_the_caller_s_crash(cases, framework, field):
    # The header is the framework's (numpy builds its array from it: a changed shape was a crash
    # there). The framework's deleter gets the header back as it made it.
    make, _ = FRAMEWORKS[framework]
    what = "shape" if field == "unreturned" else field
    with pytest.raises(RuntimeError, match=rf"^dlpx: rewrite_header: the kernel changed output 0's {what}: "):
        cases.rewrite_header(make(np.arange(6), "float32"), field)
    assert cases.rewrite_header(make(np.arange(6), "float32"), "nothing").shape == (6,)


def test_a_kernel_that_fails_without_saying_why_is_a_runtime_error(cases):
    with pytest.raises(RuntimeError, match="dlpx: silent: the kernel returned -1 without reporting an error"):
        cases.silent()


def test_an_output_torch_cannot_allocate_is_an_error(cases):
    torch = pytest.importorskip("torch")
    with pytest.raises((MemoryError, RuntimeError), match="dlpx: huge: output:") as info:
        cases.huge(torch.ones(3))
    # torch's message as its own Python exceptions show it: without the C++ backtrace its
    # SetError passes (c10::Error::what()).
    message = str(info.value)
    assert "frame #0" not in message and "Exception raised from" not in message, message
    assert "allocat" in message.removeprefix("dlpx: huge: output:"), f"torch's own words are kept: {message}"


def test_an_output_the_caller_s_framework_cannot_take_back_names_the_kernel(cases):
    # numpy has no bfloat16: its refusal is raised as its kind (RuntimeError; BufferError from
    # numpy 2.5), named as an output's refusal is; torch takes the same output back.
    with pytest.raises((RuntimeError, BufferError), match=r"^dlpx: bfloat16_like: result \(bfloat16\): \S"):
        cases.bfloat16_like(np.ones(3))
    torch = pytest.importorskip("torch")
    out = cases.bfloat16_like(torch.ones(2, 3))
    assert (type(out), out.dtype, tuple(out.shape)) == (torch.Tensor, torch.bfloat16, (2, 3))
    assert not out.any()


ODD_OUTPUTS = r'''
static int trio(DlpxCall *call) {
  DLDataType f32 = {kDLFloat, 32, 1}, bf16 = {kDLBfloat, 16, 1};
  DLDevice cpu = {kDLCPU, 0};
  int64_t shape[1] = {2};
  DLTensor *a, *b;
  if (dlpx_call_allocate(call, cpu, f32, 1, shape, &a) || dlpx_call_allocate(call, cpu, bf16, 1, shape, &b)) return -1;
  dlpx_call_return_tensor(call, a);
  dlpx_call_return_int(call, 7);
  return dlpx_call_return_tensor(call, b);
}
DLPX_EXPORT_KERNEL(trio, trio, "trio(x) -> tuple: float32, 7, bfloat16.")

static int on(DlpxCall *call) {
  int64_t type, id, shape[1] = {2};
  DLTensor *out;
  if (dlpx_argument_int(call, 1, &type) || dlpx_argument_int(call, 2, &id)) return -1;
  DLDevice device = {(DLDeviceType)type, (int32_t)id};
  DLDataType f32 = {kDLFloat, 32, 1};
  if (dlpx_call_allocate(call, device, f32, 1, shape, &out)) return -1;
  return dlpx_call_return_tensor(call, out);
}
DLPX_EXPORT_KERNEL(on, on, "on(x, device_type: int, device_id: int) -> tensor: an output there.")
'''


@pytest.fixture(scope="module")
def odd_outputs():
    import dlpx.cpp

    return dlpx.cpp.load_inline("odd_outputs", c_sources=ODD_OUTPUTS)


def test_a_result_in_a_tuple_the_caller_s_framework_cannot_take_is_named_by_place_and_dtype(odd_outputs):
    # numpy's words ("Unsupported dtype in DLTensor.") said neither which result nor its dtype.
    with pytest.raises((RuntimeError, BufferError), match=r"^dlpx: trio: result 3 of 3 \(bfloat16\): \S"):
        odd_outputs.trio(np.ones(2, np.float32))
    torch = pytest.importorskip("torch")
    first, seven, third = odd_outputs.trio(torch.ones(2))
    assert (first.dtype, seven, third.dtype) == (torch.float32, 7, torch.bfloat16)


@pytest.mark.parametrize("device", [(1, 1), (1, -1), (2, -1), (3, 1)], ids=["cpu:1", "cpu:-1", "cuda:-1", "cuda_host:1"])
def test_an_output_on_a_device_no_id_names_is_one_value_error_whatever_framework_allocates(odd_outputs, device):
    # torch's allocator gave cpu:0 for cpu:1, and its output was refused as "other than asked",
    # a RuntimeError blaming the allocator; dlpx's said ValueError. The request is judged first.
    inputs = [np.ones(2, np.float32), dlpx.empty((2,), "float32")]
    torch = pytest.importorskip("torch")
    inputs.append(torch.ones(2))
    for x in inputs:
        with pytest.raises(ValueError, match=r"^dlpx: on: output: (device \S+ is invalid|device_id = -1 is negative)"):
            odd_outputs.on(x, *device)


# ---- the GIL -------------------------------------------------------------------------------------


def longest_pause_while(kernel, ms):
    """The longest this thread waits between two of its steps while `kernel(ms)` runs on another."""
    done = threading.Event()

    def run():
        kernel(ms)
        done.set()

    thread = threading.Thread(target=run)
    longest, last = 0.0, time.perf_counter()
    thread.start()
    while not done.is_set():
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
    thread.join()
    return max(longest, time.perf_counter() - last)


def test_a_kernel_runs_without_the_gil_unless_it_is_short(cases):
    switch = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    try:
        released = longest_pause_while(cases.sleep_released, 400)
        held = longest_pause_while(cases.sleep_held, 400)
    finally:
        sys.setswitchinterval(switch)
    assert released < 0.2, f"a kernel releases the GIL: this thread waited {released:.3f} s"
    # The control: the same measurement sees a short kernel hold the GIL (so the one above can
    # fail). Free-threaded CPython, the GIL disabled, runs other threads beside a short one too.
    if getattr(sys, "_is_gil_enabled", lambda: True)():
        assert held > 0.3, f"a short kernel keeps the GIL: this thread waited at most {held:.3f} s"


# ---- nothing lost ------------------------------------------------------------------------------


def _rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _bad_calls(lib, cases, a):
    """Every failing path once: binding, conversion, the kernel's errors, its outputs."""
    for call in (lambda: lib.add(a), lambda: lib.add(a, "x"), lambda: lib.add(a, a, a), lambda: lib.add(a, c=a),
                 lambda: lib.add(a, np.ones(2, np.int8)), lambda: cases.ninth(a), lambda: cases.allocate_then_fail(a),
                 lambda: cases.return_twice(a), lambda: cases.huge(a), lambda: cases.raise_("KeyError", "k"),
                 lambda: lib.nop(a, a, a, 1), lambda: cases.rewrite_header(a, "shape")):
        try:
            call()
        except (TypeError, ValueError, IndexError, KeyError, MemoryError, RuntimeError):
            pass
        else:
            raise AssertionError("a bad call succeeded")
    cases.allocate_and_drop(a)
    cases.pair(a)


@pytest.mark.parametrize("framework", ["numpy", "dlpx", "torch", "memoryview"])
def test_references_and_memory_are_flat_over_many_calls(lib, cases, framework):
    make, _ = FRAMEWORKS[framework]
    # Outputs of a megabyte: one leaked per call would show in the RSS at once.
    a = make(np.arange(1 << 18), "float32")
    for _ in range(50):
        lib.add(a, a)
        _bad_calls(lib, cases, a)
    gc.collect()
    refs = sys.getrefcount(a)
    rss = _rss_kib()
    for _ in range(400):
        lib.add(a, a)
        lib.nop(a, a, a)
        _bad_calls(lib, cases, a)
    gc.collect()
    assert sys.getrefcount(a) == refs
    grown = _rss_kib() - rss
    assert grown < 16 * 1024, f"RSS grew by {grown} KiB over 400 rounds"


def test_every_view_of_a_dlpack_producer_is_released_once_on_every_path(lib, cases):
    producer = Producer(np.arange(4, dtype=np.float32))
    for _ in range(3):
        lib.add(producer, producer)
        lib.nop(producer, producer)
        _bad_calls(lib, cases, producer)
    gc.collect()
    assert producer.made and all(m.calls == 1 for m in producer.made), [m.calls for m in producer.made]


def test_a_kernel_named_as_a_macro_is_exported_under_its_name(tmp_path, monkeypatch):
    # A name passed on to the next macro was expanded first: <stdbool.h>'s `bool` was exported as
    # '_Bool' (refused by its signature), two names that are both 1 (GNU C's `unix` and `linux`)
    # pasted the same identifiers, and a typed kernel's failed to compile ("the signature must
    # begin with 1(") or, through DLPX_EXPORT_TYPED_KERNEL_WITH_FLAGS, was exported as '1'.
    import dlpx.cpp

    monkeypatch.setenv("DLPX_CACHE_DIR", str(tmp_path))
    c_source = ("#include <stdbool.h>\n#define one 1\n#define uno 1\n"
                "static int k(DlpxCall *call) { return dlpx_call_return_int(call, 7); }\n"
                'DLPX_EXPORT_KERNEL(bool, k, "bool() -> int: a name that is a macro.")\n'
                'DLPX_EXPORT_KERNEL_SHORT(true, k, "true() -> int: another.")\n'
                'DLPX_EXPORT_KERNEL(one, k, "one() -> int: 1 as a macro.")\n'
                'DLPX_EXPORT_KERNEL_WITH_FLAGS(uno, k, "uno() -> int: 1 again.", 0)\n')
    cpp_source = ("#define eins 1\n#define ein 1\n#define zwei 2\n"
                  "static int64_t seven() { return 7; }\n"
                  'DLPX_EXPORT_TYPED_KERNEL(eins, seven, "eins() -> int: 1 as a macro.")\n'
                  'DLPX_EXPORT_TYPED_KERNEL_SHORT(ein, seven, "ein() -> int: 1 again.")\n'
                  'DLPX_EXPORT_TYPED_KERNEL_WITH_FLAGS(zwei, seven, "zwei() -> int: with flags.", 0)\n'
                  # Names that extend another by what an identifier made from it could end in.
                  'DLPX_EXPORT_TYPED_KERNEL(k, seven, "k() -> int: a short name.")\n'
                  'DLPX_EXPORT_TYPED_KERNEL(k_export, seven, "k_export() -> int: k and more.")\n'
                  'DLPX_EXPORT_TYPED_KERNEL(k_signature, seven, "k_signature() -> int: and more.")\n'
                  'DLPX_EXPORT_TYPED_KERNEL(signature_k, seven, "signature_k() -> int: more before.")\n')
    lib = dlpx.cpp.load_inline("macro_names", c_sources=c_source, cpp_sources=cpp_source)
    names = ("bool", "true", "one", "uno", "eins", "ein", "zwei", "k", "k_export", "k_signature", "signature_k")
    assert [getattr(lib, name)() for name in names] == [7] * len(names)

"""Shipping a kernel library (docs/kernels.md, "Shipping a kernel library"): python -m
dlpx.stubgen's stubs (the runtime's signatures under stubtest, a user's calls under mypy
--strict), dlpx_add_kernel_library from the installed CMake package, and a kernel library
finding the libdlpx that `import dlpx` loaded with no rpath to it. The wheel on every interpreter
is scripts/check_kernel_wheel.sh's."""

import ast
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import c_build
import dlpx
from dlpx import stubgen
from test_kernel_library import build_library

REPO = c_build.REPO
EXAMPLE = os.path.join(REPO, "examples", "kernel_library", "kernels.c")
CASES = os.path.join(REPO, "c_tests", "kernel_cases", "kernel_cases.c")
# The wheel's package (examples/kernel_wheel): the kernels as a package's functions.
PACKAGE_INIT = os.path.join(REPO, "examples", "kernel_wheel", "dlpx_example_kernels", "__init__.py")


def build(tmp_path_factory, source, name, rpath=True):
    """test_kernel_library's build (hidden visibility, libdlpx linked), or one with no rpath."""
    if rpath:
        return build_library(tmp_path_factory, source, name)
    directory = tmp_path_factory.mktemp(name)
    path = os.path.join(directory, f"lib{name}.so")
    libraries = [flag for flag in c_build.link_dlpx(str(directory)) if "-rpath" not in flag]
    done = c_build.build("c", [source], path, flags=["-shared", "-fPIC", "-fvisibility=hidden"], libraries=libraries)
    assert done.returncode == 0, c_build.failure(done)
    return path


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    return build(tmp_path_factory, EXAMPLE, "dlpx_example_kernels")


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    return build(tmp_path_factory, CASES, "kernel_cases")


def package(tmp_path, name, library):
    """A package `name` as the wheel lays it out: the library, examples/kernel_wheel's
    __init__.py (naming this library), the generated __init__.pyi, py.typed."""
    directory = tmp_path / name
    directory.mkdir()
    os.symlink(library, directory / os.path.basename(library))
    with open(PACKAGE_INIT, encoding="utf-8") as f:
        init = f.read().replace("libdlpx_example_kernels.so", os.path.basename(library))
    (directory / "__init__.py").write_text(init)
    (directory / "py.typed").write_text("")
    assert stubgen.main([library, "-o", str(directory / "__init__.pyi")]) == 0
    return directory


def mypy(*args, cwd):
    pytest.importorskip("mypy")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(cwd), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=cwd, env=env)
    assert done.returncode == 0, f"{' '.join(args)}:\n{done.stdout}{done.stderr}"


# ---- python -m dlpx.stubgen -----------------------------------------------------------------


def test_stubgen_writes_one_def_per_kernel_from_its_signature(example, cases, tmp_path):
    text = stubgen.stub(example)
    assert "def add(a: _Tensor, b: _Tensor) -> Any:\n    \"\"\"a + b elementwise" in text
    assert "def nop(*tensors: _Tensor) -> None:\n    \"\"\"Views each tensor and returns None.\"\"\"" in text
    text = stubgen.stub(dlpx.load_library(cases))
    # An int takes anything with __index__, a float anything with __float__ or __index__, as the loader.
    assert ("def describe(a: _Tensor, bias: _Tensor | None = None, *, scale: SupportsFloat | SupportsIndex | None "
            "= None) -> tuple[Any, ...]:") in text
    assert ("def scalars(n: SupportsIndex, x: SupportsFloat | SupportsIndex = 1.0, *, flag: bool = True, "
            "text: str = 'abc') -> tuple[Any, ...]:") in text
    assert "def flags(a: _Tensor) -> int:" in text and "def silent() -> Any:" in text
    # The command line: beside the library by default, named after its module; `-o -` prints it.
    done = subprocess.run([sys.executable, "-m", "dlpx.stubgen", example], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    with open(os.path.join(os.path.dirname(example), "dlpx_example_kernels.pyi"), encoding="utf-8") as f:
        assert f.read() == stubgen.stub(example)
    done = subprocess.run([sys.executable, "-m", "dlpx.stubgen", example, "-o", "-"], capture_output=True, text=True)
    assert done.stdout == stubgen.stub(example)


def test_stubgen_spells_a_quoted_doc_and_a_non_finite_default(tmp_path_factory, tmp_path):
    source = tmp_path / "quoted.c"
    source.write_text(textwrap.dedent(r"""
        #include "dlpx/kernel.h"
        static int mode(DlpxCall *call) { (void)call; return 0; }
        DLPX_EXPORT_KERNEL(mode, mode, "mode(x=1e400, y: float = -1e400) -> None: Runs in the mode named \"fast\"")
    """))
    text = stubgen.stub(build(tmp_path_factory, str(source), "quoted"))
    tree = ast.parse(text)  # a SyntaxError before: the doc's last quote ran into the closing ones
    (mode,) = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    assert ast.get_docstring(mode) == 'Runs in the mode named "fast"'
    # inf has no literal a stub could name: `...`, as typeshed writes it.
    assert "def mode(x: SupportsFloat | SupportsIndex = ..., y: SupportsFloat | SupportsIndex = ...) -> None:" in text


def test_stubgen_keeps_a_doc_character_for_character(tmp_path_factory, tmp_path):
    # Only "\n" breaks the stub's docstring: a "\r", a form feed or a line separator in a doc is
    # written as its escape (Python's tokenizer would read a bare "\r" as a line break).
    source = tmp_path / "breaks.c"
    source.write_text(textwrap.dedent(r"""
        #include "dlpx/kernel.h"
        static int k(DlpxCall *call) { (void)call; return 0; }
        DLPX_EXPORT_KERNEL(k, k, "k() -> None: one\rtwo\x0cthree \\ four\n\nfive\xe2\x80\xa8six")
    """))
    path = build(tmp_path_factory, str(source), "breaks")
    text = stubgen.stub(path)
    (k,) = [node for node in ast.parse(text).body if isinstance(node, ast.FunctionDef)]
    assert ast.get_docstring(k) == "one\rtwo\x0cthree \\ four\n\nfive\u2028six", text
    assert "\r" not in text and "\x0c" not in text and "\u2028" not in text
    assert dlpx.load_library(path).k.__doc__.endswith("one\rtwo\x0cthree \\ four\n\nfive\u2028six")


def test_stubgen_spells_a_module_name_with_quotes_and_a_backslash(example, tmp_path):
    # The module is named after the file: its name goes into the stub's docstring as a doc does
    # (a `"""` in it ended the docstring early: the stub did not parse).
    odd = tmp_path / 'lib"""q\\r.so'
    shutil.copyfile(example, odd)
    text = stubgen.stub(str(odd))
    assert ast.get_docstring(ast.parse(text)).startswith('Kernels of """q\\r (stub written by')


def test_stubgen_writes_beside_the_library_the_search_path_found(tmp_path_factory, tmp_path):
    # A bare name is looked up on the library search path: the stub goes beside that file, which
    # is the module's __file__, not into the working directory.
    source = tmp_path / "found.c"
    source.write_text('#include "dlpx/kernel.h"\nstatic int k(DlpxCall *call) { (void)call; return 0; }\n'
                      'DLPX_EXPORT_KERNEL(k, k, "k() -> None: doc")\n')
    path = build(tmp_path_factory, str(source), "found")
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(path))
    done = subprocess.run([sys.executable, "-m", "dlpx.stubgen", "libfound.so"], capture_output=True, text=True,
                          cwd=elsewhere, env=env)
    assert done.returncode == 0, done.stderr
    assert os.listdir(elsewhere) == [] and os.path.isfile(os.path.join(os.path.dirname(path), "found.pyi"))
    done = subprocess.run([sys.executable, "-c", "import dlpx; print(dlpx.load_library('libfound.so').__file__)"],
                          capture_output=True, text=True, cwd=elsewhere, env=env)
    assert done.returncode == 0 and done.stdout.strip() == path, done.stderr


def test_stubgen_spells_any_kernel_name_and_any_result_annotation_as_valid_python(tmp_path_factory, tmp_path):
    # A kernel named like a type the stub uses (`float`, `Any`) would be that type in every
    # annotation: those are spelled through _builtins/_typing. A result annotation that is no type
    # (a bare comma, an unclosed bracket, `...`, list of two) is Any.
    source = tmp_path / "names.c"
    kernels = [("float", "float(a, alpha: float = 2.0) -> tensor"), ("Any", "Any(n: int) -> int | None"),
               ("tuple", "tuple(a) -> tuple[tensor, ...]"), ("split2", "split2(a) -> tensor, tensor"),
               ("open2", "open2(a) -> tuple[tensor,"), ("dots", "dots(a) -> ..."),
               ("pairs", "pairs(a) -> list[tensor, tensor]"), ("nested", "nested(a) -> tuple[list[int], bool | None]"),
               ("int", "int(a) -> int"), ("_impl", "_impl(a) -> tensor"), ("_Tensor", "_Tensor(a) -> None"),
               ("_typing", "_typing(a, n: int) -> None"), ("deep", "deep(a) -> " + "~" * 5000 + "tensor")]
    source.write_text('#include "dlpx/kernel.h"\nstatic int k(DlpxCall *call) { (void)call; return 0; }\n'
                      + "".join(f'DLPX_EXPORT_KERNEL({name}, k, "{text}: doc")\n' for name, text in kernels))
    text = stubgen.stub(build(tmp_path_factory, str(source), "names"))
    ast.parse(text)
    # A kernel may start with `_` (`_impl`), and take a name of the preamble's (`_Tensor`): the
    # preamble's names then start with as many more underscores as keep them apart.
    for expected in ["def float(a: __Tensor, alpha: SupportsFloat | SupportsIndex = 2.0) -> __typing.Any:",
                     "def Any(n: SupportsIndex) -> __builtins.int | None:", "def split2(a: __Tensor) -> __typing.Any:",
                     "def int(a: __Tensor) -> __builtins.int:",
                     "def tuple(a: __Tensor) -> __builtins.tuple[__typing.Any, ...]:",
                     "def open2(a: __Tensor) -> __typing.Any:", "def dots(a: __Tensor) -> __typing.Any:",
                     "def pairs(a: __Tensor) -> __typing.Any:",
                     "def nested(a: __Tensor) -> __builtins.tuple[list[__builtins.int], bool | None]:",
                     "def _impl(a: __Tensor) -> __typing.Any:", "def _Tensor(a: __Tensor) -> None:",
                     "def _typing(a: __Tensor, n: SupportsIndex) -> None:", "import typing as __typing",
                     "def deep(a: __Tensor) -> __typing.Any:"]:  # nested past what ast reads: a RecursionError
        assert expected in text, text
    (tmp_path / "names.pyi").write_text(text)
    mypy("mypy", "--strict", "--cache-dir", os.devnull, "names.pyi", cwd=tmp_path)


def test_stubgen_refuses_what_is_no_kernel_library(example, tmp_path):
    # One line naming what is wrong, no traceback: a missing file, a directory, a file that is no
    # library, an output that cannot be written.
    (tmp_path / "text.so").write_text("no library")
    for argv, named in [([str(tmp_path / "missing.so")], "missing.so"), ([str(tmp_path)], str(tmp_path)),
                        ([str(tmp_path / "text.so")], "text.so"),
                        ([example, "-o", str(tmp_path / "text.so" / "such.pyi")], "text.so")]:
        done = subprocess.run([sys.executable, "-m", "dlpx.stubgen", *argv], capture_output=True, text=True)
        assert done.returncode != 0 and named in done.stderr, done.stderr
        assert done.stderr.startswith("dlpx.stubgen: ") and "Traceback" not in done.stderr, done.stderr
    # A package's stub in a directory not made yet (CMake's STUB my_kernels/__init__.pyi) is written.
    package = tmp_path / "my_kernels" / "__init__.pyi"
    done = subprocess.run([sys.executable, "-m", "dlpx.stubgen", example, "-o", str(package)], capture_output=True, text=True)
    assert done.returncode == 0 and package.read_text().startswith('"""'), done.stderr


@pytest.mark.parametrize("which", ["example", "cases"])
def test_the_stub_is_the_runtime_under_stubtest(which, example, cases, tmp_path):
    # stubtest: every def's parameters (names, kinds, defaults) are the loaded kernels'
    # (__text_signature__), and nothing is missing either way.
    # The library file itself (lib*.so) has an extension module's suffix, but is no module.
    package(tmp_path, f"shipped_{which}", {"example": example, "cases": cases}[which])
    (tmp_path / "allowlist.txt").write_text(f"shipped_{which}\\.lib.*\n")
    (tmp_path / "mypy.ini").write_text("[mypy]\ncache_dir = /dev/null\n")
    mypy("mypy.stubtest", f"shipped_{which}", "--mypy-config-file", "mypy.ini", "--allowlist", "allowlist.txt",
         cwd=tmp_path)


def test_the_stub_types_a_users_calls_under_mypy_strict(example, tmp_path):
    package(tmp_path, "shipped", example)
    (tmp_path / "usage.py").write_text(textwrap.dedent("""\
        import array

        import numpy as np

        import dlpx
        import shipped

        a = np.ones(3, np.float32)
        out = shipped.add(a, dlpx.from_dlpack(a))
        print(out, shipped.add(array.array("d", [1.0]), b"12345678"), shipped.add(a=a, b=a))
        shipped.nop(a, a, a)
        shipped.add(a, "x")  # type: ignore[arg-type]
        shipped.add(a)  # type: ignore[call-arg]
        shipped.nop(a, scale=1)  # type: ignore[call-arg]
    """))
    mypy("mypy", "--strict", "--warn-unused-ignores", "--cache-dir", os.devnull, "usage.py", cwd=tmp_path)
    # The refusals above are the runtime's too.
    sys.path.insert(0, str(tmp_path))
    try:
        import shipped

        a = np.ones(3, np.float32)
        for call in (lambda: shipped.add(a, "x"), lambda: shipped.add(a), lambda: shipped.nop(a, scale=1)):
            with pytest.raises(TypeError):
                call()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("shipped", None)


# ---- finding libdlpx at run time --------------------------------------------------------------


def test_a_kernel_library_gets_the_libdlpx_import_dlpx_loaded_with_no_rpath(tmp_path_factory):
    # No RUNPATH and nothing on LD_LIBRARY_PATH: dlopen alone cannot find libdlpx.so.0, but after
    # `import dlpx` the dynamic linker gives the library the copy with that SONAME already loaded
    # (wherever dlpx is installed), so one libdlpx serves dlpx and every kernel library.
    path = build(tmp_path_factory, EXAMPLE, "no_rpath", rpath=False)
    os.unlink(os.path.join(os.path.dirname(path), "libdlpx.so.0"))
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    alone = subprocess.run([sys.executable, "-c", f"import ctypes; ctypes.CDLL({path!r})"],
                           capture_output=True, text=True, env=env)
    assert alone.returncode != 0 and "libdlpx.so.0" in alone.stderr
    code = textwrap.dedent(f"""\
        import os, numpy as np, dlpx
        lib = dlpx.load_library({path!r})
        assert lib.add(np.ones(2), np.ones(2)).tolist() == [2.0, 2.0]
        with open("/proc/self/maps") as maps:
            paths = {{line.split()[-1] for line in maps if ".so" in line.split()[-1]}}
        loaded = {{os.path.realpath(p) for p in paths if os.path.basename(p).startswith("libdlpx.so")}}
        assert loaded == {{os.path.realpath(dlpx.library_path())}}, loaded
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr


# ---- dlpx_add_kernel_library ------------------------------------------------------------------

PROJECT = """\
cmake_minimum_required(VERSION 3.18)
project(shipped LANGUAGES C CXX)
find_package(dlpx CONFIG REQUIRED)
dlpx_add_kernel_library(shipped_kernels SOURCES kernels.c more.cpp OUTPUT_NAME shipped STUB shipped/__init__.pyi)
"""
MORE = """\
#include <dlpx/kernel.h>
#include <string_view>
static int twice(DlpxCall *call) {
  int64_t n;
  if (dlpx_call_int(call, 0, &n) != 0) return -1;
  return dlpx_call_return_int(call, 2 * n + static_cast<int64_t>(std::string_view("").size()));
}
DLPX_EXPORT_KERNEL(twice, twice, "twice(n: int) -> int: 2 n, from C++17.")
"""


class InDirectory:
    """configure_and_build's tmp_path_factory: its build directory in the test's own, its name
    holding a comma (a -Wl, list splits at one: the version script's path did)."""

    def __init__(self, directory):
        self.directory = directory

    def mktemp(self, name):
        (self.directory / f"build,{name}").mkdir()
        return self.directory / f"build,{name}"


def test_dlpx_add_kernel_library_builds_c_and_cxx_with_its_stub(tmp_path):
    from examples_build import configure_and_build

    source = tmp_path / "project"
    source.mkdir()
    (source / "CMakeLists.txt").write_text(PROJECT)
    (source / "more.cpp").write_text(MORE)
    os.symlink(EXAMPLE, source / "kernels.c")
    # What kernels.c includes beside it (a symlinked source finds its includes beside the link).
    os.symlink(os.path.join(os.path.dirname(EXAMPLE), "strided_add.h"), source / "strided_add.h")

    out = configure_and_build(str(source), InDirectory(tmp_path), [f"-DPython3_EXECUTABLE={sys.executable}"])
    library = os.path.join(out, "libshipped.so")
    lib = dlpx.load_library(library)
    assert lib.twice(21) == 42 and lib.add(np.ones(2), np.ones(2)).tolist() == [2.0, 2.0]
    with open(os.path.join(out, "shipped", "__init__.pyi"), encoding="utf-8") as f:  # a package's, its directory made
        assert "def twice(n: SupportsIndex) -> int:" in f.read()
    symbols = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True, text=True)
    assert symbols.returncode == 0, symbols.stderr
    assert [line.split()[-1] for line in symbols.stdout.splitlines()] == ["dlpx_kernel_library"]


def test_dlpx_add_kernel_library_refuses_cuda_sources_without_cuda(tmp_path):
    from examples_build import configure_and_build

    source = tmp_path / "project"
    source.mkdir()
    (source / "CMakeLists.txt").write_text(PROJECT.replace("kernels.c more.cpp", "kernel.cu"))

    with pytest.raises(AssertionError, match=r"kernel\.cu is CUDA, and the CUDA\s+language is not enabled"):
        configure_and_build(str(source), InDirectory(tmp_path))


def test_dlpx_add_kernel_library_makes_a_call_of_an_undeclared_function_an_error(tmp_path):
    # C89's implicit declaration is a warning: the library would build with an undefined symbol
    # that only its load finds, the compiler's warning long gone.
    from examples_build import configure_and_build

    source = tmp_path / "project"
    source.mkdir()
    (source / "CMakeLists.txt").write_text(PROJECT.replace("kernels.c more.cpp", "typo.c"))
    (source / "typo.c").write_text('#include <dlpx/kernel.h>\n'
                                   'static int k(DlpxCall *call) { return dlpx_call_retrun_int(call, 1); }\n'
                                   'DLPX_EXPORT_KERNEL(k, k, "k() -> int: doc")\n')

    with pytest.raises(AssertionError, match=r"implicit declaration of function .dlpx_call_retrun_int"):
        configure_and_build(str(source), InDirectory(tmp_path))

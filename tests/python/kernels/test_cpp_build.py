"""Kernel libraries built from Python (python/dlpx/cpp.py, docs/kernels.md "Building from Python"):
load_inline and load compile C, C++ and CUDA with the flags dlpx_add_kernel_library uses, cache
each build by its sources, flags, compilers and the content of the headers they include, and
refuse bad input with clear errors."""

import os
import re
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pytest

import dlpx
from dlpx import _toolchain, cpp

SCALE = r"""
static int scale(DlpxCall *call) {
  const DLTensor *x;
  double alpha;
  DLTensor *out;
  if (dlpx_argument_tensor(call, 0, &x, NULL) || dlpx_argument_float(call, 1, &alpha)) return -1;
  if (x->dtype.code != kDLFloat || x->dtype.bits != 64 || x->ndim != 1)
    return dlpx_call_error(call, "TypeError", "scale takes a 1-d float64 tensor");
  if (dlpx_call_allocate(call, x->device, x->dtype, 1, x->shape, &out)) return -1;
  const double *in = (const double *)((const char *)x->data + x->byte_offset);
  for (int64_t i = 0; i < x->shape[0]; ++i) ((double *)out->data)[i] = alpha * in[i * x->strides[0]];
  return dlpx_call_return_tensor(call, out);
}
DLPX_EXPORT_KERNEL(scale, scale, "scale(x, alpha=2.0) -> tensor: alpha * x, in x's framework.")
"""

AXPY = r"""
#include <stdexcept>
dlpx::OutputTensor axpy(dlpx::Call& call, double alpha, dlpx::mdspan_t<const float, 1> x,
                        dlpx::mdspan_t<const float, 1> y) {
  if (x.extent(0) != y.extent(0)) throw std::invalid_argument("x and y differ in length");
  dlpx::OutputTensor out = call.allocate({x.extent(0)}, dlpx::dtype_of<float>());
  auto z = out.as_mdspan<float, 1>();
  for (int64_t i = 0; i < x.extent(0); ++i) z(i) = static_cast<float>(alpha) * x(i) + y(i);
  return out;
}
DLPX_EXPORT_TYPED_KERNEL(axpy, axpy, "axpy(alpha: float, x, y) -> tensor: alpha * x + y.")
"""


def answer(value, name="answer"):
    """A kernel returning `value` (C text: a literal or a macro)."""
    return (f"static int {name}(DlpxCall *call) {{ return dlpx_call_return_int(call, {value}); }}\n"
            f'DLPX_EXPORT_KERNEL({name}, {name}, "{name}() -> int: a constant.")\n')


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """Each test's own cache (a build of another test, or of the user's, is never found)."""
    monkeypatch.setenv("DLPX_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def exported(path):
    """The dynamic symbols `path` defines, and those it needs."""
    def names(which):
        listing = subprocess.run(["nm", "-D", which, path], capture_output=True, text=True, check=True).stdout
        return [line.split()[-1] for line in listing.splitlines()]
    return names("--defined-only"), names("--undefined-only")


def test_a_c_kernel_from_text_takes_every_framework_and_returns_its_type():
    lib = cpp.load_inline("scale", c_sources=SCALE)
    y = lib.scale(np.arange(3.0))
    assert type(y) is np.ndarray and y.tolist() == [0.0, 2.0, 4.0]
    assert lib.scale(np.arange(3.0)[::-1], alpha=0.5).tolist() == [1.0, 0.5, 0.0]
    torch = pytest.importorskip("torch")
    t = lib.scale(torch.arange(3.0, dtype=torch.float64))
    assert type(t) is torch.Tensor and t.tolist() == [0.0, 2.0, 4.0]
    with pytest.raises(TypeError, match="dlpx: scale: scale takes a 1-d float64 tensor"):
        lib.scale(np.arange(3, dtype=np.float32))
    assert lib.scale.__doc__.startswith("scale(x: tensor, alpha: float = 2.0) -> tensor")


def test_a_typed_cpp_kernel_and_its_exception():
    lib = cpp.load_inline("axpy", cpp_sources=[AXPY])
    assert lib.axpy(2.0, np.ones(3, np.float32), np.arange(3, dtype=np.float32)).tolist() == [2.0, 3.0, 4.0]
    with pytest.raises(ValueError, match="x and y differ in length"):
        lib.axpy(1.0, np.ones(3, np.float32), np.ones(2, np.float32))


def test_the_library_exports_one_symbol_and_names_nothing_of_python():
    path = cpp.build_inline("both", c_sources=SCALE, cpp_sources=AXPY)
    defined, undefined = exported(path)
    assert defined == ["dlpx_kernel_library"], defined
    assert not [symbol for symbol in undefined if symbol.lstrip("_").startswith("Py")], undefined
    lib = dlpx.load_library(path)
    assert lib.scale(np.ones(2)).tolist() == [2.0, 2.0] and lib.axpy(1.0, np.ones(1, np.float32),
                                                                    np.ones(1, np.float32)).tolist() == [2.0]


def test_the_same_call_again_compiles_nothing_and_gives_the_same_module(capfd):
    lib = cpp.load_inline("scale", c_sources=SCALE, verbose=True)
    assert "-c" in capfd.readouterr().err  # the compile command, printed
    before = os.stat(lib.__file__)
    again = cpp.load_inline("scale", c_sources=SCALE, verbose=True)
    assert again is lib and capfd.readouterr().err == ""
    after = os.stat(lib.__file__)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    # Another process finds the build too: it compiles nothing.
    code = "import dlpx.cpp, sys; print(dlpx.cpp.build_inline('scale', c_sources=sys.argv[1], verbose=True))"
    done = subprocess.run([sys.executable, "-c", code, SCALE], capture_output=True, text=True, env=os.environ)
    assert done.returncode == 0, done.stderr
    assert (done.stdout.strip(), done.stderr) == (lib.__file__, "")


def test_a_changed_source_is_a_new_library_in_the_same_process():
    first = cpp.load_inline("answer", c_sources=answer(1))
    second = cpp.load_inline("answer", c_sources=answer(2))
    assert first is not second and first.__file__ != second.__file__
    assert (first.answer(), second.answer()) == (1, 2)


def test_a_build_directory_is_the_cache_s_root_for_the_call(tmp_path, cache):
    first = cpp.build_inline("answer", c_sources=answer(1), build_directory=str(tmp_path / "builds"))
    second = cpp.build_inline("answer", c_sources=answer(2), build_directory=str(tmp_path / "builds"))
    assert first != second and all(p.startswith(str(tmp_path / "builds")) for p in (first, second))
    assert (dlpx.load_library(first).answer(), dlpx.load_library(second).answer()) == (1, 2)
    assert not cache.exists()


def test_a_changed_header_builds_anew(tmp_path):
    include = tmp_path / "include"
    include.mkdir()
    header = include / "factor.h"
    source = "#include <factor.h>\n" + answer("FACTOR")
    header.write_text("#define FACTOR 2\n")
    first = cpp.load_inline("factor", c_sources=source, extra_include_paths=[str(include)])
    header.write_text("#define FACTOR 3\n")
    second = cpp.load_inline("factor", c_sources=source, extra_include_paths=[str(include)])
    assert (first.answer(), second.answer()) == (2, 3)
    # Back to the first header: its build is found again, compiled once.
    header.write_text("#define FACTOR 2\n")
    assert cpp.load_inline("factor", c_sources=source, extra_include_paths=[str(include)]) is first


def test_source_files_of_each_language_in_one_library(tmp_path):
    (tmp_path / "scale.c").write_text("#include <dlpx/kernel.h>\n" + SCALE)
    (tmp_path / "axpy.cpp").write_text("#include <dlpx/kernel.hpp>\n" + AXPY)
    lib = cpp.load("files", [str(tmp_path / "scale.c"), tmp_path / "axpy.cpp"])
    assert sorted(name for name in dir(lib) if not name.startswith("_")) == ["axpy", "scale"]
    assert lib.scale(np.ones(1), alpha=3.0).tolist() == [3.0]
    (tmp_path / "scale.c").write_text("#include <dlpx/kernel.h>\n" + SCALE.replace("alpha=2.0", "alpha=4.0"))
    assert cpp.load("files", [str(tmp_path / "scale.c"), str(tmp_path / "axpy.cpp")]).scale(np.ones(1)).tolist() == [4.0]


def test_what_a_killed_build_left_is_removed_a_day_later(cache):
    path = cpp.build_inline("litter", c_sources=answer(1))
    home = os.path.dirname(os.path.dirname(path))
    old, recent = os.path.join(home, "build.old"), os.path.join(home, "build.recent")
    for work in (old, recent):
        os.makedirs(work)
        open(os.path.join(work, "0.o"), "w").close()
    os.utime(old, (0, 0))
    cpp.build_inline("litter", c_sources=answer(2))  # another build of the name: another directory
    cpp.build_inline("litter", c_sources=answer(1), extra_cflags=["-O1"])
    assert os.path.isdir(old) and os.path.isdir(recent)  # a build elsewhere leaves them
    os.remove(os.path.join(os.path.dirname(path), "liblitter.so"))  # the next call here builds
    cpp.build_inline("litter", c_sources=answer(1))
    assert not os.path.exists(old) and os.path.isdir(recent)


def test_a_compile_error_names_the_file_and_line_and_a_fixed_source_builds(cache):
    with pytest.raises(cpp.BuildError, match=r"(?s)building broken failed.*broken\.c:3:.*undeclared_name.* undeclared"):
        cpp.load_inline("broken", c_sources=["", "int f(void) { return undeclared_name; }"])
    assert not [p for p in cache.rglob("*.so")]  # nothing half-built is left to be found
    assert cpp.load_inline("broken", c_sources=answer(7)).answer() == 7


def test_a_call_of_an_undeclared_function_is_a_compile_error_not_a_library_that_cannot_load(cache):
    # C89's implicit declaration: a warning would build a library with an undefined symbol,
    # cached, whose load fails with the compiler's warning lost.
    typo = ["static int k(DlpxCall *call) { return dlpx_call_retrun_int(call, 1); }",
            'DLPX_EXPORT_KERNEL(k, k, "k() -> int: doc")']
    with pytest.raises(cpp.BuildError, match=r"(?s)building typo failed.*dlpx_call_retrun_int"):
        cpp.load_inline("typo", c_sources=typo)
    assert not [p for p in cache.rglob("*.so")]


def test_a_flag_reaches_the_compiler_and_the_linker():
    lib = cpp.load_inline("flagged", c_sources=answer("VALUE"), extra_cflags=["-DVALUE=41", "-O0"],
                          extra_ldflags=["-Wl,--build-id"])
    assert lib.answer() == 41
    with pytest.raises(cpp.BuildError, match="no-such-flag"):
        cpp.build_inline("flagged", c_sources=answer(1), extra_ldflags=["-Wl,--no-such-flag"])


def test_the_link_s_response_file_is_the_build_s_own(cache, tmp_path, monkeypatch):
    # In the build's directory, which the cache removes when a killed build left it; where the
    # cache's path could not be a response file's (a space, a comma), in the temporary directory.
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    tempfile.tempdir = None  # read TMPDIR anew
    try:
        for root, inside in ((cache, True), (tmp_path / "a, b", False)):
            monkeypatch.setenv("DLPX_CACHE_DIR", str(root))
            with pytest.raises(cpp.BuildError, match="no-such-flag") as failed:
                cpp.build_inline("responded", c_sources=answer(1), extra_ldflags=["-Wl,--no-such-flag"])
            held = re.search(r"(\S+\.rsp) holds:", str(failed.value)).group(1)
            assert held.startswith(str(root)) == inside and held.startswith(str(tmp_path / "tmp")) != inside
            assert not os.path.exists(held)
    finally:
        tempfile.tempdir = None


@pytest.mark.parametrize("name", ["", "1st", "a-b", "a.b", "a b", None])
def test_a_name_that_is_no_identifier_is_refused(name):
    with pytest.raises(ValueError, match="is no identifier"):
        cpp.build_inline(name, c_sources=answer(1))


def test_bad_input_is_refused_before_anything_is_built(tmp_path, cache, monkeypatch):
    with pytest.raises(ValueError, match="empty: no sources"):
        cpp.build_inline("empty")
    with pytest.raises(ValueError, match="empty: no sources"):  # empty sequences are none either
        cpp.build_inline("empty", c_sources=[], cpp_sources=())
    with pytest.raises(TypeError, match="extra_cflags is a sequence of str"):
        cpp.build_inline("flags", c_sources=answer(1), extra_cflags="-O0")
    with pytest.raises(TypeError, match="c sources are a str or a sequence of str"):
        cpp.build_inline("texts", c_sources=[answer(1), 2])
    fortran = tmp_path / "kernel.f90"
    fortran.write_text("")
    with pytest.raises(ValueError, match=r"kernel\.f90: not a C, C\+\+ or CUDA source"):
        cpp.build("fortran", [str(fortran)])
    with pytest.raises(FileNotFoundError):
        cpp.build("missing", [str(tmp_path / "missing.c")])
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(cpp.BuildError, match=r"no c compiler \(tried .*no-such-cc\): install one or set \$CC"):
        cpp.build_inline("nocc", c_sources=answer(1))
    monkeypatch.setenv("DLPX_CUDA_ARCH_LIST", "hopper")
    monkeypatch.setenv("NVCC", "/bin/true")
    with pytest.raises(cpp.BuildError, match="'hopper' in DLPX_CUDA_ARCH_LIST is no CUDA architecture"):
        cpp.build_inline("arch", cuda_sources="")
    assert not [p for p in cache.rglob("*.so")] if cache.exists() else True


def test_threads_building_one_library_at_once_get_one_module():
    source = answer(5, "five")
    results, errors = [], []

    def load():
        try:
            results.append(cpp.load_inline("five", c_sources=source))
        except Exception as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(results) == 4 and all(module is results[0] for module in results)
    assert results[0].five() == 5


def test_a_cuda_source_builds_with_nvcc(monkeypatch):
    try:
        _toolchain.compiler("cuda")
    except cpp.BuildError as err:
        pytest.skip(str(err))
    monkeypatch.setenv("DLPX_CUDA_ARCH_LIST", "9.0")
    source = r"""
__global__ void fill(float *p, int64_t n) { int64_t i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] = 1.0f; }
static int ones(DlpxCall *call) {
  const DLTensor *x;
  if (dlpx_argument_tensor(call, 0, &x, NULL)) return -1;
  fill<<<1, 32>>>((float *)x->data, x->shape[0]);
  return 0;
}
DLPX_EXPORT_KERNEL(ones, ones, "ones(x) -> None: fills x with ones on the GPU.")
"""
    path = cpp.build_inline("ones", cuda_sources=source)
    defined, undefined = exported(path)
    assert defined == ["dlpx_kernel_library"], defined
    assert not [symbol for symbol in undefined if symbol.lstrip("_").startswith("Py")]
    needed = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    assert "libcudart" not in needed  # the runtime linked statically, as dlpx_add_kernel_library does
    assert dlpx.load_library(path).ones.__doc__.startswith("ones(x: tensor) -> None")


# ---- what a review found: escaped paths, relative flags, a header saved mid-build, compilers -------


@pytest.mark.parametrize("directory", ["hash#dir", "dollar$dir", "with space", "comma,dir", "tab\tdir"])
def test_a_header_in_a_directory_make_escapes_is_tracked(tmp_path, monkeypatch, directory):
    # gcc's depfile writes '#' as '\#', '$' as '$$' and a tab as '\<tab>'; a comma splits a -Wl, list.
    monkeypatch.setenv("DLPX_CACHE_DIR", str(tmp_path / directory / "cache"))
    include = tmp_path / directory / "include"
    include.mkdir(parents=True)
    (include / "factor.h").write_text("#define FACTOR 2\n")
    source = "#include <factor.h>\n" + answer("FACTOR")
    first = cpp.load_inline("escaped", c_sources=source, extra_include_paths=[str(include)])
    (include / "factor.h").write_text("#define FACTOR 3\n")
    second = cpp.load_inline("escaped", c_sources=source, extra_include_paths=[str(include)])
    assert (first.answer(), second.answer()) == (2, 3)


@pytest.mark.parametrize("language", ["c", "cuda"])
def test_paths_with_commas_quotes_and_spaces_reach_the_linker_whole(tmp_path, language):
    # nvcc splits an -Xlinker value at commas and gcc a -Wl, list: the linker's options (libdlpx's
    # path, the rpath, the version script in the cache) go in a response file instead.
    if language == "cuda":
        try:
            _toolchain.compiler("cuda")
        except cpp.BuildError as err:
            pytest.skip(str(err))
    odd = tmp_path / "lib, 'odd' \"dir\" \\ x"
    odd.mkdir()
    library = odd / "libdlpx.so"
    library.write_bytes(open(dlpx.library_path(), "rb").read())
    spaced = tmp_path / "user rpath"  # a -Wl, flag of the caller's, with a space nvcc splits at
    code = ("import sys, dlpx, dlpx.cpp\n"
            f"sources = {{{language + '_sources'!r}: {answer(5)!r}}}\n"
            f"path = dlpx.cpp.build_inline('odd', extra_ldflags=[{'-Wl,-rpath,' + str(spaced)!r}], **sources)\n"
            "print(path); sys.exit(dlpx.load_library(path).answer() != 5)\n")
    env = dict(os.environ, DLPX_LIBRARY=str(library), DLPX_CACHE_DIR=str(tmp_path / "ca,che dir"),
               DLPX_CUDA_ARCH_LIST="9.0")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    path = done.stdout.strip().splitlines()[-1]
    assert path.startswith(str(tmp_path / "ca,che dir"))
    dynamic = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    assert f"[{odd}]" in dynamic or f"{odd}:" in dynamic or f":{odd}" in dynamic, dynamic  # one path whatever it holds
    assert str(spaced) in dynamic, dynamic


def test_a_relative_include_flag_is_read_where_the_call_is_made(tmp_path, monkeypatch):
    for value in (2, 3):
        (tmp_path / f"in{value}" / "inc").mkdir(parents=True)
        (tmp_path / f"in{value}" / "inc" / "factor.h").write_text(f"#define FACTOR {value}\n")
    source = "#include <factor.h>\n" + answer("FACTOR")
    # gcc's long spelling too (the second directory got the first one's build).
    for flag in ("-Iinc", "--include-directory=inc"):
        got = []
        for value in (2, 3):
            monkeypatch.chdir(tmp_path / f"in{value}")
            got.append(cpp.load_inline("relative", c_sources=source, extra_cflags=[flag]).answer())
        assert got == [2, 3], flag


def test_the_module_is_named_as_the_call_names_it(tmp_path):
    # The file is lib<name>.so: the loader takes a leading `lib` off (`library` was `rary`).
    for name in ("library", "libfoo", "plain"):
        lib = cpp.load_inline(name, c_sources=answer(7))
        assert lib.__name__ == name and os.path.basename(lib.__file__) == f"lib{name}.so"
        assert lib.answer() == 7


def test_a_header_saved_during_the_build_is_built_again(tmp_path, monkeypatch):
    # A compiler that rewrites the header once right after compiling: the library built from the
    # old text must not be filed under the new one.
    header = tmp_path / "factor.h"
    header.write_text("#define FACTOR 2\n")
    editing = tmp_path / "editcc"
    editing.write_text(f'#!/bin/sh\ncc "$@" || exit $?\n[ -e {tmp_path}/edited ] && exit 0\n'
                       f'touch {tmp_path}/edited; sleep 0.05; echo "#define FACTOR 3" > {header}\n')
    editing.chmod(0o755)
    monkeypatch.setenv("CC", str(editing))
    source = "#include <factor.h>\n" + answer("FACTOR")
    assert cpp.load_inline("saved", c_sources=source, extra_include_paths=[str(tmp_path)]).answer() == 3


def test_files_dated_ahead_of_the_clock_build_and_a_later_save_builds_anew(tmp_path):
    # A time past the build's end (a file from an archive, a clock ahead of ours) read as a save
    # during the build at every try: "its sources or headers kept changing".
    header, source = tmp_path / "factor.h", tmp_path / "ahead.c"
    header.write_text("#define FACTOR 2\n")
    source.write_text("#include <dlpx/kernel.h>\n#include <factor.h>\n" + answer("FACTOR"))
    ahead = time.time() + 600
    for path in (header, source):
        os.utime(path, (ahead, ahead))
    first = cpp.load("ahead", [str(source)], extra_include_paths=[str(tmp_path)])
    assert first.answer() == 2
    header.write_text("#define FACTOR 3\n")  # saved now: an earlier time than the one it had
    assert cpp.load("ahead", [str(source)], extra_include_paths=[str(tmp_path)]).answer() == 3


def test_a_source_saved_between_its_reading_and_its_compile_is_not_filed_under_the_old_text(tmp_path, monkeypatch):
    # The source is saved while the build waits for its entry's lock (another thread building it,
    # or, for CUDA, nvidia-smi): what is compiled then is the new text, which must not be filed
    # under the old text's key, where the old text would find it later.
    source, text = tmp_path / "answer.c", lambda value: "#include <dlpx/kernel.h>\n" + answer(value)
    source.write_text(text(1))
    lock_of = cpp._lock_of

    def saved_while_waiting(home):
        if not (tmp_path / "edited").exists():
            (tmp_path / "edited").touch()
            source.write_text(text(2))
            time.sleep(0.1)  # the wait goes on after the save
        return lock_of(home)

    monkeypatch.setattr(cpp, "_lock_of", saved_while_waiting)
    assert cpp.load("saved_source", str(source)).answer() == 2
    source.write_text(text(1))
    assert cpp.load("saved_source", str(source)).answer() == 1


def test_a_changed_archive_a_link_flag_names_or_nvcc_s_flag_variable_builds_anew(tmp_path, monkeypatch):
    # What the compilers read besides the sources: a library file named in extra_ldflags (by its
    # size and time) and $NVCC_APPEND_FLAGS and its kin are part of the key.
    archive = tmp_path / "libvalue.a"

    def make_archive(value):
        (tmp_path / "value.c").write_text(f"int value(void) {{ return {value}; }}\n")
        subprocess.run(["cc", "-O2", "-fPIC", "-c", str(tmp_path / "value.c"), "-o", str(tmp_path / "value.o")],
                       check=True)
        archive.unlink(missing_ok=True)
        subprocess.run(["ar", "rcs", str(archive), str(tmp_path / "value.o")], check=True)

    source = "int value(void);\n" + answer("value()")
    make_archive(1)
    first = cpp.load_inline("archived", c_sources=source, extra_ldflags=[str(archive)]).answer()
    time.sleep(0.01)
    make_archive(2)
    second = cpp.load_inline("archived", c_sources=source, extra_ldflags=[str(archive)]).answer()
    assert (first, second) == (1, 2)
    # Named inside a -Wl, list, and a response file of compiler flags.
    listed = [f"-Wl,--whole-archive,{archive},--no-whole-archive"]
    assert cpp.load_inline("archived", c_sources=source, extra_ldflags=listed).answer() == 2
    time.sleep(0.01)
    make_archive(3)
    assert cpp.load_inline("archived", c_sources=source, extra_ldflags=listed).answer() == 3
    options = tmp_path / "options.rsp"
    options.write_text("-DVALUE=4\n")
    assert cpp.load_inline("optioned", c_sources=answer("VALUE"), extra_cflags=[f"@{options}"]).answer() == 4
    time.sleep(0.01)
    options.write_text("-DVALUE=55\n")
    assert cpp.load_inline("optioned", c_sources=answer("VALUE"), extra_cflags=[f"@{options}"]).answer() == 55
    keys = set()
    for flags in ("", "-DV=1", "-DV=2"):
        monkeypatch.setenv("NVCC_APPEND_FLAGS", flags)
        keys.add(os.path.dirname(os.path.dirname(cpp.build_inline("flagged", c_sources=answer(1)))))
    assert len(keys) == 3


def test_a_relative_compiler_is_the_one_its_path_names_from_where_the_call_is_made(tmp_path, monkeypatch):
    # Two directories, each with ./bin/cc defining VALUE otherwise: the name alone was the key's.
    for value in (1, 2):
        (tmp_path / str(value) / "bin").mkdir(parents=True)
        wrapper = tmp_path / str(value) / "bin" / "cc"
        wrapper.write_text(f'#!/bin/sh\nexec cc -DVALUE={value} "$@"\n')
        wrapper.chmod(0o755)
    monkeypatch.setenv("CC", "./bin/cc")
    got = []
    for value in (1, 2):
        monkeypatch.chdir(tmp_path / str(value))
        got.append(cpp.load_inline("relative_cc", c_sources=answer("VALUE")).answer())
    assert got == [1, 2]
    monkeypatch.setenv("CC", '"cc')
    with pytest.raises(cpp.BuildError, match=r"\$CC is no command line"):
        cpp.build_inline("unquoted", c_sources=answer(1))


def test_compilers_with_arguments_flags_of_any_iterable_and_sources_in_latin1(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", "cc -DVALUE=5")
    assert cpp.load_inline("worded", c_sources=answer("VALUE")).answer() == 5
    monkeypatch.delenv("CC")
    flags = (flag for flag in ["-DVALUE=6"])
    assert cpp.load_inline("generated", c_sources=answer("VALUE"), extra_cflags=flags).answer() == 6
    latin1 = tmp_path / "latin1.c"
    latin1.write_bytes(b"/* caf\xe9 */\n#include <dlpx/kernel.h>\n" + answer(7).encode())
    assert cpp.load("latin1", [str(latin1)]).answer() == 7
    for bad, error in ((123, ValueError), ("x" * 129, ValueError)):
        with pytest.raises(error, match="is no identifier"):
            cpp.build_inline(bad, c_sources=answer(1))
    with pytest.raises(TypeError, match="c sources are a str or a sequence of str"):
        cpp.build_inline("number", c_sources=123)
    with pytest.raises(TypeError, match="sources is a path or a sequence of paths"):
        cpp.build("bytes", b"/x.c")


def test_a_failing_nvidia_smi_leaves_nvcc_its_default(tmp_path, monkeypatch):
    try:
        _toolchain.compiler("cuda")
    except cpp.BuildError as err:
        pytest.skip(str(err))
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"\n"
                   "exit 9\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:{os.environ['PATH']}")
    monkeypatch.delenv("DLPX_CUDA_ARCH_LIST", raising=False)
    monkeypatch.setattr(_toolchain, "_CAPABILITIES", [])
    source = "__global__ void k() {}\n" + answer(8)
    assert dlpx.load_library(cpp.build_inline("smi", cuda_sources=source,
                                              extra_ldflags=["-Wl,--build-id"])).answer() == 8

"""The Python tests' one C and C++ compiler driver: the interpreter's own compilers (sysconfig's
CC and CXX, those an extension build of this Python uses), warnings as errors, the repository's
include/ first. hostile_producer.py builds its producer with it, test_docs.py the docs' examples.
(Out-of-tree CMake builds, as a user makes them, are examples_build.py's.)"""

import os
import re
import shlex
import shutil
import subprocess
import sysconfig

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
INCLUDE = os.path.join(REPO, "include")  # <dlpx/dlpx.h>, <dlpx/dlpx.hpp>
WARNINGS = ("-Wall", "-Wextra", "-Werror")
# Each language's sysconfig variable, the compiler when the variable is empty, and its standard
# (the oldest the C tests build with: C11, C++17).
LANGUAGES = {
    "c": ("CC", "cc", "-std=c11"),
    "c++": ("CXX", "c++", "-std=c++17"),
}


class NoCompiler(Exception):
    """This machine lacks the compiler the interpreter was built with."""


def compiler(language):
    """The compiler command for "c" or "c++"; NoCompiler when it is not on PATH."""
    variable, default, _ = LANGUAGES[language]
    command = shlex.split(sysconfig.get_config_var(variable) or default)
    if shutil.which(command[0]) is None:
        raise NoCompiler(f"no {language} compiler: {command[0]} (sysconfig's {variable}) is not on PATH")
    return command


def build(language, sources, output, flags=(), libraries=(), standard=True):
    """Compiles (and links, unless `flags` has -c) `sources` into `output`, `libraries` after them
    as the linker wants; the finished process, its command line in `.args`. `standard=False`
    leaves the compiler's default dialect."""
    dialect = [LANGUAGES[language][2]] if standard else []
    command = [*compiler(language), *dialect, *WARNINGS, f"-I{INCLUDE}", *flags, *sources, *libraries, "-o", output]
    return subprocess.run(command, capture_output=True, text=True)


def failure(done):
    """What a failed `build` says: its command and the compiler's output."""
    return f"{shlex.join(done.args)} failed:\n{done.stdout}{done.stderr}"


def link_dlpx(directory):
    """Linker flags for a program that uses the libdlpx this test run loads (dlpx.library_path()):
    `directory` gets that library under its SONAME, as an install has it, and the program finds
    it there at run time (rpath)."""
    import dlpx

    with open(os.path.join(REPO, "CMakeLists.txt"), encoding="utf-8") as f:
        soname = re.search(r'set\(DLPX_SONAME "([^"]+)"\)', f.read()).group(1)  # build.rs's -soname
    os.symlink(dlpx.library_path(), os.path.join(directory, soname))
    os.symlink(soname, os.path.join(directory, "libdlpx.so"))
    return [f"-L{directory}", "-ldlpx", f"-Wl,-rpath,{directory}"]


def skip_or_fail(reason):
    """A tool this machine lacks: a skip, or a failure under DLPX_REQUIRE_ALL_TESTS (CI)."""
    if os.environ.get("DLPX_REQUIRE_ALL_TESTS"):
        pytest.fail(reason)
    pytest.skip(reason)


def kernel_library(tmp_path_factory, language, source, name, flags=()):
    """A kernel library (include/dlpx/kernel.h or kernel.hpp) built from `source` as a user builds
    one: shared, hidden visibility, linked to the libdlpx this test run loads; its path, lib<name>.so
    in a new directory. A missing compiler skips (fails under DLPX_REQUIRE_ALL_TESTS)."""
    directory = tmp_path_factory.mktemp(name)
    path = os.path.join(directory, f"lib{name}.so")
    try:
        done = build(language, [source], path, flags=["-shared", "-fPIC", "-fvisibility=hidden", *flags],
                     libraries=link_dlpx(str(directory)))
    except NoCompiler as missing:
        skip_or_fail(str(missing))
    assert done.returncode == 0, failure(done)
    return path


def dynamic_symbols(path):
    """`nm -D path`'s lines, each split into its fields (the name last); nm's failure skips (fails
    under DLPX_REQUIRE_ALL_TESTS)."""
    done = subprocess.run(["nm", "-D", path], capture_output=True, text=True)
    if done.returncode != 0:
        skip_or_fail(f"nm -D failed: {done.stderr}")
    return [line.split() for line in done.stdout.splitlines() if line.strip()]

"""Kernel libraries built from Python: ``load_inline`` compiles C, C++ or CUDA source text into a
kernel library and loads it, ``load`` does the same for source files (docs/kernels.md,
"Building from Python"). What ``tvm_ffi.cpp.load_inline`` and ``torch.utils.cpp_extension`` do
for their kernels, for dlpx's: no CMake, no Python in the library, one build per source.

The build is the one ``dlpx_add_kernel_library`` makes with CMake (C11, C++17, CUDA C++17 with
the runtime linked statically, hidden visibility, ``dlpx_kernel_library`` the one export), with
the compilers ``$CC`` (else ``cc``), ``$CXX`` (else ``c++``) and ``$NVCC`` (else ``$CUDA_HOME``'s,
the one on ``PATH``, ``/usr/local/cuda``'s, or PyPI's ``nvidia-cuda-nvcc``). It is cached: a
directory per name and hash of the sources, flags and compilers (under ``$DLPX_CACHE_DIR``, else
``$XDG_CACHE_HOME/dlpx``, else ``~/.cache/dlpx``), in it one build per content of the headers the
sources included, so that a changed header builds anew and an unchanged call compiles nothing.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import types
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

import dlpx

__all__ = ["BuildError", "build", "build_inline", "include_dir", "load", "load_inline"]

Sources = Union[str, Sequence[str], None]
Flags = Optional[Sequence[str]]

_HERE = os.path.dirname(os.path.abspath(__file__))
# A source checkout run with PYTHONPATH=python: the headers are the repository's own.
_SOURCE_INCLUDE = os.path.join(os.path.dirname(os.path.dirname(_HERE)), "include")
# What each language compiles by (the file name's ending) and the header an inline source starts with.
_LANGUAGES = {".c": "c", ".cc": "c++", ".cpp": "c++", ".cxx": "c++", ".cu": "cuda"}
_PRELUDE = {"c": "#include <dlpx/kernel.h>", "c++": "#include <dlpx/kernel.hpp>", "cuda": "#include <dlpx/kernel.h>"}
_INLINE_FILE = {"c": "{}.c", "c++": "{}.cpp", "cuda": "{}.cu"}
# The one symbol a kernel library exports (kernel.h), as dlpx_add_kernel_library's version script says.
_EXPORTS = "{ global: dlpx_kernel_library; local: *; };\n"


class BuildError(RuntimeError):
    """A kernel library that did not build: the command that failed and what the compiler said."""


def include_dir() -> str:
    """The directory holding ``dlpx/kernel.h`` and the other headers: the installed package's, else
    the source tree's (dlpx run from a checkout). FileNotFoundError when neither has them."""
    for path in (os.path.join(_HERE, "include"), _SOURCE_INCLUDE):
        if os.path.isfile(os.path.join(path, "dlpx", "kernel.h")):
            return path
    raise FileNotFoundError(f"dlpx: no headers at {os.path.join(_HERE, 'include')}: this dlpx ({_HERE}) is not an "
                            "installed package (pip install . installs the C/C++ build files beside it)")


def load_inline(name: str, *, c_sources: Sources = None, cpp_sources: Sources = None, cuda_sources: Sources = None,
                extra_cflags: Flags = None, extra_cuda_cflags: Flags = None, extra_ldflags: Flags = None,
                extra_include_paths: Flags = None, build_directory: Optional[str] = None,
                verbose: bool = False) -> types.ModuleType:
    """The kernel library built from source text (``build_inline``), loaded (``dlpx.load_library``).

    ``c_sources``, ``cpp_sources``, ``cuda_sources``: a str or a sequence of str each, joined into
    one C, C++ or CUDA file that starts with ``#include <dlpx/kernel.h>`` (C, CUDA) or
    ``<dlpx/kernel.hpp>`` (C++); its kernels are exported with ``DLPX_EXPORT_KERNEL`` or
    ``DLPX_EXPORT_TYPED_KERNEL``. The same call again, in this process or another, compiles
    nothing and gives the same module; a changed source or header gives a new library."""
    return dlpx.load_library(build_inline(
        name, c_sources=c_sources, cpp_sources=cpp_sources, cuda_sources=cuda_sources, extra_cflags=extra_cflags,
        extra_cuda_cflags=extra_cuda_cflags, extra_ldflags=extra_ldflags, extra_include_paths=extra_include_paths,
        build_directory=build_directory, verbose=verbose))


def load(name: str, sources: Union[str, Sequence[str]], *, extra_cflags: Flags = None,
         extra_cuda_cflags: Flags = None, extra_ldflags: Flags = None, extra_include_paths: Flags = None,
         build_directory: Optional[str] = None, verbose: bool = False) -> types.ModuleType:
    """The kernel library built from source files (``build``), loaded (``dlpx.load_library``)."""
    return dlpx.load_library(build(
        name, sources, extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags, extra_ldflags=extra_ldflags,
        extra_include_paths=extra_include_paths, build_directory=build_directory, verbose=verbose))


def build_inline(name: str, *, c_sources: Sources = None, cpp_sources: Sources = None, cuda_sources: Sources = None,
                 extra_cflags: Flags = None, extra_cuda_cflags: Flags = None, extra_ldflags: Flags = None,
                 extra_include_paths: Flags = None, build_directory: Optional[str] = None,
                 verbose: bool = False) -> str:
    """The path of the kernel library built from source text (see ``load_inline``)."""
    texts = {"c": c_sources, "c++": cpp_sources, "cuda": cuda_sources}
    units = [(_INLINE_FILE[language].format(name), language, _inline_text(language, text))
             for language, text in texts.items() if text is not None]
    return _build(name, lambda: units, extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths,
                  build_directory, verbose)


def build(name: str, sources: Union[str, Sequence[str]], *, extra_cflags: Flags = None,
          extra_cuda_cflags: Flags = None, extra_ldflags: Flags = None, extra_include_paths: Flags = None,
          build_directory: Optional[str] = None, verbose: bool = False) -> str:
    """The path of the kernel library built from source files: ``.c`` (C11), ``.cc``/``.cpp``/``.cxx``
    (C++17), ``.cu`` (CUDA C++17). A changed file, or a header it includes, builds anew."""
    paths = [sources] if isinstance(sources, (str, os.PathLike)) else sources
    if isinstance(paths, bytes) or not all(isinstance(p, (str, os.PathLike)) for p in paths):
        raise TypeError(f"dlpx.cpp: sources is a path or a sequence of paths, got {sources!r}")
    absolute = [os.path.abspath(os.fspath(path)) for path in paths]
    for path in absolute:
        if os.path.splitext(path)[1] not in _LANGUAGES:
            raise ValueError(f"dlpx.cpp: {path}: not a C, C++ or CUDA source (the name ends in "
                             f"{', '.join(_LANGUAGES)})")

    def units() -> List[Unit]:
        # Read as the compiler reads them: bytes (a comment in Latin-1 is no error).
        found = []
        for path in absolute:
            with open(path, "rb") as f:
                found.append((path, _LANGUAGES[os.path.splitext(path)[1]], f.read().decode("utf-8", "surrogateescape")))
        return found

    return _build(name, units, extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths,
                  build_directory, verbose)


# ---- the build ---------------------------------------------------------------------------------

# One translation unit: its file (a path, or the name an inline source gets), language and text.
Unit = Tuple[str, str, str]


def _inline_text(language: str, text: Union[str, Sequence[str]]) -> str:
    parts = [text] if isinstance(text, str) else list(text) if isinstance(text, (list, tuple)) else None
    if parts is None or not all(isinstance(part, str) for part in parts):
        raise TypeError(f"dlpx.cpp: {language} sources are a str or a sequence of str")
    # Written to a file beside the builds, which the compiler's messages name by its own lines.
    return f"{_PRELUDE[language]}\n" + "\n".join(parts) + "\n"


def _build(name: str, read_units: Callable[[], List[Unit]], cflags: Flags, cuda_cflags: Flags, ldflags: Flags,
           include_paths: Flags, build_directory: Optional[str], verbose: bool) -> str:
    # A header or source changed while it was compiled: built again from what it is now.
    for _ in range(3):
        try:
            return _build_once(name, read_units(), cflags, cuda_cflags, ldflags, include_paths, build_directory,
                               verbose)
        except _Raced:
            continue
    raise BuildError(f"dlpx.cpp: {name}: its sources or headers kept changing while it was built")


class _Raced(Exception):
    """A dependency changed during the build: the library is not published."""


def _build_once(name: str, units: List[Unit], cflags: Flags, cuda_cflags: Flags, ldflags: Flags,
                include_paths: Flags, build_directory: Optional[str], verbose: bool) -> str:
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", name):
        raise ValueError(f"dlpx.cpp: the name {name!r} is no identifier of 128 characters at most (it names the library and its module)")
    if not units:
        raise ValueError(f"dlpx.cpp: {name}: no sources")
    flags = {"c": _flags(cflags, "extra_cflags"), "cuda": _flags(cuda_cflags, "extra_cuda_cflags"),
             "ld": _flags(ldflags, "extra_ldflags")}
    includes = [include_dir()] + [os.path.abspath(p) for p in _flags(include_paths, "extra_include_paths")]
    languages = {language for _, language, _ in units}
    tools = {language: _compiler(language) for language in languages}
    commands = _Commands(name, tools, flags, includes)
    # Where the compilers look for headers besides the -I paths: the environment's, and the working
    # directory for a relative path in a flag (`-Iinclude`).
    searched = [os.environ.get(v) for v in ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH")]
    relative = any(_names_relative_path(flag) for flag in flags["c"] + flags["cuda"] + flags["ld"])
    key = _digest(json.dumps([name, dlpx.__version__, dlpx.library_path(), units, flags, includes,
                              sorted(tools.items()), commands.cuda_arch, searched,
                              os.getcwd() if relative else None]).encode())
    # build_directory stands for the cache's root: a changed source still builds anew.
    root = os.path.abspath(build_directory or _cache_dir())
    home = os.path.join(root, f"{name}_{key[:16]}")
    os.makedirs(home, exist_ok=True)
    # Threads of this process asking for one library build it once; other processes may build it
    # too (each aside, moved into place whole).
    with _lock_of(home):
        return _built(home, name) or _compile_and_link(home, name, units, commands, verbose)


_LOCKS: Dict[str, threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()


def _lock_of(home: str) -> threading.Lock:
    with _LOCKS_LOCK:
        return _LOCKS.setdefault(home, threading.Lock())


def _flags(flags: Flags, what: str) -> List[str]:
    if flags is None:
        return []
    listed = list(flags) if not isinstance(flags, (str, bytes)) and hasattr(flags, "__iter__") else None
    if listed is None or not all(isinstance(flag, str) for flag in listed):
        raise TypeError(f"dlpx.cpp: {what} is a sequence of str (one flag each), got {flags!r}")
    return listed


def _cache_dir() -> str:
    base = os.environ.get("DLPX_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "dlpx")
    return os.path.join(base, "kernels")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _built(home: str, name: str) -> Optional[str]:
    """The library built before for the headers as they are now, if there is one."""
    try:
        with open(os.path.join(home, "headers.json"), encoding="utf-8") as f:
            headers = json.load(f)
    except (OSError, ValueError):
        return None
    library = os.path.join(home, _headers_digest(headers)[:16], f"{name}.so")
    return library if os.path.isfile(library) else None


def _headers_digest(headers: Sequence[str]) -> str:
    """The headers' content as one hash (a header gone is part of it)."""
    parts: List[Tuple[str, Optional[str]]] = []
    for path in headers:
        try:
            with open(path, "rb") as f:
                parts.append((path, _digest(f.read())))
        except OSError:
            parts.append((path, None))
    return _digest(json.dumps(parts).encode())


def _compile_and_link(home: str, name: str, units: List[Unit], commands: "_Commands", verbose: bool) -> str:
    # Built aside, then moved into place: a build running in another process meanwhile sees either
    # none or a whole library.
    _forget_abandoned(home)
    work = tempfile.mkdtemp(prefix="build.", dir=home)
    # What changes from here on may or may not be in the build (a file's time is the kernel's
    # coarse clock: a margin).
    started = time.time_ns() - 20_000_000
    try:
        objects: List[str] = []
        headers: Set[str] = set()
        for index, (path, language, text) in enumerate(units):
            source = path
            if not os.path.isabs(path):  # an inline source: kept beside its builds, to read
                source = os.path.join(home, path)
                _write_atomically(source, text, work)
            obj, depfile = os.path.join(work, f"{index}.o"), os.path.join(work, f"{index}.d")
            _run(commands.compile(language, source, obj, depfile), name, verbose)
            headers.update(p for p in _depfile_paths(depfile) if os.path.abspath(p) != source)
            objects.append(obj)
        with open(os.path.join(work, "exports.map"), "w") as f:
            f.write(_EXPORTS)
        linked = os.path.join(work, f"{name}.so")
        _run(commands.link(objects, os.path.join(work, "exports.map"), linked), name, verbose)
        listed = sorted(os.path.abspath(p) for p in headers)
        watched = listed + [path for path, _, _ in units if os.path.isabs(path)]
        if any(_modified_since(path, started) for path in watched):
            raise _Raced()
        place = os.path.join(home, _headers_digest(listed)[:16])
        os.makedirs(place, exist_ok=True)
        library = os.path.join(place, f"{name}.so")
        os.replace(linked, library)
        _write_atomically(os.path.join(home, "headers.json"), json.dumps(listed), work)
        return library
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _forget_abandoned(home: str) -> None:
    """Removes what builds killed midway left (a day old: no build still running takes that long)."""
    for work in glob.glob(os.path.join(home, "build.*")):
        try:
            if time.time() - os.stat(work).st_mtime > 86400:
                shutil.rmtree(work, ignore_errors=True)
        except OSError:
            pass


def _modified_since(path: str, since_ns: int) -> bool:
    try:
        return os.stat(path).st_mtime_ns >= since_ns
    except OSError:  # none to have been changed (a header gone is its own content: none)
        return False


def _names_relative_path(flag: str) -> bool:
    """Whether a flag names a path relative to the working directory (`-Iinc`, `-Llib`, `lib.a`)."""
    for prefix in ("-I", "-L", "-isystem", "-iquote", "-idirafter", "-include"):
        if flag.startswith(prefix) and len(flag) > len(prefix):
            return not os.path.isabs(flag[len(prefix):])
    return not flag.startswith("-") and not os.path.isabs(flag)


def _write_atomically(path: str, text: str, work: str) -> None:
    staged = os.path.join(work, os.path.basename(path))
    with open(staged, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(staged, path)


def _depfile_paths(depfile: str) -> List[str]:
    """The prerequisites a compiler's depfile (-MMD) lists: make's syntax, escaped spaces kept."""
    with open(depfile, encoding="utf-8", errors="surrogateescape") as f:
        text = f.read().replace("\\\n", " ")
    paths: List[str] = []
    for rule in text.splitlines():
        _, _, prerequisites = rule.partition(": ")
        # gcc writes ' ' as '\ ', '#' as '\#' and '$' as '$$'; nvcc writes '\ ' alone.
        for token in re.findall(r"(?:\\.|[^ ])+", prerequisites):
            paths.append(re.sub(r"\\([ #])", r"\1", token).replace("$$", "$"))
    # Every path listed, found or not (one not found has a content of its own: none).
    return [p for p in paths if p]


def _run(command: List[str], name: str, verbose: bool) -> None:
    if verbose:
        print(shlex.join(command), file=sys.stderr, flush=True)
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    if verbose and done.stdout:
        print(done.stdout, file=sys.stderr, end="", flush=True)
    if done.returncode != 0:
        raise BuildError(f"dlpx.cpp: building {name} failed (exit status {done.returncode}):\n"
                         f"{shlex.join(command)}\n{done.stdout}")


# ---- compilers ---------------------------------------------------------------------------------


def _compiler(language: str) -> List[str]:
    """The compiler of `language` as a command (`$CC` may be `ccache gcc`), its program resolved to
    a path (its identity is part of the cache key)."""
    variable, default = {"c": ("CC", "cc"), "c++": ("CXX", "c++"), "cuda": ("NVCC", "nvcc")}[language]
    words = shlex.split(os.environ.get(variable, ""))
    named, arguments = (words[0], words[1:]) if words else (None, [])
    candidates = [named] if named else [default]
    if language == "cuda" and not named:
        home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
        candidates = ([os.path.join(home, "bin", "nvcc")] if home else []) + [
            "nvcc", "/usr/local/cuda/bin/nvcc", *_pypi_nvcc()]
    for candidate in candidates:
        found = shutil.which(candidate)
        if found:
            return [found, *arguments]
    tried = ", ".join(candidates)
    raise BuildError(f"dlpx.cpp: no {language} compiler (tried {tried}): install one or set ${variable}")


def _pypi_nvcc() -> List[str]:
    """nvcc from PyPI (nvidia-cuda-nvcc: nvidia/cu13/bin, or nvidia/cuda_nvcc/bin before CUDA 13)."""
    found = []
    for entry in sys.path:
        found += sorted(glob.glob(os.path.join(entry, "nvidia", "*", "bin", "nvcc")))
    return found


def _cuda_arch() -> List[str]:
    """`-gencode` flags for $DLPX_CUDA_ARCH_LIST ("90", "9.0", "sm_90"; spaces, commas or
    semicolons between), else for the GPUs nvidia-smi reports, else none (nvcc's default)."""
    listed = os.environ.get("DLPX_CUDA_ARCH_LIST", "") or _gpu_capabilities()
    arches: List[str] = []
    for item in re.split(r"[\s,;]+", listed.strip()):
        number = item.lower().removeprefix("sm_").replace(".", "") if item else ""
        if not number:
            continue
        if not re.fullmatch(r"\d+[af]?", number):
            raise BuildError(f"dlpx.cpp: {item!r} in DLPX_CUDA_ARCH_LIST is no CUDA architecture (90, 9.0 or sm_90)")
        if number not in arches:
            arches.append(number)
    # The machine code and the PTX, as CMake's CUDA_ARCHITECTURES gives them (a newer GPU runs it).
    return [f"-gencode=arch=compute_{a},code=[sm_{a},compute_{a}]" for a in arches]


_CAPABILITIES: List[str] = []


def _gpu_capabilities() -> str:
    """The compute capabilities nvidia-smi reports ("9.0\n9.0"), asked once a process; "" where it
    is missing or fails (no driver, no device: nvcc's default then)."""
    if not _CAPABILITIES:
        answer = ""
        if shutil.which("nvidia-smi"):
            try:
                done = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=30)
                if done.returncode == 0 and re.fullmatch(r"[\d.\s]*", done.stdout):
                    answer = done.stdout
            except (OSError, subprocess.SubprocessError):
                pass
        _CAPABILITIES.append(answer)
    return _CAPABILITIES[0]


class _Commands:
    """The command lines of one build: dlpx_add_kernel_library's flags (cmake/dlpxKernelLibrary.cmake)."""

    def __init__(self, name: str, tools: Dict[str, List[str]], flags: Dict[str, List[str]], includes: List[str]):
        self.name, self.tools, self.flags = name, tools, flags
        self.includes = [f"-I{path}" for path in includes]
        own = self.flags["cuda"]
        chosen = any(f.startswith(("-arch", "--gpu-architecture", "-gencode", "--generate-code")) for f in own)
        self.cuda_arch = [] if "cuda" not in tools or chosen else _cuda_arch()

    def compile(self, language: str, source: str, obj: str, depfile: str) -> List[str]:
        tool = self.tools[language]
        depend = ["-MMD", "-MF", depfile]  # headers outside system directories
        if language == "cuda":
            return [*tool, "-std=c++17", "-O2", "-Xcompiler", "-fPIC,-fvisibility=hidden", *self.cuda_arch,
                    *self.includes, *self.flags["cuda"], *depend, "-c", source, "-o", obj]
        standard = "-std=c11" if language == "c" else "-std=c++17"
        hidden = ["-fvisibility=hidden"] + (["-fvisibility-inlines-hidden"] if language == "c++" else [])
        return [*tool, standard, "-O2", "-fPIC", *hidden, *self.includes, *self.flags["c"], *depend, "-c", source,
                "-o", obj]

    def link(self, objects: List[str], exports: str, out: str) -> List[str]:
        library = dlpx.library_path()
        # Each linker option one argument of its own: a comma in a path splits `-Wl,` lists.
        linker = ["--exclude-libs", "ALL", f"--version-script={exports}", "-rpath", os.path.dirname(library)]
        if "cuda" in self.tools:
            # nvcc links (the static CUDA runtime, device code): a `-Wl,` flag is the host linker's.
            ldflags = [part for flag in self.flags["ld"] for part in
                       (["-Xlinker", flag[4:]] if flag.startswith("-Wl,") else [flag])]
            return [*self.tools["cuda"], "-shared", "-cudart", "static", *self.cuda_arch, *objects, library,
                    *[part for option in linker for part in ("-Xlinker", option)], *ldflags, "-o", out]
        driver = self.tools.get("c++") or self.tools["c"]
        return [*driver, "-shared", *objects, library, *[part for option in linker for part in ("-Xlinker", option)],
                *self.flags["ld"], "-o", out]

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
import shutil
import tempfile
import threading
import time
import types
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

import dlpx
from dlpx._toolchain import BuildError, Commands, compiler, link, run

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


def include_dir() -> str:
    """The directory holding ``dlpx/kernel.h`` and the other headers: the installed package's, else
    the source tree's (dlpx run from a checkout). FileNotFoundError when neither has them."""
    return _installed_directory("headers", os.path.join("dlpx", "kernel.h"), os.path.join(_HERE, "include"),
                               _SOURCE_INCLUDE)


def _installed_directory(what: str, marker: str, *candidates: str) -> str:
    """The first of `candidates` holding the file `marker`; FileNotFoundError naming what is missing
    and why (a dlpx that pip did not install has no C/C++ build files beside it)."""
    for path in candidates:
        if os.path.isfile(os.path.join(path, marker)):
            return path
    raise FileNotFoundError(f"dlpx: no {what} at {candidates[0]}: this dlpx ({_HERE}) is not an installed package "
                            "(pip install . installs the C/C++ build files beside it)")


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
    # An empty sequence is no source of its language (all empty: "no sources", not an empty library).
    units = [(_INLINE_FILE[language].format(name), language, _inline_text(language, text))
             for language, text in texts.items() if text is not None and not (isinstance(text, (list, tuple)) and not text)]
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
        return [(path, _LANGUAGES[os.path.splitext(path)[1]], _source_text(path)) for path in absolute]

    return _build(name, units, extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths,
                  build_directory, verbose)


def _source_text(path: str) -> str:
    """A source file's text, read as the compiler reads it: bytes (a comment in Latin-1 is no error)."""
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "surrogateescape")


# ---- the build ---------------------------------------------------------------------------------

# One translation unit: its file (a path, or the name an inline source gets), language and text.
Unit = Tuple[str, str, str]


def _inline_text(language: str, text: Union[str, Sequence[str]]) -> str:
    parts = [text] if isinstance(text, str) else list(text) if isinstance(text, (list, tuple)) else None
    if parts is None or not all(isinstance(part, str) for part in parts):
        raise TypeError(f"dlpx.cpp: {language} sources are a str or a sequence of str")
    # Written to a file beside the builds, which the compiler's messages name by its own lines.
    return f"{_PRELUDE[language]}\n" + "\n".join(parts) + "\n"


# The environment variables the compilers read that change what they build.
_ENVIRONMENT = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH", "NVCC_PREPEND_FLAGS",
                "NVCC_APPEND_FLAGS")


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
    tools = {language: compiler(language) for language in languages}
    commands = Commands(name, tools, flags, includes)
    # What the compilers read besides their command line: the environment's header and library
    # paths and nvcc's own flags, the working directory for a relative path in a flag
    # (`-Iinclude`), and the files a flag names (`libfoo.a`, in a `-Wl,` list, `@options`: by size
    # and time).
    environment = [os.environ.get(v) for v in _ENVIRONMENT]
    relative = any(_names_relative_path(flag) for flag in flags["c"] + flags["cuda"] + flags["ld"])
    named = sorted({path for flag in flags["c"] + flags["cuda"] + flags["ld"] for path in _named_files(flag)})
    linked = [(path, os.stat(path).st_size, os.stat(path).st_mtime_ns) for path in named]
    key = _digest(json.dumps([name, dlpx.__version__, dlpx.library_path(), units, flags, includes,
                              sorted(tools.items()), commands.cuda_arch, environment, linked,
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


# A header as last seen: its path, modification time and size, and its content's hash (None: gone).
Seen = Tuple[str, Optional[int], Optional[int], Optional[str]]


def _built(home: str, name: str) -> Optional[str]:
    """The library built before for the headers as they are now, if there is one."""
    try:
        with open(os.path.join(home, "headers.json"), encoding="utf-8") as f:
            recorded = [(str(p), m, n, h) for p, m, n, h in json.load(f)]
    except (OSError, ValueError, TypeError):
        return None
    library = os.path.join(home, _headers_digest(_seen(recorded))[:16], _file_name(name))
    return library if os.path.isfile(library) else None


def _file_name(name: str) -> str:
    """The library's file: `lib<name>.so`, as CMake names one, whose module the loader names
    `name` (it takes a leading `lib` off: `library.so` was the module `rary`)."""
    return f"lib{name}.so"


def _seen(headers: Sequence[Seen]) -> List[Seen]:
    """Each header as it is now: its recorded hash where its time and size are the recorded ones
    (a cached call reads no header: nvcc's list is 56 long), else its content's."""
    now: List[Seen] = []
    for path, mtime, size, content in headers:
        try:
            stat = os.stat(path)
            if (stat.st_mtime_ns, stat.st_size) != (mtime, size) or content is None:
                with open(path, "rb") as f:
                    content = _digest(f.read())
            now.append((path, stat.st_mtime_ns, stat.st_size, content))
        except OSError:
            now.append((path, None, None, None))
    return now


def _headers_digest(headers: Sequence[Seen]) -> str:
    """The headers' content as one hash (a header gone is part of it)."""
    return _digest(json.dumps([(path, content) for path, _, _, content in headers]).encode())


def _compile_and_link(home: str, name: str, units: List[Unit], commands: Commands, verbose: bool) -> str:
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
            run(commands.compile(language, source, obj, depfile), name, verbose)
            headers.update(p for p in _depfile_paths(depfile) if os.path.abspath(p) != source)
            objects.append(obj)
        with open(os.path.join(work, "exports.map"), "w") as f:
            f.write(_EXPORTS)
        linked = os.path.join(work, _file_name(name))
        link(commands, objects, os.path.join(work, "exports.map"), linked, name, verbose, work)
        listed = sorted(os.path.abspath(p) for p in headers)
        files = [(path, text) for path, _, text in units if os.path.isabs(path)]
        # A source saved after it was read for the key (while this waited for another thread's
        # build, or for nvidia-smi) was compiled as it is now: not filed under the old text's key.
        ended = time.time_ns() + 20_000_000
        if any(_modified_between(path, started, ended) for path in listed + [path for path, _ in files]) or any(
                _source_text(path) != text for path, text in files):
            raise _Raced()
        seen = _seen([(path, None, None, None) for path in listed])
        place = os.path.join(home, _headers_digest(seen)[:16])
        os.makedirs(place, exist_ok=True)
        library = os.path.join(place, _file_name(name))
        os.replace(linked, library)
        _write_atomically(os.path.join(home, "headers.json"), json.dumps(seen), work)
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


def _modified_between(path: str, start_ns: int, end_ns: int) -> bool:
    """Whether `path` was saved while the build ran. A time past its end is a clock ahead of ours
    (a file unpacked from an archive, a network file system's), not a save during the build: it
    would read as one at every try. Its time and size are in the headers' key, so a later save
    still builds anew."""
    try:
        return start_ns <= os.stat(path).st_mtime_ns <= end_ns
    except OSError:  # none to have been changed (a header gone is its own content: none)
        return False


def _named_files(flag: str) -> List[str]:
    """The files a flag names that exist: itself (`libfoo.a`), an item of a `-Wl,` list or its
    value (`-Wl,--whole-archive,libv.a`, `-Wl,--version-script=v.map`), a response file (`@f`)."""
    words = [flag]
    if flag.startswith("-Wl,"):
        words += [part for item in flag[4:].split(",") for part in (item, item.partition("=")[2]) if part]
    if flag.startswith("@"):
        words.append(flag[1:])
    return [word for word in words if os.path.isfile(word)]


def _names_relative_path(flag: str) -> bool:
    """Whether a flag names a path relative to the working directory (`-Iinc`, `-Llib`, `lib.a`;
    a long option's value or a linker argument that is a path here: `--include-directory=inc`,
    `-Wl,--version-script=exports.map`)."""
    for prefix in ("-I", "-L", "-isystem", "-iquote", "-idirafter", "-include"):
        if flag.startswith(prefix) and len(flag) > len(prefix):
            return not os.path.isabs(flag[len(prefix):])
    if not flag.startswith("-"):
        return not os.path.isabs(flag)
    values = re.split("[=,]", flag)[1:]
    return any(v and not v.startswith("-") and not os.path.isabs(v) and os.path.exists(v) for v in values)


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
        # gcc writes ' ' as '\ ', a tab as '\<tab>', '#' as '\#' and '$' as '$$'; nvcc writes '\ '
        # alone. (A newline in a path is written as it is: such a header is not seen.)
        for token in re.findall(r"(?:\\.|[^ \t])+", prerequisites):
            paths.append(re.sub(r"\\([ \t#])", r"\1", token).replace("$$", "$"))
    # Every path listed, found or not (one not found has a content of its own: none).
    return [p for p in paths if p]

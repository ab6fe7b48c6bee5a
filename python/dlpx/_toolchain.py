"""The command lines of a kernel library's build (``dlpx.cpp``): the compilers found as
``dlpx_add_kernel_library`` builds with CMake (cmake/dlpxKernelLibrary.cmake), the CUDA
architectures, and running them. Nothing here caches or decides what to build."""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Tuple

import dlpx


class BuildError(RuntimeError):
    """A kernel library that did not build: the command that failed and what the compiler said."""


def run(command: List[str], name: str, verbose: bool) -> None:
    if verbose:
        print(shlex.join(command), file=sys.stderr, flush=True)
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    if verbose and done.stdout:
        print(done.stdout, file=sys.stderr, end="", flush=True)
    if done.returncode != 0:
        raise BuildError(f"dlpx.cpp: building {name} failed (exit status {done.returncode}):\n"
                         f"{shlex.join(command)}\n{done.stdout}")


def link(commands: "Commands", objects: List[str], exports: str, out: str, name: str, verbose: bool,
         work: str) -> None:
    """Runs `commands`' link, its linker options in a response file, named with what it holds when
    the link fails. The file is in `work`, the build's own directory (which a build killed midway
    leaves for the cache to remove), unless its path cannot be a response file's (`@file`: no
    space, no comma); then in the temporary directory."""
    safe = not re.search(r"[\s,]", os.path.abspath(work))
    descriptor, options = tempfile.mkstemp(prefix="dlpx-link.", suffix=".rsp", dir=work if safe else None)
    os.close(descriptor)
    try:
        command = commands.link(objects, exports, out, options)
        with open(options) as f:
            held = f"{options} holds:\n{f.read()}"
        if verbose:
            print(held, file=sys.stderr, end="", flush=True)
        try:
            run(command, name, verbose)
        except BuildError as err:
            raise BuildError(f"{err}\n{held}") from None
    finally:
        os.unlink(options)


def compiler(language: str) -> List[str]:
    """The compiler of `language` as a command (`$CC` may be `ccache gcc`), its program resolved to
    a path (its identity is part of the cache key)."""
    variable, default = {"c": ("CC", "cc"), "c++": ("CXX", "c++"), "cuda": ("NVCC", "nvcc")}[language]
    try:
        words = shlex.split(os.environ.get(variable, ""))
    except ValueError as exc:  # an unclosed quote
        raise BuildError(f"dlpx.cpp: ${variable} is no command line ({exc}): {os.environ.get(variable)!r}") from None
    named, arguments = (words[0], words[1:]) if words else (None, [])
    candidates = [named] if named else [default]
    if language == "cuda" and not named:
        home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
        candidates = ([os.path.join(home, "bin", "nvcc")] if home else []) + [
            "nvcc", "/usr/local/cuda/bin/nvcc", *_pypi_nvcc()]
    for candidate in candidates:
        found = shutil.which(candidate)
        if found:
            # Absolute: a relative one (`./bin/cc`) names another program in another directory.
            return [os.path.abspath(found), *arguments]
    tried = ", ".join(candidates)
    raise BuildError(f"dlpx.cpp: no {language} compiler (tried {tried}): install one or set ${variable}")


# nvcc from PyPI by the sys.path it was looked for on: a cached build's call stays near a millisecond.
_PYPI_NVCC: Dict[Tuple[str, ...], List[str]] = {}


def _pypi_nvcc() -> List[str]:
    """nvcc from PyPI (nvidia-cuda-nvcc: nvidia/cu13/bin, or nvidia/cuda_nvcc/bin before CUDA 13)."""
    path = tuple(sys.path)
    if path not in _PYPI_NVCC:
        _PYPI_NVCC[path] = [found for entry in path
                            for found in sorted(glob.glob(os.path.join(entry, "nvidia", "*", "bin", "nvcc")))]
    return _PYPI_NVCC[path]


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


class Commands:
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
        # A call of an undeclared function (`dlpx_call_retrun_int`) is C++'s error, and C's too:
        # a warning would leave an undefined symbol that only the load finds.
        strict = ["-Werror=implicit-function-declaration"] if language == "c" else []
        return [*tool, standard, "-O2", "-fPIC", *hidden, *strict, *self.includes, *self.flags["c"], *depend, "-c",
                source, "-o", obj]

    def link(self, objects: List[str], exports: str, out: str, options: str) -> List[str]:
        """The link of `objects` into `out`. The linker's own options, paths of the cache and of
        libdlpx among them, are written to `options`, a response file of the host compiler's (`@file`,
        its path free of spaces and commas): nvcc splits `-Xlinker` values at commas, and gcc a
        `-Wl,` list."""
        library = dlpx.library_path()
        # libdlpx needed whatever the order (a linker that defaults to --as-needed drops a library
        # named before the objects that use it: nvcc puts the file first).
        linker = ["--push-state", "--no-as-needed", library, "--pop-state", "--exclude-libs", "ALL",
                  f"--version-script={exports}", "-rpath", os.path.dirname(library)]
        cuda = "cuda" in self.tools
        # nvcc links (the static CUDA runtime, device code): a `-Wl,` flag is the host linker's,
        # passed as -Xlinker in its place, but one with a space in the host compiler's response
        # file, where nvcc cannot split it (its place among the other flags then lost).
        host = [flag for flag in self.flags["ld"] if cuda and flag.startswith("-Wl,") and any(c.isspace() for c in flag)]
        with open(options, "w") as f:
            f.write("".join(f"-Xlinker {_response_quoted(option)}\n" for option in linker))
            f.write("".join(f"{_response_quoted(flag)}\n" for flag in host))
        if cuda:
            ldflags = [part for flag in self.flags["ld"] if flag not in host for part in
                       (["-Xlinker", flag[4:]] if flag.startswith("-Wl,") else [flag])]
            return [*self.tools["cuda"], "-shared", "-cudart", "static", *self.cuda_arch, *objects,
                    "-Xcompiler", f"@{options}", *ldflags, "-o", out]
        driver = self.tools.get("c++") or self.tools["c"]
        return [*driver, "-shared", *objects, f"@{options}", *self.flags["ld"], "-o", out]


def _response_quoted(option: str) -> str:
    """`option` as one argument of a GNU response file (gcc's, ld's): every character but a
    letter, a digit and `/._=-` escaped with a backslash."""
    return re.sub(r"([^\w/.=-])", r"\\\1", option)

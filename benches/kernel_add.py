"""A kernel that allocates its output: `add(a, b)` of two 16-element float32 torch CPU tensors,
returning a new torch.Tensor, written four ways and timed interleaved in one process.

- dlpx: `add` of examples/kernel_library (a kernel library with no Python in it) loaded with
  `dlpx.load_library`; its output comes from torch's allocator (the first argument's framework)
  and is returned as a torch.Tensor;
- tvm-ffi: the same kernel as `tvm_ffi.cpp.load_inline` builds it (benches/kernel_add/tvm_add.cc):
  `ffi::TensorView` arguments, the output from the caller's environment allocator
  (`ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, ...)`: torch's, when torch tensors are passed),
  returned by tvm-ffi as a torch.Tensor;
- nanobind: the same kernel with `nb::ndarray<nb::device::cpu>` arguments, the output malloc'd and
  owned by a capsule, returned as `nb::ndarray<nb::pytorch>` (benches/kernel_add/nb_add.cpp);
- C extension: examples/add_extension, the CPython extension a kernel author writes on dlpx's C
  API (`dlpx_view_of`, `dlpx_allocate_like`, `dlpx_to_py_like`): a reference, with no target.

All four check the same things (CPU, equal dtypes, a supported dtype, equal shapes) and add with
the same loop over any strides (benches/kernel_add/add_strided.h, the example's). They are built
with CMake and tvm-ffi's ninja build into build/bench/kernel_add; a rebuild only recompiles what
changed. Issue 43's target: dlpx's call at most 0.6x tvm-ffi's and at most 0.6x nanobind's.

A column that cannot be built says why ("not available: <reason>"): tvm_ffi.cpp.load_inline
builds with ninja (the `ninja` package from PyPI, which tests/requirements.txt installs, or a
`ninja` on PATH).

    python benches/kernel_add.py [--quick] [--instructions [N]]

`--instructions` counts instead of timing (valgrind's callgrind, repeatable where timings on a
shared machine are not): instructions per call of each column over N calls (default 3000), the
whole `f(a, b)` statement (the call, and the output's deallocation when the next result replaces
it), less the same loop calling `operator.is_(a, b)` (a C function that does nothing).
"""

from __future__ import annotations

import operator
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

import dlpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_timing import call_timer, calls_per_sample  # noqa: E402
from instructions import called_inclusive, dumped_totals  # noqa: E402

QUICK = "--quick" in sys.argv
ROUNDS = 3 if QUICK else 21
SAMPLE = 0.002 if QUICK else 0.01  # seconds per timed sample
WARM = 0.01 if QUICK else 0.1
TARGET = 0.6
TARGETED = ("tvm-ffi", "nanobind")  # the peers issue 43 sets the target against
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = os.path.join(ROOT, "benches", "kernel_add")
OUT = os.path.join(ROOT, "build", "bench", "kernel_add")


def include_dir() -> str:
    """dlpx's headers: the installed package's, else the source tree's (an in-tree run)."""
    installed = os.path.join(os.path.dirname(dlpx.__file__), "include")
    return installed if os.path.isdir(installed) else os.path.join(ROOT, "include")


def run(command: list[str]) -> None:
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:2])} failed:\n{done.stdout}")


def build_cmake() -> None:
    """nb_add and the example kernel library, with CMake (nanobind from PyPI)."""
    import nanobind

    library = dlpx.library_path()
    run(["cmake", "-S", SOURCES, "-B", OUT, "-DCMAKE_BUILD_TYPE=Release", f"-DPython_EXECUTABLE={sys.executable}",
         f"-Dnanobind_DIR={nanobind.cmake_dir()}", f"-DDLPX_INCLUDE_DIR={include_dir()}",
         f"-DDLPX_LIBRARY={library}", f"-DDLPX_LIBRARY_DIR={os.path.dirname(library)}"])
    run(["cmake", "--build", OUT, "-j", "2"])


def ninja_on_path() -> str | None:
    """Puts a ninja on PATH for tvm_ffi.cpp.load_inline (which runs `ninja` by name): the PyPI
    package's binary (installed beside this Python but not on PATH when the venv is not
    activated), else one already on PATH. None when there is none."""
    try:
        import ninja

        if ninja.BIN_DIR:  # "" where the package cannot find its binary: not the current directory
            os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
    except ImportError:
        pass
    return shutil.which("ninja")


def tvm_ffi_add():
    """The tvm-ffi add, built by load_inline; or the reason it is not available (a str)."""
    try:
        import tvm_ffi.cpp
    except ImportError as exc:
        return f"not available: tvm_ffi.cpp cannot be imported ({exc})"
    if ninja_on_path() is None:
        return "not available: no ninja (tvm_ffi.cpp.load_inline builds with it: pip install ninja)"
    with open(os.path.join(SOURCES, "tvm_add.cc")) as f:
        source = f.read()
    build_directory = os.path.join(OUT, "tvm_add")
    os.makedirs(build_directory, exist_ok=True)
    try:
        module = tvm_ffi.cpp.load_inline("tvm_add", cpp_sources=source, functions=["add"],
                                         extra_include_paths=[SOURCES], build_directory=build_directory)
    except Exception as exc:  # a build that fails with ninja there is a bug here: say it loudly
        sys.exit(f"kernel_add: tvm_ffi.cpp.load_inline of {SOURCES}/tvm_add.cc failed: {exc}")
    return module.add


def nanobind_add():
    try:
        import nb_add
    except ImportError as exc:
        return f"not available: {exc}"
    return nb_add.add


def timed(columns: dict, args: tuple) -> dict:
    """name -> (median, best) ns per call of each callable column, interleaved round by round."""
    names = [name for name, fn in columns.items() if callable(fn)]
    timers = [call_timer(columns[name], args) for name in names]
    numbers = [calls_per_sample(t, SAMPLE, WARM) for t in timers]
    samples: list[list[float]] = [[] for _ in names]
    for _ in range(ROUNDS):
        for timer, n, s in zip(timers, numbers, samples):
            s.append(timer.timeit(n) / n * 1e9)
    return {name: (statistics.median(s), min(s)) for name, s in zip(names, samples)}


def load_columns() -> dict:
    """name -> the add function, or why it is not available."""
    sys.path.insert(0, OUT)
    lib = dlpx.load_library(os.path.join(OUT, "libdlpx_example_kernels.so"))
    return {"dlpx": lib.add, "tvm-ffi": tvm_ffi_add(), "nanobind": nanobind_add(), "C extension": extension_add()}


def extension_add():
    try:
        import dlpx_demo
    except ImportError as exc:
        return f"not available: {exc}"
    return dlpx_demo.add


def count_child(calls: int) -> None:
    """Under callgrind: each column's loops, closed by dumps (callgrind_control)."""
    import torch

    columns = load_columns()
    a, b = torch.arange(16, dtype=torch.float32), torch.ones(16, dtype=torch.float32)

    def dump(label: str) -> None:
        subprocess.run(["callgrind_control", f"--dump={label}", str(os.getpid())], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def loop(f, x, y, n):
        for _ in range(n):
            f(x, y)

    # Each column's loop of N calls and of 2N calls, each closed by a dump: their difference is
    # N calls, without the dump's own cost (a subprocess, thousands of instructions a call).
    cases = {"baseline": operator.is_, **{name: fn for name, fn in columns.items() if callable(fn)}}
    for label, fn in cases.items():
        loop(fn, a, b, calls)  # warm: first-use caches, the allocators' free lists
        dump(f"warm-{label}")
        loop(fn, a, b, calls)
        dump(f"once-{label}")
        loop(fn, a, b, 2 * calls)
        dump(f"twice-{label}")


def in_torch(name: str) -> bool:
    """torch's share of a call: its exchange table's entries (the views, the allocator, the
    conversion to a torch.Tensor), its C shim's functions and `THPVariable_Wrap` (dlpx's views
    and outputs: docs/design.md, "torch's view through its C shim") and the output's
    deallocation (when the next result replaces it)."""
    return name.startswith(("TorchDLPackExchangeAPI::", "aoti_torch_", "THPVariable_dealloc(", "THPVariable_Wrap("))


def count(calls: int) -> int:
    """Runs count_child under callgrind and prints instructions per call of each column, and how
    many of them torch spends: what no consumer that allocates through torch's table can remove."""
    if shutil.which("callgrind_control") is None:
        sys.exit("kernel_add: --instructions needs valgrind (callgrind_control on PATH)")
    columns = load_columns()  # builds tvm-ffi's module here, not under valgrind
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out", sys.executable,
                        os.path.abspath(__file__), "--count-child", str(calls)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        dumped = dumped_totals(tmp)
        names = [label[len("twice-"):] for label in dumped if label.startswith("twice-")]
        totals = {name: (dumped["twice-" + name] - dumped["once-" + name]) / calls for name in names}
        torch_share = {name: (called_inclusive(tmp, "twice-" + name, in_torch)
                              - called_inclusive(tmp, "once-" + name, in_torch)) / calls for name in names}
    base = totals.pop("baseline")
    total = {name: totals[name] - base for name in totals}
    rest = {name: total[name] - torch_share[name] for name in total}
    print(f"add(a, b) of two 16-element float32 torch CPU tensors, instructions per call "
          f"(callgrind, {calls} calls, the loop's own {base:.0f} taken off); torch's share: its "
          f"exchange table's entries and the output's deallocation\n")
    print("| kernel | instructions | torch's share | the rest | dlpx / it | dlpx's rest / its rest |")
    print("|---|---|---|---|---|---|")
    for name, fn in columns.items():
        if name not in total:
            print(f"| {name} | {fn} | | | | |")
            continue
        print(f"| {name} | {total[name]:.0f} | {torch_share[name]:.0f} | {rest[name]:.0f} "
              f"| {total['dlpx'] / total[name]:.2f} | {rest['dlpx'] / rest[name]:.2f} |")
    if "tvm-ffi" in total:
        print(f"\nThe floor: torch's share of the dlpx call alone is {torch_share['dlpx'] / total['tvm-ffi']:.2f}x "
              f"tvm-ffi's whole call (issue 43's target: {TARGET}x).")
    return 0


def main() -> int:
    import torch

    if "--count-child" in sys.argv:  # under callgrind, built by the parent
        count_child(int(sys.argv[sys.argv.index("--count-child") + 1]))
        return 0
    build_cmake()
    if "--instructions" in sys.argv:
        i = sys.argv.index("--instructions")
        return count(int(sys.argv[i + 1]) if i + 1 < len(sys.argv) and sys.argv[i + 1].isdigit() else 3000)
    columns = load_columns()

    a = torch.arange(16, dtype=torch.float32)
    b = torch.arange(16, dtype=torch.float32) * 0.5 + 1
    expected = a + b
    for name, fn in columns.items():
        if callable(fn):
            out = fn(a, b)
            if type(out) is not torch.Tensor or out.dtype != torch.float32 or not torch.equal(out, expected):
                sys.exit(f"kernel_add: {name}'s add(a, b) gave {type(out).__name__} {out!r}, expected {expected!r}")
            if out.data_ptr() in (a.data_ptr(), b.data_ptr()):
                sys.exit(f"kernel_add: {name}'s add(a, b) returned an argument's memory")

    t = timed(columns, (a, b))
    print(f"add(a, b) of two 16-element float32 torch CPU tensors -> a new torch.Tensor, ns per call "
          f"(median and best of {ROUNDS} interleaved rounds of {SAMPLE * 1e3:.0f} ms)\n")
    print("| kernel | median ns | best ns | dlpx / it (median) | target |")
    print("|---|---|---|---|---|")
    verdicts = []
    for name, fn in columns.items():
        if name not in t:
            print(f"| {name} | {fn} | | | |")
            continue
        median, best = t[name]
        if name == "dlpx":
            print(f"| {name} | {median:.0f} | {best:.0f} | 1.00 | |")
            continue
        r = t["dlpx"][0] / median
        if name not in TARGETED:
            print(f"| {name} | {median:.0f} | {best:.0f} | {r:.2f} | |")
            continue
        verdict = "ok" if r <= TARGET else "MISSED"
        verdicts.append(f"dlpx / {name} {r:.2f}")
        print(f"| {name} | {median:.0f} | {best:.0f} | {r:.2f} | <= {TARGET} {verdict} |")
    print(f"\n{', '.join(verdicts) or 'no peer to compare with'} (target <= {TARGET})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

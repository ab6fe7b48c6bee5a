"""Kernel call overhead: what taking N tensors of a framework costs a C/C++ kernel, each way.

- kernel library: `lib.nop(*xs)` of a library loaded with `dlpx.load_library`
  (examples/kernel_library: its `nop` keeps the GIL) and `nop_released`, the same kernel
  releasing the GIL around the call (c_tests/kernel_cases);
- C extension: a CPython extension function taking each argument with `dlpx_view_of` and giving
  it back with `dlpx_view_release` (benches/kernel_overhead/dlpx_nop.c);
- tvm-ffi: `tvm_ffi.get_global_func("testing.nop")` called with the same arguments;
- nanobind: a function whose parameters are `nb::ndarray<>` (benches/kernel_overhead/nb_nop.cpp).

They are built here with CMake (nanobind from PyPI, dlpx from the package this Python imports)
into build/bench/kernel_overhead; a rebuild only recompiles what changed. Every row is timed
interleaved, median of rounds, 16-element float32 CPU tensors. Issue 43's targets: the kernel
library's call at most 0.6x tvm-ffi's and at most 1.0x the C extension's.

    python benches/kernel_overhead.py [--quick]
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

import dlpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_timing import cell, interleaved, ratio  # noqa: E402

QUICK = "--quick" in sys.argv
ROUNDS = 3 if QUICK else 21
SAMPLE = 0.002 if QUICK else 0.01  # seconds per timed sample
WARM = 0.01 if QUICK else 0.1
ARITIES = (1, 3, 8)
# The frameworks issue 43's targets name (the others are reported too).
TARGETED = ("torch", "numpy", "dlpx")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def include_dir() -> str:
    """dlpx's headers: the installed package's, else the source tree's (an in-tree run)."""
    installed = os.path.join(os.path.dirname(dlpx.__file__), "include")
    return installed if os.path.isdir(installed) else os.path.join(ROOT, "include")


def build() -> str:
    import nanobind

    out = os.path.join(ROOT, "build", "bench", "kernel_overhead")
    library = dlpx.library_path()
    configure = [
        "cmake", "-S", os.path.join(ROOT, "benches", "kernel_overhead"), "-B", out,
        "-DCMAKE_BUILD_TYPE=Release", f"-DPython_EXECUTABLE={sys.executable}",
        f"-Dnanobind_DIR={nanobind.cmake_dir()}", f"-DDLPX_INCLUDE_DIR={include_dir()}",
        f"-DDLPX_LIBRARY={library}", f"-DDLPX_LIBRARY_DIR={os.path.dirname(library)}",
    ]
    for command in (configure, ["cmake", "--build", out, "-j", "2"]):
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            sys.exit(f"kernel_overhead: {' '.join(command[:2])} failed:\n{done.stdout}")
    return out


def frameworks():
    """name -> a function making one 16-element float32 CPU tensor of that framework."""
    base = np.arange(16, dtype=np.float32)
    out = {"numpy": base.copy, "dlpx": lambda: dlpx.from_dlpack(base.copy())}
    try:
        import torch

        out["torch"] = lambda: torch.arange(16, dtype=torch.float32)
    except ImportError:
        pass
    try:
        import tvm_ffi

        out["tvm_ffi"] = lambda: tvm_ffi.from_dlpack(base.copy())
    except ImportError:
        pass
    try:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        import jax.numpy as jnp

        out["jax"] = lambda: jnp.arange(16, dtype=jnp.float32)
    except ImportError:
        pass
    return out


def main() -> int:
    out = build()
    sys.path.insert(0, out)
    import dlpx_nop
    import nb_nop
    import tvm_ffi

    lib = dlpx.load_library(os.path.join(out, "libdlpx_example_kernels.so"))
    cases = dlpx.load_library(os.path.join(out, "libkernel_cases.so"))
    tvm_nop = tvm_ffi.get_global_func("testing.nop")
    nb = {1: nb_nop.nop1, 3: nb_nop.nop3, 8: nb_nop.nop8}
    columns = {"lib.nop": lambda n: lib.nop, "released": lambda n: cases.nop_released, "C extension": lambda n: dlpx_nop.nop,
               "tvm-ffi": lambda n: tvm_nop, "nanobind": lambda n: nb[n]}
    print(f"kernel call overhead, ns per call taking N 16-element float32 CPU tensors "
          f"(median of {ROUNDS} interleaved rounds of {SAMPLE * 1e3:.0f} ms); lib.nop keeps the GIL, "
          f"released is the same kernel releasing it\n")
    print(f"| args | {' | '.join(columns)} | lib / tvm-ffi | lib / C extension | released / lib.nop | C extension / tvm-ffi |")
    print("|---|" + "---|" * (len(columns) + 4))
    worst = {"tvm-ffi": 0.0, "C extension": 0.0}
    for name, make in frameworks().items():
        for n in ARITIES:
            args = tuple(make() for _ in range(n))
            calls, cells = [], {}
            for column, fn in ((column, pick(n)) for column, pick in columns.items()):
                try:
                    fn(*args)
                except Exception as exc:  # a framework a caller cannot take is reported, not hidden
                    cells[column] = f"error: {type(exc).__name__}"
                    continue
                cells[column] = len(calls)
                calls.append((fn, args))
            times = interleaved(calls, ROUNDS, SAMPLE, WARM)
            t = {column: times[c] if isinstance(c, int) else c for column, c in cells.items()}
            for peer in worst:
                if isinstance(t["lib.nop"], float) and isinstance(t[peer], float) and name in TARGETED:
                    worst[peer] = max(worst[peer], t["lib.nop"] / t[peer])
            print(f"| {name} x{n} | {' | '.join(cell(t[c]) for c in columns)} | {ratio(t['lib.nop'], t['tvm-ffi'])} "
                  f"| {ratio(t['lib.nop'], t['C extension'])} | {ratio(t['released'], t['lib.nop'])} "
                  f"| {ratio(t['C extension'], t['tvm-ffi'])} |")
    targeted = ", ".join(TARGETED)
    print(f"\nworst lib.nop / tvm-ffi over {targeted}: {worst['tvm-ffi']:.2f} (target <= 0.6)")
    print(f"worst lib.nop / C extension over {targeted}: {worst['C extension']:.2f} (target <= 1.0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Kernel call overhead: what taking N tensors of a framework costs a C/C++ kernel, each way.

- dlpx: a C extension function taking each argument with `dlpx_view_of` and giving it back
  with `dlpx_view_release` (benches/kernel_overhead/dlpx_nop.c);
- tvm-ffi: `tvm_ffi.get_global_func("testing.nop")` called with the same arguments;
- nanobind: a function whose parameters are `nb::ndarray<>` (benches/kernel_overhead/nb_nop.cpp).

The two extensions are built here with CMake (nanobind from PyPI, dlpx from the package this
Python imports) into build/bench/kernel_overhead; a rebuild only recompiles what changed.
Every row is timed interleaved, median of rounds, 16-element float32 CPU tensors.

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
    sys.path.insert(0, build())
    import dlpx_nop
    import nb_nop
    import tvm_ffi

    tvm_nop = tvm_ffi.get_global_func("testing.nop")
    nb = {1: nb_nop.nop1, 3: nb_nop.nop3, 8: nb_nop.nop8}
    print(f"kernel call overhead, ns per call taking N 16-element float32 CPU tensors "
          f"(median of {ROUNDS} interleaved rounds of {SAMPLE * 1e3:.0f} ms)\n")
    print("| args | dlpx | tvm-ffi | nanobind | dlpx / tvm-ffi | dlpx / nanobind |")
    print("|---|---|---|---|---|---|")
    worst = 0.0
    for name, make in frameworks().items():
        for n in ARITIES:
            args = tuple(make() for _ in range(n))
            calls, columns = [], []
            for fn in (dlpx_nop.nop, tvm_nop, nb[n]):
                try:
                    fn(*args)
                except Exception as exc:  # a framework a caller cannot take is reported, not hidden
                    columns.append(f"error: {type(exc).__name__}")
                    continue
                columns.append(len(calls))
                calls.append((fn, args))
            times = interleaved(calls, ROUNDS, SAMPLE, WARM)
            dl, tvm, nbn = (times[c] if isinstance(c, int) else c for c in columns)
            for peer in (tvm, nbn):
                if isinstance(dl, float) and isinstance(peer, float):
                    worst = max(worst, dl / peer)
            print(f"| {name} x{n} | {cell(dl)} | {cell(tvm)} | {cell(nbn)} | {ratio(dl, tvm)} | {ratio(dl, nbn)} |")
    print(f"\nworst dlpx ratio: {worst:.2f} (target <= 1, goal <= 0.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

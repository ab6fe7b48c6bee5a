"""The Python-level DLPack interop matrix: ns per `X.from_dlpack(y)` for every pair of
frameworks, dlpx's consumer against the fastest other one for each producer, `y.__dlpack__()`,
and the demo kernel's call overhead. 16-element float32 CPU tensors. Every row (one producer,
all consumers) is timed interleaved, median of rounds.

    python benches/interop.py [--quick]
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import dlpx  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_timing import cell, interleaved, ratio  # noqa: E402

try:
    import tvm_ffi
except ImportError:  # pragma: no cover - optional peer
    tvm_ffi = None
try:
    import jax
    import jax.numpy as jnp
    import jax.dlpack
except ImportError:  # pragma: no cover - optional peer
    jax = None
try:
    import array_api_strict
except ImportError:  # pragma: no cover - optional peer
    array_api_strict = None

QUICK = "--quick" in sys.argv
ROUNDS = 3 if QUICK else 15
SAMPLE = 0.002 if QUICK else 0.01  # seconds per timed sample
WARM = 0.01 if QUICK else 0.1


def sources():
    base = np.arange(16, dtype=np.float32)
    out = {
        "dlpx": dlpx.from_dlpack(base.copy()),
        "torch": torch.arange(16, dtype=torch.float32),
        "numpy": base.copy(),
    }
    if tvm_ffi is not None:
        out["tvm_ffi"] = tvm_ffi.from_dlpack(base.copy())
    if jax is not None:
        out["jax"] = jnp.arange(16, dtype=jnp.float32)
    if array_api_strict is not None:
        out["array_api_strict"] = array_api_strict.asarray(base.copy())
    return out


def importers():
    out = {
        "dlpx": dlpx.from_dlpack,
        "torch": torch.from_dlpack,
        "numpy": np.from_dlpack,
    }
    if tvm_ffi is not None:
        out["tvm_ffi"] = tvm_ffi.from_dlpack
    if jax is not None:
        out["jax"] = jax.dlpack.from_dlpack
    if array_api_strict is not None:
        out["array_api_strict"] = array_api_strict.from_dlpack
    return out


def timed_row(calls: dict) -> dict:
    """name -> median ns (or "error: …" for a call that fails), all timed interleaved."""
    working, out = {}, {}
    for name, (fn, args) in calls.items():
        try:
            fn(*args)
        except Exception as exc:  # a pair that does not interoperate is reported, not hidden
            out[name] = f"error: {type(exc).__name__}"
            continue
        working[name] = (fn, args)
    out.update(zip(working, interleaved(list(working.values()), ROUNDS, SAMPLE, WARM)))
    return out


def demo_kernel() -> None:
    """The demo kernel (examples/add_extension) on 1-element tensors: the whole cost of taking
    two framework tensors, allocating the output in the caller's framework and returning it."""
    try:
        import dlpx_demo
    except ImportError:
        print("\n(dlpx_demo not built: run benches/run.sh for the demo kernel's call overhead)")
        return
    ones = lambda: np.ones(1, np.float32)  # noqa: E731
    rows = {
        "dlpx_demo.add(torch, torch) -> torch": (dlpx_demo.add, (torch.ones(1), torch.ones(1))),
        "torch.add(a, b)": (torch.add, (torch.ones(1), torch.ones(1))),
        "dlpx_demo.add(numpy, numpy) -> dlpx": (dlpx_demo.add, (ones(), ones())),
        "numpy.add(a, b)": (np.add, (ones(), ones())),
        "dlpx_demo.add(dlpx, dlpx) -> dlpx": (dlpx_demo.add, (dlpx.from_dlpack(ones()), dlpx.from_dlpack(ones()))),
    }
    print("\ndemo kernel call overhead: 1-element float32 inputs, one allocated output, ns per call\n")
    print("| call | ns |")
    print("|---|---|")
    for label, ns in timed_row(rows).items():
        print(f"| {label} | {cell(ns)} |")


def main() -> int:
    srcs, imps = sources(), importers()
    matrix = {source: timed_row({i: (fn, (x,)) for i, fn in imps.items()}) for source, x in srcs.items()}

    print(f"ns per X.from_dlpack(y), 16 float32 on CPU, median of {ROUNDS} interleaved rounds\n")
    print("| X \\ y | " + " | ".join(srcs) + " |")
    print("|" + "---|" * (len(srcs) + 1))
    for importer in imps:
        print(f"| {importer}.from_dlpack | " + " | ".join(cell(matrix[s][importer]) for s in srcs) + " |")

    print("\ndlpx.from_dlpack(y) against the fastest other consumer of y (target: ratio < 1)\n")
    print("| y | dlpx.from_dlpack | fastest other | ratio |")
    print("|---|---|---|---|")
    missed = 0
    for source, row in matrix.items():
        others = {k: v for k, v in row.items() if k != "dlpx" and isinstance(v, float)}
        best = min(others, key=others.get)
        ok = isinstance(row["dlpx"], float) and row["dlpx"] < others[best]
        missed += not ok
        print(f"| {source} | {cell(row['dlpx'])} | {cell(others[best])} ({best}.from_dlpack) | "
              f"{ratio(row['dlpx'], others[best])}{'' if ok else ' MISSED'} |")

    print("\nns per y.__dlpack__() (versioned when the producer supports max_version)\n")
    print("| y | __dlpack__() | __dlpack__(max_version=(1, 3)) |")
    print("|---|---|---|")
    version = lambda x: x.__dlpack__(max_version=(1, 3))  # noqa: E731
    for source, x in srcs.items():
        row = timed_row({"legacy": (x.__dlpack__, ()), "versioned": (version, (x,))})
        print(f"| {source} | {cell(row['legacy'])} | {cell(row['versioned'])} |")

    demo_kernel()

    # dlpx as a producer: torch imports a dlpx.Tensor (through dlpx's table) at least as fast
    # as it imports numpy's array.
    row = timed_row({"dlpx": (torch.from_dlpack, (srcs["dlpx"],)), "numpy": (torch.from_dlpack, (srcs["numpy"],))})
    ok = row["dlpx"] <= row["numpy"]
    missed += not ok
    print(f"\ntorch.from_dlpack(dlpx) {cell(row['dlpx'])} ns <= torch.from_dlpack(numpy) {cell(row['numpy'])} ns: "
          f"{'ok' if ok else 'MISSED'}")
    print(f"\ntargets missed: {missed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

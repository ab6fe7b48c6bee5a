"""The Python-level DLPack interop matrix: ns per `X.from_dlpack(y)` for every pair of
frameworks, `y.__dlpack__()`, and the targets dlpx is held to. 16-element float32 CPU tensors.

    python benches/interop.py [--quick]
"""

from __future__ import annotations

import sys
import time
import timeit

import numpy as np
import torch

import dlpx

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

QUICK = "--quick" in sys.argv
NUMBER = 2_000 if QUICK else 20_000
REPEAT = 3 if QUICK else 7


def warm_up(fn, seconds: float = 0.05 if QUICK else 0.3) -> None:
    """Runs `fn` for a while first: caches, allocator arenas and the CPU's clock settle (the
    first few hundred thousand calls of a fresh process measure up to 1.7x slower here)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(1000):
            fn()


def ns_per_call(fn) -> float:
    warm_up(fn)
    return min(timeit.repeat(fn, number=NUMBER, repeat=REPEAT)) / NUMBER * 1e9


def paired(first, second, rounds: int = 3 if QUICK else 15):
    """Best ns per call of two functions timed in alternation."""
    warm_up(first), warm_up(second)
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for i, fn in enumerate((first, second)):
            best[i] = min(best[i], timeit.timeit(fn, number=NUMBER) / NUMBER * 1e9)
    return best[0], best[1]


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
    return out


def kernel_overhead() -> None:
    """The demo kernel (examples/add_extension) on 1-element tensors: the whole cost of taking
    two framework tensors, allocating the output in the caller's framework and returning it."""
    try:
        import dlpx_demo
    except ImportError:
        print("\n(dlpx_demo not built: run benches/run.sh for the kernel call overhead)")
        return
    rows = [
        ("dlpx_demo.add(torch, torch) -> torch", dlpx_demo.add, torch.ones(1), torch.ones(1)),
        ("torch.add(a, b)", torch.add, torch.ones(1), torch.ones(1)),
        ("dlpx_demo.add(numpy, numpy) -> dlpx", dlpx_demo.add, np.ones(1, np.float32), np.ones(1, np.float32)),
        ("numpy.add(a, b)", np.add, np.ones(1, np.float32), np.ones(1, np.float32)),
        ("dlpx_demo.add(dlpx, dlpx) -> dlpx", dlpx_demo.add, dlpx.from_dlpack(np.ones(1, np.float32)),
         dlpx.from_dlpack(np.ones(1, np.float32))),
    ]
    print("\nkernel call overhead: 1-element float32 inputs, one allocated output, ns per call\n")
    print("| call | ns |")
    print("|---|---|")
    for label, fn, a, b in rows:
        print(f"| {label} | {ns_per_call(lambda fn=fn, a=a, b=b: fn(a, b)):.0f} |")


def main() -> int:
    srcs = sources()
    imps = importers()
    names = list(srcs)
    matrix = {}
    for importer in imps:
        for source in names:
            x = srcs[source]
            fn = imps[importer]
            try:
                fn(x)
            except Exception as exc:  # a pair that does not interoperate is reported, not hidden
                matrix[importer, source] = f"error: {type(exc).__name__}"
                continue
            matrix[importer, source] = ns_per_call(lambda fn=fn, x=x: fn(x))

    print(f"ns per X.from_dlpack(y), 16 float32 on CPU, best of {REPEAT} x {NUMBER}\n")
    header = "| X \\ y | " + " | ".join(names) + " |"
    print(header)
    print("|" + "---|" * (len(names) + 1))
    for importer in imps:
        cells = []
        for source in names:
            v = matrix[importer, source]
            cells.append(f"{v:.0f}" if isinstance(v, float) else v)
        print(f"| {importer}.from_dlpack | " + " | ".join(cells) + " |")

    print("\nns per y.__dlpack__() (versioned when the producer supports max_version)\n")
    print("| y | __dlpack__() | __dlpack__(max_version=(1, 3)) |")
    print("|---|---|---|")
    for source in names:
        x = srcs[source]
        legacy = ns_per_call(lambda x=x: x.__dlpack__())
        try:
            versioned = f"{ns_per_call(lambda x=x: x.__dlpack__(max_version=(1, 3))):.0f}"
        except TypeError:
            versioned = "n/a"
        print(f"| {source} | {legacy:.0f} | {versioned} |")

    kernel_overhead()

    # The targets compare two calls: measure them interleaved, so a burst of noise on a shared
    # machine hits both sides alike.
    targets = []
    if tvm_ffi is not None:
        a, b = paired(lambda: dlpx.from_dlpack(srcs["torch"]), lambda: tvm_ffi.from_dlpack(srcs["torch"]))
        targets.append(("dlpx.from_dlpack(torch) < tvm_ffi.from_dlpack(torch)", a, b, a < b))
    a, b = paired(lambda: torch.from_dlpack(srcs["dlpx"]), lambda: torch.from_dlpack(srcs["numpy"]))
    targets.append(("torch.from_dlpack(dlpx) <= torch.from_dlpack(numpy)", a, b, a <= b))
    print("\n| target | dlpx side ns | peer ns | |")
    print("|---|---|---|---|")
    missed = 0
    for label, a, b, ok in targets:
        missed += not ok
        print(f"| {label} | {a:.0f} | {b:.0f} | {'ok' if ok else 'MISSED'} |")
    print(f"\ntargets missed: {missed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

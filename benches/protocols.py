"""The older array protocols, timed beside numpy reading the same objects (interleaved rounds,
medians; docs/design.md R12):

- import: `dlpx.from_dlpack(x)` against `np.asarray(x)` for buffers (`bytes`, `bytearray`, a
  `memoryview` of an ndarray, `array.array`) and an object that speaks `__array_interface__`
  alone; target: at most 0.5x numpy's time for the buffers;
- export: `np.asarray(t)` of a dlpx.Tensor (its buffer protocol) against `np.asarray` of a
  numpy-backed memoryview, and of CPython's cheapest exporters (`array.array`, `bytearray`);
  target: at most the memoryview's time.

    python benches/protocols.py [--quick]
"""

from __future__ import annotations

import array
import os
import sys

import numpy as np

import dlpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_timing import interleaved  # noqa: E402

QUICK = "--quick" in sys.argv
ROUNDS, SAMPLE, WARM = (3, 0.002, 0.01) if QUICK else (15, 0.01, 0.1)


class OnlyArrayInterface:
    def __init__(self, a):
        self.a = a

    @property
    def __array_interface__(self):
        return self.a.__array_interface__


def main() -> int:
    floats = np.arange(16, dtype=np.float32)
    imports = {
        "bytes (64)": (bytes(64), True),
        "bytearray (64)": (bytearray(64), True),
        "memoryview of an ndarray (16 float32)": (memoryview(floats), True),
        "array.array (16 float32)": (array.array("f", range(16)), True),
        "__array_interface__ only (16 float32)": (OnlyArrayInterface(floats), False),
    }
    print(f"ns per call, median of {ROUNDS} interleaved rounds; numpy {np.__version__}, dlpx {dlpx.__version__}\n")
    print("| import of | dlpx.from_dlpack | np.asarray | ratio | target |")
    print("|---|---|---|---|---|")
    missed = 0
    for name, (x, buffer) in imports.items():
        ours, numpy = interleaved([(dlpx.from_dlpack, (x,)), (np.asarray, (x,))], ROUNDS, SAMPLE, WARM)
        ratio = ours / numpy
        verdict = ""
        if buffer:
            ok = ratio <= 0.5
            missed += not ok
            verdict = f"<= 0.50 {'ok' if ok else 'MISSED'}"
        print(f"| {name} | {ours:.0f} | {numpy:.0f} | {ratio:.2f} | {verdict} |")

    t = dlpx.from_dlpack(floats)
    view = memoryview(floats)
    # bytearray and array.array: CPython's own cheapest exporters, the floor for any exporter that
    # is not a memoryview (numpy shares a memoryview's managed buffer; any other costs it a new
    # one and a getbuffer/releasebuffer pair).
    exporters = {"dlpx.Tensor": t, "numpy-backed memoryview": view, "array.array": array.array("f", range(16)),
                 "bytearray (64)": bytearray(64)}
    times = dict(zip(exporters, interleaved([(np.asarray, (x,)) for x in exporters.values()], ROUNDS, SAMPLE, WARM)))
    print("\n| np.asarray of (16 float32, or 64 bytes) | ns | / memoryview | target |")
    print("|---|---|---|---|")
    for name, ns in times.items():
        ratio = ns / times["numpy-backed memoryview"]
        verdict = ""
        if name == "dlpx.Tensor":
            ok = ratio <= 1.0
            missed += not ok
            verdict = f"<= 1.00 {'ok' if ok else 'MISSED'}"
        print(f"| {name} | {ns:.0f} | {ratio:.2f} | {verdict} |")
    print(f"\ntargets missed: {missed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Soak: threads mixing allocate / export / import / view / free across dlpx, numpy, tvm_ffi and
torch tensors (torch and tvm_ffi where installed; the C kernel API; refusals of bad input; more
producer types than the type -> row cache holds), every import's values checked byte for byte,
with RSS and reference counts sampled. On a free-threaded CPython the threads run at once.
Passes when both stay flat: the resident set grows by less than --rss-slack MiB after
the warm-up, and every shared object's reference count (and the interpreter's count of live
blocks) is back where it started once the threads' tensors are gone.

    python tests/soak.py                 # 8 threads x 10**6 operations (docs/reliability.md's figures)
    python tests/soak.py --short         # 8 threads x 20 000 operations (CI, well under 60 s)

Not collected by pytest (no test_ prefix): scripts/reliability.sh runs the short mode.
"""

import argparse
import ctypes
import gc
import os
import random
import sys
import threading
import time

import numpy as np

import dlpx

try:
    import torch
except ImportError:  # the free-threaded interpreters have no torch (its cp314t wheel is CUDA-only)
    torch = None
try:
    import tvm_ffi
except ImportError:
    tvm_ffi = None

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


from dlpx.conform.abi import DlpxTensorView  # noqa: E402


LIB = ctypes.PyDLL(dlpx.library_path())
LIB.dlpx_view_of.argtypes = [ctypes.py_object, ctypes.POINTER(DlpxTensorView)]
LIB.dlpx_view_release.argtypes = [ctypes.POINTER(DlpxTensorView)]
LIB.dlpx_view_release.restype = None
LIB.dlpx_import.argtypes = [ctypes.py_object, ctypes.POINTER(ctypes.c_void_p)]

# Objects every thread reads, never frees: their reference counts must come back.
EXPECTED = np.arange(12, dtype=np.float32).reshape(3, 4)
SHARED = {
    "numpy": EXPECTED.copy(),
    "dlpx": dlpx.from_dlpack(EXPECTED, copy=True),
}
if torch is not None:
    SHARED["torch"] = torch.arange(12, dtype=torch.float32).reshape(3, 4)
if tvm_ffi is not None:
    SHARED["tvm_ffi"] = tvm_ffi.from_dlpack(EXPECTED.copy())
SHAPES = [(4,), (3, 4), (2, 3, 4), (0, 5), ()]
DTYPES = ["float32", "int8", "float64", "bfloat16", "uint16"]


def c_view(x):
    view = DlpxTensorView()
    LIB.dlpx_view_of(x, ctypes.byref(view))
    LIB.dlpx_view_release(ctypes.byref(view))


def c_import(x):
    out = ctypes.c_void_p()
    LIB.dlpx_import(x, ctypes.byref(out))
    deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(ctypes.c_void_p.from_address(out.value + 16).value)
    deleter(out.value)


def refused(call, kind):
    try:
        call()
    except kind:
        return
    raise AssertionError(f"{call} did not raise {kind.__name__}")


def exact(t):
    """`t`'s values, checked byte for byte against what every shared tensor holds."""
    if not np.array_equal(np.from_dlpack(t), EXPECTED):
        raise AssertionError(f"wrong values through {t!r}")


# Twice as many producer types as dlpx's type -> row cache has slots: picking among them keeps
# evicting and re-inserting rows. (A new type per call would measure the interpreter instead: a
# free-threaded CPython keeps ~1 KiB of each created type.)
CHURN_TYPES = [type(f"Sub{i}", (np.ndarray,), {}) for i in range(64)]


def type_churn(rng):
    """An array of one of many producer types, through dlpx's type cache; its values checked."""
    exact(dlpx.from_dlpack(EXPECTED.view(rng.choice(CHURN_TYPES))))


ONLY: set = set()  # --only: the operations to mix (all when empty)


def worker(seed: int, ops: int, counts: dict, errors: list):
    rng = random.Random(seed)
    pool = [None] * 16  # what this thread holds; a replaced slot is the "free"
    done = {}

    def any_tensor():
        return rng.choice([*SHARED.values(), *[p for p in pool if p is not None]])

    operations = {
        "allocate": lambda: dlpx.empty(rng.choice(SHAPES), dtype=rng.choice(DTYPES)),
        "numpy_new": lambda: np.ones(rng.choice(SHAPES), dtype=np.float32),
        "import": lambda: dlpx.from_dlpack(any_tensor()),
        "import_exact": lambda: exact(dlpx.from_dlpack(SHARED[rng.choice(list(SHARED))])),
        "import_copy": lambda: exact(dlpx.from_dlpack(SHARED[rng.choice(list(SHARED))], copy=True)),
        "export_dropped": lambda: SHARED["dlpx"].__dlpack__(max_version=(1, 3)) and None,
        "numpy_view": lambda: np.from_dlpack(SHARED["dlpx"]),
        "c_view": lambda: c_view(any_tensor()),
        "c_import": lambda: c_import(any_tensor()),
        "refused": lambda: refused(lambda: dlpx.empty((2, -1)), ValueError),
        "type_churn": lambda: type_churn(rng),
    }
    if torch is not None:
        operations["torch_new"] = lambda: torch.ones(rng.choice(SHAPES))
        operations["torch_view"] = lambda: torch.from_dlpack(SHARED["dlpx"])
    if tvm_ffi is not None:
        operations["tvm_ffi_view"] = lambda: exact(tvm_ffi.from_dlpack(SHARED["dlpx"]))
    names = [n for n in operations if not ONLY or n in ONLY]
    try:
        for _ in range(ops):
            name = rng.choice(names)
            result = operations[name]()
            if result is not None:
                pool[rng.randrange(len(pool))] = result
            done[name] = done.get(name, 0) + 1
    except BaseException as e:  # reported by the main thread
        errors.append(repr(e))
    finally:
        pool.clear()
        counts[seed] = done


def run(threads: int, ops: int, samples: int, rss_slack: float) -> int:
    gc.collect()
    refs_before = {k: sys.getrefcount(v) for k, v in SHARED.items()}
    errors: list = []
    counts: dict = {}
    # Warm-up, on as many threads: caches (dlpx's size classes, torch's allocator, the type
    # tables, a free-threaded interpreter's per-thread state) fill first.
    warm = [threading.Thread(target=worker, args=(-1 - i, min(ops, 20_000), {}, errors)) for i in range(threads)]
    for w in warm:
        w.start()
    for w in warm:
        w.join()
    gc.collect()
    blocks_before = sys.getallocatedblocks()
    rss_start = rss_mib()
    workers = [threading.Thread(target=worker, args=(i, ops, counts, errors)) for i in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    rss_samples = [rss_start]
    while any(w.is_alive() for w in workers):
        time.sleep(max(0.05, (time.perf_counter() - start) / samples))
        rss_samples.append(rss_mib())
    for w in workers:
        w.join()
    seconds = time.perf_counter() - start
    gc.collect()
    rss_end = rss_mib()
    refs_after = {k: sys.getrefcount(v) for k, v in SHARED.items()}
    blocks_after = sys.getallocatedblocks()
    total = sum(sum(c.values()) for c in counts.values())
    mix = {}
    for c in counts.values():
        for name, n in c.items():
            mix[name] = mix.get(name, 0) + n
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    print(f"soak: {threads} threads x {ops} operations = {total} in {seconds:.1f} s "
          f"(Python {sys.version.split()[0]}, GIL {'enabled' if gil else 'disabled'})")
    print("  mix: " + ", ".join(f"{k} {v}" for k, v in sorted(mix.items())))
    print(f"  RSS MiB: after warm-up {rss_start:.1f}, peak {max(rss_samples):.1f}, end {rss_end:.1f} "
          f"({len(rss_samples)} samples: {' '.join(f'{s:.0f}' for s in rss_samples[:: max(1, len(rss_samples) // 10)])})")
    print(f"  refcounts before {refs_before} after {refs_after}")
    print(f"  interpreter blocks: before {blocks_before}, after {blocks_after}")
    failures = list(errors)
    if total != threads * ops:
        failures.append(f"{total} operations ran, not {threads * ops}")
    if refs_after != refs_before:
        failures.append(f"reference counts moved: {refs_before} -> {refs_after}")
    if rss_end - rss_start > rss_slack:
        failures.append(f"RSS grew by {rss_end - rss_start:.1f} MiB (slack {rss_slack} MiB)")
    # A few hundred blocks come and go with interned names and caches; a leak per operation
    # would be thousands.
    if blocks_after - blocks_before > 1000:
        failures.append(f"{blocks_after - blocks_before} more live interpreter blocks")
    for f in failures:
        print("FAIL:", f)
    print("soak:", "flat" if not failures else "NOT flat")
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--ops", type=int, default=10**6, help="operations per thread")
    parser.add_argument("--short", action="store_true", help="20 000 operations per thread")
    parser.add_argument("--samples", type=int, default=50, help="RSS samples over the run")
    parser.add_argument("--rss-slack", type=float, default=16.0, help="MiB the RSS may grow after warm-up")
    parser.add_argument("--only", default="", help="comma-separated operations to mix (default: all)")
    args = parser.parse_args()
    ONLY.update(filter(None, args.only.split(",")))
    ops = 20_000 if args.short else args.ops
    return run(args.threads, ops, args.samples, args.rss_slack)


if __name__ == "__main__":
    sys.exit(main())

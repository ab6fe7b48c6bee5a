"""Scaling on free-threaded CPython: the same loop of dlpx calls on 1 thread and on N threads
(N = the cores this process may run on: `taskset -c 0-7` measures 8), each thread doing the
same number of calls. With the GIL disabled and no shared lock on the path, N threads finish N
times the work in the time one thread takes: the printed speedup is N x work / time against one
thread's, with 0.8 x N the target.

    python benches/free_threaded_scaling.py [--calls N] [--repeats R]

Loops: dlpx.empty (the allocator, and a new dlpx.Tensor), dlpx.from_dlpack of a numpy array
(the numpy row, through the type -> row cache), of a dlpx.Tensor, and of a tvm_ffi tensor where
tvm-ffi is installed. Each is timed best of 5. On a GIL build the threads take turns: it says so.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np

import dlpx


def loops() -> dict:
    """Each loop's maker: every thread makes its own objects (shared ones would measure their
    reference counts' cache line, bouncing between cores, rather than dlpx). The function called
    is bound as a default argument, read without a new reference: looked up as
    `dlpx.from_dlpack` on each call, every thread increments the one function object's count,
    and that shared line, not the call, sets the pace (the last row shows it)."""

    def empty():
        return lambda f=dlpx.empty, shape=(16,): f(shape)

    def from_numpy():
        return lambda f=dlpx.from_dlpack, a=np.arange(16, dtype=np.float32): f(a)

    def from_numpy_looked_up():
        a = np.arange(16, dtype=np.float32)
        return lambda: dlpx.from_dlpack(a)

    def from_dlpx():
        return lambda f=dlpx.from_dlpack, t=dlpx.from_dlpack(np.arange(16, dtype=np.float32), copy=True): f(t)

    def numpy_empty():  # the yardstick: what this machine and interpreter scale without dlpx
        return lambda f=np.empty, shape=(16,), dtype=np.float32: f(shape, dtype)

    def numpy_from_dlpack():
        return lambda f=np.from_dlpack, a=np.arange(16, dtype=np.float32): f(a)

    cases = {"np.empty((16,)) (no dlpx)": numpy_empty, "np.from_dlpack(numpy) (no dlpx)": numpy_from_dlpack,
             "dlpx.empty((16,))": empty, "dlpx.from_dlpack(numpy)": from_numpy, "dlpx.from_dlpack(dlpx)": from_dlpx}
    try:
        import tvm_ffi

        def from_tvm_ffi():
            return lambda f=dlpx.from_dlpack, v=tvm_ffi.from_dlpack(np.arange(16, dtype=np.float32)): f(v)

        cases["dlpx.from_dlpack(tvm_ffi)"] = from_tvm_ffi
    except ImportError:
        pass
    cases["dlpx.from_dlpack(numpy), looked up each call"] = from_numpy_looked_up
    return cases


def timed(make, calls: int, threads: int) -> float:
    """Seconds from the first thread's start to the last thread's end, `threads` threads making
    `calls` calls each of the loop `make` gives each. The threads time themselves: a main thread
    that took the time would be one more thread than cores, and could be scheduled late."""
    barrier = threading.Barrier(threads)
    spans = []

    def run():
        call = make()
        barrier.wait()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        spans.append((start, time.perf_counter()))

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if len(spans) != threads:
        raise RuntimeError("a thread of the loop failed (its traceback is above)")
    return max(end for _, end in spans) - min(start for start, _ in spans)


def main() -> int:
    calls = int(sys.argv[sys.argv.index("--calls") + 1]) if "--calls" in sys.argv else 200_000
    repeats = int(sys.argv[sys.argv.index("--repeats") + 1]) if "--repeats" in sys.argv else 5
    # The cores this process may run on (taskset narrows them), not the machine's.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    print(f"Python {sys.version.split()[0]}, GIL {'enabled' if gil else 'disabled'}, {cores} cores, "
          f"{calls} calls a thread, best of {repeats}\n")
    print(f"| loop | 1 thread, ns/call | {cores} threads, ns/call (per thread) | speedup | target {0.8 * cores:.1f} |")
    print("|---|---|---|---|---|")
    for name, make in loops().items():
        one = min(timed(make, calls, 1) for _ in range(repeats))
        many = min(timed(make, calls, cores) for _ in range(repeats))
        speedup = cores * one / many
        print(f"| {name} | {one / calls * 1e9:.0f} | {many / calls * 1e9:.0f} | {speedup:.2f} | "
              f"{'ok' if speedup >= 0.8 * cores else 'missed'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

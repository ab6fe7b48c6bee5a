"""How much code and data a kernel call touches once something else has run in between: the
kernel library's `nop(*tensors)` (examples/kernel_library, through `dlpx.load_library`) beside the
hand-written CPython extension doing the same views (benches/kernel_overhead/dlpx_nop.c), each
call followed by an evictor (a few torch operations whose code pushes the call's own out of a
32 KiB L1), under callgrind's cache simulation: instructions, L1 instruction misses and L1 data
misses per call, the evictor's own loop taken off.

Why it exists: on a GPU, examples/cuda_kernel's launch_empty through the library costs a fixed
~390 ns more than the extension (docs/cuda.md), where the CPU timings and instruction counts of
the same path (benches/kernel_overhead.py, kernel_add.py --instructions) predict ~20 ns. A CUDA
launch runs megabytes of driver code between two calls, as the evictor does here, so every line
of the call's own code and data is fetched again; what a call costs there follows its misses
here more than its instructions.

    python benches/kernel_footprint.py [--calls N] [--framework torch|numpy|dlpx]

Needs valgrind (callgrind_control on PATH) and torch (the evictor); builds what
benches/kernel_overhead.py builds.
"""

from __future__ import annotations

import glob
import operator
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

ARITIES = (1, 3, 8)
EVENTS = ("Ir", "I1mr", "D1mr")
# Explicit cache geometry, so that the counts do not depend on the machine valgrind runs on: a
# 32 KiB 8-way L1i, a 48 KiB 12-way L1d (Intel's since Ice Lake), a 2 MiB last level.
CACHES = ["--cache-sim=yes", "--I1=32768,8,64", "--D1=49152,12,64", "--LL=2097152,16,64"]


def arg(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def make_tensor(framework: str):
    import numpy as np

    import dlpx

    base = np.arange(16, dtype=np.float32)
    if framework == "torch":
        import torch

        return torch.arange(16, dtype=torch.float32)
    return base.copy() if framework == "numpy" else dlpx.from_dlpack(base.copy())


def count_child(out: str, calls: int, framework: str) -> None:
    """Under callgrind: each candidate's loop of `calls` and of 2 * `calls`, closed by dumps."""
    import torch

    import dlpx

    torch.set_num_threads(1)  # the evictor stays on this thread, where callgrind counts it
    sys.path.insert(0, out)
    import dlpx_nop

    lib = dlpx.load_library(os.path.join(out, "libdlpx_example_kernels.so"))
    a, b = torch.ones(16), torch.ones(16)

    def evict():
        torch.add(a, b)
        a.sum()
        torch.cat([a, b])

    def dump(label: str) -> None:
        subprocess.run(["callgrind_control", f"--dump={label}", str(os.getpid())], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def loop(f, xs, n):
        for _ in range(n):
            f(*xs)
            evict()

    for n in ARITIES:
        xs = [make_tensor(framework) for _ in range(n)]
        # operator.is_ takes two arguments and does nothing: the loop's and the evictor's cost.
        cases = {"baseline": (operator.is_, xs[:1] * 2), "library": (lib.nop, xs), "extension": (dlpx_nop.nop, xs)}
        for name, (f, args) in cases.items():
            loop(f, args, calls)  # warm: first-use caches
            dump(f"warm-{name}-{n}")
            loop(f, args, calls)
            dump(f"once-{name}-{n}")
            loop(f, args, 2 * calls)
            dump(f"twice-{name}-{n}")


def dumped_events(directory: str) -> dict[str, dict[str, int]]:
    """label -> {event: total} of each `callgrind_control --dump=label` written in `directory`."""
    dumps = {}
    for path in glob.glob(f"{directory}/cg.out*"):
        label, names, totals = None, [], []
        for line in open(path):
            if line.startswith("desc: Trigger: dump "):
                label = line[len("desc: Trigger: dump "):].strip()
            elif line.startswith("events:"):
                names = line.split()[1:]
            elif line.startswith("totals:"):
                totals = [int(v) for v in line.split()[1:]]
        if label and totals:
            dumps[label] = dict(zip(names, totals))
    return dumps


def main() -> int:
    calls, framework = int(arg("--calls", "2000")), arg("--framework", "torch")
    if "--count-child" in sys.argv:  # under callgrind, built by the parent
        count_child(arg("--count-child", ""), calls, framework)
        return 0
    if shutil.which("callgrind_control") is None:
        sys.exit("kernel_footprint: needs valgrind (callgrind_control on PATH)")
    from kernel_overhead import build

    out = build()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["valgrind", "--tool=callgrind", *CACHES, f"--callgrind-out-file={tmp}/cg.out", sys.executable,
                        os.path.abspath(__file__), "--count-child", out, "--calls", str(calls),
                        "--framework", framework], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        dumps = dumped_events(tmp)

    def per_call(name: str, n: int) -> dict[str, float]:
        twice, once = dumps[f"twice-{name}-{n}"], dumps[f"once-{name}-{n}"]
        return {e: (twice[e] - once[e]) / calls for e in EVENTS}

    print(f"nop(*tensors) with 16-element float32 {framework} CPU tensors, each call followed by the evictor; "
          f"per call, the evictor's loop taken off (callgrind {' '.join(CACHES[1:])}, {calls} calls)\n")
    print("| tensors | library Ir | extension Ir | library I1 misses | extension I1 misses "
          "| library D1 misses | extension D1 misses | misses more (I1 + D1) |")
    print("|---|---|---|---|---|---|---|---|")
    for n in ARITIES:
        base = per_call("baseline", n)
        lib, ext = ({e: per_call(name, n)[e] - base[e] for e in EVENTS} for name in ("library", "extension"))
        more = lib["I1mr"] + lib["D1mr"] - ext["I1mr"] - ext["D1mr"]
        print(f"| {n} | {lib['Ir']:.0f} | {ext['Ir']:.0f} | {lib['I1mr']:.1f} | {ext['I1mr']:.1f} "
              f"| {lib['D1mr']:.1f} | {ext['D1mr']:.1f} | {more:+.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

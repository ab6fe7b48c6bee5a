"""The free-threaded build against the GIL build of the same CPython source, one thread: every
exchange-table entry point of dlpx.Tensor (benches/exchange_bench.c, embedded in each
interpreter) and dlpx.from_dlpack of numpy, dlpx and tvm_ffi tensors, in rounds that alternate
the two interpreters (the machine is shared and noisy); each number is the best over the rounds.
The target: free-threaded within 1.2x of the GIL build.

    python benches/free_threaded_vs_gil.py [--rounds N] [--gil PY] [--free-threaded PY]

The interpreters default to those scripts/build_free_threaded.sh builds (`3.14-gil` and
`3.14`); each needs numpy and apache-tvm-ffi. dlpx is target/release/libdlpx.so (cargo build
--release), the one library both load.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CACHE = os.environ.get("DLPX_FT_CACHE", os.path.expanduser("~/.cache/dlpx/free-threaded"))
TARGET = 1.2

FROM_DLPACK = r"""
import sys, time, numpy as np, dlpx
import tvm_ffi
objects = {"numpy": np.arange(16, dtype=np.float32)}
objects["dlpx"] = dlpx.from_dlpack(objects["numpy"], copy=True)
objects["tvm_ffi"] = tvm_ffi.from_dlpack(objects["numpy"])
def best(f, x):
    fastest = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(200_000):
            f(x)
        fastest = min(fastest, time.perf_counter() - start)
    return fastest / 200_000 * 1e9
for name, x in objects.items():
    print(f"| dlpx.from_dlpack({name}) | {best(dlpx.from_dlpack, x):.1f} |")  # the rows the driver reads
# Yardsticks without dlpx: what the interpreter's own build costs a call of the same shape.
print(f"| np.from_dlpack(numpy) (no dlpx) | {best(np.from_dlpack, objects['numpy']):.1f} |")
print(f"| np.asarray(numpy) (no dlpx) | {best(np.asarray, objects['numpy']):.1f} |")
"""


def build_harness(python: str, out: str) -> str:
    """exchange_bench compiled against `python`'s own headers and library (embedded)."""
    base = subprocess.check_output([python, "-c", "import sys; print(sys.base_prefix)"], text=True).strip()
    abi = subprocess.check_output([python, "-c", "import sys; print(sys.abiflags)"], text=True).strip()
    version = subprocess.check_output([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                      text=True).strip()
    config = os.path.join(base, "bin", f"python{version}{abi}-config")
    flags = subprocess.check_output([config, "--includes", "--ldflags", "--embed"], text=True).split()
    lib = os.path.join(out, "lib")
    os.makedirs(lib, exist_ok=True)
    link = os.path.join(lib, "libdlpx.so.0")
    if not os.path.exists(link):
        os.symlink(os.path.join(ROOT, "target", "release", "libdlpx.so"), link)
    exe = os.path.join(out, f"exchange_bench{abi}")
    subprocess.run(["cc", "-O2", "-std=c11", "-I", os.path.join(ROOT, "include"), *flags,
                    os.path.join(HERE, "exchange_bench.c"), "-o", exe, link, f"-Wl,-rpath,{lib}", "-lpthread", "-rdynamic",
                    *flags], check=True)
    return exe


def site_packages(python: str) -> str:
    return subprocess.check_output([python, "-c", "import site; print(site.getsitepackages()[0])"], text=True).strip()


def rows(text: str) -> dict:
    """{entry point: ns} from the markdown rows a run printed."""
    found, timing = {}, True
    for line in text.splitlines():
        if "heap bytes" in line:  # the harness's memory table: bytes, not ns
            timing = False
        elif "ns per call" in line:
            timing = True
        m = re.match(r"^\| ([^|]+?) \|\s+([0-9.]+) \|", line)
        if m and timing:
            found[m.group(1).strip()] = float(m.group(2))
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gil", default=os.path.join(CACHE, "venv-3.14", "bin", "python"))
    parser.add_argument("--free-threaded", default=os.path.join(CACHE, "venv-3.14t", "bin", "python"))
    args = parser.parse_args()
    env = dict(os.environ, DLPX_LIBRARY=os.path.join(ROOT, "target", "release", "libdlpx.so"),
               PYTHONPATH=os.path.join(ROOT, "python"))
    env.pop("PYTHON_GIL", None)
    pythons = {"GIL": args.gil, "free-threaded": args.free_threaded}
    best: dict = {name: {} for name in pythons}
    with tempfile.TemporaryDirectory() as out:
        harness = {name: build_harness(py, os.path.join(out, name)) for name, py in pythons.items()}
        versions = {name: subprocess.check_output([py, "-c", "import sys; print(sys.version.split()[0], "
                                                   "'GIL', 'on' if sys._is_gil_enabled() else 'off')"],
                                                  text=True, env=env).strip() for name, py in pythons.items()}
        for _ in range(args.rounds):
            for name, py in pythons.items():
                run_env = dict(env, PYTHONPATH=env["PYTHONPATH"] + os.pathsep + site_packages(py))
                run = subprocess.run([harness[name], "--quick", "dlpx.Tensor"], capture_output=True, text=True,
                                     env=run_env)
                if run.returncode != 0:
                    sys.exit(f"{harness[name]} failed ({run.returncode}):\n{run.stdout}{run.stderr}")
                found = rows(run.stdout)
                found.update(rows(subprocess.run([py, "-c", FROM_DLPACK], capture_output=True, text=True, env=env,
                                                 check=True).stdout))
                for entry, ns in found.items():
                    best[name][entry] = min(ns, best[name].get(entry, float("inf")))
    print(f"GIL: {versions['GIL']}; free-threaded: {versions['free-threaded']}; one thread, best of "
          f"{args.rounds} alternating rounds, ns per call\n")
    print(f"| entry point | GIL | free-threaded | free-threaded / GIL | target <= {TARGET} |")
    print("|---|---|---|---|---|")
    missed = 0
    for entry, gil_ns in best["GIL"].items():
        if entry == "entry point" or entry not in best["free-threaded"]:
            continue
        ratio = best["free-threaded"][entry] / gil_ns
        yardstick = "(no dlpx)" in entry
        missed += ratio > TARGET and not yardstick
        verdict = "yardstick" if yardstick else "ok" if ratio <= TARGET else "missed"
        print(f"| {entry} | {gil_ns:.1f} | {best['free-threaded'][entry]:.1f} | {ratio:.2f} | {verdict} |")
    print(f"\ntargets missed: {missed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

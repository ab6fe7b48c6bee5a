"""Instructions per call of dlpx's consumer paths, counted by valgrind's callgrind: repeatable on
a shared, noisy machine, where timings are not (a before/after of a change that must not cost
speed). One process imports every peer once; each case runs its calls with collection on only
inside dlpx's entry points, and `callgrind_control --dump` closes it.

    python benches/instructions.py [--calls N] [--cases from_dlpack,view_of,allocator]

Prints one row per case: instructions per call (inclusive of everything the entry point calls:
the producer's table, Python attribute reads; for the C entry points called through ctypes,
libffi's own share taken off). Needs valgrind (callgrind_control on PATH).
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# Where counting is on (valgrind's demangled names): `from_dlpack` itself, and libffi's
# `ffi_call` for the C entry points ctypes calls (their own symbols are not always named in an LTO
# build); the libffi share is measured on `dlpx_version()` and taken off.
ENTRY_POINTS = ["dlpx::module::METHODS::from_dlpack", "ffi_call"]

CHILD = r'''
import ctypes, os, subprocess, sys
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import numpy as np
import dlpx
calls, wanted = int(sys.argv[1]), sys.argv[2].split(",")
def dump(label):
    subprocess.run(["callgrind_control", "--dump=" + label, str(os.getpid())], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
producers = {"dlpx": lambda: dlpx.from_dlpack(np.arange(16, dtype=np.float32)),
             "numpy": lambda: np.arange(16, dtype=np.float32)}
makers = {  # each peer that is installed: module, how it makes a 16-element float32 array
    "torch": ("torch", "m.arange(16, dtype=m.float32)"),
    "tvm_ffi": ("tvm_ffi", "m.from_dlpack(np.arange(16, dtype=np.float32))"),
    "jax": ("jax.numpy", "m.arange(16, dtype=m.float32)"),
    "array_api_strict": ("array_api_strict", "m.asarray(np.arange(16, dtype=np.float32))"),
}
for name, (module, expression) in makers.items():
    try:
        m = __import__(module, fromlist=["_"])
    except ImportError:
        continue
    producers[name] = (lambda m, e: lambda: eval(e, {"m": m, "np": np}))(m, expression)

from dlpx.conform.abi import DLDataType, DLDevice, DLTensor, DlpxTensorView as View
lib = ctypes.PyDLL(dlpx.library_path())
lib.dlpx_view_of.argtypes = [ctypes.py_object, ctypes.POINTER(View)]
lib.dlpx_view_release.argtypes = [ctypes.POINTER(View)]
view = View()

lib.dlpx_version.restype = ctypes.c_char_p

def case(label, run):
    for _ in range(100):  # warm: first-use checks, caches
        run()
    dump("warm-" + label)
    for _ in range(calls):
        run()
    dump(label)

case("ctypes call of dlpx_version (libffi's share)", lambda: lib.dlpx_version())
for name, make in producers.items():
    x = make()
    if "from_dlpack" in wanted:
        case("from_dlpack " + name, lambda: dlpx.from_dlpack(x))
    if "view_of" in wanted:
        def view_and_release():
            assert lib.dlpx_view_of(x, ctypes.byref(view)) == 0
            lib.dlpx_view_release(ctypes.byref(view))
        case("view_of+release " + name, view_and_release)
if "allocator" in wanted:
    api = ctypes.cast(dlpx.Tensor.__c_dlpack_exchange_api__, ctypes.POINTER(ctypes.c_void_p * 7)).contents
    Allocator = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p)
    allocate = Allocator(api[2])
    shape = (ctypes.c_int64 * 1)(16)
    proto = DLTensor(None, DLDevice(1, 0), 1, DLDataType(2, 32, 1), shape, None, 0)
    out = ctypes.c_void_p()
    Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    def allocate_and_delete():
        assert allocate(ctypes.addressof(proto), ctypes.byref(out), None, None) == 0
        deleter = ctypes.cast(out.value + 16, ctypes.POINTER(ctypes.c_void_p))[0]  # version 8, manager_ctx 8
        Deleter(deleter)(out.value)
    case("allocator+deleter 16 floats", allocate_and_delete)
'''


def dumped_totals(directory: str) -> dict[str, int]:
    """label -> instructions of each `callgrind_control --dump=label` written in `directory`."""
    totals = {}
    for path in glob.glob(f"{directory}/cg.out*"):
        label = total = None
        for line in open(path):
            if line.startswith("desc: Trigger: dump "):
                label = line[len("desc: Trigger: dump "):].strip()
            elif line.startswith("totals:"):
                total = int(line.split()[1])
        if label and total is not None:
            totals[label] = total
    return totals


def called_inclusive(directory: str, label: str, wanted) -> int:
    """Instructions inside the calls to functions whose (demangled) name `wanted(name)` accepts,
    in the dump `label` of `directory`: each call's inclusive cost, counted once where such a
    function calls another (the outermost call only)."""
    for path in glob.glob(f"{directory}/cg.out*"):
        if f"desc: Trigger: dump {label}\n" in open(path).read():
            break
    else:
        raise KeyError(label)
    names: dict[str, str] = {}  # callgrind's name compression: "(id) name" once, then "(id)"

    def name_of(value: str) -> str:
        if not value.startswith("("):
            return value
        key, _, name = value.partition(" ")
        if name:
            names[key] = name
        return names.get(key, key)

    total, caller, callee, counting = 0, "", "", False
    for line in open(path):
        if line.startswith("fn="):
            caller = name_of(line[3:].strip())
        elif line.startswith("cfn="):
            callee = name_of(line[4:].strip())
        elif line.startswith("calls="):
            counting = wanted(callee) and not wanted(caller)
        elif counting:  # the line after calls=: the call's position and inclusive cost
            total += int(line.split()[1])
            counting = False
    return total


def main() -> int:
    calls = int(sys.argv[sys.argv.index("--calls") + 1]) if "--calls" in sys.argv else 5000
    cases = sys.argv[sys.argv.index("--cases") + 1] if "--cases" in sys.argv else "from_dlpack,view_of,allocator"
    with tempfile.TemporaryDirectory() as out:
        command = ["valgrind", "--tool=callgrind", "--collect-atstart=no",
                   *[f"--toggle-collect={name}" for name in ENTRY_POINTS],
                   f"--callgrind-out-file={out}/cg.out", sys.executable, "-c", CHILD, str(calls), cases]
        subprocess.run(command, check=True, stderr=subprocess.DEVNULL)
        rows = [(label, total) for label, total in dumped_totals(out).items() if not label.startswith("warm-")]
    ffi = next((total / calls for label, total in rows if label.startswith("ctypes call")), 0.0)
    print(f"| case ({calls} calls) | instructions per call |")
    print("|---|---|")
    for label, total in sorted(rows):
        per_call = total / calls
        if label.startswith("ctypes call"):
            print(f"| {label} | {per_call:.0f} |")
        elif label.startswith("from_dlpack"):
            print(f"| {label} | {per_call:.0f} |")
        else:  # through ctypes: libffi's share off (twice for the two calls of a view + release)
            print(f"| {label} | {per_call - ffi * (2 if '+' in label else 1):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Runs sim_cuda_cases.py against the simulated CUDA driver (c_tests/sim_cuda), once per driver
configuration, each in a fresh process: the driver is found and initialised once per process. It
runs with dlpx's block cache (the default) and without (DLPX_CUDA_CACHE_BYTES=0); the cache's own
cases (sim_cuda_cache_cases.py) run with it, and once more with each deliberately wrong cache
(DLPX_CUDA_CACHE_FAULT), which the simulator's stream-order check must catch.

The simulator is built by the CMake project; DLPX_SIM_CUDA_DIR names its directory (the test
script sets it). Without it these tests skip, unless DLPX_REQUIRE_ALL_TESTS=1 asks for everything.
"""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SIM_DIR = os.environ.get("DLPX_SIM_CUDA_DIR", "")
HAVE_SIM = os.path.isfile(os.path.join(SIM_DIR, "libcuda.so"))

if not HAVE_SIM and os.environ.get("DLPX_REQUIRE_ALL_TESTS") == "1":
    raise RuntimeError("DLPX_REQUIRE_ALL_TESTS=1 but DLPX_SIM_CUDA_DIR has no simulated libcuda.so")

pytestmark = pytest.mark.skipif(not HAVE_SIM, reason="the simulated CUDA driver is not built (set DLPX_SIM_CUDA_DIR)")


def sim_env(extra):
    """This process's environment with the simulator first on the library path, then `extra`."""
    env = dict(os.environ, LD_LIBRARY_PATH=SIM_DIR + os.pathsep + os.environ.get("LD_LIBRARY_PATH", ""))
    env.update(extra)
    return env


def run(env_extra, *pytest_args, cases="sim_cuda_cases.py"):
    env = sim_env(env_extra)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", os.path.join(HERE, cases), *pytest_args]
    return subprocess.run(command, env=env, cwd=HERE, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("cache", ["cache", "no cache"])
def test_every_case_passes_against_the_simulated_driver(cache):
    done = run({} if cache == "cache" else {"DLPX_CUDA_CACHE_BYTES": "0"})
    print(done.stdout[-6000:], done.stderr[-3000:])
    assert done.returncode == 0, done.stdout[-6000:]


def test_every_cuda_array_interface_case_passes_against_the_simulated_driver():
    done = run({}, cases="sim_cuda_interface_cases.py")
    print(done.stdout[-6000:], done.stderr[-3000:])
    assert done.returncode == 0, done.stdout[-6000:]


def test_every_block_cache_case_passes_against_the_simulated_driver():
    done = run({}, cases="sim_cuda_cache_cases.py")
    print(done.stdout[-6000:], done.stderr[-3000:])
    assert done.returncode == 0, done.stdout[-6000:]


@pytest.mark.parametrize("fault, caught", [("ignore_uses", "memory reused before its user's work was ordered"),
                                           ("ignore_capture", "graph memory mixed with the cache's")])
def test_a_wrong_cache_is_caught_by_the_randomized_case(fault, caught):
    # The same randomized case, with the cache deliberately wrong: it must fail, and say why.
    env = {"DLPX_CUDA_CACHE_FAULT": fault, "SIM_CUDA_VERBOSE": "0"}
    done = run(env, "-k", "randomized", cases="sim_cuda_cache_cases.py")
    assert done.returncode != 0 and caught in done.stdout, done.stdout[-6000:]


PROBE = "import dlpx\ntry:\n    dlpx.empty((4,), 'float32', 'cuda:0')\nexcept Exception as e:\n    print(type(e).__name__, e)\n"


def probe(env_extra, code=PROBE):
    done = subprocess.run([sys.executable, "-c", code], env=sim_env(env_extra), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_driver_older_than_11_2_is_refused_by_name():
    assert probe({"SIM_CUDA_DRIVER_VERSION": "11010"}) == (
        "RuntimeError dlpx: empty: the CUDA driver is too old: version 11010, dlpx needs 11.2 or later"
    )


def test_a_machine_without_devices_names_the_count():
    assert probe({"SIM_CUDA_DEVICES": "0"}) == (
        "ValueError dlpx: empty: device cuda:0 does not exist: this machine has 0 CUDA device(s)"
    )


@pytest.mark.parametrize("value", ["1.5G", "1T", "-1", "abc", "1GiB"])
def test_a_cache_size_that_is_no_byte_count_is_refused_naming_it(value):
    assert probe({"DLPX_CUDA_CACHE_BYTES": value}) == (
        f"ValueError dlpx: empty: DLPX_CUDA_CACHE_BYTES={value!r} is no byte count".replace("'", '"')
        + " (a number of bytes, or of K, M or G: 512M, 4G; 0 turns the cache off)"
    )


def test_a_cache_size_that_is_no_utf8_is_refused_too():
    said = probe({"DLPX_CUDA_CACHE_BYTES": "\udcff1G"})  # the byte 0xff, then 1G
    assert said.startswith("ValueError dlpx: empty: DLPX_CUDA_CACHE_BYTES=") and "is no byte count" in said, said


def test_a_cache_size_in_megabytes_is_the_cache_s_limit_and_an_empty_one_the_default():
    code = "import dlpx\ndlpx.empty((1,), 'float32', 'cuda:0')\nprint(dlpx.cuda.memory_stats(0)['cache_limit_bytes'])\n"
    assert probe({"DLPX_CUDA_CACHE_BYTES": "512M"}, code) == str(512 << 20)
    assert probe({"DLPX_CUDA_CACHE_BYTES": ""}, code) == str(1 << 30)


def test_devices_without_memory_pools_use_cu_mem_alloc():
    code = (
        "import ctypes, os, dlpx\n"
        "sim = ctypes.CDLL(os.path.join(os.environ['DLPX_SIM_CUDA_DIR'], 'libcuda.so'))\n"
        "sim.sim_cuda_calls.restype = ctypes.c_long\n"
        "t = dlpx.empty((16,), 'float32', 'cuda:0'); del t\n"
        "dlpx.cuda.empty_cache()  # the cache gives its block back\n"
        "print(*(sim.sim_cuda_calls(n) for n in (b'cuMemAlloc_v2', b'cuMemFree_v2', b'cuMemAllocFromPoolAsync', b'cuMemFreeAsync')))\n"
    )
    assert probe({"SIM_CUDA_NO_POOLS": "1"}, code) == "1 1 0 0"


def test_a_driver_lacking_a_function_is_an_error_not_a_crash():
    # The same simulator built without cuMemPoolTrimTo, as an older or partial driver would be.
    incomplete = SIM_DIR.rstrip(os.sep) + "_incomplete"
    env = {"LD_LIBRARY_PATH": incomplete}
    assert probe(env) == "RuntimeError dlpx: empty: the CUDA driver lacks cuMemPoolTrimTo"


GIL_RACE = """
import ctypes, sys, threading, time
import dlpx
from dlpx.conform import abi

lib = ctypes.CDLL(dlpx.library_path())  # CDLL: each call releases the GIL
table = abi.exchange_table(dlpx.Tensor)
allocate = abi.Allocator(table.managed_tensor_allocator)
proto = abi.prototype((256,), device=(2, 0))
stop = False

def spin():  # holds the GIL most of the time, with exceptions coming and going
    d = {}
    while not stop:
        try:
            d[1]
        except KeyError:
            pass

threading.Thread(target=spin, daemon=True).start()
time.sleep(0.05)
for i in range(3000):
    out = ctypes.c_void_p()
    assert allocate(ctypes.byref(proto), ctypes.cast(ctypes.byref(out), ctypes.POINTER(ctypes.c_void_p)), None, abi.SetError()) == 0
    managed = abi.managed_at(out.value)
    abi.Deleter(ctypes.cast(managed.deleter, ctypes.c_void_p).value)(out.value)  # cuMemFree, without the GIL
stop = True
print("done")
"""


def test_a_thread_without_the_gil_never_releases_another_thread_s_gil():
    # The deleter runs in a thread that does not hold the GIL while another thread does: dlpx
    # must not take that for its own (on CPython < 3.12 the "current" thread state is the GIL
    # holder's) and release it. Before the fix this aborted or segfaulted the other thread.
    # Without the cache, so that every deleter calls the driver.
    env = {"SIM_CUDA_NO_POOLS": "1", "DLPX_CUDA_CACHE_BYTES": "0", "PYTHONPATH": HERE + os.pathsep + os.environ.get("PYTHONPATH", "")}
    assert probe(env, GIL_RACE) == "done"


PINNED_FENCES = """
import ctypes, os, dlpx
sim = ctypes.CDLL(os.path.join(os.environ["DLPX_SIM_CUDA_DIR"], "libcuda.so"))
sim.sim_cuda_calls.restype = ctypes.c_long
p = dlpx.empty((1000,), "float32", "cuda_host")  # dlpx sets up cuda:0 only
if os.environ.get("OTHER_FRAMEWORK_ON_CUDA1"):
    ctx = ctypes.c_void_p()
    assert sim.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 1) == 0  # as torch does on cuda:1
sim.sim_cuda_reset_counts()
del p
print(sim.sim_cuda_calls(b"cuEventRecord"))
"""


@pytest.mark.parametrize("other_framework, fences", [(False, "1"), (True, "2")])
def test_pinned_blocks_are_fenced_on_every_device_someone_uses(other_framework, fences):
    env = {"OTHER_FRAMEWORK_ON_CUDA1": "1"} if other_framework else {}
    assert probe(env, PINNED_FENCES) == fences


CAP = """
import dlpx
tensors = [dlpx.empty((512,), "float32", "cuda:0") for _ in range(3)]  # 2048 bytes each
del tensors  # two fit under the 4 KiB cap; the third goes back to the driver
big = dlpx.empty((17 << 20,), "float32", "cuda:0")  # 68 MiB: above the largest class
del big  # straight back to the driver
s = dlpx.cuda.memory_stats(0)
print(s["cache_limit_bytes"], s["cached_bytes.all.current"], s["num_device_alloc"], s["num_device_free"])
"""


def test_the_cache_keeps_no_more_than_its_cap_and_no_block_above_the_largest_class():
    assert probe({"DLPX_CUDA_CACHE_BYTES": "4K"}, CAP) == "4096 4096 4 2"


EXIT = """
import ctypes, dlpx
kept = dlpx.empty((1024,), "float32", "cuda:0")
ctypes.pythonapi.Py_IncRef(ctypes.py_object(kept))  # still alive when the interpreter is gone
for n in (16, 1000, 100000):
    dlpx.empty((n,), "float32", "cuda:0")  # freed at once: cached
    dlpx.empty((n,), "float32", "cuda_host")
"""


@pytest.mark.parametrize("cache", ["cache", "no cache"])
def test_at_exit_only_memory_a_live_tensor_holds_is_left(cache):
    # The simulator reports at unload, after every atexit function, as compute-sanitizer's leak
    # check does; dlpx's exit hook runs after Python's finalisation, so it must not touch Python.
    env = sim_env({"SIM_CUDA_EXIT_REPORT": "1", **({} if cache == "cache" else {"DLPX_CUDA_CACHE_BYTES": "0"})})
    done = subprocess.run([sys.executable, "-c", EXIT], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "sim_cuda: at exit: 1 device (4096 bytes), 0 pinned, 0 managed allocations live" in done.stderr, done.stderr


FAILED_SET_UP = """
import ctypes, os, dlpx
sim = ctypes.CDLL(os.path.join(os.environ["DLPX_SIM_CUDA_DIR"], "libcuda.so"))
sim.sim_cuda_fail(b"cuCtxPushCurrent_v2", 201, 1)
try:
    dlpx.empty((4,), "float32", "cuda:1")
except RuntimeError as e:
    print(type(e).__name__, sim.sim_cuda_retains(1), end=" ")
dlpx.empty((4,), "float32", "cuda:1")  # the retry sets the device up
print(sim.sim_cuda_retains(1))
"""


def test_a_device_whose_set_up_fails_keeps_no_context_retained():
    assert probe({}, FAILED_SET_UP) == "RuntimeError 0 1"

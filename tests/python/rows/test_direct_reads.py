"""Each direct read serves the calls it claims (docs/design.md, "A guard per direct read"): every
entry point — `from_dlpack`, `dlpx.Tensor(x)`, the kernel API's `dlpx_import`, `dlpx_view_of`
and `dlpx_read_view_of`, the row's synthetic table — answers a numpy, tvm_ffi, jax or
array_api_strict object through that row's read, and a torch tensor's checks through torch's
native functions, one served call per call (`dlpx._native._served`). These
fail where a row is switched off or falls back to `__dlpack__`, which the value tests would not
notice. With a row off, the producer's own crash guards stay: a tvm_ffi wrapper whose handle
moved out is still a BufferError. A first-use check that disagrees is a RuntimeWarning naming
the producer, its version and the difference (an error under DLPX_DIRECT_STRICT, which the
suite sets)."""

import ctypes
import os
import subprocess
import sys
import sysconfig
import textwrap
import threading

import numpy as np
import pytest
from dlpx.conform.abi import DlpxTensorView

from dlpx.conform import abi
import dlpx
from direct_reads import served, serves

_LIB = ctypes.PyDLL(dlpx.library_path())
for _name in ("dlpx_view_of", "dlpx_read_view_of"):
    getattr(_LIB, _name).argtypes = [ctypes.py_object, ctypes.POINTER(DlpxTensorView)]
_LIB.dlpx_view_release.argtypes = [ctypes.POINTER(DlpxTensorView)]
_LIB.dlpx_view_release.restype = None
_LIB.dlpx_import.argtypes = [ctypes.py_object, ctypes.POINTER(ctypes.c_void_p)]


def numpy_array():
    return np.arange(12, dtype=np.float32).reshape(3, 4)


# Each row's object, a 3x4 float32 tensor of its producer: the producer's module, and how it
# makes one from numpy's.
MAKERS = {
    "numpy": ("numpy", lambda np: numpy_array()),
    "tvm_ffi": ("tvm_ffi", lambda tvm_ffi: tvm_ffi.from_dlpack(numpy_array())),
    "jax": ("jax.numpy", lambda jnp: jnp.asarray(numpy_array())),
    "array_api_strict": ("array_api_strict", lambda xp: xp.asarray(numpy_array())),
    "torch": ("torch", lambda torch: torch.asarray(numpy_array())),
}


def make(row):
    module, build = MAKERS[row]
    return build(pytest.importorskip(module))


def from_dlpack(x):
    assert dlpx.from_dlpack(x).shape == (3, 4)


def constructor(x):
    assert dlpx.Tensor(x).shape == (3, 4)


def imported(x):
    out = ctypes.c_void_p()
    assert _LIB.dlpx_import(x, ctypes.byref(out)) == 0
    abi.call_deleter(out.value, abi.managed_at(out.value).deleter)


def viewed(x, entry="dlpx_view_of"):
    view = DlpxTensorView()
    assert getattr(_LIB, entry)(x, ctypes.byref(view)) == 0
    assert abi.describe(view.tensor)["shape"] == (3, 4)
    _LIB.dlpx_view_release(ctypes.byref(view))


def read_viewed(x):
    viewed(x, "dlpx_read_view_of")


def synthetic_managed(x):
    table = abi.DLPackExchangeAPI.from_address(abi.capsule_pointer(dlpx.exchange_api_of(type(x))))
    out = ctypes.c_void_p()
    assert abi.FromPyObject(table.managed_tensor_from_py_object_no_sync)(x, ctypes.byref(out)) == 0
    abi.call_deleter(out.value, abi.managed_at(out.value).deleter)


def synthetic_view(x):
    table = abi.DLPackExchangeAPI.from_address(abi.capsule_pointer(dlpx.exchange_api_of(type(x))))
    view = abi.DLTensor()
    assert abi.DLTensorFromPyObject(table.dltensor_from_py_object_no_sync)(x, ctypes.byref(view)) == 0
    assert abi.describe(view)["shape"] == (3, 4)


ENTRIES = {
    "from_dlpack": from_dlpack,
    "Tensor(x)": constructor,
    "dlpx_import": imported,
    "dlpx_view_of": viewed,
    "dlpx_read_view_of": read_viewed,
    "synthetic managed entry": synthetic_managed,
    "synthetic view entry": synthetic_view,
}
# torch publishes its own table (not dlpx's synthetic one); only tvm_ffi's row views in place.
CASES = [
    pytest.param(row, entry, id=f"{row}-{entry}", marks=pytest.mark.direct_read(row))
    for row in MAKERS
    for entry in ENTRIES
    if not (row == "torch" and entry.startswith("synthetic")) and (entry != "synthetic view entry" or row == "tvm_ffi")
]
CALLS = 5


@pytest.mark.parametrize("row, entry", CASES)
def test_every_entry_point_is_served_by_the_rows_direct_read(row, entry):
    x, call = make(row), ENTRIES[entry]
    call(x)  # the process's first object of the row may take the first-use check
    with serves(row, calls=CALLS):
        for _ in range(CALLS):
            call(x)


@pytest.mark.direct_read("numpy")
def test_the_count_is_the_processs_under_the_gil_and_the_threads_own_without():
    # A GIL build counts under the GIL, one counter; a free-threaded one counts per thread (one
    # counter that every thread wrote would pass its cache line between the cores on every call).
    a = numpy_array()
    dlpx.from_dlpack(a)
    before = served("numpy")
    worker = threading.Thread(target=lambda: [dlpx.from_dlpack(a) for _ in range(10)])
    worker.start()
    worker.join()
    assert served("numpy") - before == (0 if sysconfig.get_config_var("Py_GIL_DISABLED") else 10)
    with serves("numpy", calls=1):
        dlpx.from_dlpack(a)


def test_an_unknown_row_is_a_value_error_naming_the_counted_ones():
    with pytest.raises(ValueError, match=r"^dlpx: _served: no direct read named 'table' is counted \(these are: numpy, tvm_ffi, jax, array_api_strict, torch, torch_shim, torch_outputs\)$"):
        served("table")


# ---- what a row switched off keeps, what a disagreement says (each in a fresh process) ----------


def fresh(code: str, env: dict) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLPX_DIRECT")} | env
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=300)


def test_a_moved_out_tvm_ffi_wrapper_is_a_buffer_error_with_the_row_off():
    # tvm_ffi's own __dlpack__ dereferences the NULL handle: with the read off, the handle check
    # stays (through tvm_ffi's __chandle__()) and no call reaches it.
    pytest.importorskip("tvm_ffi")
    result = fresh(
        """
        import ctypes, numpy as np, tvm_ffi, dlpx
        from dlpx.conform.abi import DlpxTensorView
        t = tvm_ffi.from_dlpack(np.arange(4, dtype=np.float32))
        other = tvm_ffi.core.Tensor.__new__(tvm_ffi.core.Tensor)
        other.__move_handle_from__(t)
        lib = ctypes.PyDLL(dlpx.library_path())
        lib.dlpx_view_of.argtypes = [ctypes.py_object, ctypes.POINTER(DlpxTensorView)]
        for read in (dlpx.from_dlpack, dlpx.Tensor, lambda t: lib.dlpx_view_of(t, ctypes.byref(DlpxTensorView()))):
            try:
                read(t)
            except BufferError as e:
                print("refused:", e)
        print("served:", dlpx._native._served("tvm_ffi"))
        """,
        {"DLPX_DIRECT_OFF": "tvm_ffi"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("refused: dlpx:") == 3 and result.stdout.count("handle was moved out") == 3
    assert "served: 0" in result.stdout


# array_api_strict's `__dlpack__` is Python: it can be made to lie, as a release that changed what
# it exports would. The first-use check is asked for (its version is a tested one).
LYING = """
    import warnings, numpy as np, array_api_strict as xp, dlpx
    from array_api_strict._array_object import Array
    other, calls = np.full(4, 7.0), []
    def lying(self, **kwargs):
        calls.append(1)
        return other.__dlpack__(**kwargs)
    Array.__dlpack__ = lying
    warnings.simplefilter("always")
    for _ in range(3):
        try:
            print(np.from_dlpack(dlpx.from_dlpack(xp.arange(4.0))).tolist())
        except RuntimeError as e:
            print("error:", e)
    print("served:", dlpx._native._served("array_api_strict"), "calls:", len(calls))
"""


def test_a_disagreement_warns_once_naming_the_producer_its_version_and_the_difference():
    xp = pytest.importorskip("array_api_strict")
    result = fresh(LYING, {"DLPX_DIRECT_VERIFY": "array_api_strict"})
    assert result.returncode == 0, result.stdout + result.stderr
    # `__dlpack__`'s answer is the answer: once to check, then once for each later import.
    assert result.stdout.splitlines() == ["[7.0, 7.0, 7.0, 7.0]"] * 3 + ["served: 0 calls: 3"]
    warnings = [line for line in result.stderr.splitlines() if "RuntimeWarning" in line]
    assert len(warnings) == 1, result.stderr
    assert (f"dlpx: the array_api_strict direct read disagrees with array_api_strict {xp.__version__}'s own "
            "__dlpack__: data 0x") in warnings[0]


def test_under_strict_every_object_of_a_read_that_disagrees_is_an_error():
    pytest.importorskip("array_api_strict")
    result = fresh(LYING, {"DLPX_DIRECT_VERIFY": "array_api_strict", "DLPX_DIRECT_STRICT": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    # Every import is checked again, and refused again.
    assert len(lines) == 4 and lines[-1] == "served: 0 calls: 3", result.stdout
    assert all(line.startswith("error: dlpx: from_dlpack: the array_api_strict direct read disagrees") and
               line.endswith("(DLPX_DIRECT_STRICT is set)") for line in lines[:3]), result.stdout
    assert "RuntimeWarning" not in result.stderr

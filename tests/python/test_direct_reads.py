"""Each direct read serves the calls it claims (docs/design.md, "A guard per direct read"): every
entry point — `from_dlpack`, `dlpx.Tensor(x)`, the kernel API's `dlpx_import`, `dlpx_view_of`
and `dlpx_read_view_of`, the row's synthetic table — answers a numpy, tvm_ffi, jax or
array_api_strict object through that row's read, and a torch tensor's checks through torch's
native functions, one served call per call (`dlpx._native._served`). These
fail where a row is switched off or falls back to `__dlpack__`, which the value tests would not
notice."""

import ctypes
import sysconfig
import threading

import numpy as np
import pytest
from dlpx.conform.abi import DlpxTensorView

import dlpack_abi as abi
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
    abi.call_deleter(out.value, abi.versioned_at(out.value).deleter)


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
    abi.call_deleter(out.value, abi.versioned_at(out.value).deleter)


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
    with pytest.raises(ValueError, match=r"^dlpx: _served: no direct read named 'table' is counted \(these are: numpy, tvm_ffi, jax, array_api_strict, torch\)$"):
        served("table")

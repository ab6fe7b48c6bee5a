"""One importer seam (docs/design.md, "Producers: one seam"): every type gets a row, found once;
`dlpx.exchange_api_of` / `dlpx_exchange_api_of` give any type's table — its own, or dlpx's
synthetic one, a DLPackExchangeAPI a C kernel uses like any other — and every direct read has a
guard: tested versions, a first-use check on the others, an off switch (whose misspelt names warn)."""

import ctypes
import json
import os
import subprocess
import sys
import textwrap

import array_api_strict
import numpy as np
import pytest
torch = pytest.importorskip("torch")  # not on the free-threaded interpreters
tvm_ffi = pytest.importorskip("tvm_ffi")

from dlpx.conform import abi
import dlpx

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")  # noqa: E402

_LIB = ctypes.PyDLL(dlpx.library_path())
_LIB.dlpx_exchange_api_of.argtypes = [ctypes.py_object]
_LIB.dlpx_exchange_api_of.restype = ctypes.c_void_p
_LIB.dlpx_exchange_api_select.argtypes = [ctypes.c_void_p]
_LIB.dlpx_exchange_api_select.restype = ctypes.c_void_p


def read(address) -> dict:
    m = abi.managed_at(address)
    info = abi.describe(m.dl_tensor)
    info.update(version=(m.version.major, m.version.minor), flags=m.flags, deleter=m.deleter)
    return info


def table_of(thing) -> int:
    return abi.capsule_pointer(dlpx.exchange_api_of(thing))


class Minimal:
    """A producer written in the test suite alone: a `__dlpack__` and nothing else."""

    calls = 0

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        Minimal.calls += 1
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


ROWS = {
    "dlpx": lambda: dlpx.empty((2,)),
    "torch": lambda: torch.zeros(2),
    "numpy": lambda: np.zeros(2),
    "tvm_ffi": lambda: tvm_ffi.from_dlpack(np.zeros(2)),
    "jax": lambda: jnp.zeros(2),
    "array_api_strict": lambda: array_api_strict.asarray(np.zeros(2)),
    "capsule": lambda: np.zeros(2).__dlpack__(),
    "dlpack": lambda: Minimal(np.zeros(2)),
    "table": lambda: tvm_ffi.core.DLTensorTestWrapper(tvm_ffi.from_dlpack(dlpx.empty((2,)))),
}


@pytest.mark.parametrize("row", ROWS)
def test_every_type_has_its_row(row):
    obj = ROWS[row]()
    assert dlpx._native._row_of(obj) == row
    assert dlpx._native._row_of(type(obj)) == row


def test_subclasses_of_a_direct_read_go_to_their_own_dlpack():
    class Sub(np.ndarray):
        pass

    assert dlpx._native._row_of(Sub) == "dlpack"
    assert dlpx._native._row_of(torch.Tensor) == "torch"
    assert dlpx._native._row_of(type("T", (torch.Tensor,), {})) == "torch"  # torch's table, inherited


def test_a_type_that_publishes_a_table_gets_that_table():
    assert table_of(torch.Tensor) == abi.exchange_table_address(torch.Tensor)[0]
    assert table_of(dlpx.Tensor) == abi.exchange_table_address(dlpx.Tensor)[0]
    assert table_of(torch.zeros(1)) == table_of(torch.Tensor)


@pytest.mark.parametrize("row", ["numpy", "tvm_ffi", "jax", "array_api_strict", "capsule", "dlpack"])
def test_a_type_without_one_gets_a_synthetic_v1_table_of_its_row(row):
    obj = ROWS[row]()
    address = table_of(obj)
    assert address == table_of(type(obj)) == _LIB.dlpx_exchange_api_of(obj) == _LIB.dlpx_exchange_api_of(type(obj))
    table = abi.DLPackExchangeAPI.from_address(address)
    assert (table.header.version.major, table.header.version.minor) == (1, 3)
    assert not table.header.prev_api
    assert _LIB.dlpx_exchange_api_select(address) == address  # chained like any table
    dlpx_table = abi.exchange_table(dlpx.Tensor)
    assert table.managed_tensor_allocator == dlpx_table.managed_tensor_allocator
    assert table.managed_tensor_to_py_object_no_sync == dlpx_table.managed_tensor_to_py_object_no_sync
    assert table.current_work_stream == dlpx_table.current_work_stream
    assert table.managed_tensor_from_py_object_no_sync
    assert bool(table.dltensor_from_py_object_no_sync) == (row == "tvm_ffi")  # views in place
    assert len({table_of(ROWS[r]()) for r in ["numpy", "tvm_ffi", "jax", "array_api_strict", "dlpack"]}) == 5


def test_a_producer_added_in_the_test_suite_alone_is_read_through_its_row_table_from_c():
    source = np.arange(6, dtype=np.float32).reshape(2, 3)
    obj = Minimal(source)
    table = abi.DLPackExchangeAPI.from_address(table_of(Minimal))
    Minimal.calls = 0
    out = ctypes.c_void_p()
    assert abi.FromPyObject(table.managed_tensor_from_py_object_no_sync)(obj, ctypes.byref(out)) == 0
    assert Minimal.calls == 1
    got = read(out.value)
    # numpy's own managed tensor, handed on as it made it.
    assert (got["version"][0], got["shape"], got["data"]) == (1, (2, 3), source.ctypes.data)
    # to_py of the synthetic table: the managed tensor becomes a dlpx.Tensor (the table's own type).
    result = ctypes.c_void_p()
    assert abi.ToPyObject(table.managed_tensor_to_py_object_no_sync)(out.value, ctypes.byref(result)) == 0
    tensor = abi.object_at(result.value)
    abi.decref(result.value)
    assert isinstance(tensor, dlpx.Tensor) and tensor.data_ptr == source.ctypes.data
    # Its allocator is dlpx's: outputs for a kernel taking this producer's objects.
    proto = abi.prototype((4,))
    allocated = ctypes.c_void_p()
    assert abi.Allocator(table.managed_tensor_allocator)(ctypes.byref(proto), ctypes.byref(allocated), None, abi.SetError()) == 0
    info = read(allocated.value)
    assert info["shape"] == (4,) and info["data"] % 256 == 0
    abi.call_deleter(allocated.value, info["deleter"])


def test_a_synthetic_table_reads_any_object_by_its_own_row():
    numpy_table = abi.DLPackExchangeAPI.from_address(table_of(np.ndarray))
    x = torch.arange(3.0)
    out = ctypes.c_void_p()
    assert abi.FromPyObject(numpy_table.managed_tensor_from_py_object_no_sync)(x, ctypes.byref(out)) == 0
    got = read(out.value)
    assert got["data"] == x.data_ptr()
    abi.call_deleter(out.value, got["deleter"])


@pytest.mark.direct_read("tvm_ffi")
def test_the_tvm_ffi_table_views_in_place_and_refuses_a_view_where_the_row_has_none():
    table = abi.DLPackExchangeAPI.from_address(table_of(tvm_ffi.core.Tensor))
    view = abi.DLTensor()
    t = tvm_ffi.from_dlpack(np.arange(4.0))
    assert abi.DLTensorFromPyObject(table.dltensor_from_py_object_no_sync)(t, ctypes.byref(view)) == 0
    assert abi.describe(view)["shape"] == (4,)
    with pytest.raises(BufferError, match="no non-owning view"):
        abi.DLTensorFromPyObject(table.dltensor_from_py_object_no_sync)(np.arange(4.0), ctypes.byref(view))


def test_exchange_api_of_refuses_null_from_c():
    _LIB.dlpx_exchange_api_of.argtypes = [ctypes.c_void_p]
    try:
        with pytest.raises(ValueError, match="py_object is NULL"):
            _LIB.dlpx_exchange_api_of(None)
    finally:
        _LIB.dlpx_exchange_api_of.argtypes = [ctypes.py_object]


# ---- guards: tested versions, the first-use check, the off switch (each in a fresh process) ----

GUARD_PROBE = textwrap.dedent("""
    import sys, numpy as np, array_api_strict
    from array_api_strict import _array_object
    if len(sys.argv) > 1:
        array_api_strict.__version__ = sys.argv[1]  # a version the read was not tested on
    calls = 0
    original = _array_object.Array.__dlpack__
    legacy = len(sys.argv) > 2 and sys.argv[2] == "legacy"
    def counting(self, **kwargs):
        global calls
        calls += 1
        # An older producer: a legacy capsule, which cannot say whether the array is writable.
        return self._array.__dlpack__() if legacy else original(self, **kwargs)
    _array_object.Array.__dlpack__ = counting
    import dlpx
    x = array_api_strict.asarray(np.arange(4.0))
    for _ in range(5):
        assert dlpx.from_dlpack(x).data_ptr == x._array.ctypes.data
    print(calls)
""")


def dlpack_calls(env, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLPX_DIRECT")} | env
    result = subprocess.run([sys.executable, "-c", GUARD_PROBE, *args], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return int(result.stdout.split()[-1])


def test_a_tested_version_is_read_directly_from_the_first_object():
    assert array_api_strict.__version__.startswith("2.6"), "the installed version is the tested one"
    assert dlpack_calls({}) == 0


def test_an_untested_version_takes_the_first_use_check_once():
    assert dlpack_calls({}, "99.0") == 1


def test_a_legacy_answer_to_the_first_use_check_is_no_disagreement_about_writability():
    # A legacy capsule is imported read-only by assumption; the direct read knows the array is
    # writable. Only the description decides (numpy before 2.1 answers with legacy capsules).
    assert dlpack_calls({}, "99.0", "legacy") == 1


def test_the_first_use_check_can_be_asked_for_on_a_tested_version():
    assert dlpack_calls({"DLPX_DIRECT_VERIFY": "array_api_strict"}) == 1
    assert dlpack_calls({"DLPX_DIRECT_VERIFY": "all"}) == 1


def test_the_off_switch_sends_every_object_to_dlpack():
    assert dlpack_calls({"DLPX_DIRECT_OFF": "array_api_strict"}) == 5
    assert dlpack_calls({"DLPX_DIRECT_OFF": "numpy,all"}) == 5
    assert dlpack_calls({"DLPX_DIRECT_OFF": "numpy"}) == 0  # another row's switch


SWITCH_WARNINGS = textwrap.dedent("""
    import json, warnings
    import numpy as np
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import dlpx
        dlpx.from_dlpack(np.zeros(2))  # the switches are read now; the names were checked at import
        import importlib
        importlib.reload(dlpx)
    print(json.dumps([(w.category.__name__, str(w.message)) for w in caught]))
""")


def switch_warnings(env):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLPX_DIRECT")} | env
    result = subprocess.run([sys.executable, "-c", SWITCH_WARNINGS], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_switch_that_names_an_unknown_row_warns_once_naming_it_and_the_known_ones():
    [(category, message)] = switch_warnings({"DLPX_DIRECT_OFF": "nmupy, jax"})
    assert category == "UserWarning"
    assert message == ("dlpx: DLPX_DIRECT_OFF names 'nmupy', which it does not know (ignored); "
                       "it knows numpy, tvm_ffi, jax, array_api_strict, torch, all")


def test_torch_s_native_checks_have_an_off_switch_and_no_first_use_check():
    assert switch_warnings({"DLPX_DIRECT_OFF": "torch"}) == []
    [(_, message)] = switch_warnings({"DLPX_DIRECT_VERIFY": "torch,numpy,tvm-ffi"})
    assert message.startswith("dlpx: DLPX_DIRECT_VERIFY names 'torch', 'tvm-ffi', which it does not know")
    assert message.endswith("it knows numpy, tvm_ffi, jax, array_api_strict, all")


@pytest.mark.parametrize("env", [
    {},
    {"DLPX_DIRECT_OFF": "all", "DLPX_DIRECT_VERIFY": "all"},
    {"DLPX_DIRECT_OFF": "numpy, jax,", "DLPX_DIRECT_VERIFY": ""},
    {"DLPX_DIRECT_VERIFY": "array_api_strict,tvm_ffi"},
])
def test_switches_that_name_known_rows_say_nothing(env):
    assert switch_warnings(env) == []


_SET_ERROR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)


def _like(framework):
    """An object of `framework` for the kernel API's `like` ("none": NULL, dlpx's own table)."""
    if framework == "torch":
        return pytest.importorskip("torch").zeros(2)
    return np.zeros(2, np.float32) if framework == "numpy" else None


@pytest.mark.parametrize("framework", ["none", "numpy", "torch"])
def test_allocate_like_reports_a_table_s_error_once_and_to_the_last_error_without_a_set_error(framework):
    # torch's allocator calls its SetError unchecked: the caller's NULL was passed on to it (a
    # crash). Every table's error now goes to dlpx_last_error(), then to the caller's callback.
    like, lib = _like(framework), ctypes.PyDLL(dlpx.library_path())
    lib.dlpx_allocate_like.argtypes = [ctypes.py_object, ctypes.POINTER(abi.DLTensor), ctypes.POINTER(ctypes.c_void_p),
                                       ctypes.c_void_p, _SET_ERROR]
    lib.dlpx_last_error.restype = ctypes.c_char_p
    shape = (ctypes.c_int64 * 2)(2, -3)
    prototype = abi.DLTensor()
    prototype.device, prototype.ndim, prototype.dtype = abi.DLDevice(1, 0), 2, abi.DLDataType(2, 32, 1)
    prototype.shape = shape
    out = ctypes.c_void_p()
    lib.dlpx_clear_last_error()
    assert lib.dlpx_allocate_like(like, ctypes.byref(prototype), ctypes.byref(out), None, _SET_ERROR()) == -1
    assert not out.value and lib.dlpx_last_error()
    reported = []
    callback = _SET_ERROR(lambda ctx, kind, message: reported.append((kind, message)))
    lib.dlpx_clear_last_error()
    assert lib.dlpx_allocate_like(like, ctypes.byref(prototype), ctypes.byref(out), None, callback) == -1
    # The last error less a C++ backtrace (torch's), the callback the table's own words.
    assert len(reported) == 1 and reported[0][1].startswith(lib.dlpx_last_error()), reported


@pytest.mark.parametrize("framework", ["none", "numpy", "torch"])
def test_to_py_like_refuses_null_and_an_unknown_major_and_leaves_the_tensor_with_the_caller(framework):
    # torch's to_py read a major-2 struct as a 1.x one (past its version); NULL was passed on.
    from numpy_producers import Managed

    like, lib = _like(framework), ctypes.PyDLL(dlpx.library_path())
    lib.dlpx_to_py_like.argtypes = [ctypes.py_object, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
    out = ctypes.c_void_p()
    with pytest.raises(ValueError, match=r"^dlpx: to_py_like: .*NULL"):
        lib.dlpx_to_py_like(like, None, ctypes.byref(out))
    newer = Managed(np.arange(3.0), version=(2, 0))
    with pytest.raises(BufferError, match=r"^dlpx: to_py_like: .*major version 2"):
        lib.dlpx_to_py_like(like, newer.address, ctypes.byref(out))
    assert newer.calls == 0 and not out.value  # still the caller's
    abi.call_deleter(newer.address, newer.struct.deleter)
    assert newer.calls == 1

"""dlpx's exchange table called directly, as a C consumer (torch, tvm-ffi) calls it: the three
PyObject entry points with their failures and ownership rules (docs/design.md R4), the allocator with
SetError (R3, design.md "Errors"), and current_work_stream (docs/design.md R9)."""

import ctypes
import re
import sys
import threading

import numpy as np
import pytest
torch = pytest.importorskip("torch")  # not on the free-threaded interpreters

from dlpx.conform import abi
from numpy_producers import Managed
import dlpx

TABLE = abi.exchange_table(dlpx.Tensor)
from_py = abi.FromPyObject(TABLE.managed_tensor_from_py_object_no_sync)
to_py = abi.ToPyObject(TABLE.managed_tensor_to_py_object_no_sync)
view_of = abi.DLTensorFromPyObject(TABLE.dltensor_from_py_object_no_sync)
current_work_stream = abi.CurrentWorkStream(TABLE.current_work_stream)

LIB = ctypes.CDLL(dlpx.library_path())  # the same loaded library: one thread-local error slot
LIB.dlpx_last_error.restype = ctypes.c_char_p
LIB.dlpx_last_error_kind.restype = ctypes.c_char_p
SET_ERROR_PYTHON = ctypes.cast(LIB.dlpx_set_error_python, ctypes.c_void_p).value

# The allocator as tvm-ffi calls it (GIL released) and as a Python-aware caller would (GIL held,
# so that dlpx's SetError can raise a Python exception that ctypes then reports).
allocate_released = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(abi.DLTensor), ctypes.POINTER(ctypes.c_void_p),
                                     ctypes.c_void_p, ctypes.c_void_p)(TABLE.managed_tensor_allocator)
allocate_held = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.POINTER(abi.DLTensor), ctypes.POINTER(ctypes.c_void_p),
                                  ctypes.c_void_p, ctypes.c_void_p)(TABLE.managed_tensor_allocator)


def export(obj):
    out = ctypes.c_void_p()
    assert from_py(obj, ctypes.byref(out)) == 0
    assert out.value
    return out.value


def delete(address):
    managed = abi.managed_at(address)
    abi.call_deleter(address, managed.deleter)


def import_managed(address):
    """to_py on `address`; returns the new object (the reference to_py handed out is released)."""
    out = ctypes.c_void_p()
    assert to_py(address, ctypes.byref(out)) == 0
    obj = abi.object_at(out.value)
    abi.decref(out.value)
    return obj


def counted_tensor():
    managed = Managed(np.arange(4.0))
    return dlpx.from_dlpack(managed.capsule()), managed


# ---- managed_tensor_from_py_object_no_sync -------------------------------------------------------


def test_from_py_exports_an_owning_versioned_tensor():
    t = dlpx.from_dlpack(np.arange(6.0).reshape(2, 3)[:, ::2])
    address = export(t)
    m = abi.managed_at(address)
    assert (m.version.major, m.version.minor) == (1, 3)
    assert m.flags == 0
    info = abi.describe(m.dl_tensor)
    assert info["data"] + info["byte_offset"] == t.data_ptr
    assert (info["shape"], info["strides"], info["dtype"]) == (t.shape, t.strides, t.dtype_raw)
    delete(address)


def test_from_py_carries_read_only():
    a = np.arange(3.0)
    a.flags.writeable = False
    address = export(dlpx.from_dlpack(a))
    assert abi.managed_at(address).flags & abi.FLAG_READ_ONLY
    delete(address)


def test_from_py_accepts_subclasses():
    class Sub(dlpx.Tensor):
        pass

    s = Sub(np.arange(2.0))
    address = export(s)
    assert abi.managed_at(address).dl_tensor.data == s.data_ptr
    delete(address)


def test_from_py_export_outlives_the_object_and_its_deleter_frees_once():
    t, managed = counted_tensor()
    address = export(t)
    del t
    assert managed.calls == 0
    delete(address)
    assert managed.calls == 1


def test_from_py_export_is_deleted_without_the_gil_on_another_thread():
    t, managed = counted_tensor()
    address = export(t)
    del t
    worker = threading.Thread(target=delete, args=(address,))
    worker.start()
    worker.join()
    assert managed.calls == 1


@pytest.mark.parametrize("obj", [np.zeros(2), torch.zeros(2), None, 3, "text"], ids=["numpy", "torch", "None", "int", "str"])
def test_from_py_refuses_what_is_not_a_dlpx_tensor(obj):
    out = ctypes.c_void_p()
    with pytest.raises(TypeError, match=r"^dlpx: managed_tensor_from_py_object_no_sync: expected a dlpx.Tensor"):
        from_py(obj, ctypes.byref(out))
    assert out.value is None


def test_from_py_refuses_a_null_out():
    with pytest.raises(ValueError, match=r"^dlpx: managed_tensor_from_py_object_no_sync: .*NULL"):
        from_py(dlpx.empty((1,)), None)


# ---- dltensor_from_py_object_no_sync -------------------------------------------------------------


def test_view_describes_the_tensor_without_owning_it():
    t = dlpx.from_dlpack(np.arange(12, dtype=np.int16).reshape(3, 4).T)
    view = abi.DLTensor()
    assert view_of(t, ctypes.byref(view)) == 0
    info = abi.describe(view)
    assert info["data"] + info["byte_offset"] == t.data_ptr
    assert info["shape"] == t.shape
    assert info["strides"] == t.strides
    assert info["dtype"] == t.dtype_raw
    assert info["device"] == (1, 0)
    before = sys.getrefcount(t)
    for _ in range(100):
        view_of(t, ctypes.byref(view))
    assert sys.getrefcount(t) == before


def test_view_refuses_other_objects_and_null_out():
    view = abi.DLTensor()
    with pytest.raises(TypeError, match=r"^dlpx: dltensor_from_py_object_no_sync: "):
        view_of(np.zeros(2), ctypes.byref(view))
    with pytest.raises(ValueError, match=r"^dlpx: dltensor_from_py_object_no_sync: "):
        view_of(dlpx.empty((1,)), None)


def test_view_refuses_padded_sub_byte_elements_which_a_dltensor_cannot_say():
    # A bare DLTensor of int4 means packed: the view of [1, 2, 3, 4], one a byte, read [1, 0, 2, 0].
    # The managed entry, whose flags say padded, serves it; a packed int4 tensor has its view.
    padded = Managed(np.array([1, 2, 3, 4], np.uint8), flags=abi.FLAG_IS_SUBBYTE_TYPE_PADDED, dtype=(0, 4, 1))
    t = dlpx.from_dlpack(padded.capsule())
    view = abi.DLTensor()
    with pytest.raises(BufferError, match=r"^dlpx: dltensor_from_py_object_no_sync: .*padded sub-byte"):
        view_of(t, ctypes.byref(view))
    address = export(t)
    assert abi.managed_at(address).flags & abi.FLAG_IS_SUBBYTE_TYPE_PADDED
    delete(address)
    packed = dlpx.from_dlpack(Managed(np.array([0x21, 0x43], np.uint8), dtype=(0, 4, 1)).capsule())
    assert packed.shape == (2,) and view_of(packed, ctypes.byref(view)) == 0


# ---- managed_tensor_to_py_object_no_sync ---------------------------------------------------------


def test_to_py_takes_ownership_on_success():
    managed = Managed(np.arange(5.0))
    t = import_managed(managed.address)
    assert type(t) is dlpx.Tensor
    assert t.data_ptr == managed.array.ctypes.data
    assert managed.calls == 0
    del t
    assert managed.calls == 1  # the only reference was the one to_py returned


def test_to_py_round_trip_of_a_dlpx_export():
    t = dlpx.empty((2, 2), "int8")
    u = import_managed(export(t))
    assert u.data_ptr == t.data_ptr
    assert u.shape == (2, 2)


@pytest.mark.parametrize(
    "defect", [dict(version=(2, 0)), dict(version=(0, 9)), dict(device=(99, 0)), dict(dtype=(200, 8, 1)), dict(ndim=-2)],
    ids=["major-2", "major-0", "unknown-device", "unknown-dtype", "negative-ndim"],
)
def test_to_py_failure_leaves_ownership_with_the_caller(defect):
    managed = Managed(np.arange(3.0), **defect)
    out = ctypes.c_void_p()
    with pytest.raises(BufferError, match=r"^dlpx: managed_tensor_to_py_object_no_sync: "):
        to_py(managed.address, ctypes.byref(out))
    assert out.value is None
    assert managed.calls == 0  # R4: not deleted by dlpx ...
    delete(managed.address)  # ... so the caller deletes it, once
    assert managed.calls == 1


def _edit_ndim(dl):
    dl.ndim = 64


@pytest.mark.parametrize("edit, says", [
    (lambda dl: dl.shape.__setitem__(0, -5), "shape[0] = -5 is negative"),
    (lambda dl: setattr(dl.dtype, "code", 99), "unknown dtype code 99"),
    (lambda dl: dl.strides.__setitem__(0, 2**62), "reaches past isize::MAX bytes"),
    (_edit_ndim, "ndim = 64 is more dimensions than this tensor of dlpx's allocator was made with"),
], ids=["negative-extent", "unknown-dtype", "overflowing-stride", "ndim-past-the-block"])
def test_to_py_checks_an_allocation_of_dlpxs_whose_description_its_owner_changed(edit, says):
    # The struct is its owner's to write: a block of dlpx's own allocator is read as any
    # producer's tensor (it was adopted unchecked: valgrind saw shape read past the block).
    out = ctypes.c_void_p()
    assert allocate_released(ctypes.byref(abi.prototype((2, 3))), ctypes.byref(out), None, None) == 0
    dl = abi.managed_at(out.value).dl_tensor
    edit(dl)
    result = ctypes.c_void_p()
    with pytest.raises(BufferError, match=rf"^dlpx: managed_tensor_to_py_object_no_sync: .*{re.escape(says)}"):
        to_py(out.value, ctypes.byref(result))
    assert result.value is None
    delete(out.value)  # still the caller's, deleted once
    # Unchanged, it is adopted as it was made.
    assert allocate_released(ctypes.byref(abi.prototype((2, 3))), ctypes.byref(out), None, None) == 0
    assert import_managed(out.value).shape == (2, 3)


def test_to_py_refuses_null_arguments():
    managed = Managed(np.arange(3.0))
    with pytest.raises(ValueError, match=r"^dlpx: managed_tensor_to_py_object_no_sync: "):
        to_py(None, ctypes.byref(ctypes.c_void_p()))
    with pytest.raises(ValueError, match=r"^dlpx: managed_tensor_to_py_object_no_sync: "):
        to_py(managed.address, None)
    assert managed.calls == 0
    delete(managed.address)


# ---- the allocator -------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(), (1,), (2, 3), (4, 0, 2)])
def test_allocator_makes_a_compact_aligned_tensor_without_the_gil(shape):
    out = ctypes.c_void_p()
    dl = abi.prototype(shape)
    assert allocate_released(ctypes.byref(dl), ctypes.byref(out), None, None) == 0
    m = abi.managed_at(out.value)
    info = abi.describe(m.dl_tensor)
    assert (m.version.major, m.version.minor) == (1, 3)
    assert info["shape"] == shape
    assert info["dtype"] == (2, 32, 1)
    assert info["device"] == (1, 0)
    if 0 in shape:
        assert info["data"] == 0  # R6
    else:
        assert info["data"] % 256 == 0
    if shape:
        assert len(info["strides"]) == len(shape)
    if shape == (2, 3):
        assert info["strides"] == (3, 1)
    delete(out.value)


def test_allocator_output_imports_into_dlpx_and_torch():
    out = ctypes.c_void_p()
    assert allocate_released(ctypes.byref(abi.prototype((3,), (0, 64, 1))), ctypes.byref(out), None, None) == 0
    t = import_managed(out.value)
    assert t.dtype == "int64" and t.shape == (3,)
    torch.from_dlpack(t).copy_(torch.tensor([1, 2, 3]))
    assert np.from_dlpack(t).tolist() == [1, 2, 3]


def test_allocator_reports_failure_through_set_error_exactly_once():
    calls = []

    @abi.SetError
    def set_error(ctx, kind, message):
        calls.append((ctx, kind.decode(), message.decode()))

    out = ctypes.c_void_p()
    rc = allocate_released(ctypes.byref(abi.prototype((2, -3))), ctypes.byref(out), 1234,
                           ctypes.cast(set_error, ctypes.c_void_p).value)
    assert rc != 0
    assert out.value is None
    assert len(calls) == 1
    ctx, kind, message = calls[0]
    assert ctx == 1234
    assert kind == "ValueError"
    assert message.startswith("dlpx: allocator: ") and "-3" in message


@pytest.mark.parametrize(
    "proto, kind",
    [(dict(shape=(2,), device=(4, 0)), "NotImplementedError"), (dict(shape=(2,), dtype=(99, 8, 1)), "ValueError"),
     (dict(shape=(2**62, 2**62)), "ValueError"), (dict(shape=(2**40,)), "MemoryError")],
    ids=["opencl", "bad-dtype", "overflow", "too-large"],
)
def test_allocator_with_a_null_set_error_leaves_the_message_in_last_error(proto, kind):
    LIB.dlpx_clear_last_error()
    out = ctypes.c_void_p()
    assert allocate_released(ctypes.byref(abi.prototype(**proto)), ctypes.byref(out), None, None) != 0
    assert out.value is None
    assert LIB.dlpx_last_error_kind().decode() == kind
    assert LIB.dlpx_last_error().decode().startswith("dlpx: allocator: ")


def test_dlpx_set_error_raises_the_matching_python_exception():
    out = ctypes.c_void_p()
    with pytest.raises(NotImplementedError, match=r"^dlpx: allocator: "):
        allocate_held(ctypes.byref(abi.prototype((2,), device=(4, 0))), ctypes.byref(out), None, SET_ERROR_PYTHON)
    with pytest.raises(ValueError, match=r"^dlpx: allocator: "):
        allocate_held(ctypes.byref(abi.prototype((-1,))), ctypes.byref(out), None, SET_ERROR_PYTHON)


# ---- current_work_stream -------------------------------------------------------------------------


def test_current_work_stream_on_cpu_is_null():
    out = ctypes.c_void_p(12345)
    assert current_work_stream(abi.KDL_CPU, 0, ctypes.byref(out)) == 0
    assert out.value is None


def test_current_work_stream_refuses_a_null_out():
    assert current_work_stream(abi.KDL_CPU, 0, None) != 0
    assert LIB.dlpx_last_error().decode().startswith("dlpx: current_work_stream: ")

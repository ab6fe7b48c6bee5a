"""Read-only, one rule on every path (issue 44; docs/design.md, "Read-only").

A tensor that may not be written — `bytes`, a read-only numpy array, a jax array, an
`__array_interface__` whose data says read-only, a read-only `dlpx.Tensor` made of any of them —
says so wherever it goes: the Python protocols (buffer, `__dlpack__`, `__array_interface__`),
`dlpx_view_of` (the view's `flags`), the exchange table's managed entry (the managed tensor's
flags); the table's view entry, which has no flag, refuses it. A writable tensor says nothing
of the kind, and `dlpx_read_view_of` (a kernel that only reads) always says read-only.
"""

import ctypes

import numpy as np
import pytest

import dlpx
from dlpx.conform import abi

LIB = ctypes.PyDLL(dlpx.library_path())


DlpxTensorView = abi.DlpxTensorView


for _name in ("dlpx_view_of", "dlpx_read_view_of"):
    getattr(LIB, _name).argtypes = [ctypes.py_object, ctypes.POINTER(DlpxTensorView)]
    getattr(LIB, _name).restype = ctypes.c_int
LIB.dlpx_view_release.argtypes = [ctypes.POINTER(DlpxTensorView)]
LIB.dlpx_view_release.restype = None

READ_ONLY = abi.FLAG_READ_ONLY


def read_only_numpy():
    a = np.arange(6, dtype=np.float32)
    a.flags.writeable = False
    return a


class ReadOnlyInterface:
    def __init__(self):
        self.base = np.arange(4, dtype=np.float32)
        self.__array_interface__ = dict(shape=(4,), typestr="<f4", data=(self.base.ctypes.data, True), version=3)


def jax_array():
    jnp = pytest.importorskip("jax.numpy")
    return jnp.arange(4.0)


# Each source is read-only; each is also seen as the dlpx.Tensor imported from it.
SOURCES = {
    "bytes": lambda: b"abcdefgh",
    "numpy-read-only": read_only_numpy,
    "array-interface-read-only": ReadOnlyInterface,
    "jax": jax_array,
}
WRITABLE = {
    "bytearray": lambda: bytearray(8),
    "numpy": lambda: np.arange(6, dtype=np.float32),
    "torch": lambda: pytest.importorskip("torch").arange(4.0),
}


def as_dlpx(make):
    return lambda: dlpx.from_dlpack(make())


CASES = {**SOURCES, **{f"dlpx({k})": as_dlpx(v) for k, v in SOURCES.items()}}
WRITABLE_CASES = {**WRITABLE, **{f"dlpx({k})": as_dlpx(v) for k, v in WRITABLE.items()}}


def view_flags(entry, obj):
    view = DlpxTensorView()
    assert getattr(LIB, entry)(obj, ctypes.byref(view)) == 0
    try:
        return view.flags
    finally:
        LIB.dlpx_view_release(ctypes.byref(view))


def dlpx_table():
    return abi.exchange_table(dlpx.Tensor)


def managed_entry_flags(tensor):
    out = ctypes.c_void_p()
    assert abi.FromPyObject(dlpx_table().managed_tensor_from_py_object_no_sync)(tensor, ctypes.byref(out)) == 0
    try:
        return abi.read_managed(out.value, True)["flags"]
    finally:
        managed = abi.managed_at(out.value, True)
        abi.call_deleter(out.value, managed.deleter)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_read_only_tensor_says_so_on_every_path(case):
    obj = CASES[case]()
    t = dlpx.from_dlpack(obj)
    assert t.readonly, "from_dlpack"
    assert memoryview(t).readonly, "the buffer protocol"
    assert not np.from_dlpack(t).flags.writeable, "__dlpack__ (numpy's consumer)"
    assert t.__array_interface__["data"][1] is True, "__array_interface__"
    assert view_flags("dlpx_view_of", obj) & READ_ONLY, "dlpx_view_of"
    assert view_flags("dlpx_read_view_of", obj) & READ_ONLY, "dlpx_read_view_of"
    assert managed_entry_flags(t) & READ_ONLY, "the table's managed entry"
    out = abi.DLTensor()
    with pytest.raises(BufferError, match="read-only"):
        abi.DLTensorFromPyObject(dlpx_table().dltensor_from_py_object_no_sync)(t, ctypes.byref(out))


@pytest.mark.parametrize("case", sorted(WRITABLE_CASES))
def test_a_writable_tensor_is_writable_on_every_path_but_the_read_view(case):
    obj = WRITABLE_CASES[case]()
    t = dlpx.from_dlpack(obj)
    assert not t.readonly and not memoryview(t).readonly
    assert np.from_dlpack(t).flags.writeable
    assert view_flags("dlpx_view_of", obj) == 0
    assert view_flags("dlpx_read_view_of", obj) == READ_ONLY
    assert managed_entry_flags(t) == 0
    out = abi.DLTensor()
    assert abi.DLTensorFromPyObject(dlpx_table().dltensor_from_py_object_no_sync)(t, ctypes.byref(out)) == 0
    assert out.data + out.byte_offset == t.data_ptr


def test_dlpack_read_only_is_torchs_spelling():
    t = dlpx.empty((4,), dtype="float32")
    flags = abi.read_capsule(t.__dlpack__(max_version=(1, 3), read_only=True))["flags"]
    assert flags & READ_ONLY
    assert abi.read_capsule(t.__dlpack__(max_version=(1, 3), read_only=False))["flags"] == 0
    with pytest.raises(BufferError, match=r"read_only=True needs a versioned capsule"):
        t.__dlpack__(read_only=True)
    for wrong in (None, 1, "yes"):
        with pytest.raises(TypeError, match="read_only must be True or False"):
            t.__dlpack__(max_version=(1, 3), read_only=wrong)
    ro = np.from_dlpack(type("RO", (), {"__dlpack__": lambda s, **k: t.__dlpack__(read_only=True, **k),
                                          "__dlpack_device__": lambda s: t.__dlpack_device__()})())
    assert not ro.flags.writeable


def test_dlpxs_own_read_only_export_stays_read_only_coming_home():
    # A round trip takes back the exported tensor, but a read-only export of a writable one is
    # read as any producer's: read-only, sharing the memory, the original still writable.
    t = dlpx.empty((3,), dtype="float32")
    back = dlpx.from_dlpack(t.__dlpack__(max_version=(1, 3), read_only=True))
    through = dlpx.from_dlpack(type("P", (), {"__dlpack__": lambda s, **k: t.__dlpack__(read_only=True, **k),
                                              "__dlpack_device__": lambda s: t.__dlpack_device__()})())
    for u in (back, through):
        assert u.readonly and u.data_ptr == t.data_ptr
        with pytest.raises(ValueError, match="read-only"):
            np.asarray(u)[:] = 5
    assert not t.readonly and not dlpx.from_dlpack(t.__dlpack__(max_version=(1, 3))).readonly
    np.from_dlpack(t)[:] = 2
    assert np.from_dlpack(back).tolist() == [2.0, 2.0, 2.0]
    # A read-only tensor's own exports, asked read-only or not, come home read-only.
    for read_only in (True, False):
        assert dlpx.from_dlpack(back.__dlpack__(max_version=(1, 3), read_only=read_only)).readonly


def test_torchs_read_only_dlpack_is_read_only_in_dlpx():
    torch = pytest.importorskip("torch")
    a = torch.arange(4.0)
    if "read_only" not in (torch.Tensor.__dlpack__.__doc__ or ""):
        pytest.skip("this torch has no __dlpack__(read_only=)")
    assert dlpx.from_dlpack(a.__dlpack__(max_version=(1, 0), read_only=True)).readonly


def test_a_kernel_read_view_leaves_torchs_copy_on_write_storage_shared():
    torch = pytest.importorskip("torch")
    if not hasattr(torch._C, "_const_dlpack_exchange_api"):
        pytest.skip("this torch has no const exchange table")
    a = torch.arange(8.0)
    storage = a.data_ptr()  # before the clone: data_ptr() of a copy-on-write tensor materialises it
    b = torch._lazy_clone(a)
    assert torch._C._is_cow_tensor(b)
    view = DlpxTensorView()
    assert LIB.dlpx_read_view_of(b, ctypes.byref(view)) == 0
    assert view.flags == READ_ONLY
    # torch 2.15 exports its storage's base with a byte_offset.
    assert view.tensor.data + view.tensor.byte_offset == storage, "the shared storage, not a copy"
    LIB.dlpx_view_release(ctypes.byref(view))
    assert torch._C._is_cow_tensor(b), "a read view materialised the copy-on-write storage"
    # A writable view is torch's ordinary export, which materialises it (the kernel may write).
    assert view_flags("dlpx_view_of", b) == 0
    assert not torch._C._is_cow_tensor(b)


@pytest.mark.xfail(strict=True, reason="tvm-ffi (0.x) ignores DLPACK_FLAG_BITMASK_READ_ONLY from an exchange table's managed entry: its tensor of read-only memory is writable")
def test_tvm_ffi_keeps_read_only_from_dlpxs_table():
    tvm_ffi = pytest.importorskip("tvm_ffi")
    t = dlpx.from_dlpack(read_only_numpy())
    assert not np.from_dlpack(tvm_ffi.from_dlpack(t)).flags.writeable

"""The consumer's fast paths keep the semantics of the paths they shortcut: numpy arrays read
through numpy's array struct and tvm_ffi tensors read through tvm-ffi's C ABI (from_dlpack and
the kernel API; each read proven to serve, direct_reads.py) describe exactly what the producer's
own `__dlpack__` does, fall back to it (proven not to serve) for what they do not cover, keep the object alive and read-only arrays read-only; kernel views of
other table-less producers hand on the producer's own managed tensor (a legacy one in a
wrapper) and release it once; reference counts stay flat over 10**6 calls of each."""

import ctypes
import sys
import threading

import array_api_strict
import numpy as np
import pytest
tvm_ffi = pytest.importorskip("tvm_ffi")

from dlpx.conform import abi
import dlpx
from direct_reads import bypasses, serves
from dlpx.conform.abi import DlpxTensorView


TensorView = DlpxTensorView  # dlpx.h's struct, read the one way (dlpx.conform.abi)


# PyDLL: the GIL stays held across each call, as the kernel API requires.
_LIB = ctypes.PyDLL(dlpx.library_path())
view_of = _LIB.dlpx_view_of
view_of.argtypes = [ctypes.py_object, ctypes.POINTER(TensorView)]
view_of.restype = ctypes.c_int
view_release = _LIB.dlpx_view_release
view_release.argtypes = [ctypes.POINTER(TensorView)]
view_release.restype = None
dlpx_import = _LIB.dlpx_import
dlpx_import.argtypes = [ctypes.py_object, ctypes.POINTER(ctypes.POINTER(abi.DLManagedTensorVersioned))]
dlpx_import.restype = ctypes.c_int
# CFUNCTYPE: the deleter runs with the GIL released, as on a thread that does not hold it.
DELETER_WITHOUT_GIL = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def numpys_own(a) -> dict:
    """What numpy's `__dlpack__` exports for `a` (the capsule is released when it dies)."""
    info = abi.read_capsule(a.__dlpack__(max_version=(1, 0)))
    return {k: info[k] for k in ("data", "device", "ndim", "dtype", "shape", "strides", "byte_offset", "flags")}


def viewed(obj) -> dict:
    view = TensorView()
    assert view_of(obj, ctypes.byref(view)) == 0
    try:
        info = abi.describe(view.tensor)
        info["flags"] = abi.managed_at(view.owner).flags if view.owner else None
        return info
    finally:
        view_release(ctypes.byref(view))


def readonly(a):
    a.flags.writeable = False
    return a


ARRAYS = {
    "contiguous": lambda: np.arange(12, dtype=np.float32).reshape(3, 4),
    "strided": lambda: np.arange(24, dtype=np.float64).reshape(4, 6)[::2, 1::3],
    "negative": lambda: np.arange(10, dtype=np.int16)[::-1],
    "transposed": lambda: np.arange(12, dtype=np.int64).reshape(3, 4).T,
    "zero-d": lambda: np.array(3.5, dtype=np.float32),
    "zero-size": lambda: np.zeros((0, 3), dtype=np.uint8),
    "bool": lambda: np.array([True, False, True]),
    "complex": lambda: np.arange(4, dtype=np.complex64),
    "float16": lambda: np.arange(4, dtype=np.float16),
    "int8": lambda: np.arange(4, dtype=np.int8),
    "uint64": lambda: np.arange(4, dtype=np.uint64),
    "long": lambda: np.arange(4, dtype=np.int_),
    "readonly": lambda: readonly(np.arange(6.0)),
}


@pytest.mark.direct_read("numpy")
@pytest.mark.parametrize("make", ARRAYS.values(), ids=ARRAYS.keys())
def test_a_numpy_view_describes_what_numpys_own_export_does(make):
    a = make()
    with serves("numpy", calls=1):
        got = viewed(a)
    assert got == numpys_own(a)


@pytest.mark.direct_read("numpy")
@pytest.mark.parametrize("make", ARRAYS.values(), ids=ARRAYS.keys())
def test_a_numpy_import_is_zero_copy_and_keeps_shape_strides_and_read_only(make):
    a = make()
    with serves("numpy", calls=1):
        t = dlpx.from_dlpack(a)
    own = numpys_own(a)
    assert t.data_ptr == own["data"]
    assert t.shape == own["shape"] and t.strides == own["strides"]
    assert t.readonly == (not a.flags.writeable)
    np.testing.assert_array_equal(np.from_dlpack(t), a)


def test_the_import_keeps_the_array_alive_and_lets_it_go():
    a = np.arange(5.0)
    refs = sys.getrefcount(a)
    t = dlpx.from_dlpack(a)
    assert sys.getrefcount(a) == refs + 1
    del t
    assert sys.getrefcount(a) == refs


def test_reshaping_the_array_in_place_leaves_the_import_as_it_was():
    a = np.arange(6.0)
    t = dlpx.from_dlpack(a)
    a.shape = (2, 3)
    assert t.shape == (6,) and t.strides == (1,)


def test_an_import_released_without_the_gil_drops_its_reference():
    a = np.arange(4.0)
    refs = sys.getrefcount(a)
    out = ctypes.POINTER(abi.DLManagedTensorVersioned)()
    assert dlpx_import(a, ctypes.byref(out)) == 0
    assert sys.getrefcount(a) == refs + 1
    DELETER_WITHOUT_GIL(ctypes.cast(out.contents.deleter, ctypes.c_void_p).value)(ctypes.addressof(out.contents))
    assert sys.getrefcount(a) == refs


def test_an_import_released_on_another_thread_drops_its_reference():
    a = np.arange(4.0)
    refs = sys.getrefcount(a)
    holder = [dlpx.from_dlpack(a)]
    worker = threading.Thread(target=holder.clear)
    worker.start()
    worker.join()
    assert sys.getrefcount(a) == refs


class Sub(np.ndarray):
    def __dlpack__(self, **kwargs):
        raise BufferError("Sub.__dlpack__ was asked")


FALLBACKS = {
    "big-endian": lambda: np.arange(4, dtype=">f4"),
    "unaligned": lambda: np.frombuffer(bytearray(33), dtype=np.float64, offset=1, count=4),
    "long double": lambda: np.arange(4, dtype=np.longdouble),
    "object": lambda: np.array([1, "x"], dtype=object),
    # Aligned (complex128 aligns to 8) with a stride that is no multiple of the item size.
    "odd stride": lambda: np.lib.stride_tricks.as_strided(np.zeros(4, np.complex128), shape=(3,), strides=(8,)),
    "subclass": lambda: np.arange(4.0).view(Sub),
}


@pytest.mark.parametrize("make", FALLBACKS.values(), ids=FALLBACKS.keys())
def test_what_the_struct_path_does_not_cover_gets_numpys_own_answer(make):
    a = make()
    try:
        expected = numpys_own(a)
    except Exception as exc:  # numpy refuses it: dlpx must refuse it the same way
        with pytest.raises(type(exc), match=str(exc)[:20]), bypasses("numpy"):
            dlpx.from_dlpack(a)
        return
    with bypasses("numpy"):
        t = dlpx.from_dlpack(a)
        view = viewed(a)
    assert (t.data_ptr, t.shape, t.strides) == (expected["data"], expected["shape"], expected["strides"])
    assert view == expected


def through_dlpack(values):
    """An array_api_strict array on one of its make-believe devices: dlpx does not read it
    through the numpy array it wraps (src/producers/rows/array_api_strict.rs), so it takes the
    path of any table-less producer, `__dlpack__`."""
    return array_api_strict.asarray(values, device=array_api_strict.Device("device1"))


def test_a_table_less_producers_view_is_its_own_tensor_released_once():
    a = through_dlpack(np.arange(6, dtype=np.float32))
    view = TensorView()
    assert view_of(a, ctypes.byref(view)) == 0
    expected = abi.read_capsule(a.__dlpack__(max_version=(1, 0)))
    assert abi.describe(view.tensor) == {k: expected[k] for k in abi.describe(view.tensor)}
    # The owner is the producer's managed tensor itself: its deleter is numpy's own.
    numpys = np.zeros(1).__dlpack__(max_version=(1, 0))
    assert abi.managed_at(view.owner).deleter == abi.managed_at(abi.capsule_pointer(numpys)).deleter
    view_release(ctypes.byref(view))
    assert not view.owner
    view_release(ctypes.byref(view))  # idempotent: nothing is released twice


def strided_tvm_ffi():
    return tvm_ffi.from_dlpack(np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2])


TVM_FFI_TENSORS = {
    "float32 1-d": lambda: tvm_ffi.from_dlpack(np.arange(6, dtype=np.float32)),
    "strided 2-d": strided_tvm_ffi,
    "0-d": lambda: tvm_ffi.from_dlpack(np.array(3.0)),
    "empty": lambda: tvm_ffi.from_dlpack(np.zeros((0, 3), np.float16)),
    "bool": lambda: tvm_ffi.from_dlpack(np.array([True, False])),
    "int64 3-d": lambda: tvm_ffi.from_dlpack(np.arange(24, dtype=np.int64).reshape(2, 3, 4)),
}

DESCRIBED = ("data", "device", "ndim", "dtype", "shape", "strides", "byte_offset")


def tvm_ffis_own(t) -> dict:
    info = abi.read_capsule(t.__dlpack__(max_version=(1, 0)))
    return {k: info[k] for k in DESCRIBED + ("flags",)}


@pytest.mark.direct_read("tvm_ffi")
@pytest.mark.parametrize("make", TVM_FFI_TENSORS.values(), ids=TVM_FFI_TENSORS.keys())
def test_a_tvm_ffi_tensors_view_is_its_own_dltensor_and_owns_nothing(make):
    t = make()
    refs = sys.getrefcount(t)
    view = TensorView()
    with serves("tvm_ffi", calls=1):
        assert view_of(t, ctypes.byref(view)) == 0
    assert not view.owner  # non-owning: the caller's reference keeps the tensor valid
    assert sys.getrefcount(t) == refs
    expected = tvm_ffis_own(t)
    assert {k: abi.describe(view.tensor)[k] for k in DESCRIBED} == {k: expected[k] for k in DESCRIBED}
    view_release(ctypes.byref(view))


@pytest.mark.direct_read("tvm_ffi")
@pytest.mark.parametrize("make", TVM_FFI_TENSORS.values(), ids=TVM_FFI_TENSORS.keys())
def test_from_dlpack_of_a_tvm_ffi_tensor_is_what_its_dlpack_exports_and_keeps_it_alive(make):
    t = make()
    expected = tvm_ffis_own(t)
    with serves("tvm_ffi", calls=1):
        x = dlpx.from_dlpack(t)
    data = np.from_dlpack(t).copy()
    got = abi.read_capsule(x.__dlpack__(max_version=(1, 0)))
    assert {k: got[k] for k in DESCRIBED} == {k: expected[k] for k in DESCRIBED}
    assert got["flags"] & abi.FLAG_READ_ONLY == expected["flags"] & abi.FLAG_READ_ONLY == 0
    del t  # the dlpx tensor holds the tvm-ffi object, and so its memory
    np.testing.assert_array_equal(np.from_dlpack(x), data)


def tvm_ffi_strong_refs(handle: int) -> int:
    """The strong count of a live tvm-ffi object: the low half of its header's first word."""
    return ctypes.c_uint64.from_address(handle).value & 0xFFFFFFFF


def test_a_tvm_ffi_import_holds_the_object_itself_until_its_last_tensor_goes():
    a = np.arange(4, dtype=np.float32)
    t = tvm_ffi.from_dlpack(a)
    del a  # from here the tvm-ffi object alone keeps numpy's memory alive
    handle = t.__chandle__()
    before = tvm_ffi_strong_refs(handle)
    x = dlpx.from_dlpack(t)
    assert tvm_ffi_strong_refs(handle) == before + 1
    y = np.from_dlpack(x)  # an export of the import: the object lives until both go
    # Empty the wrapper (its handle moves to another, which then dies): only dlpx holds on.
    other = tvm_ffi.core.Tensor.__new__(tvm_ffi.core.Tensor)
    other.__move_handle_from__(t)
    del other
    assert tvm_ffi_strong_refs(handle) == before
    del x
    np.testing.assert_array_equal(y, [0, 1, 2, 3])
    assert tvm_ffi_strong_refs(handle) == before
    del y  # the last tensor: the object goes (its count is no longer readable)


def test_a_tvm_ffi_wrapper_whose_handle_moved_out_is_a_buffer_error():
    t = tvm_ffi.from_dlpack(np.arange(4, dtype=np.float32))
    other = tvm_ffi.core.Tensor.__new__(tvm_ffi.core.Tensor)
    other.__move_handle_from__(t)
    # tvm_ffi's own __dlpack__ would dereference the NULL handle (a crash): dlpx refuses first.
    with pytest.raises(BufferError, match="handle was moved out"):
        dlpx.from_dlpack(t)
    view = TensorView()
    with pytest.raises(BufferError, match="^dlpx: view_of: .*handle was moved out"):
        view_of(t, ctypes.byref(view))
    assert not view.owner


def test_a_view_of_something_without_dlpack_is_a_type_error_naming_it():
    view = TensorView()
    with pytest.raises(TypeError, match="int does not support DLPack"):
        view_of(3, ctypes.byref(view))


CALLS = 1_000_000


def jax_array(values):
    """A jax array: jax's `__dlpack__` answers with a legacy capsule (src/legacy.rs)."""
    jnp = pytest.importorskip("jax.numpy")
    return jnp.asarray(values)


def flat_refcounts(obj, call) -> None:
    for _ in range(1000):
        call(obj)
    refs = sys.getrefcount(obj)
    for _ in range(CALLS):
        call(obj)
    assert sys.getrefcount(obj) == refs


def view_and_release(obj, view=TensorView()):
    if view_of(obj, ctypes.byref(view)) != 0:
        raise AssertionError("view_of failed")
    view_release(ctypes.byref(view))


@pytest.mark.parametrize(
    "make,call",
    [
        (lambda: np.arange(16, dtype=np.float32), dlpx.from_dlpack),
        (lambda: np.arange(16, dtype=np.float32), view_and_release),
        (lambda: tvm_ffi.from_dlpack(np.arange(16, dtype=np.float32)), dlpx.from_dlpack),
        (lambda: tvm_ffi.from_dlpack(np.arange(16, dtype=np.float32)), view_and_release),
        (lambda: through_dlpack(np.arange(16, dtype=np.float32)), dlpx.from_dlpack),
        (lambda: through_dlpack(np.arange(16, dtype=np.float32)), view_and_release),
        (lambda: array_api_strict.asarray(np.arange(16, dtype=np.float32)), dlpx.from_dlpack),
        (lambda: array_api_strict.asarray(np.arange(16, dtype=np.float32)), view_and_release),
        (lambda: jax_array(np.arange(16, dtype=np.float32)), dlpx.from_dlpack),
        (lambda: jax_array(np.arange(16, dtype=np.float32)), view_and_release),
    ],
    ids=[
        "numpy-from_dlpack",
        "numpy-view",
        "tvm_ffi-from_dlpack",
        "tvm_ffi-view",
        "dlpack_call-from_dlpack",
        "fast_capsule-view",
        "array_api_strict-from_dlpack",
        "array_api_strict-view",
        "jax-from_dlpack",
        "legacy-view",
    ],
)
def test_reference_counts_are_flat_over_a_million_calls(make, call):
    flat_refcounts(make(), call)

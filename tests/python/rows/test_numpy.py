"""numpy <-> dlpx: zero-copy both ways, the dtype matrix, 0-d / zero-size / strided / negative
strides, read-only arrays, and from_dlpack's device= and copy=."""

import numpy as np
import pytest

from dlpx.conform import abi
from numpy_producers import numpy_dtype_code
import dlpx

NUMPY_DTYPES = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
]


def sample(dtype, shape=(3, 4)):
    n = int(np.prod(shape))
    values = np.arange(n) % 2 if dtype == "bool" else np.arange(n) + 1
    if np.dtype(dtype).kind == "c":
        values = values + 1j * (values % 3)
    return values.astype(dtype).reshape(shape)


def element_strides(array):
    return tuple(s // array.itemsize for s in array.strides)


# ---- dtype matrix --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_numpy_to_dlpx_is_zero_copy_for_every_dtype(dtype):
    a = sample(dtype)
    t = dlpx.from_dlpack(a)
    assert t.dtype == np.dtype(dtype).name
    assert t.dtype_raw == numpy_dtype_code(a.dtype)
    assert t.shape == a.shape
    assert t.strides == element_strides(a)
    assert t.nbytes == a.nbytes
    assert t.data_ptr == a.ctypes.data
    assert not t.readonly


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_dlpx_to_numpy_is_zero_copy_for_every_dtype(dtype):
    t = dlpx.empty((2, 5), dtype)
    back = np.from_dlpack(t)
    assert back.dtype == np.dtype(dtype)
    assert back.shape == (2, 5)
    assert back.ctypes.data == t.data_ptr
    assert back.flags.writeable
    assert back.flags.c_contiguous


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_round_trip_keeps_values(dtype):
    a = sample(dtype)
    back = np.from_dlpack(dlpx.from_dlpack(a))
    assert back.dtype == a.dtype
    np.testing.assert_array_equal(back, a)
    assert np.shares_memory(back, a)


# ---- writes are seen through both sides ---------------------------------------------------------


def test_a_write_through_numpy_is_seen_by_dlpx_exports():
    a = np.zeros(5, dtype=np.int64)
    t = dlpx.from_dlpack(a)
    a[2] = 42
    assert np.from_dlpack(t)[2] == 42


def test_a_write_through_a_dlpx_export_is_seen_by_numpy():
    a = np.zeros((2, 2), dtype=np.float32)
    t = dlpx.from_dlpack(a)
    np.from_dlpack(t)[1, 0] = 7.5
    assert a[1, 0] == 7.5


def test_a_write_into_dlpx_memory_is_seen_by_every_numpy_view():
    t = dlpx.empty((4,), "uint16")
    first = np.from_dlpack(t)
    second = np.from_dlpack(t)
    first[...] = [1, 2, 3, 4]
    np.testing.assert_array_equal(second, [1, 2, 3, 4])


# ---- shapes and strides --------------------------------------------------------------------------


def test_0d_array():
    a = np.array(3.25)
    t = dlpx.from_dlpack(a)
    assert (t.shape, t.strides, t.ndim, t.numel) == ((), (), 0, 1)
    assert t.data_ptr == a.ctypes.data
    back = np.from_dlpack(t)
    assert back.shape == () and back == 3.25


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 2, 5)])
def test_zero_size_array(shape):
    a = np.empty(shape, dtype=np.float32)
    t = dlpx.from_dlpack(a)
    assert t.shape == shape
    assert t.numel == 0
    assert t.nbytes == 0
    back = np.from_dlpack(t)
    assert back.shape == shape
    assert back.dtype == np.float32


VIEWS = {
    "every-other": lambda a: a[::2],
    "columns": lambda a: a[:, 1::2],
    "transpose": lambda a: a.T,
    "inner-slice": lambda a: a[1:3, 1:4],
    "reversed-rows": lambda a: a[::-1],
    "reversed-both": lambda a: a[::-1, ::-2],
    "broadcast": lambda a: np.broadcast_to(a[0], (3, a.shape[1])),
    "single-column": lambda a: a[:, 2:3],
}


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_strided_views_keep_their_strides(view):
    base = np.arange(4 * 6, dtype=np.int32).reshape(4, 6)
    v = VIEWS[view](base)
    t = dlpx.from_dlpack(v)
    assert t.shape == v.shape
    assert t.strides == element_strides(v)
    assert t.data_ptr == v.ctypes.data  # the first element, byte_offset included
    back = np.from_dlpack(t)
    np.testing.assert_array_equal(back, v)
    assert back.ctypes.data == v.ctypes.data
    assert element_strides(back) == element_strides(v)


def test_contiguity_is_reported_from_strides():
    base = np.arange(12.0).reshape(3, 4)
    assert dlpx.from_dlpack(base).is_contiguous
    assert not dlpx.from_dlpack(base.T).is_contiguous
    assert not dlpx.from_dlpack(base[::-1]).is_contiguous
    assert dlpx.from_dlpack(base[1:]).is_contiguous


def test_a_write_through_a_negative_stride_view_lands_in_place():
    base = np.zeros(6, dtype=np.int8)
    t = dlpx.from_dlpack(base[::-1])
    np.from_dlpack(t)[0] = 9
    assert base[-1] == 9


# ---- read-only arrays ----------------------------------------------------------------------------


def test_a_readonly_array_imports_as_readonly():
    a = np.arange(4.0)
    a.flags.writeable = False
    t = dlpx.from_dlpack(a)
    assert t.readonly
    assert t.data_ptr == a.ctypes.data


def test_a_readonly_import_exports_back_readonly():
    a = np.arange(4.0)
    a.flags.writeable = False
    back = np.from_dlpack(dlpx.from_dlpack(a))
    assert not back.flags.writeable
    assert back.ctypes.data == a.ctypes.data
    with pytest.raises(ValueError):
        back[0] = 1


def test_a_readonly_view_of_a_writable_base():
    base = np.arange(6.0)
    view = base[1:4]
    view.flags.writeable = False
    assert dlpx.from_dlpack(view).readonly
    assert not dlpx.from_dlpack(base).readonly


# ---- from_dlpack(device=, copy=) -----------------------------------------------------------------


def test_copy_true_gives_new_memory_with_the_same_values():
    a = sample("float64")
    t = dlpx.from_dlpack(a, copy=True)
    assert t.data_ptr != a.ctypes.data
    assert not np.shares_memory(np.from_dlpack(t), a)
    np.testing.assert_array_equal(np.from_dlpack(t), a)
    a[0, 0] = -1
    assert np.from_dlpack(t)[0, 0] != -1


def test_copy_false_with_device_cpu_shares_memory():
    a = sample("int16")
    t = dlpx.from_dlpack(a, device="cpu", copy=False)
    assert t.data_ptr == a.ctypes.data


def test_numpy_copy_request_to_dlpx():
    t = dlpx.empty((3,), "int32")
    np.from_dlpack(t)[...] = [1, 2, 3]
    copied = np.from_dlpack(t, copy=True)
    assert copied.ctypes.data != t.data_ptr
    np.testing.assert_array_equal(copied, [1, 2, 3])
    shared = np.from_dlpack(t, copy=False)
    assert shared.ctypes.data == t.data_ptr


def test_numpy_device_request_to_dlpx():
    t = dlpx.empty((3,), "int32")
    assert np.from_dlpack(t, device="cpu").ctypes.data == t.data_ptr


def test_copy_true_makes_one_copy_when_numpy_already_copied():
    class Recording:
        """numpy's own __dlpack__, with the capsule it returns recorded."""

        def __init__(self, array):
            self.array = array
            self.exported = []

        def __dlpack__(self, **kwargs):
            capsule = self.array.__dlpack__(**kwargs)
            self.exported.append(abi.read_capsule(capsule))
            return capsule

        def __dlpack_device__(self):
            return self.array.__dlpack_device__()

    source = Recording(sample("float32"))
    t = dlpx.from_dlpack(source, copy=True)
    (exported,) = source.exported
    assert exported["flags"] & abi.FLAG_IS_COPIED  # numpy honoured copy=True ...
    assert exported["data"] != source.array.ctypes.data
    assert t.data_ptr == exported["data"]  # ... so dlpx keeps numpy's copy instead of copying it again


@pytest.mark.parametrize("dtype, shape", [("float64", (2**29, 2**30)), ("complex128", (2**28, 2**30))])
def test_a_view_of_2_62_bytes_is_taken_alike_directly_and_by_capsule(dtype, shape):
    # 2^62 bytes fit 64 bits though their 2^65 bits do not: the direct read and the capsule's
    # both take the view, and its nbytes is numpy's (it was counted in bits: refused by capsule,
    # 2^64 - 1 directly).
    a = np.broadcast_to(np.zeros(1, dtype), shape)
    direct = dlpx.from_dlpack(a)
    by_capsule = dlpx.from_dlpack(np.from_dlpack(direct).__dlpack__(max_version=(1, 0)))
    for t in (direct, by_capsule):
        assert t.nbytes == a.nbytes == 2**62
        assert t.shape == shape and t.strides == (0, 0)
    with pytest.raises(MemoryError):
        dlpx.from_dlpack(a, copy=True)


def test_strides_of_no_whole_item_cross_as_numpy_s_own_copy_under_copy_true():
    # A field of a packed record: strides of 5 bytes for int32 items. numpy's `__dlpack__()`
    # refuses them and so does dlpx; with copy=True numpy copies them (its `__dlpack__(copy=True)`),
    # as dlpx does the same memory through the buffer protocol: the import is that copy.
    a = np.zeros(4, dtype=[("a", "u1"), ("b", "<i4")])["b"]
    a[:] = [1, 2, 3, 4]
    with pytest.raises(BufferError, match="multiple of itemsize"):
        dlpx.from_dlpack(a)
    for t in (dlpx.from_dlpack(a, copy=True), dlpx.from_dlpack(a, copy=True, device="cpu"),
              dlpx.from_dlpack(memoryview(a), copy=True)):
        assert t.strides == (1,) and not t.readonly
        np.testing.assert_array_equal(np.asarray(t), [1, 2, 3, 4])
        np.asarray(t)[0] = 9  # a copy: the record is unchanged
        assert a[0] == 1
    with pytest.raises(BufferError, match="multiple of itemsize"):
        dlpx.from_dlpack(a, copy=False)

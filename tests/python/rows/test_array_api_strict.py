"""array-api-strict <-> dlpx: the array API's own from_dlpack against dlpx, both ways, over the
dtypes the standard defines (it has no float16 / bfloat16)."""

import numpy as np
import pytest

import dlpx

xp = pytest.importorskip("array_api_strict")

STANDARD_DTYPES = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float32", "float64", "complex64", "complex128",
]


def address(array):
    """Data address of an array_api_strict array (its numpy buffer, read through DLPack)."""
    return np.from_dlpack(array).ctypes.data


def sample(dtype):
    values = np.arange(6) % 2 if dtype == "bool" else np.arange(6) + 1
    return xp.asarray(values.astype(dtype).reshape(2, 3))


@pytest.mark.parametrize("dtype", STANDARD_DTYPES)
def test_array_api_strict_to_dlpx_is_zero_copy(dtype):
    x = sample(dtype)
    d = dlpx.from_dlpack(x)
    assert d.dtype == dtype
    assert d.shape == x.shape
    assert d.data_ptr == address(x)


@pytest.mark.parametrize("dtype", STANDARD_DTYPES)
def test_dlpx_to_array_api_strict_is_zero_copy(dtype):
    d = dlpx.empty((2, 3), dtype)
    x = xp.from_dlpack(d)
    assert x.dtype == getattr(xp, dtype)
    assert x.shape == (2, 3)
    assert address(x) == d.data_ptr


def test_writes_are_seen_both_ways():
    x = xp.zeros((3,), dtype=xp.int32)
    d = dlpx.from_dlpack(x)
    np.from_dlpack(d)[1] = 5
    assert int(x[1]) == 5
    y = xp.from_dlpack(d)
    np.from_dlpack(x)[2] = 9
    assert int(y[2]) == 9


def test_array_api_from_dlpack_keywords_against_dlpx():
    d = dlpx.empty((3,), "float64")
    np.from_dlpack(d)[...] = [1.0, 2.0, 3.0]
    copied = xp.from_dlpack(d, copy=True)
    assert address(copied) != d.data_ptr
    assert xp.all(copied == xp.asarray([1.0, 2.0, 3.0]))
    assert address(xp.from_dlpack(d, copy=False)) == d.data_ptr
    assert address(xp.from_dlpack(d, device=xp.asarray([0.0]).device)) == d.data_ptr


def test_dlpx_from_dlpack_keywords_against_array_api_strict():
    x = sample("float32")
    assert dlpx.from_dlpack(x, device="cpu", copy=False).data_ptr == address(x)
    copied = dlpx.from_dlpack(x, copy=True)
    assert copied.data_ptr != address(x)
    np.testing.assert_array_equal(np.from_dlpack(copied), np.from_dlpack(x))


def test_0d_and_zero_size():
    assert dlpx.from_dlpack(xp.asarray(2.0)).shape == ()
    assert xp.from_dlpack(dlpx.empty(())).shape == ()
    assert dlpx.from_dlpack(xp.zeros((0, 2))).shape == (0, 2)
    assert xp.from_dlpack(dlpx.empty((0, 2))).shape == (0, 2)


def test_device_reported_by_both():
    x = sample("int64")
    assert x.__dlpack_device__() == dlpx.from_dlpack(x).__dlpack_device__() == (1, 0)

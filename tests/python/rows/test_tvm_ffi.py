"""tvm_ffi <-> dlpx: zero-copy both ways, the dtype matrix (tvm_ffi cannot name complex dtypes),
0-d, zero-size and strided tensors, alignment, and tvm_ffi functions called on dlpx tensors."""

import numpy as np
import pytest
torch = pytest.importorskip("torch")  # not on the free-threaded interpreters
tvm_ffi = pytest.importorskip("tvm_ffi")

import dlpx

# Every DLPack dtype tvm_ffi 0.1 names (complex travels, but str(dtype) raises: tested apart).
TVM_DTYPES = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2",
]


def fill(d, values):
    """Writes `values` into dlpx tensor `d` through torch (which has every dtype here)."""
    torch.from_dlpack(d).copy_(torch.as_tensor(values))


def as_numpy(x):
    return np.from_dlpack(x)


@pytest.mark.parametrize("dtype", TVM_DTYPES)
def test_dlpx_to_tvm_ffi_and_back_is_zero_copy(dtype):
    d = dlpx.empty((2, 3), dtype)
    x = tvm_ffi.from_dlpack(d)
    assert str(x.dtype) == dtype
    assert tuple(x.shape) == (2, 3)
    assert tuple(x.strides) == d.strides
    assert x.data_ptr() == d.data_ptr
    back = dlpx.from_dlpack(x)
    assert back.dtype == dtype
    assert back.data_ptr == d.data_ptr
    assert back.strides == d.strides


@pytest.mark.parametrize("dtype", TVM_DTYPES)
def test_torch_through_dlpx_through_tvm_ffi_keeps_values(dtype):
    t = (torch.arange(6) % 2 == 0) if dtype == "bool" else torch.arange(6).to(getattr(torch, dtype))
    x = tvm_ffi.from_dlpack(dlpx.from_dlpack(t))
    assert x.data_ptr() == t.data_ptr()
    assert torch.equal(torch.from_dlpack(dlpx.from_dlpack(x)).view(torch.uint8), t.view(torch.uint8))


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_tensors_travel_through_tvm_ffi(dtype):
    # tvm_ffi 0.1 carries complex tensors but cannot name their dtype (str() raises).
    values = np.array([1 + 2j, 3 - 4j], dtype=dtype)
    d = dlpx.from_dlpack(values)
    x = tvm_ffi.from_dlpack(d)
    assert x.data_ptr() == values.ctypes.data
    back = dlpx.from_dlpack(x)
    assert back.dtype == dtype
    np.testing.assert_array_equal(np.from_dlpack(back), values)


def test_a_write_through_dlpx_memory_is_seen_by_tvm_ffi_and_back():
    d = dlpx.empty((4,), "int32")
    x = tvm_ffi.from_dlpack(d)
    fill(d, [1, 2, 3, 4])
    np.testing.assert_array_equal(as_numpy(x), [1, 2, 3, 4])
    as_numpy(x)[0] = 100
    assert np.from_dlpack(d)[0] == 100


def test_tvm_ffi_tensor_to_dlpx():
    x = tvm_ffi.from_dlpack(np.arange(5, dtype=np.float32))
    d = dlpx.from_dlpack(x)
    assert d.data_ptr == x.data_ptr()
    assert d.dtype == "float32"
    np.from_dlpack(d)[4] = -1
    assert as_numpy(x)[4] == -1


def test_0d_and_zero_size():
    x = tvm_ffi.from_dlpack(dlpx.empty((), "float64"))
    assert tuple(x.shape) == ()
    z = tvm_ffi.from_dlpack(dlpx.empty((0, 3), "float64"))
    assert tuple(z.shape) == (0, 3)
    assert dlpx.from_dlpack(z).shape == (0, 3)


@pytest.mark.parametrize("view", [lambda a: a[:, ::2], lambda a: a.T, lambda a: a[::-1]], ids=["columns", "transpose", "reversed"])
def test_strided_dlpx_tensors_reach_tvm_ffi_with_their_strides(view):
    v = view(np.arange(12.0).reshape(3, 4))
    d = dlpx.from_dlpack(v)
    x = tvm_ffi.from_dlpack(d)
    assert tuple(x.strides) == d.strides
    assert x.data_ptr() == d.data_ptr
    np.testing.assert_array_equal(as_numpy(x), v)


def test_dlpx_allocations_meet_tvm_ffi_alignment_requirements():
    for shape in [(1,), (3,), (100, 7)]:
        tvm_ffi.from_dlpack(dlpx.empty(shape, "float32"), require_alignment=256, require_contiguous=True)


def test_the_import_outlives_the_dlpx_tensor():
    d = dlpx.empty((3,), "int64")
    fill(d, [7, 8, 9])
    x = tvm_ffi.from_dlpack(d)
    del d
    np.testing.assert_array_equal(as_numpy(x), [7, 8, 9])

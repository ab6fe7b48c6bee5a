"""torch <-> dlpx: zero-copy both ways, the dtype matrix (bfloat16 and float8 included), 0-d,
zero-size and strided views (torch has no negative strides), from_dlpack's device= and copy=."""

import numpy as np
import pytest
torch = pytest.importorskip("torch")  # not on the free-threaded interpreters

import dlpx

TORCH_DTYPES = [
    torch.bool, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.uint8, torch.uint16, torch.uint32, torch.uint64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64,
    torch.complex64, torch.complex128,
    torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz,
]


def dtype_name(dtype):
    return str(dtype).removeprefix("torch.")


def sample(dtype, shape=(3, 4)):
    """Distinct values of `dtype` (made through numpy where torch lacks arange for the type)."""
    n = int(np.prod(shape))
    if dtype == torch.bool:
        return (torch.arange(n) % 2 == 1).reshape(shape)
    if dtype in (torch.uint16, torch.uint32, torch.uint64):
        return torch.from_numpy((np.arange(n) + 1).astype(dtype_name(dtype))).reshape(shape)
    values = torch.arange(n, dtype=torch.float32) + 1
    if dtype.is_complex:
        values = torch.complex(values, values % 3)
    return values.to(dtype).reshape(shape)


def raw_bytes(t):
    return t.contiguous().view(torch.uint8).numpy().tobytes()


# ---- dtype matrix --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=dtype_name)
def test_torch_to_dlpx_is_zero_copy_for_every_dtype(dtype):
    t = sample(dtype)
    d = dlpx.from_dlpack(t)
    assert d.dtype == dtype_name(dtype)
    assert d.shape == tuple(t.shape)
    assert d.strides == t.stride()
    assert d.nbytes == t.numel() * t.element_size()
    assert d.data_ptr == t.data_ptr()
    assert not d.readonly


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=dtype_name)
def test_dlpx_to_torch_is_zero_copy_for_every_dtype(dtype):
    d = dlpx.empty((2, 5), dtype_name(dtype))
    t = torch.from_dlpack(d)
    assert t.dtype == dtype
    assert tuple(t.shape) == (2, 5)
    assert t.data_ptr() == d.data_ptr
    assert t.is_contiguous()


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=dtype_name)
def test_round_trip_keeps_bytes(dtype):
    t = sample(dtype)
    back = torch.from_dlpack(dlpx.from_dlpack(t))
    assert back.dtype == dtype
    assert back.data_ptr() == t.data_ptr()
    assert raw_bytes(back) == raw_bytes(t)


# ---- writes are seen through both sides ---------------------------------------------------------


def test_a_write_through_torch_is_seen_through_dlpx():
    t = torch.zeros(4, dtype=torch.int32)
    d = dlpx.from_dlpack(t)
    t[1] = 11
    assert np.from_dlpack(d)[1] == 11


def test_a_write_through_dlpx_memory_is_seen_by_torch():
    d = dlpx.empty((3,), "float64")
    t = torch.from_dlpack(d)
    np.from_dlpack(d)[...] = [1.5, 2.5, 3.5]
    assert t.tolist() == [1.5, 2.5, 3.5]
    t.add_(1)
    np.testing.assert_array_equal(np.from_dlpack(d), [2.5, 3.5, 4.5])


def test_a_bfloat16_write_through_torch_is_seen_by_torch_on_the_other_side():
    d = dlpx.empty((4,), "bfloat16")
    first = torch.from_dlpack(d)
    second = torch.from_dlpack(dlpx.from_dlpack(first))
    first.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert second.tolist() == [1.0, 2.0, 3.0, 4.0]


# ---- shapes and strides --------------------------------------------------------------------------


def test_0d_tensor():
    t = torch.tensor(2.5)
    d = dlpx.from_dlpack(t)
    assert (d.shape, d.strides, d.ndim, d.numel) == ((), (), 0, 1)
    assert d.data_ptr == t.data_ptr()
    assert torch.from_dlpack(d).item() == 2.5


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 2, 5)])
def test_zero_size_tensor(shape):
    t = torch.empty(shape)
    d = dlpx.from_dlpack(t)
    assert d.shape == shape
    assert d.numel == 0
    back = torch.from_dlpack(d)
    assert tuple(back.shape) == shape
    assert tuple(torch.from_dlpack(dlpx.empty(shape)).shape) == shape


VIEWS = {
    "every-other-row": lambda t: t[::2],
    "columns": lambda t: t[:, 1::2],
    "transpose": lambda t: t.t(),
    "offset-slice": lambda t: t[1:, 2:],
    "expanded": lambda t: t[0].expand(3, t.shape[1]),
    "permuted-3d": lambda t: t.reshape(2, 2, 6).permute(2, 0, 1),
    "as-strided": lambda t: t.as_strided((2, 3), (5, 2), 1),
}


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_strided_views_keep_their_strides(view):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    v = VIEWS[view](base)
    d = dlpx.from_dlpack(v)
    assert d.shape == tuple(v.shape)
    assert d.strides == v.stride()
    assert d.data_ptr == v.data_ptr()
    assert d.is_contiguous == v.is_contiguous()
    back = torch.from_dlpack(d)
    assert back.stride() == v.stride()
    assert back.data_ptr() == v.data_ptr()
    assert torch.equal(back, v)
    np.testing.assert_array_equal(np.from_dlpack(d), v.numpy())


def test_negative_strides_from_numpy_are_refused_by_torch_not_misread():
    # torch cannot hold negative strides; dlpx passes them on faithfully and torch refuses.
    d = dlpx.from_dlpack(np.arange(6.0)[::-1])
    assert d.strides == (-1,)
    with pytest.raises((BufferError, RuntimeError)):
        torch.from_dlpack(d)
    # A compact copy of the same view is fine.
    assert torch.from_dlpack(dlpx.from_dlpack(d, copy=True)).tolist() == [5.0, 4.0, 3.0, 2.0, 1.0, 0.0]


# ---- from_dlpack(device=, copy=) ------------------------------------------------------------------


def test_copy_true_gives_new_memory():
    t = sample(torch.float32)
    d = dlpx.from_dlpack(t, copy=True)
    assert d.data_ptr != t.data_ptr()
    np.testing.assert_array_equal(np.from_dlpack(d), t.numpy())
    t.zero_()
    assert np.from_dlpack(d).sum() != 0


def test_copy_true_of_a_strided_torch_view_is_compact():
    v = torch.arange(24, dtype=torch.int64).reshape(4, 6).t()[::2]
    d = dlpx.from_dlpack(v, copy=True)
    assert d.is_contiguous
    np.testing.assert_array_equal(np.from_dlpack(d), v.numpy())


@pytest.mark.parametrize("kwargs", [{"copy": False}, {"device": "cpu"}, {"device": "cpu", "copy": False}])
def test_no_copy_requests_share_memory(kwargs):
    t = sample(torch.int16)
    assert dlpx.from_dlpack(t, **kwargs).data_ptr == t.data_ptr()


def test_torch_copy_request_to_dlpx():
    d = dlpx.empty((3,), "float32")
    copied = torch.from_dlpack(d, copy=True)
    assert copied.data_ptr() != d.data_ptr
    assert torch.from_dlpack(d, copy=False).data_ptr() == d.data_ptr


def test_torch_consumes_a_dlpx_capsule_directly():
    d = dlpx.empty((2,), "int64")
    np.from_dlpack(d)[...] = [5, 6]
    assert torch.from_dlpack(d.__dlpack__()).tolist() == [5, 6]
    assert torch.from_dlpack(d.__dlpack__(max_version=(1, 3))).tolist() == [5, 6]


def test_the_constructor_takes_torch_tensors():
    t = sample(torch.bfloat16)
    d = dlpx.Tensor(t)
    assert d.dtype == "bfloat16"
    assert d.data_ptr == t.data_ptr()

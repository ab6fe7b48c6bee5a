"""jax <-> dlpx on jax's CPU backend: zero-copy both ways and the dtype matrix.

jax 0.10 always exports legacy "dltensor" capsules (it ignores max_version), which carry no
read-only flag: dlpx imports them read-only, as numpy does (docs/design.md R11; jax arrays are
immutable anyway). jax asks with `__dlpack__(stream=None)` only, i.e. for a legacy capsule, which
cannot carry a read-only dlpx tensor: dlpx refuses it clearly rather than hand out writable
memory, and a copy travels."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)  # int64 / float64 / complex128 stay 64-bit
jnp = pytest.importorskip("jax.numpy")  # noqa: E402

from dlpx.conform import abi  # noqa: E402
import dlpx  # noqa: E402

JAX_DTYPES = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
]


def sample(dtype, shape=(2, 3)):
    n = int(np.prod(shape))
    if dtype == "bool":
        return (jnp.arange(n) % 2 == 0).reshape(shape)
    return (jnp.arange(n) + 1).astype(dtype).reshape(shape)


def jax_says_readonly(array):
    """What jax's own export says about writability: a legacy capsule says nothing, which dlpx
    reads as read-only."""
    info = abi.read_capsule(array.__dlpack__(max_version=(1, 3)))
    return info["flags"] is None or bool(info["flags"] & abi.FLAG_READ_ONLY)


@pytest.mark.parametrize("dtype", JAX_DTYPES)
def test_jax_to_dlpx_is_zero_copy_for_every_dtype(dtype):
    j = sample(dtype)
    d = dlpx.from_dlpack(j)
    assert d.dtype == dtype
    assert d.shape == j.shape
    assert d.data_ptr == j.unsafe_buffer_pointer()
    assert d.readonly == jax_says_readonly(j)
    if dtype != "bfloat16":  # numpy has no bfloat16
        np.testing.assert_array_equal(np.from_dlpack(d), np.asarray(j))


@pytest.mark.parametrize("dtype", JAX_DTYPES)
def test_dlpx_to_jax_is_zero_copy_for_every_dtype(dtype):
    d = dlpx.empty((2, 3), dtype)
    j = jnp.from_dlpack(d)
    assert str(j.dtype) == dtype
    assert j.shape == (2, 3)
    assert j.unsafe_buffer_pointer() == d.data_ptr


@pytest.mark.parametrize("dtype", JAX_DTYPES)
def test_a_jax_array_goes_back_to_jax_through_dlpx_as_a_copy(dtype):
    j = sample(dtype)
    d = dlpx.from_dlpack(j)
    with pytest.raises(BufferError, match=r"^dlpx: __dlpack__: .*read-only"):
        jnp.from_dlpack(d)  # jax asks for a legacy capsule, which cannot say read-only
    back = jnp.from_dlpack(dlpx.from_dlpack(d, copy=True))
    assert back.dtype == j.dtype
    assert back.unsafe_buffer_pointer() != j.unsafe_buffer_pointer()
    assert bool(jnp.all(back == j))


def test_a_write_into_dlpx_memory_is_seen_by_jax():
    d = dlpx.empty((3,), "float32")
    j = jnp.from_dlpack(d)
    np.from_dlpack(d)[...] = [1.0, 2.0, 3.0]
    assert j.tolist() == [1.0, 2.0, 3.0]


def test_jax_import_exports_back_to_numpy_and_torch():
    import torch

    j = sample("float32")
    d = dlpx.from_dlpack(j)
    assert np.from_dlpack(d).ctypes.data == j.unsafe_buffer_pointer()
    assert torch.from_dlpack(d).data_ptr() == j.unsafe_buffer_pointer()


def test_0d_and_zero_size():
    j = jnp.array(4.5)
    d = dlpx.from_dlpack(j)
    assert d.shape == () and np.from_dlpack(d) == 4.5
    assert dlpx.from_dlpack(jnp.zeros((0, 3))).shape == (0, 3)
    assert jnp.from_dlpack(dlpx.empty((0, 3))).shape == (0, 3)
    assert jnp.from_dlpack(dlpx.empty(())).shape == ()


def test_a_compact_copy_of_a_strided_dlpx_tensor_reaches_jax():
    view = np.arange(12.0).reshape(3, 4)[:, ::2]
    d = dlpx.from_dlpack(dlpx.from_dlpack(view), copy=True)
    np.testing.assert_array_equal(np.asarray(jnp.from_dlpack(d)), view)


def test_a_readonly_dlpx_tensor_is_refused_to_a_legacy_consumer_like_jax():
    a = np.arange(3.0)
    a.flags.writeable = False
    d = dlpx.from_dlpack(a)
    with pytest.raises(BufferError, match=r"^dlpx: __dlpack__: .*read-only") as refusal:
        jnp.from_dlpack(d)
    # It says what a jax user can do (jax.numpy.from_dlpack takes no max_version): its writable copy travels.
    assert "jax.numpy.from_dlpack" in str(refusal.value)
    assert "dlpx.from_dlpack(tensor, copy=True)" in str(refusal.value)
    assert jnp.from_dlpack(dlpx.from_dlpack(d, copy=True)).tolist() == [0.0, 1.0, 2.0]


def test_copy_of_a_jax_array():
    j = sample("int32")
    d = dlpx.from_dlpack(j, copy=True)
    assert d.data_ptr != j.unsafe_buffer_pointer()
    assert not d.readonly
    np.testing.assert_array_equal(np.from_dlpack(d), np.asarray(j))

"""A tensor of each framework from a list of values and a dtype name, for the tests that run one
kernel over every framework (test_demo_kernel.py, test_kernel_library.py); a framework that is
missing, or lacks the dtype, skips the test."""

import numpy as np
import pytest


def make_torch(values, dtype):
    torch = pytest.importorskip("torch")
    return torch.tensor(values, dtype=getattr(torch, dtype))


def make_jax(values, dtype):
    jnp = pytest.importorskip("jax.numpy")
    if dtype.endswith("64"):
        pytest.skip("jax has no 64-bit dtypes unless jax_enable_x64 is set")
    return jnp.asarray(values, dtype=dtype)


def make_tvm_ffi(values, dtype):
    tvm_ffi = pytest.importorskip("tvm_ffi")
    return tvm_ffi.from_dlpack(np.asarray(values, dtype=dtype))

"""The demo kernel extension (examples/add_extension), built out of tree against the installed
dlpx with find_package(dlpx): results and output types per framework, every error, and flat
memory and reference counts over many calls."""

import gc
import os
import sys

import numpy as np
import pytest

import dlpx
from numpy_producers import Producer
from examples_build import build_example
from tensor_makers import make_jax, make_torch, make_tvm_ffi



@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return build_example("add_extension", "dlpx_demo", tmp_path_factory)


def test_the_extension_shares_dlpx_s_one_library(demo):
    assert demo.table_address() == dlpx._native._exchange_api_address


def make_torch(values, dtype):
    import torch

    return torch.tensor(values, dtype=getattr(torch, dtype))


def make_jax(values, dtype):
    import jax
    import jax.numpy as jnp

    # jax makes 64-bit types 32-bit unless x64 is on: on only while this array is made (the
    # array keeps its dtype after).
    with jax.enable_x64(dtype.endswith("64")):
        x = jnp.asarray(values, dtype=dtype)
    assert x.dtype == dtype
    return x


def make_tvm_ffi(values, dtype):
    import tvm_ffi

    return tvm_ffi.from_dlpack(np.asarray(values, dtype=dtype))


FRAMEWORKS = {
    # framework: (constructor, the type the demo returns)
    "numpy": (lambda v, d: np.asarray(v, dtype=d), "dlpx.Tensor"),
    "dlpx": (lambda v, d: dlpx.from_dlpack(np.asarray(v, dtype=d)), "dlpx.Tensor"),
    "torch": (make_torch, "torch.Tensor"),
    "tvm_ffi": (make_tvm_ffi, "dlpx.Tensor"),
    "jax": (make_jax, "dlpx.Tensor"),
}


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_add_is_correct_and_returns_the_callers_framework(demo, framework, dtype):
    make, expected_type = FRAMEWORKS[framework]
    a_values = np.arange(12).reshape(3, 4)
    b_values = np.arange(12).reshape(3, 4) * 10
    out = demo.add(make(a_values, dtype), make(b_values, dtype))
    assert f"{type(out).__module__.split('.')[0]}.{type(out).__name__}" == expected_type
    np.testing.assert_array_equal(np.from_dlpack(out), (a_values + b_values).astype(dtype))


def test_add_reads_strided_and_negative_stride_inputs(demo):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.arange(12, dtype=np.float32).reshape(4, 3)
    out = demo.add(a[:, ::-1], b.T)
    np.testing.assert_array_equal(np.from_dlpack(out), a[:, ::-1] + b.T)


def test_add_of_zero_size_and_zero_d(demo):
    assert np.from_dlpack(demo.add(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32))).shape == (0, 3)
    assert np.from_dlpack(demo.add(np.full((), 2.0), np.ones(()))).item() == 3.0


def test_a_torch_output_comes_from_torch_s_allocator(demo):
    torch = pytest.importorskip("torch")
    out = demo.add(torch.ones(3), torch.ones(3))
    assert type(out) is torch.Tensor and out.is_contiguous() and out.tolist() == [2.0, 2.0, 2.0]


def test_shape_mismatch_is_a_value_error(demo):
    with pytest.raises(ValueError, match="shapes differ"):
        demo.add(np.ones(3, np.float32), np.ones(4, np.float32))


def test_dtype_mismatch_is_a_type_error(demo):
    with pytest.raises(TypeError, match="dtypes differ"):
        demo.add(np.ones(3, np.float32), np.ones(3, np.float64))


def test_unsupported_dtype_is_a_type_error(demo):
    with pytest.raises(TypeError, match="unsupported dtype"):
        demo.add(np.ones(3, np.int8), np.ones(3, np.int8))


def test_a_non_cpu_tensor_is_a_value_error(demo):
    on_ext_dev = Producer(np.ones(3, np.float32), device=(12, 0))
    with pytest.raises(ValueError, match="must be on the CPU"):
        demo.add(on_ext_dev, on_ext_dev)


def test_a_non_tensor_is_a_type_error_naming_it(demo):
    with pytest.raises(TypeError, match="dlpx: view_of: str does not support DLPack"):
        demo.add("not a tensor", np.ones(3))


def test_wrong_argument_count_is_a_type_error(demo):
    with pytest.raises(TypeError, match="exactly two"):
        demo.add(np.ones(3))


def _rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


@pytest.mark.parametrize("framework,calls", [("dlpx", 1_000_000), ("numpy", 200_000), ("torch", 200_000)])
def test_memory_and_references_are_flat_over_many_calls(demo, framework, calls):
    make, _ = FRAMEWORKS[framework]
    a, b = make([1.0, 2.0, 3.0], "float32"), make([4.0, 5.0, 6.0], "float32")
    for _ in range(10_000):
        demo.add(a, b)
    gc.collect()
    refs = (sys.getrefcount(a), sys.getrefcount(b))
    rss = _rss_kib()
    for _ in range(calls):
        demo.add(a, b)
    gc.collect()
    assert (sys.getrefcount(a), sys.getrefcount(b)) == refs
    grown = _rss_kib() - rss
    assert grown < 2048, f"RSS grew by {grown} KiB over {calls} calls"

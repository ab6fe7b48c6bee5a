"""The C++ kernel example (examples/cpp_kernel): dlpx.hpp's as_mdspan and ManagedTensor over
the kernel API, built out of tree with find_package(dlpx)."""

import numpy as np
import pytest

import dlpx
from examples_build import build_example


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    return build_example("cpp_kernel", "dlpx_cpp_kernel", tmp_path_factory)


def test_matmul_of_numpy_returns_dlpx(kernel):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.arange(12, dtype=np.float32).reshape(3, 4)
    c = kernel.matmul(a, b)
    assert isinstance(c, dlpx.Tensor)
    np.testing.assert_allclose(np.from_dlpack(c), a @ b)


def test_matmul_of_torch_returns_torch_and_reads_strides(kernel):
    torch = pytest.importorskip("torch")
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4).T  # strided (4 x 3)
    b = torch.ones(3, 2)
    c = kernel.matmul(a, b)
    assert type(c) is torch.Tensor
    torch.testing.assert_close(c, a @ b)


def test_wrong_dtype_names_both(kernel):
    with pytest.raises(TypeError, match="dlpx: as_mdspan: expected float32, got float64"):
        kernel.matmul(np.ones((2, 2)), np.ones((2, 2), np.float32))


def test_wrong_rank_and_shape(kernel):
    with pytest.raises(ValueError, match="dlpx: as_mdspan"):
        kernel.matmul(np.ones(3, np.float32), np.ones((3, 1), np.float32))
    with pytest.raises(ValueError, match="inner dimensions differ: 3 and 2"):
        kernel.matmul(np.ones((2, 3), np.float32), np.ones((2, 2), np.float32))


def test_a_non_tensor_raises_the_kernel_api_error(kernel):
    with pytest.raises(TypeError, match="does not support DLPack"):
        kernel.matmul(object(), np.ones((2, 2), np.float32))

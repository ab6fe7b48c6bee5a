"""The CUDA array interface with the real peers on a GPU (docs/design.md R12): dlpx tensors read
by torch (`torch.as_tensor`), CuPy and numba through `__cuda_array_interface__`, and torch's and
CuPy's own interfaces read by dlpx, zero-copy, with version 3's stream ordering a late write
before the read. Skipped without a GPU (the simulated driver covers the logic everywhere:
sim_cuda_interface_cases.py)."""

import numpy as np
import pytest

import dlpx
from cuda_peers import cupy, needs_cupy, needs_gpu, torch
from protocol_views import OnlyCudaInterface

SLEEP_CYCLES = 2 * 10**8  # ~0.1 s of GPU time: far longer than an import and a copy


def host(t):
    return np.from_dlpack(dlpx.from_dlpack(t, device="cpu"))


@needs_gpu
def test_torch_as_tensor_reads_a_dlpx_tensor_in_place():
    t = dlpx.empty((4, 5), "float32", "cuda:0")
    x = torch.as_tensor(t, device="cuda")
    assert x.data_ptr() == t.data_ptr and x.shape == (4, 5)
    x.fill_(3.0)
    torch.cuda.synchronize()
    assert (host(t) == 3.0).all()


@needs_gpu
def test_torch_s_interface_is_read_in_place():
    x = torch.arange(12.0, device="cuda").reshape(3, 4)[:, 1:]
    torch.cuda.synchronize()  # torch's interface is version 2: no stream to order the read after
    t = dlpx.from_dlpack(OnlyCudaInterface(x))
    assert t.data_ptr == x.data_ptr() and t.device == "cuda:0" and t.strides == (4, 1)
    # dlpx copies only contiguous device memory to the host: torch reads dlpx's import back.
    assert torch.equal(torch.from_dlpack(t), x)


@needs_gpu
@needs_cupy
def test_cupy_s_interface_stream_is_waited_on():
    spin = cupy.RawKernel(r"""extern "C" __global__ void spin(long long cycles) {
        long long start = clock64(); while (clock64() - start < cycles) {} }""", "spin")
    a = cupy.zeros(1 << 20, dtype=cupy.float32)
    cupy.cuda.runtime.deviceSynchronize()
    side = cupy.cuda.Stream(non_blocking=True)  # only the interface's stream orders the read
    with side:
        spin((1,), (1,), (np.int64(SLEEP_CYCLES),))
        a.fill(5.0)
        assert a.__cuda_array_interface__["stream"] == side.ptr
        t = dlpx.from_dlpack(OnlyCudaInterface(a))
    assert t.data_ptr == a.data.ptr
    assert (host(t) == 5.0).all()  # copied on dlpx's stream, which waited for `side`


@needs_gpu
@needs_cupy
def test_cupy_reads_a_dlpx_tensor_through_the_interface_and_dlpx_reads_cupy_s():
    t = dlpx.empty((8,), "int32", "cuda:0")
    a = cupy.asarray(OnlyCudaInterface(t))
    assert a.data.ptr == t.data_ptr
    a[:] = 9
    cupy.cuda.runtime.deviceSynchronize()
    assert (host(t) == 9).all()
    b = cupy.arange(6, dtype=cupy.float64).reshape(2, 3)[:, ::2]
    u = dlpx.from_dlpack(OnlyCudaInterface(b))
    assert u.data_ptr == b.data.ptr and u.strides == (3, 2)
    assert bool((cupy.from_dlpack(u) == b).all())  # strided device memory: CuPy reads it back


@needs_gpu
def test_numba_reads_a_dlpx_tensor_through_the_interface():
    cuda = pytest.importorskip("numba.cuda")
    if not cuda.is_available():
        pytest.skip("numba sees no CUDA GPU")
    t = dlpx.empty((16,), "float32", "cuda:0")
    d = cuda.as_cuda_array(t)
    assert d.__cuda_array_interface__["data"][0] == t.data_ptr and d.shape == (16,)
    d.copy_to_device(np.full(16, 2.5, np.float32))
    cuda.synchronize()
    assert (host(t) == 2.5).all()


@needs_gpu
def test_a_read_only_interface_stays_read_only_through_dlpx():
    t = dlpx.empty((4,), "float32", "cuda:0")
    ro = dlpx.from_dlpack(OnlyCudaInterface(dict(t.__cuda_array_interface__, data=(t.data_ptr, True))))
    assert ro.readonly and ro.__cuda_array_interface__["data"] == (t.data_ptr, True)

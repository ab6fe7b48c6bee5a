"""The CUDA kernel library example (examples/cuda_kernel, loaded with dlpx.load_library): any
framework's CUDA tensors in, the output allocated by the first input's framework, the kernel on
that framework's current stream (no synchronisation), the result back as the caller's type;
inside CUDA graph capture too, with the outputs in torch's graph pool.

The library comes from DLPX_CUDA_KERNEL (scripts/check_cuda_example.sh builds it with nvcc from
PyPI and runs this file, also without a GPU) or, on a GPU machine, is built here with CMake. The
argument checks that fail before any CUDA call run everywhere the library exists; the rest need
a GPU and torch with CUDA, and say so when skipped."""

import os
import shutil
import sys
import sysconfig
import time

import numpy as np
import pytest

import c_build
import dlpx
from cuda_peers import GPU, cupy, needs_cupy, needs_gpu, torch
from examples_build import configure_and_build

# About 0.25-0.5 s of GPU time at 1-2 GHz: far longer than a host call, short enough for a test.
SLEEP_CYCLES = 5 * 10**8
# compute-sanitizer (scripts/gpu_check.sh sets this under it) runs each kernel to completion
# before the launch returns: what the host sees of a kernel still running cannot be asserted.
LAUNCHES_SERIALISED = bool(os.environ.get("DLPX_LAUNCHES_SERIALISED"))


def cuda_compiler_args():
    """CMake finds nvcc on PATH or in CUDACXX; else nvcc from PyPI beside this Python, if any."""
    if shutil.which("nvcc") or os.environ.get("CUDACXX"):
        return ()
    nvcc = os.path.join(sysconfig.get_paths()["purelib"], "nvidia", "cu13", "bin", "nvcc")
    return (f"-DCMAKE_CUDA_COMPILER={nvcc}",) if os.path.exists(nvcc) else ()


@pytest.fixture(scope="module")
def library_path(tmp_path_factory):
    path = os.environ.get("DLPX_CUDA_KERNEL")
    if path:
        return path
    if not GPU:
        pytest.skip("no GPU to build examples/cuda_kernel for here; scripts/check_cuda_example.sh builds it "
                    "with nvcc from PyPI and runs this file (DLPX_CUDA_KERNEL)")
    build = configure_and_build("cuda_kernel", tmp_path_factory, cuda_compiler_args())
    return os.path.join(build, "libdlpx_cuda_kernel.so")


@pytest.fixture(scope="module")
def kernel(library_path):
    module = dlpx.load_library(library_path)
    if GPU:
        # CUDA loads a kernel at its first launch (lazy loading), and that load waited for a
        # kernel still running (seen on an H100): launch each once before the tests that time.
        x = torch.ones(4, device="cuda")
        module.row_sum(module.axpby(1.0, x, x).view(2, 2))
        module.launch_empty(x)
        module.launch_empty_c(x)
        torch.cuda.synchronize()
    return module


def test_the_library_has_no_python_in_it(library_path):
    names = [fields[-1] for fields in c_build.dynamic_symbols(library_path)]
    assert [name for name in names if name.startswith("Py")] == []
    assert "dlpx_kernel_library" in names


def test_the_kernels_carry_their_signatures(kernel):
    assert kernel.axpby.__text_signature__ == "(a, x, y, b=1.0)"
    assert kernel.row_sum.__text_signature__ == "(x)"
    assert kernel.launch_empty.__text_signature__ == "(*tensors)"
    assert kernel.launch_empty_c.__text_signature__ == "(*tensors)"
    assert "a * x + b * y" in kernel.axpby.__doc__


def cuda(*shape, fill=None):
    if fill is not None:
        return torch.full(shape, float(fill), device="cuda")
    return torch.randn(*shape, device="cuda")


# ---- checks that fail before any CUDA call (no GPU needed) -----------------------------------


def cpu_tensors():
    yield "numpy", np.ones((2, 3), np.float32)
    yield "dlpx", dlpx.empty((2, 3), "float32")
    if torch is not None:
        yield "torch", torch.ones(2, 3)


@pytest.mark.parametrize("framework, x", list(cpu_tensors()), ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("call, name", [
    (lambda k, x: k.axpby(2.0, x, x), "axpby: x"),
    (lambda k, x: k.row_sum(x), "row_sum: x"),
    (lambda k, x: k.launch_empty(x, x), r"launch_empty: tensors\[0\]"),
    (lambda k, x: k.launch_empty_c(x, x), r"launch_empty_c: tensors\[0\]"),
])
def test_a_cpu_tensor_is_a_value_error_naming_its_device(kernel, framework, x, call, name):
    with pytest.raises(ValueError, match=rf"^dlpx: {name} is on cpu:0; expected a cuda tensor$"):
        call(kernel, x)


def test_wrong_arguments_are_type_errors(kernel):
    x = np.ones(3, np.float32)
    with pytest.raises(TypeError, match=r"^dlpx: axpby: missing required argument 'y'"):
        kernel.axpby(2.0, x)
    with pytest.raises(TypeError, match=r"^dlpx: axpby: parameter 'a' takes a float, got str$"):
        kernel.axpby("2", x, x)
    with pytest.raises(TypeError, match=r"^dlpx: axpby: parameter 'b' takes a float, got NoneType$"):
        kernel.axpby(2.0, x, x, None)
    with pytest.raises(TypeError, match=r"^dlpx: axpby: .*'c'"):
        kernel.axpby(2.0, x, x, c=1.0)
    with pytest.raises(TypeError, match=r"^dlpx: row_sum: missing required argument 'x'"):
        kernel.row_sum()
    with pytest.raises(TypeError, match=r"^dlpx: launch_empty: takes 1 to 16 tensors$"):
        kernel.launch_empty(*[x] * 17)
    with pytest.raises(TypeError, match=r"^dlpx: launch_empty: takes 1 to 16 tensors$"):
        kernel.launch_empty()
    for n in (0, 17):
        with pytest.raises(TypeError, match=r"^dlpx: launch_empty_c: takes 1 to 16 tensors$"):
            kernel.launch_empty_c(*[x] * n)
    with pytest.raises(TypeError, match="does not support DLPack"):
        kernel.row_sum(object())


def test_failed_calls_release_their_views(kernel):
    # numpy has no exchange table: each view owns an import that references the array until released.
    x = np.ones((4, 4), np.float32)
    before = sys.getrefcount(x)
    for _ in range(50):
        for call in (lambda: kernel.axpby(1.0, x, x), lambda: kernel.row_sum(x), lambda: kernel.launch_empty(x, x, x)):
            with pytest.raises(ValueError):
                call()
    assert sys.getrefcount(x) == before


# ---- results (GPU) ---------------------------------------------------------------------------


@needs_gpu
@pytest.mark.parametrize("shape", [(1,), (1000, 37), (3, 0), (1 << 20,)])
def test_axpby_of_torch_equals_torch_and_returns_torch(kernel, shape):
    x, y = cuda(*shape), cuda(*shape)
    out = kernel.axpby(2.5, x, y, -0.5)
    assert type(out) is torch.Tensor and out.device == x.device and out.shape == x.shape
    torch.testing.assert_close(out, 2.5 * x - 0.5 * y)
    torch.testing.assert_close(kernel.axpby(3, x, y), 3 * x + y)  # b defaults to 1
    torch.testing.assert_close(kernel.axpby(y=y, x=x, a=1.0, b=2.0), x + 2.0 * y)  # by name


@needs_gpu
@pytest.mark.parametrize("rows, cols", [(1, 1), (7, 1000), (4096, 33), (0, 5), (5, 0), (70000, 3)])
def test_row_sum_of_torch_equals_torch_sum(kernel, rows, cols):
    x = cuda(rows, cols)
    out = kernel.row_sum(x)
    assert type(out) is torch.Tensor and out.shape == (rows,)
    torch.testing.assert_close(out, x.sum(dim=1), rtol=1e-5, atol=1e-4)


@needs_gpu
def test_row_sum_reads_any_strides(kernel):
    base = cuda(64, 96)
    for x in (base.T, base[::3, 1::2], base.T[5:9]):
        torch.testing.assert_close(kernel.row_sum(x), x.sum(dim=1), rtol=1e-5, atol=1e-4)


# ---- the caller's stream, no synchronisation (GPU) -------------------------------------------


@needs_gpu
@pytest.mark.parametrize("call, expected", [
    (lambda k, x, y: k.axpby(2.0, x, y), lambda x, y: 2.0 * x + y),
    (lambda k, x, y: k.row_sum(x.view(256, -1)), lambda x, y: x.view(256, -1).sum(dim=1)),
])
def test_the_kernel_runs_on_torch_s_current_stream_without_waiting(kernel, call, expected):
    x, y = cuda(1 << 20, fill=1.0), cuda(1 << 20, fill=0.25)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(SLEEP_CYCLES)
        x.fill_(3.0)  # queued after the sleep: a kernel on any other stream would read 1.0
        start = time.perf_counter()
        out = call(kernel, x, y)
        returned_after = time.perf_counter() - start
        sleeping = not s.query()  # the host call returned while the sleep still ran: no sync
        s.synchronize()
    assert sleeping or LAUNCHES_SERIALISED, f"the call took {returned_after * 1e3:.1f} ms and the stream had finished: it waited"
    torch.testing.assert_close(out, expected(x, y), rtol=1e-5, atol=1e-3)


# ---- other producers (GPU) -------------------------------------------------------------------


def torch_stream_of(cupy_stream):
    return torch.cuda.ExternalStream(cupy_stream.ptr)


@needs_gpu
@needs_cupy
def test_cupy_inputs_from_a_busy_stream_are_read_after_its_work(kernel):
    s = cupy.cuda.Stream(non_blocking=True)  # no implicit ordering with the legacy default stream
    with s:
        x = cupy.ones(1 << 20, dtype=cupy.float32)
        y = cupy.full(1 << 20, 0.25, dtype=cupy.float32)
        with torch.cuda.stream(torch_stream_of(s)):
            torch.cuda._sleep(SLEEP_CYCLES)
        x.fill(3.0)  # on s after the sleep; only the __dlpack__(stream=...) handshake orders the kernel after it
        out = kernel.axpby(2.0, x, y)
        if not LAUNCHES_SERIALISED:
            assert not s.done  # nothing waited on the host
        assert type(out) is cupy.ndarray and out.device.id == 0  # the caller's type (cupy.from_dlpack)
        np.testing.assert_allclose(cupy.asnumpy(out, stream=s), np.full(1 << 20, 6.25, np.float32))


@needs_gpu
@needs_cupy
def test_cupy_from_dlpack_of_the_result_on_its_stream_sees_the_finished_result(kernel):
    s = cupy.cuda.Stream(non_blocking=True)
    side = torch.cuda.Stream()
    with s, dlpx.cuda.stream(side):  # dlpx (and so the kernel) works on `side`
        x = cupy.full(1 << 20, 5.0, dtype=cupy.float32)
        y = cupy.full(1 << 20, 1.0, dtype=cupy.float32)
        with torch.cuda.stream(side):
            torch.cuda._sleep(SLEEP_CYCLES)  # the kernel runs late on `side`
        # Made a cupy.ndarray by cupy.from_dlpack on s, which makes s wait for `side`: a read on s
        # without the wait finds no result.
        out = kernel.axpby(-1.0, x, y)
        assert type(out) is cupy.ndarray
        total = float(out.sum())
    assert total == -4.0 * (1 << 20)


@needs_gpu
def test_jax_cuda_arrays_give_jax_arrays(kernel):
    jax = pytest.importorskip("jax")
    try:
        device = jax.devices("cuda")[0]
    except RuntimeError as e:
        pytest.skip(f"jax has no CUDA backend here ({e}); the suite sets JAX_PLATFORMS=cpu unless it is set")
    x = jax.device_put(np.arange(12, dtype=np.float32).reshape(3, 4), device)
    y = jax.device_put(np.ones((3, 4), np.float32), device)
    out = kernel.axpby(2.0, x, y)
    assert isinstance(out, jax.Array) and out.devices() == {device}
    np.testing.assert_allclose(np.asarray(out), 2 * np.asarray(x) + 1)
    sums = kernel.row_sum(x)
    assert isinstance(sums, jax.Array)
    np.testing.assert_allclose(np.asarray(sums), np.asarray(x).sum(axis=1))


@needs_gpu
def test_a_dlpx_cuda_tensor_in_gives_a_dlpx_tensor_out(kernel):
    x = dlpx.from_dlpack(cuda(100, fill=2.0))
    y = dlpx.empty((100,), "float32", "cuda:0")
    torch.from_dlpack(y).fill_(1.0)
    out = kernel.axpby(3.0, x, y)
    assert isinstance(out, dlpx.Tensor) and out.device == "cuda:0"
    torch.testing.assert_close(torch.from_dlpack(out), cuda(100, fill=7.0))


# ---- CUDA graphs (GPU) -----------------------------------------------------------------------


@needs_gpu
def test_calls_captured_in_a_cuda_graph_replay_on_new_inputs(kernel):
    x, y = cuda(256, 64), cuda(256, 64)
    warm = torch.cuda.Stream()  # torch's advice: warm up off the default stream before capture
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):
        kernel.row_sum(kernel.axpby(2.0, x, y))
    torch.cuda.current_stream().wait_stream(warm)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # a launch on another stream, or a sync, would break the capture
        z = kernel.axpby(2.0, x, y)
        sums = kernel.row_sum(z)
        kernel.launch_empty(x, y, z)
        kernel.launch_empty_c(x, y, z)
    # The outputs were allocated by torch, in the graph's private pool: replay writes there.
    pool = tuple(graph.pool())
    for out in (z, sums):
        [segment] = [seg for seg in torch.cuda.memory_snapshot()
                     if seg["address"] <= out.data_ptr() < seg["address"] + seg["total_size"]]
        assert tuple(segment["segment_pool_id"]) == pool, (segment["segment_pool_id"], pool)
    for _ in range(2):
        new_x, new_y = cuda(256, 64), cuda(256, 64)
        x.copy_(new_x)
        y.copy_(new_y)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(z, 2.0 * new_x + new_y)
        torch.testing.assert_close(sums, (2.0 * new_x + new_y).sum(dim=1), rtol=1e-5, atol=1e-4)


# ---- bad CUDA inputs (GPU) -------------------------------------------------------------------


@needs_gpu
def test_bad_cuda_inputs_give_clear_errors(kernel):
    x = cuda(4, 6)
    cases = [
        (lambda: kernel.axpby(1.0, x.double(), x), TypeError, r"axpby: x has dtype float64; expected float32$"),
        (lambda: kernel.axpby(1.0, x, x.half()), TypeError, r"axpby: y has dtype float16; expected float32$"),
        (lambda: kernel.axpby(1.0, x, x[:3]), ValueError, r"axpby: shapes differ: x \(4, 6\) and y \(3, 6\)$"),
        (lambda: kernel.axpby(1.0, x.T, x.T), ValueError,
         r"axpby: x is not contiguous \(shape \(6, 4\), strides \(1, 6\)\); pass a contiguous tensor$"),
        (lambda: kernel.axpby(1.0, x, x.cpu()), ValueError, r"axpby: y is on cpu:0; expected a cuda tensor$"),
        (lambda: kernel.row_sum(x[0]), ValueError, r"row_sum: x has 1 dimensions; expected 2 \(rows, columns\)$"),
        (lambda: kernel.row_sum(x[:1].expand(3, 6)), ValueError, r"row_sum: x cannot be read as a strided view \(dlpx: as_mdspan: strides\[0\] = 0 is not positive"),
        (lambda: kernel.launch_empty(x, x.int()), TypeError, r"launch_empty: tensors\[1\] has dtype int32"),
        (lambda: kernel.launch_empty_c(x, x.int()), TypeError, r"launch_empty_c: tensors\[1\] has dtype int32"),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()


@needs_gpu
@pytest.mark.skipif(GPU and torch.cuda.device_count() < 2,
                    reason="needs two CUDA devices; the GPU machines this project runs on (one H100, or one H200) have one")
def test_tensors_on_two_devices_are_refused(kernel):
    with pytest.raises(ValueError, match=r"axpby: y is on cuda:1, the first tensor on cuda:0; all tensors must be on one device"):
        kernel.axpby(1.0, cuda(4), cuda(4).to("cuda:1"))


@needs_gpu
def test_calls_leak_neither_memory_nor_references(kernel):
    x = cuda(1 << 16)
    bad = x.double()
    kernel.axpby(1.0, x, x)  # torch's caching allocator has its block now
    torch.cuda.synchronize()
    memory, refs = torch.cuda.memory_allocated(), sys.getrefcount(x)
    for _ in range(100):
        del_me = kernel.axpby(1.0, x, x)
        del del_me  # the output's deleter ran: torch's tensor owned it
        with pytest.raises(TypeError):
            kernel.axpby(1.0, x, bad)
        kernel.launch_empty(x, x, x)
    torch.cuda.synchronize()
    assert (torch.cuda.memory_allocated(), sys.getrefcount(x)) == (memory, refs)

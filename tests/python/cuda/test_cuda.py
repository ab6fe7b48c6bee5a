"""CUDA: per-thread streams (no GPU needed), clean failures without a driver, and — where a GPU
and torch with CUDA are present — allocation, streams and stream-ordered exports."""

import ctypes
import gc
import threading

import numpy as np
import pytest

import dlpx
from dlpx.conform import abi
from numpy_producers import Producer
from cuda_peers import GPU, cupy, needs_cupy, needs_gpu, torch

DRIVER = dlpx.cuda.is_available()
needs_no_driver = pytest.mark.skipif(DRIVER, reason="a CUDA driver is present: the no-driver paths cannot be observed")


# ---- streams: bookkeeping that needs no GPU -------------------------------------------------


def test_the_default_stream_is_zero():
    assert dlpx.cuda.current_stream(0) == 0


def test_a_stream_is_current_inside_its_block_and_restored_after():
    with dlpx.cuda.stream(0x1234, device=1) as handle:
        assert handle == 0x1234
        assert dlpx.cuda.current_stream(1) == 0x1234
        assert dlpx.cuda.current_stream(0) == 0
        with dlpx.cuda.stream(0x5678, device=1):
            assert dlpx.cuda.current_stream(1) == 0x5678
        assert dlpx.cuda.current_stream(1) == 0x1234
    assert dlpx.cuda.current_stream(1) == 0


def test_streams_are_per_thread():
    seen = []
    with dlpx.cuda.stream(0xABC):
        worker = threading.Thread(target=lambda: seen.append(dlpx.cuda.current_stream(0)))
        worker.start()
        worker.join()
        assert dlpx.cuda.current_stream(0) == 0xABC
    assert seen == [0]


class TorchLikeStream:
    cuda_stream = 0x7000


class CudaPythonStream:
    def __cuda_stream__(self):
        return (0, 0x8000)


@pytest.mark.parametrize("stream, handle", [(TorchLikeStream(), 0x7000), (CudaPythonStream(), 0x8000), (None, 0), (5, 5)])
def test_stream_objects_give_their_handle(stream, handle):
    with dlpx.cuda.stream(stream):
        assert dlpx.cuda.current_stream() == handle


CURRENT_WORK_STREAM = abi.CurrentWorkStream(abi.exchange_table(dlpx.Tensor).current_work_stream)


def test_the_exchange_table_reports_the_current_stream():
    out = ctypes.c_void_p(1)
    with dlpx.cuda.stream(0x4242, device=0):
        assert CURRENT_WORK_STREAM(2, 0, ctypes.byref(out)) == 0
        assert out.value == 0x4242
        assert CURRENT_WORK_STREAM(1, 0, ctypes.byref(out)) == 0
        assert out.value is None
    assert CURRENT_WORK_STREAM(2, 0, ctypes.byref(out)) == 0
    assert out.value is None


@pytest.mark.parametrize("stream, error", [(-5, ValueError), ("s", TypeError), (1.5, TypeError)])
def test_bad_streams_are_refused(stream, error):
    with pytest.raises(error, match=r"^dlpx: "):
        with dlpx.cuda.stream(stream):
            pass


class CudaCoreLikeStream:
    """cuda.core's Stream: the protocol, and `.device`, whose number is its `device_id`."""

    def __init__(self, handle, device_id):
        self.handle_value, self.device = handle, type("Device", (), {"device_id": device_id})()

    def __cuda_stream__(self):
        return (0, self.handle_value)


def test_a_stream_object_s_own_device_is_its_device_for_every_call():
    # cuda.core's device number is `device_id`: the stream went to cuda:0, and set_current_stream
    # never asked the object.
    s = CudaCoreLikeStream(0x9000, 1)
    with dlpx.cuda.stream(s) as handle:
        assert handle == 0x9000 and dlpx.cuda.current_stream(1) == 0x9000 and dlpx.cuda.current_stream(0) == 0
    assert dlpx.cuda.set_current_stream(s) == 0 and dlpx.cuda.current_stream(1) == 0x9000
    assert dlpx.cuda.set_current_stream(None, "cuda:1") == 0x9000
    with dlpx.cuda.stream(0x9100, device="cuda:1"):
        assert dlpx.cuda.current_stream("cuda:1") == 0x9100


@pytest.mark.parametrize("stream, error, says", [
    (type("S", (), {"cuda_stream": -3})(), ValueError, r"a pointer \(0 to 2\*\*64 - 1\), S's handle gave -3"),
    (CudaCoreLikeStream(-3, 0), ValueError, r"__cuda_stream__ gave -3"),
    (CudaCoreLikeStream(2**64, 0), ValueError, r"__cuda_stream__ gave 18446744073709551616"),
    (CudaCoreLikeStream("abc", 0), TypeError, r"__cuda_stream__ gave 'abc', not an int handle"),
    (True, TypeError, r"expected an int handle"),
])
def test_a_handle_no_pointer_can_be_is_refused_however_it_comes(stream, error, says):
    # Through an object, -3 became 0xfff...fffd and reached the driver.
    for call in (lambda: dlpx.cuda.stream(stream), lambda: dlpx.cuda.set_current_stream(stream)):
        with pytest.raises(error, match=r"^dlpx: cuda\.(stream|set_current_stream): .*" + says):
            call()
    assert dlpx.cuda.current_stream(0) == 0


def test_a_handle_past_2_63_is_a_pointer_like_any_other():
    # aarch64 tags pointers in their top byte: 2**63 and up were refused as "not 64 bits".
    tagged = 0xB400_0070_1234_5600
    with dlpx.cuda.stream(tagged) as handle:
        assert handle == tagged and dlpx.cuda.current_stream() == tagged
        assert dlpx.cuda.set_current_stream(2**64 - 1) == tagged
    assert dlpx.cuda.current_stream() == 0


def test_blocks_left_out_of_order_restore_what_was_current_before_them_all():
    # Two asyncio tasks each in a block across an await: the first in left first, and the thread
    # kept its stream after both had left.
    import asyncio

    async def task(handle, first):
        with dlpx.cuda.stream(handle):
            await asyncio.sleep(0 if first else 0.01)
            return dlpx.cuda.current_stream()

    async def both():
        return await asyncio.gather(task(0xA000, True), task(0xB000, False))

    with dlpx.cuda.stream(0x1000):
        assert asyncio.run(both()) == [0xB000, 0xB000]  # the innermost open block's, as torch's
        assert dlpx.cuda.current_stream() == 0x1000
    assert dlpx.cuda.current_stream() == 0


def test_a_block_object_may_be_entered_again_and_twice_at_once():
    s = dlpx.cuda.stream(0xC000)
    for _ in range(2):
        with s:
            assert dlpx.cuda.current_stream() == 0xC000
        assert dlpx.cuda.current_stream() == 0
    outer, inner = dlpx.cuda.stream(0xD000), s
    inner.__enter__()
    outer.__enter__()
    inner.__exit__(None, None, None)  # out of order: the open block's stream stays
    assert dlpx.cuda.current_stream() == 0xD000
    outer.__exit__(None, None, None)
    assert dlpx.cuda.current_stream() == 0
    # Two tasks sharing `inner`, each in it, with `outer` between: whichever of its entries a
    # leaving takes, the stream is the innermost open block's.
    inner.__enter__()
    outer.__enter__()
    inner.__enter__()
    inner.__exit__(None, None, None)
    assert dlpx.cuda.current_stream() == 0xD000
    outer.__exit__(None, None, None)
    assert dlpx.cuda.current_stream() == 0xC000
    inner.__exit__(None, None, None)
    assert dlpx.cuda.current_stream() == 0


def test_one_block_object_entered_by_two_threads_restores_each_thread_s_stream():
    # A leaving took the object's latest entry, whoever made it: the first thread out took the
    # second's, and neither thread's stream was restored.
    import threading

    shared = dlpx.cuda.stream(0xAB00)
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def a():
        with shared:
            a_in.set()
            b_in.wait()
        seen["a"] = dlpx.cuda.current_stream()
        a_out.set()

    def b():
        a_in.wait()
        with shared:
            b_in.set()
            a_out.wait()
        seen["b"] = dlpx.cuda.current_stream()

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == {"a": 0, "b": 0}


def test_a_block_left_on_another_thread_leaves_that_thread_s_stream_alone():
    block = dlpx.cuda.stream(0xE000)
    block.__enter__()
    seen = []

    def leave():
        dlpx.cuda.set_current_stream(0xF000)
        block.__exit__(None, None, None)
        seen.append(dlpx.cuda.current_stream())
        dlpx.cuda.set_current_stream(None)

    worker = threading.Thread(target=leave)
    worker.start()
    worker.join()
    assert seen == [0xF000]  # it was set to the entering thread's previous stream, 0
    assert dlpx.cuda.current_stream() == 0xE000  # unreachable from the other thread: as it was
    dlpx.cuda.set_current_stream(None)
    with dlpx.cuda.stream(0x1100):  # the thread's blocks are as if the block had been left
        pass
    assert dlpx.cuda.current_stream() == 0


def test_a_thread_holds_streams_on_at_most_16_devices_and_says_so():
    for device in range(16):
        dlpx.cuda.set_current_stream(0x100 + device, device)
    try:
        with pytest.raises(ValueError, match="at most 16 devices"):
            dlpx.cuda.set_current_stream(0x999, 16)
        dlpx.cuda.set_current_stream(0x777, 3)  # replacing one is still fine
        assert dlpx.cuda.current_stream(3) == 0x777
        assert [dlpx.cuda.current_stream(d) for d in (0, 15, 16)] == [0x100, 0x10F, 0]
    finally:
        for device in range(16):
            dlpx.cuda.set_current_stream(None, device)
    assert all(dlpx.cuda.current_stream(d) == 0 for d in range(17))
    dlpx.cuda.set_current_stream(0x999, 16)  # room again
    dlpx.cuda.set_current_stream(None, 16)


def test_cpu_has_no_streams():
    with pytest.raises(ValueError, match="cpu has no streams"):
        dlpx._native._set_current_stream(1, 0, 5)


# ---- no driver: every CUDA path fails cleanly ------------------------------------------------


@needs_no_driver
@pytest.mark.parametrize("device", ["cuda:0", "cuda:1", "cuda_host", "cuda_managed"])
@pytest.mark.parametrize("shape", [(4,), (0,)])
def test_without_a_driver_cuda_allocation_is_a_runtime_error(device, shape):
    with pytest.raises(RuntimeError, match=r"^dlpx: empty: CUDA driver not found"):
        dlpx.empty(shape, "float32", device)


@needs_no_driver
def test_without_a_driver_empty_cache_does_nothing_as_torch_s_does():
    assert dlpx.cuda.empty_cache() is None
    if torch is not None and not torch.cuda.is_available():
        assert torch.cuda.empty_cache() is None


@needs_no_driver
@pytest.mark.parametrize("device", [0, 1, "cuda:0", "cuda:3"])
def test_without_a_driver_memory_stats_is_empty_as_torch_s_is(device):
    assert dlpx.cuda.memory_stats(device) == {}
    assert dlpx.cuda.memory_stats() == {}
    if torch is not None and not torch.cuda.is_available():
        assert dict(torch.cuda.memory_stats(device)) == dlpx.cuda.memory_stats(device)


@needs_no_driver
def test_without_a_driver_memory_stats_still_refuses_what_is_no_cuda_device():
    with pytest.raises(ValueError, match=r"^dlpx: memory_stats: expected a CUDA device"):
        dlpx.cuda.memory_stats("cpu")
    with pytest.raises(TypeError, match=r"^dlpx: memory_stats: expected a device index"):
        dlpx.cuda.memory_stats(1.5)


@needs_no_driver
def test_without_a_driver_the_allocator_calls_set_error_once():
    calls = []

    @ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)
    def set_error(ctx, kind, message):
        calls.append((kind.decode(), message.decode()))

    table = abi.exchange_table(dlpx.Tensor)
    proto = abi.prototype((8,), device=(2, 0))
    out = ctypes.c_void_p()
    allocate = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
        ctypes.cast(table.managed_tensor_allocator, ctypes.c_void_p).value
    )
    assert allocate(ctypes.addressof(proto), ctypes.addressof(out), None, ctypes.cast(set_error, ctypes.c_void_p).value) == -1
    assert out.value is None
    assert calls == [("RuntimeError", "dlpx: allocator: CUDA driver not found (libcuda.so could not be loaded)")]


@pytest.mark.parametrize("device", ["cuda:-1", "cuda_host:1", "cuda_managed:2"])
def test_invalid_cuda_device_ids_are_value_errors(device):
    with pytest.raises(ValueError, match=r"^dlpx: "):
        dlpx.empty((2,), "float32", device)


# ---- with a GPU ------------------------------------------------------------------------------


@needs_gpu
@pytest.mark.parametrize("device", ["cuda:0", "cuda_host", "cuda_managed"])
def test_allocation_of_each_kind(device):
    t = dlpx.empty((3, 5), "float32", device)
    assert t.device == device.split(":")[0] + ":0"
    assert t.data_ptr % 256 == 0
    assert t.strides == (5, 1)
    assert dlpx.empty((0, 5), "float32", device).data_ptr == 0


@needs_gpu
def test_an_invalid_device_id_names_the_device_count():
    n = torch.cuda.device_count()
    with pytest.raises(ValueError, match=f"this machine has {n} CUDA device"):
        dlpx.empty((2,), "float32", f"cuda:{n}")


@needs_gpu
def test_out_of_memory_is_a_memory_error_with_the_size():
    with pytest.raises(MemoryError, match="out of memory allocating"):
        dlpx.empty((1 << 50,), "uint8", "cuda:0")


@needs_gpu
def test_deleters_run_on_another_thread():
    tensors = [dlpx.empty((1024,), "float32", "cuda:0") for _ in range(8)]
    worker = threading.Thread(target=tensors.clear)
    worker.start()
    worker.join()
    torch.cuda.synchronize()


@needs_gpu
def test_current_work_stream_is_the_stream_set_from_torch():
    s = torch.cuda.Stream()
    out = ctypes.c_void_p()
    with dlpx.cuda.stream(s):
        assert CURRENT_WORK_STREAM(2, 0, ctypes.byref(out)) == 0
        assert out.value == s.cuda_stream


@needs_gpu
def test_zero_copy_round_trip_with_torch_on_cuda():
    x = torch.arange(10.0, device="cuda")
    d = dlpx.from_dlpack(x)
    assert d.device == "cuda:0" and d.data_ptr == x.data_ptr()
    y = torch.from_dlpack(d)
    y[0] = 42
    assert x[0].item() == 42


@needs_gpu
def test_an_export_orders_the_consumer_stream_after_dlpx_s():
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(producer), dlpx.cuda.stream(producer):
        t = dlpx.empty((1 << 20,), "float32", "cuda:0")
        torch.cuda._sleep(10**8)  # keeps the producer busy: a missing wait would read early
        torch.from_dlpack(t).fill_(7.0)  # enqueued on the producer stream
        capsule = t.__dlpack__(stream=consumer.cuda_stream, max_version=(1, 3))
    with torch.cuda.stream(consumer):
        seen = torch.from_dlpack(capsule)
        total = seen.sum()
    consumer.synchronize()
    assert total.item() == 7.0 * (1 << 20)


@needs_gpu
def test_a_cuda_tensor_copies_to_cpu():
    x = torch.arange(6.0, device="cuda").reshape(2, 3)
    d = dlpx.from_dlpack(x)
    host = dlpx.from_dlpack(d, device="cpu")
    assert host.device == "cpu:0"
    np.testing.assert_array_equal(np.from_dlpack(host), x.cpu().numpy())
    with pytest.raises(BufferError):
        dlpx.from_dlpack(d, device="cpu", copy=False)


@needs_gpu
@pytest.mark.skipif(cupy is None, reason="cupy is not installed")
def test_zero_copy_round_trip_with_cupy_on_cuda():
    x = cupy.arange(10, dtype=cupy.float32)
    d = dlpx.from_dlpack(x)
    assert d.device == "cuda:0" and d.data_ptr == x.data.ptr
    y = cupy.from_dlpack(d)
    y[0] = 42
    assert float(x[0]) == 42
    t = dlpx.empty((4,), "float32", "cuda:0")
    assert cupy.from_dlpack(t).data.ptr == t.data_ptr


@needs_gpu
def test_freed_memory_is_not_reused_while_a_recorded_consumer_stream_still_reads_it():
    n = 1 << 22
    consumer = torch.cuda.Stream()
    t = dlpx.empty((n,), "float32", "cuda:0")  # on the legacy default stream, torch's default
    torch.from_dlpack(t).fill_(1.0)
    capsule = t.__dlpack__(stream=consumer.cuda_stream, max_version=(1, 3))
    with torch.cuda.stream(consumer):
        x = torch.from_dlpack(capsule)
        torch.cuda._sleep(10**8)  # the consumer reads late
        total = x.sum()
    # A consumer's own stream may be destroyed at any time, so dlpx fences it only on request:
    # torch's streams live as long as the process.
    dlpx.cuda.record_stream(t, consumer)
    del t, x, capsule  # the last references go while the consumer's read is still queued
    u = dlpx.empty((n,), "float32", "cuda:0")  # the pool may hand the same memory back
    torch.from_dlpack(u).fill_(2.0)  # enqueued on the default stream: must wait for the read
    consumer.synchronize()
    assert total.item() == float(n)


@needs_gpu
def test_freed_memory_waits_for_a_consumer_on_the_legacy_stream():
    n = 1 << 22
    side = torch.cuda.Stream()  # non-blocking: nothing orders it after the legacy stream
    with dlpx.cuda.stream(side), torch.cuda.stream(side):
        t = dlpx.empty((n,), "float32", "cuda:0")  # allocated (and freed) on `side`
        torch.from_dlpack(t).fill_(1.0)
    capsule = t.__dlpack__(stream=1, max_version=(1, 3))  # a built-in stream: fenced at the release
    x = torch.from_dlpack(capsule)
    torch.cuda._sleep(10**8)  # torch's default stream (the legacy one) reads late
    total = x.sum()
    del t, x, capsule
    with dlpx.cuda.stream(side), torch.cuda.stream(side):
        u = dlpx.empty((n,), "float32", "cuda:0")
        torch.from_dlpack(u).fill_(2.0)  # on `side`: must wait for the read
    torch.cuda.synchronize()
    assert total.item() == float(n)


@needs_gpu
@needs_cupy
def test_a_consumer_may_destroy_its_stream_before_it_releases_the_import():
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        seen = cupy.from_dlpack(dlpx.empty((1 << 20,), "float32", "cuda:0"))  # named s
        seen.fill(1.0)
    del s  # cupy destroys the stream; its array still holds dlpx's export
    gc.collect()
    del seen  # dlpx must not touch the destroyed stream: the driver crashed on it (cuEventRecord)
    assert dlpx.empty((1 << 20,), "float32", "cuda:0").device == "cuda:0"


@needs_gpu
@needs_cupy
def test_pinned_blocks_are_reused_only_after_recorded_work():
    # torch 2.11 imports no kDLCUDAHost capsule ("Unsupported device_type: 3", seen on an H100), so
    # the asynchronous copy out of the pinned block is cupy's cudaMemcpyAsync on the raw pointer.
    p = dlpx.empty((1 << 20,), "float32", "cuda_host")
    address = p.data_ptr
    stream = torch.cuda.Stream()
    dst = torch.empty(1 << 20, device="cuda")
    with torch.cuda.stream(stream):
        torch.cuda._sleep(10**8)
    host_to_device = 1
    cupy.cuda.runtime.memcpyAsync(dst.data_ptr(), address, 4 << 20, host_to_device, stream.cuda_stream)
    assert not stream.query()  # the copy waits behind the sleep
    dlpx.cuda.record_stream(p, stream)
    del p
    q = dlpx.empty((1 << 20,), "float32", "cuda_host")
    assert q.data_ptr != address  # the copy is still queued
    other = q.data_ptr
    stream.synchronize()
    del q
    assert dlpx.empty((1 << 20,), "float32", "cuda_host").data_ptr in (address, other)  # reused now


@needs_gpu
def test_empty_cache_runs_on_a_gpu():
    dlpx.empty((1 << 20,), "float32", "cuda:0")
    dlpx.cuda.empty_cache()


# ---- what dlpx asks a CUDA producer for (no GPU needed: the producer only describes) ----------


def cuda_producer():
    return Producer(np.arange(4, dtype=np.float32), device=(2, 0))


def test_a_cuda_producer_is_asked_for_dlpx_s_current_stream():
    producer = cuda_producer()
    with dlpx.cuda.stream(0x5150, device=0):
        t = dlpx.from_dlpack(producer)
    assert t.device == "cuda:0"
    assert producer.calls[0]["stream"] == 0x5150


def test_without_a_current_stream_the_producer_assumes_the_default_stream():
    producer = cuda_producer()
    dlpx.from_dlpack(producer)
    assert "stream" not in producer.calls[0]  # None: the legacy default stream, dlpx's own


def test_a_cpu_producer_is_never_given_a_stream():
    producer = Producer(np.arange(4, dtype=np.float32))
    with dlpx.cuda.stream(0x5150, device=0):
        dlpx.from_dlpack(producer)
    assert "stream" not in producer.calls[0]


@pytest.mark.parametrize("name", ["cuda:01", "cuda:+1", "cuda:\u0663", "cuda:\u00b2", "cpu", "gpu:0"])
def test_a_device_name_dlpx_empty_refuses_is_refused_here_too(name):
    # dlpx.cuda read 'cuda:01' and an Arabic-Indic 3 as devices, and '\u00b2' raised int()'s error.
    with pytest.raises(ValueError, match=r"^dlpx: cuda\.current_stream: expected a CUDA device such as 'cuda:0'"):
        dlpx.cuda.current_stream(name)
    assert dlpx.cuda.current_stream("cuda") == dlpx.cuda.current_stream("cuda:0") == dlpx.cuda.current_stream(0)

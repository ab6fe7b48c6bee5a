"""dlpx's CUDA paths against the simulated driver (c_tests/sim_cuda): what dlpx asks of the
driver — contexts pushed and popped, memory from its pool on the right stream, frees ordered
after consumer streams, events instead of synchronisations — checked on machines without a GPU.

Not collected on its own: test_cuda_simulated.py runs this file in a subprocess whose
LD_LIBRARY_PATH puts the simulator first (it must be loaded before dlpx looks for libcuda),
twice: with the block cache (the default) and without it (DLPX_CUDA_CACHE_BYTES=0), where every
free goes to the driver. Tests that watch the driver's free itself run without the cache; the
cache's own ordering is sim_cuda_cache_cases.py's. The simulator's device memory is host memory,
so the tests read and write it directly; its "asynchronous" work completes at once, except on
streams a test holds.
"""

import ctypes
import os
import threading

import numpy as np
import pytest

import dlpx
from dlpx.conform import abi
from numpy_producers import CapsuleHolder

SIM = ctypes.CDLL(os.path.join(os.environ["DLPX_SIM_CUDA_DIR"], "libcuda.so"))
SIM.sim_cuda_calls.argtypes = [ctypes.c_char_p]
SIM.sim_cuda_calls.restype = ctypes.c_long
SIM.sim_cuda_fail.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
SIM.sim_cuda_live.argtypes = [ctypes.c_int, ctypes.c_int]
SIM.sim_cuda_live.restype = ctypes.c_long
SIM.sim_cuda_live_events.restype = ctypes.c_long
SIM.sim_cuda_unordered_reuses.restype = ctypes.c_long
SIM.sim_cuda_use.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
SIM.sim_cuda_stream_create.argtypes = [ctypes.c_int]
SIM.sim_cuda_stream_create.restype = ctypes.c_void_p
SIM.sim_cuda_stream_destroy.argtypes = [ctypes.c_void_p]
SIM.sim_cuda_hold.argtypes = [ctypes.c_void_p]
SIM.sim_cuda_release.argtypes = [ctypes.c_void_p]
SIM.sim_cuda_waits.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
SIM.sim_cuda_waits.restype = ctypes.c_long
SIM.sim_cuda_last_free_stream.restype = ctypes.c_void_p
SIM.sim_cuda_frees_waiting.restype = ctypes.c_long
SIM.sim_cuda_alloc_device.argtypes = [ctypes.c_void_p]
SIM.sim_cuda_alloc_stream.argtypes = [ctypes.c_void_p]
SIM.sim_cuda_alloc_stream.restype = ctypes.c_void_p
SIM.sim_cuda_alloc_pool.argtypes = [ctypes.c_void_p]
SIM.sim_cuda_alloc_pool.restype = ctypes.c_void_p
SIM.sim_cuda_pool_release_threshold.argtypes = [ctypes.c_void_p]
SIM.sim_cuda_pool_release_threshold.restype = ctypes.c_ulonglong
SIM.sim_cuda_misuses.restype = ctypes.c_long
SIM.sim_cuda_pool_access.argtypes = [ctypes.c_void_p, ctypes.c_int]
SIM.sim_cuda_set_capturing.argtypes = [ctypes.c_void_p, ctypes.c_int]

DLPX = ctypes.CDLL(dlpx.library_path())
DLPX.dlpx_record_stream.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p]
DLPX.dlpx_last_error.restype = ctypes.c_char_p

DEVICE, HOST, MANAGED = 0, 1, 2
LEGACY = 1
CACHE = os.environ.get("DLPX_CUDA_CACHE_BYTES") != "0"
watches_driver_frees = pytest.mark.skipif(
    CACHE, reason="watches the driver's free: runs with DLPX_CUDA_CACHE_BYTES=0 (the cache's are sim_cuda_cache_cases.py's)"
)


def calls(name):
    return SIM.sim_cuda_calls(name.encode())


@pytest.fixture(autouse=True)
def balanced_driver_state():
    """Every test: contexts popped, events destroyed, device memory freed (what the cache kept
    too, once empty_cache gives it back), no device-wide sync, no unordered reuse."""
    if CACHE:
        dlpx.cuda.empty_cache()  # each test starts with the driver's view: nothing cached
    SIM.sim_cuda_reset_counts()
    events = SIM.sim_cuda_live_events()
    device_memory = SIM.sim_cuda_live(DEVICE, -1)
    yield
    assert SIM.sim_cuda_context_depth() == 0
    assert calls("cuCtxSynchronize") == 0
    if CACHE:
        dlpx.cuda.empty_cache()
    assert SIM.sim_cuda_live_events() - events <= pinned_fences()
    assert SIM.sim_cuda_live(DEVICE, -1) == device_memory, "device memory leaked"
    assert SIM.sim_cuda_misuses() == 0, "dlpx misused the driver (see the sim_cuda: lines)"


def pinned_fences():
    """Events dlpx legitimately keeps: fences of cached pinned blocks (released by empty_cache)."""
    return 64


@pytest.fixture
def stream():
    handles = []

    def make(device=0):
        handles.append(SIM.sim_cuda_stream_create(device))
        return handles[-1]

    yield make
    for handle in handles:
        SIM.sim_cuda_release(handle)
        SIM.sim_cuda_stream_destroy(handle)


def fill(tensor, values):
    data = np.ascontiguousarray(values, dtype=np.float32)
    ctypes.memmove(tensor.data_ptr, data.ctypes.data, data.nbytes)


def read(tensor, n):
    out = np.empty(n, dtype=np.float32)
    ctypes.memmove(out.ctypes.data, tensor.data_ptr, out.nbytes)
    return out


# ---- allocation ------------------------------------------------------------------------------


def given_back():
    """What the driver holds after a free: the cache keeps the block until empty_cache."""
    if CACHE:
        dlpx.cuda.empty_cache()


@pytest.mark.parametrize("device, kind", [("cuda:0", DEVICE), ("cuda:1", DEVICE), ("cuda_managed", MANAGED)])
def test_allocation_lands_on_the_device_and_is_freed(device, kind):
    before = SIM.sim_cuda_live(kind, -1)
    t = dlpx.empty((3, 5), "float32", device)
    assert t.device == (device if ":" in device else device + ":0")
    assert t.strides == (5, 1)
    assert SIM.sim_cuda_live(kind, -1) == before + 1
    if kind == DEVICE:
        assert SIM.sim_cuda_alloc_device(ctypes.c_void_p(t.data_ptr)) == int(device[-1])
    del t
    given_back()
    assert SIM.sim_cuda_live(kind, -1) == before


@watches_driver_frees
def test_device_memory_comes_from_dlpx_s_pool_on_the_current_stream(stream):
    s = stream()
    with dlpx.cuda.stream(s):
        t = dlpx.empty((16,), "float32", "cuda:0")
    assert calls("cuMemAllocFromPoolAsync") == 1 and calls("cuMemAlloc_v2") == 0
    assert SIM.sim_cuda_alloc_stream(ctypes.c_void_p(t.data_ptr)) == s
    del t  # outside the block: still freed on the stream it was allocated on
    assert SIM.sim_cuda_last_free_stream() == s
    assert calls("cuMemFreeAsync") == 1


def test_each_device_has_a_dlpx_pool_that_keeps_freed_memory():
    a, b, c = (dlpx.empty((4,), "float32", d) for d in ("cuda:0", "cuda:0", "cuda:1"))
    pools = [SIM.sim_cuda_alloc_pool(ctypes.c_void_p(t.data_ptr)) for t in (a, b, c)]
    assert pools[0] and pools[0] == pools[1] and pools[2] not in (None, pools[0])
    # the default pool's threshold is 0: memory would go back to the driver at every sync
    assert all(SIM.sim_cuda_pool_release_threshold(p) == 2**64 - 1 for p in pools)
    # pool memory ignores cuCtxEnablePeerAccess: peers are granted access to it explicitly
    assert SIM.sim_cuda_pool_access(pools[0], 1) == 3 and SIM.sim_cuda_pool_access(pools[2], 0) == 3


@watches_driver_frees
def test_deleters_run_on_another_thread_on_the_allocation_stream(stream):
    s = stream()
    with dlpx.cuda.stream(s):
        tensors = [dlpx.empty((64,), "float32", "cuda:0") for _ in range(8)]
    depth = []

    def drop():
        tensors.clear()
        depth.append(SIM.sim_cuda_context_depth())

    worker = threading.Thread(target=drop)
    worker.start()
    worker.join()
    assert depth == [0]
    assert calls("cuMemFreeAsync") == 8 and SIM.sim_cuda_last_free_stream() == s


@watches_driver_frees
def test_per_thread_default_stream_memory_is_freed_on_the_legacy_stream():
    with dlpx.cuda.stream(2):
        t = dlpx.empty((4,), "float32", "cuda:0")
    del t
    assert SIM.sim_cuda_last_free_stream() == LEGACY


def test_a_free_during_graph_capture_waits_for_the_capture_to_end(stream):
    s = stream()
    with dlpx.cuda.stream(s):
        t = dlpx.empty((16,), "float32", "cuda:0")
    SIM.sim_cuda_set_capturing(s, 1)  # e.g. torch.cuda.graph capturing on s
    frees = calls("cuMemFreeAsync")
    del t  # freed now, the free would be a node of the graph, run at every replay
    assert calls("cuMemFreeAsync") == frees
    dlpx.cuda.empty_cache()  # still capturing: still put off
    assert calls("cuMemFreeAsync") == frees
    SIM.sim_cuda_set_capturing(s, 0)
    dlpx.cuda.empty_cache()  # as the device's next allocation or free would, frees what was put off
    assert calls("cuMemFreeAsync") == frees + 1 and SIM.sim_cuda_last_free_stream() == s


def test_zero_size_tensors_take_no_memory_but_check_the_device():
    t = dlpx.empty((0, 4), "float32", "cuda:1")
    assert t.data_ptr == 0
    assert calls("cuMemAllocFromPoolAsync") == 0
    with pytest.raises(ValueError, match=r"device cuda:2 does not exist: this machine has 2 CUDA device\(s\)"):
        dlpx.empty((0,), "float32", "cuda:2")


def test_an_invalid_device_id_names_the_device_count():
    with pytest.raises(ValueError, match=r"^dlpx: empty: device cuda:7 does not exist: this machine has 2 CUDA device\(s\)$"):
        dlpx.empty((2,), "float32", "cuda:7")


def test_out_of_memory_is_a_memory_error_with_the_size():
    with pytest.raises(MemoryError, match=r"^dlpx: empty: out of memory allocating 4398046511104 bytes on CUDA device 1$"):
        dlpx.empty((1 << 40,), "float32", "cuda:1")


@pytest.mark.parametrize(
    "code, text",
    [(1, r"cuMemAllocFromPoolAsync|CUDA allocation failed: CUDA_ERROR_INVALID_VALUE \(1\)"),
     (987654, r"CUDA error 987654 \(unknown to this driver\)")],
)
def test_driver_errors_are_runtime_errors_with_the_driver_s_name(code, text):
    SIM.sim_cuda_fail(b"cuMemAllocFromPoolAsync", code, 1)
    with pytest.raises(RuntimeError, match=text):
        dlpx.empty((4,), "float32", "cuda:0")
    dlpx.empty((4,), "float32", "cuda:0")  # the next call works


def test_a_failing_context_push_is_reported_and_leaves_nothing_pushed():
    SIM.sim_cuda_fail(b"cuCtxPushCurrent_v2", 201, 1)
    with pytest.raises(RuntimeError, match="cuCtxPushCurrent failed: CUDA_ERROR_INVALID_CONTEXT"):
        dlpx.empty((4,), "float32", "cuda:0")


# ---- pinned host memory ----------------------------------------------------------------------


def test_pinned_blocks_are_reused():
    first = dlpx.empty((1000,), "float32", "cuda_host")
    address = first.data_ptr
    del first
    allocations = calls("cuMemHostAlloc")
    second = dlpx.empty((900,), "float32", "cuda_host")  # the same 4 KiB capacity
    assert second.data_ptr == address
    assert calls("cuMemHostAlloc") == allocations


def assert_pinned_reuse_waits_for(busy_stream, numel, record=False):
    """A pinned block freed while `busy_stream` still works on it is not handed out again until
    that work is done."""
    first = dlpx.empty((numel,), "float32", "cuda_host")
    address = first.data_ptr
    if record:
        dlpx.cuda.record_stream(first, busy_stream, device=0)
    SIM.sim_cuda_hold(busy_stream)
    del first
    second = dlpx.empty((numel,), "float32", "cuda_host")
    assert second.data_ptr != address
    SIM.sim_cuda_release(busy_stream)
    third = dlpx.empty((numel,), "float32", "cuda_host")
    assert third.data_ptr == address


def test_a_pinned_block_is_not_reused_before_the_work_recorded_on_it_is_done(stream):
    # an asynchronous copy from the block, on a stream dlpx is told of, is still running
    assert_pinned_reuse_waits_for(stream(), 5000, record=True)


def test_a_pinned_block_whose_reader_cannot_be_fenced_waits_for_its_device(stream):
    # The context push for the fence on the reading stream failed: the block was cached unfenced,
    # reused at once and written under the read, and nothing was reported.
    reader, writer = stream(), stream()
    first = dlpx.empty((5000,), "float32", "cuda_host")
    address = first.data_ptr
    dlpx.cuda.record_stream(first, reader, device=0)
    assert SIM.sim_cuda_use(ctypes.c_void_p(reader), ctypes.c_void_p(address), 20000, 0) == 0
    SIM.sim_cuda_fail(b"cuCtxPushCurrent_v2", 201, 1)
    unordered = SIM.sim_cuda_unordered_reuses()
    del first  # the deleter reports what it could not do, and waits for the device instead
    assert calls("cuCtxSynchronize") == 1
    second = dlpx.empty((5000,), "float32", "cuda_host")
    assert SIM.sim_cuda_use(ctypes.c_void_p(writer), ctypes.c_void_p(second.data_ptr), 20000, 1) == 0
    assert SIM.sim_cuda_unordered_reuses() == unordered
    SIM.sim_cuda_reset_counts()  # the one synchronisation was this test's point


def test_empty_cache_gives_finished_pinned_blocks_back():
    t = dlpx.empty((3000,), "float32", "cuda_host")
    del t
    assert SIM.sim_cuda_live(HOST, -1) >= 1
    dlpx.cuda.empty_cache()
    assert SIM.sim_cuda_live(HOST, -1) == 0
    assert calls("cuMemPoolTrimTo") >= 1


# ---- exports: __dlpack__(stream=...) ---------------------------------------------------------


def test_the_consumer_stream_waits_on_an_event_from_dlpx_s_stream(stream):
    producer, consumer = stream(), stream()
    with dlpx.cuda.stream(producer):
        t = dlpx.empty((16,), "float32", "cuda:0")
        capsule = t.__dlpack__(stream=consumer, max_version=(1, 3))
    assert SIM.sim_cuda_waits(consumer, producer) == 1
    assert calls("cuStreamSynchronize") == 0
    del capsule


def test_ordering_events_come_from_a_pool(stream):
    consumer = stream()
    t = dlpx.empty((16,), "float32", "cuda:0")
    for _ in range(10):
        t.__dlpack__(stream=consumer, max_version=(1, 3))  # released at once: no fence there
    # 10 orderings, one pooled event recorded again each time
    assert calls("cuEventRecord") == 10 and calls("cuStreamWaitEvent") == 10
    assert calls("cuEventCreate") <= 1 and calls("cuEventDestroy_v2") == 0


@pytest.mark.parametrize("request_, waits", [(None, 0), (1, 0), (-1, 0)])
def test_the_legacy_stream_and_no_sync_need_no_wait(request_, waits):
    t = dlpx.empty((16,), "float32", "cuda:0")
    t.__dlpack__(stream=request_, max_version=(1, 3))
    assert calls("cuStreamWaitEvent") == waits


def test_the_per_thread_default_stream_waits_on_the_legacy_stream():
    t = dlpx.empty((16,), "float32", "cuda:0")
    t.__dlpack__(stream=2, max_version=(1, 3))
    assert SIM.sim_cuda_waits(2, LEGACY) == 1


def test_stream_zero_is_refused():
    t = dlpx.empty((16,), "float32", "cuda:0")
    with pytest.raises(ValueError, match="stream=0 is ambiguous"):
        t.__dlpack__(stream=0)


@watches_driver_frees
def test_record_stream_through_an_export_reaches_the_allocation(stream):
    consumer = stream()
    t = dlpx.empty((16,), "float32", "cuda:0")
    capsule = t.__dlpack__(max_version=(1, 3))  # what a C consumer holds: an export, not the block
    assert DLPX.dlpx_record_stream(abi.capsule_pointer(capsule), 0, consumer) == 0
    del t, capsule
    assert SIM.sim_cuda_waits(LEGACY, consumer) == 1


@watches_driver_frees
def test_a_per_thread_default_stream_use_is_waited_for_through_the_legacy_stream(stream):
    allocated_on = stream()
    with dlpx.cuda.stream(allocated_on):
        t = dlpx.empty((16,), "float32", "cuda:0")
    t.__dlpack__(stream=2, max_version=(1, 3))
    # the deleter may run on another thread, whose 0x2 is another stream: the legacy stream
    # waits for every thread's per-thread stream
    worker = threading.Thread(target=lambda: None)
    worker.start()
    worker.join()
    del t
    assert SIM.sim_cuda_waits(allocated_on, LEGACY) == 1
    assert SIM.sim_cuda_waits(allocated_on, 2) == 0


@pytest.mark.parametrize("destroyed", ["after the release", "before the release"])
def test_a_consumer_s_own_stream_is_not_used_after_the_call_that_named_it(destroyed):
    # The consumer owns its stream and may destroy it while the export lives (cupy does, when
    # its Stream object is collected before the array). A real driver does not refuse the stale
    # handle: cuEventRecord on it crashed (driver 580, H100). So no fence is recorded there at
    # the release, and the simulator's misuse count (the fixture) must stay 0.
    consumer = SIM.sim_cuda_stream_create(0)
    before = SIM.sim_cuda_live(DEVICE, -1)
    t = dlpx.empty((16,), "float32", "cuda:0")
    capsule = t.__dlpack__(stream=consumer, max_version=(1, 3))
    assert SIM.sim_cuda_waits(consumer, LEGACY) == 1  # ordered after dlpx's work, at the call
    if destroyed == "before the release":
        SIM.sim_cuda_stream_destroy(consumer)
    del capsule
    if destroyed == "after the release":
        SIM.sim_cuda_stream_destroy(consumer)
    del t
    given_back()
    assert SIM.sim_cuda_live(DEVICE, -1) == before
    assert SIM.sim_cuda_waits(LEGACY, consumer) == 0 and calls("cuCtxSynchronize") == 0


@watches_driver_frees
def test_a_built_in_consumer_stream_still_fences_the_free(stream):
    allocated_on = stream()
    with dlpx.cuda.stream(allocated_on):
        t = dlpx.empty((16,), "float32", "cuda:0")
    capsule = t.__dlpack__(stream=1, max_version=(1, 3))  # the legacy stream: no one destroys it
    del capsule, t  # the consumer's work on it may still be running
    assert SIM.sim_cuda_frees_waiting() == 1
    assert SIM.sim_cuda_waits(allocated_on, LEGACY) == 1


@watches_driver_frees
def test_a_peer_device_s_stream_is_waited_for_before_the_free(stream):
    peer_stream = stream(1)
    t = dlpx.empty((16,), "float32", "cuda:0")
    dlpx.cuda.record_stream(t, peer_stream, device=1)  # a kernel on cuda:1 reads it (peer access)
    del t
    assert SIM.sim_cuda_waits(LEGACY, peer_stream) == 1


def test_a_pinned_block_is_fenced_on_the_legacy_stream_without_recorded_uses():
    dlpx.empty((1,), "float32", "cuda:0")  # a device in use
    # e.g. torch copies from it on its default stream, telling no one
    assert_pinned_reuse_waits_for(LEGACY, 6000)


@watches_driver_frees
def test_a_kernel_on_dlpx_s_current_stream_is_waited_for_before_the_free(stream):
    allocated_on, kernel_stream = stream(), stream()
    with dlpx.cuda.stream(allocated_on):
        t = dlpx.empty((16,), "float32", "cuda:0")
    view = abi.DLTensor()
    table = abi.exchange_table(dlpx.Tensor)
    with dlpx.cuda.stream(kernel_stream):
        assert abi.DLTensorFromPyObject(table.dltensor_from_py_object_no_sync)(t, ctypes.byref(view)) == 0
    del t
    assert SIM.sim_cuda_waits(allocated_on, kernel_stream) == 1
    assert SIM.sim_cuda_last_free_stream() == allocated_on


def test_a_copy_to_the_host_reads_the_device_data(stream):
    t = dlpx.empty((2, 3), "float32", "cuda:0")
    fill(t, np.arange(6))
    host = dlpx.from_dlpack(t, device="cpu")
    assert host.device == "cpu:0"
    np.testing.assert_array_equal(np.from_dlpack(host), np.arange(6, dtype=np.float32).reshape(2, 3))
    assert calls("cuMemcpyDtoHAsync_v2") == 1 and calls("cuStreamSynchronize") == 1
    with pytest.raises(BufferError, match="copy=False forbids it"):
        dlpx.from_dlpack(t, device="cpu", copy=False)


def test_copy_true_copies_on_the_device_and_says_so():
    t = dlpx.empty((4,), "float32", "cuda:0")
    fill(t, [1, 2, 3, 4])
    info = abi.read_capsule(t.__dlpack__(max_version=(1, 3), copy=True))
    assert info["flags"] & abi.FLAG_IS_COPIED
    assert info["data"] != t.data_ptr and info["device"] == (2, 0)
    assert calls("cuMemcpyDtoDAsync_v2") == 1
    copied = dlpx.from_dlpack(CapsuleHolder(t.__dlpack__(max_version=(1, 3), copy=True), device=(2, 0)))
    np.testing.assert_array_equal(read(copied, 4), [1, 2, 3, 4])


def test_a_failing_event_record_is_an_error_and_leaks_nothing(stream):
    consumer = stream()
    t = dlpx.empty((4,), "float32", "cuda:0")
    SIM.sim_cuda_fail(b"cuEventRecord", 400, 1)
    with pytest.raises(RuntimeError, match="cuEventRecord failed: CUDA_ERROR_INVALID_HANDLE"):
        t.__dlpack__(stream=consumer, max_version=(1, 3))


# ---- imports: the producer is asked for dlpx's stream ----------------------------------------

CURRENT_WORK_STREAM = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))


def foreign_table_type(producer_stream):
    """A type whose objects are read through an exchange table of another framework: dlpx's own
    entries, but a `current_work_stream` that names `producer_stream` (as torch's names its
    current stream). Its entries do not synchronise, as no table's do."""
    own = abi.exchange_table(dlpx.Tensor)
    table = abi.DLPackExchangeAPI()
    ctypes.pointer(table)[0] = own
    table.header.prev_api = None

    @CURRENT_WORK_STREAM
    def current_work_stream(device_type, device_id, out):
        out[0] = producer_stream
        return 0

    table.current_work_stream = ctypes.cast(current_work_stream, ctypes.c_void_p).value
    capsule = ctypes.pythonapi.PyCapsule_New
    capsule.restype, capsule.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    published = type("Foreign", (dlpx.Tensor,), {"__dlpack_c_exchange_api__": capsule(ctypes.addressof(table), b"dlpack_exchange_api", None)})
    published._keep = (table, current_work_stream)  # the table and its callback live with the type
    return published


def test_a_table_s_tensor_is_read_after_the_table_s_current_work_stream(stream):
    # Found on an H200 (scripts/gpu_check.sh's interop matrix): torch's table hands its tensor
    # over without synchronising, so dlpx's stream must wait for torch's current stream before it
    # uses the data; a copy to the host read zeros the producer's stream had not yet overwritten.
    producer_stream, mine = stream(), stream()
    foreign = foreign_table_type(producer_stream)(dlpx.empty((8,), "float32", "cuda:0"))
    assert dlpx._native._row_of(type(foreign)) == "table"
    with dlpx.cuda.stream(mine):
        imported = dlpx.from_dlpack(foreign)
    assert imported.data_ptr == foreign.data_ptr
    assert SIM.sim_cuda_waits(mine, producer_stream) == 1


def test_an_import_orders_dlpx_s_stream_after_the_exchange_table_s(stream):
    producer_stream, mine = stream(), stream()
    with dlpx.cuda.stream(producer_stream):
        source = dlpx.empty((8,), "float32", "cuda:0")
    # dlpx imports its own tensors through its own table, whose current_work_stream is the
    # thread's current stream: the same stream, nothing to wait for.
    with dlpx.cuda.stream(mine):
        imported = dlpx.from_dlpack(source)
    assert imported.data_ptr == source.data_ptr

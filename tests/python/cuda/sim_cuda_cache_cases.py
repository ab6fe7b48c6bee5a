"""dlpx's CUDA block cache from Python, against the simulated driver's stream timeline
(c_tests/sim_cuda: sim_cuda_use enqueues a "kernel" that reads or writes a range; every reuse of
memory not ordered after its previous user's work is counted by sim_cuda_unordered_reuses):
reuse on the allocation stream, blocks used elsewhere held back until their events complete,
exports fenced on built-in consumer streams, the per-thread default stream, graph capture,
memory_stats, and a randomized run of threads doing all of it at once (free-threaded CPython
runs it in parallel).

Not collected on its own: test_cuda_simulated.py runs it in a subprocess with the simulator
first on the library path.
"""

import ctypes
import os
import random
import threading

import pytest

import dlpx
from dlpx.conform import abi

SIM = ctypes.CDLL(os.path.join(os.environ["DLPX_SIM_CUDA_DIR"], "libcuda.so"))
SIM.sim_cuda_calls.argtypes = [ctypes.c_char_p]
SIM.sim_cuda_calls.restype = ctypes.c_long
SIM.sim_cuda_live.argtypes = [ctypes.c_int, ctypes.c_int]
SIM.sim_cuda_live.restype = ctypes.c_long
SIM.sim_cuda_misuses.restype = ctypes.c_long
SIM.sim_cuda_unordered_reuses.restype = ctypes.c_long
for name in ("sim_cuda_stream_create", "sim_cuda_stream_create_nonblocking"):
    getattr(SIM, name).argtypes = [ctypes.c_int]
    getattr(SIM, name).restype = ctypes.c_void_p
for name in ("sim_cuda_stream_destroy", "sim_cuda_hold", "sim_cuda_release"):
    getattr(SIM, name).argtypes = [ctypes.c_void_p]
SIM.sim_cuda_use.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
SIM.sim_cuda_alloc_captured.argtypes = [ctypes.c_void_p]
SIM.sim_cuda_set_capturing.argtypes = [ctypes.c_void_p, ctypes.c_int]
SIM.sim_cuda_fail.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
SIM.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
SIM.cuCtxPushCurrent_v2.argtypes = [ctypes.c_void_p]
SIM.cuCtxPopCurrent_v2.argtypes = [ctypes.c_void_p]
SIM.cuEventCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
SIM.cuEventRecord.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
SIM.cuStreamWaitEvent.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]
SIM.cuEventDestroy_v2.argtypes = [ctypes.c_void_p]

DEVICE = 0
LEGACY, PER_THREAD = 1, 2


def calls(name):
    return SIM.sim_cuda_calls(name.encode())


def nbytes(t):
    return 4 * t.shape[0]


def use(stream, t, write=False):
    """A kernel on `stream` reading (or writing) all of `t`."""
    assert SIM.sim_cuda_use(stream, t.data_ptr, nbytes(t), int(write)) == 0


@pytest.mark.parametrize("copy", ["from_dlpack(copy=True)", "__dlpack__(copy=True)"])
def test_a_device_copy_on_another_stream_is_a_use_of_its_source(streams, copy):
    # dlpx's copy reads the source on its current stream, T, after the test ordered T after the
    # source's stream S; T is held. The source's block must not return to S's bin before the copy
    # is done: the next block on S is another (the simulator catches a reuse otherwise).
    order = Ordering()
    s, t_stream = streams(), streams()
    with dlpx.cuda.stream(s):
        t = dlpx.empty((1024,), "float32", "cuda:0")
        use(s, t, write=True)
    address = t.data_ptr
    order.after(s, t_stream)
    SIM.sim_cuda_hold(t_stream)
    with dlpx.cuda.stream(t_stream):
        copied = dlpx.from_dlpack(t, copy=True) if copy.startswith("from") else t.__dlpack__(copy=True, max_version=(1, 3))
    del t
    with dlpx.cuda.stream(s):
        u = dlpx.empty((1024,), "float32", "cuda:0")
        assert u.data_ptr != address, "not while the copy may still read it"
        use(s, u, write=True)
    SIM.sim_cuda_release(t_stream)
    del copied
    order.close()


def test_running_out_during_a_capture_neither_waits_for_the_device_nor_frees_cached_blocks(streams):
    # Out of device memory while a stream is captured: cached blocks go back to the driver only by
    # work on the legacy stream, and the retry after them waits for the whole device; either breaks
    # the capture (torch releases no cached block then either). The pool's unused memory is trimmed
    # and the request refused.
    s, other = streams(), streams()
    with dlpx.cuda.stream(other):
        cached = [dlpx.empty((1 << 18,), "float32", "cuda:0") for _ in range(3)]
        for t in cached:
            use(other, t, write=True)
        del cached, t
    SIM.sim_cuda_set_capturing(s, 1)
    SIM.sim_cuda_reset_counts()
    SIM.sim_cuda_fail(b"cuMemAllocFromPoolAsync", 2, 100)  # CUDA_ERROR_OUT_OF_MEMORY
    try:
        with dlpx.cuda.stream(s), pytest.raises(MemoryError):
            dlpx.empty((1 << 19,), "float32", "cuda:0")
        assert calls("cuCtxSynchronize") == 0 and calls("cuMemFreeAsync") == 0
        assert calls("cuMemPoolTrimTo") >= 1
    finally:
        SIM.sim_cuda_fail(b"cuMemAllocFromPoolAsync", 0, 0)
        SIM.sim_cuda_set_capturing(s, 0)
    # Out of it, the same request gives the cached blocks back and succeeds.
    with dlpx.cuda.stream(s):
        SIM.sim_cuda_fail(b"cuMemAllocFromPoolAsync", 2, 1)
        after = dlpx.empty((1 << 19,), "float32", "cuda:0")
        use(s, after, write=True)


class Ordering:
    """The test's own ordering between its streams: `after(producer, consumer)` makes the
    consumer wait for the producer's work so far (an event, in the producer's device's context)."""

    def __init__(self):
        self.contexts, self.events = [], []
        for device in (0, 1):
            ctx, event = ctypes.c_void_p(), ctypes.c_void_p()
            assert SIM.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device) == 0
            assert SIM.cuCtxPushCurrent_v2(ctx) == 0
            assert SIM.cuEventCreate(ctypes.byref(event), 2) == 0
            assert SIM.cuCtxPopCurrent_v2(None) == 0
            self.contexts.append(ctx)
            self.events.append(event)

    def after(self, producer, consumer, device=0):
        if producer == consumer:
            return
        assert SIM.cuCtxPushCurrent_v2(self.contexts[device]) == 0
        assert SIM.cuEventRecord(self.events[device], producer) == 0
        assert SIM.cuStreamWaitEvent(consumer, self.events[device], 0) == 0
        assert SIM.cuCtxPopCurrent_v2(None) == 0

    def close(self):
        for event in self.events:
            SIM.cuEventDestroy_v2(event)


@pytest.fixture(autouse=True)
def ordered_and_balanced():
    """Every test: no unordered reuse, no driver misuse, every block back after empty_cache."""
    dlpx.cuda.empty_cache()
    SIM.sim_cuda_reset_counts()
    device_memory = SIM.sim_cuda_live(0, -1)
    yield
    dlpx.cuda.empty_cache()
    assert SIM.sim_cuda_unordered_reuses() == 0, "memory reused before its user's work was ordered (sim_cuda: lines)"
    assert SIM.sim_cuda_misuses() == 0, "dlpx misused the driver (see the sim_cuda: lines)"
    assert SIM.sim_cuda_live(0, -1) == device_memory, "device memory left behind"


@pytest.fixture
def streams():
    made = []

    def make(device=0, blocking=False):
        made.append((SIM.sim_cuda_stream_create if blocking else SIM.sim_cuda_stream_create_nonblocking)(device))
        return made[-1]

    yield make
    for s in made:
        SIM.sim_cuda_release(s)
    dlpx.cuda.empty_cache()
    for s in made:
        SIM.sim_cuda_stream_destroy(s)


def test_steady_state_allocation_makes_no_driver_allocation():
    dlpx.empty((16,), "float32", "cuda:0")  # the first one asks the driver
    SIM.sim_cuda_reset_counts()
    for _ in range(1000):
        t = dlpx.empty((16,), "float32", "cuda:0")
        use(LEGACY, t, write=True)
        del t
    assert calls("cuMemAllocFromPoolAsync") == 0 and calls("cuMemFreeAsync") == 0
    assert calls("cuCtxPushCurrent_v2") == 0 and calls("cuStreamIsCapturing") == 0


def test_a_block_is_reused_on_its_stream_at_once_and_not_on_another(streams):
    s, other = streams(), streams()
    with dlpx.cuda.stream(s):
        t = dlpx.empty((100,), "float32", "cuda:0")
        use(s, t, write=True)
        address = t.data_ptr
        del t
        again = dlpx.empty((100,), "float32", "cuda:0")
    assert again.data_ptr == address
    with dlpx.cuda.stream(other):
        elsewhere = dlpx.empty((100,), "float32", "cuda:0")
    assert elsewhere.data_ptr != address
    use(s, again, write=True)
    use(other, elsewhere, write=True)


@pytest.mark.parametrize("consumer_kind", ["record_stream", "export to the legacy stream", "peer device"])
def test_a_block_used_elsewhere_waits_for_its_event(streams, consumer_kind):
    order = Ordering()
    s = streams()
    consumer = streams(1) if consumer_kind == "peer device" else LEGACY if "legacy" in consumer_kind else streams()
    with dlpx.cuda.stream(s):
        t = dlpx.empty((1000,), "float32", "cuda:0")
        use(s, t, write=True)
    address = t.data_ptr
    if consumer_kind == "export to the legacy stream":
        with dlpx.cuda.stream(s):
            capsule = t.__dlpack__(stream=LEGACY, max_version=(1, 3))  # the legacy stream waits for s
        use(LEGACY, t)
        SIM.sim_cuda_hold(LEGACY)  # the consumer's kernel still runs when it releases the export
        del capsule  # a fence on the legacy stream (no one can destroy it)
    else:
        order.after(s, consumer, device=0)
        use(consumer, t, write=True)
        dlpx.cuda.record_stream(t, consumer, device=1 if consumer_kind == "peer device" else 0)
        SIM.sim_cuda_hold(consumer)
    del t
    assert dlpx.cuda.memory_stats(0)["fenced_blocks.all.current"] == 1
    with dlpx.cuda.stream(s):
        second = dlpx.empty((1000,), "float32", "cuda:0")
        assert second.data_ptr != address, "not while the consumer's work runs"
        use(s, second, write=True)
        SIM.sim_cuda_release(consumer)
        third = dlpx.empty((1000,), "float32", "cuda:0")
        assert third.data_ptr == address, "once the event completed"
        use(s, third, write=True)
    assert dlpx.cuda.memory_stats(0)["num_fenced_frees"] >= 1
    order.close()


class Table:
    """dlpx's exchange-table allocator and deleters, as a C caller uses them: the deleter runs
    on the calling thread (a Python object's may run on its owner's, free-threaded)."""

    def __init__(self):
        table = abi.exchange_table(dlpx.Tensor)
        self.allocate = abi.Allocator(table.managed_tensor_allocator)

    def empty(self, n):
        proto, out = abi.prototype((n,), device=(2, 0)), ctypes.c_void_p()
        where = ctypes.cast(ctypes.byref(out), ctypes.POINTER(ctypes.c_void_p))
        assert self.allocate(ctypes.byref(proto), where, None, abi.SetError()) == 0
        return out.value, abi.managed_at(out.value).dl_tensor.data

    @staticmethod
    def delete(address):
        abi.Deleter(ctypes.cast(abi.managed_at(address).deleter, ctypes.c_void_p).value)(address)


def test_another_thread_s_default_stream_block_is_reused_on_the_legacy_stream_only():
    table = Table()
    with dlpx.cuda.stream(PER_THREAD):
        tensor, address = table.empty(64)
    assert SIM.sim_cuda_use(PER_THREAD, address, 256, 1) == 0
    seen = []

    def elsewhere():
        table.delete(tensor)  # this thread's default stream is not the one the block was used on
        with dlpx.cuda.stream(PER_THREAD):
            mine = table.empty(64)
        legacy = table.empty(64)  # the legacy stream waits for every default stream
        seen.extend([mine[1], legacy[1]])
        assert SIM.sim_cuda_use(PER_THREAD, mine[1], 256, 1) == 0
        assert SIM.sim_cuda_use(LEGACY, legacy[1], 256, 1) == 0
        table.delete(mine[0])
        table.delete(legacy[0])

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert seen[0] != address and seen[1] == address


def test_memory_allocated_during_a_capture_is_the_graph_s(streams):
    s = streams()
    with dlpx.cuda.stream(s):
        before = dlpx.empty((256,), "float32", "cuda:0")
        cached_address = before.data_ptr
        del before
        SIM.sim_cuda_set_capturing(s, 1)
        inside = dlpx.empty((256,), "float32", "cuda:0")
        assert inside.data_ptr != cached_address and SIM.sim_cuda_alloc_captured(inside.data_ptr) == 1
        del inside  # put off until the capture ends
        dlpx.cuda.empty_cache()  # a capture dlpx knows of is underway: nothing is synchronised
        assert calls("cuCtxSynchronize") == 0
        SIM.sim_cuda_set_capturing(s, 0)
        after = dlpx.empty((256,), "float32", "cuda:0")
        assert after.data_ptr == cached_address and SIM.sim_cuda_alloc_captured(after.data_ptr) == 0


def test_a_free_put_off_during_a_capture_names_its_stream_only_where_its_owner_vouches(streams):
    # Put off during a capture of s, a free is freed when s is vouched for again: an allocation
    # on s, the free of a tensor allocated on it, or empty_cache (docs/cuda.md, "Streams that
    # die"). An allocation on another stream does not ask s whether it is still captured: s may
    # be destroyed by then, and the real driver crashes on its handle.
    s = streams()
    SIM.sim_cuda_set_capturing(s, 1)
    with dlpx.cuda.stream(s):
        inside = dlpx.empty((300,), "float32", "cuda:0")  # the graph's
        del inside  # put off until the capture ends
    SIM.sim_cuda_set_capturing(s, 0)
    live = SIM.sim_cuda_live(0, -1)
    SIM.sim_cuda_reset_counts()
    elsewhere = dlpx.empty((1 << 20,), "float32", "cuda:0")  # the legacy stream: a trip to the driver
    use(LEGACY, elsewhere, write=True)
    assert calls("cuStreamIsCapturing") == 0, "s was named by an allocation on another stream"
    assert SIM.sim_cuda_live(0, -1) == live + 1, "the put-off free waits for s's owner"
    with dlpx.cuda.stream(s):
        again = dlpx.empty((1 << 21,), "float32", "cuda:0")  # on s: vouched for, the free is made
        use(s, again, write=True)
    assert SIM.sim_cuda_live(0, -1) == live + 1, "one freed, one allocated"


def test_a_current_stream_of_another_device_is_named_when_it_fails_an_allocation(streams):
    # A stream made on cuda:1 set as cuda:0's current one: the driver refuses the allocation
    # (CUDA_ERROR_INVALID_CONTEXT); the error says which stream and why.
    other_device = streams(1)
    with dlpx.cuda.stream(other_device, device=0), pytest.raises(RuntimeError) as refused:
        dlpx.empty((4,), "float32", "cuda:0")
    assert f"the current stream {hex(other_device)} of cuda:0 is another device's" in str(refused.value)
    assert "CUDA_ERROR_INVALID_CONTEXT" in str(refused.value)
    SIM.sim_cuda_reset_counts()  # the driver's refusal, the caller's stream: counted as a misuse


def test_pinned_memory_records_and_queries_no_event_while_a_capture_is_known(streams):
    # While dlpx knows a capture may be underway (a free put off), a pinned block is neither
    # taken from the cache (its events would be queried) nor fenced when freed (an event on the
    # legacy stream breaks the capture of a blocking stream): it goes back to the driver once the
    # capture is over, after the devices are idle.
    s = streams(blocking=True)
    cached = dlpx.empty((16,), "float32", "cuda_host")
    del cached
    SIM.sim_cuda_set_capturing(s, 1)
    with dlpx.cuda.stream(s):
        inside = dlpx.empty((16,), "float32", "cuda:0")
        del inside  # put off: the capture is known
    SIM.sim_cuda_reset_counts()
    during = dlpx.empty((16,), "float32", "cuda_host")
    del during
    kept = dlpx.empty((16,), "float32", "cuda_host")
    assert calls("cuEventQuery") == 0 and calls("cuEventRecord") == 0 and calls("cuEventSynchronize") == 0
    assert calls("cuMemFreeHost") == 0
    SIM.sim_cuda_set_capturing(s, 0)
    del kept
    with dlpx.cuda.stream(s):
        after = dlpx.empty((16,), "float32", "cuda:0")  # on s: the put-off free is made
        use(s, after, write=True)
    SIM.sim_cuda_reset_counts()
    again = dlpx.empty((16,), "float32", "cuda_host")
    assert calls("cuMemFreeHost") == 2, "the two blocks freed during the capture went back"
    del again


def test_memory_stats_has_torch_s_names_and_adds_up():
    dlpx.cuda.empty_cache()
    start = dlpx.cuda.memory_stats("cuda:0")
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
                "allocation.all.current", "segment.all.current", "num_alloc_retries", "num_ooms",
                "num_device_alloc", "num_device_free", "num_cache_hits", "cached_bytes.all.current"):
        assert isinstance(start[key], int), key
    tensors = [dlpx.empty((1000,), "float32", "cuda:0") for _ in range(3)]  # 4000 bytes: the 4096 class
    live = dlpx.cuda.memory_stats(0)
    assert live["allocated_bytes.all.current"] == start["allocated_bytes.all.current"] + 3 * 4096
    assert live["allocation.all.current"] == start["allocation.all.current"] + 3
    del tensors
    idle = dlpx.cuda.memory_stats(0)
    assert idle["cached_bytes.all.current"] == 3 * 4096
    assert idle["allocated_bytes.all.peak"] >= start["allocated_bytes.all.current"] + 3 * 4096
    assert idle["allocated_bytes.all.allocated"] - idle["allocated_bytes.all.freed"] == idle["allocated_bytes.all.current"]
    assert dlpx.cuda.memory_stats(1)["allocated_bytes.all.current"] == 0
    with pytest.raises(ValueError, match=r"^dlpx: memory_stats: device cuda:5 does not exist"):
        dlpx.cuda.memory_stats(5)


def test_randomized_stream_order_with_threads(streams):
    """Threads allocate, use on other streams (told to dlpx), export to built-in streams, free on
    another thread, hold streams; the simulator checks every reuse. The run is cut into phases,
    and a capture of one stream begins or ends only between them, while every worker waits: a
    capture that begins while another thread frees memory of that stream is a race no driver
    call can close (dlpx asks whether the stream is captured, then frees: the capture may begin
    in between and take the free into its graph), so a program must not begin one then, and
    neither does the test. The workers live through every phase, so that each keeps its own
    per-thread default stream."""
    user = [streams(), streams(), streams(blocking=True)]
    peer = streams(1)
    capture = streams()
    capturing = False
    handed = []
    failures = []
    seeds = range(4)
    mine = {seed: [] for seed in seeds}  # (tensor, device, streams that used it since its last write)
    orders = {seed: Ordering() for seed in seeds}
    phases, steps = 20, 50
    between = threading.Barrier(len(seeds) + 1, timeout=120)

    def worker(seed):
        rng = random.Random(seed)
        order, held = orders[seed], mine[seed]
        for _ in range(phases):
            try:
                phase(rng, order, held)
            except Exception as e:  # reported by the main thread
                failures.append(e)
            between.wait()  # the phase is over: the main thread may begin or end the capture
            between.wait()
        held.clear()  # the last frees, on every thread at once

    def phase(rng, order, held):
        for _ in range(steps):
            r = rng.random()
            if r < 0.3 and len(held) < 16:
                device = 1 if rng.random() < 0.15 else 0
                stream = rng.choice([LEGACY, peer]) if device else rng.choice([LEGACY, PER_THREAD, capture, *user])
                n = rng.choice([4, 100, 1000, 30000])
                with dlpx.cuda.stream(stream, device=device):
                    t = dlpx.empty((n,), "float32", f"cuda:{device}")
                graph = stream == capture and capturing
                assert SIM.sim_cuda_alloc_captured(t.data_ptr) == graph, "graph memory mixed with the cache's"
                use(stream, t, write=True)
                held.append([t, device, [stream]])
            elif r < 0.5 and held:
                entry = rng.choice(held)
                t, device, users = entry
                consumer = rng.choice([LEGACY, peer]) if device else rng.choice([LEGACY, PER_THREAD, peer, *user])
                for u in users:
                    order.after(u, consumer, device=1 if device or u == peer else 0)
                write = rng.random() < 0.3
                use(consumer, t, write)
                dlpx.cuda.record_stream(t, consumer, device=1 if consumer == peer else device)
                entry[2] = [consumer] if write else users + [consumer]
            elif r < 0.6 and held:
                t, device, users = rng.choice(held)
                if device == 0:  # an export to a built-in stream, released when that work is enqueued
                    consumer = rng.choice([LEGACY, PER_THREAD])
                    for u in users:
                        order.after(u, consumer, device=1 if u == peer else 0)
                    capsule = t.__dlpack__(stream=consumer, max_version=(1, 3))
                    use(consumer, t)
                    del capsule
                    users.append(consumer)
            elif r < 0.8 and held:
                entry = held.pop(rng.randrange(len(held)))
                if rng.random() < 0.3:
                    handed.append(entry[0])
                del entry
            elif r < 0.85 and handed:
                try:
                    handed.pop()
                except IndexError:
                    pass
            elif r < 0.92:
                s = rng.choice([*user[:2], peer])
                (SIM.sim_cuda_hold if rng.random() < 0.5 else SIM.sim_cuda_release)(s)
            elif r < 0.97:
                dlpx.cuda.memory_stats(rng.randrange(2))
            elif not capturing:
                dlpx.cuda.empty_cache()

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in seeds]
    for t in threads:
        t.start()
    toggles = random.Random(-1)
    for n in range(phases):
        between.wait()
        if n < phases - 1 and toggles.random() < 0.5:  # every worker waits
            capturing = not capturing
            SIM.sim_cuda_set_capturing(capture, int(capturing))
        between.wait()
    for t in threads:
        t.join()
    handed.clear()
    SIM.sim_cuda_set_capturing(capture, 0)
    for s in (*user, peer):
        SIM.sim_cuda_release(s)
    assert not failures, failures
    for order in orders.values():
        order.close()
    stats = dlpx.cuda.memory_stats(0)
    assert stats["allocation.all.current"] == 0 and stats["allocated_bytes.all.current"] == 0
    assert stats["num_cache_hits"] > 0 and stats["num_fenced_frees"] > 0
    assert SIM.sim_cuda_unordered_reuses() == 0


# ---- a `__dlpack__` producer's work, ordered before dlpx's current stream (rows/dlpack.rs) ----


class Producer:
    """A producer as the spec has it: it writes its tensor on its own stream, and its
    `__dlpack__` makes the stream it is given wait for that (None: the legacy stream; -1: none).
    `claims` is what its `__dlpack_device__` says (None: the truth); `calls` what it was asked."""

    def __init__(self, stream, claims=None):
        self.t = dlpx.empty((1024,), "float32", "cuda:0")
        self.own, self.claims, self.calls = stream, claims, []
        self.order = Ordering()
        use(self.own, self.t, write=True)

    def __dlpack_device__(self):
        if self.claims == "raises":
            raise RuntimeError("no device today")
        return self.claims or (2, 0)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        self.calls.append(dict(stream=stream, dl_device=dl_device, copy=copy))
        if stream != -1:
            self.order.after(self.own, LEGACY if stream is None else stream)
        return self.t.__dlpack__(stream=-1, max_version=max_version)

    def close(self):
        self.order.close()


class OldProducer(Producer):
    """One that predates `max_version` (torch < 2.3, cupy < 13): `stream` is all it takes."""

    def __dlpack__(self, stream=None):
        return Producer.__dlpack__(self, stream=stream)


@pytest.mark.parametrize("kind", [Producer, OldProducer])
@pytest.mark.parametrize("asked", [{}, {"device": "cuda:0"}, {"device": "cuda:0", "copy": False},
                                   {"device": "cuda:0", "copy": True}, {"copy": True}])
def test_a_producer_is_given_dlpx_s_stream_whatever_else_is_asked(streams, kind, asked):
    # The stream went missing where the request named the tensor's own device, and where an
    # older producer refused the other keywords: its work was then ordered before the legacy
    # stream only, and dlpx's read (or copy) on its own stream came first (an unordered reuse).
    p, mine = kind(streams()), streams()
    with dlpx.cuda.stream(mine):
        x = dlpx.from_dlpack(p, **asked)
        use(mine, x)
    assert p.calls[-1]["stream"] == mine
    del x
    p.close()


@pytest.mark.parametrize("claims, said", [((2, 1), "__dlpack_device__ said cuda:1"),
                                          ((1, 0), "__dlpack_device__ said cpu:0"),
                                          ("raises", "__dlpack_device__ named no device")])
def test_a_tensor_on_another_device_than_its_producer_said_is_refused_while_a_stream_is_set(streams, claims, said):
    # The stream passed was for the device __dlpack_device__ named (or none): the producer's work
    # on the tensor it gave is not ordered before dlpx's stream there.
    p, mine = Producer(streams(), claims), streams()
    with dlpx.cuda.stream(mine), pytest.raises(BufferError, match=f"gave a tensor on cuda:0 where {said}: "):
        dlpx.from_dlpack(p)
    # With no stream set, the legacy stream is dlpx's and what the producer assumed.
    p.order.after(p.own, LEGACY)
    x = dlpx.from_dlpack(p)
    use(LEGACY, x)
    del x
    p.close()

"""Lifetimes: a source deleted before its import is used (and the reverse), memory freed exactly
once at the end of a chain of peers, reference counts unchanged after 10**5 round trips, and
resident memory flat over 10**6 conversions."""

import gc
import sys
import threading
import weakref

import numpy as np
import pytest
torch = pytest.importorskip("torch")  # not on the free-threaded interpreters
tvm_ffi = pytest.importorskip("tvm_ffi")

from dlpx.conform import abi
from numpy_producers import Managed
import dlpx


def counted(values=(1.0, 2.0, 3.0, 4.0)):
    managed = Managed(np.array(values, dtype=np.float64))
    return dlpx.from_dlpack(managed.capsule()), managed


# ---- the source dies first -----------------------------------------------------------------------


def test_numpy_source_deleted_before_the_import_is_used():
    a = np.arange(5.0)
    t = dlpx.from_dlpack(a)
    del a
    gc.collect()
    np.testing.assert_array_equal(np.from_dlpack(t), np.arange(5.0))
    np.from_dlpack(t)[0] = 10  # still writable memory that someone owns
    assert np.from_dlpack(t)[0] == 10


def test_torch_source_deleted_before_the_import_is_used():
    source = torch.arange(6, dtype=torch.int32) * 3
    t = dlpx.from_dlpack(source)
    del source
    gc.collect()
    np.testing.assert_array_equal(np.from_dlpack(t), np.arange(6) * 3)


def test_tvm_ffi_source_deleted_before_the_import_is_used():
    x = tvm_ffi.from_dlpack(np.arange(4, dtype=np.int64) + 7)
    t = dlpx.from_dlpack(x)
    del x
    gc.collect()
    np.testing.assert_array_equal(np.from_dlpack(t), np.arange(4) + 7)


def test_hand_made_source_is_freed_only_when_the_import_dies():
    t, managed = counted()
    assert managed.calls == 0
    np.testing.assert_array_equal(np.from_dlpack(t), [1.0, 2.0, 3.0, 4.0])
    del t
    assert managed.calls == 1


# ---- the import dies first -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "consume",
    [np.from_dlpack, torch.from_dlpack, tvm_ffi.from_dlpack, dlpx.from_dlpack],
    ids=["numpy", "torch", "tvm_ffi", "dlpx"],
)
def test_dlpx_tensor_deleted_before_its_export_is_used(consume):
    t = dlpx.empty((4,), "float64")
    np.from_dlpack(t)[...] = [1.0, 2.0, 3.0, 4.0]
    out = consume(t)
    del t
    gc.collect()
    np.testing.assert_array_equal(np.from_dlpack(out), [1.0, 2.0, 3.0, 4.0])


@pytest.mark.parametrize(
    "consume",
    [np.from_dlpack, torch.from_dlpack, tvm_ffi.from_dlpack, dlpx.from_dlpack],
    ids=["numpy", "torch", "tvm_ffi", "dlpx"],
)
def test_export_frees_the_source_once_when_the_consumer_dies(consume):
    t, managed = counted()
    out = consume(t)
    del t
    gc.collect()
    assert managed.calls == 0
    del out
    gc.collect()
    assert managed.calls == 1


def test_a_chain_through_every_peer_frees_once_at_the_end():
    t, managed = counted()
    chain = [t]
    for step in (torch.from_dlpack, dlpx.from_dlpack, tvm_ffi.from_dlpack, dlpx.from_dlpack, np.from_dlpack,
                 dlpx.from_dlpack):
        chain.append(step(chain[-1]))
    last = chain.pop()
    assert last.data_ptr == t.data_ptr
    del t
    chain.clear()
    gc.collect()
    assert managed.calls == 0
    np.testing.assert_array_equal(np.from_dlpack(last), [1.0, 2.0, 3.0, 4.0])
    del last
    gc.collect()
    assert managed.calls == 1


def test_exports_released_on_many_threads_free_once():
    t, managed = counted()
    barrier = threading.Barrier(4)

    def work():
        barrier.wait()
        for _ in range(2000):
            np.from_dlpack(t)
            torch.from_dlpack(dlpx.from_dlpack(t))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert managed.calls == 0
    del t
    assert managed.calls == 1


# ---- reference counts after 10**5 round trips ------------------------------------------------------

ROUND_TRIPS = 10**5


def test_refcounts_after_dlpx_torch_dlpx_round_trips():
    t, managed = counted()
    before = sys.getrefcount(t)
    for _ in range(ROUND_TRIPS):
        dlpx.from_dlpack(torch.from_dlpack(t))
    assert sys.getrefcount(t) == before
    del t
    assert managed.calls == 1  # no export was left holding the tensor


def test_refcounts_after_numpy_dlpx_numpy_round_trips():
    a = np.arange(4.0)
    before = sys.getrefcount(a)
    for _ in range(ROUND_TRIPS):
        np.from_dlpack(dlpx.from_dlpack(a))
    assert sys.getrefcount(a) == before


def test_refcounts_after_torch_dlpx_torch_round_trips():
    t = torch.arange(4.0)
    before = sys.getrefcount(t)
    for _ in range(ROUND_TRIPS):
        torch.from_dlpack(dlpx.from_dlpack(t))
    assert sys.getrefcount(t) == before
    ref = weakref.ref(t)
    del t
    assert ref() is None


def test_refcounts_after_tvm_ffi_round_trips():
    t, managed = counted()
    before = sys.getrefcount(t)
    for _ in range(ROUND_TRIPS):
        dlpx.from_dlpack(tvm_ffi.from_dlpack(t))
    assert sys.getrefcount(t) == before
    del t
    assert managed.calls == 1


def test_refcount_of_the_tensor_type_is_stable():
    class Sub(dlpx.Tensor):
        pass

    source = np.zeros(2)
    before = (sys.getrefcount(dlpx.Tensor), sys.getrefcount(Sub))
    for _ in range(ROUND_TRIPS // 10):
        dlpx.empty((2,))
        dlpx.from_dlpack(source)
        Sub(source)
    assert (sys.getrefcount(dlpx.Tensor), sys.getrefcount(Sub)) == before


def test_failed_imports_leak_no_references():
    class Raising:
        def __dlpack__(self, **kwargs):
            raise BufferError("no")

    a = np.zeros(2)
    raising = Raising()
    before = (sys.getrefcount(a), sys.getrefcount(raising))
    for _ in range(ROUND_TRIPS // 10):
        with pytest.raises(BufferError):
            dlpx.from_dlpack(raising)
        with pytest.raises(BufferError):
            dlpx.from_dlpack(a, device="cuda:0")
    assert (sys.getrefcount(a), sys.getrefcount(raising)) == before


# ---- memory flat over 10**6 conversions -------------------------------------------------------------

CONVERSIONS = 10**6
TOLERANCE = 4 << 20  # bytes: less than 5 bytes per conversion


def resident_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


SOURCES = {}


def _sources():
    if not SOURCES:
        SOURCES.update(torch=torch.zeros(4), numpy=np.zeros(4), dlpx=dlpx.empty((4,)))
    return SOURCES


CONVERSION_KINDS = {
    "dlpx<-torch(table)": lambda s: dlpx.from_dlpack(s["torch"]),
    "dlpx<-numpy(protocol)": lambda s: dlpx.from_dlpack(s["numpy"]),
    "numpy<-dlpx": lambda s: np.from_dlpack(s["dlpx"]),
    "tvm_ffi<-dlpx(table)": lambda s: tvm_ffi.from_dlpack(s["dlpx"]),
    "unconsumed-capsule": lambda s: s["dlpx"].__dlpack__(max_version=(1, 3)),
    "dlpx.empty": lambda s: dlpx.empty((4,)),
}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
@pytest.mark.parametrize("kind", sorted(CONVERSION_KINDS))
def test_memory_is_flat_over_a_million_conversions(kind):
    convert = CONVERSION_KINDS[kind]
    sources = _sources()
    for _ in range(CONVERSIONS // 10):  # warm-up: caches, allocator arenas
        convert(sources)
    gc.collect()
    before = resident_bytes()
    for _ in range(CONVERSIONS):
        convert(sources)
    gc.collect()
    grown = resident_bytes() - before
    assert grown < TOLERANCE, f"{kind}: resident memory grew by {grown} bytes over {CONVERSIONS} conversions"

"""The CUDA array interface against the simulated driver (c_tests/sim_cuda): dlpx.Tensor's
`__cuda_array_interface__` (version 3, with dlpx's current stream), and objects that speak only
that interface read by dlpx: the device found from the pointer (`cuPointerGetAttribute`), version
3's `stream` waited on by dlpx's current stream with an event (never a device synchronisation),
version 2 without one, zero-copy, read-only kept, the exporter held. Not collected on its own:
test_cuda_simulated.py runs it with the simulator first on LD_LIBRARY_PATH."""

import ctypes
import gc
import os
import sys
import weakref

import numpy as np
import pytest

import dlpx
from protocol_views import OnlyCudaInterface

SIM = ctypes.CDLL(os.path.join(os.environ["DLPX_SIM_CUDA_DIR"], "libcuda.so"))
SIM.sim_cuda_stream_create.argtypes = [ctypes.c_int]
SIM.sim_cuda_stream_create.restype = ctypes.c_void_p
SIM.sim_cuda_stream_destroy.argtypes = [ctypes.c_void_p]
SIM.sim_cuda_waits.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
SIM.sim_cuda_waits.restype = ctypes.c_long
SIM.sim_cuda_calls.argtypes = [ctypes.c_char_p]
SIM.sim_cuda_calls.restype = ctypes.c_long
SIM.sim_cuda_misuses.restype = ctypes.c_long
LEGACY = 1


@pytest.fixture(autouse=True)
def no_misuse_and_no_device_sync():
    SIM.sim_cuda_reset_counts()
    yield
    assert SIM.sim_cuda_calls(b"cuCtxSynchronize") == 0
    assert SIM.sim_cuda_misuses() == 0, "dlpx misused the driver (see the sim_cuda: lines)"


@pytest.fixture
def stream():
    made = []

    def make(device=0):
        made.append(SIM.sim_cuda_stream_create(device))
        return made[-1]

    yield make
    for handle in made:
        SIM.sim_cuda_stream_destroy(handle)


def test_a_cuda_tensor_describes_itself_with_dlpx_s_stream(stream):
    t = dlpx.empty((2, 3), "float32", "cuda:0")
    interface = t.__cuda_array_interface__
    assert interface["version"] == 3 and interface["shape"] == (2, 3) and interface["typestr"] == "<f4"
    assert interface["data"] == (t.data_ptr, False) and interface["strides"] is None
    assert interface["stream"] == LEGACY  # dlpx's default: the legacy stream (never 0)
    s = stream()
    with dlpx.cuda.stream(s):
        assert dlpx.empty((1,), "float32", "cuda:0").__cuda_array_interface__["stream"] == s
    assert not hasattr(t, "__array_interface__")
    with pytest.raises(BufferError, match="not in host memory"):
        memoryview(t)


def test_managed_memory_has_both_interfaces():
    m = dlpx.empty((4,), "int32", "cuda_managed")
    assert m.__cuda_array_interface__["stream"] is None  # the driver orders managed memory
    assert m.__array_interface__["data"][0] == m.data_ptr
    np.asarray(m)[:] = 7
    assert list(np.asarray(m)) == [7, 7, 7, 7]


@pytest.mark.parametrize("device", [0, 1])
def test_an_interface_is_read_in_place_on_the_device_its_pointer_is_on(device):
    t = dlpx.empty((8,), "float32", f"cuda:{device}")
    holder = OnlyCudaInterface(dict(t.__cuda_array_interface__, stream=None), owner=t)
    imported = dlpx.from_dlpack(holder)
    assert imported.device == f"cuda:{device}" and imported.data_ptr == t.data_ptr
    assert dlpx._native._row_of(type(holder)) == "cuda_array_interface"


def test_version_3_s_stream_is_waited_on_by_dlpx_s_stream(stream):
    producer, consumer = stream(), stream()
    t = dlpx.empty((8,), "float32", "cuda:0")
    holder = OnlyCudaInterface(dict(t.__cuda_array_interface__, stream=producer))
    with dlpx.cuda.stream(consumer):
        dlpx.from_dlpack(holder)
    assert SIM.sim_cuda_waits(consumer, producer) == 1
    before = SIM.sim_cuda_waits(consumer, producer)
    with dlpx.cuda.stream(consumer):
        dlpx.from_dlpack(OnlyCudaInterface(dict(t.__cuda_array_interface__, version=2, stream=None)))
    assert SIM.sim_cuda_waits(consumer, producer) == before  # version 2: nothing to wait for


def test_version_3_s_stream_of_another_device_is_waited_on_through_its_own_context(stream):
    # A peer kernel on cuda:0 wrote cuda:1's memory: the event was recorded in cuda:1's context,
    # which the driver refuses for a cuda:0 stream (a misuse, and the import failed).
    dlpx.empty((1,), "float32", "cuda:0")  # cuda:0 in use, as the producer's framework has it
    producer, consumer = stream(0), stream(1)
    t = dlpx.empty((8,), "float32", "cuda:1")
    holder = OnlyCudaInterface(dict(t.__cuda_array_interface__, stream=producer))
    with dlpx.cuda.stream(consumer, device="cuda:1"):
        assert dlpx.from_dlpack(holder).device == "cuda:1"
    assert SIM.sim_cuda_waits(consumer, producer) == 1


@pytest.mark.parametrize("value", [0, 0xDEADBEEF])
def test_a_stream_key_in_a_version_2_interface_is_not_read(stream, value):
    # `stream` is version 3's: one in a version-2 dict was waited on (a bogus handle reached the
    # driver, a misuse) or refused (0).
    t = dlpx.empty((8,), "float32", "cuda:0")
    with dlpx.cuda.stream(stream()):
        imported = dlpx.from_dlpack(OnlyCudaInterface(dict(t.__cuda_array_interface__, version=2, stream=value)))
    assert imported.data_ptr == t.data_ptr and SIM.sim_cuda_calls(b"cuStreamWaitEvent") == 0


def test_an_empty_array_at_the_end_of_its_allocation_is_read():
    # An empty tail slice (`a[n:]`) points one past its allocation, which the driver may not know:
    # it has no memory to read, as a NULL one has none.
    t = dlpx.empty((128,), "float32", "cuda:0")
    for offset in (256, 512):
        empty = dict(shape=(0,), typestr="<f4", data=(t.data_ptr + offset, False), version=3, stream=None)
        imported = dlpx.from_dlpack(OnlyCudaInterface(empty, owner=t))
        assert imported.shape == (0,) and imported.device == "cuda:0"


def test_the_interface_s_read_only_flag_and_exporter_are_kept():
    t = dlpx.empty((4,), "uint8", "cuda:0")
    holder = OnlyCudaInterface(dict(t.__cuda_array_interface__, data=(t.data_ptr, True), stream=None))
    alive = weakref.ref(holder)
    imported = dlpx.from_dlpack(holder)
    del holder
    gc.collect()
    assert imported.readonly and alive() is not None
    del imported
    gc.collect()
    assert alive() is None


def test_pinned_and_managed_pointers_are_their_kinds():
    pinned = dlpx.empty((4,), "float32", "cuda_host")
    interface = dict(shape=(4,), typestr="<f4", data=(pinned.data_ptr, False), version=3, stream=None)
    assert dlpx.from_dlpack(OnlyCudaInterface(interface)).device == "cuda_host:0"
    managed = dlpx.empty((4,), "float32", "cuda_managed")
    interface["data"] = (managed.data_ptr, False)
    assert dlpx.from_dlpack(OnlyCudaInterface(interface)).device == "cuda_managed:0"


@pytest.mark.parametrize("kind", ["cuda_host", "cuda_managed"])
def test_version_3_s_stream_over_memory_the_host_reads_is_waited_for_on_the_host(stream, kind):
    # numba's mapped arrays: pinned memory a stream still writes. Only dlpx's stream waited, and
    # the host read it at once (np.asarray, a copy to the CPU).
    producer = stream()
    memory = dlpx.empty((4,), "float32", kind)
    interface = dict(shape=(4,), typestr="<f4", data=(memory.data_ptr, False), version=3, stream=producer)
    SIM.sim_cuda_reset_counts()
    imported = dlpx.from_dlpack(OnlyCudaInterface(interface))
    assert SIM.sim_cuda_calls(b"cuStreamSynchronize") == 1 and imported.device == kind + ":0"
    np.asarray(imported)
    assert SIM.sim_cuda_calls(b"cuStreamWaitEvent") == 0


@pytest.mark.parametrize("change, says", [
    ({"stream": 0}, "stream 0 is ambiguous"),
    ({"version": 1}, "version 1"),
    ({"mask": object()}, "mask"),
    ({"typestr": ">f4"}, "byte order"),
    ({"strides": (6,)}, "not a multiple of the item size"),
    ({"data": None}, "data must be"),
])
def test_interfaces_dlpack_cannot_describe_are_refused(change, says):
    t = dlpx.empty((8,), "float32", "cuda:0")
    with pytest.raises(BufferError, match=says):
        dlpx.from_dlpack(OnlyCudaInterface(dict(t.__cuda_array_interface__, **change)))


def test_a_bool_stream_is_refused_as_not_a_handle():
    t = dlpx.empty((8,), "float32", "cuda:0")
    with pytest.raises(TypeError, match="stream must be an integer or None, not bool"):
        dlpx.from_dlpack(OnlyCudaInterface(dict(t.__cuda_array_interface__, stream=True)))


def test_a_pointer_the_driver_does_not_know_is_refused():
    host = np.zeros(4, np.float32)  # not CUDA memory
    interface = dict(shape=(4,), typestr="<f4", data=(host.ctypes.data, False), version=3, stream=None)
    with pytest.raises(BufferError, match="not CUDA memory the driver knows"):
        dlpx.from_dlpack(OnlyCudaInterface(interface))


def test_references_come_back():
    t = dlpx.empty((4,), "float32", "cuda:0")
    holder = OnlyCudaInterface(dict(t.__cuda_array_interface__, stream=None))
    before = sys.getrefcount(holder)
    for _ in range(5):
        dlpx.from_dlpack(holder)
        dlpx.from_dlpack(holder, copy=True)
    gc.collect()
    assert sys.getrefcount(holder) == before

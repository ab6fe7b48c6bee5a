"""CUDA streams for dlpx: per thread and device, the stream dlpx allocates on (``dlpx.empty(...,
device="cuda:0")``), orders exports after (``__dlpack__(stream=...)``) and reports through its
exchange table's ``current_work_stream``.

    with dlpx.cuda.stream(torch.cuda.current_stream()):
        t = dlpx.empty((1024,), device="cuda:0")      # cuMemAllocAsync on that stream

Nothing here needs a GPU until memory is touched: streams are handles that dlpx records.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from . import _native

_KDL_CUDA = 2

__all__ = [
    "stream",
    "current_stream",
    "set_current_stream",
    "record_stream",
    "empty_cache",
    "memory_stats",
    "is_available",
]


def _handle(stream: Any) -> int:
    """A CUstream handle as an int from an int, None (the default stream), or a stream object:
    ``__cuda_stream__()`` (CUDA Python's protocol), ``cuda_stream`` (torch), ``ptr`` (cupy)."""
    if stream is None:
        return 0
    if isinstance(stream, int):
        if stream < 0:
            raise ValueError(f"dlpx: cuda.stream: a stream handle cannot be negative, got {stream}")
        return stream
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        value = protocol() if callable(protocol) else protocol
        return int(value[1] if isinstance(value, tuple) else value)
    for attribute in ("cuda_stream", "ptr", "handle"):
        value = getattr(stream, attribute, None)
        if isinstance(value, int):
            return value
    raise TypeError(f"dlpx: cuda.stream: expected an int handle or a CUDA stream object, got {type(stream).__name__}")


def current_stream(device: int = 0) -> int:
    """This thread's current stream on ``cuda:device`` as a handle (0: the legacy default)."""
    return _native._current_stream(_KDL_CUDA, device)


def set_current_stream(stream: Any, device: int = 0) -> int:
    """Makes ``stream`` this thread's current stream on ``cuda:device``; returns the previous handle."""
    return _native._set_current_stream(_KDL_CUDA, device, _handle(stream))


def _device_of(stream: Any, device: Any) -> int:
    """The device a stream belongs to: `device` when given, else the stream object's own
    (torch and cupy streams know theirs), else 0."""
    if device is not None:
        return int(device)
    own = getattr(stream, "device", None)
    index = getattr(own, "index", None)
    if isinstance(index, int):
        return index
    own = getattr(stream, "device_id", None)
    return own if isinstance(own, int) else 0


@contextmanager
def stream(stream: Any, device: Any = None) -> Iterator[int]:
    """Within the block, ``stream`` is this thread's current stream on ``cuda:device`` (by
    default the stream object's own device, else 0). An int handle must stay valid as long as
    tensors allocated on it live: their memory is freed on the stream it was allocated on."""
    device = _device_of(stream, device)
    previous = set_current_stream(stream, device)
    try:
        yield _handle(stream)
    finally:
        _native._set_current_stream(_KDL_CUDA, device, previous)


def record_stream(tensor: Any, stream: Any, device: Any = None) -> None:
    """Tells dlpx that work on ``tensor`` (a dlpx.Tensor from dlpx's allocator) is being
    enqueued on ``stream``: when the tensor dies, its memory is reused only after the work
    enqueued on that stream by then (torch's ``Tensor.record_stream``). dlpx records the streams
    it may keep using itself (its exchange table's ``current_work_stream``, and a built-in
    stream named in ``__dlpack__(stream=...)``: a consumer may destroy any other stream it names);
    this is for work it cannot see, such as a consumer's kernels on its own stream, or an
    asynchronous copy from a pinned tensor on a non-blocking stream. The stream must outlive the tensor: an event is recorded on it when the
    tensor dies (if it is gone by then, dlpx waits for the whole device instead)."""
    _native._record_stream(tensor, _device_of(stream, device), _handle(stream))


def empty_cache() -> None:
    """Gives the CUDA memory dlpx keeps for reuse (the block cache's idle blocks, device memory
    pools, finished pinned blocks) back to the driver; memory in use is kept. Without a CUDA
    driver dlpx keeps none, and this does nothing (as ``torch.cuda.empty_cache()``)."""
    _native._empty_cache()


def memory_stats(device: Any = 0) -> dict:
    """Statistics of dlpx's memory on ``cuda:device`` (an int, ``"cuda:N"`` or an object with
    an ``index``), as a dict under ``torch.cuda.memory_stats``'s names where torch has one:
    ``allocated_bytes.all.current``/``.peak``/``.allocated``/``.freed``,
    ``reserved_bytes.all.current``/``.peak``, ``allocation.all.*``, ``segment.all.current``,
    ``num_device_alloc``, ``num_device_free``, ``num_alloc_retries``, ``num_ooms``,
    ``num_sync_all_streams``; and dlpx's own: ``cached_bytes.all.current`` (idle cached bytes),
    ``cache_limit_bytes`` (``DLPX_CUDA_CACHE_BYTES``), ``num_cache_hits``, ``num_cache_misses``,
    ``num_fenced_frees``, ``fenced_blocks.all.current``. Bytes count whole cached blocks.
    Without a CUDA driver, ``{}`` (as ``torch.cuda.memory_stats()`` without CUDA)."""
    if isinstance(device, str):
        name, _, index = device.partition(":")
        if name != "cuda" or not index.isdigit():
            raise ValueError(f"dlpx: memory_stats: expected a CUDA device such as 'cuda:0', got {device!r}")
        device = int(index)
    elif not isinstance(device, int):
        device = getattr(device, "index", None)
        if not isinstance(device, int):
            raise TypeError("dlpx: memory_stats: expected a device index, 'cuda:N' or a device object")
    return _native._cuda_memory_stats(device)


def is_available() -> bool:
    """Whether a CUDA driver can be loaded in this process (it says nothing of devices)."""
    return _native._cuda_driver_present()


def __dir__() -> "list[str]":
    """The public API alone (``__all__``)."""
    return sorted(__all__)

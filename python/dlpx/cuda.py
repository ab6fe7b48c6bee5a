"""CUDA streams for dlpx: per thread and device, the stream dlpx allocates on (``dlpx.empty(...,
device="cuda:0")``), orders exports after (``__dlpack__(stream=...)``) and reports through its
exchange table's ``current_work_stream``.

    with dlpx.cuda.stream(torch.cuda.current_stream()):
        t = dlpx.empty((1024,), device="cuda:0")      # cuMemAllocAsync on that stream

Nothing here needs a GPU until memory is touched: streams are handles that dlpx records.
"""

from __future__ import annotations

import threading
from typing import Any, List

from . import _native
from ._device import Device

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


_HANDLE_LIMIT = 2**64  # a CUstream is a pointer


def _handle(stream: Any, what: str) -> int:
    """A CUstream handle as an int from an int, None (the default stream), or a stream object:
    ``__cuda_stream__()`` (CUDA Python's protocol), ``cuda_stream`` (torch), ``ptr`` (cupy)."""
    if stream is None:
        return 0
    if isinstance(stream, int) and not isinstance(stream, bool):
        value, source = stream, "got"
    else:
        protocol = getattr(stream, "__cuda_stream__", None)
        if protocol is not None:
            given = protocol() if callable(protocol) else protocol
            value, source = (given[1] if isinstance(given, tuple) and len(given) == 2 else given), "__cuda_stream__ gave"
        else:
            found = [getattr(stream, name, None) for name in ("cuda_stream", "ptr", "handle")]
            value = next((v for v in found if isinstance(v, int) and not isinstance(v, bool)), None)
            if value is None:
                raise TypeError(f"dlpx: {what}: expected an int handle or a CUDA stream object, got {type(stream).__name__}")
            source = f"{type(stream).__name__}'s handle gave"
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"dlpx: {what}: {source} {value!r}, not an int handle")
    if not 0 <= value < _HANDLE_LIMIT:
        raise ValueError(f"dlpx: {what}: a stream handle is a pointer (0 to 2**64 - 1), {source} {value}")
    return value


def _native_handle(handle: int) -> int:
    """A handle as the native calls take it: its 64 bits as an int64 (a pointer past 2**63, an
    aarch64 tagged one, reads as negative there and is the same bits)."""
    return handle - _HANDLE_LIMIT if handle >= _HANDLE_LIMIT // 2 else handle


def _device_index(device: Any, what: str) -> int:
    """A CUDA device index from an int, ``"cuda:N"``, or a device object: ``index`` (torch),
    ``device_id`` (cuda.core, cupy's streams), ``id`` (cupy, jax)."""
    if isinstance(device, int) and not isinstance(device, bool):
        index = device
    elif isinstance(device, str):
        # Read by the one parser of device names (dlpx.empty's: 'cuda:01' is none).
        try:
            parsed = Device.parse(device)
        except ValueError:
            parsed = None
        if parsed is None or parsed.device_type != _KDL_CUDA:
            raise ValueError(f"dlpx: {what}: expected a CUDA device such as 'cuda:0', got {device!r}")
        index = parsed.device_id
    else:
        found = [getattr(device, name, None) for name in ("index", "device_id", "id")]
        index = next((v for v in found if isinstance(v, int) and not isinstance(v, bool)), None)
        if index is None:
            raise TypeError(f"dlpx: {what}: expected a device index, 'cuda:N' or a device object, got {device!r}")
    if index < 0:
        raise ValueError(f"dlpx: {what}: device {index} is negative")
    return index


def _device_of(stream: Any, device: Any, what: str) -> int:
    """The device a stream belongs to: `device` when given, else the stream object's own
    (``stream.device``, a device object: torch, cuda.core; ``stream.device_id``: cupy), else 0."""
    if device is not None:
        return _device_index(device, what)
    own = getattr(stream, "device", None)
    if own is not None and not isinstance(stream, int):
        try:
            return _device_index(own, what)
        except TypeError:
            pass
    own = getattr(stream, "device_id", None)
    return own if isinstance(own, int) and not isinstance(own, bool) and own >= 0 else 0


def current_stream(device: Any = 0) -> int:
    """This thread's current stream on ``cuda:device`` as a handle (0: the legacy default)."""
    return _native._current_stream(_KDL_CUDA, _device_index(device, "cuda.current_stream"))


def set_current_stream(stream: Any, device: Any = None) -> int:
    """Makes ``stream`` this thread's current stream on ``cuda:device`` (by default the stream
    object's own device, else 0); returns the previous handle."""
    what = "cuda.set_current_stream"
    handle = _handle(stream, what)
    return _native._set_current_stream(_KDL_CUDA, _device_of(stream, device, what), _native_handle(handle))


class _Entry:
    """One entry into a ``stream`` block: its thread's blocks on its device (``blocks``, a list
    this entry is in until it exits) and the stream to restore when it exits last of them."""

    __slots__ = ("device", "previous", "blocks", "thread")

    def __init__(self, device: int, previous: int, blocks: list):
        self.device, self.previous, self.blocks = device, previous, blocks
        self.thread = threading.get_ident()


# The open blocks of each thread, per device (innermost last), so that blocks left out of order
# (two asyncio tasks, a generator suspended inside one) restore what was current before them
# all. `_LOCK` orders a block left on another thread than the one that entered it.
_OPEN = threading.local()
_LOCK = threading.Lock()


class stream:
    """Within the block, ``stream`` is this thread's current stream on ``cuda:device`` (by
    default the stream object's own device, else 0); ``as`` gives its handle. An int handle must
    stay valid as long as tensors allocated on it live: their memory is freed on the stream it
    was allocated on.

    Blocks may be left in any order (two asyncio tasks each in one across an ``await``): the
    thread's stream is then the innermost open block's, and what was current before them all
    once every one has been left. A block left on another thread than the one that entered it
    leaves that thread's stream as it is (it cannot be set from here) and the leaving thread's
    alone. One object may be entered again, and by several blocks at once."""

    __slots__ = ("_device", "_handle", "_entries")

    def __init__(self, stream: Any, device: Any = None):
        self._device = _device_of(stream, device, "cuda.stream")
        self._handle = _handle(stream, "cuda.stream")
        self._entries: List[_Entry] = []

    def __enter__(self) -> int:
        previous = _native._set_current_stream(_KDL_CUDA, self._device, _native_handle(self._handle))
        blocks = getattr(_OPEN, "blocks", None)
        if blocks is None:
            blocks = _OPEN.blocks = {}
        entry = _Entry(self._device, previous, blocks.setdefault(self._device, []))
        with _LOCK:
            entry.blocks.append(entry)
            self._entries.append(entry)
        return self._handle

    def __exit__(self, *exception: Any) -> None:
        # This thread's latest entry into this object (another thread's block in it is that
        # thread's to leave); another thread's only where this one has none (a block left on
        # another thread than entered it). This thread's entries all name one stream:
        # whichever is taken, the one left last restores what was current before the first.
        me = threading.get_ident()
        with _LOCK:
            mine = [i for i, e in enumerate(self._entries) if e.thread == me]
            entry = self._entries.pop(mine[-1] if mine else -1)
            at = next(i for i, e in enumerate(entry.blocks) if e is entry)
            innermost = at == len(entry.blocks) - 1
            if not innermost:
                entry.blocks[at + 1].previous = entry.previous
            del entry.blocks[at]
        if innermost and entry.thread == threading.get_ident():
            _native._set_current_stream(_KDL_CUDA, entry.device, _native_handle(entry.previous))

    def __repr__(self) -> str:
        return f"dlpx.cuda.stream({self._handle:#x}, device={self._device})"


def record_stream(tensor: Any, stream: Any, device: Any = None) -> None:
    """Tells dlpx that work on ``tensor`` (a dlpx.Tensor from dlpx's allocator) is being
    enqueued on ``stream``: when the tensor dies, its memory is reused only after the work
    enqueued on that stream by then (torch's ``Tensor.record_stream``). dlpx records the streams
    it may keep using itself (its exchange table's ``current_work_stream``, and a built-in
    stream named in ``__dlpack__(stream=...)``: a consumer may destroy any other stream it names);
    this is for work it cannot see, such as a consumer's kernels on its own stream, or an
    asynchronous copy from a pinned tensor on a non-blocking stream. The stream must outlive the
    tensor, as torch's must: an event is recorded on it when the tensor dies, and the CUDA driver
    does not survive a destroyed stream's handle (where a driver refuses it instead, dlpx waits
    for the whole device)."""
    what = "cuda.record_stream"
    _native._record_stream(tensor, _device_of(stream, device, what), _native_handle(_handle(stream, what)))


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
    device = _device_index(device, "memory_stats")
    return _native._cuda_memory_stats(device)


def is_available() -> bool:
    """Whether a CUDA driver can be loaded in this process (it says nothing of devices)."""
    return _native._cuda_driver_present()


def __dir__() -> "list[str]":
    """The public API alone (``__all__``)."""
    return sorted(__all__)

"""The reference producer: managed tensors built field by field in C structs (ctypes), with a
C-callable deleter thunk that counts its calls.

Two layers:

- :class:`ReferenceTensor` is one ``DLManagedTensorVersioned`` (or legacy ``DLManagedTensor``)
  whose every field can be set to any value, well-formed or not: a foreign major, any flags, a
  bad ``ndim``, negative or overflowing shapes, NULL shape/strides/data/deleter, unknown dtype
  and device codes. Hostile-producer tests build exactly the struct they want with it.
- :class:`ReferenceProducer` is a Python object with ``__dlpack__``/``__dlpack_device__`` that
  hands out capsules of ReferenceTensors: versioned or legacy-only, and records every call.

Capsules and the destructor contract. A capsule destructor runs while the consumer may have an
exception in flight (numpy drops an unconsumed capsule right after raising BufferError); a
destructor written in Python through ctypes would run Python code with that exception set and
lose it. So the kit's capsules carry no destructor: the kit keeps each capsule it handed out
and :func:`settle` applies the contract once nobody else holds one: an unconsumed name
(``dltensor``/``dltensor_versioned``) calls the deleter, a consumed one (``used_…``) does
nothing. Call ``gc.collect(); settle()`` before reading ``deleter_calls``.
"""

from __future__ import annotations

import ctypes
import sys
from ctypes import POINTER, c_int64

from . import abi

#: Pass as ``deleter=`` for the kit's counting thunk (the default).
COUNTING = "counting"
#: Pass as ``data=``/``strides=`` for the default (a fresh buffer / compact row-major strides).
DEFAULT = "default"

_ALIGNMENT = 256  # dlpack.h: "This pointer is always aligned to 256 bytes as in CUDA"
_MAX_BUFFER = 1 << 28  # a hostile shape gets a small buffer, never an attempt at its real size

# Tensors whose deleter has not run yet, by struct address. Keeping them here keeps their
# memory valid for a consumer that holds the struct, even if the checker drops its handle.
_LIVE: dict = {}
#: Addresses the counting deleter saw a second time, or never made: double deletes.
STRAY_DELETES: list = []
# Capsules the kit handed out, with the tensor each holds, until `settle` sees them free.
_OUTSTANDING: list = []


@abi.Deleter
def _counting_deleter(address):
    # Runs on any thread; ctypes takes the GIL for the call, so the dict updates are atomic.
    tensor = _LIVE.pop(address, None)
    if tensor is None:
        STRAY_DELETES.append(address)
    else:
        tensor.deleter_calls += 1


COUNTING_DELETER_ADDRESS = ctypes.cast(_counting_deleter, ctypes.c_void_p).value


def _buffer(nbytes: int):
    """A zeroed buffer of `nbytes` whose returned address is 256-byte aligned."""
    raw = (ctypes.c_uint8 * (nbytes + _ALIGNMENT))()
    base = ctypes.addressof(raw)
    return raw, base + (-base) % _ALIGNMENT


def storage_bytes(shape, dtype, flags=0) -> int:
    """Bytes a compact tensor of `shape` and `dtype` (code, bits, lanes) occupies; -1 when the
    shape is hostile (negative, or too large to allocate). Sub-byte types are packed unless
    IS_SUBBYTE_TYPE_PADDED is in `flags` (then one element per byte)."""
    numel = 1
    for extent in shape:
        if extent < 0:
            return -1
        numel *= extent
    _, bits, lanes = dtype
    if bits < 8 and flags & abi.FLAG_IS_SUBBYTE_TYPE_PADDED:
        nbytes = numel * lanes
    else:
        nbytes = (numel * bits * lanes + 7) // 8
    return nbytes if nbytes <= _MAX_BUFFER else -1


def row_major_strides(shape):
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))


class ReferenceTensor:
    """One managed tensor in C structs, every field settable.

    Arguments (all keyword but `shape` and `dtype`):

    - ``shape``: the int64 values of the shape array (wrapped to int64, so ``2**63`` arrives
      as a negative number); ``None`` makes ``shape`` NULL. The array holds exactly these
      values: an ``ndim`` larger than ``len(shape)`` makes a consumer read past it.
    - ``dtype``: ``(code, bits, lanes)``, stored as u8/u8/u16 (wrapped), any code.
    - ``versioned``: a ``DLManagedTensorVersioned`` (default) or a legacy ``DLManagedTensor``.
    - ``version``: ``(major, minor)`` of a versioned struct, default (1, 3); (2, 0) is a
      foreign major (the struct keeps the v1 layout, which the spec keeps stable up to
      ``flags``, so a conforming consumer may still call the deleter).
    - ``flags``: any u64 (``abi.FLAG_*``); ignored for legacy structs, which have none.
    - ``device``: ``(device_type, device_id)``, any int32 values.
    - ``ndim``: any int32; default ``len(shape)``.
    - ``strides``: ``DEFAULT`` (compact row-major, element units), ``None`` (NULL), or values.
    - ``data``: ``DEFAULT`` (a fresh zeroed 256-byte aligned buffer of the right size, NULL for
      a zero-size tensor, a 256-byte buffer for a hostile shape), ``None`` (NULL), or an address.
    - ``byte_offset``: u64; the default buffer is made large enough to hold it.
    - ``manager_ctx``: ``None`` or an address.
    - ``deleter``: ``COUNTING`` (the kit's thunk: counts into ``deleter_calls``, records a
      second call in ``STRAY_DELETES``), ``None`` (NULL), or the address of any C function.
    - ``fill``: for float32 ``arange(numel)`` is written into the default buffer
      (row-major), for any other dtype a byte pattern, so a consumer's view can be compared value
      by value (byte by byte).

    Attributes: ``address`` (of the struct), ``struct`` (the ctypes struct; edit it freely
    before handing the tensor out), ``data_address``, ``deleter_calls``, ``versioned``,
    ``capsule_name``. The struct and buffer stay alive while the deleter has not run, and
    afterwards while this object is referenced.
    """

    def __init__(
        self,
        shape=(4,),
        dtype=(2, 32, 1),
        *,
        versioned=True,
        version=(abi.DLPACK_MAJOR, abi.DLPACK_MINOR),
        flags=0,
        device=(abi.KDL_CPU, 0),
        ndim=None,
        strides=DEFAULT,
        data=DEFAULT,
        byte_offset=0,
        manager_ctx=None,
        deleter=COUNTING,
        fill=True,
    ):
        self.deleter_calls = 0
        self.versioned = versioned
        values = list(shape) if shape is not None else []
        self._shape = (c_int64 * max(len(values), 1))(*values)
        if strides is DEFAULT:
            strides = row_major_strides(values) if shape is not None else None
        self._strides = None if strides is None else (c_int64 * max(len(strides), 1))(*strides)
        self._buffer = None
        if data is DEFAULT:
            data = self._default_data(values, dtype, flags, byte_offset, fill)
        self.data_address = data or 0

        dl = abi.DLTensor()
        dl.data = data or None
        dl.device = abi.DLDevice(*device)
        dl.ndim = len(values) if ndim is None else ndim
        dl.dtype = abi.DLDataType(*dtype)
        dl.shape = None if shape is None else ctypes.cast(self._shape, POINTER(c_int64))
        dl.strides = None if self._strides is None else ctypes.cast(self._strides, POINTER(c_int64))
        dl.byte_offset = byte_offset
        if versioned:
            self.struct = abi.DLManagedTensorVersioned()
            self.struct.version = abi.DLPackVersion(*version)
            self.struct.flags = flags
        else:
            self.struct = abi.DLManagedTensor()
        self.struct.dl_tensor = dl
        self.struct.manager_ctx = manager_ctx
        self.struct.deleter = COUNTING_DELETER_ADDRESS if deleter == COUNTING else deleter
        self.address = ctypes.addressof(self.struct)
        _LIVE[self.address] = self

    def _default_data(self, shape, dtype, flags, byte_offset, fill):
        nbytes = storage_bytes(shape, dtype, flags)
        if nbytes == 0 and not byte_offset:
            return None  # 001: "If the array is of size zero, the data pointer ... NULL or 0"
        if nbytes < 0:
            nbytes = _ALIGNMENT
        self._buffer, address = _buffer(nbytes + byte_offset)
        if fill and tuple(dtype) == (2, 32, 1) and nbytes > 0:
            numel = nbytes // 4
            (ctypes.c_float * numel).from_address(address + byte_offset)[:] = [float(i) for i in range(numel)]
        elif fill and nbytes > 0:
            # Any other dtype: a byte pattern (bools 0 and 1, as DLPack's bool is), so that a view
            # or copy can be compared byte by byte.
            pattern = [i % 2 for i in range(nbytes)] if dtype[0] == abi.KDL_BOOL else [(7 * i + 1) % 256 for i in range(nbytes)]
            (ctypes.c_uint8 * nbytes).from_address(address + byte_offset)[:] = pattern
        return address

    @property
    def capsule_name(self) -> bytes:
        return abi.VERSIONED_NAME if self.versioned else abi.LEGACY_NAME

    @property
    def alive(self) -> bool:
        """True until the deleter (the counting thunk) has run."""
        return _LIVE.get(self.address) is self

    def capsule(self, name: bytes = None):
        """A fresh capsule holding this tensor, named `name` (default: the unconsumed name for
        its struct). The kit applies the destructor contract to it in :func:`settle`."""
        capsule = abi.new_capsule(self.address, name or self.capsule_name)
        _OUTSTANDING.append((capsule, self))
        return capsule


def capsule_names(tensor) -> list:
    """Names of the not yet settled capsules holding `tensor` (a consumer renames them)."""
    return [abi.capsule_name(capsule) for capsule, held in _OUTSTANDING if held is tensor]


def settle() -> int:
    """Apply the capsule destructor contract to every kit capsule nobody else holds: call the
    deleter of those still named ``dltensor``/``dltensor_versioned``, leave consumed ones.
    Returns how many capsules are still held elsewhere. Run ``gc.collect()`` first."""
    still_held = []
    for capsule, tensor in _OUTSTANDING:
        # Two references: the list entry's and getrefcount's own argument.
        if sys.getrefcount(capsule) > 3:
            still_held.append((capsule, tensor))
            continue
        name = abi.capsule_name(capsule)
        deleter = tensor.struct.deleter
        if name in (abi.VERSIONED_NAME, abi.LEGACY_NAME) and deleter:
            abi.call_deleter(tensor.address, deleter)
    _OUTSTANDING[:] = still_held
    return len(still_held)


class ReferenceProducer:
    """A DLPack producer object over :class:`ReferenceTensor`; each ``__dlpack__`` call makes a
    fresh tensor from ``tensor_kwargs`` and returns its capsule.

    - ``legacy_only=True``: a pre-2023.12 producer: ``__dlpack__(stream=None)`` only; any of
      ``max_version``, ``dl_device``, ``copy`` raises TypeError (the consumer must retry
      without them, 002 "except TypeError: x.__dlpack__(...)"), and capsules are legacy.
    - Otherwise ``max_version=None`` gets a legacy capsule and a major ≥ 1 a versioned one.
      ``copy=True`` makes the fresh buffer carry IS_COPIED.
    - ``__dlpack_device__`` answers ``tensor_kwargs['device']`` (default CPU 0).

    ``calls`` lists the keyword arguments of every ``__dlpack__`` call; ``made`` every tensor.
    """

    def __init__(self, *, legacy_only=False, **tensor_kwargs):
        self.legacy_only = legacy_only
        self.tensor_kwargs = tensor_kwargs
        self.device = tuple(tensor_kwargs.get("device", (abi.KDL_CPU, 0)))
        self.calls: list = []
        self.made: list = []

    def __dlpack__(self, *, stream=None, **kwargs):
        if self.legacy_only and kwargs:
            raise TypeError(f"__dlpack__() got unexpected keyword arguments {sorted(kwargs)}")
        self.calls.append(dict(kwargs, stream=stream))
        options = dict(self.tensor_kwargs)
        max_version = kwargs.get("max_version")
        if self.legacy_only or max_version is None or max_version[0] < 1:
            options["versioned"] = False
        elif kwargs.get("copy"):
            options["flags"] = options.get("flags", 0) | abi.FLAG_IS_COPIED
        tensor = ReferenceTensor(**options)
        self.made.append(tensor)
        return tensor.capsule()

    def __dlpack_device__(self):
        return self.device

    @property
    def deleter_calls(self) -> list:
        return [t.deleter_calls for t in self.made]

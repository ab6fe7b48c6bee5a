"""Taking a producer's capsule as a consumer would, and counting its deleter's calls.

The kit consumes foreign capsules itself (rename to ``used_…``, later call the deleter once) and
measures the deleter by swapping the struct's ``deleter`` field for a spy that counts, puts the
producer's deleter back and forwards the first call only (a second call is counted, never
forwarded, so a producer's double delete cannot become the kit's double free).
"""

from __future__ import annotations

import ctypes
import math

from . import abi

_DELETER_OFFSET = {True: abi.DLManagedTensorVersioned.deleter.offset, False: abi.DLManagedTensor.deleter.offset}
_SPIED: dict = {}  # struct address -> [producer's deleter, calls, versioned]


@abi.Deleter
def _spy(address):
    entry = _SPIED.get(address)
    if entry is None:
        return  # not ours; cannot happen unless a producer copies the deleter elsewhere
    entry[1] += 1
    if entry[1] == 1:
        original, _, versioned = entry
        ctypes.c_void_p.from_address(address + _DELETER_OFFSET[versioned]).value = original
        abi.call_deleter(address, original)


_SPY_ADDRESS = ctypes.cast(_spy, ctypes.c_void_p).value


class Spied:
    """The deleter of the managed tensor at `address`, replaced by the counting spy."""

    def __init__(self, address: int, versioned: bool):
        field = ctypes.c_void_p.from_address(address + _DELETER_OFFSET[versioned])
        self.address = address
        self.had_deleter = bool(field.value)
        if self.had_deleter:
            _SPIED[address] = [field.value, 0, versioned]
            field.value = _SPY_ADDRESS

    @property
    def calls(self) -> int:
        entry = _SPIED.get(self.address)
        return entry[1] if entry else 0

    def delete(self) -> None:
        """Call the deleter as the consumer that owns the tensor does."""
        if self.had_deleter:
            abi.call_deleter(self.address, _SPY_ADDRESS)

    def forget(self) -> int:
        """Stop tracking (the address may be reused by a later allocation); returns calls."""
        entry = _SPIED.pop(self.address, None)
        return entry[1] if entry else 0


def versioned_name(name) -> bool:
    return name is not None and name.endswith(abi.VERSIONED_NAME)


def consume(capsule):
    """Take ownership as a consumer: rename to ``used_…``, return (info, Spied). The caller
    must call ``.delete()`` on the second element exactly once (and then ``.forget()``)."""
    info = abi.read_capsule(capsule)
    versioned = versioned_name(abi.capsule_name(capsule))
    abi.rename_capsule(capsule, abi.USED_VERSIONED_NAME if versioned else abi.USED_LEGACY_NAME)
    return info, Spied(info["address"], versioned)


def export(obj, **kwargs):
    """``obj.__dlpack__(**kwargs)``: (capsule, None) or (None, the exception)."""
    try:
        return obj.__dlpack__(**kwargs), None
    except Exception as exc:  # noqa: BLE001 - the exception's type is what the checks judge
        return None, exc


def export_info(obj, *, values=False, any_major=False, **kwargs):
    """(info of the capsule, None) or (None, exception); the capsule is consumed and deleted
    at once (only its description is kept: data pointers stay comparable while `obj` lives).
    With `values`, ``info["values"]`` holds its float32 elements in row-major order, read
    before the deletion (a CPU tensor's; None on another device). A capsule of another DLPack
    major (only its version may be read), or one whose shape is NULL with ndim > 0, is the
    exception that says so, unless `any_major` asks for what there is (the version checks)."""
    capsule, error = export(obj, **kwargs)
    if error is not None:
        return None, error
    if not abi.is_capsule(capsule):
        return None, TypeError(f"__dlpack__ returned {type(capsule).__name__}, not a capsule")
    try:
        info, spied = consume(capsule)
    except ValueError as exc:  # a capsule of a name DLPack does not give: its destructor is its own
        del capsule
        return None, exc.with_traceback(None)
    unreadable = None if any_major else _unreadable(info)
    if unreadable is not None:
        spied.delete()
        spied.forget()
        return None, unreadable
    if values:
        on_cpu = info["device"][0] == abi.KDL_CPU and (info["data"] or not math.prod(info["shape"]))
        info["values"] = read_values(info, row_major(info["shape"])) if on_cpu else None
    spied.delete()
    spied.forget()
    return info, None


def _unreadable(info):
    """Why the kit cannot describe the tensor of a consumed capsule (a ValueError), or None."""
    if "device" not in info:
        major, minor = info["version"]
        return ValueError(f"a capsule of DLPack {major}.{minor}: only its version may be read (the kit reads DLPack 1)")
    if info["ndim"] > 0 and info["shape"] is None:
        return ValueError(f"shape is NULL with ndim {info['ndim']}")
    return None


# How far past its compact size a tensor the kit asked a factory for may reach before the kit
# refuses to read it: a fresh array reaches no further than its own elements, and strides that
# reach 2^40 bytes (a hostile or broken producer) would crash the kit's process, not fail a row.
SPAN_SLACK = 16
SPAN_FLOOR = 1 << 20


def _offsets(info, positions, itemsize: int) -> list:
    """The byte offset of each multi-index from the first element (strides from `info`, in
    elements; NULL strides row-major); ValueError when they span far more than the tensor's own
    elements (`SPAN_SLACK`): not read."""
    strides = info["strides"] if info["strides"] is not None else compact_strides(info["shape"])
    offsets = [itemsize * sum(i * s for i, s in zip(index, strides)) for index in positions]
    if offsets:
        numel = math.prod(info["shape"])
        span = max(offsets) - min(offsets) + itemsize
        if span > max(SPAN_SLACK * numel * itemsize, SPAN_FLOOR):
            raise ValueError(f"not read: strides {tuple(strides)} span {span} bytes for {numel} elements of "
                             f"{itemsize} bytes, beyond any memory of the tensor's own")
    return offsets


def read_bytes(info, positions, itemsize: int) -> list:
    """The bytes of each element of a CPU tensor at the given multi-indices (strides from
    `info`, in elements; NULL strides row-major)."""
    base = info["data"] + info["byte_offset"]
    return [ctypes.string_at(base + offset, itemsize) for offset in _offsets(info, positions, itemsize)]


def row_major(shape) -> list:
    """Every multi-index of `shape`, in row-major order."""
    positions = [()]
    for extent in shape:
        positions = [p + (i,) for p in positions for i in range(extent)]
    return positions


def compact_strides(shape) -> tuple:
    """Row-major compact strides in elements: what NULL strides mean (DLPack before 1.2)."""
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))


def describe_error(exc) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text[:90]}"


def read_values(info, positions) -> list:
    """float32 values of a CPU tensor at the given multi-indices (strides from `info`)."""
    base = info["data"] + info["byte_offset"]
    return [ctypes.c_float.from_address(base + offset).value for offset in _offsets(info, positions, 4)]

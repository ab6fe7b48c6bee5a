"""Producer checks for arrays that speak an older array protocol instead of DLPack (docs/design.md
R12): the buffer protocol (PEP 3118), ``__array_interface__`` (v3) and
``__cuda_array_interface__`` (v2, v3). The kit reads each description itself (the buffer through
``PyObject_GetBuffer``, the interfaces as dicts), checks it is well formed, and holds dlpx's
import to it: the same memory, shape, strides and dtype, the values (host memory), read-only
where the exporter is, the exporter kept alive exactly while the import lives."""

from __future__ import annotations

import ctypes
import gc
import struct
import sys

from . import abi
from .cases import DTYPES, LAYOUT_CASES
from .capsules import describe_error, export_info, read_values
from .clauses import Clause, RULINGS
from .results import Checks

DLPACK_FIRST = Clause(RULINGS, "R12", "DLPack first, always")
PROTOCOL_ORDER = Clause(RULINGS, "R12", "Otherwise, in this order: `__cuda_array_interface__`")
BYTE_STRIDES = Clause(RULINGS, "R12", "Byte strides must divide by the item size")
READ_ONLY = Clause(RULINGS, "R12", "Read-only stays read-only")
KEEPS_EXPORTER = Clause(RULINGS, "R12", "keeps the exporter (or its `Py_buffer`) alive until its deleter runs")
MASK = Clause(RULINGS, "R12", "`mask` refused")
V1 = (1, 0)
REFCOUNT_ROUNDS = 200

# (typestr kind, bytes) and PEP 3118 characters per dtype name the kit asks for.
KINDS = {"bool": "b", "int": "i", "uint": "u", "float": "f", "complex": "c"}


class PyBuffer(ctypes.Structure):
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.py_object), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.POINTER(ctypes.c_ssize_t)),
                ("strides", ctypes.POINTER(ctypes.c_ssize_t)), ("suboffsets", ctypes.c_void_p),
                ("internal", ctypes.c_void_p)]


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(PyBuffer), ctypes.c_int]
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(PyBuffer)]
PyBUF_RECORDS_RO = 0x0004 | 0x0008 | 0x0010 | 0x0100  # ND | FORMAT | STRIDES


def protocol_of(x) -> str | None:
    """The protocol a consumer reads `x` through when it has no DLPack (R12's order)."""
    for name in ("__cuda_array_interface__", "__array_interface__"):
        if hasattr(x, name):
            return name
    try:
        memoryview(x).release()
    except TypeError:
        return None
    return "buffer protocol"


def describe(x, protocol: str) -> dict:
    """What the protocol says of `x`: data, shape, byte strides (None: C order), item size,
    the dtype spelling, read-only, and the device type."""
    if protocol == "buffer protocol":
        view = PyBuffer()
        if _get_buffer(x, ctypes.byref(view), PyBUF_RECORDS_RO) != 0:
            raise BufferError("PyObject_GetBuffer failed")
        try:
            shape = tuple(view.shape[i] for i in range(view.ndim))
            strides = tuple(view.strides[i] for i in range(view.ndim)) if view.strides else None
            spelling = (view.format or b"B").decode()
            return {"data": view.buf or 0, "shape": shape, "strides": strides, "itemsize": view.itemsize,
                    "spelling": spelling, "readonly": bool(view.readonly), "device": abi.KDL_CPU}
        finally:
            _release_buffer(ctypes.byref(view))
    interface = getattr(x, protocol)
    data = interface.get("data")
    if isinstance(data, tuple):
        address, readonly = int(data[0]), bool(data[1])
    else:  # a buffer exporter (or None: the object itself), at `offset`
        inner = describe(x if data is None else data, "buffer protocol")
        address, readonly = inner["data"] + int(interface.get("offset", 0)), inner["readonly"]
    typestr = interface["typestr"]
    return {"data": address, "shape": tuple(interface["shape"]), "strides": interface.get("strides"),
            "itemsize": int(typestr[2:]), "spelling": typestr, "readonly": readonly,
            "device": abi.KDL_CUDA if protocol == "__cuda_array_interface__" else abi.KDL_CPU,
            "version": interface.get("version"), "mask": interface.get("mask")}


def check_protocol_producer(make, protocol, *, readonly=None, undescribable=None, checks=None) -> Checks:
    """Every check of an array from ``make(shape, dtype_name)`` that speaks `protocol` only."""
    import dlpx  # the consumer under test

    checks = Checks() if checks is None else checks
    x = make((2, 3), "float32")
    checks.record("protocol.no_dlpack", not hasattr(x, "__dlpack__"), f"{type(x).__name__} speaks {protocol}", DLPACK_FIRST)
    description = describe(x, protocol)
    _check_description(description, protocol, checks)
    for name, build, shape, expected in LAYOUT_CASES:
        _check_import(f"layout.{name}", build, make, protocol, shape, expected, checks)
    for name, expected in DTYPES.items():
        try:
            y = make((4,), name)
        except Exception:  # noqa: BLE001 - the library has no such dtype
            continue
        t, error = _import(dlpx, y)
        ok = isinstance(error, BufferError) or (t is not None and t.dtype_raw == expected)
        checks.record(f"dtype.{name}", ok, describe_error(error) if error else f"dlpx reads {t.dtype}", PROTOCOL_ORDER)
    if readonly is not None:
        t, error = _import(dlpx, readonly(x))
        checks.record("read_only.kept", t is not None and t.readonly, describe_error(error) if error else f"readonly {t.readonly}", READ_ONLY)
    else:
        checks.skip("read_only.kept", "no factory for read-only arrays", READ_ONLY)
    if undescribable is not None:
        _, error = _import(dlpx, undescribable())
        checks.record("protocol.buffer_error", isinstance(error, BufferError), describe_error(error) if error else "imported", BYTE_STRIDES)
    _check_lifetime(dlpx, x, checks)
    return checks


def _check_description(d, protocol, checks):
    if protocol != "buffer protocol":
        versions = (2, 3) if protocol == "__cuda_array_interface__" else (3,)
        checks.record("protocol.version", d["version"] in versions, f"version {d['version']}", PROTOCOL_ORDER)
        checks.record("protocol.no_mask", d["mask"] is None, f"mask {d['mask']!r}"[:80], MASK)
    else:
        try:
            ok = struct.calcsize(d["spelling"]) == d["itemsize"]
        except struct.error:
            ok = False
        checks.record("protocol.format_itemsize", ok, f"format {d['spelling']!r}, itemsize {d['itemsize']}", PROTOCOL_ORDER)
    strides = d["strides"] or ()
    whole = all(s % d["itemsize"] == 0 for s in strides)
    checks.record("protocol.whole_item_strides", whole, f"strides {d['strides']}, itemsize {d['itemsize']}", BYTE_STRIDES, required=False)


def _import(dlpx, x):
    try:
        return dlpx.from_dlpack(x), None
    except Exception as exc:  # noqa: BLE001 - its type is what the checks judge
        return None, exc


def _check_import(name, build, make, protocol, shape, expected, checks):
    import dlpx

    try:
        x = build(make)
    except Exception as exc:  # noqa: BLE001 - the protocol's object cannot take this layout
        if protocol != "buffer protocol":
            checks.skip(name, f"cannot make it: {describe_error(exc)}", PROTOCOL_ORDER)
            return
        # A buffer exporter that cannot slice itself (a memoryview of 2 dimensions): the same
        # layout through the buffer protocol, as numpy's view of its buffer exports it.
        import numpy as np

        x = memoryview(build(lambda shape, dtype: np.asarray(make(shape, dtype))))
    d = describe(x, protocol)
    t, error = _import(dlpx, x)
    if error is not None:
        checks.record(name, False, describe_error(error), PROTOCOL_ORDER)
        return
    info, error = export_info(t, max_version=V1)
    strides = None if d["strides"] is None else tuple(s // d["itemsize"] for s in d["strides"])
    same = (info["data"] + info["byte_offset"] == d["data"] or not d["data"]) and info["shape"] == shape
    same &= strides is None or info["strides"] == strides
    positions = _positions(shape)
    values = read_values(info, positions) if d["device"] == abi.KDL_CPU and positions else expected
    ok = same and values == expected
    checks.record(name, ok, f"data {'same' if same else 'DIFFERS'}, shape {info['shape']}, values {'as expected' if values == expected else values}", PROTOCOL_ORDER)


def _positions(shape):
    positions = [()]
    for extent in shape:
        positions = [p + (i,) for p in positions for i in range(extent)]
    return positions


def _check_lifetime(dlpx, x, checks):
    gc.collect()
    before = sys.getrefcount(x)
    t, error = _import(dlpx, x)
    held = sys.getrefcount(x) > before
    del t
    gc.collect()
    checks.record("lifetime.exporter_held", error is None and held and sys.getrefcount(x) == before,
                  describe_error(error) if error else f"held while imported: {held}", KEEPS_EXPORTER)
    for _ in range(REFCOUNT_ROUNDS):
        _import(dlpx, x)
    gc.collect()
    checks.record("refcount.flat", sys.getrefcount(x) == before, f"sys.getrefcount {before} -> {sys.getrefcount(x)} over {REFCOUNT_ROUNDS} imports", KEEPS_EXPORTER)

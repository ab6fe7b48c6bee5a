"""The DLPack 1.3 ABI and CPython's capsule functions, read through ctypes: the one reading, for
the kit and for dlpx's own test suite (tests/python/ imports it; it ships in the wheel).

An independent reading of the ABI (dlpx's own ``src/abi.rs`` is not consulted), so that the kit
judges dlpx by the same yardstick as every other library. Sizes are asserted at import: a
mistyped struct here would make every check and every test lie.
"""

from __future__ import annotations

import ctypes
from ctypes import (
    CFUNCTYPE,
    POINTER,
    PYFUNCTYPE,
    Structure,
    c_char_p,
    c_int,
    c_int32,
    c_int64,
    c_uint8,
    c_uint16,
    c_uint32,
    c_uint64,
    c_void_p,
    py_object,
)

DLPACK_MAJOR, DLPACK_MINOR = 1, 3
FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1
FLAG_IS_SUBBYTE_TYPE_PADDED = 1 << 2

KDL_CPU, KDL_CUDA, KDL_HEXAGON = 1, 2, 16
KDL_BOOL = 6  # DLDataTypeCode kDLBool

VERSIONED_NAME, LEGACY_NAME = b"dltensor_versioned", b"dltensor"
USED_VERSIONED_NAME, USED_LEGACY_NAME = b"used_dltensor_versioned", b"used_dltensor"
EXCHANGE_API_NAME = b"dlpack_exchange_api"


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [
        ("data", c_void_p),
        ("device", DLDevice),
        ("ndim", c_int32),
        ("dtype", DLDataType),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),
        ("byte_offset", c_uint64),
    ]


class DLManagedTensor(Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", c_void_p)]


class DLManagedTensorVersioned(Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", c_void_p),
        ("deleter", c_void_p),
        ("flags", c_uint64),
        ("dl_tensor", DLTensor),
    ]


class DLPackExchangeAPIHeader(Structure):
    _fields_ = [("version", DLPackVersion), ("prev_api", c_void_p)]


class DLPackExchangeAPI(Structure):
    _fields_ = [
        ("header", DLPackExchangeAPIHeader),
        ("managed_tensor_allocator", c_void_p),
        ("managed_tensor_from_py_object_no_sync", c_void_p),
        ("managed_tensor_to_py_object_no_sync", c_void_p),
        ("dltensor_from_py_object_no_sync", c_void_p),
        ("current_work_stream", c_void_p),
    ]


class DlpxTensorView(Structure):
    """dlpx.h's ``DlpxTensorView``: a kernel's view of a Python object's tensor
    (``dlpx_view_of``, ``dlpx_read_view_of``): the tensor, its owner (NULL for a non-owning view)
    and its DLPack flags (READ_ONLY where it may not be written). dlpx's own struct, kept here
    beside DLPack's so that every ctypes reader of it reads this one."""

    _fields_ = [("tensor", DLTensor), ("owner", c_void_p), ("flags", c_uint64)]


# dlpack.h's v1.3 structs on x86-64: a layout that drifted from the header fails here, at import.
assert ctypes.sizeof(DLTensor) == 48
assert ctypes.sizeof(DLManagedTensor) == 64
assert ctypes.sizeof(DLManagedTensorVersioned) == 80
assert DLManagedTensorVersioned.flags.offset == 24
assert DLManagedTensorVersioned.dl_tensor.offset == 32
assert ctypes.sizeof(DLPackExchangeAPIHeader) == 16
assert ctypes.sizeof(DLPackExchangeAPI) == 56
assert ctypes.sizeof(DlpxTensorView) == 64

# The exchange table's entry types. PYFUNCTYPE keeps the GIL and turns a Python error the entry
# set into an exception (the PyObject entries promise -1 with an error set); CFUNCTYPE releases
# the GIL, as tvm-ffi does around the allocator and current_work_stream.
Deleter = CFUNCTYPE(None, c_void_p)
SetError = CFUNCTYPE(None, c_void_p, c_char_p, c_char_p)
Allocator = CFUNCTYPE(c_int, POINTER(DLTensor), POINTER(c_void_p), c_void_p, c_void_p)
FromPyObject = PYFUNCTYPE(c_int, py_object, POINTER(c_void_p))
ToPyObject = PYFUNCTYPE(c_int, c_void_p, POINTER(c_void_p))
DLTensorFromPyObject = PYFUNCTYPE(c_int, py_object, POINTER(DLTensor))
CurrentWorkStream = CFUNCTYPE(c_int, c_int32, c_int32, POINTER(c_void_p))

# ---- CPython capsule functions, on a private handle so nobody else's argtypes interfere -------

_py = ctypes.PyDLL(None)


def _fn(name, restype, *argtypes):
    f = getattr(_py, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


_GetName = _fn("PyCapsule_GetName", c_void_p, py_object)
_GetPointer = _fn("PyCapsule_GetPointer", c_void_p, py_object, c_void_p)
_IsValid = _fn("PyCapsule_IsValid", c_int, py_object, c_char_p)
_New = _fn("PyCapsule_New", py_object, c_void_p, c_void_p, c_void_p)
_SetName = _fn("PyCapsule_SetName", c_int, py_object, c_void_p)
_GetDestructor = _fn("PyCapsule_GetDestructor", c_void_p, py_object)
_DecRef = _fn("Py_DecRef", None, c_void_p)

# CPython keeps the name pointer a capsule is given, so every name the kit sets lives forever.
_NAMES: dict = {}


def static_name(name: bytes) -> int:
    """The address of a process-lifetime NUL-terminated copy of `name`."""
    if name not in _NAMES:
        _NAMES[name] = ctypes.create_string_buffer(name)
    return ctypes.addressof(_NAMES[name])


def is_capsule(obj) -> bool:
    return type(obj).__name__ == "PyCapsule"


def capsule_name(capsule):
    """The capsule's name as bytes (None for a nameless capsule)."""
    raw = _GetName(capsule)
    return ctypes.string_at(raw) if raw else None


def capsule_pointer(capsule) -> int:
    """The pointer a capsule holds, whatever its name."""
    return _GetPointer(capsule, _GetName(capsule)) or 0


def new_capsule(address: int, name: bytes):
    """A capsule holding `address` with no destructor (its owner decides when to delete)."""
    return _New(address, static_name(name), None)


def rename_capsule(capsule, name: bytes) -> None:
    if _SetName(capsule, static_name(name)) != 0:
        raise RuntimeError("PyCapsule_SetName failed")


def capsule_has_destructor(capsule) -> bool:
    """Whether the capsule has a destructor (DLPack: one that deletes an unconsumed tensor)."""
    return bool(_GetDestructor(capsule))


def capsule_valid(capsule, name: bytes) -> bool:
    return bool(_IsValid(capsule, name))


def decref(address: int) -> None:
    _DecRef(address)


def object_at(address: int):
    """A new reference to the object at `address` (the reference the caller holds stays)."""
    return ctypes.cast(address, py_object).value


def call_deleter(address: int, deleter: int) -> None:
    Deleter(deleter)(address)


def prototype(shape, dtype=(2, 32, 1), device=(KDL_CPU, 0)) -> DLTensor:
    """An allocator prototype (float32 by default); it keeps its shape array alive."""
    shape_array = (c_int64 * max(len(shape), 1))(*shape)
    dl = DLTensor()
    dl.ndim = len(shape)
    dl.shape = ctypes.cast(shape_array, POINTER(c_int64))
    dl.dtype = DLDataType(*dtype)
    dl.device = DLDevice(*device)
    dl._keep = shape_array  # noqa: SLF001 - the shape array lives as long as the prototype
    return dl


# ---- reading what a capsule or a table holds --------------------------------------------------


def dims(pointer, ndim: int):
    """`ndim` int64 read from a `POINTER(c_int64)`; None when it is NULL."""
    if not pointer:
        return None
    return tuple(pointer[i] for i in range(ndim))


def describe(dl: DLTensor) -> dict:
    """A DLTensor's fields as plain values (shape/strides None when NULL, () when ndim is 0)."""
    return {
        "data": dl.data or 0,
        "device": (dl.device.device_type, dl.device.device_id),
        "ndim": dl.ndim,
        "dtype": (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes),
        "shape": dims(dl.shape, dl.ndim) if dl.ndim > 0 else (),
        "strides": dims(dl.strides, dl.ndim) if dl.ndim > 0 else (),
        "byte_offset": dl.byte_offset,
    }


def managed_at(address: int, versioned: bool = True):
    """The managed tensor struct at `address`: versioned (the default) or legacy."""
    return (DLManagedTensorVersioned if versioned else DLManagedTensor).from_address(address)


def read_managed(address: int, versioned: bool) -> dict:
    """What a managed tensor holds; a versioned one of a foreign major gives only its version
    and deleter (the spec forbids reading further)."""
    m = managed_at(address, versioned)
    info = {"address": address, "versioned": versioned, "deleter": m.deleter or 0}
    if versioned:
        info.update(version=(m.version.major, m.version.minor))
        if m.version.major != DLPACK_MAJOR:
            return info
        info.update(flags=m.flags)
    else:
        info.update(version=None, flags=None)
    info.update(describe(m.dl_tensor))
    return info


def read_capsule(capsule) -> dict:
    """What a DLPack capsule (consumed or not) holds, plus its name."""
    name = capsule_name(capsule)
    if name not in (VERSIONED_NAME, LEGACY_NAME, USED_VERSIONED_NAME, USED_LEGACY_NAME):
        raise ValueError(f"not a DLPack capsule: {name!r}")
    info = read_managed(capsule_pointer(capsule), name.endswith(VERSIONED_NAME))
    info["name"] = name.decode()
    return info


def exchange_table_address(cls):
    """(address, how) of the exchange table `cls` publishes: the v1.3 capsule first, then the
    older integer attribute (docs/design.md, R1); (0, None) when it publishes neither."""
    capsule = getattr(cls, "__dlpack_c_exchange_api__", None)
    if capsule is not None and is_capsule(capsule) and capsule_valid(capsule, EXCHANGE_API_NAME):
        return capsule_pointer(capsule), "capsule"
    integer = getattr(cls, "__c_dlpack_exchange_api__", None)
    if isinstance(integer, int) and integer:
        return integer, "int"
    return 0, None


def exchange_table(cls) -> DLPackExchangeAPI:
    """The exchange table `cls` publishes (see :func:`exchange_table_address`); it must publish one."""
    address, _ = exchange_table_address(cls)
    if not address:
        raise ValueError(f"{cls.__qualname__} publishes no exchange table")
    return DLPackExchangeAPI.from_address(address)

"""The DLPack 1.3 ABI and the CPython capsule functions, seen through ctypes, for the tests.

Nothing here calls dlpx: it is an independent reading of the ABI (DLPack 1.3 as the spec texts
define it) so the tests can inspect what dlpx exports and build hand-made producers whose
deleters count their calls.
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

import numpy as np

# ---- constants ------------------------------------------------------------------------------

DLPACK_MAJOR, DLPACK_MINOR = 1, 3
FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1
FLAG_IS_SUBBYTE_TYPE_PADDED = 1 << 2

KDL_CPU, KDL_CUDA = 1, 2

# ---- structs --------------------------------------------------------------------------------


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


# The x86-64 sizes the architecture notes state; a wrong struct here would make every test lie.
assert ctypes.sizeof(DLTensor) == 48
assert ctypes.sizeof(DLManagedTensor) == 64
assert ctypes.sizeof(DLManagedTensorVersioned) == 80
assert DLManagedTensorVersioned.flags.offset == 24
assert DLManagedTensorVersioned.dl_tensor.offset == 32
assert ctypes.sizeof(DLPackExchangeAPIHeader) == 16
assert ctypes.sizeof(DLPackExchangeAPI) == 56

# Function types of the exchange table. PYFUNCTYPE keeps the GIL and turns a set Python error
# into an exception, which is what the PyObject entry points promise (-1 with an error set).
Deleter = CFUNCTYPE(None, c_void_p)
FromPyObject = PYFUNCTYPE(c_int, py_object, POINTER(c_void_p))
ToPyObject = PYFUNCTYPE(c_int, c_void_p, POINTER(c_void_p))
DLTensorFromPyObject = PYFUNCTYPE(c_int, py_object, POINTER(DLTensor))
SetError = CFUNCTYPE(None, c_void_p, c_char_p, c_char_p)
Allocator = CFUNCTYPE(c_int, POINTER(DLTensor), POINTER(c_void_p), c_void_p, SetError)
CurrentWorkStream = CFUNCTYPE(c_int, c_int32, c_int32, POINTER(c_void_p))

# ---- CPython capsule functions (a private handle, so nobody else's argtypes interfere) -------

_py = ctypes.PyDLL(None)


def _fn(name, restype, *argtypes):
    f = getattr(_py, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


_GetName = _fn("PyCapsule_GetName", c_char_p, py_object)
_GetPointer = _fn("PyCapsule_GetPointer", c_void_p, py_object, c_char_p)
_IsValid = _fn("PyCapsule_IsValid", c_int, py_object, c_char_p)
_New = _fn("PyCapsule_New", py_object, c_void_p, c_char_p, c_void_p)
_SetName = _fn("PyCapsule_SetName", c_int, py_object, c_char_p)
_DecRef = _fn("Py_DecRef", None, c_void_p)

# Capsule names must outlive their capsules: CPython keeps the pointer.
_NAMES: dict[bytes, ctypes.Array] = {}


def _static_name(name: bytes) -> ctypes.Array:
    if name not in _NAMES:
        _NAMES[name] = ctypes.create_string_buffer(name)
    return _NAMES[name]


def capsule_name(capsule) -> str:
    """The capsule's name (raises ValueError for a non-capsule)."""
    raw = _GetName(capsule)
    return raw.decode() if raw is not None else None


def capsule_pointer(capsule) -> int:
    """The pointer a capsule holds, whatever its name."""
    return _GetPointer(capsule, _GetName(capsule))


def is_capsule(obj) -> bool:
    return type(obj).__name__ == "PyCapsule"


def new_capsule(address: int, name: bytes):
    """A capsule with no destructor holding `address` (tests free what it holds themselves)."""
    buffer = _static_name(name)
    return _New(address, ctypes.cast(buffer, c_char_p), None)


def rename_capsule(capsule, name: bytes) -> None:
    buffer = _static_name(name)
    if _SetName(capsule, ctypes.cast(buffer, c_char_p)) != 0:
        raise RuntimeError("PyCapsule_SetName failed")


def decref(address: int) -> None:
    _DecRef(address)


def object_at(address: int):
    """A new reference to the Python object at `address` (the caller's own reference stays)."""
    return ctypes.cast(address, py_object).value


def versioned_at(address: int) -> DLManagedTensorVersioned:
    return DLManagedTensorVersioned.from_address(address)


def legacy_at(address: int) -> DLManagedTensor:
    return DLManagedTensor.from_address(address)


def call_deleter(address: int, deleter: int) -> None:
    Deleter(deleter)(address)


def prototype(shape, device=(KDL_CPU, 0), dtype=(2, 32, 1)) -> DLTensor:
    """An allocator prototype (float32 by default); it keeps its shape array alive."""
    dims_array = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    proto = DLTensor()
    proto.device = DLDevice(*device)
    proto.ndim = len(shape)
    proto.dtype = DLDataType(*dtype)
    proto.shape = ctypes.cast(dims_array, POINTER(ctypes.c_int64))
    proto._dims = dims_array  # noqa: SLF001 - lifetime of the shape pointer
    return proto


def dims(pointer, ndim: int):
    """A tuple of `ndim` int64 read from a `POINTER(c_int64)` (None when it is NULL)."""
    if not pointer:
        return None
    return tuple(pointer[i] for i in range(ndim))


def describe(dl: DLTensor) -> dict:
    """The fields of a DLTensor as plain Python values."""
    return {
        "data": dl.data or 0,
        "device": (dl.device.device_type, dl.device.device_id),
        "ndim": dl.ndim,
        "dtype": (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes),
        "shape": dims(dl.shape, dl.ndim) if dl.ndim else (),
        "strides": dims(dl.strides, dl.ndim) if dl.ndim else (),
        "byte_offset": dl.byte_offset,
    }


def read_capsule(capsule) -> dict:
    """What a DLPack capsule (versioned or legacy, consumed or not) holds."""
    name = capsule_name(capsule)
    address = capsule_pointer(capsule)
    if name.endswith("dltensor_versioned"):
        m = versioned_at(address)
        info = describe(m.dl_tensor)
        info.update(
            name=name,
            address=address,
            version=(m.version.major, m.version.minor),
            flags=m.flags,
            deleter=m.deleter or 0,
        )
        return info
    if name.endswith("dltensor"):
        m = legacy_at(address)
        info = describe(m.dl_tensor)
        info.update(name=name, address=address, version=None, flags=None, deleter=m.deleter or 0)
        return info
    raise ValueError(f"not a DLPack capsule: {name!r}")


def exchange_table(cls) -> DLPackExchangeAPI:
    """The v1 exchange table a class publishes through its capsule attribute."""
    address = _GetPointer(cls.__dlpack_c_exchange_api__, b"dlpack_exchange_api")
    return DLPackExchangeAPI.from_address(address)


def exchange_table_address(cls) -> int:
    return _GetPointer(cls.__dlpack_c_exchange_api__, b"dlpack_exchange_api")


# ---- hand-made producers whose deleters count ------------------------------------------------

_LIVE: dict[int, "Managed"] = {}


@Deleter
def _counting_deleter(address):
    managed = _LIVE.pop(address, None)
    if managed is not None:
        managed.calls += 1
    else:
        # A second call for the same tensor, or a stranger: remember it, the test will look.
        STRAY_DELETES.append(address)


STRAY_DELETES: list[int] = []
COUNTING_DELETER_ADDRESS = ctypes.cast(_counting_deleter, c_void_p).value


class Managed:
    """A managed tensor (versioned or legacy) over a numpy array's memory, made by the test.

    `calls` counts the deleter's calls; the struct and the array stay alive until the deleter
    runs (then the record leaves the registry; the test may still hold it to read `calls`)."""

    def __init__(
        self,
        array: np.ndarray,
        *,
        versioned: bool = True,
        version: tuple[int, int] = (DLPACK_MAJOR, DLPACK_MINOR),
        flags: int = 0,
        dtype: tuple[int, int, int] | None = None,
        device: tuple[int, int] = (KDL_CPU, 0),
        null_strides: bool = False,
        ndim: int | None = None,
        null_data: bool = False,
    ):
        self.array = array
        self.calls = 0
        itemsize = array.itemsize
        nd = array.ndim
        self._shape = (c_int64 * max(nd, 1))(*array.shape)
        self._strides = (c_int64 * max(nd, 1))(*(s // itemsize for s in array.strides))
        dl = DLTensor()
        dl.data = None if null_data else (array.ctypes.data or None)
        dl.device = DLDevice(*device)
        dl.ndim = nd if ndim is None else ndim
        dl.dtype = DLDataType(*(dtype or numpy_dtype_code(array.dtype)))
        dl.shape = ctypes.cast(self._shape, POINTER(c_int64)) if nd else None
        dl.strides = None if (null_strides or not nd) else ctypes.cast(self._strides, POINTER(c_int64))
        dl.byte_offset = 0
        if versioned:
            self.struct = DLManagedTensorVersioned()
            self.struct.version = DLPackVersion(*version)
            self.struct.flags = flags
        else:
            self.struct = DLManagedTensor()
        self.struct.dl_tensor = dl
        self.struct.manager_ctx = None
        self.struct.deleter = COUNTING_DELETER_ADDRESS
        self.versioned = versioned
        self.address = ctypes.addressof(self.struct)
        _LIVE[self.address] = self

    @property
    def capsule_name(self) -> bytes:
        return b"dltensor_versioned" if self.versioned else b"dltensor"

    def capsule(self):
        """A fresh, unconsumed capsule holding this tensor (no destructor: see `release`)."""
        return new_capsule(self.address, self.capsule_name)

    def release(self, capsule) -> None:
        """What a spec-conforming capsule destructor does: delete only if still unconsumed."""
        if _IsValid(capsule, ctypes.cast(_static_name(self.capsule_name), c_char_p)):
            call_deleter(self.address, self.struct.deleter)


def numpy_dtype_code(dtype: np.dtype) -> tuple[int, int, int]:
    kind = {"b": 6, "i": 0, "u": 1, "f": 2, "c": 5}[dtype.kind]
    return kind, dtype.itemsize * 8, 1


class Producer:
    """A pure-Python DLPack producer over `Managed` tensors: records every `__dlpack__` call."""

    def __init__(self, array: np.ndarray, *, legacy_signature: bool = False, copied_flag_on_copy: bool = False, **managed_kwargs):
        self.array = array
        self.managed_kwargs = managed_kwargs
        self.calls: list[dict] = []
        self.made: list[Managed] = []
        self.capsules: list = []
        self.legacy_signature = legacy_signature
        self.copied_flag_on_copy = copied_flag_on_copy

    def __dlpack__(self, **kwargs):
        if self.legacy_signature and kwargs:
            raise TypeError(f"__dlpack__() got unexpected keyword arguments {sorted(kwargs)}")
        self.calls.append(kwargs)
        options = dict(self.managed_kwargs)
        array = self.array
        if kwargs.get("copy") and self.copied_flag_on_copy:
            array = array.copy()
            options["flags"] = options.get("flags", 0) | FLAG_IS_COPIED
        if kwargs.get("max_version") is None:
            options["versioned"] = False
            options.pop("flags", None)
            options.pop("version", None)
        managed = Managed(array, **options)
        self.made.append(managed)
        capsule = managed.capsule()
        self.capsules.append(capsule)
        return capsule

    def __dlpack_device__(self):
        return self.managed_kwargs.get("device", (KDL_CPU, 0))


class CapsuleHolder:
    """An object whose `__dlpack__` hands out one given capsule (to feed numpy/torch a capsule)."""

    def __init__(self, capsule, device=(KDL_CPU, 0)):
        self.capsule = capsule
        self.device = device

    def __dlpack__(self, **kwargs):
        capsule, self.capsule = self.capsule, None
        return capsule

    def __dlpack_device__(self):
        return self.device

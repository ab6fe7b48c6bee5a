"""The spec clauses the checks cite: the document (DLPack's own, numbered as dlpx cites them:
000 dlpack.h, 001 the Python specification, 002 the ``__dlpack__`` page; or dlpx's
docs/design.md, "Rulings", where the documents are silent), the section, and the clause's key
words quoted verbatim."""

from __future__ import annotations

from typing import NamedTuple


class Clause(NamedTuple):
    file: str
    section: str
    quote: str

    def __str__(self):
        return f"{self.file} {self.section}"


C_API = "000 dlpack.h"
PYTHON = "001 python_spec"
DUNDER = "002 __dlpack__"
RULINGS = "docs/design.md"

EXCHANGE_ATTRIBUTE = Clause(C_API, "DLPackExchangeAPI", "must be set on the type")
EXCHANGE_LIFETIME = Clause(C_API, "DLPackExchangeAPI", "must stay alive throughout the lifetime of the process")
EXCHANGE_CAPSULE = Clause(RULINGS, "R1", "publishes `__dlpack_c_exchange_api__` (a capsule named `dlpack_exchange_api`)")
HEADER_VERSION = Clause(C_API, "DLPackExchangeAPIHeader", "the consumer must check major version compatibility")
PREV_API = Clause(C_API, "DLPackExchangeAPIHeader.prev_api", "the consumer may walk this to find an earlier supported version")
REQUIRED_ENTRIES = Clause(C_API, "DLPackExchangeAPI members", "This function must not be NULL")
ALLOCATOR = Clause(C_API, "DLPackManagedTensorAllocator", "SetError is called exactly when NULL is returned")
ALLOCATOR_PROTOTYPE = Clause(C_API, "DLPackManagedTensorAllocator", "Only the dtype, ndim, shape, and device fields are used")
NULL_SET_ERROR = Clause(RULINGS, "R3", "`SetError` may be NULL")
CONSUMER_OVERFLOW = Clause(RULINGS, "R6", "Every product is overflow-checked (extent × stride × item size, and their sum)")
ALIGNMENT = Clause(C_API, "DLTensor.data", "This pointer is always aligned to 256 bytes")
FROM_PY = Clause(C_API, "DLPackManagedTensorFromPyObjectNoSync", "The owning DLManagedTensorVersioned*")
TO_PY = Clause(C_API, "DLPackManagedTensorToPyObjectNoSync", "the Python tensor of the producer (implementor) library with the correct type")
VIEW = Clause(C_API, "DLPackDLTensorFromPyObjectNoSync", "Exports a PyObject* Tensor/NDArray to a provided DLTensor")
WORK_STREAM = Clause(C_API, "DLPackCurrentWorkStream", "When device_type is kDLCPU ... the producer can simply return NULL")
VERSION_MAJOR = Clause(C_API, "DLPackVersion", "the consumer must call the deleter ... not safe to access any other fields")

MAX_VERSION_NONE = Clause(DUNDER, "recommended producer logic", "if max_version is None: Keep and use the DLPack 0.X implementation ... okay to raise BufferError")
MAX_VERSION = Clause(DUNDER, "max_version", "may return a capsule of version max_version (recommended if it does support that)")
MAX_VERSION_NEWER = Clause(DUNDER, "recommended producer logic", "if max_version >= our_own_dlpack_version: ... return a Capsule with our max version")
STRIDES = Clause(C_API, "DLTensor.strides", "can not be NULL if ndim != 0 ... not allowed in DLPack v1.2 and later")
DL_DEVICE = Clause(DUNDER, "dl_device", "If the device type cannot be handled by the producer, this function must raise BufferError")
DL_DEVICE_SAME = Clause(DUNDER, "dl_device", "the format must be a 2-tuple, following that of the return value of array.__dlpack_device__()")
COPY_TRUE = Clause(DUNDER, "copy", "If True, the function must always copy ... the DLPACK_FLAG_BITMASK_IS_COPIED flag must be set")
COPY_FALSE = Clause(DUNDER, "copy", "If False, the function must never copy")
STREAM_CPU = Clause(DUNDER, "stream", "On CPU and other device types without streams, only None is accepted")
BUFFER_ERROR = Clause(DUNDER, "Raises", "should raise BufferError when the data cannot be exported as DLPack")
CAPSULE_NAME = Clause(PYTHON, "Implementation", 'set the PyCapsule name to "dltensor"')
CAPSULE_DESTRUCTOR = Clause(PYTHON, "Implementation", 'PyCapsule_Destructor calls deleter only for capsules whose name is "dltensor"')
READ_ONLY = Clause(DUNDER, "Notes", "DLPACK_FLAG_BITMASK_READ_ONLY ... a flag to indicate that the array is read-only")
DLPACK_DEVICE = Clause(PYTHON, "Syntax", "__dlpack_device__(self) ... to query what device the array is on")
LAYOUT = Clause(PYTHON, "Semantics", "DLPack describes the memory layout of strided, n-dimensional arrays")
ZERO_SIZE = Clause(PYTHON, "Implementation", "If the array is of size zero, the data pointer ... should be set to either NULL or 0")
DTYPE = Clause(C_API, "DLDataType", "the value should be one of DLDataTypeCode enum values")
REFCOUNT = Clause(PYTHON, "Implementation", "it is consumed exactly once")

ZERO_COPY = Clause(PYTHON, "Semantics", "If possible, this must be zero-copy")
CONSUMER_OWNS = Clause(PYTHON, "Implementation", "the deleter ... will be called by the destructor of the consumer library object")
CONSUMER_RENAMES = Clause(PYTHON, "Implementation", 'renaming the capsule to "used_dltensor"')
CONSUMER_FALLBACK = Clause(DUNDER, "consumer logic", "except TypeError: x.__dlpack__(...)")
CONSUMER_ASKS_VERSIONED = Clause(DUNDER, "consumer logic", "try: x.__dlpack__(max_version=(1, 0), ...)")
CONSUMER_MAJOR = Clause(PYTHON, "Semantics", "If the consumer doesn't support any version below the producer's maximum version, a BufferError should be raised")
CONSUMER_READ_ONLY = Clause(DUNDER, "Notes", "A consumer that does not support read-only arrays should ignore this flag")
CONSUMER_NULL_STRIDES = Clause(PYTHON, "Implementation", "When the strides field ... is NULL, it indicates a row-major compact array")
CONSUMER_IS_COPIED = Clause(C_API, "DLPACK_FLAG_BITMASK_IS_COPIED", "the tensor is considered solely owned throughout its lifetime by the consumer")
CONSUMER_SUBBYTE = Clause(C_API, "DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED", "This flag can be set by the producer to signal that a tensor of sub-byte type is padded")
CONSUMER_DEVICE = Clause(PYTHON, "Semantics", "a device that the requesting library does not support, it is recommended to raise a TypeError")
BYTE_OFFSET = Clause(C_API, "DLTensor.byte_offset", "The offset in bytes to the beginning pointer to data")
PROTOCOL = Clause(PYTHON, "Syntax", "__dlpack__(...) returns a PyCapsule; __dlpack_device__() returns a tuple (device_type, device_id)")
IS_COPIED = Clause(C_API, "DLPACK_FLAG_BITMASK_IS_COPIED", "the tensor is considered solely owned throughout its lifetime by the consumer")

"""The hostile producer built in C (hostile_producer.c): compiled once per test run with the
interpreter's C compiler against the repository's dlpack.h, loaded with ctypes.PyDLL.

``make(...)`` builds one managed tensor with any field a test names and returns a
:class:`HostileTensor` (its capsule, its address, its deleter count). ``arm(...)`` sets what
the C exchange table's entries hand out, and ``table_type(view)`` is a Python class that
publishes that table, so dlpx's kernel API and ``from_dlpack`` take the table path.
"""

import ctypes
import functools
import os
import sysconfig
import tempfile
from ctypes import c_int, c_int32, c_int64, c_uint32, c_uint64, c_void_p

import pytest

import c_build
from dlpx.conform import abi
from dlpx.conform.reference import row_major_strides

HERE = os.path.dirname(os.path.abspath(__file__))
DLPACK_INCLUDE = os.path.join(c_build.INCLUDE, "dlpx")  # hostile_producer.c includes "dlpack.h"

DIMS = 80  # HP_DIMS in the C source


class Spec(ctypes.Structure):
    """hp_spec: what the next tensor holds, field by field."""

    _fields_ = [
        ("major", c_uint32),
        ("minor", c_uint32),
        ("ndim", c_int32),
        ("shape_null", c_int32),
        ("strides_null", c_int32),
        ("data_null", c_int32),
        ("deleter_null", c_int32),
        ("reserved", c_int32),
        ("shape", c_int64 * DIMS),
        ("strides", c_int64 * DIMS),
        ("dtype", abi.DLDataType),
        ("device", abi.DLDevice),
        ("flags", c_uint64),
        ("byte_offset", c_uint64),
    ]


DEFAULT = object()


def spec(
    shape=(2, 3),
    dtype=(2, 32, 1),
    *,
    version=(abi.DLPACK_MAJOR, abi.DLPACK_MINOR),
    ndim=None,
    strides=DEFAULT,
    device=(abi.KDL_CPU, 0),
    data=True,
    deleter=True,
    flags=0,
    byte_offset=0,
):
    """A Spec. ``shape=None`` (with ``ndim``) or ``strides=None`` send NULL arrays;
    ``data=False`` a NULL data pointer; ``deleter=False`` a NULL deleter. Values wrap to their
    C types, so ``2**63`` arrives as a negative int64."""
    values = [] if shape is None else list(shape)
    if len(values) > DIMS:
        raise ValueError(f"the C producer holds at most {DIMS} dimensions")
    if strides is DEFAULT:
        strides = None if shape is None else row_major_strides(values)
    s = Spec()
    s.major, s.minor = version
    s.ndim = len(values) if ndim is None else ndim
    s.shape_null = shape is None
    s.strides_null = strides is None
    s.data_null = not data
    s.deleter_null = not deleter
    for i, v in enumerate(values):
        s.shape[i] = v
    for i, v in enumerate(strides or ()):
        s.strides[i] = v
    s.dtype = abi.DLDataType(*dtype)
    s.device = abi.DLDevice(*device)
    s.flags = flags
    s.byte_offset = byte_offset
    return s


def _compile(out_dir):
    library = os.path.join(out_dir, "libhostile_producer.so")
    flags = ["-shared", "-fPIC", "-O1", f"-I{sysconfig.get_paths()['include']}", f"-I{DLPACK_INCLUDE}"]
    try:
        done = c_build.build("c", [os.path.join(HERE, "hostile_producer.c")], library, flags, standard=False)
    except c_build.NoCompiler as e:
        return None, str(e)
    if done.returncode != 0:
        return None, c_build.failure(done)
    return library, None


#: The C producer's functions: name -> (argtypes, restype).
_SIGNATURES = {
    "hp_make": ([ctypes.POINTER(Spec), c_int], c_int),
    "hp_deleter_calls": ([c_int], c_int),
    "hp_address": ([c_int], c_void_p),
    "hp_count": ([], c_int),
    "hp_capsule": ([c_int], ctypes.py_object),
    "hp_arm": ([ctypes.POINTER(Spec)], None),
    "hp_arm_allocator": ([c_int, ctypes.POINTER(Spec)], None),
    "hp_arm_entries": ([c_int], None),
    "hp_arm_to_py": ([c_int], None),
    "hp_table_to_py_capsule": ([], c_void_p),
    "hp_table_to_py_gives_nothing": ([], c_void_p),
    "hp_table": ([c_int], c_void_p),
}


@functools.lru_cache(maxsize=None)
def library():
    """The compiled producer; skips (or fails, under DLPX_REQUIRE_ALL_TESTS) without a compiler."""
    # The loaded library stays mapped once its file is gone: the folder is removed at once.
    with tempfile.TemporaryDirectory(prefix="dlpx-hostile-") as out_dir:
        path, why = _compile(out_dir)
        if path is None:
            if os.environ.get("DLPX_REQUIRE_ALL_TESTS"):
                pytest.fail(f"the hostile C producer did not build: {why}")
            pytest.skip(f"the hostile C producer did not build: {why}", allow_module_level=True)
        lib = ctypes.PyDLL(path)
    for name, (argtypes, restype) in _SIGNATURES.items():
        getattr(lib, name).argtypes, getattr(lib, name).restype = argtypes, restype
    return lib


class HostileTensor:
    """One tensor the C producer made."""

    def __init__(self, id):
        self.id = id

    @property
    def deleter_calls(self) -> int:
        return library().hp_deleter_calls(self.id)

    @property
    def address(self):
        """The managed struct's address, None once deleted."""
        return library().hp_address(self.id)

    def capsule(self):
        """A capsule (named for the struct's layout) whose destructor deletes an unconsumed tensor."""
        return library().hp_capsule(self.id)


def make(versioned=True, **spec_kwargs) -> HostileTensor:
    id = library().hp_make(ctypes.byref(spec(**spec_kwargs)), int(versioned))
    assert id >= 0, "the C producer ran out of ids or memory"
    return HostileTensor(id)


def arm(**spec_kwargs) -> None:
    """Every later tensor a ``table_type`` class hands out (from the C table's entries or its
    ``__dlpack__``) is made as these fields say."""
    _armed[0] = spec(**spec_kwargs)
    library().hp_arm(ctypes.byref(_armed[0]))


#: What the table's allocator does (``arm_allocator``): give the armed tensor, whatever was asked;
#: fail without reporting; succeed without a tensor; report twice and fail.
GIVES, FAILS_SILENTLY, GIVES_NOTHING, REPORTS_TWICE = 0, 1, 2, 3


def arm_allocator(mode=GIVES, **spec_kwargs) -> None:
    """What the C table's allocator answers from now on (``GIVES``: a tensor made as
    ``spec_kwargs`` say, whatever the request)."""
    _allocated[0] = spec(**spec_kwargs)
    library().hp_arm_allocator(mode, ctypes.byref(_allocated[0]))


#: How the table's two read entries break its contract (``arm_entries``): not at all; a failure
#: that sets no exception; a success that leaves an exception set.
KEEPS_CONTRACT, FAILS_WITHOUT_EXCEPTION, SUCCEEDS_WITH_EXCEPTION = 0, 1, 2


def arm_entries(mode=KEEPS_CONTRACT) -> None:
    """How the C table's read entries answer from now on (``KEEPS_CONTRACT``: as the table's
    contract says)."""
    library().hp_arm_entries(mode)


def arm_to_py(mode=KEEPS_CONTRACT) -> None:
    """How the ``to_py_capsule`` table's ``to_py`` answers from now on (the modes of
    ``arm_entries``: a failure that sets no exception leaves the tensor with its caller)."""
    library().hp_arm_to_py(mode)


def made_since(count: int) -> list:
    """The tensors made since ``hp_count()`` was ``count``."""
    return [HostileTensor(i) for i in range(count, library().hp_count())]


def count() -> int:
    return library().hp_count()


def table_type(view=False, to_py_gives_nothing=False, to_py_capsule=False):
    """A class publishing the C table (its view entry only with ``view``; with
    ``to_py_gives_nothing`` a ``to_py`` that reports success and gives no object; with
    ``to_py_capsule`` one that gives a capsule owning the tensor, as ``arm_to_py`` says). Its
    ``__dlpack__`` hands out a capsule of a tensor made from the armed spec too, so every path
    dlpx may take (table or protocol) meets the same hostile tensor."""
    if to_py_gives_nothing:
        address = library().hp_table_to_py_gives_nothing()
    elif to_py_capsule:
        address = library().hp_table_to_py_capsule()
    else:
        address = library().hp_table(int(view))

    class Hostile:
        __c_dlpack_exchange_api__ = address

        def __dlpack__(self, **kwargs):
            tensor = HostileTensor(library().hp_make(ctypes.byref(_armed[0]), 1))
            return tensor.capsule()

    return Hostile


_armed = [None]  # the armed Spec, kept for table_type's __dlpack__
_allocated = [None]  # the allocator's armed Spec


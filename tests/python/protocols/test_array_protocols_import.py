"""The older array protocols into dlpx (docs/design.md R12): the buffer protocol (PEP 3118) and
`__array_interface__` (v3), each a row of the producer seam. DLPack stays first where an object
speaks both. Every import is checked against what numpy reads from the same object through the
same protocol (numpy implements each of them), zero-copy where the layout allows, read-only
where the exporter is. `__cuda_array_interface__` is tested on the simulated driver
(test_array_protocols_cuda.py) and with torch, CuPy and numba on a GPU (test_cuda.py)."""

import array
import ctypes
import gc
import mmap
import sys
import weakref

import numpy as np
import pytest

import dlpx
from dlpx.conform import abi
from protocol_views import OnlyArrayInterface



def values(t):
    """A dlpx tensor's values, through its DLPack export (not the protocol under test)."""
    return np.from_dlpack(t)


def address_of(buffer_object) -> int:
    """Where a buffer exporter's memory starts, as numpy reads it."""
    return np.frombuffer(buffer_object, np.uint8).ctypes.data if len(memoryview(buffer_object).cast("B")) else 0




# ---- the buffer protocol --------------------------------------------------------------------


def test_bytes_import_read_only_zero_copy():
    b = bytes(range(16))
    t = dlpx.from_dlpack(b)
    assert (t.dtype, t.shape, t.readonly) == ("uint8", (16,), True)
    assert t.data_ptr == address_of(b)
    np.testing.assert_array_equal(values(t), np.frombuffer(b, np.uint8))
    assert not values(t).flags.writeable


def test_a_bytearray_is_shared_and_writable():
    b = bytearray(8)
    t = dlpx.from_dlpack(b)
    assert not t.readonly and t.data_ptr == address_of(b)
    values(t)[3] = 7
    assert b[3] == 7


def test_the_exporter_stays_exported_while_the_tensor_lives():
    b = bytearray(8)
    t = dlpx.from_dlpack(b)
    with pytest.raises(BufferError):
        b.append(1)  # a bytearray cannot resize while a view is held
    del t
    gc.collect()
    b.append(1)  # released with the tensor (PyBuffer_Release in the deleter)


@pytest.mark.parametrize("view, dtype", [
    (lambda: memoryview(bytearray(range(10)))[::-2], "uint8"),
    (lambda: memoryview(bytearray(range(12)))[1::3], "uint8"),
    (lambda: memoryview(bytearray(16)).cast("f"), "float32"),
    (lambda: memoryview(bytearray(range(24))).cast("i", shape=[2, 3]), "int32"),
    (lambda: memoryview(np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::-2]), "int16"),
    (lambda: memoryview(np.arange(6, dtype=np.complex64)), "complex64"),
    (lambda: memoryview(np.array([True, False])), "bool"),
    (lambda: memoryview(np.arange(3, dtype=np.float16)), "float16"),
])
def test_memoryviews_keep_their_layout(view, dtype):
    v = view()
    t = dlpx.from_dlpack(v)
    expected = np.asarray(v)
    assert t.dtype == dtype and t.shape == expected.shape
    assert t.strides == tuple(s // expected.itemsize for s in expected.strides)
    assert t.data_ptr == expected.ctypes.data
    np.testing.assert_array_equal(values(t), expected)


@pytest.mark.parametrize("typecode, dtype", [("b", "int8"), ("H", "uint16"), ("l", "int64"), ("f", "float32"), ("d", "float64")])
def test_array_array(typecode, dtype):
    a = array.array(typecode, [1, 2, 3])
    t = dlpx.from_dlpack(a)
    assert t.dtype == dtype and t.shape == (3,) and not t.readonly
    np.testing.assert_array_equal(values(t), np.asarray(a))


def test_mmap_stays_open_while_imported():
    m = mmap.mmap(-1, 4096)
    m[:4] = b"dlpx"
    t = dlpx.from_dlpack(m)
    assert t.shape == (4096,) and bytes(values(t)[:4]) == b"dlpx"
    with pytest.raises(BufferError):
        m.close()  # "cannot close exported pointers exist"
    del t
    gc.collect()
    m.close()


def test_ctypes_arrays_with_their_shape():
    a = ((ctypes.c_float * 3) * 2)((1, 2, 3), (4, 5, 6))
    t = dlpx.from_dlpack(a)
    assert (t.dtype, t.shape) == ("float32", (2, 3))
    np.testing.assert_array_equal(values(t), np.ctypeslib.as_array(a))
    assert dlpx.from_dlpack((ctypes.c_int64 * 2)(5, 6)).dtype == "int64"


@pytest.mark.parametrize("make, says", [
    (lambda: memoryview(np.arange(3, dtype=">i4")), "byte order"),
    (lambda: memoryview(np.zeros(3, np.longdouble)), "'g'"),
    (lambda: memoryview(np.zeros(2, [("a", "u1"), ("b", "<f4")])), "not a number"),
    (lambda: memoryview(np.zeros(2, "U3")), "not a number"),
])
def test_formats_dlpack_cannot_describe_are_buffer_errors_naming_them(make, says):
    with pytest.raises(BufferError, match=says.replace("'", '"')):
        dlpx.from_dlpack(make())


def test_strides_that_are_not_whole_items_are_refused_or_copied():
    records = np.zeros(4, dtype=np.dtype([("a", "u1"), ("b", "<i4")], align=False))
    records["b"] = [1, 2, 3, 4]
    field = memoryview(records["b"])  # 4-byte items, 5 bytes apart
    with pytest.raises(BufferError, match="not a multiple of the item size"):
        dlpx.from_dlpack(field)
    copied = dlpx.from_dlpack(field, copy=True)
    np.testing.assert_array_equal(values(copied), [1, 2, 3, 4])
    assert not copied.readonly


# Counts dlpx's large host allocations (posix_memalign at its 256-byte alignment, beyond the
# 64 KiB its thread cache keeps): an LD_PRELOAD shim in a child interpreter.
ALLOCATION_COUNTER = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
long dlpx_test_large_allocations;
int posix_memalign(void **out, size_t alignment, size_t size) {
    static int (*next)(void **, size_t, size_t);
    if (!next) next = (int (*)(void **, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
    if (alignment == 256 && size >= 65536) __atomic_fetch_add(&dlpx_test_large_allocations, 1, __ATOMIC_RELAXED);
    return next(out, alignment, size);
}
"""


@pytest.mark.parametrize("protocol", ["buffer", "array_interface"])
def test_a_copy_a_row_made_is_not_copied_again(protocol, tmp_path):
    """copy=True of strides that are not whole items: the row's copy is the result (marked
    IS_COPIED), one allocation, not a second copy of it."""
    import os
    import subprocess

    import c_build

    source, shim = tmp_path / "count.c", tmp_path / "libcount.so"
    source.write_text(ALLOCATION_COUNTER)
    try:
        done = c_build.build("c", [str(source)], str(shim), flags=["-shared", "-fPIC"], libraries=["-ldl"])
    except c_build.NoCompiler as missing:
        c_build.skip_or_fail(str(missing))
    assert done.returncode == 0, c_build.failure(done)
    child = f"""
import ctypes, numpy as np, dlpx
from protocol_views import OnlyArrayInterface
count = ctypes.c_long.in_dll(ctypes.CDLL(None), "dlpx_test_large_allocations")
records = np.zeros(1 << 15, dtype=np.dtype([("a", "u1"), ("b", "<i4")], align=False))
records["b"] = np.arange(1 << 15)
field = memoryview(records["b"]) if {protocol!r} == "buffer" else OnlyArrayInterface(records["b"])
assert dlpx._native._row_of(field) == {protocol!r}, dlpx._native._row_of(field)
before = count.value
copied = dlpx.from_dlpack(field, copy=True)
after = count.value
assert np.array_equal(np.from_dlpack(copied), np.arange(1 << 15))
print(after - before)
"""
    helpers = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "helpers")
    env = dict(os.environ, LD_PRELOAD=str(shim),
               PYTHONPATH=os.pathsep.join([helpers, os.environ.get("PYTHONPATH", "")]))
    ran = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, env=env)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["1"], ran.stdout


def test_a_read_only_buffer_stays_read_only_through_every_export():
    t = dlpx.from_dlpack(memoryview(b"abcd"))
    assert t.readonly
    with pytest.raises(ValueError):
        values(t)[0] = 1
    with pytest.raises(TypeError):
        memoryview(t)[0] = 1


def test_dlpack_comes_first_when_an_object_speaks_both():
    a = np.arange(4.0)
    info = dlpx.exchange_api_info(type(a))
    assert info is None or "buffer" not in str(info)
    assert dlpx.from_dlpack(a).data_ptr == a.ctypes.data


def test_pyarrow_buffers():
    pa = pytest.importorskip("pyarrow")
    buffer = pa.py_buffer(b"\x01\x02\x03\x04")
    t = dlpx.from_dlpack(buffer)
    assert t.shape == (4,) and t.readonly and t.data_ptr == buffer.address
    ints = pa.array([1, 2, 3], pa.int32()).buffers()[1]
    np.testing.assert_array_equal(values(dlpx.from_dlpack(ints)).view(np.int32)[:3], [1, 2, 3])


# ---- __array_interface__ --------------------------------------------------------------------


def test_numpy_through_its_array_interface_alone():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)[::2, 1:]
    t = dlpx.from_dlpack(OnlyArrayInterface(a))
    assert t.shape == (2, 3) and t.strides == (8, 1) and t.data_ptr == a.ctypes.data
    np.testing.assert_array_equal(values(t), a)


def test_the_array_interface_s_read_only_flag_and_exporter_are_kept():
    a = np.arange(4)
    a.flags.writeable = False
    holder = OnlyArrayInterface(a)
    alive = weakref.ref(holder)
    t = dlpx.from_dlpack(holder)
    del holder
    gc.collect()
    assert alive() is not None, "the exporting object lives as long as the tensor"
    assert t.readonly
    del t
    gc.collect()
    assert alive() is None


def test_an_interface_s_buffer_must_hold_every_item_copied_or_not():
    # `data` a 24-byte buffer: float64 items 12 bytes apart (no element strides: only a copy
    # takes them) fit twice (bytes 0..20), not 64 times (0..764): refused as the aligned layout
    # is, before the copy reads a byte.
    data = np.array([1.5, 0.0, 2.5], dtype="<f8").view("u1").copy()
    data[12:20] = np.array([2.5], dtype="<f8").view("u1")
    for shape, says in (((2,), None), ((64,), r"reaches bytes 0\.\.764 of a 24-byte buffer")):
        holder = OnlyArrayInterface(np.empty(0), data=bytes(data), shape=shape, strides=(12,), typestr="<f8")
        with pytest.raises(BufferError, match="not a multiple of the item size"):
            dlpx.from_dlpack(holder)
        if says is None:
            np.testing.assert_array_equal(values(dlpx.from_dlpack(holder, copy=True)), [1.5, 2.5])
        else:
            with pytest.raises(BufferError, match=says):
                dlpx.from_dlpack(holder, copy=True)
    aligned = OnlyArrayInterface(np.empty(0), data=bytes(24), shape=(64,), strides=(8,), typestr="<f8")
    for copy in (None, True):
        with pytest.raises(BufferError, match=r"reaches bytes 0\.\.512 of a 24-byte buffer"):
            dlpx.from_dlpack(aligned, copy=copy)


def test_an_interface_s_buffer_is_its_bytes_in_one_run_as_numpy_takes_it():
    # `data` a strided view: its `buf` is the first item's address, its `len` the items' bytes,
    # not where they lie (forward: the wrong bytes; reversed: bytes before the buffer's start).
    # numpy refuses such a buffer; so does dlpx, copied or not, before a byte is read.
    raw = bytearray(range(64))

    def bytes_of(data, **changes):
        return OnlyArrayInterface(np.empty(0, np.uint8), data=data, strides=None, **changes)

    for strided in (memoryview(raw)[::2], memoryview(raw)[::-1]):
        holder = bytes_of(strided, shape=(len(strided),))
        with pytest.raises(BufferError, match="not C-contiguous"):
            np.asarray(holder)
        for copy in (None, True):
            with pytest.raises(BufferError, match="not C-contiguous"):
                dlpx.from_dlpack(holder, copy=copy)
    # Unaligned byte strides take the copy's path: refused alike.
    unaligned = OnlyArrayInterface(np.empty(0), data=memoryview(raw)[::2], shape=(2,), strides=(12,))
    with pytest.raises(BufferError, match="not C-contiguous"):
        dlpx.from_dlpack(unaligned, copy=True)
    # A contiguous run of any shape or format is its bytes: read as they lie, writable as it is.
    grid = memoryview(raw).cast("B", (8, 8))
    t = dlpx.from_dlpack(bytes_of(grid, shape=(64,)))
    np.testing.assert_array_equal(values(t), np.arange(64, dtype=np.uint8))
    assert not t.readonly
    t = dlpx.from_dlpack(bytes_of(bytes(raw), shape=(64,)))
    assert t.readonly


def test_a_numpy_scalar_s_memory_is_kept_by_its_interface_s_ref():
    # A numpy scalar's __array_interface__ points into a temporary array that only the dict's
    # `__ref` holds: the import holds that (the scalar keeps nothing), so the memory outlives the
    # dict and is not reused by the next scalar's temporary.
    tensors = [dlpx.from_dlpack(np.float32(v)) for v in (1.5, 7.0, -2.0)]
    for _ in range(100):
        np.float64(0.0).__array_interface__  # temporaries that would reuse freed memory
    assert [float(values(t)) for t in tensors] == [1.5, 7.0, -2.0]


@pytest.mark.parametrize("changes, says", [
    ({"mask": np.zeros(4, bool)}, "mask"),
    ({"descr": [("a", "<i8"), ("b", "<i8")]}, "descr"),
    ({"typestr": ">i8"}, "byte order"),
    ({"typestr": "<f16"}, "not a number"),
    ({"version": 2}, "version"),
    ({"shape": (2, -1)}, "negative"),
])
def test_array_interfaces_dlpack_cannot_describe_are_refused(changes, says):
    with pytest.raises(BufferError, match=says):
        dlpx.from_dlpack(OnlyArrayInterface(np.arange(4), **changes))


@pytest.mark.parametrize("typestr", ["|f4", "|i4", "=f8", "|u2"])
def test_a_typestr_whose_order_does_not_apply_or_is_native_reads_as_numpy_reads_it(typestr):
    x = np.arange(4, dtype=np.dtype(typestr))
    t = dlpx.from_dlpack(OnlyArrayInterface(x, typestr=typestr, descr=[("", typestr)]))
    assert t.dtype == x.dtype.name
    np.testing.assert_array_equal(values(t), x)


def test_an_array_interface_with_data_none_reads_the_object_s_buffer_at_offset():
    class Shaped:
        def __init__(self):
            self.raw = bytearray(range(16))

        @property
        def __array_interface__(self):
            return {"shape": (3,), "typestr": "|u1", "data": self.raw, "offset": 5, "version": 3}

    t = dlpx.from_dlpack(Shaped())
    np.testing.assert_array_equal(values(t), [5, 6, 7])


def test_pil_images_come_through_their_array_interface():
    PIL = pytest.importorskip("PIL.Image")
    image = PIL.new("RGB", (3, 2), (10, 20, 30))
    t = dlpx.from_dlpack(image)
    assert (t.dtype, t.shape) == ("uint8", (2, 3, 3))
    np.testing.assert_array_equal(values(t), np.asarray(image))
    gray = PIL.new("L", (4, 1), 7)
    np.testing.assert_array_equal(values(dlpx.from_dlpack(gray)), np.asarray(gray))


# ---- every entry point, and what the import costs in references -----------------------------


@pytest.mark.parametrize("make", [
    lambda: b"\x00\x01\x02\x03",
    lambda: bytearray(4),
    lambda: array.array("i", [1, 2]),
    lambda: OnlyArrayInterface(np.arange(3)),
], ids=["bytes", "bytearray", "array", "array_interface"])
def test_references_come_back(make):
    x = make()
    before = sys.getrefcount(x)
    for _ in range(3):
        t = dlpx.from_dlpack(x)
        copy = dlpx.from_dlpack(x, copy=True)
        del t, copy
    gc.collect()
    assert sys.getrefcount(x) == before


def test_the_kernel_api_takes_every_protocol():
    lib = ctypes.PyDLL(dlpx.library_path())

    View = abi.DlpxTensorView
    lib.dlpx_view_of.argtypes = [ctypes.py_object, ctypes.POINTER(View)]
    lib.dlpx_view_release.argtypes = [ctypes.POINTER(View)]
    lib.dlpx_import.argtypes = [ctypes.py_object, ctypes.POINTER(ctypes.c_void_p)]
    for x in (b"abcd", bytearray(2), memoryview(b"xy"), OnlyArrayInterface(np.arange(2))):
        view = View()
        assert lib.dlpx_view_of(x, ctypes.byref(view)) == 0
        lib.dlpx_view_release(ctypes.byref(view))
        out = ctypes.c_void_p()
        assert lib.dlpx_import(x, ctypes.byref(out)) == 0
        deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(ctypes.c_void_p.from_address(out.value + 16).value)
        deleter(out.value)


def test_an_interface_set_on_the_instance_is_read_too():
    class Plain:
        pass

    holder, a = Plain(), np.arange(3.0)
    holder.__array_interface__ = a.__array_interface__  # not on its type: numpy looks here too
    t = dlpx.from_dlpack(holder)
    assert t.data_ptr == a.ctypes.data and list(values(t)) == [0.0, 1.0, 2.0]


def test_protocols_set_on_the_instance_go_to_the_rows_in_their_order():
    class Plain:
        pass

    a, b = np.arange(3.0), np.arange(10.0, 13.0)
    holder = Plain()
    holder.__array_interface__ = b.__array_interface__
    holder.__dlpack__, holder.__dlpack_device__ = a.__dlpack__, a.__dlpack_device__
    # ROWS' order (R12): the dlpack row before the array interface's, on the instance as on types.
    assert list(values(dlpx.from_dlpack(holder))) == [0.0, 1.0, 2.0]
    del holder.__dlpack__
    assert list(values(dlpx.from_dlpack(holder))) == [10.0, 11.0, 12.0]


def test_an_object_that_speaks_nothing_is_still_a_type_error_naming_what_was_looked_for():
    with pytest.raises(TypeError, match="__array_interface__"):
        dlpx.from_dlpack(object())

"""dlpx.Tensor speaks the older array protocols too (docs/design.md R12): the buffer protocol and
`__array_interface__` on the host, `__cuda_array_interface__` (v3) on CUDA
(test_array_protocols_cuda.py), and numpy 2's `__array__(dtype, copy)`. So a user's first
gesture, `np.asarray(t)`, is zero-copy and right, and so are `memoryview(t)`, `bytes(t)` and
`PIL.Image.fromarray(t)`; read-only stays read-only through each."""

import ctypes
import gc
import sys

import numpy as np
import pytest

import dlpx
from dlpx.conform.protocols import PyBuffer

PYBUF_WRITABLE = 0x0001
NUMBERS = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
           "float16", "float32", "float64", "complex64", "complex128"]


def tensor(shape=(2, 3), dtype="float32"):
    a = np.arange(int(np.prod(shape))).reshape(shape).astype(dtype)
    return dlpx.from_dlpack(a), a


@pytest.mark.parametrize("dtype", NUMBERS)
def test_np_asarray_is_zero_copy_and_right(dtype):
    t, a = tensor(dtype=dtype)
    n = np.asarray(t)
    assert n.dtype == a.dtype and n.shape == a.shape and n.ctypes.data == t.data_ptr
    np.testing.assert_array_equal(n, a)


def test_np_asarray_keeps_strides_and_the_tensor_alive():
    a = np.arange(24, dtype=np.int32).reshape(4, 6)[::-2, 1::2]
    t = dlpx.from_dlpack(a)
    n = np.asarray(t)
    assert n.strides == a.strides and n.ctypes.data == a.ctypes.data
    before = sys.getrefcount(t)
    del a
    gc.collect()
    np.testing.assert_array_equal(n, np.arange(24, dtype=np.int32).reshape(4, 6)[::-2, 1::2])
    del n
    gc.collect()
    assert sys.getrefcount(t) == before - 1


@pytest.mark.parametrize("ndim", [1, 2, 4, 5, 7])
def test_byte_strides_kept_in_the_object_and_made_past_it_agree(ndim):
    # Up to four dimensions the byte strides are worked out once and kept in the object; more
    # get a block per view. Either way every view, first or later, has numpy's own strides.
    shape = (3, 2, 4, 2, 3, 2, 2)[:ndim]
    a = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)[(slice(None, None, -1),) * ndim]
    t = dlpx.from_dlpack(a)
    views = [np.asarray(t) for _ in range(3)] + [memoryview(t) for _ in range(2)]
    for v in views:
        assert v.strides == a.strides
    np.testing.assert_array_equal(views[0], a)
    assert views[3].tolist() == a.tolist()


def answer(t, flags):
    """What a buffer request of `flags` gets from `t`: its view's fields, or the error."""
    get_buffer, release = ctypes.pythonapi.PyObject_GetBuffer, ctypes.pythonapi.PyBuffer_Release
    get_buffer.argtypes, get_buffer.restype = [ctypes.py_object, ctypes.POINTER(PyBuffer), ctypes.c_int], ctypes.c_int
    release.argtypes, release.restype = [ctypes.POINTER(PyBuffer)], None
    view = PyBuffer()
    try:
        get_buffer(t, ctypes.byref(view), flags)
    except BufferError as e:
        return str(e)
    dims = lambda p: None if not p else tuple(p[i] for i in range(view.ndim))  # noqa: E731
    fields = (view.buf, view.len, view.itemsize, view.readonly, view.ndim, view.format,
              dims(view.shape), dims(view.strides), view.suboffsets)
    release(ctypes.byref(view))
    return fields


@pytest.mark.parametrize("layout", ["compact", "strided", "0-d", "5-d", "read-only", "empty"])
def test_the_kept_view_answers_every_request_as_the_full_path_does(layout):
    # A tensor's first request with strides keeps its view; later requests that ask what numpy
    # asks are answered from it. Every request, before and after, must get what a tensor that
    # kept nothing gets (a fresh dlpx.Tensor of the same array each time).
    a = {"compact": np.arange(12, dtype=np.int16).reshape(3, 4),
         "strided": np.arange(24.0).reshape(4, 6)[::-1, ::2],
         "0-d": np.array(7, dtype=np.uint32),
         "5-d": np.zeros((2, 1, 2, 1, 2), dtype=np.complex64)[..., ::-1],
         "read-only": np.arange(6, dtype=np.float32),
         "empty": np.zeros((0, 3), dtype=np.int8)}[layout]
    a.flags.writeable = layout != "read-only"
    flag_sets = [0x11C, 0x11D, 0x1C, 0x1D, 0x18, 0x8, 0x4, 0x0, 0x1, 0x3C, 0x5C, 0x9C, 0x3D]
    kept = dlpx.from_dlpack(a)
    np.asarray(kept)  # keeps its view
    for flags in flag_sets:
        assert answer(kept, flags) == answer(dlpx.from_dlpack(a), flags), hex(flags)


@pytest.mark.parametrize("shape", [(2, 3), (4,), ()])
def test_a_request_for_plain_bytes_gets_one_run_as_cpython_s_exporters_give(shape):
    # PyBUF_SIMPLE and PyBUF_WRITABLE ask no shape: the view is one run of `len` bytes, ndim 1
    # (memoryview's and PyBuffer_FillInfo's answer). A view with ndim 2 and no shape made
    # PyMemoryView_FromBuffer copy two extents from NULL.
    a = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    t = dlpx.from_dlpack(a)
    np.asarray(t)  # the kept view answers later requests too
    for flags in (0x0, 0x1):
        assert answer(t, flags)[1:] == answer(memoryview(a), flags)[1:], hex(flags)
        assert answer(t, flags)[4:7] == (1, None, None)
    from_buffer = ctypes.pythonapi.PyMemoryView_FromBuffer
    from_buffer.argtypes, from_buffer.restype = [ctypes.POINTER(PyBuffer)], ctypes.py_object
    get_buffer, release = ctypes.pythonapi.PyObject_GetBuffer, ctypes.pythonapi.PyBuffer_Release
    get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(PyBuffer), ctypes.c_int]
    release.argtypes = [ctypes.POINTER(PyBuffer)]
    view = PyBuffer()
    get_buffer(t, ctypes.byref(view), 0)
    assert bytes(from_buffer(ctypes.byref(view))) == a.tobytes()
    release(ctypes.byref(view))


def test_views_taken_at_once_by_many_threads_all_have_the_strides():
    # The first request keeps the strides; a request racing it makes its own. None may see a
    # half-written set (on a free-threaded interpreter the threads really run at once).
    import threading
    for _ in range(50):
        a = np.arange(24, dtype=np.int32).reshape(2, 3, 4)[:, ::-1, ::2]
        t = dlpx.from_dlpack(a)
        start, seen = threading.Barrier(4), []

        def take():
            start.wait()
            seen.extend(np.asarray(t).strides for _ in range(20))

        threads = [threading.Thread(target=take) for _ in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert set(seen) == {a.strides}


def test_memoryview_of_a_tensor():
    t, a = tensor((3, 4), "int16")
    m = memoryview(t)
    assert (m.format, m.itemsize, m.shape, m.strides, m.readonly) == ("h", 2, (3, 4), (8, 2), False)
    assert m.tolist() == a.tolist()
    m[1, 2] = -5
    assert np.asarray(t)[1, 2] == -5
    assert bytes(t) == a.tobytes() and bytes(m) == np.asarray(t).tobytes()


@pytest.mark.parametrize("shape, dtype", [((0, 2**62), "float64"), ((0, 2**63 - 1), "float32"),
                                          ((0,) * 5 + (2**62,), "float64")])
def test_byte_strides_past_py_ssize_t_are_refused_not_wrapped(shape, dtype):
    # A tensor of no element may have a huge extent; its byte strides wrapped: (0, 8), (-4, 4).
    t = dlpx.empty(shape, dtype)
    for _ in range(2):  # the first request, and one after it (the kept view's path)
        with pytest.raises(BufferError, match=r"^dlpx: buffer protocol: strides\[0\] = \d+ elements of \d bytes"):
            memoryview(t)
    assert memoryview(dlpx.empty((0, 5), "float64")).strides == (40, 8)


def test_a_tensor_with_no_array_interface_names_only_what_it_has():
    # A vulkan tensor was told to "use __cuda_array_interface__", which it has not either.
    from dlpx.conform import abi

    capsule = np.arange(4, dtype=np.float32).__dlpack__(max_version=(1, 0))
    abi.managed_at(abi.capsule_pointer(capsule)).dl_tensor.device.device_type = 7  # kDLVulkan
    t = dlpx.from_dlpack(capsule)
    for name in ("__array_interface__", "__cuda_array_interface__"):
        with pytest.raises(AttributeError, match=r"on vulkan:0 has no " + name + r" \(\w+ memory only\): use __dlpack__$"):
            getattr(t, name)


def test_read_only_tensors_export_read_only_buffers():
    a = np.arange(4.0)
    a.flags.writeable = False
    t = dlpx.from_dlpack(a)
    assert memoryview(t).readonly
    assert not np.asarray(t).flags.writeable
    get_buffer = ctypes.pythonapi.PyObject_GetBuffer
    get_buffer.argtypes, get_buffer.restype = [ctypes.py_object, ctypes.c_void_p, ctypes.c_int], ctypes.c_int
    view = (ctypes.c_byte * 128)()
    with pytest.raises(BufferError, match="read-only"):
        get_buffer(t, ctypes.addressof(view), PYBUF_WRITABLE)
    with pytest.raises(TypeError):
        memoryview(t)[0] = 1.0


def test_the_array_interface_describes_the_tensor():
    t, a = tensor((2, 3), "float64")
    interface = t.__array_interface__
    assert interface["version"] == 3 and interface["typestr"] == "<f8" and interface["shape"] == (2, 3)
    assert interface["data"] == (t.data_ptr, False)
    assert interface["strides"] in (None, (24, 8))
    assert not hasattr(t, "__cuda_array_interface__")


def test_pil_images_from_tensors():
    image_module = pytest.importorskip("PIL.Image")
    pixels = np.arange(24, dtype=np.uint8).reshape(2, 4, 3)
    image = image_module.fromarray(dlpx.from_dlpack(pixels))
    assert image.size == (4, 2) and image.mode == "RGB"
    np.testing.assert_array_equal(np.asarray(image), pixels)


@pytest.mark.parametrize("dtype, copy, shares", [
    (None, None, True), (None, False, True), (None, True, False), ("float64", None, False),
])
def test_array_dunder_takes_numpy_2_s_dtype_and_copy(dtype, copy, shares):
    t, a = tensor(dtype="float32")
    n = t.__array__(dtype=dtype, copy=copy)
    assert isinstance(n, np.ndarray) and np.shares_memory(n, np.asarray(t)) == shares
    np.testing.assert_array_equal(n, a)
    assert n.dtype == (np.dtype(dtype) if dtype else a.dtype)


def test_array_dunder_refuses_a_copy_it_was_told_not_to_make():
    t, _ = tensor(dtype="float32")
    with pytest.raises(ValueError, match="copy"):
        t.__array__(dtype="float64", copy=False)
    with pytest.raises(ValueError, match="copy"):
        np.array(t, dtype=np.float64, copy=False)


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "float4_e2m1fn", "int4"])
def test_dtypes_no_buffer_format_names_are_refused_by_name(dtype):
    t = dlpx.empty((4,), dtype)
    with pytest.raises(BufferError, match=dtype):
        memoryview(t)
    with pytest.raises((BufferError, AttributeError), match=dtype):
        t.__array_interface__


def test_torch_as_tensor_on_the_host():
    torch = pytest.importorskip("torch")
    t, a = tensor()
    x = torch.as_tensor(t)
    assert x.data_ptr() == t.data_ptr
    np.testing.assert_array_equal(x.numpy(), a)


def test_torch_asarray_reads_the_buffer_flat_as_it_does_every_exporter_s():
    # torch.asarray reads the buffer protocol before __dlpack__ and makes a 1-D tensor of it
    # (tensor_frombuffer), for a jax array as for a dlpx.Tensor: torch's path, not dlpx's
    # (pytorch/pytorch PR 197532 would read __dlpack__ first). When torch changes, this fails:
    # then assert the shape, and drop the sentence in docs/python.md.
    torch = pytest.importorskip("torch")
    jnp = pytest.importorskip("jax.numpy")
    t, a = tensor()
    flat = torch.asarray(t)
    assert tuple(flat.shape) == (6,) and flat.data_ptr() == t.data_ptr
    np.testing.assert_array_equal(flat.numpy(), a.ravel())
    assert tuple(torch.asarray(jnp.asarray(a)).shape) == (6,)
    for keeps_the_shape in (torch.from_dlpack, torch.as_tensor, torch.tensor):
        assert tuple(keeps_the_shape(t).shape) == (2, 3)


def test_jnp_asarray_refuses_a_str_dtype_as_it_does_tvm_ffi_s():
    # jax (0.10) asks numpy for the dtype of an object whose `.dtype` is not a numpy dtype, and
    # numpy 2.4 refuses a `.dtype` that is a str with ValueError, which jax lets through (it
    # falls back to np.asarray on TypeError only: torch's and array-api-strict's dtypes). A
    # tvm_ffi tensor, whose dtype is a str too, fails the same way. When either changes, this
    # fails: then assert the value, and drop the sentence in docs/python.md.
    jnp = pytest.importorskip("jax.numpy")
    tvm_ffi = pytest.importorskip("tvm_ffi")
    t, a = tensor()
    for x in (t, tvm_ffi.from_dlpack(a)):
        with pytest.raises(ValueError, match="via `.dtype` value"):
            jnp.asarray(x)
    np.testing.assert_array_equal(np.asarray(jnp.from_dlpack(t)), a)
    np.testing.assert_array_equal(np.asarray(jnp.asarray(np.asarray(t))), a)

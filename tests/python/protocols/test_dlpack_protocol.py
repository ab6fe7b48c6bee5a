"""dlpx.Tensor.__dlpack__ and __dlpack_device__ exactly as the array API (spec 002) says, with
R7 (versions), R9 (streams on CPU) and R10 (copies). What an export describes and holds is held
to the numpy array the tensor was imported from (its address, shape, strides and values as numpy
reports them), never to the tensor's own properties or another export of it."""

import ctypes
import re

import numpy as np
import pytest

from dlpx.conform import abi
from numpy_producers import CapsuleHolder
import dlpx


@pytest.fixture
def source():
    """A 2x3 float32 numpy array holding 0..5: the reference for the tensor imported from it."""
    return np.arange(6, dtype=np.float32).reshape(2, 3)


@pytest.fixture
def tensor(source):
    return dlpx.from_dlpack(source)


@pytest.fixture
def readonly_source():
    a = np.arange(4, dtype=np.int32)
    a.flags.writeable = False
    return a


@pytest.fixture
def readonly_tensor(readonly_source):
    return dlpx.from_dlpack(readonly_source)


def values(capsule):
    """The capsule's elements, read by numpy (which consumes the capsule)."""
    return np.from_dlpack(CapsuleHolder(capsule)).copy()


def dl_dtype(a):
    """The DLPack dtype of a numpy array of ints, unsigned ints or floats."""
    return ({"i": 0, "u": 1, "f": 2}[a.dtype.kind], a.itemsize * 8, 1)


def check_describes(info, a):
    """The capsule describes numpy's array `a`, as numpy reports it."""
    assert info["data"] + info["byte_offset"] == a.ctypes.data
    assert info["shape"] == a.shape
    assert info["strides"] == tuple(s // a.itemsize for s in a.strides)
    assert info["dtype"] == dl_dtype(a)
    assert info["device"] == (1, 0)
    assert info["ndim"] == a.ndim


# ---- max_version: R7 ---------------------------------------------------------------------


def test_no_max_version_gives_a_legacy_capsule(tensor, source):
    capsule = tensor.__dlpack__()
    assert abi.capsule_name(capsule) == b"dltensor"
    check_describes(abi.read_capsule(capsule), source)


def test_explicit_none_max_version_gives_a_legacy_capsule(tensor):
    assert abi.capsule_name(tensor.__dlpack__(max_version=None)) == b"dltensor"


@pytest.mark.parametrize("max_version", [(1, 0), (1, 2), (1, 3), (1, 99), (2, 0), (99, 99)])
def test_major_at_least_1_gives_a_versioned_1_3_capsule(tensor, source, max_version):
    capsule = tensor.__dlpack__(max_version=max_version)
    info = abi.read_capsule(capsule)
    assert info["name"] == "dltensor_versioned"
    assert info["version"] == (1, 3)
    assert info["flags"] == 0
    check_describes(info, source)


@pytest.mark.parametrize("max_version", [(0, 8), (0, 0), (-1, 0)])
def test_major_below_1_gives_a_legacy_capsule(tensor, max_version):
    assert abi.capsule_name(tensor.__dlpack__(max_version=max_version)) == b"dltensor"


@pytest.mark.parametrize("max_version", [1, (1,), (1, 2, 3), "1.3", (1.0, 0), (1, "3"), object(), {"major": 1}])
def test_malformed_max_version_is_a_type_error(tensor, max_version):
    with pytest.raises(TypeError, match=r"^dlpx: __dlpack__: .*max_version"):
        tensor.__dlpack__(max_version=max_version)


def test_both_capsules_hold_the_tensor_elements(tensor, source):
    np.testing.assert_array_equal(values(tensor.__dlpack__()), source)
    np.testing.assert_array_equal(values(tensor.__dlpack__(max_version=(1, 3))), source)


def test_an_owned_tensor_exports_the_bytes_written_into_it(source):
    t = dlpx.empty((2, 3), "float32")
    ctypes.memmove(t.data_ptr, source.ctypes.data, source.nbytes)
    np.testing.assert_array_equal(values(t.__dlpack__()), source)
    np.testing.assert_array_equal(values(t.__dlpack__(max_version=(1, 3))), source)


# ---- stream: R9 on CPU -------------------------------------------------------------------


@pytest.mark.parametrize("stream", [None, -1])
def test_stream_none_or_no_sync_is_accepted_on_cpu(tensor, source, stream):
    capsule = tensor.__dlpack__(stream=stream, max_version=(1, 3))
    check_describes(abi.read_capsule(capsule), source)


@pytest.mark.parametrize("stream", [0, 1, 2, 3, 12345, 2**40])
def test_a_stream_number_on_cpu_is_a_value_error(tensor, stream):
    with pytest.raises(ValueError, match=r"^dlpx: __dlpack__: .*stream"):
        tensor.__dlpack__(stream=stream)


@pytest.mark.parametrize("stream", ["1", 1.5, object()])
def test_a_non_integer_stream_is_a_type_error(tensor, stream):
    with pytest.raises(TypeError, match=r"^dlpx: __dlpack__: .*stream"):
        tensor.__dlpack__(stream=stream)


@pytest.mark.parametrize("stream", [True, False])
def test_a_bool_stream_is_a_type_error_as_torch_says(tensor, stream):
    # bool is an int to __index__: True would otherwise be stream 1, the legacy default.
    with pytest.raises(TypeError, match=r"^dlpx: __dlpack__: stream must be an integer or None, not bool"):
        tensor.__dlpack__(stream=stream)
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="stream must be"):
        torch.zeros(2).__dlpack__(stream=stream)


# ---- dl_device ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dl_device", [(1, 0), dlpx.Device(1, 0), [1, 0]])
def test_dl_device_cpu_exports_without_copy(tensor, source, dl_device):
    info = abi.read_capsule(tensor.__dlpack__(dl_device=dl_device, max_version=(1, 3)))
    check_describes(info, source)
    assert info["flags"] & abi.FLAG_IS_COPIED == 0


@pytest.mark.parametrize("dl_device", [(2, 0), (2, 1), (10, 0), (1, 1), (99, 0)])
def test_dl_device_dlpx_cannot_reach_is_a_buffer_error(tensor, dl_device):
    with pytest.raises(BufferError, match=r"^dlpx: __dlpack__: "):
        tensor.__dlpack__(dl_device=dl_device, max_version=(1, 3))


@pytest.mark.parametrize("dl_device", ["cpu", (1,), (1, 0, 0), 1.0])
def test_malformed_dl_device_is_a_type_error(tensor, dl_device):
    with pytest.raises(TypeError, match=r"^dlpx: __dlpack__: .*dl_device"):
        tensor.__dlpack__(dl_device=dl_device)


class _IndexHandlingItsOwnError:
    """An int whose `__index__` raises and handles an exception of its own."""

    def __index__(self):
        getattr(self, "missing", None)
        return 0


@pytest.mark.parametrize("first", [1.5, "1"])
def test_a_pair_s_bad_first_item_is_refused_whatever_the_second_runs(tensor, first):
    # The second item's __index__ ran with the first's TypeError pending, and cleared it: the
    # first item was read as -1 (a legacy capsule; a device of type -1).
    second = _IndexHandlingItsOwnError()
    with pytest.raises(TypeError, match=r"^dlpx: __dlpack__: .*max_version"):
        tensor.__dlpack__(max_version=(first, second))
    with pytest.raises(TypeError, match=r"^dlpx: __dlpack__: .*dl_device"):
        tensor.__dlpack__(dl_device=(first, second), max_version=(1, 0))
    with pytest.raises(TypeError, match=r"device"):
        dlpx.empty(2, device=(first, second))


@pytest.mark.parametrize("dl_device, says", [((1, 2**40), "device id 1099511627776"),
                                             ((2**40, 0), "device type 1099511627776"),
                                             ((1, -2**31 - 1), "device id -2147483649")])
def test_a_dl_device_past_int32_is_an_overflow_error_naming_it(tensor, dl_device, says):
    # It was read as -1 and refused as "cpu:-1", a device nobody asked for.
    with pytest.raises(OverflowError, match=rf"^dlpx: __dlpack__: dl_device: {says} does not fit DLPack's int32$"):
        tensor.__dlpack__(dl_device=dl_device, max_version=(1, 3))


@pytest.mark.parametrize("keywords, says", [({"max_version": (2**70, 0)}, "max_version[0]"),
                                            ({"max_version": (1, -2**64)}, "max_version[1]"),
                                            ({"stream": 2**64}, "stream")])
def test_an_int_past_64_bits_is_an_overflow_error_naming_it(tensor, keywords, says):
    # As CPython (and numpy's __dlpack__) say of an int its C type cannot hold; it was a ValueError.
    with pytest.raises(OverflowError, match=rf"^dlpx: __dlpack__: {re.escape(says)} does not fit in 64 bits$"):
        tensor.__dlpack__(**keywords)


# ---- copy: R10 ---------------------------------------------------------------------------


@pytest.mark.parametrize("dl_device", [None, (1, 0)])
def test_copy_true_always_copies_and_flags_it(tensor, source, dl_device):
    capsule = tensor.__dlpack__(copy=True, dl_device=dl_device, max_version=(1, 3))
    info = abi.read_capsule(capsule)
    assert info["flags"] & abi.FLAG_IS_COPIED
    assert not info["flags"] & abi.FLAG_READ_ONLY
    assert info["data"] != source.ctypes.data
    assert info["shape"] == source.shape
    assert info["dtype"] == dl_dtype(source)
    np.testing.assert_array_equal(values(capsule), source)


def test_copy_true_with_a_legacy_capsule_still_copies(tensor, source):
    capsule = tensor.__dlpack__(copy=True)
    info = abi.read_capsule(capsule)
    assert info["name"] == "dltensor"
    assert info["data"] != source.ctypes.data
    np.testing.assert_array_equal(values(capsule), source)


def test_a_copy_is_independent_and_writable(tensor, source):
    original = source.copy()
    copied = np.from_dlpack(CapsuleHolder(tensor.__dlpack__(copy=True, max_version=(1, 3))))
    assert copied.flags.writeable
    copied[...] = -1
    np.testing.assert_array_equal(source, original)


def test_from_dlpack_copy_true_of_a_tensor_that_was_a_copy_still_copies():
    # A tensor once imported as a private copy (IS_COPIED) is shared as soon as it is handed
    # on: itself, its own export coming home, a subclass wrapping it. copy=True must copy each;
    # only a fresh copy (the capsule's IS_COPIED, nothing else holding it) is taken as one.
    a = np.ndarray((3,), dtype=np.float32, buffer=bytearray(20), strides=(6,))  # no element strides
    a[:] = [1, 2, 3]
    for t in (dlpx.from_dlpack(np.arange(4.0).__dlpack__(max_version=(1, 0), copy=True)),
              dlpx.from_dlpack(memoryview(a), copy=True)):
        before = np.from_dlpack(t).copy()
        for given in (t, t.__dlpack__(max_version=(1, 0)), type("S", (dlpx.Tensor,), {})(t)):
            c = dlpx.from_dlpack(given, copy=True)
            assert c.data_ptr != t.data_ptr
            np.from_dlpack(c)[...] = -1
            np.testing.assert_array_equal(np.from_dlpack(t), before)


def test_a_copy_of_a_strided_tensor_is_compact():
    base = np.arange(24, dtype=np.int16).reshape(4, 6)
    view = base[::2, ::-3]
    t = dlpx.from_dlpack(view)
    capsule = t.__dlpack__(copy=True, max_version=(1, 3))
    info = abi.read_capsule(capsule)
    assert info["strides"] == (view.shape[1], 1)
    np.testing.assert_array_equal(values(capsule), view)


def test_a_copy_of_a_readonly_tensor_is_writable(readonly_tensor):
    info = abi.read_capsule(readonly_tensor.__dlpack__(copy=True, max_version=(1, 3)))
    assert info["flags"] == abi.FLAG_IS_COPIED
    # ... and so it may travel in a legacy capsule, which cannot say "read-only".
    assert abi.capsule_name(readonly_tensor.__dlpack__(copy=True)) == b"dltensor"


@pytest.mark.parametrize("copy", [False, None])
def test_copy_false_or_none_shares_memory(tensor, source, copy):
    info = abi.read_capsule(tensor.__dlpack__(copy=copy, dl_device=(1, 0), max_version=(1, 3)))
    check_describes(info, source)
    assert info["flags"] & abi.FLAG_IS_COPIED == 0


def test_copy_false_to_another_device_is_a_buffer_error(tensor):
    with pytest.raises(BufferError, match=r"^dlpx: __dlpack__: "):
        tensor.__dlpack__(copy=False, dl_device=(2, 0), max_version=(1, 3))


@pytest.mark.parametrize("copy", [1, 0, "yes", []])
def test_non_bool_copy_is_a_type_error(tensor, copy):
    with pytest.raises(TypeError, match=r"^dlpx: __dlpack__: .*copy"):
        tensor.__dlpack__(copy=copy)


def test_copy_of_a_zero_size_tensor():
    t = dlpx.empty((0, 3), "float32")
    info = abi.read_capsule(t.__dlpack__(copy=True, max_version=(1, 3)))
    assert info["shape"] == (0, 3)
    assert info["flags"] & abi.FLAG_IS_COPIED


def test_copy_of_a_0d_tensor():
    t = dlpx.from_dlpack(np.array(2.5))
    capsule = t.__dlpack__(copy=True, max_version=(1, 3))
    assert abi.read_capsule(capsule)["shape"] == ()
    assert values(capsule) == 2.5


# ---- read-only tensors -------------------------------------------------------------------------


def test_readonly_is_carried_in_the_versioned_capsule(readonly_tensor, readonly_source):
    info = abi.read_capsule(readonly_tensor.__dlpack__(max_version=(1, 0)))
    assert info["flags"] & abi.FLAG_READ_ONLY
    check_describes(info, readonly_source)


def test_readonly_cannot_travel_in_a_legacy_capsule(readonly_tensor):
    with pytest.raises(BufferError, match=r"^dlpx: __dlpack__: .*read-only"):
        readonly_tensor.__dlpack__()


# ---- the signature -----------------------------------------------------------------------------


@pytest.mark.parametrize("args", [(None,), (None, (1, 3)), ((1, 3),)])
def test_positional_arguments_are_a_type_error(tensor, args):
    with pytest.raises(TypeError, match=r"^dlpx: __dlpack__: .*positional"):
        tensor.__dlpack__(*args)


@pytest.mark.parametrize("kwargs", [{"version": 1}, {"device": (1, 0)}, {"max_versions": (1, 3)}])
def test_unknown_keywords_are_a_type_error(tensor, kwargs):
    with pytest.raises(TypeError, match=r"^dlpx: __dlpack__: .*unexpected keyword"):
        tensor.__dlpack__(**kwargs)


def test_all_keywords_together(tensor, source):
    capsule = tensor.__dlpack__(stream=None, max_version=(1, 3), dl_device=(1, 0), copy=False)
    check_describes(abi.read_capsule(capsule), source)


def test_dlpack_device_is_cpu_0(tensor):
    device = tensor.__dlpack_device__()
    assert device == (1, 0)
    assert type(device[0]) is int and type(device[1]) is int


def test_dlpack_device_takes_no_arguments(tensor):
    with pytest.raises(TypeError):
        tensor.__dlpack_device__(None)


# ---- what the exported tensor owns -------------------------------------------------------------


def test_each_export_is_a_fresh_managed_tensor(tensor, source):
    capsules = [tensor.__dlpack__(max_version=(1, 3)) for _ in range(3)]
    addresses = {abi.capsule_pointer(c) for c in capsules}
    assert len(addresses) == 3
    assert all(abi.read_capsule(c)["data"] == source.ctypes.data for c in capsules)


def test_export_of_a_zero_size_tensor_has_null_data():
    t = dlpx.empty((2, 0), "int8")
    info = abi.read_capsule(t.__dlpack__(max_version=(1, 3)))
    assert info["data"] == 0
    assert info["shape"] == (2, 0)
    assert info["strides"] is not None and len(info["strides"]) == 2  # R5


def test_export_of_a_0d_tensor():
    a = np.array(7, dtype=np.int64)
    t = dlpx.from_dlpack(a)
    info = abi.read_capsule(t.__dlpack__(max_version=(1, 3)))
    check_describes(info, a)
    assert values(t.__dlpack__(max_version=(1, 3))) == 7

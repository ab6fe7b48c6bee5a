"""dlpx.from_dlpack as a consumer of the `__dlpack__` protocol: what it asks a producer for,
the legacy fallback, and its `device=` / `copy=` arguments (docs/design.md R10).

The producer here is pure Python (numpy_producers.Producer): it records every call and counts
every deleter call, so the tests see exactly what dlpx asks and what it frees."""

import ctypes

import numpy as np
import pytest

from dlpx.conform import abi
from numpy_producers import Managed, Producer
import dlpx


def source(n=4):
    return np.arange(n, dtype=np.float32)


# ---- negotiation ---------------------------------------------------------------------------------


def test_asks_for_a_versioned_1_3_capsule_and_nothing_else():
    producer = Producer(source())
    t = dlpx.from_dlpack(producer)
    assert producer.calls == [{"max_version": (1, 3)}]
    assert t.data_ptr == producer.array.ctypes.data
    assert abi.capsule_name(producer.capsules[0]) == b"used_dltensor_versioned"


def test_passes_device_and_copy_on_to_the_producer():
    producer = Producer(source())
    dlpx.from_dlpack(producer, device="cpu", copy=False)
    assert producer.calls == [{"max_version": (1, 3), "dl_device": (1, 0), "copy": False}]


def test_falls_back_to_the_legacy_call_for_an_old_producer():
    producer = Producer(source(), legacy_signature=True)
    t = dlpx.from_dlpack(producer)
    assert producer.calls == [{}]
    assert abi.capsule_name(producer.capsules[0]) == b"used_dltensor"
    assert t.data_ptr == producer.array.ctypes.data
    np.testing.assert_array_equal(np.from_dlpack(t), source())


def test_accepts_a_legacy_capsule_to_a_versioned_request():
    # jax does this: it ignores max_version and always sends "dltensor".
    class LegacyOnly(Producer):
        def __dlpack__(self, **kwargs):
            self.calls.append(kwargs)
            managed = Managed(self.array, versioned=False)
            self.made.append(managed)
            self.capsules.append(managed.capsule())
            return self.capsules[-1]

    producer = LegacyOnly(source())
    t = dlpx.from_dlpack(producer)
    assert producer.calls == [{"max_version": (1, 3)}]
    assert t.data_ptr == producer.array.ctypes.data


def test_the_producers_tensor_is_freed_once_when_the_import_dies():
    producer = Producer(source())
    t = dlpx.from_dlpack(producer)
    (managed,) = producer.made
    assert managed.calls == 0
    u = dlpx.from_dlpack(t)
    del t
    assert managed.calls == 0
    del u
    assert managed.calls == 1


def test_an_unknown_major_from_a_producer_is_deleted_and_refused():
    producer = Producer(source(), version=(2, 0))
    with pytest.raises(BufferError, match=r"major version 2"):
        dlpx.from_dlpack(producer)
    assert producer.made[0].calls == 1


def test_a_malformed_tensor_from_a_producer_is_freed_by_its_capsule_not_by_dlpx():
    producer = Producer(source(), device=(99, 0))
    with pytest.raises(BufferError, match=r"^dlpx: from_dlpack: .*device"):
        dlpx.from_dlpack(producer)
    (managed,) = producer.made
    assert managed.calls == 0
    assert abi.capsule_name(producer.capsules[0]) == b"dltensor_versioned"


# ---- copy= ---------------------------------------------------------------------------------------


def test_copy_true_copies_when_the_producer_did_not():
    producer = Producer(source())
    t = dlpx.from_dlpack(producer, copy=True)
    assert producer.calls[0]["copy"] is True
    assert t.data_ptr != producer.array.ctypes.data
    np.testing.assert_array_equal(np.from_dlpack(t), source())
    # The producer's tensor was only needed for the copy.
    assert producer.made[0].calls == 1


def test_copy_true_trusts_a_producer_that_flagged_its_copy():
    producer = Producer(source(), copied_flag_on_copy=True)
    t = dlpx.from_dlpack(producer, copy=True)
    (managed,) = producer.made
    assert managed.array.ctypes.data != producer.array.ctypes.data  # the producer copied
    assert t.data_ptr == managed.array.ctypes.data  # and dlpx did not copy again


def test_copy_true_copies_a_producer_s_read_only_copy_again():
    producer = Producer(source(), copied_flag_on_copy=True, flags=abi.FLAG_READ_ONLY)
    t = dlpx.from_dlpack(producer, copy=True)
    (managed,) = producer.made
    assert not t.readonly and t.data_ptr not in (managed.array.ctypes.data, producer.array.ctypes.data)
    np.testing.assert_array_equal(np.from_dlpack(t), source())


def test_copy_true_of_numpy_through_dlpack_is_compact_as_through_its_direct_row():
    # numpy's __dlpack__(copy=True) copies an F-ordered array F-ordered; dlpx's copy is compact.
    class Only:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kwargs):
            return self.a.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    a = np.arange(6.0).reshape(2, 3).T
    for x in (a, Only(a)):
        t = dlpx.from_dlpack(x, copy=True)
        assert t.is_contiguous and t.strides == (2, 1) and not t.readonly
        np.testing.assert_array_equal(np.from_dlpack(t), a)


def test_copy_true_gives_a_writable_compact_tensor_of_a_readonly_strided_source():
    base = np.arange(20, dtype=np.int64).reshape(4, 5)
    view = base[::-2, 1::2]
    view.flags.writeable = False
    t = dlpx.from_dlpack(view, copy=True)
    assert not t.readonly
    assert t.is_contiguous
    assert t.data_ptr != view.ctypes.data
    np.testing.assert_array_equal(np.from_dlpack(t), view)


def test_copy_false_and_device_cpu_share_memory():
    a = source()
    for kwargs in ({"copy": False}, {"device": "cpu"}, {"device": "cpu:0", "copy": False}, {"device": (1, 0)},
                   {"device": dlpx.Device(1, 0)}, {"copy": None}):
        assert dlpx.from_dlpack(a, **kwargs).data_ptr == a.ctypes.data, kwargs


@pytest.mark.parametrize("kwargs", [{}, {"copy": False}, {"device": "cpu"}, {"copy": True}])
def test_from_a_dlpx_tensor(kwargs):
    t = dlpx.empty((3,), "int32")
    np.from_dlpack(t)[...] = [4, 5, 6]
    u = dlpx.from_dlpack(t, **kwargs)
    assert type(u) is dlpx.Tensor
    assert u is not t
    assert (u.data_ptr != t.data_ptr) == bool(kwargs.get("copy"))
    np.testing.assert_array_equal(np.from_dlpack(u), [4, 5, 6])


# ---- device= -------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["cuda:0", (2, 0), "rocm"])
def test_a_device_dlpx_cannot_move_to_is_a_buffer_error(device):
    with pytest.raises(BufferError, match=r"^dlpx: from_dlpack: "):
        dlpx.from_dlpack(dlpx.empty((2,)), device=device)


@pytest.mark.parametrize("device", ["bogus", "cpu:x", (1, -1), (1,)])
def test_a_malformed_device_is_refused(device):
    with pytest.raises((ValueError, TypeError), match=r"^dlpx: from_dlpack: "):
        dlpx.from_dlpack(np.zeros(2), device=device)


@pytest.mark.parametrize("copy", [1, "no", 0.0])
def test_a_non_bool_copy_is_a_type_error(copy):
    with pytest.raises(TypeError, match=r"^dlpx: from_dlpack: .*copy"):
        dlpx.from_dlpack(np.zeros(2), copy=copy)


# ---- the signature: from_dlpack(x, /, *, device=None, copy=None) ---------------------------------


def test_device_and_copy_are_keyword_only():
    with pytest.raises(TypeError, match=r"^dlpx: from_dlpack: .*positional"):
        dlpx.from_dlpack(np.zeros(2), "cpu")


def test_x_is_positional_only():
    with pytest.raises(TypeError):
        dlpx.from_dlpack(x=np.zeros(2))


def test_x_is_required():
    with pytest.raises(TypeError, match=r"^dlpx: from_dlpack: "):
        dlpx.from_dlpack()


def test_unknown_keywords_are_refused():
    with pytest.raises(TypeError, match=r"^dlpx: from_dlpack: .*stream"):
        dlpx.from_dlpack(np.zeros(2), stream=None)


# ---- found in review: padded sub-byte copies, keyword fallbacks, malformed tables ---------------


def padded_fp4(n=1024):
    """A producer's fp4 tensor stored one element per byte (IS_SUBBYTE_TYPE_PADDED)."""
    array = (np.arange(n) % 16).astype(np.uint8)
    managed = Managed(array, dtype=(17, 4, 1), flags=abi.FLAG_IS_SUBBYTE_TYPE_PADDED)
    return array, dlpx.from_dlpack(managed.capsule())


def test_a_copy_of_a_padded_sub_byte_tensor_keeps_its_padding_and_bytes():
    array, t = padded_fp4()
    assert t.nbytes == array.nbytes
    copied = dlpx.from_dlpack(t, copy=True)
    assert copied.nbytes == array.nbytes and copied.data_ptr != t.data_ptr
    info = abi.read_capsule(copied.__dlpack__(max_version=(1, 3)))
    assert info["flags"] & abi.FLAG_IS_SUBBYTE_TYPE_PADDED
    assert bytes((ctypes.c_uint8 * array.nbytes).from_address(copied.data_ptr)) == array.tobytes()


def test_a_padded_sub_byte_tensor_cannot_travel_in_a_legacy_capsule():
    _, t = padded_fp4(8)
    with pytest.raises(BufferError, match="padded sub-byte"):
        t.__dlpack__()


def test_a_producer_without_the_copy_keyword_still_gets_a_copy():
    source = np.arange(6, dtype=np.float32)
    producer = Producer(source, legacy_signature=True)
    t = dlpx.from_dlpack(producer, copy=True)
    assert t.data_ptr != source.ctypes.data
    np.testing.assert_array_equal(np.from_dlpack(t), source)
    assert [sorted(c) for c in producer.calls] == [[]]  # only the keyword-free call got through


def test_a_malformed_exchange_attribute_falls_back_to_the_protocol():
    class Malformed(Producer):
        __c_dlpack_exchange_api__ = None

    source = np.arange(3, dtype=np.int32)
    t = dlpx.from_dlpack(Malformed(source))
    assert t.data_ptr == source.ctypes.data
    with pytest.raises(TypeError, match=r"^dlpx: exchange_api_info: __c_dlpack_exchange_api__"):
        dlpx.exchange_api_info(Malformed)

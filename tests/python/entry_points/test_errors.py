"""Errors: the right exception type, a message that starts with "dlpx: <entry point>: " and says
what went wrong, producers' own exceptions passed through untouched, and no state left behind."""

import re

import numpy as np
import pytest

from dlpx.conform import abi
import dlpx


class Thing:
    """A user type that does not speak DLPack."""


class RaisingProducer:
    def __init__(self, error):
        self.error = error
        self.calls = 0

    def __dlpack__(self, **kwargs):
        self.calls += 1
        raise self.error

    def __dlpack_device__(self):
        return (1, 0)


class ReturningProducer:
    def __init__(self, value):
        self.value = value

    def __dlpack__(self, **kwargs):
        return self.value

    def __dlpack_device__(self):
        return (1, 0)


# ---- objects without DLPack ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "obj, name",
    [(object(), "object"), ([1, 2], "list"), (3, "int"), (None, "NoneType"), ("abc", "str"),
     (Thing(), "test_errors.Thing")],
)
def test_an_object_without_dlpack_is_a_type_error_naming_its_type(obj, name):
    with pytest.raises(TypeError, match=r"^dlpx: from_dlpack: ") as info:
        dlpx.from_dlpack(obj)
    assert name in str(info.value)
    assert "DLPack" in str(info.value)


def test_a_tensor_type_is_not_a_tensor():
    # np.ndarray has an (unbound) __dlpack__: calling it fails in Python, and that error stands.
    with pytest.raises(TypeError):
        dlpx.from_dlpack(np.ndarray)
    with pytest.raises(TypeError):
        dlpx.from_dlpack(dlpx.Tensor)


# ---- producers that fail ---------------------------------------------------------------------------


@pytest.mark.parametrize("error", [RuntimeError("boom"), BufferError("cannot export"), ValueError("bad"),
                                   MemoryError("oom")])
def test_a_producer_exception_passes_through_unchanged(error):
    producer = RaisingProducer(error)
    with pytest.raises(type(error)) as info:
        dlpx.from_dlpack(producer)
    assert info.value is error
    assert producer.calls == 1


def test_a_producer_type_error_is_retried_once_without_keywords_then_passed_on():
    error = TypeError("unexpected keyword")
    producer = RaisingProducer(error)
    with pytest.raises(TypeError) as info:
        dlpx.from_dlpack(producer)
    assert info.value is error
    assert producer.calls == 2  # the 2023.12 call, then the legacy call


def test_a_producer_type_error_with_copy_is_retried_with_fewer_keywords():
    # Spec 002: the TypeError fallback "is also applicable to ... dl_device and copy": retry with
    # max_version alone, then with nothing (dlpx then makes the copy itself).
    producer = RaisingProducer(TypeError("no copy keyword here"))
    with pytest.raises(TypeError, match="no copy keyword"):
        dlpx.from_dlpack(producer, copy=True)
    assert producer.calls == 3


@pytest.mark.parametrize("value, name", [(5, "int"), (None, "NoneType"), (np.zeros(2), "numpy.ndarray"),
                                         ("dltensor", "str")])
def test_a_producer_returning_a_non_capsule_is_a_type_error(value, name):
    with pytest.raises(TypeError, match=r"^dlpx: from_dlpack: .*capsule") as info:
        dlpx.from_dlpack(ReturningProducer(value))
    assert name in str(info.value)


def test_a_producer_returning_a_consumed_capsule_is_a_buffer_error():
    capsule = np.zeros(2).__dlpack__()
    dlpx.from_dlpack(capsule)
    with pytest.raises(BufferError, match=r"^dlpx: from_dlpack: .*already consumed"):
        dlpx.from_dlpack(ReturningProducer(capsule))


def test_a_producer_returning_a_foreign_capsule_is_a_type_error():
    foreign = abi.new_capsule(abi.exchange_table_address(dlpx.Tensor)[0], b"not_a_tensor")
    with pytest.raises(TypeError, match=r"^dlpx: from_dlpack: .*not_a_tensor"):
        dlpx.from_dlpack(ReturningProducer(foreign))


# ---- every entry point's messages ------------------------------------------------------------------

READONLY = np.zeros(2)
READONLY.flags.writeable = False

CASES = {
    "empty-negative": (lambda: dlpx.empty((2, -3)), ValueError, "empty", r"shape\[1\] = -3"),
    "empty-unknown-dtype": (lambda: dlpx.empty((2,), "float33x"), ValueError, "empty", "float33x"),
    "empty-raw-dtype-code": (lambda: dlpx.empty((2,), (77, 8, 1)), ValueError, "empty", "77"),
    "empty-bfloat-bits": (lambda: dlpx.empty((2,), (4, 32, 1)), ValueError, "empty", "bits"),
    "empty-shape-type": (lambda: dlpx.empty("ab"), TypeError, "empty", "shape"),
    "empty-shape-float": (lambda: dlpx.empty((2.5,)), TypeError, "empty", "shape"),
    "empty-dtype-type": (lambda: dlpx.empty((2,), 2.5), TypeError, "empty", "dtype"),
    "empty-too-many-dims": (lambda: dlpx.empty((1,) * 65), ValueError, "empty", "ndim"),
    "empty-overflow": (lambda: dlpx.empty((2**62, 2**62)), ValueError, "empty", "overflow"),
    "empty-too-large": (lambda: dlpx.empty((2**40,)), MemoryError, "empty", "bytes"),
    "empty-rocm": (lambda: dlpx.empty((2,), device="rocm:0"), NotImplementedError, "empty", "rocm:0"),
    "empty-bad-device": (lambda: dlpx.empty((2,), device="npu"), ValueError, "empty", "npu"),
    "empty-device-dlpx-cannot-allocate-on": (
        lambda: dlpx.empty((2,), device="tpu"), NotImplementedError, "empty", "allocation on device tpu:0 is not supported"
    ),
    "empty-device-int": (lambda: dlpx.empty((2,), device=7), TypeError, "empty", "pair of integers, got one integer$"),
    "empty-device-triple": (lambda: dlpx.empty((2,), device=(1, 0, 0)), TypeError, "empty", "got 3 integers$"),
    "empty-missing-shape": (lambda: dlpx.empty(), TypeError, "empty", "shape"),
    "empty-extra-keyword": (lambda: dlpx.empty((1,), order="C"), TypeError, "empty", "order"),
    "dlpack-stream": (lambda: dlpx.empty((1,)).__dlpack__(stream=1), ValueError, "__dlpack__", "stream"),
    "dlpack-device": (lambda: dlpx.empty((1,)).__dlpack__(dl_device=(2, 0)), BufferError, "__dlpack__", "cuda:0"),
    "dlpack-readonly-legacy": (lambda: dlpx.from_dlpack(READONLY).__dlpack__(), BufferError, "__dlpack__", "read-only"),
    "dlpack-max-version": (lambda: dlpx.empty((1,)).__dlpack__(max_version=(1,)), TypeError, "__dlpack__", "max_version"),
    "from_dlpack-device": (lambda: dlpx.from_dlpack(dlpx.empty((1,)), device="cuda:1"), BufferError, "from_dlpack", "cuda:1"),
    "from_dlpack-copy": (lambda: dlpx.from_dlpack(np.zeros(1), copy="yes"), TypeError, "from_dlpack", "copy"),
    "tensor-args": (lambda: dlpx.Tensor(), TypeError, "dlpx.Tensor", "one argument"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_messages_name_dlpx_the_entry_point_and_the_fact(case):
    call, kind, entry, fact = CASES[case]
    with pytest.raises(kind) as info:
        call()
    message = str(info.value)
    assert message.startswith(f"dlpx: {entry}: "), message
    assert re.search(fact, message), message


def test_an_error_leaves_nothing_behind():
    with pytest.raises(ValueError):
        dlpx.empty((-1,))
    t = dlpx.empty((2,))
    assert t.shape == (2,)
    with pytest.raises(TypeError):
        dlpx.from_dlpack(object())
    assert dlpx.from_dlpack(t).data_ptr == t.data_ptr


def test_object_new_cannot_make_an_uninitialised_tensor():
    with pytest.raises(TypeError):
        object.__new__(dlpx.Tensor)

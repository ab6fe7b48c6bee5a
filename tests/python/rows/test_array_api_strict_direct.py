"""array_api_strict arrays read through the numpy array they wrap
(src/producers/rows/array_api_strict.rs) instead of their Python `__dlpack__`: the same tensor as
their own export, without calling it, only on the CPU device and under an API version whose
`__dlpack__` takes `max_version`; their own answer (and error) for everything else. (A
`__dlpack__` that disagrees on the first array: test_direct_reads.py.)"""

import ctypes
import sys

import numpy as np
import pytest

xp = pytest.importorskip("array_api_strict")
from array_api_strict._array_object import Array  # noqa: E402

from dlpx.conform import abi  # noqa: E402
import dlpx  # noqa: E402
from direct_reads import serves  # noqa: E402
from test_consumer_fast_paths import TensorView, view_of, view_release  # noqa: E402

ARRAYS = {
    "float32": lambda: xp.reshape(xp.arange(12, dtype=xp.float32), (3, 4)),
    "strided": lambda: xp.arange(10, dtype=xp.float64)[::3],
    "int8": lambda: xp.arange(5, dtype=xp.int8),
    "bool": lambda: xp.asarray([True, False, True]),
    "complex64": lambda: xp.asarray([1 + 2j, 3], dtype=xp.complex64),
    "zero-d": lambda: xp.asarray(2.5),
    "zero-size": lambda: xp.zeros((0, 3)),
}
FIELDS = ("data", "device", "ndim", "dtype", "shape", "strides", "byte_offset")


def its_own(a) -> dict:
    info = abi.read_capsule(a.__dlpack__(max_version=(1, 3)))
    return {k: info[k] for k in FIELDS} | {"read_only": bool(info["flags"] & abi.FLAG_READ_ONLY)}


def imported(a) -> dict:
    info = abi.read_capsule(dlpx.from_dlpack(a).__dlpack__(max_version=(1, 3)))
    return {k: info[k] for k in FIELDS} | {"read_only": bool(info["flags"] & abi.FLAG_READ_ONLY)}


def viewed(a) -> dict:
    view = TensorView()
    assert view_of(a, ctypes.byref(view)) == 0
    try:
        info = {k: v for k, v in abi.describe(view.tensor).items() if k in FIELDS}
        return info | {"read_only": bool(abi.managed_at(view.owner).flags & abi.FLAG_READ_ONLY)}
    finally:
        view_release(ctypes.byref(view))


@pytest.mark.direct_read("array_api_strict")
@pytest.mark.parametrize("make", ARRAYS.values(), ids=ARRAYS.keys())
@pytest.mark.parametrize("read", [imported, viewed], ids=["from_dlpack", "view"])
def test_an_array_is_the_tensor_its_own_export_describes(make, read):
    a = make()
    with serves("array_api_strict", calls=1):
        got = read(a)
    assert got == its_own(a)


class Counting:
    """Counts the calls of `Array.__dlpack__` (replaced by a wrapper calling the original)."""

    def __init__(self, monkeypatch):
        self.calls = 0
        dlpack = Array.__dlpack__

        def counted(*args, **kwargs):
            self.calls += 1
            return dlpack(*args, **kwargs)

        monkeypatch.setattr(Array, "__dlpack__", counted)


@pytest.mark.direct_read("array_api_strict")
@pytest.mark.parametrize("read", [imported, viewed], ids=["from_dlpack", "view"])
def test_a_cpu_array_is_read_without_its_dlpack(monkeypatch, read):
    a = xp.arange(8.0)
    dlpx.from_dlpack(a)  # the first array of the process is checked against __dlpack__
    counts = Counting(monkeypatch)
    for _ in range(3):
        read(a)
    assert counts.calls == 0


@pytest.mark.parametrize("read", [imported, viewed], ids=["from_dlpack", "view"])
def test_an_array_on_a_make_believe_device_gets_its_own_dlpack(monkeypatch, read):
    a = xp.asarray(np.arange(4.0), device=xp.Device("device1"))
    counts = Counting(monkeypatch)
    assert read(a)["shape"] == (4,)
    assert counts.calls == 1


@pytest.mark.direct_read("array_api_strict")
def test_an_older_api_version_gets_its_own_refusal_and_a_newer_one_the_path_again(monkeypatch):
    a = xp.arange(4.0)
    dlpx.from_dlpack(a)
    with xp.ArrayAPIStrictFlags(api_version="2022.12"):
        with pytest.raises(ValueError, match="requires at least version 2023.12"):
            dlpx.from_dlpack(a)
    with xp.ArrayAPIStrictFlags(api_version="2024.12"):
        counts = Counting(monkeypatch)
        dlpx.from_dlpack(a)
        assert counts.calls == 0


def test_the_import_holds_the_wrapped_array_and_reference_counts_stay_flat():
    a = xp.arange(16, dtype=xp.float32)
    inner = a._array
    refs = (sys.getrefcount(a), sys.getrefcount(inner))
    t = dlpx.from_dlpack(a)
    assert sys.getrefcount(inner) == refs[1] + 1
    del t
    for _ in range(100_000):
        dlpx.from_dlpack(a)
    assert (sys.getrefcount(a), sys.getrefcount(inner)) == refs

"""Faithful import of the older array protocols, differentially (docs/design.md R11, R12): numpy
implements the buffer protocol and `__array_interface__` as their reference readers, so for
every dtype and layout of a catalogue, seen through each protocol alone, every way dlpx reads it
(`from_dlpack`, `from_dlpack(copy=True)`, the kernel API's `dlpx_import` and `dlpx_view_of`)
holds the bytes numpy reads from the same object, or refuses with BufferError exactly where
DLPack cannot describe it (a dtype it has no code for, another byte order, strides that are no
whole number of items — those cross as a copy when one is asked for)."""

import sys

import numpy as np
import pytest

import report_tables
from protocol_views import OnlyArrayInterface
from test_faithful_import import PATHS, TALLY

DESCRIBABLE = {"?", "b", "B", "h", "H", "i", "I", "l", "L", "q", "Q", "e", "f", "d", "F", "D"}


def arrays():
    """(name, array) pairs: every dtype numpy has a buffer format for, in awkward layouts."""
    base = np.arange(24)
    for char in "?bBhHiIlLqQefdFDg":
        a = base.astype(np.dtype(char)).reshape(4, 6)
        yield f"{char} contiguous", a
        yield f"{char} strided", a[::2, 1::2]
        yield f"{char} reversed", a[::-1, ::-1]
        yield f"{char} 0-d", a[1:2, 1:2].reshape(())
        yield f"{char} empty", a[:0]
    yield "big-endian int32", base.astype(">i4")
    yield "record field (5-byte strides)", np.zeros(4, [("a", "u1"), ("b", "<i4")])["b"]
    yield "structured", np.zeros(3, [("a", "<f4"), ("b", "<i2")])
    yield "datetime64", np.arange(3).astype("M8[s]")
    yield "unicode", np.array(["ab", "c"])


# numpy exports no buffer of a datetime64 array (test_numpy_has_no_buffer_of_a_datetime64 below):
# that case is the interface's alone.
CASES = [(f"{protocol}: {name}", protocol, array) for name, array in arrays()
         for protocol in ("buffer", "array_interface") if not (protocol == "buffer" and array.dtype.kind == "M")]


def wrap(protocol, array):
    return memoryview(array) if protocol == "buffer" else OnlyArrayInterface(array)


def describable(array) -> bool:
    return array.dtype.char in DESCRIBABLE and array.dtype.byteorder in "=|<"[: 3 if sys.byteorder == "little" else 2]


@pytest.mark.parametrize("case, protocol, array", CASES, ids=[c[0] for c in CASES])
def test_every_path_holds_numpy_s_reading_or_refuses_what_dlpack_cannot_say(case, protocol, array):
    x = wrap(protocol, array)
    try:
        reference = np.asarray(x)
    except Exception:  # noqa: BLE001 - numpy cannot read it either (e.g. a structured memoryview)
        reference = None
    whole_items = all(s % array.itemsize == 0 for s in array.strides)
    tally = TALLY[f"{protocol} protocol"]
    tally["cases"] += 1
    for path, read in PATHS.items():
        refuse = not describable(array) or (not whole_items and path != "copy=True") or reference is None
        try:
            data, _readonly = read(x)
        except Exception as exc:  # noqa: BLE001
            assert refuse, f"{path} refused what DLPack describes: {type(exc).__name__}: {exc}"
            assert isinstance(exc, BufferError), f"{path}: a refusal is a BufferError, got {type(exc).__name__}: {exc}"
            tally["paths refused"] += 1
            continue
        assert not refuse, f"{path} accepted what DLPack cannot describe ({array.dtype}, strides {array.strides})"
        assert data == np.ascontiguousarray(reference).tobytes(), f"{path} holds other bytes than numpy reads"
        tally["paths held its bytes"] += 1


def test_numpy_has_no_buffer_of_a_datetime64():
    with pytest.raises(ValueError, match="cannot include dtype 'M' in a buffer"):
        memoryview(np.arange(3).astype("M8[s]"))


def test_the_protocol_catalogue_prints():
    lines = ["| producer | cases | paths refused | paths held its bytes |", "|---|---|---|---|"]
    for producer in ("buffer protocol", "array_interface protocol"):
        t = TALLY[producer]
        lines.append(f"| {producer} | {t['cases']} | {t['paths refused']} | {t['paths held its bytes']} |")
    report_tables.add("faithful import: the older array protocols through every path", lines)
    assert TALLY["buffer protocol"]["cases"] >= 80

"""Which direct read served a call (docs/design.md, "A guard per direct read"). dlpx counts the
calls each direct read answered (`dlpx._native._served(row)`: numpy, tvm_ffi, jax,
array_api_strict, torch's native checks, the views torch's C shim gave, `torch_shim`, and the
kernel outputs it made torch.Tensors, `torch_outputs`; the calling thread's, on a free-threaded
interpreter); a test of a fast path asserts that the path served
it, so it fails where the path is switched off or fell back to the producer's `__dlpack__`.
Such a test is marked `direct_read(row)`: with the row switched off (`DLPX_DIRECT_OFF`) it is
expected to fail (conftest.py), so a run with a row off is green."""

from __future__ import annotations

import contextlib
import os

import dlpx

ROWS = ("numpy", "tvm_ffi", "jax", "array_api_strict", "torch")


def off(row: str) -> bool:
    """Whether `DLPX_DIRECT_OFF` switches the row's direct read off (as dlpx reads it)."""
    names = {name.strip() for name in os.environ.get("DLPX_DIRECT_OFF", "").split(",")}
    return row in names or "all" in names


def served(row: str) -> int:
    return dlpx._native._served(row)


@contextlib.contextmanager
def serves(row: str, calls: int | None = None):
    """The calls made inside were answered by the row's direct read: exactly `calls` of them, or
    at least one."""
    before = served(row)
    yield
    got = served(row) - before
    if calls is None:
        assert got >= 1, f"the {row} direct read served none of the calls"
    else:
        assert got == calls, f"the {row} direct read served {got} of {calls} calls"


@contextlib.contextmanager
def bypasses(row: str):
    """None of the calls made inside was answered by the row's direct read."""
    before = served(row)
    yield
    assert served(row) == before, f"the {row} direct read served a call it should have left to __dlpack__"

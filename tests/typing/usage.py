"""A user's calls, type-checked against dlpx's stubs and run against dlpx (scripts/check_stubs.sh
runs mypy --strict --warn-unused-ignores on it; tests/python/entry_points/test_stubs.py runs it). Each call the
runtime refuses sits in `refused()` with a `# type: ignore[...]`: mypy must flag it too, or the
unused ignore fails the check."""

import copy
import sys
import weakref
from contextlib import contextmanager
from typing import Any, Dict, Iterator, Tuple

import numpy as np
import numpy.typing as npt

import dlpx
import dlpx.cuda


@contextmanager
def refused() -> Iterator[None]:
    try:
        yield
    except TypeError:
        return
    raise AssertionError("the runtime took a call its stub refuses")


t: dlpx.Tensor = dlpx.empty((2, 3), dtype="float32", device="cpu")
u: dlpx.Tensor = dlpx.from_dlpack(np.zeros(3), copy=True)
v: dlpx.Tensor = dlpx.Tensor(np.zeros(3))
shape: Tuple[int, ...] = t.shape
device: dlpx.Device = t.device
capsule: Any = dlpx.exchange_api_of(np.ndarray)
info = dlpx.exchange_api_info(np.ndarray)
with refused():
    dlpx.Tensor(source=np.zeros(3))  # type: ignore[call-arg]
with refused():
    dlpx.exchange_api_of(type_or_object=np.ndarray)  # type: ignore[call-arg]
with refused():
    dlpx.from_dlpack(x=np.zeros(3))  # type: ignore[call-arg]
with refused():
    t.__dlpack__(None)  # type: ignore[call-arg]

# Copies, weak references, numpy and the buffer protocol.
c: dlpx.Tensor = copy.copy(t)
d: dlpx.Tensor = copy.deepcopy(t)
r: "weakref.ReferenceType[dlpx.Tensor]" = weakref.ref(t)
a: npt.NDArray[Any] = np.asarray(t)
b: npt.NDArray[Any] = t.__array__(copy=True)
m: memoryview = memoryview(t)
raw: bytes = bytes(t)

# dlpx.cuda, with or without a driver.
dlpx.cuda.empty_cache()
stats: Dict[str, int] = dlpx.cuda.memory_stats()
available: bool = dlpx.cuda.is_available()
with dlpx.cuda.stream(0) as handle:
    current: int = dlpx.cuda.current_stream()
print(f"{sys.argv[0]}: ran as typed")

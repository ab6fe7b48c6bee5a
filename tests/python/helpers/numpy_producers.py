"""Hand-made DLPack producers over numpy arrays, for the tests: tensors whose deleters count.

The ABI (structs, capsule functions) is read once, in `dlpx.conform.abi`; the counting deleter,
its registry and its `STRAY_DELETES` list are `dlpx.conform.reference`'s, shared with the
conformance kit. What is here is only what the tests add: a `ReferenceTensor` over an existing
numpy array's memory, a producer object that records every `__dlpack__` call, and a holder that
hands out one given capsule.
"""

from __future__ import annotations

import numpy as np

from dlpx.conform import abi
from dlpx.conform.reference import ReferenceTensor


class Managed(ReferenceTensor):
    """A managed tensor (versioned or legacy) over a numpy array's memory, made by the test.

    `calls` counts the deleter's calls; the struct and the array stay alive until the deleter
    runs (then the record leaves the registry; the test may still hold it to read `calls`)."""

    def __init__(
        self,
        array: np.ndarray,
        *,
        versioned: bool = True,
        version: tuple[int, int] = (abi.DLPACK_MAJOR, abi.DLPACK_MINOR),
        flags: int = 0,
        dtype: tuple[int, int, int] | None = None,
        device: tuple[int, int] = (abi.KDL_CPU, 0),
        null_strides: bool = False,
        ndim: int | None = None,
        null_data: bool = False,
    ):
        self.array = array
        nd = array.ndim
        super().__init__(
            array.shape if nd else None,  # a 0-d tensor: NULL shape and strides
            dtype or numpy_dtype_code(array.dtype),
            versioned=versioned,
            version=version,
            flags=flags,
            device=device,
            ndim=nd if ndim is None else ndim,
            strides=None if (null_strides or not nd) else tuple(s // array.itemsize for s in array.strides),
            data=None if null_data else (array.ctypes.data or None),
        )

    @property
    def calls(self) -> int:
        return self.deleter_calls

    def capsule(self):
        """A fresh, unconsumed capsule holding this tensor, with no destructor and outside the
        kit's `settle`: the test releases it (see `release`)."""
        return abi.new_capsule(self.address, self.capsule_name)

    def release(self, capsule) -> None:
        """What a spec-conforming capsule destructor does: delete only if still unconsumed."""
        if abi.capsule_valid(capsule, self.capsule_name):
            abi.call_deleter(self.address, self.struct.deleter)


def numpy_dtype_code(dtype: np.dtype) -> tuple[int, int, int]:
    kind = {"b": 6, "i": 0, "u": 1, "f": 2, "c": 5}[dtype.kind]
    return kind, dtype.itemsize * 8, 1


class Producer:
    """A pure-Python DLPack producer over `Managed` tensors: records every `__dlpack__` call
    (its keyword arguments as passed) and hands out a fresh tensor over `array` each time."""

    def __init__(self, array: np.ndarray, *, legacy_signature: bool = False, copied_flag_on_copy: bool = False, **managed_kwargs):
        self.array = array
        self.managed_kwargs = managed_kwargs
        self.calls: list[dict] = []
        self.made: list[Managed] = []
        self.capsules: list = []
        self.legacy_signature = legacy_signature
        self.copied_flag_on_copy = copied_flag_on_copy

    def __dlpack__(self, **kwargs):
        if self.legacy_signature and kwargs:
            raise TypeError(f"__dlpack__() got unexpected keyword arguments {sorted(kwargs)}")
        self.calls.append(kwargs)
        options = dict(self.managed_kwargs)
        array = self.array
        if kwargs.get("copy") and self.copied_flag_on_copy:
            array = array.copy()
            options["flags"] = options.get("flags", 0) | abi.FLAG_IS_COPIED
        if kwargs.get("max_version") is None:
            options["versioned"] = False
            options.pop("flags", None)
            options.pop("version", None)
        managed = Managed(array, **options)
        self.made.append(managed)
        capsule = managed.capsule()
        self.capsules.append(capsule)
        return capsule

    def __dlpack_device__(self):
        return self.managed_kwargs.get("device", (abi.KDL_CPU, 0))


class CapsuleHolder:
    """An object whose `__dlpack__` hands out one given capsule (to feed numpy/torch a capsule)."""

    def __init__(self, capsule, device=(abi.KDL_CPU, 0)):
        self.capsule = capsule
        self.device = device

    def __dlpack__(self, **kwargs):
        capsule, self.capsule = self.capsule, None
        return capsule

    def __dlpack_device__(self):
        return self.device

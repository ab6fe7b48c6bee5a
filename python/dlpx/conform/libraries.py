"""The built-in library factories and ``module:function`` producers.

A factory is ``make(shape, dtype_name) -> array`` holding ``arange(numel)`` in row-major order
(cast to the dtype; for dtypes the library cannot fill that way any values will do) on the
CPU. It raises when the library has no such dtype. A library also names its ``from_dlpack``
(for the consumer checks), how to make a read-only array, and an array DLPack cannot describe.
"""

from __future__ import annotations

import importlib
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional


@dataclass
class Library:
    name: str
    make: Callable[[tuple, str], Any]
    from_dlpack: Optional[Callable] = None
    readonly: Optional[Callable[[Any], Any]] = None
    undescribable: Optional[Callable[[], Any]] = None
    spec: Optional[str] = None  # how a child process loads it again (see isolated.py)


class Unavailable(Exception):
    """A spec that cannot be checked here: an unknown library, a module or function that does not
    exist, or a built-in library whose peer is not installed (cupy: or sees no GPU). The CLI
    prints the message, one line, and exits with status 2: nothing was checked, so nothing conforms."""


def _numpy():
    import numpy as np

    def make(shape, dtype):
        return np.arange(math.prod(shape)).astype(np.dtype(dtype)).reshape(shape)

    def readonly(a):
        a = a.copy()
        a.flags.writeable = False
        return a

    return Library("numpy", make, np.from_dlpack, readonly, lambda: np.zeros(3, dtype=">f4"))


def _torch():
    import torch

    def make(shape, dtype):
        return torch.arange(math.prod(shape), dtype=torch.float64).to(getattr(torch, dtype)).reshape(shape)

    return Library("torch", make, torch.from_dlpack, None, lambda: torch.zeros(3, 3).to_sparse())


def _jax():
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax.numpy as jnp

    def make(shape, dtype):
        x = jnp.arange(math.prod(shape)).astype(jnp.dtype(dtype)).reshape(shape)
        if x.dtype != jnp.dtype(dtype):  # 64-bit types narrow unless jax_enable_x64 is set
            raise TypeError(f"jax gives {x.dtype} for {dtype} (jax_enable_x64 is off)")
        return x

    return Library("jax", make, jnp.from_dlpack)


def _cupy():
    import cupy

    cupy.cuda.runtime.getDeviceCount()  # raises without a GPU: nothing to check then

    def make(shape, dtype):
        return cupy.arange(math.prod(shape)).astype(dtype).reshape(shape)

    return Library("cupy", make, cupy.from_dlpack)


def _tvm_ffi():
    import numpy as np
    import tvm_ffi

    def make(shape, dtype):
        return tvm_ffi.from_dlpack(np.arange(math.prod(shape)).astype(np.dtype(dtype)).reshape(shape))

    return Library("tvm_ffi", make, tvm_ffi.from_dlpack)


def _array_api_strict():
    import array_api_strict as xp

    def make(shape, dtype):
        return xp.reshape(xp.astype(xp.arange(math.prod(shape)), getattr(xp, dtype)), shape)

    return Library("array_api_strict", make, xp.from_dlpack)


def _dlpx():
    import dlpx

    def make(shape, dtype):
        t = dlpx.empty(shape, dtype=dtype)
        if dtype == "float32" and t.numel:
            import ctypes

            (ctypes.c_float * t.numel).from_address(t.data_ptr)[:] = [float(i) for i in range(t.numel)]
        return t

    return Library("dlpx", make, dlpx.from_dlpack)


class _OnlyArrayInterface:
    """numpy's array seen through ``__array_interface__`` alone, as older libraries export."""

    def __init__(self, array):
        self._array = array

    @property
    def __array_interface__(self):
        return self._array.__array_interface__

    def __getitem__(self, index):
        return _OnlyArrayInterface(self._array[index])


def _buffer():
    import numpy as np

    def make(shape, dtype):
        return memoryview(np.arange(math.prod(shape)).astype(np.dtype(dtype)).reshape(shape))

    def readonly(view):
        return memoryview(bytes(view)).cast(view.format, view.shape)

    return Library("buffer", make, None, readonly, lambda: memoryview(np.zeros(3, dtype=">f4")))


def _array_interface():
    import numpy as np

    def make(shape, dtype):
        return _OnlyArrayInterface(np.arange(math.prod(shape)).astype(np.dtype(dtype)).reshape(shape))

    def readonly(x):
        a = x._array.copy()
        a.flags.writeable = False
        return _OnlyArrayInterface(a)

    return Library("array_interface", make, None, readonly, lambda: _OnlyArrayInterface(np.zeros(3, dtype=">f4")))


BUILTIN = {
    "numpy": _numpy,
    "torch": _torch,
    "jax": _jax,
    "cupy": _cupy,
    "tvm_ffi": _tvm_ffi,
    "array_api_strict": _array_api_strict,
    "dlpx": _dlpx,
    "buffer": _buffer,
    "array_interface": _array_interface,
}


def load(spec: str) -> Library:
    """A built-in name or ``module:function``; raises Unavailable naming what was not found."""
    if spec in BUILTIN:
        try:
            library = BUILTIN[spec]()
        except Exception as exc:  # noqa: BLE001 - ImportError, a missing GPU: the peer, not the kit
            raise Unavailable(f"{spec}: not usable here ({_first_line(exc)})") from exc
    elif ":" in spec:
        library = Library(spec, _function(spec))
    else:
        raise Unavailable(f"unknown library {spec!r} (built-in: {', '.join(BUILTIN)}; or module:function)")
    library.spec = spec
    return library


def _function(spec: str) -> Callable:
    """The function ``module:function`` names; Unavailable when the module or the name is not there."""
    module_name, _, name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - ModuleNotFoundError, or whatever the module's import raises
        raise Unavailable(f"{spec}: cannot import module {module_name!r} ({_first_line(exc)})") from exc
    function = getattr(module, name, None)
    if function is None:
        raise Unavailable(f"{spec}: module {module_name!r} has no function {name!r}")
    if not callable(function):
        raise Unavailable(f"{spec}: {module_name}.{name} is not a function ({type(function).__name__})")
    return function


def _first_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"[:120]

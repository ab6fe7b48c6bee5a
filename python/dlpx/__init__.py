"""dlpx: a DLPack exchange runtime.

``dlpx.Tensor`` carries tensors between frameworks through DLPack and publishes dlpx's C
exchange table (``__dlpack_c_exchange_api__``); ``dlpx.from_dlpack`` imports any producer's
tensor, through its exchange table when it has one. The native code is ``libdlpx.so``, the
same file C and C++ programs link: loading it here makes both share one copy.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import ExtensionFileLoader
from importlib.util import module_from_spec, spec_from_loader

from . import _device
from ._device import Device

__all__ = [
    "Tensor", "Device", "empty", "from_dlpack", "exchange_api_of", "exchange_api_info", "library_path", "load_library",
    "outputs_like",
    "cuda", "__version__", "DLPACK_VERSION",
]

_HERE = os.path.dirname(os.path.abspath(__file__))


def library_path() -> str:
    """Path of the libdlpx shared library this package loads (``$DLPX_LIBRARY`` overrides it).

    A wheel holds one file named after the SONAME (``libdlpx.so.0``): wheels cannot hold the
    usual ``libdlpx.so`` symlink, and C extensions linked against dlpx ask for the SONAME."""
    override = os.environ.get("DLPX_LIBRARY")
    if override:
        return os.path.abspath(override)
    for name in ("libdlpx.so.0", "libdlpx.so"):
        candidate = os.path.join(_HERE, "lib", name)
        if os.path.exists(candidate):
            return candidate
    return os.path.join(_HERE, "lib", "libdlpx.so.0")


def _load_native():
    path = library_path()
    if not os.path.exists(path):
        raise ImportError(f"dlpx: native library not found at {path} (reinstall dlpx, or set DLPX_LIBRARY)")
    loader = ExtensionFileLoader("dlpx._native", path)
    spec = spec_from_loader("dlpx._native", loader, origin=path)
    module = module_from_spec(spec)
    loader.exec_module(module)
    sys.modules["dlpx._native"] = module
    return module


_native = _load_native()
_native._set_device_class(Device)
_device._bind(_native)

Tensor = _native.Tensor
empty = _native.empty
from_dlpack = _native.from_dlpack
exchange_api_of = _native.exchange_api_of
exchange_api_info = _native.exchange_api_info
__version__ = _native.__version__


def load_library(path):
    """The kernel library at ``path`` (a shared library built with ``<dlpx/kernel.h>``): a module
    with one function per kernel, which takes tensors of every framework dlpx reads and returns
    outputs as the type of its first tensor argument (docs/kernels.md, "Kernel libraries").
    Loaded once for the process: the same library, by any path, gives the same module. OSError
    when the path is no loadable library, ImportError when it holds no dlpx kernels or kernels
    of a newer kernel ABI. ``path``: a str, bytes or path-like object whose name is UTF-8; a name
    without ``/`` is looked up on the library search path, as ``ctypes.CDLL`` does, and any other
    is made absolute (the module's ``__file__``)."""
    path = os.fsdecode(path)
    try:
        path.encode()
    except UnicodeEncodeError:
        raise OSError(f"dlpx: load_library: cannot load {path!r}: dlpx opens libraries by UTF-8 names") from None
    if "/" in path and not os.path.isabs(path):
        # Joined to the working directory less its `.` parts; `..` stays: `link/../x.so` is
        # dlopen's to resolve through the link, as a trailing `/` is (a file's name with one is
        # no path to it).
        joined = os.path.join(os.getcwd(), *[part for part in path.split("/") if part not in ("", ".")])
        path = joined + "/" if path.endswith(("/", "/.")) else joined
    return _native.load_library(path)


# The blocks of `outputs_like` entered in this context, innermost first: a `_Block`
# (framework, the outer blocks, its entry's key), or None. A context variable, as decimal.localcontext keeps its
# context: each asyncio task has its own copy, each thread its own (a copy of its starter's where
# threads inherit contexts: free-threaded 3.14). The loader reads it (its `get`) in a call made
# while any block lives, in any context.
_OUTPUTS_LIKE = __import__("contextvars").ContextVar("dlpx.outputs_like", default=None)
_native._outputs_like_context(_OUTPUTS_LIKE.get)


class _Block(tuple):
    """(framework, outer blocks, its entry's key): counted by the loader from its making to its
    freeing, when no context holds it any more (a task or thread that inherited it may outlive
    its `with`)."""

    __slots__ = ()

    def __del__(self):
        try:
            _native._outputs_like_exit()
        except Exception:  # noqa: BLE001 -- at interpreter exit the module may be gone
            pass


class outputs_like:
    """``with dlpx.outputs_like(x):`` kernel calls in this context give their outputs to ``x``'s
    framework (``x`` a tensor or a tensor type: ``torch.Tensor``, ``numpy.ndarray``,
    ``dlpx.Tensor``, ...) instead of their first tensor argument's: its allocator, its stream,
    its type back. ``None`` restores the first argument's rule. Nested blocks restore the outer
    choice. The choice is a context variable's (``contextvars``), as ``decimal.localcontext``'s:
    other threads and other asyncio tasks keep their own."""

    __slots__ = ("_framework", "_entered")

    def __init__(self, x):
        self._framework = x
        self._entered = []  # the blocks this object entered and has not left, latest last

    def __enter__(self):
        # x, or its type's nearest base that names a framework; a TypeError for what is none's.
        # Counted from here: the block made next is uncounted when it is freed.
        framework = _native._outputs_like_enter(self._framework)
        key = object()
        _OUTPUTS_LIKE.set(_Block((framework, _OUTPUTS_LIKE.get(), key)))
        self._entered.append(key)

    def __exit__(self, *exc_info):
        # This object's latest block in force in this context leaves it, wherever it sits in the
        # chain: a generator's block may end inside a block entered after it. The blocks above
        # it are made again over its outer ones (each counted as at its entry, its key kept). A
        # block entered in another context (a generator finished by another thread) is not in
        # this one's chain, and that context keeps it.
        chain = []
        blocks = _OUTPUTS_LIKE.get()
        while blocks is not None:
            chain.append(blocks)
            blocks = blocks[1]
        keys = [block[2] for block in chain]
        mine = next((key for key in reversed(self._entered) if any(key is k for k in keys)), None)
        if mine is None:  # its context keeps it; which of this object's entries it was is unknown
            return
        self._entered.remove(mine)
        at = next(i for i, key in enumerate(keys) if key is mine)
        rest = chain[at][1]
        for block in reversed(chain[:at]):
            rest = _Block((_native._outputs_like_enter(block[0]), rest, block[2]))
        _OUTPUTS_LIKE.set(rest)


DLPACK_VERSION = _native.DLPACK_VERSION

from . import cuda  # noqa: E402  (needs _native)


def __dir__() -> "list[str]":
    """The public API alone (``__all__``): not the helpers this module imports or defines."""
    return sorted(__all__)

import os
import types
from typing import Any, Dict, List, Optional, Tuple, Union

from numpy.typing import NDArray
from typing_extensions import disjoint_base

from . import cuda as cuda
from ._device import Device as Device

# The stub is the runtime: tests/python/entry_points/test_stubs.py holds every name, parameter (name, kind,
# default) and property here to the built module, and scripts/check_stubs.sh runs mypy's stubtest.

__all__ = [
    "Tensor", "Device", "empty", "from_dlpack", "exchange_api_of", "exchange_api_info", "library_path", "load_library",
    "cuda", "__version__", "DLPACK_VERSION",
]

__version__: str
DLPACK_VERSION: Tuple[int, int]

# A device: a Device, "cpu" / "cuda:1", a (type, id) pair, or a peer's device object (torch, jax,
# cupy, tvm_ffi); a dtype: a DLPack name, a (code, bits, lanes) triple, or a peer's dtype or
# scalar type (numpy, torch, jax, cupy, ml_dtypes, tvm_ffi). docs/python.md, "Arguments".
_DeviceLike = Union[Device, str, Tuple[int, int], Any]
_DTypeLike = Union[str, Tuple[int, int, int], Any]

@disjoint_base
class Tensor:
    """A tensor dlpx carries between frameworks through DLPack (no arithmetic)."""

    __dlpack_c_exchange_api__: Any  # a PyCapsule named 'dlpack_exchange_api'
    __c_dlpack_exchange_api__: int
    def __new__(cls, source: Any, /) -> "Tensor": ...
    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def strides(self) -> Tuple[int, ...]: ...
    @property
    def ndim(self) -> int: ...
    @property
    def numel(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def byte_offset(self) -> int: ...
    @property
    def data_ptr(self) -> int: ...
    @property
    def is_contiguous(self) -> bool: ...
    @property
    def readonly(self) -> bool: ...
    @property
    def dtype(self) -> str: ...
    @property
    def dtype_raw(self) -> Tuple[int, int, int]: ...
    @property
    def device(self) -> Device: ...
    @property
    def __array_interface__(self) -> Dict[str, Any]: ...  # host memory only (AttributeError otherwise)
    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]: ...  # CUDA memory only (AttributeError otherwise)
    def __dlpack__(
        self,
        *,
        stream: Optional[int] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
        read_only: bool = False,
    ) -> Any: ...  # a PyCapsule named 'dltensor_versioned' or 'dltensor'
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> NDArray[Any]: ...
    def __copy__(self) -> "Tensor": ...
    def __deepcopy__(self, memo: Any, /) -> "Tensor": ...
    # The buffer protocol (PEP 688; CPython defines these from 3.12, the stub on every version, as
    # typeshed does, so that memoryview(t), bytes(t) and np.frombuffer(t) type-check).
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, buffer: memoryview, /) -> None: ...

def empty(shape: Union[int, Tuple[int, ...]], dtype: Optional[_DTypeLike] = "float32", device: Optional[_DeviceLike] = "cpu") -> Tensor: ...
def from_dlpack(x: Any, /, *, device: Optional[_DeviceLike] = None, copy: Optional[bool] = None) -> Tensor: ...
def exchange_api_of(type_or_object: Any, /) -> Any: ...  # a PyCapsule named 'dlpack_exchange_api'
def exchange_api_info(type_or_object: Any, /) -> Optional[Dict[str, Any]]: ...
def library_path() -> str: ...
def __dir__() -> List[str]: ...
def load_library(path: Union[str, "os.PathLike[str]"]) -> types.ModuleType: ...

"""dlpx.Device: a DLPack device as a (device_type, device_id) pair that prints as 'cuda:1'."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Union

# Filled from the native library when the package loads it: the names of DLPack's device types
# as dlpx spells them once (``_native.DEVICE_TYPE_NAMES``), and the one device parser, the one
# ``dlpx.empty(device=...)`` uses (``_native._parse_device``).
_NAMES: "dict[int, str]" = {}
_parse: "Callable[[Any], Device] | None" = None


def _bind(native: Any) -> None:
    global _parse
    _NAMES.update(native.DEVICE_TYPE_NAMES)
    _parse = native._parse_device


class Device(NamedTuple):
    """A DLPack device. A tuple ``(device_type, device_id)`` as ``__dlpack_device__`` returns,
    printed and compared as ``'cpu:0'`` / ``'cuda:1'`` (``'cpu'`` means ``'cpu:0'``)."""

    device_type: int
    device_id: int

    @property
    def type(self) -> str:
        """The device type's name: 'cpu', 'cuda', 'cuda_host', ..."""
        return _NAMES.get(self.device_type, f"device(type={self.device_type})")

    @property
    def index(self) -> int:
        return self.device_id

    @classmethod
    def parse(cls, device: "DeviceLike") -> "Device":
        """The device ``dlpx.empty(device=...)`` reads from ``device``: ``'cuda:1'`` ->
        ``Device(2, 1)``, ``'cpu'`` -> ``Device(1, 0)``, a ``(device_type, device_id)`` pair, a
        ``Device``, or a torch, jax, cupy or tvm_ffi device. ValueError for a name or value that
        is no device (``'cpu:'``, ``'cuda:01'``, ``(99, 0)``), TypeError for anything else."""
        if _parse is None:  # only before the package has loaded its native library
            raise RuntimeError("dlpx.Device.parse: dlpx's native library is not loaded")
        parsed = _parse(device)
        return parsed if type(parsed) is cls else cls(*parsed)

    def __str__(self) -> str:
        return f"{self.type}:{self.device_id}"

    def __repr__(self) -> str:
        # An expression that makes it again: eval(repr(d)) == d where dlpx is imported.
        return f"dlpx.Device({self.device_type}, {self.device_id})"

    def __eq__(self, other: object) -> bool:
        # Equal to the pair it is and to its printed name ("cpu:0", or "cpu" for index 0). It
        # hashes as the pair, so a dict keyed by names does not find it: look up str(device).
        if isinstance(other, str):
            try:
                other = Device.parse(other)
            except ValueError:
                return False
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return tuple.__hash__(self)


# A device argument's form as a type checker sees it; torch's, jax's, cupy's and tvm_ffi's
# devices are read too, without their types being named here (dlpx imports none of them).
DeviceLike = Union[Device, str, "tuple[int, int]", Any]

"""dlpx.Device: a DLPack device as a (device_type, device_id) pair that prints as 'cuda:1'."""

from __future__ import annotations

from typing import NamedTuple, Union

# Filled from the native table (``dlpx._native.DEVICE_TYPE_NAMES``, DLPack's device types as
# dlpx spells them once) when the package loads the library.
_NAMES: "dict[int, str]" = {}
_CODES: "dict[str, int]" = {}


def _set_names(names: "dict[int, str]") -> None:
    _NAMES.update(names)
    _CODES.update({name: code for code, name in names.items()})


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
    def parse(cls, text: str) -> "Device":
        """'cuda:1' -> Device(2, 1); 'cpu' -> Device(1, 0)."""
        name, _, index = text.partition(":")
        if name not in _CODES or (index and not index.isdigit()):
            raise ValueError(f"dlpx: unknown device '{text}' (expected e.g. 'cpu', 'cuda:0')")
        return cls(_CODES[name], int(index or 0))

    def __str__(self) -> str:
        return f"{self.type}:{self.device_id}"

    def __repr__(self) -> str:
        return f"dlpx.Device('{self}')"

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


DeviceLike = Union[Device, str, "tuple[int, int]"]

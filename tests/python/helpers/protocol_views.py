"""Objects that speak one of the older array protocols alone (no DLPack, no buffer of their
own), for the protocol tests: numpy's `__array_interface__` or a CUDA array interface, seen
without the rest of what their producer speaks."""


class OnlyArrayInterface:
    """`array` seen through `__array_interface__` alone, with `changes` to its dict."""

    def __init__(self, array, **changes):
        self.array, self.changes = array, changes

    @property
    def __array_interface__(self):
        return dict(self.array.__array_interface__, **self.changes)


class OnlyCudaInterface:
    """A CUDA array interface alone: `source`'s own (read at each access, as a producer's
    property is), or `source` itself when it is a dict; `owner` keeps its memory alive."""

    def __init__(self, source, owner=None):
        self.source, self.owner = source, owner

    @property
    def __cuda_array_interface__(self):
        return self.source if isinstance(self.source, dict) else self.source.__cuda_array_interface__

"""The kit against producers broken on purpose, each breaking one clause: a bug hunt found each
certified as passing (or, for the last ones, crashing the kit or failing a correct producer).
Each is numpy's array with its `__dlpack__` capsule edited after the fact."""

import ctypes
import math

import numpy as np
import pytest

from dlpx.conform import abi, check_producer

# A capsule renamed 'DLTensor' makes numpy's own destructor complain, unraisably, whenever it is
# collected: as it should.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

_KEEP = []  # memory a hook's capsule points into, kept for the process


class _Edited:
    """numpy's array; `edit(capsule, kwargs, array)` rewrites each capsule it exports."""

    edit = None

    def __init__(self, array):
        self.array = array

    def __getitem__(self, index):
        return type(self)(self.array[index])

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        capsule = self.array.__dlpack__(**kwargs)
        return type(self).edit(capsule, kwargs, self.array) or capsule


def _struct(capsule):
    versioned = abi.capsule_name(capsule).endswith(abi.VERSIONED_NAME)
    return abi.managed_at(abi.capsule_pointer(capsule), versioned), versioned


def _zeros_for_a_copy(capsule, kwargs, array):
    if kwargs.get("copy"):
        zeros = (ctypes.c_uint8 * max(array.nbytes, 1))()
        _KEEP.append(zeros)
        m, _ = _struct(capsule)
        m.dl_tensor.data, m.dl_tensor.byte_offset = ctypes.addressof(zeros), 0


def _same_memory_for_a_copy(capsule, kwargs, array):
    if kwargs.get("copy"):
        capsule = array.__dlpack__(max_version=kwargs.get("max_version"))
        m, versioned = _struct(capsule)
        m.dl_tensor.data -= 64
        m.dl_tensor.byte_offset += 64
        m.flags |= abi.FLAG_IS_COPIED if versioned else 0
        return capsule


def _is_copied_on_its_own_memory(capsule, kwargs, array):
    m, versioned = _struct(capsule)
    if kwargs.get("copy") is None and versioned:
        m.flags |= abi.FLAG_IS_COPIED


_SetDestructor = ctypes.pythonapi.PyCapsule_SetDestructor
_SetDestructor.argtypes, _SetDestructor.restype = [ctypes.py_object, ctypes.c_void_p], ctypes.c_int


def _no_destructor(capsule, kwargs, array):
    _SetDestructor(capsule, None)


def _value_error_for_cuda(capsule, kwargs, array):
    return capsule  # its class refuses CUDA before numpy is asked: `_ValueErrorForCuda`


def _another_name(capsule, kwargs, array):
    abi.rename_capsule(capsule, b"DLTensor")


def _null_strides_legacy_only(capsule, kwargs, array):
    m, versioned = _struct(capsule)
    if not versioned and array.flags.c_contiguous:
        m.dl_tensor.strides = None


def _strides_far_outside(capsule, kwargs, array):
    m, _ = _struct(capsule)
    if m.dl_tensor.ndim > 0 and m.dl_tensor.strides:
        for i in range(m.dl_tensor.ndim):
            m.dl_tensor.strides[i] = 1 << 40


# (edit, the check that must fail), each breaking the clause that check cites.
BROKEN = {
    "copy=True hands out zeros": (_zeros_for_a_copy, "copy.true"),
    "copy=True hands out the same memory, split as data - 64 and byte_offset 64": (_same_memory_for_a_copy, "copy.true"),
    "IS_COPIED on a zero-copy export": (_is_copied_on_its_own_memory, "copy.flag_only_on_copies"),
    "no capsule destructor: an unconsumed tensor is never deleted": (_no_destructor, "capsule.unconsumed_deleted_once"),
    "ValueError, not BufferError, for a device it cannot handle": (_value_error_for_cuda, "dl_device.honoured"),
    "a capsule named 'DLTensor'": (_another_name, "capsule.name"),
}


class _ValueErrorForCuda(_Edited):
    def __dlpack__(self, **kwargs):
        device = kwargs.get("dl_device")
        if device is not None and tuple(device)[0] == abi.KDL_CUDA:
            raise ValueError("no CUDA here")
        return super().__dlpack__(**kwargs)


def _make(edit):
    base = _ValueErrorForCuda if edit is _value_error_for_cuda else _Edited
    cls = type("Broken", (base,), {"edit": staticmethod(edit)})
    return lambda shape, dtype: cls(np.arange(math.prod(shape)).astype(dtype).reshape(shape))


@pytest.mark.parametrize("broken", list(BROKEN))
def test_a_producer_breaking_a_clause_fails_it(broken):
    edit, check = BROKEN[broken]
    checks = check_producer(_make(edit))
    failed = {c.name for c in checks if c.failed_required}
    assert check in failed and not checks.ok, [(c.name, c.status, c.detail) for c in checks if c.status != "pass"]


def test_a_legacy_producer_s_null_strides_are_the_compact_ones_they_mean():
    # 001: "When the strides field ... is NULL, it indicates a row-major compact array"; the
    # kit read every element at offset 0 and failed layout.contiguous.
    class LegacyOnly(_Edited):
        edit = staticmethod(_null_strides_legacy_only)

        def __dlpack__(self, **kwargs):
            kwargs.pop("max_version", None)
            return super().__dlpack__(**kwargs)

    checks = check_producer(lambda shape, dtype: LegacyOnly(np.arange(math.prod(shape)).astype(dtype).reshape(shape)))
    assert not [c.name for c in checks if c.failed_required]


def test_a_producer_with_no_dlpack_device_fails_a_row_and_the_kit_goes_on():
    class NoDevice:
        def __init__(self, array):
            self.array = array

        def __getitem__(self, index):
            return NoDevice(self.array[index])

        def __dlpack__(self, **kwargs):
            return self.array.__dlpack__(**kwargs)

    checks = check_producer(lambda shape, dtype: NoDevice(np.zeros(shape, dtype)))
    raised = [c for c in checks if c.name.endswith(".raised")]
    assert raised and not checks.ok and "AttributeError" in raised[0].detail
    assert any(c.name.startswith("layout.") and c.status == "pass" for c in checks)  # later steps ran


def test_strides_reaching_far_outside_fail_rows_instead_of_crashing_the_kit():
    # Strides of 2^40 elements: read at them, the kit's own process crashed (SIGSEGV) with no
    # table. Now it reads no element of such a tensor and fails the rows that would have.
    checks = check_producer(_make(_strides_far_outside))
    raised = [c for c in checks if c.failed_required and "ValueError: not read: strides (1099511627776" in c.detail]
    assert raised and not checks.ok, [(c.name, c.status, c.detail) for c in checks if c.status != "pass"]


def _major_0(capsule, kwargs, array):
    m, versioned = _struct(capsule)
    if versioned:
        m.version.major = 0


def _null_shape(capsule, kwargs, array):
    m, _ = _struct(capsule)
    if m.dl_tensor.ndim > 0:
        m.dl_tensor.shape = None


@pytest.mark.parametrize("edit, says", [(_major_0, "a capsule of DLPack 0.0: only its version may be read"),
                                        (_null_shape, "shape is NULL with ndim 2")])
def test_a_capsule_the_kit_cannot_describe_fails_rows_that_say_why(edit, says):
    # The kit's checks indexed what it could not read: "KeyError: 'device'", "TypeError:
    # 'NoneType' object is not iterable" in `<check>.raised` rows.
    checks = check_producer(_make(edit))
    failed = [c for c in checks if c.failed_required]
    assert any(says in c.detail for c in failed), [(c.name, c.detail) for c in failed]
    assert not [c for c in failed if "KeyError" in c.detail or "NoneType" in c.detail]

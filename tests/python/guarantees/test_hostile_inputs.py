"""Hostile inputs never crash, corrupt or leak (issue 13).

A hostile producer built in C (hostile_producer.c: it can send every field of a managed tensor
malformed, in a capsule or from its exchange table) and hostile Python objects (a lying
``__len__``, a raising ``__index__``, a recursive or mutating ``__dlpack__``): each gives a clean
exception of the right kind, a producer's deleter runs exactly once, and no exception is left
set for a later call to trip over.
"""

import ctypes
import gc
import re
import sys

import numpy as np
import pytest

import dlpx
from dlpx.conform import abi
from dlpx.conform.reference import ReferenceTensor, settle

import hostile_producer as hostile

hostile.library()  # builds it now: a module without a C compiler skips as a whole

LIB = ctypes.PyDLL(dlpx.library_path())
LIB.dlpx_import.argtypes = [ctypes.py_object, ctypes.POINTER(ctypes.c_void_p)]
LIB.dlpx_import.restype = ctypes.c_int


DlpxTensorView = abi.DlpxTensorView


LIB.dlpx_view_of.argtypes = [ctypes.py_object, ctypes.POINTER(DlpxTensorView)]
LIB.dlpx_view_of.restype = ctypes.c_int
LIB.dlpx_view_release.argtypes = [ctypes.POINTER(DlpxTensorView)]
LIB.dlpx_view_release.restype = None


def settled(tensor):
    gc.collect()
    settle()
    return tensor.deleter_calls


def nothing_pending():
    """A successful call right after: CPython raises SystemError from a call that returns a
    result while an exception is set, so a stale exception shows up here."""
    assert dlpx.empty((1,)).shape == (1,)
    assert sys.exc_info() == (None, None, None)


# ---- a producer's malformed fields -----------------------------------------------------------

# Every field a producer fills, set to what dlpx must refuse: (field, hostile_producer.spec arguments).
MALFORMED = {
    "major-2": dict(version=(2, 0)),
    "major-0": dict(version=(0, 9)),
    "major-max": dict(version=(2**32 - 1, 0)),
    "ndim-negative": dict(shape=(4,), ndim=-1),
    "ndim-65": dict(shape=(1,) * 65),
    "ndim-huge": dict(shape=(4,), ndim=2**31 - 1),
    "shape-null": dict(shape=None, ndim=2),
    "shape-negative": dict(shape=(2, -3)),
    "shape-int64-min": dict(shape=(-(2**63),)),
    "shape-overflow": dict(shape=(2**62, 2**62)),
    "bytes-overflow": dict(shape=(2**61,), dtype=(2, 64, 1)),
    "dtype-unknown-code": dict(dtype=(99, 32, 1)),
    "dtype-zero-bits": dict(dtype=(2, 0, 1)),
    "dtype-zero-lanes": dict(dtype=(2, 32, 0)),
    "dtype-fp4-bits": dict(dtype=(17, 8, 1)),
    "dtype-complex-odd": dict(dtype=(5, 63, 1)),
    "device-unknown": dict(device=(99, 0)),
    "device-negative": dict(device=(-1, 0)),
    # No device has a negative ordinal (each was carried and re-exported, refused by a copy only).
    "device-id-negative-cuda": dict(device=(2, -1)),
    "device-id-negative-cpu": dict(device=(1, -5)),
    "data-null": dict(data=False),
    # Strides whose byte offsets overflow (issue 44): 2^61 x 4 bytes wraps to INT64_MIN, 2^62 x 4
    # to 0 (every row read as row 0); each stride fits but their sum does not; a negative stride
    # reaching below address 0; a byte_offset that wraps the address space.
    "strides-wrap-min": dict(shape=(2, 4), strides=(2**61, 1)),
    "strides-wrap-zero": dict(shape=(2, 4), strides=(2**62, 1)),
    "strides-negative": dict(shape=(2, 4), strides=(-(2**62), 1)),
    "strides-sum": dict(shape=(2, 2, 2), strides=(2**60, 2**60, 2**60)),
    "strides-below-zero": dict(shape=(3,), strides=(-(2**58),)),
    "offset-wraps": dict(shape=(4,), byte_offset=2**64 - 8),
}


# Each case in both structs, but a version's, which a legacy tensor has no field for.
MALFORMED_STRUCTS = [pytest.param(case, versioned, id=f"{case}-{'versioned' if versioned else 'legacy'}")
                     for case in sorted(MALFORMED) for versioned in (True, False)
                     if versioned or "version" not in MALFORMED[case]]


@pytest.mark.parametrize("case, versioned", MALFORMED_STRUCTS)
def test_a_malformed_tensor_is_a_buffer_error_and_deleted_once(case, versioned):
    tensor = hostile.make(versioned, **MALFORMED[case])
    capsule = tensor.capsule()
    with pytest.raises(BufferError, match=r"^dlpx: from_dlpack: "):
        dlpx.from_dlpack(capsule)
    del capsule
    assert tensor.deleter_calls == 1
    nothing_pending()


def test_the_bad_input_matrix_covers_every_field():
    fields = {case.split("-")[0] for case in MALFORMED}
    assert fields == {"major", "ndim", "shape", "bytes", "dtype", "device", "data", "strides", "offset"}


@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_a_null_deleter_is_never_called(versioned):
    tensor = hostile.make(versioned, shape=(2, -3), deleter=False)
    with pytest.raises(BufferError, match=r"^dlpx: from_dlpack: "):
        dlpx.from_dlpack(tensor.capsule())
    assert tensor.deleter_calls == 0
    nothing_pending()


# ---- copies of padded sub-byte tensors with lanes (src/copy.rs) ------------------------------


def test_copy_true_of_a_strided_padded_int4x2_tensor_copies_whole_elements():
    data = (ctypes.c_uint8 * 16)(*range(16))
    tensor = ReferenceTensor(
        shape=(2,), dtype=(0, 4, 2), strides=(2,), data=ctypes.addressof(data), flags=abi.FLAG_IS_SUBBYTE_TYPE_PADDED
    )
    copy = dlpx.from_dlpack(tensor.capsule(), copy=True)
    assert copy.nbytes == 4 and copy.is_contiguous
    assert bytes((ctypes.c_uint8 * 4).from_address(copy.data_ptr)) == bytes([0, 1, 4, 5])
    del copy
    assert settled(tensor) == 1


# ---- the C kernel API validates what a producer's table returns (src/producers/handover.rs) ----


REFUSED_FROM_TABLES = {
    "major-2": dict(version=(2, 0)),
    "shape-negative": dict(shape=(2, -3)),
    "ndim-65": dict(shape=(1,) * 65),
    "dtype-unknown-code": dict(dtype=(99, 32, 1)),
    "device-unknown": dict(device=(99, 0)),
    "device-id-negative": dict(device=(2, -1)),
    "data-null": dict(data=False),
    "strides-wrap-zero": dict(shape=(2, 4), strides=(2**62, 1)),
}


def hostile_type(tensor_kwargs, view=False):
    """The C producer's table class, armed with `tensor_kwargs`, and a function listing the
    tensors it made since."""
    hostile.arm(**tensor_kwargs)
    start = hostile.count()
    return hostile.table_type(view), lambda: hostile.made_since(start)


@pytest.mark.parametrize("case", sorted(REFUSED_FROM_TABLES))
def test_dlpx_import_refuses_what_from_dlpack_refuses(case):
    Hostile, made = hostile_type(REFUSED_FROM_TABLES[case])
    with pytest.raises(BufferError, match=r"^dlpx: from_dlpack: "):
        dlpx.from_dlpack(Hostile())
    out = ctypes.c_void_p()
    with pytest.raises(BufferError, match=r"^dlpx: import: "):
        LIB.dlpx_import(Hostile(), ctypes.byref(out))
    assert not out.value
    gc.collect()
    assert [t.deleter_calls for t in made()] == [1, 1]
    nothing_pending()


@pytest.mark.parametrize("case", sorted(k for k in REFUSED_FROM_TABLES if k != "major-2"))
def test_dlpx_view_of_refuses_a_malformed_view(case):
    Hostile, made = hostile_type(REFUSED_FROM_TABLES[case], view=True)
    view = DlpxTensorView()
    with pytest.raises(BufferError, match=r"^dlpx: view_of: "):
        LIB.dlpx_view_of(Hostile(), ctypes.byref(view))
    assert not view.owner
    assert made() == [], "a view is refused before anything owning is made"
    nothing_pending()


def test_dlpx_import_gives_null_strides_an_owner_that_spells_them_out():
    Hostile, made = hostile_type(dict(shape=(2, 3), strides=None))
    out = ctypes.c_void_p()
    assert LIB.dlpx_import(Hostile(), ctypes.byref(out)) == 0
    got = abi.read_managed(out.value, True)
    assert got["shape"] == (2, 3) and got["strides"] == (3, 1)
    [tensor] = made()
    assert tensor.deleter_calls == 0
    abi.call_deleter(out.value, got["deleter"])
    assert tensor.deleter_calls == 1


def test_dlpx_view_of_null_strides_falls_back_to_an_owning_view():
    Hostile, made = hostile_type(dict(shape=(2, 3), strides=None), view=True)
    view = DlpxTensorView()
    assert LIB.dlpx_view_of(Hostile(), ctypes.byref(view)) == 0
    assert view.owner, "the view owns a tensor that holds the strides"
    assert [view.tensor.strides[i] for i in range(2)] == [3, 1]
    [owned] = made()
    assert owned.deleter_calls == 0
    LIB.dlpx_view_release(ctypes.byref(view))
    assert owned.deleter_calls == 1


def test_a_valid_table_tensor_is_handed_on_unchanged():
    Hostile, made = hostile_type(dict(shape=(2, 3)))
    out = ctypes.c_void_p()
    assert LIB.dlpx_import(Hostile(), ctypes.byref(out)) == 0
    [tensor] = made()
    assert out.value == tensor.address, "no wrapping on the fast path"
    abi.call_deleter(out.value, abi.read_managed(out.value, True)["deleter"])
    assert tensor.deleter_calls == 1


# A table's read entry that breaks its contract (src/producers/table_answer.rs): a failure that
# sets no exception is named (dlpx's words, after the entry point's name), a success that leaves
# one set is the producer's failure, its exception raised as any producer's is (never CPython's
# SystemError), and a tensor handed over with it is deleted once.
BROKEN_ENTRIES = {
    "fails without an exception": (
        hostile.FAILS_WITHOUT_EXCEPTION,
        "dlpx: {entry}: ",
        "the producer's exchange table failed in managed_tensor_from_py_object_no_sync and set no exception",
    ),
    "succeeds with an exception": (hostile.SUCCEEDS_WITH_EXCEPTION, "", "the producer's own error"),
}


@pytest.fixture(scope="module")
def first_of():
    import dlpx.cpp

    source = ("static int first(DlpxCall *call) {\n"
              "  const DLTensor *a;\n"
              "  if (dlpx_call_tensor(call, 0, &a, NULL)) return -1;\n"
              "  return dlpx_call_return_int(call, a->ndim);\n"
              "}\n"
              'DLPX_EXPORT_KERNEL(first, first, "first(a) -> int: a\'s rank.")\n')
    return dlpx.cpp.load_inline("hostile_entries", c_sources=source).first


@pytest.mark.parametrize("view", [False, True], ids=["managed", "view"])
@pytest.mark.parametrize("case", sorted(BROKEN_ENTRIES))
def test_a_table_entry_that_breaks_its_contract_is_a_clear_error_at_every_entry_point(first_of, case, view):
    mode, prefix, fact = BROKEN_ENTRIES[case]
    message = prefix + re.escape(fact) + "$"
    Hostile, made = hostile_type(dict(shape=(2, 3)), view=view)
    hostile.arm_entries(mode)
    try:
        with pytest.raises(RuntimeError, match="^" + message.format(entry="from_dlpack")):
            dlpx.from_dlpack(Hostile())
        # A kernel's argument names the kernel and the parameter, whoever's words follow.
        with pytest.raises(RuntimeError, match="^dlpx: first: parameter 'a': " + re.escape(fact) + "$"):
            first_of(Hostile())
        out = ctypes.c_void_p()
        with pytest.raises(RuntimeError, match="^" + message.format(entry="import")):
            LIB.dlpx_import(Hostile(), ctypes.byref(out))
        assert not out.value
        view_out = DlpxTensorView()
        with pytest.raises(RuntimeError, match="^" + message.format(entry="view_of")):
            LIB.dlpx_view_of(Hostile(), ctypes.byref(view_out))
        assert not view_out.owner
    finally:
        hostile.arm_entries(hostile.KEEPS_CONTRACT)
    gc.collect()
    assert all(t.deleter_calls == 1 for t in made()), [t.deleter_calls for t in made()]
    nothing_pending()
    # The same table keeping its contract again is read as before.
    assert first_of(Hostile()) == 2


# ---- kernel views of producers that send legacy capsules (src/legacy.rs) ---------------------


class SendsCapsule:
    """A table-less producer whose `__dlpack__` answers with one given capsule, as jax does."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack__(self, **kwargs):
        return self.tensor.capsule()


def test_a_legacy_tensor_is_viewed_in_a_wrapper_and_deleted_once_on_release():
    tensor = hostile.make(False, shape=(2, 3))
    view = DlpxTensorView()
    assert LIB.dlpx_view_of(SendsCapsule(tensor), ctypes.byref(view)) == 0
    assert view.owner
    got = abi.read_managed(view.owner, True)
    # A legacy tensor says nothing of read-only: handed to C read-only (docs/design.md R11).
    assert (got["version"], got["flags"]) == ((1, 3), abi.FLAG_READ_ONLY)
    assert got["shape"] == (2, 3) and got["strides"] == (3, 1)
    assert abi.describe(view.tensor) == {k: got[k] for k in abi.describe(view.tensor)}
    # The wrapper (a per-thread cache block) holds the producer's tensor itself: no dlpx tensor between.
    assert abi.managed_at(view.owner, True).manager_ctx == tensor.address
    assert tensor.deleter_calls == 0
    LIB.dlpx_view_release(ctypes.byref(view))
    assert settled(tensor) == 1
    nothing_pending()


@pytest.mark.parametrize("case", sorted(k for k in MALFORMED if not k.startswith("major")))
def test_a_malformed_legacy_tensor_viewed_through_dlpack_is_refused_and_deleted_once(case):
    tensor = hostile.make(False, **MALFORMED[case])
    view = DlpxTensorView()
    with pytest.raises(BufferError, match=r"^dlpx: view_of: "):
        LIB.dlpx_view_of(SendsCapsule(tensor), ctypes.byref(view))
    assert not view.owner
    assert settled(tensor) == 1
    nothing_pending()


def test_a_legacy_tensor_without_strides_is_viewed_with_them_spelled_out():
    tensor = hostile.make(False, shape=(2, 3), strides=None)
    view = DlpxTensorView()
    assert LIB.dlpx_view_of(SendsCapsule(tensor), ctypes.byref(view)) == 0
    assert [view.tensor.strides[i] for i in range(2)] == [3, 1]
    LIB.dlpx_view_release(ctypes.byref(view))
    assert settled(tensor) == 1


# ---- lying __len__ (src/args.rs) -------------------------------------------------------------


class LyingLength:
    def __init__(self, length, item=None):
        self.length, self.item = length, item

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        if self.item is None:
            raise IndexError(i)
        return self.item


ENTRY_POINTS = {
    "empty-shape": lambda arg: dlpx.empty(arg),
    "from_dlpack-device": lambda arg: dlpx.from_dlpack(np.ones(2), device=arg),
    "dlpack-max_version": lambda arg: dlpx.empty((1,)).__dlpack__(max_version=arg),
    "dlpack-dl_device": lambda arg: dlpx.empty((1,)).__dlpack__(dl_device=arg),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("length", [2**40, 2**62, sys.maxsize])
@pytest.mark.parametrize("item", [None, 1], ids=["raising-getitem", "endless-items"])
def test_a_lying_len_is_a_value_error_not_an_abort(entry, length, item):
    with pytest.raises(ValueError, match=r"^dlpx: .*has \d+ items"):
        ENTRY_POINTS[entry](LyingLength(length, item))
    nothing_pending()


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_a_len_too_large_for_ssize_t_is_a_type_error(entry):
    with pytest.raises(TypeError, match=r"^dlpx: "):
        ENTRY_POINTS[entry](LyingLength(2**64))
    nothing_pending()


@pytest.fixture
def cuda_stream_set():
    """A CUDA stream set on this thread (no GPU needed): the importer then asks the object
    for its device, to pass the stream to ``__dlpack__``."""
    previous = dlpx.cuda.set_current_stream(0x1234)
    yield
    dlpx.cuda.set_current_stream(previous)


class RaisingIndex:
    def __index__(self):
        raise ValueError("boom")


DEVICE_ANSWERS = {
    "raising-index": (2, RaisingIndex()),
    "raising-getitem": LyingLength(2),
    "lying-len": LyingLength(2**40, 2),
    "not-a-pair": 7,
}


@pytest.mark.parametrize("answer", sorted(DEVICE_ANSWERS))
def test_a_bad_dlpack_device_answer_leaves_no_exception_set(cuda_stream_set, answer):
    capsule = np.arange(3.0).__dlpack__()

    class Producer:
        def __dlpack_device__(self):
            return DEVICE_ANSWERS[answer]

        def __dlpack__(self, **kwargs):
            return capsule

    # An answer dlpx cannot read means "device unknown": no stream is passed, the import works.
    assert dlpx.from_dlpack(Producer()).shape == (3,)
    nothing_pending()


# ---- raising __index__, recursive and mutating __dlpack__ ------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda: dlpx.empty((2, RaisingIndex())),
        lambda: dlpx.empty(RaisingIndex()),
        lambda: dlpx.from_dlpack(np.ones(2), device=(1, RaisingIndex())),
        lambda: dlpx.empty((1,)).__dlpack__(max_version=(RaisingIndex(), 3)),
        lambda: dlpx.empty((1,)).__dlpack__(dl_device=(RaisingIndex(), 0)),
    ],
    ids=["shape-item", "shape", "device", "max_version", "dl_device"],
)
def test_a_raising_index_propagates_the_callers_own_exception(call):
    # The exception is the object's own, unchanged (as CPython's own int() does).
    with pytest.raises(ValueError, match="^boom$"):
        call()
    nothing_pending()


def test_a_recursive_dlpack_is_a_recursion_error_not_a_crash():
    class Recursive:
        def __dlpack__(self, **kwargs):
            return dlpx.from_dlpack(self)

    with pytest.raises(RecursionError):
        dlpx.from_dlpack(Recursive())
    nothing_pending()


def test_a_dlpack_that_replaces_itself_mid_call_is_served_once():
    made = []

    class Mutating:
        def __dlpack__(self, **kwargs):
            type(self).__dlpack__ = lambda self, **kw: pytest.fail("called twice")
            made.append(ReferenceTensor(shape=(3,)))
            return made[-1].capsule(abi.VERSIONED_NAME if kwargs.get("max_version") else abi.LEGACY_NAME)

    t = dlpx.from_dlpack(Mutating())
    assert t.shape == (3,)
    del t
    assert settled(made[0]) == 1


def test_a_dlpack_returning_its_own_consumed_capsule_is_a_buffer_error():
    tensor = ReferenceTensor(shape=(3,))

    class ConsumesFirst:
        def __dlpack__(self, **kwargs):
            capsule = tensor.capsule()
            dlpx.from_dlpack(capsule)  # the producer's own consumer renames it
            return capsule

    with pytest.raises(BufferError, match=r"^dlpx: from_dlpack: .*consumed"):
        dlpx.from_dlpack(ConsumesFirst())
    assert settled(tensor) == 1
    nothing_pending()


def test_a_shape_that_shrinks_while_it_is_read_is_a_clean_error():
    shape = [2, 3, 4]

    class Shrinks:
        def __index__(self):
            shape.clear()
            return 2

    shape[0] = Shrinks()
    with pytest.raises(IndexError):
        dlpx.empty(shape)
    nothing_pending()


def test_a_dlpack_returning_no_capsule_is_a_type_error():
    class ReturnsInt:
        def __dlpack__(self, **kwargs):
            return 7

    with pytest.raises(TypeError, match=r"^dlpx: from_dlpack: "):
        dlpx.from_dlpack(ReturnsInt())
    nothing_pending()


# ---- strides whose byte offsets overflow, on every row (issue 44) ------------------------------


def overflowing_reference():
    from dlpx.conform import ReferenceProducer

    return ReferenceProducer(shape=(2, 4), strides=(2**61, 1))


class StridedInterface:
    """An ``__array_interface__`` over a real array whose strides say what the test asks."""

    def __init__(self, strides, shape=(3,), copy_of=None):
        self.base = np.zeros(8, np.float32)
        self.__array_interface__ = dict(
            shape=shape, typestr="<f4", data=(self.base.ctypes.data, False), strides=strides, version=3
        )


def as_strided_overflow():
    from numpy.lib.stride_tricks import as_strided

    return as_strided(np.zeros(4, np.float32), shape=(4,), strides=(2**62,))


# Each object's strides overflow isize once multiplied out: every row reading it refuses it
# before a byte stride is formed (the memoryview(t).strides read INT64_MIN; copy=True,
# bytes(t) and np.asarray(t) crashed).
OVERFLOWING = {
    "dlpack": overflowing_reference,
    "numpy-as_strided": as_strided_overflow,
    "array-interface": lambda: StridedInterface((2**62,)),
    "array-interface-unaligned": lambda: StridedInterface((2**62 + 2,)),
}


@pytest.mark.parametrize("copy", [None, True, False])
@pytest.mark.parametrize("case", sorted(OVERFLOWING))
def test_overflowing_strides_are_a_buffer_error_naming_the_dimension(case, copy):
    with pytest.raises(BufferError, match=r"dimension 0 .* reaches past isize::MAX bytes|strides\[0\] .* not a multiple"):
        dlpx.from_dlpack(OVERFLOWING[case](), copy=copy)
    nothing_pending()


@pytest.mark.parametrize("case", sorted(OVERFLOWING))
def test_overflowing_strides_are_refused_by_the_kernel_view_and_import(case):
    view = DlpxTensorView()
    with pytest.raises(BufferError, match=r"^dlpx: view_of: "):
        LIB.dlpx_view_of(OVERFLOWING[case](), ctypes.byref(view))
    assert not view.owner
    out = ctypes.c_void_p()
    with pytest.raises(BufferError, match=r"^dlpx: import: "):
        LIB.dlpx_import(OVERFLOWING[case](), ctypes.byref(out))
    assert not out.value
    nothing_pending()


def test_strides_that_fit_are_read_as_the_producer_means():
    """The check refuses overflow, not large strides: the same array viewed with a large but
    representable stride over an extent of 1 reads its one row."""
    from dlpx.conform import ReferenceProducer

    t = dlpx.from_dlpack(ReferenceProducer(shape=(1, 4), strides=(2**40, 1)))
    assert memoryview(t).strides == (2**42, 4)
    assert bytes(dlpx.from_dlpack(t, copy=True)) == bytes(t)


def test_the_conformance_kit_holds_consumers_to_refusing_overflowing_strides():
    """The kit's consumer check sees dlpx refuse the tensor, torch refuse it too, and a consumer
    that reads it (numpy's from_dlpack, which takes any strides) fail the check."""
    from dlpx.conform.consumer import check_consumer

    def verdict(from_dlpack):
        (check,) = [c for c in check_consumer(from_dlpack) if c.name == "consumer.overflowing_strides_refused"]
        return check.status

    assert verdict(dlpx.from_dlpack) == "pass"
    assert verdict(np.from_dlpack) == "fail"


# ---- what a framework's allocator answers is held to the request (src/kernels/framework_allocator.rs) ----


ALLOCATOR_ANSWERS = {
    "another shape": (hostile.GIVES, dict(shape=(2, 1)), RuntimeError, "gave a tensor other than the one asked for: another shape"),
    "another ndim": (hostile.GIVES, dict(shape=(6,)), RuntimeError, "another device, dtype or ndim"),
    "a negative extent": (hostile.GIVES, dict(shape=(2, -3)), RuntimeError, "another shape"),
    "another dtype": (hostile.GIVES, dict(dtype=(0, 8, 1)), RuntimeError, "another device, dtype or ndim"),
    "no data": (hostile.GIVES, dict(data=False), RuntimeError, "no data"),
    "a byte_offset": (hostile.GIVES, dict(byte_offset=16), RuntimeError, "byte_offset 16"),
    "strides not compact": (hostile.GIVES, dict(strides=(1, 2)), RuntimeError, "strides that are not compact row-major"),
    "major 9": (hostile.GIVES, dict(version=(9, 0)), RuntimeError, "DLPack major 9"),
    "a silent failure": (hostile.FAILS_SILENTLY, {}, MemoryError, "the allocator failed without saying why"),
    "success without a tensor": (hostile.GIVES_NOTHING, {}, RuntimeError, "reported success and gave no tensor"),
    "two reports": (hostile.REPORTS_TWICE, {}, ValueError, "the first report$"),
}


@pytest.fixture(scope="module")
def like_kernel():
    import dlpx.cpp

    source = ("static int like(DlpxCall *call) {\n"
              "  const DLTensor *a; DLTensor *out;\n"
              "  if (dlpx_call_tensor(call, 0, &a, NULL) || dlpx_call_allocate(call, a->device, a->dtype, a->ndim, a->shape, &out)) return -1;\n"
              "  float *f = (float *)out->data;\n"
              "  for (int64_t i = 0; i < a->shape[0] * a->shape[1]; ++i) f[i] = 1.0f;  /* what a kernel writes */\n"
              "  return dlpx_call_return_tensor(call, out);\n"
              "}\n"
              'DLPX_EXPORT_KERNEL(like, like, "like(a) -> tensor: ones like a.")\n')
    return dlpx.cpp.load_inline("allocates_like", c_sources=source).like


@pytest.mark.parametrize("case", sorted(ALLOCATOR_ANSWERS))
def test_a_kernel_output_that_is_not_the_tensor_asked_for_is_refused_and_deleted(like_kernel, case):
    mode, answer, error, message = ALLOCATOR_ANSWERS[case]
    Hostile, made = hostile_type(dict(shape=(2, 3)))
    hostile.arm_allocator(mode, **answer)
    try:
        with pytest.raises(error, match=rf"^dlpx: like: output: .*{message}"):
            like_kernel(Hostile())
    finally:
        hostile.arm_allocator(hostile.GIVES, shape=(2, 3))
    gc.collect()
    assert all(t.deleter_calls == 1 for t in made()), [t.deleter_calls for t in made()]
    nothing_pending()


LIB.dlpx_allocate_like.argtypes = [ctypes.py_object, ctypes.POINTER(abi.DLTensor), ctypes.POINTER(ctypes.c_void_p),
                                   ctypes.c_void_p, ctypes.c_void_p]
LIB.dlpx_allocate_like.restype = ctypes.c_int
LIB.dlpx_last_error.restype = ctypes.c_char_p


@pytest.mark.parametrize("case", sorted(ALLOCATOR_ANSWERS))
def test_dlpx_allocate_like_holds_a_table_s_answer_to_the_request(case):
    mode, answer, error, message = ALLOCATOR_ANSWERS[case]
    Hostile, made = hostile_type(dict(shape=(2, 3)))
    hostile.arm_allocator(mode, **answer)
    shape = (ctypes.c_int64 * 2)(2, 3)
    prototype = abi.DLTensor(None, abi.DLDevice(abi.KDL_CPU, 0), 2, abi.DLDataType(2, 32, 1), shape, None, 0)
    out = ctypes.c_void_p()
    try:
        assert LIB.dlpx_allocate_like(Hostile(), ctypes.byref(prototype), ctypes.byref(out), None, None) == -1
    finally:
        hostile.arm_allocator(hostile.GIVES, shape=(2, 3))
    assert not out.value
    # dlpx's words for what it refuses; a table's own for what it reported (the first report).
    text = LIB.dlpx_last_error().decode()
    assert re.search(message, text), text
    assert text.startswith("the first report" if mode == hostile.REPORTS_TWICE else "dlpx: allocate_like: "), text
    assert all(t.deleter_calls == 1 for t in made()), [t.deleter_calls for t in made()]
    nothing_pending()


LIB.dlpx_to_py_like.argtypes = [ctypes.py_object, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
LIB.dlpx_to_py_like.restype = ctypes.c_int


def test_a_to_py_that_reports_success_without_an_object_is_an_error_and_leaves_the_tensor(like_kernel):
    hostile.arm(shape=(2, 3))
    hostile.arm_allocator(hostile.GIVES, shape=(2, 3))
    Hostile = hostile.table_type(to_py_gives_nothing=True)
    start = hostile.count()
    # A kernel's result: the output is deleted once, the error names the result.
    with pytest.raises(RuntimeError, match=r"^dlpx: like: result \(float32\): .*reported success and gave no object"):
        like_kernel(Hostile())
    gc.collect()
    assert [t.deleter_calls for t in hostile.made_since(start)] == [1, 1]  # the argument, the output
    nothing_pending()
    # dlpx_to_py_like: the caller keeps the tensor.
    managed = dlpx.empty((2,)).__dlpack__(max_version=(1, 3))
    from dlpx.conform.capsules import consume

    info, spied = consume(managed)
    out = ctypes.c_void_p()
    with pytest.raises(RuntimeError, match="^dlpx: to_py_like: .*reported success and gave no object"):
        LIB.dlpx_to_py_like(Hostile(), info["address"], ctypes.byref(out))
    assert not out.value and spied.calls == 0
    spied.delete()
    assert spied.forget() == 1
    nothing_pending()


# ---- a consumer that breaks the deleter's contract (src/tensor/export.rs) --------------------


@pytest.mark.parametrize("max_version", [(1, 3), None], ids=["versioned", "legacy"])
def test_an_export_deleted_twice_is_said_and_ignored_and_its_tensor_kept(max_version):
    t = dlpx.from_dlpack(np.arange(64, dtype=np.float32), copy=True)
    capsule = t.__dlpack__(max_version=max_version)
    info = abi.read_capsule(capsule)
    versioned = max_version is not None
    abi.rename_capsule(capsule, abi.USED_VERSIONED_NAME if versioned else abi.USED_LEGACY_NAME)
    abi.call_deleter(info["address"], info["deleter"])
    LIB.dlpx_clear_last_error()
    # The spec allows one call; the second comes before the export's block is reused, and is
    # caught there (as the allocator's deleter catches it): releasing the tensor again would
    # hand its memory to the next allocation while `t` still holds it.
    abi.call_deleter(info["address"], info["deleter"])
    assert "was deleted twice (the second call is ignored)" in LIB.dlpx_last_error().decode()
    others = [dlpx.empty((64,), "float32") for _ in range(4)]
    assert all(u.data_ptr != t.data_ptr for u in others)
    for u in others:
        np.from_dlpack(u)[:] = 7
    np.testing.assert_array_equal(np.from_dlpack(t), np.arange(64, dtype=np.float32))


@pytest.mark.parametrize("case", sorted(BROKEN_ENTRIES))
def test_a_to_py_that_breaks_its_contract_is_a_clear_error_and_the_output_deleted_once(like_kernel, case):
    # A kernel's output back through the caller's table: a failure that sets no exception is
    # named; a capsule made with an exception set is a failure, the exception raised (never
    # CPython's SystemError), the output deleted once by its caller, dlpx (the capsule, which
    # holds it too, is left unreleased, never to delete it twice).
    mode, prefix, fact = BROKEN_ENTRIES[case]
    fact = fact.replace("managed_tensor_from_py_object_no_sync", "managed_tensor_to_py_object_no_sync")
    hostile.arm(shape=(2, 3))
    hostile.arm_allocator(hostile.GIVES, shape=(2, 3))
    Hostile = hostile.table_type(to_py_capsule=True)
    start = hostile.count()
    assert abi.capsule_name(like_kernel(Hostile())) == b"dltensor_versioned", "the contract kept: the capsule"
    hostile.arm_to_py(mode)
    try:
        with pytest.raises(RuntimeError, match=r"^dlpx: like: result \(float32\): " + re.escape(fact) + "$"):
            like_kernel(Hostile())
    finally:
        hostile.arm_to_py(hostile.KEEPS_CONTRACT)
    gc.collect()
    assert [t.deleter_calls for t in hostile.made_since(start)] == [1, 1, 1, 1]  # two arguments, two outputs
    nothing_pending()


# ---- a producer that copies where copy=False forbade it (src/producers/rows/dlpack.rs) -------


def test_a_copy_a_producer_made_against_copy_false_is_refused_and_deleted_once():
    # The caller asked to share the producer's memory: a copy it writes to would be lost.
    made = []

    class CopiesAnyway:
        def __dlpack__(self, **kwargs):
            made.append(hostile.make(True, shape=(2, 3), flags=abi.FLAG_IS_COPIED))
            return made[-1].capsule()

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(BufferError, match=r"^dlpx: from_dlpack: __dlpack__\(copy=False\) gave a copy"):
        dlpx.from_dlpack(CopiesAnyway(), copy=False)
    gc.collect()
    assert [t.deleter_calls for t in made] == [1]
    # Where a copy may be made, the producer's is taken.
    for copy in (None, True):
        assert dlpx.from_dlpack(CopiesAnyway(), copy=copy).shape == (2, 3)
    nothing_pending()

"""dlpx.Tensor and dlpx.empty: shapes, dtypes, devices, every property, repr, construction,
subclassing, weak references, copies, the errors of dlpx.empty, and the module's public names."""

import collections
import copy
import gc
import math
import weakref

import numpy as np
import pytest

import dlpx

# The DLPack 1.3 dtype codes (DLPack 1.3, as the spec texts define them): name -> (code, bits, lanes).
DTYPES = {
    "bool": (6, 8, 1),
    "int8": (0, 8, 1),
    "int16": (0, 16, 1),
    "int32": (0, 32, 1),
    "int64": (0, 64, 1),
    "uint8": (1, 8, 1),
    "uint16": (1, 16, 1),
    "uint32": (1, 32, 1),
    "uint64": (1, 64, 1),
    "float16": (2, 16, 1),
    "float32": (2, 32, 1),
    "float64": (2, 64, 1),
    "bfloat16": (4, 16, 1),
    "complex64": (5, 64, 1),
    "complex128": (5, 128, 1),
    "float8_e3m4": (7, 8, 1),
    "float8_e4m3": (8, 8, 1),
    "float8_e4m3b11fnuz": (9, 8, 1),
    "float8_e4m3fn": (10, 8, 1),
    "float8_e4m3fnuz": (11, 8, 1),
    "float8_e5m2": (12, 8, 1),
    "float8_e5m2fnuz": (13, 8, 1),
    "float8_e8m0fnu": (14, 8, 1),
    "float6_e2m3fn": (15, 6, 1),
    "float6_e3m2fn": (16, 6, 1),
    "float4_e2m1fn": (17, 4, 1),
}


def row_major_strides(shape):
    return tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))


def packed_nbytes(numel, code_bits_lanes):
    _, bits, lanes = code_bits_lanes
    return -(-numel * bits * lanes // 8)


# ---- dlpx.empty: shapes ------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(), (1,), (7,), (2, 3), (4, 1, 5), (2, 3, 4, 5), (1,) * 8])
def test_empty_has_the_requested_shape_and_compact_strides(shape):
    t = dlpx.empty(shape, "float32")
    assert t.shape == shape
    assert t.ndim == len(shape)
    assert t.numel == math.prod(shape)
    assert t.strides == row_major_strides(shape)
    assert t.nbytes == 4 * math.prod(shape)
    assert t.is_contiguous
    assert t.byte_offset == 0
    assert not t.readonly


@pytest.mark.parametrize("shape", [(0,), (2, 0, 4), (0, 0), (3, 0)])
def test_empty_zero_size_tensor_has_no_data(shape):
    t = dlpx.empty(shape, "float64")
    assert t.shape == shape
    assert t.numel == 0
    assert t.nbytes == 0
    assert t.data_ptr == 0
    assert len(t.strides) == len(shape)
    assert t.is_contiguous


def test_empty_accepts_an_int_and_any_integer_sequence():
    assert dlpx.empty(5).shape == (5,)
    assert dlpx.empty([2, 3]).shape == (2, 3)
    assert dlpx.empty(np.int64(4)).shape == (4,)
    assert dlpx.empty((np.int32(2), 3)).shape == (2, 3)
    assert dlpx.empty(range(1, 4)).shape == (1, 2, 3)
    # An exact tuple of exact ints is read directly; anything else through __index__ and the
    # sequence protocol: both read the same.
    Pair = collections.namedtuple("Pair", "rows cols")
    assert dlpx.empty((True, 2)).shape == dlpx.empty([True, 2]).shape == (1, 2)
    assert dlpx.empty(Pair(2, 3)).shape == (2, 3)


def test_a_torch_tensor_is_no_dtype_and_torch_s_cpu_is_cpu_0():
    # A tensor has is_floating_point, as torch's dtypes do: it was read as a dtype (ValueError).
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"^dlpx: empty: dtype=tensor\(\[1\., 1\.\]\): a dtype is"):
        dlpx.empty(2, dtype=torch.ones(2))
    # torch exports every CPU tensor as CPU 0: its device is read so (it was cpu:3, refused).
    assert str(dlpx.empty(2, device=torch.device("cpu", 3)).device) == "cpu:0"
    assert str(dlpx.Device.parse(torch.device("cpu", 3))) == "cpu:0"


def test_an_integer_array_is_a_shape_as_numpy_reads_it():
    # Its __index__ refuses more than one element: numpy's (or torch's) own TypeError came out.
    torch = pytest.importorskip("torch")
    for array in (np.array([2, 3]), torch.tensor([2, 3]), np.array([2, 3], np.int8)):
        assert dlpx.empty(array).shape == np.empty(np.array([2, 3])).shape == (2, 3)
    assert dlpx.empty(np.array(3)).shape == (3,)
    assert dlpx.empty(2, dtype=np.array([2, 32, 1])).dtype == "float32"
    assert str(dlpx.Device.parse(np.array([1, 0]))) == "cpu:0"
    for bad, says in ((np.zeros((2, 2), int), r"shape .*got an array of shape \[2, 2\]"), (np.array([1.5]), r"shape\[0\]"),
                      (np.array(3.0), r"shape .*got an array of shape \[\]")):
        with pytest.raises(TypeError, match=r"^dlpx: empty: " + says):
            dlpx.empty(bad)


@pytest.mark.parametrize("shape, error, says", [
    ((2, "3"), TypeError, r"shape\[1\] must be an integer"),
    ([2, 3.0], TypeError, r"shape\[1\] must be an integer"),
    ((2, 2**70), OverflowError, r"shape\[1\] does not fit in 64 bits"),
    ([2**64], OverflowError, r"shape\[0\] does not fit in 64 bits"),
    ((np.int64(2), -(2**80)), OverflowError, r"shape\[1\] does not fit in 64 bits"),
])
def test_empty_names_the_item_of_the_shape_it_refuses(shape, error, says):
    with pytest.raises(error, match=says):
        dlpx.empty(shape)


def test_empty_keywords_and_defaults():
    t = dlpx.empty(shape=(2,), dtype="int8", device="cpu")
    assert (t.shape, t.dtype, t.device) == ((2,), "int8", "cpu")
    d = dlpx.empty((2,))
    assert d.dtype == "float32"
    assert d.device == "cpu:0"


@pytest.mark.parametrize("shape", [(1,), (3,), (1000,), (17, 33), (2, 2, 2)])
@pytest.mark.parametrize("dtype", ["int8", "float32", "complex128"])
def test_empty_data_is_256_byte_aligned(shape, dtype):
    t = dlpx.empty(shape, dtype)
    assert t.data_ptr != 0
    assert t.data_ptr % 256 == 0


def test_empty_tensors_do_not_overlap():
    tensors = [dlpx.empty((n,), "uint8") for n in (1, 3, 64, 255, 256, 257, 4096)]
    spans = sorted((t.data_ptr, t.data_ptr + t.nbytes) for t in tensors)
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert end <= start


def test_empty_memory_is_writable_through_numpy():
    t = dlpx.empty((3, 4), "int32")
    view = np.from_dlpack(t)
    view[...] = np.arange(12, dtype=np.int32).reshape(3, 4)
    assert np.from_dlpack(t).sum() == sum(range(12))


# ---- dtypes --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_empty_dtype_by_name(name):
    t = dlpx.empty((3,), name)
    assert t.dtype == name
    assert t.dtype_raw == DTYPES[name]
    assert t.nbytes == packed_nbytes(3, DTYPES[name])


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_empty_dtype_by_raw_triple_names_it(name):
    t = dlpx.empty((2,), DTYPES[name])
    assert t.dtype == name
    assert t.dtype_raw == DTYPES[name]


def test_subbyte_dtypes_are_packed():
    # Ruling 6: bytes = ceil(numel * bits * lanes / 8).
    assert dlpx.empty((3,), "float4_e2m1fn").nbytes == 2
    assert dlpx.empty((4,), "float6_e2m3fn").nbytes == 3
    assert dlpx.empty((5, 2), "float4_e2m1fn").nbytes == 5


def test_vector_lanes_dtype_round_trips_through_its_name():
    t = dlpx.empty((3,), (2, 32, 4))
    assert t.dtype == "float32x4"
    assert t.dtype_raw == (2, 32, 4)
    assert t.nbytes == 3 * 16
    assert dlpx.empty((1,), "float32x4").dtype_raw == (2, 32, 4)


def test_unnamed_raw_dtype_is_still_reachable():
    t = dlpx.empty((2,), (3, 64, 1))  # an opaque handle
    assert t.dtype_raw == (3, 64, 1)
    assert isinstance(t.dtype, str) and t.dtype


# ---- devices -------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["cpu", "cpu:0", dlpx.Device(1, 0), (1, 0), dlpx.Device.parse("cpu")])
def test_empty_on_cpu_in_every_spelling(device):
    t = dlpx.empty((2,), "float32", device)
    assert t.device == "cpu"
    assert t.device == "cpu:0"
    assert t.device == (1, 0)
    assert t.device == dlpx.Device(1, 0)
    assert str(t.device) == "cpu:0"
    assert t.__dlpack_device__() == (1, 0)


def test_device_object_describes_itself():
    device = dlpx.empty((1,)).device
    assert isinstance(device, dlpx.Device)
    assert isinstance(device, tuple)
    assert (device.device_type, device.device_id) == (1, 0)
    assert device.type == "cpu"
    assert device.index == 0
    assert repr(device) == "dlpx.Device(1, 0)"
    assert eval(repr(device), {"dlpx": dlpx}) == device
    assert hash(device) == hash((1, 0))
    assert device != "cuda:0"
    assert device != "not a device"
    assert device != (2, 0)
    assert str(dlpx.Device(2, 1)) == "cuda:1"
    assert dlpx.Device(2, 1) == "cuda:1"
    assert dlpx.Device.parse("cuda:3") == (2, 3)


@pytest.mark.parametrize("device", ["rocm:1", "opencl", "vulkan:2", (10, 0)])
def test_empty_on_a_device_dlpx_cannot_allocate_is_not_implemented(device):
    with pytest.raises(NotImplementedError, match=r"^dlpx: "):
        dlpx.empty((2,), "float32", device)


@pytest.mark.parametrize("device", ["gpu", "cpu:x", "cpu:-1", "cpu:1", (99, 0), (1, -1), ""])
def test_empty_with_an_invalid_device_is_a_value_error(device):
    with pytest.raises(ValueError, match=r"^dlpx: "):
        dlpx.empty((2,), "float32", device)


# ---- properties ----------------------------------------------------------------------------


def test_properties_describe_a_foreign_view():
    base = np.arange(60, dtype=np.float64).reshape(3, 4, 5)
    view = base[1:, ::2, 1::2]
    t = dlpx.from_dlpack(view)
    assert t.shape == view.shape
    assert t.strides == tuple(s // view.itemsize for s in view.strides)
    assert t.ndim == 3
    assert t.numel == view.size
    assert t.nbytes == view.nbytes
    assert t.data_ptr == view.ctypes.data
    assert not t.is_contiguous
    assert t.dtype == "float64"
    assert t.dtype_raw == (2, 64, 1)
    assert t.device == "cpu"


def test_properties_cannot_be_assigned():
    t = dlpx.empty((2,))
    for name in ("shape", "strides", "ndim", "numel", "nbytes", "byte_offset", "data_ptr",
                 "is_contiguous", "readonly", "dtype", "dtype_raw", "device"):
        with pytest.raises(AttributeError):
            setattr(t, name, getattr(t, name))


def test_property_types():
    t = dlpx.empty((2, 3), "int16")
    assert type(t.shape) is tuple and all(type(v) is int for v in t.shape)
    assert type(t.strides) is tuple and all(type(v) is int for v in t.strides)
    for name in ("ndim", "numel", "nbytes", "byte_offset", "data_ptr"):
        assert type(getattr(t, name)) is int, name
    assert type(t.is_contiguous) is bool
    assert type(t.readonly) is bool
    assert type(t.dtype) is str
    assert type(t.dtype_raw) is tuple


def test_tensor_has_no_arithmetic():
    t = dlpx.empty((2,))
    with pytest.raises(TypeError):
        t + t  # noqa: B018


# ---- repr ----------------------------------------------------------------------------------


def test_repr_names_shape_dtype_device_and_strides():
    text = repr(dlpx.empty((2, 3), "bfloat16"))
    assert text.startswith("dlpx.Tensor(")
    assert "shape=(2, 3)" in text
    assert "dtype=bfloat16" in text
    assert "device=cpu:0" in text
    assert "strides=(3, 1)" in text
    assert "readonly" not in text


def test_repr_of_0d_1d_and_readonly_tensors():
    assert "shape=()" in repr(dlpx.empty(()))
    assert "shape=(4,)" in repr(dlpx.empty((4,)))
    frozen = np.zeros(2)
    frozen.flags.writeable = False
    assert "readonly=True" in repr(dlpx.from_dlpack(frozen))


# ---- the constructor -----------------------------------------------------------------------


def test_constructor_imports_like_from_dlpack():
    a = np.arange(6, dtype=np.int32)
    t = dlpx.Tensor(a)
    assert type(t) is dlpx.Tensor
    assert t.data_ptr == a.ctypes.data
    assert t.shape == (6,)
    assert t.dtype == "int32"


def test_constructor_from_a_dlpx_tensor_shares_memory():
    t = dlpx.empty((4,), "int64")
    u = dlpx.Tensor(t)
    assert u is not t
    assert u.data_ptr == t.data_ptr


@pytest.mark.parametrize(
    "args, kwargs",
    [((), {}), ((np.zeros(1), np.zeros(1)), {}), ((), {"x": np.zeros(1)}), ((np.zeros(1),), {"copy": True})],
)
def test_constructor_takes_exactly_one_positional_argument(args, kwargs):
    with pytest.raises(TypeError, match=r"^dlpx: "):
        dlpx.Tensor(*args, **kwargs)


def test_constructor_rejects_an_object_without_dlpack():
    with pytest.raises(TypeError, match=r"^dlpx: .*list"):
        dlpx.Tensor([1, 2, 3])


# ---- subclassing ---------------------------------------------------------------------------


class Labelled(dlpx.Tensor):
    """A user subclass with its own attribute and method."""

    def describe(self):
        return f"{self.label}: {self.shape}"


def test_subclass_instances_keep_their_type_and_behaviour():
    a = np.arange(5, dtype=np.float32)
    t = Labelled(a)
    t.label = "x"
    assert type(t) is Labelled
    assert isinstance(t, dlpx.Tensor)
    assert t.describe() == "x: (5,)"
    assert t.data_ptr == a.ctypes.data
    assert t.dtype == "float32"
    assert t.__dlpack_device__() == (1, 0)


def test_subclass_exports_through_inherited_dlpack():
    a = np.arange(5, dtype=np.float32)
    t = Labelled(a)
    back = np.from_dlpack(t)
    assert back.ctypes.data == a.ctypes.data
    np.testing.assert_array_equal(back, a)


def test_from_dlpack_of_a_subclass_gives_a_plain_tensor_on_the_same_memory():
    t = Labelled(np.ones(3))
    u = dlpx.from_dlpack(t)
    assert type(u) is dlpx.Tensor
    assert u.data_ptr == t.data_ptr


def test_a_subclass_that_publishes_its_own_export_is_imported_through_it():
    calls = []

    class OwnExport(dlpx.Tensor):
        __dlpack_c_exchange_api__ = None  # no table: its __dlpack__ is the way in

        def __dlpack__(self, **kwargs):
            calls.append(sorted(kwargs))
            return super().__dlpack__(**kwargs)

    t = OwnExport(np.arange(3.0))
    u = dlpx.from_dlpack(t)
    assert calls == [["max_version"]]
    assert type(u) is dlpx.Tensor and u.data_ptr == t.data_ptr


def test_subclass_inherits_the_exchange_attributes():
    assert Labelled.__dlpack_c_exchange_api__ is dlpx.Tensor.__dlpack_c_exchange_api__
    assert Labelled.__c_dlpack_exchange_api__ == dlpx.Tensor.__c_dlpack_exchange_api__


# ---- weak references -------------------------------------------------------------------------


def test_a_weak_reference_follows_the_tensor_and_its_callback_fires_when_it_dies():
    t = dlpx.empty((3,))
    died = []
    ref = weakref.ref(t, died.append)
    assert ref() is t and weakref.getweakrefcount(t) == 1
    del t
    gc.collect()
    assert ref() is None and died == [ref]


def test_a_weak_value_cache_of_tensors_forgets_the_dead_ones():
    cache = weakref.WeakValueDictionary()
    kept = dlpx.from_dlpack(np.arange(3.0))
    cache["kept"], cache["dropped"] = kept, dlpx.empty((2,))
    gc.collect()
    assert list(cache) == ["kept"] and cache["kept"] is kept


def test_a_reused_tensor_object_has_no_weak_references_from_its_former_life():
    # Dead dlpx.Tensors are kept for the next ones (a freelist on GIL builds): each new object's
    # weak reference list must start empty, and the dead ones' references must stay dead.
    old = [dlpx.empty((1,)) for _ in range(64)]
    died = []
    refs = [weakref.ref(t, died.append) for t in old]
    del old
    gc.collect()
    assert len(died) == 64 and all(r() is None for r in refs)
    new = [dlpx.from_dlpack(np.zeros(1)) for _ in range(64)]
    assert all(weakref.getweakrefcount(t) == 0 for t in new)
    assert all(r() is None for r in refs)
    again = [weakref.ref(t) for t in new]
    assert [r() for r in again] == new and len(died) == 64


def test_a_subclass_instance_takes_weak_references_and_drops_them_once():
    t = Labelled(np.ones(2))
    t.label = "x"
    died = []
    ref = weakref.ref(t, died.append)
    del t
    gc.collect()
    assert ref() is None and died == [ref]


# ---- copies ----------------------------------------------------------------------------------


@pytest.mark.parametrize("make_copy", [copy.copy, copy.deepcopy], ids=["copy", "deepcopy"])
def test_a_copy_has_the_values_in_memory_of_its_own(make_copy):
    a = np.arange(6.0).reshape(2, 3)
    t = dlpx.from_dlpack(a)
    c = make_copy(t)
    assert type(c) is dlpx.Tensor and c is not t
    assert (c.shape, c.dtype, c.device) == (t.shape, t.dtype, t.device)
    assert c.data_ptr != t.data_ptr
    np.testing.assert_array_equal(np.from_dlpack(c), a)
    np.from_dlpack(c)[...] = -1
    np.testing.assert_array_equal(a, np.arange(6.0).reshape(2, 3))


@pytest.mark.parametrize("make_copy", [copy.copy, copy.deepcopy], ids=["copy", "deepcopy"])
def test_a_copy_is_writable_as_numpy_s_copy_of_a_read_only_array_is(make_copy):
    a = np.arange(4.0)
    a.flags.writeable = False
    t = dlpx.from_dlpack(a)
    assert t.readonly
    c = make_copy(t)
    assert c.readonly == (not make_copy(a).flags.writeable) == False  # noqa: E712
    np.testing.assert_array_equal(np.from_dlpack(c), a)


def test_a_copy_of_a_strided_view_is_compact():
    view = np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]
    c = copy.copy(dlpx.from_dlpack(view))
    assert c.is_contiguous and c.strides == (2, 1)
    np.testing.assert_array_equal(np.from_dlpack(c), view)


def test_deepcopy_copies_a_tensor_once_however_often_a_structure_holds_it():
    t = dlpx.empty((2,), "int16")
    held = {"a": t, "b": [t]}
    copied = copy.deepcopy(held)
    assert copied["a"] is copied["b"][0] and copied["a"].data_ptr != t.data_ptr


def test_a_copy_of_a_subclass_instance_is_a_plain_tensor():
    # As dlpx.from_dlpack(x, copy=True) is: the copy is memory, not the subclass's attributes.
    t = Labelled(np.ones(2))
    assert type(copy.copy(t)) is dlpx.Tensor


# ---- module ---------------------------------------------------------------------------------


def test_module_metadata():
    assert dlpx.DLPACK_VERSION == (1, 3)
    assert isinstance(dlpx.__version__, str) and dlpx.__version__
    assert dlpx._native.Tensor is dlpx.Tensor
    for name in dlpx.__all__:
        assert hasattr(dlpx, name), name


@pytest.mark.parametrize("module", [dlpx, dlpx.cuda], ids=["dlpx", "dlpx.cuda"])
def test_dir_lists_the_public_api_alone(module):
    assert dir(module) == sorted(module.__all__)
    for helper in ("os", "sys", "ExtensionFileLoader", "_load_native", "_native", "annotations", "contextmanager"):
        assert helper not in dir(module)
    namespace = {}
    exec(f"from {module.__name__} import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(module.__all__)

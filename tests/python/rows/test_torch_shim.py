"""torch's view through its C shim (docs/design.md, "torch's view through its C shim"): a
kernel's writable view of a `torch.Tensor` is read through libtorch's `aoti_torch_get_*`
functions instead of torch's exchange table, and must be the view the table gives, field by
field, for every layout, dtype and subclass the shim reads; what it does not read (sparse,
meta, other dtypes, read-only views) is the table's, as before. Each test counts the views the
shim gave (`dlpx._native._served("torch_shim")`), so a shim that stopped serving fails them, and
compares with the table called directly, so one that read otherwise fails them too."""

import ctypes
import os

import c_build
import pytest
from dlpx.conform import abi
from dlpx.conform.abi import DlpxTensorView

import dlpx
from direct_reads import served, serves

torch = pytest.importorskip("torch")

_LIB = ctypes.PyDLL(dlpx.library_path())
for _name in ("dlpx_view_of", "dlpx_read_view_of"):
    getattr(_LIB, _name).argtypes = [ctypes.py_object, ctypes.POINTER(DlpxTensorView)]
_LIB.dlpx_view_release.argtypes = [ctypes.POINTER(DlpxTensorView)]
_LIB.dlpx_view_release.restype = None

REPO = c_build.REPO
# The tests that prove the shim served their views: expected to fail where DLPX_DIRECT_OFF
# switches torch's direct reads off (conftest.py).
shim_serves = pytest.mark.direct_read("torch")


def tables_view(t) -> dict:
    """What torch's own table (`dltensor_from_py_object_no_sync`) gives for `t`."""
    entry = abi.DLTensorFromPyObject(abi.exchange_table(torch.Tensor).dltensor_from_py_object_no_sync)
    out = abi.DLTensor()
    assert entry(t, ctypes.byref(out)) == 0
    return abi.describe(out)


def dlpx_view(t, entry="dlpx_view_of") -> dict:
    view = DlpxTensorView()
    assert getattr(_LIB, entry)(t, ctypes.byref(view)) == 0
    try:
        assert not view.owner, "a non-owning view"
        return abi.describe(view.tensor)
    finally:
        _LIB.dlpx_view_release(ctypes.byref(view))


def shims_view(t) -> dict:
    """dlpx's view of `t`, given by the shim: read twice first (the process's first torch tensor
    finds torch's functions; a pair of dtype and device is checked against the table on its first
    tensor, whose view is the table's)."""
    dlpx_view(t)
    dlpx_view(t)
    with serves("torch_shim", 1):
        return dlpx_view(t)


DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128]
DTYPES += [getattr(torch, name) for name in ("uint16", "uint32", "uint64") if hasattr(torch, name)]


@shim_serves
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_the_shim_reads_is_viewed_as_the_table_views_it(dtype):
    t = torch.zeros((2, 3), dtype=dtype)
    assert shims_view(t) == tables_view(t)


def base():
    return torch.arange(4 * 6 * 5, dtype=torch.float32).reshape(4, 6, 5)


LAYOUTS = {
    "contiguous": lambda: base(),
    "a 0-d tensor": lambda: torch.tensor(3.5),
    "an empty tensor": lambda: torch.empty((0, 3)),
    "an empty slice with an offset": lambda: base()[2:2],
    "transposed": lambda: base().transpose(0, 2),
    "sliced with a storage offset": lambda: base()[1:, 2:5:2, 3],
    "a scalar at an offset": lambda: base()[3, 5, 4],
    "broadcast (stride 0)": lambda: torch.arange(5.0).expand(4, 3, 5),
    "as_strided overlapping": lambda: torch.arange(64.0).as_strided((4, 4), (1, 3), 7),
    "channels last": lambda: torch.zeros((2, 3, 4, 5)).to(memory_format=torch.channels_last),
    "a view of an int64 storage": lambda: torch.arange(100).view(10, 10)[::3, 1::4],
    "a 64-dimensional tensor": lambda: torch.zeros((1,) * 64),
    "requires_grad off, a leaf's detach": lambda: torch.ones(3, requires_grad=True).detach(),
}


@shim_serves
@pytest.mark.parametrize("make", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_every_layout_is_viewed_as_the_table_views_it(make):
    t = make()
    assert shims_view(t) == tables_view(t)


@shim_serves
@pytest.mark.skipif(not torch.cuda.is_available() or torch.version.hip is not None, reason="needs a CUDA GPU")
@pytest.mark.parametrize("make", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_a_cuda_tensor_is_viewed_as_the_table_views_it(make):
    t = make().to("cuda")
    view = shims_view(t)
    assert view == tables_view(t)
    assert view["device"] == (2, t.device.index) and view["data"] == t.data_ptr()


@shim_serves
def test_the_view_is_the_tensors_memory_and_metadata():
    t = base()[1:, ::2, 1:4]
    view = shims_view(t)
    assert view["data"] == t.data_ptr() and view["byte_offset"] == 0
    assert view["shape"] == tuple(t.shape) and view["strides"] == tuple(t.stride())
    assert view["device"] == (1, 0) and view["dtype"] == (2, 32, 1)


@shim_serves
def test_a_copy_on_write_tensor_is_materialised_as_the_tables_writable_view_does():
    lazy_clone = getattr(torch, "_lazy_clone", None)
    if lazy_clone is None:
        pytest.skip("this torch has no _lazy_clone")
    dlpx_view(torch.zeros(4))  # the float32 CPU pair checked
    source = torch.arange(4.0)
    clone = lazy_clone(source)
    with serves("torch_shim", 1):
        view = dlpx_view(clone)
    assert view["data"] == clone.data_ptr() != source.data_ptr()
    assert tables_view(clone) == view


@shim_serves
def test_a_kernel_takes_torch_tensors_through_the_shim(tmp_path_factory):
    source = os.path.join(REPO, "examples", "kernel_library", "kernels.c")
    lib = dlpx.load_library(c_build.kernel_library(tmp_path_factory, "c", source, "dlpx_example_kernels"))
    xs = [torch.arange(16.0) for _ in range(8)]
    lib.nop(*xs)
    with serves("torch_shim", 8 * 3):
        for _ in range(3):
            assert lib.nop(*xs) is None


class Subclass(torch.Tensor):
    pass


SUBCLASSES = {
    "nn.Parameter": lambda: torch.nn.Parameter(torch.arange(6.0).reshape(2, 3)[:, 1:], requires_grad=False),
    "a Python subclass": lambda: torch.arange(6.0).reshape(3, 2).t().as_subclass(Subclass),
}


@shim_serves
@pytest.mark.parametrize("make", SUBCLASSES.values(), ids=SUBCLASSES.keys())
def test_a_subclass_is_viewed_as_the_table_views_it(make):
    t = make()
    assert shims_view(t) == tables_view(t)


class Wrapper(torch.Tensor):
    """A wrapper subclass (as DTensor and FakeTensor are): metadata without storage to read."""

    @staticmethod
    def __new__(cls, inner):
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise NotImplementedError(f"Wrapper does not run {func}")


def test_a_wrapper_subclass_without_storage_is_refused_as_before():
    wrapper = Wrapper(torch.ones(3))
    assert tables_view(wrapper)["data"] == 0  # torch's own view: no memory behind it
    for _ in range(3):
        with pytest.raises(BufferError, match="data is NULL for 3 elements"):
            dlpx_view(wrapper)
    assert dlpx_view(torch.ones(3))["shape"] == (3,)


NOT_READ = {
    "a float8 tensor": lambda: torch.zeros(3, dtype=torch.float8_e4m3fn),
    "a meta tensor": lambda: torch.empty(3, device="meta"),
}


@pytest.mark.parametrize("make", NOT_READ.values(), ids=NOT_READ.keys())
def test_what_the_shim_does_not_read_is_the_tables_answer(make):
    t = make()
    before = served("torch_shim")
    try:
        expected = tables_view(t)
    except Exception as exc:  # the table refuses it: so does dlpx, as it did before
        with pytest.raises(Exception) as refused:
            dlpx_view(t)
        assert type(refused.value) is not SystemError, exc
    else:
        assert dlpx_view(t) == expected
    assert served("torch_shim") == before


def test_a_sparse_tensor_is_refused_as_before():
    sparse = torch.eye(3).to_sparse()
    dlpx_view(torch.zeros(3))
    before = served("torch_shim")
    with pytest.raises((BufferError, TypeError, RuntimeError)):
        dlpx_view(sparse)
    assert served("torch_shim") == before


def test_a_read_only_view_is_not_the_shims():
    t = torch.zeros(3)
    dlpx_view(t)
    before = served("torch_shim")
    view = DlpxTensorView()
    assert _LIB.dlpx_read_view_of(t, ctypes.byref(view)) == 0
    _LIB.dlpx_view_release(ctypes.byref(view))
    assert served("torch_shim") == before


@shim_serves
def test_a_gradient_or_negated_tensor_is_still_refused_as_torchs_dlpack_refuses_it():
    dlpx_view(torch.zeros(3))
    with pytest.raises((BufferError, RuntimeError), match="grad"):
        dlpx_view(torch.ones(3, requires_grad=True))
    negated = torch.ones(3, dtype=torch.complex64).conj().imag
    with pytest.raises(BufferError, match="negative bit"):
        dlpx_view(negated)
    resolved = negated.resolve_neg()
    assert shims_view(resolved) == tables_view(resolved)

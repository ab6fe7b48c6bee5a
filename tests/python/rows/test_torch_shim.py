"""torch's view through its C shim (docs/design.md, "torch's view through its C shim"): a
kernel's writable view of a `torch.Tensor`, and an owning import of one (`from_dlpack`,
`dlpx_import`, holding the tensor), is read through libtorch's `aoti_torch_get_*`
functions instead of torch's exchange table, and must be the view the table gives, field by
field, for every layout and dtype the shim reads; what it does not read (subclasses, sparse,
meta, other dtypes, read-only views) is the table's, as before, and no rebinding of torch's
names makes it read another object as a tensor. Each test counts the views the
shim gave (`dlpx._native._served("torch_shim")`), so a shim that stopped serving fails them, and
compares with the table called directly, so one that read otherwise fails them too."""

import ctypes
import gc
import os
import sys

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
@pytest.mark.parametrize("make", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_an_import_through_the_shim_is_the_tensor_itself(make):
    t = make()
    dlpx.from_dlpack(t), dlpx.from_dlpack(t)  # the shim found, the pair checked
    with serves("torch_shim", 1):
        imported = dlpx.from_dlpack(t)
    back = torch.from_dlpack(imported)
    assert (back.data_ptr(), back.shape, back.stride(), back.dtype) == (t.data_ptr(), t.shape, t.stride(), t.dtype)
    assert torch.equal(back, t)


@shim_serves
def test_an_import_holds_the_tensor_until_it_goes():
    t = torch.arange(12.0).reshape(3, 4)[1:]
    dlpx.from_dlpack(t), dlpx.from_dlpack(t)
    held = sys.getrefcount(t)
    with serves("torch_shim", 1):
        imported = dlpx.from_dlpack(t)
    assert sys.getrefcount(t) == held + 1
    data, expected = t.data_ptr(), t.clone()
    del t
    gc.collect()
    back = torch.from_dlpack(imported)
    assert back.data_ptr() == data and torch.equal(back, expected)
    del back
    imported = None
    gc.collect()


@shim_serves
def test_dlpx_import_of_a_torch_tensor_is_read_through_the_shim_and_released_once():
    t = torch.arange(6, dtype=torch.int32)
    _LIB.dlpx_import.argtypes = [ctypes.py_object, ctypes.POINTER(ctypes.c_void_p)]
    out = ctypes.c_void_p()
    for _ in range(2):
        assert _LIB.dlpx_import(t, ctypes.byref(out)) == 0
        abi.call_deleter(out.value, abi.managed_at(out.value).deleter)
    held = sys.getrefcount(t)
    with serves("torch_shim", 1):
        assert _LIB.dlpx_import(t, ctypes.byref(out)) == 0
    got = abi.read_managed(out.value, True)
    assert (got["data"], got["shape"], got["strides"], got["flags"]) == (t.data_ptr(), (6,), (1,), 0)
    assert sys.getrefcount(t) == held + 1
    abi.call_deleter(out.value, abi.managed_at(out.value).deleter)
    assert sys.getrefcount(t) == held


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


@shim_serves
def test_a_parameter_is_viewed_as_the_table_views_it():
    weight = torch.nn.Parameter(torch.arange(6.0).reshape(2, 3)[:, 1:], requires_grad=False)
    assert shims_view(weight) == tables_view(weight)


class Subclass(torch.Tensor):
    pass


class Wrapper(torch.Tensor):
    """A wrapper subclass (as DTensor and FakeTensor are): metadata without storage, its sizes
    answered in Python (`__torch_dispatch__`)."""

    @staticmethod
    def __new__(cls):
        return torch.Tensor._make_wrapper_subclass(cls, (2, 3), strides=(3, 1), dtype=torch.float64,
                                                   dispatch_sizes_strides_policy="sizes")

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__.replace("sym_", "")
        answers = {"dim": 2, "size": (2, 3), "stride": (3, 1), "numel": 6, "storage_offset": 0}
        if name in answers:
            return answers[name]
        raise NotImplementedError(str(func))


SUBCLASSES = {
    "a Python subclass": lambda: torch.arange(6.0).reshape(3, 2).t().as_subclass(Subclass),
    "a wrapper subclass, its sizes in Python": Wrapper,
}


@pytest.mark.parametrize("make", SUBCLASSES.values(), ids=SUBCLASSES.keys())
def test_a_subclass_is_the_tables_to_read_not_the_shims(make):
    dlpx_view(torch.zeros(3)), dlpx_view(torch.zeros(3))
    t = make()
    before = served("torch_shim")
    expected = tables_view(t)
    if expected["data"] == 0:  # the wrapper: torch's own view has no memory behind it
        with pytest.raises(BufferError, match="data is NULL for 6 elements"):
            dlpx_view(t)
    else:
        assert dlpx_view(t) == expected
    assert served("torch_shim") == before


def run_fresh(code):
    """`code` in a new interpreter (the shim is found on the process's first torch tensor)."""
    import subprocess

    # This folder and the helpers' (conftest.py puts them on sys.path; a child has only its own).
    paths = [os.path.dirname(os.path.abspath(__file__)), os.path.dirname(os.path.abspath(c_build.__file__))]
    prelude = f"import sys\nsys.path[:0] = {paths!r}\n"
    prelude += "import test_torch_shim as T\nimport torch, dlpx\n"
    done = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout + done.stderr


def test_rebinding_torch_tensor_cannot_make_dlpx_read_another_object_as_a_tensor():
    returncode, out = run_fresh("""
class Plain:
    __slots__ = ("a",)
    __dlpack_c_exchange_api__ = torch.Tensor.__dlpack_c_exchange_api__
torch.Tensor = Plain
torch._C.TensorBase = object
x = torch.zeros(3)
T.dlpx_view(x), T.dlpx_view(x), T.dlpx_view(x)
p = Plain()
p.a = "a str where an at::Tensor would be"
try:
    T.dlpx_view(p)
except BufferError:
    print("refused", dlpx._native._served("torch_shim") > 0)
""")
    assert (returncode, out.strip()) == (0, "refused True")


def test_a_first_tensor_that_fakes_its_cdata_does_not_turn_the_shim_off():
    returncode, out = run_fresh("""
class Faked(torch.Tensor):
    @property
    def _cdata(self):
        return 12345
T.dlpx_view(torch.zeros(3).as_subclass(Faked))
T.dlpx_view(torch.zeros(3))
before = dlpx._native._served("torch_shim")
T.dlpx_view(torch.zeros(3))
print(dlpx._native._served("torch_shim") - before, dlpx._native._served("torch") > 0)
""")
    assert (returncode, out.strip()) == (0, "1 True")


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

"""A kernel's outputs in torch made through its C shim (docs/design.md, "torch's outputs through
its C shim"): allocated with `aoti_torch_empty_strided`, returned as a `torch.Tensor` with
`THPVariable_Wrap`, in place of torch's exchange table's allocator and `to_py`. The outputs must
be what the table's are (the same values, dtype, shape, device, compact strides, a plain
`torch.Tensor`), freed once whichever way the call ends, and an allocation the shim cannot make
must fail with torch's own error through the table. The tests count the outputs the shim made
(`dlpx._native._served("torch_outputs")`), so a shim that stopped serving fails them, and
compare with the same calls in an interpreter where torch's direct reads are off
(`DLPX_DIRECT_OFF=torch`: the table's outputs)."""

import ctypes
import gc
import json
import os
import subprocess
import sys
import threading

import c_build
import numpy as np
import pytest

import dlpx
from dlpx.conform import abi
from direct_reads import served, serves

torch = pytest.importorskip("torch")

REPO = c_build.REPO
shim_serves = pytest.mark.direct_read("torch")
DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64]


def built(tmp_path_factory, source, name):
    """A kernel library built as a user builds one, from `source` under the repository."""
    return c_build.kernel_library(tmp_path_factory, "c", os.path.join(REPO, source), name)


@pytest.fixture(scope="module")
def example_path(tmp_path_factory):
    return built(tmp_path_factory, "examples/kernel_library/kernels.c", "dlpx_example_kernels")


@pytest.fixture(scope="module")
def cases_path(tmp_path_factory):
    return built(tmp_path_factory, "c_tests/kernel_cases/kernel_cases.c", "kernel_cases")


@pytest.fixture(scope="module")
def lib(example_path):
    return dlpx.load_library(example_path)


@pytest.fixture(scope="module")
def cases(cases_path):
    return dlpx.load_library(cases_path)


def operands(dtype, shape):
    """Two tensors of `shape` and `dtype`, the second not compact where it has two dimensions."""
    n = int(np.prod(shape)) if shape else 1
    a = torch.arange(n, dtype=dtype).reshape(shape)
    b = (torch.arange(n, dtype=dtype) * 3).reshape(shape)
    if len(shape) == 2:
        b = b.t().contiguous().t()
    return a, b


def described(t) -> dict:
    return {"type": type(t).__name__, "dtype": str(t.dtype), "shape": list(t.shape), "strides": list(t.stride()),
            "device": str(t.device), "values": t.tolist(), "requires_grad": t.requires_grad}


SHAPES = [(16,), (), (0,), (3, 5), (2, 0, 4), (1, 1, 7), (2, 1, 3, 1, 1, 2, 1, 2)]  # 8-d: a block of its own size


@shim_serves
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_an_output_is_a_plain_compact_torch_tensor_holding_the_sum(lib, dtype, shape):
    a, b = operands(dtype, shape)
    lib.add(a, b)  # the process's first torch call finds torch's functions
    with serves("torch_outputs", 1):
        out = lib.add(a, b)
    assert type(out) is torch.Tensor and out.dtype == dtype and out.shape == a.shape
    assert out.is_contiguous() and out.device == a.device and not out.requires_grad
    assert torch.equal(out, a + b)
    # Its own memory: not an input's, and torch's own storage (the table's is a DLPack import's).
    if out.numel():
        assert out.data_ptr() not in (a.data_ptr(), b.data_ptr())
    out.add_(1)
    assert torch.equal(out, a + b + 1)


def run(code, env=None):
    """`code` in a new interpreter (torch's functions are found on its first torch tensor)."""
    paths = [os.path.dirname(os.path.abspath(c_build.__file__))]
    prelude = f"import sys\nsys.path[:0] = {paths!r}\nimport json, torch, dlpx\n"
    done = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **(env or {})))
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@shim_serves
def test_the_shim_s_outputs_are_the_table_s(example_path):
    # The same calls with torch's direct reads on and off (its table's allocator and to_py): the
    # same tensors, field by field.
    code = f"""
import test_torch_outputs as T
lib = dlpx.load_library({example_path!r})
got = []
for dtype in T.DTYPES:
    for shape in T.SHAPES:
        got.append(T.described(lib.add(*T.operands(dtype, shape))))
print(json.dumps([got, dlpx._native._served("torch_outputs")]))
"""
    here = os.path.dirname(os.path.abspath(__file__))
    code = f"sys.path.insert(0, {here!r})\n" + code
    (on, on_served), (off, off_served) = json.loads(run(code)), json.loads(run(code, {"DLPX_DIRECT_OFF": "torch"}))
    assert on_served == len(DTYPES) * len(SHAPES) and off_served == 0
    assert on == off


def test_an_output_torch_cannot_allocate_is_torch_s_memory_error_through_the_table(cases, cases_path):
    # 128 TiB: the shim fails, and the table, asked instead, says why in torch's words.
    with pytest.raises(MemoryError, match=r"^dlpx: huge: output: ") as shim:
        cases.huge(torch.ones(1))
    out = run(f"""
lib = dlpx.load_library({cases_path!r})
try:
    lib.huge(torch.ones(1))
except MemoryError as e:
    print(str(e))
""", {"DLPX_DIRECT_OFF": "torch"})
    assert str(shim.value) == out.strip()


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_outputs_returned_dropped_or_failed_after_are_freed(lib, cases):
    # 4 MiB each: 300 calls of each kind kept would be 3.5 GiB.
    a = torch.ones(1 << 20)
    for _ in range(20):
        lib.add(a, a), cases.allocate_and_drop(a)
    before = rss()
    for _ in range(300):
        del_me = lib.add(a, a)
        del del_me
        assert cases.allocate_and_drop(a) is None
        with pytest.raises(ValueError, match="failed after allocating"):
            cases.allocate_then_fail(a)
    assert rss() - before < 64 << 20


def test_an_output_outlives_its_call_and_its_inputs(lib):
    a, b = torch.arange(8.0), torch.ones(8)
    out = lib.add(a, b)
    view = out[2:]
    del a, b, out
    gc.collect()
    assert view.tolist() == [3.0, 4.0, 5.0, 6.0, 7.0, 8.0]


@shim_serves
def test_outputs_are_made_on_threads_at_once(lib):
    # A kernel that releases the GIL allocates without it: the shim's allocator on 4 threads.
    a, b = operands(torch.float32, (64, 33))
    expected = a + b
    failures = []

    def work():
        try:
            for _ in range(200):
                if not torch.equal(lib.add(a, b), expected):
                    failures.append("a wrong sum")
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(repr(e))

    before = served("torch_outputs")
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    # The count is the process's where a GIL serialises it (each thread's own on a free-threaded
    # interpreter, where this thread made none).
    if getattr(sys, "_is_gil_enabled", lambda: True)():
        assert served("torch_outputs") - before == 800


def test_a_framework_other_than_torch_is_not_served_by_it(lib):
    before = served("torch_outputs")
    out = lib.add(np.ones(4, np.float32), np.ones(4, np.float32))
    assert type(out) is np.ndarray and served("torch_outputs") == before


# The C API for CPython-extension authors allocates and hands back the same way as the loader
# (`dlpx_allocate_like`, `dlpx_to_py_like`: the torch row's output allocator and way back).

_SET_ERROR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)


@pytest.fixture(scope="module")
def c_api():
    return c_api_library()


def c_api_library():
    lib = ctypes.PyDLL(dlpx.library_path())
    lib.dlpx_allocate_like.argtypes = [ctypes.py_object, ctypes.POINTER(abi.DLTensor), ctypes.POINTER(ctypes.c_void_p),
                                       ctypes.c_void_p, _SET_ERROR]
    lib.dlpx_to_py_like.argtypes = [ctypes.py_object, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
    return lib


def allocate_like(c_api, like, shape):
    """A float32 output of `shape` allocated like `like` through the C API: its managed tensor."""
    out = ctypes.c_void_p()
    assert c_api.dlpx_allocate_like(like, ctypes.byref(abi.prototype(shape)), ctypes.byref(out), None,
                                    _SET_ERROR()) == 0
    return abi.DLManagedTensorVersioned.from_address(out.value), out.value


def fill(managed, values):
    """Writes `values` (float32) into the output's memory, as a kernel would."""
    data = (ctypes.c_float * len(values)).from_address(managed.dl_tensor.data + managed.dl_tensor.byte_offset)
    data[:] = values


def to_py_like(c_api, like, address):
    out = ctypes.c_void_p()
    assert c_api.dlpx_to_py_like(like, address, ctypes.byref(out)) == 0
    return ctypes.cast(out.value, ctypes.py_object).value, out.value


def adopt(pair):
    """The object `dlpx_to_py_like` gave (a new reference, which ctypes' py_object does not own)."""
    obj, address = pair
    ctypes.pythonapi.Py_DecRef(ctypes.c_void_p(address))
    return obj


@shim_serves
def test_allocate_like_and_to_py_like_give_the_shim_s_torch_tensor(c_api):
    like = torch.zeros(2)
    managed, address = allocate_like(c_api, like, (3, 4))
    assert managed.dl_tensor.byte_offset == 0 and [managed.dl_tensor.strides[i] for i in range(2)] == [4, 1]
    fill(managed, [float(i) for i in range(12)])
    with serves("torch_outputs", 1):
        out = adopt(to_py_like(c_api, like, address))
    assert type(out) is torch.Tensor and out.dtype == torch.float32 and out.shape == (3, 4) and out.is_contiguous()
    assert torch.equal(out, torch.arange(12.0).reshape(3, 4))
    out.add_(1)
    assert out[2, 3].item() == 12.0


@shim_serves
def test_the_c_api_finds_the_shim_when_no_torch_tensor_was_read_before():
    # An extension's first call: dlpx has read no torch tensor yet, so `like` decides.
    here = os.path.dirname(os.path.abspath(__file__))
    code = f"""
sys.path.insert(0, {here!r})
import test_torch_outputs as T
lib = T.c_api_library()
like = torch.zeros(2)
out = T.adopt(T.to_py_like(lib, like, T.allocate_like(lib, like, (2, 3))[1]))
print(json.dumps([list(out.shape), dlpx._native._served("torch_outputs")]))
"""
    assert json.loads(run(code)) == [[2, 3], 1]


def _as_12_values(managed):
    """The (3, 4) output described anew as 12 values: the caller's own shape and strides."""
    flat, unit = (ctypes.c_int64 * 1)(12), (ctypes.c_int64 * 1)(1)
    managed.dl_tensor.ndim = 1
    managed.dl_tensor.shape = ctypes.cast(flat, ctypes.POINTER(ctypes.c_int64))
    managed.dl_tensor.strides = ctypes.cast(unit, ctypes.POINTER(ctypes.c_int64))
    managed._keep = (flat, unit)  # noqa: SLF001 - the arrays live until the tensor is imported
    return (12,), list(range(12))


def _first_two_rows_in_place(managed):
    """The shape written where the header points (the block's copy, not torch's sizes)."""
    managed.dl_tensor.shape[0] = 2
    return (2, 4), list(range(8))


def _read_only(managed):
    managed.flags |= 1  # DLPACK_FLAG_BITMASK_READ_ONLY
    return (3, 4), list(range(12))


@shim_serves
@pytest.mark.parametrize("edit", [_as_12_values, _first_two_rows_in_place, _read_only], ids=lambda f: f.__name__[1:])
def test_a_header_the_caller_changed_is_handed_back_as_it_says(c_api, edit):
    # An extension author may describe the memory anew before handing it back: the tensor is
    # what the header says, through torch's table, not the `at::Tensor` the shim made.
    like = torch.zeros(2)
    with serves("torch_outputs", 1):  # an unchanged output is the shim's (so this one is too)
        adopt(to_py_like(c_api, like, allocate_like(c_api, like, (3, 4))[1]))
    managed, address = allocate_like(c_api, like, (3, 4))
    fill(managed, [float(i) for i in range(12)])
    shape, values = edit(managed)
    before = served("torch_outputs")
    out = adopt(to_py_like(c_api, like, address))
    assert served("torch_outputs") == before
    assert type(out) is torch.Tensor and out.shape == shape
    assert out.flatten().tolist() == [float(v) for v in values]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_c_api_outputs_handed_back_or_deleted_are_freed(c_api):
    # 4 MiB each: 300 of each kept would be 2.3 GiB.
    like = torch.zeros(2)
    for _ in range(20):
        managed, address = allocate_like(c_api, like, (1 << 20,))
        abi.call_deleter(address, managed.deleter)
    before = rss()
    for _ in range(300):
        managed, address = allocate_like(c_api, like, (1 << 20,))
        abi.call_deleter(address, managed.deleter)
        out = adopt(to_py_like(c_api, like, allocate_like(c_api, like, (1 << 20,))[1]))
        assert out.shape == (1 << 20,)
        del out
    assert rss() - before < 64 << 20

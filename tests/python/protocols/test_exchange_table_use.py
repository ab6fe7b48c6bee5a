"""Proof that the exchange tables are used, not the Python protocol: tvm_ffi imports dlpx tensors
through dlpx's table (tvm_ffi reads `__dlpack_c_exchange_api__` from the object and calls
`managed_tensor_from_py_object_no_sync`, falling back to `__dlpack__()` only on BufferError),
and dlpx imports torch tensors through torch's. Each proof uses a subclass whose `__dlpack__`
raises (or counts its calls): the protocol path would fail, the table path does not."""

import ctypes

import numpy as np
import pytest
torch = pytest.importorskip("torch")  # not on the free-threaded interpreters
tvm_ffi = pytest.importorskip("tvm_ffi")

from dlpx.conform import abi
import dlpx

_KEEP = []  # fake table headers must outlive every cache that may remember them


class NoProtocolDlpx(dlpx.Tensor):
    def __dlpack__(self, **kwargs):
        raise RuntimeError("NoProtocolDlpx.__dlpack__ was called")


class NoProtocolTorch(torch.Tensor):
    def __dlpack__(self, *args, **kwargs):
        raise RuntimeError("NoProtocolTorch.__dlpack__ was called")


class CountingTorch(torch.Tensor):
    protocol_calls = 0

    def __dlpack__(self, *args, **kwargs):
        type(self).protocol_calls += 1
        return super().__dlpack__(*args, **kwargs)


def no_protocol_dlpx(values=(1.0, 2.0, 3.0)):
    return NoProtocolDlpx(np.array(values, dtype=np.float32))


# ---- tvm_ffi -> dlpx's table ---------------------------------------------------------------------


def test_the_subclass_protocol_really_fails():
    with pytest.raises(RuntimeError, match="NoProtocolDlpx"):
        np.from_dlpack(no_protocol_dlpx())
    with pytest.raises(RuntimeError, match="NoProtocolTorch"):
        np.from_dlpack(torch.arange(3.0).as_subclass(NoProtocolTorch))


def test_tvm_ffi_from_dlpack_goes_through_dlpx_table():
    t = no_protocol_dlpx()
    x = tvm_ffi.from_dlpack(t)
    assert x.data_ptr() == t.data_ptr
    np.testing.assert_array_equal(np.from_dlpack(x), [1.0, 2.0, 3.0])


def test_tvm_ffi_functions_take_dlpx_tensors_through_the_table_and_return_dlpx_tensors():
    echo = tvm_ffi.get_global_func("testing.echo")
    t = no_protocol_dlpx()
    result = echo(t)
    # The argument went in through managed_tensor_from_py_object_no_sync, the result came
    # back through managed_tensor_to_py_object_no_sync: a dlpx.Tensor on the same memory.
    assert type(result) is dlpx.Tensor
    assert result.data_ptr == t.data_ptr
    assert result.shape == t.shape
    assert result.dtype == "float32"


def test_tensors_inside_tvm_ffi_containers_come_back_as_dlpx_tensors():
    make_array = tvm_ffi.get_global_func("testing.make_array_with_tensor")
    t = dlpx.empty((2, 2), "int32")
    (inner,) = list(make_array(t))
    assert type(inner) is dlpx.Tensor
    assert inner.data_ptr == t.data_ptr


# ---- dlpx -> torch's table -----------------------------------------------------------------------


def test_dlpx_from_dlpack_goes_through_torch_table():
    base = torch.arange(4.0)
    t = base.as_subclass(NoProtocolTorch)
    d = dlpx.from_dlpack(t)
    assert d.data_ptr == base.data_ptr()
    np.testing.assert_array_equal(np.from_dlpack(d), [0.0, 1.0, 2.0, 3.0])


def test_a_subclass_that_unsets_the_inherited_table_is_read_through_its_own_dlpack():
    # The table is looked up on the type (DLPack 1.3), inherited included: a subclass whose
    # __dlpack__ exports otherwise opts out of its base's table by setting it to None.
    class Sevens(torch.Tensor):
        __dlpack_c_exchange_api__ = None

        def __dlpack__(self, *args, **kwargs):
            return torch.full((3,), 7.0).__dlpack__(*args, **kwargs)

    t = torch.arange(3.0).as_subclass(Sevens)
    assert np.from_dlpack(dlpx.from_dlpack(t)).tolist() == [7.0, 7.0, 7.0]
    address = ctypes.pythonapi.PyCapsule_GetPointer
    address.restype, address.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    tables = [address(dlpx.exchange_api_of(x), b"dlpack_exchange_api") for x in (t, torch.arange(3.0))]
    assert tables[0] != tables[1], "the subclass's table is dlpx's synthetic one, not torch's"
    assert dlpx.exchange_api_info(type(t)) is None, "it publishes none"


def test_dlpx_tensor_constructor_goes_through_torch_table():
    base = torch.arange(6, dtype=torch.int16).reshape(2, 3)
    d = dlpx.Tensor(base.as_subclass(NoProtocolTorch))
    assert d.data_ptr == base.data_ptr()
    assert d.shape == (2, 3)


def test_dlpx_never_calls_torch_dunder_dlpack():
    CountingTorch.protocol_calls = 0
    t = torch.arange(3.0).as_subclass(CountingTorch)
    for _ in range(5):
        dlpx.from_dlpack(t)
    assert CountingTorch.protocol_calls == 0
    np.from_dlpack(t)  # control: numpy does call it
    assert CountingTorch.protocol_calls == 1


def test_dlpx_goes_through_a_third_party_table():
    class NoProtocolWrapper(tvm_ffi.core.DLTensorTestWrapper):
        def __dlpack__(self, **kwargs):
            raise RuntimeError("NoProtocolWrapper.__dlpack__ was called")

    t = dlpx.empty((3,), "float64")
    wrapped = NoProtocolWrapper(tvm_ffi.from_dlpack(t))
    assert dlpx.from_dlpack(wrapped).data_ptr == t.data_ptr


def test_dlpx_reaches_a_table_through_the_int_attribute():
    class IntOnly:
        __c_dlpack_exchange_api__ = dlpx.Tensor.__c_dlpack_exchange_api__

        def __dlpack__(self, **kwargs):
            raise RuntimeError("IntOnly.__dlpack__ was called")

    # dlpx's own table refuses an object that is not a dlpx.Tensor: the error proves the table,
    # found through the int attribute, was called instead of __dlpack__.
    with pytest.raises(TypeError, match=r"managed_tensor_from_py_object_no_sync: expected a dlpx.Tensor"):
        dlpx.from_dlpack(IntOnly())


# ---- the prev_api chain (docs/design.md R8) -----------------------------------------------------------------


def publishing(base, head_address):
    capsule = abi.new_capsule(head_address, b"dlpack_exchange_api")
    _KEEP.append(capsule)
    return type(base.__name__ + "Chained", (base,), {"__dlpack_c_exchange_api__": capsule})


def v2_header(prev):
    header = abi.DLPackExchangeAPIHeader()
    header.version = abi.DLPackVersion(2, 0)
    header.prev_api = prev
    _KEEP.append(header)
    return header


def test_dlpx_walks_a_chain_to_torch_v1_table():
    head = v2_header(abi.exchange_table_address(torch.Tensor)[0])
    Chained = publishing(NoProtocolTorch, abi.ctypes.addressof(head))
    base = torch.arange(5.0)
    d = dlpx.from_dlpack(base.as_subclass(Chained))
    assert d.data_ptr == base.data_ptr()


def test_a_producer_with_no_v1_table_is_still_imported_through_its_protocol():
    # A producer that has moved on to a table major dlpx does not know still speaks
    # __dlpack__: the importer must not give up on it.
    Chained = publishing(CountingTorch, abi.ctypes.addressof(v2_header(None)))
    Chained.protocol_calls = 0  # counted on type(self), the subclass
    base = torch.arange(3.0)
    d = dlpx.from_dlpack(base.as_subclass(Chained))
    assert d.data_ptr == base.data_ptr()
    assert Chained.protocol_calls == 1


def test_a_cyclic_chain_does_not_hang():
    head = v2_header(None)
    head.prev_api = abi.ctypes.addressof(head)
    Chained = publishing(CountingTorch, abi.ctypes.addressof(head))
    try:
        d = dlpx.from_dlpack(torch.arange(3.0).as_subclass(Chained))
    except BufferError as err:
        assert str(err).startswith("dlpx: ") and "cycle" in str(err)
    else:
        assert d.shape == (3,)

"""Ruling 1: dlpx.Tensor publishes its exchange table as the capsule `__dlpack_c_exchange_api__`
and as the integer `__c_dlpack_exchange_api__`; `dlpx.exchange_api_info` reports what any type
publishes (R8: the prev_api chain)."""

import ctypes

import pytest
torch = pytest.importorskip("torch")  # not on the free-threaded interpreters
tvm_ffi = pytest.importorskip("tvm_ffi")

from dlpx.conform import abi
import dlpx

ENTRIES = (
    "managed_tensor_allocator",
    "managed_tensor_from_py_object_no_sync",
    "managed_tensor_to_py_object_no_sync",
    "dltensor_from_py_object_no_sync",
    "current_work_stream",
)

# Fake chain headers must outlive every cache that may remember them.
_KEEP = []


def header_chain(*versions, tail=None, cycle=False):
    """Headers linked head -> ... -> last -> tail (an address or None); returns the head address.
    With cycle=True the last header points back to the head."""
    headers = [abi.DLPackExchangeAPIHeader() for _ in versions]
    _KEEP.append(headers)
    for header, (major, minor) in zip(headers, versions):
        header.version = abi.DLPackVersion(major, minor)
    for header, nxt in zip(headers, headers[1:]):
        header.prev_api = ctypes.addressof(nxt)
    headers[-1].prev_api = ctypes.addressof(headers[0]) if cycle else tail
    return ctypes.addressof(headers[0])


def class_publishing_capsule(address, name=b"dlpack_exchange_api", base=object):
    capsule = abi.new_capsule(address, name)
    _KEEP.append(capsule)
    return type("Publisher", (base,), {"__dlpack_c_exchange_api__": capsule})


# ---- the attributes ----------------------------------------------------------------------------


def test_capsule_attribute_is_named_dlpack_exchange_api():
    capsule = dlpx.Tensor.__dlpack_c_exchange_api__
    assert abi.is_capsule(capsule)
    assert abi.capsule_name(capsule) == b"dlpack_exchange_api"
    assert abi.exchange_table_address(dlpx.Tensor)[0] != 0


def test_int_attribute_is_the_same_table_address():
    address = dlpx.Tensor.__c_dlpack_exchange_api__
    assert type(address) is int
    assert address == abi.exchange_table_address(dlpx.Tensor)[0]
    assert address == dlpx._native._exchange_api_address


def test_attributes_are_on_the_type_and_seen_from_instances():
    t = dlpx.empty((1,))
    assert "__dlpack_c_exchange_api__" in vars(dlpx.Tensor)
    assert "__c_dlpack_exchange_api__" in vars(dlpx.Tensor)
    assert t.__dlpack_c_exchange_api__ is dlpx.Tensor.__dlpack_c_exchange_api__
    assert t.__c_dlpack_exchange_api__ == dlpx.Tensor.__c_dlpack_exchange_api__


def test_table_header_is_version_1_3_and_ends_the_chain():
    table = abi.exchange_table(dlpx.Tensor)
    assert (table.header.version.major, table.header.version.minor) == (1, 3)
    assert table.header.prev_api is None  # R8: no older major exists


@pytest.mark.parametrize("entry", ENTRIES)
def test_every_table_entry_is_set(entry):
    assert getattr(abi.exchange_table(dlpx.Tensor), entry)


def test_table_address_is_process_lifetime_and_stable():
    first = abi.exchange_table_address(dlpx.Tensor)[0]
    for _ in range(3):
        dlpx.empty((2,))
    assert abi.exchange_table_address(dlpx.Tensor)[0] == first
    assert dlpx.Tensor.__c_dlpack_exchange_api__ == first


# ---- exchange_api_info -------------------------------------------------------------------------


def check_info_matches_table(info, cls_or_address, attribute):
    address = cls_or_address if isinstance(cls_or_address, int) else abi.exchange_table_address(cls_or_address)[0]
    table = abi.DLPackExchangeAPI.from_address(address)
    assert info["attribute"] == attribute
    assert info["version"] == (table.header.version.major, table.header.version.minor)
    assert info["chain_end"] == "end"
    assert info["selected"] == 0
    assert len(info["chain"]) == 1
    link = info["chain"][0]
    assert link["address"] == address
    assert link["version"] == info["version"]
    assert link["entries"] == {name: bool(getattr(table, name)) for name in ENTRIES}


def test_info_for_dlpx_tensor():
    info = dlpx.exchange_api_info(dlpx.Tensor)
    check_info_matches_table(info, dlpx.Tensor, "__dlpack_c_exchange_api__")
    assert info["version"] == (1, 3)
    assert all(info["chain"][0]["entries"].values())


def test_info_for_a_dlpx_instance_is_that_of_its_type():
    assert dlpx.exchange_api_info(dlpx.empty((2,))) == dlpx.exchange_api_info(dlpx.Tensor)


def test_info_for_torch_tensor_and_instance():
    info = dlpx.exchange_api_info(torch.Tensor)
    check_info_matches_table(info, torch.Tensor, "__dlpack_c_exchange_api__")
    assert dlpx.exchange_api_info(torch.zeros(2)) == info


def test_info_for_a_third_party_table_with_empty_entries():
    # tvm_ffi's test wrapper publishes a table whose allocator and DLTensor view are NULL.
    wrapper = tvm_ffi.core.DLTensorTestWrapper(tvm_ffi.from_dlpack(dlpx.empty((2,))))
    info = dlpx.exchange_api_info(wrapper)
    check_info_matches_table(info, type(wrapper), "__dlpack_c_exchange_api__")
    assert not info["chain"][0]["entries"]["managed_tensor_allocator"]
    assert info["chain"][0]["entries"]["managed_tensor_from_py_object_no_sync"]


def test_info_for_a_class_with_only_the_int_attribute():
    class IntOnly:
        __c_dlpack_exchange_api__ = dlpx.Tensor.__c_dlpack_exchange_api__

    info = dlpx.exchange_api_info(IntOnly)
    check_info_matches_table(info, dlpx.Tensor.__c_dlpack_exchange_api__, "__c_dlpack_exchange_api__")
    assert dlpx.exchange_api_info(IntOnly()) == info


def test_info_for_a_class_with_only_the_capsule():
    class CapsuleOnly:
        __dlpack_c_exchange_api__ = torch.Tensor.__dlpack_c_exchange_api__

    info = dlpx.exchange_api_info(CapsuleOnly)
    check_info_matches_table(info, torch.Tensor, "__dlpack_c_exchange_api__")


def test_capsule_is_read_before_the_int():
    class Both:
        __dlpack_c_exchange_api__ = torch.Tensor.__dlpack_c_exchange_api__
        __c_dlpack_exchange_api__ = dlpx.Tensor.__c_dlpack_exchange_api__

    info = dlpx.exchange_api_info(Both)
    assert info["attribute"] == "__dlpack_c_exchange_api__"
    assert info["chain"][0]["address"] == abi.exchange_table_address(torch.Tensor)[0]


@pytest.mark.parametrize("thing", [type("Neither", (), {}), object(), 3, int, "text", None, [1, 2]])
def test_info_for_something_that_publishes_nothing_is_none(thing):
    assert dlpx.exchange_api_info(thing) is None


def test_info_walks_the_prev_api_chain_to_the_v1_table():
    dlpx_table = dlpx.Tensor.__c_dlpack_exchange_api__
    head = header_chain((3, 0), (2, 5), tail=dlpx_table)
    info = dlpx.exchange_api_info(class_publishing_capsule(head))
    assert info["version"] == (3, 0)
    assert [link["version"] for link in info["chain"]] == [(3, 0), (2, 5), (1, 3)]
    assert [link["address"] for link in info["chain"]][-1] == dlpx_table
    assert info["selected"] == 2
    assert info["chain_end"] == "end"
    assert "entries" not in info["chain"][0]  # an unknown major's table is not read past its header


def test_info_reports_a_chain_without_a_v1_table():
    info = dlpx.exchange_api_info(class_publishing_capsule(header_chain((2, 0))))
    assert info["selected"] is None
    assert info["chain_end"] == "end"


def test_info_reports_a_cyclic_chain():
    info = dlpx.exchange_api_info(class_publishing_capsule(header_chain((2, 0), (3, 0), cycle=True)))
    assert info["chain_end"] == "cycle"
    assert info["selected"] is None
    assert len(info["chain"]) == 2


def test_info_reports_an_overlong_chain():
    info = dlpx.exchange_api_info(class_publishing_capsule(header_chain(*[(2, i) for i in range(40)])))
    assert info["chain_end"] == "too long"
    assert 1 <= len(info["chain"]) < 40


# ---- malformed attributes ----------------------------------------------------------------------


def test_info_rejects_a_zero_address():
    class Zero:
        __c_dlpack_exchange_api__ = 0

    with pytest.raises(TypeError, match=r"^dlpx: exchange_api_info: .*__c_dlpack_exchange_api__"):
        dlpx.exchange_api_info(Zero)


@pytest.mark.parametrize("address", [-1, -(2**63), 2**63, 2**64 - 1, 2**64])
def test_an_address_that_is_no_table_s_is_refused_not_read(address):
    # -1 was read as 0xffff...ffff (a crash); user space never reaches past int64.
    source = dlpx.empty((3,), "float32")

    class Odd:
        __c_dlpack_exchange_api__ = address

        def __dlpack__(self, **kwargs):
            return source.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(TypeError, match=r"__c_dlpack_exchange_api__ must be a positive integer address"):
        dlpx.exchange_api_info(Odd)
    # An import falls back to the protocol, as for any malformed attribute.
    assert dlpx.from_dlpack(Odd()).data_ptr == source.data_ptr


def test_info_rejects_a_capsule_with_the_wrong_name():
    Publisher = class_publishing_capsule(dlpx.Tensor.__c_dlpack_exchange_api__, name=b"not_the_api")
    with pytest.raises(TypeError, match=r"^dlpx: exchange_api_info: .*dlpack_exchange_api"):
        dlpx.exchange_api_info(Publisher)


def test_info_rejects_a_non_capsule_attribute():
    class NotACapsule:
        __dlpack_c_exchange_api__ = 1234

    with pytest.raises(TypeError, match=r"^dlpx: exchange_api_info: "):
        dlpx.exchange_api_info(NotACapsule)


def test_an_object_whose_only_table_is_of_another_major_is_refused_saying_so():
    # A producer that moved on to a new major and speaks nothing else: dlpx reads none of it,
    # and its error says why rather than "no exchange table".
    newer = abi.DLPackExchangeAPI()
    newer.header.version.major, newer.header.version.minor = 2, 0

    class Newer:
        __c_dlpack_exchange_api__ = ctypes.addressof(newer)

    expected = r"its exchange table is not one dlpx reads: no table of major version 1 in the prev_api chain \(majors \[2\]\)"
    with pytest.raises(TypeError, match=r"^dlpx: from_dlpack: .*Newer does not support DLPack \(no __dlpack__, and " + expected):
        dlpx.from_dlpack(Newer())

    class Plain:
        pass

    with pytest.raises(TypeError, match=r"Plain does not support DLPack \(no __dlpack__, and no exchange table\)"):
        dlpx.from_dlpack(Plain())
